//! An MCP server that gives any MCP client background subagents.
//!
//! This crate sits on `asynctask-runtime`: it serves the runtime's tools over the
//! Model Context Protocol (the official Rust SDK, rmcp, on stdio), so a
//! coding-agent CLI or IDE that speaks MCP — Claude Code, Codex CLI, Gemini CLI,
//! Cursor — can launch subagents in the background without a line of Rust.
//!
//! - [`AsyncTaskMcpServer`] — a hand-written `ServerHandler`: the tool list is
//!   each tool's [`ToolSpec::to_mcp`](asynctask_tools::ToolSpec::to_mcp), so no
//!   schema or text exists twice;
//! - the tools `task` (with sync-detach: a synchronous call that runs too long
//!   becomes a background task), `check_async_tasks`, `message_async_task`,
//!   and this crate's own `wait_async_tasks` ([`WaitAsyncTasksParams`]) and
//!   `end_async_task` ([`EndAsyncTaskParams`]);
//! - [`serve_stdio`] — the whole server, as `asynctask mcp` runs it.
//!
//! An MCP server cannot start a turn in its client, and clients show the model
//! neither notifications nor MCP Tasks, so results **ride on tool results**:
//! after every call that was not cancelled, the pending `System Note` reminder
//! is appended as the last text block. Each finished task is claimed by one
//! call (under one lock, so parallel calls never share it) and marked delivered
//! only once the transport wrote the response carrying it; a call the client
//! cancels before that releases it for the next call. So each result reaches
//! the client exactly once. (Served over a transport of your own, the server
//! cannot see the write: a result is marked delivered when its response is
//! handed to rmcp; see [`AsyncTaskMcpServer`].) A reminder that would only say how many tasks still
//! run is not appended: results stay short.
//!
//! What it does not do: run subagents (a [`SubagentRunner`](asynctask_tools::SubagentRunner),
//! usually the `ProcessRunner`, does), serve `todo_pause` (no continuation loop
//! runs on this side), or write anything to stdout but the protocol.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use asynctask_mcp::AsyncTaskMcpServer;
//! use asynctask_runtime::AsyncTaskRuntime;
//! use tokio_util::sync::CancellationToken;
//!
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

mod end;
mod gate;
mod params;
mod server;
mod session;
mod transport;
mod wait;
mod wire;

pub use crate::params::{
    DEFAULT_WAIT_SECONDS, EndAsyncTaskParams, MAX_WAIT_SECONDS, WaitAsyncTasksParams,
};
pub use crate::server::{
    AsyncTaskMcpServer, DETACH_FOLLOW_UP, INSTRUCTIONS, MIN_PROGRESS_INTERVAL, McpError,
    McpServerOptions, REMINDER_KEY, TerminationSignals, log_task_ends, serve_stdio,
};
pub use crate::session::{Session, Sessions};
pub use crate::transport::{DELIVERED_NOTIFICATION, OVERSIZED_NOTIFICATION};
pub use crate::wire::{Line, LineReader, MAX_LINE_BYTES, scan_request_id};
