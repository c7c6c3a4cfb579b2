//! A synchronous `task` call: the subagent runs while the caller waits,
//! unless sync-detach hands the run to the background.

use std::sync::Arc;

use asynctask_manager::{InboxSender, Questions, RegisterError, RegisterTaskInput, TaskProgress};
use asynctask_model::AsyncTaskInfo;
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::supervise::{Background, Run, RunEnd, TimeoutText, far_future};
use super::*;

impl TaskTool {
    /// Runs the subagent while the caller waits. Nothing is registered — unless
    /// sync-detach turns the run into a background task.
    pub(super) async fn run_sync(
        &self,
        request: SubagentRequest,
        inbox: Option<InboxSender>,
        cancel: &CancellationToken,
    ) -> ToolResult {
        let id = request.task_id.clone();
        let name = request.subagent_name.clone();
        let goal = request.goal_prompt.clone();
        let progress = request.progress.clone();
        let questions = request.questions.clone();
        let timeout = request.timeout;
        let started = Instant::now();
        // Saturating: a timeout beyond the clock's range never fires.
        let deadline = started.checked_add(timeout).unwrap_or_else(far_future);
        let mut task = AsyncTaskInfo::new(
            id.clone(),
            name.clone(),
            request.goal_prompt.clone(),
            self.now(),
        );
        // A run that may be detached gets a token of its own, not a child of the
        // call's: once detached it must outlive the call. Until then `outcome`
        // watches the call's token, and a cancelled or dropped call cancels the
        // runner's token on the way out (`stop_in_background`, `Run`'s drop).
        let token = match self.sync_detach {
            Some(_) => CancellationToken::new(),
            None => cancel.child_token(),
        };
        let mut run = Run::start(
            Arc::clone(&self.runner),
            request,
            token,
            self.tracker.clone(),
        );
        let detach_after = self.sync_detach.as_ref().map(|detach| detach.after);
        let mut detach_at = detach_after.and_then(|after| started.checked_add(after));
        let outcome = loop {
            let Some(at) = detach_at else {
                break run.outcome(deadline, cancel).await;
            };
            let waited = tokio::time::timeout_at(at, run.outcome(deadline, cancel)).await;
            match waited {
                Ok(outcome) => break outcome,
                Err(_) => {
                    let detach = Detach {
                        id: id.clone(),
                        name: name.clone(),
                        goal: goal.clone(),
                        progress: progress.clone(),
                        inbox: inbox.clone(),
                        questions: questions.clone(),
                        started,
                        deadline,
                    };
                    match self.detach(run, detach) {
                        Ok(result) => return result,
                        Err(back) => {
                            run = back;
                            detach_at =
                                detach_after.and_then(|after| Instant::now().checked_add(after));
                        }
                    }
                }
            }
        };
        // A runner still going (timed out, or the call was cancelled) is stopped
        // in the background: the caller gets its answer now, the runner its grace.
        run.stop_in_background();
        self.kept.done_with(&id);
        let now = self.now();
        // What the runner reported it used stays with the result, as a
        // background task's does.
        task.usage = progress.usage();
        let failed = |task: &mut AsyncTaskInfo, kind, message: String, display: String| {
            task.fail(message.clone(), now);
            tracing::debug!(task_id = %id, subagent = %name, error = %message, "subagent failed");
            ToolResult::failure(kind, message, completion_notification(task), display)
                .with_metadata(with_usage(
                    json!({ "agentId": id, "status": "failed" }),
                    task,
                ))
        };
        match outcome {
            RunEnd::Finished(Ok(output)) => {
                let display = format!(
                    "Subagent **{name}** finished (`{}`)",
                    output.terminate_reason
                );
                let metadata = json!({
                    "agentId": id,
                    "terminateReason": output.terminate_reason,
                    "emittedVars": output.emitted_vars,
                });
                task.complete(output, now);
                tracing::debug!(task_id = %id, subagent = %name, "subagent finished");
                let metadata = with_usage(metadata, &task);
                ToolResult::success(completion_notification(&task), display, metadata)
            }
            RunEnd::Finished(Err(err)) => {
                supervise::log_failure(&err);
                let display = format!("Subagent **{name}** failed: {}", err.message());
                failed(
                    &mut task,
                    ToolErrorType::ExecutionFailed,
                    err.message().to_owned(),
                    display,
                )
            }
            RunEnd::Panicked(message) => {
                let display = format!("Subagent **{name}** failed: {message}");
                failed(
                    &mut task,
                    ToolErrorType::UnhandledException,
                    message,
                    display,
                )
            }
            RunEnd::Aborted(message) => {
                let display = format!("Subagent **{name}** failed: {message}");
                failed(&mut task, ToolErrorType::ExecutionFailed, message, display)
            }
            RunEnd::TimedOut => {
                let message =
                    render::with_output_file(self.timeout_message(&name, timeout), &progress);
                let display = format!(
                    "Subagent **{name}** timed out after {} seconds",
                    timeout.as_secs()
                );
                failed(&mut task, ToolErrorType::Timeout, message, display)
            }
            RunEnd::Cancelled => {
                task.cancel(now);
                tracing::debug!(task_id = %id, subagent = %name, "subagent call cancelled");
                ToolResult::failure(
                    ToolErrorType::ExecutionFailed,
                    "cancelled",
                    completion_notification(&task),
                    format!("Subagent **{name}** was cancelled"),
                )
                .with_metadata(with_usage(
                    json!({ "agentId": id, "status": "cancelled" }),
                    &task,
                ))
            }
        }
    }

    /// Registers a synchronous run that overstayed the sync-detach time and hands
    /// it to the background. `Err` gives the run back when it cannot be
    /// registered (the limit is reached): the caller keeps waiting.
    fn detach(&self, run: Run, detach: Detach) -> Result<ToolResult, Run> {
        let Detach {
            id,
            name,
            goal,
            progress,
            inbox,
            questions,
            started,
            deadline,
        } = detach;
        let input = RegisterTaskInput::new(id.clone(), name.clone(), goal)
            .with_cancellation(run.token().clone())
            .with_progress(progress.clone());
        let input = with_questions(with_call_origin(with_inbox(input, inbox)), &questions);
        // Through a reservation: the run is going already, so it takes a
        // running slot or none (never a place in the queue).
        let registered = self
            .manager
            .reserve()
            .map_err(RegisterError::LimitReached)
            .and_then(|reservation| reservation.register(input));
        if let Err(err) = registered {
            tracing::debug!(task_id = %id, subagent = %name, reason = %err, "cannot detach the synchronous run yet; still waiting");
            return Err(run);
        }
        self.cancel_if_shutting_down(&id);
        let seconds = started.elapsed().as_secs();
        tracing::debug!(task_id = %id, subagent = %name, seconds, "synchronous run detached to the background");
        let span = tracing::info_span!("async_task", task_id = %id, subagent = %name);
        let timeout = deadline.saturating_duration_since(started);
        let timed_out = TimeoutText {
            message: self.timeout_message(&name, timeout),
            progress: progress.clone(),
        };
        let background = Background::new(&self.manager, &id, run, timeout, deadline, timed_out);
        self.tracker.spawn(background.run().instrument(span));
        let follow_up = self
            .sync_detach
            .as_ref()
            .map_or(SyncDetach::DEFAULT_FOLLOW_UP, |detach| &detach.follow_up);
        Ok(ToolResult::success(
            render::detached(&name, seconds, &id, follow_up),
            format!("Subagent **{name}** continues in the background (`{id}`)"),
            json!({ "agentId": id, "async": true, "status": "running", "detached": true }),
        ))
    }
}

/// What [`TaskTool::detach`] needs to know about the synchronous run.
struct Detach {
    id: String,
    name: String,
    goal: String,
    progress: TaskProgress,
    inbox: Option<InboxSender>,
    questions: Questions,
    started: Instant,
    deadline: Instant,
}
