//! The fleet against a real PostgreSQL server (`ASYNCTASK_TEST_DATABASE_URL`,
//! else a private throwaway cluster): schema, claims, leases, fencing,
//! delivery.

mod auth;
mod claims;
mod connection;
mod delivery;
mod differential;
mod front;
mod front_leases;
mod held;
mod launch;
mod leases;
mod messages;
#[path = "../model/mod.rs"]
mod model;
mod orphans;
mod questions;
mod retention;
mod roles;
mod schema;
mod storable;

use std::sync::Arc;

use asynctask_fleet::{Fleet, FleetOptions};
use asynctask_model::ManualClock;
use asynctask_test_support::TestDatabase;

/// A fresh database with the fleet's schema, made as `asynctask fleet
/// migrate` makes it (connecting never makes it).
async fn database(prefix: &str) -> TestDatabase {
    let db = TestDatabase::create(prefix).await;
    Fleet::migrate(db.config()).await.expect("migrated");
    db
}

/// A handle on `db` measuring time on `clock`.
async fn connect(db: &TestDatabase, clock: &ManualClock) -> Fleet {
    connect_config(db.config(), clock).await
}

/// A handle on the database `config` names, measuring time on `clock`.
async fn connect_config(config: &asynctask_fleet::Config, clock: &ManualClock) -> Fleet {
    Fleet::connect(config, FleetOptions::new().clock(Arc::new(clock.clone())))
        .await
        .expect("connects")
}

/// Task `t1` of workspace `ws`, submitted and claimed by a worker `w1` that
/// serves `tester` under a lease of `lease`: the lease and the claim.
async fn running_task(
    fleet: &mut Fleet,
    lease: std::time::Duration,
) -> (asynctask_fleet::WorkerLease, asynctask_fleet::ClaimedTask) {
    fleet
        .submit(asynctask_fleet::NewTask::new("t1", "ws", "tester", "go"))
        .await
        .expect("submitted");
    let spec = asynctask_fleet::WorkerSpec::new("w1", ["tester"])
        .with_workspaces(["ws"])
        .with_lease(lease);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    let task = fleet
        .claim(&lease, 1)
        .await
        .expect("claims")
        .pop()
        .expect("one");
    (lease, task)
}

/// What each migration added, undone: entry `n` takes version `n + 1`
/// back to `n`. One place, so a new migration is undone everywhere.
const UNDO: &[&str] = &[
    "",
    "ALTER TABLE asynctask_tasks DROP COLUMN front_id, DROP COLUMN cancel_requested,
        DROP COLUMN progress, DROP COLUMN whole_output, DROP COLUMN whole_output_bytes;
     DROP TABLE asynctask_fronts;
     ALTER TABLE asynctask_workers DROP COLUMN catalog;",
    "DROP TABLE asynctask_messages, asynctask_questions;",
    "ALTER TABLE asynctask_tasks DROP COLUMN request;",
    "DROP FUNCTION asynctask_claim(bigint, bigint, integer);",
    "DROP FUNCTION asynctask_send_message(text, text, bigint, text, bigint, bigint, text);",
    // The functions this migration made again stay: the migration from 6
    // drops and makes them anew whatever they were.
    "ALTER TABLE asynctask_workers DROP COLUMN workspaces;",
];

/// Takes `db`'s schema back to `version`, as an older asynctask left it.
async fn downgrade(db: &TestDatabase, version: i32) {
    let from = usize::try_from(asynctask_fleet::SCHEMA_VERSION).expect("positive");
    let to = usize::try_from(version).expect("positive");
    assert_eq!(UNDO.len(), from, "every migration has its undoing");
    let mut sql: String = UNDO[to..from].iter().rev().copied().collect();
    sql.push_str(&format!("UPDATE asynctask_schema SET version = {version};"));
    let (client, connection) = db
        .config()
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connects");
    let driver = tokio::spawn(connection);
    client.batch_execute(&sql).await.expect("downgraded");
    drop(client);
    let _ = driver.await;
}
