//! The worker's claims and ends: claiming what its free slots allow, and
//! writing each end with its claim's fencing token, so that neither a call
//! that hangs nor a row another session keeps locked costs it a claim made
//! or its lease.

use std::time::Duration;

use super::run::outcome_name;
use super::{Ended, RunEnd, Serving, SessionEnd};
use crate::fleet::is_lock_timeout;
use crate::{Fleet, FleetError};

impl Serving {
    /// How long one of the worker's statements may wait for a lock before
    /// it fails (a third of a heartbeat interval): a row another session
    /// keeps locked (a front whose link was cut mid-transaction) costs a
    /// write a retry at the next heartbeat, never the renewal of the lease.
    pub(super) fn lock_limit(&self) -> Duration {
        (self.worker.heartbeat_interval() / 3).max(Duration::from_millis(5))
    }

    /// Claims what the free slots allow, and starts each task. Each call
    /// of the claim is given up after a heartbeat interval, not the batch:
    /// the tasks of the calls before a failure are started.
    pub(super) async fn claim(&mut self, fleet: &mut Fleet) -> Result<(), SessionEnd> {
        let capacity = usize::try_from(self.worker.spec.capacity).unwrap_or(usize::MAX);
        let free = capacity.saturating_sub(self.running.len());
        let Some(registration) = self.registration.as_ref() else {
            return Ok(());
        };
        if free == 0 || registration.lost.is_cancelled() {
            return Ok(());
        }
        let lease = registration.lease.clone();
        let limit = self.worker.heartbeat_interval();
        let (tasks, failed) = fleet.claim_within(&lease, free, Some(limit)).await;
        let started = !tasks.is_empty();
        for task in tasks {
            self.start(task);
        }
        match failed {
            None => {}
            Some(FleetError::WorkerLost { .. }) => {
                self.lose_lease("the fleet says it has expired");
                return Ok(());
            }
            // A workspace another session holds: the next heartbeat claims.
            Some(err) if is_lock_timeout(&err) => {
                tracing::debug!(error = %err.chain(), "a claim waited too long for a lock");
            }
            Some(err) => return Err(SessionEnd::from(err)),
        }
        if started {
            // Messages sent while they were queued.
            self.deliver_messages(fleet).await?;
        }
        Ok(())
    }

    /// Takes a run's end: no longer running, to be written.
    pub(super) fn record(&mut self, mut ended: Ended) {
        self.running.remove(&ended.task.id);
        self.forget_inbox(&ended.task.id);
        if self.cancelling.remove(&ended.task.id) && matches!(ended.outcome, RunEnd::Failed(_)) {
            ended.outcome = RunEnd::Cancelled;
        }
        self.unwritten.push_back(ended);
    }

    /// Writes every end not yet written, with its claim's fencing token; one
    /// the fleet refuses is logged and dropped. One whose task's row another
    /// session keeps locked (past [`lock_limit`](Self::lock_limit)) goes to
    /// the back of the queue and the flush stops: it is tried again at the
    /// next heartbeat, after the lease's renewal.
    pub(super) async fn flush(&mut self, fleet: &Fleet) -> Result<(), SessionEnd> {
        while let Some(ended) = self.unwritten.front() {
            if let Some((text, bytes)) = &ended.whole {
                // Before the end: a front that reads the end finds it stored.
                match self
                    .db(fleet.store_whole_output(&ended.task, text, *bytes))
                    .await
                {
                    Ok(()) | Err(SessionEnd::Fatal(FleetError::Fenced { .. })) => {}
                    // The end is written all the same, pointing to an output
                    // no machine stores: said in the log.
                    Err(SessionEnd::Refused(err)) => {
                        tracing::error!(task = %ended.task.id, error = %err.chain(),
                            "the task's whole output was refused by the database: not stored");
                    }
                    Err(SessionEnd::Disconnected(err)) if is_lock_timeout(&err) => {
                        self.postpone();
                        return Ok(());
                    }
                    Err(end) => return Err(end),
                }
            }
            let write = async {
                match &ended.outcome {
                    RunEnd::Completed(output) => fleet.complete(&ended.task, output).await,
                    RunEnd::Failed(error) => fleet.fail(&ended.task, error).await,
                    RunEnd::Cancelled => fleet.cancelled(&ended.task).await,
                }
            };
            match self.db(write).await {
                Ok(()) => {
                    tracing::info!(task = %ended.task.id, outcome = outcome_name(&ended.outcome), "task ended");
                }
                Err(SessionEnd::Fatal(FleetError::Fenced { task })) => {
                    tracing::warn!(
                        task = %task,
                        "the task's end was refused: this claim is no longer current (its lease \
                         expired or it was reported interrupted); dropped"
                    );
                }
                Err(SessionEnd::Fatal(FleetError::Output { task, source })) => {
                    tracing::error!(task = %task, error = %source, "the task's output cannot be stored; dropped");
                }
                // Refused for good: the task fails with a text saying why,
                // written next; if that too is refused, it is dropped (the
                // next heartbeat fails the task as untracked).
                Err(SessionEnd::Refused(err)) if !ended.refused => {
                    tracing::error!(task = %ended.task.id, error = %err.chain(),
                        "the task's end was refused by the database: failing it instead");
                    if let Some(ended) = self.unwritten.front_mut() {
                        ended.outcome = RunEnd::Failed(refused_end_error(&err));
                        ended.whole = None;
                        ended.refused = true;
                    }
                    continue;
                }
                Err(SessionEnd::Refused(err)) => {
                    tracing::error!(task = %ended.task.id, error = %err.chain(),
                        "the task's failure was refused by the database too: dropped");
                }
                Err(SessionEnd::Disconnected(err)) if is_lock_timeout(&err) => {
                    self.postpone();
                    return Ok(());
                }
                Err(end) => return Err(end),
            }
            self.unwritten.pop_front();
        }
        Ok(())
    }

    /// Moves the first end to the back of the queue: its task's row is
    /// locked by another session.
    fn postpone(&mut self) {
        if let Some(ended) = self.unwritten.pop_front() {
            tracing::warn!(
                task = %ended.task.id,
                "the task's row is locked by another session: its end is written later"
            );
            self.unwritten.push_back(ended);
        }
    }
}

/// The error of a task whose end the fleet's database refused for good (a
/// result it cannot store): what the model reads instead of the result.
pub(super) fn refused_end_error(err: &FleetError) -> String {
    // The server's own words when it gave some; the log keeps the chain.
    let why = match err {
        FleetError::Database { source, .. } => source
            .as_db_error()
            .map_or_else(|| err.chain(), |db| db.message().to_owned()),
        other => other.chain(),
    };
    format!("the subagent ended, but the fleet's database refused to store its result: {why}")
}
