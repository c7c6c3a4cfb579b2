//! The tools the model calls to work with background subagents, and the user's
//! slash commands: the layer on `asynctask-manager` that the runtime, the
//! process runner and the MCP server build on.
//!
//! - [`TaskTool`] — `task`, which runs a subagent through the host's
//!   [`SubagentRunner`], synchronously or (with `async: true`) in the background,
//!   registering it atomically under the limit, with a per-task timeout, panic
//!   capture and real cancellation;
//! - [`CheckAsyncTasksTool`] — `check_async_tasks`, the list and peek views;
//! - [`MessageAsyncTaskTool`] — `message_async_task`, which steers a running task;
//! - [`TodoPauseTool`] — `todo_pause`, which reports a blocker to the runtime;
//! - [`run_slash_command`] — the user's `/tasks list` (or `/task list`),
//!   `/task end <id>` and `/task msg <id> <text>`;
//! - [`ToolSpec`] — each tool's canonical JSON Schema and its adapters for
//!   OpenAI, Anthropic, Amazon Bedrock, Gemini and MCP ([`Provider`]).
//!
//! A tool's arguments are parsed into a typed struct that rejects unknown fields:
//! bad input is a [`ToolResult`] whose error names the field, never a panic.
//! Every text the model reads keeps one wording and is snapshot-tested.
//!
//! What it does not do: deliver results (the runtime does), run subagents (the
//! host's [`SubagentRunner`] does), or know a transport (a serving layer words
//! what depends on one, such as [`SyncDetach`]'s follow-up).
//!
//! # Example
//!
//! ```
//! use asynctask_manager::AsyncTaskManager;
//! use asynctask_tools::{CheckAsyncTasksTool, Tool};
//! use tokio_util::sync::CancellationToken;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let tool = CheckAsyncTasksTool::new(AsyncTaskManager::default());
//! let result = tool.execute(serde_json::json!({}), CancellationToken::new()).await;
//! assert_eq!(result.llm_content, "No async tasks.");
//! let bad = tool.execute(serde_json::json!({"task_id": 7}), CancellationToken::new()).await;
//! assert!(bad.error.unwrap().message.contains("task_id"));
//! # });
//! ```

mod answer;
mod catalog;
mod check_async_tasks;
mod command;
mod context;
mod format;
mod ids;
mod launch;
mod lookup;
mod message;
mod params;
mod render;
mod result;
mod schema;
mod slash;
mod task;
mod terminal;
mod todo_pause;
mod tool;

pub use crate::answer::AnswerAsyncTaskTool;
pub use crate::catalog::{CatalogNote, SubagentInfo};
pub use crate::check_async_tasks::{CheckAsyncTasksTool, PEEK_BUDGET_CHARS, PEEK_OUTPUT_LINES};
pub use crate::command::{CommandOutput, CommandOutputKind};
pub use crate::context::{CallContext, TaskScope, with_call_context};
pub use crate::format::{
    ECHO_CHARS, ID_PREFIX_CHARS, WHOLE_OUTPUT_PREFIX, bound_text, bound_text_keeping_pointer,
    format_duration, format_usage, id_prefix, iso_time, truncate_chars, whole_output_line,
};
pub use crate::ids::new_task_id;
pub use crate::launch::{
    DEPTH_ENV, LaunchBudget, LaunchCapReached, LaunchTicket, Nesting, NestingTooDeep, TASK_ID_ENV,
};
pub use crate::lookup::{LookupError, find_task, find_task_in};
pub use crate::message::{MessageAsyncTaskTool, message_task};
pub use crate::params::{
    AnswerAsyncTaskParams, CheckAsyncTasksParams, ContextVar, InvalidParams, MAX_MESSAGE_CHARS,
    MessageAsyncTaskParams, OutputVarSpec, TaskParams, TaskTimeouts, TimeoutSeconds,
    TodoPauseParams, ToolParams, at_most_chars, is_blank, non_blank,
};
pub use crate::render::{TASK_DESCRIPTION_LEAD, completion_notification, question_notice};
pub use crate::result::{ToolError, ToolErrorType, ToolResult};
pub use crate::slash::{complete_task_ids, end_task, end_task_in, run_slash_command};
pub use crate::task::{
    KEPT_TASK_FILES, MAX_ENUM_CHARS, MAX_ENUM_NAMES, SubagentError, SubagentRequest,
    SubagentRunner, SyncDetach, TaskTool,
};
pub use crate::terminal::{
    escape_for_terminal, escape_for_terminal_keeping_lines, is_bidi_control,
};
pub use crate::todo_pause::{PauseSignal, TodoPauseTool};
pub use crate::tool::{Provider, Tool, ToolAnnotations, ToolSpec, TypedTool, UnknownProvider};
