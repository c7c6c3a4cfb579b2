//! The server's transport: JSON-RPC lines both ways, every request answered,
//! what a client does not read never piling up, and each claim a response
//! carries ended by what happened to that response.

use std::borrow::Cow;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, CustomNotification, ErrorCode, ErrorData,
    JsonRpcMessage, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::transport::Transport;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use asynctask_runtime::Claim;

use crate::gate::ReminderGate;
use crate::wire::{Decoded, Line, LineReader, MAX_LINE_BYTES, decode, encode, refuse_too_long};

/// The notification a relay sends to a durable supervisor as it writes the
/// supervisor's messages to its client: `params: {"written": N}`, the number
/// of the session's messages (every line the supervisor sent, counted from 1)
/// written so far. The supervisor marks the results a response carried as
/// delivered only once a confirmation covers it; a relay that ends before
/// confirming leaves them pending for the next session.
pub const DELIVERED_NOTIFICATION: &str = "notifications/asynctask/delivered";

/// The notification a relay sends to a durable supervisor in place of a line
/// from its client longer than [`MAX_LINE_BYTES`], which it did not pass on:
/// `params: {"id": <the request's id, or null>, "bytes": N}`. The supervisor
/// answers it as it answers such a line of its own.
pub const OVERSIZED_NOTIFICATION: &str = "notifications/asynctask/oversized";

/// How many messages may wait to be written before the transport stops
/// reading: a client that does not read its answers is not read either.
const MAX_UNWRITTEN: usize = 64;

/// How many requests may be in progress (received, not answered) before the
/// transport stops reading until one is answered.
const MAX_OPEN_REQUESTS: usize = 256;

/// When a response counts as delivered to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AckMode {
    /// When the transport wrote it: the transport's other end is the client
    /// (stdio).
    Written,
    /// When the relay between us and the client says it wrote it to the client,
    /// with a [`DELIVERED_NOTIFICATION`]; a connection that ends first releases
    /// what it had not confirmed (a durable supervisor's sessions).
    Confirmed,
}

/// The writing side, shared by every `send` (rmcp writes responses from tasks
/// of their own) and by the transport's own answers.
struct Writer<W> {
    state: tokio::sync::Mutex<Written<W>>,
    /// Messages handed to `send` and not yet written.
    unwritten: AtomicUsize,
    /// Woken each time a message was written (or could not be).
    progress: Notify,
    /// A write failed: the client cannot be written to, and the session is
    /// over (the next `receive` ends it).
    broken: AtomicBool,
}

struct Written<W> {
    out: Option<W>,
    /// Messages written on this connection so far (a relay confirms by count).
    count: u64,
}

impl<W: AsyncWrite + Unpin> Writer<W> {
    /// Writes one message (`line`, with its line break) and ends the claim it
    /// carries: with [`AckMode::Written`] acknowledged once written, with
    /// [`AckMode::Confirmed`] left with the gate for the relay to confirm; a
    /// failed write releases it.
    async fn write(
        &self,
        line: Vec<u8>,
        claim: Option<Claim>,
        mode: AckMode,
        gate: &ReminderGate,
    ) -> io::Result<()> {
        let mut state = self.state.lock().await;
        state.count += 1;
        let claim = match (mode, claim) {
            (AckMode::Confirmed, Some(claim)) => {
                // Numbered as written, so a relay's count covers it exactly.
                gate.await_confirmation(state.count, claim);
                None
            }
            (_, claim) => claim,
        };
        let result = match &mut state.out {
            Some(out) => match out.write_all(&line).await {
                Ok(()) => out.flush().await,
                Err(error) => Err(error),
            },
            None => Err(io::ErrorKind::BrokenPipe.into()),
        };
        drop(state);
        if result.is_err() {
            self.broken.store(true, Ordering::SeqCst);
        }
        self.unwritten.fetch_sub(1, Ordering::SeqCst);
        self.progress.notify_waiters();
        if let (Ok(()), Some(claim)) = (&result, claim) {
            claim.acknowledge();
        }
        // A failed write dropped its claim: released.
        result
    }
}

/// The server's side of one connection: reads the client's JSON-RPC lines and
/// writes the server's, and keeps the [`ReminderGate`] told of what happened
/// on the wire.
///
/// - **Every request gets one answer.** A line that is not JSON is answered
///   `-32700`, JSON that is not a request `-32600`, a request whose parameters
///   do not fit its method `-32602`, a line longer than [`MAX_LINE_BYTES`]
///   `-32600` — with the request's id whenever it can be read — and reading
///   goes on. What can be mended is served (bytes that are not UTF-8 and lone
///   surrogates become U+FFFD). A request whose id is still in use by another
///   request in progress is refused `-32600` before any handler runs (two
///   requests sharing an id would share a claim). Notifications and responses
///   that arrive before the session started are dropped, not allowed to end
///   it.
/// - **Bounded.** At most 64 messages wait to be written and 256 requests are
///   in progress: past either, the client is not read until its answers are
///   written (a client that does not read is not read either).
/// - **Claims end with their responses.** `notifications/cancelled` releases
///   the claim of a request not yet answered (rmcp then drops the answer); a
///   response's claim is acknowledged once written ([`AckMode::Written`]) or
///   once a relay confirms writing it ([`AckMode::Confirmed`]), and released if
///   the write fails or the connection ends first.
/// - **End of input** cancels `calls` before rmcp sees it, so synchronous
///   subagents and waits end at once instead of after rmcp's 5 s drain.
pub(crate) struct ServerTransport<R, W> {
    reader: LineReader<BufReader<R>>,
    side: Side<W>,
    calls: CancellationToken,
}

/// What the transport's reading and writing share (all of it `Sync`, so a
/// `receive` waiting on it stays `Send` whatever the reader is).
struct Side<W> {
    writer: Arc<Writer<W>>,
    gate: ReminderGate,
    mode: AckMode,
    /// The session started (initialized, or past its first request): before,
    /// notifications and responses are dropped, since rmcp ends a session
    /// whose first message is one.
    started: Arc<AtomicBool>,
}

impl<R, W> ServerTransport<R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    pub(crate) fn new(
        reader: R,
        writer: W,
        gate: ReminderGate,
        calls: CancellationToken,
        mode: AckMode,
    ) -> Self {
        gate.track();
        ServerTransport {
            reader: LineReader::new(BufReader::new(reader), MAX_LINE_BYTES),
            side: Side {
                writer: Arc::new(Writer {
                    state: tokio::sync::Mutex::new(Written {
                        out: Some(writer),
                        count: 0,
                    }),
                    unwritten: AtomicUsize::new(0),
                    progress: Notify::new(),
                    broken: AtomicBool::new(false),
                }),
                gate,
                mode,
                started: Arc::new(AtomicBool::new(false)),
            },
            calls,
        }
    }
}

impl<W> Side<W>
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// Answers with a message of the transport's own (an error for a line
    /// that is not a request it serves), written on a task of its own as rmcp
    /// writes its responses: `receive` must stay cancel-safe, and a write
    /// dropped halfway would lose the answer, leave half a line on the wire
    /// and a message counted as unwritten for ever.
    fn answer(&self, message: &ServerJsonRpcMessage) -> io::Result<()> {
        let line = to_line(message)?;
        self.writer.unwritten.fetch_add(1, Ordering::SeqCst);
        let (writer, gate, mode) = (Arc::clone(&self.writer), self.gate.clone(), self.mode);
        tokio::spawn(async move {
            // A failure is kept by the writer (`broken`): the session ends.
            let _ = writer.write(line, None, mode, &gate).await;
        });
        Ok(())
    }

    /// Waits while too much is unwritten or too many requests are open.
    async fn room(&self) {
        loop {
            let progress = self.writer.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            if self.writer.unwritten.load(Ordering::SeqCst) < MAX_UNWRITTEN
                && self.gate.open_requests() < MAX_OPEN_REQUESTS
            {
                return;
            }
            progress.await;
        }
    }

    /// Where a decoded message goes: to rmcp (`Some`), or nowhere because the
    /// transport dealt with it (`None`), answering it if needed.
    fn route(&self, message: ClientJsonRpcMessage) -> io::Result<Option<ClientJsonRpcMessage>> {
        match &message {
            JsonRpcMessage::Notification(notification) => {
                match &notification.notification {
                    ClientNotification::CustomNotification(custom)
                        if self.mode == AckMode::Confirmed =>
                    {
                        if let Some(written) = delivered(custom) {
                            // Ours, not the client's: rmcp never sees it.
                            self.gate.confirmed(written);
                            return Ok(None);
                        }
                        if let Some((id, len)) = oversized(custom) {
                            if let Some(refusal) = refuse_too_long_id(id, len) {
                                self.answer(&refusal)?;
                            }
                            return Ok(None);
                        }
                    }
                    ClientNotification::CancelledNotification(cancelled) => {
                        if let Some(id) = &cancelled.params.request_id {
                            self.gate.cancelled(id);
                        }
                    }
                    _ => {}
                }
                if !self.started.load(Ordering::SeqCst) {
                    tracing::debug!("a notification before the session started is dropped");
                    return Ok(None);
                }
            }
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {
                if !self.started.load(Ordering::SeqCst) {
                    tracing::debug!("a response before the session started is dropped");
                    return Ok(None);
                }
            }
            JsonRpcMessage::Request(request) => {
                if !self.gate.open(request.id.clone()) {
                    let refusal = ServerJsonRpcMessage::error(
                        ErrorData::invalid_request(
                            format!(
                                "request id {} is already in use by a request in progress; \
                                 a request's id must be unique until it is answered",
                                request.id
                            ),
                            None,
                        ),
                        Some(request.id.clone()),
                    );
                    self.answer(&refusal)?;
                    return Ok(None);
                }
            }
        }
        Ok(Some(message))
    }
}

/// `message` as one line of JSON, with its line break.
fn to_line(message: &ServerJsonRpcMessage) -> io::Result<Vec<u8>> {
    let mut line = encode(message)?;
    line.push(b'\n');
    Ok(line)
}

/// A relay's delivery confirmation, if `notification` is one: how many
/// messages it wrote.
fn delivered(notification: &CustomNotification) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Params {
        written: u64,
    }
    if notification.method != DELIVERED_NOTIFICATION {
        return None;
    }
    let params: Params = notification.params_as().ok()??;
    Some(params.written)
}

/// A relay's report of a line too long to pass on, if `notification` is one:
/// the request's id (when the relay could read it) and the line's length.
fn oversized(notification: &CustomNotification) -> Option<(Option<RequestId>, usize)> {
    #[derive(serde::Deserialize)]
    struct Params {
        id: Option<RequestId>,
        bytes: usize,
    }
    if notification.method != OVERSIZED_NOTIFICATION {
        return None;
    }
    let params: Params = notification.params_as().ok()??;
    Some((params.id, params.bytes))
}

/// The answer to a line of `len` bytes that a relay did not pass on, for
/// request `id`; `None` for a notification (no id).
fn refuse_too_long_id(id: Option<RequestId>, len: usize) -> Option<ServerJsonRpcMessage> {
    let id = id?;
    Some(ServerJsonRpcMessage::error(
        ErrorData::new(
            ErrorCode::INVALID_REQUEST,
            format!(
                "Invalid Request: the message is {len} bytes long, more than the {MAX_LINE_BYTES} \
                 bytes a message may have"
            ),
            None,
        ),
        Some(id),
    ))
}

/// Whether a response shows the session started: a result other than the
/// answer to a ping or a discovery (which come before a session).
fn starts_the_session(message: &ServerJsonRpcMessage) -> bool {
    matches!(
        message,
        JsonRpcMessage::Response(response)
            if !matches!(response.result, ServerResult::EmptyResult(_) | ServerResult::DiscoverResult(_))
    )
}

impl<R, W> Transport<RoleServer> for ServerTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = io::Error;

    fn name() -> Cow<'static, str> {
        Cow::Borrowed("asynctask-lines")
    }

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let id = match &item {
            JsonRpcMessage::Response(response) => Some(&response.id),
            JsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        // Taken now, synchronously: rmcp calls `send` from its loop, so a
        // cancel it receives later finds the response on its way out.
        let side = &self.side;
        let claim = id.and_then(|id| side.gate.answered(id));
        if starts_the_session(&item) {
            side.started.store(true, Ordering::SeqCst);
        }
        let line = to_line(&item);
        side.writer.unwritten.fetch_add(1, Ordering::SeqCst);
        let (writer, gate, mode) = (Arc::clone(&side.writer), side.gate.clone(), side.mode);
        async move {
            match line {
                Ok(line) => writer.write(line, claim, mode, &gate).await,
                Err(error) => {
                    writer.unwritten.fetch_sub(1, Ordering::SeqCst);
                    writer.progress.notify_waiters();
                    Err(error)
                }
            }
        }
    }

    /// # Cancel safety
    ///
    /// Cancel-safe, as rmcp needs (it polls `receive` in a `select!` and drops
    /// it whenever another branch is ready first): it awaits only room to
    /// read and the next line, and what it answers itself is written on a
    /// task of its own.
    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if self.side.writer.broken.load(Ordering::SeqCst) {
                // The client cannot be written to: the session is over.
                self.calls.cancel();
                self.side.gate.release_all();
                return None;
            }
            self.side.room().await;
            let line = match self.reader.next().await {
                Ok(Some(line)) => line,
                Ok(None) | Err(_) => {
                    // The client is gone: end every call now, before rmcp
                    // starts its drain; what was never confirmed delivered is
                    // released.
                    self.calls.cancel();
                    if self.side.mode == AckMode::Confirmed {
                        self.side.gate.release_all();
                    }
                    return None;
                }
            };
            let decoded = match line {
                Line::Whole(bytes) => decode(&bytes),
                Line::TooLong { head, len } => match refuse_too_long(&head, len) {
                    Some(refusal) => Decoded::Refused(Box::new(refusal)),
                    None => Decoded::Ignored,
                },
            };
            let routed = match decoded {
                Decoded::Ignored => continue,
                Decoded::Refused(refusal) => self.side.answer(&refusal).map(|()| None),
                Decoded::Message(message) => self.side.route(*message),
            };
            match routed {
                Ok(Some(message)) => return Some(message),
                Ok(None) => {}
                // An answer that cannot be written as JSON (never happens).
                Err(_) => {
                    self.calls.cancel();
                    self.side.gate.release_all();
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let out = self.side.writer.state.lock().await.out.take();
        if let Some(mut out) = out {
            out.shutdown().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use asynctask_manager::RegisterTaskInput;
    use asynctask_model::{OutputObject, TerminateReason};
    use asynctask_runtime::AsyncTaskRuntime;
    use pretty_assertions::assert_eq;
    use rmcp::ServiceExt as _;
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

    use super::AckMode;
    use crate::AsyncTaskMcpServer;

    /// A server on our transport over an in-memory pipe, initialized; the
    /// client's ends.
    async fn serve(
        runtime: &Arc<AsyncTaskRuntime>,
    ) -> (
        tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
        tokio::io::WriteHalf<tokio::io::DuplexStream>,
    ) {
        let server = AsyncTaskMcpServer::new(Arc::clone(runtime)).expect("valid tools");
        let (client_end, server_end) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(server_end);
        let transport = server.transport(read, write, AckMode::Written);
        tokio::spawn(async move {
            if let Ok(service) = server.serve(transport).await {
                let _ = service.waiting().await;
            }
        });
        let (read, mut write) = tokio::io::split(client_end);
        let mut lines = BufReader::new(read).lines();
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        }});
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        write
            .write_all(format!("{init}\n{initialized}\n").as_bytes())
            .await
            .expect("written");
        let answer = lines.next_line().await.expect("read").expect("a line");
        assert!(answer.contains("serverInfo"), "{answer}");
        (lines, write)
    }

    /// A client that initializes again, asking for a version this server does
    /// not speak over `initialize` (2026-07-28), gets the version agreed on,
    /// and the session goes on speaking it: `ping` is still answered.
    #[tokio::test]
    async fn initializing_again_keeps_the_version_agreed_on() {
        let runtime = Arc::new(AsyncTaskRuntime::builder().build());
        let (mut lines, mut write) = serve(&runtime).await;
        let again = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2026-07-28",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        }});
        let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
        write
            .write_all(format!("{again}\n{ping}\n").as_bytes())
            .await
            .expect("written");
        let mut answers = Vec::new();
        for _ in 0..2 {
            let line = lines.next_line().await.expect("read").expect("a line");
            answers.push(serde_json::from_str::<Value>(&line).expect("JSON"));
        }
        answers.sort_by_key(|answer| answer["id"].as_i64());
        assert_ne!(answers[0]["result"]["protocolVersion"], "2026-07-28");
        assert_eq!(answers[1], json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
        drop(write);
        runtime.shutdown().await;
    }

    /// rmcp polls `receive` in a `select!` and drops it whenever another
    /// branch is ready first. A line it had read and was refusing when dropped
    /// (the writer busy with a long response) is still answered, whole, and
    /// leaves nothing counted as unwritten.
    #[tokio::test(start_paused = true)]
    async fn a_refusal_outlives_a_dropped_receive() {
        use rmcp::transport::Transport as _;
        use std::sync::atomic::Ordering;
        use std::time::Duration;

        let runtime = Arc::new(AsyncTaskRuntime::builder().build());
        let server = AsyncTaskMcpServer::new(Arc::clone(&runtime)).expect("valid tools");
        let (client_end, server_end) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(server_end);
        let mut transport = server.transport(read, write, AckMode::Written);
        let (read, mut write) = tokio::io::split(client_end);
        let mut lines = BufReader::new(read).lines();
        write
            .write_all(b"not json\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
            .await
            .expect("written");
        // A response is being written: the writer is taken.
        let writer = Arc::clone(&transport.side.writer);
        let busy = writer.state.lock().await;
        let received = tokio::time::timeout(Duration::from_secs(1), transport.receive()).await;
        drop(busy);
        if let Ok(message) = received {
            let message = serde_json::to_value(message.expect("the ping")).expect("JSON");
            assert_eq!(message["method"], "ping");
        }
        let refusal = tokio::time::timeout(Duration::from_secs(1), lines.next_line())
            .await
            .expect("the refusal is written")
            .expect("read")
            .expect("a line");
        let refusal: Value = serde_json::from_str(&refusal).expect("one whole message");
        assert_eq!(refusal["error"]["code"], -32700);
        assert_eq!(transport.side.writer.unwritten.load(Ordering::SeqCst), 0);
        runtime.shutdown().await;
    }

    /// Two requests sharing an id, in one write, after a task finished: one is
    /// served (and carries the result), the other refused with an error naming
    /// the id; the result is delivered once and never lost.
    #[tokio::test]
    async fn a_request_whose_id_is_in_use_is_refused_and_loses_no_result() {
        for round in 0..100 {
            let runtime = Arc::new(AsyncTaskRuntime::builder().build());
            let task = format!("{round:08x}-done");
            runtime
                .manager()
                .register_task(RegisterTaskInput::new(task.clone(), "s", "g"))
                .expect("registered");
            let output = OutputObject::new(TerminateReason::Goal).with_final_message("finished");
            runtime.manager().complete_task(&task, output);
            let (mut lines, mut write) = serve(&runtime).await;
            let check = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": {"name": "check_async_tasks", "arguments": {}}});
            write
                .write_all(format!("{check}\n{check}\n").as_bytes())
                .await
                .expect("written");
            let mut answers: Vec<Value> = Vec::new();
            for _ in 0..2 {
                let line = lines.next_line().await.expect("read").expect("a line");
                answers.push(serde_json::from_str(&line).expect("JSON"));
            }
            let refused: Vec<&Value> = answers
                .iter()
                .filter(|a| a.get("error").is_some())
                .collect();
            assert_eq!(refused.len(), 1, "round {round}: {answers:#?}");
            assert_eq!(refused[0]["id"], 5);
            assert_eq!(refused[0]["error"]["code"], -32600);
            let carried = answers
                .iter()
                .filter(|a| {
                    a.to_string()
                        .contains("\\\"final_message\\\": \\\"finished\\\"")
                })
                .count();
            assert_eq!(carried, 1, "round {round}: {answers:#?}");
            // Delivered: the next call does not carry it again.
            let next = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                "params": {"name": "check_async_tasks", "arguments": {}}});
            write
                .write_all(format!("{next}\n").as_bytes())
                .await
                .expect("written");
            let line = lines.next_line().await.expect("read").expect("a line");
            assert!(
                !line.contains("final_message"),
                "round {round}: twice: {line}"
            );
            assert!(runtime.manager().pending_notifications().is_empty());
            drop(write);
            runtime.shutdown().await;
        }
    }

    /// Runs until cancelled.
    struct Forever;

    #[async_trait::async_trait]
    impl asynctask_tools::SubagentRunner for Forever {
        async fn run(
            &self,
            _request: asynctask_tools::SubagentRequest,
            cancel: tokio_util::sync::CancellationToken,
        ) -> Result<OutputObject, asynctask_tools::SubagentError> {
            cancel.cancelled().await;
            Err(asynctask_tools::SubagentError::new("cancelled"))
        }
    }

    /// Twenty background launches sharing one id, in one write: each is
    /// either served (and its task started) or refused with the JSON-RPC
    /// error before any handler runs; no task starts without an answer.
    #[tokio::test]
    async fn launches_sharing_an_id_start_a_task_for_each_answer_and_no_other() {
        use asynctask_model::MaxAsyncTasks;

        const LAUNCHES: usize = 20;
        for round in 0..20 {
            let runtime = Arc::new(
                AsyncTaskRuntime::builder()
                    .runner(Arc::new(Forever))
                    .max_async_tasks(MaxAsyncTasks::UNLIMITED)
                    .build(),
            );
            let (mut lines, mut write) = serve(&runtime).await;
            let launch = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "task", "arguments": {
                    "subagent_name": "forever", "goal_prompt": "wait", "async": true}}});
            write
                .write_all(format!("{launch}\n").repeat(LAUNCHES).as_bytes())
                .await
                .expect("written");
            let mut answers: Vec<Value> = Vec::new();
            for _ in 0..LAUNCHES {
                let line = lines.next_line().await.expect("read").expect("a line");
                answers.push(serde_json::from_str(&line).expect("JSON"));
            }
            let served = answers
                .iter()
                .filter(|a| a["result"]["isError"] == Value::Bool(false))
                .count();
            let refused = answers
                .iter()
                .filter(|a| a["id"] == 7 && a["error"]["code"] == -32600)
                .count();
            assert!(served >= 1, "round {round}: {answers:#?}");
            assert_eq!(served + refused, LAUNCHES, "round {round}: {answers:#?}");
            assert_eq!(
                runtime.manager().tasks().len(),
                served,
                "round {round}: a task for each launch served and no other"
            );
            drop(write);
            runtime.shutdown().await;
        }
    }
}
