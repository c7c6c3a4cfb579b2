//! `check_async_tasks`: list every background task, or peek at one.

use std::collections::BTreeMap;

use async_trait::async_trait;
use asynctask_manager::TaskSnapshot;
use asynctask_manager::{AsyncTaskManager, ProgressSnapshot, Question};
use asynctask_model::{AsyncTaskStatus, OutputObject, TaskUsage};
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::context::{CallContext, current_scope};
use crate::format::{
    bound_text, bound_text_keeping_pointer, format_usage, id_prefix, iso_time, to_pretty,
    truncate_chars,
};
use crate::lookup::find_task_in;
use crate::params::{CheckAsyncTasksParams, ToolParams};
use crate::render::{origin_note, task_duration, task_usage, usage_total};
use crate::result::ToolResult;
use crate::tool::{ToolAnnotations, ToolSpec, TypedTool};

/// How many characters a peek's `llm_content` may hold before long fields (the
/// goal, the final message, emitted values, the error) are cut, each with a note
/// of how much was cut. About 4,000 tokens.
pub const PEEK_BUDGET_CHARS: usize = 16_000;

/// How many of a running task's last output lines a peek shows the model.
pub const PEEK_OUTPUT_LINES: usize = 10;

/// How many of them the user-facing display shows.
const DISPLAY_OUTPUT_LINES: usize = 5;

/// How many characters of an error the user-facing display shows.
const DISPLAY_ERROR_CHARS: usize = 2_000;

/// The `check_async_tasks` tool: with no `task_id` (or an empty one) it lists
/// every task; with an id or a unique prefix it shows one task in detail.
/// Within a call whose [`CallContext`] has a scope, it lists and shows only
/// the tasks the scope includes.
///
/// The list and peek texts keep the shapes models are prompted with elsewhere,
/// with one cosmetic change: a list line whose status icon is empty has no
/// leading space.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_model::{ManualClock, MaxAsyncTasks};
/// use asynctask_tools::{CheckAsyncTasksTool, Tool};
/// use tokio_util::sync::CancellationToken;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let clock = ManualClock::new(1_000);
/// let manager = AsyncTaskManager::with_clock(MaxAsyncTasks::default(), Arc::new(clock.clone()));
/// manager.register_task(RegisterTaskInput::new("0f3a9c21-aa", "researcher", "map the code")).unwrap();
/// clock.advance(150_000);
///
/// let tool = CheckAsyncTasksTool::new(manager);
/// let list = tool.execute(serde_json::json!({}), CancellationToken::new()).await;
/// assert!(list.llm_content.ends_with("Details:\n[0f3a9c21] researcher - running (2m 30s)"));
/// let peek = tool.execute(serde_json::json!({"task_id": "0f3a"}), CancellationToken::new()).await;
/// assert!(peek.llm_content.contains("\"goalPrompt\": \"map the code\""));
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct CheckAsyncTasksTool {
    manager: AsyncTaskManager,
}

impl CheckAsyncTasksTool {
    /// The tool's name.
    pub const NAME: &'static str = "check_async_tasks";

    /// A tool reading `manager`.
    #[must_use]
    pub fn new(manager: AsyncTaskManager) -> Self {
        CheckAsyncTasksTool { manager }
    }

    fn now(&self) -> u64 {
        self.manager.clock().now_ms()
    }

    fn list(&self) -> ToolResult {
        let mut tasks = self.manager.tasks();
        if let Some(scope) = current_scope() {
            tasks.retain(|task| scope.includes(task));
        }
        if tasks.is_empty() {
            return ToolResult::success(
                "No async tasks.",
                "No async tasks are currently running or completed.",
                json!({ "count": 0 }),
            );
        }
        let count = |status| tasks.iter().filter(|t| t.status() == status).count();
        let (queued, running, completed, failed, cancelled) = (
            count(AsyncTaskStatus::Queued),
            count(AsyncTaskStatus::Running),
            count(AsyncTaskStatus::Completed),
            count(AsyncTaskStatus::Failed),
            count(AsyncTaskStatus::Cancelled),
        );
        let now = self.now();
        // Positions in the queue, for the queued tasks' lines.
        let positions: BTreeMap<String, usize> = if queued == 0 {
            BTreeMap::new()
        } else {
            self.manager
                .queued_tasks()
                .iter()
                .enumerate()
                .map(|(at, task)| (task.id().to_owned(), at + 1))
                .collect()
        };
        // The tasks whose subagents wait for an answer.
        let asking: std::collections::BTreeSet<String> = self
            .manager
            .pending_questions()
            .into_iter()
            .map(|question| question.task_id)
            .collect();
        let mut lines = vec!["Async Tasks Summary:".to_owned()];
        // Said only when a queue is in use: without one the list keeps the
        // shape models were prompted with.
        if queued > 0 {
            lines.push(format!("- Queued: {queued}"));
        }
        lines.extend([
            format!("- Running: {running}"),
            format!("- Completed: {completed}"),
            format!("- Failed: {failed}"),
            format!("- Cancelled: {cancelled}"),
        ]);
        // What each task used, and the sum over the tasks listed: said only
        // when a task reported usage.
        let usages: Vec<Option<TaskUsage>> = tasks
            .iter()
            .map(|task| task_usage(&self.manager, task))
            .collect();
        let total = usage_total(usages.iter().flatten());
        if let Some((total, reported)) = &total {
            lines.push(format!(
                "- Usage: {} ({reported} of {} tasks reported usage)",
                format_usage(total),
                tasks.len()
            ));
        }
        lines.extend([String::new(), "Details:".to_owned()]);
        let mut display = Vec::with_capacity(tasks.len() + 1);
        let caller = CallContext::current().and_then(|context| context.origin);
        for (task, usage) in tasks.iter().zip(&usages) {
            let duration = task_duration(task, now);
            let prefix = id_prefix(task.id());
            let origin = origin_note(&self.manager, task.id(), caller.as_deref());
            let mut when = match positions.get(task.id()) {
                Some(position) => format!("position {position} in the queue, waiting {duration}"),
                None if asking.contains(task.id()) => {
                    format!("{duration}, waiting for an answer to its question")
                }
                None => duration,
            };
            // The model is in the task's detail; a list line stays short.
            let used = usage.as_ref().map(|usage| {
                format_usage(&TaskUsage {
                    model: None,
                    ..usage.clone()
                })
            });
            if let Some(used) = used.as_deref().filter(|used| !used.is_empty()) {
                when.push_str(", ");
                when.push_str(used);
            }
            lines.push(with_icon(
                status_icon(task.status()),
                &format!(
                    "[{prefix}] {} - {} ({when}){origin}",
                    task.subagent_name(),
                    task.status()
                ),
            ));
            let used = used
                .filter(|used| !used.is_empty())
                .map(|used| format!(" - {used}"))
                .unwrap_or_default();
            display.push(with_icon(
                status_icon(task.status()),
                &format!(
                    "**{}** (`{prefix}`) - {}{used}{origin}",
                    task.subagent_name(),
                    task.status()
                ),
            ));
        }
        if let Some((total, reported)) = &total {
            display.push(format!(
                "Usage: {} ({reported} of {} tasks)",
                format_usage(total),
                tasks.len()
            ));
        }
        let mut metadata = json!({
            "count": tasks.len(),
            "running": running,
            "completed": completed,
            "failed": failed,
            "cancelled": cancelled,
        });
        // Like the text's line, only when a queue is in use.
        if queued > 0 {
            metadata["queued"] = json!(queued);
        }
        if let Some((total, reported)) = &total {
            let mut usage = serde_json::to_value(total).unwrap_or_else(|_| json!({}));
            usage["tasks"] = json!(reported);
            metadata["usage"] = usage;
        }
        ToolResult::success(lines.join("\n"), display.join("\n"), metadata)
    }

    fn peek(&self, task_id: &str) -> ToolResult {
        let task = match find_task_in(&self.manager, task_id, current_scope().as_deref()) {
            Ok(task) => task,
            Err(error) => return error.to_tool_result(),
        };
        let now = self.now();
        // A running task shows what its subagent has printed so far.
        let progress = self
            .manager
            .progress(task.id())
            .map(|progress| progress.snapshot())
            .filter(|snapshot| !snapshot.is_empty());
        let queue_position = self.manager.queue_position(task.id());
        let mut details = bounded_details(
            &task,
            progress.as_ref(),
            queue_position,
            now,
            PEEK_BUDGET_CHARS,
        );
        // What its subagent waits to have answered (answer_async_task).
        details.question = self
            .manager
            .pending_questions()
            .into_iter()
            .find(|question| question.task_id == task.id())
            .map(|question| question.question);
        let llm_content = to_pretty(&details);
        let metadata = serde_json::to_value(&details).unwrap_or(Value::Null);
        ToolResult::success(
            llm_content,
            task_display(&task, progress.as_ref(), queue_position, now),
            metadata,
        )
    }
}

/// The peek view of a task, its keys in this order.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct TaskDetails {
    id: String,
    subagent_name: String,
    goal_prompt: String,
    status: AsyncTaskStatus,
    /// The project its subagent works in, when the serving layer has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    project: Option<String>,
    launched_at: String,
    /// For a task that waited in the queue: when it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<String>,
    /// For a queued task: its place in the queue, from 1 (the next to start).
    #[serde(skip_serializing_if = "Option::is_none")]
    queue_position: Option<usize>,
    duration: String,
    /// What it used, when its runner reported it (so far, while it runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<TaskUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    completed_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<OutputObject>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// While it runs: where its whole output is kept, if its runner keeps it.
    #[serde(skip_serializing_if = "Option::is_none")]
    output_file: Option<String>,
    /// While it runs: how many bytes of output there were so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    output_bytes: Option<u64>,
    /// While it runs: the last lines of its output, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    recent_output: Vec<String>,
    /// While its subagent waits for an answer: the question.
    #[serde(skip_serializing_if = "Option::is_none")]
    question: Option<Question>,
}

fn details(
    task: &TaskSnapshot,
    progress: Option<&ProgressSnapshot>,
    queue_position: Option<usize>,
    now: u64,
) -> TaskDetails {
    let recent_output = progress.map_or_else(Vec::new, |progress| {
        let skip = progress.last_lines.len().saturating_sub(PEEK_OUTPUT_LINES);
        progress.last_lines[skip..].to_vec()
    });
    TaskDetails {
        id: task.id().to_owned(),
        subagent_name: task.subagent_name().to_owned(),
        goal_prompt: task.goal_prompt().to_owned(),
        status: task.status(),
        project: CallContext::current()
            .and_then(|context| context.project)
            .map(|project| project.display().to_string()),
        launched_at: iso_time(task.launched_at()),
        // Said only when the task waited: it started at its launch otherwise.
        started_at: task
            .started_at()
            .filter(|started| *started != task.launched_at())
            .map(iso_time),
        queue_position,
        duration: task_duration(task, now),
        usage: task_usage_now(task, progress),
        completed_at: task.completed_at().map(iso_time),
        output: task.output().cloned(),
        error: task.error().map(str::to_owned),
        output_file: progress
            .and_then(|progress| progress.output_file.as_ref())
            .map(|path| path.display().to_string()),
        output_bytes: progress
            .map(|progress| progress.output_bytes)
            .filter(|bytes| *bytes > 0),
        recent_output,
        question: None,
    }
}

/// What the task used: what it reported by its end, or so far (its progress).
fn task_usage_now(task: &TaskSnapshot, progress: Option<&ProgressSnapshot>) -> Option<TaskUsage> {
    task.usage()
        .cloned()
        .or_else(|| progress.and_then(|progress| progress.usage.clone()))
        .filter(|usage| !usage.is_empty())
}

/// The details, with long text fields cut so the JSON fits `budget` characters.
///
/// Each long field (the goal, the error, the final message, every emitted name and
/// value, every recent output line) gets an equal share of the budget; while the
/// JSON is still too long the shares halve, down to a 64-character floor. If that
/// is not enough (thousands of variables), the variables after the first ones that
/// fit are dropped and an entry `"…"` says how many were cut.
fn bounded_details(
    task: &TaskSnapshot,
    progress: Option<&ProgressSnapshot>,
    queue_position: Option<usize>,
    now: u64,
    budget: usize,
) -> TaskDetails {
    let full = details(task, progress, queue_position, now);
    let fits = |d: &TaskDetails| to_pretty(d).chars().count() <= budget;
    if fits(&full) {
        return full;
    }
    let variables = task.output().as_ref().map_or(0, |o| o.emitted_vars.len());
    let fields = 3 + 2 * variables + full.recent_output.len() + 1;
    let mut share = (budget / fields).max(64);
    let cut = loop {
        let cut = cut_fields(&full, share, usize::MAX);
        if fits(&cut) || share == 64 {
            break cut;
        }
        share = (share / 2).max(64);
    };
    if fits(&cut) {
        return cut;
    }
    // Keep as many variables as fit (binary search on the count).
    let (mut low, mut high) = (0, variables);
    while low < high {
        let middle = (low + high).div_ceil(2);
        if fits(&cut_fields(&full, share, middle)) {
            low = middle;
        } else {
            high = middle - 1;
        }
    }
    cut_fields(&full, share, low)
}

/// `details` with every long text cut to `share` characters and only the first
/// `keep` emitted variables (plus a note of how many were dropped).
fn cut_fields(full: &TaskDetails, share: usize, keep: usize) -> TaskDetails {
    let bound = |text: &str| bound_text(text, share).into_owned();
    let mut cut = full.clone();
    cut.goal_prompt = bound(&cut.goal_prompt);
    // An error names the file holding the whole output on its last line:
    // that line survives the cut too.
    cut.error = cut
        .error
        .as_deref()
        .map(|text| bound_text_keeping_pointer(text, share).into_owned());
    cut.recent_output = cut.recent_output.iter().map(|line| bound(line)).collect();
    if let Some(output) = cut.output.as_mut() {
        // The pointer to the whole output, when the message ends with one,
        // survives the cut.
        output.final_message = output
            .final_message
            .as_deref()
            .map(|text| bound_text_keeping_pointer(text, share).into_owned());
        let total = output.emitted_vars.len();
        let mut vars: BTreeMap<String, String> = output
            .emitted_vars
            .iter()
            .take(keep)
            .map(|(name, value)| (bound(name), bound(value)))
            .collect();
        if total > keep {
            vars.insert(
                "…".to_owned(),
                format!("{} more emitted variables cut", total - keep),
            );
        }
        output.emitted_vars = vars;
    }
    cut
}

/// The user-facing detail of one task, with `...` only after a cut.
fn task_display(
    task: &TaskSnapshot,
    progress: Option<&ProgressSnapshot>,
    queue_position: Option<usize>,
    now: u64,
) -> String {
    let mut lines = vec![
        with_icon(
            status_icon(task.status()),
            &format!("**{}**", task.subagent_name()),
        ),
        format!("ID: `{}`", task.id()),
        format!("Status: {}", task.status()),
        format!("Goal: {}", truncate_chars(task.goal_prompt(), 100)),
    ];
    match queue_position {
        Some(position) => lines.push(format!(
            "Queue position: {position}, waiting {}",
            task_duration(task, now)
        )),
        None => lines.push(format!("Duration: {}", task_duration(task, now))),
    }
    if let Some(usage) = task_usage_now(task, progress) {
        lines.push(format!("Usage: {}", format_usage(&usage)));
    }
    if let Some(project) = CallContext::current().and_then(|context| context.project) {
        lines.push(format!("Project: {}", project.display()));
    }
    if let Some(output) = task
        .output()
        .as_ref()
        .filter(|o| !o.emitted_vars.is_empty())
    {
        lines.push("Emitted variables:".to_owned());
        for (name, value) in &output.emitted_vars {
            lines.push(format!("  - {name}: {}", truncate_chars(value, 50)));
        }
    }
    if let Some(error) = task.error() {
        lines.push(format!(
            "Error: {}",
            bound_text_keeping_pointer(error, DISPLAY_ERROR_CHARS)
        ));
    }
    if let Some(progress) = progress {
        if let Some(path) = &progress.output_file {
            lines.push(format!(
                "Output: {} ({} bytes so far)",
                path.display(),
                progress.output_bytes
            ));
        }
        let skip = progress
            .last_lines
            .len()
            .saturating_sub(DISPLAY_OUTPUT_LINES);
        if skip < progress.last_lines.len() {
            lines.push("Latest output:".to_owned());
            for line in &progress.last_lines[skip..] {
                lines.push(format!("  | {}", truncate_chars(line, 120)));
            }
        }
    }
    lines.join("\n")
}

/// The list icons: `[OK]`, `[ERROR]`, and none for running or cancelled.
fn status_icon(status: AsyncTaskStatus) -> &'static str {
    match status {
        AsyncTaskStatus::Completed => "[OK]",
        AsyncTaskStatus::Failed => "[ERROR]",
        _ => "",
    }
}

/// `icon text`, or just `text` when the icon is empty.
fn with_icon(icon: &str, text: &str) -> String {
    if icon.is_empty() {
        text.to_owned()
    } else {
        format!("{icon} {text}")
    }
}

#[async_trait]
impl TypedTool for CheckAsyncTasksTool {
    type Params = CheckAsyncTasksParams;

    fn name(&self) -> &str {
        Self::NAME
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            Self::NAME,
            "Check Async Tasks",
            "Check the status of background async tasks. Call with no arguments to list all \
             tasks, or provide a task_id (or prefix) to get detailed info about a specific task.",
            CheckAsyncTasksParams::schema(),
        )
        .with_annotations(ToolAnnotations::READ_ONLY)
    }

    async fn run(&self, params: CheckAsyncTasksParams, _cancel: CancellationToken) -> ToolResult {
        match params.task_id.as_deref() {
            None | Some("") => self.list(),
            Some(task_id) => self.peek(task_id),
        }
    }
}
