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

/// An autoscaler counting from reservations alone (`list`), its status current at generation 7
/// with a count of 2 (of at most 4).
fn webhook_driven(list: &[Reservation]) -> AutoscalerView<'_> {
    AutoscalerView {
        generation: Some(7),
        observed_generation: Some(7),
        desired: Some(2),
        has_metrics: false,
        reservations: list,
        max_replicas: Some(4),
        min_replicas_floor: 0,
        scale_down_held_until: None,
        counted: None,
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
    let view = webhook_driven(&list);
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
            observed_generation: Some(6),
            desired: Some(4),
            ..webhook_driven(list)
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
        (
            "a set at the minReplicas floor: no completion can lower the count",
            AutoscalerView {
                min_replicas_floor: 4,
                ..view(&four)
            },
            4,
            u32::MAX,
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

/// An autoscaler whose only metric counts jobs: `jobs` counted at `t(observed)`, asking for 4.
fn counting(jobs: u32, observed: u64) -> AutoscalerView<'static> {
    AutoscalerView {
        generation: Some(3),
        observed_generation: Some(3),
        desired: Some(4),
        has_metrics: true,
        reservations: &[],
        max_replicas: Some(4),
        min_replicas_floor: 0,
        scale_down_held_until: None,
        counted: Some(CountedJobs {
            jobs,
            observed_at: t(observed),
        }),
    }
}

#[test]
fn counted_jobs_absorb_as_many_completions_as_jobs_wait_beyond_the_set() {
    let tombstones = [tombstone(1, Some("pool-a"))];
    // (case, view, the set's count, completions absorbed)
    let rows: Vec<(&str, AutoscalerView, u32, u32)> = vec![
        ("7 jobs for 4 runners: 3 wait", counting(7, 5), 4, 3),
        ("4 jobs for 4 runners: none waits", counting(4, 5), 4, 0),
        (
            "the set's count is not the autoscaler's",
            counting(7, 5),
            3,
            0,
        ),
        (
            "no count recorded (another metric, or an older controller)",
            AutoscalerView {
                counted: None,
                ..counting(7, 5)
            },
            4,
            0,
        ),
        (
            "reservations beside the metric: a completion may lower both",
            AutoscalerView {
                reservations: &tombstones,
                ..counting(7, 5)
            },
            4,
            0,
        ),
        (
            "at the minReplicas floor every completion is absorbed",
            AutoscalerView {
                min_replicas_floor: 4,
                ..counting(0, 5)
            },
            4,
            u32::MAX,
        ),
    ];
    for (case, view, set_desired, absorbed) in rows {
        assert_eq!(
            completions_absorbed(&view, set_desired, t(9)),
            absorbed,
            "{case}"
        );
    }
}

#[test]
fn an_observation_of_the_jobs_reflects_what_finished_before_it() {
    // (case, view, the set's count, reflected before, the set holds finished runners' places)
    let rows: Vec<(
        &str,
        AutoscalerView,
        u32,
        Option<std::time::SystemTime>,
        bool,
    )> = vec![
        (
            "current, the set's count",
            counting(4, 5),
            4,
            Some(t(5)),
            true,
        ),
        ("the set's count differs", counting(4, 5), 3, None, true),
        (
            "status from an older spec",
            AutoscalerView {
                observed_generation: Some(2),
                ..counting(4, 5)
            },
            4,
            None,
            true,
        ),
        (
            "no count recorded",
            AutoscalerView {
                counted: None,
                ..counting(4, 5)
            },
            4,
            None,
            false,
        ),
        (
            "no metric: reservations tell by name",
            AutoscalerView {
                has_metrics: false,
                ..counting(4, 5)
            },
            4,
            None,
            false,
        ),
    ];
    for (case, view, set_desired, before, holds) in rows {
        assert_eq!(reflected_before(&view, set_desired), before, "{case}");
        assert_eq!(counts_jobs(&view), holds, "{case}");
        assert!(
            reflected_completions(&view, set_desired).is_empty() || !view.has_metrics,
            "{case}: a count of jobs names no runner"
        );
    }
}

#[test]
fn a_set_reads_the_newest_demand_only_with_a_count_the_reservations_still_ask_for() {
    let at = |minute: u64| Reservation {
        job: Some(JobKey {
            id: minute,
            attempt: 1,
        }),
        ..Reservation::new(t(minute), mins(10))
    };
    // Queued at minutes 1 and 3 (expiring at 11 and 13), and a completed job's tombstone made at
    // minute 5 (no demand).
    let list = vec![
        at(1),
        at(3),
        Reservation {
            replicas: 0,
            ..at(5)
        },
    ];
    let view = AutoscalerView {
        observed_generation: Some(6),
        ..webhook_driven(&list)
    };
    // (case, view, the set's count, now, newest demand)
    let rows: Vec<(&str, AutoscalerView, u32, u64, Option<u64>)> = vec![
        (
            "two reservations ask for the set's 2: the newest, whatever the status's generation",
            view,
            2,
            6,
            Some(3),
        ),
        (
            "one expired: they ask for fewer than the set's count, which is about to drop",
            view,
            2,
            12,
            None,
        ),
        (
            "one expired, but the scale-down delay keeps the count",
            AutoscalerView {
                scale_down_held_until: Some(t(20)),
                ..view
            },
            2,
            12,
            Some(3),
        ),
        (
            "one expired, and the scale-down delay is over",
            AutoscalerView {
                scale_down_held_until: Some(t(12)),
                ..view
            },
            2,
            12,
            None,
        ),
        (
            "one expired, but minReplicas keeps the count",
            AutoscalerView {
                min_replicas_floor: 1,
                ..view
            },
            2,
            12,
            Some(3),
        ),
        (
            "more reserved than maxReplicas: the count at max is asked for",
            AutoscalerView {
                desired: Some(1),
                max_replicas: Some(1),
                ..view
            },
            1,
            6,
            Some(3),
        ),
        (
            "the set holds part of the count (a rollout, or the write not there yet)",
            view,
            1,
            6,
            None,
        ),
        (
            "beside a metric the set keeps its own effectiveTime",
            AutoscalerView {
                has_metrics: true,
                ..view
            },
            2,
            6,
            None,
        ),
    ];
    for (case, view, set, now, newest) in rows {
        assert_eq!(demand_since(&view, set, t(now)), newest.map(t), "{case}");
    }
}
