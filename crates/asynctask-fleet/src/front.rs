//! What fronts do on the fleet's database, beside submitting: the catalog of
//! the live workers, a front's registration and lease (the results of the
//! tasks it launched are kept for it while it lives), adopting the results
//! of fronts that are gone, marking results delivered, cancel requests and
//! the last line of progress.

use std::time::Duration;

use asynctask_manager::QueueFull;
use asynctask_model::MaxQueuedTasks;
use asynctask_tools::SubagentInfo;

use crate::fleet::{TASK_COLUMNS, from_db, task_from_row};
use crate::listen::{CANCEL_CHANNEL, ENDED_CHANNEL, PROGRESS_CHANNEL};
use crate::storable::{check_name, payload, storable_text};
use crate::types::{ClaimedTask, FleetTask, WorkerLease};
use crate::{Fleet, FleetError};

/// The lease a front registers with unless told otherwise: the results of
/// its tasks are kept for it until it has been unreachable this long.
pub const DEFAULT_FRONT_LEASE: Duration = Duration::from_secs(30);

/// A workspace's `task-max-async` until one is set (the schema's default).
const DEFAULT_MAX_ASYNC: i64 = 5;

/// The most of a task's whole output the fleet stores, in bytes: 1 MiB (a
/// longer output is stored from a line boundary near its last MiB, after a
/// note saying how much was left out).
pub const MAX_STORED_OUTPUT_BYTES: usize = 1024 * 1024;

/// The longest line of progress stored for a task: a longer one is cut (on a
/// character boundary).
pub const MAX_PROGRESS_CHARS: usize = 500;

/// A front's registration: while its lease holds, the results of the tasks
/// it submitted ([`NewTask::with_front`](crate::NewTask::with_front)) are
/// kept for it; once it has expired (or the front [retired](Fleet::retire_front)),
/// any front of the workspace may [adopt](Fleet::adopt_results) them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontLease {
    /// The front's id in the database (a new one at every registration).
    pub front_id: i64,
    /// Its workspace.
    pub workspace: String,
    /// Its name, for people (`fleet status`).
    pub name: String,
    /// When the lease expires unless renewed, in Unix milliseconds of the
    /// fleet's clock.
    pub expires_at: u64,
}

/// Whom an ended task's result is kept for, as a front asks before taking
/// it ([`Fleet::result_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResultFor {
    /// This front, whose lease holds: it may deliver the result.
    This,
    /// Another front (it adopted the result), or none: not this front's.
    Another,
    /// This front, but its lease has lapsed (another front may adopt the
    /// result at any moment): register again and rebind before taking it.
    Lapsed,
}

/// What a cancel request found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelRequest {
    /// The task was queued: it is cancelled now, no worker will run it.
    Cancelled,
    /// The task runs: its worker is asked to end it (it writes `cancelled`
    /// with its fencing token once its subagent has ended).
    Requested,
    /// The task has already ended, or is not in this workspace: nothing to do.
    Ended,
}

impl Fleet {
    /// The fleet's catalog: the subagents the live workers (lease not
    /// expired) serve, each once (the description of the oldest live
    /// registration that publishes it), sorted by name. Empty when no worker
    /// is live.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn catalog(&self) -> Result<Vec<SubagentInfo>, FleetError> {
        self.catalog_of(None).await
    }

    /// The catalog of one workspace: as [`catalog`](Self::catalog), of the
    /// live workers that serve `workspace` only (what a front of it may
    /// launch).
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn workspace_catalog(
        &self,
        workspace: &str,
    ) -> Result<Vec<SubagentInfo>, FleetError> {
        self.catalog_of(Some(workspace)).await
    }

    async fn catalog_of(&self, workspace: Option<&str>) -> Result<Vec<SubagentInfo>, FleetError> {
        let now = self.now(&self.client).await?;
        let rows = self
            .client
            .query(
                "SELECT catalog FROM asynctask_workers
                 WHERE state = 'live' AND lease_expires_at > $1
                   AND ($2::text IS NULL OR $2::text = ANY (workspaces))
                 ORDER BY id",
                &[&now, &workspace],
            )
            .await
            .map_err(FleetError::db("reading the catalog"))?;
        let mut catalog: Vec<SubagentInfo> = Vec::new();
        for row in &rows {
            // A catalog this build cannot read is skipped, never fatal: its
            // worker still serves the names it registered with.
            let entries: Vec<SubagentInfo> =
                serde_json::from_str(row.get::<_, &str>(0)).unwrap_or_default();
            for entry in entries {
                if !catalog.iter().any(|known| known.name == entry.name) {
                    catalog.push(
                        SubagentInfo::new(entry.name, entry.description)
                            .with_messages(entry.accepts_messages),
                    );
                }
            }
        }
        catalog.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(catalog)
    }

    /// Registers a front of `workspace`; its lease starts now.
    ///
    /// # Errors
    ///
    /// [`FleetError::Empty`], [`FleetError::InvalidName`] for a workspace or
    /// a name that cannot be stored ([`check_name`]),
    /// [`FleetError::InvalidWorker`] for a lease under 1 ms,
    /// [`FleetError::Database`].
    pub async fn register_front(
        &self,
        workspace: &str,
        name: &str,
        lease: Duration,
    ) -> Result<FrontLease, FleetError> {
        check_name(workspace, "a workspace")?;
        check_name(name, "a front's name")?;
        let lease = i64::try_from(lease.as_millis())
            .ok()
            .filter(|ms| *ms >= 1)
            .ok_or(FleetError::InvalidWorker("its lease must be at least 1 ms"))?;
        let now = self.now(&self.client).await?;
        let row = self
            .client
            .query_one(
                "INSERT INTO asynctask_fronts
                    (workspace, name, lease_ms, registered_at, lease_expires_at)
                 VALUES ($1, $2, $3::bigint, $4::bigint, $4::bigint + $3::bigint)
                 RETURNING id, lease_expires_at",
                &[&workspace, &name, &lease, &now],
            )
            .await
            .map_err(FleetError::db("registering a front"))?;
        Ok(FrontLease {
            front_id: row.get(0),
            workspace: workspace.to_owned(),
            name: name.to_owned(),
            expires_at: from_db(row.get(1)),
        })
    }

    /// Renews a front's lease for its length from now.
    ///
    /// # Errors
    ///
    /// [`FleetError::FrontLost`] once it has expired (other fronts may have
    /// adopted its results): register again, and
    /// [`rebind_front`](Self::rebind_front). [`FleetError::Database`].
    pub async fn front_heartbeat(&self, front: &mut FrontLease) -> Result<(), FleetError> {
        let now = self.now(&self.client).await?;
        let row = self
            .client
            .query_opt(
                "UPDATE asynctask_fronts SET lease_expires_at = $2 + lease_ms
                 WHERE id = $1 AND state = 'live' AND lease_expires_at > $2
                 RETURNING lease_expires_at",
                &[&front.front_id, &now],
            )
            .await
            .map_err(FleetError::db("renewing a front's lease"))?;
        match row {
            Some(row) => {
                front.expires_at = from_db(row.get(0));
                Ok(())
            }
            None => Err(FleetError::FrontLost {
                name: front.name.clone(),
            }),
        }
    }

    /// Moves to `front` the tasks still kept for the registration `old` (a
    /// front that lost its lease and registered again): those no other front
    /// adopted meanwhile. Returns how many.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn rebind_front(&self, old: i64, front: &FrontLease) -> Result<u64, FleetError> {
        self.client
            .execute(
                "UPDATE asynctask_tasks SET front_id = $2
                 WHERE front_id = $1 AND notified_at IS NULL",
                &[&old, &front.front_id],
            )
            .await
            .map_err(FleetError::db("moving a front's tasks"))
    }

    /// Ends a front's registration now (it is closing): the results of its
    /// tasks, whenever they come, go to the workspace's other fronts.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn retire_front(&self, front: &FrontLease) -> Result<(), FleetError> {
        self.client
            .execute(
                "UPDATE asynctask_fronts SET state = 'gone' WHERE id = $1",
                &[&front.front_id],
            )
            .await
            .map_err(FleetError::db("retiring a front"))?;
        Ok(())
    }

    /// Takes for `front` up to `max` undelivered results of its workspace
    /// whose front is gone (lease expired, retired) or that have none, oldest
    /// ended first, in one statement: however many fronts adopt at once, each
    /// result goes to one of them. They stay undelivered, kept for `front`
    /// while it lives, until [`mark_notified`](Self::mark_notified).
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`], [`FleetError::Output`].
    pub async fn adopt_results(
        &self,
        front: &FrontLease,
        max: usize,
    ) -> Result<Vec<FleetTask>, FleetError> {
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let now = self.now(&self.client).await?;
        let rows = self
            .client
            .query(
                &format!(
                    "WITH picked AS (
                        SELECT t.id FROM asynctask_tasks t
                        WHERE t.workspace = $1 AND t.notified_at IS NULL
                          AND t.status IN ('completed', 'failed', 'cancelled')
                          AND NOT EXISTS (SELECT 1 FROM asynctask_fronts f
                              WHERE f.id = t.front_id AND f.state = 'live'
                                AND f.lease_expires_at > $3)
                          AND EXISTS (SELECT 1 FROM asynctask_fronts me
                              WHERE me.id = $2 AND me.state = 'live'
                                AND me.lease_expires_at > $3)
                        ORDER BY t.completed_at, t.seq
                        FOR UPDATE OF t SKIP LOCKED
                        LIMIT $4
                     ), adopted AS (
                        UPDATE asynctask_tasks t SET front_id = $2
                        FROM picked WHERE t.id = picked.id
                        RETURNING t.*
                     )
                     SELECT {TASK_COLUMNS} FROM adopted t ORDER BY t.completed_at, t.seq"
                ),
                &[&front.workspace, &front.front_id, &now, &limit],
            )
            .await
            .map_err(FleetError::db("adopting results"))?;
        rows.iter().map(task_from_row).collect()
    }

    /// Whether the ended task `id`'s result is `front`'s to deliver: kept
    /// for it and its lease live, both read in one statement under the
    /// task's row lock (an adoption running meanwhile is waited for, and one
    /// after sees the front live), so a front whose lease lapsed never takes
    /// a result another front adopts. `None` when no task has that id.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn result_for(
        &self,
        front: &FrontLease,
        id: &str,
    ) -> Result<Option<ResultFor>, FleetError> {
        let now = self.now(&self.client).await?;
        let row = self
            .client
            .query_opt(
                "SELECT t.front_id IS NOT DISTINCT FROM $2, f.id IS NOT NULL
                 FROM asynctask_tasks t
                 LEFT JOIN asynctask_fronts f
                   ON f.id = $2 AND f.state = 'live' AND f.lease_expires_at > $3
                 WHERE t.id = $1
                 FOR UPDATE OF t",
                &[&id, &front.front_id, &now],
            )
            .await
            .map_err(FleetError::db("reading whom a result is for"))?;
        Ok(
            row.map(|row| match (row.get::<_, bool>(0), row.get::<_, bool>(1)) {
                (false, _) => ResultFor::Another,
                (true, true) => ResultFor::This,
                (true, false) => ResultFor::Lapsed,
            }),
        )
    }

    /// Whether `workspace` holds as many tasks as its `task-max-async` and a
    /// queue of `max_queued` allow: its queued and running tasks (those of
    /// front `front` aside, which counts `own` itself) against the sum. The
    /// refusal to give when it does; `None` when a launch fits, or the
    /// workspace's limit is unlimited (no queue either, as on one machine).
    /// A check, not a reservation: fronts launching at the same moment may
    /// each pass it.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn queue_full(
        &self,
        workspace: &str,
        front: i64,
        own: usize,
        max_queued: MaxQueuedTasks,
    ) -> Result<Option<QueueFull>, FleetError> {
        let row = self
            .client
            .query_opt(
                "SELECT w.max_async, (SELECT count(*) FROM asynctask_tasks t
                     WHERE t.workspace = w.name AND t.status IN ('queued', 'running')
                       AND t.front_id IS DISTINCT FROM $2)
                 FROM asynctask_workspaces w WHERE w.name = $1",
                &[&workspace, &front],
            )
            .await
            .map_err(FleetError::db("counting a workspace's tasks"))?;
        let (max, others): (i64, i64) = match row {
            Some(row) => (i64::from(row.get::<_, i32>(0)), row.get(1)),
            None => (DEFAULT_MAX_ASYNC, 0),
        };
        let held = others.saturating_add(i64::try_from(own).unwrap_or(i64::MAX));
        let max_queued = max_queued.get();
        Ok((max >= 0 && held >= max.saturating_add(max_queued))
            .then_some(QueueFull { max, max_queued }))
    }

    /// Marks these tasks' results delivered (those not marked yet): never
    /// offered again. A task still running keeps running; its end will not
    /// be offered. Returns how many were marked.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn mark_notified(&self, ids: &[String]) -> Result<u64, FleetError> {
        let now = self.now(&self.client).await?;
        self.client
            .execute(
                "UPDATE asynctask_tasks SET notified_at = $2
                 WHERE id = ANY($1) AND notified_at IS NULL",
                &[&ids, &now],
            )
            .await
            .map_err(FleetError::db("marking results delivered"))
    }

    /// Cancels a task of `workspace`: a queued one at once, a running one by
    /// asking its worker (notified on [`CANCEL_CHANNEL`], and seen at its
    /// next heartbeat at the latest).
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn request_cancel(
        &self,
        workspace: &str,
        id: &str,
    ) -> Result<CancelRequest, FleetError> {
        let now = self.now(&self.client).await?;
        let cancelled = self
            .client
            .query(
                &format!(
                    "WITH cancelled AS (
                    UPDATE asynctask_tasks SET status = 'cancelled', completed_at = $3
                    WHERE id = $1 AND workspace = $2 AND status = 'queued'
                    RETURNING workspace
                 )
                 SELECT pg_notify($4, {})::text FROM cancelled",
                    payload("workspace")
                ),
                &[&id, &workspace, &now, &ENDED_CHANNEL],
            )
            .await
            .map_err(FleetError::db("cancelling a queued task"))?;
        if !cancelled.is_empty() {
            return Ok(CancelRequest::Cancelled);
        }
        let requested = self
            .client
            .query(
                "WITH requested AS (
                    UPDATE asynctask_tasks SET cancel_requested = true
                    WHERE id = $1 AND workspace = $2 AND status = 'running'
                    RETURNING worker_id
                 )
                 SELECT pg_notify($3, worker_id::text)::text FROM requested",
                &[&id, &workspace, &CANCEL_CHANNEL],
            )
            .await
            .map_err(FleetError::db("asking for a task's cancel"))?;
        Ok(if requested.is_empty() {
            CancelRequest::Ended
        } else {
            CancelRequest::Requested
        })
    }

    /// The ids of this worker's running tasks whose cancel was requested.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn cancel_requests(&self, lease: &WorkerLease) -> Result<Vec<String>, FleetError> {
        let rows = self
            .client
            .query(
                "SELECT id FROM asynctask_tasks
                 WHERE worker_id = $1 AND status = 'running' AND cancel_requested",
                &[&lease.worker_id],
            )
            .await
            .map_err(FleetError::db("reading cancel requests"))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Stores a claimed task's whole output (its NUL characters escaped,
    /// [`storable_text`], then its last [`MAX_STORED_OUTPUT_BYTES`], see
    /// [`bound_output`]), `bytes` long in
    /// all, with the claim's fencing token, for fronts on any machine to read
    /// ([`whole_output`](Self::whole_output)).
    ///
    /// # Errors
    ///
    /// [`FleetError::Fenced`] when the claim is no longer current.
    /// [`FleetError::Database`].
    pub async fn store_whole_output(
        &self,
        task: &ClaimedTask,
        text: &str,
        bytes: u64,
    ) -> Result<(), FleetError> {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        let text = storable_text(text);
        let stored = bound_output(&text);
        let now = self.now(&self.client).await?;
        // Fenced as an end is: the claim current and the worker's lease live.
        let changed = self
            .client
            .execute(
                "UPDATE asynctask_tasks t SET whole_output = $3, whole_output_bytes = $4
                 FROM asynctask_workers w
                 WHERE t.id = $1 AND t.fence = $2 AND t.status = 'running'
                   AND w.id = t.worker_id AND w.state = 'live' AND w.lease_expires_at > $5",
                &[&task.id, &task.fence, &stored.as_ref(), &bytes, &now],
            )
            .await
            .map_err(FleetError::db("storing a task's whole output"))?;
        if changed == 0 {
            return Err(FleetError::Fenced {
                task: task.id.clone(),
            });
        }
        Ok(())
    }

    /// A task's whole output as the fleet stores it (bounded), if it does.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn whole_output(&self, id: &str) -> Result<Option<String>, FleetError> {
        Ok(self
            .client
            .query_opt(
                "SELECT whole_output FROM asynctask_tasks WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(FleetError::db("reading a task's whole output"))?
            .and_then(|row| row.get(0)))
    }

    /// Stores a claimed task's last line of progress (cut to
    /// [`MAX_PROGRESS_CHARS`], its NUL characters escaped), with the claim's fencing token: a write for a
    /// claim no longer current changes nothing. Notifies
    /// [`PROGRESS_CHANNEL`]: the caller rate-limits (the worker writes at
    /// most once a second per task).
    ///
    /// # Errors
    ///
    /// [`FleetError::Fenced`] when the claim is no longer current.
    /// [`FleetError::Database`].
    pub async fn report_progress(&self, task: &ClaimedTask, line: &str) -> Result<(), FleetError> {
        let line: String = line.chars().take(MAX_PROGRESS_CHARS).collect();
        let line = storable_text(&line);
        let now = self.now(&self.client).await?;
        // One statement: the fenced write (the claim current and the
        // worker's lease live), and the wake-up of the fronts (sent when it
        // commits).
        let changed = self
            .client
            .query(
                &format!(
                    "WITH reported AS (
                    UPDATE asynctask_tasks t SET progress = $3
                    FROM asynctask_workers w
                    WHERE t.id = $1 AND t.fence = $2 AND t.status = 'running'
                      AND w.id = t.worker_id AND w.state = 'live' AND w.lease_expires_at > $5
                    RETURNING t.id
                 )
                 SELECT pg_notify($4, {})::text FROM reported",
                    payload("id")
                ),
                &[
                    &task.id,
                    &task.fence,
                    &line.as_ref(),
                    &PROGRESS_CHANNEL,
                    &now,
                ],
            )
            .await
            .map_err(FleetError::db("storing a task's progress"))?
            .len();
        if changed == 0 {
            return Err(FleetError::Fenced {
                task: task.id.clone(),
            });
        }
        Ok(())
    }
}

/// How far past the cut [`bound_output`] looks for a line boundary.
const LINE_BOUNDARY_WINDOW: usize = 4096;

/// `text` bounded for storing: whole when it fits in
/// [`MAX_STORED_OUTPUT_BYTES`], else its end, after a note saying how many
/// bytes were left out. The end starts at a line boundary when one is
/// within 4 KiB of where it would start, else mid-line (at a character
/// boundary): a long line is kept rather than dropped whole.
///
/// ```
/// use asynctask_fleet::{MAX_STORED_OUTPUT_BYTES, bound_output};
/// assert_eq!(bound_output("short"), "short");
/// let long = "line\n".repeat(MAX_STORED_OUTPUT_BYTES);
/// let stored = bound_output(&long);
/// assert!(stored.starts_with("[the first 4194370 bytes are not stored]\nline\n"));
/// assert!(stored.len() <= MAX_STORED_OUTPUT_BYTES);
/// assert_eq!(bound_output(&stored), stored, "bounded once");
///
/// // One long line, then a short one: most of the long line is kept.
/// let one_line = format!("{}\ndone\n", "é".repeat(MAX_STORED_OUTPUT_BYTES));
/// let stored = bound_output(&one_line);
/// assert!(stored.len() > MAX_STORED_OUTPUT_BYTES - 100, "{}", stored.len());
/// assert!(stored.len() <= MAX_STORED_OUTPUT_BYTES);
/// assert!(stored.ends_with("éé\ndone\n"));
/// ```
#[must_use]
pub fn bound_output(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MAX_STORED_OUTPUT_BYTES {
        return std::borrow::Cow::Borrowed(text);
    }
    // Room for the note: what is stored stays within the bound.
    let mut start = text.len() - (MAX_STORED_OUTPUT_BYTES - 64);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    // A line boundary close by, if there is one: a long line is cut
    // mid-line rather than dropped whole (a 1 MiB line before a short last
    // one would leave only the last).
    if let Some(newline) = text.as_bytes()[start..]
        .iter()
        .take(LINE_BOUNDARY_WINDOW)
        .position(|&byte| byte == b'\n')
    {
        start += newline + 1;
    }
    std::borrow::Cow::Owned(format!(
        "[the first {start} bytes are not stored]\n{}",
        &text[start..]
    ))
}
