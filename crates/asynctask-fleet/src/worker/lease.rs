//! When a worker's lease ends on its own machine's clock: never after the
//! fleet gives up on it, so that the worker ends its subagents first.

use std::time::Duration;

use tokio::time::Instant;

/// How much sooner than `sent + lease` the worker takes its lease as ended:
/// 1 ms, because the fleet measures leases in whole milliseconds of the
/// database's clock, read rounded to the nearest (a lease may be given up to
/// 1 ms before `lease` has passed since its renewal was read); and 1/500 of
/// the lease, because the database's clock and this machine's may run at
/// rates that differ: clocks kept by NTP are slewed by at most 500 ppm each,
/// 1,000 ppm between two, which this covers twice over. And a tenth of the
/// lease, at most 250 ms, for what the clocks do not show: the timer firing
/// late, the runtime busy when it fires, and the kill reaching the
/// subagents' process groups.
pub(super) fn margin(lease: Duration) -> Duration {
    lease / 500 + Duration::from_millis(1) + (lease / 10).min(ACTING)
}

/// The most the margin allows for the worker to act on its deadline.
const ACTING: Duration = Duration::from_millis(250);

/// When a lease registered or renewed by a statement sent at `sent` (this
/// machine's clock) ends here: `sent + lease`, less [`margin`]. The fleet
/// measures the same lease from when the statement read the database's
/// clock, which is after `sent` whatever the delays, so with clocks that
/// keep to the margin the worker always gives up first.
pub(super) fn local_deadline(sent: Instant, lease: Duration) -> Instant {
    sent + lease.saturating_sub(margin(lease))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const MILLION: u128 = 1_000_000;

    /// Two clocks against real time (nanoseconds from the start): this
    /// machine's monotonic clock and the database's, in whole milliseconds
    /// read rounded to the nearest (as `clock_timestamp()` cast to `bigint`
    /// is), each off by at most 500 ppm, the database's at any phase.
    struct Clocks {
        base: Instant,
        worker_ppm: i64,
        database_ppm: i64,
        database_phase_ns: u128,
    }

    impl Clocks {
        fn rate(ppm: i64) -> u128 {
            u128::try_from(1_000_000 + ppm).expect("positive")
        }

        /// This machine's clock at real time `t`.
        fn local(&self, t: u128) -> Instant {
            let ns = t * Self::rate(self.worker_ppm) / MILLION;
            self.base + Duration::from_nanos(u64::try_from(ns).expect("in range"))
        }

        /// The database's clock at real time `t`, in milliseconds.
        fn database_ms(&self, t: u128) -> u128 {
            let ns = t * Self::rate(self.database_ppm) / MILLION + self.database_phase_ns;
            (ns + 500_000) / MILLION
        }

        /// The first real time at which the fleet takes a lease expiring at
        /// `expiry` (database milliseconds) as expired: its clock reads at
        /// least `expiry` (`lease_expires_at <= now`).
        fn fleet_gives_up(&self, expiry: u128) -> u128 {
            let at_ns = (expiry * MILLION).saturating_sub(500_000);
            let real = at_ns.saturating_sub(self.database_phase_ns) * MILLION;
            let t = real.div_ceil(Self::rate(self.database_ppm));
            debug_assert!(self.database_ms(t) >= expiry);
            debug_assert!(t == 0 || self.database_ms(t - 1) < expiry);
            t
        }
    }

    /// One renewal: the wait before it is sent, the time until the statement
    /// reads the database's clock, the time until its answer arrives, and
    /// whether it does (a renewal whose answer was lost changed the
    /// database, not the worker).
    #[derive(Debug, Clone)]
    struct Renewal {
        wait_ns: u128,
        read_ns: u128,
        answer_ns: u128,
        answered: bool,
    }

    fn delay() -> impl Strategy<Value = u128> {
        prop_oneof![Just(0u128), 0..2_000_000u128, 0..20_000_000_000u128,]
    }

    fn renewal() -> impl Strategy<Value = Renewal> {
        (delay(), delay(), delay(), proptest::bool::weighted(0.8)).prop_map(
            |(wait_ns, read_ns, answer_ns, answered)| Renewal {
                wait_ns,
                read_ns,
                answer_ns,
                answered,
            },
        )
    }

    /// Registers, then renews on the schedule, as the worker does: its
    /// deadline moves to `local_deadline(sent, lease)` when a renewal
    /// answers, stays when an answer is lost, and once it has passed (or the
    /// fleet refuses a renewal) the worker has ended its subagents. Returns
    /// the first renewal at which the worker's deadline is later than the
    /// fleet's giving up on the same renewal.
    fn first_late_renewal(clocks: &Clocks, lease: Duration, renewals: &[Renewal]) -> Option<usize> {
        let lease_ms = lease.as_millis();
        let mut t: u128 = 0;
        let mut deadline: Option<Instant> = None;
        let mut expiry: u128 = 0;
        for (n, renewal) in renewals.iter().enumerate() {
            t += renewal.wait_ns;
            let sent = clocks.local(t);
            if deadline.is_some_and(|d| sent >= d) {
                return None; // given up before sending: the subagents ended
            }
            t += renewal.read_ns;
            let now = clocks.database_ms(t);
            if n > 0 && expiry <= now {
                return None; // refused: the worker gives up at its answer
            }
            expiry = now + lease_ms;
            t += renewal.answer_ns;
            if deadline.is_some_and(|d| clocks.local(t) >= d) {
                return None; // the watchdog fired before the answer came
            }
            if renewal.answered || n == 0 {
                let new = local_deadline(sent, lease);
                // The worker's new deadline passes no later than the fleet
                // gives up on this renewal.
                if clocks.local(clocks.fleet_gives_up(expiry)) < new {
                    return Some(n);
                }
                deadline = Some(new);
            }
        }
        None
    }

    proptest! {
        /// Whatever the delays of sending, reading the clock, committing
        /// and answering, whichever answers are lost, and however the two
        /// clocks drift within 500 ppm each: the worker's local deadline is
        /// never after the fleet gives up on the same renewal.
        #[test]
        fn the_worker_gives_up_no_later_than_the_fleet(
            lease_ms in prop_oneof![1u64..100, 100u64..600_000],
            worker_ppm in -500i64..=500,
            database_ppm in -500i64..=500,
            database_phase_ns in 0..1_000_000u128,
            renewals in proptest::collection::vec(renewal(), 1..12),
        ) {
            let clocks = Clocks { base: Instant::now(), worker_ppm, database_ppm, database_phase_ns };
            let lease = Duration::from_millis(lease_ms);
            prop_assert_eq!(first_late_renewal(&clocks, lease, &renewals), None);
        }
    }

    /// Without the margin the worker can outlive its lease: by the rounding
    /// of the database's clock alone, and by a clock running slow.
    #[test]
    fn sent_plus_lease_alone_is_too_late() {
        let lease = Duration::from_secs(30);
        let instant = Renewal {
            wait_ns: 0,
            read_ns: 0,
            answer_ns: 0,
            answered: true,
        };
        let late = |worker_ppm, database_phase_ns| {
            let clocks = Clocks {
                base: Instant::now(),
                worker_ppm,
                database_ppm: 0,
                database_phase_ns,
            };
            let deadline = clocks.local(0) + lease;
            let expiry = clocks.database_ms(0) + lease.as_millis();
            clocks.local(clocks.fleet_gives_up(expiry)) < deadline
        };
        // Read at x.4 ms (rounded down): the fleet gives up at x.5 + lease.
        assert!(late(0, 400_000), "the clock's rounding");
        assert!(late(-100, 0), "a slow clock");
        assert_eq!(
            first_late_renewal(
                &Clocks {
                    base: Instant::now(),
                    worker_ppm: -100,
                    database_ppm: 0,
                    database_phase_ns: 0
                },
                lease,
                &[instant],
            ),
            None,
            "with the margin, in time"
        );
        assert_eq!(margin(lease), Duration::from_millis(61 + 250));
        assert_eq!(margin(Duration::from_secs(1)), Duration::from_millis(103));
    }
}
