//! Text a subagent wrote, made safe to show on a person's terminal: control
//! and bidirectional-formatting characters written as visible escapes.
//!
//! A subagent's output, its progress lines, its usage reports and its errors
//! are untrusted. Printed raw, `ESC ] 0 ; … BEL` retitles the terminal,
//! `ESC [ 2K` erases the line it is on, and U+202E turns the rest of a line
//! around: a subagent could make a status listing show whatever it likes.
//! Every view for a person (`asynctask fleet status`, `asynctask supervisor
//! status`, `asynctask run`'s progress and its output) passes subagent text
//! through [`escape_for_terminal`] or [`escape_for_terminal_keeping_lines`].
//! What a model reads is never escaped here: a model reads JSON, where these
//! characters are plain data.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every character that could steer a terminal or reorder what
/// it shows written as a visible escape, for a view that shows it on one
/// line:
///
/// - the C0 controls, DEL and the C1 controls (U+0000–U+001F, U+007F–U+009F),
///   line breaks and tabs among them: `\x1b`, `\n`, `\t`, `\x7f`, and
///   `\u{9b}` for a C1 control (a terminal may take U+009B as `ESC [`);
/// - the Unicode bidirectional formatting characters (U+061C, U+200E,
///   U+200F, U+202A–U+202E, U+2066–U+2069): `\u{202e}`.
///
/// Everything else, other non-ASCII letters and symbols included, is kept
/// as it is. A backslash is kept too: an escape shows what was there, but a
/// subagent can still print the four characters `\x1b`, which look the same.
/// Borrows `text` when nothing needed escaping.
///
/// # Examples
///
/// ```
/// use asynctask_tools::escape_for_terminal;
/// assert_eq!(
///     escape_for_terminal("\u{1b}]0;TITLE\u{7}\u{1b}[2KALL TESTS PASSED"),
///     "\\x1b]0;TITLE\\x07\\x1b[2KALL TESTS PASSED",
/// );
/// assert_eq!(escape_for_terminal("évident \u{202e}txt.exe"), "évident \\u{202e}txt.exe");
/// assert_eq!(escape_for_terminal("a\tb\nc"), "a\\tb\\nc");
/// assert_eq!(escape_for_terminal("plain"), "plain");
/// ```
#[must_use]
pub fn escape_for_terminal(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// [`escape_for_terminal`] for a text of several lines (a final message, an
/// error): line breaks (`\n`) and tabs are kept, and so is a `\r` right
/// before a `\n` (a CRLF line end); every other control and bidirectional
/// formatting character is escaped.
///
/// # Examples
///
/// ```
/// use asynctask_tools::escape_for_terminal_keeping_lines;
/// assert_eq!(
///     escape_for_terminal_keeping_lines("ok\r\n\tdone\r\u{1b}[1Afake\n"),
///     "ok\r\n\tdone\\r\\x1b[1Afake\n",
/// );
/// ```
#[must_use]
pub fn escape_for_terminal_keeping_lines(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

/// Whether `c` is a Unicode bidirectional formatting character: the marks
/// (U+061C, U+200E, U+200F), the embeddings and overrides (U+202A–U+202E),
/// and the isolates (U+2066–U+2069). They reorder what a person reads
/// (`txt.exe` shown as `exe.txt`), so names that people compare refuse them.
///
/// ```
/// use asynctask_tools::is_bidi_control;
///
/// assert!(is_bidi_control('\u{202e}'));
/// assert!(!is_bidi_control('é'));
/// ```
#[must_use]
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

fn escape(text: &str, keep_lines: bool) -> Cow<'_, str> {
    let kept = |at: usize, c: char| {
        if keep_lines && (c == '\n' || c == '\t') {
            return true;
        }
        if keep_lines && c == '\r' && text[at + 1..].starts_with('\n') {
            return true;
        }
        !c.is_control() && !is_bidi_control(c)
    };
    let Some(first) = text.char_indices().position(|(at, c)| !kept(at, c)) else {
        return Cow::Borrowed(text);
    };
    let mut escaped = String::with_capacity(text.len() + 8);
    for (index, (at, c)) in text.char_indices().enumerate() {
        if index < first || kept(at, c) {
            escaped.push(c);
            continue;
        }
        match c {
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push_str("\\t"),
            '\0'..='\u{7f}' => {
                // Writing to a `String` cannot fail.
                let _ = write!(escaped, "\\x{:02x}", u32::from(c));
            }
            _ => {
                let _ = write!(escaped, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn terminal_sequences_are_shown_not_run() {
        for (raw, shown) in [
            // ESC, BEL, a CSI that erases the line, an OSC that sets the title.
            ("\u{1b}", "\\x1b"),
            ("\u{7}", "\\x07"),
            ("\u{1b}[2K\r", "\\x1b[2K\\r"),
            (
                "\u{1b}]0;TITLE-HIJACKED\u{7}",
                "\\x1b]0;TITLE-HIJACKED\\x07",
            ),
            // An OSC ended by ST (`ESC \`), and an 8-bit CSI.
            ("\u{1b}]8;;http://x\u{1b}\\", "\\x1b]8;;http://x\\x1b\\"),
            ("\u{9b}2J", "\\u{9b}2J"),
            ("\u{85}\u{9f}\u{80}", "\\u{85}\\u{9f}\\u{80}"),
            ("a\0b", "a\\x00b"),
            ("\u{7f}\u{8}", "\\x7f\\x08"),
            ("\u{c}\u{b}", "\\x0c\\x0b"),
        ] {
            assert_eq!(escape_for_terminal(raw), shown, "{raw:?}");
            assert_eq!(escape_for_terminal_keeping_lines(raw), shown, "{raw:?}");
        }
    }

    #[test]
    fn bidi_controls_are_shown_not_applied() {
        for c in [
            '\u{061c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}',
            '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
        ] {
            let shown = format!("x\\u{{{:x}}}y", u32::from(c));
            assert_eq!(escape_for_terminal(&format!("x{c}y")), shown);
            assert_eq!(escape_for_terminal_keeping_lines(&format!("x{c}y")), shown);
        }
        // Their neighbours are ordinary characters.
        for kept in ["\u{200d}", "\u{2065}", "\u{206a}", "\u{2029}", "\u{61b}"] {
            assert_eq!(escape_for_terminal(kept), kept);
        }
    }

    #[test]
    fn ordinary_text_is_kept_and_borrowed() {
        for text in [
            "",
            "plain ASCII: 1 + 1 = 2 \\ done",
            "résumé, naïve, Ærø, 日本語, Ελληνικά, עברית, العربية, 😀",
            "\u{a0}non-breaking\u{ad}soft hyphen",
        ] {
            assert!(matches!(escape_for_terminal(text), Cow::Borrowed(t) if t == text));
            assert!(
                matches!(escape_for_terminal_keeping_lines(text), Cow::Borrowed(t) if t == text)
            );
        }
        assert_eq!(
            escape_for_terminal("日本\u{1b}語"),
            "日本\\x1b語",
            "the characters around an escape are whole"
        );
    }

    #[test]
    fn lines_are_kept_only_when_asked() {
        let text = "one\ttwo\r\nthree\rfour\n\r";
        assert_eq!(
            escape_for_terminal(text),
            "one\\ttwo\\r\\nthree\\rfour\\n\\r"
        );
        assert_eq!(
            escape_for_terminal_keeping_lines(text),
            "one\ttwo\r\nthree\\rfour\n\\r"
        );
    }
}
