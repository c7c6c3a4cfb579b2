//! `wait_async_tasks`: block until a background task finishes, instead of polling.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use asynctask_manager::AsyncTaskManager;
use asynctask_tools::{
    Tool, ToolAnnotations, ToolErrorType, ToolParams, ToolResult, ToolSpec, find_task,
};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::gate::ReminderGate;
use crate::params::{DEFAULT_WAIT_SECONDS, WaitAsyncTasksParams};

/// The `wait_async_tasks` tool.
///
/// Blocks until one of the named tasks (or any task, when none are named) has
/// finished and its result is pending, then claims the reminder — the seed's
/// `System Note` with every pending result no other call holds — and answers
/// with it (marked delivered once the response is written, see the gate). It wakes on the manager's events (a [`Notify`] fed by a subscription), never
/// by polling. Answers at once when a named task's result was already delivered,
/// or when nothing runs and nothing is pending. Cancelling the call (the client's
/// `notifications/cancelled`) only ends the wait: no task is touched.
#[derive(Debug, Clone)]
pub(crate) struct WaitAsyncTasksTool {
    manager: AsyncTaskManager,
    gate: ReminderGate,
}

/// Where the watched tasks stand.
enum Watch {
    /// A watched task finished and is not delivered yet.
    Pending,
    /// A named task finished and its result was delivered already.
    Delivered(String),
    /// Nothing to wait for: no task runs and none is pending.
    Idle,
    /// This many watched tasks still run.
    Running(usize),
}

impl WaitAsyncTasksTool {
    pub(crate) const NAME: &'static str = "wait_async_tasks";

    pub(crate) fn new(manager: AsyncTaskManager, gate: ReminderGate) -> Self {
        WaitAsyncTasksTool { manager, gate }
    }

    /// The full ids for `prefixes` (exact match first), or the error result for
    /// the first prefix that matches no task or several.
    fn resolve(&self, prefixes: &[String]) -> Result<BTreeSet<String>, Box<ToolResult>> {
        let mut ids = BTreeSet::new();
        for prefix in prefixes {
            let task = find_task(&self.manager, prefix)?;
            ids.insert(task.id);
        }
        Ok(ids)
    }

    fn watch(&self, named: &BTreeSet<String>) -> Watch {
        if named.is_empty() {
            let counts = self.manager.counts();
            return if self.manager.has_pending_notifications() {
                Watch::Pending
            } else if counts.running == 0 {
                Watch::Idle
            } else {
                Watch::Running(counts.running)
            };
        }
        let mut running = 0;
        let mut delivered = None;
        for id in named {
            match self.manager.task(id) {
                Some(task) if !task.status.is_terminal() => running += 1,
                Some(task) if task.notified_at.is_none() => return Watch::Pending,
                // Delivered, and maybe pruned from the history since.
                _ => delivered = delivered.or_else(|| Some(id.clone())),
            }
        }
        match delivered {
            Some(id) => Watch::Delivered(id),
            None => Watch::Running(running),
        }
    }
}

#[async_trait]
impl Tool for WaitAsyncTasksTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: Self::NAME.to_owned(),
            display_name: "Wait Async Tasks".to_owned(),
            description: "Wait for background async tasks instead of polling. Blocks until one \
                of the tasks named by task_id_prefixes (or any task, when none are named) has \
                finished, or until timeout_seconds pass, and returns the results of the \
                finished tasks. Cancelling the wait never cancels a task."
                .to_owned(),
            parameters: WaitAsyncTasksParams::schema(),
            annotations: ToolAnnotations {
                read_only: true,
                destructive: false,
                idempotent: false,
                open_world: false,
            },
        }
    }

    async fn execute(&self, params: Value, cancel: CancellationToken) -> ToolResult {
        let params = match WaitAsyncTasksParams::parse(params) {
            Ok(params) => params,
            Err(err) => return err.to_tool_result(Self::NAME),
        };
        let seconds = params.timeout_seconds.unwrap_or(DEFAULT_WAIT_SECONDS);
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let named = match self.resolve(params.task_id_prefixes.as_deref().unwrap_or_default()) {
            Ok(named) => named,
            Err(result) => return *result,
        };
        // Subscribed before the first look: an end between the look and the wait
        // leaves a permit in the `Notify`, so it is never missed.
        let wake = Arc::new(Notify::new());
        let _subscription = {
            let wake = Arc::clone(&wake);
            self.manager.subscribe(move |_| wake.notify_one())
        };
        loop {
            if cancel.is_cancelled() {
                break;
            }
            // Enabled before the look: a claim that ends between the look and the
            // wait (another call's result written, or its cancel released it) is
            // never missed.
            let released = self.gate.changed();
            tokio::pin!(released);
            released.as_mut().enable();
            let running = match self.watch(&named) {
                Watch::Pending => match self.gate.take(&cancel) {
                    Some(reminder) => {
                        let count = reminder.task_ids.len();
                        return ToolResult::success(
                            reminder.text,
                            format!("{count} async task(s) finished"),
                            json!({ "taskIds": reminder.task_ids }),
                        );
                    }
                    // A parallel call holds it (until its response is written or
                    // cancelled), or this one was cancelled: wait and look again.
                    None => self.manager.counts().running,
                },
                Watch::Delivered(id) => {
                    let text = format!(
                        "Async task {id} already finished and its result was delivered earlier; \
                         use 'check_async_tasks' with its ID to see it again."
                    );
                    return ToolResult::success(text.clone(), text, json!({ "taskIds": [] }));
                }
                Watch::Idle => {
                    return ToolResult::success(
                        "No async tasks are running.",
                        "No async tasks are running.",
                        json!({ "running": 0 }),
                    );
                }
                Watch::Running(running) => running,
            };
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                () = wake.notified() => {}
                () = &mut released => {}
                () = tokio::time::sleep_until(deadline) => {
                    let text = format!(
                        "No async task finished within {seconds} seconds; {running} still running."
                    );
                    return ToolResult::success(text.clone(), text, json!({ "running": running }));
                }
            }
        }
        ToolResult::failure(
            ToolErrorType::ExecutionFailed,
            "cancelled",
            "The wait was cancelled; no task was affected.",
            "Wait cancelled",
        )
    }
}
