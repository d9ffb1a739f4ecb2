//! The MutatingWebhookConfiguration and ValidatingWebhookConfiguration that send requests to
//! Hangar, and keeping their `caBundle` equal to the CA the serving certificate chains to.
//!
//! Decision: by default Hangar only *patches* `caBundle` of configurations someone else created
//! (the Helm chart, or a manifest), by name. That needs `get` and `patch` on exactly those two
//! names (RBAC `resourceNames`) — creating them would need cluster-wide `create` on every
//! webhook configuration, which RBAC cannot restrict by name, i.e. the power to intercept any
//! request in the cluster. For the local stack, `create_if_absent` additionally creates them
//! from [`mutating`] and [`validating`] (create-if-absent, 409 tolerated) — opt-in.
//!
//! Patches are JSON patches that `test` each webhook's name at its index before replacing its
//! `caBundle`, so a concurrent edit of the list makes the patch fail (and the next sync
//! retry) instead of writing a bundle onto the wrong webhook.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// Path of the RunnerSet pod webhook (ARC's).
pub const POD_PATH: &str = "/mutate-runner-set-pod";

/// Kinds validated, with their resource (plural) and the path serving them (ARC's paths).
pub const VALIDATED: [(&str, &str, &str); 4] = [
    (
        "Runner",
        "runners",
        "/validate-actions-summerwind-dev-v1alpha1-runner",
    ),
    (
        "RunnerReplicaSet",
        "runnerreplicasets",
        "/validate-actions-summerwind-dev-v1alpha1-runnerreplicaset",
    ),
    (
        "RunnerDeployment",
        "runnerdeployments",
        "/validate-actions-summerwind-dev-v1alpha1-runnerdeployment",
    ),
    (
        "RunnerSet",
        "runnersets",
        "/validate-actions-summerwind-dev-v1alpha1-runnerset",
    ),
];

/// Default names of the two configurations (ARC's chart uses the same pattern).
pub const DEFAULT_MUTATING_NAME: &str = "hangar-mutating-webhook-configuration";
/// See [`DEFAULT_MUTATING_NAME`].
pub const DEFAULT_VALIDATING_NAME: &str = "hangar-validating-webhook-configuration";

/// How the apiserver reaches the webhook server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A URL base, e.g. `https://127.0.0.1:9443` (the local stack: apiserver on loopback).
    Url(String),
    /// A Service in the cluster.
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its port.
        port: i32,
    },
}

impl Endpoint {
    /// The names the serving certificate must carry for this endpoint.
    pub fn certificate_names(&self) -> Vec<String> {
        match self {
            Self::Url(base) => {
                let host = base
                    .split("://")
                    .nth(1)
                    .unwrap_or(base)
                    .split('/')
                    .next()
                    .unwrap_or_default();
                // [::1]:9443 → ::1; host:port → host.
                let host = if let Some(rest) = host.strip_prefix('[') {
                    rest.split(']').next().unwrap_or_default()
                } else {
                    host.rsplit_once(':').map_or(host, |(h, _)| h)
                };
                vec![host.to_owned()]
            }
            Self::Service {
                namespace, name, ..
            } => vec![
                name.clone(),
                format!("{name}.{namespace}"),
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
            ],
        }
    }

    fn client_config(&self, path: &str, ca_bundle: &[u8]) -> WebhookClientConfig {
        let ca = (!ca_bundle.is_empty()).then(|| ByteString(ca_bundle.to_vec()));
        match self {
            Self::Url(base) => WebhookClientConfig {
                url: Some(format!("{}{path}", base.trim_end_matches('/'))),
                ca_bundle: ca,
                service: None,
            },
            Self::Service {
                namespace,
                name,
                port,
            } => WebhookClientConfig {
                url: None,
                ca_bundle: ca,
                service: Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.to_owned()),
                    port: Some(*port),
                }),
            },
        }
    }
}

/// Everything about how the configurations look and are kept.
#[derive(Debug, Clone)]
pub struct Registration {
    /// Name of the MutatingWebhookConfiguration.
    pub mutating_name: String,
    /// Name of the ValidatingWebhookConfiguration.
    pub validating_name: String,
    /// Where the apiserver sends requests.
    pub endpoint: Endpoint,
    /// Create the configurations when they do not exist (needs RBAC `create`).
    pub create_if_absent: bool,
    /// Only namespaces matching this selector are served (created configurations only).
    pub namespace_selector: Option<LabelSelector>,
}

impl Registration {
    /// Default names, patch-only.
    pub fn new(endpoint: Endpoint) -> Self {
        Self {
            mutating_name: DEFAULT_MUTATING_NAME.into(),
            validating_name: DEFAULT_VALIDATING_NAME.into(),
            endpoint,
            create_if_absent: false,
            namespace_selector: None,
        }
    }
}

/// The MutatingWebhookConfiguration: RunnerSet pods (label
/// `actions-runner-controller/inject-registration-token=true`), CREATE, failing closed.
pub fn mutating(reg: &Registration, ca_bundle: &[u8]) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(reg.mutating_name.clone()),
            labels: Some(managed_by()),
            ..Default::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: "mutate-runner-set-pod.webhook.actions.summerwind.dev".into(),
            admission_review_versions: vec!["v1".into()],
            client_config: reg.endpoint.client_config(POD_PATH, ca_bundle),
            failure_policy: Some("Fail".into()),
            match_policy: Some("Equivalent".into()),
            namespace_selector: reg.namespace_selector.clone(),
            object_selector: Some(LabelSelector {
                match_labels: Some(
                    [(
                        hangar_api::label::INJECT_REGISTRATION_TOKEN.to_owned(),
                        hangar_api::label::INJECT_REGISTRATION_TOKEN_VALUE.to_owned(),
                    )]
                    .into(),
                ),
                match_expressions: None,
            }),
            reinvocation_policy: Some("Never".into()),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".into()]),
                operations: Some(vec!["CREATE".into()]),
                resources: Some(vec!["pods".into()]),
                scope: Some("Namespaced".into()),
            }]),
            // It writes the registration Secret, except on dry runs.
            side_effects: "NoneOnDryRun".into(),
            timeout_seconds: Some(15),
            match_conditions: None,
        }]),
    }
}

/// Name of the runner-pod deletion guard's webhook ([`super::retire`]).
pub const RUNNER_POD_DELETION_WEBHOOK: &str = "guard-runner-pod-deletion.hangar.dev";
/// Name of the RunnerSet StatefulSet deletion guard's webhook ([`super::retire`]).
pub const RUNNER_STATEFUL_SET_DELETION_WEBHOOK: &str =
    "guard-runner-statefulset-deletion.hangar.dev";

/// The ValidatingWebhookConfiguration: one webhook per kind (CREATE and UPDATE), then the
/// deletion guards (DELETE of pods labelled `actions-runner` and of StatefulSets labelled
/// `runner-template-hash`). All fail open: Hangar being down must never block a delete, nor an edit
/// of a runner object — least of all removing a finalizer by hand, the way out when the
/// controller is gone — and the CRD schema's own rules still refuse what cannot work.
pub fn validating(reg: &Registration, ca_bundle: &[u8]) -> ValidatingWebhookConfiguration {
    let mut webhooks: Vec<ValidatingWebhook> = VALIDATED
        .iter()
        .map(|(kind, resource, path)| ValidatingWebhook {
            name: format!("validate.{}.actions.summerwind.dev", kind.to_lowercase()),
            admission_review_versions: vec!["v1".into()],
            client_config: reg.endpoint.client_config(path, ca_bundle),
            failure_policy: Some("Ignore".into()),
            match_policy: Some("Equivalent".into()),
            namespace_selector: reg.namespace_selector.clone(),
            object_selector: None,
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![hangar_api::GROUP.into()]),
                api_versions: Some(vec![hangar_api::VERSION.into()]),
                operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                resources: Some(vec![(*resource).into()]),
                scope: Some("Namespaced".into()),
            }]),
            side_effects: "None".into(),
            timeout_seconds: Some(5),
            match_conditions: None,
        })
        .collect();
    for (name, path, group, resource, label) in [
        (
            RUNNER_POD_DELETION_WEBHOOK,
            super::retire::POD_PATH,
            "",
            "pods",
            hangar_api::label::ACTIONS_RUNNER,
        ),
        (
            RUNNER_STATEFUL_SET_DELETION_WEBHOOK,
            super::retire::STATEFUL_SET_PATH,
            "apps",
            "statefulsets",
            // ARC's RunnerSet StatefulSets carry `runnerset-name` on their pods only.
            hangar_api::label::RUNNER_TEMPLATE_HASH,
        ),
    ] {
        webhooks.push(ValidatingWebhook {
            name: name.into(),
            admission_review_versions: vec!["v1".into()],
            client_config: reg.endpoint.client_config(path, ca_bundle),
            failure_policy: Some("Ignore".into()),
            match_policy: Some("Equivalent".into()),
            namespace_selector: reg.namespace_selector.clone(),
            object_selector: Some(LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: label.into(),
                    operator: "Exists".into(),
                    values: None,
                }]),
            }),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![group.into()]),
                api_versions: Some(vec!["v1".into()]),
                operations: Some(vec!["DELETE".into()]),
                resources: Some(vec![resource.into()]),
                scope: Some("Namespaced".into()),
            }]),
            side_effects: "None".into(),
            timeout_seconds: Some(5),
            match_conditions: None,
        });
    }
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(reg.validating_name.clone()),
            labels: Some(managed_by()),
            ..Default::default()
        },
        webhooks: Some(webhooks),
    }
}

fn managed_by() -> std::collections::BTreeMap<String, String> {
    [(
        "app.kubernetes.io/managed-by".to_owned(),
        "hangar".to_owned(),
    )]
    .into()
}

/// JSON patch ops setting `caBundle` of every webhook in `webhooks` (name, current bundle)
/// whose bundle differs; empty when all are current.
pub fn ca_bundle_patch(webhooks: &[(String, Option<Vec<u8>>)], bundle: &[u8]) -> Vec<Value> {
    let encoded = serde_json::to_value(ByteString(bundle.to_vec())).unwrap_or_default();
    let mut ops = Vec::new();
    for (i, (name, current)) in webhooks.iter().enumerate() {
        if current.as_deref() == Some(bundle) {
            continue;
        }
        ops.push(json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": name}));
        ops.push(
            json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"),
                        "value": encoded}),
        );
    }
    ops
}

/// Why a configuration could not be brought up to date.
#[derive(Debug, thiserror::Error)]
#[error("failed to {action} {kind} {name}: {source}")]
pub struct ConfigurationError {
    action: &'static str,
    kind: &'static str,
    name: String,
    source: kube::Error,
}

/// What [`sync_ca_bundles`] found, per configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synced {
    /// Already current.
    Current,
    /// Patched (or created).
    Updated,
    /// Does not exist (and is not ours to create).
    Missing,
}

/// Brings both configurations' `caBundle` to `bundle`, creating them first when allowed.
pub async fn sync_ca_bundles(
    client: &Client,
    reg: &Registration,
    bundle: &[u8],
) -> Result<[Synced; 2], ConfigurationError> {
    let mutating_api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating_api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let m = sync_one(
        &mutating_api,
        &reg.mutating_name,
        "MutatingWebhookConfiguration",
        reg.create_if_absent.then(|| mutating(reg, bundle)),
        |c: &MutatingWebhookConfiguration| {
            c.webhooks
                .iter()
                .flatten()
                .map(|w| {
                    (
                        w.name.clone(),
                        w.client_config.ca_bundle.clone().map(|b| b.0),
                    )
                })
                .collect()
        },
        bundle,
    )
    .await?;
    let v = sync_one(
        &validating_api,
        &reg.validating_name,
        "ValidatingWebhookConfiguration",
        reg.create_if_absent.then(|| validating(reg, bundle)),
        |c: &ValidatingWebhookConfiguration| {
            c.webhooks
                .iter()
                .flatten()
                .map(|w| {
                    (
                        w.name.clone(),
                        w.client_config.ca_bundle.clone().map(|b| b.0),
                    )
                })
                .collect()
        },
        bundle,
    )
    .await?;
    Ok([m, v])
}

async fn sync_one<K>(
    api: &Api<K>,
    name: &str,
    kind: &'static str,
    create: Option<K>,
    webhooks: impl Fn(&K) -> Vec<(String, Option<Vec<u8>>)>,
    bundle: &[u8],
) -> Result<Synced, ConfigurationError>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let e = |action| {
        move |source| ConfigurationError {
            action,
            kind,
            name: name.to_owned(),
            source,
        }
    };
    let existing = match api.get_opt(name).await.map_err(e("read"))? {
        Some(c) => c,
        None => {
            let Some(desired) = create else {
                return Ok(Synced::Missing);
            };
            match api.create(&PostParams::default(), &desired).await {
                Ok(_) => return Ok(Synced::Updated),
                // Another replica created it: patch what it wrote.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    api.get(name).await.map_err(e("read"))?
                }
                Err(err) => return Err(e("create")(err)),
            }
        }
    };
    let ops = ca_bundle_patch(&webhooks(&existing), bundle);
    if ops.is_empty() {
        return Ok(Synced::Current);
    }
    let patch = serde_json::from_value(Value::Array(ops))
        .map_err(|err| e("build caBundle patch for")(kube::Error::SerdeError(err)))?;
    api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .map_err(e("patch caBundle of"))?;
    Ok(Synced::Updated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_endpoints_name_their_host_and_services_their_dns_names() {
        assert_eq!(
            Endpoint::Url("https://127.0.0.1:9443".into()).certificate_names(),
            ["127.0.0.1"]
        );
        assert_eq!(
            Endpoint::Url("https://[::1]:9443/".into()).certificate_names(),
            ["::1"]
        );
        assert_eq!(
            Endpoint::Url("https://hooks.example:443/base".into()).certificate_names(),
            ["hooks.example"]
        );
        let svc = Endpoint::Service {
            namespace: "hangar-system".into(),
            name: "hangar-webhook".into(),
            port: 443,
        };
        assert!(
            svc.certificate_names()
                .contains(&"hangar-webhook.hangar-system.svc".to_owned())
        );
    }

    #[test]
    fn configurations_point_at_the_endpoint_and_only_the_pod_mutation_fails_closed() {
        let mut reg = Registration::new(Endpoint::Url("https://127.0.0.1:9443/".into()));
        reg.namespace_selector = Some(LabelSelector {
            match_labels: Some([("t".to_owned(), "x".to_owned())].into()),
            match_expressions: None,
        });
        let m = mutating(&reg, b"CA");
        let hook = &m.webhooks.as_ref().unwrap()[0];
        assert_eq!(
            hook.client_config.url.as_deref(),
            Some("https://127.0.0.1:9443/mutate-runner-set-pod")
        );
        assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(hook.namespace_selector, reg.namespace_selector);
        assert_eq!(
            hook.client_config.ca_bundle,
            Some(ByteString(b"CA".to_vec()))
        );
        let v = validating(&reg, b"");
        let hooks = v.webhooks.unwrap();
        assert_eq!(hooks.len(), 6);
        for (guard, name) in hooks[4..].iter().zip([
            RUNNER_POD_DELETION_WEBHOOK,
            RUNNER_STATEFUL_SET_DELETION_WEBHOOK,
        ]) {
            assert_eq!(guard.name, name);
            // Hangar down must never block a delete.
            assert_eq!(guard.failure_policy.as_deref(), Some("Ignore"));
            assert_eq!(guard.namespace_selector, reg.namespace_selector);
        }
        assert!(hooks.iter().all(|h| h.client_config.ca_bundle.is_none()));
        // Hangar down must never block an edit (a finalizer removed by hand) either.
        assert!(
            hooks[..4]
                .iter()
                .all(|h| h.failure_policy.as_deref() == Some("Ignore"))
        );
        assert_eq!(
            hooks[2].client_config.url.as_deref(),
            Some(
                "https://127.0.0.1:9443/validate-actions-summerwind-dev-v1alpha1-runnerdeployment"
            )
        );
    }

    #[test]
    fn the_bundle_patch_touches_only_stale_webhooks_and_tests_their_names() {
        let hooks = vec![
            ("a".to_owned(), Some(b"NEW".to_vec())),
            ("b".to_owned(), Some(b"OLD".to_vec())),
            ("c".to_owned(), None),
        ];
        let ops = ca_bundle_patch(&hooks, b"NEW");
        assert_eq!(
            ops,
            vec![
                json!({"op": "test", "path": "/webhooks/1/name", "value": "b"}),
                json!({"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "TkVX"}),
                json!({"op": "test", "path": "/webhooks/2/name", "value": "c"}),
                json!({"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": "TkVX"}),
            ]
        );
        assert!(ca_bundle_patch(&hooks[..1], b"NEW").is_empty());
    }
}
