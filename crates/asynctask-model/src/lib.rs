//! The data and the rules of asynctask, with no runtime attached.
//!
//! This is the bottom layer of the asynctask workspace. It holds the plain data
//! types that cross every boundary — [`AsyncTaskInfo`], [`OutputObject`],
//! [`AsyncTaskStatus`], [`TerminateReason`], [`Todo`] — and the pure state machine
//! that governs a task's life: a task is born [`Running`](AsyncTaskStatus::Running)
//! and moves to exactly one terminal state; the first transition wins and every
//! later attempt is refused without changing anything.
//!
//! What a task cost, as its subagent reported it, is a [`TaskUsage`].
//!
//! It also holds the two values every layer above shares: the concurrency limit
//! [`MaxAsyncTasks`] (with its history limit) and the [`Clock`] all time comes from
//! ([`SystemClock`] in production, [`ManualClock`] in tests).
//!
//! What it deliberately does not do: it owns no registry, spawns nothing, and does
//! not depend on tokio. The registry lives in `asynctask-manager`; the tools, the
//! reminders and the runtime sit above that.
//!
//! With the `proptest` feature, every type has an `Arbitrary` impl and the
//! [`arbitrary`] module has strategies, so hosts can property-test their own code
//! with values that obey our invariants.
//!
//! # Example
//!
//! ```
//! use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus, OutputObject, TerminateReason};
//!
//! let mut task = AsyncTaskInfo::new("a1b2c3d4", "researcher", "find the bug", 1_000);
//! assert!(task.complete(OutputObject::new(TerminateReason::Goal), 2_000));
//! // The first transition wins; a later one is refused and changes nothing.
//! assert!(!task.cancel(3_000));
//! assert_eq!(task.status, AsyncTaskStatus::Completed);
//! assert_eq!(task.completed_at, Some(2_000));
//! ```

mod clock;
mod limits;
mod status;
mod task;
mod todo;
mod usage;

#[cfg(feature = "proptest")]
pub mod arbitrary;

pub use crate::clock::{Clock, ManualClock, SystemClock};
pub use crate::limits::{
    InvalidMaxAsyncTasks, InvalidMaxQueuedTasks, MaxAsyncTasks, MaxQueuedTasks,
};
pub use crate::status::{AsyncTaskStatus, TerminateReason};
pub use crate::task::{AsyncTaskInfo, OutputObject};
pub use crate::todo::{Todo, TodoStatus};
pub use crate::usage::TaskUsage;
