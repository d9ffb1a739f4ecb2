//! Unregister-before-delete: the state machine that keeps scale-down from killing a busy runner.
//!
//! When an owner is retired, each of its runner pods is annotated
//! `unregistration-request-timestamp`. The runner-pod controller then asks [`next_step`] what to
//! do with the pod; the answer is to finish (the runner is gone from GitHub or never was there),
//! to wait (the runner may still be registering), to withdraw a pod on no node (delete it at the
//! version judged, so no scheduler can place it afterwards), or to call GitHub's delete-runner endpoint. The
//! endpoint's answer goes through [`after_delete`]. GitHub refuses to delete a runner that is
//! running a job (422), which is exactly the guarantee we need: a runner is unregistered only
//! when idle, and once unregistered it cannot be given a job, so deleting its pod is safe.
//!
//! Only a 204 is taken as proof. A 404 may mean the runner is gone, or that the ID we asked
//! for was stale (a lookup that raced a re-registration): it is confirmed by looking the runner
//! up by name in a list taken after the call ([`after_not_found`]). A 403 means the credential
//! cannot manage runners here, which says nothing about the runner: the pod stays, the owner is
//! told which permission is missing ([`crate::RunnerScope::permission_hint`]), and the call is retried
//! with the slow back-off of failures a person must fix.
//!
//! Only after `unregistration-complete-timestamp` is on every pod (or the pod is deleting) does
//! the owner get deleted, so none of this is bounded by `terminationGracePeriodSeconds`. A
//! deleting pod keeps its finalizer while a retiring StatefulSet would replace it ([`release`]).

use std::time::{Duration, SystemTime};

use crate::owner_sync::PodPhase;

/// How often a waiting unregistration is re-checked (ARC's `DefaultUnregistrationRetryDelay`).
pub const RETRY_DELAY: Duration = Duration::from_secs(60);
/// Back-off when GitHub rate-limited the delete call and gave no reset time.
pub const RATE_LIMIT_RETRY_DELAY: Duration = Duration::from_secs(30);

/// What the decision needs to know about the pod being unregistered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodState {
    /// The GitHub runner ID, from the `actions-runner/id` annotation or a (cached) list lookup.
    pub runner_id: Option<u64>,
    /// Pod phase.
    pub phase: PodPhase,
    /// The runner has stopped for good: its `runner` container exited and no run of the pod can
    /// register again ([`crate::runner_container::Run::Finished`]). A container that exited in
    /// a pod that restarts it, or that runs again, is not stopped: its next run may register.
    pub runner_stopped: bool,
    /// The runner container's last run exited with code 0: an ephemeral runner that finished
    /// its job has removed its own registration. A run that ended any other way (killed when
    /// its pod was deleted, crashed, OOM-killed) may have left its registration behind.
    pub runner_exited_cleanly: bool,
    /// The runner is ephemeral: only an ephemeral runner removes its own registration when it
    /// exits cleanly; a persistent one stays registered (offline) until it is removed.
    pub ephemeral: bool,
    /// When the pod last became Ready, if it is Ready.
    pub ready_since: Option<SystemTime>,
    /// When the pod started (status.startTime).
    pub started: Option<SystemTime>,
    /// The pod is bound to a node (`spec.nodeName`): its kubelet may have started the runner.
    pub scheduled: bool,
    /// When the pod was created: the registration window's start for a scheduled pod its
    /// kubelet has not reported starting (on a lost node it never will).
    pub created: Option<SystemTime>,
    /// The pod is being deleted (`deletionTimestamp`): no scheduler binds it any more.
    pub deleting: bool,
    /// `unregistration-complete-timestamp` is already set.
    pub unregistration_complete: bool,
    /// `runner-completion-wait-start-timestamp` is set: an ephemeral runner was found busy and we
    /// are waiting for it to finish its job.
    pub completion_wait_started: bool,
    /// How long a started runner may take to register
    /// ([`crate::owner_sync::REGISTRATION_TIMEOUT`] by default):
    /// an unregistered pod is waited for that long before it is released without a delete.
    pub registration_timeout: Duration,
}

/// Why unregistration is finished without (another) delete call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// It was already marked complete.
    AlreadyComplete,
    /// The pod was never scheduled, so its runner never ran nor registered.
    NeverStarted,
    /// The pod stopped or outlived the registration window without a runner ID. If a runner did
    /// register under this name, it is offline now and GitHub removes offline ephemeral runners.
    NoRunnerId,
    /// An ephemeral runner stopped for good after a clean exit (no run of its pod can register
    /// again, see [`crate::runner_container`]): it removed its own registration.
    RunnerStopped,
    /// GitHub removed the runner (204), or said it has no such runner (404) and a list taken
    /// after that call has no runner of the pod's name either.
    Removed,
}

/// The next thing to do for a pod whose unregistration was requested.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Mark `unregistration-complete-timestamp`.
    Finish(Finished),
    /// Check again after the delay; the runner may still be registering.
    WaitForRegistration {
        /// Re-check delay.
        recheck_after: Duration,
    },
    /// The pod is on no node, so its runner never started, but the scheduler may still place
    /// it: delete the pod, on condition that it is still the version this decision looked at
    /// (a changed pod is decided again), and finish once it is deleting. A mark on a live pod
    /// would be a claim the scheduler could falsify the moment after.
    Withdraw,
    /// Call DELETE on the runner.
    Delete {
        /// GitHub runner ID.
        runner_id: u64,
    },
    /// The runner stopped for good without exiting cleanly, so its registration may be left
    /// behind: look its ID up by name if the pod has none, call DELETE once, and finish
    /// whatever GitHub answers. A stopped runner can take no job, so nothing waits on the
    /// answer; a registration a failed call leaves is offline and the leaked-registration
    /// sweep's ([`crate::sweep`]).
    RemoveLeftover {
        /// GitHub runner ID, when the pod records it.
        runner_id: Option<u64>,
    },
}

/// Decides the next step for a pod whose unregistration was requested.
pub fn next_step(pod: &PodState, now: SystemTime) -> Step {
    if pod.unregistration_complete {
        return Step::Finish(Finished::AlreadyComplete);
    }
    let stopped = pod.runner_stopped || matches!(pod.phase, PodPhase::Succeeded | PodPhase::Failed);
    let Some(runner_id) = pod.runner_id else {
        if pod.phase == PodPhase::Pending && !pod.scheduled {
            // On no node, so nothing started and nothing registered. Releasing it at once also
            // avoids a dead-lock on volumes that can only be provisioned once the pod is gone.
            // (A scheduled pod that looks Pending may already run its runner: a kubelet reports
            // container starts after the fact, so it waits below like a started pod.)
            return if pod.deleting {
                Step::Finish(Finished::NeverStarted)
            } else {
                Step::Withdraw
            };
        }
        let window_start = pod.ready_since.or(pod.started).or(pod.created);
        let in_window = window_start
            .is_none_or(|t| now.duration_since(t).unwrap_or_default() < pod.registration_timeout);
        if !stopped && in_window {
            // A runner that registers right now could be handed a job and then killed: wait.
            return Step::WaitForRegistration {
                recheck_after: RETRY_DELAY,
            };
        }
        if stopped && !(pod.runner_exited_cleanly && pod.ephemeral) {
            // Killed or crashed after it may have registered, before its ID was recorded, or a
            // persistent runner that stays registered when it exits.
            return Step::RemoveLeftover { runner_id: None };
        }
        return Step::Finish(Finished::NoRunnerId);
    };
    if stopped {
        if pod.runner_exited_cleanly && pod.ephemeral {
            return Step::Finish(Finished::RunnerStopped);
        }
        return Step::RemoveLeftover {
            runner_id: Some(runner_id),
        };
    }
    // Not even after waiting for its job is a restart proof that the runner is done (ARC's
    // #1369 shortcut): a runner container that restarted registers again and may hold the next
    // job. Only GitHub can tell; a stale ID is caught by the 404 and the look-up by name.
    Step::Delete { runner_id }
}

/// GitHub's answer to DELETE runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// 204: removed.
    Removed,
    /// 404: no runner of that ID, which is confirmed by name before it counts as removed.
    NotFound,
    /// 403: the credential may not manage runners here. Unlike ARC, never taken as removed: a
    /// credential that lost its permission would otherwise delete busy runners' pods.
    Forbidden,
    /// 422 "still running a job".
    Busy,
    /// Primary or secondary rate limit; `retry_after` when GitHub said.
    RateLimited {
        /// GitHub's retry-after or the time until the reset.
        retry_after: Option<Duration>,
    },
    /// Any other failure (network, 5xx): retried.
    Failed,
}

/// What to do after the delete call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterDelete {
    /// Mark `unregistration-complete-timestamp`.
    Finish(Finished),
    /// The runner is running a job. Annotate `unregistration-failure-message` (counted as busy by
    /// the autoscaler); for ephemeral runners also `runner-completion-wait-start-timestamp`, and
    /// wait for the runner to finish by itself; static runners are asked again later.
    Busy {
        /// Set the completion-wait annotation.
        start_completion_wait: bool,
        /// Re-check delay.
        recheck_after: Duration,
    },
    /// Try the call again after the delay.
    Retry {
        /// Delay before the retry.
        after: Duration,
    },
    /// 404: look the runner up by name in a list taken after the call, then ask
    /// [`after_not_found`].
    ConfirmByName,
    /// 403: keep the pod; tell the owner which permission is missing
    /// ([`crate::RunnerScope::permission_hint`]); retry with back-off.
    Forbidden,
}

/// Interprets the delete call's outcome.
pub fn after_delete(outcome: DeleteOutcome, ephemeral: bool) -> AfterDelete {
    match outcome {
        DeleteOutcome::Removed => AfterDelete::Finish(Finished::Removed),
        DeleteOutcome::NotFound => AfterDelete::ConfirmByName,
        DeleteOutcome::Forbidden => AfterDelete::Forbidden,
        DeleteOutcome::Busy => AfterDelete::Busy {
            start_completion_wait: ephemeral,
            recheck_after: RETRY_DELAY,
        },
        DeleteOutcome::RateLimited { retry_after } => AfterDelete::Retry {
            after: retry_after.unwrap_or(RATE_LIMIT_RETRY_DELAY),
        },
        DeleteOutcome::Failed => AfterDelete::Retry { after: RETRY_DELAY },
    }
}

/// How often a deleting pod held for its StatefulSet looks at the StatefulSet again.
pub const SUCCESSOR_RECHECK: Duration = Duration::from_secs(2);

/// Who would put a fresh pod in a deleting pod's place once the pod is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Successor {
    /// Nobody: the pod belongs to a Runner (which never gets a new pod once its pod was
    /// deleted while it was set-owned or retiring), or its StatefulSet is deleting or gone.
    None,
    /// A live StatefulSet that stays: the fresh pod it creates under the same name is wanted.
    StatefulSet,
    /// A live StatefulSet that is retiring. Its fresh pod would carry no unregistration
    /// request and could take a job between owner sync's last look at the set and the set's
    /// deletion, then die with it. Owner sync deletes the set once this pod is deleting.
    RetiringStatefulSet,
    /// A live StatefulSet scaled to zero whose controller has observed that
    /// ([`crate::owner_sync::PodController::Stopped`]): it creates no pod in this one's place,
    /// and owner sync never scales a set it retires up again, so there is nothing to wait for.
    /// (Owner sync scales a retiring set to zero before its pod goes, so this is how the pods
    /// of a scale-down usually end.)
    StoppedStatefulSet,
    /// A live StatefulSet not marked retiring, of a pod whose retirement owner sync requested
    /// `requested_for` ago. Owner sync marks a set right after its pods, so a young request
    /// means the set's mark is on its way: released now, the pod would be replaced by a fresh
    /// one before the mark lands.
    UnmarkedStatefulSet {
        /// How long ago the pod's `unregistration-request-timestamp` was set.
        requested_for: Duration,
    },
}

/// How long a retiring pod's StatefulSet may lack its own retirement mark before the pod is
/// released anyway (a set whose mark failed and that is wanted again keeps its place).
pub const SET_MARK_WAIT: Duration = Duration::from_secs(30);

/// Whether a deleting pod whose unregistration is finished may drop its finalizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Remove the finalizer.
    Now,
    /// Keep it, and look again after the delay.
    Hold {
        /// Delay before the next look.
        recheck_after: Duration,
    },
}

/// Decides whether a deleting pod may go, given who would replace it: never while a retiring
/// StatefulSet would fill its place with a fresh pod.
pub fn release(successor: Successor) -> Release {
    let hold = Release::Hold {
        recheck_after: SUCCESSOR_RECHECK,
    };
    match successor {
        Successor::None | Successor::StatefulSet | Successor::StoppedStatefulSet => Release::Now,
        Successor::RetiringStatefulSet => hold,
        Successor::UnmarkedStatefulSet { requested_for } if requested_for < SET_MARK_WAIT => hold,
        Successor::UnmarkedStatefulSet { .. } => Release::Now,
    }
}

/// What a list taken after a 404 says about the pod's runner name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListedByName {
    /// No runner of that name.
    Absent,
    /// A runner of that name with this ID.
    Present {
        /// Its GitHub runner ID.
        runner_id: u64,
    },
}

/// What to do after a 404 on deleting runner `deleted`, given the list taken afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterNotFound {
    /// Nothing of that name is registered: unregistration is complete.
    Finish(Finished),
    /// The runner is registered under another ID (the annotated one was stale): record it and
    /// delete that one.
    DeleteInstead {
        /// The ID the runner actually has.
        runner_id: u64,
    },
    /// GitHub lists the very runner it just said it does not have: ask again later rather
    /// than guess.
    Retry {
        /// Delay before the retry.
        after: Duration,
    },
}

/// Decides after a 404, from a list of the scope's runners taken after the delete call.
pub fn after_not_found(listed: ListedByName, deleted: u64) -> AfterNotFound {
    match listed {
        ListedByName::Absent => AfterNotFound::Finish(Finished::Removed),
        ListedByName::Present { runner_id } if runner_id != deleted => {
            AfterNotFound::DeleteInstead { runner_id }
        }
        ListedByName::Present { .. } => AfterNotFound::Retry { after: RETRY_DELAY },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner_sync::REGISTRATION_TIMEOUT;

    fn at(mins: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(5_000_000 + mins * 60)
    }

    /// A Running, Ready (since minute 0), registered, idle runner pod.
    fn idle() -> PodState {
        PodState {
            runner_id: Some(42),
            phase: PodPhase::Running,
            runner_stopped: false,
            runner_exited_cleanly: false,
            ephemeral: true,
            ready_since: Some(at(0)),
            started: Some(at(0)),
            scheduled: true,
            created: Some(at(0)),
            deleting: false,
            unregistration_complete: false,
            completion_wait_started: false,
            registration_timeout: REGISTRATION_TIMEOUT,
        }
    }

    #[test]
    fn a_shorter_registration_timeout_ends_the_wait_sooner() {
        let pod = PodState {
            runner_id: None,
            ..idle()
        };
        assert!(matches!(
            next_step(&pod, at(2)),
            Step::WaitForRegistration { .. }
        ));
        let short = PodState {
            registration_timeout: Duration::from_secs(60),
            ..pod
        };
        assert_eq!(next_step(&short, at(2)), Step::Finish(Finished::NoRunnerId));
    }

    #[test]
    fn registered_running_runner_is_deleted_on_github() {
        assert_eq!(next_step(&idle(), at(1)), Step::Delete { runner_id: 42 });
    }

    #[test]
    fn already_complete_is_finished() {
        let pod = PodState {
            unregistration_complete: true,
            ..idle()
        };
        assert_eq!(
            next_step(&pod, at(1)),
            Step::Finish(Finished::AlreadyComplete)
        );
    }

    /// The scheduler may place a pod the moment after it was judged unscheduled: it is
    /// withdrawn (deleted at the judged version), never just marked, and finished once deleting.
    #[test]
    fn an_unscheduled_pending_pod_is_withdrawn_then_finished_once_deleting() {
        let pod = PodState {
            runner_id: None,
            phase: PodPhase::Pending,
            scheduled: false,
            ready_since: None,
            started: None,
            ..idle()
        };
        assert_eq!(next_step(&pod, at(1)), Step::Withdraw);
        let deleting = PodState {
            deleting: true,
            ..pod
        };
        assert_eq!(
            next_step(&deleting, at(1)),
            Step::Finish(Finished::NeverStarted)
        );
    }

    #[test]
    fn a_deleting_pod_is_held_only_while_a_retiring_stateful_set_would_replace_it() {
        for (successor, expected) in [
            (Successor::None, Release::Now),
            (Successor::StatefulSet, Release::Now),
            // Scaled to zero, and its controller saw that: no fresh pod can come.
            (Successor::StoppedStatefulSet, Release::Now),
            (
                Successor::RetiringStatefulSet,
                Release::Hold {
                    recheck_after: SUCCESSOR_RECHECK,
                },
            ),
            // Its pods are marked before the set: the set's mark is on its way.
            (
                Successor::UnmarkedStatefulSet {
                    requested_for: Duration::ZERO,
                },
                Release::Hold {
                    recheck_after: SUCCESSOR_RECHECK,
                },
            ),
            (
                Successor::UnmarkedStatefulSet {
                    requested_for: SET_MARK_WAIT - Duration::from_millis(1),
                },
                Release::Hold {
                    recheck_after: SUCCESSOR_RECHECK,
                },
            ),
            // A mark that never came (its write failed, the set is wanted again).
            (
                Successor::UnmarkedStatefulSet {
                    requested_for: SET_MARK_WAIT,
                },
                Release::Now,
            ),
        ] {
            assert_eq!(release(successor), expected, "{successor:?}");
        }
    }

    /// A kubelet reports a container's start after the fact: a scheduled pod that looks
    /// Pending may hold a runner that registers (and is handed a job) any moment now.
    #[test]
    fn a_scheduled_pending_pod_waits_for_its_runner_within_the_registration_window() {
        for started in [None, Some(at(0))] {
            let pod = PodState {
                runner_id: None,
                phase: PodPhase::Pending,
                scheduled: true,
                ready_since: None,
                started,
                created: Some(at(0)),
                ..idle()
            };
            assert_eq!(
                next_step(&pod, at(1)),
                Step::WaitForRegistration {
                    recheck_after: RETRY_DELAY
                },
                "{pod:?}"
            );
            // A pod its kubelet never started (a lost node) is released once the window
            // counted from its creation has passed.
            assert_eq!(
                next_step(&pod, at(11)),
                Step::Finish(Finished::NoRunnerId),
                "{pod:?}"
            );
        }
    }

    #[test]
    fn running_pod_without_id_waits_within_the_registration_window() {
        let pod = PodState {
            runner_id: None,
            ..idle()
        };
        assert_eq!(
            next_step(&pod, at(9)),
            Step::WaitForRegistration {
                recheck_after: RETRY_DELAY
            }
        );
    }

    #[test]
    fn running_but_never_ready_pod_waits_from_its_start_time() {
        let pod = PodState {
            runner_id: None,
            ready_since: None,
            ..idle()
        };
        assert!(matches!(
            next_step(&pod, at(5)),
            Step::WaitForRegistration { .. }
        ));
        assert_eq!(next_step(&pod, at(11)), Step::Finish(Finished::NoRunnerId));
    }

    #[test]
    fn running_pod_without_id_is_released_after_the_window() {
        let pod = PodState {
            runner_id: None,
            ..idle()
        };
        assert_eq!(next_step(&pod, at(11)), Step::Finish(Finished::NoRunnerId));
    }

    #[test]
    fn stopped_pod_without_id_is_released() {
        let pod = PodState {
            runner_id: None,
            runner_stopped: true,
            runner_exited_cleanly: true,
            ..idle()
        };
        assert_eq!(next_step(&pod, at(1)), Step::Finish(Finished::NoRunnerId));
    }

    /// A persistent runner that exits 0 is still registered (offline): its registration is
    /// removed once, as a killed runner's is.
    #[test]
    fn a_persistent_runner_that_exited_cleanly_has_its_registration_removed() {
        let pod = PodState {
            runner_stopped: true,
            runner_exited_cleanly: true,
            ephemeral: false,
            ..idle()
        };
        assert_eq!(
            next_step(&pod, at(1)),
            Step::RemoveLeftover {
                runner_id: Some(42)
            }
        );
        let unlisted = PodState {
            runner_id: None,
            ..pod
        };
        assert_eq!(
            next_step(&unlisted, at(1)),
            Step::RemoveLeftover { runner_id: None }
        );
    }

    #[test]
    fn a_runner_that_exited_cleanly_needs_no_api_call() {
        for pod in [
            PodState {
                runner_stopped: true,
                ..idle()
            },
            PodState {
                phase: PodPhase::Succeeded,
                ..idle()
            },
            PodState {
                phase: PodPhase::Failed,
                ..idle()
            },
        ] {
            let pod = PodState {
                runner_exited_cleanly: true,
                ..pod
            };
            assert_eq!(
                next_step(&pod, at(1)),
                Step::Finish(Finished::RunnerStopped),
                "{pod:?}"
            );
        }
    }

    #[test]
    fn a_runner_killed_or_crashed_has_its_leftover_registration_removed_once() {
        for pod in [
            PodState {
                runner_stopped: true,
                ..idle()
            },
            PodState {
                phase: PodPhase::Failed,
                ..idle()
            },
            PodState {
                runner_stopped: true,
                completion_wait_started: true,
                ..idle()
            },
        ] {
            assert_eq!(
                next_step(&pod, at(1)),
                Step::RemoveLeftover {
                    runner_id: Some(42)
                },
                "{pod:?}"
            );
            // Killed before its ID was recorded: looked up by name.
            let pod = PodState {
                runner_id: None,
                ..pod
            };
            assert_eq!(
                next_step(&pod, at(1)),
                Step::RemoveLeftover { runner_id: None },
                "{pod:?}"
            );
        }
    }

    #[test]
    fn a_runner_waited_for_that_runs_is_asked_of_github_however_often_it_restarted() {
        // Waiting for its job, then running (again: the restart count is no proof either way,
        // the new run may have registered and taken the next job): GitHub decides.
        let pod = PodState {
            completion_wait_started: true,
            ..idle()
        };
        assert_eq!(next_step(&pod, at(1)), Step::Delete { runner_id: 42 });
        // Once no run can come back, it is done.
        let pod = PodState {
            completion_wait_started: true,
            runner_stopped: true,
            runner_exited_cleanly: true,
            ..idle()
        };
        assert_eq!(
            next_step(&pod, at(1)),
            Step::Finish(Finished::RunnerStopped)
        );
    }

    #[test]
    fn delete_outcomes() {
        use AfterDelete as A;
        use DeleteOutcome as D;
        let cases = [
            (D::Removed, true, A::Finish(Finished::Removed)),
            (D::NotFound, false, A::ConfirmByName),
            (D::NotFound, true, A::ConfirmByName),
            (D::Forbidden, false, A::Forbidden),
            (D::Forbidden, true, A::Forbidden),
            (
                D::Busy,
                true,
                A::Busy {
                    start_completion_wait: true,
                    recheck_after: RETRY_DELAY,
                },
            ),
            (
                D::Busy,
                false,
                A::Busy {
                    start_completion_wait: false,
                    recheck_after: RETRY_DELAY,
                },
            ),
            (
                D::RateLimited { retry_after: None },
                true,
                A::Retry {
                    after: RATE_LIMIT_RETRY_DELAY,
                },
            ),
            (
                D::RateLimited {
                    retry_after: Some(Duration::from_secs(7)),
                },
                true,
                A::Retry {
                    after: Duration::from_secs(7),
                },
            ),
            (D::Failed, false, A::Retry { after: RETRY_DELAY }),
        ];
        for (outcome, ephemeral, want) in cases {
            assert_eq!(
                after_delete(outcome, ephemeral),
                want,
                "{outcome:?} ephemeral={ephemeral}"
            );
        }
    }

    #[test]
    fn a_404_is_confirmed_by_name() {
        use AfterNotFound as A;
        use ListedByName as L;
        let cases = [
            (L::Absent, A::Finish(Finished::Removed)),
            (
                L::Present { runner_id: 43 },
                A::DeleteInstead { runner_id: 43 },
            ),
            (
                L::Present { runner_id: 42 },
                A::Retry { after: RETRY_DELAY },
            ),
        ];
        for (listed, want) in cases {
            assert_eq!(after_not_found(listed, 42), want, "{listed:?}");
        }
    }
}
