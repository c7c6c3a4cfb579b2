//! `ProcessRunner` with real child processes, one module per concern: running,
//! messages over stdin, variables, failures, ending the process group, the
//! reaper and a killed host, bounded output, the config, and what the output
//! directory keeps. The helpers they share are here.
//!
//! These tests run real programs (`sh`, `sleep`, `env`, `yes`, `head`, ...), so
//! they use real time; every wait polls with a short interval up to a deadline.
//! Every process a test starts outside the runner's care is killed by a drop
//! guard, by pid, even when the test fails.

#![cfg(unix)]

mod bounded_output;
mod config;
mod failures;
mod group;
mod kept_files;
mod messages;
mod reaper;
mod running;
mod usage;
mod variables;
#[cfg(target_os = "linux")]
mod warm;

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use asynctask_model::{OutputObject, TerminateReason};
use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner};
use nix::sys::signal::kill;
use nix::unistd::Pid;
use tokio_util::sync::CancellationToken;

/// The most any single run in these tests may take before the test fails.
const RUN_DEADLINE: Duration = Duration::from_secs(10);

/// How long killed processes may take to disappear.
const GONE_DEADLINE: Duration = Duration::from_secs(3);

pub(crate) use asynctask_test_support::temp_dir;

fn runner(toml: &str, base_dir: &Path) -> ProcessRunner {
    ProcessRunner::new(ProcessRunnerConfig::from_toml_str(toml, base_dir).expect("valid config"))
}

/// One subagent `name` running `command` (a TOML array) in `dir`.
fn runner_in(dir: &Path, name: &str, command: &str) -> ProcessRunner {
    runner(
        &format!("[subagents.{name}]\ncommand = {command}\ncwd = \".\"\n"),
        dir,
    )
}

fn request(name: &str, goal: &str) -> SubagentRequest {
    SubagentRequest::new("task-0001", name, goal)
        .with_timeout(Duration::from_secs(60))
        .with_run_async(true)
}

fn output(final_message: Option<&str>) -> OutputObject {
    let mut output = OutputObject::new(TerminateReason::Goal);
    output.final_message = final_message.map(str::to_owned);
    output
}

/// Runs to the end (or fails the test after [`RUN_DEADLINE`]).
async fn run(
    runner: &ProcessRunner,
    request: SubagentRequest,
) -> Result<OutputObject, SubagentError> {
    within(RUN_DEADLINE, runner.run(request, CancellationToken::new())).await
}

async fn within<T>(deadline: Duration, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(deadline, future)
        .await
        .expect("finished in time")
}

/// The pids written to `file`, one per line, once there are `count` of them.
async fn wait_for_pids(file: &Path, count: usize) -> Vec<Pid> {
    let what = format!("{count} pids written to {}", file.display());
    asynctask_test_support::eventually_some(&what, RUN_DEADLINE, || {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        // Only whole lines: the writer may be mid-line.
        let pids: Vec<Pid> = text
            .split_inclusive('\n')
            .filter(|line| line.ends_with('\n'))
            .filter_map(|line| line.trim().parse().ok())
            .map(Pid::from_raw)
            .collect();
        (pids.len() >= count).then_some(pids)
    })
    .await
}

/// Whether `pid` is gone: no such process, or a zombie (dead, waiting to be
/// reaped by a parent that is not us).
fn is_gone(pid: Pid) -> bool {
    asynctask_test_support::process_gone(pid.as_raw().unsigned_abs())
}

async fn assert_all_gone(pids: &[Pid]) {
    assert_gone_within(GONE_DEADLINE, pids).await;
}

async fn assert_gone_within(within: Duration, pids: &[Pid]) {
    let pids: Vec<u32> = pids.iter().map(|pid| pid.as_raw().unsigned_abs()).collect();
    asynctask_test_support::assert_gone_async(&pids, within).await;
}

/// Kills the pids it was given when dropped, so a failing test leaves nothing
/// running. Only pids a test's own children wrote are ever put here.
#[derive(Default)]
struct KillOnDrop(std::sync::Mutex<Vec<Pid>>);

impl KillOnDrop {
    /// Takes `pids`, but never this test process itself (a child's parent
    /// may be us).
    fn add(&self, pids: &[Pid]) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(pids.iter().copied().filter(|&pid| pid != Pid::this()));
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let pids = self
            .0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for &pid in pids.iter() {
            if !is_gone(pid) {
                let _ = kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

fn error(message: &str) -> Result<OutputObject, SubagentError> {
    Err(SubagentError::new(message))
}
