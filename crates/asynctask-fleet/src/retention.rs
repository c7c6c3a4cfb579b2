//! Retention: ended tasks whose result was delivered are deleted once they
//! are older than a retention period, with everything they hold (their whole
//! output, messages, questions, cancel flag and progress), in bounded
//! batches, by one process of the fleet at a time.

use std::time::Duration;

use crate::fleet::{from_db, self_now};
use crate::{Fleet, FleetError};

/// How long a delivered task is kept by default: 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// How many tasks (and as many worker and front registrations) one
/// [`prune`](Fleet::prune) deletes at most: a batch of 100 whole outputs of
/// 1 MiB each is 100 MiB for the server to drop, well under a heartbeat.
pub const PRUNE_BATCH: usize = 100;

/// The advisory lock (`pg_try_advisory_xact_lock`) a prune holds for its
/// transaction: of the processes that prune at once, one deletes and the
/// others skip at once. An operator who holds it (`SELECT
/// pg_advisory_lock(…)` in a session of their own) pauses every prune.
pub const PRUNE_LOCK: i64 = 0x6173_796e_6370_7275;

/// What one [`prune`](Fleet::prune) deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pruned {
    /// Tasks, with their outputs, messages, questions and progress.
    pub tasks: u64,
    /// Worker registrations that ended (lease expired) before the cutoff
    /// and that no kept task names.
    pub workers: u64,
    /// Front registrations likewise.
    pub fronts: u64,
}

impl Pruned {
    /// Whether some batch was full: more may be left to delete.
    #[must_use]
    pub fn was_full(&self, max: usize) -> bool {
        let max = u64::try_from(max).unwrap_or(u64::MAX);
        self.tasks >= max || self.workers >= max || self.fronts >= max
    }
}

impl Fleet {
    /// Deletes up to `max` tasks that ended, whose result was delivered
    /// (marked notified), and that both ended and were delivered more than
    /// `retain` ago on the fleet's clock, oldest first, with their whole
    /// output, steering messages, questions, cancel flag and progress; then
    /// up to `max` worker and front registrations whose lease ended more
    /// than `retain` ago and that no remaining task names. A queued or
    /// running task, or a result not delivered yet, is never deleted,
    /// however old.
    ///
    /// One transaction, gated by [`PRUNE_LOCK`]: when another process is
    /// pruning, this one deletes nothing and returns `None` at once. Call it
    /// again while [`Pruned::was_full`] says more may be left.
    ///
    /// ```no_run
    /// use asynctask_fleet::{DEFAULT_RETENTION, Fleet, FleetOptions, PRUNE_BATCH};
    /// # async fn demo() -> Result<(), asynctask_fleet::FleetError> {
    /// let mut fleet = Fleet::connect_url("host=/run/postgresql", FleetOptions::new()).await?;
    /// while let Some(pruned) = fleet.prune(DEFAULT_RETENTION, PRUNE_BATCH).await? {
    ///     if !pruned.was_full(PRUNE_BATCH) {
    ///         break;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn prune(
        &mut self,
        retain: Duration,
        max: usize,
    ) -> Result<Option<Pruned>, FleetError> {
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let retain = i64::try_from(retain.as_millis()).unwrap_or(i64::MAX);
        let clock = self.clock.clone();
        let tx = self
            .client
            .transaction()
            .await
            .map_err(FleetError::db("beginning a prune"))?;
        let gate: bool = tx
            .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&PRUNE_LOCK])
            .await
            .map_err(FleetError::db("taking the prune's lock"))?
            .get(0);
        if !gate {
            return Ok(None);
        }
        let now = self_now(&clock, &tx).await?;
        let cutoff = now.saturating_sub(retain);
        // Messages and questions go with their task (ON DELETE CASCADE);
        // the whole output, cancel flag and progress are its columns.
        let tasks = tx
            .execute(
                "DELETE FROM asynctask_tasks WHERE id IN (
                    SELECT id FROM asynctask_tasks
                    WHERE status IN ('completed', 'failed', 'cancelled')
                        AND notified_at < $1 AND completed_at < $1
                    ORDER BY completed_at, seq
                    LIMIT $2
                    FOR UPDATE SKIP LOCKED
                 )",
                &[&cutoff, &limit],
            )
            .await
            .map_err(FleetError::db("deleting old tasks"))?;
        let workers = tx
            .execute(
                "DELETE FROM asynctask_workers WHERE id IN (
                    SELECT w.id FROM asynctask_workers w
                    WHERE w.lease_expires_at < $1
                        AND NOT EXISTS (SELECT 1 FROM asynctask_tasks t WHERE t.worker_id = w.id)
                    ORDER BY w.id
                    LIMIT $2
                    FOR UPDATE SKIP LOCKED
                 )",
                &[&cutoff, &limit],
            )
            .await
            .map_err(FleetError::db("deleting old worker registrations"))?;
        let fronts = tx
            .execute(
                "DELETE FROM asynctask_fronts WHERE id IN (
                    SELECT f.id FROM asynctask_fronts f
                    WHERE f.lease_expires_at < $1
                        AND NOT EXISTS (SELECT 1 FROM asynctask_tasks t WHERE t.front_id = f.id)
                    ORDER BY f.id
                    LIMIT $2
                    FOR UPDATE SKIP LOCKED
                 )",
                &[&cutoff, &limit],
            )
            .await
            .map_err(FleetError::db("deleting old front registrations"))?;
        tx.commit()
            .await
            .map_err(FleetError::db("ending a prune"))?;
        tracing::debug!(
            tasks,
            workers,
            fronts,
            cutoff = from_db(cutoff),
            "pruned the fleet"
        );
        Ok(Some(Pruned {
            tasks,
            workers,
            fronts,
        }))
    }
}

/// How often a worker prunes, at most, when the last batch was not full.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(10 * 60);

/// How long a worker waits before the next batch when the last was full.
const PRUNE_AGAIN: Duration = Duration::from_secs(1);

/// How long one prune, its connection included, may take before it is given
/// up (its connection dropped: the server rolls its transaction back) — a
/// cut link hangs rather than fails.
const PRUNE_TIMEOUT: Duration = Duration::from_secs(60);

/// A worker's pruning, beside its loop, on a connection of its own (made for
/// each run, so a slow delete never holds a lease's renewal): at once, then
/// every [`PRUNE_INTERVAL`], and a second after a full batch, until `stop`.
/// A failure, or a prune past [`PRUNE_TIMEOUT`], is logged and tried again at
/// the next interval.
pub(crate) async fn prune_periodically(
    config: crate::DatabaseConfig,
    options: crate::FleetOptions,
    retain: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let run = async {
            let mut fleet = Fleet::connect(&config, options.clone()).await?;
            fleet.prune(retain, PRUNE_BATCH).await
        };
        let run = async {
            tokio::time::timeout(PRUNE_TIMEOUT, run)
                .await
                .unwrap_or(Err(FleetError::Unreachable {
                    after: PRUNE_TIMEOUT,
                }))
        };
        let wait = tokio::select! {
            () = stop.cancelled() => return,
            pruned = run => match pruned {
                Ok(Some(pruned)) => {
                    if pruned != Pruned::default() {
                        tracing::info!(
                            tasks = pruned.tasks,
                            workers = pruned.workers,
                            fronts = pruned.fronts,
                            retain_s = retain.as_secs(),
                            "deleted delivered tasks past their retention"
                        );
                    }
                    if pruned.was_full(PRUNE_BATCH) { PRUNE_AGAIN } else { PRUNE_INTERVAL }
                }
                // Another process is pruning.
                Ok(None) => PRUNE_INTERVAL,
                Err(err) => {
                    tracing::warn!(error = %err.chain(), "could not prune the fleet's old tasks");
                    PRUNE_INTERVAL
                }
            },
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}
