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
//! - exit after SIGINT: the signal until the process has exited.
//!
//! Wall-clock time on a shared machine varies: run it on a quiet one, and read
//! the numbers as orientation (`docs/benchmarks.md` records them).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const ROUND_TRIPS: usize = 2_000;
const STARTS: usize = 20;
const TASKS: usize = 1_000;

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
        let pid = self.child.id().to_string();
        let started = Instant::now();
        let sent = Command::new("kill").args(["-INT", &pid]).status();
        assert!(sent.is_ok_and(|status| status.success()));
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
        delivered += completions(&answer);
    }
    let launched = started.elapsed();
    while delivered < TASKS {
        let answer = server.call("wait_async_tasks", json!({"timeout_seconds": 30}));
        delivered += completions(&answer);
    }
    let all_delivered = started.elapsed();
    assert_eq!(delivered, TASKS, "every result exactly once");

    // Exit after SIGINT, with nothing running.
    let exit = server.interrupt();

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
    println!("  exit after SIGINT      {}", millis(exit));
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
    std::fs::write(
        &config,
        "[subagents.echo]\ndescription = \"Prints one line\"\ncommand = [\"echo\", \"done\"]\n",
    )
    .expect("the config");
    measure("asynctask mcp", &config, &["--max-async-tasks", "-1"]);
    let state: PathBuf = dir.join("state");
    let state = state.to_str().expect("UTF-8").to_owned();
    measure(
        "asynctask mcp --durable (a supervisor already running)",
        &config,
        &[
            "--durable",
            "--state-dir",
            &state,
            "--max-async-tasks",
            "-1",
        ],
    );
    let stopped = Command::new(env!("CARGO_BIN_EXE_asynctask"))
        .args(["supervisor", "stop", "--config"])
        .arg(&config)
        .args(["--state-dir", &state])
        .status();
    assert!(stopped.is_ok_and(|status| status.success()));
    let _ = std::fs::remove_dir_all(&dir);
}
