//! Capacity reservations: the webhook server's memory of queued jobs, kept in the HRA spec.
//!
//! Each `workflow_job` `queued` delivery that matches an autoscaler appends a reservation of
//! one runner that expires after the trigger's `duration`; each matching `completed` delivery
//! removes the oldest one. The autoscaler adds the replicas of unexpired reservations to its
//! metric suggestion. Reservations are anonymous: a completion removes *a* reservation, not the
//! one its job created, since GitHub gives no way to tell which runner a queued job will get.
//!
//! [`apply_scale_operations`] applies one batch of operations (all the deliveries for one HRA
//! since its last write) and returns the new list:
//! 1. reservations whose expiry is not after `now` are dropped;
//! 2. every `+1` appends `{effectiveTime: now, expirationTime: now + duration, replicas: 1}`;
//! 3. every `-1` removes one replica from the oldest reservation that has one (dropping it at
//!    zero); a `-1` with nothing left to remove is ignored, so the count never goes negative;
//! 4. reservations holding replicas beyond `maxReplicas` (counting from the oldest) are queued
//!    demand that no runner serves yet, so their expiry is pushed to at least `now + duration`
//!    (ARC #2254/#2258): they must not run out while they wait for a runner to free up.
//!
//! Differences from ARC, on purpose:
//! - Within a batch, additions are applied before removals. The resulting count is then
//!   `max(0, unexpired + ups - downs)` whatever order the deliveries arrived in; ARC applies them
//!   in arrival order, so a `completed` that overtakes its `queued` is lost and the reservation
//!   lingers until it expires (the "slop" ARC's code documents).
//! - ARC adds `duration` to the expiry of waiting reservations at every write, so a busy
//!   autoscaler pushes them ever further; here the expiry becomes `max(expiry, now + duration)`,
//!   so queued demand is kept alive for `duration` after the last write and no longer.
//!   Calling this with no operations refreshes that, which a driver may do periodically.
//! - ARC's `-1` only removes a reservation of exactly one replica; here it decrements any, so
//!   reservations of several replicas (written by ARC before v0.27) are consumed too.

use std::time::{Duration, SystemTime};

/// Default lifetime of a reservation when the trigger's `duration` is unset or zero (ARC's).
pub const DEFAULT_RESERVATION_DURATION: Duration = Duration::from_secs(10 * 60);

/// One entry of `spec.capacityReservations`.
///
/// A stored reservation without `expirationTime` never counted in ARC (Go's zero time is long
/// past): map it to `SystemTime::UNIX_EPOCH`, and a missing `effectiveTime` likewise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// `name`, kept as found (the webhook server leaves it unset).
    pub name: Option<String>,
    /// When the demand appeared.
    pub effective_time: SystemTime,
    /// When the reservation stops counting.
    pub expiration_time: SystemTime,
    /// Runners reserved (one for every reservation Hangar or ARC ≥ 0.27 writes).
    pub replicas: u32,
}

impl Reservation {
    /// A reservation of one runner made at `now` for `duration`.
    pub fn new(now: SystemTime, duration: Duration) -> Self {
        Reservation {
            name: None,
            effective_time: now,
            expiration_time: later(now, duration),
            replicas: 1,
        }
    }

    /// Whether it still counts: its expiry is after `now`.
    pub fn is_active(&self, now: SystemTime) -> bool {
        self.expiration_time > now
    }
}

/// Replicas of the reservations still active at `now`.
pub fn reserved_replicas(reservations: &[Reservation], now: SystemTime) -> u32 {
    reservations
        .iter()
        .filter(|r| r.is_active(now))
        .fold(0u32, |sum, r| sum.saturating_add(r.replicas))
}

/// A change one webhook delivery asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleOp {
    /// A job was queued: reserve one runner.
    Up,
    /// A job finished: release one reservation.
    Down,
}

/// The new reservation list and what changed, for logs and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationUpdate {
    /// The list to write back, oldest first.
    pub reservations: Vec<Reservation>,
    /// Reservations dropped because they had expired.
    pub expired: usize,
    /// Reservations appended.
    pub added: u32,
    /// Replicas released by `-1` operations.
    pub removed: u32,
    /// `-1` operations that found nothing to release.
    pub unmatched_downs: u32,
    /// Waiting reservations whose expiry was pushed forward.
    pub extended: usize,
}

impl ReservationUpdate {
    /// Whether the list differs from the input, i.e. whether the HRA needs a write.
    pub fn changed(&self) -> bool {
        self.expired > 0 || self.added > 0 || self.removed > 0 || self.extended > 0
    }
}

/// Applies one batch of operations to an autoscaler's reservations (see the module docs for
/// the rules). `max_replicas` is the autoscaler's `maxReplicas` (`None`: no reservation waits,
/// nothing is extended); `duration` is the trigger's (see [`DEFAULT_RESERVATION_DURATION`]).
pub fn apply_scale_operations(
    reservations: &[Reservation],
    ops: &[ScaleOp],
    now: SystemTime,
    max_replicas: Option<u32>,
    duration: Duration,
) -> ReservationUpdate {
    let mut kept: Vec<Reservation> = reservations
        .iter()
        .filter(|r| r.is_active(now))
        .cloned()
        .collect();
    let expired = reservations.len() - kept.len();

    let ups = ops.iter().filter(|op| **op == ScaleOp::Up).count();
    let downs = ops.len() - ups;
    let added = u32::try_from(ups).unwrap_or(u32::MAX);
    kept.extend((0..ups).map(|_| Reservation::new(now, duration)));

    let mut removed = 0u32;
    let mut unmatched_downs = 0u32;
    for _ in 0..downs {
        match kept.iter().position(|r| r.replicas > 0) {
            Some(i) => {
                kept[i].replicas -= 1;
                if kept[i].replicas == 0 {
                    kept.remove(i);
                }
                removed += 1;
            }
            None => unmatched_downs += 1,
        }
    }

    let mut extended = 0;
    if let Some(max) = max_replicas {
        let floor = later(now, duration);
        let mut before = 0u32; // replicas held by older reservations
        for r in &mut kept {
            let waits = before.saturating_add(r.replicas) > max;
            before = before.saturating_add(r.replicas);
            if waits && r.replicas > 0 && r.expiration_time < floor {
                r.expiration_time = floor;
                extended += 1;
            }
        }
    }

    ReservationUpdate {
        reservations: kept,
        expired,
        added,
        removed,
        unmatched_downs,
        extended,
    }
}

/// `t + d`, saturating instead of panicking on the (theoretical) overflow of `SystemTime`.
pub(crate) fn later(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(d)
        .or_else(|| t.checked_add(Duration::from_secs(u64::from(u32::MAX))))
        .unwrap_or(t)
}
