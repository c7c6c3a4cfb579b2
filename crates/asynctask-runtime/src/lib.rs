//! The asynctask runtime: delivering background results to the model.
//!
//! The delivery layer, on `asynctask-tools` (beside `asynctask-process`, which it
//! never depends on; the MCP server builds on it): the model hears how each
//! background task ended, exactly once, and nothing is lost.
//!
//! - [`AsyncTaskReminderService`] renders the status summary and the
//!   `System Note` reminders the model reads, returning the ids each carries;
//! - the auto-trigger (inside [`AsyncTaskRuntime`]) wakes an idle agent through
//!   the host's [`AgentHost`] when a task completes or fails (a cancel alone
//!   wakes nobody), and retries a failed delivery with backoff;
//! - [`AsyncTaskRuntime::next_turn_reminder`] / [`AsyncTaskRuntime::ack_delivered`]
//!   serve hosts that inject reminders into their own requests;
//! - the [`ClaimLedger`] is the one place a finished task's result is claimed by
//!   exactly one delivery — the auto-trigger, a next-turn reminder, or a request
//!   a serving layer names — and then acknowledged or released, so no result is
//!   delivered twice or lost;
//! - [`TodoContinuationService`] nudges the model to keep working on active todos;
//! - [`AsyncTaskRuntime`] wires it all: registry, tools, delivery, settings and
//!   shutdown; with [`AsyncTaskRuntimeBuilder::journal`] the registry is kept in
//!   a store and restored from it, so results survive a crashed host.
//!
//! It does not talk to a model, run subagents (the host's runner does), or hold
//! a database (a [`Journal`](asynctask_manager::Journal) is handed to it).
//!
//! # Example
//!
//! ```
//! use asynctask_runtime::AsyncTaskRuntime;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let runtime = AsyncTaskRuntime::builder().build(); // no host, no runner
//! assert_eq!(runtime.tools().len(), 2, "check_async_tasks and todo_pause");
//! runtime.set_setting("task-max-async", serde_json::json!(3)).unwrap();
//! assert_eq!(runtime.manager().max_async_tasks().get(), 3);
//! assert_eq!(runtime.status_summary(), "");
//! runtime.shutdown().await;
//! # });
//! ```

mod continuation;
mod delivery;
mod host;
mod ledger;
mod reminder;
mod runtime;

pub use crate::continuation::{
    CONTINUATION_TIMEOUT_MS, ContinuationConditions, ContinuationContext, ContinuationEvaluation,
    ContinuationPromptConfig, ContinuationState, MAX_CONTINUATION_ATTEMPTS,
    MAX_TASK_DESCRIPTION_LENGTH, MIN_CONTINUATION_INTERVAL_MS, TodoContinuationService,
};
pub use crate::host::{AgentHost, TriggerError};
pub use crate::ledger::{Claim, ClaimLedger, ClaimOwner};
pub use crate::reminder::{AsyncTaskReminderService, Reminder};
pub use crate::runtime::{
    AsyncTaskRuntime, AsyncTaskRuntimeBuilder, BuildError, SHUTDOWN_TIMEOUT, SettingError,
};
