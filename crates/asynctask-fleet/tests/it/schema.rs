//! The schema: migrated at connect, idempotent, a newer one refused untouched.

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
    // Several handles connecting at once: one migrates, the others wait and see it done.
    let handles = (0..4)
        .map(|_| {
            let config = db.config().clone();
            tokio::spawn(async move { Fleet::connect(&config, FleetOptions::new()).await })
        })
        .collect::<Vec<_>>();
    for handle in handles {
        handle.await.expect("joined").expect("connects");
    }
    assert_eq!(version(&db).await, [SCHEMA_VERSION]);

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
    let db = TestDatabase::create("claim_migrate").await;
    let clock = ManualClock::new(1_000);
    let mut fleet = connect(&db, &clock).await;
    fleet
        .submit(NewTask::new("kept", "ws", "tester", "go"))
        .await
        .expect("submitted");
    let lease = fleet
        .register_worker(&WorkerSpec::new("w", ["tester"]).with_lease(Duration::from_secs(30)))
        .await
        .expect("registered");
    drop(fleet);
    // Back to version 4: the claim function removed.
    crate::downgrade(&db, 4).await;

    let mut fleet = connect(&db, &clock).await;
    assert_eq!(version(&db).await, [SCHEMA_VERSION]);
    let claimed = fleet.claim(&lease, 1).await.expect("claims");
    assert_eq!(
        claimed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["kept"]
    );
}
