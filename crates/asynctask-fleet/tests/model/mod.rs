//! A reference model of the fleet's rules for claims, leases, fencing tokens
//! and delivery: plain data changed by plain functions, with no database and
//! no clock but a number. It is what `Fleet`'s statements mean, said without
//! SQL:
//!
//! - A worker registers only naming at least one workspace.
//! - A worker's lease is live while it is registered (not lost or retired)
//!   and the clock is before its expiry; a heartbeat renews a live lease for
//!   its length from now, and an expired one is lost for good.
//! - A claim, made only under a live lease and below the worker's capacity,
//!   takes the oldest queued task (submission order) of a subagent the worker
//!   serves in a workspace it serves (never a task of another workspace),
//!   skipping the workspaces whose running tasks are at their
//!   `task-max-async`, and gives it a fencing token greater than every token
//!   before it.
//! - A task's end (and its progress) is written only under its current token,
//!   while it runs and its worker's lease is live; the same end written again
//!   under the same token changes nothing and is not refused; any other write
//!   is refused and changes nothing.
//! - Reaping makes every live worker whose lease expired lost, and fails
//!   its running tasks with `interrupted: worker <name> lost`. Retiring does
//!   the same for one worker, now, with the error it is given; failing the
//!   untracked tasks does it for the running tasks a live worker does not
//!   name.
//! - An ended result is offered, oldest ended first, to one result claimer
//!   at a time (others skip it while a claim holds it) unless it is kept for
//!   a front whose lease is live; acknowledging marks it delivered for good.
//!   A live front adopts the results of gone fronts; it may take one only
//!   while it is kept for it and its lease is live.
//! - A cancel ends a queued task at once, and flags a running one for its
//!   worker.
//!
//! Both the server-free property tests (`tests/rules.rs`, which check the
//! invariants these rules promise) and the differential test against a real
//! server (`tests/it/differential.rs`, which checks `Fleet` does exactly this) use
//! it, with the same generated operations.

use asynctask_fleet::{CancelRequest, ResultFor};
use proptest::prelude::*;

/// The workspaces tasks go to.
pub(crate) const WORKSPACES: [&str; 2] = ["ws0", "ws1"];
/// The subagents tasks name; a worker serves a non-empty set of them.
pub(crate) const SUBAGENTS: [&str; 2] = ["a", "b"];
/// Worker names: a name registered again is a new registration.
pub(crate) const WORKER_NAMES: [&str; 3] = ["w0", "w1", "w2"];
/// A workspace's `task-max-async` until one is set.
pub(crate) const DEFAULT_MAX_ASYNC: i32 = 5;
/// The clock's reading when a run starts.
pub(crate) const START_MS: u64 = 1_000_000;
/// Final messages of completed tasks.
pub(crate) const MESSAGES: [&str; 2] = ["done", "done again"];
/// Errors of failed tasks: one is the reaper's own text for `w0`.
pub(crate) const ERRORS: [&str; 3] = ["exit status 1", "interrupted: worker w0 lost", "timed out"];

/// A position in a list that may be empty, counted from its end (the
/// newest) and taken modulo its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pick(pub(crate) usize);

impl Pick {
    /// The position in a list of `len`, if it has any.
    #[must_use]
    pub(crate) fn of(self, len: usize) -> Option<usize> {
        (len > 0).then(|| len - 1 - self.0 % len)
    }
}

/// A task's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Queued,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    /// Whether it is an end.
    #[must_use]
    pub(crate) fn ended(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

/// A task as the database holds it (positions stand for workspaces,
/// subagents, registrations and fronts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Task {
    pub(crate) id: String,
    pub(crate) workspace: usize,
    pub(crate) subagent: usize,
    pub(crate) status: Status,
    /// The registration that claimed it.
    pub(crate) worker: Option<usize>,
    pub(crate) fence: Option<i64>,
    pub(crate) started_at: Option<u64>,
    pub(crate) completed_at: Option<u64>,
    pub(crate) notified_at: Option<u64>,
    /// A completed task's final message.
    pub(crate) output: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) progress: Option<String>,
    /// The front its result is kept for.
    pub(crate) front: Option<usize>,
    pub(crate) cancel_requested: bool,
}

/// A worker's registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Worker {
    pub(crate) name: usize,
    pub(crate) capacity: u32,
    /// Positions in [`SUBAGENTS`], ascending.
    pub(crate) subagents: Vec<usize>,
    /// Positions in [`WORKSPACES`], ascending: the only ones it claims in.
    pub(crate) workspaces: Vec<usize>,
    pub(crate) lease_ms: u64,
    pub(crate) expires_at: u64,
    /// Registered and neither reaped nor retired.
    pub(crate) live: bool,
}

/// A front's registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Front {
    pub(crate) workspace: usize,
    pub(crate) lease_ms: u64,
    pub(crate) expires_at: u64,
    /// Registered and not retired.
    pub(crate) live: bool,
}

/// A claim a worker holds: the task and its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    pub(crate) task: usize,
    pub(crate) fence: i64,
}

/// How a worker ends a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndAs {
    /// Completed, with [`MESSAGES`]`[n]` as its final message.
    Complete(usize),
    /// Failed with [`ERRORS`]`[n]`.
    Fail(usize),
    Cancelled,
}

impl EndAs {
    /// The status, output and error it writes.
    #[must_use]
    pub(crate) fn written(self) -> (Status, Option<String>, Option<String>) {
        match self {
            EndAs::Complete(n) => (Status::Completed, Some(MESSAGES[n].to_owned()), None),
            EndAs::Fail(n) => (Status::Failed, None, Some(ERRORS[n].to_owned())),
            EndAs::Cancelled => (Status::Cancelled, None, None),
        }
    }
}

/// Which token a write carries: its claim's, or one next to it (a stale or
/// a forged one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Token {
    Current,
    Older,
    Newer,
}

impl Token {
    /// The token carried for a claim whose token is `fence`.
    #[must_use]
    pub(crate) fn of(self, fence: i64) -> i64 {
        match self {
            Token::Current => fence,
            Token::Older => fence - 1,
            Token::Newer => fence + 1,
        }
    }
}

/// One operation on the fleet. Picks of registrations, fronts, claims and
/// tasks are taken modulo how many there are; with none, the operation is
/// skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// `set_max_async` (`None`: unlimited).
    SetMax {
        workspace: usize,
        max: Option<i32>,
    },
    /// `submit` of a new task, or of one with an existing id.
    Submit {
        workspace: usize,
        subagent: usize,
        front: Option<Pick>,
        duplicate: Option<Pick>,
    },
    /// `register_worker`; `subagents` is a mask over [`SUBAGENTS`] (1..=3),
    /// `workspaces` one over [`WORKSPACES`] (0, naming none, is refused).
    Register {
        name: usize,
        capacity: u32,
        subagents: u8,
        workspaces: u8,
        lease_ms: u64,
    },
    Heartbeat(Pick),
    Claim {
        worker: Pick,
        max: usize,
    },
    /// `complete`/`fail`/`cancelled` for a claim.
    End {
        claim: Pick,
        end: EndAs,
        token: Token,
    },
    /// `report_progress` for a claim.
    Progress {
        claim: Pick,
        token: Token,
    },
    Reap,
    /// `retire` with `interrupted: worker <name> stopped`.
    Retire(Pick),
    /// `fail_untracked`: the worker names its running tasks (submission
    /// order) whose bit is set in `tracked`.
    FailUntracked {
        worker: Pick,
        tracked: u8,
    },
    /// `request_cancel` of a task, in its workspace or the other one.
    Cancel {
        task: Pick,
        wrong_workspace: bool,
    },
    CancelRequests(Pick),
    RegisterFront {
        workspace: usize,
        lease_ms: u64,
    },
    FrontHeartbeat(Pick),
    RetireFront(Pick),
    /// `rebind_front(old, front)`.
    Rebind {
        old: Pick,
        front: Pick,
    },
    /// `claim_results` on one handle, and while it holds its results
    /// (`then`) on another; each acknowledged or dropped, the first first.
    ClaimResults {
        workspace: usize,
        max: usize,
        ack: bool,
        then: Option<(usize, bool)>,
    },
    Adopt {
        front: Pick,
        max: usize,
    },
    ResultFor {
        front: Pick,
        task: Pick,
    },
    MarkNotified(Vec<Pick>),
    /// The clock moves on.
    Advance(u64),
    /// The clock moves to the very millisecond a worker's lease (or a
    /// front's) expires, or the one before, if that is still ahead.
    ToExpiry {
        front: bool,
        pick: Pick,
        before: bool,
    },
}

/// What an operation answered: the model's and `Fleet`'s must be equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing to pick from: not run.
    Skipped,
    Done,
    Submitted,
    Duplicate,
    /// A registration or a renewal: the lease's expiry.
    Lease(u64),
    /// The lease had expired (or the registration ended).
    Lost,
    /// A registration naming no workspace, refused.
    NoWorkspaces,
    /// The tasks claimed, in order, with their tokens.
    Claimed(Vec<(String, i64)>),
    Written,
    Fenced,
    /// Tasks failed by reaping, retiring or failing the untracked: their
    /// ids and workers' names, sorted.
    Interrupted(Vec<(String, String)>),
    Cancel(CancelRequest),
    /// Ids: cancel requests (sorted), adopted results (in order).
    Ids(Vec<String>),
    /// The results offered to the first claimer and to the second.
    Results(Vec<String>, Vec<String>),
    ResultFor(Option<ResultFor>),
    Count(u64),
}

/// The fleet's whole state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Model {
    pub(crate) now: u64,
    /// Each workspace's `task-max-async` once it exists (-1: unlimited).
    pub(crate) max_async: [Option<i32>; 2],
    /// In submission order.
    pub(crate) tasks: Vec<Task>,
    pub(crate) workers: Vec<Worker>,
    pub(crate) fronts: Vec<Front>,
    /// Every claim made, in order.
    pub(crate) claims: Vec<Claim>,
    /// The last token given.
    pub(crate) last_fence: i64,
}

impl Default for Model {
    fn default() -> Self {
        Model::new()
    }
}

impl Model {
    #[must_use]
    pub(crate) fn new() -> Model {
        Model {
            now: START_MS,
            max_async: [None, None],
            tasks: Vec::new(),
            workers: Vec::new(),
            fronts: Vec::new(),
            claims: Vec::new(),
            last_fence: 0,
        }
    }

    /// Whether registration `w`'s lease is live now.
    #[must_use]
    pub(crate) fn worker_live(&self, w: usize) -> bool {
        let worker = &self.workers[w];
        worker.live && worker.expires_at > self.now
    }

    /// Whether front `f`'s lease is live now.
    #[must_use]
    pub(crate) fn front_live(&self, f: usize) -> bool {
        let front = &self.fronts[f];
        front.live && front.expires_at > self.now
    }

    /// The running tasks of a workspace.
    #[must_use]
    pub(crate) fn running_in(&self, workspace: usize) -> usize {
        self.tasks
            .iter()
            .filter(|t| t.workspace == workspace && t.status == Status::Running)
            .count()
    }

    /// The running tasks of registration `w`, in submission order.
    #[must_use]
    pub(crate) fn running_of(&self, w: usize) -> Vec<usize> {
        (0..self.tasks.len())
            .filter(|&t| self.tasks[t].worker == Some(w) && self.tasks[t].status == Status::Running)
            .collect()
    }

    /// Whether a workspace runs as many tasks as its limit allows.
    #[must_use]
    pub(crate) fn full(&self, workspace: usize) -> bool {
        let max = self.max_async[workspace].unwrap_or(DEFAULT_MAX_ASYNC);
        max >= 0 && self.running_in(workspace) >= usize::try_from(max).unwrap_or(0)
    }

    /// Whether an ended, undelivered result is kept for a live front.
    #[must_use]
    pub(crate) fn kept(&self, t: usize) -> bool {
        self.tasks[t].front.is_some_and(|f| self.front_live(f))
    }

    /// The results of a workspace any claimer may take now, oldest ended
    /// first.
    #[must_use]
    pub(crate) fn deliverable(&self, workspace: usize) -> Vec<usize> {
        let mut ids: Vec<usize> = (0..self.tasks.len())
            .filter(|&t| {
                let task = &self.tasks[t];
                task.workspace == workspace
                    && task.notified_at.is_none()
                    && task.status.ended()
                    && !self.kept(t)
            })
            .collect();
        ids.sort_by_key(|&t| (self.tasks[t].completed_at, t));
        ids
    }

    /// Applies `op`, returning what the fleet answers.
    pub(crate) fn apply(&mut self, op: &Op) -> Outcome {
        match *op {
            Op::SetMax { workspace, max } => {
                self.max_async[workspace] = Some(max.unwrap_or(-1));
                Outcome::Done
            }
            Op::Submit {
                workspace,
                subagent,
                front,
                duplicate,
            } => self.submit(workspace, subagent, front, duplicate),
            Op::Register {
                name,
                capacity,
                subagents,
                workspaces,
                lease_ms,
            } => {
                if workspaces == 0 {
                    return Outcome::NoWorkspaces;
                }
                let expires_at = self.now + lease_ms;
                self.workers.push(Worker {
                    name,
                    capacity,
                    subagents: (0..SUBAGENTS.len())
                        .filter(|s| subagents & (1 << s) != 0)
                        .collect(),
                    workspaces: (0..WORKSPACES.len())
                        .filter(|s| workspaces & (1 << s) != 0)
                        .collect(),
                    lease_ms,
                    expires_at,
                    live: true,
                });
                Outcome::Lease(expires_at)
            }
            Op::Heartbeat(worker) => {
                let Some(w) = worker.of(self.workers.len()) else {
                    return Outcome::Skipped;
                };
                if !self.worker_live(w) {
                    return Outcome::Lost;
                }
                self.workers[w].expires_at = self.now + self.workers[w].lease_ms;
                Outcome::Lease(self.workers[w].expires_at)
            }
            Op::Claim { worker, max } => {
                let Some(w) = worker.of(self.workers.len()) else {
                    return Outcome::Skipped;
                };
                self.claim(w, max)
            }
            Op::End { claim, end, token } => {
                let Some(c) = claim.of(self.claims.len()) else {
                    return Outcome::Skipped;
                };
                self.end(self.claims[c].task, token.of(self.claims[c].fence), end)
            }
            Op::Progress { claim, token } => {
                let Some(c) = claim.of(self.claims.len()) else {
                    return Outcome::Skipped;
                };
                let Claim { task, fence } = self.claims[c];
                if !self.current(task, token.of(fence)) {
                    return Outcome::Fenced;
                }
                self.tasks[task].progress = Some(format!("step {c}"));
                Outcome::Written
            }
            Op::Reap => self.reap(),
            Op::Retire(worker) => {
                let Some(w) = worker.of(self.workers.len()) else {
                    return Outcome::Skipped;
                };
                if !self.workers[w].live {
                    return Outcome::Interrupted(Vec::new());
                }
                self.workers[w].live = false;
                let error = format!(
                    "interrupted: worker {} stopped",
                    WORKER_NAMES[self.workers[w].name]
                );
                self.interrupt(w, &self.running_of(w), &error)
            }
            Op::FailUntracked { worker, tracked } => {
                let Some(w) = worker.of(self.workers.len()) else {
                    return Outcome::Skipped;
                };
                if !self.worker_live(w) {
                    return Outcome::Interrupted(Vec::new());
                }
                let untracked: Vec<usize> = self
                    .running_of(w)
                    .into_iter()
                    .enumerate()
                    .filter(|(n, _)| *n >= 8 || tracked & (1 << n) == 0)
                    .map(|(_, t)| t)
                    .collect();
                let error = format!(
                    "interrupted: worker {} lost track of it",
                    WORKER_NAMES[self.workers[w].name]
                );
                self.interrupt(w, &untracked, &error)
            }
            Op::Cancel {
                task,
                wrong_workspace,
            } => {
                let Some(t) = task.of(self.tasks.len()) else {
                    return Outcome::Skipped;
                };
                if wrong_workspace {
                    return Outcome::Cancel(CancelRequest::Ended);
                }
                let now = self.now;
                let task = &mut self.tasks[t];
                Outcome::Cancel(match task.status {
                    Status::Queued => {
                        task.status = Status::Cancelled;
                        task.completed_at = Some(now);
                        CancelRequest::Cancelled
                    }
                    Status::Running => {
                        task.cancel_requested = true;
                        CancelRequest::Requested
                    }
                    _ => CancelRequest::Ended,
                })
            }
            Op::CancelRequests(worker) => {
                let Some(w) = worker.of(self.workers.len()) else {
                    return Outcome::Skipped;
                };
                let mut ids: Vec<String> = self
                    .running_of(w)
                    .into_iter()
                    .filter(|&t| self.tasks[t].cancel_requested)
                    .map(|t| self.tasks[t].id.clone())
                    .collect();
                ids.sort();
                Outcome::Ids(ids)
            }
            Op::RegisterFront {
                workspace,
                lease_ms,
            } => {
                self.fronts.push(Front {
                    workspace,
                    lease_ms,
                    expires_at: self.now + lease_ms,
                    live: true,
                });
                Outcome::Lease(self.now + lease_ms)
            }
            Op::FrontHeartbeat(front) => {
                let Some(f) = front.of(self.fronts.len()) else {
                    return Outcome::Skipped;
                };
                if !self.front_live(f) {
                    return Outcome::Lost;
                }
                self.fronts[f].expires_at = self.now + self.fronts[f].lease_ms;
                Outcome::Lease(self.fronts[f].expires_at)
            }
            Op::RetireFront(front) => {
                let Some(f) = front.of(self.fronts.len()) else {
                    return Outcome::Skipped;
                };
                self.fronts[f].live = false;
                Outcome::Done
            }
            Op::Rebind { old, front } => {
                let (Some(old), Some(f)) = (old.of(self.fronts.len()), front.of(self.fronts.len()))
                else {
                    return Outcome::Skipped;
                };
                let mut moved = 0;
                for task in &mut self.tasks {
                    if task.front == Some(old) && task.notified_at.is_none() {
                        task.front = Some(f);
                        moved += 1;
                    }
                }
                Outcome::Count(moved)
            }
            Op::ClaimResults {
                workspace,
                max,
                ack,
                then,
            } => {
                let first: Vec<usize> = self.deliverable(workspace).into_iter().take(max).collect();
                let second: Vec<usize> = match then {
                    Some((max, _)) => self
                        .deliverable(workspace)
                        .into_iter()
                        .filter(|t| !first.contains(t))
                        .take(max)
                        .collect(),
                    None => Vec::new(),
                };
                for (taken, acked) in [(&first, ack), (&second, then.is_some_and(|(_, a)| a))] {
                    if acked {
                        for &t in taken {
                            self.tasks[t].notified_at = Some(self.now);
                        }
                    }
                }
                Outcome::Results(self.ids(&first), self.ids(&second))
            }
            Op::Adopt { front, max } => {
                let Some(f) = front.of(self.fronts.len()) else {
                    return Outcome::Skipped;
                };
                if !self.front_live(f) {
                    return Outcome::Ids(Vec::new());
                }
                let adopted: Vec<usize> = self
                    .deliverable(self.fronts[f].workspace)
                    .into_iter()
                    .take(max)
                    .collect();
                for &t in &adopted {
                    self.tasks[t].front = Some(f);
                }
                Outcome::Ids(self.ids(&adopted))
            }
            Op::ResultFor { front, task } => {
                let (Some(f), Some(t)) = (front.of(self.fronts.len()), task.of(self.tasks.len()))
                else {
                    return Outcome::Skipped;
                };
                Outcome::ResultFor(Some(
                    match (self.tasks[t].front == Some(f), self.front_live(f)) {
                        (false, _) => ResultFor::Another,
                        (true, true) => ResultFor::This,
                        (true, false) => ResultFor::Lapsed,
                    },
                ))
            }
            Op::MarkNotified(ref picks) => {
                let mut marked = 0;
                for pick in picks {
                    if let Some(t) = pick.of(self.tasks.len())
                        && self.tasks[t].notified_at.is_none()
                    {
                        self.tasks[t].notified_at = Some(self.now);
                        marked += 1;
                    }
                }
                Outcome::Count(marked)
            }
            Op::Advance(ms) => {
                self.now += ms;
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
                self.now = self.now.max(expiries[n] - u64::from(before));
                Outcome::Done
            }
        }
    }

    fn ids(&self, tasks: &[usize]) -> Vec<String> {
        tasks.iter().map(|&t| self.tasks[t].id.clone()).collect()
    }

    fn submit(
        &mut self,
        workspace: usize,
        subagent: usize,
        front: Option<Pick>,
        duplicate: Option<Pick>,
    ) -> Outcome {
        if let Some(duplicate) = duplicate {
            // Refused whole: not even its workspace is made.
            return match duplicate.of(self.tasks.len()) {
                Some(_) => Outcome::Duplicate,
                None => Outcome::Skipped,
            };
        }
        if self.max_async[workspace].is_none() {
            self.max_async[workspace] = Some(DEFAULT_MAX_ASYNC);
        }
        self.tasks.push(Task {
            id: format!("t{}", self.tasks.len()),
            workspace,
            subagent,
            status: Status::Queued,
            worker: None,
            fence: None,
            started_at: None,
            completed_at: None,
            notified_at: None,
            output: None,
            error: None,
            progress: None,
            front: front.and_then(|f| f.of(self.fronts.len())),
            cancel_requested: false,
        });
        Outcome::Submitted
    }

    fn claim(&mut self, w: usize, max: usize) -> Outcome {
        let mut claimed = Vec::new();
        while claimed.len() < max {
            if !self.worker_live(w) {
                if claimed.is_empty() {
                    return Outcome::Lost;
                }
                break;
            }
            let worker = &self.workers[w];
            if self.running_of(w).len() >= worker.capacity as usize {
                break;
            }
            let next = (0..self.tasks.len()).find(|&t| {
                let task = &self.tasks[t];
                task.status == Status::Queued
                    && worker.subagents.contains(&task.subagent)
                    && worker.workspaces.contains(&task.workspace)
                    && !self.full(task.workspace)
            });
            let Some(t) = next else { break };
            self.last_fence += 1;
            let task = &mut self.tasks[t];
            task.status = Status::Running;
            task.worker = Some(w);
            task.started_at = Some(self.now);
            task.fence = Some(self.last_fence);
            self.claims.push(Claim {
                task: t,
                fence: self.last_fence,
            });
            claimed.push((task.id.clone(), self.last_fence));
        }
        Outcome::Claimed(claimed)
    }

    /// Whether a write carrying `fence` about task `t` is accepted: the
    /// claim current, the task running, its worker's lease live.
    #[must_use]
    pub(crate) fn current(&self, t: usize, fence: i64) -> bool {
        let task = &self.tasks[t];
        task.fence == Some(fence)
            && task.status == Status::Running
            && task.worker.is_some_and(|w| self.worker_live(w))
    }

    fn end(&mut self, t: usize, fence: i64, end: EndAs) -> Outcome {
        let (status, output, error) = end.written();
        if self.current(t, fence) {
            let task = &mut self.tasks[t];
            task.status = status;
            task.output = output;
            task.error = error;
            task.completed_at = Some(self.now);
            return Outcome::Written;
        }
        // The same end again under the same claim: done already.
        let task = &self.tasks[t];
        if task.fence == Some(fence)
            && task.status == status
            && task.output == output
            && task.error == error
        {
            Outcome::Written
        } else {
            Outcome::Fenced
        }
    }

    fn reap(&mut self) -> Outcome {
        let expired: Vec<usize> = (0..self.workers.len())
            .filter(|&w| self.workers[w].live && self.workers[w].expires_at <= self.now)
            .collect();
        let mut interrupted = Vec::new();
        for w in expired {
            self.workers[w].live = false;
            let error = format!(
                "interrupted: worker {} lost",
                WORKER_NAMES[self.workers[w].name]
            );
            if let Outcome::Interrupted(these) = self.interrupt(w, &self.running_of(w), &error) {
                interrupted.extend(these);
            }
        }
        interrupted.sort();
        Outcome::Interrupted(interrupted)
    }

    /// Fails tasks `ts` of registration `w` with `error`, now.
    fn interrupt(&mut self, w: usize, ts: &[usize], error: &str) -> Outcome {
        let mut interrupted = Vec::new();
        for &t in ts {
            let task = &mut self.tasks[t];
            task.status = Status::Failed;
            task.completed_at = Some(self.now);
            task.error = Some(error.to_owned());
            interrupted.push((
                task.id.clone(),
                WORKER_NAMES[self.workers[w].name].to_owned(),
            ));
        }
        interrupted.sort();
        Outcome::Interrupted(interrupted)
    }
}

/// Mostly one of the newest.
fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![3 => 0..3usize, 1 => 0..64usize].prop_map(Pick)
}

fn token() -> impl Strategy<Value = Token> {
    prop_oneof![8 => Just(Token::Current), 1 => Just(Token::Older), 1 => Just(Token::Newer)]
}

fn end_as() -> impl Strategy<Value = EndAs> {
    prop_oneof![
        (0..MESSAGES.len()).prop_map(EndAs::Complete),
        (0..ERRORS.len()).prop_map(EndAs::Fail),
        Just(EndAs::Cancelled),
    ]
}

fn register() -> impl Strategy<Value = Op> {
    (
        0..WORKER_NAMES.len(),
        1..5u32,
        1..4u8,
        prop_oneof![1 => Just(0u8), 12 => 1..4u8],
        prop_oneof![Just(2_000u64), Just(5_000)],
    )
        .prop_map(
            |(name, capacity, subagents, workspaces, lease_ms)| Op::Register {
                name,
                capacity,
                subagents,
                workspaces,
                lease_ms,
            },
        )
}

/// One operation, weighted so that sequences of a few dozen run tasks
/// through claims, ends, expiries and deliveries.
pub(crate) fn op() -> impl Strategy<Value = Op> {
    let ws = 0..WORKSPACES.len();
    prop_oneof![
        2 => (ws.clone(), prop_oneof![Just(None), (1..4i32).prop_map(Some)])
            .prop_map(|(workspace, max)| Op::SetMax { workspace, max }),
        12 => (ws.clone(), 0..SUBAGENTS.len(), proptest::option::weighted(0.4, pick()),
               proptest::option::weighted(0.05, pick()))
            .prop_map(|(workspace, subagent, front, duplicate)| Op::Submit {
                workspace, subagent, front, duplicate,
            }),
        5 => register(),
        8 => pick().prop_map(Op::Heartbeat),
        12 => (pick(), prop_oneof![1 => Just(0usize), 6 => 1..4usize]).prop_map(|(worker, max)| Op::Claim { worker, max }),
        12 => (pick(), end_as(), token()).prop_map(|(claim, end, token)| Op::End { claim, end, token }),
        1 => (pick(), token()).prop_map(|(claim, token)| Op::Progress { claim, token }),
        4 => Just(Op::Reap),
        1 => pick().prop_map(Op::Retire),
        1 => (pick(), any::<u8>()).prop_map(|(worker, tracked)| Op::FailUntracked { worker, tracked }),
        2 => (pick(), proptest::bool::weighted(0.2))
            .prop_map(|(task, wrong_workspace)| Op::Cancel { task, wrong_workspace }),
        1 => pick().prop_map(Op::CancelRequests),
        2 => (ws.clone(), prop_oneof![Just(1_000u64), Just(4_000)])
            .prop_map(|(workspace, lease_ms)| Op::RegisterFront { workspace, lease_ms }),
        1 => pick().prop_map(Op::FrontHeartbeat),
        1 => pick().prop_map(Op::RetireFront),
        1 => (pick(), pick()).prop_map(|(old, front)| Op::Rebind { old, front }),
        8 => (ws, 0..4usize, any::<bool>(), proptest::option::of((0..4usize, any::<bool>())))
            .prop_map(|(workspace, max, ack, then)| Op::ClaimResults { workspace, max, ack, then }),
        2 => (pick(), 0..4usize).prop_map(|(front, max)| Op::Adopt { front, max }),
        2 => (pick(), pick()).prop_map(|(front, task)| Op::ResultFor { front, task }),
        1 => proptest::collection::vec(pick(), 0..3).prop_map(Op::MarkNotified),
        // Often a multiple of 250 ms, as every lease is: expiries are met
        // exactly, not only passed.
        5 => prop_oneof![2 => (1..7u64).prop_map(|n| n * 250), 1 => 1..2_000u64]
            .prop_map(Op::Advance),
        2 => (proptest::bool::weighted(0.3), pick(), any::<bool>())
            .prop_map(|(front, pick, before)| Op::ToExpiry { front, pick, before }),
    ]
}

/// A sequence of `len / 2` to `len` operations, after one or two
/// registrations, perhaps a front's, and a few submissions.
pub(crate) fn ops(len: usize) -> impl Strategy<Value = Vec<Op>> {
    let front = (0..WORKSPACES.len()).prop_map(|workspace| Op::RegisterFront {
        workspace,
        lease_ms: 4_000,
    });
    let submit = (
        0..WORKSPACES.len(),
        0..SUBAGENTS.len(),
        proptest::option::weighted(0.5, pick()),
    )
        .prop_map(|(workspace, subagent, front)| Op::Submit {
            workspace,
            subagent,
            front,
            duplicate: None,
        });
    (
        proptest::collection::vec(register(), 1..=2),
        proptest::option::weighted(0.6, front),
        proptest::collection::vec(submit, 0..=3),
        proptest::collection::vec(op(), len / 2..=len),
    )
        .prop_map(|(mut all, front, submits, rest)| {
            all.extend(front);
            all.extend(submits);
            all.extend(rest);
            all
        })
}
