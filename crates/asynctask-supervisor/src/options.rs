//! How a supervisor runs: what its loop and each of its connections read.

use std::time::Duration;

use asynctask_mcp::McpServerOptions;

/// How a supervisor runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SupervisorOptions {
    /// The options of each session's MCP server.
    pub server: McpServerOptions,
    /// The supervisor exits by itself once no session is connected and no task
    /// runs for this long (default 10 minutes).
    pub idle_exit: Duration,
}

impl Default for SupervisorOptions {
    fn default() -> Self {
        SupervisorOptions {
            server: McpServerOptions::default(),
            idle_exit: Duration::from_secs(600),
        }
    }
}

impl SupervisorOptions {
    /// Replaces [`idle_exit`](Self::idle_exit).
    #[must_use]
    pub fn with_idle_exit(mut self, idle_exit: Duration) -> Self {
        self.idle_exit = idle_exit;
        self
    }

    /// Replaces [`server`](Self::server).
    #[must_use]
    pub fn with_server(mut self, server: McpServerOptions) -> Self {
        self.server = server;
        self
    }
}
