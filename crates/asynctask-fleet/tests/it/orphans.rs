//! Claims a worker lost track of: a batch whose later claim fails keeps the
//! claims already made, and a task running under a worker's registration
//! that the worker does not run is failed, not held forever.

use std::sync::Arc;
use std::time::Duration;

use asynctask_fleet::{
    DatabaseConfig, Fleet, FleetOptions, NewTask, Worker, WorkerSpec, untracked_task_error,
};
use asynctask_model::{AsyncTaskStatus, ManualClock, MaxAsyncTasks, OutputObject};
use asynctask_test_support::{eventually_some_with, eventually_with};
use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner};
use pretty_assertions::assert_eq;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;

use crate::connect;

#[tokio::test]
async fn a_failed_claim_keeps_the_claims_already_made_and_a_lost_one_is_failed() {
    let db = crate::database("orphans").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");
    for (id, workspace) in [("t1", "ws"), ("t2", "ws2"), ("t3", "ws")] {
        fleet
            .submit(NewTask::new(id, workspace, "a", "go"))
            .await
            .expect("submitted");
    }
    // The batch's second call fails in the database: on t2.
    let (mut client, connection) = db.config().connect(NoTls).await.expect("connects");
    let driver = tokio::spawn(connection);
    client
        .batch_execute(
            "CREATE FUNCTION refuse_t2() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                IF NEW.id = 't2' AND NEW.status = 'running' THEN RAISE EXCEPTION 'no'; END IF;
                RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_t2 BEFORE UPDATE ON asynctask_tasks
                FOR EACH ROW EXECUTE FUNCTION refuse_t2();",
        )
        .await
        .expect("a trigger");
    let spec = WorkerSpec::new("w", ["a"])
        .with_workspaces(["ws", "ws2"])
        .with_capacity(3);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    // Another claimer holds ws2: the first call claims t1 and commits; the
    // second waits for ws2, then fails on t2.
    let other = client.transaction().await.expect("begins");
    other
        .execute(
            "SELECT 1 FROM asynctask_workspaces WHERE name = 'ws2' FOR NO KEY UPDATE",
            &[],
        )
        .await
        .expect("locks ws2");
    let claiming = tokio::spawn(async move {
        let claimed = fleet.claim(&lease, 3).await;
        (fleet, lease, claimed)
    });
    let (watch, connection) = db.config().connect(NoTls).await.expect("connects");
    let watch_driver = tokio::spawn(connection);
    eventually_with(
        "the second call waits for ws2",
        Duration::from_secs(10),
        || async {
            let t1: String = watch
                .query_one("SELECT status FROM asynctask_tasks WHERE id = 't1'", &[])
                .await
                .expect("reads")
                .get(0);
            let waiting: i64 = watch
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .expect("reads")
                .get(0);
            t1 == "running" && waiting == 1
        },
    )
    .await;
    other.commit().await.expect("commits");
    drop(watch);
    let _ = watch_driver.await;
    let (fleet, lease, claimed) = claiming.await.expect("joined");
    let claimed = claimed.expect("the claim made is kept");
    assert_eq!(
        claimed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["t1"]
    );

    // A worker that lost track of t1 (it tracks nothing) fails it, once.
    let failed = fleet.fail_untracked(&lease, &[]).await.expect("failed");
    assert_eq!(
        failed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["t1"]
    );
    assert_eq!(fleet.fail_untracked(&lease, &[]).await.expect("none"), []);
    let t1 = fleet.task("t1").await.expect("read").expect("exists");
    assert_eq!(t1.info.status, AsyncTaskStatus::Failed);
    assert_eq!(t1.info.error, Some(untracked_task_error("w")));
    assert!(
        fleet
            .complete(
                &claimed[0],
                &OutputObject::new(asynctask_model::TerminateReason::Goal)
            )
            .await
            .is_err(),
        "its claim is no longer current"
    );
    drop(client);
    let _ = driver.await;
}

/// Runs nothing: each run waits for its cancel.
struct Waits;

#[async_trait::async_trait]
impl SubagentRunner for Waits {
    async fn run(
        &self,
        _: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        cancel.cancelled().await;
        Err(SubagentError::new("cancelled"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_fails_a_task_its_registration_holds_but_it_does_not_run() {
    let db = crate::database("untracked").await;
    let mut fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    fleet
        .submit(NewTask::new("runs", "ws", "a", "go"))
        .await
        .expect("submitted");
    let spec = WorkerSpec::new("w", ["a"])
        .with_workspaces(["ws", "ws2"])
        .with_capacity(2)
        .with_lease(Duration::from_millis(1_500));
    let worker = Worker::new(DatabaseConfig::from(db.config()), spec, Arc::new(Waits));
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(worker.run(shutdown.clone()));
    eventually_some_with(
        "the worker runs its task",
        Duration::from_secs(20),
        || async {
            let task = fleet.task("runs").await.expect("read")?;
            (task.info.status == AsyncTaskStatus::Running).then_some(())
        },
    )
    .await;

    // A claim committed whose answer the worker never got: the task runs
    // under its registration, but not on it.
    fleet
        .submit(NewTask::new("lost", "ws", "b", "go"))
        .await
        .expect("submitted");
    let (client, connection) = db.config().connect(NoTls).await.expect("connects");
    let driver = tokio::spawn(connection);
    client
        .execute(
            "UPDATE asynctask_tasks SET status = 'running', started_at = 0,
                fence = nextval('asynctask_fence'),
                worker_id = (SELECT worker_id FROM asynctask_tasks WHERE id = 'runs')
             WHERE id = 'lost'",
            &[],
        )
        .await
        .expect("claimed behind the worker's back");
    let lost = eventually_some_with(
        "the lost claim is failed",
        Duration::from_secs(20),
        || async {
            let task = fleet.task("lost").await.expect("read")?;
            task.info.status.is_terminal().then_some(task)
        },
    )
    .await;
    assert_eq!(lost.info.status, AsyncTaskStatus::Failed);
    assert_eq!(lost.info.error, Some(untracked_task_error("w")));
    let runs = fleet.task("runs").await.expect("read").expect("exists");
    assert_eq!(
        runs.info.status,
        AsyncTaskStatus::Running,
        "what it runs stays"
    );

    shutdown.cancel();
    serving.await.expect("joined").expect("stopped");
    drop(client);
    let _ = driver.await;
}
