//! What the model is told of subagents it is not offered: the notes (the
//! project's config not trusted, changed since trusted, never loaded; no
//! config at all), and [`NotedRunner`], a runner that carries one.

use std::collections::BTreeMap;

use asynctask_model::OutputObject;
use asynctask_process::ProcessRunner;
use asynctask_tools::{CatalogNote, SubagentError, SubagentInfo, SubagentRequest, SubagentRunner};
use tokio_util::sync::CancellationToken;

use crate::project::{Discovery, HeldBack};

/// The project's config is not trusted: nothing of it is offered.
pub const UNTRUSTED_NOTE: &str = "The project's asynctask.toml is not trusted, so none of its \
    subagents are offered. To use it, the user reads it and runs `asynctask trust` in the \
    project.";

/// The project's config changed since the user trusted it: nothing of it is
/// offered.
pub const CHANGED_NOTE: &str = "The project's asynctask.toml changed since the user trusted it, \
    so none of its subagents are offered. To use it, the user reads it and runs `asynctask \
    trust` in the project.";

/// A durable supervisor's config changed since the user trusted it: the
/// content trusted serves on.
pub const PENDING_NOTE: &str = "The project's asynctask.toml changed since the user trusted it. \
    The subagents listed run as they were when it was trusted; the changes wait until the user \
    reads it and runs `asynctask trust` in the project.";

/// The project's config is never loaded: another user could have written it.
pub const REFUSED_NOTE: &str = "The project's asynctask.toml is never loaded: another user \
    could have written it (`asynctask doctor` says why).";

/// No config at all.
pub const NO_CONFIG_NOTE: &str = "No subagents are configured. The user runs `asynctask init` \
    in the project to write a starter asynctask.toml, or names a config with --config.";

/// The note for what `discovery` settled: why the project's config is not
/// used, or that there is no config; `None` when a config is used and the
/// project's (if any) is among it.
#[must_use]
pub fn note_for(discovery: &Discovery) -> Option<CatalogNote> {
    if let Some(project) = &discovery.project_config
        && let Some(why) = &project.held_back
    {
        let names = project
            .text
            .as_deref()
            .map(subagent_names)
            .unwrap_or_default();
        return Some(held_back_note(why).with_withheld(names));
    }
    discovery
        .config
        .is_none()
        .then(|| CatalogNote::new(NO_CONFIG_NOTE))
}

/// The note for a project's config held back for `why`.
#[must_use]
pub fn held_back_note(why: &HeldBack) -> CatalogNote {
    CatalogNote::new(match why {
        HeldBack::Untrusted => UNTRUSTED_NOTE,
        HeldBack::Changed => CHANGED_NOTE,
        _ => REFUSED_NOTE,
    })
}

/// The subagents a config's text defines (nothing when it does not parse).
/// Only the names are read: nothing else of an untrusted file is used.
#[must_use]
pub fn subagent_names(text: &str) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Names {
        #[serde(default)]
        subagents: BTreeMap<String, serde::de::IgnoredAny>,
    }
    toml::from_str::<Names>(text)
        .map(|names| names.subagents.into_keys().collect())
        .unwrap_or_default()
}

/// A [`ProcessRunner`] and the note the model reads about the subagents it
/// does not offer.
#[derive(Debug)]
pub struct NotedRunner {
    runner: ProcessRunner,
    note: Option<CatalogNote>,
}

impl NotedRunner {
    /// `runner`, with `note`.
    #[must_use]
    pub fn new(runner: ProcessRunner, note: Option<CatalogNote>) -> Self {
        NotedRunner { runner, note }
    }
}

#[async_trait::async_trait]
impl SubagentRunner for NotedRunner {
    async fn run(
        &self,
        request: SubagentRequest,
        cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        self.runner.run(request, cancel).await
    }

    fn catalog(&self) -> Option<Vec<SubagentInfo>> {
        self.runner.catalog()
    }

    fn catalog_note(&self) -> Option<CatalogNote> {
        self.note.clone()
    }

    fn accepts_messages(&self, subagent: &str) -> bool {
        self.runner.accepts_messages(subagent)
    }

    fn terminate_all(&self) {
        self.runner.terminate_all();
    }

    fn forget(&self, task_id: &str) {
        SubagentRunner::forget(&self.runner, task_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_names_of_an_untrusted_config_are_read() {
        let text = "durable = true\n[subagents.b]\ncommand = [\"x\"]\n[subagents.a]\nnope = 1\n";
        assert_eq!(subagent_names(text), ["a", "b"]);
        assert_eq!(subagent_names("not toml ["), Vec::<String>::new());
    }

    #[test]
    fn the_notes_the_model_reads() {
        insta::assert_snapshot!(
            "notes",
            [
                ("untrusted", UNTRUSTED_NOTE),
                ("changed", CHANGED_NOTE),
                ("pending (durable)", PENDING_NOTE),
                ("refused", REFUSED_NOTE),
                ("no config", NO_CONFIG_NOTE),
            ]
            .map(|(name, text)| format!("--- {name}\n{text}"))
            .join("\n")
        );
    }
}
