//! Claiming: each queued task goes to exactly one worker, within its
//! capacity, its subagents and the workspace's limit across all workers.

use std::collections::BTreeSet;
use std::time::Duration;

use asynctask_fleet::{FleetError, NewTask, WorkerSpec};
use asynctask_model::{AsyncTaskStatus, ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_test_support::TestDatabase;
use pretty_assertions::assert_eq;

use crate::connect;

const LEASE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_racing_workers_claim_each_of_200_tasks_exactly_once() {
    let db = TestDatabase::create("race").await;
    let clock = ManualClock::new(1_000);
    let mut front = connect(&db, &clock).await;
    front
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");
    for n in 0..200 {
        front
            .submit(NewTask::new(format!("t{n:03}"), "ws", "tester", "go"))
            .await
            .expect("submitted");
    }
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(4));
    let workers = (0..4)
        .map(|w| {
            let config = db.config().clone();
            let clock = clock.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                let mut fleet = asynctask_fleet::Fleet::connect(
                    &config,
                    asynctask_fleet::FleetOptions::new().clock(std::sync::Arc::new(clock)),
                )
                .await
                .expect("connects");
                let spec = WorkerSpec::new(format!("w{w}"), ["tester"])
                    .with_capacity(3)
                    .with_lease(LEASE);
                let lease = fleet.register_worker(&spec).await.expect("registered");
                barrier.wait().await;
                let mut mine = Vec::new();
                loop {
                    let claimed = fleet.claim(&lease, 3).await.expect("claims");
                    if claimed.is_empty() {
                        break;
                    }
                    for task in claimed {
                        let output = OutputObject::new(TerminateReason::Goal)
                            .with_final_message(format!("w{w}"));
                        fleet.complete(&task, &output).await.expect("current claim");
                        mine.push(task.id);
                    }
                }
                mine
            })
        })
        .collect::<Vec<_>>();
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.await.expect("joined"));
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(
        (all.len(), distinct.len()),
        (200, 200),
        "each task claimed once"
    );
    let tasks = front.tasks("ws").await.expect("read");
    assert!(
        tasks
            .iter()
            .all(|t| t.info.status == AsyncTaskStatus::Completed)
    );
    // The one who completed it is the one who claimed it.
    for task in &tasks {
        let message = task
            .info
            .output
            .as_ref()
            .and_then(|o| o.final_message.clone());
        assert_eq!(message, task.worker);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_workspace_limit_holds_across_racing_workers_and_a_free_slot_starts_the_next() {
    let db = TestDatabase::create("limit").await;
    let clock = ManualClock::new(1_000);
    let mut front = connect(&db, &clock).await;
    front
        .set_max_async("ws", MaxAsyncTasks::new(3).expect("valid"))
        .await
        .expect("set");
    for n in 0..10 {
        front
            .submit(NewTask::new(format!("t{n}"), "ws", "tester", "go"))
            .await
            .expect("submitted");
    }
    // Another workspace is not held back by this one's limit.
    front
        .submit(NewTask::new("other", "ws2", "tester", "go"))
        .await
        .expect("submitted");
    let racers = (0..4)
        .map(|w| {
            let config = db.config().clone();
            let clock = clock.clone();
            tokio::spawn(async move {
                let mut fleet = asynctask_fleet::Fleet::connect(
                    &config,
                    asynctask_fleet::FleetOptions::new().clock(std::sync::Arc::new(clock)),
                )
                .await
                .expect("connects");
                let spec = WorkerSpec::new(format!("w{w}"), ["tester"])
                    .with_capacity(5)
                    .with_lease(LEASE);
                let lease = fleet.register_worker(&spec).await.expect("registered");
                let claimed = fleet.claim(&lease, 5).await.expect("claims");
                (fleet, claimed)
            })
        })
        .collect::<Vec<_>>();
    let mut held = Vec::new();
    for racer in racers {
        held.push(racer.await.expect("joined"));
    }
    let claimed: Vec<&str> = held
        .iter()
        .flat_map(|(_, claimed)| claimed.iter().map(|t| t.workspace.as_str()))
        .collect();
    assert_eq!(claimed.iter().filter(|ws| **ws == "ws").count(), 3);
    assert_eq!(claimed.iter().filter(|ws| **ws == "ws2").count(), 1);

    // One ends: exactly one more of the workspace's tasks can start.
    let (fleet, tasks) = held
        .iter()
        .find(|(_, claimed)| claimed.iter().any(|t| t.workspace == "ws"))
        .expect("someone holds one");
    let first = tasks
        .iter()
        .find(|t| t.workspace == "ws")
        .expect("one of ws");
    fleet.fail(first, "exit status 1").await.expect("current");
    let (mut fleet, _) = held.pop().expect("a worker");
    let spec = WorkerSpec::new("late", ["tester"])
        .with_capacity(5)
        .with_lease(LEASE);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    let next = fleet.claim(&lease, 5).await.expect("claims");
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].workspace, "ws");
}

#[tokio::test]
async fn a_worker_takes_only_its_subagents_up_to_its_capacity_oldest_first() {
    let db = TestDatabase::create("capacity").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");
    for (id, subagent) in [("a1", "a"), ("b1", "b"), ("a2", "a"), ("a3", "a")] {
        fleet
            .submit(NewTask::new(id, "ws", subagent, "go"))
            .await
            .expect("submitted");
    }
    let spec = WorkerSpec::new("w", ["a"])
        .with_capacity(2)
        .with_lease(LEASE);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    let first = fleet.claim(&lease, 10).await.expect("claims");
    let ids: Vec<&str> = first.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["a1", "a2"]);
    assert!(first[0].fence < first[1].fence, "tokens grow");
    assert_eq!(fleet.claim(&lease, 10).await.expect("claims"), []);
    fleet.cancelled(&first[0]).await.expect("current claim");
    let next = fleet.claim(&lease, 10).await.expect("claims");
    assert_eq!(
        next.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["a3"]
    );
    assert!(next[0].fence > first[1].fence);
    let b1 = fleet.task("b1").await.expect("read").expect("exists");
    assert_eq!(
        b1.info.status,
        AsyncTaskStatus::Queued,
        "no worker serves b"
    );
}

#[tokio::test]
async fn bad_submissions_and_workers_are_refused_with_what_is_wrong() {
    let db = TestDatabase::create("refusals").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .submit(NewTask::new("x", "ws", "a", "go"))
        .await
        .expect("submitted");
    let duplicate = fleet
        .submit(NewTask::new("x", "ws", "a", "again"))
        .await
        .expect_err("duplicate");
    assert_eq!(duplicate.to_string(), "a task with id 'x' already exists");
    let empty = fleet
        .submit(NewTask::new("y", " ", "a", "go"))
        .await
        .expect_err("no workspace");
    assert_eq!(empty.to_string(), "a workspace must not be empty");
    let none = fleet
        .register_worker(&WorkerSpec::new("w", ["a"]).with_capacity(0))
        .await
        .expect_err("no capacity");
    assert!(matches!(none, FleetError::InvalidWorker(_)), "{none:?}");
    // Still the one submission, untouched.
    let task = fleet.task("x").await.expect("read").expect("exists");
    assert_eq!(task.info.goal_prompt, "go");
}
