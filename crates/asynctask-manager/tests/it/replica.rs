//! `Replica`: a journal that replays what it is told into an in-memory copy of
//! the registry, as a store would, and can be told to fail its next write.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use asynctask_manager::{Journal, JournalEntry, JournalError, StoredTask};
use asynctask_model::AsyncTaskInfo;

/// What the replica records as each task's process.
pub(crate) const PROCESS: &str = "pid 42";

#[derive(Debug, Default)]
pub(crate) struct Replica {
    tasks: Mutex<Vec<StoredTask>>,
    /// Entries that did not fit the copy (a journal contract broken).
    problems: Mutex<Vec<String>>,
    fail_next: AtomicBool,
    writes: AtomicUsize,
}

impl Replica {
    /// A replica already holding `tasks` (what a store held at a restore).
    pub(crate) fn holding(tasks: Vec<StoredTask>) -> Self {
        Replica {
            tasks: Mutex::new(tasks),
            ..Replica::default()
        }
    }

    fn copy(&self) -> MutexGuard<'_, Vec<StoredTask>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the replica holds, in registration order.
    pub(crate) fn tasks(&self) -> Vec<StoredTask> {
        self.copy().clone()
    }

    pub(crate) fn infos(&self) -> Vec<AsyncTaskInfo> {
        self.copy().iter().map(|task| task.info.clone()).collect()
    }

    pub(crate) fn problems(&self) -> Vec<String> {
        self.problems
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Successful writes so far.
    pub(crate) fn writes(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }

    /// The next write fails (and records nothing).
    pub(crate) fn fail_next(&self) {
        self.fail_next.store(true, Ordering::SeqCst);
    }

    fn problem(&self, problem: String) {
        self.problems
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(problem);
    }
}

impl Journal for Replica {
    fn record(&self, entries: &[JournalEntry<'_>]) -> Result<(), JournalError> {
        if self.fail_next.swap(false, Ordering::SeqCst) {
            return Err(JournalError::new(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "injected: disk full",
            )));
        }
        let mut tasks = self.copy();
        for entry in entries {
            let index = tasks.iter().position(|task| task.info.id == entry.id());
            match (*entry, index) {
                (
                    JournalEntry::Registered {
                        id,
                        subagent_name,
                        goal_prompt,
                        launched_at,
                        origin,
                        queued,
                        launch,
                    },
                    None,
                ) => tasks.push(StoredTask {
                    info: if queued {
                        AsyncTaskInfo::queued(id, subagent_name, goal_prompt, launched_at)
                    } else {
                        AsyncTaskInfo::new(id, subagent_name, goal_prompt, launched_at)
                    },
                    origin: origin.map(str::to_owned),
                    finish_order: 0,
                    process: Some(PROCESS.to_owned()),
                    launch: launch.map(str::to_owned),
                }),
                (JournalEntry::Started { started_at, .. }, Some(i)) => {
                    if !tasks[i].info.start(started_at) {
                        self.problem(format!("{entry:?} refused by the model"));
                    }
                }
                (
                    JournalEntry::Finished {
                        outcome,
                        completed_at,
                        finish_order,
                        usage,
                        ..
                    },
                    Some(i),
                ) => {
                    let mut finished = tasks[i].info.clone();
                    if outcome.apply(&mut finished, completed_at) {
                        finished.usage = usage.cloned();
                        tasks[i].info = finished;
                        tasks[i].finish_order = finish_order;
                    } else if (
                        tasks[i].info.status,
                        tasks[i].info.completed_at,
                        tasks[i].finish_order,
                    ) != (outcome.status(), Some(completed_at), finish_order)
                    {
                        // Not a repeat of what it holds.
                        self.problem(format!("{entry:?} on a terminal task"));
                    }
                }
                (JournalEntry::Notified { notified_at, .. }, Some(i)) => {
                    let task = &mut tasks[i].info;
                    if task.notified_at.is_some() {
                        // A repeat: delivered again, so the later time.
                        task.notified_at = Some(notified_at);
                    } else if !task.mark_notified(notified_at) {
                        self.problem(format!("{entry:?} refused by the model"));
                    }
                }
                (JournalEntry::Removed { .. }, Some(i)) => {
                    if tasks[i].info.is_pending_notification()
                        || !tasks[i].info.status.is_terminal()
                    {
                        self.problem(format!("{entry:?} removes an undelivered task"));
                    }
                    tasks.remove(i);
                }
                // A repeated removal: already gone.
                (JournalEntry::Removed { .. }, None) => {}
                (entry, index) => self.problem(format!("{entry:?} with the task at {index:?}")),
            }
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}
