//! Sessions sharing one registry (a durable supervisor's clients): who is
//! connected, and which tasks each owns — sees, acts on, and takes the
//! results of.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use asynctask_manager::{AsyncTaskManager, TaskSnapshot};
use asynctask_runtime::ClaimLedger;
use asynctask_tools::{LaunchBudget, Nesting};

use crate::tasks::{FollowJournal, TaskHandles};

/// The sessions connected to one registry right now (a durable supervisor's
/// clients), which decides which tasks each owns.
///
/// A cheap handle (clones share the set). A session joins with
/// [`join`](Self::join) and leaves when its [`Session`] is dropped.
///
/// A session owns the tasks it launched and the tasks it adopted; it sees,
/// acts on and takes the results of those only ([`Session::owns`]). When a
/// session leaves, the tasks it owns — running or finished — pass to the
/// next session at depth 0 (one whose client runs in no subagent of ours)
/// that looks at them; so do tasks whose session is unknown (launched before
/// the supervisor restarted). A session inside a subagent (depth 1 or more,
/// or a depth it could not read) adopts nothing: it owns only what it
/// launched, and never sees a task of a shallower session or of a sibling.
///
/// # Examples
///
/// ```
/// use std::collections::BTreeSet;
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_mcp::Sessions;
///
/// let manager = AsyncTaskManager::default();
/// let sessions = Sessions::default();
/// let (a, b) = (sessions.join(&BTreeSet::new()), sessions.join(&BTreeSet::new()));
/// let task = manager.register_task(RegisterTaskInput::new("t1", "s", "g").with_origin(a.id()))?;
/// assert!(a.may_claim(&task) && !b.may_claim(&task));
/// drop(a); // gone: the next session that calls takes its results
/// assert!(b.may_claim(&task));
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[derive(Clone, Default)]
pub struct Sessions {
    connected: Arc<Mutex<Members>>,
    /// Told when a session leaves: waiters in the others may claim its
    /// pending results now.
    ledger: Option<ClaimLedger>,
    /// The tasks clients follow as MCP Tasks, whichever session created
    /// them: a client that restarts its server (a new session) polls them
    /// again, and no session's reminder takes their results meanwhile.
    followed: TaskHandles,
}

/// Who is connected, and which tasks passed to another session than the one
/// that launched them.
#[derive(Default)]
struct Members {
    /// By id, each with whether its client declared the tasks extension
    /// (it polls the tasks it follows).
    connected: BTreeMap<String, bool>,
    /// Task id → the connected session that adopted it. An entry goes when
    /// its session leaves: the task then passes on again.
    adopted: BTreeMap<String, String>,
}

impl Sessions {
    /// No session yet, on the registry whose claims `ledger` keeps: a session
    /// that leaves wakes the ledger's waiters.
    #[must_use]
    pub fn on(ledger: ClaimLedger) -> Self {
        Sessions {
            connected: Arc::default(),
            ledger: Some(ledger),
            followed: TaskHandles::default(),
        }
    }

    /// The same sessions, whose followed tasks (those clients follow as MCP
    /// Tasks) are journaled in `journal` and start as `restored` (id, followed
    /// since: what the journal held when the process started). A durable
    /// supervisor restarted from its store thus keeps a followed task's result
    /// for the polls, as before it restarted, for
    /// [`TASK_RESULT_HOLD`](crate::TASK_RESULT_HOLD) from its start (or the
    /// task's end, when later), and keeps polls answering until the task's
    /// [`TASK_TTL`](crate::TASK_TTL) has passed and it has ended; a result no
    /// poll took is delivered as any other (a System Note on a tool result). The tasks of
    /// `restored` already past that, by `manager`'s clock and tasks, are
    /// forgotten at once. Call it before any session joins.
    #[must_use]
    pub fn with_followed(
        mut self,
        journal: Arc<dyn FollowJournal>,
        restored: impl IntoIterator<Item = (String, u64)>,
        manager: &AsyncTaskManager,
    ) -> Self {
        let now = manager.clock().now_ms();
        self.followed = TaskHandles::journaled(journal, restored, now);
        self.followed.prune(manager, manager.clock().now_ms());
        self
    }

    fn lock(&self) -> MutexGuard<'_, Members> {
        // Maps of names, consistent after every statement.
        self.connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A new session, connected until the returned handle is dropped. Its id is
    /// fresh and random, drawn again while it is a connected session's or one of
    /// `recorded` (the origins the registry holds, restored ones included), so
    /// no two sessions ever share an id and a new one never inherits another's
    /// tasks.
    #[must_use]
    pub fn join(&self, recorded: &BTreeSet<String>) -> Session {
        self.join_drawing(recorded, uuid_head)
    }

    /// [`join`](Self::join), with ids drawn by `draw`.
    fn join_drawing(
        &self,
        recorded: &BTreeSet<String>,
        mut draw: impl FnMut() -> String,
    ) -> Session {
        let mut members = self.lock();
        let id = loop {
            let id = draw();
            if !recorded.contains(&id) && !members.connected.contains_key(&id) {
                break id;
            }
        };
        members.connected.insert(id.clone(), false);
        drop(members);
        Session {
            id,
            sessions: self.clone(),
            launches: None,
            nesting: None,
        }
    }

    /// How many sessions are connected.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().connected.len()
    }

    /// Whether no session is connected.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.lock().connected.is_empty()
    }

    /// Whether a connected session's client declared the tasks extension:
    /// someone may still poll the tasks clients follow.
    pub(crate) fn any_polls(&self) -> bool {
        self.lock().connected.values().any(|declared| *declared)
    }
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.lock().connected.keys()).finish()
    }
}

/// The first 8 hex digits of a random UUID: short enough to show the model, and
/// with 32 random bits, new every time for all practical purposes.
fn uuid_head() -> String {
    let mut id = uuid::Uuid::new_v4().simple().to_string();
    id.truncate(8);
    id
}

/// One connected session; dropping it is leaving (its [`Sessions`] wakes the
/// waits of the others, which may take its results now).
pub struct Session {
    id: String,
    sessions: Sessions,
    launches: Option<LaunchBudget>,
    nesting: Option<Nesting>,
}

impl Session {
    /// Caps the subagents this session may launch in all (see
    /// [`LaunchBudget`]).
    #[must_use]
    pub fn with_launches(mut self, budget: LaunchBudget) -> Self {
        self.launches = Some(budget);
        self
    }

    /// Says how deep the session's client is nested among subagents (a
    /// client running inside one of our subagents tells its front, which
    /// tells the supervisor).
    #[must_use]
    pub fn with_nesting(mut self, nesting: Nesting) -> Self {
        self.nesting = Some(nesting);
        self
    }

    /// The session's launch budget, if it has one.
    #[must_use]
    pub fn launches(&self) -> Option<&LaunchBudget> {
        self.launches.as_ref()
    }

    /// Where the session stands among nested subagents, if it said.
    #[must_use]
    pub fn nesting(&self) -> Option<Nesting> {
        self.nesting
    }

    /// Its client declared the tasks extension (on a request): it polls the
    /// tasks it follows.
    pub(crate) fn declare_tasks(&self) {
        if let Some(declared) = self.sessions.lock().connected.get_mut(&self.id) {
            *declared = true;
        }
    }

    /// Whether a session of its set (itself included) has a client that
    /// declared the tasks extension.
    pub(crate) fn any_polls(&self) -> bool {
        self.sessions.any_polls()
    }

    /// The tasks followed as MCP Tasks by the clients of every session of
    /// its set.
    pub(crate) fn followed(&self) -> &TaskHandles {
        &self.sessions.followed
    }

    /// The session's id, recorded as the origin of the tasks it launches.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the session runs inside a subagent (its depth is 1 or more,
    /// or unknown): it adopts nothing.
    fn is_nested(&self) -> bool {
        self.nesting.is_some_and(Nesting::is_nested)
    }

    /// Whether this session owns `task`: it sees it, acts on it (peek,
    /// message, answer, end) and takes its result.
    ///
    /// A session owns the tasks it launched, and those it adopted. A task
    /// whose owner is no connected session (it left, or the task was
    /// launched before this supervisor started, or by no session) is
    /// adopted here, by the first session at depth 0 that asks: it owns the
    /// task from then on, until it leaves in turn. A session inside a
    /// subagent adopts nothing.
    #[must_use]
    pub fn owns(&self, task: &TaskSnapshot) -> bool {
        let mut members = self.sessions.lock();
        let owner = members
            .adopted
            .get(task.id())
            .map(String::as_str)
            .or(task.origin());
        match owner {
            Some(owner) if owner == self.id => true,
            Some(owner) if members.connected.contains_key(owner) => false,
            _ if self.is_nested() => false,
            _ => {
                members
                    .adopted
                    .insert(task.id().to_owned(), self.id.clone());
                true
            }
        }
    }

    /// Whether this session may claim `task`'s result: whether it
    /// [owns](Self::owns) it (which may adopt it). A result goes to the
    /// session that owns its task; when that session leaves, to the next
    /// session at depth 0 that calls.
    #[must_use]
    pub fn may_claim(&self, task: &TaskSnapshot) -> bool {
        self.owns(task)
    }
}

impl asynctask_tools::TaskScope for Session {
    fn includes(&self, task: &TaskSnapshot) -> bool {
        self.owns(task)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        {
            let mut members = self.sessions.lock();
            members.connected.remove(&self.id);
            // What it adopted passes on again.
            members.adopted.retain(|_, owner| *owner != self.id);
        }
        // The set's lock is released: a waiter woken here looks at it.
        if let Some(ledger) = &self.sessions.ledger {
            ledger.notify_changed();
        }
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("launches", &self.launches)
            .field("nesting", &self.nesting)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};

    #[test]
    fn a_session_id_in_use_is_drawn_again() {
        let sessions = Sessions::default();
        let mut draws = ["aaaaaaaa", "aaaaaaaa", "cccccccc", "bbbbbbbb"].into_iter();
        let mut draw = || draws.next().expect("enough draws").to_owned();
        let recorded = BTreeSet::from(["cccccccc".to_owned()]);
        let first = sessions.join_drawing(&recorded, &mut draw);
        let second = sessions.join_drawing(&recorded, &mut draw);
        assert_eq!((first.id(), second.id()), ("aaaaaaaa", "bbbbbbbb"));
        assert_eq!(sessions.len(), 2);
    }

    #[test]
    fn a_session_claims_its_own_results_and_those_of_sessions_gone() {
        let sessions = Sessions::default();
        let none = BTreeSet::new();
        let (a, b) = (sessions.join(&none), sessions.join(&none));
        assert_ne!(a.id(), b.id());
        for id in [a.id(), b.id()] {
            assert!(
                id.len() == 8 && id.chars().all(|c| c.is_ascii_hexdigit()),
                "{id}"
            );
        }
        assert_eq!(sessions.len(), 2);
        let manager = AsyncTaskManager::default();
        let register = |id: &str, origin: Option<&str>| {
            let input = RegisterTaskInput::new(id, "s", "g");
            let input = match origin {
                Some(origin) => input.with_origin(origin),
                None => input,
            };
            manager.register_task(input).expect("registered")
        };
        let of_a = register("1", Some(a.id()));
        let of_b = register("2", Some(b.id()));
        let of_nobody = register("3", None);
        assert!(a.may_claim(&of_a) && !a.may_claim(&of_b));
        assert!(a.may_claim(&of_nobody));
        drop(b);
        assert!(a.may_claim(&of_b), "its session is gone");
        assert_eq!(sessions.len(), 1);
    }

    #[test]
    fn a_task_passes_to_one_next_session_at_depth_0_and_never_to_a_nested_one() {
        let sessions = Sessions::default();
        let none = BTreeSet::new();
        let manager = AsyncTaskManager::default();
        let register = |id: &str, origin: &str| {
            manager
                .register_task(RegisterTaskInput::new(id, "s", "g").with_origin(origin))
                .expect("registered")
        };
        let a = sessions.join(&none);
        let nested = sessions.join(&none).with_nesting(Nesting::at(1));
        let lost = sessions.join(&none).with_nesting(Nesting::unknown());
        let of_a = register("1", a.id());
        let of_nested = register("2", nested.id());
        assert!(a.owns(&of_a) && nested.owns(&of_nested));
        assert!(
            !nested.owns(&of_a) && !lost.owns(&of_a),
            "a shallower session's"
        );
        assert!(!a.owns(&of_nested), "a connected session's, however deep");

        drop(a);
        assert!(!nested.owns(&of_a), "a nested session adopts nothing");
        assert!(!lost.owns(&of_a), "nor one whose depth is unknown");
        let (b, c) = (sessions.join(&none), sessions.join(&none));
        assert!(!c.owns(&of_nested), "its session is still connected");
        assert!(
            b.owns(&of_a),
            "the next session at depth 0 that looks adopts it"
        );
        assert!(!c.owns(&of_a), "one next session only");
        assert!(b.owns(&of_a));

        drop(b);
        assert!(c.owns(&of_a), "what b adopted passes on again");
        drop(nested);
        assert!(
            c.owns(&of_nested),
            "a nested session's task passes up once it is gone"
        );
        let restored = register("3", "gone0000");
        assert!(
            !lost.owns(&restored) && c.owns(&restored),
            "an unknown session's"
        );
    }
}
