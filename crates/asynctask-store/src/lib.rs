//! An embedded SQLite store of background tasks, so that results survive a
//! crashed or restarted host: the [`Journal`](asynctask_manager::Journal) the
//! manager tells of every change before the change is visible, on one file.
//!
//! A host opens a [`Store`], gets back the tasks it held, and hands both to the
//! runtime builder's `journal`: a task that was running when the last process
//! died comes back failed as interrupted, a result the model was not told about
//! is still pending, and nothing delivered is delivered again. [`Durability`]
//! says what a power loss may cost; every [`StoreError`] names the path. On the
//! manager (the runtime never needs a database), it keeps nothing but tasks (and
//! which ones clients follow as MCP Tasks: [`Store::follow`]), one process at a time.
//!
//! # Example
//!
//! ```
//! # use std::sync::Arc;
//! # use asynctask_manager::RegisterTaskInput;
//! # use asynctask_model::{OutputObject, TerminateReason};
//! use asynctask_runtime::AsyncTaskRuntime;
//! use asynctask_store::Store;
//! # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
//! # let dir = tempfile::tempdir()?;
//! let path = dir.path().join("asynctask").join("tasks.db");
//! let (store, restored) = Store::open(&path)?;
//! let runtime = AsyncTaskRuntime::builder().journal(Arc::new(store), restored).build();
//! runtime.manager().register_task(RegisterTaskInput::new("7f3a09c1", "researcher", "map the code"))?;
//! let output = OutputObject::new(TerminateReason::Goal).with_final_message("three modules");
//! runtime.manager().complete_task("7f3a09c1", output);
//! runtime.shutdown().await;
//! drop(runtime); // the host exits before the model was told
//! let (store, restored) = Store::open(&path)?;
//! let runtime = AsyncTaskRuntime::builder().journal(Arc::new(store), restored).build();
//! let reminder = runtime.next_turn_reminder().expect("the result is still pending");
//! assert_eq!(reminder.task_ids, ["7f3a09c1"]);
//! assert!(reminder.text.contains("three modules"));
//! runtime.ack_delivered(&reminder.task_ids); // journaled: never delivered again
//! # Ok::<(), Box<dyn std::error::Error>>(()) })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod row;
mod store;

pub use crate::error::StoreError;
pub use crate::store::{Durability, SCHEMA_VERSION, Store};
