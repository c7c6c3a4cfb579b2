//! Claiming: a worker takes queued tasks, oldest first, within its free
//! slots and each workspace's limit, one call of the database's
//! `asynctask_claim` at a time; a batch never loses the claims of its
//! earlier calls.

use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use crate::fleet::to_db;
use crate::types::{ClaimedTask, WorkerLease};
use crate::{Fleet, FleetError};

/// The SQLSTATE `asynctask_claim` raises when the worker's lease has
/// expired (or it was declared lost).
const WORKER_LOST: &str = "AT001";

impl Fleet {
    /// Claims queued tasks for a worker, oldest first, as many as its free
    /// slots allow and at most `max`, skipping workspaces at their
    /// `task-max-async`. A claim is one call of the database's
    /// `asynctask_claim` function (one round trip, one transaction): it
    /// locks the worker's row (its lease must hold), takes each oldest
    /// queued task of a subagent the worker serves that no other claimer
    /// holds (`FOR UPDATE SKIP LOCKED`), counts the workspace's running
    /// tasks under the workspace's row lock, and gives the task a new
    /// fencing token. A claim that meets a second workspace's lock held by
    /// another claimer commits what it has and is called again.
    ///
    /// A call that fails after others committed returns those (and logs
    /// the failure): a committed claim is never dropped on the floor.
    ///
    /// # Errors
    ///
    /// When the first call fails: [`FleetError::WorkerLost`] when the
    /// worker's lease has expired; [`FleetError::Database`].
    pub async fn claim(
        &mut self,
        lease: &WorkerLease,
        max: usize,
    ) -> Result<Vec<ClaimedTask>, FleetError> {
        match self.claim_within(lease, max, None).await {
            (claimed, Some(err)) if claimed.is_empty() => Err(err),
            (claimed, _) => Ok(claimed),
        }
    }

    /// [`claim`](Self::claim), each call of `asynctask_claim` given up
    /// after `per_call` (never the batch: a call that hangs loses none of
    /// the claims the calls before it made). The claims made, and the
    /// failure that stopped the batch. A call given up leaves its statement
    /// on the connection: drop the handle, and let
    /// [`fail_untracked`](Self::fail_untracked) fail what it may have claimed.
    pub(crate) async fn claim_within(
        &mut self,
        lease: &WorkerLease,
        max: usize,
        per_call: Option<Duration>,
    ) -> (Vec<ClaimedTask>, Option<FleetError>) {
        let mut claimed = Vec::new();
        while claimed.len() < max {
            let call = self.claim_some(lease, max - claimed.len());
            let result = match per_call {
                Some(limit) => tokio::time::timeout(limit, call)
                    .await
                    .unwrap_or(Err(FleetError::Unreachable { after: limit })),
                None => call.await,
            };
            match result {
                Ok((tasks, more)) => {
                    claimed.extend(tasks);
                    if !more {
                        break;
                    }
                }
                Err(err) => {
                    if !claimed.is_empty() {
                        tracing::warn!(error = %err.chain(), claimed = claimed.len(),
                            "a claim failed: keeping those already made");
                    }
                    return (claimed, Some(err));
                }
            }
        }
        (claimed, None)
    }

    /// Makes every statement of this connection that waits longer than
    /// `limit` for a lock fail (SQLSTATE 55P03: `is_lock_timeout`) rather
    /// than wait on: a worker's writes never hang on a row another session
    /// holds.
    pub(crate) async fn set_lock_timeout(&self, limit: Duration) -> Result<(), FleetError> {
        let ms = limit.as_millis().clamp(1, i32::MAX as u128);
        self.client
            .batch_execute(&format!("SET lock_timeout = {ms}"))
            .await
            .map_err(FleetError::db("setting the lock timeout"))
    }

    /// One call of `asynctask_claim`: the tasks it claimed, and whether it
    /// stopped at a workspace another claimer held (more may be queued).
    async fn claim_some(
        &self,
        lease: &WorkerLease,
        max: usize,
    ) -> Result<(Vec<ClaimedTask>, bool), FleetError> {
        // The fleet's clock when one is given; else the function reads the
        // database's, inside its transaction.
        let now = self.clock.as_ref().map(|clock| to_db(clock.now_ms()));
        let max = i32::try_from(max).unwrap_or(i32::MAX);
        // Typed parameters: no statement to prepare first, one round trip.
        let rows = self
            .client
            .query_typed(
                "SELECT id, workspace, subagent_name, goal_prompt, fence, request \
                 FROM asynctask_claim($1, $2, $3)",
                &[
                    (&lease.worker_id, Type::INT8),
                    (&now, Type::INT8),
                    (&max, Type::INT4),
                ],
            )
            .await
            .map_err(|err| {
                if err.code().map(SqlState::code) == Some(WORKER_LOST) {
                    FleetError::WorkerLost {
                        name: lease.name.clone(),
                    }
                } else {
                    FleetError::db("claiming tasks")(err)
                }
            })?;
        let mut more = false;
        let mut tasks = Vec::with_capacity(rows.len());
        let mut failure = None;
        for row in rows {
            let Some(id) = row.get::<_, Option<String>>(0) else {
                more = true;
                continue;
            };
            let names = (id.clone(), row.get(1), row.get(2), row.get(3));
            let fence: i64 = row.get(4);
            match ClaimedTask::from_stored(names, fence, row.get(5)) {
                Ok(claimed) => tasks.push(claimed),
                // A row written by hand: it can never run as launched. It
                // is failed under the claim just made, and its slot is
                // free for the next call.
                // Once failing it fails, the rest are kept all the same
                // (committed, and this worker's): an unreadable one left
                // running is failed by `fail_untracked`.
                Err(err) if failure.is_none() => {
                    let failed = async {
                        let now = self.now(&self.client).await?;
                        crate::orphans::fail_unreadable(
                            &self.client,
                            &id,
                            fence,
                            &err.to_string(),
                            now,
                        )
                        .await
                    };
                    match failed.await {
                        Ok(()) => more = true,
                        Err(fail) => failure = Some(fail),
                    }
                }
                Err(_) => {}
            }
        }
        match failure {
            Some(err) if tasks.is_empty() => Err(err),
            Some(err) => {
                tracing::warn!(error = %err.chain(), claimed = tasks.len(),
                    "failing an unreadable task failed: keeping the claims made");
                Ok((tasks, false))
            }
            None => Ok((tasks, more)),
        }
    }
}
