//! Integration tests of `asynctask-runtime`: delivery (auto-trigger and next-turn),
//! reminder texts, settings, shutdown and todo continuation.

mod continuation;
mod delivery;
mod journal;
mod ledger;
mod reminders;
mod shutdown;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use asynctask_runtime::{AgentHost, Reminder, TriggerError};

/// A scripted host: busy or idle on demand, failing the next deliveries on
/// demand, recording every reminder it accepted (and checking that each one's
/// text reports exactly the tasks its ids name).
#[derive(Default)]
pub(crate) struct FakeHost {
    busy: AtomicBool,
    failures: Mutex<VecDeque<String>>,
    delivered: Mutex<Vec<Reminder>>,
    attempts: Mutex<usize>,
    /// When set, each delivery waits for a permit (holds the delivery in flight).
    gate: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
}

impl FakeHost {
    pub(crate) fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::SeqCst);
    }

    pub(crate) fn fail_next(&self, why: &str) {
        self.failures
            .lock()
            .expect("failures lock")
            .push_back(why.to_owned());
    }

    pub(crate) fn delivered(&self) -> Vec<Reminder> {
        self.delivered.lock().expect("delivered lock").clone()
    }

    /// The task ids of each accepted reminder, reminder by reminder.
    pub(crate) fn delivered_ids(&self) -> Vec<Vec<String>> {
        self.delivered()
            .into_iter()
            .map(|reminder| reminder.task_ids)
            .collect()
    }

    pub(crate) fn attempts(&self) -> usize {
        *self.attempts.lock().expect("attempts lock")
    }

    pub(crate) fn gate(&self) -> Arc<tokio::sync::Semaphore> {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        *self.gate.lock().expect("gate lock") = Some(Arc::clone(&gate));
        gate
    }
}

#[async_trait::async_trait]
impl AgentHost for FakeHost {
    fn is_agent_busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst)
    }

    async fn trigger_agent_turn(&self, reminder: Reminder) -> Result<(), TriggerError> {
        assert_eq!(
            reported_ids(&reminder.text),
            reminder.task_ids,
            "the text reports the tasks the reminder names"
        );
        *self.attempts.lock().expect("attempts lock") += 1;
        let gate = self.gate.lock().expect("gate lock").clone();
        if let Some(gate) = gate {
            gate.acquire().await.expect("gate open").forget();
        }
        if let Some(why) = self.failures.lock().expect("failures lock").pop_front() {
            return Err(TriggerError::new(why));
        }
        self.delivered
            .lock()
            .expect("delivered lock")
            .push(reminder);
        Ok(())
    }
}

/// The task ids a reminder text reports, in order (each completion carries its
/// `agent_id`).
fn reported_ids(text: &str) -> Vec<String> {
    text.split("\"agent_id\": \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// Lets spawned deliveries run (paused time advances only when all are idle).
pub(crate) async fn settle() {
    tokio::time::sleep(Duration::from_millis(5)).await;
}
