//! `FleetListener`: wake-ups through `LISTEN/NOTIFY`, on a connection of its
//! own.

use std::fmt;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client};

use crate::{DatabaseConfig, FleetError};

/// The channel a submission notifies (payload: the task's subagent).
pub const QUEUED_CHANNEL: &str = "asynctask_queued";

/// The channel a task's end notifies (payload: its workspace): a completion,
/// a failure, an interruption. Fronts wait on it for results; workers, for a
/// workspace slot that came free.
pub const ENDED_CHANNEL: &str = "asynctask_ended";

/// The channel a cancel request for a running task notifies (payload: the id
/// of the worker that runs it): that worker ends the task's subagent.
pub const CANCEL_CHANNEL: &str = "asynctask_cancel";

/// The channel a steering message or an answer to a running task notifies
/// (payload: the id of the worker that runs it): that worker hands it to the
/// subagent.
pub const MESSAGE_CHANNEL: &str = "asynctask_message";

/// The channel a question a worker's subagent asks, or withdraws, notifies
/// (payload: the task's id): the front running the task puts it to its
/// session.
pub const QUESTION_CHANNEL: &str = "asynctask_question";

/// The channel a task's new line of progress notifies (payload: its id), at
/// most once a second per task: the front waiting on it shows it.
pub const PROGRESS_CHANNEL: &str = "asynctask_progress";

/// One wake-up: the channel, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wakeup {
    /// [`QUEUED_CHANNEL`], [`ENDED_CHANNEL`], [`PROGRESS_CHANNEL`],
    /// [`CANCEL_CHANNEL`], [`MESSAGE_CHANNEL`] or [`QUESTION_CHANNEL`].
    pub channel: String,
    /// The subagent (queued), the workspace (ended), the task's id
    /// (progress, question) or the worker's id (cancel, message); a name
    /// cut to [`MAX_NAME_BYTES`](crate::MAX_NAME_BYTES) characters, so a
    /// payload stays under PostgreSQL's bound whatever is stored (a valid
    /// name is never cut).
    pub payload: String,
}

/// A connection that listens on the fleet's channels and hands each
/// notification to [`recv`](Self::recv).
///
/// Notifications are wake-ups, never the record: one sent while the
/// listener was disconnected is lost, so after connecting (and after every
/// reconnect) its owner looks at the database once, and keeps a slow timer
/// as a fallback.
pub struct FleetListener {
    // Kept: the connection ends when its last client is dropped.
    _client: Client,
    wakeups: mpsc::UnboundedReceiver<Wakeup>,
    driver: JoinHandle<()>,
}

impl fmt::Debug for FleetListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetListener").finish_non_exhaustive()
    }
}

impl Drop for FleetListener {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl FleetListener {
    /// Connects and listens on `channels` (use [`QUEUED_CHANNEL`] and
    /// [`ENDED_CHANNEL`]).
    ///
    /// # Errors
    ///
    /// [`FleetError::Connect`], or [`FleetError::Database`] when `LISTEN`
    /// fails.
    pub async fn connect(
        config: impl Into<DatabaseConfig>,
        channels: &[&str],
    ) -> Result<Self, FleetError> {
        let (client, mut connection) = config.into().connect().await?;
        let (sender, wakeups) = mpsc::unbounded_channel();
        let driver = tokio::spawn(async move {
            // The connection is polled here, so its notifications arrive;
            // the client's statements go through the same polling.
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(note))) => {
                        let wakeup = Wakeup {
                            channel: note.channel().to_owned(),
                            payload: note.payload().to_owned(),
                        };
                        if sender.send(wakeup).is_err() {
                            return;
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(err)) => {
                        tracing::warn!(error = %err, "the fleet's listening connection ended");
                        return;
                    }
                    None => return,
                }
            }
        });
        if let Err(err) = crate::connection::session_settings(
            &client,
            crate::connection::IDLE_IN_TRANSACTION_TIMEOUT,
        )
        .await
        {
            driver.abort();
            return Err(err);
        }
        for channel in channels {
            // A channel is an identifier: quoted, with its quotes doubled.
            let quoted = channel.replace('"', "\"\"");
            client
                .batch_execute(&format!("LISTEN \"{quoted}\""))
                .await
                .map_err(FleetError::db("listening for wake-ups"))
                .inspect_err(|_| driver.abort())?;
        }
        Ok(FleetListener {
            _client: client,
            wakeups,
            driver,
        })
    }

    /// The next wake-up; `None` once the connection has ended (connect a new
    /// listener, then look at the database: what was sent meanwhile is lost).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a wake-up not yet returned stays for the next call.
    pub async fn recv(&mut self) -> Option<Wakeup> {
        self.wakeups.recv().await
    }
}
