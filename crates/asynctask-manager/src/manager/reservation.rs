//! `Reservation`: a slot under the running limit, taken before the task's id is
//! known.

use std::fmt;

use super::AsyncTaskManager;
use crate::admission::{LimitReached, RegisterError, RegisterTaskInput};
use crate::snapshot::TaskSnapshot;

impl AsyncTaskManager {
    /// Takes a slot under the limit before the task's id is known.
    ///
    /// # Errors
    ///
    /// [`LimitReached`] when running tasks plus reservations fill the limit.
    pub fn reserve(&self) -> Result<Reservation, LimitReached> {
        self.lock().registry.reserve()?;
        Ok(Reservation {
            manager: self.clone(),
            spent: false,
        })
    }
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
    manager: AsyncTaskManager,
    /// Spent by `register`: the registry already accounted for the slot.
    spent: bool,
}

impl Reservation {
    /// Registers a task in this reservation's slot, without checking the limit
    /// again.
    ///
    /// # Errors
    ///
    /// [`RegisterError::DuplicateId`], [`RegisterError::EmptyId`] or
    /// [`RegisterError::Journal`]; the slot is freed either way, since the
    /// reservation is spent.
    pub fn register(mut self, input: RegisterTaskInput) -> Result<TaskSnapshot, RegisterError> {
        self.spent = true;
        self.manager.register(input, true)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.spent {
            self.manager.release_reservation();
        }
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("spent", &self.spent)
            .finish()
    }
}
