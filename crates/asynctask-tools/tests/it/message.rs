//! `message_async_task` and `/task msg`: queued for a running task that takes
//! messages, in order, to that task only; clear refusals otherwise.

use std::collections::BTreeMap;
use std::sync::Arc;

use asynctask_manager::{AsyncTaskManager, Inbox, RegisterTaskInput};
use asynctask_model::{MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_tools::{
    CommandOutputKind, MAX_MESSAGE_CHARS, MessageAsyncTaskTool, SubagentError, SubagentInfo,
    SubagentRequest, SubagentRunner, TaskTool, Tool, ToolErrorType, run_slash_command,
};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::check_async_tasks::call;
use crate::redacted;

const ID: &str = "0f3a9c21-5b7e-4c1d-9a2f-6e8d0b4c7a11";

/// A manager holding one running task with an inbox; the inbox is returned.
fn running_task() -> (AsyncTaskManager, Inbox) {
    let manager = AsyncTaskManager::default();
    let (sender, inbox) = Inbox::channel();
    manager
        .register_task(RegisterTaskInput::new(ID, "tester", "Run the suite").with_inbox(sender))
        .expect("registered");
    (manager, inbox)
}

fn message(text: &str) -> serde_json::Value {
    json!({"task_id": "0f3a", "message": text})
}

#[tokio::test]
async fn a_message_is_queued_for_its_running_task_in_order() {
    let (manager, inbox) = running_task();
    let tool = MessageAsyncTaskTool::new(manager.clone());
    let sent = call(&tool, message("only the io tests")).await;
    insta::assert_snapshot!("queued", redacted(&sent, &[]));
    call(&tool, message("and stop after the first failure")).await;
    assert_eq!(inbox.try_recv().as_deref(), Some("only the io tests"));
    assert_eq!(
        inbox.try_recv().as_deref(),
        Some("and stop after the first failure")
    );
    assert_eq!(inbox.try_recv(), None);
    assert_eq!(manager.counts().running, 1, "a message changes no state");
}

#[tokio::test]
async fn refusals_say_why_and_what_to_do() {
    let (manager, inbox) = running_task();
    let tool = MessageAsyncTaskTool::new(manager.clone());

    for _ in 0..Inbox::CAPACITY {
        assert_eq!(call(&tool, message("m")).await.error, None);
    }
    let full = call(&tool, message("one too many")).await;
    insta::assert_snapshot!("inbox_full", redacted(&full, &[]));
    while inbox.try_recv().is_some() {}

    inbox.close();
    let stopped = call(&tool, message("hello")).await;
    insta::assert_snapshot!("stopped_reading", redacted(&stopped, &[]));

    manager.complete_task(ID, OutputObject::new(TerminateReason::Goal));
    let finished = call(&tool, message("hello")).await;
    insta::assert_snapshot!("finished", redacted(&finished, &[]));

    let unknown = call(&tool, json!({"task_id": "ffff", "message": "hi"})).await;
    assert_eq!(
        unknown.llm_content,
        "No async task found with ID or prefix 'ffff'."
    );
    assert_eq!(
        unknown.error.map(|error| error.kind),
        Some(ToolErrorType::InvalidToolParams)
    );
    let blank = call(&tool, json!({"task_id": "0f3a", "message": "  "})).await;
    assert_eq!(
        blank.llm_content,
        "Invalid parameters for message_async_task: message: must not be blank"
    );
    let long = "é".repeat(MAX_MESSAGE_CHARS + 1);
    let too_long = call(&tool, json!({"task_id": "0f3a", "message": long})).await;
    assert_eq!(
        too_long.llm_content,
        format!(
            "Invalid parameters for message_async_task: message: must be at most \
             {MAX_MESSAGE_CHARS} characters (got {})",
            MAX_MESSAGE_CHARS + 1
        )
    );
    let cancelled = AsyncTaskManager::default();
    cancelled
        .register_task(RegisterTaskInput::new(ID, "tester", "g").with_inbox(Inbox::channel().0))
        .expect("registered");
    cancelled.cancel_task(ID);
    let to_cancelled = call(&MessageAsyncTaskTool::new(cancelled), message("hello")).await;
    insta::assert_snapshot!("cancelled", redacted(&to_cancelled, &[]));
}

#[tokio::test]
async fn an_ambiguous_prefix_lists_the_candidates_and_queues_nothing() {
    let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
    let mut inboxes = Vec::new();
    for id in ["0f3a9c21-aaaa", "0f3b0000-bbbb"] {
        let (sender, inbox) = Inbox::channel();
        manager
            .register_task(RegisterTaskInput::new(id, "tester", "g").with_inbox(sender))
            .expect("registered");
        inboxes.push(inbox);
    }
    let tool = MessageAsyncTaskTool::new(manager.clone());
    let ambiguous = call(&tool, json!({"task_id": "0f3", "message": "hi"})).await;
    insta::assert_snapshot!("ambiguous", redacted(&ambiguous, &[]));
    assert_eq!(
        ambiguous.error.map(|error| error.kind),
        Some(ToolErrorType::InvalidToolParams)
    );
    let slash = run_slash_command(&manager, "/task msg 0f3 hi").expect("ours");
    assert_eq!(slash.kind, CommandOutputKind::Error);
    assert!(
        slash.text.starts_with("Ambiguous task ID."),
        "{}",
        slash.text
    );
    assert!(inboxes.iter().all(|inbox| inbox.try_recv().is_none()));
}

#[test]
fn the_schema_bounds_the_message_as_validation_does() {
    let spec = MessageAsyncTaskTool::new(AsyncTaskManager::default()).spec();
    let message = &spec.parameters["properties"]["message"];
    assert_eq!(message["maxLength"], json!(MAX_MESSAGE_CHARS));
    assert_eq!(message["minLength"], json!(1));
    assert!(!spec.annotations.destructive && !spec.annotations.idempotent);
}

#[tokio::test]
async fn a_task_registered_without_an_inbox_takes_no_messages() {
    let manager = AsyncTaskManager::default();
    manager
        .register_task(RegisterTaskInput::new(ID, "tester", "g"))
        .expect("registered");
    let refused = call(&MessageAsyncTaskTool::new(manager), message("hi")).await;
    assert!(
        refused
            .llm_content
            .starts_with("Subagent 'tester' (async task 0f3a9c21-"),
        "{}",
        refused.llm_content
    );
}

#[tokio::test]
async fn the_slash_command_sends_the_rest_of_the_line() {
    let (manager, inbox) = running_task();
    let sent = run_slash_command(&manager, "/task msg 0f3a  skip   the benches ").expect("ours");
    assert_eq!(sent.kind, CommandOutputKind::Info);
    assert_eq!(inbox.try_recv().as_deref(), Some("skip   the benches"));
    for usage in ["/task msg", "/task msg 0f3a", "/task msg 0f3a   "] {
        let out = run_slash_command(&manager, usage).expect("ours");
        assert_eq!(
            (out.kind, out.text.as_str()),
            (
                CommandOutputKind::Error,
                "Usage: /task msg <task_id> <message>"
            ),
            "{usage:?}"
        );
    }
    let missing = run_slash_command(&manager, "/task msg ffff hi").expect("ours");
    assert_eq!(missing.text, "Task not found: ffff");
    let long = format!("/task msg 0f3a {}", "x".repeat(MAX_MESSAGE_CHARS + 1));
    let too_long = run_slash_command(&manager, &long).expect("ours");
    assert_eq!(
        (too_long.kind, too_long.text.as_str()),
        (
            CommandOutputKind::Error,
            format!(
                "message: must be at most {MAX_MESSAGE_CHARS} characters (got {})",
                MAX_MESSAGE_CHARS + 1
            )
            .as_str()
        )
    );
    assert_eq!(
        inbox.try_recv(),
        None,
        "nothing queued for a refused message"
    );
}

/// Reads its inbox, but has no catalog: it must say itself which subagents
/// read messages.
struct Uncatalogued {
    reads_messages: bool,
}

#[async_trait::async_trait]
impl SubagentRunner for Uncatalogued {
    fn accepts_messages(&self, subagent: &str) -> bool {
        self.reads_messages && subagent == "listener"
    }

    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        Listener.run(request, cancel).await
    }
}

#[tokio::test]
async fn without_a_catalog_only_subagents_the_runner_names_take_messages() {
    for reads_messages in [false, true] {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        let task = TaskTool::new(manager.clone(), Arc::new(Uncatalogued { reads_messages }));
        let launched = call(
            &task,
            json!({"subagent_name": "listener", "goal_prompt": "g", "async": true}),
        )
        .await;
        let id = launched.metadata["agentId"].as_str().expect("an id");
        let messages = MessageAsyncTaskTool::new(manager.clone());
        let sent = call(&messages, json!({"task_id": id, "message": "hello"})).await;
        if reads_messages {
            assert_eq!(sent.error, None, "{}", sent.llm_content);
        } else {
            insta::assert_snapshot!("not_taken", redacted(&sent, &[(id, "<id>")]));
        }
        manager.cancel_task(id);
        task.tracker().close();
        task.tracker().wait().await;
    }
}

/// Reads its inbox until it reads `done` (or its token is cancelled), and
/// reports what it read.
struct Listener;

#[async_trait::async_trait]
impl SubagentRunner for Listener {
    fn catalog(&self) -> Option<Vec<SubagentInfo>> {
        Some(vec![
            SubagentInfo::new("listener", "reads messages").with_messages(true),
            SubagentInfo::new("deaf", "reads none"),
        ])
    }

    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        let mut heard = Vec::new();
        loop {
            tokio::select! {
                message = request.inbox.recv() => match message {
                    Some(message) if message == "done" => break,
                    Some(message) => heard.push(message),
                    None => std::future::pending::<()>().await,
                },
                () = cancel.cancelled() => break,
            }
        }
        Ok(OutputObject::new(TerminateReason::Goal).with_final_message(heard.join(" | ")))
    }
}

#[tokio::test]
async fn the_task_tool_gives_each_task_its_own_inbox_as_its_catalog_says() {
    let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
    let task = TaskTool::new(manager.clone(), Arc::new(Listener));
    let messages = MessageAsyncTaskTool::new(manager.clone());
    let launch = |name: &str| json!({"subagent_name": name, "goal_prompt": "g", "async": true});
    let mut ids = Vec::new();
    for name in ["listener", "listener", "deaf"] {
        let launched = call(&task, launch(name)).await;
        ids.push(
            launched.metadata["agentId"]
                .as_str()
                .expect("an id")
                .to_owned(),
        );
    }
    for (n, id) in ids.iter().enumerate().take(2) {
        for k in 0..3 {
            let sent = call(
                &messages,
                json!({"task_id": id, "message": format!("{n}.{k}")}),
            )
            .await;
            assert_eq!(sent.error, None, "{}", sent.llm_content);
        }
    }
    let deaf = call(&messages, json!({"task_id": ids[2], "message": "hi"})).await;
    assert!(
        deaf.llm_content.starts_with("Subagent 'deaf'"),
        "{}",
        deaf.llm_content
    );
    for id in &ids[..2] {
        call(&messages, json!({"task_id": id, "message": "done"})).await;
    }
    manager.cancel_task(&ids[2]);
    task.tracker().close();
    task.tracker().wait().await;
    // Each listener heard its own messages, in order, and nobody else's.
    let heard = |id: &str| {
        manager
            .task(id)
            .and_then(|task| task.output()?.final_message.clone())
    };
    assert_eq!(heard(&ids[0]).as_deref(), Some("0.0 | 0.1 | 0.2"));
    assert_eq!(heard(&ids[1]).as_deref(), Some("1.0 | 1.1 | 1.2"));
}

/// One step of the order-and-isolation property.
#[derive(Debug, Clone)]
enum Step {
    Send(usize),
    Complete(usize),
    Cancel(usize),
    /// The subagent of task `i` reads what is waiting.
    Read(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..4usize).prop_map(Step::Send),
        1 => (0..4usize).prop_map(Step::Complete),
        1 => (0..4usize).prop_map(Step::Cancel),
        3 => (0..4usize).prop_map(Step::Read),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every message reaches its own task, in the order it was sent, or is
    /// refused with a clear error; none is accepted once its task has ended.
    #[test]
    fn messages_reach_their_own_task_in_order_or_are_refused(steps in proptest::collection::vec(step(), 1..80)) {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        let mut inboxes = Vec::new();
        for i in 0..4 {
            let (sender, inbox) = Inbox::channel();
            manager
                .register_task(RegisterTaskInput::new(format!("task-{i}"), "s", "g").with_inbox(sender))
                .expect("unlimited");
            inboxes.push(inbox);
        }
        let mut accepted: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        let mut read: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        let mut ended = [false; 4];
        for (n, step) in steps.into_iter().enumerate() {
            match step {
                Step::Send(i) => {
                    let text = format!("message {n} for task {i}");
                    let out = asynctask_tools::message_task(&manager, &format!("task-{i}"), &text);
                    if out.kind == CommandOutputKind::Info {
                        prop_assert!(!ended[i], "accepted for a finished task");
                        accepted.entry(i).or_default().push(text);
                    } else {
                        prop_assert!(out.text.contains("already") || out.text.contains("has not read"), "{}", out.text);
                    }
                }
                Step::Complete(i) => {
                    manager.complete_task(&format!("task-{i}"), OutputObject::new(TerminateReason::Goal));
                    ended[i] = true;
                }
                Step::Cancel(i) => {
                    manager.cancel_task(&format!("task-{i}"));
                    ended[i] = true;
                }
                Step::Read(i) => {
                    while let Some(message) = inboxes[i].try_recv() {
                        read.entry(i).or_default().push(message);
                    }
                }
            }
        }
        for (i, inbox) in inboxes.iter().enumerate() {
            while let Some(message) = inbox.try_recv() {
                read.entry(i).or_default().push(message);
            }
        }
        prop_assert_eq!(read, accepted, "each task read exactly its accepted messages, in order");
    }
}

/// Real threads: senders, a thread ending tasks, and readers all at once.
/// Every accepted message is read by its own task, in the order its sender
/// sent it; every refused one was refused with a reason.
#[test]
fn messages_race_completions_and_cancels_without_loss_or_crosstalk() {
    const TASKS: usize = 6;
    const SENDERS: usize = 3;
    const PER_SENDER: usize = 400;
    let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
    let mut inboxes = Vec::new();
    for i in 0..TASKS {
        let (sender, inbox) = Inbox::channel();
        manager
            .register_task(RegisterTaskInput::new(format!("task-{i}"), "s", "g").with_inbox(sender))
            .expect("unlimited");
        inboxes.push(Arc::new(inbox));
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (accepted, read) = std::thread::scope(|scope| {
        let senders: Vec<_> = (0..SENDERS)
            .map(|s| {
                let manager = manager.clone();
                scope.spawn(move || {
                    let mut accepted = Vec::new();
                    for n in 0..PER_SENDER {
                        let i = (n * 7 + s) % TASKS;
                        let text = format!("{s}:{n}:{i}");
                        let out =
                            asynctask_tools::message_task(&manager, &format!("task-{i}"), &text);
                        match out.kind {
                            CommandOutputKind::Info => accepted.push((i, text)),
                            _ => assert!(
                                out.text.contains("already") || out.text.contains("has not read"),
                                "{}",
                                out.text
                            ),
                        }
                    }
                    accepted
                })
            })
            .collect();
        let ender = {
            let manager = manager.clone();
            scope.spawn(move || {
                for i in 0..TASKS {
                    std::thread::yield_now();
                    let id = format!("task-{i}");
                    if i % 2 == 0 {
                        manager.complete_task(&id, OutputObject::new(TerminateReason::Goal));
                    } else {
                        manager.cancel_task(&id);
                    }
                }
            })
        };
        let readers: Vec<_> = inboxes
            .iter()
            .map(|inbox| {
                let (inbox, stop) = (Arc::clone(inbox), Arc::clone(&stop));
                scope.spawn(move || {
                    let mut read = Vec::new();
                    loop {
                        let done = stop.load(std::sync::atomic::Ordering::Acquire);
                        while let Some(message) = inbox.try_recv() {
                            read.push(message);
                        }
                        if done {
                            return read;
                        }
                        std::thread::yield_now();
                    }
                })
            })
            .collect();
        let accepted: Vec<(usize, String)> = senders
            .into_iter()
            .flat_map(|sender| sender.join().expect("sender"))
            .collect();
        ender.join().expect("ender");
        stop.store(true, std::sync::atomic::Ordering::Release);
        let read: Vec<Vec<String>> = readers
            .into_iter()
            .map(|reader| reader.join().expect("reader"))
            .collect();
        (accepted, read)
    });
    for (i, read) in read.iter().enumerate() {
        for s in 0..SENDERS {
            let sent: Vec<&String> = accepted
                .iter()
                .filter(|(task, text)| *task == i && text.starts_with(&format!("{s}:")))
                .map(|(_, text)| text)
                .collect();
            let got: Vec<&String> = read
                .iter()
                .filter(|text| text.starts_with(&format!("{s}:")))
                .collect();
            assert_eq!(
                got, sent,
                "task {i}, sender {s}: its accepted messages, in order"
            );
        }
        assert!(
            read.iter().all(|text| text.ends_with(&format!(":{i}"))),
            "task {i} read only its own messages"
        );
    }
    assert_eq!(manager.counts().running, 0);
}
