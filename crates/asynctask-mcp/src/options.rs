//! How an MCP server runs (its options), and what can go wrong serving.

use std::time::Duration;

use asynctask_model::{MaxAsyncTasks, MaxQueuedTasks};
use asynctask_tools::Nesting;

/// How the server runs.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use asynctask_mcp::McpServerOptions;
/// use asynctask_model::MaxAsyncTasks;
///
/// let options = McpServerOptions::default()
///     .with_sync_detach_after(Duration::from_secs(30))
///     .with_max_async_tasks(MaxAsyncTasks::new(3)?);
/// assert_eq!(options.progress_interval, Duration::from_secs(5));
/// # Ok::<(), asynctask_model::InvalidMaxAsyncTasks>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpServerOptions {
    /// A synchronous `task` call still running after this long becomes a
    /// background task (default 50 s, under the usual 60 s client timeout).
    pub sync_detach_after: Duration,
    /// The running limit (default 5).
    pub max_async_tasks: MaxAsyncTasks,
    /// How many background launches past the running limit wait in a queue
    /// (default [`DEFAULT_MAX_QUEUED_TASKS`](Self::DEFAULT_MAX_QUEUED_TASKS));
    /// past it a launch is refused.
    pub max_queued_tasks: MaxQueuedTasks,
    /// How many subagents one session may launch in all, synchronous or in
    /// the background (default [`DEFAULT_MAX_LAUNCHES`](Self::DEFAULT_MAX_LAUNCHES);
    /// `None`: no cap).
    pub max_launches_per_session: Option<u32>,
    /// Where the server's client stands among nested subagents (read from
    /// [`DEPTH_ENV`](asynctask_tools::DEPTH_ENV) by `asynctask mcp`), and how
    /// deep subagents may nest (default cap
    /// [`DEFAULT_MAX_DEPTH`](Self::DEFAULT_MAX_DEPTH)).
    pub nesting: Nesting,
    /// How often a long tool call reports progress to a client that asked for it
    /// (default 5 s; anything under [`MIN_PROGRESS_INTERVAL`](crate::MIN_PROGRESS_INTERVAL) is raised to it).
    pub progress_interval: Duration,
}

impl Default for McpServerOptions {
    fn default() -> Self {
        McpServerOptions {
            sync_detach_after: Duration::from_secs(50),
            max_async_tasks: MaxAsyncTasks::default(),
            max_queued_tasks: McpServerOptions::DEFAULT_MAX_QUEUED_TASKS,
            max_launches_per_session: Some(McpServerOptions::DEFAULT_MAX_LAUNCHES),
            nesting: Nesting::top().with_max_depth(Some(McpServerOptions::DEFAULT_MAX_DEPTH)),
            progress_interval: Duration::from_secs(5),
        }
    }
}

impl McpServerOptions {
    /// The server's queue by default: 20 launches past the running limit
    /// wait (a library host has none unless it asks). A model that fans out
    /// a batch of subagents at once gets them all run, a few at a time,
    /// instead of refusals it must retry; the bound keeps a runaway loop of
    /// launches from queueing without end.
    ///
    /// ```
    /// use asynctask_mcp::McpServerOptions;
    /// assert_eq!(McpServerOptions::DEFAULT_MAX_QUEUED_TASKS.get(), 20);
    /// assert_eq!(McpServerOptions::default().max_queued_tasks.get(), 20);
    /// ```
    pub const DEFAULT_MAX_QUEUED_TASKS: MaxQueuedTasks = match MaxQueuedTasks::new_const(20) {
        Some(max) => max,
        // Evaluated at compile time: 20 is in range.
        None => panic!("20 is a valid queue bound"),
    };

    /// Replaces [`sync_detach_after`](Self::sync_detach_after).
    #[must_use]
    pub fn with_sync_detach_after(mut self, after: Duration) -> Self {
        self.sync_detach_after = after;
        self
    }

    /// Replaces [`max_async_tasks`](Self::max_async_tasks).
    #[must_use]
    pub fn with_max_async_tasks(mut self, max: MaxAsyncTasks) -> Self {
        self.max_async_tasks = max;
        self
    }

    /// One session's launches by default: 200, room for a long working
    /// session, not for a loop that launches without end.
    pub const DEFAULT_MAX_LAUNCHES: u32 = 200;

    /// How deep subagents may nest by default: 2, so a subagent may delegate
    /// once more (each level multiplies what runs at once by up to
    /// `--max-async-tasks`).
    pub const DEFAULT_MAX_DEPTH: u32 = 2;

    /// Replaces [`max_launches_per_session`](Self::max_launches_per_session).
    #[must_use]
    pub fn with_max_launches_per_session(mut self, max: Option<u32>) -> Self {
        self.max_launches_per_session = max;
        self
    }

    /// Replaces [`nesting`](Self::nesting).
    #[must_use]
    pub fn with_nesting(mut self, nesting: Nesting) -> Self {
        self.nesting = nesting;
        self
    }

    /// Replaces [`max_queued_tasks`](Self::max_queued_tasks).
    #[must_use]
    pub fn with_max_queued_tasks(mut self, max: MaxQueuedTasks) -> Self {
        self.max_queued_tasks = max;
        self
    }

    /// Replaces [`progress_interval`](Self::progress_interval).
    #[must_use]
    pub fn with_progress_interval(mut self, interval: Duration) -> Self {
        self.progress_interval = interval;
        self
    }
}

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// A tool's definition is not a valid MCP tool (a bug in its spec).
    #[error("tool '{tool}' has no valid MCP definition")]
    ToolDefinition {
        /// The tool.
        tool: String,
        /// What is wrong.
        #[source]
        source: serde_json::Error,
    },
    /// A tool answers to one name but its spec lists another (a bug in the
    /// tool): clients would call a name the server does not find.
    #[error("tool '{name}' is listed as '{listed}' in its spec")]
    ToolName {
        /// The name the tool answers to ([`Tool::name`](asynctask_tools::Tool::name)).
        name: String,
        /// The name its spec gives clients (`ToolSpec::name`).
        listed: String,
    },
    /// The runtime could not be built (no tokio runtime).
    #[error("cannot start the task runtime")]
    Runtime(#[from] asynctask_runtime::BuildError),
    /// The MCP session could not start (the client did not initialize it).
    #[error("the MCP session did not start")]
    Session(#[source] Box<rmcp::service::ServerInitializeError>),
    /// Listening for termination signals failed.
    #[error("cannot listen for signals")]
    Signals(#[source] std::io::Error),
}
