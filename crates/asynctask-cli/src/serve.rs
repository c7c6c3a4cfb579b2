//! `asynctask mcp` and `asynctask supervisor`: serving the tools to MCP clients,
//! in one process per session or (durable) through the workspace's supervisor.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use asynctask_manager::StoredTask;
use asynctask_mcp::{McpServerOptions, serve_stdio};
use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks, MaxQueuedTasks};
use asynctask_process::{ConfigExtension, ProcessRunner, ProcessRunnerConfig};
use asynctask_runtime::AsyncTaskRuntime;
use asynctask_store::{Store, StoreError};
use asynctask_supervisor::{
    StateDir, Supervisor, SupervisorExit, SupervisorLock, SupervisorOptions, ask, relay_stdio,
};
use asynctask_tools::{Nesting, SyncDetach};
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use crate::CliError;

/// What `asynctask mcp` and `asynctask supervisor run` are given.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeOptions {
    /// The subagents config (TOML).
    pub config: PathBuf,
    /// A synchronous call still running after this long becomes a background task.
    pub sync_detach_after: Duration,
    /// The running limit.
    pub max_async_tasks: MaxAsyncTasks,
    /// How many launches past the running limit wait in a queue.
    pub max_queued_tasks: MaxQueuedTasks,
    /// How many subagents one session may launch in all (`None`: no cap).
    pub max_launches_per_session: Option<u32>,
    /// How deep subagents may nest.
    pub max_depth: u32,
    /// Where a durable supervisor keeps its state (default: `.asynctask/` beside
    /// the config).
    pub state_dir: Option<PathBuf>,
    /// A durable supervisor exits after this long with no session and no task.
    pub idle_exit: Duration,
    /// How much of a subagent's output a result holds (JSON-escaped
    /// characters); `None`: the config's `inline_budget`, else the default.
    pub inline_budget: Option<usize>,
}

impl ServeOptions {
    /// The options with every default, for `config`.
    #[must_use]
    pub fn new(config: impl Into<PathBuf>) -> Self {
        ServeOptions {
            config: config.into(),
            sync_detach_after: McpServerOptions::default().sync_detach_after,
            max_async_tasks: MaxAsyncTasks::default(),
            max_queued_tasks: McpServerOptions::DEFAULT_MAX_QUEUED_TASKS,
            max_launches_per_session: Some(McpServerOptions::DEFAULT_MAX_LAUNCHES),
            max_depth: McpServerOptions::DEFAULT_MAX_DEPTH,
            state_dir: None,
            idle_exit: SupervisorOptions::default().idle_exit,
            inline_budget: None,
        }
    }

    /// The workspace's state directory: the one given, else `.asynctask/` in the
    /// config file's directory.
    #[must_use]
    pub fn state(&self) -> StateDir {
        StateDir::new(
            self.state_dir
                .clone()
                .unwrap_or_else(|| default_state_dir(&self.config)),
        )
    }

    fn server_options(&self) -> McpServerOptions {
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

/// `.asynctask/` in the directory of `config` (made absolute).
#[must_use]
pub fn default_state_dir(config: &Path) -> PathBuf {
    let config = std::path::absolute(config).unwrap_or_else(|_| config.to_owned());
    config.parent().unwrap_or(Path::new(".")).join(".asynctask")
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CliSettings {
    /// `durable = true`: `asynctask mcp` serves as with `--durable`.
    pub durable: bool,
}

impl ConfigExtension for CliSettings {
    const KEYS: &'static [&'static str] = &["durable"];

    fn read<'de, D: Deserializer<'de>>(&mut self, key: &str, value: D) -> Result<(), D::Error> {
        // `durable` is the one key there is.
        debug_assert_eq!(key, "durable");
        self.durable = bool::deserialize(value)?;
        Ok(())
    }
}

/// Loads the subagents config: the runner's part, and this command's own
/// keys ([`CliSettings`]).
///
/// # Errors
///
/// [`CliError::Config`] when the config cannot be loaded.
pub fn load_config(path: &Path) -> Result<(ProcessRunnerConfig, CliSettings), CliError> {
    Ok(ProcessRunnerConfig::load_with(path)?)
}

/// The hidden first argument that makes the `asynctask` binary act as the
/// reaper between a runner and a subagent's command (see
/// [`asynctask_process::reaper`]).
pub const REAPER_ARG: &str = "__asynctask-reaper";

/// Loads the subagents config into a runner whose subagents run under this
/// binary as their reaper (so none outlives its task, nor this process when it
/// is killed).
///
/// # Errors
///
/// [`CliError::Config`] when the config cannot be loaded.
pub fn load_runner(path: &Path) -> Result<ProcessRunner, CliError> {
    let runner = ProcessRunner::new(load_config(path)?.0);
    Ok(match std::env::current_exe() {
        Ok(exe) => runner.with_reaper(exe, vec![REAPER_ARG.into()]),
        // No path to ourselves (deleted binary): the parent-death signal on
        // each direct child still applies.
        Err(_) => runner,
    })
}

/// [`load_runner`], keeping whole outputs in `state`'s `outputs/` when a
/// state directory is given (else in a temporary directory removed when the
/// runner is dropped).
fn runner_for(options: &ServeOptions, state: Option<&StateDir>) -> Result<ProcessRunner, CliError> {
    let mut runner = load_runner(&options.config)?;
    if let Some(chars) = options.inline_budget {
        runner = runner.with_inline_budget(chars);
    }
    Ok(match state {
        Some(state) => runner.with_output_dir(state.outputs()),
        None => runner,
    })
}

/// Where `asynctask run` keeps the subagent's whole output: `dir` when given,
/// else `outputs/` in the workspace's state directory (`.asynctask/` beside
/// the config, made private to its owner); a `dir` that does not exist is
/// made private to its owner too. The path the result names must still hold
/// the file after the command exits, so it is never a temporary directory;
/// the files a result names are kept until removed by hand (`asynctask run`
/// removes a run's `<task id>.out` when its result names none).
///
/// ```
/// # use std::path::Path;
/// let dir = std::env::temp_dir().join(format!("asynctask-doc-run-{}", std::process::id()));
/// let config = dir.join("subagents.toml");
/// let outputs = asynctask_cli::serve::run_output_dir(&config, None)?;
/// assert_eq!(outputs, dir.join(".asynctask").join("outputs"));
/// assert!(outputs.is_dir());
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`CliError`] when the directory cannot be made.
pub fn run_output_dir(config: &Path, dir: Option<&Path>) -> Result<PathBuf, CliError> {
    let outputs = match dir {
        Some(dir) => dir.to_owned(),
        None => {
            let state = ServeOptions::new(config).state();
            create_state(&state)?;
            state.outputs()
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

/// Whether `asynctask mcp` serves durably: `--durable`, or `durable = true` at
/// the top of the config.
///
/// # Errors
///
/// [`CliError::Config`] for a config that cannot be loaded.
pub fn wants_durable(options: &ServeOptions, flag: bool) -> Result<bool, CliError> {
    if flag {
        return Ok(true);
    }
    Ok(load_config(&options.config)?.1.durable)
}

/// `asynctask mcp`: one server on stdio, its tasks ending with it.
///
/// # Errors
///
/// [`CliError`] for a bad config or a session that could not run.
pub async fn mcp(options: &ServeOptions) -> Result<(), CliError> {
    let state = options.state_dir.as_ref().map(|_| options.state());
    if let Some(state) = &state {
        create_state(state)?;
    }
    let runner = runner_for(options, state.as_ref())?;
    Ok(serve_stdio(Arc::new(runner), options.server_options()).await?)
}

/// `asynctask mcp --durable`: relays stdio to the workspace's supervisor,
/// starting it with `start` when none runs.
///
/// # Errors
///
/// [`CliError`] when the state directory cannot be made, or no supervisor
/// answers.
pub async fn mcp_durable(
    options: &ServeOptions,
    start: impl Fn(&ServeOptions) -> std::io::Result<std::process::Child>,
) -> Result<(), CliError> {
    // The config is checked here too, so a broken one is reported to the user
    // of this session, not only in the supervisor's log.
    load_runner(&options.config)?;
    let state = options.state();
    state.check_socket_path()?;
    create_state(&state)?;
    Ok(relay_stdio(&state, || start(options)).await?)
}

/// `asynctask supervisor run`: the workspace's supervisor, until it is stopped,
/// idle or signalled. Returns at once when another supervisor holds the
/// workspace.
///
/// # Errors
///
/// [`CliError`] for a bad config, an unusable state directory, or a socket that
/// cannot be bound.
pub async fn supervisor_run(options: &ServeOptions) -> Result<Option<SupervisorExit>, CliError> {
    let state = options.state();
    state.check_socket_path()?;
    create_state(&state)?;
    let runner = runner_for(options, Some(&state))?;
    let Some(lock) = SupervisorLock::acquire(&state).map_err(|source| CliError::Lock {
        path: state.lock_file(),
        source,
    })?
    else {
        eprintln!(
            "asynctask: a supervisor already runs for {}",
            state.path().display()
        );
        return Ok(None);
    };
    empty_if_over(&state.log_file(), LOG_LIMIT);
    let (store, restored) = open_store(&state).await?;
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
        eprintln!(
            "asynctask: {} task(s) restored from {} ({interrupted} interrupted, {queued} queued)",
            restored.len(),
            state.store().display()
        );
    }
    let server = options.server_options();
    let runtime = Arc::new(
        AsyncTaskRuntime::builder()
            .journal(Arc::new(store), restored)
            .runner(Arc::new(runner))
            .max_async_tasks(server.max_async_tasks)
            .max_queued_tasks(server.max_queued_tasks)
            .sync_detach(
                SyncDetach::after(server.sync_detach_after)
                    .with_follow_up(asynctask_mcp::DETACH_FOLLOW_UP),
            )
            .try_build()?,
    );
    eprintln!(
        "asynctask: supervisor {} serving {}",
        std::process::id(),
        state.socket().display()
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
    })?;
    let exit = supervisor.run().await?;
    eprintln!("asynctask: supervisor ended ({exit:?})");
    Ok(Some(exit))
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
        Ok(()) => eprintln!(
            "asynctask: {} held {} bytes, more than {limit}: emptied",
            path.display(),
            meta.len()
        ),
        Err(err) => eprintln!("asynctask: cannot empty {}: {err}", path.display()),
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

/// `asynctask supervisor status`: the supervisor's pid (`null` when none runs)
/// and its tasks — when none runs, the tasks its store holds, those that were
/// running when it died marked `interrupted` (the next supervisor reports them
/// so). A store held by a supervisor that is starting is waited for (up to
/// 3 s), and the supervisor asked again.
///
/// # Errors
///
/// [`CliError::SupervisorSilent`] when a supervisor answers with something
/// unreadable, [`CliError::Store`] when the store cannot be read.
pub async fn supervisor_status(state: &StateDir) -> Result<Value, CliError> {
    state.check_socket_path()?;
    let deadline = tokio::time::Instant::now() + STORE_WAIT;
    loop {
        match ask(state, "status").await {
            Ok(status) => return Ok(status),
            Err(err) if no_supervisor(&err) => {}
            Err(err) => return Err(CliError::SupervisorSilent(err)),
        }
        // A supervisor starting holds the store before it answers: ask again.
        match stored_status(state) {
            Err(CliError::Store(StoreError::Locked { .. }))
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            done => return done,
        }
    }
}

/// The status when no supervisor runs: what the store holds.
fn stored_status(state: &StateDir) -> Result<Value, CliError> {
    if !state.store().exists() {
        return Ok(json!({"pid": null, "sessions": 0, "tasks": []}));
    }
    let (_store, tasks) = Store::open(state.store())?;
    let tasks: Vec<Value> = tasks
        .iter()
        .map(|task| {
            let running = task.info.status == AsyncTaskStatus::Running;
            json!({
                "id": task.info.id,
                "subagent": task.info.subagent_name,
                "status": if running { "interrupted".to_owned() } else { task.info.status.to_string() },
                "session": task.origin,
                "delivered": task.info.notified_at.is_some(),
                "running": false,
            })
        })
        .collect();
    Ok(json!({"pid": null, "sessions": 0, "tasks": tasks}))
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
        if try_lock(state)?.is_some() {
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
    // It has ended every task's processes before answering; now it exits, and
    // its lock is free once it has.
    loop {
        if try_lock(state)?.is_some() {
            return Ok(Some(pid));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CliError::SupervisorStuck { pid, waited });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
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

/// Whether `err` means nobody listens on the socket.
fn no_supervisor(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_over_the_limit_is_emptied_and_one_under_it_kept() {
        let dir = std::env::temp_dir().join(format!("asynctask-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let (big, small) = (dir.join("big.log"), dir.join("small.log"));
        std::fs::write(&big, vec![b'x'; 2048]).expect("written");
        std::fs::write(&small, vec![b'x'; 1024]).expect("written");
        empty_if_over(&big, 1024);
        empty_if_over(&small, 1024);
        empty_if_over(&dir.join("missing.log"), 1024);
        let sizes = [&big, &small].map(|path| std::fs::metadata(path).expect("there").len());
        std::fs::remove_dir_all(&dir).expect("removed");
        assert_eq!(sizes, [0, 1024]);
    }
}
