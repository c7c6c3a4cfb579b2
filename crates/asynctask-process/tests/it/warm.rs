//! The warm reaper: a runner with a reaper starts the next one ahead of time
//! and hands it the next subagent's command; every promise of the reaper holds
//! for a command started that way.

use std::path::{Path, PathBuf};
use std::time::Duration;

use asynctask_process::ProcessRunner;
use asynctask_test_support::eventually_some;
use asynctask_tools::SubagentRunner;
use nix::unistd::Pid;
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use crate::{
    KillOnDrop, RUN_DEADLINE, assert_all_gone, assert_gone_within, error, output, request, run,
    runner, temp_dir, wait_for_pids, within,
};

/// The reaper binary of this crate.
const REAPER: &str = env!("CARGO_BIN_EXE_asynctask-reaper");

fn reaped(runner: ProcessRunner) -> ProcessRunner {
    runner.with_reaper(PathBuf::from(REAPER), Vec::new())
}

/// The warm reapers `parent` started and that still run.
fn warm_reapers_of(parent: Pid) -> Vec<Pid> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let pid = Pid::from_raw(pid);
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let ppid = fields
            .next()
            .and_then(|p| p.parse().ok())
            .map(Pid::from_raw);
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(parent)
            && state != "Z"
            && cmdline.split(|&b| b == 0).any(|arg| arg == b"--warm")
        {
            found.push(pid);
        }
    }
    found
}

/// The one warm reaper of this test process other than `not`, once it runs.
async fn warm_reaper(not: Option<Pid>) -> Pid {
    eventually_some("a warm reaper runs", RUN_DEADLINE, || {
        let found: Vec<Pid> = warm_reapers_of(Pid::this())
            .into_iter()
            .filter(|&pid| Some(pid) != not)
            .collect();
        (found.len() == 1).then(|| found[0])
    })
    .await
}

/// Subagents that print their parent's pid (the reaper's) first: `show` also
/// its working directory, two variables and its stdin; `fail` exits with 3;
/// `killed` dies of `SIGTERM`; `elsewhere` has a `PATH` of its own; `missing`
/// cannot start.
const SUBAGENTS: &str = r#"
[subagents.show]
command = ["sh", "-c", "echo $PPID; pwd -P; echo $ASYNCTASK_TASK_ID $GREETING; cat"]
cwd = "sub"
env = { GREETING = "hello" }
[subagents.fail]
command = ["sh", "-c", "echo $PPID >&2; exit 3"]
[subagents.killed]
command = ["sh", "-c", "echo $PPID >&2; kill -TERM $$"]
[subagents.elsewhere]
command = ["sh", "-c", "echo $PPID; echo $PATH"]
env = { PATH = "/asynctask-nowhere:/usr/bin:/bin" }
[subagents.missing]
command = ["asynctask-no-such-program"]
env = { PATH = "/asynctask-nowhere:/usr/bin:/bin" }
"#;

#[tokio::test]
async fn a_warm_reaper_runs_the_command_with_its_env_cwd_stdin_and_exit_status() {
    let dir = temp_dir("process");
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    let sub = std::fs::canonicalize(dir.path().join("sub")).expect("canonical");
    let runner = reaped(runner(SUBAGENTS, dir.path()));
    runner.warm_up();
    let warm = warm_reaper(None).await;

    let result = run(&runner, request("show", "the goal")).await;
    let expected = format!("{warm}\n{}\ntask-0001 hello\nthe goal", sub.display());
    assert_eq!(result, Ok(output(Some(&expected))));

    // Each run hands its command to the reaper waiting, and starts the next.
    let warm = warm_reaper(Some(warm)).await;
    assert_eq!(
        run(&runner, request("fail", "x")).await,
        error(&format!("subagent 'fail' exited with status 3: {warm}"))
    );
    let warm = warm_reaper(Some(warm)).await;
    assert_eq!(
        run(&runner, request("killed", "x")).await,
        error(&format!(
            "subagent 'killed' was killed by signal 15 (SIGTERM): {warm}"
        ))
    );
    // A `PATH` other than the host's: the reaper looks the program up in it.
    let warm = warm_reaper(Some(warm)).await;
    let expected = format!("{warm}\n/asynctask-nowhere:/usr/bin:/bin");
    assert_eq!(
        run(&runner, request("elsewhere", "x")).await,
        Ok(output(Some(&expected)))
    );
    warm_reaper(Some(warm)).await;
    assert_eq!(
        run(&runner, request("missing", "x")).await,
        error(
            "subagent 'missing' exited with status 127: asynctask-reaper: cannot start \
             'asynctask-no-such-program': No such file or directory (os error 2)"
        )
    );
}

#[tokio::test]
async fn a_warm_reaper_whose_starting_thread_ended_is_not_used() {
    let dir = temp_dir("process");
    let runner = reaped(runner(SUBAGENTS, dir.path()));
    // Linux sends the parent-death signal when the thread that started a
    // child ends: once this thread ends, its reaper has had it, and would
    // kill its command. The thread ends only once the reaper waits for its
    // command (it asked for the signal before).
    let runtime = tokio::runtime::Handle::current();
    let stale = std::thread::spawn({
        let runner = runner.clone();
        move || {
            let _in_the_runtime = runtime.enter();
            runner.warm_up();
            let pid = warm_reapers_of(Pid::this())[0];
            let wchan = Path::new("/proc").join(pid.to_string()).join("wchan");
            asynctask_test_support::eventually("the reaper waits", RUN_DEADLINE, || {
                std::fs::read_to_string(&wchan).is_ok_and(|at| at.contains("pipe"))
            });
            pid
        }
    })
    .join()
    .expect("no panic");
    // `SIGUSR1` (bit 10 of the mask) is pending: the reaper's signals wait
    // for its `sigwait`.
    let status = Path::new("/proc").join(stale.to_string()).join("status");
    eventually_some("the parent-death signal is pending", RUN_DEADLINE, || {
        let text = std::fs::read_to_string(&status).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                line.strip_prefix("ShdPnd:")
                    .or_else(|| line.strip_prefix("SigPnd:"))
            })
            .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .any(|mask| mask & (1 << 9) != 0)
            .then_some(())
    })
    .await;
    let result = run(&runner, request("elsewhere", "x")).await;
    let message = result
        .expect("the command ran")
        .final_message
        .expect("a message");
    let reaper = message.lines().next().expect("the reaper's pid");
    assert_ne!(reaper, stale.to_string(), "not the stale warm reaper");
}

/// [`TREE`](super::reaper) as there: `pids` gets two sleepers, the reaper's
/// pid, the shell's; `escaped` a sleeper in a session of its own.
const TREE: &str = r#"["sh", "-c", "sleep 1000 & echo $! >> pids; (sleep 1000 & echo $! >> pids); setsid sh -c 'echo $$ > escaped; exec sleep 1000' & while [ ! -s escaped ]; do sleep 0.01; done; echo $PPID >> pids; echo $$ >> pids; wait"]"#;

async fn tree_pids(dir: &Path, guard: &KillOnDrop) -> Vec<Pid> {
    let mut pids = wait_for_pids(&dir.join("pids"), 4).await;
    pids.extend(wait_for_pids(&dir.join("escaped"), 1).await);
    guard.add(&pids);
    pids
}

fn tree_runner(dir: &Path) -> ProcessRunner {
    reaped(runner(
        &format!("[subagents.tree]\ncommand = {TREE}\ncwd = \".\"\n"),
        dir,
    ))
}

#[tokio::test]
async fn a_cancelled_warm_started_command_leaves_no_descendant() {
    let dir = temp_dir("process");
    let guard = KillOnDrop::default();
    let runner = tree_runner(dir.path());
    runner.warm_up();
    let warm = warm_reaper(None).await;
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move { runner.run(request("tree", "x"), cancel).await }
    });
    let pids = tree_pids(dir.path(), &guard).await;
    assert_eq!(pids[2], warm, "the command runs under the warm reaper");
    cancel.cancel();
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(result, error("subagent 'tree' was cancelled"));
    assert_all_gone(&pids).await;
}

#[tokio::test]
async fn a_runner_dropped_with_an_unused_warm_reaper_leaves_no_process() {
    let dir = temp_dir("process");
    let runner = tree_runner(dir.path());
    runner.warm_up();
    let clone = runner.clone();
    let warm = warm_reaper(None).await;
    clone.warm_up();
    drop(runner);
    assert_eq!(
        warm_reapers_of(Pid::this()),
        [warm],
        "one, shared by clones"
    );
    drop(clone);
    // Gone and reaped: not even a zombie is left.
    eventually_some("the warm reaper is reaped", RUN_DEADLINE, || {
        (!Path::new("/proc").join(warm.to_string()).exists()).then_some(())
    })
    .await;
}

/// Names the directory of a fake host (see [`not_a_test_warm_host_body`]).
const WARM_HOST_DIR: &str = "ASYNCTASK_TEST_WARM_HOST_DIR";

/// The body of a fake host, not a test of its own — a re-exec harness, as in
/// the reaper's tests: run with [`WARM_HOST_DIR`] set, it warms its runner
/// up, writes the warm reaper's pid to `warm`, runs [`TREE`] in it until it
/// is killed. Run without the variable, as part of the suite, it returns at
/// once and checks nothing: its "pass" in the suite's report means nothing.
#[test]
fn not_a_test_warm_host_body() {
    let Some(dir) = std::env::var_os(WARM_HOST_DIR) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let runner = tree_runner(&dir).with_output_dir(dir.join("out"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let result = runtime.block_on(async move {
        runner.warm_up();
        let warm = warm_reaper(None).await;
        std::fs::write(dir.join("warm"), format!("{warm}\n")).expect("write");
        tokio::spawn(async move {
            runner
                .run(request("tree", "x"), CancellationToken::new())
                .await
        })
        .await
    });
    panic!("the fake host's subagent ended before the host was killed: {result:?}");
}

#[tokio::test]
async fn a_host_killed_with_sigkill_leaves_neither_a_warm_started_command_nor_a_warm_reaper() {
    let dir = temp_dir("process");
    let guard = KillOnDrop::default();
    let mut host = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "warm::not_a_test_warm_host_body",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(WARM_HOST_DIR, dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start the fake host");
    let host_pid = Pid::from_raw(host.id().cast_signed());
    let mut pids = tree_pids(dir.path(), &guard).await;
    let warm = wait_for_pids(&dir.path().join("warm"), 1).await;
    assert_eq!(pids[2], warm[0], "the command runs under the warm reaper");
    // The next warm reaper, waiting unused.
    let next = eventually_some("the next warm reaper runs", RUN_DEADLINE, || {
        let found = warm_reapers_of(host_pid);
        found.iter().copied().find(|&pid| pid != warm[0])
    })
    .await;
    guard.add(&[next]);
    pids.push(next);
    let _ = host.kill();
    let _ = host.wait();
    assert_gone_within(Duration::from_secs(2), &pids).await;
}
