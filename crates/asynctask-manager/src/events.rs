//! Transition events, and the dispatcher that delivers them to handlers in
//! transition order without holding the registry lock.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus};

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
struct Subscriber {
    id: u64,
    handler: Handler,
}

/// The subscribers, and the events not yet delivered to them.
///
/// It lives behind the registry's lock, so an event is queued in the same
/// critical section as the transition that caused it: that gives one global
/// transition order. Handlers never run under the lock: whichever thread finds
/// nobody draining becomes the drainer ([`push`](Self::push) returns `true`),
/// and takes events one at a time with [`next`](Self::next), running each with
/// the lock released (see [`run_handlers`]). A handler may make transitions of
/// its own; their events queue behind the current one.
///
/// Each event keeps the subscriber list current at its transition: the list is
/// replaced, never mutated, on (un)subscribe.
pub(crate) struct Dispatcher {
    subscribers: Arc<[Subscriber]>,
    next_id: u64,
    queue: VecDeque<(TaskEvent, Arc<[Subscriber]>)>,
    draining: bool,
}

/// A subscriber list that a change replaced. Dropping it may destroy a
/// handler, running user `Drop` code (which may itself unsubscribe), so the
/// caller drops it after releasing the registry lock.
#[must_use = "drop it after releasing the lock"]
pub(crate) struct Replaced(
    #[expect(dead_code, reason = "held only to be dropped")] Arc<[Subscriber]>,
);

/// An event taken from the queue, with the handlers it goes to.
pub(crate) struct Delivery {
    event: TaskEvent,
    subscribers: Arc<[Subscriber]>,
}

impl Dispatcher {
    pub(crate) fn new() -> Self {
        Dispatcher {
            subscribers: Arc::new([]),
            next_id: 0,
            queue: VecDeque::new(),
            draining: false,
        }
    }

    /// Whether anyone listens (so a transition need not build its event).
    pub(crate) fn has_subscribers(&self) -> bool {
        !self.subscribers.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.subscribers.len()
    }

    /// Adds a handler; returns its id and the list it replaced.
    pub(crate) fn subscribe(&mut self, handler: Handler) -> (u64, Replaced) {
        let id = self.next_id;
        self.next_id += 1;
        let subscribers: Arc<[Subscriber]> = self
            .subscribers
            .iter()
            .cloned()
            .chain(std::iter::once(Subscriber { id, handler }))
            .collect();
        (
            id,
            Replaced(std::mem::replace(&mut self.subscribers, subscribers)),
        )
    }

    /// Removes a handler; returns the list it replaced.
    pub(crate) fn unsubscribe(&mut self, id: u64) -> Replaced {
        let kept: Arc<[Subscriber]> = self
            .subscribers
            .iter()
            .filter(|subscriber| subscriber.id != id)
            .cloned()
            .collect();
        Replaced(std::mem::replace(&mut self.subscribers, kept))
    }

    /// Queues `event` for the current subscribers. `true`: nobody is draining,
    /// so the caller must drain (with [`next`](Self::next)) once it has released
    /// the lock.
    #[must_use]
    pub(crate) fn push(&mut self, event: TaskEvent) -> bool {
        self.queue.push_back((event, Arc::clone(&self.subscribers)));
        !std::mem::replace(&mut self.draining, true)
    }

    /// The next event for the drainer; `None` (and the drainer's job is done)
    /// when the queue is empty.
    pub(crate) fn next(&mut self) -> Option<Delivery> {
        let next = self.queue.pop_front();
        if next.is_none() {
            self.draining = false;
        }
        next.map(|(event, subscribers)| Delivery { event, subscribers })
    }
}

impl Delivery {
    /// Runs every handler on the event, with no lock held. A handler that
    /// panics is logged and does not stop the others.
    pub(crate) fn run(self) {
        run_handlers(&self.event, &self.subscribers);
    }
}

fn run_handlers(event: &TaskEvent, subscribers: &[Subscriber]) {
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
