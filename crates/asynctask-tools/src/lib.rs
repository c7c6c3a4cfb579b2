//! The model-facing tools of asynctask (work in progress).
//!
//! This layer sits on `asynctask-manager`. It will hold the `task` tool with its
//! `async` flag, `check_async_tasks`, `todo_pause`, the `/tasks` slash commands and
//! the JSON schemas of every tool, adapted for each LLM provider. Until then it
//! re-exports nothing and only fixes the crate's place in the layers.
