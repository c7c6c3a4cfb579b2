//! The catalog of subagents: unknown names refused before anything is registered,
//! the name enum's bounds, and a runner without a catalog.

use pretty_assertions::assert_eq;

use super::*;

#[tokio::test(start_paused = true)]
async fn unknown_subagents_are_refused_before_anything_is_registered() {
    let runner = FakeRunner::with_catalog(Behaviour::Return(output()), &["researcher", "tester"]);
    let (manager, tool) = setup(&runner, 1);
    for params in [
        async_params("resercher", json!({})),
        sync_params("resercher", json!({})),
    ] {
        let refused = call(&tool, params).await;
        insta::assert_snapshot!("unknown_subagent", redacted(&refused, &[]));
        assert_eq!(
            refused.error.map(|error| error.kind),
            Some(ToolErrorType::InvalidToolParams)
        );
    }
    assert_eq!(
        manager.tasks(),
        Vec::<TaskSnapshot>::new(),
        "nothing registered"
    );
    assert_eq!(manager.counts().reserved, 0);
    assert_eq!(runner.started(), 0, "no subagent started");
    // The only slot is still free: a known subagent launches.
    let launched = call(&tool, async_params("tester", json!({}))).await;
    assert_eq!(launched.error, None);
    settle(&tool).await;
    assert_eq!(runner.started(), 1);
}

/// A runner with a catalog of `count` subagents named `prefix` and a number.
#[derive(Debug)]
struct ManyNames {
    count: usize,
    prefix: String,
}

#[async_trait]
impl SubagentRunner for ManyNames {
    async fn run(
        &self,
        _request: SubagentRequest,
        _cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        Err(SubagentError::new("not run"))
    }

    fn catalog(&self) -> Option<Vec<SubagentInfo>> {
        Some(
            (0..self.count)
                .map(|i| SubagentInfo::new(format!("{}{i:03}", self.prefix), ""))
                .collect(),
        )
    }
}

#[test]
fn the_enum_is_bounded_in_count_and_in_length() {
    let has_enum = |count: usize, prefix: &str| {
        let runner = ManyNames {
            count,
            prefix: prefix.to_owned(),
        };
        let spec = TaskTool::new(AsyncTaskManager::default(), Arc::new(runner)).spec();
        // The description lists them either way.
        assert!(spec.description.contains(&format!("- {prefix}000")));
        spec.parameters["properties"]["subagent_name"]
            .get("enum")
            .is_some()
    };
    assert!(has_enum(MAX_ENUM_NAMES, "a"));
    assert!(!has_enum(MAX_ENUM_NAMES + 1, "a"));
    // 100 names of 153 characters: 15,300 in all, over the length bound.
    let long = "n".repeat(150);
    assert!(!has_enum(100, &long));
    // 90 of them: 13,770, within it.
    assert!(has_enum(90, &long));
    const { assert!(MAX_ENUM_CHARS == 15_000) };
}

#[tokio::test(start_paused = true)]
async fn without_a_catalog_any_name_goes_to_the_runner() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (_manager, tool) = setup(&runner, 5);
    let result = call(&tool, sync_params("anything-at-all", json!({}))).await;
    assert_eq!(result.error, None);
    assert_eq!(runner.requests()[0].subagent_name, "anything-at-all");
    assert!(
        tool.spec().parameters["properties"]["subagent_name"]
            .get("enum")
            .is_none()
    );
}
