//! Crashes at every journal step, and failed writes.
//!
//! A child process runs a seeded random sequence of operations on a manager
//! journaled to the store, printing each operation that returned; it is killed
//! (SIGKILL) at a chosen journal write — before the write, or just after it
//! committed — or by this process after a varying number of printed
//! operations. After each death the store is reopened and checked against
//! everything every child reported: nothing reported done is lost, no result
//! is marked delivered twice (or delivered again once its delivery was
//! journaled), tasks that were running come back as interrupted failures
//! naming the dead process, and the registry's invariants hold.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use asynctask_manager::{
    AsyncTaskManager, INTERRUPTED_ERROR, Journal, JournalEntry, JournalError, RegisterError,
    RegisterTaskInput, StoredTask, check_invariants,
};
use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus, ManualClock, MaxAsyncTasks};
use asynctask_store::Store;
use pretty_assertions::assert_eq;

use crate::ChildProcess;
use crate::child::{DIE_ENV, MAX, SEED_ENV, STEPS_ENV, STORE_ENV};
use crate::{error_of, output_of};

/// Everything the children reported, and what the store was seen to hold.
#[derive(Debug, Default)]
struct History {
    registered: BTreeSet<String>,
    finished: BTreeMap<String, String>,
    /// Delivery started: the task may be marked, and then pruned, unreported.
    delivering: BTreeSet<String>,
    /// Reported marked, with the run that marked it.
    notified: BTreeMap<String, u64>,
    /// Seen marked in the store: never to be delivered again.
    stored_notified: BTreeSet<String>,
    /// The terminal state each task was first seen in, which must never change.
    seen_terminal: BTreeMap<String, AsyncTaskInfo>,
    interrupted: usize,
    vanished: usize,
}

impl History {
    fn report(&mut self, run: u64, line: &str) {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["open"] | ["done"] => {}
            ["registered", id] => {
                self.registered.insert((*id).to_owned());
            }
            ["finished", id, status] => {
                let before = self.finished.insert((*id).to_owned(), (*status).to_owned());
                assert_eq!(before, None, "{id} finished twice");
            }
            ["delivering", id] => {
                assert!(
                    !self.stored_notified.contains(*id),
                    "run {run} delivers {id} again, after its delivery was journaled"
                );
                self.delivering.insert((*id).to_owned());
            }
            ["notified", id] => {
                let before = self.notified.insert((*id).to_owned(), run);
                assert_eq!(before, None, "run {run} marks {id} notified a second time");
            }
            other => panic!("unexpected line from the child: {other:?}"),
        }
    }

    /// Checks what the store holds after a child died, then restores it as
    /// the next process would (which turns running tasks into interrupted
    /// failures, journaled).
    fn check_store(&mut self, path: &Path, dead: u32) {
        let (store, stored) = Store::open(path).expect("the store opens after a crash");
        let by_id: BTreeMap<&str, &StoredTask> =
            stored.iter().map(|t| (t.info.id.as_str(), t)).collect();
        for id in &self.registered {
            if !by_id.contains_key(id.as_str()) {
                assert!(
                    self.delivering.contains(id),
                    "{id} vanished before its delivery started"
                );
                self.vanished += 1;
            }
        }
        for (id, status) in &self.finished {
            let Some(task) = by_id.get(id.as_str()) else {
                continue;
            };
            assert_eq!(
                task.info.status.as_str(),
                status,
                "{id} was reported {status}"
            );
            match task.info.status {
                AsyncTaskStatus::Completed => {
                    assert_eq!(task.info.output, Some(output_of(id)));
                }
                AsyncTaskStatus::Failed => {
                    assert_eq!(task.info.error, Some(error_of(id)));
                }
                _ => {}
            }
        }
        for id in self.notified.keys() {
            if let Some(task) = by_id.get(id.as_str()) {
                assert!(
                    task.info.notified_at.is_some(),
                    "{id} was reported notified"
                );
            }
        }
        let mut running = Vec::new();
        for task in &stored {
            let info = &task.info;
            if info.notified_at.is_some() {
                self.stored_notified.insert(info.id.clone());
            }
            if info.status == AsyncTaskStatus::Running {
                assert_eq!(
                    task.process,
                    Some(format!("pid {dead}")),
                    "only the dead child can have left {} running",
                    info.id
                );
                running.push(info.id.clone());
                continue;
            }
            match self.seen_terminal.get(&info.id) {
                None => {
                    self.seen_terminal.insert(info.id.clone(), info.clone());
                }
                Some(first) => {
                    let mut unmarked = info.clone();
                    unmarked.notified_at = first.notified_at.and(unmarked.notified_at);
                    assert_eq!(
                        &unmarked, first,
                        "a terminal task never changes but for its mark"
                    );
                    assert!(first.notified_at.is_none() || info.notified_at == first.notified_at);
                }
            }
        }
        let manager = AsyncTaskManager::restore(
            MaxAsyncTasks::new(MAX).expect("a valid limit"),
            Arc::new(ManualClock::new(u64::from(dead))),
            Arc::new(store) as Arc<dyn Journal>,
            stored,
        )
        .expect("the store holds a registry");
        check_invariants(&manager).expect("the restored registry keeps its invariants");
        for id in running {
            let task = manager.task(&id).expect("an interrupted task is kept");
            assert_eq!(task.status(), AsyncTaskStatus::Failed);
            assert_eq!(
                task.error(),
                Some(format!("{INTERRUPTED_ERROR} (pid {dead}, killed or crashed)").as_str())
            );
            assert!(task.is_pending_notification(), "{id} will be delivered");
            self.interrupted += 1;
        }
    }
}

/// Runs one child to its death and checks the store it left.
fn run_child(
    history: &mut History,
    path: &Path,
    run: u64,
    die: Option<String>,
    kill_after: Option<usize>,
) {
    let mut env = vec![
        (STORE_ENV, path.display().to_string()),
        (SEED_ENV, run.to_string()),
        (STEPS_ENV, "150".to_owned()),
    ];
    if let Some(die) = die {
        env.push((DIE_ENV, die));
    }
    let mut child = ChildProcess::start("script", &env);
    let pid = child.process.id();
    let mut printed = 0;
    while let Some(line) = child.next_line() {
        history.report(run, &line);
        printed += 1;
        if Some(printed) == kill_after {
            // It has run on meanwhile: what it printed before it died is
            // still in the pipe, and counts as reported.
            let _ = child.process.kill();
        }
    }
    child.kill();
    history.check_store(path, pid);
}

#[test]
fn a_crash_at_any_journal_step_loses_no_result_and_delivers_none_twice() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("tasks.db");
    let mut history = History::default();
    let mut run = 0;
    // At every journal write up to the 20th: just before it, and just after
    // it committed (journaled, but the manager never made it visible).
    for write in 1..=20 {
        for when in ["before", "after"] {
            run += 1;
            run_child(
                &mut history,
                &path,
                run,
                Some(format!("{write}:{when}")),
                None,
            );
        }
    }
    // Killed from outside, at varying points of its printed operations.
    for lines in (2..80).step_by(5) {
        run += 1;
        run_child(&mut history, &path, run, None, Some(lines));
    }
    // The scripts are long enough to reach every kind of step.
    assert!(history.notified.len() > 20, "{history:#?}");
    assert!(history.interrupted > 10, "{history:#?}");
    assert!(history.vanished > 5, "pruning ran: {history:#?}");
    assert!(history.finished.values().any(|s| s == "completed"));
}

/// A journal over a store that fails its Nth write: recording nothing, or —
/// with `recorded` — recording it and failing all the same (an `fsync` error
/// after the commit's data was written). A registration is never failed so:
/// the manager refuses it, and the store would hold a task nobody runs.
struct FailNth {
    store: Store,
    nth: u64,
    recorded: bool,
    writes: AtomicU64,
}

impl Journal for FailNth {
    fn record(&self, entries: &[JournalEntry<'_>]) -> Result<(), JournalError> {
        let fail = self.writes.fetch_add(1, Ordering::SeqCst) + 1 == self.nth;
        let registers = entries
            .iter()
            .any(|entry| matches!(entry, JournalEntry::Registered { .. }));
        if fail && !self.recorded {
            return Err(JournalError::new("injected: disk full"));
        }
        self.store.record(entries)?;
        if fail && !registers {
            return Err(JournalError::new("injected: fsync failed after the commit"));
        }
        Ok(())
    }
}

#[test]
fn a_failed_write_at_any_step_follows_the_failure_policy() {
    // The script makes nine writes; fail each of them in turn, both ways.
    for (nth, recorded) in (1..=9).flat_map(|nth| [(nth, false), (nth, true)]) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("tasks.db");
        let (store, _) = Store::open(&path).expect("a new store");
        let journal = Arc::new(FailNth {
            store,
            nth,
            recorded,
            writes: AtomicU64::new(0),
        });
        let clock = ManualClock::new(1_000);
        let manager = AsyncTaskManager::restore(
            MaxAsyncTasks::new(2).expect("a valid limit"),
            Arc::new(clock.clone()),
            Arc::clone(&journal) as Arc<dyn Journal>,
            Vec::new(),
        )
        .expect("an empty restore");
        let register =
            |id: &str| manager.register_task(RegisterTaskInput::new(id, "tester", "run"));
        let held = |id: &str| {
            journal
                .store
                .load()
                .expect("the store reads")
                .into_iter()
                .find(|t| t.info.id == id)
        };

        for (write, id) in [(1, "a"), (2, "b")] {
            match register(id) {
                Ok(_) => assert!(write != nth || recorded),
                Err(RegisterError::Journal(_)) => {
                    assert_eq!(write, nth);
                    assert_eq!(manager.task(id), None, "refused: nothing runs");
                    assert_eq!(held(id), None, "that the store does not know");
                    register(id).expect("the next attempt is journaled");
                }
                Err(other) => panic!("{other}"),
            }
        }
        let writes = || journal.writes.load(Ordering::SeqCst);
        let before = writes();
        assert!(
            manager.complete_task("a", output_of("a")),
            "applied even when its write fails"
        );
        assert!(manager.fail_task("b", error_of("b")));
        if (before + 1..=writes()).contains(&nth) {
            // No task keeps its slot: both of the limit's slots are free
            // (readers may still see a task whose end was not written as
            // running, until a write records it).
            let slots = (manager.reserve(), manager.reserve());
            assert!(slots.0.is_ok() && slots.1.is_ok(), "no task stays running");
        }
        let before = writes();
        assert!(
            manager.mark_notified("a"),
            "applied even when its write fails"
        );
        assert!(
            !manager
                .task("a")
                .expect("in the registry")
                .is_pending_notification(),
            "a delivered result is not offered again"
        );
        if before + 1 == nth {
            assert!(
                manager.has_journal_backlog(),
                "the next write carries the mark"
            );
        }
        let before = writes();
        if let Err(refused) = register("c") {
            assert!(matches!(refused, RegisterError::Journal(_)));
            assert_eq!(before + 1, nth);
            register("c").expect("the next attempt is journaled");
        }
        manager.cancel_task("c");
        // Deliver whatever is pending, again if need be (later).
        clock.advance(1_000);
        for _ in 0..2 {
            for task in manager.pending_notifications() {
                manager.mark_notified(task.id());
            }
        }
        assert!(manager.pending_notifications().is_empty());
        check_invariants(&manager).expect("invariants hold");
        // What the last writes missed is written by the retry a host runs
        // (`AsyncTaskRuntime` does, with backoff).
        manager.retry_journal().expect("the journal works again");
        // Every failed write was made good by a later one.
        let stored: Vec<AsyncTaskInfo> = journal
            .store
            .load()
            .expect("the store reads")
            .into_iter()
            .map(|t| t.info)
            .collect();
        assert_eq!(
            stored,
            manager.tasks(),
            "failing write {nth} (recorded: {recorded})"
        );
    }
}
