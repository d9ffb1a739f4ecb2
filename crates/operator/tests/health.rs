//! Runner health against the real control plane: runners that are neither working nor on their
//! way are found, replaced when a fresh pod can help, left alone (and no more created) when
//! their template cannot work, and reported on the sets and the deployment.
//!
//! The trouble is real kubelet trouble from nodesim (image pulls that fail with
//! `ErrImagePull`/`ImagePullBackOff`); the time limits are shortened through the controller's
//! settings, so nothing sleeps for minutes.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use hangar_api::{RunnerDeployment, RunnerReplicaSet, RunnerSet};
use hangar_testkit::eventually::eventually_of;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::ListParams;
use nodesim::program::{PodMatch, RunnerFault};
use support::e2e::{Deployment, E2e, WAIT};

/// How long a pod may fail to pull its image before it counts as stuck, in these tests.
const STUCK_AFTER: Duration = Duration::from_secs(3);

/// How long a set whose runners all failed waits before it tries a fresh one, in these tests.
const FAILED_BACKOFF: Duration = Duration::from_secs(3);

async fn start(prefix: &str) -> E2e {
    E2e::start_configured(prefix, |s| {
        s.health.pending = STUCK_AFTER;
        s.health.failed_runner_backoff = FAILED_BACKOFF;
    })
    .await
}

/// The `RunnersHealthy` condition of the deployment's newest set, with the set's
/// `unhealthyReplicas`.
async fn set_health(e: &E2e) -> Option<(Condition, i32)> {
    let sets: Vec<RunnerReplicaSet> = e.replica_sets().await;
    let set = sets
        .iter()
        .max_by_key(|s| s.metadata.creation_timestamp.clone())?;
    let status = set.status.as_ref()?;
    health_of(status.conditions.as_deref(), status.unhealthy_replicas)
}

/// A status's `RunnersHealthy` condition, with its `unhealthyReplicas`.
fn health_of(conditions: Option<&[Condition]>, unhealthy: Option<i32>) -> Option<(Condition, i32)> {
    let condition = conditions?.iter().find(|c| c.type_ == "RunnersHealthy")?;
    Some((condition.clone(), unhealthy.unwrap_or(0)))
}

/// Warning events with `reason`, counting the repeats of each.
async fn warnings(e: &E2e, reason: &str) -> i32 {
    e.h.api::<k8s_openapi::api::events::v1::Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|ev| ev.reason.as_deref() == Some(reason))
        .map(|ev| ev.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

/// Waits until the deployment's newest set says all its runners are healthy again.
async fn healthy_again(e: &E2e) {
    eventually_of(e, "the set to be healthy again", WAIT, || async {
        set_health(e)
            .await
            .filter(|(c, n)| c.status == "True" && *n == 0)
    })
    .await;
}

/// The notes of the Warning events with `reason`.
async fn warning_notes(e: &E2e, reason: &str) -> Vec<String> {
    e.h.api::<k8s_openapi::api::events::v1::Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|ev| ev.reason.as_deref() == Some(reason))
        .filter_map(|ev| ev.note)
        .collect()
}

/// Waits until runner `first` is gone and another one runs in its place; returns the latter.
async fn replaced(e: &E2e, first: &str) -> String {
    eventually_of(e, "a replacement running, the first gone", WAIT, || async {
        let runners: Vec<String> = e.runners().await.iter().map(|r| r.name_any()).collect();
        let running = e.running().await;
        (runners.len() == 1 && !runners.iter().any(|n| n == first) && running.len() == 1)
            .then(|| runners[0].clone())
    })
    .await
}

#[tokio::test]
async fn a_template_whose_image_cannot_be_pulled_creates_no_more_runners_and_recovers_in_place() {
    let e = start("health-pull").await;
    let fault = e
        .runner_faults
        .add(RunnerFault::ImagePull, PodMatch::NamePrefix("pull-".into()));
    e.apply(&Deployment::new("pull", 2, "pull"));

    let (condition, _) = eventually_of(
        &e,
        "the set to say its runners cannot pull their image",
        WAIT,
        || async {
            set_health(&e)
                .await
                .filter(|(c, n)| c.status == "False" && *n == 2)
        },
    )
    .await;
    assert_eq!(condition.reason, "ImagePullFailing", "{condition:?}");
    assert!(
        condition.message.contains("cannot be pulled")
            && condition.message.contains("none is created or replaced"),
        "{condition:?}"
    );
    let stuck: Vec<String> = e.runners().await.iter().map(|r| r.name_any()).collect();
    assert_eq!(stuck.len(), 2);

    // Paused, not churning: several sync periods later the same two runners wait, none more.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let later: Vec<String> = e.runners().await.iter().map(|r| r.name_any()).collect();
    assert_eq!(
        later, stuck,
        "a template that cannot start is not retried pod after pod"
    );
    assert_eq!(e.pods().await.len(), 2);
    for runner in e.runners().await {
        let healthy = runner
            .status
            .and_then(|s| s.conditions)
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "Healthy");
        assert!(
            healthy.is_some_and(|c| c.status == "False" && c.reason == "ImagePullFailing"),
            "each Runner says why: {}",
            runner.metadata.name.unwrap_or_default()
        );
    }
    eventually_of(&e, "the deployment to report it", WAIT, || async {
        let rd = e.h.api::<RunnerDeployment>().get("pull").await.ok()?;
        let status = rd.status?;
        let copied = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "RunnersHealthy" && c.reason == "ImagePullFailing");
        (copied && status.unhealthy_replicas == Some(2)).then_some(())
    })
    .await;
    assert_eq!(
        warnings(&e, "ReplacementsPaused").await,
        1,
        "one event, not one per reconcile"
    );

    // The image can be pulled again: the kubelet's next retry starts the runners where they
    // are (the first to work shows the template works, so one still waiting for its retry may
    // be replaced instead), and the set says so.
    e.runner_faults.remove(fault);
    let running = e.wait_running(2).await;
    assert!(
        running.iter().any(|name| stuck.contains(name)),
        "the stuck runners recover in place: {running:?} {stuck:?}"
    );
    assert_eq!(e.h.interrupted(), 0);
    healthy_again(&e).await;
    e.shutdown().await;
}

#[tokio::test]
async fn a_runner_stuck_beside_a_working_one_is_unregistered_and_replaced() {
    let e = start("health-replace").await;
    let rd = Deployment::new("mixed", 1, "mixed");
    e.apply(&rd);
    let working = e.wait_running(1).await;

    // From now on new pods of the deployment cannot pull their image: the template has shown
    // that it works, so the trouble is the pod's, and a stuck runner is replaced.
    let fault = e.runner_faults.add(
        RunnerFault::ImagePull,
        PodMatch::NamePrefix("mixed-".into()),
    );
    e.apply(&rd.clone().replicas(2));
    let first_stuck = eventually_of(&e, "a second, stuck runner reported", WAIT, || async {
        let (c, n) = set_health(&e).await?;
        let stuck = c
            .message
            .split(':')
            .next()?
            .strip_prefix("runner ")?
            .to_owned();
        (c.status == "False" && c.reason == "ImagePullFailing" && n >= 1).then_some(stuck)
    })
    .await;
    assert!(!working.contains(&first_stuck));
    // Replaced at once: it retires (unregister-first) while its replacement is created. It
    // leaves only once GitHub has its word on it: a kubelet reports a container's start after
    // the fact, so a pod that looks stuck may hold a runner that just registered.
    eventually_of(
        &e,
        "a replacement beside the retiring stuck runner",
        WAIT,
        || async {
            let runners = e.runners().await;
            let retiring = runners.iter().any(|r| {
                r.name_any() == first_stuck
                    && r.annotations()
                        .contains_key("actions-runner/unregistration-request-timestamp")
            });
            let others = runners
                .iter()
                .filter(|r| r.name_any() != first_stuck && !working.contains(&r.name_any()))
                .count();
            (retiring && others >= 1).then_some(())
        },
    )
    .await;
    assert!(warnings(&e, "RunnersUnhealthy").await >= 1);
    assert_eq!(warnings(&e, "ReplacementsPaused").await, 0);

    // The image pulls again: the retiring runner registers, is removed from GitHub and goes;
    // its replacement runs beside the working one.
    e.runner_faults.remove(fault);
    eventually_of(&e, "the stuck runner gone", WAIT, || async {
        let names: Vec<String> = e.runners().await.iter().map(|r| r.name_any()).collect();
        (!names.contains(&first_stuck)).then_some(())
    })
    .await;
    let running = e.wait_running(2).await;
    assert!(
        working.is_subset(&running),
        "the working runner was never touched"
    );
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

#[tokio::test]
async fn a_runner_image_older_than_github_accepts_is_reported_and_not_multiplied() {
    let e = E2e::start_configured("health-version", |s| {
        s.minimum_runner_version = Some("2.329.0".into());
    })
    .await;
    // ghsim refuses runners below its minimum (2.329.0) as GitHub does; the image's tag says
    // which version the runner is, and the nodesim runner reports that version.
    let stale = "ghcr.io/actions/actions-runner:2.311.0";
    let mut rd = Deployment::new("old", 2, "old").annotation(
        "program.nodesim.hangar.dev/runner",
        "runner(version=2.311.0)",
    );
    rd.image = Some(stale.into());
    e.apply(&rd);

    let (condition, unhealthy) =
        eventually_of(&e, "the refused version reported", WAIT, || async {
            set_health(&e)
                .await
                .filter(|(c, n)| c.status == "False" && *n == 2)
        })
        .await;
    assert_eq!(condition.reason, "RunnerVersionRejected", "{condition:?}");
    for words in [
        stale,
        "version 2.311.0",
        "the minimum is 2.329.0",
        "none is created",
    ] {
        assert!(condition.message.contains(words), "{words}: {condition:?}");
    }
    assert_eq!(unhealthy, 2);

    // More demand creates no more doomed runners.
    e.apply(&rd.clone().replicas(4));
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        e.runners().await.len(),
        2,
        "no pod created for a refused version"
    );
    assert_eq!(warnings(&e, "ReplacementsPaused").await, 1);

    // A current image rolls them out: the refused runners hold no job and go at once.
    let mut fixed = Deployment::new("old", 4, "old").annotation(
        "program.nodesim.hangar.dev/runner",
        "runner(version=2.330.0)",
    );
    fixed.image = Some("ghcr.io/actions/actions-runner:2.330.0".into());
    e.apply(&fixed);
    e.wait_running(4).await;
    healthy_again(&e).await;
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

#[tokio::test]
async fn a_runner_set_whose_image_cannot_be_pulled_pauses_and_says_so() {
    let e = start("health-set").await;
    // RunnerSet pods are `<set>-<hash>-0`.
    let fault = e.runner_faults.add(
        RunnerFault::ImagePull,
        PodMatch::NamePrefix("pullset-".into()),
    );
    e.h.apply(&support::runner_set_manifest(
        Some(&e.nodes),
        "pullset",
        2,
        "pullset",
        &[],
    ));
    let set_health = || async {
        let set = e.h.api::<RunnerSet>().get("pullset").await.ok()?;
        let status = set.status?;
        health_of(status.conditions.as_deref(), status.unhealthy_replicas)
    };
    let (condition, _) = eventually_of(
        &e,
        "the RunnerSet to report its stuck runners",
        WAIT,
        || async {
            set_health()
                .await
                .filter(|(c, n)| c.status == "False" && *n == 2)
        },
    )
    .await;
    assert_eq!(condition.reason, "ImagePullFailing", "{condition:?}");
    assert!(
        condition.message.contains("none is created"),
        "{condition:?}"
    );
    let stuck: Vec<String> = e.pods().await.iter().map(|p| p.name_any()).collect();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let later: Vec<String> = e.pods().await.iter().map(|p| p.name_any()).collect();
    assert_eq!(later, stuck, "no pod churn");

    e.runner_faults.remove(fault);
    eventually_of(&e, "the RunnerSet healthy again", WAIT, || async {
        set_health()
            .await
            .filter(|(c, n)| c.status == "True" && *n == 0)
    })
    .await;
    e.shutdown().await;
}

/// The node the pod of runner `name` runs on.
async fn node_of(e: &E2e, name: &str) -> String {
    let pod =
        e.h.api::<k8s_openapi::api::core::v1::Pod>()
            .get(name)
            .await
            .unwrap();
    pod.spec.and_then(|s| s.node_name).unwrap()
}

#[tokio::test]
async fn an_idle_runner_on_a_not_ready_node_is_replaced_and_a_busy_one_finishes_its_job() {
    let e = E2e::start_configured("health-node", |s| {
        s.health.node_not_ready = Duration::from_secs(3);
        s.runner_refresh = Duration::from_secs(1);
    })
    .await;
    let rd = Deployment::new("sick", 1, "sick");
    e.apply(&rd);
    let first = e.wait_running(1).await.pop_first().unwrap();
    let sick = node_of(&e, &first).await;

    // Its node stops being Ready (the kubelet still runs the pod): once past the limit the
    // runner no longer counts, is replaced on the Ready node and retires unregister-first.
    e.nodes
        .fail_node(&sick, nodesim::NodeFailure::NotReady)
        .await
        .unwrap();
    // The set says why, in its condition (for as long as the runner is there) and in an event.
    let replacement = replaced(&e, &first).await;
    let notes = warning_notes(&e, "RunnersUnhealthy").await;
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&first) && n.contains("its node is NotReady")),
        "{notes:?}"
    );
    assert_ne!(node_of(&e, &replacement).await, sick);
    assert!(
        !e.h.registered().contains(&first),
        "unregistered from GitHub"
    );

    // The other way round: the runner on the node that fails is busy. It keeps its job to the
    // end, however long the node stays NotReady; only then does it go.
    e.nodes.recover_node(&sick).unwrap();
    let busy_node = node_of(&e, &replacement).await;
    let jobs = e.submit(1, "sick", Duration::from_secs(15), false);
    eventually_of(&e, "the runner to take the job", WAIT, || async {
        e.h.busy().contains(&replacement).then_some(())
    })
    .await;
    e.nodes
        .fail_node(&busy_node, nodesim::NodeFailure::NotReady)
        .await
        .unwrap();
    // `kubectl get rdeploy` counts it busy, from GitHub's runner list.
    eventually_of(
        &e,
        "the deployment to count one busy runner",
        WAIT,
        || async {
            let rd = e.h.api::<RunnerDeployment>().get("sick").await.ok()?;
            (rd.status?.busy_replicas == Some(1)).then_some(())
        },
    )
    .await;
    eventually_of(&e, "the job to finish", WAIT, || async {
        e.assert_no_busy_runner_pod_deleting().await;
        e.all_succeeded(&jobs).then_some(())
    })
    .await;
    assert_eq!(e.h.interrupted(), 0);
    // The deployment still wants one runner: it runs on the Ready node.
    let last = e.wait_running(1).await.pop_first().unwrap();
    assert_ne!(node_of(&e, &last).await, busy_node);
    e.shutdown().await;
}

#[tokio::test]
async fn a_runner_offline_on_github_while_its_pod_runs_is_replaced() {
    let e = E2e::start_configured("health-offline", |s| {
        s.runner_refresh = Duration::from_secs(1);
        s.health.offline = Duration::from_secs(2);
    })
    .await;
    e.h.sim
        .update(|w, _| w.config.offline_after = Duration::from_secs(2));
    e.apply(&Deployment::new("lost", 1, "lost"));
    let first = e.wait_running(1).await.pop_first().unwrap();

    // The runner loses GitHub; its pod runs on, Ready.
    let fault = e
        .runner_faults
        .add(RunnerFault::CutOff, PodMatch::NamePrefix(first.clone()));
    // Replaced and unregistered, with the reason told; when it reaches GitHub again its
    // registration is gone, and it exits.
    replaced(&e, &first).await;
    let notes = warning_notes(&e, "RunnersUnhealthy").await;
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&first) && n.contains("GitHub shows it offline")),
        "{notes:?}"
    );
    e.runner_faults.remove(fault);
    let running = e.wait_running(1).await;
    assert!(!running.contains(&first), "{running:?}");
    assert!(!e.h.registered().contains(&first));
    healthy_again(&e).await;
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

#[tokio::test]
async fn an_oom_killed_runner_is_replaced_unregistered_and_reported() {
    let e = start("health-oom").await;
    e.apply(&Deployment::new("oom", 1, "oom"));
    let first = e.wait_running(1).await.pop_first().unwrap();
    let ns = e.h.ns.name().to_owned();
    e.nodes
        .inject(&ns, &first, "runner", nodesim::Fault::OomKill)
        .await
        .unwrap();
    replaced(&e, &first).await;
    assert!(
        !e.h.registered().contains(&first),
        "unregistered from GitHub"
    );
    // No other runner shows that the template works, so the set held the place for the
    // back-off (`ReplacementsPaused`) before it tried a fresh runner.
    let notes = warning_notes(&e, "ReplacementsPaused").await;
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&first) && n.contains("OOM-killed")),
        "{notes:?}"
    );
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

/// The nodesim program of a runner container that exits with code 1 at once: a runner image
/// whose entrypoint fails before the runner can register.
const CRASH_AT_START: (&str, &str) = ("program.nodesim.hangar.dev/runner", "crash(100ms)");

/// The runner pods seen while polling for `window`, each with when it was first seen (ms
/// from the start): how many pods the set made, and when.
async fn pods_made_during(e: &E2e, window: Duration) -> BTreeMap<String, u128> {
    let mut seen = BTreeMap::new();
    let start = tokio::time::Instant::now();
    while start.elapsed() < window {
        for pod in e.pods().await {
            seen.entry(pod.name_any())
                .or_insert_with(|| start.elapsed().as_millis());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

#[tokio::test]
async fn a_template_whose_runner_crashes_at_start_is_retried_slowly_and_recovers() {
    let e = start("health-crash").await;
    let (key, program) = CRASH_AT_START;
    e.apply(&Deployment::new("crash", 2, "crash").annotation(key, program));

    let made = pods_made_during(&e, Duration::from_secs(10)).await;
    // Two places, and one retry per back-off period at most (3 s: 10 s allow 3).
    assert!(
        made.len() <= 2 + 3,
        "pod churn: {} pods in 10 s: {made:?}",
        made.len()
    );
    let (condition, _) =
        eventually_of(&e, "the set to report its failed runners", WAIT, || async {
            set_health(&e)
                .await
                .filter(|(c, _)| c.status == "False" && c.reason == "RunnerFailed")
        })
        .await;
    assert!(
        condition.message.contains("exited with code 1"),
        "{condition:?}"
    );

    // The fixed template starts working at once. (An annotation is left: server-side apply
    // sends an emptied map as null, which the CRD's schema refuses.)
    e.apply(&Deployment::new("crash", 2, "crash").annotation("example.com/fixed", "true"));
    e.wait_running(2).await;
    healthy_again(&e).await;
    e.shutdown().await;
}

#[tokio::test]
async fn a_runner_set_whose_runner_crashes_at_start_is_retried_slowly() {
    let e = start("health-setcrash").await;
    let mut set: serde_json::Value = serde_json::from_str(&support::runner_set_manifest(
        Some(&e.nodes),
        "crashset",
        2,
        "crashset",
        &[],
    ))
    .unwrap();
    let (key, program) = CRASH_AT_START;
    set["spec"]["template"]["metadata"] = serde_json::json!({"annotations": {key: program}});
    e.h.apply(&set.to_string());
    let set_health = || async {
        let set = e.h.api::<RunnerSet>().get("crashset").await.ok()?;
        let status = set.status?;
        health_of(status.conditions.as_deref(), status.unhealthy_replicas)
    };
    let made = pods_made_during(&e, Duration::from_secs(10)).await;
    assert!(
        made.len() <= 2 + 3,
        "pod churn: {} pods in 10 s: {made:?}",
        made.len()
    );
    eventually_of(
        &e,
        "the RunnerSet to report its failed runners",
        WAIT,
        || async {
            set_health()
                .await
                .filter(|(c, _)| c.status == "False" && c.reason == "RunnerFailed")
        },
    )
    .await;
    e.shutdown().await;
}
