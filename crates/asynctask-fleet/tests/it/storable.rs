//! Values the database cannot take never wedge a worker or the fleet: a NUL
//! from a subagent or a model is stored escaped, a name too long or with a
//! control character is refused at start, a notification stays small
//! whatever is stored, a row the server refuses stops neither reaping nor
//! claiming, and a session that fails right after connecting backs off.

use std::sync::Arc;
use std::time::Duration;

use asynctask_fleet::{
    DatabaseConfig, ENDED_CHANNEL, Fleet, FleetError, FleetFront, FleetListener, FleetOptions,
    MAX_NAME_BYTES, NewTask, Worker, WorkerSpec, lost_worker_error,
};
use asynctask_manager::{Answer, Question};
use asynctask_model::{AsyncTaskStatus, ManualClock, OutputObject, TerminateReason};
use asynctask_test_support::{TestDatabase, eventually_some_with, eventually_with};
use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner};
use pretty_assertions::assert_eq;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;

use crate::connect;

/// Runs each task at once by its goal: `nul` fails with a NUL in its error
/// (what a subagent writing `boom\0tail` to its stderr gives), `poison`
/// completes with a result the test's trigger refuses, anything else
/// completes.
struct ByGoal;

#[async_trait::async_trait]
impl SubagentRunner for ByGoal {
    async fn run(
        &self,
        request: SubagentRequest,
        _: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        match request.goal_prompt.as_str() {
            "nul" => Err(SubagentError::new("boom\0tail\n")),
            goal => Ok(OutputObject::new(TerminateReason::Goal).with_final_message(goal)),
        }
    }
}

/// A fresh database with the fleet's schema.
async fn database(prefix: &str) -> TestDatabase {
    crate::database(prefix).await
}

/// What a worker of these tests registers as: `name`, serving `subagents`.
fn worker_spec(name: &str, subagents: &[&str]) -> WorkerSpec {
    WorkerSpec::new(name, subagents.iter().copied()).with_workspaces(["ws"])
}

/// A client of its own on `db`, for what the test does behind the fleet's
/// back; its driver ends when it is dropped.
async fn admin(db: &TestDatabase) -> tokio_postgres::Client {
    let (client, connection) = db.config().connect(NoTls).await.expect("connects");
    tokio::spawn(connection);
    client
}

/// Counts the renewals of every worker's lease (each session renews once
/// when it starts, then once a heartbeat), in a sequence no rollback undoes.
async fn count_renewals(client: &tokio_postgres::Client) {
    client
        .batch_execute(
            "CREATE SEQUENCE renewals;
             CREATE FUNCTION count_renewal() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM nextval('renewals'); RETURN NEW; END $$;
             CREATE TRIGGER count_renewal BEFORE UPDATE OF lease_expires_at
                ON asynctask_workers FOR EACH ROW EXECUTE FUNCTION count_renewal();",
        )
        .await
        .expect("a counter");
}

async fn renewals(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM renewals",
            &[],
        )
        .await
        .expect("read")
        .get(0)
}

async fn ended(fleet: &Fleet, id: &str) -> asynctask_fleet::FleetTask {
    eventually_some_with(
        &format!("task {id} ends"),
        Duration::from_secs(20),
        || async {
            let task = fleet.task(id).await.expect("read")?;
            task.info.status.is_terminal().then_some(task)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_on_a_subagents_stderr_fails_its_task_escaped_and_the_worker_claims_the_next() {
    let db = database("nul_stderr").await;
    let mut fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    let client = admin(&db).await;
    count_renewals(&client).await;
    for (id, goal) in [("t1", "nul"), ("t2", "fine")] {
        fleet
            .submit(NewTask::new(id, "ws", "a", goal))
            .await
            .expect("submitted");
    }
    // One slot: t2 runs only once t1's end is written. A long lease: no
    // heartbeat renews it while the test runs.
    let spec = worker_spec("w", &["a"]).with_lease(Duration::from_secs(120));
    let worker = Worker::new(DatabaseConfig::from(db.config()), spec, Arc::new(ByGoal));
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(worker.run(shutdown.clone()));

    let t2 = ended(&fleet, "t2").await;
    assert_eq!(t2.info.status, AsyncTaskStatus::Completed);
    let t1 = fleet.task("t1").await.expect("read").expect("exists");
    assert_eq!(t1.info.status, AsyncTaskStatus::Failed);
    assert_eq!(t1.info.error.as_deref(), Some("boom\\0tail\n"));
    // One session all along: renewed when it started, and not since (a
    // heartbeat is 40 s away). A worker that took the refusal for a lost
    // connection renewed at every reconnect.
    assert_eq!(renewals(&client).await, 1);

    shutdown.cancel();
    serving.await.expect("joined").expect("stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_the_database_refuses_fails_its_task_with_the_reason() {
    let db = database("refused_end").await;
    let mut fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    let client = admin(&db).await;
    client
        .batch_execute(
            "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                IF NEW.output LIKE '%poison%' THEN RAISE EXCEPTION 'poisoned output'; END IF;
                RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_poison BEFORE UPDATE ON asynctask_tasks
                FOR EACH ROW EXECUTE FUNCTION refuse_poison();",
        )
        .await
        .expect("a trigger");
    for (id, goal) in [("t1", "poison"), ("t2", "fine")] {
        fleet
            .submit(NewTask::new(id, "ws", "a", goal))
            .await
            .expect("submitted");
    }
    let spec = worker_spec("w", &["a"]).with_lease(Duration::from_secs(30));
    let worker = Worker::new(DatabaseConfig::from(db.config()), spec, Arc::new(ByGoal));
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(worker.run(shutdown.clone()));

    assert_eq!(
        ended(&fleet, "t2").await.info.status,
        AsyncTaskStatus::Completed
    );
    let t1 = fleet.task("t1").await.expect("read").expect("exists");
    assert_eq!(t1.info.status, AsyncTaskStatus::Failed);
    insta::assert_snapshot!(t1.info.error.expect("an error"));

    shutdown.cancel();
    serving.await.expect("joined").expect("stopped");
}

#[tokio::test]
async fn names_the_fleet_cannot_store_are_refused_at_start() {
    let db = database("bad_names").await;
    let long = "w".repeat(8_100);
    let err = FleetFront::connect(db.config(), FleetOptions::new(), &long, "front")
        .await
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "a workspace is refused: it is 8100 bytes long, the most is 1024"
    );
    let err = FleetFront::connect(db.config(), FleetOptions::new(), "ws\u{1b}[2J", "front")
        .await
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "a workspace is refused: it holds a control character (U+001B at byte 2)"
    );

    let mut fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    let err = fleet
        .submit(NewTask::new("t1", long.as_str(), "a", "go"))
        .await
        .expect_err("refused");
    assert!(
        matches!(
            err,
            FleetError::InvalidName {
                what: "a workspace",
                ..
            }
        ),
        "{err}"
    );
    let err = fleet
        .submit(NewTask::new("t1", "ws", "a\0b", "go"))
        .await
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "a subagent's name is refused: it holds a control character (U+0000 at byte 1)"
    );
    assert!(!err.is_transient(), "never retried");

    // A worker with such a name stops at once, before serving.
    let spec = worker_spec("w", &[long.as_str()]);
    let worker = Worker::new(DatabaseConfig::from(db.config()), spec, Arc::new(ByGoal));
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        worker.run(CancellationToken::new()),
    )
    .await
    .expect("stops at once")
    .expect_err("refused");
    assert!(
        matches!(
            err,
            FleetError::InvalidName {
                what: "a subagent's name",
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_long_name_never_overflows_a_notification_and_a_bad_row_never_stops_reaping() {
    let db = database("long_names").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    let mut listener = FleetListener::connect(db.config(), &[ENDED_CHANNEL])
        .await
        .expect("listens");

    // The longest name allowed, of two-byte characters: its end notifies it
    // whole.
    let wide = "é".repeat(MAX_NAME_BYTES / 2);
    fleet
        .submit(NewTask::new("wide", wide.as_str(), "a", "go"))
        .await
        .expect("submitted");
    let lease = Duration::from_secs(1);
    let spec = worker_spec("w1", &["a"])
        .with_workspaces([wide.as_str(), "ws"])
        .with_capacity(4)
        .with_lease(lease);
    let w1 = fleet.register_worker(&spec).await.expect("registered");
    let claimed = fleet.claim(&w1, 4).await.expect("claims");
    fleet
        .complete(&claimed[0], &OutputObject::new(TerminateReason::Goal))
        .await
        .expect("completed");
    let wakeup = tokio::time::timeout(Duration::from_secs(20), listener.recv())
        .await
        .expect("woken")
        .expect("a wake-up");
    assert_eq!(wakeup.payload, wide);

    // Rows an older asynctask stored unchecked: a workspace of 8,100
    // characters, and a task whose row the server refuses to update.
    let client = admin(&db).await;
    let long = "w".repeat(8_100);
    client
        .execute(
            "INSERT INTO asynctask_workspaces (name) VALUES ($1)",
            &[&long],
        )
        .await
        .expect("stored");
    client
        .execute(
            "INSERT INTO asynctask_tasks (id, workspace, subagent_name, goal_prompt, status,
                launched_at, started_at, worker_id, fence, request)
             SELECT 'long', $1, 'a', 'go', 'running', 0, 0, $2, nextval('asynctask_fence'),
                request
             FROM asynctask_tasks WHERE id = 'wide'",
            &[&long, &w1.worker_id],
        )
        .await
        .expect("stored, running on w1");
    for id in ["bad", "good"] {
        fleet
            .submit(NewTask::new(id, "ws", "b", "go"))
            .await
            .expect("submitted");
    }
    let w2 = fleet
        .register_worker(&worker_spec("w2", &["b"]).with_lease(lease))
        .await
        .expect("registered");
    assert_eq!(fleet.claim(&w2, 1).await.expect("claims").len(), 1);
    let w3 = fleet
        .register_worker(&worker_spec("w3", &["b"]).with_lease(lease))
        .await
        .expect("registered");
    assert_eq!(fleet.claim(&w3, 1).await.expect("claims").len(), 1);
    client
        .batch_execute(
            "CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                IF NEW.id = 'bad' AND NEW.status = 'failed' THEN
                    RAISE EXCEPTION 'this row cannot be updated';
                END IF;
                RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_bad BEFORE UPDATE ON asynctask_tasks
                FOR EACH ROW EXECUTE FUNCTION refuse_bad();",
        )
        .await
        .expect("a trigger");

    // Every lease lapses; a healthy worker reaps what can be reaped, and
    // goes on claiming.
    clock.advance(2_000);
    let mut reaped: Vec<String> = fleet
        .reap_expired()
        .await
        .expect("reaps")
        .into_iter()
        .map(|task| task.id)
        .collect();
    reaped.sort();
    assert_eq!(reaped, ["good", "long"]);
    let long_task = fleet.task("long").await.expect("read").expect("exists");
    assert_eq!(long_task.info.error, Some(lost_worker_error("w1")));
    fleet
        .submit(NewTask::new("next", "ws", "b", "go"))
        .await
        .expect("submitted");
    let healthy = fleet
        .register_worker(&worker_spec("healthy", &["b"]))
        .await
        .expect("registered");
    let next = fleet.claim(&healthy, 1).await.expect("claims");
    assert_eq!(next[0].id, "next");
}

#[tokio::test]
async fn a_models_nul_is_stored_escaped_and_later_messages_follow_it() {
    let db = database("model_nul").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    let submitted = fleet
        .submit(NewTask::new("t1", "ws", "tester", "go\0al").with_origin("s\0ession"))
        .await
        .expect("stored");
    assert_eq!(submitted.info.goal_prompt, "go\\0al");
    let spec = worker_spec("w1", &["tester"]);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    let task = fleet
        .claim(&lease, 1)
        .await
        .expect("claims")
        .pop()
        .expect("one");
    assert_eq!(
        task.goal_prompt, "go\\0al",
        "the worker runs what is stored"
    );

    for (n, body) in [(1, "a\0b"), (2, "next")] {
        assert_eq!(
            fleet
                .send_message("ws", "t1", n, body)
                .await
                .expect("stored"),
            asynctask_fleet::MessageSent::Stored
        );
    }
    let bodies: Vec<String> = fleet
        .pending_messages(&lease)
        .await
        .expect("read")
        .into_iter()
        .map(|message| message.body)
        .collect();
    assert_eq!(bodies, ["a\\0b", "next"]);

    fleet
        .ask_question(&task, 1, &Question::new("which?\0"))
        .await
        .expect("stored");
    assert!(
        fleet
            .answer_question("ws", "t1", 1, &Answer::Answered("x\0y".to_owned()))
            .await
            .expect("stored")
    );
    let answers = fleet.answers_to_deliver(&lease).await.expect("read");
    assert_eq!(answers[0].answer, Answer::Answered("x\\0y".to_owned()));

    let stored = fleet.task("t1").await.expect("read").expect("exists");
    assert_eq!(stored.origin.as_deref(), Some("s\\0ession"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_fails_right_after_connecting_backs_off() {
    let db = database("failing_session").await;
    // Every registration fails as a lost connection would, right after the
    // worker connected; each attempt is counted.
    let client = admin(&db).await;
    client
        .batch_execute(
            "CREATE SEQUENCE attempts;
             CREATE FUNCTION drop_session() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                PERFORM nextval('attempts');
                RAISE EXCEPTION 'the link went down' USING ERRCODE = '08006';
             END $$;
             CREATE TRIGGER drop_session BEFORE INSERT ON asynctask_workers
                FOR EACH ROW EXECUTE FUNCTION drop_session();",
        )
        .await
        .expect("a trigger");
    let spec = worker_spec("w", &["a"]).with_lease(Duration::from_secs(30));
    let worker = Worker::new(DatabaseConfig::from(db.config()), spec, Arc::new(ByGoal));
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(worker.run(shutdown.clone()));

    let attempts = || async {
        client
            .query_one(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM attempts",
                &[],
            )
            .await
            .expect("read")
            .get::<_, i64>(0)
    };
    eventually_with("the first attempt", Duration::from_secs(20), || async {
        attempts().await >= 1
    })
    .await;
    let first = tokio::time::Instant::now();
    eventually_with("the fifth attempt", Duration::from_secs(30), || async {
        attempts().await >= 5
    })
    .await;
    // Waits of 100, 200, 400 and 800 ms between them, at least: never the
    // shortest wait again and again.
    let took = first.elapsed();
    assert!(took >= Duration::from_millis(1_400), "{took:?}");

    shutdown.cancel();
    serving.await.expect("joined").expect("stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_refuses_a_launch_the_fleet_cannot_store_and_drops_a_refused_message() {
    let db = database("front_refusals").await;
    let front = FleetFront::connect(db.config(), FleetOptions::new(), "ws", "front")
        .await
        .expect("a front");
    let runner = front.runner();
    // Told at once, not retried until the task's timeout.
    let request = SubagentRequest::new("t0", "a".repeat(9_000), "go");
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        runner.run(request, CancellationToken::new()),
    )
    .await
    .expect("at once")
    .expect_err("refused");
    assert_eq!(
        err.message(),
        "the fleet refused the task: a subagent's name is refused: it is 9000 bytes long, \
         the most is 1024"
    );

    // A message the database refuses for good is dropped: the next one is
    // stored all the same.
    let client = admin(&db).await;
    client
        .batch_execute(
            "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                IF NEW.body = 'poison' THEN RAISE EXCEPTION 'poisoned message'; END IF;
                RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_poison BEFORE INSERT ON asynctask_messages
                FOR EACH ROW EXECUTE FUNCTION refuse_poison();",
        )
        .await
        .expect("a trigger");
    let (sender, inbox) = asynctask_manager::Inbox::channel();
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let runner = front.runner();
        let cancel = cancel.clone();
        async move {
            let request = SubagentRequest::new("t1", "a", "go").with_inbox(inbox);
            runner.run(request, cancel).await
        }
    });
    sender.send("poison".to_owned()).expect("taken");
    sender.send("next".to_owned()).expect("taken");
    eventually_with(
        "the next message is stored",
        Duration::from_secs(20),
        || async {
            let bodies: Vec<String> = client
                .query(
                    "SELECT body FROM asynctask_messages WHERE task_id = 't1'",
                    &[],
                )
                .await
                .expect("read")
                .iter()
                .map(|row| row.get(0))
                .collect();
            bodies == ["next"]
        },
    )
    .await;
    cancel.cancel();
    let _ = run.await.expect("joined");
    front.closing().cancel();
}
