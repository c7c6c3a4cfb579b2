//! The registry of background subagent tasks: the second layer of asynctask,
//! on `asynctask-model`. Its one handle,
//! [`AsyncTaskManager`], is the single source of truth about every background
//! task: the `task` tool registers tasks and reports how they ended, the other
//! tools and the slash commands read it, delivery listens to its events.
//!
//! - **Atomic admission**: the limit and the id's uniqueness are checked under
//!   one lock ([`register_task`](AsyncTaskManager::register_task), or an RAII
//!   [`Reservation`]); a duplicate id is an error, never an overwrite.
//! - **Nothing is lost**: every terminal task, cancelled ones too, stays pending
//!   until [`mark_notified`](AsyncTaskManager::mark_notified); pruning removes
//!   the oldest delivered tasks and skips undelivered ones, never stops at them.
//! - **Costs do not grow with history**: every operation is O(log n) or better;
//!   reads return [`TaskSnapshot`]s that share what never changes.
//! - **Results can outlive the process**: a [`Journal`] is told of every change
//!   before it is visible, and [`restore`](AsyncTaskManager::restore) rebuilds
//!   the registry from it (`asynctask-store` is one, on SQLite).
//!
//! It spawns and awaits nothing and runs no user code under its lock (but the
//! journal's short write); hosts assert its invariants with [`check_invariants`].
//!
//! # Example
//!
//! ```
//! use asynctask_manager::{AsyncTaskManager, RegisterError, RegisterTaskInput};
//! use asynctask_model::MaxAsyncTasks;
//!
//! let manager = AsyncTaskManager::new(MaxAsyncTasks::new(1)?);
//! let _events = manager.on_task_cancelled(|task| println!("cancelled {}", task.id()));
//! let input = RegisterTaskInput::new("7f3a09c1", "researcher", "find the bug");
//! let token = input.cancellation.clone();
//! manager.register_task(input)?;
//! let refused = manager.register_task(RegisterTaskInput::new("0b1c", "tester", "run tests"));
//! assert!(matches!(refused, Err(RegisterError::LimitReached(_))));
//! assert!(manager.cancel_task("7f3a09c1"));
//! assert!(token.is_cancelled(), "the subagent runner is told to stop");
//! asynctask_manager::check_invariants(&manager)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod admission;
mod backlog;
mod events;
mod index;
mod journal;
mod live;
mod manager;
mod questions;
mod record;
mod registry;
mod snapshot;

pub use crate::admission::{LimitReached, QueueFull, RegisterError, RegisterTaskInput};
pub use crate::events::TaskEvent;
pub use crate::journal::{
    INTERRUPTED_ERROR, Journal, JournalEntry, JournalError, RestoreError, StoredTask,
    TerminalOutcome,
};
pub use crate::live::{
    Inbox, InboxError, InboxSender, MessageError, ProgressSnapshot, TaskProgress,
};
pub use crate::manager::AsyncTaskManager;
pub use crate::manager::journaled::WeakAsyncTaskManager;
pub use crate::manager::reservation::Reservation;
pub use crate::manager::subscriptions::Subscription;
pub use crate::questions::{
    Answer, AnswerError, Asking, PendingQuestion, Question, QuestionDesk, Questions,
};
pub use crate::snapshot::{TaskSnapshot, TaskView};
pub use asynctask_model::{AsyncTaskInfo, MaxAsyncTasks};
pub use tokio_util::sync::CancellationToken;

/// The answer to [`AsyncTaskManager::find_by_prefix`].
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, PrefixMatch, RegisterTaskInput};
///
/// let manager = AsyncTaskManager::default();
/// manager.register_task(RegisterTaskInput::new("ab12", "a", "g"))?;
/// manager.register_task(RegisterTaskInput::new("ab34", "b", "g"))?;
/// assert!(matches!(manager.find_by_prefix("ab"), PrefixMatch::Ambiguous(c) if c.len() == 2));
/// assert!(matches!(manager.find_by_prefix("ab3"), PrefixMatch::One(t) if t.id() == "ab34"));
/// assert_eq!(manager.find_by_prefix("AB"), PrefixMatch::None, "case-sensitive");
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixMatch {
    /// No task id starts with the prefix.
    None,
    /// Exactly one does.
    One(TaskSnapshot),
    /// Several do; the candidates in registration order.
    Ambiguous(Vec<TaskSnapshot>),
}

/// How many tasks the registry holds, by status, and what awaits delivery.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput, TaskCounts};
///
/// let manager = AsyncTaskManager::default();
/// manager.register_task(RegisterTaskInput::new("a", "r", "g"))?;
/// manager.fail_task("a", "boom");
/// assert_eq!(
///     manager.counts(),
///     TaskCounts { failed: 1, pending_notifications: 1, ..TaskCounts::default() },
/// );
/// assert_eq!(manager.counts().total(), 1);
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskCounts {
    /// Queued tasks: launched past the running limit, waiting for a slot.
    pub queued: usize,
    /// Running tasks, and *unrecorded* ones: finished, but their end not
    /// recorded by the journal yet (readers see them running until it is).
    pub running: usize,
    /// Completed tasks in the registry (unrecorded ones aside).
    pub completed: usize,
    /// Failed tasks in the registry (unrecorded ones aside).
    pub failed: usize,
    /// Cancelled tasks in the registry (unrecorded ones aside).
    pub cancelled: usize,
    /// Terminal tasks not yet delivered to the model.
    pub pending_notifications: usize,
    /// Outstanding reservations.
    pub reserved: usize,
}

impl TaskCounts {
    /// Every task in the registry (queued, running and terminal).
    #[must_use]
    pub fn total(&self) -> usize {
        self.queued + self.running + self.completed + self.failed + self.cancelled
    }
}

/// An invariant of the registry does not hold; the message says which.
///
/// This is a bug in asynctask: please report it with the operations that led here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("asynctask registry invariant violated: {message}")]
pub struct InvariantViolation {
    /// Which invariant broke, with the numbers involved.
    pub message: String,
}

/// Checks every invariant of the registry against a full scan (O(n)):
///
/// - running tasks plus reservations never exceed the limit (tasks admitted before
///   the limit was lowered are kept until they end);
/// - terminal tasks never exceed the history limit plus the un-notified ones, and
///   above the history limit no notified task remains;
/// - `notified_at` is only ever set on terminal tasks;
/// - every index (by id, hashed and ordered; running, pending, pruning order,
///   counts) agrees with the registry, and every unrecorded task is pending with
///   its transition waiting for the journal.
///
/// Hosts call it in their own property tests; ours call it after every step.
///
/// # Errors
///
/// [`InvariantViolation`] naming the first invariant that does not hold.
///
/// # Examples
///
/// ```
/// let manager = asynctask_manager::AsyncTaskManager::default();
/// asynctask_manager::check_invariants(&manager)?;
/// # Ok::<(), asynctask_manager::InvariantViolation>(())
/// ```
pub fn check_invariants(manager: &AsyncTaskManager) -> Result<(), InvariantViolation> {
    manager
        .check_invariants()
        .map_err(|message| InvariantViolation { message })
}
