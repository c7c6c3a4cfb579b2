//! Latency from `complete_task` to the host's `trigger_agent_turn` call, on the
//! multi-thread tokio runtime (2 workers), idle agent, one task at a time.
//!
//! Run with `cargo bench -p asynctask-runtime --bench delivery`; prints the
//! median, p90, p99 and max over 20,000 deliveries (after 1,000 warm-up ones).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark reports what it measured"
)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use asynctask_manager::RegisterTaskInput;
use asynctask_model::{MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_runtime::{AgentHost, AsyncTaskRuntime, Reminder, TriggerError};
use tokio::sync::mpsc;

const WARM_UP: usize = 1_000;
const SAMPLES: usize = 20_000;

/// Sends the instant each turn was triggered.
struct TimingHost {
    sender: Mutex<mpsc::UnboundedSender<Instant>>,
}

#[async_trait::async_trait]
impl AgentHost for TimingHost {
    fn is_agent_busy(&self) -> bool {
        false
    }

    async fn trigger_agent_turn(&self, _reminder: Reminder) -> Result<(), TriggerError> {
        let now = Instant::now();
        let sender = self
            .sender
            .lock()
            .map_err(|_| TriggerError::new("poisoned"))?;
        sender
            .send(now)
            .map_err(|_| TriggerError::new("bench ended"))
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut latencies = runtime.block_on(measure());
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q) as usize];
    println!(
        "complete_task -> trigger_agent_turn over {SAMPLES} deliveries (multi-thread runtime, 2 workers):"
    );
    println!("  median {:>10.1?}", at(0.5));
    println!("  p90    {:>10.1?}", at(0.9));
    println!("  p99    {:>10.1?}", at(0.99));
    println!("  max    {:>10.1?}", at(1.0));
}

async fn measure() -> Vec<Duration> {
    let (sender, mut receiver) = mpsc::unbounded_channel();
    let host = Arc::new(TimingHost {
        sender: Mutex::new(sender),
    });
    let runtime = AsyncTaskRuntime::builder()
        .max_async_tasks(MaxAsyncTasks::UNLIMITED)
        .host(host)
        .build();
    let manager = runtime.manager().clone();
    let mut latencies = Vec::with_capacity(SAMPLES);
    for i in 0..WARM_UP + SAMPLES {
        let id = format!("{i:08x}-bench");
        manager
            .register_task(RegisterTaskInput::new(id.clone(), "bench", "measure"))
            .expect("unlimited");
        // Completed from a plain thread, as a runner on another executor would.
        let completer = manager.clone();
        let started = std::thread::spawn(move || {
            let started = Instant::now();
            completer.complete_task(&id, OutputObject::new(TerminateReason::Goal));
            started
        })
        .join()
        .expect("completer thread");
        let triggered = receiver.recv().await.expect("the host is called");
        if i >= WARM_UP {
            latencies.push(triggered.saturating_duration_since(started));
        }
        // Let the delivery loop finish its re-check before the next sample.
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    runtime.shutdown().await;
    latencies
}
