//! The supervisor, its fronts and relays together, over real sockets.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use asynctask_mcp::DELIVERED_NOTIFICATION;
use asynctask_runtime::AsyncTaskRuntime;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::front::{ask, connect_or_start, open_session};
use crate::options::SupervisorOptions;
use crate::relay::{SessionStream, relay};
use crate::state::{StateDir, SupervisorLock};
use crate::supervisor::{Quiesced, Supervisor, SupervisorExit};

/// A private state directory under a fresh temporary one (removed on drop).
fn temp_state() -> (tempfile::TempDir, StateDir) {
    let dir = tempfile::Builder::new()
        .prefix("atd")
        .tempdir()
        .expect("a temporary directory");
    let state = StateDir::new(dir.path().join("s"));
    state.create().expect("the state directory");
    (dir, state)
}

/// A supervisor of a runtime without a runner, exiting after `idle_exit`.
fn supervisor(state: &StateDir, idle_exit: Duration) -> Supervisor {
    supervisor_of(
        Arc::new(AsyncTaskRuntime::builder().build()),
        state,
        idle_exit,
    )
}

/// A supervisor of `runtime`, exiting after `idle_exit`.
fn supervisor_of(
    runtime: Arc<AsyncTaskRuntime>,
    state: &StateDir,
    idle_exit: Duration,
) -> Supervisor {
    let lock = SupervisorLock::acquire(state)
        .expect("the lock file")
        .expect("no other supervisor");
    let options = SupervisorOptions::default().with_idle_exit(idle_exit);
    Supervisor::new(runtime, state.clone(), lock, options).expect("a supervisor")
}

/// A raw connection to the supervisor's socket, once it listens.
async fn connect_raw(state: &StateDir) -> UnixStream {
    let socket = state.socket();
    let socket = &socket;
    asynctask_test_support::eventually_some_with(
        "the supervisor listens",
        Duration::from_secs(20),
        move || async move { UnixStream::connect(socket).await.ok() },
    )
    .await
}

/// The next line `stream` reads, waiting at most 10 s.
async fn read_line_within(reader: &mut (impl AsyncBufReadExt + Unpin)) -> String {
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(10), reader.read_line(&mut line))
        .await
        .expect("a line within 10 s")
        .expect("a line");
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_yet_to_say_what_it_wants_keeps_the_supervisor() {
    let (_dir, state) = temp_state();
    let idle_exit = Duration::from_millis(100);
    let running = tokio::spawn(supervisor(&state, idle_exit).run());
    let stream = connect_raw(&state).await;
    // Silent for several idle times and ticks: the connection keeps the
    // supervisor from ending.
    tokio::time::sleep(idle_exit * 4 + Duration::from_secs(1)).await;
    assert!(
        !running.is_finished(),
        "the supervisor ended under a connection"
    );
    let (read, mut write) = stream.into_split();
    write
        .write_all(b"{\"asynctask\":\"session\",\"protocol\":2}\n")
        .await
        .expect("the preamble is written");
    let mut read = BufReader::new(read);
    let ack: Value = serde_json::from_str(&read_line_within(&mut read).await).expect("JSON");
    assert_eq!(ack["asynctask"], "session", "{ack}");
    assert!(
        ack["session"].as_str().is_some_and(|id| id.len() == 8),
        "{ack}"
    );
    drop((read, write));
    let exit = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the supervisor ends once idle")
        .expect("it did not panic")
        .expect("it ran");
    assert_eq!(exit, SupervisorExit::Idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_finds_a_new_supervisor_when_one_closes_before_acknowledging() {
    let (_dir, state) = temp_state();
    // An ending supervisor: it takes the connection and closes it unanswered.
    let ending = UnixListener::bind(state.socket()).expect("bound");
    let next = state.clone();
    let succession = tokio::spawn(async move {
        let (connection, _) = ending.accept().await.expect("the front connects");
        drop((connection, ending));
        supervisor(&next, Duration::from_millis(100)).run().await
    });
    let starts = std::sync::atomic::AtomicUsize::new(0);
    // The supervisor a front would start finds the lock held and ends.
    let start = || {
        starts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::process::Command::new("true").spawn()
    };
    let session = connect_or_start(&state, std::path::Path::new("/p"), start)
        .await
        .expect("a session with the next supervisor");
    assert!(starts.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    drop(session);
    let exit = tokio::time::timeout(Duration::from_secs(10), succession)
        .await
        .expect("the supervisor ends once idle")
        .expect("it did not panic")
        .expect("it ran");
    assert_eq!(exit, SupervisorExit::Idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_that_reaches_no_supervisor_shows_the_end_of_its_log() {
    let (_dir, state) = temp_state();
    let lines: Vec<String> = (1..=30).map(|i| format!("line {i}")).collect();
    std::fs::write(state.log_file(), lines.join("\n") + "\n").expect("a log");
    // Nothing ever listens: each supervisor started ends at once.
    let start = || std::process::Command::new("true").spawn();
    let Err(err) = connect_or_start(&state, std::path::Path::new("/p"), start).await else {
        panic!("a session without a supervisor");
    };
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "cannot reach the supervisor of {}; the end of its log, {}:\nline 11\n",
            state.path().display(),
            state.log_file().display()
        )),
        "{text}"
    );
    assert!(
        text.ends_with("line 30") && !text.contains("line 10\n"),
        "{text}"
    );
    assert!(
        std::error::Error::source(&err).is_some(),
        "the last failure is its source"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_that_fails_to_start_is_shown_with_its_own_error() {
    let (_dir, state) = temp_state();
    let starts = std::sync::atomic::AtomicUsize::new(0);
    // What a supervisor on a full disk does: says why on stderr and exits 2.
    let start = || {
        starts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::process::Command::new("sh")
            .args(["-c", "echo 'asynctask: cannot open the store: No space left on device (os error 28)' >&2; exit 2"])
            .stderr(std::process::Stdio::piped())
            .spawn()
    };
    let Err(err) = connect_or_start(&state, std::path::Path::new("/p"), start).await else {
        panic!("a session without a supervisor");
    };
    assert_eq!(
        err.to_string(),
        format!(
            "the supervisor started for {} exited (exit status: 2) before it served: asynctask: \
             cannot open the store: No space left on device (os error 28)",
            state.path().display()
        )
    );
    assert_eq!(
        starts.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "started once, not again and again"
    );
}

/// The client's stdout in the relay: at the first write it closes the
/// client's stdin (the client read its response and left) and takes the
/// bytes only at the next poll; what it takes goes to `taken`.
struct LeavesOnWrite {
    stdin: Option<tokio::io::DuplexStream>,
    taken: mpsc::UnboundedSender<Vec<u8>>,
}

impl AsyncWrite for LeavesOnWrite {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        if self.stdin.take().is_some() {
            cx.waker().wake_by_ref();
            return std::task::Poll::Pending;
        }
        let _ = self.taken.send(buf.to_vec());
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn a_response_written_as_the_client_leaves_is_confirmed() {
    let (stdin_writer, stdin) = tokio::io::duplex(1024);
    let (taken, mut written) = mpsc::unbounded_channel();
    let stdout = LeavesOnWrite {
        stdin: Some(stdin_writer),
        taken,
    };
    let (supervisor, ours) = UnixStream::pair().expect("a socket pair");
    let (read, write) = ours.into_split();
    let session = SessionStream {
        read: BufReader::new(read),
        write,
        pid: None,
    };
    let (from_relay, mut to_relay) = supervisor.into_split();
    let response = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n";
    to_relay.write_all(response).await.expect("written");
    let relayed = tokio::time::timeout(Duration::from_secs(10), async {
        let mut stdin = asynctask_mcp::LineReader::new(BufReader::new(stdin), 1 << 20);
        let mut stdout = stdout;
        let client = crate::relay::ClientSession::default();
        let pending = std::future::pending();
        relay(
            &mut stdin,
            &mut stdout,
            session,
            Vec::new(),
            None,
            &client,
            pending,
        )
        .await
    });
    relayed.await.expect("the relay ends once the client left");
    assert_eq!(written.recv().await.as_deref(), Some(&response[..]));
    let mut lines = BufReader::new(from_relay).lines();
    let mut confirmations = Vec::new();
    while let Some(line) = lines.next_line().await.expect("read") {
        confirmations.push(serde_json::from_str::<Value>(&line).expect("JSON"));
    }
    assert_eq!(
        confirmations,
        [json!({
            "jsonrpc": "2.0",
            "method": DELIVERED_NOTIFICATION,
            "params": {"written": 1},
        })]
    );
}

/// An MCP client on a supervisor's socket, line by line, as a relay would be.
struct LineSession {
    stream: SessionStream,
    /// How many lines the supervisor sent so far.
    received: u64,
}

impl LineSession {
    /// A session, acknowledged and initialized.
    async fn open(state: &StateDir) -> Self {
        // The socket's file appears before the supervisor accepts on it: a
        // connection refused meanwhile is tried again.
        let stream = asynctask_test_support::eventually_some_with(
            "a session, acknowledged",
            Duration::from_secs(20),
            || async {
                let opened = tokio::time::timeout(
                    Duration::from_secs(10),
                    open_session(state, std::path::Path::new("/p")),
                )
                .await
                .expect("acknowledged within 10 s");
                match opened {
                    Ok(stream) => Some(stream),
                    Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => None,
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
                    Err(err) => panic!("a session: {err}"),
                }
            },
        )
        .await;
        let mut session = LineSession {
            stream,
            received: 0,
        };
        let init = json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "line-session", "version": "0"},
        });
        session
            .send(json!({"id": 1, "method": "initialize", "params": init}))
            .await;
        session.response(1).await;
        session
            .send(json!({"method": "notifications/initialized"}))
            .await;
        session
    }

    async fn send(&mut self, mut message: Value) {
        message["jsonrpc"] = json!("2.0");
        let mut line = message.to_string();
        line.push('\n');
        self.stream
            .write
            .write_all(line.as_bytes())
            .await
            .expect("sent");
    }

    /// The response to request `id` (other lines are skipped).
    async fn response(&mut self, id: u64) -> Value {
        loop {
            let line = read_line_within(&mut self.stream.read).await;
            assert!(!line.is_empty(), "the supervisor closed the session");
            self.received += 1;
            let message: Value = serde_json::from_str(&line).expect("JSON");
            if message["id"] == id && message.get("method").is_none() {
                return message;
            }
        }
    }

    /// Calls `check_async_tasks` as request `id`; its response.
    async fn check(&mut self, id: u64) -> Value {
        let params = json!({"name": "check_async_tasks", "arguments": {}});
        self.send(json!({"id": id, "method": "tools/call", "params": params}))
            .await;
        self.response(id).await
    }

    /// Confirms that every line received so far was written.
    async fn confirm(&mut self) {
        let params = json!({"written": self.received});
        self.send(json!({"method": DELIVERED_NOTIFICATION, "params": params}))
            .await;
    }
}

/// A runtime holding one finished task, `t1`, whose result says `t1 done`.
fn runtime_with_a_result() -> Arc<AsyncTaskRuntime> {
    use asynctask_manager::RegisterTaskInput;
    use asynctask_model::{OutputObject, TerminateReason};
    let runtime = Arc::new(AsyncTaskRuntime::builder().build());
    let manager = runtime.manager();
    manager
        .register_task(RegisterTaskInput::new("t1", "s", "g"))
        .expect("registered");
    let output = OutputObject::new(TerminateReason::Goal).with_final_message("t1 done");
    assert!(manager.complete_task("t1", output));
    runtime
}

fn notified(runtime: &AsyncTaskRuntime) -> bool {
    runtime
        .manager()
        .task("t1")
        .is_some_and(|task| task.notified_at().is_some())
}

/// Waits until `condition` holds, failing after 10 s.
async fn until(what: &str, condition: impl FnMut() -> bool) {
    asynctask_test_support::eventually_async(what, Duration::from_secs(10), condition).await;
}

fn carries_the_result(response: &Value) -> bool {
    response.to_string().contains("t1 done")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_response_marks_its_result_delivered() {
    let (_dir, state) = temp_state();
    let runtime = runtime_with_a_result();
    let running =
        tokio::spawn(supervisor_of(Arc::clone(&runtime), &state, Duration::from_secs(1)).run());
    let mut session = LineSession::open(&state).await;
    let carried = session.check(2).await;
    assert!(carries_the_result(&carried), "{carried}");
    assert!(!notified(&runtime), "marked before the relay confirmed");
    session.confirm().await;
    until("the result marked delivered", || notified(&runtime)).await;
    let next = session.check(3).await;
    assert!(!carries_the_result(&next), "delivered twice: {next}");
    drop(session);
    let exit = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("idle within 10 s")
        .expect("no panic")
        .expect("ran");
    assert_eq!(exit, SupervisorExit::Idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ending_before_it_confirms_leaves_the_result_for_the_next_once() {
    let (_dir, state) = temp_state();
    let runtime = runtime_with_a_result();
    let running =
        tokio::spawn(supervisor_of(Arc::clone(&runtime), &state, Duration::from_secs(1)).run());
    let mut first = LineSession::open(&state).await;
    let carried = first.check(2).await;
    assert!(carries_the_result(&carried), "{carried}");
    drop(first);
    let state_of = &state;
    asynctask_test_support::eventually_with(
        "the first session's end",
        Duration::from_secs(20),
        move || async move {
            let status = ask(state_of, "status").await.expect("a status");
            status["sessions"].as_u64().expect("a count") == 0
        },
    )
    .await;
    assert!(!notified(&runtime), "marked without a confirmation");
    let mut second = LineSession::open(&state).await;
    let again = second.check(2).await;
    assert!(carries_the_result(&again), "the result was lost: {again}");
    second.confirm().await;
    until("the result marked delivered", || notified(&runtime)).await;
    let after = second.check(3).await;
    assert!(
        !carries_the_result(&after),
        "delivered a third time: {after}"
    );
    drop(second);
    let exit = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("idle within 10 s")
        .expect("no panic")
        .expect("ran");
    assert_eq!(exit, SupervisorExit::Idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ending_supervisor_serves_a_connection_queued_before_it_looked() {
    let (_dir, state) = temp_state();
    let supervisor = supervisor(&state, Duration::from_secs(1));
    let stop = CancellationToken::new();
    let mut connections = JoinSet::new();

    let listener = UnixListener::bind(state.socket()).expect("bound");
    let quiet = supervisor.quiesce(listener, &mut connections, &stop);
    assert!(matches!(quiet, Quiesced::Idle), "nothing was queued");
    assert!(!state.socket().exists(), "the name stays aside as it ends");
    std::fs::remove_file(state.socket_aside()).expect("aside");

    let listener = UnixListener::bind(state.socket()).expect("bound again");
    // Queued: connected, never accepted.
    let queued = UnixStream::connect(state.socket()).await.expect("queued");
    let Quiesced::Busy(Some(listener)) = supervisor.quiesce(listener, &mut connections, &stop)
    else {
        panic!("a queued connection must keep the supervisor");
    };
    assert!(state.socket().exists(), "the name is back");
    assert_eq!(connections.len(), 1, "the queued connection is served");
    let (read, mut write) = queued.into_split();
    write
        .write_all(b"{\"asynctask\":\"session\",\"protocol\":2}\n")
        .await
        .expect("the preamble is written");
    let mut read = BufReader::new(read);
    let ack: Value = serde_json::from_str(&read_line_within(&mut read).await).expect("JSON");
    assert_eq!(ack["asynctask"], "session", "{ack}");
    drop((read, write, listener));
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}
