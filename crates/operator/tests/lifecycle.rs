//! Runner lifecycle against the real control plane and ghsim: RunnerDeployment → RunnerReplicaSet
//! → Runners → pods with registration Secrets; scale-down and direct pod deletion.
//! (Pods stay Pending here: no node simulator runs in this file.)

mod support;

use std::time::Duration;

use hangar_api::{Runner, RunnerReplicaSet};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams};
use support::{Harness, eventually};

const WAIT: Duration = Duration::from_secs(60);

fn deployment(name: &str, replicas: i32, label: &str) -> String {
    format!(
        "apiVersion: actions.summerwind.dev/v1alpha1\nkind: RunnerDeployment\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  template:\n    spec:\n      repository: octo/app\n      labels: [{label}]\n"
    )
}

async fn pods(h: &Harness) -> Vec<Pod> {
    h.api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn runner_deployment_creates_runner_pods_with_secret_sourced_tokens() {
    let h = Harness::start("rd-create").await;
    h.apply(&deployment("web", 2, "linux"));

    let pods = eventually("two runner pods", WAIT, || async {
        let p = pods(&h).await;
        (p.len() == 2).then_some(p)
    })
    .await;
    let sets = h
        .api::<RunnerReplicaSet>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(sets.len(), 1);
    assert!(
        sets[0].name_any().starts_with("web-"),
        "{}",
        sets[0].name_any()
    );

    let mut secret_names = std::collections::BTreeSet::new();
    for pod in &pods {
        let spec = pod.spec.as_ref().unwrap();
        let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["runner", "docker"]);
        let runner = &spec.containers[0];
        let token = runner
            .env
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.name == "RUNNER_TOKEN")
            .unwrap();
        assert!(
            token.value.is_none(),
            "a literal token leaked into the pod spec"
        );
        let secret_name = &token
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap()
            .name;
        secret_names.insert(secret_name.clone());
        let secret = h.api::<Secret>().get(secret_name).await.unwrap();
        let issued = String::from_utf8(secret.data.unwrap()["runner_token"].0.clone()).unwrap();
        assert!(!issued.is_empty());
        // The token is a real one from (simulated) GitHub: registration with it succeeds.
        let runner_name = pod.name_any();
        let request: ghsim::world::RegisterRunner = serde_json::from_value(serde_json::json!({
            "url": format!("{}octo/app", h.url), "token": issued, "name": runner_name,
            "labels": ["linux"], "ephemeral": true,
        }))
        .unwrap();
        let registered = h
            .sim
            .update(|w, now| w.register_runner(request, now).is_ok());
        assert!(registered, "ghsim refused the token Hangar obtained");
    }
    // Runners report Pending until GitHub knows them.
    let runners = h
        .api::<Runner>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(runners.len(), 2);

    // A token is the scope's, not a runner's: both pods read one Secret, and no Secret per
    // Runner is written (it cost two apiserver writes per job).
    assert_eq!(
        secret_names.len(),
        1,
        "one registration Secret per scope: {secret_names:?}"
    );
    let shared = secret_names.into_iter().next().unwrap();
    assert!(shared.starts_with("hangar-registration-repo-"), "{shared}");
    let secrets: Vec<String> = h
        .api::<Secret>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|s| s.name_any())
        .collect();
    assert_eq!(
        secrets,
        std::slice::from_ref(&shared),
        "no per-Runner Secrets"
    );

    // Deleted behind Hangar's back while a pod still waits to start, it is written again.
    h.api::<Secret>()
        .delete(&shared, &Default::default())
        .await
        .unwrap();
    eventually(
        "the shared registration Secret to be rewritten",
        WAIT,
        || async { h.api::<Secret>().get_opt(&shared).await.unwrap().map(drop) },
    )
    .await;

    // Deleted again, then a runner is added: its pod is created at once (the Secret is not
    // re-read on the way) and names the Secret, which its pending pod has written back.
    h.api::<Secret>()
        .delete(&shared, &Default::default())
        .await
        .unwrap();
    h.apply(&deployment("web", 3, "linux"));
    let third = eventually("a third runner pod", WAIT, || async {
        let p = self::pods(&h).await;
        (p.len() == 3).then_some(p)
    })
    .await;
    assert!(third.iter().all(|p| {
        p.spec.as_ref().unwrap().containers[0]
            .env
            .as_ref()
            .unwrap()
            .iter()
            .any(|e| {
                e.value_from
                    .as_ref()
                    .and_then(|v| v.secret_key_ref.as_ref())
                    .is_some_and(|r| r.name == shared)
            })
    }));
    eventually(
        "the shared registration Secret to be written back",
        WAIT,
        || async { h.api::<Secret>().get_opt(&shared).await.unwrap().map(drop) },
    )
    .await;
}

#[tokio::test]
async fn scaling_to_zero_releases_pending_runners() {
    let h = Harness::start("rd-zero").await;
    h.apply(&deployment("zero", 2, "linux"));
    eventually("two pods", WAIT, || async {
        (pods(&h).await.len() == 2).then_some(())
    })
    .await;

    h.apply(&deployment("zero", 0, "linux"));
    eventually("no runners and no pods", WAIT, || async {
        let runners = h
            .api::<Runner>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        (runners.is_empty() && pods(&h).await.is_empty()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_pod_deleted_by_a_user_is_replaced_by_a_new_runner() {
    let h = Harness::start("pod-delete").await;
    h.apply(&deployment("del", 1, "linux"));
    let first = eventually("a pod", WAIT, || async {
        pods(&h).await.into_iter().next()
    })
    .await;
    let first_name = first.name_any();
    h.api::<Pod>()
        .delete(&first_name, &DeleteParams::default())
        .await
        .unwrap();

    let replacement = eventually("a replacement pod", WAIT, || async {
        pods(&h)
            .await
            .into_iter()
            .find(|p| p.name_any() != first_name && p.metadata.deletion_timestamp.is_none())
    })
    .await;
    // The old Runner is deleted (a terminating pod is not counted, so the replacement may come
    // first), and its pod is not resurrected.
    eventually("the old runner to be deleted", WAIT, || async {
        let runners = h
            .api::<Runner>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        runners
            .iter()
            .all(|r| r.name_any() != first_name)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        pods(&h).await.iter().all(|p| p.name_any() != first_name),
        "pod {first_name} was resurrected"
    );
    assert_ne!(replacement.name_any(), first_name);
}

#[tokio::test]
async fn jit_mode_registers_each_runner_with_one_call_and_no_token_in_pods() {
    let h = Harness::start("jit").await;
    h.apply(
        "apiVersion: actions.summerwind.dev/v1alpha1\nkind: RunnerDeployment\nmetadata:\n  name: jit\nspec:\n  replicas: 2\n  template:\n    metadata:\n      annotations:\n        hangar.dev/registration: jit\n    spec:\n      repository: octo/app\n      labels: [linux]\n",
    );
    let pods = eventually("two JIT runner pods", WAIT, || async {
        let p = pods(&h).await;
        (p.len() == 2).then_some(p)
    })
    .await;
    for pod in &pods {
        let runner = &pod.spec.as_ref().unwrap().containers[0];
        let names: Vec<&str> = runner
            .env
            .as_ref()
            .unwrap()
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert!(
            names.contains(&"ACTIONS_RUNNER_INPUT_JITCONFIG"),
            "{names:?}"
        );
        assert!(
            !names.contains(&"RUNNER_TOKEN"),
            "a reusable token reached a JIT pod"
        );
    }
    // JIT registers the runner on the spot: GitHub already knows both (offline) runners.
    let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    let known = h.sim.read(|w, _| {
        w.runners
            .values()
            .filter(|r| names.contains(&r.name))
            .count()
    });
    assert_eq!(known, 2);
    // One registration each, and no second one later (a Runner reconciled again before its
    // store showed its pod would register its runner anew).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let registrations: u64 = ghsim::accounting::snapshot(&h.sim)
        .api_calls
        .iter()
        .filter(|c| c.endpoint.ends_with("/generate-jitconfig"))
        .map(|c| c.calls)
        .sum();
    assert_eq!(registrations, 2, "one JIT registration per runner");
}

#[tokio::test]
async fn github_server_errors_delay_but_do_not_prevent_runner_creation() {
    let h = Harness::start("faults").await;
    h.sim.set_faults(ghsim::Faults {
        server_error_rate: 0.5,
        ..ghsim::Faults::default()
    });
    h.apply(&deployment("flaky", 3, "linux"));
    eventually(
        "three runner pods despite 5xx",
        Duration::from_secs(120),
        || async { (pods(&h).await.len() == 3).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn fields_hangar_ignores_are_a_condition_and_one_warning_until_removed() {
    let h = Harness::start("rd-ignored").await;
    let legacy = |replicas: i32| {
        format!(
            "apiVersion: actions.summerwind.dev/v1alpha1\nkind: RunnerDeployment\nmetadata:\n  name: legacy\nspec:\n  replicas: {replicas}\n  minReplicas: 1\n  maxReplicas: 3\n  template:\n    spec:\n      repository: octo/app\n      podTemplateName: job\n"
        )
    };
    let fields_honored = || async {
        h.api::<hangar_api::RunnerDeployment>()
            .get("legacy")
            .await
            .unwrap()
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "FieldsHonored")
    };
    let events = || async {
        h.api::<k8s_openapi::api::events::v1::Event>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("FieldsIgnored"))
            .collect::<Vec<_>>()
    };
    // Repeats of one event are counted in its series.
    let warnings = || async {
        events()
            .await
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum::<i32>()
    };
    h.apply(&legacy(0));
    let condition = eventually("a False FieldsHonored condition", WAIT, || async {
        fields_honored().await.filter(|c| c.status == "False")
    })
    .await;
    assert_eq!(condition.reason, "FieldsIgnored");
    for field in [
        "spec.minReplicas",
        "spec.maxReplicas",
        "spec.template.spec.podTemplateName",
    ] {
        assert!(condition.message.contains(field), "{condition:?}");
    }
    eventually("a FieldsIgnored Warning event", WAIT, || async {
        (warnings().await >= 1).then_some(())
    })
    .await;
    // Reconciles that find the same fields say nothing new.
    h.apply(&legacy(1));
    eventually("the new replica count applied", WAIT, || async {
        (pods(&h).await.len() == 1).then_some(())
    })
    .await;
    assert_eq!(
        warnings().await,
        1,
        "one warning, not one per reconcile: {:#?}",
        events().await
    );

    // Removing them (server-side apply drops what the manifest no longer sets) turns it True.
    h.apply(&deployment("legacy", 1, "linux"));
    eventually("a True FieldsHonored condition", WAIT, || async {
        fields_honored().await.filter(|c| c.status == "True")
    })
    .await;
    // A deployment that never set one has no such condition.
    h.apply(&deployment("plain", 0, "linux"));
    eventually("plain reconciled", WAIT, || async {
        h.api::<hangar_api::RunnerDeployment>()
            .get("plain")
            .await
            .unwrap()
            .status
            .and_then(|s| s.conditions)
            .filter(|c| !c.is_empty())
    })
    .await
    .iter()
    .for_each(|c| assert_ne!(c.type_, "FieldsHonored"));
}

#[tokio::test]
async fn a_runner_pod_has_each_env_name_once_and_the_users_value_wins() {
    let h = Harness::start("rd-env").await;
    // The user sets names Hangar sets too, and one name twice.
    h.apply(
        "apiVersion: actions.summerwind.dev/v1alpha1\nkind: RunnerDeployment\nmetadata:\n  name: env\nspec:\n  replicas: 1\n  template:\n    spec:\n      repository: octo/app\n      labels: [linux]\n      env:\n        - {name: RUNNER_LABELS, value: mine}\n        - {name: DOCKER_HOST, value: tcp://docker:2375}\n        - {name: EXTRA, value: first}\n        - {name: EXTRA, value: second}\n",
    );
    let pod = eventually("the runner pod", WAIT, || async { pods(&h).await.pop() }).await;
    let spec = pod.spec.expect("a pod spec");
    for container in &spec.containers {
        let names: Vec<&str> = container
            .env
            .iter()
            .flatten()
            .map(|e| e.name.as_str())
            .collect();
        let unique: std::collections::BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(
            names.len(),
            unique.len(),
            "container {} repeats an env name: {names:?}",
            container.name
        );
    }
    let runner = spec
        .containers
        .iter()
        .find(|c| c.name == "runner")
        .expect("the runner container");
    let value = |name: &str| {
        runner
            .env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    assert_eq!(value("RUNNER_LABELS").as_deref(), Some("mine"));
    assert_eq!(value("DOCKER_HOST").as_deref(), Some("tcp://docker:2375"));
    assert_eq!(value("EXTRA").as_deref(), Some("first"));
    assert_eq!(value("RUNNER_NAME"), Some(pod.metadata.name.unwrap()));
}
