//! Integration tests of `asynctask-manager` through its public API, as a host uses it.

mod api;
mod journal;
mod races;
mod replica;
mod state_machine;

use std::sync::Arc;

use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
use asynctask_model::{ManualClock, MaxAsyncTasks};

/// A manager on a manual clock starting at 1,000 ms, with the clock to move it.
pub(crate) fn manager(max: i64) -> (AsyncTaskManager, ManualClock) {
    let clock = ManualClock::new(1_000);
    let max = MaxAsyncTasks::new(max).expect("test limits are valid");
    (
        AsyncTaskManager::with_clock(max, Arc::new(clock.clone())),
        clock,
    )
}

/// A registration input with a fixed subagent and goal.
pub(crate) fn input(id: &str) -> RegisterTaskInput {
    RegisterTaskInput::new(id, "researcher", format!("goal of {id}"))
}
