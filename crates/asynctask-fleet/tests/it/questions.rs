//! Questions through the database: a worker stores its subagent's question
//! (fenced), the front's session reads it and answers, the worker reads the
//! answer and marks it delivered (fenced); a withdrawn question takes no
//! answer, and an ended task's questions wait no more.

use std::time::Duration;

use asynctask_fleet::{AnswerToDeliver, FleetError};
use asynctask_manager::{Answer, Question};
use asynctask_model::{ManualClock, OutputObject, TerminateReason};
use pretty_assertions::assert_eq;

use crate::connect;

const LEASE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_question_is_stored_answered_delivered_once_and_withdrawn_with_its_task() {
    let db = crate::database("questions").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    let (lease, task) = crate::running_task(&mut fleet, LEASE).await;
    let first = Question::new("Delete the 3 stale branches?").with_choices(["yes", "no"]);
    fleet.ask_question(&task, 1, &first).await.expect("stored");
    fleet
        .ask_question(&task, 1, &first)
        .await
        .expect("a retry changes nothing");
    fleet
        .ask_question(&task, 2, &Question::new("Push too?"))
        .await
        .expect("stored");
    assert_eq!(
        fleet.waiting_questions("ws", "t1").await.expect("read"),
        [(1, first.clone()), (2, Question::new("Push too?"))]
    );
    assert_eq!(
        fleet.waiting_questions("other", "t1").await.expect("read"),
        [],
        "another workspace sees none"
    );

    // Answered once; the second answer to it is refused.
    let yes = Answer::Answered("yes".to_owned());
    assert!(
        fleet
            .answer_question("ws", "t1", 1, &yes)
            .await
            .expect("stored")
    );
    assert!(
        !fleet
            .answer_question("ws", "t1", 1, &Answer::Declined)
            .await
            .expect("read")
    );
    // Withdrawn by the worker: it takes no answer.
    fleet.withdraw_question(&task, 2).await.expect("withdrawn");
    assert!(
        !fleet
            .answer_question("ws", "t1", 2, &Answer::Declined)
            .await
            .expect("read")
    );
    assert_eq!(fleet.waiting_questions("ws", "t1").await.expect("read"), []);

    let delivery = AnswerToDeliver {
        task_id: "t1".to_owned(),
        number: 1,
        answer: yes,
    };
    assert_eq!(
        fleet.answers_to_deliver(&lease).await.expect("read"),
        [delivery]
    );
    let mut stale = task.clone();
    stale.fence += 1_000;
    assert!(matches!(
        fleet.mark_answer_delivered(&stale, 1).await,
        Err(FleetError::Fenced { .. })
    ));
    assert!(matches!(
        fleet.ask_question(&stale, 3, &Question::new("late")).await,
        Err(FleetError::Fenced { .. })
    ));
    fleet.mark_answer_delivered(&task, 1).await.expect("marked");
    assert_eq!(fleet.answers_to_deliver(&lease).await.expect("read"), []);

    // The task ends: its questions wait no more, and nothing more is asked.
    fleet
        .ask_question(&task, 3, &Question::new("One more?"))
        .await
        .expect("stored");
    let output = OutputObject::new(TerminateReason::Goal).with_final_message("done");
    fleet.complete(&task, &output).await.expect("completed");
    assert_eq!(fleet.waiting_questions("ws", "t1").await.expect("read"), []);
    assert!(
        !fleet
            .answer_question("ws", "t1", 3, &Answer::Declined)
            .await
            .expect("read")
    );
    assert!(matches!(
        fleet
            .ask_question(&task, 4, &Question::new("after the end"))
            .await,
        Err(FleetError::Fenced { .. })
    ));
}
