//! The wire: JSON-RPC messages as lines, read with a bound on their length,
//! and what to answer a line that is not a message.

use std::io;

use rmcp::model::{ClientJsonRpcMessage, ErrorCode, ErrorData, RequestId, ServerJsonRpcMessage};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest line (one JSON-RPC message) a server, supervisor or relay
/// reads: 16 MiB. A longer line is answered with an error (when it was a
/// request whose id could be read) and skipped, never buffered whole.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How much of an over-long line is kept, to read its id from.
const KEPT_HEAD_BYTES: usize = 64 * 1024;

/// One line read from the wire.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A whole line, without its line break (nor a `\r` before it).
    Whole(Vec<u8>),
    /// A line longer than the bound: its first bytes and its whole length.
    TooLong {
        /// Its first 64 KiB.
        head: Vec<u8>,
        /// How many bytes it had.
        len: usize,
    },
}

/// Reads lines of at most `max` bytes from a buffered reader without ever
/// holding more than `max` bytes of one: a longer line is reported as
/// [`Line::TooLong`] once its end is read, and reading goes on after it.
///
/// # Cancel safety
///
/// [`next`](Self::next) is cancel-safe: what it read before it was dropped
/// stays in the reader, and the next call goes on from there.
///
/// # Examples
///
/// ```
/// use asynctask_mcp::{Line, LineReader};
///
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let input: &[u8] = b"{\"a\":1}\r\nxxxxxxxxxx\nlast";
/// let mut lines = LineReader::new(input, 8);
/// assert_eq!(lines.next().await?, Some(Line::Whole(b"{\"a\":1}".to_vec())));
/// assert_eq!(lines.next().await?, Some(Line::TooLong { head: b"xxxxxxxx".to_vec(), len: 10 }));
/// assert_eq!(lines.next().await?, Some(Line::Whole(b"last".to_vec())), "a last line without a break");
/// assert_eq!(lines.next().await?, None);
/// # Ok::<(), std::io::Error>(())
/// # })?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct LineReader<R> {
    reader: R,
    max: usize,
    /// The line being read.
    line: Vec<u8>,
    /// The length of the line being read, once it is past `max` (its bytes
    /// past the head are dropped as they come).
    overflow: Option<usize>,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// Lines of at most `max` bytes from `reader`.
    pub fn new(reader: R, max: usize) -> Self {
        LineReader {
            reader,
            max,
            line: Vec::new(),
            overflow: None,
        }
    }

    /// The reader, and the bytes of a line begun but not yet ended (what a
    /// cancelled [`next`](Self::next) read of it), for another reader to go on
    /// from where this one stopped.
    pub fn into_inner(self) -> (R, Vec<u8>) {
        (self.reader, self.line)
    }

    /// The next line; `None` at the end of the input (a last line without a
    /// line break is a line).
    ///
    /// # Errors
    ///
    /// The reader's I/O error.
    pub async fn next(&mut self) -> io::Result<Option<Line>> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                let line = std::mem::take(&mut self.line);
                return Ok(match self.overflow.take() {
                    Some(len) => Some(too_long(line, len)),
                    None if line.is_empty() => None,
                    None => Some(Line::Whole(line)),
                });
            }
            let (chunk, ended) = match available.iter().position(|&b| b == b'\n') {
                Some(at) => (&available[..at], true),
                None => (available, false),
            };
            let taken = chunk.len() + usize::from(ended);
            match &mut self.overflow {
                Some(len) => *len += chunk.len(),
                None if self.line.len() + chunk.len() > self.max => {
                    let room = self.max - self.line.len();
                    self.line.extend_from_slice(&chunk[..room]);
                    self.overflow = Some(self.max + (chunk.len() - room));
                }
                None => self.line.extend_from_slice(chunk),
            }
            self.reader.consume(taken);
            if ended {
                let mut line = std::mem::take(&mut self.line);
                return Ok(Some(match self.overflow.take() {
                    Some(len) => too_long(line, len),
                    None => {
                        if line.last() == Some(&b'\r') {
                            line.pop();
                        }
                        Line::Whole(line)
                    }
                }));
            }
        }
    }
}

fn too_long(mut head: Vec<u8>, len: usize) -> Line {
    head.truncate(KEPT_HEAD_BYTES);
    Line::TooLong { head, len }
}

/// What a line from the client is.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// A message to serve.
    Message(Box<ClientJsonRpcMessage>),
    /// Not a message: the error to answer it with.
    Refused(Box<ServerJsonRpcMessage>),
    /// Nothing to serve or answer (an empty line, a notification we do not
    /// know).
    Ignored,
}

/// Decodes one line from a client into a message — repairing what can be
/// repaired (a byte-order mark, bytes that are not UTF-8 and lone surrogate
/// escapes become U+FFFD, as a truncated emoji would) — or the JSON-RPC error
/// that answers it: `-32700` for a line that is not JSON (nested too deeply
/// included), `-32600` for JSON that is not a request, `-32602` for a request
/// whose parameters do not fit its method. The error carries the request's id
/// whenever it can be read, `null` otherwise; a malformed notification is
/// ignored (a notification is never answered).
pub(crate) fn decode(line: &[u8]) -> Decoded {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Decoded::Ignored;
    }
    let first = match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
        Ok(message) => return checked(message),
        Err(error) => error,
    };
    let repaired = repair(line);
    if let Some(repaired) = &repaired
        && let Ok(message) = serde_json::from_slice::<ClientJsonRpcMessage>(repaired)
    {
        return checked(message);
    }
    let line = repaired.as_deref().unwrap_or(line);
    let value: serde_json::Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(error) => {
            return refuse(
                ErrorCode::PARSE_ERROR,
                format!("Parse error: the line is not JSON ({error})"),
                scan_id(line),
            );
        }
    };
    let Some(object) = value.as_object() else {
        let what = if value.is_array() {
            "a batch (an array of messages), which MCP does not use"
        } else {
            "not an object"
        };
        return refuse(
            ErrorCode::INVALID_REQUEST,
            format!("Invalid Request: the message is {what}"),
            None,
        );
    };
    let id = object.get("id").and_then(request_id);
    match (
        object.get("method").and_then(serde_json::Value::as_str),
        object.get("id"),
    ) {
        (Some(_), None) => {
            tracing::debug!(%first, "a malformed notification is ignored");
            Decoded::Ignored
        }
        (None, Some(_)) if object.contains_key("result") || object.contains_key("error") => {
            tracing::debug!(%first, "a malformed response is ignored (responses are never answered)");
            Decoded::Ignored
        }
        (Some(method), Some(_)) if id.is_some() && object.get("jsonrpc") == Some(&"2.0".into()) => {
            refuse(
                ErrorCode::INVALID_PARAMS,
                format!("Invalid params for {method}: {first}"),
                id,
            )
        }
        _ => refuse(
            ErrorCode::INVALID_REQUEST,
            format!("Invalid Request: {first}"),
            id,
        ),
    }
}

/// Methods a client may call whose parameters rmcp reads into their own type:
/// a request of one of them that rmcp took for a custom request (its
/// parameters did not fit) is refused `-32602`, not left to be answered as a
/// method not found.
const TYPED_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/call",
    "tools/list",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/templates/list",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
    "resources/directory/read",
];

/// `message`, unless it is a request of a method rmcp knows whose parameters
/// did not fit (rmcp then reads it as a custom request).
fn checked(message: ClientJsonRpcMessage) -> Decoded {
    if let ClientJsonRpcMessage::Request(request) = &message
        && let rmcp::model::ClientRequest::CustomRequest(custom) = &request.request
        && TYPED_METHODS.contains(&custom.method.as_str())
    {
        let why = match (custom.method.as_str(), &custom.params) {
            ("tools/call", Some(params)) => {
                serde_json::from_value::<rmcp::model::CallToolRequestParams>(params.clone())
                    .err()
                    .map(|error| error.to_string())
            }
            _ => None,
        };
        let why = why.unwrap_or_else(|| "they do not fit the method".to_owned());
        return refuse(
            ErrorCode::INVALID_PARAMS,
            format!("Invalid params for {}: {why}", custom.method),
            Some(request.id.clone()),
        );
    }
    Decoded::Message(Box::new(message))
}

/// The error answering a line longer than [`MAX_LINE_BYTES`] (of `len`
/// bytes, starting with `head`), with the request's id when `head` has it.
pub(crate) fn refuse_too_long(head: &[u8], len: usize) -> Option<ServerJsonRpcMessage> {
    let id = scan_id(head);
    let is_notification = id.is_none() && head_is_notification(head);
    if is_notification {
        return None;
    }
    Some(error(
        ErrorCode::INVALID_REQUEST,
        format!(
            "Invalid Request: the message is {len} bytes long, more than the {MAX_LINE_BYTES} \
             bytes a message may have"
        ),
        id,
    ))
}

/// `message` as one line of JSON (without its line break). An error answer
/// whose request id could not be read carries `"id": null`, as JSON-RPC 2.0
/// requires; the serializer would leave the member out.
pub(crate) fn encode(message: &ServerJsonRpcMessage) -> serde_json::Result<Vec<u8>> {
    let mut value = serde_json::to_value(message)?;
    if let Some(object) = value.as_object_mut()
        && object.contains_key("error")
        && !object.contains_key("id")
    {
        object.insert("id".to_owned(), serde_json::Value::Null);
    }
    serde_json::to_vec(&value)
}

fn refuse(code: ErrorCode, message: String, id: Option<RequestId>) -> Decoded {
    Decoded::Refused(Box::new(error(code, message, id)))
}

fn error(code: ErrorCode, message: String, id: Option<RequestId>) -> ServerJsonRpcMessage {
    ServerJsonRpcMessage::error(ErrorData::new(code, message, None), id)
}

/// A JSON-RPC id: a string or an integer.
fn request_id(value: &serde_json::Value) -> Option<RequestId> {
    match value {
        serde_json::Value::String(_) | serde_json::Value::Number(_) => {
            serde_json::from_value(value.clone()).ok()
        }
        _ => None,
    }
}

/// The id of the JSON-RPC request `line` holds (or starts with: a line cut
/// short will do), read without parsing the rest of it; `None` when it has
/// none that can be read (a string or an integer).
///
/// # Examples
///
/// ```
/// use asynctask_mcp::scan_request_id;
///
/// let head = br#"{"jsonrpc":"2.0","params":{"id":1,"deep":[[[["#;
/// assert_eq!(scan_request_id(head), None);
/// let head = br#"{"jsonrpc":"2.0","id":"a7","params":{"huge":"xxxx"#;
/// assert_eq!(scan_request_id(head), Some(serde_json::json!("a7")));
/// ```
#[must_use]
pub fn scan_request_id(line: &[u8]) -> Option<serde_json::Value> {
    scan_id(line).map(|id| id.into_json_value())
}

/// Whether an over-long line starts like a notification (a `method` member
/// and no `id` among the members its head holds).
fn head_is_notification(head: &[u8]) -> bool {
    members(head).any(|(key, _)| key == b"\"method\"")
}

/// The `id` member of the object `line` holds, read without parsing the rest:
/// with nesting of any depth, invalid parts after the id, or the line cut
/// short.
pub(crate) fn scan_id(line: &[u8]) -> Option<RequestId> {
    let (_, value) = members(line).find(|(key, _)| *key == b"\"id\"")?;
    let value: serde_json::Value = serde_json::from_slice(value).ok()?;
    request_id(&value)
}

/// The top-level members of the object `line` starts with, as raw key and
/// value slices, as far as they can be told apart. Iterative: no nesting
/// depth makes it recurse.
fn members(line: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut at = skip_space(line, 0);
    let mut open = line.get(at) == Some(&b'{');
    at += 1;
    std::iter::from_fn(move || {
        if !open {
            return None;
        }
        at = skip_space(line, at);
        if line.get(at) != Some(&b'"') {
            open = false;
            return None;
        }
        let key_end = skip_string(line, at)?;
        let key = &line[at..key_end];
        at = skip_space(line, key_end);
        if line.get(at) != Some(&b':') {
            open = false;
            return None;
        }
        at = skip_space(line, at + 1);
        let value_start = at;
        let value_end = skip_value(line, at);
        let value = &line[value_start..value_end];
        at = skip_space(line, value_end);
        match line.get(at) {
            Some(b',') => at += 1,
            _ => open = false,
        }
        Some((key, value))
    })
}

fn skip_space(line: &[u8], mut at: usize) -> usize {
    while line.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// The index just past the string starting at `at` (a `"`); `None` when the
/// line ends first.
fn skip_string(line: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    while i < line.len() {
        match line[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The index just past the value starting at `at` (or the line's end).
fn skip_value(line: &[u8], at: usize) -> usize {
    let mut depth = 0usize;
    let mut i = at;
    while i < line.len() {
        match line[i] {
            b'"' => match skip_string(line, i) {
                Some(end) => {
                    i = end;
                    if depth == 0 {
                        return i;
                    }
                    continue;
                }
                None => return line.len(),
            },
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                if depth == 0 {
                    return i;
                }
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            b',' if depth == 0 => return i,
            _ => {}
        }
        i += 1;
    }
    line.len()
}

/// `line` with what a strict parser refuses but a reader can mend: bytes that
/// are not UTF-8, and `\u` escapes of lone surrogates (half of a pair, as a
/// truncated emoji leaves), each becoming U+FFFD. `None` when there is nothing
/// to mend.
pub(crate) fn repair(line: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(line);
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut changed = matches!(text, std::borrow::Cow::Owned(_));
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !in_string {
            in_string = b == b'"';
            out.push(b);
            i += 1;
            continue;
        }
        match b {
            b'"' => {
                in_string = false;
                out.push(b);
                i += 1;
            }
            b'\\' if bytes.get(i + 1) == Some(&b'u') => {
                let unit = hex4(bytes, i + 2);
                match unit {
                    Some(high @ 0xD800..=0xDBFF) => {
                        let low = (bytes.get(i + 6) == Some(&b'\\')
                            && bytes.get(i + 7) == Some(&b'u'))
                        .then(|| hex4(bytes, i + 8))
                        .flatten();
                        if matches!(low, Some(0xDC00..=0xDFFF)) {
                            out.extend_from_slice(&bytes[i..i + 12]);
                            i += 12;
                        } else {
                            let _ = high;
                            out.extend_from_slice(b"\\uFFFD");
                            changed = true;
                            i += 6;
                        }
                    }
                    Some(0xDC00..=0xDFFF) => {
                        out.extend_from_slice(b"\\uFFFD");
                        changed = true;
                        i += 6;
                    }
                    _ => {
                        out.extend_from_slice(&bytes[i..(i + 6).min(bytes.len())]);
                        i += 6;
                    }
                }
            }
            b'\\' => {
                out.extend_from_slice(&bytes[i..(i + 2).min(bytes.len())]);
                i += 2;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    changed.then_some(out)
}

/// The value of the four hex digits at `at`, if they are there.
fn hex4(bytes: &[u8], at: usize) -> Option<u16> {
    let digits = bytes.get(at..at + 4)?;
    u16::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::{Value, json};

    fn refused(line: &str) -> Value {
        match decode(line.as_bytes()) {
            Decoded::Refused(error) => serde_json::to_value(&*error).expect("serializable"),
            other => panic!("{line}: {other:?}"),
        }
    }

    fn code_and_id(line: &str) -> (i64, Value) {
        let error = refused(line);
        (
            error["error"]["code"].as_i64().expect("a code"),
            error["id"].clone(),
        )
    }

    #[test]
    fn an_error_whose_id_could_not_be_read_says_id_null() {
        let Decoded::Refused(error) = decode(b"{not json") else {
            panic!("refused");
        };
        let line: Value = serde_json::from_slice(&encode(&error).expect("JSON")).expect("JSON");
        assert_eq!(line.get("id"), Some(&Value::Null), "{line}");
        assert_eq!(line["error"]["code"], json!(-32700));
        let Decoded::Refused(error) = decode(br#"{"jsonrpc":"2.0","id":7,"method":"tools/list",}"#)
        else {
            panic!("refused");
        };
        let line: Value = serde_json::from_slice(&encode(&error).expect("JSON")).expect("JSON");
        assert_eq!(line["id"], json!(7));
        let ping = ServerJsonRpcMessage::request(
            rmcp::model::ServerRequest::PingRequest(Default::default()),
            rmcp::model::NumberOrString::Number(1),
        );
        let line: Value = serde_json::from_slice(&encode(&ping).expect("JSON")).expect("JSON");
        assert_eq!(
            line,
            serde_json::to_value(&ping).expect("JSON"),
            "only errors change"
        );
    }

    #[test]
    fn lines_that_are_not_messages_are_answered_with_their_id_when_it_can_be_read() {
        assert_eq!(code_and_id("{not json"), (-32700, Value::Null));
        assert_eq!(
            code_and_id(r#"{"jsonrpc":"2.0","id":7,"method":"tools/list",}"#),
            (-32700, json!(7))
        );
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(code_and_id(&deep), (-32700, json!("deep")));
        assert_eq!(
            code_and_id(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            (-32600, Value::Null)
        );
        assert_eq!(code_and_id("42"), (-32600, Value::Null));
        assert_eq!(
            code_and_id(r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#),
            (-32600, Value::Null)
        );
        assert_eq!(
            code_and_id(r#"{"id":3,"method":"ping"}"#),
            (-32600, json!(3)),
            "no jsonrpc"
        );
        let call = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"task","arguments":[1,2]}}"#;
        assert_eq!(code_and_id(call), (-32602, json!(9)));
    }

    #[test]
    fn what_can_be_mended_is_served() {
        let truncated_emoji = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"task","arguments":{"goal_prompt":"hi \ud83d"}}}"#;
        let Decoded::Message(message) = decode(truncated_emoji.as_bytes()) else {
            panic!("served");
        };
        let text = serde_json::to_string(&message).expect("serializable");
        assert!(text.contains("hi \u{fffd}"), "{text}");
        let pair = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"g":"\ud83d\ude00 \\ud83d"}}}"#;
        let Decoded::Message(message) = decode(pair.as_bytes()) else {
            panic!("served");
        };
        let text = serde_json::to_string(&message).expect("serializable");
        assert!(
            text.contains("\u{1f600} \\\\ud83d"),
            "a pair and an escaped backslash stay: {text}"
        );
        let mut latin1 = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":""#.to_vec();
        latin1.extend_from_slice(b"caf\xe9\"}}");
        assert!(matches!(decode(&latin1), Decoded::Message(_)));
        assert!(matches!(
            decode(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"),
            Decoded::Message(_)
        ));
    }

    #[test]
    fn notifications_and_blank_lines_are_never_answered() {
        for line in [
            "",
            "  ",
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":7}"#,
        ] {
            assert!(
                matches!(decode(line.as_bytes()), Decoded::Ignored),
                "{line:?}"
            );
        }
    }

    #[test]
    fn the_id_is_read_from_any_prefix_of_an_object() {
        assert_eq!(
            scan_id(br#"{"method":"x","params":{"id":5},"id":"a"}"#),
            Some(RequestId::String("a".into()))
        );
        assert_eq!(
            scan_id(br#"{"params":"\"id\":3","id":4"#),
            Some(RequestId::Number(4))
        );
        assert_eq!(scan_id(br#"{"params":[[[[["#), None);
        assert_eq!(scan_id(br#"{"id":1.5}"#), None, "not an integer");
        assert_eq!(scan_id(b"[1]"), None);
        let too_long = refuse_too_long(
            br#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"x":"aaaa"#,
            20_000_000,
        )
        .expect("answered");
        let value = serde_json::to_value(&too_long).expect("serializable");
        assert_eq!(
            (value["id"].clone(), value["error"]["code"].clone()),
            (json!(12), json!(-32600))
        );
        assert!(
            refuse_too_long(
                br#"{"jsonrpc":"2.0","method":"notifications/x","params":{"#,
                20_000_000
            )
            .is_none()
        );
    }

    #[tokio::test]
    async fn a_line_past_the_bound_is_skipped_without_being_held() {
        let mut input = b"{\"id\":1}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 100_000));
        input.extend_from_slice(b"\nok\n");
        let mut lines = LineReader::new(tokio::io::BufReader::with_capacity(64, &input[..]), 1_000);
        assert_eq!(
            lines.next().await.expect("read"),
            Some(Line::Whole(b"{\"id\":1}".to_vec()))
        );
        let Some(Line::TooLong { head, len }) = lines.next().await.expect("read") else {
            panic!("too long");
        };
        assert_eq!((head.len(), len), (1_000, 100_000));
        assert!(
            lines.line.capacity() < 2_000,
            "never more than the bound held"
        );
        assert_eq!(
            lines.next().await.expect("read"),
            Some(Line::Whole(b"ok".to_vec()))
        );
        assert_eq!(lines.next().await.expect("read"), None);
    }
}
