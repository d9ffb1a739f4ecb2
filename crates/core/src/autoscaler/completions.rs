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
//! Both answers are empty — and owner sync falls back to the timer — whenever the count in hand
//! may not be the one the autoscaler computed from those tombstones:
//! - the autoscaler has metrics: a listing taken before the job finished may still count it;
//! - its status was computed from an older generation of its spec (older reservations);
//! - its computed count differs from the set's (the write has not reached the set yet, or a
//!   rollout splits the count between two sets).

use std::collections::BTreeSet;
use std::time::SystemTime;

use super::reservations::{Reservation, reserved_replicas};

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
    if !counts_alike(hra, set_desired) || !current {
        return BTreeSet::new();
    }
    hra.reservations
        .iter()
        .filter(|r| r.is_tombstone())
        .filter_map(|r| r.runner.clone())
        .collect()
}

/// How many finished runners whose completions the autoscaler has not yet heard of may give up
/// their places at `now` anyway: their completions would leave its count at `set_desired` or
/// above (see the module docs). Zero unless the count is webhook-driven and is the set's.
pub fn completions_absorbed(hra: &AutoscalerView<'_>, set_desired: u32, now: SystemTime) -> u32 {
    let under_max = hra
        .max_replicas
        .and_then(|m| u32::try_from(m).ok())
        .is_some_and(|max| max >= set_desired);
    if !counts_alike(hra, set_desired) || !under_max {
        return 0;
    }
    reserved_replicas(hra.reservations, now)
        .saturating_add(hra.min_replicas_floor)
        .saturating_sub(set_desired)
}

/// The set's count is the autoscaler's, computed from reservations alone: no pull metric may
/// still count a finished job, the write has reached the set, and no rollout splits the count.
fn counts_alike(hra: &AutoscalerView<'_>, set_desired: u32) -> bool {
    let same_count = hra
        .desired
        .and_then(|d| u32::try_from(d).ok())
        .is_some_and(|d| d == set_desired);
    !hra.has_metrics && same_count
}
