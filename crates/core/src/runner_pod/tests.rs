//! The runner-pod controller's decision: one row per branch, plus precedence rows.

use super::*;

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

/// A trusted, live, running pod holding the finalizer, its ID known; now is second 100.
fn live() -> PodFacts {
    PodFacts {
        trusted: true,
        deleting_since: None,
        has_finalizer: true,
        finished: false,
        phase: PodPhase::Running,
        has_runner_id: true,
        unregistration_requested: false,
        unregistration_complete: false,
        now: t(100),
    }
}

/// `live()` being deleted since `secs_ago`.
fn deleting(secs_ago: u64) -> PodFacts {
    PodFacts {
        deleting_since: Some(t(100 - secs_ago)),
        ..live()
    }
}

fn untrusted(f: PodFacts) -> PodFacts {
    PodFacts {
        trusted: false,
        ..f
    }
}

fn without_finalizer(f: PodFacts) -> PodFacts {
    PodFacts {
        has_finalizer: false,
        ..f
    }
}

fn finished(f: PodFacts) -> PodFacts {
    PodFacts {
        finished: true,
        phase: PodPhase::Succeeded,
        ..f
    }
}

fn in_phase(phase: PodPhase, f: PodFacts) -> PodFacts {
    PodFacts {
        phase,
        has_runner_id: false,
        ..f
    }
}

fn requested(complete: bool, f: PodFacts) -> PodFacts {
    PodFacts {
        unregistration_requested: true,
        unregistration_complete: complete,
        ..f
    }
}

fn in_secs(n: u64) -> ForceDelete {
    ForceDelete::RecheckIn(Duration::from_secs(n))
}

#[test]
fn one_row_per_branch() {
    use PodPhase::*;
    use PodStep::*;
    let rows: Vec<(&str, PodFacts, PodStep)> = vec![
        (
            "untrusted, deleting, with the finalizer: released",
            untrusted(deleting(5)),
            ReleaseUntrusted,
        ),
        ("untrusted and live: ignored", untrusted(live()), Ignore),
        (
            "untrusted, deleting, no finalizer: ignored",
            untrusted(without_finalizer(deleting(5))),
            Ignore,
        ),
        (
            "untrusted, live, no finalizer: ignored (never given one)",
            untrusted(without_finalizer(live())),
            Ignore,
        ),
        (
            "deleting a running runner's pod: delete its Runner, unregister",
            deleting(30),
            Deleting {
                delete_parent: true,
                unregister: true,
                force: in_secs(31),
            },
        ),
        (
            "deleting a finished runner's pod: its set deletes the Runner",
            finished(deleting(30)),
            Deleting {
                delete_parent: false,
                unregister: true,
                force: in_secs(31),
            },
        ),
        (
            "deleting, lingering a minute: force-delete now",
            deleting(60),
            Deleting {
                delete_parent: true,
                unregister: true,
                force: ForceDelete::Now,
            },
        ),
        (
            "deleting without the finalizer: only the force-delete clock",
            without_finalizer(deleting(0)),
            Deleting {
                delete_parent: false,
                unregister: false,
                force: in_secs(61),
            },
        ),
        (
            "live without the finalizer: add it",
            without_finalizer(live()),
            AddFinalizer,
        ),
        (
            "running without an ID: look it up",
            in_phase(Running, live()),
            Live {
                look_up_id: true,
                unregister: false,
            },
        ),
        (
            "pending without an ID: not yet",
            in_phase(Pending, live()),
            Live {
                look_up_id: false,
                unregister: false,
            },
        ),
        (
            "running without an ID, its runner finished: nothing to look up",
            PodFacts {
                finished: true,
                ..in_phase(Running, live())
            },
            Live {
                look_up_id: false,
                unregister: false,
            },
        ),
        (
            "running with its ID: nothing to look up",
            live(),
            Live {
                look_up_id: false,
                unregister: false,
            },
        ),
        (
            "unregistration requested, not complete: unregister",
            requested(false, live()),
            Live {
                look_up_id: false,
                unregister: true,
            },
        ),
        (
            "unregistration complete: nothing more",
            requested(true, live()),
            Live {
                look_up_id: false,
                unregister: false,
            },
        ),
    ];
    for (claim, facts, want) in rows {
        assert_eq!(step(&facts), want, "{claim}");
    }
}

#[test]
fn precedence() {
    use PodPhase::*;
    use PodStep::*;
    let rows: Vec<(&str, PodFacts, PodStep)> = vec![
        (
            "untrust outranks a live pod's finalizer: never added",
            untrusted(without_finalizer(in_phase(Running, live()))),
            Ignore,
        ),
        (
            "deleting outranks a missing ID and a request",
            requested(false, in_phase(Running, deleting(10))),
            Deleting {
                delete_parent: true,
                unregister: true,
                force: in_secs(51),
            },
        ),
        (
            "the finalizer is added before any lookup or unregistration",
            without_finalizer(requested(false, in_phase(Running, live()))),
            AddFinalizer,
        ),
        (
            "lookup and unregistration in one pass",
            requested(false, in_phase(Running, live())),
            Live {
                look_up_id: true,
                unregister: true,
            },
        ),
        (
            "a deletion timestamp in the future counts as just begun",
            PodFacts {
                deleting_since: Some(t(130)),
                ..live()
            },
            Deleting {
                delete_parent: true,
                unregister: true,
                force: in_secs(61),
            },
        ),
    ];
    for (claim, facts, want) in rows {
        assert_eq!(step(&facts), want, "{claim}");
    }
}
