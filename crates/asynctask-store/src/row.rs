//! A task as a row of the `tasks` table, and back: what is written, what is
//! read, and the shapes a row must not take.

use std::collections::BTreeMap;
use std::path::Path;

use asynctask_manager::StoredTask;
use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus, OutputObject, TaskUsage, TerminateReason};

use crate::error::StoreError;

/// One row of `tasks`, as read.
pub(crate) struct Row {
    id: String,
    subagent_name: String,
    goal_prompt: String,
    origin: Option<String>,
    pid: i64,
    status: String,
    launched_at: i64,
    completed_at: Option<i64>,
    finish_order: i64,
    notified_at: Option<i64>,
    terminate_reason: Option<String>,
    emitted_vars: Option<String>,
    final_message: Option<String>,
    error: Option<String>,
    started_at: Option<i64>,
    launch: Option<String>,
    usage: Option<String>,
}

impl Row {
    pub(crate) fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
        Ok(Row {
            id: row.get(0)?,
            subagent_name: row.get(1)?,
            goal_prompt: row.get(2)?,
            origin: row.get(3)?,
            pid: row.get(4)?,
            status: row.get(5)?,
            launched_at: row.get(6)?,
            completed_at: row.get(7)?,
            finish_order: row.get(8)?,
            notified_at: row.get(9)?,
            terminate_reason: row.get(10)?,
            emitted_vars: row.get(11)?,
            final_message: row.get(12)?,
            error: row.get(13)?,
            started_at: row.get(14)?,
            launch: row.get(15)?,
            usage: row.get(16)?,
        })
    }

    pub(crate) fn into_task(self, path: &Path) -> Result<StoredTask, StoreError> {
        let invalid = |id: &str, problem: String, source: Option<serde_json::Error>| {
            StoreError::InvalidTask {
                path: path.to_path_buf(),
                id: id.to_owned(),
                problem,
                source,
            }
        };
        let status = match self.status.as_str() {
            "queued" => AsyncTaskStatus::Queued,
            "running" => AsyncTaskStatus::Running,
            "completed" => AsyncTaskStatus::Completed,
            "failed" => AsyncTaskStatus::Failed,
            "cancelled" => AsyncTaskStatus::Cancelled,
            other => return Err(invalid(&self.id, format!("unknown status '{other}'"), None)),
        };
        let output = match (status, self.terminate_reason, self.emitted_vars) {
            (AsyncTaskStatus::Completed, Some(reason), Some(vars)) => {
                let terminate_reason: TerminateReason = serde_json::from_value(
                    serde_json::Value::String(reason.clone()),
                )
                .map_err(|source| {
                    invalid(
                        &self.id,
                        format!("unknown terminate reason '{reason}'"),
                        Some(source),
                    )
                })?;
                let emitted_vars: BTreeMap<String, String> =
                    serde_json::from_str(&vars).map_err(|source| {
                        invalid(
                            &self.id,
                            "its emitted variables are not a JSON object of strings".to_owned(),
                            Some(source),
                        )
                    })?;
                Some(OutputObject {
                    terminate_reason,
                    emitted_vars,
                    final_message: self.final_message,
                })
            }
            (AsyncTaskStatus::Completed, _, _) => {
                return Err(invalid(
                    &self.id,
                    "completed without an output".to_owned(),
                    None,
                ));
            }
            _ => None,
        };
        let usage = match self.usage {
            None => None,
            Some(usage) => Some(serde_json::from_str(&usage).map_err(|source| {
                invalid(
                    &self.id,
                    "its usage is not a usage object".to_owned(),
                    Some(source),
                )
            })?),
        };
        let info = AsyncTaskInfo {
            subagent_name: self.subagent_name,
            goal_prompt: self.goal_prompt,
            status,
            launched_at: from_sql(self.launched_at),
            started_at: self.started_at.map(from_sql),
            completed_at: self.completed_at.map(from_sql),
            notified_at: self.notified_at.map(from_sql),
            output,
            error: self.error,
            usage,
            id: self.id,
        };
        if let Some(problem) = shape_problem(&info) {
            return Err(invalid(&info.id, problem.to_owned(), None));
        }
        Ok(StoredTask {
            info,
            origin: self.origin,
            finish_order: from_sql(self.finish_order),
            process: Some(format!("pid {}", self.pid)),
            launch: self.launch,
        })
    }
}

/// What the schema's `CHECK`s promise, checked again on the way out (a store
/// edited by hand, say).
pub(crate) fn shape_problem(info: &AsyncTaskInfo) -> Option<&'static str> {
    let ended = info.status.is_terminal();
    if info.id.is_empty() {
        Some("an empty id")
    } else if ended == info.completed_at.is_none() {
        Some("a completion time that does not fit its status")
    } else if !ended && info.notified_at.is_some() {
        Some("not ended, yet notified")
    } else if info.status == AsyncTaskStatus::Queued && info.started_at.is_some() {
        Some("queued, yet started")
    } else if info.status == AsyncTaskStatus::Running && info.started_at.is_none() {
        Some("running, yet never started")
    } else if (info.status == AsyncTaskStatus::Failed) != info.error.is_some() {
        Some("an error that does not fit its status")
    } else {
        None
    }
}

/// A u64 (times, orders) as SQLite's signed 64-bit integer: the same bits, so
/// every value round-trips.
pub(crate) fn to_sql(value: u64) -> i64 {
    i64::from_ne_bytes(value.to_ne_bytes())
}

pub(crate) fn from_sql(value: i64) -> u64 {
    u64::from_ne_bytes(value.to_ne_bytes())
}

pub(crate) fn encode_vars(vars: &BTreeMap<String, String>) -> String {
    // A map of strings always serializes; the fallback is unreachable but keeps
    // this free of panics.
    serde_json::to_string(vars).unwrap_or_else(|_| "{}".to_owned())
}

pub(crate) fn encode_usage(usage: &TaskUsage) -> String {
    // Numbers and a string always serialize; the fallback is unreachable but
    // keeps this free of panics.
    serde_json::to_string(usage).unwrap_or_else(|_| "{}".to_owned())
}
