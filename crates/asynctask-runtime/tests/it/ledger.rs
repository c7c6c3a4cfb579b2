//! The claim ledger under real threads: owners claiming, acknowledging and
//! releasing while tasks finish, and every result acknowledged exactly once.

use std::sync::{Arc, Barrier, Mutex};
use std::thread;

use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
use asynctask_model::{MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_runtime::{ClaimLedger, ClaimOwner, RequestKey};
use pretty_assertions::assert_eq;

const TASKS: usize = 200;
const OWNERS: usize = 4;

#[test]
fn concurrent_owners_acknowledge_every_result_exactly_once() {
    for round in 0..20 {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        let ids: Vec<String> = (0..TASKS).map(|i| format!("task-{round}-{i:03}")).collect();
        for id in &ids {
            manager
                .register_task(RegisterTaskInput::new(id.clone(), "sub", "g"))
                .expect("unlimited");
        }
        let ledger = Arc::new(ClaimLedger::new(manager.clone()));
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let start = Arc::new(Barrier::new(OWNERS + 1));
        let finisher = {
            let (manager, ids, start) = (manager.clone(), ids.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                for (i, id) in ids.iter().enumerate() {
                    if i % 3 == 0 {
                        manager.cancel_task(id);
                    } else {
                        manager.complete_task(id, OutputObject::new(TerminateReason::Goal));
                    }
                }
            })
        };
        let owners: Vec<_> = (0..OWNERS)
            .map(|n| {
                let (ledger, acknowledged, start) = (
                    Arc::clone(&ledger),
                    Arc::clone(&acknowledged),
                    Arc::clone(&start),
                );
                thread::spawn(move || {
                    let owner = ClaimOwner::Request(RequestKey::new(format!("owner-{n}")));
                    start.wait();
                    for attempt in 0..400 {
                        let claimed = if n == 0 {
                            // Picks the even tasks, looking at the ledger as it
                            // does so (`pick` runs without the ledger's lock).
                            ledger.claim_matching(&owner, |task| {
                                !ledger.is_claimed(task.id())
                                    && task.id().ends_with(['0', '2', '4', '6', '8'])
                            })
                        } else {
                            ledger.claim(&owner)
                        };
                        if let Some(reminder) = claimed {
                            // Every other delivery "fails" and is released.
                            if (attempt + n) % 2 == 0 {
                                assert_eq!(ledger.release(&owner), reminder.task_ids);
                            } else if n == 1 {
                                // Acknowledged in two parts, by id.
                                let ids = reminder.task_ids;
                                let (first, rest) = ids.split_at(ids.len() / 2);
                                ledger.acknowledge_ids(&owner, first);
                                assert_eq!(ledger.held_by(&owner), rest);
                                ledger.acknowledge_ids(&owner, rest);
                                assert!(ledger.held_by(&owner).is_empty());
                                acknowledged.lock().expect("lock").extend(ids);
                            } else {
                                let ids = ledger.acknowledge(&owner);
                                assert_eq!(ids, reminder.task_ids);
                                acknowledged.lock().expect("lock").extend(ids);
                            }
                        }
                        thread::yield_now();
                    }
                })
            })
            .collect();
        finisher.join().expect("finisher");
        for owner in owners {
            owner.join().expect("owner");
        }
        // Whatever is left goes to one last owner.
        let last = ClaimOwner::NextTurn;
        if ledger.claim(&last).is_some() {
            acknowledged
                .lock()
                .expect("lock")
                .extend(ledger.acknowledge(&last));
        }
        let mut seen = acknowledged.lock().expect("lock").clone();
        seen.sort();
        assert_eq!(seen, ids, "round {round}: each result acknowledged once");
        assert!(manager.pending_notifications().is_empty());
    }
}

/// How many tasks a reminder says still run (`M async task(s) still running.`).
fn running_in(text: &str) -> usize {
    text.lines()
        .find_map(|line| line.strip_suffix(" async task(s) still running."))
        .map_or(0, |n| n.parse().expect("a count"))
}

#[test]
fn a_claim_counts_every_task_as_pending_or_running_while_tasks_finish() {
    const FEW: usize = 40;
    for round in 0..20 {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        let ids: Vec<String> = (0..FEW).map(|i| format!("task-{round}-{i:03}")).collect();
        for id in &ids {
            manager
                .register_task(RegisterTaskInput::new(id.clone(), "sub", "g"))
                .expect("unlimited");
        }
        let ledger = Arc::new(ClaimLedger::new(manager.clone()));
        let start = Arc::new(Barrier::new(2));
        let finisher = {
            let (manager, ids, start) = (manager.clone(), ids.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                for id in &ids {
                    manager.complete_task(id, OutputObject::new(TerminateReason::Goal));
                    thread::yield_now();
                }
            })
        };
        let owner = ClaimOwner::Request(RequestKey::new("looker"));
        start.wait();
        for _ in 0..200 {
            // Nothing is ever delivered: every task is either pending (and
            // claimed here) or still running, in one and the same reminder.
            if let Some(reminder) = ledger.claim(&owner) {
                assert_eq!(
                    reminder.task_ids.len() + running_in(&reminder.text),
                    FEW,
                    "round {round}: {} pending, {} running: {:?}",
                    reminder.task_ids.len(),
                    running_in(&reminder.text),
                    reminder.task_ids
                );
                ledger.release(&owner);
            }
            thread::yield_now();
        }
        finisher.join().expect("finisher");
    }
}
