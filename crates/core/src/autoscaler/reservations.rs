//! Capacity reservations: the webhook server's memory of queued jobs, kept in the HRA spec.
//!
//! Each `workflow_job` `queued` delivery that matches an autoscaler appends a reservation of
//! one runner, naming its job, that expires after the trigger's `duration`; the job's
//! `completed` delivery releases it. The autoscaler adds the replicas of unexpired
//! reservations to its metric suggestion.
//!
//! The stored list is also the deduplication that holds across webhook server replicas and
//! restarts (the in-memory one only spares writes): a `queued` for a job that has a
//! reservation adds nothing; a `completed` turns its job's reservation into a *tombstone* (zero
//! replicas, same job) that lives at least `duration` more, so a `queued` redelivered after the
//! job finished adds nothing either; a second `completed` finds the tombstone and releases
//! nothing. At most [`MAX_TOMBSTONES`] tombstones are kept (the newest), which bounds the
//! object's size whatever the job rate. A job is its id and run attempt: a re-run that reuses
//! the id is a new job, and the old attempt's late `completed` does not cancel it (ARC #4315).
//!
//! [`apply_scale_operations`] applies one batch of operations (all the deliveries for one HRA
//! since its last write) and returns the new list:
//! 1. reservations (tombstones included) whose expiry is not after `now` are dropped;
//! 2. every `+1` of a job with no reservation or tombstone appends `{effectiveTime: now,
//!    expirationTime: now + duration, replicas: 1, jobID, runAttempt, deliveryID}`; an
//!    anonymous `+1` appends one without a job; a legacy event's `+1` (`check_run`,
//!    `pull_request`, `push`) appends `{replicas: amount, expirationTime: now + its trigger's
//!    duration, deliveryID, trigger}` unless its delivery is already recorded — slack that no
//!    completion releases and no `-1` touches;
//! 3. every `-1` of a job turns its reservation into a tombstone; without one, it leaves a
//!    tombstone (so the job's late `queued` adds nothing) and releases one replica of the
//!    oldest *anonymous* reservation (written by ARC or before jobs were recorded), if any. An
//!    anonymous `-1` removes one replica from the oldest reservation that has one. A `-1`
//!    with nothing left to release is ignored, so the count never goes negative;
//! 4. reservations holding replicas beyond `maxReplicas` (counting from the oldest) are queued
//!    demand that no runner serves yet, so their expiry is pushed to at least `now + duration`
//!    (ARC #2254/#2258): they must not run out while they wait for a runner to free up. A
//!    legacy event's slack is not a waiting job and keeps its expiry.
//!
//! Differences from ARC, on purpose:
//! - Reservations name their job, and a completion releases its own job's runner. ARC's are
//!   anonymous: a completion removes *a* reservation, so a duplicate delivery, or a
//!   completion whose `queued` was lost, releases another job's runner.
//! - Within a batch, additions are applied before removals, so a `completed` that overtakes
//!   its `queued` still cancels it; ARC applies them in arrival order and the reservation
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

/// Tombstones kept per autoscaler. Each is about 150 bytes of the HRA object; 500 keep a
/// completed job's redelivery harmless for `duration` at up to 500 jobs per `duration`, and
/// the oldest go first beyond that.
pub const MAX_TOMBSTONES: usize = 500;

/// A workflow job: its id and run attempt (a re-run may reuse the id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobKey {
    /// `workflow_job.id`.
    pub id: u64,
    /// `workflow_job.run_attempt` (1 when GitHub omits it).
    pub attempt: u32,
}

/// One operation of a batch: what a delivery asks for, and for which job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobOp {
    /// Reserve or release.
    pub op: ScaleOp,
    /// The job; `None` for an anonymous operation, as ARC's.
    pub job: Option<JobKey>,
    /// The delivery that asked (`X-GitHub-Delivery`), recorded with the reservation.
    pub delivery: Option<String>,
    /// For a `-1`: the runner that ran the job (`workflow_job.runner_name`), recorded on the
    /// job's tombstone so that owner sync knows whose place the completion releases.
    pub runner: Option<String>,
    /// For a `+1` of a legacy event: what its trigger grants (then `job` is `None`).
    pub event: Option<EventOp>,
}

/// The reservation a legacy event (`check_run`, `pull_request`, `push`) asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventOp {
    /// The trigger field that matched (`checkRun`, `pullRequest`, `push`).
    pub trigger: &'static str,
    /// Runners to reserve (the trigger's `amount`).
    pub replicas: u32,
    /// For how long (the trigger's `duration`).
    pub duration: Duration,
}

impl From<ScaleOp> for JobOp {
    fn from(op: ScaleOp) -> Self {
        JobOp {
            op,
            job: None,
            delivery: None,
            runner: None,
            event: None,
        }
    }
}

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
    /// Runners reserved (one for every reservation Hangar or ARC ≥ 0.27 writes; zero for a
    /// completed job's tombstone).
    pub replicas: u32,
    /// The job it is for; `None` for anonymous reservations (ARC's).
    pub job: Option<JobKey>,
    /// The delivery that made it, for the record.
    pub delivery: Option<String>,
    /// On a tombstone: the runner that ran the job, when the `completed` delivery named one.
    pub runner: Option<String>,
    /// For a legacy event's reservation: the trigger field that made it (`checkRun`,
    /// `pullRequest`, `push`). No completion releases it; it expires.
    pub trigger: Option<String>,
}

impl Reservation {
    /// A reservation of one runner made at `now` for `duration`.
    pub fn new(now: SystemTime, duration: Duration) -> Self {
        Reservation {
            name: None,
            effective_time: now,
            expiration_time: later(now, duration),
            replicas: 1,
            job: None,
            delivery: None,
            runner: None,
            trigger: None,
        }
    }

    /// Whether a `-1` without a reservation of its own may release it: an anonymous
    /// reservation holding runners (ARC's, or one written before jobs were recorded), not a
    /// legacy event's slack.
    fn is_anonymous_demand(&self) -> bool {
        self.job.is_none() && self.trigger.is_none() && self.replicas > 0
    }

    /// Whether it is a completed job's tombstone.
    pub fn is_tombstone(&self) -> bool {
        self.job.is_some() && self.replicas == 0
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

/// When the newest demand still counted appeared: the latest `effectiveTime` of the
/// reservations active at `now` that hold runners. A completed job's tombstone is no demand
/// (as in ARC, whose `completed` removes the reservation): one made for a `completed` whose
/// `queued` was never recorded carries the time of the delivery, and would pass for new demand.
pub fn newest_demand(reservations: &[Reservation], now: SystemTime) -> Option<SystemTime> {
    reservations
        .iter()
        .filter(|r| r.is_active(now) && r.replicas > 0)
        .map(|r| r.effective_time)
        .max()
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
    /// Reservations dropped because they had expired, and tombstones beyond
    /// [`MAX_TOMBSTONES`].
    pub expired: usize,
    /// Reservations appended.
    pub added: u32,
    /// Replicas released by `-1` operations.
    pub removed: u32,
    /// `-1` operations that found nothing to release.
    pub unmatched_downs: u32,
    /// Waiting reservations whose expiry was pushed forward.
    pub extended: usize,
    /// Operations for a job the list already records (a `+1` of a reserved or completed job,
    /// a `-1` of a completed one): deliveries another replica or an earlier run handled.
    pub duplicates: u32,
    /// Tombstones written for jobs that completed with no reservation recorded.
    pub tombstoned: u32,
}

impl ReservationUpdate {
    /// Whether the list differs from the input, i.e. whether the HRA needs a write.
    pub fn changed(&self) -> bool {
        self.expired > 0
            || self.added > 0
            || self.removed > 0
            || self.extended > 0
            || self.tombstoned > 0
    }
}

/// Applies one batch of operations to an autoscaler's reservations (see the module docs for
/// the rules). `max_replicas` is the autoscaler's `maxReplicas` (`None`: no reservation waits,
/// nothing is extended); `duration` is the trigger's (see [`DEFAULT_RESERVATION_DURATION`]).
pub fn apply_scale_operations(
    reservations: &[Reservation],
    ops: &[JobOp],
    now: SystemTime,
    max_replicas: Option<u32>,
    duration: Duration,
) -> ReservationUpdate {
    let mut kept: Vec<Reservation> = reservations
        .iter()
        .filter(|r| r.is_active(now))
        .cloned()
        .collect();
    let mut expired = reservations.len() - kept.len();
    let floor = later(now, duration);
    let mut added = 0u32;
    let mut duplicates = 0u32;
    let mut tombstoned = 0u32;

    for op in ops.iter().filter(|o| o.op == ScaleOp::Up) {
        if let Some(event) = &op.event {
            // A redelivery (another replica, a restart) finds its delivery recorded.
            if op
                .delivery
                .as_ref()
                .is_some_and(|d| kept.iter().any(|r| r.delivery.as_ref() == Some(d)))
            {
                duplicates += 1;
                continue;
            }
            kept.push(Reservation {
                replicas: event.replicas,
                delivery: op.delivery.clone(),
                trigger: Some(event.trigger.to_owned()),
                ..Reservation::new(now, event.duration)
            });
            added += 1;
            continue;
        }
        if let Some(job) = op.job
            && kept.iter().any(|r| r.job == Some(job))
        {
            duplicates += 1;
            continue;
        }
        kept.push(Reservation {
            job: op.job,
            delivery: op.delivery.clone(),
            ..Reservation::new(now, duration)
        });
        added += 1;
    }

    let mut removed = 0u32;
    let mut unmatched_downs = 0u32;
    for op in ops.iter().filter(|o| o.op == ScaleOp::Down) {
        let Some(job) = op.job else {
            match kept
                .iter()
                .position(|r| r.replicas > 0 && r.trigger.is_none())
            {
                Some(i) => {
                    release(&mut kept, i, floor);
                    removed += 1;
                }
                None => unmatched_downs += 1,
            }
            continue;
        };
        if let Some(r) = kept.iter_mut().find(|r| r.job == Some(job)) {
            if r.replicas == 0 {
                duplicates += 1;
            } else {
                removed += r.replicas;
                r.replicas = 0;
                r.expiration_time = r.expiration_time.max(floor);
                r.runner = op.runner.clone();
            }
            continue;
        }
        // Its `queued` is unrecorded: lost, not yet written, or recorded by ARC anonymously.
        match kept.iter().position(Reservation::is_anonymous_demand) {
            Some(i) => {
                release(&mut kept, i, floor);
                removed += 1;
            }
            None => unmatched_downs += 1,
        }
        kept.push(Reservation {
            job: Some(job),
            delivery: op.delivery.clone(),
            runner: op.runner.clone(),
            replicas: 0,
            ..Reservation::new(now, duration)
        });
        tombstoned += 1;
    }

    let tombstones = kept.iter().filter(|r| r.is_tombstone()).count();
    if tombstones > MAX_TOMBSTONES {
        let mut excess = tombstones - MAX_TOMBSTONES;
        kept.retain(|r| {
            let drop = excess > 0 && r.is_tombstone();
            excess -= usize::from(drop);
            !drop
        });
        expired += tombstones - MAX_TOMBSTONES;
    }

    let mut extended = 0;
    if let Some(max) = max_replicas {
        let mut before = 0u32; // replicas held by older reservations
        for r in &mut kept {
            let waits = before.saturating_add(r.replicas) > max;
            before = before.saturating_add(r.replicas);
            // A legacy event's slack is not queued demand: it expires as its trigger says.
            if waits && r.replicas > 0 && r.trigger.is_none() && r.expiration_time < floor {
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
        duplicates,
        tombstoned,
    }
}

/// Releases one replica of `kept[i]`: an anonymous reservation is dropped at zero, a job's
/// becomes its tombstone.
fn release(kept: &mut Vec<Reservation>, i: usize, floor: SystemTime) {
    let r = &mut kept[i];
    r.replicas -= 1;
    if r.replicas == 0 {
        if r.job.is_some() {
            r.expiration_time = r.expiration_time.max(floor);
        } else {
            kept.remove(i);
        }
    }
}

/// `t + d`, saturating instead of panicking on the (theoretical) overflow of `SystemTime`.
pub(crate) fn later(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(d)
        .or_else(|| t.checked_add(Duration::from_secs(u64::from(u32::MAX))))
        .unwrap_or(t)
}
