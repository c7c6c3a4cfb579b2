//! Where a command works: the project (its subagents run there, its durable
//! state lives there) and the subagents config it finds.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::CliError;
use crate::trust::{TRUST_FILE, Trust, TrustStore};

/// The name of a project's config file and of the user's.
pub const CONFIG_FILE: &str = "asynctask.toml";

/// The variable that names a config file, over any other but `--config`.
pub const CONFIG_ENV: &str = "ASYNCTASK_CONFIG";

/// The project at `dir` (`--project`, or the working directory): absolute,
/// with symlinks resolved.
///
/// # Errors
///
/// [`CliError::Project`] when it is not a directory that can be resolved.
pub fn project_dir(dir: Option<&Path>) -> Result<PathBuf, CliError> {
    let dir = match dir {
        Some(dir) => dir.to_owned(),
        None => std::env::current_dir().map_err(|source| CliError::Project {
            path: PathBuf::from("."),
            source,
        })?,
    };
    let resolved = dir.canonicalize().map_err(|source| CliError::Project {
        path: dir.clone(),
        source,
    })?;
    if !resolved.is_dir() {
        return Err(CliError::Project {
            path: dir,
            source: std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
        });
    }
    Ok(resolved)
}

/// Where a config came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigSource {
    /// `--config`.
    Flag,
    /// `$ASYNCTASK_CONFIG`.
    Env,
    /// `asynctask.toml` in the project or one of its parents (used only
    /// once the user trusted it).
    Project,
    /// `asynctask.toml` in the user's config directory.
    User,
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigSource::Flag => "--config",
            ConfigSource::Env => "$ASYNCTASK_CONFIG",
            ConfigSource::Project => "the project's asynctask.toml",
            ConfigSource::User => "the user's asynctask.toml",
        })
    }
}

/// A config file found, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundConfig {
    /// The file (absolute).
    pub path: PathBuf,
    /// How it was found.
    pub source: ConfigSource,
}

/// What config discovery reads of the environment (given, so tests need not
/// change the process's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigEnv {
    /// `$ASYNCTASK_CONFIG`.
    pub asynctask_config: Option<OsString>,
    /// `$XDG_CONFIG_HOME`.
    pub xdg_config_home: Option<OsString>,
    /// `$XDG_STATE_HOME`.
    pub xdg_state_home: Option<OsString>,
    /// `$HOME`.
    pub home: Option<OsString>,
}

impl ConfigEnv {
    /// This process's environment.
    #[must_use]
    pub fn current() -> Self {
        let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
        ConfigEnv {
            asynctask_config: var(CONFIG_ENV),
            xdg_config_home: var("XDG_CONFIG_HOME"),
            xdg_state_home: var("XDG_STATE_HOME"),
            home: var("HOME"),
        }
    }

    /// The user's config file: `$XDG_CONFIG_HOME/asynctask/asynctask.toml`,
    /// else `~/.config/asynctask/asynctask.toml` (on macOS too, as uv and gh
    /// do); `None` without either variable.
    #[must_use]
    pub fn user_config(&self) -> Option<PathBuf> {
        let base = match (&self.xdg_config_home, &self.home) {
            (Some(xdg), _) if Path::new(xdg).is_absolute() => PathBuf::from(xdg),
            (_, Some(home)) => Path::new(home).join(".config"),
            _ => return None,
        };
        Some(base.join("asynctask").join(CONFIG_FILE))
    }

    /// The user's trust store: `$XDG_STATE_HOME/asynctask/trusted.json`, else
    /// `~/.local/state/asynctask/trusted.json`; `None` without either
    /// variable (then no project config is trusted).
    #[must_use]
    pub fn trust_store(&self) -> Option<TrustStore> {
        let base = match (&self.xdg_state_home, &self.home) {
            (Some(xdg), _) if Path::new(xdg).is_absolute() => PathBuf::from(xdg),
            (_, Some(home)) => Path::new(home).join(".local").join("state"),
            _ => return None,
        };
        Some(TrustStore::at(base.join("asynctask").join(TRUST_FILE)))
    }

    /// The user's home directory, resolved: discovery never climbs above it.
    fn home_dir(&self) -> Option<PathBuf> {
        let home = Path::new(self.home.as_ref()?);
        Some(home.canonicalize().unwrap_or_else(|_| home.to_owned()))
    }
}

/// The most a config file may hold: 1 MiB.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// A config file and its content, read once: the content checked (and
/// trusted) is the content parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// The file, and how it was found.
    pub found: FoundConfig,
    /// Its content.
    pub text: String,
}

impl ConfigFile {
    /// The SHA-256 of the content, as the trust store records it.
    #[must_use]
    pub fn digest(&self) -> String {
        crate::trust::digest(self.text.as_bytes())
    }
}

/// Why a project's config found by discovery is not used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeldBack {
    /// The user has not trusted it.
    Untrusted,
    /// It changed since the user trusted it.
    Changed,
    /// Another user (not root) owns it: it is never loaded.
    NotOwned {
        /// The owner's user id.
        owner: u32,
    },
    /// Other users may write it, or the directory that holds it: it is never
    /// loaded.
    OthersMayWrite {
        /// The file or directory others may write.
        path: PathBuf,
    },
}

impl HeldBack {
    /// Whether trusting the file would make it used (it is the user's own
    /// and no one else may change it).
    #[must_use]
    pub fn trust_would_use(&self) -> bool {
        matches!(self, HeldBack::Untrusted | HeldBack::Changed)
    }
}

impl fmt::Display for HeldBack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeldBack::Untrusted => f.write_str(
                "untrusted: read it, then run `asynctask trust` in the project to use it",
            ),
            HeldBack::Changed => f.write_str(
                "changed since trusted: read it, then run `asynctask trust` in the project to \
                 use it",
            ),
            HeldBack::NotOwned { owner } => write!(
                f,
                "not safe: user {owner} owns it (not you, not root), so it is never loaded"
            ),
            HeldBack::OthersMayWrite { path } => write!(
                f,
                "not safe: other users may write {}, so it is never loaded",
                path.display()
            ),
        }
    }
}

/// The project's config found by discovery, used or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectConfig {
    /// The file.
    pub path: PathBuf,
    /// Why it is not used; `None`: it is trusted and used.
    pub held_back: Option<HeldBack>,
    /// Its content, when it was read (not for a file never loaded).
    pub text: Option<String>,
}

/// What discovery settled: the project, the config used, and the project's
/// own config when discovery found one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// Where discovery began (`--project`, the client's root, or the working
    /// directory).
    pub start: PathBuf,
    /// The project: the directory of the project's config when it is used
    /// and was found in a parent of `start`; else `start`.
    pub project: PathBuf,
    /// The config used; `None` when there is none to use.
    pub config: Option<ConfigFile>,
    /// The project's config discovery found (used or held back).
    pub project_config: Option<ProjectConfig>,
    /// The user's config file's place, when there is one (for messages).
    pub user_file: Option<PathBuf>,
}

impl Discovery {
    /// The config used, or the error that says why there is none.
    ///
    /// # Errors
    ///
    /// [`CliError::HeldBack`] when the project's config is not used and no
    /// other config is, [`CliError::NoConfig`] when none was found.
    pub fn require(&self) -> Result<&ConfigFile, CliError> {
        if let Some(config) = &self.config {
            return Ok(config);
        }
        match &self.project_config {
            Some(ProjectConfig {
                path,
                held_back: Some(why),
                ..
            }) => Err(CliError::HeldBack {
                path: path.clone(),
                why: why.clone(),
            }),
            _ => Err(CliError::NoConfig {
                project_file: self.start.join(CONFIG_FILE),
                user_file: self.user_file.clone(),
            }),
        }
    }

    /// The project's config when discovery found one it does not use.
    #[must_use]
    pub fn held_back(&self) -> Option<(&Path, &HeldBack)> {
        let project = self.project_config.as_ref()?;
        Some((&project.path, project.held_back.as_ref()?))
    }
}

/// Finds the subagents config, first found wins: `flag` (`--config`), then
/// `$ASYNCTASK_CONFIG`, then `asynctask.toml` in `project` or the nearest of
/// its parents (see [`discover`]), then the user's
/// (`$XDG_CONFIG_HOME/asynctask/asynctask.toml`). A file named by the flag or
/// the variable must exist; a project's file must be trusted.
///
/// # Examples
///
/// ```
/// use asynctask_cli::project::{ConfigEnv, find_config};
///
/// let dir = std::env::temp_dir().join(format!("asynctask-doc-find-{}", std::process::id()));
/// std::fs::create_dir_all(dir.join("project/src"))?;
/// std::fs::write(dir.join("project/asynctask.toml"), "")?;
/// // Not trusted: not used.
/// let err = find_config(None, &dir.join("project/src"), &ConfigEnv::default()).unwrap_err();
/// assert!(err.to_string().ends_with("is untrusted: read it, then run `asynctask trust` in the project to use it"), "{err}");
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`discover`] and [`Discovery::require`].
pub fn find_config(
    flag: Option<&Path>,
    project: &Path,
    env: &ConfigEnv,
) -> Result<FoundConfig, CliError> {
    discover(flag, project, false, env)?
        .require()
        .map(|config| config.found.clone())
}

/// `asynctask config path`: the config a command working in `project`
/// (else the working directory) would use, else the project's config held
/// back; and notes for the user on how it was found, whether it is trusted,
/// and why the project's config is not used.
///
/// # Errors
///
/// Those of [`discover`]; [`CliError::NoConfig`] when there is no config.
pub fn config_path(
    flag: Option<&Path>,
    project: Option<&Path>,
) -> Result<(PathBuf, Vec<String>), CliError> {
    let start = project_dir(project)?;
    let discovery = discover(flag, &start, project.is_none(), &ConfigEnv::current())?;
    let mut notes = Vec::new();
    if let Some((path, why)) = discovery.held_back() {
        notes.push(format!("the project's config {} is {why}", path.display()));
    }
    match (&discovery.config, discovery.held_back()) {
        (Some(file), _) => {
            let trusted = if file.found.source == ConfigSource::Project {
                " (trusted)"
            } else {
                ""
            };
            notes.push(format!("found by {}{trusted}", file.found.source));
            Ok((file.found.path.clone(), notes))
        }
        (None, Some((path, _))) => Ok((path.to_owned(), notes)),
        (None, None) => Err(discovery.require().err().unwrap_or(CliError::NoConfig {
            project_file: start.join(CONFIG_FILE),
            user_file: discovery.user_file.clone(),
        })),
    }
}

/// Settles the config and the project for a command that starts in `start`
/// (absolute, resolved).
///
/// The config is `flag` (`--config`), else `$ASYNCTASK_CONFIG` (both the
/// user's choice, used as they are), else the project's `asynctask.toml`:
/// the nearest in `start` or a parent, looking no higher than the first
/// directory holding `.git` and never above the user's home. The project's
/// file is used only when the user trusted its content ([`TrustStore`]), it
/// is owned by the user (or root), and no other user may write it or its
/// directory; else the user's own config is used, if there is one. With
/// `anchor`, a project's config used from a parent of `start` makes that
/// parent the project.
///
/// # Errors
///
/// [`CliError::ConfigMissing`] for a named file that does not exist,
/// [`CliError::Config`] for a file that cannot be read or is too large,
/// [`CliError::HeldBack`] for a named or user's file others may write.
pub fn discover(
    flag: Option<&Path>,
    start: &Path,
    anchor: bool,
    env: &ConfigEnv,
) -> Result<Discovery, CliError> {
    let mut discovery = Discovery {
        start: start.to_owned(),
        project: start.to_owned(),
        config: None,
        project_config: None,
        user_file: env.user_config(),
    };
    let named = flag
        .map(|path| (path.to_owned(), ConfigSource::Flag))
        .or_else(|| {
            env.asynctask_config
                .as_ref()
                .map(|path| (PathBuf::from(path), ConfigSource::Env))
        });
    if let Some((path, source)) = named {
        let path = std::path::absolute(&path).unwrap_or(path);
        if !path.is_file() {
            return Err(CliError::ConfigMissing {
                path,
                found_by: source,
            });
        }
        refuse_unsafe(&path, false)?;
        discovery.config = Some(read_config(FoundConfig { path, source })?);
        return Ok(discovery);
    }
    if let Some(found) = project_file(start, env.home_dir().as_deref()) {
        let project_config = settle_project_file(&found, env)?;
        if project_config.held_back.is_none()
            && let Some(text) = &project_config.text
        {
            discovery.config = Some(ConfigFile {
                found: FoundConfig {
                    path: found.clone(),
                    source: ConfigSource::Project,
                },
                text: text.clone(),
            });
            if anchor && let Some(dir) = found.parent() {
                dir.clone_into(&mut discovery.project);
            }
        }
        discovery.project_config = Some(project_config);
        if discovery.config.is_some() {
            return Ok(discovery);
        }
    }
    if let Some(path) = discovery.user_file.clone().filter(|path| path.is_file()) {
        refuse_unsafe(&path, true)?;
        discovery.config = Some(read_config(FoundConfig {
            path,
            source: ConfigSource::User,
        })?);
    }
    Ok(discovery)
}

/// The nearest `asynctask.toml` in `start` or a parent: no higher than the
/// first directory holding `.git` (the repository's root), never above
/// `home`.
fn project_file(start: &Path, home: Option<&Path>) -> Option<PathBuf> {
    for dir in start.ancestors() {
        if home.is_some_and(|home| home != dir && home.starts_with(dir)) {
            return None;
        }
        let path = dir.join(CONFIG_FILE);
        if path.is_file() {
            return Some(path);
        }
        if dir.join(".git").exists() {
            return None;
        }
    }
    None
}

/// The project's file found at `path`: never loaded when it is not safe,
/// else read, and used when the user trusts its content.
fn settle_project_file(path: &Path, env: &ConfigEnv) -> Result<ProjectConfig, CliError> {
    let held = |why| ProjectConfig {
        path: path.to_owned(),
        held_back: Some(why),
        text: None,
    };
    if let Err(why) = unsafe_config(path, true) {
        return Ok(held(why));
    }
    let config = read_config(FoundConfig {
        path: path.to_owned(),
        source: ConfigSource::Project,
    })?;
    let trust = trust_of(&config, env);
    let held_back = match trust {
        Trust::Trusted => None,
        Trust::Changed => Some(HeldBack::Changed),
        _ => Some(HeldBack::Untrusted),
    };
    Ok(ProjectConfig {
        path: path.to_owned(),
        held_back,
        text: Some(config.text),
    })
}

/// The path the trust store keys `path` by: its directory with symlinks
/// resolved, and its own name as found. A symlinked `asynctask.toml` is keyed
/// by where it stands, never by the file it points to, so a link in another
/// repository to a trusted config does not borrow its trust (its subagents
/// would run in that repository).
pub(crate) fn trust_key(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => parent
            .canonicalize()
            .unwrap_or_else(|_| parent.to_owned())
            .join(name),
        _ => path.to_owned(),
    }
}

/// Whether the user trusts `config`'s content; a trust store that cannot be
/// read trusts nothing (and says why in the log).
pub fn trust_of(config: &ConfigFile, env: &ConfigEnv) -> Trust {
    let Some(store) = env.trust_store() else {
        return Trust::Untrusted;
    };
    match store.trust_of(&trust_key(&config.found.path), &config.digest()) {
        Ok(trust) => trust,
        Err(err) => {
            tracing::warn!("{}", crate::error_chain(&err));
            Trust::Untrusted
        }
    }
}

/// [`unsafe_config`] as an error.
fn refuse_unsafe(path: &Path, check_dir: bool) -> Result<(), CliError> {
    unsafe_config(path, check_dir).map_err(|why| CliError::HeldBack {
        path: path.to_owned(),
        why,
    })
}

/// Why the config at `path` must never be loaded: another user (not root)
/// owns it, or others may write it; with `check_dir`, also when others may
/// write the directory that holds it (a world-writable directory counts, its
/// sticky bit notwithstanding), or the one that holds the file it links to.
///
/// # Errors
///
/// The [`HeldBack`] that says why.
pub fn unsafe_config(path: &Path, check_dir: bool) -> Result<(), HeldBack> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        // Gone: reading it will say so.
        return Ok(());
    };
    let me = nix::unistd::getuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(HeldBack::NotOwned { owner: meta.uid() });
    }
    if others_may_write(&meta) {
        return Err(HeldBack::OthersMayWrite {
            path: path.to_owned(),
        });
    }
    if !check_dir {
        return Ok(());
    }
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    for dir in [path.parent(), canonical.parent()].into_iter().flatten() {
        let Ok(meta) = std::fs::metadata(dir) else {
            continue;
        };
        if (meta.uid() != me && meta.uid() != 0) || others_may_write(&meta) {
            return Err(HeldBack::OthersMayWrite {
                path: dir.to_owned(),
            });
        }
    }
    Ok(())
}

/// Whether users other than the owner may write: anyone (whatever the sticky
/// bit), or a group other than the user's own.
fn others_may_write(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mode = meta.mode();
    mode & 0o002 != 0 || (mode & 0o020 != 0 && meta.gid() != nix::unistd::getgid().as_raw())
}

/// Reads the config `found`, at most [`MAX_CONFIG_BYTES`].
pub(crate) fn read_config(found: FoundConfig) -> Result<ConfigFile, CliError> {
    use asynctask_process::ConfigError;
    use std::io::Read;
    let path = found.path.clone();
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|file| file.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::Read {
            path,
            source: std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!("a config holds at most {MAX_CONFIG_BYTES} bytes"),
            ),
        }
        .into());
    }
    let text = String::from_utf8(bytes).map_err(|source| ConfigError::NotUtf8 {
        path: path.clone(),
        source,
    })?;
    Ok(ConfigFile { found, text })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// An environment whose user config and trust store lie in `root`.
    fn env_in(root: &Path) -> ConfigEnv {
        ConfigEnv {
            asynctask_config: None,
            xdg_config_home: Some(root.join("xdg").into()),
            xdg_state_home: Some(root.join("state").into()),
            home: None,
        }
    }

    fn trust(env: &ConfigEnv, path: &Path) {
        let text = std::fs::read(path).expect("read");
        env.trust_store()
            .expect("a store")
            .trust(
                &path.canonicalize().expect("canonical"),
                &crate::trust::digest(&text),
            )
            .expect("trusted");
    }

    #[test]
    fn discovery_takes_the_flag_then_the_variable_then_the_trusted_project_then_the_user() {
        let dir = asynctask_test_support::temp_dir("cfg");
        let root = dir.path().canonicalize().expect("canonical");
        let project = root.join("work/project");
        std::fs::create_dir_all(project.join("src")).expect("mkdir");
        std::fs::create_dir_all(root.join("xdg/asynctask")).expect("mkdir");
        let user_file = root.join("xdg/asynctask").join(CONFIG_FILE);
        std::fs::write(&user_file, "").expect("written");
        let mut env = env_in(&root);
        let found = |flag: Option<&Path>, env: &ConfigEnv| {
            find_config(flag, &project.join("src"), env).map(|found| (found.path, found.source))
        };
        assert_eq!(
            found(None, &env).expect("the user's"),
            (user_file.clone(), ConfigSource::User)
        );
        let project_file = root.join("work").join(CONFIG_FILE);
        std::fs::write(&project_file, "").expect("written");
        assert_eq!(
            found(None, &env).expect("the user's: the project's is not trusted"),
            (user_file.clone(), ConfigSource::User)
        );
        trust(&env, &project_file);
        assert_eq!(
            found(None, &env).expect("a parent's"),
            (project_file.clone(), ConfigSource::Project)
        );
        let anchored = discover(None, &project.join("src"), true, &env).expect("found");
        assert_eq!(anchored.project, root.join("work"));
        std::fs::write(&project_file, "# changed\n").expect("written");
        let changed = discover(None, &project.join("src"), true, &env).expect("found");
        assert_eq!(
            (changed.held_back(), changed.project.clone()),
            (
                Some((project_file.as_path(), &HeldBack::Changed)),
                project.join("src")
            )
        );
        env.asynctask_config = Some(user_file.clone().into());
        assert_eq!(
            found(None, &env).expect("the variable's"),
            (user_file.clone(), ConfigSource::Env)
        );
        assert_eq!(
            found(Some(&project_file), &env).expect("the flag's"),
            (project_file, ConfigSource::Flag)
        );
        let missing = root.join("missing.toml");
        let err = found(Some(&missing), &env).expect_err("missing");
        assert_eq!(
            err.to_string(),
            format!("the config {} (--config) does not exist", missing.display())
        );
    }

    #[test]
    fn discovery_stops_at_the_repository_root_and_at_home() {
        let dir = asynctask_test_support::temp_dir("cfg");
        let root = dir.path().canonicalize().expect("canonical");
        let (repo, home) = (root.join("outer/repo"), root.join("home/me"));
        std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
        std::fs::create_dir_all(repo.join("src")).expect("mkdir");
        std::fs::create_dir_all(home.join("work")).expect("mkdir");
        std::fs::write(root.join("outer").join(CONFIG_FILE), "").expect("written");
        std::fs::write(root.join("home").join(CONFIG_FILE), "").expect("written");
        assert_eq!(project_file(&repo.join("src"), None), None, "above .git");
        std::fs::write(repo.join(CONFIG_FILE), "").expect("written");
        assert_eq!(
            project_file(&repo.join("src"), None),
            Some(repo.join(CONFIG_FILE))
        );
        assert_eq!(
            project_file(&home.join("work"), Some(&home)),
            None,
            "above home"
        );
        std::fs::write(home.join(CONFIG_FILE), "").expect("written");
        assert_eq!(
            project_file(&home.join("work"), Some(&home)),
            Some(home.join(CONFIG_FILE))
        );
    }

    #[test]
    fn a_config_others_may_write_is_never_used() {
        use std::os::unix::fs::PermissionsExt;
        let dir = asynctask_test_support::temp_dir("cfg");
        let root = dir.path().canonicalize().expect("canonical");
        let shared = root.join("shared");
        std::fs::create_dir_all(shared.join("project")).expect("mkdir");
        let file = shared.join(CONFIG_FILE);
        std::fs::write(&file, "").expect("written");
        let env = env_in(&root);
        trust(&env, &file);
        // World-writable, sticky (as /tmp): others may still add files.
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        let found = discover(None, &shared.join("project"), true, &env).expect("found");
        assert_eq!(
            (found.config.clone(), found.held_back()),
            (
                None,
                Some((
                    file.as_path(),
                    &HeldBack::OthersMayWrite {
                        path: shared.clone()
                    }
                ))
            )
        );
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        assert_eq!(
            unsafe_config(&file, true),
            Err(HeldBack::OthersMayWrite { path: file.clone() })
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(unsafe_config(&file, true), Ok(()));
        // Another user's file: only root can make one here.
        if nix::unistd::getuid().is_root() {
            nix::unistd::chown(&file, Some(nix::unistd::Uid::from_raw(4321)), None).expect("chown");
            assert_eq!(
                unsafe_config(&file, true),
                Err(HeldBack::NotOwned { owner: 4321 })
            );
        }
    }

    #[test]
    fn no_config_names_where_it_looked() {
        let dir = asynctask_test_support::temp_dir("cfg");
        let project = dir.path().canonicalize().expect("canonical").join("p");
        std::fs::create_dir_all(&project).expect("mkdir");
        let env = ConfigEnv {
            home: Some("/home/someone".into()),
            ..ConfigEnv::default()
        };
        let err = find_config(None, &project, &env).expect_err("none");
        assert_eq!(
            err.to_string(),
            format!(
                "no subagents config: looked for {} (and in its parents, up to the repository's \
                 root), /home/someone/.config/asynctask/asynctask.toml and $ASYNCTASK_CONFIG; \
                 run `asynctask init` to write one, or pass --config FILE",
                project.join(CONFIG_FILE).display()
            )
        );
    }
}
