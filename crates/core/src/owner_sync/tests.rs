//! Owner-sync decisions, one test per branch. Fixtures are builders: `owner("a").running()`
//! reads as the situation it describes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::*;
use crate::health::Stuck;

const HASH: &str = "h1";

fn t(mins: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + mins * 60)
}

fn pod(name: &str, phase: PodPhase) -> PodView {
    PodView {
        name: name.into(),
        phase,
        runner_stopped: false,
        runner_restarted: false,
        runner_restarting: false,
        deleting: false,
        health: if phase == PodPhase::Running {
            Health::Healthy
        } else {
            Health::Starting
        },
        unregistration_requested: false,
        unregistration_complete: false,
        finished_at: None,
        previous_run_failed: false,
        online_on_github: false,
    }
}

/// An owner created at minute `created` with one pod in `phase` and the desired template.
fn owner_at(name: &str, created: u64, phase: PodPhase) -> OwnerView {
    OwnerView {
        name: name.into(),
        created: t(created),
        template_hash: Some(HASH.into()),
        deleting: false,
        unregistration_requested: false,
        unregistration_complete: false,
        settled: true,
        unseen_pods: false,
        pod_controller: PodController::None,
        pods: vec![pod(&format!("{name}-pod"), phase)],
    }
}

fn running(name: &str, created: u64) -> OwnerView {
    owner_at(name, created, PodPhase::Running)
}

fn input(desired: u32, owners: Vec<OwnerView>, now_min: u64) -> Input {
    Input {
        desired,
        desired_template_hash: HASH.into(),
        effective_time: None,
        ephemeral: true,
        owners,
        now: t(now_min),
        reflected_completions: BTreeSet::new(),
        completions_heard: BTreeMap::new(),
        absorbed_completions: 0,
        completions_counted: false,
        reflected_before: None,
        release_grace: RELEASE_GRACE,
        failed_runner_backoff: crate::health::FAILED_RUNNER_BACKOFF,
    }
}

/// Owner `name` (with its one pod `<name>-pod`) deleted as finished.
fn deleted_as_finished(name: &str) -> Action {
    Action::Delete {
        owner: name.into(),
        reason: DeleteReason::Completed,
        pods: vec![format!("{name}-pod")],
    }
}

fn retired(plan: &Plan) -> Vec<(String, RetireReason)> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::RequestUnregistration { owner, reason, .. } => Some((owner.clone(), *reason)),
            _ => None,
        })
        .collect()
}

#[test]
fn creates_missing_owners() {
    let plan = plan(&input(3, vec![running("a", 0)], 1));
    assert_eq!(plan.actions, vec![Action::Create { count: 2 }]);
    assert_eq!(plan.wait, None);
}

#[test]
fn owners_created_but_not_yet_seen_count_and_are_not_created_again() {
    for controller in [PodController::None, PodController::Replacing] {
        let unseen =
            |name: &str| OwnerView::created_unseen(name.into(), t(2), HASH.into(), controller);
        let all_there = plan(&input(
            3,
            vec![running("a", 0), unseen("b"), unseen("c")],
            2,
        ));
        assert!(
            all_there.actions.is_empty(),
            "{controller:?}: {all_there:?}"
        );
        assert_eq!(all_there.counts.pending, 2, "{controller:?}");
        // Only what is still missing is created.
        let one_missing = plan(&input(4, vec![running("a", 0), unseen("b")], 2));
        assert_eq!(
            one_missing.actions,
            vec![Action::Create { count: 2 }],
            "{controller:?}"
        );
    }
}

#[test]
fn zero_desired_and_no_owners_does_nothing() {
    assert_eq!(plan(&input(0, vec![], 1)), Plan::default());
}

#[test]
fn pending_pods_count_as_maybe_running() {
    let owners = vec![running("a", 0), owner_at("b", 1, PodPhase::Pending)];
    let plan = plan(&input(2, owners, 2));
    assert!(plan.actions.is_empty(), "{plan:?}");
    assert_eq!(plan.counts.pending, 1);
}

#[test]
fn scale_down_keeps_the_newest_and_retires_older_surplus() {
    let owners = vec![running("old", 0), running("mid", 1), running("new", 2)];
    let plan = plan(&input(1, owners, 3));
    assert_eq!(
        retired(&plan),
        vec![
            ("mid".into(), RetireReason::ScaleDown),
            ("old".into(), RetireReason::ScaleDown)
        ]
    );
    // Retirement is a request, never a deletion: a busy runner must be unregistered first.
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::Delete { .. }))
    );
}

#[test]
fn scale_down_also_retires_owners_without_running_runners() {
    let owners = vec![running("a", 0), owner_at("p", 1, PodPhase::Pending)];
    let plan = plan(&input(1, owners, 2));
    assert_eq!(retired(&plan), vec![("p".into(), RetireReason::ScaleDown)]);
}

#[test]
fn retire_request_names_only_pods_not_yet_annotated() {
    // A StatefulSet-like owner with two pods, one annotated by an earlier, interrupted pass.
    let mut old = owner_at("old", 0, PodPhase::Succeeded);
    old.pods[0].unregistration_requested = true;
    old.pods.push(pod("old-pod2", PodPhase::Pending));
    let plan = plan(&input(1, vec![old, running("new", 1)], 2));
    assert_eq!(
        plan.actions,
        vec![Action::RequestUnregistration {
            owner: "old".into(),
            pods: vec!["old-pod2".into()],
            reason: RetireReason::ScaleDown,
        }]
    );
}

#[test]
fn steady_state_does_nothing() {
    let plan = plan(&input(2, vec![running("a", 0), running("b", 1)], 5));
    assert_eq!(plan.actions, vec![]);
    assert_eq!(plan.counts.running, 2);
}

#[test]
fn an_owner_judged_unregistered_is_deleted_with_only_the_pods_that_judgement_saw_safe() {
    let judged = |pod: Option<fn(&mut PodView)>| {
        let mut a = running("a", 0);
        a.unregistration_requested = true;
        a.unregistration_complete = true;
        match pod {
            Some(set) => set(&mut a.pods[0]),
            None => a.pods.clear(),
        }
        a
    };
    // (case, owner, pods deleted with it)
    let rows: [(&str, OwnerView, Vec<String>); 5] = [
        (
            "its pod unregistered: deleted with it",
            judged(Some(|p| p.unregistration_complete = true)),
            vec!["a-pod".into()],
        ),
        (
            "its pod finished: deleted with it",
            judged(Some(|p| p.phase = PodPhase::Succeeded)),
            vec!["a-pod".into()],
        ),
        (
            "its pod already deleting: no second delete",
            judged(Some(|p| p.deleting = true)),
            vec![],
        ),
        (
            "its pod appeared after the judgement, unmarked: left to the owner's retirement",
            judged(Some(|_| {})),
            vec![],
        ),
        ("no pod seen: none deleted", judged(None), vec![]),
    ];
    for (case, owner, pods) in rows {
        assert_eq!(
            plan(&input(0, vec![owner], 1)).actions,
            vec![Action::Delete {
                owner: "a".into(),
                reason: DeleteReason::Unregistered,
                pods,
            }],
            "{case}"
        );
    }
}

#[test]
fn requested_owner_is_marked_complete_only_when_every_pod_is_safe() {
    let mut waiting = running("a", 0);
    waiting.unregistration_requested = true;
    waiting.pods[0].unregistration_requested = true;
    assert_eq!(plan(&input(0, vec![waiting.clone()], 1)).actions, vec![]);

    let mut done = waiting.clone();
    done.pods[0].unregistration_complete = true;
    assert_eq!(
        plan(&input(0, vec![done], 1)).actions,
        vec![Action::MarkUnregistrationComplete { owner: "a".into() }]
    );

    let mut going = waiting;
    going.pods[0].deleting = true;
    assert_eq!(
        plan(&input(0, vec![going], 1)).actions,
        vec![Action::MarkUnregistrationComplete { owner: "a".into() }]
    );
}

#[test]
fn owners_being_deleted_are_ignored() {
    let mut a = running("a", 0);
    a.deleting = true;
    let plan = plan(&input(1, vec![a], 1));
    assert_eq!(plan.actions, vec![Action::Create { count: 1 }]);
}

#[test]
fn completed_owner_is_deleted() {
    let done = owner_at("done", 0, PodPhase::Succeeded);
    let plan = plan(&input(0, vec![done], 1));
    assert_eq!(
        plan.actions,
        vec![Action::Delete {
            owner: "done".into(),
            reason: DeleteReason::Completed,
            pods: vec!["done-pod".into()],
        }]
    );
}

#[test]
fn runner_container_exit_counts_as_completed_even_with_running_sidecar() {
    let mut a = running("a", 0);
    a.pods[0].runner_stopped = true;
    let plan = plan(&input(0, vec![a], 1));
    assert!(matches!(
        plan.actions[0],
        Action::Delete {
            reason: DeleteReason::Completed,
            ..
        }
    ));
}

/// A StatefulSet pod whose runner container is in `run` (see `crate::runner_container`), as
/// the driver shows it to owner sync.
fn in_run(name: &str, created: u64, run: crate::runner_container::Run) -> OwnerView {
    use crate::runner_container::Run;
    let mut o = running(name, created);
    let p = &mut o.pods[0];
    p.runner_stopped = run.is_finished();
    p.runner_restarted = run == Run::Restarted;
    p.runner_restarting = matches!(run, Run::Restarting { .. });
    p.finished_at = run.finished_at();
    o
}

#[test]
fn a_runner_is_deleted_as_finished_only_when_it_cannot_come_back() {
    use crate::runner_container::Run;
    let done = Some(t(1));
    // (the runner's run, desired) -> (deleted as completed, retired as restarted, created)
    let cases = [
        // Completed: the next run could not be created; deleted, and replaced if wanted.
        (Run::Finished { finished_at: done }, 1, (true, false, 1)),
        (Run::Finished { finished_at: done }, 0, (true, false, 0)),
        // Exited, about to run again with a credential that may register: wait, as for a
        // pending runner (no deletion, no replacement yet).
        (Run::Restarting { finished_at: done }, 1, (false, false, 0)),
        // Desired 0: a runner without a running run is retired by scale-down, unregister-first.
        (Run::Restarting { finished_at: done }, 0, (false, false, 0)),
        // Restarted: running again, maybe busy with a job of its own: retired unregister-first
        // whatever the desired count, and replaced.
        (Run::Restarted, 1, (false, true, 1)),
        (Run::Restarted, 0, (false, true, 0)),
        (Run::Restarted, 2, (false, true, 2)),
        // Busy or idle first run: a live runner, kept.
        (Run::Running, 1, (false, false, 0)),
    ];
    for (run, desired, (deleted, restarted, created)) in cases {
        let plan = plan(&input(desired, vec![in_run("a", 0, run)], 2));
        let case = format!("{run:?} desired={desired}: {plan:?}");
        let completed = plan.actions.iter().any(|a| {
            matches!(
                a,
                Action::Delete {
                    reason: DeleteReason::Completed,
                    ..
                }
            )
        });
        assert_eq!(completed, deleted, "{case}");
        assert_eq!(
            retired(&plan).contains(&("a".into(), RetireReason::Restarted)),
            restarted,
            "{case}"
        );
        let create = plan.actions.iter().find_map(|a| match a {
            Action::Create { count } => Some(*count),
            _ => None,
        });
        assert_eq!(create.unwrap_or(0), created, "{case}");
        // Never deleted outright unless finished for good.
        if !run.is_finished() {
            assert!(
                !plan
                    .actions
                    .iter()
                    .any(|a| matches!(a, Action::Delete { .. })),
                "{case}"
            );
        }
    }
}

#[test]
fn a_retiring_owner_whose_pod_is_not_seen_is_not_marked_complete() {
    // The owner says it has a pod (a StatefulSet's status.replicas) that the pod store does
    // not show yet: that pod may run a job, so "every seen pod is safe" proves nothing.
    let mut unseen = running("a", 0);
    unseen.unregistration_requested = true;
    unseen.pods.clear();
    unseen.unseen_pods = true;
    let plan = plan(&input(0, vec![unseen.clone()], 1));
    assert_eq!(plan.actions, vec![], "{plan:?}");

    // Once the store shows no pod and the owner reports none, it is gone: complete.
    unseen.unseen_pods = false;
    assert_eq!(
        super::plan(&input(0, vec![unseen], 1)).actions,
        vec![Action::MarkUnregistrationComplete { owner: "a".into() }]
    );
}

#[test]
fn a_restarted_runner_of_an_owner_already_retiring_is_left_to_unregistration() {
    let mut a = in_run("a", 0, crate::runner_container::Run::Restarted);
    a.unregistration_requested = true;
    a.pods[0].unregistration_requested = true;
    let plan = plan(&input(1, vec![a], 2));
    assert!(retired(&plan).is_empty(), "{plan:?}");
    assert!(
        !plan.actions.iter().any(|a| matches!(
            a,
            Action::Delete { .. } | Action::MarkUnregistrationComplete { .. }
        )),
        "{plan:?}"
    );
}

/// A Runner that has not created its pod yet: no pods, not settled.
fn unsettled(name: &str, created: u64) -> OwnerView {
    OwnerView {
        settled: false,
        pods: vec![],
        ..running(name, created)
    }
}

#[test]
fn an_owner_yet_to_create_its_pod_counts_as_one_pending_runner() {
    let plan = plan(&input(5, vec![running("a", 0), unsettled("b", 1)], 1));
    assert_eq!(plan.actions, vec![Action::Create { count: 3 }]);
    assert_eq!(plan.wait, None);
    assert_eq!((plan.counts.running, plan.counts.pending), (1, 1));
}

#[test]
fn an_unsettled_owner_holds_back_neither_new_runners_nor_cleanup() {
    // ARC stops the pass at "b"; here the finished "c" goes and demand is met at once.
    let plan = plan(&input(
        3,
        vec![unsettled("b", 1), owner_at("c", 0, PodPhase::Succeeded)],
        1,
    ));
    assert_eq!(
        plan.actions,
        vec![
            Action::Delete {
                owner: "c".into(),
                reason: DeleteReason::Completed,
                pods: vec!["c-pod".into()],
            },
            Action::Create { count: 2 },
        ]
    );
}

#[test]
fn an_unsettled_owner_with_its_pod_already_seen_counts_that_pod() {
    // A StatefulSet whose status lags behind the pod in the cache.
    let mut b = running("b", 1);
    b.settled = false;
    let plan = plan(&input(2, vec![running("a", 0), b], 2));
    assert_eq!(plan.actions, vec![]);
    assert_eq!((plan.counts.running, plan.counts.pending), (2, 0));
}

#[test]
fn an_owner_yet_to_create_its_pod_is_retired_first_on_scale_down() {
    let plan = plan(&input(1, vec![running("a", 0), unsettled("b", 1)], 1));
    assert_eq!(
        retired(&plan),
        vec![("b".to_string(), RetireReason::ScaleDown)]
    );
}

#[test]
fn owner_without_template_hash_is_reported() {
    let mut a = running("a", 0);
    a.template_hash = None;
    let plan = plan(&input(1, vec![a], 1));
    assert_eq!(plan.wait, Some(Wait::OwnerWithoutTemplateHash("a".into())));
}

#[test]
fn growth_is_never_held_back_by_a_stale_effective_time() {
    // Demand was raised at minute 0 and every owner was synced after it; nothing finished.
    // ARC holds every missing runner back for ten minutes here ("a scale-down is probably on
    // its way"); a count above the runners that exist is growth, created at once.
    let mut grown = input(
        40,
        (0..10).map(|i| running(&format!("r{i}"), 2)).collect(),
        5,
    );
    grown.effective_time = Some(t(0));
    assert_eq!(plan(&grown).actions, vec![Action::Create { count: 30 }]);
    assert_eq!(plan(&grown).wait, None);

    // A runner whose owner is already gone is no longer known to have finished: its place is
    // filled like any other missing runner.
    let mut missing = input(2, vec![running("b", 2)], 5);
    missing.effective_time = Some(t(0));
    assert_eq!(plan(&missing).actions, vec![Action::Create { count: 1 }]);
}

#[test]
fn a_stale_effective_time_holds_back_no_more_than_the_finished_runners() {
    // Demand was raised at minute 3, the owners synced after it. b finished 3 s ago and the
    // target may not know yet: b keeps its place, and only b's. The other two wanted runners
    // are growth.
    let now = t(5);
    let b = finished("b", 4, now, Duration::from_secs(3));
    let plan = plan(&autoscaled(4, vec![running("a", 4), b], 5, 3));
    assert_eq!(plan.actions, vec![Action::Create { count: 2 }]);
    assert_eq!(plan.wait, None);
    assert_eq!(
        plan.recheck_at,
        Some(now - Duration::from_secs(3) + RELEASE_GRACE)
    );
}

#[test]
fn a_finished_runner_whose_completion_is_reflected_gives_up_its_place_at_once() {
    // A pool at its maximum of 2 with jobs still queued: b's job completed, the autoscaler
    // accounted for it and still wants 2. b's place goes to a new runner now, not after the
    // grace.
    let now = t(5);
    let b = finished("b", 4, now, Duration::from_secs(1));
    let mut input = autoscaled(2, vec![running("a", 4), b], 5, 3);
    input.reflected_completions = BTreeSet::from(["b-pod".to_owned()]);
    let plan = plan(&input);
    assert_eq!(plan.actions, finished_and_replaced("b", 1));
    assert_eq!(plan.recheck_at, None);
}

#[test]
fn finished_runners_whose_completions_the_count_absorbs_give_up_their_places_at_once() {
    // A pool at its maximum of 3 with jobs waiting beyond it: b and c finished 1 and 2 s ago,
    // their completions not yet heard of.
    let now = t(5);
    let owners = vec![
        running("a", 4),
        finished("b", 4, now, Duration::from_secs(1)),
        finished("c", 4, now, Duration::from_secs(2)),
    ];
    // (case, completions absorbed, actions)
    let rows = [
        ("nothing absorbed: both held for the grace", 0, vec![]),
        (
            "one absorbed: one place goes to a new runner, the other is held",
            1,
            vec![Action::Create { count: 1 }],
        ),
        (
            "more absorbed than finished: both places go to new runners",
            5,
            vec![Action::Create { count: 2 }],
        ),
    ];
    for (case, absorbed, actions) in rows {
        let mut input = autoscaled(3, owners.clone(), 5, 3);
        input.absorbed_completions = absorbed;
        let plan = plan(&input);
        // The finished runners stay until their completions are reflected or the grace is
        // over: the absorption counts their completions until then.
        assert_eq!(plan.actions, actions, "{case}");
        assert_eq!(
            plan.recheck_at,
            Some(now - Duration::from_secs(2) + RELEASE_GRACE),
            "{case}"
        );
    }
}

#[test]
fn a_runner_whose_place_was_given_up_still_counts_against_the_absorption() {
    // A pool of 2 with one job waiting (one completion absorbed): c finished first, and its
    // place went to d, which now runs the waiting job. Then b finished; neither completion has
    // been heard. The one absorbed completion is c's: b's place is held, as d took the last
    // waiting job, and nothing is created (deleting c would forget its completion and replace
    // b for a job that is not there).
    let now = t(5);
    let owners = vec![
        running("d", 5),
        finished("b", 4, now, Duration::from_secs(1)),
        finished("c", 4, now, Duration::from_secs(2)),
    ];
    let mut input = autoscaled(2, owners, 5, 3);
    input.absorbed_completions = 1;
    let plan = plan(&input);
    assert_eq!(plan.actions, vec![]);
    assert_eq!(
        plan.recheck_at,
        Some(now - Duration::from_secs(2) + RELEASE_GRACE)
    );
}

#[test]
fn a_runner_whose_completion_is_reflected_before_its_pod_stops_is_neither_counted_nor_retired() {
    // Three runners; b's job completed and the autoscaler lowered the count to 2 for it before
    // b's pod was seen to stop. b is on its way out by itself: retiring another runner in its
    // stead would kill a useful (maybe busy) runner and replace it once b's pod stops.
    let owners = vec![running("a", 2), running("b", 3), running("c", 4)];
    let rows = [
        ("ephemeral, b's completion reflected", true, true, vec![]),
        (
            "ephemeral, nothing reflected: the oldest surplus retires",
            true,
            false,
            vec![("a".to_owned(), RetireReason::ScaleDown)],
        ),
        (
            "static: a finished job does not end the runner",
            false,
            true,
            vec![("a".to_owned(), RetireReason::ScaleDown)],
        ),
    ];
    for (case, ephemeral, reflected, retires) in rows {
        let mut input = autoscaled(2, owners.clone(), 5, 3);
        input.ephemeral = ephemeral;
        if reflected {
            input.reflected_completions = BTreeSet::from(["b-pod".to_owned()]);
        }
        let plan = plan(&input);
        assert_eq!(retired(&plan), retires, "{case}");
        assert!(
            !plan
                .actions
                .iter()
                .any(|a| matches!(a, Action::Create { .. })),
            "{case}: {plan:?}"
        );
        if reflected && ephemeral {
            assert_eq!(plan.counts.running, 2, "{case}: b no longer counts");
        }
    }
    // Once b's pod stops, it goes as finished, and nothing else moves.
    let mut input = autoscaled(
        2,
        vec![
            running("a", 2),
            finished("b", 3, t(5), Duration::from_secs(1)),
            running("c", 4),
        ],
        5,
        3,
    );
    input.reflected_completions = BTreeSet::from(["b-pod".to_owned()]);
    assert_eq!(plan(&input).actions, vec![deleted_as_finished("b")]);
}

#[test]
fn a_runner_github_said_is_done_is_finished_before_its_pod_stops() {
    // Three runners at maxReplicas 3; GitHub said b's job is done two seconds ago, before the
    // kubelet reported b's runner exiting. The count (3) has not heard of it yet.
    let now = t(5);
    let heard = now - Duration::from_secs(2);
    let owners = || vec![running("a", 2), running("b", 3), running("c", 4)];
    let secs = Duration::from_secs;
    let (before, after, long_ago) = (
        heard - secs(1),
        heard + secs(1),
        now - RELEASE_GRACE - secs(1),
    );
    // Each row: whether runners are ephemeral, completions the count absorbs, the set's
    // effectiveTime (the latest demand), when b was heard done, and the plan.
    type Row = (
        &'static str,
        bool,
        u32,
        Option<SystemTime>,
        SystemTime,
        Vec<Action>,
    );
    let rows: [Row; 6] = [
        (
            "jobs wait beyond the maximum (the count absorbs b's completion): b's place is \
             filled at once, and b is not deleted while its pod runs",
            true,
            1,
            Some(before),
            heard,
            vec![Action::Create { count: 1 }],
        ),
        (
            "nothing says the count absorbs it: b holds its place, as a finished runner would",
            true,
            0,
            Some(before),
            heard,
            vec![],
        ),
        (
            "demand arrived after b was heard done: its place is filled at once",
            true,
            0,
            Some(after),
            heard,
            vec![Action::Create { count: 1 }],
        ),
        (
            "no autoscaler: nothing holds the place of a finished runner",
            true,
            0,
            None,
            heard,
            vec![Action::Create { count: 1 }],
        ),
        (
            "static runners take the next job: b still counts",
            false,
            1,
            Some(before),
            heard,
            vec![],
        ),
        (
            "heard long ago (beyond the release grace): b no longer holds its place",
            true,
            0,
            Some(long_ago - secs(1)),
            long_ago,
            vec![Action::Create { count: 1 }],
        ),
    ];
    for (case, ephemeral, absorbed, effective, at, actions) in rows {
        let mut input = input(3, owners(), 5);
        input.effective_time = effective;
        input.ephemeral = ephemeral;
        input.absorbed_completions = absorbed;
        input.completions_heard = BTreeMap::from([("b-pod".to_owned(), at)]);
        let plan = plan(&input);
        assert_eq!(plan.actions, actions, "{case}");
        if ephemeral {
            assert_eq!(plan.counts.running, 2, "{case}: b no longer counts");
        }
    }
    // Counted by the queued-runs metric: an observation made a second or more after b was
    // heard done accounts for it, so b holds nothing; an earlier one does not.
    for (observed, actions) in [
        (
            heard + Duration::from_secs(1),
            vec![Action::Create { count: 1 }],
        ),
        (heard + Duration::from_millis(500), vec![]),
    ] {
        let mut input = input(3, owners(), 5);
        input.completions_counted = true;
        input.reflected_before = Some(observed);
        input.completions_heard = BTreeMap::from([("b-pod".to_owned(), heard)]);
        assert_eq!(plan(&input).actions, actions, "observed at {observed:?}");
    }
    // Another runner's completion changes nothing here.
    let mut input = autoscaled(3, owners(), 5, 4);
    input.absorbed_completions = 1;
    input.completions_heard = BTreeMap::from([("elsewhere-pod".to_owned(), heard)]);
    assert_eq!(plan(&input).actions, vec![]);
    // Once b's pod is seen to stop it goes as finished, its place already taken by the new one.
    let mut input = autoscaled(
        3,
        vec![
            running("a", 2),
            finished("b", 3, now, Duration::from_secs(1)),
            running("c", 4),
            running("d", 5),
        ],
        5,
        4,
    );
    input.absorbed_completions = 1;
    input.completions_heard = BTreeMap::from([("b-pod".to_owned(), heard)]);
    assert_eq!(plan(&input).actions, vec![]);
    input.absorbed_completions = 0;
    assert_eq!(plan(&input).actions, vec![deleted_as_finished("b")]);
}

#[test]
fn another_runners_reflected_completion_releases_no_place() {
    let now = t(5);
    let b = finished("b", 4, now, Duration::from_secs(1));
    let mut input = autoscaled(2, vec![running("a", 4), b], 5, 4);
    input.reflected_completions = BTreeSet::from(["elsewhere-pod".to_owned()]);
    let plan = plan(&input);
    assert_eq!(plan.actions, vec![]);
    assert_eq!(
        plan.recheck_at,
        Some(now - Duration::from_secs(1) + RELEASE_GRACE)
    );
}

#[test]
fn static_runners_are_never_held_back_by_effective_time() {
    let mut input = input(2, vec![running("b", 2)], 5);
    input.effective_time = Some(t(0));
    input.ephemeral = false;
    assert_eq!(plan(&input).actions, vec![Action::Create { count: 1 }]);
}

/// An owner created at minute `created` whose runner's health is `health`, in `phase`.
fn troubled(name: &str, created: u64, phase: PodPhase, health: Health) -> OwnerView {
    let mut owner = owner_at(name, created, phase);
    owner.pods[0].health = health;
    owner
}

fn pull_failing(name: &str, created: u64) -> OwnerView {
    let health = Health::Stuck(Stuck::ImagePull("ImagePullBackOff".into()));
    troubled(name, created, PodPhase::Pending, health)
}

#[test]
fn an_unhealthy_runner_is_replaced_at_once_and_does_not_count() {
    let never_registered = Health::Stuck(Stuck::NeverRegistered);
    let plan = plan(&input(
        1,
        vec![troubled("stuck", 0, PodPhase::Running, never_registered)],
        11,
    ));
    assert_eq!(plan.counts.unhealthy, 1);
    assert_eq!(plan.counts.running, 0);
    assert_eq!(plan.actions[0], Action::Create { count: 1 });
    assert_eq!(
        retired(&plan),
        vec![("stuck".into(), RetireReason::Unhealthy("NeverRegistered"))]
    );
    assert_eq!(plan.paused, None, "trouble of its own pod pauses nothing");
    assert_eq!(plan.unhealthy.len(), 1);
}

#[test]
fn each_kind_of_trouble_is_replaced_or_paused_as_it_should() {
    use crate::health::{Dead, Rejection};
    let rejected = Health::Rejected(Rejection {
        image: "ghcr.io/actions/actions-runner:2.311.0".into(),
        version: "2.311.0".into(),
        minimum: "2.329.0".into(),
    });
    #[rustfmt::skip]
    let cases: Vec<(&str, Health, bool)> = vec![
        // (what, health, comes with the template)
        ("never registered",  Health::Stuck(Stuck::NeverRegistered), false),
        ("unschedulable",     Health::Stuck(Stuck::Unschedulable("0/3 nodes".into())), true),
        ("never started",     Health::Stuck(Stuck::NotStarted), false),
        ("node NotReady",     Health::Dead(Dead::NodeNotReady), false),
        ("offline on GitHub", Health::Dead(Dead::Offline), false),
        ("image pull",        Health::Stuck(Stuck::ImagePull("ErrImagePull".into())), true),
        ("container config",  Health::Stuck(Stuck::Config("CreateContainerConfigError".into())), true),
        ("crash loop",        Health::Dead(Dead::CrashLoop(4)), true),
        ("OOM-killed",        Health::Dead(crate::health::Dead::OomKilled), true),
        ("version rejected",  rejected, true),
    ];
    for (what, health, with_template) in cases {
        let reason = health.reason();
        // Alone: the template has not shown that it works.
        let alone = plan(&input(
            2,
            vec![troubled("sick", 0, PodPhase::Running, health.clone())],
            20,
        ));
        // Next to a working runner of the same template.
        let beside = plan(&input(
            2,
            vec![
                running("well", 0),
                troubled("sick", 1, PodPhase::Running, health.clone()),
            ],
            20,
        ));
        assert_eq!(beside.paused, None, "{what}: a working sibling");
        assert_eq!(
            retired(&beside),
            vec![("sick".into(), RetireReason::Unhealthy(reason))],
            "{what}: replaced beside a working runner"
        );
        assert_eq!(beside.actions[0], Action::Create { count: 1 }, "{what}");
        if with_template {
            assert_eq!(
                alone.paused,
                Some(("sick".into(), health.clone())),
                "{what}: alone it pauses the set"
            );
            assert_eq!(alone.actions, vec![], "{what}: kept, nothing created");
            assert_eq!(alone.counts.pending, 1, "{what}: holds its place");
        } else {
            assert_eq!(alone.paused, None, "{what}");
            assert_eq!(
                retired(&alone),
                vec![("sick".into(), RetireReason::Unhealthy(reason))],
                "{what}: replaced"
            );
            assert_eq!(alone.actions[0], Action::Create { count: 2 }, "{what}");
        }
        assert_eq!(alone.unhealthy, vec![("sick".into(), health)], "{what}");
    }
}

#[test]
fn a_retiring_unhealthy_runner_is_still_reported_until_it_is_gone() {
    let mut retiring = troubled(
        "sick",
        0,
        PodPhase::Pending,
        Health::Stuck(Stuck::NotStarted),
    );
    retiring.unregistration_requested = true;
    let plan = plan(&input(1, vec![running("well", 1), retiring], 20));
    assert_eq!(
        plan.unhealthy,
        vec![("sick".into(), Health::Stuck(Stuck::NotStarted))]
    );
    assert_eq!(plan.counts.unhealthy, 0, "it no longer counts for scaling");
    assert_eq!(plan.actions, vec![]);
}

#[test]
fn a_template_that_cannot_start_creates_nothing_more_whatever_is_desired() {
    let plan = plan(&input(
        10,
        vec![
            pull_failing("a", 0),
            pull_failing("b", 1),
            owner_at("c", 15, PodPhase::Pending),
        ],
        20,
    ));
    assert_eq!(plan.actions, vec![], "no doomed pods, none retired");
    assert_eq!(plan.paused.as_ref().map(|(o, _)| o.as_str()), Some("a"));
    assert_eq!(plan.counts.pending, 3);
}

#[test]
fn a_changed_template_ends_the_pause_and_retires_the_stuck_runners_at_once() {
    let mut old = pull_failing("old", 0);
    old.template_hash = Some("h0".into());
    let plan = plan(&input(1, vec![old], 20));
    assert_eq!(plan.paused, None);
    assert_eq!(plan.actions[0], Action::Create { count: 1 });
    assert_eq!(
        retired(&plan),
        vec![("old".into(), RetireReason::Outdated)],
        "it holds no job"
    );
}

#[test]
fn a_scale_down_retires_paused_runners_first() {
    let plan = plan(&input(0, vec![pull_failing("a", 0)], 20));
    assert_eq!(retired(&plan), vec![("a".into(), RetireReason::ScaleDown)]);
}

#[test]
fn unregistered_runner_within_the_window_counts_as_running() {
    let young = troubled("young", 0, PodPhase::Running, Health::Starting);
    let plan = plan(&input(1, vec![young], 9));
    assert_eq!(plan.actions, vec![]);
    assert_eq!(plan.counts.running, 1);
}

#[test]
fn rollout_surges_then_retires_outdated_owners() {
    let mut old = running("old", 0);
    old.template_hash = Some("h0".into());
    // New template, nothing running yet: create, keep the busy-capable old owner.
    let plan1 = plan(&input(1, vec![old.clone()], 1));
    assert_eq!(plan1.actions, vec![Action::Create { count: 1 }]);

    // New owner runs: now the outdated one retires through unregistration.
    let plan2 = plan(&input(1, vec![old, running("new", 1)], 2));
    assert_eq!(
        retired(&plan2),
        vec![("old".into(), RetireReason::Outdated)]
    );
}

#[test]
fn outdated_owner_without_running_runner_retires_at_once() {
    let mut old = owner_at("old", 0, PodPhase::Pending);
    old.template_hash = Some("h0".into());
    let plan = plan(&input(1, vec![old], 1));
    assert_eq!(plan.actions[0], Action::Create { count: 1 });
    assert_eq!(retired(&plan), vec![("old".into(), RetireReason::Outdated)]);
}

#[test]
fn more_running_than_retained_owners_explain_waits() {
    // One owner with two running pods cannot be split to reach desired 1: wait, don't guess.
    let mut two = running("two", 0);
    two.pods.push(pod("two-pod2", PodPhase::Running));
    let plan = plan(&input(1, vec![two], 1));
    assert_eq!(plan.actions, vec![]);
    assert_eq!(plan.wait, Some(Wait::Settling));
}

#[test]
fn the_decision_is_deterministic() {
    let owners = vec![
        running("a", 0),
        running("b", 1),
        owner_at("c", 2, PodPhase::Pending),
    ];
    let i = input(1, owners, 3);
    assert_eq!(plan(&i), plan(&i));
}

/// An owner created at minute `created` whose ephemeral runner finished `ago` before `now`.
fn finished(name: &str, created: u64, now: SystemTime, ago: Duration) -> OwnerView {
    let mut o = owner_at(name, created, PodPhase::Succeeded);
    o.pods[0].finished_at = Some(now - ago);
    o
}

/// An autoscaled set: the autoscaler raised demand at minute `effective`.
fn autoscaled(desired: u32, owners: Vec<OwnerView>, now_min: u64, effective: u64) -> Input {
    Input {
        effective_time: Some(t(effective)),
        ..input(desired, owners, now_min)
    }
}

#[test]
fn a_just_finished_runner_of_an_autoscaled_set_keeps_its_place_until_demand_is_released() {
    // b's job is done; the autoscaler has not heard yet and still wants 2 (for demand from
    // minute 4, before b finished).
    let now = t(5);
    let b = finished("b", 4, now, Duration::from_secs(3));
    let plan = plan(&autoscaled(2, vec![running("a", 4), b], 5, 4));
    assert_eq!(plan.actions, vec![]);
    assert_eq!(
        plan.recheck_at,
        Some(now - Duration::from_secs(3) + RELEASE_GRACE)
    );

    // The completed webhook lowered replicas: the place is released, nothing is created.
    let b = finished("b", 4, now, Duration::from_secs(4));
    let plan = super::plan(&autoscaled(1, vec![running("a", 4), b], 5, 4));
    assert_eq!(
        plan.actions,
        vec![Action::Delete {
            owner: "b".into(),
            reason: DeleteReason::Completed,
            pods: vec!["b-pod".into()],
        }]
    );
    assert_eq!(plan.recheck_at, None);
}

#[test]
fn new_demand_beside_a_held_runner_still_gets_its_runner() {
    let now = t(5);
    let b = finished("b", 4, now, Duration::from_secs(1));
    let plan = plan(&autoscaled(3, vec![running("a", 4), b], 5, 4));
    assert_eq!(plan.actions, vec![Action::Create { count: 1 }]);
}

#[test]
fn demand_that_arrived_after_a_runner_finished_is_not_held_up_by_it() {
    // b finished 3 s ago; a job was queued since (effectiveTime = now). Which of the 2 wanted
    // is b's stale reservation is unknown, so b goes and both are created: a surplus runner
    // takes the next job, while a held place would make the new job wait out the grace.
    let now = t(5);
    let b = finished("b", 4, now, Duration::from_secs(3));
    let plan = plan(&autoscaled(3, vec![running("a", 4), b], 5, 5));
    assert_eq!(plan.actions, finished_and_replaced("b", 2));
    assert_eq!(plan.recheck_at, None);
}

/// The plan that deletes finished owner `owner` and creates `count` owners.
fn finished_and_replaced(owner: &str, count: u32) -> Vec<Action> {
    vec![
        Action::Delete {
            owner: owner.into(),
            reason: DeleteReason::Completed,
            pods: vec![format!("{owner}-pod")],
        },
        Action::Create { count },
    ]
}

#[test]
fn a_finished_runner_is_replaced_once_the_grace_is_over() {
    // No release came (a dropped delivery): after the grace it is replaced.
    let now = t(5);
    let b = finished("b", 4, now, RELEASE_GRACE + Duration::from_secs(1));
    let plan = plan(&autoscaled(2, vec![running("a", 4), b], 5, 4));
    assert_eq!(plan.actions, finished_and_replaced("b", 1));
}

#[test]
fn fixed_size_and_outdated_sets_replace_finished_runners_at_once() {
    let now = t(5);
    // Without an effectiveTime nobody lowers replicas when a job ends: replace now.
    let b = finished("b", 4, now, Duration::from_secs(1));
    let plan = plan(&input(2, vec![running("a", 4), b.clone()], 5));
    assert!(plan.actions.contains(&Action::Create { count: 1 }));
    assert_eq!(plan.recheck_at, None);

    // A finished runner of an outdated template holds no place.
    let mut old = b;
    old.template_hash = Some("old".into());
    let plan = super::plan(&autoscaled(2, vec![running("a", 4), old], 5, 5));
    assert!(plan.actions.contains(&Action::Create { count: 1 }));
}

/// `owner` as a StatefulSet whose controller is in state `controller`.
fn stateful(mut owner: OwnerView, controller: PodController) -> OwnerView {
    owner.pod_controller = controller;
    owner
}

#[test]
fn a_statefulset_is_deleted_only_once_its_controller_observed_it_wants_no_pod() {
    let mut unregistered = running("u", 1);
    unregistered.unregistration_requested = true;
    unregistered.unregistration_complete = true;
    let finished = owner_at("f", 1, PodPhase::Succeeded);
    // (case, owner, the action that moves it towards deletion)
    let rows = [
        (
            "unregistered, still wanting its pod: scaled to zero first",
            stateful(unregistered.clone(), PodController::Replacing),
            Some(Action::StopReplacingPods {
                owner: "u".into(),
                reason: DeleteReason::Unregistered,
            }),
        ),
        (
            "unregistered, scaled to zero, not yet observed: wait",
            stateful(unregistered.clone(), PodController::Stopping),
            None,
        ),
        (
            "unregistered, observed at zero: deleted",
            stateful(unregistered.clone(), PodController::Stopped),
            Some(Action::Delete {
                owner: "u".into(),
                reason: DeleteReason::Unregistered,
                pods: vec![],
            }),
        ),
        (
            "a Runner: deleted at once",
            unregistered,
            Some(Action::Delete {
                owner: "u".into(),
                reason: DeleteReason::Unregistered,
                pods: vec![],
            }),
        ),
        (
            "finished, still wanting its pod: scaled to zero first",
            stateful(finished, PodController::Replacing),
            Some(Action::StopReplacingPods {
                owner: "f".into(),
                reason: DeleteReason::Completed,
            }),
        ),
    ];
    for (case, owner, expected) in rows {
        let plan = plan(&input(0, vec![owner], 2));
        assert_eq!(plan.actions.first(), expected.as_ref(), "{case}");
        assert!(plan.actions.len() <= 1, "{case}: {:?}", plan.actions);
    }
}

#[test]
fn a_finished_statefulset_being_stopped_no_longer_holds_a_place() {
    // Its place is free while its controller catches up: the replacement is a new owner.
    let finished = stateful(
        owner_at("f", 1, PodPhase::Succeeded),
        PodController::Replacing,
    );
    let plan = plan(&input(1, vec![finished], 2));
    assert_eq!(
        plan.actions,
        vec![
            Action::StopReplacingPods {
                owner: "f".into(),
                reason: DeleteReason::Completed,
            },
            Action::Create { count: 1 },
        ]
    );
}

#[test]
fn a_stateful_sets_pod_controller_follows_its_spec_status_and_namespace() {
    let cases = [
        // (replicas, generation, observed, namespace terminating) -> controller
        ((Some(1), Some(3), Some(3), false), PodController::Replacing),
        ((None, Some(3), Some(3), false), PodController::Replacing),
        ((Some(0), Some(4), Some(3), false), PodController::Stopping),
        ((Some(0), Some(4), None, false), PodController::Stopping),
        ((Some(0), None, Some(4), false), PodController::Stopping),
        ((Some(0), Some(4), Some(4), false), PodController::Stopped),
        ((Some(0), Some(4), Some(5), false), PodController::Stopped),
        // Nothing is created in a terminating namespace, whatever the spec says.
        ((Some(1), Some(3), Some(3), true), PodController::Stopped),
        ((Some(0), Some(4), Some(3), true), PodController::Stopped),
    ];
    for ((replicas, generation, observed, terminating), want) in cases {
        assert_eq!(
            PodController::of_stateful_set(replicas, generation, observed, terminating),
            want,
            "replicas {replicas:?}, generation {generation:?}, observed {observed:?}, \
             namespace terminating {terminating}"
        );
    }
}

/// An owner whose runner ended in `health` (a failure) `ago` before `now`, its pod kept
/// Running by a sidecar.
fn failed(name: &str, created: u64, now: SystemTime, ago: Duration, health: Health) -> OwnerView {
    let mut owner = troubled(name, created, PodPhase::Running, health);
    owner.pods[0].runner_stopped = true;
    owner.pods[0].finished_at = Some(now - ago);
    owner
}

fn exited_1() -> Health {
    Health::Dead(crate::health::Dead::Failed(1))
}

fn deleted(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Delete { owner, .. } => Some(owner.clone()),
            _ => None,
        })
        .collect()
}

fn created(plan: &Plan) -> u32 {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Create { count } => Some(*count),
            _ => None,
        })
        .sum()
}

/// A runner GitHub lists online: proof that its template works.
fn online(name: &str, created: u64) -> OwnerView {
    let mut owner = running(name, created);
    owner.pods[0].online_on_github = true;
    owner
}

#[test]
fn failed_runners_of_a_template_that_does_not_work_are_retried_one_at_a_time_after_a_back_off() {
    let now = t(5);
    let secs = Duration::from_secs;
    let backoff = crate::health::FAILED_RUNNER_BACKOFF;
    let at = |now: SystemTime, owners: Vec<OwnerView>| Input {
        now,
        ..input(2, owners, 0)
    };
    // Both runners failed at start, the latest 4 s ago: both keep their places, nothing is
    // created, and the set says why and when it looks again.
    let owners = vec![
        failed("a", 0, now, secs(6), exited_1()),
        failed("b", 1, now, secs(4), exited_1()),
    ];
    let waiting = plan(&at(now, owners.clone()));
    assert!(waiting.actions.is_empty(), "{waiting:?}");
    assert_eq!(waiting.paused, Some(("a".into(), exited_1())));
    assert_eq!(waiting.retries_every, Some(backoff));
    assert_eq!(waiting.recheck_at, Some(now - secs(4) + backoff));
    assert_eq!(
        waiting.unhealthy,
        vec![("a".into(), exited_1()), ("b".into(), exited_1())]
    );
    // The back-off over: the runner that failed first gives its place to one fresh runner.
    let later = now + secs(7);
    let retry = plan(&at(later, owners.clone()));
    assert_eq!(deleted(&retry), vec!["a".to_owned()], "{retry:?}");
    assert_eq!(created(&retry), 1, "{retry:?}");
    // While that one is on its way, nothing else is tried, however long it takes.
    let trying = vec![owners[1].clone(), owner_at("c", 2, PodPhase::Pending)];
    let waiting = plan(&at(later + secs(60), trying));
    assert!(waiting.actions.is_empty(), "{waiting:?}");
    assert!(waiting.paused.is_some());
    // Nor while a runner created within the back-off runs without GitHub listing it online: a
    // runner that fails at start runs for a moment. One that has run for longer does not
    // hold the trial up: GitHub may be slow to list it.
    let just_created = OwnerView {
        created: later - secs(2),
        ..running("c", 0)
    };
    let waiting = plan(&at(later, vec![owners[1].clone(), just_created.clone()]));
    assert!(waiting.actions.is_empty(), "{waiting:?}");
    // ... and looks again once the back-off has passed for it too.
    assert_eq!(waiting.recheck_at, Some(later - secs(2) + backoff));
    let older = OwnerView {
        created: later - backoff,
        ..just_created
    };
    let retry = plan(&at(later, vec![owners[1].clone(), older]));
    assert_eq!(deleted(&retry), vec!["b".to_owned()], "{retry:?}");
    assert_eq!(created(&retry), 1, "{retry:?}");
    // A runner back after a failed run does not end the trial either (below).
    let mut back = running("c", 2);
    back.pods[0].runner_restarted = true;
    back.pods[0].previous_run_failed = true;
    let waiting = plan(&at(later + secs(60), vec![owners[1].clone(), back]));
    assert!(waiting.actions.is_empty(), "{waiting:?}");
    // Fewer places wanted than failed runners hold: the surplus goes at once, newest kept.
    let fewer = plan(&Input {
        desired: 1,
        ..at(now, owners.clone())
    });
    assert_eq!(deleted(&fewer), vec!["a".to_owned()], "{fewer:?}");
    assert_eq!(created(&fewer), 0);
}

#[test]
fn failed_runners_are_replaced_at_once_while_a_runner_of_their_template_works() {
    let now = t(5);
    let secs = Duration::from_secs;
    // An OOM kill and a failing exit beside a runner GitHub lists online: the template works,
    // so these were the pods' own trouble.
    let oom = Health::Dead(crate::health::Dead::OomKilled);
    let owners = vec![
        failed("killed", 0, now, secs(1), oom.clone()),
        failed("crashed", 1, now, secs(1), exited_1()),
        online("works", 2),
    ];
    let replaced = plan(&Input {
        now,
        ..input(3, owners, 0)
    });
    assert_eq!(
        deleted(&replaced),
        vec!["killed".to_owned(), "crashed".into()]
    );
    assert_eq!(created(&replaced), 2);
    assert_eq!(replaced.paused, None);
    // Told, though they go as finished: a failure is worth knowing about.
    assert_eq!(
        replaced.unhealthy,
        vec![("killed".into(), oom), ("crashed".into(), exited_1())]
    );
    // A runner running but not yet seen online proves nothing: its pod may be about to fail
    // the same way.
    let unproven = vec![
        failed("crashed", 1, now, secs(1), exited_1()),
        running("starting", 2),
    ];
    let held = plan(&Input {
        now,
        ..input(2, unproven, 0)
    });
    assert!(deleted(&held).is_empty(), "{held:?}");
    // A runner of an outdated template that failed goes at once: the new template may work.
    let mut outdated = failed("old", 0, now, secs(1), exited_1());
    outdated.template_hash = Some("h0".into());
    let gone = plan(&Input {
        now,
        ..input(1, vec![outdated], 0)
    });
    assert_eq!(deleted(&gone), vec!["old".to_owned()]);
    assert_eq!(created(&gone), 1);
    // A runner that finished its job normally is neither held nor reported.
    let mut done = running("done", 0);
    done.pods[0].runner_stopped = true;
    let replaced = plan(&input(1, vec![done], 1));
    assert!(replaced.unhealthy.is_empty());
    assert_eq!(created(&replaced), 1);
}

#[test]
fn a_runner_back_after_a_failed_run_counts_as_a_live_runner() {
    // In a pod that restarts its runner, the run after a failed one is a retry, not a runner
    // that worked and came back for a second job: it counts as running and is not retired
    // for having restarted, so a crash at start does not churn pods.
    let mut back = running("a", 0);
    back.pods[0].runner_restarted = true;
    back.pods[0].previous_run_failed = true;
    let plan = plan(&input(1, vec![back], 1));
    assert!(plan.actions.is_empty(), "{plan:?}");
    assert_eq!(plan.counts.running, 1);
}

/// A set whose autoscaler counts its jobs (the queued-runs metric), with no `effectiveTime`,
/// last observed GitHub at `observed`.
fn counted(desired: u32, owners: Vec<OwnerView>, now: SystemTime, observed: SystemTime) -> Input {
    Input {
        completions_counted: true,
        reflected_before: Some(observed),
        now,
        ..input(desired, owners, 0)
    }
}

#[test]
fn a_set_whose_jobs_are_counted_holds_finished_runners_until_an_observation_accounts_for_them() {
    let now = t(5);
    let secs = Duration::from_secs;
    // b finished 3 s ago, c 1 s ago; a still runs. The count asks for 3.
    let owners = || {
        vec![
            running("a", 4),
            finished("b", 4, now, secs(3)),
            finished("c", 4, now, secs(1)),
        ]
    };
    // (case, observed, completions absorbed, actions, observe again at)
    type Row = (
        &'static str,
        SystemTime,
        u32,
        Vec<Action>,
        Option<SystemTime>,
    );
    let rows: Vec<Row> = vec![
        (
            "observed before both finished, nothing absorbed: both held, observe a second after c",
            now - secs(10),
            0,
            vec![],
            Some(now),
        ),
        (
            "two jobs waited beyond the pool at the observation: both places go at once",
            now - secs(10),
            2,
            vec![Action::Create { count: 2 }],
            Some(now),
        ),
        (
            "five waited: plenty left, nothing to ask yet",
            now - secs(10),
            5,
            vec![Action::Create { count: 2 }],
            None,
        ),
        (
            "observed 2 s after b finished: the count (3) knows b is done and still wants its place; c held",
            now - secs(1),
            0,
            finished_and_replaced("b", 1),
            Some(now),
        ),
    ];
    for (case, observed, absorbed, actions, observe_at) in rows {
        let mut input = counted(3, owners(), now, observed);
        input.absorbed_completions = absorbed;
        let plan = plan(&input);
        assert_eq!(plan.actions, actions, "{case}");
        assert_eq!(plan.observe_at, observe_at, "{case}");
    }

    // Observed a second after both finished: both are accounted for; the count (3) still
    // wants them, so both places go to new runners.
    let plan = plan(&counted(3, owners(), now, now + secs(1)));
    assert_eq!(
        plan.actions,
        vec![
            Action::Delete {
                owner: "b".into(),
                reason: DeleteReason::Completed,
                pods: vec!["b-pod".into()],
            },
            Action::Delete {
                owner: "c".into(),
                reason: DeleteReason::Completed,
                pods: vec!["c-pod".into()],
            },
            Action::Create { count: 2 },
        ]
    );
    assert_eq!(plan.observe_at, None);

    // Without a count of jobs nothing is held (no effectiveTime), and nothing is asked.
    let mut input = counted(3, owners(), now, now - secs(10));
    input.completions_counted = false;
    let plan = super::plan(&input);
    assert!(plan.actions.contains(&Action::Create { count: 2 }));
    assert_eq!(plan.observe_at, None);
}
