//! `todo_pause`: the model reports a blocker, and todo continuation stops.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::params::{TodoPauseParams, ToolParams};
use crate::result::ToolResult;
use crate::tool::{ToolAnnotations, ToolSpec, TypedTool};

/// Where a successful `todo_pause` leaves its reason, for the runtime to read.
///
/// A cheap handle; clones share one slot. The runtime holds one clone and the
/// tool another: after a pause, [`is_paused`](Self::is_paused) is true until the
/// host reports a new user message and the runtime calls [`clear`](Self::clear).
///
/// # Examples
///
/// ```
/// use asynctask_tools::PauseSignal;
///
/// let signal = PauseSignal::new();
/// assert!(!signal.is_paused());
/// signal.pause("tests need a database");
/// assert_eq!(signal.reason().as_deref(), Some("tests need a database"));
/// signal.clear();
/// assert!(!signal.is_paused());
/// ```
#[derive(Clone, Default)]
pub struct PauseSignal {
    reason: Arc<Mutex<Option<String>>>,
}

impl PauseSignal {
    /// A signal that is not paused.
    #[must_use]
    pub fn new() -> Self {
        PauseSignal::default()
    }

    /// Records a pause (the latest reason wins).
    pub fn pause(&self, reason: impl Into<String>) {
        *self.slot() = Some(reason.into());
    }

    /// Whether a pause is in force.
    #[must_use]
    pub fn is_paused(&self) -> bool {
        self.slot().is_some()
    }

    /// The reason of the pause in force.
    #[must_use]
    pub fn reason(&self) -> Option<String> {
        self.slot().clone()
    }

    /// Lifts the pause (the user has spoken); returns the reason it had.
    pub fn clear(&self) -> Option<String> {
        self.slot().take()
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // A plain Option cannot be left half-written: recover from poisoning.
        self.reason.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for PauseSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PauseSignal")
            .field("reason", &self.reason())
            .finish()
    }
}

/// The `todo_pause` tool: `reason` (1 to 500 characters, not blank) is recorded in
/// a [`PauseSignal`], and the model reads `AI execution paused due to: <reason>`.
///
/// # Examples
///
/// ```
/// use asynctask_tools::{PauseSignal, Tool, TodoPauseTool};
/// use tokio_util::sync::CancellationToken;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let signal = PauseSignal::new();
/// let tool = TodoPauseTool::with_signal(signal.clone());
/// let result = tool.execute(serde_json::json!({"reason": "no credentials"}), CancellationToken::new()).await;
/// assert_eq!(result.llm_content, "AI execution paused due to: no credentials");
/// assert!(signal.is_paused());
/// # });
/// ```
#[derive(Debug, Clone, Default)]
pub struct TodoPauseTool {
    signal: PauseSignal,
}

impl TodoPauseTool {
    /// The tool's name.
    pub const NAME: &'static str = "todo_pause";

    /// A tool with its own signal (see [`signal`](Self::signal)).
    #[must_use]
    pub fn new() -> Self {
        TodoPauseTool::default()
    }

    /// A tool that records pauses in `signal`.
    #[must_use]
    pub fn with_signal(signal: PauseSignal) -> Self {
        TodoPauseTool { signal }
    }

    /// The signal this tool records pauses in.
    #[must_use]
    pub fn signal(&self) -> &PauseSignal {
        &self.signal
    }
}

#[async_trait]
impl TypedTool for TodoPauseTool {
    type Params = TodoPauseParams;

    fn name(&self) -> &str {
        Self::NAME
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            Self::NAME,
            "Pause Todos",
            "Pause todo continuation when an error or blocker prevents any progress on the \
             active task. Give the reason; execution stops until the user responds. Do not use \
             it to ask for confirmation or to end a turn.",
            TodoPauseParams::schema(),
        )
        .with_annotations(
            ToolAnnotations::DEFAULT
                .with_destructive(false)
                .with_idempotent(true)
                .with_open_world(false),
        )
    }

    async fn run(&self, params: TodoPauseParams, _cancel: CancellationToken) -> ToolResult {
        self.signal.pause(params.reason.clone());
        let text = format!("AI execution paused due to: {}", params.reason);
        ToolResult::success(
            text.clone(),
            text,
            json!({ "paused": true, "reason": params.reason }),
        )
    }
}
