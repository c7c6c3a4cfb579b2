//! What another session holding a lock, or a link cut at the wrong moment,
//! must not cost: a worker whose end waits on a task's row keeps its lease
//! and its other subagents; a claim call that hangs keeps the claims the
//! calls before it made; a result claim left unacknowledged is offered
//! again; a cancel the fleet could not take at once is asked again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use asynctask_fleet::{
    DatabaseConfig, Fleet, FleetFront, FleetOptions, NewTask, Worker, WorkerSpec,
};
use asynctask_model::{OutputObject, TerminateReason};
use asynctask_test_support::{TestDatabase, eventually_with};
use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner};
use pretty_assertions::assert_eq;
use tokio_postgres::{Client, NoTls};
use tokio_util::sync::CancellationToken;

/// A task whose goal is `end` completes once `release` is cancelled; any
/// other runs until cancelled. Whether a run was cancelled is recorded.
struct Told {
    release: CancellationToken,
    cancelled: Arc<AtomicBool>,
}

impl Told {
    fn new() -> (Arc<Told>, CancellationToken, Arc<AtomicBool>) {
        let release = CancellationToken::new();
        let cancelled = Arc::new(AtomicBool::new(false));
        let told = Told {
            release: release.clone(),
            cancelled: Arc::clone(&cancelled),
        };
        (Arc::new(told), release, cancelled)
    }
}

#[async_trait::async_trait]
impl SubagentRunner for Told {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        let release = self.release.clone();
        let ends = request.goal_prompt == "end";
        tokio::select! {
            () = release.cancelled(), if ends => Ok(OutputObject::new(TerminateReason::Goal)),
            () = cancel.cancelled() => {
                self.cancelled.store(true, Ordering::SeqCst);
                Err(SubagentError::new("cancelled"))
            }
        }
    }
}

/// A plain connection to `db`, beside the fleet's.
async fn plain(db: &TestDatabase) -> (Client, tokio::task::JoinHandle<()>) {
    let (client, connection) = db.config().connect(NoTls).await.expect("connects");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    (client, driver)
}

async fn status(client: &Client, id: &str) -> String {
    client
        .query_one("SELECT status FROM asynctask_tasks WHERE id = $1", &[&id])
        .await
        .expect("reads")
        .get(0)
}

/// When the worker's first registration's lease expires (0 once lost).
async fn lease_expires_at(client: &Client) -> i64 {
    client
        .query_one(
            "SELECT CASE WHEN state = 'live' THEN lease_expires_at ELSE 0 END
             FROM asynctask_workers ORDER BY id LIMIT 1",
            &[],
        )
        .await
        .expect("registered")
        .get(0)
}

/// How many of this database's sessions wait for a lock.
async fn lock_waiters(client: &Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
            &[],
        )
        .await
        .expect("reads")
        .get(0)
}

/// Waits until the worker's first lease has been renewed for longer than
/// `lease` past where it stood: it outlived what it could without renewals.
async fn renewed_past(client: &Client, lease: Duration) {
    let lease = i64::try_from(lease.as_millis()).expect("small");
    let from = lease_expires_at(client).await;
    eventually_with(
        "the worker keeps renewing its lease",
        Duration::from_secs(20),
        || async { lease_expires_at(client).await > from + lease },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_that_waits_on_a_locked_row_never_costs_the_worker_its_lease() {
    let db = crate::database("held_row").await;
    let mut fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    for (id, goal) in [("other", "wait"), ("ends", "end")] {
        fleet
            .submit(NewTask::new(id, "ws", "a", goal))
            .await
            .expect("submitted");
    }
    let lease = Duration::from_millis(1_500);
    let spec = WorkerSpec::new("w", ["a"])
        .with_workspaces(["ws", "ws2"])
        .with_capacity(2)
        .with_lease(lease);
    let (runner, release, cancelled) = Told::new();
    let worker = Worker::new(DatabaseConfig::from(db.config()), spec, runner);
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(worker.run(shutdown.clone()));
    let (watch, watch_driver) = plain(&db).await;
    eventually_with("both run", Duration::from_secs(20), || async {
        status(&watch, "other").await == "running" && status(&watch, "ends").await == "running"
    })
    .await;

    // A front whose link was cut mid-transaction: the task's row stays
    // locked by a session that says nothing more.
    let (mut stuck, stuck_driver) = plain(&db).await;
    let held = stuck.transaction().await.expect("begins");
    held.execute(
        "SELECT 1 FROM asynctask_tasks WHERE id = 'ends' FOR UPDATE",
        &[],
    )
    .await
    .expect("locks the row");
    release.cancel();
    eventually_with(
        "the worker's end waits for the row",
        Duration::from_secs(20),
        || async { lock_waiters(&watch).await >= 1 },
    )
    .await;
    renewed_past(&watch, lease).await;
    assert!(
        !cancelled.load(Ordering::SeqCst),
        "the other subagent runs on"
    );
    assert_eq!(status(&watch, "other").await, "running");
    assert_eq!(status(&watch, "ends").await, "running", "not written yet");

    // The lock released, the end is written.
    held.rollback().await.expect("rolled back");
    eventually_with("the end is written", Duration::from_secs(20), || async {
        status(&watch, "ends").await == "completed"
    })
    .await;
    assert!(!cancelled.load(Ordering::SeqCst));

    shutdown.cancel();
    serving.await.expect("joined").expect("stopped");
    drop((stuck, watch));
    let _ = stuck_driver.await;
    let _ = watch_driver.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_call_that_hangs_keeps_the_tasks_the_calls_before_it_claimed() {
    let db = crate::database("held_claim").await;
    let mut fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    for (id, workspace) in [("t1", "ws"), ("t2", "ws2")] {
        fleet
            .submit(NewTask::new(id, workspace, "a", "wait"))
            .await
            .expect("submitted");
    }
    // Another session holds ws2: the worker's first call claims t1 and
    // stops at ws2; its second call waits for ws2, the first lock it meets.
    let (mut other, other_driver) = plain(&db).await;
    let holding = other.transaction().await.expect("begins");
    holding
        .execute(
            "SELECT 1 FROM asynctask_workspaces WHERE name = 'ws2' FOR NO KEY UPDATE",
            &[],
        )
        .await
        .expect("locks ws2");
    let lease = Duration::from_millis(1_500);
    let spec = WorkerSpec::new("w", ["a"])
        .with_workspaces(["ws", "ws2"])
        .with_capacity(3)
        .with_lease(lease);
    let (runner, _release, cancelled) = Told::new();
    let worker = Worker::new(DatabaseConfig::from(db.config()), spec, runner);
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(worker.run(shutdown.clone()));
    let (watch, watch_driver) = plain(&db).await;
    eventually_with(
        "t1 is claimed and the next call waits for ws2",
        Duration::from_secs(20),
        || async { status(&watch, "t1").await == "running" && lock_waiters(&watch).await >= 1 },
    )
    .await;
    renewed_past(&watch, lease).await;
    assert_eq!(
        status(&watch, "t1").await,
        "running",
        "the claim made is run, not failed as lost track of"
    );

    holding.commit().await.expect("commits");
    eventually_with("t2 is claimed", Duration::from_secs(20), || async {
        status(&watch, "t2").await == "running"
    })
    .await;
    assert_eq!(status(&watch, "t1").await, "running");
    assert!(!cancelled.load(Ordering::SeqCst));

    shutdown.cancel();
    serving.await.expect("joined").expect("stopped");
    drop((other, watch));
    let _ = other_driver.await;
    let _ = watch_driver.await;
}

#[tokio::test]
async fn a_result_claim_left_unacknowledged_is_rolled_back_and_offered_again() {
    let db = crate::database("held_results").await;
    let mut worker = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    worker
        .submit(NewTask::new("t1", "ws", "a", "go"))
        .await
        .expect("submitted");
    let lease = worker
        .register_worker(&WorkerSpec::new("w", ["a"]).with_workspaces(["ws", "ws2"]))
        .await
        .expect("registered");
    let task = worker
        .claim(&lease, 1)
        .await
        .expect("claims")
        .pop()
        .expect("one");
    worker
        .complete(&task, &OutputObject::new(TerminateReason::Goal))
        .await
        .expect("current");

    let options = FleetOptions::new().idle_in_transaction_timeout(Duration::from_millis(300));
    let mut front = Fleet::connect(db.config(), options)
        .await
        .expect("connects");
    let claim = front.claim_results("ws", 10).await.expect("claims");
    assert_eq!(claim.tasks().len(), 1);
    // The host never acknowledges (its front's link was cut): the server
    // ends the idle transaction, and the result is free for another delivery.
    let (watch, watch_driver) = plain(&db).await;
    eventually_with(
        "the result is free again",
        Duration::from_secs(20),
        || async {
            !watch
                .query(
                    "SELECT 1 FROM asynctask_tasks WHERE id = 't1' FOR UPDATE SKIP LOCKED",
                    &[],
                )
                .await
                .expect("reads")
                .is_empty()
        },
    )
    .await;
    claim.acknowledge().await.expect_err("rolled back");
    let again = worker.claim_results("ws", 10).await.expect("claims");
    assert_eq!(again.tasks().len(), 1, "offered again");
    again.acknowledge().await.expect("acknowledged");
    drop(watch);
    let _ = watch_driver.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_the_fleet_cannot_take_at_once_is_asked_again_until_written() {
    let db = crate::database("held_cancel").await;
    let front = FleetFront::connect(db.config(), FleetOptions::new(), "ws", "front")
        .await
        .expect("a front");
    let runner = front.runner();
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move {
            runner
                .run(
                    SubagentRequest::new("t1".to_owned(), "a".to_owned(), "go".to_owned()),
                    cancel,
                )
                .await
        }
    });
    let mut fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    let lease = fleet
        .register_worker(
            &WorkerSpec::new("w", ["a"])
                .with_workspaces(["ws", "ws2"])
                .with_lease(Duration::from_secs(600)),
        )
        .await
        .expect("registered");
    let (watch, watch_driver) = plain(&db).await;
    eventually_with("t1 is submitted", Duration::from_secs(20), || async {
        !watch
            .query("SELECT 1 FROM asynctask_tasks WHERE id = 't1'", &[])
            .await
            .expect("reads")
            .is_empty()
    })
    .await;
    let claimed = fleet.claim(&lease, 1).await.expect("claims");
    assert_eq!(claimed.len(), 1);
    drop(watch);
    let _ = watch_driver.await;

    // The model cancels while the fleet's database cannot be reached.
    db.set_reachable(false).await;
    cancel.cancel();
    let ended = run.await.expect("joined").expect_err("cancelled");
    assert_eq!(ended.message(), "cancelled");
    db.set_reachable(true).await;

    let fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects again");
    eventually_with(
        "the cancel reaches the worker",
        Duration::from_secs(20),
        || async { fleet.cancel_requests(&lease).await.expect("reads") == ["t1".to_owned()] },
    )
    .await;
    front.closing().cancel();
}
