//! The manager's side of questions from running subagents: who asks, the
//! answer, and the claims that show a question to the model once.

use std::sync::Arc;

use asynctask_model::AsyncTaskStatus;

use super::AsyncTaskManager;
use crate::events::TaskEvent;
use crate::manager::subscriptions::Subscription;
use crate::questions::{Answer, AnswerError, PendingQuestion, QuestionDesk};
use crate::snapshot::TaskSnapshot;

impl AsyncTaskManager {
    /// Every question a subagent waits to have answered: running tasks in
    /// start order, then queued ones, each task's oldest first.
    #[must_use]
    pub fn pending_questions(&self) -> Vec<PendingQuestion> {
        self.lock().registry.pending_questions()
    }

    /// Whether running task `id`'s subagent waits for an answer.
    #[must_use]
    pub fn waits_for_answer(&self, id: &str) -> bool {
        self.lock()
            .registry
            .question_desk(id)
            .is_some_and(QuestionDesk::is_waiting)
    }

    /// Answers the oldest question task `id`'s subagent waits on (exact id).
    /// Each question takes one answer: a second call answers the next
    /// question, or finds none.
    ///
    /// # Errors
    ///
    /// [`AnswerError::NotFound`] for an unknown id, [`AnswerError::NotAsked`]
    /// when the task waits for no answer (it asked nothing, ended, or its
    /// question was answered, timed out or withdrawn).
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_manager::{Answer, AnswerError, AsyncTaskManager, RegisterTaskInput};
    ///
    /// let manager = AsyncTaskManager::default();
    /// manager.register_task(RegisterTaskInput::new("a", "tester", "g"))?;
    /// assert_eq!(manager.answer_question("a", Answer::Declined), Err(AnswerError::NotAsked));
    /// assert_eq!(manager.answer_question("zz", Answer::Declined), Err(AnswerError::NotFound));
    /// # Ok::<(), asynctask_manager::RegisterError>(())
    /// ```
    pub fn answer_question(&self, id: &str, answer: Answer) -> Result<(), AnswerError> {
        let state = self.lock();
        match state.registry.question_desk(id) {
            // Sending wakes the asker and runs no user code: fine under the
            // lock, which keeps the answer from racing the task's end.
            Some(desk) => desk.answer(answer),
            None if state.registry.task(id).is_some() => Err(AnswerError::NotAsked),
            None => Err(AnswerError::NotFound),
        }
    }

    /// Answers exactly `question` (one [`pending_questions`](Self::pending_questions)
    /// listed), not the oldest of its task: for whoever put that one question
    /// to somebody.
    ///
    /// # Errors
    ///
    /// As [`answer_question`](Self::answer_question): [`AnswerError::NotAsked`]
    /// once it was answered, timed out or withdrawn.
    pub fn answer_pending(
        &self,
        question: &PendingQuestion,
        answer: Answer,
    ) -> Result<(), AnswerError> {
        let state = self.lock();
        match state.registry.question_desk(&question.task_id) {
            Some(desk) => desk.answer_number(question.number, answer),
            None if state.registry.task(&question.task_id).is_some() => Err(AnswerError::NotAsked),
            None => Err(AnswerError::NotFound),
        }
    }

    /// Resolves once `question` no longer waits for an answer: answered (by
    /// anyone), withdrawn (its subagent stopped waiting, or its wait timed
    /// out) or its task ended; at once when it waits no more already. For
    /// whoever shows a question somewhere it must be taken back from when it
    /// stops waiting (a form put to the user). The future holds no lock.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_manager::{Answer, AsyncTaskManager, Question, Questions, RegisterTaskInput};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let manager = AsyncTaskManager::default();
    /// let (desk, questions) = Questions::channel();
    /// manager.register_task(RegisterTaskInput::new("a", "tester", "g").with_questions(desk))?;
    /// let asking = questions.ask(Question::new("Go on?"));
    /// let question = manager.pending_questions().remove(0);
    /// let settled = manager.question_settled(&question);
    /// manager.answer_question("a", Answer::Declined)?;
    /// settled.await; // answered: it waits no more
    /// assert_eq!(asking.await, Answer::Declined);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future changes nothing.
    pub fn question_settled(
        &self,
        question: &PendingQuestion,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let desk = self
            .lock()
            .registry
            .question_desk(&question.task_id)
            .cloned();
        let number = question.number;
        async move {
            if let Some(desk) = desk {
                desk.settled(number).await;
            }
        }
    }

    /// Gives task `id`, queued or running, the desk its run's questions reach
    /// (a queued task gets it when it starts, from whoever starts its
    /// subagent). `false` when the task is unknown or has ended.
    pub fn attach_questions(&self, id: &str, desk: QuestionDesk) -> bool {
        let attached = self.lock().registry.attach_questions(id, desk);
        if attached {
            self.hook_questions(id);
        }
        attached
    }

    /// Takes, for one delivery, the waiting questions no delivery showed nor
    /// holds, of the tasks `take` accepts (by id): each is then held until
    /// [`end_question_claim`](Self::end_question_claim) says it was shown
    /// (never taken again) or not (taken by the next delivery). The runtime's
    /// claim ledger does this with every claim.
    pub fn claim_questions(&self, take: impl FnMut(&str) -> bool) -> Vec<PendingQuestion> {
        self.lock().registry.claim_questions(take)
    }

    /// Ends the hold [`claim_questions`](Self::claim_questions) put on
    /// `question`: `shown` when the delivery that carried it succeeded.
    pub fn end_question_claim(&self, question: &PendingQuestion, shown: bool) {
        if let Some(desk) = self.lock().registry.question_desk(&question.task_id) {
            desk.end_claim(question.number, shown);
        }
    }

    /// Whether a waiting question was neither shown nor held by a delivery.
    #[must_use]
    pub fn has_unshown_questions(&self) -> bool {
        self.lock().registry.has_unshown_questions()
    }

    /// Subscribes to questions only: `handler` gets the running task and what
    /// its subagent asks.
    pub fn on_question(
        &self,
        handler: impl Fn(&TaskSnapshot, &PendingQuestion) + Send + Sync + 'static,
    ) -> Subscription {
        self.subscribe(move |event| {
            if let TaskEvent::Asked { task, question } = event {
                handler(task, question);
            }
        })
    }

    /// Installs, on the desk of task `id`, the hook that turns each question
    /// into an [`Asked`](TaskEvent::Asked) event.
    pub(super) fn hook_questions(&self, id: &str) {
        let weak = self.downgrade();
        let state = self.lock();
        if let Some(desk) = state.registry.question_desk(id) {
            desk.attach(
                id,
                Some(Arc::new(move |question: &PendingQuestion| {
                    if let Some(manager) = weak.upgrade() {
                        manager.asked(question);
                    }
                })),
            );
        }
    }

    /// A subagent asked: the event, to whoever listens.
    fn asked(&self, question: &PendingQuestion) {
        let drain = {
            let mut state = self.lock();
            if !state.events.has_subscribers() {
                return;
            }
            let Some(task) = state.registry.task(&question.task_id) else {
                return;
            };
            if task.status() != AsyncTaskStatus::Running {
                return;
            }
            state.events.push(TaskEvent::Asked {
                task,
                question: question.clone(),
            })
        };
        if drain {
            self.drain_events();
        }
    }
}
