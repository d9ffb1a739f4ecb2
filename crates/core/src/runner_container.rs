//! Where a runner pod's runner is in its life, judged from the runner container's *current*
//! state — and, for a pod whose kubelet restarts it, whether it can come back.
//!
//! A pod that restarts its containers (`restartPolicy: Always`: a RunnerSet's StatefulSet pod
//! when no pod webhook rewrote it to `Never`) does not end when its runner exits: the kubelet
//! starts the runner container again, at once the first time. Its entrypoint runs `config.sh
//! --replace` with the same registration credential, so the new run registers again under the
//! pod's name and takes the next queued job. A "finished" judgement made from the exit (or from
//! `restartCount > 0`, which stays true while the new run works) is stale by then, and deleting
//! the pod on it kills that job (chaos seed 2).
//!
//! Two rules close this:
//! - **The credential is taken back once a run has started** ([`should_spend`]): the controller
//!   empties the pod's registration Secret (the running process already read it), so the next
//!   run the kubelet tries cannot even be created (`CreateContainerConfigError`: the
//!   `secretKeyRef` is not optional).
//! - **Finished means no run can register again** ([`judge`]): a runner container that exited
//!   in a pod that restarts it is [`Run::Restarting`] until the kubelet shows that the next run
//!   cannot be created with the credential gone; one that runs again after an exit is
//!   [`Run::Restarted`]: it may have registered again and hold a job, so it is retired through
//!   unregister-before-delete like any live runner, never deleted as finished.
//!
//! A pod that says `Never` ends with its runner: an exit is final, as before.

use std::time::SystemTime;

/// The runner container's current state, as the pod status reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Not created yet: no status, or `waiting` without an earlier run.
    NotCreated {
        /// Waiting with `CreateContainerConfigError`: a `valueFrom` it needs is missing.
        cannot_create: bool,
    },
    /// `running`.
    Running,
    /// Not running after a run: `terminated`, or `waiting` to be started again with
    /// `lastState.terminated` (back-off, or the next run cannot be created).
    Exited {
        /// When the last run ended, if the status says.
        finished_at: Option<SystemTime>,
        /// Waiting with `CreateContainerConfigError`: the kubelet tried to start the next run
        /// and could not create it.
        cannot_create: bool,
    },
}

/// What the judgement looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The kubelet starts an exited runner container again (`restartPolicy` other than
    /// `Never`).
    pub restarts: bool,
    /// The pod's registration credential was taken back ([`should_spend`] and done): no run
    /// created since can register.
    pub credential_spent: bool,
    /// The runner container's `restartCount`.
    pub restart_count: i32,
    /// Its current state.
    pub state: State,
}

/// Where the runner is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// Its container has not run yet.
    NotStarted,
    /// The pod's first run of the runner is running.
    Running,
    /// The runner container runs again after it exited. This run may have registered again
    /// (with a credential it read before it was taken back) and hold a job of its own: retire it
    /// through unregister-before-delete; it is neither finished nor a fresh runner.
    Restarted,
    /// Its run exited, and the kubelet is to start the container again while nothing shows the
    /// next run cannot register: not finished yet.
    Restarting {
        /// When the run ended.
        finished_at: Option<SystemTime>,
    },
    /// Finished for good: no run of this pod can register again.
    Finished {
        /// When the last run ended, if known.
        finished_at: Option<SystemTime>,
    },
}

impl Run {
    /// Finished for good.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Finished { .. })
    }

    /// When the runner's last run ended, while it is not running.
    pub fn finished_at(self) -> Option<SystemTime> {
        match self {
            Self::Restarting { finished_at } | Self::Finished { finished_at } => finished_at,
            _ => None,
        }
    }
}

/// Judges the runner from its container's current state. Pure.
pub fn judge(o: &Observed) -> Run {
    match o.state {
        State::Running if o.restarts && o.restart_count > 0 => Run::Restarted,
        State::Running => Run::Running,
        // Nothing restarts it: the exit is the end.
        State::Exited { finished_at, .. } if !o.restarts => Run::Finished { finished_at },
        // The kubelet tried the next run and could not create it: the credential it reads is
        // gone, and Hangar never writes it again.
        State::Exited {
            finished_at,
            cannot_create: true,
        } if o.credential_spent => Run::Finished { finished_at },
        State::Exited { finished_at, .. } => Run::Restarting { finished_at },
        // A pod recreated under the same name after its credential was taken back (a direct
        // `kubectl delete pod`) can never start its runner.
        State::NotCreated {
            cannot_create: true,
        } if o.restarts && o.credential_spent => Run::Finished { finished_at: None },
        State::NotCreated { .. } => Run::NotStarted,
    }
}

/// Whether to take the pod's registration credential back now: its kubelet would restart the
/// runner container with it, it is still there, and a run has started (the kubelet resolved the
/// environment when it created the container, so the process has it). Pure.
pub fn should_spend(o: &Observed) -> bool {
    let started = o.restart_count > 0 || matches!(o.state, State::Running | State::Exited { .. });
    o.restarts && !o.credential_spent && started
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    fn exited(cannot_create: bool) -> State {
        State::Exited {
            finished_at: Some(at(5)),
            cannot_create,
        }
    }

    fn observed(restarts: bool, spent: bool, restart_count: i32, state: State) -> Observed {
        Observed {
            restarts,
            credential_spent: spent,
            restart_count,
            state,
        }
    }

    #[test]
    fn the_judgement_is_about_the_current_run() {
        let not_created = State::NotCreated {
            cannot_create: false,
        };
        let cannot_start = State::NotCreated {
            cannot_create: true,
        };
        let finished = Run::Finished {
            finished_at: Some(at(5)),
        };
        let restarting = Run::Restarting {
            finished_at: Some(at(5)),
        };
        // (restarts, credential spent, restartCount, state) -> run
        let cases = [
            // `restartPolicy: Never` (webhook mode, Runner pods): an exit is the end.
            (false, false, 0, not_created, Run::NotStarted),
            (false, false, 0, State::Running, Run::Running),
            (false, false, 0, exited(false), finished),
            (false, true, 0, exited(false), finished),
            // Restarting pods, first run.
            (true, false, 0, not_created, Run::NotStarted),
            (true, false, 0, State::Running, Run::Running),
            (true, true, 0, State::Running, Run::Running),
            // Completed vs restarted: the run exited, the kubelet starts it again at once.
            // With the credential still there the next run registers: not finished.
            (true, false, 0, exited(false), restarting),
            // Credential gone, but the next run not tried yet (or its failure not reported).
            (true, true, 0, exited(false), restarting),
            // The kubelet tried and could not create it: finished for good.
            (true, true, 0, exited(true), finished),
            (true, true, 3, exited(true), finished),
            // Missing for another reason (not taken back by Hangar): it may come back.
            (true, false, 0, exited(true), restarting),
            // Running again after an exit: maybe registered again and busy, never finished.
            (true, false, 1, State::Running, Run::Restarted),
            (true, true, 1, State::Running, Run::Restarted),
            (true, true, 7, State::Running, Run::Restarted),
            // A restarted run that exited too: still only finished once it cannot come back.
            (true, false, 1, exited(false), restarting),
            (true, true, 1, exited(true), finished),
            // A pod recreated after its credential was taken back never starts its runner.
            (
                true,
                true,
                0,
                cannot_start,
                Run::Finished { finished_at: None },
            ),
            // ... but a missing Secret Hangar did not take back is a pending runner.
            (true, false, 0, cannot_start, Run::NotStarted),
            (false, true, 0, cannot_start, Run::NotStarted),
        ];
        for (restarts, spent, count, state, want) in cases {
            assert_eq!(
                judge(&observed(restarts, spent, count, state)),
                want,
                "restarts={restarts} spent={spent} restartCount={count} {state:?}"
            );
        }
    }

    #[test]
    fn the_credential_is_taken_back_once_a_run_started_in_a_pod_that_restarts() {
        let not_created = State::NotCreated {
            cannot_create: false,
        };
        // (restarts, spent, restartCount, state) -> spend now
        let cases = [
            // Never restarted: nothing to take back.
            (false, false, 0, State::Running, false),
            (false, false, 0, exited(false), false),
            // The first run has the credential: take it back before it can exit.
            (true, false, 0, State::Running, true),
            // Late (the run ended or ran again before Hangar looked): at once.
            (true, false, 0, exited(false), true),
            (true, false, 1, State::Running, true),
            (true, false, 2, not_created, true),
            // Not started: the kubelet has yet to read it.
            (true, false, 0, not_created, false),
            // Done already.
            (true, true, 0, State::Running, false),
            (true, true, 1, exited(true), false),
        ];
        for (restarts, spent, count, state, want) in cases {
            assert_eq!(
                should_spend(&observed(restarts, spent, count, state)),
                want,
                "restarts={restarts} spent={spent} restartCount={count} {state:?}"
            );
        }
    }

    #[test]
    fn finished_at_is_known_only_while_not_running() {
        assert_eq!(Run::Running.finished_at(), None);
        assert_eq!(Run::Restarted.finished_at(), None);
        assert_eq!(
            Run::Restarting {
                finished_at: Some(at(1))
            }
            .finished_at(),
            Some(at(1))
        );
        assert!(Run::Finished { finished_at: None }.is_finished());
        assert!(!Run::Restarting { finished_at: None }.is_finished());
    }
}
