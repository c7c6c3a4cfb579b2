//! `answer_async_task`: answer the question a running task's subagent asked.

use async_trait::async_trait;
use asynctask_manager::{Answer, AsyncTaskManager};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::current_scope;
use crate::lookup::find_task_in;
use crate::params::{AnswerAsyncTaskParams, ToolParams};
use crate::render;
use crate::result::{ToolErrorType, ToolResult};
use crate::tool::{ToolAnnotations, ToolSpec, TypedTool};

/// The `answer_async_task` tool: answers (or declines) the question a running
/// background task's subagent asked and waits on.
///
/// Each question takes one answer ([`AsyncTaskManager::answer_question`]):
/// the oldest waiting question of the task gets it, and a task that waits for
/// none refuses it with a text that says so (and that `message_async_task`
/// steers). Within a call whose [`CallContext`](crate::CallContext) has a
/// scope, a task out of it is not found. `task_id` is an id or a unique prefix; `answer` is not blank and
/// at most [`MAX_MESSAGE_CHARS`](crate::MAX_MESSAGE_CHARS) characters, or
/// `decline: true` stands in its place.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{Answer, AsyncTaskManager, Question, Questions, RegisterTaskInput};
/// use asynctask_tools::{AnswerAsyncTaskTool, Tool};
/// use tokio_util::sync::CancellationToken;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let manager = AsyncTaskManager::default();
/// let (desk, questions) = Questions::channel();
/// manager.register_task(RegisterTaskInput::new("0f3a9c21-1", "deployer", "ship it").with_questions(desk)).unwrap();
/// let asking = questions.ask(Question::new("Deploy to production too?").with_choices(["yes", "no"]));
/// let tool = AnswerAsyncTaskTool::new(manager);
/// let sent = tool.execute(serde_json::json!({"task_id": "0f3a", "answer": "no"}), CancellationToken::new()).await;
/// assert!(sent.llm_content.starts_with("Answer sent to async task 0f3a9c21-1"));
/// assert_eq!(asking.await, Answer::Answered("no".into()));
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct AnswerAsyncTaskTool {
    manager: AsyncTaskManager,
}

impl AnswerAsyncTaskTool {
    /// The tool's name.
    pub const NAME: &'static str = "answer_async_task";

    /// A tool answering the questions of `manager`'s tasks.
    #[must_use]
    pub fn new(manager: AsyncTaskManager) -> Self {
        AnswerAsyncTaskTool { manager }
    }
}

#[async_trait]
impl TypedTool for AnswerAsyncTaskTool {
    type Params = AnswerAsyncTaskParams;

    fn name(&self) -> &str {
        Self::NAME
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            Self::NAME,
            "Answer Async Task",
            render::ANSWER_TOOL_DESCRIPTION,
            AnswerAsyncTaskParams::schema(),
        )
        .with_annotations(
            ToolAnnotations::DEFAULT
                .with_destructive(false)
                .with_open_world(false),
        )
    }

    async fn run(&self, params: AnswerAsyncTaskParams, _cancel: CancellationToken) -> ToolResult {
        let task = match find_task_in(&self.manager, &params.task_id, current_scope().as_deref()) {
            Ok(task) => task,
            Err(error) => return error.to_tool_result(),
        };
        let declined = params.answer.is_none();
        let answer = params.answer.map_or(Answer::Declined, Answer::Answered);
        match self.manager.answer_question(task.id(), answer) {
            Ok(()) => ToolResult::success(
                render::answer_sent(&task, declined),
                format!("Answered **{}** (`{}`)", task.subagent_name(), task.id()),
                json!({ "agentId": task.id(), "answered": !declined, "declined": declined }),
            ),
            Err(_) => {
                let task = self.manager.task(task.id()).unwrap_or(task);
                let text = render::answer_not_asked(&task);
                ToolResult::failure(
                    ToolErrorType::ExecutionFailed,
                    "Not waiting for an answer",
                    text.clone(),
                    text,
                )
                .with_metadata(json!({ "agentId": task.id(), "status": task.status().to_string() }))
            }
        }
    }
}
