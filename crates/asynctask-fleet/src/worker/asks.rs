//! A worker's side of questions: each running task whose subagent may ask
//! gets a desk in a registry of the worker's own; a question asked there is
//! stored in the fleet (fenced), one withdrawn there (the subagent stopped
//! waiting) is withdrawn in the fleet, and an answer the fleet holds is
//! handed to the asking subagent, then marked delivered (fenced).

use std::collections::HashSet;

use asynctask_manager::{AsyncTaskManager, Questions, RegisterTaskInput, Subscription, TaskEvent};
use asynctask_model::MaxAsyncTasks;
use tokio::sync::mpsc;

use super::{Serving, SessionEnd};
use crate::types::ClaimedTask;
use crate::{Fleet, FleetError};

/// The desks of the tasks running here.
pub(super) struct WorkerAsks {
    manager: AsyncTaskManager,
    /// Told when a subagent asks.
    pub(super) asked: mpsc::UnboundedReceiver<()>,
    _subscription: Subscription,
    /// Questions stored in the fleet that may still wait here.
    stored: HashSet<(String, u64)>,
}

impl WorkerAsks {
    pub(super) fn new() -> Self {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        let (told, asked) = mpsc::unbounded_channel();
        let subscription = manager.subscribe(move |event| {
            if matches!(event, TaskEvent::Asked { .. }) {
                let _ = told.send(());
            }
        });
        WorkerAsks {
            manager,
            asked,
            _subscription: subscription,
            stored: HashSet::new(),
        }
    }

    /// The questions handle of a task starting here.
    pub(super) fn open(&self, task: &ClaimedTask) -> Questions {
        let (desk, questions) = Questions::channel();
        let input = RegisterTaskInput::new(
            task.id.clone(),
            task.subagent_name.clone(),
            task.goal_prompt.clone(),
        )
        .with_questions(desk);
        match self.manager.register_task(input) {
            Ok(_) => questions,
            Err(err) => {
                tracing::warn!(task = %task.id, error = %err, "the subagent cannot ask questions");
                Questions::none()
            }
        }
    }

    /// A task ended here: its waiting questions are withdrawn, and it is
    /// forgotten.
    pub(super) fn close(&mut self, id: &str) {
        if self.manager.cancel_task(id) {
            self.manager.mark_notified(id);
        }
        self.stored.retain(|(task, _)| task != id);
    }
}

impl Serving {
    /// Stores the questions asked here, withdraws those no longer waiting,
    /// and hands the fleet's answers to their askers, each marked delivered
    /// once (one handed over whose mark was lost is marked again: a second
    /// answer to it is refused here).
    pub(super) async fn sync_questions(&mut self, fleet: &Fleet) -> Result<(), SessionEnd> {
        let Some(registration) = self.registration.as_ref() else {
            return Ok(());
        };
        if self.inboxes.is_empty() {
            return Ok(());
        }
        let lease = registration.lease.clone();
        let pending = self.asks.manager.pending_questions();
        for question in &pending {
            let key = (question.task_id.clone(), question.number);
            let Some((task, _)) = self.inboxes.get(&question.task_id) else {
                continue;
            };
            if self.asks.stored.contains(&key) {
                continue;
            }
            let number = i64::try_from(question.number).unwrap_or(i64::MAX);
            match self
                .db(fleet.ask_question(task, number, &question.question))
                .await
            {
                Ok(()) => {
                    tracing::info!(task = %task.id, question = number, "question stored");
                    self.asks.stored.insert(key);
                }
                Err(SessionEnd::Fatal(FleetError::Fenced { .. })) => {}
                Err(end) => return Err(end),
            }
        }
        let gone: Vec<(String, u64)> = self
            .asks
            .stored
            .iter()
            .filter(|(task, number)| {
                !pending
                    .iter()
                    .any(|q| &q.task_id == task && q.number == *number)
            })
            .cloned()
            .collect();
        for key in gone {
            if let Some((task, _)) = self.inboxes.get(&key.0) {
                let number = i64::try_from(key.1).unwrap_or(i64::MAX);
                match self.db(fleet.withdraw_question(task, number)).await {
                    Ok(()) | Err(SessionEnd::Fatal(FleetError::Fenced { .. })) => {}
                    Err(end) => return Err(end),
                }
            }
            self.asks.stored.remove(&key);
        }
        for delivery in self.db(fleet.answers_to_deliver(&lease)).await? {
            let Some((task, _)) = self.inboxes.get(&delivery.task_id) else {
                continue;
            };
            let number = u64::try_from(delivery.number).unwrap_or(0);
            if let Some(question) = pending
                .iter()
                .find(|q| q.task_id == delivery.task_id && q.number == number)
                && self
                    .asks
                    .manager
                    .answer_pending(question, delivery.answer.clone())
                    .is_ok()
            {
                tracing::info!(task = %task.id, question = number, "answer delivered");
            }
            self.asks.stored.remove(&(delivery.task_id.clone(), number));
            match self
                .db(fleet.mark_answer_delivered(task, delivery.number))
                .await
            {
                Ok(()) | Err(SessionEnd::Fatal(FleetError::Fenced { .. })) => {}
                Err(end) => return Err(end),
            }
        }
        Ok(())
    }
}
