//! Failures: exit statuses with the end of stderr, signals, unknown subagents
//! and programs; and the catalog.

use std::path::Path;

use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
use asynctask_tools::{SubagentInfo, SubagentRunner};
use pretty_assertions::assert_eq;

use crate::{error, request, run, runner, runner_in, temp_dir};

#[tokio::test]
async fn a_non_zero_exit_fails_with_the_status_and_the_end_of_stderr() {
    let dir = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "tester",
        r#"["sh", "-c", "echo progress; echo 'first line' >&2; echo 'it broke' >&2; exit 3"]"#,
    );
    let stdout = runner
        .output_dir()
        .expect("the output directory")
        .join("task-0001.out");
    // What it printed is named, for the model to read.
    assert_eq!(
        run(&runner, request("tester", "x")).await,
        error(&format!(
            "subagent 'tester' exited with status 3: first line\nit broke\n\n[whole output: {} (9 bytes)]",
            stdout.display()
        ))
    );

    let silent = runner_in(dir.path(), "silent", r#"["sh", "-c", "exit 1"]"#);
    assert_eq!(
        run(&silent, request("silent", "x")).await,
        error("subagent 'silent' exited with status 1")
    );
}

#[tokio::test]
async fn a_long_stderr_keeps_only_its_end() {
    let dir = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "noisy",
        r#"["sh", "-c", "yes 'noise' | head -c 100000 >&2; echo 'the real reason' >&2; exit 2"]"#,
    );
    let message = run(&runner, request("noisy", "x"))
        .await
        .expect_err("fails")
        .message()
        .to_owned();
    let tail_len = ProcessRunner::STDERR_TAIL - "the real reason\n".len();
    let noise: String = "noise\n".repeat(100_000 / 6 + 1);
    let noise = &noise[..100_000];
    let expected = format!(
        "subagent 'noisy' exited with status 2: ...{}the real reason",
        &noise[noise.len() - tail_len..]
    );
    assert_eq!(message, expected);
}

#[tokio::test]
async fn a_child_killed_by_a_signal_says_which() {
    let dir = temp_dir("process");
    let runner = runner_in(dir.path(), "victim", r#"["sh", "-c", "kill -9 $$"]"#);
    assert_eq!(
        run(&runner, request("victim", "x")).await,
        error("subagent 'victim' was killed by signal 9 (SIGKILL)")
    );
}

#[tokio::test]
async fn an_unknown_subagent_lists_the_configured_ones() {
    let dir = temp_dir("process");
    let runner = runner(
        "[subagents.tester]\ncommand = [\"true\"]\n[subagents.researcher]\ncommand = [\"true\"]\n",
        dir.path(),
    );
    assert_eq!(runner.subagent_names(), ["researcher", "tester"]);
    assert_eq!(
        run(&runner, request("foo", "x")).await,
        error("unknown subagent 'foo'; configured subagents: researcher, tester")
    );

    let empty = ProcessRunner::new(ProcessRunnerConfig::default());
    assert_eq!(
        run(&empty, request("foo", "x")).await,
        error("unknown subagent 'foo'; no subagents are configured")
    );
}

#[test]
fn the_catalog_lists_the_configured_subagents_by_name() {
    let runner = runner(
        "[subagents.tester]\ncommand = [\"true\"]\ndescription = \"Runs the unit tests\"\n\
         [subagents.researcher]\ncommand = [\"true\"]\n",
        Path::new("/"),
    );
    assert_eq!(
        runner.catalog(),
        Some(vec![
            SubagentInfo::new("researcher", ""),
            SubagentInfo::new("tester", "Runs the unit tests"),
        ])
    );
    assert_eq!(
        ProcessRunner::new(ProcessRunnerConfig::new()).catalog(),
        Some(vec![])
    );
}

#[tokio::test]
async fn a_program_that_does_not_exist_is_named_in_the_error() {
    let dir = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "ghost",
        r#"["asynctask-no-such-program", "--flag"]"#,
    );
    assert_eq!(
        run(&runner, request("ghost", "x")).await,
        error(
            "subagent 'ghost': cannot start 'asynctask-no-such-program': \
             No such file or directory (os error 2)"
        )
    );
}
