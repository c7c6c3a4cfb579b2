//! `wait_async_tasks`: block until a background task finishes, instead of polling.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use asynctask_manager::AsyncTaskManager;
use asynctask_tools::{
    LookupError, ToolAnnotations, ToolErrorType, ToolParams, ToolResult, ToolSpec, TypedTool,
    find_task,
};
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::gate::ReminderGate;
use crate::params::{DEFAULT_WAIT_SECONDS, WaitAsyncTasksParams};
use crate::server::REMINDER_KEY;

/// The `wait_async_tasks` tool.
///
/// Blocks until one of the named tasks (or any task, when none are named) has
/// finished and its result is pending, then claims the reminder — the
/// `System Note` with every pending result no other call holds — and answers
/// with it (marked delivered once the response is written, see the gate); its
/// metadata says so (`"reminder": true`), so the server appends no second
/// reminder. It wakes when a task finishes or a claim ends (the ledger's
/// change notifier), never by polling. Answers at once when a named task's result was already delivered,
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
    fn resolve(&self, prefixes: &[String]) -> Result<BTreeSet<String>, LookupError> {
        let mut ids = BTreeSet::new();
        for prefix in prefixes {
            ids.insert(find_task(&self.manager, prefix)?.id);
        }
        Ok(ids)
    }

    fn watch(&self, named: &BTreeSet<String>) -> Watch {
        if named.is_empty() {
            let counts = self.manager.counts();
            return if self.gate.anything_to_claim() {
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
impl TypedTool for WaitAsyncTasksTool {
    type Params = WaitAsyncTasksParams;

    fn name(&self) -> &str {
        Self::NAME
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            Self::NAME,
            "Wait Async Tasks",
            "Wait for background async tasks instead of polling. Blocks until one of the tasks \
             named by task_id_prefixes (or any task, when none are named) has finished, or until \
             timeout_seconds pass, and returns the results of the finished tasks. Cancelling the \
             wait never cancels a task.",
            WaitAsyncTasksParams::schema(),
        )
        .with_annotations(ToolAnnotations::READ_ONLY.with_idempotent(false))
    }

    async fn run(&self, params: WaitAsyncTasksParams, cancel: CancellationToken) -> ToolResult {
        let seconds = params.timeout_seconds.unwrap_or(DEFAULT_WAIT_SECONDS);
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let named = match self.resolve(params.task_id_prefixes.as_deref().unwrap_or_default()) {
            Ok(named) => named,
            Err(error) => return error.to_tool_result(),
        };
        loop {
            if cancel.is_cancelled() {
                break;
            }
            // Enabled before the look: a task that finishes, or a claim that ends
            // (another call's result written, or its cancel released it), between
            // the look and the wait is never missed.
            let changed = self.gate.changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let running = match self.watch(&named) {
                Watch::Pending => match self.gate.take(&cancel) {
                    Some(reminder) => {
                        let count = reminder.task_ids.len();
                        return ToolResult::success(
                            reminder.text,
                            format!("{count} async task(s) finished"),
                            json!({ "taskIds": reminder.task_ids, REMINDER_KEY: true }),
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
                () = &mut changed => {}
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
