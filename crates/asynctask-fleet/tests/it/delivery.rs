//! Delivery: a result is claimed in a transaction; acknowledged, it is never
//! offered again; dropped, or its front gone, it is offered again.

use std::time::Duration;

use asynctask_fleet::{NewTask, WorkerSpec};
use asynctask_model::{ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use pretty_assertions::assert_eq;

use crate::connect;

fn ids(tasks: &[asynctask_fleet::FleetTask]) -> Vec<&str> {
    tasks.iter().map(|t| t.info.id.as_str()).collect()
}

#[tokio::test]
async fn each_result_is_delivered_once_across_fronts() {
    let db = crate::database("delivery").await;
    let clock = ManualClock::new(1_000);
    let mut worker = connect(&db, &clock).await;
    worker
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");
    for n in 0..6 {
        worker
            .submit(NewTask::new(format!("t{n}"), "ws", "a", "go").with_origin("session-1"))
            .await
            .expect("submitted");
    }
    worker
        .submit(NewTask::new("elsewhere", "ws2", "a", "go"))
        .await
        .expect("submitted");
    let spec = WorkerSpec::new("w", ["a"])
        .with_workspaces(["ws", "ws2"])
        .with_capacity(10)
        .with_lease(Duration::from_secs(30));
    let lease = worker.register_worker(&spec).await.expect("registered");
    for task in worker.claim(&lease, 10).await.expect("claims") {
        clock.advance(1);
        worker
            .complete(&task, &OutputObject::new(TerminateReason::Goal))
            .await
            .expect("current");
    }

    let mut front_a = connect(&db, &clock).await;
    let mut front_b = connect(&db, &clock).await;
    let claim_a = front_a.claim_results("ws", 4).await.expect("claims");
    assert_eq!(
        ids(claim_a.tasks()),
        ["t0", "t1", "t2", "t3"],
        "oldest ended first"
    );
    // While A holds them, B gets the others, and nothing of another workspace.
    let claim_b = front_b.claim_results("ws", 10).await.expect("claims");
    assert_eq!(ids(claim_b.tasks()), ["t4", "t5"]);
    assert_eq!(claim_b.tasks()[0].origin.as_deref(), Some("session-1"));
    drop(claim_b); // not delivered: offered again
    claim_a.acknowledge().await.expect("marked");

    let again = front_b.claim_results("ws", 10).await.expect("claims");
    assert_eq!(ids(again.tasks()), ["t4", "t5"]);
    again.acknowledge().await.expect("marked");
    let none = front_a.claim_results("ws", 10).await.expect("claims");
    assert_eq!(none.tasks(), []);
    drop(none);

    // A front that dies mid-delivery: its connection's end rolls the claim back.
    let mut doomed = connect(&db, &clock).await;
    let claim = doomed.claim_results("ws2", 10).await.expect("claims");
    assert_eq!(ids(claim.tasks()), ["elsewhere"]);
    std::mem::forget(claim); // no rollback sent: the process is "gone"
    drop(doomed);
    asynctask_test_support::eventually_with(
        "the dead front's claim is released",
        Duration::from_secs(30),
        || {
            let config = db.config().clone();
            let clock = clock.clone();
            async move {
                let mut front = crate::connect_config(&config, &clock).await;
                let claim = front.claim_results("ws2", 10).await.expect("claims");
                let found = !claim.tasks().is_empty();
                if found {
                    claim.acknowledge().await.expect("marked");
                }
                found
            }
        },
    )
    .await;
    let tasks = front_a.tasks("ws").await.expect("read");
    assert!(tasks.iter().all(|t| t.info.notified_at.is_some()));
}
