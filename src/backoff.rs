//! Exponential backoff, the one formula behind every retry delay: the controller's
//! route and condition retries, the node watch's reconnects and the AWS provider's
//! hold-back after throttling. Sans-IO: callers pass the random draw, so tests and the
//! simulation stay deterministic.

use std::time::Duration;

/// `base × 2^(attempt − 1)`, capped at `max`, then jittered into
/// [`low`, `high`] × that delay by `draw` in [0, 1). `attempt` counts from 1 (0 counts
/// as 1). Spreading the delays keeps many callers that failed together from retrying
/// in lock-step.
pub(crate) fn delay(
    base: Duration,
    attempt: u32,
    max: Duration,
    (low, high): (f64, f64),
    draw: f64,
) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
    let capped = exp.min(max);
    capped.mul_f64(low + (high - low) * draw.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn doubles_from_the_base_up_to_the_cap_and_jitters_inside_the_range() {
        let d = |attempt, draw| delay(secs(1.0), attempt, secs(10.0), (0.5, 1.0), draw);
        assert_eq!(d(1, 1.0), secs(1.0));
        assert_eq!(d(2, 1.0), secs(2.0));
        assert_eq!(d(4, 1.0), secs(8.0));
        assert_eq!(d(5, 1.0), secs(10.0), "capped");
        assert_eq!(d(40, 0.0), secs(5.0), "capped, then jittered; no overflow");
        assert_eq!(d(0, 0.0), secs(0.5), "attempt 0 counts as the first");
        assert_eq!(d(3, 0.5), secs(3.0));
    }
}
