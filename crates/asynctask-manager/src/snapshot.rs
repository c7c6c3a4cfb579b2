//! `TaskSnapshot`, the registry's cheap view of one task, and `TaskView`, read
//! access shared by snapshots and the model's plain `AsyncTaskInfo`.
//!
//! A snapshot shares what never changes after registration (id, subagent, goal,
//! launch time, origin: one `TaskHead` behind one `Arc`) and what never changes
//! after the end (the output or the error, behind an `Arc` of their own) with the
//! registry, and copies the few small fields that do change. Taking one costs
//! two reference counts, whatever the size of the goal or the output.

use std::fmt;
use std::sync::Arc;

use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus, OutputObject, TaskUsage};
use serde::{Serialize, Serializer};

/// Where the registry keeps a task's record: its slot, for the task's whole
/// life.
pub(crate) type SlotId = u32;

/// What never changes once a task is registered, in one allocation shared by the
/// registry, its id indexes and every snapshot. The texts live in one string,
/// one after the other.
pub(crate) struct TaskHead {
    /// The id, the subagent name, the goal, the origin and the launch, in
    /// that order.
    text: Box<str>,
    /// Where the id ends and the subagent name starts.
    id_end: u32,
    /// Where the subagent name ends and the goal starts.
    name_end: u32,
    /// Where the goal ends and the origin (if any) starts.
    goal_end: u32,
    /// Where the origin ends and the launch (if any) starts.
    origin_end: u32,
    has_origin: bool,
    has_launch: bool,
    /// The registry's slot of the task's record, so that the ordered id index
    /// needs no value beside its key (`SlotId::MAX` for a head built from a
    /// plain record, which no registry holds).
    slot: SlotId,
    launched_at: u64,
}

impl TaskHead {
    pub(crate) fn new(
        id: &str,
        subagent_name: &str,
        goal_prompt: &str,
        origin: Option<&str>,
        launched_at: u64,
        slot: SlotId,
    ) -> Self {
        TaskHead::with_launch(
            id,
            subagent_name,
            goal_prompt,
            origin,
            None,
            launched_at,
            slot,
        )
    }

    /// A head that also keeps what the task was launched with (see
    /// [`RegisterTaskInput::with_launch`](crate::RegisterTaskInput::with_launch)).
    pub(crate) fn with_launch(
        id: &str,
        subagent_name: &str,
        goal_prompt: &str,
        origin: Option<&str>,
        launch: Option<&str>,
        launched_at: u64,
        slot: SlotId,
    ) -> Self {
        let origin_len = origin.map_or(0, str::len);
        let launch_len = launch.map_or(0, str::len);
        let mut text = String::with_capacity(
            id.len() + subagent_name.len() + goal_prompt.len() + origin_len + launch_len,
        );
        // Offsets fit a u32: a head's texts are far below 4 GiB (the model's
        // input is bounded long before).
        let at = |text: &String| u32::try_from(text.len()).unwrap_or(u32::MAX);
        text.push_str(id);
        let id_end = at(&text);
        text.push_str(subagent_name);
        let name_end = at(&text);
        text.push_str(goal_prompt);
        let goal_end = at(&text);
        text.push_str(origin.unwrap_or_default());
        let origin_end = at(&text);
        text.push_str(launch.unwrap_or_default());
        TaskHead {
            text: text.into_boxed_str(),
            id_end,
            name_end,
            goal_end,
            origin_end,
            has_origin: origin.is_some(),
            has_launch: launch.is_some(),
            slot,
            launched_at,
        }
    }

    fn part(&self, from: u32, to: u32) -> &str {
        self.text
            .get(from as usize..to as usize)
            .unwrap_or_default()
    }

    pub(crate) fn slot(&self) -> SlotId {
        self.slot
    }

    pub(crate) fn id(&self) -> &str {
        self.part(0, self.id_end)
    }

    pub(crate) fn subagent_name(&self) -> &str {
        self.part(self.id_end, self.name_end)
    }

    pub(crate) fn goal_prompt(&self) -> &str {
        self.part(self.name_end, self.goal_end)
    }

    pub(crate) fn origin(&self) -> Option<&str> {
        self.has_origin
            .then(|| self.part(self.goal_end, self.origin_end))
    }

    pub(crate) fn launch(&self) -> Option<&str> {
        self.has_launch.then(|| {
            self.text
                .get(self.origin_end as usize..)
                .unwrap_or_default()
        })
    }

    pub(crate) fn launched_at(&self) -> u64 {
        self.launched_at
    }

    /// The same head, field by field (two `Arc`s of equal heads compare equal).
    fn same(&self, other: &TaskHead) -> bool {
        (
            self.id(),
            self.subagent_name(),
            self.goal_prompt(),
            self.origin(),
            self.launched_at,
        ) == (
            other.id(),
            other.subagent_name(),
            other.goal_prompt(),
            other.origin(),
            other.launched_at,
        )
    }
}

impl fmt::Debug for TaskHead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskHead")
            .field("id", &self.id())
            .field("subagent_name", &self.subagent_name())
            .field("goal_prompt", &self.goal_prompt())
            .field("origin", &self.origin())
            .field("launched_at", &self.launched_at)
            .finish()
    }
}

/// One task as the registry saw it at one moment: what every read of
/// [`AsyncTaskManager`](crate::AsyncTaskManager) returns, and what its events
/// carry.
///
/// It is cheap to take and to clone: the parts that never change after
/// registration (id, subagent name, goal, launch time, origin) are shared with
/// the registry behind one `Arc`, the output or error behind another, and only
/// the status and its times are copied. Nothing in it changes afterwards: a
/// later transition shows in the next snapshot, not in this one.
///
/// [`AsyncTaskInfo`] stays the plain, owned record (what a journal stores and
/// what crosses the wire); [`to_info`](Self::to_info) makes one, and a snapshot
/// serializes to exactly the same JSON. Both implement [`TaskView`], so code
/// that only reads a task can take either.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_model::{AsyncTaskStatus, OutputObject, TerminateReason};
///
/// let manager = AsyncTaskManager::default();
/// manager.register_task(RegisterTaskInput::new("a1", "researcher", "map the code").with_origin("session-1"))?;
/// manager.complete_task("a1", OutputObject::new(TerminateReason::Goal).with_final_message("done"));
///
/// let task = manager.task("a1").unwrap();
/// assert_eq!((task.id(), task.subagent_name(), task.origin()), ("a1", "researcher", Some("session-1")));
/// assert_eq!(task.status(), AsyncTaskStatus::Completed);
/// assert_eq!(task.output().and_then(|o| o.final_message.as_deref()), Some("done"));
/// assert!(task.is_pending_notification());
///
/// // The plain record, and the same JSON.
/// let info = task.to_info();
/// assert_eq!(task, info);
/// assert_eq!(serde_json::to_string(&task)?, serde_json::to_string(&info)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct TaskSnapshot {
    head: Arc<TaskHead>,
    status: AsyncTaskStatus,
    started_at: Option<u64>,
    completed_at: Option<u64>,
    notified_at: Option<u64>,
    /// Shared with the registry: an `Arc<String>` rather than an `Arc<str>`,
    /// so that an error moves in without a copy and the pointer stays thin.
    output: Option<Arc<OutputObject>>,
    error: Option<Arc<String>>,
    usage: Option<Arc<TaskUsage>>,
}

impl TaskSnapshot {
    /// A queued task.
    pub(crate) fn queued(head: &Arc<TaskHead>) -> Self {
        TaskSnapshot {
            head: Arc::clone(head),
            status: AsyncTaskStatus::Queued,
            started_at: None,
            completed_at: None,
            notified_at: None,
            output: None,
            error: None,
            usage: None,
        }
    }

    /// A running task (or one readers must see running), started at
    /// `started_at`.
    pub(crate) fn running(head: &Arc<TaskHead>, started_at: u64) -> Self {
        TaskSnapshot {
            status: AsyncTaskStatus::Running,
            started_at: Some(started_at),
            ..TaskSnapshot::queued(head)
        }
    }

    /// A terminal task, with its output or error and its usage (shared, not
    /// copied).
    #[expect(
        clippy::too_many_arguments,
        reason = "one per field that changes; a struct would only repeat them"
    )]
    pub(crate) fn ended(
        head: &Arc<TaskHead>,
        status: AsyncTaskStatus,
        started_at: Option<u64>,
        completed_at: u64,
        notified_at: Option<u64>,
        output: Option<&Arc<OutputObject>>,
        error: Option<&Arc<String>>,
        usage: Option<&Arc<TaskUsage>>,
    ) -> Self {
        TaskSnapshot {
            head: Arc::clone(head),
            status,
            started_at,
            completed_at: Some(completed_at),
            notified_at,
            output: output.map(Arc::clone),
            error: error.map(Arc::clone),
            usage: usage.map(Arc::clone),
        }
    }

    /// The task's unique id.
    #[must_use]
    pub fn id(&self) -> &str {
        self.head.id()
    }

    /// The name of the subagent that runs the task.
    #[must_use]
    pub fn subagent_name(&self) -> &str {
        self.head.subagent_name()
    }

    /// The goal the subagent was given.
    #[must_use]
    pub fn goal_prompt(&self) -> &str {
        self.head.goal_prompt()
    }

    /// Where the task is in its life.
    #[must_use]
    pub fn status(&self) -> AsyncTaskStatus {
        self.status
    }

    /// When the task was registered, in Unix milliseconds.
    #[must_use]
    pub fn launched_at(&self) -> u64 {
        self.head.launched_at()
    }

    /// When its subagent started, in Unix milliseconds (`None` while queued,
    /// and for a task cancelled in the queue).
    #[must_use]
    pub fn started_at(&self) -> Option<u64> {
        self.started_at
    }

    /// When the task reached its terminal state, in Unix milliseconds.
    #[must_use]
    pub fn completed_at(&self) -> Option<u64> {
        self.completed_at
    }

    /// When the model was told how the task ended, in Unix milliseconds.
    #[must_use]
    pub fn notified_at(&self) -> Option<u64> {
        self.notified_at
    }

    /// The subagent's output, for a completed task.
    #[must_use]
    pub fn output(&self) -> Option<&OutputObject> {
        self.output.as_deref()
    }

    /// The error message, for a failed task.
    #[must_use]
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref().map(String::as_str)
    }

    /// What the task used, for a task that ended: what its runner had
    /// reported through its [`TaskProgress`](crate::TaskProgress) by then.
    /// While it runs, [`AsyncTaskManager::progress`](crate::AsyncTaskManager::progress)
    /// has the latest report.
    #[must_use]
    pub fn usage(&self) -> Option<&TaskUsage> {
        self.usage.as_deref()
    }

    /// Who launched the task, when its registration said (see
    /// [`RegisterTaskInput::with_origin`](crate::RegisterTaskInput::with_origin)).
    #[must_use]
    pub fn origin(&self) -> Option<&str> {
        self.head.origin()
    }

    /// What the task was launched with, when its registration kept it (see
    /// [`RegisterTaskInput::with_launch`](crate::RegisterTaskInput::with_launch)):
    /// what a queued task's subagent is started with.
    #[must_use]
    pub fn launch(&self) -> Option<&str> {
        self.head.launch()
    }

    /// Whether the task has ended and the model has not been told yet (the
    /// delivery rule of [`AsyncTaskInfo::is_pending_notification`]).
    #[must_use]
    pub fn is_pending_notification(&self) -> bool {
        self.status.is_terminal() && self.notified_at.is_none()
    }

    /// The task as the model's plain record: every text and the output copied.
    /// The origin is not part of it.
    #[must_use]
    pub fn to_info(&self) -> AsyncTaskInfo {
        AsyncTaskInfo {
            id: self.id().to_owned(),
            subagent_name: self.subagent_name().to_owned(),
            goal_prompt: self.goal_prompt().to_owned(),
            status: self.status(),
            launched_at: self.launched_at(),
            started_at: self.started_at,
            completed_at: self.completed_at,
            notified_at: self.notified_at,
            output: self.output().cloned(),
            error: self.error().map(str::to_owned),
            usage: self.usage().cloned(),
        }
    }
}

impl From<&TaskSnapshot> for AsyncTaskInfo {
    fn from(task: &TaskSnapshot) -> Self {
        task.to_info()
    }
}

impl From<TaskSnapshot> for AsyncTaskInfo {
    fn from(task: TaskSnapshot) -> Self {
        task.to_info()
    }
}

/// A snapshot of a plain record, field for field (with no origin): for hosts
/// and tests that build tasks by hand, events for instance.
///
/// # Examples
///
/// ```
/// use asynctask_manager::TaskSnapshot;
/// use asynctask_model::AsyncTaskInfo;
///
/// let mut info = AsyncTaskInfo::new("a1", "tester", "run the suite", 10);
/// info.fail("exit status 2", 20);
/// let task = TaskSnapshot::from(info.clone());
/// assert_eq!((task.error(), task.origin()), (Some("exit status 2"), None));
/// assert_eq!(task, info);
/// ```
impl From<AsyncTaskInfo> for TaskSnapshot {
    fn from(info: AsyncTaskInfo) -> Self {
        let head = Arc::new(TaskHead::new(
            &info.id,
            &info.subagent_name,
            &info.goal_prompt,
            None,
            info.launched_at,
            SlotId::MAX,
        ));
        TaskSnapshot {
            head,
            status: info.status,
            started_at: info.started_at,
            completed_at: info.completed_at,
            notified_at: info.notified_at,
            output: info.output.map(Arc::new),
            error: info.error.map(Arc::new),
            usage: info.usage.map(Arc::new),
        }
    }
}

impl PartialEq for TaskSnapshot {
    fn eq(&self, other: &Self) -> bool {
        (Arc::ptr_eq(&self.head, &other.head) || self.head.same(&other.head))
            && self.status == other.status
            && self.started_at == other.started_at
            && self.completed_at == other.completed_at
            && self.notified_at == other.notified_at
            && self.output() == other.output()
            && self.error() == other.error()
            && self.usage() == other.usage()
    }
}

impl Eq for TaskSnapshot {}

/// Equal when every field of the plain record is (a snapshot's origin is not
/// part of the record).
impl PartialEq<AsyncTaskInfo> for TaskSnapshot {
    fn eq(&self, info: &AsyncTaskInfo) -> bool {
        self.id() == info.id
            && self.subagent_name() == info.subagent_name
            && self.goal_prompt() == info.goal_prompt
            && self.status() == info.status
            && self.launched_at() == info.launched_at
            && self.started_at == info.started_at
            && self.completed_at == info.completed_at
            && self.notified_at == info.notified_at
            && self.output() == info.output.as_ref()
            && self.error() == info.error.as_deref()
            && self.usage() == info.usage.as_ref()
    }
}

impl PartialEq<TaskSnapshot> for AsyncTaskInfo {
    fn eq(&self, task: &TaskSnapshot) -> bool {
        task == self
    }
}

impl fmt::Debug for TaskSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The plain record's fields, in its order, then the origin: a diff
        // against an `AsyncTaskInfo` lines up.
        f.debug_struct("TaskSnapshot")
            .field("id", &self.id())
            .field("subagent_name", &self.subagent_name())
            .field("goal_prompt", &self.goal_prompt())
            .field("status", &self.status())
            .field("launched_at", &self.launched_at())
            .field("started_at", &self.started_at)
            .field("completed_at", &self.completed_at)
            .field("notified_at", &self.notified_at)
            .field("output", &self.output())
            .field("error", &self.error())
            .field("usage", &self.usage())
            .field("origin", &self.origin())
            .finish()
    }
}

/// The plain record's borrowed twin, for serializing a snapshot in exactly
/// [`AsyncTaskInfo`]'s shape without copying it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    id: &'a str,
    subagent_name: &'a str,
    goal_prompt: &'a str,
    status: AsyncTaskStatus,
    launched_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    completed_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    notified_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a OutputObject>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<&'a TaskUsage>,
}

/// Exactly [`AsyncTaskInfo`]'s JSON: camelCase, absent fields left out, no
/// origin.
impl Serialize for TaskSnapshot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Wire {
            id: self.id(),
            subagent_name: self.subagent_name(),
            goal_prompt: self.goal_prompt(),
            status: self.status(),
            launched_at: self.launched_at(),
            started_at: self.started_at,
            completed_at: self.completed_at,
            notified_at: self.notified_at,
            output: self.output(),
            error: self.error(),
            usage: self.usage(),
        }
        .serialize(serializer)
    }
}

/// Read access to one task, whether a registry's [`TaskSnapshot`] or the
/// model's plain [`AsyncTaskInfo`]: code that only reads a task (a renderer,
/// say) takes `&impl TaskView` and serves both, with one body.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput, TaskView};
/// use asynctask_model::AsyncTaskInfo;
///
/// fn line(task: &impl TaskView) -> String {
///     format!("{} ({}): {}", task.id(), task.subagent_name(), task.status())
/// }
///
/// let manager = AsyncTaskManager::default();
/// let snapshot = manager.register_task(RegisterTaskInput::new("a1", "researcher", "g"))?;
/// let info = AsyncTaskInfo::new("b2", "tester", "g", 0);
/// assert_eq!(line(&snapshot), "a1 (researcher): running");
/// assert_eq!(line(&info), "b2 (tester): running");
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
pub trait TaskView {
    /// The task's unique id.
    fn id(&self) -> &str;
    /// The name of the subagent that runs the task.
    fn subagent_name(&self) -> &str;
    /// The goal the subagent was given.
    fn goal_prompt(&self) -> &str;
    /// Where the task is in its life.
    fn status(&self) -> AsyncTaskStatus;
    /// When the task was registered, in Unix milliseconds.
    fn launched_at(&self) -> u64;
    /// When its subagent started, in Unix milliseconds (`None` while queued).
    fn started_at(&self) -> Option<u64>;
    /// When the task reached its terminal state, in Unix milliseconds.
    fn completed_at(&self) -> Option<u64>;
    /// When the model was told how the task ended, in Unix milliseconds.
    fn notified_at(&self) -> Option<u64>;
    /// The subagent's output, for a completed task.
    fn output(&self) -> Option<&OutputObject>;
    /// The error message, for a failed task.
    fn error(&self) -> Option<&str>;
    /// What the task used, for a task that ended and whose runner reported
    /// it. `None` unless implemented.
    fn usage(&self) -> Option<&TaskUsage> {
        None
    }
}

impl TaskView for TaskSnapshot {
    fn id(&self) -> &str {
        TaskSnapshot::id(self)
    }
    fn subagent_name(&self) -> &str {
        TaskSnapshot::subagent_name(self)
    }
    fn goal_prompt(&self) -> &str {
        TaskSnapshot::goal_prompt(self)
    }
    fn status(&self) -> AsyncTaskStatus {
        TaskSnapshot::status(self)
    }
    fn launched_at(&self) -> u64 {
        TaskSnapshot::launched_at(self)
    }
    fn started_at(&self) -> Option<u64> {
        TaskSnapshot::started_at(self)
    }
    fn completed_at(&self) -> Option<u64> {
        TaskSnapshot::completed_at(self)
    }
    fn notified_at(&self) -> Option<u64> {
        TaskSnapshot::notified_at(self)
    }
    fn output(&self) -> Option<&OutputObject> {
        TaskSnapshot::output(self)
    }
    fn error(&self) -> Option<&str> {
        TaskSnapshot::error(self)
    }
    fn usage(&self) -> Option<&TaskUsage> {
        TaskSnapshot::usage(self)
    }
}

impl TaskView for AsyncTaskInfo {
    fn id(&self) -> &str {
        &self.id
    }
    fn subagent_name(&self) -> &str {
        &self.subagent_name
    }
    fn goal_prompt(&self) -> &str {
        &self.goal_prompt
    }
    fn status(&self) -> AsyncTaskStatus {
        self.status
    }
    fn launched_at(&self) -> u64 {
        self.launched_at
    }
    fn started_at(&self) -> Option<u64> {
        self.started_at
    }
    fn completed_at(&self) -> Option<u64> {
        self.completed_at
    }
    fn notified_at(&self) -> Option<u64> {
        self.notified_at
    }
    fn output(&self) -> Option<&OutputObject> {
        self.output.as_ref()
    }
    fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
    fn usage(&self) -> Option<&TaskUsage> {
        self.usage.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_model::TerminateReason;
    use pretty_assertions::assert_eq;

    fn head(origin: Option<&str>) -> Arc<TaskHead> {
        Arc::new(TaskHead::new(
            "日本-1",
            "researcher",
            "find é",
            origin,
            7,
            0,
        ))
    }

    #[test]
    fn a_head_gives_back_each_text_it_was_built_from() {
        let with = head(Some("session-1"));
        assert_eq!(
            (
                with.id(),
                with.subagent_name(),
                with.goal_prompt(),
                with.origin(),
                with.launched_at()
            ),
            ("日本-1", "researcher", "find é", Some("session-1"), 7)
        );
        assert_eq!(head(None).origin(), None);
        let launched = TaskHead::with_launch("a", "b", "c", None, Some("{}"), 1, 2);
        assert_eq!(
            (launched.origin(), launched.launch(), launched.goal_prompt()),
            (None, Some("{}"), "c")
        );
        let empty = TaskHead::new("a", "", "", Some(""), 0, 0);
        assert_eq!(
            (
                empty.id(),
                empty.subagent_name(),
                empty.goal_prompt(),
                empty.origin()
            ),
            ("a", "", "", Some(""))
        );
    }

    #[test]
    fn a_snapshot_reads_and_serializes_as_the_plain_record() {
        let output = OutputObject::new(TerminateReason::MaxTurns).with_var("k", "v");
        let shared = Arc::new(output.clone());
        let task = TaskSnapshot::ended(
            &head(Some("s")),
            AsyncTaskStatus::Completed,
            Some(7),
            20,
            Some(30),
            Some(&shared),
            None,
            None,
        );
        let mut info = AsyncTaskInfo::new("日本-1", "researcher", "find é", 7);
        info.complete(output, 20);
        info.mark_notified(30);
        assert_eq!(task.to_info(), info);
        assert_eq!(task, info);
        assert_eq!(info, task);
        assert_eq!(
            serde_json::to_value(&task).unwrap(),
            serde_json::to_value(&info).unwrap()
        );
        let failed = TaskSnapshot::from(AsyncTaskInfo {
            status: AsyncTaskStatus::Failed,
            completed_at: Some(5),
            error: Some("boom".into()),
            ..AsyncTaskInfo::new("b", "r", "g", 1)
        });
        assert_eq!(
            serde_json::to_string(&failed).unwrap(),
            serde_json::to_string(&failed.to_info()).unwrap()
        );
        let running = TaskSnapshot::running(&head(None), 7);
        assert_eq!(
            serde_json::to_string(&running).unwrap(),
            r#"{"id":"日本-1","subagentName":"researcher","goalPrompt":"find é","status":"running","launchedAt":7,"startedAt":7}"#
        );
        let queued = TaskSnapshot::queued(&head(None));
        assert_eq!(
            serde_json::to_string(&queued).unwrap(),
            r#"{"id":"日本-1","subagentName":"researcher","goalPrompt":"find é","status":"queued","launchedAt":7}"#
        );
    }

    #[test]
    fn snapshots_compare_by_value_origin_included() {
        let a = TaskSnapshot::running(&head(Some("s")), 7);
        let same = TaskSnapshot::running(&head(Some("s")), 7);
        let elsewhere = TaskSnapshot::running(&head(Some("t")), 7);
        assert_eq!(a, same);
        assert_ne!(a, elsewhere);
        assert_eq!(a.to_info(), elsewhere.to_info(), "the record has no origin");
        let cancelled = TaskSnapshot::ended(
            &head(Some("s")),
            AsyncTaskStatus::Cancelled,
            Some(7),
            3,
            None,
            None,
            None,
            None,
        );
        assert_ne!(a, cancelled);
        assert!(cancelled.is_pending_notification());
        assert!(!a.is_pending_notification());
    }
}
