//! Races under real threads, each repeated many times: admission never exceeds the
//! limit, one transition wins, re-entrant handlers never deadlock, and no event is
//! lost or duplicated.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;

use asynctask_manager::{AsyncTaskManager, RegisterTaskInput, TaskEvent, check_invariants};
use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks, OutputObject, TerminateReason};
use pretty_assertions::assert_eq;

const ROUNDS: usize = 200;
const THREADS: usize = 8;

/// Runs `work(thread_index)` on `THREADS` threads released together.
fn race<T: Send + 'static>(work: impl Fn(usize) -> T + Send + Sync + 'static) -> Vec<T> {
    let work = Arc::new(work);
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (work, barrier) = (Arc::clone(&work), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                work(i)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("no thread panics"))
        .collect()
}

#[test]
fn concurrent_registration_never_exceeds_the_limit() {
    for round in 0..ROUNDS {
        let max = 1 + round % 4;
        let manager = AsyncTaskManager::new(MaxAsyncTasks::new(max as i64).unwrap());
        let shared = manager.clone();
        let admitted = race(move |i| {
            // Half register directly, half go through a reservation.
            if i % 2 == 0 {
                shared
                    .register_task(RegisterTaskInput::new(format!("t{i}"), "a", "g"))
                    .is_ok()
            } else {
                shared
                    .reserve()
                    .ok()
                    .map(|slot| slot.register(RegisterTaskInput::new(format!("t{i}"), "a", "g")))
                    .is_some_and(|r| r.is_ok())
            }
        });
        let admitted = admitted.into_iter().filter(|ok| *ok).count();
        assert_eq!(admitted, max, "round {round}");
        assert_eq!(manager.counts().running, max);
        check_invariants(&manager).unwrap();
    }
}

#[test]
fn concurrent_registration_of_one_id_has_one_winner() {
    for _ in 0..ROUNDS {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        let shared = manager.clone();
        let results = race(move |i| {
            shared
                .register_task(RegisterTaskInput::new("same", format!("agent{i}"), "g"))
                .ok()
        });
        let winners: Vec<_> = results.into_iter().flatten().collect();
        assert_eq!(winners.len(), 1);
        assert_eq!(manager.tasks(), winners);
    }
}

#[test]
fn concurrent_terminal_transitions_have_exactly_one_winner() {
    for _ in 0..ROUNDS {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::default());
        let events = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&events);
        let _s = manager.subscribe(move |e: &TaskEvent| log.lock().unwrap().push(e.clone()));
        manager
            .register_task(RegisterTaskInput::new("t", "a", "g"))
            .unwrap();
        let shared = manager.clone();
        let results = race(move |i| {
            let won = match i % 3 {
                0 => shared.complete_task("t", OutputObject::new(TerminateReason::Goal)),
                1 => shared.fail_task("t", format!("fail {i}")),
                _ => shared.cancel_task("t"),
            };
            (i, won)
        });
        let winners: Vec<usize> = results
            .iter()
            .filter(|(_, won)| *won)
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(winners.len(), 1, "exactly one transition wins");
        let winner = winners[0];
        let task = manager.task("t").unwrap();
        let expected_status = match winner % 3 {
            0 => AsyncTaskStatus::Completed,
            1 => AsyncTaskStatus::Failed,
            _ => AsyncTaskStatus::Cancelled,
        };
        assert_eq!(
            task.status(),
            expected_status,
            "the final state is the winner's"
        );
        if expected_status == AsyncTaskStatus::Failed {
            assert_eq!(task.error(), Some(format!("fail {winner}").as_str()));
        }
        let events = events.lock().unwrap();
        assert_eq!(events.len(), 1, "one event for one transition");
        assert_eq!(events[0].task(), &task);
    }
}

#[test]
fn reentrant_handlers_under_contention_never_deadlock_or_lose_events() {
    for _ in 0..ROUNDS / 4 {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let reentrant = manager.clone();
        let log = Arc::clone(&seen);
        let _s = manager.subscribe(move |event: &TaskEvent| {
            let id = event.task().id().to_owned();
            // Re-enter: query, mark, and finish the task's partner.
            let _ = reentrant.tasks();
            reentrant.mark_notified(&id);
            if let Some(partner) = id.strip_suffix("-a") {
                reentrant.cancel_task(&format!("{partner}-b"));
            }
            log.lock().unwrap().push(id);
        });
        for i in 0..THREADS {
            for suffix in ["a", "b"] {
                manager
                    .register_task(RegisterTaskInput::new(format!("{i}-{suffix}"), "x", "g"))
                    .unwrap();
            }
        }
        let shared = manager.clone();
        race(move |i| {
            shared.complete_task(&format!("{i}-a"), OutputObject::new(TerminateReason::Goal));
            // Race the handler for the partner.
            shared.fail_task(&format!("{i}-b"), "raced");
        });
        let seen = seen.lock().unwrap();
        let unique: BTreeSet<&String> = seen.iter().collect();
        assert_eq!(
            seen.len(),
            2 * THREADS,
            "one event per task, none lost: {seen:?}"
        );
        assert_eq!(unique.len(), 2 * THREADS, "none duplicated");
        assert!(manager.running_tasks().is_empty());
        assert!(manager.pending_notifications().is_empty());
        check_invariants(&manager).unwrap();
    }
}

#[test]
fn events_are_delivered_in_transition_order_across_threads() {
    for _ in 0..ROUNDS / 4 {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        // Record the transition order as seen under the lock (by completed order
        // the handler can observe) and the delivery order.
        let delivered = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&delivered);
        let _s = manager.subscribe(move |event: &TaskEvent| {
            log.lock().unwrap().push(event.task().id().to_owned());
        });
        let per_thread = 25;
        for t in 0..THREADS {
            for n in 0..per_thread {
                manager
                    .register_task(RegisterTaskInput::new(format!("{t}:{n}"), "x", "g"))
                    .unwrap();
            }
        }
        let shared = manager.clone();
        race(move |t| {
            for n in 0..per_thread {
                shared.cancel_task(&format!("{t}:{n}"));
            }
        });
        let delivered = delivered.lock().unwrap();
        assert_eq!(delivered.len(), THREADS * per_thread);
        // Within each thread, transitions happened in order n = 0, 1, 2, ...; the
        // global delivery order must respect each thread's order.
        for t in 0..THREADS {
            let mine: Vec<usize> = delivered
                .iter()
                .filter_map(|id| id.strip_prefix(&format!("{t}:")))
                .map(|n| n.parse().unwrap())
                .collect();
            assert_eq!(mine, (0..per_thread).collect::<Vec<_>>());
        }
    }
}

#[test]
fn pruning_under_contention_keeps_every_unnotified_task() {
    for _ in 0..ROUNDS / 4 {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::new(2).unwrap());
        let notified_total = Arc::new(AtomicUsize::new(0));
        let shared = manager.clone();
        let counter = Arc::clone(&notified_total);
        race(move |t| {
            for n in 0..20 {
                let id = format!("{t}/{n}");
                // The limit is tiny: retry until admitted.
                while shared
                    .register_task(RegisterTaskInput::new(id.clone(), "x", "g"))
                    .is_err()
                {
                    thread::yield_now();
                }
                shared.complete_task(&id, OutputObject::new(TerminateReason::Goal));
                // Every other task is left un-notified.
                if n % 2 == 0 && shared.mark_notified(&id) {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        let pending = manager.pending_notifications();
        assert_eq!(
            pending.len(),
            THREADS * 10,
            "no un-notified task was pruned"
        );
        assert_eq!(notified_total.load(Ordering::SeqCst), THREADS * 10);
        check_invariants(&manager).unwrap();
    }
}

#[test]
fn concurrent_launches_and_ends_fill_the_queue_exactly_and_start_it_in_order() {
    use asynctask_model::MaxQueuedTasks;
    for round in 0..ROUNDS {
        let max = 1 + round % 3;
        let max_queued = round % 4;
        let manager = AsyncTaskManager::new(MaxAsyncTasks::new(max as i64).unwrap());
        manager.set_max_queued_tasks(MaxQueuedTasks::new(max_queued as i64).unwrap());
        let starts = Arc::new(Mutex::new(Vec::new()));
        let _on_start = manager.on_task_started({
            let starts = Arc::clone(&starts);
            move |task| starts.lock().unwrap().push(task.id().to_owned())
        });
        let shared = manager.clone();
        // Each thread launches two tasks, then ends whatever runs.
        let admitted = race(move |i| {
            let mut admitted = 0;
            for n in 0..2 {
                if shared
                    .register_task(RegisterTaskInput::new(format!("t{i}-{n}"), "a", "g"))
                    .is_ok()
                {
                    admitted += 1;
                }
                check_invariants(&shared).unwrap();
            }
            while let Some(task) = shared.running_tasks().first().cloned() {
                shared.complete_task(task.id(), OutputObject::new(TerminateReason::Goal));
            }
            admitted
        });
        let admitted: usize = admitted.into_iter().sum();
        assert!(
            admitted >= max + max_queued,
            "round {round}: the first launches all fit"
        );
        let counts = manager.counts();
        assert_eq!(
            (counts.running, counts.queued),
            (0, 0),
            "round {round}: everything ran"
        );
        assert_eq!(counts.completed, admitted, "round {round}");
        // The tasks that started from the queue did so in the order they
        // were registered.
        let registered: Vec<String> = manager.tasks().iter().map(|t| t.id().to_owned()).collect();
        let starts = starts.lock().unwrap().clone();
        let mut in_order = starts.clone();
        in_order.sort_by_key(|id| registered.iter().position(|r| r == id));
        assert_eq!(starts, in_order, "round {round}");
        assert_eq!(
            starts.iter().collect::<BTreeSet<_>>().len(),
            starts.len(),
            "round {round}: each started once"
        );
        check_invariants(&manager).unwrap();
    }
}
