//! The asynctask registry (work in progress).
//!
//! This layer sits on `asynctask-model`. It will hold `AsyncTaskManager`: admission
//! under the `task-max-async` limit, the task transitions, queries, pruning and
//! events. Until then it only fixes the crate's place in the layers.
