//! Who may do what in a durable workspace, with real fronts and a real
//! supervisor: each session acts on the tasks it launched or adopted, a
//! nested one never on a shallower session's; a subagent whose depth is lost
//! fails closed; the relay passes on no notification of its own from a
//! client; the front talks only to a supervisor of its own user; the state
//! directory's files are private.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use asynctask_test_support::{TempDir, eventually};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::temp_dir;

/// `asker` asks a question, then reports its answer and the next message it
/// reads; `sleeper` runs until it is ended; `quick` ends at once.
const CONFIG: &str = r#"
[subagents.asker]
stdin = "jsonl"
command = ["sh", "-c", "read -r goal; printf '%s\n' '{\"type\":\"question\",\"text\":\"Allow the deploy?\",\"choices\":[\"allow\",\"deny\"]}' > \"$ASYNCTASK_QUESTIONS\"; read -r answer; read -r message; echo \"got $answer then $message\""]

[subagents.sleeper]
command = ["sh", "-c", "exec sleep 600"]

[subagents.quick]
command = ["sh", "-c", "echo quick done"]
"#;

/// How long a test waits for one answer, or for a state to be reached.
const WITHIN: Duration = Duration::from_secs(30);

/// A project, its config and its state directory; its supervisor is stopped
/// when it is dropped.
struct Workspace {
    dir: TempDir,
}

impl Workspace {
    fn new(name: &str) -> Self {
        let dir = temp_dir(name);
        std::fs::create_dir(dir.path().join("project")).expect("mkdir");
        std::fs::write(dir.path().join("asynctask.toml"), CONFIG).expect("written");
        Workspace { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn state(&self) -> PathBuf {
        self.path("s")
    }

    /// A session of the workspace, its front's environment set as `env`
    /// says (neither `ASYNCTASK_DEPTH` nor `ASYNCTASK_TASK_ID` otherwise).
    fn session(&self, env: &[(&str, &str)]) -> Session {
        let mut front = Command::new(env!("CARGO_BIN_EXE_asynctask"));
        front
            .arg("mcp")
            .arg("--durable")
            .arg("--config")
            .arg(self.path("asynctask.toml"))
            .arg("--state-dir")
            .arg(self.state())
            .arg("--project")
            .arg(self.path("project"))
            .env("RUST_LOG", "warn")
            .env_remove("ASYNCTASK_DEPTH")
            .env_remove("ASYNCTASK_TASK_ID")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        Session::start(front)
    }

    /// `asynctask supervisor <verb>` on the workspace.
    fn supervisor(&self, verb: &str) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_asynctask"))
            .args(["supervisor", verb, "--state-dir"])
            .arg(self.state())
            .stdin(Stdio::null())
            .output()
            .expect("the binary runs")
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // Ends every task and the supervisor (a no-op when none runs).
        let _ = self.supervisor("stop");
    }
}

/// An MCP client on a front's stdio.
struct Session {
    front: Child,
    stdin: Option<ChildStdin>,
    messages: mpsc::Receiver<Value>,
    next_id: u64,
}

impl Session {
    /// Starts `front` and opens the MCP session.
    fn start(mut front: Command) -> Self {
        let mut front = front.spawn().expect("the front starts");
        let stdout = front.stdout.take().expect("piped");
        let (send, messages) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let message = serde_json::from_str(&line).expect("the front writes JSON lines");
                if send.send(message).is_err() {
                    return;
                }
            }
        });
        let mut session = Session {
            stdin: front.stdin.take(),
            front,
            messages,
            next_id: 0,
        };
        session.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "owners", "version": "0"},
            }),
        );
        session.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        session
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("open");
        writeln!(stdin, "{message}").expect("the front reads");
        stdin.flush().expect("flushed");
    }

    /// Sends request `method` and returns its response, and the messages the
    /// front wrote before it.
    fn request_seeing(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut before = Vec::new();
        loop {
            let message = self
                .messages
                .recv_timeout(WITHIN)
                .unwrap_or_else(|err| panic!("no answer to {method} ({err})"));
            if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                return (message, before);
            }
            before.push(message);
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.request_seeing(method, params).0
    }

    /// Calls tool `name`: whether it is an error, its text, and the System
    /// Note that came with it, if any.
    fn call(&mut self, name: &str, arguments: Value) -> Called {
        let response = self.request("tools/call", json!({"name": name, "arguments": arguments}));
        let result = &response["result"];
        let texts: Vec<String> = result["content"]
            .as_array()
            .unwrap_or_else(|| panic!("a tool result: {response}"))
            .iter()
            .map(|block| block["text"].as_str().unwrap_or_default().to_owned())
            .collect();
        Called {
            error: result["isError"] == json!(true),
            text: texts.first().cloned().unwrap_or_default(),
            note: texts.get(1).cloned(),
        }
    }

    /// Launches `subagent` in the background: the task's id.
    fn launch(&mut self, subagent: &str) -> String {
        let launched = self.call(
            "task",
            json!({"subagent_name": subagent, "goal_prompt": "go", "async": true}),
        );
        assert!(!launched.error, "{launched:?}");
        let at = launched.text.find("ID: ").expect("the id") + 4;
        launched.text[at..]
            .split(|c: char| c.is_whitespace() || c == ')' || c == '.')
            .next()
            .expect("the id")
            .to_owned()
    }

    /// Ends the session: the client closes the front's input.
    fn close(mut self) {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + WITHIN;
        while self.front.try_wait().expect("waited").is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the front did not end"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.front.kill();
        let _ = self.front.wait();
    }
}

/// What a tool call answered.
#[derive(Debug)]
struct Called {
    error: bool,
    text: String,
    note: Option<String>,
}

/// The tool calls that name task `id`, each with its arguments.
fn calls_naming(id: &str) -> [(&'static str, Value); 5] {
    [
        ("check_async_tasks", json!({"task_id": id})),
        (
            "message_async_task",
            json!({"task_id": id, "message": "stop"}),
        ),
        (
            "answer_async_task",
            json!({"task_id": id, "answer": "allow"}),
        ),
        ("end_async_task", json!({"task_id": id})),
        (
            "wait_async_tasks",
            json!({"task_id_prefixes": [id], "timeout_seconds": 1}),
        ),
    ]
}

/// Asserts that every call naming task `id` answers `session` as it answers
/// an id no task has: the task does not exist for it.
fn assert_unknown_to(session: &mut Session, id: &str) {
    let nobody = "00000000-0000-4000-8000-000000000000";
    for ((tool, arguments), (_, unknown)) in calls_naming(id).into_iter().zip(calls_naming(nobody))
    {
        let named = session.call(tool, arguments);
        let unknown = session.call(tool, unknown);
        assert!(named.error && unknown.error, "{tool}: {named:?}");
        assert_eq!(named.text, unknown.text.replace(nobody, id), "{tool}");
    }
}

#[test]
fn a_session_acts_on_its_own_tasks_until_they_pass_to_the_next_session() {
    let workspace = Workspace::new("owners");
    let (mut a, mut b) = (workspace.session(&[]), workspace.session(&[]));
    let id = workspace_task(&mut a);
    // The question waits on A: B can neither see the task nor answer it.
    assert_eq!(
        b.call("check_async_tasks", json!({})).text,
        "No async tasks."
    );
    assert_unknown_to(&mut b, &id);
    assert_eq!(
        b.call("check_async_tasks", json!({})).note,
        None,
        "B is told nothing of A's task or its question"
    );

    // A can, and does.
    let answered = a.call(
        "answer_async_task",
        json!({"task_id": id, "answer": "allow"}),
    );
    assert!(!answered.error, "{answered:?}");
    a.close();

    // A ended: its running task passes to the next session that looks, B.
    let listed = b.call("check_async_tasks", json!({}));
    assert!(
        listed
            .text
            .contains(&format!("[{}] asker - running", &id[..8])),
        "{listed:?}"
    );
    let sent = b.call(
        "message_async_task",
        json!({"task_id": id, "message": "ship"}),
    );
    assert!(!sent.error, "{sent:?}");
    // One next session only: C, connected after, sees nothing of it.
    let mut c = workspace.session(&[]);
    assert_unknown_to(&mut c, &id);
    let waited = b.call(
        "wait_async_tasks",
        json!({"task_id_prefixes": [id], "timeout_seconds": 30}),
    );
    assert!(
        waited.text.contains(&format!("\"agent_id\": \"{id}\""))
            && waited.text.contains(r#"got {\"type\":\"answer\""#)
            && waited
                .text
                .contains(r#"then {\"type\":\"message\",\"text\":\"ship\"}"#),
        "{waited:?}"
    );
    let again = b.call("check_async_tasks", json!({}));
    assert_eq!(again.note, None, "the result came once");
    assert_eq!(c.call("check_async_tasks", json!({})).note, None);
}

/// Launches an `asker` from `session` and waits until its question waits:
/// the task's id.
fn workspace_task(session: &mut Session) -> String {
    let id = session.launch("asker");
    let mut asked = false;
    let deadline = std::time::Instant::now() + WITHIN;
    while !asked {
        assert!(std::time::Instant::now() < deadline, "no question");
        asked = session
            .call("check_async_tasks", json!({"task_id": id}))
            .text
            .contains("Allow the deploy?");
    }
    id
}

#[test]
fn a_nested_session_never_sees_a_shallower_sessions_task() {
    let workspace = Workspace::new("nested");
    let mut top = workspace.session(&[]);
    let mut nested = workspace.session(&[
        ("ASYNCTASK_DEPTH", "1"),
        ("ASYNCTASK_TASK_ID", "0f3a9c21-1"),
    ]);
    let id = top.launch("sleeper");
    let own = nested.launch("sleeper");
    assert_unknown_to(&mut nested, &id);
    assert_unknown_to(&mut top, &own);
    let listed = nested.call("check_async_tasks", json!({}));
    assert!(
        listed.text.contains(&own[..8]) && !listed.text.contains(&id[..8]),
        "{listed:?}"
    );

    // Its session gone, the top task still never passes to a nested one.
    top.close();
    let listed = nested.call("check_async_tasks", json!({}));
    assert!(!listed.text.contains(&id[..8]), "{listed:?}");
    assert_unknown_to(&mut nested, &id);
    // The next session at depth 0 takes it.
    let mut next = workspace.session(&[]);
    let ended = next.call("end_async_task", json!({"task_id": id}));
    assert_eq!(ended.text, format!("Cancelled task: {id}"));
    assert!(!nested.call("end_async_task", json!({"task_id": own})).error);
}

#[test]
fn a_subagent_session_whose_depth_is_lost_fails_closed() {
    let workspace = Workspace::new("lost");
    let mut top = workspace.session(&[]);
    let id = top.launch("sleeper");
    top.close();
    // Inside a subagent (its task id is set), its client dropped the depth.
    let mut lost = workspace.session(&[("ASYNCTASK_TASK_ID", "0f3a9c21-1")]);
    let refused = lost.call(
        "task",
        json!({"subagent_name": "quick", "goal_prompt": "go", "async": true}),
    );
    assert!(refused.error, "{refused:?}");
    assert!(
        refused.text.contains(
            "Nesting limit reached: this session runs inside a subagent at depth 2, and \
             subagents may nest at most 2 deep"
        ),
        "{refused:?}"
    );
    assert_unknown_to(&mut lost, &id);
}

#[test]
fn a_client_line_using_a_notification_of_the_relay_is_dropped() {
    let workspace = Workspace::new("relayed");
    let mut session = workspace.session(&[]);
    // Passed on, it would make the supervisor answer request 77, which the
    // client never sent.
    session.send(&json!({
        "jsonrpc": "2.0",
        "method": "notifications/asynctask/oversized",
        "params": {"id": 77, "bytes": 5},
    }));
    let (listed, mut seen) = session.request_seeing("tools/list", json!({}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    // A request sent once that answer was read: what the supervisor queued
    // for the client before it is written by then.
    let (pinged, before) = session.request_seeing("ping", json!({}));
    assert_eq!(pinged["result"], json!({}), "{pinged}");
    seen.extend(before);
    assert_eq!(seen, Vec::<Value>::new());
    // The session goes on.
    assert!(!session.call("check_async_tasks", json!({})).error);
}

fn am_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

#[test]
fn the_front_talks_only_to_a_supervisor_of_its_own_user() {
    let workspace = Workspace::new("peer");
    // Its own supervisor: served.
    let mut session = workspace.session(&[]);
    assert!(!session.call("check_async_tasks", json!({})).error);
    session.close();
    if !am_root() {
        // Another user cannot be made: the refusal is checked by the front's
        // unit test.
        return;
    }
    // Another user's supervisor (uid 65534), its socket moved into a state
    // directory of ours.
    let theirs = workspace.path("theirs");
    std::fs::create_dir(&theirs).expect("mkdir");
    std::fs::write(theirs.join("asynctask.toml"), CONFIG).expect("written");
    for path in [workspace.dir.path(), theirs.as_path()] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    for path in [theirs.clone(), theirs.join("asynctask.toml")] {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown as root");
    }
    let mut stranger = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_asynctask"))
        .args(["supervisor", "run", "--config"])
        .arg(theirs.join("asynctask.toml"))
        .arg("--state-dir")
        .arg(theirs.join("s"))
        .arg("--project")
        .arg(&theirs)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .expect("setpriv runs");
    let socket = theirs.join("s").join("supervisor.sock");
    eventually("their supervisor listens", WITHIN, || socket.exists());
    let ours = workspace.path("ours");
    std::fs::create_dir(&ours).expect("mkdir");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    std::fs::rename(&socket, ours.join("supervisor.sock")).expect("moved");
    let asked = Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(["supervisor", "status", "--state-dir"])
        .arg(&ours)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    let _ = stranger.kill();
    let _ = stranger.wait();
    assert_eq!(asked.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&asked.stderr),
        format!(
            "asynctask: the supervisor did not answer: the process listening on {} runs as uid 65534, not as you (uid 0): it is no supervisor of yours, and nothing \
             was sent to it; remove the socket, or give this project a state directory of your \
             own with --state-dir\n",
            ours.join("supervisor.sock").display()
        )
    );
}

#[test]
fn every_file_under_the_state_directory_is_private() {
    let workspace = Workspace::new("private");
    let mut session = workspace.session(&[]);
    let id = session.launch("quick");
    let waited = session.call(
        "wait_async_tasks",
        json!({"task_id_prefixes": [id], "timeout_seconds": 30}),
    );
    assert!(waited.text.contains("quick done"), "{waited:?}");
    session.close();
    let mut open = Vec::new();
    let mut dirs = vec![workspace.state()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("listed") {
            let path = entry.expect("an entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            use std::os::unix::fs::PermissionsExt;
            if meta.permissions().mode() & 0o077 != 0 {
                open.push(format!(
                    "{} ({:o})",
                    relative(&path, &workspace.state()),
                    meta.permissions().mode() & 0o777
                ));
            }
            if meta.is_dir() {
                dirs.push(path);
            }
        }
    }
    open.sort();
    assert_eq!(open, Vec::<String>::new());
}

fn relative(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .display()
        .to_string()
}
