//! Figures of `asynctask worker` on one machine: the built binary serving a
//! private PostgreSQL cluster (the tests' throwaway one), no namespaces.
//!
//! `cargo bench -p asynctask-cli --bench fleet` prints:
//!
//! - launch → subagent start: from just before `Fleet::submit` until the
//!   subagent (`date +%s%N`, a process the worker's runner starts through its
//!   reaper) reads the clock, one task at a time (each waited for before the
//!   next), p50, p99 and worst over 200 tasks;
//! - an idle worker's cost to the database: transactions per second
//!   (`pg_stat_database.xact_commit` of the fleet's database, this bench's own
//!   two reads taken out) over two minutes with the default 30-second lease.
//!
//! Wall-clock figures on a shared machine vary: read them as orientation
//! (`docs/benchmarks.md` records them).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    reason = "a benchmark reports what it measured, and fails loudly"
)]

use std::process::{Command, Stdio};
use std::time::Duration;

use asynctask_fleet::{ENDED_CHANNEL, Fleet, FleetListener, FleetOptions, NewTask};
use asynctask_model::MaxAsyncTasks;
use asynctask_test_support::{TestDatabase, temp_dir};

const TASKS: usize = 200;
const IDLE: Duration = Duration::from_secs(120);

mod common;

use common::{now_ns, percentile};

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let db = TestDatabase::create("bench_fleet").await;
    Fleet::migrate(db.config()).await.unwrap();
    let dir = temp_dir("bench-fleet");
    let config = dir.path().join("asynctask.toml");
    std::fs::write(
        &config,
        "[subagents.stamp]\ncommand = [\"date\", \"+%s%N\"]\n",
    )
    .unwrap();
    let mut front = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .unwrap();
    front
        .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
        .await
        .unwrap();
    let mut listener = FleetListener::connect(db.config(), &[ENDED_CHANNEL])
        .await
        .unwrap();
    // `ASYNCTASK_BIN` names another `asynctask` binary to run the worker (as
    // in the `machines` bench): two builds compared under the same load.
    let binary = std::env::var("ASYNCTASK_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_asynctask").to_owned());
    let mut worker = Command::new(binary)
        .args(["worker", "--config"])
        .arg(&config)
        .args(["--name", "bench", "--capacity", "4", "--workspace", "ws"])
        .current_dir(dir.path())
        .env("ASYNCTASK_DATABASE_URL", db.connection_string())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();

    let mut latencies = Vec::with_capacity(TASKS);
    let mut claims = Vec::with_capacity(TASKS);
    for n in 0..TASKS + 10 {
        let id = format!("t{n:04}");
        let launched = now_ns();
        front
            .submit(NewTask::new(id.clone(), "ws", "stamp", "now"))
            .await
            .unwrap();
        listener.recv().await.unwrap();
        let task = front.task(&id).await.unwrap().unwrap();
        // When the claim's transaction read the database's clock (ms).
        let claimed = i128::from(task.info.started_at.unwrap()) * 1_000_000;
        let started: i128 = task
            .info
            .output
            .and_then(|o| o.final_message)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The first ten warm the worker, the cluster and the page cache.
        if n >= 10 {
            latencies.push((started - launched) as f64 / 1e6);
            claims.push((claimed - launched) as f64 / 1e6);
        }
    }
    latencies.sort_by(f64::total_cmp);
    claims.sort_by(f64::total_cmp);
    println!(
        "launch -> subagent start, {TASKS} tasks one at a time: p50 {:.2} ms, p99 {:.2} ms, worst {:.2} ms",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies[latencies.len() - 1]
    );
    println!(
        "  of which launch -> claimed (the database's clock, ms resolution): p50 {:.1} ms, p99 {:.1} ms",
        percentile(&claims, 0.5),
        percentile(&claims, 0.99)
    );

    // Idle: nothing queued; the worker only heartbeats, reaps and looks.
    drop(listener);
    drop(front);
    tokio::time::sleep(Duration::from_secs(12)).await;
    let before = transactions(&db).await;
    tokio::time::sleep(IDLE).await;
    let after = transactions(&db).await;
    // Each read is one transaction of its own.
    let idle = (after - before - 1) as f64 / IDLE.as_secs_f64();
    println!(
        "idle worker: {idle:.2} transactions/s over {} s (default 30 s lease)",
        IDLE.as_secs()
    );

    let pid = nix::unistd::Pid::from_raw(i32::try_from(worker.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = worker.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// Committed and rolled-back transactions of the fleet's database so far.
async fn transactions(db: &TestDatabase) -> i64 {
    let (client, connection) = db.config().connect(tokio_postgres::NoTls).await.unwrap();
    let driver = tokio::spawn(connection);
    let count: i64 = client
        .query_one(
            "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database \
             WHERE datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    drop(client);
    let _ = driver.await;
    count
}
