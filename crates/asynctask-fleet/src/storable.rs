//! What makes a value storable in the fleet's database: names bounded and
//! printable, text with its NUL characters escaped, notification payloads
//! of bounded size.
//!
//! PostgreSQL refuses a NUL character in a `text` value, a notification
//! payload of 8,000 bytes or more, and an index entry of about 2,700 bytes
//! or more, each for good: a statement carrying one fails however often it
//! is sent. So every text a subagent or a model writes goes through
//! [`storable_text`] (a NUL becomes the two characters `\0`), the long ones
//! are bounded ([`bound_output`](crate::bound_output)), and every name is
//! checked before it is stored ([`check_name`]): at most [`MAX_NAME_BYTES`],
//! no control character. A notification carries a name cut to
//! [`MAX_NAME_BYTES`] characters (the [`payload`] expression), so a name
//! stored before these checks existed cannot overflow one either.

use std::borrow::Cow;

use crate::FleetError;

/// The longest name the fleet takes, in bytes: a workspace, a task's id, a
/// subagent's, a worker's or a front's name. Long enough for a project's
/// absolute path (a front's default workspace), short enough for an index
/// entry and a notification's payload.
pub const MAX_NAME_BYTES: usize = 1024;

/// Checks a name before it is stored: not blank, at most
/// [`MAX_NAME_BYTES`], and free of control characters (a newline, a NUL, an
/// escape sequence for the terminal of whoever reads `fleet status`) and of
/// invisible formatting characters (bidi overrides, zero-width ones), so two
/// names that read the same are the same.
///
/// # Errors
///
/// [`FleetError::Empty`] for a blank name, [`FleetError::InvalidName`]
/// saying what is wrong otherwise.
///
/// # Examples
///
/// ```
/// use asynctask_fleet::{MAX_NAME_BYTES, check_name};
///
/// assert!(check_name("team-a", "a workspace").is_ok());
/// let long = "w".repeat(MAX_NAME_BYTES + 1);
/// assert_eq!(
///     check_name(&long, "a workspace").unwrap_err().to_string(),
///     "a workspace is refused: it is 1025 bytes long, the most is 1024"
/// );
/// assert_eq!(
///     check_name("team\na", "a workspace").unwrap_err().to_string(),
///     "a workspace is refused: it holds a control character (U+000A at byte 4)"
/// );
/// assert_eq!(
///     check_name("team\u{202e}a", "a workspace").unwrap_err().to_string(),
///     "a workspace is refused: it holds an invisible formatting character (U+202E at byte 4)"
/// );
/// ```
pub fn check_name(value: &str, what: &'static str) -> Result<(), FleetError> {
    if value.trim().is_empty() {
        return Err(FleetError::Empty(what));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(FleetError::InvalidName {
            what,
            problem: format!(
                "it is {} bytes long, the most is {MAX_NAME_BYTES}",
                value.len()
            ),
        });
    }
    if let Some((at, c)) = value.char_indices().find(|(_, c)| c.is_control()) {
        return Err(FleetError::InvalidName {
            what,
            problem: format!(
                "it holds a control character (U+{:04X} at byte {at})",
                u32::from(c)
            ),
        });
    }
    // Characters that change how a name reads without showing: two names
    // that look the same in `fleet status` must be the same name.
    let invisible = |c: char| {
        asynctask_tools::is_bidi_control(c)
            || matches!(
                c,
                '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{00ad}'
            )
    };
    if let Some((at, c)) = value.char_indices().find(|(_, c)| invisible(*c)) {
        return Err(FleetError::InvalidName {
            what,
            problem: format!(
                "it holds an invisible formatting character (U+{:04X} at byte {at})",
                u32::from(c)
            ),
        });
    }
    Ok(())
}

/// Checks the names a worker registers with: its own and each subagent's
/// ([`check_name`]).
pub(crate) fn check_spec(spec: &crate::WorkerSpec) -> Result<(), FleetError> {
    check_name(&spec.name, "a worker's name")?;
    spec.workspaces
        .iter()
        .try_for_each(|workspace| check_name(workspace, "a worker's workspace"))?;
    spec.subagents
        .iter()
        .try_for_each(|subagent| check_name(subagent, "a subagent's name"))
}

/// `text` as PostgreSQL stores it: each NUL character (which a `text` value
/// cannot hold) replaced by the two characters `\0`, so it shows where it
/// was; everything else as it is. The one rule for every text a subagent or
/// a model sends to the fleet's database.
///
/// ```
/// use asynctask_fleet::storable_text;
///
/// assert_eq!(storable_text("boom\0tail"), "boom\\0tail");
/// assert!(matches!(storable_text("plain"), std::borrow::Cow::Borrowed("plain")));
/// ```
#[must_use]
pub fn storable_text(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\\0"))
    } else {
        Cow::Borrowed(text)
    }
}

/// The SQL expression of a notification's payload made of `column`: cut to
/// [`MAX_NAME_BYTES`] characters, at most 4 KiB, under PostgreSQL's 8,000
/// bytes whatever is stored. A valid name is whole; a longer one (stored
/// before names were checked) is cut, which wakes no one by mistake for
/// long (a wake-up is a hint: its listener looks at the database).
pub(crate) fn payload(column: &str) -> String {
    format!("left({column}, {MAX_NAME_BYTES})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_at_the_bound_is_taken_whatever_its_characters() {
        let wide = "é".repeat(MAX_NAME_BYTES / 2);
        assert_eq!(wide.len(), MAX_NAME_BYTES);
        assert!(check_name(&wide, "a workspace").is_ok());
        assert!(matches!(
            check_name(" \t", "a workspace"),
            Err(FleetError::Empty("a workspace"))
        ));
        // DEL and the C1 controls are control characters too.
        assert!(check_name("a\u{7f}", "a name").is_err());
        assert!(check_name("a\u{9b}31m", "a name").is_err());
        assert_eq!(payload("t.workspace"), "left(t.workspace, 1024)");
    }

    #[test]
    fn only_nul_is_escaped() {
        assert_eq!(storable_text("\0\0"), "\\0\\0");
        assert_eq!(storable_text("tab\tand é"), "tab\tand é");
    }
}
