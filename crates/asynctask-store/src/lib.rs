//! An embedded SQLite store of background tasks, so that results survive a
//! crashed or restarted host.
//!
//! `asynctask-manager` keeps its registry in memory and tells a
//! [`Journal`](asynctask_manager::Journal) of every change before the change is
//! visible. This crate is that journal, on one SQLite file: a host opens a
//! [`Store`], gets back the tasks it held, and hands both to
//! [`AsyncTaskManager::restore`](asynctask_manager::AsyncTaskManager::restore)
//! (or to the runtime builder's `journal`). Tasks that were running when the
//! last process died come back failed, with an error saying they were
//! interrupted (and which process ran them), and are delivered like any other
//! result; a result the model was not told about is still pending; nothing
//! recorded as delivered is delivered again.
//!
//! It sits beside `asynctask-tools`, on the manager and the model alone: the
//! runtime takes any journal and never depends on a database.
//!
//! - [`Store`]: one file, one table of tasks (plus a `meta` table), WAL mode;
//!   every change one transaction, committed before the manager goes on. An
//!   exclusive lock on `<file>.lock` keeps it to one process at a time.
//! - [`Durability`]: `FULL` (the default: a power loss loses nothing) or
//!   `NORMAL` (a crash of the process loses nothing; a power loss may roll back
//!   the latest changes). `docs/benchmarks.md` has the costs.
//! - [`StoreError`]: every way opening, reading or writing can fail, each naming
//!   the path — a store locked by another process (with its pid), a damaged or
//!   foreign file, a schema newer than [`SCHEMA_VERSION`].
//!
//! It does not replicate, share one store between processes, or keep anything
//! but tasks: not a subagent's running state (a restarted host cannot resume a
//! subagent, only report that it was interrupted), nor settings.
//!
//! # Example
//!
//! A host journals to a store, finishes a task, and exits before the model was
//! told; the next process finds the result pending:
//!
//! ```
//! use std::sync::Arc;
//! use asynctask_manager::RegisterTaskInput;
//! use asynctask_model::{OutputObject, TerminateReason};
//! use asynctask_runtime::AsyncTaskRuntime;
//! use asynctask_store::Store;
//!
//! # let tokio = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
//! # let outcome: Result<(), Box<dyn std::error::Error>> = tokio.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("asynctask").join("tasks.db");
//!
//! let (store, restored) = Store::open(&path)?;
//! let runtime = AsyncTaskRuntime::builder().journal(Arc::new(store), restored).build();
//! runtime.manager().register_task(RegisterTaskInput::new("7f3a09c1", "researcher", "map the code"))?;
//! let output = OutputObject::new(TerminateReason::Goal).with_final_message("three modules");
//! runtime.manager().complete_task("7f3a09c1", output);
//! runtime.shutdown().await;
//! drop(runtime); // the host exits before the model was told
//!
//! let (store, restored) = Store::open(&path)?;
//! let runtime = AsyncTaskRuntime::builder().journal(Arc::new(store), restored).build();
//! let reminder = runtime.next_turn_reminder().expect("the result is still pending");
//! assert_eq!(reminder.task_ids, ["7f3a09c1"]);
//! assert!(reminder.text.contains("three modules"));
//! runtime.ack_delivered(&reminder.task_ids); // journaled: never delivered again
//! # Ok(()) });
//! # outcome?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod store;

pub use crate::error::StoreError;
pub use crate::store::{Durability, SCHEMA_VERSION, Store};
