//! `asynctask doctor`: checks what a session would need — the config, each
//! subagent's program and working directory, the state directory and its
//! socket — and says what an MCP client would run.

use std::path::{Path, PathBuf};

use asynctask_supervisor::MAX_SOCKET_PATH;

use crate::project::{ConfigEnv, ConfigSource, discover, project_dir};
use crate::serve::{load_discovered, state_dir};

/// One finding: fine, or a problem (with what to do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Whether it is a problem.
    pub problem: bool,
    /// What was found, in one line.
    pub text: String,
}

impl Finding {
    fn ok(text: impl Into<String>) -> Self {
        Finding {
            problem: false,
            text: text.into(),
        }
    }

    fn problem(text: impl Into<String>) -> Self {
        Finding {
            problem: true,
            text: text.into(),
        }
    }
}

/// What `asynctask doctor` found for the project `project` (`None`: the
/// working directory) with the config `config` (`None`: found as `mcp` finds
/// it), the state directory `state` (`None`: the project's `.asynctask/`),
/// and `path` as the `PATH` subagents get.
#[must_use]
pub fn examine(
    config: Option<&Path>,
    project: Option<&Path>,
    state: Option<&Path>,
    path: Option<&std::ffi::OsStr>,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let start = match project_dir(project) {
        Ok(start) => start,
        Err(err) => {
            findings.push(Finding::problem(crate::error_chain(&err)));
            return findings;
        }
    };
    let discovery = match discover(config, &start, project.is_none(), &ConfigEnv::current()) {
        Ok(discovery) => discovery,
        Err(err) => {
            findings.push(Finding::ok(format!("project: {}", start.display())));
            findings.push(Finding::problem(crate::error_chain(&err)));
            return findings;
        }
    };
    let project = discovery.project.clone();
    findings.push(Finding::ok(if project == start {
        format!("project: {}", project.display())
    } else {
        format!(
            "project: {} (where its asynctask.toml is; looked from {})",
            project.display(),
            start.display()
        )
    }));
    if let Some((path, why)) = discovery.held_back() {
        findings.push(Finding::problem(format!(
            "the project's config {} is {why}",
            path.display()
        )));
    }
    let found = match discovery.require() {
        Ok(file) => {
            let trusted = if file.found.source == ConfigSource::Project {
                ", trusted"
            } else {
                ""
            };
            findings.push(Finding::ok(format!(
                "config: {} ({}{trusted})",
                file.found.path.display(),
                file.found.source
            )));
            Some(file.found.clone())
        }
        Err(err) if discovery.held_back().is_some() => {
            findings.push(Finding::problem(format!(
                "no other config: `mcp` offers no subagents ({})",
                crate::error_chain(&err)
            )));
            None
        }
        Err(err) => {
            findings.push(Finding::problem(crate::error_chain(&err)));
            None
        }
    };
    if found.is_some() {
        match load_discovered(&discovery) {
            Err(err) => findings.push(Finding::problem(crate::error_chain(&err))),
            Ok((config, settings)) => {
                if config.subagents.is_empty() {
                    findings.push(Finding::problem(
                        "the config defines no subagents: add a [subagents.NAME] table",
                    ));
                }
                for (name, subagent) in &config.subagents {
                    let program = subagent.command.program();
                    let cwd = subagent.cwd.clone().unwrap_or_else(|| project.clone());
                    match find_program(program, &cwd, path) {
                        Some(found) => findings.push(Finding::ok(format!(
                            "subagent '{name}': {program} is {}",
                            found.display()
                        ))),
                        None => findings.push(Finding::problem(format!(
                            "subagent '{name}': {program} is not an executable on the PATH \
                             subagents get; install it, or give its absolute path in `command`"
                        ))),
                    }
                    if cwd.is_dir() {
                        findings.push(Finding::ok(format!(
                            "subagent '{name}': works in {}",
                            cwd.display()
                        )));
                    } else {
                        findings.push(Finding::problem(format!(
                            "subagent '{name}': its working directory {} is not a directory",
                            cwd.display()
                        )));
                    }
                }
                if settings.durable {
                    findings.push(Finding::ok("durable = true: `mcp` serves durably"));
                }
            }
        }
    }
    let state = state_dir(state, &project);
    findings.push(state_finding(state.path()));
    let socket = state.socket();
    let len = socket.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        findings.push(Finding::problem(format!(
            "the supervisor's socket {} would be {len} bytes, more than the {MAX_SOCKET_PATH} \
             a Unix socket allows: `mcp --durable` needs a shorter --state-dir",
            socket.display()
        )));
    } else {
        findings.push(Finding::ok(format!(
            "socket: {} ({len} of {MAX_SOCKET_PATH} bytes)",
            socket.display()
        )));
    }
    findings.push(clients_finding(found.as_ref().map(|found| found.source)));
    findings
}

/// Whether the state directory exists and this user can write it, or can
/// make it.
fn state_finding(state: &Path) -> Finding {
    let existing = state.ancestors().find(|dir| dir.exists()).unwrap_or(state);
    let probe = existing.join(format!(".asynctask-doctor-{}", std::process::id()));
    let writable = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    match (existing == state, writable) {
        (true, true) => Finding::ok(format!("state directory: {} (writable)", state.display())),
        (false, true) => Finding::ok(format!(
            "state directory: {} (made by the first durable session or run)",
            state.display()
        )),
        (_, false) => Finding::problem(format!(
            "state directory: {} cannot be written: give --state-dir a directory you own",
            existing.display()
        )),
    }
}

/// What an MCP client would run, and whether `asynctask` on the `PATH` is
/// this binary.
fn clients_finding(source: Option<crate::project::ConfigSource>) -> Finding {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("asynctask"));
    let on_path = find_program(
        "asynctask",
        Path::new("/"),
        std::env::var_os("PATH").as_deref(),
    );
    let same = on_path
        .as_ref()
        .and_then(|found| found.canonicalize().ok())
        .zip(exe.canonicalize().ok())
        .is_some_and(|(a, b)| a == b);
    let command = if same {
        "asynctask".to_owned()
    } else {
        exe.display().to_string()
    };
    let config = match source {
        Some(crate::project::ConfigSource::Flag) => " --config FILE",
        _ => "",
    };
    let mut text = format!(
        "clients run `{command} mcp{config}` in the project (Claude Code: `claude mcp add \
         asynctask -- {command} mcp{config}`; Codex: `codex mcp add asynctask -- {command} \
         mcp{config}`)"
    );
    if !same {
        text.push_str(&format!(
            "; `asynctask` on your PATH is {}, not this binary: clients need the absolute path",
            on_path.map_or_else(|| "missing".to_owned(), |path| path.display().to_string())
        ));
    }
    Finding::ok(text)
}

/// Where `program` is found: a path with a `/` is taken from `cwd`; a name
/// is looked up in `path` (the `PATH` a subagent gets). Only executable
/// files count.
fn find_program(program: &str, cwd: &Path, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |candidate: &Path| {
        std::fs::metadata(candidate)
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let candidate = cwd.join(program);
        return executable(&candidate).then_some(candidate);
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(program))
        .find(|candidate| executable(candidate))
}

/// The findings as lines: `ok` or `problem`, then the text.
#[must_use]
pub fn report(findings: &[Finding]) -> String {
    findings
        .iter()
        .map(|finding| {
            format!(
                "{} {}",
                if finding.problem {
                    "problem:"
                } else {
                    "ok:     "
                },
                finding.text
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn programs_are_found_on_the_path_given_and_relative_ones_in_the_working_directory() {
        let dir = asynctask_test_support::temp_dir("doctor");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).expect("mkdir");
        let tool = bin.join("agent");
        std::fs::write(&tool, "#!/bin/sh\n").expect("written");
        std::fs::write(bin.join("plain"), "not executable").expect("written");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = std::ffi::OsString::from(format!("/nowhere:{}", bin.display()));
        assert_eq!(
            find_program("agent", dir.path(), Some(&path)),
            Some(tool.clone())
        );
        assert_eq!(find_program("plain", dir.path(), Some(&path)), None);
        assert_eq!(find_program("bin/agent", dir.path(), None), Some(tool));
        assert_eq!(find_program("agent", dir.path(), None), None);
    }
}
