//! Where a command works: the project (its subagents run there, its durable
//! state lives there) and the subagents config it finds.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::CliError;

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
    /// `asynctask.toml` in the project or one of its parents.
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
    /// `$HOME`.
    pub home: Option<OsString>,
}

impl ConfigEnv {
    /// This process's environment.
    #[must_use]
    pub fn current() -> Self {
        ConfigEnv {
            asynctask_config: std::env::var_os(CONFIG_ENV).filter(|value| !value.is_empty()),
            xdg_config_home: std::env::var_os("XDG_CONFIG_HOME").filter(|value| !value.is_empty()),
            home: std::env::var_os("HOME").filter(|value| !value.is_empty()),
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
}

/// Finds the subagents config, first found wins: `flag` (`--config`), then
/// `$ASYNCTASK_CONFIG`, then `asynctask.toml` in `project` or the nearest of
/// its parents, then the user's (`$XDG_CONFIG_HOME/asynctask/asynctask.toml`).
/// A file named by the flag or the variable must exist.
///
/// # Examples
///
/// ```
/// use asynctask_cli::project::{ConfigEnv, ConfigSource, find_config};
///
/// let dir = std::env::temp_dir().join(format!("asynctask-doc-find-{}", std::process::id()));
/// std::fs::create_dir_all(dir.join("project/src"))?;
/// std::fs::write(dir.join("project/asynctask.toml"), "")?;
/// let found = find_config(None, &dir.join("project/src"), &ConfigEnv::default())?;
/// assert_eq!((found.path, found.source), (dir.join("project/asynctask.toml"), ConfigSource::Project));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`CliError::ConfigMissing`] for a named file that does not exist, and
/// [`CliError::NoConfig`], naming every place looked at, when none is found.
pub fn find_config(
    flag: Option<&Path>,
    project: &Path,
    env: &ConfigEnv,
) -> Result<FoundConfig, CliError> {
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
        return Ok(FoundConfig { path, source });
    }
    for dir in project.ancestors() {
        let path = dir.join(CONFIG_FILE);
        if path.is_file() {
            return Ok(FoundConfig {
                path,
                source: ConfigSource::Project,
            });
        }
    }
    let user = env.user_config();
    if let Some(path) = user.as_ref().filter(|path| path.is_file()) {
        return Ok(FoundConfig {
            path: path.clone(),
            source: ConfigSource::User,
        });
    }
    Err(CliError::NoConfig {
        project_file: project.join(CONFIG_FILE),
        user_file: user,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn discovery_takes_the_flag_then_the_variable_then_the_project_then_the_user() {
        let dir = asynctask_test_support::temp_dir("cfg");
        let root = dir.path().canonicalize().expect("canonical");
        let (project, user) = (root.join("work/project"), root.join("xdg"));
        std::fs::create_dir_all(project.join("src")).expect("mkdir");
        std::fs::create_dir_all(user.join("asynctask")).expect("mkdir");
        let user_file = user.join("asynctask").join(CONFIG_FILE);
        std::fs::write(&user_file, "").expect("written");
        let mut env = ConfigEnv {
            asynctask_config: None,
            xdg_config_home: Some(user.clone().into()),
            home: None,
        };
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
            found(None, &env).expect("a parent's"),
            (project_file.clone(), ConfigSource::Project)
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
                "no subagents config: looked for {} (and in each parent directory), \
                 /home/someone/.config/asynctask/asynctask.toml and $ASYNCTASK_CONFIG; \
                 write one (docs/mcp.md has a start) or pass --config FILE",
                project.join(CONFIG_FILE).display()
            )
        );
    }
}
