//! Which finished runners a set's desired count already accounts for.
//!
//! Owner sync holds a just-finished ephemeral runner's place while the replica count may still
//! count its job (`owner_sync::RELEASE_GRACE`). A webhook-driven autoscaler knows better: the
//! job's `completed` delivery turned its reservation into a tombstone that names the runner,
//! and once the autoscaler has computed its desired count from that list, the count no longer
//! counts the job. [`reflected_completions`] says which runners that is true of, so their places
//! are released at once instead of after a timer.
//!
//! A pool at its maximum with jobs still waiting needs no tombstone at all:
//! [`completions_absorbed`] says how many finished runners' completions, not yet heard, would
//! leave the autoscaler's count where it is. Each completion removes at most one replica from
//! the active reservations, and without a metric the count is at least
//! `min(maxReplicas, minReplicas + reserved)`, so while `floor + reserved - c` stays at or above
//! the set's count (`floor`: the lowest minReplicas any scheduled override allows), `c`
//! finished runners' places are wanted whatever their deliveries say, and are released as soon
//! as the runners are seen finished. `c` counts every finished runner whose completion is not
//! yet reflected, so owner sync keeps such a runner (holding no place) until it is. The autoscaler then needs no periodic rewrite of the
//! target's `effectiveTime` to say that jobs wait (it keeps that for metrics).
//!
//! Nor does an autoscaler whose count comes from reservations alone copy the newest demand into
//! the target's `effectiveTime` each time a job is queued: the set reads it from the
//! reservations of the autoscaler it watches ([`demand_since`]), and the autoscaler writes
//! `effectiveTime` only with a change of `replicas` ([`sets_read_demand`]). Copied, each
//! second of demand cost a write of the deployment, one of its RunnerReplicaSet and a status
//! write of each, and reached the set only after those.
//!
//! An autoscaler whose only metric is `TotalNumberOfQueuedAndInProgressWorkflowRuns` counts
//! jobs too ([`CountedJobs`]: how many, and when GitHub was asked). A runner that finished
//! before that observation is not in the count ([`reflected_before`]), and one that finished
//! after it lowers the count by at most one, so `counted - set` of them are absorbed as above.
//! Such a set holds the other finished runners' places ([`counts_jobs`]) until a fresh
//! observation, which the set asks for, accounts for them.
//!
//! A set at or below the lowest `minReplicas` in force absorbs every completion: no count goes
//! below that floor.
//!
//! The answers are empty — and owner sync falls back to the timer — whenever the count in hand
//! may not be the one the autoscaler computed from those tombstones or that observation:
//! - the autoscaler has other metrics, or reservations beside a metric: a listing taken
//!   before the job finished may still count it, or a completion may lower two counts;
//! - its status was computed from an older generation of its spec (older reservations);
//! - its computed count differs from the set's (the write has not reached the set yet, or a
//!   rollout splits the count between two sets).

use std::collections::BTreeSet;
use std::time::SystemTime;

use super::reservations::{Reservation, newest_demand, reserved_replicas};

/// What [`reflected_completions`] reads of the one autoscaler that targets the set.
#[derive(Clone, Copy, Debug)]
pub struct AutoscalerView<'a> {
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `status.observedGeneration`: the generation its status was computed from.
    pub observed_generation: Option<i64>,
    /// `status.desiredReplicas`.
    pub desired: Option<i32>,
    /// It has `spec.metrics` (pull-based demand).
    pub has_metrics: bool,
    /// `spec.capacityReservations`.
    pub reservations: &'a [Reservation],
    /// `spec.maxReplicas`.
    pub max_replicas: Option<i32>,
    /// The lowest minReplicas in force at any time: the spec's and its scheduled overrides'
    /// ([`min_replicas_floor`]). The count is at least that plus the active reservations.
    pub min_replicas_floor: u32,
    /// `status.countedJobs` and `status.metricsObservedTime`, when the autoscaler's only metric
    /// is `TotalNumberOfQueuedAndInProgressWorkflowRuns`.
    pub counted: Option<CountedJobs>,
    /// Until when the count may not go down: the last scale-out plus the scale-down delay
    /// ([`super::desired::scale_down_allowed_from`]); `None` before any scale-out.
    pub scale_down_held_until: Option<SystemTime>,
}

/// What the queued-runs metric counted behind the autoscaler's `desiredReplicas`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountedJobs {
    /// Matching queued and in-progress jobs (up to
    /// [`super::metrics::counting_limit`]).
    pub jobs: u32,
    /// When GitHub was asked (taken before the listing, so no later than it).
    pub observed_at: SystemTime,
}

/// Where the autoscaler's count comes from, as far as finished runners are concerned.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// Reservations (and `minReplicas`): each completion turns one into a tombstone.
    Reservations,
    /// The queued-runs metric alone: an observation of the jobs.
    Jobs(CountedJobs),
    /// Anything else: nothing says which jobs the count holds.
    Unknown,
}

fn source(hra: &AutoscalerView<'_>) -> Source {
    if sets_read_demand(hra.has_metrics) {
        return Source::Reservations;
    }
    match hra.counted {
        Some(counted) if hra.reservations.is_empty() => Source::Jobs(counted),
        _ => Source::Unknown,
    }
}

/// Whether the set an autoscaler scales (when it is the set's only autoscaler) reads the newest
/// demand from the autoscaler's reservations ([`demand_since`]) rather than from its own
/// `effectiveTime`: when the count comes from reservations alone (no `metrics`).
pub fn sets_read_demand(has_metrics: bool) -> bool {
    !has_metrics
}

/// When the newest demand the autoscaler's reservations hold appeared, for a set whose count
/// comes from reservations alone ([`sets_read_demand`]): what the autoscaler would otherwise
/// have copied into the set's `effectiveTime` together with the count.
///
/// The reservations reach the set before the count computed from them, so the demand is told
/// only while it goes with the set's count `set_desired`: the count is the autoscaler's, held
/// whole by this set (not split by a rollout), and it is not about to go down — the scale-down
/// delay holds it, or the active reservations (with the lowest `minReplicas` in force, up to
/// `maxReplicas`) still ask for at least that many runners. A batch whose completions
/// outnumber its new jobs otherwise lowers the count: releasing the finished runners' places
/// for its new jobs would create runners to retire moments later. `None` otherwise, and for any
/// other autoscaler.
pub fn demand_since(
    hra: &AutoscalerView<'_>,
    set_desired: u32,
    now: SystemTime,
) -> Option<SystemTime> {
    if !matches!(source(hra), Source::Reservations) || !counts_alike(hra, set_desired) {
        return None;
    }
    let asked = reserved_replicas(hra.reservations, now).saturating_add(hra.min_replicas_floor);
    let asked = hra
        .max_replicas
        .and_then(|m| u32::try_from(m).ok())
        .map_or(asked, |max| asked.min(max));
    let held = hra.scale_down_held_until.is_some_and(|until| now < until);
    if asked < set_desired && !held {
        return None;
    }
    newest_demand(hra.reservations, now)
}

/// Whether the autoscaler counts the set's jobs by observing GitHub, so a set without an
/// `effectiveTime` holds a finished runner's place like one with it (owner sync's
/// `completions_counted`), until [`reflected_before`] or [`completions_absorbed`] lets it go.
pub fn counts_jobs(hra: &AutoscalerView<'_>) -> bool {
    matches!(source(hra), Source::Jobs(_))
}

/// When the count is the queued-runs metric's and the set's own: the time of its observation.
/// A runner that finished (by its pod's whole-second `finishedAt`) at least a second before it
/// is not counted.
pub fn reflected_before(hra: &AutoscalerView<'_>, set_desired: u32) -> Option<SystemTime> {
    let current = hra.generation.is_some() && hra.observed_generation == hra.generation;
    match source(hra) {
        Source::Jobs(counted) if current && counts_alike(hra, set_desired) => {
            Some(counted.observed_at)
        }
        _ => None,
    }
}

/// The lowest minReplicas that the spec's `min_replicas` (unset or negative counts as
/// [`super::desired::DEFAULT_MIN_REPLICAS`], as in the count) and its scheduled overrides'
/// `overrides` (unset keeps the spec's) can put in force.
pub fn min_replicas_floor(min_replicas: Option<i32>, overrides: &[Option<i32>]) -> u32 {
    let spec = min_replicas
        .and_then(|m| u32::try_from(m).ok())
        .unwrap_or(super::desired::DEFAULT_MIN_REPLICAS);
    overrides
        .iter()
        .flatten()
        .map(|m| u32::try_from(*m).unwrap_or(0))
        .fold(spec, u32::min)
}

/// The runners whose job's completion the set's `set_desired` replicas reflect (see the module
/// docs), by runner name.
pub fn reflected_completions(hra: &AutoscalerView<'_>, set_desired: u32) -> BTreeSet<String> {
    let current = hra.generation.is_some() && hra.observed_generation == hra.generation;
    if !matches!(source(hra), Source::Reservations) || !counts_alike(hra, set_desired) || !current {
        return BTreeSet::new();
    }
    hra.reservations
        .iter()
        .filter(|r| r.is_tombstone())
        .filter_map(|r| r.runner.clone())
        .collect()
}

/// How many finished runners whose completions the autoscaler has not yet accounted for may
/// give up their places at `now` anyway: their completions would leave its count at
/// `set_desired` or above (see the module docs). Zero unless the count is the set's and comes
/// from reservations or counted jobs; `u32::MAX` when the set is at or below the floor.
pub fn completions_absorbed(hra: &AutoscalerView<'_>, set_desired: u32, now: SystemTime) -> u32 {
    let under_max = hra
        .max_replicas
        .and_then(|m| u32::try_from(m).ok())
        .is_some_and(|max| max >= set_desired);
    if !counts_alike(hra, set_desired) || !under_max {
        return 0;
    }
    if hra.min_replicas_floor >= set_desired {
        return u32::MAX;
    }
    match source(hra) {
        Source::Reservations => reserved_replicas(hra.reservations, now)
            .saturating_add(hra.min_replicas_floor)
            .saturating_sub(set_desired),
        Source::Jobs(counted) => counted.jobs.saturating_sub(set_desired),
        Source::Unknown => 0,
    }
}

/// The set's count is the autoscaler's, computed from what says which jobs it holds
/// (reservations, or counted jobs), and the write has reached the set with no rollout splitting
/// the count.
fn counts_alike(hra: &AutoscalerView<'_>, set_desired: u32) -> bool {
    let same_count = hra
        .desired
        .and_then(|d| u32::try_from(d).ok())
        .is_some_and(|d| d == set_desired);
    !matches!(source(hra), Source::Unknown) && same_count
}
