//! Questions from running subagents, put to the user through MCP elicitation
//! when the client declared it: a form with the question (and its choices),
//! whose answer goes back to the subagent. A question the client cannot take
//! goes back to the System Note path.

use asynctask_manager::{Answer, AsyncTaskManager, PendingQuestion};
use rmcp::model::{
    CancelledNotificationParam, ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, EnumSchema, ServerRequest,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use tokio::task::JoinSet;

use crate::gate::ReminderGate;

/// What asks the user while a session is served; dropping it stops asking
/// (questions in flight go back to the System Note path).
pub(crate) struct Elicitation {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Elicitation {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether the client declared form elicitation (a capability with neither
/// `form` nor `url` means form, as before the 2025-11-25 protocol).
pub(crate) fn client_elicits(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info()
        .and_then(|info| info.capabilities.elicitation.clone())
        .is_some_and(|elicitation| elicitation.form.is_some() || elicitation.url.is_none())
}

/// Starts asking the user, through `peer`, every question a task this
/// session's gate may take waits on — when the client declared elicitation
/// (known once it initialized; to a client without it, or after a form
/// failed, questions take the System Note path). Each change of the ledger
/// (a question asked, a claim ended, a task finished) looks again, so a
/// question asked while no session was connected, or let go by another
/// session, is asked too.
pub(crate) fn start(
    manager: &AsyncTaskManager,
    gate: &ReminderGate,
    peer: Peer<RoleServer>,
) -> Elicitation {
    gate.ask_in_forms(client_elicits(&peer));
    let manager = manager.clone();
    let gate = gate.clone();
    let task = tokio::spawn(async move {
        // Aborted with this task: each form waits on its own.
        let mut forms = JoinSet::new();
        loop {
            let changed = gate.changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !gate.asks_in_forms() {
                return;
            }
            if manager.has_unshown_questions() {
                for question in manager.pending_questions() {
                    let Some(task) = manager.task(&question.task_id) else {
                        continue;
                    };
                    if gate.may_claim(&task) {
                        let subagent = task.subagent_name().to_owned();
                        forms.spawn(ask(
                            manager.clone(),
                            gate.clone(),
                            peer.clone(),
                            subagent,
                            question,
                        ));
                    }
                }
            }
            tokio::select! {
                () = &mut changed => {}
                Some(_) = forms.join_next(), if !forms.is_empty() => {}
            }
        }
    });
    Elicitation { task }
}

/// Puts one question to the user and answers it with what they chose. The
/// question is held meanwhile, so no System Note shows it too; a question
/// that stops waiting meanwhile (answered another way, timed out, its task
/// ended) has its form cancelled; if the client cannot take the form, the
/// session's questions go to the System Note path from then on.
async fn ask(
    manager: AsyncTaskManager,
    gate: ReminderGate,
    peer: Peer<RoleServer>,
    subagent: String,
    question: PendingQuestion,
) {
    if !gate.asks_in_forms() {
        return;
    }
    let held = manager.claim_questions(|id| id == question.task_id);
    let mut mine = None;
    for claimed in held {
        if claimed.number == question.number {
            mine = Some(claimed);
        } else {
            manager.end_question_claim(&claimed, false);
        }
    }
    // Shown already, or held by another delivery: not ours to ask.
    let Some(mine) = mine else { return };
    let release = ReleaseOnDrop {
        manager: manager.clone(),
        gate: gate.clone(),
        question: Some(mine.clone()),
    };
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(form(&subagent, &mine)));
    let handle = match peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(handle) => handle,
        Err(err) => return form_failed(&gate, &mine, &err.to_string()),
    };
    let id = handle.id.clone();
    let mut response = handle.rx;
    let response = loop {
        if !still_waits(&manager, &mine) {
            let cancel = CancelledNotificationParam::new(
                Some(id),
                Some("the question no longer waits for an answer".to_owned()),
            );
            let _ = peer.notify_cancelled(cancel).await;
            release.shown();
            return;
        }
        // Woken when the question stops waiting (answered another way,
        // timed out, its task ended): its form is cancelled at once.
        tokio::select! {
            response = &mut response => break response,
            () = manager.question_settled(&mine) => {}
        }
    };
    match response {
        Ok(Ok(ClientResult::ElicitResult(result))) => {
            let answer = answer_of(&result);
            let status = answer.status();
            // Withdrawn meanwhile: nothing waits for the answer any more.
            let taken = manager.answer_pending(&mine, answer).is_ok();
            tracing::debug!(task_id = %mine.task_id, status, taken, "a question was answered through elicitation");
            release.shown();
        }
        Ok(Ok(_)) => form_failed(&gate, &mine, "the client answered with something else"),
        Ok(Err(err)) => form_failed(&gate, &mine, &err.to_string()),
        Err(_) => form_failed(&gate, &mine, "the session ended"),
    }
}

/// Whether `question` still waits for its answer.
fn still_waits(manager: &AsyncTaskManager, question: &PendingQuestion) -> bool {
    manager
        .pending_questions()
        .iter()
        .any(|waiting| waiting.task_id == question.task_id && waiting.number == question.number)
}

/// The client did not take a form: from now on this session's questions ride
/// in System Notes (the question itself is let go by its `ReleaseOnDrop`).
fn form_failed(gate: &ReminderGate, question: &PendingQuestion, why: &str) {
    tracing::warn!(task_id = %question.task_id, why, "the client did not take a question as a form; the model is asked instead, from now on");
    gate.ask_in_forms(false);
}

/// Ends the hold on a question: shown, or (dropped before) let go for the
/// System Note path, whose waiters are woken.
struct ReleaseOnDrop {
    manager: AsyncTaskManager,
    gate: ReminderGate,
    question: Option<PendingQuestion>,
}

impl ReleaseOnDrop {
    fn shown(mut self) {
        if let Some(question) = self.question.take() {
            self.manager.end_question_claim(&question, true);
        }
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some(question) = self.question.take() {
            self.manager.end_question_claim(&question, false);
            self.gate.notify_changed();
        }
    }
}

/// The form that asks `question` of the user: who asks (a task of
/// `subagent`), the question, and one required `answer`.
pub(crate) fn form(subagent: &str, question: &PendingQuestion) -> ElicitRequestParams {
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message(subagent, question),
        requested_schema: schema(question),
    }
}

/// The answer a filled form gives: its non-blank `answer` when accepted;
/// declined, dismissed or empty, `Declined`.
pub(crate) fn answer_of(result: &ElicitResult) -> Answer {
    match result.action {
        ElicitationAction::Accept => result
            .content
            .as_ref()
            .and_then(|content| content.get("answer"))
            .and_then(Value::as_str)
            .filter(|text| !text.trim().is_empty())
            .map_or(Answer::Declined, |text| Answer::Answered(text.to_owned())),
        // Declined, dismissed, or an action a later protocol adds.
        _ => Answer::Declined,
    }
}

/// What the form says: who asks, and the question.
fn message(subagent: &str, question: &PendingQuestion) -> String {
    let id: String = question.task_id.chars().take(8).collect();
    format!(
        "Background task {id} ({subagent}) asks:\n{}",
        question.question.text
    )
}

/// The form: one required `answer`, one of the choices when there are some.
fn schema(question: &PendingQuestion) -> ElicitationSchema {
    let builder = ElicitationSchema::builder();
    let builder = if question.question.choices.is_empty() {
        builder.required_string("answer")
    } else {
        builder.required_enum_schema(
            "answer",
            EnumSchema::builder(question.question.choices.clone()).build(),
        )
    };
    builder.build_unchecked()
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_manager::Question;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn the_form_asks_for_one_answer_among_the_choices() {
        let question = PendingQuestion {
            task_id: "0f3a9c21-5b7e".into(),
            number: 1,
            question: Question::new("Deploy to production too?").with_choices(["yes", "no"]),
        };
        assert_eq!(
            message("deployer", &question),
            "Background task 0f3a9c21 (deployer) asks:\nDeploy to production too?"
        );
        let schema = serde_json::to_value(schema(&question)).expect("json");
        assert_eq!(schema["required"], json!(["answer"]));
        assert_eq!(schema["properties"]["answer"]["enum"], json!(["yes", "no"]));
        let open = PendingQuestion {
            question: Question::new("Which region?"),
            ..question
        };
        let schema = serde_json::to_value(super::schema(&open)).expect("json");
        assert_eq!(schema["properties"]["answer"]["type"], json!("string"));
    }
}
