//! The opt-in registration-only ("placeholder") runner of an owner scaled to zero (a
//! RunnerDeployment, a RunnerSet, or a RunnerReplicaSet no deployment owns).
//!
//! GitHub used to fail a job at once when no runner of any status — online or offline — had
//! its labels (github.com until late 2021; older GitHub Enterprise Server releases still do).
//! A pool scaled to zero then loses every job that arrives before it scales up. ARC's answer
//! (seed 004) was a runner that registers and never runs: it stays `offline`, so jobs queue.
//! Hangar registers that runner with a JIT configuration it never hands to a pod, so the
//! placeholder costs one GitHub call and no pod at all, and removes it once a real runner of
//! the deployment is registered (so a matching runner always exists).
//!
//! Contract: [`step`] decides from the deployment's desired and registered runner counts and
//! the placeholder it remembers; it never removes the placeholder while it could be the only
//! runner a queued job can wait for.

/// What a deployment looks like to the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The deployment's `spec.replicas`.
    pub replicas: u32,
    /// Its runners that are registered on GitHub and ready.
    pub registered: u32,
    /// The GitHub runner ID of its placeholder, if it has one.
    pub placeholder: Option<u64>,
    /// The deployment is being deleted.
    pub deleting: bool,
}

/// What to do about the placeholder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing.
    Keep,
    /// Register a placeholder runner with the deployment's labels and remember its ID.
    Register,
    /// Delete the placeholder runner with this ID from GitHub and forget it.
    Remove(u64),
}

/// The next step for a deployment's placeholder.
pub fn step(observed: Observed) -> Step {
    match observed.placeholder {
        Some(id) if observed.deleting => Step::Remove(id),
        // A real runner now carries the labels; jobs queue for it.
        Some(id) if observed.replicas > 0 && observed.registered > 0 => Step::Remove(id),
        Some(_) => Step::Keep,
        // Registered while the last runners may still be leaving, so there is no moment without
        // a matching runner.
        None if observed.replicas == 0 && !observed.deleting => Step::Register,
        None => Step::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(replicas: u32, registered: u32, placeholder: Option<u64>) -> Observed {
        Observed {
            replicas,
            registered,
            placeholder,
            deleting: false,
        }
    }

    #[test]
    fn a_deployment_scaled_to_zero_gets_a_placeholder() {
        assert_eq!(step(observed(0, 0, None)), Step::Register);
        // Even while its last runners are still registered: they are about to leave.
        assert_eq!(step(observed(0, 2, None)), Step::Register);
    }

    #[test]
    fn the_placeholder_stays_until_a_real_runner_is_registered() {
        assert_eq!(step(observed(0, 0, Some(7))), Step::Keep);
        assert_eq!(step(observed(3, 0, Some(7))), Step::Keep);
        assert_eq!(step(observed(3, 1, Some(7))), Step::Remove(7));
    }

    #[test]
    fn a_scaled_up_deployment_without_placeholder_needs_none() {
        assert_eq!(step(observed(2, 0, None)), Step::Keep);
        assert_eq!(step(observed(2, 2, None)), Step::Keep);
    }

    #[test]
    fn a_deleted_deployment_takes_its_placeholder_along() {
        let deleting = |placeholder| Observed {
            deleting: true,
            ..observed(0, 0, placeholder)
        };
        assert_eq!(step(deleting(Some(7))), Step::Remove(7));
        assert_eq!(step(deleting(None)), Step::Keep);
    }
}
