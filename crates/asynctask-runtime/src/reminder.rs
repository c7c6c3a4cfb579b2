//! The reminder service: the status summary and the `System Note` reminders the
//! model reads, rendered from the registry.

use asynctask_manager::{AsyncTaskManager, TaskSnapshot};
use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus};
use asynctask_tools::{completion_notification, id_prefix};

/// A reminder ready to deliver: its text, and the ids of the finished tasks it
/// reports (the ones to mark notified once the delivery succeeded).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reminder {
    /// The text: a `System Note` block (see [`AsyncTaskReminderService::reminder`]).
    pub text: String,
    /// The finished tasks the text reports, in registration order.
    pub task_ids: Vec<String>,
}

/// Renders what the model should know about background tasks.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_runtime::AsyncTaskReminderService;
///
/// let manager = AsyncTaskManager::default();
/// manager.register_task(RegisterTaskInput::new("0f3a9c21-1", "researcher", "g"))?;
/// let reminders = AsyncTaskReminderService::new(manager.clone());
/// assert_eq!(reminders.status_summary(), "[ASYNC TASKS: 1 total]\n[1] researcher - [RUNNING] (0f3a9c21...)");
///
/// manager.cancel_task("0f3a9c21-1");
/// let reminder = reminders.reminder().unwrap();
/// assert_eq!(reminder.task_ids, ["0f3a9c21-1"]);
/// assert!(reminder.text.starts_with("---\nSystem Note: Async Task Status\n\n1 async task(s) completed:"));
/// reminders.mark_notified(&reminder.task_ids);
/// assert!(!reminders.has_pending_notifications());
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[derive(Debug, Clone)]
pub struct AsyncTaskReminderService {
    manager: AsyncTaskManager,
}

impl AsyncTaskReminderService {
    /// A service reading `manager`.
    #[must_use]
    pub fn new(manager: AsyncTaskManager) -> Self {
        AsyncTaskReminderService { manager }
    }

    /// The status block for the system instruction: `[ASYNC TASKS: N total]`, then
    /// one `[i] <subagent> - [RUNNING|DONE|FAILED|CANCELLED] (<8 chars of id>...)`
    /// line per task; the empty string when there are no tasks.
    #[must_use]
    pub fn status_summary(&self) -> String {
        let tasks = self.manager.tasks();
        if tasks.is_empty() {
            return String::new();
        }
        let mut lines = Vec::with_capacity(tasks.len() + 1);
        lines.push(format!("[ASYNC TASKS: {} total]", tasks.len()));
        for (i, task) in tasks.iter().enumerate() {
            let icon = match task.status() {
                AsyncTaskStatus::Running => "[RUNNING]",
                AsyncTaskStatus::Completed => "[DONE]",
                AsyncTaskStatus::Failed => "[FAILED]",
                AsyncTaskStatus::Cancelled => "[CANCELLED]",
            };
            lines.push(format!(
                "[{}] {} - {icon} ({}...)",
                i + 1,
                task.subagent_name(),
                id_prefix(task.id())
            ));
        }
        lines.join("\n")
    }

    /// The reminder for every finished task not yet delivered, plus how many still
    /// run; `None` when nothing is pending and nothing runs.
    ///
    /// The text is `---\nSystem Note: Async Task Status\n\n`, then these parts
    /// joined by blank lines, then `\n---`: `N async task(s) completed:` and one
    /// [completion notification](asynctask_tools::completion_notification) per
    /// pending task (when any is pending), then `M async task(s) still running.`
    /// (when any runs).
    ///
    /// This renders without claiming: a host that delivers through the runtime
    /// uses [`next_turn_reminder`](crate::AsyncTaskRuntime::next_turn_reminder) or
    /// the [`ClaimLedger`](crate::ClaimLedger), which never hand one result to
    /// two deliveries.
    #[must_use]
    pub fn reminder(&self) -> Option<Reminder> {
        let (pending, running) = self.manager.pending_and_running();
        render(&pending, running)
    }

    /// The reminder that only says how many tasks still run (no ids); `None`
    /// when none do.
    pub(crate) fn running_only(&self) -> Option<Reminder> {
        render(&[], self.manager.counts().running)
    }

    /// How a finished task is reported (pretty JSON; the same text the synchronous
    /// `task` tool returns). The empty string for a running task.
    #[must_use]
    pub fn format_completion_notification(&self, task: &AsyncTaskInfo) -> String {
        completion_notification(task)
    }

    /// Whether any finished task awaits delivery.
    #[must_use]
    pub fn has_pending_notifications(&self) -> bool {
        self.manager.has_pending_notifications()
    }

    /// Marks these tasks notified. Call it only after the reminder carrying them
    /// was delivered.
    pub fn mark_notified(&self, task_ids: &[String]) {
        self.manager.mark_all_notified(task_ids);
    }
}

/// The reminder for `pending` (in order) and `running` tasks: `---\nSystem Note:
/// Async Task Status\n\n` + parts joined by blank lines + `\n---`; `None` when
/// there is nothing to say.
pub(crate) fn render(pending: &[TaskSnapshot], running: usize) -> Option<Reminder> {
    render_with_more(pending, 0, running)
}

/// [`render`], saying that `more` finished tasks were left for a later
/// reminder (a claim within a size budget).
pub(crate) fn render_with_more(
    pending: &[TaskSnapshot],
    more: usize,
    running: usize,
) -> Option<Reminder> {
    if pending.is_empty() && running == 0 {
        return None;
    }
    let mut parts = Vec::with_capacity(pending.len() + 3);
    if !pending.is_empty() {
        parts.push(format!("{} async task(s) completed:", pending.len()));
        parts.extend(pending.iter().map(completion_notification));
    }
    if more > 0 {
        parts.push(more_text(more));
    }
    if running > 0 {
        parts.push(format!("{running} async task(s) still running."));
    }
    Some(Reminder {
        text: format!(
            "---\nSystem Note: Async Task Status\n\n{}\n---",
            parts.join("\n\n")
        ),
        task_ids: pending.iter().map(|task| task.id().to_owned()).collect(),
    })
}

/// The line saying that `more` finished tasks' results come later.
fn more_text(more: usize) -> String {
    format!("{more} more async task(s) finished; their results follow in the next reminder.")
}

/// How many of `pending`, from the first, a reminder that also counts
/// `running` tasks carries within `max_chars` characters: at least one (a single result larger than the budget
/// still goes, whole), then as many as fit.
pub(crate) fn fitting(pending: &[TaskSnapshot], running: usize, max_chars: usize) -> usize {
    if max_chars == usize::MAX {
        return pending.len();
    }
    // The frame, the header, the "more" and "still running" lines: what a
    // reminder costs besides its results (at most).
    let mut used = "---\nSystem Note: Async Task Status\n\n\n---".len()
        + format!("{} async task(s) completed:", pending.len()).len()
        + 2
        + more_text(pending.len()).len()
        + 2
        + format!("{running} async task(s) still running.").len();
    for (at, task) in pending.iter().enumerate() {
        let cost = completion_notification(task).chars().count() + 2;
        if at > 0 && used.saturating_add(cost) > max_chars {
            return at;
        }
        used = used.saturating_add(cost);
    }
    pending.len()
}
