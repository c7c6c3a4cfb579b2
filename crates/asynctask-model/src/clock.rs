//! Where time comes from: the [`Clock`] trait, the system clock and a manual one.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in Unix milliseconds.
///
/// Every timestamp asynctask records (`launched_at`, `completed_at`,
/// `notified_at`, continuation times) comes from a `Clock`, so tests can control
/// time with [`ManualClock`] instead of sleeping.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use asynctask_model::{Clock, ManualClock, SystemClock};
///
/// let clocks: Vec<Arc<dyn Clock>> = vec![Arc::new(SystemClock), Arc::new(ManualClock::new(7))];
/// assert!(clocks[0].now_ms() > 1_600_000_000_000);
/// assert_eq!(clocks[1].now_ms(), 7);
/// ```
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time in Unix milliseconds.
    fn now_ms(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

/// The real wall clock ([`SystemTime::now`]).
///
/// A system clock set before 1970 reads as `0`; one past the year 584 million
/// saturates. Neither panics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| {
                u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
            })
    }
}

/// A clock that only moves when told to; clones share one time.
///
/// Give one clone to the code under test and keep another to move time.
/// [`advance`](Self::advance) saturates at `u64::MAX` rather than overflowing.
///
/// # Examples
///
/// ```
/// use asynctask_model::{Clock, ManualClock};
///
/// let clock = ManualClock::new(1_000);
/// let shared = clock.clone();
/// clock.advance(500);
/// assert_eq!(shared.now_ms(), 1_500);
/// shared.set(10);
/// assert_eq!(clock.now_ms(), 10);
/// ```
#[derive(Clone, Default)]
pub struct ManualClock {
    now_ms: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock that reads `start_ms` until it is moved.
    #[must_use]
    pub fn new(start_ms: u64) -> Self {
        ManualClock {
            now_ms: Arc::new(AtomicU64::new(start_ms)),
        }
    }

    /// Sets the time (it may move backwards, as a real wall clock can).
    pub fn set(&self, ms: u64) {
        self.now_ms.store(ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `ms`, saturating at `u64::MAX`.
    pub fn advance(&self, ms: u64) {
        // fetch_update only fails when the closure returns None, which it never does.
        let _ = self
            .now_ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(ms))
            });
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now_ms", &self.now_ms())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time() {
        let a = ManualClock::new(5);
        let b = a.clone();
        a.advance(10);
        b.advance(1);
        assert_eq!((a.now_ms(), b.now_ms()), (16, 16));
    }

    #[test]
    fn manual_clock_advance_saturates() {
        let clock = ManualClock::new(u64::MAX - 1);
        clock.advance(10);
        assert_eq!(clock.now_ms(), u64::MAX);
    }

    #[test]
    fn manual_clock_debug_shows_the_time() {
        assert_eq!(
            format!("{:?}", ManualClock::new(42)),
            "ManualClock { now_ms: 42 }"
        );
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }

    #[test]
    fn arc_dyn_clock_delegates() {
        let manual = ManualClock::new(3);
        let clock: Arc<dyn Clock> = Arc::new(manual.clone());
        manual.set(9);
        assert_eq!(clock.now_ms(), 9);
    }
}
