//! The journal's round trip through SQLite: after every operation of an
//! arbitrary sequence the store holds exactly the registry (every task,
//! status, times, output or error, mark, origin, in registration order); after
//! a reopen it still does, and restoring from it rebuilds what restoring from
//! an in-memory copy of the registry rebuilds.

use std::sync::Arc;

use asynctask_manager::{
    AsyncTaskManager, Journal, JournalEntry, JournalError, RegisterTaskInput, StoredTask,
    check_invariants,
};
use asynctask_model::arbitrary::{max_async_tasks, output_object, text};
use asynctask_model::{AsyncTaskInfo, ManualClock, MaxAsyncTasks, MaxQueuedTasks, OutputObject};
use asynctask_store::{Durability, Store};
use proptest::prelude::*;

/// Ids that share prefixes and mix multi-byte characters.
const IDS: &[&str] = &["a", "ab", "é", "日本", "🦀x", "z"];

#[derive(Debug, Clone)]
enum Op {
    Register(&'static str, Option<String>, String),
    Complete(&'static str, OutputObject),
    Fail(&'static str, String),
    Cancel(&'static str),
    Mark(&'static str),
    SetMax(MaxAsyncTasks),
    SetMaxQueued(MaxQueuedTasks),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let id = || prop::sample::select(IDS);
    prop_oneof![
        5 => (id(), prop::option::of(text()), text()).prop_map(|(id, origin, goal)| Op::Register(id, origin, goal)),
        3 => (id(), output_object()).prop_map(|(id, output)| Op::Complete(id, output)),
        2 => (id(), text()).prop_map(|(id, error)| Op::Fail(id, error)),
        1 => id().prop_map(Op::Cancel),
        4 => id().prop_map(Op::Mark),
        1 => max_async_tasks().prop_map(Op::SetMax),
        1 => (0i64..4).prop_map(|n| Op::SetMaxQueued(MaxQueuedTasks::new(n).expect("in range"))),
        2 => prop_oneof![Just(0u64), 1u64..10_000, Just(u64::MAX / 2)].prop_map(Op::Advance),
    ]
}

/// What the manager holds, as a store should hold it.
type Held = (AsyncTaskInfo, Option<String>, Option<String>);

fn held(manager: &AsyncTaskManager) -> Vec<Held> {
    manager
        .tasks()
        .into_iter()
        .map(|task| {
            let origin = task.origin().map(str::to_owned);
            let launch = task.launch().map(str::to_owned);
            (task.to_info(), origin, launch)
        })
        .collect()
}

fn stored(tasks: Vec<StoredTask>) -> Vec<Held> {
    tasks
        .into_iter()
        .map(|t| (t.info, t.origin, t.launch))
        .collect()
}

/// A journal that keeps nothing.
struct Nowhere;

impl Journal for Nowhere {
    fn record(&self, _: &[JournalEntry<'_>]) -> Result<(), JournalError> {
        Ok(())
    }
}

proptest! {
    // Each case is a real store in a temporary directory: fewer cases than
    // the in-memory replay test in asynctask-manager.
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_store_holds_exactly_the_registry_and_replays_it(
        max in max_async_tasks(),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("tasks.db");
        // `ProcessCrash` (no fsync per change) only to keep the cases fast;
        // what is stored does not depend on it.
        let (store, _) = Store::open_with(&path, Durability::ProcessCrash).expect("a new store");
        let store = Arc::new(store);
        let clock = ManualClock::new(1_000);
        let manager = AsyncTaskManager::restore(max, Arc::new(clock.clone()), Arc::clone(&store) as Arc<dyn Journal>, Vec::new())
            .expect("an empty restore");
        for op in ops {
            match op {
                Op::Register(id, origin, goal) => {
                    let input = RegisterTaskInput::new(id, "researcher", goal.clone())
                        .with_launch(format!("{{\"goal\":{goal:?}}}"));
                    let input = match origin {
                        Some(origin) => input.with_origin(origin),
                        None => input,
                    };
                    let _ = manager.register_task(input);
                }
                Op::Complete(id, output) => { manager.complete_task(id, output); }
                Op::Fail(id, error) => { manager.fail_task(id, error); }
                Op::Cancel(id) => { manager.cancel_task(id); }
                Op::Mark(id) => { manager.mark_notified(id); }
                Op::SetMax(max) => manager.set_max_async_tasks(max),
                Op::SetMaxQueued(max) => manager.set_max_queued_tasks(max),
                Op::Advance(ms) => clock.advance(ms),
            }
            check_invariants(&manager).expect("invariants hold");
            prop_assert_eq!(stored(store.load().expect("the store reads")), held(&manager));
        }
        let expected = held(&manager);
        let max = manager.max_async_tasks();
        drop(manager);
        drop(store);

        let (store, reopened) = Store::open(&path).expect("the store reopens");
        prop_assert_eq!(stored(reopened.clone()), expected.clone());
        let copy: Vec<StoredTask> = reopened.clone();
        let restored = AsyncTaskManager::restore(max, Arc::new(clock.clone()), Arc::new(store), reopened)
            .expect("the store holds a registry");
        let from_memory = AsyncTaskManager::restore(max, Arc::new(clock.clone()), Arc::new(Nowhere), copy)
            .expect("the copy is a registry");
        check_invariants(&restored).expect("invariants hold");
        prop_assert_eq!(held(&restored), held(&from_memory));
        prop_assert_eq!(restored.counts().running, 0);
    }
}

/// What a model or a subagent sends may hold a NUL anywhere (an escape the
/// model wrote, a byte a subagent printed): SQLite keeps it, and a reopened
/// store gives back exactly what was written, never an error or a lost task.
#[test]
fn a_nul_in_any_text_of_a_model_or_a_subagent_is_kept_across_a_reopen() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("tasks.db");
    let (store, _) = Store::open(&path).expect("a new store");
    let clock = ManualClock::new(1_000);
    let manager = AsyncTaskManager::restore(
        MaxAsyncTasks::UNLIMITED,
        Arc::new(clock.clone()),
        Arc::new(store),
        Vec::new(),
    )
    .expect("an empty restore");
    for id in ["done", "failed"] {
        let input = RegisterTaskInput::new(id, "research\0er", "go\0al")
            .with_origin("sess\0ion")
            .with_launch("{\"goal\":\"go\\u0000al\"}");
        manager.register_task(input).expect("registered");
    }
    let output = OutputObject::new(asynctask_model::TerminateReason::Goal)
        .with_final_message("boom\0tail")
        .with_var("k\0", "v\0");
    assert!(manager.complete_task("done", output));
    assert!(manager.fail_task("failed", "boom\0tail\n"));
    let expected = held(&manager);
    drop(manager);

    let (_, reopened) = Store::open(&path).expect("the store reopens");
    assert_eq!(stored(reopened), expected);
    assert_eq!(expected[1].0.error.as_deref(), Some("boom\0tail\n"));
}
