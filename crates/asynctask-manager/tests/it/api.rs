//! The manager's behaviour, one rule at a time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use asynctask_manager::{
    AsyncTaskInfo, LimitReached, PrefixMatch, RegisterError, TaskCounts, TaskEvent, TaskSnapshot,
    check_invariants,
};
use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks, OutputObject, TerminateReason};
use pretty_assertions::assert_eq;

use crate::{input, manager};

fn goal() -> OutputObject {
    OutputObject::new(TerminateReason::Goal).with_var("answer", "42")
}

#[test]
fn register_returns_the_running_task_at_the_clock_time() {
    let (manager, clock) = manager(5);
    clock.set(7_000);
    let task = manager.register_task(input("a1")).unwrap();
    assert_eq!(
        task,
        AsyncTaskInfo::new("a1", "researcher", "goal of a1", 7_000)
    );
    assert_eq!(manager.task("a1"), Some(task));
}

#[test]
fn the_limit_counts_running_tasks_and_frees_on_any_terminal_transition() {
    let (manager, _) = manager(2);
    manager.register_task(input("a")).unwrap();
    manager.register_task(input("b")).unwrap();
    assert_eq!(manager.can_launch_async(), Err(LimitReached { max: 2 }));
    assert_eq!(
        manager.register_task(input("c")),
        Err(RegisterError::LimitReached(LimitReached { max: 2 }))
    );
    assert_eq!(
        manager.register_task(input("c")).unwrap_err().to_string(),
        "Max async tasks (2) reached"
    );
    assert!(manager.cancel_task("a"));
    manager.register_task(input("c")).unwrap();
    assert!(manager.fail_task("b", "x"));
    manager.register_task(input("d")).unwrap();
    assert_eq!(
        manager.task("e"),
        None,
        "refused registrations leave nothing behind"
    );
}

#[test]
fn unlimited_admits_any_number() {
    let (manager, _) = manager(-1);
    for i in 0..500 {
        manager.register_task(input(&format!("t{i}"))).unwrap();
    }
    assert_eq!(manager.counts().running, 500);
    assert_eq!(manager.can_launch_async(), Ok(()));
}

#[test]
fn a_duplicate_id_is_an_error_and_never_overwrites() {
    let (manager, _) = manager(5);
    let first = manager.register_task(input("same")).unwrap();
    let mut other = input("same");
    other.goal_prompt = "something else".into();
    assert_eq!(
        manager.register_task(other),
        Err(RegisterError::DuplicateId("same".into()))
    );
    assert_eq!(manager.tasks(), vec![first]);
    // Also once it is terminal but still in the registry.
    manager.complete_task("same", goal());
    assert_eq!(
        manager.register_task(input("same")),
        Err(RegisterError::DuplicateId("same".into()))
    );
}

#[test]
fn an_empty_id_is_refused() {
    let (manager, _) = manager(5);
    assert_eq!(
        manager.register_task(input("")),
        Err(RegisterError::EmptyId)
    );
    assert!(manager.tasks().is_empty());
}

#[test]
fn reservations_count_toward_the_limit_until_spent_or_dropped() {
    let (manager, _) = manager(2);
    let first = manager.reserve().unwrap();
    let second = manager.reserve().unwrap();
    assert_eq!(manager.reserve().unwrap_err(), LimitReached { max: 2 });
    assert_eq!(
        manager.register_task(input("x")),
        Err(RegisterError::LimitReached(LimitReached { max: 2 }))
    );
    assert_eq!(manager.counts().reserved, 2);
    drop(first);
    assert_eq!(manager.counts().reserved, 1);
    let task = second.register(input("r")).unwrap();
    assert_eq!(task.status(), AsyncTaskStatus::Running);
    assert_eq!(
        manager.counts(),
        TaskCounts {
            running: 1,
            ..TaskCounts::default()
        }
    );
    manager.register_task(input("y")).unwrap();
    assert!(manager.reserve().is_err());
    check_invariants(&manager).unwrap();
}

#[test]
fn a_reservation_spent_on_a_duplicate_id_frees_its_slot() {
    let (manager, _) = manager(2);
    manager.register_task(input("a")).unwrap();
    let slot = manager.reserve().unwrap();
    assert_eq!(
        slot.register(input("a")),
        Err(RegisterError::DuplicateId("a".into()))
    );
    assert_eq!(manager.counts().reserved, 0);
    manager.register_task(input("b")).unwrap();
}

#[test]
fn the_first_terminal_transition_wins_and_repeats_change_nothing() {
    let (manager, clock) = manager(5);
    manager.register_task(input("t")).unwrap();
    clock.advance(500);
    assert!(manager.complete_task("t", goal()));
    let after = manager.task("t").unwrap();
    clock.advance(500);
    assert!(!manager.complete_task("t", OutputObject::new(TerminateReason::Error)));
    assert!(!manager.fail_task("t", "late"));
    assert!(!manager.cancel_task("t"));
    assert_eq!(manager.task("t").unwrap(), after);
    assert_eq!(after.completed_at(), Some(1_500));
    assert_eq!(after.output(), Some(&goal()));
}

#[test]
fn transitions_on_unknown_ids_return_false() {
    let (manager, _) = manager(5);
    assert!(!manager.complete_task("nope", goal()));
    assert!(!manager.fail_task("nope", "x"));
    assert!(!manager.cancel_task("nope"));
    assert!(!manager.mark_notified("nope"));
}

#[test]
fn cancel_cancels_the_token_and_complete_does_not() {
    let (manager, _) = manager(5);
    let a = input("a");
    let b = input("b");
    let (token_a, token_b) = (a.cancellation.clone(), b.cancellation.clone());
    manager.register_task(a).unwrap();
    manager.register_task(b).unwrap();
    assert!(manager.cancellation_token("a").is_some());
    assert!(manager.cancel_task("a"));
    assert!(manager.complete_task("b", goal()));
    assert!(token_a.is_cancelled());
    assert!(!token_b.is_cancelled());
    assert!(
        manager.cancellation_token("a").is_none(),
        "terminal tasks drop their token"
    );
}

#[test]
fn pending_notifications_include_cancelled_tasks_in_registration_order() {
    let (manager, _) = manager(5);
    for id in ["a", "b", "c", "d"] {
        manager.register_task(input(id)).unwrap();
    }
    manager.cancel_task("c");
    manager.fail_task("a", "boom");
    manager.complete_task("b", goal());
    let pending: Vec<(String, AsyncTaskStatus)> = manager
        .pending_notifications()
        .into_iter()
        .map(|t| (t.id().to_owned(), t.status()))
        .collect();
    assert_eq!(
        pending,
        vec![
            ("a".into(), AsyncTaskStatus::Failed),
            ("b".into(), AsyncTaskStatus::Completed),
            ("c".into(), AsyncTaskStatus::Cancelled),
        ]
    );
    let running: Vec<String> = manager
        .running_tasks()
        .into_iter()
        .map(|t| t.id().to_owned())
        .collect();
    assert_eq!(running, ["d"]);
    assert!(manager.has_pending_notifications());
}

#[test]
fn mark_notified_sets_the_time_once_and_only_on_terminal_tasks() {
    let (manager, clock) = manager(5);
    manager.register_task(input("t")).unwrap();
    assert!(
        !manager.mark_notified("t"),
        "running tasks have nothing to notify"
    );
    manager.cancel_task("t");
    clock.set(9_000);
    assert!(manager.mark_notified("t"));
    clock.set(10_000);
    assert!(!manager.mark_notified("t"));
    assert_eq!(manager.task("t").unwrap().notified_at(), Some(9_000));
    assert!(!manager.has_pending_notifications());
}

#[test]
fn mark_all_notified_marks_what_it_can_under_one_lock() {
    let (manager, _) = manager(5);
    for id in ["a", "b", "c"] {
        manager.register_task(input(id)).unwrap();
    }
    manager.complete_task("a", goal());
    manager.fail_task("b", "x");
    assert_eq!(manager.mark_all_notified(&["a", "b", "c", "zz", "a"]), 2);
    assert!(manager.pending_notifications().is_empty());
}

fn finish_and_notify(manager: &asynctask_manager::AsyncTaskManager, id: &str) {
    manager.register_task(input(id)).expect("admitted");
    manager.complete_task(id, goal());
    manager.mark_notified(id);
}

fn ids(tasks: Vec<TaskSnapshot>) -> Vec<String> {
    tasks.into_iter().map(|t| t.id().to_owned()).collect()
}

#[test]
fn pruning_removes_the_oldest_finished_notified_tasks() {
    // max 1 => history limit 2.
    let (manager, clock) = manager(1);
    for id in ["a", "b", "c", "d"] {
        clock.advance(10);
        finish_and_notify(&manager, id);
    }
    assert_eq!(ids(manager.tasks()), ["c", "d"]);
    check_invariants(&manager).unwrap();
}

#[test]
fn pruning_orders_by_completion_not_registration() {
    let (manager, clock) = manager(3); // history 6
    for id in ["first", "second", "third"] {
        manager.register_task(input(id)).unwrap();
    }
    clock.advance(10);
    manager.complete_task("third", goal());
    clock.advance(10);
    manager.complete_task("first", goal());
    clock.advance(10);
    manager.complete_task("second", goal());
    manager.mark_all_notified(&["first", "second", "third"]);
    manager.set_max_async_tasks(MaxAsyncTasks::new(1).unwrap()); // history 2
    assert_eq!(ids(manager.tasks()), ["first", "second"]);
}

#[test]
fn an_unnotified_task_never_blocks_pruning_of_newer_notified_ones() {
    let (manager, clock) = manager(1); // history 2
    manager.register_task(input("old")).unwrap();
    manager.cancel_task("old"); // oldest, never notified
    for id in ["n1", "n2", "n3", "n4"] {
        clock.advance(10);
        finish_and_notify(&manager, id);
    }
    // "old" stays (un-notified); of the notified ones only the newest fits.
    assert_eq!(ids(manager.tasks()), ["old", "n4"]);
    assert!(manager.mark_notified("old"));
    assert_eq!(
        ids(manager.tasks()),
        ["old", "n4"],
        "2 terminal tasks fit the limit"
    );
    check_invariants(&manager).unwrap();
}

#[test]
fn unnotified_tasks_are_never_pruned_even_above_the_limit() {
    let (manager, _) = manager(1); // history 2
    for id in ["a", "b", "c", "d", "e"] {
        manager.register_task(input(id)).unwrap();
        manager.fail_task(id, "x");
    }
    assert_eq!(manager.tasks().len(), 5);
    assert!(manager.mark_notified("c"));
    assert_eq!(
        ids(manager.tasks()),
        ["a", "b", "d", "e"],
        "the notified one goes first"
    );
    check_invariants(&manager).unwrap();
}

#[test]
fn lowering_the_limit_prunes_at_once_and_keeps_running_tasks() {
    let (manager, _) = manager(5); // history 10
    for i in 0..8 {
        finish_and_notify(&manager, &format!("done{i}"));
    }
    for i in 0..4 {
        manager.register_task(input(&format!("run{i}"))).unwrap();
    }
    manager.set_max_async_tasks(MaxAsyncTasks::new(2).unwrap()); // history 4
    assert_eq!(manager.counts().completed, 4);
    assert_eq!(
        manager.counts().running,
        4,
        "running tasks are never removed"
    );
    assert!(manager.can_launch_async().is_err());
    check_invariants(&manager).unwrap();
    // New admissions wait until the running count is under the new limit.
    manager.cancel_task("run0");
    manager.cancel_task("run1");
    assert!(manager.register_task(input("new")).is_err());
    manager.cancel_task("run2");
    manager.register_task(input("new")).unwrap();
    check_invariants(&manager).unwrap();
}

#[test]
fn prefix_lookup_handles_multi_byte_ids() {
    let (manager, _) = manager(-1);
    for id in ["日本語-1", "日本語-2", "éclair", "🦀rust", "plain"] {
        manager.register_task(input(id)).unwrap();
    }
    assert!(
        matches!(manager.find_by_prefix("日本"), PrefixMatch::Ambiguous(c) if ids(c.clone()) == ["日本語-1", "日本語-2"])
    );
    assert!(
        matches!(manager.find_by_prefix("日本語-2"), PrefixMatch::One(t) if t.id() == "日本語-2")
    );
    assert!(matches!(manager.find_by_prefix("é"), PrefixMatch::One(t) if t.id() == "éclair"));
    assert!(matches!(manager.find_by_prefix("🦀"), PrefixMatch::One(t) if t.id() == "🦀rust"));
    assert_eq!(manager.find_by_prefix("e"), PrefixMatch::None, "é is not e");
    assert_eq!(manager.find_by_prefix("日本語-3"), PrefixMatch::None);
    assert_eq!(manager.task("日本語-1").unwrap().id(), "日本語-1");
    assert!(manager.cancel_task("🦀rust"));
    assert!(manager.mark_notified("🦀rust"));
    assert!(manager.complete_task("éclair", goal()));
    assert_eq!(ids(manager.pending_notifications()), ["éclair"]);
    check_invariants(&manager).unwrap();
}

#[test]
fn ambiguous_candidates_come_in_registration_order() {
    let (manager, _) = manager(-1);
    for id in ["ab9", "ab1", "ab5"] {
        manager.register_task(input(id)).unwrap();
    }
    let PrefixMatch::Ambiguous(candidates) = manager.find_by_prefix("ab") else {
        panic!("expected ambiguity");
    };
    assert_eq!(ids(candidates), ["ab9", "ab1", "ab5"]);
}

#[test]
fn events_fire_once_per_transition_after_the_state_change() {
    let (manager, _) = manager(5);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let observer = manager.clone();
    let log = Arc::clone(&seen);
    let _subscription = manager.subscribe(move |event| {
        // The state change is visible to the handler.
        let now = observer.task(event.task().id()).expect("still held");
        assert_eq!(&now, event.task());
        log.lock()
            .unwrap()
            .push((event.task().id().to_owned(), event.status()));
    });
    for id in ["a", "b", "c"] {
        manager.register_task(input(id)).unwrap();
    }
    manager.complete_task("a", goal());
    manager.complete_task("a", goal());
    manager.fail_task("b", "x");
    manager.cancel_task("c");
    manager.cancel_task("c");
    manager.mark_notified("a");
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            ("a".to_owned(), AsyncTaskStatus::Completed),
            ("b".to_owned(), AsyncTaskStatus::Failed),
            ("c".to_owned(), AsyncTaskStatus::Cancelled),
        ]
    );
}

#[test]
fn typed_subscriptions_see_only_their_kind() {
    let (manager, _) = manager(5);
    let counts = Arc::new([
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ]);
    let (c1, c2, c3) = (
        Arc::clone(&counts),
        Arc::clone(&counts),
        Arc::clone(&counts),
    );
    let _a = manager.on_task_completed(move |_| {
        c1[0].fetch_add(1, Ordering::SeqCst);
    });
    let _b = manager.on_task_failed(move |_| {
        c2[1].fetch_add(1, Ordering::SeqCst);
    });
    let _c = manager.on_task_cancelled(move |_| {
        c3[2].fetch_add(1, Ordering::SeqCst);
    });
    for id in ["a", "b", "c", "d"] {
        manager.register_task(input(id)).unwrap();
    }
    manager.complete_task("a", goal());
    manager.fail_task("b", "x");
    manager.cancel_task("c");
    manager.cancel_task("d");
    let seen: Vec<usize> = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    assert_eq!(seen, [1, 1, 2]);
}

#[test]
fn a_handler_may_reenter_the_manager_and_its_events_follow_in_order() {
    let (manager, _) = manager(5);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reentrant = manager.clone();
    let log = Arc::clone(&seen);
    let _subscription = manager.subscribe(move |event| {
        log.lock().unwrap().push(event.task().id().to_owned());
        if event.task().id() == "a" {
            // Transition another task from inside a handler: no deadlock, and its
            // event is delivered after this one.
            assert!(reentrant.cancel_task("b"));
            reentrant.register_task(crate::input("c")).unwrap();
            assert!(reentrant.mark_notified("a"));
        }
    });
    manager.register_task(input("a")).unwrap();
    manager.register_task(input("b")).unwrap();
    manager.complete_task("a", goal());
    assert_eq!(*seen.lock().unwrap(), ["a", "b"]);
    assert_eq!(
        manager.task("c").unwrap().status(),
        AsyncTaskStatus::Running
    );
}

#[test]
fn a_panicking_handler_stops_nothing_and_poisons_nothing() {
    let (manager, _) = manager(5);
    let after = Arc::new(AtomicUsize::new(0));
    let _bad = manager.subscribe(|_| panic!("handler bug"));
    let counter = Arc::clone(&after);
    let _good = manager.subscribe(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    manager.register_task(input("a")).unwrap();
    assert!(manager.complete_task("a", goal()));
    manager.register_task(input("b")).unwrap();
    assert!(manager.cancel_task("b"));
    assert_eq!(after.load(Ordering::SeqCst), 2);
    assert_eq!(manager.counts().completed, 1);
    check_invariants(&manager).unwrap();
}

#[test]
fn dropping_a_subscription_unsubscribes_and_detach_keeps_it() {
    let (manager, _) = manager(5);
    let seen = Arc::new(AtomicUsize::new(0));
    let (c1, c2) = (Arc::clone(&seen), Arc::clone(&seen));
    let dropped = manager.subscribe(move |_| {
        c1.fetch_add(1, Ordering::SeqCst);
    });
    manager
        .subscribe(move |_| {
            c2.fetch_add(100, Ordering::SeqCst);
        })
        .detach();
    drop(dropped);
    manager.register_task(input("a")).unwrap();
    manager.cancel_task("a");
    assert_eq!(seen.load(Ordering::SeqCst), 100);
}

#[test]
fn events_carry_the_whole_task() {
    let (manager, clock) = manager(5);
    let seen = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&seen);
    let _s = manager.subscribe(move |event| *slot.lock().unwrap() = Some(event.clone()));
    manager.register_task(input("a")).unwrap();
    clock.advance(250);
    manager.fail_task("a", "exit status 3");
    let mut expected = AsyncTaskInfo::new("a", "researcher", "goal of a", 1_000);
    expected.fail("exit status 3", 1_250);
    assert_eq!(
        *seen.lock().unwrap(),
        Some(TaskEvent::Failed(TaskSnapshot::from(expected)))
    );
}

#[test]
fn the_handle_is_cheap_and_shared() {
    let (manager, _) = manager(5);
    let other = manager.clone();
    other.register_task(input("a")).unwrap();
    assert_eq!(manager.tasks().len(), 1);
    assert_eq!(manager.max_async_tasks(), MaxAsyncTasks::DEFAULT);
    let debug = format!("{manager:?}");
    assert!(
        debug.starts_with("AsyncTaskManager { max_async_tasks: 5"),
        "{debug}"
    );
}

#[test]
fn a_handler_dropped_by_unsubscribing_may_unsubscribe_another_without_deadlock() {
    // The handler owns another subscription: dropping the handler (when its own
    // subscription is dropped) drops that one too, re-entering the manager.
    let (manager, _) = manager(5);
    let inner = manager.subscribe(|_| {});
    let outer = manager.subscribe(move |_| {
        let _keep = &inner;
    });
    drop(outer); // must not deadlock
    manager.register_task(input("a")).unwrap();
    assert!(manager.cancel_task("a"));
}

#[test]
fn the_runner_hears_of_a_cancel_before_any_handler_runs() {
    let (manager, _) = manager(5);
    let task = input("a");
    let token = task.cancellation.clone();
    let seen_cancelled = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&seen_cancelled);
    let _s = manager.subscribe(move |_| *slot.lock().unwrap() = Some(token.is_cancelled()));
    manager.register_task(task).unwrap();
    manager.cancel_task("a");
    assert_eq!(*seen_cancelled.lock().unwrap(), Some(true));
}

/// Records the ids its manager prunes, in the order heard.
fn record_pruned(
    manager: &asynctask_manager::AsyncTaskManager,
) -> (Arc<Mutex<Vec<String>>>, asynctask_manager::Subscription) {
    let pruned = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&pruned);
    let subscription = manager.on_task_pruned(move |id| {
        log.lock()
            .expect("no handler panics holding it")
            .push(id.to_owned())
    });
    (pruned, subscription)
}

#[test]
fn every_pruned_task_is_told_once_whatever_pruned_it() {
    let (manager, _) = manager(1); // history 2
    let (pruned, _subscription) = record_pruned(&manager);
    let observer = manager.clone();
    let gone = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&gone);
    // The handler runs after the change: the task is gone by then.
    let _check = manager.on_task_pruned(move |id| seen.lock().unwrap().push(observer.task(id)));
    for id in ["a", "b", "c", "d"] {
        manager.register_task(input(id)).unwrap();
        manager.cancel_task(id);
    }
    assert!(
        pruned.lock().unwrap().is_empty(),
        "an undelivered task is never pruned"
    );
    // A mark.
    manager.mark_notified("a");
    assert_eq!(*pruned.lock().unwrap(), ["a"]);
    // Several marks at once.
    assert_eq!(manager.mark_all_notified(&["b", "c"]), 2);
    assert_eq!(*pruned.lock().unwrap(), ["a", "b"]);
    // A terminal transition.
    manager.register_task(input("e")).unwrap();
    manager.fail_task("e", "x");
    assert_eq!(*pruned.lock().unwrap(), ["a", "b", "c"]);
    // A lowered limit.
    manager.set_max_async_tasks(MaxAsyncTasks::new(3).unwrap()); // history 6
    manager.mark_all_notified(&["d", "e"]);
    for id in ["f", "g", "h", "i"] {
        manager.register_task(input(id)).unwrap();
        manager.cancel_task(id);
        manager.mark_notified(id);
    }
    assert_eq!(pruned.lock().unwrap().len(), 3);
    manager.set_max_async_tasks(MaxAsyncTasks::new(1).unwrap()); // history 2
    assert_eq!(*pruned.lock().unwrap(), ["a", "b", "c", "d", "e", "f", "g"]);
    assert_eq!(
        manager.tasks().iter().map(|t| t.id()).collect::<Vec<_>>(),
        ["h", "i"]
    );
    assert_eq!(*gone.lock().unwrap(), vec![None; 7]);
}

#[test]
fn a_dropped_pruned_subscription_hears_nothing_and_a_panicking_handler_stops_nothing() {
    let (manager, _) = manager(1); // history 2
    let _bad = manager.on_task_pruned(|_| panic!("handler bug"));
    let (pruned, subscription) = record_pruned(&manager);
    for id in ["a", "b", "c"] {
        manager.register_task(input(id)).unwrap();
        manager.cancel_task(id);
        manager.mark_notified(id);
    }
    assert_eq!(*pruned.lock().unwrap(), ["a"]);
    drop(subscription);
    manager.register_task(input("d")).unwrap();
    manager.cancel_task("d");
    manager.mark_notified("d");
    assert_eq!(*pruned.lock().unwrap(), ["a"]);
    assert_eq!(manager.tasks().len(), 2);
}
