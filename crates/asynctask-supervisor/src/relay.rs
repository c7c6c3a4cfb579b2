//! The relay: copies a client's MCP messages to the supervisor and the
//! supervisor's to the client, confirming what it wrote.

use std::time::Duration;

use asynctask_mcp::DELIVERED_NOTIFICATION;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::front::SessionStream;

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
            // Every line the supervisor sent, counted: a confirmation says how
            // many were written to the client.
            let mut written: u64 = 0;
            loop {
                let mut line = Vec::new();
                tokio::select! {
                    read = from_supervisor.read_until(b'\n', &mut line) => match read {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    },
                    () = closing.cancelled() => return,
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
                // One confirmation per burst: when no further line is
                // waiting already.
                if from_supervisor.buffer().is_empty() {
                    let confirmation = json!({
                        "jsonrpc": "2.0",
                        "method": DELIVERED_NOTIFICATION,
                        "params": {"written": written},
                    });
                    let mut confirmation = confirmation.to_string().into_bytes();
                    confirmation.push(b'\n');
                    let _ = send.send(confirmation);
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
