//! Starting background runs: at launch, and for a queued task when the
//! manager starts it (a running slot freed, or the host let a restored queue
//! go).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use asynctask_manager::{
    AsyncTaskManager, Inbox, Questions, Subscription, TaskEvent, TaskProgress, TaskSnapshot,
};
use tokio::runtime::Handle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::runner::{SubagentRequest, SubagentRunner};
use super::supervise::{Background, Run, TimeoutText, far_future};
use crate::params::TaskTimeouts;
use crate::render;

/// Starts the runs of background tasks, and of queued tasks when they start.
pub(super) struct Starter {
    manager: AsyncTaskManager,
    runner: Arc<dyn SubagentRunner>,
    timeouts: TaskTimeouts,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// Where runs are spawned: a queued task may start on any thread (the
    /// one whose change freed its slot), inside a runtime or not.
    runtime: Handle,
    /// The requests of tasks launched in this process and not started yet,
    /// with their inboxes (which no store can keep); a task restored queued
    /// starts from the request it was journaled with.
    waiting: Mutex<HashMap<String, SubagentRequest>>,
}

impl Starter {
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub(super) fn new(
        manager: &AsyncTaskManager,
        runner: Arc<dyn SubagentRunner>,
        timeouts: TaskTimeouts,
        tracker: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        Starter {
            manager: manager.clone(),
            runner,
            timeouts,
            tracker,
            shutdown,
            runtime: Handle::current(),
            waiting: Mutex::new(HashMap::new()),
        }
    }

    /// Runs each queued task the manager starts, for as long as the returned
    /// subscription is held. (The subscription holds the starter, the starter
    /// the manager: dropping the subscription breaks the cycle.)
    pub(super) fn listen(starter: &Arc<Self>, manager: &AsyncTaskManager) -> Subscription {
        let starter = Arc::clone(starter);
        manager.subscribe(move |event| match event {
            TaskEvent::Started(task) => starter.started(task),
            // A queued task cancelled before it started: its request is not
            // needed any more.
            TaskEvent::Cancelled(task) | TaskEvent::Failed(task) => {
                drop(starter.take(task.id()));
            }
            _ => {}
        })
    }

    /// Keeps `request` until its task starts (or ends without starting).
    pub(super) fn keep(&self, request: SubagentRequest) {
        self.lock().insert(request.task_id.clone(), request);
    }

    /// The kept request of task `id`, if any is still kept.
    pub(super) fn take(&self, id: &str) -> Option<SubagentRequest> {
        self.lock().remove(id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, SubagentRequest>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A queued task started: run its subagent with the request it was
    /// launched with.
    fn started(&self, task: &TaskSnapshot) {
        let id = task.id();
        let request = match self.take(id) {
            Some(request) => request,
            None => match self.restored(task) {
                Ok(request) => request,
                Err(reason) => {
                    tracing::error!(task_id = %id, %reason, "cannot start a queued task");
                    self.manager
                        .fail_task(id, render::unstartable(task.subagent_name(), &reason));
                    return;
                }
            },
        };
        let Some(token) = self.manager.cancellation_token(id) else {
            // It ended (was cancelled) between its start and this handler.
            return;
        };
        if self.shutdown.is_cancelled() {
            self.manager.cancel_task(id);
        }
        tracing::debug!(task_id = %id, subagent = %task.subagent_name(), "queued task started");
        // Its span stands alone: it starts in the thread (and span) of
        // whatever freed its slot, which has nothing to do with it.
        let span = tracing::info_span!(parent: None, "async_task", task_id = %id, subagent = %task.subagent_name());
        self.spawn(request, token, span);
    }

    /// The request of a task restored queued, rebuilt from what it was
    /// launched with, with a fresh progress handle and inbox given to the
    /// manager.
    fn restored(&self, task: &TaskSnapshot) -> Result<SubagentRequest, String> {
        let launch = task
            .launch()
            .ok_or_else(|| "it was queued without its launch parameters".to_owned())?;
        let mut request: SubagentRequest = serde_json::from_str(launch)
            .map_err(|error| format!("its launch parameters cannot be read: {error}"))?;
        request.task_id = task.id().to_owned();
        request.run_async = true;
        request.timeout = request.timeout.min(self.timeouts.max);
        request.progress = TaskProgress::new();
        let sender = if self.runner.accepts_messages(&request.subagent_name) {
            let (sender, inbox) = Inbox::channel();
            request.inbox = inbox;
            Some(sender)
        } else {
            request.inbox = Inbox::closed();
            None
        };
        self.manager
            .attach(task.id(), Some(request.progress.clone()), sender);
        let (desk, questions) = Questions::channel();
        request.questions = questions;
        self.manager.attach_questions(task.id(), desk);
        Ok(request)
    }

    /// Starts the run of registered task `request.task_id`, watching `token`,
    /// its timeout counted from now, in `span`.
    pub(super) fn spawn(
        &self,
        request: SubagentRequest,
        token: CancellationToken,
        span: tracing::Span,
    ) {
        let id = request.task_id.clone();
        let name = request.subagent_name.clone();
        let timeout = request.timeout;
        let timed_out = TimeoutText {
            message: render::timed_out(&name, timeout, self.timeouts.max),
            progress: request.progress.clone(),
        };
        let _entered = self.runtime.enter();
        let run = span.in_scope(|| {
            Run::start(
                Arc::clone(&self.runner),
                request,
                token,
                self.tracker.clone(),
            )
        });
        // Saturating: a timeout beyond the clock's range never fires.
        let deadline = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(far_future);
        let background = Background::new(&self.manager, &id, run, timeout, deadline, timed_out);
        self.tracker
            .spawn_on(background.run().instrument(span), &self.runtime);
    }
}
