//! Proptest strategies and `Arbitrary` impls for the model types (feature `proptest`).
//!
//! Every value these strategies make obeys the model's invariants: a running task
//! has no `completed_at`, `notified_at`, `output` or `error`; a terminal task has a
//! `completed_at` no earlier than its launch, the payload that fits its status, and
//! a `notified_at` (if any) no earlier than its completion. Ids mix ASCII with
//! multi-byte characters, because ids are untrusted text.
//!
//! [`Transition`] is one step of the state machine, so a host can drive a task
//! through arbitrary sequences of steps:
//!
//! ```
//! use asynctask_model::arbitrary::{Transition, task_info};
//! use proptest::prelude::*;
//!
//! proptest!(|(mut task in task_info(), steps in prop::collection::vec(any::<Transition>(), 0..8))| {
//!     for step in steps {
//!         let was_terminal = task.status.is_terminal();
//!         step.apply(&mut task, 1);
//!         prop_assert!(!was_terminal || task.status.is_terminal());
//!     }
//! });
//! ```

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::{
    AsyncTaskInfo, AsyncTaskStatus, MaxAsyncTasks, OutputObject, TaskUsage, TerminateReason, Todo,
    TodoStatus,
};

/// Any status.
pub fn status() -> impl Strategy<Value = AsyncTaskStatus> {
    prop::sample::select(AsyncTaskStatus::ALL.to_vec())
}

/// Any terminate reason.
pub fn terminate_reason() -> impl Strategy<Value = TerminateReason> {
    prop::sample::select(vec![
        TerminateReason::Goal,
        TerminateReason::Error,
        TerminateReason::Timeout,
        TerminateReason::MaxTurns,
    ])
}

/// Short text of any Unicode, including the empty string.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z0-9 _-]{0,24}",
        1 => any::<String>().prop_map(|s| s.chars().take(24).collect()),
    ]
}

/// A task id: mostly hex, sometimes with multi-byte characters, never empty.
pub fn task_id() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[0-9a-f]{1,16}",
        1 => "[0-9a-fé日本語🦀]{1,12}",
    ]
}

/// Any output: up to four emitted variables and an optional final message.
pub fn output_object() -> impl Strategy<Value = OutputObject> {
    (
        terminate_reason(),
        prop::collection::btree_map(text(), text(), 0..4),
        prop::option::of(text()),
    )
        .prop_map(
            |(terminate_reason, emitted_vars, final_message): (_, BTreeMap<_, _>, _)| {
                OutputObject {
                    terminate_reason,
                    emitted_vars,
                    final_message,
                }
            },
        )
}

/// Any usage report: each field present or not, tokens and costs of any size.
pub fn task_usage() -> impl Strategy<Value = TaskUsage> {
    (
        prop::option::of(any::<u64>()),
        prop::option::of(any::<u64>()),
        prop::option::of(prop_oneof![
            0..10_000_000u64,
            0..=TaskUsage::MAX_COST_MICRO_USD
        ]),
        prop::option::of(text()),
    )
        .prop_map(
            |(input_tokens, output_tokens, cost_micro_usd, model)| TaskUsage {
                input_tokens,
                output_tokens,
                cost_micro_usd,
                model,
            },
        )
}

/// Any task in a state the state machine can reach; a task that ended may
/// have a usage.
pub fn task_info() -> impl Strategy<Value = AsyncTaskInfo> {
    (
        task_id(),
        text(),
        text(),
        status(),
        0..u64::MAX / 4,
        0..u64::MAX / 4,
        prop::option::of(0..u64::MAX / 4),
        output_object(),
        text(),
        prop::option::of(task_usage()),
    )
        .prop_map(
            |(
                id,
                subagent,
                goal,
                status,
                launched_at,
                took,
                notified_after,
                output,
                error,
                usage,
            )| {
                let completed_at = launched_at + took;
                let mut task = AsyncTaskInfo::queued(id, subagent, goal, launched_at);
                if status == AsyncTaskStatus::Queued {
                    return task;
                }
                // A cancelled task may never have started (cancelled in the
                // queue): one in three.
                if !(status == AsyncTaskStatus::Cancelled && took % 3 == 0) {
                    task.start(launched_at + took / 2);
                }
                match status {
                    AsyncTaskStatus::Completed => task.complete(output, completed_at),
                    AsyncTaskStatus::Failed => task.fail(error, completed_at),
                    AsyncTaskStatus::Cancelled => task.cancel(completed_at),
                    _ => return task,
                };
                task.usage = usage;
                if let Some(after) = notified_after {
                    task.mark_notified(completed_at + after);
                }
                task
            },
        )
}

/// Any valid `task-max-async` value, unlimited included.
pub fn max_async_tasks() -> impl Strategy<Value = MaxAsyncTasks> {
    prop_oneof![
        1 => Just(MaxAsyncTasks::UNLIMITED),
        6 => (1i64..=100).prop_map(|v| MaxAsyncTasks::new(v).unwrap_or_default()),
    ]
}

/// Any todo status.
pub fn todo_status() -> impl Strategy<Value = TodoStatus> {
    prop::sample::select(vec![
        TodoStatus::Pending,
        TodoStatus::InProgress,
        TodoStatus::Completed,
    ])
}

/// Any todo item.
pub fn todo() -> impl Strategy<Value = Todo> {
    ("[0-9]{1,3}", text(), todo_status()).prop_map(|(id, content, status)| Todo {
        id,
        content,
        status,
    })
}

/// One step of the task state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// [`AsyncTaskInfo::start`].
    Start,
    /// [`AsyncTaskInfo::complete`] with this output.
    Complete(OutputObject),
    /// [`AsyncTaskInfo::fail`] with this message.
    Fail(String),
    /// [`AsyncTaskInfo::cancel`].
    Cancel,
    /// [`AsyncTaskInfo::mark_notified`].
    MarkNotified,
}

impl Transition {
    /// Applies the step at `now_ms`; returns what the state machine returned.
    pub fn apply(&self, task: &mut AsyncTaskInfo, now_ms: u64) -> bool {
        match self {
            Transition::Start => task.start(now_ms),
            Transition::Complete(output) => task.complete(output.clone(), now_ms),
            Transition::Fail(error) => task.fail(error.clone(), now_ms),
            Transition::Cancel => task.cancel(now_ms),
            Transition::MarkNotified => task.mark_notified(now_ms),
        }
    }
}

/// Any transition.
pub fn transition() -> impl Strategy<Value = Transition> {
    prop_oneof![
        Just(Transition::Start),
        output_object().prop_map(Transition::Complete),
        text().prop_map(Transition::Fail),
        Just(Transition::Cancel),
        Just(Transition::MarkNotified),
    ]
}

macro_rules! arbitrary_from {
    ($($ty:ty => $strategy:ident),* $(,)?) => {$(
        impl Arbitrary for $ty {
            type Parameters = ();
            type Strategy = BoxedStrategy<$ty>;

            fn arbitrary_with((): ()) -> Self::Strategy {
                $strategy().boxed()
            }
        }
    )*};
}

arbitrary_from! {
    AsyncTaskStatus => status,
    TerminateReason => terminate_reason,
    OutputObject => output_object,
    TaskUsage => task_usage,
    AsyncTaskInfo => task_info,
    MaxAsyncTasks => max_async_tasks,
    TodoStatus => todo_status,
    Todo => todo,
    Transition => transition,
}
