//! Table tests for the autoscaler, one module per submodule, plus properties.

use std::time::{Duration, SystemTime};

mod after;
mod batch;
mod completions;
mod dedup;
mod desired;
mod labels;
mod metrics;
mod properties;
mod pull;
mod reservations;
mod schedule;
mod webhook;

/// Minutes after a fixed base instant (2023-11-14T22:13:20Z).
fn t(mins: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + mins * 60)
}

/// A UTC instant from its calendar fields.
fn utc(year: i64, month: u32, day: u32, hour: u32, min: u32) -> SystemTime {
    let days = super::civil::days_from_civil(year, month, day);
    let secs = days * 86_400 + i64::from(hour) * 3600 + i64::from(min) * 60;
    super::civil::from_nanos(i128::from(secs) * 1_000_000_000).unwrap()
}

fn mins(n: u64) -> Duration {
    Duration::from_secs(n * 60)
}
