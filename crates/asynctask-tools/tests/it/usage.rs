//! What each task used: shown by `check_async_tasks` (list and peek), `/tasks
//! list`, the completion notification and the synchronous result's metadata;
//! a task that reported nothing shows nothing new.

use std::sync::Arc;

use asynctask_manager::{AsyncTaskManager, RegisterTaskInput, TaskProgress};
use asynctask_model::{ManualClock, MaxAsyncTasks, OutputObject, TaskUsage, TerminateReason};
use asynctask_tools::{
    CheckAsyncTasksTool, SubagentError, SubagentRequest, SubagentRunner, TaskTool,
    completion_notification, run_slash_command,
};
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::check_async_tasks::{T0, call};
use crate::redacted;

const CODER: &str = "0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11";
const REVIEWER: &str = "7b2e0d44-1c9a-4f3e-8d6b-2a5c9e7f0b33";
const QUIET: &str = "c91d5e8f-3a7b-4e2c-b1d9-8f6a4c2e0d55";
const RUNNING: &str = "e4a8b7c2-9d1f-4a6e-8c3b-5f2d7e9a1b77";

/// A coder that finished and reported usage, a reviewer that failed after
/// reporting its tokens only, a tester that reported nothing, and a coder
/// still running that reported usage so far; the clock 2m 30s after launch.
fn fixture() -> (AsyncTaskManager, ManualClock) {
    let clock = ManualClock::new(T0);
    let manager = AsyncTaskManager::with_clock(MaxAsyncTasks::default(), Arc::new(clock.clone()));
    let register = |id: &str, agent: &str, goal: &str| {
        let progress = TaskProgress::new();
        manager
            .register_task(RegisterTaskInput::new(id, agent, goal).with_progress(progress.clone()))
            .expect("fixture tasks fit the limit");
        progress
    };
    let coder = register(CODER, "coder", "Fix the flaky retry test");
    let reviewer = register(REVIEWER, "reviewer", "Review the diff");
    register(QUIET, "tester", "Run the suite");
    let running = register(RUNNING, "coder", "Port the parser");
    coder.report_usage(
        TaskUsage::new()
            .with_input_tokens(48_210)
            .with_output_tokens(3_115)
            .with_cost_usd(0.184_27)
            .with_model("claude-sonnet-4-5"),
    );
    reviewer.report_usage(
        TaskUsage::new()
            .with_input_tokens(9_000)
            .with_output_tokens(420),
    );
    running.report_usage(
        TaskUsage::new()
            .with_input_tokens(1_200)
            .with_cost_usd(0.0061)
            .with_model("gpt-5-codex"),
    );
    clock.advance(95_000);
    manager.complete_task(
        CODER,
        OutputObject::new(TerminateReason::Goal)
            .with_final_message("Fixed: the retry waited on a stale timer."),
    );
    manager.fail_task(REVIEWER, "model returned an empty response");
    manager.complete_task(QUIET, OutputObject::new(TerminateReason::Goal));
    clock.advance(55_000);
    (manager, clock)
}

#[tokio::test]
async fn the_list_shows_each_task_s_usage_and_the_session_s_totals() {
    let (manager, _) = fixture();
    let tool = CheckAsyncTasksTool::new(manager.clone());
    let list = call(&tool, json!({})).await;
    insta::assert_snapshot!("list_with_usage", redacted(&list, &[]));
    assert_eq!(
        list.metadata["usage"],
        json!({"input_tokens": 58_410, "output_tokens": 3_535, "cost_usd": 0.190_37, "tasks": 3})
    );
    let slash = run_slash_command(&manager, "/tasks list").expect("ours");
    insta::assert_snapshot!("tasks_list_with_usage", slash.text);
}

#[tokio::test]
async fn a_peek_shows_what_the_task_used_by_its_end_or_so_far() {
    let (manager, _) = fixture();
    let tool = CheckAsyncTasksTool::new(manager);
    let finished = call(&tool, json!({"task_id": "0f3a"})).await;
    insta::assert_snapshot!("peek_completed_with_usage", redacted(&finished, &[]));
    let running = call(&tool, json!({"task_id": "e4a8"})).await;
    insta::assert_snapshot!("peek_running_with_usage", redacted(&running, &[]));
    let quiet = call(&tool, json!({"task_id": "c91d"})).await;
    assert!(
        !quiet.llm_content.contains("usage"),
        "{}",
        quiet.llm_content
    );
}

#[test]
fn a_completion_notification_ends_with_usage_and_elapsed_time_only_when_reported() {
    let (manager, _) = fixture();
    let texts: Vec<String> = [CODER, REVIEWER, QUIET]
        .iter()
        .map(|id| completion_notification(&manager.task(id).expect("held")))
        .collect();
    insta::assert_snapshot!("notifications_with_usage", texts.join("\n\n"));
    manager.cancel_task(RUNNING);
    let cancelled = completion_notification(&manager.task(RUNNING).expect("held"));
    let value: serde_json::Value = serde_json::from_str(&cancelled).expect("JSON");
    assert_eq!(
        value,
        json!({
            "agent_id": RUNNING,
            "status": "cancelled",
            "usage": {"input_tokens": 1_200, "cost_usd": 0.0061, "model": "gpt-5-codex"},
            "elapsed": "2m 30s",
        })
    );
}

/// Reports usage twice while it works, then finishes.
struct Reporting;

#[async_trait::async_trait]
impl SubagentRunner for Reporting {
    async fn run(
        &self,
        request: SubagentRequest,
        _cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        request
            .progress
            .report_usage(TaskUsage::new().with_input_tokens(100).with_model("m-1"));
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        request.progress.add_usage(
            &TaskUsage::new()
                .with_input_tokens(50)
                .with_output_tokens(7)
                .with_cost_usd(0.002),
        );
        Ok(OutputObject::new(TerminateReason::Goal).with_final_message("done"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_synchronous_result_carries_the_usage_in_its_text_and_metadata() {
    // A clock of its own, which the run does not move: the elapsed time is
    // known.
    let clock = ManualClock::new(T0);
    let manager = AsyncTaskManager::with_clock(MaxAsyncTasks::default(), Arc::new(clock));
    let tool = TaskTool::new(manager, Arc::new(Reporting));
    let result = call(
        &tool,
        json!({"subagent_name": "coder", "goal_prompt": "Fix it"}),
    )
    .await;
    let id = result.metadata["agentId"]
        .as_str()
        .expect("an id")
        .to_owned();
    insta::assert_snapshot!(
        "sync_result_with_usage",
        redacted(&result, &[(&id, "<task-id>")])
    );
    assert_eq!(
        result.metadata["usage"],
        json!({"input_tokens": 150, "output_tokens": 7, "cost_usd": 0.002, "model": "m-1"})
    );
}
