//! The one place reminders are taken for delivery on a tool result.

use std::sync::{Arc, Mutex, PoisonError};

use asynctask_runtime::{AsyncTaskRuntime, Reminder};
use tokio_util::sync::CancellationToken;

/// Takes the pending reminder and acknowledges it in one step, under one lock.
///
/// MCP clients may run tool calls in parallel, and the runtime's next-turn path
/// expects one model request at a time: two calls that each took the reminder
/// would both carry the same results. Taking and acknowledging under one lock
/// gives every finished task to exactly one call. The acknowledgement comes
/// before the result is sent, because nothing later tells the server that it was;
/// a call already cancelled takes nothing, so its results stay pending for the
/// next call.
#[derive(Debug, Clone)]
pub(crate) struct ReminderGate {
    runtime: Arc<AsyncTaskRuntime>,
    lock: Arc<Mutex<()>>,
}

impl ReminderGate {
    pub(crate) fn new(runtime: Arc<AsyncTaskRuntime>) -> Self {
        ReminderGate {
            runtime,
            lock: Arc::new(Mutex::new(())),
        }
    }

    /// The reminder of every finished task not yet delivered, now marked
    /// delivered; `None` when no task finished, or when `cancel` is cancelled (the
    /// result carrying it would be dropped). A reminder that would only say how
    /// many tasks still run is not taken.
    pub(crate) fn take(&self, cancel: &CancellationToken) -> Option<Reminder> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if cancel.is_cancelled() {
            return None;
        }
        let reminder = self.runtime.next_turn_reminder()?;
        if reminder.task_ids.is_empty() {
            return None;
        }
        self.runtime.ack_delivered(&reminder.task_ids);
        Some(reminder)
    }
}
