//! `task`: sync and async runs, timeouts, cancellation, panics, the limit refusal,
//! timeout resolution and bad parameters, with fake subagent runners.
//!
//! Everything involving time runs under paused tokio time, so the timeouts (900 s
//! by default) and the 5 s grace period pass instantly and exactly.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use asynctask_manager::{AsyncTaskManager, CancellationToken, TaskSnapshot};
use asynctask_model::{
    AsyncTaskInfo, AsyncTaskStatus, ManualClock, MaxAsyncTasks, MaxQueuedTasks, OutputObject,
    TerminateReason,
};
use asynctask_tools::{
    ContextVar, KEPT_TASK_FILES, LaunchBudget, MAX_ENUM_CHARS, MAX_ENUM_NAMES, Nesting,
    OutputVarSpec, SubagentError, SubagentInfo, SubagentRequest, SubagentRunner, SyncDetach,
    TaskParams, TaskTimeouts, TaskTool, Tool, ToolErrorType, ToolParams, ToolResult,
    completion_notification,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::check_async_tasks::T0;
use crate::redacted;

/// How long a cancelled runner may take before it is aborted (the tool's const).
const GRACE: Duration = Duration::from_secs(5);

/// What a fake runner does.
#[derive(Clone)]
enum Behaviour {
    /// Returns this output at once.
    Return(OutputObject),
    /// Returns this error at once.
    Fail(&'static str),
    /// Panics with a `&'static str` payload.
    PanicStr(&'static str),
    /// Panics with a `String` payload.
    PanicString(String),
    /// Waits for its token, then returns a GOAL output (so a test can tell that a
    /// late result never overrides a timeout or a cancel).
    WaitForCancel,
    /// Never returns, whatever its token says.
    IgnoreCancel,
    /// Returns [`output`] after this many seconds, or an error when cancelled first.
    Sleep(u64),
    /// Keeps its output in `/outputs/<task id>.out` (as its progress says),
    /// prints one line, then waits for its token.
    PrintThenWait,
}

/// A fake runner that records what it was given and whether it was dropped
/// before it finished (aborted).
struct FakeRunner {
    behaviour: Behaviour,
    catalog: Option<Vec<SubagentInfo>>,
    requests: Mutex<Vec<SubagentRequest>>,
    tokens: Mutex<Vec<CancellationToken>>,
    aborted: Arc<AtomicUsize>,
    /// The tasks it was told to forget, in order.
    forgotten: Mutex<Vec<String>>,
}

impl FakeRunner {
    fn new(behaviour: Behaviour) -> Arc<Self> {
        Arc::new(FakeRunner {
            behaviour,
            catalog: None,
            requests: Mutex::new(Vec::new()),
            tokens: Mutex::new(Vec::new()),
            aborted: Arc::new(AtomicUsize::new(0)),
            forgotten: Mutex::new(Vec::new()),
        })
    }

    fn forgotten(&self) -> Vec<String> {
        self.forgotten
            .lock()
            .expect("a runner never panics holding its lock")
            .clone()
    }

    /// A runner that offers only these subagents.
    fn with_catalog(behaviour: Behaviour, names: &[&str]) -> Arc<Self> {
        let mut runner = Arc::into_inner(FakeRunner::new(behaviour)).expect("just made");
        runner.catalog = Some(
            names
                .iter()
                .map(|name| SubagentInfo::new(*name, format!("the {name}")))
                .collect(),
        );
        Arc::new(runner)
    }

    fn requests(&self) -> Vec<SubagentRequest> {
        self.requests
            .lock()
            .expect("a runner never panics holding its lock")
            .clone()
    }

    fn started(&self) -> usize {
        self.tokens
            .lock()
            .expect("a runner never panics holding its lock")
            .len()
    }

    fn token(&self, i: usize) -> CancellationToken {
        self.tokens
            .lock()
            .expect("a runner never panics holding its lock")[i]
            .clone()
    }

    fn aborted(&self) -> usize {
        self.aborted.load(Ordering::SeqCst)
    }
}

/// Counts one abort when dropped while still armed.
struct AbortProbe {
    aborted: Arc<AtomicUsize>,
    armed: bool,
}

impl Drop for AbortProbe {
    fn drop(&mut self) {
        if self.armed {
            self.aborted.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl SubagentRunner for FakeRunner {
    fn catalog(&self) -> Option<Vec<SubagentInfo>> {
        self.catalog.clone()
    }

    fn forget(&self, task_id: &str) {
        self.forgotten
            .lock()
            .expect("a runner never panics holding its lock")
            .push(task_id.to_owned());
    }

    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        let (progress, id) = (request.progress.clone(), request.task_id.clone());
        self.requests
            .lock()
            .expect("a runner never panics holding its lock")
            .push(request);
        self.tokens
            .lock()
            .expect("a runner never panics holding its lock")
            .push(cancel.clone());
        let mut probe = AbortProbe {
            aborted: Arc::clone(&self.aborted),
            armed: true,
        };
        let result = match self.behaviour.clone() {
            Behaviour::Return(output) => Ok(output),
            Behaviour::Fail(message) => Err(SubagentError::new(message)),
            Behaviour::PanicStr(message) => std::panic::panic_any(message),
            Behaviour::PanicString(message) => std::panic::panic_any(message),
            Behaviour::WaitForCancel => {
                cancel.cancelled().await;
                Ok(OutputObject::new(TerminateReason::Goal).with_final_message("stopped early"))
            }
            Behaviour::IgnoreCancel => std::future::pending().await,
            Behaviour::Sleep(seconds) => tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(seconds)) => Ok(output()),
                () = cancel.cancelled() => Err(SubagentError::new("cancelled while sleeping")),
            },
            Behaviour::PrintThenWait => {
                progress.set_output_file(format!("/outputs/{id}.out"));
                progress.record_output(b"read 3 files\n");
                cancel.cancelled().await;
                Err(SubagentError::new("cancelled"))
            }
        };
        probe.armed = false;
        result
    }
}

fn output() -> OutputObject {
    OutputObject::new(TerminateReason::Goal)
        .with_var("answer", "42")
        .with_var("files", "src/io.rs, src/retry.rs")
        .with_final_message("Found two callers that can loop forever.")
}

/// A manager whose clock stands at [`T0`], and a tool over it.
fn setup(runner: &Arc<FakeRunner>, max: i64) -> (AsyncTaskManager, TaskTool) {
    let manager = AsyncTaskManager::with_clock(
        MaxAsyncTasks::new(max).expect("a valid limit"),
        Arc::new(ManualClock::new(T0)),
    );
    let tool = TaskTool::new(
        manager.clone(),
        Arc::clone(runner) as Arc<dyn SubagentRunner>,
    );
    (manager, tool)
}

async fn call(tool: &TaskTool, params: Value) -> ToolResult {
    tool.execute(params, CancellationToken::new()).await
}

fn async_params(name: &str, extra: Value) -> Value {
    let mut params =
        json!({"subagent_name": name, "goal_prompt": "Find the callers", "async": true});
    if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
        params.extend(extra);
    }
    params
}

fn sync_params(name: &str, extra: Value) -> Value {
    let mut params = async_params(name, extra);
    params
        .as_object_mut()
        .expect("params are an object")
        .remove("async");
    params
}

/// The id a launch reported.
fn agent_id(result: &ToolResult) -> String {
    result.metadata["agentId"]
        .as_str()
        .expect("the result names its agent")
        .to_owned()
}

/// Waits until every background run (and every runner being stopped) is over.
async fn settle(tool: &TaskTool) {
    tool.tracker().close();
    tool.tracker().wait().await;
    tool.tracker().reopen();
}

/// Lets spawned tasks run until `condition` holds (no time passes).
async fn until(condition: impl Fn() -> bool) {
    for _ in 0..1_000 {
        if condition() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("condition not reached");
}

fn timeout_text(name: &str, seconds: u64) -> String {
    format!(
        "Subagent '{name}' timed out after {seconds} seconds. Pass a larger timeout_seconds \
         (at most 1800 seconds) to give it longer."
    )
}

/// A task record as the manager should hold it, launched and ended at [`T0`].
fn record(id: &str, name: &str, status: AsyncTaskStatus) -> AsyncTaskInfo {
    AsyncTaskInfo {
        status,
        completed_at: status.is_terminal().then_some(T0),
        ..AsyncTaskInfo::new(id, name, "Find the callers", T0)
    }
}

// ---------------------------------------------------------------- async

#[tokio::test(start_paused = true)]
async fn async_launch_texts_and_metadata() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 5);
    let result = call(&tool, async_params("researcher", json!({}))).await;
    let id = agent_id(&result);
    assert_eq!(id.len(), 36);

    insta::assert_snapshot!(
        "async_launch_result",
        redacted(&result, &[(&id, "<task-id>")])
    );
    assert_eq!(
        result,
        ToolResult::success(
            format!(
                "Async task launched: subagent 'researcher' (ID: {id}). Task is running in \
                 background. Use 'check_async_tasks' to monitor progress."
            ),
            format!("Async task started: **researcher** (`{id}`)"),
            json!({"agentId": id, "async": true, "status": "running"}),
        )
    );

    assert_eq!(
        manager.tasks(),
        vec![record(&id, "researcher", AsyncTaskStatus::Running)]
    );
    until(|| runner.started() == 1).await;
    assert_eq!(
        runner.requests(),
        vec![
            SubagentRequest::new(id.clone(), "researcher", "Find the callers").with_run_async(true)
        ]
    );
    assert!(manager.cancel_task(&id));
    settle(&tool).await;
}

#[tokio::test(start_paused = true)]
async fn async_request_carries_every_parameter() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (_manager, tool) = setup(&runner, 5);
    let params = async_params(
        "researcher",
        json!({
            "behaviour_prompts": ["be brief"],
            "tool_whitelist": ["grep", "read_file"],
            "output_spec": [{"name": "answer", "description": "the answer"}],
            "context": [{"name": "repo", "value": "/src"}],
            "timeout_seconds": 120,
        }),
    );
    let id = agent_id(&call(&tool, params).await);
    settle(&tool).await;
    assert_eq!(
        runner.requests(),
        vec![
            SubagentRequest::new(id, "researcher", "Find the callers")
                .with_behaviour_prompts(vec!["be brief".into()])
                .with_tool_whitelist(Some(vec!["grep".into(), "read_file".into()]))
                .with_output_spec(vec![OutputVarSpec {
                    name: "answer".into(),
                    description: "the answer".into()
                }])
                .with_context(vec![ContextVar {
                    name: "repo".into(),
                    value: "/src".into()
                }])
                .with_timeout(Duration::from_secs(120))
                .with_run_async(true)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn async_task_completes_with_the_runner_output() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (manager, tool) = setup(&runner, 5);
    let id = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    settle(&tool).await;
    assert_eq!(
        manager.tasks(),
        vec![AsyncTaskInfo {
            output: Some(output()),
            ..record(&id, "researcher", AsyncTaskStatus::Completed)
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn async_task_fails_with_the_runner_error() {
    let runner = FakeRunner::new(Behaviour::Fail("exit status 2"));
    let (manager, tool) = setup(&runner, 5);
    let id = agent_id(&call(&tool, async_params("tester", json!({}))).await);
    settle(&tool).await;
    assert_eq!(
        manager.tasks(),
        vec![AsyncTaskInfo {
            error: Some("exit status 2".into()),
            ..record(&id, "tester", AsyncTaskStatus::Failed)
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn async_panics_fail_the_task_with_the_payload() {
    for (behaviour, payload) in [
        (
            Behaviour::PanicStr("index out of bounds"),
            "index out of bounds",
        ),
        (
            Behaviour::PanicString("model said: 42".to_owned()),
            "model said: 42",
        ),
    ] {
        let runner = FakeRunner::new(behaviour);
        let (manager, tool) = setup(&runner, 5);
        let id = agent_id(&call(&tool, async_params("crasher", json!({}))).await);
        settle(&tool).await;
        assert_eq!(
            manager.tasks(),
            vec![AsyncTaskInfo {
                error: Some(format!("subagent panicked: {payload}")),
                ..record(&id, "crasher", AsyncTaskStatus::Failed)
            }]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn async_timeout_fails_the_task_and_cancels_the_runner() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 5);
    let start = Instant::now();
    let id = agent_id(&call(&tool, async_params("slow", json!({"timeout_seconds": 60}))).await);
    settle(&tool).await;

    assert_eq!(
        start.elapsed(),
        Duration::from_secs(60),
        "a cooperative runner gets no grace"
    );
    assert!(runner.token(0).is_cancelled());
    assert_eq!(runner.aborted(), 0);
    insta::assert_snapshot!("timeout_error", manager.task(&id).unwrap().error().unwrap());
    // The runner answered the cancel with a GOAL output; the timeout still stands.
    assert_eq!(
        manager.tasks(),
        vec![AsyncTaskInfo {
            error: Some(timeout_text("slow", 60)),
            ..record(&id, "slow", AsyncTaskStatus::Failed)
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn cancel_task_cancels_the_runner_and_the_task_stays_cancelled() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 5);
    let id = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    until(|| runner.started() == 1).await;
    assert!(!runner.token(0).is_cancelled());

    assert!(manager.cancel_task(&id));
    assert!(runner.token(0).is_cancelled());
    settle(&tool).await;
    // The runner returned an output after the cancel: it is not recorded.
    assert_eq!(
        manager.tasks(),
        vec![record(&id, "researcher", AsyncTaskStatus::Cancelled)]
    );
    assert_eq!(runner.aborted(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_host_cancelling_the_token_cancels_the_task() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 5);
    let id = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    until(|| runner.started() == 1).await;

    manager.cancellation_token(&id).unwrap().cancel();
    settle(&tool).await;
    assert_eq!(
        manager.tasks(),
        vec![record(&id, "researcher", AsyncTaskStatus::Cancelled)]
    );
}

#[tokio::test(start_paused = true)]
async fn async_tasks_do_not_depend_on_the_launching_call() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 5);
    let call_token = CancellationToken::new();
    let result = tool
        .execute(async_params("researcher", json!({})), call_token.clone())
        .await;
    let id = agent_id(&result);
    until(|| runner.started() == 1).await;

    call_token.cancel();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!runner.token(0).is_cancelled());
    assert_eq!(
        manager.tasks(),
        vec![record(&id, "researcher", AsyncTaskStatus::Running)]
    );

    assert!(manager.cancel_task(&id));
    settle(&tool).await;
}

#[tokio::test(start_paused = true)]
async fn a_runner_ignoring_a_timeout_is_aborted_after_the_grace_period() {
    let runner = FakeRunner::new(Behaviour::IgnoreCancel);
    let (manager, tool) = setup(&runner, 5);
    let start = Instant::now();
    let id = agent_id(
        &call(
            &tool,
            async_params("stubborn", json!({"timeout_seconds": 10})),
        )
        .await,
    );
    let failed = AsyncTaskInfo {
        error: Some(timeout_text("stubborn", 10)),
        ..record(&id, "stubborn", AsyncTaskStatus::Failed)
    };

    // Just after the timeout: the task has failed, the runner is in its grace.
    tokio::time::sleep(Duration::from_millis(10_001)).await;
    assert_eq!(manager.tasks(), vec![failed.clone()]);
    assert!(runner.token(0).is_cancelled());
    assert_eq!(runner.aborted(), 0);

    settle(&tool).await;
    assert_eq!(start.elapsed(), Duration::from_secs(10) + GRACE);
    assert_eq!(runner.aborted(), 1);
    assert_eq!(manager.tasks(), vec![failed]);
}

#[tokio::test(start_paused = true)]
async fn a_runner_ignoring_cancel_task_is_aborted_and_the_task_stays_cancelled() {
    let runner = FakeRunner::new(Behaviour::IgnoreCancel);
    let (manager, tool) = setup(&runner, 5);
    let id = agent_id(&call(&tool, async_params("stubborn", json!({}))).await);
    until(|| runner.started() == 1).await;

    let start = Instant::now();
    assert!(manager.cancel_task(&id));
    settle(&tool).await;
    assert_eq!(start.elapsed(), GRACE);
    assert_eq!(runner.aborted(), 1);
    assert_eq!(
        manager.tasks(),
        vec![record(&id, "stubborn", AsyncTaskStatus::Cancelled)]
    );
    assert_eq!(manager.counts().running, 0);
}

#[tokio::test(start_paused = true)]
async fn the_limit_refusal_says_what_to_do_next() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 1);
    let first = agent_id(&call(&tool, async_params("researcher", json!({}))).await);

    let refused = call(&tool, async_params("tester", json!({}))).await;
    insta::assert_snapshot!("limit_refusal", redacted(&refused, &[]));
    let text = "Max async tasks (1) reached. Wait for a running task to finish and check \
                progress with 'check_async_tasks', run this subagent synchronously (without \
                async: true), or try again later.";
    assert_eq!(
        refused,
        ToolResult::failure(
            ToolErrorType::ExecutionFailed,
            "Max async tasks (1) reached",
            text,
            text
        )
    );
    assert_eq!(
        manager.tasks(),
        vec![record(&first, "researcher", AsyncTaskStatus::Running)]
    );
    until(|| runner.started() == 1).await;
    tokio::task::yield_now().await;
    assert_eq!(runner.started(), 1, "the refused subagent never ran");

    assert!(manager.cancel_task(&first));
    settle(&tool).await;
}

#[tokio::test(start_paused = true)]
async fn two_launches_of_one_subagent_differ_in_their_first_8_characters() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (_manager, tool) = setup(&runner, 5);
    let a = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    let b = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    assert_ne!(a[..8], b[..8]);
    settle(&tool).await;
}

// ---------------------------------------------------------------- queue

/// A manager with room for `max` running tasks and `queued` waiting ones.
fn setup_queue(runner: &Arc<FakeRunner>, max: i64, queued: i64) -> (AsyncTaskManager, TaskTool) {
    let (manager, tool) = setup(runner, max);
    manager.set_max_queued_tasks(MaxQueuedTasks::new(queued).expect("a valid bound"));
    (manager, tool)
}

#[tokio::test(start_paused = true)]
async fn launches_past_the_limit_wait_in_the_queue_and_start_first_queued_first() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup_queue(&runner, 1, 2);
    let first = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    let second = call(
        &tool,
        async_params("tester", json!({"timeout_seconds": 60})),
    )
    .await;
    insta::assert_snapshot!("queued", redacted(&second, &[(&agent_id(&second), "<id>")]));
    let second = agent_id(&second);
    let third = call(
        &tool,
        async_params(
            "writer",
            json!({"context": [{"name": "branch", "value": "main"}]}),
        ),
    )
    .await;
    assert_eq!(third.metadata["queuePosition"], 2);
    let third = agent_id(&third);
    let refused = call(&tool, async_params("writer", json!({}))).await;
    insta::assert_snapshot!("queue_full_refusal", redacted(&refused, &[]));
    assert_eq!(
        refused.error.as_ref().map(|e| e.kind),
        Some(ToolErrorType::ExecutionFailed)
    );
    assert_eq!(
        manager.tasks().len(),
        3,
        "the refused launch registered nothing"
    );
    until(|| runner.started() == 1).await;

    assert!(manager.cancel_task(&first));
    until(|| runner.started() == 2).await;
    let started = &runner.requests()[1];
    assert_eq!(
        (
            started.task_id.as_str(),
            started.subagent_name.as_str(),
            started.goal_prompt.as_str()
        ),
        (second.as_str(), "tester", "Find the callers")
    );
    assert_eq!(
        started.timeout,
        Duration::from_secs(60),
        "launched with what it was given"
    );
    assert!(started.run_async);
    assert_eq!(
        manager.task(&second).map(|t| t.status()),
        Some(AsyncTaskStatus::Running)
    );
    assert_eq!(manager.queue_position(&third), Some(1), "moved up");

    assert!(manager.cancel_task(&second));
    until(|| runner.started() == 3).await;
    let started = &runner.requests()[2];
    assert_eq!(started.task_id, third);
    assert_eq!(
        started.context,
        [ContextVar {
            name: "branch".to_owned(),
            value: "main".to_owned()
        }]
    );
    assert!(manager.queued_tasks().is_empty());
    assert!(manager.cancel_task(&third));
    settle(&tool).await;
    assert_eq!(runner.started(), 3, "each ran once");
}

#[tokio::test(start_paused = true)]
async fn a_queued_task_cancelled_never_runs() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup_queue(&runner, 1, 5);
    let first = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    let waiting = agent_id(&call(&tool, async_params("tester", json!({}))).await);
    assert!(manager.cancel_task(&waiting));
    let cancelled = manager.task(&waiting).expect("kept in the history");
    assert_eq!(cancelled.status(), AsyncTaskStatus::Cancelled);
    assert_eq!(cancelled.started_at(), None, "it never started");
    assert!(manager.cancel_task(&first));
    settle(&tool).await;
    assert_eq!(runner.started(), 1, "only the first subagent ran");
}

#[tokio::test(start_paused = true)]
async fn a_queued_tasks_timeout_counts_from_its_start() {
    let runner = FakeRunner::new(Behaviour::Sleep(100));
    let (manager, tool) = setup_queue(&runner, 1, 1);
    let begin = Instant::now();
    let _first = call(&tool, async_params("researcher", json!({}))).await;
    let waiting = agent_id(
        &call(
            &tool,
            async_params("tester", json!({"timeout_seconds": 30})),
        )
        .await,
    );
    settle(&tool).await;
    let task = manager.task(&waiting).expect("kept");
    assert_eq!(
        task.status(),
        AsyncTaskStatus::Failed,
        "the sleep outlasts its timeout"
    );
    assert_eq!(task.error(), Some(timeout_text("tester", 30).as_str()));
    // 100 s waiting behind the first, then its own 30 s (and the runner's
    // prompt answer to the cancel).
    assert_eq!(begin.elapsed().as_secs(), 130);
}

#[tokio::test(start_paused = true)]
async fn messages_to_a_queued_task_wait_for_its_start() {
    let runner = FakeRunner::with_catalog(Behaviour::WaitForCancel, &["researcher"]);
    let runner = {
        let mut runner = Arc::into_inner(runner).expect("just made");
        runner.catalog = Some(vec![
            SubagentInfo::new("researcher", "reads").with_messages(true),
        ]);
        Arc::new(runner)
    };
    let (manager, tool) = setup_queue(&runner, 1, 1);
    let first = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    let waiting = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    manager
        .send_message(&waiting, "also check the tests".to_owned())
        .expect("a queued task takes messages");
    assert!(manager.cancel_task(&first));
    until(|| runner.started() == 2).await;
    let inbox = runner.requests()[1].inbox.clone();
    assert_eq!(inbox.try_recv().as_deref(), Some("also check the tests"));
    assert!(manager.cancel_task(&waiting));
    settle(&tool).await;
}

#[tokio::test(start_paused = true)]
async fn a_task_started_from_a_restored_queue_runs_what_it_was_launched_with() {
    use asynctask_manager::{Journal, JournalEntry, JournalError, StoredTask};
    struct Nowhere;
    impl Journal for Nowhere {
        fn record(&self, _: &[JournalEntry<'_>]) -> Result<(), JournalError> {
            Ok(())
        }
    }
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let launch = serde_json::to_string(
        &SubagentRequest::new("ignored", "tester", "run the suite")
            .with_timeout(Duration::from_secs(90))
            .with_behaviour_prompts(vec!["be brief".to_owned()]),
    )
    .expect("a request serializes");
    let queued = |id: &str, launch: Option<&str>| {
        let info = AsyncTaskInfo::queued(id, "tester", "run the suite", T0);
        match launch {
            Some(launch) => StoredTask::new(info).with_launch(launch),
            None => StoredTask::new(info),
        }
    };
    let manager = AsyncTaskManager::restore(
        MaxAsyncTasks::new(1).expect("a valid limit"),
        Arc::new(ManualClock::new(T0)),
        Arc::new(Nowhere),
        vec![
            queued("q-1", Some(&launch)),
            queued("q-2", None),
            queued("q-3", Some("{not json")),
        ],
    )
    .expect("a registry");
    let tool = TaskTool::new(
        manager.clone(),
        Arc::clone(&runner) as Arc<dyn SubagentRunner>,
    );
    assert_eq!(
        manager.queued_tasks().len(),
        3,
        "held until the tool runs what starts"
    );
    tool.run_queued_tasks();
    manager.start_queued();
    settle(&tool).await;
    let requests = runner.requests();
    assert_eq!(
        requests.len(),
        1,
        "only the task with readable launch parameters ran"
    );
    assert_eq!(
        (
            requests[0].task_id.as_str(),
            requests[0].timeout,
            requests[0].behaviour_prompts.clone()
        ),
        ("q-1", Duration::from_secs(90), vec!["be brief".to_owned()])
    );
    assert_eq!(
        manager.task("q-1").map(|t| t.status()),
        Some(AsyncTaskStatus::Completed)
    );
    assert_eq!(
        manager
            .task("q-2")
            .and_then(|t| t.error().map(str::to_owned))
            .as_deref(),
        Some(
            "Subagent 'tester' could not be started from the queue: it was queued without its launch parameters."
        )
    );
    let error = manager
        .task("q-3")
        .and_then(|t| t.error().map(str::to_owned))
        .expect("failed");
    assert!(
        error.starts_with("Subagent 'tester' could not be started from the queue: its launch parameters cannot be read: "),
        "{error}"
    );
}

/// Counts the runs in flight and the most ever in flight at once.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
    ran: Mutex<Vec<String>>,
}

#[async_trait]
impl SubagentRunner for Gauge {
    async fn run(
        &self,
        request: SubagentRequest,
        _cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.ran.lock().expect("no panic").push(request.task_id);
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        Ok(output())
    }
}

#[test]
fn concurrent_launches_fill_the_limit_and_the_queue_and_each_accepted_task_runs_once() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .expect("a runtime");
    for round in 0..50 {
        runtime.block_on(async {
            let gauge = Arc::new(Gauge::default());
            let manager = AsyncTaskManager::new(MaxAsyncTasks::new(2).expect("a limit"));
            manager.set_max_queued_tasks(MaxQueuedTasks::new(3).expect("a bound"));
            let tool = Arc::new(TaskTool::new(
                manager.clone(),
                Arc::clone(&gauge) as Arc<dyn SubagentRunner>,
            ));
            let launches: Vec<_> = (0..8)
                .map(|_| {
                    let tool = Arc::clone(&tool);
                    tokio::spawn(
                        async move { call(&tool, async_params("worker", json!({}))).await },
                    )
                })
                .collect();
            let mut accepted = Vec::new();
            for launch in launches {
                let result = launch.await.expect("no panic");
                if result.error.is_none() {
                    accepted.push(agent_id(&result));
                }
            }
            // The runs take 2 ms each: all 8 launches may land before any
            // ends (5 accepted), or some after a slot freed.
            assert!(accepted.len() >= 5, "round {round}: {}", accepted.len());
            for _ in 0..2_000 {
                if manager.counts().completed == accepted.len() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            settle(&tool).await;
            assert_eq!(manager.counts().completed, accepted.len(), "round {round}");
            let mut ran = gauge.ran.lock().expect("no panic").clone();
            ran.sort();
            accepted.sort();
            assert_eq!(ran, accepted, "round {round}: each accepted task ran once");
            assert!(
                gauge.most.load(Ordering::SeqCst) <= 2,
                "round {round}: never past the limit"
            );
        });
    }
}

// ---------------------------------------------------------------- caps

#[tokio::test(start_paused = true)]
async fn a_session_past_its_launch_budget_is_refused_and_refusals_cost_nothing() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup(&runner, 1);
    let tool = tool.with_launch_budget(LaunchBudget::new(2));
    let first = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    // Refused by the running limit: the launch is given back.
    let limited = call(&tool, async_params("tester", json!({}))).await;
    assert!(
        limited
            .llm_content
            .starts_with("Max async tasks (1) reached")
    );
    assert!(manager.cancel_task(&first));
    let second = call(&tool, async_params("tester", json!({}))).await;
    assert_eq!(second.error, None, "{}", second.llm_content);

    let refused = call(&tool, sync_params("writer", json!({}))).await;
    insta::assert_snapshot!("launch_cap_refusal", redacted(&refused, &[]));
    assert_eq!(manager.tasks().len(), 2, "nothing registered");
    manager.cancel_task(&agent_id(&second));
    // Another session's budget is its own.
    let other = asynctask_tools::CallContext::new().with_launches(LaunchBudget::new(1));
    let theirs = asynctask_tools::with_call_context(
        other,
        tool.execute(async_params("writer", json!({})), CancellationToken::new()),
    )
    .await;
    assert_eq!(theirs.error, None, "{}", theirs.llm_content);
    manager.cancel_task(&agent_id(&theirs));
    settle(&tool).await;
    assert_eq!(runner.started(), 3);
}

#[tokio::test(start_paused = true)]
async fn subagents_run_one_deeper_than_their_caller_and_no_deeper_than_the_cap() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (_manager, tool) = setup(&runner, 5);
    let tool = tool.with_nesting(Nesting::at(1).with_max_depth(Some(3)));
    call(&tool, sync_params("researcher", json!({}))).await;
    let inside =
        asynctask_tools::CallContext::new().with_nesting(Nesting::at(2).with_max_depth(Some(3)));
    asynctask_tools::with_call_context(
        inside,
        tool.execute(
            sync_params("researcher", json!({})),
            CancellationToken::new(),
        ),
    )
    .await;
    let depths: Vec<u32> = runner
        .requests()
        .iter()
        .map(|request| request.depth)
        .collect();
    assert_eq!(depths, [2, 3]);

    let too_deep =
        asynctask_tools::CallContext::new().with_nesting(Nesting::at(3).with_max_depth(Some(3)));
    let refused = asynctask_tools::with_call_context(
        too_deep,
        tool.execute(
            async_params("researcher", json!({})),
            CancellationToken::new(),
        ),
    )
    .await;
    insta::assert_snapshot!("nesting_refusal", redacted(&refused, &[]));
    assert_eq!(runner.requests().len(), 2, "the refused subagent never ran");
}

// ---------------------------------------------------------------- sync

#[tokio::test(start_paused = true)]
async fn sync_result_is_the_completion_json() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (manager, tool) = setup(&runner, 5);
    for run_async in [json!({}), json!({"async": false}), json!({"async": null})] {
        let result = call(&tool, sync_params("researcher", run_async)).await;
        let id = agent_id(&result);
        insta::assert_snapshot!("sync_result", redacted(&result, &[(&id, "<task-id>")]));

        let mut task = AsyncTaskInfo::new(id.clone(), "researcher", "Find the callers", T0);
        task.complete(output(), T0);
        assert_eq!(
            result,
            ToolResult::success(
                completion_notification(&task),
                "Subagent **researcher** finished (`GOAL`)",
                json!({
                    "agentId": id,
                    "terminateReason": "GOAL",
                    "emittedVars": {"answer": "42", "files": "src/io.rs, src/retry.rs"},
                }),
            )
        );
    }
    assert_eq!(
        manager.tasks(),
        Vec::<TaskSnapshot>::new(),
        "synchronous runs are not registered"
    );
    assert!(runner.requests().iter().all(|r| !r.run_async));
}

#[tokio::test(start_paused = true)]
async fn sync_runner_error_is_an_execution_failure() {
    let runner = FakeRunner::new(Behaviour::Fail("exit status 2"));
    let (manager, tool) = setup(&runner, 5);
    let result = call(&tool, sync_params("tester", json!({}))).await;
    let id = agent_id(&result);
    assert_eq!(
        result,
        ToolResult::failure(
            ToolErrorType::ExecutionFailed,
            "exit status 2",
            format!("{{\n  \"agent_id\": \"{id}\",\n  \"status\": \"failed\",\n  \"error\": \"exit status 2\"\n}}"),
            "Subagent **tester** failed: exit status 2",
        )
        .with_metadata(json!({"agentId": id, "status": "failed"}))
    );
    assert_eq!(manager.tasks(), Vec::<TaskSnapshot>::new());
}

#[tokio::test(start_paused = true)]
async fn sync_panic_is_an_unhandled_exception() {
    let runner = FakeRunner::new(Behaviour::PanicStr("boom"));
    let (_manager, tool) = setup(&runner, 5);
    let result = call(&tool, sync_params("crasher", json!({}))).await;
    let id = agent_id(&result);
    assert_eq!(
        result,
        ToolResult::failure(
            ToolErrorType::UnhandledException,
            "subagent panicked: boom",
            format!("{{\n  \"agent_id\": \"{id}\",\n  \"status\": \"failed\",\n  \"error\": \"subagent panicked: boom\"\n}}"),
            "Subagent **crasher** failed: subagent panicked: boom",
        )
        .with_metadata(json!({"agentId": id, "status": "failed"}))
    );
}

#[tokio::test(start_paused = true)]
async fn sync_timeout_names_the_timeout_and_the_setting() {
    let runner = FakeRunner::new(Behaviour::IgnoreCancel);
    let (_manager, tool) = setup(&runner, 5);
    let start = Instant::now();
    let result = call(
        &tool,
        sync_params("stubborn", json!({"timeout_seconds": 30})),
    )
    .await;
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(30),
        "the caller does not wait for the grace"
    );
    let id = agent_id(&result);
    let text = timeout_text("stubborn", 30);
    assert_eq!(
        result,
        ToolResult::failure(
            ToolErrorType::Timeout,
            text.clone(),
            format!("{{\n  \"agent_id\": \"{id}\",\n  \"status\": \"failed\",\n  \"error\": \"{text}\"\n}}"),
            "Subagent **stubborn** timed out after 30 seconds",
        )
        .with_metadata(json!({"agentId": id, "status": "failed"}))
    );
    assert!(runner.token(0).is_cancelled());

    // The runner ignores its token: it is aborted after the grace period.
    assert_eq!(runner.aborted(), 0);
    settle(&tool).await;
    assert_eq!(start.elapsed(), Duration::from_secs(30) + GRACE);
    assert_eq!(runner.aborted(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_names_the_file_that_holds_what_the_subagent_printed() {
    let runner = FakeRunner::new(Behaviour::PrintThenWait);
    let (manager, tool) = setup(&runner, 5);
    let sync = call(&tool, sync_params("slow", json!({"timeout_seconds": 30}))).await;
    let id = agent_id(&sync);
    let expected = format!(
        "{}\n\n[whole output: /outputs/{id}.out (13 bytes)]",
        timeout_text("slow", 30)
    );
    assert_eq!(
        sync.error.as_ref().map(|e| e.message.as_str()),
        Some(expected.as_str())
    );
    let notification: Value = serde_json::from_str(&sync.llm_content).expect("JSON");
    assert_eq!(notification["error"], expected.as_str());

    let id = agent_id(&call(&tool, async_params("slow", json!({"timeout_seconds": 60}))).await);
    settle(&tool).await;
    let error = manager
        .task(&id)
        .and_then(|task| task.error().map(str::to_owned))
        .expect("failed");
    insta::assert_snapshot!("timeout_error_with_output", error.replace(&id, "<task id>"));
}

#[tokio::test(start_paused = true)]
async fn a_timeout_at_the_cap_does_not_ask_for_a_larger_one() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (_manager, tool) = setup(&runner, 5);
    let start = Instant::now();
    let result = call(
        &tool,
        sync_params("slowest", json!({"timeout_seconds": -1})),
    )
    .await;
    assert_eq!(start.elapsed(), Duration::from_secs(1800));
    let error = result.error.expect("timed out");
    assert_eq!(
        (error.kind, error.message.as_str()),
        (
            ToolErrorType::Timeout,
            "Subagent 'slowest' timed out after 1800 seconds, the longest timeout_seconds \
             allows. Split the goal into smaller tasks, or ask the user to raise the host's \
             maximum timeout."
        )
    );
}

#[tokio::test(start_paused = true)]
async fn sync_call_cancelled_cancels_the_runner() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (_manager, tool) = setup(&runner, 5);
    let cancel = CancellationToken::new();
    let (result, ()) = tokio::join!(
        tool.execute(sync_params("researcher", json!({})), cancel.clone()),
        async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            cancel.cancel();
        }
    );
    let id = agent_id(&result);
    assert_eq!(
        result,
        ToolResult::failure(
            ToolErrorType::ExecutionFailed,
            "cancelled",
            format!("{{\n  \"agent_id\": \"{id}\",\n  \"status\": \"cancelled\"\n}}"),
            "Subagent **researcher** was cancelled",
        )
        .with_metadata(json!({"agentId": id, "status": "cancelled"}))
    );
    assert!(runner.token(0).is_cancelled());
    settle(&tool).await;
    assert_eq!(runner.aborted(), 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_sync_call_stops_its_runner() {
    let runner = FakeRunner::new(Behaviour::IgnoreCancel);
    let (_manager, tool) = setup(&runner, 5);
    let start = Instant::now();
    let abandoned = tokio::time::timeout(
        Duration::from_secs(1),
        call(&tool, sync_params("stubborn", json!({}))),
    )
    .await;
    assert!(abandoned.is_err(), "the call was still running");
    assert!(runner.token(0).is_cancelled());
    settle(&tool).await;
    assert_eq!(start.elapsed(), Duration::from_secs(1) + GRACE);
    assert_eq!(runner.aborted(), 1);
}

// ---------------------------------------------------------------- timeouts

#[tokio::test(start_paused = true)]
async fn timeouts_resolve_to_the_default_and_are_capped() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (_manager, tool) = setup(&runner, 5);
    let cases = [
        (json!({}), 900),
        (json!({"timeout_seconds": null}), 900),
        (json!({"timeout_seconds": 60}), 60),
        (json!({"timeout_seconds": 1800}), 1800),
        (json!({"timeout_seconds": 1801}), 1800),
        (json!({"timeout_seconds": 99_999}), 1800),
        (json!({"timeout_seconds": -1}), 1800),
        (json!({"timeout_seconds": 0}), 1800),
    ];
    for (extra, _) in &cases {
        assert_eq!(
            call(&tool, sync_params("r", extra.clone())).await.error,
            None
        );
    }
    let got: Vec<u64> = runner
        .requests()
        .iter()
        .map(|r| r.timeout.as_secs())
        .collect();
    let expected: Vec<u64> = cases.iter().map(|(_, seconds)| *seconds).collect();
    assert_eq!(got, expected);
    assert_eq!(tool.timeouts(), TaskTimeouts::default());
}

#[tokio::test(start_paused = true)]
async fn configured_timeouts_apply_and_the_default_never_exceeds_the_max() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let manager = AsyncTaskManager::default();
    let timeouts = TaskTimeouts {
        default: Duration::from_secs(600),
        max: Duration::from_secs(120),
    };
    let tool = TaskTool::new(manager, Arc::clone(&runner) as Arc<dyn SubagentRunner>)
        .with_timeouts(timeouts);
    assert_eq!(tool.timeouts(), timeouts);
    let start = Instant::now();
    let result = call(&tool, sync_params("slow", json!({}))).await;
    assert_eq!(start.elapsed(), Duration::from_secs(120));
    assert_eq!(
        result.error.unwrap().message,
        "Subagent 'slow' timed out after 120 seconds, the longest timeout_seconds allows. \
         Split the goal into smaller tasks, or ask the user to raise the host's maximum timeout."
    );
}

// ---------------------------------------------------------------- bad params

#[tokio::test]
async fn bad_parameters_name_the_field() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (manager, tool) = setup(&runner, 5);
    let base = |extra: Value| async_params("researcher", extra);
    let corpus = [
        (
            json!({"subagent_name": 5, "goal_prompt": "g"}),
            "subagent_name: invalid type: integer `5`, expected a string",
        ),
        (
            json!({"subagent_name": "   ", "goal_prompt": "g", "async": true}),
            "subagent_name: must not be blank",
        ),
        (
            json!({"subagent_name": "a", "goal_prompt": ""}),
            "goal_prompt: must not be blank",
        ),
        (json!({"goal_prompt": "g"}), "missing field `subagent_name`"),
        (Value::Null, "missing field `subagent_name`"),
        (
            base(json!({"async": "yes"})),
            "async: invalid type: string \"yes\", expected a boolean",
        ),
        (
            base(json!({"timeout_seconds": "60"})),
            "timeout_seconds: invalid type: string \"60\", expected a JSON number",
        ),
        (
            base(json!({"timeout_seconds": -5})),
            "timeout_seconds: expected -1 or a non-negative integer number of seconds, got -5",
        ),
        (
            base(json!({"behaviour_prompts": "be brief"})),
            "behaviour_prompts: invalid type: string \"be brief\", expected a sequence",
        ),
        (
            base(json!({"context": [{"name": "repo"}]})),
            "context[0]: missing field `value`",
        ),
        (
            base(json!({"extra": 1})),
            "extra: unknown field `extra`, expected one of `subagent_name`, `goal_prompt`, \
             `behaviour_prompts`, `tool_whitelist`, `output_spec`, `context`, \
             `timeout_seconds`, `async`",
        ),
        (json!([1]), "parameters must be a JSON object, got an array"),
        (
            json!("run it"),
            "parameters must be a JSON object, got a string",
        ),
        (json!(7), "parameters must be a JSON object, got a number"),
    ];
    for (params, problem) in corpus {
        let message = format!("Invalid parameters for task: {problem}");
        assert_eq!(
            call(&tool, params.clone()).await,
            ToolResult::failure(
                ToolErrorType::InvalidToolParams,
                message.clone(),
                message.clone(),
                message
            ),
            "params: {params}"
        );
    }
    assert_eq!(runner.started(), 0, "no runner was started");
    assert_eq!(manager.tasks(), Vec::<TaskSnapshot>::new());
}

#[tokio::test(start_paused = true)]
async fn spec_is_the_task_tool() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (_manager, tool) = setup(&runner, 5);
    let spec = tool.spec();
    assert_eq!(
        (spec.name.as_str(), spec.display_name.as_str()),
        ("task", "Task")
    );
    assert_eq!(spec.parameters["additionalProperties"], json!(false));
}

// ---------------------------------------------------------------- sync-detach

const DETACH: Duration = Duration::from_secs(50);

fn detached_result(name: &str, id: &str, seconds: u64) -> ToolResult {
    ToolResult::success(
        format!(
            "Subagent '{name}' is still running after {seconds} seconds; it continues in the \
             background as async task {id}. Its result will be reported when it finishes; use \
             'check_async_tasks' to follow it."
        ),
        format!("Subagent **{name}** continues in the background (`{id}`)"),
        json!({"agentId": id, "async": true, "status": "running", "detached": true}),
    )
}

#[tokio::test(start_paused = true)]
async fn sync_detach_turns_a_long_sync_call_into_a_background_task() {
    let runner = FakeRunner::new(Behaviour::Sleep(120));
    let (manager, tool) = setup(&runner, 5);
    let tool = tool.with_sync_detach(SyncDetach::after(DETACH));
    let start = Instant::now();
    let call_token = CancellationToken::new();
    let result = tool
        .execute(sync_params("researcher", json!({})), call_token.clone())
        .await;
    assert_eq!(start.elapsed(), DETACH);
    let id = agent_id(&result);
    assert_eq!(result, detached_result("researcher", &id, 50));
    insta::assert_snapshot!("detached_result", redacted(&result, &[(&id, "<task-id>")]));
    assert_eq!(
        manager.tasks(),
        vec![record(&id, "researcher", AsyncTaskStatus::Running)]
    );

    // The call is over: cancelling its token no longer reaches the subagent.
    call_token.cancel();
    settle(&tool).await;
    assert_eq!(start.elapsed(), Duration::from_secs(120));
    let done = manager.task(&id).expect("held until delivered");
    assert_eq!(done.status(), AsyncTaskStatus::Completed);
    assert_eq!(done.output(), Some(&output()));
    assert_eq!(manager.pending_notifications().len(), 1);
    assert_eq!(runner.started(), 1, "the same run went on");
}

#[tokio::test(start_paused = true)]
async fn sync_detach_leaves_short_calls_synchronous() {
    let runner = FakeRunner::new(Behaviour::Sleep(10));
    let (manager, tool) = setup(&runner, 5);
    let tool = tool.with_sync_detach(SyncDetach::after(DETACH));
    let result = call(&tool, sync_params("researcher", json!({}))).await;
    assert!(!result.is_error());
    assert!(
        result
            .llm_content
            .contains("\"terminate_reason\": \"GOAL\"")
    );
    assert!(manager.tasks().is_empty());
}

#[tokio::test(start_paused = true)]
async fn sync_detach_keeps_waiting_while_the_limit_is_reached() {
    let runner = FakeRunner::new(Behaviour::Sleep(120));
    let (manager, tool) = setup(&runner, 1);
    let tool = tool.with_sync_detach(SyncDetach::after(DETACH));
    let launched = call(&tool, async_params("researcher", json!({}))).await;
    let start = Instant::now();
    let result = call(&tool, sync_params("tester", json!({}))).await;
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(120),
        "waited to the end"
    );
    assert!(
        result
            .llm_content
            .contains("\"terminate_reason\": \"GOAL\"")
    );
    assert_eq!(manager.tasks().len(), 1);
    assert_eq!(manager.tasks()[0].id(), agent_id(&launched));
}

#[tokio::test(start_paused = true)]
async fn a_detached_run_keeps_its_timeout_from_the_original_start() {
    let runner = FakeRunner::new(Behaviour::Sleep(120));
    let (manager, tool) = setup(&runner, 5);
    let tool = tool.with_sync_detach(SyncDetach::after(DETACH));
    let start = Instant::now();
    let result = call(
        &tool,
        sync_params("researcher", json!({"timeout_seconds": 60})),
    )
    .await;
    let id = agent_id(&result);
    settle(&tool).await;
    assert_eq!(start.elapsed(), Duration::from_secs(60), "not 50 + 60");
    let failed = manager.task(&id).expect("held until delivered");
    assert_eq!(failed.status(), AsyncTaskStatus::Failed);
    assert_eq!(
        failed.error(),
        Some(timeout_text("researcher", 60).as_str())
    );
    assert!(runner.token(0).is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_detached_task_cancels_its_runner() {
    let runner = FakeRunner::new(Behaviour::Sleep(120));
    let (manager, tool) = setup(&runner, 5);
    let tool = tool.with_sync_detach(SyncDetach::after(DETACH));
    let id = agent_id(&call(&tool, sync_params("researcher", json!({}))).await);
    assert!(manager.cancel_task(&id));
    assert!(runner.token(0).is_cancelled());
    settle(&tool).await;
    assert_eq!(
        manager.task(&id).map(|task| task.status()),
        Some(AsyncTaskStatus::Cancelled)
    );
}

#[test]
fn the_timeout_description_states_the_configured_timeouts() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let tool = TaskTool::new(
        AsyncTaskManager::default(),
        Arc::clone(&runner) as Arc<dyn SubagentRunner>,
    )
    .with_timeouts(TaskTimeouts {
        default: Duration::from_secs(60),
        max: Duration::from_secs(300),
    });
    assert_eq!(
        tool.spec().parameters["properties"]["timeout_seconds"]["description"],
        "Seconds before the subagent is stopped and the task fails: default 60, larger values \
         are capped at 300; -1 or 0 mean the maximum."
    );
    let default = TaskTool::new(
        AsyncTaskManager::default(),
        runner as Arc<dyn SubagentRunner>,
    );
    assert_eq!(
        default.spec().parameters["properties"]["timeout_seconds"]["description"],
        TaskParams::schema()["properties"]["timeout_seconds"]["description"],
        "the default configuration keeps the canonical text"
    );
}

// ---------------------------------------------------------------- catalog

#[tokio::test(start_paused = true)]
async fn unknown_subagents_are_refused_before_anything_is_registered() {
    let runner = FakeRunner::with_catalog(Behaviour::Return(output()), &["researcher", "tester"]);
    let (manager, tool) = setup(&runner, 1);
    for params in [
        async_params("resercher", json!({})),
        sync_params("resercher", json!({})),
    ] {
        let refused = call(&tool, params).await;
        insta::assert_snapshot!("unknown_subagent", redacted(&refused, &[]));
        assert_eq!(
            refused.error.map(|error| error.kind),
            Some(ToolErrorType::InvalidToolParams)
        );
    }
    assert_eq!(
        manager.tasks(),
        Vec::<TaskSnapshot>::new(),
        "nothing registered"
    );
    assert_eq!(manager.counts().reserved, 0);
    assert_eq!(runner.started(), 0, "no subagent started");
    // The only slot is still free: a known subagent launches.
    let launched = call(&tool, async_params("tester", json!({}))).await;
    assert_eq!(launched.error, None);
    settle(&tool).await;
    assert_eq!(runner.started(), 1);
}

/// A runner with a catalog of `count` subagents named `prefix` and a number.
#[derive(Debug)]
struct ManyNames {
    count: usize,
    prefix: String,
}

#[async_trait]
impl SubagentRunner for ManyNames {
    async fn run(
        &self,
        _request: SubagentRequest,
        _cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        Err(SubagentError::new("not run"))
    }

    fn catalog(&self) -> Option<Vec<SubagentInfo>> {
        Some(
            (0..self.count)
                .map(|i| SubagentInfo::new(format!("{}{i:03}", self.prefix), ""))
                .collect(),
        )
    }
}

#[test]
fn the_enum_is_bounded_in_count_and_in_length() {
    let has_enum = |count: usize, prefix: &str| {
        let runner = ManyNames {
            count,
            prefix: prefix.to_owned(),
        };
        let spec = TaskTool::new(AsyncTaskManager::default(), Arc::new(runner)).spec();
        // The description lists them either way.
        assert!(spec.description.contains(&format!("- {prefix}000")));
        spec.parameters["properties"]["subagent_name"]
            .get("enum")
            .is_some()
    };
    assert!(has_enum(MAX_ENUM_NAMES, "a"));
    assert!(!has_enum(MAX_ENUM_NAMES + 1, "a"));
    // 100 names of 153 characters: 15,300 in all, over the length bound.
    let long = "n".repeat(150);
    assert!(!has_enum(100, &long));
    // 90 of them: 13,770, within it.
    assert!(has_enum(90, &long));
    const { assert!(MAX_ENUM_CHARS == 15_000) };
}

#[tokio::test(start_paused = true)]
async fn without_a_catalog_any_name_goes_to_the_runner() {
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let (_manager, tool) = setup(&runner, 5);
    let result = call(&tool, sync_params("anything-at-all", json!({}))).await;
    assert_eq!(result.error, None);
    assert_eq!(runner.requests()[0].subagent_name, "anything-at-all");
    assert!(
        tool.spec().parameters["properties"]["subagent_name"]
            .get("enum")
            .is_none()
    );
}

// ---------------------------------------------------------------- what a runner keeps

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
