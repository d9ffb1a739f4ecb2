//! The Runner controller's decision: what one reconcile of a Runner does, from what it
//! observed.
//!
//! Contract:
//! - a Runner being deleted is retired through its finalizer ([`RunnerStep::Retire`]), or let
//!   go when it no longer holds it ([`RunnerStep::LetGo`]; its pod goes with it by owner
//!   reference);
//! - a live Runner without its finalizer gets it first, then takes its live step;
//! - a Runner whose unregistration was requested never gets a new pod;
//! - a set-owned Runner whose pod existed and vanished is not resurrected: it is left to its
//!   set for [`FINISHED_RUNNER_DELETION_WAIT`] after its runner finished, then checked (the
//!   store may lag behind our own create, so the API decides whether the pod is gone);
//! - a standalone Runner gets a fresh pod whenever it has none, and its finished pod is
//!   deleted (ARC restarts standalone runners);
//! - a set-owned Runner whose runner finished is only noted: its set deletes it next;
//! - otherwise the status mirrors the pod, the scope's shared registration token is kept fresh
//!   while a pod that does not use JIT registration has not started, and a requested
//!   unregistration is handed on to the pod.

use std::time::{Duration, SystemTime};

use crate::owner_sync::PodPhase;

/// How long after its runner finished a Runner whose pod is gone is left to its set to delete,
/// before the Runner controller checks for a vanished pod itself.
pub const FINISHED_RUNNER_DELETION_WAIT: Duration = Duration::from_secs(10);

/// Slack added to a wait computed from an instant, so the next pass runs just after it.
const SLACK: Duration = Duration::from_millis(100);

/// The Runner's pod, as the decision needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodFacts {
    /// The pod's phase.
    pub phase: PodPhase,
    /// The runner container has exited (for good).
    pub stopped: bool,
    /// The pod has a `deletionTimestamp`.
    pub deleting: bool,
}

/// What one decision about a Runner looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunnerFacts {
    /// The Runner has a `deletionTimestamp`.
    pub deleting: bool,
    /// The Runner holds its finalizer.
    pub holds_finalizer: bool,
    /// The Runner carries an unregistration request.
    pub retiring: bool,
    /// The Runner's status has a phase: it had a pod once.
    pub had_pod: bool,
    /// The Runner has an owner (a RunnerReplicaSet).
    pub owned: bool,
    /// When its runner was seen finished (this process's memory, else the status).
    pub finished_at: Option<SystemTime>,
    /// Its pod, if the store has one.
    pub pod: Option<PodFacts>,
    /// New pods register with a JIT configuration, not the shared token.
    pub uses_jit: bool,
    /// The current time.
    pub now: SystemTime,
}

/// What a Runner does this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunnerStep {
    /// Deleted, and the finalizer is gone: nothing to do until something changes.
    LetGo,
    /// Deleted, holding the finalizer: one step of its retirement.
    Retire,
    /// No pod, unregistration requested: wait (never create a pod).
    WaitRetiring,
    /// Set-owned, its finished pod is gone: leave it to the set a while longer.
    WaitForSet {
        /// When to look again.
        after: Duration,
    },
    /// Set-owned, its pod is gone: ask the API; still there, look again soon, else delete the
    /// Runner so its set replaces it.
    CheckVanished,
    /// Create the pod.
    CreatePod,
    /// Set-owned, its runner finished: note it and leave the status (the set deletes it).
    NoteFinished {
        /// Hand the Runner's unregistration request on to the pod first.
        hand_on_unregistration: bool,
    },
    /// Mirror the pod in the status.
    Mirror {
        /// Delete the pod first: a standalone runner finished and gets a fresh pod.
        delete_finished_pod: bool,
        /// Keep the scope's shared registration token fresh for a pod yet to start.
        refresh_shared_token: bool,
        /// Hand the Runner's unregistration request on to the pod first.
        hand_on_unregistration: bool,
    },
}

/// The plan for one pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunnerPlan {
    /// Add the finalizer before the step (a live Runner without it).
    pub add_finalizer: bool,
    /// The step.
    pub step: RunnerStep,
}

/// Decides one pass of the Runner controller. Pure.
pub fn drive(f: &RunnerFacts) -> RunnerPlan {
    if f.deleting {
        let step = if f.holds_finalizer {
            RunnerStep::Retire
        } else {
            RunnerStep::LetGo
        };
        return RunnerPlan {
            add_finalizer: false,
            step,
        };
    }
    RunnerPlan {
        add_finalizer: !f.holds_finalizer,
        step: live_step(f),
    }
}

/// The step of a live Runner.
fn live_step(f: &RunnerFacts) -> RunnerStep {
    let Some(pod) = f.pod else {
        if f.retiring {
            return RunnerStep::WaitRetiring;
        }
        if !(f.had_pod && f.owned) {
            return RunnerStep::CreatePod;
        }
        if let Some(finished) = f.finished_at {
            let settle = f.now.duration_since(finished).unwrap_or_default();
            if settle < FINISHED_RUNNER_DELETION_WAIT {
                return RunnerStep::WaitForSet {
                    after: FINISHED_RUNNER_DELETION_WAIT - settle + SLACK,
                };
            }
        }
        return RunnerStep::CheckVanished;
    };
    let finished = matches!(pod.phase, PodPhase::Succeeded | PodPhase::Failed) || pod.stopped;
    if finished && f.owned {
        return RunnerStep::NoteFinished {
            hand_on_unregistration: f.retiring,
        };
    }
    RunnerStep::Mirror {
        delete_finished_pod: finished && !pod.deleting,
        refresh_shared_token: pod.phase == PodPhase::Pending && !f.uses_jit,
        hand_on_unregistration: f.retiring,
    }
}

#[cfg(test)]
mod tests;
