//! Caps beyond concurrency: how many subagents one session may launch in
//! all ([`LaunchBudget`]), and how deep subagents that launch subagents may
//! nest ([`Nesting`]).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The environment variable that tells a subagent its nesting depth: `1` for
/// a subagent the host launched, `2` for one that subagent launched, and so
/// on. A server started inside a subagent (an `asynctask mcp` its coding CLI
/// runs) reads it, so that what it launches is one deeper.
///
/// ```
/// assert_eq!(asynctask_tools::DEPTH_ENV, "ASYNCTASK_DEPTH");
/// ```
pub const DEPTH_ENV: &str = "ASYNCTASK_DEPTH";

/// The environment variable that gives a subagent the id of its task. Every
/// subagent a process runner starts has it, so a server that finds it set
/// knows it runs inside a subagent, whatever [`DEPTH_ENV`] says.
///
/// ```
/// assert_eq!(asynctask_tools::TASK_ID_ENV, "ASYNCTASK_TASK_ID");
/// ```
pub const TASK_ID_ENV: &str = "ASYNCTASK_TASK_ID";

/// How many subagents one session may launch over its life, synchronous or
/// in the background: a cheap handle on one shared count. A launch takes one
/// from it before anything starts and gives it back if the launch is refused
/// for another reason (the running limit, say), so only subagents that run
/// (or wait in the queue to) count.
///
/// # Examples
///
/// ```
/// use asynctask_tools::LaunchBudget;
///
/// let budget = LaunchBudget::new(2);
/// let shared = budget.clone();
/// let first = budget.take().unwrap();
/// first.keep(); // the subagent started: the launch counts
/// let second = shared.take().unwrap();
/// let refused = budget.take().unwrap_err();
/// assert_eq!(refused.max, 2);
/// drop(second); // refused for another reason: given back
/// assert_eq!((budget.used(), budget.max()), (1, 2));
/// ```
#[derive(Clone)]
pub struct LaunchBudget {
    max: u32,
    used: Arc<AtomicU32>,
}

impl LaunchBudget {
    /// A budget of `max` launches, none used.
    #[must_use]
    pub fn new(max: u32) -> Self {
        LaunchBudget {
            max,
            used: Arc::new(AtomicU32::new(0)),
        }
    }

    /// The most launches the budget allows.
    #[must_use]
    pub fn max(&self) -> u32 {
        self.max
    }

    /// The launches taken so far (and not given back).
    #[must_use]
    pub fn used(&self) -> u32 {
        self.used.load(Ordering::SeqCst)
    }

    /// Takes one launch; refused when all are used. The launch is given back
    /// when the returned ticket is dropped without being
    /// [kept](LaunchTicket::keep).
    ///
    /// # Errors
    ///
    /// [`LaunchCapReached`] when the budget is spent.
    pub fn take(&self) -> Result<LaunchTicket, LaunchCapReached> {
        // Never past `max`, however many threads take at once.
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                (used < self.max).then_some(used + 1)
            })
            .map(|_| LaunchTicket {
                used: Some(Arc::clone(&self.used)),
            })
            .map_err(|_| LaunchCapReached { max: self.max })
    }
}

impl fmt::Debug for LaunchBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchBudget")
            .field("max", &self.max)
            .field("used", &self.used())
            .finish()
    }
}

/// One launch taken from a [`LaunchBudget`]: given back when dropped, unless
/// [kept](Self::keep).
#[derive(Debug)]
#[must_use = "a ticket dropped at once gives its launch back"]
pub struct LaunchTicket {
    used: Option<Arc<AtomicU32>>,
}

impl LaunchTicket {
    /// The launch happened: it stays counted.
    pub fn keep(mut self) {
        self.used = None;
    }
}

impl Drop for LaunchTicket {
    fn drop(&mut self) {
        if let Some(used) = self.used.take() {
            used.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A session launched all the subagents its [`LaunchBudget`] allows. Its
/// `Display` is the reason the model reads.
///
/// ```
/// let refused = asynctask_tools::LaunchCapReached { max: 200 };
/// assert_eq!(refused.to_string(), "Launch limit reached: this session has launched 200 subagents, the most one session may");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "Launch limit reached: this session has launched {max} subagents, the most one session may"
)]
pub struct LaunchCapReached {
    /// The session's budget.
    pub max: u32,
}

/// Where the caller stands among nested subagents, and how deep they may go.
///
/// The host (or a server serving a client that is no subagent of ours) is at
/// depth 0; the subagents it launches are at depth 1, and told so in
/// [`DEPTH_ENV`]. A server that runs inside a subagent reads its depth from
/// there, and refuses a launch whose subagent would be deeper than
/// `max_depth`.
///
/// A server that runs inside a subagent ([`TASK_ID_ENV`] is set) but cannot
/// read its depth (the client that started it dropped [`DEPTH_ENV`], or it is
/// not a positive integer) does not start again at 0: its depth is unknown
/// ([`depth_unknown`](Self::depth_unknown)), and it is taken to be as deep as
/// the cap allows, so it launches nothing (fail closed).
///
/// # Examples
///
/// ```
/// use asynctask_tools::Nesting;
///
/// let top = Nesting::top().with_max_depth(Some(2));
/// assert!(top.admits_launch().is_ok());
/// let inside = Nesting::at(2).with_max_depth(Some(2));
/// assert_eq!(inside.admits_launch().unwrap_err().to_string(),
///     "Nesting limit reached: this session runs inside a subagent at depth 2, and subagents may nest at most 2 deep");
/// assert_eq!(Nesting::from_env_value(Some(" 3 ")), Nesting::at(3));
/// assert_eq!(Nesting::from_env_value(Some("deep")), Nesting::top());
/// // Inside a subagent, a depth that cannot be read fails closed.
/// let lost = Nesting::from_env_values(None, Some("0f3a9c21-1")).with_max_depth(Some(2));
/// assert!(lost.depth_unknown && lost.admits_launch().is_err());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Nesting {
    /// The caller's depth: 0 outside any subagent.
    pub depth: u32,
    /// The deepest a subagent may run (`None`: no cap).
    pub max_depth: Option<u32>,
    /// The caller runs inside a subagent whose depth could not be read: it
    /// is taken to be at least 1 deep, and as deep as the cap.
    pub depth_unknown: bool,
}

impl Nesting {
    /// Outside any subagent, with no cap.
    #[must_use]
    pub fn top() -> Self {
        Nesting::default()
    }

    /// At `depth`, with no cap.
    #[must_use]
    pub fn at(depth: u32) -> Self {
        Nesting {
            depth,
            max_depth: None,
            depth_unknown: false,
        }
    }

    /// Inside a subagent whose depth could not be read: at least 1 deep, and
    /// as deep as the cap once one is set (see [`depth_unknown`](Self::depth_unknown)).
    #[must_use]
    pub fn unknown() -> Self {
        Nesting {
            depth: 1,
            max_depth: None,
            depth_unknown: true,
        }
    }

    /// Whether the caller runs inside a subagent (its depth is at least 1, or
    /// unknown).
    #[must_use]
    pub fn is_nested(self) -> bool {
        self.depth > 0 || self.depth_unknown
    }

    /// The depth a [`DEPTH_ENV`] value gives: its integer, or 0 when it is
    /// unset or not an integer.
    #[must_use]
    pub fn from_env_value(value: Option<&str>) -> Self {
        let depth = value.and_then(|value| value.trim().parse().ok());
        Nesting::at(depth.unwrap_or(0))
    }

    /// The nesting a [`DEPTH_ENV`] value and a [`TASK_ID_ENV`] value give.
    /// Without a task id, as [`from_env_value`](Self::from_env_value). With
    /// one the caller runs inside a subagent: the depth is the integer when
    /// it is at least 1, and [unknown](Self::unknown) otherwise (missing,
    /// not an integer, or 0).
    #[must_use]
    pub fn from_env_values(depth: Option<&str>, task_id: Option<&str>) -> Self {
        if task_id.is_none_or(str::is_empty) {
            return Nesting::from_env_value(depth);
        }
        match depth.and_then(|value| value.trim().parse::<u32>().ok()) {
            Some(depth @ 1..) => Nesting::at(depth),
            _ => Nesting::unknown(),
        }
    }

    /// The nesting this process's environment gives ([`DEPTH_ENV`] and
    /// [`TASK_ID_ENV`], see [`from_env_values`](Self::from_env_values)); logs
    /// a warning when it runs inside a subagent whose depth it cannot read.
    #[must_use]
    pub fn from_env() -> Self {
        let depth = std::env::var(DEPTH_ENV).ok();
        let task_id = std::env::var(TASK_ID_ENV).ok();
        let nesting = Nesting::from_env_values(depth.as_deref(), task_id.as_deref());
        if nesting.depth_unknown {
            tracing::warn!(
                depth = depth.as_deref().unwrap_or("(unset)"),
                "this process runs inside a subagent (${TASK_ID_ENV} is set) but ${DEPTH_ENV} is \
                 missing or not a positive integer: it is taken to be as deep as subagents may \
                 nest, and launches none; let the client pass ${DEPTH_ENV} on"
            );
        }
        nesting
    }

    /// Replaces the cap. A caller whose depth is
    /// [unknown](Self::depth_unknown) is taken to be as deep as the cap.
    #[must_use]
    pub fn with_max_depth(mut self, max_depth: Option<u32>) -> Self {
        self.max_depth = max_depth;
        if self.depth_unknown {
            self.depth = self.depth.max(max_depth.unwrap_or(1)).max(1);
        }
        self
    }

    /// The depth of the subagents this caller launches.
    #[must_use]
    pub fn child_depth(self) -> u32 {
        self.depth.saturating_add(1)
    }

    /// Whether this caller may launch a subagent.
    ///
    /// # Errors
    ///
    /// [`NestingTooDeep`] when the subagent would run deeper than the cap.
    pub fn admits_launch(self) -> Result<(), NestingTooDeep> {
        match self.max_depth {
            Some(max_depth) if self.child_depth() > max_depth => Err(NestingTooDeep {
                depth: self.depth,
                max_depth,
            }),
            _ => Ok(()),
        }
    }
}

/// A launch from inside a subagent nested as deep as allowed. Its `Display`
/// is the reason the model reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "Nesting limit reached: this session runs inside a subagent at depth {depth}, and subagents \
     may nest at most {max_depth} deep"
)]
pub struct NestingTooDeep {
    /// The caller's depth.
    pub depth: u32,
    /// The cap.
    pub max_depth: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_shared_by_threads_is_never_overdrawn_and_refunds_what_is_not_kept() {
        let budget = LaunchBudget::new(50);
        let kept = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let budget = budget.clone();
                    scope.spawn(move || {
                        let mut kept = 0;
                        for n in 0..20 {
                            if let Ok(ticket) = budget.take() {
                                // Every other one is refused later and given back.
                                if n % 2 == 0 {
                                    ticket.keep();
                                    kept += 1;
                                }
                            }
                        }
                        kept
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .sum::<u32>()
        });
        assert_eq!(budget.used(), kept, "every ticket not kept was given back");
        assert!(kept <= 50, "{kept}");
    }

    #[test]
    fn a_subagent_whose_depth_cannot_be_read_is_as_deep_as_the_cap() {
        let task = Some("0f3a9c21-1");
        for depth in [None, Some(""), Some("deep"), Some("-1"), Some("0")] {
            let nesting = Nesting::from_env_values(depth, task);
            assert_eq!(nesting, Nesting::unknown(), "{depth:?}");
            assert!(nesting.is_nested());
            let capped = nesting.with_max_depth(Some(3));
            assert_eq!((capped.depth, capped.depth_unknown), (3, true));
            assert_eq!(
                capped.admits_launch(),
                Err(NestingTooDeep {
                    depth: 3,
                    max_depth: 3
                })
            );
        }
        assert_eq!(Nesting::from_env_values(Some("2"), task), Nesting::at(2));
        // Outside a subagent, the depth alone counts (an empty id is none).
        assert_eq!(Nesting::from_env_values(None, None), Nesting::top());
        assert_eq!(
            Nesting::from_env_values(Some("x"), Some("")),
            Nesting::top()
        );
        assert!(!Nesting::top().is_nested());
    }

    #[test]
    fn zero_depth_cap_refuses_every_launch_and_no_cap_refuses_none() {
        assert!(
            Nesting::top()
                .with_max_depth(Some(0))
                .admits_launch()
                .is_err()
        );
        assert!(Nesting::at(u32::MAX).admits_launch().is_ok());
        assert_eq!(Nesting::at(u32::MAX).child_depth(), u32::MAX);
    }
}
