//! The runner-pod controller's decision: what one reconcile of a runner pod does, from what it
//! observed. The unregistration state machine itself is [`crate::unregistration`].
//!
//! Contract:
//! - a pod Hangar may not act for (no owner chain granting it scope and credentials) costs no
//!   GitHub call and gets no finalizer; one that carries the finalizer anyway is released when
//!   deleted, so it cannot hang ([`PodStep::ReleaseUntrusted`]), otherwise it is ignored;
//! - a deleting pod holding the finalizer has its runner unregistered before the finalizer
//!   goes, and its parent Runner deleted first unless its runner finished (a user deleted the
//!   pod: the Runner must not recreate it); a deleting pod still present
//!   [`FORCE_DELETE_AFTER`] after its deletion began (unreachable node) is force-deleted;
//! - a live pod gets the finalizer first ([`PodStep::AddFinalizer`]);
//! - a live pod with the finalizer has its runner's ID looked up once it runs (not once its
//!   runner finished: a stopped runner's registration is cleaned up by name), and its
//!   unregistration driven while requested and not complete.

use std::time::{Duration, SystemTime};

use crate::owner_sync::PodPhase;

/// How long a deleting pod may linger before it is force-deleted (ARC: 1 minute).
pub const FORCE_DELETE_AFTER: Duration = Duration::from_secs(60);

/// Slack after [`FORCE_DELETE_AFTER`], so the recheck runs after the deadline.
const FORCE_SLACK: Duration = Duration::from_secs(1);

/// What one decision about a runner pod looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodFacts {
    /// The pod's owner chain grants it scope and credentials.
    pub trusted: bool,
    /// The pod's `deletionTimestamp` (`now` when deleting without one).
    pub deleting_since: Option<SystemTime>,
    /// The pod holds the runner-pod finalizer.
    pub has_finalizer: bool,
    /// The runner finished: the pod Succeeded or Failed, or its runner container exited.
    pub finished: bool,
    /// The pod's phase.
    pub phase: PodPhase,
    /// The pod carries its runner's GitHub ID.
    pub has_runner_id: bool,
    /// The pod carries an unregistration request.
    pub unregistration_requested: bool,
    /// The pod carries an unregistration completion.
    pub unregistration_complete: bool,
    /// The current time.
    pub now: SystemTime,
}

/// When a deleting pod is force-deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForceDelete {
    /// It lingered too long: force-delete it now.
    Now,
    /// Look again after this long.
    RecheckIn(Duration),
}

/// What a runner pod does this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodStep {
    /// Untrusted, deleting, holding the finalizer: remove the finalizer.
    ReleaseUntrusted,
    /// Untrusted otherwise: nothing.
    Ignore,
    /// Deleting.
    Deleting {
        /// Delete the parent Runner first (it must not recreate the pod).
        delete_parent: bool,
        /// Run unregistration; once complete, remove the finalizer.
        unregister: bool,
        /// Then, force-delete or look again.
        force: ForceDelete,
    },
    /// Live without the finalizer: add it.
    AddFinalizer,
    /// Live with the finalizer.
    Live {
        /// Look up the runner's GitHub ID.
        look_up_id: bool,
        /// Drive the unregistration state machine.
        unregister: bool,
    },
}

/// Decides one pass of the runner-pod controller. Pure.
pub fn step(f: &PodFacts) -> PodStep {
    if !f.trusted {
        return if f.deleting_since.is_some() && f.has_finalizer {
            PodStep::ReleaseUntrusted
        } else {
            PodStep::Ignore
        };
    }
    if let Some(since) = f.deleting_since {
        let lingering = f.now.duration_since(since).unwrap_or_default();
        return PodStep::Deleting {
            delete_parent: f.has_finalizer && !f.finished,
            unregister: f.has_finalizer,
            force: if lingering >= FORCE_DELETE_AFTER {
                ForceDelete::Now
            } else {
                ForceDelete::RecheckIn(FORCE_DELETE_AFTER - lingering + FORCE_SLACK)
            },
        };
    }
    if !f.has_finalizer {
        return PodStep::AddFinalizer;
    }
    PodStep::Live {
        look_up_id: !f.has_runner_id && !f.finished && f.phase == PodPhase::Running,
        unregister: f.unregistration_requested && !f.unregistration_complete,
    }
}

#[cfg(test)]
mod tests;
