//! The runtime on a journal: restored results are delivered at once, a
//! delivery the journal cannot record is not repeated (its mark is written
//! later), a result the journal missed waits for a retry that records it, and
//! tasks that are not a registry are refused at build.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use asynctask_manager::{
    INTERRUPTED_ERROR, Journal, JournalEntry, JournalError, RegisterTaskInput, RestoreError,
    StoredTask,
};
use asynctask_model::{AsyncTaskInfo, ManualClock, OutputObject, TerminateReason};
use asynctask_runtime::{AgentHost, AsyncTaskRuntime, BuildError};
use pretty_assertions::assert_eq;

use crate::{FakeHost, settle};

/// A journal that keeps only the ids it recorded as notified, and refuses
/// marks while `failing` (and terminal transitions while `failing_ends`).
#[derive(Default)]
struct Journaled {
    failing: AtomicBool,
    failing_ends: AtomicBool,
    notified: Mutex<Vec<String>>,
}

impl Journaled {
    /// The ids recorded as notified, in order.
    fn notified(&self) -> Vec<String> {
        self.notified.lock().expect("no panic").clone()
    }
}

impl Journal for Journaled {
    fn record(&self, entries: &[JournalEntry<'_>]) -> Result<(), JournalError> {
        let marks = entries
            .iter()
            .any(|entry| matches!(entry, JournalEntry::Notified { .. }));
        if marks && self.failing.load(Ordering::SeqCst) {
            return Err(JournalError::new("injected: disk full"));
        }
        let ends = entries
            .iter()
            .any(|entry| matches!(entry, JournalEntry::Finished { .. }));
        if ends && self.failing_ends.load(Ordering::SeqCst) {
            return Err(JournalError::new("injected: disk full"));
        }
        let mut notified = self.notified.lock().expect("no panic");
        for entry in entries {
            if let JournalEntry::Notified { id, .. } = entry {
                notified.push((*id).to_owned());
            }
        }
        Ok(())
    }
}

fn runtime_on(
    host: &Arc<FakeHost>,
    journal: &Arc<Journaled>,
    restored: Vec<StoredTask>,
) -> AsyncTaskRuntime {
    AsyncTaskRuntime::builder()
        .clock(Arc::new(ManualClock::new(50_000)))
        .host(Arc::clone(host) as Arc<dyn AgentHost>)
        .journal(Arc::clone(journal) as Arc<dyn Journal>, restored)
        .build()
}

#[tokio::test(start_paused = true)]
async fn restored_results_are_delivered_as_soon_as_the_runtime_is_built() {
    let mut finished = AsyncTaskInfo::new("c1", "researcher", "map the code", 1_000);
    finished.complete(OutputObject::new(TerminateReason::Goal), 2_000);
    let mut delivered = AsyncTaskInfo::new("d1", "researcher", "old news", 1_000);
    delivered.cancel(1_500);
    delivered.mark_notified(1_600);
    let restored = vec![
        StoredTask::new(AsyncTaskInfo::new("r1", "tester", "run the suite", 1_000))
            .with_process("pid 4242"),
        StoredTask::new(finished),
        StoredTask::new(delivered),
    ];
    let host = Arc::new(FakeHost::default());
    let runtime = runtime_on(&host, &Arc::new(Journaled::default()), restored);
    settle().await;
    let woken = host.delivered();
    assert_eq!(host.delivered_ids(), [["r1", "c1"]]);
    assert!(
        woken[0].text.contains(&format!(
            "{INTERRUPTED_ERROR} (pid 4242, killed or crashed)"
        )),
        "{}",
        woken[0].text
    );
    assert!(!runtime.reminders().has_pending_notifications());
    runtime.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_delivery_the_journal_cannot_record_is_not_repeated_and_its_mark_is_written_later() {
    let host = Arc::new(FakeHost::default());
    let journal = Arc::new(Journaled::default());
    journal.failing.store(true, Ordering::SeqCst);
    let runtime = runtime_on(&host, &journal, Vec::new());
    finish_one(&runtime, "a");
    settle().await;
    assert_eq!(host.delivered_ids(), [["a"]]);
    assert!(
        !runtime.reminders().has_pending_notifications(),
        "marked in memory all the same"
    );
    assert!(
        runtime.manager().has_journal_backlog(),
        "the mark waits for the journal"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(host.delivered_ids(), [["a"]], "delivered once, never again");
    assert_eq!(journal.notified(), Vec::<String>::new());

    // The journal recovers: the runtime's retries (at most 30 s apart) write
    // the mark, and nothing is delivered again.
    journal.failing.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(journal.notified(), ["a"]);
    assert!(!runtime.manager().has_journal_backlog());
    assert_eq!(host.delivered_ids(), [["a"]]);
    runtime.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_mark_the_journal_missed_is_written_ahead_of_the_next_change() {
    let host = Arc::new(FakeHost::default());
    let journal = Arc::new(Journaled::default());
    journal.failing.store(true, Ordering::SeqCst);
    let runtime = runtime_on(&host, &journal, Vec::new());
    finish_one(&runtime, "a");
    settle().await;
    journal.failing.store(false, Ordering::SeqCst);
    // Before the first retry is due (1 s), a registration writes first.
    runtime
        .manager()
        .register_task(RegisterTaskInput::new("b", "researcher", "goal"))
        .expect("admitted");
    assert_eq!(journal.notified(), ["a"]);
    assert!(!runtime.manager().has_journal_backlog());
    assert_eq!(host.delivered_ids(), [["a"]]);
    runtime.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_result_the_journal_missed_is_delivered_once_a_retry_records_it() {
    let host = Arc::new(FakeHost::default());
    let journal = Arc::new(Journaled::default());
    journal.failing_ends.store(true, Ordering::SeqCst);
    let runtime = runtime_on(&host, &journal, Vec::new());
    finish_one(&runtime, "a");
    settle().await;
    assert_eq!(host.attempts(), 0, "unrecorded: the store does not hold it");
    assert_eq!(
        host.attempts(),
        0,
        "retries (1 s, 2 s) failed: still unrecorded: {:?}",
        host.delivered_ids()
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        host.attempts(),
        0,
        "retries (1 s, 2 s) failed: still unrecorded"
    );

    journal.failing_ends.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        host.delivered_ids(),
        [["a"]],
        "the next retry (4 s) wrote it"
    );
    assert!(!runtime.reminders().has_pending_notifications());
    runtime.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_writes_a_result_the_journal_missed() {
    let host = Arc::new(FakeHost::default());
    let journal = Arc::new(Journaled::default());
    journal.failing_ends.store(true, Ordering::SeqCst);
    let runtime = runtime_on(&host, &journal, Vec::new());
    finish_one(&runtime, "a");
    settle().await;
    assert!(runtime.manager().has_journal_backlog(), "unrecorded");

    // The journal recovers before the first retry is due; the runtime shuts
    // down before it is.
    journal.failing_ends.store(false, Ordering::SeqCst);
    runtime.shutdown().await;
    assert!(
        !runtime.manager().has_journal_backlog(),
        "shutdown wrote the unrecorded result"
    );
    assert_eq!(host.attempts(), 0, "and delivered nothing after shutdown");
}

#[tokio::test]
async fn stored_tasks_that_are_not_a_registry_are_refused_at_build() {
    let task = StoredTask::new(AsyncTaskInfo::new("a", "r", "g", 0));
    let refused = AsyncTaskRuntime::builder()
        .journal(Arc::new(Journaled::default()), vec![task.clone(), task])
        .try_build()
        .expect_err("a repeated id");
    assert_eq!(
        refused,
        BuildError::Restore(RestoreError::DuplicateId("a".into()))
    );
    assert_eq!(refused.to_string(), "the stored tasks cannot be restored");
}

/// A runner that never runs anything, and records what it is told to forget.
#[derive(Default)]
struct Forgetful(std::sync::Mutex<Vec<String>>);

#[async_trait::async_trait]
impl asynctask_tools::SubagentRunner for Forgetful {
    async fn run(
        &self,
        _request: asynctask_tools::SubagentRequest,
        _cancel: tokio_util::sync::CancellationToken,
    ) -> Result<OutputObject, asynctask_tools::SubagentError> {
        Err(asynctask_tools::SubagentError::new("not in this test"))
    }

    fn forget(&self, task_id: &str) {
        self.0.lock().expect("no panic").push(task_id.to_owned());
    }
}

#[tokio::test(start_paused = true)]
async fn the_runner_forgets_what_the_restore_pruned() {
    // Five delivered tasks; a limit of 1 keeps a history of 2.
    let restored: Vec<StoredTask> = (1..=5u64)
        .map(|n| {
            let mut task = AsyncTaskInfo::new(format!("t{n}"), "tester", "g", 1_000);
            task.cancel(1_000 + n);
            task.mark_notified(2_000);
            StoredTask::new(task)
        })
        .collect();
    let runner = Arc::new(Forgetful::default());
    let runtime = AsyncTaskRuntime::builder()
        .clock(Arc::new(ManualClock::new(50_000)))
        .max_async_tasks(asynctask_model::MaxAsyncTasks::new(1).expect("valid"))
        .runner(Arc::clone(&runner) as Arc<dyn asynctask_tools::SubagentRunner>)
        .journal(Arc::new(Journaled::default()) as Arc<dyn Journal>, restored)
        .build();
    assert_eq!(*runner.0.lock().expect("no panic"), ["t1", "t2", "t3"]);
    let kept: Vec<String> = runtime
        .manager()
        .tasks()
        .into_iter()
        .map(|t| t.id().to_owned())
        .collect();
    assert_eq!(kept, ["t4", "t5"]);
    runtime.shutdown().await;
}

/// Registers task `id` and completes it.
fn finish_one(runtime: &AsyncTaskRuntime, id: &str) {
    let manager = runtime.manager();
    manager
        .register_task(RegisterTaskInput::new(id, "researcher", "goal"))
        .expect("admitted");
    manager.complete_task(id, OutputObject::new(TerminateReason::Goal));
}
