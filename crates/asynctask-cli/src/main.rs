//! The `asynctask` binary: background subagents from the command line.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the command line owns stdout and stderr: its output and its messages to the user"
)]

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use asynctask_cli::demo::{DemoOptions, bundled_subagents, pick_subagents, run_demo};
use asynctask_cli::doctor;
use asynctask_cli::durable::start_supervisor;
use asynctask_cli::init::{init_command, trust_command, untrust_command};
use asynctask_cli::project::{ConfigEnv, config_path, find_config, project_dir};
use asynctask_cli::run::{ERROR_EXIT, RunExit, human_output, progress_line, run_subagent};
use asynctask_cli::serve::{
    REAPER_ARG, ServeOptions, Workspace, load_runner, mcp, run_output_dir, runner_of, state_dir,
    status_text, supervisor_run, supervisor_status, supervisor_stop,
};
use asynctask_cli::{CliError, DEMO_CONFIG, all_tools, error_chain, schemas};
use asynctask_model::{MaxAsyncTasks, MaxQueuedTasks};
use asynctask_process::{ProcessRunner, ProcessRunnerConfig, StdinMode};
use asynctask_supervisor::StateDir;
use asynctask_tools::{Provider, escape_for_terminal_keeping_lines};
use clap::builder::PossibleValue;
use clap::{ArgAction, CommandFactory, Parser, Subcommand, ValueEnum};
use fleet_command::FleetCommand;

mod fleet_command;

/// What `--help` says of exit statuses and of where things are.
const AFTER_HELP: &str = "\
Exit status: 0 success; 1 what was run failed (`run`: the subagent; `doctor`: a problem \
found); 2 asynctask could not do what was asked (a bad flag, no config, a bad config, an \
unknown subagent); 124 `run --timeout` ran out. A closed stdout (`| head`) ends a command \
quietly, with status 0.

Config: --config FILE, else $ASYNCTASK_CONFIG, else asynctask.toml in the project or one of \
its parents (up to the repository's root, never above your home) once you trusted it \
(`asynctask trust`), else $XDG_CONFIG_HOME/asynctask/asynctask.toml (~/.config/...); \
`asynctask config path` shows which. Logs go to stderr: -v/-vv for more, -q/-qq for less, \
RUST_LOG (e.g. RUST_LOG=asynctask_supervisor=debug) over both.";

/// Background subagent tasks for AI agent hosts.
#[derive(Debug, Parser)]
#[command(name = "asynctask", version, about, long_about = None, after_help = AFTER_HELP)]
struct Cli {
    /// Log more (-v: debug, -vv: trace); RUST_LOG wins over it.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,
    /// Log less (-q: warnings and errors, -qq: errors, -qqq: nothing).
    #[arg(short, long, action = ArgAction::Count, global = true, conflicts_with = "verbose")]
    quiet: u8,
    #[command(subcommand)]
    command: Command,
}

/// Where a command works.
#[derive(Debug, Clone, clap::Args)]
struct WhereArgs {
    /// The subagents config (TOML). Default: $ASYNCTASK_CONFIG, else
    /// asynctask.toml in the project or a parent once trusted (`asynctask
    /// trust`), else the user's (~/.config/asynctask/asynctask.toml).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The project: subagents work there (a relative `cwd` is relative to
    /// it) and durable state lives in its .asynctask/. Default: the client's
    /// first MCP root when it offers roots, else the working directory; a
    /// trusted asynctask.toml found in a parent of it makes that parent the
    /// project.
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scripted agent session with real background subagents (no API key).
    Demo {
        /// Use these subagents instead of the bundled ones (TOML, see docs/guide.md).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Print the tool definitions for an LLM provider as JSON (`mcp`: exactly
    /// the tools `asynctask mcp` serves).
    Schemas {
        /// The provider format.
        #[arg(long)]
        provider: ProviderArg,
        // The help names every tool, read from the tool list itself.
        #[arg(long, help = tool_help())]
        tool: Option<String>,
    },
    /// Run one subagent synchronously through the task tool and print its
    /// result: its final message and variables (the completion JSON with
    /// --json). Exit status: 0 completed, 1 failed, 2 could not run it, 124
    /// timed out.
    Run {
        #[command(flatten)]
        place: WhereArgs,
        /// Where the subagent's whole output is kept, named in the result when
        /// it was cut (default: `.asynctask/runs/` in the project; a
        /// directory given here is made private to its owner if it does not
        /// exist). A file the result names is kept after the command exits;
        /// one it does not name is removed.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
        /// End the subagent after this many seconds (exit status 124).
        /// Default: the task tool's 900.
        #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
        timeout: Option<u64>,
        /// Print the completion JSON a model would read, as it is.
        #[arg(long)]
        json: bool,
        /// The subagent to run.
        subagent: String,
        /// Its goal.
        goal: String,
    },
    /// Serve the tools to an MCP client over stdio (task, check_async_tasks,
    /// message_async_task, answer_async_task, wait_async_tasks, end_async_task).
    #[command(long_about = MCP_ABOUT)]
    Mcp {
        #[command(flatten)]
        serve: ServeArgs,
        /// Keep tasks and results beyond this session: relay to the project's
        /// supervisor (started if none runs), which owns the tasks and their
        /// subagents. Also `durable = true` at the top of the config.
        #[arg(long)]
        durable: bool,
        /// Serve as a front of a fleet: tasks go to this PostgreSQL database
        /// and run on its workers (see docs/fleet.md). Also `database = "…"`
        /// in the config, and $ASYNCTASK_DATABASE_URL. Never logged.
        #[arg(long, value_name = "URL")]
        database: Option<String>,
    },
    /// Serve a fleet's tasks from this machine: run the subagents the config
    /// names, for tasks stored in a PostgreSQL database (see docs/fleet.md).
    #[command(long_about = WORKER_ABOUT)]
    Worker {
        #[command(flatten)]
        place: WhereArgs,
        /// The fleet's database (a postgresql:// URL or key=value string).
        /// Default: $ASYNCTASK_DATABASE_URL. Never logged.
        #[arg(long, value_name = "URL")]
        database: Option<String>,
        /// A workspace whose tasks this worker runs (repeat for several;
        /// replaces `workspaces = [...]` in the config). At least one is needed:
        /// its tasks run in this machine's checkout, with its secrets.
        #[arg(long = "workspace", value_name = "NAME", value_parser = asynctask_cli::front::fleet_workspace)]
        workspaces: Vec<String>,
        /// How many tasks run here at once, 1-1000.
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        capacity: u32,
        /// The worker's name, in logs and in the error of the tasks it loses
        /// (default: the host name).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// How long the worker's lease lasts without a heartbeat (renewed
        /// every third of it), 1-3600. A lost worker's tasks are reported
        /// interrupted this long after it is gone.
        #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
        lease_seconds: u64,
        /// Keep a task whose result was delivered this many days, 1-36500, then
        /// delete it with its output (checked every 10 minutes; of workers that
        /// disagree, the shortest wins).
        #[arg(long, value_name = "DAYS", default_value_t = 7, value_parser = clap::value_parser!(u64).range(1..=36500))]
        retain_days: u64,
    },
    /// Watch and tune a fleet (see docs/fleet.md).
    Fleet {
        #[command(subcommand)]
        command: FleetCommand,
    },
    /// The project's supervisor, which owns durable tasks (`mcp --durable`
    /// starts it).
    Supervisor {
        #[command(subcommand)]
        command: SupervisorCommand,
    },
    /// Trust the project's asynctask.toml as it is now (read it first): its
    /// subagents run only once it is trusted, and again after each change
    /// only once trusted anew.
    Trust {
        /// The file (default: the asynctask.toml discovery finds from the
        /// working directory).
        file: Option<PathBuf>,
        /// Where discovery begins (default: the working directory).
        #[arg(long, value_name = "DIR", conflicts_with = "file")]
        project: Option<PathBuf>,
    },
    /// Stop trusting a project's asynctask.toml.
    Untrust {
        /// The file (default: the asynctask.toml discovery finds from the
        /// working directory).
        file: Option<PathBuf>,
        /// Where discovery begins (default: the working directory).
        #[arg(long, value_name = "DIR", conflicts_with = "file")]
        project: Option<PathBuf>,
    },
    /// Write a starter asynctask.toml in the project (never over one) and
    /// trust it.
    Init {
        /// The project (default: the working directory).
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
    /// The subagents config a command would use.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Check the config, each subagent's program and working directory, the
    /// state directory and its socket, and say what an MCP client would run.
    /// Exit status 1 when something is wrong.
    Doctor {
        #[command(flatten)]
        place: WhereArgs,
        /// The state directory (default: `.asynctask/` in the project).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Print a shell's completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `asynctask man > asynctask.1`.
    Man,
}

/// `mcp --help`.
const MCP_ABOUT: &str = "\
Serve the tools to an MCP client over stdio: task, check_async_tasks, message_async_task, \
answer_async_task, wait_async_tasks and end_async_task.

The project is --project, else the client's first MCP root (when a client that opens with \
`initialize` declares roots), else the working directory the client started the server in. Subagents \
run there: a relative `cwd` in the config is relative to it, and by default they may work \
anywhere under it (`roots`).

State: without --durable, whole outputs go to a temporary directory removed when the server \
exits (--state-dir DIR keeps them in DIR/outputs). With --durable, the project's supervisor \
keeps its socket, lock, log, task store and outputs in the project's .asynctask/ (or \
--state-dir DIR).";

/// `worker --help`.
const WORKER_ABOUT: &str = "\
Serve a fleet's tasks from this machine: register with the fleet's PostgreSQL database \
(--database URL, else $ASYNCTASK_DATABASE_URL), and run the subagents the config names for \
the tasks queued there in the workspaces it names, as many at once as --capacity allows.

A worker runs only the tasks of the workspaces it names (--workspace NAME, repeatable, else \
`workspaces = [...]` in the config), and refuses to start naming none: a task runs in this \
machine's checkout, with its secrets. A front's workspace is `workspace = \"...\"` in its \
config, else user@host:/project/path.

The worker renews its lease every third of --lease-seconds. If it cannot (the database is \
unreachable past the lease), it ends its running subagents and stops claiming; the fleet \
reports their tasks `interrupted: worker <name> lost`. A lost connection is retried with \
backoff: running subagents keep running, and their ends are written once it is back. \
SIGTERM or SIGINT stops it: its running tasks are reported `interrupted: worker <name> \
stopped` and their subagents ended.

Every 10 minutes a worker (one at a time across the fleet) deletes the tasks whose result was \
delivered more than --retain-days ago, with their whole outputs, messages and questions; a \
queued or running task, or a result not delivered yet, is never deleted.";

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the path of the config a command would use, and say on stderr
    /// how it was found and whether it is trusted (when the project's
    /// config is not used, its path, and why).
    Path {
        #[command(flatten)]
        place: WhereArgs,
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
    /// Show the supervisor (or, when none runs, what its store holds) and its
    /// tasks; read-only.
    Status {
        #[command(flatten)]
        state: StateArgs,
        /// Print JSON: pid (null when none runs), project, state_dir,
        /// sessions and tasks.
        #[arg(long)]
        json: bool,
    },
    /// Cancel every task, end their processes, and stop the supervisor.
    Stop {
        #[command(flatten)]
        state: StateArgs,
    },
    /// Stop the supervisor (cancelling its tasks) and start a new one with
    /// the config and options given (a new binary, environment or options).
    Restart {
        #[command(flatten)]
        serve: ServeArgs,
    },
}

/// Which workspace's state: the project's `.asynctask/`, or `--state-dir`
/// alone.
#[derive(Debug, clap::Args)]
struct StateArgs {
    /// The project whose supervisor this is (default: the working directory).
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// The state directory (default: `.asynctask/` in the project).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Not needed: the state is the project's. Given, it must exist.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

impl StateArgs {
    fn state(&self) -> Result<StateDir, CliError> {
        if let Some(config) = &self.config {
            find_config(Some(config), Path::new("/"), &ConfigEnv::default())?;
        }
        Ok(match &self.state_dir {
            Some(dir) => StateDir::new(dir),
            None => state_dir(None, &project_dir(self.project.as_deref())?),
        })
    }
}

/// How tools are served.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    #[command(flatten)]
    place: WhereArgs,
    /// Where state lives: with --durable, the supervisor's (default:
    /// `.asynctask/` in the project); without it, whole outputs go to
    /// DIR/outputs (default: a temporary directory removed at exit).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Turn a synchronous task call still running after this many seconds
    /// (1-3600) into a background task.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 50,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    sync_detach_after: u64,
    /// The most background tasks running at once: -1 (unlimited) or 1-100
    /// [default: 5].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = max_async_tasks)]
    max_async_tasks: Option<MaxAsyncTasks>,
    /// How many background launches past the running limit wait in a queue,
    /// 0..=1000 (default 20; 0 refuses them).
    #[arg(long, value_name = "N", value_parser = max_queued_tasks)]
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
    /// model reads them (JSON-escaped), 1000-1000000; overrides
    /// `inline_budget` in the config [default: 10000].
    #[arg(
        long,
        value_name = "CHARS",
        value_parser = clap::value_parser!(u64).range(1_000..=1_000_000)
    )]
    inline_budget: Option<u64>,
}

impl ServeArgs {
    fn options(&self) -> ServeOptions {
        let mut options = ServeOptions::new();
        options.config = self
            .place
            .config
            .as_ref()
            .map(|config| std::path::absolute(config).unwrap_or_else(|_| config.clone()));
        options.project.clone_from(&self.place.project);
        // Made absolute once: every check and the supervisor started see the
        // same path.
        options.state_dir = self
            .state_dir
            .as_ref()
            .map(|dir| StateDir::new(dir).path().to_owned());
        options.sync_detach_after = Duration::from_secs(self.sync_detach_after);
        options.idle_exit = Duration::from_secs(self.idle_exit);
        options.inline_budget = self
            .inline_budget
            .and_then(|chars| usize::try_from(chars).ok());
        if let Some(max) = self.max_async_tasks {
            options.max_async_tasks = max;
            options.max_async_tasks_given = true;
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

/// `--max-async-tasks`: the flag's rule, in the flag's words.
fn max_async_tasks(value: &str) -> Result<MaxAsyncTasks, String> {
    value
        .parse::<i64>()
        .ok()
        .and_then(|n| MaxAsyncTasks::new(n).ok())
        .ok_or_else(|| "must be -1 (unlimited) or an integer from 1 to 100".to_owned())
}

fn max_queued_tasks(value: &str) -> Result<MaxQueuedTasks, String> {
    value
        .parse::<i64>()
        .ok()
        .and_then(|n| MaxQueuedTasks::new(n).ok())
        .ok_or_else(|| "must be an integer from 0 to 1000".to_owned())
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
    format!(
        "Print only this tool ({}; with --provider mcp: those asynctask mcp serves, \
         wait_async_tasks and end_async_task among them)",
        names.join(", ")
    )
}

fn main() -> ExitCode {
    // The reaper must run before any thread is started (it takes its signals
    // with `sigwait`), so it is dispatched before anything else.
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(std::ffi::OsStr::new(REAPER_ARG)) {
        return asynctask_process::reaper::main(args);
    }
    let cli: Cli = asynctask_cli::database::parse_args(note);
    asynctask_cli::logging::install(cli.verbose, cli.quiet);
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
        Err(error) if closed_stdout(&error) => ExitCode::SUCCESS,
        Err(error) => {
            // The one place an error becomes text: with every cause, on one
            // line. Written, not printed: a closed stderr ends nothing.
            let _ = writeln!(std::io::stderr(), "asynctask: {}", error_chain(&error));
            ExitCode::from(ERROR_EXIT)
        }
    }
}

/// Whether `error` is stdout's reader going away (`| head`).
fn closed_stdout(error: &CliError) -> bool {
    match error {
        CliError::ClosedStdout(_) => true,
        CliError::Transcript(err) => err.kind() == std::io::ErrorKind::BrokenPipe,
        _ => false,
    }
}

/// Writes `text` and a line break to stdout; a reader that went away is
/// [`CliError::ClosedStdout`].
fn out(text: &str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(CliError::ClosedStdout)
}

/// Writes a note for the user to stderr (never fails the command).
fn note(text: &str) {
    let _ = writeln!(std::io::stderr(), "asynctask: {text}");
}

async fn run(command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::Demo { config } => {
            let (runner, subagents) = match &config {
                Some(path) => {
                    let runner = load_runner(path, &project_dir(None)?)?;
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
            out(&pretty(&value))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            place,
            output_dir,
            timeout,
            json,
            subagent,
            goal,
        } => {
            run_command(
                &place,
                output_dir.as_deref(),
                timeout,
                json,
                &subagent,
                &goal,
            )
            .await
        }
        // stdout is the protocol channel from here on: nothing else is printed.
        Command::Mcp {
            serve,
            durable,
            database,
        } => {
            mcp(
                &serve.options(),
                durable,
                database.as_deref(),
                &start_supervisor,
            )
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Worker {
            place,
            database,
            workspaces,
            capacity,
            name,
            lease_seconds,
            retain_days,
        } => {
            let mut options = asynctask_cli::worker::WorkerOptions::new();
            options.database = database;
            options.workspaces = workspaces;
            options.config = place.config;
            options.project = place.project;
            options.capacity = capacity;
            options.name = name;
            options.lease = Duration::from_secs(lease_seconds);
            options.retention = Duration::from_secs(retain_days * 24 * 60 * 60);
            let shutdown = tokio_util::sync::CancellationToken::new();
            let mut signals = asynctask_mcp::TerminationSignals::new()
                .map_err(asynctask_mcp::McpError::Signals)?;
            let stop = shutdown.clone();
            tokio::spawn(async move {
                let signal = signals.recv().await;
                tracing::info!("{signal}: stopping");
                stop.cancel();
            });
            asynctask_cli::worker::worker(&options, shutdown).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Fleet { command } => fleet_command::run(command).await,
        Command::Supervisor { command } => match command {
            SupervisorCommand::Run { serve } => {
                supervisor_run(&serve.options()).await?;
                Ok(ExitCode::SUCCESS)
            }
            SupervisorCommand::Status { state, json } => {
                let status = supervisor_status(&state.state()?).await?;
                out(&if json {
                    pretty(&status)
                } else {
                    status_text(&status)
                })?;
                Ok(ExitCode::SUCCESS)
            }
            SupervisorCommand::Stop { state } => {
                match supervisor_stop(&state.state()?).await? {
                    Some(pid) => note(&format!("supervisor {pid} stopped")),
                    None => note("no supervisor runs"),
                }
                Ok(ExitCode::SUCCESS)
            }
            SupervisorCommand::Restart { serve } => {
                let options = serve.options();
                let discovery = options.discover()?;
                let state = options.state(&discovery.project);
                if let Some(pid) = supervisor_stop(&state).await? {
                    note(&format!("supervisor {pid} stopped"));
                }
                let pid = asynctask_cli::serve::start_and_wait(&state, || {
                    start_supervisor(&options, &discovery)
                })
                .await?;
                note(&format!("supervisor {pid} started"));
                Ok(ExitCode::SUCCESS)
            }
        },
        Command::Config {
            command: ConfigCommand::Path { place },
        } => {
            let (path, notes) = config_path(place.config.as_deref(), place.project.as_deref())?;
            notes.iter().for_each(|text| note(text));
            out(&path.display().to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Trust { file, project } => {
            note(&trust_command(file.as_deref(), project.as_deref())?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Untrust { file, project } => {
            note(&untrust_command(file.as_deref(), project.as_deref())?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Init { project } => {
            note(&init_command(project.as_deref())?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Doctor { place, state_dir } => {
            let path = std::env::var_os("PATH");
            let findings = doctor::examine(
                place.config.as_deref(),
                place.project.as_deref(),
                state_dir.as_deref(),
                path.as_deref(),
            );
            out(&doctor::report(&findings))?;
            Ok(if findings.iter().any(|finding| finding.problem) {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "asynctask", &mut script);
            out(String::from_utf8_lossy(&script).trim_end())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            let mut page = Vec::new();
            // Rendered into memory, which cannot fail to take it.
            clap_mangen::Man::new(Cli::command())
                .render(&mut page)
                .expect("writing to a Vec cannot fail");
            out(String::from_utf8_lossy(&page).trim_end())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `asynctask run`.
async fn run_command(
    place: &WhereArgs,
    output_dir: Option<&Path>,
    timeout: Option<u64>,
    json: bool,
    subagent: &str,
    goal: &str,
) -> Result<ExitCode, CliError> {
    let workspace = Workspace::find(place.config.as_deref(), place.project.as_deref())?;
    let runner = runner_of(workspace.load()?.0);
    let names = runner.subagent_names();
    if !names.iter().any(|name| name == subagent) {
        return Err(CliError::UnknownSubagent {
            subagent: subagent.to_owned(),
            config: workspace.config.path,
            configured: names,
        });
    }
    if runner
        .config()
        .subagents
        .get(subagent)
        .is_some_and(|spec| spec.stdin == StdinMode::Jsonl)
    {
        note(&format!(
            "subagent '{subagent}' reads messages (stdin = \"jsonl\"): its stdin stays open \
             until it ends, and `run` sends it none; it must finish on its own (--timeout \
             ends it)"
        ));
    }
    // The result may name the output file: it must outlive this command.
    let runner = Arc::new(runner.with_output_dir(run_output_dir(&workspace.project, output_dir)?));
    let terminal = std::io::stderr().is_terminal();
    let mut drawn = false;
    let result = run_subagent(
        Arc::clone(&runner) as _,
        subagent,
        goal,
        timeout.map(Duration::from_secs),
        |elapsed, last| {
            if terminal {
                let line = progress_line(subagent, elapsed, last, 100);
                let _ = write!(std::io::stderr(), "\r\x1b[K{line}");
                drawn = true;
            }
        },
    )
    .await;
    if drawn {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
    // A result that names no file (nothing was cut) leaves none behind.
    if !result.llm_content.contains("[whole output: ")
        && let Some(file) = result.metadata["agentId"]
            .as_str()
            .and_then(|id| runner.output_path(id))
        && let Err(err) = std::fs::remove_file(&file)
        && err.kind() != std::io::ErrorKind::NotFound
    {
        note(&format!("cannot remove {}: {err}", file.display()));
    }
    let exit = RunExit::of(&result);
    if json {
        out(&result.llm_content)?;
    } else if exit == RunExit::Completed {
        let completion: serde_json::Value =
            serde_json::from_str(&result.llm_content).unwrap_or_default();
        let text = human_output(&completion);
        if !text.is_empty() {
            out(&text)?;
        }
    }
    if let Some(error) = &result.error {
        note(&escape_for_terminal_keeping_lines(&error.message));
    }
    Ok(ExitCode::from(exit.code()))
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
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_tool_help_names_every_tool() {
        assert_eq!(
            tool_help(),
            "Print only this tool (task, check_async_tasks, message_async_task, answer_async_task, \
             todo_pause; with --provider mcp: those asynctask mcp serves, wait_async_tasks and \
             end_async_task among them)"
        );
    }
}
