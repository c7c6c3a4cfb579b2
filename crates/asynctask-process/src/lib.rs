//! `ProcessRunner`: asynctask subagents that are configured commands, run as
//! child processes.
//!
//! A host that has no subagent of its own in Rust can still offer background
//! subagents: each one is a command line in a TOML file (`[subagents.<name>]`,
//! see [`ProcessRunnerConfig`]), and [`ProcessRunner`] runs it as a child
//! process whenever the model asks for that name. The model chooses only
//! *which* configured command runs and what its goal is; it never writes any
//! part of a command line.
//!
//! The crate sits beside `asynctask-runtime`, on top of `asynctask-model` and
//! `asynctask-tools`: it implements the tools' [`SubagentRunner`] contract, so a
//! host hands a `ProcessRunner` to the `task` tool (or to the runtime's
//! builder) like any runner of its own. A host that does not spawn processes
//! never compiles it.
//!
//! The main types: [`ProcessRunnerConfig`] (loaded with
//! [`ProcessRunnerConfig::load`]) of [`SubagentCommand`]s, whose values are
//! checked as they are parsed ([`CommandLine`], [`SubagentName`], [`EnvName`],
//! [`EnvValue`]); [`ProcessRunner`], the runner; [`ConfigError`] and
//! [`InvalidValue`], what can be wrong with a config; and the
//! [`reaper`], a tiny supervisor process (also the `asynctask-reaper`
//! binary) that makes sure no process of a subagent outlives its task, even
//! when the host is killed.
//!
//! Output never costs memory: a run streams the child's stdout into a file
//! while it runs, and its final message holds only a bounded head and tail of
//! it around a line naming that file.
//!
//! What it does not do: enforce the task's timeout (the `task` tool does, by
//! cancelling the run), sandbox the child, or run anywhere but on Unix (on
//! other platforms only the config types are compiled).
//!
//! ```
//! use std::path::Path;
//! use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
//! use asynctask_tools::{SubagentRequest, SubagentRunner};
//! use tokio_util::sync::CancellationToken;
//!
//! let config = ProcessRunnerConfig::from_toml_str(
//!     "[subagents.greeter]\ncommand = [\"sh\", \"-c\", \"echo hello, $(cat)\"]\n",
//!     Path::new("."),
//! )?;
//! let runner = ProcessRunner::new(config);
//! let request = SubagentRequest::new("task-1", "greeter", "world");
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! let output = runtime.block_on(runner.run(request, CancellationToken::new()))?;
//! assert_eq!(output.final_message.as_deref(), Some("hello, world"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`SubagentRunner`]: asynctask_tools::SubagentRunner

#[cfg(unix)]
mod capture;
mod config;
#[cfg(unix)]
mod group;
#[cfg(unix)]
mod output;
#[cfg(unix)]
pub mod reaper;
#[cfg(unix)]
mod runner;
#[cfg(unix)]
mod sys;

pub use config::{
    CommandLine, ConfigError, EnvName, EnvValue, InvalidValue, ProcessRunnerConfig, StdinMode,
    SubagentCommand, SubagentName,
};
#[cfg(unix)]
pub use runner::ProcessRunner;
