//! Transition events, and the dispatcher that delivers them to handlers in
//! transition order without holding the registry lock.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use asynctask_model::AsyncTaskStatus;

use crate::questions::PendingQuestion;
use crate::snapshot::{TaskHead, TaskSnapshot};

/// A task started from the queue, its subagent asked a question, or it reached
/// a terminal state. Carries the task as it was right after the transition. More kinds may come: match with
/// a wildcard arm.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{TaskEvent, TaskSnapshot};
/// use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus};
///
/// let mut task = AsyncTaskInfo::new("id", "agent", "goal", 0);
/// task.cancel(5);
/// let event = TaskEvent::from_task(TaskSnapshot::from(task)).unwrap();
/// assert_eq!(event.task().id(), "id");
/// assert_eq!(event.status(), AsyncTaskStatus::Cancelled);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskEvent {
    /// A queued task started: a running slot freed, and its subagent is to
    /// run now (whoever runs subagents starts it: the `task` tool does).
    Started(TaskSnapshot),
    /// The task completed with an output.
    Completed(TaskSnapshot),
    /// The task failed with an error.
    Failed(TaskSnapshot),
    /// The task was cancelled.
    Cancelled(TaskSnapshot),
    /// The running task's subagent asked a question and waits for the answer
    /// ([`AsyncTaskManager::answer_question`](crate::AsyncTaskManager::answer_question)).
    /// The task stays running.
    Asked {
        /// The task, running.
        task: TaskSnapshot,
        /// What it asks.
        question: PendingQuestion,
    },
}

impl TaskEvent {
    /// The event for a task that just reached a terminal state (`None` for a
    /// task that has not ended).
    #[must_use]
    pub fn from_task(task: TaskSnapshot) -> Option<Self> {
        match task.status() {
            AsyncTaskStatus::Completed => Some(TaskEvent::Completed(task)),
            AsyncTaskStatus::Failed => Some(TaskEvent::Failed(task)),
            AsyncTaskStatus::Cancelled => Some(TaskEvent::Cancelled(task)),
            _ => None,
        }
    }

    /// The task, as it was right after the transition.
    #[must_use]
    pub fn task(&self) -> &TaskSnapshot {
        match self {
            TaskEvent::Started(task)
            | TaskEvent::Completed(task)
            | TaskEvent::Failed(task)
            | TaskEvent::Cancelled(task)
            | TaskEvent::Asked { task, .. } => task,
        }
    }

    /// The status the task reached (`Running` for a start).
    #[must_use]
    pub fn status(&self) -> AsyncTaskStatus {
        self.task().status()
    }
}

/// An event handler as stored by the manager.
pub(crate) type Handler = Arc<dyn Fn(&TaskEvent) + Send + Sync>;

/// A handler of pruned task ids as stored by the manager.
pub(crate) type PruneHandler = Arc<dyn Fn(&str) + Send + Sync>;

/// One registered handler.
#[derive(Clone)]
struct Subscriber {
    id: u64,
    handler: Handler,
}

/// One registered handler of pruned task ids.
#[derive(Clone)]
struct PruneSubscriber {
    id: u64,
    handler: PruneHandler,
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
    /// Told of every task pruned from the history, after the change, on the
    /// thread that made it (no order across threads: a pruned task never
    /// comes back).
    prune_subscribers: Arc<[PruneSubscriber]>,
    next_id: u64,
    queue: VecDeque<(TaskEvent, Arc<[Subscriber]>)>,
    draining: bool,
}

/// A subscriber list that a change replaced. Dropping it may destroy a
/// handler, running user `Drop` code (which may itself unsubscribe), so the
/// caller drops it after releasing the registry lock.
#[must_use = "drop it after releasing the lock"]
pub(crate) struct Replaced(
    #[expect(dead_code, reason = "held only to be dropped")] Option<Arc<[Subscriber]>>,
    #[expect(dead_code, reason = "held only to be dropped")] Option<Arc<[PruneSubscriber]>>,
);

/// Tasks just pruned (their heads, for their ids), with the handlers they go
/// to.
pub(crate) struct PruneDelivery {
    heads: Vec<Arc<TaskHead>>,
    subscribers: Arc<[PruneSubscriber]>,
}

impl PruneDelivery {
    /// Runs every handler on every id, with no lock held. A handler that
    /// panics is logged and does not stop the others.
    pub(crate) fn run(self) {
        for head in &self.heads {
            let id = head.id();
            for subscriber in self.subscribers.iter() {
                let outcome = catch_unwind(AssertUnwindSafe(|| (subscriber.handler)(id)));
                if let Err(panic) = outcome {
                    tracing::error!(
                        task_id = %id,
                        subscriber = subscriber.id,
                        panic = %panic_message(panic.as_ref()),
                        "a pruned-task handler panicked; the other handlers still ran"
                    );
                }
            }
        }
    }
}

/// An event taken from the queue, with the handlers it goes to.
pub(crate) struct Delivery {
    event: TaskEvent,
    subscribers: Arc<[Subscriber]>,
}

impl Dispatcher {
    pub(crate) fn new() -> Self {
        Dispatcher {
            subscribers: Arc::new([]),
            prune_subscribers: Arc::new([]),
            next_id: 0,
            queue: VecDeque::new(),
            draining: false,
        }
    }

    /// Whether anyone listens (so a transition need not build its event).
    pub(crate) fn has_subscribers(&self) -> bool {
        !self.subscribers.is_empty()
    }

    /// Whether anyone listens to pruning (so a change need not keep what it
    /// pruned).
    pub(crate) fn has_prune_subscribers(&self) -> bool {
        !self.prune_subscribers.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.subscribers.len() + self.prune_subscribers.len()
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
            Replaced(
                Some(std::mem::replace(&mut self.subscribers, subscribers)),
                None,
            ),
        )
    }

    /// Adds a handler of pruned task ids; returns its id and the list it
    /// replaced.
    pub(crate) fn subscribe_pruned(&mut self, handler: PruneHandler) -> (u64, Replaced) {
        let id = self.next_id;
        self.next_id += 1;
        let subscribers: Arc<[PruneSubscriber]> = self
            .prune_subscribers
            .iter()
            .cloned()
            .chain(std::iter::once(PruneSubscriber { id, handler }))
            .collect();
        (
            id,
            Replaced(
                None,
                Some(std::mem::replace(&mut self.prune_subscribers, subscribers)),
            ),
        )
    }

    /// Removes a handler, of either kind; returns the lists it replaced.
    pub(crate) fn unsubscribe(&mut self, id: u64) -> Replaced {
        let kept: Arc<[Subscriber]> = self
            .subscribers
            .iter()
            .filter(|subscriber| subscriber.id != id)
            .cloned()
            .collect();
        let kept_pruned: Arc<[PruneSubscriber]> = self
            .prune_subscribers
            .iter()
            .filter(|subscriber| subscriber.id != id)
            .cloned()
            .collect();
        Replaced(
            Some(std::mem::replace(&mut self.subscribers, kept)),
            Some(std::mem::replace(&mut self.prune_subscribers, kept_pruned)),
        )
    }

    /// The delivery of the tasks of `heads`, just pruned, to the handlers of
    /// pruned ids.
    pub(crate) fn pruned(&self, heads: Vec<Arc<TaskHead>>) -> PruneDelivery {
        PruneDelivery {
            heads,
            subscribers: Arc::clone(&self.prune_subscribers),
        }
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
            tracing::error!(
                task_id = %event.task().id(),
                subscriber = subscriber.id,
                panic = %panic_message(panic.as_ref()),
                "an async task event handler panicked; the other handlers still ran"
            );
        }
    }
}

/// A panic's payload as text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}
