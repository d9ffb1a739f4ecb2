//! Wall-clock time and sleeping, injectable.
//!
//! Token lifetimes, cache freshness and rate-limit resets are wall-clock facts that GitHub sends
//! as timestamps, and back-off is sleeping. Both go through [`Clock`] so tests (and ghsim, which
//! shares the trait) can run hours of GitHub time in milliseconds with [`ManualClock`], instead of
//! pausing tokio's clock, which would also fire the HTTP timeouts of real sockets.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// A boxed, sendable future, as returned by [`Clock::sleep`].
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A source of wall-clock time that can also sleep.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> Timestamp;

    /// Waits for `duration` of this clock's time.
    fn sleep(&self, duration: Duration) -> BoxFuture<()>;
}

/// The real clock: system time and `tokio::time::sleep`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A clock that only moves when told to. `sleep` advances it by the requested duration and
/// returns at once, and records the duration so tests can assert how long the code waited.
/// Clones share the same time.
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<Mutex<ManualState>>,
}

struct ManualState {
    now: Timestamp,
    sleeps: Vec<Duration>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            inner: Arc::new(Mutex::new(ManualState {
                now: start,
                sleeps: Vec::new(),
            })),
        }
    }

    /// A clock standing at a fixed, arbitrary instant (2026-01-01T00:00:00Z), for tests.
    pub fn at_epoch_2026() -> Self {
        Self::new(Timestamp::from_second(1_767_225_600).expect("valid timestamp"))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut state = self.inner.lock().expect("clock lock");
        state.now = add(state.now, by);
    }

    /// The durations passed to [`Clock::sleep`] so far, in order.
    pub fn sleeps(&self) -> Vec<Duration> {
        self.inner.lock().expect("clock lock").sleeps.clone()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &self.now())
            .finish_non_exhaustive()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        self.inner.lock().expect("clock lock").now
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<()> {
        {
            let mut state = self.inner.lock().expect("clock lock");
            state.now = add(state.now, duration);
            state.sleeps.push(duration);
        }
        // Yield once so a sleeping loop still lets other tasks run.
        Box::pin(tokio::task::yield_now())
    }
}

/// `t + d`, saturating at the end of jiff's range (durations here are at most hours).
pub fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// `later - earlier` as a std duration, zero if `later` is not after `earlier`.
pub fn until(earlier: Timestamp, later: Timestamp) -> Duration {
    Duration::try_from(later.duration_since(earlier)).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_sleep_advances_and_records() {
        let clock = ManualClock::at_epoch_2026();
        let start = clock.now();
        clock.sleep(Duration::from_secs(30)).await;
        clock.advance(Duration::from_secs(5));
        assert_eq!(until(start, clock.now()), Duration::from_secs(35));
        assert_eq!(clock.sleeps(), vec![Duration::from_secs(30)]);
    }

    #[test]
    fn until_is_zero_for_the_past() {
        let clock = ManualClock::at_epoch_2026();
        let now = clock.now();
        assert_eq!(until(add(now, Duration::from_secs(9)), now), Duration::ZERO);
    }
}
