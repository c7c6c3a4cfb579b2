//! Delivery: auto-trigger and next-turn reminders, never losing or repeating a task.

use std::sync::Arc;
use std::time::Duration;

use asynctask_manager::{Answer, Question, Questions, RegisterTaskInput};
use asynctask_model::{ManualClock, MaxAsyncTasks, MaxQueuedTasks, OutputObject, TerminateReason};
use asynctask_runtime::{AsyncTaskRuntime, Claim, ClaimOwner};
use pretty_assertions::assert_eq;
use proptest::prelude::*;

use crate::{FakeHost, settle};

fn runtime_with(host: &Arc<FakeHost>) -> AsyncTaskRuntime {
    AsyncTaskRuntime::builder()
        .max_async_tasks(MaxAsyncTasks::UNLIMITED)
        .clock(Arc::new(ManualClock::new(1_000)))
        .host(Arc::clone(host) as Arc<dyn asynctask_runtime::AgentHost>)
        .build()
}

fn launch(runtime: &AsyncTaskRuntime, id: &str) {
    runtime
        .manager()
        .register_task(RegisterTaskInput::new(id, "researcher", "goal"))
        .expect("unlimited");
}

fn goal() -> OutputObject {
    OutputObject::new(TerminateReason::Goal)
}

#[tokio::test(start_paused = true)]
async fn an_idle_agent_is_woken_once() {
    let host = Arc::new(FakeHost::default());
    let runtime = runtime_with(&host);
    launch(&runtime, "a");
    launch(&runtime, "b");
    runtime.manager().complete_task("a", goal());
    settle().await;
    let delivered = host.delivered();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].task_ids, ["a"]);
    assert!(
        delivered[0]
            .text
            .ends_with("1 async task(s) still running.\n---")
    );
    assert!(!runtime.reminders().has_pending_notifications());
    // Idle again with nothing new: nobody is woken.
    runtime.agent_idle();
    settle().await;
    assert_eq!(host.attempts(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_completions_shares_one_turn() {
    let host = Arc::new(FakeHost::default());
    let runtime = runtime_with(&host);
    for id in ["a", "b", "c"] {
        launch(&runtime, id);
    }
    runtime.manager().complete_task("a", goal());
    runtime.manager().fail_task("b", "boom");
    runtime.manager().complete_task("c", goal());
    settle().await;
    let delivered = host.delivered();
    assert_eq!(delivered.len(), 1, "{delivered:#?}");
    assert_eq!(delivered[0].task_ids, ["a", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn a_busy_agent_gets_its_results_when_its_turn_ends() {
    let host = Arc::new(FakeHost::default());
    host.set_busy(true);
    let runtime = runtime_with(&host);
    launch(&runtime, "a");
    runtime.manager().complete_task("a", goal());
    settle().await;
    assert_eq!(host.attempts(), 0, "busy agents are not interrupted");
    assert!(runtime.reminders().has_pending_notifications());
    host.set_busy(false);
    runtime.agent_idle();
    settle().await;
    assert_eq!(host.delivered_ids(), [["a"]]);
}

#[tokio::test(start_paused = true)]
async fn a_failed_delivery_stays_pending_and_is_delivered_exactly_once() {
    let host = Arc::new(FakeHost::default());
    host.fail_next("model API unavailable");
    let runtime = runtime_with(&host);
    launch(&runtime, "a");
    runtime.manager().complete_task("a", goal());
    settle().await;
    assert_eq!((host.attempts(), host.delivered().len()), (1, 0));
    assert!(
        runtime.reminders().has_pending_notifications(),
        "nothing marked on failure"
    );
    // No hot loop: nothing happens until the backoff delay has passed.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(host.attempts(), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(host.attempts(), 2, "one delayed retry");
    assert_eq!(host.delivered()[0].task_ids, ["a"]);
    runtime.agent_idle();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(host.delivered().len(), 1, "delivered exactly once");
}

#[tokio::test(start_paused = true)]
async fn repeated_failures_back_off_then_wait_for_the_next_event() {
    let host = Arc::new(FakeHost::default());
    for _ in 0..10 {
        host.fail_next("down");
    }
    let runtime = runtime_with(&host);
    launch(&runtime, "a");
    runtime.manager().complete_task("a", goal());
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    // 1 attempt + 4 delayed retries (1 s, 2 s, 4 s, 8 s), then it waits.
    assert_eq!(host.attempts(), 5);
    runtime.agent_idle();
    settle().await;
    assert_eq!(host.attempts(), 6, "agent_idle tries again");
}

#[tokio::test(start_paused = true)]
async fn a_completion_during_the_last_failing_attempt_is_delivered() {
    let host = Arc::new(FakeHost::default());
    for _ in 0..5 {
        host.fail_next("down");
    }
    let runtime = runtime_with(&host);
    launch(&runtime, "a");
    launch(&runtime, "b");
    runtime.manager().complete_task("a", goal());
    // Attempts at 0, 1, 3 and 7 s fail; the last delayed retry comes at 15 s.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(host.attempts(), 4);
    let gate = host.gate();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(host.attempts(), 5, "the last delayed retry is in flight");
    // b completes while it runs; then it fails, and no retry is left.
    runtime.manager().complete_task("b", goal());
    gate.add_permits(2);
    settle().await;
    assert_eq!(
        host.delivered_ids(),
        [["a", "b"]],
        "b's completion tried again"
    );
    assert!(!runtime.reminders().has_pending_notifications());
}

#[tokio::test(start_paused = true)]
async fn a_completion_during_a_failing_attempt_is_not_lost() {
    let host = Arc::new(FakeHost::default());
    let gate = host.gate();
    host.fail_next("down");
    let runtime = runtime_with(&host);
    launch(&runtime, "a");
    launch(&runtime, "b");
    runtime.manager().complete_task("a", goal());
    settle().await;
    assert_eq!(host.attempts(), 1, "held in flight by the gate");
    runtime.manager().complete_task("b", goal());
    gate.add_permits(2);
    // No backoff to wait for: b's completion arrived during the attempt.
    settle().await;
    assert_eq!(host.attempts(), 2);
    assert_eq!(host.delivered_ids(), [["a", "b"]]);
}

#[tokio::test(start_paused = true)]
async fn a_cancel_alone_wakes_nobody_but_is_in_the_next_reminder() {
    let host = Arc::new(FakeHost::default());
    let runtime = runtime_with(&host);
    launch(&runtime, "a");
    launch(&runtime, "b");
    runtime.manager().cancel_task("a");
    runtime.agent_idle();
    settle().await;
    assert_eq!(host.attempts(), 0);
    runtime.manager().complete_task("b", goal());
    settle().await;
    assert_eq!(host.delivered()[0].task_ids, ["a", "b"]);
    assert!(
        host.delivered()[0]
            .text
            .contains("\"status\": \"cancelled\"")
    );
}

#[tokio::test(start_paused = true)]
async fn a_completion_during_an_in_flight_delivery_is_delivered_without_a_new_event() {
    let host = Arc::new(FakeHost::default());
    let gate = host.gate();
    let runtime = runtime_with(&host);
    launch(&runtime, "a");
    launch(&runtime, "b");
    runtime.manager().complete_task("a", goal());
    settle().await;
    assert_eq!(host.attempts(), 1, "delivery of a is in flight");
    // b completes while a's delivery is held: its event finds a delivery running.
    runtime.manager().complete_task("b", goal());
    gate.add_permits(2);
    settle().await;
    let delivered = host.delivered_ids();
    assert_eq!(delivered, [vec!["a".to_owned()], vec!["b".to_owned()]]);
    assert!(!runtime.reminders().has_pending_notifications());
}

#[tokio::test(start_paused = true)]
async fn next_turn_reminders_mark_only_after_ack_and_never_double_deliver() {
    let host = Arc::new(FakeHost::default());
    host.set_busy(true);
    let runtime = runtime_with(&host);
    launch(&runtime, "a");
    launch(&runtime, "b");
    runtime.manager().complete_task("a", goal());
    let reminder = runtime.next_turn_reminder().expect("a is pending");
    assert_eq!(reminder.task_ids, ["a"]);
    assert!(
        runtime.reminders().has_pending_notifications(),
        "not marked before ack"
    );
    // While the host holds it, the auto-trigger leaves "a" alone.
    host.set_busy(false);
    runtime.manager().complete_task("b", goal());
    settle().await;
    assert_eq!(host.delivered_ids(), [["b"]]);
    runtime.ack_delivered(&reminder.task_ids);
    assert!(!runtime.reminders().has_pending_notifications());
    // Only the running-status part remains... and nothing runs now.
    assert_eq!(runtime.next_turn_reminder(), None);
}

#[tokio::test(start_paused = true)]
async fn an_unacknowledged_next_turn_reminder_is_delivered_after_the_turn() {
    let host = Arc::new(FakeHost::default());
    host.set_busy(true);
    let runtime = runtime_with(&host);
    launch(&runtime, "a");
    runtime.manager().complete_task("a", goal());
    let first = runtime.next_turn_reminder().expect("pending");
    // The host's request failed: it never acks. Its turn ends.
    host.set_busy(false);
    runtime.agent_idle();
    settle().await;
    assert_eq!(host.delivered_ids(), [["a"]]);
    assert_eq!(first.task_ids, ["a"]);
    assert_eq!(runtime.next_turn_reminder(), None);
}

#[tokio::test(start_paused = true)]
async fn without_a_host_next_turn_reminders_still_work() {
    let runtime = AsyncTaskRuntime::builder().build();
    runtime
        .manager()
        .register_task(RegisterTaskInput::new("a", "r", "g"))
        .unwrap();
    let running_only = runtime.next_turn_reminder().expect("a runs");
    assert_eq!(running_only.task_ids, Vec::<String>::new());
    assert_eq!(
        running_only.text,
        "---\nSystem Note: Async Task Status\n\n1 async task(s) still running.\n---"
    );
    runtime.manager().complete_task("a", goal());
    runtime.agent_idle(); // no host: nothing to wake, nothing breaks
    let reminder = runtime.next_turn_reminder().expect("a finished");
    runtime.ack_delivered(&reminder.task_ids);
    assert_eq!(runtime.next_turn_reminder(), None);
}

/// One step of the delivery property test.
#[derive(Debug, Clone)]
enum Step {
    Complete(usize),
    Fail(usize),
    Cancel(usize),
    Busy(bool),
    HostFailsNext,
    /// The host's turn ends; a reminder it holds unacknowledged was not sent.
    AgentIdle,
    /// The host takes a next-turn reminder and holds it (its request is in flight).
    NextTurn,
    /// The host's request with the held reminder was accepted: acknowledge it.
    Ack,
    /// A serving layer's request `k` claims what is pending (an MCP tool call).
    RequestClaim(usize),
    /// Request `k` claims only the even-numbered tasks' results (an MCP
    /// session taking its own).
    RequestClaimSome(usize),
    /// Request `k`'s response was written: acknowledge its claim.
    RequestAck(usize),
    /// Request `k` was cancelled before its response was written: release it.
    RequestRelease(usize),
    /// Task `i`'s subagent asks a question (running or queued).
    Ask(usize),
    /// Task `i`'s oldest question is answered.
    Answer(usize),
    Wait(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..6usize).prop_map(Step::Complete),
        2 => (0..6usize).prop_map(Step::Fail),
        2 => (0..6usize).prop_map(Step::Cancel),
        2 => any::<bool>().prop_map(Step::Busy),
        1 => Just(Step::HostFailsNext),
        2 => Just(Step::AgentIdle),
        2 => Just(Step::NextTurn),
        2 => Just(Step::Ack),
        2 => (0..2usize).prop_map(Step::RequestClaim),
        1 => (0..2usize).prop_map(Step::RequestClaimSome),
        2 => (0..2usize).prop_map(Step::RequestAck),
        1 => (0..2usize).prop_map(Step::RequestRelease),
        2 => (0..6usize).prop_map(Step::Ask),
        1 => (0..6usize).prop_map(Step::Answer),
        2 => prop_oneof![Just(1u64), Just(50), Just(2_000)].prop_map(Step::Wait),
    ]
}

/// The questions a reminder's text puts to the model (`q<task>-<n>`).
fn asked_in(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("Q: "))
        .map(str::to_owned)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_finished_task_is_delivered_exactly_once(steps in prop::collection::vec(step(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async move {
            let host = Arc::new(FakeHost::default());
            // Three run, three wait in the queue: starts interleave with deliveries.
            let runtime = AsyncTaskRuntime::builder()
                .max_async_tasks(MaxAsyncTasks::new(3).expect("a limit"))
                .max_queued_tasks(MaxQueuedTasks::new(3).expect("a queue"))
                .clock(Arc::new(ManualClock::new(1_000)))
                .host(Arc::clone(&host) as Arc<dyn asynctask_runtime::AgentHost>)
                .build();
            let ids: Vec<String> = (0..6).map(|i| format!("task-{i}")).collect();
            let mut askers = Vec::new();
            for id in &ids {
                let (desk, questions) = Questions::channel();
                runtime
                    .manager()
                    .register_task(RegisterTaskInput::new(id.as_str(), "researcher", "goal").with_questions(desk))
                    .expect("within the limit and the queue");
                askers.push(questions);
            }
            // Every question asked, and what was done with it.
            let mut asked: Vec<(String, usize, asynctask_manager::Asking)> = Vec::new();
            let mut answered: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
            let mut shown: Vec<String> = Vec::new();
            let mut acked: Vec<String> = Vec::new();
            let mut held: Option<asynctask_runtime::Reminder> = None;
            let claims = runtime.claims().clone();
            // The claim each request holds (a request holds at most one: it
            // claims again only once its response ended), and the ids it
            // carried, to check that acknowledging gives back exactly that.
            let mut requests: [Option<Claim>; 2] = [None, None];
            let mut requested: [Vec<String>; 2] = [Vec::new(), Vec::new()];
            for step in steps {
                match step {
                    Step::Complete(i) => { runtime.manager().complete_task(&ids[i], goal()); }
                    Step::Fail(i) => { runtime.manager().fail_task(&ids[i], "x"); }
                    Step::Cancel(i) => { runtime.manager().cancel_task(&ids[i]); }
                    Step::Busy(busy) => host.set_busy(busy),
                    Step::HostFailsNext => host.fail_next("flaky"),
                    Step::AgentIdle => {
                        held = None;
                        runtime.agent_idle();
                    }
                    // Taking a new one means the previous request was not sent.
                    Step::NextTurn => held = runtime.next_turn_reminder(),
                    Step::Ack => {
                        if let Some(reminder) = held.take() {
                            runtime.ack_delivered(&reminder.task_ids);
                            shown.extend(asked_in(&reminder.text));
                            acked.extend(reminder.task_ids);
                        }
                    }
                    Step::RequestClaim(k) => {
                        if requests[k].is_none() && let Some(claim) = claims.claim(ClaimOwner::Request) {
                            prop_assert!(requested[k].is_empty(), "one claim per owner");
                            for question in asked_in(&claim.reminder().text) {
                                prop_assert!(!answered.contains(&question), "an answered question rides: {question}");
                            }
                            requested[k] = claim.task_ids().to_vec();
                            requests[k] = Some(claim);
                        }
                    }
                    Step::RequestClaimSome(k) => {
                        let even = |task: &asynctask_manager::TaskSnapshot| {
                            task.id().ends_with(['0', '2', '4'])
                        };
                        if requests[k].is_none() && let Some(claim) = claims.claim_matching(ClaimOwner::Request, even) {
                            prop_assert!(requested[k].is_empty(), "one claim per owner");
                            prop_assert!(claim.task_ids().iter().all(|id| id.ends_with(['0', '2', '4'])));
                            requested[k] = claim.task_ids().to_vec();
                            requests[k] = Some(claim);
                        }
                    }
                    Step::RequestAck(k) => {
                        if let Some(claim) = &requests[k] {
                            shown.extend(asked_in(&claim.reminder().text));
                        }
                        let ids = requests[k].take().map(Claim::acknowledge).unwrap_or_default();
                        prop_assert_eq!(&ids, &requested[k]);
                        acked.extend(ids);
                        requested[k].clear();
                    }
                    Step::RequestRelease(k) => {
                        let ids = requests[k].take().map(|claim| claim.task_ids().to_vec()).unwrap_or_default();
                        prop_assert_eq!(&ids, &requested[k]);
                        requested[k].clear();
                    }
                    Step::Ask(i) => {
                        let text = format!("q{i}-{}", asked.len());
                        let asking = askers[i].ask(Question::new(format!("Q: {text}")));
                        asked.push((text, i, asking));
                    }
                    Step::Answer(i) => {
                        // The oldest question of the task that still waits gets it.
                        let waiting = runtime
                            .manager()
                            .pending_questions()
                            .into_iter()
                            .find(|question| question.task_id == ids[i]);
                        let result = runtime.manager().answer_question(&ids[i], Answer::Answered("yes".into()));
                        prop_assert_eq!(result.is_ok(), waiting.is_some());
                        if let Some(question) = waiting {
                            let text = question.question.text.trim_start_matches("Q: ").to_owned();
                            answered.insert(text);
                        }
                    }
                    Step::Wait(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                }
            }
            // Requests still in flight end: one is written, the other cancelled.
            if let Some(claim) = requests[0].take() {
                acked.extend(claim.acknowledge());
            }
            drop(requests[1].take());
            // Drain: finish everything, let the host work, then take what is left
            // (cancel-only leftovers never wake the agent) through a next turn.
            for id in &ids {
                runtime.manager().cancel_task(id);
            }
            if let Some(reminder) = held.take() {
                runtime.ack_delivered(&reminder.task_ids);
                acked.extend(reminder.task_ids);
            }
            host.set_busy(false);
            runtime.agent_idle();
            tokio::time::sleep(Duration::from_secs(120)).await;
            if let Some(reminder) = runtime.next_turn_reminder() {
                runtime.ack_delivered(&reminder.task_ids);
                acked.extend(reminder.task_ids);
            }
            let mut seen: Vec<String> = host.delivered_ids().into_iter().flatten().collect();
            seen.extend(acked);
            seen.sort();
            prop_assert_eq!(seen, ids, "each task delivered exactly once");
            prop_assert!(runtime.manager().pending_notifications().is_empty());
            // Each question was shown at most once, and the auto-trigger never
            // carried one; each asker got its answer, or (its task ended) a
            // withdrawal.
            let mut once = shown.clone();
            once.sort();
            once.dedup();
            prop_assert_eq!(once.len(), shown.len(), "a question shown twice: {:?}", shown);
            for reminder in host.delivered() {
                prop_assert!(asked_in(&reminder.text).is_empty(), "a wake-up carried a question");
            }
            for (text, _, asking) in asked {
                let answer = asking.await;
                if answered.contains(&text) {
                    prop_assert_eq!(answer, Answer::Answered("yes".into()));
                } else {
                    prop_assert_eq!(answer, Answer::Withdrawn);
                }
            }
            prop_assert!(runtime.manager().pending_questions().is_empty());
            Ok(())
        })?;
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_with_nothing_running_is_quick_and_idempotent() {
    let host = Arc::new(FakeHost::default());
    let runtime = runtime_with(&host);
    launch(&runtime, "a");
    runtime.shutdown().await;
    runtime.shutdown().await;
    assert_eq!(
        runtime.manager().task("a").map(|t| t.status()),
        Some(asynctask_model::AsyncTaskStatus::Cancelled)
    );
    // A stopped runtime wakes nobody.
    settle().await;
    assert_eq!(host.attempts(), 0);
}

/// A host whose `trigger_agent_turn` panics the first time (after waiting for
/// the gate's permit, when it has one).
#[derive(Default)]
struct PanickyHost {
    calls: std::sync::Mutex<Vec<asynctask_runtime::Reminder>>,
    gate: Option<Arc<tokio::sync::Semaphore>>,
}

#[async_trait::async_trait]
impl asynctask_runtime::AgentHost for PanickyHost {
    fn is_agent_busy(&self) -> bool {
        false
    }

    async fn trigger_agent_turn(
        &self,
        reminder: asynctask_runtime::Reminder,
    ) -> Result<(), asynctask_runtime::TriggerError> {
        let first = {
            let mut calls = self.calls.lock().expect("calls lock");
            calls.push(reminder);
            calls.len() == 1
        };
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("gate open").forget();
        }
        if first {
            panic!("host bug");
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_host_strands_nothing() {
    let host = Arc::new(PanickyHost::default());
    let runtime = AsyncTaskRuntime::builder()
        .host(Arc::clone(&host) as Arc<dyn asynctask_runtime::AgentHost>)
        .build();
    launch(&runtime, "a");
    launch(&runtime, "b");
    runtime.manager().complete_task("a", goal());
    settle().await;
    assert_eq!(
        host.calls.lock().unwrap().len(),
        1,
        "the first delivery panicked"
    );
    assert!(
        runtime.reminders().has_pending_notifications(),
        "nothing was marked"
    );
    // The next event delivers both, once.
    runtime.manager().complete_task("b", goal());
    settle().await;
    let calls = host.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].task_ids, ["a", "b"]);
    assert!(!runtime.reminders().has_pending_notifications());
}

#[tokio::test(start_paused = true)]
async fn a_completion_during_a_panicking_attempt_is_delivered() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let host = Arc::new(PanickyHost {
        gate: Some(Arc::clone(&gate)),
        ..PanickyHost::default()
    });
    let runtime = AsyncTaskRuntime::builder()
        .host(Arc::clone(&host) as Arc<dyn asynctask_runtime::AgentHost>)
        .build();
    launch(&runtime, "a");
    launch(&runtime, "b");
    runtime.manager().complete_task("a", goal());
    settle().await;
    // b completes while the first delivery is in flight; then it panics.
    runtime.manager().complete_task("b", goal());
    gate.add_permits(2);
    settle().await;
    let calls = host.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "no further event was needed");
    assert_eq!(calls[1].task_ids, ["a", "b"]);
    assert!(!runtime.reminders().has_pending_notifications());
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_a_delivery_in_flight_and_stops_retries() {
    let host = Arc::new(FakeHost::default());
    let gate = host.gate();
    host.fail_next("down");
    let runtime = runtime_with(&host);
    launch(&runtime, "a");
    runtime.manager().complete_task("a", goal());
    settle().await;
    assert_eq!(host.attempts(), 1, "held in flight by the gate");
    gate.add_permits(1); // the delivery fails; a retry timer is set
    let started = tokio::time::Instant::now();
    runtime.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the retry timer does not hold shutdown"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(host.attempts(), 1, "no delivery after shutdown");
}
