//! What one run of a claimed task does on the worker's machine, beside the
//! serving loop: running the subagent under its timeout, reporting its
//! progress, reading its whole output, watching the lease.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use asynctask_manager::TaskProgress;
use asynctask_tools::{SubagentRequest, SubagentRunner};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::{PROGRESS_INTERVAL, RunEnd, STOP_GRACE};
use crate::types::ClaimedTask;

pub(super) fn outcome_name(outcome: &RunEnd) -> &'static str {
    match outcome {
        RunEnd::Completed(_) => "completed",
        RunEnd::Failed(_) => "failed",
        RunEnd::Cancelled => "cancelled",
    }
}

/// Whether the result's text ends with a pointer to the whole output (it
/// was cut): a file on this machine, which the fleet stores for the fronts.
pub(super) fn points_to_whole_output(outcome: &RunEnd) -> bool {
    let text = match outcome {
        RunEnd::Completed(output) => output.final_message.as_deref(),
        RunEnd::Failed(error) => Some(error.as_str()),
        RunEnd::Cancelled => None,
    };
    text.and_then(|text| text.lines().last())
        .is_some_and(|last| last.starts_with(asynctask_tools::WHOLE_OUTPUT_PREFIX))
}

/// The end of the file holding a task's whole output (at most
/// [`MAX_STORED_OUTPUT_BYTES`](crate::MAX_STORED_OUTPUT_BYTES) and a line,
/// read), and its length; `None` when it cannot be read.
pub(super) async fn read_whole_output(path: Option<std::path::PathBuf>) -> Option<(String, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let path = path?;
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<(String, u64)> {
        let mut file = std::fs::File::open(&path)?;
        let bytes = file.metadata()?.len();
        // Room for the note: what is stored stays within the bound.
        let keep = u64::try_from(crate::MAX_STORED_OUTPUT_BYTES - 64).unwrap_or(u64::MAX);
        let skipped = bytes.saturating_sub(keep);
        file.seek(SeekFrom::Start(skipped))?;
        let mut tail = Vec::new();
        file.take(keep).read_to_end(&mut tail)?;
        let text = String::from_utf8_lossy(&tail);
        if skipped == 0 {
            return Ok((text.into_owned(), bytes));
        }
        // Stored from a line boundary, after a note of what was left out.
        let (cut, rest) = match text.find('\n') {
            Some(at) => (at + 1, &text[at + 1..]),
            None => (0, text.as_ref()),
        };
        let left_out = skipped + u64::try_from(cut).unwrap_or(0);
        Ok((
            format!("[the first {left_out} bytes are not stored]\n{rest}"),
            bytes,
        ))
    });
    match read.await {
        Ok(Ok(whole)) => Some(whole),
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "the task's whole output cannot be read; not stored");
            None
        }
        Err(_) => None,
    }
}

/// Hands the task's last line of progress on when it changed, at most once
/// every [`PROGRESS_INTERVAL`], until aborted (the run ended).
pub(super) async fn report_progress(
    task: ClaimedTask,
    progress: TaskProgress,
    lines: mpsc::UnboundedSender<(ClaimedTask, String)>,
) {
    let mut last: Option<String> = None;
    let mut tick = tokio::time::interval(PROGRESS_INTERVAL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let line = progress.snapshot().last_line().map(str::to_owned);
        if line.is_some() && line != last {
            if lines
                .send((task.clone(), line.clone().unwrap_or_default()))
                .is_err()
            {
                return;
            }
            last = line;
        }
    }
}

/// Runs one request to its end, cancelling it at the timeout.
pub(super) async fn run_one(
    runner: Arc<dyn SubagentRunner>,
    request: SubagentRequest,
    cancel: CancellationToken,
    timeout: Duration,
    subagent: String,
) -> RunEnd {
    let run = runner.run(request, cancel.clone());
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => match result {
            Ok(output) => RunEnd::Completed(output),
            Err(err) => {
                // The model reads the message; the log keeps the whole chain.
                tracing::warn!(subagent = %subagent, error = %err.chain(), "the subagent failed");
                if cancel.is_cancelled() {
                    RunEnd::Failed(format!("Subagent '{subagent}' was cancelled: {}", err.message()))
                } else {
                    RunEnd::Failed(err.message().to_owned())
                }
            }
        },
        () = tokio::time::sleep(timeout) => {
            cancel.cancel();
            // The runner ends its subagent's processes on cancel; dropping the
            // run after the grace ends them too.
            let _ = tokio::time::timeout(STOP_GRACE, &mut run).await;
            RunEnd::Failed(format!(
                "Subagent '{subagent}' timed out after {} seconds",
                timeout.as_secs()
            ))
        }
    }
}

/// Cancels `lost` and ends the runner's subagents when the deadline passes
/// without a renewal.
pub(super) async fn watch_lease(
    deadline: Arc<Mutex<Instant>>,
    lost: CancellationToken,
    runner: Arc<dyn SubagentRunner>,
) {
    loop {
        let at = *deadline.lock().unwrap_or_else(PoisonError::into_inner);
        if Instant::now() >= at {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep_until(at) => {}
            () = lost.cancelled() => return,
        }
    }
    if !lost.is_cancelled() {
        lost.cancel();
        runner.terminate_all();
    }
}

/// Completes when `token` is cancelled; never when there is none.
pub(super) async fn cancelled(token: Option<&CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}
