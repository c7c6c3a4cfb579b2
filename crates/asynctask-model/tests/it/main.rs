//! Integration tests of the model's public API: invariants over arbitrary
//! transition sequences and serde round-trips of arbitrary values.

use asynctask_model::arbitrary::{Transition, task_info};
use asynctask_model::{
    AsyncTaskInfo, AsyncTaskStatus, MaxAsyncTasks, OutputObject, TerminateReason, Todo,
};
use pretty_assertions::assert_eq;
use proptest::prelude::*;

/// The invariants every reachable task obeys.
fn assert_well_formed(task: &AsyncTaskInfo) {
    match task.status {
        AsyncTaskStatus::Queued | AsyncTaskStatus::Running => {
            assert_eq!(
                (
                    task.completed_at,
                    task.notified_at,
                    &task.output,
                    &task.error
                ),
                (None, None, &None, &None)
            );
            assert_eq!(
                task.started_at.is_some(),
                task.status == AsyncTaskStatus::Running,
                "a running task started, a queued one did not"
            );
            assert!(task.started_at.is_none_or(|at| at >= task.launched_at));
        }
        status => {
            let completed_at = task.completed_at.expect("terminal task has completed_at");
            assert!(completed_at >= task.launched_at);
            assert_eq!(task.output.is_some(), status == AsyncTaskStatus::Completed);
            assert_eq!(task.error.is_some(), status == AsyncTaskStatus::Failed);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_sequence_leaves_a_terminal_state_or_changes_a_terminal_task(
        mut task in task_info(),
        steps in prop::collection::vec(any::<Transition>(), 0..12),
    ) {
        assert_well_formed(&task);
        let mut now = task.completed_at.unwrap_or(task.launched_at);
        for step in steps {
            now += 1;
            let before = task.clone();
            let changed = step.apply(&mut task, now);
            prop_assert_eq!(changed, task != before, "the return value says whether it changed");
            assert_well_formed(&task);
            if before.status.is_terminal() {
                prop_assert_eq!(task.status, before.status);
                prop_assert_eq!(task.completed_at, before.completed_at);
                prop_assert_eq!(&task.output, &before.output);
                prop_assert_eq!(&task.error, &before.error);
            }
            if !matches!(step, Transition::MarkNotified) && before.status.is_terminal() {
                prop_assert!(!changed, "a terminal transition on a terminal task is refused");
            }
            if before.status == AsyncTaskStatus::Queued
                && matches!(step, Transition::Complete(_) | Transition::Fail(_))
            {
                prop_assert!(!changed, "a task that never ran cannot complete or fail");
            }
        }
    }

    #[test]
    fn notified_at_is_set_at_most_once(
        mut task in task_info(),
        steps in prop::collection::vec(any::<Transition>(), 0..12),
    ) {
        let mut now = task.completed_at.unwrap_or(task.launched_at);
        let mut first_notified = task.notified_at;
        for step in steps {
            now += 1;
            step.apply(&mut task, now);
            match (first_notified, task.notified_at) {
                (Some(first), current) => prop_assert_eq!(current, Some(first)),
                (None, Some(set)) => {
                    prop_assert!(task.status.is_terminal());
                    first_notified = Some(set);
                }
                (None, None) => {}
            }
        }
    }

    #[test]
    fn task_info_round_trips_through_json(task in any::<AsyncTaskInfo>()) {
        let json = serde_json::to_string(&task).unwrap();
        prop_assert_eq!(serde_json::from_str::<AsyncTaskInfo>(&json).unwrap(), task);
    }

    #[test]
    fn output_round_trips_through_json(output in any::<OutputObject>()) {
        let json = serde_json::to_value(&output).unwrap();
        prop_assert_eq!(json.get("final_message").is_some(), output.final_message.is_some());
        prop_assert_eq!(serde_json::from_value::<OutputObject>(json).unwrap(), output);
    }

    #[test]
    fn todo_round_trips_through_json(todo in any::<Todo>()) {
        let json = serde_json::to_string(&todo).unwrap();
        prop_assert_eq!(serde_json::from_str::<Todo>(&json).unwrap(), todo);
    }

    #[test]
    fn max_async_tasks_round_trips_and_rejects_out_of_range(max in any::<MaxAsyncTasks>(), raw in any::<i64>()) {
        let json = serde_json::to_string(&max).unwrap();
        prop_assert_eq!(serde_json::from_str::<MaxAsyncTasks>(&json).unwrap(), max);
        prop_assert_eq!(MaxAsyncTasks::new(raw).is_ok(), raw == -1 || (1..=100).contains(&raw));
        prop_assert!(max.history_limit() >= 2);
    }
}

#[test]
fn output_key_order_is_fixed() {
    let output = OutputObject::new(TerminateReason::Goal)
        .with_var("b", "2")
        .with_var("a", "1")
        .with_final_message("bye");
    assert_eq!(
        serde_json::to_string_pretty(&output).unwrap(),
        "{\n  \"terminate_reason\": \"GOAL\",\n  \"emitted_vars\": {\n    \"a\": \"1\",\n    \"b\": \"2\"\n  },\n  \"final_message\": \"bye\"\n}"
    );
}
