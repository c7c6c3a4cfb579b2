//! Asking the fleet to cancel a task the model cancelled: once, and again
//! in the background until it is written when the fleet cannot take it at
//! once.

use std::sync::Arc;
use std::time::Duration;

use super::{MAX_BACKOFF, Shared};
use crate::front::CancelRequest;

/// Asks the fleet to cancel task `id` ([`Fleet::request_cancel`](crate::Fleet::request_cancel)): whether
/// it was written (asked, cancelled while queued, or found ended already).
pub(super) async fn ask_to_cancel(shared: &Shared, id: &str) -> bool {
    let requested = shared
        .on_fleet(async |fleet, _| fleet.request_cancel(&shared.workspace, id).await)
        .await;
    match requested {
        Ok(CancelRequest::Requested) => {
            tracing::info!(task = %id, "asked the fleet to cancel");
            true
        }
        Ok(_) => true,
        Err(err) => {
            tracing::warn!(task = %id, error = %err.chain(), "could not cancel in the fleet yet: asking again");
            shared.failed(&err).await;
            false
        }
    }
}

/// Asks the fleet to cancel task `id` again, with backoff (up to
/// [`MAX_BACKOFF`]), until it is written or the task has ended, or the
/// server stops serving: a cancel the fleet could not take at once (its
/// database unreachable) is never silently lost while the worker's
/// subagent runs on.
pub(super) async fn ask_to_cancel_until_written(shared: Arc<Shared>, id: String) {
    let mut delay = Duration::from_millis(100);
    loop {
        tokio::select! {
            () = shared.closing.cancelled() => {
                tracing::warn!(task = %id, "stopped before the fleet took the cancel");
                return;
            }
            () = tokio::time::sleep(delay) => {}
        }
        if ask_to_cancel(&shared, &id).await {
            return;
        }
        delay = (delay * 2).min(MAX_BACKOFF);
    }
}
