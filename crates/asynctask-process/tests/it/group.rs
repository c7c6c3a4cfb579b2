//! Ending the process group: on cancel (after the grace), on a dropped run, and
//! what a finished child left behind.

use std::time::{Duration, Instant};

use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
use asynctask_tools::SubagentRunner;
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use crate::{
    KillOnDrop, RUN_DEADLINE, assert_all_gone, error, output, request, run, runner_in, temp_dir,
    wait_for_pids, within,
};

/// A child whose group holds three processes: itself and two sleepers, all
/// writing their pids to `pids`.
const SLEEPERS: &str = r#"["sh", "-c", "sleep 300 & echo $! >> pids; sleep 300 & echo $! >> pids; echo $$ >> pids; wait"]"#;

#[tokio::test]
async fn cancel_ends_the_whole_process_group() {
    let dir = temp_dir("process");
    let runner = runner_in(dir.path(), "sleeper", SLEEPERS);
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move { runner.run(request("sleeper", "sleep"), cancel).await }
    });
    let pids = wait_for_pids(&dir.path().join("pids"), 3).await;

    cancel.cancel();
    // The deadline only guards against a hang; how fast is not asserted.
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(result, error("subagent 'sleeper' was cancelled"));
    assert_all_gone(&pids).await;
}

#[tokio::test]
async fn a_child_that_ignores_sigterm_is_killed_after_the_grace() {
    let dir = temp_dir("process");
    let grace = Duration::from_millis(300);
    let runner = runner_in(
        dir.path(),
        "stubborn",
        r#"["sh", "-c", "trap '' TERM; sleep 300 & echo $! >> pids; echo $$ >> pids; wait; wait"]"#,
    )
    .with_grace(grace);
    assert_eq!(runner.grace(), grace);
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move { runner.run(request("stubborn", "x"), cancel).await }
    });
    let pids = wait_for_pids(&dir.path().join("pids"), 2).await;

    let started = Instant::now();
    cancel.cancel();
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    let waited = started.elapsed();
    assert_eq!(result, error("subagent 'stubborn' was cancelled"));
    // A lower bound cannot flake: the runner waited the grace before SIGKILL.
    assert!(
        waited >= grace,
        "SIGTERM was ignored for the grace: {waited:?}"
    );
    assert_all_gone(&pids).await;
}

#[tokio::test]
async fn the_default_grace_ends_before_the_task_tool_aborts_a_runner() {
    let runner = ProcessRunner::new(ProcessRunnerConfig::default());
    assert_eq!(runner.grace(), ProcessRunner::DEFAULT_GRACE);
    assert!(ProcessRunner::DEFAULT_GRACE + Duration::from_secs(1) < Duration::from_secs(5));
}

#[tokio::test]
async fn dropping_the_run_kills_the_process_group() {
    let dir = temp_dir("process");
    let runner = runner_in(dir.path(), "sleeper", SLEEPERS);
    let mut run = Box::pin(runner.run(request("sleeper", "sleep"), CancellationToken::new()));
    let pid_file = dir.path().join("pids");
    let pids = tokio::select! {
        result = &mut run => panic!("the sleepers ended on their own: {result:?}"),
        pids = wait_for_pids(&pid_file, 3) => pids,
    };
    drop(run);
    assert_all_gone(&pids).await;
}

#[tokio::test]
async fn processes_left_behind_by_a_finished_child_are_killed() {
    let dir = temp_dir("process");
    // The sleeper keeps stdout open: the run must not wait for it.
    let runner = runner_in(
        dir.path(),
        "leaver",
        r#"["sh", "-c", "sleep 300 & echo $! >> pids; echo done"]"#,
    );
    let result = run(&runner, request("leaver", "x")).await;
    assert_eq!(result, Ok(output(Some("done"))));
    let pids = wait_for_pids(&dir.path().join("pids"), 1).await;
    assert_all_gone(&pids).await;
}

/// A child that starts a sleeper in a session of its own (out of the child's
/// process group, holding stdout open) and exits once the sleeper has left.
const ESCAPER: &str = r#"["sh", "-c", "setsid sh -c 'echo $$ >> pids; exec sleep 300' & while [ ! -s pids ]; do sleep 0.01; done; echo done"]"#;

#[tokio::test]
async fn a_process_outside_the_group_holding_stdout_does_not_hang_the_run() {
    let dir = temp_dir("process");
    let guard = KillOnDrop::default();
    // `setsid` takes the sleeper out of the group, so the group kill after the
    // child's exit misses it, and it holds stdout open for 300 s.
    let runner = runner_in(dir.path(), "escaper", ESCAPER);
    let result = run(&runner, request("escaper", "x")).await;
    let pids = wait_for_pids(&dir.path().join("pids"), 1).await;
    guard.add(&pids);
    assert_eq!(result, Ok(output(Some("done"))));
}

#[tokio::test]
async fn a_cancelled_token_starts_nothing() {
    let dir = temp_dir("process");
    let runner = runner_in(dir.path(), "never", r#"["sh", "-c", "echo $$ >> pids"]"#);
    let cancel = CancellationToken::new();
    cancel.cancel();
    let result = within(RUN_DEADLINE, runner.run(request("never", "x"), cancel)).await;
    assert_eq!(result, error("subagent 'never' was cancelled"));
    assert!(!dir.path().join("pids").exists());
}
