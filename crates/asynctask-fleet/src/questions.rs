//! Questions through the fleet's database: a worker's subagent asks, the
//! worker stores the question (fenced) and notifies the fronts; the front
//! that runs the task asks its own session and stores the answer; the worker
//! hands it to the subagent and marks it delivered (fenced).

use asynctask_manager::{Answer, Question};

use crate::listen::{MESSAGE_CHANNEL, QUESTION_CHANNEL};
use crate::storable::{payload, storable_text};
use crate::types::{ClaimedTask, WorkerLease};
use crate::{Fleet, FleetError};

/// The fence a worker's write about a claimed task carries: the claim
/// current, the task running, the worker's lease live (`$fence`, `$now`
/// numbered by the caller).
const FENCED: &str = "t.fence = $2 AND t.status = 'running'
    AND w.id = t.worker_id AND w.state = 'live' AND w.lease_expires_at > $3";

/// An answer waiting for the worker that runs its task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerToDeliver {
    /// The task's id.
    pub task_id: String,
    /// The question's number within its task.
    pub number: i64,
    /// The answer.
    pub answer: Answer,
}

impl Fleet {
    /// Stores question `number` a claimed task's subagent asks (once: a
    /// retry changes nothing), with the claim's fencing token, and notifies
    /// the fronts on [`QUESTION_CHANNEL`] (payload: the task's id).
    ///
    /// # Errors
    ///
    /// [`FleetError::Fenced`] when the claim is no longer current.
    /// [`FleetError::Database`].
    pub async fn ask_question(
        &self,
        task: &ClaimedTask,
        number: i64,
        question: &Question,
    ) -> Result<(), FleetError> {
        let now = self.now(&self.client).await?;
        let json = serde_json::to_string(question).unwrap_or_default();
        let fenced: i64 = self
            .client
            .query_one(
                &format!(
                    "WITH fenced AS (
                        SELECT t.id FROM asynctask_tasks t, asynctask_workers w
                        WHERE t.id = $1 AND {FENCED}
                     ), stored AS (
                        INSERT INTO asynctask_questions (task_id, number, question, asked_at)
                        SELECT id, $4::bigint, $5::text, $3::bigint FROM fenced
                        ON CONFLICT DO NOTHING
                     )
                     SELECT count(*) FROM fenced"
                ),
                &[&task.id, &task.fence, &now, &number, &json],
            )
            .await
            .map_err(FleetError::db("storing a question"))?
            .get(0);
        if fenced == 0 {
            return Err(FleetError::Fenced {
                task: task.id.clone(),
            });
        }
        self.notify(QUESTION_CHANNEL, &task.id).await
    }

    /// Withdraws question `number` of a claimed task (its subagent stopped
    /// waiting), unless it was answered, and notifies the fronts.
    ///
    /// # Errors
    ///
    /// [`FleetError::Fenced`] when the claim is no longer current.
    /// [`FleetError::Database`].
    pub async fn withdraw_question(
        &self,
        task: &ClaimedTask,
        number: i64,
    ) -> Result<(), FleetError> {
        let now = self.now(&self.client).await?;
        let fenced: i64 = self
            .client
            .query_one(
                &format!(
                    "WITH fenced AS (
                        SELECT t.id FROM asynctask_tasks t, asynctask_workers w
                        WHERE t.id = $1 AND {FENCED}
                     ), withdrawn AS (
                        UPDATE asynctask_questions SET state = 'withdrawn'
                        WHERE task_id IN (SELECT id FROM fenced) AND number = $4
                          AND state = 'waiting'
                     )
                     SELECT count(*) FROM fenced"
                ),
                &[&task.id, &task.fence, &now, &number],
            )
            .await
            .map_err(FleetError::db("withdrawing a question"))?
            .get(0);
        if fenced == 0 {
            return Err(FleetError::Fenced {
                task: task.id.clone(),
            });
        }
        self.notify(QUESTION_CHANNEL, &task.id).await
    }

    /// The questions running task `id` of `workspace` waits to have
    /// answered, oldest first, with their numbers.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn waiting_questions(
        &self,
        workspace: &str,
        id: &str,
    ) -> Result<Vec<(i64, Question)>, FleetError> {
        let rows = self
            .client
            .query(
                "SELECT q.number, q.question FROM asynctask_questions q
                 JOIN asynctask_tasks t ON t.id = q.task_id
                 WHERE q.task_id = $1 AND t.workspace = $2 AND t.status = 'running'
                   AND q.state = 'waiting'
                 ORDER BY q.number",
                &[&id, &workspace],
            )
            .await
            .map_err(FleetError::db("reading a task's questions"))?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                let question: Question = serde_json::from_str(row.get::<_, &str>(1)).ok()?;
                Some((row.get(0), question))
            })
            .collect())
    }

    /// Stores the answer to waiting question `number` of running task `id`
    /// of `workspace` (its NUL characters escaped, [`storable_text`]), and notifies its worker on [`MESSAGE_CHANNEL`].
    /// Returns `false` when the question no longer waits (answered,
    /// withdrawn, or its task ended). A withdrawal is not an answer: it
    /// stores nothing.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn answer_question(
        &self,
        workspace: &str,
        id: &str,
        number: i64,
        answer: &Answer,
    ) -> Result<bool, FleetError> {
        if matches!(answer, Answer::Withdrawn) {
            return Ok(false);
        }
        let now = self.now(&self.client).await?;
        let rows = self
            .client
            .query(
                "WITH answered AS (
                    UPDATE asynctask_questions q
                    SET state = 'answered', answer_status = $4, answer = $5, answered_at = $6
                    FROM asynctask_tasks t
                    WHERE q.task_id = $1 AND q.number = $3 AND q.state = 'waiting'
                      AND t.id = q.task_id AND t.workspace = $2 AND t.status = 'running'
                    RETURNING t.worker_id
                 )
                 SELECT pg_notify($7, worker_id::text)::text FROM answered",
                &[
                    &id,
                    &workspace,
                    &number,
                    &answer.status(),
                    &answer.text().map(storable_text).as_deref(),
                    &now,
                    &MESSAGE_CHANNEL,
                ],
            )
            .await
            .map_err(FleetError::db("storing an answer"))?;
        Ok(!rows.is_empty())
    }

    /// The answers not yet delivered to this worker's running tasks.
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`].
    pub async fn answers_to_deliver(
        &self,
        lease: &WorkerLease,
    ) -> Result<Vec<AnswerToDeliver>, FleetError> {
        let rows = self
            .client
            .query(
                "SELECT q.task_id, q.number, q.answer_status, q.answer
                 FROM asynctask_questions q JOIN asynctask_tasks t ON t.id = q.task_id
                 WHERE t.worker_id = $1 AND t.status = 'running'
                   AND q.state = 'answered' AND q.delivered_at IS NULL
                 ORDER BY q.task_id, q.number",
                &[&lease.worker_id],
            )
            .await
            .map_err(FleetError::db("reading answers"))?;
        Ok(rows
            .iter()
            .map(|row| {
                let text: Option<String> = row.get(3);
                let answer = match row.get::<_, &str>(2) {
                    "answered" => Answer::Answered(text.unwrap_or_default()),
                    "timed_out" => Answer::TimedOut,
                    _ => Answer::Declined,
                };
                AnswerToDeliver {
                    task_id: row.get(0),
                    number: row.get(1),
                    answer,
                }
            })
            .collect())
    }

    /// Marks the answer to question `number` of a claimed task delivered,
    /// with the claim's fencing token.
    ///
    /// # Errors
    ///
    /// [`FleetError::Fenced`] when the claim is no longer current.
    /// [`FleetError::Database`].
    pub async fn mark_answer_delivered(
        &self,
        task: &ClaimedTask,
        number: i64,
    ) -> Result<(), FleetError> {
        let now = self.now(&self.client).await?;
        let changed = self
            .client
            .execute(
                &format!(
                    "UPDATE asynctask_questions q SET delivered_at = $3
                     FROM asynctask_tasks t, asynctask_workers w
                     WHERE q.task_id = $1 AND q.number = $4 AND t.id = q.task_id AND {FENCED}"
                ),
                &[&task.id, &task.fence, &now, &number],
            )
            .await
            .map_err(FleetError::db("marking an answer delivered"))?;
        if changed == 0 {
            return Err(FleetError::Fenced {
                task: task.id.clone(),
            });
        }
        Ok(())
    }

    async fn notify(&self, channel: &str, about: &str) -> Result<(), FleetError> {
        self.client
            .execute(
                &format!("SELECT pg_notify($1, {})", payload("$2::text")),
                &[&channel, &about],
            )
            .await
            .map_err(FleetError::db("notifying"))?;
        Ok(())
    }
}
