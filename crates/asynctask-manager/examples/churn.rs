//! The registry's churn cycle in a plain loop, for profilers: `valgrind --tool=callgrind`
//! counts each operation's instructions, `perf record` samples it.
//!
//! ```sh
//! cargo build --release -p asynctask-manager --example churn
//! valgrind --tool=callgrind target/release/examples/churn 10 20000
//! ```
//!
//! Arguments: how many other tasks run (default 10) and how many cycles
//! (default 1,000,000). Prints the mean time per cycle. Each cycle registers a
//! task, completes it, finds it by a 16-character prefix, reads the pending
//! results and marks it notified (which prunes the oldest: the history is full),
//! as `cargo bench -p asynctask-manager --bench manager -- churn` does; the inputs
//! are built before the loop.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example shows its output"
)]

use std::sync::Arc;
use std::time::Instant;

use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
use asynctask_model::{ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};

/// A well-mixed 64-bit value (splitmix64), so ids look like the random ones the
/// `task` tool makes.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn id(n: u64) -> String {
    format!("{:016x}-{n}", mix(n))
}

/// One churn cycle; not inlined, so that profiles show it as one frame.
#[inline(never)]
fn cycle(manager: &AsyncTaskManager, input: RegisterTaskInput) {
    let Ok(task) = manager.register_task(input) else {
        return;
    };
    manager.complete_task(task.id(), OutputObject::new(TerminateReason::Goal));
    let found = manager.find_by_prefix(&task.id()[..16]);
    let pending = manager.pending_notifications();
    manager.mark_notified(task.id());
    std::hint::black_box((found, pending));
}

fn main() {
    let mut args = std::env::args().skip(1);
    let held: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let cycles: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let manager =
        AsyncTaskManager::with_clock(MaxAsyncTasks::UNLIMITED, Arc::new(ManualClock::new(0)));
    for n in 0..held {
        let input = RegisterTaskInput::new(id(n), "researcher", "hold");
        if manager.register_task(input).is_err() {
            eprintln!("registration {n} was refused");
            return;
        }
    }
    // Built in batches, so that the inputs are as warm as a host's would be.
    const BATCH: u64 = 1_000;
    let mut elapsed = std::time::Duration::ZERO;
    let mut n = 1u64 << 40;
    for _ in 0..cycles.div_ceil(BATCH) {
        let inputs: Vec<RegisterTaskInput> = (0..BATCH)
            .map(|_| {
                n += 1;
                RegisterTaskInput::new(id(n), "researcher", "goal")
            })
            .collect();
        let start = Instant::now();
        for input in inputs {
            cycle(&manager, input);
        }
        elapsed += start.elapsed();
    }
    let per_cycle = elapsed.as_nanos() as f64 / (cycles.div_ceil(BATCH) * BATCH) as f64;
    eprintln!("{held} held: {per_cycle:.0} ns per cycle");
}
