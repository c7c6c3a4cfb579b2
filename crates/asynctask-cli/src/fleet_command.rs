//! `asynctask fleet`: its subcommands, and what each prints.

use std::io::Write;
use std::process::ExitCode;

use asynctask_cli::CliError;
use asynctask_model::MaxAsyncTasks;
use clap::Subcommand;

use crate::out;

#[derive(Debug, Subcommand)]
pub(crate) enum FleetCommand {
    /// Create the fleet's schema in the database, or upgrade it to this
    /// version's. Run it as the role that owns the schema, before the
    /// fronts and workers (which never change the schema) start.
    Migrate {
        /// The fleet's database (a postgresql:// URL or key=value string).
        /// Default: $ASYNCTASK_DATABASE_URL. Never logged.
        #[arg(long, value_name = "URL")]
        database: Option<String>,
    },
    /// Show the workers (name, state, tasks running of capacity, lease,
    /// subagents, workspaces), each workspace's queue and the running tasks; read-only.
    Status {
        /// The fleet's database (a postgresql:// URL or key=value string).
        /// Default: $ASYNCTASK_DATABASE_URL. Never logged.
        #[arg(long, value_name = "URL")]
        database: Option<String>,
        /// Print it as JSON, in the stable shape docs/fleet.md describes.
        #[arg(long)]
        json: bool,
    },
    /// Set a workspace's task-max-async across the fleet. A front started
    /// later with --max-async-tasks sets it again: the last setting wins.
    SetMaxAsync {
        /// The fleet's database. Default: $ASYNCTASK_DATABASE_URL. Never logged.
        #[arg(long, value_name = "URL")]
        database: Option<String>,
        /// The workspace (a front's `workspace` in its config, else
        /// user@host:/project/path).
        #[arg(value_parser = asynctask_cli::front::fleet_workspace)]
        workspace: String,
        /// How many of its tasks run at once: 1-100, or `unlimited`.
        #[arg(value_name = "N|unlimited", allow_negative_numbers = true, value_parser = asynctask_cli::front::fleet_max_async)]
        max: MaxAsyncTasks,
        /// Set it even for a workspace the fleet has never seen (else refused: a likely typo).
        #[arg(long)]
        create: bool,
    },
    /// Print a task's whole output as the fleet stores it (its last MiB),
    /// when its result was cut.
    Output {
        /// The fleet's database (a postgresql:// URL or key=value string).
        /// Default: $ASYNCTASK_DATABASE_URL. Never logged.
        #[arg(long, value_name = "URL")]
        database: Option<String>,
        /// The task's id.
        id: String,
    },
}

/// Runs one `asynctask fleet` subcommand.
pub(crate) async fn run(command: FleetCommand) -> Result<ExitCode, CliError> {
    use asynctask_cli::front::{fleet_migrate, fleet_output, fleet_set_max_async, fleet_status};
    match command {
        FleetCommand::Migrate { database } => out(&fleet_migrate(database.as_deref()).await?)?,
        FleetCommand::Status { database, json } => {
            out(fleet_status(database.as_deref(), json).await?.trim_end())?;
        }
        FleetCommand::SetMaxAsync {
            database,
            workspace,
            max,
            create,
        } => out(&fleet_set_max_async(database.as_deref(), &workspace, max, create).await?)?,
        FleetCommand::Output { database, id } => {
            let text = fleet_output(database.as_deref(), &id).await?;
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
                .map_err(CliError::ClosedStdout)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
