//! Bounded output capture: a byte stream kept as its head and its tail, so a
//! subagent's output size never costs memory.

use std::collections::VecDeque;

/// A byte stream kept within a bound: its first `head_limit` bytes and its last
/// `tail_limit` bytes, and how many there were in all.
#[derive(Debug)]
pub(crate) struct Capture {
    head: Vec<u8>,
    head_limit: usize,
    tail: VecDeque<u8>,
    tail_limit: usize,
    total: u64,
}

impl Capture {
    pub(crate) fn new(head_limit: usize, tail_limit: usize) -> Self {
        Capture {
            head: Vec::new(),
            head_limit,
            tail: VecDeque::new(),
            tail_limit,
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_limit - self.head.len();
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        // Only the end of a chunk longer than the whole tail can survive.
        let rest = &rest[rest.len().saturating_sub(self.tail_limit)..];
        self.tail.extend(rest);
        let excess = self.tail.len().saturating_sub(self.tail_limit);
        self.tail.drain(..excess);
    }

    /// How many bytes were neither in the head nor the tail.
    fn omitted(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// The text: everything, or the head and tail around a line
    /// `[... N bytes omitted ...]`, each cut on character boundaries.
    pub(crate) fn into_text(self) -> String {
        let omitted = self.omitted();
        let mut head = self.head;
        let tail = Vec::from(self.tail);
        if omitted == 0 {
            head.extend_from_slice(&tail);
            return String::from_utf8_lossy(&head).into_owned();
        }
        let head_cut = incomplete_suffix_len(&head);
        let tail_cut = continuation_prefix_len(&tail);
        let omitted = omitted + (head_cut + tail_cut) as u64;
        let head = String::from_utf8_lossy(&head[..head.len() - head_cut]);
        let tail = String::from_utf8_lossy(&tail[tail_cut..]);
        let separator = if head.is_empty() || head.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        format!("{head}{separator}[... {omitted} bytes omitted ...]\n{tail}")
    }

    /// The tail as text, and whether anything before it was cut.
    pub(crate) fn into_tail_text(self) -> (bool, String) {
        let cut = self.omitted() > 0;
        let mut bytes = self.head;
        bytes.extend(self.tail);
        let skip = if cut {
            continuation_prefix_len(&bytes)
        } else {
            0
        };
        (cut, String::from_utf8_lossy(&bytes[skip..]).into_owned())
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

    fn capture(head: usize, tail: usize, chunks: &[&[u8]]) -> Capture {
        let mut capture = Capture::new(head, tail);
        for chunk in chunks {
            capture.push(chunk);
        }
        capture
    }

    #[test]
    fn a_short_stream_is_kept_whole() {
        let text = capture(4, 4, &[b"abc", b"def", b"gh"]).into_text();
        assert_eq!(text, "abcdefgh");
    }

    #[test]
    fn a_long_stream_keeps_head_and_tail() {
        let text = capture(4, 4, &[b"abc", b"defghij", b"klmn", b"op"]).into_text();
        assert_eq!(text, "abcd\n[... 8 bytes omitted ...]\nmnop");
    }

    #[test]
    fn a_chunk_longer_than_the_tail_keeps_its_end() {
        let text = capture(2, 3, &[b"ab", b"0123456789"]).into_text();
        assert_eq!(text, "ab\n[... 7 bytes omitted ...]\n789");
    }

    #[test]
    fn the_tail_slides_byte_by_byte() {
        let bytes: Vec<[u8; 1]> = (b'a'..=b'z').map(|b| [b]).collect();
        let chunks: Vec<&[u8]> = bytes.iter().map(<[u8; 1]>::as_slice).collect();
        let text = capture(0, 5, &chunks).into_text();
        assert_eq!(text, "[... 21 bytes omitted ...]\nvwxyz");
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        // "é" is two bytes, "€" three: the head would end inside "é", the tail
        // start inside "€".
        let text = capture(3, 4, &["abé".as_bytes(), b"xxxx", "€yz".as_bytes()]).into_text();
        assert_eq!(text, "ab\n[... 9 bytes omitted ...]\nyz");
        let whole = capture(3, 4, &["abé€".as_bytes()]).into_text();
        assert_eq!(whole, "abé€");
    }

    #[test]
    fn the_tail_text_says_whether_it_was_cut() {
        assert_eq!(
            capture(0, 4, &[b"oops"]).into_tail_text(),
            (false, "oops".to_owned())
        );
        assert_eq!(
            capture(0, 4, &[b"error: ", b"bad"]).into_tail_text(),
            (true, " bad".to_owned())
        );
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
