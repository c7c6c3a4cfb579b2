//! What retention costs: `Fleet::prune` on the tests' private PostgreSQL
//! cluster, with a table of delivered tasks that are all younger than the
//! retention (the usual case: nothing to delete), then with a backlog of old
//! ones whose whole outputs are 64 KiB each.
//!
//! `cargo bench -p asynctask-fleet --bench prune` prints, for each case, the
//! median and worst time of one prune (one transaction: the gate, up to
//! `PRUNE_BATCH` tasks, then the registrations no task names).
//!
//! Wall-clock figures on a shared machine vary: read them as orientation
//! (`docs/benchmarks.md` records them).

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::cast_precision_loss,
    reason = "a benchmark reports what it measured, and fails loudly"
)]

use std::time::{Duration, Instant};

use asynctask_fleet::{DEFAULT_RETENTION, Fleet, FleetOptions, PRUNE_BATCH};
use asynctask_test_support::TestDatabase;

/// Delivered tasks younger than the retention.
const YOUNG: i64 = 100_000;
/// Delivered tasks older than it, each with a whole output.
const OLD: i64 = 2_000;
/// No-op prunes measured.
const RUNS: usize = 20;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let db = TestDatabase::create("bench_prune").await;
    Fleet::migrate(db.config()).await.unwrap();
    let mut fleet = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .unwrap();
    let (client, connection) = db.config().connect(tokio_postgres::NoTls).await.unwrap();
    let driver = tokio::spawn(connection);
    let day: i64 = 24 * 60 * 60 * 1000;
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    client
        .execute("INSERT INTO asynctask_workspaces (name) VALUES ('ws')", &[])
        .await
        .unwrap();
    // The young ones: ended and delivered a day ago, a small output each.
    client
        .execute(
            "INSERT INTO asynctask_tasks (id, workspace, subagent_name, goal_prompt, status,
                launched_at, started_at, completed_at, notified_at, output)
             SELECT 'young-' || n, 'ws', 'tester', 'run the suite', 'completed',
                $1::bigint, $1::bigint, $1::bigint, $1::bigint,
                '{\"terminate_reason\":\"goal\",\"message\":\"' || md5(n::text) || '\"}'
             FROM generate_series(1, $2::bigint) AS n",
            &[&(now - day), &YOUNG],
        )
        .await
        .unwrap();
    client
        .batch_execute("ANALYZE asynctask_tasks")
        .await
        .unwrap();
    let mut noop = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let started = Instant::now();
        let pruned = fleet.prune(DEFAULT_RETENTION, PRUNE_BATCH).await.unwrap();
        noop.push(started.elapsed());
        assert_eq!(pruned.map(|p| p.tasks), Some(0));
    }
    report(&format!("no-op prune, {YOUNG} young delivered tasks"), noop);

    // The backlog: old ones, each with 64 KiB of whole output that does not
    // compress (md5 hex).
    client
        .execute(
            "INSERT INTO asynctask_tasks (id, workspace, subagent_name, goal_prompt, status,
                launched_at, started_at, completed_at, notified_at, output, whole_output,
                whole_output_bytes)
             SELECT 'old-' || n, 'ws', 'tester', 'run the suite', 'completed',
                $1::bigint, $1::bigint, $1::bigint, $1::bigint, '{}',
                (SELECT string_agg(md5(n::text || '-' || k::text), '')
                 FROM generate_series(1, 2048) AS k),
                65536
             FROM generate_series(1, $2::bigint) AS n",
            &[&(now - 30 * day), &OLD],
        )
        .await
        .unwrap();
    client
        .batch_execute("ANALYZE asynctask_tasks")
        .await
        .unwrap();
    let mut full = Vec::new();
    let mut deleted = 0;
    loop {
        let started = Instant::now();
        let pruned = fleet
            .prune(DEFAULT_RETENTION, PRUNE_BATCH)
            .await
            .unwrap()
            .unwrap();
        full.push(started.elapsed());
        deleted += pruned.tasks;
        if !pruned.was_full(PRUNE_BATCH) {
            break;
        }
    }
    assert_eq!(deleted, u64::try_from(OLD).unwrap());
    report(
        &format!(
            "batch of {PRUNE_BATCH} old tasks with 64 KiB whole outputs, beside {YOUNG} young"
        ),
        full,
    );
    driver.abort();
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what}: {} prunes, median {:.1} ms, worst {:.1} ms",
        times.len(),
        ms(times[times.len() / 2]),
        ms(times[times.len() - 1])
    );
}
