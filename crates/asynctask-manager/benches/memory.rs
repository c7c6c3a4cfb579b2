//! Heap bytes the registry keeps per task, measured with a counting allocator.
//!
//! Run with `cargo bench -p asynctask-manager --bench memory`. Prints, for running
//! and for finished-but-undelivered tasks, the bytes retained per task besides the
//! task's own strings (id, subagent name, goal, error, output values).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark reports what it measured"
)]

use std::alloc::System;
use std::sync::Arc;

use asynctask_manager::CancellationToken;
use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
use asynctask_model::{ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const TASKS: usize = 100_000;

fn main() {
    // Warm up lazily-initialised statics (tracing callsites and the like).
    measure(10, false);
    println!("bytes retained per task besides its strings ({TASKS} tasks held):");
    let running = measure(TASKS, false);
    let token = token_bytes(TASKS);
    println!("  running:                 {running:.1}");
    println!("    of which its CancellationToken (made by the host): {token:.1}");
    let finished = measure(TASKS, true);
    println!("  completed, not notified: {finished:.1}");
}

/// Registers `count` tasks (completing them when `finish`), returning the heap
/// bytes retained per task minus the bytes of the strings the task carries.
fn measure(count: usize, finish: bool) -> f64 {
    let manager =
        AsyncTaskManager::with_clock(MaxAsyncTasks::UNLIMITED, Arc::new(ManualClock::new(0)));
    let mut string_bytes = 0usize;
    let region = Region::new(GLOBAL);
    for n in 0..count {
        let id = format!("{n:016x}");
        string_bytes += id.len() + "researcher".len() + "find the flaky test".len();
        let input = RegisterTaskInput::new(
            id,
            String::from("researcher"),
            String::from("find the flaky test"),
        );
        let task = manager.register_task(input).expect("unlimited");
        if finish {
            manager.complete_task(task.id(), OutputObject::new(TerminateReason::Goal));
        }
    }
    let retained = retained(&region);
    std::hint::black_box(&manager);
    (retained as f64 - string_bytes as f64) / count as f64
}

/// Heap bytes of one fresh `CancellationToken`, the one thing a running task holds
/// that the host made.
fn token_bytes(count: usize) -> f64 {
    let region = Region::new(GLOBAL);
    let tokens: Vec<CancellationToken> = (0..count).map(|_| CancellationToken::new()).collect();
    let vec_bytes = tokens.capacity() * std::mem::size_of::<CancellationToken>();
    let retained = retained(&region);
    std::hint::black_box(&tokens);
    (retained as f64 - vec_bytes as f64) / count as f64
}

/// Heap bytes allocated and not freed since `region` began. A `realloc`'s
/// growth (or shrinking) is already in `bytes_allocated` (or
/// `bytes_deallocated`); `bytes_reallocated` repeats it, so it is not added.
fn retained(region: &Region<'_, System>) -> isize {
    let stats = region.change();
    stats.bytes_allocated as isize - stats.bytes_deallocated as isize
}
