//! `Worker`: one machine serving the fleet: it registers, renews its lease,
//! claims tasks, runs them through a `SubagentRunner`, reports their ends
//! with the claim's fencing token, and reaps lost workers.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use asynctask_manager::{Inbox, InboxError, InboxSender, Questions, TaskProgress};
use asynctask_model::OutputObject;
use asynctask_tools::SubagentRunner;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::fleet::is_lock_timeout;
use crate::listen::{
    CANCEL_CHANNEL, ENDED_CHANNEL, FleetListener, MESSAGE_CHANNEL, QUEUED_CHANNEL,
};
use crate::types::{ClaimedTask, WorkerLease, WorkerSpec};
use crate::{DatabaseConfig, Fleet, FleetError, FleetOptions};

mod asks;
mod ends;
mod lease;
mod run;

use crate::backoff::Backoff;
use asks::WorkerAsks;

use run::{
    cancelled, points_to_whole_output, read_whole_output, report_progress, run_one, watch_lease,
};

/// The first wait before connecting again; it doubles up to the heartbeat
/// interval (at most [`MAX_BACKOFF`]).
const MIN_BACKOFF: Duration = Duration::from_millis(100);

/// The longest wait before connecting again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long a stopping worker waits for its cancelled subagents to end.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How often, at most, a task's last line of progress is written to the
/// fleet (only when it changed).
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// Serves the fleet from this machine, with `runner` running the subagents
/// its [`WorkerSpec`] names, until told to stop.
///
/// [`run`](Self::run) registers (a new lease), then, on a timer of a third
/// of the lease, renews the lease, [reaps](Fleet::reap_expired) the workers
/// whose lease expired, and claims what its free slots allow; a submission
/// or a task's end anywhere in the fleet wakes it at once (`LISTEN/NOTIFY`),
/// so the timer is only the fallback and an idle worker costs a few
/// statements per heartbeat.
///
/// Each claimed task runs through the runner, with the request its front
/// launched ([`ClaimedTask::request`]: behaviour prompts, context, output
/// spec, tool whitelist, depth, and the timeout the front resolved, within
/// the worker's [cap](Self::with_task_timeout)); its end is written with
/// the claim's fencing token. A write the fleet refuses (the claim is no
/// longer current) is logged and dropped.
///
/// The lease is watched on this machine's clock from when each renewal was
/// sent, less a small margin (1 ms and 0.2% of the lease, for the database
/// clock's rounding and two clocks' rates): if it cannot be renewed before
/// then (the database is unreachable,
/// or says the lease is gone), the worker ends every running subagent at
/// once ([`SubagentRunner::terminate_all`], and their cancellation), stops
/// claiming, and registers anew once they have ended and the database
/// answers. A lost connection is retried with backoff, and running subagents
/// keep running meanwhile: their ends are written once it is back.
pub struct Worker {
    config: DatabaseConfig,
    spec: WorkerSpec,
    runner: Arc<dyn SubagentRunner>,
    options: FleetOptions,
    task_timeout: Option<Duration>,
    retention: Option<Duration>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The configuration holds the credentials: never shown.
        f.debug_struct("Worker")
            .field("spec", &self.spec)
            .field("task_timeout", &self.task_timeout)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker on the database `config` names, registering as `spec`,
    /// running subagents with `runner`, with the database's clock; each
    /// task runs for at most the timeout its front resolved.
    #[must_use]
    pub fn new(
        config: impl Into<DatabaseConfig>,
        spec: WorkerSpec,
        runner: Arc<dyn SubagentRunner>,
    ) -> Self {
        Worker {
            config: config.into(),
            spec,
            runner,
            options: FleetOptions::new(),
            task_timeout: None,
            retention: Some(crate::DEFAULT_RETENTION),
        }
    }

    /// Replaces the fleet's options (its clock).
    #[must_use]
    pub fn with_options(mut self, options: FleetOptions) -> Self {
        self.options = options;
        self
    }

    /// Caps how long one task may run on this worker before it is cancelled
    /// and failed: a task whose front resolved a longer timeout gets this
    /// one. Without it, each task's own timeout applies.
    #[must_use]
    pub fn with_task_timeout(mut self, timeout: Duration) -> Self {
        self.task_timeout = Some(timeout);
        self
    }

    /// Replaces how long delivered tasks are kept before this worker
    /// [prunes](Fleet::prune) them (default [`DEFAULT_RETENTION`](crate::DEFAULT_RETENTION));
    /// `None`: it prunes nothing. It prunes at start and every
    /// [`PRUNE_INTERVAL`](crate::PRUNE_INTERVAL), on a connection of its own.
    #[must_use]
    pub fn with_retention(mut self, retain: Option<Duration>) -> Self {
        self.retention = retain;
        self
    }

    /// How often the lease is renewed (a third of it, at least 10 ms):
    /// also the fallback timer's period, and the longest any one statement
    /// may take before the connection is given up and made again.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// use asynctask_fleet::{DatabaseConfig, Worker, WorkerSpec};
    /// # let runner: Arc<dyn asynctask_tools::SubagentRunner> = unimplemented_runner();
    /// let spec = WorkerSpec::new("build-1", ["tester"]).with_lease(Duration::from_secs(30));
    /// let worker = Worker::new(DatabaseConfig::parse("host=/run/postgresql")?, spec, runner);
    /// assert_eq!(worker.heartbeat_interval(), Duration::from_secs(10));
    /// # fn unimplemented_runner() -> Arc<dyn asynctask_tools::SubagentRunner> {
    /// #     struct Nothing;
    /// #     #[async_trait::async_trait]
    /// #     impl asynctask_tools::SubagentRunner for Nothing {
    /// #         async fn run(&self, _: asynctask_tools::SubagentRequest, _: tokio_util::sync::CancellationToken)
    /// #             -> Result<asynctask_model::OutputObject, asynctask_tools::SubagentError> {
    /// #             Err(asynctask_tools::SubagentError::new("nothing"))
    /// #         }
    /// #     }
    /// #     Arc::new(Nothing)
    /// # }
    /// # Ok::<(), asynctask_fleet::FleetError>(())
    /// ```
    #[must_use]
    pub fn heartbeat_interval(&self) -> Duration {
        (self.spec.lease / 3).max(Duration::from_millis(10))
    }

    /// Serves until `shutdown` is cancelled. On shutdown its registration
    /// ends ([`Fleet::retire`]: its running tasks fail with `interrupted:
    /// worker <name> stopped`) and its subagents are cancelled and awaited
    /// (a few seconds at most). Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// Only what retrying cannot mend: an invalid [`WorkerSpec`]
    /// ([`FleetError::NoWorkspaces`], [`FleetError::Empty`],
    /// [`FleetError::InvalidName`] at once, before connecting;
    /// [`FleetError::InvalidWorker`]) or a database without the schema of
    /// this version ([`FleetError::NoSchema`], [`FleetError::OlderSchema`],
    /// [`FleetError::NewerSchema`]). An unreachable database is retried, with
    /// backoff, until shutdown; so is a session that fails right after
    /// connecting. A statement the database refuses for good (a value it
    /// cannot store) is not taken for a lost connection: its step is skipped
    /// until the next heartbeat, and a task's end it refuses fails the task
    /// with the reason.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: cancel `shutdown` instead, and await the end.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), FleetError> {
        crate::fleet::check_worker(&self.spec)?;
        let pruning = self.retention.map(|retain| {
            let stop = shutdown.child_token();
            let task = tokio::spawn(crate::retention::prune_periodically(
                self.config.clone(),
                self.options.clone(),
                retain,
                stop.clone(),
            ));
            (stop, task)
        });
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        let (progress_tx, progress_rx) = mpsc::unbounded_channel();
        let mut state = Serving {
            worker: self,
            running: HashMap::new(),
            unwritten: VecDeque::new(),
            registration: None,
            ended_tx,
            ended_rx,
            cancelling: HashSet::new(),
            progress_tx,
            progress_rx,
            inboxes: HashMap::new(),
            delivered: HashSet::new(),
            asks: WorkerAsks::new(),
        };
        let result = state.serve(&shutdown).await;
        state.stop_runs().await;
        if let Some((stop, task)) = pruning {
            stop.cancel();
            let _ = task.await;
        }
        result
    }
}

/// How a claimed task ended on this machine.
#[derive(Debug)]
enum RunEnd {
    Completed(OutputObject),
    Failed(String),
    /// Cancelled because the fleet asked (a front's cancel).
    Cancelled,
}

/// A claimed task's end, to be written.
#[derive(Debug)]
struct Ended {
    task: ClaimedTask,
    outcome: RunEnd,
    /// The whole output (its end, bounded) and its length in bytes, when
    /// the result was cut and points to it.
    whole: Option<(String, u64)>,
    /// Whether the database refused the end this replaces: a failure saying
    /// so, never replaced again.
    refused: bool,
}

/// One registration: its lease, and the watchdog that ends the subagents if
/// it is not renewed in time.
struct Registration {
    lease: WorkerLease,
    /// When the lease ends on this machine's clock: the send time of the
    /// last renewal that succeeded, plus the lease, less a margin for the
    /// clocks (never later than the fleet gives up: see `lease`).
    deadline: Arc<Mutex<Instant>>,
    /// Cancelled when the lease is lost: every run's token is its child.
    lost: CancellationToken,
    watchdog: JoinHandle<()>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.watchdog.abort();
    }
}

/// Why a connected session ended, or a step of it failed.
enum SessionEnd {
    Shutdown,
    Disconnected(FleetError),
    /// The server refused a statement for good (a value it cannot store,
    /// a limit): the connection is fine, and sending the statement again
    /// would fail again. The step is given up; the session goes on.
    Refused(FleetError),
    Fatal(FleetError),
}

impl From<FleetError> for SessionEnd {
    fn from(err: FleetError) -> Self {
        match err {
            // A statement or a connect that hung past its time (a cut link
            // drops packets rather than refusing them) is a lost connection too.
            _ if err.is_transient() => SessionEnd::Disconnected(err),
            FleetError::Database { .. } => SessionEnd::Refused(err),
            other => SessionEnd::Fatal(other),
        }
    }
}

/// A step of a session whose statement the server refused is logged and
/// given up: the steps after it still run, and it is tried again at the
/// next heartbeat (a bad row never stops a worker from claiming).
fn tolerate(step: &'static str, result: Result<(), SessionEnd>) -> Result<(), SessionEnd> {
    match result {
        Err(SessionEnd::Refused(err)) => {
            tracing::error!(step, error = %err.chain(),
                "the fleet's database refused a statement: the step is skipped until the next heartbeat");
            Ok(())
        }
        other => other,
    }
}

/// Everything the worker holds while it serves.
struct Serving {
    worker: Worker,
    /// Tasks running here, by id: their cancellation.
    running: HashMap<String, CancellationToken>,
    /// Ends not yet written (the connection was down).
    unwritten: VecDeque<Ended>,
    registration: Option<Registration>,
    ended_tx: mpsc::UnboundedSender<Ended>,
    ended_rx: mpsc::UnboundedReceiver<Ended>,
    /// Running tasks whose cancel the fleet asked for.
    cancelling: HashSet<String>,
    /// Lines of progress to write (each task's reporter rate-limits them).
    progress_tx: mpsc::UnboundedSender<(ClaimedTask, String)>,
    progress_rx: mpsc::UnboundedReceiver<(ClaimedTask, String)>,
    /// The inboxes of running tasks whose subagent takes messages.
    inboxes: HashMap<String, (ClaimedTask, InboxSender)>,
    /// Messages put in an inbox but not yet marked delivered (the mark's
    /// connection failed): marked, never put in again.
    delivered: HashSet<(String, i64)>,
    /// The questions of the tasks whose subagent takes messages.
    asks: WorkerAsks,
}

impl Serving {
    async fn serve(&mut self, shutdown: &CancellationToken) -> Result<(), FleetError> {
        crate::storable::check_spec(&self.worker.spec)?;
        let max_backoff = self.worker.heartbeat_interval().min(MAX_BACKOFF);
        let mut backoff = Backoff::new(MIN_BACKOFF, max_backoff);
        let mut disconnected = false;
        loop {
            let connected = tokio::select! {
                connected = self.connect() => connected,
                () = shutdown.cancelled() => return Ok(()),
            };
            let end = match connected {
                Ok((mut fleet, mut listener)) => {
                    if disconnected {
                        tracing::info!("the fleet's database answers again");
                    }
                    let session = backoff.connected();
                    let end = self.session(&mut fleet, &mut listener, shutdown).await;
                    backoff.ended(session);
                    match end {
                        SessionEnd::Shutdown => {
                            self.retire(&fleet).await;
                            return Ok(());
                        }
                        other => other,
                    }
                }
                Err(err) => SessionEnd::from(err),
            };
            match end {
                SessionEnd::Shutdown => return Ok(()),
                SessionEnd::Fatal(err) => return Err(err),
                // A refusal that reached the session (its first steps are
                // tolerated): connect again, backing off.
                SessionEnd::Disconnected(err) | SessionEnd::Refused(err) => {
                    disconnected = true;
                    let wait = backoff.next_wait();
                    tracing::warn!(
                        error = %err.chain(),
                        retry_in_ms = wait.as_millis(),
                        running = self.running.len(),
                        "cannot reach the fleet's database; running subagents keep running"
                    );
                    if self.wait_offline(wait, shutdown).await {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// A connection for statements and one for wake-ups.
    async fn connect(&self) -> Result<(Fleet, FleetListener), FleetError> {
        let limit = self.worker.heartbeat_interval().max(Duration::from_secs(1));
        let config = &self.worker.config;
        let both = async {
            let fleet = Fleet::connect(config, self.worker.options.clone()).await?;
            fleet.set_lock_timeout(self.lock_limit()).await?;
            let listener = FleetListener::connect(
                config,
                &[
                    QUEUED_CHANNEL,
                    ENDED_CHANNEL,
                    CANCEL_CHANNEL,
                    MESSAGE_CHANNEL,
                ],
            )
            .await?;
            Ok((fleet, listener))
        };
        match tokio::time::timeout(limit, both).await {
            Ok(result) => result,
            Err(_) => Err(FleetError::Unreachable { after: limit }),
        }
    }

    /// Waits `backoff` while disconnected: runs still end (their ends are
    /// kept for later), and a lost lease still ends the subagents. Returns
    /// whether shutdown was asked.
    async fn wait_offline(&mut self, backoff: Duration, shutdown: &CancellationToken) -> bool {
        let until = Instant::now() + backoff;
        loop {
            let lost = self.lost_token();
            tokio::select! {
                () = tokio::time::sleep_until(until) => return false,
                () = shutdown.cancelled() => return true,
                () = cancelled(lost.as_ref()) => self.lose_lease("it could not be renewed in time"),
                Some(ended) = self.ended_rx.recv() => self.record(ended),
            }
        }
    }

    /// One connected session: serves until shutdown or until the
    /// connection fails.
    async fn session(
        &mut self,
        fleet: &mut Fleet,
        listener: &mut FleetListener,
        shutdown: &CancellationToken,
    ) -> SessionEnd {
        match self.session_inner(fleet, listener, shutdown).await {
            Ok(()) => SessionEnd::Shutdown,
            Err(end) => end,
        }
    }

    async fn session_inner(
        &mut self,
        fleet: &mut Fleet,
        listener: &mut FleetListener,
        shutdown: &CancellationToken,
    ) -> Result<(), SessionEnd> {
        let interval = self.worker.heartbeat_interval();
        // Notifications sent while disconnected are lost: look once now.
        // The lease first: an end whose write waits on a lock never keeps
        // the lease from being renewed.
        tolerate("registering", self.register_if_needed(fleet).await)?;
        tolerate("renewing the lease", self.renew(fleet).await)?;
        self.flush(fleet).await?;
        tolerate("failing untracked tasks", self.fail_untracked(fleet).await)?;
        tolerate("reaping", self.reap(fleet).await)?;
        tolerate(
            "reading cancel requests",
            self.cancel_requested(fleet).await,
        )?;
        tolerate("claiming", self.claim(fleet).await)?;
        tolerate("delivering messages", self.deliver_messages(fleet).await)?;
        tolerate("syncing questions", self.sync_questions(fleet).await)?;
        let mut tick = tokio::time::interval_at(Instant::now() + interval, interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let lost = self.lost_token();
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(()),
                () = cancelled(lost.as_ref()) => {
                    self.lose_lease("it could not be renewed in time");
                }
                // Before the ends and wake-ups: under a steady stream of them
                // the renewal must not wait (the lease would expire).
                _ = tick.tick() => {
                    tolerate("renewing the lease", self.renew(fleet).await)?;
                    // Ends a held row lock kept from being written.
                    self.flush(fleet).await?;
                    tolerate("failing untracked tasks", self.fail_untracked(fleet).await)?;
                    tolerate("reaping", self.reap(fleet).await)?;
                    tolerate("reading cancel requests", self.cancel_requested(fleet).await)?;
                    tolerate("registering", self.register_if_needed(fleet).await)?;
                    tolerate("claiming", self.claim(fleet).await)?;
                    tolerate("delivering messages", self.deliver_messages(fleet).await)?;
                    tolerate("syncing questions", self.sync_questions(fleet).await)?;
                }
                Some(ended) = self.ended_rx.recv() => {
                    self.record(ended);
                    self.flush(fleet).await?;
                    tolerate("registering", self.register_if_needed(fleet).await)?;
                    tolerate("claiming", self.claim(fleet).await)?;
                }
                Some(()) = self.asks.asked.recv() => {
                    while self.asks.asked.try_recv().is_ok() {}
                    tolerate("syncing questions", self.sync_questions(fleet).await)?;
                }
                Some((task, line)) = self.progress_rx.recv() => {
                    // A claim no longer current (the task ended) writes
                    // nothing; a line whose row is locked is skipped (the
                    // next one replaces it).
                    match self.db(fleet.report_progress(&task, &line)).await {
                        Ok(())
                        | Err(SessionEnd::Fatal(FleetError::Fenced { .. }))
                        | Err(SessionEnd::Refused(_)) => {}
                        Err(SessionEnd::Disconnected(err)) if is_lock_timeout(&err) => {}
                        Err(end) => return Err(end),
                    }
                }
                wakeup = listener.recv() => match wakeup {
                    Some(wakeup) if wakeup.channel == CANCEL_CHANNEL => {
                        let mine = self.registration.as_ref().is_some_and(|r| {
                            wakeup.payload == r.lease.worker_id.to_string()
                        });
                        if mine {
                            tolerate("reading cancel requests", self.cancel_requested(fleet).await)?;
                        }
                    }
                    Some(wakeup) if wakeup.channel == MESSAGE_CHANNEL => {
                        let mine = self.registration.as_ref().is_some_and(|r| {
                            wakeup.payload == r.lease.worker_id.to_string()
                        });
                        if mine {
                            tolerate("delivering messages", self.deliver_messages(fleet).await)?;
                            tolerate("syncing questions", self.sync_questions(fleet).await)?;
                        }
                    }
                    Some(wakeup) => {
                        tracing::trace!(channel = %wakeup.channel, payload = %wakeup.payload, "woken");
                        tolerate("claiming", self.claim(fleet).await)?;
                    }
                    None => {
                        return Err(SessionEnd::Disconnected(FleetError::Unreachable {
                            after: Duration::ZERO,
                        }));
                    }
                },
            }
        }
    }

    /// A statement, given up (as a lost connection) after a heartbeat
    /// interval: a hung connection must not hold the worker past its lease.
    async fn db<T>(
        &self,
        statement: impl Future<Output = Result<T, FleetError>>,
    ) -> Result<T, SessionEnd> {
        let limit = self.worker.heartbeat_interval();
        match tokio::time::timeout(limit, statement).await {
            Ok(result) => result.map_err(SessionEnd::from),
            Err(_) => Err(SessionEnd::Disconnected(FleetError::Unreachable {
                after: limit,
            })),
        }
    }

    fn lost_token(&self) -> Option<CancellationToken> {
        self.registration.as_ref().map(|r| r.lost.clone())
    }

    /// A new registration, once every subagent of the last one has ended.
    async fn register_if_needed(&mut self, fleet: &Fleet) -> Result<(), SessionEnd> {
        if self.registration.is_some() || !self.running.is_empty() {
            return Ok(());
        }
        let sent = Instant::now();
        let lease = self.db(fleet.register_worker(&self.worker.spec)).await?;
        let deadline = Arc::new(Mutex::new(lease::local_deadline(
            sent,
            self.worker.spec.lease,
        )));
        let lost = CancellationToken::new();
        let watchdog = tokio::spawn(watch_lease(
            Arc::clone(&deadline),
            lost.clone(),
            Arc::clone(&self.worker.runner),
        ));
        tracing::info!(
            worker = %lease.name,
            worker_id = lease.worker_id,
            subagents = ?self.worker.spec.subagents,
            capacity = self.worker.spec.capacity,
            "serving the fleet"
        );
        self.registration = Some(Registration {
            lease,
            deadline,
            lost,
            watchdog,
        });
        Ok(())
    }

    /// Renews the lease; one the database says is gone is lost here too.
    async fn renew(&mut self, fleet: &Fleet) -> Result<(), SessionEnd> {
        let Some(registration) = self.registration.as_mut() else {
            return Ok(());
        };
        if registration.lost.is_cancelled() {
            self.lose_lease("it could not be renewed in time");
            return Ok(());
        }
        let sent = Instant::now();
        let mut lease = registration.lease.clone();
        let limit = self.worker.heartbeat_interval();
        let renewed = match tokio::time::timeout(limit, fleet.heartbeat(&mut lease)).await {
            Ok(renewed) => renewed,
            Err(_) => Err(FleetError::Unreachable { after: limit }),
        };
        match renewed {
            Ok(()) => {
                *registration
                    .deadline
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) =
                    lease::local_deadline(sent, self.worker.spec.lease);
                registration.lease = lease;
                Ok(())
            }
            Err(FleetError::WorkerLost { .. }) => {
                self.lose_lease("the fleet says it has expired");
                Ok(())
            }
            Err(err) => Err(SessionEnd::from(err)),
        }
    }

    /// Ends every running subagent of a lost lease and forgets the lease;
    /// claiming stops until a new registration.
    fn lose_lease(&mut self, why: &str) {
        let Some(registration) = self.registration.take() else {
            return;
        };
        tracing::error!(
            worker = %registration.lease.name,
            running = self.running.len(),
            "the lease was lost ({why}): ending every running subagent; the fleet reports \
             their tasks interrupted"
        );
        registration.lost.cancel();
        self.worker.runner.terminate_all();
    }

    /// Fails the tasks its registration holds but it does not run (a claim
    /// whose answer was lost): see [`Fleet::fail_untracked`].
    async fn fail_untracked(&self, fleet: &Fleet) -> Result<(), SessionEnd> {
        let Some(registration) = self.registration.as_ref() else {
            return Ok(());
        };
        let tracked: Vec<String> = self
            .running
            .keys()
            .cloned()
            .chain(self.unwritten.iter().map(|ended| ended.task.id.clone()))
            .collect();
        self.db(fleet.fail_untracked(&registration.lease, &tracked))
            .await?;
        Ok(())
    }

    async fn reap(&self, fleet: &Fleet) -> Result<(), SessionEnd> {
        let interrupted = self.db(fleet.reap_expired()).await?;
        if !interrupted.is_empty() {
            tracing::info!(
                tasks = interrupted.len(),
                "reaped the tasks of lost workers"
            );
        }
        Ok(())
    }

    /// Cancels the running tasks whose cancel the fleet asked for: their
    /// subagents end (process groups), and `cancelled` is written with the
    /// claim's fencing token.
    async fn cancel_requested(&mut self, fleet: &Fleet) -> Result<(), SessionEnd> {
        let Some(registration) = self.registration.as_ref() else {
            return Ok(());
        };
        let lease = registration.lease.clone();
        for id in self.db(fleet.cancel_requests(&lease)).await? {
            if let Some(cancel) = self.running.get(&id)
                && self.cancelling.insert(id.clone())
            {
                tracing::info!(task = %id, "cancel asked by the fleet: ending the subagent");
                cancel.cancel();
            }
        }
        Ok(())
    }

    /// Puts the undelivered messages of the tasks running here in their
    /// subagents' inboxes, each task's in order, and marks each delivered
    /// (with the claim's fencing token). A full inbox keeps the rest of its
    /// task's messages for later; one put in whose mark failed is marked
    /// again, never put in twice.
    async fn deliver_messages(&mut self, fleet: &Fleet) -> Result<(), SessionEnd> {
        let Some(registration) = self.registration.as_ref() else {
            return Ok(());
        };
        if self.inboxes.is_empty() {
            return Ok(());
        }
        let lease = registration.lease.clone();
        let mut held_back: HashSet<String> = HashSet::new();
        for message in self.db(fleet.pending_messages(&lease)).await? {
            let Some((task, inbox)) = self.inboxes.get(&message.task_id) else {
                continue;
            };
            if held_back.contains(&message.task_id) {
                continue;
            }
            let key = (message.task_id.clone(), message.n);
            if !self.delivered.contains(&key) {
                match inbox.send(message.body) {
                    Ok(()) => {
                        self.delivered.insert(key.clone());
                    }
                    Err(InboxError::Full) => {
                        held_back.insert(message.task_id);
                        continue;
                    }
                    Err(err) => {
                        tracing::warn!(task = %task.id, error = %err, "the message cannot be put in the subagent's inbox; kept undelivered");
                        held_back.insert(message.task_id);
                        continue;
                    }
                }
            }
            match self.db(fleet.mark_message_delivered(task, message.n)).await {
                Ok(()) => {
                    tracing::info!(task = %task.id, message = message.n, "message delivered");
                    self.delivered.remove(&key);
                }
                Err(SessionEnd::Fatal(FleetError::Fenced { .. })) => {
                    self.delivered.remove(&key);
                }
                Err(end) => return Err(end),
            }
        }
        Ok(())
    }

    /// Runs a claimed task in a task of its own; its end comes back on
    /// `ended_rx`.
    fn start(&mut self, task: ClaimedTask) {
        let Some(registration) = self.registration.as_ref() else {
            return;
        };
        let cancel = registration.lost.child_token();
        self.running.insert(task.id.clone(), cancel.clone());
        tracing::info!(task = %task.id, subagent = %task.subagent_name, fence = task.fence, "task started");
        let runner = Arc::clone(&self.worker.runner);
        let ended = self.ended_tx.clone();
        // The timeout the front resolved, within this worker's cap.
        let timeout = self
            .worker
            .task_timeout
            .map_or(task.timeout, |cap| cap.min(task.timeout));
        let progress = TaskProgress::new();
        // A subagent that reads messages may ask questions too.
        let (inbox, questions) = if self.worker.runner.accepts_messages(&task.subagent_name) {
            let (sender, inbox) = Inbox::channel();
            self.inboxes.insert(task.id.clone(), (task.clone(), sender));
            (inbox, self.asks.open(&task))
        } else {
            (Inbox::closed(), Questions::none())
        };
        let reporter = tokio::spawn(report_progress(
            task.clone(),
            progress.clone(),
            self.progress_tx.clone(),
        ));
        tokio::spawn(async move {
            let request = task
                .request()
                .with_timeout(timeout)
                .with_progress(progress.clone())
                .with_inbox(inbox)
                .with_questions(questions);
            let subagent = task.subagent_name.clone();
            let run = tokio::spawn(run_one(runner, request, cancel, timeout, subagent));
            let outcome = run.await;
            reporter.abort();
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(err) => RunEnd::Failed(format!("the subagent's runner panicked: {err}")),
            };
            let whole = if points_to_whole_output(&outcome) {
                read_whole_output(progress.output_file()).await
            } else {
                None
            };
            let _ = ended.send(Ended {
                task,
                outcome,
                whole,
                refused: false,
            });
        });
    }

    /// Ends the registration of a stopping worker: its running tasks are
    /// reported interrupted now rather than after its lease.
    async fn retire(&mut self, fleet: &Fleet) {
        let Some(registration) = self.registration.take() else {
            return;
        };
        let error = format!("interrupted: worker {} stopped", registration.lease.name);
        match self.db(fleet.retire(&registration.lease, &error)).await {
            Ok(interrupted) => tracing::info!(
                interrupted = interrupted.len(),
                "stopped: the registration ended"
            ),
            Err(_) => tracing::warn!(
                "stopped without ending the registration: its lease expires on its own"
            ),
        }
        registration.lost.cancel();
    }

    /// Cancels every run still going and waits (a few seconds at most) for
    /// their subagents to end.
    async fn stop_runs(&mut self) {
        if let Some(registration) = self.registration.take() {
            registration.lost.cancel();
        }
        for cancel in self.running.values() {
            cancel.cancel();
        }
        let deadline = Instant::now() + STOP_GRACE;
        while !self.running.is_empty() {
            match tokio::time::timeout_at(deadline, self.ended_rx.recv()).await {
                Ok(Some(ended)) => {
                    self.running.remove(&ended.task.id);
                    self.forget_inbox(&ended.task.id);
                }
                Ok(None) | Err(_) => break,
            }
        }
        if !self.running.is_empty() {
            self.worker.runner.terminate_all();
        }
    }
}

impl Serving {
    /// Drops an ended task's inbox and what it kept of its messages.
    fn forget_inbox(&mut self, id: &str) {
        self.inboxes.remove(id);
        self.delivered.retain(|(task, _)| task != id);
        self.asks.close(id);
    }
}
