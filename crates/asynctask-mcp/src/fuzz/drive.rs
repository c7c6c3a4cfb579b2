//! One session against the real server, in process: its lines written on an
//! in-memory pipe to our transport under paused tokio time, every line the
//! server writes read and checked against what the [oracle](super::oracle)
//! expects.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Once, OnceLock};
use std::time::Duration;

use asynctask_manager::{AsyncTaskManager, Question};
use asynctask_model::{OutputObject, TerminateReason};
use asynctask_runtime::AsyncTaskRuntime;
use asynctask_tools::{SubagentError, SubagentInfo, SubagentRequest, SubagentRunner, SyncDetach};
use rmcp::ServiceExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::calls::TASK_PLACEHOLDER;
use super::oracle::{Expected, Key, answer_key};
use super::session::{MAX_STALL_SECONDS, STALL_PREFIX};
use crate::params::MAX_WAIT_SECONDS;
use crate::transport::AckMode;
use crate::{AsyncTaskMcpServer, DETACH_FOLLOW_UP};

/// How long (in paused, virtual time) a request may wait for its answer
/// after its line was written: the longest wait a tool allows, and two
/// stalls of the client's (a line written during a stall is read once the
/// server can write again). Floods hold short waits only, so a line written
/// past the transport's window of 256 requests in progress is read within
/// seconds.
const ANSWER_WITHIN: Duration = Duration::from_secs(MAX_WAIT_SECONDS + 2 * MAX_STALL_SECONDS);

/// How long the server may take to end once its input ended, and the
/// runtime to shut down.
const END_WITHIN: Duration = Duration::from_secs(10);

/// How long a whole session may take, for lines the server never reads.
const SESSION_WITHIN: Duration = Duration::from_secs(600);

/// The pipe between client and server: small, so that backpressure happens.
const PIPE_BYTES: usize = 64 * 1024;

/// What happened in one session.
#[derive(Debug)]
pub(super) struct Report {
    /// Whether every property held, or the first that did not.
    pub(super) verdict: Result<(), String>,
    /// The lines, in the order they crossed the pipe.
    pub(super) transcript: Vec<Event>,
    /// How many answers the server wrote.
    pub(super) answers: usize,
    /// The tools whose calls succeeded (a tool result without `isError`),
    /// once per call.
    pub(super) succeeded: Vec<String>,
}

/// One line across the pipe.
#[derive(Debug)]
pub(super) enum Event {
    /// Line `n` (from 0) of the session was written (as this, when it named
    /// a task of the session's).
    Sent(usize, Option<Vec<u8>>),
    /// The server wrote this line.
    Received(Vec<u8>),
    /// The client closed its end.
    Closed,
}

/// Subagents that finish within seconds: how long and how each ends follows
/// from its goal (so a session replays the same way), and `worker` reads its
/// messages.
#[derive(Debug)]
pub(super) struct Quick;

#[async_trait::async_trait]
impl SubagentRunner for Quick {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        let mut hasher = DefaultHasher::new();
        request.goal_prompt.hash(&mut hasher);
        let seed = hasher.finish();
        let done = tokio::time::sleep(Duration::from_secs(seed % 5));
        tokio::pin!(done);
        let mut heard = 0usize;
        // Every other subagent asks, and waits for an answer while it works.
        let mut asking = seed.is_multiple_of(2).then(|| {
            request
                .questions
                .ask(Question::new("Go on?").with_choices(["yes", "no"]))
        });
        loop {
            tokio::select! {
                () = &mut done => break,
                () = cancel.cancelled() => return Err(SubagentError::new("cancelled")),
                Some(_) = request.inbox.recv() => heard += 1,
                _ = async {
                    match &mut asking {
                        Some(asking) => asking.await,
                        None => std::future::pending().await,
                    }
                }, if asking.is_some() => asking = None,
            }
        }
        match seed % 4 {
            0 => Err(SubagentError::new(format!("failed after {heard} messages"))),
            // The goal comes back: a huge goal makes a huge result.
            _ => Ok(OutputObject::new(TerminateReason::Goal)
                .with_var("heard", heard.to_string())
                .with_final_message(request.goal_prompt)),
        }
    }

    fn catalog(&self) -> Option<Vec<SubagentInfo>> {
        Some(vec![
            SubagentInfo::new("worker", "Works, and reads messages.").with_messages(true),
            SubagentInfo::new("quiet", "Works alone."),
        ])
    }
}

/// The server as a session gets it.
fn server() -> (Arc<AsyncTaskRuntime>, AsyncTaskMcpServer) {
    let runtime = Arc::new(
        AsyncTaskRuntime::builder()
            .runner(Arc::new(Quick))
            .sync_detach(
                SyncDetach::after(Duration::from_secs(50)).with_follow_up(DETACH_FOLLOW_UP),
            )
            .build(),
    );
    let server = AsyncTaskMcpServer::new(Arc::clone(&runtime)).expect("valid tools");
    (runtime, server)
}

/// The served tools, each with its input schema (built once).
pub(super) fn tools() -> &'static [(String, Value)] {
    static TOOLS: OnceLock<Vec<(String, Value)>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let tokio = paused_runtime();
        tokio.block_on(async {
            let (runtime, server) = server();
            let tools = server
                .tools()
                .iter()
                .map(|tool| {
                    (
                        tool.name().to_owned(),
                        tool.spec().to_mcp()["inputSchema"].clone(),
                    )
                })
                .collect();
            runtime.shutdown().await;
            tools
        })
    })
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a tokio runtime")
}

/// Runs one session of `lines` and checks it.
pub(super) fn session(lines: &[Vec<u8>]) -> Report {
    let names: Vec<String> = tools().iter().map(|(name, _)| name.clone()).collect();
    let expected = Expected::of(lines, &names);
    panics::install();
    let before = panics::count();
    let tokio = paused_runtime();
    let mut report = tokio.block_on(drive(lines, &expected));
    drop(tokio);
    if let Some(panic) = panics::since(before) {
        let also = report
            .verdict
            .err()
            .map(|why| format!(" (then: {why})"))
            .unwrap_or_default();
        report.verdict = Err(format!("the server panicked: {panic}{also}"));
    }
    report
}

async fn drive(lines: &[Vec<u8>], expected: &Expected) -> Report {
    let (runtime, server) = server();
    let (client, server_end) = tokio::io::duplex(PIPE_BYTES);
    let (read, write) = tokio::io::split(server_end);
    let transport = server.transport(read, write, AckMode::Written);
    let served = tokio::spawn(async move {
        // A client that never initialized ends the session before it began:
        // that is no failure, as long as every request was answered.
        let Ok(service) = server.serve(transport).await else {
            return Ok(());
        };
        service
            .waiting()
            .await
            .map(drop)
            .map_err(|err| format!("the session ended badly: {err}"))
    });
    let (from_server, mut to_server) = tokio::io::split(client);
    let started = Instant::now();
    let written: Vec<Cell<Option<Instant>>> = lines.iter().map(|_| Cell::new(None)).collect();
    let transcript = RefCell::new(Vec::new());
    let close = Notify::new();
    let closed = Cell::new(false);
    let wrote = Notify::new();
    let answered = Notify::new();
    let stalled: Cell<Option<Instant>> = Cell::new(None);
    let got: RefCell<HashMap<Key, usize>> = RefCell::new(HashMap::new());
    let writer = async {
        for (n, line) in lines.iter().enumerate() {
            if names_a_task(line) {
                // A client learns a task's id from the answer that launched
                // it: what came before is answered first.
                let owed = expected.owed_before(n);
                let all_came = || {
                    let got = got.borrow();
                    owed.iter()
                        .all(|(id, count)| got.get(id).copied().unwrap_or(0) >= *count)
                };
                while !closed.get() && !all_came() {
                    tokio::select! {
                        () = answered.notified() => {}
                        () = close.notified() => {}
                    }
                }
                if closed.get() {
                    break;
                }
            }
            let resolved = resolve(line, runtime.manager());
            let sent = async {
                to_server
                    .write_all(resolved.as_deref().unwrap_or(line))
                    .await?;
                to_server.write_all(b"\n").await
            };
            if sent.await.is_err() {
                // The server is gone: what it did not answer shows.
                break;
            }
            written[n].set(Some(Instant::now()));
            if let Some(stall) = stall(line) {
                stalled.set(Some(Instant::now() + stall));
            }
            transcript.borrow_mut().push(Event::Sent(n, resolved));
            wrote.notify_one();
        }
        while !closed.get() {
            close.notified().await;
        }
        transcript.borrow_mut().push(Event::Closed);
        let _ = to_server.shutdown().await;
    };
    let reader = async {
        let mut reader = Reader {
            lines: BufReader::new(from_server),
            partial: Vec::new(),
            expected,
            written: &written,
            wrote: &wrote,
            answered: &answered,
            stalled: &stalled,
            started,
            got: &got,
            answers: 0,
            succeeded: Vec::new(),
            transcript: &transcript,
        };
        let verdict = reader.until_answered().await;
        closed.set(true);
        close.notify_one();
        let verdict = match verdict {
            Ok(()) => reader.until_closed().await,
            Err(why) => Err(why),
        };
        (verdict, reader.answers, reader.succeeded)
    };
    let ((), (mut verdict, answers, succeeded)) = tokio::join!(writer, reader);
    if verdict.is_ok() {
        verdict = match tokio::time::timeout(END_WITHIN, served).await {
            Err(_) => Err(format!(
                "the server did not end within {END_WITHIN:?} of its input's end"
            )),
            Ok(Err(join)) => Err(format!("the server's task failed: {join}")),
            Ok(Ok(served)) => served,
        };
    }
    if tokio::time::timeout(END_WITHIN, runtime.shutdown())
        .await
        .is_err()
        && verdict.is_ok()
    {
        verdict = Err(format!(
            "the runtime did not shut down within {END_WITHIN:?}"
        ));
    }
    Report {
        verdict,
        transcript: transcript.into_inner(),
        answers,
        succeeded,
    }
}

/// How long the client stops reading after sending `line`, when it is a
/// stall (`fuzz-stall-<n>-<seconds>s`, at most [`MAX_STALL_SECONDS`]).
fn stall(line: &[u8]) -> Option<Duration> {
    let rest = line.strip_prefix(STALL_PREFIX)?;
    let rest = &rest[rest.iter().position(|b| *b == b'-')? + 1..];
    let digits = &rest[..rest.iter().position(|b| *b == b's')?];
    let seconds: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(Duration::from_secs(seconds.min(MAX_STALL_SECONDS)))
}

/// Whether `line` names a task of the session's (`@task:N`).
fn names_a_task(line: &[u8]) -> bool {
    line.windows(TASK_PLACEHOLDER.len())
        .any(|w| w == TASK_PLACEHOLDER)
}

/// `line` with each `@task:N` replaced by the first 8 characters of the
/// N-th latest task the session launched (`00000000` before any); `None`
/// when it names none.
fn resolve(line: &[u8], manager: &AsyncTaskManager) -> Option<Vec<u8>> {
    let placeholder = TASK_PLACEHOLDER;
    if !names_a_task(line) {
        return None;
    }
    let tasks = manager.tasks();
    let mut out = Vec::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest
        .windows(placeholder.len())
        .position(|w| w == placeholder)
    {
        out.extend_from_slice(&rest[..at]);
        rest = &rest[at + placeholder.len()..];
        let digit = rest
            .first()
            .filter(|b| b.is_ascii_digit())
            .map(|b| usize::from(b - b'0'));
        let Some(n) = digit else {
            out.extend_from_slice(placeholder);
            continue;
        };
        rest = &rest[1..];
        let id = match tasks.len() {
            0 => "00000000",
            len => tasks[len - 1 - n % len].id(),
        };
        out.extend_from_slice(&id.as_bytes()[..id.len().min(8)]);
    }
    out.extend_from_slice(rest);
    Some(out)
}

/// The client's reading side, and what it has seen.
struct Reader<'a, R> {
    lines: BufReader<R>,
    /// What was read of a line not yet whole.
    partial: Vec<u8>,
    expected: &'a Expected,
    written: &'a [Cell<Option<Instant>>],
    /// Told each time the writer wrote a line.
    wrote: &'a Notify,
    /// Tells the writer each time an answer came.
    answered: &'a Notify,
    /// Until when the client reads nothing.
    stalled: &'a Cell<Option<Instant>>,
    started: Instant,
    /// How many answers came, by id.
    got: &'a RefCell<HashMap<Key, usize>>,
    answers: usize,
    succeeded: Vec<String>,
    transcript: &'a RefCell<Vec<Event>>,
}

/// What the reader saw next.
enum Next {
    /// A line from the server.
    Line(Vec<u8>),
    /// The end of the server's output.
    End,
    /// The deadline passed.
    Late,
    /// The writer wrote a line: deadlines changed.
    Wrote,
}

impl<R: tokio::io::AsyncRead + Unpin> Reader<'_, R> {
    /// Reads until every line was written and every answer that must come
    /// came, each within its bound.
    async fn until_answered(&mut self) -> Result<(), String> {
        loop {
            let all_written = self.written.iter().all(|at| at.get().is_some());
            let owed = self.owed();
            if owed.is_none() && all_written {
                return Ok(());
            }
            let deadline = owed
                .as_ref()
                .map_or(self.started + SESSION_WITHIN, |(at, _)| *at);
            match self.next(deadline).await? {
                Next::Line(line) => self.check(&line)?,
                Next::Wrote => {}
                Next::End => {
                    return Err(match owed {
                        Some((_, id)) => format!(
                            "the server closed its output with a request unanswered (id {})",
                            shown(&id)
                        ),
                        None => {
                            "the server closed its output before every line was written".to_owned()
                        }
                    });
                }
                Next::Late => {
                    return Err(match owed {
                        Some((_, id)) => format!(
                            "no answer to id {} within {ANSWER_WITHIN:?} of its line",
                            shown(&id)
                        ),
                        None => format!("the lines were not all read within {SESSION_WITHIN:?}"),
                    });
                }
            }
        }
    }

    /// After the client closed its end: the rest of the answers, then the end
    /// of the server's output.
    async fn until_closed(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + END_WITHIN;
        loop {
            match self.next(deadline).await? {
                Next::Line(line) => self.check(&line)?,
                Next::Wrote => {}
                Next::End => return Ok(()),
                Next::Late => {
                    return Err(format!(
                        "the server did not close its output within {END_WITHIN:?} of its input's end"
                    ));
                }
            }
        }
    }

    /// The earliest deadline among answers still owed, with its id; `None`
    /// when none is owed. An answer is owed from when the last line asking
    /// for its id was written; one whose line is not written yet only by the
    /// session's end.
    fn owed(&self) -> Option<(Instant, Key)> {
        let mut earliest: Option<(Instant, Key)> = None;
        for (id, (at_least, _)) in &self.expected.bounds {
            if self.got.borrow().get(id).copied().unwrap_or(0) >= *at_least {
                continue;
            }
            let mut last = None;
            for (asks, written) in self.expected.asks.iter().zip(self.written) {
                if asks.as_ref() == Some(id) {
                    last = Some(written.get());
                }
            }
            let deadline = match last {
                Some(Some(at)) => at + ANSWER_WITHIN,
                _ => self.started + SESSION_WITHIN,
            };
            if earliest.as_ref().is_none_or(|(at, _)| deadline < *at) {
                earliest = Some((deadline, id.clone()));
            }
        }
        earliest
    }

    /// What comes first: a line from the server, the end of its output, the
    /// deadline, or a line written.
    async fn next(&mut self, deadline: Instant) -> Result<Next, String> {
        if let Some(until) = self.stalled.take()
            && until > Instant::now()
        {
            tokio::time::sleep_until(until).await;
        }
        // Cancel-safe: what `read_until` read stays in `partial`.
        let read = self.lines.read_until(b'\n', &mut self.partial);
        let next = tokio::select! {
            biased;
            read = read => match read {
                Err(err) => return Err(format!("reading the server's output failed: {err}")),
                Ok(0) if self.partial.is_empty() => Next::End,
                Ok(_) => Next::Line(std::mem::take(&mut self.partial)),
            },
            () = self.wrote.notified() => Next::Wrote,
            () = tokio::time::sleep_until(deadline) => Next::Late,
        };
        if let Next::Line(line) = &next {
            self.transcript
                .borrow_mut()
                .push(Event::Received(line.clone()));
        }
        Ok(next)
    }

    /// Checks one line the server wrote: a JSON-RPC message; an answer with
    /// an id a line asked for, no more often than lines asked, and of the
    /// shape known for it.
    fn check(&mut self, line: &[u8]) -> Result<(), String> {
        let shown_line = || String::from_utf8_lossy(&line[..line.len().min(300)]).into_owned();
        let message: Value = serde_json::from_slice(line).map_err(|err| {
            format!(
                "the server wrote a line that is not JSON ({err}): {}",
                shown_line()
            )
        })?;
        if message.get("jsonrpc") != Some(&json!("2.0")) {
            return Err(format!(
                "the server wrote a message without jsonrpc 2.0: {}",
                shown_line()
            ));
        }
        if let Some(method) = message.get("method") {
            // A notification of the server's (progress): never a request.
            if !method.is_string() || message.get("id").is_some() {
                return Err(format!(
                    "the server sent a request or a malformed notification: {}",
                    shown_line()
                ));
            }
            return Ok(());
        }
        self.answers += 1;
        // No id to give: JSON-RPC 2.0 writes `"id": null`, MCP's schema since
        // 2025-11-25 leaves the member out (rmcp does); both mean the same.
        let raw_id = message.get("id").unwrap_or(&Value::Null);
        let id = answer_key(&message);
        if id.is_none() && !raw_id.is_null() {
            return Err(format!(
                "an answer whose id is neither null nor a request id: {}",
                shown_line()
            ));
        }
        let outcome = (message.get("result"), message.get("error"));
        match outcome {
            (Some(_), None) => {}
            (None, Some(error)) => {
                let fine = error.get("code").is_some_and(Value::is_i64)
                    && error.get("message").is_some_and(Value::is_string);
                if !fine {
                    return Err(format!("a malformed error: {}", shown_line()));
                }
            }
            _ => {
                return Err(format!(
                    "an answer with neither or both of result and error: {}",
                    shown_line()
                ));
            }
        }
        let count = {
            let mut got = self.got.borrow_mut();
            let count = got.entry(id.clone()).or_default();
            *count += 1;
            *count
        };
        self.answered.notify_one();
        let at_most = self.expected.bounds.get(&id).map_or(0, |bounds| bounds.1);
        if count > at_most {
            return Err(format!(
                "{} answers with id {} where {at_most} lines asked for one: {}",
                count,
                shown(&id),
                shown_line()
            ));
        }
        if self.expected.pings.contains(&id)
            && message != json!({"jsonrpc": "2.0", "id": raw_id, "result": {}})
        {
            return Err(format!(
                "a ping answered otherwise than with {{}}: {}",
                shown_line()
            ));
        }
        if let Some(tool) = self.expected.tool_results.get(&id) {
            let result = &message["result"];
            let tool_result = result["content"].is_array() && result["isError"].is_boolean();
            if result["isError"] == false {
                self.succeeded.push(tool.clone());
            }
            if !tool_result {
                return Err(format!(
                    "a tools/call of a served tool answered without a tool result: {}",
                    shown_line()
                ));
            }
        }
        Ok(())
    }
}

/// An id as the answer shows it.
pub(super) fn shown(id: &Key) -> String {
    match id {
        Some(id) => serde_json::to_string(&id.clone().into_json_value()).unwrap_or_default(),
        None => "null".to_owned(),
    }
}

/// The transcript of a session, each line cut to `width` bytes.
pub(super) fn transcript(lines: &[Vec<u8>], events: &[Event], width: usize) -> String {
    let cut = |bytes: &[u8]| {
        let mut shown = bytes[..bytes.len().min(width)].escape_ascii().to_string();
        if bytes.len() > width {
            let _ = write!(shown, "... ({} bytes)", bytes.len());
        }
        shown
    };
    let mut out = String::new();
    for event in events {
        let _ = match event {
            Event::Sent(n, resolved) => {
                writeln!(out, "-> {}", cut(resolved.as_deref().unwrap_or(&lines[*n])))
            }
            Event::Received(line) => {
                writeln!(out, "<- {}", cut(line.strip_suffix(b"\n").unwrap_or(line)))
            }
            Event::Closed => writeln!(out, "-> (end of input)"),
        };
    }
    out
}

/// Panics on this thread, seen by a hook: a panic in a task of the server is
/// caught by tokio and shows only as a missing answer, or not at all.
mod panics {
    use super::{Once, RefCell};

    thread_local! {
        static SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    /// Installs the hook once (it then calls the one it replaced).
    pub(super) fn install() {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let _ = SEEN.try_with(|seen| seen.borrow_mut().push(info.to_string()));
                previous(info);
            }));
        });
    }

    /// How many panics this thread has seen.
    pub(super) fn count() -> usize {
        SEEN.with(|seen| seen.borrow().len())
    }

    /// The first panic this thread saw since it had seen `before`.
    pub(super) fn since(before: usize) -> Option<String> {
        SEEN.with(|seen| seen.borrow().get(before).cloned())
    }
}
