//! The registry's data: every task and the indexes that keep each operation
//! O(log n) or better.
//!
//! `Registry` is plain single-threaded data; `AsyncTaskManager` wraps it in a mutex.
//! Keeping it free of locks, clocks and callbacks keeps every rule here testable and
//! every operation short enough to run under the lock. The one thing it calls out to
//! is the journal it is handed, because *when* in an operation the journal is told
//! (before the change is applied, or after with an undo) is the failure policy.
//! Rebuilding a registry from stored tasks is in `restore`, and the full-scan
//! check of every index in `invariants`.

mod invariants;
mod live;
mod restore;

use std::collections::BTreeMap;
use std::sync::Arc;

use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks, MaxQueuedTasks, OutputObject};
use tokio_util::sync::CancellationToken;

use crate::backlog::Backlog;
use crate::index::IdIndex;
use crate::journal::{Journal, JournalEntry, JournalError};
use crate::live::{InboxSender, TaskProgress};
use crate::questions::QuestionDesk;
use crate::record::{End, Record, Seq, Slots, TaskList};
use crate::snapshot::{SlotId, TaskHead, TaskSnapshot};
use crate::{LimitReached, PrefixMatch, QueueFull, RegisterError, RegisterTaskInput, TaskCounts};

/// What else a running task's subagent is reached through, for the tasks that
/// have either (kept beside the records, so a task without costs nothing).
#[derive(Debug)]
struct Live {
    progress: Option<TaskProgress>,
    inbox: Option<InboxSender>,
    questions: Option<QuestionDesk>,
}

impl Live {
    /// The run ended: its questions are withdrawn.
    fn end(self) {
        if let Some(desk) = &self.questions {
            desk.close();
        }
    }
}

/// What a successful terminal transition hands back to the manager.
#[derive(Debug)]
pub(crate) struct Transition {
    /// The task right after the transition, when a snapshot was asked for.
    pub(crate) task: Option<TaskSnapshot>,
    /// The task's cancellation token.
    pub(crate) token: CancellationToken,
    /// The journal's write failed; the transition was applied all the same,
    /// and the task is unrecorded.
    pub(crate) journal_error: Option<JournalError>,
}

/// What marking tasks notified did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Marked {
    /// How many tasks were marked.
    pub(crate) count: usize,
    /// The journal's write failed; the marks were applied all the same and
    /// wait in the backlog.
    pub(crate) journal_error: Option<JournalError>,
}

/// What starting queued tasks did.
#[derive(Debug, Default)]
pub(crate) struct Started {
    /// The tasks that started, in queue order.
    pub(crate) tasks: Vec<TaskSnapshot>,
    /// The journal could not record the starts: none happened, and the queue
    /// waits for the next change (or a retry).
    pub(crate) journal_error: Option<JournalError>,
}

/// Every task, with one index per question the manager answers.
#[derive(Debug)]
pub(crate) struct Registry {
    max: MaxAsyncTasks,
    max_queued: MaxQueuedTasks,
    /// After the limit is lowered below what is already admitted, the admitted
    /// count may exceed the limit until enough tasks end; this is that count, which
    /// only shrinks. New admissions always obey the limit itself.
    over_limit: usize,
    reserved: usize,
    next_seq: Seq,
    next_finish_order: u64,
    /// Every record, in place.
    slots: Slots,
    /// Exact (hashed) and prefix (ordered) lookup by id.
    ids: IdIndex,
    /// The running tasks, in registration order.
    running: TaskList,
    /// The queued tasks, in launch order: the first starts first.
    queue: TaskList,
    /// Starts wait for the host (a registry just restored, until it asks:
    /// whoever runs subagents must hear of each start).
    starts_paused: bool,
    /// The last write of starts failed: the queue waits for the next change
    /// or a retry, though a slot is free.
    starts_failed: bool,
    /// Terminal and not yet notified, in registration order: never pruned.
    pending: BTreeMap<Seq, SlotId>,
    /// Terminal and notified, oldest-finished first: the pruning queue.
    delivered: BTreeMap<(u64, u64), SlotId>,
    /// Terminal tasks by status: completed, failed, cancelled.
    finished_by_status: [usize; 3],
    /// The progress and inbox of the running tasks that have either.
    live: BTreeMap<Seq, Live>,
    /// What the journal missed, and the unrecorded tasks.
    backlog: Backlog,
    /// The heads of the tasks pruned since the manager last took them
    /// ([`take_pruned`](Self::take_pruned)), oldest first.
    pruned: Vec<Arc<TaskHead>>,
}

impl Registry {
    pub(crate) fn new(max: MaxAsyncTasks) -> Self {
        Registry {
            max,
            max_queued: MaxQueuedTasks::NONE,
            over_limit: 0,
            reserved: 0,
            next_seq: 0,
            next_finish_order: 1,
            slots: Slots::default(),
            ids: IdIndex::default(),
            running: TaskList::default(),
            queue: TaskList::default(),
            starts_paused: false,
            starts_failed: false,
            pending: BTreeMap::new(),
            delivered: BTreeMap::new(),
            finished_by_status: [0; 3],
            live: BTreeMap::new(),
            backlog: Backlog::default(),
            pruned: Vec::new(),
        }
    }

    /// The heads of the tasks pruned since the last call, oldest-finished
    /// first; `None` with `keep` false, which drops them (nobody listens).
    pub(crate) fn take_pruned(&mut self, keep: bool) -> Option<Vec<Arc<TaskHead>>> {
        if self.pruned.is_empty() {
            return None;
        }
        if keep {
            Some(std::mem::take(&mut self.pruned))
        } else {
            // Cleared, not taken: the vector keeps its capacity for the next
            // change, which then allocates nothing.
            self.pruned.clear();
            None
        }
    }

    /// The unrecorded tasks the journal caught up with since the last call,
    /// oldest-registered first, as snapshots (for their events).
    pub(crate) fn take_recorded(&mut self) -> Vec<TaskSnapshot> {
        self.backlog
            .take_recorded()
            .into_iter()
            .filter_map(|(seq, slot)| {
                let record = self.slots.get(slot)?;
                (record.seq == seq).then(|| record.snapshot())
            })
            .collect()
    }

    /// Whether some changes still wait for the journal.
    pub(crate) fn has_backlog(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// Writes the changes the journal missed, alone. `Ok` when there were none
    /// or they are written now.
    pub(crate) fn retry_journal(&mut self, journal: &dyn Journal) -> Result<(), JournalError> {
        if self.backlog.is_empty() {
            return Ok(());
        }
        self.backlog.write(journal, &self.slots, [])?;
        self.backlog.caught_up();
        Ok(())
    }

    /// The slot of the task with exactly this id.
    fn slot_of(&self, id: &str) -> Option<SlotId> {
        self.ids.get(id, |slot| self.slots.id(slot))
    }

    pub(crate) fn max(&self) -> MaxAsyncTasks {
        self.max
    }

    pub(crate) fn max_queued(&self) -> MaxQueuedTasks {
        self.max_queued
    }

    /// Changes the queue's bound. Tasks already queued stay (past a lowered
    /// bound, new ones are refused until enough have started).
    pub(crate) fn set_max_queued(&mut self, max_queued: MaxQueuedTasks) {
        self.max_queued = max_queued;
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
        let written = self
            .backlog
            .write(journal, &self.slots, self.removed_entries(&pruned));
        let error = self
            .backlog
            .settle(written, &self.slots, &[], &[], 0, &pruned);
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
        if self.max.admits(self.admitted()) && self.queue.len() == 0 {
            Ok(())
        } else {
            Err(LimitReached {
                max: self.max.get(),
            })
        }
    }

    /// Where a new registration goes: `Ok(false)` to run, `Ok(true)` to the
    /// queue (the limit is full, or others wait before it), or the refusal.
    fn admission(&self) -> Result<bool, RegisterError> {
        if self.check_limit().is_ok() {
            return Ok(false);
        }
        if self.max_queued.admits(self.queue.len()) {
            return Ok(true);
        }
        Err(if self.max_queued == MaxQueuedTasks::NONE {
            RegisterError::LimitReached(LimitReached {
                max: self.max.get(),
            })
        } else {
            RegisterError::QueueFull(QueueFull {
                max: self.max.get(),
                max_queued: self.max_queued.get(),
            })
        })
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

    /// Registers a task: running when the limit admits it and nobody waits,
    /// else queued while the queue has room, else refused. With `reserved`,
    /// the task takes a reservation's slot instead (it runs; the reservation
    /// is spent whatever the outcome). The journal is told before anything
    /// changes; a registration it could not record is refused.
    pub(crate) fn register(
        &mut self,
        input: RegisterTaskInput,
        now_ms: u64,
        reserved: bool,
        journal: Option<&dyn Journal>,
    ) -> Result<TaskSnapshot, RegisterError> {
        let hash = self.ids.hash(&input.id);
        let mut queued = false;
        let refused = if input.id.is_empty() {
            Some(RegisterError::EmptyId)
        } else if self
            .ids
            .get_hashed(hash, &input.id, |slot| self.slots.id(slot))
            .is_some()
        {
            Some(RegisterError::DuplicateId(input.id.clone()))
        } else if reserved {
            None
        } else {
            match self.admission() {
                Ok(to_queue) => {
                    queued = to_queue;
                    None
                }
                Err(refused) => Some(refused),
            }
        };
        let refused = refused.or_else(|| {
            let journal = journal?;
            let entry = JournalEntry::Registered {
                id: &input.id,
                subagent_name: &input.subagent_name,
                goal_prompt: &input.goal_prompt,
                launched_at: now_ms,
                origin: input.origin.as_deref(),
                queued,
                launch: input.launch.as_deref(),
            };
            let written = self.backlog.write(journal, &self.slots, [entry]);
            written.err().map(RegisterError::Journal)
        });
        if refused.is_none() && journal.is_some() {
            self.backlog.caught_up();
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
        if input.progress.is_some() || input.inbox.is_some() || input.questions.is_some() {
            self.live.insert(
                seq,
                Live {
                    progress: input.progress,
                    inbox: input.inbox,
                    questions: input.questions,
                },
            );
        }
        let (slot, head) = self.slots.insert_with(|slot| {
            let head = Arc::new(TaskHead::with_launch(
                &input.id,
                &input.subagent_name,
                &input.goal_prompt,
                input.origin.as_deref(),
                input.launch.as_deref(),
                now_ms,
                slot,
            ));
            let record = if queued {
                Record::queued(Arc::clone(&head), seq, input.cancellation)
            } else {
                Record::running(Arc::clone(&head), seq, input.cancellation, now_ms)
            };
            (record, head)
        });
        let snapshot = if queued {
            self.queue.push(&mut self.slots, slot);
            TaskSnapshot::queued(&head)
        } else {
            self.running.push(&mut self.slots, slot);
            TaskSnapshot::running(&head, now_ms)
        };
        self.ids.insert(hash, head, |slot| self.slots.id(slot));
        Ok(snapshot)
    }

    /// Applies a terminal transition. `None` when the task is unknown or has
    /// ended (the first transition wins), or is queued and the transition is
    /// not a cancel (a task that never ran cannot complete or fail). The
    /// transition and its pruning are
    /// journaled before they are visible, and applied even when the journal's
    /// write fails (a task must never stay running forever): the error comes
    /// back in [`Transition`], and the task is unrecorded — kept from delivery
    /// — until a later write records it.
    pub(crate) fn transition(
        &mut self,
        id: &str,
        terminal: Terminal,
        now_ms: u64,
        snapshot: bool,
        journal: Option<&dyn Journal>,
    ) -> Option<Transition> {
        let slot = self.slot_of(id)?;
        let record = self.slots.get(slot)?;
        // Out of its list while its links are still there.
        if record.is_running() {
            self.running.remove(&mut self.slots, slot);
        } else if record.is_queued() && matches!(terminal, Terminal::Cancelled) {
            self.queue.remove(&mut self.slots, slot);
        } else {
            return None;
        }
        let end = match terminal {
            Terminal::Completed(output) => End::Completed(Arc::new(output)),
            Terminal::Failed(error) => End::Failed(Arc::new(error)),
            Terminal::Cancelled => End::Cancelled,
        };
        // What the runner reported so far stays with the task; its progress
        // handle goes with the run, below.
        let usage = self
            .slots
            .get(slot)
            .and_then(|record| self.live.get(&record.seq))
            .and_then(|live| live.progress.as_ref())
            .and_then(TaskProgress::usage);
        let record = self.slots.get_mut(slot)?;
        let token = record.end(end, now_ms, self.next_finish_order, usage)?;
        self.next_finish_order += 1;
        let seq = record.seq;
        let task = snapshot.then(|| record.snapshot());
        self.finished_by_status[status_slot(record.status())] += 1;
        // The inbox's sender and the progress handle go with the run: a message
        // sent from now on finds the task terminal.
        if !self.live.is_empty()
            && let Some(live) = self.live.remove(&seq)
        {
            live.end();
        }
        self.pending.insert(seq, slot);
        self.release_admission();
        let journal_error = match journal {
            None => {
                self.prune();
                None
            }
            Some(journal) => {
                let pruned = self.prune_plan();
                let finished = self
                    .slots
                    .get(slot)
                    .and_then(|record| record.finished_entry());
                let written = self.backlog.write(
                    journal,
                    &self.slots,
                    finished.into_iter().chain(self.removed_entries(&pruned)),
                );
                let error =
                    self.backlog
                        .settle(written, &self.slots, &[(seq, slot)], &[], 0, &pruned);
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
    /// (a task that is unknown, running, unrecorded or already marked is
    /// skipped). The marks and the pruning are one journal write, told before
    /// they are visible — and applied even when that write fails: a delivered
    /// result must not be offered again. The failed write joins the backlog,
    /// written again ahead of the next change; its error comes back in
    /// [`Marked`].
    pub(crate) fn mark_notified<S: AsRef<str>>(
        &mut self,
        ids: &[S],
        now_ms: u64,
        journal: Option<&dyn Journal>,
    ) -> Marked {
        // The slots marked, kept only for the journal's entries.
        let mut marked: Vec<SlotId> = Vec::new();
        let mut count = 0;
        for id in ids {
            let Some(slot) = self.slot_of(id.as_ref()) else {
                continue;
            };
            let Some(record) = self.slots.get_mut(slot) else {
                continue;
            };
            if self.backlog.is_unrecorded(record.seq) || !record.mark_notified(now_ms) {
                continue;
            }
            let key = record.delivered_key();
            self.pending.remove(&record.seq);
            self.delivered.insert(key, slot);
            count += 1;
            if journal.is_some() {
                marked.push(slot);
            }
        }
        if count == 0 {
            return Marked {
                count,
                journal_error: None,
            };
        }
        let Some(journal) = journal else {
            self.prune();
            return Marked {
                count,
                journal_error: None,
            };
        };
        let pruned = self.prune_plan();
        let notified = marked.iter().filter_map(|slot| {
            Some(JournalEntry::Notified {
                id: self.slots.get(*slot)?.head.id(),
                notified_at: now_ms,
            })
        });
        let written = self.backlog.write(
            journal,
            &self.slots,
            notified.chain(self.removed_entries(&pruned)),
        );
        let journal_error =
            self.backlog
                .settle(written, &self.slots, &[], &marked, now_ms, &pruned);
        self.remove(&pruned);
        Marked {
            count,
            journal_error,
        }
    }

    /// Starts queued tasks, first queued first, while the limit admits them —
    /// unless starts are held for the host. The starts are journaled before
    /// they happen; when that write fails none happens (nothing runs that the
    /// store does not know), and the queue waits for the next change or a
    /// retry.
    pub(crate) fn start_queued(&mut self, now_ms: u64, journal: Option<&dyn Journal>) -> Started {
        if self.starts_paused || self.queue.len() == 0 {
            return Started::default();
        }
        let room = match self.max.limit() {
            Some(limit) => limit.saturating_sub(self.admitted().max(self.over_limit)),
            None => usize::MAX,
        };
        let starting: Vec<SlotId> = self.queue.iter(&self.slots).take(room).collect();
        if starting.is_empty() {
            return Started::default();
        }
        if let Some(journal) = journal {
            let entries = starting.iter().filter_map(|slot| {
                Some(JournalEntry::Started {
                    id: self.slots.get(*slot)?.head.id(),
                    started_at: now_ms,
                })
            });
            if let Err(error) = self.backlog.write(journal, &self.slots, entries) {
                self.starts_failed = true;
                return Started {
                    tasks: Vec::new(),
                    journal_error: Some(error),
                };
            }
            self.backlog.caught_up();
        }
        self.starts_failed = false;
        let mut tasks = Vec::with_capacity(starting.len());
        for slot in starting {
            self.queue.remove(&mut self.slots, slot);
            let Some(record) = self.slots.get_mut(slot) else {
                continue;
            };
            if record.start(now_ms) {
                tasks.push(record.snapshot());
                self.running.push(&mut self.slots, slot);
            }
        }
        Started {
            tasks,
            journal_error: None,
        }
    }

    /// Whether starts from the queue wait for a journal that refused them.
    pub(crate) fn starts_failed(&self) -> bool {
        self.starts_failed
    }

    /// Lets starts from the queue happen (a restored registry pauses them until
    /// the host is ready to run what starts).
    pub(crate) fn resume_starts(&mut self) {
        self.starts_paused = false;
    }

    /// Pauses starts from the queue until [`resume_starts`](Self::resume_starts).
    pub(crate) fn pause_starts(&mut self) {
        self.starts_paused = true;
    }

    /// The queued tasks, first to start first.
    pub(crate) fn queued_tasks(&self) -> Vec<TaskSnapshot> {
        self.snapshots(self.queue.iter(&self.slots))
    }

    /// Where task `id` is in the queue, from 1 (the next to start); `None`
    /// unless it is queued. O(its position): the queue is bounded.
    pub(crate) fn queue_position(&self, id: &str) -> Option<usize> {
        let slot = self.slot_of(id)?;
        self.queue
            .iter(&self.slots)
            .position(|queued| queued == slot)
            .map(|at| at + 1)
    }

    /// Removes the oldest-finished notified tasks until at most the history limit
    /// of terminal tasks remain — in place, for a registry with no journal to
    /// tell (what [`prune_plan`](Self::prune_plan) and [`remove`](Self::remove)
    /// do in two steps, without allocating the plan).
    fn prune(&mut self) {
        let limit = self.max.history_limit();
        while self.pending.len() + self.delivered.len() > limit {
            let Some((_, slot)) = self.delivered.pop_first() else {
                break;
            };
            self.drop_record(slot);
        }
    }

    /// The notified tasks that pruning removes now, oldest-finished first: as
    /// many as the terminal tasks exceed the history limit by. Un-notified tasks
    /// are never removed and never stop the removal of others.
    fn prune_plan(&self) -> Vec<SlotId> {
        let excess =
            (self.pending.len() + self.delivered.len()).saturating_sub(self.max.history_limit());
        if excess == 0 {
            return Vec::new();
        }
        self.delivered.values().take(excess).copied().collect()
    }

    /// The journal entries for removing the records in `slots`.
    fn removed_entries<'a>(
        &'a self,
        slots: &'a [SlotId],
    ) -> impl Iterator<Item = JournalEntry<'a>> {
        slots
            .iter()
            .filter_map(|slot| self.slots.get(*slot))
            .map(|record| JournalEntry::Removed {
                id: record.head.id(),
            })
    }

    /// Removes terminal tasks (the ones [`prune_plan`](Self::prune_plan) chose).
    fn remove(&mut self, slots: &[SlotId]) {
        for &slot in slots {
            if let Some(record) = self.slots.get(slot) {
                let (key, seq) = (record.delivered_key(), record.seq);
                self.delivered.remove(&key);
                self.pending.remove(&seq);
                self.drop_record(slot);
            }
        }
    }

    /// Takes a terminal task out of the slots and the id index (the caller
    /// took it out of the pending or delivered index).
    fn drop_record(&mut self, slot: SlotId) {
        if let Some(record) = self.slots.remove(slot) {
            self.finished_by_status[status_slot(record.status())] -= 1;
            if let Some(head) = self.ids.remove(record.head) {
                self.pruned.push(head);
            }
        }
    }

    pub(crate) fn task(&self, id: &str) -> Option<TaskSnapshot> {
        self.snapshot(self.slot_of(id)?)
    }

    pub(crate) fn token(&self, id: &str) -> Option<CancellationToken> {
        self.slots.get(self.slot_of(id)?)?.token().cloned()
    }

    pub(crate) fn origin(&self, id: &str) -> Option<String> {
        let record = self.slots.get(self.slot_of(id)?)?;
        record.head.origin().map(str::to_owned)
    }

    /// The task in `slot` as readers see it: an unrecorded task (its terminal
    /// transition not journaled yet) still looks as it was before — running,
    /// or queued —, so nothing shows a result the journal does not hold.
    fn snapshot(&self, slot: SlotId) -> Option<TaskSnapshot> {
        let record = self.slots.get(slot)?;
        Some(if self.backlog.is_unrecorded(record.seq) {
            match record.started_at() {
                Some(started_at) => TaskSnapshot::running(&record.head, started_at),
                None => TaskSnapshot::queued(&record.head),
            }
        } else {
            record.snapshot()
        })
    }

    fn snapshots(&self, slots: impl Iterator<Item = SlotId>) -> Vec<TaskSnapshot> {
        slots.filter_map(|slot| self.snapshot(slot)).collect()
    }

    pub(crate) fn find_by_prefix(&self, prefix: &str) -> PrefixMatch {
        let mut matches = self.ids.with_prefix(prefix);
        match (matches.next(), matches.next()) {
            (None, _) => PrefixMatch::None,
            (Some(only), None) => self
                .snapshot(only)
                .map_or(PrefixMatch::None, PrefixMatch::One),
            (Some(first), Some(second)) => {
                let seq = |slot: SlotId| self.slots.get(slot).map_or(0, |record| record.seq);
                let mut found: Vec<(Seq, SlotId)> = [first, second]
                    .into_iter()
                    .chain(matches)
                    .map(|slot| (seq(slot), slot))
                    .collect();
                found.sort_unstable();
                PrefixMatch::Ambiguous(self.snapshots(found.into_iter().map(|(_, slot)| slot)))
            }
        }
    }

    /// Every task, in registration order: the running and pending indexes are
    /// in that order already, and the delivered tasks (at most the history
    /// limit) are sorted into it.
    pub(crate) fn tasks(&self) -> Vec<TaskSnapshot> {
        let mut all: Vec<(Seq, SlotId)> = Vec::with_capacity(self.slots.len());
        for list in [&self.running, &self.queue] {
            all.extend(
                list.iter(&self.slots)
                    .filter_map(|slot| Some((self.slots.get(slot)?.seq, slot))),
            );
        }
        all.extend(self.pending.iter().map(|(seq, slot)| (*seq, *slot)));
        all.extend(
            self.delivered
                .values()
                .filter_map(|slot| Some((self.slots.get(*slot)?.seq, *slot))),
        );
        // A stable sort merges the sorted runs in linear time.
        all.sort_by_key(|(seq, _)| *seq);
        self.snapshots(all.into_iter().map(|(_, slot)| slot))
    }

    /// The running tasks, unrecorded ones that ran included (they look
    /// running), in registration order. (The running list is in the order
    /// tasks started: a queued task joins it after tasks registered later, so
    /// it is sorted here; a task that never queued keeps it sorted.)
    pub(crate) fn running_tasks(&self) -> Vec<TaskSnapshot> {
        let unrecorded = self.backlog.unrecorded();
        let mut all: Vec<(Seq, SlotId)> = self
            .running
            .iter(&self.slots)
            .filter_map(|slot| Some((self.slots.get(slot)?.seq, slot)))
            .chain(
                unrecorded
                    .iter()
                    .filter(|(_, slot)| {
                        self.slots
                            .get(**slot)
                            .is_some_and(|record| record.started_at().is_some())
                    })
                    .map(|(seq, slot)| (*seq, *slot)),
            )
            .collect();
        all.sort_by_key(|(seq, _)| *seq);
        self.snapshots(all.into_iter().map(|(_, slot)| slot))
    }

    pub(crate) fn running_tokens(&self) -> Vec<CancellationToken> {
        self.running
            .iter(&self.slots)
            .filter_map(|slot| self.slots.get(slot)?.token().cloned())
            .collect()
    }

    /// The pending tasks that may be delivered (unrecorded ones wait for the
    /// journal).
    pub(crate) fn pending_notifications(&self) -> Vec<TaskSnapshot> {
        let unrecorded = self.backlog.unrecorded();
        let deliverable = self
            .pending
            .iter()
            .filter(|(seq, _)| unrecorded.is_empty() || !unrecorded.contains_key(seq));
        let mut tasks = Vec::with_capacity(self.pending.len() - unrecorded.len());
        tasks.extend(
            deliverable
                .filter_map(|(_, slot)| self.slots.get(*slot))
                .map(Record::snapshot),
        );
        tasks
    }

    pub(crate) fn has_pending(&self) -> bool {
        self.pending.len() > self.backlog.unrecorded().len()
    }

    /// The counts as readers see them: unrecorded tasks count as running.
    pub(crate) fn counts(&self) -> TaskCounts {
        let [mut completed, mut failed, mut cancelled] = self.finished_by_status;
        let (mut queued, mut running) = (self.queue.len(), self.running.len());
        let unrecorded = self.backlog.unrecorded();
        for record in unrecorded.values().filter_map(|slot| self.slots.get(*slot)) {
            match record.status() {
                AsyncTaskStatus::Completed => completed -= 1,
                AsyncTaskStatus::Failed => failed -= 1,
                AsyncTaskStatus::Cancelled => cancelled -= 1,
                _ => {}
            }
            // Seen as it was: running, or queued when it never started.
            match record.started_at() {
                Some(_) => running += 1,
                None => queued += 1,
            }
        }
        TaskCounts {
            queued,
            running,
            completed,
            failed,
            cancelled,
            pending_notifications: self.pending.len() - unrecorded.len(),
            reserved: self.reserved,
        }
    }
}

/// The slot of `status` in `finished_by_status` (terminal statuses only are
/// counted there; the last arm keeps the match total).
fn status_slot(status: AsyncTaskStatus) -> usize {
    match status {
        AsyncTaskStatus::Completed => 0,
        AsyncTaskStatus::Failed => 1,
        _ => 2,
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
    use asynctask_model::{AsyncTaskInfo, TerminateReason};
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
        registry
            .tasks()
            .into_iter()
            .map(|t| t.id().to_owned())
            .collect()
    }

    fn marked(count: usize) -> Marked {
        Marked {
            count,
            journal_error: None,
        }
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
            assert_eq!(registry.mark_notified(&[id], 6, None), marked(1));
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
        assert_eq!(
            finished.task.map(|task| task.to_info()),
            Some(expected.clone())
        );
        assert_eq!(registry.mark_notified(&["t"], 30, None), marked(1));
        expected.mark_notified(30);
        assert_eq!(
            registry.task("t").map(|task| task.to_info()),
            Some(expected)
        );
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
            (task.status(), task.error(), task.completed_at()),
            (AsyncTaskStatus::Failed, Some("first"), Some(1))
        );
    }

    #[test]
    fn a_pruned_task_frees_its_slot_for_the_next_one() {
        let mut registry = registry(-1); // history 10
        for n in 0..30 {
            let id = format!("t{n}");
            run(&mut registry, &id, n);
            registry
                .transition(&id, Terminal::Cancelled, n, false, None)
                .unwrap();
            registry.mark_notified(&[id.as_str()], n, None);
            registry.check_invariants().unwrap();
        }
        assert_eq!(registry.slots.len(), 10);
        assert_eq!(registry.slots.iter().map(|(slot, _)| slot).max(), Some(10));
        assert_eq!(ids(&registry).first().map(String::as_str), Some("t20"));
    }
}
