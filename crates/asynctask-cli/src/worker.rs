//! `asynctask worker`: this machine serves the fleet's tasks for the
//! subagents its config names.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use asynctask_fleet::{DatabaseConfig, Worker, WorkerSpec};
use tokio_util::sync::CancellationToken;

use crate::serve::{Workspace, runner_of};
use crate::{CliError, DATABASE_URL_ENV};

/// What `asynctask worker` is given.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// The database (`--database`); `None`: `$ASYNCTASK_DATABASE_URL`.
    pub database: Option<String>,
    /// The subagents config (`--config`); `None`: found from the project.
    pub config: Option<PathBuf>,
    /// The project the subagents work in (`--project`; default the working
    /// directory).
    pub project: Option<PathBuf>,
    /// The workspaces it serves (`--workspace`, repeatable); empty: the
    /// config's `workspaces`. It refuses to start naming none.
    pub workspaces: Vec<String>,
    /// How many tasks run here at once.
    pub capacity: u32,
    /// The worker's name; `None`: the host name.
    pub name: Option<String>,
    /// How long the lease lasts without a heartbeat.
    pub lease: Duration,
    /// How long a task whose result was delivered is kept before the worker
    /// deletes it (`--retain-days`).
    pub retention: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            database: None,
            config: None,
            project: None,
            workspaces: Vec::new(),
            capacity: 1,
            name: None,
            lease: asynctask_fleet::DEFAULT_LEASE,
            retention: asynctask_fleet::DEFAULT_RETENTION,
        }
    }
}

impl WorkerOptions {
    /// The options with every default.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

/// The database's connection settings: `--database`, else
/// `$ASYNCTASK_DATABASE_URL`. Never logged: it may hold a password.
///
/// # Errors
///
/// [`CliError::NoDatabase`] when neither is given, [`CliError::Fleet`]
/// when it does not parse.
pub fn database_config(database: Option<&str>) -> Result<DatabaseConfig, CliError> {
    let url = match database {
        Some(url) => url.to_owned(),
        None => std::env::var(DATABASE_URL_ENV)
            .ok()
            .filter(|url| !url.trim().is_empty())
            .ok_or(CliError::NoDatabase)?,
    };
    DatabaseConfig::parse(&url).map_err(CliError::Fleet)
}

/// This machine's name, for a worker that is given none.
#[must_use]
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "worker".to_owned())
}

/// `asynctask worker`: registers with the fleet and serves the subagents
/// the config names until `shutdown` is cancelled (a termination signal).
///
/// # Errors
///
/// [`CliError`] for a bad config or URL, a config without subagents, no
/// workspace named ([`asynctask_fleet::FleetError::NoWorkspaces`]), or a
/// fleet error that retrying cannot mend (no schema, an older or a newer
/// one).
pub async fn worker(options: &WorkerOptions, shutdown: CancellationToken) -> Result<(), CliError> {
    let database = database_config(options.database.as_deref())?;
    let workspace = Workspace::find(options.config.as_deref(), options.project.as_deref())?;
    // The text that was checked (and hashed, for a project's config), not the
    // file read again: it may have changed since.
    let (config, settings) = workspace.load()?;
    let runner = runner_of(config);
    let subagents = runner.subagent_names();
    if subagents.is_empty() {
        return Err(CliError::NoSubagents);
    }
    let name = options.name.clone().unwrap_or_else(host_name);
    let workspaces = if options.workspaces.is_empty() {
        settings.workspaces
    } else {
        options.workspaces.clone()
    };
    if workspaces.is_empty() {
        return Err(CliError::Fleet(asynctask_fleet::FleetError::NoWorkspaces {
            name,
        }));
    }
    // The first task's reaper waits ready, as every later one does.
    runner.warm_up();
    tracing::info!(
        "asynctask {} worker {name} (pid {}): config {}, project {}, workspaces {}",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        workspace.config.path.display(),
        workspace.project.display(),
        workspaces.join(", ")
    );
    // What the fronts show the model: the entries `asynctask mcp` shows for
    // these subagents.
    let catalog = asynctask_tools::SubagentRunner::catalog(&runner).unwrap_or_default();
    let spec = WorkerSpec::new(name, subagents)
        .with_workspaces(workspaces)
        .with_catalog(catalog)
        .with_capacity(options.capacity)
        .with_lease(options.lease);
    Worker::new(database, spec, Arc::new(runner))
        .with_retention(Some(options.retention))
        .run(shutdown)
        .await?;
    Ok(())
}
