//! One task as the registry keeps it (`Record`), the slots that hold every
//! record in place, and the lists of running and of queued tasks threaded
//! through them.

use std::sync::Arc;

use asynctask_model::{AsyncTaskStatus, OutputObject, TaskUsage};
use tokio_util::sync::CancellationToken;

use crate::journal::{JournalEntry, TerminalOutcome};
use crate::snapshot::{SlotId, TaskHead, TaskSnapshot};

/// Registration order: a counter that only grows.
pub(crate) type Seq = u64;

/// The end of a list, or no slot.
const NIL: SlotId = SlotId::MAX;

/// "Never" for a time kept as a plain `u64` (a record stays small): no clock
/// reads `u64::MAX` milliseconds.
const NEVER: u64 = u64::MAX;

/// The latest time a record holds: the manager's clock reads no later.
pub(crate) const LATEST: u64 = NEVER - 1;

fn time(at: u64) -> Option<u64> {
    (at != NEVER).then_some(at)
}

/// One task: its shared head, and the little that changes.
///
/// Its transitions follow the model's state machine rule for rule
/// (`AsyncTaskInfo::complete` and friends); the reference-model property test
/// checks that they agree.
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) head: Arc<TaskHead>,
    pub(crate) seq: Seq,
    state: RunState,
}

/// A queued or running task keeps its subagent's token and its place in the
/// list of queued or running tasks; a finished one drops both and keeps how it
/// ended.
#[derive(Debug)]
enum RunState {
    Queued {
        token: CancellationToken,
        /// The neighbours in the list of queued tasks ([`NIL`] at its ends).
        prev: SlotId,
        next: SlotId,
    },
    Running {
        token: CancellationToken,
        /// The neighbours in the list of running tasks ([`NIL`] at its ends).
        prev: SlotId,
        next: SlotId,
        started_at: u64,
    },
    Ended(Ended),
}

/// How a task ended, when, and whether the model was told.
#[derive(Debug)]
struct Ended {
    end: End,
    completed_at: u64,
    /// The order in which the task reached its terminal state: breaks ties
    /// between tasks that finished in the same millisecond.
    finish_order: u64,
    /// [`NEVER`] until the model is told.
    notified_at: u64,
    /// [`NEVER`] for a task cancelled in the queue.
    started_at: u64,
    /// What its runner had reported it used when it ended, shared with every
    /// snapshot taken of it.
    usage: Option<Arc<TaskUsage>>,
}

/// A terminal state and its result, shared with every snapshot taken of it.
#[derive(Debug)]
pub(crate) enum End {
    Completed(Arc<OutputObject>),
    /// An `Arc<String>`: the error moves in without a copy, and the pointer
    /// stays thin.
    Failed(Arc<String>),
    Cancelled,
}

impl End {
    fn status(&self) -> AsyncTaskStatus {
        match self {
            End::Completed(_) => AsyncTaskStatus::Completed,
            End::Failed(_) => AsyncTaskStatus::Failed,
            End::Cancelled => AsyncTaskStatus::Cancelled,
        }
    }
}

impl Record {
    /// A running task that started at `started_at`, linked into no list yet.
    pub(crate) fn running(
        head: Arc<TaskHead>,
        seq: Seq,
        token: CancellationToken,
        started_at: u64,
    ) -> Self {
        Record {
            head,
            seq,
            state: RunState::Running {
                token,
                prev: NIL,
                next: NIL,
                started_at,
            },
        }
    }

    /// A queued task, linked into no list yet.
    pub(crate) fn queued(head: Arc<TaskHead>, seq: Seq, token: CancellationToken) -> Self {
        Record {
            head,
            seq,
            state: RunState::Queued {
                token,
                prev: NIL,
                next: NIL,
            },
        }
    }

    /// A task that ended (restored from a store); its finish order is set
    /// later, once every restored task is ranked.
    pub(crate) fn ended(
        head: Arc<TaskHead>,
        seq: Seq,
        end: End,
        started_at: Option<u64>,
        completed_at: u64,
        notified_at: Option<u64>,
        usage: Option<TaskUsage>,
    ) -> Self {
        Record {
            head,
            seq,
            state: RunState::Ended(Ended {
                end,
                completed_at,
                finish_order: 0,
                notified_at: notified_at.map_or(NEVER, |at| at.min(LATEST)),
                started_at: started_at.map_or(NEVER, |at| at.min(LATEST)),
                usage: usage.map(Arc::new),
            }),
        }
    }

    pub(crate) fn status(&self) -> AsyncTaskStatus {
        match &self.state {
            RunState::Queued { .. } => AsyncTaskStatus::Queued,
            RunState::Running { .. } => AsyncTaskStatus::Running,
            RunState::Ended(ended) => ended.end.status(),
        }
    }

    pub(crate) fn is_running(&self) -> bool {
        matches!(self.state, RunState::Running { .. })
    }

    pub(crate) fn is_queued(&self) -> bool {
        matches!(self.state, RunState::Queued { .. })
    }

    pub(crate) fn token(&self) -> Option<&CancellationToken> {
        match &self.state {
            RunState::Queued { token, .. } | RunState::Running { token, .. } => Some(token),
            RunState::Ended(_) => None,
        }
    }

    pub(crate) fn notified_at(&self) -> Option<u64> {
        match &self.state {
            RunState::Ended(ended) => time(ended.notified_at),
            _ => None,
        }
    }

    /// When the subagent started (`None` while queued, and for a task
    /// cancelled in the queue).
    pub(crate) fn started_at(&self) -> Option<u64> {
        match &self.state {
            RunState::Queued { .. } => None,
            RunState::Running { started_at, .. } => Some(*started_at),
            RunState::Ended(ended) => time(ended.started_at),
        }
    }

    /// Moves a queued task to running, started at `now_ms`, linked into no
    /// list (the caller took it out of the queue first). `false`, changing
    /// nothing, unless it is queued.
    pub(crate) fn start(&mut self, now_ms: u64) -> bool {
        let RunState::Queued { token, .. } = &self.state else {
            return false;
        };
        self.state = RunState::Running {
            token: token.clone(),
            prev: NIL,
            next: NIL,
            started_at: now_ms,
        };
        true
    }

    /// Sets the finish order of a task that ended (a restore ranks them).
    pub(crate) fn set_finish_order(&mut self, order: u64) {
        if let RunState::Ended(ended) = &mut self.state {
            ended.finish_order = order;
        }
    }

    /// The task as it is.
    pub(crate) fn snapshot(&self) -> TaskSnapshot {
        let ended = match &self.state {
            RunState::Queued { .. } => return TaskSnapshot::queued(&self.head),
            RunState::Running { started_at, .. } => {
                return TaskSnapshot::running(&self.head, *started_at);
            }
            RunState::Ended(ended) => ended,
        };
        let (output, error) = match &ended.end {
            End::Completed(output) => (Some(output), None),
            End::Failed(error) => (None, Some(error)),
            End::Cancelled => (None, None),
        };
        TaskSnapshot::ended(
            &self.head,
            ended.end.status(),
            time(ended.started_at),
            ended.completed_at,
            time(ended.notified_at),
            output,
            error,
            ended.usage.as_ref(),
        )
    }

    /// A terminal transition, with what the task's runner reported it used:
    /// refused (returning `None`) when the task has ended already — and
    /// unless the caller took it out of its list first; else returns the
    /// token the task had. A queued task only ends cancelled (the caller
    /// checks).
    pub(crate) fn end(
        &mut self,
        end: End,
        now_ms: u64,
        order: u64,
        usage: Option<TaskUsage>,
    ) -> Option<CancellationToken> {
        let started_at = self.started_at().unwrap_or(NEVER);
        let ended = RunState::Ended(Ended {
            end,
            completed_at: now_ms,
            finish_order: order,
            notified_at: NEVER,
            started_at,
            usage: usage.map(Arc::new),
        });
        match std::mem::replace(&mut self.state, ended) {
            RunState::Queued { token, .. } | RunState::Running { token, .. } => Some(token),
            // Ended already: put the first end back.
            was @ RunState::Ended(_) => {
                self.state = was;
                None
            }
        }
    }

    /// Refused unless terminal and not yet notified.
    pub(crate) fn mark_notified(&mut self, now_ms: u64) -> bool {
        match &mut self.state {
            RunState::Ended(ended) if ended.notified_at == NEVER => {
                ended.notified_at = now_ms;
                true
            }
            _ => false,
        }
    }

    /// The pruning queue's key: oldest-finished first, ties in finish order
    /// (`(0, 0)` until it ends).
    pub(crate) fn delivered_key(&self) -> (u64, u64) {
        match &self.state {
            RunState::Ended(ended) => (ended.completed_at, ended.finish_order),
            _ => (0, 0),
        }
    }

    /// The journal entry of the terminal transition this task made (`None`
    /// while it runs).
    pub(crate) fn finished_entry(&self) -> Option<JournalEntry<'_>> {
        let RunState::Ended(ended) = &self.state else {
            return None;
        };
        let outcome = match &ended.end {
            End::Completed(output) => TerminalOutcome::Completed(output),
            End::Failed(error) => TerminalOutcome::Failed(error),
            End::Cancelled => TerminalOutcome::Cancelled,
        };
        Some(JournalEntry::Finished {
            id: self.head.id(),
            outcome,
            completed_at: ended.completed_at,
            finish_order: ended.finish_order,
            usage: ended.usage.as_deref(),
        })
    }

    /// The links of the list the task is in, queued or running (`None` once
    /// it has ended).
    fn links(&mut self) -> Option<(&mut SlotId, &mut SlotId)> {
        match &mut self.state {
            RunState::Queued { prev, next, .. } | RunState::Running { prev, next, .. } => {
                Some((prev, next))
            }
            RunState::Ended(_) => None,
        }
    }

    fn next(&self) -> SlotId {
        match self.state {
            RunState::Queued { next, .. } | RunState::Running { next, .. } => next,
            RunState::Ended(_) => NIL,
        }
    }
}

/// A slot: a record, or a link in the list of free slots.
#[derive(Debug)]
enum Slot {
    Used(Record),
    Free { next: SlotId },
}

// A slot is what every task in the registry costs besides its head, its
// strings and its index entries; keep it from creeping up. (It was 64 bytes
// until a finished task kept its usage: one pointer more.)
const _: () = assert!(std::mem::size_of::<Slot>() <= 72);

/// Slots per chunk: a chunk is allocated whole, once, and never moves.
const CHUNK: usize = 1024;

/// Every record, in place: a slot's id stays the record's address for the
/// record's whole life, so the indexes hold slot ids (4 bytes, no reference
/// counts) and reach a record in O(1). Freed slots are reused, newest first.
///
/// Slots come in fixed chunks rather than one growing vector: no growth ever
/// copies every record under the registry's lock, and at most one chunk is
/// allocated ahead of need.
#[derive(Debug)]
pub(crate) struct Slots {
    chunks: Vec<Vec<Slot>>,
    free: SlotId,
    len: usize,
}

impl Default for Slots {
    fn default() -> Self {
        Slots {
            chunks: Vec::new(),
            free: NIL,
            len: 0,
        }
    }
}

impl Slots {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn entry(&self, slot: SlotId) -> Option<&Slot> {
        let at = slot as usize;
        self.chunks.get(at / CHUNK)?.get(at % CHUNK)
    }

    fn entry_mut(&mut self, slot: SlotId) -> Option<&mut Slot> {
        let at = slot as usize;
        self.chunks.get_mut(at / CHUNK)?.get_mut(at % CHUNK)
    }

    pub(crate) fn get(&self, slot: SlotId) -> Option<&Record> {
        match self.entry(slot)? {
            Slot::Used(record) => Some(record),
            Slot::Free { .. } => None,
        }
    }

    pub(crate) fn get_mut(&mut self, slot: SlotId) -> Option<&mut Record> {
        match self.entry_mut(slot)? {
            Slot::Used(record) => Some(record),
            Slot::Free { .. } => None,
        }
    }

    /// The id of the record in `slot` (empty for a free slot, which no index
    /// names).
    pub(crate) fn id(&self, slot: SlotId) -> &str {
        self.get(slot).map_or("", |record| record.head.id())
    }

    /// Puts the record `make` builds (told its slot) in a free slot, or a new
    /// one; returns the slot and what else `make` returned.
    pub(crate) fn insert_with<T>(
        &mut self,
        make: impl FnOnce(SlotId) -> (Record, T),
    ) -> (SlotId, T) {
        self.len += 1;
        let free = self.free;
        let at = free as usize;
        if let Some(&Slot::Free { next }) = self.entry(free)
            && let Some(entry) = self
                .chunks
                .get_mut(at / CHUNK)
                .and_then(|chunk| chunk.get_mut(at % CHUNK))
        {
            self.free = next;
            let (record, made) = make(free);
            *entry = Slot::Used(record);
            return (free, made);
        }
        if self.chunks.last().is_none_or(|chunk| chunk.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let full = self.chunks.len().saturating_sub(1) * CHUNK;
        let chunk = self.chunks.iter_mut().last();
        let at = full + chunk.as_ref().map_or(0, |chunk| chunk.len());
        // 2^32 records would take more than 400 GB: the registry's memory runs
        // out long before slot ids do.
        let slot = SlotId::try_from(at).expect("fewer than 2^32 tasks held");
        let (record, made) = make(slot);
        if let Some(chunk) = chunk {
            chunk.push(Slot::Used(record));
        }
        (slot, made)
    }

    /// Empties `slot`, returning its record (a finished one: in no list).
    pub(crate) fn remove(&mut self, slot: SlotId) -> Option<Record> {
        let free = self.free;
        let entry = self.entry_mut(slot)?;
        if matches!(entry, Slot::Free { .. }) {
            return None;
        }
        let Slot::Used(record) = std::mem::replace(entry, Slot::Free { next: free }) else {
            return None;
        };
        self.free = slot;
        self.len -= 1;
        Some(record)
    }

    /// Every record with its slot, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (SlotId, &Record)> {
        (0..)
            .zip(self.chunks.iter().flatten())
            .filter_map(|(slot, entry)| match entry {
                Slot::Used(record) => Some((slot, record)),
                Slot::Free { .. } => None,
            })
    }
}

/// Tasks in the order they joined (the running ones, or the queued ones), as a
/// list threaded through their records: a task is appended, one that leaves
/// unlinked, both in O(1) without allocating. A record is in one list at most.
#[derive(Debug)]
pub(crate) struct TaskList {
    first: SlotId,
    last: SlotId,
    len: usize,
}

impl Default for TaskList {
    fn default() -> Self {
        TaskList {
            first: NIL,
            last: NIL,
            len: 0,
        }
    }
}

impl TaskList {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends the task in `slot`.
    pub(crate) fn push(&mut self, slots: &mut Slots, slot: SlotId) {
        let last = self.last;
        let Some((prev, next)) = slots.get_mut(slot).and_then(Record::links) else {
            return;
        };
        (*prev, *next) = (last, NIL);
        match slots.get_mut(last).and_then(Record::links) {
            Some((_, next)) => *next = slot,
            None => self.first = slot,
        }
        self.last = slot;
        self.len += 1;
    }

    /// Unlinks the task in `slot`, which is in the list.
    pub(crate) fn remove(&mut self, slots: &mut Slots, slot: SlotId) {
        let Some((prev, next)) = slots.get_mut(slot).and_then(Record::links) else {
            return;
        };
        let (before, after) = (*prev, *next);
        (*prev, *next) = (NIL, NIL);
        match slots.get_mut(before).and_then(Record::links) {
            Some((_, next)) => *next = after,
            None => self.first = after,
        }
        match slots.get_mut(after).and_then(Record::links) {
            Some((prev, _)) => *prev = before,
            None => self.last = before,
        }
        self.len -= 1;
    }

    /// The slots in the list, first to last.
    pub(crate) fn iter<'a>(&self, slots: &'a Slots) -> impl Iterator<Item = SlotId> + 'a {
        let mut at = self.first;
        std::iter::from_fn(move || {
            let slot = at;
            at = slots.get(slot)?.next();
            Some(slot)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn insert(slots: &mut Slots, id: &str, seq: Seq) -> SlotId {
        let (slot, ()) = slots.insert_with(|slot| {
            let head = Arc::new(TaskHead::new(id, "r", "g", None, 0, slot));
            (Record::running(head, seq, CancellationToken::new(), 0), ())
        });
        slot
    }

    #[test]
    fn freed_slots_are_reused_and_a_record_keeps_its_slot() {
        let mut slots = Slots::default();
        let a = insert(&mut slots, "a", 0);
        let b = insert(&mut slots, "b", 1);
        let c = insert(&mut slots, "c", 2);
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(slots.remove(b).map(|r| r.seq), Some(1));
        assert!(slots.remove(b).is_none(), "already free");
        assert_eq!(slots.remove(a).map(|r| r.seq), Some(0));
        assert_eq!(slots.len(), 1);
        assert_eq!(insert(&mut slots, "d", 3), a, "the newest free slot first");
        assert_eq!(insert(&mut slots, "e", 4), b);
        assert_eq!(insert(&mut slots, "f", 5), 3);
        let ids: Vec<&str> = slots.iter().map(|(_, record)| record.head.id()).collect();
        assert_eq!(ids, ["d", "e", "c", "f"]);
        assert_eq!((slots.id(c), slots.id(9)), ("c", ""));
        assert_eq!(slots.get(c).map(|record| record.head.slot()), Some(c));
    }

    #[test]
    fn slots_span_chunks() {
        let mut slots = Slots::default();
        let count = 2 * CHUNK + 3;
        for n in 0..count {
            assert_eq!(insert(&mut slots, &n.to_string(), n as Seq) as usize, n);
        }
        assert_eq!(slots.chunks.len(), 3);
        let last = SlotId::try_from(count - 1).unwrap();
        assert_eq!(slots.id(last), (count - 1).to_string());
        assert_eq!(slots.iter().count(), count);
    }

    #[test]
    fn the_running_list_keeps_registration_order_through_any_removal() {
        let mut slots = Slots::default();
        let mut list = TaskList::default();
        let all: Vec<SlotId> = (0..5)
            .map(|n| insert(&mut slots, &n.to_string(), n))
            .collect();
        for &slot in &all {
            list.push(&mut slots, slot);
        }
        let listed = |list: &TaskList, slots: &Slots| list.iter(slots).collect::<Vec<_>>();
        assert_eq!(listed(&list, &slots), all);
        for removed in [2, 0, 4] {
            list.remove(&mut slots, all[removed]);
        }
        assert_eq!(
            (listed(&list, &slots), list.len()),
            (vec![all[1], all[3]], 2)
        );
        list.remove(&mut slots, all[1]);
        list.remove(&mut slots, all[3]);
        assert_eq!((listed(&list, &slots), list.len()), (Vec::new(), 0));
        list.push(&mut slots, all[2]);
        assert_eq!(listed(&list, &slots), [all[2]]);
    }
}
