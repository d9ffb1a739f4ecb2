//! UTC calendar arithmetic for scheduled overrides, without a date-time dependency.
//!
//! Instants are nanoseconds since the Unix epoch in an `i128`, which covers every `SystemTime`
//! a platform can represent and makes "k periods later" plain integer arithmetic. Dates are
//! proleptic Gregorian in UTC; the conversions are the well-known days-from-civil and
//! civil-from-days algorithms (valid for every year an `i64` day count can reach).

use std::time::{Duration, SystemTime};

/// Nanoseconds per second.
pub(crate) const SECOND: i128 = 1_000_000_000;
/// Nanoseconds per day (UTC has no DST and we ignore leap seconds, as Unix time does).
pub(crate) const DAY: i128 = 86_400 * SECOND;

/// Nanoseconds since the Unix epoch; negative before it.
pub(crate) fn to_nanos(t: SystemTime) -> i128 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// The instant `n` nanoseconds after the epoch, if the platform can represent it.
pub(crate) fn from_nanos(n: i128) -> Option<SystemTime> {
    let magnitude = n.unsigned_abs();
    let secs = u64::try_from(magnitude / SECOND as u128).ok()?;
    let d = Duration::new(secs, (magnitude % SECOND as u128) as u32);
    if n >= 0 {
        SystemTime::UNIX_EPOCH.checked_add(d)
    } else {
        SystemTime::UNIX_EPOCH.checked_sub(d)
    }
}

/// Whether `year` has a 29th of February.
pub(crate) fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// Days in `month` (1–12) of `year`.
pub(crate) fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(year) => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 of a valid date.
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    // Count years from March so that the leap day is the last day of the "year".
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let m = i64::from(month);
    let day_of_year = (153 * if m > 2 { m - 3 } else { m + 9 } + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day count since 1970-01-01.
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// An instant split into its UTC date and the time since that date's midnight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Civil {
    pub(crate) year: i64,
    pub(crate) month: u32,
    pub(crate) day: u32,
    /// Nanoseconds since midnight, in `0..DAY`.
    pub(crate) time_of_day: i128,
}

impl Civil {
    pub(crate) fn of(instant: i128) -> Self {
        let days = instant.div_euclid(DAY);
        let (year, month, day) = civil_from_days(days as i64);
        Civil {
            year,
            month,
            day,
            time_of_day: instant.rem_euclid(DAY),
        }
    }

    /// Months since year 0, so that consecutive months are consecutive integers.
    pub(crate) fn month_index(&self) -> i64 {
        self.year * 12 + i64::from(self.month) - 1
    }
}

/// The instant at `time_of_day` on a date, or `None` when the date does not exist (the 31st of
/// a 30-day month, the 29th of February in a common year).
pub(crate) fn instant_on(year: i64, month: u32, day: u32, time_of_day: i128) -> Option<i128> {
    (day <= days_in_month(year, month))
        .then(|| i128::from(days_from_civil(year, month, day)) * DAY + time_of_day)
}

/// `(year, month)` of a month index (see [`Civil::month_index`]).
pub(crate) fn year_month(index: i64) -> (i64, u32) {
    (index.div_euclid(12), index.rem_euclid(12) as u32 + 1)
}

/// RFC 3339 in UTC with a `Z` suffix, e.g. `2024-05-04T09:00:00Z`; fractional seconds appear
/// only when present, without trailing zeros.
pub(crate) fn format_rfc3339(t: SystemTime) -> String {
    let c = Civil::of(to_nanos(t));
    let secs = c.time_of_day / SECOND;
    let nanos = c.time_of_day % SECOND;
    let mut out = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        c.year,
        c.month,
        c.day,
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
    if nanos != 0 {
        let fraction = format!("{nanos:09}");
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    #[test]
    fn epoch_is_day_zero() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(civil_from_days(0), (1970, 1, 1));
    }

    #[test]
    fn known_dates_round_trip() {
        // 2000-03-01 follows a leap day in a year divisible by 400.
        assert_eq!(
            days_from_civil(2000, 3, 1) - days_from_civil(2000, 2, 28),
            2
        );
        // 1900 is not a leap year.
        assert_eq!(
            days_from_civil(1900, 3, 1) - days_from_civil(1900, 2, 28),
            1
        );
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn month_lengths_follow_the_gregorian_rules() {
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(2023, 2), 28);
        assert_eq!(days_in_month(2100, 2), 28);
        assert_eq!(days_in_month(2000, 2), 29);
        assert_eq!(days_in_month(2023, 4), 30);
        assert_eq!(days_in_month(2023, 12), 31);
    }

    #[test]
    fn missing_dates_have_no_instant() {
        assert_eq!(instant_on(2023, 2, 29, 0), None);
        assert_eq!(instant_on(2023, 4, 31, 0), None);
        assert!(instant_on(2024, 2, 29, 0).is_some());
    }

    #[test]
    fn rfc3339_is_utc_and_trims_fractions() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_813_200);
        assert_eq!(format_rfc3339(t), "2024-05-04T09:00:00Z");
        let t = t + Duration::from_millis(250);
        assert_eq!(format_rfc3339(t), "2024-05-04T09:00:00.25Z");
        let before = SystemTime::UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(format_rfc3339(before), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn nanos_round_trip_on_both_sides_of_the_epoch() {
        for n in [0, 1, -1, 1_700_000_000 * SECOND + 5, -86_400 * SECOND - 7] {
            assert_eq!(to_nanos(from_nanos(n).unwrap()), n);
        }
    }

    proptest! {
        #[test]
        fn days_and_dates_are_inverse(days in -1_000_000i64..1_000_000) {
            let (y, m, d) = civil_from_days(days);
            prop_assert!((1..=12).contains(&m));
            prop_assert!(d >= 1 && d <= days_in_month(y, m));
            prop_assert_eq!(days_from_civil(y, m, d), days);
        }

        #[test]
        fn consecutive_days_are_consecutive_dates(days in -1_000_000i64..1_000_000) {
            let (y, m, d) = civil_from_days(days);
            let next = civil_from_days(days + 1);
            let expected = if d < days_in_month(y, m) {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
            prop_assert_eq!(next, expected);
        }
    }
}
