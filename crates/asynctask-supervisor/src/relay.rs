//! The relay: copies a client's MCP messages to the supervisor and the
//! supervisor's to the client, confirming what it wrote.

use std::time::Duration;

use asynctask_mcp::{
    DELIVERED_NOTIFICATION, Line, LineReader, MAX_LINE_BYTES, OVERSIZED_NOTIFICATION,
};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::front::SessionStream;

/// How long a relay that is ending gives its last writes to the supervisor
/// (the client's lines it read, and its confirmations) before it exits.
const FLUSH_TIMEOUT: Duration = Duration::from_millis(200);

/// How many of the client's lines wait to be written to the supervisor before
/// the relay stops reading the client.
const QUEUED_LINES: usize = 16;

/// Copies the client's messages to the supervisor, and the supervisor's lines
/// to the client, confirming what it wrote.
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
pub(crate) async fn relay<I, O>(
    client_in: I,
    mut client_out: O,
    supervisor: SessionStream,
    stop: impl Future<Output = ()>,
) where
    I: AsyncRead + Unpin,
    O: AsyncWrite + Unpin,
{
    let SessionStream {
        read: from_supervisor,
        write: mut to_supervisor,
    } = supervisor;
    // What the client sent, for the one writer to the supervisor.
    let (send, mut outbox) = mpsc::channel::<Vec<u8>>(QUEUED_LINES);
    // How many of the supervisor's lines were written to the client: the
    // writer confirms the latest count, never queued behind the client's lines.
    let (confirm, mut confirmed) = watch::channel(0u64);
    let writer = async move {
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
        let mut lines = LineReader::new(BufReader::new(client_in), MAX_LINE_BYTES);
        loop {
            let line = match lines.next().await {
                Ok(Some(Line::Whole(mut line))) => {
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
