//! `AsyncTaskRuntime`: the facade a host builds once, and its builder.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use asynctask_manager::{
    AsyncTaskManager, Journal, RestoreError, StoredTask, Subscription, WeakAsyncTaskManager,
};
use asynctask_model::{
    Clock, InvalidMaxAsyncTasks, InvalidMaxQueuedTasks, MaxAsyncTasks, MaxQueuedTasks, SystemClock,
    Todo,
};
use asynctask_tools::{
    AnswerAsyncTaskTool, CheckAsyncTasksTool, LaunchBudget, MessageAsyncTaskTool, Nesting,
    PauseSignal, SubagentRunner, SyncDetach, TaskTimeouts, TaskTool, TodoPauseTool, Tool,
};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::continuation::{
    ContinuationContext, ContinuationEvaluation, ContinuationState, TodoContinuationService,
};
use crate::delivery::Delivery;
use crate::host::AgentHost;
use crate::ledger::ClaimLedger;
use crate::reminder::{AsyncTaskReminderService, Reminder};

/// How long [`AsyncTaskRuntime::shutdown`] waits for background runs to end.
/// Each run gives its runner a grace period after cancelling it and then aborts
/// it, so this is an outer bound, not the usual wait.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// The whole of asynctask for one agent session, wired together: the registry,
/// the tools, the reminders, the auto-trigger and todo continuation. Build it
/// once, inside a tokio runtime, with [`AsyncTaskRuntime::builder`]; give
/// [`tools`](Self::tools) to the model; call [`agent_idle`](Self::agent_idle)
/// whenever the agent's turn ends; and either let the auto-trigger wake the
/// agent (with an [`AgentHost`]) or put [`next_turn_reminder`](Self::next_turn_reminder)
/// into each model request and [`ack_delivered`](Self::ack_delivered) it.
///
/// # Examples
///
/// ```
/// use asynctask_model::{OutputObject, TerminateReason};
/// use asynctask_runtime::AsyncTaskRuntime;
/// use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner, Tool};
/// use tokio_util::sync::CancellationToken;
///
/// struct Echo;
/// #[async_trait::async_trait]
/// impl SubagentRunner for Echo {
///     async fn run(&self, request: SubagentRequest, _cancel: CancellationToken) -> Result<OutputObject, SubagentError> {
///         Ok(OutputObject::new(TerminateReason::Goal).with_final_message(request.goal_prompt))
///     }
/// }
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let runtime = AsyncTaskRuntime::builder().runner(std::sync::Arc::new(Echo)).build();
/// let task = runtime.tools().into_iter().find(|t| t.name() == "task").unwrap();
/// let params = serde_json::json!({"subagent_name": "echo", "goal_prompt": "hi", "async": true});
/// let launched = task.execute(params, CancellationToken::new()).await;
/// assert!(launched.llm_content.starts_with("Async task launched: subagent 'echo'"));
/// while runtime.manager().counts().running > 0 {
///     tokio::task::yield_now().await; // the subagent runs in the background
/// }
/// let reminder = runtime.next_turn_reminder().unwrap();
/// assert!(reminder.text.contains("\"final_message\": \"hi\""));
/// runtime.ack_delivered(&reminder.task_ids);
/// assert!(runtime.next_turn_reminder().is_none());
/// runtime.shutdown().await;
/// # });
/// ```
pub struct AsyncTaskRuntime {
    manager: AsyncTaskManager,
    reminders: AsyncTaskReminderService,
    claims: ClaimLedger,
    delivery: Arc<Delivery>,
    task_tool: Option<Arc<TaskTool>>,
    message_tool: Option<Arc<MessageAsyncTaskTool>>,
    answer_tool: Option<Arc<AnswerAsyncTaskTool>>,
    check_tool: Arc<CheckAsyncTasksTool>,
    pause_tool: Arc<TodoPauseTool>,
    tracker: TaskTracker,
    continuation: TodoContinuationService,
    continuation_setting: Mutex<Option<bool>>,
    subscriptions: Mutex<Vec<Subscription>>,
    shut_down: AtomicBool,
    /// Cancelled by `shutdown`: the `task` tool refuses new runs and cancels
    /// synchronous ones in progress.
    stopping: CancellationToken,
}

/// Builds an [`AsyncTaskRuntime`].
#[derive(Default)]
#[must_use]
pub struct AsyncTaskRuntimeBuilder {
    max_async_tasks: MaxAsyncTasks,
    max_queued_tasks: MaxQueuedTasks,
    clock: Option<Arc<dyn Clock>>,
    host: Option<Arc<dyn AgentHost>>,
    runner: Option<Arc<dyn SubagentRunner>>,
    timeouts: TaskTimeouts,
    sync_detach: Option<SyncDetach>,
    journal: Option<(Arc<dyn Journal>, Vec<StoredTask>)>,
    launches: Option<LaunchBudget>,
    nesting: Nesting,
}

impl AsyncTaskRuntimeBuilder {
    /// The running limit (default 5).
    pub fn max_async_tasks(mut self, max: MaxAsyncTasks) -> Self {
        self.max_async_tasks = max;
        self
    }

    /// How many background launches past the running limit wait in a queue
    /// (default 0: no queue, such a launch is refused). A queued task starts,
    /// first queued first, when a running slot frees.
    pub fn max_queued_tasks(mut self, max: MaxQueuedTasks) -> Self {
        self.max_queued_tasks = max;
        self
    }

    /// Caps how many subagents the host's session may launch in all,
    /// synchronous or in the background (see [`TaskTool::with_launch_budget`]).
    /// No cap by default.
    pub fn max_launches(mut self, max: u32) -> Self {
        self.launches = Some(LaunchBudget::new(max));
        self
    }

    /// Where the host stands among nested subagents, and how deep they may
    /// go (see [`Nesting`]; [`Nesting::from_env`] for a host that may itself
    /// run as a subagent). At the top, with no cap, by default.
    pub fn nesting(mut self, nesting: Nesting) -> Self {
        self.nesting = nesting;
        self
    }

    /// The clock (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The host to wake when a task finishes while the agent is idle. Without
    /// one there is no auto-trigger: use next-turn reminders.
    pub fn host(mut self, host: Arc<dyn AgentHost>) -> Self {
        self.host = Some(host);
        self
    }

    /// The subagent runner. Without one there is no `task` tool.
    pub fn runner(mut self, runner: Arc<dyn SubagentRunner>) -> Self {
        self.runner = Some(runner);
        self
    }

    /// The default and maximum subagent timeouts (900 s and 1800 s).
    pub fn timeouts(mut self, timeouts: TaskTimeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Turns a synchronous `task` call still running after `after` into a
    /// background task (see [`TaskTool::with_sync_detach`]). Off by default.
    pub fn sync_detach_after(self, after: Duration) -> Self {
        self.sync_detach(SyncDetach::after(after))
    }

    /// [`sync_detach_after`](Self::sync_detach_after), with the wording that
    /// tells the model how to follow a detached task.
    pub fn sync_detach(mut self, detach: SyncDetach) -> Self {
        self.sync_detach = Some(detach);
        self
    }

    /// Keeps the registry in `journal` — a store, such as `asynctask-store`'s
    /// `Store` — starting from `restored`, the tasks the store held (in
    /// registration order; empty for a new store). Without it the registry
    /// lives in memory only.
    ///
    /// The registry is rebuilt with [`AsyncTaskManager::restore`]: tasks that
    /// were running when the last process ended come back failed, as
    /// interrupted; results the model was not told about are still pending.
    /// With a [host](Self::host), pending results are delivered as soon as the
    /// runtime is built (when the agent is idle); without one, the next
    /// [`next_turn_reminder`](AsyncTaskRuntime::next_turn_reminder) carries
    /// them. The tasks the restore prunes from the history (the limit may have
    /// been lowered since) are forgotten by the [runner](Self::runner) at once
    /// ([`SubagentRunner::forget`]): the process that delivered their results
    /// is gone.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use asynctask_manager::{Journal, JournalEntry, JournalError, StoredTask};
    /// use asynctask_model::AsyncTaskInfo;
    /// use asynctask_runtime::AsyncTaskRuntime;
    ///
    /// /// Keeps nothing (a real host uses a store).
    /// struct Nowhere;
    /// impl Journal for Nowhere {
    ///     fn record(&self, _: &[JournalEntry<'_>]) -> Result<(), JournalError> { Ok(()) }
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let was_running = StoredTask::new(AsyncTaskInfo::new("a1", "researcher", "map the code", 1_000));
    /// let runtime = AsyncTaskRuntime::builder().journal(Arc::new(Nowhere), vec![was_running]).build();
    /// let reminder = runtime.next_turn_reminder().expect("the interrupted task is pending");
    /// assert!(reminder.text.contains("interrupted: the process running this task ended"));
    /// # });
    /// ```
    pub fn journal(mut self, journal: Arc<dyn Journal>, restored: Vec<StoredTask>) -> Self {
        self.journal = Some((journal, restored));
        self
    }

    /// Builds the runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the auto-trigger spawns its deliveries there), or
    /// when the [restored](Self::journal) tasks are not a registry. Use
    /// [`try_build`](Self::try_build) to get an error instead.
    #[must_use]
    pub fn build(self) -> AsyncTaskRuntime {
        match self.try_build() {
            Ok(runtime) => runtime,
            Err(error) => panic!("{error}"),
        }
    }

    /// Builds the runtime, or says why it cannot.
    ///
    /// # Errors
    ///
    /// [`BuildError::NoTokioRuntime`] when called outside a tokio runtime,
    /// [`BuildError::Restore`] when the restored tasks are not a registry.
    pub fn try_build(self) -> Result<AsyncTaskRuntime, BuildError> {
        let handle = Handle::try_current().map_err(|_| BuildError::NoTokioRuntime)?;
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let journaled = self.journal.is_some();
        let manager = match self.journal {
            Some((journal, restored)) => {
                let stored: Vec<String> =
                    restored.iter().map(|task| task.info.id.clone()).collect();
                let manager = AsyncTaskManager::restore(
                    self.max_async_tasks,
                    Arc::clone(&clock),
                    journal,
                    restored,
                )?;
                // A restore tells no one what it pruned: what the store held
                // and the registry does not was pruned.
                if let Some(runner) = &self.runner {
                    for id in stored.iter().filter(|id| manager.task(id).is_none()) {
                        runner.forget(id);
                    }
                }
                manager
            }
            None => AsyncTaskManager::with_clock(self.max_async_tasks, Arc::clone(&clock)),
        };
        manager.set_max_queued_tasks(self.max_queued_tasks);
        let reminders = AsyncTaskReminderService::new(manager.clone());
        let claims = ClaimLedger::new(manager.clone());
        let tracker = TaskTracker::new();
        let stopping = CancellationToken::new();
        if journaled {
            tracker.spawn_on(
                retry_journal(manager.downgrade(), stopping.clone()),
                &handle,
            );
        }
        let delivery = Arc::new(Delivery::new(
            claims.clone(),
            reminders.clone(),
            self.host,
            handle.clone(),
        ));
        let sync_detach = self.sync_detach;
        let task_tool = self.runner.map(|runner| {
            let tool = TaskTool::new(manager.clone(), runner)
                .with_timeouts(self.timeouts)
                .with_tracker(tracker.clone())
                .with_shutdown(stopping.clone())
                .with_nesting(self.nesting);
            let tool = match self.launches {
                Some(budget) => tool.with_launch_budget(budget),
                None => tool,
            };
            Arc::new(match sync_detach {
                Some(after) => tool.with_sync_detach(after),
                None => tool,
            })
        });
        // Completions and failures wake the agent; a cancel alone does not.
        let on_completed = {
            let delivery = Arc::clone(&delivery);
            manager.on_task_completed(move |_| delivery.poke())
        };
        let on_failed = {
            let delivery = Arc::clone(&delivery);
            manager.on_task_failed(move |_| delivery.poke())
        };
        let message_tool = task_tool
            .as_ref()
            .map(|_| Arc::new(MessageAsyncTaskTool::new(manager.clone())));
        let answer_tool = task_tool
            .as_ref()
            .map(|_| Arc::new(AnswerAsyncTaskTool::new(manager.clone())));
        // Queued tasks (restored ones) start once the tool runs what starts;
        // without a runner nothing could run them.
        if let Some(tool) = &task_tool {
            tool.run_queued_tasks();
            manager.start_queued();
        }
        // Results restored from a journal are delivered like any other; no
        // event announces them.
        if manager.has_pending_notifications() {
            delivery.poke();
        }
        Ok(AsyncTaskRuntime {
            check_tool: Arc::new(CheckAsyncTasksTool::new(manager.clone())),
            message_tool,
            answer_tool,
            pause_tool: Arc::new(TodoPauseTool::with_signal(PauseSignal::new())),
            manager,
            reminders,
            claims,
            delivery,
            task_tool,
            tracker,
            continuation: TodoContinuationService::new(clock),
            continuation_setting: Mutex::new(None),
            subscriptions: Mutex::new(vec![on_completed, on_failed]),
            shut_down: AtomicBool::new(false),
            stopping,
        })
    }
}

/// A setting's integer: a JSON integer, an integral float (`5.0`: JavaScript
/// hosts send numbers so) or a string holding one; `None` for anything else.
fn setting_integer(value: &serde_json::Value) -> Option<i64> {
    match value {
        serde_json::Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                .map(|f| f as i64)
        }),
        serde_json::Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    }
}

/// The first wait before writing again what a journal missed; it doubles after
/// each failure, up to [`JOURNAL_RETRY_MAX`].
const JOURNAL_RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two attempts to catch a journal up.
const JOURNAL_RETRY_MAX: Duration = Duration::from_secs(30);

/// Catches the journal up after a failed write, with backoff, until the
/// runtime stops: the results its failure kept from delivery become deliverable (and
/// are announced, so the auto-trigger delivers them) even when nothing else
/// happens to write.
async fn retry_journal(manager: WeakAsyncTaskManager, stopping: CancellationToken) {
    loop {
        // Holds no handle while it waits: a runtime dropped without a shutdown
        // still releases its manager (and the journal's store).
        let failed = match manager.upgrade() {
            Some(manager) => manager.journal_failed(),
            None => return,
        };
        tokio::select! {
            () = stopping.cancelled() => return,
            () = failed => {}
        }
        let mut wait = JOURNAL_RETRY_FIRST;
        loop {
            tokio::select! {
                () = stopping.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            let Some(manager) = manager.upgrade() else {
                return;
            };
            match manager.retry_journal() {
                Ok(_) => break,
                Err(error) => {
                    wait = (wait * 2).min(JOURNAL_RETRY_MAX);
                    tracing::warn!(
                        error = %error.chain(),
                        retry_in_s = wait.as_secs(),
                        "the journal still cannot record what it missed"
                    );
                }
            }
        }
    }
}

impl fmt::Debug for AsyncTaskRuntimeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncTaskRuntimeBuilder")
            .field("max_async_tasks", &self.max_async_tasks)
            .field("host", &self.host.is_some())
            .field("runner", &self.runner.is_some())
            .field("timeouts", &self.timeouts)
            .field("sync_detach", &self.sync_detach)
            .field(
                "journal",
                &self.journal.as_ref().map(|(_, restored)| restored.len()),
            )
            .finish_non_exhaustive()
    }
}

/// Why a runtime could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// `build` was called outside a tokio runtime.
    #[error("AsyncTaskRuntime must be built inside a tokio runtime")]
    NoTokioRuntime,
    /// The tasks given to [`journal`](AsyncTaskRuntimeBuilder::journal) are not
    /// a registry.
    #[error("the stored tasks cannot be restored")]
    Restore(#[from] RestoreError),
}

/// A setting was refused; the `Display` is the message to show the user.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let runtime = asynctask_runtime::AsyncTaskRuntime::builder().build();
/// let refused = runtime.set_setting("task-max-async", serde_json::json!(0)).unwrap_err();
/// assert_eq!(refused.to_string(), "task-max-async must be -1 (unlimited) or an integer between 1 and 100, not 0");
/// # });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettingError {
    /// `task-max-async` out of range or not an integer.
    #[error(transparent)]
    InvalidMaxAsyncTasks(#[from] InvalidMaxAsyncTasks),
    /// `task-max-queued` out of range or not an integer.
    #[error(transparent)]
    InvalidMaxQueuedTasks(#[from] InvalidMaxQueuedTasks),
    /// `todo-continuation` not a boolean.
    #[error("todo-continuation must be true or false")]
    InvalidTodoContinuation,
    /// A key this runtime does not know.
    #[error("unknown setting '{0}': expected task-max-async, task-max-queued or todo-continuation")]
    Unknown(String),
}

impl AsyncTaskRuntime {
    /// A builder with the defaults: limit 5, system clock, no host, no runner.
    pub fn builder() -> AsyncTaskRuntimeBuilder {
        AsyncTaskRuntimeBuilder::default()
    }

    /// The registry.
    #[must_use]
    pub fn manager(&self) -> &AsyncTaskManager {
        &self.manager
    }

    /// The reminder service.
    #[must_use]
    pub fn reminders(&self) -> &AsyncTaskReminderService {
        &self.reminders
    }

    /// The claim ledger every delivery goes through: the auto-trigger, the
    /// next-turn reminders, and whatever requests a serving layer (an MCP
    /// server) claims results for.
    ///
    /// It is the only ledger to use with this runtime: a ledger built apart
    /// ([`ClaimLedger::new`]) over the same manager does not see this one's
    /// claims, so the two could deliver one result twice. Claim as
    /// [`ClaimOwner::Request`](crate::ClaimOwner::Request) owners;
    /// [`AutoTrigger`](crate::ClaimOwner::AutoTrigger) and
    /// [`NextTurn`](crate::ClaimOwner::NextTurn) are the runtime's own.
    #[must_use]
    pub fn claims(&self) -> &ClaimLedger {
        &self.claims
    }

    /// The tools to give the model: `task` (when a runner is set),
    /// `check_async_tasks`, `message_async_task` and `answer_async_task`
    /// (when a runner is set: they steer and answer the tasks `task`
    /// launches), `todo_pause`.
    #[must_use]
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(5);
        if let Some(task) = &self.task_tool {
            tools.push(Arc::clone(task) as Arc<dyn Tool>);
        }
        tools.push(Arc::clone(&self.check_tool) as Arc<dyn Tool>);
        if let Some(message) = &self.message_tool {
            tools.push(Arc::clone(message) as Arc<dyn Tool>);
        }
        if let Some(answer) = &self.answer_tool {
            tools.push(Arc::clone(answer) as Arc<dyn Tool>);
        }
        tools.push(Arc::clone(&self.pause_tool) as Arc<dyn Tool>);
        tools
    }

    /// What the runner says of the subagents it does not offer (a config not
    /// trusted, say), for a serving layer to add to its instructions; `None`
    /// without a runner or a note.
    #[must_use]
    pub fn catalog_note(&self) -> Option<asynctask_tools::CatalogNote> {
        self.task_tool.as_ref()?.catalog_note()
    }

    /// The status block for the system instruction (empty when there are no tasks).
    #[must_use]
    pub fn status_summary(&self) -> String {
        self.reminders.status_summary()
    }

    /// The host's turn ended: deliver what piled up while the agent was busy (with
    /// a host), and release next-turn reminders that were not acknowledged.
    pub fn agent_idle(&self) {
        self.delivery.agent_idle();
    }

    /// The reminder to put into the next model request, or `None`. Nothing is
    /// marked until [`ack_delivered`](Self::ack_delivered); the tasks it carries are
    /// held back from the auto-trigger meanwhile, so none is delivered twice.
    #[must_use]
    pub fn next_turn_reminder(&self) -> Option<Reminder> {
        self.delivery.next_turn_reminder()
    }

    /// The host sent a next-turn reminder: mark its tasks notified. Call it as soon
    /// as the request carrying the reminder was accepted, before `agent_idle`.
    pub fn ack_delivered(&self, task_ids: &[String]) {
        self.delivery.ack(task_ids);
    }

    /// Applies a setting: `task-max-async` (-1 or 1..=100; prunes at once),
    /// `task-max-queued` (0..=1000; tasks already queued stay queued) or
    /// `todo-continuation` (boolean).
    ///
    /// # Errors
    ///
    /// [`SettingError`], whose `Display` is the message for the user.
    pub fn set_setting(&self, key: &str, value: serde_json::Value) -> Result<(), SettingError> {
        match key {
            "task-max-async" => {
                let max = match setting_integer(&value) {
                    Some(raw) => MaxAsyncTasks::new(raw)?,
                    None => return Err(InvalidMaxAsyncTasks::NOT_AN_INTEGER.into()),
                };
                self.manager.set_max_async_tasks(max);
                Ok(())
            }
            "task-max-queued" => {
                let max = match setting_integer(&value) {
                    Some(raw) => MaxQueuedTasks::new(raw)?,
                    None => return Err(InvalidMaxQueuedTasks::NOT_AN_INTEGER.into()),
                };
                self.manager.set_max_queued_tasks(max);
                Ok(())
            }
            "todo-continuation" => {
                let enabled = value
                    .as_bool()
                    .ok_or(SettingError::InvalidTodoContinuation)?;
                *self.setting_slot() = Some(enabled);
                Ok(())
            }
            other => Err(SettingError::Unknown(other.to_owned())),
        }
    }

    fn setting_slot(&self) -> std::sync::MutexGuard<'_, Option<bool>> {
        self.continuation_setting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The `todo-continuation` setting (`None` when never set: continuation is on).
    #[must_use]
    pub fn continuation_setting(&self) -> Option<bool> {
        *self.setting_slot()
    }

    /// The todo continuation service, on this runtime's clock.
    #[must_use]
    pub fn continuation(&self) -> &TodoContinuationService {
        &self.continuation
    }

    /// Where `todo_pause` records pauses.
    #[must_use]
    pub fn pause_signal(&self) -> &PauseSignal {
        self.pause_tool.signal()
    }

    /// The user sent a message: a `todo_pause` in force is lifted.
    pub fn user_message(&self) {
        self.pause_signal().clear();
    }

    /// The todo continuation check with this runtime's setting, plus the pause:
    /// after a successful `todo_pause`, continuation stops (reason `Todo
    /// continuation paused by todo_pause: <reason>`) until
    /// [`user_message`](Self::user_message).
    #[must_use]
    pub fn check_continuation(
        &self,
        todos: &[Todo],
        had_tool_calls: bool,
        is_responding: bool,
        state: &ContinuationState,
    ) -> ContinuationEvaluation {
        let mut evaluation =
            self.continuation
                .check_continuation_conditions(&ContinuationContext {
                    todos,
                    had_tool_calls,
                    is_responding,
                    continuation_setting: self.continuation_setting(),
                    current_state: state,
                });
        if let Some(reason) = self.pause_signal().reason() {
            evaluation.should_continue = false;
            evaluation.active_todo = None;
            evaluation.reason = format!("Todo continuation paused by todo_pause: {reason}");
        }
        evaluation
    }

    /// Cancels every running task, waits for the background runs to end (a runner
    /// that ignores cancellation is aborted after its grace period; its task stays
    /// cancelled), stops the auto-trigger, and tries once more to write what the
    /// journal missed (an unrecorded result is then kept by the store). Idempotent.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the tasks are cancelled before the first await; dropping the
    /// future only stops the waiting.
    pub async fn shutdown(&self) {
        if !self.shut_down.swap(true, Ordering::SeqCst) {
            self.stopping.cancel();
            self.delivery.stop();
            self.subscriptions
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
            // Held first: a slot a cancel frees starts nothing now. Queued
            // tasks of a journaled registry stay queued and start after the
            // restore; in memory they would never start, so they are
            // cancelled too.
            self.manager.pause_starts();
            for task in self.manager.running_tasks() {
                self.manager.cancel_task(task.id());
            }
            if !self.manager.is_journaled() {
                for task in self.manager.queued_tasks() {
                    self.manager.cancel_task(task.id());
                }
            }
            tracing::debug!("async task runtime shutting down");
        }
        self.tracker.close();
        let everything = async {
            self.tracker.wait().await;
            // Deliveries in flight (and retry timers) end too: nothing is marked
            // or delivered after shutdown returns.
            self.delivery.wait().await;
        };
        if tokio::time::timeout(SHUTDOWN_TIMEOUT, everything)
            .await
            .is_err()
        {
            tracing::warn!("background work did not end within the shutdown timeout");
        }
        // A change the journal missed (see `has_journal_backlog`) is
        // written now or never: the retries with backoff ended with the runtime.
        if let Err(error) = self.manager.retry_journal() {
            tracing::error!(
                error = %error.chain(),
                "at shutdown the journal still cannot record what it missed"
            );
        }
    }
}

impl fmt::Debug for AsyncTaskRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncTaskRuntime")
            .field("manager", &self.manager)
            .field("task_tool", &self.task_tool.is_some())
            .field("shut_down", &self.shut_down.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}
