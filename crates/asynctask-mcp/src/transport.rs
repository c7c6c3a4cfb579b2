//! The stdio transport, wrapped: it acknowledges reminders once the response
//! carrying them was written, releases them when the call is cancelled first,
//! and ends every call at once when the client goes away.

use std::borrow::Cow;
use std::future::Future;

use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage, RequestId,
    ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use tokio_util::sync::CancellationToken;

use crate::gate::ReminderGate;

/// A server transport around `inner` (stdio, in `serve_stdio`) that tells the
/// [`ReminderGate`] what happened on the wire:
/// - `tools/call` received: the gate tracks the request, so its result may claim
///   reminders;
/// - `notifications/cancelled` received: rmcp will drop the response unless it
///   was handed over already, so the gate releases the request's claim;
/// - a response handed to [`send`](Transport::send): committed; once written the
///   gate marks its tasks notified, and releases them if the write failed;
/// - end of input: `calls` is cancelled before rmcp sees the end, so synchronous
///   subagents and waits end at once instead of after rmcp's 5 s drain.
pub(crate) struct AckingTransport<T> {
    inner: T,
    gate: ReminderGate,
    calls: CancellationToken,
}

impl<T> AckingTransport<T> {
    pub(crate) fn new(inner: T, gate: ReminderGate, calls: CancellationToken) -> Self {
        AckingTransport { inner, gate, calls }
    }
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
        async move {
            let result = send.await;
            written.finish(result.is_ok());
            result
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        let Some(message) = self.inner.receive().await else {
            // The client is gone: end every call now, before rmcp starts its drain.
            self.calls.cancel();
            return None;
        };
        match &message {
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
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
