//! A RunnerDeployment's surge rollout: which older RunnerReplicaSets to scale to zero or
//! delete, when to look again, and the counts its status reports.
//!
//! Contract: the newest set (the deployment's current template) is never scaled down or
//! deleted here. Older sets are scaled to 0 only once the newest set has as many ready runners
//! as the deployment wants, so a rollout never leaves the deployment short of runners; an older
//! set at 0 is deleted once it reports no runners (its runners left through
//! unregister-before-delete) and is not being deleted already. While any older set still
//! drains, the deployment looks again after [`ROLLOUT_REQUEUE`]; otherwise after its sync
//! period. Counts sum over every set the deployment owns; `updated` is the newest set's.

use std::time::Duration;

/// How soon a deployment looks again while a rollout is under way.
pub const ROLLOUT_REQUEUE: Duration = Duration::from_secs(5);

/// One RunnerReplicaSet of the deployment, as the rollout sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetView {
    /// The set's name.
    pub name: String,
    /// `spec.replicas`.
    pub spec_replicas: Option<i32>,
    /// `status.replicas`: its runners, ready or not.
    pub status_replicas: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// Has a `deletionTimestamp`.
    pub deleting: bool,
}

/// What one rollout decision looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutInput {
    /// The newest set's name (the current template's).
    pub newest: String,
    /// The deployment's wanted runners.
    pub replicas: i32,
    /// The newest set's ready runners, as its latest apply returned it.
    pub newest_ready: i32,
    /// The newest set's runners, as its latest apply returned it.
    pub newest_replicas: i32,
    /// Every set the deployment owns (the newest may be among them).
    pub sets: Vec<SetView>,
    /// The controller's sync period: the requeue when nothing is rolling out.
    pub sync_period: Duration,
}

/// The deployment's status counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `desiredReplicas`: the deployment's wanted runners.
    pub desired: i32,
    /// `replicas`: runners of all sets.
    pub replicas: i32,
    /// `readyReplicas`: ready runners of all sets.
    pub ready: i32,
    /// `availableReplicas`: available runners of all sets.
    pub available: i32,
    /// `updatedReplicas`: the newest set's runners.
    pub updated: i32,
    /// Older sets still present.
    pub old_sets: usize,
}

/// What the deployment does this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutPlan {
    /// Older sets to scale to 0 (in the order given).
    pub scale_to_zero: Vec<String>,
    /// Older sets to delete (in the order given).
    pub delete: Vec<String>,
    /// When to look again.
    pub requeue: Duration,
    /// What the status reports.
    pub counts: Counts,
}

/// Decides one pass of a rollout. Pure.
pub fn plan(i: &RolloutInput) -> RolloutPlan {
    let rolled_out = i.newest_ready >= i.replicas;
    let mut scale_to_zero = Vec::new();
    let mut delete = Vec::new();
    let mut requeue = i.sync_period;
    let old = i.sets.iter().filter(|s| s.name != i.newest);
    for set in old.clone() {
        if set.spec_replicas != Some(0) {
            if rolled_out {
                scale_to_zero.push(set.name.clone());
            }
            requeue = ROLLOUT_REQUEUE;
        } else if set.status_replicas == 0 && !set.deleting {
            delete.push(set.name.clone());
        } else {
            requeue = ROLLOUT_REQUEUE;
        }
    }
    let sum = |f: fn(&SetView) -> i32| i.sets.iter().map(f).sum();
    RolloutPlan {
        scale_to_zero,
        delete,
        requeue,
        counts: Counts {
            desired: i.replicas,
            replicas: sum(|s| s.status_replicas),
            ready: sum(|s| s.ready),
            available: sum(|s| s.available),
            updated: i.newest_replicas,
            old_sets: old.count(),
        },
    }
}

#[cfg(test)]
mod tests;
