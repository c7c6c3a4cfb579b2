//! Which `tools/call` may claim results, and when its claim ends: the MCP side
//! of the runtime's claim ledger.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use asynctask_manager::TaskSnapshot;
use asynctask_runtime::{ClaimLedger, ClaimOwner, Reminder, RequestKey};

use crate::session::Session;
use rmcp::model::RequestId;
use tokio::sync::futures::Notified;
use tokio_util::sync::CancellationToken;

tokio::task_local! {
    /// The JSON-RPC id of the `tools/call` a tool runs for, set by the server
    /// around `Tool::execute`, so `wait_async_tasks` claims for its request.
    pub(crate) static REQUEST: RequestId;
}

/// About how many characters of results one response's reminder carries: the
/// first result always (whole), then the next ones while they fit; the rest
/// ride on the next responses. Clients cut long tool results (Codex keeps about
/// 12,000 characters, from both ends), and a result cut out of the middle of a
/// response would be lost though marked delivered; one subagent's result is
/// itself bounded (a subprocess subagent's to 10,000 characters by default).
pub(crate) const REMINDER_BUDGET_CHARS: usize = 10_000;

/// Where a `tools/call` the transport received stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// Not answered yet: it may claim results, and a cancel releases them.
    Open,
    /// Its response is being written: a cancel no longer releases its claim.
    Committed,
}

/// The MCP side of delivery: each `tools/call` is a [`ClaimOwner::Request`] in
/// the runtime's [`ClaimLedger`], and the transport tells this gate what
/// happened to its response, which ends the claim exactly once:
///
/// - **acknowledged** ([`written`](Self::written) with success) when the
///   transport wrote the response carrying the results;
/// - **released** when the transport received `notifications/cancelled` for the
///   request before the response was handed to it ([`cancelled`](Self::cancelled)),
///   or the write failed: the results are pending again and the next call
///   carries them.
///
/// A call whose cancellation token already fired claims nothing. A response
/// handed to the transport before the cancel arrived counts as delivered: the
/// client received it, and ignoring it is the client's choice.
///
/// Calls that do not come through the transport
/// ([`AsyncTaskMcpServer::call`](crate::AsyncTaskMcpServer::call)) claim and
/// acknowledge at once: nothing later tells the server about them. So do all
/// calls of a gate no acking transport [tracks](Self::track) (the server
/// served over a transport of the caller's): nothing would ever end their
/// claims, and their results would never be delivered.
///
/// Served to one session of several ([`for_session`](Self::for_session)), a
/// call claims only the results that session may take (see
/// [`Session::may_claim`]), and its request ids are kept apart from other
/// sessions' (every session numbers its requests from 0).
#[derive(Debug, Clone)]
pub(crate) struct ReminderGate {
    ledger: Arc<ClaimLedger>,
    calls: Arc<Mutex<HashMap<RequestId, Call>>>,
    session: Option<Arc<Session>>,
    /// An acking transport tells this gate about every `tools/call`: a request
    /// it does not know was cancelled or answered. Without one, no request is
    /// ever opened.
    tracked: Arc<AtomicBool>,
}

impl ReminderGate {
    pub(crate) fn new(ledger: Arc<ClaimLedger>) -> Self {
        ReminderGate {
            ledger,
            calls: Arc::new(Mutex::new(HashMap::new())),
            session: None,
            tracked: Arc::new(AtomicBool::new(false)),
        }
    }

    /// An acking transport serves this gate's calls from now on: it opens
    /// each request, and ends each claim when the response is written or
    /// cancelled.
    pub(crate) fn track(&self) {
        self.tracked.store(true, Ordering::SeqCst);
    }

    /// A gate for one of several sessions sharing `ledger`.
    pub(crate) fn for_session(ledger: Arc<ClaimLedger>, session: Arc<Session>) -> Self {
        ReminderGate {
            session: Some(session),
            ..ReminderGate::new(ledger)
        }
    }

    /// The ledger's owner for request `id`: the id's JSON text (so `1` and `"1"`
    /// are different requests), after the session's id when there is one.
    fn owner(&self, id: &RequestId) -> ClaimOwner {
        let request = serde_json::to_string(id).unwrap_or_else(|_| id.to_string());
        let key = match &self.session {
            Some(session) => format!("{}/{request}", session.id()),
            None => request,
        };
        ClaimOwner::Request(RequestKey::new(key))
    }

    /// Claims for `owner` what this gate's session may take.
    fn claim_for(&self, owner: &ClaimOwner) -> Option<Reminder> {
        match &self.session {
            None => self
                .ledger
                .claim_within(owner, REMINDER_BUDGET_CHARS, |_| true),
            Some(session) => self
                .ledger
                .claim_within(owner, REMINDER_BUDGET_CHARS, |task| session.may_claim(task)),
        }
    }

    /// Whether this gate's session may take `task`'s result (every result,
    /// when the gate serves no session of several).
    pub(crate) fn may_claim(&self, task: &TaskSnapshot) -> bool {
        self.session
            .as_ref()
            .is_none_or(|session| session.may_claim(task))
    }

    /// Whether a result this gate's session may take is pending and unclaimed.
    pub(crate) fn anything_to_claim(&self) -> bool {
        let manager = self.ledger.manager();
        manager
            .pending_notifications()
            .iter()
            .any(|task| !self.ledger.is_claimed(task.id()) && self.may_claim(task))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RequestId, Call>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves the next time a claim ends or a task finishes (see
    /// [`ClaimLedger::changed`]).
    pub(crate) fn changed(&self) -> Notified<'_> {
        self.ledger.changed()
    }

    /// The transport received `tools/call` `id`: results may be claimed for it.
    pub(crate) fn open(&self, id: RequestId) {
        self.lock().entry(id).or_insert(Call::Open);
    }

    /// Claims the pending results for the call running this code: for its
    /// request (see [`REQUEST`]) when it came through the transport, otherwise
    /// claimed and acknowledged at once. `None` when nothing is pending, `cancel`
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
    ///
    /// Without an acking transport ([`track`](Self::track)) no request is
    /// known: the results are claimed and acknowledged at once, delivered by
    /// the response this call is about to send.
    pub(crate) fn claim(&self, id: &RequestId, cancel: &CancellationToken) -> Option<Reminder> {
        if !self.tracked.load(Ordering::SeqCst) {
            return self.take_now(cancel);
        }
        // Held across the claim: a cancel that arrives meanwhile waits, then
        // releases what was claimed.
        let calls = self.lock();
        if cancel.is_cancelled() || calls.get(id) != Some(&Call::Open) {
            return None;
        }
        self.claim_for(&self.owner(id))
    }

    /// Claims the pending results and acknowledges them at once (a call that
    /// does not come through the transport).
    fn take_now(&self, cancel: &CancellationToken) -> Option<Reminder> {
        if cancel.is_cancelled() {
            return None;
        }
        let direct = ClaimOwner::Request(RequestKey::new(format!("direct-{}", next_direct_call())));
        let reminder = self.claim_for(&direct)?;
        self.ledger.acknowledge(&direct);
        Some(reminder)
    }

    /// The transport received `notifications/cancelled` for `id`. Unless its
    /// response was handed to the transport already, rmcp will drop it: release
    /// its claim, so the next call carries those results.
    pub(crate) fn cancelled(&self, id: &RequestId) {
        let mut calls = self.lock();
        if calls.get(id) == Some(&Call::Open) {
            calls.remove(id);
            self.ledger.release(&self.owner(id));
        }
    }

    /// The transport starts writing the response to `id`: from now on a cancel
    /// no longer releases its claim. `false` for a request the gate does not
    /// track (not a `tools/call`, or cancelled already).
    pub(crate) fn commit(&self, id: &RequestId) -> bool {
        match self.lock().get_mut(id) {
            Some(call) => {
                *call = Call::Committed;
                true
            }
            None => false,
        }
    }

    /// The response to `id` was written (`delivered`) or could not be: its
    /// results are acknowledged, or released. Either way the claim ends here.
    pub(crate) fn written(&self, id: &RequestId, delivered: bool) {
        if self.lock().remove(id).is_none() {
            return;
        }
        if delivered {
            self.ledger.acknowledge(&self.owner(id));
        } else {
            self.ledger.release(&self.owner(id));
        }
    }

    /// The connection is gone: every claim still held by its calls (open, or
    /// committed but never confirmed written) is released for the next call.
    pub(crate) fn release_all(&self) {
        let mut calls = self.lock();
        for (id, _) in calls.drain() {
            self.ledger.release(&self.owner(&id));
        }
    }
}

/// A number no other direct call of this process used.
fn next_direct_call() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_manager::RegisterTaskInput;
    use asynctask_runtime::AsyncTaskRuntime;
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
        let gate = ReminderGate::new(Arc::clone(runtime.claims()));
        gate.track();
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

    #[tokio::test]
    async fn without_an_acking_transport_a_call_claims_and_acknowledges_at_once() {
        let (runtime, _) = gate_with_finished(&["aaaaaaaa-1"]);
        let untracked = ReminderGate::new(Arc::clone(runtime.claims()));
        let cancelled = CancellationToken::new();
        cancelled.cancel();
        assert_eq!(untracked.claim(&id(1), &cancelled), None);
        let reminder = untracked
            .claim(&id(1), &CancellationToken::new())
            .expect("never opened, claimed all the same");
        assert_eq!(reminder.task_ids, ["aaaaaaaa-1"]);
        assert_eq!(pending(&runtime), 0, "acknowledged at once");
        assert_eq!(untracked.claim(&id(2), &CancellationToken::new()), None);
        runtime.shutdown().await;
    }

    #[tokio::test]
    async fn numeric_and_string_ids_are_different_requests() {
        let (runtime, gate) = gate_with_finished(&["aaaaaaaa-1"]);
        let live = CancellationToken::new();
        gate.open(id(1));
        gate.open(RequestId::String("1".into()));
        assert!(gate.claim(&id(1), &live).is_some());
        gate.cancelled(&RequestId::String("1".into()));
        assert_eq!(
            runtime.claims().held_by(&gate.owner(&id(1))),
            ["aaaaaaaa-1"],
            "the string id's cancel does not release the number's claim"
        );
        runtime.shutdown().await;
    }
}
