//! The runtime on a store, across a restart: an interrupted task is delivered
//! by the auto-trigger as soon as the new runtime is built; a delivered one is
//! never delivered again.

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
