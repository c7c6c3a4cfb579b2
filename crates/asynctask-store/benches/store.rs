//! Divan benchmarks of the SQLite store: one journaled round (register,
//! complete, mark_notified: three transactions, the last one also pruning) and
//! one journaled transition (a completion) under each durability, and recovery — open + restore — of 10,000 stored tasks.
//!
//! Run with `cargo bench -p asynctask-store --bench store`. Divan reports
//! medians; the round's p99 comes from `examples/latency.rs`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use asynctask_manager::{
    AsyncTaskManager, Journal, JournalEntry, RegisterTaskInput, TerminalOutcome,
};
use asynctask_model::{ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_store::{Durability, Store};
use divan::Bencher;

fn main() {
    divan::main();
}

fn output() -> OutputObject {
    OutputObject::new(TerminateReason::Goal)
        .with_var("files", "src/lib.rs, src/store.rs")
        .with_var("verdict", "ok")
        .with_final_message("Mapped the three modules; the store is the only one with I/O.")
}

/// A manager without limit journaled to a new store in `dir`.
fn journaled(dir: &std::path::Path, durability: Durability) -> AsyncTaskManager {
    let (store, _) = Store::open_with(dir.join("tasks.db"), durability).expect("a new store");
    AsyncTaskManager::restore(
        MaxAsyncTasks::UNLIMITED,
        Arc::new(ManualClock::new(1_000)),
        Arc::new(store),
        Vec::new(),
    )
    .expect("an empty restore")
}

/// register + complete + mark_notified with the store as the journal (the
/// history, 10 unlimited, is full: each mark also prunes one task).
fn round(bencher: Bencher, durability: Durability) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let manager = journaled(dir.path(), durability);
    let mut n = 0u64;
    bencher
        .with_inputs(|| {
            n += 1;
            format!("{n:016x}")
        })
        .bench_local_values(|id| {
            manager
                .register_task(RegisterTaskInput::new(
                    id.clone(),
                    "researcher",
                    "map the code",
                ))
                .expect("admitted");
            manager.complete_task(&id, output());
            manager.mark_notified(&id)
        });
}

/// One round, `synchronous = FULL` (the default).
#[divan::bench]
fn round_power_loss(bencher: Bencher) {
    round(bencher, Durability::PowerLoss);
}

/// One round, `synchronous = NORMAL`.
#[divan::bench]
fn round_process_crash(bencher: Bencher) {
    round(bencher, Durability::ProcessCrash);
}

/// One journaled transition: `complete_task` of a task registered untimed (one
/// transaction; results are never marked delivered, so nothing is pruned).
fn transition(bencher: Bencher, durability: Durability) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let manager = journaled(dir.path(), durability);
    let mut n = 0u64;
    bencher
        .with_inputs(|| {
            n += 1;
            let id = format!("{n:016x}");
            manager
                .register_task(RegisterTaskInput::new(
                    id.clone(),
                    "researcher",
                    "map the code",
                ))
                .expect("admitted");
            id
        })
        .bench_local_values(|id| manager.complete_task(&id, output()));
}

/// One transition, `synchronous = FULL` (the default).
#[divan::bench]
fn transition_power_loss(bencher: Bencher) {
    transition(bencher, Durability::PowerLoss);
}

/// One transition, `synchronous = NORMAL`.
#[divan::bench]
fn transition_process_crash(bencher: Bencher) {
    transition(bencher, Durability::ProcessCrash);
}

const TASKS: usize = 10_000;

/// A store holding 10,000 tasks, built once: `finished` ones are completed and
/// not yet delivered (kept as they are by a restore); the others are running,
/// so a restore fails each as interrupted and journals it.
fn fixture(finished: bool) -> &'static Path {
    static FINISHED: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    static RUNNING: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let cell = if finished { &FINISHED } else { &RUNNING };
    let (_, path) = cell.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("tasks.db");
        let (store, _) = Store::open(&path).expect("a new store");
        let ids: Vec<String> = (0..TASKS).map(|n| format!("{n:016x}-{n}")).collect();
        let output = output();
        let mut entries = Vec::new();
        for (n, id) in (0u64..).zip(&ids) {
            entries.push(JournalEntry::Registered {
                id,
                subagent_name: "researcher",
                goal_prompt: "map the code and report what each module does",
                launched_at: 1_000 + n,
                origin: None,
                queued: false,
                launch: None,
            });
            if finished {
                entries.push(JournalEntry::Finished {
                    id,
                    outcome: TerminalOutcome::Completed(&output),
                    completed_at: 2_000 + n,
                    finish_order: n + 1,
                    usage: None,
                });
            }
        }
        store.record(&entries).expect("the fixture is written");
        drop(store);
        (dir, path)
    });
    path
}

/// A fresh copy of a fixture (each restore of running tasks changes its store).
fn copy_of(fixture: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("tasks.db");
    std::fs::copy(fixture, &path).expect("the fixture copies");
    (dir, path)
}

fn recover(path: &Path) -> AsyncTaskManager {
    let (store, restored) = Store::open(path).expect("the store opens");
    AsyncTaskManager::restore(
        MaxAsyncTasks::UNLIMITED,
        Arc::new(ManualClock::new(1_000_000)),
        Arc::new(store),
        restored,
    )
    .expect("the store holds a registry")
}

/// Open + restore of 10,000 finished, undelivered tasks (nothing to write).
#[divan::bench(sample_count = 20)]
fn recover_10k_finished(bencher: Bencher) {
    let fixture = fixture(true);
    bencher
        .with_inputs(|| copy_of(fixture))
        .bench_local_values(|(dir, path)| (recover(&path), dir));
}

/// Open + restore of 10,000 running tasks, each failed as interrupted and
/// journaled (one transaction).
#[divan::bench(sample_count = 20)]
fn recover_10k_running(bencher: Bencher) {
    let fixture = fixture(false);
    bencher
        .with_inputs(|| copy_of(fixture))
        .bench_local_values(|(dir, path)| (recover(&path), dir));
}
