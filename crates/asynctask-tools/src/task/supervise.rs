//! Supervision of one subagent run: its own tokio task (so a panic is an
//! error), the timeout and cancel race, the grace period, and the guards that
//! leave no task `running` once its run has ended.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use asynctask_manager::{AsyncTaskManager, TaskProgress};
use asynctask_model::OutputObject;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::runner::{SubagentError, SubagentRequest, SubagentRunner};
use crate::render;

/// How long a cancelled runner (timed out, cancelled by the user, or abandoned by
/// its caller) may take to return on its own before its task is aborted.
pub(crate) const RUNNER_GRACE: Duration = Duration::from_secs(5);

/// One background run: everything it needs after `execute` has returned.
pub(super) struct Background {
    manager: AsyncTaskManager,
    /// The task's id.
    id: String,
    /// The runner, already started (by `launch`, or by a synchronous call that
    /// was detached).
    run: Run,
    /// The timeout in force, for the log.
    timeout: Duration,
    /// When the timeout passes, counted from the run's start.
    deadline: Instant,
    /// The timeout text, made while the tool's settings were at hand.
    timed_out: TimeoutText,
    /// Fails the task if the run is dropped (even before its first poll).
    ended: EndGuard,
}

impl Background {
    /// A background run of the registered task `id`, armed so that the task is
    /// failed if the run is dropped before it records an end.
    pub(super) fn new(
        manager: &AsyncTaskManager,
        id: &str,
        run: Run,
        timeout: Duration,
        deadline: Instant,
        timed_out: TimeoutText,
    ) -> Self {
        Background {
            ended: EndGuard {
                manager: manager.clone(),
                id: id.to_owned(),
                armed: true,
            },
            manager: manager.clone(),
            timed_out,
            id: id.to_owned(),
            timeout,
            deadline,
            run,
        }
    }

    /// Waits for the subagent's end and records it in the manager.
    ///
    /// Whatever happens — a result, an error, a panic, the timeout, a cancel —
    /// the task is terminal when this returns. If this future is dropped first
    /// (the runtime shut down), the task is failed on the way out.
    pub(super) async fn run(self) {
        let Background {
            manager,
            id,
            mut run,
            timeout,
            deadline,
            timed_out,
            ended,
        } = self;
        let token = run.token.clone();
        let mut outcome = run.outcome(deadline, &token).await;
        if matches!(outcome, RunEnd::Finished(_)) && token.is_cancelled() {
            // The runner answered a cancel (the host cancelled the task's token)
            // before this run saw it: the task was cancelled, whatever it returned.
            outcome = RunEnd::Cancelled;
        }
        match outcome {
            RunEnd::Finished(Ok(output)) => {
                tracing::debug!(terminate_reason = %output.terminate_reason, "async task completed");
                manager.complete_task(&id, output);
            }
            RunEnd::Finished(Err(err)) => {
                log_failure(&err);
                manager.fail_task(&id, err.message());
            }
            RunEnd::Panicked(message) | RunEnd::Aborted(message) => {
                tracing::warn!(error = %message, "async task failed");
                manager.fail_task(&id, message);
            }
            RunEnd::TimedOut => {
                tracing::warn!(timeout_secs = timeout.as_secs(), "async task timed out");
                // Fail first: the runner may answer the cancel with a result, and
                // the timeout must be what the model reads.
                manager.fail_task(&id, timed_out.text());
                run.stop().await;
            }
            RunEnd::Cancelled => {
                tracing::debug!("async task cancelled");
                // `false` when `cancel_task` got here first; either way it is
                // cancelled now.
                manager.cancel_task(&id);
                run.stop().await;
            }
        }
        ended.disarm();
    }
}

/// What a run that timed out fails with: the timeout's text, made when the run
/// started, and the run's progress, to name the file that holds its whole
/// output when its runner keeps one.
pub(super) struct TimeoutText {
    pub(super) message: String,
    pub(super) progress: TaskProgress,
}

impl TimeoutText {
    /// The text, now.
    pub(super) fn text(self) -> String {
        render::with_output_file(self.message, &self.progress)
    }
}

/// Fails the task if a background run is dropped before it recorded an end, so
/// no task is left `running` after its run is gone.
struct EndGuard {
    manager: AsyncTaskManager,
    id: String,
    armed: bool,
}

impl EndGuard {
    /// The run recorded its end: nothing to do on drop.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        if self.armed && self.manager.fail_task(&self.id, render::RUN_DROPPED) {
            tracing::warn!(task_id = %self.id, "async task dropped before it finished");
        }
    }
}

/// How a run ended, as far as the caller is concerned.
pub(super) enum RunEnd {
    /// The runner returned.
    Finished(Result<OutputObject, SubagentError>),
    /// The runner panicked: `subagent panicked: <payload>`.
    Panicked(String),
    /// The runner's task was aborted from outside (the runtime shut down).
    Aborted(String),
    /// The timeout passed first.
    TimedOut,
    /// The watched token was cancelled first.
    Cancelled,
}

/// A runner started on its own tokio task, so that a panic becomes a `JoinError`
/// and an overrun can be aborted.
///
/// Dropping a `Run` whose runner has not returned cancels its token and stops it
/// in the background (grace, then abort), so abandoning a call never leaks a
/// runner.
pub(super) struct Run {
    handle: Option<JoinHandle<Result<OutputObject, SubagentError>>>,
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Run {
    /// The token the runner watches.
    pub(super) fn token(&self) -> &CancellationToken {
        &self.token
    }

    pub(super) fn start(
        runner: Arc<dyn SubagentRunner>,
        request: SubagentRequest,
        token: CancellationToken,
        tracker: TaskTracker,
    ) -> Self {
        let runner_token = token.clone();
        let handle =
            tokio::spawn(async move { runner.run(request, runner_token).await }.in_current_span());
        Run {
            handle: Some(handle),
            token,
            tracker,
        }
    }

    /// Waits for the runner, the `deadline` or `cancel`, whichever comes first. A
    /// runner that has returned wins a tie.
    ///
    /// Cancel-safe: dropping the future leaves the runner running and the `Run`
    /// as it was, so the wait can be taken up again (or handed over).
    pub(super) async fn outcome(
        &mut self,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> RunEnd {
        let Some(handle) = self.handle.as_mut() else {
            return RunEnd::Aborted(render::RUN_ALREADY_STOPPED.to_owned());
        };
        let joined = tokio::select! {
            biased;
            joined = handle => joined,
            () = tokio::time::sleep_until(deadline) => return RunEnd::TimedOut,
            () = cancel.cancelled() => return RunEnd::Cancelled,
        };
        self.handle = None;
        match joined {
            Ok(result) => RunEnd::Finished(result),
            Err(err) if err.is_panic() => {
                RunEnd::Panicked(render::panicked(panic_message(err.into_panic().as_ref())))
            }
            Err(_) => RunEnd::Aborted(render::RUN_ABORTED.to_owned()),
        }
    }

    /// Cancels the runner's token, gives it [`RUNNER_GRACE`] to return, then
    /// aborts it; returns once the runner is gone.
    pub(super) async fn stop(mut self) {
        if let Some(handle) = self.handle.take() {
            self.token.cancel();
            stop_runner(handle).await;
        }
    }

    /// Like [`stop`](Self::stop), on the tracker, without waiting.
    pub(super) fn stop_in_background(mut self) {
        if let Some(handle) = self.handle.take() {
            self.token.cancel();
            self.tracker.spawn(stop_runner(handle).in_current_span());
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        self.token.cancel();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                self.tracker.spawn_on(stop_runner(handle), &runtime);
            }
            // No runtime to wait on: the runner gets no grace.
            Err(_) => handle.abort(),
        }
    }
}

/// Gives a cancelled runner [`RUNNER_GRACE`] to return, then aborts it and waits
/// until it is gone.
async fn stop_runner(mut handle: JoinHandle<Result<OutputObject, SubagentError>>) {
    if tokio::time::timeout(RUNNER_GRACE, &mut handle)
        .await
        .is_err()
    {
        tracing::warn!(
            grace_secs = RUNNER_GRACE.as_secs(),
            "subagent ignored cancellation; aborting it"
        );
        handle.abort();
        // The abort lands at the runner's next await; its result no longer matters.
        let _ = handle.await;
    }
}

/// An instant no timer in this process will reach (about 30 years ahead).
pub(super) fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

/// The text of a panic payload (`panic!` gives a `&str` or a `String`).
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "<non-string panic payload>"
    }
}

/// Logs a runner's error with every cause (the model reads only its message):
/// a failure with a cause (an I/O error, say) is a warning, one without is
/// how a subagent may end.
pub(super) fn log_failure(error: &SubagentError) {
    if std::error::Error::source(error).is_some() {
        tracing::warn!(error = %error.chain(), "subagent failed");
    } else {
        tracing::debug!(error = %error.chain(), "subagent failed");
    }
}
