//! The MCP server: a hand-written rmcp `ServerHandler` over our tools.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use asynctask_manager::{AsyncTaskManager, TaskProgress, TaskSnapshot};
use asynctask_runtime::{AsyncTaskRuntime, Reminder};
use asynctask_tools::{
    AnswerAsyncTaskTool, CallContext, LaunchBudget, Nesting, TASK_DESCRIPTION_LEAD, TaskTool,
    TodoPauseTool, Tool, ToolResult, id_prefix, new_task_id, truncate_chars, with_call_context,
};
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    ContentBlock, CreateTaskResult, DiscoverResult, GetTaskParams, GetTaskResult, Implementation,
    InitializeRequestParams, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, ServerCapabilities, ServerConfig,
    TASKS_EXTENSION_ID, TaskStatus, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::end::EndAsyncTaskTool;
use crate::gate::{REQUEST, ReminderGate};
pub(crate) use crate::options::{McpError, McpServerOptions};
use crate::session::Session;
use crate::tasks::{
    Poll, TASK_POLL_INTERVAL, TASK_TTL, TASKS_ANSWER_DESCRIPTION, TASKS_INSTRUCTIONS,
    TASKS_TASK_DESCRIPTION_LEAD, answer_questions, declares_tasks, progress, unknown_task,
};
use crate::transport::{AckMode, ServerTransport};
use crate::wait::{REMINDER_KEY, WaitAsyncTasksTool};

/// The server's `instructions`: how results reach the model, in two sentences.
pub const INSTRUCTIONS: &str = "Results of background tasks (a task launched with async: true, \
    or a synchronous task that ran long) arrive in the results of this server's tools, as a \
    System Note after the tool's own output. When you have nothing else to do, call \
    wait_async_tasks instead of polling.";

/// How long a `tools/list` result stays fresh (its `ttlMs` on the 2026-07-28
/// protocol): an hour. A server's tools do not change while it serves a
/// session (a durable supervisor reads a changed config for new sessions).
///
/// ```
/// assert_eq!(asynctask_mcp::TOOLS_TTL.as_secs(), 3_600);
/// ```
pub const TOOLS_TTL: Duration = Duration::from_secs(60 * 60);

/// The shortest progress interval: a shorter one (zero included) is raised to it.
pub const MIN_PROGRESS_INTERVAL: Duration = Duration::from_millis(10);

/// How a detached synchronous `task` call tells the model to follow its task:
/// this server adds `wait_async_tasks` to the tools.
pub const DETACH_FOLLOW_UP: &str = "use 'wait_async_tasks' or 'check_async_tasks' to follow it.";

/// The MCP server: serves `task`, `check_async_tasks`, `message_async_task`,
/// `wait_async_tasks` and `end_async_task` from one [`AsyncTaskRuntime`]
/// (`task` and `message_async_task` when the runtime has a runner).
///
/// Every tool call runs the tool with the request's cancellation token,
/// reports progress while it runs when the request asked for it, and then —
/// unless it was cancelled — appends the pending reminder as the last text
/// block, marked delivered once the response carrying it was written. Results
/// never carry `structuredContent`; `isError` follows the tool's result.
///
/// Served over an rmcp transport of your own (`server.serve(transport)`), the
/// server cannot see a response written or a request cancelled: each call
/// marks what it carries delivered as it hands its response to rmcp.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use asynctask_mcp::AsyncTaskMcpServer;
/// use asynctask_runtime::AsyncTaskRuntime;
/// use tokio_util::sync::CancellationToken;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let runtime = Arc::new(AsyncTaskRuntime::builder().build()); // no runner: no `task`
/// let server = AsyncTaskMcpServer::new(Arc::clone(&runtime))?;
/// let names: Vec<_> = server.tools().iter().map(|tool| tool.name()).collect();
/// assert_eq!(names, ["check_async_tasks", "wait_async_tasks", "end_async_task"]);
///
/// let result = server
///     .call("check_async_tasks", serde_json::json!({}), CancellationToken::new())
///     .await
///     .expect("a tool of this server");
/// assert_eq!(result.is_error, Some(false));
/// assert!(result.structured_content.is_none());
/// runtime.shutdown().await;
/// # Ok::<(), asynctask_mcp::McpError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct AsyncTaskMcpServer {
    pub(crate) runtime: Arc<AsyncTaskRuntime>,
    tools: Vec<Arc<dyn Tool>>,
    definitions: Vec<rmcp::model::Tool>,
    pub(crate) gate: ReminderGate,
    /// The session this server serves, when several share the runtime.
    session: Option<Arc<Session>>,
    /// The launches of the one session a server of its own serves.
    launches: Option<LaunchBudget>,
    /// Where the client of a server of its own stands among nested subagents.
    nesting: Option<Nesting>,
    progress_interval: Duration,
    /// The project the subagents work in, for the tools to show.
    project: Option<Arc<std::path::Path>>,
    /// What the runner says of the subagents it does not offer, added to
    /// the instructions (read when the server is made: a durable
    /// supervisor makes one for each session).
    catalog_note: Option<String>,
    /// The parent of every call's cancellation token: cancelled when the client
    /// goes away (end of input) or a termination signal arrives.
    pub(crate) calls: CancellationToken,
}

impl AsyncTaskMcpServer {
    /// A server over `runtime`'s tools (without `todo_pause`: no continuation
    /// loop runs on this side) plus `wait_async_tasks` and `end_async_task`.
    ///
    /// # Errors
    ///
    /// [`McpError::ToolDefinition`] if a tool's [`ToolSpec::to_mcp`](asynctask_tools::ToolSpec::to_mcp)
    /// is not a valid MCP tool, [`McpError::ToolName`] if a tool's
    /// [`name`](Tool::name) is not the one its spec lists (never, for these
    /// tools).
    pub fn new(runtime: Arc<AsyncTaskRuntime>) -> Result<Self, McpError> {
        let gate = ReminderGate::new(runtime.claims().clone());
        Self::with_gate(runtime, gate, None)
    }

    /// A server for one of several sessions sharing `runtime` (a durable
    /// supervisor's): the tasks it launches record the session as their
    /// origin, and its calls claim only the results the session may take
    /// (see [`Session::may_claim`]). Serve it with
    /// [`serve_relayed`](Self::serve_relayed).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn for_session(
        runtime: Arc<AsyncTaskRuntime>,
        session: Arc<Session>,
    ) -> Result<Self, McpError> {
        let gate = ReminderGate::for_session(runtime.claims().clone(), Arc::clone(&session));
        Self::with_gate(runtime, gate, Some(session))
    }

    fn with_gate(
        runtime: Arc<AsyncTaskRuntime>,
        gate: ReminderGate,
        session: Option<Arc<Session>>,
    ) -> Result<Self, McpError> {
        let manager = runtime.manager().clone();
        let mut tools: Vec<Arc<dyn Tool>> = runtime
            .tools()
            .into_iter()
            .filter(|tool| tool.name() != TodoPauseTool::NAME)
            .collect();
        tools.push(Arc::new(WaitAsyncTasksTool::new(
            manager.clone(),
            gate.clone(),
        )));
        tools.push(Arc::new(EndAsyncTaskTool::new(manager)));
        let definitions = definitions(&tools)?;
        let catalog_note = runtime.catalog_note().map(|note| note.text);
        Ok(AsyncTaskMcpServer {
            runtime,
            tools,
            definitions,
            gate,
            session,
            launches: None,
            nesting: None,
            progress_interval: McpServerOptions::default().progress_interval,
            project: None,
            catalog_note,
            calls: CancellationToken::new(),
        })
    }

    /// Reports progress every `interval` during a long call (default 5 s). An
    /// interval under [`MIN_PROGRESS_INTERVAL`] (zero included) is raised to it.
    #[must_use]
    pub fn with_progress_interval(mut self, interval: Duration) -> Self {
        self.progress_interval = interval.max(MIN_PROGRESS_INTERVAL);
        self
    }

    /// Caps the subagents the client may launch in all (see
    /// [`LaunchBudget`]); a [session's](Self::for_session) own budget comes
    /// with it.
    #[must_use]
    pub fn with_launch_budget(mut self, budget: LaunchBudget) -> Self {
        self.launches = Some(budget);
        self
    }

    /// Says where the client stands among nested subagents, and the cap (see
    /// [`Nesting`]); a [session](Self::for_session) brings its own.
    #[must_use]
    pub fn with_nesting(mut self, nesting: Nesting) -> Self {
        self.nesting = Some(nesting);
        self
    }

    /// Names the project the subagents work in: `check_async_tasks` shows it
    /// in a task's details.
    #[must_use]
    pub fn with_project(mut self, project: impl Into<std::path::PathBuf>) -> Self {
        self.project = Some(Arc::from(project.into()));
        self
    }

    /// The tools served, in `tools/list` order.
    #[must_use]
    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    /// The runtime the tools work on.
    #[must_use]
    pub fn runtime(&self) -> &Arc<AsyncTaskRuntime> {
        &self.runtime
    }

    /// Runs tool `name` as a `tools/call` would, without progress: the tool's
    /// result, then the pending reminder unless `cancel` was cancelled. `None` for
    /// a tool this server does not serve.
    ///
    /// No transport stands behind this call, so the reminder it returns is marked
    /// delivered at once: the caller owns the delivery.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the call like a cancel; nothing is marked
    /// delivered unless the future completed.
    pub async fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Option<CallToolResult> {
        let tool = self.tool(name)?;
        let result = tool.execute(arguments, cancel.clone()).await;
        let reminder = if is_reminder(&result) {
            None
        } else {
            self.gate.answer_current(&cancel)
        };
        Some(with_reminder(result, reminder))
    }

    fn tool(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|tool| tool.name() == name)
    }

    /// This server's transport on `reader` and `writer` (see
    /// [`ServerTransport`]).
    pub(crate) fn transport<R, W>(
        &self,
        reader: R,
        writer: W,
        mode: AckMode,
    ) -> ServerTransport<R, W>
    where
        R: tokio::io::AsyncRead + Unpin,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        ServerTransport::new(reader, writer, self.gate.clone(), self.calls.clone(), mode)
    }

    /// Serves one connection whose other end is a relay to the client (a
    /// durable front), until either side closes it.
    ///
    /// The relay confirms every line it wrote to its client with a
    /// [`DELIVERED_NOTIFICATION`](crate::DELIVERED_NOTIFICATION) counting
    /// them; a result a response carried is marked delivered only once a
    /// confirmation covers that response. When the connection ends, what was
    /// not confirmed is released for the next session, and the calls still
    /// running end (their background tasks do not).
    ///
    /// # Errors
    ///
    /// [`McpError::Session`] when the client never initialized the session.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future ends the session like a closed connection.
    pub async fn serve_relayed<R, W>(self, reader: R, writer: W) -> Result<(), McpError>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let calls = self.calls.clone();
        // Whatever way this ends, the calls end with it.
        let _end_calls = calls.clone().drop_guard();
        let transport = self.transport(reader, writer, AckMode::Confirmed);
        let (manager, gate) = (self.runtime.manager().clone(), self.gate.clone());
        let service = self
            .serve(transport)
            .await
            .map_err(|err| McpError::Session(Box::new(err)))?;
        // Questions go to the user as forms when the client takes them.
        let _asking = crate::elicit::start(&manager, &gate, service.peer().clone());
        // A session that ends abnormally (its task panicked) ends the same way.
        let _ = service.waiting().await;
        Ok(())
    }
}

/// The `tools/list` entry of each tool, checking that each is a valid MCP tool
/// listed under the name the tool answers to.
fn definitions(tools: &[Arc<dyn Tool>]) -> Result<Vec<rmcp::model::Tool>, McpError> {
    tools
        .iter()
        .map(|tool| {
            let spec = tool.spec();
            if spec.name != tool.name() {
                return Err(McpError::ToolName {
                    name: tool.name().to_owned(),
                    listed: spec.name,
                });
            }
            serde_json::from_value(spec.to_mcp()).map_err(|source| McpError::ToolDefinition {
                tool: spec.name.clone(),
                source,
            })
        })
        .collect()
}

/// The MCP result: the tool's text, then the reminder as the last block.
fn with_reminder(result: ToolResult, reminder: Option<Reminder>) -> CallToolResult {
    let mut content = vec![ContentBlock::text(result.llm_content)];
    if let Some(reminder) = reminder {
        content.push(ContentBlock::text(reminder.text));
    }
    if result.error.is_some() {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    }
}

/// Whether a result is itself a reminder (its metadata says so, under
/// [`REMINDER_KEY`]): nothing is appended after it.
fn is_reminder(result: &ToolResult) -> bool {
    result.metadata.get(REMINDER_KEY) == Some(&Value::Bool(true))
}

/// How many characters of an output line a progress message carries.
const PROGRESS_LINE_CHARS: usize = 200;

/// Which running tasks a long call's progress may quote.
#[derive(Debug, Default)]
struct ProgressScope {
    /// The id prefixes the call names (`wait_async_tasks`'s
    /// `task_id_prefixes`): their tasks come first.
    targets: Vec<String>,
    /// The session the call belongs to, when several share the runtime: only
    /// the tasks it owns are quoted, never another session's output.
    session: Option<Arc<Session>>,
}

impl ProgressScope {
    /// The scope of a call of `tool` with `arguments`.
    fn of(tool: &str, arguments: &Value, session: Option<&Arc<Session>>) -> Self {
        let targets = if tool == WaitAsyncTasksTool::NAME {
            arguments
                .get("task_id_prefixes")
                .and_then(Value::as_array)
                .map(|prefixes| {
                    prefixes
                        .iter()
                        .filter_map(Value::as_str)
                        .filter(|prefix| !prefix.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        ProgressScope {
            targets,
            session: session.cloned(),
        }
    }

    fn targets(&self, id: &str) -> bool {
        self.targets
            .iter()
            .any(|prefix| id.starts_with(prefix.as_str()))
    }

    /// Whether the call may quote the output of `task`: one its session
    /// owns (any task, with no sessions).
    fn may_quote(&self, task: &TaskSnapshot) -> bool {
        self.session
            .as_ref()
            .is_none_or(|session| session.owns(task))
    }
}

/// What a progress notification says about a long call: the latest line its
/// synchronous subagent printed; else, for a call that waits on background
/// tasks, the latest line of a running task (with its id prefix) — one the
/// call names first, then any of its session's; else how long it has been
/// running.
fn progress_message(
    call: &TaskProgress,
    manager: &AsyncTaskManager,
    scope: &ProgressScope,
    elapsed: Duration,
) -> String {
    if let Some(line) = call
        .snapshot()
        .last_line()
        .filter(|line| !line.trim().is_empty())
    {
        return truncate_chars(line.trim_end(), PROGRESS_LINE_CHARS).into_owned();
    }
    let mut running = manager.running_tasks();
    running.retain(|task| scope.may_quote(task));
    // The tasks the call names first; the order is otherwise kept.
    running.sort_by_key(|task| !scope.targets(task.id()));
    let line = running.into_iter().find_map(|task| {
        let snapshot = manager.progress(task.id())?.snapshot();
        let line = snapshot.last_line()?.trim_end().to_owned();
        (!line.is_empty()).then(|| format!("{}: {}", id_prefix(task.id()), line))
    });
    match line {
        Some(line) => truncate_chars(&line, PROGRESS_LINE_CHARS).into_owned(),
        None => format!("still running ({}s)", elapsed.as_secs()),
    }
}

/// Drives `work` to its end, sending `notifications/progress` (elapsed seconds,
/// and a message from [`progress_message`]) every `interval` meanwhile.
async fn with_progress<F: Future>(
    work: F,
    peer: &Peer<RoleServer>,
    token: ProgressToken,
    interval: Duration,
    message: impl Fn(Duration) -> String,
) -> F::Output {
    let start = Instant::now();
    let mut ticks = tokio::time::interval_at(start + interval, interval);
    let mut work = std::pin::pin!(work);
    loop {
        tokio::select! {
            biased;
            output = &mut work => return output,
            _ = ticks.tick() => {
                // Fractional seconds: progress must increase, also when the
                // interval is under a second.
                let elapsed = start.elapsed();
                let progress = ProgressNotificationParam::new(token.clone(), elapsed.as_secs_f64())
                    .with_message(message(elapsed));
                if let Err(err) = peer.notify_progress(progress).await {
                    tracing::debug!(error = %err, "cannot send progress");
                }
            }
        }
    }
}

impl ServerHandler for AsyncTaskMcpServer {
    /// Tools, and the tasks extension: rmcp routes `tasks/*` to a server
    /// that declares it. The extension is advertised on the 2026-07-28
    /// handshake only ([`discover`](Self::discover)); `initialize` leaves it
    /// out.
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tasks()
            .build();
        let mut info =
            ServerConfig::new(capabilities).with_instructions(self.instructions(INSTRUCTIONS));
        info.server_info = Implementation::new("asynctask", env!("CARGO_PKG_VERSION"));
        info
    }

    /// The 2026-07-28 handshake: the server's capabilities (the tasks
    /// extension among them) and the instructions that fit the client — a
    /// client that declares the extension is not told results arrive as
    /// System Notes.
    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        let mut info = self.get_info();
        self.note_client(&context.meta);
        if declares_tasks(&context.meta) {
            info = info.with_instructions(self.instructions(TASKS_INSTRUCTIONS));
        }
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    /// Answers as rmcp's default does, but records the version agreed on as
    /// the session's, not the one asked for: a session initialized again
    /// asking for a version this server does not speak (2026-07-28) would
    /// otherwise act on it, and refuse `ping`.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let mut result = self.negotiate_initialize(&request)?;
        // MCP Tasks come with the 2026-07-28 protocol, which `initialize`
        // does not speak.
        if let Some(extensions) = &mut result.capabilities.extensions {
            extensions.remove(TASKS_EXTENSION_ID);
            if extensions.is_empty() {
                result.capabilities.extensions = None;
            }
        }
        let mut agreed = request;
        agreed.protocol_version = result.protocol_version.clone();
        context.peer.set_peer_info(agreed);
        Ok(result)
    }

    /// The tools. To a request that declares the tasks extension, the
    /// `task` tool's description says the client runs each call in the
    /// background, `answer_async_task`'s that the client asks the user its
    /// tasks' questions (no System Note shows them), and `wait_async_tasks`
    /// is left out: the client brings
    /// each result itself, and a wait would only hold the model's turn. On
    /// the 2026-07-28 protocol the list says how long it stays fresh
    /// ([`TOOLS_TTL`]) and that it is the user's own (it names their
    /// subagents).
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.note_client(&context.meta);
        let mut result =
            ListToolsResult::with_all_items(self.list_for(declares_tasks(&context.meta)));
        let modern = context
            .protocol_version()
            .is_some_and(|version| version.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        if modern {
            result.ttl_ms = Some(u64::try_from(TOOLS_TTL.as_millis()).unwrap_or(u64::MAX));
            result.cache_scope = Some(CacheScope::Private);
        }
        Ok(result)
    }

    /// Runs the tool. A `task` call whose request declares the tasks
    /// extension is launched in the background (`async: true` or not: the
    /// client backgrounds it) and answered with an MCP Task whose id is the
    /// asynctask task's; a refused launch is answered as a plain call.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // Forgets the followed tasks past their TTL (a poll of one is refused).
        self.prune_tasks();
        self.note_client(&context.meta);
        let Some(tool) = self.tool(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool '{}'", request.name),
                None,
            ));
        };
        let as_task = request.name == TaskTool::NAME && declares_tasks(&context.meta);
        let mut arguments = request.arguments.map_or(Value::Null, Value::Object);
        if as_task && let Value::Object(object) = &mut arguments {
            object.insert("async".to_owned(), Value::Bool(true));
        }
        // Followed before the launch: a subagent that ends at once never
        // leaves its result for a System Note of a concurrent call.
        let manager = self.runtime.manager();
        let task = as_task.then(|| {
            let (id, now) = (new_task_id(manager), manager.clock().now_ms());
            self.gate.handles().hold(&id, now);
            (id, now)
        });
        // `cancel` fires when rmcp cancels `ct` (on `notifications/cancelled` for
        // this request) or when the client goes away (`calls`, cancelled by the
        // transport at end of input: rmcp itself would wait 5 s first).
        let cancel = self.calls.child_token();
        let task_id = task.as_ref().map(|(id, _)| id.clone());
        let result = self
            .run_tool(tool, &request.name, arguments, &context, &cancel, task_id)
            .await;
        if let Some((id, now)) = task {
            let launched = result.error.is_none()
                && result.metadata.get("agentId").and_then(Value::as_str) == Some(id.as_str());
            if launched {
                return Ok(CallToolResponse::Task(self.create_task(&id, now)));
            }
            self.gate.handles().unfollow(&id);
        }
        // Claimed for this request; acknowledged by the transport once written.
        let reminder = if is_reminder(&result) {
            None
        } else {
            self.gate.answer(&context.id, &cancel)
        };
        Ok(with_reminder(result, reminder).into())
    }

    /// `tasks/get`: the task's state; once it ended, the whole result the
    /// synchronous call would have returned. The first poll that finds the
    /// result claims it through the ledger (acknowledged once its response
    /// is written), so it never rides in a System Note as well.
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.prune_tasks();
        self.note_client(&context.meta);
        if !self.follows(&request.task_id) {
            return Err(unknown_task(&request.task_id));
        }
        let claim = |task_id: &str| self.gate.answer_task(&context.id, task_id);
        let poll = Poll {
            manager: self.runtime.manager(),
            handles: self.gate.handles(),
            claim: &claim,
        };
        poll.detailed(&request.task_id)
            .map(GetTaskResult::new)
            .ok_or_else(|| unknown_task(&request.task_id))
    }

    /// `tasks/update`: answers the questions of the task (`input_required`
    /// in `tasks/get`) its `inputResponses` name, each exactly once, and
    /// acknowledges; responses to questions not waiting (any more) change
    /// nothing, as the extension says.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.prune_tasks();
        if !self.follows(&request.task_id) {
            return Err(unknown_task(&request.task_id));
        }
        answer_questions(
            self.runtime.manager(),
            &request.task_id,
            &request.input_responses,
        );
        Ok(())
    }

    /// `tasks/cancel`: cancels the subagent (its process group and all), and
    /// acknowledges; again, or once the task ended, it changes nothing and
    /// acknowledges all the same. The cancellation it made is delivered by
    /// its own response: the client that asked for it knows.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.prune_tasks();
        let id = &request.task_id;
        if !self.follows(id) {
            return Err(unknown_task(id));
        }
        if self.runtime.manager().cancel_task(id) {
            let claim = |task_id: &str| self.gate.answer_task(&context.id, task_id);
            let poll = Poll {
                manager: self.runtime.manager(),
                handles: self.gate.handles(),
                claim: &claim,
            };
            // Takes the cancellation for this response, and keeps what later
            // polls answer.
            let _ = poll.detailed(id);
        }
        Ok(())
    }
}

impl AsyncTaskMcpServer {
    /// Runs `tool` for one `tools/call`, with progress when the request asked
    /// for it, and its call context (session, budgets, project).
    async fn run_tool(
        &self,
        tool: &Arc<dyn Tool>,
        name: &str,
        arguments: Value,
        context: &RequestContext<RoleServer>,
        cancel: &CancellationToken,
        task_id: Option<String>,
    ) -> ToolResult {
        let scope = ProgressScope::of(name, &arguments, self.session.as_ref());
        let call_progress = TaskProgress::new();
        let mut call = CallContext::new().with_progress(call_progress.clone());
        if let Some(id) = task_id {
            call = call.with_task_id(id);
        }
        if let Some(session) = &self.session {
            // Its tools see and act on the tasks the session owns only.
            call = call
                .with_origin(session.id())
                .with_scope(Arc::clone(session) as Arc<dyn asynctask_tools::TaskScope>);
        }
        let launches = self
            .session
            .as_ref()
            .and_then(|s| s.launches())
            .or(self.launches.as_ref());
        if let Some(budget) = launches {
            call = call.with_launches(budget.clone());
        }
        if let Some(nesting) = self
            .session
            .as_ref()
            .and_then(|s| s.nesting())
            .or(self.nesting)
        {
            call = call.with_nesting(nesting);
        }
        if let Some(project) = &self.project {
            call = call.with_project(project.to_path_buf());
        }
        let work = REQUEST.scope(
            context.id.clone(),
            with_call_context(call, tool.execute(arguments, cancel.clone())),
        );
        let work = async {
            let mut work = std::pin::pin!(work);
            tokio::select! {
                biased;
                result = &mut work => result,
                () = context.ct.cancelled() => {
                    cancel.cancel();
                    work.await
                }
            }
        };
        match context.meta.get_progress_token() {
            Some(token) => {
                let manager = self.runtime.manager();
                let message = |elapsed| progress_message(&call_progress, manager, &scope, elapsed);
                with_progress(work, &context.peer, token, self.progress_interval, message).await
            }
            None => work.await,
        }
    }

    /// Journals task `id`, followed as an MCP Task since `now` (its launch),
    /// and the answer that says so: working, with its place in the queue or
    /// how long it has run.
    fn create_task(&self, id: &str, now: u64) -> CreateTaskResult {
        let manager = self.runtime.manager();
        self.gate.handles().journal(id, now);
        let created = asynctask_tools::iso_time(now);
        let mut task = rmcp::model::Task::new(id, TaskStatus::Working, created.clone(), created)
            .with_ttl_ms(u64::try_from(TASK_TTL.as_millis()).unwrap_or(u64::MAX))
            .with_poll_interval_ms(
                u64::try_from(TASK_POLL_INTERVAL.as_millis()).unwrap_or(u64::MAX),
            );
        if let Some(snapshot) = manager.task(id).filter(|task| !task.status().is_terminal()) {
            task = task.with_status_message(progress(manager, &snapshot, now));
        }
        CreateTaskResult::new(task)
    }

    /// Whether this server's client follows task `id` (as a session of a
    /// durable supervisor: a task the registry holds that the session owns,
    /// within its TTL, once polled; see [`TaskHandles::adopt`](crate::tasks::TaskHandles::adopt)).
    fn follows(&self, id: &str) -> bool {
        let handles = self.gate.handles();
        match &self.session {
            None => handles.follows(id),
            Some(session) => {
                // Followed by a client of the set or not, a task this session
                // does not own is unknown to it (the set shares what its
                // clients follow: a task another session's client follows
                // must not answer here).
                let manager = self.runtime.manager();
                let owned = manager.task(id).is_some_and(|task| session.owns(&task));
                owned
                    && handles.adopt(manager, id, manager.clock().now_ms(), |task| {
                        session.owns(task)
                    })
            }
        }
    }

    /// Notes that this server's session has a client that polls the tasks
    /// it follows, when a request's `meta` declares the extension: while one
    /// is connected, a followed result waits a while for a poll (see
    /// [`TaskHandles::holds`](crate::tasks::TaskHandles::holds)).
    fn note_client(&self, meta: &rmcp::model::RequestMetaObject) {
        if let Some(session) = &self.session
            && declares_tasks(meta)
        {
            session.declare_tasks();
        }
    }

    /// Forgets the followed tasks past their TTL; the reminders may take
    /// what no poll took (long since: see [`TASK_RESULT_HOLD`](crate::TASK_RESULT_HOLD)),
    /// so their waiters look again.
    fn prune_tasks(&self) {
        let manager = self.runtime.manager();
        if self.gate.handles().prune(manager, manager.clock().now_ms()) {
            self.runtime.claims().notify_changed();
        }
    }

    /// The tool list for a request that declares the tasks extension or not.
    /// `base`, then the runner's note on the subagents it does not offer.
    fn instructions(&self, base: &str) -> String {
        match &self.catalog_note {
            Some(note) => format!("{base}\n\n{note}"),
            None => base.to_owned(),
        }
    }

    fn list_for(&self, tasks: bool) -> Vec<rmcp::model::Tool> {
        if !tasks {
            return self.definitions.clone();
        }
        self.definitions
            .iter()
            .filter(|tool| tool.name != WaitAsyncTasksTool::NAME)
            .map(|tool| {
                let mut tool = tool.clone();
                if tool.name == TaskTool::NAME
                    && let Some(description) = &tool.description
                {
                    let description =
                        description.replacen(TASK_DESCRIPTION_LEAD, TASKS_TASK_DESCRIPTION_LEAD, 1);
                    tool.description = Some(description.into());
                }
                if tool.name == AnswerAsyncTaskTool::NAME {
                    tool.description = Some(TASKS_ANSWER_DESCRIPTION.into());
                }
                tool
            })
            .collect()
    }
}

impl fmt::Debug for AsyncTaskMcpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncTaskMcpServer")
            .field("runtime", &self.runtime)
            .field(
                "tools",
                &self.tools.iter().map(|t| t.name()).collect::<Vec<_>>(),
            )
            .field("progress_interval", &self.progress_interval)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_manager::RegisterTaskInput;
    use pretty_assertions::assert_eq;

    /// A tool whose spec lists another name than the one it answers to.
    struct Misnamed;

    #[async_trait::async_trait]
    impl Tool for Misnamed {
        fn name(&self) -> &str {
            "wait"
        }

        fn spec(&self) -> asynctask_tools::ToolSpec {
            asynctask_tools::ToolSpec::new("wait_for_it", "Wait", "Waits.", serde_json::json!({}))
        }

        async fn execute(&self, _params: Value, _cancel: CancellationToken) -> ToolResult {
            ToolResult::success("", "", Value::Null)
        }
    }

    #[test]
    fn a_tool_listed_under_another_name_is_refused() {
        let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(Misnamed)];
        let err = definitions(&tools).expect_err("names differ");
        assert!(
            matches!(&err, McpError::ToolName { name, listed } if name == "wait" && listed == "wait_for_it"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "tool 'wait' is listed as 'wait_for_it' in its spec"
        );
    }

    #[test]
    fn progress_messages_prefer_the_call_then_a_running_task() {
        let manager = AsyncTaskManager::default();
        let call = TaskProgress::new();
        let elapsed = Duration::from_secs(15);
        let scope = ProgressScope::default();
        assert_eq!(
            progress_message(&call, &manager, &scope, elapsed),
            "still running (15s)"
        );

        let task = TaskProgress::new();
        manager
            .register_task(
                RegisterTaskInput::new("0f3a9c21-1", "tester", "g").with_progress(task.clone()),
            )
            .expect("registered");
        task.record_output(b"compiling 3/9\n");
        assert_eq!(
            progress_message(&call, &manager, &scope, elapsed),
            "0f3a9c21: compiling 3/9"
        );

        call.record_output(format!("step 2: {}\n", "x".repeat(500)).as_bytes());
        let message = progress_message(&call, &manager, &scope, elapsed);
        assert!(message.starts_with("step 2: xxx"), "{message}");
        assert_eq!(
            message.chars().count(),
            PROGRESS_LINE_CHARS + 3,
            "cut, with `...`"
        );
    }

    #[test]
    fn progress_messages_quote_the_tasks_waited_on_and_never_another_sessions() {
        let manager = AsyncTaskManager::default();
        let call = TaskProgress::new();
        let elapsed = Duration::from_secs(5);
        let sessions = crate::session::Sessions::default();
        let none = std::collections::BTreeSet::new();
        let (mine, other) = (Arc::new(sessions.join(&none)), sessions.join(&none));
        for (id, origin, line) in [
            ("aaaa0000-1", other.id(), "other session's secret"),
            ("bbbb0000-1", mine.id(), "my first task"),
            ("cccc0000-1", mine.id(), "the task waited on"),
        ] {
            let progress = TaskProgress::new();
            manager
                .register_task(
                    RegisterTaskInput::new(id, "tester", "g")
                        .with_progress(progress.clone())
                        .with_origin(origin),
                )
                .expect("registered");
            progress.record_output(format!("{line}\n").as_bytes());
        }
        let waiting = ProgressScope {
            targets: vec!["cccc".to_owned()],
            session: Some(Arc::clone(&mine)),
        };
        assert_eq!(
            progress_message(&call, &manager, &waiting, elapsed),
            "cccc0000: the task waited on"
        );
        let any = ProgressScope {
            targets: Vec::new(),
            session: Some(Arc::clone(&mine)),
        };
        assert_eq!(
            progress_message(&call, &manager, &any, elapsed),
            "bbbb0000: my first task"
        );
        // A task of another session is never quoted, even when the call
        // names it.
        let named = ProgressScope {
            targets: vec!["aaaa".to_owned()],
            session: Some(Arc::clone(&mine)),
        };
        assert_eq!(
            progress_message(&call, &manager, &named, elapsed),
            "bbbb0000: my first task"
        );
        let stranger = ProgressScope {
            targets: Vec::new(),
            session: Some(Arc::new(sessions.join(&none))),
        };
        assert_eq!(
            progress_message(&call, &manager, &stranger, elapsed),
            "still running (5s)"
        );
        drop(other);
        // The scope of a call: the prefixes of wait_async_tasks only.
        let arguments = serde_json::json!({"task_id_prefixes": ["cccc", ""]});
        assert_eq!(
            ProgressScope::of("wait_async_tasks", &arguments, None).targets,
            ["cccc"]
        );
        assert!(
            ProgressScope::of("task", &arguments, None)
                .targets
                .is_empty()
        );
    }
}
