//! The claim ledger: which delivery carries each finished task's result, as
//! owned [`Claim`]s.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use asynctask_manager::{AsyncTaskManager, Subscription, TaskSnapshot};
use asynctask_model::AsyncTaskStatus;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use crate::reminder::{Reminder, Unended, render_within};
use asynctask_manager::PendingQuestion;
use asynctask_tools::question_notice;

/// Who carries a claimed result to the model; said in logs and by
/// [`Claim::owner`].
///
/// # Examples
///
/// ```
/// use asynctask_runtime::ClaimOwner;
///
/// assert_eq!(ClaimOwner::Request.to_string(), "request");
/// assert_eq!(ClaimOwner::TaskPoll.to_string(), "task poll");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ClaimOwner {
    /// The auto-trigger's turn in flight (it wakes an idle agent).
    AutoTrigger,
    /// The reminder a host took with
    /// [`next_turn_reminder`](crate::AsyncTaskRuntime::next_turn_reminder) for
    /// its next model request.
    NextTurn,
    /// A request whose response will carry the result (an MCP `tools/call`,
    /// say).
    Request,
    /// A poll of one task by the client that follows it (an MCP `tasks/get`
    /// or `tasks/cancel`): the response carries that task's result alone.
    TaskPoll,
}

impl fmt::Display for ClaimOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClaimOwner::AutoTrigger => "auto-trigger",
            ClaimOwner::NextTurn => "next turn",
            ClaimOwner::Request => "request",
            ClaimOwner::TaskPoll => "task poll",
        })
    }
}

#[derive(Debug, Default)]
struct State {
    /// Every result no claim may take, with how many claims carry it: one per
    /// live claim, and one while an acknowledgement marks it notified in the
    /// registry (so no owner sees it as neither claimed nor delivered).
    claimed: HashMap<String, u32>,
    /// How many times results left the pending set through this ledger (were
    /// marked notified). A claim that looked at the registry before one of
    /// those looks again: a result it saw pending may be delivered now.
    delivered: u64,
}

impl State {
    fn is_claimed(&self, id: &str) -> bool {
        self.claimed.contains_key(id)
    }

    fn claim(&mut self, id: &str) {
        *self.claimed.entry(id.to_owned()).or_default() += 1;
    }

    fn unclaim(&mut self, ids: &[String]) {
        for id in ids {
            if let Some(count) = self.claimed.get_mut(id.as_str()) {
                *count -= 1;
                if *count == 0 {
                    self.claimed.remove(id.as_str());
                }
            }
        }
    }
}

struct Inner {
    manager: AsyncTaskManager,
    state: Mutex<State>,
    changed: Arc<Notify>,
    _finished: Subscription,
}

/// The one place that decides which delivery carries a finished task's result,
/// so that each result reaches the model exactly once.
///
/// A finished task the model has not been told about is **claimed** by one
/// delivery at a time: a [`Claim`], owned by whoever carries it (a turn in
/// flight, the next request, an MCP response being written), which ends
/// exactly once, by ownership:
///
/// - [`Claim::acknowledge`] consumes it: the delivery succeeded, the tasks are
///   marked notified in the registry;
/// - dropping it (or [`Claim::release`]) releases it: the delivery did not
///   happen, the tasks are pending again and the next claim takes them.
///
/// A claim renders its [`Reminder`] from one look at the registry and carries
/// exactly the tasks it renders; [`changed`](Self::changed) wakes waiters when
/// a claim ends or a task finishes.
///
/// Clones share one ledger. Use the runtime's
/// ([`AsyncTaskRuntime::claims`](crate::AsyncTaskRuntime::claims)): a second
/// ledger over the same manager would not see the first one's claims.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_runtime::{ClaimLedger, ClaimOwner};
/// let manager = AsyncTaskManager::default();
/// manager.register_task(RegisterTaskInput::new("0f3a9c21-1", "researcher", "g"))?;
/// manager.cancel_task("0f3a9c21-1");
/// let ledger = ClaimLedger::new(manager.clone());
/// let first = ledger.claim(ClaimOwner::Request).expect("a result is pending");
/// assert_eq!(first.task_ids(), ["0f3a9c21-1"]);
/// assert!(ledger.claim(ClaimOwner::Request).is_none(), "claimed by the first");
/// drop(first); // its response was never sent
/// let second = ledger.claim(ClaimOwner::Request).expect("released");
/// second.acknowledge(); // its response was written
/// assert!(manager.pending_notifications().is_empty());
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[derive(Clone)]
pub struct ClaimLedger {
    inner: Arc<Inner>,
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
            inner: Arc::new(Inner {
                manager,
                state: Mutex::new(State::default()),
                changed,
                _finished: finished,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A map of counts, consistent after every statement.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The registry this ledger claims from.
    #[must_use]
    pub fn manager(&self) -> &AsyncTaskManager {
        &self.inner.manager
    }

    /// Claims every pending result no other claim carries, for `owner`, with
    /// the reminder that carries them (and says how many tasks still run).
    /// `None` when nothing is left to claim.
    #[must_use]
    pub fn claim(&self, owner: ClaimOwner) -> Option<Claim> {
        self.claim_where(
            owner,
            usize::MAX,
            &|_: &TaskSnapshot| true,
            |_| true,
            &|_: &TaskSnapshot| true,
        )
    }

    /// [`claim`](Self::claim), taking only the pending results that `pick`
    /// accepts (a server with several sessions, say, gives each its own
    /// tasks' results).
    ///
    /// `pick` runs without the ledger's lock: it may call into the manager or
    /// the ledger. What it accepts is claimed only if it is still pending and
    /// unclaimed when the claim is made; a result that finished meanwhile
    /// waits for the next claim.
    #[must_use]
    pub fn claim_matching(
        &self,
        owner: ClaimOwner,
        pick: impl Fn(&TaskSnapshot) -> bool,
    ) -> Option<Claim> {
        self.claim_where(owner, usize::MAX, &pick, |_| true, &pick)
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
    /// use asynctask_runtime::{ClaimLedger, ClaimOwner};
    ///
    /// let manager = AsyncTaskManager::new(asynctask_model::MaxAsyncTasks::UNLIMITED);
    /// for id in ["a", "b"] {
    ///     manager.register_task(RegisterTaskInput::new(id, "researcher", "g"))?;
    ///     manager.cancel_task(id);
    /// }
    /// let ledger = ClaimLedger::new(manager);
    /// let first = ledger.claim_within(ClaimOwner::Request, 100, |_| true).expect("pending");
    /// assert_eq!(first.task_ids(), ["a"]);
    /// assert!(first.reminder().text.contains("1 more async task(s) finished"));
    /// first.acknowledge();
    /// let second = ledger.claim_within(ClaimOwner::Request, 100, |_| true).expect("b");
    /// assert_eq!(second.task_ids(), ["b"]);
    /// # Ok::<(), asynctask_manager::RegisterError>(())
    /// ```
    #[must_use]
    pub fn claim_within(
        &self,
        owner: ClaimOwner,
        max_chars: usize,
        pick: impl Fn(&TaskSnapshot) -> bool,
    ) -> Option<Claim> {
        self.claim_where(owner, max_chars, &pick, |_| true, &pick)
    }

    /// [`claim_within`](Self::claim_within), the questions of running tasks
    /// riding along only for the tasks `ask` accepts (among those `pick`
    /// does): for a delivery whose reader asks some questions another way (an
    /// MCP client that takes them as forms, say).
    #[must_use]
    pub fn claim_within_asking(
        &self,
        owner: ClaimOwner,
        max_chars: usize,
        pick: impl Fn(&TaskSnapshot) -> bool,
        ask: impl Fn(&TaskSnapshot) -> bool,
    ) -> Option<Claim> {
        self.claim_where(owner, max_chars, &pick, |_| true, &|task: &TaskSnapshot| {
            pick(task) && ask(task)
        })
    }

    /// For the auto-trigger: claims every unclaimed pending result, but only
    /// when one of them warrants waking the agent (a completion or a failure; a
    /// cancel alone does not: the user did it, and is there).
    pub(crate) fn claim_waking(&self) -> Option<Claim> {
        self.claim_where(
            ClaimOwner::AutoTrigger,
            usize::MAX,
            &|_: &TaskSnapshot| true,
            |pending| {
                pending.iter().any(|task| {
                    matches!(
                        task.status(),
                        AsyncTaskStatus::Completed | AsyncTaskStatus::Failed
                    )
                })
            },
            &|_: &TaskSnapshot| false,
        )
    }

    /// The one way a claim is made: one look at the registry, `pick` (the
    /// caller's, without a lock), then under the lock the unclaimed ones that
    /// `accept` (ours) takes, as many as fit in `max_chars`, rendered once.
    /// The waiting questions no delivery showed nor holds, of the running
    /// tasks `ask` accepts, ride along (a claim may carry only those) on the
    /// reminders the model reads.
    fn claim_where(
        &self,
        owner: ClaimOwner,
        max_chars: usize,
        pick: &dyn Fn(&TaskSnapshot) -> bool,
        accept: impl Fn(&[TaskSnapshot]) -> bool,
        ask: &dyn Fn(&TaskSnapshot) -> bool,
    ) -> Option<Claim> {
        // Questions ride on reminders the model reads, never on a task poll's
        // result or a wake-up.
        let asked = matches!(owner, ClaimOwner::Request | ClaimOwner::NextTurn);
        loop {
            let looked_at = self.lock().delivered;
            // One read of the registry: a task that finishes meanwhile is
            // either still counted as running or pending here, never missing
            // from both.
            let (pending, counts) = self.manager().pending_and_counts();
            let mut picked: Vec<TaskSnapshot> =
                pending.into_iter().filter(|task| pick(task)).collect();
            let asking = if asked { self.asking(ask) } else { Vec::new() };
            if picked.is_empty() && asking.is_empty() {
                return None;
            }
            // Questions are held by their desks, not by the ledger's lock:
            // taken first, so the ledger's lock never waits for the manager's.
            let questions = if asking.is_empty() {
                Vec::new()
            } else {
                self.manager()
                    .claim_questions(|id| asking.iter().any(|task| task.id() == id))
            };
            let mut state = self.lock();
            if state.delivered != looked_at {
                // Some results were marked notified since the look: one this
                // look saw pending may be delivered now. Look again (each turn
                // of this loop follows another delivery's progress).
                drop(state);
                self.end_questions(&questions, false);
                continue;
            }
            picked.retain(|task| !state.is_claimed(task.id()));
            if !picked.is_empty() && !accept(&picked) {
                picked.clear();
            }
            let notices: Vec<String> = questions
                .iter()
                .map(|question| {
                    let name = asking
                        .iter()
                        .find(|task| task.id() == question.task_id)
                        .map_or("", |task| task.subagent_name());
                    question_notice(name, question)
                })
                .collect();
            let reminder = if picked.is_empty() && questions.is_empty() {
                None
            } else {
                render_within(
                    &picked,
                    Unended::from(&counts),
                    max_chars,
                    &notices.join("\n\n"),
                )
            };
            let Some(reminder) = reminder else {
                drop(state);
                self.end_questions(&questions, false);
                return None;
            };
            for id in &reminder.task_ids {
                state.claim(id);
            }
            drop(state);
            tracing::debug!(%owner, task_ids = ?reminder.task_ids, questions = questions.len(), "results claimed");
            return Some(Claim {
                ledger: self.clone(),
                owner,
                reminder,
                questions,
            });
        }
    }

    /// The running tasks `pick` accepts whose subagents wait on a question
    /// no delivery showed nor holds.
    fn asking(&self, pick: &dyn Fn(&TaskSnapshot) -> bool) -> Vec<TaskSnapshot> {
        let manager = self.manager();
        if !manager.has_unshown_questions() {
            return Vec::new();
        }
        let mut ids: Vec<String> = manager
            .pending_questions()
            .into_iter()
            .map(|question| question.task_id)
            .collect();
        ids.dedup();
        ids.iter()
            .filter_map(|id| manager.task(id))
            .filter(|task| pick(task))
            .collect()
    }

    /// Ends the holds on `questions`: shown, or free for the next claim.
    fn end_questions(&self, questions: &[PendingQuestion], shown: bool) {
        for question in questions {
            self.manager().end_question_claim(question, shown);
        }
        if !shown && !questions.is_empty() {
            self.inner.changed.notify_waiters();
        }
    }

    /// The host delivered these results by a way of its own (they need not be
    /// claimed): they are marked notified. A result another claim carries
    /// stays in that claim, whose end then changes nothing.
    pub(crate) fn acknowledge_unclaimed(&self, task_ids: &[String]) {
        if task_ids.is_empty() {
            return;
        }
        {
            let mut state = self.lock();
            for id in task_ids {
                state.claim(id);
            }
        }
        self.mark_and_unclaim(task_ids);
    }

    /// Marks `task_ids` notified (they are claimed: no other owner takes them
    /// meanwhile, and none waits for the manager's clock or journal), then
    /// lets them go.
    fn mark_and_unclaim(&self, task_ids: &[String]) {
        self.manager().mark_all_notified(task_ids);
        {
            let mut state = self.lock();
            state.unclaim(task_ids);
            state.delivered += 1;
        }
        self.inner.changed.notify_waiters();
    }

    /// Lets `task_ids` go, pending again.
    fn unclaim(&self, task_ids: &[String]) {
        if task_ids.is_empty() {
            return;
        }
        self.lock().unclaim(task_ids);
        self.inner.changed.notify_waiters();
    }

    /// Whether task `id`'s result is carried by a claim (or being marked
    /// notified by an acknowledgement).
    #[must_use]
    pub fn is_claimed(&self, id: &str) -> bool {
        self.lock().is_claimed(id)
    }

    /// Resolves the next time a claim ends (acknowledged or released) or a task
    /// finishes. Create and [`enable`](Notified::enable) it *before* looking at
    /// the ledger, then await it, so nothing that happens in between is missed.
    pub fn changed(&self) -> Notified<'_> {
        self.inner.changed.notified()
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
        self.inner.changed.notify_waiters();
    }
}

impl fmt::Debug for ClaimLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("ClaimLedger")
            .field("claimed", &state.claimed.len())
            .finish_non_exhaustive()
    }
}

/// A claim on finished tasks' results: the [`Reminder`] that carries them,
/// owned by the delivery that carries it. It ends exactly once:
/// [`acknowledge`](Self::acknowledge) when the delivery succeeded, or dropped
/// (released) when it did not — then the results are pending again, for the
/// next claim.
///
/// Made by a [`ClaimLedger`]; see there for an example.
#[must_use = "dropping a claim releases its results: acknowledge it once they are delivered"]
pub struct Claim {
    ledger: ClaimLedger,
    owner: ClaimOwner,
    reminder: Reminder,
    /// The questions its reminder puts to the model.
    questions: Vec<PendingQuestion>,
}

impl Claim {
    /// Who carries it.
    #[must_use]
    pub fn owner(&self) -> ClaimOwner {
        self.owner
    }

    /// The reminder that carries the claimed results (its text says how many
    /// tasks still run and, for a claim within a budget, how many more wait).
    #[must_use]
    pub fn reminder(&self) -> &Reminder {
        &self.reminder
    }

    /// The claimed tasks, in registration order.
    #[must_use]
    pub fn task_ids(&self) -> &[String] {
        &self.reminder.task_ids
    }

    /// The questions of running subagents its reminder puts to the model:
    /// once acknowledged, no other claim carries them (they stay answerable,
    /// and `check_async_tasks` still shows them).
    #[must_use]
    pub fn questions(&self) -> &[PendingQuestion] {
        &self.questions
    }

    /// The delivery succeeded: the tasks are marked notified, and the claim
    /// ends. Returns their ids.
    ///
    /// Once this returns no other claim ever carries them. (Should the
    /// registry's journal fail to record the marks, they are kept in memory
    /// and written with the journal's next successful write.)
    pub fn acknowledge(mut self) -> Vec<String> {
        let questions = std::mem::take(&mut self.questions);
        self.ledger.end_questions(&questions, true);
        let ids = std::mem::take(&mut self.reminder.task_ids);
        if !ids.is_empty() {
            self.ledger.mark_and_unclaim(&ids);
            tracing::debug!(owner = %self.owner, task_ids = ?ids, "results acknowledged");
        }
        ids
    }

    /// The delivery carried only `task_ids` (a host that acknowledges part of a
    /// reminder): those are marked notified, and the claim goes on with the
    /// rest, or ends when nothing is left (`None`). Ids it does not carry are
    /// ignored.
    pub fn acknowledge_some(mut self, task_ids: &[String]) -> Option<Claim> {
        // The text that carried the results carried the questions too.
        let questions = std::mem::take(&mut self.questions);
        self.ledger.end_questions(&questions, true);
        let (delivered, rest): (Vec<String>, Vec<String>) =
            std::mem::take(&mut self.reminder.task_ids)
                .into_iter()
                .partition(|id| task_ids.contains(id));
        self.reminder.task_ids = rest;
        if !delivered.is_empty() {
            self.ledger.mark_and_unclaim(&delivered);
            tracing::debug!(owner = %self.owner, task_ids = ?delivered, "results acknowledged");
        }
        (!self.reminder.task_ids.is_empty()).then_some(self)
    }

    /// The delivery did not happen: the results are pending again. The same as
    /// dropping the claim, said out loud.
    pub fn release(self) {}
}

impl Drop for Claim {
    fn drop(&mut self) {
        let questions = std::mem::take(&mut self.questions);
        self.ledger.end_questions(&questions, false);
        if !self.reminder.task_ids.is_empty() {
            tracing::debug!(owner = %self.owner, task_ids = ?self.reminder.task_ids, "claim released");
            self.ledger.unclaim(&self.reminder.task_ids);
        }
    }
}

impl fmt::Debug for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claim")
            .field("owner", &self.owner)
            .field("task_ids", &self.reminder.task_ids)
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
                _ => {}
            }
        }
        ClaimLedger::new(manager)
    }

    fn ids(claim: &Option<Claim>) -> Option<Vec<String>> {
        claim.as_ref().map(|claim| claim.task_ids().to_vec())
    }

    #[test]
    fn a_claim_is_exclusive_until_it_ends() {
        let ledger = ledger_with(&[
            ("a", AsyncTaskStatus::Completed),
            ("b", AsyncTaskStatus::Failed),
        ]);
        let first = ledger.claim(ClaimOwner::Request).expect("claimed");
        assert_eq!(first.task_ids(), ["a", "b"]);
        assert_eq!(ids(&ledger.claim(ClaimOwner::Request)), None);
        assert_eq!(ids(&ledger.claim_waking()), None);
        assert_eq!(first.acknowledge(), ["a", "b"]);
        assert!(ledger.manager().pending_notifications().is_empty());
        assert_eq!(ids(&ledger.claim(ClaimOwner::Request)), None);
    }

    #[test]
    fn a_dropped_claim_goes_to_the_next_owner() {
        let ledger = ledger_with(&[("a", AsyncTaskStatus::Completed)]);
        let next_turn = ledger.claim(ClaimOwner::NextTurn);
        assert!(ledger.is_claimed("a"));
        drop(next_turn);
        assert!(!ledger.is_claimed("a"));
        let again = ledger.claim_waking().expect("pending again");
        assert_eq!(again.task_ids(), ["a"]);
        assert_eq!(again.owner(), ClaimOwner::AutoTrigger);
        again.release();
        assert!(!ledger.is_claimed("a"));
    }

    #[test]
    fn a_cancel_alone_does_not_wake_but_rides_along() {
        let ledger = ledger_with(&[("a", AsyncTaskStatus::Cancelled)]);
        assert_eq!(ids(&ledger.claim_waking()), None);
        let ledger = ledger_with(&[
            ("a", AsyncTaskStatus::Cancelled),
            ("b", AsyncTaskStatus::Completed),
        ]);
        assert_eq!(
            ids(&ledger.claim_waking()),
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
            .claim_matching(ClaimOwner::Request, |task| task.id() == "b")
            .expect("b is pending");
        assert_eq!(mine.task_ids(), ["b"]);
        assert_eq!(
            ids(&ledger.claim(ClaimOwner::Request)),
            Some(vec!["a".into()])
        );
    }

    #[test]
    fn pick_runs_without_the_lock_and_takes_only_what_is_still_unclaimed() {
        let ledger = ledger_with(&[
            ("a", AsyncTaskStatus::Completed),
            ("b", AsyncTaskStatus::Completed),
        ]);
        let theirs = std::cell::RefCell::new(None);
        let mine = ledger
            .claim_matching(ClaimOwner::Request, |task| {
                // Back into the ledger from `pick`: another owner takes "a"
                // between the look and the claim.
                if task.id() == "a" {
                    *theirs.borrow_mut() =
                        ledger.claim_matching(ClaimOwner::Request, |t| t.id() == "a");
                }
                true
            })
            .expect("b is still unclaimed");
        assert_eq!(mine.task_ids(), ["b"]);
        assert_eq!(ids(&theirs.into_inner()), Some(vec!["a".to_owned()]));
    }

    #[test]
    fn a_look_that_a_delivery_overtook_looks_again() {
        let ledger = ledger_with(&[
            ("a", AsyncTaskStatus::Completed),
            ("b", AsyncTaskStatus::Completed),
        ]);
        let held = ledger
            .claim_matching(ClaimOwner::Request, |task| task.id() == "a")
            .expect("a");
        let held = std::cell::RefCell::new(Some(held));
        // This claim looks while "a" is claimed; from its `pick` (between the
        // look and the lock) the other claim is acknowledged: "a" is no longer
        // claimed then, but delivered, and must not be carried again.
        let claimed = ledger.claim_matching(ClaimOwner::Request, |_| {
            if let Some(claim) = held.borrow_mut().take() {
                claim.acknowledge();
            }
            true
        });
        assert_eq!(ids(&claimed), Some(vec!["b".to_owned()]));
    }

    /// A clock that, when armed, looks at the ledger from inside the
    /// manager's marking (the manager reads its clock there).
    #[derive(Debug, Default)]
    struct ProbingClock {
        ledger: std::sync::OnceLock<std::sync::Weak<Inner>>,
        armed: std::sync::atomic::AtomicBool,
        /// What another owner could claim, and whether "a" was claimed, at
        /// each probe.
        probes: Mutex<Vec<(Option<Vec<String>>, bool)>>,
    }

    impl asynctask_model::Clock for ProbingClock {
        fn now_ms(&self) -> u64 {
            let armed = self.armed.swap(false, std::sync::atomic::Ordering::SeqCst);
            if let Some(inner) = self.ledger.get().and_then(std::sync::Weak::upgrade)
                && armed
            {
                let ledger = ClaimLedger { inner };
                let other = ledger.claim(ClaimOwner::Request);
                let probe = (ids(&other), ledger.is_claimed("a"));
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
        let ledger = ClaimLedger::new(manager);
        clock
            .ledger
            .set(Arc::downgrade(&ledger.inner))
            .expect("set once");

        // `acknowledge`: while the registry marks "a", another owner (the
        // clock, here) gets only "b", and sees "a" still claimed.
        let claim = ledger
            .claim_matching(ClaimOwner::Request, |t| t.id() == "a")
            .expect("a");
        clock.armed.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(claim.acknowledge(), ["a"]);
        assert_eq!(
            *clock.probes.lock().expect("probes"),
            [(Some(vec!["b".to_owned()]), true)]
        );
        assert!(!ledger.is_claimed("a"));

        // A result nobody claimed, acknowledged by the host: claimed while it
        // is marked.
        clock.probes.lock().expect("probes").clear();
        clock.armed.store(true, std::sync::atomic::Ordering::SeqCst);
        ledger.acknowledge_unclaimed(&["b".to_owned()]);
        let probes = clock.probes.lock().expect("probes").clone();
        assert_eq!(
            probes,
            [(None, false)],
            "b claimed while marked: nothing to take"
        );
        assert!(!ledger.is_claimed("b"));
        assert!(ledger.manager().pending_notifications().is_empty());
    }

    #[test]
    fn a_claim_acknowledged_in_parts() {
        let ledger = ledger_with(&[
            ("a", AsyncTaskStatus::Completed),
            ("b", AsyncTaskStatus::Completed),
        ]);
        let claim = ledger.claim(ClaimOwner::NextTurn).expect("both");
        let rest = claim
            .acknowledge_some(&["a".to_owned(), "z".to_owned()])
            .expect("b is left");
        assert_eq!(rest.task_ids(), ["b"]);
        assert!(!ledger.is_claimed("a") && ledger.is_claimed("b"));
        assert_eq!(ledger.manager().pending_notifications().len(), 1);
        // Acknowledging a result another claim carries leaves that claim.
        ledger.acknowledge_unclaimed(&["b".to_owned()]);
        assert!(ledger.is_claimed("b"), "still in the next turn's claim");
        assert!(rest.acknowledge_some(&["b".to_owned()]).is_none());
        assert!(!ledger.is_claimed("b"));
        assert!(ledger.manager().pending_notifications().is_empty());
    }
}
