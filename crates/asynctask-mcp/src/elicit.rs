//! Questions from running subagents, put to the user through MCP elicitation
//! when the client declared it: a form with the question (and its choices),
//! whose answer goes back to the subagent. A question the client cannot take
//! goes back to the System Note path.

use asynctask_manager::{Answer, AsyncTaskManager, PendingQuestion, Subscription};
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, EnumSchema, ServerRequest,
};
use rmcp::service::ServiceError;
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::gate::ReminderGate;

/// What asks the user while a session is served; dropping it stops asking
/// (questions in flight go back to the System Note path).
pub(crate) struct Elicitation {
    _subscription: Subscription,
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

/// Starts asking the user, through `peer`, each question a task this
/// session's gate may take asks from now on — when the client declared
/// elicitation (known once it initialized; a question meanwhile, or to a
/// client without it, takes the System Note path).
pub(crate) fn start(
    manager: &AsyncTaskManager,
    gate: &ReminderGate,
    peer: Peer<RoleServer>,
) -> Elicitation {
    // Known once the client initialized, which it has when a session is
    // served: from now on no reminder carries a question.
    gate.ask_in_forms(client_elicits(&peer));
    let (sender, mut asked) = mpsc::unbounded_channel::<(String, PendingQuestion)>();
    let subscription = {
        let gate = gate.clone();
        manager.on_question(move |task, question| {
            if gate.may_claim(task) {
                let _ = sender.send((task.subagent_name().to_owned(), question.clone()));
            }
        })
    };
    let manager = manager.clone();
    let gate = gate.clone();
    let task = tokio::spawn(async move {
        // Aborted with this task: each form waits on its own.
        let mut forms = JoinSet::new();
        loop {
            tokio::select! {
                next = asked.recv() => match next {
                    Some((subagent, question)) => {
                        forms.spawn(ask(manager.clone(), gate.clone(), peer.clone(), subagent, question));
                    }
                    None => return,
                },
                Some(_) = forms.join_next(), if !forms.is_empty() => {}
            }
        }
    });
    Elicitation {
        _subscription: subscription,
        task,
    }
}

/// Puts one question to the user and answers it with what they chose. The
/// question is held meanwhile, so no System Note shows it too; if the client
/// cannot take the form, it is let go for the System Note path.
async fn ask(
    manager: AsyncTaskManager,
    gate: ReminderGate,
    peer: Peer<RoleServer>,
    subagent: String,
    question: PendingQuestion,
) {
    if !client_elicits(&peer) {
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
    // Shown already, or held by a response on its way: not ours to ask.
    let Some(mine) = mine else { return };
    let release = ReleaseOnDrop {
        manager: manager.clone(),
        gate: gate.clone(),
        question: Some(mine.clone()),
    };
    match create_elicitation(&peer, form(&subagent, &mine)).await {
        Ok(result) => {
            let answer = answer_of(&result);
            let status = answer.status();
            // Withdrawn meanwhile (its task ended, or it timed out): nothing
            // waits for the answer any more.
            let taken = manager.answer_pending(&mine, answer).is_ok();
            tracing::debug!(task_id = %mine.task_id, status, taken, "a question was answered through elicitation");
            release.shown();
        }
        Err(err) => {
            tracing::warn!(task_id = %mine.task_id, %err, "the client did not take a question as a form; the model is asked instead, from now on");
            gate.ask_in_forms(false);
        }
    }
}

/// Sends `elicitation/create` and waits for the client's answer (what rmcp's
/// own helper does, without the URL parser its feature brings).
async fn create_elicitation(
    peer: &Peer<RoleServer>,
    params: ElicitRequestParams,
) -> Result<ElicitResult, ServiceError> {
    let request = ElicitRequest::new(params);
    match peer
        .send_request(ServerRequest::ElicitRequest(request))
        .await?
    {
        ClientResult::ElicitResult(result) => Ok(result),
        _ => Err(ServiceError::UnexpectedResponse),
    }
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
