//! The latency distribution of one journaled round (register, complete,
//! mark_notified) under each durability, and of each of its three transitions
//! (one transaction each): median, p90, p99 and max, timed one at a time
//! (divan's benchmarks give medians only).
//!
//! Run with `cargo run --release -p asynctask-store --example latency -- 20000`
//! (the argument is the number of rounds; 200 by default, to stay quick).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example shows its output"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
use asynctask_model::{ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_store::{Durability, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = match std::env::args().nth(1) {
        Some(rounds) => rounds.parse()?,
        None => 200,
    };
    println!("{rounds} rounds of register + complete + mark_notified, one at a time");
    let mut tables = Vec::new();
    for durability in [Durability::PowerLoss, Durability::ProcessCrash] {
        let dir = tempfile::tempdir()?;
        let (store, restored) = Store::open_with(dir.path().join("tasks.db"), durability)?;
        let manager = AsyncTaskManager::restore(
            MaxAsyncTasks::UNLIMITED,
            Arc::new(ManualClock::new(1_000)),
            Arc::new(store),
            restored,
        )?;
        let output = OutputObject::new(TerminateReason::Goal).with_final_message("done");
        // Warm-up: the first rounds create the WAL and prepare the statements.
        let warm_up = rounds / 10 + 10;
        // The whole round, then each transition on its own.
        let mut samples: [Vec<Duration>; 4] = Default::default();
        for n in 0..warm_up + rounds {
            let id = format!("{n:016x}");
            let started = Instant::now();
            manager.register_task(RegisterTaskInput::new(&*id, "researcher", "map the code"))?;
            let registered = Instant::now();
            manager.complete_task(&id, output.clone());
            let completed = Instant::now();
            manager.mark_notified(&id);
            let marked = Instant::now();
            if n >= warm_up {
                samples[0].push(marked - started);
                samples[1].push(registered - started);
                samples[2].push(completed - registered);
                samples[3].push(marked - completed);
            }
        }
        tables.push((durability, samples));
    }
    let names = [
        "round (3 transactions)",
        "register_task",
        "complete_task",
        "mark_notified (+ pruning one)",
    ];
    println!("| durability | what | median | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    for (durability, samples) in &mut tables {
        for (name, samples) in names.iter().zip(samples.iter_mut()) {
            samples.sort_unstable();
            let at = |q: f64| {
                let index =
                    ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
                samples.get(index).copied().unwrap_or(Duration::ZERO)
            };
            println!(
                "| {durability:?} | {name} | {:.1?} | {:.1?} | {:.1?} | {:.1?} |",
                at(0.5),
                at(0.9),
                at(0.99),
                samples.last().copied().unwrap_or(Duration::ZERO),
            );
        }
    }
    Ok(())
}
