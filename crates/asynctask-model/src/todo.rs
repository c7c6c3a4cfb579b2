//! The todo items that drive todo continuation.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a todo item stands. Serialized as `"pending"`, `"in_progress"`, `"completed"`.
///
/// # Examples
///
/// ```
/// use asynctask_model::TodoStatus;
/// assert_eq!(serde_json::to_string(&TodoStatus::InProgress).unwrap(), r#""in_progress""#);
/// assert!(TodoStatus::Pending.is_active());
/// assert!(!TodoStatus::Completed.is_active());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on now (there should be at most one).
    InProgress,
    /// Done.
    Completed,
}

impl TodoStatus {
    /// The serde spelling: `"pending"`, `"in_progress"` or `"completed"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TodoStatus::Pending => "pending",
            TodoStatus::InProgress => "in_progress",
            TodoStatus::Completed => "completed",
        }
    }

    /// Whether work remains: `Pending` or `InProgress`.
    #[must_use]
    pub fn is_active(self) -> bool {
        !matches!(self, TodoStatus::Completed)
    }
}

impl fmt::Display for TodoStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One item of the model's todo list.
///
/// # Examples
///
/// ```
/// use asynctask_model::{Todo, TodoStatus};
///
/// let todo = Todo::new("1", "write the tests", TodoStatus::InProgress);
/// assert_eq!(
///     serde_json::to_string(&todo).unwrap(),
///     r#"{"id":"1","content":"write the tests","status":"in_progress"}"#,
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Todo {
    /// The todo's id.
    pub id: String,
    /// What is to be done.
    pub content: String,
    /// Where it stands.
    pub status: TodoStatus,
}

impl Todo {
    /// A todo item.
    #[must_use]
    pub fn new(id: impl Into<String>, content: impl Into<String>, status: TodoStatus) -> Self {
        Todo {
            id: id.into(),
            content: content.into(),
            status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_serde_matches_as_str() {
        for status in [
            TodoStatus::Pending,
            TodoStatus::InProgress,
            TodoStatus::Completed,
        ] {
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{}\"", status.as_str())
            );
            assert_eq!(status.to_string(), status.as_str());
        }
    }
}
