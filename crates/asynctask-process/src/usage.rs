//! Usage lines: the lines a subagent prints on stdout to report what it used
//! (`::asynctask::usage {"input_tokens":…}`), taken out of its output as it
//! streams.

use asynctask_model::TaskUsage;

/// What starts a usage line: at the start of a line, then a JSON object on
/// the rest of it.
pub(crate) const USAGE_PREFIX: &[u8] = b"::asynctask::usage ";

/// The longest usage line read (after its prefix); a longer one is dropped
/// with a note, never held whole in memory.
pub(crate) const MAX_USAGE_LINE_BYTES: usize = 4 * 1024;

/// How many characters of the first problem a note quotes.
const PROBLEM_CHARS: usize = 200;

/// What one piece of stdout is, as [`UsageLines`] sorts it.
#[derive(Debug, PartialEq)]
pub(crate) enum Piece<'a> {
    /// Output, passed on as it came.
    Output(&'a [u8]),
    /// A usage line, read.
    Usage(TaskUsage),
}

/// Where the filter is in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a line.
    LineStart,
    /// Inside a line of output.
    Output,
    /// The start of a line matched the prefix so far, at the end of the last
    /// chunk: held until the next chunk says whether it is one.
    Prefix,
    /// Inside a usage line, collecting it.
    Usage,
    /// Inside a usage line too long to read: dropped to its end.
    TooLong,
}

/// Takes usage lines out of a stream of stdout chunks: every line that starts
/// with [`USAGE_PREFIX`] is read as a [`TaskUsage`] (a JSON object; unknown
/// keys ignored) and never reaches the output; everything else passes as it
/// came, in order. A line split across chunks is put back together. Lines
/// that cannot be read are counted and the first problem kept, for the note
/// the result gets ([`note`](Self::note)); nothing here panics on any input.
///
/// The cost on output that holds no usage line is one scan for line ends,
/// and a prefix comparison at the start of each line.
#[derive(Debug)]
pub(crate) struct UsageLines {
    state: State,
    /// The prefix matched so far ([`State::Prefix`]), or the usage line after
    /// its prefix ([`State::Usage`]).
    held: Vec<u8>,
    problems: usize,
    first_problem: Option<String>,
}

impl Default for UsageLines {
    fn default() -> Self {
        UsageLines {
            state: State::LineStart,
            held: Vec::new(),
            problems: 0,
            first_problem: None,
        }
    }
}

impl UsageLines {
    /// Sorts `chunk` into output and usage, in stream order.
    pub(crate) fn push(&mut self, chunk: &[u8], mut emit: impl FnMut(Piece<'_>)) {
        let mut at = 0;
        // Where the output not yet passed on starts.
        let mut run = 0;
        while at < chunk.len() {
            let rest = &chunk[at..];
            match self.state {
                State::Output => match line_end(rest) {
                    Some(end) => {
                        at += end + 1;
                        self.state = State::LineStart;
                    }
                    None => at = chunk.len(),
                },
                State::LineStart => {
                    let n = rest.len().min(USAGE_PREFIX.len());
                    if rest[..n] != USAGE_PREFIX[..n] {
                        self.state = State::Output;
                        continue;
                    }
                    pass(&mut emit, &chunk[run..at]);
                    at += n;
                    run = at;
                    if n == USAGE_PREFIX.len() {
                        self.state = State::Usage;
                        self.held.clear();
                    } else {
                        self.state = State::Prefix;
                        self.held.clear();
                        self.held.extend_from_slice(rest);
                    }
                }
                State::Prefix => {
                    let matched = self.held.len();
                    let n = rest.len().min(USAGE_PREFIX.len() - matched);
                    if rest[..n] == USAGE_PREFIX[matched..matched + n] {
                        self.held.extend_from_slice(&rest[..n]);
                        at += n;
                        run = at;
                        if self.held.len() == USAGE_PREFIX.len() {
                            self.state = State::Usage;
                            self.held.clear();
                        }
                    } else {
                        // Not a usage line after all: what was held is output.
                        let held = std::mem::take(&mut self.held);
                        pass(&mut emit, &held);
                        self.state = State::Output;
                        run = at;
                    }
                }
                State::Usage => {
                    let (line, end) = match line_end(rest) {
                        Some(end) => (&rest[..end], Some(end)),
                        None => (rest, None),
                    };
                    if self.held.len() + line.len() > MAX_USAGE_LINE_BYTES {
                        self.held.clear();
                        self.problem(format!("it is longer than {MAX_USAGE_LINE_BYTES} bytes"));
                        self.state = State::TooLong;
                        continue;
                    }
                    self.held.extend_from_slice(line);
                    match end {
                        Some(end) => {
                            at += end + 1;
                            run = at;
                            self.state = State::LineStart;
                            self.read_held(&mut emit);
                        }
                        None => {
                            at = chunk.len();
                            run = at;
                        }
                    }
                }
                State::TooLong => {
                    match line_end(rest) {
                        Some(end) => {
                            at += end + 1;
                            self.state = State::LineStart;
                        }
                        None => at = chunk.len(),
                    }
                    run = at;
                }
            }
        }
        if matches!(self.state, State::Output | State::LineStart) {
            pass(&mut emit, &chunk[run..]);
        }
    }

    /// The stream ended: a prefix held is output after all, a usage line
    /// without its line end is read.
    pub(crate) fn finish(&mut self, mut emit: impl FnMut(Piece<'_>)) {
        match std::mem::replace(&mut self.state, State::LineStart) {
            State::Prefix => {
                let held = std::mem::take(&mut self.held);
                pass(&mut emit, &held);
            }
            State::Usage => self.read_held(&mut emit),
            State::LineStart | State::Output | State::TooLong => {}
        }
    }

    /// The note a result gets when usage lines could not be read: how many,
    /// and what was wrong with the first. `None` when every one was read.
    pub(crate) fn note(&self) -> Option<String> {
        let first = self.first_problem.as_deref()?;
        Some(if self.problems == 1 {
            format!("[a usage line could not be read: {first}]")
        } else {
            format!(
                "[{} usage lines could not be read; the first: {first}]",
                self.problems
            )
        })
    }

    /// Reads the usage line held, and passes it on or counts its problem.
    fn read_held(&mut self, emit: &mut impl FnMut(Piece<'_>)) {
        let line = std::mem::take(&mut self.held);
        match parse(&line) {
            Ok(usage) => emit(Piece::Usage(usage)),
            Err(problem) => self.problem(problem),
        }
    }

    fn problem(&mut self, problem: String) {
        self.problems += 1;
        if self.first_problem.is_none() {
            tracing::debug!(%problem, "a usage line could not be read");
            self.first_problem = Some(cut(&problem));
        }
    }
}

/// A usage line (after its prefix) read as a [`TaskUsage`].
fn parse(line: &[u8]) -> Result<TaskUsage, String> {
    let text = std::str::from_utf8(line).map_err(|_| "it is not UTF-8".to_owned())?;
    let text = text.trim();
    if !text.starts_with('{') {
        return Err(format!(
            "expected a JSON object after {}, found {:?}",
            String::from_utf8_lossy(USAGE_PREFIX).trim_end(),
            cut(text)
        ));
    }
    serde_json::from_str(text).map_err(|err| format!("not a usage object: {err}"))
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(PROBLEM_CHARS) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

fn pass(emit: &mut impl FnMut(Piece<'_>), bytes: &[u8]) {
    if !bytes.is_empty() {
        emit(Piece::Output(bytes));
    }
}

fn line_end(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&byte| byte == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// The output and the usages `chunks` give, and the note.
    fn sort(chunks: &[&[u8]]) -> (String, Vec<TaskUsage>, Option<String>) {
        let mut lines = UsageLines::default();
        let (mut output, mut usages) = (Vec::new(), Vec::new());
        let mut take = |piece: Piece<'_>| match piece {
            Piece::Output(bytes) => output.extend_from_slice(bytes),
            Piece::Usage(usage) => usages.push(usage),
        };
        for chunk in chunks {
            lines.push(chunk, &mut take);
        }
        lines.finish(&mut take);
        (
            String::from_utf8(output).expect("UTF-8 in these tests"),
            usages,
            lines.note(),
        )
    }

    #[test]
    fn usage_lines_leave_the_output_whatever_the_chunking() {
        let text = "working\n::asynctask::usage {\"input_tokens\":10}\nstill \
                    ::asynctask::usage {\"input_tokens\":99}\n::asynctask:: other\n\
                    ::asynctask::usage {\"output_tokens\":3,\"model\":\"m\"}\r\ndone\n";
        let expected = (
            "working\nstill ::asynctask::usage {\"input_tokens\":99}\n::asynctask:: other\ndone\n"
                .to_owned(),
            vec![
                TaskUsage::new().with_input_tokens(10),
                TaskUsage::new().with_output_tokens(3).with_model("m"),
            ],
            None,
        );
        assert_eq!(sort(&[text.as_bytes()]), expected);
        let bytes = text.as_bytes();
        for at in 0..=bytes.len() {
            let (first, second) = bytes.split_at(at);
            assert_eq!(sort(&[first, second]), expected, "split at {at}");
        }
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(sort(&bytewise), expected);
    }

    #[test]
    fn a_prefix_cut_short_by_the_end_is_output_and_a_last_line_is_read() {
        assert_eq!(
            sort(&[b"ok\n::asynctask::usa"]),
            ("ok\n::asynctask::usa".to_owned(), Vec::new(), None)
        );
        assert_eq!(
            sort(&[b"::asynctask::usage {\"cost_usd\":0.5}"]),
            (
                String::new(),
                vec![TaskUsage::new().with_cost_usd(0.5)],
                None
            )
        );
    }

    #[test]
    fn bad_lines_are_dropped_with_a_note() {
        let (output, usages, note) = sort(&[
            b"::asynctask::usage {\"input_tokens\":\"many\"}\n",
            b"::asynctask::usage tokens=5\n::asynctask::usage \xff\n",
            b"::asynctask::usage {\"cost_usd\":-1}\nafter\n",
        ]);
        assert_eq!((output.as_str(), usages), ("after\n", Vec::new()));
        assert_eq!(
            note.as_deref(),
            Some(
                "[4 usage lines could not be read; the first: not a usage object: invalid \
                 type: string \"many\", expected u64 at line 1 column 22]"
            )
        );
        let (_, _, note) = sort(&[b"::asynctask::usage tokens=5\n"]);
        assert_eq!(
            note.as_deref(),
            Some(
                "[a usage line could not be read: expected a JSON object after \
                 ::asynctask::usage, found \"tokens=5\"]"
            )
        );
    }

    #[test]
    fn a_huge_usage_line_is_never_held_whole() {
        let mut lines = UsageLines::default();
        let mut output = Vec::new();
        lines.push(b"::asynctask::usage {\"model\":\"", |_| {});
        let filler = vec![b'x'; 64 * 1024];
        for _ in 0..16 {
            lines.push(&filler, |_| {});
            assert!(lines.held.len() <= MAX_USAGE_LINE_BYTES);
        }
        lines.push(b"\"}\nnext\n", |piece| {
            if let Piece::Output(bytes) = piece {
                output.extend_from_slice(bytes);
            }
        });
        assert_eq!(output, b"next\n");
        assert_eq!(
            lines.note().as_deref(),
            Some("[a usage line could not be read: it is longer than 4096 bytes]")
        );
    }
}
