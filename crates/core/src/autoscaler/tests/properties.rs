//! Properties over random situations: the guarantees the autoscaler's design rests on.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;

use super::{mins, t};
use crate::autoscaler::batch::Batcher;
use crate::autoscaler::civil::{self, Civil};
use crate::autoscaler::dedup::{Dedup, Seen};
use crate::autoscaler::metrics::{BusyPolicy, Direction, MetricKind, Step, Suggestion};
use crate::autoscaler::reservations::{JobOp, Reservation, ScaleOp, apply_scale_operations};
use crate::autoscaler::schedule::{
    Frequency, Recurrence, ScheduledOverride, active_override, upcoming_override,
};
use crate::autoscaler::{DesiredInput, desired_replicas};

const NOW: u64 = 1000;

prop_compose! {
    fn reservation()(made in 900u64..1000, life in 0u64..200, replicas in 0u32..3) -> Reservation {
        Reservation {
            name: None,
            effective_time: t(made),
            expiration_time: t(made + life),
            replicas,
            job: None,
            delivery: None,
            runner: None,
            trigger: None,
        }
    }
}

fn scale_op() -> impl Strategy<Value = ScaleOp> {
    prop_oneof![Just(ScaleOp::Up), Just(ScaleOp::Down)]
}

prop_compose! {
    fn desired_input()(
        min in proptest::option::of(-2i32..15),
        max in 0i32..15,
        override_min in proptest::option::of(proptest::option::of(0u32..20)),
        suggested in proptest::option::of(0u32..40),
        reservations in proptest::collection::vec(reservation(), 0..8),
        previous in proptest::option::of(0u32..25),
        last_scale_out in proptest::option::of(980u64..1010),
        delay in proptest::option::of(-60i32..3600),
        ephemeral in any::<bool>(),
    ) -> DesiredInput {
        DesiredInput {
            min_replicas: min,
            max_replicas: Some(max),
            scale_down_delay_seconds: delay,
            default_scale_down_delay: mins(10),
            scheduled_overrides: override_min
                .map(|m| ScheduledOverride {
                    start: t(NOW - 5),
                    end: t(NOW + 5),
                    min_replicas: m,
                    recurrence: None,
                })
                .into_iter()
                .collect(),
            suggestion: Suggestion {
                replicas: suggested,
                metric: suggested.map(|_| MetricKind::PercentageRunnersBusy),
                detail: String::new(),
                counted_jobs: None,
            },
            reservations,
            previous_desired: previous,
            last_scale_out: last_scale_out.map(t),
            ephemeral,
            now: t(NOW),
        }
    }
}

proptest! {
    #[test]
    fn desired_is_always_within_min_and_max(input in desired_input()) {
        let d = desired_replicas(&input).unwrap();
        let max = u32::try_from(input.max_replicas.unwrap()).unwrap();
        prop_assert_eq!(d.max, max);
        prop_assert!(d.min <= d.max);
        prop_assert!(d.min <= d.desired && d.desired <= d.max, "{:?}", d);
    }

    #[test]
    fn no_scale_down_within_the_delay_after_a_scale_out(input in desired_input()) {
        let d = desired_replicas(&input).unwrap();
        let delay = match input.scale_down_delay_seconds {
            Some(s) => Duration::from_secs(u64::try_from(s).unwrap_or(0)),
            None => input.default_scale_down_delay,
        };
        if let (Some(previous), Some(last)) = (input.previous_desired, input.last_scale_out)
            && input.now < last + delay
        {
            // Only maxReplicas (a hard limit) may force the count below the previous one.
            prop_assert!(d.desired >= previous.min(d.max), "{:?}", d);
        }
    }

    #[test]
    fn scale_out_means_more_than_before(input in desired_input()) {
        let d = desired_replicas(&input).unwrap();
        prop_assert_eq!(d.scale_out, d.desired > input.previous_desired.unwrap_or(1));
    }

    #[test]
    fn the_effective_time_is_that_of_an_unexpired_reservation(input in desired_input()) {
        let d = desired_replicas(&input).unwrap();
        if let Some(effective) = d.effective_time {
            prop_assert!(input.ephemeral);
            // While demand is capped at maxReplicas it is `now` (jobs still wait).
            prop_assert!(d.backlog && effective == input.now || input
                .reservations
                .iter()
                .any(|r| r.effective_time == effective && r.expiration_time > input.now));
        }
    }

    #[test]
    fn reservations_follow_exactly_what_the_operations_imply(
        existing in proptest::collection::vec(reservation(), 0..10),
        ops in proptest::collection::vec(scale_op(), 0..12),
        max in proptest::option::of(0u32..6),
    ) {
        let now = t(NOW);
        let duration = mins(10);
        let job_ops: Vec<JobOp> = ops.iter().copied().map(JobOp::from).collect();
        let u = apply_scale_operations(&existing, &job_ops, now, max, duration);
        let total = |rs: &[Reservation]| rs.iter().map(|r| u64::from(r.replicas)).sum::<u64>();
        let active: Vec<Reservation> =
            existing.iter().filter(|r| r.expiration_time > now).cloned().collect();
        let ups = ops.iter().filter(|o| **o == ScaleOp::Up).count() as u64;
        let downs = ops.len() as u64 - ups;
        // Never negative, never more than what is left after the releases.
        prop_assert_eq!(total(&u.reservations), (total(&active) + ups).saturating_sub(downs));
        prop_assert!(u.reservations.len() as u64 <= active.len() as u64 + ups);
        prop_assert_eq!(u64::from(u.added), ups);
        prop_assert_eq!(u64::from(u.removed + u.unmatched_downs), downs);
        // Everything returned is alive, and queued demand beyond max has the full duration.
        let mut before = 0u32;
        for r in &u.reservations {
            prop_assert!(r.expiration_time > now);
            before += r.replicas;
            if let Some(max) = max
                && before > max
                && r.replicas > 0
            {
                prop_assert!(r.expiration_time >= now + duration);
            }
        }
    }

    #[test]
    fn applying_nothing_twice_changes_nothing_the_second_time(
        existing in proptest::collection::vec(reservation(), 0..10),
        max in proptest::option::of(0u32..6),
    ) {
        let once = apply_scale_operations(&existing, &[], t(NOW), max, mins(10));
        let twice = apply_scale_operations(&once.reservations, &[], t(NOW), max, mins(10));
        prop_assert!(!twice.changed());
        prop_assert_eq!(twice.reservations, once.reservations);
    }

    #[test]
    fn busy_scaling_moves_in_its_direction(
        before in 0u32..200,
        busy in 0u32..250,
        up in 1.0f64..3.0,
        down in 0.0f64..1.0,
        up_threshold in 0.0f64..1.5,
        down_threshold in 0.0f64..1.0,
    ) {
        let policy = BusyPolicy {
            scale_up_threshold: up_threshold,
            scale_down_threshold: down_threshold,
            up: Step::Factor(up),
            down: Step::Factor(down),
        };
        let s = policy.suggest(before, before, busy);
        match s.direction {
            // A factor of (nearly) 1 may keep the count; from zero it always adds a runner.
            Some(Direction::Up) => prop_assert!(s.replicas >= before.max(1)),
            Some(Direction::Down) => prop_assert!(s.replicas <= before),
            None => prop_assert_eq!(s.replicas, before),
        }
    }
}

// ---- schedules against a brute-force enumeration ----

fn frequency() -> impl Strategy<Value = Frequency> {
    prop_oneof![
        Just(Frequency::Daily),
        Just(Frequency::Weekly),
        Just(Frequency::Monthly),
        Just(Frequency::Yearly),
    ]
}

/// Every repetition start up to `bound`, stepping naively through the calendar.
fn naive_starts(o: &ScheduledOverride, bound: i128) -> Vec<i128> {
    let first = civil::to_nanos(o.start);
    let recurrence = o.recurrence.unwrap();
    let until = recurrence.until.map_or(i128::MAX, civil::to_nanos);
    let c = Civil::of(first);
    let mut starts = Vec::new();
    for k in 0i64.. {
        let candidate = match recurrence.frequency {
            Frequency::Daily => Some(first + i128::from(k) * civil::DAY),
            Frequency::Weekly => Some(first + i128::from(k) * 7 * civil::DAY),
            Frequency::Monthly => {
                let (y, m) = civil::year_month(c.month_index() + k);
                civil::instant_on(y, m, c.day, c.time_of_day)
            }
            Frequency::Yearly => civil::instant_on(c.year + k, c.month, c.day, c.time_of_day),
        };
        let Some(s) = candidate else { continue };
        if s > bound || s > until {
            break;
        }
        starts.push(s);
    }
    starts
}

prop_compose! {
    fn recurring_override()(
        frequency in frequency(),
        // 2019-01-01 .. 2031-01-01, minute resolution; the 28th-31st and leap days are common.
        start_day in 17_897i64..22_281,
        start_minute in 0i64..1440,
        length_fraction in 0.0f64..=1.0,
        until_days in proptest::option::of(0i64..3000),
    ) -> ScheduledOverride {
        let start = civil::from_nanos(
            i128::from(start_day * 86_400 + start_minute * 60) * civil::SECOND,
        ).unwrap();
        let limit = frequency.shortest_interval();
        let length = Duration::from_secs((limit.as_secs() as f64 * length_fraction) as u64);
        ScheduledOverride {
            start,
            end: start + length,
            min_replicas: Some(3),
            recurrence: Some(Recurrence {
                frequency,
                until: until_days.map(|d| start + Duration::from_secs(d as u64 * 86_400)),
            }),
        }
    }
}

fn near_month_ends() -> impl Strategy<Value = SystemTime> {
    (17_897i64..24_000, 0i64..1440).prop_map(|(day, minute)| {
        civil::from_nanos(i128::from(day * 86_400 + minute * 60) * civil::SECOND).unwrap()
    })
}

proptest! {
    #[test]
    fn the_active_repetition_is_the_one_brute_force_finds(
        o in recurring_override(),
        now in near_month_ends(),
    ) {
        let n = civil::to_nanos(now);
        let length = civil::to_nanos(o.end) - civil::to_nanos(o.start);
        let expected = naive_starts(&o, n)
            .into_iter()
            .rev()
            .find(|s| n < s + length)
            .filter(|_| length > 0);
        let active = active_override(std::slice::from_ref(&o), now).unwrap();
        prop_assert_eq!(
            active.map(|a| civil::to_nanos(a.window.start)),
            expected
        );
    }

    #[test]
    fn the_upcoming_repetition_is_the_first_brute_force_finds_after_now(
        o in recurring_override(),
        now in near_month_ends(),
    ) {
        let n = civil::to_nanos(now);
        let length = civil::to_nanos(o.end) - civil::to_nanos(o.start);
        // Nine years past now or the first start cover the longest gap (a leap day skipping a
        // century year).
        let horizon = n.max(civil::to_nanos(o.start)) + 9 * 366 * civil::DAY;
        let expected = naive_starts(&o, horizon)
            .into_iter()
            .find(|s| *s > n)
            .filter(|_| length > 0);
        let upcoming = upcoming_override(std::slice::from_ref(&o), now).unwrap();
        prop_assert_eq!(upcoming.map(|u| civil::to_nanos(u.window.start)), expected);
    }
}

// ---- dedup and batching against simple models ----

proptest! {
    #[test]
    fn dedup_reports_first_exactly_when_the_key_was_not_seen_within_the_window(
        events in proptest::collection::vec((0u8..6, 0u64..5), 1..60),
    ) {
        let window = mins(10);
        let mut dedup = Dedup::new(window, 1000);
        let mut first_seen: HashMap<u8, SystemTime> = HashMap::new();
        let mut now = t(0);
        for (key, step) in events {
            now += mins(step);
            let fresh = first_seen.get(&key).is_none_or(|at| *at + window <= now);
            let seen = dedup.observe(key, now);
            prop_assert_eq!(seen == Seen::First, fresh);
            if fresh {
                first_seen.insert(key, now);
            }
        }
    }

    #[test]
    fn batching_loses_no_operation_and_writes_each_key_at_most_once_per_interval(
        events in proptest::collection::vec((0u8..4, any::<bool>(), 0u64..3), 1..80),
    ) {
        let interval = Duration::from_secs(3);
        let mut batcher = Batcher::new(interval, 1000);
        let mut pushed: HashMap<u8, Vec<ScaleOp>> = HashMap::new();
        let mut written: HashMap<u8, Vec<ScaleOp>> = HashMap::new();
        let mut last_write: HashMap<u8, SystemTime> = HashMap::new();
        let mut now = t(0);
        let mut drain = |batcher: &mut Batcher<u8>, now: SystemTime| -> Result<(), TestCaseError> {
            for batch in batcher.take_due(now) {
                if let Some(previous) = last_write.insert(batch.key, now) {
                    prop_assert!(previous + interval <= now);
                }
                written.entry(batch.key).or_default().extend(batch.ops);
            }
            Ok(())
        };
        for (key, up, step) in events {
            now += Duration::from_secs(step);
            let op = if up { ScaleOp::Up } else { ScaleOp::Down };
            batcher.push(key, op, now).unwrap();
            pushed.entry(key).or_default().push(op);
            drain(&mut batcher, now)?;
        }
        drain(&mut batcher, now + interval)?;
        prop_assert_eq!(batcher.queued(), 0);
        prop_assert_eq!(written, pushed);
    }
}
