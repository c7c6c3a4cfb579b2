//! Figures of the fleet across simulated machines: `asynctask worker`
//! processes and the client each in a network namespace of its own, the
//! tests' private PostgreSQL server in another, joined by veth links (as
//! the scenario tests run them). Needs root.
//!
//! `cargo bench -p asynctask-cli --bench machines` (bench profile) prints
//! (`ASYNCTASK_BIN` names another `asynctask` binary to run the workers):
//!
//! - launch → subagent start: from just before `Fleet::submit` on the
//!   client's machine until the subagent (`date +%s%N`, started by a worker
//!   on another machine) reads the clock, one task at a time, p50/p99/worst
//!   over 300 tasks; and where the time goes, from the worker's log
//!   (timestamps of the wake-up and of the claim's end) — launch → woken,
//!   woken → claimed, claimed → subagent start;
//! - completion → result in a waiting client: from the subagent's clock
//!   reading until the client, woken by the task's end notification, holds
//!   the result (`Fleet::claim_results`);
//! - 10,000 trivial tasks (`true`) queued, then run through 4 workers
//!   (capacity 4 each, four machines): tasks/s, and the CPU time of the
//!   workers (with their subagents) and of the server;
//! - statements per second of an idle worker (default 30 s lease) and of an
//!   idle waiting client (listening for ends), over 60 s each.
//!
//! Wall-clock figures on a shared machine vary: read them as orientation
//! (`docs/benchmarks.md` records them).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a benchmark reports what it measured, and fails loudly"
)]

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use asynctask_fleet::{ENDED_CHANNEL, Fleet, FleetListener, FleetOptions, NewTask};
use asynctask_model::MaxAsyncTasks;
use asynctask_test_support::{Host, Network, TestDatabase, temp_dir};

const LATENCY_TASKS: usize = 300;
const BULK_TASKS: usize = 10_000;
const IDLE: Duration = Duration::from_secs(60);

mod common;

use common::{now_ns, percentile};

fn summary(name: &str, mut values: Vec<f64>) {
    values.sort_by(f64::total_cmp);
    println!(
        "{name}: p50 {:.2} ms, p99 {:.2} ms, worst {:.2} ms",
        percentile(&values, 0.5),
        percentile(&values, 0.99),
        values[values.len() - 1]
    );
}

/// A worker process, ended by pid when dropped.
struct WorkerProcess(Child);

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_worker(
    network: &Network,
    host: &Host,
    db: &TestDatabase,
    dir: &Path,
    name: &str,
    subagent: &str,
    log: &str,
) -> WorkerProcess {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, format!("[subagents.job]\ncommand = {subagent}\n")).unwrap();
    let log_file = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = network
        .command(host, binary())
        .args(["worker", "--config"])
        .arg(&config)
        .args(["--name", name, "--capacity", "4"])
        .args(["--workspace", "ws", "--workspace", "bulk"])
        .current_dir(dir)
        .env(
            "ASYNCTASK_DATABASE_URL",
            db.connection_string_via(&host.server_address()),
        )
        .env("RUST_LOG", log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .unwrap();
    WorkerProcess(child)
}

/// The `asynctask` binary: `ASYNCTASK_BIN` when set (a copy, safe from a
/// rebuild of the shared target directory while the bench runs), else the
/// one cargo built.
fn binary() -> String {
    std::env::var("ASYNCTASK_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_asynctask").to_owned())
}

/// Runs `work` on a thread in `host`'s namespace, with a runtime of its own
/// and a fleet connection over the host's link.
fn on_host<R, F>(
    network: &Network,
    host: &Host,
    db: &TestDatabase,
    work: impl FnOnce(Fleet, FleetListener) -> F + Send + 'static,
) -> R
where
    R: Send + 'static,
    F: Future<Output = R> + 'static,
{
    let url = db.connection_string_via(&host.server_address());
    network.run_in(host, move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let fleet = Fleet::connect_url(&url, FleetOptions::new()).await.unwrap();
            let listener = FleetListener::connect(
                asynctask_fleet::DatabaseConfig::parse(&url).unwrap(),
                &[ENDED_CHANNEL],
            )
            .await
            .unwrap();
            work(fleet, listener).await
        })
    })
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let mut network = Network::new().unwrap_or_else(|err| panic!("{err}"));
    let hosts: Vec<Host> = (0..5).map(|_| network.add_host().unwrap()).collect();
    let db = TestDatabase::create_in("bench_machines", &network).await;
    Fleet::migrate(db.config()).await.unwrap();
    let dir = temp_dir("bench-machines");
    let dir = dir.path().to_owned();
    {
        let admin = Fleet::connect(db.config(), FleetOptions::new())
            .await
            .unwrap();
        admin
            .set_max_async("ws", MaxAsyncTasks::UNLIMITED)
            .await
            .unwrap();
        admin
            .set_max_async("bulk", MaxAsyncTasks::UNLIMITED)
            .await
            .unwrap();
    }

    // 1. One worker (machine 1), the client on machine 0: one task at a time.
    let worker = start_worker(
        &network,
        &hosts[1],
        &db,
        &dir,
        "latency",
        "[\"date\", \"+%s%N\"]",
        "info,asynctask_fleet=trace",
    );
    let measured = tokio::task::block_in_place(|| {
        on_host(
            &network,
            &hosts[0],
            &db,
            |mut fleet, mut listener| async move {
                let mut rows = Vec::new();
                for n in 0..LATENCY_TASKS + 20 {
                    let id = format!("t{n:04}");
                    let launched = now_ns();
                    fleet
                        .submit(NewTask::new(id.clone(), "ws", "job", "now"))
                        .await
                        .unwrap();
                    // Woken by the end, the client takes the result.
                    let task = loop {
                        listener.recv().await.unwrap();
                        let claim = fleet.claim_results("ws", 10).await.unwrap();
                        if let Some(task) = claim.tasks().first().cloned() {
                            claim.acknowledge().await.unwrap();
                            break task;
                        }
                    };
                    let delivered = now_ns();
                    let started: i128 = task
                        .info
                        .output
                        .and_then(|o| o.final_message)
                        .unwrap()
                        .trim()
                        .parse()
                        .unwrap();
                    if n >= 20 {
                        rows.push((id, launched, started, delivered));
                    }
                }
                rows
            },
        )
    });
    drop(worker);
    let log = std::fs::read_to_string(dir.join("latency.log")).unwrap();
    let (woken, claimed) = worker_times(&log);
    let mut launch_start = Vec::new();
    let mut end_result = Vec::new();
    let (mut to_woken, mut to_claimed, mut to_spawned) = (Vec::new(), Vec::new(), Vec::new());
    for (id, launched, started, delivered) in &measured {
        launch_start.push((started - launched) as f64 / 1e6);
        end_result.push((delivered - started) as f64 / 1e6);
        let claim = claimed.iter().find(|(task, _)| task == id).unwrap().1;
        let wake = woken
            .iter()
            .copied()
            .filter(|w| *w <= claim && *w >= *launched)
            .max();
        if let Some(wake) = wake {
            to_woken.push((wake - launched) as f64 / 1e6);
            to_claimed.push((claim - wake) as f64 / 1e6);
        }
        to_spawned.push((started - claim) as f64 / 1e6);
    }
    println!("across namespaces, {LATENCY_TASKS} tasks one at a time:");
    summary("  launch -> subagent start", launch_start);
    println!(
        "  where it goes ({} tasks woken by their notification):",
        to_woken.len()
    );
    summary("    launch -> worker woken (submit, NOTIFY)", to_woken);
    summary("    woken -> claimed (the claim)", to_claimed);
    summary("    claimed -> subagent start (spawn)", to_spawned);
    summary("  completion -> result in the waiting client", end_result);

    // 2. Bulk: 10,000 queued, then 4 workers on 4 machines.
    let queued = Instant::now();
    tokio::task::block_in_place(|| {
        on_host(&network, &hosts[0], &db, |mut fleet, _| async move {
            for n in 0..BULK_TASKS {
                fleet
                    .submit(NewTask::new(format!("b{n:05}"), "bulk", "job", "x"))
                    .await
                    .unwrap();
            }
        });
    });
    println!(
        "queued {BULK_TASKS} tasks one at a time from one client in {:.1} s",
        queued.elapsed().as_secs_f64()
    );
    let server_cpu_before = server_cpu(db.server_pid().unwrap());
    let started = Instant::now();
    let workers: Vec<WorkerProcess> = (1..5)
        .map(|n| {
            start_worker(
                &network,
                &hosts[n],
                &db,
                &dir,
                &format!("bulk{n}"),
                "[\"true\"]",
                "warn",
            )
        })
        .collect();
    let admin = Fleet::connect(db.config(), FleetOptions::new())
        .await
        .unwrap();
    let (client, connection) = db.config().connect(tokio_postgres::NoTls).await.unwrap();
    let driver = tokio::spawn(connection);
    loop {
        let left: i64 = client
            .query_one(
                "SELECT count(*) FROM asynctask_tasks WHERE workspace = 'bulk' \
                 AND status IN ('queued', 'running')",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut errors: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for task in admin.tasks("bulk").await.unwrap() {
        if task.info.status != asynctask_model::AsyncTaskStatus::Completed {
            let error = task.info.error.unwrap_or_default();
            // The message without the task's own details.
            let key: String = error.chars().take(120).collect();
            *errors
                .entry(format!("{:?}: {key}", task.info.status))
                .or_default() += 1;
        }
    }
    let failed: usize = errors.values().sum();
    for (error, count) in &errors {
        println!("  not completed: {count} x {error}");
    }
    let worker_cpu: f64 = workers.iter().map(|w| process_cpu(w.0.id(), true)).sum();
    let server_cpu = server_cpu(db.server_pid().unwrap()) - server_cpu_before;
    println!(
        "{BULK_TASKS} trivial tasks through 4 workers: {elapsed:.1} s, {:.0} tasks/s ({failed} not completed); \
         CPU: workers with their subagents {worker_cpu:.1} s, server {server_cpu:.1} s, of {:.1} s on 2 cores",
        BULK_TASKS as f64 / elapsed,
        elapsed * 2.0
    );
    drop(workers);

    // 3. Idle: a worker with nothing to do, then a client waiting for ends.
    let idle_worker = start_worker(&network, &hosts[1], &db, &dir, "idle", "[\"true\"]", "warn");
    tokio::time::sleep(Duration::from_secs(12)).await;
    let idle = statements_per_second(&client).await;
    println!(
        "idle worker (default 30 s lease): {idle:.2} transactions/s over {} s",
        IDLE.as_secs()
    );
    drop(idle_worker);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let waiting = std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            on_host(
                &network,
                &hosts[0],
                &db,
                |_fleet, mut listener| async move {
                    // Waiting: connected, listening, and nothing ends.
                    let _ =
                        tokio::time::timeout(IDLE + Duration::from_secs(4), listener.recv()).await;
                },
            );
        });
        let rate = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                statements_per_second(&client).await
            })
        });
        waiter.join().unwrap();
        rate
    });
    println!(
        "idle waiting client: {waiting:.2} transactions/s over {} s",
        IDLE.as_secs()
    );
    drop(client);
    let _ = driver.await;
}

/// Transactions per second of the fleet's database over [`IDLE`], this
/// function's own two reads taken out.
async fn statements_per_second(client: &tokio_postgres::Client) -> f64 {
    let read = || async {
        client
            .query_one(
                "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database \
                 WHERE datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let before = read().await;
    tokio::time::sleep(IDLE).await;
    let after = read().await;
    (after - before - 1) as f64 / IDLE.as_secs_f64()
}

/// The worker's wake-ups on a submission, and its claims' ends by task, in
/// ns since the epoch, from its log.
fn worker_times(log: &str) -> (Vec<i128>, Vec<(String, i128)>) {
    let mut woken = Vec::new();
    let mut claimed = Vec::new();
    for line in log.lines() {
        let Some(at) = line.split_whitespace().next().and_then(parse_time) else {
            continue;
        };
        if line.contains(" woken ") && line.contains("channel=asynctask_queued") {
            woken.push(at);
        } else if let Some(rest) = line.split(" task started task=").nth(1) {
            claimed.push((rest.split_whitespace().next().unwrap().to_owned(), at));
        }
    }
    (woken, claimed)
}

/// `2026-11-25T06:01:58.767235Z` in ns since the epoch.
fn parse_time(text: &str) -> Option<i128> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut ymd = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let (hms, frac) = time.split_once('.')?;
    let mut parts = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, s) = (parts.next()??, parts.next()??, parts.next()??);
    let nanos: i64 = format!("{frac:0<9}")[..9].parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3_600 + mi * 60 + s;
    Some(i128::from(secs) * 1_000_000_000 + i128::from(nanos))
}

/// A process's CPU seconds (user and system), with its reaped children's
/// when `children`.
fn process_cpu(pid: u32, children: bool) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let fields: Vec<i64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(1)
                .map(|f| f.parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default();
    // After the state: ppid pgrp session tty tpgid flags minflt cminflt
    // majflt cmajflt utime stime cutime cstime.
    let ticks = fields.get(10).copied().unwrap_or(0)
        + fields.get(11).copied().unwrap_or(0)
        + if children {
            fields.get(12).copied().unwrap_or(0) + fields.get(13).copied().unwrap_or(0)
        } else {
            0
        };
    ticks.max(0) as f64 / 100.0
}

/// The server's CPU seconds: the postmaster with its ended children, and
/// its running backends.
fn server_cpu(postmaster: u32) -> f64 {
    let mut total = process_cpu(postmaster, true);
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(postmaster) {
            total += process_cpu(pid, false);
        }
    }
    total
}
