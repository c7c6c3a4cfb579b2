//! `Backoff`: how long to wait before connecting again, where a connection
//! that fails right after it was made counts as one that could not be made.

use std::time::Duration;

use tokio::time::Instant;

/// The waits between attempts to connect: from the shortest, doubling up
/// to the longest. They start again from the shortest only after a
/// connection that served at least the longest wait: a session that fails
/// right after connecting (a statement refused at once, a connection cut at
/// once) backs off exactly as an attempt that could not connect, never
/// reconnecting in a loop.
#[derive(Debug)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max: max.max(min),
            next: min,
        }
    }

    /// A connection was made now: what [`ended`](Self::ended) is given.
    pub(crate) fn connected(&self) -> Instant {
        Instant::now()
    }

    /// The connection made at `since` has ended: one that served at least
    /// the longest wait was healthy, and the waits start again.
    pub(crate) fn ended(&mut self, since: Instant) {
        self.ended_after(since.elapsed());
    }

    /// A connection that served for `lived` has ended.
    fn ended_after(&mut self, lived: Duration) {
        if lived >= self.max {
            self.next = self.min;
        }
    }

    /// The wait before the next attempt; the one after it is twice as
    /// long, up to the longest.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);

    #[test]
    fn a_session_that_fails_at_once_backs_off_as_a_failed_connect() {
        let mut backoff = Backoff::new(MIN, MAX);
        let mut waits = Vec::new();
        for _ in 0..8 {
            backoff.ended_after(Duration::from_millis(3));
            waits.push(backoff.next_wait().as_millis());
        }
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    }

    #[test]
    fn a_session_that_served_starts_the_waits_again() {
        let mut backoff = Backoff::new(MIN, MAX);
        assert_eq!(backoff.next_wait(), MIN);
        assert_eq!(backoff.next_wait(), MIN * 2);
        backoff.ended_after(MAX);
        assert_eq!(backoff.next_wait(), MIN);
    }
}
