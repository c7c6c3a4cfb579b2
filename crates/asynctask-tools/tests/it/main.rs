//! Integration tests of `asynctask-tools` through its public API, as a host uses it.

mod check_async_tasks;
mod message;
mod params;
mod schemas;
mod slash;
mod task;

use asynctask_tools::ToolResult;

/// A tool result as one reviewable text for a snapshot, with each
/// `(text, stand-in)` pair of `redactions` replaced (ids are random).
pub(crate) fn redacted(result: &ToolResult, redactions: &[(&str, &str)]) -> String {
    let mut text = result.transcript();
    for (from, to) in redactions {
        text = text.replace(from, to);
    }
    text
}
