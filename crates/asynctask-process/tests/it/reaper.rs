//! The reaper, and a killed host: no process of a subagent outlives its task,
//! nor its host.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use asynctask_process::ProcessRunner;
use asynctask_tools::SubagentRunner;
use nix::unistd::Pid;
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use crate::{
    KillOnDrop, RUN_DEADLINE, assert_all_gone, assert_gone_within, error, output, request, run,
    runner, runner_in, temp_dir, wait_for_pids, within,
};

/// The reaper binary of this crate.
#[cfg(target_os = "linux")]
const REAPER: &str = env!("CARGO_BIN_EXE_asynctask-reaper");

#[cfg(target_os = "linux")]
fn reaped(runner: ProcessRunner) -> ProcessRunner {
    runner.with_reaper(PathBuf::from(REAPER), Vec::new())
}

/// A subagent whose processes try every way out: a plain sleeper, one
/// orphaned by a double fork (its parent subshell exits at once), and one in a
/// session of its own (`setsid`, out of the process group). `pids` gets the
/// plain and the orphaned sleeper, then the shell's parent (the reaper, or the
/// host), then the shell; `escaped` gets the `setsid` sleeper. Then it waits
/// for its children.
const TREE: &str = r#"["sh", "-c", "sleep 1000 & echo $! >> pids; (sleep 1000 & echo $! >> pids); setsid sh -c 'echo $$ > escaped; exec sleep 1000' & while [ ! -s escaped ]; do sleep 0.01; done; echo $PPID >> pids; echo $$ >> pids; wait"]"#;

/// [`TREE`], but the shell exits at once, leaving its three sleepers.
const TREE_EXITS: &str = r#"["sh", "-c", "sleep 1000 & echo $! >> pids; (sleep 1000 & echo $! >> pids); setsid sh -c 'echo $$ > escaped; exec sleep 1000' & while [ ! -s escaped ]; do sleep 0.01; done; echo $PPID >> pids; echo $$ >> pids; echo done"]"#;

/// Every pid a [`TREE`] in `dir` wrote (all of them are also given to
/// `guard`, so the test kills them whatever happens).
#[cfg(target_os = "linux")]
async fn tree_pids(dir: &Path, guard: &KillOnDrop) -> Vec<Pid> {
    let mut pids = wait_for_pids(&dir.join("pids"), 4).await;
    pids.extend(wait_for_pids(&dir.join("escaped"), 1).await);
    guard.add(&pids);
    pids
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn with_the_reaper_no_descendant_outlives_a_task_that_ended() {
    let dir = temp_dir("process");
    let guard = KillOnDrop::default();
    let runner = reaped(runner_in(dir.path(), "tree", TREE_EXITS));
    assert!(runner.uses_reaper());
    let result = run(&runner, request("tree", "x")).await;
    let pids = tree_pids(dir.path(), &guard).await;
    assert_eq!(result, Ok(output(Some("done"))));
    assert_all_gone(&pids).await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn with_the_reaper_no_descendant_outlives_a_cancelled_task() {
    let dir = temp_dir("process");
    let guard = KillOnDrop::default();
    let runner = reaped(runner_in(dir.path(), "tree", TREE));
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move { runner.run(request("tree", "x"), cancel).await }
    });
    let pids = tree_pids(dir.path(), &guard).await;
    cancel.cancel();
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(result, error("subagent 'tree' was cancelled"));
    assert_all_gone(&pids).await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn with_the_reaper_a_dropped_run_leaves_nothing_behind() {
    let dir = temp_dir("process");
    let guard = KillOnDrop::default();
    let runner = reaped(runner_in(dir.path(), "tree", TREE));
    let mut run = Box::pin(runner.run(request("tree", "x"), CancellationToken::new()));
    let pids = tokio::select! {
        result = &mut run => panic!("the tree ended on its own: {result:?}"),
        pids = tree_pids(dir.path(), &guard) => pids,
    };
    drop(run);
    assert_all_gone(&pids).await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_reaper_ends_as_its_command_did() {
    let dir = temp_dir("process");
    let cases = [
        (r#"["sh", "-c", "echo fine"]"#, Ok(output(Some("fine")))),
        (
            r#"["sh", "-c", "echo broken >&2; exit 3"]"#,
            error("subagent 'x' exited with status 3: broken"),
        ),
        (
            r#"["sh", "-c", "kill -9 $$"]"#,
            error("subagent 'x' was killed by signal 9 (SIGKILL)"),
        ),
        (
            r#"["sh", "-c", "kill -TERM $$"]"#,
            error("subagent 'x' was killed by signal 15 (SIGTERM)"),
        ),
        (
            r#"["asynctask-no-such-program"]"#,
            error(
                "subagent 'x' exited with status 127: asynctask-reaper: cannot start \
                 'asynctask-no-such-program': No such file or directory (os error 2)",
            ),
        ),
    ];
    for (command, expected) in cases {
        let runner = reaped(runner_in(dir.path(), "x", command));
        assert_eq!(
            run(&runner, request("x", "goal")).await,
            expected,
            "{command}"
        );
    }
    // stdin still reaches the command through the reaper.
    let runner = reaped(runner_in(dir.path(), "cat", r#"["cat"]"#));
    assert_eq!(
        run(&runner, request("cat", "the goal")).await,
        Ok(output(Some("the goal")))
    );
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn terminate_all_ends_every_live_subagent_of_the_runner_and_its_clones_at_once() {
    for with_reaper in [true, false] {
        let dir = temp_dir("process");
        let guard = KillOnDrop::default();
        for name in ["a", "b"] {
            std::fs::create_dir(dir.path().join(name)).expect("mkdir");
        }
        let toml = format!(
            "[subagents.a]\ncommand = {TREE}\ncwd = \"a\"\n[subagents.b]\ncommand = {TREE}\ncwd = \"b\"\n"
        );
        let mut runner = runner(&toml, dir.path());
        if with_reaper {
            runner = reaped(runner);
        }
        let clone = runner.clone();
        let first = tokio::spawn({
            let runner = runner.clone();
            async move {
                runner
                    .run(request("a", "x"), CancellationToken::new())
                    .await
            }
        });
        let second =
            tokio::spawn(
                async move { clone.run(request("b", "x"), CancellationToken::new()).await },
            );
        let mut pids = tree_pids(&dir.path().join("a"), &guard).await;
        pids.extend(tree_pids(&dir.path().join("b"), &guard).await);

        let started = Instant::now();
        assert_eq!(runner.terminate_all(), 2);
        // It only sends signals; the bound is wide, against a hang.
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        for run in [first, second] {
            let result = within(RUN_DEADLINE, run).await.expect("no panic");
            assert!(result.is_err(), "{result:?}");
        }
        if with_reaper {
            assert_all_gone(&pids).await;
        } else {
            // Without the reaper the group is killed; the `setsid` sleeper
            // (the last of each tree) is out of it: the guard ends it.
            let in_group: Vec<Pid> = pids
                .iter()
                .enumerate()
                .filter(|&(at, _)| at % 5 != 2 && at % 5 != 4)
                .map(|(_, &pid)| pid)
                .collect();
            assert_all_gone(&in_group).await;
        }
        assert_eq!(runner.terminate_all(), 0, "nothing is live any more");
    }
}

/// Names the directory of a fake host's subagent (see
/// [`not_a_test_fake_host_body`]).
#[cfg(target_os = "linux")]
const FAKE_HOST_DIR: &str = "ASYNCTASK_TEST_FAKE_HOST_DIR";

/// Set when the fake host runs its subagent through the reaper.
#[cfg(target_os = "linux")]
const FAKE_HOST_REAPER: &str = "ASYNCTASK_TEST_FAKE_HOST_REAPER";

/// The body of a fake host, not a test of its own — a re-exec harness. The
/// tests that kill a host ([`FakeHost`]) run this test binary again, filtered
/// to this one function, with [`FAKE_HOST_DIR`] set; it then runs [`TREE`]
/// through a `ProcessRunner` (from a tokio worker thread, as a host does)
/// until it is killed. It has to be a `#[test]` for the test harness to run
/// it in a process of its own. Run without the variable, as part of the
/// suite, it returns at once and checks nothing: its "pass" in the suite's
/// report means nothing (its name says so).
#[cfg(target_os = "linux")]
#[test]
fn not_a_test_fake_host_body() {
    let Some(dir) = std::env::var_os(FAKE_HOST_DIR) else {
        return;
    };
    // Not the default temporary output directory: a killed host cannot remove
    // it, while the test removes its own directory.
    let mut runner =
        runner_in(Path::new(&dir), "tree", TREE).with_output_dir(Path::new(&dir).join("out"));
    if std::env::var_os(FAKE_HOST_REAPER).is_some() {
        runner = reaped(runner);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let result = runtime.block_on(async move {
        tokio::spawn(async move {
            runner
                .run(request("tree", "x"), CancellationToken::new())
                .await
        })
        .await
    });
    panic!("the fake host's subagent ended before the host was killed: {result:?}");
}

/// A fake host process ([`not_a_test_fake_host_body`]), killed and reaped
/// when dropped.
#[cfg(target_os = "linux")]
struct FakeHost(std::process::Child);

#[cfg(target_os = "linux")]
impl FakeHost {
    fn start(dir: &Path, with_reaper: bool) -> Self {
        let mut command =
            std::process::Command::new(std::env::current_exe().expect("the test binary"));
        command
            .args([
                "reaper::not_a_test_fake_host_body",
                "--exact",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(FAKE_HOST_DIR, dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        if with_reaper {
            command.env(FAKE_HOST_REAPER, "1");
        } else {
            command.env_remove(FAKE_HOST_REAPER);
        }
        FakeHost(command.spawn().expect("start the fake host"))
    }

    /// `SIGKILL`: the host runs no code of its own after this.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(target_os = "linux")]
impl Drop for FakeHost {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until every pid is gone, failing the test after `deadline`.
#[cfg(target_os = "linux")]
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_host_killed_with_sigkill_leaves_no_subagent_process_behind() {
    let dir = temp_dir("process");
    let guard = KillOnDrop::default();
    let mut host = FakeHost::start(dir.path(), true);
    let pids = tree_pids(dir.path(), &guard).await;
    host.kill();
    // The reaper's parent-death signal ends the tree; 2 s is the promise.
    assert_gone_within(Duration::from_secs(2), &pids).await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn without_the_reaper_a_killed_host_still_takes_its_direct_child() {
    let dir = temp_dir("process");
    let guard = KillOnDrop::default();
    let mut host = FakeHost::start(dir.path(), false);
    let pids = tree_pids(dir.path(), &guard).await;
    host.kill();
    // The direct child (the shell, the fourth pid) has the parent-death
    // signal; its sleepers do not (the guard ends them).
    assert_gone_within(Duration::from_secs(2), &pids[3..4]).await;
}
