//! The journal side of the handle: restoring a manager from a store, and
//! catching a journal up after a failed write.

use std::sync::Arc;

use asynctask_model::{Clock, MaxAsyncTasks};

use super::{AsyncTaskManager, Shared};
use crate::journal::{Journal, JournalError, RestoreError, StoredTask};
use crate::registry::Registry;

impl AsyncTaskManager {
    /// Resolves when a journal write fails and leaves changes waiting (at once
    /// if one failed since the last wait), or when the last handle on the
    /// manager is dropped: a host then calls
    /// [`retry_journal`](Self::retry_journal), with a backoff of its choosing,
    /// until it succeeds. Never returns for a manager without a journal.
    ///
    /// A terminal transition whose write failed is applied in memory (its slot
    /// is free) but the task is *unrecorded*: its result is not offered for
    /// delivery, nor markable, until the journal has recorded it — a result
    /// the store does not hold must never reach the model. The next successful
    /// write of any change catches up too. `AsyncTaskRuntime` runs this loop
    /// for its host.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a failure signalled while nobody waits is kept for the
    /// next wait. The future holds no handle on the manager, so a task that
    /// waits on it (with a [`WeakAsyncTaskManager`] for the retries) does not
    /// keep the manager, or its journal's store, alive.
    pub fn journal_failed(&self) -> impl Future<Output = ()> + Send + 'static {
        let journaled = self.shared.journal.is_some();
        let failed = Arc::clone(&self.shared.journal_failed);
        async move {
            if !journaled {
                std::future::pending::<()>().await;
            }
            failed.notified().await;
        }
    }

    /// A handle that does not keep the manager alive (see
    /// [`journal_failed`](Self::journal_failed)).
    #[must_use]
    pub fn downgrade(&self) -> WeakAsyncTaskManager {
        WeakAsyncTaskManager {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// Writes the changes the journal missed. `Ok(true)` when there were some
    /// and they are recorded now (unrecorded results become deliverable, and their
    /// events are delivered); `Ok(false)` when nothing waited (or there is no
    /// journal).
    ///
    /// # Errors
    ///
    /// The [`JournalError`] of the write; the changes keep waiting.
    pub fn retry_journal(&self) -> Result<bool, JournalError> {
        let Some(journal) = self.journal() else {
            return Ok(false);
        };
        let now = self.now();
        let (written, drain) = {
            let mut state = self.lock();
            if !state.registry.has_backlog() && !state.registry.starts_failed() {
                return Ok(false);
            }
            let written = state.registry.retry_journal(journal);
            let mut drain = written.is_ok() && self.after_journal(&mut state);
            // Starts the journal missed happen now.
            if written.is_ok() {
                drain |= self.start_waiting(&mut state, now);
            }
            (written, drain)
        };
        if drain {
            self.drain_events();
        }
        written.map(|()| true)
    }

    /// Whether some changes wait for the journal (a write failed and no later
    /// write succeeded yet).
    #[must_use]
    pub fn has_journal_backlog(&self) -> bool {
        let state = self.lock();
        state.registry.has_backlog() || state.registry.starts_failed()
    }

    /// A manager that journals every change to `journal`, holding `tasks` (what
    /// its store held, in registration order; empty for a new store). No event
    /// is emitted. Tasks stored as running ran in a process that has ended: they
    /// come back **failed**, interrupted ([`StoredTask::interrupted_error`]),
    /// and are delivered like any other result; then the history limit prunes
    /// (one journaled change; a failed write is logged, the manager built).
    ///
    /// # Errors
    ///
    /// [`RestoreError`] when the tasks are not a registry (an empty or repeated
    /// id, a completed task without an output, …); nothing is journaled then.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use asynctask_manager::{AsyncTaskManager, Journal, JournalEntry, JournalError, StoredTask};
    /// use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus, ManualClock, MaxAsyncTasks};
    /// #[derive(Default)]
    /// struct Count(Mutex<usize>);
    /// impl Journal for Count {
    ///     fn record(&self, entries: &[JournalEntry<'_>]) -> Result<(), JournalError> {
    ///         *self.0.lock().map_err(|_| JournalError::new("poisoned"))? += entries.len();
    ///         Ok(())
    ///     }
    /// }
    /// let mut done = AsyncTaskInfo::new("b2", "tester", "run the suite", 1_000);
    /// done.fail("exit status 2", 2_000);
    /// let running = AsyncTaskInfo::new("a1", "researcher", "map the code", 1_000);
    /// let stored = vec![StoredTask::new(running).with_process("pid 4242"), StoredTask::new(done)];
    /// let (journal, clock) = (Arc::new(Count::default()), Arc::new(ManualClock::new(9_000)));
    /// let manager = AsyncTaskManager::restore(MaxAsyncTasks::default(), clock, journal.clone(), stored)?;
    /// let a1 = manager.task("a1").unwrap();
    /// assert_eq!((a1.status(), a1.completed_at()), (AsyncTaskStatus::Failed, Some(9_000)));
    /// assert!(a1.error().unwrap().starts_with("interrupted: the process running this task ended"));
    /// assert_eq!(manager.pending_notifications().len(), 2, "both results await delivery");
    /// assert_eq!(*journal.0.lock().unwrap(), 1, "the interruption was journaled");
    /// # Ok::<(), asynctask_manager::RestoreError>(())
    /// ```
    pub fn restore(
        max: MaxAsyncTasks,
        clock: Arc<dyn Clock>,
        journal: Arc<dyn Journal>,
        tasks: Vec<StoredTask>,
    ) -> Result<Self, RestoreError> {
        // The host's clock is user code: read before building anything.
        let now = clock.now_ms().min(crate::record::LATEST);
        let (registry, error) = Registry::restore(max, tasks, now, Some(journal.as_ref()))?;
        if let Some(error) = error {
            tracing::error!(
                error = %error.chain(),
                "the journal could not record the tasks restored as interrupted (or the history \
                 pruned on restore); restored in memory anyway, and a later restore redoes it"
            );
        }
        let counts = registry.counts();
        tracing::debug!(
            tasks = counts.total(),
            pending = counts.pending_notifications,
            "async task registry restored"
        );
        Ok(AsyncTaskManager::from_parts(clock, Some(journal), registry))
    }
}

/// A handle on an [`AsyncTaskManager`] that does not keep it alive.
///
/// # Examples
///
/// ```
/// use asynctask_manager::AsyncTaskManager;
///
/// let manager = AsyncTaskManager::default();
/// let weak = manager.downgrade();
/// assert!(weak.upgrade().is_some());
/// drop(manager);
/// assert!(weak.upgrade().is_none());
/// ```
#[derive(Clone, Debug)]
pub struct WeakAsyncTaskManager {
    shared: std::sync::Weak<Shared>,
}

impl WeakAsyncTaskManager {
    /// The manager, while any handle on it is alive.
    #[must_use]
    pub fn upgrade(&self) -> Option<AsyncTaskManager> {
        self.shared
            .upgrade()
            .map(|shared| AsyncTaskManager { shared })
    }
}
