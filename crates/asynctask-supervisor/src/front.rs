//! The front: what `asynctask mcp --durable` runs — it reaches the workspace's
//! supervisor (starting one when none answers) and relays its stdio to it; and
//! the one-question connections of `supervisor status` and `stop`.

use std::io;
use std::path::Path;
use std::process::Child;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use asynctask_mcp::{Line, LineReader, MAX_LINE_BYTES, Opening, TerminationSignals};
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::error::SupervisorError;
use crate::protocol::RELAY_PROTOCOL;
use crate::relay::{ClientSession, Ended, SessionStream, relay};
use crate::state::StateDir;

/// Connects to the supervisor of `state` for `kind` (`session`, `status` or
/// `stop`), sending the preamble.
///
/// # Errors
///
/// The I/O error: `NotFound` or `ConnectionRefused` when no supervisor runs.
pub async fn connect(state: &StateDir, kind: &str) -> io::Result<UnixStream> {
    connect_with(
        state,
        json!({ "asynctask": kind, "protocol": RELAY_PROTOCOL }),
    )
    .await
}

async fn connect_with(state: &StateDir, preamble: Value) -> io::Result<UnixStream> {
    let socket = state.socket();
    let mut stream = UnixStream::connect(&socket).await?;
    // The supervisor checks who connects; the front checks who listens: a
    // socket another user put in place must never see our session.
    let peer = stream.peer_cred()?.uid();
    if let Some(me) = crate::state::effective_uid() {
        check_supervisor_uid(&socket, peer, me)?;
    }
    let mut preamble = preamble.to_string();
    preamble.push('\n');
    stream.write_all(preamble.as_bytes()).await?;
    Ok(stream)
}

/// Checks that the process listening on `socket` runs as `me`: the
/// supervisor of our own state directory always does.
///
/// # Errors
///
/// `PermissionDenied`, naming the socket and both users, when `peer` is
/// another user.
fn check_supervisor_uid(socket: &Path, peer: u32, me: u32) -> io::Result<()> {
    if peer == me {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "the process listening on {} runs as uid {peer}, not as you (uid {me}): it is no \
             supervisor of yours, and nothing was sent to it; remove the socket, or give this \
             project a state directory of your own with --state-dir",
            socket.display()
        ),
    ))
}

/// Asks the supervisor of `state` one question (`status` or `stop`) and returns
/// its one-line answer.
///
/// # Errors
///
/// The I/O error (`NotFound`/`ConnectionRefused`: no supervisor runs), or
/// `InvalidData` for an answer that is not JSON.
pub async fn ask(state: &StateDir, kind: &str) -> io::Result<Value> {
    let stream = connect(state, kind).await?;
    let line = first_line(BufReader::new(stream), MAX_LINE_BYTES).await?;
    serde_json::from_slice(&line).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
}

/// Relays an MCP client (`client`, `to_client`: this process's stdio, once
/// [`open_session`](asynctask_mcp::open_session) read its opening) to the
/// supervisor of `state`, which works in `project`, starting one with `start`
/// when none answers, until the client goes away or a termination signal
/// arrives. Logs one line once the session is served.
///
/// A session counts as connected once the supervisor acknowledges it. A
/// supervisor that closes the connection before that is ending (it was idle):
/// the relay starts another (which exits at once, status 0, while the ending
/// one still holds the lock, and is then started again) and tries again, for
/// up to 10 s in all. One that exits with another status failed: its own
/// error (what it printed on stderr) is the error. A supervisor this relay
/// started is waited for (reaped) by a thread of its own should it end while
/// the relay runs.
///
/// Every response the supervisor sends is written to the client and then
/// confirmed to the supervisor ([`DELIVERED_NOTIFICATION`](asynctask_mcp::DELIVERED_NOTIFICATION)), which marks the results it
/// carried as delivered only then: a relay killed in between leaves them
/// pending for the next session.
///
/// **A supervisor that goes away** (stopped from another shell, killed,
/// crashed) does not end the session: every request it had not answered is
/// answered at once with an error that says so (a `tools/call` with a tool
/// result whose `isError` is true), and the relay reaches or starts another
/// supervisor and opens the session with it again (the client's `initialize`
/// and `notifications/initialized`, whose answer the client already had).
/// While none can be reached, each request is answered with the error and
/// the next one tries again.
///
/// # Errors
///
/// [`SupervisorError::Start`] when a supervisor cannot be started,
/// [`SupervisorError::Exited`] when one started exits with its own error,
/// [`SupervisorError::Unreachable`] when none acknowledges the session in
/// time — each for the first connection only.
pub async fn relay_stdio<R, W>(
    state: &StateDir,
    project: &Path,
    opening: Opening,
    mut client: LineReader<R>,
    mut to_client: W,
    start: impl Fn() -> io::Result<Child>,
) -> Result<(), SupervisorError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let session = ClientSession::default();
    let mut opening = opening;
    opening.replay.retain(|line| session.note_client_line(line));
    let mut signals = TerminationSignals::new().map_err(SupervisorError::Signals)?;
    let mut stream = connect_or_start(state, project, &start).await?;
    tracing::info!(
        "MCP front on stdio: project {}, supervisor {} at {}",
        project.display(),
        stream
            .pid
            .map_or_else(|| "?".to_owned(), |pid| pid.to_string()),
        state.socket().display()
    );
    let (mut replay, mut answered) = (opening.replay, opening.answered);
    loop {
        let stop = async {
            signals.recv().await;
        };
        let ended = relay(
            &mut client,
            &mut to_client,
            stream,
            std::mem::take(&mut replay),
            answered.take(),
            &session,
            stop,
        )
        .await;
        match ended {
            Ended::Client | Ended::Stopped => return Ok(()),
            Ended::Supervisor => {}
        }
        tracing::warn!(
            "the supervisor of {} went away; its calls in flight get an error, and the \
             session goes on with another supervisor",
            state.path().display()
        );
        answer_lost_calls(&session, &mut to_client, SUPERVISOR_GONE).await;
        (replay, answered) = session.reopening();
        // What opens the session (`initialize` and `initialized`, or nothing
        // after a `server/discover` opening): requests after it that failed
        // to reach a supervisor were answered so, and must never run later.
        let opening = replay.len();
        stream = loop {
            match connect_or_start(state, project, &start).await {
                Ok(stream) => break stream,
                Err(err) => {
                    let why = error_line(&err);
                    tracing::error!("cannot reach a supervisor again: {why}");
                    // Each request waits for the next attempt, and is answered
                    // with the reason when it fails too.
                    let Some(line) = next_request(&mut client, &session, &mut signals).await else {
                        return Ok(());
                    };
                    replay.push(line);
                    if let Ok(stream) = connect_or_start(state, project, &start).await {
                        break stream;
                    }
                    let text = format!("{UNREACHABLE}: {why}");
                    answer_lost_calls(&session, &mut to_client, &text).await;
                    replay.truncate(opening);
                }
            }
        };
        tracing::info!(
            "the session goes on with supervisor {}",
            stream
                .pid
                .map_or_else(|| "?".to_owned(), |pid| pid.to_string())
        );
    }
}

/// What a call in flight is answered when its supervisor went away.
const SUPERVISOR_GONE: &str = "The asynctask supervisor ended while this call ran (it was \
    stopped with `asynctask supervisor stop`, or it crashed); this session goes on with a new \
    one. Call again if you still need this; check_async_tasks shows how the workspace's tasks \
    ended (a task the old supervisor ran is reported as cancelled or interrupted).";

/// What a call is answered when no supervisor can be reached.
const UNREACHABLE: &str = "The asynctask supervisor cannot be reached; this call did not \
    run, and the next call tries again";

/// An error and its sources on one line.
fn error_line(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string().replace('\n', "; ");
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The client's next line that is a request (noting every line read), or
/// `None` when its input ends or a signal arrives.
async fn next_request<R: AsyncBufRead + Unpin>(
    client: &mut LineReader<R>,
    session: &ClientSession,
    signals: &mut TerminationSignals,
) -> Option<Vec<u8>> {
    loop {
        let line = tokio::select! {
            line = client.next() => line.ok()??,
            _ = signals.recv() => return None,
        };
        let Line::Whole(line) = line else { continue };
        if !session.note_client_line(&line) {
            continue;
        }
        if serde_json::from_slice::<Value>(&line)
            .is_ok_and(|message| message.get("id").is_some() && message.get("method").is_some())
        {
            return Some(line);
        }
    }
}

/// Answers every request the session waits on with `text`: a `tools/call`
/// with a tool error, any other request with a JSON-RPC error.
async fn answer_lost_calls<W: AsyncWrite + Unpin>(
    session: &ClientSession,
    out: &mut W,
    text: &str,
) {
    for (id, method) in session.take_in_flight() {
        let answer = if method == "tools/call" {
            json!({"jsonrpc": "2.0", "id": id, "result": {
                "content": [{"type": "text", "text": text}],
                "isError": true,
            }})
        } else {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": text}})
        };
        let mut line = answer.to_string();
        line.push('\n');
        if out.write_all(line.as_bytes()).await.is_err() || out.flush().await.is_err() {
            return;
        }
    }
}

/// How long a front tries to reach a supervisor: to start one, to let one that
/// is ending make way, and for the new one to recover its store.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest acknowledgement a front reads.
const ACK_MAX_BYTES: usize = 4096;

/// The first line `reader` gives, of at most `max` bytes.
///
/// # Errors
///
/// The I/O error; `UnexpectedEof` when the input ends before a line;
/// `InvalidData` for a line longer than `max`.
async fn first_line(reader: impl AsyncBufRead + Unpin, max: usize) -> io::Result<Vec<u8>> {
    match LineReader::new(reader, max).next().await? {
        Some(Line::Whole(line)) => Ok(line),
        Some(Line::TooLong { len, .. }) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a line of {len} bytes, more than the {max} expected"),
        )),
        None => Err(io::ErrorKind::UnexpectedEof.into()),
    }
}

/// How long a front waits for the supervisor to acknowledge its session.
const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// How many lines of the supervisor's log an error shows.
const LOG_TAIL_LINES: usize = 20;

/// Why a supervisor did not take a session.
#[derive(Debug, thiserror::Error)]
enum Unacknowledged {
    #[error(
        "the supervisor closed the connection before acknowledging the session (it was ending)"
    )]
    Closed,
    #[error("the supervisor did not acknowledge the session within {} s", ACK_TIMEOUT.as_secs())]
    Silent,
    #[error("the supervisor answered {0} instead of acknowledging the session")]
    Answer(Value),
    #[error("the supervisor refused the session: {0}")]
    Refused(String),
    #[error(
        "the supervisor runs another version of asynctask (relay protocol {}, this one {RELAY_PROTOCOL}); \
         stop it with `asynctask supervisor stop` and the next session starts a current one",
        .0.as_ref().map_or_else(|| "1".to_owned(), Value::to_string)
    )]
    Protocol(Option<Value>),
}

impl From<Unacknowledged> for io::Error {
    fn from(why: Unacknowledged) -> Self {
        let kind = match why {
            Unacknowledged::Closed => io::ErrorKind::UnexpectedEof,
            Unacknowledged::Silent => io::ErrorKind::TimedOut,
            Unacknowledged::Answer(_)
            | Unacknowledged::Refused(_)
            | Unacknowledged::Protocol(_) => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, why)
    }
}

/// Connects as a session of `project` and waits for the supervisor to
/// acknowledge it. The preamble carries the nesting depth this process's
/// environment gives ([`DEPTH_ENV`](asynctask_tools::DEPTH_ENV)), so that a
/// session whose client runs inside a subagent launches one level deeper;
/// `null` when it runs inside a subagent whose depth it cannot read (see
/// [`Nesting::from_env`](asynctask_tools::Nesting::from_env)).
pub(crate) async fn open_session(state: &StateDir, project: &Path) -> io::Result<SessionStream> {
    let nesting = asynctask_tools::Nesting::from_env();
    let depth = (!nesting.depth_unknown).then_some(nesting.depth);
    let preamble = json!({
        "asynctask": "session",
        "protocol": RELAY_PROTOCOL,
        "project": project.to_string_lossy(),
        "depth": depth,
    });
    let (read, write) = connect_with(state, preamble).await?.into_split();
    let mut read = BufReader::new(read);
    // Only the acknowledgement is taken: what follows it stays in `read`.
    let line = match tokio::time::timeout(ACK_TIMEOUT, first_line(&mut read, ACK_MAX_BYTES)).await {
        Err(_) => return Err(Unacknowledged::Silent.into()),
        Ok(Err(err)) if err.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(Unacknowledged::Closed.into());
        }
        Ok(line) => line?,
    };
    let ack: Value = serde_json::from_slice(&line)
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
    if ack.get("asynctask").and_then(Value::as_str) == Some("refused")
        && ack.get("protocol").and_then(Value::as_u64) == Some(RELAY_PROTOCOL)
        && let Some(reason) = ack.get("reason").and_then(Value::as_str)
    {
        return Err(Unacknowledged::Refused(reason.to_owned()).into());
    }
    if ack.get("asynctask").and_then(Value::as_str) != Some("session") {
        return Err(Unacknowledged::Answer(ack).into());
    }
    if ack.get("protocol").and_then(Value::as_u64) != Some(RELAY_PROTOCOL) {
        return Err(Unacknowledged::Protocol(ack.get("protocol").cloned()).into());
    }
    let pid = ack.get("pid").and_then(Value::as_u64);
    let theirs = ack.get("build").and_then(Value::as_str);
    if let Some(warning) =
        crate::protocol::stale_build_warning(crate::protocol::build(), theirs, pid)
    {
        tracing::warn!("{warning}");
    }
    Ok(SessionStream { read, write, pid })
}

/// A supervisor this front started: the process, and the end of what it
/// printed on stderr (its error, should it fail to start).
struct Started {
    child: Child,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Set once its stderr reached its end (the process closed it: it exited).
    done: std::sync::mpsc::Receiver<()>,
}

/// How much of a starting supervisor's stderr is kept: its end.
const STDERR_KEPT: usize = 8 * 1024;

impl Started {
    fn new(mut child: Child) -> Self {
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (done_tx, done) = std::sync::mpsc::channel();
        if let Some(mut pipe) = child.stderr.take() {
            let kept = Arc::clone(&stderr);
            let spawned = std::thread::Builder::new()
                .name("asynctask-supervisor-stderr".to_owned())
                .spawn(move || {
                    use std::io::Read;
                    let mut chunk = [0u8; 4096];
                    while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                        let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
                        kept.extend_from_slice(&chunk[..n]);
                        let over = kept.len().saturating_sub(STDERR_KEPT);
                        kept.drain(..over);
                    }
                    let _ = done_tx.send(());
                });
            if let Err(err) = spawned {
                tracing::warn!(%err, "cannot start a thread to read the supervisor's errors");
            }
        }
        Started {
            child,
            stderr,
            done,
        }
    }

    /// What it printed on stderr, once its end was read (waiting a moment
    /// for it: the process has exited).
    fn stderr(&self) -> String {
        let _ = self.done.recv_timeout(Duration::from_secs(1));
        let kept = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&kept).trim().to_owned()
    }
}

/// Connects as a session of `project`, starting a supervisor when none
/// answers (again if the one started has ended with status 0: it found an
/// ending supervisor still holding the lock) and waiting for it, up to
/// [`START_TIMEOUT`].
pub(crate) async fn connect_or_start(
    state: &StateDir,
    project: &Path,
    start: impl Fn() -> io::Result<Child>,
) -> Result<SessionStream, SupervisorError> {
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    let mut started: Option<Started> = None;
    let mut delay = Duration::from_millis(10);
    let outcome = loop {
        let why = match open_session(state, project).await {
            Ok(session) => break Ok(session),
            Err(why) => why,
        };
        // A supervisor that answered something else than an acknowledgement
        // (another version of asynctask), or a socket another user listens
        // on, answers the same next time.
        if matches!(
            why.kind(),
            io::ErrorKind::InvalidData | io::ErrorKind::PermissionDenied
        ) || tokio::time::Instant::now() >= deadline
        {
            break Err(why);
        }
        let ended = match started.as_mut().map(|started| started.child.try_wait()) {
            None | Some(Err(_)) => true,
            Some(Ok(None)) => false,
            Some(Ok(Some(status))) if status.success() => true,
            Some(Ok(Some(status))) => {
                let stderr = started.as_ref().map(Started::stderr).unwrap_or_default();
                return Err(SupervisorError::Exited {
                    state: state.path().to_owned(),
                    status,
                    stderr,
                });
            }
        };
        if ended {
            match start() {
                Ok(child) => started = Some(Started::new(child)),
                Err(source) => {
                    return Err(SupervisorError::Start {
                        state: state.path().to_owned(),
                        source,
                    });
                }
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(200));
    };
    if let Some(started) = started {
        reap(started.child);
    }
    outcome.map_err(|source| SupervisorError::Unreachable {
        state: state.path().to_owned(),
        log: state.log_file(),
        log_tail: log_tail(&state.log_file(), LOG_TAIL_LINES),
        source,
    })
}

/// Waits for `child` on a thread of its own, so that it leaves no zombie when
/// it ends before this process does.
fn reap(mut child: Child) {
    let spawned = std::thread::Builder::new()
        .name("asynctask-reap".to_owned())
        .spawn(move || child.wait());
    if let Err(err) = spawned {
        tracing::warn!(%err, "cannot start a thread to wait for the supervisor");
    }
}

/// The last `lines` lines of the file at `path` (empty when it cannot be
/// read), from at most its last 64 KiB.
fn log_tail(path: &Path, lines: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const MAX: u64 = 64 * 1024;
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    if len > MAX && file.seek(SeekFrom::Start(len - MAX)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_socket_another_user_listens_on_is_refused() {
        let socket = Path::new("/p/.asynctask/supervisor.sock");
        assert!(check_supervisor_uid(socket, 1000, 1000).is_ok());
        let refused = check_supervisor_uid(socket, 0, 1000).expect_err("another user");
        assert_eq!(refused.kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(
            refused.to_string(),
            "the process listening on /p/.asynctask/supervisor.sock runs as uid 0, not as you \
             (uid 1000): it is no supervisor of yours, and nothing was sent to it; remove the \
             socket, or give this project a state directory of your own with --state-dir"
        );
    }
}
