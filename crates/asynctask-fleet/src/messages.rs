//! Steering messages through the fleet's database: a front stores each
//! message sent to one of its tasks, the worker running the task puts it in
//! the subagent's inbox and marks it delivered, with the claim's fencing token.

use asynctask_manager::Inbox;

use crate::listen::MESSAGE_CHANNEL;
use crate::types::{ClaimedTask, WorkerLease};
use crate::{Fleet, FleetError};

/// How many messages of one task may wait undelivered in the database: the
/// single-machine inbox's bound.
pub const MAX_UNDELIVERED_MESSAGES: usize = Inbox::CAPACITY;

/// What became of a message a front sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageSent {
    /// Stored (or stored already, by an attempt whose answer was lost); its
    /// worker, if it runs the task, was notified. A queued task gets it when
    /// it starts.
    Stored,
    /// [`MAX_UNDELIVERED_MESSAGES`] wait undelivered: send it again later.
    Full,
    /// The task has ended, or is not the workspace's: dropped.
    Ended,
}

/// A message waiting for the worker that runs its task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingMessage {
    /// The task's id.
    pub task_id: String,
    /// Its number among the task's messages (they are delivered in order).
    pub n: i64,
    /// The text.
    pub body: String,
}

impl Fleet {
    /// Stores message number `n` (numbered from 1 by the one front that
    /// runs the task, so a retried store is stored once) to task `id` of
    /// `workspace`, queued or running, and notifies its worker on
    /// [`MESSAGE_CHANNEL`].
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn send_message(
        &mut self,
        workspace: &str,
        id: &str,
        n: i64,
        body: &str,
    ) -> Result<MessageSent, FleetError> {
        let now = self.now(&self.client).await?;
        let tx = self
            .client
            .transaction()
            .await
            .map_err(FleetError::db("beginning a message"))?;
        // The task's row locked: no end and no other message slips between
        // the checks and the insert.
        let Some(task) = tx
            .query_opt(
                "SELECT worker_id FROM asynctask_tasks
                 WHERE id = $1 AND workspace = $2 AND status IN ('queued', 'running')
                 FOR UPDATE",
                &[&id, &workspace],
            )
            .await
            .map_err(FleetError::db("reading a message's task"))?
        else {
            return Ok(MessageSent::Ended);
        };
        let worker: Option<i64> = task.get(0);
        let stored = tx
            .query_opt(
                "SELECT 1 FROM asynctask_messages WHERE task_id = $1 AND n = $2",
                &[&id, &n],
            )
            .await
            .map_err(FleetError::db("reading a message"))?;
        if stored.is_none() {
            let waiting: i64 = tx
                .query_one(
                    "SELECT count(*) FROM asynctask_messages
                     WHERE task_id = $1 AND delivered_at IS NULL",
                    &[&id],
                )
                .await
                .map_err(FleetError::db("counting a task's messages"))?
                .get(0);
            if usize::try_from(waiting).unwrap_or(usize::MAX) >= MAX_UNDELIVERED_MESSAGES {
                return Ok(MessageSent::Full);
            }
            tx.execute(
                "INSERT INTO asynctask_messages (task_id, n, body, sent_at)
                 VALUES ($1, $2, $3, $4)",
                &[&id, &n, &body, &now],
            )
            .await
            .map_err(FleetError::db("storing a message"))?;
        }
        if let Some(worker) = worker {
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &[&MESSAGE_CHANNEL, &worker.to_string()],
            )
            .await
            .map_err(FleetError::db("notifying a message"))?;
        }
        tx.commit()
            .await
            .map_err(FleetError::db("ending a message"))?;
        Ok(MessageSent::Stored)
    }

    /// The undelivered messages of this worker's running tasks, each task's
    /// in order.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn pending_messages(
        &self,
        lease: &WorkerLease,
    ) -> Result<Vec<PendingMessage>, FleetError> {
        let rows = self
            .client
            .query(
                "SELECT m.task_id, m.n, m.body FROM asynctask_messages m
                 JOIN asynctask_tasks t ON t.id = m.task_id
                 WHERE t.worker_id = $1 AND t.status = 'running' AND m.delivered_at IS NULL
                 ORDER BY m.task_id, m.n",
                &[&lease.worker_id],
            )
            .await
            .map_err(FleetError::db("reading pending messages"))?;
        Ok(rows
            .iter()
            .map(|row| PendingMessage {
                task_id: row.get(0),
                n: row.get(1),
                body: row.get(2),
            })
            .collect())
    }

    /// Marks message `n` of a claimed task delivered, with the claim's
    /// fencing token (the claim current, its worker's lease live).
    ///
    /// # Errors
    ///
    /// [`FleetError::Fenced`] when the claim is no longer current.
    /// [`FleetError::Database`].
    pub async fn mark_message_delivered(
        &self,
        task: &ClaimedTask,
        n: i64,
    ) -> Result<(), FleetError> {
        let now = self.now(&self.client).await?;
        let changed = self
            .client
            .execute(
                "UPDATE asynctask_messages m SET delivered_at = $3
                 FROM asynctask_tasks t, asynctask_workers w
                 WHERE m.task_id = $1 AND m.n = $2 AND t.id = m.task_id
                   AND t.fence = $4 AND t.status = 'running'
                   AND w.id = t.worker_id AND w.state = 'live' AND w.lease_expires_at > $3",
                &[&task.id, &n, &now, &task.fence],
            )
            .await
            .map_err(FleetError::db("marking a message delivered"))?;
        if changed == 0 {
            return Err(FleetError::Fenced {
                task: task.id.clone(),
            });
        }
        Ok(())
    }
}
