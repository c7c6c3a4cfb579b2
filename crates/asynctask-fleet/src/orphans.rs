//! Tasks a worker's registration holds but the worker does not run: a claim
//! committed whose answer never reached the worker (the statement's time ran
//! out, the connection dropped with the commit's reply in flight); and
//! tasks whose stored launch cannot be read.

use crate::fleet::self_now;
use crate::storable::{payload, storable_text};
use crate::types::{Interrupted, WorkerLease, untracked_task_error};
use crate::{Fleet, FleetError};

/// The error of a task whose stored launch cannot be read (its row was
/// written by hand): it can never run as launched.
pub(crate) fn unreadable_launch_error(why: &str) -> String {
    format!("the task's launch cannot be read: {why}")
}

/// Fails task `id`, just claimed under token `fence`, whose launch cannot
/// be read (`why`), fenced as an end is: only while the claim is current
/// and its worker's lease holds (a reaper may have failed it already); its
/// workspace's fronts are woken at commit.
pub(crate) async fn fail_unreadable(
    tx: &impl tokio_postgres::GenericClient,
    id: &str,
    fence: i64,
    why: &str,
    now: i64,
) -> Result<(), FleetError> {
    tracing::warn!(task = %id, error = %why, "a claimed task's launch cannot be read: failed");
    tx.execute(
        &format!(
            "WITH failed AS (
            UPDATE asynctask_tasks t SET status = 'failed', completed_at = $2, error = $3
            FROM asynctask_workers w
            WHERE t.id = $1 AND t.fence = $5 AND t.status = 'running'
              AND w.id = t.worker_id AND w.state = 'live' AND w.lease_expires_at > $2
            RETURNING t.workspace
         )
         SELECT pg_notify($4, {}) FROM failed",
            payload("workspace")
        ),
        &[
            &id,
            &now,
            &storable_text(&unreadable_launch_error(why)).as_ref(),
            &crate::listen::ENDED_CHANNEL,
            &fence,
        ],
    )
    .await
    .map_err(FleetError::db("failing a task whose launch cannot be read"))?;
    Ok(())
}

impl Fleet {
    /// Fails, with [`untracked_task_error`], the tasks running under this
    /// worker's registration whose ids are not in `tracked` (those it runs
    /// or still has an end to write for), in one statement fenced like an
    /// end: only while the worker's lease holds. Returns them, each once.
    ///
    /// A worker calls this at every (re)connection and heartbeat, so a
    /// claim it lost track of is reported at once rather than held under its
    /// live lease forever (never run, never reaped, taking a slot).
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn fail_untracked(
        &self,
        lease: &WorkerLease,
        tracked: &[String],
    ) -> Result<Vec<Interrupted>, FleetError> {
        let now = self_now(&self.clock, &self.client).await?;
        let error = untracked_task_error(&lease.name);
        let rows = self
            .client
            .query(
                &format!(
                    "WITH failed AS (
                    UPDATE asynctask_tasks t
                    SET status = 'failed', completed_at = $3, error = $4
                    FROM asynctask_workers w
                    WHERE t.worker_id = $1 AND t.status = 'running' AND NOT (t.id = ANY($2))
                      AND w.id = t.worker_id AND w.state = 'live' AND w.lease_expires_at > $3
                    RETURNING t.id, t.workspace, w.name
                 )
                 SELECT id, workspace, name, pg_notify($5, {})::text FROM failed",
                    payload("workspace")
                ),
                &[
                    &lease.worker_id,
                    &tracked,
                    &now,
                    &storable_text(&error).as_ref(),
                    &crate::listen::ENDED_CHANNEL,
                ],
            )
            .await
            .map_err(FleetError::db("failing the tasks a worker lost track of"))?;
        let failed: Vec<Interrupted> = rows
            .iter()
            .map(|row| Interrupted {
                id: row.get(0),
                workspace: row.get(1),
                worker: row.get(2),
            })
            .collect();
        for task in &failed {
            tracing::warn!(task = %task.id, worker = %task.worker,
                "a task claimed under this registration was not running here: failed");
        }
        Ok(failed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use asynctask_model::{AsyncTaskStatus, ManualClock};
    use asynctask_test_support::TestDatabase;

    use super::*;
    use crate::{FleetOptions, NewTask, WorkerSpec};

    #[tokio::test]
    async fn an_unreadable_launch_is_failed_only_while_the_claim_s_lease_holds() {
        let db = TestDatabase::create("unreadable_fence").await;
        Fleet::migrate(db.config()).await.expect("migrated");
        let clock = ManualClock::new(1_000);
        let options = FleetOptions::new().clock(Arc::new(clock.clone()));
        let mut fleet = Fleet::connect(db.config(), options)
            .await
            .expect("connects");
        fleet
            .submit(NewTask::new("t1", "ws", "a", "go"))
            .await
            .expect("submitted");
        let spec = WorkerSpec::new("w", ["a"])
            .with_workspaces(["ws", "ws2"])
            .with_lease(Duration::from_secs(1));
        let lease = fleet.register_worker(&spec).await.expect("registered");
        let task = fleet
            .claim(&lease, 1)
            .await
            .expect("claims")
            .pop()
            .expect("one");

        // Past the lease, before anyone reaped: the claim's token is still
        // the task's, but its worker's lease is not live.
        fail_unreadable(&fleet.client, "t1", task.fence, "bad", 2_000)
            .await
            .expect("runs");
        let t1 = fleet.task("t1").await.expect("reads").expect("exists");
        assert_eq!(t1.info.status, AsyncTaskStatus::Running, "fenced");

        // Within the lease it fails.
        fail_unreadable(&fleet.client, "t1", task.fence, "bad", 1_500)
            .await
            .expect("runs");
        let t1 = fleet.task("t1").await.expect("reads").expect("exists");
        assert_eq!(t1.info.status, AsyncTaskStatus::Failed);
        assert_eq!(t1.info.error, Some(unreadable_launch_error("bad")));
    }
}
