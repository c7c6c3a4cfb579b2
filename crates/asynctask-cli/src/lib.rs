//! The `asynctask` command line, as a library so its sessions can be tested.
//!
//! The binary (`src/main.rs`) parses arguments and calls into this crate:
//!
//! - [`demo`] — a scripted agent session: a model (no network, no API key)
//!   launches background subagents, keeps working, is woken by the auto-trigger,
//!   gets results held while it was busy, sees a failure, and the user cancels a
//!   task — printed as a transcript with elapsed times;
//! - [`schemas`] — the tool definitions for an LLM provider;
//! - [`run_once`] — one subagent, synchronously, through the `task` tool.
//!
//! Subagents are [`ProcessRunner`](asynctask_process::ProcessRunner) commands from
//! a TOML config; [`DEMO_CONFIG`] is the bundled one.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the command line owns stdout and stderr: its output and its messages to the user"
)]

pub mod database;
pub mod demo;
pub mod doctor;
pub mod durable;
pub mod front;
pub mod init;
pub mod logging;
pub mod notice;
pub mod project;
pub mod run;
pub mod serve;
mod status;
pub mod trust;
pub mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use asynctask_manager::AsyncTaskManager;
use asynctask_model::OutputObject;
use asynctask_tools::{
    AnswerAsyncTaskTool, CheckAsyncTasksTool, MessageAsyncTaskTool, Provider, SubagentError,
    SubagentRequest, SubagentRunner, TaskTool, TodoPauseTool, Tool, ToolResult,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The bundled subagents of `asynctask demo` (small commands that sleep and print).
pub const DEMO_CONFIG: &str = include_str!("demo.toml");

/// A failure the CLI reports as one line on stderr.
///
/// The `Display` says what failed; the error that caused it, when there is
/// one, is its [`source`](std::error::Error::source) and is not repeated.
/// [`error_chain`] makes the line the user sees.
///
/// # Examples
///
/// ```
/// use asynctask_cli::{CliError, error_chain};
///
/// let cause = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "broken pipe");
/// let err = CliError::Transcript(cause);
/// assert_eq!(err.to_string(), "cannot write the transcript");
/// assert_eq!(error_chain(&err), "cannot write the transcript: broken pipe");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The subagents config cannot be loaded.
    #[error(transparent)]
    Config(#[from] asynctask_process::ConfigError),
    /// A config named by `--config` or `$ASYNCTASK_CONFIG` does not exist.
    #[error("the config {} ({found_by}) does not exist", path.display())]
    ConfigMissing {
        /// The file.
        path: PathBuf,
        /// Who named it.
        found_by: project::ConfigSource,
    },
    /// No config was named, and none was found.
    #[error(
        "no subagents config: looked for {} (and in its parents, up to the repository's root), \
         {}$ASYNCTASK_CONFIG; run `asynctask init` to write one, or pass --config FILE",
        project_file.display(),
        user_file.as_ref().map(|file| format!("{} and ", file.display())).unwrap_or_default()
    )]
    NoConfig {
        /// The project's file (its parents' were looked for too).
        project_file: PathBuf,
        /// The user's file, when there is a place for it.
        user_file: Option<PathBuf>,
    },
    /// A config is not used: the project's is not trusted (or changed since
    /// it was), or others could have written it.
    #[error("the config {} is {why}", path.display())]
    HeldBack {
        /// The file.
        path: PathBuf,
        /// Why it is not used.
        why: project::HeldBack,
    },
    /// `asynctask trust` found no project config to trust.
    #[error(
        "no asynctask.toml in {} or a parent (up to the repository's root, never above your          home); name the file: asynctask trust FILE",
        start.display()
    )]
    NothingToTrust {
        /// Where discovery began.
        start: PathBuf,
    },
    /// Neither `$XDG_STATE_HOME` nor `$HOME` is set: there is no place for
    /// the trust store.
    #[error("no place for the trust store: set HOME (or XDG_STATE_HOME)")]
    NoTrustStore,
    /// The trust store cannot be read or written.
    #[error("cannot use the trust store {}", path.display())]
    TrustStore {
        /// The store's file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `asynctask init` found a config where it would write one.
    #[error("{} exists already: asynctask init writes a new config only", path.display())]
    ConfigExists {
        /// The file.
        path: PathBuf,
    },
    /// `asynctask init` cannot write the config.
    #[error("cannot write {}", path.display())]
    WriteConfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The project is not a directory.
    #[error("cannot use the project {}", path.display())]
    Project {
        /// The directory given.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The MCP client's stdio failed before serving began.
    #[error("cannot read the MCP client's opening")]
    Stdio(#[source] std::io::Error),
    /// The supervisor's log cannot be opened.
    #[error("cannot open the supervisor's log {}", path.display())]
    Log {
        /// The log.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// stdout was closed by its reader (`| head`): the command ends quietly.
    #[error("stdout was closed")]
    ClosedStdout(#[source] std::io::Error),
    /// No tool has this name.
    #[error("unknown tool '{name}'; expected one of: {}", expected.join(", "))]
    UnknownTool {
        /// The name asked for.
        name: String,
        /// Every tool's name.
        expected: Vec<String>,
    },
    /// The config defines no subagent of this name.
    #[error(
        "unknown subagent '{subagent}' in {}; configured: {}",
        config.display(),
        names_or_none(configured)
    )]
    UnknownSubagent {
        /// The name asked for.
        subagent: String,
        /// The config.
        config: PathBuf,
        /// The subagents it defines.
        configured: Vec<String>,
    },
    /// The config defines no subagent at all.
    #[error("the config defines no subagents")]
    NoSubagents,
    /// The demo's transcript cannot be written.
    #[error("cannot write the transcript")]
    Transcript(#[source] std::io::Error),
    /// The async runtime cannot start.
    #[error("cannot start the async runtime")]
    AsyncRuntime(#[source] std::io::Error),
    /// The task runtime cannot be built (or its stored tasks restored).
    #[error(transparent)]
    TaskRuntime(#[from] asynctask_runtime::BuildError),
    /// The state directory cannot be made or read.
    #[error("cannot use the state directory {}", path.display())]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The directory for subagents' whole outputs cannot be made.
    #[error("cannot make the output directory {}", path.display())]
    OutputDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The state directory is too deep for its socket.
    #[error(transparent)]
    SocketPath(#[from] asynctask_supervisor::SocketPathTooLong),
    /// The supervisor's lock cannot be taken.
    #[error("cannot lock {}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The task store cannot be opened or read.
    #[error(transparent)]
    Store(#[from] asynctask_store::StoreError),
    /// Serving failed: the MCP session, the supervisor's socket, signals.
    #[error(transparent)]
    Serve(#[from] asynctask_mcp::McpError),
    /// Durable serving failed: a supervisor could not serve, or a front could
    /// not reach one.
    #[error(transparent)]
    Supervisor(#[from] asynctask_supervisor::SupervisorError),
    /// The supervisor did not answer a question.
    #[error("the supervisor did not answer")]
    SupervisorSilent(#[source] std::io::Error),
    /// The supervisor answered something this CLI does not understand.
    #[error("the supervisor answered {answer}")]
    SupervisorAnswer {
        /// Its answer.
        answer: Value,
    },
    /// The supervisor did not exit after it was stopped.
    #[error("supervisor {pid} did not exit within {} s", waited.as_secs())]
    SupervisorStuck {
        /// Its process id.
        pid: u32,
        /// How long it was waited for.
        waited: Duration,
    },
    /// The fleet's database refused or failed (never naming its credentials).
    #[error(transparent)]
    Fleet(#[from] asynctask_fleet::FleetError),
    /// `--durable` and a fleet database were both asked for.
    #[error(
        "a front serves a fleet's tasks, which outlive it already: use --durable or a database \
         (--database, `database` in the config, {DATABASE_URL_ENV}), not both"
    )]
    DurableFront,
    /// The fleet stores no whole output for this task.
    #[error(
        "the fleet stores no whole output for task {0}: its result was not cut (it is whole), \
         the task was deleted after its result was delivered (workers' --retain-days), or no \
         task has this id"
    )]
    NoStoredOutput(String),
    /// `fleet set-max-async` named a workspace the fleet has never seen,
    /// without `--create`.
    #[error(
        "the fleet has no workspace {0:?}: no front has launched a task in it nor set its limit. \
         Check its name, or pass --create to set the limit of a workspace to come"
    )]
    UnknownWorkspace(String),
    /// A fleet command was given no database.
    #[error("no fleet database: pass --database URL or set {DATABASE_URL_ENV}")]
    NoDatabase,
}

/// The variable a fleet command reads its database's URL from when
/// `--database` is not given.
pub const DATABASE_URL_ENV: &str = "ASYNCTASK_DATABASE_URL";

/// `names` joined by `, `, or `none`.
fn names_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// An error and its sources on one line, as the CLI prints it: each link's
/// `Display`, joined by `: ` (a link of several lines has them joined by `; `).
///
/// # Examples
///
/// ```
/// let cause = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
/// let err = asynctask_runtime::TriggerError::new("cannot start a turn").with_source(cause);
/// assert_eq!(asynctask_cli::error_chain(&err), "cannot start a turn: no such file");
/// ```
///
/// A cause whose `Display` runs over several lines stays on the one line:
///
/// ```
/// let cause = std::io::Error::other("unknown field `x`\nin `subagents.a`\n");
/// let err = asynctask_runtime::TriggerError::new("bad config").with_source(cause);
/// assert_eq!(asynctask_cli::error_chain(&err), "bad config: unknown field `x`; in `subagents.a`");
/// ```
#[must_use]
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut links = vec![one_line(&err.to_string())];
    let mut source = err.source();
    while let Some(cause) = source {
        links.push(one_line(&cause.to_string()));
        source = cause.source();
    }
    links.join(": ")
}

/// `text`'s non-blank lines, trimmed, joined by `; `.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A runner for commands that only need tool specs: it runs nothing.
struct SpecOnly;

#[async_trait::async_trait]
impl SubagentRunner for SpecOnly {
    async fn run(
        &self,
        _request: SubagentRequest,
        _cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        Err(SubagentError::new("no subagent runner is configured"))
    }
}

/// Every tool, in the order hosts list them.
#[must_use]
pub fn all_tools() -> Vec<Arc<dyn Tool>> {
    let manager = AsyncTaskManager::default();
    vec![
        Arc::new(TaskTool::new(manager.clone(), Arc::new(SpecOnly))),
        Arc::new(CheckAsyncTasksTool::new(manager.clone())),
        Arc::new(MessageAsyncTaskTool::new(manager.clone())),
        Arc::new(AnswerAsyncTaskTool::new(manager)),
        Arc::new(TodoPauseTool::new()),
    ]
}

/// The tools `asynctask mcp` serves, in its `tools/list` order: those of
/// [`all_tools`] but `todo_pause` (no continuation loop runs behind an MCP
/// server), then `wait_async_tasks` and `end_async_task`.
#[must_use]
pub fn mcp_tools() -> Vec<Arc<dyn Tool>> {
    // The runtime is built inside tokio: outside one, a small one is entered.
    let tokio = match tokio::runtime::Handle::try_current() {
        Ok(_) => None,
        Err(_) => tokio::runtime::Builder::new_current_thread().build().ok(),
    };
    let _inside = tokio.as_ref().map(tokio::runtime::Runtime::enter);
    let runtime = asynctask_runtime::AsyncTaskRuntime::builder()
        .runner(Arc::new(SpecOnly))
        .try_build();
    match runtime.map(|runtime| asynctask_mcp::AsyncTaskMcpServer::new(Arc::new(runtime))) {
        Ok(Ok(server)) => server.tools().to_vec(),
        // Never: the runtime builds inside tokio, and the tools' definitions
        // are checked by the MCP crate's tests.
        _ => Vec::new(),
    }
}

/// The tool definitions for `provider`: a JSON array of all tools, or the one
/// object for `tool`. For [`Provider::Mcp`] the tools are exactly those
/// `asynctask mcp` serves ([`mcp_tools`]); for the others, what a Rust host
/// gets ([`all_tools`]).
///
/// # Errors
///
/// [`CliError::UnknownTool`], naming the valid tools.
///
/// # Examples
///
/// ```
/// use asynctask_tools::Provider;
///
/// let all = asynctask_cli::schemas(Provider::Anthropic, None).unwrap();
/// assert_eq!(all.as_array().unwrap().len(), 5);
/// let served = asynctask_cli::schemas(Provider::Mcp, None).unwrap();
/// let names: Vec<_> = served.as_array().unwrap().iter().map(|tool| tool["name"].as_str().unwrap()).collect();
/// assert_eq!(names, ["task", "check_async_tasks", "message_async_task", "answer_async_task", "wait_async_tasks", "end_async_task"]);
/// let one = asynctask_cli::schemas(Provider::Mcp, Some("check_async_tasks")).unwrap();
/// assert_eq!(one["annotations"]["readOnlyHint"], true);
/// assert!(asynctask_cli::schemas(Provider::Mcp, Some("nope")).is_err());
/// ```
pub fn schemas(provider: Provider, tool: Option<&str>) -> Result<Value, CliError> {
    let tools = if provider == Provider::Mcp {
        mcp_tools()
    } else {
        all_tools()
    };
    match tool {
        None => Ok(Value::Array(
            tools
                .iter()
                .map(|tool| tool.spec().for_provider(provider))
                .collect(),
        )),
        Some(name) => match tools.iter().find(|t| t.name() == name) {
            Some(tool) => Ok(tool.spec().for_provider(provider)),
            None => Err(CliError::UnknownTool {
                name: name.to_owned(),
                expected: tools.iter().map(|t| t.name().to_owned()).collect(),
            }),
        },
    }
}

/// Runs one subagent synchronously through the `task` tool, as a model would,
/// and returns the tool's result (the completion JSON in `llm_content`).
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use std::sync::Arc;
/// use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let config = ProcessRunnerConfig::from_toml_str(
///     "[subagents.greeter]\ncommand = [\"echo\", \"hello\"]\n",
///     Path::new("."),
/// ).unwrap();
/// let result = asynctask_cli::run_once(Arc::new(ProcessRunner::new(config)), "greeter", "say hello").await;
/// assert!(result.llm_content.contains("\"final_message\": \"hello\""), "{}", result.llm_content);
/// # });
/// ```
pub async fn run_once(runner: Arc<dyn SubagentRunner>, subagent: &str, goal: &str) -> ToolResult {
    let tool = TaskTool::new(AsyncTaskManager::default(), runner);
    tool.execute(
        json!({ "subagent_name": subagent, "goal_prompt": goal }),
        CancellationToken::new(),
    )
    .await
}
