//! A session's opening on stdio: which project the client works in, asked
//! before the server that serves it is built (its subagents run there).
//!
//! A client that declares the `roots` capability is asked for its roots once
//! the session is initialized; its first root (a `file://` URI) is the
//! project. The server a client meets first answers `initialize` before the
//! project is known, so that answer comes from a stand-in server of the same
//! code, and the lines read meanwhile are handed on, in order, to the server
//! that serves the session, whose own answer to `initialize` is dropped.
//! What an opening keeps is bounded ([`MAX_OPENING_LINES`],
//! [`MAX_OPENING_BYTES`]): a client that sends more before it lists its roots
//! is served at once, in the default project.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use asynctask_runtime::AsyncTaskRuntime;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt, BufReader};

use crate::server::AsyncTaskMcpServer;
use crate::wire::{Line, LineReader, MAX_LINE_BYTES, encode, refuse_too_long};

/// How long a client that declared roots has to list them.
pub const ROOTS_TIMEOUT: Duration = Duration::from_secs(5);

/// How many of the client's lines an opening keeps while it waits for the
/// client's roots: with this many, it stops waiting and the session is
/// served (the server after the opening reads no more than it can answer, and
/// a client that sends this much before it answers `roots/list` will not
/// answer it in time).
pub const MAX_OPENING_LINES: usize = 256;

/// How many bytes of the client's lines an opening keeps while it waits for
/// the client's roots: once its lines reach this many, it stops waiting and
/// the session is served. A line is at most [`MAX_LINE_BYTES`], so an opening
/// holds less than twice this.
pub const MAX_OPENING_BYTES: usize = MAX_LINE_BYTES;

/// The id of the `roots/list` request an opening sends (a string no client
/// numbering reaches).
const ROOTS_REQUEST_ID: &str = "asynctask-opening-roots";

/// How a stdio session opened: the project the client named, and the lines
/// read from it that the serving side must still see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Opening {
    /// The client's first root, when it declared the `roots` capability and
    /// listed at least one `file://` root in time; `None`: the caller's
    /// default (the server's working directory).
    pub project: Option<PathBuf>,
    /// The client's lines read so far (without their line breaks), in order:
    /// the serving side reads them before anything else.
    pub replay: Vec<Vec<u8>>,
    /// The id of the `initialize` request the opening already answered: the
    /// serving side's own answer to it must not reach the client.
    pub answered: Option<Value>,
}

impl Opening {
    /// The client's `initialize` request among the lines read, if it came.
    #[must_use]
    pub fn initialize(&self) -> Option<&[u8]> {
        self.replay
            .iter()
            .find(|line| method(line).as_deref() == Some("initialize"))
            .map(Vec::as_slice)
    }

    /// The client's `notifications/initialized` among the lines read, if it
    /// came.
    #[must_use]
    pub fn initialized(&self) -> Option<&[u8]> {
        self.replay
            .iter()
            .find(|line| method(line).as_deref() == Some("notifications/initialized"))
            .map(Vec::as_slice)
    }
}

/// Reads the opening of a session from `client` (answering on `to_client`):
/// when `ask_roots` and the client's first message is an `initialize` that
/// declares the `roots` capability, answers it, waits for
/// `notifications/initialized`, asks `roots/list` and takes the first
/// `file://` root as the project (waiting at most [`ROOTS_TIMEOUT`] for the
/// two). Otherwise only the first line is read. Every client line read is in
/// [`Opening::replay`]; the answer to `roots/list` is not.
///
/// A line longer than [`MAX_LINE_BYTES`] is answered here as the serving side
/// answers one (`-32600`, with the request's id when its head holds one) and
/// is not kept. Once the lines kept reach [`MAX_OPENING_LINES`] or
/// [`MAX_OPENING_BYTES`], the opening stops waiting for roots: the project is
/// the default one, and the serving side reads the lines kept and the rest.
///
/// # Errors
///
/// The I/O error of reading the client or writing to it.
///
/// # Cancel safety
///
/// Not cancel-safe: lines read are lost with the future.
pub async fn open_session<R, W>(
    client: &mut LineReader<R>,
    to_client: &mut W,
    ask_roots: bool,
) -> std::io::Result<Opening>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut opening = Opening::default();
    let Some(first) = whole_line(client, to_client).await? else {
        return Ok(opening);
    };
    let declares_roots = serde_json::from_slice::<Value>(&first)
        .ok()
        .is_some_and(|message| {
            message.get("method").and_then(Value::as_str) == Some("initialize")
                && message.pointer("/params/capabilities/roots").is_some()
        });
    let id = serde_json::from_slice::<Value>(&first)
        .ok()
        .and_then(|message| message.get("id").cloned());
    opening.replay.push(first.clone());
    if !ask_roots || !declares_roots {
        return Ok(opening);
    }
    let Some(answer) = stand_in_answer(&first).await else {
        // The stand-in could not answer: the serving side answers, and the
        // project is the default one.
        return Ok(opening);
    };
    write_line(to_client, &answer).await?;
    opening.answered = id;
    let mut kept_bytes = first.len();
    let deadline = tokio::time::Instant::now() + ROOTS_TIMEOUT;
    let mut asked = false;
    loop {
        // Only the read waits on the deadline: an answer being written is
        // never cut short.
        let line = match tokio::time::timeout_at(deadline, client.next()).await {
            Ok(line) => line?,
            Err(_) => {
                tracing::warn!(
                    "the client declared roots but did not list them within {} s; the \
                     project is the server's working directory",
                    ROOTS_TIMEOUT.as_secs()
                );
                return Ok(opening);
            }
        };
        let line = match line {
            None => return Ok(opening),
            Some(Line::TooLong { head, len }) => {
                answer_too_long(to_client, &head, len).await?;
                continue;
            }
            Some(Line::Whole(line)) => line,
        };
        let message = serde_json::from_slice::<Value>(&line).unwrap_or(Value::Null);
        if message.get("id") == Some(&json!(ROOTS_REQUEST_ID)) && message.get("method").is_none() {
            opening.project = first_root(&message);
            if opening.project.is_none() {
                tracing::info!(
                    "the client listed no file:// root; the project is the server's working \
                     directory"
                );
            }
            return Ok(opening);
        }
        let initialized = method(&line).as_deref() == Some("notifications/initialized");
        kept_bytes += line.len();
        opening.replay.push(line);
        if opening.replay.len() >= MAX_OPENING_LINES || kept_bytes >= MAX_OPENING_BYTES {
            tracing::warn!(
                "the client sent {} lines ({kept_bytes} bytes) before listing its roots; the \
                 session is served now, and the project is the server's working directory",
                opening.replay.len()
            );
            return Ok(opening);
        }
        if initialized && !asked {
            let request = json!({"jsonrpc": "2.0", "id": ROOTS_REQUEST_ID, "method": "roots/list"});
            write_line(to_client, request.to_string().as_bytes()).await?;
            asked = true;
        }
    }
}

/// The next line that is not too long to be a message; one that is, is
/// answered on `to_client` as the serving side answers it after the opening,
/// and skipped.
async fn whole_line<R, W>(
    client: &mut LineReader<R>,
    to_client: &mut W,
) -> std::io::Result<Option<Vec<u8>>>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        match client.next().await? {
            None => return Ok(None),
            Some(Line::Whole(line)) => return Ok(Some(line)),
            Some(Line::TooLong { head, len }) => answer_too_long(to_client, &head, len).await?,
        }
    }
}

/// Answers a line of `len` bytes, too long to be a message (starting with
/// `head`), as the serving side does after the opening.
async fn answer_too_long<W: AsyncWrite + Unpin>(
    to_client: &mut W,
    head: &[u8],
    len: usize,
) -> std::io::Result<()> {
    match refuse_too_long(head, len) {
        Some(refusal) => write_line(to_client, &encode(&refusal)?).await,
        // A notification: never answered.
        None => Ok(()),
    }
}

/// The `method` of a JSON-RPC line, if it has one.
fn method(line: &[u8]) -> Option<String> {
    let message: Value = serde_json::from_slice(line).ok()?;
    Some(message.get("method")?.as_str()?.to_owned())
}

async fn write_line<W: AsyncWrite + Unpin>(out: &mut W, line: &[u8]) -> std::io::Result<()> {
    out.write_all(line).await?;
    out.write_all(b"\n").await?;
    out.flush().await
}

/// What a server of this code answers `initialize` with, from a stand-in that
/// serves no tasks; `None` when it gave no answer.
async fn stand_in_answer(initialize: &[u8]) -> Option<Vec<u8>> {
    let runtime = Arc::new(AsyncTaskRuntime::builder().try_build().ok()?);
    let server = AsyncTaskMcpServer::new(runtime).ok()?;
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let (their_read, their_write) = tokio::io::split(theirs);
    let serving = tokio::spawn(server.serve_relayed(their_read, their_write));
    let (our_read, mut our_write) = tokio::io::split(ours);
    let answer = async {
        write_line(&mut our_write, initialize).await.ok()?;
        let mut lines = LineReader::new(BufReader::new(our_read), MAX_LINE_BYTES);
        match lines.next().await.ok()?? {
            Line::Whole(line) => Some(line),
            Line::TooLong { .. } => None,
        }
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), answer)
        .await
        .ok()
        .flatten();
    serving.abort();
    answer
}

/// The path of the first `file://` root in a `roots/list` answer.
fn first_root(answer: &Value) -> Option<PathBuf> {
    answer
        .pointer("/result/roots")?
        .as_array()?
        .iter()
        .filter_map(|root| root.get("uri")?.as_str())
        .find_map(file_uri_path)
}

/// The path a `file://` URI names (`file:///srv/a%20b` is `/srv/a b`);
/// `None` for another scheme, a remote host, or a bad escape.
fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    if !path.starts_with('/') {
        return None;
    }
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    use std::os::unix::ffi::OsStringExt;
    Some(PathBuf::from(std::ffi::OsString::from_vec(decoded)))
}

/// A writer that drops the server's answer to the `initialize` request an
/// opening already answered (the first line it is given, when that line is
/// an answer with that id), and passes every other byte on.
#[derive(Debug)]
pub struct DropAnswer<W> {
    inner: W,
    /// The id whose answer is dropped, until the first line is seen.
    id: Option<Value>,
    /// The first line, while it is being written.
    head: Vec<u8>,
    /// Bytes of the first line still to be written to `inner` (it was not
    /// the answer after all).
    pending: Vec<u8>,
}

impl<W> DropAnswer<W> {
    /// Passes everything to `inner` except the answer to `answered` (with
    /// `None`, everything).
    pub fn new(inner: W, answered: Option<Value>) -> Self {
        DropAnswer {
            inner,
            id: answered,
            head: Vec::new(),
            pending: Vec::new(),
        }
    }
}

/// Whether `line` (one JSON-RPC message) is the answer to the request `id`.
///
/// ```
/// let id = serde_json::json!(7);
/// assert!(asynctask_mcp::answers(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#, &id));
/// assert!(!asynctask_mcp::answers(br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#, &id));
/// ```
#[must_use]
pub fn answers(line: &[u8], id: &Value) -> bool {
    serde_json::from_slice::<Value>(line)
        .is_ok_and(|message| message.get("id") == Some(id) && message.get("method").is_none())
}

impl<W: AsyncWrite + Unpin> AsyncWrite for DropAnswer<W> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = &mut *self;
        loop {
            if !this.pending.is_empty() {
                let written = std::task::ready!(
                    std::pin::Pin::new(&mut this.inner).poll_write(cx, &this.pending)
                )?;
                this.pending.drain(..written);
                continue;
            }
            let Some(id) = &this.id else {
                return std::pin::Pin::new(&mut this.inner).poll_write(cx, buf);
            };
            // Taking bytes into the first line until its end.
            let Some(end) = buf.iter().position(|&b| b == b'\n') else {
                this.head.extend_from_slice(buf);
                return std::task::Poll::Ready(Ok(buf.len()));
            };
            this.head.extend_from_slice(&buf[..=end]);
            let head = std::mem::take(&mut this.head);
            if !answers(head.trim_ascii_end(), id) {
                this.pending = head;
            }
            this.id = None;
            if this.pending.is_empty() {
                return std::task::Poll::Ready(Ok(end + 1));
            }
            // The first line goes on, then what follows it in a later call.
            let written = std::task::ready!(
                std::pin::Pin::new(&mut this.inner).poll_write(cx, &this.pending)
            )?;
            this.pending.drain(..written);
            return std::task::Poll::Ready(Ok(end + 1));
        }
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        while !this.pending.is_empty() {
            let written = std::task::ready!(
                std::pin::Pin::new(&mut this.inner).poll_write(cx, &this.pending)
            )?;
            this.pending.drain(..written);
        }
        std::pin::Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::ready!(self.as_mut().poll_flush(cx))?;
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use tokio::io::AsyncReadExt;

    #[test]
    fn file_uris_become_paths() {
        assert_eq!(
            file_uri_path("file:///srv/a%20b"),
            Some(PathBuf::from("/srv/a b"))
        );
        assert_eq!(
            file_uri_path("file://localhost/x"),
            Some(PathBuf::from("/x"))
        );
        assert_eq!(file_uri_path("https://example.invalid/x"), None);
        assert_eq!(file_uri_path("file://host/x"), None);
        assert_eq!(file_uri_path("file:///bad%zz"), None);
        let answer = json!({"id": "x", "result": {"roots": [
            {"uri": "git://repo"}, {"uri": "file:///work/p"}, {"uri": "file:///other"}
        ]}});
        assert_eq!(first_root(&answer), Some(PathBuf::from("/work/p")));
    }

    #[tokio::test]
    async fn a_client_with_roots_names_the_project_and_its_lines_are_kept() {
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"roots": {"listChanged": true}},
            "clientInfo": {"name": "t", "version": "1"}
        }});
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let roots = json!({"jsonrpc": "2.0", "id": ROOTS_REQUEST_ID,
            "result": {"roots": [{"uri": "file:///work/project"}]}});
        let input = [&initialize, &initialized, &list, &roots]
            .map(|message| format!("{message}\n"))
            .concat();
        let mut client = LineReader::new(input.as_bytes(), MAX_LINE_BYTES);
        let mut out = Vec::new();
        let opening = open_session(&mut client, &mut out, true)
            .await
            .expect("opened");
        assert_eq!(opening.project, Some(PathBuf::from("/work/project")));
        assert_eq!(opening.answered, Some(json!(0)));
        let replay: Vec<Value> = opening
            .replay
            .iter()
            .map(|line| serde_json::from_slice(line).expect("JSON"))
            .collect();
        assert_eq!(replay, [initialize, initialized, list]);
        let written: Vec<Value> = String::from_utf8(out)
            .expect("UTF-8")
            .lines()
            .map(|line| serde_json::from_str(line).expect("JSON"))
            .collect();
        assert_eq!(written.len(), 2, "{written:?}");
        assert_eq!(written[0]["id"], 0);
        assert_eq!(written[0]["result"]["serverInfo"]["name"], "asynctask");
        assert_eq!(written[1]["method"], "roots/list");
    }

    /// An `initialize` that declares roots, and `notifications/initialized`.
    fn roots_opening() -> [Value; 2] {
        [
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {"roots": {"listChanged": true}},
                "clientInfo": {"name": "t", "version": "1"}
            }}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ]
    }

    /// The JSON-RPC messages written in `out`, one a line.
    fn messages(out: &[u8]) -> Vec<Value> {
        out.split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| serde_json::from_slice(line).expect("JSON"))
            .collect()
    }

    #[tokio::test]
    async fn an_opening_keeps_a_bounded_number_of_lines_then_serves() {
        // The client never lists its roots and never closes its side: without
        // the bound the opening would keep every line until the timeout.
        let (mut ours, theirs) = tokio::io::duplex(1 << 20);
        let mut input = roots_opening()
            .map(|message| format!("{message}\n"))
            .concat();
        for id in 1..=MAX_OPENING_LINES + 10 {
            input.push_str(&format!(
                "{}\n",
                json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
            ));
        }
        ours.write_all(input.as_bytes()).await.expect("written");
        let mut client = LineReader::new(BufReader::new(theirs), MAX_LINE_BYTES);
        let mut out = Vec::new();
        let opening = open_session(&mut client, &mut out, true)
            .await
            .expect("opened");
        assert_eq!(
            (opening.project, opening.replay.len()),
            (None, MAX_OPENING_LINES)
        );
        // The first unkept line is still the client's next one.
        let next = match client.next().await.expect("read") {
            Some(Line::Whole(line)) => serde_json::from_slice::<Value>(&line).expect("JSON"),
            other => panic!("not a line: {other:?}"),
        };
        assert_eq!(next["id"], MAX_OPENING_LINES - 1);
        drop(ours);
    }

    #[tokio::test]
    async fn an_opening_keeps_a_bounded_number_of_bytes_then_serves() {
        let (mut ours, theirs) = tokio::io::duplex(64 << 20);
        let mut input = roots_opening()
            .map(|message| format!("{message}\n"))
            .concat();
        let pad = "x".repeat(1 << 20);
        for id in 1..=20 {
            input.push_str(&format!(
                "{}\n",
                json!({"jsonrpc": "2.0", "id": id, "method": "ping", "params": {"pad": pad}})
            ));
        }
        ours.write_all(input.as_bytes()).await.expect("written");
        let mut client = LineReader::new(BufReader::new(theirs), MAX_LINE_BYTES);
        let mut out = Vec::new();
        let opening = open_session(&mut client, &mut out, true)
            .await
            .expect("opened");
        let kept: usize = opening.replay.iter().map(Vec::len).sum();
        // Two opening lines and fifteen pads stay under the bound; the
        // sixteenth reaches it.
        assert_eq!((opening.project, opening.replay.len()), (None, 2 + 16));
        assert!((MAX_OPENING_BYTES..MAX_OPENING_BYTES + (2 << 20)).contains(&kept));
        drop(ours);
    }

    #[tokio::test]
    async fn a_line_too_long_in_the_opening_gets_the_answer_it_gets_after() {
        let [initialize, initialized] = roots_opening();
        let too_long = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{{\"pad\":\"{}\"}}}}",
            "x".repeat(MAX_LINE_BYTES)
        );
        let roots = json!({"jsonrpc": "2.0", "id": ROOTS_REQUEST_ID,
            "result": {"roots": [{"uri": "file:///work/project"}]}});
        let input = format!("{too_long}\n{initialize}\n{initialized}\n{too_long}\n{roots}\n");
        let mut client = LineReader::new(input.as_bytes(), MAX_LINE_BYTES);
        let mut out = Vec::new();
        let opening = open_session(&mut client, &mut out, true)
            .await
            .expect("opened");
        assert_eq!(opening.project, Some(PathBuf::from("/work/project")));
        let replay: Vec<Value> = opening
            .replay
            .iter()
            .map(|line| serde_json::from_slice(line).expect("JSON"))
            .collect();
        assert_eq!(replay, [initialize, initialized]);
        let refusal = json!({"jsonrpc": "2.0", "id": 7, "error": {
            "code": -32600,
            "message": format!(
                "Invalid Request: the message is {} bytes long, more than the {MAX_LINE_BYTES} \
                 bytes a message may have",
                too_long.len()
            ),
        }});
        let written = messages(&out);
        assert_eq!(written.len(), 4, "{written:?}");
        assert_eq!(written[0], refusal, "the first line");
        assert_eq!(written[1]["id"], 0);
        assert_eq!(written[2]["method"], "roots/list");
        assert_eq!(
            written[3], refusal,
            "a line while the opening waits for roots"
        );
    }

    #[tokio::test]
    async fn a_client_without_roots_is_read_one_line_only() {
        let input =
            "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{}}\nnext\n";
        let mut client = LineReader::new(input.as_bytes(), MAX_LINE_BYTES);
        let mut out = Vec::new();
        let opening = open_session(&mut client, &mut out, true)
            .await
            .expect("opened");
        assert_eq!(
            (opening.project, opening.answered, out.len()),
            (None, None, 0)
        );
        assert_eq!(opening.replay.len(), 1);
        assert_eq!(
            client.next().await.expect("read"),
            Some(Line::Whole(b"next".to_vec()))
        );
    }

    #[tokio::test]
    async fn the_answer_already_given_is_dropped_and_the_rest_passes() {
        let (inner, mut read) = tokio::io::duplex(1024);
        let mut out = DropAnswer::new(inner, Some(json!(0)));
        out.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,")
            .await
            .expect("written");
        out.write_all(b"\"result\":{}}\n{\"id\":1}\n")
            .await
            .expect("written");
        out.shutdown().await.expect("closed");
        let mut text = String::new();
        read.read_to_string(&mut text).await.expect("read");
        assert_eq!(text, "{\"id\":1}\n");

        let (inner, mut read) = tokio::io::duplex(1024);
        let mut out = DropAnswer::new(inner, Some(json!(0)));
        out.write_all(b"{\"method\":\"x\"}\n{\"id\":0}\n")
            .await
            .expect("written");
        out.shutdown().await.expect("closed");
        let mut text = String::new();
        read.read_to_string(&mut text).await.expect("read");
        assert_eq!(
            text, "{\"method\":\"x\"}\n{\"id\":0}\n",
            "only a first line that answers"
        );
    }
}
