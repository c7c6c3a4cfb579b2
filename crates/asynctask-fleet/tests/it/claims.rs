//! Claiming: each queued task goes to exactly one worker, within its
//! capacity, its subagents and the workspace's limit across all workers.

use std::collections::BTreeSet;
use std::time::Duration;

use asynctask_fleet::{Fleet, FleetError, FleetOptions, NewTask, WorkerSpec};
use asynctask_model::{AsyncTaskStatus, ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_test_support::eventually_with;
use pretty_assertions::assert_eq;
use tokio_postgres::NoTls;

use crate::connect;

const LEASE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_racing_workers_claim_each_of_200_tasks_exactly_once() {
    let db = crate::database("race").await;
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
                    .with_workspaces(["ws", "ws1", "ws2"])
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
    let db = crate::database("limit").await;
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
                    .with_workspaces(["ws", "ws1", "ws2"])
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
        .with_workspaces(["ws", "ws1", "ws2"])
        .with_capacity(5)
        .with_lease(LEASE);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    let next = fleet.claim(&lease, 5).await.expect("claims");
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].workspace, "ws");
}

#[tokio::test]
async fn a_worker_takes_only_its_subagents_up_to_its_capacity_oldest_first() {
    let db = crate::database("capacity").await;
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
        .with_workspaces(["ws", "ws1", "ws2"])
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
async fn a_worker_never_claims_a_task_of_a_workspace_it_does_not_name() {
    let db = crate::database("workspaces").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    // Two people whose projects have the same path: different workspaces.
    for (id, workspace) in [
        ("theirs1", "bob@laptop:/workspace"),
        ("mine1", "alice@desk:/workspace"),
        ("theirs2", "bob@laptop:/workspace"),
        ("mine2", "alice@desk:/workspace"),
        ("other", "team-b"),
    ] {
        fleet
            .submit(NewTask::new(id, workspace, "a", "go"))
            .await
            .expect("submitted");
    }
    let spec = WorkerSpec::new("alice-box", ["a"])
        .with_workspaces(["alice@desk:/workspace", "team-c"])
        .with_capacity(10)
        .with_lease(LEASE);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    let claimed = fleet.claim(&lease, 10).await.expect("claims");
    assert_eq!(
        claimed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["mine1", "mine2"]
    );
    assert_eq!(fleet.claim(&lease, 10).await.expect("claims"), []);
    for id in ["theirs1", "theirs2", "other"] {
        let task = fleet.task(id).await.expect("read").expect("exists");
        assert_eq!(task.info.status, AsyncTaskStatus::Queued, "{id}");
    }
    // The fronts of each workspace see only the subagents of its workers.
    assert_eq!(
        fleet
            .workspace_catalog("alice@desk:/workspace")
            .await
            .expect("reads")
            .iter()
            .map(|info| info.name.as_str())
            .collect::<Vec<_>>(),
        ["a"]
    );
    assert_eq!(
        fleet
            .workspace_catalog("bob@laptop:/workspace")
            .await
            .expect("reads"),
        []
    );
}

#[tokio::test]
async fn bad_submissions_and_workers_are_refused_with_what_is_wrong() {
    let db = crate::database("refusals").await;
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
        .register_worker(
            &WorkerSpec::new("w", ["a"])
                .with_workspaces(["ws", "ws1", "ws2"])
                .with_capacity(0),
        )
        .await
        .expect_err("no capacity");
    assert!(matches!(none, FleetError::InvalidWorker(_)), "{none:?}");
    // Still the one submission, untouched.
    let task = fleet.task("x").await.expect("read").expect("exists");
    assert_eq!(task.info.goal_prompt, "go");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_meeting_a_held_workspace_commits_what_it_has_and_never_waits_holding_another() {
    let db = crate::database("claim_order").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    for (id, workspace) in [("a", "ws1"), ("b", "ws2")] {
        fleet
            .submit(NewTask::new(id, workspace, "tester", "go"))
            .await
            .expect("submitted");
    }
    let spec = WorkerSpec::new("w", ["tester"])
        .with_workspaces(["ws", "ws1", "ws2"])
        .with_capacity(2)
        .with_lease(LEASE);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    // Another claimer, in the opposite order: it holds ws2 first.
    let (mut other, connection) = db.config().connect(NoTls).await.expect("connects");
    let driver = tokio::spawn(connection);
    let other_tx = other.transaction().await.expect("begins");
    other_tx
        .execute(
            "SELECT 1 FROM asynctask_workspaces WHERE name = 'ws2' FOR NO KEY UPDATE",
            &[],
        )
        .await
        .expect("locks ws2");
    let claiming = tokio::spawn(async move {
        let claimed = fleet.claim(&lease, 2).await.expect("claims");
        (fleet, claimed)
    });
    let (watch, connection) = db.config().connect(NoTls).await.expect("connects");
    let watch_driver = tokio::spawn(connection);
    // The claim waits for ws2 only once `a` is committed, holding no other
    // workspace: the other claimer then takes ws1 too without a deadlock.
    eventually_with(
        "the claim waits for ws2",
        Duration::from_secs(10),
        || async {
            let waiting: i64 = watch
                .query_one(
                    // This database's claim only: other tests share the
                    // server.
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE wait_event_type = 'Lock' AND datname = current_database()
                       AND query LIKE '%asynctask_claim%'",
                    &[],
                )
                .await
                .expect("reads")
                .get(0);
            waiting == 1
        },
    )
    .await;
    let a: String = watch
        .query_one("SELECT status FROM asynctask_tasks WHERE id = 'a'", &[])
        .await
        .expect("reads")
        .get(0);
    assert_eq!(a, "running", "committed before waiting");
    other_tx
        .execute(
            "SELECT 1 FROM asynctask_workspaces WHERE name = 'ws1' FOR NO KEY UPDATE",
            &[],
        )
        .await
        .expect("locks ws1: no deadlock");
    other_tx.commit().await.expect("commits");
    let (fleet, claimed) = claiming.await.expect("joined");
    let ids: Vec<&str> = claimed.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"], "oldest first, none dropped");
    assert!(claimed[0].fence < claimed[1].fence);
    drop((fleet, other, watch));
    let _ = driver.await;
    let _ = watch_driver.await;
}

#[tokio::test]
async fn on_the_database_clock_a_claim_runs_the_task_and_an_expired_lease_claims_nothing() {
    let db = crate::database("claim_db_clock").await;
    let mut fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    fleet
        .submit(NewTask::new("t1", "ws", "tester", "go"))
        .await
        .expect("submitted");
    let spec = WorkerSpec::new("w", ["tester"])
        .with_workspaces(["ws", "ws1", "ws2"])
        .with_lease(LEASE);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    let claimed = fleet.claim(&lease, 5).await.expect("claims");
    assert_eq!(
        claimed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["t1"]
    );
    let task = fleet.task("t1").await.expect("reads").expect("exists");
    assert_eq!(task.info.status, AsyncTaskStatus::Running);
    let started = task.info.started_at.expect("started");
    assert!(started >= task.info.launched_at && started < lease.expires_at);

    fleet
        .submit(NewTask::new("t2", "ws", "tester", "go"))
        .await
        .expect("submitted");
    let short = WorkerSpec::new("short", ["tester"])
        .with_workspaces(["ws", "ws1", "ws2"])
        .with_lease(Duration::from_millis(1));
    let short = fleet.register_worker(&short).await.expect("registered");
    // The database's clock passes the millisecond lease.
    let (watch, connection) = db.config().connect(NoTls).await.expect("connects");
    let driver = tokio::spawn(connection);
    eventually_with("the lease expires", Duration::from_secs(10), || async {
        watch
            .query_one(
                "SELECT lease_expires_at < (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                 FROM asynctask_workers WHERE name = 'short'",
                &[],
            )
            .await
            .expect("reads")
            .get(0)
    })
    .await;
    drop(watch);
    let _ = driver.await;
    let refused = fleet.claim(&short, 1).await.expect_err("refused");
    assert!(
        matches!(refused, FleetError::WorkerLost { ref name } if name == "short"),
        "{refused:?}"
    );
    let t2 = fleet.task("t2").await.expect("reads").expect("exists");
    assert_eq!(t2.info.status, AsyncTaskStatus::Queued);
}
