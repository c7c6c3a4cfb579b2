//! The child's output streams: reader tasks that drain stdout into its file,
//! the final message's head and tail and the task's progress (its usage lines
//! taken out), and stderr into its tail.

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use asynctask_manager::TaskProgress;
use asynctask_tools::{WHOLE_OUTPUT_PREFIX, whole_output_line};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

use crate::capped::{CappedFile, OutputCut, size_text};
use crate::capture::{ByteTail, InlineText};
use crate::usage::{Piece, UsageLines};

/// The read buffer for each output pipe (a Linux pipe holds 64 KiB).
const READ_CHUNK_BYTES: usize = 32 * 1024;

/// A spawned I/O task that is aborted when dropped, so no reader or writer
/// outlives its run (a process that escaped the group may hold a pipe open
/// forever).
pub(crate) struct Reader(JoinHandle<()>);

impl Reader {
    pub(crate) fn spawn(task: impl Future<Output = ()> + Send + 'static) -> Self {
        Reader(tokio::spawn(task))
    }

    /// Waits for the task to end; a panicked or aborted task has simply
    /// stopped.
    pub(crate) async fn join(&mut self) {
        let _ = (&mut self.0).await;
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where a reader puts what it reads.
pub(crate) trait Sink: Send + 'static {
    fn push(&mut self, chunk: &[u8]);
}

impl Sink for ByteTail {
    fn push(&mut self, chunk: &[u8]) {
        ByteTail::push(self, chunk);
    }
}

/// Where stdout goes: usage lines to the task's progress as usage, and
/// everything else — the output — into the output file (whole up to its
/// cap, see [`CappedFile`]), into the progress, and what the final message
/// needs into memory.
#[derive(Default)]
pub(crate) struct StdoutSink {
    file: CappedFile,
    inline: InlineText,
    usage_lines: UsageLines,
    progress: Option<TaskProgress>,
    /// Where the file was cut, once the stream [ended](Self::end).
    cut: Option<OutputCut>,
}

/// The parts of a [`StdoutSink`] that output and usage go to, borrowed apart
/// from its usage filter.
struct Outlets<'a> {
    file: &'a mut CappedFile,
    inline: &'a mut InlineText,
    progress: Option<&'a TaskProgress>,
}

impl Outlets<'_> {
    fn take(&mut self, piece: Piece<'_>) {
        match piece {
            Piece::Output(bytes) => self.output(bytes),
            Piece::Usage(usage) => {
                if let Some(progress) = self.progress {
                    progress.report_usage(usage);
                }
            }
        }
    }

    fn output(&mut self, chunk: &[u8]) {
        self.file.write(chunk);
        self.inline.push(chunk);
        if let Some(progress) = self.progress {
            progress.record_output(chunk);
        }
    }
}

impl Sink for StdoutSink {
    fn push(&mut self, chunk: &[u8]) {
        let (usage_lines, mut outlets) = self.split();
        usage_lines.push(chunk, |piece| outlets.take(piece));
    }
}

impl StdoutSink {
    /// A sink writing into `file` (just created), at most `max_output_bytes`
    /// of it ([`CappedFile`]), keeping `inline_budget` characters for the
    /// final message, and reporting the output and the usage lines to
    /// `progress`.
    pub(crate) fn new(
        file: std::fs::File,
        max_output_bytes: u64,
        inline_budget: usize,
        progress: TaskProgress,
    ) -> Self {
        StdoutSink {
            file: CappedFile::new(file, max_output_bytes),
            inline: InlineText::new(inline_budget),
            usage_lines: UsageLines::default(),
            progress: Some(progress),
            cut: None,
        }
    }

    fn split(&mut self) -> (&mut UsageLines, Outlets<'_>) {
        (
            &mut self.usage_lines,
            Outlets {
                file: &mut self.file,
                inline: &mut self.inline,
                progress: self.progress.as_ref(),
            },
        )
    }

    /// The stream ended: what the usage filter held goes where it belongs,
    /// and the output file gets its tail when it was cut. Returns the note
    /// the result gets when usage lines could not be read.
    pub(crate) fn end(&mut self) -> Option<String> {
        let (usage_lines, mut outlets) = self.split();
        usage_lines.finish(|piece| outlets.take(piece));
        let note = usage_lines.note();
        self.cut = self.file.seal();
        note
    }

    /// The final message's text, and when it was cut, the line that names the
    /// file holding the whole output ([`whole_output_line`], or
    /// [`cut_output_line`] when the file was cut too) to end the message
    /// with; the marker in the middle names the file too, when it holds the
    /// output.
    pub(crate) fn finish(self, path: &Path) -> (String, Option<String>) {
        let (bytes, shown) = (self.file.total(), path.display());
        match (self.file.error(), self.cut) {
            (None, None) => {
                let (text, cut) = self.inline.finish(|omitted| {
                    format!(
                        "[... {omitted} characters omitted; the whole output ({bytes} bytes) is in {shown} ...]"
                    )
                });
                (text, cut.then(|| whole_output_line(path, bytes)))
            }
            (None, Some(file_cut)) => {
                let (text, cut) = self.inline.finish(|omitted| {
                    format!(
                        "[... {omitted} characters omitted; the output ({bytes} bytes) is in {shown}, \
                         cut to its first {} and last {} bytes ...]",
                        file_cut.head, file_cut.tail
                    )
                });
                (text, cut.then(|| cut_output_line(path, bytes, &file_cut)))
            }
            (Some(err), _) => {
                let (text, _) = self.inline.finish(|omitted| {
                    format!(
                        "[... {omitted} characters omitted; the whole output ({bytes} bytes) could not be kept in {shown}: {err} ...]"
                    )
                });
                (text, None)
            }
        }
    }

    /// For a failure's message: a blank line, then the line that names the
    /// file holding the whole output ([`whole_output_line`], or
    /// [`cut_output_line`] when the file was cut) when the subagent wrote
    /// anything to stdout and the file holds it; else nothing.
    pub(crate) fn pointer(&self, path: &Path) -> String {
        let bytes = self.file.total();
        if bytes == 0 || self.file.error().is_some() {
            return String::new();
        }
        match &self.cut {
            None => format!("\n\n{}", whole_output_line(path, bytes)),
            Some(cut) => format!("\n\n{}", cut_output_line(path, bytes, cut)),
        }
    }
}

/// The line that names the output file when the file was cut at
/// `max_output_bytes`: like [`whole_output_line`] (a line that starts the same
/// way is kept whole when a result is cut), and it says which bytes the file
/// kept.
pub(crate) fn cut_output_line(path: &Path, bytes: u64, cut: &OutputCut) -> String {
    format!(
        "{WHOLE_OUTPUT_PREFIX}{} ({bytes} bytes, cut to the first {} and the last {}: \
         the output passed max_output_bytes ({}))]",
        path.display(),
        cut.head,
        cut.tail,
        size_text(cut.cap)
    )
}

/// Takes what a reader captured. The reader may still be running if it was
/// aborted mid-chunk; a sink is whole after every push.
pub(crate) fn take<S: Default>(sink: &Mutex<S>) -> S {
    std::mem::take(&mut *sink.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Reads a pipe to its end into `sink`, and reports each chunk to `progress`
/// (outside the sink's lock) so a peek at the running task shows its latest
/// output.
pub(crate) async fn drain(
    pipe: Option<impl AsyncRead + Unpin>,
    sink: Arc<Mutex<impl Sink>>,
    progress: Option<TaskProgress>,
) {
    let Some(mut pipe) = pipe else { return };
    let mut chunk = vec![0_u8; READ_CHUNK_BYTES];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) => return,
            Ok(n) => {
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(&chunk[..n]);
                if let Some(progress) = &progress {
                    progress.record_output(&chunk[..n]);
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => {
                tracing::debug!(%err, "cannot read the subagent's output");
                return;
            }
        }
    }
}
