//! Reminder texts and settings.

use asynctask_manager::RegisterTaskInput;
use asynctask_model::{MaxAsyncTasks, MaxQueuedTasks, OutputObject, TerminateReason};
use asynctask_runtime::{AsyncTaskReminderService, AsyncTaskRuntime, SettingError};
use pretty_assertions::assert_eq;
use serde_json::json;

fn service() -> AsyncTaskReminderService {
    AsyncTaskReminderService::new(fixture())
}

/// One running task and three finished ones, pending.
fn fixture() -> asynctask_manager::AsyncTaskManager {
    let manager = asynctask_manager::AsyncTaskManager::new(MaxAsyncTasks::default());
    for (id, agent) in [
        ("0f3a9c21-5b7e", "researcher"),
        ("7b2e0d44-1c9a", "tester"),
        ("c91d5e8f-3a7b", "reviewer"),
        ("e4a8b7c2-9d1f", "writer"),
    ] {
        manager
            .register_task(RegisterTaskInput::new(id, agent, "goal"))
            .expect("fixture tasks fit");
    }
    manager.complete_task(
        "7b2e0d44-1c9a",
        OutputObject::new(TerminateReason::Goal)
            .with_var("failures", "0")
            .with_final_message("The suite is green."),
    );
    manager.fail_task("c91d5e8f-3a7b", "model returned an empty response");
    manager.cancel_task("e4a8b7c2-9d1f");
    manager
}

#[test]
fn status_summary_text() {
    insta::assert_snapshot!("status_summary", service().status_summary());
}

#[test]
fn reminder_text_and_ids() {
    let reminder = service().reminder().unwrap();
    assert_eq!(
        reminder.task_ids,
        ["7b2e0d44-1c9a", "c91d5e8f-3a7b", "e4a8b7c2-9d1f"]
    );
    insta::assert_snapshot!("reminder", reminder.text);
}

#[test]
fn queued_tasks_are_tagged_and_counted_apart_from_running_ones() {
    let manager = fixture();
    manager.set_max_async_tasks(MaxAsyncTasks::new(1).unwrap());
    manager.set_max_queued_tasks(MaxQueuedTasks::new(5).unwrap());
    for id in ["5a5a5a5a-q1", "5b5b5b5b-q2"] {
        manager
            .register_task(RegisterTaskInput::new(id, "writer", "goal"))
            .unwrap();
    }
    let service = AsyncTaskReminderService::new(manager.clone());
    insta::assert_snapshot!("status_summary_queued", service.status_summary());
    let reminder = service.reminder().unwrap();
    insta::assert_snapshot!("reminder_with_a_queue", reminder.text);
    manager.pause_starts();
    manager.cancel_task("0f3a9c21-5b7e");
    manager.mark_all_notified(
        &manager
            .pending_notifications()
            .iter()
            .map(|t| t.id().to_owned())
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        service.reminder().unwrap().text,
        "---\nSystem Note: Async Task Status\n\n2 async task(s) queued.\n---"
    );
}

#[test]
fn a_claim_within_a_budget_carries_what_fits_and_says_how_many_wait() {
    use asynctask_runtime::{ClaimLedger, ClaimOwner};
    let manager = fixture();
    let ledger = ClaimLedger::new(manager.clone());
    let claim = |max| {
        ledger
            .claim_within(ClaimOwner::Request, max, |_| true)
            .unwrap()
    };
    let whole = claim(usize::MAX).reminder().clone();
    assert_eq!(
        Some(whole.clone()),
        service().reminder(),
        "no budget: everything"
    );

    // A budget below one result still carries one, whole.
    let first = claim(1);
    assert_eq!(first.task_ids(), ["7b2e0d44-1c9a"]);
    insta::assert_snapshot!("reminder_within_budget", first.reminder().text);
    // The rest wait, unclaimed, for the next claim.
    let second = claim(1);
    assert_eq!(second.task_ids(), ["c91d5e8f-3a7b"]);
    first.acknowledge();
    second.acknowledge();
    // A budget that fits the last one: no "more" line.
    let last = claim(2_000);
    assert_eq!(last.task_ids(), ["e4a8b7c2-9d1f"]);
    let text = &last.reminder().text;
    assert!(!text.contains("more async task"), "{text}");
    last.acknowledge();
    assert!(manager.pending_notifications().is_empty());

    // A budget that fits two of three.
    let manager = fixture();
    let ledger = ClaimLedger::new(manager.clone());
    let sizes: Vec<usize> = manager
        .pending_notifications()
        .iter()
        .map(|task| {
            asynctask_tools::completion_notification(task)
                .chars()
                .count()
        })
        .collect();
    // The whole reminder without the third result, plus its "more" line.
    let more = "1 more async task(s) finished; their results follow in the next reminder.";
    let budget = whole.text.chars().count() - sizes[2] + more.len();
    let two = ledger
        .claim_within(ClaimOwner::Request, budget, |_| true)
        .unwrap();
    let two = two.reminder();
    assert_eq!(two.task_ids, ["7b2e0d44-1c9a", "c91d5e8f-3a7b"]);
    assert!(
        two.text.contains(&format!("\n\n{more}\n\n")),
        "{}",
        two.text
    );
    assert!(
        two.text.chars().count() <= budget,
        "{} > {budget}",
        two.text.chars().count()
    );
}

#[test]
fn no_tasks_means_no_summary_and_no_reminder() {
    let service = AsyncTaskReminderService::new(asynctask_manager::AsyncTaskManager::default());
    assert_eq!(service.status_summary(), "");
    assert_eq!(service.reminder(), None);
    assert!(!service.has_pending_notifications());
}

#[test]
fn marking_leaves_only_the_running_part() {
    let service = service();
    let reminder = service.reminder().unwrap();
    service.mark_notified(&reminder.task_ids);
    assert_eq!(
        service.reminder().unwrap().text,
        "---\nSystem Note: Async Task Status\n\n1 async task(s) still running.\n---"
    );
}

#[tokio::test]
async fn settings_apply_or_are_refused_with_the_user_message() {
    let runtime = AsyncTaskRuntime::builder().build();
    runtime.set_setting("task-max-async", json!(-1)).unwrap();
    assert_eq!(
        runtime.manager().max_async_tasks(),
        MaxAsyncTasks::UNLIMITED
    );
    runtime.set_setting("task-max-async", json!("7")).unwrap();
    assert_eq!(runtime.manager().max_async_tasks().get(), 7);
    let rule = "task-max-async must be -1 (unlimited) or an integer between 1 and 100";
    for (bad, given) in [
        (json!(0), ", not 0"),
        (json!(101), ", not 101"),
        (json!("-5"), ", not -5"),
        (json!(2.5), "; the value given is not an integer"),
        (json!(null), "; the value given is not an integer"),
        (json!("five"), "; the value given is not an integer"),
        (json!(true), "; the value given is not an integer"),
    ] {
        assert_eq!(
            runtime
                .set_setting("task-max-async", bad.clone())
                .unwrap_err()
                .to_string(),
            format!("{rule}{given}"),
            "{bad}"
        );
    }
    assert_eq!(
        runtime.manager().max_async_tasks().get(),
        7,
        "a refusal changes nothing"
    );
    assert_eq!(runtime.continuation_setting(), None);
    runtime
        .set_setting("todo-continuation", json!(false))
        .unwrap();
    assert_eq!(runtime.continuation_setting(), Some(false));
    assert_eq!(
        runtime.set_setting("todo-continuation", json!("no")),
        Err(SettingError::InvalidTodoContinuation)
    );
    assert_eq!(
        runtime
            .set_setting("max", json!(1))
            .unwrap_err()
            .to_string(),
        "unknown setting 'max': expected task-max-async, task-max-queued or todo-continuation"
    );
    assert_eq!(
        runtime.manager().max_queued_tasks().get(),
        0,
        "no queue by default"
    );
    runtime.set_setting("task-max-queued", json!(20)).unwrap();
    assert_eq!(runtime.manager().max_queued_tasks().get(), 20);
    runtime.set_setting("task-max-queued", json!("0")).unwrap();
    assert_eq!(runtime.manager().max_queued_tasks().get(), 0);
    let rule = "task-max-queued must be an integer between 0 and 1000";
    for (bad, given) in [
        (json!(-1), ", not -1"),
        (json!(1001), ", not 1001"),
        (json!(1.5), "; the value given is not an integer"),
        (json!([]), "; the value given is not an integer"),
    ] {
        assert_eq!(
            runtime
                .set_setting("task-max-queued", bad.clone())
                .unwrap_err()
                .to_string(),
            format!("{rule}{given}"),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn lowering_the_limit_prunes_delivered_history_at_once() {
    let runtime = AsyncTaskRuntime::builder().build();
    let manager = runtime.manager();
    for i in 0..5 {
        let id = format!("t{i}");
        manager
            .register_task(RegisterTaskInput::new(id.clone(), "r", "g"))
            .unwrap();
        manager.complete_task(&id, OutputObject::new(TerminateReason::Goal));
        manager.mark_notified(&id);
    }
    runtime.set_setting("task-max-async", json!(1)).unwrap();
    assert_eq!(manager.tasks().len(), 2);
}

#[test]
fn building_outside_tokio_is_an_error_not_a_panic() {
    assert_eq!(
        AsyncTaskRuntime::builder()
            .try_build()
            .unwrap_err()
            .to_string(),
        "AsyncTaskRuntime must be built inside a tokio runtime"
    );
}
