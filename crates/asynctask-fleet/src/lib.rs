//! The fleet's task registry, on PostgreSQL: tasks from fronts on any machine
//! wait in one database and workers on any machine run them, with the
//! guarantees one machine gives. A [`Fleet`] is one connection. Fronts
//! [`submit`](Fleet::submit) tasks to a workspace and take results with
//! [`claim_results`](Fleet::claim_results), held until the [`ResultClaim`] is
//! acknowledged. Workers [`register_worker`](Fleet::register_worker) and [`claim`](Fleet::claim)
//! queued tasks of the workspaces they name (`FOR UPDATE SKIP LOCKED`) under a lease renewed by
//! [`heartbeat`](Fleet::heartbeat); each claim's fencing token only grows, and
//! a write with a stale one is refused ([`FleetError::Fenced`]).
//! [`reap_expired`](Fleet::reap_expired) fails a lost worker's tasks once. Only [`Fleet::migrate`]
//! makes or upgrades the schema ([`SCHEMA_VERSION`]); connections refuse any other version.
//!
//! A [`Worker`] is a machine's loop: it claims what its capacity allows, runs
//! each task through a `SubagentRunner`, writes each end with its token, and
//! ends its subagents when its lease lapses; [`FleetListener`] wakes it. A
//! [`DatabaseConfig`] says how to connect: the password from the URL, else
//! `PGPASSWORD`, else the password file; TLS through rustls, up to `verify-full`.
//! [`FleetFront`] serves `asynctask mcp --database`; [`prune`](Fleet::prune)
//! deletes delivered tasks past a retention period (workers run it).
//!
//! # Example
//!
//! ```no_run
//! use asynctask_fleet::{Fleet, FleetOptions, NewTask, WorkerSpec};
//! use asynctask_model::{OutputObject, TerminateReason};
//! # async fn demo() -> Result<(), asynctask_fleet::FleetError> {
//! let url = "postgresql://asynctask@db.internal/asynctask"; // after `asynctask fleet migrate`
//! let mut front = Fleet::connect_url(url, FleetOptions::new()).await?;
//! front.submit(NewTask::new("7f3a09c1", "my-project", "tester", "run the suite")).await?;
//! let mut worker = Fleet::connect_url(url, FleetOptions::new()).await?;
//! let lease = worker.register_worker(&WorkerSpec::new("build-1", ["tester"]).with_workspaces(["my-project"])).await?;
//! for task in worker.claim(&lease, 4).await? {
//!     worker.complete(&task, &OutputObject::new(TerminateReason::Goal)).await?;
//! }
//! let claim = front.claim_results("my-project", 10).await?;
//! assert_eq!(claim.tasks().len(), 1);
//! claim.acknowledge().await?; // never offered again
//! # Ok(()) }
//! ```

mod auth;
mod backoff;
mod claims;
mod connection;
mod dial;
mod error;
mod fleet;
mod front;
mod listen;
mod messages;
mod orphans;
mod questions;
mod remote;
mod retention;
mod schema;
mod sql_error;
mod status;
mod storable;
mod types;
mod worker;

pub use crate::connection::{DatabaseConfig, IDLE_IN_TRANSACTION_TIMEOUT, TlsMode};
pub use crate::error::FleetError;
pub use crate::fleet::{Fleet, FleetOptions, ResultClaim};
pub use crate::front::{
    CancelRequest, DEFAULT_FRONT_LEASE, FrontLease, MAX_PROGRESS_CHARS, MAX_STORED_OUTPUT_BYTES,
    ResultFor, bound_output,
};
pub use crate::listen::{
    CANCEL_CHANNEL, ENDED_CHANNEL, FleetListener, MESSAGE_CHANNEL, PROGRESS_CHANNEL,
    QUESTION_CHANNEL, QUEUED_CHANNEL, Wakeup,
};
pub use crate::messages::{MAX_UNDELIVERED_MESSAGES, MessageSent, PendingMessage};
pub use crate::questions::AnswerToDeliver;
pub use crate::remote::{DELIVERED_ELSEWHERE, FleetFront, FleetRunner, FrontJournal};
pub use crate::retention::{DEFAULT_RETENTION, PRUNE_BATCH, PRUNE_INTERVAL, PRUNE_LOCK, Pruned};
pub use crate::schema::SCHEMA_VERSION;
pub use crate::status::{
    FleetStatus, RunningTask, STATUS_JSON_VERSION, WorkerStatus, WorkspaceStatus,
};
pub use crate::storable::{MAX_NAME_BYTES, check_name, storable_text};
pub use crate::types::{
    ClaimedTask, DEFAULT_LEASE, FleetTask, Interrupted, NewTask, WorkerLease, WorkerSpec,
    lost_worker_error, untracked_task_error,
};
pub use crate::worker::{PROGRESS_INTERVAL, Worker};
pub use tokio_postgres::Config;
