//! `wait_async_tasks`: block until a background task finishes, instead of polling.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use asynctask_manager::AsyncTaskManager;
use asynctask_runtime::Reminder;
use asynctask_tools::{
    CallContext, LookupError, ToolAnnotations, ToolErrorType, ToolParams, ToolResult, ToolSpec,
    TypedTool, find_task_in,
};
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::gate::ReminderGate;
use crate::params::{DEFAULT_WAIT_SECONDS, WaitAsyncTasksParams};

/// The metadata key by which a tool result says that it *is* a reminder
/// (`wait_async_tasks` answering with the results it waited for): the server
/// appends no second one after it.
pub const REMINDER_KEY: &str = "reminder";

/// The `wait_async_tasks` tool.
///
/// Blocks until one of the named tasks (or any task, when none are named) has
/// finished and its result is pending, then claims the reminder — the
/// `System Note` with every pending result no other call holds — and answers
/// with it (marked delivered once the response is written, see the gate); its
/// metadata says so (`"reminder": true`), so the server appends no second
/// reminder. It wakes when a task finishes or a claim ends (the ledger's
/// change notifier), never by polling. Answers at once when a named task's
/// result was already delivered, or goes to another session (the one that
/// launched the task, still connected), or when nothing runs and nothing is
/// pending. Cancelling the call (the client's
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
    /// A named task finished, and its result goes to another session: the one
    /// that launched it, still connected.
    Elsewhere(String),
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

    /// The full ids for `prefixes` (exact match first), among the tasks the
    /// call's session owns, or the error result for the first prefix that
    /// matches no task or several.
    fn resolve(&self, prefixes: &[String]) -> Result<BTreeSet<String>, LookupError> {
        let scope = CallContext::current().and_then(|context| context.scope);
        let mut ids = BTreeSet::new();
        for prefix in prefixes {
            ids.insert(
                find_task_in(&self.manager, prefix, scope.as_deref())?
                    .id()
                    .to_owned(),
            );
        }
        Ok(ids)
    }

    /// How many running tasks the call's session owns (every running task,
    /// served to no session of several).
    fn running(&self) -> usize {
        match CallContext::current().and_then(|context| context.scope) {
            None => self.manager.counts().running,
            Some(scope) => self
                .manager
                .running_tasks()
                .iter()
                .filter(|task| scope.includes(task))
                .count(),
        }
    }

    fn watch(&self, named: &BTreeSet<String>) -> Watch {
        if named.is_empty() {
            let running = self.running();
            return if self.gate.anything_to_claim() {
                Watch::Pending
            } else if running == 0 {
                Watch::Idle
            } else {
                Watch::Running(running)
            };
        }
        let mut running = 0;
        let mut delivered = None;
        let mut elsewhere = None;
        for id in named {
            match self.manager.task(id) {
                Some(task) if !task.status().is_terminal() => {
                    // A question it asks is news too.
                    if self.manager.waits_for_answer(id) && self.gate.anything_to_claim() {
                        return Watch::Pending;
                    }
                    running += 1;
                }
                Some(task) if task.notified_at().is_some() => {
                    delivered = delivered.or_else(|| Some(id.clone()));
                }
                Some(task) if self.gate.may_claim(&task) => return Watch::Pending,
                Some(_) => elsewhere = elsewhere.or_else(|| Some(id.clone())),
                // Delivered, and pruned from the history since.
                None => delivered = delivered.or_else(|| Some(id.clone())),
            }
        }
        match (delivered, elsewhere) {
            (Some(id), _) => Watch::Delivered(id),
            (None, Some(id)) => Watch::Elsewhere(id),
            (None, None) => Watch::Running(running),
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
             named by task_id_prefixes (or any task, when none are named) has finished or asks a \
             question, or until timeout_seconds pass, and returns the results of the finished \
             tasks (and the questions). Cancelling the \
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
                Watch::Pending => match self.gate.answer_current(&cancel) {
                    Some(Reminder { text, task_ids }) => {
                        let count = task_ids.len();
                        let display = if count == 0 {
                            "An async task asks a question".to_owned()
                        } else {
                            format!("{count} async task(s) finished")
                        };
                        return ToolResult::success(
                            text,
                            display,
                            json!({ "taskIds": task_ids, REMINDER_KEY: true }),
                        );
                    }
                    // A parallel call holds it (until its response is written or
                    // cancelled), or this one was cancelled: wait and look again.
                    None => self.running(),
                },
                Watch::Delivered(id) => {
                    let text = format!(
                        "Async task {id} already finished and its result was delivered earlier; \
                         use 'check_async_tasks' with its ID to see it again."
                    );
                    return ToolResult::success(text.clone(), text, json!({ "taskIds": [] }));
                }
                Watch::Elsewhere(id) => {
                    let text = format!(
                        "Async task {id} already finished; its result goes to the session that \
                         launched it, which is still connected, not to this one."
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
            // No event marks a followed result no poll took going to the
            // reminders: look again when it does.
            let release = self.gate.next_release();
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                () = &mut changed => {}
                () = tokio::time::sleep(release.unwrap_or_default()), if release.is_some() => {}
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use asynctask_manager::RegisterTaskInput;
    use asynctask_model::{OutputObject, TerminateReason};
    use asynctask_runtime::AsyncTaskRuntime;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    use crate::AsyncTaskMcpServer;
    use crate::session::Sessions;

    const TASK: &str = "7b2e0d44-1c3f-4e5a-8b6c-9d0e1f2a3b4c";

    #[tokio::test(start_paused = true)]
    async fn a_result_of_another_connected_session_is_named_at_once() {
        let runtime = Arc::new(AsyncTaskRuntime::builder().build());
        let sessions = Sessions::default();
        let (launcher, other) = (
            sessions.join(&BTreeSet::new()),
            sessions.join(&BTreeSet::new()),
        );
        runtime
            .manager()
            .register_task(
                RegisterTaskInput::new(TASK, "tester", "a goal").with_origin(launcher.id()),
            )
            .expect("registered");
        runtime
            .manager()
            .complete_task(TASK, OutputObject::new(TerminateReason::Goal));
        let server = AsyncTaskMcpServer::for_session(Arc::clone(&runtime), Arc::new(other))
            .expect("valid tools");
        let wait = server
            .tools()
            .iter()
            .find(|tool| tool.name() == "wait_async_tasks")
            .expect("the wait tool");
        let answer = wait
            .execute(
                json!({"task_id_prefixes": ["7b2e"], "timeout_seconds": 50}),
                CancellationToken::new(),
            )
            .await;
        insta::assert_snapshot!("wait_result_of_another_session", answer.transcript());
        drop(launcher);
        runtime.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_takes_the_result_of_a_session_that_leaves_while_it_waits() {
        let runtime = Arc::new(AsyncTaskRuntime::builder().build());
        let sessions = Sessions::on(runtime.claims().clone());
        let (launcher, other) = (
            sessions.join(&BTreeSet::new()),
            sessions.join(&BTreeSet::new()),
        );
        let manager = runtime.manager();
        for id in [TASK, "still-running"] {
            manager
                .register_task(
                    RegisterTaskInput::new(id, "tester", "a goal").with_origin(launcher.id()),
                )
                .expect("registered");
        }
        manager.complete_task(TASK, OutputObject::new(TerminateReason::Goal));
        let server = AsyncTaskMcpServer::for_session(Arc::clone(&runtime), Arc::new(other))
            .expect("valid tools");
        let waiting = tokio::spawn(async move {
            let wait = server
                .tools()
                .iter()
                .find(|tool| tool.name() == "wait_async_tasks")
                .expect("the wait tool");
            wait.execute(json!({"timeout_seconds": 50}), CancellationToken::new())
                .await
        });
        // The wait looks, finds nothing it may take, and waits.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            !waiting.is_finished(),
            "the launcher's result is not for it"
        );
        drop(launcher);
        let answer = waiting.await.expect("no panic");
        assert_eq!(
            answer.metadata["taskIds"],
            json!([TASK]),
            "{}",
            answer.transcript()
        );
        runtime.shutdown().await;
    }
}
