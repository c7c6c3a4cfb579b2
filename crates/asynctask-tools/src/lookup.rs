//! Finding the task a model or a user named by id or prefix: one lookup, one
//! error type, for every tool and slash command that takes a task id.

use asynctask_manager::TaskSnapshot;
use asynctask_manager::{AsyncTaskManager, PrefixMatch};

use crate::command::CommandOutput;
use crate::context::TaskScope;
use crate::format::{ECHO_CHARS, truncate_chars};
use crate::render;
use crate::result::{ToolErrorType, ToolResult};

/// The task named by `query`: the task with exactly that id, else the one task
/// whose id starts with it.
///
/// # Errors
///
/// [`LookupError::NotFound`] when no id starts with `query`,
/// [`LookupError::Ambiguous`] when several do.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_tools::{LookupError, find_task};
///
/// let manager = AsyncTaskManager::default();
/// manager.register_task(RegisterTaskInput::new("0f3a9c21-1", "researcher", "g"))?;
/// manager.register_task(RegisterTaskInput::new("0f3a77e4-2", "tester", "g"))?;
/// assert_eq!(find_task(&manager, "0f3a9").map(|t| t.id().to_owned()), Ok("0f3a9c21-1".to_owned()));
/// let missing = find_task(&manager, "ffff").unwrap_err();
/// assert_eq!(missing.to_tool_result().llm_content, "No async task found with ID or prefix 'ffff'.");
/// assert!(matches!(find_task(&manager, "0f3a"), Err(LookupError::Ambiguous { .. })));
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
pub fn find_task(manager: &AsyncTaskManager, query: &str) -> Result<TaskSnapshot, LookupError> {
    find_task_in(manager, query, None)
}

/// [`find_task`] among the tasks `scope` includes (every task when `None`): a
/// task it leaves out is not found, with the same error as an id no task
/// has, and is never a candidate of an ambiguous prefix.
///
/// # Errors
///
/// As [`find_task`], among the tasks in scope.
pub fn find_task_in(
    manager: &AsyncTaskManager,
    query: &str,
    scope: Option<&dyn TaskScope>,
) -> Result<TaskSnapshot, LookupError> {
    let visible = |task: &TaskSnapshot| scope.is_none_or(|scope| scope.includes(task));
    let not_found = || LookupError::NotFound {
        query: query.to_owned(),
    };
    // Exact match first: a full id never costs a prefix search, and an id that
    // is a prefix of another still names itself.
    if let Some(task) = manager.task(query).filter(|task| visible(task)) {
        return Ok(task);
    }
    match manager.find_by_prefix(query) {
        PrefixMatch::One(task) if visible(&task) => Ok(task),
        PrefixMatch::One(_) | PrefixMatch::None => Err(not_found()),
        PrefixMatch::Ambiguous(mut candidates) => {
            candidates.retain(|task| visible(task));
            match candidates.len() {
                0 => Err(not_found()),
                1 => Ok(candidates.remove(0)),
                _ => Err(LookupError::Ambiguous {
                    query: query.to_owned(),
                    candidates,
                }),
            }
        }
    }
}

/// A task id or prefix named no task, or several.
///
/// The `Display` is short (for logs); [`to_tool_result`](Self::to_tool_result)
/// is what a tool answers the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LookupError {
    /// No task id starts with `query`.
    #[error("no task matches '{}'", truncate_chars(query, ECHO_CHARS))]
    NotFound {
        /// What was asked for.
        query: String,
    },
    /// Several task ids start with `query`.
    #[error("{} tasks match '{}'", candidates.len(), truncate_chars(query, ECHO_CHARS))]
    Ambiguous {
        /// What was asked for.
        query: String,
        /// The matching tasks, in registration order.
        candidates: Vec<TaskSnapshot>,
    },
}

impl LookupError {
    /// What was asked for, cut to [`ECHO_CHARS`] characters (it comes from the
    /// model or the user: a huge "id" must not come back whole).
    #[must_use]
    pub fn shown_query(&self) -> std::borrow::Cow<'_, str> {
        match self {
            LookupError::NotFound { query } | LookupError::Ambiguous { query, .. } => {
                truncate_chars(query, ECHO_CHARS)
            }
        }
    }

    /// The error result a tool answers with (`InvalidToolParams`):
    /// `No async task found with ID or prefix '<id>'.`, or `Ambiguous task ID
    /// prefix '<id>'. Candidates:` with one `- <8 chars>... (<subagent>)` line
    /// per candidate.
    #[must_use]
    pub fn to_tool_result(&self) -> ToolResult {
        let shown = self.shown_query();
        match self {
            LookupError::NotFound { .. } => ToolResult::failure(
                ToolErrorType::InvalidToolParams,
                "Task not found",
                render::task_not_found(&shown),
                format!("Task not found: {shown}"),
            ),
            LookupError::Ambiguous { candidates, .. } => ToolResult::failure(
                ToolErrorType::InvalidToolParams,
                "Ambiguous task ID",
                render::ambiguous_task(&shown, candidates),
                format!(
                    "Ambiguous prefix. Did you mean:\n{}",
                    render::candidate_list(candidates)
                ),
            ),
        }
    }

    /// The error a user's command answers with: `Task not found: <arg>`, or
    /// `Ambiguous task ID. Did you mean:` with one `  - <id> (<subagent>,
    /// <status>)` line per candidate.
    pub(crate) fn to_command_output(&self) -> CommandOutput {
        match self {
            LookupError::Ambiguous { candidates, .. } => {
                let mut lines = vec!["Ambiguous task ID. Did you mean:".to_owned()];
                lines.extend(candidates.iter().map(|task| {
                    format!(
                        "  - {} ({}, {})",
                        task.id(),
                        task.subagent_name(),
                        task.status()
                    )
                }));
                CommandOutput::error(lines.join("\n"))
            }
            _ => CommandOutput::error(format!("Task not found: {}", self.shown_query())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_manager::RegisterTaskInput;
    use pretty_assertions::assert_eq;

    /// A caller that sees the tasks whose subagent is `mine` only.
    #[derive(Debug)]
    struct Mine;

    impl TaskScope for Mine {
        fn includes(&self, task: &TaskSnapshot) -> bool {
            task.subagent_name() == "mine"
        }
    }

    #[test]
    fn a_task_out_of_scope_is_not_found_and_never_a_candidate() {
        let manager = AsyncTaskManager::default();
        for (id, subagent) in [
            ("ab1", "mine"),
            ("ab2", "theirs"),
            ("ab3", "mine"),
            ("cd", "theirs"),
        ] {
            manager
                .register_task(RegisterTaskInput::new(id, subagent, "g"))
                .expect("registered");
        }
        let find = |query: &str| find_task_in(&manager, query, Some(&Mine));
        let ids = |candidates: &[TaskSnapshot]| -> Vec<String> {
            candidates.iter().map(|task| task.id().to_owned()).collect()
        };
        assert_eq!(
            find("ab1").map(|task| task.id().to_owned()),
            Ok("ab1".to_owned())
        );
        // Hidden: exactly what an id no task has answers.
        assert_eq!(
            find("cd"),
            Err(LookupError::NotFound {
                query: "cd".to_owned()
            })
        );
        assert_eq!(
            find("cd").unwrap_err().to_tool_result().llm_content,
            find("zz")
                .unwrap_err()
                .to_tool_result()
                .llm_content
                .replace("zz", "cd")
        );
        assert_eq!(
            find("ab2"),
            Err(LookupError::NotFound {
                query: "ab2".to_owned()
            })
        );
        match find("ab") {
            Err(LookupError::Ambiguous { candidates, .. }) => {
                assert_eq!(ids(&candidates), ["ab1", "ab3"]);
            }
            other => panic!("ambiguous among the visible ones: {other:?}"),
        }
        let other = AsyncTaskManager::default();
        for (id, subagent) in [("xy1", "mine"), ("xy2", "theirs")] {
            other
                .register_task(RegisterTaskInput::new(id, subagent, "g"))
                .expect("registered");
        }
        let one = find_task_in(&other, "xy", Some(&Mine));
        assert_eq!(
            one.map(|task| task.id().to_owned()),
            Ok("xy1".to_owned()),
            "the one visible"
        );
        let all = find_task_in(&other, "xy", None);
        assert!(
            matches!(all, Err(LookupError::Ambiguous { .. })),
            "without a scope"
        );
    }
}
