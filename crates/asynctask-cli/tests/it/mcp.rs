//! `asynctask mcp`: the built binary driven by rmcp's own client over stdio, with
//! a config of tiny `sh` subagents.
//!
//! Every wait is a poll with a deadline, never a fixed sleep; each test stays
//! within a few seconds of real time.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use pretty_assertions::assert_eq;
use rmcp::model::{CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::{TempDir, temp_dir};
use asynctask_test_support::{assert_gone_async, eventually_async, process_gone};

/// How long a test waits for what must happen (only a hang takes this long).
const DEADLINE: Duration = Duration::from_secs(10);
use tokio::time::Instant;

/// The subagents: each gets its goal on stdin and in `$ASYNCTASK_GOAL`.
const CONFIG: &str = r#"
[subagents.quick]
command = ["sh", "-c", "sleep 0.3; echo quick done"]

[subagents.slow]
command = ["sh", "-c", "sleep 3; echo slow done"]

[subagents.long]
command = ["sh", "-c", "sleep 30; echo never"]

[subagents.instant]
command = ["sh", "-c", "cat > /dev/null; echo instant done"]

# Writes its own pid, then a grandchild's, to the file named by its goal.
[subagents.pids]
command = ["sh", "-c", "echo $$ > \"$ASYNCTASK_GOAL.tmp\"; sleep 60 & echo $! >> \"$ASYNCTASK_GOAL.tmp\"; mv \"$ASYNCTASK_GOAL.tmp\" \"$ASYNCTASK_GOAL\"; wait"]
"#;

/// A fresh directory holding the config, removed when dropped.
fn config_dir(name: &str) -> TempDir {
    let dir = temp_dir(&format!("mcp-{name}"));
    std::fs::write(dir.path().join("subagents.toml"), CONFIG).expect("config written");
    dir
}

fn server_command(dir: &Path, extra: &[&str]) -> tokio::process::Command {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_asynctask")).configure(|command| {
        command
            .arg("mcp")
            .arg("--config")
            .arg(dir.join("subagents.toml"))
            .args(extra);
    })
}

type Client = RunningService<RoleClient, ()>;

/// The server as a child process whose stdin and stdout are ours to drive.
fn spawn_piped(dir: &Path) -> tokio::process::Child {
    server_command(dir, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the server starts")
}

/// What a server logged on its stderr, line by line, as it comes: the events a
/// test waits for (it listens to signals; a task ended).
#[derive(Clone, Default)]
struct Log {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Log {
    /// Collects the lines of `stderr` on a thread of its own.
    fn collect(stderr: impl std::io::Read + Send + 'static) -> Log {
        use std::io::BufRead;
        let log = Log::default();
        let lines = std::sync::Arc::clone(&log.lines);
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                lines.lock().expect("log lines").push(line);
            }
        });
        log
    }

    /// Waits until a line contains `needle`, failing after 20 s.
    fn wait_for(&self, needle: &str) {
        asynctask_test_support::eventually(
            &format!("a log line with {needle:?}"),
            Duration::from_secs(20),
            || {
                self.lines
                    .lock()
                    .expect("log lines")
                    .iter()
                    .any(|line| line.contains(needle))
            },
        );
    }
}

/// Starts the server and connects a client, keeping the child to watch it exit.
async fn connect_owned(dir: &Path) -> (tokio::process::Child, Client) {
    let mut server = spawn_piped(dir);
    let stdout = server.stdout.take().expect("piped");
    let stdin = server.stdin.take().expect("piped");
    let client = ().serve((stdout, stdin)).await.expect("the session starts");
    (server, client)
}

/// Starts the server with `extra` arguments and connects a client.
async fn connect(dir: &Path, extra: &[&str]) -> Client {
    let (transport, _stderr) = TokioChildProcess::builder(server_command(dir, extra))
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    ().serve(transport).await.expect("the session starts")
}

fn request(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object");
    };
    CallToolRequestParams::new(name).with_arguments(arguments)
}

async fn call(client: &Client, name: &'static str, arguments: Value) -> CallToolResult {
    client
        .call_tool(request(name, arguments))
        .await
        .expect("the call is answered")
}

/// The text blocks of a result.
fn texts(result: &CallToolResult) -> Vec<String> {
    serde_json::to_value(&result.content)
        .expect("content serializes")
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .map(|block| block["text"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn is_reminder(text: &str) -> bool {
    text.starts_with("---\nSystem Note: Async Task Status\n\n") && text.ends_with("\n---")
}

/// The task id in a launch text: `Async task launched: subagent 'x' (ID: <id>). ...`.
fn launched_id(text: &str) -> String {
    text.split("(ID: ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("the launch names its id")
        .to_owned()
}

/// The pids the `pids` subagent wrote (itself, then its grandchild).
async fn read_pids(file: &Path) -> Vec<u32> {
    eventually_async("the subagent wrote its pids", DEADLINE, || file.exists()).await;
    std::fs::read_to_string(file)
        .expect("pid file")
        .lines()
        .map(|line| line.trim().parse().expect("a pid"))
        .collect()
}

#[tokio::test]
async fn tools_are_listed_with_annotations_and_closed_schemas() {
    let dir = config_dir("list");
    let client = connect(dir.path(), &[]).await;
    let info = client.peer_info().expect("initialized");
    assert_eq!(
        info.instructions.as_deref(),
        Some(asynctask_mcp::INSTRUCTIONS)
    );
    let tools = client.list_all_tools().await.expect("tools/list");
    let listed: Vec<(String, Value)> = tools
        .iter()
        .map(|tool| {
            let value = serde_json::to_value(tool).expect("tool serializes");
            (tool.name.to_string(), value["annotations"].clone())
        })
        .collect();
    let hints =
        |read_only: bool, destructive: bool, idempotent: bool, open_world: bool, title: &str| {
            json!({
                "title": title,
                "readOnlyHint": read_only,
                "destructiveHint": destructive,
                "idempotentHint": idempotent,
                "openWorldHint": open_world,
            })
        };
    assert_eq!(
        listed,
        vec![
            ("task".to_owned(), hints(false, true, false, true, "Task")),
            (
                "check_async_tasks".to_owned(),
                hints(true, false, true, false, "Check Async Tasks")
            ),
            (
                "message_async_task".to_owned(),
                hints(false, false, false, false, "Message Async Task")
            ),
            (
                "answer_async_task".to_owned(),
                hints(false, false, false, false, "Answer Async Task")
            ),
            (
                "wait_async_tasks".to_owned(),
                hints(true, false, false, false, "Wait Async Tasks")
            ),
            (
                "end_async_task".to_owned(),
                hints(false, true, true, false, "End Async Task")
            ),
        ]
    );
    for tool in &tools {
        assert_eq!(
            tool.input_schema.get("additionalProperties"),
            Some(&json!(false)),
            "{} has a closed schema",
            tool.name
        );
        assert!(tool.output_schema.is_none());
    }
    client.cancel().await.expect("closed");
}

#[tokio::test]
async fn an_async_result_rides_on_exactly_one_later_result() {
    let dir = config_dir("ride");
    let client = connect(dir.path(), &[]).await;
    let start = Instant::now();
    let launched = call(
        &client,
        "task",
        json!({"subagent_name": "quick", "goal_prompt": "be quick", "async": true}),
    )
    .await;
    assert!(start.elapsed() < Duration::from_secs(1), "returns at once");
    let text = texts(&launched);
    assert_eq!(text.len(), 1);
    assert!(text[0].starts_with("Async task launched: subagent 'quick' (ID: "));
    let id = launched_id(&text[0]);

    // Call a read-only tool until the result rides along (as the last block).
    let carried = {
        let client = &client;
        asynctask_test_support::eventually_some_with(
            "the result riding on a check_async_tasks response",
            Duration::from_secs(20),
            move || async move {
                let listed = texts(&call(client, "check_async_tasks", json!({})).await);
                (listed.len() > 1).then_some(listed)
            },
        )
        .await
    };
    assert_eq!(carried.len(), 2, "{carried:?}");
    assert!(is_reminder(&carried[1]), "{}", carried[1]);
    assert!(carried[1].contains("1 async task(s) completed:"));
    assert!(carried[1].contains(&format!("\"agent_id\": \"{id}\"")));
    assert!(carried[1].contains("\"final_message\": \"quick done\""));

    let after = call(&client, "check_async_tasks", json!({})).await;
    assert_eq!(texts(&after).len(), 1, "delivered once only");
    client.cancel().await.expect("closed");
}

#[tokio::test]
async fn wait_async_tasks_returns_when_a_task_finishes() {
    let dir = config_dir("wait");
    let client = connect(dir.path(), &[]).await;
    call(
        &client,
        "task",
        json!({"subagent_name": "quick", "goal_prompt": "g", "async": true}),
    )
    .await;
    let start = Instant::now();
    let waited = call(&client, "wait_async_tasks", json!({"timeout_seconds": 20})).await;
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(waited.is_error, Some(false));
    let text = texts(&waited);
    assert_eq!(text.len(), 1, "the reminder is the result, once: {text:?}");
    assert!(is_reminder(&text[0]));
    assert!(text[0].contains("\"final_message\": \"quick done\""));

    let idle = call(&client, "wait_async_tasks", json!({})).await;
    assert_eq!(texts(&idle), ["No async tasks are running."]);
    client.cancel().await.expect("closed");
}

#[tokio::test]
async fn end_async_task_cancels_a_running_task() {
    let dir = config_dir("end");
    let client = connect(dir.path(), &[]).await;
    let launched = call(
        &client,
        "task",
        json!({"subagent_name": "long", "goal_prompt": "g", "async": true}),
    )
    .await;
    let id = launched_id(&texts(&launched)[0]);

    let waited = call(&client, "wait_async_tasks", json!({"timeout_seconds": 1})).await;
    assert_eq!(
        texts(&waited),
        ["No async task finished within 1 seconds; 1 still running."]
    );

    let ended = call(&client, "end_async_task", json!({"task_id": &id[..8]})).await;
    assert_eq!(ended.is_error, Some(false));
    let ended = texts(&ended);
    assert_eq!(ended[0], format!("Cancelled task: {id}"));
    // The cancellation itself rides along as the last block.
    assert_eq!(ended.len(), 2);
    assert!(ended[1].contains(&format!(
        "\"agent_id\": \"{id}\",\n  \"status\": \"cancelled\""
    )));

    let peek = call(&client, "check_async_tasks", json!({"task_id": &id})).await;
    assert!(texts(&peek)[0].contains("\"status\": \"cancelled\""));

    let again = call(&client, "end_async_task", json!({"task_id": &id})).await;
    assert_eq!(again.is_error, Some(true));
    assert_eq!(texts(&again), [format!("Task {id} is already cancelled.")]);
    client.cancel().await.expect("closed");
}

#[tokio::test]
async fn bad_parameters_are_error_results_naming_the_field() {
    let dir = config_dir("bad");
    let client = connect(dir.path(), &[]).await;
    let bad = call(
        &client,
        "task",
        json!({"subagent_name": 5, "goal_prompt": "g"}),
    )
    .await;
    assert_eq!(bad.is_error, Some(true));
    assert!(bad.structured_content.is_none());
    assert_eq!(
        texts(&bad),
        [
            "Invalid parameters for task: subagent_name: invalid type: integer `5`, expected a string"
        ]
    );
    let unknown = call(
        &client,
        "wait_async_tasks",
        json!({"task_id_prefixes": ["nope"]}),
    )
    .await;
    assert_eq!(unknown.is_error, Some(true));
    assert_eq!(
        texts(&unknown),
        ["No async task found with ID or prefix 'nope'."]
    );
    let range = call(&client, "wait_async_tasks", json!({"timeout_seconds": 60})).await;
    assert_eq!(
        texts(&range),
        [
            "Invalid parameters for wait_async_tasks: timeout_seconds: must be between 1 and 50 (got 60)"
        ]
    );
    client.cancel().await.expect("closed");
}

#[tokio::test]
async fn a_long_synchronous_call_is_detached() {
    let dir = config_dir("detach");
    let client = connect(dir.path(), &["--sync-detach-after", "1"]).await;
    let start = Instant::now();
    let detached = call(
        &client,
        "task",
        json!({"subagent_name": "slow", "goal_prompt": "g"}),
    )
    .await;
    assert!(start.elapsed() < Duration::from_millis(2500));
    let text = texts(&detached);
    assert_eq!(text.len(), 1);
    let id = text[0]
        .split("as async task ")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .expect("the text names the task")
        .to_owned();
    assert_eq!(
        text[0],
        format!(
            "Subagent 'slow' is still running after 1 seconds; it continues in the background \
             as async task {id}. Its result will be reported when it finishes; use \
             'wait_async_tasks' or 'check_async_tasks' to follow it."
        )
    );
    let waited = call(
        &client,
        "wait_async_tasks",
        json!({"task_id_prefixes": [&id]}),
    )
    .await;
    let waited = texts(&waited);
    assert!(
        waited[0].contains("\"final_message\": \"slow done\""),
        "{waited:?}"
    );
    client.cancel().await.expect("closed");
}

#[tokio::test]
async fn cancelling_a_synchronous_call_ends_its_process_group() {
    let dir = config_dir("cancel");
    let client = connect(dir.path(), &[]).await;
    let file = dir.path().join("pids");
    let goal = file.to_str().expect("a UTF-8 path");
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(request(
                "task",
                json!({"subagent_name": "pids", "goal_prompt": goal}),
            ))),
            PeerRequestOptions::no_options(),
        )
        .await
        .expect("sent");
    let pids = read_pids(&file).await;
    assert_eq!(pids.len(), 2, "the subagent and its grandchild");
    assert!(pids.iter().all(|&pid| !process_gone(pid)));
    handle
        .cancel(Some("test".to_owned()))
        .await
        .expect("cancel sent");
    assert_gone_async(&pids, DEADLINE).await;
    // The server goes on serving.
    let listed = call(&client, "check_async_tasks", json!({})).await;
    assert_eq!(texts(&listed), ["No async tasks."]);
    client.cancel().await.expect("closed");
}

#[tokio::test]
async fn closing_the_client_ends_the_server_and_its_subagents() {
    let dir = config_dir("eof");
    let (mut server, client) = connect_owned(dir.path()).await;
    let file = dir.path().join("pids");
    let goal = file.to_str().expect("a UTF-8 path");
    call(
        &client,
        "task",
        json!({"subagent_name": "pids", "goal_prompt": goal, "async": true}),
    )
    .await;
    let pids = read_pids(&file).await;

    client.cancel().await.expect("closed"); // stdin reaches its end
    let status = tokio::time::timeout(Duration::from_secs(8), server.wait())
        .await
        .expect("the server exits by itself")
        .expect("its status");
    assert!(status.success(), "{status}");
    assert_gone_async(&pids, DEADLINE).await;
}

#[tokio::test]
async fn closing_the_client_during_a_synchronous_call_ends_it_at_once() {
    let dir = config_dir("eof-sync");
    let (mut server, client) = connect_owned(dir.path()).await;
    let file = dir.path().join("pids");
    let goal = file.to_str().expect("a UTF-8 path");
    // A synchronous call, in flight when the client goes away.
    let _in_flight = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(request(
                "task",
                json!({"subagent_name": "pids", "goal_prompt": goal}),
            ))),
            PeerRequestOptions::no_options(),
        )
        .await
        .expect("sent");
    let pids = read_pids(&file).await;
    assert!(pids.iter().all(|&pid| !process_gone(pid)));

    let start = Instant::now();
    client.cancel().await.expect("closed"); // stdin reaches its end
    let status = tokio::time::timeout(Duration::from_secs(8), server.wait())
        .await
        .expect("the server exits by itself")
        .expect("its status");
    let took = start.elapsed();
    assert!(status.success(), "{status}");
    // rmcp alone would let the call run for its 5 s drain first.
    assert!(
        took < Duration::from_secs(3),
        "the server took {took:?} to exit"
    );
    assert!(
        pids.iter().all(|&pid| process_gone(pid)),
        "no subagent process outlives the server"
    );
}

#[tokio::test]
async fn a_termination_signal_ends_a_server_never_initialized() {
    for signal in ["TERM", "INT", "HUP"] {
        let dir = config_dir(&format!("signal-{signal}"));
        let mut server = server_command(dir.path(), &[])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the server starts");
        let pid = server.id().expect("running").to_string();
        // Held open: `wait()` would close it, and the server would see the end
        // of its input instead of the signal.
        let _stdin = server.stdin.take();
        let stderr = server.stderr.take().expect("piped");
        let log = Log::collect(
            stderr
                .into_owned_fd()
                .map(std::fs::File::from)
                .expect("a descriptor"),
        );
        // It listens to signals once it says it waits for the client, which
        // never sends `initialize`.
        tokio::task::spawn_blocking(move || log.wait_for("waiting for the client"))
            .await
            .expect("no panic");
        let sent = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let status = tokio::time::timeout(Duration::from_secs(3), server.wait())
            .await
            .unwrap_or_else(|_| panic!("SIG{signal} ends the server"))
            .expect("its status");
        assert!(status.success(), "SIG{signal}: {status}");
    }
}

/// A client speaking raw JSON-RPC lines, so it sees every response the server
/// writes, also those to requests it cancelled (rmcp's client drops those).
struct RawClient {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<Value>,
    received: Vec<Value>,
    next_id: u64,
    /// The server's stderr.
    log: Log,
}

impl RawClient {
    fn start(dir: &Path) -> RawClient {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_asynctask"))
            .arg("mcp")
            .arg("--config")
            .arg(dir.join("subagents.toml"))
            // No limit: on a loaded machine a few `instant` subagents may still
            // be starting when the next launch comes, and a launch refused at
            // the limit would carry no task.
            .arg("--max-async-tasks=-1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server starts");
        let stdout = child.stdout.take().expect("piped");
        let stdin = child.stdin.take();
        let log = Log::collect(child.stderr.take().expect("piped"));
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let value: Value = serde_json::from_str(&line).expect("a JSON-RPC line");
                if sender.send(value).is_err() {
                    break;
                }
            }
        });
        let mut client = RawClient {
            child,
            stdin,
            log,
            lines,
            received: Vec::new(),
            next_id: 0,
        };
        let id = client.send_request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            }),
        );
        client.response(id);
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send(&mut self, message: &Value) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("open");
        writeln!(stdin, "{message}").expect("written");
        stdin.flush().expect("flushed");
    }

    fn send_request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn call(&mut self, name: &str, arguments: Value) -> u64 {
        self.send_request("tools/call", json!({"name": name, "arguments": arguments}))
    }

    fn cancel(&mut self, id: u64) {
        self.send(&json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "race"},
        }));
    }

    /// Waits for the response to `id`, keeping everything received meanwhile.
    fn response(&mut self, id: u64) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(found) = self.received.iter().find(|m| m["id"] == json!(id)) {
                return found.clone();
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let message = self.lines.recv_timeout(left).expect("the response arrives");
            self.received.push(message);
        }
    }

    /// Closes stdin and collects every line until the server exits.
    fn finish(mut self) -> Vec<Value> {
        drop(self.stdin.take());
        while let Ok(message) = self.lines.recv_timeout(Duration::from_secs(10)) {
            self.received.push(message);
        }
        let status = self.child.wait().expect("the server exits");
        assert!(status.success(), "{status}");
        self.received
    }
}

/// The text blocks of a raw `tools/call` response (none for an error).
fn raw_texts(response: &Value) -> Vec<String> {
    response["result"]["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|block| block["text"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The race between a response and its cancel: a call cancelled right after it was sent. Its
/// response may have been written before the cancel arrived (the client got it:
/// delivered) or be dropped (its results are still pending). On the wire, every
/// finished task's result must reach the client exactly once.
#[test]
fn a_cancelled_call_never_loses_or_repeats_a_result() {
    const ROUNDS: u64 = 100;
    let dir = config_dir("race");
    let mut client = RawClient::start(dir.path());
    let mut task_ids = Vec::new();
    let mut cancelled = Vec::new();
    for round in 0..ROUNDS {
        let launch = client.call(
            "task",
            json!({"subagent_name": "instant", "goal_prompt": "g", "async": true}),
        );
        let launched = client.response(launch);
        let task_id = launched_id(&raw_texts(&launched)[0]);
        // Once it finished, the next call carries its result.
        client
            .log
            .wait_for(&format!("task {} (instant) completed", &task_id[..8]));
        task_ids.push(task_id);
        let id = client.call("check_async_tasks", json!({}));
        // 0 to 2 ms later, spread over the rounds.
        std::thread::sleep(Duration::from_micros(round * 20 % 2_001));
        client.cancel(id);
        cancelled.push(id);
    }
    // Everything finished (each waited for above); one call nobody cancels,
    // then one more to be sure.
    let last = client.call("check_async_tasks", json!({}));
    client.response(last);
    let after = client.call("check_async_tasks", json!({}));
    assert_eq!(
        raw_texts(&client.response(after)).len(),
        1,
        "nothing left over"
    );
    let received = client.finish();

    let responses: Vec<&Value> = received.iter().filter(|m| m.get("id").is_some()).collect();
    let answered_cancelled = responses
        .iter()
        .filter(|m| m["id"].as_u64().is_some_and(|id| cancelled.contains(&id)))
        .count();
    let mut carried_by_cancelled = 0;
    for id in &task_ids {
        let needle = format!("\"agent_id\": \"{id}\"");
        let carriers: Vec<&Value> = responses
            .iter()
            .copied()
            .filter(|m| {
                raw_texts(m)
                    .iter()
                    .any(|text| is_reminder(text) && text.contains(&needle))
            })
            .collect();
        let times: usize = carriers
            .iter()
            .flat_map(|m| raw_texts(m))
            .map(|text| text.matches(&needle).count())
            .sum();
        assert_eq!(times, 1, "task {id} reached the client {times} times");
        if carriers[0]["id"]
            .as_u64()
            .is_some_and(|id| cancelled.contains(&id))
        {
            carried_by_cancelled += 1;
        }
    }
    eprintln!(
        "{ROUNDS} rounds: {answered_cancelled} cancelled calls answered anyway ({carried_by_cancelled} \
         results rode on them), {} dropped; every one of {} results delivered exactly once",
        cancelled.len() - answered_cancelled,
        task_ids.len()
    );
}
