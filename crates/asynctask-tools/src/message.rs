//! `message_async_task`: send a message to a running background task (steering),
//! and `/task msg`, its slash-command twin.

use async_trait::async_trait;
use asynctask_manager::{AsyncTaskManager, InboxError, MessageError, TaskSnapshot};
use asynctask_model::AsyncTaskStatus;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::command::CommandOutput;
use crate::context::{TaskScope, current_scope};
use crate::lookup::{LookupError, find_task_in};
use crate::params::{InvalidParams, MessageAsyncTaskParams, ToolParams};
use crate::render;
use crate::result::{ToolErrorType, ToolResult};
use crate::tool::{ToolAnnotations, ToolSpec, TypedTool};

/// Why a message was not queued.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refusal {
    /// The id named no task, or several.
    Lookup(LookupError),
    /// The task has ended, with this status.
    Finished(TaskSnapshot, AsyncTaskStatus),
    /// Its subagent takes no messages at all (registered without an inbox).
    NotTaking(TaskSnapshot),
    /// Its subagent took messages but has stopped reading them (it is
    /// finishing, or it closed its input).
    StoppedReading(TaskSnapshot),
    /// The message itself is malformed (blank, or too long).
    Invalid(InvalidParams),
    /// Its subagent has not read the last messages sent to it.
    Full(TaskSnapshot),
}

/// Queues `message` for the running task named by `task_id` (an id or a unique
/// prefix) among those `scope` includes (all, when `None`). Never changes the
/// task's state. The parameters are checked here, so the tool and `/task msg`
/// refuse the same inputs.
fn send(
    manager: &AsyncTaskManager,
    task_id: &str,
    message: &str,
    scope: Option<&dyn TaskScope>,
) -> Result<TaskSnapshot, Refusal> {
    MessageAsyncTaskParams {
        task_id: task_id.to_owned(),
        message: message.to_owned(),
    }
    .validate()
    .map_err(Refusal::Invalid)?;
    let task = find_task_in(manager, task_id, scope).map_err(Refusal::Lookup)?;
    match manager.send_message(task.id(), message.to_owned()) {
        Ok(()) => Ok(task),
        // It ended between the lookup and the send: report how.
        Err(MessageError::Finished(status)) => {
            let task = manager.task(task.id()).unwrap_or(task);
            Err(Refusal::Finished(task, status))
        }
        Err(MessageError::NotFound) => Err(Refusal::Lookup(LookupError::NotFound {
            query: task_id.to_owned(),
        })),
        Err(MessageError::Inbox(InboxError::Full)) => Err(Refusal::Full(task)),
        Err(MessageError::Inbox(InboxError::Closed)) => Err(Refusal::StoppedReading(task)),
        // `NoInbox`, and any reason a later version adds: nothing was queued.
        Err(_) => Err(Refusal::NotTaking(task)),
    }
}

/// The `message_async_task` tool: sends a message to a running background task,
/// which its subagent reads while it works (to narrow its scope, skip a file,
/// stop after the first failure…).
///
/// Steering is a queue, not an interrupt: the message is handed to the
/// subagent after any earlier ones, and what it does with it is up to the
/// subagent. Nothing answers the message except the task's result. Only
/// subagents whose runner says they read messages
/// ([`SubagentRunner::accepts_messages`](crate::SubagentRunner::accepts_messages))
/// take them.
///
/// `task_id` is an id or a unique prefix (the same lookup, scope and texts as
/// `check_async_tasks`); `message` is not blank and at most
/// [`MAX_MESSAGE_CHARS`](crate::MAX_MESSAGE_CHARS) characters. The answer says the
/// message was queued, or refuses it with a text that says what to do instead:
/// for a finished task (naming its status: launch a new task with its result as
/// context), for a subagent that takes no messages, for one that has stopped
/// reading them, and for one that has not read its last messages. A message never changes a task's state, and messages
/// to one task are never seen by another.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, Inbox, RegisterTaskInput};
/// use asynctask_tools::{MessageAsyncTaskTool, Tool};
/// use tokio_util::sync::CancellationToken;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let manager = AsyncTaskManager::default();
/// let (sender, inbox) = Inbox::channel();
/// manager.register_task(RegisterTaskInput::new("0f3a9c21-1", "tester", "run the tests").with_inbox(sender)).unwrap();
/// let tool = MessageAsyncTaskTool::new(manager);
/// let params = serde_json::json!({"task_id": "0f3a", "message": "only the io tests"});
/// let sent = tool.execute(params, CancellationToken::new()).await;
/// assert!(sent.llm_content.starts_with("Message queued for async task 0f3a9c21-1"));
/// assert_eq!(inbox.try_recv().as_deref(), Some("only the io tests"));
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct MessageAsyncTaskTool {
    manager: AsyncTaskManager,
}

impl MessageAsyncTaskTool {
    /// The tool's name.
    pub const NAME: &'static str = "message_async_task";

    /// A tool sending to the tasks of `manager`.
    #[must_use]
    pub fn new(manager: AsyncTaskManager) -> Self {
        MessageAsyncTaskTool { manager }
    }
}

#[async_trait]
impl TypedTool for MessageAsyncTaskTool {
    type Params = MessageAsyncTaskParams;

    fn name(&self) -> &str {
        Self::NAME
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            Self::NAME,
            "Message Async Task",
            render::MESSAGE_TOOL_DESCRIPTION,
            MessageAsyncTaskParams::schema(),
        )
        .with_annotations(
            ToolAnnotations::DEFAULT
                .with_destructive(false)
                .with_open_world(false),
        )
    }

    async fn run(&self, params: MessageAsyncTaskParams, _cancel: CancellationToken) -> ToolResult {
        match send(
            &self.manager,
            &params.task_id,
            &params.message,
            current_scope().as_deref(),
        ) {
            Ok(task) => {
                let text = render::message_queued(&task);
                ToolResult::success(
                    text,
                    format!(
                        "Message sent to **{}** (`{}`)",
                        task.subagent_name(),
                        task.id()
                    ),
                    json!({ "agentId": task.id(), "queued": true }),
                )
            }
            Err(Refusal::Lookup(error)) => error.to_tool_result(),
            Err(Refusal::Invalid(error)) => error.to_tool_result(Self::NAME),
            Err(refusal) => {
                let (short, text) = refusal_texts(&refusal);
                let result =
                    ToolResult::failure(ToolErrorType::ExecutionFailed, short, text.clone(), text);
                match refused_task(&refusal) {
                    Some((task, status)) => result.with_metadata(
                        json!({ "agentId": task.id(), "status": status.to_string() }),
                    ),
                    None => result,
                }
            }
        }
    }
}

/// A refusal's short message and its full text.
fn refusal_texts(refusal: &Refusal) -> (&'static str, String) {
    match refusal {
        Refusal::Finished(task, status) => (
            "Task already finished",
            render::message_to_finished(task, *status),
        ),
        Refusal::NotTaking(task) => (
            "Subagent takes no messages",
            render::message_not_taken(task),
        ),
        Refusal::StoppedReading(task) => (
            "Subagent stopped reading messages",
            render::message_stopped_reading(task),
        ),
        Refusal::Full(task) => ("Inbox full", render::message_inbox_full(task)),
        Refusal::Lookup(error) => ("Task not found", error.to_string()),
        Refusal::Invalid(error) => ("Invalid message", error.to_string()),
    }
}

/// The task a refusal is about, when it found one.
fn refused_task(refusal: &Refusal) -> Option<(&TaskSnapshot, AsyncTaskStatus)> {
    match refusal {
        Refusal::Finished(task, status) => Some((task, *status)),
        Refusal::NotTaking(task) | Refusal::StoppedReading(task) | Refusal::Full(task) => {
            Some((task, task.status()))
        }
        Refusal::Lookup(_) | Refusal::Invalid(_) => None,
    }
}

/// Sends `message` to the running task `task_id` (an id or a unique prefix,
/// exact match first): the logic of `/task msg <id> <text>`, for any caller
/// that steers tasks on the user's behalf. The texts are the tool's, except
/// that an unknown or ambiguous id answers as `/task end` does.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, Inbox, RegisterTaskInput};
/// use asynctask_tools::{CommandOutputKind, message_task};
///
/// let manager = AsyncTaskManager::default();
/// let (sender, inbox) = Inbox::channel();
/// manager.register_task(RegisterTaskInput::new("0f3a9c21-1", "tester", "g").with_inbox(sender))?;
/// let out = message_task(&manager, "0f3a", "skip the benches");
/// assert_eq!(out.kind, CommandOutputKind::Info);
/// assert_eq!(inbox.try_recv().as_deref(), Some("skip the benches"));
/// let missing = message_task(&manager, "ffff", "hello");
/// assert_eq!((missing.kind, missing.text.as_str()), (CommandOutputKind::Error, "Task not found: ffff"));
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[must_use]
pub fn message_task(manager: &AsyncTaskManager, task_id: &str, message: &str) -> CommandOutput {
    match send(manager, task_id, message, None) {
        Ok(task) => CommandOutput::info(render::message_queued(&task)),
        Err(Refusal::Lookup(error)) => error.to_command_output(),
        Err(refusal) => CommandOutput::error(refusal_texts(&refusal).1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_manager::{Inbox, RegisterTaskInput};
    use pretty_assertions::assert_eq;

    #[test]
    fn a_message_to_a_task_that_ended_meanwhile_names_its_status() {
        let manager = AsyncTaskManager::default();
        let (sender, _inbox) = Inbox::channel();
        manager
            .register_task(RegisterTaskInput::new("a", "tester", "g").with_inbox(sender))
            .expect("registered");
        manager.cancel_task("a");
        match send(&manager, "a", "hello", None) {
            Err(Refusal::Finished(task, status)) => {
                assert_eq!(
                    (task.status(), status),
                    (AsyncTaskStatus::Cancelled, AsyncTaskStatus::Cancelled)
                );
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(
            manager.task("a").map(|t| t.status()),
            Some(AsyncTaskStatus::Cancelled)
        );
    }
}
