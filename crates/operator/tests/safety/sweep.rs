//! No registration is left behind: a JIT registration whose pod was never created (the
//! controller died in between) is removed from GitHub once it has looked leaked for the grace
//! period, and so is a ghost (online, idle, its pod gone); runners Hangar did not name, and
//! runners of live pods, are never touched.
//!
//! The controllers run with a sweep every second and a 30-minute grace period; the test moves
//! the controllers' clock forward instead of waiting. No simulated nodes: runner pods stay
//! Pending, so their JIT runners stay offline — as offline as the leaked ones, and kept only
//! because their pods exist.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use hangar_api::{RunnerReplicaSet, RunnerSet};
use hangar_core::autoscaler::labels::jit_runner_labels;
use hangar_github::{JitConfigRequest, Scope};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;

use crate::support::{self, Harness, eventually};

const WAIT: Duration = Duration::from_secs(60);
const GRACE: Duration = Duration::from_secs(30 * 60);

/// Harness with a fast sweep and a metrics exporter to read its counter from.
async fn start(prefix: &str) -> (Harness, Arc<hangar::metrics::Exporter>) {
    support::init_tracing();
    let exporter = Arc::new(hangar::metrics::Exporter::default());
    let attach = exporter.clone();
    let h = Harness::start_configured(prefix, support::uncached(), |s| {
        s.exporter = Some(attach);
        s.leaked_registration_sweep = Duration::from_secs(1);
        s.leaked_registration_grace = GRACE;
    })
    .await;
    (h, exporter)
}

/// Registers an offline JIT runner `name` at `octo/app` with `label`, as Hangar would: the
/// registration a controller that died before creating the pod leaves behind.
async fn register(h: &Harness, name: &str, label: &str) {
    let request = JitConfigRequest {
        name: name.to_owned(),
        runner_group_id: 1,
        labels: jit_runner_labels(&[label.to_owned()], None),
        work_folder: None,
    };
    h.github
        .generate_jit_config(&Scope::repo("octo", "app"), &request)
        .await
        .unwrap();
}

/// Applies RunnerDeployment `name` (one JIT runner labelled `name`, its pod on no node, so
/// Pending and its runner offline) and waits for its runner's registration; returns the pod's
/// name and the RunnerReplicaSet's.
async fn pending_jit_deployment(h: &Harness, name: &str) -> (String, String) {
    h.apply(
        &json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "RunnerDeployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "template": {
                    "metadata": {"annotations": {"hangar.dev/registration": "jit"}},
                    "spec": {
                        "repository": "octo/app",
                        "labels": [name],
                        "nodeSelector": {"hangar.dev/no-such-node": "true"},
                    },
                },
            },
        })
        .to_string(),
    );
    let live = eventually("the deployment's runner registered", WAIT, || async {
        let pods: Vec<Pod> = h.list().await;
        let name = pods.first()?.name_any();
        h.registered().contains(&name).then_some(name)
    })
    .await;
    let set = h.list::<RunnerReplicaSet>().await[0].name_any();
    (live, set)
}

/// Waits a few sweeps without moving the clock: nothing younger than the grace period goes.
/// Then moves the clock 10 minutes a second until `gone` is no longer registered.
async fn sweep_past_grace(h: &Harness, all: &BTreeSet<String>, gone: &str) {
    tokio::time::sleep(Duration::from_secs(3)).await;
    let registered = h.registered();
    assert!(
        all.is_subset(&registered),
        "a registration went before the grace period ended:\n{}",
        h.describe_github_runners()
    );
    eventually("the leaked registration to be removed", WAIT, || async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        h.clock.advance(Duration::from_secs(10 * 60));
        (!h.registered().contains(gone)).then_some(())
    })
    .await;
}

fn removed_count(exporter: &hangar::metrics::Exporter, scope: &str) -> Option<String> {
    let text = exporter.render();
    let prefix = format!("hangar_leaked_registrations_removed_total{{scope=\"{scope}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_owned)
}

/// A RunnerDeployment's leaked runner (`<set>-<suffix>`, no Runner, no pod) goes; a foreign
/// runner, a runner of the set's naming prefix but not its scheme, and the deployment's own
/// offline JIT runner (its pod Pending) stay.
#[tokio::test]
async fn a_leaked_deployment_runner_is_removed_and_nothing_else() {
    let (h, exporter) = start("sweep-rd").await;
    let (live, set) = pending_jit_deployment(&h, "leaky").await;

    let leaked = format!("{set}-x7k2q");
    let not_the_scheme = format!("{set}-manual");
    let foreign = "build-box-1".to_owned();
    for name in [&leaked, &not_the_scheme, &foreign] {
        register(&h, name, "leaky").await;
    }
    let all: BTreeSet<String> = [&live, &leaked, &not_the_scheme, &foreign]
        .into_iter()
        .cloned()
        .collect();
    sweep_past_grace(&h, &all, &leaked).await;

    let left = h.registered();
    for kept in [&live, &not_the_scheme, &foreign] {
        assert!(
            left.contains(kept),
            "{kept} was removed:\n{}",
            h.describe_github_runners()
        );
    }
    assert_eq!(removed_count(&exporter, "repository").as_deref(), Some("1"));
}

/// A ghost — a runner process still online whose pod is gone (a node cut off from the
/// apiserver but not from GitHub keeps running what the cluster deleted) — is removed once it
/// has been idle without a pod for the grace period; removing it disconnects the process.
#[tokio::test]
async fn an_online_ghost_without_a_pod_is_removed_once_idle() {
    let (h, exporter) = start("sweep-ghost").await;
    let (live, set) = pending_jit_deployment(&h, "haunted").await;
    let ghost = format!("{set}-gh5st"); // the apiserver's generateName alphabet
    let request = JitConfigRequest {
        name: ghost.clone(),
        runner_group_id: 1,
        labels: jit_runner_labels(&["haunted".to_owned()], None),
        work_folder: None,
    };
    let config = h
        .github
        .generate_jit_config(&Scope::repo("octo", "app"), &request)
        .await
        .unwrap();
    let mut process =
        ghsim::runner::RunnerClient::from_jit_config(config.encoded_jit_config.expose()).unwrap();
    process.connect().await.unwrap();
    assert!(
        h.online().contains(&ghost),
        "{}",
        h.describe_github_runners()
    );

    let all: BTreeSet<String> = [live.clone(), ghost.clone()].into();
    sweep_past_grace(&h, &all, &ghost).await;
    assert!(
        h.registered().contains(&live),
        "{}",
        h.describe_github_runners()
    );
    assert!(
        process.next_job(Duration::from_millis(100)).await.is_err(),
        "the ghost's registration is gone, so its process is refused"
    );
    assert_eq!(removed_count(&exporter, "repository").as_deref(), Some("1"));
}

/// A RunnerSet's leaked runner (`<set>-<hash>-0`, no StatefulSet, no pod) goes; the runner of
/// the set's live StatefulSet (JIT, registered before its pod exists) stays.
#[tokio::test]
async fn a_leaked_runner_set_runner_is_removed_and_the_live_one_kept() {
    let (h, exporter) = start("sweep-rs").await;
    h.apply(
        &json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "RunnerSet",
            "metadata": {"name": "leakyset", "annotations": {"hangar.dev/registration": "jit"}},
            "spec": {
                "replicas": 1,
                "repository": "octo/app",
                "labels": ["leakyset"],
                "selector": {"matchLabels": {"app": "leakyset"}},
                "serviceName": "leakyset",
                "template": {
                    "metadata": {"labels": {"app": "leakyset"}},
                    "spec": {
                        "nodeSelector": {"hangar.dev/no-such-node": "true"},
                        "containers": [{"name": "runner"}],
                    },
                },
            },
        })
        .to_string(),
    );
    let live = eventually("the set's runner registered", WAIT, || async {
        let sets: Vec<StatefulSet> = h.list().await;
        let name = format!("{}-0", sets.first()?.name_any());
        h.registered().contains(&name).then_some(name)
    })
    .await;
    assert_eq!(h.list::<RunnerSet>().await.len(), 1);

    let leaked = "leakyset-bcdf-0".to_owned();
    register(&h, &leaked, "leakyset").await;
    let all: BTreeSet<String> = [live.clone(), leaked.clone()].into();
    sweep_past_grace(&h, &all, &leaked).await;

    assert!(
        h.registered().contains(&live),
        "the live runner was removed:\n{}",
        h.describe_github_runners()
    );
    assert_eq!(removed_count(&exporter, "repository").as_deref(), Some("1"));
}
