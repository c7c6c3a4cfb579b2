//! Retention: delivered tasks older than the retention period are deleted
//! with everything they hold, in bounded batches, by one pruner at a time;
//! nothing queued, running or undelivered is ever deleted.

use std::sync::Arc;
use std::time::Duration;

use asynctask_fleet::{
    ClaimedTask, DatabaseConfig, Fleet, FleetOptions, NewTask, PRUNE_LOCK, Pruned, Worker,
    WorkerSpec,
};
use asynctask_manager::Question;
use asynctask_model::{ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_test_support::eventually_with;
use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner};
use pretty_assertions::assert_eq;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;

use crate::connect;

const DAY: u64 = 24 * 60 * 60 * 1000;
const WEEK: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Submits and claims tasks `ids` of workspace `ws` for a worker `name`.
async fn claimed(fleet: &mut Fleet, name: &str, ids: &[&str]) -> Vec<ClaimedTask> {
    for id in ids {
        fleet
            .submit(NewTask::new(*id, "ws", "tester", "go"))
            .await
            .expect("submitted");
    }
    let spec = WorkerSpec::new(name, ["tester"])
        .with_workspaces(["ws"])
        .with_capacity(100);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    fleet.claim(&lease, ids.len()).await.expect("claims")
}

/// Completes `tasks` and, when `deliver`, marks their results delivered.
async fn end(fleet: &Fleet, tasks: &[ClaimedTask], deliver: bool) {
    for task in tasks {
        fleet
            .complete(task, &OutputObject::new(TerminateReason::Goal))
            .await
            .expect("current");
    }
    if deliver {
        let ids: Vec<String> = tasks.iter().map(|t| t.id.clone()).collect();
        fleet.mark_notified(&ids).await.expect("marked");
    }
}

/// How many rows `table` holds.
async fn count(client: &tokio_postgres::Client, table: &str) -> i64 {
    client
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .expect("counts")
        .get(0)
}

#[tokio::test]
async fn only_delivered_tasks_past_the_retention_are_deleted_with_what_they_hold() {
    let db = crate::database("retention").await;
    let clock = ManualClock::new(1_000_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");
    // Day 0: `old` (with a message, a question and a whole output) ends and
    // is delivered; `undelivered` ends and is not; `running` runs.
    let tasks = claimed(&mut fleet, "w1", &["old", "undelivered", "running"]).await;
    fleet
        .send_message("ws", "old", 1, "hurry")
        .await
        .expect("sent");
    fleet
        .ask_question(&tasks[0], 1, &Question::new("which branch?"))
        .await
        .expect("asked");
    fleet
        .store_whole_output(&tasks[0], "the whole output", 16)
        .await
        .expect("stored");
    fleet.report_progress(&tasks[0], "line").await.expect("ok");
    end(&fleet, &tasks[..1], true).await;
    end(&fleet, &tasks[1..2], false).await;
    fleet
        .submit(NewTask::new("queued", "ws", "nobody-serves", "go"))
        .await
        .expect("submitted");
    // Day 6: `young` ends and is delivered.
    clock.advance(6 * DAY);
    let young = claimed(&mut fleet, "w2", &["young"]).await;
    end(&fleet, &young, true).await;

    // Day 7 and a second: only `old` is past a week.
    clock.advance(DAY + 1_000);
    let pruned = fleet.prune(WEEK, 100).await.expect("prunes");
    assert_eq!(pruned.map(|p| p.tasks), Some(1));
    let mut left: Vec<String> = fleet
        .tasks("ws")
        .await
        .expect("reads")
        .into_iter()
        .map(|t| t.info.id)
        .collect();
    left.sort();
    assert_eq!(left, ["queued", "running", "undelivered", "young"]);
    assert_eq!(fleet.whole_output("old").await.expect("reads"), None);
    let (client, connection) = db.config().connect(NoTls).await.expect("connects");
    let driver = tokio::spawn(connection);
    assert_eq!(count(&client, "asynctask_messages").await, 0);
    assert_eq!(count(&client, "asynctask_questions").await, 0);

    // A month on, every ended and delivered task goes; the undelivered
    // result, the running task and the queued one stay, however old.
    clock.advance(30 * DAY);
    fleet
        .mark_notified(&["running".to_owned()])
        .await
        .expect("marked");
    let pruned = fleet.prune(WEEK, 100).await.expect("prunes");
    assert_eq!(pruned.map(|p| p.tasks), Some(1));
    left = fleet
        .tasks("ws")
        .await
        .expect("reads")
        .into_iter()
        .map(|t| t.info.id)
        .collect();
    left.sort();
    assert_eq!(left, ["queued", "running", "undelivered"]);
    driver.abort();
}

#[tokio::test]
async fn a_prune_is_bounded_gated_and_takes_the_registrations_no_task_names() {
    let db = crate::database("retention_batches").await;
    let clock = ManualClock::new(1_000_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");
    let tasks = claimed(&mut fleet, "w1", &["t1", "t2", "t3", "t4", "t5"]).await;
    end(&fleet, &tasks, true).await;
    let front = fleet
        .register_front("ws", "front", Duration::from_secs(30))
        .await
        .expect("registered");
    fleet.retire_front(&front).await.expect("retired");
    clock.advance(8 * DAY);

    // Another process prunes: this one deletes nothing and does not wait.
    let (client, connection) = db.config().connect(NoTls).await.expect("connects");
    let driver = tokio::spawn(connection);
    client
        .execute("SELECT pg_advisory_lock($1)", &[&PRUNE_LOCK])
        .await
        .expect("locked");
    assert_eq!(fleet.prune(WEEK, 2).await.expect("skips"), None);
    client
        .execute("SELECT pg_advisory_unlock($1)", &[&PRUNE_LOCK])
        .await
        .expect("unlocked");

    // Two at a time; the registrations go once no task names them.
    let mut deleted = Vec::new();
    loop {
        let pruned = fleet.prune(WEEK, 2).await.expect("prunes").expect("gate");
        deleted.push((pruned.tasks, pruned.workers, pruned.fronts));
        if !pruned.was_full(2) {
            break;
        }
    }
    assert_eq!(deleted, [(2, 0, 1), (2, 0, 0), (1, 1, 0)]);
    assert_eq!(count(&client, "asynctask_tasks").await, 0);
    assert_eq!(count(&client, "asynctask_workers").await, 0);
    assert_eq!(count(&client, "asynctask_fronts").await, 0);
    assert_eq!(
        fleet.prune(WEEK, 2).await.expect("prunes"),
        Some(Pruned::default())
    );
    driver.abort();
}

/// A runner for a worker that is never given work here.
struct Idle;

#[async_trait::async_trait]
impl SubagentRunner for Idle {
    async fn run(
        &self,
        _: SubagentRequest,
        _: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        Err(SubagentError::new("not here"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_prunes_what_is_past_its_retention() {
    let db = crate::database("retention_worker").await;
    let clock = ManualClock::new(1_000_000);
    let mut fleet = connect(&db, &clock).await;
    let tasks = claimed(&mut fleet, "w1", &["old", "kept"]).await;
    end(&fleet, &tasks[..1], true).await;
    end(&fleet, &tasks[1..], false).await;
    clock.advance(3 * DAY);

    let spec = WorkerSpec::new("pruner", ["other"])
        .with_workspaces(["ws"])
        .with_lease(Duration::from_secs(3));
    let worker = Worker::new(DatabaseConfig::from(db.config()), spec, Arc::new(Idle))
        .with_options(FleetOptions::new().clock(Arc::new(clock.clone())))
        .with_retention(Some(Duration::from_secs(2 * 24 * 60 * 60)));
    let stop = CancellationToken::new();
    let serving = tokio::spawn(worker.run(stop.clone()));
    eventually_with(
        "the worker deletes the old delivered task",
        Duration::from_secs(20),
        || async { fleet.task("old").await.expect("reads").is_none() },
    )
    .await;
    assert!(fleet.task("kept").await.expect("reads").is_some());
    stop.cancel();
    serving.await.expect("joins").expect("stops cleanly");
}
