//! The task record, its output, and the pure state machine that moves it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::status::{AsyncTaskStatus, TerminateReason};
use crate::usage::TaskUsage;

/// What a subagent produced when it finished.
///
/// The serde form is the one the synchronous `task` tool has always returned:
/// `terminate_reason`, `emitted_vars`, and `final_message` only when present.
///
/// # Examples
///
/// ```
/// use asynctask_model::{OutputObject, TerminateReason};
///
/// let output = OutputObject::new(TerminateReason::Goal)
///     .with_var("answer", "42")
///     .with_final_message("done");
/// assert_eq!(
///     serde_json::to_string(&output).unwrap(),
///     r#"{"terminate_reason":"GOAL","emitted_vars":{"answer":"42"},"final_message":"done"}"#,
/// );
/// let bare = OutputObject::new(TerminateReason::MaxTurns);
/// assert_eq!(
///     serde_json::to_string(&bare).unwrap(),
///     r#"{"terminate_reason":"MAX_TURNS","emitted_vars":{}}"#,
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputObject {
    /// Why the subagent stopped.
    pub terminate_reason: TerminateReason,
    /// Named values the subagent emitted, in key order.
    #[serde(default)]
    pub emitted_vars: BTreeMap<String, String>,
    /// The subagent's last message, if it left one. Omitted from JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_message: Option<String>,
}

impl OutputObject {
    /// An output with no emitted variables and no final message.
    #[must_use]
    pub fn new(terminate_reason: TerminateReason) -> Self {
        OutputObject {
            terminate_reason,
            emitted_vars: BTreeMap::new(),
            final_message: None,
        }
    }

    /// Adds (or replaces) one emitted variable.
    #[must_use]
    pub fn with_var(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.emitted_vars.insert(name.into(), value.into());
        self
    }

    /// Sets the final message.
    #[must_use]
    pub fn with_final_message(mut self, message: impl Into<String>) -> Self {
        self.final_message = Some(message.into());
        self
    }
}

/// Everything known about one background task.
///
/// This is a plain snapshot: the registry in `asynctask-manager` owns the live
/// record and hands out clones. The serde form is camelCase (`subagentName`,
/// `launchedAt`, …) and leaves out the optional fields that are absent.
///
/// The transition methods are the whole state machine. Each returns `true`
/// when it changed the task and `false` when it was refused, and a refused call
/// changes nothing:
///
/// - [`start`](Self::start) moves a `Queued` task to `Running` and sets
///   `started_at` (a task launched under the limit starts at once:
///   [`new`](Self::new));
/// - [`complete`](Self::complete) and [`fail`](Self::fail) move a `Running`
///   task to a terminal state, [`cancel`](Self::cancel) a `Running` or `Queued`
///   one (a cancelled queued task never starts); each sets `completed_at`, and
///   is refused on a terminal task (the first transition wins);
/// - [`mark_notified`](Self::mark_notified) sets `notified_at` once, and only on a
///   terminal task — a task that has not ended has nothing to notify about.
///
/// # Examples
///
/// ```
/// use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus};
///
/// let mut task = AsyncTaskInfo::new("t-1", "tester", "run the suite", 10);
/// assert!(!task.mark_notified(11), "a running task cannot be notified");
/// assert!(task.fail("exit status 2", 20));
/// assert!(!task.fail("again", 30), "the first transition wins");
/// assert!(task.mark_notified(40));
/// assert!(!task.mark_notified(50), "notified at most once");
/// assert_eq!(task.status, AsyncTaskStatus::Failed);
/// assert_eq!(task.error.as_deref(), Some("exit status 2"));
/// assert_eq!((task.completed_at, task.notified_at), (Some(20), Some(40)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AsyncTaskInfo {
    /// The task's unique id (the subagent's agent id).
    pub id: String,
    /// The name of the subagent that runs the task.
    pub subagent_name: String,
    /// The goal the subagent was given.
    pub goal_prompt: String,
    /// Where the task is in its life.
    pub status: AsyncTaskStatus,
    /// When the task was registered, in Unix milliseconds.
    pub launched_at: u64,
    /// When its subagent started, in Unix milliseconds: the launch itself for a
    /// task launched under the limit, later for one that waited in the queue;
    /// `None` while queued (and for a queued task cancelled before it started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    /// When the task reached its terminal state, in Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<u64>,
    /// When the model was told how the task ended, in Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notified_at: Option<u64>,
    /// The subagent's output, for a completed task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputObject>,
    /// The error message, for a failed task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the task used, when its subagent reported it: what it had
    /// reported when the task ended (a task still running has none here; its
    /// progress handle has the latest report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TaskUsage>,
}

impl AsyncTaskInfo {
    /// A freshly launched task, running (started at its launch).
    #[must_use]
    pub fn new(
        id: impl Into<String>,
        subagent_name: impl Into<String>,
        goal_prompt: impl Into<String>,
        launched_at: u64,
    ) -> Self {
        AsyncTaskInfo {
            started_at: Some(launched_at),
            ..AsyncTaskInfo::queued(id, subagent_name, goal_prompt, launched_at)
        }
        .with_status(AsyncTaskStatus::Running)
    }

    /// A freshly launched task waiting in the queue for a running slot.
    ///
    /// ```
    /// use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus};
    ///
    /// let mut task = AsyncTaskInfo::queued("q-1", "tester", "run the suite", 10);
    /// assert!(!task.complete(asynctask_model::OutputObject::new(asynctask_model::TerminateReason::Goal), 11));
    /// assert!(task.start(20));
    /// assert_eq!((task.status, task.started_at), (AsyncTaskStatus::Running, Some(20)));
    /// assert!(!task.start(21), "started once");
    /// ```
    #[must_use]
    pub fn queued(
        id: impl Into<String>,
        subagent_name: impl Into<String>,
        goal_prompt: impl Into<String>,
        launched_at: u64,
    ) -> Self {
        AsyncTaskInfo {
            id: id.into(),
            subagent_name: subagent_name.into(),
            goal_prompt: goal_prompt.into(),
            status: AsyncTaskStatus::Queued,
            launched_at,
            started_at: None,
            completed_at: None,
            notified_at: None,
            output: None,
            error: None,
            usage: None,
        }
    }

    fn with_status(mut self, status: AsyncTaskStatus) -> Self {
        self.status = status;
        self
    }

    /// Moves a queued task to `Running`, its subagent starting now.
    ///
    /// Returns `false`, changing nothing, unless the task is queued.
    pub fn start(&mut self, now_ms: u64) -> bool {
        if self.status != AsyncTaskStatus::Queued {
            return false;
        }
        self.status = AsyncTaskStatus::Running;
        self.started_at = Some(now_ms);
        true
    }

    /// Whether the task has ended and the model has not been told yet.
    ///
    /// This is the delivery rule: every terminal task — cancelled ones included —
    /// is pending until it is marked notified.
    #[must_use]
    pub fn is_pending_notification(&self) -> bool {
        self.status.is_terminal() && self.notified_at.is_none()
    }

    /// Moves a running task to `Completed` with its output.
    ///
    /// Returns `false`, changing nothing, unless the task is running.
    pub fn complete(&mut self, output: OutputObject, now_ms: u64) -> bool {
        if self.status != AsyncTaskStatus::Running {
            return false;
        }
        self.finish(AsyncTaskStatus::Completed, now_ms, |task| {
            task.output = Some(output);
        })
    }

    /// Moves a running task to `Failed` with an error message.
    ///
    /// Returns `false`, changing nothing, unless the task is running.
    pub fn fail(&mut self, error: impl Into<String>, now_ms: u64) -> bool {
        if self.status != AsyncTaskStatus::Running {
            return false;
        }
        self.finish(AsyncTaskStatus::Failed, now_ms, |task| {
            task.error = Some(error.into());
        })
    }

    /// Moves a running or queued task to `Cancelled` (a queued one never
    /// starts).
    ///
    /// Returns `false`, changing nothing, when the task is already terminal.
    pub fn cancel(&mut self, now_ms: u64) -> bool {
        self.finish(AsyncTaskStatus::Cancelled, now_ms, |_| {})
    }

    /// Records that the model was told how the task ended.
    ///
    /// Returns `false`, changing nothing, when the task is still running or was
    /// already marked.
    pub fn mark_notified(&mut self, now_ms: u64) -> bool {
        if !self.is_pending_notification() {
            return false;
        }
        self.notified_at = Some(now_ms);
        true
    }

    fn finish(
        &mut self,
        status: AsyncTaskStatus,
        now_ms: u64,
        record: impl FnOnce(&mut Self),
    ) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        self.status = status;
        self.completed_at = Some(now_ms);
        record(self);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn running() -> AsyncTaskInfo {
        AsyncTaskInfo::new("abcdef0123", "researcher", "find it", 100)
    }

    #[test]
    fn complete_sets_status_time_and_output() {
        let mut task = running();
        let output = OutputObject::new(TerminateReason::Goal).with_var("k", "v");
        assert!(task.complete(output.clone(), 200));
        assert_eq!(
            task,
            AsyncTaskInfo {
                status: AsyncTaskStatus::Completed,
                completed_at: Some(200),
                output: Some(output),
                ..running()
            }
        );
    }

    #[test]
    fn fail_sets_status_time_and_error() {
        let mut task = running();
        assert!(task.fail("boom", 300));
        assert_eq!(
            task,
            AsyncTaskInfo {
                status: AsyncTaskStatus::Failed,
                completed_at: Some(300),
                error: Some("boom".into()),
                ..running()
            }
        );
    }

    #[test]
    fn cancel_sets_status_and_time() {
        let mut task = running();
        assert!(task.cancel(400));
        assert_eq!(
            task,
            AsyncTaskInfo {
                status: AsyncTaskStatus::Cancelled,
                completed_at: Some(400),
                ..running()
            }
        );
    }

    #[test]
    fn every_transition_after_a_terminal_one_is_refused_and_changes_nothing() {
        type Finish = fn(&mut AsyncTaskInfo) -> bool;
        let finishes: [Finish; 3] = [
            |t| t.complete(OutputObject::new(TerminateReason::Error), 900),
            |t| t.fail("late", 900),
            |t| t.cancel(900),
        ];
        for first in finishes {
            for second in finishes {
                let mut task = running();
                assert!(first(&mut task));
                let before = task.clone();
                assert!(!second(&mut task));
                assert_eq!(task, before);
            }
        }
    }

    #[test]
    fn a_queued_task_starts_once_or_is_cancelled_and_never_completes() {
        let queued = AsyncTaskInfo::queued("q", "r", "g", 100);
        let mut task = queued.clone();
        assert!(!task.complete(OutputObject::new(TerminateReason::Goal), 110));
        assert!(!task.fail("never ran", 110));
        assert!(!task.mark_notified(110));
        assert_eq!(task, queued, "refused transitions change nothing");
        assert!(task.cancel(120));
        assert_eq!(
            task,
            AsyncTaskInfo {
                status: AsyncTaskStatus::Cancelled,
                completed_at: Some(120),
                ..queued.clone()
            },
            "cancelled before it started: no start time"
        );
        assert!(!task.start(130), "a cancelled task never starts");
        let mut task = queued.clone();
        assert!(task.start(140));
        assert!(task.complete(OutputObject::new(TerminateReason::Goal), 150));
        assert_eq!((task.started_at, task.completed_at), (Some(140), Some(150)));
    }

    #[test]
    fn mark_notified_refuses_a_running_task() {
        let mut task = running();
        assert!(!task.mark_notified(150));
        assert_eq!(task, running());
    }

    #[test]
    fn mark_notified_sets_the_time_once() {
        let mut task = running();
        task.cancel(200);
        assert!(task.is_pending_notification());
        assert!(task.mark_notified(250));
        assert!(!task.is_pending_notification());
        let before = task.clone();
        assert!(!task.mark_notified(300));
        assert_eq!(task, before);
        assert_eq!(task.notified_at, Some(250));
    }

    #[test]
    fn camel_case_serde_leaves_out_absent_fields() {
        let task = running();
        assert_eq!(
            serde_json::to_value(&task).unwrap(),
            serde_json::json!({
                "id": "abcdef0123",
                "subagentName": "researcher",
                "goalPrompt": "find it",
                "status": "running",
                "launchedAt": 100,
                "startedAt": 100,
            })
        );
    }

    #[test]
    fn full_task_round_trips() {
        let mut task = running();
        task.complete(
            OutputObject::new(TerminateReason::MaxTurns).with_final_message("bye"),
            500,
        );
        task.mark_notified(600);
        let json = serde_json::to_value(&task).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "id": "abcdef0123",
                "subagentName": "researcher",
                "goalPrompt": "find it",
                "status": "completed",
                "launchedAt": 100,
                "startedAt": 100,
                "completedAt": 500,
                "notifiedAt": 600,
                "output": {
                    "terminate_reason": "MAX_TURNS",
                    "emitted_vars": {},
                    "final_message": "bye"
                }
            })
        );
        let back: AsyncTaskInfo = serde_json::from_value(json).unwrap();
        assert_eq!(back, task);
    }

    #[test]
    fn output_without_emitted_vars_deserializes() {
        let output: OutputObject = serde_json::from_str(r#"{"terminate_reason":"GOAL"}"#).unwrap();
        assert_eq!(output, OutputObject::new(TerminateReason::Goal));
    }
}
