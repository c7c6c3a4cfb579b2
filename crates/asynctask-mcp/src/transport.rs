//! The server's transport, wrapped: it acknowledges reminders once the response
//! carrying them was delivered, releases them when the call is cancelled first,
//! and ends every call at once when the client goes away.

use std::borrow::Cow;
use std::future::Future;

use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, CustomNotification, ErrorData, JsonRpcMessage,
    ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use tokio_util::sync::CancellationToken;

use crate::gate::ReminderGate;

/// The notification a relay sends to a durable supervisor as it writes the
/// supervisor's messages to its client: `params: {"written": N}`, the number
/// of the session's messages (every line the supervisor sent, counted from 1)
/// written so far. The supervisor marks the results a response carried as
/// delivered only once a confirmation covers it; a relay that ends before
/// confirming leaves them pending for the next session.
pub const DELIVERED_NOTIFICATION: &str = "notifications/asynctask/delivered";

/// When a response counts as delivered to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AckMode {
    /// When the transport wrote it: the transport's other end is the client
    /// (stdio).
    Written,
    /// When the relay between us and the client says it wrote it to the client,
    /// with a [`DELIVERED_NOTIFICATION`]; a connection that ends first releases
    /// what it had not confirmed (a durable supervisor's sessions).
    Confirmed,
}

/// A server transport around `inner` that tells the [`ReminderGate`] what
/// happened on the wire:
/// - a request received: the gate opens its id — or, when a request with that
///   id is still open, the transport answers it with a JSON-RPC error itself
///   and rmcp never sees it (two requests sharing an id would share a claim);
/// - `notifications/cancelled` received: rmcp will drop the response unless it
///   was handed over already, so the gate releases the request's claim;
/// - a response handed to [`send`](Transport::send): the request's claim is
///   taken from the gate and ended by the write — acknowledged once delivered
///   (see [`AckMode`]), released if the write failed;
/// - end of input: `calls` is cancelled before rmcp sees the end, so synchronous
///   subagents and waits end at once instead of after rmcp's 5 s drain, and
///   (with [`AckMode::Confirmed`]) unconfirmed claims are released.
pub(crate) struct AckingTransport<T> {
    inner: T,
    gate: ReminderGate,
    calls: CancellationToken,
    mode: AckMode,
    /// How many messages were handed to `inner` (a relay confirms by count).
    sent: u64,
}

impl<T> AckingTransport<T> {
    pub(crate) fn new(
        inner: T,
        gate: ReminderGate,
        calls: CancellationToken,
        mode: AckMode,
    ) -> Self {
        gate.track();
        AckingTransport {
            inner,
            gate,
            calls,
            mode,
            sent: 0,
        }
    }
}

/// A relay's delivery confirmation, if `notification` is one: how many
/// messages it wrote.
fn delivered(notification: &CustomNotification) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Params {
        written: u64,
    }
    if notification.method != DELIVERED_NOTIFICATION {
        return None;
    }
    let params: Params = notification.params_as().ok()??;
    Some(params.written)
}

impl<T> Transport<RoleServer> for AckingTransport<T>
where
    T: Transport<RoleServer>,
{
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let id = match &item {
            JsonRpcMessage::Response(response) => Some(&response.id),
            JsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        // Taken now, synchronously: rmcp calls `send` from its loop, so a
        // cancel it receives later finds the response on its way out.
        let claim = id.and_then(|id| self.gate.answered(id));
        self.sent += 1;
        let claim = match (self.mode, claim) {
            (AckMode::Confirmed, Some(claim)) => {
                // Ended by the relay's confirmation, or released with the
                // connection.
                self.gate.await_confirmation(self.sent, claim);
                None
            }
            (_, claim) => claim,
        };
        let send = self.inner.send(item);
        async move {
            let result = send.await;
            if let (Some(claim), true) = (claim, result.is_ok()) {
                claim.acknowledge();
            }
            // A failed write dropped the claim: released.
            result
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let Some(message) = self.inner.receive().await else {
                // The client is gone: end every call now, before rmcp starts its
                // drain; what was never confirmed delivered is released.
                self.calls.cancel();
                if self.mode == AckMode::Confirmed {
                    self.gate.release_all();
                }
                return None;
            };
            match &message {
                JsonRpcMessage::Notification(notification) => match &notification.notification {
                    ClientNotification::CustomNotification(custom) => {
                        if let Some(written) = delivered(custom) {
                            // Ours, not the client's: rmcp never sees it.
                            self.gate.confirmed(written);
                            continue;
                        }
                    }
                    ClientNotification::CancelledNotification(cancelled) => {
                        if let Some(id) = &cancelled.params.request_id {
                            self.gate.cancelled(id);
                        }
                    }
                    _ => {}
                },
                JsonRpcMessage::Request(request) if !self.gate.open(request.id.clone()) => {
                    let refusal = ServerJsonRpcMessage::error(
                        ErrorData::invalid_request(
                            format!(
                                "request id {} is already in use by a request in progress; \
                                 a request's id must be unique until it is answered",
                                request.id
                            ),
                            None,
                        ),
                        Some(request.id.clone()),
                    );
                    self.sent += 1;
                    if self.inner.send(refusal).await.is_err() {
                        return None;
                    }
                    continue;
                }
                _ => {}
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use asynctask_manager::RegisterTaskInput;
    use asynctask_model::{OutputObject, TerminateReason};
    use asynctask_runtime::AsyncTaskRuntime;
    use pretty_assertions::assert_eq;
    use rmcp::ServiceExt as _;
    use rmcp::transport::async_rw::AsyncRwTransport;
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

    use super::AckMode;
    use crate::AsyncTaskMcpServer;

    /// A server on our transport over an in-memory pipe, initialized; the
    /// client's ends.
    async fn serve(
        runtime: &Arc<AsyncTaskRuntime>,
    ) -> (
        tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
        tokio::io::WriteHalf<tokio::io::DuplexStream>,
    ) {
        let server = AsyncTaskMcpServer::new(Arc::clone(runtime)).expect("valid tools");
        let (client_end, server_end) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(server_end);
        let transport =
            server.transport(AsyncRwTransport::new_server(read, write), AckMode::Written);
        tokio::spawn(async move {
            if let Ok(service) = server.serve(transport).await {
                let _ = service.waiting().await;
            }
        });
        let (read, mut write) = tokio::io::split(client_end);
        let mut lines = BufReader::new(read).lines();
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        }});
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        write
            .write_all(format!("{init}\n{initialized}\n").as_bytes())
            .await
            .expect("written");
        let answer = lines.next_line().await.expect("read").expect("a line");
        assert!(answer.contains("serverInfo"), "{answer}");
        (lines, write)
    }

    /// Two requests sharing an id, in one write, after a task finished: one is
    /// served (and carries the result), the other refused with an error naming
    /// the id; the result is delivered once and never lost.
    #[tokio::test]
    async fn a_request_whose_id_is_in_use_is_refused_and_loses_no_result() {
        for round in 0..100 {
            let runtime = Arc::new(AsyncTaskRuntime::builder().build());
            let task = format!("{round:08x}-done");
            runtime
                .manager()
                .register_task(RegisterTaskInput::new(task.clone(), "s", "g"))
                .expect("registered");
            let output = OutputObject::new(TerminateReason::Goal).with_final_message("finished");
            runtime.manager().complete_task(&task, output);
            let (mut lines, mut write) = serve(&runtime).await;
            let check = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": {"name": "check_async_tasks", "arguments": {}}});
            write
                .write_all(format!("{check}\n{check}\n").as_bytes())
                .await
                .expect("written");
            let mut answers: Vec<Value> = Vec::new();
            for _ in 0..2 {
                let line = lines.next_line().await.expect("read").expect("a line");
                answers.push(serde_json::from_str(&line).expect("JSON"));
            }
            let refused: Vec<&Value> = answers
                .iter()
                .filter(|a| a.get("error").is_some())
                .collect();
            assert_eq!(refused.len(), 1, "round {round}: {answers:#?}");
            assert_eq!(refused[0]["id"], 5);
            assert_eq!(refused[0]["error"]["code"], -32600);
            let carried = answers
                .iter()
                .filter(|a| {
                    a.to_string()
                        .contains("\\\"final_message\\\": \\\"finished\\\"")
                })
                .count();
            assert_eq!(carried, 1, "round {round}: {answers:#?}");
            // Delivered: the next call does not carry it again.
            let next = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                "params": {"name": "check_async_tasks", "arguments": {}}});
            write
                .write_all(format!("{next}\n").as_bytes())
                .await
                .expect("written");
            let line = lines.next_line().await.expect("read").expect("a line");
            assert!(
                !line.contains("final_message"),
                "round {round}: twice: {line}"
            );
            assert!(runtime.manager().pending_notifications().is_empty());
            drop(write);
            runtime.shutdown().await;
        }
    }
}
