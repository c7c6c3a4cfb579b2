//! `asynctask trust`, `untrust` and `init`: the user's say over which project
//! configs run, and a starter config that is trusted as it is written.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use asynctask_process::ProcessRunnerConfig;

use crate::CliError;
use crate::project::{
    CONFIG_FILE, ConfigEnv, ConfigFile, ConfigSource, FoundConfig, discover, project_dir,
    read_config, unsafe_config,
};
use crate::serve::CliSettings;
use crate::trust::TrustStore;

/// The config `asynctask init` writes: one test runner (whose exit status is
/// the test command's), and two agents to uncomment.
pub const STARTER_CONFIG: &str = include_str!("starter.toml");

/// The file `trust` or `untrust` is about: `file` (made absolute), else the
/// config discovery finds from `project` (else the working directory).
///
/// # Errors
///
/// [`CliError::NothingToTrust`] when no file is named and none is found.
pub fn config_to_trust(file: Option<&Path>, project: Option<&Path>) -> Result<PathBuf, CliError> {
    if let Some(file) = file {
        return Ok(std::path::absolute(file).unwrap_or_else(|_| file.to_owned()));
    }
    let start = project_dir(project)?;
    // Discovery without `--config` or the variable: the project's file.
    let env = ConfigEnv {
        asynctask_config: None,
        ..ConfigEnv::current()
    };
    match discover(None, &start, false, &env)?.project_config {
        Some(found) => Ok(found.path),
        None => Err(CliError::NothingToTrust { start }),
    }
}

/// `asynctask trust [FILE]`: trusts the file (else the project's config
/// discovery finds from `project`, else the working directory) and says so.
///
/// # Errors
///
/// Those of [`config_to_trust`] and [`trust`].
pub fn trust_command(file: Option<&Path>, project: Option<&Path>) -> Result<String, CliError> {
    let path = config_to_trust(file, project)?;
    let subagents = trust(&path)?;
    Ok(format!(
        "trusted {} as it is now (subagents: {}); after a change, run `asynctask trust` again",
        path.display(),
        if subagents.is_empty() {
            "none".to_owned()
        } else {
            subagents.join(", ")
        }
    ))
}

/// `asynctask untrust [FILE]`: forgets the file (found as by
/// [`trust_command`]) and says so.
///
/// # Errors
///
/// Those of [`config_to_trust`] and [`untrust`].
pub fn untrust_command(file: Option<&Path>, project: Option<&Path>) -> Result<String, CliError> {
    let path = config_to_trust(file, project)?;
    Ok(if untrust(&path)? {
        format!("{} is no longer trusted", path.display())
    } else {
        format!("{} was not trusted", path.display())
    })
}

/// `asynctask init`: writes and trusts a starter config (see [`init`]) and
/// says so.
///
/// # Errors
///
/// Those of [`init`].
pub fn init_command(project: Option<&Path>) -> Result<String, CliError> {
    let path = init(project)?;
    Ok(format!(
        "wrote {} and trusted it; after you edit it, run `asynctask trust` again",
        path.display()
    ))
}

/// The user's trust store.
fn store() -> Result<TrustStore, CliError> {
    ConfigEnv::current()
        .trust_store()
        .ok_or(CliError::NoTrustStore)
}

/// `asynctask trust`: records that the user trusts `path` with its content
/// now. The file must be the user's (or root's), in a directory no one else
/// may write, and a valid config (for its own directory as the project).
/// Returns the subagents it defines.
///
/// # Errors
///
/// [`CliError::HeldBack`] for a file that is never loaded, [`CliError::Config`]
/// for one that cannot be read or parsed, [`CliError::TrustStore`] when the
/// store cannot be written.
pub fn trust(path: &Path) -> Result<Vec<String>, CliError> {
    let file = checked(path)?;
    let project = path.parent().unwrap_or(Path::new("/"));
    let (config, _) =
        ProcessRunnerConfig::from_file_text_in::<CliSettings>(&file.text, path, project)?;
    store()?.trust(&canonical(path), &file.digest())?;
    Ok(config.subagents.keys().map(ToString::to_string).collect())
}

/// `asynctask untrust`: forgets `path`; whether it was trusted.
///
/// # Errors
///
/// [`CliError::TrustStore`] when the store cannot be read or written.
pub fn untrust(path: &Path) -> Result<bool, CliError> {
    store()?.untrust(&canonical(path))
}

/// `asynctask init`: writes [`STARTER_CONFIG`] as `asynctask.toml` in
/// `project` (else the working directory), never over an existing file, and
/// trusts it. Returns the file.
///
/// # Errors
///
/// [`CliError::ConfigExists`] when there is a file already,
/// [`CliError::WriteConfig`] when it cannot be written, and those of
/// [`trust`].
pub fn init(project: Option<&Path>) -> Result<PathBuf, CliError> {
    let path = project_dir(project)?.join(CONFIG_FILE);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&path)
        .and_then(|mut file| file.write_all(STARTER_CONFIG.as_bytes()));
    match written {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(CliError::ConfigExists { path });
        }
        Err(source) => return Err(CliError::WriteConfig { path, source }),
    }
    trust(&path)?;
    Ok(path)
}

/// The file at `path`, read, when it may be loaded at all.
fn checked(path: &Path) -> Result<ConfigFile, CliError> {
    if !path.is_file() {
        return Err(asynctask_process::ConfigError::Read {
            path: path.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        }
        .into());
    }
    unsafe_config(path, true).map_err(|why| CliError::HeldBack {
        path: path.to_owned(),
        why,
    })?;
    read_config(FoundConfig {
        path: path.to_owned(),
        source: ConfigSource::Project,
    })
}

/// `path` as the trust store keys it ([`trust_key`](crate::project::trust_key)).
fn canonical(path: &Path) -> PathBuf {
    crate::project::trust_key(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_starter_config_loads_with_one_subagent() {
        let (config, settings) =
            ProcessRunnerConfig::from_toml_str_with::<CliSettings>(STARTER_CONFIG, Path::new("/p"))
                .expect("loads");
        let names: Vec<String> = config.subagents.keys().map(ToString::to_string).collect();
        assert_eq!(names, ["tests"]);
        assert_eq!(settings, CliSettings::default());
    }
}
