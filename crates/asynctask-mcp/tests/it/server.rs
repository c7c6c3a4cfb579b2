//! Reminders riding on results: exactly once, never on a cancelled call, and
//! never twice across parallel calls.

use std::sync::Arc;
use std::time::Duration;

use asynctask_mcp::AsyncTaskMcpServer;
use asynctask_model::{OutputObject, TerminateReason};
use asynctask_runtime::AsyncTaskRuntime;
use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner};
use pretty_assertions::assert_eq;
use rmcp::model::CallToolResult;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Finishes after the number of seconds in its goal.
struct Sleeper;

#[async_trait::async_trait]
impl SubagentRunner for Sleeper {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        let seconds: u64 = request.goal_prompt.parse().unwrap_or(1);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(seconds)) => {
                Ok(OutputObject::new(TerminateReason::Goal).with_final_message(format!("slept {seconds}")))
            }
            () = cancel.cancelled() => Err(SubagentError::new("cancelled")),
        }
    }
}

fn server() -> (Arc<AsyncTaskRuntime>, AsyncTaskMcpServer) {
    let runtime = Arc::new(
        AsyncTaskRuntime::builder()
            .runner(Arc::new(Sleeper))
            .build(),
    );
    let server = AsyncTaskMcpServer::new(Arc::clone(&runtime)).expect("valid tools");
    (runtime, server)
}

async fn call(server: &AsyncTaskMcpServer, name: &str, arguments: Value) -> CallToolResult {
    server
        .call(name, arguments, CancellationToken::new())
        .await
        .expect("a tool of this server")
}

fn texts(result: &CallToolResult) -> Vec<String> {
    serde_json::to_value(&result.content)
        .expect("serializes")
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .map(|b| b["text"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn launch(seconds: u64) -> Value {
    json!({"subagent_name": "sleeper", "goal_prompt": seconds.to_string(), "async": true})
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_leaves_the_result_for_the_next_one() {
    let (runtime, server) = server();
    call(&server, "task", launch(1)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let dropped = server
        .call("check_async_tasks", json!({}), cancelled)
        .await
        .expect("served");
    assert_eq!(
        texts(&dropped).len(),
        1,
        "nothing rides on a cancelled call"
    );

    let next = texts(&call(&server, "check_async_tasks", json!({})).await);
    assert_eq!(next.len(), 2);
    assert!(next[1].contains("\"final_message\": \"slept 1\""));
    assert_eq!(
        texts(&call(&server, "check_async_tasks", json!({})).await).len(),
        1
    );
    runtime.shutdown().await;
}

/// Real threads racing for the same results, many times: every finished task
/// rides on exactly one of the parallel results.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_calls_deliver_each_result_once() {
    const ROUNDS: usize = 50;
    const TASKS: usize = 3;
    const CALLERS: usize = 4;
    let (runtime, server) = server();
    for round in 0..ROUNDS {
        let (mut ids, mut all) = (Vec::new(), Vec::new());
        for _ in 0..TASKS {
            // A launch may carry the results of the tasks launched before it.
            let launched = texts(&call(&server, "task", launch(0)).await);
            let id = launched[0]
                .split("(ID: ")
                .nth(1)
                .and_then(|rest| rest.split(')').next())
                .expect("the launch names its id")
                .to_owned();
            ids.push(id);
            all.extend(launched);
        }
        // All finished before the race starts.
        while ids.iter().any(|id| {
            runtime
                .manager()
                .task(id)
                .is_some_and(|task| !task.status.is_terminal())
        }) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let barrier = Arc::new(tokio::sync::Barrier::new(CALLERS));
        let callers: Vec<_> = (0..CALLERS)
            .map(|caller| {
                let (server, barrier) = (server.clone(), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    let (name, arguments) = if caller % 2 == 0 {
                        ("wait_async_tasks", json!({"timeout_seconds": 1}))
                    } else {
                        ("check_async_tasks", json!({}))
                    };
                    texts(&call(&server, name, arguments).await)
                })
            })
            .collect();
        for caller in callers {
            all.extend(caller.await.expect("the caller ran"));
        }
        for id in &ids {
            let times: usize = all
                .iter()
                .map(|text| text.matches(&format!("\"agent_id\": \"{id}\"")).count())
                .sum();
            assert_eq!(
                times, 1,
                "round {round}: task {id} delivered {times} times: {all:#?}"
            );
        }
    }
    runtime.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_touches_no_task() {
    let (runtime, server) = server();
    call(&server, "task", launch(100)).await;
    let cancel = CancellationToken::new();
    let (waited, ()) = tokio::join!(
        server.call("wait_async_tasks", json!({}), cancel.clone()),
        async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            cancel.cancel();
        }
    );
    let waited = waited.expect("served");
    assert_eq!(waited.is_error, Some(true));
    assert_eq!(
        texts(&waited),
        ["The wait was cancelled; no task was affected."]
    );
    assert_eq!(runtime.manager().counts().running, 1);
    runtime.shutdown().await;
}

#[tokio::test]
async fn unknown_tools_are_not_served() {
    let (runtime, server) = server();
    assert!(
        server
            .call(
                "todo_pause",
                json!({"reason": "x"}),
                CancellationToken::new()
            )
            .await
            .is_none()
    );
    runtime.shutdown().await;
}
