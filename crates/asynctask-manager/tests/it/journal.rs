//! The journal hook: what is journaled, the failure policy, and restoring.

use std::error::Error;
use std::sync::Arc;

use asynctask_manager::{
    AsyncTaskManager, Journal, JournalEntry, JournalError, PrefixMatch, RegisterError,
    RestoreError, StoredTask, TaskProgress, check_invariants,
};
use asynctask_model::{
    AsyncTaskInfo, AsyncTaskStatus, ManualClock, MaxAsyncTasks, OutputObject, TaskUsage,
    TerminateReason,
};
use pretty_assertions::assert_eq;

use crate::input;
use crate::replica::Replica;

/// A journaled manager on a manual clock at 1,000 ms, over an empty replica.
fn journaled(max: i64) -> (AsyncTaskManager, Arc<Replica>, ManualClock) {
    let replica = Arc::new(Replica::default());
    let clock = ManualClock::new(1_000);
    let manager = AsyncTaskManager::restore(
        MaxAsyncTasks::new(max).expect("test limits are valid"),
        Arc::new(clock.clone()),
        Arc::clone(&replica) as Arc<dyn Journal>,
        Vec::new(),
    )
    .expect("an empty restore");
    (manager, replica, clock)
}

/// Restores a new manager from what `replica` holds, at `now`.
fn restart(replica: &Arc<Replica>, max: i64, now: u64) -> AsyncTaskManager {
    AsyncTaskManager::restore(
        MaxAsyncTasks::new(max).expect("test limits are valid"),
        Arc::new(ManualClock::new(now)),
        Arc::clone(replica) as Arc<dyn Journal>,
        replica.tasks(),
    )
    .expect("the replica holds a registry")
}

fn goal() -> OutputObject {
    OutputObject::new(TerminateReason::Goal)
        .with_var("answer", "42")
        .with_final_message("done")
}

fn the_injected_error(error: &JournalError) -> bool {
    error
        .source()
        .is_some_and(|source| source.to_string() == "injected: disk full")
}

#[test]
fn every_change_is_journaled_before_readers_see_it() {
    let (manager, replica, clock) = journaled(1); // history 2
    manager
        .register_task(input("a").with_origin("session-1"))
        .unwrap();
    assert_eq!(replica.infos(), manager.tasks());
    clock.advance(10);
    manager.complete_task("a", goal());
    manager.mark_notified("a");
    for id in ["b", "c"] {
        manager.register_task(input(id)).unwrap();
        clock.advance(10);
        manager.fail_task(id, "boom");
        manager.mark_notified(id);
    }
    // "a" was pruned when "c" was notified, in the same change.
    assert_eq!(replica.infos(), manager.tasks());
    assert_eq!(
        manager.tasks().iter().map(|t| t.id()).collect::<Vec<_>>(),
        ["b", "c"]
    );
    assert_eq!(replica.writes(), 9);
    assert_eq!(replica.problems(), Vec::<String>::new());
}

#[test]
fn a_registration_the_journal_cannot_record_is_refused_with_its_source() {
    let (manager, replica, _) = journaled(2);
    replica.fail_next();
    let refused = manager.register_task(input("a")).unwrap_err();
    let RegisterError::Journal(error) = &refused else {
        panic!("expected a journal error, got {refused:?}");
    };
    assert!(the_injected_error(error), "{}", error.chain());
    assert_eq!(
        refused.to_string(),
        "the task store could not record the task, so it was not started"
    );
    assert!(refused.source().is_some(), "the source is kept");
    assert_eq!(manager.tasks(), Vec::<AsyncTaskInfo>::new());
    assert_eq!(replica.tasks(), Vec::<StoredTask>::new());

    // A reservation spent on a refused registration frees its slot.
    let slot = manager.reserve().unwrap();
    replica.fail_next();
    assert!(matches!(
        slot.register(input("a")),
        Err(RegisterError::Journal(_))
    ));
    assert_eq!(manager.counts().reserved, 0);
    manager.register_task(input("a")).unwrap();
    manager.register_task(input("b")).unwrap();
    check_invariants(&manager).unwrap();
}

#[test]
fn a_mark_the_journal_cannot_record_is_applied_and_written_with_the_next_change() {
    let (manager, replica, clock) = journaled(1); // history 2
    for id in ["a", "b", "c", "d"] {
        manager.register_task(input(id)).unwrap();
        manager.complete_task(id, goal());
    }
    let pending = || -> Vec<String> {
        manager
            .pending_notifications()
            .into_iter()
            .map(|t| t.id().to_owned())
            .collect()
    };
    // Four undelivered results over a history of two: marking "a" also prunes
    // it at once. The write fails; both happen in memory all the same, so the
    // delivered result is not offered again.
    clock.advance(5);
    replica.fail_next();
    let error = manager.try_mark_notified("a").unwrap_err();
    assert!(the_injected_error(&error), "{}", error.chain());
    assert_eq!(pending(), ["b", "c", "d"]);
    assert_eq!(manager.task("a"), None, "marked, then pruned");
    assert!(manager.has_journal_backlog());
    assert_eq!(replica.tasks().len(), 4, "the store missed both");
    check_invariants(&manager).unwrap();

    // Every way of marking says it marked.
    replica.fail_next();
    assert!(manager.mark_notified("b"), "the plain call says true");
    replica.fail_next();
    assert_eq!(manager.mark_all_notified(&["c", "nope"]), 1);
    assert_eq!(pending(), ["d"]);
    assert_eq!(replica.tasks().len(), 4);
    check_invariants(&manager).unwrap();

    // The next write carries what the store missed, in order, then its own
    // change.
    let writes = replica.writes();
    assert_eq!(manager.try_mark_notified("d"), Ok(true));
    assert_eq!(replica.writes(), writes + 1, "in one write");
    assert!(!manager.has_journal_backlog());
    assert_eq!(replica.infos(), manager.tasks());
    assert_eq!(replica.problems(), Vec::<String>::new());
    check_invariants(&manager).unwrap();
}

#[test]
fn a_mark_the_journal_never_recorded_is_delivered_again_after_a_restart() {
    let (manager, replica, _) = journaled(2); // history 4: nothing pruned
    manager.register_task(input("a")).unwrap();
    manager.complete_task("a", goal());
    replica.fail_next();
    assert!(manager.mark_notified("a"));
    assert!(manager.pending_notifications().is_empty());
    // The process ends before any write catches up: the store still holds the
    // result undelivered, so the next process delivers it again.
    drop(manager);
    let restored = restart(&replica, 2, 9_000);
    let a = restored.task("a").unwrap();
    assert_eq!(
        (a.status(), a.notified_at()),
        (AsyncTaskStatus::Completed, None)
    );
    assert_eq!(restored.pending_notifications(), [a]);
    assert!(restored.mark_notified("a"));
    assert_eq!(replica.infos(), restored.tasks());
}

#[test]
fn a_terminal_transition_the_journal_cannot_record_is_applied_but_kept_from_delivery() {
    let (manager, replica, clock) = journaled(2);
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let _subscription = manager.subscribe({
        let events = Arc::clone(&events);
        move |event| events.lock().unwrap().push(event.task().id().to_owned())
    });
    manager.register_task(input("a")).unwrap();
    replica.fail_next();
    clock.advance(50);
    assert!(manager.complete_task("a", goal()), "applied in memory");
    // Readers see it running, with nothing of its result: the store does not
    // hold the result, so nothing may show it.
    let seen = manager.task("a").unwrap();
    assert_eq!(seen.status(), AsyncTaskStatus::Running);
    assert_eq!((seen.completed_at(), &seen.output()), (None, &None));
    assert_eq!(manager.tasks(), std::slice::from_ref(&seen));
    assert_eq!(manager.running_tasks(), std::slice::from_ref(&seen));
    let counts = manager.counts();
    assert_eq!((counts.running, counts.completed), (1, 0));
    // Its slot is free: both slots of the limit of 2 can be reserved.
    let slots = (manager.reserve().unwrap(), manager.reserve().unwrap());
    assert!(
        manager.can_launch_async().is_err(),
        "two reservations fill the limit"
    );
    drop(slots);
    assert_eq!(
        replica.infos()[0].status,
        AsyncTaskStatus::Running,
        "the store never heard"
    );
    // The store does not hold the result: nothing may deliver it yet.
    assert!(manager.pending_notifications().is_empty());
    assert_eq!(manager.counts().pending_notifications, 0);
    assert_eq!(manager.try_mark_notified("a"), Ok(false));
    assert!(events.lock().unwrap().is_empty(), "its event waits too");
    assert!(manager.has_journal_backlog());
    check_invariants(&manager).unwrap();

    drop(manager);
    let restored = restart(&replica, 2, 5_000);
    let task = restored.task("a").unwrap();
    assert_eq!(task.status(), AsyncTaskStatus::Failed);
    assert_eq!(
        task.error(),
        Some(
            "interrupted: the process running this task ended before it finished \
             (pid 42, killed or crashed)"
        )
    );
    assert_eq!(task.completed_at(), Some(5_000));
    assert!(task.is_pending_notification());
    assert_eq!(
        replica.infos(),
        restored.tasks(),
        "the interruption is journaled"
    );
}

#[tokio::test]
async fn an_unrecorded_result_is_released_once_a_retry_writes_it() {
    let (manager, replica, _clock) = journaled(2);
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let _subscription = manager.subscribe({
        let events = Arc::clone(&events);
        move |event| events.lock().unwrap().push(event.task().id().to_owned())
    });
    manager.register_task(input("a")).unwrap();
    replica.fail_next();
    assert!(manager.complete_task("a", goal()));
    // The failure is signalled to whoever retries, even if it waits later.
    tokio::time::timeout(std::time::Duration::from_secs(5), manager.journal_failed())
        .await
        .expect("signalled");
    replica.fail_next();
    assert!(
        manager.retry_journal().is_err(),
        "still failing: still unrecorded"
    );
    assert!(manager.pending_notifications().is_empty());
    assert_eq!(manager.retry_journal(), Ok(true));
    assert_eq!(
        manager
            .pending_notifications()
            .into_iter()
            .map(|task| task.id().to_owned())
            .collect::<Vec<_>>(),
        ["a"]
    );
    assert_eq!(
        *events.lock().unwrap(),
        ["a"],
        "announced once, when released"
    );
    assert_eq!(replica.infos(), manager.tasks());
    assert_eq!(manager.retry_journal(), Ok(false), "nothing waits any more");
    assert!(manager.mark_notified("a"));
    check_invariants(&manager).unwrap();
}

#[test]
fn a_transition_the_journal_missed_is_written_again_ahead_of_the_next_change() {
    let (manager, replica, clock) = journaled(1); // history 2
    for id in ["a", "b"] {
        manager.register_task(input(id)).unwrap();
        manager.cancel_task(id);
        manager.mark_notified(id);
    }
    manager.register_task(input("c")).unwrap();
    clock.advance(5);
    // Completing "c" prunes "a"; the write fails, so the store misses both,
    // and "c" is unrecorded: kept from delivery.
    replica.fail_next();
    assert!(manager.complete_task("c", goal()));
    assert_eq!(replica.tasks().len(), 3);
    assert!(
        !manager.mark_notified("c"),
        "an unrecorded result cannot be marked"
    );
    // The next change fails too: still missed, still unrecorded.
    replica.fail_next();
    assert!(manager.register_task(input("d")).is_err());
    assert_eq!(replica.tasks().len(), 3);
    assert!(manager.pending_notifications().is_empty());
    check_invariants(&manager).unwrap();
    // The next write carries what the store missed, then its own change.
    manager.register_task(input("d")).unwrap();
    assert_eq!(manager.pending_notifications().len(), 1, "c is released");
    assert!(manager.mark_notified("c"));
    assert_eq!(replica.infos(), manager.tasks());
    assert_eq!(replica.problems(), Vec::<String>::new());
    check_invariants(&manager).unwrap();
}

#[test]
fn pruning_by_a_lowered_limit_is_journaled_and_applied_even_when_the_write_fails() {
    let (manager, replica, _) = journaled(3); // history 6
    for id in ["a", "b", "c", "d"] {
        manager.register_task(input(id)).unwrap();
        manager.cancel_task(id);
        manager.mark_notified(id);
    }
    manager.set_max_async_tasks(MaxAsyncTasks::new(1).unwrap()); // history 2
    assert_eq!(replica.infos(), manager.tasks());
    assert_eq!(manager.tasks().len(), 2);

    manager.set_max_async_tasks(MaxAsyncTasks::new(3).unwrap());
    for id in ["e", "f"] {
        manager.register_task(input(id)).unwrap();
        manager.cancel_task(id);
        manager.mark_notified(id);
    }
    replica.fail_next();
    manager.set_max_async_tasks(MaxAsyncTasks::new(1).unwrap());
    assert_eq!(manager.tasks().len(), 2, "the limit holds in memory");
    assert_eq!(replica.tasks().len(), 4, "the store still has them");
    // A restore prunes the store again.
    let restored = restart(&replica, 1, 9_000);
    assert_eq!(restored.tasks(), manager.tasks());
    assert_eq!(replica.infos(), manager.tasks());
    drop(restored);

    // So does the next change, when the process goes on.
    let (manager, replica, _) = journaled(3);
    for id in ["a", "b", "c"] {
        manager.register_task(input(id)).unwrap();
        manager.cancel_task(id);
        manager.mark_notified(id);
    }
    replica.fail_next();
    manager.set_max_async_tasks(MaxAsyncTasks::new(1).unwrap());
    assert_eq!(replica.tasks().len(), 3);
    manager.register_task(input("d")).unwrap();
    assert_eq!(replica.infos(), manager.tasks());
    assert_eq!(replica.problems(), Vec::<String>::new());
}

/// A journal that panics.
struct Panicking;

impl Journal for Panicking {
    fn record(&self, _: &[JournalEntry<'_>]) -> Result<(), JournalError> {
        panic!("the disk is on fire");
    }
}

#[test]
fn a_panicking_journal_is_a_failed_write() {
    let manager = AsyncTaskManager::restore(
        MaxAsyncTasks::default(),
        Arc::new(ManualClock::new(0)),
        Arc::new(Panicking),
        Vec::new(),
    )
    .unwrap();
    let Err(RegisterError::Journal(error)) = manager.register_task(input("a")) else {
        panic!("a panicking journal refuses registrations");
    };
    assert_eq!(
        error.chain(),
        "the task journal could not record a change: the journal panicked: the disk is on fire"
    );
    assert_eq!(manager.counts().total(), 0);
    check_invariants(&manager).unwrap();
}

fn completed(id: &str, at: u64) -> AsyncTaskInfo {
    let mut task = AsyncTaskInfo::new(id, "researcher", format!("goal of {id}"), at - 100);
    task.complete(goal(), at);
    task
}

fn nowhere() -> Arc<dyn Journal> {
    Arc::new(Replica::default())
}

#[test]
fn restore_rebuilds_every_index_and_fails_running_tasks_as_interrupted() {
    let mut notified = completed("n", 2_000);
    notified.mark_notified(2_500);
    let stored = vec![
        StoredTask::new(AsyncTaskInfo::new("r1", "tester", "run", 1_000)).with_origin("session-2"),
        StoredTask::new(completed("c", 3_000)).with_finish_order(7),
        StoredTask::new(notified).with_finish_order(3),
        StoredTask::new(AsyncTaskInfo::new("r2", "tester", "run", 1_500)).with_process("pid 77"),
    ];
    let replica = Arc::new(Replica::holding(stored.clone()));
    let manager = AsyncTaskManager::restore(
        MaxAsyncTasks::new(2).unwrap(),
        Arc::new(ManualClock::new(10_000)),
        Arc::clone(&replica) as Arc<dyn Journal>,
        stored,
    )
    .unwrap();
    check_invariants(&manager).unwrap();
    let r1 = manager.task("r1").unwrap();
    assert_eq!(
        r1.error(),
        Some(
            "interrupted: the process running this task ended before it finished (killed or crashed)"
        )
    );
    assert_eq!(
        manager.task("r2").unwrap().error(),
        Some(
            "interrupted: the process running this task ended before it finished \
             (pid 77, killed or crashed)"
        )
    );
    assert_eq!(manager.origin("r1").as_deref(), Some("session-2"));
    let pending: Vec<String> = manager
        .pending_notifications()
        .into_iter()
        .map(|t| t.id().to_owned())
        .collect();
    assert_eq!(pending, ["r1", "c", "r2"], "in registration order");
    assert_eq!(manager.counts().running, 0);
    assert_eq!(manager.can_launch_async(), Ok(()));
    assert!(matches!(
        manager.find_by_prefix("r"),
        PrefixMatch::Ambiguous(candidates) if candidates.len() == 2
    ));
    // The two interruptions were journaled as one change, ending after every
    // stored task.
    assert_eq!(replica.writes(), 1);
    assert_eq!(replica.problems(), Vec::<String>::new());
    assert_eq!(replica.infos(), manager.tasks());
    let orders: Vec<(String, u64)> = replica
        .tasks()
        .into_iter()
        .map(|t| (t.info.id, t.finish_order))
        .collect();
    assert_eq!(
        orders,
        [
            ("r1".to_owned(), 8),
            ("c".to_owned(), 7),
            ("n".to_owned(), 3),
            ("r2".to_owned(), 9)
        ]
    );
}

#[test]
fn restore_prunes_the_oldest_notified_tasks_beyond_the_history_and_journals_it() {
    // Four notified tasks, two of them ending in the same millisecond: the
    // finish order breaks the tie; equal finish orders fall back to
    // registration order.
    let notified = |id: &str, at: u64| {
        let mut task = completed(id, at);
        task.mark_notified(at + 1);
        task
    };
    let stored = vec![
        StoredTask::new(notified("late", 5_000)).with_finish_order(4),
        StoredTask::new(notified("tie-second", 2_000)).with_finish_order(3),
        StoredTask::new(notified("tie-first", 2_000)).with_finish_order(2),
        StoredTask::new(notified("x", 3_000)),
        StoredTask::new(notified("y", 3_000)),
        StoredTask::new(AsyncTaskInfo::new("running", "r", "g", 1_000)),
    ];
    let replica = Arc::new(Replica::holding(stored.clone()));
    let manager = AsyncTaskManager::restore(
        MaxAsyncTasks::new(1).unwrap(), // history 2
        Arc::new(ManualClock::new(9_000)),
        Arc::clone(&replica) as Arc<dyn Journal>,
        stored,
    )
    .unwrap();
    let ids: Vec<String> = manager
        .tasks()
        .into_iter()
        .map(|t| t.id().to_owned())
        .collect();
    assert_eq!(ids, ["late", "running"], "the pending one is never pruned");
    assert_eq!(replica.infos(), manager.tasks());
    assert_eq!(replica.problems(), Vec::<String>::new());
    check_invariants(&manager).unwrap();

    // New finishes order after every restored one, in memory and in the
    // store: they are journaled above every stored finish order.
    let restored_ties = vec![
        StoredTask::new(notified("p", 2_000)).with_finish_order(9),
        StoredTask::new(notified("q", 2_000)).with_finish_order(1),
    ];
    let replica = Arc::new(Replica::holding(restored_ties.clone()));
    let clock = ManualClock::new(2_000);
    let manager = AsyncTaskManager::restore(
        MaxAsyncTasks::new(2).unwrap(), // history 4
        Arc::new(clock.clone()),
        Arc::clone(&replica) as Arc<dyn Journal>,
        restored_ties,
    )
    .unwrap();
    for id in ["s", "t"] {
        manager.register_task(input(id)).unwrap();
        manager.cancel_task(id);
        manager.mark_notified(id);
    }
    manager.register_task(input("u")).unwrap();
    manager.cancel_task("u");
    manager.mark_notified("u");
    let ids: Vec<String> = manager
        .tasks()
        .into_iter()
        .map(|t| t.id().to_owned())
        .collect();
    assert_eq!(ids, ["p", "s", "t", "u"], "q ended first of all five");
    let orders: Vec<u64> = replica.tasks().iter().map(|t| t.finish_order).collect();
    assert_eq!(orders, [9, 10, 11, 12]);
    assert_eq!(replica.problems(), Vec::<String>::new());
}

#[test]
fn restore_refuses_what_is_not_a_registry() {
    let restore = |tasks: Vec<StoredTask>| {
        AsyncTaskManager::restore(
            MaxAsyncTasks::default(),
            Arc::new(ManualClock::new(0)),
            nowhere(),
            tasks,
        )
        .map(|_| ())
    };
    let running = |id: &str| StoredTask::new(AsyncTaskInfo::new(id, "r", "g", 0));
    assert_eq!(
        restore(vec![running("a"), running("")]),
        Err(RestoreError::EmptyId { index: 1 })
    );
    assert_eq!(
        restore(vec![running("a"), running("a")]),
        Err(RestoreError::DuplicateId("a".into()))
    );
    let broken = [
        (
            AsyncTaskInfo {
                completed_at: Some(5),
                ..AsyncTaskInfo::new("a", "r", "g", 0)
            },
            "a task that has not ended has a completion time",
        ),
        (
            AsyncTaskInfo {
                started_at: Some(3),
                ..AsyncTaskInfo::queued("a", "r", "g", 0)
            },
            "a queued task has a start time",
        ),
        (
            AsyncTaskInfo {
                status: AsyncTaskStatus::Completed,
                completed_at: Some(5),
                ..AsyncTaskInfo::new("a", "r", "g", 0)
            },
            "a completed task must have an output and no error",
        ),
        (
            AsyncTaskInfo {
                status: AsyncTaskStatus::Failed,
                ..AsyncTaskInfo::new("a", "r", "g", 0)
            },
            "a terminal task has no completion time",
        ),
    ];
    for (info, problem) in broken {
        let refused = restore(vec![StoredTask::new(info)]).unwrap_err();
        assert_eq!(
            refused,
            RestoreError::Inconsistent {
                id: "a".into(),
                problem
            }
        );
        assert_eq!(
            refused.to_string(),
            format!("stored task 'a' is inconsistent: {problem}")
        );
    }
}

#[test]
fn a_restore_whose_journal_write_fails_is_built_all_the_same() {
    let replica = Arc::new(Replica::holding(vec![StoredTask::new(AsyncTaskInfo::new(
        "a", "r", "g", 0,
    ))]));
    replica.fail_next();
    let manager = restart(&replica, 2, 100);
    // Failed as interrupted in memory, but unrecorded: readers see it as the
    // store holds it, running, until a write records the interruption.
    assert_eq!(
        manager.task("a").unwrap().status(),
        AsyncTaskStatus::Running
    );
    assert!(manager.has_journal_backlog());
    assert!(manager.pending_notifications().is_empty());
    assert_eq!(replica.infos()[0].status, AsyncTaskStatus::Running);
    // The next restore does it again.
    let again = restart(&replica, 2, 200);
    assert_eq!(again.task("a").unwrap().completed_at(), Some(200));
    assert_eq!(replica.infos(), again.tasks());
}

#[test]
fn a_journaled_manager_tells_of_what_it_prunes_but_a_restore_does_not() {
    let (manager, replica, _) = journaled(1); // history 2
    let pruned = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&pruned);
    let _subscription = manager.on_task_pruned(move |id| log.lock().unwrap().push(id.to_owned()));
    for id in ["a", "b", "c"] {
        manager.register_task(input(id)).unwrap();
        manager.cancel_task(id);
        manager.mark_notified(id);
    }
    assert_eq!(*pruned.lock().unwrap(), ["a"]);
    manager.set_max_async_tasks(MaxAsyncTasks::new(3).unwrap());
    for id in ["d", "e"] {
        manager.register_task(input(id)).unwrap();
        manager.cancel_task(id);
        manager.mark_notified(id);
    }
    // Pruned by the restore, which tells no one: its caller compares.
    let restored = restart(&replica, 1, 9_000);
    let ids = |tasks: Vec<asynctask_manager::TaskSnapshot>| {
        tasks
            .into_iter()
            .map(|t| t.id().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(restored.tasks()), ["d", "e"]);
    let heard = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = Arc::clone(&heard);
    let _late = restored.on_task_pruned(move |id| log.lock().unwrap().push(id.to_owned()));
    restored.register_task(input("f")).unwrap();
    restored.cancel_task("f");
    restored.mark_notified("f");
    assert_eq!(
        *heard.lock().unwrap(),
        ["d"],
        "only what this manager pruned"
    );
    assert_eq!(*pruned.lock().unwrap(), ["a"]);
}

#[test]
fn the_usage_reported_by_the_end_is_kept_journaled_and_restored() {
    let (manager, replica, clock) = journaled(3);
    let progress = TaskProgress::new();
    let quiet = TaskProgress::new();
    manager
        .register_task(input("a").with_progress(progress.clone()))
        .unwrap();
    manager
        .register_task(input("b").with_progress(quiet.clone()))
        .unwrap();
    manager.register_task(input("c")).unwrap();
    progress.report_usage(TaskUsage::new().with_input_tokens(900).with_model("m-1"));
    progress.report_usage(
        TaskUsage::new()
            .with_input_tokens(1_500)
            .with_output_tokens(40)
            .with_cost_usd(0.003),
    );
    let usage = TaskUsage::new()
        .with_input_tokens(1_500)
        .with_output_tokens(40)
        .with_cost_usd(0.003)
        .with_model("m-1");
    assert_eq!(
        manager.task("a").and_then(|task| task.usage().cloned()),
        None,
        "a running task's usage is on its progress handle"
    );
    clock.advance(10);
    assert!(manager.cancel_task("a"), "a cancelled task keeps it too");
    manager.complete_task("b", goal());
    manager.fail_task("c", "boom");
    progress.report_usage(TaskUsage::new().with_input_tokens(9_999));
    let kept: Vec<_> = manager
        .tasks()
        .iter()
        .map(|task| task.usage().cloned())
        .collect();
    assert_eq!(
        kept,
        [Some(usage.clone()), None, None],
        "a report after the end is not kept"
    );
    let cancelled = manager.task("a").expect("held");
    assert_eq!(
        serde_json::to_value(&cancelled).unwrap()["usage"],
        serde_json::json!({"input_tokens": 1_500, "output_tokens": 40, "cost_usd": 0.003, "model": "m-1"})
    );
    assert_eq!(cancelled.to_info().usage, Some(usage.clone()));
    assert_eq!(replica.infos(), manager.tasks());
    assert_eq!(replica.problems(), Vec::<String>::new());

    let restarted = restart(&replica, 3, 5_000);
    assert_eq!(restarted.tasks(), manager.tasks());
    assert_eq!(
        restarted.task("a").and_then(|task| task.usage().cloned()),
        Some(usage)
    );
    check_invariants(&restarted).unwrap();
}
