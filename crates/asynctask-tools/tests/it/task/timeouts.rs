//! Timeouts: a background or sync run that times out (its text, the output file, the
//! cap), a runner that ignores its timeout, and how `timeout_seconds` resolves
//! against the configured default and maximum.

use pretty_assertions::assert_eq;

use super::*;

#[tokio::test(start_paused = true)]
async fn async_timeout_fails_the_task_and_cancels_the_runner() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 5);
    let start = Instant::now();
    let id = agent_id(&call(&tool, async_params("slow", json!({"timeout_seconds": 60}))).await);
    settle(&tool).await;

    assert_eq!(
        start.elapsed(),
        Duration::from_secs(60),
        "a cooperative runner gets no grace"
    );
    assert!(runner.token(0).is_cancelled());
    assert_eq!(runner.aborted(), 0);
    insta::assert_snapshot!("timeout_error", manager.task(&id).unwrap().error().unwrap());
    // The runner answered the cancel with a GOAL output; the timeout still stands.
    assert_eq!(
        manager.tasks(),
        vec![AsyncTaskInfo {
            error: Some(timeout_text("slow", 60)),
            ..record(&id, "slow", AsyncTaskStatus::Failed)
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn a_runner_ignoring_a_timeout_is_aborted_after_the_grace_period() {
    let runner = FakeRunner::new(Behaviour::IgnoreCancel);
    let (manager, tool) = setup(&runner, 5);
    let start = Instant::now();
    let id = agent_id(
        &call(
            &tool,
            async_params("stubborn", json!({"timeout_seconds": 10})),
        )
        .await,
    );
    let failed = AsyncTaskInfo {
        error: Some(timeout_text("stubborn", 10)),
        ..record(&id, "stubborn", AsyncTaskStatus::Failed)
    };

    // Just after the timeout: the task has failed, the runner is in its grace.
    tokio::time::sleep(Duration::from_millis(10_001)).await;
    assert_eq!(manager.tasks(), vec![failed.clone()]);
    assert!(runner.token(0).is_cancelled());
    assert_eq!(runner.aborted(), 0);

    settle(&tool).await;
    assert_eq!(start.elapsed(), Duration::from_secs(10) + GRACE);
    assert_eq!(runner.aborted(), 1);
    assert_eq!(manager.tasks(), vec![failed]);
}

#[tokio::test(start_paused = true)]
async fn sync_timeout_names_the_timeout_and_the_setting() {
    let runner = FakeRunner::new(Behaviour::IgnoreCancel);
    let (_manager, tool) = setup(&runner, 5);
    let start = Instant::now();
    let result = call(
        &tool,
        sync_params("stubborn", json!({"timeout_seconds": 30})),
    )
    .await;
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(30),
        "the caller does not wait for the grace"
    );
    let id = agent_id(&result);
    let text = timeout_text("stubborn", 30);
    assert_eq!(
        result,
        ToolResult::failure(
            ToolErrorType::Timeout,
            text.clone(),
            format!("{{\n  \"agent_id\": \"{id}\",\n  \"status\": \"failed\",\n  \"error\": \"{text}\"\n}}"),
            "Subagent **stubborn** timed out after 30 seconds",
        )
        .with_metadata(json!({"agentId": id, "status": "failed"}))
    );
    assert!(runner.token(0).is_cancelled());

    // The runner ignores its token: it is aborted after the grace period.
    assert_eq!(runner.aborted(), 0);
    settle(&tool).await;
    assert_eq!(start.elapsed(), Duration::from_secs(30) + GRACE);
    assert_eq!(runner.aborted(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_names_the_file_that_holds_what_the_subagent_printed() {
    let runner = FakeRunner::new(Behaviour::PrintThenWait);
    let (manager, tool) = setup(&runner, 5);
    let sync = call(&tool, sync_params("slow", json!({"timeout_seconds": 30}))).await;
    let id = agent_id(&sync);
    let expected = format!(
        "{}\n\n[whole output: /outputs/{id}.out (13 bytes)]",
        timeout_text("slow", 30)
    );
    assert_eq!(
        sync.error.as_ref().map(|e| e.message.as_str()),
        Some(expected.as_str())
    );
    let notification: Value = serde_json::from_str(&sync.llm_content).expect("JSON");
    assert_eq!(notification["error"], expected.as_str());

    let id = agent_id(&call(&tool, async_params("slow", json!({"timeout_seconds": 60}))).await);
    settle(&tool).await;
    let error = manager
        .task(&id)
        .and_then(|task| task.error().map(str::to_owned))
        .expect("failed");
    insta::assert_snapshot!("timeout_error_with_output", error.replace(&id, "<task id>"));
}

#[tokio::test(start_paused = true)]
async fn a_timeout_at_the_cap_does_not_ask_for_a_larger_one() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (_manager, tool) = setup(&runner, 5);
    let start = Instant::now();
    let result = call(
        &tool,
        sync_params("slowest", json!({"timeout_seconds": -1})),
    )
    .await;
    assert_eq!(start.elapsed(), Duration::from_secs(1800));
    let error = result.error.expect("timed out");
    assert_eq!(
        (error.kind, error.message.as_str()),
        (
            ToolErrorType::Timeout,
            "Subagent 'slowest' timed out after 1800 seconds, the longest timeout_seconds \
             allows. Split the goal into smaller tasks, or ask the user to raise the host's \
             maximum timeout."
        )
    );
}

#[tokio::test(start_paused = true)]
async fn timeouts_resolve_to_the_default_and_are_capped() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (_manager, tool) = setup(&runner, 5);
    let cases = [
        (json!({}), 900),
        (json!({"timeout_seconds": null}), 900),
        (json!({"timeout_seconds": 60}), 60),
        (json!({"timeout_seconds": 1800}), 1800),
        (json!({"timeout_seconds": 1801}), 1800),
        (json!({"timeout_seconds": 99_999}), 1800),
        (json!({"timeout_seconds": -1}), 1800),
        (json!({"timeout_seconds": 0}), 1800),
    ];
    for (extra, _) in &cases {
        assert_eq!(
            call(&tool, sync_params("r", extra.clone())).await.error,
            None
        );
    }
    let got: Vec<u64> = runner
        .requests()
        .iter()
        .map(|r| r.timeout.as_secs())
        .collect();
    let expected: Vec<u64> = cases.iter().map(|(_, seconds)| *seconds).collect();
    assert_eq!(got, expected);
    assert_eq!(tool.timeouts(), TaskTimeouts::default());
}

#[tokio::test(start_paused = true)]
async fn configured_timeouts_apply_and_the_default_never_exceeds_the_max() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let manager = AsyncTaskManager::default();
    let timeouts = TaskTimeouts {
        default: Duration::from_secs(600),
        max: Duration::from_secs(120),
    };
    let tool = TaskTool::new(manager, Arc::clone(&runner) as Arc<dyn SubagentRunner>)
        .with_timeouts(timeouts);
    assert_eq!(tool.timeouts(), timeouts);
    let start = Instant::now();
    let result = call(&tool, sync_params("slow", json!({}))).await;
    assert_eq!(start.elapsed(), Duration::from_secs(120));
    assert_eq!(
        result.error.unwrap().message,
        "Subagent 'slow' timed out after 120 seconds, the longest timeout_seconds allows. \
         Split the goal into smaller tasks, or ask the user to raise the host's maximum timeout."
    );
}

#[test]
fn the_timeout_description_states_the_configured_timeouts() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let tool = TaskTool::new(
        AsyncTaskManager::default(),
        Arc::clone(&runner) as Arc<dyn SubagentRunner>,
    )
    .with_timeouts(TaskTimeouts {
        default: Duration::from_secs(60),
        max: Duration::from_secs(300),
    });
    assert_eq!(
        tool.spec().parameters["properties"]["timeout_seconds"]["description"],
        "Seconds before the subagent is stopped and the task fails: default 60, larger values \
         are capped at 300; -1 or 0 mean the maximum."
    );
    let default = TaskTool::new(
        AsyncTaskManager::default(),
        runner as Arc<dyn SubagentRunner>,
    );
    assert_eq!(
        default.spec().parameters["properties"]["timeout_seconds"]["description"],
        TaskParams::schema()["properties"]["timeout_seconds"]["description"],
        "the default configuration keeps the canonical text"
    );
}
