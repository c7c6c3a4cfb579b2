//! The runner contract: what the `task` tool asks of the host's subagents.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use asynctask_model::OutputObject;
use tokio_util::sync::CancellationToken;

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
}

/// Everything the model asked of a subagent. Serializable, for runners that hand
/// the request to another process (`timeout` as `{secs, nanos}`).
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
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
}

impl SubagentRequest {
    /// The default timeout of a request built with [`new`](Self::new): 900 s,
    /// the `task` tool's default.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(900);

    /// A synchronous request with no behaviour prompts, tool whitelist, output
    /// spec or context, and the [default timeout](Self::DEFAULT_TIMEOUT).
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

    /// The same error, caused by `source`.
    #[must_use]
    pub fn with_source(mut self, source: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
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
