//! `Fleet` against its reference model (`tests/model`): the same generated
//! sequences of operations (several workers, fronts and result claimers,
//! two workspaces, a manual clock) run on a real PostgreSQL and on the
//! model, and every answer — which tasks a claim returns and their tokens,
//! refused writes, reaped tasks, results taken, leases' expiries — and,
//! after every step, every row of tasks, workers, fronts and workspaces
//! must be the same. The server-free tests of the model's invariants are
//! `tests/rules.rs`.
//!
//! Cases default to 64 sequences of up to 46 operations; set
//! `ASYNCTASK_PROPTEST_CASES` for longer runs.

use std::time::Duration;

use asynctask_fleet::{
    ClaimedTask, Fleet, FleetError, FrontLease, NewTask, ResultClaim, WorkerLease, WorkerSpec,
};
use asynctask_model::{Clock, ManualClock, MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_test_support::TestDatabase;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tokio_postgres::{Client, NoTls};

use crate::model::{
    ERRORS, EndAs, Front, MESSAGES, Model, Op, Outcome, START_MS, SUBAGENTS, Status, Task,
    WORKER_NAMES, WORKSPACES, Worker,
};

fn cases() -> u32 {
    std::env::var("ASYNCTASK_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// The real fleet's side of a run: the handles, and what it was given.
struct Real {
    /// Every operation but the second result claim.
    fleet: Fleet,
    /// The second result claimer.
    other: Fleet,
    clock: ManualClock,
    ids: Vec<String>,
    workers: Vec<WorkerLease>,
    fronts: Vec<FrontLease>,
    claims: Vec<ClaimedTask>,
}

fn interrupted(tasks: Vec<asynctask_fleet::Interrupted>) -> Outcome {
    let mut tasks: Vec<(String, String)> = tasks.into_iter().map(|t| (t.id, t.worker)).collect();
    tasks.sort();
    Outcome::Interrupted(tasks)
}

fn unexpected(op: &Op, err: &FleetError) -> ! {
    panic!("{op:?} failed: {err}")
}

impl Real {
    /// Runs `op` on the fleet; `model` is the state before it (for the
    /// inputs an operation is given: ids, workspaces).
    #[expect(
        clippy::too_many_lines,
        reason = "one arm per operation, each the mirror of the model's"
    )]
    async fn apply(&mut self, op: &Op, model: &Model) -> Outcome {
        match *op {
            Op::SetMax { workspace, max } => {
                let max = max.map_or(MaxAsyncTasks::UNLIMITED, |m| {
                    MaxAsyncTasks::new(i64::from(m)).expect("a valid limit")
                });
                let set = self.fleet.set_max_async(WORKSPACES[workspace], max).await;
                set.unwrap_or_else(|err| unexpected(op, &err));
                Outcome::Done
            }
            Op::Submit {
                workspace,
                subagent,
                front,
                duplicate,
            } => {
                let id = match duplicate {
                    Some(pick) => match pick.of(self.ids.len()) {
                        Some(t) => self.ids[t].clone(),
                        None => return Outcome::Skipped,
                    },
                    None => format!("t{}", self.ids.len()),
                };
                let mut task = NewTask::new(&id, WORKSPACES[workspace], SUBAGENTS[subagent], "go");
                if let Some(f) = front.and_then(|f| f.of(self.fronts.len())) {
                    task = task.with_front(&self.fronts[f]);
                }
                match self.fleet.submit(task).await {
                    Ok(_) => {
                        self.ids.push(id);
                        Outcome::Submitted
                    }
                    Err(FleetError::DuplicateId(_)) => Outcome::Duplicate,
                    Err(err) => unexpected(op, &err),
                }
            }
            Op::Register {
                name,
                capacity,
                subagents,
                workspaces,
                lease_ms,
            } => {
                let served = (0..SUBAGENTS.len())
                    .filter(|s| subagents & (1 << s) != 0)
                    .map(|s| SUBAGENTS[s]);
                let served_in = (0..WORKSPACES.len())
                    .filter(|s| workspaces & (1 << s) != 0)
                    .map(|s| WORKSPACES[s]);
                let spec = WorkerSpec::new(WORKER_NAMES[name], served)
                    .with_workspaces(served_in)
                    .with_capacity(capacity)
                    .with_lease(Duration::from_millis(lease_ms));
                let lease = match self.fleet.register_worker(&spec).await {
                    Ok(lease) => lease,
                    Err(FleetError::NoWorkspaces { .. }) => return Outcome::NoWorkspaces,
                    Err(err) => unexpected(op, &err),
                };
                let expires = lease.expires_at;
                self.workers.push(lease);
                Outcome::Lease(expires)
            }
            Op::Heartbeat(worker) => {
                let Some(w) = worker.of(self.workers.len()) else {
                    return Outcome::Skipped;
                };
                match self.fleet.heartbeat(&mut self.workers[w]).await {
                    Ok(()) => Outcome::Lease(self.workers[w].expires_at),
                    Err(FleetError::WorkerLost { .. }) => Outcome::Lost,
                    Err(err) => unexpected(op, &err),
                }
            }
            Op::Claim { worker, max } => {
                let Some(w) = worker.of(self.workers.len()) else {
                    return Outcome::Skipped;
                };
                match self.fleet.claim(&self.workers[w], max).await {
                    Ok(claimed) => {
                        let answer = claimed.iter().map(|t| (t.id.clone(), t.fence)).collect();
                        self.claims.extend(claimed);
                        Outcome::Claimed(answer)
                    }
                    Err(FleetError::WorkerLost { .. }) => Outcome::Lost,
                    Err(err) => unexpected(op, &err),
                }
            }
            Op::End { claim, end, token } => {
                let Some(c) = claim.of(self.claims.len()) else {
                    return Outcome::Skipped;
                };
                let mut task = self.claims[c].clone();
                task.fence = token.of(task.fence);
                let written = match end {
                    EndAs::Complete(n) => {
                        let output = OutputObject::new(TerminateReason::Goal)
                            .with_final_message(MESSAGES[n]);
                        self.fleet.complete(&task, &output).await
                    }
                    EndAs::Fail(n) => self.fleet.fail(&task, ERRORS[n]).await,
                    EndAs::Cancelled => self.fleet.cancelled(&task).await,
                };
                fenced(op, written)
            }
            Op::Progress { claim, token } => {
                let Some(c) = claim.of(self.claims.len()) else {
                    return Outcome::Skipped;
                };
                let mut task = self.claims[c].clone();
                task.fence = token.of(task.fence);
                let written = self
                    .fleet
                    .report_progress(&task, &format!("step {c}"))
                    .await;
                fenced(op, written)
            }
            Op::Reap => match self.fleet.reap_expired().await {
                Ok(tasks) => interrupted(tasks),
                Err(err) => unexpected(op, &err),
            },
            Op::Retire(worker) => {
                let Some(w) = worker.of(self.workers.len()) else {
                    return Outcome::Skipped;
                };
                let lease = &self.workers[w];
                let error = format!("interrupted: worker {} stopped", lease.name);
                match self.fleet.retire(lease, &error).await {
                    Ok(tasks) => interrupted(tasks),
                    Err(err) => unexpected(op, &err),
                }
            }
            Op::FailUntracked { worker, tracked } => {
                let Some(w) = worker.of(self.workers.len()) else {
                    return Outcome::Skipped;
                };
                let named: Vec<String> = model
                    .running_of(w)
                    .into_iter()
                    .enumerate()
                    .filter(|(n, _)| *n < 8 && tracked & (1 << n) != 0)
                    .map(|(_, t)| self.ids[t].clone())
                    .collect();
                match self.fleet.fail_untracked(&self.workers[w], &named).await {
                    Ok(tasks) => interrupted(tasks),
                    Err(err) => unexpected(op, &err),
                }
            }
            Op::Cancel {
                task,
                wrong_workspace,
            } => {
                let Some(t) = task.of(self.ids.len()) else {
                    return Outcome::Skipped;
                };
                let mut workspace = model.tasks[t].workspace;
                if wrong_workspace {
                    workspace = 1 - workspace;
                }
                match self
                    .fleet
                    .request_cancel(WORKSPACES[workspace], &self.ids[t])
                    .await
                {
                    Ok(answer) => Outcome::Cancel(answer),
                    Err(err) => unexpected(op, &err),
                }
            }
            Op::CancelRequests(worker) => {
                let Some(w) = worker.of(self.workers.len()) else {
                    return Outcome::Skipped;
                };
                match self.fleet.cancel_requests(&self.workers[w]).await {
                    Ok(mut ids) => {
                        ids.sort();
                        Outcome::Ids(ids)
                    }
                    Err(err) => unexpected(op, &err),
                }
            }
            Op::RegisterFront {
                workspace,
                lease_ms,
            } => {
                let front = self
                    .fleet
                    .register_front(
                        WORKSPACES[workspace],
                        "front",
                        Duration::from_millis(lease_ms),
                    )
                    .await
                    .unwrap_or_else(|err| unexpected(op, &err));
                let expires = front.expires_at;
                self.fronts.push(front);
                Outcome::Lease(expires)
            }
            Op::FrontHeartbeat(front) => {
                let Some(f) = front.of(self.fronts.len()) else {
                    return Outcome::Skipped;
                };
                match self.fleet.front_heartbeat(&mut self.fronts[f]).await {
                    Ok(()) => Outcome::Lease(self.fronts[f].expires_at),
                    Err(FleetError::FrontLost { .. }) => Outcome::Lost,
                    Err(err) => unexpected(op, &err),
                }
            }
            Op::RetireFront(front) => {
                let Some(f) = front.of(self.fronts.len()) else {
                    return Outcome::Skipped;
                };
                let retired = self.fleet.retire_front(&self.fronts[f]).await;
                retired.unwrap_or_else(|err| unexpected(op, &err));
                Outcome::Done
            }
            Op::Rebind { old, front } => {
                let (Some(old), Some(f)) = (old.of(self.fronts.len()), front.of(self.fronts.len()))
                else {
                    return Outcome::Skipped;
                };
                let old = self.fronts[old].front_id;
                match self.fleet.rebind_front(old, &self.fronts[f]).await {
                    Ok(moved) => Outcome::Count(moved),
                    Err(err) => unexpected(op, &err),
                }
            }
            Op::ClaimResults {
                workspace,
                max,
                ack,
                then,
            } => {
                self.claim_results(op, WORKSPACES[workspace], max, ack, then)
                    .await
            }
            Op::Adopt { front, max } => {
                let Some(f) = front.of(self.fronts.len()) else {
                    return Outcome::Skipped;
                };
                match self.fleet.adopt_results(&self.fronts[f], max).await {
                    Ok(tasks) => Outcome::Ids(tasks.into_iter().map(|t| t.info.id).collect()),
                    Err(err) => unexpected(op, &err),
                }
            }
            Op::ResultFor { front, task } => {
                let (Some(f), Some(t)) = (front.of(self.fronts.len()), task.of(self.ids.len()))
                else {
                    return Outcome::Skipped;
                };
                match self.fleet.result_for(&self.fronts[f], &self.ids[t]).await {
                    Ok(answer) => Outcome::ResultFor(answer),
                    Err(err) => unexpected(op, &err),
                }
            }
            Op::MarkNotified(ref picks) => {
                let ids: Vec<String> = picks
                    .iter()
                    .filter_map(|p| p.of(self.ids.len()))
                    .map(|t| self.ids[t].clone())
                    .collect();
                match self.fleet.mark_notified(&ids).await {
                    Ok(marked) => Outcome::Count(marked),
                    Err(err) => unexpected(op, &err),
                }
            }
            Op::Advance(ms) => {
                self.clock.advance(ms);
                Outcome::Done
            }
            Op::ToExpiry {
                front,
                pick,
                before,
            } => {
                let expiries: Vec<u64> = if front {
                    self.fronts.iter().map(|f| f.expires_at).collect()
                } else {
                    self.workers.iter().map(|w| w.expires_at).collect()
                };
                let Some(n) = pick.of(expiries.len()) else {
                    return Outcome::Skipped;
                };
                let to = expiries[n] - u64::from(before);
                if to > self.clock.now_ms() {
                    self.clock.set(to);
                }
                Outcome::Done
            }
        }
    }

    /// One handle claims results and, while it holds them, another does;
    /// each acknowledges or drops its claim, the first first.
    async fn claim_results(
        &mut self,
        op: &Op,
        workspace: &str,
        max: usize,
        ack: bool,
        then: Option<(usize, bool)>,
    ) -> Outcome {
        let Real { fleet, other, .. } = self;
        let first = fleet
            .claim_results(workspace, max)
            .await
            .unwrap_or_else(|err| unexpected(op, &err));
        let first_ids: Vec<String> = first.tasks().iter().map(|t| t.info.id.clone()).collect();
        let second_ids = match then {
            Some((max, second_ack)) => {
                let second = other
                    .claim_results(workspace, max)
                    .await
                    .unwrap_or_else(|err| unexpected(op, &err));
                let ids = second.tasks().iter().map(|t| t.info.id.clone()).collect();
                finish(op, first, ack).await;
                finish(op, second, second_ack).await;
                ids
            }
            None => {
                finish(op, first, ack).await;
                Vec::new()
            }
        };
        // A dropped claim's rollback is sent without waiting: a statement
        // after it on the same connection has it done.
        for handle in [&*fleet, &*other] {
            handle
                .task("")
                .await
                .unwrap_or_else(|err| unexpected(op, &err));
        }
        Outcome::Results(first_ids, second_ids)
    }

    /// The database's rows, read as the model holds them.
    async fn state(&self, raw: &Client) -> (Vec<Task>, Vec<Worker>, Vec<Front>, [Option<i32>; 2]) {
        let worker_of = |id: Option<i64>| {
            id.map(|id| {
                self.workers
                    .iter()
                    .position(|w| w.worker_id == id)
                    .expect("a registration of this run")
            })
        };
        let front_of = |id: Option<i64>| {
            id.map(|id| {
                self.fronts
                    .iter()
                    .position(|f| f.front_id == id)
                    .expect("a front of this run")
            })
        };
        let position =
            |list: &[&str], name: &str| list.iter().position(|n| *n == name).expect("a known name");
        let ms = |v: Option<i64>| v.map(|v| u64::try_from(v).expect("a time"));
        // One round trip: the four reads are pipelined.
        let (tasks_rows, workers_rows, fronts_rows, workspaces_rows) = tokio::join!(
            raw.query("SELECT id, workspace, subagent_name, status, worker_id, fence, started_at,
                    completed_at, notified_at, output, error, progress, front_id, cancel_requested
                 FROM asynctask_tasks ORDER BY seq", &[]),
            raw.query("SELECT name, capacity, subagents, lease_ms, lease_expires_at, state,
                    workspaces
                 FROM asynctask_workers ORDER BY id", &[]),
            raw.query("SELECT workspace, lease_ms, lease_expires_at, state FROM asynctask_fronts ORDER BY id", &[]),
            raw.query("SELECT name, max_async FROM asynctask_workspaces", &[]),
        );
        let [tasks_rows, workers_rows, fronts_rows, workspaces_rows] =
            [tasks_rows, workers_rows, fronts_rows, workspaces_rows]
                .map(|rows| rows.expect("read"));
        let tasks = tasks_rows
            .iter()
            .map(|row| Task {
                id: row.get(0),
                workspace: position(&WORKSPACES, row.get(1)),
                subagent: position(&SUBAGENTS, row.get(2)),
                status: match row.get::<_, &str>(3) {
                    "queued" => Status::Queued,
                    "running" => Status::Running,
                    "completed" => Status::Completed,
                    "failed" => Status::Failed,
                    _ => Status::Cancelled,
                },
                worker: worker_of(row.get(4)),
                fence: row.get(5),
                started_at: ms(row.get(6)),
                completed_at: ms(row.get(7)),
                notified_at: ms(row.get(8)),
                output: row.get::<_, Option<&str>>(9).map(|json| {
                    let output: OutputObject = serde_json::from_str(json).expect("an output");
                    output.final_message.expect("a final message")
                }),
                error: row.get(10),
                progress: row.get(11),
                front: front_of(row.get(12)),
                cancel_requested: row.get(13),
            })
            .collect();
        let workers = workers_rows
            .iter()
            .map(|row| Worker {
                name: position(&WORKER_NAMES, row.get(0)),
                capacity: u32::try_from(row.get::<_, i32>(1)).expect("a capacity"),
                subagents: row
                    .get::<_, Vec<String>>(2)
                    .iter()
                    .map(|s| position(&SUBAGENTS, s))
                    .collect(),
                workspaces: row
                    .get::<_, Vec<String>>(6)
                    .iter()
                    .map(|s| position(&WORKSPACES, s))
                    .collect(),
                lease_ms: ms(row.get(3)).expect("a lease"),
                expires_at: ms(row.get(4)).expect("an expiry"),
                live: row.get::<_, &str>(5) == "live",
            })
            .collect();
        let fronts = fronts_rows
            .iter()
            .map(|row| Front {
                workspace: position(&WORKSPACES, row.get(0)),
                lease_ms: ms(row.get(1)).expect("a lease"),
                expires_at: ms(row.get(2)).expect("an expiry"),
                live: row.get::<_, &str>(3) == "live",
            })
            .collect();
        let mut max_async = [None, None];
        for row in workspaces_rows {
            max_async[position(&WORKSPACES, row.get(0))] = Some(row.get(1));
        }
        (tasks, workers, fronts, max_async)
    }
}

/// Acknowledges a result claim, or drops it.
async fn finish(op: &Op, claim: ResultClaim<'_>, ack: bool) {
    if ack {
        claim
            .acknowledge()
            .await
            .unwrap_or_else(|err| unexpected(op, &err));
    }
}

fn fenced(op: &Op, written: Result<(), FleetError>) -> Outcome {
    match written {
        Ok(()) => Outcome::Written,
        Err(FleetError::Fenced { .. }) => Outcome::Fenced,
        Err(err) => unexpected(op, &err),
    }
}

/// Runs `ops` on an emptied database and on a new model, step by step.
async fn run(db: &TestDatabase, raw: &Client, ops: &[Op]) -> Result<(), TestCaseError> {
    // Emptied, its numbering (registrations, fronts, tokens) from 1 again.
    raw.batch_execute(
        "TRUNCATE asynctask_messages, asynctask_questions, asynctask_tasks, asynctask_workers,
            asynctask_fronts, asynctask_workspaces RESTART IDENTITY CASCADE;
         ALTER SEQUENCE asynctask_fence RESTART",
    )
    .await
    .expect("emptied");
    let clock = ManualClock::new(START_MS);
    let mut real = Real {
        fleet: crate::connect(db, &clock).await,
        other: crate::connect(db, &clock).await,
        clock,
        ids: Vec::new(),
        workers: Vec::new(),
        fronts: Vec::new(),
        claims: Vec::new(),
    };
    let mut model = Model::new();
    for (n, op) in ops.iter().enumerate() {
        let answer = real.apply(op, &model).await;
        let expected = model.apply(op);
        prop_assert_eq!(&answer, &expected, "step {}: {:?}", n, op);
        let (tasks, workers, fronts, max_async) = real.state(raw).await;
        prop_assert_eq!(&tasks, &model.tasks, "tasks after step {}: {:?}", n, op);
        prop_assert_eq!(
            &workers,
            &model.workers,
            "workers after step {}: {:?}",
            n,
            op
        );
        prop_assert_eq!(&fronts, &model.fronts, "fronts after step {}: {:?}", n, op);
        prop_assert_eq!(
            max_async,
            model.max_async,
            "workspaces after step {}: {:?}",
            n,
            op
        );
    }
    Ok(())
}

#[test]
fn the_fleet_answers_every_operation_as_the_model_does() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // Made once: the schema is migrated before the first case empties it.
    let db = runtime.block_on(crate::database("model"));
    let (raw, connection) = runtime
        .block_on(db.config().connect(NoTls))
        .expect("connects");
    let driver = runtime.spawn(connection);
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&crate::model::ops(40), |ops| {
        runtime.block_on(run(&db, &raw, &ops))
    });
    drop(raw);
    runtime.block_on(driver).expect("the connection ended").ok();
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
