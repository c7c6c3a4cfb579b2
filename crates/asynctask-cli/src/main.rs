//! The `asynctask` binary: background subagents from the command line.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the command line owns stdout and stderr: its output and its messages to the user"
)]

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use asynctask_cli::demo::{DemoOptions, bundled_subagents, pick_subagents, run_demo};
use asynctask_cli::serve::{
    REAPER_ARG, ServeOptions, load_runner, mcp, mcp_durable, run_output_dir, supervisor_run,
    supervisor_status, supervisor_stop, wants_durable,
};
use asynctask_cli::{CliError, DEMO_CONFIG, all_tools, error_chain, run_once, schemas};
use asynctask_model::{MaxAsyncTasks, MaxQueuedTasks};
use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
use asynctask_supervisor::StateDir;
use asynctask_tools::Provider;
use clap::builder::PossibleValue;
use clap::{Parser, Subcommand, ValueEnum};

/// Background subagent tasks for AI agent hosts.
#[derive(Debug, Parser)]
#[command(name = "asynctask", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scripted agent session with real background subagents (no API key).
    Demo {
        /// Use these subagents instead of the bundled ones (TOML, see docs/guide.md).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Print the tool definitions for an LLM provider as JSON.
    Schemas {
        /// The provider format.
        #[arg(long)]
        provider: ProviderArg,
        // The help names every tool, read from the tool list itself.
        #[arg(long, help = tool_help())]
        tool: Option<String>,
    },
    /// Run one subagent synchronously through the task tool and print its result.
    Run {
        /// The subagents config (TOML).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Where the subagent's whole output is kept, named in the result when
        /// it was cut (default: `.asynctask/outputs/` beside the config; a
        /// directory given here is made private to its owner if it does not
        /// exist). A file the result names is kept after the command exits;
        /// one it does not name is removed.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
        /// The subagent to run.
        subagent: String,
        /// Its goal.
        goal: String,
    },
    /// Serve the tools to an MCP client over stdio (task, check_async_tasks,
    /// message_async_task, wait_async_tasks, end_async_task).
    Mcp {
        #[command(flatten)]
        serve: ServeArgs,
        /// Keep tasks and results beyond this session: relay to the workspace's
        /// supervisor (started if none runs), which owns the tasks and their
        /// subagents. Also `durable = true` at the top of the config.
        #[arg(long)]
        durable: bool,
    },
    /// The workspace's supervisor, which owns durable tasks (`mcp --durable`
    /// starts it).
    Supervisor {
        #[command(subcommand)]
        command: SupervisorCommand,
    },
}

#[derive(Debug, Subcommand)]
enum SupervisorCommand {
    /// Run the supervisor in the foreground (`mcp --durable` starts it in the
    /// background when none runs).
    Run {
        #[command(flatten)]
        serve: ServeArgs,
    },
    /// Print the supervisor's pid (null when none runs) and its tasks, as JSON.
    Status {
        #[command(flatten)]
        state: StateArgs,
    },
    /// Cancel every task, end their processes, and stop the supervisor.
    Stop {
        #[command(flatten)]
        state: StateArgs,
    },
}

/// Where the workspace's state is.
#[derive(Debug, clap::Args)]
struct StateArgs {
    /// The subagents config (TOML); the state lives beside it by default.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Where the supervisor keeps its state (default: `.asynctask/` in the
    /// config's directory).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

/// How tools are served.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    #[command(flatten)]
    state: StateArgs,
    /// Turn a synchronous task call still running after this many seconds into
    /// a background task.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 50,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    sync_detach_after: u64,
    /// The most background tasks running at once: -1 (unlimited) or 1..=100.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    max_async_tasks: Option<MaxAsyncTasks>,
    /// How many background launches past the running limit wait in a queue,
    /// 0..=1000 (default 20; 0 refuses them).
    #[arg(long, value_name = "N")]
    max_queued_tasks: Option<MaxQueuedTasks>,
    /// How many subagents one session may launch in all: -1 (no cap) or
    /// 1..=1000000 (default 200).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = launch_cap)]
    max_launches_per_session: Option<LaunchCap>,
    /// How deep subagents may nest, 1..=16 (default 2): a subagent whose
    /// client starts `asynctask mcp` launches one level deeper
    /// ($ASYNCTASK_DEPTH).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16))]
    max_depth: Option<u32>,
    /// A durable supervisor exits after this many seconds (at least 1) with no
    /// session connected and no task running.
    #[arg(long, value_name = "SECS", default_value_t = 600, value_parser = idle_exit_secs)]
    idle_exit: u64,
    /// How much of a subagent's output a result holds, in characters as the
    /// model reads them (JSON-escaped); overrides `inline_budget` in the
    /// config (default 10000).
    #[arg(
        long,
        value_name = "CHARS",
        value_parser = clap::value_parser!(u64).range(1_000..=1_000_000)
    )]
    inline_budget: Option<u64>,
}

impl ServeArgs {
    fn options(&self) -> ServeOptions {
        let mut options = ServeOptions::new(&self.state.config);
        options.state_dir.clone_from(&self.state.state_dir);
        options.sync_detach_after = Duration::from_secs(self.sync_detach_after);
        options.idle_exit = Duration::from_secs(self.idle_exit);
        options.inline_budget = self
            .inline_budget
            .and_then(|chars| usize::try_from(chars).ok());
        if let Some(max) = self.max_async_tasks {
            options.max_async_tasks = max;
        }
        if let Some(max) = self.max_queued_tasks {
            options.max_queued_tasks = max;
        }
        if let Some(LaunchCap(max)) = self.max_launches_per_session {
            options.max_launches_per_session = max;
        }
        if let Some(max) = self.max_depth {
            options.max_depth = max;
        }
        options
    }
}

impl StateArgs {
    fn state(&self) -> StateDir {
        let mut options = ServeOptions::new(&self.config);
        options.state_dir.clone_from(&self.state_dir);
        options.state()
    }
}

/// Why an `--idle-exit` value is refused.
#[derive(Debug, thiserror::Error)]
enum IdleExitError {
    #[error("the supervisor must wait at least 1 second before it exits")]
    Zero,
    #[error("not a whole number of seconds")]
    NotANumber(#[source] std::num::ParseIntError),
}

/// A `--max-launches-per-session` value: `None` for no cap.
#[derive(Debug, Clone, Copy)]
struct LaunchCap(Option<u32>);

/// Why a `--max-launches-per-session` value is refused.
#[derive(Debug, thiserror::Error)]
#[error("must be -1 (no cap) or an integer between 1 and 1000000")]
struct InvalidLaunchCap;

/// `--max-launches-per-session`: -1, or 1..=1,000,000.
fn launch_cap(value: &str) -> Result<LaunchCap, InvalidLaunchCap> {
    match value.trim().parse::<i64>() {
        Ok(-1) => Ok(LaunchCap(None)),
        Ok(max @ 1..=1_000_000) => u32::try_from(max)
            .map(|max| LaunchCap(Some(max)))
            .map_err(|_| InvalidLaunchCap),
        _ => Err(InvalidLaunchCap),
    }
}

/// `--idle-exit`: a whole number of seconds, at least 1.
fn idle_exit_secs(value: &str) -> Result<u64, IdleExitError> {
    match value.parse::<u64>() {
        Ok(0) => Err(IdleExitError::Zero),
        Ok(secs) => Ok(secs),
        Err(err) => Err(IdleExitError::NotANumber(err)),
    }
}

/// A [`Provider`] as a command-line value: its name, with clap's completion
/// and "possible values" help.
#[derive(Debug, Clone, Copy)]
struct ProviderArg(Provider);

impl ValueEnum for ProviderArg {
    fn value_variants<'a>() -> &'a [Self] {
        // Built from `Provider::ALL`, element by element, at compile time: a
        // provider added there is a value here.
        const ALL: [ProviderArg; Provider::ALL.len()] = {
            let mut all = [ProviderArg(Provider::ALL[0]); Provider::ALL.len()];
            let mut i = 1;
            while i < all.len() {
                all[i] = ProviderArg(Provider::ALL[i]);
                i += 1;
            }
            all
        };
        &ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.name()))
    }
}

/// The `--tool` help: every tool's name, in the order hosts list them.
fn tool_help() -> String {
    let names: Vec<String> = all_tools()
        .iter()
        .map(|tool| tool.name().to_owned())
        .collect();
    format!("Print only this tool ({})", names.join(", "))
}

fn main() -> ExitCode {
    // The reaper must run before any thread is started (it takes its signals
    // with `sigwait`), so it is dispatched before anything else.
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(std::ffi::OsStr::new(REAPER_ARG)) {
        return asynctask_process::reaper::main(args);
    }
    let cli = Cli::parse();
    install_logging();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::AsyncRuntime)
        .and_then(|runtime| {
            let result = runtime.block_on(run(cli.command));
            // Everything we started has ended by now. What may be left is a
            // blocking stdin read (the MCP server when stdin is a socket, a file or
            // a terminal, which cannot be read without blocking a thread): it must
            // not hold the exit, so nothing is waited for.
            runtime.shutdown_background();
            result
        });
    match result {
        Ok(code) => code,
        Err(error) => {
            // The one place an error becomes text: with every cause, on one line.
            eprintln!("asynctask: {}", error_chain(&error));
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr (stdout is the protocol channel of `mcp`, and the
/// output of the other commands): what the libraries say at `info` and above,
/// or what `RUST_LOG` asks for.
fn install_logging() {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}

async fn run(command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::Demo { config } => {
            let (runner, subagents) = match &config {
                Some(path) => {
                    let runner = load_runner(path)?;
                    let subagents = pick_subagents(&runner.subagent_names())?;
                    (runner, subagents)
                }
                None => {
                    let config = ProcessRunnerConfig::from_toml_str(DEMO_CONFIG, Path::new("."))?;
                    (ProcessRunner::new(config), bundled_subagents())
                }
            };
            let mut options = DemoOptions::new(subagents);
            options.live_status = std::io::stdout().is_terminal();
            let mut stdout = std::io::stdout();
            run_demo(Arc::new(runner), options, &mut stdout).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Schemas { provider, tool } => {
            let value = schemas(provider.0, tool.as_deref())?;
            println!("{}", pretty(&value));
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            config,
            output_dir,
            subagent,
            goal,
        } => {
            let runner = load_runner(&config)?;
            let names = runner.subagent_names();
            if !names.contains(&subagent) {
                return Err(CliError::UnknownSubagent {
                    subagent,
                    config,
                    configured: names,
                });
            }
            // The result may name the output file: it must outlive this command.
            let runner =
                Arc::new(runner.with_output_dir(run_output_dir(&config, output_dir.as_deref())?));
            let result = run_once(Arc::clone(&runner) as _, &subagent, &goal).await;
            // A result that names no file (nothing was cut) leaves none behind.
            if !result.llm_content.contains("[whole output: ")
                && let Some(file) = result.metadata["agentId"]
                    .as_str()
                    .and_then(|id| runner.output_path(id))
                && let Err(err) = std::fs::remove_file(&file)
                && err.kind() != std::io::ErrorKind::NotFound
            {
                eprintln!("asynctask: cannot remove {}: {err}", file.display());
            }
            println!("{}", result.llm_content);
            match result.error {
                None => Ok(ExitCode::SUCCESS),
                Some(error) => {
                    eprintln!("asynctask: {}", error.message);
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        // stdout is the protocol channel from here on: nothing else is printed.
        Command::Mcp { serve, durable } => {
            let options = serve.options();
            if wants_durable(&options, durable)? {
                mcp_durable(&options, start_supervisor).await?;
            } else {
                mcp(&options).await?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Supervisor { command } => match command {
            SupervisorCommand::Run { serve } => {
                supervisor_run(&serve.options()).await?;
                Ok(ExitCode::SUCCESS)
            }
            SupervisorCommand::Status { state } => {
                let status = supervisor_status(&state.state()).await?;
                println!("{}", pretty(&status));
                Ok(ExitCode::SUCCESS)
            }
            SupervisorCommand::Stop { state } => {
                match supervisor_stop(&state.state()).await? {
                    Some(pid) => eprintln!("asynctask: supervisor {pid} stopped"),
                    None => eprintln!("asynctask: no supervisor runs"),
                }
                Ok(ExitCode::SUCCESS)
            }
        },
    }
}

/// Starts the workspace's supervisor in the background: this same binary,
/// `supervisor run`, in its own process group (a client that signals its
/// server's group does not reach it), its output in the state directory's log.
fn start_supervisor(options: &ServeOptions) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let state = options.state();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state.log_file())?;
    let config = std::path::absolute(&options.config)?;
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command
        .args(["supervisor", "run", "--config"])
        .arg(config)
        .arg("--state-dir")
        .arg(std::path::absolute(state.path())?)
        .arg("--sync-detach-after")
        .arg(options.sync_detach_after.as_secs().to_string())
        .arg("--idle-exit")
        .arg(options.idle_exit.as_secs().to_string())
        .arg("--max-async-tasks")
        .arg(options.max_async_tasks.get().to_string())
        .arg("--max-queued-tasks")
        .arg(options.max_queued_tasks.get().to_string())
        .arg("--max-launches-per-session")
        .arg(
            options
                .max_launches_per_session
                .map_or(-1, i64::from)
                .to_string(),
        )
        .arg("--max-depth")
        .arg(options.max_depth.to_string());
    if let Some(chars) = options.inline_budget {
        command.arg("--inline-budget").arg(chars.to_string());
    }
    command
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    command.spawn()
}

fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|err| format!("{{\"error\": \"{err}\"}}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn every_provider_is_a_value() {
        let values: Vec<&str> = ProviderArg::value_variants()
            .iter()
            .map(|value| value.0.name())
            .collect();
        let providers: Vec<&str> = Provider::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(values, providers);
    }

    #[test]
    fn the_tool_help_names_every_tool() {
        assert_eq!(
            tool_help(),
            "Print only this tool (task, check_async_tasks, message_async_task, todo_pause)"
        );
    }
}
