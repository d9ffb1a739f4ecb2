//! The HRA's after-decision phase: target patch, scaling event, kept reservations, last
//! scale-out, requeue. One row per branch plus precedence rows.

use std::time::{Duration, SystemTime};

use super::{mins, t};
use crate::autoscaler::after::*;
use crate::autoscaler::desired::BACKLOG_REFRESH;
use crate::autoscaler::{
    Decision, Recurrence, Reservation, ScheduledOverride, ScheduledWindow, Window,
};

const SYNC: Duration = Duration::from_secs(600);

fn decision(desired: u32) -> Decision {
    Decision {
        desired,
        scale_out: false,
        effective_time: None,
        backlog: false,
        min: 0,
        max: 10,
        suggested: desired,
        reserved: 0,
        held_until: None,
        active_override: None,
        schedule_summary: None,
        reason: "test".into(),
        counted_jobs: None,
    }
}

/// A reservation from minute 0 expiring at minute `until`.
fn reservation(until: u64) -> Reservation {
    Reservation::new(t(0), mins(until))
}

struct Case {
    decision: Decision,
    target_replicas: Option<i32>,
    target_effective_time: Option<SystemTime>,
    target_reads_demand: bool,
    reservations: Vec<Reservation>,
    overrides: Vec<ScheduledOverride>,
    last_scale_out: Option<SystemTime>,
    now: SystemTime,
}

fn case(desired: u32, target_replicas: Option<i32>) -> Case {
    Case {
        decision: decision(desired),
        target_replicas,
        target_effective_time: None,
        target_reads_demand: false,
        reservations: Vec::new(),
        overrides: Vec::new(),
        last_scale_out: None,
        now: t(10),
    }
}

fn plan(c: &Case) -> AfterPlan {
    after(&AfterInput {
        decision: &c.decision,
        target_replicas: c.target_replicas,
        target_effective_time: c.target_effective_time,
        target_reads_demand: c.target_reads_demand,
        reservations: &c.reservations,
        overrides: &c.overrides,
        last_scale_out: c.last_scale_out,
        now: c.now,
        sync_period: SYNC,
    })
}

/// (claim, case, patch, scaled_from)
type PatchRow = (&'static str, Case, Option<TargetPatch>, Option<Option<i32>>);

#[test]
fn the_target_is_patched_only_when_replicas_or_whole_seconds_differ() {
    let sub = Duration::from_millis(400);
    let with_time = |mut c: Case, decided: SystemTime, stored: Option<SystemTime>| {
        c.decision.effective_time = Some(decided);
        c.target_effective_time = stored;
        c
    };
    let reading_demand = |mut c: Case| {
        c.target_reads_demand = true;
        c
    };
    let rows: Vec<PatchRow> = vec![
        (
            "same replicas, no effective time: nothing",
            case(2, Some(2)),
            None,
            None,
        ),
        (
            "same replicas, effective time equal to the second: nothing",
            with_time(case(2, Some(2)), t(5), Some(t(5))),
            None,
            None,
        ),
        (
            "a sub-second difference is no difference (the API server stores seconds)",
            with_time(case(2, Some(2)), t(5) + sub, Some(t(5))),
            None,
            None,
        ),
        (
            "replicas differ: patch and a scaling",
            case(3, Some(2)),
            Some(TargetPatch {
                replicas: 3,
                effective_time: None,
            }),
            Some(Some(2)),
        ),
        (
            "unset replicas: a scaling from unset",
            case(1, None),
            Some(TargetPatch {
                replicas: 1,
                effective_time: None,
            }),
            Some(None),
        ),
        (
            "only the effective time differs: patch, no scaling",
            with_time(case(2, Some(2)), t(6), Some(t(5))),
            Some(TargetPatch {
                replicas: 2,
                effective_time: Some(t(6)),
            }),
            None,
        ),
        (
            "the target has no effective time yet: patch it",
            with_time(case(2, Some(2)), t(6), None),
            Some(TargetPatch {
                replicas: 2,
                effective_time: Some(t(6)),
            }),
            None,
        ),
        (
            "both differ: one patch carrying both, a scaling",
            with_time(case(4, Some(2)), t(6), Some(t(5))),
            Some(TargetPatch {
                replicas: 4,
                effective_time: Some(t(6)),
            }),
            Some(Some(2)),
        ),
        (
            "a target that reads the demand itself: the time alone is no patch",
            reading_demand(with_time(case(2, Some(2)), t(6), Some(t(5)))),
            None,
            None,
        ),
        (
            "a target that reads the demand itself gets the time with a change of replicas",
            reading_demand(with_time(case(4, Some(2)), t(6), Some(t(5)))),
            Some(TargetPatch {
                replicas: 4,
                effective_time: Some(t(6)),
            }),
            Some(Some(2)),
        ),
        (
            "replicas differ, effective time the same: the time is not rewritten",
            with_time(case(4, Some(2)), t(5), Some(t(5))),
            Some(TargetPatch {
                replicas: 4,
                effective_time: None,
            }),
            Some(Some(2)),
        ),
    ];
    for (claim, c, patch, scaled_from) in rows {
        let p = plan(&c);
        assert_eq!(p.patch_target, patch, "{claim}: patch");
        assert_eq!(p.scaled_from, scaled_from, "{claim}: scaled_from");
        assert_eq!(
            p.desired,
            i32::try_from(c.decision.desired).unwrap(),
            "{claim}"
        );
    }
}

#[test]
fn a_count_beyond_i32_is_capped() {
    assert_eq!(plan(&case(u32::MAX, Some(1))).desired, i32::MAX);
}

/// (claim, expiry minutes of the stored reservations, keep)
type KeepRow = (&'static str, Vec<u64>, Option<Vec<usize>>);

#[test]
fn expired_reservations_are_dropped_only_when_there_are_some() {
    // Now is minute 10: a reservation until minute 10 has expired (expiry is exclusive).
    let rows: Vec<KeepRow> = vec![
        ("none stored: nothing to write", vec![], None),
        ("none expired: nothing to write", vec![20, 30], None),
        (
            "some expired: keep the active ones, in order",
            vec![5, 20, 10, 30],
            Some(vec![1, 3]),
        ),
        ("all expired: keep none", vec![5, 10], Some(vec![])),
    ];
    for (claim, untils, keep) in rows {
        let mut c = case(1, Some(1));
        c.reservations = untils.into_iter().map(reservation).collect();
        assert_eq!(plan(&c).keep, keep, "{claim}");
    }
}

#[test]
fn a_scale_out_stamps_now_else_the_previous_time_stays() {
    let rows = [
        ("scale-out: now", true, Some(t(1)), Some(t(10))),
        ("scale-out, none before: now", true, None, Some(t(10))),
        ("no scale-out: the previous", false, Some(t(1)), Some(t(1))),
        ("no scale-out, none before: none", false, None, None),
    ];
    for (claim, scale_out, previous, want) in rows {
        let mut c = case(2, Some(2));
        c.decision.scale_out = scale_out;
        c.last_scale_out = previous;
        assert_eq!(plan(&c).last_scale_out, want, "{claim}");
    }
}

#[test]
fn requeue_is_the_earliest_instant_that_can_change_the_decision() {
    let slack = BOUNDARY_SLACK;
    let window = |start: u64, end: u64| ScheduledWindow {
        index: 0,
        min_replicas: Some(1),
        window: Window {
            start: t(start),
            end: t(end),
        },
        summary: String::new(),
    };
    let once = |start: u64, end: u64| ScheduledOverride {
        start: t(start),
        end: t(end),
        min_replicas: Some(1),
        recurrence: None::<Recurrence>,
    };
    // Now is minute 10. (claim, case, requeue)
    let rows: Vec<(&str, Case, Duration)> = vec![
        ("nothing pending: the sync period", case(1, Some(1)), SYNC),
        (
            "an active reservation's expiry",
            Case {
                reservations: vec![reservation(5), reservation(13), reservation(30)],
                ..case(1, Some(1))
            },
            mins(3) + slack,
        ),
        (
            "the end of the scale-down delay",
            Case {
                decision: Decision {
                    held_until: Some(t(12)),
                    ..decision(1)
                },
                ..case(1, Some(1))
            },
            mins(2) + slack,
        ),
        (
            "a backlog refreshes soon",
            Case {
                decision: Decision {
                    backlog: true,
                    ..decision(1)
                },
                ..case(1, Some(1))
            },
            BACKLOG_REFRESH + slack,
        ),
        (
            "the end of the active override",
            Case {
                decision: Decision {
                    active_override: Some(window(9, 14)),
                    ..decision(1)
                },
                ..case(1, Some(1))
            },
            mins(4) + slack,
        ),
        (
            "the start of the next override",
            Case {
                overrides: vec![once(15, 20)],
                ..case(1, Some(1))
            },
            mins(5) + slack,
        ),
        (
            "precedence: the earliest of all wins",
            Case {
                decision: Decision {
                    held_until: Some(t(12)),
                    active_override: Some(window(9, 14)),
                    ..decision(1)
                },
                reservations: vec![reservation(11)],
                overrides: vec![once(15, 20)],
                ..case(1, Some(1))
            },
            mins(1) + slack,
        ),
        (
            "precedence: the sync period caps far instants",
            Case {
                reservations: vec![reservation(60)],
                ..case(1, Some(1))
            },
            SYNC,
        ),
    ];
    for (claim, c, requeue) in rows {
        assert_eq!(plan(&c).requeue, requeue, "{claim}");
    }
}

#[test]
fn requeue_is_the_earliest_wake_up_or_the_period() {
    let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
    let period = Duration::from_secs(60);
    assert_eq!(requeue_after(at(100), &[], period), period);
    assert_eq!(
        requeue_after(at(100), &[at(110), at(130)], period),
        Duration::from_secs(10) + BOUNDARY_SLACK
    );
    // A boundary already passed wakes at once (plus slack), never panics.
    assert_eq!(requeue_after(at(100), &[at(90)], period), BOUNDARY_SLACK);
}
