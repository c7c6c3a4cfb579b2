//! `FleetStatus`: what `asynctask fleet status` shows — the workers and
//! their leases, the queue of each workspace, the running tasks — read in
//! one transaction, and its text for a human.

use std::fmt;

use asynctask_model::MaxAsyncTasks;
use asynctask_tools::{escape_for_terminal as shown, format_duration, iso_time};

use crate::fleet::{from_db, self_now};
use crate::{Fleet, FleetError};

/// The fleet at one moment, read in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetStatus {
    /// When it was read, in Unix milliseconds of the fleet's clock.
    pub now: u64,
    /// The live workers, and the lost ones whose lease ended within the last
    /// hour, oldest registration first.
    pub workers: Vec<WorkerStatus>,
    /// Each workspace with queued or running tasks, by name.
    pub workspaces: Vec<WorkspaceStatus>,
    /// Every running task, oldest start first.
    pub running: Vec<RunningTask>,
}

/// One worker registration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStatus {
    /// Its id (a new one at every registration).
    pub id: i64,
    /// Its name.
    pub name: String,
    /// `live`, `expired` (its lease ran out, not reaped yet) or `lost`.
    pub state: String,
    /// How many tasks it runs at once.
    pub capacity: i32,
    /// How many it runs now.
    pub running: i64,
    /// When its lease expires (or expired), in Unix milliseconds.
    pub lease_expires_at: u64,
    /// The subagents it serves.
    pub subagents: Vec<String>,
    /// The workspaces it serves.
    pub workspaces: Vec<String>,
}

/// One workspace's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkspaceStatus {
    /// Its name.
    pub name: String,
    /// Its `task-max-async` across the fleet (`-1`: no limit).
    pub max_async: i32,
    /// How many of its tasks run.
    pub running: i64,
    /// How many wait in the queue.
    pub queued: i64,
    /// When the oldest queued task was submitted, if any is queued.
    pub oldest_queued_at: Option<u64>,
    /// How many results no front has delivered yet.
    pub undelivered: i64,
}

/// One running task.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunningTask {
    /// Its id.
    pub id: String,
    /// Its workspace.
    pub workspace: String,
    /// Its subagent.
    pub subagent_name: String,
    /// The worker that runs it.
    pub worker: String,
    /// When it started.
    pub started_at: u64,
    /// Its last line of progress, if any.
    pub progress: Option<String>,
}

/// How long a lost worker stays in the status.
const LOST_SHOWN_MS: i64 = 60 * 60 * 1000;

impl Fleet {
    /// A workspace's `task-max-async` across the fleet, as
    /// [`set_max_async`](Self::set_max_async) (or a front's first
    /// submission, with the default 5) set it; `None` for a workspace the
    /// fleet has never seen.
    ///
    /// # Errors
    ///
    /// [`FleetError::Empty`] for a blank workspace, [`FleetError::Database`].
    pub async fn max_async(&self, workspace: &str) -> Result<Option<MaxAsyncTasks>, FleetError> {
        crate::fleet::non_empty(workspace, "a workspace")?;
        let row = self
            .client
            .query_opt(
                "SELECT max_async FROM asynctask_workspaces WHERE name = $1",
                &[&workspace],
            )
            .await
            .map_err(FleetError::db("reading the workspace's limit"))?;
        // The column's CHECK admits only what `MaxAsyncTasks` does.
        Ok(row.and_then(|row| MaxAsyncTasks::new(i64::from(row.get::<_, i32>(0))).ok()))
    }

    /// The fleet's status: workers, queues, running tasks, in one snapshot.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn status(&mut self) -> Result<FleetStatus, FleetError> {
        let clock = self.clock.clone();
        let tx = self
            .client
            .build_transaction()
            .read_only(true)
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .start()
            .await
            .map_err(FleetError::db("beginning a status read"))?;
        let now = self_now(&clock, &tx).await?;
        let workers = tx
            .query(
                "SELECT w.id, w.name, w.state, w.capacity, w.lease_expires_at, w.subagents,
                    (SELECT count(*) FROM asynctask_tasks t
                     WHERE t.worker_id = w.id AND t.status = 'running'),
                    w.workspaces
                 FROM asynctask_workers w
                 WHERE w.state = 'live' OR w.lease_expires_at > $1::bigint - $2::bigint
                 ORDER BY w.id",
                &[&now, &LOST_SHOWN_MS],
            )
            .await
            .map_err(FleetError::db("reading the workers"))?;
        let workspaces = tx
            .query(
                "SELECT s.name, s.max_async,
                    count(*) FILTER (WHERE t.status = 'running'),
                    count(*) FILTER (WHERE t.status = 'queued'),
                    min(t.launched_at) FILTER (WHERE t.status = 'queued'),
                    count(*) FILTER (WHERE t.notified_at IS NULL
                        AND t.status IN ('completed', 'failed', 'cancelled'))
                 FROM asynctask_workspaces s JOIN asynctask_tasks t ON t.workspace = s.name
                 GROUP BY s.name, s.max_async
                 HAVING count(*) FILTER (WHERE t.status IN ('running', 'queued')) > 0
                    OR count(*) FILTER (WHERE t.notified_at IS NULL
                        AND t.status IN ('completed', 'failed', 'cancelled')) > 0
                 ORDER BY s.name",
                &[],
            )
            .await
            .map_err(FleetError::db("reading the queues"))?;
        let running = tx
            .query(
                "SELECT t.id, t.workspace, t.subagent_name, w.name, t.started_at, t.progress
                 FROM asynctask_tasks t JOIN asynctask_workers w ON w.id = t.worker_id
                 WHERE t.status = 'running'
                 ORDER BY t.started_at, t.seq",
                &[],
            )
            .await
            .map_err(FleetError::db("reading the running tasks"))?;
        tx.commit()
            .await
            .map_err(FleetError::db("ending a status read"))?;
        Ok(FleetStatus {
            now: from_db(now),
            workers: workers
                .iter()
                .map(|row| {
                    let lease: i64 = row.get(4);
                    let state: String = row.get(2);
                    WorkerStatus {
                        id: row.get(0),
                        name: row.get(1),
                        state: if state == "live" && lease <= now {
                            "expired".to_owned()
                        } else {
                            state
                        },
                        capacity: row.get(3),
                        lease_expires_at: from_db(lease),
                        subagents: row.get(5),
                        running: row.get(6),
                        workspaces: row.get(7),
                    }
                })
                .collect(),
            workspaces: workspaces
                .iter()
                .map(|row| WorkspaceStatus {
                    name: row.get(0),
                    max_async: row.get(1),
                    running: row.get(2),
                    queued: row.get(3),
                    oldest_queued_at: row.get::<_, Option<i64>>(4).map(from_db),
                    undelivered: row.get(5),
                })
                .collect(),
            running: running
                .iter()
                .map(|row| RunningTask {
                    id: row.get(0),
                    workspace: row.get(1),
                    subagent_name: row.get(2),
                    worker: row.get(3),
                    started_at: row.get::<_, Option<i64>>(4).map_or(0, from_db),
                    progress: row.get(5),
                })
                .collect(),
        })
    }
}

/// The version of [`FleetStatus::to_json`]'s shape: it grows only by new
/// fields; a change that removes or renames one gets a new version.
pub const STATUS_JSON_VERSION: u32 = 1;

impl FleetStatus {
    /// The status as JSON, the shape `asynctask fleet status --json` prints
    /// (documented in docs/fleet.md). Times are Unix milliseconds of the
    /// fleet's clock (`*_ms`); a workspace without a limit has `max_async`
    /// `null`; absent values are `null`, never left out.
    ///
    /// ```
    /// # async fn demo(fleet: &mut asynctask_fleet::Fleet) -> Result<(), asynctask_fleet::FleetError> {
    /// let json = fleet.status().await?.to_json();
    /// assert_eq!(json["version"], asynctask_fleet::STATUS_JSON_VERSION);
    /// for worker in json["workers"].as_array().into_iter().flatten() {
    ///     println!("{} runs {} of {}", worker["name"], worker["running"], worker["capacity"]);
    /// }
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        let workers: Vec<serde_json::Value> = self
            .workers
            .iter()
            .map(|w| {
                serde_json::json!({
                    "id": w.id,
                    "name": w.name,
                    "state": w.state,
                    "capacity": w.capacity,
                    "running": w.running,
                    "lease_expires_at_ms": w.lease_expires_at,
                    "subagents": w.subagents,
                    "workspaces": w.workspaces,
                })
            })
            .collect();
        let workspaces: Vec<serde_json::Value> = self
            .workspaces
            .iter()
            .map(|ws| {
                serde_json::json!({
                    "name": ws.name,
                    "max_async": (ws.max_async >= 0).then_some(ws.max_async),
                    "running": ws.running,
                    "queued": ws.queued,
                    "oldest_queued_at_ms": ws.oldest_queued_at,
                    "undelivered": ws.undelivered,
                })
            })
            .collect();
        let running: Vec<serde_json::Value> = self
            .running
            .iter()
            .map(|t| {
                serde_json::json!({
                    "id": t.id,
                    "workspace": t.workspace,
                    "subagent": t.subagent_name,
                    "worker": t.worker,
                    "started_at_ms": t.started_at,
                    "last_line": t.progress,
                })
            })
            .collect();
        serde_json::json!({
            "version": STATUS_JSON_VERSION,
            "now_ms": self.now,
            "workers": workers,
            "workspaces": workspaces,
            "running": running,
        })
    }
}

/// The status for a human: one section each for the workers, the queues and
/// the running tasks; times in UTC, ages relative to when it was read. Every
/// text read from the database (names, ids, a subagent's progress line) has
/// its control and bidirectional formatting characters escaped
/// ([`escape_for_terminal`](asynctask_tools::escape_for_terminal)): a subagent
/// cannot retitle or redraw the terminal that shows it.
impl fmt::Display for FleetStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let age = |at: u64| format_duration(at.min(self.now), self.now);
        writeln!(f, "fleet at {}", iso_time(self.now))?;
        let live = self.workers.iter().filter(|w| w.state == "live").count();
        writeln!(f, "\nworkers: {live} live")?;
        if self.workers.is_empty() {
            writeln!(f, "  (none)")?;
        }
        for worker in &self.workers {
            let lease = if worker.lease_expires_at > self.now {
                format!(
                    "lease for {}",
                    format_duration(self.now, worker.lease_expires_at)
                )
            } else {
                format!("lease ended {} ago", age(worker.lease_expires_at))
            };
            writeln!(
                f,
                "  {} (#{}) {}: {}/{} running, {lease}; serves {} in {}",
                shown(&worker.name),
                worker.id,
                shown(&worker.state),
                worker.running,
                worker.capacity,
                shown(&worker.subagents.join(", ")),
                shown(&worker.workspaces.join(", "))
            )?;
        }
        writeln!(f, "\nworkspaces: {}", self.workspaces.len())?;
        if self.workspaces.is_empty() {
            writeln!(f, "  (none with work)")?;
        }
        for workspace in &self.workspaces {
            let limit = if workspace.max_async < 0 {
                "no limit".to_owned()
            } else {
                format!("of {}", workspace.max_async)
            };
            let oldest = workspace
                .oldest_queued_at
                .map(|at| format!(" (oldest waiting {})", age(at)))
                .unwrap_or_default();
            writeln!(
                f,
                "  {}: {} running {limit}, {} queued{oldest}, {} undelivered",
                shown(&workspace.name),
                workspace.running,
                workspace.queued,
                workspace.undelivered
            )?;
        }
        writeln!(f, "\nrunning tasks: {}", self.running.len())?;
        for task in &self.running {
            let progress = task
                .progress
                .as_deref()
                .map(|line| format!(": {}", shown(line)))
                .unwrap_or_default();
            writeln!(
                f,
                "  {} {} ({}) on {} for {}{progress}",
                shown(&task.id),
                shown(&task.subagent_name),
                shown(&task.workspace),
                shown(&task.worker),
                age(task.started_at)
            )?;
        }
        Ok(())
    }
}
