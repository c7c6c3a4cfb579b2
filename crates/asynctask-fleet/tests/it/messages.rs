//! Steering messages through the database: stored in order for a queued or
//! running task, bounded, refused once the task ended, offered to the worker
//! running the task, and marked delivered only with a current claim.

use std::time::Duration;

use asynctask_fleet::{
    FleetError, MAX_UNDELIVERED_MESSAGES, MessageSent, NewTask, PendingMessage, WorkerSpec,
};
use asynctask_model::{ManualClock, OutputObject, TerminateReason};
use pretty_assertions::assert_eq;

use crate::connect;

const LEASE: Duration = Duration::from_secs(30);

fn pending(task: &str, n: i64, body: &str) -> PendingMessage {
    PendingMessage {
        task_id: task.to_owned(),
        n,
        body: body.to_owned(),
    }
}

#[tokio::test]
async fn messages_wait_for_the_start_reach_the_worker_in_order_and_are_marked_once() {
    let db = crate::database("messages").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .submit(NewTask::new("t1", "ws", "tester", "go"))
        .await
        .expect("submitted");
    // Queued: stored, waiting for the start; a retried store is stored once.
    for (n, body) in [(1, "first"), (2, "second"), (2, "second")] {
        assert_eq!(
            fleet.send_message("ws", "t1", n, body).await.expect("sent"),
            MessageSent::Stored
        );
    }
    assert_eq!(
        fleet
            .send_message("other", "t1", 3, "x")
            .await
            .expect("sent"),
        MessageSent::Ended,
        "another workspace's task is not found"
    );

    let spec = WorkerSpec::new("w1", ["tester"])
        .with_workspaces(["ws"])
        .with_lease(LEASE);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    let task = fleet
        .claim(&lease, 1)
        .await
        .expect("claims")
        .pop()
        .expect("one");
    assert_eq!(
        fleet
            .send_message("ws", "t1", 3, "third")
            .await
            .expect("sent"),
        MessageSent::Stored
    );
    assert_eq!(
        fleet.pending_messages(&lease).await.expect("read"),
        [
            pending("t1", 1, "first"),
            pending("t1", 2, "second"),
            pending("t1", 3, "third")
        ]
    );
    fleet
        .mark_message_delivered(&task, 1)
        .await
        .expect("marked");
    fleet
        .mark_message_delivered(&task, 2)
        .await
        .expect("marked");
    assert_eq!(
        fleet.pending_messages(&lease).await.expect("read"),
        [pending("t1", 3, "third")]
    );

    // A claim that is no longer current marks nothing.
    let mut stale = task.clone();
    stale.fence += 1_000;
    assert!(matches!(
        fleet.mark_message_delivered(&stale, 3).await,
        Err(FleetError::Fenced { .. })
    ));

    // Ended: refused, and nothing is pending any more.
    let output = OutputObject::new(TerminateReason::Goal).with_final_message("done");
    fleet.complete(&task, &output).await.expect("completed");
    assert_eq!(
        fleet
            .send_message("ws", "t1", 4, "late")
            .await
            .expect("sent"),
        MessageSent::Ended
    );
    assert_eq!(fleet.pending_messages(&lease).await.expect("read"), []);
    assert!(matches!(
        fleet.mark_message_delivered(&task, 3).await,
        Err(FleetError::Fenced { .. })
    ));
}

#[tokio::test]
async fn undelivered_messages_are_bounded_like_an_inbox_and_an_expired_lease_marks_none() {
    let db = crate::database("messages_bound").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    let (_, task) = crate::running_task(&mut fleet, LEASE).await;
    let bound = i64::try_from(MAX_UNDELIVERED_MESSAGES).expect("small");
    for n in 1..=bound {
        assert_eq!(
            fleet.send_message("ws", "t1", n, "m").await.expect("sent"),
            MessageSent::Stored
        );
    }
    assert_eq!(
        fleet
            .send_message("ws", "t1", bound + 1, "one too many")
            .await
            .expect("sent"),
        MessageSent::Full
    );
    fleet
        .mark_message_delivered(&task, 1)
        .await
        .expect("marked");
    assert_eq!(
        fleet
            .send_message("ws", "t1", bound + 1, "room again")
            .await
            .expect("sent"),
        MessageSent::Stored
    );

    // The worker's lease expired (not reaped yet): its mark is refused.
    clock.advance(LEASE.as_millis().try_into().expect("small"));
    assert!(matches!(
        fleet.mark_message_delivered(&task, 2).await,
        Err(FleetError::Fenced { .. })
    ));
}

#[tokio::test]
async fn a_database_of_the_schema_before_messages_and_questions_is_migrated() {
    let db = crate::database("messages_migrate").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .submit(NewTask::new("kept", "ws", "tester", "go"))
        .await
        .expect("submitted");
    drop(fleet);
    // Back to version 2: the messages' and questions' tables removed, and
    // what later versions added.
    crate::downgrade(&db, 2).await;
    asynctask_fleet::Fleet::migrate(db.config())
        .await
        .expect("migrated");

    let mut fleet = connect(&db, &clock).await;
    assert_eq!(
        fleet
            .send_message("ws", "kept", 1, "hello")
            .await
            .expect("sent"),
        MessageSent::Stored
    );
}

#[tokio::test]
async fn a_database_of_the_schema_before_the_message_function_is_migrated_with_its_messages() {
    let db = crate::database("messages_migrate_5").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .submit(NewTask::new("kept", "ws", "tester", "go"))
        .await
        .expect("submitted");
    assert_eq!(
        fleet
            .send_message("ws", "kept", 1, "first")
            .await
            .expect("sent"),
        MessageSent::Stored
    );
    drop(fleet);
    // Back to version 5: the message function removed.
    crate::downgrade(&db, 5).await;
    asynctask_fleet::Fleet::migrate(db.config())
        .await
        .expect("migrated");

    let mut fleet = connect(&db, &clock).await;
    assert_eq!(
        fleet
            .send_message("ws", "kept", 2, "second")
            .await
            .expect("sent"),
        MessageSent::Stored
    );
    let spec = WorkerSpec::new("w1", ["tester"])
        .with_workspaces(["ws"])
        .with_lease(LEASE);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    assert_eq!(fleet.claim(&lease, 1).await.expect("claims").len(), 1);
    assert_eq!(
        fleet.pending_messages(&lease).await.expect("reads"),
        [pending("kept", 1, "first"), pending("kept", 2, "second")],
        "the message stored before is kept"
    );
}
