//! Every text the `task` tool and the task lookups give the model, and the
//! pieces both task listings show, in one place, so each has one spelling and
//! one snapshot.
//!
//! The completion notification keeps the exact JSON shape (and key order) that
//! models are prompted with elsewhere; the other texts each say what happened
//! and what the model can do next.

use std::collections::BTreeMap;
use std::time::Duration;

use asynctask_manager::{
    AsyncTaskManager, LimitReached, PendingQuestion, QueueFull, TaskProgress, TaskSnapshot,
    TaskView,
};
use asynctask_model::{AsyncTaskStatus, TaskUsage, TerminateReason};
use serde::Serialize;

use crate::catalog::{CatalogNote, SubagentInfo};
use crate::format::{
    ECHO_CHARS, format_duration, id_prefix, to_pretty, truncate_chars, whole_output_line,
};
use crate::launch::{LaunchCapReached, NestingTooDeep};

#[derive(Serialize)]
struct CompletedPayload<'a> {
    agent_id: &'a str,
    terminate_reason: TerminateReason,
    emitted_vars: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    final_message: Option<&'a str>,
    #[serde(flatten)]
    cost: Option<Cost<'a>>,
}

#[derive(Serialize)]
struct FailedPayload<'a> {
    agent_id: &'a str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(flatten)]
    cost: Option<Cost<'a>>,
}

#[derive(Serialize)]
struct CancelledPayload<'a> {
    agent_id: &'a str,
    status: &'static str,
    #[serde(flatten)]
    cost: Option<Cost<'a>>,
}

/// What a finished task cost, after a notification's own keys: only for a
/// task whose runner reported usage, so every other notification keeps its
/// shape.
#[derive(Serialize)]
struct Cost<'a> {
    usage: &'a TaskUsage,
    /// How long it ran, as listings show durations.
    elapsed: String,
}

impl<'a> Cost<'a> {
    fn of(task: &'a (impl TaskView + ?Sized)) -> Option<Self> {
        let usage = task.usage().filter(|usage| !usage.is_empty())?;
        let from = task.started_at().unwrap_or(task.launched_at());
        let to = task.completed_at().unwrap_or(from);
        Some(Cost {
            usage,
            elapsed: format_duration(from, to),
        })
    }
}

/// How a running subagent's question is put to the model: who asks, the
/// question, its choices, and how to answer.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{PendingQuestion, Question};
/// use asynctask_tools::question_notice;
///
/// let question = PendingQuestion {
///     task_id: "0f3a9c21-5b7e".into(),
///     number: 1,
///     question: Question::new("Delete the 3 stale branches?").with_choices(["yes", "no"]),
/// };
/// assert_eq!(
///     question_notice("deployer", &question),
///     "Async task `0f3a9c21` (deployer) asks, and waits for your answer:\n\
///      Delete the 3 stale branches?\n\
///      Choices: yes | no\n\
///      Answer with answer_async_task (task_id: \"0f3a9c21\", answer: ...), or decline with \
///      decline: true if you cannot answer.",
/// );
/// ```
#[must_use]
pub fn question_notice(subagent_name: &str, question: &PendingQuestion) -> String {
    let id = id_prefix(&question.task_id);
    let mut text = format!(
        "Async task `{id}` ({subagent_name}) asks, and waits for your answer:\n{}",
        question.question.text
    );
    if !question.question.choices.is_empty() {
        text.push_str("\nChoices: ");
        text.push_str(&question.question.choices.join(" | "));
    }
    text.push_str(&format!(
        "\nAnswer with answer_async_task (task_id: \"{id}\", answer: ...), or decline with \
         decline: true if you cannot answer."
    ));
    text
}

/// How a finished task is reported to the model — in reminders, and as the
/// synchronous `task` result. It takes any [`TaskView`] — a registry's
/// `TaskSnapshot` or a plain `AsyncTaskInfo` — so both render through this one
/// body. Pretty JSON (two-space indent) with the keys in this order:
///
/// - completed: `{agent_id, terminate_reason, emitted_vars, final_message?}`;
/// - failed: `{agent_id, status: "failed", error}`;
/// - cancelled: `{agent_id, status: "cancelled"}`;
/// - running: the empty string (nothing to report yet).
///
/// When the task's runner reported what it used, two keys follow the others:
/// `usage` (its [`TaskUsage`] JSON) and `elapsed` (how long it ran, `2m
/// 30s`); a task that reported nothing keeps exactly the shapes above.
///
/// # Examples
///
/// ```
/// use asynctask_model::{AsyncTaskInfo, OutputObject, TerminateReason};
/// use asynctask_tools::completion_notification;
///
/// let mut task = AsyncTaskInfo::new("a1", "researcher", "goal", 0);
/// task.complete(OutputObject::new(TerminateReason::Goal).with_var("k", "v"), 1);
/// assert_eq!(
///     completion_notification(&task),
///     "{\n  \"agent_id\": \"a1\",\n  \"terminate_reason\": \"GOAL\",\n  \"emitted_vars\": {\n    \"k\": \"v\"\n  }\n}",
/// );
/// ```
#[must_use]
pub fn completion_notification(task: &(impl TaskView + ?Sized)) -> String {
    match task.status() {
        AsyncTaskStatus::Completed => match task.output() {
            Some(output) => to_pretty(&CompletedPayload {
                agent_id: task.id(),
                terminate_reason: output.terminate_reason,
                emitted_vars: &output.emitted_vars,
                final_message: output.final_message.as_deref(),
                cost: Cost::of(task),
            }),
            None => String::new(),
        },
        AsyncTaskStatus::Failed => to_pretty(&FailedPayload {
            agent_id: task.id(),
            status: "failed",
            error: task.error(),
            cost: Cost::of(task),
        }),
        AsyncTaskStatus::Cancelled => to_pretty(&CancelledPayload {
            agent_id: task.id(),
            status: "cancelled",
            cost: Cost::of(task),
        }),
        _ => String::new(),
    }
}

/// The first paragraph of the `task` tool's description: how a call runs and
/// how its result comes back. A serving layer whose client runs calls its own
/// way (an MCP client that backgrounds them as MCP Tasks) replaces exactly
/// this paragraph; the catalog after it stays.
///
/// ```
/// use asynctask_tools::TASK_DESCRIPTION_LEAD;
/// assert!(TASK_DESCRIPTION_LEAD.starts_with("Run a subagent that works on its own"));
/// ```
pub const TASK_DESCRIPTION_LEAD: &str = "Run a subagent that works on its own toward a goal. By \
    default the call waits for the subagent and returns its result as JSON (agent_id, \
    terminate_reason, emitted_vars, final_message). With async: true the call returns at once \
    with the task ID while the subagent runs in the background; its result is delivered to you \
    when it finishes. Use check_async_tasks to monitor background tasks.";

/// The `task` tool's description; with a catalog, followed by the subagents it
/// offers (name, what it is for, and whether it reads messages while it runs);
/// with a note, followed by it (which then says why no subagent is offered
/// when none is).
pub(crate) fn task_description(
    catalog: Option<&[SubagentInfo]>,
    note: Option<&CatalogNote>,
) -> String {
    let mut text = String::from(TASK_DESCRIPTION_LEAD);
    match catalog {
        None => {}
        Some([]) if note.is_some() => {}
        Some([]) => text.push_str("\n\nNo subagents are configured."),
        Some(catalog) => {
            text.push_str("\n\nAvailable subagents (subagent_name):");
            for info in catalog {
                text.push_str("\n- ");
                text.push_str(&info.name);
                // One line per subagent: a description's line breaks become
                // spaces, so it cannot break the list.
                let description = info
                    .description
                    .lines()
                    .map(str::trim)
                    .filter(|line| !line.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                if !description.is_empty() {
                    text.push_str(": ");
                    text.push_str(&description);
                }
                if info.accepts_messages {
                    text.push_str(" (reads messages sent with message_async_task while it runs)");
                }
            }
        }
    }
    if let Some(note) = note {
        text.push_str("\n\n");
        text.push_str(&note.text);
    }
    text
}

/// A subagent the runner withholds (see [`CatalogNote`]): the note says why.
pub(crate) fn withheld_subagent(name: &str, note: &CatalogNote) -> String {
    let name = truncate_chars(name, ECHO_CHARS);
    format!(
        "subagent_name: subagent '{name}' is not offered. {}",
        note.text
    )
}

/// A subagent name the runner's catalog does not hold (`name` comes from the
/// model: a bounded part of it is echoed).
pub(crate) fn unknown_subagent(name: &str, catalog: &[SubagentInfo]) -> String {
    let name = truncate_chars(name, ECHO_CHARS);
    if catalog.is_empty() {
        return format!("subagent_name: unknown subagent '{name}'; no subagents are configured");
    }
    let known: Vec<&str> = catalog.iter().map(|info| info.name.as_str()).collect();
    format!(
        "subagent_name: unknown subagent '{name}'; the available subagents are: {}",
        known.join(", ")
    )
}

/// `task` with `async: true` registered the task and started it.
pub(crate) fn launched(subagent: &str, id: &str) -> String {
    format!(
        "Async task launched: subagent '{subagent}' (ID: {id}). Task is running in background. \
         Use 'check_async_tasks' to monitor progress."
    )
}

/// `task` with `async: true` registered the task in the queue: the limit is
/// full; it starts when a slot frees.
pub(crate) fn queued(subagent: &str, id: &str, position: usize, max: i64) -> String {
    format!(
        "Async task queued: subagent '{subagent}' (ID: {id}). Max async tasks ({max}) are \
         running, so it waits in the queue (position {position}) and starts when a running task \
         finishes; its result is delivered when it finishes. Use 'check_async_tasks' to monitor \
         progress."
    )
}

/// A queued task could not be started (it was restored without launch
/// parameters this build can read): what it fails with.
pub(crate) fn unstartable(subagent: &str, reason: &str) -> String {
    format!("Subagent '{subagent}' could not be started from the queue: {reason}.")
}

/// A session's launch budget refused a launch: the reason, then what to do.
pub(crate) fn launch_cap_refusal(cap: LaunchCapReached) -> String {
    format!(
        "{cap}. Work with the results you have, or ask the user to start a new session or \
         raise the limit."
    )
}

/// The nesting cap refused a launch from inside a subagent.
pub(crate) fn nesting_refusal(too_deep: NestingTooDeep) -> String {
    format!("{too_deep}. Do this work yourself instead of delegating it to another subagent.")
}

/// The queue past the limit refused a background launch: the reason, then the
/// model's options.
pub(crate) fn queue_full_refusal(full: QueueFull) -> String {
    format!(
        "{full}. Wait for a task to finish and check progress with 'check_async_tasks', run \
         this subagent synchronously (without async: true), or try again later."
    )
}

/// The running limit refused a background launch: the reason, then the model's
/// options.
pub(crate) fn limit_refusal(limit: LimitReached) -> String {
    format!(
        "{limit}. Wait for a running task to finish and check progress with \
         'check_async_tasks', run this subagent synchronously (without async: true), or try \
         again later."
    )
}

/// A synchronous run outlived the sync-detach time and became a background task.
/// `follow_up` says how to follow it (the layer that serves the tools knows which
/// tools exist).
pub(crate) fn detached(subagent: &str, seconds: u64, id: &str, follow_up: &str) -> String {
    format!(
        "Subagent '{subagent}' is still running after {seconds} seconds; it continues in the \
         background as async task {id}. Its result will be reported when it finishes; \
         {follow_up}"
    )
}

/// The host is shutting down: nothing new starts.
pub(crate) const SHUTTING_DOWN: &str = "The host is shutting down: no new subagent can be started.";

/// The timeout text: it names the timeout and the setting that changes it — or,
/// when the timeout already was the maximum, what is left to do.
pub(crate) fn timed_out(subagent: &str, timeout: Duration, max: Duration) -> String {
    let seconds = timeout.as_secs();
    if timeout >= max {
        format!(
            "Subagent '{subagent}' timed out after {seconds} seconds, the longest timeout_seconds \
             allows. Split the goal into smaller tasks, or ask the user to raise the host's \
             maximum timeout."
        )
    } else {
        format!(
            "Subagent '{subagent}' timed out after {seconds} seconds. Pass a larger \
             timeout_seconds (at most {} seconds) to give it longer.",
            max.as_secs()
        )
    }
}

/// `message`, then, when the runner keeps the run's whole output in a file
/// and the subagent wrote any, a blank line and the line that names that file
/// and its size so far ([`whole_output_line`]): a run that timed out, whose
/// runner never answered, still points the model to what it printed.
pub(crate) fn with_output_file(message: String, progress: &TaskProgress) -> String {
    let snapshot = progress.snapshot();
    match snapshot.output_file {
        Some(path) if snapshot.output_bytes > 0 => format!(
            "{message}\n\n{}",
            whole_output_line(&path, snapshot.output_bytes)
        ),
        _ => message,
    }
}

/// A background run was dropped before it recorded an end (the host shut down).
pub(crate) const RUN_DROPPED: &str =
    "the subagent's run was stopped before it finished (the host shut down)";

/// The runner's task was aborted from outside before it returned.
pub(crate) const RUN_ABORTED: &str = "the subagent's run was aborted before it finished";

/// A run was asked for its outcome after it had been stopped.
pub(crate) const RUN_ALREADY_STOPPED: &str = "the subagent was already stopped";

/// The runner panicked; `payload` is the panic's message.
pub(crate) fn panicked(payload: &str) -> String {
    format!("subagent panicked: {payload}")
}

/// The `message_async_task` tool's description.
pub(crate) const MESSAGE_TOOL_DESCRIPTION: &str = "Send a message to a running background \
     async task, to steer it without cancelling it (narrow its scope, skip something, stop \
     after the first failure). The message is handed to the task's subagent after any earlier \
     ones, and the subagent decides how to act on it: it is not an interrupt, and no reply \
     comes except the task's result, which is reported when it finishes as usual. The task's \
     state does not change. Only subagents that read messages accept them (the task tool's \
     description says which).";

pub(crate) const ANSWER_TOOL_DESCRIPTION: &str = "Answer the question a running background \
task's subagent asked (its question appears in a System Note and in check_async_tasks). The \
subagent waits for the answer and goes on with it; each question takes one answer. Give \
answer (one of its choices, when it gave some), or decline: true when you cannot answer \
(the subagent is told you declined). If you need the user's input, ask the user first.";

/// An answer (or a decline) reached a subagent that waited for it.
pub(crate) fn answer_sent(task: &impl TaskView, declined: bool) -> String {
    if declined {
        format!(
            "Async task {} (subagent '{}') was told you declined to answer; it goes on \
             without an answer.",
            task.id(),
            task.subagent_name()
        )
    } else {
        format!(
            "Answer sent to async task {} (subagent '{}'); it goes on with it. Its result \
             will be reported when it finishes.",
            task.id(),
            task.subagent_name()
        )
    }
}

/// An answer to a task that waits for none.
pub(crate) fn answer_not_asked(task: &impl TaskView) -> String {
    if task.status().is_terminal() {
        format!(
            "Async task {} (subagent '{}') has already finished ({}): it waits for no \
             answer. Its result is reported separately.",
            task.id(),
            task.subagent_name(),
            task.status()
        )
    } else {
        format!(
            "Async task {} (subagent '{}') is not waiting for an answer: it asked nothing, or \
             its question was answered, timed out or withdrawn. To steer it, use \
             message_async_task.",
            task.id(),
            task.subagent_name()
        )
    }
}

/// A message was queued for a running task.
pub(crate) fn message_queued(task: &impl TaskView) -> String {
    format!(
        "Message queued for async task {} (subagent '{}'). It is handed to the subagent after \
         any earlier messages; the subagent decides how to act on it. No reply comes except \
         the task's result, which will be reported when it finishes.",
        task.id(),
        task.subagent_name()
    )
}

/// A message to a task that has ended with `status`.
pub(crate) fn message_to_finished(task: &impl TaskView, status: AsyncTaskStatus) -> String {
    let next = if status == AsyncTaskStatus::Cancelled {
        "To act on what you wanted to say, launch a new task with the new instructions."
    } else {
        "To act on what you wanted to say, launch a new task and give it this task's result \
         as context."
    };
    format!(
        "Async task {} (subagent '{}') is already {status}: its subagent reads no more messages. {next}",
        task.id(),
        task.subagent_name()
    )
}

/// A message to a task whose subagent takes none.
pub(crate) fn message_not_taken(task: &impl TaskView) -> String {
    format!(
        "Subagent '{}' (async task {}) does not take messages while it runs. Wait for its \
         result, or cancel it and launch a new task with the new instructions.",
        task.subagent_name(),
        task.id()
    )
}

/// A message to a task whose subagent has stopped reading them.
pub(crate) fn message_stopped_reading(task: &impl TaskView) -> String {
    format!(
        "Subagent '{}' (async task {}) has stopped reading messages: it is finishing, or it \
         closed its input. Wait for its result, or cancel it and launch a new task with the \
         new instructions.",
        task.subagent_name(),
        task.id()
    )
}

/// A message to a task whose subagent has not read its last ones.
pub(crate) fn message_inbox_full(task: &impl TaskView) -> String {
    format!(
        "Async task {} (subagent '{}') has not read the last {} messages sent to it; wait \
         for it to catch up before sending more.",
        task.id(),
        task.subagent_name(),
        asynctask_manager::Inbox::CAPACITY
    )
}

/// No task id starts with what the model gave (`shown`: the echo, bounded).
pub(crate) fn task_not_found(shown: &str) -> String {
    format!("No async task found with ID or prefix '{shown}'.")
}

/// Several task ids start with what the model gave: one line per candidate.
pub(crate) fn ambiguous_task(shown: &str, candidates: &[impl TaskView]) -> String {
    format!(
        "Ambiguous task ID prefix '{shown}'. Candidates:\n{}",
        candidate_list(candidates)
    )
}

/// `- <8 chars>... (<subagent>)`, one line per candidate.
pub(crate) fn candidate_list(candidates: &[impl TaskView]) -> String {
    candidates
        .iter()
        .map(|task| format!("- {}... ({})", id_prefix(task.id()), task.subagent_name()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Which session launched task `id`, for a list line: ` (this session)` when it
/// is the caller's, ` (session <origin>)` for another, nothing when the task
/// has no origin (a registry with one user).
pub(crate) fn origin_note(manager: &AsyncTaskManager, id: &str, caller: Option<&str>) -> String {
    match manager.origin(id) {
        None => String::new(),
        Some(origin) if Some(origin.as_str()) == caller => " (this session)".to_owned(),
        Some(origin) => format!(" (session {origin})"),
    }
}

/// What the task used: what it had reported when it ended, or while it runs
/// what its runner reported so far.
pub(crate) fn task_usage(manager: &AsyncTaskManager, task: &TaskSnapshot) -> Option<TaskUsage> {
    let usage = match task.usage() {
        Some(usage) => Some(usage.clone()),
        None if task.status() == AsyncTaskStatus::Running => manager
            .progress(task.id())
            .and_then(|progress| progress.usage()),
        None => None,
    };
    usage.filter(|usage| !usage.is_empty())
}

/// The sum of what `usages` report (tokens and costs; no model), and how
/// many of them reported anything; `None` when none did.
pub(crate) fn usage_total<'a>(
    usages: impl IntoIterator<Item = &'a TaskUsage>,
) -> Option<(TaskUsage, usize)> {
    let mut total = TaskUsage::new();
    let mut reported = 0;
    for usage in usages {
        total.add(usage);
        reported += 1;
    }
    total.model = None;
    (reported > 0).then_some((total, reported))
}

/// How long the task has run: from its start (its launch, unless it waited in
/// the queue) to its completion, or to `now` while it runs; for a queued task,
/// how long it has waited.
pub(crate) fn task_duration(task: &TaskSnapshot, now: u64) -> String {
    let from = task.started_at().unwrap_or(task.launched_at());
    format_duration(from, task.completed_at().unwrap_or(now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_model::{AsyncTaskInfo, OutputObject};
    use pretty_assertions::assert_eq;

    #[test]
    fn completion_payloads_keep_their_key_order() {
        let mut task = AsyncTaskInfo::new("id-1", "r", "g", 0);
        task.complete(
            OutputObject::new(TerminateReason::MaxTurns).with_final_message("bye"),
            5,
        );
        assert_eq!(
            completion_notification(&task),
            "{\n  \"agent_id\": \"id-1\",\n  \"terminate_reason\": \"MAX_TURNS\",\n  \"emitted_vars\": {},\n  \"final_message\": \"bye\"\n}"
        );
        let mut failed = AsyncTaskInfo::new("id-2", "r", "g", 0);
        failed.fail("boom", 5);
        assert_eq!(
            completion_notification(&failed),
            "{\n  \"agent_id\": \"id-2\",\n  \"status\": \"failed\",\n  \"error\": \"boom\"\n}"
        );
        let mut cancelled = AsyncTaskInfo::new("id-3", "r", "g", 0);
        cancelled.cancel(5);
        assert_eq!(
            completion_notification(&cancelled),
            "{\n  \"agent_id\": \"id-3\",\n  \"status\": \"cancelled\"\n}"
        );
        assert_eq!(
            completion_notification(&AsyncTaskInfo::new("r", "r", "g", 0)),
            ""
        );
    }

    fn sample_note() -> CatalogNote {
        CatalogNote::new("The config is not trusted: the user trusts it to use it.")
            .with_withheld(vec!["deploy".to_owned()])
    }

    fn sample_task(status: AsyncTaskStatus) -> AsyncTaskInfo {
        let mut task = AsyncTaskInfo::new("<id>", "tester", "run the tests", 0);
        task.status = status;
        task
    }

    #[test]
    fn every_text_of_the_task_tool() {
        let max = Duration::from_secs(1800);
        let texts = [
            ("launched", launched("researcher", "<id>")),
            ("limit refusal", limit_refusal(LimitReached { max: 5 })),
            (
                "detached",
                detached(
                    "researcher",
                    50,
                    "<id>",
                    "use 'check_async_tasks' to follow it.",
                ),
            ),
            ("shutting down", SHUTTING_DOWN.to_owned()),
            (
                "timed out",
                timed_out("tester", Duration::from_secs(900), max),
            ),
            ("timed out at the maximum", timed_out("tester", max, max)),
            ("run dropped", RUN_DROPPED.to_owned()),
            ("run aborted", RUN_ABORTED.to_owned()),
            ("run already stopped", RUN_ALREADY_STOPPED.to_owned()),
            ("panicked", panicked("index out of bounds")),
            ("task not found", task_not_found("ffff")),
            (
                "description without a catalog",
                task_description(None, None),
            ),
            (
                "description with an empty catalog",
                task_description(Some(&[]), None),
            ),
            (
                "description with an empty catalog and a note",
                task_description(Some(&[]), Some(&sample_note())),
            ),
            (
                "description with a catalog and a note",
                task_description(
                    Some(&[SubagentInfo::new("tester", "Runs the tests")]),
                    Some(&sample_note()),
                ),
            ),
            (
                "withheld subagent",
                withheld_subagent("deploy", &sample_note()),
            ),
            (
                "description with a catalog",
                task_description(
                    Some(&[
                        SubagentInfo::new(
                            "researcher",
                            "Reads the code base and answers questions",
                        ),
                        SubagentInfo::new("tester", "  ").with_messages(true),
                        SubagentInfo::new(
                            "writer",
                            "Writes the docs.\n\n  Give it:\r\n- a topic\n- a tone\n",
                        ),
                    ]),
                    None,
                ),
            ),
            (
                "unknown subagent",
                unknown_subagent(
                    "resercher",
                    &[
                        SubagentInfo::new("researcher", ""),
                        SubagentInfo::new("tester", ""),
                    ],
                ),
            ),
            (
                "unknown subagent, none configured",
                unknown_subagent("x", &[]),
            ),
            (
                "message queued",
                message_queued(&sample_task(AsyncTaskStatus::Running)),
            ),
            (
                "message to a finished task",
                message_to_finished(
                    &sample_task(AsyncTaskStatus::Completed),
                    AsyncTaskStatus::Completed,
                ),
            ),
            (
                "message not taken",
                message_not_taken(&sample_task(AsyncTaskStatus::Running)),
            ),
            (
                "message to a cancelled task",
                message_to_finished(
                    &sample_task(AsyncTaskStatus::Cancelled),
                    AsyncTaskStatus::Cancelled,
                ),
            ),
            (
                "message stopped reading",
                message_stopped_reading(&sample_task(AsyncTaskStatus::Running)),
            ),
            (
                "message inbox full",
                message_inbox_full(&sample_task(AsyncTaskStatus::Running)),
            ),
        ];
        let all: String = texts
            .iter()
            .map(|(name, text)| format!("[{name}]\n{text}\n"))
            .collect();
        insta::assert_snapshot!("task_tool_texts", all);
    }
}
