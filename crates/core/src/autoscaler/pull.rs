//! Pull recovery: reservations for queued jobs whose webhook delivery was lost.
//!
//! GitHub does not redeliver a failed delivery on its own, so an autoscaler that scales on
//! `workflow_job` webhooks alone would leave a job whose `queued` delivery was lost without a
//! runner. Every pull interval the driver lists the queued jobs of the autoscaler's repository
//! and [`pull_operations`] decides which of them need a reservation. A job gets one when:
//! 1. it is still queued (the driver lists queued jobs only);
//! 2. the webhook rules route it to *this* autoscaler: [`super::webhook::select_target`] over
//!    every candidate, so two autoscalers whose labels both match a job do not both reserve
//!    for it, and the one a webhook would pick is the one that does;
//! 3. the stored list records nothing active for it, neither a reservation nor a completed
//!    job's tombstone (a job can look queued in a listing taken just before it completed); a
//!    job still queued after its reservation expired is reserved again;
//! 4. there is room ([`pull_room`]): the active reservations holding runners stay at most
//!    `cap` (the autoscaler's `maxReplicas`); the oldest jobs by creation time go first, and
//!    the rest are picked up by a later pass once runners free up.
//!
//! What the driver may skip, since the answer cannot change: with no room it lists nothing
//! (an autoscaler whose queued jobs were all delivered holds a reservation for each, so under
//! a backlog it is at its cap), and it stops listing runs, oldest first, once the jobs found
//! fill the room. A job of a later run is older only when it belongs to a re-run; it is
//! reserved by a later pass.
//!
//! Each becomes a `+1` [`JobOp`] naming its job, with delivery id [`PULL_DELIVERY`], so the
//! stored reservation says where it came from. The operations go through
//! [`super::reservations::apply_scale_operations`] like a webhook batch, which checks rule 3
//! again against the list as re-read at write time: a webhook that reserved the job meanwhile
//! makes the pull's `+1` a duplicate, and the reverse.

use std::time::{Duration, SystemTime};

use super::reservations::{JobKey, JobOp, Reservation, ScaleOp};
use super::webhook::{Demand, JobOrigin, TargetCandidate, select_target};

/// The `deliveryID` recorded on reservations the pull made.
pub const PULL_DELIVERY: &str = "pull";

/// Default interval between two pull passes: a lost delivery waits at most this long before a
/// pass notices its job, at 24 run lists an hour per repository (mostly 304s).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// A queued job as GitHub's jobs listing shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedJob {
    /// Job id and run attempt.
    pub job: JobKey,
    /// The `runs-on` labels.
    pub labels: Vec<String>,
    /// When it was queued; `None` sorts first (a job GitHub gave no time is old enough).
    pub created_at: Option<SystemTime>,
}

/// What one pull pass decides for one autoscaler and one repository.
#[derive(Clone, Debug)]
pub struct PullInput<'a, T> {
    /// The autoscaler pulling (its id among `candidates`).
    pub autoscaler: &'a T,
    /// Every autoscaler taking part in `workflow_job` scaling, in the webhook's order.
    pub candidates: &'a [TargetCandidate<T>],
    /// The repository the jobs were listed from.
    pub origin: JobOrigin<'a>,
    /// Its queued jobs.
    pub queued: &'a [QueuedJob],
    /// The autoscaler's stored reservations.
    pub reservations: &'a [Reservation],
    /// Most runners the active reservations may hold after the pass (`maxReplicas`).
    pub cap: u32,
    /// Now.
    pub now: SystemTime,
}

/// How many more jobs a pass may reserve: `cap` less the runners the active reservations
/// hold at `now`. Zero means the pass has nothing to decide, so nothing to list.
pub fn pull_room(reservations: &[Reservation], cap: u32, now: SystemTime) -> usize {
    let held = reservations
        .iter()
        .filter(|r| r.is_active(now))
        .fold(0u32, |sum, r| sum.saturating_add(r.replicas));
    usize::try_from(cap.saturating_sub(held)).unwrap_or(usize::MAX)
}

/// The `+1` operations for the queued jobs that need a reservation (see the module docs).
pub fn pull_operations<T: PartialEq>(input: &PullInput<'_, T>) -> Vec<JobOp> {
    let room = pull_room(input.reservations, input.cap, input.now);
    // Active records only, as `apply_scale_operations` sees them: a job still queued after its
    // reservation expired waits yet, and is reserved again.
    let recorded = |job: JobKey| {
        input
            .reservations
            .iter()
            .any(|r| r.job == Some(job) && r.is_active(input.now))
    };
    let mut wanted: Vec<&QueuedJob> = input
        .queued
        .iter()
        .filter(|q| !recorded(q.job))
        .filter(|q| {
            select_target(
                &input.origin,
                Demand::Job(&q.labels),
                input.candidates,
                |_| true,
            )
            .target
            .is_some_and(|(c, _)| &c.id == input.autoscaler)
        })
        .collect();
    wanted.sort_by_key(|q| (q.created_at, q.job));
    wanted.dedup_by_key(|q| q.job);
    wanted
        .into_iter()
        .take(room)
        .map(|q| JobOp {
            op: ScaleOp::Up,
            job: Some(q.job),
            delivery: Some(PULL_DELIVERY.to_owned()),
            runner: None,
            event: None,
        })
        .collect()
}
