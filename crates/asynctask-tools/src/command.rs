//! What a user's command answers: [`CommandOutput`], information or an error
//! to show the user.

/// What a slash command answers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommandOutput {
    /// Whether it is information or an error.
    pub kind: CommandOutputKind,
    /// The text to show the user.
    pub text: String,
}

impl CommandOutput {
    pub(crate) fn info(text: impl Into<String>) -> Self {
        CommandOutput {
            kind: CommandOutputKind::Info,
            text: text.into(),
        }
    }

    pub(crate) fn error(text: impl Into<String>) -> Self {
        CommandOutput {
            kind: CommandOutputKind::Error,
            text: text.into(),
        }
    }
}

/// The kind of a [`CommandOutput`]. Serialized as `"info"` / `"error"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandOutputKind {
    /// The command worked.
    Info,
    /// The command was refused (bad usage, unknown id, nothing to cancel).
    Error,
}
