//! The server's transport, wrapped: it acknowledges reminders once the response
//! carrying them was delivered, releases them when the call is cancelled first,
//! and ends every call at once when the client goes away.

use std::borrow::Cow;
use std::future::Future;

use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, CustomNotification, JsonRpcMessage,
    RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use tokio_util::sync::CancellationToken;

use crate::gate::ReminderGate;

/// The notification a relay sends once it has written a response to its client
/// (`params: {"requestId": <id>, "ok": <bool>}`). A durable supervisor marks the
/// results a response carried as delivered only when it arrives; a relay that
/// ends before confirming leaves them pending for the next session.
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
/// - `tools/call` received: the gate tracks the request, so its result may claim
///   reminders;
/// - `notifications/cancelled` received: rmcp will drop the response unless it
///   was handed over already, so the gate releases the request's claim;
/// - a response handed to [`send`](Transport::send): committed; once delivered
///   (see [`AckMode`]) the gate marks its tasks notified, and releases them if
///   the write failed;
/// - end of input: `calls` is cancelled before rmcp sees the end, so synchronous
///   subagents and waits end at once instead of after rmcp's 5 s drain, and
///   (with [`AckMode::Confirmed`]) unconfirmed claims are released.
pub(crate) struct AckingTransport<T> {
    inner: T,
    gate: ReminderGate,
    calls: CancellationToken,
    mode: AckMode,
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
        }
    }
}

/// A relay's delivery confirmation, if `notification` is one.
fn delivered(notification: &CustomNotification) -> Option<(RequestId, bool)> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Params {
        request_id: RequestId,
        ok: bool,
    }
    if notification.method != DELIVERED_NOTIFICATION {
        return None;
    }
    let params: Params = notification.params_as().ok()??;
    Some((params.request_id, params.ok))
}

/// Ends a committed claim exactly once: with the write's outcome, or released
/// if the write future is dropped unfinished.
struct Written {
    gate: ReminderGate,
    id: Option<RequestId>,
}

impl Written {
    fn finish(mut self, delivered: bool) {
        if let Some(id) = self.id.take() {
            self.gate.written(&id, delivered);
        }
    }

    /// The claim stays committed: something else ends it.
    fn keep(mut self) {
        self.id = None;
    }
}

impl Drop for Written {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.gate.written(&id, false);
        }
    }
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
            JsonRpcMessage::Response(response) => Some(response.id.clone()),
            JsonRpcMessage::Error(error) => error.id.clone(),
            _ => None,
        };
        // Committed now, synchronously: rmcp calls `send` from its loop, so a
        // cancel it receives later finds the response on its way out.
        let written = Written {
            gate: self.gate.clone(),
            id: id.filter(|id| self.gate.commit(id)),
        };
        let send = self.inner.send(item);
        let mode = self.mode;
        async move {
            let result = send.await;
            match (mode, result.is_ok()) {
                (AckMode::Written, ok) => written.finish(ok),
                // Handed on: the relay confirms (or the connection's end releases).
                (AckMode::Confirmed, true) => written.keep(),
                (AckMode::Confirmed, false) => written.finish(false),
            }
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
            if let JsonRpcMessage::Notification(notification) = &message
                && let ClientNotification::CustomNotification(custom) = &notification.notification
                && let Some((id, ok)) = delivered(custom)
            {
                // Ours, not the client's: rmcp never sees it.
                self.gate.written(&id, ok);
                continue;
            }
            self.observe(&message);
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

impl<T> AckingTransport<T> {
    /// Tells the gate about a message from the client.
    fn observe(&self, message: &ClientJsonRpcMessage) {
        match message {
            JsonRpcMessage::Request(request)
                if matches!(request.request, ClientRequest::CallToolRequest(_)) =>
            {
                self.gate.open(request.id.clone());
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.gate.cancelled(id);
                }
            }
            _ => {}
        }
    }
}
