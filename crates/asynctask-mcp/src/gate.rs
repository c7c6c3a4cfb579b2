//! Which request carries which results, and when its claim ends: the MCP side
//! of the runtime's claim ledger.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use asynctask_manager::TaskSnapshot;
use asynctask_runtime::{Claim, ClaimLedger, ClaimOwner, Reminder};

use crate::session::Session;
use crate::tasks::TaskHandles;
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

/// A request the transport received and has not answered.
#[derive(Debug)]
enum Open {
    /// Its handler runs: it may claim results, and a cancel ends it.
    Running,
    /// Its handler returned with these results in its response: the claim
    /// goes with the response to the transport, or is released by a cancel
    /// that comes first.
    Answered(Claim),
}

#[derive(Debug, Default)]
struct Calls {
    /// Every request received and not yet answered nor cancelled, by id.
    open: HashMap<RequestId, Open>,
    /// Claims whose responses were handed on, waiting for a relay to confirm
    /// it wrote them ([`AckMode::Confirmed`](crate::transport::AckMode)): with
    /// the number of the message that carried each, in the order sent.
    unconfirmed: VecDeque<(u64, Claim)>,
}

/// The MCP side of delivery: each `tools/call` that carries results owns a
/// [`Claim`] from the runtime's [`ClaimLedger`], kept here by request id until
/// the transport says what happened to its response:
///
/// - **acknowledged** when the transport wrote the response (or, behind a
///   relay, when the relay confirms it wrote it);
/// - **released** (dropped) when `notifications/cancelled` for the request
///   arrived before its response was handed to the transport (rmcp then
///   drops the response), when the write failed, or when the connection ended
///   before a relay confirmed it.
///
/// A call whose cancellation token already fired claims nothing. A response
/// handed to the transport before the cancel arrived counts as delivered: the
/// client received it, and ignoring it is the client's choice.
///
/// The transport also keeps request ids apart: a request whose id is already
/// open is refused ([`open`](Self::open) says so) before any handler runs, so
/// no claim ever belongs to two requests.
///
/// Calls that do not come through the transport
/// ([`AsyncTaskMcpServer::call`](crate::AsyncTaskMcpServer::call)) claim and
/// acknowledge at once: nothing later tells the server about them. So do all
/// calls of a gate no acking transport [tracks](Self::track) (the server
/// served over a transport of the caller's): nothing would ever end their
/// claims.
///
/// Served to one session of several ([`for_session`](Self::for_session)), a
/// call claims only the results that session may take (see
/// [`Session::may_claim`]); each session has its own gate, so request ids of
/// different sessions never meet.
#[derive(Debug, Clone)]
pub(crate) struct ReminderGate {
    ledger: ClaimLedger,
    calls: Arc<Mutex<Calls>>,
    session: Option<Arc<Session>>,
    /// An acking transport tells this gate about every request: a request it
    /// does not know was cancelled or answered. Without one, no request is
    /// ever opened.
    tracked: Arc<AtomicBool>,
    /// The tasks a client follows as MCP Tasks: their results go to its
    /// `tasks/get` polls, never into a reminder, while it follows them.
    handles: TaskHandles,
    /// The client takes questions as elicitation forms: none rides in a
    /// reminder.
    forms: Arc<AtomicBool>,
}

impl ReminderGate {
    pub(crate) fn new(ledger: ClaimLedger) -> Self {
        ReminderGate {
            ledger,
            calls: Arc::default(),
            session: None,
            tracked: Arc::new(AtomicBool::new(false)),
            handles: TaskHandles::default(),
            forms: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether questions go to the client as forms (`true`) or ride in
    /// reminders (`false`, and when a form fails).
    pub(crate) fn ask_in_forms(&self, forms: bool) {
        self.forms.store(forms, Ordering::SeqCst);
        if !forms {
            self.ledger.notify_changed();
        }
    }

    /// Whether questions go to the client as forms.
    pub(crate) fn asks_in_forms(&self) -> bool {
        self.forms.load(Ordering::SeqCst)
    }

    /// Whether a reminder may carry the questions of `task`.
    fn may_ask(&self, task: &TaskSnapshot) -> bool {
        !self.forms.load(Ordering::SeqCst) && self.may_claim(task)
    }

    /// The tasks this gate's client follows as MCP Tasks (shared with the
    /// server that answers its polls).
    pub(crate) fn handles(&self) -> &TaskHandles {
        &self.handles
    }

    /// An acking transport serves this gate's calls from now on: it opens
    /// each request, and ends each claim when the response is written or
    /// cancelled.
    pub(crate) fn track(&self) {
        self.tracked.store(true, Ordering::SeqCst);
    }

    /// A gate for one of several sessions sharing `ledger`.
    /// Its client follows MCP Tasks in the set all its sessions share.
    pub(crate) fn for_session(ledger: ClaimLedger, session: Arc<Session>) -> Self {
        ReminderGate {
            handles: session.followed().clone(),
            session: Some(session),
            ..ReminderGate::new(ledger)
        }
    }

    fn lock(&self) -> MutexGuard<'_, Calls> {
        // Maps of requests and claims, consistent after every statement.
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims for a response what this gate's session may take.
    fn claim(&self) -> Option<Claim> {
        self.ledger.claim_within_asking(
            ClaimOwner::Request,
            REMINDER_BUDGET_CHARS,
            |task| self.may_claim(task),
            |task| self.may_ask(task),
        )
    }

    /// Whether a reminder of this gate's session may take `task`'s result:
    /// one its session may take (every result, when the gate serves no
    /// session of several) that no `tasks/get` of its client holds (see
    /// [`TaskHandles::holds`]: a followed task that ended goes to the
    /// reminders once no poll took it for a while).
    pub(crate) fn may_claim(&self, task: &TaskSnapshot) -> bool {
        let now = self.ledger.manager().clock().now_ms();
        // A server of its own serves its one client, which polls while it is
        // connected; of several sessions, one whose client declared the
        // extension may poll.
        let polled = self
            .session
            .as_ref()
            .is_none_or(|session| session.any_polls());
        self.session
            .as_ref()
            .is_none_or(|session| session.may_claim(task))
            && !self.handles.holds(task, now, polled)
    }

    /// How long until a followed result no poll took goes to the reminders
    /// (a waiter looks again then); `None` when none waits for that.
    pub(crate) fn next_release(&self) -> Option<std::time::Duration> {
        let manager = self.ledger.manager();
        self.handles.next_release(manager, manager.clock().now_ms())
    }

    /// Claims task `task_id`'s result for request `id` (a `tasks/get` or
    /// `tasks/cancel` of the client that follows it), for the transport to
    /// end with the response as it ends a `tools/call`'s. `false` when the
    /// result is not pending, another claim carries it, or the request is
    /// not open (cancelled already). Without an acking transport the claim
    /// is acknowledged at once, as [`answer`](Self::answer) does.
    pub(crate) fn answer_task(&self, id: &RequestId, task_id: &str) -> bool {
        let claim_it = || {
            self.ledger
                .claim_matching(ClaimOwner::TaskPoll, |task| task.id() == task_id)
        };
        if !self.tracked.load(Ordering::SeqCst) {
            return claim_it().map(Claim::acknowledge).is_some();
        }
        let mut calls = self.lock();
        if !matches!(calls.open.get(id), Some(Open::Running)) {
            return false;
        }
        let Some(claim) = claim_it() else {
            return false;
        };
        calls.open.insert(id.clone(), Open::Answered(claim));
        true
    }

    /// Whether a result this gate's session may take is pending and unclaimed,
    /// or a question of its tasks waits to be shown.
    pub(crate) fn anything_to_claim(&self) -> bool {
        let manager = self.ledger.manager();
        manager
            .pending_notifications()
            .iter()
            .any(|task| !self.ledger.is_claimed(task.id()) && self.may_claim(task))
            || (manager.has_unshown_questions()
                && manager.pending_questions().iter().any(|question| {
                    manager
                        .task(&question.task_id)
                        .is_some_and(|task| self.may_ask(&task))
                }))
    }

    /// Wakes whoever waits for a change (a question let go, say).
    pub(crate) fn notify_changed(&self) {
        self.ledger.notify_changed();
    }

    /// Resolves the next time a claim ends or a task finishes (see
    /// [`ClaimLedger::changed`]).
    pub(crate) fn changed(&self) -> Notified<'_> {
        self.ledger.changed()
    }

    /// The transport received request `id`. `false` when a request with that
    /// id is still open: the new one must be refused (JSON-RPC ids are
    /// unique among the requests in progress), not served.
    pub(crate) fn open(&self, id: RequestId) -> bool {
        match self.lock().open.entry(id) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(Open::Running);
                true
            }
        }
    }

    /// How many requests are open (received, neither answered nor cancelled).
    pub(crate) fn open_requests(&self) -> usize {
        self.lock().open.len()
    }

    /// Claims the pending results for the call running this code, and returns
    /// the reminder text to append to its response: for its request (see
    /// [`REQUEST`]) when it came through the transport, otherwise claimed and
    /// acknowledged at once. `None` when nothing is pending, `cancel` fired, or
    /// the request was cancelled already or has claimed already (nothing is
    /// appended after a reminder).
    pub(crate) fn answer_current(&self, cancel: &CancellationToken) -> Option<Reminder> {
        match REQUEST.try_with(Clone::clone) {
            Ok(id) => self.answer(&id, cancel),
            Err(_) => self.answer_now(cancel),
        }
    }

    /// Claims the pending results for request `id`'s response, and returns the
    /// reminder it carries; the claim waits here for the
    /// transport. `None` when nothing is pending, when `cancel` fired, when the
    /// request is not open (cancelled already), or when it holds a claim
    /// already.
    ///
    /// Without an acking transport ([`track`](Self::track)) no request is
    /// known: the results are claimed and acknowledged at once, delivered by
    /// the response this call is about to send.
    pub(crate) fn answer(&self, id: &RequestId, cancel: &CancellationToken) -> Option<Reminder> {
        if !self.tracked.load(Ordering::SeqCst) {
            return self.answer_now(cancel);
        }
        // Held across the claim: a cancel that arrives meanwhile waits, then
        // finds the claim and releases it.
        let mut calls = self.lock();
        if cancel.is_cancelled() || !matches!(calls.open.get(id), Some(Open::Running)) {
            return None;
        }
        let claim = self.claim()?;
        let carried = claim.reminder().clone();
        calls.open.insert(id.clone(), Open::Answered(claim));
        Some(carried)
    }

    /// Claims the pending results and acknowledges them at once (a call that
    /// does not come through the transport).
    fn answer_now(&self, cancel: &CancellationToken) -> Option<Reminder> {
        if cancel.is_cancelled() {
            return None;
        }
        let claim = self.claim()?;
        let carried = claim.reminder().clone();
        claim.acknowledge();
        Some(carried)
    }

    /// The transport received `notifications/cancelled` for `id`. Unless its
    /// response was handed to the transport already, rmcp will drop it: its
    /// claim is released, so the next call carries those results.
    pub(crate) fn cancelled(&self, id: &RequestId) {
        let ended = self.lock().open.remove(id);
        drop(ended);
    }

    /// The transport is handing on the response to `id`: the request is no
    /// longer open (a cancel no longer releases anything), and the claim its
    /// response carries, if any, is the transport's to end.
    pub(crate) fn answered(&self, id: &RequestId) -> Option<Claim> {
        match self.lock().open.remove(id)? {
            Open::Running => None,
            Open::Answered(claim) => Some(claim),
        }
    }

    /// A relay will confirm writing message number `message` (counted from 1
    /// on the connection), which carries `claim`.
    pub(crate) fn await_confirmation(&self, message: u64, claim: Claim) {
        self.lock().unconfirmed.push_back((message, claim));
    }

    /// The relay wrote the first `written` messages to its client: the claims
    /// they carried are acknowledged.
    pub(crate) fn confirmed(&self, written: u64) {
        let mut delivered = Vec::new();
        {
            let mut calls = self.lock();
            while calls
                .unconfirmed
                .front()
                .is_some_and(|(message, _)| *message <= written)
            {
                if let Some((_, claim)) = calls.unconfirmed.pop_front() {
                    delivered.push(claim);
                }
            }
        }
        for claim in delivered {
            claim.acknowledge();
        }
    }

    /// The connection is gone: every claim still held by its calls (answered
    /// but never handed on, or handed on but never confirmed written) is
    /// released for the next call.
    pub(crate) fn release_all(&self) {
        let ended = std::mem::take(&mut *self.lock());
        drop(ended);
    }
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
        let gate = ReminderGate::new(runtime.claims().clone());
        gate.track();
        (runtime, gate)
    }

    fn id(n: i64) -> RequestId {
        RequestId::Number(n)
    }

    fn pending(runtime: &AsyncTaskRuntime) -> usize {
        runtime.manager().pending_notifications().len()
    }

    fn carried(answer: Option<Reminder>) -> Option<Vec<String>> {
        answer.map(|reminder| reminder.task_ids)
    }

    #[tokio::test]
    async fn a_claim_is_exclusive_and_acknowledged_only_when_written() {
        let (runtime, gate) = gate_with_finished(&["aaaaaaaa-1", "bbbbbbbb-2"]);
        let live = CancellationToken::new();
        assert!(gate.open(id(1)));
        assert!(gate.open(id(2)));
        let Reminder {
            text,
            task_ids: ids,
        } = gate.answer(&id(1), &live).expect("claimed");
        assert_eq!(ids, ["aaaaaaaa-1", "bbbbbbbb-2"]);
        assert!(
            text.starts_with(
                "---\nSystem Note: Async Task Status\n\n2 async task(s) completed:\n\n{"
            )
        );
        assert_eq!(
            carried(gate.answer(&id(2), &live)),
            None,
            "claimed by call 1"
        );
        assert_eq!(
            carried(gate.answer(&id(1), &live)),
            None,
            "nothing after a reminder"
        );
        assert_eq!(pending(&runtime), 2, "not delivered before the write");
        let claim = gate.answered(&id(1)).expect("the response carries it");
        gate.cancelled(&id(1)); // too late: the response is being written
        claim.acknowledge();
        assert_eq!(pending(&runtime), 0);
        assert_eq!(carried(gate.answer(&id(2), &live)), None);
        runtime.shutdown().await;
    }

    #[tokio::test]
    async fn a_cancel_before_the_write_releases_the_claim() {
        let (runtime, gate) = gate_with_finished(&["aaaaaaaa-1"]);
        let live = CancellationToken::new();
        assert!(gate.open(id(1)) && gate.open(id(2)));
        assert!(gate.answer(&id(1), &live).is_some());
        assert_eq!(carried(gate.answer(&id(2), &live)), None);
        gate.cancelled(&id(1));
        assert!(gate.answered(&id(1)).is_none(), "rmcp drops the response");
        assert_eq!(pending(&runtime), 1);
        assert_eq!(
            carried(gate.answer(&id(2), &live)),
            Some(vec!["aaaaaaaa-1".to_owned()]),
            "released to the next call"
        );
        // A failed write releases as well.
        drop(gate.answered(&id(2)));
        assert_eq!(pending(&runtime), 1);
        assert!(gate.open(id(3)));
        assert!(gate.answer(&id(3), &live).is_some());
        runtime.shutdown().await;
    }

    #[tokio::test]
    async fn a_request_id_in_use_is_refused_and_claims_nothing() {
        let (runtime, gate) = gate_with_finished(&["aaaaaaaa-1"]);
        let live = CancellationToken::new();
        assert!(gate.open(id(7)));
        assert!(!gate.open(id(7)), "the second request with id 7");
        assert!(gate.answer(&id(7), &live).is_some());
        assert!(!gate.open(id(7)), "still open: answered, not yet sent");
        let claim = gate.answered(&id(7)).expect("carried");
        assert!(gate.open(id(7)), "free again once answered");
        claim.acknowledge();
        assert_eq!(pending(&runtime), 0);
        runtime.shutdown().await;
    }

    #[tokio::test]
    async fn a_cancelled_or_unknown_call_claims_nothing() {
        let (runtime, gate) = gate_with_finished(&["aaaaaaaa-1"]);
        let cancelled = CancellationToken::new();
        cancelled.cancel();
        assert!(gate.open(id(1)));
        assert_eq!(carried(gate.answer(&id(1), &cancelled)), None);
        gate.cancelled(&id(1));
        assert_eq!(
            carried(gate.answer(&id(1), &CancellationToken::new())),
            None
        );
        assert_eq!(
            carried(gate.answer(&id(9), &CancellationToken::new())),
            None
        );
        assert_eq!(pending(&runtime), 1);
        runtime.shutdown().await;
    }

    #[tokio::test]
    async fn without_an_acking_transport_a_call_claims_and_acknowledges_at_once() {
        let (runtime, _) = gate_with_finished(&["aaaaaaaa-1"]);
        let untracked = ReminderGate::new(runtime.claims().clone());
        let cancelled = CancellationToken::new();
        cancelled.cancel();
        assert_eq!(carried(untracked.answer(&id(1), &cancelled)), None);
        assert_eq!(
            carried(untracked.answer(&id(1), &CancellationToken::new())),
            Some(vec!["aaaaaaaa-1".to_owned()]),
            "never opened, claimed all the same"
        );
        assert_eq!(pending(&runtime), 0, "acknowledged at once");
        assert_eq!(
            carried(untracked.answer(&id(2), &CancellationToken::new())),
            None
        );
        runtime.shutdown().await;
    }

    /// A client that restarts its server (a new session of the same set)
    /// still follows its tasks: no reminder of the new session takes them,
    /// while a session whose client polls is connected; once none is, a
    /// reminder takes what no poll took.
    #[tokio::test]
    async fn the_sessions_of_one_set_share_the_followed_tasks() {
        let (runtime, _) = gate_with_finished(&["aaaaaaaa-1", "bbbbbbbb-2", "cccccccc-3"]);
        let sessions = crate::session::Sessions::on(runtime.claims().clone());
        let none = std::collections::BTreeSet::new();
        let first = Arc::new(sessions.join(&none));
        first.declare_tasks();
        let gate = ReminderGate::for_session(runtime.claims().clone(), Arc::clone(&first));
        let now = runtime.manager().clock().now_ms();
        gate.handles().follow("aaaaaaaa-1", now);
        gate.handles().follow("cccccccc-3", now);
        drop((gate, first));
        let polling = Arc::new(sessions.join(&none));
        polling.declare_tasks();
        let next = ReminderGate::for_session(runtime.claims().clone(), Arc::clone(&polling));
        next.track();
        assert!(next.handles().follows("aaaaaaaa-1"));
        assert!(next.open(id(1)));
        assert_eq!(
            carried(next.answer(&id(1), &CancellationToken::new())),
            Some(vec!["bbbbbbbb-2".to_owned()]),
            "the followed result is the polls' alone"
        );
        assert!(next.open(id(2)));
        assert!(
            next.answer_task(&id(2), "aaaaaaaa-1"),
            "a poll of the new session takes it"
        );
        for request in [1, 2] {
            if let Some(claim) = next.answered(&id(request)) {
                claim.acknowledge();
            }
        }
        drop((next, polling));
        let plain =
            ReminderGate::for_session(runtime.claims().clone(), Arc::new(sessions.join(&none)));
        assert_eq!(
            carried(plain.answer(&id(1), &CancellationToken::new())),
            Some(vec!["cccccccc-3".to_owned()]),
            "no client that polls is connected: a reminder takes it"
        );
        runtime.shutdown().await;
    }

    #[tokio::test]
    async fn numeric_and_string_ids_are_different_requests() {
        let (runtime, gate) = gate_with_finished(&["aaaaaaaa-1"]);
        let live = CancellationToken::new();
        assert!(gate.open(id(1)));
        assert!(gate.open(RequestId::String("1".into())));
        assert!(gate.answer(&id(1), &live).is_some());
        gate.cancelled(&RequestId::String("1".into()));
        assert!(
            runtime.claims().is_claimed("aaaaaaaa-1"),
            "the string id's cancel does not release the number's claim"
        );
        runtime.shutdown().await;
    }

    #[tokio::test]
    async fn confirmations_acknowledge_in_order_and_a_lost_connection_releases() {
        let (runtime, gate) = gate_with_finished(&["aaaaaaaa-1", "bbbbbbbb-2"]);
        let one = |task: &str| {
            runtime
                .claims()
                .claim_matching(ClaimOwner::Request, |t| t.id() == task)
                .expect("pending")
        };
        let (first, second) = (one("aaaaaaaa-1"), one("bbbbbbbb-2"));
        gate.await_confirmation(3, first);
        gate.await_confirmation(5, second);
        gate.confirmed(4);
        assert_eq!(pending(&runtime), 1, "message 3 written, 5 not yet");
        gate.release_all();
        assert_eq!(pending(&runtime), 1);
        assert!(!runtime.claims().is_claimed("bbbbbbbb-2"), "released");
        runtime.shutdown().await;
    }

    /// One step of the claim-dropping property test.
    #[derive(Debug, Clone)]
    enum Step {
        /// Task `i` finishes.
        Finish(usize),
        /// Request `k` arrives.
        Open(usize),
        /// Request `k`'s handler returns, claiming what is pending.
        Answer(usize),
        /// `notifications/cancelled` for request `k`.
        Cancel(usize),
        /// Request `k`'s response is written to the client (`true`) or the
        /// write fails.
        Write(usize, bool),
        /// Request `k`'s response is handed to a relay, which confirms later.
        Relay(usize),
        /// The relay confirms all but the last `n` messages handed to it.
        Confirm(usize),
        /// The relay dies: the connection ends, nothing more is confirmed.
        RelayDies,
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            3 => (0..6usize).prop_map(Step::Finish),
            3 => (0..3usize).prop_map(Step::Open),
            3 => (0..3usize).prop_map(Step::Answer),
            1 => (0..3usize).prop_map(Step::Cancel),
            2 => ((0..3usize), proptest::bool::weighted(0.7)).prop_map(|(k, ok)| Step::Write(k, ok)),
            2 => (0..3usize).prop_map(Step::Relay),
            2 => (0..3usize).prop_map(Step::Confirm),
            1 => Just(Step::RelayDies),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, failure_persistence: None, ..Default::default() })]

        /// Claims dropped at any point — a request cancelled, a write that
        /// fails, a relay that dies before confirming — never lose a result
        /// and never let two responses deliver one: every result is
        /// acknowledged exactly once.
        #[test]
        fn dropped_claims_lose_nothing_and_deliver_nothing_twice(
            steps in proptest::collection::vec(step(), 1..60)
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("a runtime");
            rt.block_on(async move {
                let runtime = Arc::new(
                    AsyncTaskRuntime::builder()
                        .max_async_tasks(asynctask_model::MaxAsyncTasks::UNLIMITED)
                        .build(),
                );
                let ids: Vec<String> = (0..6).map(|i| format!("{i:08}-task")).collect();
                for id in &ids {
                    runtime
                        .manager()
                        .register_task(RegisterTaskInput::new(id.clone(), "sub", "goal"))
                        .expect("registered");
                }
                let gate = ReminderGate::new(runtime.claims().clone());
                gate.track();
                let live = CancellationToken::new();
                // What each request's response carries, what the relay was
                // handed (message number, ids), and what was acknowledged.
                let mut carried: [Vec<String>; 3] = Default::default();
                let mut relayed: VecDeque<(u64, Vec<String>)> = VecDeque::new();
                let mut sent = 0u64;
                let mut acknowledged: Vec<String> = Vec::new();
                for step in steps {
                    match step {
                        Step::Finish(i) => {
                            runtime.manager().complete_task(&ids[i], asynctask_model::OutputObject::new(asynctask_model::TerminateReason::Goal));
                        }
                        Step::Open(k) => {
                            if gate.open(id(k as i64)) {
                                carried[k].clear();
                            }
                        }
                        Step::Answer(k) => {
                            if let Some(Reminder { task_ids, .. }) = gate.answer(&id(k as i64), &live) {
                                carried[k] = task_ids;
                            }
                        }
                        Step::Cancel(k) => {
                            gate.cancelled(&id(k as i64));
                            carried[k].clear();
                        }
                        Step::Write(k, ok) => {
                            let claim = gate.answered(&id(k as i64));
                            if let Some(claim) = claim {
                                proptest::prop_assert_eq!(claim.task_ids(), &carried[k][..]);
                                if ok {
                                    acknowledged.extend(claim.acknowledge());
                                }
                            }
                            carried[k].clear();
                        }
                        Step::Relay(k) => {
                            if let Some(claim) = gate.answered(&id(k as i64)) {
                                sent += 1;
                                relayed.push_back((sent, claim.task_ids().to_vec()));
                                gate.await_confirmation(sent, claim);
                            }
                            carried[k].clear();
                        }
                        Step::Confirm(behind) => {
                            let written = sent.saturating_sub(behind as u64);
                            gate.confirmed(written);
                            while relayed.front().is_some_and(|(n, _)| *n <= written) {
                                if let Some((_, task_ids)) = relayed.pop_front() {
                                    acknowledged.extend(task_ids);
                                }
                            }
                        }
                        Step::RelayDies => {
                            gate.release_all();
                            relayed.clear();
                            carried = Default::default();
                        }
                    }
                }
                // Everything finishes; what is still in flight is lost with
                // the connection; a new request takes what is left.
                for id in &ids {
                    runtime.manager().cancel_task(id);
                }
                gate.release_all();
                let last = id(99);
                proptest::prop_assert!(gate.open(last.clone()));
                if gate.answer(&last, &live).is_some() {
                    let claim = gate.answered(&last).expect("answered");
                    acknowledged.extend(claim.acknowledge());
                }
                acknowledged.sort();
                proptest::prop_assert_eq!(&acknowledged, &ids, "each result acknowledged exactly once");
                proptest::prop_assert!(runtime.manager().pending_notifications().is_empty());
                runtime.shutdown().await;
                Ok(())
            })?;
        }
    }
}
