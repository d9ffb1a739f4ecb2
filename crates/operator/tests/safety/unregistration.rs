//! Point 2: GitHub's 403 and 404 on runner removal are verified, never assumed to mean "gone".
//! And a pod is released unasked only when it cannot have started a runner.
//!
//! A credential that lost its permission answers every DELETE with 403; a runner ID annotated
//! on a pod may be stale, and DELETE of a stale ID answers 404 while the runner of that pod is
//! alive and busy. Either way a scale-down must not delete a pod whose runner runs a job.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams};
use nodesim::program::{PodMatch, RunnerFault};
use serde_json::json;

use hangar_testkit::eventually::{Describe, eventually_of};

use crate::support::e2e::{Deployment, E2e, WAIT};

/// A Runner's Warning events with `reason`, as `kubectl describe runner` shows them.
async fn runner_events(e: &E2e, runner: &str, reason: &str) -> Vec<String> {
    e.h.list::<Event>()
        .await
        .into_iter()
        .filter(|ev| {
            ev.involved_object.kind.as_deref() == Some("Runner")
                && ev.involved_object.name.as_deref() == Some(runner)
                && ev.reason.as_deref() == Some(reason)
        })
        .filter_map(|ev| ev.message)
        .collect()
}

/// Checks at once and then for `period`, failing at once if a pod of a busy runner is on its way out or the
/// pod named `kept` is gone or deleting.
async fn hold(e: &E2e, kept: &str, period: Duration) {
    let until = tokio::time::Instant::now() + period;
    loop {
        e.assert_no_busy_runner_pod_deleting().await;
        let pods = e.pods().await;
        let pod = pods.iter().find(|p| p.name_any() == kept);
        assert!(
            pod.is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
            "the pod of runner {kept} was deleted although GitHub never confirmed its removal\n{}",
            e.describe().await
        );
        if tokio::time::Instant::now() >= until {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_403_on_runner_removal_keeps_the_pod_and_tells_the_owner_which_permission_is_missing() {
    let e = E2e::start("safety-403").await;
    let rd = Deployment::new("forbidden", 2, "forbidden");
    e.apply(&rd);
    let names = e.wait_running(2).await;

    // One runner takes a job; then the controller's credential loses the permission to remove
    // runners, and the deployment scales to zero.
    let jobs = e.submit(1, "forbidden", Duration::from_secs(6), false);
    let busy = eventually_of(&e, "one runner busy", WAIT, || async {
        e.h.busy().into_iter().next()
    })
    .await;
    let idle = names.iter().find(|n| **n != busy).unwrap().clone();
    e.h.sim.set_faults(ghsim::Faults {
        forbidden_endpoints: vec!["DELETE /actions/runners/{runner_id}".into()],
        ..ghsim::Faults::default()
    });
    e.apply(&rd.clone().replicas(0));

    // The idle runner's removal is refused: its pod stays, and its Runner says why.
    let message = eventually_of(
        &e,
        "a Warning event naming the missing permission",
        WAIT,
        || async {
            hold(&e, &idle, Duration::ZERO).await;
            runner_events(&e, &idle, "UnregistrationForbidden")
                .await
                .into_iter()
                .next()
        },
    )
    .await;
    assert!(
        message.contains("Administration") && message.contains("octo/app"),
        "{message}"
    );
    let condition = eventually_of(&e, "CredentialsValid=False on the Runner", WAIT, || async {
        let runner = e
            .runners()
            .await
            .into_iter()
            .find(|r| r.name_any() == idle)?;
        runner
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "CredentialsValid" && c.status == "False")
    })
    .await;
    assert_eq!(condition.reason, "Forbidden", "{condition:?}");
    assert!(
        condition.message.contains("Administration"),
        "{condition:?}"
    );
    hold(&e, &idle, Duration::from_secs(3)).await;

    // Permission restored: a change to the pod (as any retry) finishes the scale-down, and the
    // busy runner's job completes uninterrupted.
    e.h.sim.set_faults(ghsim::Faults::default());
    e.h.api::<Pod>()
        .patch(
            &idle,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"test/nudge": "1"}}})),
        )
        .await
        .unwrap();
    e.wait_all_gone_without_killing_busy_runners("scale-down to finish")
        .await;
    assert!(e.all_succeeded(&jobs), "{:?}", e.jobs(&jobs));
    assert_eq!(e.h.interrupted(), 0, "a refused removal interrupted a job");
    e.shutdown().await;
}

#[tokio::test]
async fn a_scale_down_that_githubs_rate_limit_holds_says_until_when_and_deletes_no_pod() {
    let e = E2e::start("safety-ratelimit").await;
    let rd = Deployment::new("limited", 2, "limited");
    e.apply(&rd);
    let names = e.wait_running(2).await;

    // GitHub's hourly budget for the controller's credential runs out, then the deployment
    // scales to zero: every unregistration is refused until the budget resets.
    let until = e.h.sim.now().as_second() + 20;
    e.h.sim.set_faults(ghsim::Faults {
        primary_exhausted_until: Some(until),
        ..ghsim::Faults::default()
    });
    e.apply(&rd.clone().replicas(0));

    let condition = eventually_of(
        &e,
        "the set's Progressing condition naming the rate limit",
        WAIT,
        || async {
            for name in &names {
                hold(&e, name, Duration::ZERO).await;
            }
            e.replica_sets().await.into_iter().find_map(|s| {
                s.status?
                    .conditions?
                    .into_iter()
                    .find(|c| c.type_ == "Progressing" && c.reason == "GitHubRateLimited")
            })
        },
    )
    .await;
    let reset = jiff::Timestamp::from_second(until).unwrap().to_string();
    assert_eq!(condition.status, "True", "{condition:?}");
    assert!(
        condition.message.contains("unregistering 2 runner(s)")
            && condition.message.contains(&reset),
        "{condition:?}"
    );
    for name in &names {
        hold(&e, name, Duration::from_secs(1)).await;
    }

    // The budget resets: the scale-down finishes on its own, and the condition moves on.
    e.h.sim.set_faults(ghsim::Faults::default());
    e.wait_all_gone_without_killing_busy_runners("the scale-down after the reset")
        .await;
    eventually_of(
        &e,
        "the set's Progressing condition at rest",
        WAIT,
        || async {
            e.replica_sets().await.into_iter().find_map(|s| {
                s.status?
                    .conditions?
                    .into_iter()
                    .find(|c| c.type_ == "Progressing" && c.reason == "ReplicasSynced")
            })
        },
    )
    .await;
    e.shutdown().await;
}

#[tokio::test]
async fn a_404_for_a_stale_runner_id_is_checked_by_name_before_the_pod_goes() {
    let e = E2e::start("safety-404").await;
    let rd = Deployment::new("stale", 1, "stale");
    e.apply(&rd);
    let name = e.wait_running(1).await.into_iter().next().unwrap();
    let jobs = e.submit(1, "stale", Duration::from_secs(6), false);
    eventually_of(&e, "the runner busy", WAIT, || async {
        e.h.busy().contains(&name).then_some(())
    })
    .await;

    // The pod's runner ID goes stale (as after a lookup that raced a re-registration): a
    // DELETE of it answers 404 while the pod's runner is alive and busy.
    e.h.api::<Pod>()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                "actions-runner/id": "987654321"
            }}})),
        )
        .await
        .unwrap();
    e.apply(&rd.clone().replicas(0));

    e.wait_all_gone_without_killing_busy_runners("scale-down to finish")
        .await;
    assert!(e.all_succeeded(&jobs), "{:?}", e.jobs(&jobs));
    assert_eq!(
        e.h.interrupted(),
        0,
        "a 404 for a stale ID interrupted a job"
    );
    e.shutdown().await;
}

/// Whether `pod` is bound to a node whose kubelet reports its image cannot be pulled.
fn scheduled_waiting_for_its_image(pod: &Pod) -> bool {
    let scheduled = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
    let waiting = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.as_deref())
        .any(|reason| matches!(reason, "ErrImagePull" | "ImagePullBackOff"));
    scheduled && waiting
}

/// A kubelet reports a container's start after the fact, so a scheduled pod that looks Pending
/// may hold a runner that registers, and is handed a job, any moment: scaled down, it waits for
/// GitHub's word on its runner like any started pod (found by chaos: a pod released as "never
/// started" from a Pending view ran a job when it was deleted).
#[tokio::test]
async fn a_scheduled_pod_that_looks_pending_waits_for_its_runner_before_it_goes() {
    let e = E2e::start("safety-pending").await;
    let pulls_fail = e.runner_faults.add(
        RunnerFault::ImagePull,
        PodMatch::NamePrefix("pending-".into()),
    );
    let rd = Deployment::new("pending", 1, "pending");
    e.apply(&rd);
    let pod = eventually_of(
        &e,
        "a scheduled pod waiting for its image",
        WAIT,
        || async {
            e.pods()
                .await
                .into_iter()
                .find(scheduled_waiting_for_its_image)
                .map(|p| p.name_any())
        },
    )
    .await;
    let jobs = e.submit(1, "pending", Duration::from_secs(6), false);
    e.apply(&rd.clone().replicas(0));
    hold(&e, &pod, Duration::from_secs(5)).await;

    // The image pulls at the next attempt: the runner starts, registers and may take the job
    // before its unregistration reaches GitHub, which then refuses (busy) until the job ends.
    e.runner_faults.remove(pulls_fail);
    e.wait_all_gone_without_killing_busy_runners("scale-down to finish")
        .await;
    assert_eq!(
        e.h.interrupted(),
        0,
        "a pod released as never started interrupted a job: {:?}",
        e.jobs(&jobs)
    );
    e.shutdown().await;
}

/// A retired pod on no node is withdrawn: deleted at the version Hangar judged, so the
/// scheduler can never place it, and held until its StatefulSet is going, so the StatefulSet
/// cannot replace it with a fresh pod meanwhile (found by chaos: a RunnerSet pod marked
/// unregistered as "never started" was scheduled while its StatefulSet waited for garbage
/// collection, took a job, and died with the StatefulSet).
#[tokio::test]
async fn a_retired_pod_that_was_never_scheduled_can_never_start() {
    const GATE: &str = "hangar.dev/test-gate";
    const HOLD: &str = "hangar.dev/test-hold";
    let e = E2e::start("safety-unstarted").await;
    let mut set: serde_json::Value =
        serde_json::from_str(&crate::retire::runner_set(&e, "unstarted", 1, "unstarted")).unwrap();
    set["spec"]["template"]["spec"]["nodeSelector"][GATE] = "open".into();
    e.h.apply(&set.to_string());

    let sets = e.h.api::<StatefulSet>();
    let statefulset = eventually_of(&e, "the runner StatefulSet", WAIT, || async {
        e.h.list::<StatefulSet>().await.into_iter().next()
    })
    .await
    .name_any();
    // Keeps the StatefulSet, once deleted, from letting garbage collection take its pod, so
    // whatever Hangar leaves of the pod stays to be scheduled.
    sets.patch(
        &statefulset,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [HOLD]}})),
    )
    .await
    .unwrap();
    let pod = eventually_of(
        &e,
        "an unscheduled runner pod Hangar holds",
        WAIT,
        || async {
            e.pods().await.into_iter().find(|p| {
                p.spec.as_ref().is_some_and(|s| s.node_name.is_none())
                    && p.finalizers()
                        .iter()
                        .any(|f| f == hangar_api::finalizer::RUNNER_POD)
            })
        },
    )
    .await;

    e.h.api::<hangar_api::RunnerSet>()
        .patch(
            "unstarted",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    eventually_of(&e, "Hangar done with the pod", WAIT, || async {
        let now = e.pods().await.into_iter().find(|p| p.uid() == pod.uid());
        now.is_none_or(|p| {
            p.metadata.deletion_timestamp.is_some()
                || p.annotations()
                    .contains_key("actions-runner/unregistration-complete-timestamp")
        })
        .then_some(())
    })
    .await;

    // Room on a node appears right after Hangar's decision.
    let nodes: kube::Api<Node> = kube::Api::all(e.h.client.clone());
    let pool = e.nodes.placement().node_selector;
    let (key, value) = pool.iter().next().unwrap();
    for node in nodes
        .list(&ListParams::default().labels(&format!("{key}={value}")))
        .await
        .unwrap()
    {
        nodes
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {GATE: "open"}}})),
            )
            .await
            .unwrap();
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(8);
    while tokio::time::Instant::now() < until {
        for p in e.pods().await {
            assert!(
                p.spec.as_ref().is_none_or(|s| s.node_name.is_none()),
                "pod {} (uid {:?}) of a retired RunnerSet was scheduled after Hangar released {}: {:?}",
                p.name_any(),
                p.uid(),
                pod.name_any(),
                p.metadata
            );
        }
        assert!(
            e.h.registered().is_empty(),
            "a runner of the retired RunnerSet registered: {:?}",
            e.h.registered()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    sets.patch(
        &statefulset,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .ok();
    e.wait_all_gone_without_killing_busy_runners("the retired set to go")
        .await;
    e.shutdown().await;
}
