//! The fleet against a real PostgreSQL server (`ASYNCTASK_TEST_DATABASE_URL`,
//! else a private throwaway cluster): schema, claims, leases, fencing,
//! delivery.

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
mod schema;

use std::sync::Arc;

use asynctask_fleet::{Fleet, FleetOptions};
use asynctask_model::ManualClock;
use asynctask_test_support::TestDatabase;

/// A handle on `db` measuring time on `clock`.
async fn connect(db: &TestDatabase, clock: &ManualClock) -> Fleet {
    connect_config(db.config(), clock).await
}

/// A handle on the database `config` names, measuring time on `clock`.
async fn connect_config(config: &asynctask_fleet::Config, clock: &ManualClock) -> Fleet {
    Fleet::connect(config, FleetOptions::new().clock(Arc::new(clock.clone())))
        .await
        .expect("connects and migrates")
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
    let spec = asynctask_fleet::WorkerSpec::new("w1", ["tester"]).with_lease(lease);
    let lease = fleet.register_worker(&spec).await.expect("registered");
    let task = fleet
        .claim(&lease, 1)
        .await
        .expect("claims")
        .pop()
        .expect("one");
    (lease, task)
}
