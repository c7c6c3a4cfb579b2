//! The one place reminders are claimed for a tool result, and acknowledged once
//! the response carrying them was written.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use asynctask_model::AsyncTaskInfo;
use asynctask_runtime::{AsyncTaskRuntime, Reminder};
use asynctask_tools::completion_notification;
use rmcp::model::RequestId;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio_util::sync::CancellationToken;

tokio::task_local! {
    /// The JSON-RPC id of the `tools/call` a tool runs for, set by the server
    /// around `Tool::execute`, so `wait_async_tasks` claims for its request.
    pub(crate) static REQUEST: RequestId;
}

/// One `tools/call` the transport received and has not answered yet.
#[derive(Debug, Default)]
struct Call {
    /// The finished tasks whose results ride on this call's response.
    claimed: Vec<String>,
    /// The response is being written: a cancel no longer releases the claim.
    committed: bool,
}

#[derive(Debug, Default)]
struct State {
    calls: HashMap<RequestId, Call>,
}

impl State {
    fn is_claimed(&self, id: &str) -> bool {
        self.calls
            .values()
            .any(|call| call.claimed.iter().any(|claimed| claimed == id))
    }
}

/// Hands every finished task's result to exactly one response, and marks it
/// delivered only once that response was written.
///
/// MCP clients may run tool calls in parallel, and a client may cancel a call
/// after its result was built but before rmcp wrote it (rmcp then drops the
/// response). So a result is first *claimed* by one request id — under one lock,
/// so parallel calls never claim the same task — and the claim ends exactly once:
/// - **acknowledged** ([`written`](Self::written) with success) when the
///   transport wrote the response carrying it: the task is marked notified;
/// - **released** when the transport received `notifications/cancelled` for the
///   request before the response was handed to it ([`cancelled`](Self::cancelled)),
///   or the write failed: the task is pending again and the next call carries it.
///
/// A call whose cancellation token already fired claims nothing. A response
/// handed to the transport before the cancel arrived counts as delivered: the
/// client received it, and ignoring it is the client's choice.
///
/// Calls that do not come through the transport ([`AsyncTaskMcpServer::call`](crate::AsyncTaskMcpServer::call))
/// take and acknowledge at once: nothing later tells the server about them.
#[derive(Debug, Clone)]
pub(crate) struct ReminderGate {
    runtime: Arc<AsyncTaskRuntime>,
    state: Arc<Mutex<State>>,
    /// Notified whenever a claim ends, so a waiting call looks again.
    changed: Arc<Notify>,
}

impl ReminderGate {
    pub(crate) fn new(runtime: Arc<AsyncTaskRuntime>) -> Self {
        ReminderGate {
            runtime,
            state: Arc::new(Mutex::new(State::default())),
            changed: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves the next time a claim ends (acknowledged or released).
    pub(crate) fn changed(&self) -> Notified<'_> {
        self.changed.notified()
    }

    /// The transport received `tools/call` `id`: results may be claimed for it.
    pub(crate) fn open(&self, id: RequestId) {
        self.lock().calls.entry(id).or_default();
    }

    /// The reminder for every finished task that is neither delivered nor
    /// claimed by another call, rendered under the lock.
    fn unclaimed(&self, state: &State) -> Option<Reminder> {
        let pending: Vec<AsyncTaskInfo> = self
            .runtime
            .manager()
            .pending_notifications()
            .into_iter()
            .filter(|task| !state.is_claimed(&task.id))
            .collect();
        if pending.is_empty() {
            return None;
        }
        Some(render(&pending, self.runtime.manager().counts().running))
    }

    /// Claims the pending results for the call running this code: for its
    /// request (see [`REQUEST`]) when it came through the transport, otherwise
    /// taken and acknowledged at once. `None` when nothing is pending, `cancel`
    /// fired, or the request was cancelled already.
    pub(crate) fn take(&self, cancel: &CancellationToken) -> Option<Reminder> {
        match REQUEST.try_with(Clone::clone) {
            Ok(id) => self.claim(&id, cancel),
            Err(_) => self.take_now(cancel),
        }
    }

    /// Claims the pending results for request `id`. `None` when nothing is
    /// pending, when `cancel` fired, when the request is unknown (cancelled
    /// already) or answered, or when it holds a claim already (nothing is
    /// appended after a reminder).
    pub(crate) fn claim(&self, id: &RequestId, cancel: &CancellationToken) -> Option<Reminder> {
        let mut state = self.lock();
        if cancel.is_cancelled() {
            return None;
        }
        let call = state.calls.get(id)?;
        if call.committed || !call.claimed.is_empty() {
            return None;
        }
        let reminder = self.unclaimed(&state)?;
        if let Some(call) = state.calls.get_mut(id) {
            call.claimed.clone_from(&reminder.task_ids);
        }
        Some(reminder)
    }

    /// Takes the pending results and marks them delivered at once (a call that
    /// does not come through the transport).
    fn take_now(&self, cancel: &CancellationToken) -> Option<Reminder> {
        let state = self.lock();
        if cancel.is_cancelled() {
            return None;
        }
        let reminder = self.unclaimed(&state)?;
        self.runtime.reminders().mark_notified(&reminder.task_ids);
        drop(state);
        self.changed.notify_waiters();
        Some(reminder)
    }

    /// The transport received `notifications/cancelled` for `id`. Unless its
    /// response was handed to the transport already, rmcp will drop it: release
    /// its claim, so the next call carries those results.
    pub(crate) fn cancelled(&self, id: &RequestId) {
        let mut state = self.lock();
        if state.calls.get(id).is_some_and(|call| !call.committed) {
            let released = state.calls.remove(id).map(|call| call.claimed);
            drop(state);
            if let Some(released) = released.filter(|ids| !ids.is_empty()) {
                tracing::debug!(request = %id, task_ids = ?released, "claim released: the call was cancelled");
                self.changed.notify_waiters();
            }
        }
    }

    /// The transport starts writing the response to `id`: from now on a cancel
    /// no longer releases its claim. `false` for a request the gate does not
    /// track (not a `tools/call`).
    pub(crate) fn commit(&self, id: &RequestId) -> bool {
        match self.lock().calls.get_mut(id) {
            Some(call) => {
                call.committed = true;
                true
            }
            None => false,
        }
    }

    /// The response to `id` was written (`delivered`) or could not be: mark its
    /// results notified, or release them. Either way the claim ends here.
    pub(crate) fn written(&self, id: &RequestId, delivered: bool) {
        let mut state = self.lock();
        let Some(call) = state.calls.remove(id) else {
            return;
        };
        if call.claimed.is_empty() {
            return;
        }
        if delivered {
            // Marked while the lock is held: no other call can see these tasks
            // as neither claimed nor delivered.
            self.runtime.reminders().mark_notified(&call.claimed);
        } else {
            tracing::debug!(request = %id, task_ids = ?call.claimed, "claim released: the response was not written");
        }
        drop(state);
        self.changed.notify_waiters();
    }
}

/// The seed's reminder: `---\nSystem Note: Async Task Status\n\n` + parts joined
/// by blank lines + `\n---` (the runtime's format, for the tasks this call holds).
fn render(pending: &[AsyncTaskInfo], running: usize) -> Reminder {
    let mut parts = Vec::with_capacity(pending.len() + 2);
    parts.push(format!("{} async task(s) completed:", pending.len()));
    parts.extend(pending.iter().map(completion_notification));
    if running > 0 {
        parts.push(format!("{running} async task(s) still running."));
    }
    Reminder {
        text: format!(
            "---\nSystem Note: Async Task Status\n\n{}\n---",
            parts.join("\n\n")
        ),
        task_ids: pending.iter().map(|task| task.id.clone()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_manager::RegisterTaskInput;
    use pretty_assertions::assert_eq;

    fn gate_with_finished(ids: &[&str]) -> (Arc<AsyncTaskRuntime>, ReminderGate) {
        let runtime = Arc::new(AsyncTaskRuntime::builder().build());
        for id in ids {
            runtime
                .manager()
                .register_task(RegisterTaskInput::new(*id, "sub", "goal"))
                .expect("registered");
            assert!(runtime.manager().cancel_task(id));
        }
        let gate = ReminderGate::new(Arc::clone(&runtime));
        (runtime, gate)
    }

    fn id(n: i64) -> RequestId {
        RequestId::Number(n)
    }

    fn pending(runtime: &AsyncTaskRuntime) -> usize {
        runtime.manager().pending_notifications().len()
    }

    #[tokio::test]
    async fn a_claim_is_exclusive_and_acknowledged_only_when_written() {
        let (runtime, gate) = gate_with_finished(&["aaaaaaaa-1", "bbbbbbbb-2"]);
        let live = CancellationToken::new();
        gate.open(id(1));
        gate.open(id(2));
        let first = gate.claim(&id(1), &live).expect("claimed");
        assert_eq!(first.task_ids, ["aaaaaaaa-1", "bbbbbbbb-2"]);
        assert!(
            first.text.starts_with(
                "---\nSystem Note: Async Task Status\n\n2 async task(s) completed:\n\n{"
            )
        );
        assert_eq!(gate.claim(&id(2), &live), None, "claimed by call 1");
        assert_eq!(gate.claim(&id(1), &live), None, "nothing after a reminder");
        assert_eq!(pending(&runtime), 2, "not delivered before the write");
        assert!(gate.commit(&id(1)));
        gate.cancelled(&id(1)); // too late: the response is being written
        gate.written(&id(1), true);
        assert_eq!(pending(&runtime), 0);
        assert_eq!(gate.claim(&id(2), &live), None);
        runtime.shutdown().await;
    }

    #[tokio::test]
    async fn a_cancel_before_the_write_releases_the_claim() {
        let (runtime, gate) = gate_with_finished(&["aaaaaaaa-1"]);
        let live = CancellationToken::new();
        gate.open(id(1));
        gate.open(id(2));
        assert!(gate.claim(&id(1), &live).is_some());
        assert_eq!(gate.claim(&id(2), &live), None);
        gate.cancelled(&id(1));
        assert!(!gate.commit(&id(1)), "rmcp drops the response: no write");
        assert_eq!(pending(&runtime), 1);
        let next = gate
            .claim(&id(2), &live)
            .expect("released to the next call");
        assert_eq!(next.task_ids, ["aaaaaaaa-1"]);
        // A failed write releases as well.
        assert!(gate.commit(&id(2)));
        gate.written(&id(2), false);
        assert_eq!(pending(&runtime), 1);
        gate.open(id(3));
        assert!(gate.claim(&id(3), &live).is_some());
        runtime.shutdown().await;
    }

    #[tokio::test]
    async fn a_cancelled_or_unknown_call_claims_nothing() {
        let (runtime, gate) = gate_with_finished(&["aaaaaaaa-1"]);
        let cancelled = CancellationToken::new();
        cancelled.cancel();
        gate.open(id(1));
        assert_eq!(gate.claim(&id(1), &cancelled), None);
        gate.cancelled(&id(1));
        assert_eq!(gate.claim(&id(1), &CancellationToken::new()), None);
        assert_eq!(gate.claim(&id(9), &CancellationToken::new()), None);
        assert_eq!(pending(&runtime), 1);
        runtime.shutdown().await;
    }
}
