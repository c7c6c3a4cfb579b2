//! A durable supervisor: how a session's front starts one, and its runner,
//! which serves a project's config only as far as the user trusted it.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use asynctask_model::OutputObject;
use asynctask_process::{ProcessRunner, ProcessRunnerConfig};
use asynctask_tools::{SubagentError, SubagentInfo, SubagentRequest, SubagentRunner};
use tokio_util::sync::CancellationToken;

use crate::notice::note_for;
use crate::project::{ConfigEnv, ConfigSource, Discovery, FoundConfig, unsafe_config};
use crate::serve::{CliSettings, ServeOptions};
use crate::trust::Trust;

/// Starts the project's supervisor in the background: this same binary,
/// `supervisor run`, in its own process group (a client that signals its
/// server's group does not reach it). It logs to its state directory's
/// `supervisor.log`; its stderr, a pipe the front reads, carries an error
/// that stops it before it serves.
///
/// It finds the config as the front did (from the same project), so a
/// project's config must be trusted there too; only a `--config` is passed
/// on (`$ASYNCTASK_CONFIG` is inherited).
pub fn start_supervisor(
    options: &ServeOptions,
    discovery: &Discovery,
) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let state = options.state(&discovery.project);
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command.args(["supervisor", "run"]);
    if let Some(file) = &discovery.config
        && file.found.source == ConfigSource::Flag
    {
        command.arg("--config").arg(&file.found.path);
    }
    command
        .arg("--project")
        .arg(&discovery.project)
        .arg("--state-dir")
        .arg(state.path())
        .arg("--sync-detach-after")
        .arg(options.sync_detach_after.as_secs().to_string())
        .arg("--idle-exit")
        .arg(options.idle_exit.as_secs().to_string())
        .arg("--max-async-tasks")
        .arg(options.max_async_tasks.get().to_string())
        .arg("--max-queued-tasks")
        .arg(options.max_queued_tasks.get().to_string())
        .arg("--max-launches-per-session")
        .arg(
            options
                .max_launches_per_session
                .map_or(-1, i64::from)
                .to_string(),
        )
        .arg("--max-depth")
        .arg(options.max_depth.to_string());
    if let Some(chars) = options.inline_budget {
        command.arg("--inline-budget").arg(chars.to_string());
    }
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    command.spawn()
}

/// A supervisor's runner: the config as it is on disk now, as far as the
/// user trusts it. Each new run (and each catalog a new session lists) first
/// looks at the config file; when it changed, it is loaded again and serves
/// the runs started from then on (running tasks keep theirs).
///
/// A project's config serves only content the user trusted: a change not
/// trusted yet never runs. Until the user trusts it, the content trusted
/// before (or, when there was none, the user's config or nothing) serves on,
/// and the model is told the file waits for `asynctask trust` (looked at
/// again on each call, so trusting it takes effect at once). A config the
/// user named (`--config`, `$ASYNCTASK_CONFIG`) or their own is loaded as it
/// is. A config that no longer loads is logged and the last good one kept.
pub(crate) struct ReloadingRunner {
    /// The file watched, and how it was found: the config served, else the
    /// project's config held back.
    watched: Option<(PathBuf, ConfigSource)>,
    project: PathBuf,
    inline_budget: Option<usize>,
    env: ConfigEnv,
    current: Mutex<Served>,
}

/// What a [`ReloadingRunner`] serves.
struct Served {
    /// The watched file's stamp when it was last looked at.
    stamp: Option<(SystemTime, u64)>,
    /// The SHA-256 of the watched file's content that serves; `None` when
    /// another config (or none) serves.
    digest: Option<String>,
    /// A change waits for the user's trust: looked at on every call.
    waiting: Option<String>,
    runner: ProcessRunner,
    note: Option<asynctask_tools::CatalogNote>,
}

impl ReloadingRunner {
    pub(crate) fn new(
        runner: ProcessRunner,
        inline_budget: Option<usize>,
        discovery: &Discovery,
        env: ConfigEnv,
    ) -> Self {
        // The config served, unless it stands in for the project's held
        // back: then the project's is watched, for the user to trust.
        let (watched, digest) = match (&discovery.config, &discovery.project_config) {
            (_, Some(project)) if project.held_back.is_some() => {
                (Some((project.path.clone(), ConfigSource::Project)), None)
            }
            (Some(file), _) => (
                Some((file.found.path.clone(), file.found.source)),
                Some(file.digest()),
            ),
            (None, _) => (None, None),
        };
        let stamp = watched.as_ref().and_then(|(path, _)| stamp(path));
        let waiting = discovery
            .held_back()
            .filter(|(_, why)| why.trust_would_use())
            .and_then(|_| discovery.project_config.as_ref()?.text.as_deref())
            .map(|text| crate::trust::digest(text.as_bytes()));
        ReloadingRunner {
            watched,
            project: discovery.project.clone(),
            inline_budget,
            env,
            current: Mutex::new(Served {
                stamp,
                digest,
                waiting,
                runner,
                note: note_for(discovery),
            }),
        }
    }

    /// The runner for the config as it is now, and the note the model reads.
    fn served(&self) -> (ProcessRunner, Option<asynctask_tools::CatalogNote>) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((path, source)) = &self.watched {
            if *source == ConfigSource::Project {
                self.revoke_if_untrusted(path, &mut current);
            }
            let now = stamp(path);
            if now != current.stamp || current.waiting.is_some() {
                current.stamp = now;
                self.look_again(path, *source, &mut current);
            }
        }
        (current.runner.clone(), current.note.clone())
    }

    /// Stops serving a project's config whose content the user no longer
    /// trusts (`asynctask untrust`, or trust given to other content): from
    /// the next run on, nothing of it runs, and the model is told why. Read
    /// on every call, as the trust store is small; a store that cannot be
    /// read trusts nothing.
    fn revoke_if_untrusted(&self, path: &Path, current: &mut Served) {
        let Some(served) = current.digest.clone() else {
            return;
        };
        let trusted = self.env.trust_store().is_some_and(|store| {
            store
                .trust_of(&crate::project::trust_key(path), &served)
                .ok()
                == Some(Trust::Trusted)
        });
        if trusted {
            return;
        }
        tracing::warn!(
            "{} is no longer trusted: its subagents no longer run; `asynctask trust` it to use it again",
            path.display()
        );
        current.runner = current.runner.with_config(ProcessRunnerConfig::default());
        current.digest = None;
        // Looked at again on every call, so trusting it again serves it.
        current.waiting = Some(served);
        current.note = Some(asynctask_tools::CatalogNote::new(
            crate::notice::UNTRUSTED_NOTE,
        ));
    }

    /// Looks at the watched file again: serves its content when it is new
    /// and may serve (trusted, or the user's choice), else says why not.
    fn look_again(&self, path: &Path, source: ConfigSource, current: &mut Served) {
        let project = source == ConfigSource::Project;
        if let Err(why) = unsafe_config(path, project || source == ConfigSource::User) {
            if current.waiting.take().is_some() || current.note.is_none() {
                tracing::warn!("{} is {why}; what served serves on", path.display());
            }
            if project {
                current.note = Some(crate::notice::held_back_note(&why));
            }
            return;
        }
        let file = match crate::project::read_config(FoundConfig {
            path: path.to_owned(),
            source,
        }) {
            Ok(file) => file,
            Err(err) => {
                tracing::warn!(
                    "{} changed but cannot be read; what served serves on: {}",
                    path.display(),
                    crate::error_chain(&err)
                );
                return;
            }
        };
        let digest = file.digest();
        if current.digest.as_ref() == Some(&digest) {
            // Back to the content that serves.
            current.waiting = None;
            current.note = None;
            return;
        }
        if project && crate::project::trust_of(&file, &self.env) != Trust::Trusted {
            if current.waiting.as_ref() != Some(&digest) {
                tracing::warn!(
                    "{} changed since it was trusted: its new content waits for `asynctask \
                     trust`; {}",
                    path.display(),
                    if current.digest.is_some() {
                        "the content trusted serves on"
                    } else {
                        "it is not used"
                    }
                );
            }
            current.waiting = Some(digest);
            let offered = current.runner.subagent_names();
            let withheld = crate::notice::subagent_names(&file.text)
                .into_iter()
                .filter(|name| !offered.contains(name))
                .collect();
            let note = if current.digest.is_some() {
                asynctask_tools::CatalogNote::new(crate::notice::PENDING_NOTE)
            } else {
                asynctask_tools::CatalogNote::new(crate::notice::UNTRUSTED_NOTE)
            };
            current.note = Some(note.with_withheld(withheld));
            return;
        }
        match ProcessRunnerConfig::from_file_text_in::<CliSettings>(&file.text, path, &self.project)
        {
            Ok((config, _)) => {
                let mut runner = current.runner.with_config(config);
                if let Some(chars) = self.inline_budget {
                    runner = runner.with_inline_budget(chars);
                }
                tracing::info!(
                    "{} changed: new tasks run with it (subagents: {})",
                    path.display(),
                    runner.subagent_names().join(", ")
                );
                current.runner = runner;
                current.digest = Some(digest);
                current.waiting = None;
                current.note = None;
            }
            Err(err) => {
                current.waiting = None;
                tracing::warn!(
                    "{} changed but cannot be loaded; the last good config serves on: {}",
                    path.display(),
                    crate::error_chain(&err)
                );
            }
        }
    }
}

/// When the file at `path` was last changed, and its size.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

#[async_trait::async_trait]
impl SubagentRunner for ReloadingRunner {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        self.served().0.run(request, cancel).await
    }

    fn catalog(&self) -> Option<Vec<SubagentInfo>> {
        self.served().0.catalog()
    }

    fn catalog_note(&self) -> Option<asynctask_tools::CatalogNote> {
        self.served().1
    }

    fn accepts_messages(&self, subagent: &str) -> bool {
        self.served().0.accepts_messages(subagent)
    }

    fn terminate_all(&self) {
        // Every runner it made shares the live subagents.
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current.runner.terminate_all();
    }

    fn forget(&self, task_id: &str) {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        SubagentRunner::forget(&current.runner, task_id);
    }
}
