//! The `task-max-async` limit and the history limit derived from it, and the
//! `task-max-queued` bound on the queue behind it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How many async tasks may run at once: `-1` (unlimited) or `1..=100`.
///
/// This is the `task-max-async` setting. The default is 5. It also bounds how many
/// finished tasks the registry keeps: see [`history_limit`](Self::history_limit).
/// Serialized as the plain integer; deserializing checks the range.
///
/// # Examples
///
/// ```
/// use asynctask_model::MaxAsyncTasks;
///
/// assert_eq!(MaxAsyncTasks::default().get(), 5);
/// assert_eq!(MaxAsyncTasks::new(3)?.history_limit(), 6);
/// assert_eq!(MaxAsyncTasks::UNLIMITED.history_limit(), 10);
/// assert_eq!(
///     MaxAsyncTasks::new(0).unwrap_err().to_string(),
///     "task-max-async must be -1 (unlimited) or an integer between 1 and 100, not 0",
/// );
/// # Ok::<(), asynctask_model::InvalidMaxAsyncTasks>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct MaxAsyncTasks(i8);

impl MaxAsyncTasks {
    /// No limit on running tasks (`-1`).
    pub const UNLIMITED: MaxAsyncTasks = MaxAsyncTasks(-1);
    /// The default limit, 5.
    pub const DEFAULT: MaxAsyncTasks = MaxAsyncTasks(5);
    /// The largest finite limit, 100.
    pub const MAX: MaxAsyncTasks = MaxAsyncTasks(100);
    /// The history limit when running tasks are unlimited.
    pub const UNLIMITED_HISTORY: usize = 10;

    /// Checks a raw setting value.
    ///
    /// # Errors
    ///
    /// [`InvalidMaxAsyncTasks`] unless `value` is `-1` or in `1..=100`.
    pub fn new(value: i64) -> Result<Self, InvalidMaxAsyncTasks> {
        match value {
            -1 => Ok(MaxAsyncTasks::UNLIMITED),
            1..=100 => Ok(MaxAsyncTasks(value as i8)),
            _ => Err(InvalidMaxAsyncTasks { value: Some(value) }),
        }
    }

    /// The raw setting value: `-1` for unlimited, else `1..=100`.
    #[must_use]
    pub fn get(self) -> i64 {
        i64::from(self.0)
    }

    /// The limit as a count, or `None` when unlimited.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_model::MaxAsyncTasks;
    /// assert_eq!(MaxAsyncTasks::default().limit(), Some(5));
    /// assert_eq!(MaxAsyncTasks::UNLIMITED.limit(), None);
    /// ```
    #[must_use]
    pub fn limit(self) -> Option<usize> {
        usize::try_from(self.0).ok()
    }

    /// Whether this is the unlimited setting.
    #[must_use]
    pub fn is_unlimited(self) -> bool {
        self.0 == -1
    }

    /// How many finished (terminal) tasks the registry keeps once they have been
    /// delivered: twice the limit, or 10 when unlimited.
    #[must_use]
    pub fn history_limit(self) -> usize {
        match self.limit() {
            Some(max) => 2 * max,
            None => MaxAsyncTasks::UNLIMITED_HISTORY,
        }
    }

    /// Whether `running` tasks (plus reservations) leave room for one more.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_model::MaxAsyncTasks;
    /// let max = MaxAsyncTasks::new(2)?;
    /// assert!(max.admits(1));
    /// assert!(!max.admits(2));
    /// assert!(MaxAsyncTasks::UNLIMITED.admits(usize::MAX));
    /// # Ok::<(), asynctask_model::InvalidMaxAsyncTasks>(())
    /// ```
    #[must_use]
    pub fn admits(self, running: usize) -> bool {
        self.limit().is_none_or(|max| running < max)
    }
}

impl Default for MaxAsyncTasks {
    fn default() -> Self {
        MaxAsyncTasks::DEFAULT
    }
}

impl fmt::Display for MaxAsyncTasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl TryFrom<i64> for MaxAsyncTasks {
    type Error = InvalidMaxAsyncTasks;

    fn try_from(value: i64) -> Result<Self, Self::Error> {
        MaxAsyncTasks::new(value)
    }
}

impl From<MaxAsyncTasks> for i64 {
    fn from(max: MaxAsyncTasks) -> i64 {
        max.get()
    }
}

impl FromStr for MaxAsyncTasks {
    type Err = InvalidMaxAsyncTasks;

    /// Parses the setting as text (`"-1"`, `"5"`); text that is not an integer
    /// is refused with [`InvalidMaxAsyncTasks::NOT_AN_INTEGER`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().parse::<i64>() {
            Ok(value) => MaxAsyncTasks::new(value),
            Err(_) => Err(InvalidMaxAsyncTasks::NOT_AN_INTEGER),
        }
    }
}

/// A `task-max-async` value outside `-1` and `1..=100`, or not an integer at
/// all.
///
/// Its `Display` is the user-facing refusal: the rule, then what was given.
///
/// # Examples
///
/// ```
/// use asynctask_model::{InvalidMaxAsyncTasks, MaxAsyncTasks};
///
/// let err = MaxAsyncTasks::new(101).unwrap_err();
/// assert_eq!(err.value, Some(101));
/// assert_eq!(err.to_string(), "task-max-async must be -1 (unlimited) or an integer between 1 and 100, not 101");
///
/// let err = "five".parse::<MaxAsyncTasks>().unwrap_err();
/// assert_eq!(err, InvalidMaxAsyncTasks::NOT_AN_INTEGER);
/// assert_eq!(err.to_string(), "task-max-async must be -1 (unlimited) or an integer between 1 and 100; the value given is not an integer");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "task-max-async must be -1 (unlimited) or an integer between 1 and 100{}",
    Given(*value)
)]
pub struct InvalidMaxAsyncTasks {
    /// The integer that was refused; `None` when the value was not an integer.
    pub value: Option<i64>,
}

impl InvalidMaxAsyncTasks {
    /// The refusal of a value that is not an integer (text that does not
    /// parse, a fraction, a boolean, `null`).
    pub const NOT_AN_INTEGER: InvalidMaxAsyncTasks = InvalidMaxAsyncTasks { value: None };
}

/// What an [`InvalidMaxAsyncTasks`] was given, as the end of its message.
struct Given(Option<i64>);

impl fmt::Display for Given {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(value) => write!(f, ", not {value}"),
            None => f.write_str("; the value given is not an integer"),
        }
    }
}

/// How many async tasks may wait for a running slot: `0..=1000`.
///
/// This is the `task-max-queued` setting. A launch past
/// [`MaxAsyncTasks`] is accepted as **queued** while fewer than this many wait,
/// and starts, in launch order, when a slot frees; past it, the launch is
/// refused. The default, 0, keeps no queue: every launch past the limit is
/// refused. Serialized as the plain integer; deserializing checks the range.
///
/// # Examples
///
/// ```
/// use asynctask_model::MaxQueuedTasks;
///
/// assert_eq!(MaxQueuedTasks::default().get(), 0);
/// assert!(MaxQueuedTasks::new(20)?.admits(19));
/// assert!(!MaxQueuedTasks::new(20)?.admits(20));
/// assert_eq!(
///     MaxQueuedTasks::new(1001).unwrap_err().to_string(),
///     "task-max-queued must be an integer between 0 and 1000, not 1001",
/// );
/// # Ok::<(), asynctask_model::InvalidMaxQueuedTasks>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct MaxQueuedTasks(u16);

impl MaxQueuedTasks {
    /// No queue: a launch past the running limit is refused (the default).
    pub const NONE: MaxQueuedTasks = MaxQueuedTasks(0);
    /// The largest queue, 1000.
    pub const MAX: MaxQueuedTasks = MaxQueuedTasks(1000);

    /// Checks a raw setting value.
    ///
    /// # Errors
    ///
    /// [`InvalidMaxQueuedTasks`] unless `value` is in `0..=1000`.
    pub fn new(value: i64) -> Result<Self, InvalidMaxQueuedTasks> {
        match u16::try_from(value) {
            Ok(value) if value <= MaxQueuedTasks::MAX.0 => Ok(MaxQueuedTasks(value)),
            _ => Err(InvalidMaxQueuedTasks { value: Some(value) }),
        }
    }

    /// [`new`](Self::new) in a `const` context: `None` unless `value` is in
    /// `0..=1000`.
    ///
    /// ```
    /// use asynctask_model::MaxQueuedTasks;
    /// const QUEUE: Option<MaxQueuedTasks> = MaxQueuedTasks::new_const(20);
    /// assert_eq!(QUEUE.map(MaxQueuedTasks::get), Some(20));
    /// assert_eq!(MaxQueuedTasks::new_const(1001), None);
    /// ```
    #[must_use]
    pub const fn new_const(value: u16) -> Option<Self> {
        if value <= MaxQueuedTasks::MAX.0 {
            Some(MaxQueuedTasks(value))
        } else {
            None
        }
    }

    /// The raw setting value.
    #[must_use]
    pub fn get(self) -> i64 {
        i64::from(self.0)
    }

    /// The bound as a count.
    #[must_use]
    pub fn limit(self) -> usize {
        usize::from(self.0)
    }

    /// Whether `queued` waiting tasks leave room for one more.
    #[must_use]
    pub fn admits(self, queued: usize) -> bool {
        queued < self.limit()
    }
}

impl fmt::Display for MaxQueuedTasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl TryFrom<i64> for MaxQueuedTasks {
    type Error = InvalidMaxQueuedTasks;

    fn try_from(value: i64) -> Result<Self, Self::Error> {
        MaxQueuedTasks::new(value)
    }
}

impl From<MaxQueuedTasks> for i64 {
    fn from(max: MaxQueuedTasks) -> i64 {
        max.get()
    }
}

impl FromStr for MaxQueuedTasks {
    type Err = InvalidMaxQueuedTasks;

    /// Parses the setting as text; text that is not an integer is refused with
    /// [`InvalidMaxQueuedTasks::NOT_AN_INTEGER`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().parse::<i64>() {
            Ok(value) => MaxQueuedTasks::new(value),
            Err(_) => Err(InvalidMaxQueuedTasks::NOT_AN_INTEGER),
        }
    }
}

/// A `task-max-queued` value outside `0..=1000`, or not an integer at all. Its
/// `Display` is the user-facing refusal: the rule, then what was given.
///
/// # Examples
///
/// ```
/// let err = "many".parse::<asynctask_model::MaxQueuedTasks>().unwrap_err();
/// assert_eq!(err.to_string(), "task-max-queued must be an integer between 0 and 1000; the value given is not an integer");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("task-max-queued must be an integer between 0 and 1000{}", Given(*value))]
pub struct InvalidMaxQueuedTasks {
    /// The integer that was refused; `None` when the value was not an integer.
    pub value: Option<i64>,
}

impl InvalidMaxQueuedTasks {
    /// The refusal of a value that is not an integer.
    pub const NOT_AN_INTEGER: InvalidMaxQueuedTasks = InvalidMaxQueuedTasks { value: None };
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_queue_bound_accepts_exactly_zero_to_a_thousand() {
        let accepted: Vec<i64> = (-5..=1005)
            .filter(|v| MaxQueuedTasks::new(*v).is_ok())
            .collect();
        assert_eq!(accepted, (0..=1000).collect::<Vec<i64>>());
        assert!(MaxQueuedTasks::new(i64::MAX).is_err());
        assert!(!MaxQueuedTasks::NONE.admits(0), "no queue at all");
    }

    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn accepts_exactly_minus_one_and_one_to_hundred() {
        let accepted: Vec<i64> = (-300..=300)
            .filter(|v| MaxAsyncTasks::new(*v).is_ok())
            .collect();
        let mut expected = vec![-1];
        expected.extend(1..=100);
        assert_eq!(accepted, expected);
        for v in [i64::MIN, i64::MAX, -2, 0, 101] {
            assert_eq!(
                MaxAsyncTasks::new(v),
                Err(InvalidMaxAsyncTasks { value: Some(v) })
            );
        }
    }

    #[test]
    fn get_round_trips() {
        for v in std::iter::once(-1).chain(1..=100) {
            assert_eq!(MaxAsyncTasks::new(v).unwrap().get(), v);
        }
    }

    #[test]
    fn history_limit_is_twice_max_or_ten() {
        assert_eq!(MaxAsyncTasks::new(1).unwrap().history_limit(), 2);
        assert_eq!(MaxAsyncTasks::default().history_limit(), 10);
        assert_eq!(MaxAsyncTasks::MAX.history_limit(), 200);
        assert_eq!(MaxAsyncTasks::UNLIMITED.history_limit(), 10);
    }

    #[test]
    fn admits_counts_against_the_limit() {
        let three = MaxAsyncTasks::new(3).unwrap();
        assert_eq!(
            (0..5).map(|n| three.admits(n)).collect::<Vec<_>>(),
            [true, true, true, false, false]
        );
    }

    #[test]
    fn serde_is_the_plain_integer_and_checks_range() {
        assert_eq!(
            serde_json::to_string(&MaxAsyncTasks::UNLIMITED).unwrap(),
            "-1"
        );
        assert_eq!(serde_json::from_str::<MaxAsyncTasks>("7").unwrap().get(), 7);
        let err = serde_json::from_str::<MaxAsyncTasks>("0").unwrap_err();
        assert_eq!(
            err.to_string(),
            "task-max-async must be -1 (unlimited) or an integer between 1 and 100, not 0"
        );
    }

    #[test]
    fn from_str_refuses_non_integers_saying_so() {
        assert_eq!("12".parse::<MaxAsyncTasks>().unwrap().get(), 12);
        assert_eq!(
            " -1 ".parse::<MaxAsyncTasks>().unwrap(),
            MaxAsyncTasks::UNLIMITED
        );
        for bad in ["", "five", "2.5", "1e3"] {
            assert_eq!(
                bad.parse::<MaxAsyncTasks>().unwrap_err().to_string(),
                "task-max-async must be -1 (unlimited) or an integer between 1 and 100; \
                 the value given is not an integer"
            );
        }
        assert_eq!(
            "0".parse::<MaxAsyncTasks>(),
            Err(InvalidMaxAsyncTasks { value: Some(0) })
        );
    }
}
