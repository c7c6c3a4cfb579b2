//! Divan benchmarks of the registry: the churn cycle at 10 / 1,000 / 50,000 /
//! 100,000 tasks held, the basic lifecycle, lookups, and what a host pays to
//! build a registration's input.
//!
//! Run with `cargo bench -p asynctask-manager --bench manager`. Every timed
//! region starts from a built `RegisterTaskInput` (id, names, token): building it
//! is the host's work, measured on its own by `register_input`.

use std::sync::Arc;

use asynctask_manager::{AsyncTaskManager, PrefixMatch, RegisterTaskInput};
use asynctask_model::{ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use divan::Bencher;

fn main() {
    divan::main();
}

const HELD: &[usize] = &[10, 1_000, 50_000, 100_000];

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

/// Registration `n`'s input, as a host builds it: a random-looking id, two
/// names, a fresh cancellation token.
fn input(n: u64) -> RegisterTaskInput {
    RegisterTaskInput::new(id(n), "researcher", "goal")
}

/// An unlimited manager holding `held` running tasks.
fn manager_holding(held: usize) -> AsyncTaskManager {
    let manager =
        AsyncTaskManager::with_clock(MaxAsyncTasks::UNLIMITED, Arc::new(ManualClock::new(0)));
    for n in 0..held as u64 {
        manager
            .register_task(RegisterTaskInput::new(id(n), "researcher", "hold"))
            .expect("unique ids, unlimited");
    }
    manager
}

fn output() -> OutputObject {
    OutputObject::new(TerminateReason::Goal)
}

/// What a host pays to build one registration's input (three allocations: two
/// names and the token; the id is made outside, as everywhere here).
#[divan::bench]
fn register_input(bencher: Bencher) {
    let mut n = 1u64 << 40;
    bencher
        .with_inputs(|| {
            n += 1;
            id(n)
        })
        .bench_local_values(|id| RegisterTaskInput::new(id, "researcher", "goal"));
}

/// register + complete + mark_notified on an otherwise empty registry.
#[divan::bench(sample_size = 50)]
fn register_complete_mark(bencher: Bencher) {
    let manager = manager_holding(0);
    let mut n = 1u64 << 40;
    bencher
        .with_inputs(|| {
            n += 1;
            input(n)
        })
        .bench_local_values(|input| {
            let task = manager.register_task(input).expect("admitted");
            manager.complete_task(task.id(), output());
            manager.mark_notified(task.id())
        });
}

/// A unique-prefix lookup among `held` tasks.
#[divan::bench(args = HELD)]
fn find_by_prefix(bencher: Bencher, held: usize) {
    let manager = manager_holding(held);
    let target = id(held as u64 / 2);
    let prefix = &target[..12];
    bencher.bench_local(|| {
        let found = manager.find_by_prefix(divan::black_box(prefix));
        assert!(matches!(found, PrefixMatch::One(_)));
        found
    });
}

/// `pending_notifications` with 3 pending among `held` running tasks.
#[divan::bench(args = HELD)]
fn pending_notifications(bencher: Bencher, held: usize) {
    let manager = manager_holding(held);
    for n in 0..3u64 {
        let id = id((1 << 50) + n);
        manager
            .register_task(RegisterTaskInput::new(id.clone(), "r", "g"))
            .expect("admitted");
        manager.complete_task(&id, output());
    }
    bencher.bench_local(|| manager.pending_notifications());
}

/// register, complete, find_by_prefix, pending_notifications, mark_notified
/// (which prunes a task: the history is full) with `held` other tasks running.
/// Fifty cycles a sample: a sample of one cycle would also time the clock's
/// read and a cache the bench's own bookkeeping has just disturbed.
#[divan::bench(args = HELD, sample_size = 50)]
fn churn(bencher: Bencher, held: usize) {
    let manager = manager_holding(held);
    let mut n = 1u64 << 40;
    bencher
        .with_inputs(|| {
            n += 1;
            input(n)
        })
        .bench_local_values(|input| {
            let task = manager.register_task(input).expect("admitted");
            manager.complete_task(task.id(), output());
            let found = manager.find_by_prefix(&task.id()[..16]);
            let pending = manager.pending_notifications();
            manager.mark_notified(task.id());
            (found, pending)
        });
}
