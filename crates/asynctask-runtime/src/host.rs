//! What the runtime needs from the host: whether the agent is busy, and a way to
//! start a turn.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::reminder::Reminder;

/// The host's agent, as the auto-trigger sees it.
///
/// # Examples
///
/// ```
/// use asynctask_runtime::{AgentHost, Reminder, TriggerError};
///
/// struct Cli;
///
/// #[async_trait::async_trait]
/// impl AgentHost for Cli {
///     fn is_agent_busy(&self) -> bool {
///         false // e.g. not streaming and not waiting for a confirmation
///     }
///     async fn trigger_agent_turn(&self, reminder: Reminder) -> Result<(), TriggerError> {
///         // Append `reminder.text` to the conversation as a system note and run
///         // a turn; `reminder.task_ids` says which tasks it reports.
///         let _ = (reminder.text, reminder.task_ids);
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

    /// Delivers `reminder.text` to the model and starts a turn.
    /// `reminder.task_ids` are the tasks it reports. `Ok` means the message was
    /// delivered: exactly those tasks are then marked notified.
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
    async fn trigger_agent_turn(&self, reminder: Reminder) -> Result<(), TriggerError>;
}

/// A host could not start a turn.
///
/// It may carry the error that caused it ([`with_source`](Self::with_source)).
///
/// # Examples
///
/// ```
/// use std::error::Error as _;
/// use asynctask_runtime::TriggerError;
///
/// let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
/// let error = TriggerError::new("model API unavailable").with_source(cause);
/// assert_eq!(error.to_string(), "model API unavailable");
/// assert_eq!(error.source().map(|s| s.to_string()).as_deref(), Some("refused"));
/// ```
#[derive(Clone, thiserror::Error)]
#[error("{message}")]
pub struct TriggerError {
    message: String,
    #[source]
    source: Option<Arc<dyn Error + Send + Sync>>,
}

impl TriggerError {
    /// An error with this message.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        TriggerError {
            message: message.into(),
            source: None,
        }
    }

    /// The same error, caused by `source`.
    #[must_use]
    pub fn with_source(mut self, source: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Debug for TriggerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TriggerError")
            .field("message", &self.message)
            .field("source", &self.source.as_ref().map(ToString::to_string))
            .finish()
    }
}

/// Two errors are equal when their messages are (the source is for logs).
impl PartialEq for TriggerError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl Eq for TriggerError {}
