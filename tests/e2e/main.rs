//! End-to-end: a fake agent host and a fake subagent runner driving the layers
//! together through their public APIs — the session the CLI demo shows.

mod demo;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use asynctask_model::{AsyncTaskInfo, MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_runtime::{AgentHost, AsyncTaskRuntime, Reminder, TriggerError};
use asynctask_tools::{
    CommandOutputKind, SubagentError, SubagentRequest, SubagentRunner, Tool, run_slash_command,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[test]
fn a_task_snapshot_survives_the_json_boundary() {
    let mut task = AsyncTaskInfo::new("0f3a9c21-1", "researcher", "map the code", 1_000);
    assert!(task.complete(
        OutputObject::new(TerminateReason::Goal).with_var("files", "12"),
        4_000
    ));
    let wire = serde_json::to_string(&task).expect("serializes");
    let back: AsyncTaskInfo = serde_json::from_str(&wire).expect("deserializes");
    assert_eq!(back, task);
    assert_eq!(MaxAsyncTasks::default().history_limit(), 10);
}

/// Subagents whose behaviour their name says: `quick` finishes after 2 s, `flaky`
/// fails after 3 s, `slow` runs until cancelled.
struct ScriptedRunner;

#[async_trait::async_trait]
impl SubagentRunner for ScriptedRunner {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        match request.subagent_name.as_str() {
            "quick" => {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Ok(OutputObject::new(TerminateReason::Goal)
                    .with_var("files", "12")
                    .with_final_message(format!("done: {}", request.goal_prompt)))
            }
            "flaky" => {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Err(SubagentError::new("exit status 1: connection refused"))
            }
            _ => {
                cancel.cancelled().await;
                Err(SubagentError::new("cancelled"))
            }
        }
    }
}

/// The agent: busy or idle, recording every turn it was woken for.
#[derive(Default)]
struct Agent {
    busy: AtomicBool,
    turns: Mutex<Vec<Reminder>>,
}

#[async_trait::async_trait]
impl AgentHost for Agent {
    fn is_agent_busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst)
    }

    async fn trigger_agent_turn(&self, reminder: Reminder) -> Result<(), TriggerError> {
        self.turns.lock().expect("turns lock").push(reminder);
        Ok(())
    }
}

impl Agent {
    fn turns(&self) -> Vec<Reminder> {
        self.turns.lock().expect("turns lock").clone()
    }
}

async fn call(tools: &[Arc<dyn Tool>], name: &str, params: Value) -> asynctask_tools::ToolResult {
    let tool = tools
        .iter()
        .find(|t| t.name() == name)
        .expect("tool exists");
    tool.execute(params, CancellationToken::new()).await
}

#[tokio::test(start_paused = true)]
async fn a_whole_session() {
    let agent = Arc::new(Agent::default());
    let runtime = AsyncTaskRuntime::builder()
        .host(Arc::clone(&agent) as Arc<dyn AgentHost>)
        .runner(Arc::new(ScriptedRunner))
        .build();
    let tools = runtime.tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
            "task",
            "check_async_tasks",
            "message_async_task",
            "answer_async_task",
            "todo_pause"
        ]
    );

    // The model launches three background tasks and keeps working (busy).
    agent.busy.store(true, Ordering::SeqCst);
    let mut ids = Vec::new();
    for name in ["quick", "flaky", "slow"] {
        let launched = call(
            &tools,
            "task",
            json!({"subagent_name": name, "goal_prompt": format!("{name} job"), "async": true}),
        )
        .await;
        assert!(
            launched
                .llm_content
                .starts_with(&format!("Async task launched: subagent '{name}' (ID: "))
        );
        ids.push(
            launched.metadata["agentId"]
                .as_str()
                .expect("an id")
                .to_owned(),
        );
    }
    let listed = call(&tools, "check_async_tasks", json!({})).await;
    assert!(
        listed
            .llm_content
            .starts_with("Async Tasks Summary:\n- Running: 3\n"),
        "{}",
        listed.llm_content
    );
    assert_eq!(
        runtime.status_summary().lines().next(),
        Some("[ASYNC TASKS: 3 total]")
    );

    // The turn ends; at 2 s `quick` finishes while the agent is idle: it is woken.
    agent.busy.store(false, Ordering::SeqCst);
    runtime.agent_idle();
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let turns = agent.turns();
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].task_ids, [ids[0].clone()]);
    assert!(
        turns[0]
            .text
            .starts_with("---\nSystem Note: Async Task Status\n\n1 async task(s) completed:\n\n{")
    );
    assert!(
        turns[0]
            .text
            .contains("\"final_message\": \"done: quick job\"")
    );
    assert!(
        turns[0]
            .text
            .ends_with("2 async task(s) still running.\n---")
    );

    // The agent is busy with that turn when `flaky` fails at 3 s: not woken...
    agent.busy.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(agent.turns().len(), 1);
    // ...until its turn ends.
    agent.busy.store(false, Ordering::SeqCst);
    runtime.agent_idle();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let turns = agent.turns();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[1].task_ids, [ids[1].clone()]);
    assert!(
        turns[1]
            .text
            .contains("\"error\": \"exit status 1: connection refused\""),
        "{}",
        turns[1].text
    );

    // The user cancels the slow one by prefix: nobody is woken for that.
    let prefix = &ids[2][..8];
    let ended = run_slash_command(runtime.manager(), &format!("/task end {prefix}")).expect("ours");
    assert_eq!(
        (ended.kind, ended.text.clone()),
        (
            CommandOutputKind::Info,
            format!("Cancelled task: {}", ids[2])
        )
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(agent.turns().len(), 2);

    // The model hears about the cancel in its next turn's reminder.
    let reminder = runtime.next_turn_reminder().expect("the cancel is pending");
    assert_eq!(reminder.task_ids, [ids[2].clone()]);
    assert!(reminder.text.contains("\"status\": \"cancelled\""));
    runtime.ack_delivered(&reminder.task_ids);
    assert_eq!(runtime.next_turn_reminder(), None);

    let list = run_slash_command(runtime.manager(), "/tasks list").expect("ours");
    let statuses: Vec<&str> = list
        .text
        .lines()
        .skip(1)
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["[DONE]", "[FAILED]", "[CANCELLED]"]);
    runtime.shutdown().await;
}
