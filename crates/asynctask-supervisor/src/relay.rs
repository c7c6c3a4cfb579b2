//! The relay: copies a client's MCP messages to the supervisor and the
//! supervisor's to the client, confirming what it wrote, and keeps what the
//! front needs to open the session again with another supervisor.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use asynctask_mcp::{
    DELIVERED_NOTIFICATION, Line, LineReader, MAX_LINE_BYTES, OVERSIZED_NOTIFICATION,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// A session's connection to the supervisor, acknowledged.
pub(crate) struct SessionStream {
    pub(crate) read: BufReader<OwnedReadHalf>,
    pub(crate) write: OwnedWriteHalf,
    /// The supervisor's pid, as its acknowledgement says.
    pub(crate) pid: Option<u64>,
}

/// How long a relay that is ending gives its last writes to the supervisor
/// (the client's lines it read, and its confirmations) before it exits.
const FLUSH_TIMEOUT: Duration = Duration::from_millis(200);

/// How many of the client's lines wait to be written to the supervisor before
/// the relay stops reading the client.
const QUEUED_LINES: usize = 16;

/// How a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The client's input ended: the session is over.
    Client,
    /// `stop` resolved (a signal).
    Stopped,
    /// The supervisor closed the connection or could not be written to: the
    /// front opens the session again with another.
    Supervisor,
}

/// What the front knows of its client's session: the lines that open it
/// again with another supervisor, and the requests that wait for an answer.
#[derive(Debug, Default, Clone)]
pub(crate) struct ClientSession {
    inner: Arc<Mutex<Known>>,
}

#[derive(Debug, Default)]
struct Known {
    initialize: Option<Vec<u8>>,
    initialized: Option<Vec<u8>>,
    /// Requests passed to the supervisor and not answered yet: id and method,
    /// in the order sent. A client may send a request whose id is in use by
    /// one in progress: both are here until each is answered.
    in_flight: Vec<(Value, String)>,
}

/// The head of a JSON-RPC message: what the front tracks.
struct Head {
    id: Option<Value>,
    method: Option<String>,
    /// The request a `notifications/cancelled` cancels.
    cancelled: Option<Value>,
    /// An error answer `-32600` (Invalid Request): what the supervisor answers
    /// at once to a request whose id is in use by one in progress.
    invalid_request: bool,
}

fn head(line: &[u8]) -> Option<Head> {
    let mut message: serde_json::Map<String, Value> = serde_json::from_slice(line).ok()?;
    let method = message
        .remove("method")
        .and_then(|method| method.as_str().map(str::to_owned));
    let cancelled = (method.as_deref() == Some("notifications/cancelled"))
        .then(|| {
            message
                .get_mut("params")?
                .get_mut("requestId")
                .map(Value::take)
        })
        .flatten();
    let invalid_request = message
        .get("error")
        .and_then(|error| error.get("code"))
        .and_then(Value::as_i64)
        == Some(INVALID_REQUEST);
    Some(Head {
        id: message.remove("id"),
        method,
        cancelled,
        invalid_request,
    })
}

/// Whether `method` is one of the notifications the relay itself sends the
/// supervisor.
fn is_relay_control(method: &str) -> bool {
    method == DELIVERED_NOTIFICATION || method == OVERSIZED_NOTIFICATION
}

/// JSON-RPC's Invalid Request error code.
const INVALID_REQUEST: i64 = -32600;

impl Known {
    /// Ends the first request waiting with `id`, if one does.
    fn remove_first(&mut self, id: &Value) {
        if let Some(at) = self.in_flight.iter().position(|(waiting, _)| waiting == id) {
            self.in_flight.remove(at);
        }
    }

    /// Ends the last request waiting with `id`, if one does.
    fn remove_last(&mut self, id: &Value) {
        if let Some(at) = self
            .in_flight
            .iter()
            .rposition(|(waiting, _)| waiting == id)
        {
            self.in_flight.remove(at);
        }
    }
}

impl ClientSession {
    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes a line the client sent; `false` when the line must not be passed
    /// on: a notification of the relay's own ([`DELIVERED_NOTIFICATION`],
    /// [`OVERSIZED_NOTIFICATION`]), which only the relay may send (a client
    /// that sent one could make the supervisor count a result as delivered
    /// that it never wrote). Such a line is dropped and logged.
    pub(crate) fn note_client_line(&self, line: &[u8]) -> bool {
        let Some(Head {
            id,
            method,
            cancelled,
            ..
        }) = head(line)
        else {
            return true;
        };
        if let Some(method) = method.as_deref().filter(|method| is_relay_control(method)) {
            tracing::warn!(
                method,
                "the client sent a notification only the relay may send; it is dropped"
            );
            return false;
        }
        let mut known = self.known();
        if let Some(cancelled) = cancelled {
            // A cancelled request gets no answer: it waits for none. With two
            // of that id, the first is the one in progress (the supervisor
            // refuses the second).
            known.remove_first(&cancelled);
        }
        match (id, method) {
            (Some(_), Some(method)) if method == "initialize" => {
                known.initialize = Some(line.to_vec());
            }
            (None, Some(method)) if method == "notifications/initialized" => {
                known.initialized = Some(line.to_vec());
            }
            (Some(id), Some(method)) => known.in_flight.push((id, method)),
            _ => {}
        }
        true
    }

    /// Notes a line the supervisor sent: an answer ends one request of its
    /// id. When two wait with that id, a `-32600` ends the later one (the
    /// supervisor refused it at once: its id was in use) and any other answer
    /// the first; the other still waits, and is answered by the front if the
    /// supervisor goes away first.
    fn note_supervisor_line(&self, line: &[u8]) {
        if let Some(Head {
            id: Some(id),
            method: None,
            invalid_request,
            ..
        }) = head(line)
        {
            let mut known = self.known();
            if invalid_request {
                known.remove_last(&id);
            } else {
                known.remove_first(&id);
            }
        }
    }

    /// The lines that open the session again, and the id whose answer the
    /// client already had.
    pub(crate) fn reopening(&self) -> (Vec<Vec<u8>>, Option<Value>) {
        let known = self.known();
        let id = known
            .initialize
            .as_deref()
            .and_then(head)
            .and_then(|head| head.id);
        let lines = known
            .initialize
            .iter()
            .chain(&known.initialized)
            .cloned()
            .collect();
        (lines, id)
    }

    /// Takes the requests that wait for an answer (the supervisor that had
    /// them is gone).
    pub(crate) fn take_in_flight(&self) -> Vec<(Value, String)> {
        std::mem::take(&mut self.known().in_flight)
    }
}

/// Copies the client's messages to the supervisor, and the supervisor's lines
/// to the client, confirming what it wrote.
///
/// `replay` goes to the supervisor first (the lines an opening read, or those
/// that open the session again); the supervisor's first line, when it answers
/// `answered` (an `initialize` the client already had an answer to), is not
/// passed on (and counts as written).
///
/// Lines are read with a bound ([`MAX_LINE_BYTES`]) both ways. A client's line
/// past it is not passed on: the supervisor is told of it
/// ([`OVERSIZED_NOTIFICATION`], with the request's id when its head has one)
/// and answers it. A supervisor's line past it (never sent by a supervisor of
/// this version) ends the relay: it could neither write nor confirm it.
/// Nothing piles up: a client that does not read its answers stops the
/// supervisor's writes, which stops the supervisor reading this session,
/// which stops the relay reading the client; confirmations never wait behind
/// the client's lines.
///
/// When the client's input ends, or `stop` resolves (a signal), the relay stops
/// reading the client, finishes writing the line it is writing (if any) and
/// confirms it, sends the supervisor what it still holds, closes its side, and
/// returns — within [`FLUSH_TIMEOUT`]. A response whose confirmation is lost all
/// the same is released by the supervisor when the connection ends: its results
/// go to the next session, which may see them a second time.
#[allow(
    clippy::too_many_arguments,
    reason = "each is one side of the relay or what it passes on"
)]
pub(crate) async fn relay<I, O>(
    client_in: &mut LineReader<I>,
    client_out: &mut O,
    supervisor: SessionStream,
    replay: Vec<Vec<u8>>,
    answered: Option<Value>,
    session: &ClientSession,
    stop: impl Future<Output = ()>,
) -> Ended
where
    I: AsyncBufRead + Unpin,
    O: AsyncWrite + Unpin,
{
    let SessionStream {
        read: from_supervisor,
        write: mut to_supervisor,
        ..
    } = supervisor;
    // What the client sent, for the one writer to the supervisor.
    let (send, mut outbox) = mpsc::channel::<Vec<u8>>(QUEUED_LINES);
    // How many of the supervisor's lines were written to the client: the
    // writer confirms the latest count, never queued behind the client's lines.
    let (confirm, mut confirmed) = watch::channel(0u64);
    let writer = async move {
        for mut line in replay {
            line.push(b'\n');
            if to_supervisor.write_all(&line).await.is_err() {
                return;
            }
        }
        let (mut lines_open, mut confirms_open) = (true, true);
        while lines_open || confirms_open {
            let line = tokio::select! {
                biased;
                changed = confirmed.changed(), if confirms_open => match changed {
                    Ok(()) => confirmation(*confirmed.borrow_and_update()),
                    Err(_) => {
                        confirms_open = false;
                        continue;
                    }
                },
                line = outbox.recv(), if lines_open => match line {
                    Some(line) => line,
                    None => {
                        lines_open = false;
                        continue;
                    }
                },
            };
            if to_supervisor.write_all(&line).await.is_err() {
                return;
            }
        }
        let _ = to_supervisor.shutdown().await;
    };
    let upstream = async move {
        loop {
            let line = match client_in.next().await {
                Ok(Some(Line::Whole(mut line))) => {
                    if !session.note_client_line(&line) {
                        continue;
                    }
                    line.push(b'\n');
                    line
                }
                Ok(Some(Line::TooLong { head, len })) => oversized(&head, len),
                Ok(None) | Err(_) => return,
            };
            if send.send(line).await.is_err() {
                return;
            }
        }
    };
    // Set when the relay is ending: the supervisor's next line is not read.
    let closing = CancellationToken::new();
    let downstream = {
        let closing = closing.clone();
        async move {
            let mut lines = LineReader::new(from_supervisor, MAX_LINE_BYTES);
            let mut written: u64 = 0;
            let mut answered = answered;
            loop {
                let line = tokio::select! {
                    read = lines.next() => match read {
                        Ok(Some(Line::Whole(mut line))) => {
                            line.push(b'\n');
                            line
                        }
                        Ok(Some(Line::TooLong { len, .. })) => {
                            tracing::error!(bytes = len, "the supervisor sent a line too long to pass on; the session ends");
                            return;
                        }
                        Ok(None) | Err(_) => return,
                    },
                    () = closing.cancelled() => return,
                };
                session.note_supervisor_line(line.trim_ascii_end());
                if let Some(id) = answered.take()
                    && asynctask_mcp::answers(line.trim_ascii_end(), &id)
                {
                    // The client had its answer from the opening.
                    written += 1;
                    let _ = confirm.send(written);
                    continue;
                }
                // Not interrupted by `closing`: a line being written is
                // finished and confirmed.
                let result = async {
                    client_out.write_all(&line).await?;
                    client_out.flush().await
                }
                .await;
                if result.is_err() {
                    return;
                }
                written += 1;
                // Ends with the relay: a confirmation dropped then was never
                // needed (the connection's end releases what it covers).
                let _ = confirm.send(written);
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
    let (downstream_ended, ended) = tokio::select! {
        () = &mut upstream => (false, Ended::Client),
        () = &mut stop => (false, Ended::Stopped),
        () = &mut downstream => (true, Ended::Supervisor),
        // The supervisor cannot be written to: nothing more can reach it.
        () = &mut writer => return Ended::Supervisor,
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
    ended
}

/// The confirmation that the supervisor's first `written` lines were written
/// to the client.
fn confirmation(written: u64) -> Vec<u8> {
    let mut line = json!({
        "jsonrpc": "2.0",
        "method": DELIVERED_NOTIFICATION,
        "params": {"written": written},
    })
    .to_string()
    .into_bytes();
    line.push(b'\n');
    line
}

/// What the supervisor is told in place of a client's line of `len` bytes too
/// long to pass on (starting with `head`).
fn oversized(head: &[u8], len: usize) -> Vec<u8> {
    let id = asynctask_mcp::scan_request_id(head);
    let mut line = json!({
        "jsonrpc": "2.0",
        "method": OVERSIZED_NOTIFICATION,
        "params": {"id": id, "bytes": len},
    })
    .to_string()
    .into_bytes();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_session_knows_its_opening_and_the_requests_that_wait() {
        let session = ClientSession::default();
        for line in [
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#,
        ] {
            session.note_client_line(line.as_bytes());
        }
        session.note_supervisor_line(br#"{"jsonrpc":"2.0","id":0,"result":{}}"#);
        session.note_supervisor_line(br#"{"jsonrpc":"2.0","id":2,"result":{}}"#);
        let (lines, answered) = session.reopening();
        assert_eq!(lines.len(), 2);
        assert_eq!(answered, Some(json!(0)));
        assert_eq!(
            session.take_in_flight(),
            [(json!(1), "tools/call".to_owned())],
            "answered and cancelled requests wait for nothing"
        );
        assert!(session.take_in_flight().is_empty());
    }

    #[test]
    fn a_client_line_using_a_notification_of_the_relay_is_not_passed_on() {
        let session = ClientSession::default();
        for method in [DELIVERED_NOTIFICATION, OVERSIZED_NOTIFICATION] {
            let line = json!({"jsonrpc": "2.0", "method": method, "params": {"written": 99}});
            assert!(
                !session.note_client_line(line.to_string().as_bytes()),
                "{method}"
            );
            let request = json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": {}});
            assert!(
                !session.note_client_line(request.to_string().as_bytes()),
                "{method}"
            );
        }
        assert!(
            session.take_in_flight().is_empty(),
            "nothing waits for an answer"
        );
        for line in [
            &br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notifications/asynctask/delivered"}}"#,
            b"not JSON: the supervisor answers it",
        ] {
            assert!(session.note_client_line(line), "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn the_refusal_of_a_duplicate_id_ends_only_the_duplicate() {
        let session = ClientSession::default();
        session.note_client_line(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#);
        session.note_client_line(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        session.note_supervisor_line(
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"request id 1 is already in use"}}"#,
        );
        assert_eq!(
            session.take_in_flight(),
            [(json!(1), "tools/call".to_owned())],
            "the request in progress still waits: the front answers it if the supervisor goes"
        );

        // The first answered before the duplicate's refusal is read: each
        // answer ends one of them.
        session.note_client_line(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{}}"#);
        session.note_client_line(br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
        session.note_supervisor_line(br#"{"jsonrpc":"2.0","id":2,"result":{}}"#);
        assert_eq!(
            std::mem::take(&mut session.known().in_flight),
            [(json!(2), "tools/list".to_owned())]
        );

        // A cancel ends the request in progress, not the refused one.
        session.note_client_line(br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}}"#);
        session.note_client_line(br#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#);
        session.note_client_line(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#,
        );
        assert_eq!(
            session.take_in_flight(),
            [(json!(3), "tools/list".to_owned())]
        );
    }
}
