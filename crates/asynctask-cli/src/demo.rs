//! `asynctask demo`: a scripted agent session with real background subagents.
//!
//! The "model" is a script (no network, no API key); everything else is real: the
//! `task` tool launches subagents through the given runner, the auto-trigger wakes
//! the agent when one finishes while it is idle, results that arrive while it is
//! busy are delivered when its turn ends, the user cancels a task with
//! `/task end <prefix>`, and the model hears of the cancel in its next reminder.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use asynctask_manager::TaskEvent;
use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks};
use asynctask_runtime::{AgentHost, AsyncTaskRuntime, Reminder, TriggerError};
use asynctask_tools::{SubagentRunner, Tool, ToolResult, id_prefix, run_slash_command};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::CliError;

/// How the session runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoOptions {
    /// The four subagents: one that finishes while the agent is idle, one that
    /// finishes while it is busy, one that fails, and a slow one the user cancels.
    /// With the bundled config: `researcher`, `tester`, `linter`, `indexer`.
    pub subagents: [String; 4],
    /// How long the model works on the turn the first result wakes it for (the
    /// second result lands during it).
    pub first_turn: Duration,
    /// How long later turns take.
    pub later_turn: Duration,
    /// Give up waiting for the three working subagents after this long.
    pub wait_limit: Duration,
    /// Redraw a status line while waiting (only on a terminal).
    pub live_status: bool,
}

impl DemoOptions {
    /// The bundled session's options for these subagents.
    #[must_use]
    pub fn new(subagents: [String; 4]) -> Self {
        DemoOptions {
            subagents,
            first_turn: Duration::from_secs(2),
            later_turn: Duration::from_millis(500),
            wait_limit: Duration::from_secs(60),
            live_status: false,
        }
    }
}

/// The subagents the bundled config defines, in the roles [`DemoOptions`] needs.
#[must_use]
pub fn bundled_subagents() -> [String; 4] {
    ["researcher", "tester", "linter", "indexer"].map(str::to_owned)
}

/// Picks the four roles from a config's subagent names: the bundled names when
/// present, else the names in order (reusing the last when fewer than four).
///
/// # Errors
///
/// [`CliError::NoSubagents`] when the config has no subagent at all.
pub fn pick_subagents(names: &[String]) -> Result<[String; 4], CliError> {
    let bundled = bundled_subagents();
    if bundled.iter().all(|name| names.contains(name)) {
        return Ok(bundled);
    }
    let last = names.last().ok_or(CliError::NoSubagents)?;
    Ok(std::array::from_fn(|i| {
        names.get(i).unwrap_or(last).clone()
    }))
}

/// The scripted agent, as the runtime sees it: busy while a turn runs; a wake-up
/// is queued to the session loop.
struct DemoAgent {
    busy: AtomicBool,
    wakes: mpsc::UnboundedSender<Reminder>,
}

#[async_trait::async_trait]
impl AgentHost for DemoAgent {
    fn is_agent_busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst)
    }

    async fn trigger_agent_turn(&self, reminder: Reminder) -> Result<(), TriggerError> {
        self.busy.store(true, Ordering::SeqCst);
        self.wakes
            .send(reminder)
            .map_err(|_| TriggerError::new("the demo session has ended"))
    }
}

/// The transcript: timestamped lines, and a live status line on terminals.
struct Transcript<'a> {
    out: &'a mut (dyn Write + Send),
    start: Instant,
    live: bool,
    status_shown: bool,
}

impl Transcript<'_> {
    fn line(&mut self, who: &str, text: &str) -> Result<(), CliError> {
        self.clear_status()?;
        let elapsed = self.start.elapsed().as_secs_f64();
        let mut lines = text.lines();
        let first = lines.next().unwrap_or("");
        let mut rendered = format!("[{elapsed:>5.1}s] {who:<9} {first}\n");
        for line in lines {
            rendered.push_str(&format!("{:19}{line}\n", ""));
        }
        self.write(&rendered)
    }

    fn status(&mut self, text: &str) -> Result<(), CliError> {
        if !self.live {
            return Ok(());
        }
        let elapsed = self.start.elapsed().as_secs_f64();
        self.status_shown = true;
        self.write(&format!("\r\x1b[2K[{elapsed:>5.1}s] … {text}"))
    }

    fn clear_status(&mut self) -> Result<(), CliError> {
        if self.status_shown {
            self.status_shown = false;
            self.write("\r\x1b[2K")?;
        }
        Ok(())
    }

    fn write(&mut self, text: &str) -> Result<(), CliError> {
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(CliError::Transcript)
    }
}

async fn call(tools: &[Arc<dyn Tool>], name: &str, params: Value) -> ToolResult {
    match tools.iter().find(|tool| tool.name() == name) {
        Some(tool) => tool.execute(params, CancellationToken::new()).await,
        None => ToolResult::failure(
            asynctask_tools::ToolErrorType::ExecutionFailed,
            format!("no tool named {name}"),
            format!("no tool named {name}"),
            format!("no tool named {name}"),
        ),
    }
}

/// Runs the session with `runner`, writing the transcript to `out`.
///
/// # Errors
///
/// [`CliError`] when the transcript cannot be written.
pub async fn run_demo(
    runner: Arc<dyn SubagentRunner>,
    options: DemoOptions,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let (wake_sender, mut wakes) = mpsc::unbounded_channel();
    let agent = Arc::new(DemoAgent {
        busy: AtomicBool::new(true),
        wakes: wake_sender,
    });
    let runtime = AsyncTaskRuntime::builder()
        .max_async_tasks(MaxAsyncTasks::default())
        .host(Arc::clone(&agent) as Arc<dyn AgentHost>)
        .runner(runner)
        .build();
    // Each event carries whether the agent was busy at that moment.
    let (event_sender, mut events) = mpsc::unbounded_channel::<(TaskEvent, bool)>();
    let observed = Arc::clone(&agent);
    let _events = runtime.manager().subscribe(move |event| {
        let _ = event_sender.send((event.clone(), observed.is_agent_busy()));
    });
    let tools = runtime.tools();
    let mut t = Transcript {
        out,
        start: Instant::now(),
        live: options.live_status,
        status_shown: false,
    };
    let [idle_one, busy_one, failing_one, slow_one] = options.subagents.clone();

    // Turn 1: the model launches the background work and keeps going.
    t.line(
        "user",
        "The retry logic in src/io is flaky. Investigate, test and lint it.",
    )?;
    t.line(
        "model",
        "I'll start background subagents and keep working meanwhile.",
    )?;
    let goals = [
        (&idle_one, "Find every caller of retry() in src/io"),
        (&busy_one, "Run the test suite"),
        (&failing_one, "Lint src/io"),
        (&slow_one, "Rebuild the code search index"),
    ];
    let mut ids = Vec::new();
    for (subagent, goal) in goals {
        let params = json!({ "subagent_name": subagent, "goal_prompt": goal, "async": true });
        t.line("model", &format!("calls task({params})"))?;
        let result = call(&tools, "task", params).await;
        t.line("tool", &result.llm_content)?;
        ids.push(
            result.metadata["agentId"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    t.line("model", "calls check_async_tasks({})")?;
    t.line(
        "tool",
        &call(&tools, "check_async_tasks", json!({}))
            .await
            .llm_content,
    )?;
    t.line("model", "While they run, I'll read src/io/retry.rs myself.")?;
    end_turn(&agent, &runtime, &mut t)?;

    // Wait for the three working subagents, running a turn whenever the agent is woken.
    let working = &ids[..3];
    let deadline = Instant::now() + options.wait_limit;
    let mut turns = 0u32;
    // The ids the agent has been woken with (a task is marked delivered as soon as
    // the host accepts the wake-up, before this loop has shown that turn).
    let mut heard: Vec<String> = Vec::new();
    while !working.iter().all(|id| heard.contains(id)) {
        tokio::select! {
            // Events first: a task's end is shown before the wake-up it causes.
            biased;
            Some((event, busy)) = events.recv() => print_event(&event, busy, &mut t)?,
            Some(reminder) = wakes.recv() => {
                turns += 1;
                t.line("system", "the auto-trigger wakes the agent with:")?;
                t.line("", &reminder.text)?;
                if let Some(failed) = failed_id(&runtime, &reminder.task_ids) {
                    let params = json!({ "task_id": id_prefix(&failed) });
                    t.line("model", &format!("A subagent failed. calls check_async_tasks({params})"))?;
                    t.line("tool", &call(&tools, "check_async_tasks", params).await.return_display)?;
                } else {
                    t.line("model", "Got it. Working on that result now.")?;
                }
                heard.extend(reminder.task_ids);
                let turn = if turns == 1 { options.first_turn } else { options.later_turn };
                work(turn, &runtime, &mut events, &mut t).await?;
                end_turn(&agent, &runtime, &mut t)?;
            }
            () = tokio::time::sleep(Duration::from_millis(250)) => {
                if Instant::now() >= deadline {
                    t.line("demo", &format!("stopped waiting after {}s", options.wait_limit.as_secs()))?;
                    break;
                }
                t.status(&running_status(&runtime))?;
            }
        }
    }

    // The user cancels the slow one by prefix.
    let prefix = id_prefix(&ids[3]).to_owned();
    t.line("user", &format!("/task end {prefix}"))?;
    match run_slash_command(runtime.manager(), &format!("/task end {prefix}")) {
        Some(answer) => t.line("asynctask", &answer.text)?,
        None => t.line("asynctask", "(not a command)")?,
    }
    // Let the cancel's event and the runner's shutdown land; nobody is woken.
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Ok((event, busy)) = events.try_recv() {
        print_event(&event, busy, &mut t)?;
    }
    if let Ok(reminder) = wakes.try_recv() {
        t.line("system", &format!("unexpected wake-up:\n{}", reminder.text))?;
    }

    // The user's next message: the host puts the pending reminder in the request.
    t.line("user", "Where are we?")?;
    agent.busy.store(true, Ordering::SeqCst);
    if let Some(reminder) = runtime.next_turn_reminder() {
        t.line("system", "next-turn reminder sent with the request:")?;
        t.line("", &reminder.text)?;
        runtime.ack_delivered(&reminder.task_ids);
    }
    t.line("model", "Callers found, tests pass, lint fails in retry.rs; I cancelled nothing myself — you stopped the indexer.")?;
    end_turn(&agent, &runtime, &mut t)?;
    t.line("user", "/tasks list")?;
    if let Some(list) = run_slash_command(runtime.manager(), "/tasks list") {
        t.line("asynctask", &list.text)?;
    }
    runtime.shutdown().await;
    t.clear_status()?;
    Ok(())
}

fn end_turn(
    agent: &DemoAgent,
    runtime: &AsyncTaskRuntime,
    t: &mut Transcript<'_>,
) -> Result<(), CliError> {
    agent.busy.store(false, Ordering::SeqCst);
    t.line("agent", "(turn ends; the agent is idle)")?;
    runtime.agent_idle();
    Ok(())
}

fn failed_id(runtime: &AsyncTaskRuntime, ids: &[String]) -> Option<String> {
    ids.iter()
        .find(|id| {
            runtime
                .manager()
                .task(id)
                .is_some_and(|task| task.status() == AsyncTaskStatus::Failed)
        })
        .cloned()
}

fn running_status(runtime: &AsyncTaskRuntime) -> String {
    let running: Vec<String> = runtime
        .manager()
        .running_tasks()
        .into_iter()
        .map(|task| task.subagent_name().to_owned())
        .collect();
    format!("running: {}", running.join(", "))
}

/// The model works for `duration`; task events meanwhile are shown as they come.
async fn work(
    duration: Duration,
    runtime: &AsyncTaskRuntime,
    events: &mut mpsc::UnboundedReceiver<(TaskEvent, bool)>,
    t: &mut Transcript<'_>,
) -> Result<(), CliError> {
    let until = Instant::now() + duration;
    loop {
        t.status(&format!(
            "the model is working · {}",
            running_status(runtime)
        ))?;
        let tick = Instant::now() + Duration::from_millis(250);
        tokio::select! {
            Some((event, busy)) = events.recv() => print_event(&event, busy, t)?,
            () = tokio::time::sleep_until(tick.min(until)) => {
                if Instant::now() >= until {
                    return Ok(());
                }
            }
        }
    }
}

/// One line for a task that ended: what happens to its result, given whether the
/// agent was `busy` when it ended.
fn print_event(event: &TaskEvent, busy: bool, t: &mut Transcript<'_>) -> Result<(), CliError> {
    let task = event.task();
    let note = match event.status() {
        AsyncTaskStatus::Cancelled => "a cancel alone wakes nobody",
        _ if busy => "the agent is busy: delivered when its turn ends",
        _ => "the agent is idle: the auto-trigger wakes it",
    };
    t.line(
        "asynctask",
        &format!(
            "task {} ({}) {} — {note}",
            id_prefix(task.id()),
            task.subagent_name(),
            task.status()
        ),
    )
}
