//! The Runner controller's decision: one row per branch, plus precedence rows. Fixtures are
//! builders: `fresh().owned().had_pod()` reads as the situation it describes.

use super::*;

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

/// A live Runner holding its finalizer, never had a pod, standalone; now is second 100.
fn fresh() -> RunnerFacts {
    RunnerFacts {
        deleting: false,
        holds_finalizer: true,
        retiring: false,
        had_pod: false,
        owned: false,
        finished_at: None,
        pod: None,
        uses_jit: false,
        now: t(100),
    }
}

fn pod(phase: PodPhase) -> PodFacts {
    PodFacts {
        phase,
        stopped: false,
        deleting: false,
    }
}

trait Build {
    fn deleting(self) -> Self;
    fn without_finalizer(self) -> Self;
    fn retiring(self) -> Self;
    fn had_pod(self) -> Self;
    fn owned(self) -> Self;
    fn finished(self, secs_ago: u64) -> Self;
    fn jit(self) -> Self;
    fn with(self, pod: PodFacts) -> Self;
}

impl Build for RunnerFacts {
    fn deleting(self) -> Self {
        Self {
            deleting: true,
            ..self
        }
    }
    fn without_finalizer(self) -> Self {
        Self {
            holds_finalizer: false,
            ..self
        }
    }
    fn retiring(self) -> Self {
        Self {
            retiring: true,
            ..self
        }
    }
    fn had_pod(self) -> Self {
        Self {
            had_pod: true,
            ..self
        }
    }
    fn owned(self) -> Self {
        Self {
            owned: true,
            ..self
        }
    }
    fn finished(self, secs_ago: u64) -> Self {
        Self {
            finished_at: Some(t(100 - secs_ago)),
            ..self
        }
    }
    fn jit(self) -> Self {
        Self {
            uses_jit: true,
            ..self
        }
    }
    fn with(self, pod: PodFacts) -> Self {
        Self {
            pod: Some(pod),
            ..self
        }
    }
}

fn mirror(delete_finished_pod: bool, refresh_shared_token: bool, hand_on: bool) -> RunnerStep {
    RunnerStep::Mirror {
        delete_finished_pod,
        refresh_shared_token,
        hand_on_unregistration: hand_on,
    }
}

#[test]
fn one_row_per_branch() {
    use PodPhase::*;
    use RunnerStep::*;
    let stopped = PodFacts {
        stopped: true,
        ..pod(Running)
    };
    let deleting_pod = PodFacts {
        deleting: true,
        ..pod(Succeeded)
    };
    // (claim, facts, add_finalizer, step)
    let rows: Vec<(&str, RunnerFacts, bool, RunnerStep)> = vec![
        (
            "deleting, holding the finalizer: retire",
            fresh().deleting(),
            false,
            Retire,
        ),
        (
            "deleting without the finalizer: let go, even with a pod",
            fresh().deleting().without_finalizer().with(pod(Running)),
            false,
            LetGo,
        ),
        (
            "live without the finalizer: add it, then the live step",
            fresh().without_finalizer(),
            true,
            CreatePod,
        ),
        ("a fresh Runner gets a pod", fresh(), false, CreatePod),
        (
            "retiring without a pod: wait",
            fresh().retiring(),
            false,
            WaitRetiring,
        ),
        (
            "set-owned, finished 5 s ago, pod gone: leave it to the set",
            fresh().had_pod().owned().finished(5),
            false,
            WaitForSet {
                after: Duration::from_secs(5) + Duration::from_millis(100),
            },
        ),
        (
            "set-owned, finished 11 s ago, pod gone: check whether it vanished",
            fresh().had_pod().owned().finished(11),
            false,
            CheckVanished,
        ),
        (
            "set-owned, finished exactly the wait ago: check",
            fresh().had_pod().owned().finished(10),
            false,
            CheckVanished,
        ),
        (
            "set-owned, never finished, pod gone: check whether it vanished",
            fresh().had_pod().owned(),
            false,
            CheckVanished,
        ),
        (
            "standalone, pod gone: a fresh pod (ARC restarts)",
            fresh().had_pod().finished(5),
            false,
            CreatePod,
        ),
        (
            "set-owned, never had a pod: create it, whatever finished says",
            fresh().owned().finished(5),
            false,
            CreatePod,
        ),
        (
            "set-owned, pod Succeeded: note it",
            fresh().owned().with(pod(Succeeded)),
            false,
            NoteFinished {
                hand_on_unregistration: false,
            },
        ),
        (
            "set-owned, pod Failed: note it",
            fresh().owned().with(pod(Failed)),
            false,
            NoteFinished {
                hand_on_unregistration: false,
            },
        ),
        (
            "set-owned, runner stopped in a running pod: note it",
            fresh().owned().with(stopped),
            false,
            NoteFinished {
                hand_on_unregistration: false,
            },
        ),
        (
            "standalone, finished: delete the pod and mirror",
            fresh().with(pod(Failed)),
            false,
            mirror(true, false, false),
        ),
        (
            "standalone, stopped: delete the pod and mirror",
            fresh().with(stopped),
            false,
            mirror(true, false, false),
        ),
        (
            "standalone, finished pod already deleting: mirror only",
            fresh().with(deleting_pod),
            false,
            mirror(false, false, false),
        ),
        (
            "pending, shared token: keep the token fresh",
            fresh().with(pod(Pending)),
            false,
            mirror(false, true, false),
        ),
        (
            "pending, JIT: no shared token",
            fresh().jit().with(pod(Pending)),
            false,
            mirror(false, false, false),
        ),
        (
            "running: mirror only",
            fresh().owned().with(pod(Running)),
            false,
            mirror(false, false, false),
        ),
        (
            "unknown phase: mirror only",
            fresh().with(pod(Unknown)),
            false,
            mirror(false, false, false),
        ),
        (
            "unregistration requested: handed on to the pod",
            fresh().owned().retiring().with(pod(Running)),
            false,
            mirror(false, false, true),
        ),
    ];
    for (claim, facts, add_finalizer, step) in rows {
        assert_eq!(
            drive(&facts),
            RunnerPlan {
                add_finalizer,
                step
            },
            "{claim}"
        );
    }
}

#[test]
fn precedence() {
    use PodPhase::*;
    use RunnerStep::*;
    let rows: Vec<(&str, RunnerFacts, RunnerPlan)> = vec![
        (
            "deleting outranks a missing finalizer: no finalizer is added",
            fresh().deleting().without_finalizer(),
            RunnerPlan {
                add_finalizer: false,
                step: LetGo,
            },
        ),
        (
            "deleting outranks a finished pod",
            fresh().deleting().owned().with(pod(Succeeded)),
            RunnerPlan {
                add_finalizer: false,
                step: Retire,
            },
        ),
        (
            "retiring outranks a vanished pod: never created, never checked",
            fresh().retiring().had_pod().owned().finished(60),
            RunnerPlan {
                add_finalizer: false,
                step: WaitRetiring,
            },
        ),
        (
            "a missing finalizer is added before waiting for the set",
            fresh().without_finalizer().had_pod().owned().finished(1),
            RunnerPlan {
                add_finalizer: true,
                step: WaitForSet {
                    after: Duration::from_secs(9) + Duration::from_millis(100),
                },
            },
        ),
        (
            "a finished set-owned runner still hands its unregistration on",
            fresh().owned().retiring().with(pod(Failed)),
            RunnerPlan {
                add_finalizer: false,
                step: NoteFinished {
                    hand_on_unregistration: true,
                },
            },
        ),
        (
            "a stopped runner in a Pending pod: deleted, and the phase still asks for the token",
            fresh().with(PodFacts {
                stopped: true,
                ..pod(Pending)
            }),
            RunnerPlan {
                add_finalizer: false,
                step: mirror(true, true, false),
            },
        ),
    ];
    for (claim, facts, plan) in rows {
        assert_eq!(drive(&facts), plan, "{claim}");
    }
}
