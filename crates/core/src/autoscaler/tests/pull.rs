//! Pull recovery: which queued jobs get a reservation.

use super::{mins, t};
use crate::autoscaler::pull::*;
use crate::autoscaler::reservations::{JobKey, JobOp, Reservation, ScaleOp};
use crate::autoscaler::webhook::{JobOrigin, TargetCandidate, TriggerView};
use crate::scope::RunnerScope;

const ORIGIN: JobOrigin<'static> = JobOrigin {
    owner: "octo",
    repository: "app",
    owner_is_user: false,
    enterprise: None,
};

fn candidate(id: &'static str, labels: &[&str]) -> TargetCandidate<&'static str> {
    TargetCandidate {
        id,
        scope: RunnerScope::Repository {
            owner: "octo".into(),
            name: "app".into(),
        },
        group: None,
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        triggers: vec![TriggerView::workflow_job(None)],
    }
}

fn job(id: u64, attempt: u32, label: &str, created_min: u64) -> QueuedJob {
    QueuedJob {
        job: JobKey { id, attempt },
        labels: vec!["self-hosted".into(), label.into()],
        created_at: Some(t(created_min)),
    }
}

/// A reservation for job `id` (attempt 1) holding `replicas`, expiring at minute `until`.
fn reserved(id: u64, replicas: u32, until: u64) -> Reservation {
    Reservation {
        replicas,
        job: Some(JobKey { id, attempt: 1 }),
        expiration_time: t(until),
        ..Reservation::new(t(0), mins(until))
    }
}

fn pulled(ids: &[(u64, u32)]) -> Vec<JobOp> {
    ids.iter()
        .map(|&(id, attempt)| JobOp {
            op: ScaleOp::Up,
            job: Some(JobKey { id, attempt }),
            delivery: Some(PULL_DELIVERY.to_owned()),
            runner: None,
            event: None,
        })
        .collect()
}

#[test]
fn queued_jobs_without_a_record_are_reserved_by_pull() {
    // "b" comes after "a" in the webhook's order; both serve `linux`, only "b" serves `gpu`.
    let candidates = [
        candidate("a", &["linux"]),
        candidate("b", &["linux", "gpu"]),
    ];
    /// name, autoscaler, queued jobs, stored reservations, cap, expected (job, attempt)s
    type Row = (
        &'static str,
        &'static str,
        Vec<QueuedJob>,
        Vec<Reservation>,
        u32,
        Vec<(u64, u32)>,
    );
    // Now is minute 10 throughout.
    #[rustfmt::skip]
    let table: Vec<Row> = vec![
        ("an unrecorded job is reserved",             "a", vec![job(1, 1, "linux", 5)], vec![],                         10, vec![(1, 1)]),
        ("a reserved job is not reserved again",      "a", vec![job(1, 1, "linux", 5)], vec![reserved(1, 1, 30)],       10, vec![]),
        ("a completed job's tombstone blocks it",     "a", vec![job(1, 1, "linux", 5)], vec![reserved(1, 0, 30)],       10, vec![]),
        ("an expired reservation is made again",      "a", vec![job(1, 1, "linux", 5)], vec![reserved(1, 1, 10)],       10, vec![(1, 1)]),
        ("a re-run attempt is another job",           "a", vec![job(1, 2, "linux", 5)], vec![reserved(1, 0, 30)],       10, vec![(1, 2)]),
        ("a job the webhook routes elsewhere: none",  "b", vec![job(1, 1, "linux", 5)], vec![],                         10, vec![]),
        ("a job only this autoscaler serves",         "b", vec![job(2, 1, "gpu", 5)],   vec![],                         10, vec![(2, 1)]),
        ("a job nobody serves: none",                 "a", vec![job(3, 1, "arm", 5)],   vec![],                         10, vec![]),
        ("a job listed twice counts once",            "a", vec![job(1, 1, "linux", 5), job(1, 1, "linux", 5)], vec![], 10, vec![(1, 1)]),
        ("within the cap the oldest go first",        "a", vec![job(4, 1, "linux", 7), job(5, 1, "linux", 2), job(6, 1, "linux", 4)],
                                                           vec![reserved(9, 1, 30)],                                     3, vec![(5, 1), (6, 1)]),
        ("at the cap nothing is added",               "a", vec![job(1, 1, "linux", 5)], vec![reserved(9, 2, 30)],        2, vec![]),
        ("tombstones and expired hold no room",       "a", vec![job(1, 1, "linux", 5)], vec![reserved(8, 0, 30), reserved(9, 1, 10)], 1, vec![(1, 1)]),
    ];
    for (name, autoscaler, queued, reservations, cap, expected) in table {
        let input = PullInput {
            autoscaler: &autoscaler,
            candidates: &candidates,
            origin: ORIGIN,
            queued: &queued,
            reservations: &reservations,
            cap,
            now: t(10),
        };
        assert_eq!(pull_operations(&input), pulled(&expected), "{name}");
    }
}

#[test]
fn room_is_the_cap_less_what_active_reservations_hold() {
    // (case, reservations, cap, room) at minute 10
    #[rustfmt::skip]
    let rows = [
        ("nothing held: the whole cap",             vec![],                                          4, 4),
        ("held replicas count",                     vec![reserved(1, 1, 30), reserved(2, 2, 30)],   4, 1),
        ("at the cap: no room, nothing to list",    vec![reserved(1, 4, 30)],                        4, 0),
        ("queued demand beyond the cap: no room",   vec![reserved(1, 3, 30), reserved(2, 3, 30)],   4, 0),
        ("tombstones and expired hold nothing",     vec![reserved(1, 0, 30), reserved(2, 3, 10)],   4, 4),
    ];
    for (case, reservations, cap, room) in rows {
        assert_eq!(pull_room(&reservations, cap, t(10)), room, "{case}");
    }
}
