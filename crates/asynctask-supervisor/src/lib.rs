//! Durable serving, on `asynctask-mcp`: background tasks that outlive the MCP
//! sessions that launched them. This crate serves one workspace's tasks from one
//! long-lived process, the [`Supervisor`], which owns the runtime (with a store,
//! so results survive it too) and the subagents, and listens on a Unix socket in
//! the workspace's [`StateDir`]. What an MCP client starts (`asynctask mcp
//! --durable`) is a thin front: [`relay_stdio`] reaches the supervisor —
//! starting one when none answers — and relays the client's messages to it, so
//! closing the client ends the session, never its tasks.
//!
//! - a session's tasks record it as their origin: a result goes to the session
//!   that launched its task while that session is connected, and to the next
//!   session that calls once it is gone;
//! - the relay confirms every message it wrote to its client, and only then
//!   does the supervisor count a result as delivered: a front killed in between
//!   leaves it pending for the next session (the one at-least-once window);
//! - one supervisor per workspace ([`SupervisorLock`]); it exits after an idle
//!   time, on `asynctask supervisor stop` (which cancels every task), or on a
//!   termination signal (which fails the running tasks as interrupted and ends
//!   their subagents);
//! - a front whose supervisor goes away answers the calls it had in flight
//!   with an error and opens the session again with another supervisor: the
//!   client keeps its server;
//! - [`ask`] is the one-question connection of `supervisor status` and `stop`.
//!
//! What it does not do: run subagents (the runtime's runner does), choose the
//! project or where a workspace's state lives (the caller gives both), or work
//! off Unix (it needs Unix sockets and peer credentials).
//!
//! # Example
//!
//! ```
//! use asynctask_supervisor::StateDir;
//!
//! let state = StateDir::new("/work/project/.asynctask");
//! state.check_socket_path()?; // a Unix socket path is at most 107 bytes
//! assert!(state.socket().ends_with("supervisor.sock"));
//! # Ok::<(), asynctask_supervisor::SocketPathTooLong>(())
//! ```

mod connection;
mod error;
mod front;
mod options;
mod protocol;
mod relay;
mod state;
mod supervisor;
#[cfg(test)]
mod tests;

pub use crate::error::SupervisorError;
pub use crate::front::{ask, connect, relay_stdio};
pub use crate::options::SupervisorOptions;
pub use crate::state::{MAX_SOCKET_PATH, SocketPathTooLong, StateDir, SupervisorLock};
pub use crate::supervisor::{Supervisor, SupervisorExit};
