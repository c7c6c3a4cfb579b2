//! `ProcessRunner`: the `SubagentRunner` that runs each configured subagent as
//! a child process, the child's command line and environment, and its I/O.

use std::future::Future;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use asynctask_model::{OutputObject, TerminateReason};
use asynctask_tools::{
    ECHO_CHARS, SubagentError, SubagentInfo, SubagentRequest, SubagentRunner, truncate_chars,
};
use nix::sys::signal::Signal;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::capture::Capture;
use crate::config::{EnvName, ProcessRunnerConfig, SubagentCommand};
use crate::group::{ProcessGroup, describe_exit};

/// Variables always passed through from the host's environment, when set.
const BASE_ENV: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER"];

/// The longest value an `ASYNCTASK_*` variable carries; a longer one is left
/// out (Linux refuses to start a program with a single environment string over
/// 128 KiB). stdin always carries the whole goal.
const ENV_VALUE_MAX_BYTES: usize = 64 * 1024;

/// How long to wait for a `SIGKILL`ed child to be reaped, and for the output
/// pipes to close after the child exits (a process outside the group may hold
/// them open).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(1);

/// The read buffer for each output pipe (a Linux pipe holds 64 KiB).
const READ_CHUNK_BYTES: usize = 32 * 1024;

/// A [`SubagentRunner`] that runs a configured command per subagent name.
///
/// Each run starts the subagent's [`command`](SubagentCommand::command) directly
/// — `command[0]` with `command[1..]` as its arguments, no shell unless the
/// command is one — in its own process group. Nothing the model sends is ever
/// part of a command line: the request reaches the child on stdin and in
/// `ASYNCTASK_*` variables. stdin, stdout and stderr are pipes, never the host's
/// own (an MCP server's stdout is its protocol channel).
///
/// The environment is an allowlist: `PATH`, `HOME`, `LANG`, `LC_ALL`, `TMPDIR`
/// and `USER` when the host has them, the names in
/// [`inherit_env`](SubagentCommand::inherit_env), the values in
/// [`env`](SubagentCommand::env), and these:
///
/// | variable | value |
/// |---|---|
/// | `ASYNCTASK_GOAL` | the goal prompt (also on stdin, written as is, then closed) |
/// | `ASYNCTASK_TASK_ID` | the task's id |
/// | `ASYNCTASK_SUBAGENT` | the subagent's name |
/// | `ASYNCTASK_CONTEXT` | the context as a JSON object of name → value (when there is any) |
/// | `ASYNCTASK_BEHAVIOUR` | the behaviour prompts joined by newlines (when there are any) |
///
/// A value that is over 64 KiB or holds a NUL byte is left out of the
/// environment (stdin still carries the whole goal).
///
/// The run ends with:
/// - exit status 0: an [`OutputObject`] with `terminate_reason` `GOAL`, no
///   emitted variables, and `final_message` the child's stdout with trailing
///   whitespace removed — `None` when that leaves nothing. stdout over
///   [`output_limit`](Self::output_limit) keeps its head and tail around a line
///   `[... N bytes omitted ...]`; it is decoded as lossy UTF-8, cut on character
///   boundaries;
/// - another status or a signal: a [`SubagentError`] like
///   `subagent 'tester' exited with status 3: <end of stderr>` or
///   `subagent 'tester' was killed by signal 9 (SIGKILL)`;
/// - a cancel: the group is ended (below), then
///   `subagent 'tester' was cancelled`;
/// - an unknown name: `unknown subagent 'foo'; configured subagents: researcher,
///   tester`; a program that cannot be started: the program and the OS error.
///
/// When the child exits, anything it left running in its process group is
/// killed: a subagent's processes never outlive its task.
///
/// Its [catalog](SubagentRunner::catalog) lists the configured subagents,
/// sorted by name, with their descriptions (empty when they have none): the
/// `task` tool offers the model exactly those.
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
/// use asynctask_tools::{SubagentRequest, SubagentRunner};
/// use tokio_util::sync::CancellationToken;
///
/// let config = ProcessRunnerConfig::from_toml_str(
///     "[subagents.echo]\ncommand = [\"echo\", \"hello from a subagent\"]\n",
///     Path::new("."),
/// ).unwrap();
/// let runner = ProcessRunner::new(config);
/// assert_eq!(runner.subagent_names(), ["echo"]);
/// let catalog = runner.catalog().unwrap();
/// assert_eq!((catalog[0].name.as_str(), catalog[0].description.as_str()), ("echo", ""));
///
/// let request = SubagentRequest::new("task-1", "echo", "say hello");
/// tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
///     let output = runner.run(request, CancellationToken::new()).await.unwrap();
///     assert_eq!(output.final_message.as_deref(), Some("hello from a subagent"));
/// });
/// ```
///
/// # Runtime
///
/// [`run`](SubagentRunner::run) needs a tokio runtime with its I/O, time and
/// signal drivers on (`enable_all()`), as `tokio::process` does.
///
/// # Cancel safety
///
/// Cancelling the token ends the process group gracefully and returns within
/// the [grace](Self::grace) and about a second more. Dropping the `run` future
/// instead sends `SIGKILL` to the group at once; the child is reaped in the
/// background by tokio.
#[derive(Debug, Clone)]
pub struct ProcessRunner {
    config: Arc<ProcessRunnerConfig>,
    grace: Duration,
    output_limit: usize,
}

impl ProcessRunner {
    /// How long a cancelled subagent has between `SIGTERM` and `SIGKILL`. It is
    /// well under the 5 seconds after which the `task` tool aborts a cancelled
    /// runner, so the group is ended by the runner itself, with time to spare.
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

    /// The most stdout kept, in bytes: the first half and the last half
    /// (64 KiB in all).
    pub const OUTPUT_LIMIT: usize = 64 * 1024;

    /// The most stderr kept for an error message, in bytes: its end.
    pub const STDERR_TAIL: usize = 2 * 1024;

    /// A runner for the subagents of `config`, with the
    /// [default grace](Self::DEFAULT_GRACE) and [output limit](Self::OUTPUT_LIMIT).
    #[must_use]
    pub fn new(config: ProcessRunnerConfig) -> Self {
        ProcessRunner {
            config: Arc::new(config),
            grace: Self::DEFAULT_GRACE,
            output_limit: Self::OUTPUT_LIMIT,
        }
    }

    /// Replaces the time a cancelled subagent has between `SIGTERM` and
    /// `SIGKILL`. Keep it under the `task` tool's 5-second runner grace: a run
    /// aborted before its own grace ends kills the group with `SIGKILL` at once.
    #[must_use]
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Replaces the most stdout kept, in bytes (half head, half tail).
    #[must_use]
    pub fn with_output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes;
        self
    }

    /// The time a cancelled subagent has between `SIGTERM` and `SIGKILL`.
    #[must_use]
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// The most stdout kept, in bytes.
    #[must_use]
    pub fn output_limit(&self) -> usize {
        self.output_limit
    }

    /// The configured subagent names, sorted.
    #[must_use]
    pub fn subagent_names(&self) -> Vec<String> {
        self.config
            .subagents
            .keys()
            .map(|name| name.as_str().to_owned())
            .collect()
    }

    /// The config.
    #[must_use]
    pub fn config(&self) -> &ProcessRunnerConfig {
        &self.config
    }

    fn unknown_subagent(&self, name: &str) -> SubagentError {
        // The name comes from the model: echo a bounded part of it.
        let name = truncate_chars(name, ECHO_CHARS);
        if self.config.subagents.is_empty() {
            SubagentError::new(format!(
                "unknown subagent '{name}'; no subagents are configured"
            ))
        } else {
            SubagentError::new(format!(
                "unknown subagent '{name}'; configured subagents: {}",
                self.subagent_names().join(", ")
            ))
        }
    }

    /// The child's command: program, arguments, working directory, the
    /// allowlisted environment, and pipes for all three streams.
    fn command(&self, spec: &SubagentCommand, request: &SubagentRequest) -> Command {
        let mut command = Command::new(spec.command.program());
        command.args(spec.command.args());
        if let Some(cwd) = &spec.cwd {
            command.current_dir(cwd);
        }
        command.env_clear();
        for name in BASE_ENV
            .iter()
            .copied()
            .chain(spec.inherit_env.iter().map(EnvName::as_str))
        {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command.envs(
            spec.env
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
        );
        for (name, value) in request_env(request) {
            command.env(name, value);
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        command
    }

    async fn run_child(
        &self,
        name: &str,
        spec: &SubagentCommand,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        if let Some(cwd) = &spec.cwd
            && !cwd.is_dir()
        {
            return Err(SubagentError::new(format!(
                "subagent '{name}': working directory {} is not a directory",
                cwd.display()
            )));
        }
        let program = spec.command.program();
        let mut child = self.command(spec, &request).spawn().map_err(|err| {
            SubagentError::new(format!(
                "subagent '{name}': cannot start '{program}': {err}"
            ))
            .with_source(err)
        })?;
        let mut group = ProcessGroup::of(&child).ok_or_else(|| {
            SubagentError::new(format!("subagent '{name}': its process has no id"))
        })?;
        tracing::debug!(subagent = name, program, pgid = %group.pgid(), "started subagent process");

        // Each stream has a task of its own, so a chatty child never blocks on a
        // full pipe while we wait for something else. Their captures are shared
        // so that what was read survives a reader that has to be aborted.
        let _feeder = Reader::spawn(feed(child.stdin.take(), request.goal_prompt));
        let stdout = Arc::new(Mutex::new(Capture::new(
            self.output_limit / 2,
            self.output_limit - self.output_limit / 2,
        )));
        let mut stdout_reader = Reader::spawn(drain(child.stdout.take(), Arc::clone(&stdout)));
        let stderr = Arc::new(Mutex::new(Capture::new(0, Self::STDERR_TAIL)));
        let mut stderr_reader = Reader::spawn(drain(child.stderr.take(), Arc::clone(&stderr)));

        let ended = tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            status = child.wait() => Some(status),
        };
        let Some(status) = ended else {
            self.end_cancelled(&mut child, &mut group).await;
            tracing::debug!(
                subagent = name,
                "subagent process group ended after a cancel"
            );
            return Err(SubagentError::new(format!(
                "subagent '{name}' was cancelled"
            )));
        };
        // The child is gone; whatever it left in its group goes too, which also
        // closes the pipes those processes held.
        group.kill();
        // A process outside the group (one that called `setsid`) may still hold
        // a pipe open: keep what was read by then, and stop reading.
        let _ = tokio::time::timeout(SETTLE_TIMEOUT, async {
            stdout_reader.join().await;
            stderr_reader.join().await;
        })
        .await;
        drop((stdout_reader, stderr_reader));

        let status = status.map_err(|err| {
            SubagentError::new(format!(
                "subagent '{name}': cannot wait for its process: {err}"
            ))
            .with_source(err)
        })?;
        if status.success() {
            let text = take(&stdout).into_text();
            let text = text.trim_end();
            let mut output = OutputObject::new(TerminateReason::Goal);
            output.final_message = (!text.is_empty()).then(|| text.to_owned());
            return Ok(output);
        }
        let mut message = format!("subagent '{name}' {}", describe_exit(status));
        let (cut, tail) = take(&stderr).into_tail_text();
        let tail = tail.trim();
        if !tail.is_empty() {
            message.push_str(": ");
            if cut {
                message.push_str("...");
            }
            message.push_str(tail);
        }
        Err(SubagentError::new(message))
    }

    /// Ends a cancelled child's group: `SIGTERM`, up to the grace for the child
    /// to exit (its output still drained by the readers, so it cannot block on
    /// a full pipe), then `SIGKILL` for whatever is left, and a bounded wait to
    /// reap it.
    async fn end_cancelled(&self, child: &mut Child, group: &mut ProcessGroup) {
        group.signal(Signal::SIGTERM);
        let _ = tokio::time::timeout(self.grace, child.wait()).await;
        group.kill();
        let _ = tokio::time::timeout(SETTLE_TIMEOUT, child.wait()).await;
    }
}

#[async_trait::async_trait]
impl SubagentRunner for ProcessRunner {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        let name = request.subagent_name.clone();
        let Some(spec) = self.config.subagents.get(name.as_str()) else {
            return Err(self.unknown_subagent(&name));
        };
        if cancel.is_cancelled() {
            return Err(SubagentError::new(format!(
                "subagent '{name}' was cancelled"
            )));
        }
        self.run_child(&name, spec, request, cancel).await
    }

    /// The configured subagents, sorted by name: each one's name, its
    /// description (empty when it has none), and whether it reads messages
    /// sent while it runs.
    fn catalog(&self) -> Option<Vec<SubagentInfo>> {
        Some(
            self.config
                .subagents
                .iter()
                .map(|(name, spec)| {
                    SubagentInfo::new(name.as_str(), spec.description.clone().unwrap_or_default())
                })
                .collect(),
        )
    }
}

/// The `ASYNCTASK_*` variables of a request; values too long for the
/// environment, or holding NUL, are left out.
fn request_env(request: &SubagentRequest) -> Vec<(&'static str, String)> {
    let mut vars = vec![
        ("ASYNCTASK_TASK_ID", request.task_id.clone()),
        ("ASYNCTASK_SUBAGENT", request.subagent_name.clone()),
        ("ASYNCTASK_GOAL", request.goal_prompt.clone()),
    ];
    if !request.context.is_empty() {
        let context: serde_json::Map<String, serde_json::Value> = request
            .context
            .iter()
            .map(|var| {
                (
                    var.name.clone(),
                    serde_json::Value::from(var.value.as_str()),
                )
            })
            .collect();
        vars.push((
            "ASYNCTASK_CONTEXT",
            serde_json::Value::Object(context).to_string(),
        ));
    }
    if !request.behaviour_prompts.is_empty() {
        vars.push(("ASYNCTASK_BEHAVIOUR", request.behaviour_prompts.join("\n")));
    }
    vars.retain(|(name, value)| {
        let fits = value.len() <= ENV_VALUE_MAX_BYTES && !value.contains('\0');
        if !fits {
            tracing::warn!(
                variable = name,
                bytes = value.len(),
                "left out of the subagent's environment: too long or holds NUL"
            );
        }
        fits
    });
    vars
}

/// A spawned I/O task that is aborted when dropped, so no reader or writer
/// outlives its run (a process that escaped the group may hold a pipe open
/// forever).
struct Reader(JoinHandle<()>);

impl Reader {
    fn spawn(task: impl Future<Output = ()> + Send + 'static) -> Self {
        Reader(tokio::spawn(task))
    }

    /// Waits for the task to end; a panicked or aborted task has simply
    /// stopped.
    async fn join(&mut self) {
        let _ = (&mut self.0).await;
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Takes what a reader captured (it may still hold its handle if it was
/// aborted mid-chunk; the capture is whole after every push).
fn take(capture: &Mutex<Capture>) -> Capture {
    let mut guard = capture.lock().unwrap_or_else(PoisonError::into_inner);
    std::mem::replace(&mut *guard, Capture::new(0, 0))
}

/// Writes the goal to the child's stdin and closes it. A child that exits
/// without reading it all is not an error.
async fn feed(stdin: Option<ChildStdin>, goal: String) {
    let Some(mut stdin) = stdin else { return };
    if let Err(err) = stdin.write_all(goal.as_bytes()).await
        && err.kind() != std::io::ErrorKind::BrokenPipe
    {
        tracing::debug!(%err, "cannot write the goal to the subagent's stdin");
    }
    // Dropping `stdin` closes it: the child reads end-of-file.
}

/// Reads a pipe to its end into `capture`.
async fn drain(pipe: Option<impl AsyncRead + Unpin>, capture: Arc<Mutex<Capture>>) {
    let Some(mut pipe) = pipe else { return };
    let mut chunk = vec![0_u8; READ_CHUNK_BYTES];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) => return,
            Ok(n) => capture
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(&chunk[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => {
                tracing::debug!(%err, "cannot read the subagent's output");
                return;
            }
        }
    }
}
