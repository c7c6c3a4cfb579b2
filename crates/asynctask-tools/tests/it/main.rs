//! Integration tests of `asynctask-tools` through its public API, as a host uses it.

mod check_async_tasks;
mod params;
mod schemas;
mod slash;
mod task;
