//! `asynctask run`: one subagent, synchronously, through the `task` tool, as
//! a model would run it — with a timeout, progress while it runs, and an exit
//! status that tells its outcome from a failure to run it at all.

use std::sync::Arc;
use std::time::Duration;

use asynctask_manager::{AsyncTaskManager, TaskProgress};
use asynctask_tools::{
    CallContext, SubagentRunner, TaskTimeouts, TaskTool, Tool, ToolErrorType, ToolResult,
    escape_for_terminal, escape_for_terminal_keeping_lines, with_call_context,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// How `asynctask run` exits; `--help` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunExit {
    /// The subagent completed (exit status 0).
    Completed,
    /// The subagent failed: it exited non-zero, was killed, or wrote a bad
    /// variables file (1).
    Failed,
    /// The subagent ran past `--timeout` and was ended (124, as `timeout(1)`).
    TimedOut,
    /// Nothing ran: the `task` tool refused what it was given (a blank goal,
    /// say), as for any other input `asynctask` cannot act on (2).
    Refused,
}

impl RunExit {
    /// The process's exit status.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            RunExit::Completed => 0,
            RunExit::Failed => 1,
            RunExit::TimedOut => 124,
            RunExit::Refused => ERROR_EXIT,
        }
    }

    /// How a `task` result ended.
    #[must_use]
    pub fn of(result: &ToolResult) -> Self {
        match &result.error {
            None => RunExit::Completed,
            Some(error) if error.kind == ToolErrorType::Timeout => RunExit::TimedOut,
            Some(error) if error.kind == ToolErrorType::InvalidToolParams => RunExit::Refused,
            Some(_) => RunExit::Failed,
        }
    }
}

/// The exit status of `asynctask` when it could not do what it was asked (a
/// bad flag, no config, a bad config, an unknown subagent, a state directory
/// it cannot use): 2, as for a usage error.
pub const ERROR_EXIT: u8 = 2;

/// Runs `subagent` on `goal` through the `task` tool and returns its result
/// (the completion JSON in `llm_content`). With `timeout`, the run is ended
/// after it (whatever its length; the tool's cap does not apply). While it
/// runs, `on_tick` is called every 200 ms with the time so far and the last
/// line the subagent printed.
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use std::sync::Arc;
/// use std::time::Duration;
/// use asynctask_cli::run::{RunExit, run_subagent};
/// use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let config = ProcessRunnerConfig::from_toml_str(
///     "[subagents.slow]\ncommand = [\"sleep\", \"30\"]\n",
///     Path::new("."),
/// ).unwrap();
/// let runner = Arc::new(ProcessRunner::new(config));
/// let result = run_subagent(runner, "slow", "wait", Some(Duration::from_secs(1)), |_, _| {}).await;
/// assert_eq!(RunExit::of(&result), RunExit::TimedOut);
/// # });
/// ```
pub async fn run_subagent(
    runner: Arc<dyn SubagentRunner>,
    subagent: &str,
    goal: &str,
    timeout: Option<Duration>,
    mut on_tick: impl FnMut(Duration, Option<&str>),
) -> ToolResult {
    let mut tool = TaskTool::new(AsyncTaskManager::default(), runner);
    let mut params = json!({ "subagent_name": subagent, "goal_prompt": goal });
    if let Some(timeout) = timeout {
        tool = tool.with_timeouts(TaskTimeouts {
            default: timeout,
            max: timeout,
        });
        params["timeout_seconds"] = json!(timeout.as_secs().max(1));
    }
    let progress = TaskProgress::new();
    let call = with_call_context(
        CallContext::new().with_progress(progress.clone()),
        tool.execute(params, CancellationToken::new()),
    );
    let mut call = std::pin::pin!(call);
    let start = tokio::time::Instant::now();
    let period = Duration::from_millis(200);
    let mut ticks = tokio::time::interval_at(start + period, period);
    loop {
        tokio::select! {
            result = &mut call => return result,
            _ = ticks.tick() => {
                let snapshot = progress.snapshot();
                on_tick(start.elapsed(), snapshot.last_line());
            }
        }
    }
}

/// The status line `asynctask run` redraws on a terminal: the subagent, the
/// time so far, its last line (cut to fit `width` columns). Control and
/// bidirectional formatting characters in the last line are shown escaped
/// ([`escape_for_terminal`]): the subagent's output cannot retitle the
/// terminal or redraw the line.
///
/// ```
/// use std::time::Duration;
/// let line = asynctask_cli::run::progress_line("tester", Duration::from_secs(75), Some("test a ... ok"), 80);
/// assert_eq!(line, "tester running 1m 15s: test a ... ok");
/// let hijack = Some("\u{1b}]0;HIJACKED\u{7}\u{1b}[2KALL TESTS PASSED");
/// let line = asynctask_cli::run::progress_line("tester", Duration::from_secs(5), hijack, 80);
/// assert_eq!(line, "tester running 5s: \\x1b]0;HIJACKED\\x07\\x1b[2KALL TESTS PASSED");
/// ```
#[must_use]
pub fn progress_line(
    subagent: &str,
    elapsed: Duration,
    last: Option<&str>,
    width: usize,
) -> String {
    let secs = elapsed.as_secs();
    let took = if secs >= 60 {
        format!("{}m {}s", secs / 60, secs % 60)
    } else {
        format!("{secs}s")
    };
    let mut line = format!("{} running {took}", escape_for_terminal(subagent));
    if let Some(last) = last.map(str::trim).filter(|last| !last.is_empty()) {
        line.push_str(": ");
        line.push_str(&escape_for_terminal(last));
    }
    line.chars().take(width.saturating_sub(1)).collect()
}

/// What `asynctask run` prints for a person: the subagent's final message,
/// then its emitted variables (`name = value`), each on its own line; for a
/// failure, nothing (the error goes to stderr). Control and bidirectional
/// formatting characters other than line breaks and tabs are shown escaped
/// ([`escape_for_terminal_keeping_lines`]); `--json` prints the text as it is.
///
/// ```
/// let completion = serde_json::json!({
///     "agent_id": "x", "terminate_reason": "GOAL",
///     "emitted_vars": {"answer": "42\u{1b}[2K"}, "final_message": "done\n\u{1b}]0;HIJACKED\u{7}"
/// });
/// assert_eq!(
///     asynctask_cli::run::human_output(&completion),
///     "done\n\\x1b]0;HIJACKED\\x07\n\nanswer = 42\\x1b[2K",
/// );
/// ```
#[must_use]
pub fn human_output(completion: &Value) -> String {
    let mut text = completion["final_message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if let Some(vars) = completion["emitted_vars"]
        .as_object()
        .filter(|vars| !vars.is_empty())
    {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        let lines: Vec<String> = vars
            .iter()
            .map(|(name, value)| format!("{name} = {}", value.as_str().unwrap_or_default()))
            .collect();
        text.push_str(&lines.join("\n"));
    }
    escape_for_terminal_keeping_lines(&text).into_owned()
}
