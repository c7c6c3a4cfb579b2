//! Leases and fencing: a worker past its lease can write nothing about its
//! tasks; its running tasks are failed as interrupted exactly once.

use std::collections::BTreeSet;
use std::time::Duration;

use asynctask_fleet::{FleetError, NewTask, WorkerSpec, lost_worker_error};
use asynctask_model::{AsyncTaskStatus, ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use pretty_assertions::assert_eq;

use crate::connect;

#[tokio::test]
async fn an_expired_lease_fences_the_worker_and_its_tasks_are_interrupted_once() {
    let db = crate::database("lease").await;
    let clock = ManualClock::new(10_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");
    for id in ["t1", "t2", "t3"] {
        fleet
            .submit(NewTask::new(id, "ws", "a", "go"))
            .await
            .expect("submitted");
    }
    let spec = WorkerSpec::new("build-1", ["a"])
        .with_workspaces(["ws"])
        .with_capacity(2)
        .with_lease(Duration::from_millis(1_000));
    let mut lease = fleet.register_worker(&spec).await.expect("registered");
    assert_eq!(lease.expires_at, 11_000);
    let claimed = fleet.claim(&lease, 2).await.expect("claims");
    assert_eq!(claimed.len(), 2);

    // Renewed in time: the lease runs from the heartbeat.
    clock.advance(900);
    fleet.heartbeat(&mut lease).await.expect("in time");
    assert_eq!(lease.expires_at, 11_900);
    fleet
        .complete(&claimed[0], &OutputObject::new(TerminateReason::Goal))
        .await
        .expect("current");
    // The same end written again under the same claim (a retry whose first
    // answer was lost) is done, not refused; another end is refused.
    fleet
        .complete(&claimed[0], &OutputObject::new(TerminateReason::Goal))
        .await
        .expect("the same end again");
    let other = fleet
        .fail(&claimed[0], "a different end")
        .await
        .expect_err("fenced");
    assert!(matches!(other, FleetError::Fenced { .. }), "{other:?}");

    // Past the lease, before anyone reaped: every write is refused already,
    // progress and whole outputs too.
    clock.advance(1_000);
    let progress = fleet
        .report_progress(&claimed[1], "step 2")
        .await
        .expect_err("fenced");
    assert!(
        matches!(progress, FleetError::Fenced { .. }),
        "{progress:?}"
    );
    let whole = fleet
        .store_whole_output(&claimed[1], "all of it", 9)
        .await
        .expect_err("fenced");
    assert!(matches!(whole, FleetError::Fenced { .. }), "{whole:?}");
    let t2 = fleet.task("t2").await.expect("read").expect("exists");
    assert_eq!((t2.progress, t2.whole_output_bytes), (None, None));
    let late = fleet
        .complete(&claimed[1], &OutputObject::new(TerminateReason::Goal))
        .await
        .expect_err("fenced");
    assert!(
        matches!(late, FleetError::Fenced { ref task } if task == "t2"),
        "{late:?}"
    );
    let lost = fleet.heartbeat(&mut lease).await.expect_err("lost");
    assert_eq!(
        lost.to_string(),
        "worker build-1 has lost its lease: its tasks are no longer its own"
    );
    let refused = fleet.claim(&lease, 1).await.expect_err("no claims either");
    assert!(
        matches!(refused, FleetError::WorkerLost { .. }),
        "{refused:?}"
    );

    let interrupted = fleet.reap_expired().await.expect("reaped");
    assert_eq!(interrupted.len(), 1);
    assert_eq!(
        (interrupted[0].id.as_str(), interrupted[0].worker.as_str()),
        ("t2", "build-1")
    );
    assert_eq!(
        fleet.reap_expired().await.expect("reaped"),
        [],
        "exactly once"
    );
    let t2 = fleet.task("t2").await.expect("read").expect("exists");
    assert_eq!(t2.info.status, AsyncTaskStatus::Failed);
    assert_eq!(t2.info.error, Some(lost_worker_error("build-1")));
    assert_eq!(t2.info.completed_at, Some(11_900));
    let t1 = fleet.task("t1").await.expect("read").expect("exists");
    assert_eq!(
        t1.info.status,
        AsyncTaskStatus::Completed,
        "what ended in time stays"
    );

    // Registering again gives a new lease, never the old claims back.
    let again = fleet.register_worker(&spec).await.expect("registered");
    assert_ne!(again.worker_id, lease.worker_id);
    let stale = fleet
        .fail(&claimed[1], "late")
        .await
        .expect_err("still fenced");
    assert!(matches!(stale, FleetError::Fenced { .. }), "{stale:?}");
    let next = fleet.claim(&again, 2).await.expect("claims");
    assert_eq!(
        next.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["t3"]
    );
    assert!(next[0].fence > claimed[1].fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_reapers_report_each_interrupted_task_exactly_once() {
    let db = crate::database("reapers").await;
    let clock = ManualClock::new(10_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");
    for n in 0..30 {
        fleet
            .submit(NewTask::new(format!("t{n:02}"), "ws", "a", "go"))
            .await
            .expect("submitted");
    }
    for w in 0..3 {
        let spec = WorkerSpec::new(format!("w{w}"), ["a"])
            .with_workspaces(["ws"])
            .with_capacity(10)
            .with_lease(Duration::from_millis(500));
        let lease = fleet.register_worker(&spec).await.expect("registered");
        assert_eq!(fleet.claim(&lease, 10).await.expect("claims").len(), 10);
    }
    clock.advance(500);
    let reapers = (0..4)
        .map(|_| {
            let config = db.config().clone();
            let clock = clock.clone();
            tokio::spawn(async move {
                let fleet = asynctask_fleet::Fleet::connect(
                    &config,
                    asynctask_fleet::FleetOptions::new().clock(std::sync::Arc::new(clock)),
                )
                .await
                .expect("connects");
                fleet.reap_expired().await.expect("reaps")
            })
        })
        .collect::<Vec<_>>();
    let mut reported = Vec::new();
    for reaper in reapers {
        reported.extend(reaper.await.expect("joined"));
    }
    // A worker locked by one reaper is skipped by the others: reap until none is left.
    reported.extend(fleet.reap_expired().await.expect("reaps"));
    let ids: BTreeSet<&str> = reported.iter().map(|t| t.id.as_str()).collect();
    assert_eq!((reported.len(), ids.len()), (30, 30));
    for task in fleet.tasks("ws").await.expect("read") {
        assert_eq!(task.info.status, AsyncTaskStatus::Failed);
        assert_eq!(
            task.info.error,
            task.worker.as_deref().map(lost_worker_error)
        );
    }
}
