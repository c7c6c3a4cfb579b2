//! `Fleet`: one connection to the fleet's database, and every rule of the
//! fleet as a statement or a transaction on it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus, Clock, MaxAsyncTasks, OutputObject};
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, GenericClient, Row};

use crate::storable::{check_name, check_spec, payload, storable_text};
use crate::types::{ClaimedTask, FleetTask, Interrupted, NewTask, WorkerLease, WorkerSpec};
use crate::{DatabaseConfig, FleetError, bound_output, schema};

/// Where a fleet's time comes from. Every lease is measured on one clock:
/// the database's, unless a [`Clock`] is given (tests, with a `ManualClock`).
#[derive(Clone, Default)]
pub struct FleetOptions {
    clock: Option<Arc<dyn Clock>>,
    idle_in_transaction: Option<Duration>,
}

impl FleetOptions {
    /// The database's clock.
    #[must_use]
    pub fn new() -> Self {
        FleetOptions::default()
    }

    /// Measures time on `clock` instead of the database's. Every handle on
    /// one database must then use the same clock.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Replaces how long the connection's session may sit idle inside a
    /// transaction before the server ends it (default
    /// [`IDLE_IN_TRANSACTION_TIMEOUT`](crate::IDLE_IN_TRANSACTION_TIMEOUT)):
    /// a [`ResultClaim`] not acknowledged within it is rolled back, and its
    /// results are offered again.
    #[must_use]
    pub fn idle_in_transaction_timeout(mut self, limit: Duration) -> Self {
        self.idle_in_transaction = Some(limit);
        self
    }
}

impl fmt::Debug for FleetOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetOptions")
            .field("clock", &self.clock)
            .field("idle_in_transaction", &self.idle_in_transaction)
            .finish()
    }
}

/// One connection to the fleet's database: what a front submits and
/// delivers through, and what a worker registers, claims and reports
/// through. Operations that take `&mut self` run a transaction, or (`submit`,
/// `claim`) may; the others are one statement. A submission is one round
/// trip, and so is a claim (called again when another claimer held a
/// workspace it reached).
///
/// # Cancel safety
///
/// No method is cancel-safe beyond the database's own guarantee: a future
/// dropped mid-way leaves its statement or transaction either done or not
/// (a transaction is rolled back), never half done. Drop the handle after a
/// cancelled transaction rather than reuse it.
pub struct Fleet {
    pub(crate) client: Client,
    driver: JoinHandle<()>,
    pub(crate) clock: Option<Arc<dyn Clock>>,
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connection's configuration holds the credentials: never shown.
        f.debug_struct("Fleet")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

pub(crate) const TASK_COLUMNS: &str = "t.id, t.subagent_name, t.goal_prompt, t.status, t.launched_at, \
     t.started_at, t.completed_at, t.notified_at, t.output, t.error, t.workspace, t.origin, \
     (SELECT w.name FROM asynctask_workers w WHERE w.id = t.worker_id), t.progress, t.front_id, \
     t.whole_output_bytes";

impl Fleet {
    /// Connects to the database `url` names (a `postgresql://` URL or a
    /// `key=value` string), checks that its schema is of
    /// [`SCHEMA_VERSION`](crate::SCHEMA_VERSION), and returns the handle.
    /// It never changes the schema ([`migrate`](Self::migrate) does), so a
    /// role with only the rights to read and write the fleet's tables and
    /// run its functions may connect. Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`FleetError::BadUrl`], [`FleetError::Connect`],
    /// [`FleetError::NoSchema`], [`FleetError::OlderSchema`] (run
    /// [`migrate`](Self::migrate)), [`FleetError::NewerSchema`], or
    /// [`FleetError::Database`].
    pub async fn connect_url(url: &str, options: FleetOptions) -> Result<Fleet, FleetError> {
        Fleet::connect(DatabaseConfig::parse(url)?, options).await
    }

    /// [`connect_url`](Self::connect_url) with a parsed configuration.
    ///
    /// # Errors
    ///
    /// As [`connect_url`](Self::connect_url).
    pub async fn connect(
        config: impl Into<DatabaseConfig>,
        options: FleetOptions,
    ) -> Result<Fleet, FleetError> {
        let (client, connection) = config.into().connect().await?;
        let driver = tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::warn!(error = %err, "the connection to the fleet's database ended");
            }
        });
        let idle = options
            .idle_in_transaction
            .unwrap_or(crate::connection::IDLE_IN_TRANSACTION_TIMEOUT);
        let ready = async {
            crate::connection::session_settings(&client, idle).await?;
            schema::check(&client).await
        };
        if let Err(err) = ready.await {
            driver.abort();
            return Err(err);
        }
        Ok(Fleet {
            client,
            driver,
            clock: options.clock,
        })
    }

    /// Brings the database's schema to [`SCHEMA_VERSION`](crate::SCHEMA_VERSION)
    /// (creates it in an empty database), in one transaction: what
    /// `asynctask fleet migrate` runs. Returns the version found before (0:
    /// none). Run it as the role that owns the fleet's schema: it creates
    /// and alters tables and functions, in the connection's current schema
    /// (the first of its `search_path` that exists). Two migrations at once
    /// take turns; the second finds the work done.
    ///
    /// # Errors
    ///
    /// [`FleetError::BadUrl`], [`FleetError::Connect`],
    /// [`FleetError::NewerSchema`] (the database is left untouched),
    /// [`FleetError::UnusableSchema`], or [`FleetError::Database`] when the
    /// migration fails (rolled back: nothing changed).
    pub async fn migrate(config: impl Into<DatabaseConfig>) -> Result<i32, FleetError> {
        let (mut client, connection) = config.into().connect().await?;
        let driver = tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::warn!(error = %err, "the connection to the fleet's database ended");
            }
        });
        let migrated = async {
            crate::connection::session_settings(
                &client,
                crate::connection::IDLE_IN_TRANSACTION_TIMEOUT,
            )
            .await?;
            schema::migrate(&mut client).await
        }
        .await;
        drop(client);
        let _ = driver.await;
        migrated
    }

    /// Whether the connection has ended (the server went away): the handle
    /// is of no further use, connect again.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// The fleet's time now, in Unix milliseconds.
    pub(crate) async fn now(&self, client: &impl GenericClient) -> Result<i64, FleetError> {
        self_now(&self.clock, client).await
    }

    /// Sets a workspace's `task-max-async`: how many of its tasks run at
    /// once across all workers. Tasks already running are kept.
    ///
    /// # Errors
    ///
    /// [`FleetError::Empty`] or [`FleetError::InvalidName`] for a workspace
    /// that cannot be stored, [`FleetError::Database`].
    pub async fn set_max_async(
        &self,
        workspace: &str,
        max: MaxAsyncTasks,
    ) -> Result<(), FleetError> {
        check_name(workspace, "a workspace")?;
        let max = i32::try_from(max.get()).unwrap_or(-1);
        self.client
            .execute(
                "INSERT INTO asynctask_workspaces (name, max_async) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET max_async = EXCLUDED.max_async",
                &[&workspace, &max],
            )
            .await
            .map_err(FleetError::db("setting the workspace's limit"))?;
        Ok(())
    }

    /// Submits a task: it is queued until a worker claims it.
    ///
    /// # Errors
    ///
    /// [`FleetError::DuplicateId`], [`FleetError::Empty`],
    /// [`FleetError::InvalidName`] for an id, a workspace or a subagent's
    /// name that cannot be stored ([`check_name`](crate::check_name)),
    /// [`FleetError::Database`]. The goal and the origin are stored with
    /// their NUL characters escaped ([`storable_text`](crate::storable_text)).
    pub async fn submit(&mut self, task: NewTask) -> Result<FleetTask, FleetError> {
        check_name(&task.id, "a task's id")?;
        check_name(&task.workspace, "a workspace")?;
        check_name(&task.subagent_name, "a subagent's name")?;
        // A model's text is stored escaped: a NUL would be refused for good.
        let goal = storable_text(&task.goal_prompt);
        let origin = task.origin.as_deref().map(storable_text);
        // The fleet's clock when one is given; else the database's.
        let now = self.clock.as_ref().map(|clock| to_db(clock.now_ms()));
        // One statement, one round trip (typed parameters: nothing to
        // prepare first): the workspace (created when new), the task, and
        // the wake-up of every listening worker, delivered at commit — a
        // wake-up, never the only way a task is found (workers also look on
        // a timer). A duplicate id inserts nothing (not even its workspace:
        // the foreign key is checked at the statement's end) and wakes no one.
        let rows = self
            .client
            .query_typed(
                &format!("WITH task AS (
                    INSERT INTO asynctask_tasks
                        (id, workspace, subagent_name, goal_prompt, origin, status,
                         launched_at, front_id, request)
                    VALUES ($1, $2, $3, $4, $5, 'queued',
                        coalesce($6, (extract(epoch FROM clock_timestamp()) * 1000)::bigint), $7, $9)
                    ON CONFLICT (id) DO NOTHING
                    RETURNING launched_at
                 ), workspace AS (
                    INSERT INTO asynctask_workspaces (name) SELECT $2 FROM task
                    ON CONFLICT DO NOTHING
                 )
                 SELECT launched_at, pg_notify($8, {})::text FROM task", payload("$3")),
                &[
                    (&task.id, Type::TEXT),
                    (&task.workspace, Type::TEXT),
                    (&task.subagent_name, Type::TEXT),
                    (&goal.as_ref(), Type::TEXT),
                    (&origin.as_deref(), Type::TEXT),
                    (&now, Type::INT8),
                    (&task.front, Type::INT8),
                    (&crate::listen::QUEUED_CHANNEL, Type::TEXT),
                    (&crate::types::stored_request(&task), Type::TEXT),
                ],
            )
            .await
            .map_err(FleetError::db("submitting a task"))?;
        let Some(row) = rows.first() else {
            return Err(FleetError::DuplicateId(task.id));
        };
        let now: i64 = row.get(0);
        Ok(FleetTask {
            info: AsyncTaskInfo::queued(
                task.id,
                task.subagent_name,
                goal.into_owned(),
                from_db(now),
            ),
            workspace: task.workspace,
            origin: origin.map(std::borrow::Cow::into_owned),
            worker: None,
            progress: None,
            front: task.front,
            whole_output_bytes: None,
        })
    }

    /// The task with this id, if the database holds it.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`], [`FleetError::Output`].
    pub async fn task(&self, id: &str) -> Result<Option<FleetTask>, FleetError> {
        let row = self
            .client
            .query_opt(
                &format!("SELECT {TASK_COLUMNS} FROM asynctask_tasks t WHERE t.id = $1"),
                &[&id],
            )
            .await
            .map_err(FleetError::db("reading a task"))?;
        row.map(|row| task_from_row(&row)).transpose()
    }

    /// Every task of a workspace, in submission order.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`], [`FleetError::Output`].
    pub async fn tasks(&self, workspace: &str) -> Result<Vec<FleetTask>, FleetError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {TASK_COLUMNS} FROM asynctask_tasks t WHERE t.workspace = $1 ORDER BY t.seq"
                ),
                &[&workspace],
            )
            .await
            .map_err(FleetError::db("reading a workspace's tasks"))?;
        rows.iter().map(task_from_row).collect()
    }

    /// Registers a worker; its lease starts now. It claims only the tasks
    /// of the workspaces it names.
    ///
    /// # Errors
    ///
    /// [`FleetError::Empty`] for an empty name or workspace,
    /// [`FleetError::NoWorkspaces`] when it names no workspace,
    /// [`FleetError::InvalidName`] for a name, a workspace or a subagent's
    /// name that cannot be stored ([`check_name`](crate::check_name)),
    /// [`FleetError::InvalidWorker`] for a capacity of 0 or a lease under
    /// 1 ms, [`FleetError::Database`].
    pub async fn register_worker(&self, spec: &WorkerSpec) -> Result<WorkerLease, FleetError> {
        check_worker(spec)?;
        check_spec(spec)?;
        let capacity = i32::try_from(spec.capacity)
            .ok()
            .filter(|c| *c >= 1)
            .ok_or(FleetError::InvalidWorker(
                "its capacity must be between 1 and 2^31 - 1",
            ))?;
        let lease = i64::try_from(spec.lease.as_millis())
            .ok()
            .filter(|ms| *ms >= 1)
            .ok_or(FleetError::InvalidWorker("its lease must be at least 1 ms"))?;
        // Names and descriptions only: serializing them cannot fail.
        let catalog =
            serde_json::to_string(&spec.published_catalog()).unwrap_or_else(|_| "[]".to_owned());
        let now = self.now(&self.client).await?;
        let row = self
            .client
            .query_one(
                "INSERT INTO asynctask_workers
                    (name, capacity, subagents, lease_ms, registered_at, lease_expires_at, catalog,
                     workspaces)
                 VALUES ($1, $2, $3, $4::bigint, $5::bigint, $5::bigint + $4::bigint, $6, $7)
                 RETURNING id, lease_expires_at",
                &[
                    &spec.name,
                    &capacity,
                    &spec.subagents,
                    &lease,
                    &now,
                    &catalog,
                    &spec.workspaces,
                ],
            )
            .await
            .map_err(FleetError::db("registering a worker"))?;
        tracing::info!(worker = %spec.name, capacity, lease_ms = lease,
            workspaces = ?spec.workspaces, "worker registered");
        Ok(WorkerLease {
            worker_id: row.get(0),
            name: spec.name.clone(),
            expires_at: from_db(row.get(1)),
        })
    }

    /// Renews a worker's lease for its length from now.
    ///
    /// # Errors
    ///
    /// [`FleetError::WorkerLost`] when the lease had already expired (even if
    /// no one has reaped it yet): the worker must end its subagents.
    /// [`FleetError::Database`].
    pub async fn heartbeat(&self, lease: &mut WorkerLease) -> Result<(), FleetError> {
        let now = self.now(&self.client).await?;
        let row = self
            .client
            .query_opt(
                "UPDATE asynctask_workers SET lease_expires_at = $2 + lease_ms
                 WHERE id = $1 AND state = 'live' AND lease_expires_at > $2
                 RETURNING lease_expires_at",
                &[&lease.worker_id, &now],
            )
            .await
            .map_err(FleetError::db("renewing a lease"))?;
        match row {
            Some(row) => {
                lease.expires_at = from_db(row.get(0));
                Ok(())
            }
            None => Err(FleetError::WorkerLost {
                name: lease.name.clone(),
            }),
        }
    }

    /// Ends a worker's registration now (it is stopping): it takes no more
    /// work, its lease can no longer be renewed, and its tasks still running
    /// are failed at once with `error` and returned (each once, like
    /// [`reap_expired`](Self::reap_expired)'s).
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn retire(
        &self,
        lease: &WorkerLease,
        error: &str,
    ) -> Result<Vec<Interrupted>, FleetError> {
        let now = self.now(&self.client).await?;
        let rows = self
            .client
            .query(
                &format!(
                    "WITH retired AS (
                    UPDATE asynctask_workers SET state = 'lost'
                    WHERE id = $1 AND state = 'live'
                    RETURNING id, name
                 ), interrupted AS (
                    UPDATE asynctask_tasks t
                    SET status = 'failed', completed_at = $2, error = $3
                    FROM retired
                    WHERE t.worker_id = retired.id AND t.status = 'running'
                    RETURNING t.id, t.workspace, retired.name
                 )
                 SELECT id, workspace, name, pg_notify($4, {})::text FROM interrupted",
                    payload("workspace")
                ),
                &[
                    &lease.worker_id,
                    &now,
                    &storable_text(error).as_ref(),
                    &crate::listen::ENDED_CHANNEL,
                ],
            )
            .await
            .map_err(FleetError::db("retiring a worker"))?;
        Ok(rows
            .iter()
            .map(|row| Interrupted {
                id: row.get(0),
                workspace: row.get(1),
                worker: row.get(2),
            })
            .collect())
    }

    /// Records that a claimed task completed with `output`.
    ///
    /// # Errors
    ///
    /// [`FleetError::Fenced`] when the claim is no longer current (the
    /// worker's lease expired, the task was declared interrupted or has
    /// ended): nothing is written. Writing the same end again under the
    /// same claim (a retry after the connection was lost before the answer
    /// came back) succeeds and changes nothing. [`FleetError::Database`].
    ///
    /// The final message and each emitted value are stored bounded as
    /// [`bound_output`] bounds them.
    pub async fn complete(
        &self,
        task: &ClaimedTask,
        output: &OutputObject,
    ) -> Result<(), FleetError> {
        // Bounded as an error is (a NUL in it is escaped by JSON itself).
        let mut output = output.clone();
        output.final_message = output
            .final_message
            .map(|message| bound_output(&message).into_owned());
        for value in output.emitted_vars.values_mut() {
            *value = bound_output(value).into_owned();
        }
        let json = serde_json::to_string(&output).map_err(|source| FleetError::Output {
            task: task.id.clone(),
            source,
        })?;
        self.finish(task, AsyncTaskStatus::Completed, Some(json), None)
            .await
    }

    /// Records that a claimed task failed with `error` (made storable: its
    /// NUL characters escaped, [`storable_text`], and its last
    /// [`MAX_STORED_OUTPUT_BYTES`](crate::MAX_STORED_OUTPUT_BYTES) kept,
    /// [`bound_output`]).
    ///
    /// # Errors
    ///
    /// As [`complete`](Self::complete).
    pub async fn fail(&self, task: &ClaimedTask, error: &str) -> Result<(), FleetError> {
        let error = storable_text(error);
        let error = bound_output(&error);
        self.finish(task, AsyncTaskStatus::Failed, None, Some(&error))
            .await
    }

    /// Records that a claimed task was cancelled.
    ///
    /// # Errors
    ///
    /// As [`complete`](Self::complete).
    pub async fn cancelled(&self, task: &ClaimedTask) -> Result<(), FleetError> {
        self.finish(task, AsyncTaskStatus::Cancelled, None, None)
            .await
    }

    /// The one fenced write: it changes the task only while the claim's
    /// token is the task's, the task runs, and the worker's lease holds.
    async fn finish(
        &self,
        task: &ClaimedTask,
        status: AsyncTaskStatus,
        output: Option<String>,
        error: Option<&str>,
    ) -> Result<(), FleetError> {
        let now = self.now(&self.client).await?;
        // One statement: the fenced write, and the wake-up of the fronts
        // waiting on the workspace's results (sent when it commits).
        let changed = self
            .client
            .query(
                &format!(
                    "WITH ended AS (
                    UPDATE asynctask_tasks t
                    SET status = $3, output = $4, error = $5, completed_at = $6
                    FROM asynctask_workers w
                    WHERE t.id = $1 AND t.fence = $2 AND t.status = 'running'
                      AND w.id = t.worker_id AND w.state = 'live' AND w.lease_expires_at > $6
                    RETURNING t.workspace
                 )
                 SELECT pg_notify($7, {})::text FROM ended",
                    payload("workspace")
                ),
                &[
                    &task.id,
                    &task.fence,
                    &status.as_str(),
                    &output,
                    &error,
                    &now,
                    &crate::listen::ENDED_CHANNEL,
                ],
            )
            .await
            .map_err(FleetError::db("recording a task's end"))?
            .len();
        if changed == 0 {
            // A retry of a write that did commit (the connection was lost
            // before its answer came back) finds its own end already there
            // under this claim: it is done, not refused.
            let already = self
                .client
                .query_opt(
                    "SELECT 1 FROM asynctask_tasks
                     WHERE id = $1 AND fence = $2 AND status = $3
                       AND output IS NOT DISTINCT FROM $4 AND error IS NOT DISTINCT FROM $5",
                    &[&task.id, &task.fence, &status.as_str(), &output, &error],
                )
                .await
                .map_err(FleetError::db("recording a task's end"))?;
            if already.is_none() {
                return Err(FleetError::Fenced {
                    task: task.id.clone(),
                });
            }
        }
        Ok(())
    }

    /// Declares lost every worker whose lease has expired, and fails each of
    /// their running tasks with `interrupted: worker <name> lost`, in one
    /// statement: however many handles reap at once, each such task is
    /// returned by exactly one of them, once.
    ///
    /// When the server refuses that statement for good (a row it cannot
    /// update), each expired worker is reaped in a statement of its own, and
    /// one refused is skipped (and logged): one bad row never keeps the
    /// others from being reaped.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn reap_expired(&self) -> Result<Vec<Interrupted>, FleetError> {
        let now = self.now(&self.client).await?;
        let interrupted = match self.reap(now, None).await {
            Err(err) if !err.is_transient() => {
                tracing::error!(error = %err.chain(),
                    "reaping expired leases was refused: reaping each worker alone");
                self.reap_one_by_one(now).await?
            }
            other => other?,
        };
        for task in &interrupted {
            tracing::warn!(task = %task.id, worker = %task.worker, "worker lost: task interrupted");
        }
        Ok(interrupted)
    }

    /// Reaps each expired worker in a statement of its own, skipping those
    /// the server refuses.
    async fn reap_one_by_one(&self, now: i64) -> Result<Vec<Interrupted>, FleetError> {
        let expired: Vec<i64> = self
            .client
            .query(
                "SELECT id FROM asynctask_workers
                 WHERE state = 'live' AND lease_expires_at <= $1 ORDER BY id",
                &[&now],
            )
            .await
            .map_err(FleetError::db("reading expired leases"))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let mut interrupted = Vec::new();
        for worker in expired {
            match self.reap(now, Some(worker)).await {
                Ok(tasks) => interrupted.extend(tasks),
                Err(err) if !err.is_transient() => {
                    tracing::error!(worker_id = worker, error = %err.chain(),
                        "the database refuses to reap this worker: skipped (fix its rows)");
                }
                Err(err) => return Err(err),
            }
        }
        Ok(interrupted)
    }

    /// The reaping statement: every expired worker, or only `worker`.
    async fn reap(&self, now: i64, worker: Option<i64>) -> Result<Vec<Interrupted>, FleetError> {
        let rows = self
            .client
            .query(
                &format!(
                    "WITH expired AS (
                    SELECT id FROM asynctask_workers
                    WHERE state = 'live' AND lease_expires_at <= $1
                      AND ($3::bigint IS NULL OR id = $3)
                    ORDER BY id
                    FOR UPDATE SKIP LOCKED
                 ), lost AS (
                    UPDATE asynctask_workers w SET state = 'lost'
                    FROM expired WHERE w.id = expired.id
                    RETURNING w.id, w.name
                 ), interrupted AS (
                    UPDATE asynctask_tasks t
                    SET status = 'failed', completed_at = $1,
                        error = 'interrupted: worker ' || lost.name || ' lost'
                    FROM lost
                    WHERE t.worker_id = lost.id AND t.status = 'running'
                    RETURNING t.id, t.workspace, lost.name
                 )
                 SELECT id, workspace, name, pg_notify($2, {})::text FROM interrupted",
                    payload("workspace")
                ),
                &[&now, &crate::listen::ENDED_CHANNEL, &worker],
            )
            .await
            .map_err(FleetError::db("reaping expired leases"))?;
        Ok(rows
            .iter()
            .map(|row| Interrupted {
                id: row.get(0),
                workspace: row.get(1),
                worker: row.get(2),
            })
            .collect())
    }

    /// Claims up to `max` undelivered results of a workspace, oldest ended
    /// first, for one delivery (skipping those kept for a live front: see
    /// [`register_front`](Self::register_front)): a transaction holds them (other deliveries
    /// skip them) until the claim is acknowledged (they are marked notified,
    /// never offered again) or dropped (rolled back: offered again). A front
    /// that dies mid-delivery loses its connection, which rolls back too.
    /// A claim not acknowledged within the connection's idle-in-transaction
    /// limit ([`FleetOptions::idle_in_transaction_timeout`], default
    /// [`IDLE_IN_TRANSACTION_TIMEOUT`](crate::IDLE_IN_TRANSACTION_TIMEOUT))
    /// is rolled back by the server, which ends the connection: its results
    /// are offered again, its acknowledgement fails, and the handle is
    /// [closed](Self::is_closed).
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`], [`FleetError::Output`].
    pub async fn claim_results(
        &mut self,
        workspace: &str,
        max: usize,
    ) -> Result<ResultClaim<'_>, FleetError> {
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let clock = self.clock.clone();
        let tx = self
            .client
            .transaction()
            .await
            .map_err(FleetError::db("beginning a delivery"))?;
        let now = self_now(&clock, &tx).await?;
        let rows = tx
            .query(
                &format!(
                    "SELECT {TASK_COLUMNS} FROM asynctask_tasks t
                     WHERE t.workspace = $1 AND t.notified_at IS NULL
                       AND t.status IN ('completed', 'failed', 'cancelled')
                       AND NOT EXISTS (SELECT 1 FROM asynctask_fronts f
                           WHERE f.id = t.front_id AND f.state = 'live'
                             AND f.lease_expires_at > $3)
                     ORDER BY t.completed_at, t.seq
                     FOR UPDATE SKIP LOCKED
                     LIMIT $2"
                ),
                &[&workspace, &limit, &now],
            )
            .await
            .map_err(FleetError::db("claiming results"))?;
        let tasks = rows
            .iter()
            .map(task_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ResultClaim { tx, clock, tasks })
    }
}

/// Results claimed for one delivery: acknowledge it once delivered
/// (consumes it), or drop it to offer them again. Acknowledge within the
/// connection's idle-in-transaction limit (default
/// [`IDLE_IN_TRANSACTION_TIMEOUT`](crate::IDLE_IN_TRANSACTION_TIMEOUT)):
/// past it the server rolls the claim back and ends the connection, and
/// the results are offered again.
#[must_use = "a claim is released when dropped: acknowledge it once delivered"]
pub struct ResultClaim<'a> {
    tx: tokio_postgres::Transaction<'a>,
    clock: Option<Arc<dyn Clock>>,
    tasks: Vec<FleetTask>,
}

impl fmt::Debug for ResultClaim<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResultClaim")
            .field("tasks", &self.tasks)
            .finish_non_exhaustive()
    }
}

impl ResultClaim<'_> {
    /// The claimed results (empty when there were none).
    #[must_use]
    pub fn tasks(&self) -> &[FleetTask] {
        &self.tasks
    }

    /// Marks every claimed result notified and commits: they are never
    /// offered again.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`]: nothing was marked (the claim was rolled
    /// back), and the results will be offered again.
    pub async fn acknowledge(self) -> Result<(), FleetError> {
        let now = self_now(&self.clock, &self.tx).await?;
        let ids: Vec<&str> = self.tasks.iter().map(|t| t.info.id.as_str()).collect();
        self.tx
            .execute(
                "UPDATE asynctask_tasks SET notified_at = $2 WHERE id = ANY($1)",
                &[&ids, &now],
            )
            .await
            .map_err(FleetError::db("marking results delivered"))?;
        self.tx
            .commit()
            .await
            .map_err(FleetError::db("marking results delivered"))
    }
}

/// Whether `err` is a statement that waited past the connection's
/// `lock_timeout` (SQLSTATE 55P03): nothing it did was kept, and the
/// connection is fine.
pub(crate) fn is_lock_timeout(err: &FleetError) -> bool {
    matches!(err, FleetError::Database { source, .. }
        if source.code() == Some(&SqlState::LOCK_NOT_AVAILABLE))
}

/// The fleet's time now, on `client` (a transaction's, for one snapshot).
pub(crate) async fn self_now(
    clock: &Option<Arc<dyn Clock>>,
    client: &impl GenericClient,
) -> Result<i64, FleetError> {
    match clock {
        Some(clock) => Ok(to_db(clock.now_ms())),
        None => client
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                &[],
            )
            .await
            .map(|row| row.get(0))
            .map_err(FleetError::db("reading the database's clock")),
    }
}

/// What a worker's registration needs beyond the database: a name, and
/// at least one workspace, none blank.
pub(crate) fn check_worker(spec: &WorkerSpec) -> Result<(), FleetError> {
    non_empty(&spec.name, "a worker's name")?;
    if spec.workspaces.is_empty() {
        return Err(FleetError::NoWorkspaces {
            name: spec.name.clone(),
        });
    }
    spec.workspaces
        .iter()
        .try_for_each(|workspace| non_empty(workspace, "a worker's workspace"))
}

pub(crate) fn non_empty(value: &str, what: &'static str) -> Result<(), FleetError> {
    if value.trim().is_empty() {
        Err(FleetError::Empty(what))
    } else {
        Ok(())
    }
}

pub(crate) fn to_db(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

pub(crate) fn from_db(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

pub(crate) fn task_from_row(row: &Row) -> Result<FleetTask, FleetError> {
    let id: String = row.get(0);
    let status = match row.get::<_, &str>(3) {
        "queued" => AsyncTaskStatus::Queued,
        "running" => AsyncTaskStatus::Running,
        "completed" => AsyncTaskStatus::Completed,
        "failed" => AsyncTaskStatus::Failed,
        _ => AsyncTaskStatus::Cancelled,
    };
    let output = row
        .get::<_, Option<&str>>(8)
        .map(serde_json::from_str::<OutputObject>)
        .transpose()
        .map_err(|source| FleetError::Output {
            task: id.clone(),
            source,
        })?;
    let time = |index: usize| row.get::<_, Option<i64>>(index).map(from_db);
    let mut info = AsyncTaskInfo::queued(
        id,
        row.get::<_, String>(1),
        row.get::<_, String>(2),
        from_db(row.get(4)),
    );
    info.status = status;
    info.started_at = time(5);
    info.completed_at = time(6);
    info.notified_at = time(7);
    info.output = output;
    info.error = row.get(9);
    Ok(FleetTask {
        info,
        workspace: row.get(10),
        origin: row.get(11),
        worker: row.get(12),
        progress: row.get(13),
        front: row.get(14),
        whole_output_bytes: row.get::<_, Option<i64>>(15).map(from_db),
    })
}
