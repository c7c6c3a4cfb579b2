//! Durable serving: one supervisor per workspace owns the registry and the
//! subagents, and every MCP session is a thin relay to it over a Unix socket,
//! so tasks outlive the sessions that launched them.
//!
//! On the socket, a connection's first line says what it wants
//! (`{"asynctask":"session"}`, `"status"` or `"stop"`). A session's connection
//! then carries the client's MCP messages both ways, unchanged, plus one
//! notification of ours from the relay: [`DELIVERED_NOTIFICATION`] after it wrote
//! a response to its client, which is when the supervisor marks the results that
//! response carried as delivered.

use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use asynctask_model::AsyncTaskStatus;
use asynctask_runtime::AsyncTaskRuntime;
use rmcp::ServiceExt;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::server::{AsyncTaskMcpServer, McpError, McpServerOptions, Signals, log_task_ends};
use crate::session::Sessions;
use crate::transport::{AckMode, DELIVERED_NOTIFICATION};

/// How long a connection may take to say what it wants.
const PREAMBLE_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest first line a connection may send.
const PREAMBLE_MAX_BYTES: usize = 1024;

/// Where a workspace's supervisor keeps its state: the socket sessions connect
/// to, the lock that keeps one supervisor per workspace, its log, its store and
/// the subagents' output files. The directory is private to the user who owns
/// it (mode 0700).
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use asynctask_mcp::StateDir;
///
/// let state = StateDir::new("/work/project/.asynctask");
/// assert_eq!(state.socket(), Path::new("/work/project/.asynctask/supervisor.sock"));
/// assert_eq!(state.store(), Path::new("/work/project/.asynctask/tasks.db"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    path: PathBuf,
}

impl StateDir {
    /// The state directory at `path` (nothing is created yet).
    #[must_use]
    pub fn new(path: impl Into<PathBuf>) -> Self {
        StateDir { path: path.into() }
    }

    /// The directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The socket sessions and commands connect to.
    #[must_use]
    pub fn socket(&self) -> PathBuf {
        self.path.join("supervisor.sock")
    }

    /// Checks that the socket's path fits a Unix socket address (at most
    /// [`MAX_SOCKET_PATH`] bytes).
    ///
    /// # Errors
    ///
    /// [`SocketPathTooLong`], naming the path.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_mcp::StateDir;
    ///
    /// assert!(StateDir::new("/work/project/.asynctask").check_socket_path().is_ok());
    /// let deep = format!("/{}", "d".repeat(120));
    /// assert!(StateDir::new(deep).check_socket_path().is_err());
    /// ```
    pub fn check_socket_path(&self) -> Result<(), SocketPathTooLong> {
        let socket = self.socket();
        let len = socket.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(SocketPathTooLong { path: socket, len });
        }
        Ok(())
    }

    /// Where the socket's name is moved while an idle supervisor makes sure no
    /// connection is on its way before it ends.
    fn socket_aside(&self) -> PathBuf {
        self.path.join("supervisor.sock.closing")
    }

    /// The lock file that keeps one supervisor per workspace.
    #[must_use]
    pub fn lock_file(&self) -> PathBuf {
        self.path.join("supervisor.lock")
    }

    /// The supervisor's log (its stderr).
    #[must_use]
    pub fn log_file(&self) -> PathBuf {
        self.path.join("supervisor.log")
    }

    /// The task store.
    #[must_use]
    pub fn store(&self) -> PathBuf {
        self.path.join("tasks.db")
    }

    /// Where subagents' whole outputs are kept.
    #[must_use]
    pub fn outputs(&self) -> PathBuf {
        self.path.join("outputs")
    }

    /// Creates the directory (and its parents) if missing, private to its
    /// owner: a new directory gets mode 0700, an existing one that other users
    /// may enter is refused.
    ///
    /// # Errors
    ///
    /// The I/O error, or `PermissionDenied` for a directory open to others.
    pub fn create(&self) -> io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.path)?;
        let mode = std::fs::metadata(&self.path)?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is open to other users (mode {:o}); make it private with chmod 700",
                    self.path.display(),
                    mode & 0o777
                ),
            ));
        }
        Ok(())
    }
}

/// The longest path a Unix socket can be bound to or connected at, in bytes
/// (the address holds 108, the last a NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// A state directory so deep that its socket's path does not fit a Unix socket
/// address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the supervisor's socket {} would be {len} bytes long, more than the {MAX_SOCKET_PATH} a \
     Unix socket allows: choose a shorter state directory with --state-dir",
    path.display()
)]
pub struct SocketPathTooLong {
    /// The socket's path.
    pub path: PathBuf,
    /// Its length in bytes.
    pub len: usize,
}

/// How a supervisor runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SupervisorOptions {
    /// The options of each session's MCP server.
    pub server: McpServerOptions,
    /// The supervisor exits by itself once no session is connected and no task
    /// runs for this long (default 10 minutes).
    pub idle_exit: Duration,
}

impl Default for SupervisorOptions {
    fn default() -> Self {
        SupervisorOptions {
            server: McpServerOptions::default(),
            idle_exit: Duration::from_secs(600),
        }
    }
}

impl SupervisorOptions {
    /// Replaces [`idle_exit`](Self::idle_exit).
    #[must_use]
    pub fn with_idle_exit(mut self, idle_exit: Duration) -> Self {
        self.idle_exit = idle_exit;
        self
    }

    /// Replaces [`server`](Self::server).
    #[must_use]
    pub fn with_server(mut self, server: McpServerOptions) -> Self {
        self.server = server;
        self
    }
}

/// Why a supervisor ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SupervisorExit {
    /// `asynctask supervisor stop` asked it to: every task was cancelled.
    Stopped,
    /// No session and no running task for the idle time.
    Idle,
    /// A termination signal (its name, `SIGTERM` say): the tasks still running
    /// failed as interrupted by it, and their subagents were ended.
    Signal(&'static str),
}

/// The lock that makes a supervisor the only one of its workspace, held for its
/// life (an advisory lock dies with its process, so a killed supervisor never
/// blocks the next).
#[derive(Debug)]
pub struct SupervisorLock {
    _file: std::fs::File,
}

impl SupervisorLock {
    /// Takes the workspace's supervisor lock; `Ok(None)` when another
    /// supervisor holds it.
    ///
    /// # Errors
    ///
    /// The I/O error when the lock file cannot be opened.
    pub fn acquire(state: &StateDir) -> io::Result<Option<Self>> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(state.lock_file())?;
        match file.try_lock() {
            Ok(()) => Ok(Some(SupervisorLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(err)) => Err(err),
        }
    }
}

/// How long the supervisor waits after a connection it could not accept.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// A workspace's supervisor: serves MCP sessions over `runtime` on the state
/// directory's socket until it is stopped, idle, or signalled.
///
/// Each connection must come from the user running the supervisor (checked with
/// the socket's peer credentials). A session's tasks record it as their origin;
/// a result goes to the session that launched its task while that session is
/// connected, and to the next session that calls once it is gone. A session
/// that disconnects leaves its background tasks running (their timeouts still
/// apply); only its synchronous calls in flight end.
pub struct Supervisor {
    runtime: Arc<AsyncTaskRuntime>,
    state: StateDir,
    options: SupervisorOptions,
    sessions: Sessions,
    /// The uid that owns the state directory: the only one served.
    owner: u32,
    _lock: SupervisorLock,
}

impl fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Supervisor")
            .field("state", &self.state)
            .field("options", &self.options)
            .field("sessions", &self.sessions)
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor of `runtime` for the workspace whose state is `state`,
    /// holding its `lock`.
    ///
    /// # Errors
    ///
    /// The I/O error when the state directory cannot be read (its owner is the
    /// only user the supervisor serves).
    pub fn new(
        runtime: Arc<AsyncTaskRuntime>,
        state: StateDir,
        lock: SupervisorLock,
        options: SupervisorOptions,
    ) -> io::Result<Self> {
        let owner = std::fs::metadata(state.path())?.uid();
        let sessions = Sessions::on(Arc::clone(runtime.claims()));
        Ok(Supervisor {
            runtime,
            state,
            options,
            sessions,
            owner,
            _lock: lock,
        })
    }

    /// Listens and serves until stopped, idle or signalled; then shuts the
    /// runtime down and removes the socket.
    ///
    /// Only `stop` (`asynctask supervisor stop`) cancels the tasks. A
    /// termination signal (`SIGTERM`, `SIGINT`, `SIGHUP`) ends the supervisor,
    /// not the work it was given: each task still running fails as interrupted
    /// (`interrupted: the supervisor received SIGTERM`), journaled like any
    /// other end, so the next supervisor reports it once, and its subagent's
    /// process group is ended through its cancellation.
    ///
    /// The supervisor is idle while no session is connected, no connection is
    /// open (one that has yet to say what it wants counts) and no task runs.
    /// Once idle for [`idle_exit`](SupervisorOptions::idle_exit), it stops
    /// taking connections (the socket's name is moved aside: a new session
    /// finds no supervisor and starts one, which finds this one's lock held and
    /// exits at once, so the session's front starts another until one takes the
    /// lock), takes those already queued, and looks again: a connection taken then, or
    /// one that arrived meanwhile, puts the socket back and the supervisor goes
    /// on.
    ///
    /// # Errors
    ///
    /// [`McpError::Listen`] when the socket cannot be bound, [`McpError::Signals`]
    /// when signals cannot be listened for.
    pub async fn run(self) -> Result<SupervisorExit, McpError> {
        let socket = self.state.socket();
        let aside = self.state.socket_aside();
        // The lock is ours: a socket file left behind is a dead supervisor's.
        for stale in [&socket, &aside] {
            match std::fs::remove_file(stale) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(McpError::Listen {
                        path: stale.clone(),
                        source,
                    });
                }
            }
        }
        let mut listener =
            Some(
                UnixListener::bind(&socket).map_err(|source| McpError::Listen {
                    path: socket.clone(),
                    source,
                })?,
            );
        let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
        let mut signals = Signals::new()?;
        let _log = log_task_ends(&self.runtime);
        let stop = CancellationToken::new();
        let mut connections = JoinSet::new();
        let mut idle_since = Some(tokio::time::Instant::now());
        let mut ticks = tokio::time::interval(Duration::from_millis(500));
        let exit = loop {
            let event = tokio::select! {
                accepted = accept(listener.as_ref()) => match accepted {
                    Ok((stream, _)) => {
                        connections.spawn(self.context(&stop).serve(stream));
                        continue;
                    }
                    Err(err) => {
                        // Out of descriptors (EMFILE) and the like: the
                        // listener stays readable, so trying again at once
                        // would spin. Sessions' connections end meanwhile.
                        tracing::warn!(%err, "cannot accept a connection; trying again in 100 ms");
                        tokio::time::sleep(ACCEPT_RETRY).await;
                        continue;
                    }
                },
                Some(_) = connections.join_next() => continue,
                () = stop.cancelled() => break SupervisorExit::Stopped,
                signal = signals.recv() => {
                    self.interrupt(signal);
                    break SupervisorExit::Signal(signal);
                }
                _ = ticks.tick() => self.is_busy(&connections),
            };
            match (event, idle_since) {
                (true, _) => idle_since = None,
                (false, None) => idle_since = Some(tokio::time::Instant::now()),
                (false, Some(since)) if since.elapsed() >= self.options.idle_exit => {
                    let Some(idle) = listener.take() else {
                        break SupervisorExit::Idle;
                    };
                    match self.quiesce(idle, &mut connections, &stop) {
                        Quiesced::Busy(again) => {
                            listener = again;
                            idle_since = None;
                        }
                        Quiesced::Idle => break SupervisorExit::Idle,
                    }
                }
                (false, Some(_)) => {}
            }
        };
        tracing::info!(?exit, "supervisor ending");
        let _ = std::fs::remove_file(&socket);
        let _ = std::fs::remove_file(&aside);
        drop(listener);
        // Sessions end: their calls are cancelled, their unconfirmed claims
        // released.
        connections.abort_all();
        while connections.join_next().await.is_some() {}
        if let SupervisorExit::Signal(signal) = exit {
            // A task a session launched while the others were being failed.
            self.interrupt(signal);
        }
        self.runtime.shutdown().await;
        Ok(exit)
    }

    /// Fails every running task as interrupted by `signal` and cancels its run,
    /// which ends the subagent's process group. (Failed first: the run's own
    /// end then changes nothing, and nothing journals the task as cancelled.)
    fn interrupt(&self, signal: &str) {
        let manager = self.runtime.manager();
        let error = format!("interrupted: the supervisor received {signal}");
        for task in manager.running_tasks() {
            let token = manager.cancellation_token(task.id());
            if manager.fail_task(task.id(), error.as_str())
                && let Some(token) = token
            {
                token.cancel();
            }
        }
    }

    /// What a connection's handler needs.
    fn context(&self, stop: &CancellationToken) -> ConnectionContext {
        ConnectionContext {
            runtime: Arc::clone(&self.runtime),
            sessions: self.sessions.clone(),
            options: self.options,
            stop: stop.clone(),
            owner: self.owner,
        }
    }

    /// Whether a session is connected, a connection open, a task running, or a
    /// change waiting for the journal to record it (the runtime retries the
    /// write; ending now would lose it).
    fn is_busy(&self, connections: &JoinSet<()>) -> bool {
        let manager = self.runtime.manager();
        self.sessions.len() > 0
            || !connections.is_empty()
            || manager.counts().running > 0
            || manager.has_journal_backlog()
    }

    /// Stops taking connections, takes those already queued, and looks again:
    /// [`Quiesced::Idle`] when the supervisor is still idle (it ends, the
    /// socket's name gone), else the queued connections are served and the
    /// listener is back under its name. When the name cannot be moved aside the
    /// supervisor ends as before (a connection on its way then finds it closed,
    /// and its front starts another supervisor).
    fn quiesce(
        &self,
        listener: UnixListener,
        connections: &mut JoinSet<()>,
        stop: &CancellationToken,
    ) -> Quiesced {
        let (socket, aside) = (self.state.socket(), self.state.socket_aside());
        // From here on a new connection finds no socket; one that found it
        // before is in the listener's queue, or its own handler already runs.
        if let Err(err) = std::fs::rename(&socket, &aside) {
            tracing::warn!(%err, "cannot move the socket's name aside; ending anyway");
            return Quiesced::Idle;
        }
        let listener = match listener.into_std() {
            Ok(listener) => listener,
            Err(err) => {
                tracing::warn!(%err, "cannot take the queued connections; ending anyway");
                return Quiesced::Idle;
            }
        };
        let mut queued = Vec::new();
        loop {
            match listener.accept() {
                Ok((stream, _)) => queued.push(stream),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    tracing::warn!(%err, "cannot accept a queued connection");
                    break;
                }
            }
        }
        while connections.try_join_next().is_some() {}
        if queued.is_empty() && !self.is_busy(connections) {
            return Quiesced::Idle;
        }
        tracing::info!(
            queued = queued.len(),
            "a connection arrived as the supervisor was ending; it goes on"
        );
        if let Err(err) = std::fs::rename(&aside, &socket) {
            // Served at the aside name only: it ends when next idle.
            tracing::warn!(%err, "cannot put the socket's name back");
        }
        let listener = match UnixListener::from_std(listener) {
            Ok(listener) => Some(listener),
            Err(err) => {
                // No new connection is taken: it ends when next idle.
                tracing::warn!(%err, "cannot listen again");
                None
            }
        };
        for stream in queued {
            let stream = stream
                .set_nonblocking(true)
                .and_then(|()| UnixStream::from_std(stream));
            match stream {
                Ok(stream) => {
                    connections.spawn(self.context(stop).serve(stream));
                }
                Err(err) => tracing::warn!(%err, "cannot serve a queued connection"),
            }
        }
        Quiesced::Busy(listener)
    }
}

/// What an idle supervisor found when it stopped taking connections.
enum Quiesced {
    /// Nothing: it ends.
    Idle,
    /// A connection: it goes on, with its listener (`None` when it could not
    /// listen again).
    Busy(Option<UnixListener>),
}

/// The next connection on `listener`; never, without one.
async fn accept(
    listener: Option<&UnixListener>,
) -> io::Result<(UnixStream, tokio::net::unix::SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// Why a connection to the supervisor was refused or failed (logged; the
/// supervisor goes on).
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error("cannot read the peer's credentials")]
    PeerCredentials(#[source] io::Error),
    #[error(
        "a connection from uid {peer} refused: only the state directory's owner (uid {owner}) \
         may use this supervisor"
    )]
    Stranger { peer: u32, owner: u32 },
    #[error("no preamble within {} s", PREAMBLE_TIMEOUT.as_secs())]
    NoPreamble,
    #[error("cannot read the preamble")]
    ReadPreamble(#[source] io::Error),
    #[error("a bad preamble")]
    BadPreamble(#[source] serde_json::Error),
    #[error("an unknown preamble: {0}")]
    UnknownPreamble(Value),
    #[error("cannot serve the session")]
    Server(#[source] McpError),
    #[error("the session ended abnormally")]
    Session(#[source] tokio::task::JoinError),
    #[error("cannot answer")]
    Answer(#[source] io::Error),
}

/// What a connection handler needs from its supervisor.
struct ConnectionContext {
    runtime: Arc<AsyncTaskRuntime>,
    sessions: Sessions,
    options: SupervisorOptions,
    stop: CancellationToken,
    owner: u32,
}

impl ConnectionContext {
    async fn serve(self, stream: UnixStream) {
        if let Err(why) = self.serve_checked(stream).await {
            tracing::warn!(
                error = &why as &dyn std::error::Error,
                "connection refused or failed"
            );
        }
    }

    async fn serve_checked(self, stream: UnixStream) -> Result<(), ConnectionError> {
        let peer = stream
            .peer_cred()
            .map_err(ConnectionError::PeerCredentials)?;
        if peer.uid() != self.owner {
            return Err(ConnectionError::Stranger {
                peer: peer.uid(),
                owner: self.owner,
            });
        }
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::new(read);
        let mut line = Vec::new();
        let mut limited = (&mut reader).take(PREAMBLE_MAX_BYTES as u64);
        let read = limited.read_until(b'\n', &mut line);
        tokio::time::timeout(PREAMBLE_TIMEOUT, read)
            .await
            .map_err(|_| ConnectionError::NoPreamble)?
            .map_err(ConnectionError::ReadPreamble)?;
        let preamble: Value =
            serde_json::from_slice(&line).map_err(ConnectionError::BadPreamble)?;
        match preamble.get("asynctask").and_then(Value::as_str) {
            Some("session") => self.session(reader, write).await,
            Some("status") => {
                let status = status(&self.runtime, self.sessions.len());
                write_line(&mut write, &status).await
            }
            Some("stop") => {
                // Every task ends, and every process group with it, before the
                // answer: the caller waits for a supervisor that has let go.
                self.runtime.shutdown().await;
                let answer = json!({"stopped": true, "pid": std::process::id()});
                let written = write_line(&mut write, &answer).await;
                self.stop.cancel();
                written
            }
            _ => Err(ConnectionError::UnknownPreamble(preamble)),
        }
    }

    async fn session<R, W>(self, reader: R, mut writer: W) -> Result<(), ConnectionError>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let manager = self.runtime.manager();
        let recorded: std::collections::BTreeSet<String> = manager
            .tasks()
            .iter()
            .filter_map(|task| manager.origin(task.id()))
            .collect();
        let session = Arc::new(self.sessions.join(&recorded));
        tracing::info!(session = session.id(), "session connected");
        // The front waits for this line: a supervisor that closes before it has
        // not taken the session, and the front finds another.
        let accepted = json!({"asynctask": "session", "session": session.id()});
        write_line(&mut writer, &accepted).await?;
        let server =
            AsyncTaskMcpServer::for_session(Arc::clone(&self.runtime), Arc::clone(&session))
                .map_err(ConnectionError::Server)?
                .with_progress_interval(self.options.server.progress_interval);
        let calls = server.calls().clone();
        let transport = server.transport(
            AsyncRwTransport::new_server(reader, writer),
            AckMode::Confirmed,
        );
        let served = match server.serve(transport).await {
            Ok(service) => service
                .waiting()
                .await
                .map(drop)
                .map_err(ConnectionError::Session),
            Err(err) => Err(ConnectionError::Server(McpError::Session(Box::new(err)))),
        };
        calls.cancel();
        tracing::info!(session = session.id(), "session disconnected");
        served
    }
}

/// The supervisor's status, as `asynctask supervisor status` prints it.
fn status(runtime: &AsyncTaskRuntime, sessions: usize) -> Value {
    let manager = runtime.manager();
    let tasks: Vec<Value> = manager
        .tasks()
        .into_iter()
        .map(|task| {
            json!({
                "id": task.id(),
                "subagent": task.subagent_name(),
                "status": task.status(),
                "session": manager.origin(task.id()),
                "delivered": task.notified_at().is_some(),
                "running": task.status() == AsyncTaskStatus::Running,
            })
        })
        .collect();
    json!({"pid": std::process::id(), "sessions": sessions, "tasks": tasks})
}

async fn write_line(
    write: &mut (impl AsyncWrite + Unpin),
    value: &Value,
) -> Result<(), ConnectionError> {
    let mut line = value.to_string();
    line.push('\n');
    write
        .write_all(line.as_bytes())
        .await
        .map_err(ConnectionError::Answer)
}

/// Connects to the supervisor of `state` for `kind` (`session`, `status` or
/// `stop`), sending the preamble.
///
/// # Errors
///
/// The I/O error: `NotFound` or `ConnectionRefused` when no supervisor runs.
pub async fn connect(state: &StateDir, kind: &str) -> io::Result<UnixStream> {
    let mut stream = UnixStream::connect(state.socket()).await?;
    let mut preamble = json!({ "asynctask": kind }).to_string();
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
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    serde_json::from_str(&line).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
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
/// to the supervisor ([`DELIVERED_NOTIFICATION`]), which marks the results it
/// carried as delivered only then: a relay killed in between leaves them
/// pending for the next session.
///
/// # Errors
///
/// [`McpError::StartSupervisor`] when a supervisor cannot be started,
/// [`McpError::Supervisor`] when none acknowledges the session in time.
pub async fn relay_stdio(
    state: &StateDir,
    start: impl Fn() -> io::Result<Child>,
) -> Result<(), McpError> {
    let session = connect_or_start(state, start).await?;
    let mut signals = Signals::new()?;
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
}

impl From<Unacknowledged> for io::Error {
    fn from(why: Unacknowledged) -> Self {
        let kind = match why {
            Unacknowledged::Closed => io::ErrorKind::UnexpectedEof,
            Unacknowledged::Silent => io::ErrorKind::TimedOut,
            Unacknowledged::Answer(_) => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, why)
    }
}

/// A session's connection to the supervisor, acknowledged.
struct SessionStream {
    read: BufReader<OwnedReadHalf>,
    write: OwnedWriteHalf,
}

/// Connects as a session and waits for the supervisor to acknowledge it.
async fn open_session(state: &StateDir) -> io::Result<SessionStream> {
    let (read, write) = connect(state, "session").await?.into_split();
    let mut read = BufReader::new(read);
    let mut line = String::new();
    let n = tokio::time::timeout(ACK_TIMEOUT, read.read_line(&mut line))
        .await
        .map_err(|_| Unacknowledged::Silent)??;
    if n == 0 {
        return Err(Unacknowledged::Closed.into());
    }
    let ack: Value = serde_json::from_str(&line)
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
    if ack.get("asynctask").and_then(Value::as_str) != Some("session") {
        return Err(Unacknowledged::Answer(ack).into());
    }
    Ok(SessionStream { read, write })
}

/// Connects as a session, starting a supervisor when none answers (again if
/// the one started has ended: it found an ending supervisor still holding the
/// lock) and waiting for it, up to [`START_TIMEOUT`].
async fn connect_or_start(
    state: &StateDir,
    start: impl Fn() -> io::Result<Child>,
) -> Result<SessionStream, McpError> {
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    let mut started: Option<Child> = None;
    let mut delay = Duration::from_millis(10);
    let outcome = loop {
        let why = match open_session(state).await {
            Ok(session) => break Ok(session),
            Err(why) => why,
        };
        if tokio::time::Instant::now() >= deadline {
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
                    return Err(McpError::StartSupervisor {
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
    outcome.map_err(|source| McpError::Supervisor {
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

/// How long a relay that is ending gives its last writes to the supervisor
/// (the client's lines it read, and its confirmations) before it exits.
const FLUSH_TIMEOUT: Duration = Duration::from_millis(200);

/// Copies the client's messages to the supervisor, and the supervisor's lines
/// to the client, confirming each response once it is written.
///
/// When the client's input ends, or `stop` resolves (a signal), the relay stops
/// reading the client, finishes writing the response it is writing (if any) and
/// confirms it, sends the supervisor what it still holds, closes its side, and
/// returns — within [`FLUSH_TIMEOUT`]. A response whose confirmation is lost all
/// the same is released by the supervisor when the connection ends: its results
/// go to the next session, which may see them a second time.
async fn relay<I, O>(
    client_in: I,
    mut client_out: O,
    supervisor: SessionStream,
    stop: impl Future<Output = ()>,
) where
    I: AsyncRead + Unpin,
    O: AsyncWrite + Unpin,
{
    let SessionStream {
        read: mut from_supervisor,
        write: mut to_supervisor,
    } = supervisor;
    // One writer to the supervisor: the client's lines and our confirmations.
    // It ends once every sender is gone and it wrote what was queued.
    let (send, mut outbox) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = async move {
        while let Some(line) = outbox.recv().await {
            if to_supervisor.write_all(&line).await.is_err() {
                return;
            }
        }
        let _ = to_supervisor.shutdown().await;
    };
    let upstream = {
        let send = send.clone();
        async move {
            let mut lines = BufReader::new(client_in);
            loop {
                let mut line = Vec::new();
                match lines.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if send.send(line).is_err() {
                            return;
                        }
                    }
                }
            }
        }
    };
    // Set when the relay is ending: the supervisor's next line is not read.
    let closing = CancellationToken::new();
    let downstream = {
        let closing = closing.clone();
        async move {
            loop {
                let mut line = Vec::new();
                tokio::select! {
                    read = from_supervisor.read_until(b'\n', &mut line) => match read {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    },
                    () = closing.cancelled() => return,
                }
                // Not interrupted by `closing`: a response being written is
                // finished and confirmed.
                let written = async {
                    client_out.write_all(&line).await?;
                    client_out.flush().await
                }
                .await;
                if let Some(id) = response_id(&line) {
                    let confirmation = json!({
                        "jsonrpc": "2.0",
                        "method": DELIVERED_NOTIFICATION,
                        "params": {"requestId": id, "ok": written.is_ok()},
                    });
                    let mut confirmation = confirmation.to_string().into_bytes();
                    confirmation.push(b'\n');
                    let _ = send.send(confirmation);
                }
                if written.is_err() {
                    return;
                }
            }
        }
    };
    // Boxed so that the client's side can be dropped (with its sender) while
    // the rest flushes.
    let mut upstream = Box::pin(upstream);
    let mut downstream = Box::pin(downstream);
    let mut writer = Box::pin(writer);
    let mut stop = Box::pin(stop);
    // The relay ends when either side does; a client that went away ends the
    // session (its background tasks keep running in the supervisor).
    let downstream_ended = tokio::select! {
        () = &mut upstream => false,
        () = &mut stop => false,
        () = &mut downstream => true,
        // The supervisor cannot be written to: nothing more can reach it.
        () = &mut writer => return,
    };
    drop(upstream);
    closing.cancel();
    let flush = async move {
        if !downstream_ended {
            downstream.await;
        }
        // Every sender is gone now: the writer sends what is queued and closes.
        writer.await;
    };
    if tokio::time::timeout(FLUSH_TIMEOUT, flush).await.is_err() {
        tracing::warn!(
            "the relay's last writes to the supervisor did not finish within {} ms",
            FLUSH_TIMEOUT.as_millis()
        );
    }
}

/// The id of a JSON-RPC response (a line with `id` and `result` or `error`, and
/// no `method`).
fn response_id(line: &[u8]) -> Option<Value> {
    let message: Value = serde_json::from_slice(line).ok()?;
    let object = message.as_object()?;
    if object.contains_key("method") {
        return None;
    }
    if !(object.contains_key("result") || object.contains_key("error")) {
        return None;
    }
    object.get("id").filter(|id| !id.is_null()).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn only_responses_are_confirmed() {
        assert_eq!(
            response_id(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#),
            Some(json!(7))
        );
        assert_eq!(
            response_id(br#"{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"x"}}"#),
            Some(json!("a"))
        );
        assert_eq!(
            response_id(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#),
            None
        );
        assert_eq!(
            response_id(br#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage"}"#),
            None
        );
        assert_eq!(response_id(b"not json"), None);
    }

    /// A private state directory under a fresh temporary one (removed on drop).
    fn temp_state() -> (tempfile::TempDir, StateDir) {
        let dir = tempfile::Builder::new()
            .prefix("atd")
            .tempdir()
            .expect("a temporary directory");
        let state = StateDir::new(dir.path().join("s"));
        state.create().expect("the state directory");
        (dir, state)
    }

    /// A supervisor of a runtime without a runner, exiting after `idle_exit`.
    fn supervisor(state: &StateDir, idle_exit: Duration) -> Supervisor {
        supervisor_of(
            Arc::new(AsyncTaskRuntime::builder().build()),
            state,
            idle_exit,
        )
    }

    /// A supervisor of `runtime`, exiting after `idle_exit`.
    fn supervisor_of(
        runtime: Arc<AsyncTaskRuntime>,
        state: &StateDir,
        idle_exit: Duration,
    ) -> Supervisor {
        let lock = SupervisorLock::acquire(state)
            .expect("the lock file")
            .expect("no other supervisor");
        let options = SupervisorOptions::default().with_idle_exit(idle_exit);
        Supervisor::new(runtime, state.clone(), lock, options).expect("a supervisor")
    }

    /// A raw connection to the supervisor's socket, once it listens.
    async fn connect_raw(state: &StateDir) -> UnixStream {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match UnixStream::connect(state.socket()).await {
                Ok(stream) => return stream,
                Err(err) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "the supervisor never listened: {err}"
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    /// The next line `stream` reads, waiting at most 10 s.
    async fn read_line_within(reader: &mut (impl AsyncBufReadExt + Unpin)) -> String {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(10), reader.read_line(&mut line))
            .await
            .expect("a line within 10 s")
            .expect("a line");
        line
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_yet_to_say_what_it_wants_keeps_the_supervisor() {
        let (_dir, state) = temp_state();
        let idle_exit = Duration::from_millis(100);
        let running = tokio::spawn(supervisor(&state, idle_exit).run());
        let stream = connect_raw(&state).await;
        // Silent for several idle times and ticks: the connection keeps the
        // supervisor from ending.
        tokio::time::sleep(idle_exit * 4 + Duration::from_secs(1)).await;
        assert!(
            !running.is_finished(),
            "the supervisor ended under a connection"
        );
        let (read, mut write) = stream.into_split();
        write
            .write_all(b"{\"asynctask\":\"session\"}\n")
            .await
            .expect("the preamble is written");
        let mut read = BufReader::new(read);
        let ack: Value = serde_json::from_str(&read_line_within(&mut read).await).expect("JSON");
        assert_eq!(ack["asynctask"], "session", "{ack}");
        assert!(
            ack["session"].as_str().is_some_and(|id| id.len() == 8),
            "{ack}"
        );
        drop((read, write));
        let exit = tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .expect("the supervisor ends once idle")
            .expect("it did not panic")
            .expect("it ran");
        assert_eq!(exit, SupervisorExit::Idle);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_front_finds_a_new_supervisor_when_one_closes_before_acknowledging() {
        let (_dir, state) = temp_state();
        // An ending supervisor: it takes the connection and closes it unanswered.
        let ending = UnixListener::bind(state.socket()).expect("bound");
        let next = state.clone();
        let succession = tokio::spawn(async move {
            let (connection, _) = ending.accept().await.expect("the front connects");
            drop((connection, ending));
            supervisor(&next, Duration::from_millis(100)).run().await
        });
        let starts = std::sync::atomic::AtomicUsize::new(0);
        // The supervisor a front would start finds the lock held and ends.
        let start = || {
            starts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::process::Command::new("true").spawn()
        };
        let session = connect_or_start(&state, start)
            .await
            .expect("a session with the next supervisor");
        assert!(starts.load(std::sync::atomic::Ordering::SeqCst) >= 1);
        drop(session);
        let exit = tokio::time::timeout(Duration::from_secs(10), succession)
            .await
            .expect("the supervisor ends once idle")
            .expect("it did not panic")
            .expect("it ran");
        assert_eq!(exit, SupervisorExit::Idle);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_front_that_reaches_no_supervisor_shows_the_end_of_its_log() {
        let (_dir, state) = temp_state();
        let lines: Vec<String> = (1..=30).map(|i| format!("line {i}")).collect();
        std::fs::write(state.log_file(), lines.join("\n") + "\n").expect("a log");
        // Nothing ever listens: each supervisor started ends at once.
        let start = || std::process::Command::new("true").spawn();
        let Err(err) = connect_or_start(&state, start).await else {
            panic!("a session without a supervisor");
        };
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "cannot reach the supervisor of {}; the end of its log, {}:\nline 11\n",
                state.path().display(),
                state.log_file().display()
            )),
            "{text}"
        );
        assert!(
            text.ends_with("line 30") && !text.contains("line 10\n"),
            "{text}"
        );
        assert!(
            std::error::Error::source(&err).is_some(),
            "the last failure is its source"
        );
    }

    /// The client's stdout in the relay: at the first write it closes the
    /// client's stdin (the client read its response and left) and takes the
    /// bytes only at the next poll; what it takes goes to `taken`.
    struct LeavesOnWrite {
        stdin: Option<tokio::io::DuplexStream>,
        taken: mpsc::UnboundedSender<Vec<u8>>,
    }

    impl AsyncWrite for LeavesOnWrite {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            if self.stdin.take().is_some() {
                cx.waker().wake_by_ref();
                return std::task::Poll::Pending;
            }
            let _ = self.taken.send(buf.to_vec());
            std::task::Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_response_written_as_the_client_leaves_is_confirmed() {
        let (stdin_writer, stdin) = tokio::io::duplex(1024);
        let (taken, mut written) = mpsc::unbounded_channel();
        let stdout = LeavesOnWrite {
            stdin: Some(stdin_writer),
            taken,
        };
        let (supervisor, ours) = UnixStream::pair().expect("a socket pair");
        let (read, write) = ours.into_split();
        let session = SessionStream {
            read: BufReader::new(read),
            write,
        };
        let (from_relay, mut to_relay) = supervisor.into_split();
        let response = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n";
        to_relay.write_all(response).await.expect("written");
        let relayed = tokio::time::timeout(
            Duration::from_secs(10),
            relay(stdin, stdout, session, std::future::pending()),
        );
        relayed.await.expect("the relay ends once the client left");
        assert_eq!(written.recv().await.as_deref(), Some(&response[..]));
        let mut lines = BufReader::new(from_relay).lines();
        let mut confirmations = Vec::new();
        while let Some(line) = lines.next_line().await.expect("read") {
            confirmations.push(serde_json::from_str::<Value>(&line).expect("JSON"));
        }
        assert_eq!(
            confirmations,
            [json!({
                "jsonrpc": "2.0",
                "method": DELIVERED_NOTIFICATION,
                "params": {"requestId": 1, "ok": true},
            })]
        );
    }

    /// An MCP client on a supervisor's socket, line by line, as a relay would be.
    struct LineSession {
        stream: SessionStream,
    }

    impl LineSession {
        /// A session, acknowledged and initialized.
        async fn open(state: &StateDir) -> Self {
            until("the supervisor listening", || state.socket().exists()).await;
            let stream = tokio::time::timeout(Duration::from_secs(10), open_session(state))
                .await
                .expect("acknowledged within 10 s")
                .expect("a session");
            let mut session = LineSession { stream };
            let init = json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "line-session", "version": "0"},
            });
            session
                .send(json!({"id": 1, "method": "initialize", "params": init}))
                .await;
            session.response(1).await;
            session
                .send(json!({"method": "notifications/initialized"}))
                .await;
            session
        }

        async fn send(&mut self, mut message: Value) {
            message["jsonrpc"] = json!("2.0");
            let mut line = message.to_string();
            line.push('\n');
            self.stream
                .write
                .write_all(line.as_bytes())
                .await
                .expect("sent");
        }

        /// The response to request `id` (other lines are skipped).
        async fn response(&mut self, id: u64) -> Value {
            loop {
                let line = read_line_within(&mut self.stream.read).await;
                assert!(!line.is_empty(), "the supervisor closed the session");
                let message: Value = serde_json::from_str(&line).expect("JSON");
                if message["id"] == id && message.get("method").is_none() {
                    return message;
                }
            }
        }

        /// Calls `check_async_tasks` as request `id`; its response.
        async fn check(&mut self, id: u64) -> Value {
            let params = json!({"name": "check_async_tasks", "arguments": {}});
            self.send(json!({"id": id, "method": "tools/call", "params": params}))
                .await;
            self.response(id).await
        }

        /// Confirms that the response to request `id` was written.
        async fn confirm(&mut self, id: u64) {
            let params = json!({"requestId": id, "ok": true});
            self.send(json!({"method": DELIVERED_NOTIFICATION, "params": params}))
                .await;
        }
    }

    /// A runtime holding one finished task, `t1`, whose result says `t1 done`.
    fn runtime_with_a_result() -> Arc<AsyncTaskRuntime> {
        use asynctask_manager::RegisterTaskInput;
        use asynctask_model::{OutputObject, TerminateReason};
        let runtime = Arc::new(AsyncTaskRuntime::builder().build());
        let manager = runtime.manager();
        manager
            .register_task(RegisterTaskInput::new("t1", "s", "g"))
            .expect("registered");
        let output = OutputObject::new(TerminateReason::Goal).with_final_message("t1 done");
        assert!(manager.complete_task("t1", output));
        runtime
    }

    fn notified(runtime: &AsyncTaskRuntime) -> bool {
        runtime
            .manager()
            .task("t1")
            .is_some_and(|task| task.notified_at().is_some())
    }

    /// Waits until `condition` holds, failing after 10 s.
    async fn until(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !condition() {
            assert!(tokio::time::Instant::now() < deadline, "{what} within 10 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn carries_the_result(response: &Value) -> bool {
        response.to_string().contains("t1 done")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_confirmed_response_marks_its_result_delivered() {
        let (_dir, state) = temp_state();
        let runtime = runtime_with_a_result();
        let running =
            tokio::spawn(supervisor_of(Arc::clone(&runtime), &state, Duration::from_secs(1)).run());
        let mut session = LineSession::open(&state).await;
        let carried = session.check(2).await;
        assert!(carries_the_result(&carried), "{carried}");
        assert!(!notified(&runtime), "marked before the relay confirmed");
        session.confirm(2).await;
        until("the result marked delivered", || notified(&runtime)).await;
        let next = session.check(3).await;
        assert!(!carries_the_result(&next), "delivered twice: {next}");
        drop(session);
        let exit = tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .expect("idle within 10 s")
            .expect("no panic")
            .expect("ran");
        assert_eq!(exit, SupervisorExit::Idle);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_ending_before_it_confirms_leaves_the_result_for_the_next_once() {
        let (_dir, state) = temp_state();
        let runtime = runtime_with_a_result();
        let running =
            tokio::spawn(supervisor_of(Arc::clone(&runtime), &state, Duration::from_secs(1)).run());
        let mut first = LineSession::open(&state).await;
        let carried = first.check(2).await;
        assert!(carries_the_result(&carried), "{carried}");
        drop(first);
        let mut sessions = 1;
        while sessions > 0 {
            let status = ask(&state, "status").await.expect("a status");
            sessions = status["sessions"].as_u64().expect("a count");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!notified(&runtime), "marked without a confirmation");
        let mut second = LineSession::open(&state).await;
        let again = second.check(2).await;
        assert!(carries_the_result(&again), "the result was lost: {again}");
        second.confirm(2).await;
        until("the result marked delivered", || notified(&runtime)).await;
        let after = second.check(3).await;
        assert!(
            !carries_the_result(&after),
            "delivered a third time: {after}"
        );
        drop(second);
        let exit = tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .expect("idle within 10 s")
            .expect("no panic")
            .expect("ran");
        assert_eq!(exit, SupervisorExit::Idle);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_ending_supervisor_serves_a_connection_queued_before_it_looked() {
        let (_dir, state) = temp_state();
        let supervisor = supervisor(&state, Duration::from_secs(1));
        let stop = CancellationToken::new();
        let mut connections = JoinSet::new();

        let listener = UnixListener::bind(state.socket()).expect("bound");
        let quiet = supervisor.quiesce(listener, &mut connections, &stop);
        assert!(matches!(quiet, Quiesced::Idle), "nothing was queued");
        assert!(!state.socket().exists(), "the name stays aside as it ends");
        std::fs::remove_file(state.socket_aside()).expect("aside");

        let listener = UnixListener::bind(state.socket()).expect("bound again");
        // Queued: connected, never accepted.
        let queued = UnixStream::connect(state.socket()).await.expect("queued");
        let Quiesced::Busy(Some(listener)) = supervisor.quiesce(listener, &mut connections, &stop)
        else {
            panic!("a queued connection must keep the supervisor");
        };
        assert!(state.socket().exists(), "the name is back");
        assert_eq!(connections.len(), 1, "the queued connection is served");
        let (read, mut write) = queued.into_split();
        write
            .write_all(b"{\"asynctask\":\"session\"}\n")
            .await
            .expect("the preamble is written");
        let mut read = BufReader::new(read);
        let ack: Value = serde_json::from_str(&read_line_within(&mut read).await).expect("JSON");
        assert_eq!(ack["asynctask"], "session", "{ack}");
        drop((read, write, listener));
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}
