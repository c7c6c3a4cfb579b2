//! What the output directory keeps: a task's files go a window after it was
//! pruned.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use crate::{RUN_DEADLINE, runner_in, temp_dir, within};

#[tokio::test]
async fn a_task_pruned_from_the_history_takes_its_files_along_a_window_later() {
    use asynctask_manager::AsyncTaskManager;
    use asynctask_model::MaxAsyncTasks;
    use asynctask_tools::{KEPT_TASK_FILES, TaskTool, Tool};

    let dir = temp_dir("process");
    let out = temp_dir("process");
    // It prints a line and writes more variables than its result holds, so the
    // result names both of its files.
    let script = r#"{ printf '{'; i=0; while [ $i -lt 500 ]; do printf '"v%04d":"value %d",' $i $i; i=$((i+1)); done; printf '"z":"end"}'; } > "$ASYNCTASK_VARS_FILE"; echo done"#;
    let command = serde_json::json!(["sh", "-c", script]).to_string();
    let runner = runner_in(dir.path(), "many", &command)
        .with_output_dir(out.path().to_owned())
        .with_inline_budget(1_000);
    // A limit of 1 keeps a history of 2 finished tasks.
    let manager = AsyncTaskManager::new(MaxAsyncTasks::new(1).expect("valid"));
    let tool = TaskTool::new(manager.clone(), Arc::new(runner));
    let files = |id: &str| {
        [
            out.path().join(format!("{id}.out")),
            out.path().join(format!("{id}.vars.json")),
        ]
    };
    let mut ids: Vec<String> = Vec::new();
    for n in 0..KEPT_TASK_FILES + 3 {
        if n == 3 {
            // The first task was pruned when the third ended, but a result
            // named its files: they stay for a long while yet.
            assert!(manager.task(&ids[0]).is_none());
            for file in files(&ids[0]) {
                assert!(file.is_file(), "{} went with its task", file.display());
            }
        }
        let launched = tool
            .execute(
                serde_json::json!({"subagent_name": "many", "goal_prompt": "x", "async": true}),
                CancellationToken::new(),
            )
            .await;
        let id = launched.metadata["agentId"]
            .as_str()
            .expect("launched")
            .to_owned();
        tool.tracker().close();
        within(RUN_DEADLINE, tool.tracker().wait()).await;
        tool.tracker().reopen();
        let task = manager.task(&id).expect("held");
        assert_eq!(task.status(), asynctask_model::AsyncTaskStatus::Completed);
        for file in files(&id) {
            assert!(
                file.is_file(),
                "{} is kept while the task is",
                file.display()
            );
        }
        assert!(manager.mark_notified(&id));
        ids.push(id);
    }
    // KEPT_TASK_FILES tasks were pruned after the first: its files are gone,
    // those of the next are still there.
    for file in files(&ids[0]) {
        assert!(!file.exists(), "{} outlived its window", file.display());
    }
    for id in &ids[1..] {
        for file in files(id) {
            assert!(file.is_file(), "{}", file.display());
        }
    }
}
