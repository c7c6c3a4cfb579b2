//! The user's slash commands: `/tasks list`, `/task list`, `/task end <id>`.

use asynctask_manager::AsyncTaskManager;
use asynctask_model::{AsyncTaskStatus, TaskUsage};

use crate::command::CommandOutput;
use crate::context::CallContext;
use crate::context::TaskScope;
use crate::format::{format_usage, id_prefix, truncate_chars};
use crate::lookup::find_task_in;
use crate::message::message_task;
use crate::params::is_blank;
use crate::render::{origin_note, task_duration, task_usage, usage_total};

/// How many characters of a goal `/tasks list` shows.
const GOAL_PREVIEW_CHARS: usize = 40;

/// How many characters of a running task's latest output line it shows.
const LAST_LINE_PREVIEW_CHARS: usize = 80;

/// Runs `line` if it is one of ours; `None` when it is not.
///
/// Ours are `/tasks` and `/task`:
///
/// - `/tasks list`, `/task list` (and a bare `/tasks`) list every task: status,
///   id prefix, subagent, duration, what it used (when it reported usage) and
///   the first 40 characters of the goal; the usage of the tasks listed is
///   summed on the second line;
/// - `/task end <id>` cancels a running task by id or unique prefix (exact match
///   first). It answers `Usage: /task end <task_id>`, `Task not found: <arg>`,
///   `Task <id> is already <status>.`, `Ambiguous task ID. Did you mean:` with the
///   candidates, or `Cancelled task: <id>`;
/// - `/task msg <id> <text>` sends `<text>` (the rest of the line) to a running
///   task's subagent, as `message_async_task` does ([`message_task`](crate::message_task)).
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_tools::{CommandOutputKind, run_slash_command};
///
/// let manager = AsyncTaskManager::default();
/// manager.register_task(RegisterTaskInput::new("0f3a9c21-aa", "researcher", "map the code"))?;
/// let out = run_slash_command(&manager, "/task end 0f3a").unwrap();
/// assert_eq!((out.kind, out.text.as_str()), (CommandOutputKind::Info, "Cancelled task: 0f3a9c21-aa"));
/// assert_eq!(run_slash_command(&manager, "/help"), None);
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[must_use]
pub fn run_slash_command(manager: &AsyncTaskManager, line: &str) -> Option<CommandOutput> {
    let (command, rest) = next_word(line);
    if command != "/tasks" && command != "/task" {
        return None;
    }
    let (verb, rest) = next_word(rest);
    Some(match (command, verb) {
        ("/tasks", "") | (_, "list") => list(manager),
        (_, "end") => match next_word(rest).0 {
            "" => CommandOutput::error("Usage: /task end <task_id>"),
            arg => end_task(manager, arg),
        },
        (_, "msg") => match next_word(rest) {
            (id, text) if !id.is_empty() && !is_blank(text) => {
                message_task(manager, id, text.trim())
            }
            _ => CommandOutput::error("Usage: /task msg <task_id> <message>"),
        },
        _ => CommandOutput::error(
            "Usage: /tasks list | /task end <task_id> | /task msg <task_id> <message>",
        ),
    })
}

/// The first whitespace-separated word of `text`, and what follows it (the
/// rest keeps its own spacing: a message is the rest of the line, as typed).
fn next_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    match text.find(char::is_whitespace) {
        Some(end) => (&text[..end], &text[end..]),
        None => (text, ""),
    }
}

fn list(manager: &AsyncTaskManager) -> CommandOutput {
    let tasks = manager.tasks();
    if tasks.is_empty() {
        return CommandOutput::info("No async tasks.");
    }
    let now = manager.clock().now_ms();
    let count = |status| tasks.iter().filter(|t| t.status() == status).count();
    let (running, queued) = (
        count(AsyncTaskStatus::Running),
        count(AsyncTaskStatus::Queued),
    );
    let mut lines = vec![if queued == 0 {
        format!("Async tasks: {} ({running} running)", tasks.len())
    } else {
        format!(
            "Async tasks: {} ({running} running, {queued} queued)",
            tasks.len()
        )
    }];
    let usages: Vec<Option<TaskUsage>> =
        tasks.iter().map(|task| task_usage(manager, task)).collect();
    if let Some((total, reported)) = usage_total(usages.iter().flatten()) {
        lines.push(format!(
            "Usage: {} ({reported} of {} tasks)",
            format_usage(&total),
            tasks.len()
        ));
    }
    let caller = CallContext::current().and_then(|context| context.origin);
    for (task, usage) in tasks.iter().zip(&usages) {
        let duration = task_duration(task, now);
        let mut when = if task.status() == AsyncTaskStatus::Queued {
            format!("waiting {duration}")
        } else {
            duration
        };
        if let Some(usage) = usage.as_ref().filter(|usage| !usage.is_empty()) {
            when.push_str(", ");
            when.push_str(&format_usage(usage));
        }
        lines.push(format!(
            "{} {} {} ({when}) - {}{}",
            task.status().tag(),
            id_prefix(task.id()),
            task.subagent_name(),
            truncate_chars(task.goal_prompt(), GOAL_PREVIEW_CHARS),
            origin_note(manager, task.id(), caller.as_deref()),
        ));
        // A running task's latest output line, when its runner reports one.
        let last = manager
            .progress(task.id())
            .and_then(|progress| progress.snapshot().last_line().map(str::to_owned));
        if let Some(last) = last {
            lines.push(format!(
                "    > {}",
                truncate_chars(&last, LAST_LINE_PREVIEW_CHARS)
            ));
        }
    }
    CommandOutput::info(lines.join("\n"))
}

/// Cancels the running or queued task `task_id` (an id or a unique prefix; an
/// exact match first): the logic and texts of `/task end <id>`, for any caller that ends tasks
/// (the MCP server's `end_async_task` uses it).
///
/// Answers `Cancelled task: <id>` (info), or an error: `Task not found: <arg>`,
/// `Task <id> is already <status>.`, or `Ambiguous task ID. Did you mean:` with
/// one `  - <id> (<subagent>, <status>)` line per candidate.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_tools::{CommandOutputKind, end_task};
///
/// let manager = AsyncTaskManager::default();
/// manager.register_task(RegisterTaskInput::new("0f3a9c21-aa", "researcher", "map the code"))?;
/// assert_eq!(end_task(&manager, "0f3a").text, "Cancelled task: 0f3a9c21-aa");
/// let again = end_task(&manager, "0f3a9c21-aa");
/// assert_eq!((again.kind, again.text.as_str()), (CommandOutputKind::Error, "Task 0f3a9c21-aa is already cancelled."));
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[must_use]
pub fn end_task(manager: &AsyncTaskManager, task_id: &str) -> CommandOutput {
    end_task_in(manager, task_id, None)
}

/// [`end_task`] among the tasks `scope` includes (every task when `None`): a
/// task out of it is not found, with the same text as an id no task has
/// (the model's `end_async_task` ends only the tasks its session owns).
#[must_use]
pub fn end_task_in(
    manager: &AsyncTaskManager,
    task_id: &str,
    scope: Option<&dyn TaskScope>,
) -> CommandOutput {
    let task = match find_task_in(manager, task_id, scope) {
        Ok(task) => task,
        Err(error) => return error.to_command_output(),
    };
    if manager.cancel_task(task.id()) {
        return CommandOutput::info(format!("Cancelled task: {}", task.id()));
    }
    // Already terminal — or it finished between the lookup and the cancel.
    let status = manager
        .task(task.id())
        .map_or(task.status(), |now| now.status());
    CommandOutput::error(format!("Task {} is already {status}.", task.id()))
}

/// The ids of tasks not ended yet (running or queued) that start with
/// `partial`, ignoring case: completions for `/task end <partial>`, in
/// registration order.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_tools::complete_task_ids;
///
/// let manager = AsyncTaskManager::default();
/// manager.register_task(RegisterTaskInput::new("AbC-1", "r", "g"))?;
/// manager.register_task(RegisterTaskInput::new("abd-2", "r", "g"))?;
/// assert_eq!(complete_task_ids(&manager, "ab"), ["AbC-1", "abd-2"]);
/// assert_eq!(complete_task_ids(&manager, "ABC"), ["AbC-1"]);
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[must_use]
pub fn complete_task_ids(manager: &AsyncTaskManager, partial: &str) -> Vec<String> {
    let partial = partial.to_lowercase();
    manager
        .tasks()
        .into_iter()
        .filter(|task| !task.status().is_terminal())
        .filter(|task| task.id().to_lowercase().starts_with(&partial))
        .map(|task| task.id().to_owned())
        .collect()
}
