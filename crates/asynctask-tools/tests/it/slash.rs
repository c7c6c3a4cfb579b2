//! Slash commands: `/tasks list`, `/task list`, `/task end <id>` and completions.

use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
use asynctask_model::AsyncTaskStatus;
use asynctask_tools::{CommandOutput, CommandOutputKind, complete_task_ids, run_slash_command};
use pretty_assertions::assert_eq;

use crate::check_async_tasks::fixture;

fn run(manager: &AsyncTaskManager, line: &str) -> (CommandOutputKind, String) {
    let CommandOutput { kind, text } = run_slash_command(manager, line).expect("our command");
    (kind, text)
}

#[test]
fn both_spellings_list_every_task() {
    let (manager, _) = fixture();
    let (kind, text) = run(&manager, "/tasks list");
    assert_eq!(kind, CommandOutputKind::Info);
    insta::assert_snapshot!("tasks_list", text);
    assert_eq!(run(&manager, "/task list"), (kind, text.clone()));
    assert_eq!(run(&manager, "  /tasks  "), (kind, text));
    assert_eq!(
        run(&AsyncTaskManager::default(), "/tasks list"),
        (CommandOutputKind::Info, "No async tasks.".into())
    );
}

#[test]
fn end_cancels_by_id_or_unique_prefix() {
    let (manager, _) = fixture();
    let token = manager
        .cancellation_token("0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11")
        .expect("running");
    assert_eq!(
        run(&manager, "/task end 0f3a9c"),
        (
            CommandOutputKind::Info,
            "Cancelled task: 0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11".into()
        )
    );
    assert!(token.is_cancelled());
    assert_eq!(
        manager
            .task("0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11")
            .map(|t| t.status()),
        Some(AsyncTaskStatus::Cancelled)
    );
    assert_eq!(
        run(&manager, "/task end 0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11"),
        (
            CommandOutputKind::Error,
            "Task 0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11 is already cancelled.".into()
        )
    );
    assert_eq!(
        run(&manager, "/task end 7b2e"),
        (
            CommandOutputKind::Error,
            "Task 7b2e0d44-1c9a-4f3e-8d6b-2a5c9e7f0b33 is already completed.".into()
        )
    );
}

#[test]
fn end_reports_usage_unknown_and_ambiguous_ids() {
    let manager = AsyncTaskManager::default();
    manager
        .register_task(RegisterTaskInput::new("ab12", "researcher", "g"))
        .unwrap();
    manager
        .register_task(RegisterTaskInput::new("ab34", "tester", "g"))
        .unwrap();
    assert_eq!(
        run(&manager, "/task end"),
        (
            CommandOutputKind::Error,
            "Usage: /task end <task_id>".into()
        )
    );
    assert_eq!(
        run(&manager, "/task end zz"),
        (CommandOutputKind::Error, "Task not found: zz".into())
    );
    assert_eq!(
        run(&manager, "/task end ab"),
        (
            CommandOutputKind::Error,
            "Ambiguous task ID. Did you mean:\n  - ab12 (researcher, running)\n  - ab34 (tester, running)".into()
        )
    );
    assert!(manager.running_tasks().len() == 2, "nothing was cancelled");
    assert_eq!(
        run(&manager, "/task frobnicate"),
        (
            CommandOutputKind::Error,
            "Usage: /tasks list | /task end <task_id> | /task msg <task_id> <message>".into()
        )
    );
}

#[test]
fn other_lines_are_not_ours() {
    let manager = AsyncTaskManager::default();
    for line in [
        "",
        "   ",
        "/help",
        "/taskss list",
        "tasks list",
        "/todo",
        "hello /tasks list",
    ] {
        assert_eq!(run_slash_command(&manager, line), None, "{line:?}");
    }
}

#[test]
fn multi_byte_ids_can_be_ended() {
    let manager = AsyncTaskManager::default();
    manager
        .register_task(RegisterTaskInput::new("日本語-1", "翻訳者", "訳す"))
        .unwrap();
    assert_eq!(
        run(&manager, "/task end 日本"),
        (CommandOutputKind::Info, "Cancelled task: 日本語-1".into())
    );
}

#[test]
fn completions_are_running_ids_matched_case_insensitively() {
    let (manager, _) = fixture();
    manager
        .register_task(RegisterTaskInput::new("0F3B-upper", "r", "g"))
        .unwrap();
    assert_eq!(
        complete_task_ids(&manager, "0f3"),
        ["0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11", "0F3B-upper"]
    );
    assert_eq!(
        complete_task_ids(&manager, "7b2e"),
        Vec::<String>::new(),
        "finished tasks are not offered"
    );
    assert_eq!(complete_task_ids(&manager, "").len(), 2);
}

#[test]
fn queued_tasks_are_listed_ended_and_completed() {
    let (manager, clock) = fixture();
    manager.set_max_async_tasks(asynctask_model::MaxAsyncTasks::new(1).unwrap());
    manager.set_max_queued_tasks(asynctask_model::MaxQueuedTasks::new(3).unwrap());
    for id in ["5a5a5a5a-queued-1", "5b5b5b5b-queued-2"] {
        let task = manager
            .register_task(RegisterTaskInput::new(id, "writer", "Draft the changelog"))
            .unwrap();
        assert_eq!(task.status(), AsyncTaskStatus::Queued);
        clock.advance(20_000);
    }
    let (_, text) = run(&manager, "/tasks list");
    insta::assert_snapshot!("tasks_list_queued", text);
    assert_eq!(
        complete_task_ids(&manager, "5"),
        ["5a5a5a5a-queued-1", "5b5b5b5b-queued-2"],
        "queued tasks can be ended, so they are offered"
    );
    assert_eq!(
        run(&manager, "/task end 5b5b"),
        (
            CommandOutputKind::Info,
            "Cancelled task: 5b5b5b5b-queued-2".into()
        )
    );
    assert_eq!(
        manager.task("5b5b5b5b-queued-2").map(|task| task.status()),
        Some(AsyncTaskStatus::Cancelled)
    );
}
