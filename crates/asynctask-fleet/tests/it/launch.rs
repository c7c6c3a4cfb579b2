//! A task's whole launch travels with it: what a front submits (behaviour
//! prompts, context, output spec, tool whitelist, timeout, depth) is what the
//! worker's runner is given; a task stored before launches were kept runs with
//! the defaults it ran with then; an unreadable launch fails its task.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use asynctask_fleet::{
    DatabaseConfig, Fleet, FleetOptions, NewTask, SCHEMA_VERSION, Worker, WorkerSpec,
};
use asynctask_model::{AsyncTaskStatus, ManualClock, OutputObject, TerminateReason};
use asynctask_test_support::{TestDatabase, eventually_some_with};
use asynctask_tools::{ContextVar, OutputVarSpec, SubagentError, SubagentRequest, SubagentRunner};
use pretty_assertions::assert_eq;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;

use crate::connect;

/// A launch using every field.
fn full_request(id: &str, subagent: &str) -> SubagentRequest {
    SubagentRequest::new(id, subagent, "map the code")
        .with_behaviour_prompts(vec!["be brief".to_owned(), "cite files".to_owned()])
        .with_tool_whitelist(Some(vec!["read".to_owned(), "grep".to_owned()]))
        .with_output_spec(vec![OutputVarSpec {
            name: "summary".to_owned(),
            description: "one line".to_owned(),
        }])
        .with_context(vec![ContextVar {
            name: "branch".to_owned(),
            value: "main".to_owned(),
        }])
        .with_timeout(Duration::from_secs(42))
        .with_run_async(true)
        .with_depth(3)
}

/// Runs a SQL batch on its own connection.
async fn execute(db: &TestDatabase, sql: &str) {
    let (client, connection) = db.config().connect(NoTls).await.expect("connects");
    let driver = tokio::spawn(connection);
    client.batch_execute(sql).await.expect("executed");
    drop(client);
    let _ = driver.await;
}

#[tokio::test]
async fn a_claimed_task_carries_the_whole_launch_its_front_submitted() {
    let db = crate::database("launch").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    let request = full_request("full", "tester");
    fleet
        .submit(NewTask::from_request("ws", &request))
        .await
        .expect("submitted");
    fleet
        .submit(NewTask::new("plain", "ws", "tester", "go"))
        .await
        .expect("submitted");
    let lease = fleet
        .register_worker(
            &WorkerSpec::new("w", ["tester"])
                .with_workspaces(["ws"])
                .with_capacity(2),
        )
        .await
        .expect("registered");
    let claimed = fleet.claim(&lease, 2).await.expect("claims");
    assert_eq!(claimed.len(), 2);
    assert_eq!(claimed[0].request(), request);
    assert_eq!(
        (claimed[0].timeout, claimed[0].depth),
        (Duration::from_secs(42), 3)
    );
    // A task submitted with `NewTask::new` gets the defaults.
    assert_eq!(
        claimed[1].request(),
        SubagentRequest::new("plain", "tester", "go").with_run_async(true)
    );
}

#[tokio::test]
async fn a_task_whose_stored_launch_cannot_be_read_fails_at_its_claim() {
    let db = crate::database("launch_bad").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    for id in ["bad", "good"] {
        fleet
            .submit(NewTask::new(id, "ws", "tester", "go"))
            .await
            .expect("submitted");
    }
    execute(
        &db,
        "UPDATE asynctask_tasks SET request = '{\"oops\": 1}' WHERE id = 'bad'",
    )
    .await;
    let lease = fleet
        .register_worker(&WorkerSpec::new("w", ["tester"]).with_workspaces(["ws"]))
        .await
        .expect("registered");
    let claimed = fleet.claim(&lease, 1).await.expect("claims");
    assert_eq!(
        claimed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["good"],
        "the next task is claimed instead"
    );
    let bad = fleet.task("bad").await.expect("reads").expect("kept");
    assert_eq!(bad.info.status, AsyncTaskStatus::Failed);
    let error = bad.info.error.unwrap_or_default();
    assert!(
        error.starts_with("the task's launch cannot be read: missing field `task_id`"),
        "{error}"
    );
    // Failed results are delivered like any other.
    let results = fleet.claim_results("ws", 10).await.expect("claims");
    assert_eq!(
        results
            .tasks()
            .iter()
            .map(|t| t.info.id.as_str())
            .collect::<Vec<_>>(),
        ["bad"]
    );
}

#[tokio::test]
async fn a_database_of_the_schema_before_launches_is_migrated_with_the_old_defaults() {
    let db = crate::database("launch_migrate").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .submit(NewTask::from_request("ws", &full_request("kept", "tester")))
        .await
        .expect("submitted");
    drop(fleet);
    // Back to version 3: the launches (and the claim and message functions) removed.
    crate::downgrade(&db, 3).await;
    asynctask_fleet::Fleet::migrate(db.config())
        .await
        .expect("migrated");

    let mut fleet = connect(&db, &clock).await;
    assert_eq!(SCHEMA_VERSION, 7);
    let task = fleet.task("kept").await.expect("reads").expect("kept");
    assert_eq!(
        (task.info.status, task.info.goal_prompt.as_str()),
        (AsyncTaskStatus::Queued, "map the code")
    );
    let lease = fleet
        .register_worker(
            &WorkerSpec::new("w", ["tester"])
                .with_workspaces(["ws"])
                .with_capacity(2),
        )
        .await
        .expect("registered");
    let claimed = fleet.claim(&lease, 1).await.expect("claims");
    // What such a task ran with before: the default timeout, depth 1, in
    // the background, nothing else.
    assert_eq!(
        claimed[0].request(),
        SubagentRequest::new("kept", "tester", "map the code").with_run_async(true)
    );
    // A task submitted now keeps its launch.
    let request = full_request("new", "tester");
    fleet
        .submit(NewTask::from_request("ws", &request))
        .await
        .expect("submitted");
    let claimed = fleet.claim(&lease, 1).await.expect("claims");
    assert_eq!(claimed[0].request(), request);
}

/// Records the requests it runs; `wait` waits for its cancel (a timeout),
/// anything else completes at once.
#[derive(Default)]
struct Records {
    seen: Mutex<Vec<SubagentRequest>>,
}

#[async_trait::async_trait]
impl SubagentRunner for Records {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        let wait = request.subagent_name == "wait";
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request);
        if wait {
            cancel.cancelled().await;
            return Err(SubagentError::new("cancelled"));
        }
        Ok(OutputObject::new(TerminateReason::Goal))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_the_launch_its_front_resolved_within_its_own_timeout_cap() {
    let db = crate::database("launch_worker").await;
    let mut fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    let request = full_request("full", "tester");
    fleet
        .submit(NewTask::from_request("ws", &request))
        .await
        .expect("submitted");
    // Its own timeout (1 s), and one past the worker's cap (2 s).
    let short = SubagentRequest::new("short", "wait", "g").with_timeout(Duration::from_secs(1));
    let long = SubagentRequest::new("long", "wait", "g").with_timeout(Duration::from_secs(900));
    for launch in [&short, &long] {
        fleet
            .submit(NewTask::from_request("ws", launch))
            .await
            .expect("submitted");
    }
    let runner = Arc::new(Records::default());
    let spec = WorkerSpec::new("w", ["tester", "wait"])
        .with_workspaces(["ws"])
        .with_capacity(3);
    let worker = Worker::new(
        DatabaseConfig::from(db.config()),
        spec,
        Arc::clone(&runner) as Arc<dyn SubagentRunner>,
    )
    .with_task_timeout(Duration::from_secs(2));
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(worker.run(shutdown.clone()));
    let mut ends = Vec::new();
    for id in ["full", "short", "long"] {
        let task = eventually_some_with("the task ends", Duration::from_secs(20), || async {
            let task = fleet.task(id).await.expect("read")?;
            task.info.status.is_terminal().then_some(task)
        })
        .await;
        ends.push((task.info.status, task.info.error));
    }
    assert_eq!(
        ends,
        [
            (AsyncTaskStatus::Completed, None),
            (
                AsyncTaskStatus::Failed,
                Some("Subagent 'wait' timed out after 1 seconds".to_owned())
            ),
            (
                AsyncTaskStatus::Failed,
                Some("Subagent 'wait' timed out after 2 seconds".to_owned())
            ),
        ]
    );
    let mut seen = runner
        .seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    seen.sort_by(|a, b| a.task_id.cmp(&b.task_id));
    assert_eq!(
        seen,
        [
            // Everything as launched; its 42 s, past the cap, cut to 2 s.
            request.with_timeout(Duration::from_secs(2)),
            long.with_timeout(Duration::from_secs(2)),
            short
        ]
    );
    shutdown.cancel();
    serving.await.expect("joined").expect("stopped");
}
