//! Capacity reservations under batches of webhook operations.

use super::{mins, t};
use crate::autoscaler::reservations::*;

const NOW: u64 = 100;
const DURATION: u64 = 10;

fn r(made: u64, expires: u64) -> Reservation {
    Reservation {
        name: None,
        effective_time: t(made),
        expiration_time: t(expires),
        replicas: 1,
        job: None,
        delivery: None,
        runner: None,
        trigger: None,
    }
}

fn apply(existing: &[Reservation], ops: &[ScaleOp], max: Option<u32>) -> ReservationUpdate {
    let ops: Vec<JobOp> = ops.iter().copied().map(JobOp::from).collect();
    apply_scale_operations(existing, &ops, t(NOW), max, mins(DURATION))
}

use ScaleOp::{Down, Up};

#[test]
fn a_queued_job_appends_one_replica_for_the_duration() {
    let u = apply(&[r(90, 105)], &[Up], None);
    assert_eq!(u.reservations, vec![r(90, 105), r(NOW, NOW + DURATION)]);
    assert_eq!((u.added, u.removed), (1, 0));
    assert!(u.changed());
}

#[test]
fn a_completed_job_removes_the_oldest_reservation() {
    let u = apply(&[r(90, 105), r(95, 108)], &[Down], None);
    assert_eq!(u.reservations, vec![r(95, 108)]);
    assert_eq!(u.removed, 1);
}

#[test]
fn a_completion_with_nothing_reserved_is_ignored_so_the_count_never_goes_negative() {
    let u = apply(&[], &[Down, Down], None);
    assert!(u.reservations.is_empty());
    assert_eq!((u.removed, u.unmatched_downs), (0, 2));
    assert!(!u.changed());
}

#[test]
fn expired_reservations_are_dropped_including_those_expiring_now() {
    let u = apply(&[r(80, 90), r(85, NOW), r(90, 105)], &[], None);
    assert_eq!(u.reservations, vec![r(90, 105)]);
    assert_eq!(u.expired, 2);
    assert!(u.changed());
}

#[test]
fn a_completion_never_consumes_an_expired_reservation() {
    let u = apply(&[r(80, 90), r(90, 105)], &[Down], None);
    assert!(u.reservations.is_empty());
    assert_eq!((u.expired, u.removed), (1, 1));
}

#[test]
fn additions_apply_before_removals_so_a_completion_overtaking_its_queued_cancels_it() {
    let u = apply(&[], &[Down, Up], None);
    assert!(u.reservations.is_empty());
    assert_eq!((u.added, u.removed, u.unmatched_downs), (1, 1, 0));
}

#[test]
fn in_a_mixed_batch_the_oldest_reservations_go_first() {
    let u = apply(&[r(90, 105)], &[Up, Down], None);
    assert_eq!(u.reservations, vec![r(NOW, NOW + DURATION)]);
}

#[test]
fn reservations_waiting_beyond_max_replicas_are_kept_alive_for_the_duration() {
    // max 2: the third and fourth reservations wait for a runner.
    let existing = [r(90, 101), r(91, 102), r(92, 103), r(93, 104)];
    let u = apply(&existing, &[], Some(2));
    assert_eq!(
        u.reservations,
        vec![
            r(90, 101),
            r(91, 102),
            r(92, NOW + DURATION),
            r(93, NOW + DURATION)
        ]
    );
    assert_eq!(u.extended, 2);
    assert!(u.changed());
}

#[test]
fn the_extension_never_shortens_an_expiry() {
    let existing = [r(90, 101), r(91, 200)];
    let u = apply(&existing, &[], Some(1));
    assert_eq!(u.reservations, existing.to_vec());
    assert_eq!(u.extended, 0);
    assert!(!u.changed());
}

#[test]
fn repeated_writes_do_not_compound_the_extension() {
    let existing = [r(90, 101), r(91, 102)];
    let once = apply(&existing, &[], Some(1));
    let twice = apply(&once.reservations, &[], Some(1));
    assert_eq!(twice.reservations, once.reservations);
    assert!(!twice.changed());
}

#[test]
fn reservations_within_max_replicas_or_without_a_max_are_not_extended() {
    let existing = [r(90, 101), r(91, 102)];
    assert_eq!(apply(&existing, &[], Some(2)).extended, 0);
    assert_eq!(apply(&existing, &[], None).extended, 0);
}

#[test]
fn removal_comes_before_the_extension_so_the_next_in_line_starts_its_countdown() {
    // max 1: after the oldest is released, the second holds the runner and is not extended.
    let existing = [r(90, 101), r(91, 102)];
    let u = apply(&existing, &[Down], Some(1));
    assert_eq!(u.reservations, vec![r(91, 102)]);
}

#[test]
fn a_completion_decrements_a_reservation_of_several_replicas() {
    let mut big = r(90, 105);
    big.replicas = 3;
    let u = apply(&[big.clone()], &[Down], None);
    big.replicas = 2;
    assert_eq!(u.reservations, vec![big]);
}

#[test]
fn a_completion_skips_reservations_of_zero_replicas() {
    let mut empty = r(89, 105);
    empty.replicas = 0;
    let u = apply(&[empty.clone(), r(90, 105)], &[Down], None);
    assert_eq!(u.reservations, vec![empty]);
}

#[test]
fn names_of_kept_reservations_are_preserved() {
    let mut named = r(90, 105);
    named.name = Some("from-arc".into());
    let u = apply(&[named.clone()], &[Up], None);
    assert_eq!(u.reservations[0], named);
}

#[test]
fn reserved_replicas_sum_the_unexpired_reservations() {
    let mut two = r(90, 105);
    two.replicas = 2;
    assert_eq!(reserved_replicas(&[two, r(90, 99), r(90, NOW)], t(NOW)), 2);
}

#[test]
fn the_default_duration_is_ten_minutes() {
    assert_eq!(DEFAULT_RESERVATION_DURATION, mins(10));
}

/// A reservation of `replicas` for job `id` (attempt 1 unless `attempt` says otherwise).
fn job(id: u64, attempt: u32, made: u64, expires: u64, replicas: u32) -> Reservation {
    Reservation {
        job: Some(JobKey { id, attempt }),
        delivery: Some(format!("d-{id}")),
        replicas,
        ..r(made, expires)
    }
}

fn op(op: ScaleOp, id: u64, attempt: u32) -> JobOp {
    JobOp {
        op,
        job: Some(JobKey { id, attempt }),
        delivery: Some(format!("d-{id}")),
        runner: None,
        event: None,
    }
}

/// The `completed` of job `id` (attempt 1) that runner `runner` ran.
fn ran(id: u64, runner: &str) -> JobOp {
    JobOp {
        runner: Some(runner.into()),
        ..op(Down, id, 1)
    }
}

/// Job `id`'s tombstone naming the runner that ran it.
fn tombstone_of(id: u64, made: u64, expires: u64, runner: &str) -> Reservation {
    Reservation {
        runner: Some(runner.into()),
        ..job(id, 1, made, expires, 0)
    }
}

/// Case, existing list, operations, expected list, and
/// (added, removed, duplicates, tombstoned, unmatched downs).
type Row = (
    &'static str,
    Vec<Reservation>,
    Vec<JobOp>,
    Vec<Reservation>,
    (u32, u32, u32, u32, u32),
);

/// Operations naming their job: one row per branch of the job rules.
#[test]
fn job_operations_count_each_job_once() {
    let until = NOW + DURATION;
    let rows: Vec<Row> = vec![
        (
            "a new job is reserved with its id and delivery",
            vec![],
            vec![op(Up, 1, 1)],
            vec![job(1, 1, NOW, until, 1)],
            (1, 0, 0, 0, 0),
        ),
        (
            "a reserved job's queued (another replica, a redelivery) adds nothing",
            vec![job(1, 1, 90, 105, 1)],
            vec![op(Up, 1, 1)],
            vec![job(1, 1, 90, 105, 1)],
            (0, 0, 1, 0, 0),
        ),
        (
            "a completed job's queued adds nothing",
            vec![job(1, 1, 90, 105, 0)],
            vec![op(Up, 1, 1)],
            vec![job(1, 1, 90, 105, 0)],
            (0, 0, 1, 0, 0),
        ),
        (
            "one job queued twice in a batch counts once",
            vec![],
            vec![op(Up, 1, 1), op(Up, 1, 1)],
            vec![job(1, 1, NOW, until, 1)],
            (1, 0, 1, 0, 0),
        ),
        (
            "a re-run reusing the id is another job",
            vec![job(1, 1, 90, 105, 0)],
            vec![op(Up, 1, 2)],
            vec![job(1, 1, 90, 105, 0), job(1, 2, NOW, until, 1)],
            (1, 0, 0, 0, 0),
        ),
        (
            "a completion releases its own job, not the oldest, and leaves a tombstone for the duration",
            vec![job(1, 1, 90, 105, 1), job(2, 1, 91, 106, 1)],
            vec![op(Down, 2, 1)],
            vec![job(1, 1, 90, 105, 1), job(2, 1, 91, until, 0)],
            (0, 1, 0, 0, 0),
        ),
        (
            "a completion names its runner on the job's tombstone",
            vec![job(1, 1, 90, 105, 1)],
            vec![ran(1, "pool-x7k2p")],
            vec![tombstone_of(1, 90, until, "pool-x7k2p")],
            (0, 1, 0, 0, 0),
        ),
        (
            "an unrecorded job's completion names its runner on the new tombstone",
            vec![],
            vec![ran(1, "pool-x7k2p")],
            vec![tombstone_of(1, NOW, until, "pool-x7k2p")],
            (0, 0, 0, 1, 1),
        ),
        (
            "a second completion of a job releases nothing",
            vec![job(1, 1, 90, 105, 1), job(2, 1, 91, 115, 0)],
            vec![op(Down, 2, 1)],
            vec![job(1, 1, 90, 105, 1), job(2, 1, 91, 115, 0)],
            (0, 0, 1, 0, 0),
        ),
        (
            "an old attempt's completion does not cancel the re-run",
            vec![job(1, 2, 90, 105, 1)],
            vec![op(Down, 1, 1)],
            vec![job(1, 2, 90, 105, 1), job(1, 1, NOW, until, 0)],
            (0, 0, 0, 1, 1),
        ),
        (
            "an unrecorded job's completion releases an anonymous (ARC) reservation and leaves a tombstone",
            vec![r(90, 105), job(2, 1, 91, 106, 1)],
            vec![op(Down, 1, 1)],
            vec![job(2, 1, 91, 106, 1), job(1, 1, NOW, until, 0)],
            (0, 1, 0, 1, 0),
        ),
        (
            "an unrecorded job's completion with nothing anonymous only leaves a tombstone",
            vec![],
            vec![op(Down, 1, 1)],
            vec![job(1, 1, NOW, until, 0)],
            (0, 0, 0, 1, 1),
        ),
        (
            "a completion overtaking its queued in one batch cancels it",
            vec![],
            vec![op(Down, 1, 1), op(Up, 1, 1)],
            vec![job(1, 1, NOW, until, 0)],
            (1, 1, 0, 0, 0),
        ),
        (
            "an expired tombstone no longer stops a queued",
            vec![job(1, 1, 80, 90, 0)],
            vec![op(Up, 1, 1)],
            vec![job(1, 1, NOW, until, 1)],
            (1, 0, 0, 0, 0),
        ),
    ];
    for (case, existing, ops, expected, counts) in rows {
        let u = apply_scale_operations(&existing, &ops, t(NOW), None, mins(DURATION));
        assert_eq!(u.reservations, expected, "{case}");
        assert_eq!(
            (
                u.added,
                u.removed,
                u.duplicates,
                u.tombstoned,
                u.unmatched_downs
            ),
            counts,
            "{case}"
        );
    }
}

#[test]
fn only_the_newest_tombstones_are_kept() {
    let existing: Vec<Reservation> = (0..MAX_TOMBSTONES as u64)
        .map(|id| job(id, 1, 90, 105, 0))
        .collect();
    let u = apply_scale_operations(
        &existing,
        &[op(Down, 9999, 1)],
        t(NOW),
        None,
        mins(DURATION),
    );
    assert_eq!(u.reservations.len(), MAX_TOMBSTONES);
    assert_eq!(
        u.reservations[0],
        job(1, 1, 90, 105, 0),
        "job 0's went first"
    );
    assert_eq!(u.expired, 1);
}

#[test]
fn tombstones_are_not_extended_while_reservations_wait() {
    let existing = [job(1, 1, 90, 101, 0), job(2, 1, 91, 102, 1)];
    let u = apply(&existing, &[], Some(0));
    assert_eq!(
        u.reservations,
        vec![job(1, 1, 90, 101, 0), job(2, 1, 91, NOW + DURATION, 1)]
    );
}

/// A legacy event's `+1` granting `replicas` for `minutes`, from delivery `delivery`.
fn event(delivery: &str, replicas: u32, minutes: u64) -> JobOp {
    JobOp {
        delivery: Some(delivery.into()),
        event: Some(EventOp {
            trigger: "checkRun",
            replicas,
            duration: mins(minutes),
        }),
        ..JobOp::from(Up)
    }
}

#[test]
fn a_legacy_event_reserves_its_amount_for_its_own_duration_once_per_delivery() {
    let ops = [event("e-1", 3, 2)];
    let update = apply_scale_operations(&[], &ops, t(NOW), Some(10), mins(DURATION));
    assert_eq!(update.added, 1);
    let [slack] = update.reservations.as_slice() else {
        panic!("{:?}", update.reservations);
    };
    assert_eq!(
        (
            slack.replicas,
            slack.expiration_time,
            slack.trigger.as_deref()
        ),
        (3, t(NOW + 2), Some("checkRun"))
    );
    assert_eq!((slack.job, slack.delivery.as_deref()), (None, Some("e-1")));
    assert_eq!(reserved_replicas(&update.reservations, t(NOW)), 3);

    // The same delivery again (another replica, a restart) adds nothing; another adds.
    let again = apply_scale_operations(
        &update.reservations,
        &[event("e-1", 3, 2), event("e-2", 1, 2)],
        t(NOW),
        Some(10),
        mins(DURATION),
    );
    assert_eq!((again.added, again.duplicates), (1, 1));
    assert_eq!(reserved_replicas(&again.reservations, t(NOW)), 4);
    // It expires after its duration, not the autoscaler's.
    assert_eq!(reserved_replicas(&again.reservations, t(NOW + 2)), 0);
}

#[test]
fn completions_never_release_a_legacy_events_slack() {
    let slack = apply_scale_operations(&[], &[event("e-1", 2, 5)], t(NOW), None, mins(DURATION))
        .reservations;
    // A job's completion with no reservation of its own, and an anonymous one.
    let update = apply_scale_operations(
        &slack,
        &[op(Down, 7, 1), JobOp::from(Down)],
        t(NOW),
        None,
        mins(DURATION),
    );
    assert_eq!((update.removed, update.unmatched_downs), (0, 2));
    assert_eq!(reserved_replicas(&update.reservations, t(NOW)), 2);
}

#[test]
fn a_legacy_events_slack_is_not_extended_beyond_max_replicas() {
    let slack = apply_scale_operations(&[], &[event("e-1", 4, 1)], t(NOW), Some(2), mins(DURATION));
    assert_eq!(slack.extended, 0);
    assert_eq!(slack.reservations[0].expiration_time, t(NOW + 1));
}
