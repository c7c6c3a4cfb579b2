//! Delivery: the auto-trigger that wakes an idle agent, and next-turn reminders,
//! both claiming through the one [`ClaimLedger`], so no task is delivered twice.
//!
//! The auto-trigger's turn in flight owns its [`Claim`] while the host runs it;
//! the next-turn reminder's claim is kept here until the host acknowledges it
//! (or asks for another, or its turn ends without an acknowledgement). Host
//! callbacks are never called with a lock held: they run on a spawned tokio
//! task.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::host::AgentHost;
use crate::ledger::{Claim, ClaimLedger, ClaimOwner};
use crate::reminder::{AsyncTaskReminderService, Reminder};

/// The first delay before a failed delivery is retried; it doubles per failure.
const RETRY_BASE: Duration = Duration::from_secs(1);
/// Delayed retries after this many failures in a row stop; the next completion
/// or `agent_idle` tries again.
const MAX_DELAYED_RETRIES: u32 = 4;

#[derive(Debug, Default)]
struct State {
    /// An auto-trigger delivery task is running.
    in_flight: bool,
    /// Something happened while it ran: check again before stopping.
    again: bool,
    /// Failed deliveries in a row.
    failures: u32,
    /// A delayed retry is scheduled.
    retry_scheduled: bool,
    stopped: bool,
}

/// The delivery engine; shared by the runtime and the manager's event handlers.
#[derive(Debug)]
pub(crate) struct Delivery {
    ledger: ClaimLedger,
    /// The claim of the reminder the host took for its next request.
    next_turn: Mutex<Option<Claim>>,
    reminders: AsyncTaskReminderService,
    host: Option<Arc<dyn AgentHost>>,
    handle: Handle,
    state: Mutex<State>,
    /// Every delivery and retry timer, so shutdown can wait for them.
    tracker: TaskTracker,
    /// Cancelled at shutdown: stops retry timers at once.
    stopping: CancellationToken,
}

impl std::fmt::Debug for dyn AgentHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AgentHost")
    }
}

impl Delivery {
    pub(crate) fn new(
        ledger: ClaimLedger,
        reminders: AsyncTaskReminderService,
        host: Option<Arc<dyn AgentHost>>,
        handle: Handle,
    ) -> Self {
        Delivery {
            ledger,
            next_turn: Mutex::new(None),
            reminders,
            host,
            handle,
            state: Mutex::new(State::default()),
            tracker: TaskTracker::new(),
            stopping: CancellationToken::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a few flags, consistent after every statement.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Something may be deliverable (an event, or the agent went idle): start a
    /// delivery unless one is running, in which case it checks again when done.
    pub(crate) fn poke(self: &Arc<Self>) {
        if self.host.is_none() {
            return;
        }
        {
            let mut state = self.lock();
            if state.stopped {
                return;
            }
            if state.in_flight {
                state.again = true;
                return;
            }
            state.in_flight = true;
            state.again = false;
        }
        let this = Arc::clone(self);
        self.tracker
            .spawn_on(async move { this.run().await }, &self.handle);
    }

    /// The host's turn ended: what it took with `next_turn_reminder` and did not
    /// acknowledge was not delivered; then deliver what is pending.
    pub(crate) fn agent_idle(self: &Arc<Self>) {
        self.next_turn().take();
        self.poke();
    }

    /// The next-turn claim's slot. Held while that claim is made, ended or
    /// replaced, so the host's calls apply one after the other (lock order:
    /// this slot, then the ledger, then the manager).
    fn next_turn(&self) -> MutexGuard<'_, Option<Claim>> {
        // One claim or none: consistent after every statement.
        self.next_turn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The reminder for the host's next model request, claiming its tasks until
    /// [`ack`](Self::ack) (or the next call, or `agent_idle`). With nothing to
    /// claim, the reminder only says how many tasks still run (and carries no
    /// ids); `None` when nothing runs either.
    pub(crate) fn next_turn_reminder(&self) -> Option<Reminder> {
        let mut slot = self.next_turn();
        // The last one was not sent: its results are claimed again, with
        // whatever finished since.
        slot.take();
        match self.ledger.claim(ClaimOwner::NextTurn) {
            Some(claim) => Some(slot.insert(claim).reminder().clone()),
            None => self.reminders.running_only(),
        }
    }

    /// The host delivered these tasks: they are marked notified and leave the
    /// next-turn claim, whose other tasks stay claimed. Tasks it does not carry
    /// (delivered by the host some other way) are marked all the same.
    pub(crate) fn ack(&self, task_ids: &[String]) {
        let mut slot = self.next_turn();
        let (carried, others): (Vec<String>, Vec<String>) =
            task_ids.iter().cloned().partition(|id| {
                slot.as_ref()
                    .is_some_and(|claim| claim.task_ids().contains(id))
            });
        if let Some(claim) = slot.take() {
            *slot = claim.acknowledge_some(&carried);
        }
        drop(slot);
        self.ledger.acknowledge_unclaimed(&others);
    }

    /// Stops delivering: no new delivery starts, retry timers end.
    pub(crate) fn stop(&self) {
        self.lock().stopped = true;
        self.stopping.cancel();
        self.tracker.close();
    }

    /// Waits until every delivery and retry timer has ended (after [`stop`](Self::stop)).
    pub(crate) async fn wait(&self) {
        self.tracker.wait().await;
    }

    /// The auto-trigger loop: deliver while something deliverable is pending and
    /// the agent is idle.
    async fn run(self: Arc<Self>) {
        let Some(host) = self.host.clone() else {
            self.lock().in_flight = false;
            return;
        };
        // If a host callback panics, the delivery unwinds (dropping, so
        // releasing, its claim): the tasks stay deliverable by the next event
        // or `agent_idle`.
        let _unwind = ResetOnPanic(&self);
        loop {
            // Let a burst of completions land, so they share one turn.
            tokio::task::yield_now().await;
            let Some(claim) = self.claim_for_auto_trigger(host.as_ref()) else {
                if self.loop_again() {
                    continue;
                }
                return;
            };
            let span = tracing::info_span!(
                "async_task_delivery",
                path = "auto_trigger",
                task_ids = ?claim.task_ids()
            );
            let outcome = host
                .trigger_agent_turn(claim.reminder().clone())
                .instrument(span.clone())
                .await;
            match outcome {
                Ok(()) => {
                    claim.acknowledge();
                    self.lock().failures = 0;
                    span.in_scope(|| tracing::debug!("delivered; checking again"));
                    // Loop: check again after a successful delivery.
                }
                Err(error) => {
                    span.in_scope(|| {
                        tracing::warn!(%error, "async task delivery failed; the tasks stay pending");
                    });
                    drop(claim);
                    self.schedule_retry();
                    return;
                }
            }
        }
    }

    /// After a failed delivery: ends this delivery and, unless too many failed in
    /// a row, schedules a retry with backoff (1, 2, 4, 8 s). An event that
    /// arrived while the delivery ran (a completion, `agent_idle`) starts a new
    /// one at once: it is what "the next event tries again" means, also after
    /// the last delayed retry.
    fn schedule_retry(self: &Arc<Self>) {
        let (retry, again) = {
            let mut state = self.lock();
            state.failures += 1;
            let again = state.end_attempt();
            let retry =
                !state.retry_scheduled && !state.stopped && state.failures <= MAX_DELAYED_RETRIES;
            if retry {
                state.retry_scheduled = true;
            }
            (
                retry.then(|| RETRY_BASE * 2u32.pow(state.failures - 1)),
                again,
            )
        };
        if again {
            self.poke();
        }
        if let Some(delay) = retry {
            let this = Arc::clone(self);
            self.tracker.spawn_on(
                async move {
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = this.stopping.cancelled() => return,
                    }
                    this.lock().retry_scheduled = false;
                    this.poke();
                },
                &self.handle,
            );
        }
    }

    /// Claims a reminder for the auto-trigger, or `None` when the agent is busy,
    /// delivery has stopped, or nothing that warrants waking it is pending.
    fn claim_for_auto_trigger(&self, host: &dyn AgentHost) -> Option<Claim> {
        // Host callback first, without any lock held.
        if host.is_agent_busy() {
            return None;
        }
        if self.lock().stopped {
            return None;
        }
        self.ledger.claim_waking()
    }

    /// Ends the loop unless something happened meanwhile; `true` means go on.
    fn loop_again(&self) -> bool {
        let mut state = self.lock();
        if state.again && !state.stopped {
            state.again = false;
            return true;
        }
        state.in_flight = false;
        false
    }
}

impl State {
    /// Ends the delivery in flight; returns whether an event arrived while it
    /// ran (the caller then pokes, to start a new one).
    fn end_attempt(&mut self) -> bool {
        self.in_flight = false;
        std::mem::take(&mut self.again) && !self.stopped
    }
}

/// Resets the in-flight state when a delivery unwinds from a panicking host
/// callback (and starts a new delivery if an event arrived meanwhile); does
/// nothing on a normal return (the loop keeps the state right). The claim the
/// delivery held was dropped, so released, by the unwinding.
struct ResetOnPanic<'a>(&'a Arc<Delivery>);

impl Drop for ResetOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let again = {
                let mut state = self.0.lock();
                state.failures += 1;
                state.end_attempt()
            };
            tracing::error!("the agent host panicked during a delivery; the tasks stay pending");
            if again {
                self.0.poke();
            }
        }
    }
}
