//! Steering messages through the fleet's database: a front stores each
//! message sent to one of its tasks, the worker running the task puts it in
//! the subagent's inbox and marks it delivered, with the claim's fencing token.

use asynctask_manager::Inbox;

use tokio_postgres::types::Type;

use crate::fleet::to_db;
use crate::listen::MESSAGE_CHANNEL;
use crate::storable::storable_text;
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
    /// Stores message number `n` (its NUL characters escaped,
    /// [`storable_text`]; numbered from 1 by the one front that
    /// runs the task, so a retried store is stored once) to task `id` of
    /// `workspace`, queued or running, and notifies its worker on
    /// [`MESSAGE_CHANNEL`]. One statement, one round trip (the database's
    /// `asynctask_send_message`): the task's row is locked only while it
    /// runs, never across round trips, so a front whose link is cut
    /// mid-way cannot leave it locked (a worker's end of the task would wait).
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
        // The fleet's clock when one is given; else the function reads the
        // database's.
        let now = self.clock.as_ref().map(|clock| to_db(clock.now_ms()));
        let max = i64::try_from(MAX_UNDELIVERED_MESSAGES).unwrap_or(i64::MAX);
        // Typed parameters: no statement to prepare first.
        let rows = self
            .client
            .query_typed(
                "SELECT asynctask_send_message($1, $2, $3, $4, $5, $6, $7)",
                &[
                    (&id, Type::TEXT),
                    (&workspace, Type::TEXT),
                    (&n, Type::INT8),
                    (&storable_text(body).as_ref(), Type::TEXT),
                    (&now, Type::INT8),
                    (&max, Type::INT8),
                    (&MESSAGE_CHANNEL, Type::TEXT),
                ],
            )
            .await
            .map_err(FleetError::db("storing a message"))?;
        let outcome: Option<&str> = rows.first().and_then(|row| row.get(0));
        Ok(match outcome {
            Some("stored") => MessageSent::Stored,
            Some("full") => MessageSent::Full,
            _ => MessageSent::Ended,
        })
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
