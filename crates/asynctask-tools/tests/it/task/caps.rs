//! Caps: the session's launch budget and the nesting depth.

use pretty_assertions::assert_eq;

use super::*;

#[tokio::test(start_paused = true)]
async fn a_session_past_its_launch_budget_is_refused_and_refusals_cost_nothing() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 1);
    let tool = tool.with_launch_budget(LaunchBudget::new(2));
    let first = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    // Refused by the running limit: the launch is given back.
    let limited = call(&tool, async_params("tester", json!({}))).await;
    assert!(
        limited
            .llm_content
            .starts_with("Max async tasks (1) reached")
    );
    assert!(manager.cancel_task(&first));
    let second = call(&tool, async_params("tester", json!({}))).await;
    assert_eq!(second.error, None, "{}", second.llm_content);

    let refused = call(&tool, sync_params("writer", json!({}))).await;
    insta::assert_snapshot!("launch_cap_refusal", redacted(&refused, &[]));
    assert_eq!(manager.tasks().len(), 2, "nothing registered");
    manager.cancel_task(&agent_id(&second));
    // Another session's budget is its own.
    let other = asynctask_tools::CallContext::new().with_launches(LaunchBudget::new(1));
    let theirs = asynctask_tools::with_call_context(
        other,
        tool.execute(async_params("writer", json!({})), CancellationToken::new()),
    )
    .await;
    assert_eq!(theirs.error, None, "{}", theirs.llm_content);
    manager.cancel_task(&agent_id(&theirs));
    settle(&tool).await;
    assert_eq!(runner.started(), 3);
}

#[tokio::test(start_paused = true)]
async fn subagents_run_one_deeper_than_their_caller_and_no_deeper_than_the_cap() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (_manager, tool) = setup(&runner, 5);
    let tool = tool.with_nesting(Nesting::at(1).with_max_depth(Some(3)));
    call(&tool, sync_params("researcher", json!({}))).await;
    let inside =
        asynctask_tools::CallContext::new().with_nesting(Nesting::at(2).with_max_depth(Some(3)));
    asynctask_tools::with_call_context(
        inside,
        tool.execute(
            sync_params("researcher", json!({})),
            CancellationToken::new(),
        ),
    )
    .await;
    let depths: Vec<u32> = runner
        .requests()
        .iter()
        .map(|request| request.depth)
        .collect();
    assert_eq!(depths, [2, 3]);

    let too_deep =
        asynctask_tools::CallContext::new().with_nesting(Nesting::at(3).with_max_depth(Some(3)));
    let refused = asynctask_tools::with_call_context(
        too_deep,
        tool.execute(
            async_params("researcher", json!({})),
            CancellationToken::new(),
        ),
    )
    .await;
    insta::assert_snapshot!("nesting_refusal", redacted(&refused, &[]));
    assert_eq!(runner.requests().len(), 2, "the refused subagent never ran");
}
