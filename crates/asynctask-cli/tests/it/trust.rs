//! Trust as a user meets it: a project's asynctask.toml runs only once the
//! user trusted its content, a planted one never, the project is where the
//! config is, and a durable supervisor never runs an edit not trusted.
//!
//! Every command runs as a user whose home is in a temporary directory
//! (`HOME`, and the XDG directories under it): the real home is never read
//! or written.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::{TempDir, stderr, temp_dir};

/// A user with a home of their own, in a temporary directory.
struct User {
    dir: TempDir,
}

impl User {
    fn new(name: &str) -> User {
        let user = User {
            dir: temp_dir(&format!("trust-{name}")),
        };
        std::fs::create_dir_all(user.home()).expect("home made");
        user
    }

    /// The user's home (resolved).
    fn home(&self) -> PathBuf {
        self.dir
            .path()
            .canonicalize()
            .expect("canonical")
            .join("home")
    }

    /// A project directory in the home, made, resolved.
    fn project(&self, name: &str) -> PathBuf {
        let path = self.home().join(name);
        std::fs::create_dir_all(&path).expect("project made");
        path
    }

    /// The binary as this user, in `cwd`.
    fn command(&self, cwd: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_asynctask"));
        command
            .args(args)
            .current_dir(cwd)
            .env("HOME", self.home())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_STATE_HOME")
            .env_remove("ASYNCTASK_CONFIG")
            .env_remove("ASYNCTASK_DATABASE_URL")
            .env_remove("ASYNCTASK_DEPTH")
            .env("RUST_LOG", "info");
        command
    }

    fn run(&self, cwd: &Path, args: &[&str]) -> Output {
        self.command(cwd, args)
            .stdin(Stdio::null())
            .output()
            .expect("the binary runs")
    }

    /// Runs `args`, which must succeed.
    fn ok(&self, cwd: &Path, args: &[&str]) -> Output {
        let output = self.run(cwd, args);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        output
    }

    /// An MCP session with `asynctask mcp` (and `extra` arguments) in `cwd`.
    fn session(&self, cwd: &Path, extra: &[&str]) -> Session {
        let mut child = self
            .command(cwd, &[&["mcp"], extra].concat())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server starts");
        let stdout = child.stdout.take().expect("piped");
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(value) = serde_json::from_str::<Value>(&line) else {
                    break;
                };
                if sender.send(value).is_err() {
                    break;
                }
            }
        });
        let mut session = Session {
            stdin: child.stdin.take(),
            child,
            lines,
            next_id: 0,
        };
        session.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "trust-test", "version": "0"},
            }),
        );
        session.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        session
    }
}

/// A raw JSON-RPC session with a server.
struct Session {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<Value>,
    next_id: u64,
}

impl Session {
    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("open");
        writeln!(stdin, "{message}").expect("written");
        stdin.flush().expect("flushed");
    }

    /// Sends a request and waits for its response.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let message = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .expect("the response arrives");
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    /// The `task` tool's description, from `tools/list`.
    fn task_description(&mut self) -> String {
        let tools = self.request("tools/list", json!({}));
        tools["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .find(|tool| tool["name"] == "task")
            .and_then(|tool| tool["description"].as_str())
            .expect("the task tool")
            .to_owned()
    }

    /// Calls `task` synchronously: its text, and whether it is an error.
    fn task(&mut self, subagent: &str, goal: &str) -> (String, bool) {
        let response = self.request(
            "tools/call",
            json!({"name": "task", "arguments": {"subagent_name": subagent, "goal_prompt": goal}}),
        );
        let text = response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (text, response["result"]["isError"] == json!(true))
    }

    /// Ends the session: closes stdin, waits for the server to exit.
    fn end(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("the server exits");
        assert!(status.success(), "{status}");
    }
}

/// The `initialize` answer's instructions of a fresh session in `cwd`.
fn instructions(user: &User, cwd: &Path) -> String {
    let mut child = user
        .command(cwd, &["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let mut stdin = child.stdin.take().expect("piped");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "trust-test", "version": "0"}}})
    )
    .expect("written");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("an answer");
    drop(stdin);
    assert!(child.wait().expect("exits").success());
    let answer: Value = serde_json::from_str(&line).expect("JSON");
    answer["result"]["instructions"]
        .as_str()
        .expect("instructions")
        .to_owned()
}

/// A config whose subagent `mark` writes the file its goal names, and `pwd`
/// prints where it runs.
const MARKING_CONFIG: &str = "\
[subagents.mark]
description = \"Marks the file its goal names\"
command = [\"sh\", \"-c\", \"echo marked > \\\"$ASYNCTASK_GOAL\\\"; echo marked\"]

[subagents.pwd]
description = \"Says where it runs\"
command = [\"pwd\"]
";

#[test]
fn an_untrusted_project_config_is_inert_until_trusted_and_again_once_edited() {
    let user = User::new("inert");
    let project = user.project("work/app");
    let config = project.join("asynctask.toml");
    std::fs::write(&config, MARKING_CONFIG).expect("written");
    let marker = project.join("marker");
    let marker = marker.to_str().expect("UTF-8");

    let path = user.ok(&project, &["config", "path"]);
    assert_eq!(
        String::from_utf8_lossy(&path.stdout),
        format!("{}\n", config.display())
    );
    assert!(
        stderr(&path).contains(&format!(
            "the project's config {} is untrusted: read it, then run `asynctask trust` in the \
             project to use it",
            config.display()
        )),
        "{}",
        stderr(&path)
    );

    // Untrusted: the session starts, offers nothing of it, and says why.
    let untrusted_instructions = instructions(&user, &project);
    let mut session = user.session(&project, &[]);
    let description = session.task_description();
    assert!(
        !description.contains("mark") && description.contains("asynctask trust"),
        "{description}"
    );
    let (refusal, is_error) = session.task("mark", marker);
    assert!(is_error, "{refusal}");
    session.end();
    assert!(!Path::new(marker).exists(), "nothing of the file ran");
    insta::assert_snapshot!(
        "untrusted_project_config",
        format!(
            "--- instructions\n{untrusted_instructions}\n--- task description\n{description}\n\
             --- task naming a subagent of the untrusted file\n{refusal}"
        )
    );
    let doctor = user.run(&project, &["doctor"]);
    assert_eq!(doctor.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&doctor.stdout).contains(&format!(
            "problem: the project's config {} is untrusted",
            config.display()
        )),
        "{}",
        String::from_utf8_lossy(&doctor.stdout)
    );

    // Trusted: used.
    let trusted = user.ok(&project, &["trust"]);
    assert_eq!(
        stderr(&trusted),
        format!(
            "asynctask: trusted {} as it is now (subagents: mark, pwd); after a change, run \
             `asynctask trust` again\n",
            config.display()
        )
    );
    let path = user.ok(&project, &["config", "path"]);
    assert_eq!(
        stderr(&path),
        "asynctask: found by the project's asynctask.toml (trusted)\n"
    );
    let mut session = user.session(&project, &[]);
    assert!(
        session
            .task_description()
            .contains("- mark: Marks the file")
    );
    let (result, is_error) = session.task("mark", marker);
    assert!(!is_error && result.contains("marked"), "{result}");
    session.end();
    assert!(Path::new(marker).exists());
    std::fs::remove_file(marker).expect("removed");

    // Edited: untrusted again until trusted anew.
    std::fs::write(&config, format!("{MARKING_CONFIG}# an edit\n")).expect("written");
    let path = user.ok(&project, &["config", "path"]);
    assert!(
        stderr(&path).contains("is changed since trusted: read it, then run `asynctask trust`"),
        "{}",
        stderr(&path)
    );
    let mut session = user.session(&project, &[]);
    let description = session.task_description();
    assert!(
        !description.contains("- mark") && description.contains("changed since the user trusted"),
        "{description}"
    );
    let (refusal, is_error) = session.task("mark", marker);
    assert!(is_error && refusal.contains("changed since"), "{refusal}");
    session.end();
    assert!(!Path::new(marker).exists(), "the edit did not run");

    user.ok(&project, &["trust"]);
    let untrusted = user.ok(&project, &["untrust"]);
    assert_eq!(
        stderr(&untrusted),
        format!("asynctask: {} is no longer trusted\n", config.display())
    );
    let path = user.ok(&project, &["config", "path"]);
    assert!(stderr(&path).contains("is untrusted"), "{}", stderr(&path));
}

#[test]
fn a_config_planted_where_others_may_write_is_never_loaded() {
    use std::os::unix::fs::PermissionsExt;
    let user = User::new("planted");
    // A shared directory (as /tmp): world-writable, sticky.
    let shared = user.project("shared");
    let project = user.project("shared/victim");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let planted = shared.join("asynctask.toml");
    std::fs::write(&planted, MARKING_CONFIG).expect("planted");
    let marker = project.join("marker");

    let trust = user.run(&project, &["trust"]);
    assert_eq!(trust.status.code(), Some(2));
    assert_eq!(
        stderr(&trust),
        format!(
            "asynctask: the config {} is not safe: other users may write {}, so it is never \
             loaded\n",
            planted.display(),
            shared.display()
        )
    );
    let mut session = user.session(&project, &[]);
    let description = session.task_description();
    assert!(
        !description.contains("mark") && description.contains("never loaded"),
        "{description}"
    );
    let (refusal, is_error) = session.task("mark", marker.to_str().expect("UTF-8"));
    assert!(is_error, "{refusal}");
    session.end();
    assert!(!marker.exists(), "nothing of the planted file ran");
    let doctor = String::from_utf8_lossy(&user.run(&project, &["doctor"]).stdout).into_owned();
    assert!(
        doctor.contains(&format!(
            "problem: the project's config {} is not safe: other users may write {}",
            planted.display(),
            shared.display()
        )),
        "{doctor}"
    );
}

#[test]
fn discovery_stops_at_the_repository_root_and_at_home() {
    let user = User::new("stops");
    let repo = user.project("work/repo");
    std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
    std::fs::create_dir_all(repo.join("src")).expect("mkdir");
    let above_repo = user.home().join("work/asynctask.toml");
    std::fs::write(&above_repo, MARKING_CONFIG).expect("written");
    user.ok(&repo, &["trust", above_repo.to_str().expect("UTF-8")]);
    let path = user.run(&repo.join("src"), &["config", "path"]);
    assert_eq!(path.status.code(), Some(2), "{}", stderr(&path));
    assert!(
        stderr(&path).starts_with("asynctask: no subagents config"),
        "{}",
        stderr(&path)
    );
    // Above home: never looked at, even outside a repository.
    let home_parent = user.home().parent().expect("a parent").to_owned();
    std::fs::write(home_parent.join("asynctask.toml"), MARKING_CONFIG).expect("written");
    let elsewhere = user.project("elsewhere");
    let path = user.run(&elsewhere, &["config", "path"]);
    assert_eq!(path.status.code(), Some(2), "{}", stderr(&path));
}

#[test]
fn the_project_is_where_the_config_is() {
    let user = User::new("anchor");
    let project = user.project("work/app");
    let deep = project.join("src/deep");
    std::fs::create_dir_all(&deep).expect("mkdir");
    std::fs::write(project.join("asynctask.toml"), MARKING_CONFIG).expect("written");
    user.ok(&deep, &["trust"]);
    let mut session = user.session(&deep, &[]);
    let (result, is_error) = session.task("pwd", "where");
    assert!(!is_error, "{result}");
    let completion: Value = serde_json::from_str(&result).expect("JSON");
    assert_eq!(
        completion["final_message"],
        json!(project.display().to_string())
    );
    session.end();
    let doctor = String::from_utf8_lossy(&user.run(&deep, &["doctor"]).stdout).into_owned();
    assert!(
        doctor.contains(&format!(
            "ok:      project: {} (where its asynctask.toml is; looked from {})",
            project.display(),
            deep.display()
        )),
        "{doctor}"
    );
}

#[test]
fn init_writes_a_starter_config_and_trusts_it_but_never_over_one() {
    let user = User::new("init");
    let project = user.project("work/app");
    let init = user.ok(&project, &["init"]);
    let config = project.join("asynctask.toml");
    assert_eq!(
        stderr(&init),
        format!(
            "asynctask: wrote {} and trusted it; after you edit it, run `asynctask trust` again\n",
            config.display()
        )
    );
    let path = user.ok(&project, &["config", "path"]);
    assert_eq!(
        stderr(&path),
        "asynctask: found by the project's asynctask.toml (trusted)\n"
    );
    let mut session = user.session(&project, &[]);
    assert!(
        session
            .task_description()
            .contains("- tests: Runs the project's tests")
    );
    session.end();
    let again = user.run(&project, &["init"]);
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(
        stderr(&again),
        format!(
            "asynctask: {} exists already: asynctask init writes a new config only\n",
            config.display()
        )
    );
}

#[test]
fn without_any_config_the_server_still_serves_and_says_so() {
    let user = User::new("none");
    let project = user.project("work/empty");
    let instructions = instructions(&user, &project);
    let mut session = user.session(&project, &[]);
    let description = session.task_description();
    let (refusal, is_error) = session.task("anything", "go");
    assert!(is_error, "{refusal}");
    session.end();
    insta::assert_snapshot!(
        "no_config",
        format!(
            "--- instructions\n{instructions}\n--- task description\n{description}\n\
             --- task\n{refusal}"
        )
    );
}

#[test]
fn the_database_comes_from_the_user_before_any_file() {
    let user = User::new("database");
    let project = user.project("work/app");
    let config = project.join("asynctask.toml");
    // A project's `database` the user never trusted is not even read.
    std::fs::write(
        &config,
        format!("database = \"not a database url\"\n{MARKING_CONFIG}"),
    )
    .expect("written");
    let mut session = user.session(&project, &[]);
    assert!(session.task_description().contains("asynctask trust"));
    session.end();
    // Trusted, it counts, after the variable: the variable's bad URL is the
    // one refused (the file's would be too).
    std::fs::write(
        &config,
        format!("database = \"postgresql://file-host/db\"\n{MARKING_CONFIG}"),
    )
    .expect("written");
    user.ok(&project, &["trust"]);
    let output = user
        .command(&project, &["mcp"])
        .env("ASYNCTASK_DATABASE_URL", "host=env-host port=notaport")
        .stdin(Stdio::null())
        .output()
        .expect("ran");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("port"), "{}", stderr(&output));
}

/// Stops the project's supervisor when dropped (the test's end, or a failed
/// assertion).
struct StopSupervisor<'a>(&'a User, PathBuf);

impl Drop for StopSupervisor<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&self.1, &["supervisor", "stop"]);
    }
}

#[test]
fn a_durable_supervisor_runs_only_trusted_content_after_an_edit() {
    let user = User::new("durable");
    let project = user.project("app");
    let config = project.join("asynctask.toml");
    let version = |n: &str| {
        format!(
            "[subagents.which]\ndescription = \"Says which version runs\"\ncommand = [\"echo\", \
             \"{n}\"]\n"
        )
    };
    std::fs::write(&config, version("one")).expect("written");
    user.ok(&project, &["trust"]);
    let _stop = StopSupervisor(&user, project.clone());
    let mut session = user.session(&project, &["--durable"]);
    let (result, _) = session.task("which", "go");
    assert!(result.contains("\"final_message\": \"one\""), "{result}");
    session.end();

    // An edit (a model's, a subagent's): not trusted, so it never runs.
    std::fs::write(&config, version("two-edited")).expect("written");
    let mut session = user.session(&project, &["--durable"]);
    let description = session.task_description();
    let (result, _) = session.task("which", "go");
    session.end();
    assert!(result.contains("\"final_message\": \"one\""), "{result}");
    assert!(
        description.contains("- which: Says which version runs")
            && description.contains("The subagents listed run as they were when it was trusted"),
        "{description}"
    );
    let log = std::fs::read_to_string(project.join(".asynctask/supervisor.log")).expect("a log");
    assert!(
        log.contains(&format!(
            "{} changed since it was trusted: its new content waits for `asynctask trust`",
            config.display()
        )),
        "{log}"
    );
    let doctor = String::from_utf8_lossy(&user.run(&project, &["doctor"]).stdout).into_owned();
    assert!(doctor.contains("is changed since trusted"), "{doctor}");

    // Trusted: the next run runs it.
    user.ok(&project, &["trust"]);
    let mut session = user.session(&project, &["--durable"]);
    let (result, _) = session.task("which", "go");
    session.end();
    assert!(
        result.contains("\"final_message\": \"two-edited\""),
        "{result}"
    );
}

#[test]
fn a_symlinked_config_never_borrows_the_trust_of_the_file_it_points_to() {
    let user = User::new("symlink");
    let good = user.project("good");
    std::fs::write(good.join("asynctask.toml"), MARKING_CONFIG).expect("written");
    user.ok(&good, &["trust"]);
    // Another repository commits a link to the trusted file: its subagents
    // would run there.
    let evil = user.project("evil");
    std::os::unix::fs::symlink(good.join("asynctask.toml"), evil.join("asynctask.toml"))
        .expect("linked");
    let path = user.ok(&evil, &["config", "path"]);
    assert!(
        stderr(&path).contains("is untrusted: read it, then run `asynctask trust`"),
        "{}",
        stderr(&path)
    );
    let marker = evil.join("marker");
    let mut session = user.session(&evil, &[]);
    let (refusal, is_error) = session.task("mark", marker.to_str().expect("UTF-8"));
    session.end();
    assert!(is_error, "{refusal}");
    assert!(!marker.exists(), "nothing ran in the linking repository");
    // Trusted where it stands, it is the user's choice.
    user.ok(&evil, &["trust"]);
    let mut session = user.session(&evil, &[]);
    let (result, is_error) = session.task("pwd", "go");
    session.end();
    assert!(
        !is_error && result.contains(&*evil.to_string_lossy()),
        "{result}"
    );
}

#[test]
fn a_durable_supervisor_stops_serving_a_config_the_user_untrusted() {
    let user = User::new("untrust");
    let project = user.project("app");
    std::fs::write(
        project.join("asynctask.toml"),
        "[subagents.which]\ndescription = \"Says it ran\"\ncommand = [\"echo\", \"ran\"]\n",
    )
    .expect("written");
    user.ok(&project, &["trust"]);
    let _stop = StopSupervisor(&user, project.clone());
    let mut session = user.session(&project, &["--durable"]);
    let (result, _) = session.task("which", "go");
    assert!(result.contains("\"final_message\": \"ran\""), "{result}");
    // Untrusted while the supervisor runs: its next run runs nothing of it.
    user.ok(&project, &["untrust"]);
    let (refusal, is_error) = session.task("which", "go");
    assert!(
        is_error && !refusal.contains("\"final_message\""),
        "{refusal}"
    );
    // Trusted again: served again.
    user.ok(&project, &["trust"]);
    let (result, _) = session.task("which", "go");
    session.end();
    assert!(result.contains("\"final_message\": \"ran\""), "{result}");
}
