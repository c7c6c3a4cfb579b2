//! What a serving layer tells the tools about the call being served: where a
//! synchronous run reports progress, who made the call, which tasks it may
//! see, and the caps of the caller's session.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use asynctask_manager::{TaskProgress, TaskSnapshot};

use crate::launch::{LaunchBudget, Nesting};

tokio::task_local! {
    static CALL: CallContext;
}

/// What a serving layer (an MCP server, say) knows about the tool call being
/// served, set around the call with [`with_call_context`]: where a synchronous
/// `task` run reports progress, who made the call ([`origin`](Self::origin),
/// recorded on the tasks it launches), and the session's caps
/// ([launches](Self::launches), [nesting](Self::nesting)). Outside any
/// context: a fresh progress, no origin, the `task` tool's own caps.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use asynctask_manager::AsyncTaskManager;
/// use asynctask_model::{OutputObject, TerminateReason};
/// use asynctask_tools::{CallContext, SubagentError, SubagentRequest, SubagentRunner, TaskTool, Tool, with_call_context};
/// use tokio_util::sync::CancellationToken;
///
/// struct Chatty;
/// #[async_trait::async_trait]
/// impl SubagentRunner for Chatty {
///     async fn run(&self, request: SubagentRequest, _cancel: CancellationToken) -> Result<OutputObject, SubagentError> {
///         request.progress.report("step 1 of 2 done");
///         Ok(OutputObject::new(TerminateReason::Goal))
///     }
/// }
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let manager = AsyncTaskManager::default();
/// let tool = TaskTool::new(manager.clone(), Arc::new(Chatty));
/// let context = CallContext::new().with_origin("session-a");
/// let params = serde_json::json!({"subagent_name": "chatty", "goal_prompt": "work"});
/// with_call_context(context.clone(), tool.execute(params, CancellationToken::new())).await;
/// assert_eq!(context.progress.snapshot().last_line(), Some("step 1 of 2 done"));
/// let params = serde_json::json!({"subagent_name": "chatty", "goal_prompt": "work", "async": true});
/// let launched = with_call_context(context, tool.execute(params, CancellationToken::new())).await;
/// let id = launched.metadata["agentId"].as_str().unwrap();
/// assert_eq!(manager.origin(id).as_deref(), Some("session-a"));
/// # });
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct CallContext {
    /// Where a synchronous `task` run reports its subagent's output.
    pub progress: TaskProgress,
    /// Who made the call, recorded as the origin of the tasks it launches.
    pub origin: Option<String>,
    /// The launches the caller's session has left; `None`: the `task` tool's
    /// own budget applies, if it has one.
    pub launches: Option<LaunchBudget>,
    /// How deep the caller is nested; `None`: the `task` tool's own nesting
    /// applies.
    pub nesting: Option<Nesting>,
    /// The project the serving layer's subagents work in, when it has one:
    /// `check_async_tasks` shows it in a task's details.
    pub project: Option<std::path::PathBuf>,
    /// Which tasks the caller may see and act on, when several callers share
    /// one registry; `None`: every task.
    pub scope: Option<Arc<dyn TaskScope>>,
    /// The id the task a `task` call launches takes, drawn by the serving
    /// layer with [`new_task_id`](crate::new_task_id) when it must know the
    /// id before the launch can finish (one that follows the task as its
    /// client's own, before its result could go anywhere else); `None`: the
    /// tool draws one.
    pub task_id: Option<String>,
}

impl CallContext {
    /// A context with a fresh progress and no origin.
    #[must_use]
    pub fn new() -> Self {
        CallContext::default()
    }

    /// Replaces the progress handle.
    #[must_use]
    pub fn with_progress(mut self, progress: TaskProgress) -> Self {
        self.progress = progress;
        self
    }

    /// Names who makes the call.
    #[must_use]
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = Some(origin.into());
        self
    }

    /// Counts the launches of the call against `budget` (the session's).
    #[must_use]
    pub fn with_launches(mut self, budget: LaunchBudget) -> Self {
        self.launches = Some(budget);
        self
    }

    /// Says how deep the caller is nested (a session whose client runs
    /// inside one of our subagents).
    #[must_use]
    pub fn with_nesting(mut self, nesting: Nesting) -> Self {
        self.nesting = Some(nesting);
        self
    }

    /// Names the project the subagents work in.
    #[must_use]
    pub fn with_project(mut self, project: impl Into<std::path::PathBuf>) -> Self {
        self.project = Some(project.into());
        self
    }

    /// Limits what the call sees and acts on to the tasks `scope` includes
    /// (see [`TaskScope`]).
    #[must_use]
    pub fn with_scope(mut self, scope: Arc<dyn TaskScope>) -> Self {
        self.scope = Some(scope);
        self
    }

    /// Whether the caller may see and act on `task`: every task without a
    /// [`scope`](Self::scope).
    #[must_use]
    pub fn includes(&self, task: &TaskSnapshot) -> bool {
        self.scope.as_ref().is_none_or(|scope| scope.includes(task))
    }

    /// Gives the task the call launches the id `id` (see
    /// [`task_id`](Self::task_id)).
    #[must_use]
    pub fn with_task_id(mut self, id: impl Into<String>) -> Self {
        self.task_id = Some(id.into());
        self
    }

    /// The context of the call being served, if its server set one.
    #[must_use]
    pub fn current() -> Option<CallContext> {
        CALL.try_with(Clone::clone).ok()
    }
}

/// Which tasks a caller may see and act on, when several callers share one
/// registry (the sessions of a durable supervisor, say): the model's tools
/// that list, peek at, message, answer, wait on or end tasks treat a task
/// the scope leaves out as one that does not exist, with the same text. A
/// user's slash commands take no scope: people see every task.
pub trait TaskScope: Send + Sync + fmt::Debug {
    /// Whether the caller may see and act on `task`. It may record that the
    /// caller now owns `task` (a task whose owner went away passes to the
    /// next caller that looks).
    fn includes(&self, task: &TaskSnapshot) -> bool;
}

/// The scope of the call being served: `None` outside any call, or for a
/// call that may see every task.
pub(crate) fn current_scope() -> Option<Arc<dyn TaskScope>> {
    CallContext::current().and_then(|context| context.scope)
}

/// Runs `call` — one tool call — with `context` (see [`CallContext`]).
pub async fn with_call_context<F: Future>(context: CallContext, call: F) -> F::Output {
    CALL.scope(context, call).await
}
