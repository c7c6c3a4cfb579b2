//! The asynctask runtime: reminders, auto-trigger and todo continuation (work in progress).
//!
//! This layer sits on `asynctask-tools`. It will hold the reminder service, the
//! auto-trigger that wakes an idle agent when a background task finishes,
//! next-turn reminders, the todo continuation service and the `AsyncTaskRuntime`
//! facade a host builds once. Until then it only fixes the crate's place in the
//! layers.
