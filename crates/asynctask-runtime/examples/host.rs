//! The whole runtime with a minimal host: the agent is woken when a background
//! task finishes while it is idle.
//!
//! Run with `cargo run -p asynctask-runtime --example host`.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example shows its output"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use asynctask_model::{OutputObject, TerminateReason};
use asynctask_runtime::{AgentHost, AsyncTaskRuntime, Reminder, TriggerError};
use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner};
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct Worker;

#[async_trait::async_trait]
impl SubagentRunner for Worker {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        tokio::select! {
            () = cancel.cancelled() => Err(SubagentError::new("cancelled")),
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                Ok(OutputObject::new(TerminateReason::Goal).with_final_message(format!("done: {}", request.goal_prompt)))
            }
        }
    }
}

/// The host's agent loop, reduced to a flag and a print.
#[derive(Default)]
struct Agent {
    busy: AtomicBool,
}

#[async_trait::async_trait]
impl AgentHost for Agent {
    fn is_agent_busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst)
    }

    async fn trigger_agent_turn(&self, reminder: Reminder) -> Result<(), TriggerError> {
        println!(
            "the agent is woken for {} task(s) with:\n{}",
            reminder.task_ids.len(),
            reminder.text
        );
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let agent = Arc::new(Agent::default());
    let runtime = AsyncTaskRuntime::builder()
        .host(Arc::clone(&agent) as Arc<dyn AgentHost>)
        .runner(Arc::new(Worker))
        .build();
    let tools = runtime.tools();
    let Some(task) = tools.iter().find(|tool| tool.name() == "task") else {
        return;
    };
    agent.busy.store(true, Ordering::SeqCst);
    let launched = task
        .execute(
            json!({"subagent_name": "worker", "goal_prompt": "index the docs", "async": true}),
            CancellationToken::new(),
        )
        .await;
    println!("{}", launched.llm_content);
    println!("system instruction status:\n{}\n", runtime.status_summary());
    agent.busy.store(false, Ordering::SeqCst);
    runtime.agent_idle(); // the turn ended
    tokio::time::sleep(Duration::from_millis(300)).await;
    runtime.shutdown().await;
}
