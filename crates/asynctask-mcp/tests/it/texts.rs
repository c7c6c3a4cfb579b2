//! Every text this server's own tools give the model, as snapshots: the
//! `wait_async_tasks` and `end_async_task` results in each of their cases, the
//! server's instructions, and its tool definitions.

use std::sync::Arc;
use std::time::Duration;

use asynctask_manager::RegisterTaskInput;
use asynctask_mcp::{AsyncTaskMcpServer, DETACH_FOLLOW_UP, INSTRUCTIONS};
use asynctask_model::{OutputObject, TerminateReason};
use asynctask_runtime::AsyncTaskRuntime;
use asynctask_tools::ToolResult;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const RUNNING: &str = "0f3a9c21-77e4-4b1a-9c2d-5e6f7a8b9c0d";
const DONE: &str = "7b2e0d44-1c3f-4e5a-8b6c-9d0e1f2a3b4c";
const OTHER: &str = "0f3b1111-2222-4333-8444-555566667777";

/// A server over a runtime holding one running task, one finished (and not yet
/// delivered) task, and another running task whose id shares a prefix with the
/// first.
fn server() -> (Arc<AsyncTaskRuntime>, AsyncTaskMcpServer) {
    let runtime = Arc::new(AsyncTaskRuntime::builder().build());
    let manager = runtime.manager();
    for (id, subagent) in [(RUNNING, "researcher"), (DONE, "tester"), (OTHER, "linter")] {
        manager
            .register_task(RegisterTaskInput::new(id, subagent, "a goal"))
            .expect("registered");
    }
    manager.complete_task(
        DONE,
        OutputObject::new(TerminateReason::Goal).with_final_message("12 tests passed"),
    );
    let server = AsyncTaskMcpServer::new(Arc::clone(&runtime)).expect("valid tools");
    (runtime, server)
}

async fn run(server: &AsyncTaskMcpServer, tool: &str, arguments: Value) -> ToolResult {
    run_with(server, tool, arguments, CancellationToken::new()).await
}

async fn run_with(
    server: &AsyncTaskMcpServer,
    tool: &str,
    arguments: Value,
    cancel: CancellationToken,
) -> ToolResult {
    let tool = server
        .tools()
        .iter()
        .find(|candidate| candidate.name() == tool)
        .expect("a tool of this server");
    tool.execute(arguments, cancel).await
}

#[test]
fn instructions_and_the_detach_follow_up() {
    insta::assert_snapshot!("instructions", INSTRUCTIONS);
    insta::assert_snapshot!("detach_follow_up", DETACH_FOLLOW_UP);
    insta::assert_snapshot!("tasks_instructions", asynctask_mcp::TASKS_INSTRUCTIONS);
    insta::assert_snapshot!(
        "tasks_task_description_lead",
        asynctask_mcp::TASKS_TASK_DESCRIPTION_LEAD
    );
    insta::assert_snapshot!(
        "tasks_answer_description",
        asynctask_mcp::TASKS_ANSWER_DESCRIPTION
    );
}

#[tokio::test(start_paused = true)]
async fn tool_definitions() {
    let (runtime, server) = server();
    let definitions: Vec<Value> = server
        .tools()
        .iter()
        .filter(|tool| ["wait_async_tasks", "end_async_task"].contains(&tool.name()))
        .map(|tool| tool.spec().to_mcp())
        .collect();
    insta::assert_json_snapshot!("tool_definitions", definitions);
    runtime.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn wait_results() {
    let (runtime, server) = server();
    // A finished task is pending: the wait answers with the reminder at once.
    let reminder = run(&server, "wait_async_tasks", json!({})).await;
    insta::assert_snapshot!("wait_reminder", reminder.transcript());

    // Nothing pending, a named task still running: the wait times out.
    let timed_out = run(
        &server,
        "wait_async_tasks",
        json!({"task_id_prefixes": ["0f3a"], "timeout_seconds": 2}),
    )
    .await;
    insta::assert_snapshot!("wait_timed_out", timed_out.transcript());

    // The named task's result was delivered already.
    let delivered = run(
        &server,
        "wait_async_tasks",
        json!({"task_id_prefixes": [DONE]}),
    )
    .await;
    insta::assert_snapshot!("wait_delivered_earlier", delivered.transcript());

    // A prefix that names two tasks, or none.
    let ambiguous = run(
        &server,
        "wait_async_tasks",
        json!({"task_id_prefixes": ["0f3"]}),
    )
    .await;
    insta::assert_snapshot!("wait_ambiguous", ambiguous.transcript());
    let unknown = run(
        &server,
        "wait_async_tasks",
        json!({"task_id_prefixes": ["ffff"]}),
    )
    .await;
    insta::assert_snapshot!("wait_unknown", unknown.transcript());

    // A cancelled wait touches no task.
    let cancel = CancellationToken::new();
    let waiting = run_with(&server, "wait_async_tasks", json!({}), cancel.clone());
    let canceller = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
    };
    let (cancelled, ()) = tokio::join!(waiting, canceller);
    insta::assert_snapshot!("wait_cancelled", cancelled.transcript());
    assert_eq!(runtime.manager().counts().running, 2);

    // Nothing runs and nothing is pending.
    runtime.manager().cancel_task(RUNNING);
    runtime.manager().cancel_task(OTHER);
    let _ = run(&server, "wait_async_tasks", json!({})).await; // takes the two cancels
    let idle = run(&server, "wait_async_tasks", json!({})).await;
    insta::assert_snapshot!("wait_idle", idle.transcript());
    runtime.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn end_results() {
    let (runtime, server) = server();
    let ended = run(&server, "end_async_task", json!({"task_id": "0f3a9"})).await;
    insta::assert_snapshot!("end_cancelled", ended.transcript());
    let again = run(&server, "end_async_task", json!({"task_id": RUNNING})).await;
    insta::assert_snapshot!("end_already_finished", again.transcript());
    let ambiguous = run(&server, "end_async_task", json!({"task_id": "0f3"})).await;
    insta::assert_snapshot!("end_ambiguous", ambiguous.transcript());
    let unknown = run(&server, "end_async_task", json!({"task_id": "ffff"})).await;
    insta::assert_snapshot!("end_unknown", unknown.transcript());
    let blank = run(&server, "end_async_task", json!({"task_id": " "})).await;
    insta::assert_snapshot!("end_blank_id", blank.transcript());
    runtime.shutdown().await;
}
