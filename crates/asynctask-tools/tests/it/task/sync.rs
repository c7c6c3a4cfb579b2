//! Synchronous runs: the completion JSON, a runner error, a panic.

use pretty_assertions::assert_eq;

use super::*;

#[tokio::test(start_paused = true)]
async fn sync_result_is_the_completion_json() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (manager, tool) = setup(&runner, 5);
    for run_async in [json!({}), json!({"async": false}), json!({"async": null})] {
        let result = call(&tool, sync_params("researcher", run_async)).await;
        let id = agent_id(&result);
        insta::assert_snapshot!("sync_result", redacted(&result, &[(&id, "<task-id>")]));

        let mut task = AsyncTaskInfo::new(id.clone(), "researcher", "Find the callers", T0);
        task.complete(output(), T0);
        assert_eq!(
            result,
            ToolResult::success(
                completion_notification(&task),
                "Subagent **researcher** finished (`GOAL`)",
                json!({
                    "agentId": id,
                    "terminateReason": "GOAL",
                    "emittedVars": {"answer": "42", "files": "src/io.rs, src/retry.rs"},
                }),
            )
        );
    }
    assert_eq!(
        manager.tasks(),
        Vec::<TaskSnapshot>::new(),
        "synchronous runs are not registered"
    );
    assert!(runner.requests().iter().all(|r| !r.run_async));
}

#[tokio::test(start_paused = true)]
async fn sync_runner_error_is_an_execution_failure() {
    let runner = FakeRunner::new(Behaviour::Fail("exit status 2"));
    let (manager, tool) = setup(&runner, 5);
    let result = call(&tool, sync_params("tester", json!({}))).await;
    let id = agent_id(&result);
    assert_eq!(
        result,
        ToolResult::failure(
            ToolErrorType::ExecutionFailed,
            "exit status 2",
            format!("{{\n  \"agent_id\": \"{id}\",\n  \"status\": \"failed\",\n  \"error\": \"exit status 2\"\n}}"),
            "Subagent **tester** failed: exit status 2",
        )
        .with_metadata(json!({"agentId": id, "status": "failed"}))
    );
    assert_eq!(manager.tasks(), Vec::<TaskSnapshot>::new());
}

#[tokio::test(start_paused = true)]
async fn sync_panic_is_an_unhandled_exception() {
    let runner = FakeRunner::new(Behaviour::PanicStr("boom"));
    let (_manager, tool) = setup(&runner, 5);
    let result = call(&tool, sync_params("crasher", json!({}))).await;
    let id = agent_id(&result);
    assert_eq!(
        result,
        ToolResult::failure(
            ToolErrorType::UnhandledException,
            "subagent panicked: boom",
            format!("{{\n  \"agent_id\": \"{id}\",\n  \"status\": \"failed\",\n  \"error\": \"subagent panicked: boom\"\n}}"),
            "Subagent **crasher** failed: subagent panicked: boom",
        )
        .with_metadata(json!({"agentId": id, "status": "failed"}))
    );
}
