//! The journal hook: how a store hears of every change to the registry before
//! readers can see it, and the stored tasks a registry is restored from.

use std::error::Error as StdError;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus, OutputObject, TaskUsage};

/// Where a manager records every change to its registry, for a store to
/// rebuild it after the process ends ([`AsyncTaskManager::restore`](crate::AsyncTaskManager::restore));
/// what the manager does when a write fails: [`JournalError`].
///
/// # Contract
///
/// - **Journaled before visible**: [`record`](Self::record) runs under the
///   registry's lock before readers see the change, in order, one at a time.
/// - **One call, one change**: `entries` is one change and what it pruned;
///   record all of them or none (one transaction).
/// - **Short, no calls back**: everything waits while it runs (one `fsync` is
///   fine); never call into the manager. A panic counts as a failed write.
/// - **Entries can repeat** (a failed write is sent again, and may have been
///   recorded): accept a `Finished`, `Notified` (keep the later time) or
///   `Removed` whose effect you hold.
///
/// # Examples
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use asynctask_manager::{AsyncTaskManager, Journal, JournalEntry, JournalError, RegisterTaskInput};
/// use asynctask_model::{ManualClock, MaxAsyncTasks};
/// #[derive(Default)]
/// struct Log(Mutex<Vec<String>>);
/// impl Journal for Log {
///     fn record(&self, entries: &[JournalEntry<'_>]) -> Result<(), JournalError> {
///         let mut log = self.0.lock().map_err(|_| JournalError::new("poisoned"))?;
///         log.extend(entries.iter().map(|entry| format!("{} {}", entry.kind(), entry.id())));
///         Ok(())
///     }
/// }
/// let (log, clock) = (Arc::new(Log::default()), Arc::new(ManualClock::new(1_000)));
/// let manager = AsyncTaskManager::restore(MaxAsyncTasks::default(), clock, log.clone(), Vec::new())?;
/// manager.register_task(RegisterTaskInput::new("a1", "researcher", "find the bug"))?;
/// manager.cancel_task("a1");
/// manager.mark_notified("a1");
/// assert_eq!(*log.0.lock().unwrap(), ["registered a1", "finished a1", "notified a1"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Journal: Send + Sync {
    /// Records one change (see the trait's contract).
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the change could not be recorded; the manager then
    /// follows the failure policy in the trait's docs.
    fn record(&self, entries: &[JournalEntry<'_>]) -> Result<(), JournalError>;
}

/// One change to the registry, as a [`Journal`] is told of it. The data is
/// borrowed from the registry for the length of the call.
///
/// Replaying a journal's entries in order rebuilds the registry: every task,
/// its status, times, output or error, `notified_at` and origin, in
/// registration order (see [`StoredTask`]).
///
/// The enum is deliberately exhaustive: a journal that did not know of a new
/// kind of change would silently lose it, so adding one must break every
/// journal's `match` at compile time.
///
/// # Examples
///
/// ```
/// use asynctask_manager::JournalEntry;
///
/// let entry = JournalEntry::Notified { id: "a1", notified_at: 5_000 };
/// assert_eq!((entry.kind(), entry.id()), ("notified", "a1"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalEntry<'a> {
    /// A task was registered: it is running, or queued.
    Registered {
        /// The task's id.
        id: &'a str,
        /// The subagent that runs it.
        subagent_name: &'a str,
        /// The goal it was given.
        goal_prompt: &'a str,
        /// When it was registered, in Unix milliseconds.
        launched_at: u64,
        /// Who launched it, when the registration said.
        origin: Option<&'a str>,
        /// It waits in the queue for a running slot (else it runs).
        queued: bool,
        /// What it was launched with, when the registration kept it (what a
        /// queued task is started with after a restart).
        launch: Option<&'a str>,
    },
    /// A queued task started.
    Started {
        /// The task's id.
        id: &'a str,
        /// When, in Unix milliseconds.
        started_at: u64,
    },
    /// A running task reached its terminal state.
    Finished {
        /// The task's id.
        id: &'a str,
        /// Its terminal state, with its output or error.
        outcome: TerminalOutcome<'a>,
        /// When it ended, in Unix milliseconds.
        completed_at: u64,
        /// The order in which tasks ended: it only grows, and breaks ties
        /// between tasks that ended in the same millisecond (the history is
        /// pruned oldest-ended first). Store it as
        /// [`StoredTask::finish_order`].
        finish_order: u64,
        /// What the task's runner had reported it used, if anything: store
        /// it as the stored task's [`usage`](AsyncTaskInfo::usage).
        usage: Option<&'a TaskUsage>,
    },
    /// The model was told how the task ended.
    Notified {
        /// The task's id.
        id: &'a str,
        /// When, in Unix milliseconds.
        notified_at: u64,
    },
    /// The task was pruned from the history (it had been notified).
    Removed {
        /// The task's id.
        id: &'a str,
    },
}

impl<'a> JournalEntry<'a> {
    /// The id of the task the entry is about.
    #[must_use]
    pub fn id(&self) -> &'a str {
        match *self {
            JournalEntry::Registered { id, .. }
            | JournalEntry::Started { id, .. }
            | JournalEntry::Finished { id, .. }
            | JournalEntry::Notified { id, .. }
            | JournalEntry::Removed { id } => id,
        }
    }

    /// The kind of change, for logs: `registered`, `started`, `finished`,
    /// `notified` or `removed`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            JournalEntry::Registered { .. } => "registered",
            JournalEntry::Started { .. } => "started",
            JournalEntry::Finished { .. } => "finished",
            JournalEntry::Notified { .. } => "notified",
            JournalEntry::Removed { .. } => "removed",
        }
    }
}

/// The terminal state a [`JournalEntry::Finished`] records, with its payload.
///
/// # Examples
///
/// ```
/// use asynctask_manager::TerminalOutcome;
/// use asynctask_model::AsyncTaskStatus;
///
/// assert_eq!(TerminalOutcome::Failed("exit status 2").status(), AsyncTaskStatus::Failed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalOutcome<'a> {
    /// Completed with this output.
    Completed(&'a OutputObject),
    /// Failed with this error.
    Failed(&'a str),
    /// Cancelled.
    Cancelled,
}

impl TerminalOutcome<'_> {
    /// The status it stands for.
    #[must_use]
    pub fn status(&self) -> AsyncTaskStatus {
        match self {
            TerminalOutcome::Completed(_) => AsyncTaskStatus::Completed,
            TerminalOutcome::Failed(_) => AsyncTaskStatus::Failed,
            TerminalOutcome::Cancelled => AsyncTaskStatus::Cancelled,
        }
    }

    /// Applies the outcome to a running task with the model's own transition;
    /// `false` (changing nothing) when the task is already terminal. What a
    /// journal that keeps [`AsyncTaskInfo`]s does with a `Finished` entry.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_manager::TerminalOutcome;
    /// use asynctask_model::AsyncTaskInfo;
    ///
    /// let mut task = AsyncTaskInfo::new("a1", "tester", "run the suite", 10);
    /// assert!(TerminalOutcome::Failed("exit status 2").apply(&mut task, 20));
    /// assert_eq!(task.error.as_deref(), Some("exit status 2"));
    /// ```
    pub fn apply(&self, task: &mut AsyncTaskInfo, completed_at: u64) -> bool {
        match *self {
            TerminalOutcome::Completed(output) => task.complete(output.clone(), completed_at),
            TerminalOutcome::Failed(error) => task.fail(error, completed_at),
            TerminalOutcome::Cancelled => task.cancel(completed_at),
        }
    }
}

/// A [`Journal`] could not record a change. It keeps the journal's own error
/// as its [`source`](std::error::Error::source).
///
/// Clones share the source; two values are equal when they are clones of one
/// error.
///
/// # What the manager does then
///
/// | change | what the manager does |
/// |---|---|
/// | a registration | refused with [`RegisterError::Journal`](crate::RegisterError::Journal): nothing runs that the store does not know |
/// | `mark_notified` | applied anyway (the result was delivered) and written again ahead of the next change; if the process ends first, the result is delivered again after the restart (a window [`AsyncTaskManager::mark_notified`](crate::AsyncTaskManager::mark_notified) lists) |
/// | a terminal transition | applied anyway (a task never stays running forever), logged, and the task is *unrecorded* — its result not offered, its event not sent — until a write records it: the next change's, or [`AsyncTaskManager::retry_journal`](crate::AsyncTaskManager::retry_journal). If the process ends first, the task comes back interrupted |
/// | pruning alone (`set_max_async_tasks`) | applied anyway, logged, written again like a terminal transition |
///
/// # Examples
///
/// ```
/// use std::error::Error;
/// use asynctask_manager::JournalError;
///
/// let io = std::io::Error::new(std::io::ErrorKind::StorageFull, "disk full");
/// let error = JournalError::new(io);
/// assert_eq!(error.to_string(), "the task journal could not record a change");
/// assert_eq!(error.source().map(|s| s.to_string()).as_deref(), Some("disk full"));
/// assert_eq!(error.clone(), error);
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[error("the task journal could not record a change")]
pub struct JournalError {
    #[source]
    source: Arc<dyn StdError + Send + Sync>,
}

impl JournalError {
    /// Wraps the journal's own error (or a message: `JournalError::new("why")`).
    #[must_use]
    pub fn new(source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        JournalError {
            source: Arc::from(source.into()),
        }
    }

    /// The error, with its whole chain of sources, on one line: what logs show.
    ///
    /// # Examples
    ///
    /// ```
    /// let error = asynctask_manager::JournalError::new("disk full");
    /// assert_eq!(error.chain(), "the task journal could not record a change: disk full");
    /// ```
    #[must_use]
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut next = StdError::source(self);
        while let Some(cause) = next {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            next = cause.source();
        }
        text
    }
}

impl PartialEq for JournalError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.source, &other.source)
    }
}

impl Eq for JournalError {}

/// Calls the journal, turning a panic into a [`JournalError`].
pub(crate) fn write(
    journal: &dyn Journal,
    entries: &[JournalEntry<'_>],
) -> Result<(), JournalError> {
    if entries.is_empty() {
        return Ok(());
    }
    match catch_unwind(AssertUnwindSafe(|| journal.record(entries))) {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            Err(JournalError::new(format!(
                "the journal panicked: {message}"
            )))
        }
    }
}

/// The start of the error a restored task gets when it was still running when
/// the process that ran it ended: `interrupted: the process running this task
/// ended before it finished`, followed by what is known in parentheses.
///
/// # Examples
///
/// ```
/// assert!(asynctask_manager::INTERRUPTED_ERROR.starts_with("interrupted:"));
/// ```
pub const INTERRUPTED_ERROR: &str =
    "interrupted: the process running this task ended before it finished";

/// One task as a store kept it: what [`AsyncTaskManager::restore`](crate::AsyncTaskManager::restore)
/// rebuilds a registry from. A restore takes them in registration order.
///
/// # Examples
///
/// ```
/// use asynctask_manager::StoredTask;
/// use asynctask_model::AsyncTaskInfo;
///
/// let stored = StoredTask::new(AsyncTaskInfo::new("a1", "researcher", "map the code", 1_000))
///     .with_origin("session-1")
///     .with_process("pid 4242");
/// assert_eq!(stored.origin.as_deref(), Some("session-1"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTask {
    /// The task as it was last journaled.
    pub info: AsyncTaskInfo,
    /// Who launched it, when its registration said.
    pub origin: Option<String>,
    /// The [`finish_order`](JournalEntry::Finished::finish_order) it was
    /// journaled with; ignored while running. Only the order matters: ties
    /// (two tasks with equal `completed_at` and `finish_order`) are broken by
    /// registration order.
    pub finish_order: u64,
    /// What is known of the process that was running the task (the SQLite
    /// store records `pid 4242`), for the error of a task restored as
    /// interrupted.
    pub process: Option<String>,
    /// What it was launched with (see
    /// [`JournalEntry::Registered::launch`]): a task restored as queued is
    /// started with it.
    pub launch: Option<String>,
}

impl StoredTask {
    /// A stored task with no origin, no process and finish order 0.
    #[must_use]
    pub fn new(info: AsyncTaskInfo) -> Self {
        StoredTask {
            info,
            origin: None,
            finish_order: 0,
            process: None,
            launch: None,
        }
    }

    /// Sets what the task was launched with.
    #[must_use]
    pub fn with_launch(mut self, launch: impl Into<String>) -> Self {
        self.launch = Some(launch.into());
        self
    }

    /// Sets who launched the task.
    #[must_use]
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = Some(origin.into());
        self
    }

    /// Sets the finish order.
    #[must_use]
    pub fn with_finish_order(mut self, finish_order: u64) -> Self {
        self.finish_order = finish_order;
        self
    }

    /// Sets what is known of the process that was running the task.
    #[must_use]
    pub fn with_process(mut self, process: impl Into<String>) -> Self {
        self.process = Some(process.into());
        self
    }

    /// The error a task still running when its process ended is restored
    /// with: [`INTERRUPTED_ERROR`] and what is known.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_manager::StoredTask;
    /// use asynctask_model::AsyncTaskInfo;
    ///
    /// let stored = StoredTask::new(AsyncTaskInfo::new("a1", "r", "g", 0)).with_process("pid 4242");
    /// assert_eq!(
    ///     stored.interrupted_error(),
    ///     "interrupted: the process running this task ended before it finished (pid 4242, killed or crashed)",
    /// );
    /// ```
    #[must_use]
    pub fn interrupted_error(&self) -> String {
        match &self.process {
            Some(process) => format!("{INTERRUPTED_ERROR} ({process}, killed or crashed)"),
            None => format!("{INTERRUPTED_ERROR} (killed or crashed)"),
        }
    }
}

/// Why a registry could not be restored from stored tasks. Nothing is built
/// when this is returned.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use asynctask_manager::{AsyncTaskManager, Journal, JournalEntry, JournalError, RestoreError, StoredTask};
/// use asynctask_model::{AsyncTaskInfo, MaxAsyncTasks, SystemClock};
///
/// struct Nowhere;
/// impl Journal for Nowhere {
///     fn record(&self, _: &[JournalEntry<'_>]) -> Result<(), JournalError> { Ok(()) }
/// }
///
/// let task = StoredTask::new(AsyncTaskInfo::new("a1", "r", "g", 0));
/// let refused = AsyncTaskManager::restore(
///     MaxAsyncTasks::default(), Arc::new(SystemClock), Arc::new(Nowhere), vec![task.clone(), task],
/// ).unwrap_err();
/// assert_eq!(refused, RestoreError::DuplicateId("a1".into()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// The stored task at this position (in the order given) has an empty id.
    #[error("stored task #{index} has an empty id")]
    EmptyId {
        /// Its position in the tasks given.
        index: usize,
    },
    /// Two stored tasks share an id.
    #[error("two stored tasks have the id '{0}'")]
    DuplicateId(String),
    /// A stored task breaks the model's rules.
    #[error("stored task '{id}' is inconsistent: {problem}")]
    Inconsistent {
        /// The task's id.
        id: String,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// What is wrong with a stored task, if anything.
pub(crate) fn inconsistency(info: &AsyncTaskInfo) -> Option<&'static str> {
    let has_payload = info.output.is_some() || info.error.is_some();
    match info.status {
        status if !status.is_terminal() => {
            if info.completed_at.is_some() {
                Some("a task that has not ended has a completion time")
            } else if info.notified_at.is_some() {
                Some("a task that has not ended has a notification time")
            } else if has_payload {
                Some("a task that has not ended has an output or an error")
            } else if status == AsyncTaskStatus::Queued && info.started_at.is_some() {
                Some("a queued task has a start time")
            } else {
                None
            }
        }
        _ if info.completed_at.is_none() => Some("a terminal task has no completion time"),
        AsyncTaskStatus::Completed if info.output.is_none() || info.error.is_some() => {
            Some("a completed task must have an output and no error")
        }
        AsyncTaskStatus::Failed if info.error.is_none() || info.output.is_some() => {
            Some("a failed task must have an error and no output")
        }
        AsyncTaskStatus::Cancelled if has_payload => {
            Some("a cancelled task has an output or an error")
        }
        _ => None,
    }
}
