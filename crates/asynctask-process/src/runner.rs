//! `ProcessRunner`: the `SubagentRunner` that runs each configured subagent as
//! a child process: its command line, its output file, and the run from start
//! to end.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use asynctask_model::{OutputObject, TerminateReason};
use asynctask_tools::{
    ECHO_CHARS, SubagentError, SubagentInfo, SubagentRequest, SubagentRunner, truncate_chars,
};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::asks;
use crate::capture::ByteTail;
use crate::config::{ProcessRunnerConfig, StdinMode, SubagentCommand};
use crate::env::{child_env, set_env};
use crate::group::{LiveSubagents, ProcessGroup, describe_exit};
use crate::output::{OutputFile, RemoveOnDrop, TempOutputDir, file_stem, remove_if_there};
use crate::stdin::{StdinFeeder, undelivered_note};
use crate::streams::{Reader, StdoutSink, drain, take};
use crate::sys;
use crate::vars::{bound_vars, missing_vars_note, read_vars, vars_note};
use crate::warm::{Launch, WarmSlot};

/// How long to wait for a `SIGKILL`ed child to be reaped, and for the output
/// pipes to close after the child exits (a process outside the group may hold
/// them open).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(1);

/// A [`SubagentRunner`] that runs a configured command per subagent name.
///
/// A run starts the subagent's [`command`](SubagentCommand::command) directly
/// (no shell unless the command is one) in its own process group, with an
/// allowlisted environment. The request reaches the child on stdin and in
/// `ASYNCTASK_*` variables, never on its command line; stdin, stdout and
/// stderr are pipes, never the host's own. stdout streams into `<task id>.out`
/// in the [output directory](Self::output_dir), whole up to a [cap](ProcessRunnerConfig::output_cap),
/// and into the request's [`progress`](SubagentRequest::progress) while it runs.
///
/// Exit status 0 gives an [`OutputObject`] (`GOAL`; the variables the subagent
/// wrote to `$ASYNCTASK_VARS_FILE`; stdout as the final message, its head and
/// tail within the [inline budget](Self::inline_budget) around a line naming
/// the file); anything else a [`SubagentError`] that says what happened. No
/// process of a subagent outlives its task: its group is ended on cancel
/// (`SIGTERM`, then `SIGKILL` after the [grace](Self::grace)), when the
/// command exits, and when the run is dropped; [`with_reaper`](Self::with_reaper)
/// also ends descendants that left the group, and those of a killed host.
/// The [catalog](SubagentRunner::catalog) lists the configured subagents.
/// `docs/guide.md` (section 5) describes all of it from the subagent's side.
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
/// use asynctask_tools::{SubagentRequest, SubagentRunner};
/// use tokio_util::sync::CancellationToken;
///
/// let toml = "[subagents.echo]\ncommand = [\"echo\", \"hello from a subagent\"]\n";
/// let runner = ProcessRunner::new(ProcessRunnerConfig::from_toml_str(toml, Path::new("."))?);
/// assert_eq!(runner.catalog().unwrap()[0].name, "echo");
///
/// let request = SubagentRequest::new("task-1", "echo", "say hello");
/// let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// let output = tokio.block_on(runner.run(request, CancellationToken::new()))?;
/// assert_eq!(output.final_message.as_deref(), Some("hello from a subagent"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
    /// The reaper started ahead of time for the next run.
    warm: WarmSlot,
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
    /// reaper's one-line reason. Starting the reaper is most of a subagent's
    /// start, so the runner keeps one started ahead of time (`--warm`; see
    /// [`warm_up`](Self::warm_up)) and hands it the next command on stdin.
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
            warm: WarmSlot::default(),
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

    /// Starts the reaper for the next run now, if this runner has a reaper and
    /// none is waiting yet, so that even the first run does not wait for it.
    /// Each run through the reaper hands its command to the one waiting (when
    /// there is one) and starts the next; an unused one ends with the runner.
    /// Call it from a runtime's own threads (outside a runtime it does
    /// nothing): a reaper's parent-death signal follows the thread that
    /// started it, so one started from a thread that ends early
    /// (`spawn_blocking`, a short-lived thread) would end the command it runs.
    ///
    /// ```
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// ProcessRunner::new(ProcessRunnerConfig::new()).warm_up(); // no reaper: nothing to do
    /// ```
    pub fn warm_up(&self) {
        if let Some(reaper) = &self.reaper {
            reaper.warm.fill(&reaper.program, &reaper.leading_args);
        }
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

    /// Removes every output file in the [output directory](Self::with_output_dir)
    /// that none of `task_ids` owns (`<stem>.out` and `<stem>.vars.json`), and
    /// returns how many it removed. Other files are never touched. A host whose
    /// tasks outlive it calls this at start with the tasks it restored, so that
    /// files of tasks no store names (an earlier process's window of
    /// finished tasks, say) do not pile up across restarts.
    ///
    /// ```
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// let dir = std::env::temp_dir().join(format!("asynctask-doc-keep-{}", std::process::id()));
    /// let runner = ProcessRunner::new(ProcessRunnerConfig::new()).with_output_dir(dir.clone());
    /// std::fs::create_dir_all(&dir)?;
    /// for name in ["kept.out", "gone.out", "gone.vars.json", "notes.txt"] {
    ///     std::fs::write(dir.join(name), "x")?;
    /// }
    /// assert_eq!(runner.keep_outputs_of(["kept"])?, 2);
    /// let mut left: Vec<_> = std::fs::read_dir(&dir)?.map(|e| e.unwrap().file_name()).collect();
    /// left.sort();
    /// assert_eq!(left, ["kept.out", "notes.txt"]);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The directory cannot be read (one that does not exist holds nothing: `Ok(0)`).
    pub fn keep_outputs_of<'a>(
        &self,
        task_ids: impl IntoIterator<Item = &'a str>,
    ) -> std::io::Result<usize> {
        let dir = match &self.output_dir {
            Some(dir) => dir.clone(),
            None => match self.shared.temp_dir.existing() {
                Some(dir) => dir,
                None => return Ok(0),
            },
        };
        let owned: std::collections::HashSet<String> =
            task_ids.into_iter().map(file_stem).collect();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(err) => return Err(err),
        };
        let mut removed = 0;
        for entry in entries {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            let stem = name
                .strip_suffix(".out")
                .or_else(|| name.strip_suffix(".vars.json"));
            if let Some(stem) = stem
                && !owned.contains(stem)
            {
                match std::fs::remove_file(dir.join(name)) {
                    Ok(()) => removed += 1,
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                    Err(err) => return Err(err),
                }
            }
        }
        Ok(removed)
    }

    /// The same runner (its output directory, reaper, grace and live
    /// subagents: [`terminate_all`](Self::terminate_all) on either reaches
    /// both) with another config, for the runs started from now on: runs
    /// already started keep theirs. The inline budget becomes the new
    /// config's, as with [`new`](Self::new).
    ///
    /// ```
    /// # use std::path::Path;
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// let old = ProcessRunner::new(ProcessRunnerConfig::new());
    /// let config = ProcessRunnerConfig::from_toml_str("[subagents.b]\ncommand = [\"true\"]\n", Path::new("/"))?;
    /// let new = old.with_config(config);
    /// assert_eq!(new.subagent_names(), ["b"]);
    /// assert!(old.subagent_names().is_empty());
    /// # Ok::<(), asynctask_process::ConfigError>(())
    /// ```
    #[must_use]
    pub fn with_config(&self, config: ProcessRunnerConfig) -> Self {
        let mut runner = self.clone();
        runner.inline_budget = config.inline_budget.unwrap_or(Self::DEFAULT_INLINE_BUDGET);
        runner.config = Arc::new(config);
        runner
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
    fn command(&self, spec: &SubagentCommand, env: &[(OsString, OsString)]) -> Command {
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
        set_env(&mut command, env);
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

    /// Starts the child: through the warm reaper when there is one (and then
    /// the next one), else as [`command`](Self::command) says.
    async fn spawn(
        &self,
        spec: &SubagentCommand,
        env: Vec<(OsString, OsString)>,
    ) -> std::io::Result<Child> {
        let Some(reaper) = &self.reaper else {
            return self.command(spec, &env).spawn();
        };
        let launch = Launch {
            grace: self.grace,
            cwd: spec.cwd.clone(),
            program: spec.command.program().into(),
            args: spec.command.args().iter().map(Into::into).collect(),
            env,
        };
        let child = match reaper.warm.launch(&launch).await {
            Some(child) => child,
            None => self.command(spec, &launch.env).spawn()?,
        };
        reaper.warm.fill(&reaper.program, &reaper.leading_args);
        Ok(child)
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
        let file = crate::output::create_private(&path).map_err(|err| {
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
        // A `jsonl` subagent may ask questions: through a FIFO beside its
        // output, answered on its stdin.
        let asks = (spec.stdin == StdinMode::Jsonl && request.questions.can_ask())
            .then(|| output.path.with_extension("questions"))
            .and_then(|fifo| match asks::make_fifo(&fifo) {
                Ok(()) => Some(fifo),
                Err(err) => {
                    tracing::warn!(subagent = name, fifo = %fifo.display(), %err, "cannot make the questions FIFO; the subagent cannot ask");
                    None
                }
            });
        let mut env = child_env(spec, &request, &output.vars);
        if let Some(fifo) = &asks {
            env.retain(|(name, _)| name != asks::QUESTIONS_ENV);
            env.push((asks::QUESTIONS_ENV.into(), fifo.into()));
        }
        let spawned = self.spawn(spec, env).await;
        if spawned.is_err()
            && let Some(fifo) = &asks
        {
            remove_if_there(fifo);
        }
        let mut child = spawned.map_err(|err| {
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
        let (answers, answered) = tokio::sync::mpsc::unbounded_channel();
        let _asks = asks.as_ref().map(|fifo| {
            Reader::spawn(asks::read_questions(
                fifo.clone(),
                request.questions.clone(),
                answers,
            ))
        });
        let _fifo = asks.map(RemoveOnDrop);
        let feeder = StdinFeeder::start(
            spec.stdin,
            child.stdin.take(),
            request.goal_prompt.clone(),
            request.inbox.clone(),
            answered,
        );
        let stdout = Arc::new(Mutex::new(StdoutSink::new(
            output.file,
            self.config.output_cap(spec),
            self.inline_budget,
            request.progress.clone(),
        )));
        let mut stdout_reader =
            Reader::spawn(drain(child.stdout.take(), Arc::clone(&stdout), None));
        let stderr = Arc::new(Mutex::new(ByteTail::new(Self::STDERR_TAIL)));
        let mut stderr_reader =
            Reader::spawn(drain(child.stderr.take(), Arc::clone(&stderr), None));

        let ended = tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            status = child.wait() => Some(status),
        };
        // The task is ending: what was sent but never written is reported with
        // the result.
        let undelivered = feeder.stop();
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
            let mut stdout = take(&stdout);
            stdout.end();
            let pointer = stdout.pointer(&output.path);
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

        let mut stdout = take(&stdout);
        let usage_note = stdout.end();
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
            let missing = missing_vars_note(&request, &emitted_vars);
            let bounded = bound_vars(emitted_vars, self.inline_budget);
            let vars_note = vars_note(&bounded, total, &output.vars);
            // The file stays only when the result does not hold all it says.
            if vars_note.is_none() {
                remove_if_there(&output.vars);
            }
            let (text, pointer) = stdout.finish(&output.path);
            let mut text = format!("{}{note}", text.trim_end());
            for line in missing
                .into_iter()
                .chain(vars_note)
                .chain(usage_note)
                .chain(pointer)
            {
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
        if let Some(usage_note) = usage_note {
            message.push_str("\n\n");
            message.push_str(&usage_note);
        }
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
    /// Runs the subagent `request` names, to the end.
    ///
    /// It needs a tokio runtime with its I/O, time and signal drivers on
    /// (`enable_all()`), as `tokio::process` does. Call it from async
    /// context, never from a `spawn_blocking` closure: Linux sends the
    /// parent-death signal when the *thread* that started the child ends, and
    /// the blocking pool ends idle threads after a few seconds.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the token ends the subagent gracefully and returns within
    /// the [grace](ProcessRunner::grace) and about two seconds more. Dropping
    /// the future ends it at once: `SIGKILL` to the group, or through the
    /// reaper its "kill everything now"; tokio reaps the child in the
    /// background.
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
