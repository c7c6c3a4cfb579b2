//! `ProcessRunner` with real child processes: output, environment, working
//! directory, failures, cancellation of the whole process group, bounded output,
//! and config errors.
//!
//! These tests run real programs (`sh`, `sleep`, `env`, `yes`, `head`, ...), so
//! they use real time; every wait polls with a short interval up to a deadline.
//! Every process a test starts outside the runner's care is killed by a drop
//! guard, by pid, even when the test fails.

#![cfg(unix)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use asynctask_manager::{Inbox, InboxError, ProgressSnapshot, TaskProgress};
use asynctask_model::{OutputObject, TerminateReason};
use asynctask_process::{
    CommandLine, ConfigError, EnvName, EnvValue, ProcessRunner, ProcessRunnerConfig,
    SubagentCommand, SubagentName,
};
use asynctask_tools::{
    ContextVar, OutputVarSpec, SubagentError, SubagentInfo, SubagentRequest, SubagentRunner,
    whole_output_line,
};
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

/// The most any single run in these tests may take before the test fails.
const RUN_DEADLINE: Duration = Duration::from_secs(10);

/// How long killed processes may take to disappear.
const GONE_DEADLINE: Duration = Duration::from_secs(3);

/// A fresh directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "asynctask-process-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path.canonicalize().expect("canonical temp dir"))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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
    let deadline = Instant::now() + RUN_DEADLINE;
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        // Only whole lines: the writer may be mid-line.
        let pids: Vec<Pid> = text
            .split_inclusive('\n')
            .filter(|line| line.ends_with('\n'))
            .filter_map(|line| line.trim().parse().ok())
            .map(Pid::from_raw)
            .collect();
        if pids.len() >= count {
            return pids;
        }
        assert!(
            Instant::now() < deadline,
            "the child wrote its pids: {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether `pid` is gone: no such process, or a zombie (dead, waiting to be
/// reaped by a parent that is not us).
fn is_gone(pid: Pid) -> bool {
    match kill(pid, None) {
        Err(Errno::ESRCH) => true,
        _ => std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
        }),
    }
}

async fn assert_all_gone(pids: &[Pid]) {
    let deadline = Instant::now() + GONE_DEADLINE;
    loop {
        let alive: Vec<Pid> = pids.iter().copied().filter(|&pid| !is_gone(pid)).collect();
        if alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still running after {GONE_DEADLINE:?}: {alive:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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

// ---- running ---------------------------------------------------------------

#[tokio::test]
async fn stdout_becomes_the_final_message_and_the_goal_arrives_on_stdin_and_in_env() {
    let dir = TempDir::new();
    let runner = runner_in(
        dir.path(),
        "echo",
        r#"["sh", "-c", "printf 'stdin=%s\n' \"$(cat)\"; printf 'env=%s\n\n' \"$ASYNCTASK_GOAL\""]"#,
    );
    let result = run(&runner, request("echo", "find the bug")).await;
    assert_eq!(
        result,
        Ok(output(Some("stdin=find the bug\nenv=find the bug")))
    );
}

#[tokio::test]
async fn empty_stdout_is_no_final_message() {
    let dir = TempDir::new();
    let runner = runner_in(dir.path(), "quiet", r#"["sh", "-c", "echo; echo '  '"]"#);
    assert_eq!(run(&runner, request("quiet", "x")).await, Ok(output(None)));
}

#[tokio::test]
async fn the_goal_is_passed_literally_and_never_run_by_a_shell() {
    let dir = TempDir::new();
    let goal = "$(touch pwned-1); echo hi `touch pwned-2` && touch pwned-3 \"'\n";
    let runner = runner_in(
        dir.path(),
        "literal",
        r#"["sh", "-c", "cat; printf '|%s' \"$ASYNCTASK_GOAL\""]"#,
    );
    let result = run(&runner, request("literal", goal)).await;
    assert_eq!(
        result,
        Ok(output(Some(format!("{goal}|{goal}").trim_end())))
    );
    let created: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .map(|entry| entry.expect("entry").file_name())
        .collect();
    assert_eq!(created, Vec::<std::ffi::OsString>::new(), "nothing was run");
}

#[tokio::test]
async fn the_environment_is_an_allowlist() {
    // Two variables of the test process that are not always passed: one is
    // inherited by name, the other must not be visible.
    let always = ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER"];
    let mut others = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .map(|(name, _)| name)
        .filter(|name| !always.contains(&name.as_str()) && !name.starts_with("ASYNCTASK_"));
    let inherited = others.next().expect("the test process has some variable");
    let hidden = others.next().expect("the test process has two variables");

    let dir = TempDir::new();
    let toml = format!(
        "[subagents.env]\ncommand = [\"env\", \"-0\"]\n\
         env = {{ GREETING = \"hello world\", HOME = \"/nowhere\" }}\n\
         inherit_env = [\"{inherited}\", \"ASYNCTASK_NOT_SET_ANYWHERE\"]\n"
    );
    let runner = runner(&toml, dir.path());
    let mut request = request("env", "list the environment");
    request.context = vec![
        ContextVar {
            name: "file".to_owned(),
            value: "src/main.rs".to_owned(),
        },
        ContextVar {
            name: "line".to_owned(),
            value: "42".to_owned(),
        },
    ];
    request.behaviour_prompts = vec!["be brief".to_owned(), "be kind".to_owned()];
    request.output_spec = vec![OutputVarSpec {
        name: "answer".to_owned(),
        description: "the \"answer\"".to_owned(),
    }];
    request.tool_whitelist = Some(vec!["read".to_owned(), "grep".to_owned()]);
    let result = run(&runner, request).await.expect("env runs");
    let vars_file = runner
        .output_dir()
        .expect("the output directory")
        .join("task-0001.vars.json");
    let seen: BTreeMap<String, String> = result
        .final_message
        .expect("env printed")
        .split('\0')
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (name, value) = entry.split_once('=').expect("NAME=value");
            (name.to_owned(), value.to_owned())
        })
        .collect();

    let mut expected: BTreeMap<String, String> = always
        .iter()
        .chain([&inherited.as_str()])
        .filter_map(|&name| Some((name.to_owned(), std::env::var(name).ok()?)))
        .collect();
    for (name, value) in [
        ("GREETING", "hello world"),
        ("HOME", "/nowhere"),
        ("ASYNCTASK_TASK_ID", "task-0001"),
        ("ASYNCTASK_SUBAGENT", "env"),
        ("ASYNCTASK_GOAL", "list the environment"),
        ("ASYNCTASK_CONTEXT", r#"{"file":"src/main.rs","line":"42"}"#),
        ("ASYNCTASK_BEHAVIOUR", "be brief\nbe kind"),
        (
            "ASYNCTASK_OUTPUT_SPEC",
            r#"[{"name":"answer","description":"the \"answer\""}]"#,
        ),
        ("ASYNCTASK_TOOLS", r#"["read","grep"]"#),
        ("ASYNCTASK_VARS_FILE", vars_file.to_str().expect("UTF-8")),
    ] {
        expected.insert(name.to_owned(), value.to_owned());
    }
    assert_eq!(seen, expected);
    assert!(!seen.contains_key(&hidden));
}

#[tokio::test]
async fn a_relative_cwd_is_relative_to_the_config_directory() {
    let dir = TempDir::new();
    std::fs::create_dir(dir.path().join("work")).expect("mkdir");
    let toml = "[subagents.where]\ncommand = [\"pwd\", \"-P\"]\ncwd = \"work\"\n";

    let from_str = runner(toml, dir.path());
    let expected = dir.path().join("work");
    assert_eq!(
        from_str.config().subagents["where"].cwd.as_deref(),
        Some(expected.as_path())
    );
    let result = run(&from_str, request("where", "x")).await;
    assert_eq!(result, Ok(output(expected.to_str())));

    let file = dir.path().join("subagents.toml");
    std::fs::write(&file, toml).expect("write config");
    let loaded = ProcessRunner::new(ProcessRunnerConfig::load(&file).expect("loads"));
    assert_eq!(loaded.config(), from_str.config());
}

#[tokio::test]
async fn a_missing_cwd_is_a_clear_error() {
    let dir = TempDir::new();
    let runner = runner(
        "[subagents.lost]\ncommand = [\"true\"]\ncwd = \"nowhere\"\n",
        dir.path(),
    );
    let result = run(&runner, request("lost", "x")).await;
    let message = format!(
        "subagent 'lost': working directory {} is not a directory",
        dir.path().join("nowhere").display()
    );
    assert_eq!(result, error(&message));
}

#[tokio::test]
async fn a_large_goal_reaches_stdin_even_when_too_large_for_the_environment() {
    let dir = TempDir::new();
    let runner = runner_in(
        dir.path(),
        "big",
        r#"["sh", "-c", "echo \"${ASYNCTASK_GOAL-unset}\"; wc -c"]"#,
    );
    let goal = "g".repeat(1_000_000);
    let result = run(&runner, request("big", &goal)).await;
    assert_eq!(result, Ok(output(Some("unset\n1000000"))));
}

#[tokio::test]
async fn a_child_that_never_reads_stdin_does_not_block_the_run() {
    let dir = TempDir::new();
    let runner = runner_in(dir.path(), "deaf", r#"["echo", "done"]"#);
    let goal = "g".repeat(1_000_000);
    assert_eq!(
        run(&runner, request("deaf", &goal)).await,
        Ok(output(Some("done")))
    );
}

// ---- messages over stdin ------------------------------------------------------

#[tokio::test]
async fn a_jsonl_subagent_gets_the_goal_then_each_message_in_order() {
    let dir = TempDir::new();
    // Prints three lines of stdin as they are, then exits.
    let runner = runner(
        r#"
[subagents.chat]
command = ["sh", "-c", "n=0; while IFS= read -r line; do printf '%s\\n' \"$line\"; n=$((n+1)); [ $n -eq 3 ] && exit 0; done"]
stdin = "jsonl"
"#,
        dir.path(),
    );
    assert_eq!(
        runner.catalog(),
        Some(vec![SubagentInfo::new("chat", "").with_messages(true)])
    );
    let (sender, inbox) = Inbox::channel();
    let run = tokio::spawn({
        let request = request("chat", "the goal").with_inbox(inbox);
        async move { runner.run(request, CancellationToken::new()).await }
    });
    sender.send("first".to_owned()).expect("queued");
    sender
        .send("second, \"quoted\"\non two lines".to_owned())
        .expect("queued");
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(
        result,
        Ok(output(Some(
            "{\"type\":\"goal\",\"text\":\"the goal\"}\n\
             {\"type\":\"message\",\"text\":\"first\"}\n\
             {\"type\":\"message\",\"text\":\"second, \\\"quoted\\\"\\non two lines\"}"
        )))
    );
    assert_eq!(
        sender.send("too late".to_owned()),
        Err(InboxError::Closed),
        "the inbox closes with the task"
    );
}

#[tokio::test]
async fn a_goal_subagent_takes_no_messages() {
    let dir = TempDir::new();
    let runner = runner_in(
        dir.path(),
        "plain",
        r#"["sh", "-c", "cat; echo $$ >> pids; while [ ! -e go ]; do sleep 0.01; done"]"#,
    );
    assert_eq!(
        runner.catalog(),
        Some(vec![SubagentInfo::new("plain", "").with_messages(false)])
    );
    let (sender, inbox) = Inbox::channel();
    let run = tokio::spawn({
        let request = request("plain", "the goal").with_inbox(inbox);
        async move { runner.run(request, CancellationToken::new()).await }
    });
    wait_for_pids(&dir.path().join("pids"), 1).await;
    // The run is still going, holding its inbox: closed, not dropped.
    assert_eq!(sender.send("hello?".to_owned()), Err(InboxError::Closed));
    std::fs::write(dir.path().join("go"), "").expect("write");
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(result, Ok(output(Some("the goal"))));
}

#[tokio::test]
async fn a_jsonl_subagent_that_stops_reading_does_not_block_its_run() {
    let dir = TempDir::new();
    // Reads the goal line only, then works a little while messages pile up
    // in a pipe nobody reads (more than a pipe holds), then exits.
    let runner = runner(
        "[subagents.deaf]\ncommand = [\"sh\", \"-c\", \"read -r line; echo read one; sleep 0.2\"]\nstdin = \"jsonl\"\n",
        dir.path(),
    );
    let (sender, inbox) = Inbox::channel();
    for _ in 0..60 {
        sender.send("m".repeat(10_000)).expect("queued");
    }
    let result = run(&runner, request("deaf", "x").with_inbox(inbox)).await;
    // What a pipe held was written; the rest never reached the subagent and
    // the result says so rather than dropping it silently.
    let text = result
        .expect("it succeeded")
        .final_message
        .expect("a message");
    let (read, note) = text.split_once("\n\n").expect("a note after the output");
    assert_eq!(read, "read one");
    let count: usize = note
        .strip_prefix('[')
        .and_then(|note| note.split_once(' '))
        .and_then(|(count, _)| count.parse().ok())
        .unwrap_or_else(|| panic!("a count in {note:?}"));
    assert!(
        (50..=60).contains(&count),
        "{count} unwritten of 60: {note}"
    );
    assert!(
        note.contains(
            "sent to this task never reached the subagent, which had stopped reading its stdin"
        ) && note.ends_with(&format!("- and {} more]", count - 5)),
        "{note}"
    );
    assert_eq!(sender.send("later".to_owned()), Err(InboxError::Closed));
}

#[tokio::test]
async fn a_message_to_a_subagent_that_closed_its_stdin_is_reported_with_the_result() {
    let dir = TempDir::new();
    // Reads the goal line, closes its stdin, says so, and works a while.
    let runner = runner(
        "[subagents.brief]\ncommand = [\"sh\", \"-c\", \"read -r line; exec 0<&-; echo $$ >> pids; sleep 0.3; echo bye\"]\nstdin = \"jsonl\"\n",
        dir.path(),
    );
    let (sender, inbox) = Inbox::channel();
    let run = tokio::spawn({
        let request = request("brief", "x").with_inbox(inbox);
        async move { runner.run(request, CancellationToken::new()).await }
    });
    wait_for_pids(&dir.path().join("pids"), 1).await;
    sender
        .send("never read \"quoted\"".to_owned())
        .expect("queued: the runner cannot know yet");
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(
        result,
        Ok(output(Some(
            "bye\n\n[1 message sent to this task never reached the subagent, which had \
             stopped reading its stdin:\n- \"never read \\\"quoted\\\"\"]"
        )))
    );
}

#[tokio::test]
async fn a_message_whose_write_a_cancel_cuts_is_reported_with_the_result() {
    let dir = TempDir::new();
    // Reads a part of the message, so its write has begun, then holds its
    // stdin open without reading: the rest of the write waits on a full pipe.
    let runner = runner(
        "[subagents.slow]\ncommand = [\"sh\", \"-c\", \"head -c 70000 > /dev/null; echo $$ >> pids; sleep 30\"]\nstdin = \"jsonl\"\n",
        dir.path(),
    );
    let (sender, inbox) = Inbox::channel();
    sender
        .send("m".repeat(300_000))
        .expect("queued before the run");
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        let request = request("slow", "x").with_inbox(inbox);
        async move { runner.run(request, cancel).await }
    });
    wait_for_pids(&dir.path().join("pids"), 1).await;
    cancel.cancel();
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    let err = result.expect_err("cancelled").to_string();
    assert!(
        err.starts_with(
            "subagent 'slow' was cancelled\n\n[1 message sent to this task never reached \
             the subagent, which had stopped reading its stdin:\n- \"mmm"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_cancelled_jsonl_subagent_sees_its_stdin_close() {
    let dir = TempDir::new();
    // Exits on its own when stdin ends, and ignores SIGTERM: only the
    // closed stdin can end it before the grace does.
    let runner = runner(
        "[subagents.chat]\ncommand = [\"sh\", \"-c\", \"trap '' TERM; echo $$ >> pids; while IFS= read -r line; do :; done; echo eof >> seen\"]\nstdin = \"jsonl\"\n",
        dir.path(),
    )
    .with_grace(Duration::from_secs(5));
    let (_sender, inbox) = Inbox::channel();
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        let request = request("chat", "x").with_inbox(inbox);
        async move { runner.run(request, cancel).await }
    });
    let pids = wait_for_pids(&dir.path().join("pids"), 1).await;
    cancel.cancel();
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(result, error("subagent 'chat' was cancelled"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("seen"))
            .ok()
            .as_deref(),
        Some("eof\n")
    );
    assert_all_gone(&pids).await;
}

// ---- variables -------------------------------------------------------------

#[tokio::test]
async fn variables_written_to_the_vars_file_are_emitted() {
    let dir = TempDir::new();
    let runner = runner_in(
        dir.path(),
        "answer",
        r#"["sh", "-c", "printf '{\"answer\":\"42\",\"file\":\"src/a.rs\"}' > \"$ASYNCTASK_VARS_FILE\"; echo done"]"#,
    );
    let expected = OutputObject::new(TerminateReason::Goal)
        .with_var("answer", "42")
        .with_var("file", "src/a.rs")
        .with_final_message("done");
    assert_eq!(run(&runner, request("answer", "x")).await, Ok(expected));

    // A later run of the same id that writes nothing emits nothing: the old
    // file is not taken for its own.
    let quiet = runner_in(dir.path(), "answer", r#"["echo", "done"]"#)
        .with_output_dir(runner.output_dir().expect("the output directory"));
    assert_eq!(
        run(&quiet, request("answer", "x")).await,
        Ok(output(Some("done")))
    );
}

#[tokio::test]
async fn a_bad_vars_file_fails_the_task_with_one_clear_line() {
    let dir = TempDir::new();
    let out = TempDir::new();
    let file = out.path().join("task-0001.vars.json");
    let cases = [
        (
            r#"printf 'not json' > "$ASYNCTASK_VARS_FILE""#,
            "not JSON: expected ident at line 1 column 2",
        ),
        (
            r#"printf '["a"]' > "$ASYNCTASK_VARS_FILE""#,
            "not a JSON object",
        ),
        (
            r#"printf '{"a":"1","count":3}' > "$ASYNCTASK_VARS_FILE""#,
            r#"the value of "count" is not a string"#,
        ),
        (
            r#"head -c 1048577 /dev/zero | tr '\0' ' ' > "$ASYNCTASK_VARS_FILE""#,
            "it is larger than 1048576 bytes",
        ),
    ];
    for (script, what) in cases {
        let command = serde_json::json!(["sh", "-c", script]).to_string();
        let runner = runner_in(dir.path(), "vars", &command).with_output_dir(out.path().to_owned());
        assert_eq!(
            run(&runner, request("vars", "x")).await,
            error(&format!(
                "subagent 'vars' wrote a bad variables file {}: {what}",
                file.display()
            )),
            "{script}"
        );
    }
}

#[tokio::test]
async fn a_bad_vars_file_names_the_file_that_holds_stdout() {
    let dir = TempDir::new();
    let out = TempDir::new();
    let runner = runner_in(
        dir.path(),
        "vars",
        r#"["sh", "-c", "echo 'found 3 callers'; printf '[1]' > \"$ASYNCTASK_VARS_FILE\""]"#,
    )
    .with_output_dir(out.path().to_owned());
    let (stdout, vars) = (
        out.path().join("task-0001.out"),
        out.path().join("task-0001.vars.json"),
    );
    assert_eq!(
        run(&runner, request("vars", "x")).await,
        error(&format!(
            "subagent 'vars' wrote a bad variables file {}: not a JSON object\n\n[whole output: {} (16 bytes)]",
            vars.display(),
            stdout.display()
        ))
    );
    assert_eq!(
        std::fs::read_to_string(&stdout).expect("kept"),
        "found 3 callers\n"
    );
    // The failure names the file: it is there to read (forget removes it).
    assert_eq!(std::fs::read_to_string(&vars).expect("kept"), "[1]");
    runner.forget("task-0001");
    assert!(!vars.exists() && !stdout.exists());
}

#[tokio::test]
async fn a_vars_file_that_is_no_regular_file_fails_at_once() {
    let dir = TempDir::new();
    let out = TempDir::new();
    let file = out.path().join("task-0001.vars.json");
    let cases = [
        // A FIFO nobody writes to: a plain open would wait forever.
        (
            r#"mkfifo "$ASYNCTASK_VARS_FILE""#,
            "it is not a regular file",
        ),
        // A symbolic link, to a FIFO or to anything else.
        (
            r#"mkfifo fifo; ln -s "$PWD/fifo" "$ASYNCTASK_VARS_FILE""#,
            "it is a symbolic link, not a regular file",
        ),
        (
            r#"ln -s /dev/stdin "$ASYNCTASK_VARS_FILE""#,
            "it is a symbolic link, not a regular file",
        ),
        (
            r#"mkdir "$ASYNCTASK_VARS_FILE""#,
            "it is not a regular file",
        ),
    ];
    for (script, what) in cases {
        let _ = std::fs::remove_file(dir.path().join("fifo"));
        let _ = std::fs::remove_dir(&file);
        let command = serde_json::json!(["sh", "-c", script]).to_string();
        let runner = runner_in(dir.path(), "vars", &command).with_output_dir(out.path().to_owned());
        let result = within(
            Duration::from_secs(5),
            runner.run(request("vars", "x"), CancellationToken::new()),
        )
        .await;
        assert_eq!(
            result,
            error(&format!(
                "subagent 'vars' wrote a bad variables file {}: {what}",
                file.display()
            )),
            "{script}"
        );
    }
}

#[tokio::test]
async fn variables_are_bounded_by_the_inline_budget() {
    let dir = TempDir::new();
    let out = TempDir::new();
    let file = out.path().join("task-0001.vars.json");
    // 9,000 variables: far more than the budget holds.
    let script = r#"{ printf '{'; i=0; while [ $i -lt 9000 ]; do printf '"v%04d":"value %d",' $i $i; i=$((i+1)); done; printf '"z":"end"}'; } > "$ASYNCTASK_VARS_FILE"; echo done"#;
    let command = serde_json::json!(["sh", "-c", script]).to_string();
    let runner = runner_in(dir.path(), "many", &command)
        .with_output_dir(out.path().to_owned())
        .with_inline_budget(2_000);
    let output = run(&runner, request("many", "x")).await.expect("succeeds");
    let cost: usize = output
        .emitted_vars
        .iter()
        .map(|(name, value)| {
            serde_json::to_string(name).expect("a string").len()
                + serde_json::to_string(value).expect("a string").len()
                - 4
        })
        .sum();
    assert!(cost <= 2_000, "{cost}");
    let kept = output.emitted_vars.len();
    assert!(kept > 50, "{kept}");
    assert_eq!(
        output.emitted_vars.get("v0000").map(String::as_str),
        Some("value 0")
    );
    assert_eq!(
        output.final_message.as_deref(),
        Some(
            format!(
                "done\n\n[{} of 9001 emitted variables were dropped to fit the inline budget; all of them are in {}]",
                9001 - kept,
                file.display()
            )
            .as_str()
        )
    );
    // The file the note names holds them all.
    let all: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("kept")).expect("JSON");
    assert_eq!(all.len(), 9001);

    // One long value among short ones: it is cut, the others are whole.
    let script = r#"printf '{"a":"1","b":"%s","c":"3"}' "$(head -c 5000 /dev/zero | tr '\0' x)" > "$ASYNCTASK_VARS_FILE""#;
    let command = serde_json::json!(["sh", "-c", script]).to_string();
    let runner = runner_in(dir.path(), "long", &command)
        .with_output_dir(out.path().to_owned())
        .with_inline_budget(1_000);
    let output = run(&runner, request("long", "x")).await.expect("succeeds");
    assert_eq!(output.emitted_vars["a"], "1");
    assert_eq!(output.emitted_vars["c"], "3");
    let b = &output.emitted_vars["b"];
    assert!(
        b.starts_with("xxx") && b.ends_with(" more characters cut]"),
        "{b}"
    );
    assert!(b.chars().count() <= 1_000 - 4, "{}", b.len());
    assert_eq!(
        output.final_message.as_deref(),
        Some(
            format!(
                "[of the emitted variables, 1 value was cut to fit the inline budget; all of them are in {}]",
                file.display()
            )
            .as_str()
        )
    );
    assert!(file.exists(), "kept: the result does not hold it all");
}

#[tokio::test]
async fn the_vars_file_is_removed_once_read_whole() {
    let dir = TempDir::new();
    let out = TempDir::new();
    let runner = runner_in(
        dir.path(),
        "answer",
        r#"["sh", "-c", "printf '{\"answer\":\"42\"}' > \"$ASYNCTASK_VARS_FILE\""]"#,
    )
    .with_output_dir(out.path().to_owned());
    let output = run(&runner, request("answer", "x"))
        .await
        .expect("succeeds");
    assert_eq!(output.emitted_vars.len(), 1);
    assert!(!out.path().join("task-0001.vars.json").exists());
    assert!(out.path().join("task-0001.out").exists());
}

// ---- failures --------------------------------------------------------------

#[tokio::test]
async fn a_non_zero_exit_fails_with_the_status_and_the_end_of_stderr() {
    let dir = TempDir::new();
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
    let dir = TempDir::new();
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
    let dir = TempDir::new();
    let runner = runner_in(dir.path(), "victim", r#"["sh", "-c", "kill -9 $$"]"#);
    assert_eq!(
        run(&runner, request("victim", "x")).await,
        error("subagent 'victim' was killed by signal 9 (SIGKILL)")
    );
}

#[tokio::test]
async fn an_unknown_subagent_lists_the_configured_ones() {
    let dir = TempDir::new();
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
    let dir = TempDir::new();
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

// ---- ending the process group -----------------------------------------------

/// A child whose group holds three processes: itself and two sleepers, all
/// writing their pids to `pids`.
const SLEEPERS: &str = r#"["sh", "-c", "sleep 300 & echo $! >> pids; sleep 300 & echo $! >> pids; echo $$ >> pids; wait"]"#;

#[tokio::test]
async fn cancel_ends_the_whole_process_group() {
    let dir = TempDir::new();
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
    let dir = TempDir::new();
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
    let dir = TempDir::new();
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
    let dir = TempDir::new();
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
    let dir = TempDir::new();
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
    let dir = TempDir::new();
    let runner = runner_in(dir.path(), "never", r#"["sh", "-c", "echo $$ >> pids"]"#);
    let cancel = CancellationToken::new();
    cancel.cancel();
    let result = within(RUN_DEADLINE, runner.run(request("never", "x"), cancel)).await;
    assert_eq!(result, error("subagent 'never' was cancelled"));
    assert!(!dir.path().join("pids").exists());
}

// ---- the reaper, and a killed host -------------------------------------------

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
    let dir = TempDir::new();
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
    let dir = TempDir::new();
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
    let dir = TempDir::new();
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
    let dir = TempDir::new();
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
        let dir = TempDir::new();
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
                "not_a_test_fake_host_body",
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
async fn assert_gone_within(deadline: Duration, pids: &[Pid]) {
    let until = Instant::now() + deadline;
    loop {
        let alive: Vec<Pid> = pids.iter().copied().filter(|&pid| !is_gone(pid)).collect();
        if alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < until,
            "still running after {deadline:?}: {alive:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_host_killed_with_sigkill_leaves_no_subagent_process_behind() {
    let dir = TempDir::new();
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
    let dir = TempDir::new();
    let guard = KillOnDrop::default();
    let mut host = FakeHost::start(dir.path(), false);
    let pids = tree_pids(dir.path(), &guard).await;
    host.kill();
    // The direct child (the shell, the fourth pid) has the parent-death
    // signal; its sleepers do not (the guard ends them).
    assert_gone_within(Duration::from_secs(2), &pids[3..4]).await;
}

// ---- bounded output ----------------------------------------------------------

/// The peak resident memory of this process, in KiB (Linux).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The marker line for `omitted` characters of an output of `bytes` bytes kept
/// in `file`.
fn marker(omitted: usize, bytes: usize, file: &Path) -> String {
    format!(
        "[... {omitted} characters omitted; the whole output ({bytes} bytes) is in {} ...]",
        file.display()
    )
}

#[tokio::test]
async fn huge_stdout_goes_to_a_file_and_the_message_keeps_its_head_and_tail() {
    let dir = TempDir::new();
    let out = TempDir::new();
    // 500,000 lines of 100 bytes. (Lines, not bytes, are what the live
    // progress pays for: one allocation each.)
    let line = format!("{}\n", "y".repeat(99));
    let command = serde_json::json!([
        "sh",
        "-c",
        format!("yes '{}' | head -c 50000000", line.trim_end())
    ]);
    let runner = runner_in(dir.path(), "chatty", &command.to_string())
        .with_output_dir(out.path().to_owned());
    assert_eq!(runner.inline_budget(), ProcessRunner::DEFAULT_INLINE_BUDGET);
    let before = peak_rss_kib();
    let result = run(&runner, request("chatty", "x")).await;
    let file = out.path().join("task-0001.out");
    // Each line costs 101 of the budget once JSON-escaped (`\n` is two
    // characters there): each half holds 49 lines and 51 characters more.
    let head = format!("{}{}", line.repeat(49), "y".repeat(51));
    let tail = format!("{}\n{}", "y".repeat(49), line.repeat(49));
    let expected = format!(
        "{head}\n{}\n{}\n\n{}",
        marker(50_000_000 - 9_901, 50_000_000, &file),
        tail.trim_end(),
        whole_output_line(&file, 50_000_000)
    );
    assert_eq!(result, Ok(output(Some(&expected))));
    if let (Some(before), Some(after)) = (before, peak_rss_kib()) {
        // 50 MB went through; far less than that was ever held.
        assert!(
            after.saturating_sub(before) < 16 * 1024,
            "peak memory grew by {} KiB",
            after - before
        );
    }
    let mut whole = std::fs::File::open(&file).expect("the output file");
    assert_eq!(whole.metadata().expect("metadata").len(), 50_000_000);
    let mut start = vec![0_u8; line.len()];
    std::io::Read::read_exact(&mut whole, &mut start).expect("read");
    assert_eq!(start, line.as_bytes());
}

#[tokio::test]
async fn the_inline_budget_is_configurable_and_counts_characters() {
    let dir = TempDir::new();
    let out = TempDir::new();
    let file = out.path().join("task-0001.out");
    let runner = runner_in(
        dir.path(),
        "letters",
        r#"["printf", "abcdefghijklmnopqrstuvwxyz"]"#,
    )
    .with_output_dir(out.path().to_owned())
    .with_inline_budget(10);
    assert_eq!(
        run(&runner, request("letters", "x")).await,
        Ok(output(Some(&format!(
            "abcde\n{}\nvwxyz\n\n{}",
            marker(16, 26, &file),
            whole_output_line(&file, 26)
        ))))
    );

    // "é" is two bytes but one character.
    let runner = runner_in(dir.path(), "accents", r#"["printf", "aaaééééébbb"]"#)
        .with_output_dir(out.path().to_owned())
        .with_inline_budget(8);
    assert_eq!(
        run(&runner, request("accents", "x")).await,
        Ok(output(Some(&format!(
            "aaaé\n{}\nébbb\n\n{}",
            marker(3, 16, &file),
            whole_output_line(&file, 16)
        ))))
    );
    // Output that fits is the text alone: no marker, no path.
    let runner = runner_in(dir.path(), "accents", r#"["printf", "aaééébb"]"#)
        .with_output_dir(out.path().to_owned())
        .with_inline_budget(8);
    assert_eq!(
        run(&runner, request("accents", "x")).await,
        Ok(output(Some("aaééébb")))
    );
    assert_eq!(
        std::fs::read_to_string(&file).expect("the output file"),
        "aaééébb"
    );
}

#[test]
fn the_inline_budget_comes_from_the_config() {
    let config = ProcessRunnerConfig::from_toml_str(
        "inline_budget = 2500\n[subagents.a]\ncommand = [\"true\"]\n",
        Path::new("/"),
    )
    .expect("valid");
    assert_eq!(config.inline_budget, Some(2_500));
    assert_eq!(ProcessRunner::new(config).inline_budget(), 2_500);
    assert_eq!(
        ProcessRunner::new(ProcessRunnerConfig::new()).inline_budget(),
        ProcessRunner::DEFAULT_INLINE_BUDGET
    );
}

#[tokio::test]
async fn the_inline_budget_counts_what_the_text_costs_in_json() {
    let dir = TempDir::new();
    let out = TempDir::new();
    // Quotes, backslashes and ANSI escapes: each costs 2 or 6 in a JSON string.
    let script = r#"i=0; while [ $i -lt 2000 ]; do printf '"q" \\ \033[31mred\033[0m %s\n' $i; i=$((i+1)); done"#;
    let command = serde_json::json!(["sh", "-c", script]).to_string();
    let runner = runner_in(dir.path(), "loud", &command)
        .with_output_dir(out.path().to_owned())
        .with_inline_budget(1_000);
    let message = run(&runner, request("loud", "x"))
        .await
        .expect("succeeds")
        .final_message
        .expect("a message");
    let (body, pointer) = message.rsplit_once("\n\n").expect("a pointer line");
    let file = out.path().join("task-0001.out");
    let bytes = std::fs::metadata(&file).expect("the output file").len();
    assert_eq!(pointer, whole_output_line(&file, bytes));
    let marker_at = body.find("\n[... ").expect("a marker");
    let marker_end = body[marker_at + 1..].find('\n').expect("the marker's end") + marker_at + 1;
    let kept = format!("{}{}", &body[..marker_at], &body[marker_end + 1..]);
    let escaped = serde_json::to_string(&kept).expect("a string").len() - 2;
    assert!(
        (900..=1_000).contains(&escaped),
        "the kept text is {escaped} characters once escaped"
    );
}

#[tokio::test]
async fn a_cancelled_subagent_names_its_stdout() {
    let dir = TempDir::new();
    let out = TempDir::new();
    let runner = runner_in(
        dir.path(),
        "slow",
        r#"["sh", "-c", "echo started; echo $$ > pids; exec sleep 30"]"#,
    )
    .with_output_dir(out.path().to_owned());
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move { runner.run(request("slow", "x"), cancel).await }
    });
    let pids = wait_for_pids(&dir.path().join("pids"), 1).await;
    let file = out.path().join("task-0001.out");
    let deadline = Instant::now() + RUN_DEADLINE;
    while std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0) < 8 {
        assert!(Instant::now() < deadline, "no output");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cancel.cancel();
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(
        result,
        error(&format!(
            "subagent 'slow' was cancelled\n\n[whole output: {} (8 bytes)]",
            file.display()
        ))
    );
    assert_all_gone(&pids).await;
}

#[tokio::test]
async fn a_running_subagent_reports_its_latest_output_and_its_file() {
    let dir = TempDir::new();
    let out = TempDir::new();
    let runner = runner_in(
        dir.path(),
        "steps",
        r#"["sh", "-c", "echo one; printf 'two\nthr'; while [ ! -e go ]; do sleep 0.01; done; echo ee"]"#,
    )
    .with_output_dir(out.path().to_owned());
    let progress = TaskProgress::new();
    let run = tokio::spawn({
        let request = request("steps", "x").with_progress(progress.clone());
        async move { runner.run(request, CancellationToken::new()).await }
    });
    let deadline = Instant::now() + RUN_DEADLINE;
    while progress.snapshot().last_lines != ["one", "two", "thr"] {
        assert!(Instant::now() < deadline, "{:?}", progress.snapshot());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let file = out.path().join("task-0001.out");
    assert_eq!(
        progress.snapshot(),
        ProgressSnapshot {
            last_lines: vec!["one".into(), "two".into(), "thr".into()],
            output_bytes: 11,
            output_file: Some(file.clone()),
        }
    );
    std::fs::write(dir.path().join("go"), "").expect("write");
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(result, Ok(output(Some("one\ntwo\nthree"))));
    assert_eq!(progress.snapshot().last_lines, ["one", "two", "three"]);
}

#[tokio::test]
async fn the_default_output_directory_lives_as_long_as_the_runner() {
    let dir = TempDir::new();
    let runner = runner_in(dir.path(), "hello", r#"["echo", "hello"]"#);
    assert_eq!(
        run(&runner, request("hello", "x")).await,
        Ok(output(Some("hello")))
    );
    let out = runner.output_dir().expect("made on the first run");
    assert_eq!(out.parent(), Some(std::env::temp_dir().as_path()));
    let name = out
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        name.starts_with(&format!("asynctask-{}-", std::process::id())),
        "{name}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("task-0001.out")).expect("the output file"),
        "hello\n"
    );
    let clone = runner.clone();
    drop(runner);
    assert!(out.is_dir(), "a clone still holds it");
    drop(clone);
    assert!(!out.exists(), "removed with the last clone");
}

#[tokio::test]
async fn a_task_id_never_names_a_file_outside_the_output_directory() {
    let dir = TempDir::new();
    let out = TempDir::new();
    let runner = runner_in(dir.path(), "hello", r#"["echo", "hello"]"#)
        .with_output_dir(out.path().join("runs"));
    let request = SubagentRequest::new("../../escaped", "hello", "x");
    assert_eq!(run(&runner, request).await, Ok(output(Some("hello"))));
    let files: Vec<String> = std::fs::read_dir(out.path().join("runs"))
        .expect("the output directory was made")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].starts_with("______escaped-") && files[0].ends_with(".out"),
        "{files:?}"
    );
    assert_eq!(
        std::fs::read_dir(out.path()).expect("read").count(),
        1,
        "nothing beside the output directory"
    );
}

#[tokio::test]
async fn a_chatty_stderr_does_not_deadlock() {
    let dir = TempDir::new();
    let runner = runner_in(
        dir.path(),
        "chatty",
        r#"["sh", "-c", "yes | head -c 5000000 >&2; echo finished"]"#,
    );
    assert_eq!(
        run(&runner, request("chatty", "x")).await,
        Ok(output(Some("finished")))
    );
}

// ---- config ------------------------------------------------------------------

fn parse_error(toml: &str) -> String {
    chain(&ProcessRunnerConfig::from_toml_str(toml, Path::new("/base")).expect_err("invalid"))
}

/// An error and its sources on one line, as the command line prints them:
/// links joined by `: `, the lines of a link by `; `.
fn chain(err: &dyn std::error::Error) -> String {
    let mut links = vec![err.to_string()];
    let mut source = err.source();
    while let Some(cause) = source {
        links.push(cause.to_string());
        source = cause.source();
    }
    links
        .iter()
        .map(|link| {
            link.lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .collect::<Vec<_>>()
                .join("; ")
        })
        .collect::<Vec<_>>()
        .join(": ")
}

#[test]
fn a_full_config_parses() {
    let toml = r#"
roots = ["/abs", "."]

[subagents.researcher]
command = ["my-agent", "--mode", "research"]
description = "Reads the code"
cwd = "/abs/dir"
env = { MODEL = "small" }
inherit_env = ["API_KEY"]

[subagents.tester]
command = ["make", "test"]
"#;
    let config = ProcessRunnerConfig::from_toml_str(toml, Path::new("/base")).expect("valid");
    let researcher =
        SubagentCommand::new(CommandLine::new(["my-agent", "--mode", "research"]).expect("valid"))
            .with_description("Reads the code")
            .with_cwd(PathBuf::from("/abs/dir"))
            .with_env(
                EnvName::new("MODEL").expect("valid"),
                EnvValue::new("small").expect("valid"),
            )
            .with_inherit_env(EnvName::new("API_KEY").expect("valid"));
    let tester = SubagentCommand::new(CommandLine::new(["make", "test"]).expect("valid"))
        .with_cwd(PathBuf::from("/base"));
    assert_eq!(
        config,
        ProcessRunnerConfig::new()
            .with_subagent(SubagentName::new("researcher").expect("valid"), researcher)
            .with_subagent(SubagentName::new("tester").expect("valid"), tester)
            .with_roots(vec![PathBuf::from("/abs"), PathBuf::from("/base")])
    );
    assert_eq!(
        ProcessRunnerConfig::from_toml_str("", Path::new("/base")).expect("valid"),
        ProcessRunnerConfig::new().with_roots(vec![PathBuf::from("/base")])
    );
}

#[test]
fn config_errors_name_the_position_then_the_parsers_message() {
    let cases = [
        (
            "[subagents.a\ncommand = [\"x\"]\n",
            "invalid config <string> at line 1, column 13: unclosed table, expected `]`",
        ),
        (
            "[subagents.a]\ncomand = [\"x\"]\n",
            "invalid config <string> at line 2, column 1: unknown field `comand`, expected one of `command`, `description`, `cwd`, `env`, `inherit_env`, `stdin`; in `subagents.a`",
        ),
        (
            "[subagent.a]\ncommand = [\"x\"]\n",
            "invalid config <string> at line 1, column 2: unknown field `subagent`, expected one of `subagents`, `roots`, `durable`, `inline_budget`",
        ),
        (
            "inline_budget = 10\n",
            "invalid config <string>: inline_budget = 10 is out of range: give 1000 to 1000000 characters",
        ),
        (
            "[subagents.a]\ncommand = []\n",
            "invalid config <string> at line 2, column 11: `command` must not be empty: give the program and its arguments; in `subagents.a.command`",
        ),
        (
            "[subagents.a]\ncommand = [\"\", \"x\"]\n",
            "invalid config <string> at line 2, column 11: the program (`command[0]`) must not be blank; in `subagents.a.command`",
        ),
        (
            "[subagents.a]\ncommand = \"make test\"\n",
            "invalid config <string> at line 2, column 11: invalid type: string \"make test\", expected a sequence; in `subagents.a.command`",
        ),
        (
            "[subagents.a]\ndescription = \"no command\"\n",
            "invalid config <string> at line 1, column 1: missing field `command`; in `subagents.a`",
        ),
        (
            "[subagents.\" \"]\ncommand = [\"x\"]\n",
            "invalid config <string> at line 1, column 12: a subagent name must not be blank; in `subagents`",
        ),
        (
            "[subagents.\"a \"]\ncommand = [\"x\"]\n",
            "invalid config <string> at line 1, column 12: subagent name \"a \" must not start or end with whitespace; in `subagents`",
        ),
        (
            "[subagents.a]\ncommand = [\"x\"]\nenv = { \"A=B\" = \"c\" }\n",
            "invalid config <string> at line 3, column 9: environment variable name \"A=B\" must not contain `=` or NUL; in `subagents.a.env`",
        ),
        (
            "[subagents.a]\ncommand = [\"x\"]\ninherit_env = [\"\"]\n",
            "invalid config <string> at line 3, column 15: an environment variable name must not be empty; in `subagents.a.inherit_env`",
        ),
    ];
    let seen: Vec<(&str, String)> = cases
        .iter()
        .map(|&(toml, _)| (toml, parse_error(toml)))
        .collect();
    let expected: Vec<(&str, String)> = cases
        .iter()
        .map(|&(toml, message)| (toml, message.to_owned()))
        .collect();
    assert_eq!(seen, expected);
}

#[test]
fn load_names_the_file_in_its_errors() {
    let dir = TempDir::new();
    let missing = dir.path().join("missing.toml");
    let err = ProcessRunnerConfig::load(&missing).expect_err("no file");
    assert_eq!(
        err.to_string(),
        format!("cannot read {}", missing.display())
    );
    assert_eq!(
        chain(&err),
        format!(
            "cannot read {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    assert!(matches!(err, ConfigError::Read { .. }));

    let file = dir.path().join("subagents.toml");
    std::fs::write(&file, "[subagents.a]\ncommand = [\"x\"]\nbogus = 1\n").expect("write");
    let err = ProcessRunnerConfig::load(&file).expect_err("invalid");
    assert_eq!(
        chain(&err),
        format!(
            "invalid config {} at line 3, column 1: unknown field `bogus`, expected one of \
             `command`, `description`, `cwd`, `env`, `inherit_env`, `stdin`; in `subagents.a`",
            file.display()
        )
    );
}

#[test]
fn working_directories_must_lie_under_the_roots() {
    let dir = TempDir::new();
    let inside = dir.path().join("inside");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(inside.join("deeper")).expect("mkdir");
    std::fs::create_dir(&outside).expect("mkdir");
    std::os::unix::fs::symlink(&outside, inside.join("escape")).expect("symlink");
    let root = inside.canonicalize().expect("canonical");
    let parse = |cwd: &str| {
        let toml = format!("roots = [\"inside\"]\n[subagents.a]\ncommand = [\"true\"]\n{cwd}");
        ProcessRunnerConfig::from_toml_str(&toml, dir.path())
            .map(|config| config.roots)
            .map_err(|err| {
                assert!(matches!(err, ConfigError::Invalid { .. }), "{err:?}");
                err.to_string()
            })
    };
    let refused = |resolved: &Path| {
        Err(format!(
            "invalid config <string>: subagent 'a': working directory {} is not under any of the roots ({}); \
             add a `roots` entry that holds it",
            resolved.display(),
            root.display()
        ))
    };
    assert_eq!(parse("cwd = \"inside\""), Ok(vec![root.clone()]));
    assert_eq!(parse("cwd = \"inside/deeper\""), Ok(vec![root.clone()]));
    assert_eq!(parse("cwd = \"inside/not-yet\""), Ok(vec![root.clone()]));
    let canonical_outside = outside.canonicalize().expect("canonical");
    assert_eq!(parse("cwd = \"outside\""), refused(&canonical_outside));
    assert_eq!(
        parse("cwd = \"inside/escape\""),
        refused(&canonical_outside)
    );
    assert_eq!(
        parse("cwd = \"inside/../outside\""),
        refused(&canonical_outside)
    );
    assert_eq!(
        parse("cwd = \"inside/not-yet/../../outside\""),
        refused(&canonical_outside)
    );
    // No `cwd`: the config's directory, which is not under `inside`.
    let canonical_dir = dir.path().canonicalize().expect("canonical");
    assert_eq!(parse(""), refused(&canonical_dir));

    // Without `roots`, the config's directory is the root.
    let default = ProcessRunnerConfig::from_toml_str(
        "[subagents.a]\ncommand = [\"true\"]\ncwd = \"outside\"\n",
        dir.path(),
    )
    .expect("under the config directory");
    assert_eq!(default.roots, vec![canonical_dir.clone()]);
    let err = ProcessRunnerConfig::from_toml_str(
        "[subagents.a]\ncommand = [\"true\"]\ncwd = \"/\"\n",
        dir.path(),
    )
    .expect_err("outside");
    assert!(
        err.to_string()
            .contains("subagent 'a': working directory / is not under any of the roots"),
        "{err}"
    );
}

// ---- what the output directory keeps ---------------------------------------

#[tokio::test]
async fn a_task_pruned_from_the_history_takes_its_files_along_a_window_later() {
    use asynctask_manager::AsyncTaskManager;
    use asynctask_model::MaxAsyncTasks;
    use asynctask_tools::{KEPT_TASK_FILES, TaskTool, Tool};

    let dir = TempDir::new();
    let out = TempDir::new();
    // It prints a line and writes more variables than its result holds, so the
    // result names both of its files.
    let script = r#"{ printf '{'; i=0; while [ $i -lt 500 ]; do printf '"v%04d":"value %d",' $i $i; i=$((i+1)); done; printf '"z":"end"}'; } > "$ASYNCTASK_VARS_FILE"; echo done"#;
    let command = serde_json::json!(["sh", "-c", script]).to_string();
    let runner = runner_in(dir.path(), "many", &command)
        .with_output_dir(out.path().to_owned())
        .with_inline_budget(1_000);
    // A limit of 1 keeps a history of 2 finished tasks.
    let manager = AsyncTaskManager::new(MaxAsyncTasks::new(1).expect("valid"));
    let tool = TaskTool::new(manager.clone(), Arc::new(runner));
    let files = |id: &str| {
        [
            out.path().join(format!("{id}.out")),
            out.path().join(format!("{id}.vars.json")),
        ]
    };
    let mut ids: Vec<String> = Vec::new();
    for n in 0..KEPT_TASK_FILES + 3 {
        if n == 3 {
            // The first task was pruned when the third ended, but a result
            // named its files: they stay for a long while yet.
            assert!(manager.task(&ids[0]).is_none());
            for file in files(&ids[0]) {
                assert!(file.is_file(), "{} went with its task", file.display());
            }
        }
        let launched = tool
            .execute(
                serde_json::json!({"subagent_name": "many", "goal_prompt": "x", "async": true}),
                CancellationToken::new(),
            )
            .await;
        let id = launched.metadata["agentId"]
            .as_str()
            .expect("launched")
            .to_owned();
        tool.tracker().close();
        within(RUN_DEADLINE, tool.tracker().wait()).await;
        tool.tracker().reopen();
        let task = manager.task(&id).expect("held");
        assert_eq!(task.status(), asynctask_model::AsyncTaskStatus::Completed);
        for file in files(&id) {
            assert!(
                file.is_file(),
                "{} is kept while the task is",
                file.display()
            );
        }
        assert!(manager.mark_notified(&id));
        ids.push(id);
    }
    // KEPT_TASK_FILES tasks were pruned after the first: its files are gone,
    // those of the next are still there.
    for file in files(&ids[0]) {
        assert!(!file.exists(), "{} outlived its window", file.display());
    }
    for id in &ids[1..] {
        for file in files(id) {
            assert!(file.is_file(), "{}", file.display());
        }
    }
}
