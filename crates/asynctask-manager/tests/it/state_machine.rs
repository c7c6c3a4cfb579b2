//! A reference model of the registry, run against the real manager over arbitrary
//! operation sequences with `proptest-state-machine`. After every step every query
//! is compared and `check_invariants` must pass. The model has the queue past the
//! limit: launches queued in order, started (with their events) as slots free,
//! cancelled before they ran, kept queued across a restart.
//!
//! Most cases run a journaled manager whose journal is a [`Replica`]. After every
//! step the replica must hold exactly the registry, and replaying it
//! (`AsyncTaskManager::restore`) must rebuild exactly the registry the operations
//! built — running tasks aside, which come back as interrupted failures. The
//! `Restart` operation goes further: it replaces the manager with the restored
//! one, and the model carries on, so the restored registry must also *behave*
//! exactly like the original (pruning order, limits, origins).
//!
//! Cases default to 1,000; set `ASYNCTASK_PROPTEST_CASES` for longer runs.

use std::sync::{Arc, Mutex};

use asynctask_manager::{
    AsyncTaskManager, INTERRUPTED_ERROR, PrefixMatch, RegisterError, Reservation, Subscription,
    TaskCounts, TaskSnapshot, check_invariants,
};
use asynctask_model::arbitrary::{max_async_tasks, output_object};
use asynctask_model::{
    AsyncTaskInfo, AsyncTaskStatus, ManualClock, MaxAsyncTasks, MaxQueuedTasks, OutputObject,
};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

use crate::replica::{PROCESS, Replica};

/// Ids that share prefixes and mix multi-byte characters.
const IDS: &[&str] = &[
    "a",
    "ab",
    "abc",
    "b1",
    "é",
    "éa",
    "日本",
    "日本語",
    "🦀x",
    "z",
];
/// Who launches a task, when the registration says.
const ORIGINS: &[&str] = &["session-1", "session-2"];
/// Prefixes to query after every step.
const PREFIXES: &[&str] = &[
    "",
    "a",
    "ab",
    "abc",
    "b",
    "é",
    "日",
    "日本語",
    "🦀",
    "z",
    "q",
];

fn cases() -> u32 {
    std::env::var("ASYNCTASK_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

#[derive(Debug, Clone)]
enum Op {
    Register(&'static str, Option<&'static str>),
    Reserve,
    DropReservation(Index),
    RegisterReserved(Index, &'static str),
    Complete(&'static str, OutputObject),
    Fail(&'static str, String),
    Cancel(&'static str),
    MarkNotified(&'static str),
    SetMax(MaxAsyncTasks),
    SetMaxQueued(MaxQueuedTasks),
    Advance(u64),
    /// The process ends and a new one restores the registry from the journal.
    Restart,
}

/// What the last operation should have answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[expect(
    clippy::large_enum_variant,
    reason = "a test's answers, compared whole; their size does not matter"
)]
enum Answer {
    None,
    Registered(AsyncTaskInfo),
    Refused(RegisterError),
    Reserved(bool),
    Changed(bool),
}

#[derive(Debug, Clone)]
struct RefTask {
    info: AsyncTaskInfo,
    origin: Option<String>,
    finish: u64,
}

#[derive(Debug, Clone)]
struct Model {
    /// The manager journals to a replica (and may restart).
    journaled: bool,
    max: MaxAsyncTasks,
    max_queued: MaxQueuedTasks,
    /// One flag per reservation ever taken: still held?
    reservations: Vec<bool>,
    now: u64,
    finish_counter: u64,
    tasks: Vec<RefTask>,
    events: Vec<(String, AsyncTaskStatus)>,
    outcome: Answer,
}

impl Model {
    fn reserved(&self) -> usize {
        self.reservations.iter().filter(|held| **held).count()
    }

    fn running(&self) -> usize {
        self.tasks
            .iter()
            .filter(|t| t.info.status == AsyncTaskStatus::Running)
            .count()
    }

    fn queued(&self) -> usize {
        self.tasks
            .iter()
            .filter(|t| t.info.status == AsyncTaskStatus::Queued)
            .count()
    }

    /// Room for a task to run now: a free slot, and nobody queued before it.
    fn admits(&self) -> bool {
        self.max.admits(self.running() + self.reserved()) && self.queued() == 0
    }

    /// Starts queued tasks, first queued first, while slots are free; each
    /// start is an event.
    fn start_waiting(&mut self) {
        let now = self.now;
        while self.max.admits(self.running() + self.reserved()) {
            let Some(task) = self
                .tasks
                .iter_mut()
                .find(|t| t.info.status == AsyncTaskStatus::Queued)
            else {
                return;
            };
            task.info.start(now);
            let event = (task.info.id.clone(), AsyncTaskStatus::Running);
            self.events.push(event);
        }
    }

    fn find(&mut self, id: &str) -> Option<&mut RefTask> {
        self.tasks.iter_mut().find(|t| t.info.id == id)
    }

    fn register(&mut self, id: &str, origin: Option<&str>, queued: bool) -> Answer {
        if self.tasks.iter().any(|t| t.info.id == id) {
            return Answer::Refused(RegisterError::DuplicateId(id.to_owned()));
        }
        let info = if queued {
            AsyncTaskInfo::queued(id, "agent", format!("goal {id}"), self.now)
        } else {
            AsyncTaskInfo::new(id, "agent", format!("goal {id}"), self.now)
        };
        self.tasks.push(RefTask {
            info: info.clone(),
            origin: origin.map(str::to_owned),
            finish: 0,
        });
        Answer::Registered(info)
    }

    /// The registry a restore from the journal builds: running tasks failed as
    /// interrupted now, ending after every other task (in registration order),
    /// queued tasks still queued, reservations gone, then the history pruned.
    /// No events.
    fn restarted(&self) -> Model {
        let mut model = self.clone();
        let error = format!("{INTERRUPTED_ERROR} ({PROCESS}, killed or crashed)");
        let now = model.now;
        for task in &mut model.tasks {
            if task.info.status == AsyncTaskStatus::Running && task.info.fail(error.clone(), now) {
                model.finish_counter += 1;
                task.finish = model.finish_counter;
            }
        }
        model.reservations.iter_mut().for_each(|held| *held = false);
        model.prune();
        model
    }

    fn finish(
        &mut self,
        id: &str,
        transition: impl FnOnce(&mut AsyncTaskInfo, u64) -> bool,
    ) -> Answer {
        let now = self.now;
        let counter = self.finish_counter + 1;
        let Some(task) = self.find(id) else {
            return Answer::Changed(false);
        };
        if !transition(&mut task.info, now) {
            return Answer::Changed(false);
        }
        task.finish = counter;
        let event = (task.info.id.clone(), task.info.status);
        self.finish_counter = counter;
        self.events.push(event);
        self.prune();
        self.start_waiting();
        Answer::Changed(true)
    }

    fn prune(&mut self) {
        let limit = self.max.history_limit();
        loop {
            let terminal = self
                .tasks
                .iter()
                .filter(|t| t.info.status.is_terminal())
                .count();
            if terminal <= limit {
                return;
            }
            let oldest = self
                .tasks
                .iter()
                .enumerate()
                .filter(|(_, t)| t.info.notified_at.is_some())
                .min_by_key(|(_, t)| (t.info.completed_at, t.finish))
                .map(|(i, _)| i);
            match oldest {
                Some(i) => {
                    self.tasks.remove(i);
                }
                None => return,
            }
        }
    }
}

struct RegistryModel;

impl ReferenceStateMachine for RegistryModel {
    type State = Model;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Model> {
        let max_queued = prop_oneof![
            1 => Just(MaxQueuedTasks::NONE),
            2 => (1i64..=4).prop_map(|v| MaxQueuedTasks::new(v).unwrap_or_default()),
        ];
        (max_async_tasks(), max_queued, prop::bool::weighted(0.75))
            .prop_map(|(max, max_queued, journaled)| Model {
                journaled,
                max,
                max_queued,
                reservations: Vec::new(),
                now: 1_000,
                finish_counter: 0,
                tasks: Vec::new(),
                events: Vec::new(),
                outcome: Answer::None,
            })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Op> {
        let id = || prop::sample::select(IDS);
        let origin = prop::option::of(prop::sample::select(ORIGINS));
        let ops = prop_oneof![
            6 => (id(), origin).prop_map(|(id, origin)| Op::Register(id, origin)),
            2 => Just(Op::Reserve),
            1 => any::<Index>().prop_map(Op::DropReservation),
            2 => (any::<Index>(), id()).prop_map(|(i, id)| Op::RegisterReserved(i, id)),
            3 => (id(), output_object()).prop_map(|(id, o)| Op::Complete(id, o)),
            2 => (id(), "[a-z ]{0,8}").prop_map(|(id, e)| Op::Fail(id, e)),
            2 => id().prop_map(Op::Cancel),
            5 => id().prop_map(Op::MarkNotified),
            1 => prop_oneof![
                3 => (1i64..=4).prop_map(|v| MaxAsyncTasks::new(v).unwrap_or_default()),
                1 => max_async_tasks(),
            ].prop_map(Op::SetMax),
            1 => (0i64..=4).prop_map(|v| Op::SetMaxQueued(MaxQueuedTasks::new(v).unwrap_or_default())),
            2 => prop_oneof![Just(0u64), 1u64..5_000].prop_map(Op::Advance),
        ];
        if state.journaled {
            // About two restarts in a 60-step case.
            prop_oneof![26 => ops, 1 => Just(Op::Restart)].boxed()
        } else {
            ops.boxed()
        }
    }

    fn preconditions(state: &Model, op: &Op) -> bool {
        // Shrinking may drop the journal; a restart needs one.
        state.journaled || !matches!(op, Op::Restart)
    }

    fn apply(mut state: Model, op: &Op) -> Model {
        state.outcome = match op {
            Op::Register(id, origin) => {
                if state.tasks.iter().any(|t| t.info.id == *id) {
                    Answer::Refused(RegisterError::DuplicateId((*id).to_owned()))
                } else if state.admits() {
                    state.register(id, *origin, false)
                } else if state.max_queued.admits(state.queued()) {
                    state.register(id, *origin, true)
                } else if state.max_queued == MaxQueuedTasks::NONE {
                    Answer::Refused(RegisterError::LimitReached(
                        asynctask_manager::LimitReached {
                            max: state.max.get(),
                        },
                    ))
                } else {
                    Answer::Refused(RegisterError::QueueFull(asynctask_manager::QueueFull {
                        max: state.max.get(),
                        max_queued: state.max_queued.get(),
                    }))
                }
            }
            Op::Reserve => {
                let ok = state.admits();
                if ok {
                    state.reservations.push(true);
                }
                Answer::Reserved(ok)
            }
            Op::DropReservation(index) => {
                if !state.reservations.is_empty() {
                    let i = index.index(state.reservations.len());
                    if state.reservations[i] {
                        state.reservations[i] = false;
                        state.start_waiting();
                    }
                }
                Answer::None
            }
            Op::RegisterReserved(index, id) => {
                if state.reservations.is_empty() {
                    Answer::None
                } else {
                    let i = index.index(state.reservations.len());
                    if state.reservations[i] {
                        state.reservations[i] = false;
                        let registered = state.register(id, None, false);
                        if !matches!(registered, Answer::Registered(_)) {
                            // The spent reservation's slot is free again.
                            state.start_waiting();
                        }
                        registered
                    } else {
                        Answer::None
                    }
                }
            }
            Op::Complete(id, output) => state.finish(id, |t, now| t.complete(output.clone(), now)),
            Op::Fail(id, error) => state.finish(id, |t, now| t.fail(error.clone(), now)),
            Op::Cancel(id) => state.finish(id, |t, now| t.cancel(now)),
            Op::MarkNotified(id) => {
                let now = state.now;
                let changed = state.find(id).is_some_and(|t| t.info.mark_notified(now));
                if changed {
                    state.prune();
                }
                Answer::Changed(changed)
            }
            Op::SetMax(max) => {
                // Admitted tasks stay when the limit is lowered; `admits` alone
                // governs new admissions, and check_invariants checks the rest.
                state.max = *max;
                state.prune();
                state.start_waiting();
                Answer::None
            }
            Op::SetMaxQueued(max_queued) => {
                state.max_queued = *max_queued;
                Answer::None
            }
            Op::Advance(ms) => {
                state.now += ms;
                Answer::None
            }
            Op::Restart => {
                state = state.restarted();
                // The new process's host lets the queue start.
                state.start_waiting();
                Answer::None
            }
        };
        state
    }
}

struct System {
    manager: AsyncTaskManager,
    clock: ManualClock,
    /// The journal, for a journaled model.
    replica: Option<Arc<Replica>>,
    reservations: Vec<Option<Reservation>>,
    events: Arc<Mutex<Vec<(String, AsyncTaskStatus)>>>,
    _subscription: Subscription,
}

/// Logs every event into `events`.
fn log_events(
    manager: &AsyncTaskManager,
    events: &Arc<Mutex<Vec<(String, AsyncTaskStatus)>>>,
) -> Subscription {
    let log = Arc::clone(events);
    manager.subscribe(move |event| {
        log.lock()
            .expect("event log lock")
            .push((event.task().id().to_owned(), event.status()));
    })
}

/// The tasks as the model says a store holds them (running ones still running).
fn stored(model: &Model) -> Vec<(AsyncTaskInfo, Option<String>)> {
    model
        .tasks
        .iter()
        .map(|t| (t.info.clone(), t.origin.clone()))
        .collect()
}

struct ManagerTest;

impl StateMachineTest for ManagerTest {
    type SystemUnderTest = System;
    type Reference = RegistryModel;

    fn init_test(model: &Model) -> System {
        let clock = ManualClock::new(model.now);
        let replica = model.journaled.then(|| Arc::new(Replica::default()));
        let manager = match &replica {
            Some(replica) => AsyncTaskManager::restore(
                model.max,
                Arc::new(clock.clone()),
                Arc::clone(replica) as _,
                Vec::new(),
            )
            .expect("an empty restore"),
            None => AsyncTaskManager::with_clock(model.max, Arc::new(clock.clone())),
        };
        manager.set_max_queued_tasks(model.max_queued);
        let events = Arc::new(Mutex::new(Vec::new()));
        let subscription = log_events(&manager, &events);
        System {
            manager,
            clock,
            replica,
            reservations: Vec::new(),
            events,
            _subscription: subscription,
        }
    }

    fn apply(mut sys: System, model: &Model, op: Op) -> System {
        let input = |id: &str| {
            asynctask_manager::RegisterTaskInput::new(id, "agent", format!("goal {id}"))
                .with_launch(format!("launch {id}"))
        };
        let registered = |result: Result<TaskSnapshot, RegisterError>| match result {
            Ok(task) => Answer::Registered(task.to_info()),
            Err(err) => Answer::Refused(err),
        };
        let outcome = match op {
            Op::Register(id, origin) => {
                let input = match origin {
                    Some(origin) => input(id).with_origin(origin),
                    None => input(id),
                };
                registered(sys.manager.register_task(input))
            }
            Op::Reserve => match sys.manager.reserve() {
                Ok(reservation) => {
                    sys.reservations.push(Some(reservation));
                    Answer::Reserved(true)
                }
                Err(_) => Answer::Reserved(false),
            },
            Op::DropReservation(index) => {
                if !sys.reservations.is_empty() {
                    let i = index.index(sys.reservations.len());
                    sys.reservations[i] = None;
                }
                Answer::None
            }
            Op::RegisterReserved(index, id) => {
                if sys.reservations.is_empty() {
                    Answer::None
                } else {
                    let i = index.index(sys.reservations.len());
                    match sys.reservations[i].take() {
                        Some(reservation) => registered(reservation.register(input(id))),
                        None => Answer::None,
                    }
                }
            }
            Op::Complete(id, output) => Answer::Changed(sys.manager.complete_task(id, output)),
            Op::Fail(id, error) => Answer::Changed(sys.manager.fail_task(id, error)),
            Op::Cancel(id) => Answer::Changed(sys.manager.cancel_task(id)),
            Op::MarkNotified(id) => Answer::Changed(sys.manager.mark_notified(id)),
            Op::SetMax(max) => {
                sys.manager.set_max_async_tasks(max);
                Answer::None
            }
            Op::SetMaxQueued(max_queued) => {
                sys.manager.set_max_queued_tasks(max_queued);
                Answer::None
            }
            Op::Advance(ms) => {
                sys.clock.advance(ms);
                Answer::None
            }
            Op::Restart => {
                let replica = sys.replica.clone().expect("only journaled models restart");
                // The old process is gone, and its reservations with it. A
                // process that dies runs no code: its reservations are not
                // released (that would start its queued tasks and journal the
                // starts), they vanish with it.
                for held in sys.reservations.iter_mut() {
                    std::mem::forget(held.take());
                }
                sys.manager = AsyncTaskManager::restore(
                    model.max,
                    Arc::new(sys.clock.clone()),
                    Arc::clone(&replica) as _,
                    replica.tasks(),
                )
                .expect("the replica holds a registry");
                sys.manager.set_max_queued_tasks(model.max_queued);
                sys._subscription = log_events(&sys.manager, &sys.events);
                // As a runtime does once it listens for starts.
                sys.manager.start_queued();
                Answer::None
            }
        };
        assert_eq!(outcome, model.outcome);
        sys
    }

    fn check_invariants(sys: &System, model: &Model) {
        check_invariants(&sys.manager).expect("registry invariants hold");
        let manager = &sys.manager;
        let all: Vec<AsyncTaskInfo> = model.tasks.iter().map(|t| t.info.clone()).collect();
        assert_eq!(manager.tasks(), all);
        let running: Vec<AsyncTaskInfo> = all
            .iter()
            .filter(|t| t.status == AsyncTaskStatus::Running)
            .cloned()
            .collect();
        assert_eq!(manager.running_tasks(), running);
        let queued: Vec<AsyncTaskInfo> = all
            .iter()
            .filter(|t| t.status == AsyncTaskStatus::Queued)
            .cloned()
            .collect();
        assert_eq!(manager.queued_tasks(), queued);
        for (at, task) in queued.iter().enumerate() {
            assert_eq!(manager.queue_position(&task.id), Some(at + 1));
        }
        for task in model.tasks.iter() {
            let launch = manager
                .task(&task.info.id)
                .and_then(|t| t.launch().map(str::to_owned));
            assert_eq!(
                launch,
                Some(format!("launch {}", task.info.id)),
                "the launch is kept"
            );
        }
        let pending: Vec<AsyncTaskInfo> = all
            .iter()
            .filter(|t| t.is_pending_notification())
            .cloned()
            .collect();
        assert_eq!(manager.has_pending_notifications(), !pending.is_empty());
        assert_eq!(manager.pending_notifications(), pending);
        let count = |status| all.iter().filter(|t| t.status == status).count();
        assert_eq!(
            manager.counts(),
            TaskCounts {
                queued: queued.len(),
                running: running.len(),
                completed: count(AsyncTaskStatus::Completed),
                failed: count(AsyncTaskStatus::Failed),
                cancelled: count(AsyncTaskStatus::Cancelled),
                pending_notifications: pending.len(),
                reserved: model.reserved(),
            }
        );
        assert_eq!(manager.max_async_tasks(), model.max);
        assert_eq!(manager.max_queued_tasks(), model.max_queued);
        assert_eq!(manager.can_launch_async().is_ok(), model.admits());
        for id in IDS {
            assert_eq!(
                manager.task(id).map(AsyncTaskInfo::from),
                all.iter().find(|t| t.id == *id).cloned()
            );
        }
        for prefix in PREFIXES {
            let matches: Vec<AsyncTaskInfo> = all
                .iter()
                .filter(|t| t.id.starts_with(prefix))
                .cloned()
                .collect();
            let expected = match matches.len() {
                0 => PlainMatch::None,
                1 => PlainMatch::One(matches[0].clone()),
                _ => PlainMatch::Ambiguous(matches),
            };
            assert_eq!(
                PlainMatch::from(manager.find_by_prefix(prefix)),
                expected,
                "prefix {prefix:?}"
            );
        }
        assert_eq!(*sys.events.lock().expect("event log lock"), model.events);
        for id in IDS {
            let origin = model.tasks.iter().find(|t| t.info.id == *id);
            assert_eq!(manager.origin(id), origin.and_then(|t| t.origin.clone()));
        }
        if let Some(replica) = &sys.replica {
            check_replay(replica, model);
        }
    }
}

/// A [`PrefixMatch`] over plain records, to compare with the model's.
#[derive(Debug, PartialEq, Eq)]
#[expect(
    clippy::large_enum_variant,
    reason = "a test's values, compared whole; their size does not matter"
)]
enum PlainMatch {
    None,
    One(AsyncTaskInfo),
    Ambiguous(Vec<AsyncTaskInfo>),
}

impl From<PrefixMatch> for PlainMatch {
    fn from(found: PrefixMatch) -> Self {
        match found {
            PrefixMatch::None => PlainMatch::None,
            PrefixMatch::One(task) => PlainMatch::One(task.to_info()),
            PrefixMatch::Ambiguous(tasks) => {
                PlainMatch::Ambiguous(tasks.iter().map(AsyncTaskInfo::from).collect())
            }
        }
    }
}

/// The journal holds exactly the registry, and replaying it rebuilds the
/// registry (running tasks as interrupted failures), itself journaled right.
fn check_replay(replica: &Replica, model: &Model) {
    assert_eq!(replica.problems(), Vec::<String>::new());
    let held: Vec<(AsyncTaskInfo, Option<String>)> = replica
        .tasks()
        .into_iter()
        .map(|t| (t.info, t.origin))
        .collect();
    assert_eq!(held, stored(model), "the journal holds the registry");

    let expected = model.restarted();
    let again = Arc::new(Replica::holding(replica.tasks()));
    let clock = ManualClock::new(model.now);
    let restored = AsyncTaskManager::restore(
        model.max,
        Arc::new(clock),
        Arc::clone(&again) as _,
        replica.tasks(),
    )
    .expect("the replica holds a registry");
    check_invariants(&restored).expect("a restored registry keeps the invariants");
    let rebuilt: Vec<(AsyncTaskInfo, Option<String>)> = restored
        .tasks()
        .into_iter()
        .map(|t| {
            let origin = restored.origin(t.id());
            (t.to_info(), origin)
        })
        .collect();
    assert_eq!(rebuilt, stored(&expected), "replay rebuilds the registry");
    assert_eq!(restored.counts().running, 0);
    assert_eq!(restored.max_async_tasks(), model.max);
    // The restore journaled its interruptions and pruning: the store now holds
    // the restored registry.
    assert_eq!(again.problems(), Vec::<String>::new());
    assert_eq!(again.infos(), restored.tasks());
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn the_manager_matches_the_reference_model(sequential 1..60 => ManagerTest);
}
