//! `asynctask mcp` and `asynctask supervisor`: serving the tools to MCP clients,
//! in one process per session or (durable) through the project's supervisor.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use asynctask_manager::{JournalError, StoredTask};
use asynctask_mcp::{
    DropAnswer, FollowJournal, LineReader, MAX_LINE_BYTES, McpServerOptions, open_session, serve_io,
};
use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks, MaxQueuedTasks};
use asynctask_process::{ConfigExtension, ProcessRunner, ProcessRunnerConfig};
use asynctask_runtime::AsyncTaskRuntime;
use asynctask_store::{Store, StoreError};
use asynctask_supervisor::{
    StateDir, Supervisor, SupervisorExit, SupervisorLock, SupervisorOptions, ask, relay_stdio,
};
use asynctask_tools::{Nesting, SyncDetach};
use serde::{Deserialize, Deserializer};
use tokio::io::{AsyncReadExt, BufReader};

use crate::CliError;
use crate::notice::{NotedRunner, note_for};
use crate::project::{ConfigEnv, Discovery, FoundConfig, discover, project_dir};
use crate::status::no_supervisor;
pub use crate::status::{status_text, supervisor_status};

/// What `asynctask mcp` and `asynctask supervisor run` are given.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeOptions {
    /// The subagents config (`--config`); `None`: found from the project
    /// ([`discover`]).
    pub config: Option<PathBuf>,
    /// The project (`--project`); `None`: the client's first root, else the
    /// working directory.
    pub project: Option<PathBuf>,
    /// A synchronous call still running after this long becomes a background task.
    pub sync_detach_after: Duration,
    /// The running limit.
    pub max_async_tasks: MaxAsyncTasks,
    /// Whether the running limit was given (`--max-async-tasks`): a front
    /// then sets it as its workspace's `task-max-async` across the fleet.
    pub max_async_tasks_given: bool,
    /// How many launches past the running limit wait in a queue.
    pub max_queued_tasks: MaxQueuedTasks,
    /// How many subagents one session may launch in all (`None`: no cap).
    pub max_launches_per_session: Option<u32>,
    /// How deep subagents may nest.
    pub max_depth: u32,
    /// Where a durable supervisor keeps its state (default: `.asynctask/` in
    /// the project).
    pub state_dir: Option<PathBuf>,
    /// A durable supervisor exits after this long with no session and no task.
    pub idle_exit: Duration,
    /// How much of a subagent's output a result holds (JSON-escaped
    /// characters); `None`: the config's `inline_budget`, else the default.
    pub inline_budget: Option<usize>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            config: None,
            project: None,
            sync_detach_after: McpServerOptions::default().sync_detach_after,
            max_async_tasks: MaxAsyncTasks::default(),
            max_async_tasks_given: false,
            max_queued_tasks: McpServerOptions::DEFAULT_MAX_QUEUED_TASKS,
            max_launches_per_session: Some(McpServerOptions::DEFAULT_MAX_LAUNCHES),
            max_depth: McpServerOptions::DEFAULT_MAX_DEPTH,
            state_dir: None,
            idle_exit: SupervisorOptions::default().idle_exit,
            inline_budget: None,
        }
    }
}

impl ServeOptions {
    /// The options with every default.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The workspace's state directory for `project`: the one given, else
    /// `.asynctask/` in the project (made absolute either way, once).
    #[must_use]
    pub fn state(&self, project: &Path) -> StateDir {
        state_dir(self.state_dir.as_deref(), project)
    }

    /// The config and the project for a command that serves from
    /// `--project`, else the working directory (a trusted config found in
    /// a parent of the working directory makes that parent the project).
    ///
    /// # Errors
    ///
    /// Those of [`project_dir`] and [`discover`].
    pub fn discover(&self) -> Result<Discovery, CliError> {
        let start = project_dir(self.project.as_deref())?;
        discover(
            self.config.as_deref(),
            &start,
            self.project.is_none(),
            &ConfigEnv::current(),
        )
    }

    pub(crate) fn server_options(&self) -> McpServerOptions {
        McpServerOptions::default()
            .with_sync_detach_after(self.sync_detach_after)
            .with_max_async_tasks(self.max_async_tasks)
            .with_max_queued_tasks(self.max_queued_tasks)
            .with_max_launches_per_session(self.max_launches_per_session)
            // The depth this process runs at: a client inside one of our
            // subagents started it.
            .with_nesting(Nesting::from_env().with_max_depth(Some(self.max_depth)))
    }
}

/// The state directory: `dir` when given, else `.asynctask/` in `project`;
/// absolute.
///
/// ```
/// # use std::path::Path;
/// let state = asynctask_cli::serve::state_dir(None, Path::new("/work/p"));
/// assert_eq!(state.path(), Path::new("/work/p/.asynctask"));
/// ```
#[must_use]
pub fn state_dir(dir: Option<&Path>, project: &Path) -> StateDir {
    StateDir::new(dir.map_or_else(|| project.join(STATE_DIR_NAME), Path::to_owned))
}

/// The name of a project's state directory.
pub const STATE_DIR_NAME: &str = ".asynctask";

/// Where a serving command works: the project, and the config found for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// The project (absolute, resolved).
    pub project: PathBuf,
    /// The config.
    pub config: FoundConfig,
    /// The config's content, as read (and, for a project's, as trusted).
    pub text: String,
}

impl Workspace {
    /// The project (`project`, else the working directory, else the
    /// directory of the trusted project config found in a parent of it) and
    /// its config (`config`, else found: see [`discover`]).
    ///
    /// # Errors
    ///
    /// [`CliError`] for a project that is no directory or no config to use.
    pub fn find(config: Option<&Path>, project: Option<&Path>) -> Result<Self, CliError> {
        let start = project_dir(project)?;
        let discovery = discover(config, &start, project.is_none(), &ConfigEnv::current())?;
        let file = discovery.require()?;
        if let Some((path, why)) = discovery.held_back() {
            tracing::warn!(
                "the project's config {} is {why}; {} serves",
                path.display(),
                file.found.path.display()
            );
        }
        Ok(Workspace {
            config: file.found.clone(),
            text: file.text.clone(),
            project: discovery.project,
        })
    }

    /// The config, parsed from the content read.
    ///
    /// # Errors
    ///
    /// [`CliError::Config`] when it does not parse or breaks a rule.
    pub fn load(&self) -> Result<(ProcessRunnerConfig, CliSettings), CliError> {
        Ok(ProcessRunnerConfig::from_file_text_in(
            &self.text,
            &self.config.path,
            &self.project,
        )?)
    }
}

/// The config `discovery` settled on, parsed for its project; an empty one
/// (no subagents) when there is none to use.
///
/// # Errors
///
/// [`CliError::Config`] when the config does not parse or breaks a rule.
pub fn load_discovered(
    discovery: &Discovery,
) -> Result<(ProcessRunnerConfig, CliSettings), CliError> {
    match &discovery.config {
        Some(file) => Ok(ProcessRunnerConfig::from_file_text_in(
            &file.text,
            &file.found.path,
            &discovery.project,
        )?),
        None => Ok((ProcessRunnerConfig::new(), CliSettings::default())),
    }
}

/// The subagents config's top-level keys that belong to this command, not to
/// the runner. The file is parsed once; a key of neither is refused, the error
/// naming the file, the line and column, and every key expected there.
///
/// ```
/// # use std::path::Path;
/// use asynctask_cli::serve::CliSettings;
/// use asynctask_process::ProcessRunnerConfig;
///
/// let text = "durable = true\n[subagents.a]\ncommand = [\"true\"]\n";
/// let (_, settings) = ProcessRunnerConfig::from_toml_str_with::<CliSettings>(text, Path::new("/"))?;
/// assert!(settings.durable);
/// # Ok::<(), asynctask_process::ConfigError>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CliSettings {
    /// `durable = true`: `asynctask mcp` serves as with `--durable`.
    pub durable: bool,
    /// `database = "…"`: `asynctask mcp` serves as a fleet's front on this
    /// database (as with `--database`). Never shown: it may hold a password.
    pub database: Option<String>,
    /// `workspace = "…"`: the fleet workspace a front's tasks belong to
    /// (default: `user@host:/project/path`, see
    /// [`default_workspace`](crate::front::default_workspace)).
    pub workspace: Option<String>,
    /// `workspaces = ["…"]`: the fleet workspaces `asynctask worker` serves
    /// (unless `--workspace` names them).
    pub workspaces: Vec<String>,
}

impl std::fmt::Debug for CliSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CliSettings")
            .field("durable", &self.durable)
            .field("database", &self.database.as_ref().map(|_| "(hidden)"))
            .field("workspace", &self.workspace)
            .field("workspaces", &self.workspaces)
            .finish()
    }
}

impl ConfigExtension for CliSettings {
    const KEYS: &'static [&'static str] = &["durable", "database", "workspace", "workspaces"];

    fn read<'de, D: Deserializer<'de>>(&mut self, key: &str, value: D) -> Result<(), D::Error> {
        match key {
            "database" => self.database = Some(String::deserialize(value)?),
            "workspace" => self.workspace = Some(String::deserialize(value)?),
            "workspaces" => self.workspaces = Vec::<String>::deserialize(value)?,
            _ => self.durable = bool::deserialize(value)?,
        }
        Ok(())
    }
}

/// Loads the subagents config for `project`: the runner's part, and this
/// command's own keys ([`CliSettings`]).
///
/// # Errors
///
/// [`CliError::Config`] when the config cannot be loaded.
pub fn load_config(
    path: &Path,
    project: &Path,
) -> Result<(ProcessRunnerConfig, CliSettings), CliError> {
    Ok(ProcessRunnerConfig::load_in(path, project)?)
}

/// The hidden first argument that makes the `asynctask` binary act as the
/// reaper between a runner and a subagent's command (see
/// [`asynctask_process::reaper`]).
pub const REAPER_ARG: &str = "__asynctask-reaper";

/// A runner for `config`, whose subagents run under this binary as their
/// reaper (so none outlives its task, nor this process when it is killed).
#[must_use]
pub fn runner_of(config: ProcessRunnerConfig) -> ProcessRunner {
    let runner = ProcessRunner::new(config);
    match std::env::current_exe() {
        Ok(exe) => runner.with_reaper(exe, vec![REAPER_ARG.into()]),
        // No path to ourselves (deleted binary): the parent-death signal on
        // each direct child still applies.
        Err(_) => runner,
    }
}

/// Loads the subagents config at `path` for `project` into a runner (see
/// [`runner_of`]).
///
/// # Errors
///
/// [`CliError::Config`] when the config cannot be loaded.
pub fn load_runner(path: &Path, project: &Path) -> Result<ProcessRunner, CliError> {
    Ok(runner_of(load_config(path, project)?.0))
}

/// The runner of `workspace` with `options`' inline budget, keeping whole
/// outputs in `state`'s `outputs/` when a state directory is given (else in a
/// temporary directory removed when the runner is dropped).
fn runner_for(
    options: &ServeOptions,
    config: ProcessRunnerConfig,
    state: Option<&StateDir>,
) -> ProcessRunner {
    let mut runner = runner_of(config);
    if let Some(chars) = options.inline_budget {
        runner = runner.with_inline_budget(chars);
    }
    if let Some(state) = state {
        runner = runner.with_output_dir(state.outputs());
    }
    // The first task's reaper waits ready (in the runtime: else at the first task).
    runner.warm_up();
    runner
}

/// Where `asynctask run` keeps the subagent's whole output: `dir` when given,
/// else `runs/` in the project's state directory (`.asynctask/`, made private
/// to its owner; a supervisor's `outputs/` beside it is the supervisor's
/// own); a `dir` that does not exist is made private to its owner too. The
/// path the result names must still hold the file after the command exits,
/// so it is never a temporary directory; the files a result names are kept
/// until removed by hand (`asynctask run` removes a run's `<task id>.out`
/// when its result names none).
///
/// ```
/// let project = std::env::temp_dir().join(format!("asynctask-doc-run-{}", std::process::id()));
/// let outputs = asynctask_cli::serve::run_output_dir(&project, None)?;
/// assert_eq!(outputs, project.join(".asynctask").join("runs"));
/// assert!(outputs.is_dir());
/// # std::fs::remove_dir_all(&project)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`CliError`] when the directory cannot be made.
pub fn run_output_dir(project: &Path, dir: Option<&Path>) -> Result<PathBuf, CliError> {
    let outputs = match dir {
        Some(dir) => std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned()),
        None => {
            let state = state_dir(None, project);
            create_state(&state)?;
            state.path().join("runs")
        }
    };
    {
        use std::os::unix::fs::DirBuilderExt;
        // Made private to its owner: it holds the subagents' output.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&outputs)
    }
    .map_err(|source| CliError::OutputDir {
        path: outputs.clone(),
        source,
    })?;
    Ok(outputs)
}

/// What starts a supervisor in the background for a durable session: given
/// the options and what discovery settled (the project, the config), a child
/// process running `asynctask supervisor run`.
pub type StartSupervisor =
    dyn Fn(&ServeOptions, &Discovery) -> std::io::Result<std::process::Child> + Send + Sync;

/// `asynctask mcp`: reads the session's opening (asking a client that
/// declares roots for them, unless `--project` was given), settles the
/// project (`--project`, else the client's first root, else the working
/// directory) and its config, and serves: in this process, its tasks ending
/// with it; or, with `durable` (or `durable = true` in the config), through
/// the project's supervisor, started with `start` when none runs.
///
/// # Errors
///
/// [`CliError`] for a bad config or a session that could not run.
pub async fn mcp(
    options: &ServeOptions,
    durable: bool,
    database: Option<&str>,
    start: &StartSupervisor,
) -> Result<(), CliError> {
    // Non-blocking pipes when stdin/stdout are FIFOs (as MCP clients launch
    // servers): a blocking stdin read would hold the process past its shutdown.
    let (stdin, mut stdout) = rmcp::transport::stdio_pipes();
    let mut client = LineReader::new(BufReader::new(stdin), MAX_LINE_BYTES);
    // A signal ends a server whose client has not even opened its session.
    let mut signals =
        asynctask_mcp::TerminationSignals::new().map_err(asynctask_mcp::McpError::Signals)?;
    tracing::info!(
        "asynctask {} on stdio (pid {}): waiting for the client",
        env!("CARGO_PKG_VERSION"),
        std::process::id()
    );
    let opening = tokio::select! {
        opening = open_session(&mut client, &mut stdout, options.project.is_none()) => {
            opening.map_err(CliError::Stdio)?
        }
        signal = signals.recv() => {
            tracing::info!("{signal} before the session opened; ending");
            return Ok(());
        }
    };
    let (start_dir, how) = match (&options.project, &opening.project) {
        (Some(project), _) => (project_dir(Some(project))?, "--project"),
        (None, Some(root)) => (project_dir(Some(root))?, "the client's first root"),
        (None, None) => (project_dir(None)?, "the working directory"),
    };
    let discovery = discover(
        options.config.as_deref(),
        &start_dir,
        options.project.is_none(),
        &ConfigEnv::current(),
    )?;
    let (config, settings) = load_discovered(&discovery)?;
    log_discovery(&discovery, how);
    let workspace_project = discovery.project.clone();
    if workspace_project == Path::new("/") {
        tracing::warn!(
            "the project is / (the client started the server there and named no root): \
             subagents run in /; give the server --project DIR"
        );
    }
    let database = crate::front::front_database(database, settings.database.as_deref())?;
    if let Some(database) = database {
        if durable || settings.durable {
            return Err(CliError::DurableFront);
        }
        let replay: Vec<u8> = opening
            .replay
            .iter()
            .flat_map(|line| line.iter().copied().chain([b'\n']))
            .collect();
        let (stdin, partial) = client.into_inner();
        let reader = std::io::Cursor::new(replay)
            .chain(std::io::Cursor::new(partial))
            .chain(stdin);
        let writer = DropAnswer::new(stdout, opening.answered);
        return crate::front::serve_front(
            database,
            settings.workspace.as_deref(),
            &workspace_project,
            options
                .max_async_tasks_given
                .then_some(options.max_async_tasks),
            options.server_options(),
            reader,
            writer,
        )
        .await;
    }
    if durable || settings.durable {
        let state = options.state(&workspace_project);
        state.check_socket_path()?;
        create_state(&state)?;
        return Ok(
            relay_stdio(&state, &workspace_project, opening, client, stdout, || {
                start(options, &discovery)
            })
            .await?,
        );
    }
    let state = options
        .state_dir
        .as_ref()
        .map(|_| options.state(&workspace_project));
    if let Some(state) = &state {
        create_state(state)?;
    }
    let runner = NotedRunner::new(
        runner_for(options, config, state.as_ref()),
        note_for(&discovery),
    );
    let replay: Vec<u8> = opening
        .replay
        .iter()
        .flat_map(|line| line.iter().copied().chain([b'\n']))
        .collect();
    let (stdin, partial) = client.into_inner();
    let reader = std::io::Cursor::new(replay)
        .chain(std::io::Cursor::new(partial))
        .chain(stdin);
    let writer = DropAnswer::new(stdout, opening.answered);
    Ok(serve_io(
        Arc::new(runner),
        options.server_options(),
        Some(workspace_project),
        reader,
        writer,
    )
    .await?)
}

/// Says in the log where the project is and why, which config serves, and
/// why the project's own config does not.
fn log_discovery(discovery: &Discovery, how: &str) {
    let project = discovery.project.display();
    if discovery.project == discovery.start {
        tracing::info!("project {project} ({how})");
    } else {
        tracing::info!(
            "project {project}: where its asynctask.toml is, found from {} ({how})",
            discovery.start.display()
        );
    }
    match &discovery.config {
        Some(file) => tracing::info!(
            "config {} ({})",
            file.found.path.display(),
            file.found.source
        ),
        None => tracing::info!("no config: no subagents are offered"),
    }
    if let Some((path, why)) = discovery.held_back() {
        tracing::warn!("the project's config {} is {why}", path.display());
    }
}

/// `asynctask supervisor run`: the project's supervisor, until it is
/// stopped, idle or signalled. Returns at once when another supervisor holds
/// the workspace. Its log goes to `supervisor.log` in the state directory
/// when its stderr is no terminal (a front started it); an error before it
/// serves goes to stderr too, where the front that started it reads it.
///
/// # Errors
///
/// [`CliError`] for a bad config, an unusable state directory, or a socket that
/// cannot be bound.
pub async fn supervisor_run(options: &ServeOptions) -> Result<Option<SupervisorExit>, CliError> {
    use std::io::IsTerminal as _;
    let discovery = options.discover()?;
    let state = options.state(&discovery.project);
    state.check_socket_path()?;
    create_state(&state)?;
    let (config, _) = load_discovered(&discovery)?;
    let runner = runner_for(options, config, Some(&state));
    let Some(lock) = SupervisorLock::acquire(&state).map_err(|source| CliError::Lock {
        path: state.lock_file(),
        source,
    })?
    else {
        tracing::info!("a supervisor already runs for {}", state.path().display());
        return Ok(None);
    };
    if !std::io::stderr().is_terminal() {
        empty_if_over(&state.log_file(), LOG_LIMIT);
        use std::os::unix::fs::OpenOptionsExt as _;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(state.log_file())
            .map_err(|source| CliError::Log {
                path: state.log_file(),
                source,
            })?;
        let _ = crate::logging::log_to_file(log);
    }
    let (store, restored) = open_store(&state).await?;
    let store = Arc::new(store);
    let followed = store.followed()?;
    let count = |status| {
        restored
            .iter()
            .filter(|task| task.info.status == status)
            .count()
    };
    let (interrupted, queued) = (
        count(AsyncTaskStatus::Running),
        count(AsyncTaskStatus::Queued),
    );
    if !restored.is_empty() {
        tracing::info!(
            "{} task(s) restored from {} ({interrupted} interrupted, {queued} queued)",
            restored.len(),
            state.store().display()
        );
    }
    // Output files belong to stored tasks: what no stored task names (an
    // earlier supervisor's window of finished tasks) goes now.
    match runner.keep_outputs_of(restored.iter().map(|task| task.info.id.as_str())) {
        Ok(0) => {}
        Ok(removed) => tracing::info!("{removed} output file(s) of tasks no longer stored removed"),
        Err(err) => tracing::warn!(%err, "cannot look for output files of tasks no longer stored"),
    }
    log_discovery(
        &discovery,
        "the supervisor's --project, else its working directory",
    );
    let runner = crate::durable::ReloadingRunner::new(
        runner,
        options.inline_budget,
        &discovery,
        ConfigEnv::current(),
    );
    let server = options.server_options();
    let runtime = Arc::new(
        AsyncTaskRuntime::builder()
            .journal(store.clone(), restored)
            .runner(Arc::new(runner))
            .max_async_tasks(server.max_async_tasks)
            .max_queued_tasks(server.max_queued_tasks)
            .sync_detach(
                SyncDetach::after(server.sync_detach_after)
                    .with_follow_up(asynctask_mcp::DETACH_FOLLOW_UP),
            )
            .try_build()?,
    );
    tracing::info!(
        "supervisor {} serving {} for the project {}",
        std::process::id(),
        state.socket().display(),
        discovery.project.display(),
    );
    let state_path = state.path().to_owned();
    let supervisor = Supervisor::new(
        runtime,
        state,
        lock,
        SupervisorOptions::default()
            .with_server(server)
            .with_idle_exit(options.idle_exit),
    )
    .map_err(|source| CliError::StateDir {
        path: state_path,
        source,
    })?
    .with_project(discovery.project.clone())
    .with_followed(Arc::new(FollowedInStore(store)), followed);
    let exit = supervisor.run().await?;
    tracing::info!("supervisor ended ({exit:?})");
    Ok(Some(exit))
}

/// The workspace's task store as the journal of the tasks clients follow as MCP
/// Tasks.
#[derive(Debug)]
struct FollowedInStore(Arc<Store>);

impl FollowJournal for FollowedInStore {
    fn follow(&self, id: &str, since: u64) -> Result<(), JournalError> {
        self.0.follow(id, since).map_err(JournalError::new)
    }
}

/// The size past which a starting supervisor empties its log.
pub const LOG_LIMIT: u64 = 1024 * 1024;

/// Empties the log at `path` when it holds more than `limit` bytes, saying so
/// in it (best effort: a log that cannot be emptied is left as it is). Whoever
/// writes to it appends, so writes go on at its new end.
fn empty_if_over(path: &Path, limit: u64) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    if meta.len() <= limit {
        return;
    }
    let emptied = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|file| file.set_len(0));
    match emptied {
        Ok(()) => tracing::info!(
            "{} held {} bytes, more than {limit}: emptied",
            path.display(),
            meta.len()
        ),
        Err(err) => tracing::warn!("cannot empty {}: {err}", path.display()),
    }
}

/// How long a starting supervisor waits for the store another process holds
/// for a moment (`supervisor status` reading it while none ran).
const STORE_WAIT: Duration = Duration::from_secs(3);

/// Opens the workspace's task store, waiting a little if another process holds
/// it.
async fn open_store(state: &StateDir) -> Result<(Store, Vec<StoredTask>), CliError> {
    let deadline = tokio::time::Instant::now() + STORE_WAIT;
    loop {
        match Store::open(state.store()) {
            Ok(opened) => return Ok(opened),
            Err(StoreError::Locked { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => return Err(err.into()),
        }
    }
}

/// `asynctask supervisor stop`: cancels every task, waits until the supervisor
/// has ended them and exited (its lock is free: a supervisor holds it for as
/// long as its process lives). `Ok(None)` when none ran.
///
/// # Errors
///
/// [`CliError::SupervisorSilent`] or [`CliError::SupervisorAnswer`] when the
/// supervisor does not answer as it should, [`CliError::Lock`] when its lock
/// cannot be tried, [`CliError::SupervisorStuck`] when it does not exit.
pub async fn supervisor_stop(state: &StateDir) -> Result<Option<u32>, CliError> {
    state.check_owner().map_err(|source| CliError::StateDir {
        path: state.path().to_owned(),
        source,
    })?;
    state.check_socket_path()?;
    let waited = Duration::from_secs(15);
    let deadline = tokio::time::Instant::now() + waited;
    let answer = loop {
        match ask(state, "stop").await {
            Ok(answer) => break answer,
            Err(err) if no_supervisor(&err) => {}
            Err(err) => return Err(CliError::SupervisorSilent(err)),
        }
        // Nobody answers on the socket. A supervisor may still run: one
        // starting (it holds its lock and opens its store before it binds the
        // socket), or one idle with its socket's name moved aside for a
        // moment. Only a free lock means none runs.
        if !state.lock_file().exists() || try_lock(state)?.is_some() {
            return Ok(None);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CliError::SupervisorSilent(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "a supervisor holds {} but did not answer on {} within {waited:?}",
                    state.lock_file().display(),
                    state.socket().display()
                ),
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let Some(pid) = answer["pid"]
        .as_u64()
        .and_then(|pid| u32::try_from(pid).ok())
    else {
        return Err(CliError::SupervisorAnswer { answer });
    };
    // It has ended every task's processes before answering; now it exits.
    // (Its lock is no sign: a session's front may start the next supervisor,
    // which takes the lock the moment this one lets go.)
    loop {
        if process_gone(pid) {
            return Ok(Some(pid));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CliError::SupervisorStuck { pid, waited });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts a supervisor for `state` with `start` and waits until it answers
/// (up to 10 s): its pid. One that exits first with a failure is an error
/// that shows what it printed on stderr.
///
/// # Errors
///
/// [`CliError::Supervisor`] when it cannot be started, exits with an error,
/// or does not answer in time.
pub async fn start_and_wait(
    state: &StateDir,
    start: impl Fn() -> std::io::Result<std::process::Child>,
) -> Result<u64, CliError> {
    use asynctask_supervisor::SupervisorError;
    let mut child = start().map_err(|source| SupervisorError::Start {
        state: state.path().to_owned(),
        source,
    })?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(status) = ask(state, "status").await
            && let Some(pid) = status["pid"].as_u64()
        {
            // It runs on without us: a thread reaps it when it ends.
            std::thread::spawn(move || child.wait());
            return Ok(pid);
        }
        if let Ok(Some(status)) = child.try_wait()
            && !status.success()
        {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                use std::io::Read;
                let _ = pipe.read_to_string(&mut stderr);
            }
            return Err(SupervisorError::Exited {
                state: state.path().to_owned(),
                status,
                stderr: stderr.trim().to_owned(),
            }
            .into());
        }
        if tokio::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(CliError::SupervisorSilent(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no supervisor answered on {} within 10 s",
                    state.socket().display()
                ),
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether no process has the id `pid` any more (a zombie counts as gone:
/// it has exited).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => {
            let Ok(pid) = i32::try_from(pid) else {
                return true;
            };
            // Without /proc: whether a signal could be sent to it.
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
        }
    }
}

/// Tries the workspace's supervisor lock: `Some` (dropped at once by the
/// caller) when no supervisor holds it.
fn try_lock(state: &StateDir) -> Result<Option<SupervisorLock>, CliError> {
    SupervisorLock::acquire(state).map_err(|source| CliError::Lock {
        path: state.lock_file(),
        source,
    })
}

fn create_state(state: &StateDir) -> Result<(), CliError> {
    state.create().map_err(|source| CliError::StateDir {
        path: state.path().to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_over_the_limit_is_emptied_and_one_under_it_kept() {
        let dir = asynctask_test_support::temp_dir("log");
        let dir = dir.path();
        let (big, small) = (dir.join("big.log"), dir.join("small.log"));
        std::fs::write(&big, vec![b'x'; 2048]).expect("written");
        std::fs::write(&small, vec![b'x'; 1024]).expect("written");
        empty_if_over(&big, 1024);
        empty_if_over(&small, 1024);
        empty_if_over(&dir.join("missing.log"), 1024);
        let sizes = [&big, &small].map(|path| std::fs::metadata(path).expect("there").len());
        assert_eq!(sizes, [0, 1024]);
    }
}
