//! Admission: what a registration carries, the errors it can meet, and reservations.

use std::fmt;

use tokio_util::sync::CancellationToken;

use crate::AsyncTaskInfo;
use crate::manager::AsyncTaskManager;

/// What a host supplies to register a task.
///
/// The `cancellation` token is the one handed to the subagent runner;
/// [`AsyncTaskManager::cancel_task`] cancels it. Give each task its own token (a
/// [`child_token`](CancellationToken::child_token) of a parent is fine): cancelling
/// one task must not cancel another.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{CancellationToken, RegisterTaskInput};
///
/// let input = RegisterTaskInput::new("a1b2c3d4", "researcher", "find the bug");
/// let runner_token: CancellationToken = input.cancellation.clone();
/// assert!(!runner_token.is_cancelled());
/// ```
#[derive(Debug, Clone)]
pub struct RegisterTaskInput {
    /// The task's id; must be non-empty and not held by another task.
    pub id: String,
    /// The subagent that runs the task.
    pub subagent_name: String,
    /// The goal the subagent was given.
    pub goal_prompt: String,
    /// The token the subagent runner watches.
    pub cancellation: CancellationToken,
}

impl RegisterTaskInput {
    /// An input with a fresh cancellation token.
    #[must_use]
    pub fn new(
        id: impl Into<String>,
        subagent_name: impl Into<String>,
        goal_prompt: impl Into<String>,
    ) -> Self {
        RegisterTaskInput {
            id: id.into(),
            subagent_name: subagent_name.into(),
            goal_prompt: goal_prompt.into(),
            cancellation: CancellationToken::new(),
        }
    }

    /// Replaces the cancellation token (to use a child of a host-wide token, say).
    #[must_use]
    pub fn with_cancellation(mut self, cancellation: CancellationToken) -> Self {
        self.cancellation = cancellation;
        self
    }
}

/// The running limit is reached: no task may be admitted now.
///
/// Its `Display` is the model-facing refusal, word for word:
/// `Max async tasks (N) reached`.
///
/// # Examples
///
/// ```
/// use asynctask_manager::LimitReached;
/// assert_eq!(LimitReached { max: 5 }.to_string(), "Max async tasks (5) reached");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("Max async tasks ({max}) reached")]
pub struct LimitReached {
    /// The limit in force (`task-max-async`).
    pub max: i64,
}

/// Why a registration was refused. Nothing is registered when this is returned.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterError, RegisterTaskInput};
/// use asynctask_model::MaxAsyncTasks;
///
/// let manager = AsyncTaskManager::new(MaxAsyncTasks::new(1)?);
/// manager.register_task(RegisterTaskInput::new("a", "r", "g"))?;
/// assert_eq!(
///     manager.register_task(RegisterTaskInput::new("a", "r", "g")).unwrap_err(),
///     RegisterError::DuplicateId("a".into()),
/// );
/// let refused = manager.register_task(RegisterTaskInput::new("b", "r", "g")).unwrap_err();
/// assert_eq!(refused.to_string(), "Max async tasks (1) reached");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The running limit is reached; the `Display` is the model-facing refusal.
    #[error(transparent)]
    LimitReached(#[from] LimitReached),
    /// A task with this id is already in the registry. It is left untouched.
    #[error("a task with id '{0}' is already registered")]
    DuplicateId(String),
    /// The id is empty (an empty id would match every prefix).
    #[error("a task id must not be empty")]
    EmptyId,
}

/// A slot under the running limit, held before the task's id is known.
///
/// It counts toward the limit from [`AsyncTaskManager::reserve`] until it is spent
/// by [`register`](Self::register) or dropped, which frees the slot. Use it when
/// a host must know it may launch before it can name the task (for example before
/// it starts the subagent that will report its own id).
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_model::MaxAsyncTasks;
///
/// let manager = AsyncTaskManager::new(MaxAsyncTasks::new(1)?);
/// let slot = manager.reserve()?;
/// assert!(manager.can_launch_async().is_err(), "the reservation holds the only slot");
/// drop(slot);
/// assert!(manager.can_launch_async().is_ok(), "dropping it freed the slot");
///
/// let slot = manager.reserve()?;
/// let task = slot.register(RegisterTaskInput::new("7f3a09c1", "researcher", "look"))?;
/// assert_eq!(manager.running_tasks(), vec![task]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a reservation frees its slot as soon as it is dropped"]
pub struct Reservation {
    manager: Option<AsyncTaskManager>,
}

impl Reservation {
    pub(crate) fn new(manager: AsyncTaskManager) -> Self {
        Reservation {
            manager: Some(manager),
        }
    }

    /// Registers a task in this reservation's slot, without checking the limit
    /// again.
    ///
    /// # Errors
    ///
    /// [`RegisterError::DuplicateId`] or [`RegisterError::EmptyId`]; the slot is
    /// freed either way, since the reservation is spent.
    pub fn register(mut self, input: RegisterTaskInput) -> Result<AsyncTaskInfo, RegisterError> {
        match self.manager.take() {
            Some(manager) => manager.register_reserved(input),
            // Unreachable: `manager` is only taken here, and `self` is consumed.
            None => Err(RegisterError::EmptyId),
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(manager) = self.manager.take() {
            manager.release_reservation();
        }
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("held", &self.manager.is_some())
            .finish()
    }
}
