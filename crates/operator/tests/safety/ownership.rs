//! Point 4: a pod's scope and credentials come from its owner chain, never from the pod.
//!
//! A victim's runner is registered at `octo/app`, and its Runner lives in another namespace.
//! A tenant who may create pods in the namespace Hangar serves writes pods that claim that
//! scope: labelled for token injection, with `RUNNER_REPO=octo/app`, an owner reference copied
//! from the victim's Runner, or the victim runner's ID and an unregistration request. Hangar
//! must mint no token and remove no runner, and the webhook must say why it refuses.

use std::time::Duration;

use hangar_github::Scope;
use hangar_testkit::TestNamespace;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::PostParams;
use serde_json::json;

use crate::support::{self, Harness};

/// The victim's runner, registered at `octo/app` outside the tenant's reach; returns its ID.
async fn register_victim(h: &Harness) -> u64 {
    let token = h
        .github
        .registration_token(&Scope::repo("octo", "app"))
        .await
        .unwrap();
    let request: ghsim::world::RegisterRunner = serde_json::from_value(json!({
        "url": format!("{}octo/app", h.url), "token": token.token.expose(),
        "name": "victim-runner", "labels": ["linux"],
    }))
    .unwrap();
    h.sim
        .update(|w, now| w.register_runner(request, now))
        .unwrap()
        .0
}

/// POSTs of registration tokens and JIT configurations ghsim has answered.
fn registrations_minted(h: &Harness) -> u64 {
    ghsim::accounting::snapshot(&h.sim)
        .api_calls
        .iter()
        .filter(|c| {
            c.endpoint.starts_with("POST")
                && (c.endpoint.ends_with("/registration-token")
                    || c.endpoint.ends_with("/generate-jitconfig"))
        })
        .map(|c| c.calls)
        .sum()
}

fn denial(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message,
        other => panic!("expected a denial, got {other}"),
    }
}

/// A pod claiming the victim's scope, as its author writes it.
fn claiming_pod(name: &str, labels: serde_json::Value, annotations: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "nodeSelector": {"hangar.dev/test-no-such-node": "true"},
            "containers": [{"name": "runner", "image": "summerwind/actions-runner:latest",
                            "env": [{"name": "RUNNER_REPO", "value": "octo/app"}]}]
        }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_author_gets_no_token_and_removes_no_runner_of_a_scope_it_does_not_own() {
    support::init_tracing();
    let h = Harness::start("safety-owner").await;
    let _admission = h.serve_admission().await;
    let victim_id = register_victim(&h).await;
    let minted_before = registrations_minted(&h);

    // The victim's Runner, in a namespace of its own.
    let victims = TestNamespace::create(h.cluster, "safety-victim").await;
    let victim_runners =
        kube::Api::<hangar_api::Runner>::namespaced(h.client.clone(), victims.name());
    let victim: hangar_api::Runner = serde_json::from_value(json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1", "kind": "Runner",
        "metadata": {"name": "victim-runner"},
        "spec": {"repository": "octo/app"},
    }))
    .unwrap();
    let victim = victim_runners
        .create(&PostParams::default(), &victim)
        .await
        .unwrap();

    let pods = h.api::<Pod>();
    let inject = json!({"actions-runner-controller/inject-registration-token": "true"});

    // 1. No owner at all: refused, saying which pods get registrations.
    let message = denial(
        pods.create(
            &PostParams::default(),
            &claiming_pod("tenant-0", inject.clone(), json!({})),
        )
        .await
        .expect_err("an unowned pod must be refused"),
    );
    assert!(
        message.contains("no controller owner")
            && message.contains("only pods created by a Runner"),
        "{message}"
    );

    // 2. The victim's Runner, named and with its UID, as owner: owner references are
    //    namespace-local, so no such Runner exists for the tenant's pod.
    let mut forged = claiming_pod(
        "victim-runner",
        inject.clone(),
        json!({"actions-runner/github-api-creds-secret": "victim-creds"}),
    );
    forged.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "actions.summerwind.dev/v1alpha1".into(),
            kind: "Runner".into(),
            name: victim.name_any(),
            uid: victim.uid().unwrap(),
            controller: Some(true),
            block_owner_deletion: None,
        },
    ]);
    let message = denial(
        pods.create(&PostParams::default(), &forged)
            .await
            .expect_err("a pod with a forged owner must be refused"),
    );
    assert!(
        message.contains("Runner victim-runner does not exist"),
        "{message}"
    );

    // 3. Not for injection, but carrying the victim runner's ID and an unregistration request,
    //    as the runner-pod controller reads them: it must not act on it.
    let labels = json!({"actions-runner": ""});
    let annotations = json!({
        "actions-runner/id": victim_id.to_string(),
        "actions-runner/unregistration-request-timestamp": "2026-01-01T00:00:00Z",
    });
    pods.create(
        &PostParams::default(),
        &claiming_pod("tenant-1", labels, annotations),
    )
    .await
    .unwrap();
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            h.registered().contains("victim-runner"),
            "the controller removed the victim's runner for a pod that claimed it\n{}",
            h.describe_github_runners()
        );
        let pod = pods.get("tenant-1").await.unwrap();
        assert!(
            !pod.finalizers()
                .iter()
                .any(|f| f == hangar_api::finalizer::RUNNER_POD),
            "the controller took charge of a pod it cannot trust"
        );
    }

    assert_eq!(
        registrations_minted(&h),
        minted_before,
        "a registration was minted for an untrusted pod"
    );
    let secrets: Vec<String> = h
        .list::<Secret>()
        .await
        .iter()
        .map(|s| s.name_any())
        .filter(|n| n.starts_with("hangar-registration") || n.ends_with("-registration"))
        .collect();
    assert!(
        secrets.is_empty(),
        "registration Secrets for the tenant: {secrets:?}"
    );
}
