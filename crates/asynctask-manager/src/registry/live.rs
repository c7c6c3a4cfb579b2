//! What a running task is reached through besides its token: the progress
//! handle, the inbox and the questions desk of its run (`Live`), kept beside
//! the records.

use asynctask_model::AsyncTaskStatus;

use super::{Live, Registry};
use crate::live::{InboxSender, TaskProgress};
use crate::questions::{PendingQuestion, QuestionDesk};

impl Registry {
    /// Gives a task that has not ended (a queued task about to start, say) the
    /// progress handle and inbox its run reports to; `false` when the task is
    /// unknown or has ended.
    pub(crate) fn attach(
        &mut self,
        id: &str,
        progress: Option<TaskProgress>,
        inbox: Option<InboxSender>,
    ) -> bool {
        let Some(record) = self.slot_of(id).and_then(|slot| self.slots.get(slot)) else {
            return false;
        };
        if !(record.is_running() || record.is_queued()) {
            return false;
        }
        let seq = record.seq;
        let questions = self.live.remove(&seq).and_then(|live| live.questions);
        if progress.is_some() || inbox.is_some() || questions.is_some() {
            self.live.insert(
                seq,
                Live {
                    progress,
                    inbox,
                    questions,
                },
            );
        }
        true
    }

    /// Gives task `id`, queued or running, the desk its run's questions reach
    /// (replacing one it had; that one's questions are withdrawn). `false`
    /// when the task is unknown or has ended.
    pub(crate) fn attach_questions(&mut self, id: &str, desk: QuestionDesk) -> bool {
        let Some(record) = self.slot_of(id).and_then(|slot| self.slots.get(slot)) else {
            return false;
        };
        if !(record.is_running() || record.is_queued()) {
            return false;
        }
        let live = self.live.entry(record.seq).or_insert(Live {
            progress: None,
            inbox: None,
            questions: None,
        });
        if let Some(old) = live.questions.replace(desk) {
            old.close();
        }
        true
    }

    /// The desk of running task `id`'s questions, if it has one.
    pub(crate) fn question_desk(&self, id: &str) -> Option<&QuestionDesk> {
        let seq = self.slots.get(self.slot_of(id)?)?.seq;
        self.live.get(&seq)?.questions.as_ref()
    }

    /// Every waiting question: running tasks in start order, then queued ones,
    /// each task's oldest first.
    pub(crate) fn pending_questions(&self) -> Vec<PendingQuestion> {
        let mut all = Vec::new();
        self.each_desk(|id, desk| all.extend(desk.pending(id)));
        all
    }

    /// Whether a waiting question was neither shown nor claimed.
    pub(crate) fn has_unshown_questions(&self) -> bool {
        let mut any = false;
        self.each_desk(|_, desk| any |= desk.has_unshown());
        any
    }

    /// Calls `visit` with the id and desk of each running task that has one.
    fn each_desk(&self, mut visit: impl FnMut(&str, &QuestionDesk)) {
        if self.live.is_empty() {
            return;
        }
        // Running tasks first (in start order), then queued ones (a runner
        // that asks before its task starts).
        for slot in self
            .running
            .iter(&self.slots)
            .chain(self.queue.iter(&self.slots))
        {
            let Some(record) = self.slots.get(slot) else {
                continue;
            };
            if let Some(desk) = self
                .live
                .get(&record.seq)
                .and_then(|l| l.questions.as_ref())
            {
                visit(record.head.id(), desk);
            }
        }
    }

    /// Takes the waiting questions no claim showed nor holds (marking them
    /// claimed), of the tasks `take` accepts.
    pub(crate) fn claim_questions(
        &self,
        mut take: impl FnMut(&str) -> bool,
    ) -> Vec<PendingQuestion> {
        let mut all = Vec::new();
        self.each_desk(|id, desk| {
            if desk.has_unshown() && take(id) {
                all.extend(desk.claim_unshown(id));
            }
        });
        all
    }

    /// The progress handle of task `id` while it runs.
    pub(crate) fn progress(&self, id: &str) -> Option<TaskProgress> {
        let seq = self.slots.get(self.slot_of(id)?)?.seq;
        self.live.get(&seq)?.progress.clone()
    }

    /// The status of task `id` and, while it runs, its inbox's sender.
    pub(crate) fn inbox(&self, id: &str) -> Option<(AsyncTaskStatus, Option<&InboxSender>)> {
        let record = self.slots.get(self.slot_of(id)?)?;
        let status = if self.backlog.is_unrecorded(record.seq) {
            AsyncTaskStatus::Running
        } else {
            record.status()
        };
        Some((
            status,
            self.live
                .get(&record.seq)
                .and_then(|live| live.inbox.as_ref()),
        ))
    }
}
