//! MCP Tasks over the wire: the 2026-07-28 handshake, `tools/call` answered
//! with a task, `tasks/get`, `tasks/update` and `tasks/cancel`, their errors,
//! and each result delivered exactly once across polls and System Notes.

use std::sync::Arc;
use std::time::Duration;

use asynctask_manager::Question;
use asynctask_mcp::{
    AsyncTaskMcpServer, McpServerOptions, TASK_POLL_INTERVAL, TASK_RESULT_HOLD, TASK_TTL, serve_io,
};
use asynctask_model::{ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_runtime::AsyncTaskRuntime;
use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use rmcp::ServiceExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

/// Sleeps the seconds its goal names, prints `step N` lines as it goes, and
/// finishes with `slept N`; `fail` fails at once, `print` finishes at once,
/// `ask` asks a question and finishes with `<answer> in <id>` (`declined in
/// <id>` when declined).
struct Sleeper;

#[async_trait::async_trait]
impl SubagentRunner for Sleeper {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        match request.goal_prompt.as_str() {
            "fail" => return Err(SubagentError::new("the tests did not build")),
            "print" => {
                return Ok(OutputObject::new(TerminateReason::Goal)
                    .with_final_message(format!("printed {}", request.task_id)));
            }
            "ask" => {
                let question =
                    Question::new("Deploy to production too?").with_choices(["yes", "no"]);
                let answer = tokio::select! {
                    answer = request.questions.ask(question) => answer,
                    () = cancel.cancelled() => return Err(SubagentError::new("cancelled")),
                };
                let said = answer.text().unwrap_or(answer.status());
                return Ok(OutputObject::new(TerminateReason::Goal)
                    .with_final_message(format!("{said} in {}", request.task_id)));
            }
            _ => {}
        }
        let seconds: u64 = request.goal_prompt.parse().unwrap_or(1);
        for step in 0..seconds {
            request
                .progress
                .record_output(format!("step {step}\n").as_bytes());
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = cancel.cancelled() => return Err(SubagentError::new("cancelled")),
            }
        }
        Ok(OutputObject::new(TerminateReason::Goal)
            .with_final_message(format!("slept {seconds} in {}", request.task_id)))
    }
}

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A request's `_meta` on the 2026-07-28 protocol, declaring the tasks
/// extension or not.
fn meta(tasks: bool) -> Value {
    let capabilities = if tasks {
        json!({"extensions": {TASKS: {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// A client of `asynctask mcp` (served as `serve_io` serves it) over an
/// in-memory pipe, on the 2026-07-28 protocol.
struct Client {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    next_id: u64,
    served: tokio::task::JoinHandle<()>,
}

impl Client {
    fn start(options: McpServerOptions) -> Client {
        let (client_end, server_end) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(server_end);
        let served = tokio::spawn(async move {
            serve_io(Arc::new(Sleeper), options, None, read, write)
                .await
                .expect("served");
        });
        let (read, write) = tokio::io::split(client_end);
        Client {
            lines: tokio::io::BufReader::new(read).lines(),
            write,
            next_id: 1,
            served,
        }
    }

    /// A client of a server over `runtime` (one on a manual clock, say),
    /// served as rmcp serves any server: a result counts as delivered as its
    /// response is handed on.
    fn serving(runtime: Arc<AsyncTaskRuntime>) -> Client {
        let server = AsyncTaskMcpServer::new(runtime).expect("valid tools");
        let (client_end, server_end) = tokio::io::duplex(1 << 20);
        let served = tokio::spawn(async move {
            let service = server
                .serve(tokio::io::split(server_end))
                .await
                .expect("served");
            let _ = service.waiting().await;
        });
        let (read, write) = tokio::io::split(client_end);
        Client {
            lines: tokio::io::BufReader::new(read).lines(),
            write,
            next_id: 1,
            served,
        }
    }

    /// Writes a request without waiting for its answer; its id.
    async fn send(&mut self, method: &str, mut params: Value, tasks: bool) -> u64 {
        params["_meta"] = meta(tasks);
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("written");
        id
    }

    /// The answers to the `count` requests written last, by id, in any order.
    async fn answers(&mut self, count: usize) -> std::collections::BTreeMap<u64, Value> {
        let mut answers = std::collections::BTreeMap::new();
        while answers.len() < count {
            let line = self
                .lines
                .next_line()
                .await
                .expect("readable")
                .expect("a response");
            let message: Value = serde_json::from_str(&line).expect("JSON");
            if let Some(id) = message["id"].as_u64() {
                answers.insert(id, message);
            }
        }
        answers
    }

    async fn request(&mut self, method: &str, params: Value, tasks: bool) -> Value {
        let id = self.send(method, params, tasks).await;
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

    async fn call(&mut self, name: &str, arguments: Value, tasks: bool) -> Value {
        self.request(
            "tools/call",
            json!({"name": name, "arguments": arguments}),
            tasks,
        )
        .await
    }

    async fn get(&mut self, task_id: &str) -> Value {
        self.request("tasks/get", json!({"taskId": task_id}), true)
            .await
    }

    /// Closes the client's end (both halves: the server reads its end of
    /// input only then) and waits for the server to end.
    async fn end(self) {
        drop((self.write, self.lines));
        self.served.await.expect("the server ended");
    }
}

fn launch(goal: &str) -> Value {
    json!({"subagent_name": "sleeper", "goal_prompt": goal})
}

fn texts(response: &Value) -> Vec<String> {
    response["result"]["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .map(|block| block["text"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The task a `tools/call` answered with, checked for its shape; its id.
fn task_id(created: &Value) -> String {
    let result = &created["result"];
    assert_eq!(result["resultType"], "task", "{created}");
    assert_eq!(result["status"], "working", "{created}");
    assert_eq!(result["ttlMs"], json!(TASK_TTL.as_millis()));
    assert_eq!(
        result["pollIntervalMs"],
        json!(TASK_POLL_INTERVAL.as_millis())
    );
    result["taskId"].as_str().expect("a task id").to_owned()
}

#[tokio::test(start_paused = true)]
async fn the_handshake_advertises_the_extension_and_fits_the_client() {
    let mut client = Client::start(McpServerOptions::default());
    let declared = client.request("server/discover", json!({}), true).await;
    assert_eq!(
        declared["result"]["capabilities"]["extensions"][TASKS],
        json!({}),
        "{declared}"
    );
    let instructions = declared["result"]["instructions"].as_str().expect("text");
    assert_eq!(instructions, asynctask_mcp::TASKS_INSTRUCTIONS);
    assert!(!instructions.contains("System Note"));
    let plain = client.request("server/discover", json!({}), false).await;
    assert_eq!(
        plain["result"]["instructions"],
        json!(asynctask_mcp::INSTRUCTIONS)
    );

    let listed = client.request("tools/list", json!({}), true).await;
    assert_eq!(listed["result"]["ttlMs"], json!(3_600_000), "{listed}");
    assert_eq!(listed["result"]["cacheScope"], "private");
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "task",
            "check_async_tasks",
            "message_async_task",
            "answer_async_task",
            "end_async_task"
        ]
    );
    let task = &listed["result"]["tools"][0]["description"];
    assert!(
        task.as_str()
            .expect("a description")
            .starts_with(asynctask_mcp::TASKS_TASK_DESCRIPTION_LEAD),
        "{task}"
    );
    let answer = &listed["result"]["tools"][3];
    assert_eq!(answer["name"], "answer_async_task");
    assert_eq!(
        answer["description"],
        json!(asynctask_mcp::TASKS_ANSWER_DESCRIPTION)
    );
    let plain = client.request("tools/list", json!({}), false).await;
    assert_eq!(plain["result"]["tools"].as_array().map(Vec::len), Some(6));
    let plain_answer = plain["result"]["tools"][3]["description"]
        .as_str()
        .expect("a description");
    assert!(plain_answer.contains("System Note"), "{plain_answer}");
    client.end().await;
}

#[tokio::test(start_paused = true)]
async fn initialize_does_not_advertise_the_extension() {
    let mut client = Client::start(McpServerOptions::default());
    let id = 1;
    let init = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"extensions": {TASKS: {}}},
        "clientInfo": {"name": "legacy", "version": "0"},
    }});
    client
        .write
        .write_all(format!("{init}\n").as_bytes())
        .await
        .expect("written");
    let line = client.lines.next_line().await.expect("read").expect("line");
    let answer: Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(
        answer["result"]["capabilities"].get("extensions"),
        None,
        "{answer}"
    );
    client.end().await;
}

#[tokio::test(start_paused = true)]
async fn a_task_call_becomes_a_task_that_tasks_get_follows_to_its_result() {
    let mut client = Client::start(McpServerOptions::default());
    let created = client.call("task", launch("3"), true).await;
    let id = task_id(&created);
    assert_eq!(
        created["result"]["createdAt"],
        created["result"]["lastUpdatedAt"]
    );
    assert_eq!(
        created["result"]["statusMessage"],
        "running for 0s; no output yet"
    );

    let first = client.get(&id).await;
    assert_eq!(first["result"]["resultType"], "complete", "{first}");
    assert_eq!(first["result"]["status"], "working");
    assert_eq!(first["result"]["taskId"], id.as_str());
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let working = client.get(&id).await;
    // The manager's clock is the system's, not tokio's paused one: the time
    // it ran is not the test's to fix.
    let message = working["result"]["statusMessage"].as_str().expect("text");
    assert!(
        message.starts_with("running for ") && message.ends_with("s; last output: step 1"),
        "{message}"
    );

    tokio::time::sleep(Duration::from_secs(5)).await;
    let done = client.get(&id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(done["result"]["result"]["isError"], false);
    let expected = format!(
        "{{\n  \"agent_id\": \"{id}\",\n  \"terminate_reason\": \"GOAL\",\n  \"emitted_vars\": {{}},\n  \"final_message\": \"slept 3 in {id}\"\n}}"
    );
    assert_eq!(texts(&done["result"]), [expected]);
    // Delivered: no System Note carries it, and a poll again answers the same.
    let checked = client.call("check_async_tasks", json!({}), true).await;
    assert_eq!(texts(&checked).len(), 1, "{checked}");
    assert_eq!(client.get(&id).await["result"], done["result"]);
    client.end().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_subagent_completes_the_task_with_an_error_result() {
    let mut client = Client::start(McpServerOptions::default());
    let id = task_id(&client.call("task", launch("fail"), true).await);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let done = client.get(&id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(done["result"]["result"]["isError"], true);
    assert!(texts(&done["result"])[0].contains("\"error\": \"the tests did not build\""));
    client.end().await;
}

#[tokio::test(start_paused = true)]
async fn tasks_cancel_cancels_once_and_acknowledges_every_time() {
    let mut client = Client::start(McpServerOptions::default());
    let id = task_id(&client.call("task", launch("60"), true).await);
    let ack = json!({"resultType": "complete"});
    for _ in 0..2 {
        let cancelled = client
            .request("tasks/cancel", json!({"taskId": id}), true)
            .await;
        assert_eq!(cancelled["result"], ack, "{cancelled}");
    }
    let polled = client.get(&id).await;
    assert_eq!(polled["result"]["status"], "cancelled", "{polled}");
    assert_eq!(polled["result"].get("result"), None);
    // The cancellation went with the cancel's answer: no System Note repeats it.
    let checked = client.call("check_async_tasks", json!({}), true).await;
    assert_eq!(texts(&checked).len(), 1, "{checked}");
    let cancelled = client
        .request("tasks/cancel", json!({"taskId": id}), true)
        .await;
    assert_eq!(cancelled["result"], ack, "after the end too");
    client.end().await;
}

#[tokio::test(start_paused = true)]
async fn unknown_ids_and_undeclared_clients_get_the_extensions_errors() {
    let mut client = Client::start(McpServerOptions::default());
    for (method, params) in [
        ("tasks/get", json!({"taskId": "nope"})),
        ("tasks/cancel", json!({"taskId": "nope"})),
        (
            "tasks/update",
            json!({"taskId": "nope", "inputResponses": {}}),
        ),
    ] {
        let refused = client.request(method, params.clone(), true).await;
        assert_eq!(refused["error"]["code"], -32602, "{method}: {refused}");
        let message = refused["error"]["message"].as_str().expect("a message");
        assert!(
            message.starts_with("Failed to retrieve task: Task not found: no task with id 'nope'"),
            "{message}"
        );
        let undeclared = client.request(method, params, false).await;
        assert_eq!(
            undeclared["error"]["code"], -32021,
            "{method}: {undeclared}"
        );
        assert_eq!(
            undeclared["error"]["data"]["requiredCapabilities"]["extensions"][TASKS],
            json!({})
        );
    }
    let id = task_id(&client.call("task", launch("60"), true).await);
    let update = client
        .request(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"x": {"action": "accept"}}}),
            true,
        )
        .await;
    assert_eq!(
        update["result"],
        json!({"resultType": "complete"}),
        "{update}"
    );
    // Not declared: a plain answer, never a task; the result rides on a tool
    // result as a System Note.
    let plain = client
        .call(
            "task",
            json!({"subagent_name": "sleeper", "goal_prompt": "print", "async": true}),
            false,
        )
        .await;
    assert_eq!(plain["result"].get("resultType"), Some(&json!("complete")));
    assert!(
        texts(&plain)[0].starts_with("Async task launched"),
        "{plain}"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    let checked = client.call("check_async_tasks", json!({}), false).await;
    assert!(texts(&checked)[1].contains("System Note"), "{checked}");
    // A refused launch is answered as a plain call, even to a declaring client.
    let refused = client
        .call(
            "task",
            json!({"subagent_name": "", "goal_prompt": "x"}),
            true,
        )
        .await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    client.end().await;
}

#[tokio::test(start_paused = true)]
async fn a_queued_task_says_its_place() {
    let options =
        McpServerOptions::default().with_max_async_tasks(MaxAsyncTasks::new(1).expect("valid"));
    let mut client = Client::start(options);
    let _running = task_id(&client.call("task", launch("60"), true).await);
    let queued = client.call("task", launch("1"), true).await;
    let id = task_id(&queued);
    assert_eq!(
        queued["result"]["statusMessage"],
        "queued, position 1: it starts when a running task ends (waiting 0s)"
    );
    let polled = client.get(&id).await;
    assert_eq!(polled["result"]["status"], "working");
    client.end().await;
}

/// One step of a session: launch as a task or as a plain background task,
/// launch a task whose subagent asks, answer a task's question (through
/// `tasks/update` or `answer_async_task`), poll a task, call another tool, or
/// let time pass (tasks finish).
#[derive(Debug, Clone)]
enum Step {
    LaunchTask(u8),
    LaunchPlain(u8),
    LaunchAsk,
    Answer(usize, bool),
    Poll(usize),
    Check,
    Wait,
    Pass(u16),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u8..3).prop_map(Step::LaunchTask),
        (0u8..3).prop_map(Step::LaunchPlain),
        Just(Step::LaunchAsk),
        ((0usize..8), any::<bool>()).prop_map(|(which, update)| Step::Answer(which, update)),
        (0usize..8).prop_map(Step::Poll),
        Just(Step::Check),
        Just(Step::Wait),
        (0u16..2_500).prop_map(Step::Pass),
    ]
}

/// Answers task `id`'s question with `answer`, through `tasks/update` or
/// the `answer_async_task` tool (whose result may carry a System Note).
async fn answer(client: &mut Client, id: &str, answer: &str, update: bool) -> Option<Value> {
    if update {
        let responses = json!({"question-1": {"action": "accept", "content": {"answer": answer}}});
        let updated = client
            .request(
                "tasks/update",
                json!({"taskId": id, "inputResponses": responses}),
                true,
            )
            .await;
        assert_eq!(
            updated["result"],
            json!({"resultType": "complete"}),
            "{updated}"
        );
        None
    } else {
        let arguments = json!({"task_id": id, "answer": answer});
        Some(client.call("answer_async_task", arguments, false).await)
    }
}

/// How many times each `final_message` appears, as a first delivery: in
/// tool results (System Notes and waits) and in `tasks/get` results (a poll
/// answering again for the same task is one delivery).
#[derive(Debug, Default)]
struct Seen {
    in_notes: std::collections::BTreeMap<String, usize>,
    by_poll: std::collections::BTreeSet<String>,
}

fn messages(text: &str) -> Vec<String> {
    text.match_indices("\"final_message\": \"")
        .map(|(at, key)| {
            let rest = &text[at + key.len()..];
            rest[..rest.find('"').unwrap_or(rest.len())].to_owned()
        })
        .collect()
}

async fn session(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let options = McpServerOptions::default()
        .with_max_async_tasks(MaxAsyncTasks::UNLIMITED)
        .with_max_launches_per_session(None);
    let mut client = Client::start(options);
    // A session starts with a request past the discovery.
    client.request("tools/list", json!({}), true).await;
    let mut tasks: Vec<String> = Vec::new();
    // The tasks whose subagent asks, and every answer sent to each.
    let mut asking: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut launched = 0usize;
    let mut seen = Seen::default();
    let note = |seen: &mut Seen, response: &Value| {
        for text in texts(response) {
            for message in messages(&text) {
                *seen.in_notes.entry(message).or_default() += 1;
            }
        }
    };
    let poll = |seen: &mut Seen, response: &Value| {
        for text in texts(&response["result"]) {
            for message in messages(&text) {
                seen.by_poll.insert(message);
            }
        }
    };
    for step in steps {
        match step {
            Step::LaunchTask(seconds) | Step::LaunchPlain(seconds) => {
                let as_task = matches!(step, Step::LaunchTask(_));
                let goal = if seconds == 0 {
                    "print".to_owned()
                } else {
                    seconds.to_string()
                };
                let mut arguments = launch(&goal);
                arguments["async"] = json!(true);
                let response = client.call("task", arguments, as_task).await;
                launched += 1;
                if as_task {
                    tasks.push(task_id(&response));
                } else {
                    note(&mut seen, &response);
                }
            }
            Step::LaunchAsk => {
                let response = client.call("task", launch("ask"), true).await;
                launched += 1;
                let id = task_id(&response);
                tasks.push(id.clone());
                asking.insert(id, Vec::new());
            }
            Step::Answer(which, update) => {
                let ids: Vec<String> = asking.keys().cloned().collect();
                if let Some(id) = ids.get(which % ids.len().max(1)) {
                    let sent = asking.entry(id.clone()).or_default();
                    let text = format!("answer{}", sent.len());
                    sent.push(text.clone());
                    if let Some(response) = answer(&mut client, id, &text, update).await {
                        note(&mut seen, &response);
                    }
                }
            }
            Step::Poll(which) => {
                if let Some(id) = tasks.get(which % tasks.len().max(1)).cloned() {
                    let response = client.get(&id).await;
                    poll(&mut seen, &response);
                }
            }
            Step::Check => {
                let response = client.call("check_async_tasks", json!({}), false).await;
                note(&mut seen, &response);
            }
            Step::Wait => {
                let arguments = json!({"timeout_seconds": 1});
                let response = client.call("wait_async_tasks", arguments, false).await;
                note(&mut seen, &response);
            }
            Step::Pass(millis) => tokio::time::sleep(Duration::from_millis(millis.into())).await,
        }
    }
    // Every question is answered (again: only the first answer counts),
    // everything ends, every task is polled and the rest is collected.
    tokio::time::sleep(Duration::from_millis(10)).await;
    for (id, sent) in &mut asking {
        sent.push("last".to_owned());
        if let Some(response) = answer(&mut client, id, "last", true).await {
            note(&mut seen, &response);
        }
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    for id in tasks.clone() {
        let response = client.get(&id).await;
        prop_assert_eq!(&response["result"]["status"], "completed", "{}", response);
        poll(&mut seen, &response);
    }
    for _ in 0..launched {
        let response = client.call("check_async_tasks", json!({}), false).await;
        note(&mut seen, &response);
    }
    let mut delivered: std::collections::BTreeMap<String, usize> = seen.in_notes.clone();
    for message in &seen.by_poll {
        *delivered.entry(message.clone()).or_default() += 1;
    }
    prop_assert_eq!(delivered.len(), launched, "{:?}", seen);
    // Each question took one answer, one that was sent to it.
    for (id, sent) in &asking {
        let took: Vec<&String> = delivered
            .keys()
            .filter(|message| message.ends_with(&format!(" in {id}")))
            .collect();
        prop_assert_eq!(took.len(), 1, "{}: {:?}", id, seen);
        let said = took[0].trim_end_matches(&format!(" in {id}"));
        prop_assert!(
            sent.iter().any(|text| text == said),
            "{} took {} of {:?}",
            id,
            said,
            sent
        );
    }
    for (message, times) in &delivered {
        prop_assert_eq!(
            *times,
            1,
            "{} delivered {} times: {:?}",
            message,
            times,
            seen
        );
    }
    client.end().await;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Polls, other tool calls and completions in any order: every result
    /// reaches the model exactly once, by a poll or in a System Note.
    #[test]
    fn every_result_is_delivered_once_across_polls_and_notes(
        steps in proptest::collection::vec(step(), 1..24)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        runtime.block_on(session(steps))?;
    }
}

/// Polls task `id` until its status is `status`, the paused clock moving
/// 10 ms between polls; its last answer.
async fn poll_until(client: &mut Client, id: &str, status: &str) -> Value {
    for _ in 0..500 {
        let polled = client.get(id).await;
        if polled["result"]["status"] == status {
            return polled;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("task {id} never became {status}")
}

#[tokio::test(start_paused = true)]
async fn a_question_is_an_input_request_answered_once_through_tasks_update() {
    let mut client = Client::start(McpServerOptions::default());
    let id = task_id(&client.call("task", launch("ask"), true).await);
    let asking = poll_until(&mut client, &id, "input_required").await;
    let head: String = id.chars().take(8).collect();
    assert_eq!(
        asking["result"]["inputRequests"],
        json!({"question-1": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": format!("Background task {head} (sleeper) asks:\nDeploy to production too?"),
                "requestedSchema": {
                    "type": "object",
                    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
                    "required": ["answer"],
                },
            },
        }}),
        "{asking}"
    );
    assert_eq!(
        asking["result"]["statusMessage"],
        "asks, and waits for an answer: Deploy to production too?"
    );
    // No System Note shows the question: the client was asked.
    let checked = client.call("check_async_tasks", json!({}), true).await;
    assert_eq!(texts(&checked).len(), 1, "{checked}");
    assert_eq!(
        client.get(&id).await["result"],
        asking["result"],
        "asked until answered"
    );

    let answer = json!({"question-1": {"action": "accept", "content": {"answer": "no"}}});
    let ack = json!({"resultType": "complete"});
    for _ in 0..2 {
        let updated = client
            .request(
                "tasks/update",
                json!({"taskId": id, "inputResponses": answer}),
                true,
            )
            .await;
        assert_eq!(updated["result"], ack, "{updated}");
    }
    let done = poll_until(&mut client, &id, "completed").await;
    assert!(
        texts(&done["result"])[0].contains(&format!(r#""final_message": "no in {id}""#)),
        "answered once, with the first answer: {done}"
    );
    client.end().await;
}

#[tokio::test(start_paused = true)]
async fn a_declined_or_stale_input_response_is_taken_as_the_extension_says() {
    let mut client = Client::start(McpServerOptions::default());
    let id = task_id(&client.call("task", launch("ask"), true).await);
    poll_until(&mut client, &id, "input_required").await;
    // A key no question has, and a response that is no ElicitResult: ignored.
    let stale = json!({"question-7": {"action": "accept", "content": {"answer": "yes"}},
                       "question-1": {"answer": "yes"}});
    let ignored = client
        .request(
            "tasks/update",
            json!({"taskId": id, "inputResponses": stale}),
            true,
        )
        .await;
    assert_eq!(
        ignored["result"],
        json!({"resultType": "complete"}),
        "{ignored}"
    );
    assert_eq!(client.get(&id).await["result"]["status"], "input_required");
    let declined = json!({"question-1": {"action": "decline"}});
    client
        .request(
            "tasks/update",
            json!({"taskId": id, "inputResponses": declined}),
            true,
        )
        .await;
    let done = poll_until(&mut client, &id, "completed").await;
    assert!(
        texts(&done["result"])[0].contains(&format!(r#""final_message": "declined in {id}""#)),
        "{done}"
    );
    client.end().await;
}

/// A runtime of the `Sleeper` on a manual clock, without a running limit.
fn on_manual_clock(clock: &ManualClock) -> Arc<AsyncTaskRuntime> {
    Arc::new(
        AsyncTaskRuntime::builder()
            .runner(Arc::new(Sleeper))
            .clock(Arc::new(clock.clone()))
            .max_async_tasks(MaxAsyncTasks::UNLIMITED)
            .build(),
    )
}

/// Waits until task `id` has ended, as the registry says.
async fn ended(runtime: &AsyncTaskRuntime, id: &str) {
    asynctask_test_support::eventually_async(
        &format!("the end of task {id}"),
        Duration::from_secs(10),
        || {
            runtime
                .manager()
                .task(id)
                .is_some_and(|task| task.status().is_terminal())
        },
    )
    .await;
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).expect("small")
}

/// A followed task that ended and that no poll took within
/// `TASK_RESULT_HOLD` (its client stopped polling: it exited) goes back to
/// the System Notes, once; a poll that comes later says it was delivered
/// elsewhere, while a poll within the hold took the other task's result.
#[tokio::test(start_paused = true)]
async fn a_result_no_poll_takes_within_the_hold_rides_in_a_system_note_once() {
    let clock = ManualClock::new(1_000_000);
    let runtime = on_manual_clock(&clock);
    let mut client = Client::serving(Arc::clone(&runtime));
    let polled = task_id(&client.call("task", launch("print"), true).await);
    let left = task_id(&client.call("task", launch("print"), true).await);
    ended(&runtime, &polled).await;
    ended(&runtime, &left).await;
    clock.advance(millis(TASK_RESULT_HOLD) - 1);
    let checked = client.call("check_async_tasks", json!({}), false).await;
    assert_eq!(texts(&checked).len(), 1, "still held: {checked}");
    let taken = client.get(&polled).await;
    assert_eq!(taken["result"]["status"], "completed", "{taken}");
    assert!(texts(&taken["result"])[0].contains(&format!("printed {polled}")));

    clock.advance(1);
    let checked = client.call("check_async_tasks", json!({}), false).await;
    let note = texts(&checked);
    assert_eq!(note.len(), 2, "{checked}");
    assert!(note[1].contains("System Note"), "{checked}");
    assert_eq!(
        messages(&note[1]),
        [format!("printed {left}")],
        "the one no poll took"
    );
    let again = client.call("check_async_tasks", json!({}), true).await;
    assert_eq!(texts(&again).len(), 1, "once: {again}");
    let late = client.get(&left).await;
    assert_eq!(late["result"]["status"], "completed", "{late}");
    let text = format!(
        "The result of task {left} was already delivered in an earlier response (a System Note \
         on a tool result, or a poll answered before the server restarted); it is not given \
         twice."
    );
    assert_eq!(late["result"]["statusMessage"], json!(text), "{late}");
    assert_eq!(texts(&late["result"]), [text]);
    assert_eq!(client.get(&polled).await["result"], taken["result"]);
    client.end().await;
    runtime.shutdown().await;
}

/// A task is followed before its launch can finish: launches of subagents
/// that end at once, written together with other tool calls (waits, which
/// wake the moment a task ends, and listings: in flight at once, on several
/// threads), never leave a result to a System Note; each arrives through
/// `tasks/get`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_ending_at_once_is_followed_before_a_concurrent_call_can_take_it() {
    let options = McpServerOptions::default()
        .with_max_async_tasks(MaxAsyncTasks::UNLIMITED)
        .with_max_launches_per_session(None);
    let mut client = Client::start(options);
    client.request("tools/list", json!({}), true).await;
    // Something runs: the waits wait.
    let mut running = launch("60");
    running["async"] = json!(true);
    client.call("task", running, false).await;
    let (mut launches, mut checks) = (Vec::new(), Vec::new());
    for _ in 0..8 {
        let wait = json!({"name": "wait_async_tasks", "arguments": {"timeout_seconds": 1}});
        checks.push(client.send("tools/call", wait, false).await);
    }
    for _ in 0..16 {
        launches.push(
            client
                .send(
                    "tools/call",
                    json!({"name": "task", "arguments": launch("print")}),
                    true,
                )
                .await,
        );
        for _ in 0..3 {
            let check = json!({"name": "check_async_tasks", "arguments": {}});
            checks.push(client.send("tools/call", check, false).await);
        }
    }
    let answers = client.answers(launches.len() + checks.len()).await;
    for id in &checks {
        let checked = &answers[id];
        assert_eq!(texts(checked).len(), 1, "no System Note: {checked}");
    }
    // Not paused: the subagents run on other threads.
    let client = tokio::sync::Mutex::new(client);
    for id in &launches {
        let task = task_id(&answers[id]);
        let done = asynctask_test_support::eventually_some_with(
            &format!("task {task} completed"),
            Duration::from_secs(10),
            || async {
                let polled = client.lock().await.get(&task).await;
                (polled["result"]["status"] == "completed").then_some(polled)
            },
        )
        .await;
        assert_eq!(
            messages(&texts(&done["result"])[0]),
            [format!("printed {task}")],
            "through tasks/get: {done}"
        );
    }
    let mut client = client.into_inner();
    let checked = client.call("check_async_tasks", json!({}), false).await;
    assert_eq!(texts(&checked).len(), 1, "{checked}");
    client.end().await;
}

/// `ttlMs` over the wire: a task is answered within its TTL, and while it
/// runs past it; once its TTL has passed and it has ended, a poll gets
/// `-32602`, and a result no poll took arrives in a System Note.
#[tokio::test(start_paused = true)]
async fn past_its_ttl_an_ended_task_is_forgotten_and_its_result_rides_in_a_system_note() {
    let clock = ManualClock::new(1_000_000);
    let runtime = on_manual_clock(&clock);
    let mut client = Client::serving(Arc::clone(&runtime));
    let quick = task_id(&client.call("task", launch("print"), true).await);
    let long = task_id(&client.call("task", launch("60"), true).await);
    ended(&runtime, &quick).await;
    clock.advance(millis(TASK_TTL) - 1);
    let taken = client.get(&quick).await;
    assert_eq!(taken["result"]["status"], "completed", "{taken}");
    clock.advance(1);
    for id in [&quick, &long] {
        let polled = client.get(id).await;
        let expected = if *id == quick { None } else { Some("working") };
        assert_eq!(
            polled["result"]["status"].as_str(),
            expected,
            "forgotten once ended, kept while it runs: {polled}"
        );
    }
    let forgotten = client.get(&quick).await;
    assert_eq!(forgotten["error"]["code"], -32602, "{forgotten}");

    tokio::time::sleep(Duration::from_secs(61)).await;
    ended(&runtime, &long).await;
    let refused = client.get(&long).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("forgotten once its ttlMs passed"),
        "{message}"
    );
    let checked = client.call("check_async_tasks", json!({}), false).await;
    let note = texts(&checked);
    assert_eq!(note.len(), 2, "{checked}");
    assert_eq!(messages(&note[1]), [format!("slept 60 in {long}")]);
    let again = client.call("check_async_tasks", json!({}), false).await;
    assert_eq!(texts(&again).len(), 1, "once: {again}");
    client.end().await;
    runtime.shutdown().await;
}

/// `lastUpdatedAt` moves with the task: when a poll first sees a new output
/// line, not while the same line stands.
#[tokio::test(start_paused = true)]
async fn last_updated_at_moves_with_the_output() {
    let clock = ManualClock::new(1_000_000);
    let runtime = on_manual_clock(&clock);
    let mut client = Client::serving(Arc::clone(&runtime));
    let created = client.call("task", launch("3"), true).await;
    let id = task_id(&created);
    let at = |ms: u64| json!(asynctask_tools::iso_time(ms));
    assert_eq!(created["result"]["lastUpdatedAt"], at(1_000_000));
    let progress = runtime.manager().progress(&id).expect("running");
    let printed = |line: &'static str| {
        let progress = progress.clone();
        move || progress.snapshot().last_line() == Some(line)
    };
    asynctask_test_support::eventually_async("step 0", Duration::from_secs(5), printed("step 0"))
        .await;
    clock.advance(1_000);
    let first = client.get(&id).await;
    assert_eq!(first["result"]["lastUpdatedAt"], at(1_001_000), "{first}");
    clock.advance(1_000);
    let same = client.get(&id).await;
    assert_eq!(same["result"]["lastUpdatedAt"], at(1_001_000), "{same}");
    asynctask_test_support::eventually_async("step 1", Duration::from_secs(5), printed("step 1"))
        .await;
    clock.advance(500);
    let moved = client.get(&id).await;
    assert_eq!(moved["result"]["lastUpdatedAt"], at(1_002_500), "{moved}");
    assert_eq!(moved["result"]["createdAt"], at(1_000_000));
    client.end().await;
    runtime.shutdown().await;
}
