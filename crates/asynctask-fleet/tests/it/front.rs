//! What fronts do: the live workers' catalog, results kept for their live
//! front and adopted once it is gone, cancel requests, progress; and the
//! migration from the schema before fronts.

use std::time::Duration;

use asynctask_fleet::{
    CancelRequest, Fleet, FleetError, FleetOptions, NewTask, SCHEMA_VERSION, WorkerSpec,
};
use asynctask_model::{AsyncTaskStatus, ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_tools::SubagentInfo;
use pretty_assertions::assert_eq;

use crate::connect;

fn ids(tasks: &[asynctask_fleet::FleetTask]) -> Vec<&str> {
    tasks.iter().map(|t| t.info.id.as_str()).collect()
}

#[tokio::test]
async fn the_catalog_is_the_union_of_the_live_workers_catalogs() {
    let db = crate::database("catalog").await;
    let clock = ManualClock::new(1_000);
    let fleet = connect(&db, &clock).await;
    assert_eq!(
        fleet.catalog().await.expect("reads"),
        [],
        "no worker: empty"
    );

    let builder = WorkerSpec::new("build-1", ["tester", "builder"])
        .with_workspaces(["ws"])
        .with_catalog(vec![
            SubagentInfo::new("tester", "Runs the tests").with_messages(true),
            SubagentInfo::new("builder", "Builds the project"),
        ])
        .with_lease(Duration::from_secs(10));
    let mut first = fleet.register_worker(&builder).await.expect("registered");
    clock.advance(1_000);
    let other = WorkerSpec::new("build-2", ["tester", "linter"])
        .with_workspaces(["ws"])
        .with_catalog(vec![SubagentInfo::new("tester", "Another description")])
        .with_lease(Duration::from_secs(20));
    fleet.register_worker(&other).await.expect("registered");
    assert_eq!(
        fleet.catalog().await.expect("reads"),
        [
            SubagentInfo::new("builder", "Builds the project"),
            SubagentInfo::new("linter", ""),
            // The oldest live registration's description, and whether it
            // takes steering messages.
            SubagentInfo::new("tester", "Runs the tests").with_messages(true),
        ]
    );

    // build-1 expires (not even reaped yet): its subagents leave the catalog.
    clock.advance(9_000);
    assert_eq!(
        fleet.catalog().await.expect("reads"),
        [
            SubagentInfo::new("linter", ""),
            SubagentInfo::new("tester", "Another description"),
        ]
    );
    assert!(fleet.heartbeat(&mut first).await.is_err(), "expired");
    clock.advance(11_000);
    assert_eq!(fleet.catalog().await.expect("reads"), []);
}

#[tokio::test]
async fn a_result_is_kept_for_its_live_front_and_adopted_once_it_is_gone() {
    let db = crate::database("adopt").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");
    let lease = Duration::from_secs(30);
    let mut laptop = fleet
        .register_front("ws", "laptop", lease)
        .await
        .expect("registered");
    let mut desk = fleet
        .register_front("ws", "desk", lease)
        .await
        .expect("registered");
    for id in ["mine-1", "mine-2"] {
        fleet
            .submit(NewTask::new(id, "ws", "a", "go").with_front(&laptop))
            .await
            .expect("submitted");
    }
    fleet
        .submit(NewTask::new("library", "ws", "a", "go"))
        .await
        .expect("submitted");
    let worker = fleet
        .register_worker(
            &WorkerSpec::new("w", ["a"])
                .with_workspaces(["ws"])
                .with_capacity(5)
                .with_lease(lease * 10),
        )
        .await
        .expect("registered");
    for task in fleet.claim(&worker, 5).await.expect("claims") {
        clock.advance(1);
        fleet
            .complete(&task, &OutputObject::new(TerminateReason::Goal))
            .await
            .expect("current");
    }

    // The laptop lives: its results are its own; the one no front launched
    // goes to whoever asks.
    assert_eq!(
        ids(&fleet.adopt_results(&desk, 10).await.expect("adopts")),
        ["library"]
    );
    let claim = fleet.claim_results("ws", 10).await.expect("claims");
    assert_eq!(
        ids(claim.tasks()),
        Vec::<&str>::new(),
        "kept for live fronts"
    );
    drop(claim);

    // The laptop delivers one of its own, then sleeps past its lease.
    assert_eq!(
        fleet
            .mark_notified(&["mine-1".to_owned()])
            .await
            .expect("marks"),
        1
    );
    assert_eq!(
        fleet
            .mark_notified(&["mine-1".to_owned()])
            .await
            .expect("marks"),
        0
    );
    clock.advance(20_000);
    fleet
        .front_heartbeat(&mut desk)
        .await
        .expect("renewed in time");
    clock.advance(10_000);
    let err = fleet
        .front_heartbeat(&mut laptop)
        .await
        .expect_err("expired");
    assert!(matches!(err, FleetError::FrontLost { .. }), "{err:?}");

    // Two fronts adopt at once: the undelivered result goes to one of them.
    let again = fleet
        .register_front("ws", "laptop", lease)
        .await
        .expect("registered");
    let other = connect(&db, &clock).await;
    let (a, b) = tokio::join!(
        fleet.adopt_results(&again, 10),
        other.adopt_results(&desk, 10)
    );
    let adopted: Vec<String> = a
        .expect("adopts")
        .into_iter()
        .chain(b.expect("adopts"))
        .map(|t| t.info.id)
        .collect();
    assert_eq!(
        adopted,
        ["mine-2"],
        "the desk's own adoption is kept for it"
    );
    // Moving the old registration's tasks finds none left.
    assert_eq!(
        fleet
            .rebind_front(laptop.front_id, &again)
            .await
            .expect("moves"),
        0
    );

    // A front that retires gives its results up at once.
    fleet.retire_front(&desk).await.expect("retired");
    fleet.retire_front(&again).await.expect("retired");
    let last = fleet
        .register_front("ws", "last", lease)
        .await
        .expect("registered");
    let adopted = fleet.adopt_results(&last, 10).await.expect("adopts");
    assert_eq!(
        ids(&adopted),
        ["mine-2", "library"],
        "both undelivered, oldest ended first"
    );
    assert_eq!(adopted[1].front, Some(last.front_id));
}

#[tokio::test]
async fn a_cancel_request_cancels_a_queued_task_and_asks_a_running_ones_worker() {
    let db = crate::database("cancel").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    for id in ["running", "queued"] {
        fleet
            .submit(NewTask::new(id, "ws", "a", "go"))
            .await
            .expect("submitted");
    }
    let lease = fleet
        .register_worker(
            &WorkerSpec::new("w", ["a"])
                .with_workspaces(["ws"])
                .with_lease(Duration::from_secs(30)),
        )
        .await
        .expect("registered");
    let claimed = fleet.claim(&lease, 1).await.expect("claims");
    assert_eq!(claimed[0].id, "running");

    fleet
        .report_progress(&claimed[0], &"x".repeat(600))
        .await
        .expect("current");
    let task = fleet.task("running").await.expect("reads").expect("held");
    assert_eq!(task.progress.map(|line| line.len()), Some(500), "cut");

    assert_eq!(
        fleet
            .request_cancel("other-ws", "queued")
            .await
            .expect("asks"),
        CancelRequest::Ended,
        "another workspace's task is not touched"
    );
    assert_eq!(
        fleet.request_cancel("ws", "queued").await.expect("asks"),
        CancelRequest::Cancelled
    );
    let queued = fleet.task("queued").await.expect("reads").expect("held");
    assert_eq!(queued.info.status, AsyncTaskStatus::Cancelled);
    assert_eq!(
        fleet.cancel_requests(&lease).await.expect("reads"),
        Vec::<String>::new()
    );

    assert_eq!(
        fleet.request_cancel("ws", "running").await.expect("asks"),
        CancelRequest::Requested
    );
    assert_eq!(
        fleet.cancel_requests(&lease).await.expect("reads"),
        ["running"]
    );
    fleet.cancelled(&claimed[0]).await.expect("current");
    assert_eq!(
        fleet.cancel_requests(&lease).await.expect("reads"),
        Vec::<String>::new()
    );
    assert_eq!(
        fleet.request_cancel("ws", "running").await.expect("asks"),
        CancelRequest::Ended
    );
    let late = fleet.report_progress(&claimed[0], "late").await;
    assert!(matches!(late, Err(FleetError::Fenced { .. })), "{late:?}");
}

#[tokio::test]
async fn a_database_of_the_schema_before_fronts_is_migrated_and_keeps_its_rows() {
    let db = crate::database("migrate").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .submit(NewTask::new("kept", "ws", "a", "go"))
        .await
        .expect("submitted");
    fleet
        .register_worker(
            &WorkerSpec::new("old", ["a"])
                .with_workspaces(["ws"])
                .with_lease(Duration::from_secs(30)),
        )
        .await
        .expect("registered");
    drop(fleet);
    // Back to version 1: what the later schemas added, removed.
    crate::downgrade(&db, 1).await;
    asynctask_fleet::Fleet::migrate(db.config())
        .await
        .expect("migrated");

    let fleet = Fleet::connect(
        db.config(),
        FleetOptions::new().clock(std::sync::Arc::new(clock.clone())),
    )
    .await
    .expect("migrates");
    assert_eq!(SCHEMA_VERSION, 7);
    let task = fleet.task("kept").await.expect("reads").expect("kept");
    assert_eq!(
        (task.info.status, task.front),
        (AsyncTaskStatus::Queued, None)
    );
    // The old registration has an empty catalog until it registers again.
    assert_eq!(fleet.catalog().await.expect("reads"), []);
}

#[tokio::test]
async fn the_status_shows_workers_queues_and_running_tasks() {
    let db = crate::database("status").await;
    let clock = ManualClock::new(1_764_050_000_000);
    let mut fleet = connect(&db, &clock).await;
    let status = fleet.status().await.expect("reads");
    insta::assert_snapshot!("status_empty", status.to_string());
    insta::assert_snapshot!("status_empty_json", pretty(&status.to_json()));

    assert_eq!(fleet.max_async("team-a").await.expect("reads"), None);
    fleet
        .set_max_async("team-a", MaxAsyncTasks::new(2).expect("valid"))
        .await
        .expect("set");
    fleet
        .set_max_async("team-c", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");
    assert_eq!(
        fleet.max_async("team-a").await.expect("reads"),
        Some(MaxAsyncTasks::new(2).expect("valid"))
    );
    for (id, workspace, subagent) in [
        ("a1", "team-a", "tester"),
        ("a2", "team-a", "tester"),
        ("a3", "team-a", "tester"),
        ("b1", "team-b", "builder"),
        ("b2", "team-b", "builder"),
        ("c1", "team-c", "linter"),
    ] {
        fleet
            .submit(NewTask::new(id, workspace, subagent, "go"))
            .await
            .expect("submitted");
        clock.advance(1_000);
    }
    let mut build = fleet
        .register_worker(
            &WorkerSpec::new("build-1", ["tester", "builder"])
                .with_workspaces(["team-a", "team-b"])
                .with_capacity(4)
                .with_lease(Duration::from_secs(30)),
        )
        .await
        .expect("registered");
    let claimed = fleet.claim(&build, 3).await.expect("claims");
    fleet
        .report_progress(&claimed[0], "running test 3 of 9")
        .await
        .expect("current");
    fleet
        .complete(&claimed[2], &OutputObject::new(TerminateReason::Goal))
        .await
        .expect("current");
    clock.advance(5_000);
    fleet
        .register_worker(
            &WorkerSpec::new("gone", ["linter"])
                .with_workspaces(["team-c"])
                .with_lease(Duration::from_secs(1)),
        )
        .await
        .expect("registered");
    clock.advance(20_000);
    fleet.heartbeat(&mut build).await.expect("renewed");
    clock.advance(20_000);
    let reaped = fleet.reap_expired().await.expect("reaps");
    assert_eq!(reaped, []);
    let status = fleet.status().await.expect("reads");
    insta::assert_snapshot!("status_busy", status.to_string());
    insta::assert_snapshot!("status_busy_json", pretty(&status.to_json()));
}

#[tokio::test]
async fn the_status_shows_a_subagents_text_escaped() {
    let db = crate::database("status_escaped").await;
    let clock = ManualClock::new(1_764_050_000_000);
    let mut fleet = connect(&db, &clock).await;
    let (_lease, claimed) = crate::running_task(&mut fleet, Duration::from_secs(30)).await;
    // A title set by OSC, the line erased by CSI, and a right-to-left override.
    fleet
        .report_progress(
            &claimed,
            "\u{1b}]0;TITLE-HIJACKED\u{7}\u{1b}[2K\rALL 512 TESTS PASSED \u{202e}\u{9b}2J",
        )
        .await
        .expect("current");
    clock.advance(3_000);
    let status = fleet.status().await.expect("reads");
    let text = status.to_string();
    assert!(
        text.ends_with(
            "\nrunning tasks: 1\n  t1 tester (ws) on w1 for 3s: \\x1b]0;TITLE-HIJACKED\\x07\\x1b[2K\\rALL \
             512 TESTS PASSED \\u{202e}\\u{9b}2J\n"
        ),
        "{text}"
    );
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
    // The JSON keeps the text as it was: JSON escapes it.
    assert_eq!(
        status.to_json()["running"][0]["last_line"],
        "\u{1b}]0;TITLE-HIJACKED\u{7}\u{1b}[2K\rALL 512 TESTS PASSED \u{202e}\u{9b}2J"
    );
}

fn pretty(json: &serde_json::Value) -> String {
    serde_json::to_string_pretty(json).expect("serializes")
}
