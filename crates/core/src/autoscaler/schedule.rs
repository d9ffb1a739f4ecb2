//! Scheduled overrides: time windows, optionally recurring, that replace `minReplicas`.
//!
//! An override is a window `[start, end)` (the start instant belongs to the window, the end
//! instant does not) with an optional recurrence. All calendar arithmetic is in UTC, as ARC's
//! controller does in its usual UTC container.
//!
//! Recurrence rules (those of RFC 5545, which ARC's RRULE library implements):
//! - `Daily` and `Weekly` repeat the window every 24 hours / 7 days after `start`.
//! - `Monthly` repeats on the same day of the month and time of day as `start`; **a month
//!   without that day is skipped** (a window starting on the 31st recurs only in 31-day months;
//!   one starting on the 29th skips February in common years).
//! - `Yearly` repeats on the same month, day and time; a window starting on 29 February recurs
//!   only in leap years.
//! - `until` bounds the *starts* of repetitions, inclusively: a repetition that started at or
//!   before `until` runs to its end even if that is later.
//! - A window must not be longer than the shortest gap between two repetitions (1 day, 7 days,
//!   28 days, 365 days), so that at most one repetition of an override is active at any time.
//!   Longer windows are an error ([`ScheduleError::WindowLongerThanRecurrence`]). ARC compares
//!   with the length of the period starting *now*, so its verdict on a 30-day monthly window
//!   changes with the month; the fixed bound makes the check independent of the clock.
//! - A window whose end is not after its start is never active (as in ARC).
//!
//! When several overrides are active, the first in list order wins, even if it leaves
//! `minReplicas` unset.

use std::fmt;
use std::time::{Duration, SystemTime};

use super::civil::{self, Civil, DAY};

/// How often an override's window repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Frequency {
    /// Every 24 hours.
    Daily,
    /// Every 7 days.
    Weekly,
    /// On the same day of every month that has it.
    Monthly,
    /// On the same date of every year that has it.
    Yearly,
}

impl Frequency {
    /// The shortest time between two consecutive starts: the longest a window may be.
    pub fn shortest_interval(self) -> Duration {
        let days = match self {
            Frequency::Daily => 1,
            Frequency::Weekly => 7,
            // February is the shortest gap: the 28th of January to the 28th of February is 31
            // days, but the 28th of February to the 28th of March in a common year is 28.
            Frequency::Monthly => 28,
            Frequency::Yearly => 365,
        };
        Duration::from_secs(days * 86_400)
    }
}

impl fmt::Display for Frequency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Frequency::Daily => "Daily",
            Frequency::Weekly => "Weekly",
            Frequency::Monthly => "Monthly",
            Frequency::Yearly => "Yearly",
        })
    }
}

/// A repetition rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recurrence {
    /// How often.
    pub frequency: Frequency,
    /// No repetition starts after this instant; `None` repeats forever.
    pub until: Option<SystemTime>,
}

/// One scheduled override, as listed in `spec.scheduledOverrides`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledOverride {
    /// Start of the first window.
    pub start: SystemTime,
    /// End of the first window (exclusive).
    pub end: SystemTime,
    /// `minReplicas` during the window; `None` keeps the spec's.
    pub min_replicas: Option<u32>,
    /// Repetition; `None` means the window happens once.
    pub recurrence: Option<Recurrence>,
}

/// A half-open time interval `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// First instant inside the window.
    pub start: SystemTime,
    /// First instant after the window.
    pub end: SystemTime,
}

/// The override in force now, or the next one to start (see [`upcoming_override`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledWindow {
    /// Position of the override in the list.
    pub index: usize,
    /// Its `minReplicas`; `None` leaves the spec's in force.
    pub min_replicas: Option<u32>,
    /// The repetition concerned.
    pub window: Window,
    /// For status: `min=5 time=2024-05-04T09:00:00Z - 2024-05-04T17:00:00Z` (`min=unset` when
    /// the override has no `minReplicas`), times in UTC.
    pub summary: String,
}

/// A scheduled override that cannot be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// Repetitions of the window would overlap.
    #[error(
        "scheduledOverrides[{index}]: the window lasts {window:?} but repeats {frequency}, whose \
         repetitions can be only {limit:?} apart; shorten the window (endTime - startTime)"
    )]
    WindowLongerThanRecurrence {
        /// Position of the override in the list.
        index: usize,
        /// `end - start`.
        window: Duration,
        /// The frequency.
        frequency: Frequency,
        /// [`Frequency::shortest_interval`].
        limit: Duration,
    },
}

/// The first override (in list order) whose window contains `now`.
///
/// Returns an error if any override, active or not, has a window longer than its recurrence
/// allows: an invalid schedule should be reported, not half applied.
pub fn active_override(
    overrides: &[ScheduledOverride],
    now: SystemTime,
) -> Result<Option<ScheduledWindow>, ScheduleError> {
    validate(overrides)?;
    let now = civil::to_nanos(now);
    Ok(overrides.iter().enumerate().find_map(|(index, o)| {
        let start = latest_start_at_or_before(o, now)?;
        let end = start + length(o);
        (now < end).then(|| scheduled_window(index, o, start, end))
    }))
}

/// The override whose next window starts soonest after `now` (ties go to the earlier in the
/// list). Used for the status summary when no override is active.
pub fn upcoming_override(
    overrides: &[ScheduledOverride],
    now: SystemTime,
) -> Result<Option<ScheduledWindow>, ScheduleError> {
    validate(overrides)?;
    let now = civil::to_nanos(now);
    let next = overrides
        .iter()
        .enumerate()
        .filter(|(_, o)| length(o) > 0)
        .filter_map(|(index, o)| earliest_start_after(o, now).map(|start| (start, index, o)))
        .min_by_key(|(start, index, _)| (*start, *index));
    Ok(next.map(|(start, index, o)| scheduled_window(index, o, start, start + length(o))))
}

/// What status shows: the active override's summary, else the next one's, else nothing.
pub fn schedule_summary(
    overrides: &[ScheduledOverride],
    now: SystemTime,
) -> Result<Option<String>, ScheduleError> {
    Ok(match active_override(overrides, now)? {
        Some(active) => Some(active.summary),
        None => upcoming_override(overrides, now)?.map(|w| w.summary),
    })
}

fn validate(overrides: &[ScheduledOverride]) -> Result<(), ScheduleError> {
    for (index, o) in overrides.iter().enumerate() {
        let Some(recurrence) = o.recurrence else {
            continue;
        };
        let limit = recurrence.frequency.shortest_interval();
        let window = o.end.duration_since(o.start).unwrap_or_default();
        if window > limit {
            return Err(ScheduleError::WindowLongerThanRecurrence {
                index,
                window,
                frequency: recurrence.frequency,
                limit,
            });
        }
    }
    Ok(())
}

/// Window length in nanoseconds; zero or negative for windows that never contain anything.
fn length(o: &ScheduledOverride) -> i128 {
    civil::to_nanos(o.end) - civil::to_nanos(o.start)
}

fn scheduled_window(
    index: usize,
    o: &ScheduledOverride,
    start: i128,
    end: i128,
) -> ScheduledWindow {
    // Both instants come from SystemTimes (or lie between two repetitions that do), so they
    // are representable; the fallbacks only keep this function total.
    let start = civil::from_nanos(start).unwrap_or(o.start);
    let end = civil::from_nanos(end).unwrap_or(o.end);
    let min = o
        .min_replicas
        .map_or_else(|| "unset".to_owned(), |m| m.to_string());
    ScheduledWindow {
        index,
        min_replicas: o.min_replicas,
        window: Window { start, end },
        summary: format!(
            "min={min} time={} - {}",
            civil::format_rfc3339(start),
            civil::format_rfc3339(end)
        ),
    }
}

/// The start of the latest repetition that starts at or before `bound` (and at or before the
/// rule's `until`).
fn latest_start_at_or_before(o: &ScheduledOverride, bound: i128) -> Option<i128> {
    let first = civil::to_nanos(o.start);
    let Some(recurrence) = o.recurrence else {
        return (first <= bound).then_some(first);
    };
    let bound = match recurrence.until {
        Some(until) => bound.min(civil::to_nanos(until)),
        None => bound,
    };
    if bound < first {
        return None;
    }
    let c = Civil::of(first);
    match recurrence.frequency {
        Frequency::Daily => Some(first + (bound - first) / DAY * DAY),
        Frequency::Weekly => Some(first + (bound - first) / (7 * DAY) * (7 * DAY)),
        Frequency::Monthly => {
            // Walk back from the bound's month; the first month's repetition is `first` itself
            // (<= bound), so this ends within a few steps.
            let last = Civil::of(bound).month_index();
            (c.month_index()..=last).rev().find_map(|index| {
                let (year, month) = civil::year_month(index);
                civil::instant_on(year, month, c.day, c.time_of_day).filter(|t| *t <= bound)
            })
        }
        Frequency::Yearly => (c.year..=Civil::of(bound).year).rev().find_map(|year| {
            civil::instant_on(year, c.month, c.day, c.time_of_day).filter(|t| *t <= bound)
        }),
    }
}

/// The start of the earliest repetition strictly after `after`, if one starts by `until`.
fn earliest_start_after(o: &ScheduledOverride, after: i128) -> Option<i128> {
    let first = civil::to_nanos(o.start);
    let Some(recurrence) = o.recurrence else {
        return (first > after).then_some(first);
    };
    let next = if first > after {
        first
    } else {
        let c = Civil::of(first);
        match recurrence.frequency {
            Frequency::Daily => first + ((after - first) / DAY + 1) * DAY,
            Frequency::Weekly => first + ((after - first) / (7 * DAY) + 1) * (7 * DAY),
            Frequency::Monthly => {
                // Some month within the next three has any given day of the month.
                let from = Civil::of(after).month_index();
                (from..from + 4).find_map(|index| {
                    let (year, month) = civil::year_month(index);
                    civil::instant_on(year, month, c.day, c.time_of_day).filter(|t| *t > after)
                })?
            }
            Frequency::Yearly => {
                // 29 February can be up to 8 years away (e.g. 2096 to 2104).
                let from = Civil::of(after).year;
                (from..from + 9).find_map(|year| {
                    civil::instant_on(year, c.month, c.day, c.time_of_day).filter(|t| *t > after)
                })?
            }
        }
    };
    match recurrence.until {
        Some(until) if next > civil::to_nanos(until) => None,
        _ => Some(next),
    }
}
