//! `end_async_task`: the user's `/task end`, for the model.

use async_trait::async_trait;
use asynctask_manager::AsyncTaskManager;
use asynctask_tools::{
    CommandOutputKind, Tool, ToolAnnotations, ToolErrorType, ToolParams, ToolResult, ToolSpec,
    end_task,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::params::EndAsyncTaskParams;

/// The `end_async_task` tool: cancels a running task by id or unique prefix, with
/// the logic and texts of `/task end` ([`end_task`]); a refusal (unknown,
/// ambiguous or already finished task) is an error result with the same text.
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
impl Tool for EndAsyncTaskTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: Self::NAME.to_owned(),
            display_name: "End Async Task".to_owned(),
            description: "Cancel a running background async task by its ID or a unique prefix \
                of it. Its subagent is stopped, and the cancellation is reported like any other \
                result."
                .to_owned(),
            parameters: EndAsyncTaskParams::schema(),
            annotations: ToolAnnotations {
                read_only: false,
                destructive: true,
                idempotent: true,
                open_world: false,
            },
        }
    }

    async fn execute(&self, params: Value, _cancel: CancellationToken) -> ToolResult {
        let params = match EndAsyncTaskParams::parse(params) {
            Ok(params) => params,
            Err(err) => return err.to_tool_result(Self::NAME),
        };
        let output = end_task(&self.manager, &params.task_id);
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
