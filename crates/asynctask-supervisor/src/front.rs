//! The front: what `asynctask mcp --durable` runs — it reaches the workspace's
//! supervisor (starting one when none answers) and relays its stdio to it; and
//! the one-question connections of `supervisor status` and `stop`.

use std::io;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use asynctask_mcp::TerminationSignals;
use asynctask_mcp::{Line, LineReader, MAX_LINE_BYTES};
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::error::SupervisorError;
use crate::protocol::RELAY_PROTOCOL;
use crate::relay::relay;
use crate::state::StateDir;

/// Connects to the supervisor of `state` for `kind` (`session`, `status` or
/// `stop`), sending the preamble: with the nesting depth this process's
/// environment gives ([`DEPTH_ENV`](asynctask_tools::DEPTH_ENV)), so that a
/// session whose client runs inside a subagent launches one level deeper.
///
/// # Errors
///
/// The I/O error: `NotFound` or `ConnectionRefused` when no supervisor runs.
pub async fn connect(state: &StateDir, kind: &str) -> io::Result<UnixStream> {
    let mut stream = UnixStream::connect(state.socket()).await?;
    let depth = asynctask_tools::Nesting::from_env().depth;
    let mut preamble =
        json!({ "asynctask": kind, "protocol": RELAY_PROTOCOL, "depth": depth }).to_string();
    preamble.push('\n');
    stream.write_all(preamble.as_bytes()).await?;
    Ok(stream)
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

/// Relays this process's stdio (an MCP client) to the supervisor of `state`,
/// starting one with `start` when none answers, until the client or the
/// supervisor goes away, or a termination signal arrives.
///
/// A session counts as connected once the supervisor acknowledges it. A
/// supervisor that closes the connection before that is ending (it was idle):
/// the relay starts another (which exits at once while the ending one still
/// holds the lock, and is then started again) and tries again, for up to 10 s
/// in all. A supervisor this relay started is waited for
/// (reaped) by a thread of its own should it end while the relay runs.
///
/// Every response the supervisor sends is written to stdout and then confirmed
/// to the supervisor ([`DELIVERED_NOTIFICATION`](asynctask_mcp::DELIVERED_NOTIFICATION)), which marks the results it
/// carried as delivered only then: a relay killed in between leaves them
/// pending for the next session.
///
/// # Errors
///
/// [`SupervisorError::Start`] when a supervisor cannot be started,
/// [`SupervisorError::Unreachable`] when none acknowledges the session in time.
pub async fn relay_stdio(
    state: &StateDir,
    start: impl Fn() -> io::Result<Child>,
) -> Result<(), SupervisorError> {
    let session = connect_or_start(state, start).await?;
    let mut signals = TerminationSignals::new().map_err(SupervisorError::Signals)?;
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    relay(stdin, stdout, session, async move {
        signals.recv().await;
    })
    .await;
    Ok(())
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
            Unacknowledged::Answer(_) | Unacknowledged::Protocol(_) => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, why)
    }
}

/// A session's connection to the supervisor, acknowledged.
pub(crate) struct SessionStream {
    pub(crate) read: BufReader<OwnedReadHalf>,
    pub(crate) write: OwnedWriteHalf,
}

/// Connects as a session and waits for the supervisor to acknowledge it.
pub(crate) async fn open_session(state: &StateDir) -> io::Result<SessionStream> {
    let (read, write) = connect(state, "session").await?.into_split();
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
    if ack.get("asynctask").and_then(Value::as_str) != Some("session") {
        return Err(Unacknowledged::Answer(ack).into());
    }
    if ack.get("protocol").and_then(Value::as_u64) != Some(RELAY_PROTOCOL) {
        return Err(Unacknowledged::Protocol(ack.get("protocol").cloned()).into());
    }
    Ok(SessionStream { read, write })
}

/// Connects as a session, starting a supervisor when none answers (again if
/// the one started has ended: it found an ending supervisor still holding the
/// lock) and waiting for it, up to [`START_TIMEOUT`].
pub(crate) async fn connect_or_start(
    state: &StateDir,
    start: impl Fn() -> io::Result<Child>,
) -> Result<SessionStream, SupervisorError> {
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    let mut started: Option<Child> = None;
    let mut delay = Duration::from_millis(10);
    let outcome = loop {
        let why = match open_session(state).await {
            Ok(session) => break Ok(session),
            Err(why) => why,
        };
        // A supervisor that answered something else than an acknowledgement
        // (another version of asynctask) answers the same next time.
        if why.kind() == io::ErrorKind::InvalidData || tokio::time::Instant::now() >= deadline {
            break Err(why);
        }
        let ended = match started.as_mut().map(Child::try_wait) {
            None | Some(Ok(Some(_)) | Err(_)) => true,
            Some(Ok(None)) => false,
        };
        if ended {
            match start() {
                Ok(child) => started = Some(child),
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
    if let Some(child) = started {
        reap(child);
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
