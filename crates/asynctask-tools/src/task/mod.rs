//! `task`: run a subagent synchronously, or in the background with `async: true`.
//!
//! The tool itself lives here; the runner contract in [`runner`], the
//! supervision of one run (timeouts, cancels, panics, end guards) in
//! [`supervise`], and the texts the model reads in `crate::render`.

mod runner;
mod starts;
mod supervise;
mod sync;

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use asynctask_manager::{
    AsyncTaskManager, Inbox, InboxSender, Questions, RegisterError, RegisterTaskInput,
    Subscription, TaskProgress,
};
use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

pub use self::runner::{SubagentError, SubagentRequest, SubagentRunner};
use self::starts::Starter;
use crate::catalog::{CatalogNote, SubagentInfo};
use crate::context::CallContext;
use crate::ids::new_task_id;
use crate::launch::{LaunchBudget, Nesting};
use crate::params::{InvalidParams, TaskParams, TaskTimeouts, ToolParams};
use crate::render::{self, completion_notification};
use crate::result::{ToolErrorType, ToolResult};
use crate::tool::{ToolAnnotations, ToolSpec, TypedTool};

/// The most subagent names the `task` tool's schema lists as an `enum`; a larger
/// catalog is still listed in the description and still checked, but the
/// schema leaves the name free (OpenAI's strict mode limits a string enum over
/// 250 values to 15,000 characters in all).
///
/// ```
/// assert_eq!(asynctask_tools::MAX_ENUM_NAMES, 250);
/// ```
pub const MAX_ENUM_NAMES: usize = 250;

/// The most characters the names of the `task` tool's `enum` may have in all;
/// a catalog whose names are longer together is listed in the description and
/// checked, but the schema leaves the name free. OpenAI's strict mode bounds
/// the total length of every enum value, property name and const of a schema
/// (120,000 characters), and of one string enum over 250 values (15,000):
/// this stays within the stricter of the two, whatever else the schema holds.
///
/// ```
/// assert_eq!(asynctask_tools::MAX_ENUM_CHARS, 15_000);
/// ```
pub const MAX_ENUM_CHARS: usize = 15_000;

/// When a synchronous `task` call becomes a background task, and what the
/// model is told to follow it with.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use asynctask_tools::SyncDetach;
///
/// let detach = SyncDetach::after(Duration::from_secs(50))
///     .with_follow_up("use 'wait_async_tasks' or 'check_async_tasks' to follow it.");
/// assert_eq!(detach.after, Duration::from_secs(50));
/// assert_eq!(SyncDetach::after(Duration::from_secs(1)).follow_up, SyncDetach::DEFAULT_FOLLOW_UP);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncDetach {
    /// How long a synchronous run may go on before it is detached.
    pub after: Duration,
    /// The end of the detach text: how to follow the task. The layer that
    /// serves the tools knows which tools exist (an MCP server adds a wait tool,
    /// say), so it supplies the wording.
    pub follow_up: String,
}

impl SyncDetach {
    /// The follow-up when none is given: the one tool this crate guarantees.
    pub const DEFAULT_FOLLOW_UP: &'static str = "use 'check_async_tasks' to follow it.";

    /// Detach after `after`, with the [default follow-up](Self::DEFAULT_FOLLOW_UP).
    #[must_use]
    pub fn after(after: Duration) -> Self {
        SyncDetach {
            after,
            follow_up: Self::DEFAULT_FOLLOW_UP.to_owned(),
        }
    }

    /// Replaces the follow-up text.
    #[must_use]
    pub fn with_follow_up(mut self, follow_up: impl Into<String>) -> Self {
        self.follow_up = follow_up.into();
        self
    }
}

/// The `task` tool: runs a subagent through the host's [`SubagentRunner`].
///
/// - **Synchronously** (`async` absent, `null` or `false`) the call waits for
///   the runner and answers with the
///   [completion notification](crate::completion_notification), the text a
///   background result is delivered with. Nothing is registered; the runner's
///   token is a child of the call's, so abandoning the call stops the subagent.
/// - **In the background** (`async: true`) the task is registered under the
///   running limit (atomically: two launches never both slip past it) with a
///   fresh token, started on the [tracker](Self::tracker), and the call answers
///   at once with its id. The run records exactly one end in the manager: the
///   runner's output, its error or panic (`subagent panicked: <payload>`), the
///   timeout (a text naming `timeout_seconds`), or a cancel. Once the run has
///   ended the task is never left `running`.
/// - **Sync-detach** ([`with_sync_detach`](Self::with_sync_detach)): a
///   synchronous run still going after a set time becomes a background task,
///   so a client with a request timeout is never left waiting.
///
/// Every run has a timeout: `timeout_seconds`, or the [default](TaskTimeouts),
/// never above the maximum. A cancelled runner (timeout, cancel, abandoned
/// call) has 5 seconds to return before it is aborted. The tool tells the
/// runner when it may drop what it keeps for a task ([`KEPT_TASK_FILES`]).
///
/// # Panics
///
/// `execute` must run inside a tokio runtime (it spawns the runner on it).
///
/// # Cancel safety
///
/// Dropping a synchronous `execute` future cancels the runner's token; the
/// runner is given its grace on the tracker, then aborted. A background task
/// is stopped only by [`AsyncTaskManager::cancel_task`], its token, or its
/// timeout; one the runtime drops before it ends (shutdown) is failed.
pub struct TaskTool {
    manager: AsyncTaskManager,
    runner: Arc<dyn SubagentRunner>,
    timeouts: TaskTimeouts,
    tracker: TaskTracker,
    sync_detach: Option<SyncDetach>,
    /// Cancelled when the host shuts down: no new runs start, synchronous runs
    /// in progress are cancelled.
    shutdown: CancellationToken,
    /// Hears of the tasks the manager prunes.
    _forget_pruned: Subscription,
    /// The tasks done with whose files the runner still keeps.
    kept: Arc<KeptFiles>,
    /// The launches the host's session may make, for calls whose context
    /// brings no budget of its own.
    launches: Option<LaunchBudget>,
    /// Where the host stands among nested subagents, for calls whose context
    /// does not say.
    nesting: Nesting,
    /// Runs queued tasks when the manager starts them: installed before the
    /// first launch (and by the runtime before it lets restored queued tasks
    /// start), once the tool's configuration is final.
    starts: std::sync::OnceLock<(Arc<Starter>, Subscription)>,
}

/// How many tasks done with keep what their runner keeps for them (the process
/// runner: each subagent's whole output, a file results name for the model to
/// read).
///
/// A task is done with when the manager prunes it from its history
/// ([`AsyncTaskManager::on_task_pruned`]) or, for a synchronous run (never
/// registered), when it ends. The [`TaskTool`] keeps the last this many, in the
/// order they became so, and tells the runner to
/// [`forget`](SubagentRunner::forget) the oldest one beyond them: a file a
/// result named stays readable while the conversation goes on, and what a
/// runner keeps is bounded by this window plus the history, however long the
/// host runs.
pub const KEPT_TASK_FILES: usize = 100;

/// The last [`KEPT_TASK_FILES`] tasks done with, oldest first.
struct KeptFiles {
    runner: Arc<dyn SubagentRunner>,
    ids: Mutex<VecDeque<String>>,
}

impl KeptFiles {
    /// Records that nothing will ask for task `id` again, and tells the
    /// runner to forget the tasks that fall out of the window.
    fn done_with(&self, id: &str) {
        let old: Vec<String> = {
            let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
            ids.push_back(id.to_owned());
            let excess = ids.len().saturating_sub(KEPT_TASK_FILES);
            ids.drain(..excess).collect()
        };
        for id in old {
            self.runner.forget(&id);
        }
    }
}

impl TaskTool {
    /// The tool's name.
    pub const NAME: &'static str = "task";

    /// A `task` tool registering into `manager` and running subagents with `runner`.
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
    /// assert_eq!(manager.tasks()[0].status(), AsyncTaskStatus::Completed);
    /// # });
    /// ```
    #[must_use]
    pub fn new(manager: AsyncTaskManager, runner: Arc<dyn SubagentRunner>) -> Self {
        let kept = Arc::new(KeptFiles {
            runner: Arc::clone(&runner),
            ids: Mutex::new(VecDeque::new()),
        });
        let forget_pruned = manager.on_task_pruned({
            let kept = Arc::clone(&kept);
            move |id| kept.done_with(id)
        });
        TaskTool {
            manager,
            runner,
            timeouts: TaskTimeouts::default(),
            tracker: TaskTracker::new(),
            sync_detach: None,
            shutdown: CancellationToken::new(),
            _forget_pruned: forget_pruned,
            kept,
            launches: None,
            nesting: Nesting::top(),
            starts: std::sync::OnceLock::new(),
        }
    }

    /// Makes this tool run the queued tasks the manager starts (a task
    /// launched past the running limit, queued, starts when a slot frees: the
    /// tool starts its subagent then, with what it was launched with).
    /// Idempotent; done before the first launch by itself. A host that
    /// restores a registry calls it before
    /// [`AsyncTaskManager::start_queued`], so that no restored queued task
    /// starts with nobody to run it (`AsyncTaskRuntime` does).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime: the queued tasks' runs are spawned on it.
    pub fn run_queued_tasks(&self) {
        self.starter();
    }

    fn starter(&self) -> &Arc<Starter> {
        let (starter, _) = self.starts.get_or_init(|| {
            let starter = Arc::new(Starter::new(
                &self.manager,
                Arc::clone(&self.runner),
                self.timeouts,
                self.tracker.clone(),
                self.shutdown.clone(),
            ));
            let subscription = Starter::listen(&starter, &self.manager);
            (starter, subscription)
        });
        starter
    }

    /// Turns a synchronous run that is still going after `after` into a
    /// background task.
    ///
    /// When the timer fires first, the task is registered (under the running
    /// limit, with the runner's own token, so `cancel_task` reaches it), the
    /// runner goes on in the background (its timeout counted from the start),
    /// and the call answers at once: `Subagent '<name>' is still running after
    /// <N> seconds; it continues in the background as async task <id>. …`,
    /// ending with [`SyncDetach`]'s follow-up, with metadata `{agentId, async:
    /// true, status: "running", detached: true}`. At the limit, the call keeps
    /// waiting and tries again every `after`. Until it is detached a cancelled
    /// call cancels its subagent; then only the task's own token does.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use asynctask_manager::AsyncTaskManager;
    /// use asynctask_model::{OutputObject, TerminateReason};
    /// use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner, SyncDetach, TaskTool, Tool};
    /// use tokio_util::sync::CancellationToken;
    /// # struct Slow;
    /// # #[async_trait::async_trait]
    /// # impl SubagentRunner for Slow {
    /// #     async fn run(&self, _: SubagentRequest, _: CancellationToken) -> Result<OutputObject, SubagentError> {
    /// #         tokio::time::sleep(Duration::from_secs(120)).await;
    /// #         Ok(OutputObject::new(TerminateReason::Goal))
    /// #     }
    /// # }
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("runtime").block_on(async {
    /// let manager = AsyncTaskManager::default();
    /// let tool = TaskTool::new(manager.clone(), Arc::new(Slow)).with_sync_detach(SyncDetach::after(Duration::from_secs(50)));
    /// let params = serde_json::json!({"subagent_name": "slow", "goal_prompt": "take your time"});
    /// let result = tool.execute(params, CancellationToken::new()).await;
    /// assert!(result.llm_content.starts_with("Subagent 'slow' is still running after 50 seconds"));
    /// assert!(result.llm_content.ends_with("use 'check_async_tasks' to follow it."));
    /// assert_eq!(manager.counts().running, 1);
    /// # });
    /// ```
    #[must_use]
    pub fn with_sync_detach(mut self, detach: SyncDetach) -> Self {
        self.sync_detach = Some(detach);
        self
    }

    /// When a synchronous run is detached, if ever.
    #[must_use]
    pub fn sync_detach(&self) -> Option<&SyncDetach> {
        self.sync_detach.as_ref()
    }

    /// Caps how many subagents the host's session may launch, synchronous or
    /// in the background (a call whose [`CallContext`] brings a session's
    /// budget counts against that one instead). Past it a launch is refused:
    /// `Launch limit reached: this session has launched N subagents, the most
    /// one session may. …`. No cap by default.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use asynctask_manager::AsyncTaskManager;
    /// use asynctask_model::{OutputObject, TerminateReason};
    /// use asynctask_tools::{LaunchBudget, SubagentError, SubagentRequest, SubagentRunner, TaskTool, Tool};
    /// use tokio_util::sync::CancellationToken;
    /// # struct Echo;
    /// # #[async_trait::async_trait]
    /// # impl SubagentRunner for Echo {
    /// #     async fn run(&self, _: SubagentRequest, _: CancellationToken) -> Result<OutputObject, SubagentError> {
    /// #         Ok(OutputObject::new(TerminateReason::Goal))
    /// #     }
    /// # }
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime").block_on(async {
    /// let tool = TaskTool::new(AsyncTaskManager::default(), Arc::new(Echo))
    ///     .with_launch_budget(LaunchBudget::new(1));
    /// let params = serde_json::json!({"subagent_name": "echo", "goal_prompt": "hi"});
    /// assert!(tool.execute(params.clone(), CancellationToken::new()).await.error.is_none());
    /// let refused = tool.execute(params, CancellationToken::new()).await;
    /// assert!(refused.llm_content.starts_with("Launch limit reached: this session has launched 1 subagents"));
    /// # });
    /// ```
    #[must_use]
    pub fn with_launch_budget(mut self, budget: LaunchBudget) -> Self {
        self.launches = Some(budget);
        self
    }

    /// Says where the host stands among nested subagents (see [`Nesting`]):
    /// its subagents run one deeper, and a launch that would run deeper than
    /// the cap is refused. A call whose [`CallContext`] says otherwise
    /// follows its context. At the top, with no cap, by default.
    #[must_use]
    pub fn with_nesting(mut self, nesting: Nesting) -> Self {
        self.nesting = nesting;
        self
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
    ///
    /// With a [catalog](SubagentRunner::catalog) of at most [`MAX_ENUM_NAMES`]
    /// names of at most [`MAX_ENUM_CHARS`] characters in all, `subagent_name`
    /// also carries an `enum` of them.
    fn parameters(&self, catalog: Option<&[SubagentInfo]>) -> Value {
        let mut parameters = TaskParams::schema();
        let (default, max) = (self.timeouts.default.as_secs(), self.timeouts.max.as_secs());
        if let Some(description) = parameters.pointer_mut("/properties/timeout_seconds/description")
        {
            *description = Value::String(format!(
                "Seconds before the subagent is stopped and the task fails: default {default}, \
                 larger values are capped at {max}; -1 or 0 mean the maximum."
            ));
        }
        let fits_an_enum = |catalog: &&[SubagentInfo]| {
            !catalog.is_empty()
                && catalog.len() <= MAX_ENUM_NAMES
                && catalog
                    .iter()
                    .map(|info| info.name.chars().count())
                    .sum::<usize>()
                    <= MAX_ENUM_CHARS
        };
        if let Some(catalog) = catalog.filter(fits_an_enum)
            && let Some(Value::Object(name)) = parameters.pointer_mut("/properties/subagent_name")
        {
            let names = catalog.iter().map(|info| Value::String(info.name.clone()));
            name.insert("enum".to_owned(), Value::Array(names.collect()));
        }
        parameters
    }

    /// The refusal of a subagent name the runner's catalog does not hold, given
    /// before anything is registered or started; `None` when the name is fine.
    fn refuse_unknown_subagent(name: &str, catalog: Option<&[SubagentInfo]>) -> Option<ToolResult> {
        let catalog = catalog?;
        if catalog.iter().any(|info| info.name == name) {
            return None;
        }
        let error = InvalidParams(render::unknown_subagent(name, catalog));
        Some(error.to_tool_result(Self::NAME))
    }

    /// The refusal of a name the runner withholds ([`CatalogNote`]) and
    /// does not offer; `None` for any other name.
    fn refuse_withheld(&self, name: &str, catalog: Option<&[SubagentInfo]>) -> Option<ToolResult> {
        if catalog.is_some_and(|catalog| catalog.iter().any(|info| info.name == name)) {
            return None;
        }
        let note = self.runner.catalog_note()?;
        if !note.withheld.iter().any(|withheld| withheld == name) {
            return None;
        }
        let error = InvalidParams(render::withheld_subagent(name, &note));
        Some(error.to_tool_result(Self::NAME))
    }

    /// What the runner says of the subagents it does not offer (see
    /// [`SubagentRunner::catalog_note`]).
    #[must_use]
    pub fn catalog_note(&self) -> Option<CatalogNote> {
        self.runner.catalog_note()
    }

    /// The timeouts in force.
    #[must_use]
    pub fn timeouts(&self) -> TaskTimeouts {
        self.timeouts
    }
}

impl TaskTool {
    /// The request for the runner — defaults filled in, the timeout resolved and
    /// capped, a fresh id whose first 8 characters no held task shares (the
    /// call context's, when it gives one), a
    /// progress handle and an inbox — and the inbox's sender, for the registry.
    fn request(
        &self,
        params: TaskParams,
        takes_messages: bool,
        depth: u32,
    ) -> (SubagentRequest, Option<InboxSender>) {
        // A subagent that reads no messages gets a closed inbox and no sender
        // is registered: a message to it is refused at once.
        let (sender, inbox) = if takes_messages {
            let (sender, inbox) = Inbox::channel();
            (Some(sender), inbox)
        } else {
            (None, Inbox::closed())
        };
        let run_async = params.run_async.unwrap_or(false);
        // A synchronous run reports into its call's progress, when a server
        // follows the call; a background task gets its own.
        let progress = match (run_async, CallContext::current()) {
            (false, Some(context)) => context.progress,
            _ => TaskProgress::new(),
        };
        let timeout = params
            .timeout_seconds
            .map_or(self.timeouts.default, |t| t.resolve(self.timeouts))
            .min(self.timeouts.max);
        // The serving layer's id, when it drew one to know it first.
        let id = CallContext::current()
            .and_then(|context| context.task_id)
            .unwrap_or_else(|| new_task_id(&self.manager));
        let request = SubagentRequest::new(id, params.subagent_name, params.goal_prompt)
            .with_behaviour_prompts(params.behaviour_prompts.unwrap_or_default())
            .with_tool_whitelist(params.tool_whitelist)
            .with_output_spec(params.output_spec.unwrap_or_default())
            .with_context(params.context.unwrap_or_default())
            .with_timeout(timeout)
            .with_run_async(run_async)
            .with_depth(depth)
            .with_progress(progress)
            .with_inbox(inbox)
            .with_questions(Questions::channel().1);
        (request, sender)
    }

    /// The timeout text for `subagent` under this tool's maximum.
    fn timeout_message(&self, subagent: &str, timeout: Duration) -> String {
        render::timed_out(subagent, timeout, self.timeouts.max)
    }

    /// Registers the task under the limit and starts it in the background —
    /// or, past the limit with room in the queue, queues it: it starts when a
    /// slot frees.
    fn launch(&self, request: SubagentRequest, inbox: Option<InboxSender>) -> ToolResult {
        let id = request.task_id.clone();
        let name = request.subagent_name.clone();
        let starter = Arc::clone(self.starter());
        // A fresh token, not a child of the call's: a background task outlives the
        // request that launched it.
        let token = CancellationToken::new();
        // What a queued task starts with, kept with it (and journaled): it
        // survives a restart.
        let launch = serde_json::to_string(&request).unwrap_or_default();
        let input = RegisterTaskInput::new(id.clone(), name.clone(), request.goal_prompt.clone())
            .with_cancellation(token.clone())
            .with_progress(request.progress.clone())
            .with_launch(launch);
        let input = with_questions(
            with_call_origin(with_inbox(input, inbox)),
            &request.questions,
        );
        // Kept before the registration: a queued task may start before the
        // registration even returns (another task ends meanwhile), and its
        // start takes the request from here.
        starter.keep(request);
        let refusal = match self.manager.register_task(input) {
            Ok(task) if task.status() == AsyncTaskStatus::Queued => {
                self.cancel_if_shutting_down(&id);
                // `None`: it started already (a slot freed meanwhile).
                if let Some(position) = self.manager.queue_position(&id) {
                    let max = self.manager.max_async_tasks().get();
                    return ToolResult::success(
                        render::queued(&name, &id, position, max),
                        format!("Async task queued: **{name}** (`{id}`), position {position}"),
                        json!({ "agentId": id, "async": true, "status": "queued", "queuePosition": position }),
                    );
                }
                return Self::launched(&name, &id);
            }
            Ok(_) => {
                if let Some(request) = starter.take(&id) {
                    self.cancel_if_shutting_down(&id);
                    let span = tracing::info_span!("async_task", task_id = %id, subagent = %name);
                    starter.spawn(request, token, span);
                }
                return Self::launched(&name, &id);
            }
            Err(RegisterError::QueueFull(full)) => {
                (full.to_string(), render::queue_full_refusal(full))
            }
            Err(RegisterError::LimitReached(limit)) => {
                (limit.to_string(), render::limit_refusal(limit))
            }
            Err(err) => (err.to_string(), err.to_string()),
        };
        drop(starter.take(&id));
        let (message, text) = refusal;
        self::refusal(message, text)
    }

    /// The answer to a launch whose task runs.
    fn launched(name: &str, id: &str) -> ToolResult {
        ToolResult::success(
            render::launched(name, id),
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

/// A launch refused before anything started: `message` for the error, `text`
/// for the model and the user.
fn refusal(message: String, text: String) -> ToolResult {
    ToolResult::failure(ToolErrorType::ExecutionFailed, message, text.clone(), text)
}

/// `input`, recording who made the call that launches it (when its server
/// said, see [`CallContext`]).
/// A synchronous result's metadata, with what the task used (`usage`) and
/// how long it ran (`elapsedMs`) when its runner reported usage.
fn with_usage(mut metadata: serde_json::Value, task: &AsyncTaskInfo) -> serde_json::Value {
    if let Some(usage) = task.usage.as_ref().filter(|usage| !usage.is_empty()) {
        metadata["usage"] = serde_json::to_value(usage).unwrap_or_default();
        let from = task.started_at.unwrap_or(task.launched_at);
        let to = task.completed_at.unwrap_or(from);
        metadata["elapsedMs"] = json!(to.saturating_sub(from));
    }
    metadata
}

fn with_call_origin(input: RegisterTaskInput) -> RegisterTaskInput {
    match CallContext::current().and_then(|context| context.origin) {
        Some(origin) => input.with_origin(origin),
        None => input,
    }
}

/// Registers the desk of the run's questions, when it has one.
fn with_questions(input: RegisterTaskInput, questions: &Questions) -> RegisterTaskInput {
    match questions.desk() {
        Some(desk) => input.with_questions(desk),
        None => input,
    }
}

/// Registers the inbox's sender, when the subagent has one.
fn with_inbox(input: RegisterTaskInput, inbox: Option<InboxSender>) -> RegisterTaskInput {
    match inbox {
        Some(inbox) => input.with_inbox(inbox),
        None => input,
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
impl TypedTool for TaskTool {
    type Params = TaskParams;

    fn name(&self) -> &str {
        Self::NAME
    }

    fn spec(&self) -> ToolSpec {
        let catalog = self.runner.catalog();
        ToolSpec::new(
            Self::NAME,
            "Task",
            render::task_description(catalog.as_deref(), self.runner.catalog_note().as_ref()),
            self.parameters(catalog.as_deref()),
        )
        .with_annotations(ToolAnnotations::DEFAULT)
    }

    async fn run(&self, params: TaskParams, cancel: CancellationToken) -> ToolResult {
        let catalog = self.runner.catalog();
        if let Some(refusal) = self.refuse_withheld(&params.subagent_name, catalog.as_deref()) {
            return refusal;
        }
        if let Some(refusal) =
            Self::refuse_unknown_subagent(&params.subagent_name, catalog.as_deref())
        {
            return refusal;
        }
        let takes_messages = self.runner.accepts_messages(&params.subagent_name);
        if self.shutdown.is_cancelled() {
            return ToolResult::failure(
                ToolErrorType::ExecutionFailed,
                render::SHUTTING_DOWN,
                render::SHUTTING_DOWN,
                render::SHUTTING_DOWN,
            );
        }
        let context = CallContext::current();
        let nesting = context
            .as_ref()
            .and_then(|context| context.nesting)
            .unwrap_or(self.nesting);
        if let Err(too_deep) = nesting.admits_launch() {
            return refusal(too_deep.to_string(), render::nesting_refusal(too_deep));
        }
        let budget = context
            .and_then(|context| context.launches)
            .or_else(|| self.launches.clone());
        let ticket = match budget.as_ref().map(LaunchBudget::take).transpose() {
            Ok(ticket) => ticket,
            Err(cap) => return refusal(cap.to_string(), render::launch_cap_refusal(cap)),
        };
        let (request, inbox) = self.request(params, takes_messages, nesting.child_depth());
        if request.run_async {
            // Refused before anything is registered: the launch is given back.
            if let Err(full) = self.runner.admit_background().await {
                return refusal(full.to_string(), render::queue_full_refusal(full));
            }
            let result = self.launch(request, inbox);
            // Refused (the limit, the queue): the launch is given back.
            if result.error.is_none()
                && let Some(ticket) = ticket
            {
                ticket.keep();
            }
            result
        } else {
            if let Some(ticket) = ticket {
                ticket.keep();
            }
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
            self.run_sync(request, inbox, &either).await
        }
    }
}
