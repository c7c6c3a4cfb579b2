//! Integration tests of `asynctask-tools` through its public API, as a host uses it.

mod answer;
mod check_async_tasks;
mod codegen;
mod message;
mod params;
mod schemas;
mod slash;
mod task;
mod usage;

use std::collections::BTreeSet;

use asynctask_tools::ToolResult;
use serde_json::Value;

/// A tool result as one reviewable text for a snapshot, with each
/// `(text, stand-in)` pair of `redactions` replaced (ids are random).
pub(crate) fn redacted(result: &ToolResult, redactions: &[(&str, &str)]) -> String {
    let mut text = result.transcript();
    for (from, to) in redactions {
        text = text.replace(from, to);
    }
    text
}

/// The names in a `type` keyword (`"string"` or `["string", "null"]`).
pub(crate) fn types_of(node: &Value) -> Vec<&str> {
    match node.get("type") {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The strings of a JSON array (a schema's `required`), as a set.
pub(crate) fn string_set(value: Option<&Value>) -> BTreeSet<&str> {
    value
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}
