//! The journal backlog: changes applied in memory although their journal write
//! failed, written again ahead of the next change until a write succeeds, and
//! the *unrecorded* tasks — finished, but their end not in the journal yet.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::journal::{Journal, JournalEntry, JournalError, write};
use crate::record::{Seq, Slots};
use crate::snapshot::{SlotId, TaskHead};

/// A change the journal missed.
#[derive(Debug)]
pub(crate) enum Missed {
    /// The task in this slot reached its terminal state. It stays in the slot:
    /// an unrecorded task is pending, and pending tasks are never pruned.
    Finished(SlotId),
    /// The task was marked notified.
    Notified {
        head: Arc<TaskHead>,
        notified_at: u64,
    },
    /// The task was pruned.
    Removed(Arc<TaskHead>),
}

/// What the journal missed, oldest first, and what that keeps from readers.
///
/// Every write carries the missed changes ahead of its own, so a journal that
/// failed once catches up instead of missing them for good (a task it still
/// holds as running would refuse every later mark). Until then a task whose
/// terminal transition was missed is *unrecorded*: terminal in memory (its slot
/// under the limit is free) but not offered for delivery — a result the store
/// does not hold must never reach the model — and shown to readers as running.
/// A missed mark or removal keeps nothing from anyone: the result was
/// delivered; if the process ends before a write catches up, the store still
/// holds it undelivered, and it is delivered again after the restart.
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    missed: Vec<Missed>,
    /// The unrecorded tasks, by registration order.
    unrecorded: BTreeMap<Seq, SlotId>,
    /// Unrecorded tasks the journal caught up with since the manager last
    /// looked: it announces them, as their transitions could not be.
    recorded: Vec<(Seq, SlotId)>,
}

impl Backlog {
    /// Whether some changes still wait for the journal.
    pub(crate) fn is_empty(&self) -> bool {
        self.missed.is_empty()
    }

    pub(crate) fn missed(&self) -> &[Missed] {
        &self.missed
    }

    pub(crate) fn unrecorded(&self) -> &BTreeMap<Seq, SlotId> {
        &self.unrecorded
    }

    pub(crate) fn is_unrecorded(&self, seq: Seq) -> bool {
        !self.unrecorded.is_empty() && self.unrecorded.contains_key(&seq)
    }

    /// Writes `change` to the journal, preceded by the changes it missed.
    pub(crate) fn write<'a>(
        &'a self,
        journal: &dyn Journal,
        slots: &'a Slots,
        change: impl IntoIterator<Item = JournalEntry<'a>>,
    ) -> Result<(), JournalError> {
        let missed = self.missed.iter().filter_map(|missed| match missed {
            Missed::Finished(slot) => slots.get(*slot)?.finished_entry(),
            Missed::Notified { head, notified_at } => Some(JournalEntry::Notified {
                id: head.id(),
                notified_at: *notified_at,
            }),
            Missed::Removed(head) => Some(JournalEntry::Removed { id: head.id() }),
        });
        let entries: Vec<JournalEntry<'a>> = missed.chain(change).collect();
        write(journal, &entries)
    }

    /// A write succeeded: the journal holds every change, and the unrecorded
    /// tasks become deliverable.
    pub(crate) fn caught_up(&mut self) {
        self.missed.clear();
        if !self.unrecorded.is_empty() {
            self.recorded.extend(std::mem::take(&mut self.unrecorded));
        }
    }

    /// After a write of a change: on success the journal has caught up; on
    /// failure the change joins what it missed — the terminal transitions of
    /// `finished` (which become unrecorded), the marks of `marked` at
    /// `notified_at`, and the removal of `pruned`.
    pub(crate) fn settle(
        &mut self,
        written: Result<(), JournalError>,
        slots: &Slots,
        finished: &[(Seq, SlotId)],
        marked: &[SlotId],
        notified_at: u64,
        pruned: &[SlotId],
    ) -> Option<JournalError> {
        let error = match written {
            Ok(()) => {
                self.caught_up();
                return None;
            }
            Err(error) => error,
        };
        for &(seq, slot) in finished {
            self.missed.push(Missed::Finished(slot));
            self.unrecorded.insert(seq, slot);
        }
        let head = |slot: &SlotId| slots.get(*slot).map(|record| Arc::clone(&record.head));
        self.missed.extend(
            marked
                .iter()
                .filter_map(head)
                .map(|head| Missed::Notified { head, notified_at }),
        );
        self.missed
            .extend(pruned.iter().filter_map(head).map(Missed::Removed));
        Some(error)
    }

    /// The tasks recorded since the last call, oldest-registered first.
    pub(crate) fn take_recorded(&mut self) -> Vec<(Seq, SlotId)> {
        std::mem::take(&mut self.recorded)
    }
}
