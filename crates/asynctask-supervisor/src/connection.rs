//! One connection to the supervisor: who may connect, the first line that says
//! what it wants (a session, `status` or `stop`), and serving it.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use asynctask_mcp::{AsyncTaskMcpServer, McpError, Sessions};
use asynctask_model::AsyncTaskStatus;
use asynctask_runtime::AsyncTaskRuntime;
use asynctask_tools::{LaunchBudget, Nesting};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

use crate::options::SupervisorOptions;
use crate::protocol::RELAY_PROTOCOL;

/// How long a connection may take to say what it wants.
const PREAMBLE_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest first line a connection may send.
const PREAMBLE_MAX_BYTES: usize = 1024;

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
    #[error("a front of another version (relay protocol {0:?}, this one {RELAY_PROTOCOL})")]
    Protocol(Option<u64>),
    #[error("a session of another project ({0}) refused")]
    OtherProject(String),
    #[error("cannot serve the session")]
    Server(#[source] McpError),
    #[error("cannot answer")]
    Answer(#[source] io::Error),
}

/// What a connection handler needs from its supervisor.
pub(crate) struct ConnectionContext {
    pub(crate) runtime: Arc<AsyncTaskRuntime>,
    pub(crate) sessions: Sessions,
    pub(crate) options: SupervisorOptions,
    pub(crate) stop: CancellationToken,
    pub(crate) owner: u32,
    pub(crate) project: Option<Arc<std::path::PathBuf>>,
}

impl ConnectionContext {
    pub(crate) async fn serve(self, stream: UnixStream) {
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
            Some("session") => {
                let protocol = preamble.get("protocol").and_then(Value::as_u64);
                if protocol != Some(RELAY_PROTOCOL) {
                    // A front of another version: it cannot confirm what it
                    // writes the way this supervisor counts on.
                    let refusal = json!({
                        "asynctask": "refused",
                        "reason": format!(
                            "this supervisor speaks relay protocol {RELAY_PROTOCOL}, the front \
                             another; stop it with `asynctask supervisor stop` to start one of \
                             the front's version"
                        ),
                        "protocol": RELAY_PROTOCOL,
                    });
                    write_line(&mut write, &refusal).await?;
                    return Err(ConnectionError::Protocol(protocol));
                }
                let theirs = preamble.get("project").and_then(Value::as_str);
                if let (Some(ours), Some(theirs)) = (&self.project, theirs)
                    && ours.as_os_str() != theirs
                {
                    let refusal = json!({
                        "asynctask": "refused",
                        "reason": format!(
                            "this state directory's supervisor works in the project {}, not in \
                             {theirs}; give each project its own state directory (leave \
                             --state-dir out: it is then the project's .asynctask/)",
                            ours.display()
                        ),
                        "protocol": RELAY_PROTOCOL,
                    });
                    write_line(&mut write, &refusal).await?;
                    return Err(ConnectionError::OtherProject(theirs.to_owned()));
                }
                self.session(reader, write, session_nesting(&preamble))
                    .await
            }
            Some("status") => {
                let status = status(&self.runtime, self.sessions.len(), self.project.as_deref());
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

    async fn session<R, W>(
        self,
        reader: R,
        mut writer: W,
        nesting: Nesting,
    ) -> Result<(), ConnectionError>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let manager = self.runtime.manager();
        let recorded: std::collections::BTreeSet<String> = manager
            .tasks()
            .iter()
            .filter_map(|task| task.origin().map(str::to_owned))
            .collect();
        let server = self.options.server;
        let mut session = self
            .sessions
            .join(&recorded)
            .with_nesting(nesting.with_max_depth(server.nesting.max_depth));
        if let Some(max) = server.max_launches_per_session {
            session = session.with_launches(LaunchBudget::new(max));
        }
        let session = Arc::new(session);
        tracing::info!(
            session = session.id(),
            depth = nesting.depth,
            depth_unknown = nesting.depth_unknown,
            "session connected"
        );
        // The front waits for this line: a supervisor that closes before it has
        // not taken the session, and the front finds another.
        let accepted = json!({
            "asynctask": "session",
            "session": session.id(),
            "protocol": RELAY_PROTOCOL,
            "pid": std::process::id(),
            "build": crate::protocol::build(),
        });
        write_line(&mut writer, &accepted).await?;
        let mut server =
            AsyncTaskMcpServer::for_session(Arc::clone(&self.runtime), Arc::clone(&session))
                .map_err(ConnectionError::Server)?
                .with_progress_interval(self.options.server.progress_interval);
        if let Some(project) = &self.project {
            server = server.with_project(project.as_path());
        }
        let served = server
            .serve_relayed(reader, writer)
            .await
            .map_err(ConnectionError::Server);
        tracing::info!(session = session.id(), "session disconnected");
        served
    }
}

/// How deep a session's client runs among nested subagents, as its front
/// says: `depth`, an integer (0 outside any subagent). A front that runs
/// inside a subagent but could not read its depth says `null`; that, or no
/// readable depth at all, is a depth unknown, taken to be as deep as the cap
/// (fail closed: such a session launches nothing and adopts nothing).
fn session_nesting(preamble: &Value) -> Nesting {
    let depth = preamble
        .get("depth")
        .and_then(Value::as_u64)
        .and_then(|depth| u32::try_from(depth).ok());
    match depth {
        Some(depth) => Nesting::at(depth),
        None => {
            let said = preamble.get("depth").map(Value::to_string);
            tracing::warn!(
                depth = said.as_deref().unwrap_or("(none)"),
                "a session whose front could not say how deep it runs among subagents: it is \
                 taken to be as deep as subagents may nest"
            );
            Nesting::unknown()
        }
    }
}

/// The supervisor's status, as `asynctask supervisor status` prints it.
fn status(
    runtime: &AsyncTaskRuntime,
    sessions: usize,
    project: Option<&std::path::PathBuf>,
) -> Value {
    let manager = runtime.manager();
    let now = manager.clock().now_ms();
    let tasks: Vec<Value> = manager
        .tasks()
        .into_iter()
        .map(|task| {
            let mut line = json!({
                "id": task.id(),
                "subagent": task.subagent_name(),
                "status": task.status(),
                "session": task.origin(),
                "delivered": task.notified_at().is_some(),
                "running": task.status() == AsyncTaskStatus::Running,
            });
            // How long it ran (a queued task has not started), and what it
            // used: by its end, or so far.
            if let Some(started) = task.started_at() {
                let end = task.completed_at().unwrap_or(now);
                line["elapsed_ms"] = json!(end.saturating_sub(started));
            }
            let progress = manager.progress(task.id());
            let usage = (task.usage().cloned())
                .or_else(|| progress.as_ref().and_then(|progress| progress.usage()));
            // A running task's last line of output, as the subagent wrote it.
            if task.status() == AsyncTaskStatus::Running
                && let Some(progress) = &progress
            {
                let snapshot = progress.snapshot();
                if let Some(last) = snapshot.last_line() {
                    line["last_line"] = json!(last);
                }
            }
            if let Some(usage) = usage.filter(|usage| !usage.is_empty()) {
                line["usage"] = serde_json::to_value(usage).unwrap_or_default();
            }
            line
        })
        .collect();
    json!({
        "pid": std::process::id(),
        "project": project,
        "sessions": sessions,
        "tasks": tasks,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_session_that_cannot_say_its_depth_is_as_deep_as_the_cap() {
        assert_eq!(session_nesting(&json!({"depth": 0})), Nesting::at(0));
        assert_eq!(session_nesting(&json!({"depth": 2})), Nesting::at(2));
        for preamble in [
            json!({}),
            json!({"depth": null}),
            json!({"depth": -1}),
            json!({"depth": "2"}),
            json!({"depth": u64::MAX}),
        ] {
            assert_eq!(session_nesting(&preamble), Nesting::unknown(), "{preamble}");
        }
    }
}
