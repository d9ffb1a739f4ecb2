//! Time as an input.
//!
//! Decisions in this crate take `now` as a parameter and never read the system clock. The IO
//! code that calls them asks a [`Clock`] for that `now`: the operator's runtime implements it
//! on the system clock, tests implement it on a clock they move by hand. Declaring the trait
//! here, in the crate everything else already depends on, lets test-support crates provide
//! clocks without depending on the operator's runtime.
//!
//! Contract: `now` is the wall-clock time the caller should decide with. It may be ahead of
//! the system clock (a test that moved it forward) but must not go backwards between two calls
//! on the same clock, so a deadline computed from one reading is never earlier on the next.

use std::time::SystemTime;

/// Where IO code reads the current time from; see the module doc for the contract.
pub trait Clock: Send + Sync {
    /// The time to decide with now.
    fn now(&self) -> SystemTime;
}
