//! Formatting shared by every model-facing text: durations, truncation, id prefixes,
//! ISO times, and the completion notification JSON.

use std::borrow::Cow;
use std::collections::BTreeMap;

use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus, TerminateReason};
use serde::Serialize;

/// How many characters of an id listings show.
pub const ID_PREFIX_CHARS: usize = 8;

/// How many characters of a model-supplied id or name an answer echoes back
/// (`Task not found: <id>`, `unknown subagent '<name>'`): enough for any real
/// id, and a 200,000-character "id" costs the model nothing.
pub const ECHO_CHARS: usize = 200;

/// The seed's duration format: `15s`, `2m 30s`, `1h 15m`. A negative span (a clock
/// moved backwards) reads `0s`.
///
/// # Examples
///
/// ```
/// use asynctask_tools::format_duration;
/// assert_eq!(format_duration(0, 15_999), "15s");
/// assert_eq!(format_duration(0, 150_000), "2m 30s");
/// assert_eq!(format_duration(0, 4_500_000), "1h 15m");
/// assert_eq!(format_duration(10_000, 0), "0s");
/// ```
#[must_use]
pub fn format_duration(start_ms: u64, end_ms: u64) -> String {
    let seconds = end_ms.saturating_sub(start_ms) / 1000;
    if seconds < 60 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 60 {
        return format!("{minutes}m {}s", seconds % 60);
    }
    format!("{}h {}m", minutes / 60, minutes % 60)
}

/// The first `max` characters of `text`, followed by `...` only when something was
/// cut. Counts characters, never splits one.
///
/// # Examples
///
/// ```
/// use asynctask_tools::truncate_chars;
/// assert_eq!(truncate_chars("short", 10), "short");
/// assert_eq!(truncate_chars("日本語のテキスト", 3), "日本語...");
/// ```
#[must_use]
pub fn truncate_chars(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some((cut, _)) => Cow::Owned(format!("{}...", &text[..cut])),
    }
}

/// The first [`ID_PREFIX_CHARS`] characters of an id (the whole id when shorter).
///
/// # Examples
///
/// ```
/// use asynctask_tools::id_prefix;
/// assert_eq!(id_prefix("0f3a9c21-77e4"), "0f3a9c21");
/// assert_eq!(id_prefix("日本語"), "日本語");
/// ```
#[must_use]
pub fn id_prefix(id: &str) -> &str {
    match id.char_indices().nth(ID_PREFIX_CHARS) {
        None => id,
        Some((cut, _)) => &id[..cut],
    }
}

/// A Unix-millisecond time as ISO 8601 UTC with milliseconds, like JavaScript's
/// `toISOString`: `2026-09-21T14:13:20.000Z`.
///
/// # Examples
///
/// ```
/// use asynctask_tools::iso_time;
/// assert_eq!(iso_time(1_790_000_000_000), "2026-09-21T14:13:20.000Z");
/// ```
#[must_use]
pub fn iso_time(ms: u64) -> String {
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(time) => time.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        // Past jiff's range (year 9999): say so rather than invent a date.
        Err(_) => format!("{ms} ms since the Unix epoch"),
    }
}

/// Cuts `text` to at most `budget` characters, keeping the head and saying how
/// many characters were cut.
///
/// # Examples
///
/// ```
/// use asynctask_tools::bound_text;
/// assert_eq!(bound_text("abcdef", 10), "abcdef");
/// assert_eq!(bound_text("abcdefghij", 3), "abc... [7 more characters cut]");
/// ```
#[must_use]
pub fn bound_text(text: &str, budget: usize) -> Cow<'_, str> {
    match text.char_indices().nth(budget) {
        None => Cow::Borrowed(text),
        Some((cut, _)) => {
            let rest = text[cut..].chars().count();
            Cow::Owned(format!("{}... [{rest} more characters cut]", &text[..cut]))
        }
    }
}

#[derive(Serialize)]
struct CompletedPayload<'a> {
    agent_id: &'a str,
    terminate_reason: TerminateReason,
    emitted_vars: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    final_message: Option<&'a str>,
}

#[derive(Serialize)]
struct FailedPayload<'a> {
    agent_id: &'a str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

#[derive(Serialize)]
struct CancelledPayload<'a> {
    agent_id: &'a str,
    status: &'static str,
}

/// How a finished task is reported to the model — in reminders, and as the
/// synchronous `task` result. Pretty JSON in the seed's key order:
///
/// - completed: `{agent_id, terminate_reason, emitted_vars, final_message?}`;
/// - failed: `{agent_id, status: "failed", error}`;
/// - cancelled: `{agent_id, status: "cancelled"}`;
/// - running: the empty string (nothing to report yet).
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
pub fn completion_notification(task: &AsyncTaskInfo) -> String {
    match task.status {
        AsyncTaskStatus::Completed => match &task.output {
            Some(output) => to_pretty(&CompletedPayload {
                agent_id: &task.id,
                terminate_reason: output.terminate_reason,
                emitted_vars: &output.emitted_vars,
                final_message: output.final_message.as_deref(),
            }),
            None => String::new(),
        },
        AsyncTaskStatus::Failed => to_pretty(&FailedPayload {
            agent_id: &task.id,
            status: "failed",
            error: task.error.as_deref(),
        }),
        AsyncTaskStatus::Cancelled => to_pretty(&CancelledPayload {
            agent_id: &task.id,
            status: "cancelled",
        }),
        AsyncTaskStatus::Running => String::new(),
    }
}

/// `serde_json::to_string_pretty` (two-space indent, like `JSON.stringify(_, null, 2)`).
pub(crate) fn to_pretty(value: &impl Serialize) -> String {
    // Serializing plain structs of strings and maps cannot fail; if it ever did,
    // the model would read why instead of an empty text.
    serde_json::to_string_pretty(value)
        .unwrap_or_else(|err| format!("{{\"error\": \"could not serialize: {err}\"}}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_model::OutputObject;
    use pretty_assertions::assert_eq;

    #[test]
    fn durations_follow_the_seed() {
        let cases = [
            (0, "0s"),
            (59_999, "59s"),
            (60_000, "1m 0s"),
            (3_599_000, "59m 59s"),
            (3_600_000, "1h 0m"),
            (90_000_000, "25h 0m"),
        ];
        for (ms, expected) in cases {
            assert_eq!(format_duration(1_000, 1_000 + ms), expected);
        }
    }

    #[test]
    fn truncation_adds_dots_only_when_cut() {
        assert_eq!(truncate_chars("abc", 3), "abc");
        assert_eq!(truncate_chars("abcd", 3), "abc...");
        assert_eq!(truncate_chars("", 0), "");
        assert_eq!(truncate_chars("🦀🦀", 1), "🦀...");
    }

    #[test]
    fn iso_time_has_milliseconds_and_z() {
        assert_eq!(iso_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_time(1_790_000_000_123), "2026-09-21T14:13:20.123Z");
        assert_eq!(
            iso_time(u64::MAX),
            "9223372036854775807 ms since the Unix epoch"
        );
    }

    #[test]
    fn completion_payloads_keep_the_seed_key_order() {
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
}
