//! The todo continuation service: when a turn ends without progress on an active
//! todo, decide whether to nudge the model, and write the nudge.
//!
//! Constants, condition order, reason strings and prompt texts are fixed: models
//! were prompted with these exact texts elsewhere, so they change only together
//! with their snapshots. Lengths are counted in characters.

use std::sync::Arc;

use asynctask_model::{Clock, Todo, TodoStatus};

/// How many continuation prompts may follow one another.
pub const MAX_CONTINUATION_ATTEMPTS: u32 = 3;
/// The least time between two continuation prompts.
pub const MIN_CONTINUATION_INTERVAL_MS: u64 = 1_000;
/// How long a continuation may run before the host should give up on it.
pub const CONTINUATION_TIMEOUT_MS: u64 = 30_000;
/// The longest task description a prompt quotes.
pub const MAX_TASK_DESCRIPTION_LENGTH: usize = 200;

/// What a continuation prompt is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuationPromptConfig {
    /// The active task, as [`TodoContinuationService::format_task_description`] gave it.
    pub task_description: String,
    /// YOLO mode: the model acts without asking for confirmation.
    pub is_yolo_mode: bool,
    /// Which attempt this is (1-based); a note is added from the second on.
    pub attempt_count: Option<u32>,
    /// Why the previous attempt failed, if known (kept for hosts; the prompts do
    /// not quote it).
    pub previous_failure: Option<String>,
}

/// Where continuation stands for the current conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContinuationState {
    /// A continuation prompt is being answered now.
    pub is_active: bool,
    /// How many continuation prompts were sent in a row.
    pub attempt_count: u32,
    /// The task the last prompt was about.
    pub task_description: Option<String>,
    /// When the last prompt was sent (Unix ms, from the service's clock).
    pub last_prompt_time_ms: Option<u64>,
}

/// What the host knows when a turn ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuationContext<'a> {
    /// The model's todo list.
    pub todos: &'a [Todo],
    /// Whether the model called any tool during the turn.
    pub had_tool_calls: bool,
    /// Whether the model is still responding (no condition uses it; kept so hosts
    /// can pass what they know).
    pub is_responding: bool,
    /// The `todo-continuation` setting; `None` when not set (then it is on).
    pub continuation_setting: Option<bool>,
    /// The conversation's continuation state.
    pub current_state: &'a ContinuationState,
}

/// Every condition, evaluated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContinuationConditions {
    /// Some todo is pending or in progress.
    pub has_active_todos: bool,
    /// The turn made no tool call.
    pub no_tool_calls_made: bool,
    /// The `todo-continuation` setting is not `false`.
    pub continuation_enabled: bool,
    /// No continuation is being answered now.
    pub not_currently_continuing: bool,
    /// Fewer than [`MAX_CONTINUATION_ATTEMPTS`] prompts were sent.
    pub within_attempt_limits: bool,
    /// At least [`MIN_CONTINUATION_INTERVAL_MS`] passed since the last prompt.
    pub within_time_constraints: bool,
}

/// The decision, its reason, and the todo to continue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuationEvaluation {
    /// Whether to send a continuation prompt.
    pub should_continue: bool,
    /// Why (one of the fixed reason strings).
    pub reason: String,
    /// The todo to continue, when `should_continue`.
    pub active_todo: Option<Todo>,
    /// Every condition as evaluated.
    pub conditions: ContinuationConditions,
}

/// The todo continuation service.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use asynctask_model::{ManualClock, Todo, TodoStatus};
/// use asynctask_runtime::{ContinuationContext, ContinuationPromptConfig, TodoContinuationService};
///
/// let service = TodoContinuationService::new(Arc::new(ManualClock::new(0)));
/// let todos = [Todo::new("1", "- write   the tests", TodoStatus::Pending)];
/// let state = service.create_continuation_state();
/// let evaluation = service.check_continuation_conditions(&ContinuationContext {
///     todos: &todos, had_tool_calls: false, is_responding: false,
///     continuation_setting: None, current_state: &state,
/// });
/// assert!(evaluation.should_continue);
/// assert_eq!(evaluation.reason, "All continuation conditions satisfied");
/// let description = service.format_task_description(evaluation.active_todo.as_ref().unwrap());
/// assert_eq!(description, "write the tests");
/// let prompt = service.generate_continuation_prompt(&ContinuationPromptConfig {
///     task_description: description, is_yolo_mode: false, attempt_count: Some(2), previous_failure: None,
/// });
/// assert!(prompt.starts_with("You have an active task that needs completion:\n'write the tests'"));
/// assert!(prompt.ends_with("Note: This is continuation attempt #2. Please make sure to take concrete action."));
/// ```
#[derive(Debug, Clone)]
pub struct TodoContinuationService {
    clock: Arc<dyn Clock>,
}

impl TodoContinuationService {
    /// A service reading time from `clock`.
    #[must_use]
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        TodoContinuationService { clock }
    }

    /// The continuation prompt: standard or YOLO, with an attempt note from the
    /// second attempt on. The description is cut to 200 characters (at a word
    /// boundary when one lies past 80 % of that).
    #[must_use]
    pub fn generate_continuation_prompt(&self, config: &ContinuationPromptConfig) -> String {
        let description = truncate_task_description(&config.task_description);
        if config.is_yolo_mode {
            yolo_prompt(&description, config.attempt_count)
        } else {
            standard_prompt(&description, config.attempt_count)
        }
    }

    /// Evaluates every condition, then reports the first that fails, in this
    /// order: enabled, active todos, no tool calls, not continuing, attempts, time.
    #[must_use]
    pub fn check_continuation_conditions(
        &self,
        context: &ContinuationContext<'_>,
    ) -> ContinuationEvaluation {
        let state = context.current_state;
        let conditions = ContinuationConditions {
            has_active_todos: context.todos.iter().any(|todo| todo.status.is_active()),
            no_tool_calls_made: !context.had_tool_calls,
            continuation_enabled: context.continuation_setting != Some(false),
            not_currently_continuing: !state.is_active,
            within_attempt_limits: state.attempt_count < MAX_CONTINUATION_ATTEMPTS,
            within_time_constraints: self.within_time_constraints(state.last_prompt_time_ms),
        };
        let stop = |reason: &str| ContinuationEvaluation {
            should_continue: false,
            reason: reason.to_owned(),
            active_todo: None,
            conditions,
        };
        if !conditions.continuation_enabled {
            return stop("Todo continuation is disabled in ephemeral settings");
        }
        if !conditions.has_active_todos {
            return stop("No active todos found (pending or in_progress)");
        }
        if !conditions.no_tool_calls_made {
            return stop("Tool calls were made during stream - no continuation needed");
        }
        if !conditions.not_currently_continuing {
            return stop("Already in continuation process");
        }
        if !conditions.within_attempt_limits {
            return stop("Maximum continuation attempts exceeded");
        }
        if !conditions.within_time_constraints {
            return stop("Too soon since last continuation attempt");
        }
        let Some(active) = find_best_active_todo(context.todos) else {
            return stop("No suitable active todo found");
        };
        ContinuationEvaluation {
            should_continue: true,
            reason: "All continuation conditions satisfied".to_owned(),
            active_todo: Some(active.clone()),
            conditions,
        }
    }

    /// The todo's content for a prompt: trimmed, cut to 200 characters (197 and
    /// `...`), whitespace runs collapsed to one space, a leading list marker
    /// (`-`, `*`, `+`) removed — in that order.
    #[must_use]
    pub fn format_task_description(&self, todo: &Todo) -> String {
        let mut description = todo.content.trim().to_owned();
        if description.chars().count() > MAX_TASK_DESCRIPTION_LENGTH {
            description = format!(
                "{}...",
                take_chars(&description, MAX_TASK_DESCRIPTION_LENGTH - 3)
            );
        }
        // Every whitespace run becomes one space: the text is trimmed (and a cut
        // ends in "..."), so collapsing the inner runs is the whole of it.
        let collapsed = description.split_whitespace().collect::<Vec<_>>().join(" ");
        strip_list_marker(&collapsed).to_owned()
    }

    /// Whether the setting, the attempt count and the time since the last prompt
    /// allow another continuation.
    #[must_use]
    pub fn should_allow_continuation(
        &self,
        continuation_setting: Option<bool>,
        state: &ContinuationState,
    ) -> bool {
        continuation_setting != Some(false)
            && state.attempt_count < MAX_CONTINUATION_ATTEMPTS
            && self.within_time_constraints(state.last_prompt_time_ms)
    }

    /// A fresh state: not active, no attempts, no description, no prompt time.
    #[must_use]
    pub fn create_continuation_state(&self) -> ContinuationState {
        ContinuationState::default()
    }

    /// The state after sending a prompt: `updates` applied, with the prompt time set
    /// to now unless `updates` gives one.
    #[must_use]
    pub fn update_continuation_state(
        &self,
        _current: &ContinuationState,
        updates: ContinuationState,
    ) -> ContinuationState {
        ContinuationState {
            last_prompt_time_ms: updates
                .last_prompt_time_ms
                .or_else(|| Some(self.clock.now_ms())),
            ..updates
        }
    }

    fn within_time_constraints(&self, last_prompt_time_ms: Option<u64>) -> bool {
        match last_prompt_time_ms {
            None => true,
            Some(last) => self.clock.now_ms().saturating_sub(last) >= MIN_CONTINUATION_INTERVAL_MS,
        }
    }
}

/// `in_progress` first, then the first pending todo (FIFO).
fn find_best_active_todo(todos: &[Todo]) -> Option<&Todo> {
    todos
        .iter()
        .find(|todo| todo.status == TodoStatus::InProgress)
        .or_else(|| todos.iter().find(|todo| todo.status == TodoStatus::Pending))
}

fn take_chars(text: &str, count: usize) -> &str {
    match text.char_indices().nth(count) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}

/// Removes one leading `-`, `*` or `+` and the whitespace after it (`/^[-*+]\s*/`).
fn strip_list_marker(text: &str) -> &str {
    match text.strip_prefix(['-', '*', '+']) {
        Some(rest) => rest.trim_start(),
        None => text,
    }
}

/// The description cut to [`MAX_TASK_DESCRIPTION_LENGTH`] characters, the last
/// three of them `...` when cut.
fn truncate_task_description(description: &str) -> String {
    if description.chars().count() <= MAX_TASK_DESCRIPTION_LENGTH {
        return description.to_owned();
    }
    let truncated = take_chars(description, MAX_TASK_DESCRIPTION_LENGTH);
    // lastIndexOf(' ') counted in characters, compared with 80 % of the limit.
    let last_space = truncated
        .chars()
        .enumerate()
        .filter(|(_, c)| *c == ' ')
        .map(|(i, _)| i)
        .last();
    match last_space {
        Some(index) if index * 10 > MAX_TASK_DESCRIPTION_LENGTH * 8 => {
            format!("{}...", take_chars(truncated, index))
        }
        _ => format!(
            "{}...",
            take_chars(truncated, MAX_TASK_DESCRIPTION_LENGTH - 3)
        ),
    }
}

fn standard_prompt(description: &str, attempt_count: Option<u32>) -> String {
    let base = [
        "You have an active task that needs completion:",
        &format!("'{description}'"),
        "",
        "Continue working on this task. Call todo_pause('reason') ONLY if there's an error preventing you from continuing.",
        "",
        "Remember to:",
        "- Focus on the specific task described",
        "- Make concrete progress toward completion",
        "- Update the task status when appropriate",
        "- Use todo_pause() if you encounter blockers",
    ]
    .join("\n");
    match attempt_count {
        Some(attempt) if attempt > 1 => format!(
            "{base}\n\nNote: This is continuation attempt #{attempt}. Please make sure to take concrete action."
        ),
        _ => base,
    }
}

fn yolo_prompt(description: &str, attempt_count: Option<u32>) -> String {
    let base = [
        "CONTINUE TASK IMMEDIATELY:",
        &format!("'{description}'"),
        "",
        "You MUST continue working on this task. Call todo_pause('reason') ONLY if there's an error preventing you from proceeding.",
        "",
        "YOLO MODE - Take action now:",
        "- Execute the task without asking for confirmation",
        "- Make concrete progress immediately",
        "- Only pause if there are actual blocking errors",
        "- Update task status when complete",
    ]
    .join("\n");
    match attempt_count {
        Some(attempt) if attempt > 1 => format!(
            "{base}\n\nATTEMPT #{attempt} - YOU MUST TAKE ACTION NOW. No more analysis, proceed with execution."
        ),
        _ => base,
    }
}
