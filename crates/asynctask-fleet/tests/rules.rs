//! The fleet's rules for claims, leases, fencing tokens and delivery,
//! checked without a server: arbitrary sequences of operations by several
//! workers, fronts and result claimers across two workspaces run on the
//! reference model (`tests/model`), and after every step the invariants the
//! rules promise must hold. The differential test (`tests/it/differential.rs`)
//! checks that `Fleet` on a real PostgreSQL does what the model does.
//!
//! Cases default to 1,000; set `ASYNCTASK_PROPTEST_CASES` for longer runs.

#[path = "model/mod.rs"]
mod model;

use std::collections::BTreeSet;

use asynctask_fleet::{CancelRequest, ResultFor};
use model::{Claim, EndAs, Model, Op, Outcome, Pick, Status, Token, WORKER_NAMES, WORKSPACES};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("ASYNCTASK_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

/// What a run has seen so far, across steps.
#[derive(Debug, Default)]
struct History {
    /// How many times each task went from not ended to ended.
    ends: Vec<u32>,
    /// How many times each task's result was taken: acknowledged in a
    /// result claim, or marked delivered.
    taken: Vec<u32>,
    /// Tasks failed by a reaping, a retirement or as untracked.
    interrupted: BTreeSet<String>,
}

/// Applies `op` to `model` and checks every invariant on the step.
fn step(model: &mut Model, history: &mut History, op: &Op) -> Outcome {
    let pre = model.clone();
    let outcome = model.apply(op);
    check(&pre, op, &outcome, model, history);
    outcome
}

fn position(model: &Model, id: &str) -> usize {
    model
        .tasks
        .iter()
        .position(|t| t.id == id)
        .expect("an answer names known tasks")
}

#[expect(
    clippy::too_many_lines,
    reason = "one invariant after another, each said where it is checked"
)]
fn check(pre: &Model, op: &Op, outcome: &Outcome, post: &Model, history: &mut History) {
    history.ends.resize(post.tasks.len(), 0);
    history.taken.resize(post.tasks.len(), 0);

    // Tasks are never lost or reordered; an end is for good.
    assert!(post.tasks.len() >= pre.tasks.len());
    for (t, (before, after)) in pre.tasks.iter().zip(&post.tasks).enumerate() {
        assert_eq!(before.id, after.id);
        if before.status.ended() {
            assert_eq!(
                (
                    before.status,
                    &before.output,
                    &before.error,
                    before.completed_at
                ),
                (
                    after.status,
                    &after.output,
                    &after.error,
                    after.completed_at
                ),
                "an ended task never changes its end"
            );
        } else if after.status.ended() {
            history.ends[t] += 1;
        }
        if before.status == Status::Running {
            assert_ne!(
                after.status,
                Status::Queued,
                "a claimed task is never queued again"
            );
        }
        // A token, once given, is the task's for good.
        if before.fence.is_some() {
            assert_eq!(before.fence, after.fence);
            assert_eq!(before.worker, after.worker);
        }
        if before.notified_at.is_some() {
            assert_eq!(
                before.notified_at, after.notified_at,
                "delivered once, for good"
            );
        }
    }
    for (t, ends) in history.ends.iter().enumerate() {
        assert!(*ends <= 1, "task {t} ended {ends} times");
    }

    // A workspace never starts a task at its task-max-async, a worker never
    // runs more than its capacity.
    for ws in 0..WORKSPACES.len() {
        if post.running_in(ws) > pre.running_in(ws) {
            let max = post.max_async[ws].expect("a workspace with tasks exists");
            assert!(
                max < 0 || post.running_in(ws) <= usize::try_from(max).unwrap_or(0),
                "workspace {ws} runs {} of at most {max}",
                post.running_in(ws)
            );
        }
    }
    for (w, worker) in post.workers.iter().enumerate() {
        assert!(post.running_of(w).len() <= worker.capacity as usize);
    }

    // Tokens: each claim's is greater than every one before it, and a
    // running task has exactly one current claim.
    for (n, claim) in post.claims.iter().enumerate().skip(pre.claims.len()) {
        assert!(claim.fence > pre.last_fence, "tokens only grow");
        if n > 0 {
            assert!(claim.fence > post.claims[n - 1].fence);
        }
    }
    for (t, task) in post.tasks.iter().enumerate() {
        let claims = post.claims.iter().filter(|c| c.task == t).count();
        assert!(claims <= 1, "a task is claimed once");
        if task.status == Status::Running {
            let current = post
                .claims
                .iter()
                .filter(|c| c.task == t && Some(c.fence) == task.fence)
                .count();
            assert_eq!(current, 1, "a running task has one current claim");
        }
    }

    if *outcome == Outcome::Skipped {
        assert_eq!(pre, post, "a skipped operation changes nothing");
        return;
    }
    match (op, outcome) {
        (Op::Claim { worker, max }, Outcome::Claimed(claimed)) => {
            check_claims(pre, *worker, *max, claimed, post);
        }
        (Op::Register { workspaces, .. }, Outcome::NoWorkspaces) => {
            assert_eq!(
                *workspaces, 0,
                "only a worker naming no workspace is refused"
            );
            assert_eq!(pre, post, "a refused registration changes nothing");
        }
        (Op::Register { workspaces, .. }, Outcome::Lease(_)) => {
            assert_ne!(
                *workspaces, 0,
                "a worker naming no workspace never registers"
            );
        }
        (Op::Claim { worker, .. }, Outcome::Lost) => {
            let w = worker.of(pre.workers.len()).expect("a worker");
            assert!(
                !pre.worker_live(w),
                "only an expired lease is refused a claim"
            );
            assert_eq!(pre, post, "a refused claim changes nothing");
        }
        (Op::End { claim, end, token }, answer) => {
            let c = claim.of(pre.claims.len()).expect("a claim");
            check_write(pre, pre.claims[c], *token, Some(*end), answer, post);
        }
        (Op::Progress { claim, token }, answer) => {
            let c = claim.of(pre.claims.len()).expect("a claim");
            check_write(pre, pre.claims[c], *token, None, answer, post);
        }
        (Op::Reap, Outcome::Interrupted(reaped)) => {
            // Exactly the running tasks of live workers whose lease expired,
            // failed "interrupted: worker <name> lost", each once ever.
            let mut expected: Vec<(String, String)> = Vec::new();
            for (w, worker) in pre.workers.iter().enumerate() {
                if worker.live && worker.expires_at <= pre.now {
                    for t in pre.running_of(w) {
                        expected.push((
                            pre.tasks[t].id.clone(),
                            WORKER_NAMES[worker.name].to_owned(),
                        ));
                    }
                    assert!(
                        !post.workers[w].live,
                        "an expired worker is lost once reaped"
                    );
                }
            }
            expected.sort();
            assert_eq!(reaped, &expected);
            for (id, name) in reaped {
                let task = &post.tasks[position(post, id)];
                assert_eq!(task.status, Status::Failed);
                assert_eq!(
                    task.error.as_deref(),
                    Some(format!("interrupted: worker {name} lost").as_str())
                );
                assert!(
                    history.interrupted.insert(id.clone()),
                    "{id} interrupted twice"
                );
            }
            assert!(
                post.workers
                    .iter()
                    .all(|w| !w.live || w.expires_at > post.now),
                "no expired lease survives a reaping"
            );
        }
        (Op::Retire(_) | Op::FailUntracked { .. }, Outcome::Interrupted(failed)) => {
            for (id, _) in failed {
                let t = position(post, id);
                assert_eq!(pre.tasks[t].status, Status::Running);
                assert_eq!(post.tasks[t].status, Status::Failed);
                assert!(
                    history.interrupted.insert(id.clone()),
                    "{id} interrupted twice"
                );
            }
            if let Op::FailUntracked { worker, .. } = op {
                let w = worker.of(pre.workers.len()).expect("a worker");
                assert!(
                    failed.is_empty() || pre.worker_live(w),
                    "fenced as an end is"
                );
            }
        }
        (Op::Cancel { task, .. }, Outcome::Cancel(answer)) => {
            let t = task.of(pre.tasks.len()).expect("a task");
            match answer {
                CancelRequest::Cancelled => {
                    assert_eq!(pre.tasks[t].status, Status::Queued);
                    assert_eq!(post.tasks[t].status, Status::Cancelled);
                }
                CancelRequest::Requested => {
                    assert_eq!(post.tasks[t].status, Status::Running);
                    assert!(post.tasks[t].cancel_requested);
                }
                _ => assert_eq!(pre.tasks, post.tasks),
            }
        }
        (Op::ClaimResults { ack, then, .. }, Outcome::Results(first, second)) => {
            for id in first.iter().chain(second) {
                let t = position(pre, id);
                assert!(pre.tasks[t].status.ended(), "only an end is delivered");
                assert_eq!(pre.tasks[t].notified_at, None);
                assert!(
                    !pre.kept(t),
                    "a result kept for a live front is not offered"
                );
            }
            assert!(
                first.iter().all(|id| !second.contains(id)),
                "two claimers never hold one result"
            );
            let acks = [(first, *ack), (second, then.is_some_and(|(_, a)| a))];
            for (ids, acked) in acks {
                for id in ids {
                    let t = position(post, id);
                    if acked {
                        history.taken[t] += 1;
                    } else {
                        assert_eq!(
                            post.tasks[t].notified_at, None,
                            "a dropped claim offers it again"
                        );
                    }
                }
            }
        }
        (Op::Adopt { front, .. }, Outcome::Ids(adopted)) => {
            let f = front.of(pre.fronts.len()).expect("a front");
            for id in adopted {
                let t = position(pre, id);
                assert!(pre.front_live(f), "only a live front adopts");
                assert!(
                    !pre.kept(t),
                    "a result kept for a live front is not adopted"
                );
                assert_eq!(post.tasks[t].front, Some(f));
            }
        }
        (Op::ResultFor { front, task }, Outcome::ResultFor(Some(ResultFor::This))) => {
            let f = front.of(pre.fronts.len()).expect("a front");
            let t = task.of(pre.tasks.len()).expect("a task");
            assert!(pre.front_live(f) && pre.tasks[t].front == Some(f));
        }
        (Op::MarkNotified(_), Outcome::Count(_)) => {
            for (t, (before, after)) in pre.tasks.iter().zip(&post.tasks).enumerate() {
                if before.notified_at.is_none() && after.notified_at.is_some() {
                    history.taken[t] += 1;
                }
            }
        }
        _ => {}
    }
    for (t, taken) in history.taken.iter().enumerate() {
        assert!(*taken <= 1, "task {t}'s result taken {taken} times");
    }
}

/// A claim's answer: the oldest eligible tasks first, within the limits, and
/// as many as there are room and tasks for.
fn check_claims(pre: &Model, worker: Pick, max: usize, claimed: &[(String, i64)], post: &Model) {
    let w = worker.of(pre.workers.len()).expect("a worker");
    assert!(claimed.len() <= max);
    if !claimed.is_empty() {
        assert!(pre.worker_live(w), "only a live lease claims");
    }
    // Replays the claims one by one on the state before.
    let mut state = pre.clone();
    for (id, fence) in claimed {
        let t = position(&state, id);
        let task = &state.tasks[t];
        assert_eq!(task.status, Status::Queued);
        assert!(
            state.workers[w].subagents.contains(&task.subagent),
            "a subagent it serves"
        );
        assert!(
            state.workers[w].workspaces.contains(&task.workspace),
            "{id} of a workspace its worker does not serve"
        );
        assert!(!state.full(task.workspace), "a workspace under its limit");
        // FIFO: every older queued task it serves is in a full workspace.
        for older in &state.tasks[..t] {
            if older.status == Status::Queued
                && state.workers[w].subagents.contains(&older.subagent)
                && state.workers[w].workspaces.contains(&older.workspace)
            {
                assert!(
                    state.full(older.workspace),
                    "{} was claimed before the older {}",
                    id,
                    older.id
                );
            }
        }
        state.tasks[t].status = Status::Running;
        state.tasks[t].worker = Some(w);
        assert_eq!(post.tasks[t].fence, Some(*fence));
    }
    // Stopped short only when nothing more could be claimed.
    if claimed.len() < max && pre.worker_live(w) {
        let room = state.running_of(w).len() < state.workers[w].capacity as usize;
        let eligible = state.tasks.iter().any(|t| {
            t.status == Status::Queued
                && state.workers[w].subagents.contains(&t.subagent)
                && state.workers[w].workspaces.contains(&t.workspace)
                && !state.full(t.workspace)
        });
        assert!(!(room && eligible), "a claim left an eligible task behind");
    }
}

/// A fenced write (an end, or progress when `end` is `None`): accepted only
/// under the current token, while the task runs and its worker's lease
/// holds; otherwise nothing changes.
fn check_write(
    pre: &Model,
    claim: Claim,
    token: Token,
    end: Option<EndAs>,
    answer: &Outcome,
    post: &Model,
) {
    let t = claim.task;
    let fence = token.of(claim.fence);
    let task = &pre.tasks[t];
    let lease_live = task.worker.is_some_and(|w| pre.worker_live(w));
    let current = task.fence == Some(fence) && task.status == Status::Running && lease_live;
    if token != Token::Current {
        assert!(!current, "a token other than the claim's is never current");
    }
    match answer {
        Outcome::Written if current => {
            if let Some(end) = end {
                let (status, output, error) = end.written();
                assert_eq!(
                    (
                        post.tasks[t].status,
                        &post.tasks[t].output,
                        &post.tasks[t].error
                    ),
                    (status, &output, &error)
                );
            }
        }
        Outcome::Written => {
            // Only the same end again under the same token: no change.
            let end = end.expect("progress past its claim is refused");
            let (status, output, error) = end.written();
            assert_eq!(
                (task.fence, task.status, &task.output, &task.error),
                (Some(fence), status, &output, &error)
            );
            assert_eq!(pre, post);
        }
        Outcome::Fenced => {
            assert!(!current, "a current write is accepted");
            assert_eq!(pre, post, "a refused write changes nothing");
        }
        other => panic!("a write answered {other:?}"),
    }
}

/// The pick of position `n` in a list of `len`.
fn at(n: usize, len: usize) -> Pick {
    Pick(len - 1 - n)
}

/// Every worker finishes or is lost, every queued task is run by a worker
/// that serves all, every front goes: then each task has ended exactly once,
/// and each result is taken exactly once.
fn drain(model: &mut Model, history: &mut History) {
    let mut ops = Vec::new();
    let (workers, claims) = (model.workers.len(), model.claims.len());
    for (w, worker) in model.workers.iter().enumerate() {
        if worker.live && w % 2 == 0 {
            ops.push(Op::Retire(at(w, workers)));
        }
    }
    for c in 0..claims {
        ops.push(Op::End {
            claim: at(c, claims),
            end: EndAs::Complete(0),
            token: Token::Current,
        });
    }
    ops.push(Op::Advance(10_000));
    ops.push(Op::Reap);
    for op in &ops {
        step(model, history, op);
    }
    assert!(
        model.tasks.iter().all(|t| t.status != Status::Running),
        "once every worker finished or was lost, no task runs"
    );
    let mut ops = vec![
        Op::SetMax {
            workspace: 0,
            max: None,
        },
        Op::SetMax {
            workspace: 1,
            max: None,
        },
        Op::Register {
            name: 0,
            capacity: 1_000,
            subagents: 0b11,
            workspaces: 0b11,
            lease_ms: 1_000,
        },
    ];
    ops.push(Op::Claim {
        worker: Pick(0),
        max: 1_000,
    });
    for op in &ops {
        step(model, history, op);
    }
    let (claims, fronts) = (model.claims.len(), model.fronts.len());
    let mut ops: Vec<Op> = (0..claims)
        .map(|c| Op::End {
            claim: at(c, claims),
            end: EndAs::Fail(0),
            token: Token::Current,
        })
        .collect();
    ops.extend((0..fronts).map(|f| Op::RetireFront(at(f, fronts))));
    ops.extend((0..WORKSPACES.len()).map(|workspace| Op::ClaimResults {
        workspace,
        max: 1_000,
        ack: true,
        then: None,
    }));
    for op in &ops {
        step(model, history, op);
    }
    for (t, task) in model.tasks.iter().enumerate() {
        assert!(task.status.ended(), "{} never ended", task.id);
        assert_eq!(history.ends[t], 1, "{} ended once", task.id);
        assert_eq!(history.taken[t], 1, "{}'s result taken once", task.id);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn every_step_keeps_the_fleets_invariants_and_every_task_ends_and_is_delivered_once(
        ops in model::ops(60)
    ) {
        let mut model = Model::new();
        let mut history = History::default();
        for op in &ops {
            step(&mut model, &mut history, op);
        }
        drain(&mut model, &mut history);
    }
}

/// The checks above can fail: a model that let a stale token write,
/// claimed past a workspace's limit, or claimed a task of a workspace its
/// worker does not serve, is caught.
#[test]
fn the_invariants_catch_a_stale_write_a_claim_past_the_limit_and_one_outside_the_workspaces() {
    let mut model = Model::new();
    let mut history = History::default();
    for op in [
        Op::SetMax {
            workspace: 0,
            max: Some(1),
        },
        Op::Submit {
            workspace: 0,
            subagent: 0,
            front: None,
            duplicate: None,
        },
        Op::Submit {
            workspace: 0,
            subagent: 0,
            front: None,
            duplicate: None,
        },
        Op::Register {
            name: 0,
            capacity: 2,
            subagents: 0b01,
            workspaces: 0b01,
            lease_ms: 1_000,
        },
        Op::Claim {
            worker: Pick(0),
            max: 2,
        },
    ] {
        step(&mut model, &mut history, &op);
    }
    assert_eq!(model.running_in(0), 1, "the limit held");

    // A claim past the limit.
    let pre = model.clone();
    let mut bad = model.clone();
    bad.tasks[1].status = Status::Running;
    bad.tasks[1].worker = Some(0);
    bad.tasks[1].fence = Some(2);
    bad.claims.push(Claim { task: 1, fence: 2 });
    let op = Op::Claim {
        worker: Pick(0),
        max: 1,
    };
    let answer = Outcome::Claimed(vec![("t1".to_owned(), 2)]);
    let caught = std::panic::catch_unwind(|| {
        check(&pre, &op, &answer, &bad, &mut History::default());
    });
    assert!(caught.is_err(), "a claim past the limit is caught");

    // A claim of a task of a workspace the worker does not serve.
    let mut elsewhere = Model::new();
    for op in [
        Op::Submit {
            workspace: 1,
            subagent: 0,
            front: None,
            duplicate: None,
        },
        Op::Register {
            name: 0,
            capacity: 1,
            subagents: 0b01,
            workspaces: 0b01,
            lease_ms: 1_000,
        },
    ] {
        step(&mut elsewhere, &mut History::default(), &op);
    }
    let claim = Op::Claim {
        worker: Pick(0),
        max: 1,
    };
    let pre_elsewhere = elsewhere.clone();
    assert_eq!(
        step(&mut elsewhere, &mut History::default(), &claim),
        Outcome::Claimed(Vec::new()),
        "the model claims nothing outside the worker's workspaces"
    );
    let mut bad = pre_elsewhere.clone();
    bad.tasks[0].status = Status::Running;
    bad.tasks[0].worker = Some(0);
    bad.tasks[0].fence = Some(1);
    bad.claims.push(Claim { task: 0, fence: 1 });
    let answer = Outcome::Claimed(vec![("t0".to_owned(), 1)]);
    let caught = std::panic::catch_unwind(|| {
        check(
            &pre_elsewhere,
            &claim,
            &answer,
            &bad,
            &mut History::default(),
        );
    });
    assert!(
        caught.is_err(),
        "a claim outside the worker's workspaces is caught"
    );

    // A write under a stale token that changed the task.
    let mut bad = model.clone();
    bad.tasks[0].status = Status::Completed;
    bad.tasks[0].output = Some("done".to_owned());
    let op = Op::End {
        claim: Pick(0),
        end: EndAs::Complete(0),
        token: Token::Older,
    };
    let caught = std::panic::catch_unwind(|| {
        check(&pre, &op, &Outcome::Written, &bad, &mut History::default());
    });
    assert!(caught.is_err(), "a stale write is caught");
}
