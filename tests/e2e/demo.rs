//! The CLI demo's session with a fake runner under paused time: the transcript
//! shows each delivery path.

use std::sync::Arc;
use std::time::Duration;

use asynctask_cli::demo::{DemoOptions, bundled_subagents, pick_subagents, run_demo};
use asynctask_model::{OutputObject, TerminateReason};
use asynctask_tools::{SubagentError, SubagentRequest, SubagentRunner};
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

/// The bundled subagents' behaviour, without processes.
struct FakeSubagents;

#[async_trait::async_trait]
impl SubagentRunner for FakeSubagents {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        let (seconds, outcome) = match request.subagent_name.as_str() {
            "researcher" => (2, Ok("Found 3 callers of retry()")),
            "tester" => (3, Ok("Ran 412 tests: all passed.")),
            "linter" => (5, Err("exit status 1: error: 2 lints failed")),
            _ => (3_600, Ok("never")),
        };
        tokio::select! {
            () = cancel.cancelled() => Err(SubagentError::new("cancelled")),
            () = tokio::time::sleep(Duration::from_secs(seconds)) => match outcome {
                Ok(text) => Ok(OutputObject::new(TerminateReason::Goal).with_final_message(text)),
                Err(text) => Err(SubagentError::new(text)),
            },
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_demo_transcript_shows_every_delivery_path() {
    let mut out = Vec::new();
    run_demo(
        Arc::new(FakeSubagents),
        DemoOptions::new(bundled_subagents()),
        &mut out,
    )
    .await
    .expect("the demo runs");
    let transcript = String::from_utf8(out).expect("utf-8");
    let has = |needle: &str| transcript.contains(needle);
    let count = |needle: &str| transcript.matches(needle).count();

    assert_eq!(count("Async task launched: subagent '"), 4, "{transcript}");
    assert!(has("Async Tasks Summary:\n"), "the model checks its tasks");
    // researcher ends while the agent is idle: the auto-trigger wakes it.
    assert!(
        has("(researcher) completed — the agent is idle: the auto-trigger wakes it"),
        "{transcript}"
    );
    // tester ends during that turn: held until the turn ends.
    assert!(
        has("(tester) completed — the agent is busy: delivered when its turn ends"),
        "{transcript}"
    );
    assert!(has("Ran 412 tests: all passed."));
    // linter fails; the model peeks at it.
    assert!(has("(linter) failed"), "{transcript}");
    assert!(has("\"error\": \"exit status 1: error: 2 lints failed\""));
    assert!(has("A subagent failed. calls check_async_tasks("));
    assert_eq!(
        count("the auto-trigger wakes the agent with:"),
        3,
        "{transcript}"
    );
    // The user cancels the indexer; nobody is woken; the next turn hears of it.
    assert!(has("/task end "));
    assert!(has("Cancelled task: "));
    assert!(
        has("(indexer) cancelled — a cancel alone wakes nobody"),
        "{transcript}"
    );
    assert!(!has("unexpected wake-up"));
    assert!(has("next-turn reminder sent with the request:"));
    assert!(has("\"status\": \"cancelled\""));
    // The closing list.
    let list_start = transcript
        .rfind("Async tasks: 4 (0 running)")
        .expect("the final /tasks list");
    let list = &transcript[list_start..];
    for status in ["[DONE]", "[DONE]", "[FAILED]", "[CANCELLED]"] {
        assert!(list.contains(status), "{list}");
    }
    // No live status line when not on a terminal.
    assert!(!has("\r"));
}

#[test]
fn roles_come_from_the_config() {
    let names = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        pick_subagents(&names(&["indexer", "linter", "researcher", "tester"])).unwrap(),
        bundled_subagents()
    );
    assert_eq!(
        pick_subagents(&names(&["a", "b"])).unwrap(),
        ["a", "b", "b", "b"].map(str::to_owned)
    );
    assert_eq!(
        pick_subagents(&[]).unwrap_err().to_string(),
        "the config defines no subagents"
    );
}
