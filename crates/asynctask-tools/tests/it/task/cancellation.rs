//! Cancellation: `cancel_task`, the host's token, a dropped or cancelled sync call,
//! and a runner that ignores being cancelled (aborted after the grace period).

use pretty_assertions::assert_eq;

use super::*;

#[tokio::test(start_paused = true)]
async fn cancel_task_cancels_the_runner_and_the_task_stays_cancelled() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 5);
    let id = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    until(|| runner.started() == 1).await;
    assert!(!runner.token(0).is_cancelled());

    assert!(manager.cancel_task(&id));
    assert!(runner.token(0).is_cancelled());
    settle(&tool).await;
    // The runner returned an output after the cancel: it is not recorded.
    assert_eq!(
        manager.tasks(),
        vec![record(&id, "researcher", AsyncTaskStatus::Cancelled)]
    );
    assert_eq!(runner.aborted(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_host_cancelling_the_token_cancels_the_task() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 5);
    let id = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    until(|| runner.started() == 1).await;

    manager.cancellation_token(&id).unwrap().cancel();
    settle(&tool).await;
    assert_eq!(
        manager.tasks(),
        vec![record(&id, "researcher", AsyncTaskStatus::Cancelled)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_runner_ignoring_cancel_task_is_aborted_and_the_task_stays_cancelled() {
    let runner = FakeRunner::new(Behaviour::IgnoreCancel);
    let (manager, tool) = setup(&runner, 5);
    let id = agent_id(&call(&tool, async_params("stubborn", json!({}))).await);
    until(|| runner.started() == 1).await;

    let start = Instant::now();
    assert!(manager.cancel_task(&id));
    settle(&tool).await;
    assert_eq!(start.elapsed(), GRACE);
    assert_eq!(runner.aborted(), 1);
    assert_eq!(
        manager.tasks(),
        vec![record(&id, "stubborn", AsyncTaskStatus::Cancelled)]
    );
    assert_eq!(manager.counts().running, 0);
}

#[tokio::test(start_paused = true)]
async fn sync_call_cancelled_cancels_the_runner() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (_manager, tool) = setup(&runner, 5);
    let cancel = CancellationToken::new();
    let (result, ()) = tokio::join!(
        tool.execute(sync_params("researcher", json!({})), cancel.clone()),
        async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            cancel.cancel();
        }
    );
    let id = agent_id(&result);
    assert_eq!(
        result,
        ToolResult::failure(
            ToolErrorType::ExecutionFailed,
            "cancelled",
            format!("{{\n  \"agent_id\": \"{id}\",\n  \"status\": \"cancelled\"\n}}"),
            "Subagent **researcher** was cancelled",
        )
        .with_metadata(json!({"agentId": id, "status": "cancelled"}))
    );
    assert!(runner.token(0).is_cancelled());
    settle(&tool).await;
    assert_eq!(runner.aborted(), 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_sync_call_stops_its_runner() {
    let runner = FakeRunner::new(Behaviour::IgnoreCancel);
    let (_manager, tool) = setup(&runner, 5);
    let start = Instant::now();
    let abandoned = tokio::time::timeout(
        Duration::from_secs(1),
        call(&tool, sync_params("stubborn", json!({}))),
    )
    .await;
    assert!(abandoned.is_err(), "the call was still running");
    assert!(runner.token(0).is_cancelled());
    settle(&tool).await;
    assert_eq!(start.elapsed(), Duration::from_secs(1) + GRACE);
    assert_eq!(runner.aborted(), 1);
}
