//! The supervisor: one per workspace, it owns the runtime and the subagents and
//! serves every session on the state directory's socket until it is stopped,
//! idle or signalled.

use std::fmt;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::Arc;
use std::time::Duration;

use asynctask_mcp::{FollowJournal, Sessions, TerminationSignals, log_task_ends};
use asynctask_runtime::AsyncTaskRuntime;
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::connection::ConnectionContext;
use crate::error::SupervisorError;
use crate::options::SupervisorOptions;
use crate::state::{StateDir, SupervisorLock};

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
    /// The project its subagents work in, when it was told.
    project: Option<Arc<std::path::PathBuf>>,
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
        let sessions = Sessions::on(runtime.claims().clone());
        Ok(Supervisor {
            runtime,
            state,
            options,
            sessions,
            owner,
            project: None,
            _lock: lock,
        })
    }

    /// Journals the tasks clients follow as MCP Tasks in `journal`, starting
    /// from `restored` (id, followed since: what the workspace's store held).
    /// A followed task's result then stays the polls' across a restart of the
    /// supervisor, for a while after the restart or its end
    /// ([`Sessions::with_followed`]).
    #[must_use]
    pub fn with_followed(
        mut self,
        journal: Arc<dyn FollowJournal>,
        restored: impl IntoIterator<Item = (String, u64)>,
    ) -> Self {
        self.sessions = self
            .sessions
            .with_followed(journal, restored, self.runtime.manager());
        self
    }

    /// Names the project this supervisor's subagents work in: `status` shows
    /// it, and a session of another project (a front that names it) is
    /// refused with a reason, since its subagents would run in the wrong
    /// place.
    #[must_use]
    pub fn with_project(mut self, project: impl Into<std::path::PathBuf>) -> Self {
        self.project = Some(Arc::new(project.into()));
        self
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
    /// [`SupervisorError::Listen`] when the socket cannot be bound, [`SupervisorError::Signals`]
    /// when signals cannot be listened for.
    pub async fn run(self) -> Result<SupervisorExit, SupervisorError> {
        // Which build serves: read now, before an upgrade can replace the
        // executable (a front of another build says so).
        let _ = crate::protocol::build();
        let socket = self.state.socket();
        let aside = self.state.socket_aside();
        // The lock is ours: a socket file left behind is a dead supervisor's.
        for stale in [&socket, &aside] {
            match std::fs::remove_file(stale) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(SupervisorError::Listen {
                        path: stale.clone(),
                        source,
                    });
                }
            }
        }
        let mut listener =
            Some(
                UnixListener::bind(&socket).map_err(|source| SupervisorError::Listen {
                    path: socket.clone(),
                    source,
                })?,
            );
        let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
        let mut signals = TerminationSignals::new().map_err(SupervisorError::Signals)?;
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
            project: self.project.clone(),
        }
    }

    /// Whether a session is connected, a connection open, a task running, or a
    /// change waiting for the journal to record it (the runtime retries the
    /// write; ending now would lose it).
    fn is_busy(&self, connections: &JoinSet<()>) -> bool {
        let manager = self.runtime.manager();
        !self.sessions.is_empty()
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
    pub(crate) fn quiesce(
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
pub(crate) enum Quiesced {
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
