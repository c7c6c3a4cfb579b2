//! Messages over stdin: a `jsonl` subagent gets the goal and then each message;
//! what never reached it is reported with the result.

use std::time::Duration;

use asynctask_manager::{Inbox, InboxError};
use asynctask_tools::{SubagentInfo, SubagentRunner};
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use crate::{
    RUN_DEADLINE, assert_all_gone, error, output, request, run, runner, runner_in, temp_dir,
    wait_for_pids, within,
};

#[tokio::test]
async fn a_jsonl_subagent_gets_the_goal_then_each_message_in_order() {
    let dir = temp_dir("process");
    // Prints three lines of stdin as they are, then exits.
    let runner = runner(
        r#"
[subagents.chat]
command = ["sh", "-c", "n=0; while IFS= read -r line; do printf '%s\\n' \"$line\"; n=$((n+1)); [ $n -eq 3 ] && exit 0; done"]
stdin = "jsonl"
"#,
        dir.path(),
    );
    assert_eq!(
        runner.catalog(),
        Some(vec![SubagentInfo::new("chat", "").with_messages(true)])
    );
    let (sender, inbox) = Inbox::channel();
    let run = tokio::spawn({
        let request = request("chat", "the goal").with_inbox(inbox);
        async move { runner.run(request, CancellationToken::new()).await }
    });
    sender.send("first".to_owned()).expect("queued");
    sender
        .send("second, \"quoted\"\non two lines".to_owned())
        .expect("queued");
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(
        result,
        Ok(output(Some(
            "{\"type\":\"goal\",\"text\":\"the goal\"}\n\
             {\"type\":\"message\",\"text\":\"first\"}\n\
             {\"type\":\"message\",\"text\":\"second, \\\"quoted\\\"\\non two lines\"}"
        )))
    );
    assert_eq!(
        sender.send("too late".to_owned()),
        Err(InboxError::Closed),
        "the inbox closes with the task"
    );
}

#[tokio::test]
async fn a_goal_subagent_takes_no_messages() {
    let dir = temp_dir("process");
    let runner = runner_in(
        dir.path(),
        "plain",
        r#"["sh", "-c", "cat; echo $$ >> pids; while [ ! -e go ]; do sleep 0.01; done"]"#,
    );
    assert_eq!(
        runner.catalog(),
        Some(vec![SubagentInfo::new("plain", "").with_messages(false)])
    );
    let (sender, inbox) = Inbox::channel();
    let run = tokio::spawn({
        let request = request("plain", "the goal").with_inbox(inbox);
        async move { runner.run(request, CancellationToken::new()).await }
    });
    wait_for_pids(&dir.path().join("pids"), 1).await;
    // The run is still going, holding its inbox: closed, not dropped.
    assert_eq!(sender.send("hello?".to_owned()), Err(InboxError::Closed));
    std::fs::write(dir.path().join("go"), "").expect("write");
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(result, Ok(output(Some("the goal"))));
}

#[tokio::test]
async fn a_jsonl_subagent_that_stops_reading_does_not_block_its_run() {
    let dir = temp_dir("process");
    // Reads the goal line only, then works a little while messages pile up
    // in a pipe nobody reads (more than a pipe holds), then exits.
    let runner = runner(
        "[subagents.deaf]\ncommand = [\"sh\", \"-c\", \"read -r line; echo read one; sleep 0.2\"]\nstdin = \"jsonl\"\n",
        dir.path(),
    );
    let (sender, inbox) = Inbox::channel();
    for _ in 0..60 {
        sender.send("m".repeat(10_000)).expect("queued");
    }
    let result = run(&runner, request("deaf", "x").with_inbox(inbox)).await;
    // What a pipe held was written; the rest never reached the subagent and
    // the result says so rather than dropping it silently.
    let text = result
        .expect("it succeeded")
        .final_message
        .expect("a message");
    let (read, note) = text.split_once("\n\n").expect("a note after the output");
    assert_eq!(read, "read one");
    let count: usize = note
        .strip_prefix('[')
        .and_then(|note| note.split_once(' '))
        .and_then(|(count, _)| count.parse().ok())
        .unwrap_or_else(|| panic!("a count in {note:?}"));
    assert!(
        (50..=60).contains(&count),
        "{count} unwritten of 60: {note}"
    );
    assert!(
        note.contains(
            "sent to this task never reached the subagent, which had stopped reading its stdin"
        ) && note.ends_with(&format!("- and {} more]", count - 5)),
        "{note}"
    );
    assert_eq!(sender.send("later".to_owned()), Err(InboxError::Closed));
}

#[tokio::test]
async fn a_message_to_a_subagent_that_closed_its_stdin_is_reported_with_the_result() {
    let dir = temp_dir("process");
    // Reads the goal line, closes its stdin, says so, and works a while.
    let runner = runner(
        "[subagents.brief]\ncommand = [\"sh\", \"-c\", \"read -r line; exec 0<&-; echo $$ >> pids; sleep 0.3; echo bye\"]\nstdin = \"jsonl\"\n",
        dir.path(),
    );
    let (sender, inbox) = Inbox::channel();
    let run = tokio::spawn({
        let request = request("brief", "x").with_inbox(inbox);
        async move { runner.run(request, CancellationToken::new()).await }
    });
    wait_for_pids(&dir.path().join("pids"), 1).await;
    sender
        .send("never read \"quoted\"".to_owned())
        .expect("queued: the runner cannot know yet");
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(
        result,
        Ok(output(Some(
            "bye\n\n[1 message sent to this task never reached the subagent, which had \
             stopped reading its stdin:\n- \"never read \\\"quoted\\\"\"]"
        )))
    );
}

#[tokio::test]
async fn a_message_whose_write_a_cancel_cuts_is_reported_with_the_result() {
    let dir = temp_dir("process");
    // Reads a part of the message, so its write has begun, then holds its
    // stdin open without reading: the rest of the write waits on a full pipe.
    let runner = runner(
        "[subagents.slow]\ncommand = [\"sh\", \"-c\", \"head -c 70000 > /dev/null; echo $$ >> pids; sleep 30\"]\nstdin = \"jsonl\"\n",
        dir.path(),
    );
    let (sender, inbox) = Inbox::channel();
    sender
        .send("m".repeat(300_000))
        .expect("queued before the run");
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        let request = request("slow", "x").with_inbox(inbox);
        async move { runner.run(request, cancel).await }
    });
    wait_for_pids(&dir.path().join("pids"), 1).await;
    cancel.cancel();
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    let err = result.expect_err("cancelled").to_string();
    assert!(
        err.starts_with(
            "subagent 'slow' was cancelled\n\n[1 message sent to this task never reached \
             the subagent, which had stopped reading its stdin:\n- \"mmm"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_cancelled_jsonl_subagent_sees_its_stdin_close() {
    let dir = temp_dir("process");
    // Exits on its own when stdin ends, and ignores SIGTERM: only the
    // closed stdin can end it before the grace does.
    let runner = runner(
        "[subagents.chat]\ncommand = [\"sh\", \"-c\", \"trap '' TERM; echo $$ >> pids; while IFS= read -r line; do :; done; echo eof >> seen\"]\nstdin = \"jsonl\"\n",
        dir.path(),
    )
    .with_grace(Duration::from_secs(5));
    let (_sender, inbox) = Inbox::channel();
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        let request = request("chat", "x").with_inbox(inbox);
        async move { runner.run(request, cancel).await }
    });
    let pids = wait_for_pids(&dir.path().join("pids"), 1).await;
    cancel.cancel();
    let result = within(RUN_DEADLINE, run).await.expect("no panic");
    assert_eq!(result, error("subagent 'chat' was cancelled"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("seen"))
            .ok()
            .as_deref(),
        Some("eof\n")
    );
    assert_all_gone(&pids).await;
}
