//! The runtime on a store, across a restart: an interrupted task is delivered
//! by the auto-trigger as soon as the new runtime is built; a delivered one is
//! never delivered again; queued tasks wait through the restart and start in
//! their order.

use std::sync::{Arc, Mutex};

use asynctask_manager::{INTERRUPTED_ERROR, RegisterTaskInput};
use asynctask_model::{AsyncTaskStatus, ManualClock};
use asynctask_runtime::{AgentHost, AsyncTaskRuntime, Reminder, TriggerError};
use asynctask_store::Store;
use pretty_assertions::assert_eq;

use crate::output_of;

/// An idle agent that keeps what it was woken with.
#[derive(Default)]
struct Agent {
    woken: Mutex<Vec<Reminder>>,
}

#[async_trait::async_trait]
impl AgentHost for Agent {
    fn is_agent_busy(&self) -> bool {
        false
    }

    async fn trigger_agent_turn(&self, reminder: Reminder) -> Result<(), TriggerError> {
        self.woken.lock().expect("the agent's lock").push(reminder);
        Ok(())
    }
}

fn runtime(path: &std::path::Path, agent: &Arc<Agent>, now: u64) -> AsyncTaskRuntime {
    let (store, restored) = Store::open(path).expect("the store opens");
    AsyncTaskRuntime::builder()
        .clock(Arc::new(ManualClock::new(now)))
        .host(Arc::clone(agent) as Arc<dyn AgentHost>)
        .journal(Arc::new(store), restored)
        .build()
}

#[tokio::test(start_paused = true)]
async fn results_survive_a_restart_and_are_delivered_once() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("tasks.db");

    let first = Arc::new(Agent::default());
    let runtime_one = runtime(&path, &first, 1_000);
    let manager = runtime_one.manager().clone();
    manager
        .register_task(RegisterTaskInput::new(
            "done-1",
            "researcher",
            "map the code",
        ))
        .expect("registered");
    manager
        .register_task(RegisterTaskInput::new("cut-1", "tester", "run the suite"))
        .expect("registered");
    manager.complete_task("done-1", output_of("done-1"));
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    let woken: Vec<Vec<String>> = first
        .woken
        .lock()
        .expect("lock")
        .iter()
        .map(|r| r.task_ids.clone())
        .collect();
    assert_eq!(
        woken,
        [["done-1"]],
        "delivered (and journaled) before the crash"
    );
    // The host dies with "cut-1" still running: no shutdown, nothing cancelled.
    drop(manager);
    drop(runtime_one);

    let second = Arc::new(Agent::default());
    let runtime_two = runtime(&path, &second, 9_000);
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    let woken = second.woken.lock().expect("lock").clone();
    assert_eq!(woken.len(), 1, "woken at once with the interrupted task");
    assert_eq!(
        woken[0].task_ids,
        ["cut-1"],
        "done-1 is not delivered again"
    );
    assert!(
        woken[0].text.contains(INTERRUPTED_ERROR),
        "{}",
        woken[0].text
    );
    let task = runtime_two.manager().task("cut-1").expect("kept");
    assert_eq!(task.status(), AsyncTaskStatus::Failed);
    assert_eq!(task.notified_at(), Some(9_000));
    runtime_two.shutdown().await;
    drop(runtime_two);

    let (_store, restored) = Store::open(&path).expect("the store opens");
    assert!(
        restored.iter().all(|t| t.info.notified_at.is_some()),
        "everything delivered is journaled as delivered"
    );
}

/// Records the goal of each run it starts; a run ends when it is cancelled
/// or, for a goal starting with "quick", at once.
#[derive(Default)]
struct Recorder {
    goals: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl asynctask_tools::SubagentRunner for Recorder {
    async fn run(
        &self,
        request: asynctask_tools::SubagentRequest,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<asynctask_model::OutputObject, asynctask_tools::SubagentError> {
        self.goals
            .lock()
            .expect("the goals' lock")
            .push(request.goal_prompt.clone());
        if !request.goal_prompt.starts_with("quick") {
            cancel.cancelled().await;
        }
        Ok(output_of(&request.task_id))
    }
}

#[tokio::test(start_paused = true)]
async fn queued_tasks_wait_through_a_restart_and_start_in_their_order() {
    use asynctask_model::{MaxAsyncTasks, MaxQueuedTasks};
    use asynctask_tools::SubagentRunner;

    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("tasks.db");
    let start = |recorder: &Arc<Recorder>, now: u64| {
        let (store, restored) = Store::open(&path).expect("the store opens");
        AsyncTaskRuntime::builder()
            .clock(Arc::new(ManualClock::new(now)))
            .max_async_tasks(MaxAsyncTasks::new(1).expect("a limit"))
            .max_queued_tasks(MaxQueuedTasks::new(5).expect("a bound"))
            .runner(Arc::clone(recorder) as Arc<dyn SubagentRunner>)
            .journal(Arc::new(store), restored)
            .build()
    };
    let launch = |runtime: &AsyncTaskRuntime, goal: &str| {
        let task = runtime
            .tools()
            .into_iter()
            .find(|tool| tool.name() == "task")
            .expect("a runner is set");
        let params =
            serde_json::json!({"subagent_name": "worker", "goal_prompt": goal, "async": true});
        async move {
            let result = task
                .execute(params, tokio_util::sync::CancellationToken::new())
                .await;
            result.metadata["status"]
                .as_str()
                .expect("launched")
                .to_owned()
        }
    };

    let first = Arc::new(Recorder::default());
    let runtime_one = start(&first, 1_000);
    let mut statuses = Vec::new();
    for goal in ["slow one", "quick two", "quick three"] {
        statuses.push(launch(&runtime_one, goal).await);
    }
    assert_eq!(statuses, ["running", "queued", "queued"]);
    runtime_one.shutdown().await;
    assert_eq!(
        *first.goals.lock().expect("lock"),
        ["slow one"],
        "the slot the shutdown freed started nothing"
    );
    drop(runtime_one);

    let second = Arc::new(Recorder::default());
    let runtime_two = start(&second, 9_000);
    for _ in 0..100 {
        if runtime_two.manager().counts().completed == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        *second.goals.lock().expect("lock"),
        ["quick two", "quick three"],
        "started after the restart, in their order, with what they were launched with"
    );
    let ended: Vec<(String, AsyncTaskStatus, Option<u64>)> = runtime_two
        .manager()
        .tasks()
        .iter()
        .map(|task| {
            (
                task.goal_prompt().to_owned(),
                task.status(),
                task.started_at(),
            )
        })
        .collect();
    assert_eq!(
        ended,
        [
            (
                "slow one".to_owned(),
                AsyncTaskStatus::Cancelled,
                Some(1_000)
            ),
            (
                "quick two".to_owned(),
                AsyncTaskStatus::Completed,
                Some(9_000)
            ),
            (
                "quick three".to_owned(),
                AsyncTaskStatus::Completed,
                Some(9_000)
            ),
        ]
    );
    runtime_two.shutdown().await;
}
