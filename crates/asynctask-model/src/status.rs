//! A task's lifecycle status and the reason a subagent stopped.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a task is in its life.
///
/// A task starts [`Running`](Self::Running) — or [`Queued`](Self::Queued), when
/// it was launched past the running limit and waits for a slot — and moves to
/// exactly one of the three terminal states (a queued task only to
/// [`Cancelled`](Self::Cancelled), or to `Running` first). Serialized in
/// lowercase (`"queued"`, `"running"`, `"completed"`, …), the spelling the
/// model sees.
///
/// More states may come: match with a wildcard arm.
///
/// # Examples
///
/// ```
/// use asynctask_model::AsyncTaskStatus;
///
/// assert!(!AsyncTaskStatus::Running.is_terminal());
/// assert!(AsyncTaskStatus::Cancelled.is_terminal());
/// assert_eq!(AsyncTaskStatus::Failed.as_str(), "failed");
/// assert_eq!(serde_json::to_string(&AsyncTaskStatus::Completed).unwrap(), r#""completed""#);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum AsyncTaskStatus {
    /// Launched past the running limit: it starts, in launch order, when a
    /// slot frees. Its subagent has not started.
    Queued,
    /// The subagent is working.
    Running,
    /// The subagent finished and produced an [`OutputObject`](crate::OutputObject).
    Completed,
    /// The subagent failed, panicked or timed out; the task carries an error message.
    Failed,
    /// The task was cancelled (by the user, the model or a shutdown).
    Cancelled,
}

impl AsyncTaskStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [AsyncTaskStatus; 5] = [
        AsyncTaskStatus::Queued,
        AsyncTaskStatus::Running,
        AsyncTaskStatus::Completed,
        AsyncTaskStatus::Failed,
        AsyncTaskStatus::Cancelled,
    ];

    /// Whether this is one of the three final states (neither `Queued` nor
    /// `Running`).
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_model::AsyncTaskStatus;
    /// assert!(AsyncTaskStatus::Completed.is_terminal());
    /// ```
    #[must_use]
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            AsyncTaskStatus::Completed | AsyncTaskStatus::Failed | AsyncTaskStatus::Cancelled
        )
    }

    /// The lowercase name the model sees: `"queued"`, `"running"`,
    /// `"completed"`, `"failed"` or `"cancelled"`, the same as the serde form.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_model::AsyncTaskStatus;
    /// assert_eq!(AsyncTaskStatus::Running.as_str(), "running");
    /// ```
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            AsyncTaskStatus::Queued => "queued",
            AsyncTaskStatus::Running => "running",
            AsyncTaskStatus::Completed => "completed",
            AsyncTaskStatus::Failed => "failed",
            AsyncTaskStatus::Cancelled => "cancelled",
        }
    }

    /// The tag the status lists show (the reminder's status block, `/tasks
    /// list`): `[QUEUED]`, `[RUNNING]`, `[DONE]`, `[FAILED]` or `[CANCELLED]`.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_model::AsyncTaskStatus;
    /// assert_eq!(AsyncTaskStatus::Completed.tag(), "[DONE]");
    /// ```
    #[must_use]
    pub fn tag(self) -> &'static str {
        match self {
            AsyncTaskStatus::Queued => "[QUEUED]",
            AsyncTaskStatus::Running => "[RUNNING]",
            AsyncTaskStatus::Completed => "[DONE]",
            AsyncTaskStatus::Failed => "[FAILED]",
            AsyncTaskStatus::Cancelled => "[CANCELLED]",
        }
    }
}

impl fmt::Display for AsyncTaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a subagent stopped, as reported in its [`OutputObject`](crate::OutputObject).
///
/// Serialized as `"GOAL"`, `"ERROR"`, `"TIMEOUT"` and `"MAX_TURNS"`, the spelling the
/// synchronous `task` tool has always shown the model.
///
/// # Examples
///
/// ```
/// use asynctask_model::TerminateReason;
///
/// assert_eq!(serde_json::to_string(&TerminateReason::MaxTurns).unwrap(), r#""MAX_TURNS""#);
/// assert_eq!(TerminateReason::Goal.as_str(), "GOAL");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum TerminateReason {
    /// The subagent reached its goal.
    Goal,
    /// The subagent stopped on an error it reported itself.
    Error,
    /// The subagent ran out of time.
    Timeout,
    /// The subagent used all the turns it was allowed.
    MaxTurns,
}

impl TerminateReason {
    /// The serde spelling: `"GOAL"`, `"ERROR"`, `"TIMEOUT"` or `"MAX_TURNS"`.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_model::TerminateReason;
    /// assert_eq!(TerminateReason::Timeout.as_str(), "TIMEOUT");
    /// ```
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TerminateReason::Goal => "GOAL",
            TerminateReason::Error => "ERROR",
            TerminateReason::Timeout => "TIMEOUT",
            TerminateReason::MaxTurns => "MAX_TURNS",
        }
    }
}

impl fmt::Display for TerminateReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn status_serde_matches_as_str() {
        for status in AsyncTaskStatus::ALL {
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{}\"", status.as_str()));
            assert_eq!(status.to_string(), status.as_str());
        }
    }

    #[test]
    fn only_queued_and_running_are_not_terminal() {
        let terminal: Vec<bool> = AsyncTaskStatus::ALL
            .iter()
            .map(|s| s.is_terminal())
            .collect();
        assert_eq!(terminal, vec![false, false, true, true, true]);
    }

    #[test]
    fn terminate_reason_serde_matches_as_str() {
        for reason in [
            TerminateReason::Goal,
            TerminateReason::Error,
            TerminateReason::Timeout,
            TerminateReason::MaxTurns,
        ] {
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{}\"", reason.as_str()));
            let back: TerminateReason = serde_json::from_str(&json).unwrap();
            assert_eq!(back, reason);
        }
    }

    #[test]
    fn unknown_status_is_an_error() {
        let err = serde_json::from_str::<AsyncTaskStatus>(r#""Running""#).unwrap_err();
        assert!(err.to_string().contains("unknown variant"), "{err}");
    }
}
