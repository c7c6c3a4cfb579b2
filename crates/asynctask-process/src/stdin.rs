//! The child's stdin: the goal alone, or (`stdin = "jsonl"`) the goal and then
//! every message sent to the running task, as JSON lines; and the note a result
//! carries about messages that never reached the subagent.

use std::sync::{Arc, Mutex, PoisonError};

use asynctask_manager::Inbox;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::mpsc;

use crate::config::StdinMode;
use crate::streams::{Reader, take};

/// What feeds a running child's stdin, as its [`StdinMode`] says: a task that
/// writes the goal, and with `jsonl` every message of the task's inbox after
/// it. However the run ends, the task is aborted and the inbox closed with it.
pub(crate) struct StdinFeeder {
    writer: Reader,
    /// Messages the writer took from the inbox but has not written whole.
    unwritten: Arc<Mutex<Vec<String>>>,
    inbox: CloseOnDrop,
}

impl StdinFeeder {
    /// Starts feeding `stdin`. A subagent that takes no messages has its
    /// inbox closed at once, so senders are told.
    /// With `jsonl`, the answers to the subagent's questions (whole lines)
    /// are written between messages as they come.
    pub(crate) fn start(
        mode: StdinMode,
        stdin: Option<ChildStdin>,
        goal: String,
        inbox: Inbox,
        answers: mpsc::UnboundedReceiver<String>,
    ) -> Self {
        let unwritten = Arc::new(Mutex::new(Vec::new()));
        let writer = match mode {
            StdinMode::Jsonl => Reader::spawn(forward(
                stdin,
                goal,
                inbox.clone(),
                answers,
                Arc::clone(&unwritten),
            )),
            // `StdinMode` may grow; every other mode takes no messages.
            _ => {
                inbox.close();
                Reader::spawn(feed(stdin, goal))
            }
        };
        StdinFeeder {
            writer,
            unwritten,
            inbox: CloseOnDrop(inbox),
        }
    }

    /// Stops feeding, as the task ends: stdin closes (a hint to a child that
    /// is still there), no message is forwarded any more, and senders are told
    /// so from now on. Returns what was sent but never written, in order, to
    /// be reported with the result.
    pub(crate) fn stop(self) -> Vec<String> {
        let StdinFeeder {
            writer,
            unwritten,
            inbox,
        } = self;
        drop(writer);
        let mut undelivered = take(&unwritten);
        undelivered.extend(inbox.0.close_and_take_unread());
        undelivered
    }
}

/// Writes the goal to the child's stdin and closes it. A child that exits
/// without reading it all is not an error.
async fn feed(stdin: Option<ChildStdin>, goal: String) {
    let Some(mut stdin) = stdin else { return };
    if let Err(err) = stdin.write_all(goal.as_bytes()).await
        && err.kind() != std::io::ErrorKind::BrokenPipe
    {
        tracing::debug!(%err, "cannot write the goal to the subagent's stdin");
    }
    // Dropping `stdin` closes it: the child reads end-of-file.
}

/// Writes the goal and then every message of `inbox` to the child's stdin as
/// JSON lines, in order, until the inbox ends or the task does (this task is
/// aborted). A child that stops reading ends the forwarding: the inbox is
/// closed, so later senders are told instead of queueing messages nobody
/// reads. A message is in `unwritten` from the moment it leaves the inbox
/// until its whole line is written: one whose write fails, or is cut short
/// because the task ends (this task is aborted mid-write), stays there and is
/// reported with the result.
async fn forward(
    stdin: Option<ChildStdin>,
    goal: String,
    inbox: Inbox,
    mut answers: mpsc::UnboundedReceiver<String>,
    unwritten: Arc<Mutex<Vec<String>>>,
) {
    let Some(mut stdin) = stdin else {
        inbox.close();
        return;
    };
    let pending = |change: &dyn Fn(&mut Vec<String>)| {
        change(&mut unwritten.lock().unwrap_or_else(PoisonError::into_inner));
    };
    let mut line = StdinLine::Goal(goal);
    loop {
        if let Err(err) = stdin.write_all(line.to_json().as_bytes()).await {
            tracing::debug!(%err, "the subagent stopped reading its stdin: no more messages are forwarded");
            inbox.close();
            return;
        }
        if let StdinLine::Message(_) = line {
            // Written: it is the only one pending.
            pending(&|messages| messages.clear());
        }
        line = tokio::select! {
            message = inbox.recv() => match message {
                Some(message) => {
                    pending(&|messages| messages.push(message.clone()));
                    StdinLine::Message(message)
                }
                None => return,
            },
            Some(answer) = answers.recv() => StdinLine::Answer(answer),
        };
    }
}

/// One line of the `jsonl` stdin: `{"type":"goal"|"message","text":…}`, or
/// an answer line made whole already.
#[derive(serde::Serialize)]
#[serde(tag = "type", content = "text", rename_all = "lowercase")]
enum StdinLine {
    Goal(String),
    Message(String),
    #[serde(skip)]
    Answer(String),
}

impl StdinLine {
    /// The line, with its `\n`.
    fn to_json(&self) -> String {
        if let StdinLine::Answer(line) = self {
            return line.clone();
        }
        // A string-only enum always serializes.
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }
}

/// How many characters of each undelivered message a result quotes.
const UNDELIVERED_QUOTE_CHARS: usize = 200;
/// How many undelivered messages a result quotes; the rest are counted.
const UNDELIVERED_QUOTED: usize = 5;

/// The note a result carries about messages that reached its task but never
/// its subagent (sent after it stopped reading, or as it ended); empty when
/// there are none.
pub(crate) fn undelivered_note(messages: &[String]) -> String {
    use std::fmt::Write as _;
    if messages.is_empty() {
        return String::new();
    }
    let count = messages.len();
    let mut note = format!(
        "\n\n[{count} message{} sent to this task never reached the subagent, which had stopped reading its stdin:",
        if count == 1 { "" } else { "s" }
    );
    for message in messages.iter().take(UNDELIVERED_QUOTED) {
        let quoted: String = message.chars().take(UNDELIVERED_QUOTE_CHARS).collect();
        let cut = if quoted.len() < message.len() {
            "..."
        } else {
            ""
        };
        let _ = write!(note, "\n- {quoted:?}{cut}");
    }
    if count > UNDELIVERED_QUOTED {
        let _ = write!(note, "\n- and {} more", count - UNDELIVERED_QUOTED);
    }
    note.push(']');
    note
}

/// Closes an inbox when dropped: the run is over.
struct CloseOnDrop(Inbox);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}
