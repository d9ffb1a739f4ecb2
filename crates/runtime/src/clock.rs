//! The clocks IO code reads `now` from: the [`Clock`] trait of `hangar-core` (time is an
//! input to every decision), the system clock, and a clock tests move forward.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

pub use hangar_core::clock::Clock;

/// The system clock.
#[derive(Debug, Default)]
pub struct SystemClock;

/// A clock that runs with the system clock plus an adjustable offset: tests jump forward past
/// long timers while everything else keeps moving.
#[derive(Debug, Default)]
pub struct OffsetClock {
    offset_secs: AtomicU64,
}

impl OffsetClock {
    /// Moves this clock `by` further ahead of the system clock.
    pub fn advance(&self, by: Duration) {
        self.offset_secs.fetch_add(by.as_secs(), Ordering::SeqCst);
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> SystemTime {
        SystemTime::now() + Duration::from_secs(self.offset_secs.load(Ordering::SeqCst))
    }
}

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_clock_runs_ahead_by_what_it_was_advanced() {
        let clock = OffsetClock::default();
        let before = SystemTime::now();
        assert!(clock.now() >= before);
        assert!(clock.now() < before + Duration::from_secs(60));
        clock.advance(Duration::from_secs(3600));
        clock.advance(Duration::from_secs(600));
        let ahead = clock.now().duration_since(before).unwrap();
        assert!(ahead >= Duration::from_secs(4200), "{ahead:?}");
        assert!(ahead < Duration::from_secs(4260), "{ahead:?}");
    }
}
