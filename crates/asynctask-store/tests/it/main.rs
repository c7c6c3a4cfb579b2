//! Integration tests of `asynctask-store`: opening in good and bad states, the
//! journal's round trip, crashes at every journal step, the runtime on a
//! store, and the tasks clients follow as MCP Tasks.
//!
//! Tests that need a second process re-execute this very binary with
//! [`CHILD_ENV`] set, running only the [`child`] test, which then plays the
//! role the variable names (see `child.rs`) and prints what it did, one line
//! at a time, prefixed with [`LINE`].

mod child;
mod crash;
mod followed;
mod open;
mod replay;
mod runtime;

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};

use asynctask_model::{OutputObject, TerminateReason};

/// Names the role a re-executed test binary plays.
pub(crate) const CHILD_ENV: &str = "ASYNCTASK_STORE_TEST_CHILD";
/// Starts every line of a child's protocol (libtest prints its own lines too).
pub(crate) const LINE: &str = "@@ ";

/// The entry point of a child process; does nothing in a normal test run.
#[test]
fn child() {
    if let Ok(role) = std::env::var(CHILD_ENV) {
        child::run(&role);
    }
}

/// A running child process playing `role`, with its protocol lines.
pub(crate) struct ChildProcess {
    pub(crate) process: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl ChildProcess {
    /// Starts this test binary as a child playing `role`, with `env` set.
    pub(crate) fn start(role: &str, env: &[(&str, String)]) -> ChildProcess {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut process = Command::new(exe)
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, role)
            .envs(env.iter().map(|(key, value)| (*key, value.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the test binary starts again");
        let stdout = process.stdout.take().expect("a piped stdout");
        ChildProcess {
            process,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// The next protocol line (without the prefix); `None` at the end of its
    /// output (it exited or died).
    pub(crate) fn next_line(&mut self) -> Option<String> {
        for line in self.lines.by_ref() {
            let line = line.expect("the child's output is text");
            // libtest prints `test child ... ` before the test's first line.
            if let Some(at) = line.find(LINE) {
                return Some(line[at + LINE.len()..].to_owned());
            }
        }
        None
    }

    /// Kills the child (SIGKILL on Unix) and waits for it.
    pub(crate) fn kill(mut self) {
        // It may have died already; either way it is gone once waited for.
        let _ = self.process.kill();
        self.process.wait().expect("the child is reaped");
    }
}

/// The output a scripted task `id` completes with.
pub(crate) fn output_of(id: &str) -> OutputObject {
    OutputObject::new(TerminateReason::Goal)
        .with_var("id", id)
        .with_var("ünïcode", "日本語 🦀\n\"quoted\"")
        .with_final_message(format!("result of {id}"))
}

/// The error a scripted task `id` fails with.
pub(crate) fn error_of(id: &str) -> String {
    format!("error of {id}")
}
