//! `AsyncTaskManager`: the shared, thread-safe handle on the registry — its
//! state, transitions, reads and marks. Restoring and journal retries
//! (`journaled`), reservations (`reservation`) and subscriptions
//! (`subscriptions`) are in child modules, which use this one and are used by
//! none of it.

pub(crate) mod asking;
pub(crate) mod journaled;
pub(crate) mod reservation;
pub(crate) mod subscriptions;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use asynctask_model::{Clock, MaxAsyncTasks, MaxQueuedTasks, OutputObject, SystemClock};
use tokio_util::sync::CancellationToken;

use crate::admission::{LimitReached, RegisterError, RegisterTaskInput};
use crate::events::{Dispatcher, PruneDelivery, TaskEvent};
use crate::journal::{Journal, JournalError};
use crate::live::{InboxSender, MessageError, TaskProgress};
use crate::registry::{Marked, Registry, Terminal, Transition};
use crate::snapshot::TaskSnapshot;
use crate::{PrefixMatch, TaskCounts};

/// The registry of background tasks: a cheap handle, clones share one registry.
///
/// It admits tasks under the `task-max-async` limit (the check and the
/// insertion under one lock), moves them through the state machine, answers
/// queries with [`TaskSnapshot`]s (in registration order), prunes delivered
/// history and emits an event for every terminal transition. Every operation is
/// O(log n) or better, plus O(k) to return k results. It never spawns or
/// awaits anything. Built with [`restore`](Self::restore), it tells its
/// [`Journal`] of every change before the change is visible.
///
/// Event handlers run after the change, with the lock released, once per
/// transition and in transition order across all threads; they may call back
/// into the manager, and one that panics is logged and stops nothing.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, PrefixMatch, RegisterTaskInput};
/// use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks, OutputObject, TerminateReason};
///
/// let manager = AsyncTaskManager::new(MaxAsyncTasks::default());
/// manager.register_task(RegisterTaskInput::new("7f3a09c1-aa", "researcher", "find the bug"))?;
/// assert!(manager.complete_task("7f3a09c1-aa", OutputObject::new(TerminateReason::Goal)));
/// assert!(!manager.cancel_task("7f3a09c1-aa"), "the first transition wins");
///
/// let PrefixMatch::One(task) = manager.find_by_prefix("7f3a") else { panic!() };
/// assert_eq!(task.status(), AsyncTaskStatus::Completed);
///
/// // Until the model is told, the task is pending; afterwards it may be pruned.
/// assert_eq!(manager.pending_notifications().len(), 1);
/// assert!(manager.mark_notified("7f3a09c1-aa"));
/// assert!(manager.pending_notifications().is_empty());
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[derive(Clone)]
pub struct AsyncTaskManager {
    shared: Arc<Shared>,
}

/// What every clone of a manager shares.
struct Shared {
    clock: Arc<dyn Clock>,
    /// Told of every change under the lock; `None` keeps everything in memory.
    journal: Option<Arc<dyn Journal>>,
    state: Mutex<State>,
    /// Signalled (one stored permit) when a journal write failed and left
    /// changes waiting: see [`AsyncTaskManager::journal_failed`].
    journal_failed: Arc<tokio::sync::Notify>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Whoever waits for a failure learns there will be none.
        self.journal_failed.notify_one();
    }
}

/// Everything behind the one lock.
struct State {
    registry: Registry,
    events: Dispatcher,
}

impl State {
    /// The tasks the last change pruned, for their handlers to hear of once
    /// the lock is released (`None`, and nothing kept, when nobody listens).
    fn take_pruned(&mut self) -> Option<PruneDelivery> {
        let keep = self.events.has_prune_subscribers();
        let heads = self.registry.take_pruned(keep)?;
        Some(self.events.pruned(heads))
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The only user code run under this lock is the host's `Journal::record`
        // (called before a change is applied, so a panic there leaves the state
        // as it was); otherwise a poisoned lock means a panic inside the registry
        // itself between two consistent states. Either way the data is the last
        // consistent state it reached, so carry on rather than spread the panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn unsubscribe(&self, id: u64) {
        let old = self.lock().events.unsubscribe(id);
        // The removed handler may be destroyed here, running user `Drop` code
        // (which may itself unsubscribe): never under the lock.
        drop(old);
    }
}

impl AsyncTaskManager {
    /// A manager with the given limit, on the system clock.
    #[must_use]
    pub fn new(max: MaxAsyncTasks) -> Self {
        AsyncTaskManager::with_clock(max, Arc::new(SystemClock))
    }

    /// A manager with the given limit and clock (use a `ManualClock` in tests).
    #[must_use]
    pub fn with_clock(max: MaxAsyncTasks, clock: Arc<dyn Clock>) -> Self {
        AsyncTaskManager::from_parts(clock, None, Registry::new(max))
    }

    fn from_parts(
        clock: Arc<dyn Clock>,
        journal: Option<Arc<dyn Journal>>,
        registry: Registry,
    ) -> Self {
        let backlog = registry.has_backlog();
        let manager = AsyncTaskManager {
            shared: Arc::new(Shared {
                clock,
                journal,
                state: Mutex::new(State {
                    registry,
                    events: Dispatcher::new(),
                }),
                journal_failed: Arc::new(tokio::sync::Notify::new()),
            }),
        };
        if backlog {
            manager.shared.journal_failed.notify_one();
        }
        manager
    }

    /// After an operation that wrote to the journal: announces the
    /// unrecorded tasks the journal caught up with (their transitions' events
    /// waited with them), and signals [`journal_failed`](Self::journal_failed) when
    /// changes still wait. Returns whether events wait to be drained.
    fn after_journal(&self, state: &mut State) -> bool {
        if self.shared.journal.is_none() {
            return false;
        }
        if state.registry.has_backlog() {
            self.shared.journal_failed.notify_one();
        }
        let mut drain = false;
        for task in state.registry.take_recorded() {
            tracing::info!(task_id = %task.id(), "the journal caught up: the task's result may now be delivered");
            if let Some(event) = TaskEvent::from_task(task) {
                drain |= state.events.push(event);
            }
        }
        drain
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Starts what the queue lets start now (a slot freed), each start with
    /// its `Started` event queued; returns whether events wait to be drained.
    /// A start the journal could not record does not happen: it is logged,
    /// and retried with the journal.
    fn start_waiting(&self, state: &mut State, now: u64) -> bool {
        let started = state.registry.start_queued(now, self.journal());
        if let Some(error) = started.journal_error {
            tracing::error!(
                error = %error.chain(),
                "the journal could not record the start of queued tasks; they stay queued \
                 until it can"
            );
            self.shared.journal_failed.notify_one();
        }
        let mut drain = false;
        for task in started.tasks {
            tracing::debug!(task_id = %task.id(), "queued task started");
            drain |= state.events.push(TaskEvent::Started(task));
        }
        drain
    }

    fn journal(&self) -> Option<&dyn Journal> {
        self.shared.journal.as_deref()
    }

    fn now(&self) -> u64 {
        // Read before taking the lock: a host's clock is user code. A clock
        // at the very end of time reads one millisecond earlier: a record
        // keeps `u64::MAX` for "never".
        self.shared.clock.now_ms().min(crate::record::LATEST)
    }

    /// The clock this manager reads.
    #[must_use]
    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.shared.clock)
    }

    /// The running limit in force (`task-max-async`).
    #[must_use]
    pub fn max_async_tasks(&self) -> MaxAsyncTasks {
        self.lock().registry.max()
    }

    /// The queue's bound in force (`task-max-queued`; 0, no queue, by
    /// default).
    #[must_use]
    pub fn max_queued_tasks(&self) -> MaxQueuedTasks {
        self.lock().registry.max_queued()
    }

    /// Changes the queue's bound: a launch past the running limit is queued
    /// while fewer than `max_queued` wait, refused past it. Tasks already
    /// queued stay queued when it is lowered.
    pub fn set_max_queued_tasks(&self, max_queued: MaxQueuedTasks) {
        self.lock().registry.set_max_queued(max_queued);
        tracing::debug!(max_queued = max_queued.get(), "task-max-queued changed");
    }

    /// Lets queued tasks start, and starts those the limit admits now, each
    /// with its [`Started`](TaskEvent::Started) event. A manager pauses the
    /// starts of a registry it [restored](Self::restore) until this is called,
    /// so that whoever runs subagents subscribes first; otherwise starts
    /// happen by themselves, whenever a running slot frees.
    pub fn start_queued(&self) {
        let now = self.now();
        let drain = {
            let mut state = self.lock();
            state.registry.resume_starts();
            self.start_waiting(&mut state, now)
        };
        if drain {
            self.drain_events();
        }
    }

    /// Stops starting queued tasks until [`start_queued`](Self::start_queued):
    /// a host shutting down pauses them before it cancels the running tasks,
    /// so that no slot a cancel frees starts a subagent nobody will wait for.
    /// The queued tasks stay queued (a journaled registry starts them after
    /// its restore).
    ///
    /// ```
    /// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
    /// use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks, MaxQueuedTasks};
    ///
    /// let manager = AsyncTaskManager::new(MaxAsyncTasks::new(1)?);
    /// manager.set_max_queued_tasks(MaxQueuedTasks::new(5)?);
    /// manager.register_task(RegisterTaskInput::new("a", "tester", "g"))?;
    /// manager.register_task(RegisterTaskInput::new("b", "tester", "g"))?;
    /// manager.pause_starts();
    /// manager.cancel_task("a");
    /// assert_eq!(manager.task("b").unwrap().status(), AsyncTaskStatus::Queued);
    /// manager.start_queued();
    /// assert_eq!(manager.task("b").unwrap().status(), AsyncTaskStatus::Running);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pause_starts(&self) {
        self.lock().registry.pause_starts();
    }

    /// Whether this manager journals its changes (it was
    /// [restored](Self::restore) with a journal): its queued tasks outlive
    /// the process.
    #[must_use]
    pub fn is_journaled(&self) -> bool {
        self.shared.journal.is_some()
    }

    /// The queued tasks, the next to start first (a task's position in the
    /// queue is its index here, plus one).
    #[must_use]
    pub fn queued_tasks(&self) -> Vec<TaskSnapshot> {
        self.lock().registry.queued_tasks()
    }

    /// Where task `id` waits in the queue, from 1 (the next to start);
    /// `None` unless it is queued. O(its position); the queue is bounded
    /// (`task-max-queued`).
    #[must_use]
    pub fn queue_position(&self, id: &str) -> Option<usize> {
        self.lock().registry.queue_position(id)
    }

    /// Gives task `id`, queued or running, the progress handle and inbox its
    /// run reports to and reads from (a queued task gets them when it starts,
    /// from whoever starts its subagent). `false` when the task is unknown or
    /// has ended.
    pub fn attach(
        &self,
        id: &str,
        progress: Option<TaskProgress>,
        inbox: Option<InboxSender>,
    ) -> bool {
        self.lock().registry.attach(id, progress, inbox)
    }

    /// Changes the running limit and prunes the history to the new history limit
    /// at once. Tasks already running (and reservations already held) are kept
    /// even when they exceed a lowered limit; new ones wait until they fit.
    ///
    /// The pruning is journaled; when that write fails it is logged and applied
    /// in memory anyway (the limit must hold; a restore prunes the store again).
    pub fn set_max_async_tasks(&self, max: MaxAsyncTasks) {
        let now = self.now();
        let (error, drain, pruned) = {
            let mut state = self.lock();
            let error = state.registry.set_max(max, self.journal());
            let mut drain = self.after_journal(&mut state);
            // A raised limit lets queued tasks start.
            drain |= self.start_waiting(&mut state, now);
            (error, drain, state.take_pruned())
        };
        if drain {
            self.drain_events();
        }
        if let Some(pruned) = pruned {
            pruned.run();
        }
        if let Some(error) = error {
            tracing::error!(
                error = %error.chain(),
                "the journal could not record the history pruned by a new task-max-async; \
                 pruned in memory anyway"
            );
        }
        tracing::debug!(max = max.get(), "task-max-async changed");
    }

    /// Whether a task could be admitted right now. Advisory only: another launch
    /// may take the slot before you register; [`register_task`](Self::register_task)
    /// and [`reserve`](Self::reserve) are the atomic ways in.
    ///
    /// # Errors
    ///
    /// [`LimitReached`] when running tasks plus reservations fill the limit.
    pub fn can_launch_async(&self) -> Result<(), LimitReached> {
        self.lock().registry.check_limit()
    }

    fn release_reservation(&self) {
        let now = self.now();
        let drain = {
            let mut state = self.lock();
            state.registry.release_reservation();
            self.start_waiting(&mut state, now)
        };
        if drain {
            self.drain_events();
        }
    }

    /// Registers a running task, checking the limit and the id's uniqueness under
    /// one lock. Returns the new task. No event is emitted for a launch.
    ///
    /// # Errors
    ///
    /// [`RegisterError::LimitReached`] when the limit is full,
    /// [`RegisterError::DuplicateId`] when the id is taken (the task holding it is
    /// untouched), [`RegisterError::EmptyId`] for an empty id,
    /// [`RegisterError::Journal`] when the journal could not record it.
    pub fn register_task(&self, input: RegisterTaskInput) -> Result<TaskSnapshot, RegisterError> {
        self.register(input, false)
    }

    fn register(
        &self,
        input: RegisterTaskInput,
        reserved: bool,
    ) -> Result<TaskSnapshot, RegisterError> {
        let now = self.now();
        let id = (self.journal().is_some()).then(|| input.id.clone());
        // Only a task that may ask has questions to route.
        let asks = input.questions.is_some();
        let (registered, drain) = {
            let mut state = self.lock();
            let registered = state
                .registry
                .register(input, now, reserved, self.journal());
            let mut drain = self.after_journal(&mut state);
            if reserved && registered.is_err() {
                // The spent reservation's slot is free again.
                drain |= self.start_waiting(&mut state, now);
            }
            (registered, drain)
        };
        if drain {
            self.drain_events();
        }
        match &registered {
            Ok(task) => {
                if asks {
                    self.hook_questions(task.id());
                }
                tracing::debug!(task_id = %task.id(), subagent = %task.subagent_name(), reserved, "async task registered");
            }
            Err(RegisterError::Journal(error)) => {
                tracing::error!(
                    task_id = id.as_deref().unwrap_or_default(),
                    error = %error.chain(),
                    "the journal could not record a registration; the task was refused"
                );
            }
            Err(_) => {}
        }
        registered
    }

    /// Completes a running task with its output. Returns `false`, changing
    /// nothing, when the task is unknown or already terminal.
    pub fn complete_task(&self, id: &str, output: OutputObject) -> bool {
        self.transition(id, Terminal::Completed(output)).is_some()
    }

    /// Fails a running task with an error message. Returns `false`, changing
    /// nothing, when the task is unknown or already terminal.
    pub fn fail_task(&self, id: &str, error: impl Into<String>) -> bool {
        self.transition(id, Terminal::Failed(error.into()))
            .is_some()
    }

    /// Cancels a running task and its cancellation token. Returns `false`,
    /// changing nothing, when the task is unknown or already terminal.
    pub fn cancel_task(&self, id: &str) -> bool {
        self.transition(id, Terminal::Cancelled).is_some()
    }

    /// Applies a terminal transition; then, outside the lock, cancels the task's
    /// token (for a cancel: before any handler runs, so the runner hears of it at
    /// once) and delivers the event. Returns the task's token when the transition
    /// happened.
    fn transition(&self, id: &str, terminal: Terminal) -> Option<CancellationToken> {
        // The span covers the event handlers too: what they log carries the id.
        let _span =
            tracing::debug_span!("async_task_transition", task_id = %id, to = terminal.name())
                .entered();
        let now = self.now();
        let cancel = matches!(terminal, Terminal::Cancelled);
        let (drain, token, pruned) = {
            let mut state = self.lock();
            let snapshot = state.events.has_subscribers();
            let Transition {
                task,
                token,
                journal_error,
            } = state
                .registry
                .transition(id, terminal, now, snapshot, self.journal())?;
            let unrecorded = journal_error.is_some();
            if let Some(error) = journal_error {
                tracing::error!(
                    task_id = %id,
                    error = %error.chain(),
                    "the journal could not record a terminal transition; applied in memory anyway \
                     (a task must never stay running forever), the task unrecorded (its result not delivered) \
                     until the journal records it"
                );
            }
            tracing::debug!(task_id = %id, "async task finished");
            // An unrecorded task's event waits for the journal, like its result.
            let mut drain = match task.and_then(TaskEvent::from_task) {
                Some(event) if !unrecorded => state.events.push(event),
                _ => false,
            };
            drain |= self.after_journal(&mut state);
            // The slot it freed goes to the first queued task.
            drain |= self.start_waiting(&mut state, now);
            (drain, token, state.take_pruned())
        };
        if cancel {
            token.cancel();
        }
        if drain {
            self.drain_events();
        }
        if let Some(pruned) = pruned {
            pruned.run();
        }
        Some(token)
    }

    /// Delivers queued events until the queue is empty, running handlers with
    /// the lock released.
    fn drain_events(&self) {
        loop {
            // A statement of its own: the guard must be gone before handlers run.
            let next = self.lock().events.next();
            match next {
                Some(delivery) => delivery.run(),
                None => return,
            }
        }
    }

    /// The task with exactly this id.
    #[must_use]
    pub fn task(&self, id: &str) -> Option<TaskSnapshot> {
        self.lock().registry.task(id)
    }

    /// The tasks whose id starts with `prefix` (case-sensitive; any Unicode).
    /// Ambiguous candidates come in registration order.
    #[must_use]
    pub fn find_by_prefix(&self, prefix: &str) -> PrefixMatch {
        self.lock().registry.find_by_prefix(prefix)
    }

    /// Every task held, in registration order.
    #[must_use]
    pub fn tasks(&self) -> Vec<TaskSnapshot> {
        self.lock().registry.tasks()
    }

    /// The running tasks, in registration order.
    #[must_use]
    pub fn running_tasks(&self) -> Vec<TaskSnapshot> {
        self.lock().registry.running_tasks()
    }

    /// Every terminal task the model has not been told about yet — cancelled ones
    /// included — in registration order.
    #[must_use]
    pub fn pending_notifications(&self) -> Vec<TaskSnapshot> {
        self.lock().registry.pending_notifications()
    }

    /// [`pending_notifications`](Self::pending_notifications) and how many tasks
    /// run, read under one lock: a task that finishes meanwhile is counted in
    /// exactly one of them (running before, pending after), never in neither
    /// nor in both.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
    ///
    /// let manager = AsyncTaskManager::default();
    /// manager.register_task(RegisterTaskInput::new("a", "researcher", "g"))?;
    /// manager.register_task(RegisterTaskInput::new("b", "tester", "g"))?;
    /// manager.cancel_task("a");
    /// let (pending, running) = manager.pending_and_running();
    /// assert_eq!((pending.len(), pending[0].id(), running), (1, "a", 1));
    /// # Ok::<(), asynctask_manager::RegisterError>(())
    /// ```
    #[must_use]
    pub fn pending_and_running(&self) -> (Vec<TaskSnapshot>, usize) {
        let state = self.lock();
        (
            state.registry.pending_notifications(),
            state.registry.counts().running,
        )
    }

    /// [`pending_notifications`](Self::pending_notifications) and the
    /// [counts](Self::counts), read under one lock (like
    /// [`pending_and_running`](Self::pending_and_running), with the queued
    /// tasks counted too).
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
    /// use asynctask_model::{MaxAsyncTasks, MaxQueuedTasks};
    ///
    /// let manager = AsyncTaskManager::new(MaxAsyncTasks::new(1)?);
    /// manager.set_max_queued_tasks(MaxQueuedTasks::new(1)?);
    /// manager.register_task(RegisterTaskInput::new("a", "researcher", "g"))?;
    /// manager.register_task(RegisterTaskInput::new("b", "tester", "g"))?;
    /// let (pending, counts) = manager.pending_and_counts();
    /// assert_eq!((pending.len(), counts.running, counts.queued), (0, 1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn pending_and_counts(&self) -> (Vec<TaskSnapshot>, TaskCounts) {
        let state = self.lock();
        (
            state.registry.pending_notifications(),
            state.registry.counts(),
        )
    }

    /// Whether any terminal task awaits delivery. O(1).
    #[must_use]
    pub fn has_pending_notifications(&self) -> bool {
        self.lock().registry.has_pending()
    }

    /// How many tasks are held, by status. O(1).
    #[must_use]
    pub fn counts(&self) -> TaskCounts {
        self.lock().registry.counts()
    }

    /// The cancellation token of a running task (`None` once it is terminal).
    #[must_use]
    pub fn cancellation_token(&self, id: &str) -> Option<CancellationToken> {
        self.lock().registry.token(id)
    }

    /// The progress handle of a running task (`None` once it is terminal): what
    /// its runner has reported so far.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput, TaskProgress};
    ///
    /// let manager = AsyncTaskManager::default();
    /// let progress = TaskProgress::new();
    /// manager.register_task(RegisterTaskInput::new("a", "tester", "g").with_progress(progress.clone()))?;
    /// progress.record_output(b"12 tests passed\n");
    /// let seen = manager.progress("a").map(|p| p.snapshot());
    /// assert_eq!(seen.and_then(|s| s.last_line().map(str::to_owned)).as_deref(), Some("12 tests passed"));
    /// manager.cancel_task("a");
    /// assert!(manager.progress("a").is_none());
    /// # Ok::<(), asynctask_manager::RegisterError>(())
    /// ```
    #[must_use]
    pub fn progress(&self, id: &str) -> Option<TaskProgress> {
        self.lock().registry.progress(id)
    }

    /// Queues `message` in the inbox of running task `id` (exact id). It never
    /// changes the task's state, and never waits.
    ///
    /// # Errors
    ///
    /// [`MessageError::NotFound`], [`MessageError::Finished`] (with the task's
    /// status) once the task has ended, [`MessageError::NoInbox`] for a task
    /// registered without one, or [`MessageError::Inbox`] when its runner took
    /// no messages or has not read the last [`Inbox::CAPACITY`](crate::Inbox::CAPACITY).
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_manager::{AsyncTaskManager, Inbox, MessageError, RegisterTaskInput};
    /// use asynctask_model::AsyncTaskStatus;
    ///
    /// let manager = AsyncTaskManager::default();
    /// let (sender, inbox) = Inbox::channel();
    /// manager.register_task(RegisterTaskInput::new("a", "tester", "g").with_inbox(sender))?;
    /// manager.send_message("a", "only the io tests".to_owned())?;
    /// assert_eq!(inbox.try_recv().as_deref(), Some("only the io tests"));
    /// manager.cancel_task("a");
    /// assert_eq!(
    ///     manager.send_message("a", "too late".to_owned()),
    ///     Err(MessageError::Finished(AsyncTaskStatus::Cancelled)),
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send_message(&self, id: &str, message: String) -> Result<(), MessageError> {
        let state = self.lock();
        match state.registry.inbox(id) {
            None => Err(MessageError::NotFound),
            Some((status, _)) if status.is_terminal() => Err(MessageError::Finished(status)),
            Some((_, None)) => Err(MessageError::NoInbox),
            // `try_send` never waits and runs no user code: fine under the lock,
            // which keeps the message from racing the task's end.
            Some((_, Some(inbox))) => Ok(inbox.send(message)?),
        }
    }

    /// Who launched task `id`, when its registration said.
    #[must_use]
    pub fn origin(&self, id: &str) -> Option<String> {
        self.lock().registry.origin(id)
    }

    /// The cancellation tokens of every running task, in registration order.
    #[must_use]
    pub fn running_tokens(&self) -> Vec<CancellationToken> {
        self.lock().registry.running_tokens()
    }

    /// Records that the model was told how the task ended, then prunes. Returns
    /// `false` when the task is unknown, still running, unrecorded (its end not
    /// journaled yet) or already marked.
    ///
    /// Call it only after the delivery succeeded. The mark is journaled before
    /// it is visible, and applied even when the journal cannot record it
    /// (logged): this process never offers a delivered result again. The mark
    /// then waits in the journal's backlog and is written ahead of the next
    /// change, or by [`retry_journal`](Self::retry_journal).
    ///
    /// With a journal, a result reaches the model a second time — restored
    /// from a store that holds it undelivered — in these windows, and no
    /// others:
    ///
    /// - the process ends after the delivery and before this call (a host
    ///   that delivers through another process, a relay say, calls it only
    ///   once told the delivery succeeded: a lost confirmation is this case);
    /// - the journal could not record the mark, and the process ends before a
    ///   write does: killed, or shut down while the journal still fails (a
    ///   full disk), the last [`retry_journal`](Self::retry_journal) failing
    ///   too;
    /// - the journal recorded the mark but loses it afterwards: a store that
    ///   does not flush every change to the disk (`asynctask-store`'s
    ///   `Durability::ProcessCrash`) rolls back the marks since its last
    ///   checkpoint on a power loss or a kernel crash.
    ///
    /// Without a journal nothing outlives the process, and a marked result is
    /// never offered again.
    pub fn mark_notified(&self, id: &str) -> bool {
        // An `Err` means marked all the same: the journal catches up later.
        self.try_mark_notified(id).unwrap_or(true)
    }

    /// [`mark_notified`](Self::mark_notified), saying when the journal failed.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the journal could not record the mark. The task
    /// *is* marked (no longer pending: this process does not deliver it
    /// again); the mark waits in the backlog until a write records it (see
    /// [`has_journal_backlog`](Self::has_journal_backlog)). `Ok(true)`: marked
    /// and recorded; `Ok(false)`: not marked (see
    /// [`mark_notified`](Self::mark_notified)).
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
    ///
    /// let manager = AsyncTaskManager::default();
    /// manager.register_task(RegisterTaskInput::new("a1", "researcher", "g"))?;
    /// assert_eq!(manager.try_mark_notified("a1"), Ok(false), "still running");
    /// manager.cancel_task("a1");
    /// assert_eq!(manager.try_mark_notified("a1"), Ok(true));
    /// # Ok::<(), asynctask_manager::RegisterError>(())
    /// ```
    pub fn try_mark_notified(&self, id: &str) -> Result<bool, JournalError> {
        let Marked {
            count,
            journal_error,
        } = self.mark(&[id]);
        match journal_error {
            None => Ok(count == 1),
            Some(error) => Err(error),
        }
    }

    /// [`mark_notified`](Self::mark_notified) for several ids under one lock;
    /// returns how many were marked — those whose write failed (logged)
    /// included: the marks are one journal write, applied all the same and
    /// left in the backlog when it fails, as for one mark.
    pub fn mark_all_notified<S: AsRef<str>>(&self, ids: &[S]) -> usize {
        self.mark(ids).count
    }

    fn mark<S: AsRef<str>>(&self, ids: &[S]) -> Marked {
        let now = self.now();
        let (marked, drain, pruned) = {
            let mut state = self.lock();
            let marked = state.registry.mark_notified(ids, now, self.journal());
            (marked, self.after_journal(&mut state), state.take_pruned())
        };
        if drain {
            self.drain_events();
        }
        if let Some(pruned) = pruned {
            pruned.run();
        }
        match &marked.journal_error {
            None => {
                if marked.count > 0 {
                    tracing::debug!(marked = marked.count, "async tasks marked notified");
                }
            }
            Some(error) => tracing::warn!(
                task_ids = ?ids.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
                error = %error.chain(),
                "the journal could not record a delivery; marked all the same (not offered \
                 again), the mark is written with the next change — if the process ends \
                 first, the result is delivered again after the restart"
            ),
        }
        marked
    }

    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        self.lock().registry.check_invariants()
    }
}

impl Default for AsyncTaskManager {
    /// A manager with the default limit (5) on the system clock.
    fn default() -> Self {
        AsyncTaskManager::new(MaxAsyncTasks::default())
    }
}

impl fmt::Debug for AsyncTaskManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("AsyncTaskManager")
            .field("max_async_tasks", &state.registry.max().get())
            .field("counts", &state.registry.counts())
            .field("subscribers", &state.events.len())
            .field("journal", &self.shared.journal.is_some())
            .finish_non_exhaustive()
    }
}
