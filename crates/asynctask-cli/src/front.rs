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

/// The database a front serves on: `--database`, else
/// `$ASYNCTASK_DATABASE_URL`, else `database` in the config (a project's
/// config only once the user trusted it); `None` when none is given (a
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
    // The user's own choices first: a project's file counts last (and only
    // once the user trusted it, or discovery would not have read it).
    let Some(url) = [flag, env.as_deref(), config]
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
/// else [`default_workspace`] of this user, this machine and the project.
///
/// ```
/// # use std::path::Path;
/// use asynctask_cli::front::workspace_name;
/// assert_eq!(workspace_name(Some("team-a"), Path::new("/work/p")), "team-a");
/// let default = workspace_name(None, Path::new("/work/p"));
/// assert!(default.contains('@') && default.ends_with(":/work/p"), "{default}");
/// ```
#[must_use]
pub fn workspace_name(configured: Option<&str>, project: &Path) -> String {
    configured.map_or_else(
        || default_workspace(&user_name(), &host_name(), project),
        str::to_owned,
    )
}

/// The longest user or host name a default workspace keeps, in characters.
pub const MAX_WORKSPACE_PART: usize = 64;

/// The workspace of a front whose config names none: `user@host:path`,
/// the user and host names cut at [`MAX_WORKSPACE_PART`] characters. Two
/// people whose projects have the same path (`/workspace` in two dev
/// containers) get different workspaces, so neither gets the other's
/// results nor runs tasks on the other's workers.
///
/// ```
/// # use std::path::Path;
/// use asynctask_cli::front::default_workspace;
/// assert_eq!(default_workspace("alice", "desk", Path::new("/workspace")), "alice@desk:/workspace");
/// assert_ne!(
///     default_workspace("alice", "desk", Path::new("/workspace")),
///     default_workspace("bob", "desk", Path::new("/workspace"))
/// );
/// ```
#[must_use]
pub fn default_workspace(user: &str, host: &str, project: &Path) -> String {
    let cut = |name: &str| name.chars().take(MAX_WORKSPACE_PART).collect::<String>();
    format!("{}@{}:{}", cut(user), cut(host), project.display())
}

/// The name of the user this process runs as: from the user database,
/// else `$USER`, else the numeric user id.
#[must_use]
pub fn user_name() -> String {
    let uid = nix::unistd::geteuid();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|user| user.name)
        .or_else(|| std::env::var("USER").ok())
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| uid.to_string())
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
/// missing, older or newer schema); [`CliError`] when the session cannot run.
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
    if asynctask_tools::SubagentRunner::catalog(&*runner).is_some_and(|c| c.is_empty()) {
        tracing::warn!(
            "no live worker serves this workspace yet: a worker runs only the workspaces it \
             names (`asynctask worker --workspace NAME`)"
        );
    }
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

/// `asynctask fleet migrate`: creates the fleet's schema, or upgrades it to
/// [`asynctask_fleet::SCHEMA_VERSION`], and says what it did. Run it as the
/// role that owns the schema; fronts, workers and `fleet status` never
/// change the schema and refuse one that is missing or older.
///
/// # Errors
///
/// [`CliError::NoDatabase`], [`CliError::Fleet`] (a newer schema, a role
/// without the rights, an unreachable database).
pub async fn fleet_migrate(database: Option<&str>) -> Result<String, CliError> {
    let config = database_config(database)?;
    let found = asynctask_fleet::Fleet::migrate(config).await?;
    let now = asynctask_fleet::SCHEMA_VERSION;
    Ok(match found {
        0 => format!("created the fleet's schema, version {now}"),
        found if found == now => format!("the fleet's schema is already at version {now}"),
        found => format!("upgraded the fleet's schema from version {found} to {now}"),
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
            "must name a workspace (a front's `workspace` in its config, else \
             user@host:/absolute/project/path), not be blank"
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
    use std::path::Path;

    use asynctask_fleet::TlsMode;

    use super::{MAX_WORKSPACE_PART, default_workspace, front_database};

    #[test]
    fn fronts_with_the_same_path_but_another_user_or_host_get_other_workspaces() {
        let path = Path::new("/workspace");
        let names = [
            default_workspace("alice", "devbox-1", path),
            default_workspace("bob", "devbox-1", path),
            default_workspace("alice", "devbox-2", path),
            default_workspace("alice", "devbox-1", Path::new("/other")),
        ];
        assert_eq!(names[0], "alice@devbox-1:/workspace");
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // Bounded: a very long user or host name is cut.
        let long = "x".repeat(1_000);
        assert_eq!(
            default_workspace(&long, &long, path).len(),
            2 * MAX_WORKSPACE_PART + ":/workspace".len() + 1
        );
    }

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
