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

/// Finishes after the number of seconds in its goal, or at once with a final
/// message of N characters for the goal `print N`.
struct Sleeper;

#[async_trait::async_trait]
impl SubagentRunner for Sleeper {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        if let Some(chars) = request.goal_prompt.strip_prefix("print ") {
            let chars: usize = chars.parse().unwrap_or(0);
            return Ok(
                OutputObject::new(TerminateReason::Goal).with_final_message("x".repeat(chars))
            );
        }
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
                .is_some_and(|task| !task.status().is_terminal())
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

#[tokio::test]
async fn every_tool_answers_to_the_name_its_spec_lists() {
    let (runtime, server) = server();
    let names: Vec<String> = server
        .tools()
        .iter()
        .map(|tool| tool.name().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "task",
            "check_async_tasks",
            "message_async_task",
            "answer_async_task",
            "wait_async_tasks",
            "end_async_task"
        ]
    );
    for tool in runtime.tools().iter().chain(server.tools()) {
        assert_eq!(tool.name(), tool.spec().name);
    }
    runtime.shutdown().await;
}

/// A client on the other end of an in-memory pipe, speaking JSON lines.
struct LineClient {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    next_id: u64,
}

impl LineClient {
    async fn send(&mut self, message: Value) {
        use tokio::io::AsyncWriteExt as _;
        let mut line = message.to_string();
        line.push('\n');
        self.write
            .write_all(line.as_bytes())
            .await
            .expect("written");
    }

    /// Sends a request and returns its response (skipping notifications).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = self
                .lines
                .next_line()
                .await
                .expect("readable")
                .expect("a response");
            let message: Value = serde_json::from_str(&line).expect("JSON");
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    /// The text blocks of a `tools/call` response.
    async fn call(&mut self, name: &str, arguments: Value) -> Vec<String> {
        let response = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        response["result"]["content"]
            .as_array()
            .unwrap_or_else(|| panic!("a tool result: {response}"))
            .iter()
            .map(|block| block["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// Served over a plain rmcp transport (not the crate's own), results still
/// ride on tool results, each exactly once.
#[tokio::test(start_paused = true)]
async fn served_over_a_plain_transport_results_arrive_exactly_once() {
    use rmcp::ServiceExt as _;
    use tokio::io::AsyncBufReadExt as _;

    let (runtime, server) = server();
    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let serving = tokio::spawn(async move {
        let service = server
            .serve(tokio::io::split(server_end))
            .await
            .expect("initialized");
        let _ = service.waiting().await;
    });
    let (read, write) = tokio::io::split(client_end);
    let mut client = LineClient {
        lines: tokio::io::BufReader::new(read).lines(),
        write,
        next_id: 0,
    };
    let init = client
        .request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "line-client", "version": "0"},
            }),
        )
        .await;
    assert_eq!(init["result"]["serverInfo"]["name"], "asynctask", "{init}");
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    let mut seen = Vec::new();
    seen.extend(client.call("task", launch(1)).await);
    seen.extend(client.call("task", launch(3)).await);
    // wait_async_tasks answers with the first result once it is in.
    let waited = client
        .call("wait_async_tasks", json!({"timeout_seconds": 10}))
        .await;
    assert!(
        waited[0].contains("\"final_message\": \"slept 1\""),
        "{waited:#?}"
    );
    seen.extend(waited);
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The second rides on the next call, as its last block.
    let checked = client.call("check_async_tasks", json!({})).await;
    assert_eq!(checked.len(), 2, "{checked:#?}");
    assert!(checked[1].contains("\"final_message\": \"slept 3\""));
    seen.extend(checked);
    seen.extend(client.call("check_async_tasks", json!({})).await);
    seen.extend(
        client
            .call("wait_async_tasks", json!({"timeout_seconds": 1}))
            .await,
    );
    for message in ["slept 1", "slept 3"] {
        let times: usize = seen
            .iter()
            .map(|text| {
                text.matches(&format!("\"final_message\": \"{message}\""))
                    .count()
            })
            .sum();
        assert_eq!(times, 1, "{message} delivered {times} times: {seen:#?}");
    }
    assert!(runtime.manager().pending_notifications().is_empty());

    drop(client);
    serving.await.expect("served until the client left");
    runtime.shutdown().await;
}

#[tokio::test]
async fn one_response_carries_results_up_to_a_budget_and_the_rest_follow() {
    let (runtime, server) = server();
    for _ in 0..3 {
        let launch =
            json!({"subagent_name": "sleeper", "goal_prompt": "print 6000", "async": true});
        call(&server, "task", launch).await;
    }
    asynctask_test_support::eventually_async("the subagents' end", Duration::from_secs(20), || {
        runtime.manager().counts().running == 0
    })
    .await;
    let mut carried = Vec::new();
    for _ in 0..4 {
        let texts = texts(&call(&server, "check_async_tasks", json!({})).await);
        let reminders: Vec<&String> = texts.iter().filter(|t| t.contains("System Note")).collect();
        if let [reminder] = reminders[..] {
            // Two results of 6,000 characters do not fit in one response.
            assert_eq!(reminder.matches("\"agent_id\"").count(), 1, "{reminder}");
            assert!(reminder.chars().count() < 7_000, "one result and its frame");
            carried.push(reminder.contains("more async task(s) finished"));
        }
    }
    assert_eq!(
        carried,
        [true, true, false],
        "three responses, each telling of what waits"
    );
    assert!(runtime.manager().pending_notifications().is_empty());
}

/// A journal whose disk is full for marks: registrations and ends are
/// recorded, every "delivered" is refused.
#[derive(Debug, Default)]
struct FullDiskForMarks {
    refused: std::sync::atomic::AtomicUsize,
}

impl asynctask_manager::Journal for FullDiskForMarks {
    fn record(
        &self,
        entries: &[asynctask_manager::JournalEntry<'_>],
    ) -> Result<(), asynctask_manager::JournalError> {
        if entries
            .iter()
            .any(|entry| matches!(entry, asynctask_manager::JournalEntry::Notified { .. }))
        {
            self.refused
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return Err(asynctask_manager::JournalError::new(
                "no space left on device",
            ));
        }
        Ok(())
    }
}

/// A delivery the journal cannot record (a full disk) is not delivered again
/// on the next responses: the model reads the result once; the mark waits in
/// memory for the journal to record it.
#[tokio::test(start_paused = true)]
async fn a_result_whose_delivery_cannot_be_recorded_rides_on_one_response() {
    let journal = Arc::new(FullDiskForMarks::default());
    let runtime = Arc::new(
        AsyncTaskRuntime::builder()
            .runner(Arc::new(Sleeper))
            .journal(
                Arc::clone(&journal) as Arc<dyn asynctask_manager::Journal>,
                Vec::new(),
            )
            .build(),
    );
    let server = AsyncTaskMcpServer::new(Arc::clone(&runtime)).expect("valid tools");
    call(&server, "task", launch(1)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut carrying = 0;
    for _ in 0..10 {
        let result = call(&server, "check_async_tasks", json!({})).await;
        if texts(&result).iter().any(|text| text.contains("slept 1")) {
            carrying += 1;
        }
    }
    assert_eq!(carrying, 1, "the result rode on {carrying} of 10 responses");
    assert!(
        journal.refused.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "the mark was refused"
    );
    assert!(runtime.manager().pending_notifications().is_empty());
    assert!(
        runtime.manager().has_journal_backlog(),
        "kept to be written"
    );
    runtime.shutdown().await;
}
