//! Properties of owner sync over random situations: the invariants the whole design rests on.

use std::time::{Duration, SystemTime};

use proptest::prelude::*;

use super::*;

fn t(mins: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000 + mins * 60)
}

fn phase() -> impl Strategy<Value = PodPhase> {
    prop_oneof![
        Just(PodPhase::Pending),
        Just(PodPhase::Running),
        Just(PodPhase::Running),
        Just(PodPhase::Succeeded),
        Just(PodPhase::Failed),
    ]
}

fn health() -> impl Strategy<Value = Health> {
    use crate::health::{Dead, Stuck};
    prop_oneof![
        6 => Just(Health::Healthy),
        2 => Just(Health::Starting),
        1 => Just(Health::Stuck(Stuck::NeverRegistered)),
        1 => Just(Health::Stuck(Stuck::ImagePull("ErrImagePull".into()))),
        1 => Just(Health::Dead(Dead::CrashLoop(3))),
        1 => Just(Health::Dead(Dead::NodeNotReady)),
        1 => Just(Health::Dead(Dead::OomKilled)),
        1 => Just(Health::Dead(Dead::Failed(1))),
    ]
}

prop_compose! {
    fn pod_view()(
        phase in phase(),
        runner_stopped in proptest::bool::weighted(0.1),
        // What the runner container's judgement allows next to it (`runner_container::Run`):
        // a runner is finished, back after an exit, about to come back, or none of these.
        back in 0u8..10,
        deleting in proptest::bool::weighted(0.1),
        health in health(),
        requested in proptest::bool::weighted(0.2),
        complete in proptest::bool::weighted(0.1),
        finished in proptest::option::of(0u64..120),
        previous_run_failed in proptest::bool::weighted(0.2),
        online_on_github in proptest::bool::weighted(0.5),
    ) -> PodView {
        PodView {
            name: String::new(),
            phase,
            runner_stopped,
            runner_restarted: !runner_stopped && back == 0,
            runner_restarting: !runner_stopped && back == 1,
            deleting,
            health,
            unregistration_requested: requested || complete,
            unregistration_complete: complete,
            // Seconds after minute 30: now and then within the release grace of `now`.
            finished_at: finished.map(|s| t(30) + std::time::Duration::from_secs(s)),
            previous_run_failed,
            online_on_github,
        }
    }
}

prop_compose! {
    fn owner_view(i: usize)(
        created in 0u64..30,
        outdated in proptest::bool::weighted(0.2),
        deleting in proptest::bool::weighted(0.05),
        requested in proptest::bool::weighted(0.15),
        complete in proptest::bool::weighted(0.05),
        settled in proptest::bool::weighted(0.9),
        unseen_pods in proptest::bool::weighted(0.1),
        pods in proptest::collection::vec(pod_view(), 0..3),
        pod_controller in proptest::sample::select(vec![
            PodController::None,
            PodController::Replacing,
            PodController::Stopping,
            PodController::Stopped,
        ]),
    ) -> OwnerView {
        OwnerView {
            name: format!("owner-{i}"),
            created: t(created),
            template_hash: Some(if outdated { "old".into() } else { "new".into() }),
            deleting,
            unregistration_requested: requested || complete,
            unregistration_complete: complete,
            settled,
            unseen_pods,
            pod_controller,
            // Unique names: an action names the pods it touches.
            pods: pods
                .into_iter()
                .enumerate()
                .map(|(j, pod)| PodView { name: format!("pod-{i}-{j}"), ..pod })
                .collect(),
        }
    }
}

fn owners() -> impl Strategy<Value = Vec<OwnerView>> {
    (0usize..8).prop_flat_map(|n| (0..n).map(owner_view).collect::<Vec<_>>())
}

prop_compose! {
    fn situation()(
        desired in 0u32..6,
        owners in owners(),
        effective in proptest::option::of(0u64..40),
        ephemeral in any::<bool>(),
        now in 30u64..60,
        reflected in any::<bool>(),
        absorbed_completions in 0u32..3,
        completions_counted in any::<bool>(),
        reflected_before in proptest::option::of(0u64..60),
        heard in proptest::option::of(0u64..60),
    ) -> Input {
        // The autoscaler may have accounted for every runner's job, even one still running
        // (its completion delivered before the pod's status says so): that must not matter.
        let reflected_completions = if reflected {
            owners.iter().flat_map(|o| o.pods.iter().map(|p| p.name.clone())).collect()
        } else {
            Default::default()
        };
        // GitHub may have said any runner is done, even one whose pod has not started or
        // has stopped long ago, at any time: that must not matter either.
        let completions_heard = heard
            .map(|at| {
                owners
                    .iter()
                    .flat_map(|o| o.pods.iter().map(move |p| (p.name.clone(), t(at))))
                    .collect()
            })
            .unwrap_or_default();
        Input {
            desired,
            desired_template_hash: "new".into(),
            effective_time: effective.map(t),
            ephemeral,
            owners,
            now: t(now),
            reflected_completions,
            completions_heard,
            absorbed_completions,
            completions_counted,
            reflected_before: reflected_before.map(t),
            release_grace: RELEASE_GRACE,
            failed_runner_backoff: crate::health::FAILED_RUNNER_BACKOFF,
        }
    }
}

/// A pod whose runner may be running a job: running, not stopped, and not yet unregistered; or
/// back after an exit (or about to be) in a pod that restarts it, unless the pod's phase is
/// terminal (the kubelet restarts nothing in a Succeeded or Failed pod).
fn may_be_busy(pod: &PodView) -> bool {
    let live = pod.phase == PodPhase::Running && !pod.runner_stopped;
    let terminal = matches!(pod.phase, PodPhase::Succeeded | PodPhase::Failed);
    let back = (pod.runner_restarted || pod.runner_restarting) && !terminal;
    (live || back) && !pod.unregistration_complete
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// An owner is deleted only once its runners are unregistered or finished, and the pods
    /// deleted with it are only pods seen unregistered or finished: the owner's own
    /// retirement unregisters any other pod (one created after the judgement) first.
    #[test]
    fn never_deletes_a_possibly_busy_runner(input in situation()) {
        let plan = plan(&input);
        for action in &plan.actions {
            if let Action::Delete { owner, pods, .. } = action {
                let o = input.owners.iter().find(|o| &o.name == owner).unwrap();
                prop_assert!(
                    o.unregistration_complete || !o.pods.iter().any(may_be_busy),
                    "plan deletes {owner} holding a possibly busy runner: {o:?}"
                );
                for name in pods {
                    let pod = o.pods.iter().find(|p| &p.name == name);
                    prop_assert!(
                        pod.is_some_and(|p| !may_be_busy(p) && !p.deleting),
                        "plan deletes pod {name} of {owner}, possibly busy or unseen: {o:?}"
                    );
                }
            }
        }
    }

    /// A StatefulSet is deleted only once its controller has observed that it wants no pod:
    /// earlier, the controller may replace a pod that is gone with a fresh one, which takes a
    /// job and dies when garbage collection reaches it. And the same rules that allow a delete
    /// allow stopping the StatefulSet, which also removes its pod.
    #[test]
    fn never_deletes_a_statefulset_that_may_still_replace_its_pod(input in situation()) {
        let plan = plan(&input);
        for action in &plan.actions {
            match action {
                Action::Delete { owner, .. } => {
                    let o = input.owners.iter().find(|o| &o.name == owner).unwrap();
                    prop_assert!(
                        matches!(o.pod_controller, PodController::None | PodController::Stopped),
                        "plan deletes {owner} while its controller may replace its pod: {o:?}"
                    );
                }
                Action::StopReplacingPods { owner, .. } => {
                    let o = input.owners.iter().find(|o| &o.name == owner).unwrap();
                    prop_assert!(
                        o.unregistration_complete || !o.pods.iter().any(may_be_busy),
                        "plan stops {owner} holding a possibly busy runner: {o:?}"
                    );
                }
                _ => {}
            }
        }
    }

    /// Only the pods the owner reports can be vouched for: while it has one the store does not
    /// show, it is never marked unregistered (and so never deleted for it).
    #[test]
    fn never_marks_complete_an_owner_with_an_unseen_pod(input in situation()) {
        let plan = plan(&input);
        for action in &plan.actions {
            if let Action::MarkUnregistrationComplete { owner } = action {
                let o = input.owners.iter().find(|o| &o.name == owner).unwrap();
                prop_assert!(!o.unseen_pods, "marked {owner} complete with an unseen pod: {o:?}");
            }
        }
    }

    /// Creation only fills the gap to `desired`; it never overshoots.
    #[test]
    fn never_creates_beyond_desired(input in situation()) {
        let plan = plan(&input);
        let created: u32 = plan.actions.iter().map(|a| match a {
            Action::Create { count } => *count,
            _ => 0,
        }).sum();
        prop_assert!(plan.counts.running + plan.counts.pending + created <= input.desired.max(plan.counts.running + plan.counts.pending));
    }

    /// When every up-to-date runner runs and there are at least `desired` of them, nothing is
    /// created.
    #[test]
    fn nothing_is_created_when_enough_runners_run(input in situation()) {
        let plan = plan(&input);
        if plan.counts.running >= input.desired {
            let creates = plan.actions.iter().any(|a| matches!(a, Action::Create { .. }));
            prop_assert!(!creates, "created with {} running: {:?}", plan.counts.running, plan.actions);
        }
    }

    /// Each owner gets at most one action per pass.
    #[test]
    fn at_most_one_action_per_owner(input in situation()) {
        let plan = plan(&input);
        let mut seen = std::collections::BTreeSet::new();
        for action in &plan.actions {
            let owner = match action {
                Action::Create { .. } => continue,
                Action::Delete { owner, .. }
                | Action::RequestUnregistration { owner, .. }
                | Action::MarkUnregistrationComplete { owner }
                | Action::StopReplacingPods { owner, .. } => owner,
            };
            prop_assert!(seen.insert(owner.clone()), "two actions for {owner}: {:?}", plan.actions);
        }
    }
}
