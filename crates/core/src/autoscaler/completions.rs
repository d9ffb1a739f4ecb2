//! Which finished runners a set's desired count already accounts for.
//!
//! Owner sync holds a just-finished ephemeral runner's place while the replica count may still
//! count its job (`owner_sync::RELEASE_GRACE`). A webhook-driven autoscaler knows better: the
//! job's `completed` delivery turned its reservation into a tombstone that names the runner,
//! and once the autoscaler has computed its desired count from that list, the count no longer
//! counts the job. [`reflected_completions`] says which runners that is true of, so their places
//! are released at once instead of after a timer.
//!
//! The answer is empty — and owner sync falls back to the timer — whenever the count in hand
//! may not be the one the autoscaler computed from those tombstones:
//! - the autoscaler has metrics: a listing taken before the job finished may still count it;
//! - its status was computed from an older generation of its spec (older reservations);
//! - its computed count differs from the set's (the write has not reached the set yet, or a
//!   rollout splits the count between two sets).

use std::collections::BTreeSet;

use super::reservations::Reservation;

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
}

/// The runners whose job's completion the set's `set_desired` replicas reflect (see the module
/// docs), by runner name.
pub fn reflected_completions(hra: &AutoscalerView<'_>, set_desired: u32) -> BTreeSet<String> {
    let current = hra.generation.is_some() && hra.observed_generation == hra.generation;
    let same_count = hra
        .desired
        .and_then(|d| u32::try_from(d).ok())
        .is_some_and(|d| d == set_desired);
    if hra.has_metrics || !current || !same_count {
        return BTreeSet::new();
    }
    hra.reservations
        .iter()
        .filter(|r| r.is_tombstone())
        .filter_map(|r| r.runner.clone())
        .collect()
}
