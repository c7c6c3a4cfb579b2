//! Bad parameters name their field; the tool's spec.

use pretty_assertions::assert_eq;

use super::*;

#[tokio::test]
async fn bad_parameters_name_the_field() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (manager, tool) = setup(&runner, 5);
    let base = |extra: Value| async_params("researcher", extra);
    let corpus = [
        (
            json!({"subagent_name": 5, "goal_prompt": "g"}),
            "subagent_name: invalid type: integer `5`, expected a string",
        ),
        (
            json!({"subagent_name": "   ", "goal_prompt": "g", "async": true}),
            "subagent_name: must not be blank",
        ),
        (
            json!({"subagent_name": "a", "goal_prompt": ""}),
            "goal_prompt: must not be blank",
        ),
        (json!({"goal_prompt": "g"}), "missing field `subagent_name`"),
        (Value::Null, "missing field `subagent_name`"),
        (
            base(json!({"async": "yes"})),
            "async: invalid type: string \"yes\", expected a boolean",
        ),
        (
            base(json!({"timeout_seconds": "60"})),
            "timeout_seconds: invalid type: string \"60\", expected a JSON number",
        ),
        (
            base(json!({"timeout_seconds": -5})),
            "timeout_seconds: expected -1 or a non-negative integer number of seconds, got -5",
        ),
        (
            base(json!({"behaviour_prompts": "be brief"})),
            "behaviour_prompts: invalid type: string \"be brief\", expected a sequence",
        ),
        (
            base(json!({"context": [{"name": "repo"}]})),
            "context[0]: missing field `value`",
        ),
        (
            base(json!({"extra": 1})),
            "extra: unknown field `extra`, expected one of `subagent_name`, `goal_prompt`, \
             `behaviour_prompts`, `tool_whitelist`, `output_spec`, `context`, \
             `timeout_seconds`, `async`",
        ),
        (json!([1]), "parameters must be a JSON object, got an array"),
        (
            json!("run it"),
            "parameters must be a JSON object, got a string",
        ),
        (json!(7), "parameters must be a JSON object, got a number"),
    ];
    for (params, problem) in corpus {
        let message = format!("Invalid parameters for task: {problem}");
        assert_eq!(
            call(&tool, params.clone()).await,
            ToolResult::failure(
                ToolErrorType::InvalidToolParams,
                message.clone(),
                message.clone(),
                message
            ),
            "params: {params}"
        );
    }
    assert_eq!(runner.started(), 0, "no runner was started");
    assert_eq!(manager.tasks(), Vec::<TaskSnapshot>::new());
}

#[tokio::test(start_paused = true)]
async fn spec_is_the_task_tool() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (_manager, tool) = setup(&runner, 5);
    let spec = tool.spec();
    assert_eq!(
        (spec.name.as_str(), spec.display_name.as_str()),
        ("task", "Task")
    );
    assert_eq!(spec.parameters["additionalProperties"], json!(false));
}
