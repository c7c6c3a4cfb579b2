//! An MCP server that gives any MCP client background subagents: on
//! `asynctask-runtime`, it serves the runtime's tools over the Model Context
//! Protocol (rmcp, on stdio) to Claude Code, Codex CLI, Gemini CLI, Cursor…
//!
//! - [`AsyncTaskMcpServer`] serves the runtime's tools and this crate's
//!   `wait_async_tasks` and `end_async_task`, each listed as its
//!   [`ToolSpec::to_mcp`](asynctask_tools::ToolSpec::to_mcp);
//! - [`serve_stdio`] is `asynctask mcp`; [`AsyncTaskMcpServer::serve_relayed`]
//!   serves one session behind a relay (durable serving builds on it);
//! - the wire is ours ([`LineReader`]): one answer to every request; a client
//!   that reads no answers is not read.
//!
//! Results **ride on tool results**: the pending `System Note` reminder is the
//! last text block of every call not cancelled. Each result is claimed by one
//! call and marked delivered once the response carrying it was written (behind
//! a relay: confirmed); a call cancelled before that releases it. A client that
//! declares the MCP Tasks extension gets a task for a `task` call, whose
//! `tasks/get` polls take its result through the same claims ([`TASK_TTL`]).
//!
//! It runs no subagents (a [`SubagentRunner`](asynctask_tools::SubagentRunner)
//! does), serves no `todo_pause`, and writes only the protocol to stdout.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use asynctask_mcp::AsyncTaskMcpServer;
//! use asynctask_runtime::AsyncTaskRuntime;
//! use tokio_util::sync::CancellationToken;
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let runtime = Arc::new(AsyncTaskRuntime::builder().build());
//! let server = AsyncTaskMcpServer::new(Arc::clone(&runtime)).expect("valid tools");
//! let args = serde_json::json!({"timeout_seconds": 1});
//! let waited = server.call("wait_async_tasks", args, CancellationToken::new()).await.unwrap();
//! let text = serde_json::to_value(&waited.content).unwrap()[0]["text"].clone();
//! assert_eq!(text, "No async tasks are running.");
//! runtime.shutdown().await;
//! # });
//! ```

mod elicit;
mod end;
#[cfg(test)]
mod fuzz;
mod gate;
mod opening;
mod options;
mod params;
mod server;
mod session;
mod stdio;
mod tasks;
mod transport;
mod wait;
mod wire;

pub use crate::opening::{
    DropAnswer, MAX_OPENING_BYTES, MAX_OPENING_LINES, Opening, ROOTS_TIMEOUT, answers, open_session,
};
pub use crate::options::{McpError, McpServerOptions};
pub use crate::params::{
    DEFAULT_WAIT_SECONDS, EndAsyncTaskParams, MAX_WAIT_SECONDS, WaitAsyncTasksParams,
};
pub use crate::server::{
    AsyncTaskMcpServer, DETACH_FOLLOW_UP, INSTRUCTIONS, MIN_PROGRESS_INTERVAL, TOOLS_TTL,
};
pub use crate::session::{Session, Sessions};
pub use crate::stdio::{TerminationSignals, log_task_ends, serve_io, serve_runtime, serve_stdio};
pub use crate::tasks::{
    FollowJournal, TASK_POLL_INTERVAL, TASK_RESULT_HOLD, TASK_TTL, TASKS_ANSWER_DESCRIPTION,
    TASKS_INSTRUCTIONS, TASKS_TASK_DESCRIPTION_LEAD,
};
pub use crate::transport::{DELIVERED_NOTIFICATION, OVERSIZED_NOTIFICATION};
pub use crate::wait::REMINDER_KEY;
pub use crate::wire::{Line, LineReader, MAX_LINE_BYTES, scan_request_id};
