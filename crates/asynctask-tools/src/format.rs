//! Formatting shared by every model-facing text: durations, usage,
//! truncation, id prefixes, ISO times and pretty JSON.

use std::borrow::Cow;

use asynctask_model::TaskUsage;
use serde::Serialize;

/// How many characters of an id listings show.
pub const ID_PREFIX_CHARS: usize = 8;

/// How many characters of a model-supplied id or name an answer echoes back
/// (`Task not found: <id>`, `unknown subagent '<name>'`): enough for any real
/// id, and a 200,000-character "id" costs the model nothing.
pub const ECHO_CHARS: usize = 200;

/// A duration as models read it elsewhere: `15s`, `2m 30s`, `1h 15m`. A negative span (a clock
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

/// What a task used, as every listing shows it: tokens (`12,345 in / 2,100
/// out tokens`, or only the side reported), the cost in dollars to four
/// decimals, the model — those reported, joined by `, `. Empty when nothing
/// was reported.
///
/// # Examples
///
/// ```
/// use asynctask_model::TaskUsage;
/// use asynctask_tools::format_usage;
///
/// let usage = TaskUsage::new()
///     .with_input_tokens(12_345)
///     .with_output_tokens(2_100)
///     .with_cost_usd(0.01234)
///     .with_model("claude-sonnet-4-5");
/// assert_eq!(format_usage(&usage), "12,345 in / 2,100 out tokens, $0.0123, claude-sonnet-4-5");
/// assert_eq!(format_usage(&TaskUsage::new().with_output_tokens(7)), "7 output tokens");
/// assert_eq!(format_usage(&TaskUsage::new().with_cost_usd(1_234.5)), "$1,234.5000");
/// assert_eq!(format_usage(&TaskUsage::new()), "");
/// ```
#[must_use]
pub fn format_usage(usage: &TaskUsage) -> String {
    let mut parts = Vec::with_capacity(3);
    match (usage.input_tokens, usage.output_tokens) {
        (Some(input), Some(output)) => parts.push(format!(
            "{} in / {} out tokens",
            thousands(input),
            thousands(output)
        )),
        (Some(input), None) => parts.push(format!("{} input tokens", thousands(input))),
        (None, Some(output)) => parts.push(format!("{} output tokens", thousands(output))),
        (None, None) => {}
    }
    if let Some(micros) = usage.cost_micro_usd {
        // To the hundredth of a cent, rounded half up.
        let units = micros / 100 + u64::from(micros % 100 >= 50);
        parts.push(format!(
            "${}.{:04}",
            thousands(units / 10_000),
            units % 10_000
        ));
    }
    if let Some(model) = &usage.model {
        parts.push(model.clone());
    }
    parts.join(", ")
}

/// `n` with a comma between each group of three digits.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut text = String::with_capacity(digits.len() + digits.len() / 3);
    for (at, digit) in digits.chars().enumerate() {
        if at > 0 && (digits.len() - at).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
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

/// How the line that points to a cut text's whole version starts: see
/// [`whole_output_line`].
pub const WHOLE_OUTPUT_PREFIX: &str = "[whole output: ";

/// The last line of a final message that was cut, naming the file that holds
/// the whole output and its size: a client that cuts the middle out of a
/// long tool result still leaves the model this pointer.
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use asynctask_tools::whole_output_line;
/// assert_eq!(
///     whole_output_line(Path::new("/tmp/out/a1.out"), 123_456),
///     "[whole output: /tmp/out/a1.out (123456 bytes)]",
/// );
/// ```
#[must_use]
pub fn whole_output_line(path: &std::path::Path, bytes: u64) -> String {
    format!("{WHOLE_OUTPUT_PREFIX}{} ({bytes} bytes)]", path.display())
}

/// Cuts `text` like [`bound_text`], but keeps its last line whole when that
/// line points to the whole output ([`whole_output_line`]), so a cut never
/// loses the way to the full text.
///
/// # Examples
///
/// ```
/// use asynctask_tools::bound_text_keeping_pointer;
/// let text = "a long head\n[whole output: /o/a.out (99 bytes)]";
/// assert_eq!(
///     bound_text_keeping_pointer(text, 4),
///     "a lo... [7 more characters cut]\n[whole output: /o/a.out (99 bytes)]",
/// );
/// assert_eq!(bound_text_keeping_pointer("abcdef", 3), "abc... [3 more characters cut]");
/// ```
#[must_use]
pub fn bound_text_keeping_pointer(text: &str, budget: usize) -> Cow<'_, str> {
    if let Some((body, last)) = text.rsplit_once('\n')
        && last.starts_with(WHOLE_OUTPUT_PREFIX)
        && last.ends_with(']')
    {
        return match bound_text(body, budget) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            Cow::Owned(cut) => Cow::Owned(format!("{cut}\n{last}")),
        };
    }
    bound_text(text, budget)
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
    use pretty_assertions::assert_eq;

    #[test]
    fn durations_use_the_largest_two_units() {
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
}
