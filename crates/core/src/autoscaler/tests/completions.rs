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
