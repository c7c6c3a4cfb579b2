//! Least privilege: the role that owns the schema migrates it; fronts,
//! workers and the status run under a role that may only read and write
//! the fleet's tables and run its functions, and never run DDL. The stored
//! functions fix their `search_path` and qualify every name.

use std::sync::Arc;
use std::time::Duration;

use asynctask_fleet::{
    DatabaseConfig, Fleet, FleetError, FleetOptions, NewTask, Worker, WorkerSpec,
};
use asynctask_model::{AsyncTaskStatus, OutputObject, TerminateReason};
use asynctask_test_support::{TestDatabase, eventually_some_with};
use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner};
use pretty_assertions::assert_eq;
use tokio_postgres::{Client, NoTls};
use tokio_util::sync::CancellationToken;

/// A subagent that reaches its goal at once.
#[derive(Debug)]
struct Done;

#[async_trait::async_trait]
impl SubagentRunner for Done {
    async fn run(
        &self,
        _request: SubagentRequest,
        _cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        Ok(OutputObject::new(TerminateReason::Goal))
    }
}

/// A connection as the test server's administrator, and its driver.
async fn admin(db: &TestDatabase) -> (Client, tokio::task::JoinHandle<()>) {
    let (client, connection) = db.config().connect(NoTls).await.expect("connects");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    (client, driver)
}

/// `db`'s connection settings acting as `role` (set at connection start,
/// as `PGOPTIONS` would: the role's privileges are the session's), with the
/// fleet's schema on the `search_path`.
fn as_role(db: &TestDatabase, role: &str) -> DatabaseConfig {
    let mut config = db.config().clone();
    config.options(format!("-c role={role} -c search_path=asynctask"));
    DatabaseConfig::from(config)
}

/// The statements docs/fleet.md gives an administrator (its Security
/// section), as written, for the database `db` and the roles `owner` and
/// `app`: the database exists already, and the roles log in through the
/// test's own session.
fn documented_setup(db: &str, owner: &str, app: &str) -> String {
    let guide = include_str!("../../../../docs/fleet.md");
    let start = guide
        .find("```sql\n")
        .expect("docs/fleet.md gives the roles' SQL")
        + "```sql\n".len();
    let end = start + guide[start..].find("```").expect("the block ends");
    guide[start..end]
        .lines()
        .filter(|line| !line.starts_with("CREATE DATABASE") && !line.starts_with("\\c "))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("LOGIN PASSWORD '…'", "NOLOGIN")
        .replace("asynctask_owner", owner)
        .replace("asynctask_fleet", app)
        .replace("DATABASE asynctask ", &format!("DATABASE \"{db}\" "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_with_only_dml_and_execute_runs_a_front_a_worker_and_the_status_after_the_owner_migrated()
 {
    let db = TestDatabase::create("roles").await;
    // Roles belong to the whole server: named after the database, unique.
    let owner = format!("{}_owner", db.name());
    let app = format!("{}_app", db.name());
    let (client, driver) = admin(&db).await;
    // What docs/fleet.md tells an administrator to run, and an event
    // trigger that refuses any DDL by the least-privileged role.
    client
        .batch_execute(&documented_setup(db.name(), &owner, &app))
        .await
        .expect("the documented roles and grants made");
    client
        .batch_execute(&format!(
            "CREATE FUNCTION public.refuse_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
             BEGIN
                IF current_user = '{app}' THEN
                    RAISE EXCEPTION 'DDL by the least-privileged role: %', tg_tag;
                END IF;
             END $$;
             CREATE EVENT TRIGGER refuse_ddl ON ddl_command_start
                EXECUTE FUNCTION public.refuse_ddl();"
        ))
        .await
        .expect("the event trigger made");

    // Before the owner migrates, the least-privileged role is refused with
    // a message naming the migration.
    let err = Fleet::connect(as_role(&db, &app), FleetOptions::new())
        .await
        .expect_err("no schema yet");
    assert!(matches!(err, FleetError::NoSchema), "{}", err.chain());

    assert_eq!(
        Fleet::migrate(as_role(&db, &owner))
            .await
            .expect("migrated"),
        0
    );
    // The least-privileged role cannot migrate (it would run DDL).
    let refused = Fleet::migrate(as_role(&db, &app))
        .await
        .expect_err("no DDL for the app role");
    assert!(
        refused.chain().contains("DDL by the least-privileged role"),
        "{}",
        refused.chain()
    );

    // A front submits, a worker (its whole loop: registration, lease,
    // claims, ends, wake-ups, pruning) runs the task, the front takes the
    // result, and the status reads it all: every one as the app role.
    let mut front = Fleet::connect(as_role(&db, &app), FleetOptions::new())
        .await
        .expect("the front connects");
    let lease = front
        .register_front("ws", "front", Duration::from_secs(30))
        .await
        .expect("the front registers");
    front
        .submit(NewTask::new("t1", "ws", "tester", "go").with_front(&lease))
        .await
        .expect("submitted");
    front
        .send_message("ws", "t1", 1, "hello")
        .await
        .expect("a message stored (the message function)");
    let spec = WorkerSpec::new("w", ["tester"]).with_workspaces(["ws"]);
    let shutdown = CancellationToken::new();
    let serving =
        tokio::spawn(Worker::new(as_role(&db, &app), spec, Arc::new(Done)).run(shutdown.clone()));
    let ended = eventually_some_with("the task ends", Duration::from_secs(20), || async {
        let task = front.task("t1").await.expect("read")?;
        task.info.status.is_terminal().then_some(task.info.status)
    })
    .await;
    assert_eq!(ended, AsyncTaskStatus::Completed);
    let taken = front
        .result_for(&lease, "t1")
        .await
        .expect("the front takes its result");
    assert!(taken.is_some(), "kept for its front");
    let mut status = Fleet::connect(as_role(&db, &app), FleetOptions::new())
        .await
        .expect("the status connects");
    let read = status.status().await.expect("the status reads");
    assert_eq!(
        read.workers
            .iter()
            .map(|w| (w.name.as_str(), w.workspaces.clone()))
            .collect::<Vec<_>>(),
        [("w", vec!["ws".to_owned()])]
    );
    shutdown.cancel();
    serving
        .await
        .expect("joined")
        .expect("the worker stops cleanly");

    drop((front, status));
    client
        .batch_execute(&format!(
            "DROP EVENT TRIGGER refuse_ddl;
             DROP OWNED BY {app};
             DROP OWNED BY {owner};
             DROP ROLE {app};
             DROP ROLE {owner};"
        ))
        .await
        .expect("roles dropped");
    drop(client);
    let _ = driver.await;
}

#[tokio::test]
async fn the_stored_functions_fix_their_search_path_and_qualify_every_name() {
    let db = crate::database("functions").await;
    let (client, driver) = admin(&db).await;
    let rows = client
        .query(
            "SELECT p.proname::text, p.proconfig, p.prosrc, n.nspname::text
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE p.proname LIKE 'asynctask%' ORDER BY p.proname",
            &[],
        )
        .await
        .expect("read");
    let names: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    assert_eq!(names, ["asynctask_claim", "asynctask_send_message"]);
    for row in &rows {
        let name: String = row.get(0);
        let config: Option<Vec<String>> = row.get(1);
        assert_eq!(
            config,
            Some(vec!["search_path=pg_catalog, pg_temp".to_owned()]),
            "{name}"
        );
        let schema: String = row.get(3);
        let body: String = row.get(2);
        let qualified = format!("\"{schema}\".asynctask_");
        let mentions = body.matches("asynctask_").count();
        assert!(mentions > 0, "{name}");
        assert_eq!(
            body.matches(&qualified).count(),
            mentions,
            "{name}: every name of the fleet's is qualified by its schema"
        );
    }
    drop(client);
    let _ = driver.await;
}

#[tokio::test]
async fn a_worker_naming_no_workspace_refuses_to_start_and_registers_nothing() {
    let db = crate::database("no_workspaces").await;
    let spec = WorkerSpec::new("w", ["tester"]);
    // Bounded: a worker that started would serve until told to stop.
    let run = Worker::new(
        DatabaseConfig::from(db.config()),
        spec.clone(),
        Arc::new(Done),
    )
    .run(CancellationToken::new());
    let err = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("refused at once, not served")
        .expect_err("refused");
    assert!(matches!(err, FleetError::NoWorkspaces { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "worker w names no workspace: name each workspace it serves (`asynctask worker \
         --workspace NAME`, or `workspaces = [...]` in its config); it runs their tasks in its \
         checkout, with its secrets"
    );
    let fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");
    let err = fleet.register_worker(&spec).await.expect_err("refused");
    assert!(matches!(err, FleetError::NoWorkspaces { .. }), "{err:?}");
    let blank = fleet
        .register_worker(&spec.with_workspaces(["ws", " "]))
        .await
        .expect_err("refused");
    assert_eq!(blank.to_string(), "a worker's workspace must not be empty");
    let (client, driver) = admin(&db).await;
    let count: i64 = client
        .query_one("SELECT count(*) FROM asynctask_workers", &[])
        .await
        .expect("read")
        .get(0);
    assert_eq!(count, 0, "nothing registered");
    drop(client);
    let _ = driver.await;
}
