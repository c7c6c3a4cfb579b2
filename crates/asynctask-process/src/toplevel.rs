//! Reading a config file: its top-level table, the runner's keys and those a
//! layer above declares ([`ConfigExtension`]), read in one pass so that the
//! parser's positions reach every error, then the config's own checks.

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::config::{ConfigError, ConfigPosition, ProcessRunnerConfig};

/// Top-level keys of a config file that a layer above the runner owns (the
/// `asynctask` command's `durable`, say), read in the same parse as the
/// runner's own keys by [`ProcessRunnerConfig::load_with`] and
/// [`from_toml_str_with`](ProcessRunnerConfig::from_toml_str_with). A key of
/// neither is refused, the error listing both; an error in the value of one
/// of these keys names its line, column and key, as for the runner's own.
///
/// `()` is the extension with no keys: [`load`](ProcessRunnerConfig::load).
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use asynctask_process::{ConfigExtension, ProcessRunnerConfig};
///
/// #[derive(Debug, Default, PartialEq)]
/// struct Serving { durable: bool }
///
/// impl ConfigExtension for Serving {
///     const KEYS: &'static [&'static str] = &["durable"];
///     fn read<'de, D: serde::Deserializer<'de>>(&mut self, _key: &str, value: D) -> Result<(), D::Error> {
///         self.durable = serde::Deserialize::deserialize(value)?; // the one key
///         Ok(())
///     }
/// }
///
/// let text = "durable = true\n[subagents.a]\ncommand = [\"true\"]\n";
/// let (config, serving) = ProcessRunnerConfig::from_toml_str_with::<Serving>(text, Path::new("/"))?;
/// assert_eq!((config.subagents.len(), serving), (1, Serving { durable: true }));
/// let err = ProcessRunnerConfig::from_toml_str_with::<Serving>("durable = 1\n", Path::new("/"));
/// assert_eq!(err.unwrap_err().to_string(), "invalid config <string> at line 1, column 11");
/// # Ok::<(), asynctask_process::ConfigError>(())
/// ```
pub trait ConfigExtension: Default {
    /// The keys, as written in the file.
    const KEYS: &'static [&'static str];

    /// Reads the value of `key`, one of [`KEYS`](Self::KEYS).
    ///
    /// # Errors
    ///
    /// The value's own error (a wrong type, say).
    fn read<'de, D: Deserializer<'de>>(&mut self, key: &str, value: D) -> Result<(), D::Error>;
}

impl ConfigExtension for () {
    const KEYS: &'static [&'static str] = &[];

    fn read<'de, D: Deserializer<'de>>(&mut self, _key: &str, value: D) -> Result<(), D::Error> {
        IgnoredAny::deserialize(value).map(|_| ())
    }
}

impl<'de> Deserialize<'de> for ProcessRunnerConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        TopLevel::<()>::deserialize(deserializer).map(|top| top.config)
    }
}

/// Reading a config file's text: its top level, then the config's own checks.
impl ProcessRunnerConfig {
    /// [`from_toml_str`](Self::from_toml_str) for a text that also holds the
    /// top-level keys of `X`, a layer above the runner: the config, and what
    /// `X` read.
    ///
    /// # Errors
    ///
    /// Those of [`from_toml_str`](Self::from_toml_str); a key of neither is
    /// an unknown key.
    pub fn from_toml_str_with<X: ConfigExtension>(
        text: &str,
        project: &Path,
    ) -> Result<(Self, X), ConfigError> {
        Self::parse(text, project, Path::new("<string>"))
    }

    /// [`load`](Self::load) for a file that also holds the top-level keys of
    /// `X`, a layer above the runner: the config, and what `X` read.
    ///
    /// # Errors
    ///
    /// Those of [`load`](Self::load); a key of neither is an unknown key.
    pub fn load_with<X: ConfigExtension>(path: &Path) -> Result<(Self, X), ConfigError> {
        // An absolute base keeps relative `cwd`s right even if the host later
        // changes its own working directory.
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let project = absolute.parent().unwrap_or(Path::new("."));
        Self::load_in(path, project)
    }

    /// Reads and parses a config file for the project at `project`: relative
    /// `cwd`s and `roots` are relative to it, it is the default `cwd`, and the
    /// default root. The file may lie anywhere (a user's config serves every
    /// project); it also returns what `X`, a layer above the runner, read
    /// (`()` for nothing).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::path::Path;
    /// use asynctask_process::ProcessRunnerConfig;
    ///
    /// let dir = std::env::temp_dir().join(format!("asynctask-doc-in-{}", std::process::id()));
    /// std::fs::create_dir_all(dir.join("project/docs"))?;
    /// let file = dir.join("subagents.toml");
    /// std::fs::write(&file, "[subagents.a]\ncommand = [\"pwd\"]\ncwd = \"docs\"\n")?;
    /// let project = dir.join("project").canonicalize()?;
    /// let (config, ()) = ProcessRunnerConfig::load_in::<()>(&file, &project)?;
    /// std::fs::remove_dir_all(&dir)?;
    /// assert_eq!(config.subagents["a"].cwd.as_deref(), Some(project.join("docs").as_path()));
    /// assert_eq!(config.roots, [project]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`load`](Self::load).
    pub fn load_in<X: ConfigExtension>(
        path: &Path,
        project: &Path,
    ) -> Result<(Self, X), ConfigError> {
        let bytes = std::fs::read(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|source| ConfigError::NotUtf8 {
            path: path.to_owned(),
            source,
        })?;
        let project = std::path::absolute(project).unwrap_or_else(|_| project.to_owned());
        Self::parse(&text, &project, path)
    }

    /// [`load_in`](Self::load_in) for the content of the file `path`,
    /// already read: a host that checks a file's content before using it
    /// (the SHA-256 the user trusted) parses exactly what it checked. Errors
    /// name `path`.
    ///
    /// ```
    /// use std::path::Path;
    /// use asynctask_process::ProcessRunnerConfig;
    ///
    /// let text = "[subagents.a]\ncommand = [\"pwd\"]\ncwd = \"docs\"\n";
    /// let (config, ()) = ProcessRunnerConfig::from_file_text_in::<()>(text, Path::new("/p/asynctask.toml"), Path::new("/p"))?;
    /// assert_eq!(config.subagents["a"].cwd.as_deref(), Some(Path::new("/p/docs")));
    /// let err = ProcessRunnerConfig::from_file_text_in::<()>("x", Path::new("/p/asynctask.toml"), Path::new("/p"));
    /// assert_eq!(err.unwrap_err().to_string(), "invalid config /p/asynctask.toml at line 1, column 2");
    /// # Ok::<(), asynctask_process::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`from_toml_str`](Self::from_toml_str), naming `path`.
    pub fn from_file_text_in<X: ConfigExtension>(
        text: &str,
        path: &Path,
        project: &Path,
    ) -> Result<(Self, X), ConfigError> {
        let project = std::path::absolute(project).unwrap_or_else(|_| project.to_owned());
        Self::parse(text, &project, path)
    }

    fn parse<X: ConfigExtension>(
        text: &str,
        project: &Path,
        origin: &Path,
    ) -> Result<(Self, X), ConfigError> {
        let top: TopLevel<X> = toml::from_str(text).map_err(|mut source| {
            let position = source
                .span()
                .map(|span| ConfigPosition::of(text, span.start));
            // The error's `Display` would quote the line: the position says
            // where, and the message alone stays on one line.
            source.set_input(None);
            ConfigError::Parse {
                path: origin.to_owned(),
                position,
                source: Box::new(source),
            }
        })?;
        let (config, extension) = (top.config, top.extension);
        Ok((config.resolved(project, origin)?, extension))
    }
}

/// The runner's own top-level keys, in the order errors list them.
const RUNNER_KEYS: &[&str] = &["subagents", "roots", "inline_budget", "max_output_bytes"];

/// A config file's top level: the runner's keys and those of `X`, in one
/// pass over the table, so that the parser's positions reach every error.
pub(crate) struct TopLevel<X> {
    pub(crate) config: ProcessRunnerConfig,
    pub(crate) extension: X,
}

impl<'de, X: ConfigExtension> Deserialize<'de> for TopLevel<X> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_struct(
            "ProcessRunnerConfig",
            RUNNER_KEYS,
            TopLevelVisitor(PhantomData),
        )
    }
}

/// A top-level key: the runner's, or one of the extension's.
enum TopLevelKey {
    Subagents,
    Roots,
    InlineBudget,
    MaxOutputBytes,
    Extension(&'static str),
}

/// Reads a key, refusing one that is neither the runner's nor `X`'s with the
/// wording serde gives an unknown field, listing both.
struct KeySeed<X>(PhantomData<X>);

impl<'de, X: ConfigExtension> DeserializeSeed<'de> for KeySeed<X> {
    type Value = TopLevelKey;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<TopLevelKey, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl<X: ConfigExtension> Visitor<'_> for KeySeed<X> {
    type Value = TopLevelKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field identifier")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<TopLevelKey, E> {
        match key {
            "subagents" => Ok(TopLevelKey::Subagents),
            "roots" => Ok(TopLevelKey::Roots),
            "inline_budget" => Ok(TopLevelKey::InlineBudget),
            "max_output_bytes" => Ok(TopLevelKey::MaxOutputBytes),
            _ => match X::KEYS.iter().find(|known| **known == key) {
                Some(known) => Ok(TopLevelKey::Extension(known)),
                None => {
                    let expected: Vec<String> = RUNNER_KEYS
                        .iter()
                        .chain(X::KEYS)
                        .map(|known| format!("`{known}`"))
                        .collect();
                    Err(E::custom(format_args!(
                        "unknown field `{key}`, expected one of {}",
                        expected.join(", ")
                    )))
                }
            },
        }
    }
}

/// Hands the value of one of `X`'s keys to [`ConfigExtension::read`].
struct ExtensionValue<'a, X> {
    key: &'static str,
    extension: &'a mut X,
}

impl<'de, X: ConfigExtension> DeserializeSeed<'de> for ExtensionValue<'_, X> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, value: D) -> Result<(), D::Error> {
        self.extension.read(self.key, value)
    }
}

struct TopLevelVisitor<X>(PhantomData<X>);

impl<'de, X: ConfigExtension> Visitor<'de> for TopLevelVisitor<X> {
    type Value = TopLevel<X>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct ProcessRunnerConfig")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopLevel<X>, A::Error> {
        let mut subagents = None;
        let mut roots = None;
        let mut inline_budget = None;
        let mut max_output_bytes = None;
        let mut extension = X::default();
        let mut extension_keys: Vec<&'static str> = Vec::new();
        while let Some(key) = map.next_key_seed(KeySeed::<X>(PhantomData))? {
            match key {
                TopLevelKey::Subagents => {
                    if subagents.is_some() {
                        return Err(de::Error::duplicate_field("subagents"));
                    }
                    subagents = Some(map.next_value()?);
                }
                TopLevelKey::Roots => {
                    if roots.is_some() {
                        return Err(de::Error::duplicate_field("roots"));
                    }
                    roots = Some(map.next_value()?);
                }
                TopLevelKey::InlineBudget => {
                    if inline_budget.is_some() {
                        return Err(de::Error::duplicate_field("inline_budget"));
                    }
                    inline_budget = Some(map.next_value()?);
                }
                TopLevelKey::MaxOutputBytes => {
                    if max_output_bytes.is_some() {
                        return Err(de::Error::duplicate_field("max_output_bytes"));
                    }
                    max_output_bytes = Some(map.next_value()?);
                }
                TopLevelKey::Extension(key) => {
                    if extension_keys.contains(&key) {
                        return Err(de::Error::duplicate_field(key));
                    }
                    extension_keys.push(key);
                    map.next_value_seed(ExtensionValue {
                        key,
                        extension: &mut extension,
                    })?;
                }
            }
        }
        Ok(TopLevel {
            config: ProcessRunnerConfig {
                subagents: subagents.unwrap_or_default(),
                roots: roots.unwrap_or_default(),
                inline_budget: inline_budget.unwrap_or_default(),
                max_output_bytes: max_output_bytes.unwrap_or_default(),
            },
            extension,
        })
    }
}
