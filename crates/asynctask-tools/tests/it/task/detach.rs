//! Sync-detach: a synchronous call that runs long becomes a background task.

use pretty_assertions::assert_eq;

use super::*;

const DETACH: Duration = Duration::from_secs(50);

fn detached_result(name: &str, id: &str, seconds: u64) -> ToolResult {
    ToolResult::success(
        format!(
            "Subagent '{name}' is still running after {seconds} seconds; it continues in the \
             background as async task {id}. Its result will be reported when it finishes; use \
             'check_async_tasks' to follow it."
        ),
        format!("Subagent **{name}** continues in the background (`{id}`)"),
        json!({"agentId": id, "async": true, "status": "running", "detached": true}),
    )
}

#[tokio::test(start_paused = true)]
async fn sync_detach_turns_a_long_sync_call_into_a_background_task() {
    let runner = FakeRunner::new(Behaviour::Sleep(120));
    let (manager, tool) = setup(&runner, 5);
    let tool = tool.with_sync_detach(SyncDetach::after(DETACH));
    let start = Instant::now();
    let call_token = CancellationToken::new();
    let result = tool
        .execute(sync_params("researcher", json!({})), call_token.clone())
        .await;
    assert_eq!(start.elapsed(), DETACH);
    let id = agent_id(&result);
    assert_eq!(result, detached_result("researcher", &id, 50));
    insta::assert_snapshot!("detached_result", redacted(&result, &[(&id, "<task-id>")]));
    assert_eq!(
        manager.tasks(),
        vec![record(&id, "researcher", AsyncTaskStatus::Running)]
    );

    // The call is over: cancelling its token no longer reaches the subagent.
    call_token.cancel();
    settle(&tool).await;
    assert_eq!(start.elapsed(), Duration::from_secs(120));
    let done = manager.task(&id).expect("held until delivered");
    assert_eq!(done.status(), AsyncTaskStatus::Completed);
    assert_eq!(done.output(), Some(&output()));
    assert_eq!(manager.pending_notifications().len(), 1);
    assert_eq!(runner.started(), 1, "the same run went on");
}

#[tokio::test(start_paused = true)]
async fn sync_detach_leaves_short_calls_synchronous() {
    let runner = FakeRunner::new(Behaviour::Sleep(10));
    let (manager, tool) = setup(&runner, 5);
    let tool = tool.with_sync_detach(SyncDetach::after(DETACH));
    let result = call(&tool, sync_params("researcher", json!({}))).await;
    assert!(!result.is_error());
    assert!(
        result
            .llm_content
            .contains("\"terminate_reason\": \"GOAL\"")
    );
    assert!(manager.tasks().is_empty());
}

#[tokio::test(start_paused = true)]
async fn sync_detach_keeps_waiting_while_the_limit_is_reached() {
    let runner = FakeRunner::new(Behaviour::Sleep(120));
    let (manager, tool) = setup(&runner, 1);
    let tool = tool.with_sync_detach(SyncDetach::after(DETACH));
    let launched = call(&tool, async_params("researcher", json!({}))).await;
    let start = Instant::now();
    let result = call(&tool, sync_params("tester", json!({}))).await;
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(120),
        "waited to the end"
    );
    assert!(
        result
            .llm_content
            .contains("\"terminate_reason\": \"GOAL\"")
    );
    assert_eq!(manager.tasks().len(), 1);
    assert_eq!(manager.tasks()[0].id(), agent_id(&launched));
}

#[tokio::test(start_paused = true)]
async fn a_detached_run_keeps_its_timeout_from_the_original_start() {
    let runner = FakeRunner::new(Behaviour::Sleep(120));
    let (manager, tool) = setup(&runner, 5);
    let tool = tool.with_sync_detach(SyncDetach::after(DETACH));
    let start = Instant::now();
    let result = call(
        &tool,
        sync_params("researcher", json!({"timeout_seconds": 60})),
    )
    .await;
    let id = agent_id(&result);
    settle(&tool).await;
    assert_eq!(start.elapsed(), Duration::from_secs(60), "not 50 + 60");
    let failed = manager.task(&id).expect("held until delivered");
    assert_eq!(failed.status(), AsyncTaskStatus::Failed);
    assert_eq!(
        failed.error(),
        Some(timeout_text("researcher", 60).as_str())
    );
    assert!(runner.token(0).is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_detached_task_cancels_its_runner() {
    let runner = FakeRunner::new(Behaviour::Sleep(120));
    let (manager, tool) = setup(&runner, 5);
    let tool = tool.with_sync_detach(SyncDetach::after(DETACH));
    let id = agent_id(&call(&tool, sync_params("researcher", json!({}))).await);
    assert!(manager.cancel_task(&id));
    assert!(runner.token(0).is_cancelled());
    settle(&tool).await;
    assert_eq!(
        manager.task(&id).map(|task| task.status()),
        Some(AsyncTaskStatus::Cancelled)
    );
}
