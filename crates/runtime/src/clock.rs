//! The clocks IO code reads `now` from: the [`Clock`] trait of `hangar-core` (time is an
//! input to every decision) and the system clock. The clocks tests move live in
//! `hangar_testkit::clock`.

use std::time::SystemTime;

pub use hangar_core::clock::Clock;

/// The system clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}
