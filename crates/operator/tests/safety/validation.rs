//! Promise: validation holds without webhooks. The CRD schemas alone make the apiserver refuse
//! negative counts, impossible ranges and malformed durations, naming the field, while the
//! admission webhook is not installed; ARC's manifests, boundary values included, still apply.
//!
//! The control plane may be shared: the test first checks that no admission webhook for
//! `actions.summerwind.dev` selects its namespace, so every refusal seen here is the schema's.

use hangar_api::validation::MESSAGE_MAX_NOT_BELOW_MIN;
use hangar_api::{
    HorizontalRunnerAutoscaler, Runner, RunnerDeployment, RunnerReplicaSet, RunnerSet,
};
use hangar_testkit::{TestCluster, TestNamespace, crds};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde_json::{Value, json};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Runner,
    RunnerReplicaSet,
    RunnerDeployment,
    RunnerSet,
    Hra,
}

impl Kind {
    fn resource(self) -> ApiResource {
        match self {
            Kind::Runner => ApiResource::erase::<Runner>(&()),
            Kind::RunnerReplicaSet => ApiResource::erase::<RunnerReplicaSet>(&()),
            Kind::RunnerDeployment => ApiResource::erase::<RunnerDeployment>(&()),
            Kind::RunnerSet => ApiResource::erase::<RunnerSet>(&()),
            Kind::Hra => ApiResource::erase::<HorizontalRunnerAutoscaler>(&()),
        }
    }

    /// A minimal valid spec, as in ARC's documentation.
    fn base_spec(self) -> Value {
        match self {
            Kind::Runner => json!({"repository": "octo-org/octo-repo"}),
            Kind::RunnerReplicaSet | Kind::RunnerDeployment => {
                json!({"template": {"spec": {"repository": "octo-org/octo-repo"}}})
            }
            Kind::RunnerSet => json!({
                "repository": "octo-org/octo-repo",
                "selector": {"matchLabels": {"app": "v"}},
                "serviceName": "v",
                "template": {"metadata": {"labels": {"app": "v"}},
                             "spec": {"containers": [{"name": "runner"}]}}
            }),
            Kind::Hra => json!({
                "scaleTargetRef": {"name": "v"},
                "minReplicas": 1,
                "maxReplicas": 3
            }),
        }
    }
}

/// `patch` merged into `base` (objects recursively, everything else replaced).
fn merged(mut base: Value, patch: &Value) -> Value {
    match (&mut base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                let slot = b.remove(k).unwrap_or(Value::Null);
                b.insert(k.clone(), merged(slot, v));
            }
            base
        }
        _ => patch.clone(),
    }
}

fn object(kind: Kind, name: &str, spec: &Value) -> DynamicObject {
    let r = kind.resource();
    serde_json::from_value(json!({
        "apiVersion": r.api_version,
        "kind": r.kind,
        "metadata": {"name": name},
        "spec": merged(kind.base_spec(), spec),
    }))
    .unwrap()
}

async fn create(client: &Client, ns: &str, obj: &DynamicObject, kind: Kind) -> kube::Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kind.resource());
    api.create(&PostParams::default(), obj).await.map(drop)
}

/// CRDs of this build, and a namespace no admission webhook for the Hangar kinds selects.
async fn ready(prefix: &str) -> (Client, TestNamespace) {
    let cluster = TestCluster::get();
    let client = cluster.client().await;
    // Applied again rather than once per process: the control plane may be shared with builds
    // whose CRDs differ, and the last apply wins.
    crds::apply_and_wait(&client, &hangar_api::crds())
        .await
        .expect("CRDs apply");
    let ns = TestNamespace::create(cluster, prefix).await;
    assert_no_webhook_selects(&client, ns.name()).await;
    (client, ns)
}

/// Fails if an admission webhook could see Hangar objects created in `ns`.
async fn assert_no_webhook_selects(client: &Client, ns: &str) {
    let labels = Api::<Namespace>::all(client.clone())
        .get(ns)
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    let lp = Default::default();
    let mut intercepting = vec![];
    for c in Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .list(&lp)
        .await
        .unwrap()
    {
        for w in c.webhooks.unwrap_or_default() {
            if covers_hangar(w.rules.as_deref()) && selects(w.namespace_selector.as_ref(), &labels)
            {
                intercepting.push(format!(
                    "validating {}/{}",
                    c.metadata.name.clone().unwrap_or_default(),
                    w.name
                ));
            }
        }
    }
    for c in Api::<MutatingWebhookConfiguration>::all(client.clone())
        .list(&lp)
        .await
        .unwrap()
    {
        for w in c.webhooks.unwrap_or_default() {
            if covers_hangar(w.rules.as_deref()) && selects(w.namespace_selector.as_ref(), &labels)
            {
                intercepting.push(format!(
                    "mutating {}/{}",
                    c.metadata.name.clone().unwrap_or_default(),
                    w.name
                ));
            }
        }
    }
    assert!(
        intercepting.is_empty(),
        "admission webhooks would see objects in {ns}: {intercepting:?}"
    );
}

fn covers_hangar(rules: Option<&[RuleWithOperations]>) -> bool {
    let group = RunnerDeployment::group(&());
    rules.into_iter().flatten().any(|r| {
        r.api_groups
            .iter()
            .flatten()
            .any(|g| g == "*" || *g == group)
    })
}

/// Whether `selector` selects a namespace with `labels` (no selector selects everything).
fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(s) = selector else { return true };
    let labels_match = s
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_match = s.match_expressions.iter().flatten().all(|e| {
        let have = labels.get(&e.key);
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => have.is_some_and(|h| values.contains(h)),
            "NotIn" => have.is_none_or(|h| !values.contains(h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => true,
        }
    });
    labels_match && expressions_match
}

/// One manifest the schema must refuse: the field the error must name and a fragment of what
/// it must say.
struct Refused {
    kind: Kind,
    spec: Value,
    field: &'static str,
    says: &'static str,
}

fn refused() -> Vec<Refused> {
    let at_least_0 = "greater than or equal to 0";
    let row = |kind, spec, field, says| Refused {
        kind,
        spec,
        field,
        says,
    };
    vec![
        // Replicas of the three scalable kinds.
        row(
            Kind::RunnerDeployment,
            json!({"replicas": -1}),
            "spec.replicas",
            at_least_0,
        ),
        row(
            Kind::RunnerReplicaSet,
            json!({"replicas": -1}),
            "spec.replicas",
            at_least_0,
        ),
        row(
            Kind::RunnerSet,
            json!({"replicas": -1}),
            "spec.replicas",
            at_least_0,
        ),
        // ARC's 2020 autoscaling fields, stored but ignored, still hold no negative count.
        row(
            Kind::RunnerDeployment,
            json!({"minReplicas": -1}),
            "spec.minReplicas",
            at_least_0,
        ),
        row(
            Kind::RunnerDeployment,
            json!({"maxReplicas": -1}),
            "spec.maxReplicas",
            at_least_0,
        ),
        // The runner pod: a negative grace period would not give the runner time to
        // unregister (Kubernetes turns it into 1 second).
        row(
            Kind::Runner,
            json!({"terminationGracePeriodSeconds": -1}),
            "spec.terminationGracePeriodSeconds",
            at_least_0,
        ),
        row(
            Kind::RunnerDeployment,
            json!({"template": {"spec": {"terminationGracePeriodSeconds": -5}}}),
            "spec.template.spec.terminationGracePeriodSeconds",
            at_least_0,
        ),
        row(
            Kind::RunnerSet,
            json!({"template": {"spec": {"terminationGracePeriodSeconds": -5}}}),
            "spec.template.spec.terminationGracePeriodSeconds",
            at_least_0,
        ),
        row(
            Kind::RunnerSet,
            json!({"minReadySeconds": -1}),
            "spec.minReadySeconds",
            at_least_0,
        ),
        row(
            Kind::RunnerSet,
            json!({"revisionHistoryLimit": -1}),
            "spec.revisionHistoryLimit",
            at_least_0,
        ),
        // Docker's network MTU: IPv4's minimum to the largest IP packet.
        row(
            Kind::RunnerDeployment,
            json!({"template": {"spec": {"dockerMTU": 0}}}),
            "spec.template.spec.dockerMTU",
            "greater than or equal to 68",
        ),
        row(
            Kind::Runner,
            json!({"dockerMTU": 70000}),
            "spec.dockerMTU",
            "less than or equal to 65535",
        ),
        row(
            Kind::RunnerSet,
            json!({"dockerMTU": -1400}),
            "spec.dockerMTU",
            "greater than or equal to 68",
        ),
        // The autoscaler.
        row(
            Kind::Hra,
            json!({"minReplicas": 5, "maxReplicas": 2}),
            "spec.maxReplicas",
            MESSAGE_MAX_NOT_BELOW_MIN,
        ),
        row(
            Kind::Hra,
            json!({"minReplicas": -1}),
            "spec.minReplicas",
            at_least_0,
        ),
        row(
            Kind::Hra,
            json!({"minReplicas": 0, "maxReplicas": -1}),
            "spec.maxReplicas",
            at_least_0,
        ),
        row(
            Kind::Hra,
            json!({"scaleDownDelaySecondsAfterScaleOut": -60}),
            "spec.scaleDownDelaySecondsAfterScaleOut",
            at_least_0,
        ),
        row(
            Kind::Hra,
            json!({"scheduledOverrides": [{"startTime": "2024-01-06T00:00:00Z",
                "endTime": "2024-01-08T00:00:00Z", "minReplicas": -1}]}),
            "spec.scheduledOverrides[0].minReplicas",
            at_least_0,
        ),
        row(
            Kind::Hra,
            json!({"capacityReservations": [{"expirationTime": "2030-01-01T00:00:00Z",
                "replicas": -3}]}),
            "spec.capacityReservations[0].replicas",
            at_least_0,
        ),
        row(
            Kind::Hra,
            json!({"metrics": [{"type": "PercentageRunnersBusy", "scaleDownAdjustment": -1}]}),
            "spec.metrics[0].scaleDownAdjustment",
            at_least_0,
        ),
        row(
            Kind::Hra,
            json!({"scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "amount": -1}]}),
            "spec.scaleUpTriggers[0].amount",
            at_least_0,
        ),
        row(
            Kind::Hra,
            json!({"scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "duration": "-5m"}]}),
            "spec.scaleUpTriggers[0].duration",
            "should match",
        ),
        row(
            Kind::Hra,
            json!({"scaleUpTriggers": [{"githubEvent": {"workflowJob": {}},
                "duration": "10 minutes"}]}),
            "spec.scaleUpTriggers[0].duration",
            "should match",
        ),
    ]
}

#[tokio::test]
async fn the_schema_alone_refuses_nonsense_and_names_the_field() {
    let (client, ns) = ready("validation-refused").await;
    let mut wrong = vec![];
    for (i, case) in refused().iter().enumerate() {
        let obj = object(case.kind, &format!("bad-{i}"), &case.spec);
        let what = format!("{:?} {}", case.kind, case.spec);
        match create(&client, ns.name(), &obj, case.kind).await {
            Ok(()) => wrong.push(format!("{what}: accepted")),
            Err(kube::Error::Api(e)) => {
                if e.code != 422
                    || !e.message.contains(case.field)
                    || !e.message.contains(case.says)
                {
                    wrong.push(format!(
                        "{what}: wanted 422 naming {} and saying {:?}, got {}: {}",
                        case.field, case.says, e.code, e.message
                    ));
                }
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} refusals missing:\n{}",
        wrong.len(),
        refused().len(),
        wrong.join("\n")
    );
}

/// The bounds hold on updates too: a valid object cannot be patched into a bad one.
#[tokio::test]
async fn an_update_cannot_make_a_valid_object_invalid() {
    let (client, ns) = ready("validation-update").await;
    let rows = [
        (
            Kind::RunnerDeployment,
            json!({"replicas": 2}),
            json!({"replicas": -2}),
            "spec.replicas",
        ),
        (
            Kind::RunnerSet,
            json!({"replicas": 2}),
            json!({"replicas": -2}),
            "spec.replicas",
        ),
        (
            Kind::Hra,
            json!({"minReplicas": 1, "maxReplicas": 3}),
            json!({"maxReplicas": 0}),
            "spec.maxReplicas",
        ),
    ];
    for (i, (kind, valid, bad, field)) in rows.into_iter().enumerate() {
        let name = format!("upd-{i}");
        create(&client, ns.name(), &object(kind, &name, &valid), kind)
            .await
            .unwrap_or_else(|e| panic!("{kind:?} {valid}: {e}"));
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns.name(), &kind.resource());
        let patch = json!({"spec": bad});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => panic!("{kind:?}: the update to {bad} was accepted"),
            Err(kube::Error::Api(e)) => assert!(
                e.code == 422 && e.message.contains(field),
                "{kind:?} {bad}: {}",
                e.message
            ),
            Err(e) => panic!("{kind:?}: {e}"),
        }
    }
}

/// ARC manifests with the smallest and largest values that make sense apply unchanged, and so
/// does every example.
#[tokio::test]
async fn arc_manifests_at_the_bounds_are_accepted() {
    let (client, ns) = ready("validation-accepted").await;
    let rows = [
        (
            Kind::RunnerDeployment,
            json!({"replicas": 0, "minReplicas": 0, "maxReplicas": 0}),
        ),
        (Kind::RunnerDeployment, json!({"replicas": null})),
        (Kind::RunnerReplicaSet, json!({"replicas": 0})),
        (
            Kind::RunnerSet,
            json!({"replicas": 0, "minReadySeconds": 0, "revisionHistoryLimit": 0,
            "dockerMTU": 68, "template": {"spec": {"terminationGracePeriodSeconds": 0}}}),
        ),
        (
            Kind::Runner,
            json!({"dockerMTU": 65535, "terminationGracePeriodSeconds": 0}),
        ),
        (
            Kind::RunnerDeployment,
            json!({"template": {"spec": {"dockerMTU": 1400, "terminationGracePeriodSeconds": 3600}}}),
        ),
        (
            Kind::Hra,
            json!({"minReplicas": 0, "maxReplicas": 0, "scaleDownDelaySecondsAfterScaleOut": 0,
                "scheduledOverrides": [{"startTime": "2024-01-06T00:00:00Z",
                    "endTime": "2024-01-08T00:00:00Z", "minReplicas": 0}],
                "capacityReservations": [{"expirationTime": "2030-01-01T00:00:00Z",
                    "replicas": 0}],
                "scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "amount": 0,
                    "duration": "0"}]}),
        ),
        (
            Kind::Hra,
            json!({"minReplicas": 2, "maxReplicas": 2,
                "scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "amount": 1,
                    "duration": "1h30m"}],
                "metrics": [{"type": "PercentageRunnersBusy", "scaleUpAdjustment": 0,
                    "scaleDownAdjustment": 0}]}),
        ),
    ];
    for (i, (kind, spec)) in rows.iter().enumerate() {
        create(
            &client,
            ns.name(),
            &object(*kind, &format!("ok-{i}"), spec),
            *kind,
        )
        .await
        .unwrap_or_else(|e| panic!("{kind:?} {spec} was refused: {e}"));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut applied = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let mut value: Value = serde::Deserialize::deserialize(doc).unwrap();
            if value.is_null() {
                continue;
            }
            value["metadata"]["name"] = json!(format!("ex-{applied}-{i}"));
            let kind = match value["kind"].as_str().unwrap_or_default() {
                "Runner" => Kind::Runner,
                "RunnerReplicaSet" => Kind::RunnerReplicaSet,
                "RunnerDeployment" => Kind::RunnerDeployment,
                "RunnerSet" => Kind::RunnerSet,
                "HorizontalRunnerAutoscaler" => Kind::Hra,
                other => panic!("{}: unexpected kind {other}", path.display()),
            };
            let obj: DynamicObject = serde_json::from_value(value).unwrap();
            create(&client, ns.name(), &obj, kind)
                .await
                .unwrap_or_else(|e| panic!("{} was refused: {e}", path.display()));
            applied += 1;
        }
    }
    assert!(applied >= 10, "only {applied} example objects applied");
}
