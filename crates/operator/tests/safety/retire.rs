//! Point 1: deleting an owner retires its runners gracefully.
//!
//! `kubectl delete` of a RunnerDeployment, a Runner or a RunnerSet used to cascade through garbage
//! collection: the runner pods got a deletion timestamp, the kubelet stopped their containers
//! and busy runners died mid-job. Now each owner holds a finalizer while its runners go the
//! unregister-before-delete way: idle runners at once, busy ones after their job, everything
//! forced once the owner's retirement timeout has passed.

use std::time::Duration;

use hangar_api::{Runner, RunnerDeployment, RunnerReplicaSet, RunnerSet};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;
use kube::api::DeleteParams;
use serde_json::{Value, json};

use hangar_testkit::eventually::{Describe, eventually_of};

use crate::support::e2e::{Deployment, E2e, WAIT};

/// Checks every 200 ms until `done` holds that no pod of a busy runner is being deleted.
async fn hold_until<F, Fut>(e: &E2e, what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_of(e, what, WAIT, || {
        let check = done();
        async {
            e.assert_no_busy_runner_pod_deleting().await;
            check.await.then_some(())
        }
    })
    .await
}

/// Waits until the namespace has no Runner, RunnerReplicaSet, RunnerDeployment, RunnerSet,
/// StatefulSet or pod left and GitHub no runner.
async fn wait_all_gone(e: &E2e) {
    eventually_of(e, "every object and registration gone", WAIT, || async {
        let gone = e.h.list::<RunnerDeployment>().await.is_empty()
            && e.h.list::<RunnerReplicaSet>().await.is_empty()
            && e.h.list::<Runner>().await.is_empty()
            && e.h.list::<RunnerSet>().await.is_empty()
            && e.h.list::<StatefulSet>().await.is_empty()
            && e.h.list::<Pod>().await.is_empty()
            && e.h.registered().is_empty();
        gone.then_some(())
    })
    .await
}

/// Messages of the events with `reason` about the object of `kind` named `name`.
async fn events(e: &E2e, kind: &str, name: &str, reason: &str) -> Vec<String> {
    e.h.list::<Event>()
        .await
        .into_iter()
        .filter(|ev| {
            ev.involved_object.kind.as_deref() == Some(kind)
                && ev.involved_object.name.as_deref() == Some(name)
                && ev.reason.as_deref() == Some(reason)
        })
        .filter_map(|ev| ev.message)
        .collect()
}

/// Starts a job of `duration` on one of the runners `names`; returns (job, busy, idle runners).
async fn one_busy(
    e: &E2e,
    label: &str,
    duration: Duration,
) -> (u64, String, std::collections::BTreeSet<String>) {
    let runners = e.running().await;
    one_busy_among(e, runners, label, duration).await
}

/// Submits a job of `duration` to `label` and waits until one of `runners` runs it: the job,
/// the busy runner, the rest.
async fn one_busy_among(
    e: &E2e,
    mut runners: std::collections::BTreeSet<String>,
    label: &str,
    duration: Duration,
) -> (u64, String, std::collections::BTreeSet<String>) {
    let job = e.submit(1, label, duration, false)[0];
    let busy = eventually_of(e, "one runner busy", WAIT, || async {
        e.h.busy().into_iter().next()
    })
    .await;
    runners.remove(&busy);
    (job, busy, runners)
}

/// After an owner's (or its namespace's) delete: the `idle` runners are unregistered while
/// `busy` keeps running `job`, which then completes; no job is interrupted.
async fn idle_go_busy_finishes(
    e: &E2e,
    idle: &std::collections::BTreeSet<String>,
    busy: &str,
    job: u64,
) {
    hold_until(e, "the idle runner unregistered", || async {
        let registered = e.h.registered();
        idle.iter().all(|n| !registered.contains(n))
    })
    .await;
    assert!(
        e.h.busy().contains(busy),
        "the busy runner still runs its job\n{}",
        e.describe().await
    );
    hold_until(e, "the job completed", || async { e.all_succeeded(&[job]) }).await;
    assert_eq!(e.h.interrupted(), 0, "no job was interrupted");
}

#[tokio::test]
async fn deleting_a_runner_deployment_lets_its_busy_runner_finish_its_job() {
    let e = E2e::start("retire-rd").await;
    let rd = Deployment::new("retiring", 2, "retiring");
    e.apply(&rd);
    e.wait_running(2).await;
    let (job, busy, idle) = one_busy(&e, "retiring", Duration::from_secs(8)).await;

    e.h.api::<RunnerDeployment>()
        .delete("retiring", &DeleteParams::background())
        .await
        .unwrap();

    // The idle runner goes at once; the busy one keeps its pod and finishes its job.
    idle_go_busy_finishes(&e, &idle, &busy, job).await;
    wait_all_gone(&e).await;
    e.shutdown().await;
}

/// A set judges a retiring Runner unregistered when none of its pods were asked and unanswered,
/// but a Runner controller acting on an older copy of the Runner may create the pod just
/// after that judgement (seen by the chaos soak: the pod registered and took a job between the
/// judgement and the delete). Here the judgement is stamped by hand on a Runner whose runner is
/// busy: the set deletes the Runner, but the pod it never judged goes the unregister-first way.
#[tokio::test]
async fn a_runner_judged_unregistered_before_its_pod_was_seen_finishes_its_job() {
    let e = E2e::start("retire-unseen").await;
    let rd = Deployment::new("unseen", 1, "unseen");
    e.apply(&rd);
    e.wait_running(1).await;
    let (job, busy, _) = one_busy(&e, "unseen", Duration::from_secs(8)).await;

    let stamps = json!({"metadata": {"annotations": {
        hangar_api::annotation::UNREGISTRATION_REQUEST_TIMESTAMP: "2026-01-01T00:00:00Z",
        hangar_api::annotation::UNREGISTRATION_COMPLETE_TIMESTAMP: "2026-01-01T00:00:00Z",
    }}});
    e.h.api::<Runner>()
        .patch(
            &busy,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&stamps),
        )
        .await
        .unwrap();

    hold_until(&e, "the judged Runner deleting", || async {
        e.h.api::<Runner>()
            .get_opt(&busy)
            .await
            .unwrap()
            .is_none_or(|r| r.metadata.deletion_timestamp.is_some())
    })
    .await;
    hold_until(&e, "the job completed", || async {
        assert_eq!(e.h.interrupted(), 0, "no job was interrupted");
        e.all_succeeded(&[job])
    })
    .await;
    hold_until(&e, "the busy runner's pod gone", || async {
        e.h.api::<Pod>().get_opt(&busy).await.unwrap().is_none()
    })
    .await;
    assert_eq!(e.h.interrupted(), 0, "no job was interrupted");
    e.shutdown().await;
}

#[tokio::test]
async fn deleting_a_standalone_runner_lets_it_finish_its_job() {
    let e = E2e::start("retire-runner").await;
    let rendered: Value =
        serde_json::from_str(&Deployment::new("x", 1, "standalone").render(&e.nodes)).unwrap();
    let runner = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "Runner",
        "metadata": {"name": "standalone"},
        "spec": rendered["spec"]["template"]["spec"],
    });
    e.h.apply(&runner.to_string());
    e.wait_running(1).await;
    let (job, busy, _) = one_busy(&e, "standalone", Duration::from_secs(15)).await;
    assert_eq!(busy, "standalone");

    e.h.api::<Runner>()
        .delete("standalone", &DeleteParams::background())
        .await
        .unwrap();

    // While it waits for its job, the Runner says so in its status.
    let retiring =
        eventually_of(
            &e,
            "the Runner's Progressing=Retiring condition",
            WAIT,
            || async {
                let runner = e.h.api::<Runner>().get_opt("standalone").await.ok()??;
                runner.status?.conditions?.into_iter().find(|c| {
                    c.type_ == "Progressing" && c.status == "True" && c.reason == "Retiring"
                })
            },
        )
        .await;
    assert!(
        !e.all_succeeded(&[job]),
        "the condition shows while the job runs: {retiring:?}"
    );

    hold_until(&e, "the job completed", || async {
        e.all_succeeded(&[job])
    })
    .await;
    wait_all_gone(&e).await;
    assert_eq!(e.h.interrupted(), 0, "no job was interrupted");
    e.shutdown().await;
}

#[tokio::test]
async fn a_busy_runner_is_killed_once_the_retirement_timeout_has_passed_and_an_event_says_so() {
    let e = E2e::start("retire-bound").await;
    let mut rd: Value =
        serde_json::from_str(&Deployment::new("bounded", 1, "bounded").render(&e.nodes)).unwrap();
    rd["metadata"]["annotations"] = json!({"hangar.dev/retirement-timeout": "2s"});
    e.h.apply(&rd.to_string());
    e.wait_running(1).await;
    // A job far longer than the test waits: only the forced deletion ends it.
    let (job, _, _) = one_busy(&e, "bounded", Duration::from_secs(600)).await;

    e.h.api::<RunnerDeployment>()
        .delete("bounded", &DeleteParams::background())
        .await
        .unwrap();

    wait_all_gone(&e).await;
    let forced = events(&e, "RunnerDeployment", "bounded", "RetirementTimedOut").await;
    assert!(
        forced.iter().any(|m| m.contains("busy")),
        "a Warning event says busy runners were killed: {forced:?}"
    );
    assert!(!e.all_succeeded(&[job]), "the job did not finish");
    e.shutdown().await;
}

/// A RunnerSet of `replicas` runners labelled `label` for `octo/app`, placed on `e`'s nodes.
pub(crate) fn runner_set(e: &E2e, name: &str, replicas: i32, label: &str) -> String {
    crate::support::runner_set_manifest(Some(&e.nodes), name, replicas, label, &[])
}

/// Waits until `n` runner pods are registered and online; returns their names.
async fn wait_registered_pods(e: &E2e, n: usize) -> std::collections::BTreeSet<String> {
    eventually_of(e, &format!("{n} registered runner pods"), WAIT, || async {
        let online = e.h.online();
        let pods: std::collections::BTreeSet<String> = e
            .pods()
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.annotations().contains_key("actions-runner/id"))
            .map(|p| p.name_any())
            .filter(|n| online.contains(n))
            .collect();
        (pods.len() == n && e.h.registered() == pods).then_some(pods)
    })
    .await
}

#[tokio::test]
async fn deleting_a_runner_set_lets_its_busy_runner_finish_its_job() {
    let e = E2e::start("retire-rs").await;
    e.h.apply(&runner_set(&e, "retiring-set", 2, "retiring-set"));
    let runners = wait_registered_pods(&e, 2).await;
    let (job, busy, idle) =
        one_busy_among(&e, runners, "retiring-set", Duration::from_secs(8)).await;

    e.h.api::<RunnerSet>()
        .delete("retiring-set", &DeleteParams::background())
        .await
        .unwrap();

    // The idle runner goes at once; the busy one keeps its pod and finishes its job.
    idle_go_busy_finishes(&e, &idle, &busy, job).await;
    wait_all_gone(&e).await;
    e.shutdown().await;
}

#[tokio::test]
async fn a_runner_set_forces_its_busy_runner_out_once_its_retirement_timeout_has_passed() {
    let e = E2e::start("retire-rs-bound").await;
    let mut set: Value =
        serde_json::from_str(&runner_set(&e, "bounded-set", 1, "bounded-set")).unwrap();
    set["metadata"]["annotations"] = json!({"hangar.dev/retirement-timeout": "2s"});
    e.h.apply(&set.to_string());
    wait_registered_pods(&e, 1).await;
    // A job far longer than the test waits: only the forced deletion ends it.
    let job = e.submit(1, "bounded-set", Duration::from_secs(600), false)[0];
    eventually_of(&e, "the runner busy", WAIT, || async {
        e.h.busy().into_iter().next()
    })
    .await;

    e.h.api::<RunnerSet>()
        .delete("bounded-set", &DeleteParams::background())
        .await
        .unwrap();

    wait_all_gone(&e).await;
    let forced = events(&e, "RunnerSet", "bounded-set", "RetirementTimedOut").await;
    assert!(
        forced.iter().any(|m| m.contains("busy")),
        "a Warning event says busy runners were killed: {forced:?}"
    );
    assert!(!e.all_succeeded(&[job]), "the job did not finish");
    e.shutdown().await;
}

/// Waits until the test's namespace is gone (the namespace controller retries with a back-off
/// of up to a minute while content is left).
async fn wait_namespace_gone(e: &E2e) {
    use k8s_openapi::api::core::v1::Namespace;
    let namespaces = kube::Api::<Namespace>::all(e.h.client.clone());
    eventually_of(
        e,
        "the namespace gone",
        Duration::from_secs(150),
        || async {
            namespaces
                .get_opt(e.h.ns.name())
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_the_namespace_lets_a_busy_runner_finish_its_job() {
    use k8s_openapi::api::core::v1::Namespace;
    let e = E2e::start("retire-ns").await;
    let _admission = e.h.serve_admission().await;
    e.apply(&Deployment::new("in-namespace", 2, "in-namespace"));
    e.wait_running(2).await;
    let (job, busy, idle) = one_busy(&e, "in-namespace", Duration::from_secs(10)).await;

    kube::Api::<Namespace>::all(e.h.client.clone())
        .delete(e.h.ns.name(), &DeleteParams::background())
        .await
        .unwrap();

    // The namespace controller deletes pods itself; the busy one must keep running its job.
    idle_go_busy_finishes(&e, &idle, &busy, job).await;
    wait_namespace_gone(&e).await;
    assert!(e.h.registered().is_empty(), "no runner left on GitHub");
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_the_namespace_lets_a_busy_runner_set_runner_finish_its_job() {
    use k8s_openapi::api::core::v1::Namespace;
    let e = E2e::start("retire-ns-rs").await;
    let _admission = e.h.serve_admission().await;
    e.h.apply(&runner_set(&e, "in-namespace-set", 2, "in-namespace-set"));
    let runners = wait_registered_pods(&e, 2).await;
    let (job, busy, idle) =
        one_busy_among(&e, runners, "in-namespace-set", Duration::from_secs(10)).await;

    kube::Api::<Namespace>::all(e.h.client.clone())
        .delete(e.h.ns.name(), &DeleteParams::background())
        .await
        .unwrap();

    // The namespace controller deletes StatefulSets and pods itself; the busy runner's pod
    // must keep running its job, and the idle one must still be unregistered.
    idle_go_busy_finishes(&e, &idle, &busy, job).await;
    wait_namespace_gone(&e).await;
    assert!(e.h.registered().is_empty(), "no runner left on GitHub");
    e.shutdown().await;
}
