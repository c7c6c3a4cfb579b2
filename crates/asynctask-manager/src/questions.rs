//! Questions from the background: a running subagent asks, and waits for the
//! answer; whoever can answer (the host, the model, the user) answers once.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;

/// A question a running subagent asks.
///
/// # Examples
///
/// ```
/// use asynctask_manager::Question;
///
/// let question = Question::new("Delete the 3 stale branches?").with_choices(["yes", "no"]);
/// assert_eq!(question.choices, ["yes", "no"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Question {
    /// What the subagent asks.
    pub text: String,
    /// The answers it expects, if it gave any (an answer need not be one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
}

impl Question {
    /// How many characters of a question's text are kept.
    pub const TEXT_CHARS: usize = 2_000;
    /// How many choices are kept, each cut to [`CHOICE_CHARS`](Self::CHOICE_CHARS).
    pub const CHOICES: usize = 20;
    /// How many characters of each choice are kept.
    pub const CHOICE_CHARS: usize = 200;

    /// A question with no choices. Its text is cut to
    /// [`TEXT_CHARS`](Self::TEXT_CHARS) characters.
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        Question {
            text: cut(text.into(), Self::TEXT_CHARS),
            choices: Vec::new(),
        }
    }

    /// The answers the subagent expects: blank ones are dropped, the rest cut
    /// to [`CHOICES`](Self::CHOICES) of [`CHOICE_CHARS`](Self::CHOICE_CHARS)
    /// characters.
    #[must_use]
    pub fn with_choices<S: Into<String>>(mut self, choices: impl IntoIterator<Item = S>) -> Self {
        self.choices = choices
            .into_iter()
            .map(|choice| cut(choice.into(), Self::CHOICE_CHARS))
            .filter(|choice| !choice.trim().is_empty())
            .take(Self::CHOICES)
            .collect();
        self
    }
}

fn cut(mut text: String, chars: usize) -> String {
    if let Some((at, _)) = text.char_indices().nth(chars) {
        text.truncate(at);
    }
    text
}

/// What a subagent's question got back.
///
/// # Examples
///
/// ```
/// use asynctask_manager::Answer;
///
/// assert_eq!(Answer::Answered("yes".into()).text(), Some("yes"));
/// assert_eq!(Answer::Declined.status(), "declined");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// The answer.
    Answered(String),
    /// Whoever was asked chose not to answer.
    Declined,
    /// Nobody answered in the time the subagent gave.
    TimedOut,
    /// The question can no longer be answered: its task ended, or it was never
    /// registered to take questions.
    Withdrawn,
}

impl Answer {
    /// The answer's text, when it was answered.
    #[must_use]
    pub fn text(&self) -> Option<&str> {
        match self {
            Answer::Answered(text) => Some(text),
            _ => None,
        }
    }

    /// `answered`, `declined`, `timed_out` or `withdrawn`: how a subprocess
    /// subagent is told.
    #[must_use]
    pub fn status(&self) -> &'static str {
        match self {
            Answer::Answered(_) => "answered",
            Answer::Declined => "declined",
            Answer::TimedOut => "timed_out",
            Answer::Withdrawn => "withdrawn",
        }
    }
}

/// A question waiting for its answer, as the host sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingQuestion {
    /// The task whose subagent asks.
    pub task_id: String,
    /// The question's number within its task, from 1.
    pub number: u64,
    /// The question.
    pub question: Question,
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// No task has this id.
    #[error("no task has this id")]
    NotFound,
    /// The task is not waiting for an answer (it asked nothing, or its
    /// question was answered, timed out or withdrawn already).
    #[error("the task is not waiting for an answer")]
    NotAsked,
}

/// A running subagent's end of its questions: [`ask`](Self::ask) and wait.
///
/// A cheap handle (clones share one desk). The `task` tool gives one to each
/// subagent it runs (in its request) and registers the other end with the
/// task ([`RegisterTaskInput::with_questions`](crate::RegisterTaskInput::with_questions)),
/// so the host, the model or the user can answer through the manager
/// ([`AsyncTaskManager::answer_question`](crate::AsyncTaskManager::answer_question)).
/// While a question waits the task is still running: its timeout runs, it can
/// be cancelled, and a cancel withdraws the question.
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
/// let asking = questions.ask(Question::new("Run the slow tests too?").with_choices(["yes", "no"]));
/// let pending = manager.pending_questions();
/// assert_eq!(pending[0].question.text, "Run the slow tests too?");
/// manager.answer_question("a", Answer::Answered("no".into()))?;
/// assert_eq!(asking.await, Answer::Answered("no".into()));
/// assert!(manager.pending_questions().is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct Questions {
    /// `None`: nobody takes questions (every one is withdrawn at once).
    desk: Option<Arc<DeskShared>>,
}

/// The manager's end of a task's questions (see [`Questions::channel`]); clones
/// share it.
#[derive(Clone)]
pub struct QuestionDesk {
    shared: Arc<DeskShared>,
}

pub(crate) type Hook = Arc<dyn Fn(&PendingQuestion) + Send + Sync>;

#[derive(Default)]
struct DeskShared {
    state: Mutex<DeskState>,
    /// Woken each time a question stops waiting: answered, withdrawn (its
    /// asker gave up, or timed out), or the task ended.
    settled: tokio::sync::Notify,
}

#[derive(Default)]
struct DeskState {
    /// The task's id, once registered.
    task_id: Option<String>,
    /// Told of each question as it is asked (the manager's event).
    hook: Option<Hook>,
    next: u64,
    /// Waiting questions, oldest first.
    waiting: Vec<Waiting>,
    /// The task ended: every question is withdrawn.
    closed: bool,
}

struct Waiting {
    number: u64,
    question: Question,
    answer: oneshot::Sender<Answer>,
    /// Taken by a claim that may show it to the model.
    claimed: bool,
    /// Shown to the model once (a claim carrying it was acknowledged).
    shown: bool,
}

impl DeskShared {
    fn lock(&self) -> MutexGuard<'_, DeskState> {
        // A list and two counters, consistent after every statement.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Questions {
    /// The two ends of a task's questions.
    #[must_use]
    pub fn channel() -> (QuestionDesk, Questions) {
        let shared = Arc::new(DeskShared::default());
        (
            QuestionDesk {
                shared: Arc::clone(&shared),
            },
            Questions { desk: Some(shared) },
        )
    }

    /// A handle whose every question is [withdrawn](Answer::Withdrawn) at
    /// once: for a subagent run where nobody can answer.
    #[must_use]
    pub fn none() -> Self {
        Questions { desk: None }
    }

    /// The manager's end of these questions, for whoever registers the task
    /// ([`RegisterTaskInput::with_questions`](crate::RegisterTaskInput::with_questions)),
    /// when there is one.
    #[must_use]
    pub fn desk(&self) -> Option<QuestionDesk> {
        self.desk.as_ref().map(|shared| QuestionDesk {
            shared: Arc::clone(shared),
        })
    }

    /// Whether anybody may answer (a desk exists and its task has not ended).
    #[must_use]
    pub fn can_ask(&self) -> bool {
        self.desk.as_ref().is_some_and(|desk| !desk.lock().closed)
    }

    /// Asks `question`; the future resolves with its answer. Dropping the
    /// future withdraws the question, so a timeout is
    /// [`ask_within`](Self::ask_within), or any `select!`.
    pub fn ask(&self, question: Question) -> Asking {
        let Some(desk) = &self.desk else {
            return Asking::answered(Answer::Withdrawn);
        };
        let (sender, receiver) = oneshot::channel();
        let (number, hook, pending) = {
            let mut state = desk.lock();
            if state.closed {
                return Asking::answered(Answer::Withdrawn);
            }
            state.next += 1;
            let number = state.next;
            let pending = state.task_id.clone().map(|task_id| PendingQuestion {
                task_id,
                number,
                question: question.clone(),
            });
            state.waiting.push(Waiting {
                number,
                question,
                answer: sender,
                claimed: false,
                shown: false,
            });
            (number, state.hook.clone(), pending)
        };
        // The manager's event, outside the desk's lock.
        if let (Some(hook), Some(pending)) = (hook, pending) {
            hook(&pending);
        }
        Asking {
            receiver: Some(receiver),
            desk: Some((Arc::clone(desk), number)),
            ready: None,
        }
    }

    /// Asks `question` and waits at most `timeout`: past it the question is
    /// withdrawn and the answer is [`Answer::TimedOut`].
    pub async fn ask_within(&self, question: Question, timeout: Duration) -> Answer {
        tokio::time::timeout(timeout, self.ask(question))
            .await
            .unwrap_or(Answer::TimedOut)
    }
}

impl fmt::Debug for Questions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Questions")
            .field("can_ask", &self.can_ask())
            .finish()
    }
}

/// The answer to one [`Questions::ask`], to await. Dropping it withdraws the
/// question.
#[must_use = "dropping it withdraws the question"]
pub struct Asking {
    receiver: Option<oneshot::Receiver<Answer>>,
    desk: Option<(Arc<DeskShared>, u64)>,
    ready: Option<Answer>,
}

impl Asking {
    fn answered(answer: Answer) -> Self {
        Asking {
            receiver: None,
            desk: None,
            ready: Some(answer),
        }
    }
}

impl Future for Asking {
    type Output = Answer;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        if let Some(answer) = self.ready.take() {
            return Poll::Ready(answer);
        }
        let Some(receiver) = self.receiver.as_mut() else {
            return Poll::Ready(Answer::Withdrawn);
        };
        match Pin::new(receiver).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(answer) => {
                self.receiver = None;
                self.desk = None;
                // A dropped sender: the task ended and its desk closed.
                Poll::Ready(answer.unwrap_or(Answer::Withdrawn))
            }
        }
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        // Not answered yet: nobody waits for it any more.
        if let Some((desk, number)) = self.desk.take() {
            desk.lock()
                .waiting
                .retain(|waiting| waiting.number != number);
            desk.settled.notify_waiters();
        }
    }
}

impl fmt::Debug for Asking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Asking")
            .field("answered", &self.ready.is_some())
            .finish_non_exhaustive()
    }
}

impl QuestionDesk {
    /// Names the task and installs the manager's event hook.
    pub(crate) fn attach(&self, task_id: &str, hook: Option<Hook>) {
        if self.shared.lock().closed {
            return;
        }
        let mut state = self.shared.lock();
        state.task_id = Some(task_id.to_owned());
        state.hook = hook;
    }

    /// The waiting questions, oldest first.
    pub(crate) fn pending(&self, task_id: &str) -> Vec<PendingQuestion> {
        let state = self.shared.lock();
        state
            .waiting
            .iter()
            .filter(|waiting| !waiting.answer.is_closed())
            .map(|waiting| PendingQuestion {
                task_id: task_id.to_owned(),
                number: waiting.number,
                question: waiting.question.clone(),
            })
            .collect()
    }

    /// Whether a question waits.
    pub(crate) fn is_waiting(&self) -> bool {
        self.shared
            .lock()
            .waiting
            .iter()
            .any(|waiting| !waiting.answer.is_closed())
    }

    /// Answers the oldest waiting question. Sending runs no user code.
    pub(crate) fn answer(&self, answer: Answer) -> Result<(), AnswerError> {
        let mut state = self.shared.lock();
        loop {
            if state.waiting.is_empty() {
                return Err(AnswerError::NotAsked);
            }
            let waiting = state.waiting.remove(0);
            self.shared.settled.notify_waiters();
            // A closed receiver: its asker went away meanwhile; try the next.
            if waiting.answer.send(answer.clone()).is_ok() {
                return Ok(());
            }
        }
    }

    /// Answers waiting question `number`.
    pub(crate) fn answer_number(&self, number: u64, answer: Answer) -> Result<(), AnswerError> {
        let mut state = self.shared.lock();
        let at = state
            .waiting
            .iter()
            .position(|waiting| waiting.number == number)
            .ok_or(AnswerError::NotAsked)?;
        let waiting = state.waiting.remove(at);
        self.shared.settled.notify_waiters();
        waiting
            .answer
            .send(answer)
            .map_err(|_| AnswerError::NotAsked)
    }

    /// Resolves once question `number` no longer waits: answered, withdrawn,
    /// or its task ended (at once when it waits no more already).
    pub(crate) fn settled(&self, number: u64) -> impl Future<Output = ()> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        async move {
            loop {
                let mut notified = std::pin::pin!(shared.settled.notified());
                // Enabled before the look: a change in between is not missed.
                notified.as_mut().enable();
                let waits = shared
                    .lock()
                    .waiting
                    .iter()
                    .any(|waiting| waiting.number == number && !waiting.answer.is_closed());
                if !waits {
                    return;
                }
                notified.await;
            }
        }
    }

    /// Takes the waiting questions not yet shown nor claimed, marking them
    /// claimed.
    pub(crate) fn claim_unshown(&self, task_id: &str) -> Vec<PendingQuestion> {
        let mut state = self.shared.lock();
        state
            .waiting
            .iter_mut()
            .filter(|waiting| !waiting.shown && !waiting.claimed && !waiting.answer.is_closed())
            .map(|waiting| {
                waiting.claimed = true;
                PendingQuestion {
                    task_id: task_id.to_owned(),
                    number: waiting.number,
                    question: waiting.question.clone(),
                }
            })
            .collect()
    }

    /// Whether a waiting question was neither shown nor claimed.
    pub(crate) fn has_unshown(&self) -> bool {
        self.shared
            .lock()
            .waiting
            .iter()
            .any(|waiting| !waiting.shown && !waiting.claimed && !waiting.answer.is_closed())
    }

    /// Ends a claim on question `number`: shown (acknowledged) or released.
    pub(crate) fn end_claim(&self, number: u64, shown: bool) {
        let mut state = self.shared.lock();
        if let Some(waiting) = state.waiting.iter_mut().find(|w| w.number == number) {
            waiting.claimed = false;
            waiting.shown |= shown;
        }
    }

    /// The task ended: every waiting question is withdrawn (its asker gets
    /// [`Answer::Withdrawn`]), and no more can be asked.
    pub(crate) fn close(&self) {
        let (waiting, hook) = {
            let mut state = self.shared.lock();
            state.closed = true;
            (std::mem::take(&mut state.waiting), state.hook.take())
        };
        // Dropping the senders wakes the askers; the hook may hold user code.
        drop(waiting);
        drop(hook);
        self.shared.settled.notify_waiters();
    }
}

impl fmt::Debug for QuestionDesk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuestionDesk")
            .field("waiting", &self.is_waiting())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_question_is_answered_once_and_a_dropped_ask_is_withdrawn() {
        let (desk, questions) = Questions::channel();
        desk.attach("t", None);
        let first = questions.ask(Question::new("one?"));
        let second = questions.ask(Question::new("two?"));
        assert_eq!(desk.pending("t").len(), 2);
        drop(first);
        assert_eq!(desk.pending("t")[0].question.text, "two?");
        desk.answer(Answer::Declined).expect("answered");
        assert_eq!(desk.answer(Answer::Declined), Err(AnswerError::NotAsked));
        assert_eq!(second.await, Answer::Declined);
    }

    #[tokio::test]
    async fn closing_withdraws_what_waits_and_what_comes() {
        let (desk, questions) = Questions::channel();
        let asking = questions.ask(Question::new("?"));
        desk.close();
        assert_eq!(asking.await, Answer::Withdrawn);
        assert_eq!(
            questions.ask(Question::new("again?")).await,
            Answer::Withdrawn
        );
        assert!(!questions.can_ask());
        assert_eq!(
            Questions::none().ask(Question::new("?")).await,
            Answer::Withdrawn
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_withdraws_the_question() {
        let (desk, questions) = Questions::channel();
        let answer = questions
            .ask_within(Question::new("?"), Duration::from_secs(5))
            .await;
        assert_eq!(answer, Answer::TimedOut);
        assert!(!desk.is_waiting());
    }

    /// Whether `future` has resolved after the runtime ran everything ready.
    async fn resolved(future: &mut Pin<Box<dyn Future<Output = ()> + Send>>) -> bool {
        tokio::select! {
            biased;
            () = future.as_mut() => true,
            () = tokio::task::yield_now() => false,
        }
    }

    #[tokio::test]
    async fn settled_wakes_when_a_question_stops_waiting_however_it_stops() {
        let (desk, questions) = Questions::channel();
        desk.attach("t", None);
        // Answered.
        let asking = questions.ask(Question::new("one?"));
        let mut settled: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(desk.settled(1));
        assert!(!resolved(&mut settled).await, "it still waits");
        desk.answer_number(1, Answer::Declined).expect("answered");
        assert!(resolved(&mut settled).await, "answered");
        assert_eq!(asking.await, Answer::Declined);
        // Withdrawn by its asker (a timeout drops the ask the same way).
        let asking = questions.ask(Question::new("two?"));
        let mut settled: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(desk.settled(2));
        assert!(!resolved(&mut settled).await, "it still waits");
        drop(asking);
        assert!(resolved(&mut settled).await, "withdrawn");
        // Its task ended.
        let _asking = questions.ask(Question::new("three?"));
        let mut settled: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(desk.settled(3));
        assert!(!resolved(&mut settled).await, "it still waits");
        desk.close();
        assert!(resolved(&mut settled).await, "closed");
        // One that waits no more resolves at once.
        let mut settled: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(desk.settled(1));
        assert!(resolved(&mut settled).await, "long answered");
    }

    #[test]
    fn long_texts_and_many_choices_are_bounded() {
        let question = Question::new("é".repeat(5_000))
            .with_choices((0..50).map(|n| format!("{n}")).chain([" ".to_owned()]));
        assert_eq!(question.text.chars().count(), Question::TEXT_CHARS);
        assert_eq!(question.choices.len(), Question::CHOICES);
    }
}
