//! The variables file: reading what a subagent wrote to `$ASYNCTASK_VARS_FILE`
//! without ever waiting on it, and fitting the variables into the inline
//! budget.

use std::collections::BTreeMap;
use std::path::Path;

use asynctask_tools::{SubagentError, SubagentRequest};

use crate::capture::{json_cost, json_len};

/// The largest variables file a subagent may write.
const VARS_FILE_MAX_BYTES: u64 = 1024 * 1024;

/// The variables a subagent wrote to `path`: none when it wrote no file, else
/// a JSON object of strings no larger than [`VARS_FILE_MAX_BYTES`]. Anything
/// else fails the run with one line naming the subagent, the file and what is
/// wrong.
///
/// The subagent controls that path: it may have made it a FIFO, or a symbolic
/// link to a terminal, which a plain open would wait on forever. So the file
/// is opened without following a final symbolic link and without waiting
/// (`O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`), and read only when it is a regular
/// file; a read of a regular file never waits on another process, so it is
/// done here, on the async worker.
pub(crate) fn read_vars(
    name: &str,
    path: &Path,
) -> Result<BTreeMap<String, String>, SubagentError> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let bad = |what: String| {
        SubagentError::new(format!(
            "subagent '{name}' wrote a bad variables file {}: {what}",
            path.display()
        ))
    };
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        // `O_NOFOLLOW` on a symbolic link.
        Err(err) if err.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(
                bad("it is a symbolic link, not a regular file".to_owned()).with_source(err)
            );
        }
        Err(err) => return Err(bad(format!("cannot read it: {err}")).with_source(err)),
    };
    let metadata = file
        .metadata()
        .map_err(|err| bad(format!("cannot read it: {err}")).with_source(err))?;
    if !metadata.file_type().is_file() {
        return Err(bad("it is not a regular file".to_owned()));
    }
    if metadata.len() > VARS_FILE_MAX_BYTES {
        return Err(bad(format!(
            "it is larger than {VARS_FILE_MAX_BYTES} bytes"
        )));
    }
    let mut bytes = Vec::new();
    // One byte over the bound is enough to know the file grew too large.
    file.take(VARS_FILE_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| bad(format!("cannot read it: {err}")).with_source(err))?;
    if bytes.len() as u64 > VARS_FILE_MAX_BYTES {
        return Err(bad(format!(
            "it is larger than {VARS_FILE_MAX_BYTES} bytes"
        )));
    }
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|err| bad(format!("not JSON: {err}")).with_source(err))?;
    let serde_json::Value::Object(object) = value else {
        return Err(bad("not a JSON object".to_owned()));
    };
    object
        .into_iter()
        .map(|(key, value)| match value {
            serde_json::Value::String(value) => Ok((key, value)),
            _ => Err(bad(format!("the value of {key:?} is not a string"))),
        })
        .collect()
}

/// The least a kept variable's value may be cut to, in JSON-escaped
/// characters; when even that does not fit the budget, variables are dropped.
const VAR_VALUE_FLOOR: usize = 100;

/// The room the marker of a cut value takes (`... [1048576 more characters
/// cut]` is 33 characters).
const VAR_CUT_MARKER: usize = 40;

/// Emitted variables cut to fit a budget, and what was left out.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct BoundedVars {
    pub(crate) vars: BTreeMap<String, String>,
    /// How many values were cut.
    pub(crate) cut: usize,
    /// How many variables were dropped.
    pub(crate) dropped: usize,
}

/// Fits `vars` into `budget`, counted as the JSON-escaped length of every name
/// and value ([`json_len`]), as the model reads them:
///
/// - when they all fit, they are kept as they are;
/// - else the variables are taken in name order, each reserving its name and
///   up to [`VAR_VALUE_FLOOR`] of its value; one that does not fit any more
///   is dropped;
/// - the kept values then share the budget: every value is cut to the largest
///   common length that fits (never under the floor), its cut marked with
///   `... [N more characters cut]`.
pub(crate) fn bound_vars(vars: BTreeMap<String, String>, budget: usize) -> BoundedVars {
    let cost = |(name, value): (&String, &String)| json_len(name) + json_len(value);
    if vars.iter().map(cost).sum::<usize>() <= budget {
        return BoundedVars {
            vars,
            ..BoundedVars::default()
        };
    }
    let total = vars.len();
    let mut reserved = 0;
    let mut kept = Vec::new();
    for (name, value) in vars {
        let (name_cost, value_cost) = (json_len(&name), json_len(&value));
        let reserve = name_cost + value_cost.min(VAR_VALUE_FLOOR);
        if reserved + reserve <= budget {
            reserved += reserve;
            kept.push((name, value, name_cost, value_cost));
        }
    }
    let dropped = total - kept.len();
    // The largest cap on each value's cost that fits, found by bisection:
    // `fits(VAR_VALUE_FLOOR)` holds by construction.
    let fits = |cap: usize| {
        kept.iter()
            .map(|(_, _, name_cost, value_cost)| name_cost + (*value_cost).min(cap))
            .sum::<usize>()
            <= budget
    };
    let (mut low, mut high) = (
        VAR_VALUE_FLOOR,
        kept.iter()
            .map(|(_, _, _, value_cost)| *value_cost)
            .max()
            .unwrap_or(0)
            .max(VAR_VALUE_FLOOR),
    );
    while low < high {
        let middle = (low + high).div_ceil(2);
        if fits(middle) {
            low = middle;
        } else {
            high = middle - 1;
        }
    }
    let mut cut = 0;
    let vars = kept
        .into_iter()
        .map(|(name, value, _, value_cost)| {
            if value_cost <= low {
                return (name, value);
            }
            cut += 1;
            (name, cut_to_json_len(&value, low - VAR_CUT_MARKER))
        })
        .collect();
    BoundedVars { vars, cut, dropped }
}

/// The head of `text` whose JSON-escaped length is at most `budget`, then
/// `... [N more characters cut]`.
fn cut_to_json_len(text: &str, budget: usize) -> String {
    let mut used = 0;
    let mut end = text.len();
    for (at, c) in text.char_indices() {
        used += json_cost(c);
        if used > budget {
            end = at;
            break;
        }
    }
    let rest = text[end..].chars().count();
    format!("{}... [{rest} more characters cut]", &text[..end])
}

/// The line a final message gets when emitted variables were cut or dropped,
/// naming the file that holds them all.
pub(crate) fn vars_note(bounded: &BoundedVars, total: usize, file: &Path) -> Option<String> {
    let values = |cut: usize| {
        if cut == 1 {
            "1 value was cut".to_owned()
        } else {
            format!("{cut} values were cut")
        }
    };
    let what = match (bounded.dropped, bounded.cut) {
        (0, 0) => return None,
        (dropped, 0) => format!("{dropped} of {total} emitted variables were dropped"),
        (0, cut) => format!("of the emitted variables, {}", values(cut)),
        (dropped, cut) => format!(
            "{dropped} of {total} emitted variables were dropped and of the rest, {}",
            values(cut)
        ),
    };
    Some(format!(
        "[{what} to fit the inline budget; all of them are in {}]",
        file.display()
    ))
}

/// The note a result gets when its request's output spec names variables the
/// subagent did not emit: nothing enforces the spec (the subagent is only told
/// of it, in `$ASYNCTASK_OUTPUT_SPEC`), so the model must not take their
/// absence for an empty value. `None` when every one was emitted.
pub(crate) fn missing_vars_note(
    request: &SubagentRequest,
    emitted: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    let missing: Vec<&str> = request
        .output_spec
        .iter()
        .map(|spec| spec.name.as_str())
        .filter(|name| !emitted.contains_key(*name))
        .collect();
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "[the output spec asked for {} the subagent did not emit: {}]",
        if missing.len() == 1 {
            "a variable"
        } else {
            "variables"
        },
        missing.join(", ")
    ))
}
