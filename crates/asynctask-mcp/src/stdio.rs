//! Serving on stdio (or any reader and writer): the server with its own runtime,
//! until the client goes away or a termination signal arrives.

use std::sync::Arc;

use asynctask_manager::{Subscription, TaskEvent};
use asynctask_runtime::AsyncTaskRuntime;
use asynctask_tools::{LaunchBudget, SubagentRunner, SyncDetach, id_prefix};
use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

use crate::options::{McpError, McpServerOptions};
use crate::server::{AsyncTaskMcpServer, DETACH_FOLLOW_UP};
use crate::transport::AckMode;

/// Logs (at `info`, through `tracing`) one line for the human each time one of
/// `runtime`'s tasks ends: its id's head, its subagent, how it ended and after
/// how long. Logging stops when the returned [`Subscription`] is dropped.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let runtime = asynctask_runtime::AsyncTaskRuntime::builder().build();
/// let _log = asynctask_mcp::log_task_ends(&runtime);
/// # });
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn log_task_ends(runtime: &AsyncTaskRuntime) -> Subscription {
    runtime.manager().subscribe(move |event: &TaskEvent| {
        let task = event.task();
        let how = match event {
            TaskEvent::Started(_) => {
                tracing::info!(
                    "task {} ({}) started from the queue",
                    id_prefix(task.id()),
                    task.subagent_name()
                );
                return;
            }
            TaskEvent::Completed(_) => "completed".to_owned(),
            TaskEvent::Failed(_) => format!(
                "failed: {}",
                task.error()
                    .and_then(|error| error.lines().next())
                    .unwrap_or_default()
            ),
            _ => task.status().as_str().to_owned(),
        };
        let took = asynctask_tools::format_duration(
            task.started_at().unwrap_or(task.launched_at()),
            task.completed_at().unwrap_or(task.launched_at()),
        );
        tracing::info!(
            "task {} ({}) {how} after {took}",
            id_prefix(task.id()),
            task.subagent_name()
        );
    })
}

/// Serves the tools over stdio until the client disconnects, then shuts down.
///
/// Builds the runtime (no agent host: results ride on tool results; `runner`
/// runs the subagents), serves it on stdin/stdout, logs each task's end to
/// stderr, and when stdin reaches its end cancels every task, waits for the
/// subagents to end ([`AsyncTaskRuntime::shutdown`], within their grace) and
/// returns. On `SIGTERM`, `SIGINT` or `SIGHUP` — while serving, or during
/// that shutdown — every subagent is ended at once
/// ([`SubagentRunner::terminate_all`]) and it returns as soon as they are
/// gone.
///
/// # Errors
///
/// [`McpError`] when the session cannot start (the client never initialized it)
/// or the runtime cannot be built.
///
/// # Cancel safety
///
/// Not cancel-safe: drop it and the subagents are still cancelled by the
/// runtime's drop paths, but not awaited.
pub async fn serve_stdio(
    runner: Arc<dyn SubagentRunner>,
    options: McpServerOptions,
) -> Result<(), McpError> {
    // Non-blocking pipes when stdin/stdout are FIFOs (as MCP clients launch
    // servers): a blocking stdin read would hold the process past its shutdown.
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    serve_io(runner, options, None, stdin, stdout).await
}

/// [`serve_stdio`] on a given reader and writer, its subagents working in
/// `project` (which `check_async_tasks` shows): the client's side of stdio,
/// say, after an [`open_session`](crate::open_session) read its first lines
/// (chain them before the reader, and drop the answer it gave with a
/// [`DropAnswer`](crate::DropAnswer) writer).
///
/// # Errors
///
/// As [`serve_stdio`].
///
/// # Cancel safety
///
/// As [`serve_stdio`].
pub async fn serve_io<R, W>(
    runner: Arc<dyn SubagentRunner>,
    options: McpServerOptions,
    project: Option<std::path::PathBuf>,
    reader: R,
    writer: W,
) -> Result<(), McpError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let runtime = Arc::new(
        AsyncTaskRuntime::builder()
            .runner(Arc::clone(&runner))
            .max_async_tasks(options.max_async_tasks)
            .max_queued_tasks(options.max_queued_tasks)
            .sync_detach(
                SyncDetach::after(options.sync_detach_after).with_follow_up(DETACH_FOLLOW_UP),
            )
            .try_build()?,
    );
    serve_runtime(
        runtime,
        runner,
        options,
        project,
        CancellationToken::new(),
        reader,
        writer,
    )
    .await
}

/// [`serve_io`] over a runtime the caller built (with a journal of its own,
/// say) around `runner`. `served` is cancelled once serving has ended (the
/// client went away, or a signal came), before the runtime shuts down and
/// cancels its tasks: a runner whose tasks outlive the server (a fleet's
/// front) tells that end from a model's cancel by it.
///
/// # Errors
///
/// As [`serve_io`].
///
/// # Cancel safety
///
/// As [`serve_stdio`].
pub async fn serve_runtime<R, W>(
    runtime: Arc<AsyncTaskRuntime>,
    runner: Arc<dyn SubagentRunner>,
    options: McpServerOptions,
    project: Option<std::path::PathBuf>,
    served: CancellationToken,
    reader: R,
    writer: W,
) -> Result<(), McpError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let _log = log_task_ends(&runtime);
    let mut server = AsyncTaskMcpServer::new(Arc::clone(&runtime))?
        .with_progress_interval(options.progress_interval)
        .with_nesting(options.nesting);
    if let Some(max) = options.max_launches_per_session {
        server = server.with_launch_budget(LaunchBudget::new(max));
    }
    if let Some(project) = project {
        server = server.with_project(project);
    }
    // Listened to for the whole life of the server, its shutdown included.
    let mut signals = TerminationSignals::new().map_err(McpError::Signals)?;
    // Said once the signals are listened to: from now on a signal ends the
    // server the way it should.
    let subagents = runner.catalog().map_or_else(
        || "any name".to_owned(),
        |catalog| {
            let names: Vec<String> = catalog.into_iter().map(|info| info.name).collect();
            names.join(", ")
        },
    );
    tracing::info!("MCP server on stdio; subagents: {subagents}");
    let ended = serve(server, &mut signals, reader, writer).await;
    served.cancel();
    let served = ended;
    if let Ok(Ended::Signal) = served {
        // A client that stops its server with a signal gives it little time
        // (Claude Code: SIGTERM 100 ms after SIGINT, SIGKILL 400 ms later):
        // every subagent ends now, without its grace.
        runner.terminate_all();
        runtime.shutdown().await;
        return served.map(drop);
    }
    // The client closed its end: the subagents are cancelled and get their
    // grace. A signal during that grace (a client that closes stdin, then
    // signals) ends them now, and the shutdown with them.
    let shutdown = runtime.shutdown();
    tokio::pin!(shutdown);
    tokio::select! {
        () = &mut shutdown => {}
        _ = signals.recv() => {
            runner.terminate_all();
            shutdown.await;
        }
    }
    served.map(drop)
}

/// How serving ended.
enum Ended {
    /// The client closed its end.
    Input,
    /// A termination signal.
    Signal,
}

/// `SIGTERM`, `SIGINT` and `SIGHUP` (the terminal closed), as one stream: what
/// ends a server, a supervisor or a front.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_io().build()?.block_on(async {
/// let mut signals = asynctask_mcp::TerminationSignals::new()?;
/// tokio::select! {
///     name = signals.recv() => println!("ending on {name}"),
///     () = std::future::ready(()) => {} // served to the end instead
/// }
/// # Ok::<(), std::io::Error>(())
/// # })?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct TerminationSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl TerminationSignals {
    /// Starts listening; a signal that arrives from now on is not missed.
    ///
    /// # Errors
    ///
    /// The I/O error when a signal handler cannot be installed (outside a
    /// tokio runtime with I/O enabled, say).
    pub fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = signal;
        Ok(TerminationSignals {
            terminate: listen(SignalKind::terminate())?,
            interrupt: listen(SignalKind::interrupt())?,
            hangup: listen(SignalKind::hangup())?,
        })
    }

    /// Resolves when one of the signals arrives, with its name (`SIGTERM`,
    /// `SIGINT` or `SIGHUP`).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a signal that arrives while no call waits is returned by
    /// the next call.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.hangup.recv() => "SIGHUP",
        }
    }
}

async fn serve<R, W>(
    server: AsyncTaskMcpServer,
    signals: &mut TerminationSignals,
    reader: R,
    writer: W,
) -> Result<Ended, McpError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let calls = server.calls.clone();
    let (manager, gate) = (server.runtime.manager().clone(), server.gate.clone());
    let transport = server.transport(reader, writer, AckMode::Written);
    // A signal also ends a session the client has not initialized yet.
    let service = tokio::select! {
        service = server.serve(transport) => {
            service.map_err(|err| McpError::Session(Box::new(err)))?
        }
        _ = signals.recv() => {
            calls.cancel();
            return Ok(Ended::Signal);
        }
    };
    // Questions go to the user as forms when the client takes them.
    let _asking = crate::elicit::start(&manager, &gate, service.peer().clone());
    let stop = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let finished = tokio::select! {
        _ = &mut waiting => true,
        _ = signals.recv() => false,
    };
    if finished {
        return Ok(Ended::Input);
    }
    calls.cancel();
    stop.cancel();
    let _ = waiting.await;
    Ok(Ended::Signal)
}
