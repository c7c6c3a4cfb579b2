//! Background launches (`async: true`): the launch text and metadata, what the
//! runner is given, a run's end (its output, its error, a panic), a run that outlives
//! the launching call, the limit refusal, and ids.

use pretty_assertions::assert_eq;

use super::*;

#[tokio::test(start_paused = true)]
async fn async_launch_texts_and_metadata() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 5);
    let result = call(&tool, async_params("researcher", json!({}))).await;
    let id = agent_id(&result);
    assert_eq!(id.len(), 36);

    insta::assert_snapshot!(
        "async_launch_result",
        redacted(&result, &[(&id, "<task-id>")])
    );
    assert_eq!(
        result,
        ToolResult::success(
            format!(
                "Async task launched: subagent 'researcher' (ID: {id}). Task is running in \
                 background. Use 'check_async_tasks' to monitor progress."
            ),
            format!("Async task started: **researcher** (`{id}`)"),
            json!({"agentId": id, "async": true, "status": "running"}),
        )
    );

    assert_eq!(
        manager.tasks(),
        vec![record(&id, "researcher", AsyncTaskStatus::Running)]
    );
    until(|| runner.started() == 1).await;
    assert_eq!(
        runner.requests(),
        vec![
            SubagentRequest::new(id.clone(), "researcher", "Find the callers").with_run_async(true)
        ]
    );
    assert!(manager.cancel_task(&id));
    settle(&tool).await;
}

#[tokio::test(start_paused = true)]
async fn async_request_carries_every_parameter() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (_manager, tool) = setup(&runner, 5);
    let params = async_params(
        "researcher",
        json!({
            "behaviour_prompts": ["be brief"],
            "tool_whitelist": ["grep", "read_file"],
            "output_spec": [{"name": "answer", "description": "the answer"}],
            "context": [{"name": "repo", "value": "/src"}],
            "timeout_seconds": 120,
        }),
    );
    let id = agent_id(&call(&tool, params).await);
    settle(&tool).await;
    assert_eq!(
        runner.requests(),
        vec![
            SubagentRequest::new(id, "researcher", "Find the callers")
                .with_behaviour_prompts(vec!["be brief".into()])
                .with_tool_whitelist(Some(vec!["grep".into(), "read_file".into()]))
                .with_output_spec(vec![OutputVarSpec {
                    name: "answer".into(),
                    description: "the answer".into()
                }])
                .with_context(vec![ContextVar {
                    name: "repo".into(),
                    value: "/src".into()
                }])
                .with_timeout(Duration::from_secs(120))
                .with_run_async(true)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn async_task_completes_with_the_runner_output() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (manager, tool) = setup(&runner, 5);
    let id = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    settle(&tool).await;
    assert_eq!(
        manager.tasks(),
        vec![AsyncTaskInfo {
            output: Some(output()),
            ..record(&id, "researcher", AsyncTaskStatus::Completed)
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn async_task_fails_with_the_runner_error() {
    let runner = FakeRunner::new(Behaviour::Fail("exit status 2"));
    let (manager, tool) = setup(&runner, 5);
    let id = agent_id(&call(&tool, async_params("tester", json!({}))).await);
    settle(&tool).await;
    assert_eq!(
        manager.tasks(),
        vec![AsyncTaskInfo {
            error: Some("exit status 2".into()),
            ..record(&id, "tester", AsyncTaskStatus::Failed)
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn async_panics_fail_the_task_with_the_payload() {
    for (behaviour, payload) in [
        (
            Behaviour::PanicStr("index out of bounds"),
            "index out of bounds",
        ),
        (
            Behaviour::PanicString("model said: 42".to_owned()),
            "model said: 42",
        ),
    ] {
        let runner = FakeRunner::new(behaviour);
        let (manager, tool) = setup(&runner, 5);
        let id = agent_id(&call(&tool, async_params("crasher", json!({}))).await);
        settle(&tool).await;
        assert_eq!(
            manager.tasks(),
            vec![AsyncTaskInfo {
                error: Some(format!("subagent panicked: {payload}")),
                ..record(&id, "crasher", AsyncTaskStatus::Failed)
            }]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn async_tasks_do_not_depend_on_the_launching_call() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 5);
    let call_token = CancellationToken::new();
    let result = tool
        .execute(async_params("researcher", json!({})), call_token.clone())
        .await;
    let id = agent_id(&result);
    until(|| runner.started() == 1).await;

    call_token.cancel();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!runner.token(0).is_cancelled());
    assert_eq!(
        manager.tasks(),
        vec![record(&id, "researcher", AsyncTaskStatus::Running)]
    );

    assert!(manager.cancel_task(&id));
    settle(&tool).await;
}

#[tokio::test(start_paused = true)]
async fn the_limit_refusal_says_what_to_do_next() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 1);
    let first = agent_id(&call(&tool, async_params("researcher", json!({}))).await);

    let refused = call(&tool, async_params("tester", json!({}))).await;
    insta::assert_snapshot!("limit_refusal", redacted(&refused, &[]));
    let text = "Max async tasks (1) reached. Wait for a running task to finish and check \
                progress with 'check_async_tasks', run this subagent synchronously (without \
                async: true), or try again later.";
    assert_eq!(
        refused,
        ToolResult::failure(
            ToolErrorType::ExecutionFailed,
            "Max async tasks (1) reached",
            text,
            text
        )
    );
    assert_eq!(
        manager.tasks(),
        vec![record(&first, "researcher", AsyncTaskStatus::Running)]
    );
    until(|| runner.started() == 1).await;
    tokio::task::yield_now().await;
    assert_eq!(runner.started(), 1, "the refused subagent never ran");

    assert!(manager.cancel_task(&first));
    settle(&tool).await;
}

#[tokio::test(start_paused = true)]
async fn two_launches_of_one_subagent_differ_in_their_first_8_characters() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (_manager, tool) = setup(&runner, 5);
    let a = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    let b = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    assert_ne!(a[..8], b[..8]);
    settle(&tool).await;
}
