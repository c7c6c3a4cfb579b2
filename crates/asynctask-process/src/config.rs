//! The subagent config: its types, loading a TOML file, and checking every
//! working directory against the roots.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::values::{CommandLine, EnvName, EnvValue, SubagentName};

/// The subagents a [`ProcessRunner`](crate::ProcessRunner) can run (the
/// `[subagents.<name>]` tables of a TOML file) and the `roots` their working
/// directories must lie under.
///
/// Relative paths (`cwd`, `roots`) are relative to the **project** the config
/// is loaded for ([`load_in`](Self::load_in)), not to the file.
///
/// ```toml
/// roots = [".", "/srv/checkouts"]   # default: the project; before any table
/// inline_budget = 8000              # how much output a result holds (default 10000)
/// max_output_bytes = 16777216       # bytes of an output file at most (default 64 MiB)
/// [subagents.researcher]
/// command = ["my-agent", "--mode", "research"]
/// description = "Reads the code base and answers questions about it"
/// cwd = "docs"                      # relative to the project (default: the project)
/// env = { AGENT_MODEL = "small" }
/// inherit_env = ["OPENAI_API_KEY"]
/// stdin = "jsonl"                   # the goal, then messages, as JSON lines (default: "goal")
/// [subagents.tester]
/// command = ["sh", "-c", "cargo test 2>&1 | tail -n 50"]
/// ```
///
/// Unknown keys are errors; a layer above that keeps keys of its own in the
/// file declares them with a [`ConfigExtension`](crate::ConfigExtension).
///
/// # Examples
///
/// Built in code (no roots: working directories are not restricted):
///
/// ```
/// use asynctask_process::{CommandLine, ProcessRunnerConfig, SubagentCommand, SubagentName};
///
/// let command = CommandLine::new(["make", "test"])?;
/// let config = ProcessRunnerConfig::new()
///     .with_subagent(SubagentName::new("tester")?, SubagentCommand::new(command));
/// assert_eq!(config.subagents["tester"].command.program(), "make");
/// assert!(config.roots.is_empty());
/// # Ok::<(), asynctask_process::InvalidValue>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessRunnerConfig {
    /// Each subagent by name.
    pub subagents: BTreeMap<SubagentName, SubagentCommand>,
    /// The directories subagents may work in: every subagent's working
    /// directory must lie under one of them. In the file, paths are relative to
    /// the project, and absent or empty means the project; once loaded they
    /// are absolute with symlinks resolved. Empty in a config built in code: no
    /// restriction.
    pub roots: Vec<PathBuf>,
    /// How much of a subagent's stdout (and, apart, of its emitted variables)
    /// a result holds, in characters as they cost once JSON-escaped; `None`:
    /// [`ProcessRunner::DEFAULT_INLINE_BUDGET`](crate::ProcessRunner::DEFAULT_INLINE_BUDGET).
    /// In the file it must lie within [`MIN_INLINE_BUDGET`](Self::MIN_INLINE_BUDGET)
    /// and [`MAX_INLINE_BUDGET`](Self::MAX_INLINE_BUDGET).
    pub inline_budget: Option<usize>,
    /// The most bytes of a subagent's stdout its output file keeps, for the
    /// subagents that set no [`max_output_bytes`](SubagentCommand::max_output_bytes)
    /// of their own; `None`: [`DEFAULT_MAX_OUTPUT_BYTES`](Self::DEFAULT_MAX_OUTPUT_BYTES).
    /// In the file it must lie within [`MAX_OUTPUT_BYTES_RANGE`](Self::MAX_OUTPUT_BYTES_RANGE).
    pub max_output_bytes: Option<u64>,
}

/// How to run one subagent: the `[subagents.<name>]` table.
///
/// # Examples
///
/// ```
/// use std::path::PathBuf;
/// use asynctask_process::{CommandLine, EnvName, EnvValue, SubagentCommand};
///
/// let tester = SubagentCommand::new(CommandLine::new(["cargo", "test"])?)
///     .with_description("Runs the unit tests")
///     .with_cwd(PathBuf::from("/srv/project"))
///     .with_env(EnvName::new("RUST_LOG")?, EnvValue::new("info")?)
///     .with_inherit_env(EnvName::new("CARGO_HOME")?);
/// assert_eq!(tester.command.args(), ["test"]);
/// assert_eq!(tester.description.as_deref(), Some("Runs the unit tests"));
/// # Ok::<(), asynctask_process::InvalidValue>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SubagentCommand {
    /// The program and its arguments. Nothing from the model is ever put here.
    pub command: CommandLine,
    /// What the subagent is for (shown to the model and the user).
    #[serde(default)]
    pub description: Option<String>,
    /// The working directory. [`ProcessRunnerConfig::load_in`] (and the other
    /// loaders) make a relative path relative to the project, fill in the
    /// project when it is absent, and refuse one that is not under the config's
    /// [`roots`](ProcessRunnerConfig::roots), or that starts with `$` or `~`
    /// (no shell expands it). `None` (only in a config built in code): the
    /// host's own working directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Extra environment variables. They override inherited ones; the
    /// `ASYNCTASK_*` variables of the request override them.
    #[serde(default)]
    pub env: BTreeMap<EnvName, EnvValue>,
    /// Names of variables passed through from our own environment (when set),
    /// besides the always-passed `PATH`, `HOME`, `LANG`, `LC_ALL`, `TMPDIR`,
    /// `USER`.
    #[serde(default)]
    pub inherit_env: Vec<EnvName>,
    /// What the subagent reads on stdin: the goal alone (the default), or
    /// JSON lines that carry the goal and then every message sent to the
    /// running task.
    #[serde(default)]
    pub stdin: StdinMode,
    /// The most bytes of stdout its output file keeps: past it, the file keeps
    /// the output's head and its tail around a line that says how many bytes
    /// were cut there, and the result says so too. `None`: the config's
    /// [`max_output_bytes`](ProcessRunnerConfig::max_output_bytes). In the file
    /// it must lie within [`MAX_OUTPUT_BYTES_RANGE`](ProcessRunnerConfig::MAX_OUTPUT_BYTES_RANGE).
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
}

/// What a subagent reads on stdin (`stdin = "goal"` or `stdin = "jsonl"`).
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use asynctask_process::{ProcessRunnerConfig, StdinMode};
///
/// let config = ProcessRunnerConfig::from_toml_str(
///     "[subagents.chat]\ncommand = [\"my-agent\"]\nstdin = \"jsonl\"\n",
///     Path::new("/"),
/// )?;
/// assert_eq!(config.subagents["chat"].stdin, StdinMode::Jsonl);
/// assert_eq!(StdinMode::default(), StdinMode::Goal);
/// # Ok::<(), asynctask_process::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StdinMode {
    /// The goal prompt, written as it is, then end of file. The subagent
    /// takes no messages: its task's inbox is closed at once, so senders are
    /// told.
    #[default]
    Goal,
    /// JSON lines, and stdin stays open while the task runs: first
    /// `{"type":"goal","text":<goal>}`, then `{"type":"message","text":<message>}`
    /// for each message sent to the task, in order, as it arrives. stdin is
    /// closed when the task ends; a subagent that stops reading (its stdin
    /// closed) ends the forwarding, and its inbox is closed.
    Jsonl,
}

/// Why a config could not be loaded.
///
/// The `Display` is one line naming the file and what went wrong with it; the
/// error that caused it, when there is one, is its
/// [`source`](std::error::Error::source) and is not repeated: show the whole
/// chain to the user (`invalid config subagents.toml at line 2, column 11:
/// \`command\` must not be empty: give the program and its arguments`).
///
/// # Examples
///
/// ```
/// use std::error::Error as _;
/// use std::path::Path;
/// use asynctask_process::{ConfigError, ProcessRunnerConfig};
///
/// let err = ProcessRunnerConfig::load(Path::new("/no/such/subagents.toml")).unwrap_err();
/// assert!(matches!(err, ConfigError::Read { .. }));
/// assert_eq!(err.to_string(), "cannot read /no/such/subagents.toml");
/// assert_eq!(err.source().map(|s| s.to_string()).as_deref(), Some("No such file or directory (os error 2)"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not UTF-8 text.
    #[error("invalid config {}: not UTF-8", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// Where the first invalid byte is.
        #[source]
        source: std::string::FromUtf8Error,
    },
    /// The text is not TOML, or not a config: a syntax error, an unknown key,
    /// a missing or mistyped value, or a value that breaks its rule
    /// ([`InvalidValue`](crate::InvalidValue)).
    #[error("invalid config {}{}", path.display(), At(*position))]
    Parse {
        /// The file (`<string>` when parsed from a string).
        path: PathBuf,
        /// Where in the text, when the parser said.
        position: Option<ConfigPosition>,
        /// What is wrong. Its `Display` is the parser's message alone (the
        /// quoted line is left out: `position` says where).
        #[source]
        source: Box<toml::de::Error>,
    },
    /// A root or a working directory cannot be made absolute.
    #[error("invalid config {}: {what} cannot be resolved", path.display())]
    Resolve {
        /// The file (`<string>` when parsed from a string).
        path: PathBuf,
        /// Which directory.
        what: ConfigDir,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The config breaks a rule of its own (a working directory outside the
    /// roots).
    #[error("invalid config {}: {message}", path.display())]
    Invalid {
        /// The file (`<string>` when parsed from a string).
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Where in a config's text something is: 1-based line and column (in
/// characters).
///
/// ```
/// # use asynctask_process::ConfigPosition;
/// assert_eq!(ConfigPosition { line: 3, column: 1 }.to_string(), "line 3, column 1");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigPosition {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1, in characters.
    pub column: usize,
}

impl ConfigPosition {
    /// The position of byte `offset` in `text` (clamped to the text).
    pub(crate) fn of(text: &str, offset: usize) -> Self {
        let before = text.get(..offset).unwrap_or(text);
        let line_start = before.rfind('\n').map_or(0, |at| at + 1);
        ConfigPosition {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }
}

impl fmt::Display for ConfigPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// ` at line L, column C` when the position is known.
struct At(Option<ConfigPosition>);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(position) => write!(f, " at {position}"),
            None => Ok(()),
        }
    }
}

/// A directory a config names, as its errors name it.
///
/// ```
/// # use std::path::PathBuf;
/// # use asynctask_process::ConfigDir;
/// let cwd = ConfigDir::WorkingDir { subagent: "tester".into(), path: PathBuf::from("work") };
/// assert_eq!(cwd.to_string(), "subagent 'tester': working directory work");
/// assert_eq!(ConfigDir::Root(PathBuf::from("/srv")).to_string(), "root /srv");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigDir {
    /// An entry of `roots` (or the project, the default root).
    Root(PathBuf),
    /// A subagent's working directory (its `cwd`, or the project).
    WorkingDir {
        /// The subagent.
        subagent: String,
        /// The directory, as the config gives it (joined to the project).
        path: PathBuf,
    },
}

impl fmt::Display for ConfigDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigDir::Root(path) => write!(f, "root {}", path.display()),
            ConfigDir::WorkingDir { subagent, path } => write!(
                f,
                "subagent '{subagent}': working directory {}",
                path.display()
            ),
        }
    }
}

impl ProcessRunnerConfig {
    /// The smallest `inline_budget` a config file may set: room for a useful
    /// head and tail besides the lines that name the output file.
    pub const MIN_INLINE_BUDGET: usize = 1_000;

    /// The largest `inline_budget` a config file may set.
    pub const MAX_INLINE_BUDGET: usize = 1_000_000;

    /// How many bytes of a subagent's stdout its output file keeps when the
    /// config does not say: 64 MiB.
    pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 64 * 1024 * 1024;

    /// The `max_output_bytes` a config file may set: from 64 KiB (room for a
    /// head and a tail that are worth reading) to 1 TiB.
    pub const MAX_OUTPUT_BYTES_RANGE: std::ops::RangeInclusive<u64> = (64 * 1024)..=(1 << 40);

    /// An empty config: no subagents, no roots.
    ///
    /// ```
    /// # use asynctask_process::ProcessRunnerConfig;
    /// assert!(ProcessRunnerConfig::new().subagents.is_empty());
    /// ```
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a subagent.
    ///
    /// ```
    /// # use asynctask_process::{CommandLine, ProcessRunnerConfig, SubagentCommand, SubagentName};
    /// let config = ProcessRunnerConfig::new()
    ///     .with_subagent(SubagentName::new("echo")?, SubagentCommand::new(CommandLine::new(["echo", "hi"])?));
    /// assert_eq!(config.subagents.len(), 1);
    /// # Ok::<(), asynctask_process::InvalidValue>(())
    /// ```
    #[must_use]
    pub fn with_subagent(mut self, name: SubagentName, command: SubagentCommand) -> Self {
        self.subagents.insert(name, command);
        self
    }

    /// Replaces the roots (taken as they are: a config built in code is not
    /// resolved or checked).
    ///
    /// ```
    /// # use std::path::PathBuf;
    /// # use asynctask_process::ProcessRunnerConfig;
    /// let config = ProcessRunnerConfig::new().with_roots(vec![PathBuf::from("/srv")]);
    /// assert_eq!(config.roots, [PathBuf::from("/srv")]);
    /// ```
    #[must_use]
    pub fn with_roots(mut self, roots: Vec<PathBuf>) -> Self {
        self.roots = roots;
        self
    }

    /// Sets [`inline_budget`](Self::inline_budget) (taken as it is: a config
    /// built in code is not checked against the file's bounds).
    ///
    /// ```
    /// # use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
    /// let config = ProcessRunnerConfig::new().with_inline_budget(4_000);
    /// assert_eq!(ProcessRunner::new(config).inline_budget(), 4_000);
    /// ```
    #[must_use]
    pub fn with_inline_budget(mut self, chars: usize) -> Self {
        self.inline_budget = Some(chars);
        self
    }

    /// Sets [`max_output_bytes`](Self::max_output_bytes), for every subagent
    /// that sets none of its own (taken as it is: a config built in code is
    /// not checked against the file's bounds).
    ///
    /// ```
    /// # use asynctask_process::{CommandLine, ProcessRunnerConfig, SubagentCommand};
    /// let config = ProcessRunnerConfig::new().with_max_output_bytes(1 << 20);
    /// let echo = SubagentCommand::new(CommandLine::new(["echo"])?);
    /// assert_eq!(config.output_cap(&echo), 1 << 20);
    /// assert_eq!(config.output_cap(&echo.with_max_output_bytes(4096)), 4096);
    /// # Ok::<(), asynctask_process::InvalidValue>(())
    /// ```
    #[must_use]
    pub fn with_max_output_bytes(mut self, bytes: u64) -> Self {
        self.max_output_bytes = Some(bytes);
        self
    }

    /// The most bytes of stdout the output file of `subagent` keeps: its own
    /// `max_output_bytes`, else the config's, else
    /// [`DEFAULT_MAX_OUTPUT_BYTES`](Self::DEFAULT_MAX_OUTPUT_BYTES).
    #[must_use]
    pub fn output_cap(&self, subagent: &SubagentCommand) -> u64 {
        subagent
            .max_output_bytes
            .or(self.max_output_bytes)
            .unwrap_or(Self::DEFAULT_MAX_OUTPUT_BYTES)
    }

    /// Parses a config from TOML text for the project at `project`: relative
    /// `cwd`s and `roots` are made relative to it, and it is the default root
    /// and the default `cwd`.
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
    /// assert_eq!((tester.command.program(), tester.command.args()), ("sh", &["-c".to_owned(), "make test".to_owned()][..]));
    /// assert_eq!(tester.cwd.as_deref(), Some(Path::new("/etc/agents/project")));
    ///
    /// let typo = "[subagents.tester]\ncomand = [\"make\"]\n";
    /// let err = ProcessRunnerConfig::from_toml_str(typo, Path::new(".")).unwrap_err();
    /// assert_eq!(err.to_string(), "invalid config <string> at line 2, column 1");
    /// let why = std::error::Error::source(&err).unwrap().to_string();
    /// assert!(why.starts_with("unknown field `comand`"), "{why}");
    /// ```
    ///
    /// # Errors
    ///
    /// All with path `<string>`: [`ConfigError::Parse`] for bad TOML, unknown
    /// keys, or a value that breaks its rule ([`InvalidValue`](crate::InvalidValue));
    /// [`ConfigError::Resolve`] for a root or working directory that cannot be
    /// made absolute; [`ConfigError::Invalid`] for a working directory outside
    /// the `roots` (the message names the subagent).
    pub fn from_toml_str(text: &str, project: &Path) -> Result<Self, ConfigError> {
        Self::from_toml_str_with::<()>(text, project).map(|(config, ())| config)
    }

    /// Reads and parses a config file for a host with no project of its own:
    /// the file's directory is the project (relative `cwd`s and `roots` are
    /// relative to it). A host that works in a project uses
    /// [`load_in`](Self::load_in).
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_process::ProcessRunnerConfig;
    ///
    /// let file = std::env::temp_dir().join(format!("asynctask-doc-{}.toml", std::process::id()));
    /// std::fs::write(&file, "[subagents.echo]\ncommand = [\"echo\", \"hi\"]\n")?;
    /// let config = ProcessRunnerConfig::load(&file);
    /// std::fs::remove_file(&file)?;
    /// assert_eq!(config?.subagents["echo"].command.program(), "echo");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::Read`] when the file cannot be read,
    /// [`ConfigError::NotUtf8`] when it is not UTF-8, or any error of
    /// [`from_toml_str`](Self::from_toml_str), naming `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with::<()>(path).map(|(config, ())| config)
    }

    /// Checks a config just read for the project at `project`, read from
    /// `origin` (named in errors), and makes its paths absolute: relative
    /// `cwd`s and `roots` against the project, which is the default root and
    /// the default `cwd`.
    pub(crate) fn resolved(mut self, project: &Path, origin: &Path) -> Result<Self, ConfigError> {
        let config = &mut self;
        let invalid = |message: String| ConfigError::Invalid {
            path: origin.to_owned(),
            message,
        };
        let unresolved = |what: ConfigDir, source: std::io::Error| ConfigError::Resolve {
            path: origin.to_owned(),
            what,
            source,
        };
        if let Some(budget) = config.inline_budget
            && !(Self::MIN_INLINE_BUDGET..=Self::MAX_INLINE_BUDGET).contains(&budget)
        {
            return Err(invalid(format!(
                "inline_budget = {budget} is out of range: give {} to {} characters",
                Self::MIN_INLINE_BUDGET,
                Self::MAX_INLINE_BUDGET
            )));
        }
        let caps = std::iter::once(("", config.max_output_bytes)).chain(
            (config.subagents.iter())
                .map(|(name, command)| (name.as_str(), command.max_output_bytes)),
        );
        for (name, cap) in caps {
            if let Some(cap) = cap.filter(|cap| !Self::MAX_OUTPUT_BYTES_RANGE.contains(cap)) {
                let whose = if name.is_empty() {
                    String::new()
                } else {
                    format!("subagent '{name}': ")
                };
                return Err(invalid(format!(
                    "{whose}max_output_bytes = {cap} is out of range: give {} to {} bytes (64 KiB to 1 TiB)",
                    Self::MAX_OUTPUT_BYTES_RANGE.start(),
                    Self::MAX_OUTPUT_BYTES_RANGE.end()
                )));
            }
        }
        for (what, path) in config
            .roots
            .iter()
            .map(|root| ("a root".to_owned(), root))
            .chain(config.subagents.iter().filter_map(|(name, command)| {
                Some((format!("subagent '{name}': `cwd`"), command.cwd.as_ref()?))
            }))
        {
            if let Some(why) = shell_syntax(path) {
                return Err(invalid(format!(
                    "{what} is {}: {why}; a relative path is relative to the project \
                     (\".\" is the project itself), an absolute one is taken as it is",
                    path.display()
                )));
            }
        }
        let roots = if config.roots.is_empty() {
            vec![project.to_owned()]
        } else {
            config.roots.iter().map(|root| project.join(root)).collect()
        };
        config.roots = roots
            .iter()
            .map(|root| resolve(root).map_err(|err| unresolved(ConfigDir::Root(root.clone()), err)))
            .collect::<Result<_, _>>()?;
        for (name, command) in &mut config.subagents {
            let cwd = command.cwd.get_or_insert_with(|| project.to_owned());
            if cwd.is_relative() {
                *cwd = project.join(&*cwd);
            }
            let resolved = resolve(cwd).map_err(|err| {
                let what = ConfigDir::WorkingDir {
                    subagent: name.to_string(),
                    path: cwd.clone(),
                };
                unresolved(what, err)
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
        Ok(self)
    }
}

impl SubagentCommand {
    /// A subagent that runs `command`, with no description, working directory
    /// or environment of its own.
    ///
    /// ```
    /// # use asynctask_process::{CommandLine, SubagentCommand};
    /// let echo = SubagentCommand::new(CommandLine::new(["echo", "hi"])?);
    /// assert!(echo.cwd.is_none() && echo.env.is_empty());
    /// # Ok::<(), asynctask_process::InvalidValue>(())
    /// ```
    #[must_use]
    pub fn new(command: CommandLine) -> Self {
        SubagentCommand {
            command,
            description: None,
            cwd: None,
            env: BTreeMap::new(),
            inherit_env: Vec::new(),
            stdin: StdinMode::Goal,
            max_output_bytes: None,
        }
    }

    /// Sets the most bytes of stdout its output file keeps (taken as it is: a
    /// config built in code is not checked against the file's bounds).
    ///
    /// ```
    /// # use asynctask_process::{CommandLine, SubagentCommand};
    /// let chatty = SubagentCommand::new(CommandLine::new(["yes"])?).with_max_output_bytes(1 << 20);
    /// assert_eq!(chatty.max_output_bytes, Some(1 << 20));
    /// # Ok::<(), asynctask_process::InvalidValue>(())
    /// ```
    #[must_use]
    pub fn with_max_output_bytes(mut self, bytes: u64) -> Self {
        self.max_output_bytes = Some(bytes);
        self
    }

    /// Sets what the subagent is for.
    ///
    /// ```
    /// # use asynctask_process::{CommandLine, SubagentCommand};
    /// let echo = SubagentCommand::new(CommandLine::new(["echo"])?).with_description("Echoes");
    /// assert_eq!(echo.description.as_deref(), Some("Echoes"));
    /// # Ok::<(), asynctask_process::InvalidValue>(())
    /// ```
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets the working directory (used as it is: a config built in code is not
    /// checked against roots).
    ///
    /// ```
    /// # use std::path::{Path, PathBuf};
    /// # use asynctask_process::{CommandLine, SubagentCommand};
    /// let pwd = SubagentCommand::new(CommandLine::new(["pwd"])?).with_cwd(PathBuf::from("/tmp"));
    /// assert_eq!(pwd.cwd.as_deref(), Some(Path::new("/tmp")));
    /// # Ok::<(), asynctask_process::InvalidValue>(())
    /// ```
    #[must_use]
    pub fn with_cwd(mut self, cwd: PathBuf) -> Self {
        self.cwd = Some(cwd);
        self
    }

    /// Adds (or replaces) an environment variable.
    ///
    /// ```
    /// # use asynctask_process::{CommandLine, EnvName, EnvValue, SubagentCommand};
    /// let env = SubagentCommand::new(CommandLine::new(["env"])?)
    ///     .with_env(EnvName::new("MODE")?, EnvValue::new("fast")?);
    /// assert_eq!(env.env["MODE"].as_str(), "fast");
    /// # Ok::<(), asynctask_process::InvalidValue>(())
    /// ```
    #[must_use]
    pub fn with_env(mut self, name: EnvName, value: EnvValue) -> Self {
        self.env.insert(name, value);
        self
    }

    /// Adds the name of a variable passed through from our own environment.
    ///
    /// ```
    /// # use asynctask_process::{CommandLine, EnvName, SubagentCommand};
    /// let env = SubagentCommand::new(CommandLine::new(["env"])?)
    ///     .with_inherit_env(EnvName::new("API_KEY")?);
    /// assert_eq!(env.inherit_env[0].as_str(), "API_KEY");
    /// # Ok::<(), asynctask_process::InvalidValue>(())
    /// ```
    #[must_use]
    pub fn with_inherit_env(mut self, name: EnvName) -> Self {
        self.inherit_env.push(name);
        self
    }

    /// Sets what the subagent reads on stdin.
    ///
    /// ```
    /// # use asynctask_process::{CommandLine, StdinMode, SubagentCommand};
    /// let chat = SubagentCommand::new(CommandLine::new(["my-agent"])?).with_stdin(StdinMode::Jsonl);
    /// assert_eq!(chat.stdin, StdinMode::Jsonl);
    /// # Ok::<(), asynctask_process::InvalidValue>(())
    /// ```
    #[must_use]
    pub fn with_stdin(mut self, stdin: StdinMode) -> Self {
        self.stdin = stdin;
        self
    }
}

/// Why `path` looks like something a shell would expand, which nothing here
/// does (`$PWD`, `~/src`): `None` when it does not.
fn shell_syntax(path: &Path) -> Option<&'static str> {
    let text = path.to_string_lossy();
    if text.starts_with('$') {
        Some("no shell expands a variable in it")
    } else if text == "~" || text.starts_with("~/") {
        Some("no shell expands `~` in it")
    } else {
        None
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

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn config_errors_carry_the_location_and_the_parsers_error() {
        use std::error::Error as _;
        let err =
            ProcessRunnerConfig::from_toml_str("[subagents.a]\ncommand = []\n", Path::new("."))
                .expect_err("empty command");
        assert_eq!(
            err.to_string(),
            "invalid config <string> at line 2, column 11"
        );
        assert!(
            matches!(
                err,
                ConfigError::Parse {
                    position: Some(ConfigPosition {
                        line: 2,
                        column: 11
                    }),
                    ..
                }
            ),
            "{err:?}"
        );
        let ConfigError::Parse { source: parsed, .. } = &err else {
            panic!("not a parse error: {err:?}")
        };
        assert_eq!(parsed.span(), Some(24..26));
        let source = err.source().expect("the parser's error");
        assert_eq!(
            source.to_string(),
            "`command` must not be empty: give the program and its arguments\n\
             in `subagents.a.command`\n",
            "the parser's message and key, without the quoted line"
        );
    }

    #[test]
    fn positions_count_lines_and_characters() {
        let text = "a\nbé = 1\n";
        assert_eq!(
            ConfigPosition::of(text, text.find('=').expect("an =")),
            ConfigPosition { line: 2, column: 4 }
        );
        assert_eq!(
            ConfigPosition::of(text, 99),
            ConfigPosition { line: 3, column: 1 }
        );
    }

    #[test]
    fn a_directory_that_cannot_be_resolved_keeps_the_io_error() {
        use std::error::Error as _;
        // An empty path cannot be made absolute.
        let err = ProcessRunnerConfig::from_toml_str("", Path::new("")).expect_err("empty root");
        assert!(
            matches!(&err, ConfigError::Resolve { what: ConfigDir::Root(root), .. } if root.as_os_str().is_empty()),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "invalid config <string>: root  cannot be resolved"
        );
        assert!(
            err.source()
                .is_some_and(|source| source.is::<std::io::Error>())
        );
    }

    #[test]
    fn a_file_that_is_not_utf8_keeps_the_utf8_error() {
        use std::error::Error as _;
        let file =
            std::env::temp_dir().join(format!("asynctask-not-utf8-{}.toml", std::process::id()));
        std::fs::write(&file, b"[subagents.a]\ncommand = [\"\xff\"]\n").expect("written");
        let err = ProcessRunnerConfig::load(&file).expect_err("not UTF-8");
        std::fs::remove_file(&file).expect("removed");
        assert_eq!(
            err.to_string(),
            format!("invalid config {}: not UTF-8", file.display())
        );
        let source = err.source().expect("the UTF-8 error");
        assert_eq!(
            source.to_string(),
            "invalid utf-8 sequence of 1 bytes from index 26"
        );
    }

    #[test]
    fn a_read_error_keeps_its_io_error_as_the_source() {
        use std::error::Error as _;
        let err = ProcessRunnerConfig::load(Path::new("/no/such/asynctask.toml"))
            .expect_err("missing file");
        let source = err.source().expect("a source");
        assert_eq!(
            source
                .downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind),
            Some(std::io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn names_look_maps_up_by_str() {
        let config = ProcessRunnerConfig::from_toml_str(
            "[subagents.a]\ncommand = [\"x\"]\nenv = { K = \"v\" }\n",
            Path::new("/"),
        )
        .expect("valid");
        assert_eq!(config.subagents["a"].env["K"].as_str(), "v");
        assert_eq!(
            ProcessRunnerConfig::from_toml_str(
                "[subagents.a]\ncommand = [\"x\"]\nenv = { K = \"a\\u0000b\" }\n",
                Path::new("/"),
            )
            .expect_err("NUL")
            .to_string(),
            "invalid config <string> at line 3, column 13"
        );
    }
}
