//! Todo continuation: every condition, in order, and every text.

use std::sync::Arc;

use asynctask_model::{ManualClock, Todo, TodoStatus};
use asynctask_runtime::{
    AsyncTaskRuntime, ContinuationConditions, ContinuationContext, ContinuationPromptConfig,
    ContinuationState, TodoContinuationService,
};
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

fn service() -> (TodoContinuationService, ManualClock) {
    let clock = ManualClock::new(10_000);
    (TodoContinuationService::new(Arc::new(clock.clone())), clock)
}

fn todo(id: &str, content: &str, status: TodoStatus) -> Todo {
    Todo::new(id, content, status)
}

fn evaluate(
    service: &TodoContinuationService,
    todos: &[Todo],
    had_tool_calls: bool,
    setting: Option<bool>,
    state: &ContinuationState,
) -> (bool, String, Option<String>) {
    let evaluation = service.check_continuation_conditions(&ContinuationContext {
        todos,
        had_tool_calls,
        is_responding: false,
        continuation_setting: setting,
        current_state: state,
    });
    (
        evaluation.should_continue,
        evaluation.reason,
        evaluation.active_todo.map(|t| t.id),
    )
}

#[test]
fn reasons_come_in_the_fixed_order() {
    let (service, clock) = service();
    let active = [todo("1", "a", TodoStatus::Pending)];
    let done = [todo("1", "a", TodoStatus::Completed)];
    let fresh = ContinuationState::default();
    let stop = |reason: &str| (false, reason.to_owned(), None);

    // Disabled beats everything, even with no todos and tool calls.
    assert_eq!(
        evaluate(&service, &done, true, Some(false), &fresh),
        stop("Todo continuation is disabled in ephemeral settings")
    );
    assert_eq!(
        evaluate(&service, &done, true, None, &fresh),
        stop("No active todos found (pending or in_progress)")
    );
    assert_eq!(
        evaluate(&service, &active, true, Some(true), &fresh),
        stop("Tool calls were made during stream - no continuation needed")
    );
    let busy = ContinuationState {
        is_active: true,
        attempt_count: 9,
        ..ContinuationState::default()
    };
    assert_eq!(
        evaluate(&service, &active, false, None, &busy),
        stop("Already in continuation process")
    );
    let spent = ContinuationState {
        attempt_count: 3,
        last_prompt_time_ms: Some(10_000),
        ..ContinuationState::default()
    };
    assert_eq!(
        evaluate(&service, &active, false, None, &spent),
        stop("Maximum continuation attempts exceeded")
    );
    let recent = ContinuationState {
        attempt_count: 2,
        last_prompt_time_ms: Some(9_500),
        ..ContinuationState::default()
    };
    assert_eq!(
        evaluate(&service, &active, false, None, &recent),
        stop("Too soon since last continuation attempt")
    );
    clock.advance(500); // exactly 1,000 ms since the last prompt: allowed
    assert_eq!(
        evaluate(&service, &active, false, None, &recent),
        (
            true,
            "All continuation conditions satisfied".to_owned(),
            Some("1".to_owned())
        )
    );
}

#[test]
fn conditions_are_all_evaluated_and_reported() {
    let (service, _) = service();
    let state = ContinuationState {
        is_active: true,
        attempt_count: 3,
        last_prompt_time_ms: Some(9_999),
        task_description: None,
    };
    let evaluation = service.check_continuation_conditions(&ContinuationContext {
        todos: &[],
        had_tool_calls: true,
        is_responding: true,
        continuation_setting: Some(false),
        current_state: &state,
    });
    assert_eq!(evaluation.conditions, ContinuationConditions::default());
    let fresh = ContinuationState::default();
    let all = service.check_continuation_conditions(&ContinuationContext {
        todos: &[todo("1", "x", TodoStatus::InProgress)],
        had_tool_calls: false,
        is_responding: false,
        continuation_setting: None,
        current_state: &fresh,
    });
    assert_eq!(
        all.conditions,
        ContinuationConditions {
            has_active_todos: true,
            no_tool_calls_made: true,
            continuation_enabled: true,
            not_currently_continuing: true,
            within_attempt_limits: true,
            within_time_constraints: true,
        }
    );
}

#[test]
fn in_progress_first_then_the_first_pending() {
    let (service, _) = service();
    let fresh = ContinuationState::default();
    let todos = [
        todo("1", "a", TodoStatus::Completed),
        todo("2", "b", TodoStatus::Pending),
        todo("3", "c", TodoStatus::InProgress),
        todo("4", "d", TodoStatus::Pending),
    ];
    assert_eq!(
        evaluate(&service, &todos, false, None, &fresh).2,
        Some("3".into())
    );
    assert_eq!(
        evaluate(&service, &todos[..2], false, None, &fresh).2,
        Some("2".into())
    );
    let pending_only = [
        todo("5", "e", TodoStatus::Pending),
        todo("6", "f", TodoStatus::Pending),
    ];
    assert_eq!(
        evaluate(&service, &pending_only, false, None, &fresh).2,
        Some("5".into())
    );
}

#[test]
fn prompts_standard_and_yolo_with_and_without_attempt_notes() {
    let (service, _) = service();
    for (name, yolo, attempt) in [
        ("standard_first", false, None),
        ("standard_attempt_1", false, Some(1)),
        ("standard_attempt_3", false, Some(3)),
        ("yolo_first", true, None),
        ("yolo_attempt_2", true, Some(2)),
    ] {
        let prompt = service.generate_continuation_prompt(&ContinuationPromptConfig {
            task_description: "Write the integration tests".into(),
            is_yolo_mode: yolo,
            attempt_count: attempt,
            previous_failure: None,
        });
        insta::assert_snapshot!(format!("prompt_{name}"), prompt);
    }
}

fn quoted(service: &TodoContinuationService, description: &str) -> String {
    let prompt = service.generate_continuation_prompt(&ContinuationPromptConfig {
        task_description: description.into(),
        is_yolo_mode: false,
        attempt_count: None,
        previous_failure: None,
    });
    let line = prompt.lines().nth(1).expect("a quoted line");
    line[1..line.len() - 1].to_owned()
}

#[test]
fn long_descriptions_are_cut_at_a_word_past_eighty_percent_or_hard() {
    let (service, _) = service();
    let exact = "x".repeat(200);
    assert_eq!(quoted(&service, &exact), exact);
    // A space at character 180 (> 160): cut there.
    let words = format!("{} {}", "a".repeat(180), "b".repeat(40));
    assert_eq!(quoted(&service, &words), format!("{}...", "a".repeat(180)));
    // The last space at 150 (not past 80 %): hard cut at 197.
    let early = format!("{} {}", "a".repeat(150), "b".repeat(100));
    assert_eq!(
        quoted(&service, &early),
        format!("{} {}...", "a".repeat(150), "b".repeat(46))
    );
    // Characters, not bytes.
    let wide = "語".repeat(250);
    assert_eq!(quoted(&service, &wide), format!("{}...", "語".repeat(197)));
}

#[test]
fn task_descriptions_are_trimmed_cut_collapsed_and_unmarked() {
    let (service, _) = service();
    let describe =
        |content: &str| service.format_task_description(&todo("1", content, TodoStatus::Pending));
    assert_eq!(
        describe("  - fix   the\n\tflaky test  "),
        "fix the flaky test"
    );
    assert_eq!(describe("* star"), "star");
    assert_eq!(describe("+plus"), "plus");
    assert_eq!(describe("-- double"), "- double", "one marker only");
    assert_eq!(describe("no marker - inside"), "no marker - inside");
    let long = "word ".repeat(60);
    let described = describe(&long);
    assert_eq!(described.chars().count(), 200);
    assert!(described.ends_with("..."));
}

#[test]
fn should_allow_continuation_checks_setting_attempts_and_time() {
    let (service, clock) = service();
    let fresh = service.create_continuation_state();
    assert_eq!(fresh, ContinuationState::default());
    assert!(service.should_allow_continuation(None, &fresh));
    assert!(service.should_allow_continuation(Some(true), &fresh));
    assert!(!service.should_allow_continuation(Some(false), &fresh));
    let spent = ContinuationState {
        attempt_count: 3,
        ..ContinuationState::default()
    };
    assert!(!service.should_allow_continuation(None, &spent));
    let recent = ContinuationState {
        last_prompt_time_ms: Some(9_001),
        ..ContinuationState::default()
    };
    assert!(!service.should_allow_continuation(None, &recent));
    clock.advance(1);
    assert!(service.should_allow_continuation(None, &recent));
    let updated = service.update_continuation_state(
        &fresh,
        ContinuationState {
            is_active: true,
            attempt_count: 1,
            ..fresh.clone()
        },
    );
    assert_eq!(updated.last_prompt_time_ms, Some(10_001));
}

#[tokio::test]
async fn todo_pause_stops_continuation_until_the_user_speaks() {
    let runtime = AsyncTaskRuntime::builder().build();
    let todos = [todo("1", "ship it", TodoStatus::InProgress)];
    let state = ContinuationState::default();
    assert!(
        runtime
            .check_continuation(&todos, false, false, &state)
            .should_continue
    );
    let pause = runtime
        .tools()
        .into_iter()
        .find(|t| t.name() == "todo_pause")
        .unwrap();
    let result = pause
        .execute(
            serde_json::json!({"reason": "the database is down"}),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(
        result.llm_content,
        "AI execution paused due to: the database is down"
    );
    let paused = runtime.check_continuation(&todos, false, false, &state);
    assert_eq!(
        (
            paused.should_continue,
            paused.reason.as_str(),
            paused.active_todo
        ),
        (
            false,
            "Todo continuation paused by todo_pause: the database is down",
            None
        )
    );
    // A refused pause (501 characters) changes nothing.
    runtime.user_message();
    let refused = pause
        .execute(
            serde_json::json!({"reason": "x".repeat(501)}),
            CancellationToken::new(),
        )
        .await;
    assert!(refused.error.is_some());
    assert!(
        runtime
            .check_continuation(&todos, false, false, &state)
            .should_continue
    );
    // The setting is honoured.
    runtime
        .set_setting("todo-continuation", serde_json::json!(false))
        .unwrap();
    assert_eq!(
        runtime
            .check_continuation(&todos, false, false, &state)
            .reason,
        "Todo continuation is disabled in ephemeral settings"
    );
}
