//! `task`, with fake subagent runners: what its tests share (the runner, a tool
//! over a manager, the calls), and one module per concern.
//!
//! Everything involving time runs under paused tokio time, so the timeouts (900 s
//! by default) and the 5 s grace period pass instantly and exactly.

mod background;
mod cancellation;
mod caps;
mod catalog;
mod detach;
mod kept;
mod params;
mod queue;
mod sync;
mod timeouts;

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
