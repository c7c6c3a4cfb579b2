//! The registry's invariants, checked against a full scan: every index is
//! rebuilt from the records and compared with the one the registry keeps.

use std::collections::{BTreeMap, BTreeSet};

use asynctask_model::AsyncTaskStatus;

use super::{Registry, status_slot};
use crate::backlog::Missed;
use crate::record::Seq;
use crate::snapshot::SlotId;

impl Registry {
    /// Checks every invariant against a full scan; `Err` names the first broken one.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        self.check_limit_holds()?;
        self.check_indexes()?;
        self.check_backlog()?;
        self.check_history()
    }

    fn check_limit_holds(&self) -> Result<(), String> {
        // A queued task waits only while the limit is full — or while starts
        // are held for the host, or wait for a journal that refused them.
        if self.queue.len() > 0
            && self.max.admits(self.admitted().max(self.over_limit))
            && !self.starts_paused
            && !self.starts_failed
        {
            return Err(format!(
                "{} task(s) queued while {} running + {} reserved leave a slot free",
                self.queue.len(),
                self.running.len(),
                self.reserved
            ));
        }
        if let Some(limit) = self.max.limit() {
            let allowed = limit.max(self.over_limit);
            if self.admitted() > allowed {
                return Err(format!(
                    "{} running + {} reserved exceed the limit of {limit} (grandfathered: {})",
                    self.running.len(),
                    self.reserved,
                    self.over_limit
                ));
            }
        }
        Ok(())
    }

    /// Every index, rebuilt from the records.
    fn check_indexes(&self) -> Result<(), String> {
        let mut running = BTreeMap::new();
        let mut queued = BTreeMap::new();
        let mut pending = BTreeMap::new();
        let mut delivered = BTreeMap::new();
        let mut by_status = [0; 3];
        let mut seqs = BTreeSet::new();
        for (slot, record) in self.slots.iter() {
            let id = record.head.id();
            if self.slot_of(id) != Some(slot) || !self.ids.hashed(id, slot) {
                return Err(format!("id index does not map '{id}' to its task"));
            }
            if !seqs.insert(record.seq) || record.seq >= self.next_seq {
                return Err(format!("task '{id}' has a registration order of another"));
            }
            // A running task has no completion or notification time: its
            // record's type holds none.
            let status = record.status();
            match (status, record.notified_at()) {
                (AsyncTaskStatus::Running, _) => {
                    running.insert(record.seq, slot);
                }
                (AsyncTaskStatus::Queued, _) => {
                    if record.started_at().is_some() {
                        return Err(format!("queued task '{id}' has a start time"));
                    }
                    queued.insert(record.seq, slot);
                }
                (status, None) => {
                    by_status[status_slot(status)] += 1;
                    pending.insert(record.seq, slot);
                }
                (status, Some(_)) => {
                    by_status[status_slot(status)] += 1;
                    delivered.insert(record.delivered_key(), slot);
                }
            }
        }
        let tasks = self.slots.len();
        if (self.ids.len(), self.ids.ordered_len()) != (tasks, tasks) {
            return Err(format!(
                "id index holds {} hashed and {} ordered ids for {tasks} tasks",
                self.ids.len(),
                self.ids.ordered_len()
            ));
        }
        let ordered: Vec<(&str, SlotId)> = self.ids.ordered().collect();
        if ordered.iter().any(|&(id, slot)| self.slots.id(slot) != id)
            || ordered.windows(2).any(|pair| pair[0].0 >= pair[1].0)
        {
            return Err("the ordered id index disagrees with the registry".to_owned());
        }
        // Bounded: a list whose links went round in a circle would never end.
        // Tasks join the running list as they start (a queued one after tasks
        // registered later), so it is compared as a set.
        let mut listed: Vec<(Seq, SlotId)> = self
            .running
            .iter(&self.slots)
            .take(self.slots.len() + 1)
            .map(|slot| (self.slots.get(slot).map_or(0, |record| record.seq), slot))
            .collect();
        listed.sort_unstable();
        if listed
            != running
                .iter()
                .map(|(seq, slot)| (*seq, *slot))
                .collect::<Vec<_>>()
            || self.running.len() != running.len()
        {
            return Err("the running list disagrees with the registry".to_owned());
        }
        let queue: Vec<SlotId> = self
            .queue
            .iter(&self.slots)
            .take(self.slots.len() + 1)
            .collect();
        if queue != queued.values().copied().collect::<Vec<_>>() || self.queue.len() != queued.len()
        {
            return Err("the queue disagrees with the registry".to_owned());
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
            .live
            .keys()
            .find(|seq| !running.contains_key(seq) && !queued.contains_key(seq))
        {
            return Err(format!(
                "a progress or inbox is kept for task #{seq}, which has ended"
            ));
        }
        Ok(())
    }

    /// The backlog names terminal tasks, and every unrecorded task is pending
    /// with its transition in the backlog.
    fn check_backlog(&self) -> Result<(), String> {
        let mut missed: BTreeSet<SlotId> = BTreeSet::new();
        for entry in self.backlog.missed() {
            if let Missed::Finished(slot) = entry {
                if self
                    .slots
                    .get(*slot)
                    .is_none_or(|record| !record.status().is_terminal())
                {
                    return Err(format!(
                        "a transition awaiting the journal names slot #{slot}, which holds no terminal task"
                    ));
                }
                missed.insert(*slot);
            }
        }
        for (seq, slot) in self.backlog.unrecorded() {
            if self.pending.get(seq) != Some(slot) {
                return Err(format!("unrecorded task #{seq} is not pending"));
            }
            if !missed.contains(slot) {
                return Err(format!(
                    "task #{seq} is unrecorded although its transition is not awaiting the journal"
                ));
            }
        }
        Ok(())
    }

    /// Pruning skips, never stops: above the history limit, no notified task
    /// remains, and only un-notified ones exceed it.
    fn check_history(&self) -> Result<(), String> {
        let (pending, delivered) = (self.pending.len(), self.delivered.len());
        let terminal = pending + delivered;
        let history = self.max.history_limit();
        if terminal > history && delivered > 0 {
            return Err(format!(
                "{terminal} terminal tasks exceed the history limit {history} while {delivered} notified ones remain"
            ));
        }
        if terminal > history + pending {
            return Err(format!(
                "{terminal} terminal tasks exceed history limit {history} + {pending} un-notified"
            ));
        }
        Ok(())
    }
}
