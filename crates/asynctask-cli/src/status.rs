//! `asynctask supervisor status`: what the project's supervisor (or, with none
//! running, its store) says of the tasks, as JSON or as a table for a human.

use asynctask_model::{AsyncTaskStatus, TaskUsage};
use asynctask_store::Store;
use asynctask_supervisor::{StateDir, ask};
use asynctask_tools::{escape_for_terminal as shown, format_duration, format_usage};
use serde_json::{Value, json};

use crate::CliError;

/// Whether `err` means nobody listens on the socket.
pub(crate) fn no_supervisor(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
    )
}

/// `asynctask supervisor status`: the supervisor's pid (`null` when none
/// runs), its project and its tasks — when none runs, the tasks its store
/// holds, those that were running when it died marked `interrupted` (the
/// next supervisor reports them so). Read-only: with no supervisor running,
/// the store is read without its lock, nothing is created (a read-only file
/// system is fine). A state directory another user owns is an error that
/// says so.
///
/// # Errors
///
/// [`CliError::StateDir`] for another user's state directory,
/// [`CliError::SupervisorSilent`] when a supervisor answers with something
/// unreadable, [`CliError::Store`] when the store cannot be read.
pub async fn supervisor_status(state: &StateDir) -> Result<Value, CliError> {
    state.check_owner().map_err(|source| CliError::StateDir {
        path: state.path().to_owned(),
        source,
    })?;
    state.check_socket_path()?;
    match ask(state, "status").await {
        Ok(mut status) => {
            status["state_dir"] = json!(state.path());
            Ok(status)
        }
        Err(err) if no_supervisor(&err) => stored_status(state),
        Err(err) => Err(CliError::SupervisorSilent(err)),
    }
}

/// The status when no supervisor runs: what the store holds, read only.
fn stored_status(state: &StateDir) -> Result<Value, CliError> {
    let empty = json!({"pid": null, "project": null, "state_dir": state.path(), "sessions": 0, "tasks": []});
    if !state.store().exists() {
        return Ok(empty);
    }
    let tasks = Store::read_only(state.store())?;
    let tasks: Vec<Value> = tasks
        .iter()
        .map(|task| {
            let running = task.info.status == AsyncTaskStatus::Running;
            let mut line = json!({
                "id": task.info.id,
                "subagent": task.info.subagent_name,
                "status": if running { "interrupted".to_owned() } else { task.info.status.to_string() },
                "session": task.origin,
                "delivered": task.info.notified_at.is_some(),
                "running": false,
            });
            // An interrupted task's end is not known.
            if let (Some(started), Some(ended)) = (task.info.started_at, task.info.completed_at) {
                line["elapsed_ms"] = json!(ended.saturating_sub(started));
            }
            if let Some(usage) = task.info.usage.as_ref().filter(|usage| !usage.is_empty()) {
                line["usage"] = serde_json::to_value(usage).unwrap_or_default();
            }
            line
        })
        .collect();
    let mut status = empty;
    status["tasks"] = Value::Array(tasks);
    Ok(status)
}

/// The status as a person reads it: the supervisor, its project and state
/// directory, the usage of its tasks summed (when any reported usage), then
/// one line per task: its id, subagent, status, how long it ran (when
/// known), whether its result was delivered, what it used, and a running
/// task's last line of output. Every text in it has its control and
/// bidirectional formatting characters escaped
/// ([`escape_for_terminal`](asynctask_tools::escape_for_terminal)): a
/// subagent's output cannot steer the terminal that shows it.
///
/// ```
/// let status = serde_json::json!({"pid": null, "state_dir": "/p/.asynctask", "sessions": 0, "tasks": [
///     {"id": "3f2a09c1-aaaa", "subagent": "tester", "status": "completed", "session": "1", "delivered": true, "running": false}
/// ]});
/// assert_eq!(
///     asynctask_cli::serve::status_text(&status),
///     "supervisor: not running\nstate:      /p/.asynctask\ntasks:      1\n  3f2a09c1  tester  completed  delivered"
/// );
/// let status = serde_json::json!({"pid": null, "sessions": 0, "tasks": [
///     {"id": "3f2a09c1-aaaa", "subagent": "coder", "status": "completed", "delivered": true, "running": false,
///      "elapsed_ms": 95_000, "usage": {"input_tokens": 48_210, "output_tokens": 3_115, "cost_usd": 0.18427}}
/// ]});
/// assert_eq!(
///     asynctask_cli::serve::status_text(&status),
///     "supervisor: not running\ntasks:      1\nusage:      48,210 in / 3,115 out tokens, $0.1843 (1 of 1 tasks)\n  \
///      3f2a09c1  coder  completed  1m 35s  delivered  48,210 in / 3,115 out tokens, $0.1843",
/// );
/// let status = serde_json::json!({"pid": 42, "sessions": 1, "tasks": [
///     {"id": "3f2a09c1-aaaa", "subagent": "tester", "status": "running", "running": true,
///      "elapsed_ms": 5_000, "last_line": "\u{1b}]0;HIJACKED\u{7}\u{1b}[2KALL TESTS PASSED"}
/// ]});
/// assert_eq!(
///     asynctask_cli::serve::status_text(&status),
///     "supervisor: running (pid 42), 1 session(s) connected\ntasks:      1 (1 running)\n  \
///      3f2a09c1  tester  running  5s: \\x1b]0;HIJACKED\\x07\\x1b[2KALL TESTS PASSED",
/// );
/// ```
#[must_use]
pub fn status_text(status: &Value) -> String {
    let mut lines = Vec::new();
    match status["pid"].as_u64() {
        Some(pid) => lines.push(format!(
            "supervisor: running (pid {pid}), {} session(s) connected",
            status["sessions"].as_u64().unwrap_or(0)
        )),
        None => lines.push("supervisor: not running".to_owned()),
    }
    if let Some(project) = status["project"].as_str() {
        lines.push(format!("project:    {}", shown(project)));
    }
    if let Some(state) = status["state_dir"].as_str() {
        lines.push(format!("state:      {}", shown(state)));
    }
    let tasks = status["tasks"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let running = tasks.iter().filter(|task| task["running"] == true).count();
    lines.push(if running > 0 {
        format!("tasks:      {} ({running} running)", tasks.len())
    } else {
        format!("tasks:      {}", tasks.len())
    });
    let usages: Vec<Option<TaskUsage>> = tasks
        .iter()
        .map(|task| {
            serde_json::from_value::<TaskUsage>(task["usage"].clone())
                .ok()
                .filter(|usage| !usage.is_empty())
        })
        .collect();
    let mut total = TaskUsage::new();
    let mut reported = 0;
    for usage in usages.iter().flatten() {
        total.add(usage);
        reported += 1;
    }
    if reported > 0 {
        total.model = None;
        lines.push(format!(
            "usage:      {} ({reported} of {} tasks)",
            shown(&format_usage(&total)),
            tasks.len()
        ));
    }
    let elapsed: Vec<String> = tasks
        .iter()
        .map(|task| {
            task["elapsed_ms"]
                .as_u64()
                .map(|ms| format_duration(0, ms))
                .unwrap_or_default()
        })
        .collect();
    let elapsed_width = elapsed.iter().map(String::len).max().unwrap_or(0);
    let width = tasks
        .iter()
        .filter_map(|task| task["subagent"].as_str())
        .map(|name| shown(name).chars().count())
        .max()
        .unwrap_or(0);
    let status_width = tasks
        .iter()
        .filter_map(|task| task["status"].as_str())
        .map(|status| shown(status).chars().count())
        .max()
        .unwrap_or(0);
    for ((task, elapsed), usage) in tasks.iter().zip(&elapsed).zip(&usages) {
        let id: String = task["id"].as_str().unwrap_or("?").chars().take(8).collect();
        let id = shown(&id);
        let delivered = if task["delivered"] == true {
            "delivered"
        } else if task["running"] == true {
            ""
        } else {
            "not delivered yet"
        };
        let mut line = format!(
            "  {id:<8}  {:<width$}  {:<status_width$}",
            shown(task["subagent"].as_str().unwrap_or("?")),
            shown(task["status"].as_str().unwrap_or("?")),
        );
        // The column is there only when some task has a time.
        if elapsed_width > 0 {
            line.push_str(&format!("  {elapsed:<elapsed_width$}"));
        }
        if !delivered.is_empty() {
            line.push_str("  ");
            line.push_str(delivered);
        }
        if let Some(usage) = usage {
            line.push_str("  ");
            line.push_str(&shown(&format_usage(usage)));
        }
        let mut line = line.trim_end().to_owned();
        if let Some(last) = task["last_line"].as_str() {
            line.push_str(": ");
            line.push_str(&shown(last));
        }
        lines.push(line);
    }
    lines.join("\n")
}
