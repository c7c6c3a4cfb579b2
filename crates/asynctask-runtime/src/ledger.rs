//! The claim ledger: which delivery carries each finished task's result.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use asynctask_manager::{AsyncTaskManager, Subscription, TaskSnapshot};
use asynctask_model::AsyncTaskStatus;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use crate::reminder::{Reminder, fitting, render_with_more};

/// Who carries a claimed result to the model.
///
/// # Examples
///
/// ```
/// use asynctask_runtime::{ClaimOwner, RequestKey};
///
/// let owner = ClaimOwner::Request(RequestKey::new("session-1/42"));
/// assert_eq!(owner.to_string(), "request session-1/42");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ClaimOwner {
    /// The auto-trigger's turn in flight (it wakes an idle agent).
    ///
    /// Reserved for the runtime's own delivery: on a runtime's ledger
    /// ([`AsyncTaskRuntime::claims`](crate::AsyncTaskRuntime::claims)), claim
    /// as this owner and the auto-trigger's claims get mixed up with yours.
    AutoTrigger,
    /// The reminder a host took with `next_turn_reminder` for its next model
    /// request.
    ///
    /// Reserved for the runtime's own delivery: a host goes through
    /// [`next_turn_reminder`](crate::AsyncTaskRuntime::next_turn_reminder) and
    /// [`ack_delivered`](crate::AsyncTaskRuntime::ack_delivered), not through
    /// the ledger as this owner.
    NextTurn,
    /// A request whose response will carry the result (an MCP `tools/call`, say).
    Request(RequestKey),
}

impl fmt::Display for ClaimOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClaimOwner::AutoTrigger => f.write_str("auto-trigger"),
            ClaimOwner::NextTurn => f.write_str("next turn"),
            ClaimOwner::Request(key) => write!(f, "request {key}"),
        }
    }
}

/// An opaque key naming one request, chosen by the layer that serves requests
/// (an MCP server uses the JSON-RPC id, with the session when it serves
/// several). Two owners with equal keys are the same owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestKey(Arc<str>);

impl RequestKey {
    /// A key from any text that names the request uniquely.
    #[must_use]
    pub fn new(key: impl Into<Arc<str>>) -> Self {
        RequestKey(key.into())
    }

    /// The key's text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Default)]
struct State {
    /// Each owner's claim: the tasks its delivery carries.
    claims: BTreeMap<ClaimOwner, Vec<String>>,
    /// Every task no claim may take, for the exclusion test, with how many
    /// holds it has: one per claim that carries it, and one per acknowledgement
    /// still marking it notified in the registry.
    claimed: BTreeMap<String, usize>,
}

impl State {
    fn is_held(&self, id: &str) -> bool {
        self.claimed.contains_key(id)
    }

    fn hold(&mut self, id: &str) {
        *self.claimed.entry(id.to_owned()).or_default() += 1;
    }

    fn unhold(&mut self, ids: &[String]) {
        for id in ids {
            if let Entry::Occupied(mut holds) = self.claimed.entry(id.clone()) {
                *holds.get_mut() -= 1;
                if *holds.get() == 0 {
                    holds.remove();
                }
            }
        }
    }

    /// Ends `owner`'s claim and returns its tasks, which stay held: the caller
    /// [`unhold`](Self::unhold)s them.
    fn take_claim(&mut self, owner: &ClaimOwner) -> Vec<String> {
        self.claims.remove(owner).unwrap_or_default()
    }

    /// Ends `owner`'s claim and lets its tasks go.
    fn remove(&mut self, owner: &ClaimOwner) -> Vec<String> {
        let ids = self.take_claim(owner);
        self.unhold(&ids);
        ids
    }
}

/// The one place that decides which delivery carries a finished task's result,
/// so that each result reaches the model exactly once.
///
/// A finished task that the model has not been told about is **claimed** by
/// exactly one [owner](ClaimOwner) — the auto-trigger, the next-turn reminder,
/// or a request — and the claim then ends exactly once:
///
/// - **acknowledged** ([`acknowledge`](Self::acknowledge)): the delivery
///   succeeded; the tasks are marked notified in the registry. They stay held
///   until the registry has marked them, so no other owner ever sees a
///   finished result as neither claimed nor delivered; the marking itself
///   (the manager's clock, its journal's write) runs without the ledger's
///   lock, so other owners never wait for it;
/// - **released** ([`release`](Self::release)): the delivery did not happen;
///   the tasks are pending again and the next claim takes them.
///
/// Rendering and claiming happen under one lock: a claim's [`Reminder`]
/// carries exactly the tasks it claimed. An owner holds at most one claim at a
/// time. [`changed`](Self::changed) wakes waiters when a claim ends or a task
/// finishes, so they look again instead of polling.
///
/// A runtime has one ledger, [`AsyncTaskRuntime::claims`](crate::AsyncTaskRuntime::claims),
/// shared by every delivery: a second ledger over the same manager would not
/// see the first one's claims, and the two could deliver one result twice.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_runtime::{ClaimLedger, ClaimOwner, RequestKey};
///
/// let manager = AsyncTaskManager::default();
/// manager.register_task(RegisterTaskInput::new("0f3a9c21-1", "researcher", "g"))?;
/// manager.cancel_task("0f3a9c21-1");
/// let ledger = ClaimLedger::new(manager.clone());
///
/// let first = ClaimOwner::Request(RequestKey::new("1"));
/// let second = ClaimOwner::Request(RequestKey::new("2"));
/// let reminder = ledger.claim(&first).expect("a result is pending");
/// assert_eq!(reminder.task_ids, ["0f3a9c21-1"]);
/// assert_eq!(ledger.claim(&second), None, "claimed by the first request");
///
/// ledger.release(&first); // its response was never sent
/// assert!(ledger.claim(&second).is_some());
/// ledger.acknowledge(&second); // its response was written
/// assert!(manager.pending_notifications().is_empty());
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
pub struct ClaimLedger {
    manager: AsyncTaskManager,
    state: Mutex<State>,
    changed: Arc<Notify>,
    _finished: Subscription,
}

impl ClaimLedger {
    /// A ledger over `manager`'s pending results.
    #[must_use]
    pub fn new(manager: AsyncTaskManager) -> Self {
        let changed = Arc::new(Notify::new());
        let finished = {
            let changed = Arc::clone(&changed);
            manager.subscribe(move |_| changed.notify_waiters())
        };
        ClaimLedger {
            manager,
            state: Mutex::new(State::default()),
            changed,
            _finished: finished,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A map of claims, consistent after every statement.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The registry this ledger claims from.
    #[must_use]
    pub fn manager(&self) -> &AsyncTaskManager {
        &self.manager
    }

    /// Claims every pending result no other owner holds, for `owner`, and
    /// renders the reminder that carries them (with how many tasks still run).
    /// `None` when nothing is left to claim or `owner` already holds a claim.
    #[must_use]
    pub fn claim(&self, owner: &ClaimOwner) -> Option<Reminder> {
        let mut state = self.lock();
        self.claim_locked(&mut state, owner, usize::MAX, |pending| !pending.is_empty())
    }

    /// [`claim`](Self::claim), taking only the pending results that `pick`
    /// accepts (a server with several sessions, say, gives each its own
    /// tasks' results).
    ///
    /// `pick` runs without the ledger's lock, on the unclaimed pending results
    /// of a moment before the claim: it may call into the ledger or the
    /// manager. What it accepts is claimed only if it is still pending and
    /// unclaimed when the claim is made (under the lock); a result that
    /// finished meanwhile waits for the next claim (and is not among the tasks
    /// the reminder says still run: it has finished).
    #[must_use]
    pub fn claim_matching(
        &self,
        owner: &ClaimOwner,
        pick: impl Fn(&TaskSnapshot) -> bool,
    ) -> Option<Reminder> {
        self.claim_within(owner, usize::MAX, pick)
    }

    /// [`claim_matching`](Self::claim_matching), claiming only as many results
    /// as fit in a reminder of about `max_chars` characters: always the first
    /// (whole, however long), then the next ones while they fit. The others
    /// stay pending for the next claim, and the reminder says how many wait.
    /// For a delivery whose reader cuts long texts (an MCP client that keeps
    /// only the ends of a long tool result, say).
    ///
    /// ```
    /// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
    /// use asynctask_runtime::{ClaimLedger, ClaimOwner, RequestKey};
    ///
    /// let manager = AsyncTaskManager::new(asynctask_model::MaxAsyncTasks::UNLIMITED);
    /// for id in ["a", "b"] {
    ///     manager.register_task(RegisterTaskInput::new(id, "researcher", "g"))?;
    ///     manager.cancel_task(id);
    /// }
    /// let ledger = ClaimLedger::new(manager);
    /// let first = ClaimOwner::Request(RequestKey::new("1"));
    /// let reminder = ledger.claim_within(&first, 100, |_| true).expect("pending");
    /// assert_eq!(reminder.task_ids, ["a"]);
    /// assert!(reminder.text.contains("1 more async task(s) finished"));
    /// ledger.acknowledge(&first);
    /// let second = ClaimOwner::Request(RequestKey::new("2"));
    /// assert_eq!(ledger.claim_within(&second, 100, |_| true).expect("b").task_ids, ["b"]);
    /// # Ok::<(), asynctask_manager::RegisterError>(())
    /// ```
    #[must_use]
    pub fn claim_within(
        &self,
        owner: &ClaimOwner,
        max_chars: usize,
        pick: impl Fn(&TaskSnapshot) -> bool,
    ) -> Option<Reminder> {
        let pending = self.manager.pending_notifications();
        let candidates: Vec<TaskSnapshot> = {
            let state = self.lock();
            if state.claims.contains_key(owner) {
                return None;
            }
            pending
                .into_iter()
                .filter(|task| !state.is_held(task.id()))
                .collect()
        };
        // The caller's code, with no lock held.
        let picked: BTreeSet<String> = candidates
            .into_iter()
            .filter(|task| pick(task))
            .map(|task| task.id().to_owned())
            .collect();
        if picked.is_empty() {
            return None;
        }
        let mut state = self.lock();
        self.claim_locked(&mut state, owner, max_chars, |pending| {
            pending.retain(|task| picked.contains(task.id()));
            !pending.is_empty()
        })
    }

    /// Releases whatever `owner` holds and claims again, under one lock (a
    /// host that asks for a new next-turn reminder did not send the last one).
    #[must_use]
    pub fn reclaim(&self, owner: &ClaimOwner) -> Option<Reminder> {
        let mut state = self.lock();
        let released = !state.remove(owner).is_empty();
        let reminder =
            self.claim_locked(&mut state, owner, usize::MAX, |pending| !pending.is_empty());
        drop(state);
        if released {
            self.changed.notify_waiters();
        }
        reminder
    }

    /// For the auto-trigger: claims every unclaimed pending result, but only
    /// when one of them warrants waking the agent (a completion or a failure; a
    /// cancel alone does not: the user did it, and is there).
    pub(crate) fn claim_waking(&self) -> Option<Reminder> {
        let mut state = self.lock();
        self.claim_locked(
            &mut state,
            &ClaimOwner::AutoTrigger,
            usize::MAX,
            |pending| {
                pending.iter().any(|task| {
                    matches!(
                        task.status(),
                        AsyncTaskStatus::Completed | AsyncTaskStatus::Failed
                    )
                })
            },
        )
    }

    /// Claims, for `owner`, the unclaimed pending tasks left by `accept` (which
    /// may filter them, and says whether to claim at all), as many as fit in
    /// `max_chars` ([`fitting`]). `accept` is this module's code: it runs under
    /// the lock.
    fn claim_locked(
        &self,
        state: &mut State,
        owner: &ClaimOwner,
        max_chars: usize,
        accept: impl FnOnce(&mut Vec<TaskSnapshot>) -> bool,
    ) -> Option<Reminder> {
        if state.claims.contains_key(owner) {
            return None;
        }
        // One read of the registry: a task that finishes meanwhile is either
        // still counted as running or pending here, never missing from both.
        let (pending, running) = self.manager.pending_and_running();
        let mut pending: Vec<TaskSnapshot> = pending
            .into_iter()
            .filter(|task| !state.is_held(task.id()))
            .collect();
        if !accept(&mut pending) || pending.is_empty() {
            return None;
        }
        let fit = fitting(&pending, running, max_chars);
        let more = pending.len() - fit;
        pending.truncate(fit);
        let reminder = render_with_more(&pending, more, running)?;
        for id in &reminder.task_ids {
            state.hold(id);
        }
        state
            .claims
            .insert(owner.clone(), reminder.task_ids.clone());
        tracing::debug!(%owner, task_ids = ?reminder.task_ids, "results claimed");
        Some(reminder)
    }

    /// The delivery `owner` holds succeeded: its tasks are marked notified, and
    /// its claim ends. Returns the ids it carried (empty when it held none).
    pub fn acknowledge(&self, owner: &ClaimOwner) -> Vec<String> {
        // The claim ends, but its tasks stay held while the registry marks
        // them: no other owner sees them as neither claimed nor delivered, and
        // none waits for the marking (the manager's clock and journal run
        // without the ledger's lock).
        let ids = self.lock().take_claim(owner);
        if ids.is_empty() {
            return ids;
        }
        self.manager.mark_all_notified(&ids);
        // Marked (even when the journal refused: it catches up later): let
        // them go.
        self.lock().unhold(&ids);
        tracing::debug!(%owner, task_ids = ?ids, "results acknowledged");
        self.changed.notify_waiters();
        ids
    }

    /// The host delivered these tasks (all of them, claimed by `owner` or
    /// not): they are marked notified and leave `owner`'s claim; what is left
    /// of the claim stays held.
    pub fn acknowledge_ids(&self, owner: &ClaimOwner, task_ids: &[String]) {
        {
            let mut state = self.lock();
            // Each task leaves `owner`'s claim keeping its hold, or (claimed by
            // nobody, or by another owner) gets one now: held until marked,
            // like in `acknowledge`.
            let mut unclaimed = Vec::new();
            match state.claims.get_mut(owner) {
                Some(held) => {
                    for id in task_ids {
                        match held.iter().position(|h| h == id) {
                            Some(at) => {
                                held.remove(at);
                            }
                            None => unclaimed.push(id),
                        }
                    }
                    if held.is_empty() {
                        state.claims.remove(owner);
                    }
                }
                None => unclaimed.extend(task_ids),
            }
            for id in unclaimed {
                state.hold(id);
            }
        }
        self.manager.mark_all_notified(task_ids);
        self.lock().unhold(task_ids);
        tracing::debug!(%owner, task_ids = ?task_ids, "results acknowledged");
        self.changed.notify_waiters();
    }

    /// The delivery `owner` holds did not happen: its tasks are pending again,
    /// for the next claim. Returns the ids it held.
    pub fn release(&self, owner: &ClaimOwner) -> Vec<String> {
        let ids = self.lock().remove(owner);
        if !ids.is_empty() {
            tracing::debug!(%owner, task_ids = ?ids, "claim released");
            self.changed.notify_waiters();
        }
        ids
    }

    /// The tasks `owner` holds (empty when none).
    #[must_use]
    pub fn held_by(&self, owner: &ClaimOwner) -> Vec<String> {
        self.lock().claims.get(owner).cloned().unwrap_or_default()
    }

    /// Whether task `id` is claimed by some owner (or being marked notified
    /// after its claim was acknowledged).
    #[must_use]
    pub fn is_claimed(&self, id: &str) -> bool {
        self.lock().is_held(id)
    }

    /// Resolves the next time a claim ends (acknowledged or released) or a task
    /// finishes. Create and [`enable`](Notified::enable) it *before* looking at
    /// the ledger, then await it, so nothing that happens in between is missed.
    pub fn changed(&self) -> Notified<'_> {
        self.changed.notified()
    }

    /// Wakes every [`changed`](Self::changed) waiter, for a change the ledger
    /// cannot see: one that alters who may claim a pending result (a session
    /// that launched a task left, so the others may take its result now).
    ///
    /// ```
    /// use asynctask_manager::AsyncTaskManager;
    /// use asynctask_runtime::ClaimLedger;
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let ledger = ClaimLedger::new(AsyncTaskManager::default());
    /// let changed = ledger.changed();
    /// tokio::pin!(changed);
    /// changed.as_mut().enable(); // before looking at the ledger
    /// ledger.notify_changed(); // a session left
    /// changed.await; // the waiter looks again
    /// # });
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn notify_changed(&self) {
        self.changed.notify_waiters();
    }
}

impl fmt::Debug for ClaimLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("ClaimLedger")
            .field("claims", &state.claims)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_manager::RegisterTaskInput;
    use asynctask_model::{OutputObject, TerminateReason};
    use pretty_assertions::assert_eq;

    fn ledger_with(finished: &[(&str, AsyncTaskStatus)]) -> ClaimLedger {
        let manager = AsyncTaskManager::new(asynctask_model::MaxAsyncTasks::UNLIMITED);
        for (id, status) in finished {
            manager
                .register_task(RegisterTaskInput::new(*id, "sub", "goal"))
                .expect("registered");
            match status {
                AsyncTaskStatus::Completed => {
                    manager.complete_task(id, OutputObject::new(TerminateReason::Goal));
                }
                AsyncTaskStatus::Failed => {
                    manager.fail_task(id, "boom");
                }
                AsyncTaskStatus::Cancelled => {
                    manager.cancel_task(id);
                }
                AsyncTaskStatus::Running => {}
            }
        }
        ClaimLedger::new(manager)
    }

    fn request(key: &str) -> ClaimOwner {
        ClaimOwner::Request(RequestKey::new(key))
    }

    #[test]
    fn a_claim_is_exclusive_until_it_ends() {
        let ledger = ledger_with(&[
            ("a", AsyncTaskStatus::Completed),
            ("b", AsyncTaskStatus::Failed),
        ]);
        let first = ledger.claim(&request("1")).expect("claimed");
        assert_eq!(first.task_ids, ["a", "b"]);
        assert_eq!(ledger.claim(&request("2")), None);
        assert_eq!(ledger.claim(&request("1")), None, "one claim per owner");
        assert_eq!(ledger.claim_waking(), None);
        assert_eq!(ledger.acknowledge(&request("1")), ["a", "b"]);
        assert!(ledger.manager().pending_notifications().is_empty());
        assert_eq!(ledger.claim(&request("2")), None);
    }

    #[test]
    fn a_released_claim_goes_to_the_next_owner() {
        let ledger = ledger_with(&[("a", AsyncTaskStatus::Completed)]);
        assert!(ledger.claim(&ClaimOwner::NextTurn).is_some());
        assert_eq!(ledger.release(&ClaimOwner::NextTurn), ["a"]);
        assert_eq!(ledger.release(&ClaimOwner::NextTurn), Vec::<String>::new());
        let again = ledger.claim_waking().expect("pending again");
        assert_eq!(again.task_ids, ["a"]);
        assert!(ledger.is_claimed("a"));
    }

    #[test]
    fn a_cancel_alone_does_not_wake_but_rides_along() {
        let ledger = ledger_with(&[("a", AsyncTaskStatus::Cancelled)]);
        assert_eq!(ledger.claim_waking(), None);
        let ledger = ledger_with(&[
            ("a", AsyncTaskStatus::Cancelled),
            ("b", AsyncTaskStatus::Completed),
        ]);
        assert_eq!(
            ledger.claim_waking().map(|r| r.task_ids),
            Some(vec!["a".into(), "b".into()])
        );
    }

    #[test]
    fn matching_claims_take_only_what_they_pick() {
        let ledger = ledger_with(&[
            ("a", AsyncTaskStatus::Completed),
            ("b", AsyncTaskStatus::Completed),
        ]);
        let mine = ledger
            .claim_matching(&request("1"), |task| task.id() == "b")
            .expect("b is pending");
        assert_eq!(mine.task_ids, ["b"]);
        assert_eq!(
            ledger.claim(&request("2")).map(|r| r.task_ids),
            Some(vec!["a".into()])
        );
    }

    #[test]
    fn pick_runs_without_the_lock_and_takes_only_what_is_still_unclaimed() {
        let ledger = ledger_with(&[
            ("a", AsyncTaskStatus::Completed),
            ("b", AsyncTaskStatus::Completed),
        ]);
        let mine = ledger
            .claim_matching(&request("1"), |task| {
                // Back into the ledger from `pick`: another owner takes "a"
                // between the look and the claim.
                if task.id() == "a" {
                    let theirs = ledger.claim_matching(&request("2"), |t| t.id() == "a");
                    assert_eq!(theirs.map(|r| r.task_ids), Some(vec!["a".to_owned()]));
                }
                true
            })
            .expect("b is still unclaimed");
        assert_eq!(mine.task_ids, ["b"]);
        assert_eq!(ledger.held_by(&request("2")), ["a"]);
    }

    /// A clock that, when armed, looks at the ledger from inside the
    /// manager's marking (the manager reads its clock there).
    #[derive(Debug, Default)]
    struct ProbingClock {
        ledger: std::sync::OnceLock<std::sync::Weak<ClaimLedger>>,
        armed: std::sync::atomic::AtomicBool,
        /// What another owner could claim, and whether "a" was claimed, at
        /// each probe.
        probes: Mutex<Vec<(Option<Vec<String>>, bool)>>,
    }

    impl asynctask_model::Clock for ProbingClock {
        fn now_ms(&self) -> u64 {
            let armed = self.armed.swap(false, std::sync::atomic::Ordering::SeqCst);
            if let Some(ledger) = self.ledger.get().and_then(std::sync::Weak::upgrade)
                && armed
            {
                let other = ledger.claim(&request("prober")).map(|r| r.task_ids);
                let probe = (other, ledger.is_claimed("a"));
                self.probes.lock().expect("probes").push(probe);
            }
            1_000
        }
    }

    #[test]
    fn acknowledging_marks_without_the_lock_and_never_lets_a_result_go() {
        let clock = Arc::new(ProbingClock::default());
        let manager = AsyncTaskManager::with_clock(
            asynctask_model::MaxAsyncTasks::UNLIMITED,
            Arc::clone(&clock) as Arc<dyn asynctask_model::Clock>,
        );
        for id in ["a", "b"] {
            manager
                .register_task(RegisterTaskInput::new(id, "sub", "goal"))
                .expect("registered");
            manager.complete_task(id, OutputObject::new(TerminateReason::Goal));
        }
        let ledger = Arc::new(ClaimLedger::new(manager));
        clock.ledger.set(Arc::downgrade(&ledger)).expect("set once");

        // `acknowledge`: while the registry marks "a", another owner (the
        // clock, here) gets nothing, and sees "a" still claimed.
        assert!(
            ledger
                .claim_matching(&request("1"), |t| t.id() == "a")
                .is_some()
        );
        clock.armed.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(ledger.acknowledge(&request("1")), ["a"]);
        assert_eq!(
            *clock.probes.lock().expect("probes"),
            [(Some(vec!["b".to_owned()]), true)]
        );
        assert!(!ledger.is_claimed("a"));
        assert_eq!(ledger.release(&request("prober")), ["b"]);

        // `acknowledge_ids` of a task nobody claimed: held while it is marked.
        clock.probes.lock().expect("probes").clear();
        clock.armed.store(true, std::sync::atomic::Ordering::SeqCst);
        ledger.acknowledge_ids(&ClaimOwner::NextTurn, &["b".to_owned()]);
        let probes = clock.probes.lock().expect("probes").clone();
        assert_eq!(
            probes,
            [(None, false)],
            "b held while marked: nothing to claim"
        );
        assert!(!ledger.is_claimed("b"));
        assert!(ledger.manager().pending_notifications().is_empty());
    }

    #[test]
    fn reclaim_and_partial_acknowledgement() {
        let ledger = ledger_with(&[
            ("a", AsyncTaskStatus::Completed),
            ("b", AsyncTaskStatus::Completed),
        ]);
        assert!(ledger.claim(&ClaimOwner::NextTurn).is_some());
        let again = ledger
            .reclaim(&ClaimOwner::NextTurn)
            .expect("the same tasks");
        assert_eq!(again.task_ids, ["a", "b"]);
        ledger.acknowledge_ids(&ClaimOwner::NextTurn, &["a".to_owned()]);
        assert_eq!(ledger.held_by(&ClaimOwner::NextTurn), ["b"]);
        assert!(!ledger.is_claimed("a"));
        assert_eq!(ledger.manager().pending_notifications().len(), 1);
        // Acknowledging a task held by another owner leaves that owner's hold.
        assert!(ledger.claim(&request("1")).is_none(), "b is held");
        ledger.acknowledge_ids(&request("1"), &["b".to_owned()]);
        assert!(ledger.is_claimed("b"), "still in the next turn's claim");
        assert_eq!(ledger.acknowledge(&ClaimOwner::NextTurn), ["b"]);
        assert!(!ledger.is_claimed("b"));
    }
}
