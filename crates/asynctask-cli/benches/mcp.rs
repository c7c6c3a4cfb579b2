//! End-to-end figures of `asynctask mcp`, the way a client meets it: the built
//! binary (bench profile) on pipes, driven with raw JSON-RPC.
//!
//! `cargo bench -p asynctask-cli --bench mcp` prints, for the per-session server
//! and for a durable session (through the workspace supervisor):
//!
//! - start + initialize: spawn, `initialize`, its answer, `initialized`;
//! - tool round trip: one `check_async_tasks` call, median and p99;
//! - 1,000 subprocess tasks: launched with `async: true` (no limit), until every
//!   result has been delivered (counted in the reminders riding on results);
//! - exit after SIGINT: the signal until the process has exited, for a server
//!   with nothing running and for one with live subagents (that ignore
//!   `SIGTERM`), which it ends first; each over fresh servers, median and
//!   worst. The signal is sent with `kill(2)` from here, and every subagent is
//!   checked gone by pid once the server has exited.
//!
//! Wall-clock time on a shared machine varies: run it on a quiet one, and read
//! the numbers as orientation (`docs/benchmarks.md` records them).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark reports what it measured"
)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const ROUND_TRIPS: usize = 2_000;
const STARTS: usize = 20;
const TASKS: usize = 1_000;
/// How many servers each exit figure is measured over.
const EXITS: usize = 20;
/// How many subagents run when a server with live subagents is signalled.
const LIVE: usize = 5;

/// A server on pipes.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Server {
    fn start(config: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_asynctask"))
            .arg("mcp")
            .arg("--config")
            .arg(config)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts");
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut server = Server {
            child,
            stdin,
            stdout,
            next: 0,
        };
        server.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            }),
        );
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .expect("the server reads");
        self.stdin.flush().expect("the server reads");
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            let read = self.stdout.read_line(&mut line).expect("the server writes");
            assert!(read > 0, "the server closed its stdout");
            let answer: Value = serde_json::from_str(&line).expect("JSON");
            if answer["id"] == id {
                return answer;
            }
        }
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    /// Sends SIGINT and returns how long the process took to exit.
    fn interrupt(mut self) -> Duration {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
        let started = Instant::now();
        kill(pid, Signal::SIGINT).expect("the server is there to signal");
        self.child.wait().expect("it exits");
        started.elapsed()
    }

    /// Closes stdin (the client went away) and waits for the exit.
    fn close(self) {
        let Server {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let _ = child.wait();
    }
}

/// How many completions the reminders of `answer` report.
fn completions(answer: &Value) -> usize {
    answer["result"]["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|block| block["text"].as_str())
                .filter(|text| text.starts_with("---\nSystem Note: Async Task Status"))
                .map(|text| text.matches("\"agent_id\"").count())
                .sum()
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn millis(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn measure(label: &str, config: &Path, extra: &[&str]) {
    // Start + initialize.
    let mut starts = Vec::with_capacity(STARTS);
    for _ in 0..STARTS {
        let started = Instant::now();
        let server = Server::start(config, extra);
        starts.push(started.elapsed());
        server.close();
    }
    starts.sort();

    // Tool round trips.
    let mut server = Server::start(config, extra);
    let mut trips = Vec::with_capacity(ROUND_TRIPS);
    for _ in 0..ROUND_TRIPS {
        let started = Instant::now();
        let answer = server.call("check_async_tasks", json!({}));
        trips.push(started.elapsed());
        assert!(answer["result"].is_object(), "{answer}");
    }
    trips.sort();

    // 1,000 subprocess tasks, launched and delivered.
    let started = Instant::now();
    let mut delivered = 0;
    for _ in 0..TASKS {
        let answer = server.call(
            "task",
            json!({"subagent_name": "echo", "goal_prompt": "x", "async": true}),
        );
        // A refused launch (a limit) would leave the loop below waiting for
        // ever for a result that never comes.
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        delivered += completions(&answer);
    }
    let launched = started.elapsed();
    while delivered < TASKS {
        let answer = server.call("wait_async_tasks", json!({"timeout_seconds": 30}));
        let arrived = completions(&answer);
        assert!(
            arrived > 0,
            "{delivered} of {TASKS} delivered, then: {answer}"
        );
        delivered += arrived;
    }
    let all_delivered = started.elapsed();
    assert_eq!(delivered, TASKS, "every result exactly once");

    server.close();

    println!("{label}");
    println!(
        "  start + initialize     median {}  p99 {}",
        millis(percentile(&starts, 0.5)),
        millis(percentile(&starts, 0.99))
    );
    println!(
        "  tool round trip        median {}  p99 {}  ({ROUND_TRIPS} calls)",
        micros(percentile(&trips, 0.5)),
        micros(percentile(&trips, 0.99))
    );
    println!(
        "  {TASKS} subprocess tasks  launched in {}  all delivered after {}",
        millis(launched),
        millis(all_delivered)
    );
}

/// Exit after SIGINT of `EXITS` fresh servers, each with `live` subagents of
/// `sleeper` running (each writes its pid to `<pids>/<task id>.pid`). With
/// `reaped`, every subagent must be gone once the server has exited (a
/// per-session server ends them first); without, they go on (a durable
/// relay's supervisor keeps them) and are left to the caller.
fn exit_times(
    config: &Path,
    extra: &[&str],
    pids: &Path,
    live: usize,
    reaped: bool,
) -> Vec<Duration> {
    let mut times = Vec::with_capacity(EXITS);
    for _ in 0..EXITS {
        let mut server = Server::start(config, extra);
        let ids: Vec<String> = (0..live)
            .map(|_| {
                let answer = server.call(
                    "task",
                    json!({"subagent_name": "sleeper", "goal_prompt": "x", "async": true}),
                );
                let text = answer["result"]["content"][0]["text"]
                    .as_str()
                    .expect("a launch text");
                text.split("(ID: ")
                    .nth(1)
                    .and_then(|rest| rest.split(')').next())
                    .expect("the task id")
                    .to_owned()
            })
            .collect();
        let running: Vec<Pid> = ids
            .iter()
            .map(|id| wait_for_pid(&pids.join(format!("{id}.pid"))))
            .collect();
        times.push(server.interrupt());
        if reaped {
            let left: Vec<Pid> = running.into_iter().filter(|&pid| !gone(pid)).collect();
            for &pid in &left {
                let _ = kill(pid, Signal::SIGKILL);
            }
            assert!(
                left.is_empty(),
                "subagents {left:?} outlived their server (killed now)"
            );
        }
    }
    times.sort();
    times
}

/// The pid a subagent wrote to `file`, once it has.
fn wait_for_pid(file: &Path) -> Pid {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .filter(|text| text.ends_with('\n'))
            .and_then(|text| text.trim().parse().ok())
        {
            return Pid::from_raw(pid);
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether `pid` has ended (a zombie not yet reaped by its new parent has).
fn gone(pid: Pid) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

fn print_exits(label: &str, times: &[Duration]) {
    println!(
        "  exit after SIGINT, {label:<22} median {}  worst {}  ({EXITS} servers)",
        millis(percentile(times, 0.5)),
        millis(times[times.len() - 1])
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing:
    // then only check that the harness builds, without the long measurement.
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("asynctask-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let config = dir.join("subagents.toml");
    let pids = dir.join("pids");
    std::fs::create_dir_all(&pids).expect("a pid dir");
    // `sleeper` ignores SIGTERM (as `exec` keeps an ignored signal ignored):
    // only an end without grace is quick.
    let sleeper = format!(
        "trap '' TERM; echo $$ > '{}'/$ASYNCTASK_TASK_ID.pid; exec sleep 60",
        pids.display()
    );
    std::fs::write(
        &config,
        format!(
            "[subagents.echo]\ndescription = \"Prints one line\"\ncommand = [\"echo\", \"done\"]\n\
             [subagents.sleeper]\ndescription = \"Sleeps, deaf to SIGTERM\"\ncommand = [\"sh\", \"-c\", {}]\n",
            Value::from(sleeper)
        ),
    )
    .expect("the config");
    // No limit on running tasks nor on a session's launches (200 by default).
    let session = [
        "--max-async-tasks",
        "-1",
        "--max-launches-per-session",
        "-1",
    ];
    measure("asynctask mcp", &config, &session);
    print_exits(
        "nothing running",
        &exit_times(&config, &session, &pids, 0, true),
    );
    print_exits(
        &format!("{LIVE} live subagents"),
        &exit_times(&config, &session, &pids, LIVE, true),
    );
    let state: PathBuf = dir.join("state");
    let state = state.to_str().expect("UTF-8").to_owned();
    let durable = [
        "--durable",
        "--state-dir",
        &state,
        "--max-async-tasks",
        "-1",
        "--max-launches-per-session",
        "-1",
    ];
    measure(
        "asynctask mcp --durable (a supervisor already running)",
        &config,
        &durable,
    );
    print_exits(
        "nothing running",
        &exit_times(&config, &durable, &pids, 0, false),
    );
    // The relay exits; its subagents go on in the supervisor (stopped below).
    print_exits(
        &format!("{LIVE} live subagents"),
        &exit_times(&config, &durable, &pids, LIVE, false),
    );
    let stopped = Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(["supervisor", "stop", "--config"])
        .arg(&config)
        .args(["--state-dir", &state])
        .status();
    assert!(stopped.is_ok_and(|status| status.success()));
    let _ = std::fs::remove_dir_all(&dir);
}
