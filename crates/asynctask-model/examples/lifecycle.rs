//! The task state machine on its own: launch, finish once, notify once.
//!
//! Run with `cargo run -p asynctask-model --example lifecycle`.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example shows its output"
)]

use asynctask_model::{AsyncTaskInfo, MaxAsyncTasks, OutputObject, TerminateReason};

fn main() {
    let mut task = AsyncTaskInfo::new("0f3a9c21-demo", "researcher", "map the io module", 1_000);
    println!("launched:  {:?} at {}", task.status, task.launched_at);

    let output = OutputObject::new(TerminateReason::Goal)
        .with_var("callers", "3")
        .with_final_message("fetch.rs, upload.rs and sync.rs call retry()");
    assert!(task.complete(output, 4_000));
    println!("completed: {:?} at {:?}", task.status, task.completed_at);

    // The first transition wins: a late cancel is refused and changes nothing.
    assert!(!task.cancel(5_000));
    println!("late cancel refused; still {:?}", task.status);

    assert!(task.mark_notified(6_000));
    assert!(!task.mark_notified(7_000));
    println!("notified once, at {:?}", task.notified_at);

    let max = MaxAsyncTasks::default();
    println!(
        "default limit {} running, history limit {}",
        max.get(),
        max.history_limit()
    );
    println!(
        "\nas JSON:\n{}",
        serde_json::to_string_pretty(&task).unwrap_or_default()
    );
}
