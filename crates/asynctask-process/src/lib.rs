//! `ProcessRunner`: subagents that are configured commands, run as child processes.
//!
//! A host that has no subagent of its own in Rust can still offer background
//! subagents: each one is a command line in a TOML file (`[subagents.<name>]`),
//! and [`ProcessRunner`] runs it as a child process whenever the model asks for
//! that name. The model chooses only *which* configured command runs and what its
//! goal is; it never writes any part of a command line.
//!
//! **Inputs.** The program is started directly (`command[0]` with `command[1..]`
//! as its arguments) — there is no shell unless the configured command is one.
//! The goal prompt is written to the child's stdin, which is then closed, and is
//! also in `ASYNCTASK_GOAL`; `ASYNCTASK_TASK_ID`, `ASYNCTASK_SUBAGENT`,
//! `ASYNCTASK_CONTEXT` (a JSON object) and `ASYNCTASK_BEHAVIOUR` carry the rest of
//! the request. The environment is an allowlist: nothing of the host's is passed
//! but `PATH`, `HOME`, `LANG`, `LC_ALL`, `TMPDIR`, `USER`, the names in
//! `inherit_env`, and the values in `env`.
//!
//! **Outputs.** stdin, stdout and stderr are pipes, never the host's own (an MCP
//! server's stdout is its protocol channel). stdout and stderr are read while the
//! child runs, so a chatty child never blocks on a full pipe, and never held in
//! memory beyond a bound: stdout keeps its first 32 KiB and its last 32 KiB
//! ([`OUTPUT_LIMIT`](ProcessRunner::OUTPUT_LIMIT)), stderr its last 2 KiB
//! ([`STDERR_TAIL`](ProcessRunner::STDERR_TAIL)). Exit status 0 completes the
//! task with stdout as its final message; anything else fails it with the status
//! and the end of stderr.
//!
//! **Ending.** Each child leads its own process group, and the group never
//! outlives the run: a cancelled run sends `SIGTERM` to the group, then `SIGKILL`
//! after a [grace period](ProcessRunner::DEFAULT_GRACE); a child that exits on
//! its own has whatever it left running in its group killed; and a run whose
//! future is dropped (the task tool aborts a runner that overstays its own grace)
//! kills the group synchronously in a drop guard.
//!
//! Two limits. A host killed with `SIGKILL` runs no code, so its subagents'
//! groups live on (reparented to init). And the group is signalled by number
//! once more after its leader is reaped, to end what the leader left behind: had
//! the number been reused by an unrelated group in that instant, the signal
//! would reach it — process ids are handed out in sequence, so this is not a
//! practical risk.
//!
//! **Where.** Every subagent works in a directory under one of the config's
//! `roots` (by default the config file's own directory), checked when the config
//! is loaded, after symlinks are resolved; a subagent without a `cwd` works in
//! the config file's directory.
//!
//! What it does not do: emit variables (`emitted_vars` is always empty), enforce
//! the task's timeout (the `task` tool does, by cancelling the run), sandbox the
//! child, or run anywhere but on Unix.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use asynctask_model::{OutputObject, TerminateReason};
use asynctask_tools::{ECHO_CHARS, SubagentError, SubagentRequest, SubagentRunner, truncate_chars};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio_util::sync::CancellationToken;

/// The subagents a [`ProcessRunner`] can run: the `[subagents.<name>]` tables of a
/// TOML file, and the `roots` their working directories must lie under.
///
/// ```toml
/// roots = ["..", "/srv/checkouts"]  # default: this file's directory; before any table
///
/// [subagents.researcher]
/// command = ["my-agent", "--mode", "research"]
/// description = "Reads the code base and answers questions about it"
/// cwd = ".."                        # relative to this file's directory
/// env = { AGENT_MODEL = "small" }
/// inherit_env = ["OPENAI_API_KEY"]
///
/// [subagents.tester]
/// command = ["sh", "-c", "cargo test 2>&1 | tail -n 50"]
/// ```
///
/// Unknown keys are errors, so a typo never silently drops a setting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessRunnerConfig {
    /// Each subagent by name. Names are not blank and have no surrounding
    /// whitespace.
    #[serde(default, deserialize_with = "subagent_table")]
    pub subagents: BTreeMap<String, SubagentCommand>,
    /// The directories subagents may work in: every subagent's working
    /// directory must lie under one of them. In the file, paths are relative to
    /// its directory, and absent or empty means the file's directory; once
    /// loaded they are absolute with symlinks resolved. Empty in a config built
    /// in code: no restriction.
    #[serde(default)]
    pub roots: Vec<PathBuf>,
}

/// How to run one subagent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubagentCommand {
    /// The program and its arguments: not empty, the program not blank, no NUL
    /// bytes. A program without a `/` is looked up in the child's `PATH`; a
    /// relative one with a `/` is relative to the child's working directory.
    /// Nothing from the model is ever put here.
    #[serde(deserialize_with = "command_line")]
    pub command: Vec<String>,
    /// What the subagent is for (shown to the model and the user).
    #[serde(default)]
    pub description: Option<String>,
    /// The working directory. [`ProcessRunnerConfig::from_toml_str`] and
    /// [`ProcessRunnerConfig::load`] make a relative path relative to the config
    /// file's directory (`~` is not expanded), fill in that directory when it is
    /// absent, and refuse one that is not under the config's
    /// [`roots`](ProcessRunnerConfig::roots). `None` (only in a config built in
    /// code): the host's own working directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Extra environment variables. They override inherited ones; the
    /// `ASYNCTASK_*` variables of the request override them.
    #[serde(default, deserialize_with = "env_table")]
    pub env: BTreeMap<String, String>,
    /// Names of variables passed through from our own environment (when set),
    /// besides the always-passed `PATH`, `HOME`, `LANG`, `LC_ALL`, `TMPDIR`,
    /// `USER`.
    #[serde(default, deserialize_with = "env_names")]
    pub inherit_env: Vec<String>,
}

/// Why a config could not be loaded. The `Display` is one line for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The file is not a valid config.
    #[error("invalid config {path}: {message}")]
    Invalid {
        /// The file (`<string>` when parsed from a string).
        path: PathBuf,
        /// What is wrong, with the TOML location (`at line 3, column 1`).
        message: String,
    },
}

impl ProcessRunnerConfig {
    /// Parses a config from TOML text; relative `cwd`s and `roots` are made
    /// relative to `base_dir` (pass the directory the text came from), which is
    /// also the default root and the default `cwd`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::path::Path;
    /// use asynctask_process::ProcessRunnerConfig;
    ///
    /// let text = r#"
    /// [subagents.tester]
    /// command = ["sh", "-c", "make test"]
    /// cwd = "project"
    /// "#;
    /// let config = ProcessRunnerConfig::from_toml_str(text, Path::new("/etc/agents")).unwrap();
    /// let tester = &config.subagents["tester"];
    /// assert_eq!(tester.command, ["sh", "-c", "make test"]);
    /// assert_eq!(tester.cwd.as_deref(), Some(Path::new("/etc/agents/project")));
    ///
    /// let typo = "[subagents.tester]\ncomand = [\"make\"]\n";
    /// let err = ProcessRunnerConfig::from_toml_str(typo, Path::new(".")).unwrap_err();
    /// assert!(err.to_string().starts_with("invalid config <string>: unknown field `comand`"));
    /// assert!(err.to_string().ends_with("at line 2, column 1"));
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] (with path `<string>`) for bad TOML, unknown
    /// keys, a missing or empty `command`, a blank subagent name, an
    /// environment variable name that is empty or holds `=`, or a working
    /// directory outside the `roots` (the message names the subagent).
    pub fn from_toml_str(text: &str, base_dir: &Path) -> Result<Self, ConfigError> {
        Self::parse(text, base_dir, Path::new("<string>"))
    }

    /// Reads and parses a config file; relative `cwd`s are relative to the
    /// file's directory.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Read`] when the file cannot be read, or
    /// [`ConfigError::Invalid`] (naming `path`) as for
    /// [`from_toml_str`](Self::from_toml_str), or when it is not UTF-8.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let bytes = std::fs::read(path).map_err(|err| ConfigError::Read {
            path: path.to_owned(),
            message: err.to_string(),
        })?;
        let text = String::from_utf8(bytes).map_err(|err| ConfigError::Invalid {
            path: path.to_owned(),
            message: format!(
                "not UTF-8 (invalid byte at offset {})",
                err.utf8_error().valid_up_to()
            ),
        })?;
        // An absolute base keeps relative `cwd`s right even if the host later
        // changes its own working directory.
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let base_dir = absolute.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base_dir, path)
    }

    fn parse(text: &str, base_dir: &Path, origin: &Path) -> Result<Self, ConfigError> {
        let mut config: Self = toml::from_str(text).map_err(|err| ConfigError::Invalid {
            path: origin.to_owned(),
            message: one_line_toml_error(&err, text),
        })?;
        let invalid = |message: String| ConfigError::Invalid {
            path: origin.to_owned(),
            message,
        };
        let roots = if config.roots.is_empty() {
            vec![base_dir.to_owned()]
        } else {
            config
                .roots
                .iter()
                .map(|root| base_dir.join(root))
                .collect()
        };
        config.roots = roots
            .iter()
            .map(|root| {
                resolve(root).map_err(|err| {
                    invalid(format!("root {} cannot be resolved: {err}", root.display()))
                })
            })
            .collect::<Result<_, _>>()?;
        for (name, command) in &mut config.subagents {
            let cwd = command.cwd.get_or_insert_with(|| base_dir.to_owned());
            if cwd.is_relative() {
                *cwd = base_dir.join(&*cwd);
            }
            let resolved = resolve(cwd).map_err(|err| {
                invalid(format!(
                    "subagent '{name}': working directory {} cannot be resolved: {err}",
                    cwd.display()
                ))
            })?;
            if !config.roots.iter().any(|root| resolved.starts_with(root)) {
                let roots: Vec<String> = config
                    .roots
                    .iter()
                    .map(|root| root.display().to_string())
                    .collect();
                return Err(invalid(format!(
                    "subagent '{name}': working directory {} is not under any of the roots ({}); \
                     add a `roots` entry that holds it",
                    resolved.display(),
                    roots.join(", ")
                )));
            }
        }
        Ok(config)
    }
}

/// `path` made absolute, with symlinks resolved as far as it exists and the rest
/// (which does not exist yet) normalized lexically, so a working directory that
/// is created later is still checked against the roots, and `..` cannot climb
/// out of them.
fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let mut resolved = PathBuf::new();
    let mut exists = true;
    for component in absolute.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => resolved.push(component),
            Component::CurDir => {}
            // After a resolved prefix this is the physical parent, as the kernel
            // would take it.
            Component::ParentDir => {
                resolved.pop();
            }
            Component::Normal(part) => {
                resolved.push(part);
                if exists {
                    match resolved.canonicalize() {
                        Ok(canonical) => resolved = canonical,
                        Err(_) => exists = false,
                    }
                }
            }
        }
    }
    Ok(resolved)
}

/// A TOML error as one line: its message, then where it is
/// (`unknown field `comand`, expected ... at line 3, column 1`).
fn one_line_toml_error(err: &toml::de::Error, text: &str) -> String {
    let message = err
        .message()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    match err.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let line_start = before.rfind('\n').map_or(0, |at| at + 1);
            let column = before[line_start..].chars().count() + 1;
            format!("{message} at line {line}, column {column}")
        }
        None => message,
    }
}

/// `[subagents]`, with each name checked where it is written (so the error
/// points at it).
fn subagent_table<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, SubagentCommand>, D::Error> {
    let named = BTreeMap::<SubagentName, SubagentCommand>::deserialize(deserializer)?;
    Ok(named.into_iter().map(|(name, cmd)| (name.0, cmd)).collect())
}

/// A subagent name: not blank, no surrounding whitespace (the model has to spell
/// it exactly).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct SubagentName(String);

impl<'de> Deserialize<'de> for SubagentName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        if name.trim().is_empty() {
            Err(D::Error::custom("a subagent name must not be blank"))
        } else if name.trim() != name {
            Err(D::Error::custom(format!(
                "subagent name {name:?} must not start or end with whitespace"
            )))
        } else {
            Ok(SubagentName(name))
        }
    }
}

/// `command`: at least the program, which is not blank; no NUL anywhere (it
/// cannot be passed to a process).
fn command_line<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let command = Vec::<String>::deserialize(deserializer)?;
    match command.first() {
        None => Err(D::Error::custom(
            "`command` must not be empty: give the program and its arguments",
        )),
        Some(program) if program.trim().is_empty() => Err(D::Error::custom(
            "the program (`command[0]`) must not be blank",
        )),
        Some(_) if command.iter().any(|arg| arg.contains('\0')) => {
            Err(D::Error::custom("`command` must not contain NUL bytes"))
        }
        Some(_) => Ok(command),
    }
}

/// `env`: valid variable names, values without NUL.
fn env_table<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    let env = BTreeMap::<String, String>::deserialize(deserializer)?;
    for (name, value) in &env {
        check_env_name(name).map_err(D::Error::custom)?;
        if value.contains('\0') {
            return Err(D::Error::custom(format!(
                "environment variable {name} must not contain NUL bytes"
            )));
        }
    }
    Ok(env)
}

/// `inherit_env`: valid variable names.
fn env_names<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let names = Vec::<String>::deserialize(deserializer)?;
    for name in &names {
        check_env_name(name).map_err(D::Error::custom)?;
    }
    Ok(names)
}

fn check_env_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        Err("an environment variable name must not be empty".to_owned())
    } else if name.contains(['=', '\0']) {
        Err(format!(
            "environment variable name {name:?} must not contain `=` or NUL"
        ))
    } else {
        Ok(())
    }
}

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
    config: ProcessRunnerConfig,
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
            config,
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
        self.config.subagents.keys().cloned().collect()
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
        let mut command = Command::new(&spec.command[0]);
        command.args(&spec.command[1..]);
        if let Some(cwd) = &spec.cwd {
            command.current_dir(cwd);
        }
        command.env_clear();
        for name in BASE_ENV
            .iter()
            .copied()
            .chain(spec.inherit_env.iter().map(String::as_str))
        {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command.envs(&spec.env);
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
        let program = &spec.command[0];
        let mut child = self.command(spec, &request).spawn().map_err(|err| {
            SubagentError::new(format!(
                "subagent '{name}': cannot start '{program}': {err}"
            ))
        })?;
        let mut group = ProcessGroup::of(&child).ok_or_else(|| {
            SubagentError::new(format!("subagent '{name}': its process has no id"))
        })?;
        tracing::debug!(subagent = name, program, pgid = %group.pgid, "started subagent process");

        let mut stdout = Capture::new(
            self.output_limit / 2,
            self.output_limit - self.output_limit / 2,
        );
        let mut stderr = Capture::new(0, Self::STDERR_TAIL);
        let stdin = child.stdin.take();
        let stdout_pipe = child.stdout.take();
        let stderr_pipe = child.stderr.take();
        let ended = {
            let io = std::pin::pin!(async {
                tokio::join!(
                    feed(stdin, request.goal_prompt),
                    drain(stdout_pipe, &mut stdout),
                    drain(stderr_pipe, &mut stderr),
                );
            });
            let mut io = Io {
                future: io,
                done: false,
            };
            let ended = io
                .alongside(async {
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => None,
                        status = child.wait() => Some(status),
                    }
                })
                .await;
            match ended {
                None => {
                    self.end_cancelled(&mut child, &mut group, &mut io).await;
                    None
                }
                Some(status) => {
                    // The child is gone; whatever it left in its group goes too,
                    // which also closes the pipes those processes held.
                    group.kill();
                    if !io.done {
                        let _ = tokio::time::timeout(SETTLE_TIMEOUT, io.finish()).await;
                    }
                    Some(status)
                }
            }
        };
        let Some(status) = ended else {
            tracing::debug!(
                subagent = name,
                "subagent process group ended after a cancel"
            );
            return Err(SubagentError::new(format!(
                "subagent '{name}' was cancelled"
            )));
        };
        let status = status.map_err(|err| {
            SubagentError::new(format!(
                "subagent '{name}': cannot wait for its process: {err}"
            ))
        })?;
        if status.success() {
            let text = stdout.into_text();
            let text = text.trim_end();
            let mut output = OutputObject::new(TerminateReason::Goal);
            output.final_message = (!text.is_empty()).then(|| text.to_owned());
            return Ok(output);
        }
        let mut message = format!("subagent '{name}' {}", describe_exit(status));
        let (cut, tail) = stderr.into_tail_text();
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
    /// to exit (its output still drained, so it cannot block on a full pipe),
    /// then `SIGKILL` for whatever is left, and a bounded wait to reap it.
    async fn end_cancelled<F: Future<Output = ()>>(
        &self,
        child: &mut Child,
        group: &mut ProcessGroup,
        io: &mut Io<'_, F>,
    ) {
        group.signal(Signal::SIGTERM);
        let _ = io
            .alongside(tokio::time::timeout(self.grace, child.wait()))
            .await;
        group.kill();
        let _ = io
            .alongside(tokio::time::timeout(SETTLE_TIMEOUT, child.wait()))
            .await;
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
        let Some(spec) = self.config.subagents.get(&name) else {
            return Err(self.unknown_subagent(&name));
        };
        if cancel.is_cancelled() {
            return Err(SubagentError::new(format!(
                "subagent '{name}' was cancelled"
            )));
        }
        self.run_child(&name, spec, request, cancel).await
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

/// How a child that did not succeed ended, after `subagent 'x' `.
fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        format!("exited with status {code}")
    } else if let Some(number) = status.signal() {
        match Signal::try_from(number) {
            Ok(signal) => format!("was killed by signal {number} ({})", signal.as_str()),
            Err(_) => format!("was killed by signal {number}"),
        }
    } else {
        format!("ended with {status}")
    }
}

/// The child's process group (the child leads it: pgid = pid). Dropped while
/// armed — the run's future dropped mid-run — it sends `SIGKILL` to the group.
struct ProcessGroup {
    pgid: Pid,
    armed: bool,
}

impl ProcessGroup {
    fn of(child: &Child) -> Option<Self> {
        let pid = i32::try_from(child.id()?).ok()?;
        Some(ProcessGroup {
            pgid: Pid::from_raw(pid),
            armed: true,
        })
    }

    /// Signals every process in the group; an empty group is not an error.
    fn signal(&self, signal: Signal) {
        match killpg(self.pgid, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(err) => {
                tracing::warn!(pgid = %self.pgid, %signal, %err, "cannot signal subagent process group");
            }
        }
    }

    /// `SIGKILL`s the group; nothing is left to do on drop.
    fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
        self.armed = false;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            self.signal(Signal::SIGKILL);
        }
    }
}

/// The child's I/O (goal in, output out), driven alongside whatever the run is
/// waiting for, and only until it is done (a finished `join!` must not be polled
/// again).
struct Io<'a, F> {
    future: std::pin::Pin<&'a mut F>,
    done: bool,
}

impl<F: Future<Output = ()>> Io<'_, F> {
    /// Awaits `wait` while driving the I/O.
    async fn alongside<T>(&mut self, wait: impl Future<Output = T>) -> T {
        let mut wait = std::pin::pin!(wait);
        loop {
            tokio::select! {
                biased;
                value = &mut wait => return value,
                () = self.future.as_mut(), if !self.done => self.done = true,
            }
        }
    }

    /// Drives the I/O to its end.
    async fn finish(&mut self) {
        if !self.done {
            self.future.as_mut().await;
            self.done = true;
        }
    }
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
async fn drain(pipe: Option<impl AsyncRead + Unpin>, capture: &mut Capture) {
    let Some(mut pipe) = pipe else { return };
    let mut chunk = vec![0_u8; READ_CHUNK_BYTES];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) => return,
            Ok(n) => capture.push(&chunk[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => {
                tracing::debug!(%err, "cannot read the subagent's output");
                return;
            }
        }
    }
}

/// A byte stream kept within a bound: its first `head_limit` bytes and its last
/// `tail_limit` bytes, and how many there were in all.
struct Capture {
    head: Vec<u8>,
    head_limit: usize,
    tail: Ring,
    total: u64,
}

impl Capture {
    fn new(head_limit: usize, tail_limit: usize) -> Self {
        Capture {
            head: Vec::new(),
            head_limit,
            tail: Ring::new(tail_limit),
            total: 0,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_limit - self.head.len();
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        self.tail.push(rest);
    }

    /// How many bytes were neither in the head nor the tail.
    fn omitted(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// The text: everything, or the head and tail around a line
    /// `[... N bytes omitted ...]`, each cut on character boundaries.
    fn into_text(self) -> String {
        let omitted = self.omitted();
        let mut head = self.head;
        let tail = self.tail.into_bytes();
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
    fn into_tail_text(self) -> (bool, String) {
        let cut = self.omitted() > 0;
        let mut bytes = self.head;
        bytes.extend_from_slice(&self.tail.into_bytes());
        let skip = if cut {
            continuation_prefix_len(&bytes)
        } else {
            0
        };
        (cut, String::from_utf8_lossy(&bytes[skip..]).into_owned())
    }
}

/// The last `capacity` bytes pushed, in a fixed buffer.
struct Ring {
    bytes: Vec<u8>,
    capacity: usize,
    /// Once full: where the oldest byte is (and the next write goes).
    start: usize,
}

impl Ring {
    fn new(capacity: usize) -> Self {
        Ring {
            bytes: Vec::new(),
            capacity,
            start: 0,
        }
    }

    fn len(&self) -> usize {
        self.bytes.len()
    }

    fn push(&mut self, mut data: &[u8]) {
        if self.capacity == 0 {
            return;
        }
        if data.len() >= self.capacity {
            data = &data[data.len() - self.capacity..];
        }
        if self.bytes.len() < self.capacity {
            let n = (self.capacity - self.bytes.len()).min(data.len());
            self.bytes.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        while !data.is_empty() {
            let n = (self.capacity - self.start).min(data.len());
            self.bytes[self.start..self.start + n].copy_from_slice(&data[..n]);
            self.start = (self.start + n) % self.capacity;
            data = &data[n..];
        }
    }

    fn into_bytes(mut self) -> Vec<u8> {
        self.bytes.rotate_left(self.start);
        self.bytes
    }
}

/// How many bytes at the end of `bytes` are an incomplete UTF-8 sequence.
fn incomplete_suffix_len(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(4) {
        let byte = bytes[bytes.len() - back];
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for its lead
        }
        let needed = match byte {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if needed > back { back } else { 0 };
    }
    0
}

/// How many continuation bytes (the rest of a character cut off before them)
/// `bytes` starts with.
fn continuation_prefix_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .take_while(|&&byte| byte & 0xC0 == 0x80)
        .count()
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
    fn the_ring_wraps_byte_by_byte() {
        let bytes: Vec<&[u8]> = (b'a'..=b'z')
            .map(|b| std::slice::from_ref(Box::leak(Box::new(b))))
            .collect();
        let text = capture(0, 5, &bytes).into_text();
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
        assert_eq!(incomplete_suffix_len("aé".as_bytes()), 0);
        assert_eq!(incomplete_suffix_len(&"a€".as_bytes()[..3]), 2);
        assert_eq!(incomplete_suffix_len(&"😀".as_bytes()[..3]), 3);
        assert_eq!(incomplete_suffix_len("😀".as_bytes()), 0);
        assert_eq!(continuation_prefix_len(&"€".as_bytes()[1..]), 2);
        assert_eq!(continuation_prefix_len(b"abc"), 0);
    }

    #[test]
    fn config_errors_carry_the_location() {
        let err =
            ProcessRunnerConfig::from_toml_str("[subagents.a]\ncommand = []\n", Path::new("."))
                .expect_err("empty command");
        assert_eq!(
            err.to_string(),
            "invalid config <string>: `command` must not be empty: give the program and its arguments at line 2, column 11"
        );
    }
}
