//! The registry's data: every task and the indexes that keep each operation O(log n).
//!
//! `Registry` is plain single-threaded data; `AsyncTaskManager` wraps it in a mutex.
//! Keeping it free of locks, clocks and callbacks keeps every rule here testable and
//! every operation short enough to run under the lock. The one thing it calls out to
//! is the journal it is handed, because *when* in an operation the journal is told
//! (before the change is applied, or after with an undo) is the failure policy.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use asynctask_model::{AsyncTaskInfo, AsyncTaskStatus, MaxAsyncTasks, OutputObject};
use tokio_util::sync::CancellationToken;

use crate::journal::{
    Journal, JournalEntry, JournalError, RestoreError, StoredTask, TerminalOutcome, inconsistency,
    write,
};
use crate::live::{InboxSender, TaskProgress};
use crate::{LimitReached, PrefixMatch, RegisterError, RegisterTaskInput, TaskCounts};

/// Registration order: a counter that only grows.
type Seq = u64;

/// One task as the registry keeps it: a compact record (104 bytes, asserted below) from
/// which `AsyncTaskInfo` snapshots are built on demand. The id is shared with the
/// id index through one `Arc<str>`.
///
/// Its transitions follow the model's state machine rule for rule
/// (`AsyncTaskInfo::complete` and friends); the reference-model property test
/// checks that they agree.
#[derive(Debug)]
struct Record {
    id: Arc<str>,
    subagent_name: Box<str>,
    goal_prompt: Box<str>,
    launched_at: u64,
    /// When the task reached its terminal state; meaningless while running.
    completed_at: u64,
    notified_at: Option<u64>,
    /// The order in which the task reached its terminal state (0 while running);
    /// breaks ties between tasks that finished in the same millisecond.
    finish_order: u64,
    run: RunState,
}

/// The status and what comes with it: a running task keeps its subagent's
/// token; a terminal one drops it and keeps its result.
#[derive(Debug)]
enum RunState {
    Running(CancellationToken),
    Completed(Box<OutputObject>),
    /// Boxed twice so that the enum stays 16 bytes: failures are rare.
    #[expect(
        clippy::box_collection,
        reason = "a thin pointer keeps every record 8 bytes smaller"
    )]
    Failed(Box<String>),
    Cancelled,
}

/// What else a running task's subagent is reached through, for the tasks that
/// have either (kept beside the records, so a task without costs nothing).
#[derive(Debug)]
struct Live {
    progress: Option<TaskProgress>,
    inbox: Option<InboxSender>,
}

// The record's size is what every task in the registry costs; keep it from creeping up.
const _: () = assert!(std::mem::size_of::<Record>() <= 104);

impl Record {
    fn status(&self) -> AsyncTaskStatus {
        match self.run {
            RunState::Running(_) => AsyncTaskStatus::Running,
            RunState::Completed(_) => AsyncTaskStatus::Completed,
            RunState::Failed(_) => AsyncTaskStatus::Failed,
            RunState::Cancelled => AsyncTaskStatus::Cancelled,
        }
    }

    fn token(&self) -> Option<&CancellationToken> {
        match &self.run {
            RunState::Running(token) => Some(token),
            _ => None,
        }
    }

    /// The task as readers see it while its terminal transition waits for the
    /// journal: still running, nothing of its result shown.
    fn info_unrecorded(&self) -> AsyncTaskInfo {
        AsyncTaskInfo {
            id: self.id.to_string(),
            subagent_name: self.subagent_name.to_string(),
            goal_prompt: self.goal_prompt.to_string(),
            status: AsyncTaskStatus::Running,
            launched_at: self.launched_at,
            completed_at: None,
            notified_at: None,
            output: None,
            error: None,
        }
    }

    fn info(&self) -> AsyncTaskInfo {
        let (output, error) = match &self.run {
            RunState::Completed(output) => (Some(OutputObject::clone(output)), None),
            RunState::Failed(error) => (None, Some(String::clone(error))),
            RunState::Running(_) | RunState::Cancelled => (None, None),
        };
        AsyncTaskInfo {
            id: self.id.to_string(),
            subagent_name: self.subagent_name.to_string(),
            goal_prompt: self.goal_prompt.to_string(),
            status: self.status(),
            launched_at: self.launched_at,
            completed_at: self.status().is_terminal().then_some(self.completed_at),
            notified_at: self.notified_at,
            output,
            error,
        }
    }

    /// A terminal transition: refused (returning `None`) unless running; else
    /// returns the token the task held.
    fn end(&mut self, run: RunState, now_ms: u64, order: u64) -> Option<CancellationToken> {
        if !matches!(self.run, RunState::Running(_)) {
            return None;
        }
        let RunState::Running(token) = std::mem::replace(&mut self.run, run) else {
            return None;
        };
        self.completed_at = now_ms;
        self.finish_order = order;
        Some(token)
    }

    /// Refused unless terminal and not yet notified.
    fn mark_notified(&mut self, now_ms: u64) -> bool {
        if matches!(self.run, RunState::Running(_)) || self.notified_at.is_some() {
            return false;
        }
        self.notified_at = Some(now_ms);
        true
    }

    /// The pruning queue's key: oldest-finished first, ties in finish order.
    fn delivered_key(&self) -> (u64, u64) {
        (self.completed_at, self.finish_order)
    }

    /// The journal entry of the terminal transition this task made (`None`
    /// while it runs).
    fn finished_entry(&self) -> Option<JournalEntry<'_>> {
        let outcome = match &self.run {
            RunState::Running(_) => return None,
            RunState::Completed(output) => TerminalOutcome::Completed(output),
            RunState::Failed(error) => TerminalOutcome::Failed(error),
            RunState::Cancelled => TerminalOutcome::Cancelled,
        };
        Some(JournalEntry::Finished {
            id: &self.id,
            outcome,
            completed_at: self.completed_at,
            finish_order: self.finish_order,
        })
    }
}

/// What a successful terminal transition hands back to the manager.
#[derive(Debug)]
pub(crate) struct Transition {
    /// The task right after the transition, when a snapshot was asked for.
    pub(crate) task: Option<AsyncTaskInfo>,
    /// The task's cancellation token.
    pub(crate) token: CancellationToken,
    /// The journal's write failed; the transition was applied all the same.
    pub(crate) journal_error: Option<JournalError>,
}

/// A change applied in memory whose journal write failed.
#[derive(Debug)]
enum Unjournaled {
    /// Task `Seq` reached its terminal state.
    Finished(Seq),
    /// The task with this id was pruned.
    Removed(Arc<str>),
}

/// Every task, with one index per question the manager answers.
#[derive(Debug)]
pub(crate) struct Registry {
    max: MaxAsyncTasks,
    /// After the limit is lowered below what is already admitted, the admitted
    /// count may exceed the limit until enough tasks end; this is that count, which
    /// only shrinks. New admissions always obey the limit itself.
    over_limit: usize,
    reserved: usize,
    next_seq: Seq,
    next_finish_order: u64,
    /// Every task, in registration order.
    tasks: BTreeMap<Seq, Box<Record>>,
    /// Exact and prefix lookup by id.
    ids: BTreeMap<Arc<str>, Seq>,
    running: BTreeSet<Seq>,
    /// Terminal and not yet notified: never pruned.
    pending: BTreeSet<Seq>,
    /// Terminal and notified, oldest-finished first: the pruning queue.
    delivered: BTreeMap<(u64, u64), Seq>,
    /// Terminal tasks by status: completed, failed, cancelled.
    finished_by_status: [usize; 3],
    /// Who launched each task, for the tasks that say (most do not, so it
    /// costs them nothing).
    origins: BTreeMap<Seq, Arc<str>>,
    /// The progress and inbox of the running tasks that have either.
    live: BTreeMap<Seq, Live>,
    /// Changes applied although their journal write failed, oldest first:
    /// written again ahead of the next change, until a write succeeds, so
    /// that a journal that failed once catches up instead of missing them for
    /// good (a task it still holds as running would refuse every later mark).
    unjournaled: Vec<Unjournaled>,
    /// *Unrecorded* tasks: pending tasks whose terminal transition the
    /// journal has not recorded yet (its write failed). They are terminal in
    /// memory, so their slot is free, but they are not offered for delivery —
    /// a result the store does not hold must never reach the model — until a
    /// write catches up.
    unrecorded: BTreeSet<Seq>,
    /// Unrecorded tasks the journal has caught up with since the manager last
    /// looked: it announces them, as their transition could not be.
    released: Vec<Seq>,
    /// The ids pruned since the manager last took them
    /// ([`take_pruned`](Self::take_pruned)), oldest first.
    pruned: Vec<Arc<str>>,
}

impl Registry {
    pub(crate) fn new(max: MaxAsyncTasks) -> Self {
        Registry {
            max,
            over_limit: 0,
            reserved: 0,
            next_seq: 0,
            next_finish_order: 1,
            tasks: BTreeMap::new(),
            ids: BTreeMap::new(),
            running: BTreeSet::new(),
            pending: BTreeSet::new(),
            delivered: BTreeMap::new(),
            finished_by_status: [0; 3],
            origins: BTreeMap::new(),
            live: BTreeMap::new(),
            unjournaled: Vec::new(),
            unrecorded: BTreeSet::new(),
            released: Vec::new(),
            pruned: Vec::new(),
        }
    }

    /// The ids of the tasks pruned since the last call, oldest-finished
    /// first.
    pub(crate) fn take_pruned(&mut self) -> Vec<Arc<str>> {
        std::mem::take(&mut self.pruned)
    }

    /// The journal has recorded every change: nothing is missed any more, and
    /// the unrecorded tasks become deliverable.
    fn caught_up(&mut self) {
        self.unjournaled.clear();
        if !self.unrecorded.is_empty() {
            self.released.extend(std::mem::take(&mut self.unrecorded));
        }
    }

    /// The unrecorded tasks recorded since the last call, oldest-registered first,
    /// as snapshots (for their events).
    pub(crate) fn take_released(&mut self) -> Vec<AsyncTaskInfo> {
        if self.released.is_empty() {
            return Vec::new();
        }
        let released = std::mem::take(&mut self.released);
        self.infos(released.iter())
    }

    /// Whether some changes still wait for the journal.
    pub(crate) fn has_backlog(&self) -> bool {
        !self.unjournaled.is_empty()
    }

    /// Writes the changes the journal missed, alone. `Ok` when there were none
    /// or they are written now.
    pub(crate) fn retry_journal(&mut self, journal: &dyn Journal) -> Result<(), JournalError> {
        if self.unjournaled.is_empty() {
            return Ok(());
        }
        self.write_change(journal, std::iter::empty())?;
        self.caught_up();
        Ok(())
    }

    /// Writes `change` to the journal, preceded by the changes it missed.
    fn write_change<'a>(
        &'a self,
        journal: &dyn Journal,
        change: impl IntoIterator<Item = JournalEntry<'a>>,
    ) -> Result<(), JournalError> {
        let missed = self.unjournaled.iter().filter_map(|missed| match missed {
            Unjournaled::Finished(seq) => self.tasks.get(seq)?.finished_entry(),
            Unjournaled::Removed(id) => Some(JournalEntry::Removed { id }),
        });
        let entries: Vec<JournalEntry<'a>> = missed.chain(change).collect();
        write(journal, &entries)
    }

    /// After a write of the transitions of `finished` and the removal of
    /// `pruned` (not removed yet): on success the journal has caught up; on
    /// failure they join the changes it missed.
    fn settle(
        &mut self,
        written: Result<(), JournalError>,
        finished: &[Seq],
        pruned: &[Seq],
    ) -> Option<JournalError> {
        match written {
            Ok(()) => {
                self.caught_up();
                None
            }
            Err(error) => {
                self.unjournaled
                    .extend(finished.iter().copied().map(Unjournaled::Finished));
                self.unrecorded.extend(finished.iter().copied());
                let removed: Vec<Unjournaled> = pruned
                    .iter()
                    .filter_map(|seq| self.tasks.get(seq))
                    .map(|record| Unjournaled::Removed(Arc::clone(&record.id)))
                    .collect();
                self.unjournaled.extend(removed);
                Some(error)
            }
        }
    }

    pub(crate) fn max(&self) -> MaxAsyncTasks {
        self.max
    }

    /// Changes the limit. Admitted tasks and reservations stay; the history is
    /// pruned to the new history limit at once — in memory even when the
    /// journal's write fails (the error is returned), since the limit must hold.
    pub(crate) fn set_max(
        &mut self,
        max: MaxAsyncTasks,
        journal: Option<&dyn Journal>,
    ) -> Option<JournalError> {
        self.max = max;
        let admitted = self.admitted();
        self.over_limit = match max.limit() {
            Some(limit) if admitted > limit => admitted,
            _ => 0,
        };
        let Some(journal) = journal else {
            self.prune();
            return None;
        };
        let pruned = self.prune_plan();
        if pruned.is_empty() {
            return None;
        }
        let written = self.write_change(journal, self.removed_entries(&pruned));
        let error = self.settle(written, &[], &pruned);
        self.remove(&pruned);
        error
    }

    /// Running tasks plus outstanding reservations.
    fn admitted(&self) -> usize {
        self.running.len() + self.reserved
    }

    fn release_admission(&mut self) {
        self.over_limit = self.over_limit.min(self.admitted());
    }

    pub(crate) fn check_limit(&self) -> Result<(), LimitReached> {
        if self.max.admits(self.admitted()) {
            Ok(())
        } else {
            Err(LimitReached {
                max: self.max.get(),
            })
        }
    }

    pub(crate) fn reserve(&mut self) -> Result<(), LimitReached> {
        self.check_limit()?;
        self.reserved += 1;
        Ok(())
    }

    pub(crate) fn release_reservation(&mut self) {
        self.reserved = self.reserved.saturating_sub(1);
        self.release_admission();
    }

    /// Registers a running task. With `reserved`, the task takes a reservation's
    /// slot instead of being checked against the limit (the reservation is spent
    /// whatever the outcome). The journal is told before anything changes; a
    /// registration it could not record is refused.
    pub(crate) fn register(
        &mut self,
        input: RegisterTaskInput,
        now_ms: u64,
        reserved: bool,
        journal: Option<&dyn Journal>,
    ) -> Result<AsyncTaskInfo, RegisterError> {
        let refused = if input.id.is_empty() {
            Some(RegisterError::EmptyId)
        } else if self.ids.contains_key(input.id.as_str()) {
            Some(RegisterError::DuplicateId(input.id.clone()))
        } else if reserved {
            None
        } else {
            self.check_limit().err().map(RegisterError::LimitReached)
        };
        let refused = refused.or_else(|| {
            let entry = JournalEntry::Registered {
                id: &input.id,
                subagent_name: &input.subagent_name,
                goal_prompt: &input.goal_prompt,
                launched_at: now_ms,
                origin: input.origin.as_deref(),
            };
            let written = journal.map_or(Ok(()), |journal| self.write_change(journal, [entry]));
            written.err().map(RegisterError::Journal)
        });
        if refused.is_none() && journal.is_some() {
            self.caught_up();
        }
        if let Some(refused) = refused {
            if reserved {
                self.release_reservation();
            }
            return Err(refused);
        }
        if reserved {
            // The reservation becomes the running task: the admitted count (and so
            // any grandfathered allowance) is unchanged.
            self.reserved = self.reserved.saturating_sub(1);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let id: Arc<str> = Arc::from(input.id);
        let record = Record {
            id: Arc::clone(&id),
            subagent_name: input.subagent_name.into_boxed_str(),
            goal_prompt: input.goal_prompt.into_boxed_str(),
            launched_at: now_ms,
            completed_at: 0,
            notified_at: None,
            finish_order: 0,
            run: RunState::Running(input.cancellation),
        };
        if input.progress.is_some() || input.inbox.is_some() {
            self.live.insert(
                seq,
                Live {
                    progress: input.progress,
                    inbox: input.inbox,
                },
            );
        }
        let snapshot = record.info();
        if let Some(origin) = input.origin {
            self.origins.insert(seq, Arc::from(origin));
        }
        self.ids.insert(id, seq);
        self.running.insert(seq);
        self.tasks.insert(seq, Box::new(record));
        Ok(snapshot)
    }

    /// Applies a terminal transition. `None` when the task is unknown or not
    /// running (the first transition wins). The transition and its pruning are
    /// journaled before they are visible, and applied even when the journal's
    /// write fails (a task must never stay running forever): the error comes
    /// back in [`Transition`], and the task is kept from delivery (unrecorded) until a
    /// later write records it.
    pub(crate) fn transition(
        &mut self,
        id: &str,
        terminal: Terminal,
        now_ms: u64,
        snapshot: bool,
        journal: Option<&dyn Journal>,
    ) -> Option<Transition> {
        let seq = *self.ids.get(id)?;
        let record = self.tasks.get_mut(&seq)?;
        let run = match terminal {
            Terminal::Completed(output) => RunState::Completed(Box::new(output)),
            Terminal::Failed(error) => RunState::Failed(Box::new(error)),
            Terminal::Cancelled => RunState::Cancelled,
        };
        let token = record.end(run, now_ms, self.next_finish_order)?;
        self.next_finish_order += 1;
        let status = record.status();
        let task = snapshot.then(|| record.info());
        self.finished_by_status[status_slot(status)] += 1;
        self.running.remove(&seq);
        // The inbox's sender and the progress handle go with the run: a message
        // sent from now on finds the task terminal.
        self.live.remove(&seq);
        self.pending.insert(seq);
        self.release_admission();
        let journal_error = match journal {
            None => {
                self.prune();
                None
            }
            Some(journal) => {
                let pruned = self.prune_plan();
                let finished = self
                    .tasks
                    .get(&seq)
                    .and_then(|record| record.finished_entry());
                let written = self.write_change(
                    journal,
                    finished.into_iter().chain(self.removed_entries(&pruned)),
                );
                let error = self.settle(written, &[seq], &pruned);
                self.remove(&pruned);
                error
            }
        };
        Some(Transition {
            task,
            token,
            journal_error,
        })
    }

    /// Marks terminal tasks notified and prunes; returns how many were marked
    /// (a task that is unknown, running, unrecorded or already
    /// marked is skipped). The marks and the pruning are one journal write,
    /// told before they are visible; when it fails every mark is undone (the
    /// results stay pending, so they are delivered again rather than lost).
    pub(crate) fn mark_notified<S: AsRef<str>>(
        &mut self,
        ids: &[S],
        now_ms: u64,
        journal: Option<&dyn Journal>,
    ) -> Result<usize, JournalError> {
        let mut marked: Vec<(Seq, usize)> = Vec::new();
        for (index, id) in ids.iter().enumerate() {
            let Some(&seq) = self.ids.get(id.as_ref()) else {
                continue;
            };
            let Some(record) = self.tasks.get_mut(&seq) else {
                continue;
            };
            if self.unrecorded.contains(&seq) || !record.mark_notified(now_ms) {
                continue;
            }
            let key = record.delivered_key();
            self.pending.remove(&seq);
            self.delivered.insert(key, seq);
            marked.push((seq, index));
        }
        if marked.is_empty() {
            return Ok(0);
        }
        let Some(journal) = journal else {
            self.prune();
            return Ok(marked.len());
        };
        let pruned = self.prune_plan();
        let notified = marked.iter().map(|&(_, index)| JournalEntry::Notified {
            id: ids[index].as_ref(),
            notified_at: now_ms,
        });
        let written = self.write_change(journal, notified.chain(self.removed_entries(&pruned)));
        if let Err(error) = written {
            for &(seq, _) in &marked {
                if let Some(record) = self.tasks.get_mut(&seq) {
                    self.delivered.remove(&record.delivered_key());
                    record.notified_at = None;
                    self.pending.insert(seq);
                }
            }
            return Err(error);
        }
        self.caught_up();
        self.remove(&pruned);
        Ok(marked.len())
    }

    /// Removes the oldest-finished notified tasks until at most the history limit
    /// of terminal tasks remain — in place, for a registry with no journal to
    /// tell (what [`prune_plan`](Self::prune_plan) and [`remove`](Self::remove)
    /// do in two steps, without allocating the plan).
    fn prune(&mut self) {
        let limit = self.max.history_limit();
        while self.pending.len() + self.delivered.len() > limit {
            let Some((_, seq)) = self.delivered.pop_first() else {
                break;
            };
            if let Some(record) = self.tasks.remove(&seq) {
                self.ids.remove(&*record.id);
                self.origins.remove(&seq);
                self.finished_by_status[status_slot(record.status())] -= 1;
                self.pruned.push(record.id);
            }
        }
    }

    /// The notified tasks that pruning removes now, oldest-finished first: as
    /// many as the terminal tasks exceed the history limit by. Un-notified tasks
    /// are never removed and never stop the removal of others.
    fn prune_plan(&self) -> Vec<Seq> {
        let excess =
            (self.pending.len() + self.delivered.len()).saturating_sub(self.max.history_limit());
        self.delivered.values().take(excess).copied().collect()
    }

    /// The journal entries for removing `seqs`.
    fn removed_entries<'a>(&'a self, seqs: &'a [Seq]) -> impl Iterator<Item = JournalEntry<'a>> {
        seqs.iter()
            .filter_map(|seq| self.tasks.get(seq))
            .map(|record| JournalEntry::Removed { id: &record.id })
    }

    /// Removes terminal tasks (the ones [`prune_plan`](Self::prune_plan) chose).
    fn remove(&mut self, seqs: &[Seq]) {
        for seq in seqs {
            if let Some(record) = self.tasks.remove(seq) {
                self.delivered.remove(&record.delivered_key());
                self.pending.remove(seq);
                self.unrecorded.remove(seq);
                self.ids.remove(&*record.id);
                self.origins.remove(seq);
                self.finished_by_status[status_slot(record.status())] -= 1;
                self.pruned.push(record.id);
            }
        }
    }

    /// A registry rebuilt from stored tasks (in registration order), every
    /// index with it. Tasks stored as running ran in a process that has ended:
    /// they become failed with an [interrupted error](StoredTask::interrupted_error)
    /// at `now_ms`, ending after every stored task. Then the history is pruned.
    /// The interrupted tasks and the pruning are journaled as one change; a
    /// failed write is returned, and the registry is built all the same (as for
    /// any terminal transition).
    pub(crate) fn restore(
        max: MaxAsyncTasks,
        stored: Vec<StoredTask>,
        now_ms: u64,
        journal: Option<&dyn Journal>,
    ) -> Result<(Registry, Option<JournalError>), RestoreError> {
        let mut registry = Registry::new(max);
        // (completed_at, stored finish order, seq) of the tasks stored terminal.
        let mut ended = Vec::new();
        let mut interrupted = Vec::new();
        let mut last_order = 0;
        for (index, task) in stored.into_iter().enumerate() {
            if task.info.id.is_empty() {
                return Err(RestoreError::EmptyId { index });
            }
            if registry.ids.contains_key(task.info.id.as_str()) {
                return Err(RestoreError::DuplicateId(task.info.id));
            }
            if let Some(problem) = inconsistency(&task.info) {
                return Err(RestoreError::Inconsistent {
                    id: task.info.id,
                    problem,
                });
            }
            let seq = registry.next_seq;
            registry.next_seq += 1;
            let running = task.info.status == AsyncTaskStatus::Running;
            let interrupted_error = if running {
                task.interrupted_error()
            } else {
                String::new()
            };
            let StoredTask {
                info,
                origin,
                finish_order,
                process: _,
            } = task;
            // `inconsistency` let through only these shapes; the last arm is
            // the running task, which ends now.
            let stored_end = info.completed_at.unwrap_or(now_ms);
            let (run, completed_at) = match (info.status, info.output, info.error) {
                (AsyncTaskStatus::Completed, Some(output), _) => {
                    (RunState::Completed(Box::new(output)), stored_end)
                }
                (AsyncTaskStatus::Failed, _, Some(error)) => {
                    (RunState::Failed(Box::new(error)), stored_end)
                }
                (AsyncTaskStatus::Cancelled, _, _) => (RunState::Cancelled, stored_end),
                _ => (RunState::Failed(Box::new(interrupted_error)), now_ms),
            };
            if running {
                interrupted.push(seq);
            } else {
                ended.push((completed_at, finish_order, seq));
                last_order = last_order.max(finish_order);
            }
            let id: Arc<str> = Arc::from(info.id);
            let record = Record {
                id: Arc::clone(&id),
                subagent_name: info.subagent_name.into_boxed_str(),
                goal_prompt: info.goal_prompt.into_boxed_str(),
                launched_at: info.launched_at,
                completed_at,
                notified_at: info.notified_at,
                finish_order: 0,
                run,
            };
            if let Some(origin) = origin {
                registry.origins.insert(seq, Arc::from(origin));
            }
            registry.ids.insert(id, seq);
            registry.tasks.insert(seq, Box::new(record));
        }
        // Finish orders are ranks here (ties broken by registration order);
        // new ones start above every stored order, so that a store keeping the
        // journaled numbers orders old and new tasks alike.
        ended.sort_unstable();
        let ranks = ended.iter().map(|(_, _, seq)| *seq);
        for (rank, seq) in (1..).zip(ranks) {
            if let Some(record) = registry.tasks.get_mut(&seq) {
                record.finish_order = rank;
            }
        }
        registry.next_finish_order = last_order.max(ended.len() as u64) + 1;
        for seq in &interrupted {
            if let Some(record) = registry.tasks.get_mut(seq) {
                record.finish_order = registry.next_finish_order;
                registry.next_finish_order += 1;
            }
        }
        for (seq, record) in &registry.tasks {
            registry.finished_by_status[status_slot(record.status())] += 1;
            if record.notified_at.is_some() {
                registry.delivered.insert(record.delivered_key(), *seq);
            } else {
                registry.pending.insert(*seq);
            }
        }
        let pruned = registry.prune_plan();
        let written = journal.map_or(Ok(()), |journal| {
            let finished = interrupted
                .iter()
                .filter_map(|seq| registry.tasks.get(seq)?.finished_entry());
            registry.write_change(journal, finished.chain(registry.removed_entries(&pruned)))
        });
        let journal_error = registry.settle(written, &interrupted, &pruned);
        registry.remove(&pruned);
        // A restore tells no one what it pruned (the caller has the stored
        // tasks to compare with).
        registry.pruned.clear();
        Ok((registry, journal_error))
    }

    pub(crate) fn task(&self, id: &str) -> Option<AsyncTaskInfo> {
        self.ids.get(id).and_then(|seq| self.info(*seq))
    }

    pub(crate) fn token(&self, id: &str) -> Option<CancellationToken> {
        let seq = self.ids.get(id)?;
        self.tasks.get(seq)?.token().cloned()
    }

    pub(crate) fn progress(&self, id: &str) -> Option<TaskProgress> {
        let seq = self.ids.get(id)?;
        self.live.get(seq)?.progress.clone()
    }

    /// The status of task `id` and, while it runs, its inbox's sender.
    pub(crate) fn inbox(&self, id: &str) -> Option<(AsyncTaskStatus, Option<&InboxSender>)> {
        let seq = self.ids.get(id)?;
        let record = self.tasks.get(seq)?;
        let status = if self.unrecorded.contains(seq) {
            AsyncTaskStatus::Running
        } else {
            record.status()
        };
        Some((
            status,
            self.live.get(seq).and_then(|live| live.inbox.as_ref()),
        ))
    }

    pub(crate) fn origin(&self, id: &str) -> Option<Arc<str>> {
        let seq = self.ids.get(id)?;
        self.origins.get(seq).cloned()
    }

    /// Task `seq` as readers see it: an unrecorded task (its terminal transition not
    /// journaled yet) still looks running, so nothing shows a result the
    /// journal does not hold.
    fn info(&self, seq: Seq) -> Option<AsyncTaskInfo> {
        let record = self.tasks.get(&seq)?;
        Some(if self.unrecorded.contains(&seq) {
            record.info_unrecorded()
        } else {
            record.info()
        })
    }

    pub(crate) fn find_by_prefix(&self, prefix: &str) -> PrefixMatch {
        let mut matches = self
            .ids
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(id, _)| id.starts_with(prefix))
            .map(|(_, seq)| *seq);
        match (matches.next(), matches.next()) {
            (None, _) => PrefixMatch::None,
            (Some(only), None) => self.info(only).map_or(PrefixMatch::None, PrefixMatch::One),
            (Some(first), Some(second)) => {
                let mut seqs = vec![first, second];
                seqs.extend(matches);
                seqs.sort_unstable();
                PrefixMatch::Ambiguous(self.infos(seqs.iter()))
            }
        }
    }

    fn infos<'a>(&self, seqs: impl Iterator<Item = &'a Seq>) -> Vec<AsyncTaskInfo> {
        seqs.filter_map(|seq| self.info(*seq)).collect()
    }

    pub(crate) fn tasks(&self) -> Vec<AsyncTaskInfo> {
        self.infos(self.tasks.keys())
    }

    /// The running tasks, unrecorded ones included (they look running), in
    /// registration order.
    pub(crate) fn running_tasks(&self) -> Vec<AsyncTaskInfo> {
        if self.unrecorded.is_empty() {
            return self.infos(self.running.iter());
        }
        self.infos(self.running.union(&self.unrecorded))
    }

    pub(crate) fn running_tokens(&self) -> Vec<CancellationToken> {
        self.running
            .iter()
            .filter_map(|seq| self.tasks.get(seq)?.token().cloned())
            .collect()
    }

    /// The pending tasks that may be delivered (unrecorded ones wait for the journal).
    pub(crate) fn pending_notifications(&self) -> Vec<AsyncTaskInfo> {
        if self.unrecorded.is_empty() {
            return self.infos(self.pending.iter());
        }
        self.infos(self.pending.difference(&self.unrecorded))
    }

    pub(crate) fn has_pending(&self) -> bool {
        self.pending.len() > self.unrecorded.len()
    }

    /// The counts as readers see them: unrecorded tasks count as running.
    pub(crate) fn counts(&self) -> TaskCounts {
        let [mut completed, mut failed, mut cancelled] = self.finished_by_status;
        for record in self.unrecorded.iter().filter_map(|seq| self.tasks.get(seq)) {
            match record.status() {
                AsyncTaskStatus::Completed => completed -= 1,
                AsyncTaskStatus::Failed => failed -= 1,
                AsyncTaskStatus::Cancelled => cancelled -= 1,
                AsyncTaskStatus::Running => {}
            }
        }
        TaskCounts {
            running: self.running.len() + self.unrecorded.len(),
            completed,
            failed,
            cancelled,
            pending_notifications: self.pending.len() - self.unrecorded.len(),
            reserved: self.reserved,
        }
    }

    /// Checks every invariant against a full scan; `Err` names the first broken one.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let admitted = self.admitted();
        if let Some(limit) = self.max.limit() {
            let allowed = limit.max(self.over_limit);
            if admitted > allowed {
                return Err(format!(
                    "{} running + {} reserved exceed the limit of {limit} (grandfathered: {})",
                    self.running.len(),
                    self.reserved,
                    self.over_limit
                ));
            }
        }
        let mut running = BTreeSet::new();
        let mut pending = BTreeSet::new();
        let mut delivered = BTreeMap::new();
        let mut by_status = [0; 3];
        for (seq, record) in &self.tasks {
            let id = &*record.id;
            if self.ids.get(id) != Some(seq) {
                return Err(format!("id index does not map '{id}' to its task"));
            }
            let status = record.status();
            if record.notified_at.is_some() && !status.is_terminal() {
                return Err(format!("running task '{id}' has notified_at"));
            }
            if !status.is_terminal() && (record.completed_at, record.finish_order) != (0, 0) {
                return Err(format!("running task '{id}' has a completion time"));
            }
            match (status, record.notified_at) {
                (AsyncTaskStatus::Running, _) => {
                    running.insert(*seq);
                }
                (status, None) => {
                    by_status[status_slot(status)] += 1;
                    pending.insert(*seq);
                }
                (status, Some(_)) => {
                    by_status[status_slot(status)] += 1;
                    delivered.insert((record.completed_at, record.finish_order), *seq);
                }
            }
        }
        if self.ids.len() != self.tasks.len() {
            return Err(format!(
                "id index holds {} ids for {} tasks",
                self.ids.len(),
                self.tasks.len()
            ));
        }
        if running != self.running {
            return Err("running index disagrees with the registry".to_owned());
        }
        if pending != self.pending {
            return Err("pending index disagrees with the registry".to_owned());
        }
        if delivered != self.delivered {
            return Err("pruning queue disagrees with the registry".to_owned());
        }
        if by_status != self.finished_by_status {
            return Err("status counts disagree with the registry".to_owned());
        }
        if let Some(seq) = self
            .origins
            .keys()
            .find(|seq| !self.tasks.contains_key(seq))
        {
            return Err(format!("an origin is kept for task #{seq}, which is gone"));
        }
        if let Some(seq) = self.live.keys().find(|seq| !self.running.contains(seq)) {
            return Err(format!(
                "a progress or inbox is kept for task #{seq}, which is not running"
            ));
        }
        for missed in &self.unjournaled {
            if let Unjournaled::Finished(seq) = missed
                && self
                    .tasks
                    .get(seq)
                    .is_none_or(|record| !record.status().is_terminal())
            {
                return Err(format!(
                    "a transition awaiting the journal names task #{seq}, which is not terminal"
                ));
            }
        }
        if !self.unrecorded.is_subset(&self.pending) {
            return Err("an unrecorded task is not pending".to_owned());
        }
        let missed: BTreeSet<Seq> = self
            .unjournaled
            .iter()
            .filter_map(|missed| match missed {
                Unjournaled::Finished(seq) => Some(*seq),
                Unjournaled::Removed(_) => None,
            })
            .collect();
        if !self.unrecorded.is_subset(&missed) {
            return Err(
                "a task is unrecorded although its transition is not awaiting the journal"
                    .to_owned(),
            );
        }
        let terminal = pending.len() + delivered.len();
        let history = self.max.history_limit();
        // Pruning skips, never stops: above the limit, no notified task may remain.
        if terminal > history && !delivered.is_empty() {
            return Err(format!(
                "{terminal} terminal tasks exceed the history limit {history} while {} notified ones remain",
                delivered.len()
            ));
        }
        if terminal > history + pending.len() {
            return Err(format!(
                "{terminal} terminal tasks exceed history limit {history} + {} un-notified",
                pending.len()
            ));
        }
        Ok(())
    }
}

fn status_slot(status: AsyncTaskStatus) -> usize {
    match status {
        AsyncTaskStatus::Completed => 0,
        AsyncTaskStatus::Failed => 1,
        // Running tasks are never counted here; the arm keeps the match total.
        AsyncTaskStatus::Cancelled | AsyncTaskStatus::Running => 2,
    }
}

/// The terminal state a transition asks for.
#[derive(Debug)]
pub(crate) enum Terminal {
    Completed(OutputObject),
    Failed(String),
    Cancelled,
}

impl Terminal {
    /// The status name it leads to, for logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Terminal::Completed(_) => "completed",
            Terminal::Failed(_) => "failed",
            Terminal::Cancelled => "cancelled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_model::TerminateReason;
    use pretty_assertions::assert_eq;

    fn registry(max: i64) -> Registry {
        Registry::new(MaxAsyncTasks::new(max).unwrap())
    }

    fn run(registry: &mut Registry, id: &str, now: u64) {
        registry
            .register(
                RegisterTaskInput::new(id, "agent", "goal"),
                now,
                false,
                None,
            )
            .unwrap();
    }

    fn ids(registry: &Registry) -> Vec<String> {
        registry.tasks().into_iter().map(|t| t.id).collect()
    }

    #[test]
    fn same_millisecond_completions_prune_in_finish_order() {
        let mut registry = registry(3); // history 6: nothing is pruned yet
        for id in ["a", "b", "c"] {
            run(&mut registry, id, 0);
        }
        // All finish at t=5, in the order c, a, b.
        for id in ["c", "a", "b"] {
            registry
                .transition(id, Terminal::Cancelled, 5, false, None)
                .unwrap();
        }
        for id in ["a", "b", "c"] {
            assert_eq!(registry.mark_notified(&[id], 6, None), Ok(1));
        }
        assert_eq!(registry.set_max(MaxAsyncTasks::new(1).unwrap(), None), None); // history 2
        assert_eq!(
            ids(&registry),
            ["a", "b"],
            "c finished first, so it goes first"
        );
        registry.check_invariants().unwrap();
    }

    #[test]
    fn a_lowered_limit_grandfathers_admitted_tasks_until_they_end() {
        let mut registry = registry(4);
        for id in ["a", "b", "c"] {
            run(&mut registry, id, 0);
        }
        registry.reserve().unwrap();
        assert_eq!(registry.set_max(MaxAsyncTasks::new(2).unwrap(), None), None);
        assert_eq!(registry.over_limit, 4);
        registry.check_invariants().unwrap();
        registry
            .transition("a", Terminal::Failed("x".into()), 1, false, None)
            .unwrap();
        assert_eq!(registry.over_limit, 3);
        // Spending the reservation keeps the admitted count, and the allowance.
        registry
            .register(RegisterTaskInput::new("r", "agent", "goal"), 2, true, None)
            .unwrap();
        assert_eq!((registry.admitted(), registry.over_limit), (3, 3));
        registry.check_invariants().unwrap();
        assert!(registry.check_limit().is_err());
        assert_eq!(
            registry.set_max(MaxAsyncTasks::new(10).unwrap(), None),
            None
        );
        assert_eq!(registry.over_limit, 0);
    }

    #[test]
    fn snapshots_rebuild_the_model_record_exactly() {
        let mut registry = registry(5);
        run(&mut registry, "t", 10);
        let output = OutputObject::new(TerminateReason::MaxTurns).with_final_message("bye");
        let finished = registry
            .transition("t", Terminal::Completed(output.clone()), 20, true, None)
            .unwrap();
        let mut expected = AsyncTaskInfo::new("t", "agent", "goal", 10);
        expected.complete(output, 20);
        assert_eq!(finished.task, Some(expected.clone()));
        assert_eq!(registry.mark_notified(&["t"], 30, None), Ok(1));
        expected.mark_notified(30);
        assert_eq!(registry.task("t"), Some(expected));
    }

    #[test]
    fn a_refused_transition_returns_none_and_keeps_the_first_result() {
        let mut registry = registry(5);
        run(&mut registry, "t", 0);
        assert!(
            registry
                .transition("t", Terminal::Failed("first".into()), 1, false, None)
                .is_some()
        );
        assert!(
            registry
                .transition("t", Terminal::Cancelled, 2, false, None)
                .is_none()
        );
        let task = registry.task("t").unwrap();
        assert_eq!(
            (task.status, task.error.as_deref(), task.completed_at),
            (AsyncTaskStatus::Failed, Some("first"), Some(1))
        );
    }
}
