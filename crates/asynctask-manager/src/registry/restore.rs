//! Rebuilding a registry, every index with it, from the tasks a store kept.

use std::sync::Arc;

use asynctask_model::{AsyncTaskStatus, MaxAsyncTasks};

use super::{Registry, status_slot};
use crate::journal::{Journal, JournalError, RestoreError, StoredTask, inconsistency};
use crate::record::{End, Record, Seq};
use crate::snapshot::{SlotId, TaskHead};
use tokio_util::sync::CancellationToken;

impl Registry {
    /// A registry rebuilt from stored tasks (in registration order), every
    /// index with it. Tasks stored as running ran in a process that has ended:
    /// they become failed with an [interrupted error](StoredTask::interrupted_error)
    /// at `now_ms`, ending after every stored task. Tasks stored as queued stay
    /// queued, in order, their starts held until the host asks
    /// ([`resume_starts`](Registry::resume_starts)). Then the history is pruned.
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
        // (completed_at, stored finish order, seq, slot) of the tasks stored
        // terminal.
        let mut ended = Vec::new();
        let mut interrupted: Vec<(Seq, SlotId)> = Vec::new();
        let mut last_order = 0;
        for (index, task) in stored.into_iter().enumerate() {
            if task.info.id.is_empty() {
                return Err(RestoreError::EmptyId { index });
            }
            if registry.slot_of(&task.info.id).is_some() {
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
                launch,
            } = task;
            if info.status == AsyncTaskStatus::Queued {
                let (slot, head) = registry.slots.insert_with(|slot| {
                    let head = Arc::new(TaskHead::with_launch(
                        &info.id,
                        &info.subagent_name,
                        &info.goal_prompt,
                        origin.as_deref(),
                        launch.as_deref(),
                        info.launched_at,
                        slot,
                    ));
                    let record = Record::queued(Arc::clone(&head), seq, CancellationToken::new());
                    (record, head)
                });
                let hash = registry.ids.hash(head.id());
                registry
                    .ids
                    .insert(hash, head, |slot| registry.slots.id(slot));
                registry.queue.push(&mut registry.slots, slot);
                registry.starts_paused = true;
                continue;
            }
            // `inconsistency` let through only these shapes; the last arm is
            // the running task, which ends now.
            let stored_end = info.completed_at.unwrap_or(now_ms);
            let (end, completed_at) = match (info.status, info.output, info.error) {
                (AsyncTaskStatus::Completed, Some(output), _) => {
                    (End::Completed(Arc::new(output)), stored_end)
                }
                (AsyncTaskStatus::Failed, _, Some(error)) => {
                    (End::Failed(Arc::new(error)), stored_end)
                }
                (AsyncTaskStatus::Cancelled, _, _) => (End::Cancelled, stored_end),
                _ => (End::Failed(Arc::new(interrupted_error)), now_ms),
            };
            // A task stored running had started (at its launch, for a store
            // that kept no start time).
            let started_at = match info.status {
                AsyncTaskStatus::Running => Some(info.started_at.unwrap_or(info.launched_at)),
                _ => info.started_at,
            };
            let (slot, head) = registry.slots.insert_with(|slot| {
                let head = Arc::new(TaskHead::with_launch(
                    &info.id,
                    &info.subagent_name,
                    &info.goal_prompt,
                    origin.as_deref(),
                    launch.as_deref(),
                    info.launched_at,
                    slot,
                ));
                let record = Record::ended(
                    Arc::clone(&head),
                    seq,
                    end,
                    started_at,
                    completed_at,
                    info.notified_at,
                    info.usage,
                );
                (record, head)
            });
            let hash = registry.ids.hash(head.id());
            registry
                .ids
                .insert(hash, head, |slot| registry.slots.id(slot));
            if running {
                interrupted.push((seq, slot));
            } else {
                ended.push((completed_at, finish_order, seq, slot));
                last_order = last_order.max(finish_order);
            }
        }
        // Finish orders are ranks here (ties broken by registration order);
        // new ones start above every stored order, so that a store keeping the
        // journaled numbers orders old and new tasks alike.
        ended.sort_unstable();
        for (rank, &(_, _, _, slot)) in (1..).zip(&ended) {
            if let Some(record) = registry.slots.get_mut(slot) {
                record.set_finish_order(rank);
            }
        }
        registry.next_finish_order = last_order.max(ended.len() as u64) + 1;
        for &(_, slot) in &interrupted {
            if let Some(record) = registry.slots.get_mut(slot) {
                record.set_finish_order(registry.next_finish_order);
                registry.next_finish_order += 1;
            }
        }
        for (slot, record) in registry
            .slots
            .iter()
            .filter(|(_, record)| !record.is_queued())
        {
            registry.finished_by_status[status_slot(record.status())] += 1;
            if record.notified_at().is_some() {
                registry.delivered.insert(record.delivered_key(), slot);
            } else {
                registry.pending.insert(record.seq, slot);
            }
        }
        let pruned = registry.prune_plan();
        let written = journal.map_or(Ok(()), |journal| {
            let finished = interrupted
                .iter()
                .filter_map(|(_, slot)| registry.slots.get(*slot)?.finished_entry());
            registry.backlog.write(
                journal,
                &registry.slots,
                finished.chain(registry.removed_entries(&pruned)),
            )
        });
        let journal_error =
            registry
                .backlog
                .settle(written, &registry.slots, &interrupted, &[], 0, &pruned);
        registry.remove(&pruned);
        // A restore tells no one what it pruned (the caller has the stored
        // tasks to compare with).
        registry.pruned.clear();
        Ok((registry, journal_error))
    }
}
