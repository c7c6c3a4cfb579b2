//! What the runtime needs from the host: whether the agent is busy, and a way to
//! start a turn.

use async_trait::async_trait;

/// The host's agent, as the auto-trigger sees it.
///
/// # Examples
///
/// ```
/// use asynctask_runtime::{AgentHost, TriggerError};
///
/// struct Cli;
///
/// #[async_trait::async_trait]
/// impl AgentHost for Cli {
///     fn is_agent_busy(&self) -> bool {
///         false // e.g. not streaming and not waiting for a confirmation
///     }
///     async fn trigger_agent_turn(&self, message: String) -> Result<(), TriggerError> {
///         // Append `message` to the conversation as a system note and run a turn.
///         let _ = message;
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait AgentHost: Send + Sync {
    /// Whether the agent is in a turn (responding, or waiting for the user to
    /// confirm a tool call). A busy agent is not woken: its pending results are
    /// delivered when the host calls `agent_idle`.
    fn is_agent_busy(&self) -> bool;

    /// Delivers `message` to the model and starts a turn. `Ok` means the message
    /// was delivered: the tasks it reports are then marked notified.
    ///
    /// # Errors
    ///
    /// A [`TriggerError`] when the message could not be delivered; nothing is
    /// marked, and the tasks are delivered later.
    ///
    /// # Cancel safety
    ///
    /// The future is polled to completion by the runtime unless the runtime shuts
    /// down.
    async fn trigger_agent_turn(&self, message: String) -> Result<(), TriggerError>;
}

/// A host could not start a turn.
///
/// # Examples
///
/// ```
/// use asynctask_runtime::TriggerError;
/// assert_eq!(TriggerError::new("model API unavailable").to_string(), "model API unavailable");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TriggerError {
    message: String,
}

impl TriggerError {
    /// An error with this message.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        TriggerError {
            message: message.into(),
        }
    }

    /// The message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}
