//! `asynctask mcp --database`: the MCP server as a front of a fleet. The same
//! tools and texts as the plain server; its `task` submits to the fleet's
//! database, whose workers run the subagents.

use std::path::Path;
use std::sync::Arc;

use asynctask_fleet::{DatabaseConfig, FleetFront, FleetOptions};
use asynctask_mcp::{DETACH_FOLLOW_UP, McpServerOptions, serve_runtime};
use asynctask_model::MaxAsyncTasks;
use asynctask_runtime::AsyncTaskRuntime;
use asynctask_tools::SyncDetach;
use tokio_util::sync::CancellationToken;

use crate::worker::{database_config, host_name};
use crate::{CliError, DATABASE_URL_ENV};

/// The database a front serves on: `--database`, else `database` in the
/// config, else `$ASYNCTASK_DATABASE_URL`; `None` when none is given (a
/// plain server). Never logged: it may hold a password.
///
/// # Errors
///
/// [`CliError::Fleet`] when the one given does not parse (as a worker's:
/// libpq's `sslmode`, `sslrootcert` and `passfile` included).
pub fn front_database(
    flag: Option<&str>,
    config: Option<&str>,
) -> Result<Option<DatabaseConfig>, CliError> {
    let env = std::env::var(DATABASE_URL_ENV).ok();
    let Some(url) = [flag, config, env.as_deref()]
        .into_iter()
        .flatten()
        .find(|url| !url.trim().is_empty())
    else {
        return Ok(None);
    };
    DatabaseConfig::parse(url)
        .map(Some)
        .map_err(CliError::Fleet)
}

/// The fleet workspace of a front in `project`: the config's `workspace`,
/// else the project's path.
///
/// ```
/// # use std::path::Path;
/// use asynctask_cli::front::workspace_name;
/// assert_eq!(workspace_name(None, Path::new("/work/p")), "/work/p");
/// assert_eq!(workspace_name(Some("team-a"), Path::new("/work/p")), "team-a");
/// ```
#[must_use]
pub fn workspace_name(configured: Option<&str>, project: &Path) -> String {
    configured.map_or_else(|| project.display().to_string(), str::to_owned)
}

/// Serves one MCP session as a front of the fleet on `database`, until the
/// client goes away or a signal comes; then the deliveries still owed are
/// marked and the front retires: the results of its tasks still running go
/// to the next front of the workspace.
///
/// The running limit is the fleet's (the workspace's `task-max-async`
/// across its workers): this server's own is lifted, and a task waiting for a
/// worker shows as running here. `max_async`, when given (`--max-async-tasks`),
/// is set as the workspace's limit when the front starts: of two fronts that
/// disagree, the last to start wins.
///
/// # Errors
///
/// [`CliError::Fleet`] when the database cannot be reached or refuses (a
/// newer schema); [`CliError`] when the session cannot run.
pub async fn serve_front<R, W>(
    database: DatabaseConfig,
    workspace: Option<&str>,
    project: &Path,
    max_async: Option<MaxAsyncTasks>,
    options: McpServerOptions,
    reader: R,
    writer: W,
) -> Result<(), CliError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let workspace = workspace_name(workspace, project);
    let name = format!("{}:{}", host_name(), std::process::id());
    let front =
        Arc::new(FleetFront::connect(database, FleetOptions::new(), &workspace, &name).await?);
    if let Some(max) = max_async {
        front.set_max_async(max).await?;
        tracing::info!(
            max = max.get(),
            "set the workspace's task-max-async across the fleet"
        );
    }
    tracing::info!("serving as a front of the fleet, workspace {workspace}");
    let runner = front.runner();
    let runtime = Arc::new(
        AsyncTaskRuntime::builder()
            .runner(runner.clone())
            .max_async_tasks(MaxAsyncTasks::UNLIMITED)
            .max_queued_tasks(options.max_queued_tasks)
            .sync_detach(
                SyncDetach::after(options.sync_detach_after).with_follow_up(DETACH_FOLLOW_UP),
            )
            .journal(front.journal(), Vec::new())
            .try_build()
            .map_err(asynctask_mcp::McpError::from)?,
    );
    front.attach(runtime.manager().clone());
    let stop = CancellationToken::new();
    let looping = tokio::spawn({
        let front = Arc::clone(&front);
        let stop = stop.clone();
        async move { front.run(stop).await }
    });
    let served = serve_runtime(
        runtime,
        runner,
        options,
        Some(project.to_path_buf()),
        front.closing(),
        reader,
        writer,
    )
    .await;
    stop.cancel();
    let _ = looping.await;
    Ok(served?)
}

/// `asynctask fleet status`: the fleet's workers, queues and running tasks,
/// as text for a human, or with `json` as the stable JSON shape of
/// [`asynctask_fleet::FleetStatus::to_json`] (pretty-printed).
///
/// # Errors
///
/// [`CliError::NoDatabase`] when no database is given, [`CliError::Fleet`]
/// when it cannot be read.
pub async fn fleet_status(database: Option<&str>, json: bool) -> Result<String, CliError> {
    let config = database_config(database)?;
    let mut fleet = asynctask_fleet::Fleet::connect(&config, FleetOptions::new()).await?;
    let status = fleet.status().await?;
    Ok(if json {
        serde_json::to_string_pretty(&status.to_json()).unwrap_or_default()
    } else {
        status.to_string()
    })
}

/// `fleet set-max-async`'s limit: `unlimited`, or an integer from 1 to 100.
///
/// ```
/// use asynctask_cli::front::fleet_max_async;
/// assert_eq!(fleet_max_async("3").map(|max| max.get()), Ok(3));
/// assert_eq!(fleet_max_async("unlimited").map(|max| max.get()), Ok(-1));
/// assert!(fleet_max_async("-1").unwrap_err().contains("`unlimited`"));
/// assert!(fleet_max_async("101").is_err());
/// assert!(fleet_max_async("99999999999999999999999").is_err());
/// ```
///
/// # Errors
///
/// The rule, in words, for anything else.
pub fn fleet_max_async(value: &str) -> Result<MaxAsyncTasks, String> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("unlimited") {
        return Ok(MaxAsyncTasks::UNLIMITED);
    }
    value
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 1)
        .and_then(|n| MaxAsyncTasks::new(n).ok())
        .ok_or_else(|| {
            format!("must be an integer from 1 to 100, or `unlimited` for no limit, not {value:?}")
        })
}

/// A workspace's name as a fleet command takes it: not blank.
///
/// # Errors
///
/// The rule, in words, for a blank one.
pub fn fleet_workspace(value: &str) -> Result<String, String> {
    if value.trim().is_empty() {
        Err(
            "must name a workspace (a front's `workspace` in its config, else its project's \
             absolute path), not be blank"
                .to_owned(),
        )
    } else {
        Ok(value.to_owned())
    }
}

/// `asynctask fleet set-max-async WORKSPACE N|unlimited`: sets the
/// workspace's `task-max-async` across the fleet ([`asynctask_fleet::Fleet::set_max_async`]),
/// and says what it was. Tasks already running keep running; queued ones
/// start as the new limit allows. A front started later with
/// `--max-async-tasks` sets it again: the last setting wins, whoever made it.
/// A workspace the fleet has never seen is refused (most likely a typo)
/// unless `create`.
///
/// # Errors
///
/// [`CliError::NoDatabase`], [`CliError::Fleet`],
/// [`CliError::UnknownWorkspace`].
pub async fn fleet_set_max_async(
    database: Option<&str>,
    workspace: &str,
    max: MaxAsyncTasks,
    create: bool,
) -> Result<String, CliError> {
    let config = database_config(database)?;
    let fleet = asynctask_fleet::Fleet::connect(&config, FleetOptions::new()).await?;
    let before = fleet.max_async(workspace).await?;
    if before.is_none() && !create {
        return Err(CliError::UnknownWorkspace(workspace.to_owned()));
    }
    fleet.set_max_async(workspace, max).await?;
    let limit = |max: MaxAsyncTasks| {
        if max.is_unlimited() {
            "unlimited".to_owned()
        } else {
            max.get().to_string()
        }
    };
    let was = match before {
        Some(before) => format!("it was {}", limit(before)),
        None => "a workspace the fleet had not seen, created".to_owned(),
    };
    Ok(format!(
        "{workspace}: task-max-async is now {} across the fleet ({was}). \
         A front started with --max-async-tasks sets it again.",
        limit(max)
    ))
}

/// `asynctask fleet output ID`: the task's whole output as the fleet stores
/// it (bounded: see [`asynctask_fleet::MAX_STORED_OUTPUT_BYTES`]).
///
/// # Errors
///
/// [`CliError::NoDatabase`], [`CliError::Fleet`], and
/// [`CliError::NoStoredOutput`] when the fleet stores none for the task (its
/// result was not cut, or no such task).
pub async fn fleet_output(database: Option<&str>, id: &str) -> Result<String, CliError> {
    let config = database_config(database)?;
    let fleet = asynctask_fleet::Fleet::connect(&config, FleetOptions::new()).await?;
    fleet
        .whole_output(id)
        .await?
        .ok_or_else(|| CliError::NoStoredOutput(id.to_owned()))
}

#[cfg(test)]
mod tests {
    use asynctask_fleet::TlsMode;

    use super::front_database;

    #[test]
    fn a_front_reads_libpq_s_tls_and_password_file_parameters() {
        let url = "postgresql://asynctask@db.internal/asynctask?sslmode=verify-full\
                   &sslrootcert=/etc/asynctask/ca.pem&passfile=/etc/asynctask/pgpass";
        let config = front_database(Some(url), None)
            .expect("parses")
            .expect("a database");
        assert_eq!(config.tls_mode(), TlsMode::VerifyFull);
        let config = front_database(None, Some("host=db sslrootcert=system"))
            .expect("parses")
            .expect("a database");
        assert_eq!(config.tls_mode(), TlsMode::VerifyFull);
        assert!(front_database(Some("host=db sslmode=allow"), None).is_err());
    }
}
