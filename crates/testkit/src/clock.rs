//! The clocks tests hand to IO code in place of the system clock, once for every suite: each
//! implements [`Clock`], the trait `hangar-core` declares (so this crate needs neither the
//! operator nor its runtime).
//!
//! - [`OffsetClock`] runs with the system clock plus an offset the test moves: real timers and
//!   real servers keep working, and a test jumps past a long timer (`advance`) or starts in the
//!   past (`behind`) to see certificates age. The operator's test harness gives it to the
//!   controllers (`h.clock.advance(..)`).
//! - [`TokioClock`] follows tokio's clock from a fixed wall-clock start, so under paused time
//!   (`tokio::time::pause`) a run's `now` depends only on how far tokio's time moved, never on
//!   when or how fast the run ran (the fuzz run's webhook server).
//!
//! Contract: neither clock goes backwards between two readings unless the test constructs it
//! so; `advance` only moves forward.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

pub use hangar_core::clock::Clock;

/// The system clock plus a signed offset, in nanoseconds, that the test moves forward.
#[derive(Debug, Default)]
pub struct OffsetClock {
    offset_nanos: AtomicI64,
}

impl OffsetClock {
    /// A clock running `by` behind the system clock.
    pub fn behind(by: Duration) -> Self {
        Self {
            offset_nanos: AtomicI64::new(-nanos(by)),
        }
    }

    /// Moves this clock `by` further ahead (a clock that was behind catches up first).
    pub fn advance(&self, by: Duration) {
        let by = nanos(by);
        self.offset_nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |offset| {
                offset.checked_add(by)
            })
            .expect("an OffsetClock's offset stays within ±292 years");
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> SystemTime {
        let offset = self.offset_nanos.load(Ordering::SeqCst);
        let magnitude = Duration::from_nanos(offset.unsigned_abs());
        if offset >= 0 {
            SystemTime::now() + magnitude
        } else {
            SystemTime::now() - magnitude
        }
    }
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).expect("an OffsetClock moves by less than 292 years")
}

/// Tokio's clock, read as wall-clock time from a fixed start: [`TokioClock::START`] when it
/// was made, plus however far tokio's time has moved since.
#[derive(Debug)]
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl TokioClock {
    /// What `now` reads when the clock is made: a fixed time (2027-01-15T08:00:00Z), so a run
    /// does not depend on when it runs.
    pub const START: Duration = Duration::from_secs(1_800_000_000);
}

impl Default for TokioClock {
    fn default() -> Self {
        Self {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Self::START + self.start.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    /// How far `clock` reads from the system clock, in whole seconds (negative: behind).
    fn offset_secs(clock: &OffsetClock) -> i64 {
        let before = SystemTime::now();
        let now = clock.now();
        match now.duration_since(before) {
            Ok(ahead) => ahead.as_secs() as i64,
            Err(behind) => -(behind.duration().as_secs_f64().ceil() as i64),
        }
    }

    #[test]
    fn an_offset_clock_runs_with_the_system_clock_until_advanced() {
        let clock = OffsetClock::default();
        assert_eq!(offset_secs(&clock), 0);
        clock.advance(Duration::from_secs(3600));
        clock.advance(Duration::from_secs(600));
        assert_eq!(offset_secs(&clock), 4200);
    }

    #[test]
    fn an_offset_clock_keeps_sub_second_advances() {
        let clock = OffsetClock::default();
        for _ in 0..4 {
            clock.advance(Duration::from_millis(500));
        }
        assert_eq!(offset_secs(&clock), 2);
    }

    #[test]
    fn an_offset_clock_behind_catches_up_as_it_advances() {
        let clock = OffsetClock::behind(450 * DAY);
        assert_eq!(offset_secs(&clock), -450 * 24 * 3600);
        clock.advance(449 * DAY);
        assert_eq!(offset_secs(&clock), -24 * 3600);
        clock.advance(2 * DAY);
        assert_eq!(offset_secs(&clock), 24 * 3600);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tokio_clock_moves_only_with_tokio_time() {
        let clock = TokioClock::default();
        let start = SystemTime::UNIX_EPOCH + TokioClock::START;
        assert_eq!(clock.now(), start);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(clock.now(), start, "wall time passing moves nothing");
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(clock.now(), start + Duration::from_secs(3600));
        tokio::time::sleep(DAY).await;
        assert_eq!(clock.now(), start + Duration::from_secs(3600) + DAY);
    }
}
