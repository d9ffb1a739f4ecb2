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
//! The owner is *claimed* (it carries the placeholder finalizer) before the placeholder is
//! registered, and released only after it is removed. So a registration whose ID was never
//! recorded (the controller stopped, or the owner changed under the write) is still found: by
//! its name, when the claim is released.
//!
//! Contract: [`step`] decides from the owner's desired and registered runner counts, the
//! placeholder it remembers and whether it holds the claim; it never removes the placeholder
//! while it could be the only runner a queued job can wait for, and never lets a claimed owner
//! go before its placeholder is removed from GitHub.

/// What an owner looks like to the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Registration-only runners are switched on (`--registration-only-runners`).
    pub enabled: bool,
    /// The owner's `spec.replicas`.
    pub replicas: u32,
    /// Its runners that are registered on GitHub and ready.
    pub registered: u32,
    /// The GitHub runner ID of its placeholder, if one is recorded.
    pub placeholder: Option<u64>,
    /// The owner carries the placeholder finalizer: a placeholder may exist on GitHub.
    pub claimed: bool,
    /// The owner is being deleted.
    pub deleting: bool,
}

/// What to do about the placeholder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing.
    Keep,
    /// Add the placeholder finalizer, keeping the recorded ID: from now on the owner cannot be
    /// deleted before its placeholder is.
    Claim,
    /// Register a placeholder runner with the owner's labels (replacing one of the same name)
    /// and record its ID.
    Register,
    /// Delete the placeholder runner with this ID from GitHub, forget it and release the claim.
    Remove(u64),
    /// No ID is recorded, but one may have been registered: delete the runner with the
    /// placeholder's name from GitHub if there is one, and release the claim.
    RemoveByName,
}

/// The next step for an owner's placeholder.
pub fn step(o: Observed) -> Step {
    let wanted = o.enabled && !o.deleting;
    match o.placeholder {
        Some(id) if !wanted => Step::Remove(id),
        // A real runner now carries the labels; jobs queue for it.
        Some(id) if o.replicas > 0 && o.registered > 0 => Step::Remove(id),
        // The finalizer was taken off by hand: deleting the owner must still remove the runner.
        Some(_) if !o.claimed => Step::Claim,
        Some(_) => Step::Keep,
        // Registered while the last runners may still be leaving, so there is no moment without
        // a matching runner.
        None if wanted && o.replicas == 0 => {
            if o.claimed {
                Step::Register
            } else {
                Step::Claim
            }
        }
        None if !o.claimed => Step::Keep,
        // Claimed without a recorded ID: a registration may exist whose record was lost.
        // While the owner still wants it and no real runner is registered, it may be the only
        // runner a queued job waits for.
        None if wanted && o.registered == 0 => Step::Keep,
        None => Step::RemoveByName,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(replicas: u32, registered: u32, placeholder: Option<u64>) -> Observed {
        Observed {
            enabled: true,
            replicas,
            registered,
            placeholder,
            claimed: placeholder.is_some(),
            deleting: false,
        }
    }

    fn claimed(o: Observed) -> Observed {
        Observed { claimed: true, ..o }
    }

    fn deleting(o: Observed) -> Observed {
        Observed {
            deleting: true,
            ..o
        }
    }

    fn disabled(o: Observed) -> Observed {
        Observed {
            enabled: false,
            ..o
        }
    }

    #[test]
    fn an_owner_scaled_to_zero_is_claimed_then_gets_a_placeholder() {
        assert_eq!(step(observed(0, 0, None)), Step::Claim);
        assert_eq!(step(claimed(observed(0, 0, None))), Step::Register);
        // Even while its last runners are still registered: they are about to leave.
        assert_eq!(step(observed(0, 2, None)), Step::Claim);
        assert_eq!(step(claimed(observed(0, 2, None))), Step::Register);
    }

    #[test]
    fn the_placeholder_stays_until_a_real_runner_is_registered() {
        assert_eq!(step(observed(0, 0, Some(7))), Step::Keep);
        assert_eq!(step(observed(3, 0, Some(7))), Step::Keep);
        assert_eq!(step(observed(3, 1, Some(7))), Step::Remove(7));
    }

    #[test]
    fn a_scaled_up_owner_without_placeholder_needs_none() {
        assert_eq!(step(observed(2, 0, None)), Step::Keep);
        assert_eq!(step(observed(2, 2, None)), Step::Keep);
    }

    #[test]
    fn a_deleted_owner_takes_its_placeholder_along() {
        assert_eq!(step(deleting(observed(0, 0, Some(7)))), Step::Remove(7));
        assert_eq!(step(deleting(observed(0, 0, None))), Step::Keep);
    }

    #[test]
    fn a_claim_without_a_recorded_id_is_released_by_name() {
        // Deleted between the registration and its record: the runner is found by name.
        assert_eq!(
            step(deleting(claimed(observed(0, 0, None)))),
            Step::RemoveByName
        );
        // Scaled up and a real runner registered: the unrecorded placeholder is not needed.
        assert_eq!(step(claimed(observed(2, 1, None))), Step::RemoveByName);
        // Scaled up but nothing registered yet: it may be all a queued job can wait for.
        assert_eq!(step(claimed(observed(2, 0, None))), Step::Keep);
    }

    #[test]
    fn a_placeholder_whose_finalizer_was_removed_is_claimed_again() {
        let unclaimed = Observed {
            claimed: false,
            ..observed(0, 0, Some(7))
        };
        assert_eq!(step(unclaimed), Step::Claim);
        // Being deleted, it is removed at once instead: the owner may not wait for a claim.
        assert_eq!(step(deleting(unclaimed)), Step::Remove(7));
    }

    #[test]
    fn switched_off_every_placeholder_goes_and_none_is_made() {
        assert_eq!(step(disabled(observed(0, 0, Some(7)))), Step::Remove(7));
        assert_eq!(
            step(disabled(claimed(observed(0, 0, None)))),
            Step::RemoveByName
        );
        assert_eq!(step(disabled(observed(0, 0, None))), Step::Keep);
        assert_eq!(step(disabled(observed(3, 0, None))), Step::Keep);
    }
}
