//! The fleet's shared task registry, on PostgreSQL: tasks submitted by fronts
//! on any machine wait in one database, and workers on any machine claim and
//! run them, under the same guarantees one machine gives.
//!
//! A [`Fleet`] is one connection. Fronts [`submit`](Fleet::submit) tasks
//! (each in a workspace, the project) and take results with
//! [`claim_results`](Fleet::claim_results): a transaction holds them until
//! the [`ResultClaim`] is acknowledged, so each is delivered exactly once.
//! Workers [`register_worker`](Fleet::register_worker) with a name, a
//! capacity and the subagents they serve, and [`claim`](Fleet::claim) queued
//! tasks (`FOR UPDATE SKIP LOCKED`: concurrent claimers never take the same
//! task, nor wait on each other) under a lease renewed by
//! [`heartbeat`](Fleet::heartbeat). Each claim carries a fencing token that
//! only grows; [`complete`](Fleet::complete), [`fail`](Fleet::fail) and
//! [`cancelled`](Fleet::cancelled) are refused ([`FleetError::Fenced`])
//! unless the token is current and the lease holds.
//! [`reap_expired`](Fleet::reap_expired) declares lost the workers whose
//! lease expired and fails their running tasks, `interrupted: worker <name>
//! lost`, exactly once. A workspace's `task-max-async` holds across every
//! worker ([`set_max_async`](Fleet::set_max_async)).
//!
//! The schema is versioned ([`SCHEMA_VERSION`]), migrated at connect, and a
//! newer one is refused untouched. Time is the database's clock unless
//! [`FleetOptions::clock`] gives one.
//!
//! A [`Worker`] is the loop a machine serves the fleet with: it registers,
//! renews its lease, claims what its capacity allows, runs each task through
//! a `SubagentRunner` (the process runner, in `asynctask worker`), writes
//! each end with its fencing token, reaps lost workers, and ends its
//! subagents when its lease cannot be renewed. [`FleetListener`] wakes it
//! (`LISTEN/NOTIFY`: a submission, a task's end); a slow timer is the
//! fallback.
//!
//! Not here yet: TLS (connections are plain: a Unix socket or a trusted
//! network), `PGPASSWORD`/`.pgpass` (a password goes in the URL), cancel,
//! steering, questions, progress, whole outputs, the queue's bound.
//!
//! # Example
//!
//! ```no_run
//! use asynctask_fleet::{Fleet, FleetOptions, NewTask, WorkerSpec};
//! use asynctask_model::{OutputObject, TerminateReason};
//! # async fn demo() -> Result<(), asynctask_fleet::FleetError> {
//! let url = "postgresql://asynctask@db.internal/asynctask";
//! let mut front = Fleet::connect_url(url, FleetOptions::new()).await?;
//! front.submit(NewTask::new("7f3a09c1", "my-project", "tester", "run the suite")).await?;
//!
//! let mut worker = Fleet::connect_url(url, FleetOptions::new()).await?;
//! let lease = worker.register_worker(&WorkerSpec::new("build-1", ["tester"]).with_capacity(4)).await?;
//! for task in worker.claim(&lease, 4).await? {
//!     worker.complete(&task, &OutputObject::new(TerminateReason::Goal)).await?;
//! }
//!
//! let claim = front.claim_results("my-project", 10).await?;
//! assert_eq!(claim.tasks().len(), 1);
//! claim.acknowledge().await?; // never offered again
//! # Ok(()) }
//! ```

mod error;
mod fleet;
mod front;
mod listen;
mod remote;
mod schema;
mod status;
mod types;
mod worker;

pub use crate::error::FleetError;
pub use crate::fleet::{Fleet, FleetOptions, ResultClaim};
pub use crate::front::{
    CancelRequest, DEFAULT_FRONT_LEASE, FrontLease, MAX_PROGRESS_CHARS, MAX_STORED_OUTPUT_BYTES,
    bound_output,
};
pub use crate::listen::{
    CANCEL_CHANNEL, ENDED_CHANNEL, FleetListener, PROGRESS_CHANNEL, QUEUED_CHANNEL, Wakeup,
};
pub use crate::remote::{DELIVERED_ELSEWHERE, FleetFront, FleetRunner, FrontJournal};
pub use crate::schema::SCHEMA_VERSION;
pub use crate::status::{FleetStatus, RunningTask, WorkerStatus, WorkspaceStatus};
pub use crate::types::{
    ClaimedTask, DEFAULT_LEASE, FleetTask, Interrupted, NewTask, WorkerLease, WorkerSpec,
    lost_worker_error,
};
pub use crate::worker::{PROGRESS_INTERVAL, Worker};
pub use tokio_postgres::Config;
