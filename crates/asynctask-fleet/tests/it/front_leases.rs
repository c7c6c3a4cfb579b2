//! A front's own lease: a front back after its lease lapsed never takes a
//! result another front adopts; a front reaps lost workers as workers do.

use std::sync::Arc;
use std::time::Duration;

use asynctask_fleet::{
    DELIVERED_ELSEWHERE, FleetFront, FleetOptions, FrontLease, NewTask, WorkerSpec,
    lost_worker_error,
};
use asynctask_model::{AsyncTaskStatus, ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_test_support::{TestDatabase, eventually_some_with};
use asynctask_tools::{SubagentRequest, SubagentRunner};
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use crate::connect;

fn ids(tasks: &[asynctask_fleet::FleetTask]) -> Vec<&str> {
    tasks.iter().map(|t| t.info.id.as_str()).collect()
}

#[tokio::test]
async fn a_front_back_after_its_lease_lapsed_never_takes_a_result_another_adopts() {
    let db = crate::database("lapsed").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .expect("set");
    let options = FleetOptions::new().clock(Arc::new(clock.clone()));
    let laptop = FleetFront::connect(db.config(), options, "ws", "laptop")
        .await
        .expect("a front");
    // The laptop's registration, as the database holds it.
    let row = fleet_row(&db, "laptop").await;
    let laptop_lease = FrontLease {
        front_id: row,
        workspace: "ws".to_owned(),
        name: "laptop".to_owned(),
        expires_at: 31_000,
    };
    // Submitted for the laptop (its runner finds them there: a duplicate
    // submission is an earlier attempt's), and ended.
    for id in ["t2", "t1"] {
        fleet
            .submit(NewTask::new(id, "ws", "a", "go").with_front(&laptop_lease))
            .await
            .expect("submitted");
    }
    let worker = fleet
        .register_worker(
            &WorkerSpec::new("w", ["a"])
                .with_workspaces(["ws"])
                .with_capacity(2)
                .with_lease(Duration::from_secs(600)),
        )
        .await
        .expect("registered");
    for task in fleet.claim(&worker, 2).await.expect("claims") {
        fleet
            .complete(&task, &OutputObject::new(TerminateReason::Goal))
            .await
            .expect("current");
    }

    // The laptop sleeps past its lease; the desk adopts one of its results.
    clock.advance(30_000);
    let desk = fleet
        .register_front("ws", "desk", Duration::from_secs(30))
        .await
        .expect("registered");
    assert_eq!(
        ids(&fleet.adopt_results(&desk, 1).await.expect("adopts")),
        ["t2"]
    );

    // The laptop wakes: the adopted result is not its own; the other it
    // takes only once registered again, after which no one adopts it.
    let runner = laptop.runner();
    let run = |id: &str| {
        runner.run(
            SubagentRequest::new(id.to_owned(), "a".to_owned(), "go".to_owned()),
            CancellationToken::new(),
        )
    };
    let t2 = run("t2").await.expect_err("delivered elsewhere");
    assert_eq!(t2.message(), DELIVERED_ELSEWHERE);
    run("t1").await.expect("the laptop's result");
    assert_eq!(
        ids(&fleet.adopt_results(&desk, 10).await.expect("adopts")),
        Vec::<&str>::new(),
        "each result goes to one front"
    );
}

#[tokio::test]
async fn a_front_reaps_the_workers_whose_lease_expired() {
    let db = crate::database("frontreaps").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .submit(NewTask::new("t1", "ws", "a", "go"))
        .await
        .expect("submitted");
    let worker = fleet
        .register_worker(
            &WorkerSpec::new("doomed", ["a"])
                .with_workspaces(["ws"])
                .with_lease(Duration::from_secs(3)),
        )
        .await
        .expect("registered");
    assert_eq!(fleet.claim(&worker, 1).await.expect("claims").len(), 1);
    // The only worker is gone (SIGKILL): no worker is left to reap.
    clock.advance(3_000);

    let options = FleetOptions::new().clock(Arc::new(clock.clone()));
    let front = FleetFront::connect(db.config(), options, "ws", "front")
        .await
        .expect("a front");
    let stop = CancellationToken::new();
    let looping = tokio::spawn({
        let stop = stop.clone();
        async move { front.run(stop).await }
    });
    let task = eventually_some_with("the front reaps", Duration::from_secs(20), || async {
        let task = fleet.task("t1").await.expect("read")?;
        task.info.status.is_terminal().then_some(task)
    })
    .await;
    assert_eq!(task.info.status, AsyncTaskStatus::Failed);
    assert_eq!(task.info.error, Some(lost_worker_error("doomed")));
    stop.cancel();
    looping.await.expect("the loop ends");
}

#[tokio::test]
async fn a_front_listens_anew_when_its_statement_connection_is_made_again() {
    let db = crate::database("relisten").await;
    let front = FleetFront::connect(db.config(), FleetOptions::new(), "ws", "front")
        .await
        .expect("a front");
    let stop = CancellationToken::new();
    let front = Arc::new(front);
    let looping = tokio::spawn({
        let (front, stop) = (Arc::clone(&front), stop.clone());
        async move { front.run(stop).await }
    });
    let (admin, connection) = db
        .config()
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connects");
    let driver = tokio::spawn(connection);
    let backends = |listening: bool| {
        let admin = &admin;
        let name = db.name().to_owned();
        async move {
            admin
                .query(
                    "SELECT pid FROM pg_stat_activity
                     WHERE datname = $1 AND pid <> pg_backend_pid()
                       AND (query LIKE 'LISTEN%') = $2",
                    &[&name, &listening],
                )
                .await
                .expect("reads")
                .iter()
                .map(|row| row.get::<_, i32>(0))
                .collect::<Vec<_>>()
        }
    };
    let listener = eventually_some_with("the front listens", Duration::from_secs(20), || async {
        backends(true).await.first().copied()
    })
    .await;
    // The statement connection ends (as on a cut link, found by a statement
    // timing out), and is made again by the next statement.
    for pid in backends(false).await {
        admin
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .expect("terminated");
    }
    eventually_some_with(
        "the front listens anew",
        Duration::from_secs(20),
        || async {
            let _ = front.set_max_async(MaxAsyncTasks::UNLIMITED).await;
            let now = backends(true).await;
            (now.len() == 1 && now[0] != listener).then_some(())
        },
    )
    .await;
    stop.cancel();
    looping.await.expect("the loop ends");
    drop(admin);
    let _ = driver.await;
}

/// The id of the live front named `name`.
async fn fleet_row(db: &TestDatabase, name: &str) -> i64 {
    let (client, connection) = db
        .config()
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connects");
    let driver = tokio::spawn(connection);
    let id = client
        .query_one("SELECT id FROM asynctask_fronts WHERE name = $1", &[&name])
        .await
        .expect("registered")
        .get(0);
    drop(client);
    let _ = driver.await;
    id
}
