//! What a tool call returns: [`ToolResult`], and the error it may carry.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The outcome of one tool call.
///
/// `llm_content` is what the model reads; `return_display` is what the host shows
/// the user (markdown); `metadata` is structured data for the host. A model-side
/// mistake (bad parameters, an unknown id, the limit reached) is still a
/// `ToolResult`, with [`error`](Self::error) set and a text the model can act on.
///
/// # Examples
///
/// ```
/// use asynctask_tools::{ToolErrorType, ToolResult};
///
/// let ok = ToolResult::success("No async tasks.", "Nothing here", serde_json::json!({"count": 0}));
/// assert!(!ok.is_error());
/// let bad = ToolResult::failure(ToolErrorType::InvalidToolParams, "Task not found", "No async task found.", "Task not found: x");
/// assert_eq!(bad.error.unwrap().message, "Task not found");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The text the model reads.
    pub llm_content: String,
    /// The text the host shows the user.
    pub return_display: String,
    /// Structured data for the host (`null` when there is none).
    pub metadata: serde_json::Value,
    /// Set when the call failed; `llm_content` then explains the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

impl ToolResult {
    /// A successful result.
    #[must_use]
    pub fn success(
        llm_content: impl Into<String>,
        return_display: impl Into<String>,
        metadata: serde_json::Value,
    ) -> Self {
        ToolResult {
            llm_content: llm_content.into(),
            return_display: return_display.into(),
            metadata,
            error: None,
        }
    }

    /// A failed result: `message` is the short error, `llm_content` what the model
    /// reads about it.
    #[must_use]
    pub fn failure(
        kind: ToolErrorType,
        message: impl Into<String>,
        llm_content: impl Into<String>,
        return_display: impl Into<String>,
    ) -> Self {
        ToolResult {
            llm_content: llm_content.into(),
            return_display: return_display.into(),
            metadata: serde_json::Value::Null,
            error: Some(ToolError {
                message: message.into(),
                kind,
            }),
        }
    }

    /// Replaces the metadata.
    #[must_use]
    pub fn with_metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = metadata;
        self
    }

    /// Whether the call failed.
    #[must_use]
    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }

    /// The whole result as a person reviews it (in a log, or a snapshot test):
    /// each part under its own heading, texts verbatim, metadata as pretty
    /// JSON.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_tools::{ToolErrorType, ToolResult};
    ///
    /// let refused = ToolResult::failure(ToolErrorType::InvalidToolParams, "Task not found", "No async task found with ID or prefix 'ff'.", "Task not found: ff");
    /// assert_eq!(
    ///     refused.transcript(),
    ///     "[error: invalid_tool_params] Task not found\n[llm_content]\nNo async task found with ID or prefix 'ff'.\n[return_display]\nTask not found: ff\n[metadata]\nnull\n",
    /// );
    /// ```
    #[must_use]
    pub fn transcript(&self) -> String {
        let mut text = String::new();
        if let Some(error) = &self.error {
            text.push_str(&format!("[error: {}] {}\n", error.kind, error.message));
        }
        let metadata = serde_json::to_string_pretty(&self.metadata)
            .unwrap_or_else(|err| format!("(metadata does not serialize: {err})"));
        for (heading, body) in [
            ("llm_content", self.llm_content.as_str()),
            ("return_display", self.return_display.as_str()),
            ("metadata", metadata.as_str()),
        ] {
            text.push_str(&format!("[{heading}]\n{body}\n"));
        }
        text
    }
}

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// A short, human-readable message.
    pub message: String,
    /// The class of failure.
    pub kind: ToolErrorType,
}

/// The class of a tool failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolErrorType {
    /// The model's parameters were wrong: a type, a missing or unknown field, a
    /// blank string, an id that matches no task or several.
    InvalidToolParams,
    /// The call was valid but could not be carried out (the limit is reached, the
    /// subagent failed or was cancelled).
    ExecutionFailed,
    /// The subagent ran out of time.
    Timeout,
    /// Something unexpected went wrong inside the tool (a panic was caught).
    UnhandledException,
}

impl ToolErrorType {
    /// The snake_case name, as serialized.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ToolErrorType::InvalidToolParams => "invalid_tool_params",
            ToolErrorType::ExecutionFailed => "execution_failed",
            ToolErrorType::Timeout => "timeout",
            ToolErrorType::UnhandledException => "unhandled_exception",
        }
    }
}

impl fmt::Display for ToolErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
