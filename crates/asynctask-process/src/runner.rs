//! `ProcessRunner`: the `SubagentRunner` that runs each configured subagent as
//! a child process, the child's command line and environment, and its I/O.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use asynctask_manager::{Inbox, TaskProgress};
use asynctask_model::{OutputObject, TerminateReason};
use asynctask_tools::{
    ECHO_CHARS, SubagentError, SubagentInfo, SubagentRequest, SubagentRunner, truncate_chars,
    whole_output_line,
};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::capture::{ByteTail, InlineText, json_cost, json_len};
use crate::config::{EnvName, ProcessRunnerConfig, StdinMode, SubagentCommand};
use crate::group::{LiveSubagents, ProcessGroup, describe_exit};
use crate::output::{TempOutputDir, file_stem};
use crate::sys;

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

/// The largest variables file a subagent may write.
const VARS_FILE_MAX_BYTES: u64 = 1024 * 1024;

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
/// | `ASYNCTASK_GOAL` | the goal prompt (also on stdin: see [`StdinMode`](crate::StdinMode)) |
/// | `ASYNCTASK_TASK_ID` | the task's id |
/// | `ASYNCTASK_SUBAGENT` | the subagent's name |
/// | `ASYNCTASK_CONTEXT` | the context as a JSON object of name → value (when there is any) |
/// | `ASYNCTASK_BEHAVIOUR` | the behaviour prompts joined by newlines (when there are any) |
/// | `ASYNCTASK_OUTPUT_SPEC` | the variables the model asked for, a JSON array of `{"name", "description"}` (when it asked for any) |
/// | `ASYNCTASK_TOOLS` | the tools the model allowed, a JSON array of strings (when it gave a whitelist) |
/// | `ASYNCTASK_VARS_FILE` | an absolute path (`<task id>.vars.json` in the output directory, not created) where the subagent may write its variables |
///
/// A value that is over 64 KiB or holds a NUL byte is left out of the
/// environment (stdin still carries the whole goal).
///
/// A subagent emits variables by writing a JSON object of strings to
/// `$ASYNCTASK_VARS_FILE` before it exits, for instance:
///
/// ```sh
/// echo "working on: $ASYNCTASK_GOAL" >&2
/// printf '{"answer":"42"}' > "$ASYNCTASK_VARS_FILE"
/// ```
///
/// After a successful exit the object becomes the output's `emitted_vars`; no
/// file means no variables. A file that is not a JSON object of strings, is
/// over 1 MiB, or is no regular file (a FIFO, a directory, a symbolic link:
/// it is never followed nor waited on) fails the task: `subagent 'tester'
/// wrote a bad variables file /tmp/…/3f2a….vars.json: the value of "count"
/// is not a string`. That file is kept, so the model can look at it.
///
/// The variables are bounded like stdout: their names and values together
/// cost at most the [inline budget](Self::inline_budget) once JSON-escaped.
/// Over it, variables are taken in name order while each still has room for
/// its name and 100 characters of its value (the others are dropped), and the
/// kept values are cut to a common length that fits, each cut marked
/// `... [N more characters cut]`. The final message then ends with a line
/// that says so and names the variables file, which is kept: `[12 of 9000
/// emitted variables were dropped to fit the inline budget; all of them are
/// in /tmp/…/3f2a….vars.json]`. A file whose variables all fit is removed
/// once read.
///
/// The run ends with:
/// - exit status 0: an [`OutputObject`] with `terminate_reason` `GOAL`, the
///   variables the subagent wrote (above), and `final_message` the child's
///   stdout (lossy UTF-8) with trailing whitespace removed — `None` when
///   that leaves nothing.
///   stdout longer than the [inline budget](Self::inline_budget) keeps its
///   head and its tail, half the budget each, around one line that says how
///   much was left out and where the whole output is: `[... 45210 characters
///   omitted; the whole output (123456 bytes) is in
///   /tmp/asynctask-123-ab12cd34/3f2a….out ...]`. The budget counts each
///   character at what it costs once written in a JSON string, as the model
///   reads the result (`\n`, `"` and `\` cost 2, other control characters
///   6), so the head and the tail together stay within the budget however
///   they are escaped; the marker line comes on top. A message that was cut
///   also ends with `[whole output: /tmp/…/3f2a….out (123456 bytes)]`, so a
///   client that cuts the middle out of a long tool result still leaves the
///   model the path;
/// - another status or a signal: a [`SubagentError`] like
///   `subagent 'tester' exited with status 3: <end of stderr>` or
///   `subagent 'tester' was killed by signal 9 (SIGKILL)`;
/// - a cancel: the group is ended (below), then
///   `subagent 'tester' was cancelled`;
/// - a bad variables file (below) fails the task too;
/// - every failure after the child started, when the subagent wrote anything
///   to stdout, ends with a blank line and the line that names the file
///   holding all of it, as a cut result does: `[whole output:
///   /tmp/…/3f2a….out (123 bytes)]`;
/// - an unknown name: `unknown subagent 'foo'; configured subagents: researcher,
///   tester`; a program that cannot be started: the program and the OS error
///   (through the reaper: `exited with status 127: asynctask-reaper: cannot
///   start 'x': ...`).
///
/// Its [catalog](SubagentRunner::catalog) lists the configured subagents,
/// sorted by name, with their descriptions (empty when they have none) and
/// whether they take messages: the `task` tool offers the model exactly those.
///
/// # No orphans
///
/// A subagent's processes never outlive its task. The child leads its own
/// process group: a cancel sends it `SIGTERM`, then `SIGKILL` after the
/// [grace](Self::grace); when the child exits, whatever it left in its group
/// is killed; a dropped run kills the group at once; and
/// [`terminate_all`](Self::terminate_all) ends every live subagent of the
/// runner and its clones. On Linux the child also gets `SIGKILL` when the
/// host dies, even by `SIGKILL` (a parent-death signal).
///
/// Two holes remain without the reaper: a descendant that leaves the group
/// (`setsid`, or a double fork into a new session) escapes the group kill,
/// and the child's own descendants live on when the host is killed. With
/// [`with_reaper`](Self::with_reaper) every run goes through a small
/// supervisor process ([`reaper`](crate::reaper)) that adopts every orphaned
/// descendant, ends them all when the command exits, forwards a cancel, and
/// kills everything at once, without a grace, when the host dies (Linux; on
/// other Unixes only the process group is reliably ended).
///
/// # Messages
///
/// A subagent configured with `stdin = "jsonl"` ([`StdinMode::Jsonl`](crate::StdinMode))
/// reads the goal and then every message sent to its running task as JSON
/// lines on stdin, and its catalog entry says it accepts messages:
///
/// ```text
/// {"type":"goal","text":"find the flaky test"}
/// {"type":"message","text":"skip the benches"}
/// ```
///
/// Any other subagent gets the goal alone, then end of file, and its task's
/// inbox is closed at once, so senders are told it takes no messages.
///
/// # Live output
///
/// While the child runs, each chunk of its stdout is also reported to the
/// request's [`progress`](SubagentRequest::progress) (so a peek at the running
/// task shows its last lines), and the output file's path is set on it as soon
/// as the file exists.
///
/// # Output files
///
/// Every run streams the child's whole stdout into `<task id>.out` in the
/// [output directory](Self::with_output_dir) while it runs; memory holds only
/// what the final message needs (the budget's head and tail) and the last
/// [2 KiB](Self::STDERR_TAIL) of stderr, for a failure's message. By default
/// the output directory is a temporary one, `asynctask-<pid>-<random>` under
/// [`std::env::temp_dir`], made on the first run and removed with everything
/// in it when the last clone of the runner is dropped: a host that wants the
/// files to outlive the runner gives a directory of its own. The drop waits at
/// most 100 ms for the removal (a thread finishes it); a host killed with
/// `SIGKILL` runs no code at all. What either leaves is removed by the next
/// runner that makes its temporary directory under the same parent, once the
/// process that left it is gone (a directory is recognised by its name and
/// its owner; its process is gone when no process has the id in its name and
/// nothing holds the `flock` its runner keeps on the `.lock` file inside, so
/// a runner in another PID namespace sharing the parent keeps its directory;
/// nothing else in the parent is touched).
///
/// The files do not pile up: a variables file is removed once read, unless
/// the result names it (its variables did not all fit, or were bad), and a task's files
/// are removed when the `task` tool tells the runner that nothing will ask
/// for the task again, and long after ([`forget`](Self::forget)): once
/// [`KEPT_TASK_FILES`](asynctask_tools::KEPT_TASK_FILES) (100) later tasks
/// were done with — pruned from the manager's history, or, for a synchronous
/// run, ended — so a file a result named stays readable while the
/// conversation goes on. So the directory holds the files of that window and
/// of the history at most. A task id is used
/// in a file name as it is only when it is made of ASCII letters, digits, `-`
/// and `_` (a UUID is); any other character is replaced, so no id names a
/// file outside the directory.
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
/// Linux sends the parent-death signal when the *thread* that started the
/// child ends, not the host process. Call `run` from async context (a tokio
/// worker thread lives as long as its runtime, a `current_thread` runtime's
/// thread as long as it runs), never from a `spawn_blocking` closure: the
/// blocking pool ends idle threads after a few seconds, and the subagent
/// would be killed with its thread.
///
/// # Cancel safety
///
/// Cancelling the token ends the subagent gracefully and returns within the
/// [grace](Self::grace) and about two seconds more. Dropping the `run` future
/// instead ends it at once: `SIGKILL` to the group, or through the reaper,
/// its "kill everything now"; the child is reaped in the background by
/// tokio.
#[derive(Debug, Clone)]
pub struct ProcessRunner {
    config: Arc<ProcessRunnerConfig>,
    grace: Duration,
    inline_budget: usize,
    output_dir: Option<PathBuf>,
    reaper: Option<Arc<Reaper>>,
    shared: Arc<Shared>,
}

/// What every clone of a runner shares.
#[derive(Debug, Default)]
struct Shared {
    /// The output directory when the host gave none; removed with the last
    /// clone.
    temp_dir: TempOutputDir,
    /// Every live subagent, for [`ProcessRunner::terminate_all`].
    live: Arc<LiveSubagents>,
}

/// How to start the reaper: its program and the arguments before its own.
#[derive(Debug)]
struct Reaper {
    program: PathBuf,
    leading_args: Vec<OsString>,
}

impl ProcessRunner {
    /// How long a cancelled subagent has between `SIGTERM` and `SIGKILL`. It is
    /// well under the 5 seconds after which the `task` tool aborts a cancelled
    /// runner, so the group is ended by the runner itself, with time to spare.
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

    /// How much of stdout the final message holds by default, in characters
    /// as they cost once JSON-escaped: the first half and the last half when
    /// stdout is longer. The emitted variables have a budget of the same size.
    pub const DEFAULT_INLINE_BUDGET: usize = 10_000;

    /// The most stderr kept for an error message, in bytes: its end.
    pub const STDERR_TAIL: usize = 2 * 1024;

    /// A runner for the subagents of `config`, with the
    /// [default grace](Self::DEFAULT_GRACE), the config's
    /// [`inline_budget`](ProcessRunnerConfig::inline_budget) (else the
    /// [default](Self::DEFAULT_INLINE_BUDGET)), and a temporary output
    /// directory.
    ///
    /// ```
    /// use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    ///
    /// let runner = ProcessRunner::new(ProcessRunnerConfig::new());
    /// assert_eq!(runner.grace(), ProcessRunner::DEFAULT_GRACE);
    /// assert_eq!(runner.inline_budget(), 10_000);
    /// ```
    #[must_use]
    pub fn new(config: ProcessRunnerConfig) -> Self {
        let inline_budget = config.inline_budget.unwrap_or(Self::DEFAULT_INLINE_BUDGET);
        ProcessRunner {
            config: Arc::new(config),
            grace: Self::DEFAULT_GRACE,
            inline_budget,
            output_dir: None,
            reaper: None,
            shared: Arc::default(),
        }
    }

    /// Replaces the time a cancelled subagent has between `SIGTERM` and
    /// `SIGKILL`. Keep it under the `task` tool's 5-second runner grace: a run
    /// aborted before its own grace ends kills the group with `SIGKILL` at once.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// let runner = ProcessRunner::new(ProcessRunnerConfig::new()).with_grace(Duration::from_millis(500));
    /// assert_eq!(runner.grace(), Duration::from_millis(500));
    /// ```
    #[must_use]
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Replaces how many characters of stdout the final message holds (half
    /// head, half tail when stdout is longer).
    ///
    /// ```
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// let runner = ProcessRunner::new(ProcessRunnerConfig::new()).with_inline_budget(2_000);
    /// assert_eq!(runner.inline_budget(), 2_000);
    /// ```
    #[must_use]
    pub fn with_inline_budget(mut self, chars: usize) -> Self {
        self.inline_budget = chars;
        self
    }

    /// Puts every run's files in `dir` (made when missing, kept afterwards)
    /// instead of a temporary directory. A relative path is taken from the
    /// host's working directory now.
    ///
    /// ```
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// let dir = std::env::temp_dir().join("my-host-subagent-output");
    /// let runner = ProcessRunner::new(ProcessRunnerConfig::new()).with_output_dir(dir.clone());
    /// assert_eq!(runner.output_dir()?, dir);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[must_use]
    pub fn with_output_dir(mut self, dir: PathBuf) -> Self {
        self.output_dir = Some(std::path::absolute(&dir).unwrap_or(dir));
        self
    }

    /// Runs every subagent through the reaper: `program` with `leading_args`,
    /// then the reaper's own arguments (`--parent <our pid> --grace-ms <grace>
    /// -- <command>`). `program` is either the `asynctask-reaper` binary of
    /// this crate or the host's own binary, with a leading argument that makes
    /// it call [`reaper::main`](crate::reaper::main) (see there); give an
    /// absolute path, since the child's `PATH` is the allowlisted one.
    ///
    /// With the reaper, no process of a subagent outlives its task even when
    /// the host is killed with `SIGKILL` or a descendant calls `setsid` (on
    /// Linux; see [`reaper`](crate::reaper) for other Unixes). A command the
    /// reaper cannot start fails the task with exit status 127 and the
    /// reaper's one-line reason.
    ///
    /// ```
    /// # use std::path::PathBuf;
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// let host = std::env::current_exe()?;
    /// let runner = ProcessRunner::new(ProcessRunnerConfig::new())
    ///     .with_reaper(host, vec!["__asynctask-reaper".into()]);
    /// assert!(runner.uses_reaper());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[must_use]
    pub fn with_reaper(mut self, program: PathBuf, leading_args: Vec<OsString>) -> Self {
        self.reaper = Some(Arc::new(Reaper {
            program,
            leading_args,
        }));
        self
    }

    /// Whether runs go through the reaper ([`with_reaper`](Self::with_reaper)).
    ///
    /// ```
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// assert!(!ProcessRunner::new(ProcessRunnerConfig::new()).uses_reaper());
    /// ```
    #[must_use]
    pub fn uses_reaper(&self) -> bool {
        self.reaper.is_some()
    }

    /// Ends every live subagent of this runner and of all its clones at once,
    /// for a host that must exit now (on `SIGINT` or `SIGTERM`): each
    /// reaper is told to kill everything now (`SIGUSR1`), each subagent
    /// without one has its process group killed (`SIGKILL`). It only sends
    /// signals, so it returns at once (microseconds per subagent); the runs
    /// then end with their subagents' deaths. Returns how many subagents
    /// were live.
    ///
    /// ```
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// let runner = ProcessRunner::new(ProcessRunnerConfig::new());
    /// assert_eq!(runner.terminate_all(), 0); // nothing running
    /// ```
    pub fn terminate_all(&self) -> usize {
        self.shared.live.terminate_all()
    }

    /// Removes task `task_id`'s files from the output directory: its stdout
    /// (`<task id>.out`) and a variables file kept because the result named
    /// it (`<task id>.vars.json`: its variables did not all fit, or were bad). The `task` tool
    /// calls it (through [`SubagentRunner::forget`]) once nothing will ask for
    /// the task again and [`KEPT_TASK_FILES`](asynctask_tools::KEPT_TASK_FILES)
    /// later tasks were done with; a file that is not there is no error, and one that
    /// cannot be removed is logged. Nothing else in the directory is touched
    /// (several runners, and `asynctask run`, may share it).
    ///
    /// ```
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// let runner = ProcessRunner::new(ProcessRunnerConfig::new());
    /// let out = runner.output_dir()?.join("3f2a09c1.out");
    /// std::fs::write(&out, "the whole output")?;
    /// runner.forget("3f2a09c1");
    /// assert!(!out.exists());
    /// runner.forget("never-ran"); // nothing to remove
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn forget(&self, task_id: &str) {
        let dir = match &self.output_dir {
            Some(dir) => dir.clone(),
            // No directory was made: no run left a file.
            None => match self.shared.temp_dir.existing() {
                Some(dir) => dir,
                None => return,
            },
        };
        let stem = file_stem(task_id);
        for name in [format!("{stem}.out"), format!("{stem}.vars.json")] {
            remove_if_there(&dir.join(name));
        }
        tracing::debug!(task_id, "the task's output files were removed");
    }

    /// The file that holds (or will hold) task `task_id`'s whole stdout, in
    /// the output directory; `None` when this runner has no directory yet
    /// (its temporary one is made on the first run).
    ///
    /// ```
    /// # use std::path::PathBuf;
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// let runner = ProcessRunner::new(ProcessRunnerConfig::new())
    ///     .with_output_dir(PathBuf::from("/var/outputs"));
    /// assert_eq!(
    ///     runner.output_path("3f2a09c1"),
    ///     Some(PathBuf::from("/var/outputs/3f2a09c1.out"))
    /// );
    /// assert_eq!(ProcessRunner::new(ProcessRunnerConfig::new()).output_path("3f2a09c1"), None);
    /// ```
    #[must_use]
    pub fn output_path(&self, task_id: &str) -> Option<PathBuf> {
        let dir = match &self.output_dir {
            Some(dir) => dir.clone(),
            None => self.shared.temp_dir.existing()?,
        };
        Some(dir.join(format!("{}.out", file_stem(task_id))))
    }

    /// The time a cancelled subagent has between `SIGTERM` and `SIGKILL`.
    ///
    /// ```
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// assert_eq!(ProcessRunner::new(ProcessRunnerConfig::new()).grace(), ProcessRunner::DEFAULT_GRACE);
    /// ```
    #[must_use]
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// How many characters of stdout the final message holds.
    ///
    /// ```
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// assert_eq!(ProcessRunner::new(ProcessRunnerConfig::new()).inline_budget(), 10_000);
    /// ```
    #[must_use]
    pub fn inline_budget(&self) -> usize {
        self.inline_budget
    }

    /// The directory the runs' files go to, made now if it does not exist
    /// (the temporary one is made once per runner and its clones).
    ///
    /// ```
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// let runner = ProcessRunner::new(ProcessRunnerConfig::new());
    /// let dir = runner.output_dir()?;
    /// assert!(dir.is_dir() && dir.starts_with(std::env::temp_dir()));
    /// drop(runner); // the last clone: the temporary directory goes with it
    /// assert!(!dir.exists());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The directory could not be made.
    pub fn output_dir(&self) -> std::io::Result<PathBuf> {
        match &self.output_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                Ok(dir.clone())
            }
            None => self.shared.temp_dir.get_or_create(),
        }
    }

    /// The configured subagent names, sorted.
    ///
    /// ```
    /// # use std::path::Path;
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// let config = ProcessRunnerConfig::from_toml_str("[subagents.b]\ncommand = [\"true\"]\n[subagents.a]\ncommand = [\"true\"]\n", Path::new("/"))?;
    /// assert_eq!(ProcessRunner::new(config).subagent_names(), ["a", "b"]);
    /// # Ok::<(), asynctask_process::ConfigError>(())
    /// ```
    #[must_use]
    pub fn subagent_names(&self) -> Vec<String> {
        self.config
            .subagents
            .keys()
            .map(|name| name.as_str().to_owned())
            .collect()
    }

    /// The config.
    ///
    /// ```
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// assert!(ProcessRunner::new(ProcessRunnerConfig::new()).config().subagents.is_empty());
    /// ```
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
    fn command(
        &self,
        spec: &SubagentCommand,
        request: &SubagentRequest,
        vars_file: &Path,
    ) -> Command {
        let mut command = match &self.reaper {
            Some(reaper) => {
                let mut command = Command::new(&reaper.program);
                command
                    .args(&reaper.leading_args)
                    .arg("--parent")
                    .arg(std::process::id().to_string())
                    .arg("--grace-ms")
                    .arg(self.grace.as_millis().to_string())
                    .arg("--")
                    .arg(spec.command.program())
                    .args(spec.command.args());
                command
            }
            None => {
                let mut command = Command::new(spec.command.program());
                command.args(spec.command.args());
                // At least the direct child dies with the host; the reaper,
                // when there is one, asks for its own parent-death signal.
                sys::set_parent_death_signal(&mut command, Signal::SIGKILL, Pid::this());
                command
            }
        };
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
        command.env("ASYNCTASK_VARS_FILE", vars_file);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            // A reaper is never sent `SIGKILL` (it would leave what it
            // adopted to init): a dropped run tells it to kill everything
            // now instead (see `ProcessGroup`), and tokio reaps it.
            .kill_on_drop(self.reaper.is_none());
        command
    }

    /// Makes the output directory and this run's stdout file in it, and
    /// removes a variables file left by an earlier run of the same id (only
    /// what this run's subagent writes may become its variables).
    fn output_file(&self, name: &str, task_id: &str) -> Result<OutputFile, SubagentError> {
        let dir = self.output_dir().map_err(|err| {
            SubagentError::new(format!(
                "subagent '{name}': cannot make its output directory: {err}"
            ))
            .with_source(err)
        })?;
        let stem = file_stem(task_id);
        let vars = dir.join(format!("{stem}.vars.json"));
        match std::fs::remove_file(&vars) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                return Err(SubagentError::new(format!(
                    "subagent '{name}': cannot remove an old variables file {}: {err}",
                    vars.display()
                ))
                .with_source(err));
            }
        }
        let path = dir.join(format!("{stem}.out"));
        let file = std::fs::File::create(&path).map_err(|err| {
            SubagentError::new(format!(
                "subagent '{name}': cannot create its output file {}: {err}",
                path.display()
            ))
            .with_source(err)
        })?;
        Ok(OutputFile { path, file, vars })
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
        let output = self.output_file(name, &request.task_id)?;
        request.progress.set_output_file(&output.path);
        let program = spec.command.program();
        let mut child = self
            .command(spec, &request, &output.vars)
            .spawn()
            .map_err(|err| {
                SubagentError::new(format!(
                    "subagent '{name}': cannot start '{program}': {err}"
                ))
                .with_source(err)
            })?;
        let mut group =
            ProcessGroup::register(&child, self.reaper.is_some(), Arc::clone(&self.shared.live))
                .ok_or_else(|| {
                    SubagentError::new(format!("subagent '{name}': its process has no id"))
                })?;
        tracing::debug!(subagent = name, program, pgid = %group.pgid(), "started subagent process");

        // Each stream has a task of its own, so a chatty child never blocks on a
        // full pipe while we wait for something else. Their captures are shared
        // so that what was read survives a reader that has to be aborted.
        let stdin = child.stdin.take();
        // Messages the forwarder took from the inbox but could not write.
        let unwritten = Arc::new(Mutex::new(Vec::new()));
        let feeder = match spec.stdin {
            StdinMode::Jsonl => Reader::spawn(forward(
                stdin,
                request.goal_prompt.clone(),
                request.inbox.clone(),
                Arc::clone(&unwritten),
            )),
            // `StdinMode` may grow; every other mode takes no messages.
            _ => {
                request.inbox.close();
                Reader::spawn(feed(stdin, request.goal_prompt.clone()))
            }
        };
        // Whatever happens to the run, its inbox closes with it.
        let _close_inbox = CloseOnDrop(request.inbox.clone());
        let stdout = Arc::new(Mutex::new(StdoutSink {
            file: Some(output.file),
            bytes: 0,
            write_error: None,
            inline: InlineText::new(self.inline_budget),
        }));
        let mut stdout_reader = Reader::spawn(drain(
            child.stdout.take(),
            Arc::clone(&stdout),
            Some(request.progress.clone()),
        ));
        let stderr = Arc::new(Mutex::new(ByteTail::new(Self::STDERR_TAIL)));
        let mut stderr_reader =
            Reader::spawn(drain(child.stderr.take(), Arc::clone(&stderr), None));

        let ended = tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            status = child.wait() => Some(status),
        };
        // The task is ending: stdin closes (a hint to a child that is still
        // there) and no message is forwarded any more. Senders are told so from
        // now on; what was sent but never written is reported with the result.
        drop(feeder);
        let mut undelivered = take(&unwritten);
        undelivered.extend(request.inbox.close_and_take_unread());
        if !undelivered.is_empty() {
            tracing::debug!(
                subagent = name,
                count = undelivered.len(),
                "messages were sent after the subagent stopped reading"
            );
        }
        let note = undelivered_note(&undelivered);
        let Some(status) = ended else {
            self.end_cancelled(&mut child, &mut group).await;
            tracing::debug!(
                subagent = name,
                "subagent process group ended after a cancel"
            );
            remove_if_there(&output.vars);
            let pointer = take(&stdout).pointer(&output.path);
            return Err(SubagentError::new(format!(
                "subagent '{name}' was cancelled{note}{pointer}"
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

        let stdout = take(&stdout);
        // Every failure from here on names the file that holds its stdout.
        let with_pointer = |err: SubagentError| err.with_suffix(&stdout.pointer(&output.path));
        let status = status.map_err(|err| {
            with_pointer(
                SubagentError::new(format!(
                    "subagent '{name}': cannot wait for its process: {err}"
                ))
                .with_source(err),
            )
        })?;
        if status.success() {
            // The failure names the file: it stays for the model to look
            // at, until the task is forgotten.
            let emitted_vars = read_vars(name, &output.vars).map_err(with_pointer)?;
            let total = emitted_vars.len();
            let bounded = bound_vars(emitted_vars, self.inline_budget);
            let vars_note = vars_note(&bounded, total, &output.vars);
            // The file stays only when the result does not hold all it says.
            if vars_note.is_none() {
                remove_if_there(&output.vars);
            }
            let (text, pointer) = stdout.finish(&output.path);
            let mut text = format!("{}{note}", text.trim_end());
            for line in vars_note.into_iter().chain(pointer) {
                text.push_str("\n\n");
                text.push_str(&line);
            }
            let text = text.trim_start_matches('\n');
            let mut output = OutputObject::new(TerminateReason::Goal);
            output.final_message = (!text.is_empty()).then(|| text.to_owned());
            output.emitted_vars = bounded.vars;
            return Ok(output);
        }
        remove_if_there(&output.vars);
        let mut message = format!("subagent '{name}' {}", describe_exit(status));
        let (cut, tail) = take(&stderr).into_text();
        let tail = tail.trim();
        if !tail.is_empty() {
            message.push_str(": ");
            if cut {
                message.push_str("...");
            }
            message.push_str(tail);
        }
        message.push_str(&note);
        message.push_str(&stdout.pointer(&output.path));
        Err(SubagentError::new(message))
    }

    /// Ends a cancelled child's group: `SIGTERM`, up to the grace for the child
    /// to exit (its output still drained by the readers, so it cannot block on
    /// a full pipe), then `SIGKILL` for whatever is left, and a bounded wait to
    /// reap it.
    ///
    /// Through the reaper, `SIGTERM` goes to the reaper, which forwards it and
    /// keeps the grace itself; it is given a second more, then told to kill
    /// everything now, and only a reaper that ignored even that has its group
    /// killed.
    async fn end_cancelled(&self, child: &mut Child, group: &mut ProcessGroup) {
        group.terminate();
        if group.via_reaper() {
            let patience = self.grace + SETTLE_TIMEOUT;
            if tokio::time::timeout(patience, child.wait()).await.is_err() {
                group.kill_now();
                let _ = tokio::time::timeout(SETTLE_TIMEOUT, child.wait()).await;
            }
        } else {
            let _ = tokio::time::timeout(self.grace, child.wait()).await;
        }
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
                        .with_messages(spec.stdin == StdinMode::Jsonl)
                })
                .collect(),
        )
    }

    /// Ends every live subagent at once (see [`ProcessRunner::terminate_all`]).
    fn terminate_all(&self) {
        let ended = ProcessRunner::terminate_all(self);
        tracing::debug!(ended, "subagents ended at once");
    }

    /// Removes the task's files (see [`ProcessRunner::forget`]).
    fn forget(&self, task_id: &str) {
        ProcessRunner::forget(self, task_id);
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
    if !request.output_spec.is_empty() {
        let spec: Vec<serde_json::Value> = request
            .output_spec
            .iter()
            .map(|var| serde_json::json!({"name": var.name, "description": var.description}))
            .collect();
        vars.push((
            "ASYNCTASK_OUTPUT_SPEC",
            serde_json::Value::from(spec).to_string(),
        ));
    }
    if let Some(tools) = &request.tool_whitelist {
        vars.push((
            "ASYNCTASK_TOOLS",
            serde_json::Value::from(tools.clone()).to_string(),
        ));
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

/// The variables a subagent wrote to `path`: none when it wrote no file, else
/// a JSON object of strings no larger than [`VARS_FILE_MAX_BYTES`]. Anything
/// else fails the run with one line naming the subagent, the file and what is
/// wrong.
///
/// The subagent controls that path: it may have made it a FIFO, or a symbolic
/// link to a terminal, which a plain open would wait on forever. So the file
/// is opened without following a final symbolic link and without waiting
/// (`O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`), and read only when it is a regular
/// file; a read of a regular file never waits on another process, so it is
/// done here, on the async worker.
fn read_vars(name: &str, path: &Path) -> Result<BTreeMap<String, String>, SubagentError> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let bad = |what: String| {
        SubagentError::new(format!(
            "subagent '{name}' wrote a bad variables file {}: {what}",
            path.display()
        ))
    };
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        // `O_NOFOLLOW` on a symbolic link.
        Err(err) if err.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(
                bad("it is a symbolic link, not a regular file".to_owned()).with_source(err)
            );
        }
        Err(err) => return Err(bad(format!("cannot read it: {err}")).with_source(err)),
    };
    let metadata = file
        .metadata()
        .map_err(|err| bad(format!("cannot read it: {err}")).with_source(err))?;
    if !metadata.file_type().is_file() {
        return Err(bad("it is not a regular file".to_owned()));
    }
    if metadata.len() > VARS_FILE_MAX_BYTES {
        return Err(bad(format!(
            "it is larger than {VARS_FILE_MAX_BYTES} bytes"
        )));
    }
    let mut bytes = Vec::new();
    // One byte over the bound is enough to know the file grew too large.
    file.take(VARS_FILE_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| bad(format!("cannot read it: {err}")).with_source(err))?;
    if bytes.len() as u64 > VARS_FILE_MAX_BYTES {
        return Err(bad(format!(
            "it is larger than {VARS_FILE_MAX_BYTES} bytes"
        )));
    }
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|err| bad(format!("not JSON: {err}")).with_source(err))?;
    let serde_json::Value::Object(object) = value else {
        return Err(bad("not a JSON object".to_owned()));
    };
    object
        .into_iter()
        .map(|(key, value)| match value {
            serde_json::Value::String(value) => Ok((key, value)),
            _ => Err(bad(format!("the value of {key:?} is not a string"))),
        })
        .collect()
}

/// The least a kept variable's value may be cut to, in JSON-escaped
/// characters; when even that does not fit the budget, variables are dropped.
const VAR_VALUE_FLOOR: usize = 100;

/// The room the marker of a cut value takes (`... [1048576 more characters
/// cut]` is 33 characters).
const VAR_CUT_MARKER: usize = 40;

/// Emitted variables cut to fit a budget, and what was left out.
#[derive(Debug, Default, PartialEq, Eq)]
struct BoundedVars {
    vars: BTreeMap<String, String>,
    /// How many values were cut.
    cut: usize,
    /// How many variables were dropped.
    dropped: usize,
}

/// Fits `vars` into `budget`, counted as the JSON-escaped length of every name
/// and value ([`json_len`]), as the model reads them:
///
/// - when they all fit, they are kept as they are;
/// - else the variables are taken in name order, each reserving its name and
///   up to [`VAR_VALUE_FLOOR`] of its value; one that does not fit any more
///   is dropped;
/// - the kept values then share the budget: every value is cut to the largest
///   common length that fits (never under the floor), its cut marked with
///   `... [N more characters cut]`.
fn bound_vars(vars: BTreeMap<String, String>, budget: usize) -> BoundedVars {
    let cost = |(name, value): (&String, &String)| json_len(name) + json_len(value);
    if vars.iter().map(cost).sum::<usize>() <= budget {
        return BoundedVars {
            vars,
            ..BoundedVars::default()
        };
    }
    let total = vars.len();
    let mut reserved = 0;
    let mut kept = Vec::new();
    for (name, value) in vars {
        let (name_cost, value_cost) = (json_len(&name), json_len(&value));
        let reserve = name_cost + value_cost.min(VAR_VALUE_FLOOR);
        if reserved + reserve <= budget {
            reserved += reserve;
            kept.push((name, value, name_cost, value_cost));
        }
    }
    let dropped = total - kept.len();
    // The largest cap on each value's cost that fits, found by bisection:
    // `fits(VAR_VALUE_FLOOR)` holds by construction.
    let fits = |cap: usize| {
        kept.iter()
            .map(|(_, _, name_cost, value_cost)| name_cost + (*value_cost).min(cap))
            .sum::<usize>()
            <= budget
    };
    let (mut low, mut high) = (
        VAR_VALUE_FLOOR,
        kept.iter()
            .map(|(_, _, _, value_cost)| *value_cost)
            .max()
            .unwrap_or(0)
            .max(VAR_VALUE_FLOOR),
    );
    while low < high {
        let middle = (low + high).div_ceil(2);
        if fits(middle) {
            low = middle;
        } else {
            high = middle - 1;
        }
    }
    let mut cut = 0;
    let vars = kept
        .into_iter()
        .map(|(name, value, _, value_cost)| {
            if value_cost <= low {
                return (name, value);
            }
            cut += 1;
            (name, cut_to_json_len(&value, low - VAR_CUT_MARKER))
        })
        .collect();
    BoundedVars { vars, cut, dropped }
}

/// The head of `text` whose JSON-escaped length is at most `budget`, then
/// `... [N more characters cut]`.
fn cut_to_json_len(text: &str, budget: usize) -> String {
    let mut used = 0;
    let mut end = text.len();
    for (at, c) in text.char_indices() {
        used += json_cost(c);
        if used > budget {
            end = at;
            break;
        }
    }
    let rest = text[end..].chars().count();
    format!("{}... [{rest} more characters cut]", &text[..end])
}

/// The line a final message gets when emitted variables were cut or dropped,
/// naming the file that holds them all.
fn vars_note(bounded: &BoundedVars, total: usize, file: &Path) -> Option<String> {
    let values = |cut: usize| {
        if cut == 1 {
            "1 value was cut".to_owned()
        } else {
            format!("{cut} values were cut")
        }
    };
    let what = match (bounded.dropped, bounded.cut) {
        (0, 0) => return None,
        (dropped, 0) => format!("{dropped} of {total} emitted variables were dropped"),
        (0, cut) => format!("of the emitted variables, {}", values(cut)),
        (dropped, cut) => format!(
            "{dropped} of {total} emitted variables were dropped and of the rest, {}",
            values(cut)
        ),
    };
    Some(format!(
        "[{what} to fit the inline budget; all of them are in {}]",
        file.display()
    ))
}

/// Removes a file that may not exist; a failure is only logged.
fn remove_if_there(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "cannot remove a subagent's file");
        }
    }
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

/// A run's stdout file, just created, and where its subagent may write its
/// variables.
struct OutputFile {
    path: PathBuf,
    file: std::fs::File,
    vars: PathBuf,
}

/// Where a reader puts what it reads.
trait Sink: Send + 'static {
    fn push(&mut self, chunk: &[u8]);
}

impl Sink for ByteTail {
    fn push(&mut self, chunk: &[u8]) {
        ByteTail::push(self, chunk);
    }
}

/// Where stdout goes: the whole of it into the output file, and what the final
/// message needs into memory.
#[derive(Default)]
struct StdoutSink {
    /// `None` once a write failed.
    file: Option<std::fs::File>,
    bytes: u64,
    write_error: Option<std::io::Error>,
    inline: InlineText,
}

impl Sink for StdoutSink {
    fn push(&mut self, chunk: &[u8]) {
        // A plain blocking write: one chunk into the page cache is quick, and
        // it keeps the file exact up to the last chunk read even when the
        // reader is aborted.
        if let Some(file) = &mut self.file
            && let Err(err) = file.write_all(chunk)
        {
            tracing::warn!(%err, "cannot write the subagent's output file");
            self.write_error = Some(err);
            self.file = None;
        }
        self.bytes += chunk.len() as u64;
        self.inline.push(chunk);
    }
}

impl StdoutSink {
    /// The final message's text, and when it was cut, the line that names the
    /// file holding the whole output ([`whole_output_line`]) to end the
    /// message with; the marker in the middle names the file too, when it
    /// holds the whole output.
    fn finish(self, path: &Path) -> (String, Option<String>) {
        let (bytes, shown) = (self.bytes, path.display());
        match self.write_error {
            None => {
                let (text, cut) = self.inline.finish(|omitted| {
                    format!(
                        "[... {omitted} characters omitted; the whole output ({bytes} bytes) is in {shown} ...]"
                    )
                });
                (text, cut.then(|| whole_output_line(path, bytes)))
            }
            Some(err) => {
                let (text, _) = self.inline.finish(|omitted| {
                    format!(
                        "[... {omitted} characters omitted; the whole output ({bytes} bytes) could not be kept in {shown}: {err} ...]"
                    )
                });
                (text, None)
            }
        }
    }

    /// For a failure's message: a blank line, then the line that names the
    /// file holding the whole output ([`whole_output_line`]) when the subagent
    /// wrote anything to stdout and the file holds it all; else nothing.
    fn pointer(&self, path: &Path) -> String {
        if self.bytes == 0 || self.write_error.is_some() {
            return String::new();
        }
        format!("\n\n{}", whole_output_line(path, self.bytes))
    }
}

/// Takes what a reader captured. The reader may still be running if it was
/// aborted mid-chunk; a sink is whole after every push.
fn take<S: Default>(sink: &Mutex<S>) -> S {
    std::mem::take(&mut *sink.lock().unwrap_or_else(PoisonError::into_inner))
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

/// Writes the goal and then every message of `inbox` to the child's stdin as
/// JSON lines, in order, until the inbox ends or the task does (this task is
/// aborted). A child that stops reading ends the forwarding: the inbox is
/// closed, so later senders are told instead of queueing messages nobody
/// reads. A message is in `unwritten` from the moment it leaves the inbox
/// until its whole line is written: one whose write fails, or is cut short
/// because the task ends (this task is aborted mid-write), stays there and is
/// reported with the result.
async fn forward(
    stdin: Option<ChildStdin>,
    goal: String,
    inbox: Inbox,
    unwritten: Arc<Mutex<Vec<String>>>,
) {
    let Some(mut stdin) = stdin else {
        inbox.close();
        return;
    };
    let pending = |change: &dyn Fn(&mut Vec<String>)| {
        change(&mut unwritten.lock().unwrap_or_else(PoisonError::into_inner));
    };
    let mut line = StdinLine::Goal(goal);
    loop {
        if let Err(err) = stdin.write_all(line.to_json().as_bytes()).await {
            tracing::debug!(%err, "the subagent stopped reading its stdin: no more messages are forwarded");
            inbox.close();
            return;
        }
        if let StdinLine::Message(_) = line {
            // Written: it is the only one pending.
            pending(&|messages| messages.clear());
        }
        match inbox.recv().await {
            Some(message) => {
                pending(&|messages| messages.push(message.clone()));
                line = StdinLine::Message(message);
            }
            None => return,
        }
    }
}

/// One line of the `jsonl` stdin: `{"type":"goal"|"message","text":…}`.
#[derive(serde::Serialize)]
#[serde(tag = "type", content = "text", rename_all = "lowercase")]
enum StdinLine {
    Goal(String),
    Message(String),
}

impl StdinLine {
    /// The line, with its `\n`.
    fn to_json(&self) -> String {
        // A string-only enum always serializes.
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }
}

/// How many characters of each undelivered message a result quotes.
const UNDELIVERED_QUOTE_CHARS: usize = 200;
/// How many undelivered messages a result quotes; the rest are counted.
const UNDELIVERED_QUOTED: usize = 5;

/// The note a result carries about messages that reached its task but never
/// its subagent (sent after it stopped reading, or as it ended); empty when
/// there are none.
fn undelivered_note(messages: &[String]) -> String {
    use std::fmt::Write as _;
    if messages.is_empty() {
        return String::new();
    }
    let count = messages.len();
    let mut note = format!(
        "\n\n[{count} message{} sent to this task never reached the subagent, which had stopped reading its stdin:",
        if count == 1 { "" } else { "s" }
    );
    for message in messages.iter().take(UNDELIVERED_QUOTED) {
        let quoted: String = message.chars().take(UNDELIVERED_QUOTE_CHARS).collect();
        let cut = if quoted.len() < message.len() {
            "..."
        } else {
            ""
        };
        let _ = write!(note, "\n- {quoted:?}{cut}");
    }
    if count > UNDELIVERED_QUOTED {
        let _ = write!(note, "\n- and {} more", count - UNDELIVERED_QUOTED);
    }
    note.push(']');
    note
}

/// Closes an inbox when dropped: the run is over.
struct CloseOnDrop(Inbox);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Reads a pipe to its end into `sink`, and reports each chunk to `progress`
/// (outside the sink's lock) so a peek at the running task shows its latest
/// output.
async fn drain(
    pipe: Option<impl AsyncRead + Unpin>,
    sink: Arc<Mutex<impl Sink>>,
    progress: Option<TaskProgress>,
) {
    let Some(mut pipe) = pipe else { return };
    let mut chunk = vec![0_u8; READ_CHUNK_BYTES];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) => return,
            Ok(n) => {
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(&chunk[..n]);
                if let Some(progress) = &progress {
                    progress.record_output(&chunk[..n]);
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => {
                tracing::debug!(%err, "cannot read the subagent's output");
                return;
            }
        }
    }
}
