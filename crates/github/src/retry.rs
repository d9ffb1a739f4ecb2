//! Retry policy for transient failures (5xx, connection errors): capped exponential back-off
//! with jitter, so many clients that failed together do not retry together.

use std::time::Duration;

/// How often and how patiently a call is retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, including the first (1 = no retries).
    pub max_attempts: u32,
    /// Back-off before the first retry (before jitter).
    pub base_delay: Duration,
    /// Upper bound of any single back-off.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt number `attempt` (1-based): `base * 2^(attempt-1)`, capped
    /// at `max_delay`, of which a random half is dropped ("equal jitter": never less than half
    /// the nominal wait, so a retry storm still spreads out).
    pub fn backoff(&self, attempt: u32, rng: &mut fastrand::Rng) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let nominal = self
            .base_delay
            .saturating_mul(1u32 << exp)
            .min(self.max_delay);
        let half = nominal / 2;
        let jitter_ns = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(rng.u64(0..=jitter_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_jitter_bounds_and_caps() {
        let policy = RetryPolicy::default();
        let mut rng = fastrand::Rng::with_seed(7);
        for (attempt, nominal_ms) in [
            (1, 500u64),
            (2, 1000),
            (3, 2000),
            (4, 4000),
            (6, 10_000),
            (40, 10_000),
        ] {
            for _ in 0..50 {
                let d = policy.backoff(attempt, &mut rng);
                let nominal = Duration::from_millis(nominal_ms);
                assert!(d >= nominal / 2 && d <= nominal, "attempt {attempt}: {d:?}");
            }
        }
    }

    #[test]
    fn jitter_varies() {
        let policy = RetryPolicy::default();
        let mut rng = fastrand::Rng::with_seed(1);
        let samples: std::collections::HashSet<_> =
            (0..20).map(|_| policy.backoff(3, &mut rng)).collect();
        assert!(samples.len() > 10);
    }
}
