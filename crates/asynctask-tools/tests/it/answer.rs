//! `answer_async_task`: an answer (or a decline) reaches the subagent that
//! asked, once; every other call is refused with a text that says why.

use asynctask_manager::{Answer, AsyncTaskManager, Question, Questions, RegisterTaskInput};
use asynctask_tools::{AnswerAsyncTaskTool, CheckAsyncTasksTool};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::check_async_tasks::call;
use crate::redacted;

const ID: &str = "0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11";
/// A task beside the list fixture's, whose subagent asks.
const ASKING: &str = "d3e4f5a6-7b8c-4d9e-a0b1-c2d3e4f5a6b7";

fn asking_task() -> (AsyncTaskManager, Questions) {
    let manager = AsyncTaskManager::default();
    let (desk, questions) = Questions::channel();
    manager
        .register_task(
            RegisterTaskInput::new(ID, "deployer", "Ship the release").with_questions(desk),
        )
        .expect("registered");
    (manager, questions)
}

#[tokio::test]
async fn an_answer_reaches_its_subagent_once() {
    let (manager, questions) = asking_task();
    let asking =
        questions.ask(Question::new("Deploy to production too?").with_choices(["yes", "no"]));
    let peek = call(
        &CheckAsyncTasksTool::new(manager.clone()),
        json!({"task_id": "0f3a"}),
    )
    .await;
    let details: serde_json::Value = serde_json::from_str(&peek.llm_content).expect("json");
    assert_eq!(
        details["question"],
        json!({"text": "Deploy to production too?", "choices": ["yes", "no"]})
    );
    let list = call(&CheckAsyncTasksTool::new(manager.clone()), json!({})).await;
    assert!(
        list.llm_content
            .contains("(0s, waiting for an answer to its question)"),
        "{}",
        list.llm_content
    );

    let tool = AnswerAsyncTaskTool::new(manager.clone());
    let sent = call(&tool, json!({"task_id": "0f3a", "answer": "no"})).await;
    insta::assert_snapshot!("answer_sent", redacted(&sent, &[]));
    assert_eq!(asking.await, Answer::Answered("no".into()));
    let again = call(&tool, json!({"task_id": "0f3a", "answer": "yes"})).await;
    insta::assert_snapshot!("answer_not_asked", redacted(&again, &[]));
}

#[tokio::test]
async fn a_decline_is_an_answer_and_a_finished_task_takes_none() {
    let (manager, questions) = asking_task();
    let asking = questions.ask(Question::new("Which region?"));
    let tool = AnswerAsyncTaskTool::new(manager.clone());
    let declined = call(&tool, json!({"task_id": ID, "decline": true})).await;
    insta::assert_snapshot!("answer_declined", redacted(&declined, &[]));
    assert_eq!(asking.await, Answer::Declined);
    manager.cancel_task(ID);
    let late = call(&tool, json!({"task_id": ID, "answer": "eu"})).await;
    insta::assert_snapshot!("answer_to_a_finished_task", redacted(&late, &[]));
}

#[tokio::test]
async fn the_list_and_the_peek_show_the_question_a_task_waits_on() {
    let (manager, _clock) = crate::check_async_tasks::fixture();
    let (desk, questions) = Questions::channel();
    manager
        .register_task(
            RegisterTaskInput::new(ASKING, "deployer", "Ship the release").with_questions(desk),
        )
        .expect("registered");
    let _asking =
        questions.ask(Question::new("Deploy to production too?").with_choices(["yes", "no"]));
    let tool = CheckAsyncTasksTool::new(manager.clone());
    let list = call(&tool, json!({})).await;
    insta::assert_snapshot!("list_with_a_question", redacted(&list, &[]));
    let peek = call(&tool, json!({"task_id": ASKING})).await;
    insta::assert_snapshot!("peek_with_a_question", redacted(&peek, &[]));
}

#[tokio::test]
async fn bad_parameters_are_refused_before_anything_is_answered() {
    let (manager, questions) = asking_task();
    let _asking = questions.ask(Question::new("?"));
    let tool = AnswerAsyncTaskTool::new(manager.clone());
    for (params, error) in [
        (
            json!({"task_id": ID}),
            "answer: required (or decline: true to decline)",
        ),
        (
            json!({"task_id": ID, "answer": "  "}),
            "answer: must not be blank",
        ),
        (
            json!({"task_id": ID, "answer": "x", "decline": true}),
            "give either answer or decline: true, not both",
        ),
        (
            json!({"task_id": ID, "answer": 7}),
            "answer: invalid type: integer `7`, expected a string",
        ),
        (
            json!({"task_id": " ", "answer": "x"}),
            "task_id: must not be blank",
        ),
        (
            json!({"task_id": ID, "answer": "x", "extra": 1}),
            "extra: unknown field `extra`, expected one of `task_id`, `answer`, `decline`",
        ),
    ] {
        let refused = call(&tool, params.clone()).await;
        assert_eq!(
            refused.llm_content,
            format!("Invalid parameters for answer_async_task: {error}"),
            "{params}"
        );
    }
    assert_eq!(manager.pending_questions().len(), 1, "nothing was answered");
}
