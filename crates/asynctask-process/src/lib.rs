//! `ProcessRunner`: asynctask subagents that are configured commands, run as
//! child processes.
//!
//! Each subagent is a command line in a TOML file ([`ProcessRunnerConfig`] of
//! [`SubagentCommand`]s, checked as it is parsed: [`CommandLine`],
//! [`SubagentName`], [`EnvName`], [`EnvValue`], [`StdinMode`]), and
//! [`ProcessRunner`] runs it whenever the model asks for that name: the model
//! chooses only *which* command runs and its goal, never a command line. The
//! crate sits beside `asynctask-runtime`, on `asynctask-tools`, whose
//! [`SubagentRunner`] contract it implements; a host that spawns no processes
//! never compiles it.
//!
//! A run streams the child's whole stdout into a file (the final message is a
//! bounded head and tail naming it), and no process of a subagent outlives its
//! task: its process group is ended, and with the [`reaper`] (also the
//! `asynctask-reaper` binary) so are escaped descendants, even of a killed
//! host. It does not enforce the task's timeout (the `task` tool cancels the
//! run), sandbox the child, or run anywhere but on Unix (elsewhere: the config).
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
mod asks;
#[cfg(unix)]
mod capped;
#[cfg(unix)]
mod capture;
mod config;
#[cfg(unix)]
mod env;
#[cfg(unix)]
mod group;
#[cfg(unix)]
mod output;
#[cfg(unix)]
pub mod reaper;
#[cfg(unix)]
mod runner;
#[cfg(unix)]
mod stdin;
#[cfg(unix)]
mod streams;
#[cfg(unix)]
mod sys;
mod toplevel;
#[cfg(unix)]
mod usage;
mod values;
#[cfg(unix)]
mod vars;
#[cfg(unix)]
mod warm;

pub use config::{
    ConfigDir, ConfigError, ConfigPosition, ProcessRunnerConfig, StdinMode, SubagentCommand,
};
#[cfg(unix)]
pub use runner::ProcessRunner;
pub use toplevel::ConfigExtension;
pub use values::{CommandLine, EnvName, EnvValue, InvalidValue, SubagentName};
