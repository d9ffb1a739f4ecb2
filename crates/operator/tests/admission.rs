//! The admission webhooks against the real control plane: the apiserver itself calls Hangar's
//! HTTPS server (on loopback, trusted through the `caBundle` Hangar keeps current), for pods
//! and RunnerDeployments created in this test's namespace only.
//!
//! The cluster may be shared with other tests: the webhook configurations carry a
//! namespaceSelector on a label only this test's namespace has, and a drop guard deletes them
//! even when an assertion fails.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hangar::admission::configurations::{Endpoint, Registration};
use hangar::admission::{Admission, AdmissionConfig, certs::CertPolicy, registration};
use hangar::credentials::GitHubClients;
use hangar_github::{
    ClientOptions, ClientRegistry, Credentials, Endpoint as GitHubEndpoint, GitHubApi, RetryPolicy,
    Scope, Secret as GhSecret,
};
use hangar_testkit::clock::OffsetClock;
use hangar_testkit::eventually::eventually;
use hangar_testkit::{TestCluster, TestNamespace, crds};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const DAY: Duration = Duration::from_secs(24 * 3600);

/// Deletes the webhook configurations when dropped (also on panic), on its own runtime.
struct ConfigurationGuard {
    kubeconfig: std::path::PathBuf,
    mutating: String,
    validating: String,
}

impl Drop for ConfigurationGuard {
    fn drop(&mut self) {
        hangar_testkit::cleanup::delete_webhook_configurations(
            &self.kubeconfig,
            &self.mutating,
            &self.validating,
        );
    }
}

fn runner_pod(name: Option<&str>, env: serde_json::Value) -> Pod {
    let mut metadata = json!({"labels": {
        "actions-runner-controller/inject-registration-token": "true",
        "runnerset-name": "ci"}});
    match name {
        Some(n) => metadata["name"] = json!(n),
        None => metadata["generateName"] = json!("ci-"),
    }
    serde_json::from_value(json!({
        "metadata": metadata,
        "spec": {
            "restartPolicy": "Always",
            // Never scheduled: the test only looks at what admission stored.
            "nodeSelector": {"hangar.dev/test-no-such-node": "true"},
            "containers": [{"name": "runner", "image": "summerwind/actions-runner:latest", "env": env}]
        }
    }))
    .unwrap()
}

/// `pod` owned by a Runner of its name, which is created (scope from the pod's env) unless it
/// exists: admission grants a pod only what its owner chain grants. No controller runs here,
/// so the Runner makes no pod of its own.
async fn owned(runners: &Api<hangar_api::Runner>, mut pod: Pod) -> Pod {
    let name = pod.metadata.name.clone().expect("a named pod");
    let env = env_of(&pod, "RUNNER_ORG")
        .map(|e| ("organization", e.value.unwrap_or_default()))
        .or_else(|| {
            env_of(&pod, "RUNNER_REPO").map(|e| ("repository", e.value.unwrap_or_default()))
        })
        .expect("a scope in the pod's env");
    let runner = match runners.get_opt(&name).await.unwrap() {
        Some(r) => r,
        None => {
            let r: hangar_api::Runner = serde_json::from_value(json!({
                "apiVersion": "actions.summerwind.dev/v1alpha1", "kind": "Runner",
                "metadata": {"name": name},
                "spec": {env.0: env.1},
            }))
            .unwrap();
            runners.create(&PostParams::default(), &r).await.unwrap()
        }
    };
    pod.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "actions.summerwind.dev/v1alpha1".into(),
            kind: "Runner".into(),
            name,
            uid: runner.metadata.uid.unwrap(),
            controller: Some(true),
            block_owner_deletion: None,
        },
    ]);
    pod
}

fn env_of(pod: &Pod, name: &str) -> Option<k8s_openapi::api::core::v1::EnvVar> {
    pod.spec.as_ref()?.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .cloned()
}

fn error_message(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message,
        other => other.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_calls_the_webhooks_and_they_survive_a_ca_rotation() {
    let started = Instant::now();
    let cluster = TestCluster::get();
    let client: Client = cluster.client().await;
    crds::install(&client).await;
    let ns = TestNamespace::create(cluster, "admission").await;
    let ns_name = ns.name().to_owned();

    // A label only this namespace carries scopes the webhooks to it.
    let selector_key = "hangar.dev/admission-test";
    Api::<Namespace>::all(client.clone())
        .patch(
            &ns_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {selector_key: ns_name}}})),
        )
        .await
        .unwrap();

    // GitHub: ghsim on loopback; no retries, so "GitHub down" answers at once.
    let sim = ghsim::Sim::new(ghsim::SimConfig::default());
    sim.update(|w, _| {
        w.add_pat("ghp_admission", "test");
        w.add_org("octo", None);
        w.add_repo("octo", "app", true);
    });
    let gh_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gh_url = format!("http://{}/", gh_listener.local_addr().unwrap());
    let gh_server = tokio::spawn({
        let sim = sim.clone();
        async move {
            let _ = ghsim::serve(gh_listener, sim, std::future::pending()).await;
        }
    });
    let options = ClientOptions {
        retry: RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        },
        ..ClientOptions::default()
    };
    let registry = Arc::new(ClientRegistry::new(
        GitHubEndpoint::custom(&gh_url, &gh_url).unwrap(),
        options,
    ));
    let github: Arc<dyn GitHubApi> = registry
        .client(Credentials::Token(GhSecret::new("ghp_admission")))
        .unwrap();
    let clients = Arc::new(GitHubClients::new(github, Some(registry)));

    // The admission server on a free loopback port, its first certificates issued 450 days
    // "ago" with 600-day lifetimes: valid now, and the CA due for renewal once the clock is
    // advanced to the present.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("https://{}", listener.local_addr().unwrap());
    let mut registration = Registration::new(Endpoint::Url(base));
    registration.mutating_name = format!("{ns_name}-mutating");
    registration.validating_name = format!("{ns_name}-validating");
    registration.create_if_absent = true;
    registration.namespace_selector = Some(LabelSelector {
        match_labels: Some([(selector_key.to_owned(), ns_name.clone())].into()),
        match_expressions: None,
    });
    let _guard = ConfigurationGuard {
        kubeconfig: cluster.kubeconfig().to_owned(),
        mutating: registration.mutating_name.clone(),
        validating: registration.validating_name.clone(),
    };
    let mut config = AdmissionConfig::new(registration.clone(), &ns_name);
    config.policy = CertPolicy {
        ca_validity: 600 * DAY,
        leaf_validity: 600 * DAY,
    };
    config.cert_check_interval = Duration::from_secs(1);
    let clock = Arc::new(OffsetClock::behind(450 * DAY));
    let admission = Admission::new(client.clone(), clients, clock.clone(), config);
    let certs = admission.certs.clone();
    let server = tokio::spawn(admission.serve(listener, std::future::pending()));

    eprintln!("server started at {:?}", started.elapsed());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns_name);
    let runners: Api<hangar_api::Runner> = Api::namespaced(client.clone(), &ns_name);
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());

    // Wait until the apiserver routes pods to the webhook: a dry-run create comes back mutated.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    eventually(
        "the pod webhook to be active",
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            let dry = dry.clone();
            let runners = runners.clone();
            async move {
                let probe = owned(
                    &runners,
                    runner_pod(
                        Some("probe"),
                        json!([{"name": "RUNNER_ORG", "value": "octo"}]),
                    ),
                )
                .await;
                let created = pods.create(&dry, &probe).await.ok()?;
                env_of(&created, "RUNNER_NAME").map(|_| ())
            }
        },
    )
    .await;
    eprintln!("webhook active after {:?}", started.elapsed());

    eprintln!("phase 1 named pod at {:?}", started.elapsed());
    // 1. A StatefulSet-style pod (name known) gets its name, the Secret reference,
    //    restartPolicy Never and the expiry annotation.
    let created = pods
        .create(
            &PostParams::default(),
            &owned(
                &runners,
                runner_pod(
                    Some("ci-0"),
                    json!([{"name": "RUNNER_ORG", "value": "octo"}]),
                ),
            )
            .await,
        )
        .await
        .unwrap();
    let stored = pods.get("ci-0").await.unwrap();
    assert_eq!(created.metadata.uid, stored.metadata.uid);
    let secret_name = registration::secret_name(&Scope::org("octo"), None);
    assert_eq!(
        env_of(&stored, "RUNNER_NAME").unwrap().value.as_deref(),
        Some("ci-0")
    );
    let token_ref = env_of(&stored, "RUNNER_TOKEN")
        .unwrap()
        .value_from
        .unwrap()
        .secret_key_ref
        .unwrap();
    assert_eq!(token_ref.name, secret_name);
    assert_eq!(token_ref.key, "runner_token");
    assert!(env_of(&stored, "RUNNER_TOKEN").unwrap().value.is_none());
    assert_eq!(
        stored.spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("Never")
    );
    let expires_at = stored.metadata.annotations.as_ref().unwrap()
        [hangar_api::annotation::TOKEN_EXPIRES_AT]
        .clone();
    let expiry: jiff::Timestamp = expires_at.parse().unwrap();
    assert!(expiry > jiff::Timestamp::now());
    let secret = Api::<Secret>::namespaced(client.clone(), &ns_name)
        .get(&secret_name)
        .await
        .unwrap();
    let data = secret.data.unwrap();
    assert!(!data["runner_token"].0.is_empty());
    assert_eq!(data["expires_at"].0, expires_at.as_bytes());

    // A generateName pod cannot be its owner's pod (a Runner's pod has the Runner's name, a
    // StatefulSet's an ordinal): it is refused, saying why.
    let message = error_message(
        pods.create(
            &PostParams::default(),
            &runner_pod(None, json!([{"name": "RUNNER_ORG", "value": "octo"}])),
        )
        .await
        .expect_err("a pod without a trusted owner must be refused"),
    );
    assert!(
        message.contains("no runner registration for this pod")
            && message.contains("no controller owner"),
        "{message}"
    );

    eprintln!("phase 2 github down at {:?}", started.elapsed());
    // 2. GitHub down (every request 502) and no token for the scope yet: the pod is refused
    //    with the reason.
    sim.set_faults(ghsim::Faults {
        server_error_rate: 1.0,
        ..ghsim::Faults::default()
    });
    let refused = pods
        .create(
            &PostParams::default(),
            &owned(
                &runners,
                runner_pod(
                    Some("app-0"),
                    json!([{"name": "RUNNER_REPO", "value": "octo/app"}]),
                ),
            )
            .await,
        )
        .await
        .expect_err("a pod without a credential must be refused");
    let message = error_message(refused);
    assert!(
        message.contains("cannot get a registration token for repository octo/app from GitHub")
            && message.contains("The pod is refused"),
        "{message}"
    );
    assert!(pods.get_opt("app-0").await.unwrap().is_none());
    sim.set_faults(ghsim::Faults::default());

    eprintln!("phase 3 validation at {:?}", started.elapsed());
    // 3. An invalid RunnerDeployment is refused with a message naming the field; a valid one is
    //    accepted.
    let deployments: Api<hangar_api::RunnerDeployment> = Api::namespaced(client.clone(), &ns_name);
    let invalid: hangar_api::RunnerDeployment = serde_json::from_value(json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1", "kind": "RunnerDeployment",
        "metadata": {"name": "bad"},
        "spec": {"template": {"spec": {"organization": "octo", "labels": ["linux,gpu"]}}}
    }))
    .unwrap();
    let message = error_message(
        deployments
            .create(&PostParams::default(), &invalid)
            .await
            .expect_err("the invalid RunnerDeployment must be refused"),
    );
    assert!(
        message.contains("RunnerDeployment bad is invalid: spec.template.spec.labels[0]")
            && message.contains("contains a comma"),
        "{message}"
    );
    let mut valid = invalid.clone();
    valid.metadata.name = Some("good".into());
    valid.spec.template.spec.config.labels = Some(vec!["linux".into(), "gpu".into()]);
    deployments
        .create(&PostParams::default(), &valid)
        .await
        .unwrap();
    // A field Hangar does not act on is accepted with a warning that says what to use.
    let legacy = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1", "kind": "RunnerDeployment",
        "metadata": {"name": "legacy", "namespace": ns_name},
        "spec": {"minReplicas": 1, "template": {"spec": {"organization": "octo"}}}
    });
    let manifest = std::env::temp_dir().join(format!("{ns_name}-legacy.json"));
    std::fs::write(&manifest, legacy.to_string()).unwrap();
    let applied = cluster
        .kubectl()
        .args(["apply", "--server-side", "-f"])
        .arg(&manifest)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&manifest);
    let stderr = String::from_utf8_lossy(&applied.stderr);
    assert!(applied.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: spec.minReplicas: ignored by Hangar")
            && stderr.contains("HorizontalRunnerAutoscaler"),
        "kubectl printed no warning for spec.minReplicas: {stderr}"
    );

    eprintln!("phase 4 rotation at {:?}", started.elapsed());
    // 4. CA rotation: back to the present, the CA is due. The loop renews it, the bundle
    //    carries the new and the old CA, the new certificate is served, and admission works.
    let bundle_of = |c: &MutatingWebhookConfiguration| {
        c.webhooks.as_ref().unwrap()[0]
            .client_config
            .ca_bundle
            .clone()
            .unwrap()
            .0
    };
    let before = bundle_of(&mutating.get(&registration.mutating_name).await.unwrap());
    let served_before = certs.cert().current_pem().unwrap();
    // Pods are created throughout the rotation by four loops, as StatefulSet controllers
    // would: the apiserver must trust every certificate served, before and after the swap.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let creators: Vec<_> = (0..4)
        .map(|loop_id| {
            let (pods, runners, stop) = (pods.clone(), runners.clone(), stop.clone());
            tokio::spawn(async move {
                let mut created = 0;
                let mut failures = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let name = format!("rot-{loop_id}-{}", created + failures.len());
                    let pod = owned(
                        &runners,
                        runner_pod(
                            Some(&name),
                            json!([{"name": "RUNNER_ORG", "value": "octo"}]),
                        ),
                    )
                    .await;
                    match pods.create(&PostParams::default(), &pod).await {
                        Ok(_) => created += 1,
                        Err(e) => failures.push(format!("{name}: {}", error_message(e))),
                    }
                }
                (created, failures)
            })
        })
        .collect();
    // Some pods before the rotation is due.
    tokio::time::sleep(Duration::from_millis(500)).await;
    clock.advance(450 * DAY);
    let after = eventually("the caBundle to change", Duration::from_secs(30), || {
        let mutating = mutating.clone();
        let name = registration.mutating_name.clone();
        let before = before.clone();
        async move {
            let bundle = bundle_of(&mutating.get(&name).await.ok()?);
            (bundle != before).then_some(bundle)
        }
    })
    .await;
    let after = String::from_utf8(after).unwrap();
    assert_eq!(after.matches("BEGIN CERTIFICATE").count(), 2, "{after}");
    assert!(after.contains(std::str::from_utf8(&before).unwrap().trim()));
    eventually(
        "the new certificate to be served",
        Duration::from_secs(30),
        || {
            let certs = certs.clone();
            let served_before = served_before.clone();
            async move { (certs.cert().current_pem()? != served_before).then_some(()) }
        },
    )
    .await;
    // And some after the new certificate is served.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let (mut created, mut failures) = (0, Vec::new());
    for creator in creators {
        let (c, f) = creator.await.unwrap();
        created += c;
        failures.extend(f);
    }
    eprintln!("{created} pods created across the rotation");
    assert!(
        failures.is_empty(),
        "pod creation failed during the rotation ({created} succeeded): {failures:#?}"
    );
    assert!(
        created >= 10,
        "only {created} pods created across the rotation"
    );
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let v = validating.get(&registration.validating_name).await.unwrap();
    for hook in v.webhooks.unwrap() {
        assert_eq!(hook.client_config.ca_bundle.unwrap().0, after.as_bytes());
    }
    let rotated = pods
        .create(
            &PostParams::default(),
            &owned(
                &runners,
                runner_pod(
                    Some("ci-1"),
                    json!([{"name": "RUNNER_ORG", "value": "octo"}]),
                ),
            )
            .await,
        )
        .await
        .unwrap();
    assert_eq!(
        env_of(&rotated, "RUNNER_NAME").unwrap().value.as_deref(),
        Some("ci-1")
    );
    let message = error_message(
        deployments
            .create(&PostParams::default(), &{
                let mut again = invalid.clone();
                again.metadata.name = Some("bad-again".into());
                again
            })
            .await
            .expect_err("still validated after the rotation"),
    );
    assert!(message.contains("contains a comma"), "{message}");

    eprintln!("phase end at {:?}", started.elapsed());
    server.abort();
    gh_server.abort();
}
