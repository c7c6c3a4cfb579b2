//! Bounded output capture: the inline text of stdout (its head and its tail
//! within a budget of JSON-escaped characters) and the end of stderr, so a subagent's output
//! size never costs memory.

use std::collections::VecDeque;

/// What a character costs once it is written inside a JSON string, as the
/// model reads a result: 2 for `"`, `\` and the control characters JSON
/// spells with a letter (`\n`, `\r`, `\t`, `\b`, `\f`), 6 for every other
/// control character (`\u001b`), 1 for anything else (JSON keeps non-ASCII
/// characters as they are).
pub(crate) fn json_cost(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        '\0'..='\u{1f}' => 6,
        _ => 1,
    }
}

/// The JSON cost ([`json_cost`]) of a text.
pub(crate) fn json_len(text: &str) -> usize {
    text.chars().map(json_cost).sum()
}

/// Decodes a byte stream as lossy UTF-8 (a character split across chunks is put
/// back together; invalid bytes become U+FFFD) and keeps its head and its tail
/// within a budget counted in JSON cost ([`json_cost`]), so the kept text
/// stays within the budget once written in a JSON string: the head as long as
/// it costs at most `budget / 2`, the tail at most `budget - budget / 2`, and
/// how many characters there were in all.
///
/// The tail is a `String` allowed to grow to twice its budget before its front
/// is cut, so the cost per character is amortized constant.
#[derive(Debug, Default)]
pub(crate) struct InlineText {
    head: String,
    head_chars: usize,
    head_cost: usize,
    head_budget: usize,
    /// The head is closed once a character did not fit: what follows goes to
    /// the tail, so the text keeps its order.
    head_full: bool,
    tail: String,
    tail_chars: usize,
    tail_cost: usize,
    tail_budget: usize,
    total_chars: u64,
    /// The start of a character split across chunks (at most 3 bytes).
    split: Vec<u8>,
}

impl InlineText {
    pub(crate) fn new(budget: usize) -> Self {
        InlineText {
            head_budget: budget / 2,
            tail_budget: budget - budget / 2,
            ..InlineText::default()
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let joined;
        let bytes = if self.split.is_empty() {
            bytes
        } else {
            let mut split = std::mem::take(&mut self.split);
            split.extend_from_slice(bytes);
            joined = split;
            &joined
        };
        let (complete, incomplete) = bytes.split_at(bytes.len() - incomplete_suffix_len(bytes));
        for chunk in complete.utf8_chunks() {
            self.push_str(chunk.valid());
            if !chunk.invalid().is_empty() {
                self.push_str("\u{fffd}");
            }
        }
        self.split = incomplete.to_vec();
    }

    fn push_str(&mut self, mut text: &str) {
        if text.is_empty() {
            return;
        }
        if !self.head_full {
            let mut end = text.len();
            for (at, c) in text.char_indices() {
                let cost = json_cost(c);
                if self.head_cost + cost > self.head_budget {
                    self.head_full = true;
                    end = at;
                    break;
                }
                self.head_cost += cost;
                self.head_chars += 1;
                self.total_chars += 1;
            }
            self.head.push_str(&text[..end]);
            text = &text[end..];
        }
        if text.is_empty() {
            return;
        }
        let (chars, cost) = text
            .chars()
            .fold((0, 0), |(chars, cost), c| (chars + 1, cost + json_cost(c)));
        self.total_chars += chars as u64;
        self.tail.push_str(text);
        self.tail_chars += chars;
        self.tail_cost += cost;
        if self.tail_cost > 2 * self.tail_budget {
            self.trim_tail();
        }
    }

    /// Cuts the front of the tail until it fits its budget.
    fn trim_tail(&mut self) {
        let mut cut = 0;
        for (at, c) in self.tail.char_indices() {
            if self.tail_cost <= self.tail_budget {
                cut = at;
                break;
            }
            self.tail_cost -= json_cost(c);
            self.tail_chars -= 1;
            cut = at + c.len_utf8();
        }
        self.tail.drain(..cut);
    }

    /// The text, and whether it was cut: everything when it fits the budget,
    /// else its head and its tail around the line `marker` makes from how
    /// many characters were left out.
    pub(crate) fn finish(mut self, marker: impl FnOnce(u64) -> String) -> (String, bool) {
        if !self.split.is_empty() {
            // The stream ended inside a character.
            self.split.clear();
            self.push_str("\u{fffd}");
        }
        self.trim_tail();
        let omitted = self.total_chars - (self.head_chars + self.tail_chars) as u64;
        if omitted == 0 {
            self.head.push_str(&self.tail);
            return (self.head, false);
        }
        let separator = if self.head.is_empty() || self.head.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        (
            format!("{}{separator}{}\n{}", self.head, marker(omitted), self.tail),
            true,
        )
    }
}

/// The end of a byte stream: its last `limit` bytes, and whether anything
/// came before them.
#[derive(Debug, Default)]
pub(crate) struct ByteTail {
    tail: VecDeque<u8>,
    limit: usize,
    cut: bool,
}

impl ByteTail {
    pub(crate) fn new(limit: usize) -> Self {
        ByteTail {
            tail: VecDeque::new(),
            limit,
            cut: false,
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        // Only the end of a chunk longer than the whole tail can survive.
        let keep = &bytes[bytes.len().saturating_sub(self.limit)..];
        self.cut |= keep.len() < bytes.len();
        self.tail.extend(keep);
        let excess = self.tail.len().saturating_sub(self.limit);
        self.cut |= excess > 0;
        self.tail.drain(..excess);
    }

    /// How many bytes it holds.
    pub(crate) fn len(&self) -> usize {
        self.tail.len()
    }

    /// The bytes it holds, in order, in two parts.
    pub(crate) fn as_slices(&self) -> (&[u8], &[u8]) {
        self.tail.as_slices()
    }

    /// The tail as text (lossy UTF-8, starting on a character boundary when
    /// it was cut), and whether anything before it was cut.
    pub(crate) fn into_text(self) -> (bool, String) {
        let bytes = Vec::from(self.tail);
        let skip = if self.cut {
            continuation_prefix_len(&bytes)
        } else {
            0
        };
        (
            self.cut,
            String::from_utf8_lossy(&bytes[skip..]).into_owned(),
        )
    }
}

/// How many bytes at the end of `bytes` are the start of a character whose end
/// was cut off: the decoder's own verdict, an error that is "incomplete at the
/// end" (no `error_len`) right at the start of a short suffix.
fn incomplete_suffix_len(bytes: &[u8]) -> usize {
    // A UTF-8 character is at most 4 bytes, so an incomplete one is at most 3.
    (1..=3.min(bytes.len()))
        .rev()
        .find(|&len| {
            matches!(
                std::str::from_utf8(&bytes[bytes.len() - len..]),
                Err(err) if err.valid_up_to() == 0 && err.error_len().is_none()
            )
        })
        .unwrap_or(0)
}

/// How many bytes at the start of `bytes` are the rest of a character cut off
/// before them: at most 3 leading bytes that cannot start a character.
fn continuation_prefix_len(bytes: &[u8]) -> usize {
    let mut skip = 0;
    while skip < 3 && skip < bytes.len() {
        // `utf8_chunks` yields each byte that cannot start a character as an
        // invalid chunk of its own, with nothing valid before it.
        match bytes[skip..].utf8_chunks().next() {
            Some(chunk) if chunk.valid().is_empty() && chunk.invalid().len() == 1 => skip += 1,
            _ => break,
        }
    }
    skip
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn inline(budget: usize, chunks: &[&[u8]]) -> String {
        let mut text = InlineText::new(budget);
        let mut bytes = 0;
        for chunk in chunks {
            text.push(chunk);
            bytes += chunk.len() as u64;
        }
        text.finish(|omitted| {
            format!("[... {omitted} characters omitted; the whole output ({bytes} bytes) is in /out/t.out ...]")
        })
        .0
    }

    #[test]
    fn a_short_stream_is_kept_whole() {
        assert_eq!(inline(8, &[b"abc", b"def", b"gh"]), "abcdefgh");
        assert_eq!(inline(0, &[]), "");
    }

    #[test]
    fn a_long_stream_keeps_head_and_tail_around_the_marker() {
        assert_eq!(
            inline(8, &[b"abc", b"defghij", b"klmn", b"op"]),
            "abcd\n[... 8 characters omitted; the whole output (16 bytes) is in /out/t.out ...]\nmnop"
        );
        // `\n` costs 2: it does not fit a head of 2 after "ab".
        assert_eq!(
            inline(5, &[b"ab\n", b"0123456789"]),
            "ab\n[... 8 characters omitted; the whole output (13 bytes) is in /out/t.out ...]\n789"
        );
    }

    #[test]
    fn the_budget_counts_what_each_character_costs_in_a_json_string() {
        assert_eq!(json_len("ab"), 2);
        assert_eq!(json_len("\"\\\n\r\t\u{8}\u{c}"), 14);
        assert_eq!(json_len("\u{1b}[0m\0"), 6 + 3 + 6);
        assert_eq!(json_len("é😀\u{7f}"), 3);
        // Every kept character, written in a JSON string, fits the budget.
        for text in [
            "\"quoted\" \\path\\ \u{1b}[31mred\u{1b}[0m\n".repeat(500),
            "1\n2\n3\n".repeat(3000),
            "x".repeat(30_000),
        ] {
            let mut inline = InlineText::new(1_000);
            for chunk in text.as_bytes().chunks(777) {
                inline.push(chunk);
            }
            let (kept, cut) = inline.finish(|_| String::new());
            assert!(cut);
            let escaped = serde_json::to_string(&kept).expect("a string");
            // The quotes, and the line breaks around the (empty) marker.
            assert!(escaped.len() <= 1_000 + 2 + 4, "{}", escaped.len());
            assert!(escaped.len() >= 1_000 - 12, "{}", escaped.len());
        }
    }

    #[test]
    fn the_tail_slides_character_by_character() {
        let letters: Vec<[u8; 1]> = (b'a'..=b'z').map(|b| [b]).collect();
        let chunks: Vec<&[u8]> = letters.iter().map(<[u8; 1]>::as_slice).collect();
        assert_eq!(
            inline(10, &chunks),
            "abcde\n[... 16 characters omitted; the whole output (26 bytes) is in /out/t.out ...]\nvwxyz"
        );
    }

    #[test]
    fn characters_split_across_chunks_are_whole() {
        let text = "aéé€€😀😀b".as_bytes();
        // Every split point, including inside each character.
        for at in 0..=text.len() {
            let (first, second) = text.split_at(at);
            assert_eq!(inline(8, &[first, second]), "aéé€€😀😀b", "split at {at}");
            assert_eq!(
                inline(4, &[first, second]),
                "aé\n[... 4 characters omitted; the whole output (20 bytes) is in /out/t.out ...]\n😀b",
                "split at {at}"
            );
        }
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        assert_eq!(inline(10, &[b"a\xffb", b"\xe2\x82"]), "a\u{fffd}b\u{fffd}");
    }

    #[test]
    fn the_byte_tail_says_whether_it_was_cut() {
        let tail = |limit, chunks: &[&[u8]]| {
            let mut tail = ByteTail::new(limit);
            for chunk in chunks {
                tail.push(chunk);
            }
            tail.into_text()
        };
        assert_eq!(tail(4, &[b"oops"]), (false, "oops".to_owned()));
        assert_eq!(tail(4, &[b"error: ", b"bad"]), (true, " bad".to_owned()));
        assert_eq!(tail(4, &[b"err", b"or: bad"]), (true, " bad".to_owned()));
        // The cut fell inside "€": its remains are dropped.
        assert_eq!(tail(4, &["x€ab".as_bytes()]), (true, "ab".to_owned()));
    }

    #[test]
    fn incomplete_sequences_are_measured() {
        assert_eq!(incomplete_suffix_len(b"abc"), 0);
        assert_eq!(incomplete_suffix_len(b""), 0);
        assert_eq!(incomplete_suffix_len("aé".as_bytes()), 0);
        assert_eq!(incomplete_suffix_len(&"a€".as_bytes()[..3]), 2);
        assert_eq!(incomplete_suffix_len(&"😀".as_bytes()[..3]), 3);
        assert_eq!(incomplete_suffix_len(&"😀".as_bytes()[..1]), 1);
        assert_eq!(incomplete_suffix_len("😀".as_bytes()), 0);
        assert_eq!(continuation_prefix_len(&"€".as_bytes()[1..]), 2);
        assert_eq!(continuation_prefix_len(&"😀".as_bytes()[1..]), 3);
        assert_eq!(continuation_prefix_len(b"abc"), 0);
        assert_eq!(continuation_prefix_len(b""), 0);
    }
}
