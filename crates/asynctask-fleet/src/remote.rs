//! `FleetFront`: what makes an MCP server a fleet's front. Its
//! [`FleetRunner`] runs each task by submitting it to the fleet and waiting
//! for its end; its [`FrontJournal`] marks a result delivered in the database
//! once the local registry marks it (the response carrying it was written);
//! its loop keeps the front's lease, the live catalog, and adopts the results
//! of the workspace's fronts that are gone.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use asynctask_manager::{
    Answer, AsyncTaskManager, Journal, JournalEntry, JournalError, QueueFull, RegisterTaskInput,
};
use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks, OutputObject};
use asynctask_tools::{
    SubagentError, SubagentInfo, SubagentRequest, SubagentRunner, WHOLE_OUTPUT_PREFIX,
};
use tokio::sync::{MutexGuard, Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::front::{DEFAULT_FRONT_LEASE, FrontLease, MAX_STORED_OUTPUT_BYTES, ResultFor};
use crate::listen::{ENDED_CHANNEL, FleetListener, PROGRESS_CHANNEL, QUESTION_CHANNEL};
use crate::types::NewTask;
use crate::{DatabaseConfig, Fleet, FleetError, FleetOptions};

/// The most results one adoption takes into the front's registry.
const ADOPT_BATCH: usize = 20;

/// The longest wait before connecting again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long connecting again may take before it counts as a failure (the
/// connection's lock is held meanwhile).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a statement may go unanswered before its connection counts as
/// lost: a cut link loses packets rather than refusing them, so a statement
/// on it would hang until TCP gives up, many minutes later, holding the
/// connection's lock (and the model's calls) meanwhile. The connection is
/// dropped and made again, with backoff, as when it ends.
const STATEMENT_LIMIT: Duration = Duration::from_secs(5);

mod cancel;
mod relay;

use cancel::{ask_to_cancel, ask_to_cancel_until_written};
use relay::{Asks, Steering};

/// How long a steering message the fleet could not take (its task's
/// undelivered messages at the bound, or the database unreachable) waits
/// before it is sent again.
const MESSAGE_RETRY: Duration = Duration::from_millis(500);

/// What a model is told of a task whose result went to another front of the
/// workspace: this front was unreachable past its lease, and another took it.
pub const DELIVERED_ELSEWHERE: &str = "its result went to another session of this workspace \
     (this one was unreachable for longer than its lease)";

/// The error of a task cancelled in the fleet by someone other than this
/// session (a library host's [`Fleet::request_cancel`]).
const CANCELLED_IN_FLEET: &str = "cancelled in the fleet, not by this session";

/// The error of a task the model cancelled before it reached the fleet.
const CANCELLED_BEFORE_SUBMITTED: &str = "cancelled before it reached the fleet";

/// The error of a task the database no longer holds (removed by hand).
const NO_LONGER_HELD: &str = "the fleet's database no longer holds this task";

/// The error of a task the fleet refused to queue.
fn refused(err: &FleetError) -> String {
    format!("the fleet refused the task: {}", err.chain())
}

/// A front of the fleet: one workspace, one registration, one connection
/// shared by its tasks, and a listening connection that wakes them.
///
/// Build it with [`connect`](Self::connect) (which reads the live catalog
/// once, so the first `tools/list` shows it), hand [`runner`](Self::runner)
/// and [`journal`](Self::journal) to the runtime, [`attach`](Self::attach)
/// the runtime's registry, and keep [`run`](Self::run) going until the
/// server ends.
///
/// Delivery: the result of a task this front submitted is kept for it (no
/// other front takes it) while its lease holds; the task's run returns it to
/// the local registry, whose claims put it on exactly one written response;
/// the registry's mark then reaches the database through the journal. A
/// front that dies after writing a response and before its mark reached the
/// database has its result offered again to the next front (the one
/// at-least-once window, as behind a relay). Results whose front is gone
/// (retired, or its lease expired) are adopted by the loop — one statement
/// decides which live front takes each — and put into the local registry as
/// ended tasks, delivered the same way.
pub struct FleetFront {
    shared: Arc<Shared>,
}

impl fmt::Debug for FleetFront {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The configuration holds the credentials: never shown.
        f.debug_struct("FleetFront")
            .field("workspace", &self.shared.workspace)
            .finish_non_exhaustive()
    }
}

struct Shared {
    config: DatabaseConfig,
    options: FleetOptions,
    workspace: String,
    name: String,
    lease: Duration,
    link: tokio::sync::Mutex<Link>,
    catalog: Mutex<Vec<SubagentInfo>>,
    /// Bumped at every wake-up: a task's end in the workspace, the timer.
    wakes: watch::Sender<u64>,
    /// Bumped whenever the statement connection is made again: the listening
    /// connection, which may hang silently on the same cut link, is too.
    reconnects: watch::Sender<u64>,
    /// The runs waiting here, by task id: woken alone by their progress.
    progress: Mutex<HashMap<String, Arc<Notify>>>,
    manager: OnceLock<AsyncTaskManager>,
    marks: mpsc::UnboundedSender<String>,
    marks_rx: Mutex<Option<mpsc::UnboundedReceiver<String>>>,
    /// Cancelled when the server has stopped serving: a run cancelled after
    /// it is left running in the fleet (its result goes to another front).
    closing: CancellationToken,
}

struct Link {
    fleet: Option<Fleet>,
    front: FrontLease,
}

impl FleetFront {
    /// Connects to the fleet (its schema checked, never changed), registers a front of
    /// `workspace` named `name`, and reads the live catalog (of the
    /// workers serving `workspace`).
    ///
    /// # Errors
    ///
    /// [`FleetError::Empty`] or [`FleetError::InvalidName`] for a workspace
    /// or a name the fleet cannot store ([`check_name`](crate::check_name)),
    /// before anything is connected; what [`Fleet::connect`] and
    /// [`Fleet::register_front`] return.
    pub async fn connect(
        config: impl Into<DatabaseConfig>,
        options: FleetOptions,
        workspace: &str,
        name: &str,
    ) -> Result<Self, FleetError> {
        crate::check_name(workspace, "a workspace")?;
        crate::check_name(name, "a front's name")?;
        let config = config.into();
        let fleet = Fleet::connect(&config, options.clone()).await?;
        let front = fleet
            .register_front(workspace, name, DEFAULT_FRONT_LEASE)
            .await?;
        let catalog = fleet.workspace_catalog(workspace).await?;
        let (marks, marks_rx) = mpsc::unbounded_channel();
        tracing::info!(
            workspace,
            front = front.front_id,
            subagents = %names(&catalog),
            "registered as a front of the fleet"
        );
        Ok(FleetFront {
            shared: Arc::new(Shared {
                config,
                options,
                workspace: workspace.to_owned(),
                name: name.to_owned(),
                lease: DEFAULT_FRONT_LEASE,
                link: tokio::sync::Mutex::new(Link {
                    fleet: Some(fleet),
                    front,
                }),
                catalog: Mutex::new(catalog),
                wakes: watch::Sender::new(0),
                reconnects: watch::Sender::new(0),
                progress: Mutex::default(),
                manager: OnceLock::new(),
                marks,
                marks_rx: Mutex::new(Some(marks_rx)),
                closing: CancellationToken::new(),
            }),
        })
    }

    /// Sets the front's workspace's `task-max-async` across the fleet
    /// ([`Fleet::set_max_async`]).
    ///
    /// # Errors
    ///
    /// [`FleetError::Database`], or the connection's errors.
    pub async fn set_max_async(&self, max: MaxAsyncTasks) -> Result<(), FleetError> {
        let workspace = &self.shared.workspace;
        self.shared
            .on_fleet(async |fleet, _| fleet.set_max_async(workspace, max).await)
            .await
    }

    /// The runner the front's `task` tool runs through.
    #[must_use]
    pub fn runner(&self) -> Arc<FleetRunner> {
        Arc::new(FleetRunner {
            shared: Arc::clone(&self.shared),
        })
    }

    /// The journal the front's registry marks deliveries through.
    #[must_use]
    pub fn journal(&self) -> Arc<FrontJournal> {
        Arc::new(FrontJournal {
            marks: self.shared.marks.clone(),
        })
    }

    /// Gives the front its registry: adopted results are put there.
    pub fn attach(&self, manager: AsyncTaskManager) {
        let _ = self.shared.manager.set(manager);
    }

    /// The token to cancel once the server has stopped serving (before its
    /// runtime shuts down): the runs it cancels are then left to the fleet.
    #[must_use]
    pub fn closing(&self) -> CancellationToken {
        self.shared.closing.clone()
    }

    /// The front's work until `stop` is cancelled: wake-ups, the lease, the
    /// catalog, adoption, and marking deliveries; then it writes the marks
    /// still owed and retires the front, so its results go to other fronts
    /// at once.
    pub async fn run(&self, stop: CancellationToken) {
        let Some(mut marks) = self
            .shared
            .marks_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let interval = (self.shared.lease / 3).max(Duration::from_millis(10));
        let mut backoff = Backoff::new(Duration::from_millis(100), MAX_BACKOFF);
        // After the first connection: wait before listening again (a
        // connection that fails right after it was made backs off as one
        // that could not be made).
        let mut session: Option<tokio::time::Instant> = None;
        'connect: loop {
            if let Some(since) = session.take() {
                backoff.ended(since);
                tokio::select! {
                    () = stop.cancelled() => break 'connect,
                    () = tokio::time::sleep(backoff.next_wait()) => {}
                }
            }
            let mut reconnected = self.shared.reconnects.subscribe();
            let listen = tokio::time::timeout(
                CONNECT_TIMEOUT,
                FleetListener::connect(
                    &self.shared.config,
                    &[ENDED_CHANNEL, PROGRESS_CHANNEL, QUESTION_CHANNEL],
                ),
            );
            let listening = tokio::select! {
                () = stop.cancelled() => break 'connect,
                listening = listen => listening.unwrap_or(Err(FleetError::Unreachable {
                    after: CONNECT_TIMEOUT,
                })),
            };
            let mut listener = match listening {
                Ok(listener) => listener,
                Err(err) => {
                    tracing::warn!(error = %err.chain(), "cannot listen to the fleet; retrying");
                    tokio::select! {
                        () = stop.cancelled() => break 'connect,
                        () = tokio::time::sleep(backoff.next_wait()) => {}
                    }
                    continue;
                }
            };
            session = Some(backoff.connected());
            // Connected (again): what was notified meanwhile is lost, so look.
            self.tick().await;
            let mut timer = tokio::time::interval(interval);
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => break 'connect,
                    wake = listener.recv() => match wake {
                        Some(wake)
                            if wake.channel == PROGRESS_CHANNEL
                                || wake.channel == QUESTION_CHANNEL =>
                        {
                            let run = self
                                .shared
                                .progress
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .get(&wake.payload)
                                .cloned();
                            if let Some(run) = run {
                                run.notify_one();
                            }
                        }
                        Some(wake) if wake.payload == self.shared.workspace => {
                            self.shared.wakes.send_modify(|n| *n += 1);
                            self.adopt().await;
                        }
                        Some(_) => {}
                        None => continue 'connect,
                    },
                    Some(id) = marks.recv() => {
                        let mut ids = vec![id];
                        while let Ok(id) = marks.try_recv() {
                            ids.push(id);
                        }
                        self.mark(ids).await;
                    }
                    _ = timer.tick() => self.tick().await,
                    // The statement connection was made again: listen anew.
                    _ = reconnected.changed() => continue 'connect,
                }
            }
        }
        let mut ids = Vec::new();
        while let Ok(id) = marks.try_recv() {
            ids.push(id);
        }
        if !ids.is_empty() {
            self.mark(ids).await;
        }
        let retired = self
            .shared
            .on_fleet(async |fleet, front| fleet.retire_front(front).await)
            .await;
        if let Err(err) = retired {
            tracing::warn!(error = %err.chain(), "could not retire the front");
        }
    }

    /// The timer's work: renew the lease, reap the workers whose lease
    /// expired (a fleet whose only worker was killed has no worker to reap
    /// it), refresh the catalog, adopt, wake the runs (a fallback for lost
    /// notifications).
    async fn tick(&self) {
        self.shared.renew().await;
        let workspace = &self.shared.workspace;
        let catalog = self
            .shared
            .on_fleet(async |fleet, _| {
                fleet.reap_expired().await?;
                fleet.workspace_catalog(workspace).await
            })
            .await;
        match catalog {
            Ok(catalog) => {
                *self
                    .shared
                    .catalog
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = catalog;
            }
            Err(err) => self.shared.failed(&err).await,
        }
        self.adopt().await;
        self.shared.wakes.send_modify(|n| *n += 1);
    }

    /// Takes results whose front is gone into the local registry, as ended
    /// tasks its claims deliver.
    async fn adopt(&self) {
        let Some(manager) = self.shared.manager.get() else {
            return;
        };
        let adopted = self
            .shared
            .on_fleet(async |fleet, front| fleet.adopt_results(front, ADOPT_BATCH).await)
            .await;
        let adopted = match adopted {
            Ok(adopted) => adopted,
            Err(err) => {
                self.shared.failed(&err).await;
                return;
            }
        };
        for task in adopted {
            let info = task.info;
            if manager.task(&info.id).is_some() {
                // Already held here (a task of this front's earlier lease).
                continue;
            }
            let input = RegisterTaskInput::new(
                info.id.clone(),
                info.subagent_name.clone(),
                info.goal_prompt.clone(),
            );
            if let Err(err) = manager.register_task(input) {
                tracing::warn!(task = %info.id, error = %err, "could not take an adopted result");
                continue;
            }
            match info.status {
                AsyncTaskStatus::Completed => {
                    manager.complete_task(&info.id, info.output.unwrap_or_else(empty_output));
                }
                AsyncTaskStatus::Failed => {
                    manager.fail_task(&info.id, info.error.unwrap_or_default());
                }
                _ => {
                    manager.cancel_task(&info.id);
                }
            }
            tracing::info!(task = %info.id, "took the result of a front that is gone");
        }
    }

    async fn mark(&self, ids: Vec<String>) {
        let mut delay = Duration::from_millis(100);
        loop {
            let marked = self
                .shared
                .on_fleet(async |fleet, _| fleet.mark_notified(&ids).await)
                .await;
            match marked {
                Ok(_) => return,
                Err(err) => self.shared.failed(&err).await,
            }
            if delay > MAX_BACKOFF * 4 {
                tracing::error!(
                    count = ids.len(),
                    "could not mark delivered results: they may be delivered again"
                );
                return;
            }
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }
}

impl Shared {
    /// Renews the front's lease; once it has lapsed, registers again and
    /// keeps the tasks no other front adopted meanwhile.
    async fn renew(&self) {
        let mut link = self.link.lock().await;
        let Link { fleet, front } = &mut *link;
        let Some(db) = fleet.as_ref() else {
            return;
        };
        let renewed = match limited(db.front_heartbeat(front)).await {
            Ok(()) => Ok(()),
            Err(FleetError::FrontLost { .. }) => {
                let old = front.front_id;
                match limited(db.register_front(&self.workspace, &self.name, self.lease)).await {
                    Ok(new) => {
                        tracing::warn!(
                            "the front's lease had expired: registered again; results of its \
                             tasks may have gone to other fronts"
                        );
                        let rebound = limited(db.rebind_front(old, &new)).await;
                        *front = new;
                        rebound.map(drop).inspect_err(|err| {
                            tracing::warn!(error = %err.chain(), "could not keep the front's tasks");
                        })
                    }
                    Err(err) => {
                        tracing::warn!(error = %err.chain(), "could not register again");
                        Err(err)
                    }
                }
            }
            Err(err) => {
                tracing::warn!(error = %err.chain(), "could not renew the front's lease");
                Err(err)
            }
        };
        if let Err(err) = renewed {
            let hung = matches!(err, FleetError::Unreachable { .. });
            if hung || fleet.as_ref().is_some_and(Fleet::is_closed) {
                *fleet = None;
            }
            if hung {
                gave_up();
            }
        }
    }

    /// Runs `statement` on the connection (made again if it ended) with the
    /// front's lease. One unanswered within [`STATEMENT_LIMIT`] fails with
    /// [`FleetError::Unreachable`], and its connection is dropped: the next
    /// statement makes it again.
    pub(super) async fn on_fleet<T>(
        &self,
        statement: impl AsyncFnOnce(&mut Fleet, &FrontLease) -> Result<T, FleetError>,
    ) -> Result<T, FleetError> {
        let mut link = self.connected().await?;
        let Link { fleet, front } = &mut *link;
        let db = fleet.as_mut().ok_or(FleetError::Empty("a connection"))?;
        let answered = limited(statement(db, front)).await;
        if matches!(answered, Err(FleetError::Unreachable { .. })) {
            *fleet = None;
            gave_up();
        }
        answered
    }

    /// The link, its connection made again if it ended.
    async fn connected(&self) -> Result<MutexGuard<'_, Link>, FleetError> {
        let mut link = self.link.lock().await;
        if link.fleet.as_ref().is_none_or(Fleet::is_closed) {
            link.fleet = None;
            let connect = Fleet::connect(&self.config, self.options.clone());
            let fleet = tokio::time::timeout(CONNECT_TIMEOUT, connect)
                .await
                .map_err(|_| FleetError::Unreachable {
                    after: CONNECT_TIMEOUT,
                })??;
            tracing::info!("connected to the fleet again");
            link.fleet = Some(fleet);
            self.reconnects.send_modify(|n| *n += 1);
        }
        Ok(link)
    }

    /// A run that ends while the local registry does not hold its task (a
    /// synchronous call, not detached) is answered on the call's own
    /// response: nothing will mark it, so it is marked now, lest another
    /// front deliver it again.
    fn answered_directly(&self, id: &str) {
        let held = self
            .manager
            .get()
            .is_some_and(|manager| manager.task(id).is_some());
        if !held {
            let _ = self.marks.send(id.to_owned());
        }
    }

    /// After a failed statement: a connection that ended is made again next time.
    async fn failed(&self, err: &FleetError) {
        tracing::warn!(error = %err.chain(), "a statement on the fleet failed");
        let mut link = self.link.lock().await;
        if link.fleet.as_ref().is_some_and(Fleet::is_closed) {
            link.fleet = None;
        }
    }
}

/// Runs each task on the fleet: submits it (kept for this front), waits for
/// its end (woken by the front's loop), shows the worker's last line of
/// progress, and asks the fleet to cancel it when the model cancels it.
pub struct FleetRunner {
    shared: Arc<Shared>,
}

impl fmt::Debug for FleetRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetRunner")
            .field("workspace", &self.shared.workspace)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl SubagentRunner for FleetRunner {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        let shared = &self.shared;
        let mut wakes = shared.wakes.subscribe();
        // Submitted, retried while the fleet is unreachable.
        let mut delay = Duration::from_millis(100);
        loop {
            let attempt = shared
                .on_fleet(async |fleet, front| {
                    // The whole launch: the worker's subagent is given
                    // what a local one would be.
                    let task =
                        NewTask::from_request(shared.workspace.clone(), &request).with_front(front);
                    fleet.submit(task).await.map(drop)
                })
                .await;
            match attempt {
                // A duplicate: an earlier attempt was written, its answer lost.
                Ok(()) | Err(FleetError::DuplicateId(_)) => break,
                // Refused for good (a name the fleet cannot store, a value
                // the server refuses, a newer schema): sending it again
                // would fail again, so the model is told now.
                Err(err) if !err.is_transient() => {
                    return Err(SubagentError::new(refused(&err)));
                }
                Err(err) => {
                    shared.failed(&err).await;
                    tokio::select! {
                        () = cancel.cancelled() => return Err(SubagentError::new(CANCELLED_BEFORE_SUBMITTED)),
                        () = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(MAX_BACKOFF);
                }
            }
        }
        let mut last_progress: Option<String> = None;
        let progressed = Arc::new(Notify::new());
        let _waiting = Waiting::new(shared, &request.task_id, Arc::clone(&progressed));
        let mut lapsed = false;
        let mut steering = Steering::new(request.inbox.clone());
        // Only a subagent that reads messages can ask.
        let mut asks = self
            .accepts_messages(&request.subagent_name)
            .then(|| Asks::new(request.questions.clone()));
        loop {
            steering.send(shared, &request.task_id).await;
            if let Some(asks) = asks.as_mut() {
                asks.sync(shared, &request.task_id).await;
            }
            let read = shared
                .on_fleet(async |fleet, front| read_task(fleet, front, &request.task_id).await)
                .await;
            match read {
                // Lapsed: registered again (keeping what no other front
                // adopted) before looking again, once without waiting.
                Ok((Some(_), Some(ResultFor::Lapsed))) => {
                    shared.renew().await;
                    if !std::mem::replace(&mut lapsed, true) {
                        continue;
                    }
                }
                Ok((Some(task), kept)) => {
                    lapsed = false;
                    if task.info.status.is_terminal() {
                        if kept != Some(ResultFor::This) {
                            return Err(SubagentError::new(DELIVERED_ELSEWHERE));
                        }
                        shared.answered_directly(&request.task_id);
                        let stored = task.whole_output_bytes;
                        let point = |text: String| match stored {
                            Some(bytes) => point_to_fleet(&text, &request.task_id, bytes),
                            None => text,
                        };
                        return match task.info.status {
                            AsyncTaskStatus::Completed => {
                                let mut output = task.info.output.unwrap_or_else(empty_output);
                                output.final_message = output.final_message.map(point);
                                Ok(output)
                            }
                            AsyncTaskStatus::Cancelled => {
                                Err(SubagentError::new(CANCELLED_IN_FLEET))
                            }
                            _ => Err(SubagentError::new(point(
                                task.info.error.unwrap_or_default(),
                            ))),
                        };
                    }
                    if task.progress != last_progress {
                        if let Some(line) = &task.progress {
                            request.progress.report(line);
                        }
                        last_progress = task.progress;
                    }
                }
                Ok((None, _)) => {
                    return Err(SubagentError::new(NO_LONGER_HELD));
                }
                Err(err) => shared.failed(&err).await,
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = wakes.changed() => {}
                () = progressed.notified() => {}
                message = steering.inbox.recv(), if steering.takes_more() => steering.take(message),
                () = tokio::time::sleep(MESSAGE_RETRY), if steering.unsent.is_some() => {}
                answered = next_answer(asks.as_mut()) => {
                    if let Some(asks) = asks.as_mut() {
                        asks.take(answered);
                    }
                }
            }
        }
        // Cancelled: by the model (asked of the fleet), or because the server
        // stopped serving (left to the fleet, its result to another front).
        // Either way the local task has ended already: this error is not shown.
        if !shared.closing.is_cancelled() {
            shared.answered_directly(&request.task_id);
            if !ask_to_cancel(shared, &request.task_id).await {
                // The model was told the task is cancelled: the request is
                // asked again, in the background, until written.
                tokio::spawn(ask_to_cancel_until_written(
                    Arc::clone(shared),
                    request.task_id.clone(),
                ));
            }
        }
        Err(SubagentError::new("cancelled"))
    }

    /// The workspace's limit and the front's queue bound, across the
    /// fleet: refused when the workspace already holds both's worth of
    /// tasks. An unreachable fleet admits (the submission then waits).
    async fn admit_background(&self) -> Result<(), QueueFull> {
        let Some(manager) = self.shared.manager.get() else {
            return Ok(());
        };
        let (own, max_queued) = (manager.counts().running, manager.max_queued_tasks());
        let workspace = &self.shared.workspace;
        let full = self
            .shared
            .on_fleet(async |fleet, front| {
                fleet
                    .queue_full(workspace, front.front_id, own, max_queued)
                    .await
            })
            .await;
        match full {
            Ok(None) => Ok(()),
            Ok(Some(full)) => Err(full),
            Err(err) => {
                self.shared.failed(&err).await;
                Ok(())
            }
        }
    }

    fn catalog(&self) -> Option<Vec<SubagentInfo>> {
        Some(
            self.shared
                .catalog
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// `statement`, or [`FleetError::Unreachable`] once it has gone unanswered
/// for [`STATEMENT_LIMIT`].
async fn limited<T>(
    statement: impl Future<Output = Result<T, FleetError>>,
) -> Result<T, FleetError> {
    tokio::time::timeout(STATEMENT_LIMIT, statement)
        .await
        .unwrap_or(Err(FleetError::Unreachable {
            after: STATEMENT_LIMIT,
        }))
}

/// Says that a statement went unanswered and its connection was dropped.
fn gave_up() {
    tracing::warn!(
        after_ms = STATEMENT_LIMIT.as_millis(),
        "the fleet's database does not answer: the connection is dropped, and made again"
    );
}

/// The next answer to a question being asked; never when none is.
async fn next_answer(asks: Option<&mut Asks>) -> Option<(i64, Answer)> {
    match asks {
        Some(asks) if asks.asking() => asks.next().await,
        _ => std::future::pending().await,
    }
}

/// The task `id`, and once it has ended, whether its result is `front`'s to
/// take ([`Fleet::result_for`]: read with the front's lease).
async fn read_task(
    fleet: &Fleet,
    front: &FrontLease,
    id: &str,
) -> Result<(Option<crate::FleetTask>, Option<ResultFor>), FleetError> {
    let task = fleet.task(id).await?;
    let kept = match &task {
        Some(task) if task.info.status.is_terminal() => fleet.result_for(front, id).await?,
        _ => None,
    };
    Ok((task, kept))
}

/// A run's entry among those waiting on progress, removed when it ends.
struct Waiting<'a> {
    shared: &'a Shared,
    id: String,
}

impl<'a> Waiting<'a> {
    fn new(shared: &'a Shared, id: &str, wake: Arc<Notify>) -> Self {
        shared
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.to_owned(), wake);
        Waiting {
            shared,
            id: id.to_owned(),
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.shared
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

/// The front registry's journal: it records nothing but deliveries, which it
/// hands to the front's loop to mark in the database (the tasks themselves
/// are the database's).
pub struct FrontJournal {
    marks: mpsc::UnboundedSender<String>,
}

impl fmt::Debug for FrontJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrontJournal").finish_non_exhaustive()
    }
}

impl Journal for FrontJournal {
    fn record(&self, entries: &[JournalEntry<'_>]) -> Result<(), JournalError> {
        for entry in entries {
            if let JournalEntry::Notified { id, .. } = entry {
                // The loop has ended only once the server has: nothing is
                // marked after, and the result is offered again.
                let _ = self.marks.send((*id).to_owned());
            }
        }
        Ok(())
    }
}

/// `text` whose last line points to the whole output in a file on the
/// worker's machine, pointing instead to where any machine of the fleet
/// reads it (the line keeps its form, so a cut result keeps it whole).
fn point_to_fleet(text: &str, id: &str, bytes: u64) -> String {
    match text.rsplit_once('\n') {
        Some((body, last)) if last.starts_with(WHOLE_OUTPUT_PREFIX) => {
            format!("{body}\n{}", fleet_output_line(id, bytes))
        }
        None if text.starts_with(WHOLE_OUTPUT_PREFIX) => fleet_output_line(id, bytes),
        _ => text.to_owned(),
    }
}

fn fleet_output_line(id: &str, bytes: u64) -> String {
    let stored = bytes.min(u64::try_from(MAX_STORED_OUTPUT_BYTES).unwrap_or(u64::MAX));
    format!(
        "{WHOLE_OUTPUT_PREFIX}`asynctask fleet output {id}` prints it on any machine of the \
         fleet ({bytes} bytes, the last {stored} of them stored)]"
    )
}

fn empty_output() -> OutputObject {
    OutputObject::new(asynctask_model::TerminateReason::Goal)
}

fn names(catalog: &[SubagentInfo]) -> String {
    if catalog.is_empty() {
        return "none (no live worker)".to_owned();
    }
    catalog
        .iter()
        .map(|info| info.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_errors_a_model_may_read_of_a_fleet_task() {
        let texts = [
            DELIVERED_ELSEWHERE.to_owned(),
            CANCELLED_IN_FLEET.to_owned(),
            CANCELLED_BEFORE_SUBMITTED.to_owned(),
            NO_LONGER_HELD.to_owned(),
            refused(&FleetError::NewerSchema {
                found: 3,
                supported: 2,
            }),
            refused(&FleetError::Empty("a subagent's name")),
            refused(&crate::check_name(&"w".repeat(8_100), "a workspace").expect_err("too long")),
            point_to_fleet(
                "1\n2\n... [9000 more characters cut]\n[whole output: /tmp/w/a1.out (23893 bytes)]",
                "a1",
                23_893,
            ),
            point_to_fleet("no pointer here", "a1", 5),
        ];
        insta::assert_snapshot!(texts.join("\n"));
    }
}
