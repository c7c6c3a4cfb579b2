//! The manager and the tools, without the runtime: the host calls the tools the
//! model asks for and delivers results itself.
//!
//! Run with `cargo run -p asynctask-tools --example tools`.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example shows its output"
)]

use std::sync::Arc;
use std::time::Duration;

use asynctask_manager::AsyncTaskManager;
use asynctask_model::{OutputObject, TerminateReason};
use asynctask_tools::{
    CheckAsyncTasksTool, SubagentError, SubagentRequest, SubagentRunner, TaskTool, Tool,
    completion_notification,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A subagent that "works" for 50 ms.
struct Worker;

#[async_trait::async_trait]
impl SubagentRunner for Worker {
    async fn run(
        &self,
        request: SubagentRequest,
        _cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(OutputObject::new(TerminateReason::Goal)
            .with_final_message(format!("done: {}", request.goal_prompt)))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let manager = AsyncTaskManager::default();
    let task = TaskTool::new(manager.clone(), Arc::new(Worker));
    let check = CheckAsyncTasksTool::new(manager.clone());

    println!(
        "OpenAI definition of `task`:\n{}\n",
        task.spec().to_openai_chat()
    );

    let launched = task
        .execute(
            json!({"subagent_name": "worker", "goal_prompt": "summarise the log", "async": true}),
            CancellationToken::new(),
        )
        .await;
    println!("{}\n", launched.llm_content);
    println!(
        "{}\n",
        check
            .execute(json!({}), CancellationToken::new())
            .await
            .llm_content
    );

    task.tracker().close();
    task.tracker().wait().await; // a host would instead subscribe to the manager's events
    for finished in manager.pending_notifications() {
        println!(
            "deliver to the model:\n{}",
            completion_notification(&finished)
        );
        manager.mark_notified(finished.id());
    }
    let bad = check
        .execute(json!({"task_id": 42}), CancellationToken::new())
        .await;
    println!(
        "\nbad parameters are a result, not a panic: {}",
        bad.llm_content
    );
}
