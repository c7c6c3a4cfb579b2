//! The registry alone: atomic admission, first-transition-wins, prefix lookup,
//! events and pruning.
//!
//! Run with `cargo run -p asynctask-manager --example registry`.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example shows its output"
)]

use asynctask_manager::{AsyncTaskManager, PrefixMatch, RegisterTaskInput};
use asynctask_model::{MaxAsyncTasks, OutputObject, TerminateReason};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manager = AsyncTaskManager::new(MaxAsyncTasks::new(2)?);
    let _log = manager.subscribe(|event| {
        println!("event: {} is {}", event.task().id(), event.status());
    });

    manager.register_task(RegisterTaskInput::new(
        "0f3a9c21-a",
        "researcher",
        "map the code",
    ))?;
    manager.register_task(RegisterTaskInput::new(
        "7b2e0d44-b",
        "tester",
        "run the tests",
    ))?;
    match manager.register_task(RegisterTaskInput::new("c91d5e8f-c", "linter", "lint")) {
        Err(refused) => println!("third launch refused: {refused}"),
        Ok(_) => println!("unexpected: the limit let a third task in"),
    }

    manager.complete_task("0f3a9c21-a", OutputObject::new(TerminateReason::Goal));
    println!(
        "late cancel of a finished task changes nothing: {}",
        manager.cancel_task("0f3a9c21-a")
    );

    if let PrefixMatch::One(task) = manager.find_by_prefix("7b2e") {
        println!("prefix 7b2e is {} ({})", task.id(), task.subagent_name());
        manager.cancel_task(task.id());
    }

    for task in manager.pending_notifications() {
        println!("deliver to the model: {} ({})", task.id(), task.status());
        manager.mark_notified(task.id());
    }
    println!("counts: {:?}", manager.counts());
    asynctask_manager::check_invariants(&manager)?;
    Ok(())
}
