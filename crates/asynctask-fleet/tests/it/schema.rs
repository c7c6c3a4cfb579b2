//! The schema: made and upgraded only by a migration (idempotent, one at a
//! time); every other connection refuses a missing, older or newer one,
//! untouched.

use std::time::Duration;

use asynctask_fleet::{Fleet, FleetError, FleetOptions, NewTask, SCHEMA_VERSION, WorkerSpec};
use asynctask_model::ManualClock;
use asynctask_test_support::TestDatabase;
use pretty_assertions::assert_eq;
use tokio_postgres::NoTls;

use crate::connect;

async fn version(db: &TestDatabase) -> Vec<i32> {
    let (client, connection) = db.config().connect(NoTls).await.expect("connects");
    let driver = tokio::spawn(connection);
    let rows = client
        .query("SELECT version FROM asynctask_schema", &[])
        .await
        .expect("reads");
    drop(client);
    let _ = driver.await;
    rows.iter().map(|row| row.get(0)).collect()
}

#[tokio::test]
async fn a_fresh_database_is_migrated_once_and_a_newer_schema_is_refused_untouched() {
    let db = TestDatabase::create("schema").await;
    // Several migrations at once: one migrates, the others wait and see it done.
    let handles = (0..4)
        .map(|_| {
            let config = db.config().clone();
            tokio::spawn(async move { Fleet::migrate(&config).await })
        })
        .collect::<Vec<_>>();
    let mut found = Vec::new();
    for handle in handles {
        found.push(handle.await.expect("joined").expect("migrates"));
    }
    found.sort_unstable();
    assert_eq!(found, [0, SCHEMA_VERSION, SCHEMA_VERSION, SCHEMA_VERSION]);
    assert_eq!(version(&db).await, [SCHEMA_VERSION]);
    Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects");

    let (client, connection) = db.config().connect(NoTls).await.expect("connects");
    let driver = tokio::spawn(connection);
    client
        .execute("UPDATE asynctask_schema SET version = 99", &[])
        .await
        .expect("written");
    drop(client);
    let _ = driver.await;

    let err = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect_err("a newer schema is refused");
    assert!(
        matches!(
            err,
            FleetError::NewerSchema {
                found: 99,
                supported: SCHEMA_VERSION
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the fleet's database has schema version 99, newer than the version {SCHEMA_VERSION} \
             this asynctask knows: use a newer asynctask, or another database"
        )
    );
    assert_eq!(version(&db).await, [99], "left untouched");
    let err = Fleet::migrate(db.config())
        .await
        .expect_err("a newer schema is not migrated");
    assert!(
        matches!(err, FleetError::NewerSchema { found: 99, .. }),
        "{err:?}"
    );
    assert_eq!(version(&db).await, [99], "left untouched");
}

/// Whether `db` holds a table named `name`.
async fn has_table(db: &TestDatabase, name: &str) -> bool {
    let (client, connection) = db.config().connect(NoTls).await.expect("connects");
    let driver = tokio::spawn(connection);
    let found = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .await
        .expect("reads")
        .get(0);
    drop(client);
    let _ = driver.await;
    found
}

#[tokio::test]
async fn connecting_never_makes_the_schema_and_a_missing_or_older_one_names_fleet_migrate() {
    let db = TestDatabase::create("unmigrated").await;
    let err = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect_err("no schema");
    assert!(matches!(err, FleetError::NoSchema), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the fleet's database has no asynctask schema on this role's search_path: run \
         `asynctask fleet migrate` on it (as the role that owns the schema) first, or put the \
         fleet's schema on this role's search_path and grant it USAGE"
    );
    assert!(
        !has_table(&db, "asynctask_schema").await,
        "connecting made nothing"
    );

    Fleet::migrate(db.config()).await.expect("migrated");
    crate::downgrade(&db, SCHEMA_VERSION - 1).await;
    let err = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect_err("an older schema");
    assert!(
        matches!(err, FleetError::OlderSchema { found, supported: SCHEMA_VERSION }
            if found == SCHEMA_VERSION - 1),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the fleet's database has schema version {}, older than the version \
             {SCHEMA_VERSION} this asynctask needs: run `asynctask fleet migrate` on it (as the \
             role that owns the schema)",
            SCHEMA_VERSION - 1
        )
    );
    assert_eq!(version(&db).await, [SCHEMA_VERSION - 1], "left untouched");
    assert_eq!(
        Fleet::migrate(db.config()).await.expect("migrated"),
        SCHEMA_VERSION - 1
    );
    Fleet::connect(db.config(), FleetOptions::new())
        .await
        .expect("connects once migrated");
}

#[tokio::test]
async fn a_server_that_is_not_there_is_a_connect_error_without_credentials() {
    let err = Fleet::connect_url(
        "postgresql://someone:s3cret@/nowhere?host=/nonexistent-asynctask-dir",
        FleetOptions::new(),
    )
    .await
    .expect_err("nothing listens there");
    assert!(matches!(err, FleetError::Connect { .. }), "{err:?}");
    assert!(!err.chain().contains("s3cret"), "{}", err.chain());
    assert!(!format!("{err:?}").contains("s3cret"));
}

#[tokio::test]
async fn a_database_of_the_schema_before_the_claim_function_is_migrated_with_its_tasks() {
    let db = crate::database("claim_migrate").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .submit(NewTask::new("kept", "ws", "tester", "go"))
        .await
        .expect("submitted");
    let lease = fleet
        .register_worker(
            &WorkerSpec::new("w", ["tester"])
                .with_workspaces(["ws"])
                .with_lease(Duration::from_secs(30)),
        )
        .await
        .expect("registered");
    drop(fleet);
    // Back to version 4: the claim function removed.
    crate::downgrade(&db, 4).await;
    Fleet::migrate(db.config()).await.expect("migrated");

    let mut fleet = connect(&db, &clock).await;
    assert_eq!(version(&db).await, [SCHEMA_VERSION]);
    // A registration older than workspaces serves none.
    assert_eq!(fleet.claim(&lease, 1).await.expect("claims"), []);
    let lease = fleet
        .register_worker(
            &WorkerSpec::new("w", ["tester"])
                .with_workspaces(["ws"])
                .with_lease(Duration::from_secs(30)),
        )
        .await
        .expect("registered");
    let claimed = fleet.claim(&lease, 1).await.expect("claims");
    assert_eq!(
        claimed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["kept"]
    );
}
