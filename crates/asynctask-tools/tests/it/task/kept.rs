//! What a runner keeps: it forgets a task once a window of later ones was pruned
//! or ended.

use pretty_assertions::assert_eq;

use super::*;

#[tokio::test(start_paused = true)]
async fn the_runner_forgets_a_background_task_once_a_window_of_later_ones_was_pruned() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (manager, tool) = setup(&runner, 1); // a history of 2
    let mut ids = Vec::new();
    // The first is pruned once 2 later ones finished, and forgotten once
    // KEPT_TASK_FILES later ones were pruned.
    for _ in 0..KEPT_TASK_FILES + 2 {
        let id = agent_id(&call(&tool, async_params("quick", json!({}))).await);
        settle(&tool).await;
        assert!(manager.mark_notified(&id));
        ids.push(id);
    }
    assert!(manager.task(&ids[0]).is_none(), "pruned");
    assert_eq!(runner.forgotten(), Vec::<String>::new(), "but kept");
    let id = agent_id(&call(&tool, async_params("quick", json!({}))).await);
    settle(&tool).await;
    assert!(manager.mark_notified(&id));
    ids.push(id);
    assert_eq!(runner.forgotten(), [ids[0].clone()]);
    // Once the tool is gone, the runner hears no more.
    drop(tool);
    manager.set_max_async_tasks(MaxAsyncTasks::new(-1).expect("valid"));
    manager.set_max_async_tasks(MaxAsyncTasks::new(1).expect("valid"));
    assert_eq!(runner.forgotten(), [ids[0].clone()]);
}

#[tokio::test(start_paused = true)]
async fn the_runner_forgets_a_synchronous_run_once_a_window_of_later_ones_ended() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (manager, tool) = setup(&runner, 1); // a history of 2
    let mut ids = sync_ids(&tool, KEPT_TASK_FILES).await;
    assert_eq!(runner.forgotten(), Vec::<String>::new());
    ids.extend(sync_ids(&tool, 1).await);
    assert_eq!(runner.forgotten(), [ids[0].clone()]);
    // A failed run counts too.
    let failing = FakeRunner::new(Behaviour::Fail("no"));
    let tool = TaskTool::new(
        manager.clone(),
        Arc::clone(&failing) as Arc<dyn SubagentRunner>,
    );
    let failed: Vec<String> = sync_ids(&tool, KEPT_TASK_FILES + 1).await;
    assert_eq!(failing.forgotten(), [failed[0].clone()]);
    assert!(
        manager.tasks().is_empty(),
        "synchronous runs are never registered"
    );
}

#[tokio::test(start_paused = true)]
async fn pruned_tasks_and_synchronous_runs_share_the_window() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (manager, tool) = setup(&runner, 1); // a history of 2
    let mut pruned = Vec::new();
    for _ in 0..3 {
        let id = agent_id(&call(&tool, async_params("quick", json!({}))).await);
        settle(&tool).await;
        assert!(manager.mark_notified(&id));
        pruned.push(id);
    }
    assert!(manager.task(&pruned[0]).is_none(), "pruned");
    sync_ids(&tool, KEPT_TASK_FILES - 1).await;
    assert_eq!(runner.forgotten(), Vec::<String>::new());
    sync_ids(&tool, 1).await;
    assert_eq!(runner.forgotten(), [pruned[0].clone()]);
}

async fn sync_ids(tool: &TaskTool, count: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..count {
        ids.push(agent_id(&call(tool, sync_params("quick", json!({}))).await));
    }
    ids
}
