//! MCP Tasks (the `io.modelcontextprotocol/tasks` extension): the asynctask
//! tasks a client follows with `tasks/get`, what each poll answers, and the
//! texts a client that follows them reads instead of the System Note ones.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use asynctask_manager::{AsyncTaskManager, JournalError, PendingQuestion, TaskSnapshot};
use asynctask_model::AsyncTaskStatus;
use asynctask_tools::{completion_notification, format_duration, iso_time, truncate_chars};
use rmcp::model::{
    CallToolResult, ContentBlock, DetailedTask, ElicitRequest, ElicitResult, ErrorData,
    InputRequest, InputRequests, InputResponses, JsonObject, RequestMetaObject, Task, TaskPayload,
    TaskStatus,
};

/// How long a task a client follows as an MCP Task is kept after it was
/// created (its `ttlMs`): one day. A subagent runs minutes — at most its
/// timeout (30 minutes by default), after waiting its turn in the queue — and
/// a client polls until it ends, so a day is far past any task's end; what a
/// task keeps once answered is one bounded result. Past it, and once its task
/// has ended, the task is forgotten: a poll then gets `-32602`. (A result no
/// poll took rode on a tool result long before: see [`TASK_RESULT_HOLD`].)
///
/// ```
/// assert_eq!(asynctask_mcp::TASK_TTL.as_secs(), 86_400);
/// ```
pub const TASK_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// How often a client should poll a task (its `pollIntervalMs`): 5 s. A
/// subagent runs minutes, so a result seen up to 5 s late costs a few percent
/// of its run at most, while a client following ten tasks at once makes two
/// polls a second, not ten (Claude Code polls every 2 s when a server names
/// no interval).
///
/// ```
/// assert_eq!(asynctask_mcp::TASK_POLL_INTERVAL.as_millis(), 5_000);
/// ```
pub const TASK_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// How long the result of a followed task that ended waits for a poll before
/// it is delivered as any other (a System Note on a tool result,
/// `wait_async_tasks`): six [`TASK_POLL_INTERVAL`]s, 30 s, counted from the
/// task's end (or, when later, from when this process began to follow it: a
/// restarted supervisor gives the polls the same time). A client that follows
/// a task polls every 5 s, so one that still follows it takes the result
/// within one interval; six with no poll taking it mean nobody polls it any
/// more (the client exited, stopping or backgrounding its tasks, and a
/// durable supervisor runs them on), not a poll that came late on a busy
/// machine or a front that restarts. Held for the whole [`TASK_TTL`] instead,
/// such a result would reach the model a day late; 30 s is little against a
/// subagent's minutes. Still exactly once: a poll that comes later answers
/// that the result was delivered elsewhere.
///
/// ```
/// assert_eq!(asynctask_mcp::TASK_RESULT_HOLD.as_secs(), 30);
/// ```
pub const TASK_RESULT_HOLD: Duration = Duration::from_secs(6 * 5);

/// The server's `instructions` for a client that declared the tasks
/// extension: it runs each `task` call as a background task of its own and
/// brings the result itself, so no System Note is promised.
pub const TASKS_INSTRUCTIONS: &str = "Each call of this server's task tool runs as a background \
    task of your client: the call returns at once, the subagent works on, and its result is \
    brought to you when it finishes. Carry on with other work meanwhile; use check_async_tasks \
    to see how a task is doing, and end_async_task to stop one.";

/// The first paragraph of the `task` tool's description for a client that
/// declared the tasks extension, in place of
/// [`TASK_DESCRIPTION_LEAD`](asynctask_tools::TASK_DESCRIPTION_LEAD).
pub const TASKS_TASK_DESCRIPTION_LEAD: &str = "Run a subagent that works on its own toward a \
    goal. The call returns at once and the subagent runs in the background (async makes no \
    difference here); when it finishes, its result is brought to you as JSON (agent_id, \
    terminate_reason, emitted_vars, final_message). Use check_async_tasks to monitor it.";

/// The `answer_async_task` tool's description for a client that declared
/// the tasks extension: its tasks' questions reach it as `input_required`
/// tasks (a form for the user), never in a System Note.
pub const TASKS_ANSWER_DESCRIPTION: &str = "Answer the question a running background task's \
    subagent asked. Your client asks the user such a question in a form of its own and brings \
    the answer itself; check_async_tasks shows the questions still waiting. Use this tool when \
    the user tells you the answer, or the form was put off and you can answer it. The subagent \
    waits for the answer and goes on with it; each question takes one answer, whoever gives it \
    first. Give answer (one of its choices, when it gave some), or decline: true when you \
    cannot answer (the subagent is told you declined). If you need the user's input, ask the \
    user first.";

/// What a poll of a task whose result was delivered another way (on a tool
/// result, as a System Note: before a poll adopted the task, or once no poll
/// took it within [`TASK_RESULT_HOLD`]; or to a poll before a durable
/// supervisor restarted, which keeps no answers) answers: the result is
/// never given twice.
pub(crate) fn delivered_elsewhere(id: &str) -> String {
    format!(
        "The result of task {id} was already delivered in an earlier response (a System Note \
         on a tool result, or a poll answered before the server restarted); it is not given \
         twice."
    )
}

/// Whether a request declares the tasks extension in its own `_meta` (its
/// per-request client capabilities): only then may it be answered with a
/// task, whatever the client declared before.
pub(crate) fn declares_tasks(meta: &RequestMetaObject) -> bool {
    meta.client_capabilities()
        .is_some_and(|capabilities| capabilities.supports_tasks())
}

/// Where a durable server keeps the set of tasks its clients follow as MCP
/// Tasks, so that a supervisor restarted from its store still keeps their
/// results for the polls (within their [`TASK_TTL`]) instead of giving them to
/// the next tool result as a System Note. The workspace's task store keeps it
/// beside the tasks.
///
/// # Examples
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use asynctask_manager::JournalError;
/// use asynctask_mcp::{FollowJournal, Sessions};
///
/// #[derive(Debug, Default)]
/// struct Log(Mutex<Vec<(String, u64)>>);
/// impl FollowJournal for Log {
///     fn follow(&self, id: &str, since: u64) -> Result<(), JournalError> {
///         self.0.lock().map_err(|_| JournalError::new("poisoned"))?.push((id.to_owned(), since));
///         Ok(())
///     }
/// }
///
/// let manager = asynctask_manager::AsyncTaskManager::default();
/// // What the store held when the supervisor started: followed since 1_000.
/// let restored = [("7f3a09c1".to_owned(), 1_000)];
/// let sessions = Sessions::default().with_followed(Arc::new(Log::default()), restored, &manager);
/// # drop(sessions);
/// ```
pub trait FollowJournal: fmt::Debug + Send + Sync {
    /// Records that a client follows task `id` as an MCP Task since `since`
    /// (Unix ms: when it was created as one, or, for a task a poll adopted,
    /// when it was launched). Recording it again replaces the time.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when it could not be recorded: the task is still
    /// followed until the process ends, only not after a restart.
    fn follow(&self, id: &str, since: u64) -> Result<(), JournalError>;
}

/// What a poll of an ended task answers, kept once given so later polls
/// answer the same (the registry may prune the task meanwhile).
#[derive(Debug, Clone)]
enum Answer {
    /// The `CallToolResult` the synchronous call would have returned.
    Completed(Arc<JsonObject>),
    /// The task was cancelled.
    Cancelled,
}

#[derive(Debug)]
struct Handle {
    /// When the task was created as an MCP Task (Unix ms, the manager's clock).
    created_at: u64,
    /// When this process began to follow it (created, adopted or restored):
    /// its result is held for the polls [`TASK_RESULT_HOLD`] from this or
    /// from the task's end, whichever is later.
    held_from: u64,
    /// What its polls answer once it ended and a poll took its result.
    answer: Option<Answer>,
    /// What a poll last saw it doing (its last output line, or the question
    /// it asks) and when a poll first saw that: its `lastUpdatedAt`.
    seen: Option<(String, u64)>,
}

/// The asynctask tasks one client follows as MCP Tasks, by id (an MCP task's
/// id is its asynctask task's). A cheap handle: the server that answers the
/// polls and the gate that keeps the followed results out of reminders share
/// one set, journaled when a [`FollowJournal`] is given.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskHandles {
    inner: Arc<Mutex<HashMap<String, Handle>>>,
    journal: Option<Arc<dyn FollowJournal>>,
}

impl TaskHandles {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Handle>> {
        // A map of plain values, consistent after every statement.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The same set, journaled in `journal` from now on, holding the tasks
    /// `restored` names (id, followed since; what the journal held when the
    /// process started), held for the polls from `now`. Past their TTL they
    /// go at the next prune.
    pub(crate) fn journaled(
        journal: Arc<dyn FollowJournal>,
        restored: impl IntoIterator<Item = (String, u64)>,
        now: u64,
    ) -> Self {
        let handles = restored
            .into_iter()
            .map(|(id, created_at)| {
                let handle = Handle {
                    created_at,
                    held_from: now,
                    answer: None,
                    seen: None,
                };
                (id, handle)
            })
            .collect();
        TaskHandles {
            inner: Arc::new(Mutex::new(handles)),
            journal: Some(journal),
        }
    }

    /// The client follows task `id` from now (`now`, Unix ms); journaled
    /// before this returns. (The server holds, launches, then journals.)
    #[cfg(test)]
    pub(crate) fn follow(&self, id: &str, now: u64) {
        self.hold(id, now);
        self.journal(id, now);
    }

    /// The client follows task `id` from `now`, not journaled yet: a task
    /// about to be launched under that id (the journal marks registered
    /// tasks only), whose result no reminder may take from its launch on.
    /// [`journal`](Self::journal) it once launched, or
    /// [`unfollow`](Self::unfollow) it when the launch was refused.
    pub(crate) fn hold(&self, id: &str, now: u64) {
        self.lock().insert(
            id.to_owned(),
            Handle {
                created_at: now,
                held_from: now,
                answer: None,
                seen: None,
            },
        );
    }

    /// Forgets task `id` (one whose launch was refused: no such task).
    pub(crate) fn unfollow(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Records in the journal, when there is one, that task `id` is followed
    /// since `since`.
    pub(crate) fn journal(&self, id: &str, since: u64) {
        if let Some(journal) = &self.journal
            && let Err(err) = journal.follow(id, since)
        {
            tracing::warn!(
                task_id = id,
                error = %err.chain(),
                "cannot journal that a client follows this task: after a supervisor restart \
                 its result may ride on a tool result instead of its polls"
            );
        }
    }

    /// Whether the client follows task `id`.
    pub(crate) fn follows(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// Whether `task`'s result is held for the polls at `now`, out of every
    /// reminder: the client follows it, and it runs, or it ended less than
    /// [`TASK_RESULT_HOLD`] ago (counted from when this process began to
    /// follow it, when later) and a client that may poll it is connected
    /// (`polled`). Else nobody polls it any more: the reminders may take it,
    /// through the same ledger as a poll.
    pub(crate) fn holds(&self, task: &TaskSnapshot, now: u64, polled: bool) -> bool {
        let Some(held_from) = self.lock().get(task.id()).map(|handle| handle.held_from) else {
            return false;
        };
        match task.completed_at() {
            Some(ended) if task.status().is_terminal() => {
                polled && now < release_at(ended, held_from)
            }
            _ => true,
        }
    }

    /// How long until the next followed task that ended is no longer held
    /// for the polls (see [`holds`](Self::holds)); `None` when none waits.
    pub(crate) fn next_release(&self, manager: &AsyncTaskManager, now: u64) -> Option<Duration> {
        let held: Vec<(String, u64)> = self
            .lock()
            .iter()
            .filter(|(_, handle)| handle.answer.is_none())
            .map(|(id, handle)| (id.clone(), handle.held_from))
            .collect();
        // Read outside the lock: the manager's lock comes before this one.
        held.into_iter()
            .filter_map(|(id, held_from)| {
                let task = manager.task(&id)?;
                let ended = task
                    .completed_at()
                    .filter(|_| task.status().is_terminal())?;
                let release = release_at(ended, held_from);
                (release > now && task.notified_at().is_none()).then_some(release - now)
            })
            .min()
            .map(Duration::from_millis)
    }

    /// Whether task `id` is followed, following it from its launch when the
    /// registry holds it, `may_take` lets this client take its result, and
    /// its [`TASK_TTL`] has not passed (or it still runs): a durable
    /// supervisor restarted from its store knows the tasks, not which of
    /// them clients followed, so a poll of one resolves it again.
    pub(crate) fn adopt(
        &self,
        manager: &AsyncTaskManager,
        id: &str,
        now: u64,
        may_take: impl Fn(&TaskSnapshot) -> bool,
    ) -> bool {
        if self.follows(id) {
            return true;
        }
        let Some(task) = manager.task(id) else {
            return false;
        };
        let live = !task.status().is_terminal()
            || now.saturating_sub(task.launched_at()) < duration_ms(TASK_TTL);
        if !live || !may_take(&task) {
            return false;
        }
        let adopted = match self.lock().entry(id.to_owned()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(Handle {
                    created_at: task.launched_at(),
                    held_from: now,
                    answer: None,
                    seen: None,
                });
                true
            }
        };
        if adopted {
            self.journal(id, task.launched_at());
        }
        true
    }

    /// Forgets the tasks created more than [`TASK_TTL`] before `now` whose
    /// task has ended (or is gone); `true` when one was forgotten (a result
    /// no poll took may now ride on a tool result).
    pub(crate) fn prune(&self, manager: &AsyncTaskManager, now: u64) -> bool {
        let ttl = duration_ms(TASK_TTL);
        let expired: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, handle)| now.saturating_sub(handle.created_at) >= ttl)
            .map(|(id, _)| id.clone())
            .collect();
        // Read outside the lock: the manager's lock comes before this one.
        let ended: Vec<String> = expired
            .into_iter()
            .filter(|id| {
                manager
                    .task(id)
                    .is_none_or(|task| task.status().is_terminal())
            })
            .collect();
        let mut handles = self.lock();
        for id in &ended {
            handles.remove(id);
        }
        !ended.is_empty()
    }

    fn created_at(&self, id: &str) -> Option<u64> {
        self.lock().get(id).map(|handle| handle.created_at)
    }

    fn answer(&self, id: &str) -> Option<Answer> {
        self.lock().get(id).and_then(|handle| handle.answer.clone())
    }

    /// When a poll first saw task `id` doing `doing` (`now`, when this poll
    /// is the first).
    fn seen(&self, id: &str, doing: String, now: u64) -> u64 {
        let mut handles = self.lock();
        let Some(handle) = handles.get_mut(id) else {
            return now;
        };
        match &handle.seen {
            Some((seen, at)) if *seen == doing => *at,
            _ => {
                handle.seen = Some((doing, now));
                now
            }
        }
    }

    fn keep_answer(&self, id: &str, answer: Answer) {
        if let Some(handle) = self.lock().get_mut(id) {
            handle.answer = Some(answer);
        }
    }
}

/// The error for a task id no followed task has (never created here, or
/// forgotten after its [`TASK_TTL`]).
pub(crate) fn unknown_task(id: &str) -> ErrorData {
    let id = truncate_chars(id, 100);
    ErrorData::invalid_params(
        format!(
            "Failed to retrieve task: Task not found: no task with id '{id}' (never created by \
             this server, or forgotten once its ttlMs passed)"
        ),
        None,
    )
}

/// Answers polls of followed tasks, claiming a result through the gate the
/// first time a poll finds it.
pub(crate) struct Poll<'a> {
    pub(crate) manager: &'a AsyncTaskManager,
    pub(crate) handles: &'a TaskHandles,
    /// Claims task `id`'s result for the poll's response; `true` when it did.
    pub(crate) claim: &'a dyn Fn(&str) -> bool,
}

impl Poll<'_> {
    /// The task as a poll sees it now; `None` when the client does not
    /// follow task `id`.
    pub(crate) fn detailed(&self, id: &str) -> Option<DetailedTask> {
        let created_at = self.handles.created_at(id)?;
        let now = self.manager.clock().now_ms();
        let task = self.manager.task(id);
        let base = |status, updated: u64| {
            Task::new(id, status, iso_time(created_at), iso_time(updated))
                .with_ttl_ms(duration_ms(TASK_TTL))
                .with_poll_interval_ms(duration_ms(TASK_POLL_INTERVAL))
        };
        if let Some(task) = task.as_ref().filter(|task| !task.status().is_terminal()) {
            // Updated when it was queued or started, and when a poll first
            // saw a new output line or question.
            let moved = task.started_at().unwrap_or(task.launched_at());
            if let Some(question) = waiting_question(self.manager, id) {
                let asks = format!("asks question {}", question.number);
                let updated = self.handles.seen(id, asks, now).max(moved);
                let asks = base(TaskStatus::InputRequired, updated).with_status_message(format!(
                    "asks, and waits for an answer: {}",
                    truncate_chars(&question.question.text, STATUS_LINE_CHARS)
                ));
                let form = crate::elicit::form(task.subagent_name(), &question);
                let input_requests = InputRequests::from([(
                    input_key(&question),
                    InputRequest::Elicitation(ElicitRequest::new(form)),
                )]);
                return Some(DetailedTask::new(
                    asks,
                    TaskPayload::InputRequired { input_requests },
                ));
            }
            let updated = last_line(self.manager, id)
                .filter(|_| task.status() != AsyncTaskStatus::Queued)
                .map_or(moved, |line| self.handles.seen(id, line, now).max(moved));
            let message = progress(self.manager, task, now);
            let working = base(TaskStatus::Working, updated).with_status_message(message);
            return Some(DetailedTask::new(working, TaskPayload::Working));
        }
        let updated = task
            .as_ref()
            .and_then(TaskSnapshot::completed_at)
            .unwrap_or(now);
        // A result no claim carries goes to this poll, through the ledger.
        if let Some(task) = &task
            && task.notified_at().is_none()
            && (self.claim)(id)
        {
            let answer = answer_of(task);
            self.handles.keep_answer(id, answer.clone());
            return Some(detailed_answer(
                base(TaskStatus::Completed, updated),
                id,
                answer,
            ));
        }
        if let Some(answer) = self.handles.answer(id) {
            return Some(detailed_answer(
                base(TaskStatus::Completed, updated),
                id,
                answer,
            ));
        }
        match task {
            // Carried by a response on its way (a poll whose write failed
            // released it, or another delivery took it first): the next poll
            // sees where it went.
            Some(task) if task.notified_at().is_none() => {
                let working = base(TaskStatus::Working, updated).with_status_message(
                    "finished; its result is being delivered in another response",
                );
                Some(DetailedTask::new(working, TaskPayload::Working))
            }
            Some(task) if task.status() == AsyncTaskStatus::Cancelled => Some(detailed_answer(
                base(TaskStatus::Cancelled, updated),
                id,
                Answer::Cancelled,
            )),
            _ => {
                let text = delivered_elsewhere(id);
                let result = CallToolResult::success(vec![ContentBlock::text(text.clone())]);
                let done = base(TaskStatus::Completed, updated).with_status_message(text);
                Some(DetailedTask::new(
                    done,
                    TaskPayload::Completed {
                        result: to_object(&result),
                    },
                ))
            }
        }
    }
}

/// The oldest question task `id`'s subagent waits to have answered.
fn waiting_question(manager: &AsyncTaskManager, id: &str) -> Option<PendingQuestion> {
    if !manager.waits_for_answer(id) {
        return None;
    }
    manager
        .pending_questions()
        .into_iter()
        .find(|question| question.task_id == id)
}

/// The `inputRequests` key of a question: its number within its task, so
/// keys are unique over the task's life.
fn input_key(question: &PendingQuestion) -> String {
    format!("question-{}", question.number)
}

/// Answers, from a `tasks/update`'s `inputResponses`, the questions of task
/// `id` they name (each an `ElicitResult`: accepted with a non-blank
/// `answer`, or declined). A response to a question not waiting any more
/// (answered already, by this or another way; withdrawn; timed out), under
/// a key no question has, or that is no `ElicitResult`, changes nothing: the
/// extension ignores responses to requests that are not outstanding. Returns
/// how many questions it answered.
pub(crate) fn answer_questions(
    manager: &AsyncTaskManager,
    id: &str,
    responses: &InputResponses,
) -> usize {
    let waiting: Vec<PendingQuestion> = manager
        .pending_questions()
        .into_iter()
        .filter(|question| question.task_id == id)
        .collect();
    let mut answered = 0;
    for question in waiting {
        let Some(response) = responses.get(&input_key(&question)) else {
            continue;
        };
        let answer = match serde_json::from_value::<ElicitResult>(response.clone()) {
            Ok(result) => crate::elicit::answer_of(&result),
            Err(err) => {
                tracing::debug!(task_id = id, %err, "an input response that is no ElicitResult");
                continue;
            }
        };
        let status = answer.status();
        // Exactly once: the manager takes one answer per question, whoever
        // gives it (a form, `answer_async_task`, a second update).
        if manager.answer_pending(&question, answer).is_ok() {
            tracing::debug!(
                task_id = id,
                status,
                "a question was answered through tasks/update"
            );
            answered += 1;
        }
    }
    answered
}

/// What the first poll of an ended task answers.
fn answer_of(task: &TaskSnapshot) -> Answer {
    match task.status() {
        AsyncTaskStatus::Cancelled => Answer::Cancelled,
        status => {
            // The result the synchronous call would have returned: the
            // completion notification, an error unless the subagent finished.
            let content = vec![ContentBlock::text(completion_notification(task))];
            let result = if status == AsyncTaskStatus::Completed {
                CallToolResult::success(content)
            } else {
                CallToolResult::error(content)
            };
            Answer::Completed(Arc::new(to_object(&result)))
        }
    }
}

fn detailed_answer(base: Task, id: &str, answer: Answer) -> DetailedTask {
    match answer {
        Answer::Completed(result) => {
            let failed = result.get("isError") == Some(&serde_json::Value::Bool(true));
            let message = if failed {
                format!("task {id} ended without reaching its goal")
            } else {
                format!("task {id} finished")
            };
            DetailedTask::new(
                base.with_status_message(message),
                TaskPayload::Completed {
                    result: JsonObject::clone(&result),
                },
            )
        }
        Answer::Cancelled => DetailedTask::new(
            base.with_status_message(format!("task {id} was cancelled")),
            TaskPayload::Cancelled,
        ),
    }
}

/// How many characters of an output line a status message quotes.
const STATUS_LINE_CHARS: usize = 200;

/// A working task's status message: its place in the queue, or how long it
/// has run and the last line it printed.
pub(crate) fn progress(manager: &AsyncTaskManager, task: &TaskSnapshot, now: u64) -> String {
    if task.status() == AsyncTaskStatus::Queued {
        let position = manager.queue_position(task.id()).unwrap_or(1);
        let waited = format_duration(task.launched_at(), now);
        return format!(
            "queued, position {position}: it starts when a running task ends (waiting {waited})"
        );
    }
    let ran = format_duration(task.started_at().unwrap_or(task.launched_at()), now);
    match last_line(manager, task.id()) {
        Some(line) => format!(
            "running for {ran}; last output: {}",
            truncate_chars(&line, STATUS_LINE_CHARS)
        ),
        None => format!("running for {ran}; no output yet"),
    }
}

/// The last line task `id`'s subagent printed, unless blank.
fn last_line(manager: &AsyncTaskManager, id: &str) -> Option<String> {
    manager.progress(id).and_then(|progress| {
        let snapshot = progress.snapshot();
        let line = snapshot.last_line()?.trim_end().to_owned();
        (!line.trim().is_empty()).then_some(line)
    })
}

fn to_object(result: &CallToolResult) -> JsonObject {
    match serde_json::to_value(result) {
        Ok(serde_json::Value::Object(object)) => object,
        // A CallToolResult is an object of plain data.
        _ => JsonObject::new(),
    }
}

/// When the result of a task that ended at `ended`, followed by this process
/// since `held_from`, stops being held for the polls.
fn release_at(ended: u64, held_from: u64) -> u64 {
    ended
        .max(held_from)
        .saturating_add(duration_ms(TASK_RESULT_HOLD))
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_manager::RegisterTaskInput;
    use asynctask_model::{
        Clock as _, ManualClock, MaxAsyncTasks, MaxQueuedTasks, OutputObject, TerminateReason,
    };
    use asynctask_runtime::ClaimLedger;
    use pretty_assertions::assert_eq;

    const HOUR: u64 = 60 * 60 * 1000;

    fn manager(clock: &ManualClock) -> AsyncTaskManager {
        AsyncTaskManager::with_clock(
            MaxAsyncTasks::new(1).expect("valid"),
            Arc::new(clock.clone()),
        )
    }

    /// A task is forgotten once its TTL passed and it ended, never before
    /// either; a result no poll took is then the reminders' to carry.
    #[test]
    fn followed_tasks_are_pruned_after_their_ttl_once_ended() {
        let clock = ManualClock::new(1_000);
        let manager = manager(&clock);
        manager
            .register_task(RegisterTaskInput::new("aaaa0000-1", "s", "g"))
            .expect("registered");
        let handles = TaskHandles::default();
        handles.follow("aaaa0000-1", clock.now_ms());
        handles.follow("gone0000-1", clock.now_ms());
        clock.advance(duration_ms(TASK_TTL) - 1);
        assert!(!handles.prune(&manager, clock.now_ms()), "not yet");
        clock.advance(1);
        assert!(handles.prune(&manager, clock.now_ms()), "the unknown one");
        assert!(!handles.follows("gone0000-1"));
        assert!(
            handles.follows("aaaa0000-1"),
            "still running: kept past its TTL"
        );
        manager.complete_task("aaaa0000-1", OutputObject::new(TerminateReason::Goal));
        let ledger = ClaimLedger::new(manager.clone());
        assert!(
            ledger
                .claim_matching(asynctask_runtime::ClaimOwner::Request, |task| !handles
                    .follows(task.id()))
                .is_none(),
            "followed: no reminder takes it"
        );
        clock.advance(24 * HOUR);
        assert!(handles.prune(&manager, clock.now_ms()));
        assert!(!handles.follows("aaaa0000-1"));
        let claim = ledger
            .claim_matching(asynctask_runtime::ClaimOwner::Request, |task| {
                !handles.follows(task.id())
            })
            .expect("forgotten: a reminder carries it, never lost");
        assert_eq!(claim.task_ids(), ["aaaa0000-1"]);
    }

    /// An ended task's result is held for the polls for `TASK_RESULT_HOLD`
    /// from its end, or from when this process began to follow it when
    /// later (a restored set); a running task's as long as it runs; and a
    /// waiter is told when the next hold ends.
    #[test]
    fn an_ended_tasks_result_is_held_for_the_polls_a_while_then_released() {
        let clock = ManualClock::new(1_000);
        let manager = manager(&clock);
        manager.set_max_queued_tasks(MaxQueuedTasks::new(5).expect("valid"));
        for id in ["aaaa0000-1", "bbbb0000-2"] {
            manager
                .register_task(RegisterTaskInput::new(id, "s", "g"))
                .expect("registered");
        }
        let hold = duration_ms(TASK_RESULT_HOLD);
        let handles = TaskHandles::journaled(
            Arc::new(Log::default()),
            [("bbbb0000-2".to_owned(), 500)],
            clock.now_ms() + 10,
        );
        handles.follow("aaaa0000-1", clock.now_ms());
        let task = |id: &str| manager.task(id).expect("held");
        assert_eq!(handles.next_release(&manager, clock.now_ms()), None);
        clock.advance(2 * hold);
        assert!(
            handles.holds(&task("aaaa0000-1"), clock.now_ms(), true),
            "runs"
        );
        assert!(handles.holds(&task("aaaa0000-1"), clock.now_ms(), false));
        manager.complete_task("aaaa0000-1", OutputObject::new(TerminateReason::Goal));
        manager.complete_task("bbbb0000-2", OutputObject::new(TerminateReason::Goal));
        let ended = clock.now_ms();
        assert_eq!(
            handles.next_release(&manager, ended),
            Some(TASK_RESULT_HOLD)
        );
        clock.advance(hold - 1);
        assert!(handles.holds(&task("aaaa0000-1"), clock.now_ms(), true));
        assert_eq!(
            handles.next_release(&manager, clock.now_ms()),
            Some(Duration::from_millis(1))
        );
        clock.advance(1);
        assert!(!handles.holds(&task("aaaa0000-1"), clock.now_ms(), true));
        assert!(!handles.holds(&task("bbbb0000-2"), clock.now_ms(), true));
        assert!(handles.follows("aaaa0000-1"), "still answered by a poll");
        assert_eq!(handles.next_release(&manager, clock.now_ms()), None);

        // Restored after the task ended: held from the restore.
        let restored = TaskHandles::journaled(
            Arc::new(Log::default()),
            [("aaaa0000-1".to_owned(), 1_000)],
            clock.now_ms(),
        );
        let now = clock.now_ms();
        assert!(restored.holds(&task("aaaa0000-1"), now + hold - 1, true));
        assert!(!restored.holds(&task("aaaa0000-1"), now + hold, true));
        assert!(
            !restored.holds(&task("aaaa0000-1"), now, false),
            "no client that polls is connected: released at once"
        );
        assert!(
            !restored.holds(&task("bbbb0000-2"), clock.now_ms(), true),
            "not followed"
        );
        assert_eq!(ended + hold, clock.now_ms());
    }

    /// What a journal was told: (id, followed since), in order.
    #[derive(Debug, Default)]
    struct Log(Mutex<Vec<(String, u64)>>);

    impl FollowJournal for Log {
        fn follow(&self, id: &str, since: u64) -> Result<(), JournalError> {
            self.0
                .lock()
                .map_err(|_| JournalError::new("poisoned"))?
                .push((id.to_owned(), since));
            Ok(())
        }
    }

    /// Journaled, each task followed (created as an MCP Task, or adopted from
    /// its launch by a poll) is recorded; a set restored from the journal
    /// keeps the tasks still running or within their TTL — their results stay
    /// the polls', out of every reminder — and forgets the others at once, whose
    /// results the reminders then carry.
    #[test]
    fn a_journaled_set_records_each_follow_and_restores_the_tasks_within_their_ttl() {
        let clock = ManualClock::new(1_000);
        let manager = manager(&clock);
        manager.set_max_queued_tasks(MaxQueuedTasks::new(5).expect("valid"));
        for id in ["aaaa0000-1", "bbbb0000-2"] {
            manager
                .register_task(RegisterTaskInput::new(id, "s", "g"))
                .expect("registered");
        }
        manager.complete_task("aaaa0000-1", OutputObject::new(TerminateReason::Goal));
        clock.advance(duration_ms(TASK_TTL));
        manager
            .register_task(RegisterTaskInput::new("cccc0000-3", "s", "g"))
            .expect("registered");
        manager.complete_task("cccc0000-3", OutputObject::new(TerminateReason::Goal));
        let log = Arc::new(Log::default());
        let restored = [
            ("aaaa0000-1".to_owned(), 1_000),
            ("bbbb0000-2".to_owned(), 1_000),
            ("cccc0000-3".to_owned(), clock.now_ms()),
        ];
        let handles = TaskHandles::journaled(log.clone(), restored, clock.now_ms());
        assert!(handles.prune(&manager, clock.now_ms()));
        assert!(
            !handles.follows("aaaa0000-1"),
            "ended, and its TTL passed: forgotten"
        );
        assert!(handles.follows("bbbb0000-2"), "still runs: kept");
        assert!(handles.follows("cccc0000-3"), "within its TTL: kept");
        let ledger = ClaimLedger::new(manager.clone());
        let claim = ledger
            .claim_matching(asynctask_runtime::ClaimOwner::Request, |task| {
                !handles.follows(task.id())
            })
            .expect("the forgotten one's result rides in a reminder");
        assert_eq!(
            claim.task_ids(),
            ["aaaa0000-1"],
            "the followed one's does not"
        );
        assert_eq!(*log.0.lock().expect("log"), [], "restoring records nothing");

        handles.follow("dddd0000-4", clock.now_ms());
        manager
            .register_task(RegisterTaskInput::new("eeee0000-5", "s", "g"))
            .expect("registered");
        clock.advance(5);
        let anyone = |_: &TaskSnapshot| true;
        assert!(handles.adopt(&manager, "eeee0000-5", clock.now_ms(), anyone));
        assert!(handles.adopt(&manager, "eeee0000-5", clock.now_ms(), anyone));
        let launched = clock.now_ms() - 5;
        assert_eq!(
            *log.0.lock().expect("log"),
            [
                ("dddd0000-4".to_owned(), launched),
                ("eeee0000-5".to_owned(), launched)
            ],
            "each once: created now, adopted from its launch"
        );
    }

    /// A poll of a task the registry holds but no handle follows (a durable
    /// supervisor restarted from its store) follows it from its launch, when
    /// the client may take it, while it runs or its TTL has not passed.
    #[test]
    fn a_task_of_the_registry_is_adopted_within_its_ttl() {
        let clock = ManualClock::new(1_000);
        let manager = manager(&clock);
        manager.set_max_queued_tasks(MaxQueuedTasks::new(5).expect("valid"));
        for id in ["aaaa0000-1", "bbbb0000-2", "cccc0000-3"] {
            manager
                .register_task(RegisterTaskInput::new(id, "s", "g"))
                .expect("registered");
        }
        manager.complete_task("aaaa0000-1", OutputObject::new(TerminateReason::Goal));
        clock.advance(duration_ms(TASK_TTL));
        let handles = TaskHandles::default();
        let anyone = |_: &TaskSnapshot| true;
        assert!(
            !handles.adopt(&manager, "aaaa0000-1", clock.now_ms(), anyone),
            "ended, and its TTL passed: forgotten"
        );
        assert!(
            handles.adopt(&manager, "bbbb0000-2", clock.now_ms(), anyone),
            "still runs (queued): followed past its TTL"
        );
        assert_eq!(
            handles.created_at("bbbb0000-2"),
            Some(1_000),
            "from its launch"
        );
        assert!(
            !handles.adopt(&manager, "cccc0000-3", clock.now_ms(), |_| false),
            "another client's to take"
        );
        assert!(!handles.adopt(&manager, "nobody", clock.now_ms(), anyone));
        assert!(handles.follows("bbbb0000-2") && !handles.follows("cccc0000-3"));
    }

    /// A poll claims the result once, keeps the answer, and answers the same
    /// again without claiming; a result delivered before the task was
    /// followed is never given again.
    #[test]
    fn a_poll_claims_once_and_answers_the_same_again() {
        let clock = ManualClock::new(1_000);
        let manager = manager(&clock);
        for id in ["aaaa0000-1", "bbbb0000-2"] {
            manager
                .register_task(RegisterTaskInput::new(id, "s", "g"))
                .expect("registered");
            manager.complete_task(
                id,
                OutputObject::new(TerminateReason::Goal).with_final_message("done"),
            );
        }
        let ledger = ClaimLedger::new(manager.clone());
        // Delivered on a tool result before anyone followed it.
        ledger
            .claim_matching(asynctask_runtime::ClaimOwner::Request, |task| {
                task.id() == "bbbb0000-2"
            })
            .expect("pending")
            .acknowledge();
        let handles = TaskHandles::default();
        handles.follow("aaaa0000-1", clock.now_ms());
        handles.follow("bbbb0000-2", clock.now_ms());
        let claimed = std::cell::Cell::new(0);
        let claim = |id: &str| {
            let claim = ledger.claim_matching(asynctask_runtime::ClaimOwner::TaskPoll, |task| {
                task.id() == id
            });
            claimed.set(claimed.get() + usize::from(claim.is_some()));
            claim.map(asynctask_runtime::Claim::acknowledge).is_some()
        };
        let poll = Poll {
            manager: &manager,
            handles: &handles,
            claim: &claim,
        };
        let first = poll.detailed("aaaa0000-1").expect("followed");
        assert_eq!(first.status(), TaskStatus::Completed);
        assert_eq!(poll.detailed("aaaa0000-1"), Some(first));
        assert_eq!(claimed.get(), 1, "claimed once");
        assert!(manager.pending_notifications().is_empty());
        let elsewhere = serde_json::to_value(poll.detailed("bbbb0000-2").expect("followed"))
            .expect("serializable");
        insta::assert_json_snapshot!("delivered_elsewhere", elsewhere);
        assert_eq!(poll.detailed("nobody"), None);
    }

    #[test]
    fn status_messages_and_errors() {
        let clock = ManualClock::new(1_000);
        let manager = manager(&clock);
        manager.set_max_queued_tasks(MaxQueuedTasks::new(5).expect("valid"));
        let progress = asynctask_manager::TaskProgress::new();
        manager
            .register_task(
                RegisterTaskInput::new("aaaa0000-1", "s", "g").with_progress(progress.clone()),
            )
            .expect("registered");
        manager
            .register_task(RegisterTaskInput::new("bbbb0000-2", "s", "g"))
            .expect("queued");
        clock.advance(150_000);
        let task = |id: &str| manager.task(id).expect("held");
        let silent = progress_text(&manager, &task("aaaa0000-1"), clock.now_ms());
        progress.record_output(format!("compiling {}\n", "x".repeat(300)).as_bytes());
        let speaking = progress_text(&manager, &task("aaaa0000-1"), clock.now_ms());
        let queued = progress_text(&manager, &task("bbbb0000-2"), clock.now_ms());
        insta::assert_snapshot!("status_running_silent", silent);
        insta::assert_snapshot!("status_running", speaking);
        insta::assert_snapshot!("status_queued", queued);
        insta::assert_snapshot!("unknown_task", unknown_task("no-such-task").message);
    }

    fn progress_text(manager: &AsyncTaskManager, task: &TaskSnapshot, now: u64) -> String {
        progress(manager, task, now)
    }
}
