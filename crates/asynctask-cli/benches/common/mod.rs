//! What the fleet benchmarks share: the wall clock in nanoseconds, and
//! percentiles of sorted samples.

use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock in nanoseconds since the epoch (subagents print theirs, so
/// both sides of a measure read the same clock).
pub(crate) fn now_ns() -> i128 {
    i128::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    )
    .unwrap()
}

/// The `p` percentile (0 to 1) of `sorted`, nearest rank.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank]
}
