//! What a front relays between its session and a task's worker through the
//! database, beside the task itself: steering messages one way, questions
//! the other way and their answers back.

use std::collections::HashMap;

use asynctask_manager::{Answer, Inbox, Questions};
use tokio::task::{AbortHandle, JoinSet};

use super::Shared;
use crate::messages::MessageSent;

/// A task's steering messages on their way to the fleet: taken from the
/// inbox the model's messages go to one at a time, numbered, and stored
/// ([`Fleet::send_message`](crate::Fleet::send_message)); while the fleet cannot take one, the inbox
/// fills and refuses more, as a subagent that does not read does on one
/// machine.
pub(super) struct Steering {
    pub(super) inbox: Inbox,
    open: bool,
    /// The message taken but not yet stored, with its number.
    pub(super) unsent: Option<(i64, String)>,
    next: i64,
}

impl Steering {
    pub(super) fn new(inbox: Inbox) -> Self {
        Steering {
            open: !inbox.is_closed(),
            inbox,
            unsent: None,
            next: 1,
        }
    }

    /// Whether to take the next message from the inbox.
    pub(super) fn takes_more(&self) -> bool {
        self.open && self.unsent.is_none()
    }

    pub(super) fn take(&mut self, message: Option<String>) {
        match message {
            Some(body) => {
                self.unsent = Some((self.next, body));
                self.next += 1;
            }
            None => self.open = false,
        }
    }

    /// Stores the message taken, if any; kept for later when the fleet
    /// cannot take it, dropped when the task has ended.
    pub(super) async fn send(&mut self, shared: &Shared, id: &str) {
        let Some((n, body)) = self.unsent.take() else {
            return;
        };
        let sent = shared
            .on_fleet(async |fleet, _| fleet.send_message(&shared.workspace, id, n, &body).await)
            .await;
        match sent {
            Ok(MessageSent::Stored) => tracing::info!(task = %id, message = n, "message stored"),
            Ok(MessageSent::Ended) => {}
            Ok(MessageSent::Full) => self.unsent = Some((n, body)),
            // Refused for good: sending it again would fail again, and the
            // task's later messages would wait behind it forever.
            Err(err) if !err.is_transient() => {
                tracing::error!(task = %id, message = n, error = %err.chain(),
                    "the fleet's database refused a message: dropped");
            }
            Err(err) => {
                shared.failed(&err).await;
                self.unsent = Some((n, body));
            }
        }
    }
}

/// A task's questions from its worker, put to this front's session: each
/// question the worker stored is asked through the task's desk (so the
/// session shows it as it shows a local subagent's: a System Note,
/// `wait_async_tasks`, elicitation), and its answer is stored for the
/// worker. A question the worker withdrew is withdrawn here too.
pub(super) struct Asks {
    questions: Questions,
    asking: JoinSet<(i64, Answer)>,
    /// The questions being asked, by number.
    handles: HashMap<i64, AbortHandle>,
    /// Answers not yet stored (the fleet was unreachable).
    unsent: Vec<(i64, Answer)>,
}

impl Asks {
    pub(super) fn new(questions: Questions) -> Self {
        Asks {
            questions,
            asking: JoinSet::new(),
            handles: HashMap::new(),
            unsent: Vec::new(),
        }
    }

    /// Whether a question is being asked.
    pub(super) fn asking(&self) -> bool {
        !self.asking.is_empty()
    }

    /// The next answer, once [`asking`](Self::asking).
    pub(super) async fn next(&mut self) -> Option<(i64, Answer)> {
        // An error: aborted, the worker withdrew the question.
        self.asking.join_next().await?.ok()
    }

    /// Takes an answer: stored at the next [`sync`](Self::sync).
    pub(super) fn take(&mut self, answered: Option<(i64, Answer)>) {
        if let Some((number, answer)) = answered {
            self.handles.remove(&number);
            if !matches!(answer, Answer::Withdrawn) {
                self.unsent.push((number, answer));
            }
        }
    }

    /// Stores the answers taken, then asks the questions the task's worker
    /// stored and withdraws those it withdrew.
    pub(super) async fn sync(&mut self, shared: &Shared, id: &str) {
        if !self.questions.can_ask() {
            return;
        }
        while let Some((number, answer)) = self.unsent.first().cloned() {
            let stored = shared
                .on_fleet(async |fleet, _| {
                    fleet
                        .answer_question(&shared.workspace, id, number, &answer)
                        .await
                })
                .await;
            match stored {
                Ok(_) => {
                    tracing::info!(task = %id, question = number, "answer stored");
                    self.unsent.remove(0);
                }
                // Refused for good: the next answers must not wait behind it.
                Err(err) if !err.is_transient() => {
                    tracing::error!(task = %id, question = number, error = %err.chain(),
                        "the fleet's database refused an answer: dropped");
                    self.unsent.remove(0);
                }
                Err(err) => {
                    shared.failed(&err).await;
                    return;
                }
            }
        }
        let waiting = shared
            .on_fleet(async |fleet, _| fleet.waiting_questions(&shared.workspace, id).await)
            .await;
        let waiting = match waiting {
            Ok(waiting) => waiting,
            Err(err) => {
                shared.failed(&err).await;
                return;
            }
        };
        self.handles.retain(|number, handle| {
            let still = waiting.iter().any(|(n, _)| n == number);
            if !still {
                handle.abort();
            }
            still
        });
        for (number, question) in waiting {
            if self.handles.contains_key(&number) || self.unsent.iter().any(|(n, _)| *n == number) {
                continue;
            }
            let asking = self.questions.ask(question);
            let handle = self.asking.spawn(async move { (number, asking.await) });
            self.handles.insert(number, handle);
        }
    }
}
