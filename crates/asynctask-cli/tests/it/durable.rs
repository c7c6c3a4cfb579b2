//! Durable state as a user meets it: one clear line for a state directory
//! that cannot be, a supervisor's own error when it cannot start, a status
//! that changes nothing, output files that do not pile up across restarts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use asynctask_manager::{Journal, JournalEntry};
use asynctask_store::Store;
use pretty_assertions::assert_eq;

use crate::{stderr, temp_dir};

/// Runs the binary in `cwd`, with only warnings and errors logged, and the
/// user's trust store in `cwd/.xdg-state`.
fn asynctask_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .env("XDG_STATE_HOME", cwd.join(".xdg-state"))
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

/// Writes the project's config in `dir` and trusts it (in the store
/// [`asynctask_in`] gives commands run in `dir`).
fn write_config(dir: &Path) -> PathBuf {
    let path = dir.join("asynctask.toml");
    std::fs::write(&path, "[subagents.quick]\ncommand = [\"echo\", \"hi\"]\n").expect("written");
    let trusted = asynctask_in(dir, &["trust"]);
    assert!(trusted.status.success(), "{}", stderr(&trusted));
    path
}

#[test]
fn a_relative_state_dir_is_checked_once_as_the_absolute_path_it_is() {
    let dir = temp_dir("rel");
    // Short as given, too long for a socket once absolute.
    let deep = dir.path().join("d".repeat(90));
    std::fs::create_dir(&deep).expect("mkdir");
    write_config(&deep);
    let output = asynctask_in(&deep, &["mcp", "--durable", "--state-dir", "s"]);
    assert_eq!(output.status.code(), Some(2));
    let socket = deep.join("s").join("supervisor.sock");
    assert_eq!(
        stderr(&output),
        format!(
            "asynctask: the supervisor's socket {} would be {} bytes long, more than the 107 a \
             Unix socket allows: choose a shorter state directory with --state-dir\n",
            socket.display(),
            socket.as_os_str().len()
        )
    );
    assert!(!deep.join("s").exists(), "no supervisor was started");
}

#[test]
fn a_supervisor_that_cannot_start_is_shown_with_its_own_error_once() {
    let dir = temp_dir("nostart");
    write_config(dir.path());
    let state = dir.path().join("state");
    // A store the supervisor cannot open: its file is a directory.
    std::fs::create_dir_all(state.join("tasks.db")).expect("mkdir");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let started = std::time::Instant::now();
    let output = asynctask_in(dir.path(), &["mcp", "--durable", "--state-dir", "state"]);
    assert_eq!(output.status.code(), Some(2));
    let text = stderr(&output);
    assert!(
        text.starts_with(&format!(
            "asynctask: the supervisor started for {} exited (exit status: 2) before it served: \
             asynctask: ",
            state.display()
        )) && text.contains("tasks.db"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "not retried until the deadline"
    );
}

#[test]
fn status_changes_nothing_and_says_whose_workspace_it_is() {
    let dir = temp_dir("status");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    {
        let (store, _) = Store::open(state.join("tasks.db")).expect("a store");
        store
            .record(&[JournalEntry::Registered {
                id: "3f2a09c1-0000",
                subagent_name: "quick",
                goal_prompt: "go",
                launched_at: 1_000,
                origin: None,
                queued: false,
                launch: None,
            }])
            .expect("recorded");
    }
    let listing = |dir: &Path| -> Vec<(String, std::time::SystemTime)> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("listed")
            .map(|entry| {
                let entry = entry.expect("an entry");
                let modified = entry.metadata().expect("stat").modified().expect("mtime");
                (entry.file_name().to_string_lossy().into_owned(), modified)
            })
            .collect();
        entries.sort();
        entries
    };
    let before = listing(&state);
    let state_arg = state.to_str().expect("UTF-8");
    let human = asynctask_in(
        dir.path(),
        &["supervisor", "status", "--state-dir", state_arg],
    );
    assert!(human.status.success(), "{}", stderr(&human));
    assert_eq!(
        String::from_utf8_lossy(&human.stdout),
        format!(
            "supervisor: not running\nstate:      {}\ntasks:      1\n  3f2a09c1  quick  interrupted  not delivered yet\n",
            state.display()
        )
    );
    let json = asynctask_in(
        dir.path(),
        &["supervisor", "status", "--json", "--state-dir", state_arg],
    );
    let status: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(status["tasks"][0]["status"], "interrupted");
    assert_eq!(listing(&state), before, "status created or changed nothing");

    let missing = asynctask_in(
        dir.path(),
        &[
            "supervisor",
            "status",
            "--config",
            "/nonexistent/asynctask.toml",
            "--state-dir",
            state_arg,
        ],
    );
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        stderr(&missing),
        "asynctask: the config /nonexistent/asynctask.toml (--config) does not exist\n"
    );

    // A workspace another user owns: said so, whatever runs there.
    let theirs = if am_root() {
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).expect("mkdir");
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown as root");
        theirs
    } else {
        // Root's, seen from any other user.
        PathBuf::from("/")
    };
    let output = asynctask_in(
        dir.path(),
        &[
            "supervisor",
            "status",
            "--state-dir",
            theirs.to_str().expect("UTF-8"),
        ],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains(&format!("{} belongs to another user", theirs.display())),
        "{}",
        stderr(&output)
    );
}

fn am_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

#[test]
fn a_starting_supervisor_removes_the_output_files_no_stored_task_owns() {
    let dir = temp_dir("outputs");
    write_config(dir.path());
    let state = dir.path().join(".asynctask");
    let outputs = state.join("outputs");
    std::fs::create_dir_all(&outputs).expect("mkdir");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    {
        let (store, _) = Store::open(state.join("tasks.db")).expect("a store");
        store
            .record(&[JournalEntry::Registered {
                id: "kept-task",
                subagent_name: "quick",
                goal_prompt: "go",
                launched_at: 1_000,
                origin: None,
                queued: false,
                launch: None,
            }])
            .expect("recorded");
    }
    // What 20 killed supervisors left: files of tasks the store no longer holds.
    for i in 0..20 {
        std::fs::write(outputs.join(format!("gone-{i}.out")), "x").expect("written");
    }
    std::fs::write(outputs.join("gone-0.vars.json"), "{}").expect("written");
    std::fs::write(outputs.join("kept-task.out"), "x").expect("written");
    std::fs::write(outputs.join("notes.txt"), "mine").expect("written");
    let output = Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(["supervisor", "run", "--idle-exit", "1"])
        .current_dir(dir.path())
        .env("XDG_STATE_HOME", dir.path().join(".xdg-state"))
        .stdin(Stdio::null())
        .output()
        .expect("the supervisor runs and ends once idle");
    assert!(output.status.success(), "{}", stderr(&output));
    let mut left: Vec<String> = std::fs::read_dir(&outputs)
        .expect("listed")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    left.sort();
    assert_eq!(left, ["kept-task.out", "notes.txt"]);
}
