//! Scheduled overrides: windows, recurrences (incl. month ends and leap years), precedence.

use std::time::SystemTime;

use super::utc;
use crate::autoscaler::schedule::*;

fn once(start: SystemTime, end: SystemTime, min: u32) -> ScheduledOverride {
    ScheduledOverride {
        start,
        end,
        min_replicas: Some(min),
        recurrence: None,
    }
}

fn every(
    frequency: Frequency,
    start: SystemTime,
    end: SystemTime,
    until: Option<SystemTime>,
) -> ScheduledOverride {
    ScheduledOverride {
        start,
        end,
        min_replicas: Some(5),
        recurrence: Some(Recurrence { frequency, until }),
    }
}

fn active_at(o: &ScheduledOverride, now: SystemTime) -> bool {
    active_override(std::slice::from_ref(o), now)
        .unwrap()
        .is_some()
}

/// Checks `(label, instant, expected)` rows against one override.
fn check(o: &ScheduledOverride, rows: &[(&str, SystemTime, bool)]) {
    for (label, now, expected) in rows {
        assert_eq!(active_at(o, *now), *expected, "{label}");
    }
}

#[test]
fn a_one_off_window_includes_its_start_and_excludes_its_end() {
    let o = once(utc(2024, 5, 4, 9, 0), utc(2024, 5, 4, 17, 0), 3);
    check(
        &o,
        &[
            ("before", utc(2024, 5, 4, 8, 59), false),
            ("at start", utc(2024, 5, 4, 9, 0), true),
            ("inside", utc(2024, 5, 4, 12, 0), true),
            ("at end", utc(2024, 5, 4, 17, 0), false),
            ("next day", utc(2024, 5, 5, 10, 0), false),
        ],
    );
}

#[test]
fn a_daily_window_recurs_every_day_at_the_same_hours() {
    let o = every(
        Frequency::Daily,
        utc(2024, 5, 4, 9, 0),
        utc(2024, 5, 4, 17, 0),
        None,
    );
    check(
        &o,
        &[
            ("day before the first", utc(2024, 5, 3, 10, 0), false),
            ("tenth day, inside", utc(2024, 5, 14, 16, 59), true),
            ("tenth day, after", utc(2024, 5, 14, 17, 0), false),
            ("next year, early", utc(2025, 1, 1, 8, 0), false),
            (
                "a leap day before the first start",
                utc(2024, 2, 29, 10, 0),
                false,
            ),
            ("a later leap day", utc(2028, 2, 29, 10, 0), true),
        ],
    );
}

#[test]
fn a_daily_window_may_span_midnight() {
    let o = every(
        Frequency::Daily,
        utc(2024, 5, 4, 22, 0),
        utc(2024, 5, 5, 2, 0),
        None,
    );
    check(
        &o,
        &[
            ("after midnight", utc(2024, 6, 1, 1, 0), true),
            ("before the evening", utc(2024, 6, 1, 21, 0), false),
        ],
    );
}

#[test]
fn a_weekly_window_recurs_on_the_same_weekday_only() {
    // 2024-05-04 is a Saturday.
    let o = every(
        Frequency::Weekly,
        utc(2024, 5, 4, 0, 0),
        utc(2024, 5, 5, 0, 0),
        None,
    );
    check(
        &o,
        &[
            ("a later Saturday", utc(2024, 6, 1, 12, 0), true),
            ("the Sunday after", utc(2024, 6, 2, 12, 0), false),
            ("a Friday", utc(2024, 5, 31, 12, 0), false),
        ],
    );
}

#[test]
fn a_monthly_window_recurs_on_the_same_day_of_the_month() {
    let o = every(
        Frequency::Monthly,
        utc(2024, 1, 15, 9, 0),
        utc(2024, 1, 15, 17, 0),
        None,
    );
    check(
        &o,
        &[
            ("February 15th", utc(2024, 2, 15, 10, 0), true),
            ("December 15th", utc(2024, 12, 15, 10, 0), true),
            ("February 16th", utc(2024, 2, 16, 10, 0), false),
        ],
    );
}

#[test]
fn a_monthly_window_on_the_31st_skips_months_without_one() {
    let o = every(
        Frequency::Monthly,
        utc(2024, 1, 31, 9, 0),
        utc(2024, 1, 31, 17, 0),
        None,
    );
    check(
        &o,
        &[
            (
                "February has none, not moved to the 29th",
                utc(2024, 2, 29, 10, 0),
                false,
            ),
            ("nor to March 1st", utc(2024, 3, 1, 10, 0), false),
            ("March 31st", utc(2024, 3, 31, 10, 0), true),
            ("April has none", utc(2024, 4, 30, 10, 0), false),
            ("May 31st", utc(2024, 5, 31, 10, 0), true),
        ],
    );
}

#[test]
fn a_monthly_window_on_the_29th_skips_february_in_common_years_only() {
    let o = every(
        Frequency::Monthly,
        utc(2023, 1, 29, 9, 0),
        utc(2023, 1, 29, 17, 0),
        None,
    );
    check(
        &o,
        &[
            ("2023 has no February 29th", utc(2023, 2, 28, 10, 0), false),
            ("March 29th 2023", utc(2023, 3, 29, 10, 0), true),
            ("2024 has one", utc(2024, 2, 29, 10, 0), true),
        ],
    );
}

#[test]
fn a_monthly_window_spanning_a_month_end_exists_only_where_its_start_does() {
    // Starts on the 31st at 22:00, ends the next day at 02:00.
    let o = every(
        Frequency::Monthly,
        utc(2024, 1, 31, 22, 0),
        utc(2024, 2, 1, 2, 0),
        None,
    );
    check(
        &o,
        &[
            ("into February 1st", utc(2024, 2, 1, 1, 0), true),
            ("no start on February 31st", utc(2024, 3, 1, 1, 0), false),
            ("into April 1st", utc(2024, 4, 1, 1, 0), true),
        ],
    );
}

#[test]
fn a_yearly_window_recurs_on_the_same_date() {
    let o = every(
        Frequency::Yearly,
        utc(2020, 12, 24, 0, 0),
        utc(2020, 12, 27, 0, 0),
        None,
    );
    check(
        &o,
        &[
            ("Christmas 2025", utc(2025, 12, 25, 12, 0), true),
            ("after it", utc(2025, 12, 27, 0, 0), false),
            ("a year before the first", utc(2019, 12, 25, 12, 0), false),
        ],
    );
}

#[test]
fn a_yearly_window_on_february_29th_recurs_in_leap_years_only() {
    let o = every(
        Frequency::Yearly,
        utc(2024, 2, 29, 0, 0),
        utc(2024, 3, 1, 0, 0),
        None,
    );
    check(
        &o,
        &[
            ("not on February 28th 2025", utc(2025, 2, 28, 12, 0), false),
            ("not on March 1st 2025", utc(2025, 3, 1, 12, 0), false),
            ("February 29th 2028", utc(2028, 2, 29, 12, 0), true),
            ("2100 is not a leap year", utc(2100, 3, 1, 1, 0), false),
            ("2104 is", utc(2104, 2, 29, 1, 0), true),
        ],
    );
}

#[test]
fn until_bounds_the_starts_inclusively() {
    // Daily 09:00-17:00 until the third start.
    let o = every(
        Frequency::Daily,
        utc(2024, 5, 1, 9, 0),
        utc(2024, 5, 1, 17, 0),
        Some(utc(2024, 5, 3, 9, 0)),
    );
    check(
        &o,
        &[
            (
                "third day, starting exactly at until",
                utc(2024, 5, 3, 12, 0),
                true,
            ),
            ("fourth day", utc(2024, 5, 4, 12, 0), false),
        ],
    );
}

#[test]
fn a_repetition_started_before_until_runs_to_its_end() {
    let o = every(
        Frequency::Daily,
        utc(2024, 5, 1, 9, 0),
        utc(2024, 5, 1, 17, 0),
        Some(utc(2024, 5, 3, 12, 0)),
    );
    check(
        &o,
        &[
            ("after until, same window", utc(2024, 5, 3, 16, 0), true),
            ("next day", utc(2024, 5, 4, 10, 0), false),
        ],
    );
}

#[test]
fn a_recurring_window_is_not_active_before_its_first_start() {
    let o = every(
        Frequency::Daily,
        utc(2024, 5, 4, 9, 0),
        utc(2024, 5, 4, 17, 0),
        None,
    );
    check(&o, &[("the day before", utc(2024, 5, 3, 10, 0), false)]);
}

#[test]
fn the_first_active_override_in_list_order_wins() {
    let now = utc(2024, 5, 4, 12, 0);
    let overrides = vec![
        once(utc(2024, 5, 5, 0, 0), utc(2024, 5, 6, 0, 0), 1), // not active
        once(utc(2024, 5, 4, 11, 0), utc(2024, 5, 4, 13, 0), 2),
        once(utc(2024, 5, 4, 0, 0), utc(2024, 5, 5, 0, 0), 3),
    ];
    let a = active_override(&overrides, now).unwrap().unwrap();
    assert_eq!((a.index, a.min_replicas), (1, Some(2)));
}

#[test]
fn an_active_override_without_min_replicas_still_wins() {
    let now = utc(2024, 5, 4, 12, 0);
    let mut first = once(utc(2024, 5, 4, 0, 0), utc(2024, 5, 5, 0, 0), 0);
    first.min_replicas = None;
    let second = once(utc(2024, 5, 4, 0, 0), utc(2024, 5, 5, 0, 0), 4);
    let a = active_override(&[first, second], now).unwrap().unwrap();
    assert_eq!((a.index, a.min_replicas), (0, None));
    assert!(a.summary.starts_with("min=unset "), "{}", a.summary);
}

#[test]
fn the_active_window_and_summary_are_of_the_current_repetition_in_utc() {
    let o = every(
        Frequency::Weekly,
        utc(2024, 5, 4, 9, 0),
        utc(2024, 5, 4, 17, 0),
        None,
    );
    let a = active_override(&[o], utc(2024, 5, 18, 10, 0))
        .unwrap()
        .unwrap();
    assert_eq!(
        a.window,
        Window {
            start: utc(2024, 5, 18, 9, 0),
            end: utc(2024, 5, 18, 17, 0)
        }
    );
    assert_eq!(
        a.summary,
        "min=5 time=2024-05-18T09:00:00Z - 2024-05-18T17:00:00Z"
    );
}

#[test]
fn windows_longer_than_their_recurrence_are_an_error() {
    let start = utc(2024, 5, 4, 0, 0);
    #[rustfmt::skip]
    let table = [
        ("daily, 24h is fine",     Frequency::Daily,   utc(2024, 5, 5, 0, 0),  true),
        ("daily, 25h",             Frequency::Daily,   utc(2024, 5, 5, 1, 0),  false),
        ("weekly, 7 days is fine", Frequency::Weekly,  utc(2024, 5, 11, 0, 0), true),
        ("weekly, 8 days",         Frequency::Weekly,  utc(2024, 5, 12, 0, 0), false),
        ("monthly, 28 days",       Frequency::Monthly, utc(2024, 6, 1, 0, 0),  true),
        ("monthly, 29 days",       Frequency::Monthly, utc(2024, 6, 2, 0, 0),  false),
        ("yearly, 365 days",       Frequency::Yearly,  utc(2025, 5, 4, 0, 0),  true),
        ("yearly, 366 days",       Frequency::Yearly,  utc(2025, 5, 5, 0, 0),  false),
    ];
    for (label, frequency, end, ok) in table {
        let o = every(frequency, start, end, None);
        let result = active_override(&[o], start);
        assert_eq!(result.is_ok(), ok, "{label}: {result:?}");
    }
    let err = active_override(
        &[every(Frequency::Daily, start, utc(2024, 5, 5, 1, 0), None)],
        start,
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with("scheduledOverrides[0]:"),
        "{err}"
    );
}

#[test]
fn a_24_hour_daily_window_is_always_active() {
    let o = every(
        Frequency::Daily,
        utc(2024, 5, 4, 6, 0),
        utc(2024, 5, 5, 6, 0),
        None,
    );
    check(
        &o,
        &[
            ("at a boundary", utc(2024, 6, 1, 6, 0), true),
            ("just before one", utc(2024, 6, 1, 5, 59), true),
        ],
    );
}

#[test]
fn an_empty_or_inverted_window_is_never_active_nor_upcoming() {
    let start = utc(2024, 5, 4, 9, 0);
    for end in [start, utc(2024, 5, 4, 8, 0)] {
        for o in [
            once(start, end, 1),
            every(Frequency::Daily, start, end, None),
        ] {
            assert!(!active_at(&o, start));
            assert_eq!(
                upcoming_override(&[o], utc(2024, 5, 1, 0, 0)).unwrap(),
                None
            );
        }
    }
}

#[test]
fn the_upcoming_override_is_the_soonest_to_start() {
    let now = utc(2024, 5, 4, 12, 0);
    let overrides = vec![
        once(utc(2024, 5, 10, 0, 0), utc(2024, 5, 11, 0, 0), 1),
        every(
            Frequency::Daily,
            utc(2024, 5, 1, 8, 0),
            utc(2024, 5, 1, 9, 0),
            None,
        ),
        once(utc(2024, 5, 1, 0, 0), utc(2024, 5, 2, 0, 0), 3), // over
    ];
    let next = upcoming_override(&overrides, now).unwrap().unwrap();
    assert_eq!(next.index, 1);
    assert_eq!(next.window.start, utc(2024, 5, 5, 8, 0));
}

#[test]
fn the_upcoming_monthly_repetition_skips_months_without_its_day() {
    let o = every(
        Frequency::Monthly,
        utc(2024, 1, 31, 9, 0),
        utc(2024, 1, 31, 10, 0),
        None,
    );
    let next = upcoming_override(&[o], utc(2024, 2, 1, 0, 0))
        .unwrap()
        .unwrap();
    assert_eq!(next.window.start, utc(2024, 3, 31, 9, 0));
}

#[test]
fn the_upcoming_yearly_leap_day_repetition_can_be_eight_years_away() {
    let o = every(
        Frequency::Yearly,
        utc(2096, 2, 29, 0, 0),
        utc(2096, 2, 29, 1, 0),
        None,
    );
    let next = upcoming_override(&[o], utc(2096, 3, 1, 0, 0))
        .unwrap()
        .unwrap();
    assert_eq!(next.window.start, utc(2104, 2, 29, 0, 0));
}

#[test]
fn nothing_is_upcoming_after_until() {
    let o = every(
        Frequency::Daily,
        utc(2024, 5, 1, 9, 0),
        utc(2024, 5, 1, 10, 0),
        Some(utc(2024, 5, 3, 9, 0)),
    );
    assert_eq!(
        upcoming_override(&[o], utc(2024, 5, 3, 9, 30)).unwrap(),
        None
    );
}

#[test]
fn the_summary_prefers_the_active_override_then_the_next_one() {
    let active = once(utc(2024, 5, 4, 0, 0), utc(2024, 5, 5, 0, 0), 2);
    let later = once(utc(2024, 5, 4, 13, 0), utc(2024, 5, 4, 14, 0), 7);
    let now = utc(2024, 5, 4, 12, 0);
    assert_eq!(
        schedule_summary(&[later.clone(), active], now).unwrap(),
        Some("min=2 time=2024-05-04T00:00:00Z - 2024-05-05T00:00:00Z".into())
    );
    assert_eq!(
        schedule_summary(std::slice::from_ref(&later), now).unwrap(),
        Some("min=7 time=2024-05-04T13:00:00Z - 2024-05-04T14:00:00Z".into())
    );
    assert_eq!(
        schedule_summary(&[later], utc(2024, 6, 1, 0, 0)).unwrap(),
        None
    );
}
