//! Admission: what a registration carries, and the errors it can meet.

use tokio_util::sync::CancellationToken;

use crate::journal::JournalError;
use crate::live::{InboxSender, TaskProgress};
use crate::questions::QuestionDesk;

/// What a host supplies to register a task.
///
/// The `cancellation` token is the one handed to the subagent runner;
/// [`AsyncTaskManager::cancel_task`](crate::AsyncTaskManager::cancel_task) cancels it. Give each task its own token (a
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
    /// Where the runner reports its progress, for `check_async_tasks` to show
    /// (see [`AsyncTaskManager::progress`](crate::AsyncTaskManager::progress));
    /// `None` when it reports none.
    pub progress: Option<TaskProgress>,
    /// The sending end of the runner's inbox, when it has one (see
    /// [`AsyncTaskManager::send_message`](crate::AsyncTaskManager::send_message)).
    pub inbox: Option<InboxSender>,
    /// Who launched the task (a session, when several share one registry);
    /// `None` for a registry with one user.
    pub origin: Option<String>,
    /// What the task is launched with, kept with it (and journaled) until it
    /// ends: what a task that waits in the queue is started with, even after
    /// a restart. Opaque to the registry (the `task` tool keeps its
    /// parameters, as JSON); see [`with_launch`](Self::with_launch).
    pub launch: Option<String>,
    /// The manager's end of the questions its runner may ask (see
    /// [`Questions`](crate::Questions)), when it may ask any.
    pub questions: Option<QuestionDesk>,
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
            progress: None,
            inbox: None,
            origin: None,
            launch: None,
            questions: None,
        }
    }

    /// Replaces the cancellation token (to use a child of a host-wide token, say).
    #[must_use]
    pub fn with_cancellation(mut self, cancellation: CancellationToken) -> Self {
        self.cancellation = cancellation;
        self
    }

    /// Replaces the progress handle (use the one the runner reports to).
    #[must_use]
    pub fn with_progress(mut self, progress: TaskProgress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Gives the task an inbox (the sender; the runner holds the receiver).
    #[must_use]
    pub fn with_inbox(mut self, inbox: InboxSender) -> Self {
        self.inbox = Some(inbox);
        self
    }

    /// Lets the task's runner ask questions (the desk; the runner holds the
    /// [`Questions`](crate::Questions) end).
    #[must_use]
    pub fn with_questions(mut self, desk: QuestionDesk) -> Self {
        self.questions = Some(desk);
        self
    }

    /// Records who launched the task.
    #[must_use]
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = Some(origin.into());
        self
    }

    /// Keeps what the task is launched with: read back with
    /// [`TaskSnapshot::launch`](crate::TaskSnapshot::launch) when a queued
    /// task starts.
    ///
    /// ```
    /// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
    ///
    /// let manager = AsyncTaskManager::default();
    /// let input = RegisterTaskInput::new("a1", "tester", "run it").with_launch(r#"{"timeout_seconds":60}"#);
    /// let task = manager.register_task(input)?;
    /// assert_eq!(task.launch(), Some(r#"{"timeout_seconds":60}"#));
    /// # Ok::<(), asynctask_manager::RegisterError>(())
    /// ```
    #[must_use]
    pub fn with_launch(mut self, launch: impl Into<String>) -> Self {
        self.launch = Some(launch.into());
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

/// A launch refused because the running limit is reached and the queue behind
/// it is full. The `Display` names both limits, starting with the running
/// limit's own refusal.
///
/// # Examples
///
/// ```
/// use asynctask_manager::QueueFull;
///
/// let full = QueueFull { max: 2, max_queued: 20 };
/// assert_eq!(full.to_string(), "Max async tasks (2) reached, and the queue of 20 waiting tasks is full");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("Max async tasks ({max}) reached, and the queue of {max_queued} waiting tasks is full")]
pub struct QueueFull {
    /// The running limit (`task-max-async`).
    pub max: i64,
    /// The queue's bound (`task-max-queued`).
    pub max_queued: i64,
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
    /// The running limit is reached and the queue behind it is full.
    #[error(transparent)]
    QueueFull(#[from] QueueFull),
    /// A task with this id is already in the registry. It is left untouched.
    #[error("a task with id '{0}' is already registered")]
    DuplicateId(String),
    /// The id is empty (an empty id would match every prefix).
    #[error("a task id must not be empty")]
    EmptyId,
    /// The manager's [`Journal`](crate::Journal) could not record the
    /// registration, so the task was not registered: nothing runs that the
    /// store does not know about.
    #[error("the task store could not record the task, so it was not started")]
    Journal(#[source] JournalError),
}
