//! What can go wrong when a supervisor runs or a front reaches one.

use std::path::{Path, PathBuf};

use asynctask_mcp::McpError;

/// Why a supervisor could not serve, or a front could not reach one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SupervisorError {
    /// The supervisor's socket cannot be bound.
    #[error("cannot listen on {}", path.display())]
    Listen {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Listening for termination signals failed.
    #[error("cannot listen for signals")]
    Signals(#[source] std::io::Error),
    /// No supervisor acknowledged a session for this state directory in time,
    /// even after starting one.
    #[error("{}", unreachable_supervisor(state, log, log_tail))]
    Unreachable {
        /// The state directory.
        state: PathBuf,
        /// The supervisor's log.
        log: PathBuf,
        /// Its last lines when the error was made (empty when it had none).
        log_tail: String,
        /// Why the last attempt failed.
        #[source]
        source: std::io::Error,
    },
    /// A supervisor could not be started.
    #[error("cannot start a supervisor for {}", state.display())]
    Start {
        /// The state directory.
        state: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A supervisor started for this state directory exited with an error of
    /// its own before it served (a full disk, a store it cannot open).
    #[error(
        "the supervisor started for {} exited ({status}) before it served{}",
        state.display(),
        if stderr.is_empty() { String::from(" and said nothing") } else { format!(": {}", stderr.replace('\n', "; ")) }
    )]
    Exited {
        /// The state directory.
        state: PathBuf,
        /// How it exited.
        status: std::process::ExitStatus,
        /// The end of what it printed on stderr: its own error.
        stderr: String,
    },
    /// The MCP side failed (the sessions' server).
    #[error(transparent)]
    Mcp(#[from] McpError),
}

fn unreachable_supervisor(state: &Path, log: &Path, log_tail: &str) -> String {
    if log_tail.trim().is_empty() {
        format!(
            "cannot reach the supervisor of {} (its log, {}, is empty or missing)",
            state.display(),
            log.display()
        )
    } else {
        format!(
            "cannot reach the supervisor of {}; the end of its log, {}:\n{log_tail}",
            state.display(),
            log.display()
        )
    }
}
