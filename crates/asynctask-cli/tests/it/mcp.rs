//! `asynctask mcp`: the built binary driven by rmcp's own client over stdio, with
//! a config of tiny `sh` subagents.
//!
//! Every wait is a poll with a deadline, never a fixed sleep; each test stays
//! within a few seconds of real time.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use pretty_assertions::assert_eq;
use rmcp::model::{CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::time::Instant;

/// The subagents: each gets its goal on stdin and in `$ASYNCTASK_GOAL`.
const CONFIG: &str = r#"
[subagents.quick]
command = ["sh", "-c", "sleep 0.3; echo quick done"]

[subagents.slow]
command = ["sh", "-c", "sleep 3; echo slow done"]

[subagents.long]
command = ["sh", "-c", "sleep 30; echo never"]

# Writes its own pid, then a grandchild's, to the file named by its goal.
[subagents.pids]
command = ["sh", "-c", "echo $$ > \"$ASYNCTASK_GOAL.tmp\"; sleep 60 & echo $! >> \"$ASYNCTASK_GOAL.tmp\"; mv \"$ASYNCTASK_GOAL.tmp\" \"$ASYNCTASK_GOAL\"; wait"]
"#;

/// A fresh directory holding the config.
fn config_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("asynctask-mcp-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("subagents.toml"), CONFIG).expect("config written");
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

/// Polls `condition` every 50 ms until it holds or `limit` passes.
async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    condition()
}

/// Whether process `pid` is gone (or a zombie waiting for a reaper).
fn process_ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// The pids the `pids` subagent wrote (itself, then its grandchild).
async fn read_pids(file: &Path) -> Vec<i32> {
    assert!(
        eventually(Duration::from_secs(5), || file.exists()).await,
        "the subagent wrote its pids"
    );
    std::fs::read_to_string(file)
        .expect("pid file")
        .lines()
        .map(|line| line.trim().parse().expect("a pid"))
        .collect()
}

#[tokio::test]
async fn tools_are_listed_with_annotations_and_closed_schemas() {
    let dir = config_dir("list");
    let client = connect(&dir, &[]).await;
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
    let client = connect(&dir, &[]).await;
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
    let deadline = Instant::now() + Duration::from_secs(5);
    let carried = loop {
        let listed = texts(&call(&client, "check_async_tasks", json!({})).await);
        if listed.len() > 1 {
            break listed;
        }
        assert!(Instant::now() < deadline, "the result was delivered");
        tokio::time::sleep(Duration::from_millis(100)).await;
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
    let client = connect(&dir, &[]).await;
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
    let client = connect(&dir, &[]).await;
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
    let client = connect(&dir, &[]).await;
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
    let client = connect(&dir, &["--sync-detach-after", "1"]).await;
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
    let client = connect(&dir, &[]).await;
    let file = dir.join("pids");
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
    assert!(pids.iter().all(|&pid| !process_ended(pid)));
    handle
        .cancel(Some("test".to_owned()))
        .await
        .expect("cancel sent");
    assert!(
        eventually(Duration::from_secs(5), || pids
            .iter()
            .all(|&pid| process_ended(pid)))
        .await,
        "the whole group ended"
    );
    // The server goes on serving.
    let listed = call(&client, "check_async_tasks", json!({})).await;
    assert_eq!(texts(&listed), ["No async tasks."]);
    client.cancel().await.expect("closed");
}

#[tokio::test]
async fn closing_the_client_ends_the_server_and_its_subagents() {
    let dir = config_dir("eof");
    let mut server = server_command(&dir, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the server starts");
    let stdout = server.stdout.take().expect("piped");
    let stdin = server.stdin.take().expect("piped");
    let client = ().serve((stdout, stdin)).await.expect("the session starts");
    let file = dir.join("pids");
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
    assert!(
        eventually(Duration::from_secs(2), || pids
            .iter()
            .all(|&pid| process_ended(pid)))
        .await,
        "no subagent process outlives the server"
    );
}
