//! Which finished runners a set's count already accounts for, one row per condition.

use std::collections::BTreeSet;

use super::{mins, t};
use crate::autoscaler::completions::*;
use crate::autoscaler::reservations::{JobKey, Reservation};

/// Job `id`'s tombstone, naming `runner` when given.
fn tombstone(id: u64, runner: Option<&str>) -> Reservation {
    Reservation {
        replicas: 0,
        job: Some(JobKey { id, attempt: 1 }),
        runner: runner.map(str::to_owned),
        ..Reservation::new(t(0), mins(10))
    }
}

/// A reservation still holding a runner for job `id`.
fn reserved(id: u64) -> Reservation {
    Reservation {
        job: Some(JobKey { id, attempt: 1 }),
        ..Reservation::new(t(0), mins(10))
    }
}

#[test]
fn only_a_count_computed_from_the_tombstones_releases_their_runners() {
    let list = vec![
        tombstone(1, Some("pool-a")),
        tombstone(2, None),
        reserved(3),
        tombstone(4, Some("pool-b")),
    ];
    let view = AutoscalerView {
        generation: Some(7),
        observed_generation: Some(7),
        desired: Some(2),
        has_metrics: false,
        reservations: &list,
        max_replicas: Some(4),
        min_replicas_floor: 0,
    };
    let both = BTreeSet::from(["pool-a".to_owned(), "pool-b".to_owned()]);
    // (case, view, the set's count, released)
    let rows: Vec<(&str, AutoscalerView, u32, BTreeSet<String>)> = vec![
        (
            "the named tombstones of a current status with the set's count",
            view,
            2,
            both,
        ),
        (
            "status computed from an older spec",
            AutoscalerView {
                observed_generation: Some(6),
                ..view
            },
            2,
            BTreeSet::new(),
        ),
        (
            "no status yet",
            AutoscalerView {
                observed_generation: None,
                desired: None,
                ..view
            },
            2,
            BTreeSet::new(),
        ),
        (
            "the set's count is not the one computed (not propagated yet, or split by a rollout)",
            view,
            3,
            BTreeSet::new(),
        ),
        (
            "pull metrics may still count the job",
            AutoscalerView {
                has_metrics: true,
                ..view
            },
            2,
            BTreeSet::new(),
        ),
        (
            "no generation at all",
            AutoscalerView {
                generation: None,
                observed_generation: None,
                ..view
            },
            2,
            BTreeSet::new(),
        ),
    ];
    for (case, view, set_desired, released) in rows {
        assert_eq!(
            reflected_completions(&view, set_desired),
            released,
            "{case}"
        );
    }
}

#[test]
fn completions_not_yet_heard_are_absorbed_while_jobs_wait_beyond_the_count() {
    // Four runners at maxReplicas 4; reserved(n) holds one runner each, tombstones none.
    let waiting = |n: u64| -> Vec<Reservation> {
        (0..n)
            .map(reserved)
            .chain([tombstone(99, Some("pool-a"))])
            .collect()
    };
    fn view(list: &[Reservation]) -> AutoscalerView<'_> {
        AutoscalerView {
            generation: Some(7),
            observed_generation: Some(6),
            desired: Some(4),
            has_metrics: false,
            reservations: list,
            max_replicas: Some(4),
            min_replicas_floor: 0,
        }
    }
    let (six, four) = (waiting(6), waiting(4));
    // (case, view, the set's count, completions absorbed)
    let rows: Vec<(&str, AutoscalerView, u32, u32)> = vec![
        (
            "two jobs wait beyond the count: two completions leave it at 4 (a status from an older spec does not matter)",
            view(&six),
            4,
            2,
        ),
        ("no job waits: none", view(&four), 4, 0),
        (
            "the set's count is not the autoscaler's (in flight, or split by a rollout)",
            view(&six),
            3,
            0,
        ),
        (
            "pull metrics may count anything",
            AutoscalerView {
                has_metrics: true,
                ..view(&six)
            },
            4,
            0,
        ),
        (
            "a count above maxReplicas cannot be kept by reservations",
            AutoscalerView {
                max_replicas: Some(3),
                ..view(&six)
            },
            4,
            0,
        ),
        (
            "minReplicas adds to what reservations keep: one more absorbed",
            AutoscalerView {
                min_replicas_floor: 1,
                ..view(&six)
            },
            4,
            3,
        ),
        (
            "no maxReplicas (invalid): none",
            AutoscalerView {
                max_replicas: None,
                ..view(&six)
            },
            4,
            0,
        ),
    ];
    for (case, view, set_desired, absorbed) in rows {
        assert_eq!(
            completions_absorbed(&view, set_desired, t(1)),
            absorbed,
            "{case}"
        );
    }
}

#[test]
fn the_min_replicas_floor_is_the_lowest_the_spec_or_an_override_allows() {
    /// (case, spec's minReplicas, overrides' minReplicas, floor)
    type Row = (&'static str, Option<i32>, Vec<Option<i32>>, u32);
    let rows: [Row; 5] = [
        ("unset counts as the default 1", None, vec![], 1),
        ("negative counts as the default 1", Some(-3), vec![], 1),
        ("the spec's", Some(3), vec![], 3),
        (
            "an override that lowers it",
            Some(3),
            vec![Some(5), Some(0)],
            0,
        ),
        ("an unset override keeps the spec's", Some(3), vec![None], 3),
    ];
    for (case, spec, overrides, floor) in rows {
        assert_eq!(min_replicas_floor(spec, &overrides), floor, "{case}");
    }
}
