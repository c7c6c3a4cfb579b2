//! The whole-output file, capped at `max_output_bytes`: its head written as
//! the output comes, its tail kept in a ring in memory and written after a
//! marker line when the output ends.
//!
//! A subagent can print without end (`yes`), and the file is often on a
//! `tmpfs`, in memory. The result's inline text already keeps the output's
//! head and its tail, and the tail is what a result needs most (the summary,
//! the failure at the end), so the file keeps the same two parts:
//!
//! - The first `cap - window` bytes are written as they come, and so is
//!   everything up to the cap itself: until the output passes the cap, the
//!   file holds all of it, written at once, as a reader (`tail -f`, a peek)
//!   expects.
//! - From byte `cap - window` on, the bytes also go into a ring of `window`
//!   bytes (a quarter of the cap, and 1 MiB at most), the only memory
//!   the cap costs. Once the output passes the cap, nothing more is written.
//! - When the output ends ([`CappedFile::seal`], or dropping it, however the
//!   run ends), if it passed the cap the file is cut back to its first
//!   `cap - window` bytes and the marker line and the ring are written
//!   after them: `[asynctask: N bytes cut here: the output passed
//!   max_output_bytes (64 MiB)]`. The file then holds at most the cap and the
//!   marker line, its last line is the output's last line, and
//!   [`OutputCut`] tells the result where the cut is.

use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;

use crate::capture::ByteTail;

/// The largest tail window: memory a runaway subagent costs, besides its
/// pipes' buffers.
pub(crate) const MAX_TAIL_WINDOW: u64 = 1024 * 1024;

/// Where an output file was cut: after its first `head` bytes, `cut` bytes
/// were left out, and its last `tail` bytes follow the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutputCut {
    /// How many bytes from the start of the output the file keeps.
    pub(crate) head: u64,
    /// How many bytes after those were left out.
    pub(crate) cut: u64,
    /// How many bytes from the end of the output the file keeps.
    pub(crate) tail: u64,
    /// The cap that was passed (`max_output_bytes`).
    pub(crate) cap: u64,
}

impl OutputCut {
    /// The marker line written in the file where the bytes were cut.
    pub(crate) fn marker(&self) -> String {
        format!(
            "[asynctask: {} bytes cut here: the output passed max_output_bytes ({})]",
            self.cut,
            size_text(self.cap)
        )
    }
}

/// A byte size as a person reads it: in MiB or KiB when it is a whole
/// number of them, else in bytes.
///
/// ```text
/// 67108864 -> "64 MiB", 65536 -> "64 KiB", 1000 -> "1000 bytes"
/// ```
pub(crate) fn size_text(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// The output file of one run, capped (see the module's docs).
#[derive(Debug, Default)]
pub(crate) struct CappedFile {
    /// `None` once a write failed (and in a default, which writes nothing).
    file: Option<File>,
    /// The cap, in bytes.
    cap: u64,
    /// Where the ring starts: `cap - window`.
    head: u64,
    /// Every byte of output so far, written or not.
    total: u64,
    /// Whether the byte before `head` is a line break (the marker then needs
    /// none of its own before it).
    head_ends_line: bool,
    /// The output from byte `head` on, its last `window` bytes.
    tail: ByteTail,
    /// The first write that failed.
    error: Option<io::Error>,
    /// Whether [`seal`](Self::seal) ran, and what it found.
    sealed: Option<Option<OutputCut>>,
}

impl CappedFile {
    /// A capped writer into `file` (just created, empty), for at most `cap`
    /// bytes of output (at least 2).
    pub(crate) fn new(file: File, cap: u64) -> Self {
        let cap = cap.max(2);
        let window = (cap / 4).clamp(1, MAX_TAIL_WINDOW);
        CappedFile {
            file: Some(file),
            cap,
            head: cap - window,
            total: 0,
            head_ends_line: false,
            tail: ByteTail::new(usize::try_from(window).unwrap_or(usize::MAX)),
            error: None,
            sealed: None,
        }
    }

    /// How many bytes of output there were.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// The first write that failed, if one did.
    pub(crate) fn error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }

    /// Takes the next chunk of output. A plain blocking write: one chunk into
    /// the page cache is quick, and it keeps the file exact up to the last
    /// chunk read even when the reader is aborted.
    pub(crate) fn write(&mut self, chunk: &[u8]) {
        let start = self.total;
        self.total += chunk.len() as u64;
        if self.sealed.is_some() {
            return;
        }
        // The part of the chunk at or past `head` goes into the ring.
        let into_head = usize::try_from(self.head.saturating_sub(start))
            .unwrap_or(usize::MAX)
            .min(chunk.len());
        if into_head > 0 && start + into_head as u64 == self.head {
            self.head_ends_line = chunk[into_head - 1] == b'\n';
        }
        self.tail.push(&chunk[into_head..]);
        // Up to the cap, the file holds everything.
        let into_file = usize::try_from(self.cap.saturating_sub(start))
            .unwrap_or(usize::MAX)
            .min(chunk.len());
        if into_file > 0
            && let Some(file) = self.file.as_mut()
            && let Err(err) = file.write_all(&chunk[..into_file])
        {
            self.failed(err);
        }
    }

    fn failed(&mut self, err: io::Error) {
        tracing::warn!(%err, "cannot write the subagent's output file");
        self.error.get_or_insert(err);
        self.file = None;
    }

    /// The output ended: when it passed the cap, cuts the file back to its
    /// head and writes the marker line and the tail after it. Returns where
    /// it was cut; `None` when it was not. Only the first call writes.
    pub(crate) fn seal(&mut self) -> Option<OutputCut> {
        if let Some(sealed) = self.sealed {
            return sealed;
        }
        let cut = (self.total > self.cap).then(|| {
            let tail = self.tail.len() as u64;
            OutputCut {
                head: self.head,
                cut: self.total - self.head - tail,
                tail,
                cap: self.cap,
            }
        });
        self.sealed = Some(cut);
        if let (Some(cut), Some(file)) = (cut, self.file.as_ref()) {
            let mut marker = if self.head_ends_line {
                String::new()
            } else {
                "\n".to_owned()
            };
            marker.push_str(&cut.marker());
            marker.push('\n');
            let (first, second) = self.tail.as_slices();
            let written = file.set_len(cut.head).and_then(|()| {
                let mut at = cut.head;
                for part in [marker.as_bytes(), first, second] {
                    file.write_all_at(part, at)?;
                    at += part.len() as u64;
                }
                Ok(())
            });
            if let Err(err) = written {
                self.failed(err);
            }
        }
        cut
    }
}

impl Drop for CappedFile {
    /// A run that is dropped still leaves its file with its tail.
    fn drop(&mut self) {
        self.seal();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// Writes `chunks` into a file capped at `cap`, seals it, and returns
    /// what the file holds and where it was cut.
    fn capped(cap: u64, chunks: &[&[u8]]) -> (String, Option<OutputCut>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.out");
        let mut file = CappedFile::new(File::create(&path).expect("created"), cap);
        for chunk in chunks {
            file.write(chunk);
        }
        let total: usize = chunks.iter().map(|c| c.len()).sum();
        assert_eq!(file.total(), total as u64);
        let cut = file.seal();
        assert!(file.error().is_none());
        drop(file);
        (std::fs::read_to_string(&path).expect("read"), cut)
    }

    #[test]
    fn output_within_the_cap_is_kept_whole() {
        assert_eq!(
            capped(16, &[b"0123456789", b"abcdef"]),
            ("0123456789abcdef".to_owned(), None)
        );
        assert_eq!(capped(16, &[]), (String::new(), None));
    }

    #[test]
    fn output_past_the_cap_keeps_head_marker_and_tail() {
        // Cap 16: a window of 4, a head of 12.
        let (text, cut) = capped(16, &[b"0123456789", b"abcdefghij", b"KLMNOP", b"QRST"]);
        let cut = cut.expect("cut");
        assert_eq!(
            cut,
            OutputCut {
                head: 12,
                cut: 14,
                tail: 4,
                cap: 16
            }
        );
        assert_eq!(
            text,
            "0123456789ab\n[asynctask: 14 bytes cut here: the output passed max_output_bytes (16 bytes)]\nQRST"
        );
        // One byte over, in one chunk.
        let (text, cut) = capped(16, &[b"0123456789abcdefX"]);
        assert_eq!(
            cut,
            Some(OutputCut {
                head: 12,
                cut: 1,
                tail: 4,
                cap: 16
            })
        );
        assert!(
            text.starts_with("0123456789ab\n[asynctask: 1 bytes cut here"),
            "{text}"
        );
        assert!(text.ends_with("]\ndefX"), "{text}");
    }

    #[test]
    fn a_head_ending_a_line_gets_no_blank_line_before_the_marker() {
        let (text, _) = capped(16, &[b"line 1\nline\nabcdefghijklmnopqrstuvwxyz\n"]);
        assert_eq!(
            text,
            "line 1\nline\n[asynctask: 23 bytes cut here: the output passed max_output_bytes (16 bytes)]\nxyz\n"
        );
        // The head's last byte came in a chunk of its own.
        let (text, _) = capped(16, &[b"line 1\nline", b"\n", b"0123456789"]);
        assert!(text.starts_with("line 1\nline\n[asynctask: "), "{text}");
    }

    #[test]
    fn the_file_is_exact_until_the_output_passes_the_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.out");
        let mut file = CappedFile::new(File::create(&path).expect("created"), 64);
        file.write(&[b'a'; 60]);
        file.write(&[b'b'; 4]);
        assert_eq!(std::fs::metadata(&path).expect("metadata").len(), 64);
        file.write(&[b'c'; 1000]);
        assert_eq!(
            std::fs::metadata(&path).expect("metadata").len(),
            64,
            "nothing past the cap"
        );
        // Dropped without a seal (a run that was dropped): cut all the same.
        drop(file);
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            format!(
                "{}\n[asynctask: 1000 bytes cut here: the output passed max_output_bytes (64 bytes)]\n{}",
                "a".repeat(48),
                "c".repeat(16)
            )
        );
    }

    #[test]
    fn the_file_stays_within_the_cap_and_its_marker() {
        let cap: u64 = 64 * 1024;
        let chunk = vec![b'y'; 7_777];
        let chunks: Vec<&[u8]> = std::iter::repeat_n(chunk.as_slice(), 200).collect();
        let (text, cut) = capped(cap, &chunks);
        let cut = cut.expect("cut");
        assert_eq!(cut.head + cut.cut + cut.tail, 200 * 7_777);
        assert_eq!(cut.tail, cap / 4);
        let marker = format!("\n{}\n", cut.marker());
        assert_eq!(text.len() as u64, cap + marker.len() as u64);
        assert!(marker.contains("(64 KiB)"), "{marker}");
    }

    #[test]
    fn the_window_is_a_quarter_of_the_cap_up_to_a_mebibyte() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = || File::create(dir.path().join("t.out")).expect("created");
        assert_eq!(CappedFile::new(file(), 64 * 1024).head, 48 * 1024);
        let default = 64 * 1024 * 1024;
        assert_eq!(
            CappedFile::new(file(), default).head,
            default - MAX_TAIL_WINDOW
        );
        assert_eq!(CappedFile::new(file(), 0).head, 1);
    }

    #[test]
    fn sizes_read_in_the_largest_whole_unit() {
        assert_eq!(size_text(64 * 1024 * 1024), "64 MiB");
        assert_eq!(size_text(64 * 1024), "64 KiB");
        assert_eq!(size_text(1536 * 1024), "1536 KiB");
        assert_eq!(size_text(1000), "1000 bytes");
        assert_eq!(size_text(0), "0 bytes");
    }
}
