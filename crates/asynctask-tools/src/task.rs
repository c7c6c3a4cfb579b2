//! `task`: run a subagent synchronously, or in the background with `async: true`.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use asynctask_manager::{AsyncTaskManager, RegisterError, RegisterTaskInput};
use asynctask_model::{AsyncTaskInfo, OutputObject};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};
use tracing::Instrument;

use crate::format::completion_notification;
use crate::ids::new_task_id;
use crate::params::{self, ContextVar, OutputVarSpec, TaskParams, TaskTimeouts};
use crate::result::{ToolErrorType, ToolResult};
use crate::schema;
use crate::tool::{Tool, ToolAnnotations, ToolSpec};

/// Runs subagents for the `task` tool. The host implements it.
///
/// `run` must watch `cancel`: it is cancelled when the user cancels the task,
/// when the task times out, and at shutdown. A runner that returns `Err`, panics
/// or overruns its timeout fails its task; it never takes the host down.
#[async_trait]
pub trait SubagentRunner: Send + Sync {
    /// Runs one subagent to the end.
    ///
    /// # Errors
    ///
    /// A [`SubagentError`] whose message becomes the task's error.
    ///
    /// # Cancel safety
    ///
    /// The future may be dropped after `cancel` fires and a grace period passes.
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError>;
}

/// Everything the model asked of a subagent. Serializable, for runners that hand
/// the request to another process (`timeout` as `{secs, nanos}`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubagentRequest {
    /// The task's id (also the subagent's agent id).
    pub task_id: String,
    /// Which subagent to run.
    pub subagent_name: String,
    /// Its goal.
    pub goal_prompt: String,
    /// Extra behaviour instructions.
    pub behaviour_prompts: Vec<String>,
    /// The tools it may use (`None`: all of its tools).
    pub tool_whitelist: Option<Vec<String>>,
    /// The variables it must emit.
    pub output_spec: Vec<OutputVarSpec>,
    /// Named context values.
    pub context: Vec<ContextVar>,
    /// The timeout that applies (already resolved and capped).
    pub timeout: Duration,
    /// Whether it runs in the background.
    pub run_async: bool,
}

/// A subagent failed; the message becomes the task's error.
///
/// # Examples
///
/// ```
/// use asynctask_tools::SubagentError;
/// assert_eq!(SubagentError::new("exit status 2").to_string(), "exit status 2");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SubagentError {
    message: String,
}

impl SubagentError {
    /// An error with this message.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        SubagentError {
            message: message.into(),
        }
    }

    /// The message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The `task` tool: runs a subagent through the host's [`SubagentRunner`].
///
/// **Synchronously** (`async` absent, `null` or `false`) the call waits for the
/// runner and answers with the completion notification JSON
/// ([`completion_notification`](crate::completion_notification)) — the same text a
/// background task's result is delivered with. Nothing is registered in the
/// manager. The runner's token is a child of the call's token, so abandoning the
/// call stops the subagent.
///
/// **Asynchronously** (`async: true`) the task is registered in the manager under
/// the running limit (atomically: two launches never both slip past it) with a
/// fresh cancellation token, the subagent is started on the [tracker](Self::tracker)
/// and the call returns at once with the task's id. The background run records
/// exactly one end in the manager: the runner's output (completed), its error or
/// panic (`subagent panicked: <payload>`) (failed), the timeout (failed, with a
/// text that names the timeout and `timeout_seconds`), or a cancel
/// ([`AsyncTaskManager::cancel_task`], or the token cancelled by the host). Once
/// the run has ended the task is never left `running`.
///
/// **Sync-detach** ([`with_sync_detach`](Self::with_sync_detach)): a synchronous
/// run still going after a set time is turned into a background task, so a
/// client with a request timeout (an MCP client's is usually 60 s) is never left
/// waiting on a long subagent.
///
/// Every run has a timeout: `timeout_seconds`, or the [default](TaskTimeouts),
/// never above the maximum. A runner that is cancelled (timeout, cancel,
/// abandoned call) gets a grace period of 5 seconds to return before it is
/// aborted.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use asynctask_manager::AsyncTaskManager;
/// use asynctask_model::{AsyncTaskStatus, OutputObject, TerminateReason};
/// use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner, TaskTool, Tool};
/// use tokio_util::sync::CancellationToken;
///
/// # struct Echo;
/// # #[async_trait::async_trait]
/// # impl SubagentRunner for Echo {
/// #     async fn run(&self, request: SubagentRequest, _cancel: CancellationToken)
/// #         -> Result<OutputObject, SubagentError> {
/// #         Ok(OutputObject::new(TerminateReason::Goal).with_var("goal", request.goal_prompt))
/// #     }
/// # }
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime").block_on(async {
/// let manager = AsyncTaskManager::default();
/// let tool = TaskTool::new(manager.clone(), Arc::new(Echo));
///
/// // Synchronous: the result is the completion JSON.
/// let params = serde_json::json!({"subagent_name": "echo", "goal_prompt": "say hi"});
/// let result = tool.execute(params, CancellationToken::new()).await;
/// assert!(result.llm_content.contains("\"terminate_reason\": \"GOAL\""));
/// assert!(manager.tasks().is_empty(), "a synchronous run is not registered");
///
/// // Asynchronous: the call returns at once; the result lands in the manager.
/// let params = serde_json::json!({"subagent_name": "echo", "goal_prompt": "say hi", "async": true});
/// let result = tool.execute(params, CancellationToken::new()).await;
/// assert!(result.llm_content.starts_with("Async task launched: subagent 'echo' (ID: "));
/// tool.tracker().close();
/// tool.tracker().wait().await;
/// assert_eq!(manager.tasks()[0].status, AsyncTaskStatus::Completed);
/// # });
/// ```
///
/// # Panics
///
/// `execute` must run inside a tokio runtime (it spawns the runner on it).
///
/// # Cancel safety
///
/// Dropping a synchronous `execute` future cancels the runner's token; the runner
/// is given its grace period on the tracker, then aborted. A background task
/// already launched is not affected by the call: it is stopped only by
/// [`AsyncTaskManager::cancel_task`], by cancelling its token, or by its timeout.
/// If the runtime drops a background run before it ends (shutdown), its task is
/// failed rather than left `running`.
pub struct TaskTool {
    manager: AsyncTaskManager,
    runner: Arc<dyn SubagentRunner>,
    timeouts: TaskTimeouts,
    tracker: TaskTracker,
    sync_detach: Option<Duration>,
    /// Cancelled when the host shuts down: no new runs start, synchronous runs
    /// in progress are cancelled.
    shutdown: CancellationToken,
}

impl TaskTool {
    /// The tool's name.
    pub const NAME: &'static str = "task";

    /// A `task` tool registering into `manager` and running subagents with `runner`.
    #[must_use]
    pub fn new(manager: AsyncTaskManager, runner: Arc<dyn SubagentRunner>) -> Self {
        TaskTool {
            manager,
            runner,
            timeouts: TaskTimeouts::default(),
            tracker: TaskTracker::new(),
            sync_detach: None,
            shutdown: CancellationToken::new(),
        }
    }

    /// Turns a synchronous run that is still going after `after` into a
    /// background task.
    ///
    /// When the timer fires before the runner returns, the task is registered in
    /// the manager (atomically, under the running limit, with the runner's own
    /// token, so `cancel_task` and `/task end` reach it), the running runner is
    /// handed to the same background machinery `async: true` launches use — its
    /// timeout still counted from the original start — and the call returns at
    /// once:
    ///
    /// `Subagent '<name>' is still running after <N> seconds; it continues in the
    /// background as async task <id>. Its result will be reported when it
    /// finishes; use 'wait_async_tasks' or 'check_async_tasks' to follow it.`
    ///
    /// with metadata `{agentId, async: true, status: "running", detached: true}`.
    /// Its end is then delivered like any background task's. (The text names
    /// `wait_async_tasks`, which the MCP server serves: that server is where
    /// sync-detach is meant to be used.)
    ///
    /// **If the limit is reached** when the timer fires, the call keeps waiting
    /// synchronously, and tries to detach again every `after`. A cancelled call
    /// still cancels its subagent until the moment it is detached; from then on
    /// only the task's own token (cancel, timeout, shutdown) stops it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use asynctask_manager::AsyncTaskManager;
    /// use asynctask_model::{OutputObject, TerminateReason};
    /// use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner, TaskTool, Tool};
    /// use tokio_util::sync::CancellationToken;
    ///
    /// # struct Slow;
    /// # #[async_trait::async_trait]
    /// # impl SubagentRunner for Slow {
    /// #     async fn run(&self, _request: SubagentRequest, _cancel: CancellationToken)
    /// #         -> Result<OutputObject, SubagentError> {
    /// #         tokio::time::sleep(Duration::from_secs(120)).await;
    /// #         Ok(OutputObject::new(TerminateReason::Goal))
    /// #     }
    /// # }
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("runtime").block_on(async {
    /// let manager = AsyncTaskManager::default();
    /// let tool = TaskTool::new(manager.clone(), Arc::new(Slow)).with_sync_detach(Duration::from_secs(50));
    /// let params = serde_json::json!({"subagent_name": "slow", "goal_prompt": "take your time"});
    /// let result = tool.execute(params, CancellationToken::new()).await;
    /// assert!(result.llm_content.starts_with("Subagent 'slow' is still running after 50 seconds"));
    /// assert_eq!(manager.counts().running, 1);
    /// # });
    /// ```
    #[must_use]
    pub fn with_sync_detach(mut self, after: Duration) -> Self {
        self.sync_detach = Some(after);
        self
    }

    /// After how long a synchronous run is detached, if ever.
    #[must_use]
    pub fn sync_detach(&self) -> Option<Duration> {
        self.sync_detach
    }

    /// Replaces the default and maximum timeouts.
    #[must_use]
    pub fn with_timeouts(mut self, timeouts: TaskTimeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Spawns background runs on `tracker`, so a host (or the runtime) can wait for
    /// them at shutdown.
    #[must_use]
    pub fn with_tracker(mut self, tracker: TaskTracker) -> Self {
        self.tracker = tracker;
        self
    }

    /// Watches `shutdown`: once it is cancelled the tool refuses new runs, and a
    /// synchronous run in progress is cancelled like an abandoned call. (Background
    /// tasks are cancelled through the manager; `AsyncTaskRuntime::shutdown` does
    /// both.)
    #[must_use]
    pub fn with_shutdown(mut self, shutdown: CancellationToken) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// The tracker background runs are spawned on.
    #[must_use]
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// The canonical schema, with the `timeout_seconds` description stating the
    /// timeouts this tool was configured with (the model must not be told 900 and
    /// 1800 when the host chose otherwise).
    fn parameters(&self) -> Value {
        let mut parameters = schema::canonical::<TaskParams>();
        let (default, max) = (self.timeouts.default.as_secs(), self.timeouts.max.as_secs());
        if let Some(description) = parameters.pointer_mut("/properties/timeout_seconds/description")
        {
            *description = Value::String(format!(
                "Seconds before the subagent is stopped and the task fails: default {default}, \
                 larger values are capped at {max}; -1 or 0 mean the maximum."
            ));
        }
        parameters
    }

    /// The timeouts in force.
    #[must_use]
    pub fn timeouts(&self) -> TaskTimeouts {
        self.timeouts
    }
}

/// How long a cancelled runner (timed out, cancelled by the user, or abandoned by
/// its caller) may take to return on its own before its task is aborted.
const RUNNER_GRACE: Duration = Duration::from_secs(5);

impl TaskTool {
    /// The request for the runner: defaults filled in, the timeout resolved and
    /// capped, and a fresh id whose first 8 characters no held task shares.
    fn request(&self, params: TaskParams) -> SubagentRequest {
        let timeout = params
            .timeout_seconds
            .map_or(self.timeouts.default, |t| t.resolve(self.timeouts))
            .min(self.timeouts.max);
        SubagentRequest {
            task_id: new_task_id(&self.manager),
            subagent_name: params.subagent_name,
            goal_prompt: params.goal_prompt,
            behaviour_prompts: params.behaviour_prompts.unwrap_or_default(),
            tool_whitelist: params.tool_whitelist,
            output_spec: params.output_spec.unwrap_or_default(),
            context: params.context.unwrap_or_default(),
            timeout,
            run_async: params.run_async.unwrap_or(false),
        }
    }

    /// The model-facing timeout text: it names the timeout and the setting that
    /// changes it — or, when the timeout already was the maximum, what is left to do.
    fn timeout_message(&self, subagent: &str, timeout: Duration) -> String {
        let (seconds, max) = (timeout.as_secs(), self.timeouts.max.as_secs());
        if timeout >= self.timeouts.max {
            format!(
                "Subagent '{subagent}' timed out after {seconds} seconds, the longest \
                 timeout_seconds allows. Split the goal into smaller tasks, or ask the user to \
                 raise the host's maximum timeout."
            )
        } else {
            format!(
                "Subagent '{subagent}' timed out after {seconds} seconds. Pass a larger \
                 timeout_seconds (at most {max} seconds) to give it longer."
            )
        }
    }

    /// Runs the subagent while the caller waits. Nothing is registered — unless
    /// sync-detach turns the run into a background task.
    async fn run_sync(&self, request: SubagentRequest, cancel: &CancellationToken) -> ToolResult {
        let id = request.task_id.clone();
        let name = request.subagent_name.clone();
        let goal = request.goal_prompt.clone();
        let timeout = request.timeout;
        let started = Instant::now();
        // Saturating: a timeout beyond the clock's range never fires.
        let deadline = started.checked_add(timeout).unwrap_or_else(far_future);
        let mut task = AsyncTaskInfo::new(
            id.clone(),
            name.clone(),
            request.goal_prompt.clone(),
            self.now(),
        );
        // A run that may be detached gets a token of its own, not a child of the
        // call's: once detached it must outlive the call. Until then `outcome`
        // watches the call's token, and a cancelled or dropped call cancels the
        // runner's token on the way out (`stop_in_background`, `Run`'s drop).
        let token = match self.sync_detach {
            Some(_) => CancellationToken::new(),
            None => cancel.child_token(),
        };
        let mut run = Run::start(
            Arc::clone(&self.runner),
            request,
            token,
            self.tracker.clone(),
        );
        let mut detach_at = self
            .sync_detach
            .and_then(|after| started.checked_add(after));
        let outcome = loop {
            let Some(at) = detach_at else {
                break run.outcome(deadline, cancel).await;
            };
            let waited = tokio::time::timeout_at(at, run.outcome(deadline, cancel)).await;
            match waited {
                Ok(outcome) => break outcome,
                Err(_) => {
                    let detach = Detach {
                        id: id.clone(),
                        name: name.clone(),
                        goal: goal.clone(),
                        started,
                        deadline,
                    };
                    match self.detach(run, detach) {
                        Ok(result) => return result,
                        Err(back) => {
                            run = back;
                            detach_at = self
                                .sync_detach
                                .and_then(|after| Instant::now().checked_add(after));
                        }
                    }
                }
            }
        };
        // A runner still going (timed out, or the call was cancelled) is stopped
        // in the background: the caller gets its answer now, the runner its grace.
        run.stop_in_background();
        let now = self.now();
        let failed = |task: &mut AsyncTaskInfo, kind, message: String, display: String| {
            task.fail(message.clone(), now);
            tracing::debug!(task_id = %id, subagent = %name, error = %message, "subagent failed");
            ToolResult::failure(kind, message, completion_notification(task), display)
                .with_metadata(json!({ "agentId": id, "status": "failed" }))
        };
        match outcome {
            Outcome::Finished(Ok(output)) => {
                let display = format!(
                    "Subagent **{name}** finished (`{}`)",
                    output.terminate_reason
                );
                let metadata = json!({
                    "agentId": id,
                    "terminateReason": output.terminate_reason,
                    "emittedVars": output.emitted_vars,
                });
                task.complete(output, now);
                tracing::debug!(task_id = %id, subagent = %name, "subagent finished");
                ToolResult::success(completion_notification(&task), display, metadata)
            }
            Outcome::Finished(Err(err)) => {
                let display = format!("Subagent **{name}** failed: {}", err.message());
                failed(
                    &mut task,
                    ToolErrorType::ExecutionFailed,
                    err.message().to_owned(),
                    display,
                )
            }
            Outcome::Panicked(message) => {
                let display = format!("Subagent **{name}** failed: {message}");
                failed(
                    &mut task,
                    ToolErrorType::UnhandledException,
                    message,
                    display,
                )
            }
            Outcome::Aborted(message) => {
                let display = format!("Subagent **{name}** failed: {message}");
                failed(&mut task, ToolErrorType::ExecutionFailed, message, display)
            }
            Outcome::TimedOut => {
                let message = self.timeout_message(&name, timeout);
                let display = format!(
                    "Subagent **{name}** timed out after {} seconds",
                    timeout.as_secs()
                );
                failed(&mut task, ToolErrorType::Timeout, message, display)
            }
            Outcome::Cancelled => {
                task.cancel(now);
                tracing::debug!(task_id = %id, subagent = %name, "subagent call cancelled");
                ToolResult::failure(
                    ToolErrorType::ExecutionFailed,
                    "cancelled",
                    completion_notification(&task),
                    format!("Subagent **{name}** was cancelled"),
                )
                .with_metadata(json!({ "agentId": id, "status": "cancelled" }))
            }
        }
    }

    /// Registers a synchronous run that overstayed the sync-detach time and hands
    /// it to the background. `Err` gives the run back when it cannot be
    /// registered (the limit is reached): the caller keeps waiting.
    fn detach(&self, run: Run, detach: Detach) -> Result<ToolResult, Run> {
        let Detach {
            id,
            name,
            goal,
            started,
            deadline,
        } = detach;
        let input = RegisterTaskInput::new(id.clone(), name.clone(), goal)
            .with_cancellation(run.token.clone());
        if let Err(err) = self.manager.register_task(input) {
            tracing::debug!(task_id = %id, subagent = %name, reason = %err, "cannot detach the synchronous run yet; still waiting");
            return Err(run);
        }
        self.cancel_if_shutting_down(&id);
        let seconds = started.elapsed().as_secs();
        tracing::debug!(task_id = %id, subagent = %name, seconds, "synchronous run detached to the background");
        let span = tracing::info_span!("async_task", task_id = %id, subagent = %name);
        let timeout = deadline.saturating_duration_since(started);
        let message = self.timeout_message(&name, timeout);
        let background = Background::new(&self.manager, &id, run, timeout, deadline, message);
        self.tracker.spawn(background.run().instrument(span));
        Ok(ToolResult::success(
            format!(
                "Subagent '{name}' is still running after {seconds} seconds; it continues in the \
                 background as async task {id}. Its result will be reported when it finishes; \
                 use 'wait_async_tasks' or 'check_async_tasks' to follow it."
            ),
            format!("Subagent **{name}** continues in the background (`{id}`)"),
            json!({ "agentId": id, "async": true, "status": "running", "detached": true }),
        ))
    }

    /// Registers the task under the limit and starts it in the background.
    fn launch(&self, request: SubagentRequest) -> ToolResult {
        let id = request.task_id.clone();
        let name = request.subagent_name.clone();
        // A fresh token, not a child of the call's: a background task outlives the
        // request that launched it.
        let token = CancellationToken::new();
        let input = RegisterTaskInput::new(id.clone(), name.clone(), request.goal_prompt.clone())
            .with_cancellation(token.clone());
        match self.manager.register_task(input) {
            Ok(_) => {}
            Err(RegisterError::LimitReached(limit)) => {
                let text = format!(
                    "{limit}. Wait for a running task to finish and check progress with \
                     'check_async_tasks', run this subagent synchronously (without async: true), \
                     or try again later."
                );
                return ToolResult::failure(
                    ToolErrorType::ExecutionFailed,
                    limit.to_string(),
                    text.clone(),
                    text,
                );
            }
            Err(err) => {
                let message = err.to_string();
                return ToolResult::failure(
                    ToolErrorType::ExecutionFailed,
                    message.clone(),
                    message.clone(),
                    message,
                );
            }
        }
        self.cancel_if_shutting_down(&id);
        let span = tracing::info_span!("async_task", task_id = %id, subagent = %name);
        let timeout = request.timeout;
        let message = self.timeout_message(&name, timeout);
        let deadline = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(far_future);
        let run = span.in_scope(|| {
            Run::start(
                Arc::clone(&self.runner),
                request,
                token,
                self.tracker.clone(),
            )
        });
        let background = Background::new(&self.manager, &id, run, timeout, deadline, message);
        self.tracker.spawn(background.run().instrument(span));
        ToolResult::success(
            format!(
                "Async task launched: subagent '{name}' (ID: {id}). Task is running in \
                 background. Use 'check_async_tasks' to monitor progress."
            ),
            format!("Async task started: **{name}** (`{id}`)"),
            json!({ "agentId": id, "async": true, "status": "running" }),
        )
    }

    fn now(&self) -> u64 {
        self.manager.clock().now_ms()
    }

    /// A task registered while the host was shutting down may have missed its
    /// cancel (the shutdown's sweep of running tasks can run between our check
    /// and our registration): cancel it now, so shutdown never waits for it.
    fn cancel_if_shutting_down(&self, id: &str) {
        if self.shutdown.is_cancelled() {
            self.manager.cancel_task(id);
        }
    }
}

/// What [`TaskTool::detach`] needs to know about the synchronous run.
struct Detach {
    id: String,
    name: String,
    goal: String,
    started: Instant,
    deadline: Instant,
}

/// One background run: everything it needs after `execute` has returned.
struct Background {
    manager: AsyncTaskManager,
    /// The task's id.
    id: String,
    /// The runner, already started (by `launch`, or by a synchronous call that
    /// was detached).
    run: Run,
    /// The timeout in force, for the log.
    timeout: Duration,
    /// When the timeout passes, counted from the run's start.
    deadline: Instant,
    /// The timeout text, made while the tool's settings were at hand.
    message: String,
    /// Fails the task if the run is dropped (even before its first poll).
    ended: EndGuard,
}

impl Background {
    /// A background run of the registered task `id`, armed so that the task is
    /// failed if the run is dropped before it records an end.
    fn new(
        manager: &AsyncTaskManager,
        id: &str,
        run: Run,
        timeout: Duration,
        deadline: Instant,
        message: String,
    ) -> Self {
        Background {
            ended: EndGuard {
                manager: manager.clone(),
                id: id.to_owned(),
                armed: true,
            },
            manager: manager.clone(),
            message,
            id: id.to_owned(),
            timeout,
            deadline,
            run,
        }
    }

    /// Waits for the subagent's end and records it in the manager.
    ///
    /// Whatever happens — a result, an error, a panic, the timeout, a cancel —
    /// the task is terminal when this returns. If this future is dropped first
    /// (the runtime shut down), the task is failed on the way out.
    async fn run(self) {
        let Background {
            manager,
            id,
            mut run,
            timeout,
            deadline,
            message,
            ended,
        } = self;
        let token = run.token.clone();
        let mut outcome = run.outcome(deadline, &token).await;
        if matches!(outcome, Outcome::Finished(_)) && token.is_cancelled() {
            // The runner answered a cancel (the host cancelled the task's token)
            // before this run saw it: the task was cancelled, whatever it returned.
            outcome = Outcome::Cancelled;
        }
        match outcome {
            Outcome::Finished(Ok(output)) => {
                tracing::debug!(terminate_reason = %output.terminate_reason, "async task completed");
                manager.complete_task(&id, output);
            }
            Outcome::Finished(Err(err)) => {
                tracing::debug!(error = %err, "async task failed");
                manager.fail_task(&id, err.message());
            }
            Outcome::Panicked(message) | Outcome::Aborted(message) => {
                tracing::warn!(error = %message, "async task failed");
                manager.fail_task(&id, message);
            }
            Outcome::TimedOut => {
                tracing::warn!(timeout_secs = timeout.as_secs(), "async task timed out");
                // Fail first: the runner may answer the cancel with a result, and
                // the timeout must be what the model reads.
                manager.fail_task(&id, message);
                run.stop().await;
            }
            Outcome::Cancelled => {
                tracing::debug!("async task cancelled");
                // `false` when `cancel_task` got here first; either way it is
                // cancelled now.
                manager.cancel_task(&id);
                run.stop().await;
            }
        }
        ended.disarm();
    }
}

/// Fails the task if a background run is dropped before it recorded an end, so
/// no task is left `running` after its run is gone.
struct EndGuard {
    manager: AsyncTaskManager,
    id: String,
    armed: bool,
}

impl EndGuard {
    /// The run recorded its end: nothing to do on drop.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        if self.armed
            && self.manager.fail_task(
                &self.id,
                "the subagent's run was stopped before it finished (the host shut down)",
            )
        {
            tracing::warn!(task_id = %self.id, "async task dropped before it finished");
        }
    }
}

/// How a run ended, as far as the caller is concerned.
enum Outcome {
    /// The runner returned.
    Finished(Result<OutputObject, SubagentError>),
    /// The runner panicked: `subagent panicked: <payload>`.
    Panicked(String),
    /// The runner's task was aborted from outside (the runtime shut down).
    Aborted(String),
    /// The timeout passed first.
    TimedOut,
    /// The watched token was cancelled first.
    Cancelled,
}

/// A runner started on its own tokio task, so that a panic becomes a `JoinError`
/// and an overrun can be aborted.
///
/// Dropping a `Run` whose runner has not returned cancels its token and stops it
/// in the background (grace, then abort), so abandoning a call never leaks a
/// runner.
struct Run {
    handle: Option<JoinHandle<Result<OutputObject, SubagentError>>>,
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Run {
    fn start(
        runner: Arc<dyn SubagentRunner>,
        request: SubagentRequest,
        token: CancellationToken,
        tracker: TaskTracker,
    ) -> Self {
        let runner_token = token.clone();
        let handle =
            tokio::spawn(async move { runner.run(request, runner_token).await }.in_current_span());
        Run {
            handle: Some(handle),
            token,
            tracker,
        }
    }

    /// Waits for the runner, the `deadline` or `cancel`, whichever comes first. A
    /// runner that has returned wins a tie.
    ///
    /// Cancel-safe: dropping the future leaves the runner running and the `Run`
    /// as it was, so the wait can be taken up again (or handed over).
    async fn outcome(&mut self, deadline: Instant, cancel: &CancellationToken) -> Outcome {
        let Some(handle) = self.handle.as_mut() else {
            return Outcome::Aborted("the subagent was already stopped".to_owned());
        };
        let joined = tokio::select! {
            biased;
            joined = handle => joined,
            () = tokio::time::sleep_until(deadline) => return Outcome::TimedOut,
            () = cancel.cancelled() => return Outcome::Cancelled,
        };
        self.handle = None;
        match joined {
            Ok(result) => Outcome::Finished(result),
            Err(err) if err.is_panic() => Outcome::Panicked(format!(
                "subagent panicked: {}",
                panic_message(err.into_panic().as_ref())
            )),
            Err(_) => {
                Outcome::Aborted("the subagent's run was aborted before it finished".to_owned())
            }
        }
    }

    /// Cancels the runner's token, gives it [`RUNNER_GRACE`] to return, then
    /// aborts it; returns once the runner is gone.
    async fn stop(mut self) {
        if let Some(handle) = self.handle.take() {
            self.token.cancel();
            stop_runner(handle).await;
        }
    }

    /// Like [`stop`](Self::stop), on the tracker, without waiting.
    fn stop_in_background(mut self) {
        if let Some(handle) = self.handle.take() {
            self.token.cancel();
            self.tracker.spawn(stop_runner(handle).in_current_span());
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        self.token.cancel();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                self.tracker.spawn_on(stop_runner(handle), &runtime);
            }
            // No runtime to wait on: the runner gets no grace.
            Err(_) => handle.abort(),
        }
    }
}

/// Gives a cancelled runner [`RUNNER_GRACE`] to return, then aborts it and waits
/// until it is gone.
async fn stop_runner(mut handle: JoinHandle<Result<OutputObject, SubagentError>>) {
    if tokio::time::timeout(RUNNER_GRACE, &mut handle)
        .await
        .is_err()
    {
        tracing::warn!(
            grace_secs = RUNNER_GRACE.as_secs(),
            "subagent ignored cancellation; aborting it"
        );
        handle.abort();
        // The abort lands at the runner's next await; its result no longer matters.
        let _ = handle.await;
    }
}

/// An instant no timer in this process will reach (about 30 years ahead).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

/// The text of a panic payload (`panic!` gives a `&str` or a `String`).
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "<non-string panic payload>"
    }
}

impl fmt::Debug for TaskTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskTool")
            .field("manager", &self.manager)
            .field("timeouts", &self.timeouts)
            .field("sync_detach", &self.sync_detach)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Tool for TaskTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: Self::NAME.to_owned(),
            display_name: "Task".to_owned(),
            description: "Run a subagent that works on its own toward a goal. By default the \
                call waits for the subagent and returns its result as JSON (agent_id, \
                terminate_reason, emitted_vars, final_message). With async: true the call \
                returns at once with the task ID while the subagent runs in the background; \
                its result is delivered to you when it finishes. Use check_async_tasks to \
                monitor background tasks."
                .to_owned(),
            parameters: self.parameters(),
            annotations: ToolAnnotations {
                read_only: false,
                destructive: true,
                idempotent: false,
                open_world: true,
            },
        }
    }

    async fn execute(&self, params: Value, cancel: CancellationToken) -> ToolResult {
        let params = match params::parse::<TaskParams>(params) {
            Ok(params) => params,
            Err(err) => return params::invalid_params(Self::NAME, &err),
        };
        if self.shutdown.is_cancelled() {
            let text = "The host is shutting down: no new subagent can be started.";
            return ToolResult::failure(ToolErrorType::ExecutionFailed, text, text, text);
        }
        let request = self.request(params);
        if request.run_async {
            self.launch(request)
        } else {
            // The run ends when the call is cancelled (a child token: at once) or
            // the host shuts down (forwarded while the call runs).
            let either = cancel.child_token();
            let _forward = AbortOnDropHandle::new(tokio::spawn({
                let (shutdown, either) = (self.shutdown.clone(), either.clone());
                async move {
                    shutdown.cancelled().await;
                    either.cancel();
                }
            }));
            self.run_sync(request, &either).await
        }
    }
}
