//! Subscribing to events (`subscribe`, the typed `on_task_*` handlers, pruning)
//! and `Subscription`, which unsubscribes when dropped.

use std::fmt;
use std::sync::{Arc, Weak};

use super::{AsyncTaskManager, Shared};
use crate::events::{Handler, PruneHandler, TaskEvent};
use crate::snapshot::TaskSnapshot;

impl AsyncTaskManager {
    /// Subscribes to every event: each start from the queue and each terminal
    /// transition. See the type-level docs for when handlers run.
    pub fn subscribe(&self, handler: impl Fn(&TaskEvent) + Send + Sync + 'static) -> Subscription {
        self.add_subscriber(Arc::new(handler))
    }

    /// Subscribes to starts from the queue only: `handler` gets each queued
    /// task that starts because a running slot freed (whoever runs subagents
    /// starts its subagent there; the `task` tool does).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
    /// use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks, MaxQueuedTasks};
    ///
    /// let manager = AsyncTaskManager::new(MaxAsyncTasks::new(1)?);
    /// manager.set_max_queued_tasks(MaxQueuedTasks::new(5)?);
    /// let started = Arc::new(Mutex::new(Vec::new()));
    /// let seen = Arc::clone(&started);
    /// let _on_start = manager.on_task_started(move |task| seen.lock().unwrap().push(task.id().to_owned()));
    /// manager.register_task(RegisterTaskInput::new("a", "tester", "g"))?;
    /// let b = manager.register_task(RegisterTaskInput::new("b", "tester", "g"))?;
    /// assert_eq!(b.status(), AsyncTaskStatus::Queued);
    /// manager.cancel_task("a"); // a slot frees: b starts
    /// assert_eq!(*started.lock().unwrap(), ["b"]);
    /// assert_eq!(manager.task("b").unwrap().status(), AsyncTaskStatus::Running);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_task_started(
        &self,
        handler: impl Fn(&TaskSnapshot) + Send + Sync + 'static,
    ) -> Subscription {
        self.subscribe(move |event| {
            if let TaskEvent::Started(task) = event {
                handler(task);
            }
        })
    }

    /// Subscribes to completions only.
    pub fn on_task_completed(
        &self,
        handler: impl Fn(&TaskSnapshot) + Send + Sync + 'static,
    ) -> Subscription {
        self.subscribe(move |event| {
            if let TaskEvent::Completed(task) = event {
                handler(task);
            }
        })
    }

    /// Subscribes to failures only.
    pub fn on_task_failed(
        &self,
        handler: impl Fn(&TaskSnapshot) + Send + Sync + 'static,
    ) -> Subscription {
        self.subscribe(move |event| {
            if let TaskEvent::Failed(task) = event {
                handler(task);
            }
        })
    }

    /// Subscribes to cancellations only.
    pub fn on_task_cancelled(
        &self,
        handler: impl Fn(&TaskSnapshot) + Send + Sync + 'static,
    ) -> Subscription {
        self.subscribe(move |event| {
            if let TaskEvent::Cancelled(task) = event {
                handler(task);
            }
        })
    }

    /// Subscribes to the pruning of the history: `handler` gets the id of
    /// every task removed from the manager because the history limit was
    /// exceeded (finished, delivered, and among the oldest to finish), once,
    /// after the change that pruned it, on the thread that made it, with no
    /// lock held. A host drops what it kept for the task there (its output
    /// files, say): nothing can ask for the task any more. A restore
    /// ([`restore`](Self::restore)) tells no handler what it pruned.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
    /// use asynctask_model::MaxAsyncTasks;
    ///
    /// // A limit of 1 keeps a history of 2 finished tasks.
    /// let manager = AsyncTaskManager::new(MaxAsyncTasks::new(1)?);
    /// let pruned = Arc::new(Mutex::new(Vec::new()));
    /// let seen = Arc::clone(&pruned);
    /// let _subscription = manager.on_task_pruned(move |id| seen.lock().unwrap().push(id.to_owned()));
    /// for id in ["a", "b", "c"] {
    ///     manager.register_task(RegisterTaskInput::new(id, "tester", "g"))?;
    ///     manager.cancel_task(id);
    ///     manager.mark_notified(id);
    /// }
    /// assert_eq!(*pruned.lock().unwrap(), ["a"]);
    /// assert!(manager.task("a").is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_task_pruned(&self, handler: impl Fn(&str) + Send + Sync + 'static) -> Subscription {
        let handler: PruneHandler = Arc::new(handler);
        let (id, old) = self.lock().events.subscribe_pruned(handler);
        drop(old);
        Subscription {
            shared: Arc::downgrade(&self.shared),
            id,
        }
    }

    fn add_subscriber(&self, handler: Handler) -> Subscription {
        let (id, old) = self.lock().events.subscribe(handler);
        // Dropped outside the lock, like every handler list.
        drop(old);
        Subscription {
            shared: Arc::downgrade(&self.shared),
            id,
        }
    }
}

/// Keeps an event handler registered; dropping it unsubscribes.
///
/// A handler may still run once after the drop if its event was already being
/// delivered on another thread. [`detach`](Self::detach) keeps the handler for the
/// manager's whole life.
///
/// # Examples
///
/// ```
/// use std::sync::{Arc, atomic::{AtomicUsize, Ordering}};
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
///
/// let manager = AsyncTaskManager::default();
/// let seen = Arc::new(AtomicUsize::new(0));
/// let counter = Arc::clone(&seen);
/// let subscription = manager.subscribe(move |_event| {
///     counter.fetch_add(1, Ordering::SeqCst);
/// });
/// manager.register_task(RegisterTaskInput::new("a", "agent", "goal"))?;
/// manager.cancel_task("a");
/// drop(subscription);
/// manager.register_task(RegisterTaskInput::new("b", "agent", "goal"))?;
/// manager.cancel_task("b");
/// assert_eq!(seen.load(Ordering::SeqCst), 1);
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[must_use = "dropping a Subscription unsubscribes its handler at once"]
pub struct Subscription {
    shared: Weak<Shared>,
    id: u64,
}

impl Subscription {
    /// Keeps the handler subscribed for as long as the manager lives.
    pub fn detach(mut self) {
        self.shared = Weak::new();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.unsubscribe(self.id);
        }
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("active", &(self.shared.strong_count() > 0))
            .finish()
    }
}
