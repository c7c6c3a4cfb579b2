//! One task as the registry keeps it (`Record`), and the slots that hold every
//! record in place.

use std::sync::Arc;

use asynctask_model::{AsyncTaskStatus, OutputObject};
use tokio_util::sync::CancellationToken;

use crate::index::SlotId;
use crate::journal::{JournalEntry, TerminalOutcome};
use crate::snapshot::{TaskHead, TaskSnapshot};

/// Registration order: a counter that only grows.
pub(crate) type Seq = u64;

/// One task: its shared head, and the little that changes.
///
/// Its transitions follow the model's state machine rule for rule
/// (`AsyncTaskInfo::complete` and friends); the reference-model property test
/// checks that they agree.
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) head: Arc<TaskHead>,
    pub(crate) seq: Seq,
    /// When the task reached its terminal state; meaningless while running.
    pub(crate) completed_at: u64,
    pub(crate) notified_at: Option<u64>,
    /// The order in which the task reached its terminal state (0 while
    /// running); breaks ties between tasks that finished in the same
    /// millisecond.
    pub(crate) finish_order: u64,
    pub(crate) run: RunState,
}

/// The status and what comes with it: a running task keeps its subagent's
/// token; a terminal one drops it and keeps its result, shared with every
/// snapshot taken of it.
#[derive(Debug)]
pub(crate) enum RunState {
    Running(CancellationToken),
    Completed(Arc<OutputObject>),
    /// An `Arc<String>`: the error moves in without a copy, and the pointer
    /// stays thin (the enum stays 16 bytes).
    Failed(Arc<String>),
    Cancelled,
}

impl Record {
    pub(crate) fn running(head: Arc<TaskHead>, seq: Seq, token: CancellationToken) -> Self {
        Record {
            head,
            seq,
            completed_at: 0,
            notified_at: None,
            finish_order: 0,
            run: RunState::Running(token),
        }
    }

    pub(crate) fn status(&self) -> AsyncTaskStatus {
        match self.run {
            RunState::Running(_) => AsyncTaskStatus::Running,
            RunState::Completed(_) => AsyncTaskStatus::Completed,
            RunState::Failed(_) => AsyncTaskStatus::Failed,
            RunState::Cancelled => AsyncTaskStatus::Cancelled,
        }
    }

    pub(crate) fn token(&self) -> Option<&CancellationToken> {
        match &self.run {
            RunState::Running(token) => Some(token),
            _ => None,
        }
    }

    /// The task as it is.
    pub(crate) fn snapshot(&self) -> TaskSnapshot {
        let (output, error) = match &self.run {
            RunState::Running(_) => return TaskSnapshot::running(&self.head),
            RunState::Completed(output) => (Some(output), None),
            RunState::Failed(error) => (None, Some(error)),
            RunState::Cancelled => (None, None),
        };
        TaskSnapshot::ended(
            &self.head,
            self.status(),
            self.completed_at,
            self.notified_at,
            output,
            error,
        )
    }

    /// A terminal transition: refused (returning `None`) unless running; else
    /// returns the token the task had.
    pub(crate) fn end(
        &mut self,
        run: RunState,
        now_ms: u64,
        order: u64,
    ) -> Option<CancellationToken> {
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
    pub(crate) fn mark_notified(&mut self, now_ms: u64) -> bool {
        if matches!(self.run, RunState::Running(_)) || self.notified_at.is_some() {
            return false;
        }
        self.notified_at = Some(now_ms);
        true
    }

    /// The pruning queue's key: oldest-finished first, ties in finish order.
    pub(crate) fn delivered_key(&self) -> (u64, u64) {
        (self.completed_at, self.finish_order)
    }

    /// The journal entry of the terminal transition this task made (`None`
    /// while it runs).
    pub(crate) fn finished_entry(&self) -> Option<JournalEntry<'_>> {
        let outcome = match &self.run {
            RunState::Running(_) => return None,
            RunState::Completed(output) => TerminalOutcome::Completed(output),
            RunState::Failed(error) => TerminalOutcome::Failed(error),
            RunState::Cancelled => TerminalOutcome::Cancelled,
        };
        Some(JournalEntry::Finished {
            id: self.head.id(),
            outcome,
            completed_at: self.completed_at,
            finish_order: self.finish_order,
        })
    }
}

/// A slot: a record, or a link in the list of free slots.
#[derive(Debug)]
enum Slot {
    Used(Record),
    Free { next: Option<SlotId> },
}

// A slot is what every task in the registry costs besides its head, its
// strings and its index entries; keep it from creeping up.
const _: () = assert!(std::mem::size_of::<Slot>() <= 64);

/// Every record, in place: a slot's id stays the record's address for the
/// record's whole life, so the indexes hold slot ids (4 bytes, no reference
/// counts) and reach a record in O(1). Freed slots are reused, newest first.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    slots: Vec<Slot>,
    free: Option<SlotId>,
    len: usize,
}

impl Slots {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn get(&self, slot: SlotId) -> Option<&Record> {
        match self.slots.get(slot as usize)? {
            Slot::Used(record) => Some(record),
            Slot::Free { .. } => None,
        }
    }

    pub(crate) fn get_mut(&mut self, slot: SlotId) -> Option<&mut Record> {
        match self.slots.get_mut(slot as usize)? {
            Slot::Used(record) => Some(record),
            Slot::Free { .. } => None,
        }
    }

    /// The id of the record in `slot` (empty for a free slot, which no index
    /// names).
    pub(crate) fn id(&self, slot: SlotId) -> &str {
        self.get(slot).map_or("", |record| record.head.id())
    }

    /// Puts `record` in a free slot (or a new one) and returns the slot.
    pub(crate) fn insert(&mut self, record: Record) -> SlotId {
        self.len += 1;
        if let Some(slot) = self.free
            && let Some(free) = self.slots.get_mut(slot as usize)
        {
            if let Slot::Free { next } = *free {
                self.free = next;
            }
            *free = Slot::Used(record);
            return slot;
        }
        // 2^32 records would take more than 400 GB: the registry's memory runs
        // out long before slot ids do.
        let slot = SlotId::try_from(self.slots.len()).expect("fewer than 2^32 tasks held");
        self.slots.push(Slot::Used(record));
        slot
    }

    /// Empties `slot`, returning its record.
    pub(crate) fn remove(&mut self, slot: SlotId) -> Option<Record> {
        let entry = self.slots.get_mut(slot as usize)?;
        if matches!(entry, Slot::Free { .. }) {
            return None;
        }
        let Slot::Used(record) = std::mem::replace(entry, Slot::Free { next: self.free }) else {
            return None;
        };
        self.free = Some(slot);
        self.len -= 1;
        Some(record)
    }

    /// Every record with its slot, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (SlotId, &Record)> {
        (0..)
            .zip(&self.slots)
            .filter_map(|(slot, entry)| match entry {
                Slot::Used(record) => Some((slot, record)),
                Slot::Free { .. } => None,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn record(id: &str, seq: Seq) -> Record {
        let head = Arc::new(TaskHead::new(id, "r", "g", None, 0));
        Record::running(head, seq, CancellationToken::new())
    }

    #[test]
    fn freed_slots_are_reused_and_a_record_keeps_its_slot() {
        let mut slots = Slots::default();
        let a = slots.insert(record("a", 0));
        let b = slots.insert(record("b", 1));
        let c = slots.insert(record("c", 2));
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(slots.remove(b).map(|r| r.seq), Some(1));
        assert!(slots.remove(b).is_none(), "already free");
        assert_eq!(slots.remove(a).map(|r| r.seq), Some(0));
        assert_eq!(slots.len(), 1);
        assert_eq!(
            slots.insert(record("d", 3)),
            a,
            "the newest free slot first"
        );
        assert_eq!(slots.insert(record("e", 4)), b);
        assert_eq!(slots.insert(record("f", 5)), 3);
        let ids: Vec<&str> = slots.iter().map(|(_, record)| record.head.id()).collect();
        assert_eq!(ids, ["d", "e", "c", "f"]);
        assert_eq!((slots.id(c), slots.id(9)), ("c", ""));
    }
}
