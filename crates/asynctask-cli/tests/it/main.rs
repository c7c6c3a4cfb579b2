//! The `asynctask` binary as a user runs it: output, exit codes, one-line errors.

mod database;
mod durable;
mod front;
mod fronts;
mod machines;
mod mcp;
mod owners;
mod roles;
mod trust;
mod worker;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pretty_assertions::assert_eq;

/// Runs the binary. Its working directory (the project, unless `--project`
/// says otherwise) is the directory of the `--config` given, else the
/// system's temporary directory: nothing is made in the source tree.
fn asynctask(args: &[&str]) -> Output {
    let cwd = args
        .iter()
        .position(|arg| *arg == "--config")
        .and_then(|at| args.get(at + 1))
        .and_then(|config| Path::new(config).parent())
        .filter(|dir| dir.is_dir())
        .map_or_else(std::env::temp_dir, Path::to_owned);
    // Only warnings and errors: what a test compares is the command's own text.
    Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .output()
        .expect("the binary runs")
}

/// A fresh database with the fleet's schema, made by `asynctask fleet
/// migrate` as an administrator runs it (fronts and workers never make it).
async fn fleet_database(prefix: &str) -> asynctask_test_support::TestDatabase {
    let db = asynctask_test_support::TestDatabase::create(prefix).await;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(["fleet", "migrate"])
        .current_dir(std::env::temp_dir())
        .env("ASYNCTASK_DATABASE_URL", db.connection_string())
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("the binary runs");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!(
            "created the fleet's schema, version {}\n",
            asynctask_fleet::SCHEMA_VERSION
        )
    );
    db
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub(crate) use asynctask_test_support::{TempDir, temp_dir};

/// A config file in a fresh temporary directory (the directory, and the file in it).
fn config(name: &str, text: &str) -> (TempDir, PathBuf) {
    let dir = temp_dir(name);
    let path = dir.path().join("subagents.toml");
    std::fs::write(&path, text).expect("config written");
    (dir, path)
}

#[test]
fn version_prints_the_name_and_version() {
    let output = asynctask(&["--version"]);
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("asynctask {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn schemas_print_every_tool_or_one() {
    let all = asynctask(&["schemas", "--provider", "openai-chat"]);
    assert!(all.status.success(), "{}", stderr(&all));
    let tools: serde_json::Value = serde_json::from_slice(&all.stdout).unwrap();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "task",
            "check_async_tasks",
            "message_async_task",
            "answer_async_task",
            "todo_pause"
        ]
    );

    let one = asynctask(&["schemas", "--provider", "mcp", "--tool", "task"]);
    let tool: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(tool["annotations"]["destructiveHint"], true);
}

#[test]
fn the_schemas_help_names_every_tool_and_provider() {
    let help = asynctask(&["schemas", "--help"]);
    assert!(help.status.success(), "{}", stderr(&help));
    // Words only: clap wraps the help to the terminal's width.
    let text = String::from_utf8_lossy(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        text.contains(
            "Print only this tool (task, check_async_tasks, message_async_task, answer_async_task, \
             todo_pause; with --provider mcp: those asynctask mcp serves, wait_async_tasks and \
             end_async_task among them)"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "openai-chat, openai-responses, anthropic, anthropic-strict, bedrock, bedrock-strict, \
             gemini, gemini-interactions, gemini-openapi, mcp"
        ),
        "{text}"
    );
}

#[test]
fn bad_input_is_one_clear_line_and_a_failure() {
    let unknown_tool = asynctask(&["schemas", "--provider", "mcp", "--tool", "nope"]);
    assert_eq!(unknown_tool.status.code(), Some(2));
    assert_eq!(
        stderr(&unknown_tool),
        "asynctask: unknown tool 'nope'; expected one of: task, check_async_tasks, \
         message_async_task, answer_async_task, wait_async_tasks, end_async_task\n"
    );

    let unknown_provider = asynctask(&["schemas", "--provider", "bogus"]);
    assert_eq!(unknown_provider.status.code(), Some(2));
    assert!(
        stderr(&unknown_provider)
            .starts_with("error: invalid value 'bogus' for '--provider <PROVIDER>'")
    );

    let tiny_budget = asynctask(&[
        "mcp",
        "--config",
        "/nonexistent/asynctask.toml",
        "--inline-budget",
        "10",
    ]);
    assert_eq!(tiny_budget.status.code(), Some(2));
    assert!(
        stderr(&tiny_budget).starts_with(
            "error: invalid value '10' for '--inline-budget <CHARS>': 10 is not in 1000..=1000000"
        ),
        "{}",
        stderr(&tiny_budget)
    );

    let missing = asynctask(&["run", "--config", "/nonexistent/asynctask.toml", "a", "b"]);
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        stderr(&missing),
        "asynctask: the config /nonexistent/asynctask.toml (--config) does not exist\n"
    );

    let (_dir, broken) = config("broken", "[subagents.x]\ncomand = [\"echo\"]\n");
    let output = asynctask(&["run", "--config", broken.to_str().unwrap(), "x", "goal"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "asynctask: invalid config {} at line 2, column 1: unknown field `comand`, expected \
             one of `command`, `description`, `cwd`, `env`, `inherit_env`, `stdin`, `max_output_bytes`; in \
             `subagents.x`\n",
            broken.display()
        )
    );

    let (_dir, fine) = config("state", "[subagents.x]\ncommand = [\"true\"]\n");
    let output = asynctask(&[
        "mcp",
        "--durable",
        "--config",
        fine.to_str().unwrap(),
        "--state-dir",
        "/dev/null/state",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "asynctask: cannot use the state directory /dev/null/state: Not a directory (os error 20)\n"
    );

    let deep = format!("/tmp/{}", "d".repeat(100));
    for verb in [&["mcp", "--durable"][..], &["supervisor", "status"]] {
        let mut args = verb.to_vec();
        args.extend(["--config", fine.to_str().unwrap(), "--state-dir", &deep]);
        let output = asynctask(&args);
        assert_eq!(output.status.code(), Some(2));
        assert_eq!(
            stderr(&output),
            format!(
                "asynctask: the supervisor's socket {deep}/supervisor.sock would be 121 bytes \
                 long, more than the 107 a Unix socket allows: choose a shorter state directory \
                 with --state-dir\n"
            )
        );
    }
    assert!(
        !Path::new(&deep).exists(),
        "nothing is made for a socket that cannot be"
    );

    let idle = asynctask(&[
        "supervisor",
        "run",
        "--config",
        fine.to_str().unwrap(),
        "--idle-exit",
        "0",
    ]);
    assert_eq!(idle.status.code(), Some(2));
    assert!(
        stderr(&idle).starts_with(
            "error: invalid value '0' for '--idle-exit <SECS>': the supervisor must wait at \
             least 1 second before it exits"
        ),
        "{}",
        stderr(&idle)
    );

    let (_dir, empty) = config("empty", "[subagents.x]\ncommand = []\n");
    let output = asynctask(&["mcp", "--config", empty.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "asynctask: invalid config {} at line 2, column 11: `command` must not be empty: \
             give the program and its arguments; in `subagents.x.command`\n",
            empty.display()
        )
    );
}

#[test]
fn durable_at_the_top_of_the_config_is_the_commands_own_key() {
    let (_dir, durable) = config(
        "durable-key",
        "durable = true\n[subagents.echoer]\ncommand = [\"cat\"]\n",
    );
    let durable = durable.to_str().unwrap();
    // Every command that loads the config accepts the key.
    let ok = asynctask(&["run", "--config", durable, "echoer", "hello"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    // `mcp` then serves durably, as with `--durable`: here it stops at a state
    // directory too deep for the supervisor's socket.
    let deep = format!("/tmp/{}", "d".repeat(100));
    let output = asynctask(&["mcp", "--config", durable, "--state-dir", &deep]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "asynctask: the supervisor's socket {deep}/supervisor.sock would be 121 bytes \
             long, more than the 107 a Unix socket allows: choose a shorter state directory \
             with --state-dir\n"
        )
    );

    let (_dir, mistyped) = config(
        "durable-mistyped",
        "durable = \"yes\"\n[subagents.echoer]\ncommand = [\"cat\"]\n",
    );
    let output = asynctask(&["mcp", "--config", mistyped.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "asynctask: invalid config {} at line 1, column 11: invalid type: string \"yes\", \
             expected a boolean; in `durable`\n",
            mistyped.display()
        )
    );

    let (_dir, unknown) = config(
        "durable-unknown",
        "durabel = true\n[subagents.echoer]\ncommand = [\"cat\"]\n",
    );
    let output = asynctask(&["run", "--config", unknown.to_str().unwrap(), "echoer", "x"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "asynctask: invalid config {} at line 1, column 1: unknown field `durabel`, expected \
             one of `subagents`, `roots`, `inline_budget`, `max_output_bytes`, `durable`, `database`, `workspace`, `workspaces`\n",
            unknown.display()
        )
    );
}

#[test]
fn run_prints_the_completion_json_and_reports_failures() {
    let (_dir, path) = config(
        "run",
        "[subagents.echoer]\ncommand = [\"cat\"]\n[subagents.fails]\ncommand = [\"sh\", \"-c\", \"echo oops >&2; exit 3\"]\n\
         [subagents.vars]\ncommand = [\"sh\", \"-c\", \"echo done; printf '{\\\"answer\\\":\\\"42\\\"}' > $ASYNCTASK_VARS_FILE\"]\n\
         [subagents.slow]\ncommand = [\"sleep\", \"30\"]\n",
    );
    let path = path.to_str().unwrap();

    // For a person: the final message and the variables.
    let ok = asynctask(&["run", "--config", path, "vars", "x"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "done\n\nanswer = 42\n");

    // A goal the task tool refuses: nothing ran, exit status 2 and the reason.
    let blank = asynctask(&["run", "--config", path, "vars", "  "]);
    assert_eq!(blank.status.code(), Some(2), "{}", stderr(&blank));
    assert!(
        stderr(&blank).contains("goal_prompt: must not be blank"),
        "{}",
        stderr(&blank)
    );

    // Past --timeout: ended, exit status 124, the reason on stderr.
    let slow = asynctask(&["run", "--config", path, "--timeout", "1", "slow", "x"]);
    assert_eq!(slow.status.code(), Some(124), "{}", stderr(&slow));
    assert!(
        stderr(&slow).starts_with("asynctask: Subagent 'slow' timed out after 1 seconds"),
        "{}",
        stderr(&slow)
    );

    let ok = asynctask(&[
        "run",
        "--json",
        "--config",
        path,
        "echoer",
        "hello $(whoami)",
    ]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let result: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(result["terminate_reason"], "GOAL");
    assert_eq!(
        result["final_message"], "hello $(whoami)",
        "the goal arrives literally on stdin"
    );

    let failed = asynctask(&["run", "--json", "--config", path, "fails", "x"]);
    assert_eq!(failed.status.code(), Some(1));
    let result: serde_json::Value = serde_json::from_slice(&failed.stdout).unwrap();
    assert_eq!(result["status"], "failed");
    assert_eq!(
        stderr(&failed),
        "asynctask: subagent 'fails' exited with status 3: oops\n"
    );

    let unknown = asynctask(&["run", "--config", path, "nobody", "x"]);
    assert_eq!(unknown.status.code(), Some(2), "asynctask could not run it");
    assert!(
        stderr(&unknown).ends_with("configured: echoer, fails, slow, vars\n"),
        "{}",
        stderr(&unknown)
    );
}

#[test]
fn run_keeps_the_output_file_it_names() {
    let (dir, path) = config(
        "run-long",
        "[subagents.long]\ncommand = [\"sh\", \"-c\", \"seq 1 40000\"]\n",
    );
    let path = path.to_str().unwrap();
    let whole = |output: &std::process::Output| -> std::path::PathBuf {
        assert!(output.status.success(), "{}", stderr(output));
        let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let message = result["final_message"].as_str().unwrap().to_owned();
        let pointer = message.lines().last().unwrap();
        let file = pointer
            .strip_prefix("[whole output: ")
            .and_then(|rest| rest.split(" (").next())
            .unwrap_or_else(|| panic!("{pointer}"));
        std::path::PathBuf::from(file)
    };

    // By default in the project's state directory, and still there after
    // the command exited.
    let file = whole(&asynctask(&[
        "run", "--json", "--config", path, "long", "x",
    ]));
    assert!(
        file.starts_with(dir.path().canonicalize().unwrap().join(".asynctask/runs")),
        "{}",
        file.display()
    );
    let text = std::fs::read_to_string(&file).expect("the output file outlives the command");
    assert!(text.starts_with("1\n2\n") && text.ends_with("40000\n"));

    let elsewhere = dir.path().join("mine");
    let file = whole(&asynctask(&[
        "run",
        "--json",
        "--config",
        path,
        "--output-dir",
        elsewhere.to_str().unwrap(),
        "long",
        "x",
    ]));
    assert!(file.starts_with(&elsewhere), "{}", file.display());
    assert!(file.is_file());
}

#[test]
fn run_leaves_no_output_file_its_result_does_not_name() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, path) = config(
        "run-short",
        "[subagents.short]\ncommand = [\"sh\", \"-c\", \"echo done\"]\n\
         [subagents.silent]\ncommand = [\"sh\", \"-c\", \"exit 3\"]\n",
    );
    let path = path.to_str().unwrap();
    let files = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .expect("the directory is there")
            .map(|entry| entry.expect("an entry").path())
            .collect()
    };

    let ok = asynctask(&["run", "--json", "--config", path, "short", "x"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let result: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(result["final_message"], "done", "no file named");
    assert_eq!(
        files(&dir.path().join(".asynctask/runs")),
        Vec::<std::path::PathBuf>::new()
    );

    // A directory given that does not exist is made private to its owner.
    let mine = dir.path().join("mine").join("outputs");
    let failed = asynctask(&[
        "run",
        "--config",
        path,
        "--output-dir",
        mine.to_str().unwrap(),
        "silent",
        "x",
    ]);
    assert_eq!(failed.status.code(), Some(1));
    assert_eq!(files(&mine), Vec::<std::path::PathBuf>::new());
    let mode = std::fs::metadata(&mine).expect("made").permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
}

#[test]
fn the_demo_runs_with_a_users_config() {
    // Fast stand-ins for the bundled subagents' roles, so the session is quick.
    let (_dir, path) = config(
        "demo",
        "[subagents.a]\ncommand = [\"sh\", \"-c\", \"sleep 0.2; echo found it\"]\n\
         [subagents.b]\ncommand = [\"sh\", \"-c\", \"sleep 0.4; echo passed\"]\n\
         [subagents.c]\ncommand = [\"sh\", \"-c\", \"sleep 0.6; echo broken >&2; exit 1\"]\n\
         [subagents.d]\ncommand = [\"sleep\", \"30\"]\n",
    );
    let output = asynctask(&["demo", "--config", path.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let transcript = String::from_utf8_lossy(&output.stdout);
    assert!(
        transcript.contains("\"final_message\": \"found it\""),
        "{transcript}"
    );
    assert!(
        transcript.contains("exited with status 1: broken"),
        "{transcript}"
    );
    assert!(transcript.contains("Cancelled task: "), "{transcript}");
    assert!(
        transcript.contains("(d) cancelled — a cancel alone wakes nobody"),
        "{transcript}"
    );
    assert!(!transcript.contains("unexpected wake-up"), "{transcript}");
}

#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    let (_dir, path) = config(
        "pipe",
        "[subagents.a]\ncommand = [\"true\"]\n[subagents.b]\ncommand = [\"true\"]\n\
         [subagents.c]\ncommand = [\"true\"]\n[subagents.d]\ncommand = [\"sleep\", \"30\"]\n",
    );
    for args in [
        &["schemas", "--provider", "mcp"][..],
        &["demo", "--config", path.to_str().unwrap()],
        &["man"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_asynctask"))
            .args(args)
            .current_dir(std::env::temp_dir())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("started");
        // The reader goes away before the command writes: `| true`.
        drop(child.stdout.take());
        let output = child.wait_with_output().expect("ended");
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(!stderr(&output).contains("panicked"), "{}", stderr(&output));
    }
}

#[test]
fn logs_follow_v_q_and_rust_log() {
    let (dir, _path) = config("logs", "[subagents.a]\ncommand = [\"true\"]\n");
    let run = |args: &[&str], rust_log: Option<&str>| -> String {
        let mut command = Command::new(env!("CARGO_BIN_EXE_asynctask"));
        command
            .args(args)
            .args(["mcp", "--config", "subagents.toml"])
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null());
        match rust_log {
            Some(value) => command.env("RUST_LOG", value),
            None => command.env_remove("RUST_LOG"),
        };
        stderr(&command.output().expect("ran"))
    };
    let info = run(&[], None);
    assert!(
        info.contains(" INFO ") && info.contains("waiting for the client"),
        "{info}"
    );
    assert!(
        !run(&["-q"], None).contains("INFO"),
        "-q: warnings and errors only"
    );
    let debug = run(&["-v"], None);
    assert!(
        debug.contains("DEBUG") || debug.contains("asynctask_cli"),
        "{debug}"
    );
    assert!(
        !run(&["-v"], Some("warn")).contains("INFO"),
        "RUST_LOG wins"
    );
}

#[test]
fn flag_errors_name_the_flag() {
    let output = asynctask(&["mcp", "--max-async-tasks", "0"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).starts_with(
            "error: invalid value '0' for '--max-async-tasks <N>': must be -1 (unlimited) or an \
             integer from 1 to 100"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn config_path_doctor_completions_and_man() {
    let dir = temp_dir("doctor");
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("src")).expect("mkdir");
    std::fs::write(
        project.join("asynctask.toml"),
        "[subagents.ok]\ncommand = [\"sh\", \"-c\", \"true\"]\n\
         [subagents.missing]\ncommand = [\"no-such-program-anywhere\"]\n",
    )
    .expect("written");
    let in_src = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_asynctask"))
            .args(args)
            .current_dir(project.join("src"))
            .env_remove("ASYNCTASK_CONFIG")
            .env("XDG_CONFIG_HOME", dir.path().join("xdg"))
            .env("XDG_STATE_HOME", dir.path().join("state"))
            .output()
            .expect("ran")
    };
    let trust = in_src(&["trust"]);
    assert!(trust.status.success(), "{}", stderr(&trust));
    let path = in_src(&["config", "path"]);
    assert!(path.status.success(), "{}", stderr(&path));
    let project = project.canonicalize().expect("canonical");
    assert_eq!(
        String::from_utf8_lossy(&path.stdout),
        format!("{}\n", project.join("asynctask.toml").display())
    );
    assert_eq!(
        stderr(&path),
        "asynctask: found by the project's asynctask.toml (trusted)\n"
    );

    let doctor = in_src(&["doctor"]);
    assert_eq!(doctor.status.code(), Some(1), "a problem was found");
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        report.contains("ok:      subagent 'ok': sh is "),
        "{report}"
    );
    assert!(
        report
            .contains("problem: subagent 'missing': no-such-program-anywhere is not an executable"),
        "{report}"
    );
    assert!(report.contains("clients run `"), "{report}");

    let bash = in_src(&["completions", "bash"]);
    assert!(
        bash.status.success() && String::from_utf8_lossy(&bash.stdout).contains("_asynctask()")
    );
    let man = in_src(&["man"]);
    assert!(man.status.success() && String::from_utf8_lossy(&man.stdout).contains(".TH asynctask"));
}

/// Sends `signal` to process `pid`.
fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    nix::sys::signal::kill(pid, signal).expect("signalled");
}

/// Task `id`'s status, as the fleet holds it.
async fn status_of(front: &asynctask_fleet::Fleet, id: &str) -> asynctask_model::AsyncTaskStatus {
    front
        .task(id)
        .await
        .expect("read")
        .expect("exists")
        .info
        .status
}
