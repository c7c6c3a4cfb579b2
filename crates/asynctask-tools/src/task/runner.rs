//! The runner contract: what the `task` tool asks of the host's subagents.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use asynctask_manager::{Inbox, Questions, QueueFull, TaskProgress};
use asynctask_model::OutputObject;
use tokio_util::sync::CancellationToken;

use crate::catalog::{CatalogNote, SubagentInfo};
use crate::params::{ContextVar, OutputVarSpec};

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

    /// The subagents this runner knows. `None` (the default): any name goes to
    /// `run`. `Some`: the `task` tool lists them (name and description) in its
    /// description and as an `enum` on `subagent_name`, and refuses any other
    /// name before registering anything.
    fn catalog(&self) -> Option<Vec<SubagentInfo>> {
        None
    }

    /// What the model should know about subagents this runner does not
    /// offer (see [`CatalogNote`]). `None` (the default): nothing.
    fn catalog_note(&self) -> Option<CatalogNote> {
        None
    }

    /// Whether `subagent` reads its [inbox](SubagentRequest::inbox) while it
    /// runs. The `task` tool gives any other subagent a closed inbox and
    /// registers no sender, so `message_async_task` refuses messages to it at
    /// once instead of queueing them for nobody.
    ///
    /// The default asks the [catalog](Self::catalog)
    /// ([`SubagentInfo::accepts_messages`]); without a catalog, no subagent
    /// takes messages. A runner without a catalog whose subagents read their
    /// inbox overrides this.
    fn accepts_messages(&self, subagent: &str) -> bool {
        self.catalog().is_some_and(|catalog| {
            catalog
                .iter()
                .any(|info| info.name == subagent && info.accepts_messages)
        })
    }

    /// Whether a background launch may be registered now, for a runner whose
    /// tasks wait somewhere other than this registry's queue (a fleet's
    /// database, behind a limit shared with other hosts). `Err` refuses the
    /// launch with the same text as the registry's own full queue, before
    /// anything is registered. The default admits every launch: the
    /// registry's limit and queue decide.
    async fn admit_background(&self) -> Result<(), QueueFull> {
        Ok(())
    }

    /// Ends every subagent this runner is running, at once and without grace:
    /// the host is exiting now (a termination signal, with a deadline of its
    /// own). The runs then end as their subagents die. The default does
    /// nothing: each run still hears of the end through its cancellation
    /// token, with the usual grace.
    fn terminate_all(&self) {}

    /// Nothing will ask for task `task_id` again, and a file a result named
    /// has been readable for long: drop whatever was kept for it (its output
    /// files, say). The [`TaskTool`](crate::TaskTool) calls it
    /// [`KEPT_TASK_FILES`](crate::KEPT_TASK_FILES) tasks later. It may come
    /// for a task this runner never ran, or ran in an earlier process, and
    /// must never block for long or panic. The default keeps nothing, so does
    /// nothing.
    fn forget(&self, task_id: &str) {
        let _ = task_id;
    }
}

/// Everything the model asked of a subagent, and the two handles the runner
/// reports and listens through. Serializable, for runners that hand the request
/// to another process (`timeout` as `{secs, nanos}`; the handles are not
/// serialized); two requests are equal when everything but the handles is.
///
/// The `task` tool builds it; a host builds one (for a test, or to call a runner
/// directly) with [`new`](Self::new) and the `with_*` methods, since fields may
/// be added.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use asynctask_tools::SubagentRequest;
///
/// let request = SubagentRequest::new("task-1", "researcher", "map the code")
///     .with_timeout(Duration::from_secs(60))
///     .with_behaviour_prompts(vec!["be brief".to_owned()]);
/// assert_eq!(request.timeout, Duration::from_secs(60));
/// assert!(!request.run_async);
/// ```
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
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
    /// How deep the subagent runs among nested subagents: 1 for one the host
    /// launched, 2 for one a subagent launched through a server of ours, and
    /// so on. A runner passes it on ([`DEPTH_ENV`](crate::DEPTH_ENV), for a
    /// process), so that what the subagent launches is one deeper.
    #[serde(default = "top_depth")]
    pub depth: u32,
    /// Where the runner reports what its subagent is doing (the last lines of
    /// its output, and where the whole output is kept), for `check_async_tasks`,
    /// `/tasks list` and progress notifications to show while it runs.
    #[serde(skip)]
    pub progress: TaskProgress,
    /// Messages the model or the user sent to the running task, in order. A
    /// runner reads them whenever it likes, or [closes](Inbox::close) the inbox
    /// if it takes none (then senders are told so).
    #[serde(skip)]
    pub inbox: Inbox,
    /// Where the subagent asks a question and waits for its answer (see
    /// [`Questions`]): the `task` tool registers the other end with the task,
    /// so the model, the user or the host answers. A request built with
    /// [`new`](Self::new) has none: every question is withdrawn at once.
    #[serde(skip)]
    pub questions: Questions,
}

/// The depth of a request that does not say (launched by the host itself).
fn top_depth() -> u32 {
    1
}

impl PartialEq for SubagentRequest {
    fn eq(&self, other: &Self) -> bool {
        self.task_id == other.task_id
            && self.subagent_name == other.subagent_name
            && self.goal_prompt == other.goal_prompt
            && self.behaviour_prompts == other.behaviour_prompts
            && self.tool_whitelist == other.tool_whitelist
            && self.output_spec == other.output_spec
            && self.context == other.context
            && self.timeout == other.timeout
            && self.run_async == other.run_async
            && self.depth == other.depth
    }
}

impl Eq for SubagentRequest {}

impl SubagentRequest {
    /// The default timeout of a request built with [`new`](Self::new): 900 s,
    /// the `task` tool's default.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(900);

    /// A synchronous request with no behaviour prompts, tool whitelist, output
    /// spec or context, the [default timeout](Self::DEFAULT_TIMEOUT), a fresh
    /// progress handle and a closed inbox.
    #[must_use]
    pub fn new(
        task_id: impl Into<String>,
        subagent_name: impl Into<String>,
        goal_prompt: impl Into<String>,
    ) -> Self {
        SubagentRequest {
            task_id: task_id.into(),
            subagent_name: subagent_name.into(),
            goal_prompt: goal_prompt.into(),
            behaviour_prompts: Vec::new(),
            tool_whitelist: None,
            output_spec: Vec::new(),
            context: Vec::new(),
            timeout: Self::DEFAULT_TIMEOUT,
            run_async: false,
            depth: 1,
            progress: TaskProgress::new(),
            inbox: Inbox::closed(),
            questions: Questions::none(),
        }
    }

    /// Replaces the behaviour prompts.
    #[must_use]
    pub fn with_behaviour_prompts(mut self, prompts: Vec<String>) -> Self {
        self.behaviour_prompts = prompts;
        self
    }

    /// Replaces the tool whitelist.
    #[must_use]
    pub fn with_tool_whitelist(mut self, tools: Option<Vec<String>>) -> Self {
        self.tool_whitelist = tools;
        self
    }

    /// Replaces the output spec.
    #[must_use]
    pub fn with_output_spec(mut self, spec: Vec<OutputVarSpec>) -> Self {
        self.output_spec = spec;
        self
    }

    /// Replaces the context.
    #[must_use]
    pub fn with_context(mut self, context: Vec<ContextVar>) -> Self {
        self.context = context;
        self
    }

    /// Replaces the timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Marks the request as a background run.
    #[must_use]
    pub fn with_run_async(mut self, run_async: bool) -> Self {
        self.run_async = run_async;
        self
    }

    /// Replaces the depth (1 by default: launched by the host itself).
    #[must_use]
    pub fn with_depth(mut self, depth: u32) -> Self {
        self.depth = depth;
        self
    }

    /// Replaces the progress handle.
    #[must_use]
    pub fn with_progress(mut self, progress: TaskProgress) -> Self {
        self.progress = progress;
        self
    }

    /// Replaces the inbox.
    #[must_use]
    pub fn with_inbox(mut self, inbox: Inbox) -> Self {
        self.inbox = inbox;
        self
    }

    /// Replaces the questions handle.
    #[must_use]
    pub fn with_questions(mut self, questions: Questions) -> Self {
        self.questions = questions;
        self
    }
}

/// A subagent failed; the message becomes the task's error.
///
/// It may carry the error that caused it ([`with_source`](Self::with_source)),
/// for the host's logs; the model reads only the message.
///
/// # Examples
///
/// ```
/// use std::error::Error as _;
/// use asynctask_tools::SubagentError;
///
/// let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
/// let error = SubagentError::new("cannot start 'agent'").with_source(io);
/// assert_eq!(error.to_string(), "cannot start 'agent'");
/// assert_eq!(error.source().map(|s| s.to_string()).as_deref(), Some("no such file"));
/// ```
#[derive(Clone, thiserror::Error)]
#[error("{message}")]
pub struct SubagentError {
    message: String,
    #[source]
    source: Option<Arc<dyn Error + Send + Sync>>,
}

impl SubagentError {
    /// An error with this message.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        SubagentError {
            message: message.into(),
            source: None,
        }
    }

    /// The message followed by every cause, each after `: ` (what a log
    /// line shows; the model reads only [`message`](Self::message)).
    ///
    /// ```
    /// use asynctask_tools::SubagentError;
    /// let io = std::io::Error::other("disk full");
    /// let error = SubagentError::new("cannot write the output").with_source(io);
    /// assert_eq!(error.chain(), "cannot write the output: disk full");
    /// ```
    #[must_use]
    pub fn chain(&self) -> String {
        let mut text = self.message.clone();
        let mut cause = Error::source(self);
        while let Some(error) = cause {
            text.push_str(": ");
            text.push_str(&error.to_string());
            cause = error.source();
        }
        text
    }

    /// The same error, caused by `source`.
    #[must_use]
    pub fn with_source(mut self, source: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The same error, its message followed by `text` (a note added on the
    /// way out: where the subagent's output is kept, say).
    ///
    /// ```
    /// use asynctask_tools::SubagentError;
    /// let error = SubagentError::new("exited with status 2").with_suffix(" (after 3 retries)");
    /// assert_eq!(error.message(), "exited with status 2 (after 3 retries)");
    /// ```
    #[must_use]
    pub fn with_suffix(mut self, text: &str) -> Self {
        self.message.push_str(text);
        self
    }

    /// The message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Debug for SubagentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubagentError")
            .field("message", &self.message)
            .field("source", &self.source.as_ref().map(ToString::to_string))
            .finish()
    }
}

/// Two errors are equal when their messages are (the source is for logs).
impl PartialEq for SubagentError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl Eq for SubagentError {}
