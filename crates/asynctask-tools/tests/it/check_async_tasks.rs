//! `check_async_tasks`: list and peek texts (snapshots), errors, bounds, bad params.

use std::sync::Arc;

use asynctask_manager::{AsyncTaskManager, RegisterTaskInput, TaskProgress};
use asynctask_model::{ManualClock, MaxAsyncTasks, MaxQueuedTasks, OutputObject, TerminateReason};
use asynctask_tools::{CheckAsyncTasksTool, PEEK_BUDGET_CHARS, Tool, ToolErrorType, ToolResult};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::redacted;

/// 2026-09-21T14:13:20.000Z
pub(crate) const T0: u64 = 1_790_000_000_000;

/// A manager holding one task of each status, with the clock 2m 30s after launch.
pub(crate) fn fixture() -> (AsyncTaskManager, ManualClock) {
    let clock = ManualClock::new(T0);
    let manager = AsyncTaskManager::with_clock(MaxAsyncTasks::default(), Arc::new(clock.clone()));
    let register = |id: &str, agent: &str, goal: &str| {
        manager
            .register_task(RegisterTaskInput::new(id, agent, goal))
            .expect("fixture tasks fit the limit");
    };
    register(
        "0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11",
        "researcher",
        "Find every caller of the retry helper in the io module and explain which of them can loop forever when the server keeps answering 503",
    );
    register(
        "7b2e0d44-1c9a-4f3e-8d6b-2a5c9e7f0b33",
        "tester",
        "Run the integration suite",
    );
    register(
        "c91d5e8f-3a7b-4e2c-b1d9-8f6a4c2e0d55",
        "reviewer",
        "Review the diff",
    );
    register(
        "e4a8b7c2-9d1f-4a6e-8c3b-5f2d7e9a1b77",
        "writer",
        "Draft release notes",
    );
    clock.advance(15_000);
    manager.complete_task(
        "7b2e0d44-1c9a-4f3e-8d6b-2a5c9e7f0b33",
        OutputObject::new(TerminateReason::Goal)
            .with_var("failures", "0")
            .with_var(
                "log",
                "all 412 tests passed in 3 minutes and 12 seconds on the second attempt",
            )
            .with_final_message("The suite is green."),
    );
    clock.advance(30_000);
    manager.fail_task(
        "c91d5e8f-3a7b-4e2c-b1d9-8f6a4c2e0d55",
        "model returned an empty response",
    );
    manager.cancel_task("e4a8b7c2-9d1f-4a6e-8c3b-5f2d7e9a1b77");
    clock.advance(105_000);
    (manager, clock)
}

pub(crate) async fn call(tool: &dyn Tool, params: Value) -> ToolResult {
    tool.execute(params, CancellationToken::new()).await
}

#[tokio::test]
async fn list_mode_texts() {
    let (manager, _) = fixture();
    let tool = CheckAsyncTasksTool::new(manager);
    let result = call(&tool, json!({})).await;
    assert_eq!(result.error, None);
    insta::assert_snapshot!("list", redacted(&result, &[]));
    assert_eq!(
        result.metadata,
        json!({"count": 4, "running": 1, "completed": 1, "failed": 1, "cancelled": 1})
    );
    // No params, null params and an empty task_id are all list mode.
    for params in [
        Value::Null,
        json!({"task_id": null}),
        json!({"task_id": ""}),
    ] {
        assert_eq!(call(&tool, params).await, result);
    }
}

#[tokio::test]
async fn queued_tasks_are_counted_listed_and_peeked_with_their_place() {
    let (manager, clock) = fixture();
    manager.set_max_async_tasks(MaxAsyncTasks::new(1).unwrap());
    manager.set_max_queued_tasks(MaxQueuedTasks::new(3).unwrap());
    for id in ["5a5a5a5a-queued-1", "5b5b5b5b-queued-2"] {
        manager
            .register_task(RegisterTaskInput::new(id, "writer", "Draft the changelog"))
            .unwrap();
        clock.advance(20_000);
    }
    let tool = CheckAsyncTasksTool::new(manager.clone());
    let list = call(&tool, json!({})).await;
    insta::assert_snapshot!("list_with_queue", redacted(&list, &[]));
    assert_eq!(list.metadata["queued"], 2);
    let peeked = call(&tool, json!({"task_id": "5b5b"})).await;
    insta::assert_snapshot!("peek_queued", redacted(&peeked, &[]));
    assert_eq!(peeked.metadata["queuePosition"], 2);

    // The running task ends: the first queued starts, and its peek says when.
    clock.advance(5_000);
    manager.cancel_task("0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11");
    clock.advance(1_000);
    let peeked = call(&tool, json!({"task_id": "5a5a"})).await;
    assert_eq!(peeked.metadata["status"], "running");
    assert_eq!(peeked.metadata.get("queuePosition"), None);
    assert_eq!(peeked.metadata["startedAt"], "2026-09-21T14:16:35.000Z");
    assert_eq!(peeked.metadata["duration"], "1s", "counted from its start");
}

#[tokio::test]
async fn list_mode_with_no_tasks() {
    let tool = CheckAsyncTasksTool::new(AsyncTaskManager::default());
    let result = call(&tool, json!({})).await;
    assert_eq!(
        result,
        ToolResult::success(
            "No async tasks.",
            "No async tasks are currently running or completed.",
            json!({"count": 0})
        )
    );
}

#[tokio::test]
async fn peek_texts_for_every_status() {
    let (manager, _) = fixture();
    let tool = CheckAsyncTasksTool::new(manager);
    for (name, prefix) in [
        ("running", "0f3a"),
        ("completed", "7b2e0d44"),
        ("failed", "c91d5e8f-3a7b-4e2c-b1d9-8f6a4c2e0d55"),
        ("cancelled", "e4"),
    ] {
        let result = call(&tool, json!({ "task_id": prefix })).await;
        assert_eq!(result.error, None, "{name}");
        insta::assert_snapshot!(format!("peek_{name}"), redacted(&result, &[]));
        let metadata: Value = serde_json::from_str(&result.llm_content).unwrap();
        assert_eq!(result.metadata, metadata, "metadata is the same details");
    }
}

#[tokio::test]
async fn exact_match_wins_over_a_longer_id_with_the_same_prefix() {
    let manager = AsyncTaskManager::default();
    manager
        .register_task(RegisterTaskInput::new("abc", "short", "g"))
        .unwrap();
    manager
        .register_task(RegisterTaskInput::new("abcdef", "long", "g"))
        .unwrap();
    let tool = CheckAsyncTasksTool::new(manager);
    let result = call(&tool, json!({"task_id": "abc"})).await;
    assert_eq!(result.metadata["subagentName"], "short");
}

#[tokio::test]
async fn ambiguous_and_unknown_ids_are_parameter_errors() {
    let manager = AsyncTaskManager::default();
    manager
        .register_task(RegisterTaskInput::new("0f3a9c21-x", "researcher", "g"))
        .unwrap();
    manager
        .register_task(RegisterTaskInput::new("0f3b1111-y", "tester", "g"))
        .unwrap();
    let tool = CheckAsyncTasksTool::new(manager);

    let ambiguous = call(&tool, json!({"task_id": "0f3"})).await;
    assert_eq!(
        ambiguous.error.as_ref().map(|e| e.kind),
        Some(ToolErrorType::InvalidToolParams)
    );
    assert_eq!(
        ambiguous.error.as_ref().map(|e| e.message.as_str()),
        Some("Ambiguous task ID")
    );
    insta::assert_snapshot!("ambiguous", redacted(&ambiguous, &[]));

    let missing = call(&tool, json!({"task_id": "ffff"})).await;
    assert_eq!(
        missing.error.as_ref().map(|e| e.kind),
        Some(ToolErrorType::InvalidToolParams)
    );
    assert_eq!(
        missing.error.as_ref().map(|e| e.message.as_str()),
        Some("Task not found")
    );
    assert_eq!(
        missing.llm_content,
        "No async task found with ID or prefix 'ffff'."
    );
    assert_eq!(missing.return_display, "Task not found: ffff");
}

#[tokio::test]
async fn multi_byte_ids_are_listed_and_found_without_panics() {
    let manager = AsyncTaskManager::default();
    manager
        .register_task(RegisterTaskInput::new(
            "日本語テキストの識別子",
            "翻訳者",
            "訳す",
        ))
        .unwrap();
    manager
        .register_task(RegisterTaskInput::new("🦀", "crab", "g"))
        .unwrap();
    let tool = CheckAsyncTasksTool::new(manager);
    let list = call(&tool, json!({})).await;
    assert!(
        list.llm_content
            .contains("[日本語テキストの] 翻訳者 - running"),
        "{}",
        list.llm_content
    );
    assert!(list.llm_content.contains("[🦀] crab - running"));
    let peek = call(&tool, json!({"task_id": "日本"})).await;
    assert_eq!(peek.metadata["id"], "日本語テキストの識別子");
}

#[tokio::test]
async fn a_huge_output_is_cut_with_a_note() {
    let manager = AsyncTaskManager::default();
    manager
        .register_task(RegisterTaskInput::new("big", "dumper", "dump"))
        .unwrap();
    let huge = "x".repeat(1_000_000);
    manager.complete_task(
        "big",
        OutputObject::new(TerminateReason::Goal)
            .with_var("blob", huge.clone())
            .with_final_message(huge),
    );
    let tool = CheckAsyncTasksTool::new(manager);
    let result = call(&tool, json!({"task_id": "big"})).await;
    let length = result.llm_content.chars().count();
    assert!(length <= PEEK_BUDGET_CHARS, "{length} characters");
    let details: Value = serde_json::from_str(&result.llm_content).expect("still valid JSON");
    let message = details["output"]["final_message"].as_str().unwrap();
    assert!(
        message.ends_with(" more characters cut]"),
        "{}",
        &message[message.len() - 40..]
    );
    let blob = details["output"]["emitted_vars"]["blob"].as_str().unwrap();
    assert!(blob.ends_with(" more characters cut]"));
    // The display shows 50 characters of each variable.
    assert!(
        result
            .return_display
            .contains(&format!("  - blob: {}...", "x".repeat(50)))
    );
}

#[tokio::test]
async fn a_cut_message_keeps_the_line_that_names_the_whole_output() {
    let manager = AsyncTaskManager::default();
    manager
        .register_task(RegisterTaskInput::new("big", "dumper", "dump"))
        .unwrap();
    let pointer = "[whole output: /tmp/asynctask-1-ab/big.out (2000000 bytes)]";
    let message = format!(
        "{}\n[... 1990000 characters omitted; the whole output (2000000 bytes) is in /tmp/asynctask-1-ab/big.out ...]\n{}\n\n{pointer}",
        "h".repeat(5_000),
        "t".repeat(5_000)
    );
    manager.complete_task(
        "big",
        OutputObject::new(TerminateReason::Goal)
            .with_var("blob", "x".repeat(100_000))
            .with_final_message(message),
    );
    let tool = CheckAsyncTasksTool::new(manager);
    let result = call(&tool, json!({"task_id": "big"})).await;
    let length = result.llm_content.chars().count();
    assert!(length <= PEEK_BUDGET_CHARS, "{length} characters");
    let details: Value = serde_json::from_str(&result.llm_content).expect("still valid JSON");
    let kept = details["output"]["final_message"].as_str().unwrap();
    assert!(kept.starts_with("hhhh"), "{kept}");
    assert!(
        kept.ends_with(&format!(" more characters cut]\n{pointer}")),
        "{}",
        &kept[kept.len() - 120..]
    );
}

#[tokio::test]
async fn a_cut_error_keeps_the_line_that_names_the_whole_output() {
    let manager = AsyncTaskManager::default();
    manager
        .register_task(RegisterTaskInput::new("bad", "tester", "test"))
        .unwrap();
    let pointer = "[whole output: /tmp/asynctask-1-ab/bad.out (812 bytes)]";
    manager.fail_task(
        "bad",
        format!(
            "subagent 'tester' exited with status 1: {}\n\n{pointer}",
            "e".repeat(40_000)
        ),
    );
    let result = call(
        &CheckAsyncTasksTool::new(manager),
        json!({"task_id": "bad"}),
    )
    .await;
    let length = result.llm_content.chars().count();
    assert!(length <= PEEK_BUDGET_CHARS, "{length} characters");
    let details: Value = serde_json::from_str(&result.llm_content).expect("still valid JSON");
    let kept = details["error"].as_str().unwrap();
    assert!(kept.starts_with("subagent 'tester' exited"), "{kept}");
    assert!(
        kept.ends_with(&format!(" more characters cut]\n{pointer}")),
        "{}",
        &kept[kept.len() - 120..]
    );
    // The user's view cuts it shorter, and keeps the line too.
    assert!(
        result
            .return_display
            .ends_with(&format!(" more characters cut]\n{pointer}")),
        "{}",
        result.return_display
    );
}

#[tokio::test]
async fn thousands_of_variables_still_fit_the_budget() {
    let manager = AsyncTaskManager::default();
    manager
        .register_task(RegisterTaskInput::new("many", "dumper", "dump"))
        .unwrap();
    let mut output = OutputObject::new(TerminateReason::Goal);
    for i in 0..100 {
        output = output.with_var(format!("v{i:03}"), "y".repeat(5_000));
    }
    manager.complete_task("many", output);
    let tool = CheckAsyncTasksTool::new(manager);
    let result = call(&tool, json!({"task_id": "many"})).await;
    assert!(result.llm_content.chars().count() <= PEEK_BUDGET_CHARS);
    assert!(serde_json::from_str::<Value>(&result.llm_content).is_ok());
}

#[tokio::test]
async fn any_number_of_variables_and_huge_names_fit_the_budget() {
    let manager = AsyncTaskManager::default();
    manager
        .register_task(RegisterTaskInput::new("vast", "dumper", "dump"))
        .unwrap();
    let mut output = OutputObject::new(TerminateReason::Goal);
    for i in 0..5_000 {
        output = output.with_var(format!("variable_{i:05}"), "z".repeat(100));
    }
    output = output.with_var("k".repeat(100_000), "v");
    manager.complete_task("vast", output);
    let tool = CheckAsyncTasksTool::new(manager);
    let result = call(&tool, json!({"task_id": "vast"})).await;
    let length = result.llm_content.chars().count();
    assert!(length <= PEEK_BUDGET_CHARS, "{length} characters");
    let details: Value = serde_json::from_str(&result.llm_content).expect("still valid JSON");
    let vars = details["output"]["emitted_vars"].as_object().unwrap();
    let note = vars["…"].as_str().unwrap();
    assert!(note.ends_with(" more emitted variables cut"), "{note}");
    let dropped: usize = note.split(' ').next().unwrap().parse().unwrap();
    assert_eq!(
        vars.len() - 1 + dropped,
        5_001,
        "every variable is either shown or counted"
    );
}

#[tokio::test]
async fn a_huge_unknown_id_is_echoed_bounded() {
    let tool = CheckAsyncTasksTool::new(AsyncTaskManager::default());
    let huge = "é".repeat(200_000);
    let result = call(&tool, json!({ "task_id": huge })).await;
    assert_eq!(
        result.llm_content,
        format!(
            "No async task found with ID or prefix '{}...'.",
            "é".repeat(asynctask_tools::ECHO_CHARS)
        )
    );
}

#[tokio::test]
async fn bad_parameters_name_the_field_and_never_panic() {
    let tool = CheckAsyncTasksTool::new(AsyncTaskManager::default());
    let cases = [
        (
            json!({"task_id": 7}),
            "Invalid parameters for check_async_tasks: task_id: invalid type: integer `7`, expected a string",
        ),
        (
            json!({"task_id": ["a"]}),
            "Invalid parameters for check_async_tasks: task_id: invalid type: sequence, expected a string",
        ),
        (
            json!({"taskId": "a"}),
            "Invalid parameters for check_async_tasks: taskId: unknown field `taskId`, expected `task_id`",
        ),
        (
            json!("list"),
            "Invalid parameters for check_async_tasks: parameters must be a JSON object, got a string",
        ),
        (
            json!(42),
            "Invalid parameters for check_async_tasks: parameters must be a JSON object, got a number",
        ),
    ];
    for (params, expected) in cases {
        let result = call(&tool, params.clone()).await;
        let error = result.error.expect("an error");
        assert_eq!(
            (error.kind, error.message.as_str()),
            (ToolErrorType::InvalidToolParams, expected),
            "{params}"
        );
        assert_eq!(result.llm_content, expected);
    }
}

// ---------------------------------------------------------------- live output

#[tokio::test]
async fn a_running_task_shows_its_latest_output() {
    let clock = ManualClock::new(T0);
    let manager = AsyncTaskManager::with_clock(MaxAsyncTasks::default(), Arc::new(clock.clone()));
    let progress = TaskProgress::new();
    manager
        .register_task(
            RegisterTaskInput::new(
                "0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11",
                "tester",
                "Run the suite",
            )
            .with_progress(progress.clone()),
        )
        .expect("registered");
    progress.set_output_file("/tmp/asynctask-test/0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11.out");
    for n in 1..=12 {
        progress.record_output(format!("test io::retry_{n:02} ... ok\n").as_bytes());
    }
    progress.record_output(b"test io::retry_13 ... ");
    clock.advance(75_000);
    let tool = CheckAsyncTasksTool::new(manager.clone());
    let peek = call(&tool, json!({"task_id": "0f3a"})).await;
    insta::assert_snapshot!("peek_running_with_output", redacted(&peek, &[]));
    let details: Value = serde_json::from_str(&peek.llm_content).expect("JSON");
    assert_eq!(details["recentOutput"].as_array().map(Vec::len), Some(10));
    assert_eq!(details["recentOutput"][9], "test io::retry_13 ... ");
    assert_eq!(details["duration"], "1m 15s");

    let list = asynctask_tools::run_slash_command(&manager, "/tasks list").expect("ours");
    insta::assert_snapshot!("tasks_list_with_output", list.text);

    // Once it ends, its progress is gone with it: the result speaks for itself.
    manager.complete_task(
        "0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11",
        OutputObject::new(TerminateReason::Goal),
    );
    let done = call(&tool, json!({"task_id": "0f3a"})).await;
    let details: Value = serde_json::from_str(&done.llm_content).expect("JSON");
    assert_eq!(details.get("recentOutput"), None);
    assert_eq!(details.get("outputFile"), None);
}

#[tokio::test]
async fn live_output_stays_within_the_peek_budget() {
    let manager = AsyncTaskManager::default();
    let progress = TaskProgress::new();
    manager
        .register_task(
            RegisterTaskInput::new("a", "tester", "x".repeat(50_000))
                .with_progress(progress.clone()),
        )
        .expect("registered");
    for _ in 0..100 {
        progress.record_output(format!("{}\n", "é".repeat(5_000)).as_bytes());
    }
    let peek = call(&CheckAsyncTasksTool::new(manager), json!({"task_id": "a"})).await;
    let length = peek.llm_content.chars().count();
    assert!(length <= PEEK_BUDGET_CHARS, "{length} characters");
    let details: Value = serde_json::from_str(&peek.llm_content).expect("JSON");
    assert_eq!(details["recentOutput"].as_array().map(Vec::len), Some(10));
}

#[tokio::test]
async fn a_shared_registry_marks_each_task_with_its_session() {
    let (manager, _) = fixture();
    manager
        .register_task(
            RegisterTaskInput::new("aaaa1111-1", "researcher", "mine").with_origin("s-1"),
        )
        .expect("registered");
    manager
        .register_task(RegisterTaskInput::new("bbbb2222-2", "tester", "theirs").with_origin("s-2"))
        .expect("registered");
    let tool = CheckAsyncTasksTool::new(manager.clone());
    let context = asynctask_tools::CallContext::new().with_origin("s-1");
    let list = asynctask_tools::with_call_context(context.clone(), call(&tool, json!({}))).await;
    insta::assert_snapshot!("list_with_sessions", redacted(&list, &[]));
    let slash = asynctask_tools::with_call_context(context, async {
        asynctask_tools::run_slash_command(&manager, "/tasks list").expect("ours")
    })
    .await;
    assert!(
        slash
            .text
            .contains("aaaa1111 researcher (0s) - mine (this session)"),
        "{}",
        slash.text
    );
    assert!(
        slash
            .text
            .contains("bbbb2222 tester (0s) - theirs (session s-2)"),
        "{}",
        slash.text
    );
}

/// A runner that reports a line of progress, then works until it is released
/// (or cancelled).
#[derive(Debug, Default)]
struct Reporting {
    release: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl asynctask_tools::SubagentRunner for Reporting {
    async fn run(
        &self,
        request: asynctask_tools::SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, asynctask_tools::SubagentError> {
        request.progress.report("step 1 of 3: reading the code");
        tokio::select! {
            () = self.release.notified() => Ok(OutputObject::new(TerminateReason::Goal)),
            () = cancel.cancelled() => Err(asynctask_tools::SubagentError::new("cancelled")),
        }
    }
}

/// Waits until `check` holds; fails the test after 10 s.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    asynctask_test_support::eventually_async(what, std::time::Duration::from_secs(10), check).await;
}

/// A peek at `id`: the details the model reads, and what the user sees.
async fn peek(manager: &AsyncTaskManager, id: &str) -> (Value, String) {
    let peek = call(
        &CheckAsyncTasksTool::new(manager.clone()),
        json!({"task_id": id}),
    )
    .await;
    let details: Value = serde_json::from_str(&peek.llm_content).expect("JSON");
    (details, peek.return_display)
}

/// What a peek at `id` shows as its recent output.
async fn recent_output(manager: &AsyncTaskManager, id: &str) -> Value {
    peek(manager, id).await.0["recentOutput"].clone()
}

#[tokio::test]
async fn a_background_runners_progress_reaches_the_peek_and_the_task_list() {
    let clock = ManualClock::new(T0);
    let manager = AsyncTaskManager::with_clock(MaxAsyncTasks::default(), Arc::new(clock.clone()));
    let runner = Arc::new(Reporting::default());
    let tool = asynctask_tools::TaskTool::new(manager.clone(), runner.clone());
    let launched = tool
        .execute(
            json!({"subagent_name": "r", "goal_prompt": "work", "async": true}),
            CancellationToken::new(),
        )
        .await;
    let id = launched.metadata["agentId"]
        .as_str()
        .expect("an id")
        .to_owned();
    let prefix: String = id.chars().take(8).collect();
    eventually("the line is recorded", || {
        manager
            .progress(&id)
            .is_some_and(|p| !p.snapshot().is_empty())
    })
    .await;
    clock.advance(75_000);

    // The model's peek: running for 1m 15s, with the line the runner reported.
    let (details, display) = peek(&manager, &id).await;
    assert_eq!(details["status"], "running");
    assert_eq!(details["duration"], "1m 15s");
    assert_eq!(
        details["recentOutput"],
        json!(["step 1 of 3: reading the code"])
    );
    // The user's: the same, in its own words.
    assert!(display.contains("Duration: 1m 15s"), "{display}");
    assert!(
        display.contains("Latest output:\n  | step 1 of 3: reading the code"),
        "{display}"
    );
    // The list says how long it has run; `/tasks list` quotes the line too.
    let list = call(&CheckAsyncTasksTool::new(manager.clone()), json!({})).await;
    assert!(
        list.llm_content
            .contains(&format!("[{prefix}] r - running (1m 15s)")),
        "{}",
        list.llm_content
    );
    let slash = asynctask_tools::run_slash_command(&manager, "/tasks list").expect("ours");
    assert!(
        slash.text.contains(&format!(
            "[RUNNING] {prefix} r (1m 15s) - work\n    > step 1 of 3: reading the code"
        )),
        "{}",
        slash.text
    );
    runner.release.notify_one();
    eventually("the task ends", || manager.counts().running == 0).await;
}

#[tokio::test]
async fn a_synchronous_runners_progress_reaches_its_call_and_once_detached_the_peek() {
    let manager = AsyncTaskManager::default();
    let runner = Arc::new(Reporting::default());
    let tool = asynctask_tools::TaskTool::new(manager.clone(), runner.clone()).with_sync_detach(
        asynctask_tools::SyncDetach::after(std::time::Duration::from_millis(200)),
    );
    let context = asynctask_tools::CallContext::new();
    let call_progress = context.progress.clone();
    let sync_call = tokio::spawn(asynctask_tools::with_call_context(context, async move {
        tool.execute(
            json!({"subagent_name": "r", "goal_prompt": "work"}),
            CancellationToken::new(),
        )
        .await
    }));
    // While the call waits, its own progress (what a server reports) has the line.
    eventually("the call's progress has the line", || {
        call_progress.snapshot().last_line() == Some("step 1 of 3: reading the code")
    })
    .await;
    // Detached: a background task now, whose peek and list show the same line.
    let detached = sync_call.await.expect("no panic");
    let id = detached.metadata["agentId"]
        .as_str()
        .expect("an id")
        .to_owned();
    assert_eq!(manager.counts().running, 1, "{}", detached.llm_content);
    assert_eq!(
        recent_output(&manager, &id).await,
        json!(["step 1 of 3: reading the code"])
    );
    let list = asynctask_tools::run_slash_command(&manager, "/tasks list").expect("ours");
    assert!(
        list.text.contains("step 1 of 3: reading the code"),
        "{}",
        list.text
    );
    runner.release.notify_one();
    eventually("the task ends", || manager.counts().running == 0).await;
}

// ---------------------------------------------------------------- project

#[tokio::test]
async fn a_peek_names_the_project_its_server_works_in() {
    let (manager, _clock) = fixture();
    let tool = CheckAsyncTasksTool::new(manager);
    let context = asynctask_tools::CallContext::new().with_project("/work/project");
    let peek = asynctask_tools::with_call_context(
        context,
        tool.execute(json!({"task_id": "0f3a"}), CancellationToken::new()),
    )
    .await;
    insta::assert_snapshot!("peek_with_project", redacted(&peek, &[]));
    let details: Value = serde_json::from_str(&peek.llm_content).expect("JSON");
    assert_eq!(details["project"], "/work/project");
    // Without a project (a host that has none), the key is absent.
    let plain = call(&tool, json!({"task_id": "0f3a"})).await;
    let details: Value = serde_json::from_str(&plain.llm_content).expect("JSON");
    assert_eq!(details.get("project"), None);
}
