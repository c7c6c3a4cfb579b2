//! The reminder service: the status summary and the `System Note` reminders the
//! model reads, rendered from the registry.

use std::borrow::Cow;

use asynctask_manager::{AsyncTaskManager, TaskCounts, TaskSnapshot};
use asynctask_model::AsyncTaskInfo;
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
    /// one `[i] <subagent> - [QUEUED|RUNNING|DONE|FAILED|CANCELLED] (<8 chars of id>...)`
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
            let icon = task.status().tag();
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
        let (pending, counts) = self.manager.pending_and_counts();
        render(&pending, Unended::from(&counts))
    }

    /// The reminder that only says how many tasks still run (no ids); `None`
    /// when none do.
    pub(crate) fn running_only(&self) -> Option<Reminder> {
        render(&[], Unended::from(&self.manager.counts()))
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

/// How many tasks have not ended: what a reminder says after the results.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Unended {
    pub(crate) running: usize,
    pub(crate) queued: usize,
}

impl From<&TaskCounts> for Unended {
    fn from(counts: &TaskCounts) -> Self {
        Unended {
            running: counts.running,
            queued: counts.queued,
        }
    }
}

/// The reminder for `pending` (in order) and the `unended` tasks; `None`
/// when there is nothing to say.
pub(crate) fn render(pending: &[TaskSnapshot], unended: Unended) -> Option<Reminder> {
    render_within(pending, unended, usize::MAX, "")
}

/// The reminder for as many of `pending`, from the first, as fit in about
/// `max_chars` characters — at least one (a single result larger than the
/// budget still goes, whole) — saying how many more wait and how many tasks
/// still run, with `asked` (the notices of questions waiting for answers,
/// if any) before that. Each completion notification is rendered once. `None`
/// when there is nothing to say.
pub(crate) fn render_within(
    pending: &[TaskSnapshot],
    unended: Unended,
    max_chars: usize,
    asked: &str,
) -> Option<Reminder> {
    // What the frame costs around the notifications, at most: every count at
    // its largest, the "more" line included.
    let frame_cost = frame(pending.len(), "", pending.len(), unended, asked)
        .map_or(0, |text| text.chars().count());
    let mut notes = String::new();
    let mut used = frame_cost;
    let mut carried = 0;
    for task in pending {
        let note = completion_notification(task);
        let separator = if carried == 0 { "" } else { "\n\n" };
        let cost = separator.len() + note.chars().count();
        if carried > 0 && used.saturating_add(cost) > max_chars {
            break;
        }
        used = used.saturating_add(cost);
        notes.push_str(separator);
        notes.push_str(&note);
        carried += 1;
    }
    let text = frame(carried, &notes, pending.len() - carried, unended, asked)?;
    Some(Reminder {
        text,
        task_ids: pending[..carried]
            .iter()
            .map(|task| task.id().to_owned())
            .collect(),
    })
}

/// The one frame of every reminder: `---\nSystem Note: Async Task Status\n\n`,
/// then these parts joined by blank lines, then `\n---` — `N async task(s)
/// completed:` and `notes` (the completion notifications of `finished` tasks,
/// joined by blank lines) when `finished > 0`; the line saying that `more`
/// finished tasks' results follow later, when `more > 0`; `asked` (questions
/// of running subagents, when not empty); `M async task(s) still running.`
/// when tasks run (`M async task(s) still running, Q
/// queued.` when some wait in the queue too, `Q async task(s) queued.` when
/// only queued ones wait). `None` when there is no part.
fn frame(
    finished: usize,
    notes: &str,
    more: usize,
    unended: Unended,
    asked: &str,
) -> Option<String> {
    let mut parts: Vec<Cow<'_, str>> = Vec::with_capacity(5);
    if finished > 0 {
        parts.push(format!("{finished} async task(s) completed:").into());
        parts.push(notes.into());
    }
    if more > 0 {
        parts.push(
            format!(
                "{more} more async task(s) finished; their results follow in the next reminder."
            )
            .into(),
        );
    }
    if !asked.is_empty() {
        parts.push(asked.into());
    }
    match (unended.running, unended.queued) {
        (0, 0) => {}
        (running, 0) => parts.push(format!("{running} async task(s) still running.").into()),
        (0, queued) => parts.push(format!("{queued} async task(s) queued.").into()),
        (running, queued) => {
            parts.push(format!("{running} async task(s) still running, {queued} queued.").into())
        }
    }
    if parts.is_empty() {
        return None;
    }
    Some(format!(
        "---\nSystem Note: Async Task Status\n\n{}\n---",
        parts.join("\n\n")
    ))
}
