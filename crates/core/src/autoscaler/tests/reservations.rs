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
    }
}

fn apply(existing: &[Reservation], ops: &[ScaleOp], max: Option<u32>) -> ReservationUpdate {
    apply_scale_operations(existing, ops, t(NOW), max, mins(DURATION))
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
