//! `end_async_task`: the user's `/task end`, for the model.

use async_trait::async_trait;
use asynctask_manager::AsyncTaskManager;
use asynctask_tools::{
    CallContext, CommandOutputKind, ToolAnnotations, ToolErrorType, ToolParams, ToolResult,
    ToolSpec, TypedTool, end_task_in,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::params::EndAsyncTaskParams;

/// The `end_async_task` tool: cancels a running task by id or unique prefix, with
/// the logic and texts of `/task end` ([`end_task`]); a refusal (unknown,
/// ambiguous or already finished task) is an error result with the same text.
/// Served to a session of several, it ends only the tasks the session owns:
/// another's is not found.
#[derive(Debug, Clone)]
pub(crate) struct EndAsyncTaskTool {
    manager: AsyncTaskManager,
}

impl EndAsyncTaskTool {
    pub(crate) const NAME: &'static str = "end_async_task";

    pub(crate) fn new(manager: AsyncTaskManager) -> Self {
        EndAsyncTaskTool { manager }
    }
}

#[async_trait]
impl TypedTool for EndAsyncTaskTool {
    type Params = EndAsyncTaskParams;

    fn name(&self) -> &str {
        Self::NAME
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            Self::NAME,
            "End Async Task",
            "Cancel a running background async task by its ID or a unique prefix of it. Its \
             subagent is stopped, and the cancellation is reported like any other result.",
            EndAsyncTaskParams::schema(),
        )
        .with_annotations(
            ToolAnnotations::DEFAULT
                .with_idempotent(true)
                .with_open_world(false),
        )
    }

    async fn run(&self, params: EndAsyncTaskParams, _cancel: CancellationToken) -> ToolResult {
        let scope = CallContext::current().and_then(|context| context.scope);
        let output = end_task_in(&self.manager, &params.task_id, scope.as_deref());
        match output.kind {
            CommandOutputKind::Info => {
                ToolResult::success(output.text.clone(), output.text, json!({ "ended": true }))
            }
            CommandOutputKind::Error => {
                let message = output.text.lines().next().unwrap_or_default().to_owned();
                ToolResult::failure(
                    ToolErrorType::ExecutionFailed,
                    message,
                    output.text.clone(),
                    output.text,
                )
            }
        }
    }
}
