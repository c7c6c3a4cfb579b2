//! What a running task carries besides its cancellation token: its progress
//! (the last lines of its output) and its inbox (messages sent to it).

use std::collections::VecDeque;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use asynctask_model::{AsyncTaskStatus, TaskUsage};
use tokio::sync::Notify;

/// What a running subagent has reported so far: the last lines of its output,
/// how much output there was, and where the whole output is kept.
///
/// A cheap handle: clones share one state. The `task` tool hands one to the
/// runner (in its request) and registers the same one with the task, so
/// `check_async_tasks` and `/tasks list` show a running task's latest output.
/// A runner that reports nothing leaves it empty; that costs one small
/// allocation per task.
///
/// Output arrives as bytes in chunks of any size
/// ([`record_output`](Self::record_output)): it is decoded as UTF-8 (a
/// character split across chunks is put back together; invalid bytes become
/// U+FFFD), split into lines at `\n`, and a `\r` (a progress bar redrawing
/// its line) starts the current line over. The last [`LINES_KEPT`](Self::LINES_KEPT)
/// lines are kept, each cut to [`LINE_CHARS`](Self::LINE_CHARS) characters,
/// so a chatty subagent costs a bounded amount of memory.
///
/// # Examples
///
/// ```
/// use asynctask_manager::TaskProgress;
///
/// let progress = TaskProgress::new();
/// progress.record_output(b"compiling 1/3\ncompiling 2/3\ntest");
/// progress.record_output(" r\u{e9}sult: ok\n".as_bytes());
/// let now = progress.snapshot();
/// assert_eq!(now.last_lines, ["compiling 1/3", "compiling 2/3", "test r\u{e9}sult: ok"]);
/// assert_eq!(now.last_line(), Some("test r\u{e9}sult: ok"));
/// assert_eq!(now.output_bytes, 45);
/// ```
#[derive(Clone, Default)]
pub struct TaskProgress {
    state: Arc<Mutex<ProgressState>>,
}

#[derive(Debug, Default)]
struct ProgressState {
    /// Complete lines, oldest first.
    lines: VecDeque<String>,
    /// The line being written (no `\n` yet).
    current: String,
    /// Its length in characters (at most [`TaskProgress::LINE_CHARS`]).
    current_chars: usize,
    /// A `\r` was read last: the line is redrawn if anything but `\n` follows.
    pending_cr: bool,
    /// The start of a character split across chunks.
    split: Vec<u8>,
    output_bytes: u64,
    output_file: Option<PathBuf>,
    usage: Option<TaskUsage>,
}

/// A [`TaskProgress`] at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProgressSnapshot {
    /// The last lines of output, oldest first; the line being written (if not
    /// empty) is the last one.
    pub last_lines: Vec<String>,
    /// How many bytes of output there were in all.
    pub output_bytes: u64,
    /// Where the whole output is kept, if the runner keeps it in a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_file: Option<PathBuf>,
    /// What the runner reported the task used so far (see
    /// [`TaskProgress::report_usage`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TaskUsage>,
}

impl ProgressSnapshot {
    /// The latest line of output, if there was any.
    #[must_use]
    pub fn last_line(&self) -> Option<&str> {
        self.last_lines.last().map(String::as_str)
    }

    /// Whether nothing was reported.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.last_lines.is_empty()
            && self.output_bytes == 0
            && self.output_file.is_none()
            && self.usage.is_none()
    }
}

impl TaskProgress {
    /// How many lines are kept.
    pub const LINES_KEPT: usize = 20;
    /// How many characters of each line are kept.
    pub const LINE_CHARS: usize = 400;

    /// An empty progress.
    #[must_use]
    pub fn new() -> Self {
        TaskProgress::default()
    }

    fn lock(&self) -> MutexGuard<'_, ProgressState> {
        // Plain data, consistent after every statement.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a chunk of output (see the type's docs for how it is split).
    pub fn record_output(&self, chunk: &[u8]) {
        let mut state = self.lock();
        state.output_bytes += chunk.len() as u64;
        let mut bytes = std::mem::take(&mut state.split);
        bytes.extend_from_slice(chunk);
        let mut rest: &[u8] = &bytes;
        while !rest.is_empty() {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    state.push_text(text);
                    rest = &[];
                }
                Err(error) => {
                    let (valid, after) = rest.split_at(error.valid_up_to());
                    // `valid` is valid UTF-8 by the error's own account.
                    state.push_text(&String::from_utf8_lossy(valid));
                    match error.error_len() {
                        // An incomplete character at the end: wait for the rest.
                        None => {
                            state.split = after.to_vec();
                            rest = &[];
                        }
                        Some(len) => {
                            state.push_text("\u{fffd}");
                            rest = &after[len..];
                        }
                    }
                }
            }
        }
    }

    /// Records one line of status (as if the output had printed it).
    pub fn report(&self, line: &str) {
        let mut state = self.lock();
        let current = std::mem::take(&mut state.current);
        state.current_chars = 0;
        state.pending_cr = false;
        if !current.is_empty() {
            state.push_line(current);
        }
        for line in line.split('\n') {
            state.push_line(line.to_owned());
        }
    }

    /// Records where the whole output is kept.
    pub fn set_output_file(&self, path: impl Into<PathBuf>) {
        self.lock().output_file = Some(path.into());
    }

    /// Where the whole output is kept, if it is.
    #[must_use]
    pub fn output_file(&self) -> Option<PathBuf> {
        self.lock().output_file.clone()
    }

    /// Reports what the task used so far, as totals: each field the report
    /// gives replaces the one reported before, the others stay
    /// ([`TaskUsage::merge`]), so the last report is the run's total. The
    /// model name is cut to [`TaskUsage::MODEL_CHARS`] characters; an empty
    /// report changes nothing.
    ///
    /// What was reported when the task ends stays with it: its snapshots
    /// ([`TaskSnapshot::usage`](crate::TaskSnapshot::usage)), the journal,
    /// and every listing. A report after the end is not kept.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput, TaskProgress};
    /// use asynctask_model::{OutputObject, TaskUsage, TerminateReason};
    ///
    /// let manager = AsyncTaskManager::default();
    /// let progress = TaskProgress::new();
    /// manager.register_task(RegisterTaskInput::new("a1", "coder", "fix it").with_progress(progress.clone()))?;
    /// progress.report_usage(TaskUsage::new().with_input_tokens(1_000).with_model("gpt-5"));
    /// progress.report_usage(TaskUsage::new().with_input_tokens(4_000).with_output_tokens(300).with_cost_usd(0.02));
    /// assert_eq!(progress.usage().and_then(|usage| usage.input_tokens), Some(4_000));
    ///
    /// manager.complete_task("a1", OutputObject::new(TerminateReason::Goal));
    /// let usage = manager.task("a1").and_then(|task| task.usage().cloned());
    /// assert_eq!(
    ///     usage,
    ///     Some(TaskUsage::new().with_input_tokens(4_000).with_output_tokens(300).with_cost_usd(0.02).with_model("gpt-5")),
    /// );
    /// # Ok::<(), asynctask_manager::RegisterError>(())
    /// ```
    pub fn report_usage(&self, report: TaskUsage) {
        if report.is_empty() {
            return;
        }
        let report = bounded(report);
        self.lock()
            .usage
            .get_or_insert_with(TaskUsage::default)
            .merge(report);
    }

    /// Adds an increment to what the task used ([`TaskUsage::add`]): for a
    /// runner that learns its usage call by call. Otherwise as
    /// [`report_usage`](Self::report_usage).
    ///
    /// ```
    /// use asynctask_manager::TaskProgress;
    /// use asynctask_model::TaskUsage;
    ///
    /// let progress = TaskProgress::new();
    /// for _ in 0..3 {
    ///     progress.add_usage(&TaskUsage::new().with_input_tokens(100).with_output_tokens(10));
    /// }
    /// assert_eq!(progress.usage(), Some(TaskUsage::new().with_input_tokens(300).with_output_tokens(30)));
    /// ```
    pub fn add_usage(&self, increment: &TaskUsage) {
        if increment.is_empty() {
            return;
        }
        let increment = bounded(increment.clone());
        self.lock()
            .usage
            .get_or_insert_with(TaskUsage::default)
            .add(&increment);
    }

    /// What the task used so far, if anything was reported.
    #[must_use]
    pub fn usage(&self) -> Option<TaskUsage> {
        self.lock().usage.clone()
    }

    /// The progress now.
    #[must_use]
    pub fn snapshot(&self) -> ProgressSnapshot {
        let state = self.lock();
        let mut last_lines: Vec<String> = state.lines.iter().cloned().collect();
        if !state.current.is_empty() {
            if last_lines.len() == Self::LINES_KEPT {
                last_lines.remove(0);
            }
            last_lines.push(state.current.clone());
        }
        ProgressSnapshot {
            last_lines,
            output_bytes: state.output_bytes,
            output_file: state.output_file.clone(),
            usage: state.usage.clone(),
        }
    }
}

/// A report with its model name cut to [`TaskUsage::MODEL_CHARS`].
fn bounded(mut report: TaskUsage) -> TaskUsage {
    if let Some(model) = report.model.take() {
        report = report.with_model(model);
    }
    report
}

impl ProgressState {
    fn push_text(&mut self, mut text: &str) {
        // Only the last `LINES_KEPT` complete lines (and the line after them)
        // can survive this text: skip what comes before them without building
        // it, so a flood of short lines costs one scan, not one string each.
        if let Some((at, _)) = text.rmatch_indices('\n').nth(TaskProgress::LINES_KEPT) {
            self.lines.clear();
            self.clear_current();
            self.pending_cr = false;
            text = &text[at + 1..];
        }
        while !text.is_empty() {
            let Some(at) = text.find(['\r', '\n']) else {
                self.extend_current(text);
                return;
            };
            self.extend_current(&text[..at]);
            if text.as_bytes()[at] == b'\n' {
                // `\r\n` ends a line like `\n` does.
                self.pending_cr = false;
                let line = std::mem::take(&mut self.current);
                self.current_chars = 0;
                self.push_line(line);
            } else {
                // A `\r` redraws the line, but only once something follows it
                // (it may be the first half of a `\r\n` split across chunks).
                if self.pending_cr {
                    self.clear_current();
                }
                self.pending_cr = true;
            }
            text = &text[at + 1..];
        }
    }

    /// Appends to the line being written, up to [`TaskProgress::LINE_CHARS`].
    fn extend_current(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if std::mem::take(&mut self.pending_cr) {
            self.clear_current();
        }
        let room = TaskProgress::LINE_CHARS - self.current_chars;
        for c in text.chars().take(room) {
            self.current.push(c);
            self.current_chars += 1;
        }
    }

    fn clear_current(&mut self) {
        self.current.clear();
        self.current_chars = 0;
    }

    fn push_line(&mut self, mut line: String) {
        if let Some((cut, _)) = line.char_indices().nth(TaskProgress::LINE_CHARS) {
            line.truncate(cut);
        }
        if self.lines.len() == TaskProgress::LINES_KEPT {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }
}

impl fmt::Debug for TaskProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TaskProgress")
            .field(&self.snapshot())
            .finish()
    }
}

/// The messages sent to one running task, in the order they were sent: the
/// runner's end of a task's inbox (see [`Inbox::channel`]).
///
/// A cheap handle (clones share one queue). An in-process runner reads it
/// whenever it likes ([`recv`](Self::recv), [`try_recv`](Self::try_recv)); a
/// runner that takes no messages [closes](Self::close) it, so senders are
/// told at once instead of queueing messages nobody reads, and a runner that
/// stops reading takes back what it never read with
/// [`close_and_take_unread`](Self::close_and_take_unread). An inbox is one
/// small allocation shared by both ends; a [closed](Self::closed) one is none.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{Inbox, InboxError};
///
/// let (sender, inbox) = Inbox::channel();
/// sender.send("narrow the scope to src/io".to_owned())?;
/// sender.send("skip the benches".to_owned())?;
/// assert_eq!(inbox.try_recv().as_deref(), Some("narrow the scope to src/io"));
/// sender.send("stop after the first failure".to_owned())?;
/// assert_eq!(inbox.close_and_take_unread(), ["skip the benches", "stop after the first failure"]);
/// assert_eq!(sender.send("too late".to_owned()), Err(InboxError::Closed));
/// # Ok::<(), InboxError>(())
/// ```
#[derive(Clone, Default)]
pub struct Inbox {
    /// `None`: closed from the start (no sender ever existed).
    shared: Option<Arc<InboxShared>>,
}

/// The sending end of a task's [`Inbox`], held by the registry while the task
/// runs.
pub struct InboxSender {
    shared: Arc<InboxShared>,
}

/// What both ends of an inbox share.
#[derive(Default)]
struct InboxShared {
    state: Mutex<InboxState>,
    /// A message arrived, the inbox closed, or the last sender went away.
    changed: Notify,
}

#[derive(Default)]
struct InboxState {
    queue: VecDeque<String>,
    closed: bool,
    senders: usize,
}

impl InboxShared {
    fn lock(&self) -> MutexGuard<'_, InboxState> {
        // A queue and two counters, consistent after every statement.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Why a message could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InboxError {
    /// The runner closed its inbox: it takes no messages, or no more.
    #[error("the subagent takes no more messages")]
    Closed,
    /// [`Inbox::CAPACITY`] messages are waiting unread.
    #[error("the subagent has not read its last {} messages", Inbox::CAPACITY)]
    Full,
}

impl Inbox {
    /// How many unread messages an inbox holds before it refuses more.
    pub const CAPACITY: usize = 64;

    /// A new inbox and the sender that feeds it.
    #[must_use]
    pub fn channel() -> (InboxSender, Inbox) {
        let shared = Arc::new(InboxShared {
            state: Mutex::new(InboxState {
                senders: 1,
                ..InboxState::default()
            }),
            changed: Notify::new(),
        });
        (
            InboxSender {
                shared: Arc::clone(&shared),
            },
            Inbox {
                shared: Some(shared),
            },
        )
    }

    /// An inbox that is closed from the start: no sender exists, and it costs
    /// no allocation.
    #[must_use]
    pub fn closed() -> Self {
        Inbox { shared: None }
    }

    /// The next message, waiting for one; `None` once nothing is left unread and
    /// no more can come (the inbox is closed, or the task has ended and its
    /// sender is gone).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a message is either returned or left in the inbox.
    pub async fn recv(&self) -> Option<String> {
        let shared = self.shared.as_ref()?;
        loop {
            let changed = shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = shared.lock();
                if let Some(message) = state.queue.pop_front() {
                    return Some(message);
                }
                if state.closed || state.senders == 0 {
                    return None;
                }
            }
            changed.await;
        }
    }

    /// The next message if one is waiting.
    #[must_use]
    pub fn try_recv(&self) -> Option<String> {
        self.shared.as_ref()?.lock().queue.pop_front()
    }

    /// Takes no more messages: senders get [`InboxError::Closed`] from now on.
    /// What was queued before stays readable.
    pub fn close(&self) {
        if let Some(shared) = &self.shared {
            shared.lock().closed = true;
            shared.changed.notify_waiters();
        }
    }

    /// [`close`](Self::close), and takes back what was queued and never read
    /// (oldest first): a runner whose subagent stopped reading reports them
    /// instead of losing them silently.
    #[must_use]
    pub fn close_and_take_unread(&self) -> Vec<String> {
        let Some(shared) = &self.shared else {
            return Vec::new();
        };
        let unread = {
            let mut state = shared.lock();
            state.closed = true;
            state.queue.drain(..).collect()
        };
        shared.changed.notify_waiters();
        unread
    }

    /// Whether [`close`](Self::close) was called (or the inbox was made closed).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.shared
            .as_ref()
            .is_none_or(|shared| shared.lock().closed)
    }
}

impl InboxSender {
    /// Queues `message` without waiting. The check and the queueing happen
    /// under one lock, so a message is never queued after the inbox closed.
    ///
    /// # Errors
    ///
    /// [`InboxError::Closed`] when the runner closed its inbox,
    /// [`InboxError::Full`] when [`Inbox::CAPACITY`] messages wait unread.
    pub fn send(&self, message: String) -> Result<(), InboxError> {
        {
            let mut state = self.shared.lock();
            if state.closed {
                return Err(InboxError::Closed);
            }
            if state.queue.len() >= Inbox::CAPACITY {
                return Err(InboxError::Full);
            }
            state.queue.push_back(message);
        }
        self.shared.changed.notify_one();
        Ok(())
    }
}

impl Clone for InboxSender {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        InboxSender {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for InboxSender {
    fn drop(&mut self) {
        let last = {
            let mut state = self.shared.lock();
            state.senders = state.senders.saturating_sub(1);
            state.senders == 0
        };
        if last {
            // A reader waiting for more learns there will be none.
            self.shared.changed.notify_waiters();
        }
    }
}

impl fmt::Debug for Inbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inbox")
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for InboxSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxSender")
            .field("closed", &self.shared.lock().closed)
            .finish_non_exhaustive()
    }
}

/// Why [`AsyncTaskManager::send_message`](crate::AsyncTaskManager::send_message)
/// queued nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// No task has this id.
    #[error("no task has this id")]
    NotFound,
    /// The task has ended; its subagent reads nothing any more.
    #[error("the task is already {0}")]
    Finished(AsyncTaskStatus),
    /// The task was registered without an inbox.
    #[error("the task has no inbox")]
    NoInbox,
    /// The inbox refused the message.
    #[error(transparent)]
    Inbox(#[from] InboxError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_flood_of_lines_keeps_the_last_ones_whatever_the_chunking() {
        let text: String = (0..1_000).map(|n| format!("line {n}\r\n")).collect();
        let whole = TaskProgress::new();
        whole.record_output(text.as_bytes());
        let bytewise = TaskProgress::new();
        for byte in text.as_bytes() {
            bytewise.record_output(std::slice::from_ref(byte));
        }
        let expected: Vec<String> = (980..1_000).map(|n| format!("line {n}")).collect();
        assert_eq!(whole.snapshot().last_lines, expected);
        assert_eq!(bytewise.snapshot(), whole.snapshot());
        assert_eq!(whole.snapshot().output_bytes, text.len() as u64);
    }

    #[test]
    fn characters_split_across_chunks_and_invalid_bytes_are_decoded() {
        let progress = TaskProgress::new();
        let euro = "€".as_bytes();
        progress.record_output(&euro[..1]);
        progress.record_output(&euro[1..]);
        progress.record_output(b" \xff ok\n");
        assert_eq!(progress.snapshot().last_lines, ["€ \u{fffd} ok"]);
    }

    #[test]
    fn a_carriage_return_redraws_the_line_and_lines_are_bounded() {
        let progress = TaskProgress::new();
        progress.record_output(b"10%\r50%\r100%\n");
        progress.record_output("x".repeat(1_000).as_bytes());
        let snapshot = progress.snapshot();
        assert_eq!(snapshot.last_lines[0], "100%");
        assert_eq!(
            snapshot.last_lines[1].chars().count(),
            TaskProgress::LINE_CHARS
        );
    }
}
