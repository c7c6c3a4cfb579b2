//! Transition events, subscriptions, and the dispatcher that runs handlers in order
//! without holding the registry lock.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Weak};

use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus};

use crate::manager::Shared;

/// A task reached a terminal state. Carries the task as it was right after the
/// transition.
///
/// # Examples
///
/// ```
/// use asynctask_manager::TaskEvent;
/// use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus};
///
/// let mut task = AsyncTaskInfo::new("id", "agent", "goal", 0);
/// task.cancel(5);
/// let event = TaskEvent::Cancelled(task);
/// assert_eq!(event.task().id, "id");
/// assert_eq!(event.status(), AsyncTaskStatus::Cancelled);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskEvent {
    /// The task completed with an output.
    Completed(AsyncTaskInfo),
    /// The task failed with an error.
    Failed(AsyncTaskInfo),
    /// The task was cancelled.
    Cancelled(AsyncTaskInfo),
}

impl TaskEvent {
    /// The event for a task that just reached a terminal state (`None` for a
    /// running task).
    #[must_use]
    pub fn from_task(task: AsyncTaskInfo) -> Option<Self> {
        match task.status {
            AsyncTaskStatus::Running => None,
            AsyncTaskStatus::Completed => Some(TaskEvent::Completed(task)),
            AsyncTaskStatus::Failed => Some(TaskEvent::Failed(task)),
            AsyncTaskStatus::Cancelled => Some(TaskEvent::Cancelled(task)),
        }
    }

    /// The task, as it was right after the transition.
    #[must_use]
    pub fn task(&self) -> &AsyncTaskInfo {
        match self {
            TaskEvent::Completed(task) | TaskEvent::Failed(task) | TaskEvent::Cancelled(task) => {
                task
            }
        }
    }

    /// The terminal status the task reached.
    #[must_use]
    pub fn status(&self) -> AsyncTaskStatus {
        self.task().status
    }
}

/// An event handler as stored by the manager.
pub(crate) type Handler = Arc<dyn Fn(&TaskEvent) + Send + Sync>;

/// One registered handler.
#[derive(Clone)]
pub(crate) struct Subscriber {
    pub(crate) id: u64,
    pub(crate) handler: Handler,
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
    pub(crate) fn new(shared: Weak<Shared>, id: u64) -> Self {
        Subscription { shared, id }
    }

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

/// Runs every handler of a list on one event. A handler that panics is logged and
/// does not stop the others.
pub(crate) fn run_handlers(event: &TaskEvent, subscribers: &[Subscriber]) {
    for subscriber in subscribers {
        let outcome = catch_unwind(AssertUnwindSafe(|| (subscriber.handler)(event)));
        if let Err(panic) = outcome {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            tracing::error!(
                task_id = %event.task().id,
                subscriber = subscriber.id,
                panic = %message,
                "an async task event handler panicked; the other handlers still ran"
            );
        }
    }
}
