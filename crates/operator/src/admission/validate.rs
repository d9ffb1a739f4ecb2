//! Validation the CRD schema cannot express, as pure functions of the object.
//!
//! The schema already rejects what ARC's webhook rejected (exactly one scope, a malformed
//! repository, kubernetes container mode without a work volume) and every out-of-range number
//! (negative replicas, counts and grace periods, an impossible dockerMTU; see
//! `hangar_api::validation`), with or without this webhook. What is left is checked here:
//! fields the schema keeps as free strings for ARC compatibility, combinations that only fail
//! much later (when a pod or a StatefulSet is created and the user sees nothing but a
//! controller event), and selectors that would make a controller lose its own runners. Every
//! message names the field and says what to write instead.
//!
//! Each `validate_*` function returns a [`Verdict`]: errors refuse the object, warnings are
//! printed by kubectl and accepted. Fields that are set but do nothing (`hangar_api::ignored`)
//! are warnings too.

use std::collections::{BTreeMap, HashSet};

use hangar_api::ignored;
use hangar_api::runner_config::{ContainerMode, RunnerConfig, RunnerPodSpec};
use hangar_api::{
    RunnerDeploymentSpec, RunnerReplicaSetSpec, RunnerSetSpec, RunnerSpec, RunnerTemplate, label,
};
use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaimSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::runner_pod::RUNNER_CONTAINER;

/// The outcome of validating one object.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Problems that refuse the object, each naming its field.
    pub errors: Vec<String>,
    /// Accepted but probably not what the user meant.
    pub warnings: Vec<String>,
}

impl Verdict {
    fn error(&mut self, field: &str, message: impl std::fmt::Display) {
        self.errors.push(format!("{field}: {message}"));
    }

    fn warn(&mut self, field: &str, message: impl std::fmt::Display) {
        self.warnings.push(format!("{field}: {message}"));
    }

    /// Fields that are set but do nothing (`hangar_api::ignored`) become warnings.
    fn ignored(&mut self, fields: Vec<ignored::IgnoredField>) {
        for field in fields {
            self.warn(&field.path, format!("ignored by Hangar; {}", field.instead));
        }
    }

    /// Whether the object is accepted.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// All errors in one message, as the user sees it.
    pub fn message(&self, kind: &str, name: &str) -> String {
        format!("{kind} {name} is invalid: {}", self.errors.join("; "))
    }
}

/// Image pull policies Kubernetes accepts.
pub const PULL_POLICIES: [&str; 3] = ["Always", "IfNotPresent", "Never"];

/// Longest runner label GitHub accepts.
pub const MAX_LABEL_LENGTH: usize = 256;

/// A Runner's spec.
pub fn validate_runner(spec: &RunnerSpec) -> Verdict {
    let mut v = Verdict::default();
    runner_spec(&mut v, "spec", spec);
    v.ignored(ignored::runner(spec));
    v
}

/// A RunnerReplicaSet's spec.
pub fn validate_runner_replica_set(spec: &RunnerReplicaSetSpec) -> Verdict {
    let mut v = Verdict::default();
    template(&mut v, spec.selector.as_ref(), &spec.template);
    v.ignored(ignored::runner_replica_set(spec));
    v
}

/// A RunnerDeployment's spec.
pub fn validate_runner_deployment(spec: &RunnerDeploymentSpec) -> Verdict {
    let mut v = Verdict::default();
    template(&mut v, spec.selector.as_ref(), &spec.template);
    v.ignored(ignored::runner_deployment(spec));
    v
}

/// A RunnerSet's spec.
pub fn validate_runner_set(spec: &RunnerSetSpec) -> Verdict {
    let mut v = Verdict::default();
    v.ignored(ignored::runner_set(spec));
    let sts = &spec.stateful_set;
    runner_config(&mut v, "spec", &spec.config);
    if let Some(t) = &spec.work_volume_claim_template {
        storage_request(&mut v, "spec.workVolumeClaimTemplate", &t.resources);
    }
    let pod_spec = sts.template.spec.clone().unwrap_or_default();
    containers(
        &mut v,
        "spec.template.spec.containers",
        &pod_spec.containers,
    );
    if let Some(init) = &pod_spec.init_containers {
        containers(&mut v, "spec.template.spec.initContainers", init);
    }
    let runner = pod_spec
        .containers
        .iter()
        .find(|c| c.name == RUNNER_CONTAINER);
    if spec.config.container_mode == Some(ContainerMode::Kubernetes) && runner.is_none() {
        v.error(
            "spec.template.spec.containers",
            "containerMode kubernetes needs a container named \"runner\": the container hooks \
             and the work volume are set up on it",
        );
    }
    if let Some(policy) = &sts.pod_management_policy
        && !["OrderedReady", "Parallel"].contains(&policy.as_str())
    {
        v.error(
            "spec.podManagementPolicy",
            format!("{policy:?} is not one of OrderedReady, Parallel"),
        );
    }
    if let Some(kind) = sts.update_strategy.as_ref().and_then(|s| s.type_.as_ref())
        && !["RollingUpdate", "OnDelete"].contains(&kind.as_str())
    {
        v.error(
            "spec.updateStrategy.type",
            format!("{kind:?} is not one of RollingUpdate, OnDelete"),
        );
    }
    let mut claim_names = HashSet::new();
    for (i, claim) in sts.volume_claim_templates.iter().flatten().enumerate() {
        let field = format!("spec.volumeClaimTemplates[{i}]");
        match claim.metadata.name.as_deref() {
            None | Some("") => v.error(
                &format!("{field}.metadata.name"),
                "a volume claim template needs a name; mount it with a volumeMount of that name",
            ),
            Some(name) => {
                if !claim_names.insert(name.to_owned()) {
                    v.error(
                        &format!("{field}.metadata.name"),
                        format!("{name:?} is used by two volume claim templates"),
                    );
                }
            }
        }
        if let Some(claim_spec) = &claim.spec {
            claim_storage(&mut v, &format!("{field}.spec"), claim_spec);
        }
    }
    // StatefulSetSpec's selector is required in the type; an omitted one reads as empty.
    let selector = &sts.selector;
    if selector.match_labels.is_some() || selector.match_expressions.is_some() {
        let labels = sts
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        selector_matches(&mut v, "spec.selector", selector, &labels, "spec.template");
    }
    v
}

fn template(v: &mut Verdict, selector: Option<&LabelSelector>, template: &RunnerTemplate) {
    runner_spec(v, "spec.template.spec", &template.spec);
    if let Some(selector) = selector {
        let labels = template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        selector_matches(v, "spec.selector", selector, &labels, "spec.template");
    }
}

fn runner_spec(v: &mut Verdict, field: &str, spec: &RunnerSpec) {
    runner_config(v, field, &spec.config);
    runner_pod_spec(v, field, &spec.config, &spec.pod);
}

fn runner_config(v: &mut Verdict, field: &str, c: &RunnerConfig) {
    if c.dockerd_within_runner_container == Some(true) && c.docker_enabled == Some(false) {
        v.error(
            &format!("{field}.dockerdWithinRunnerContainer"),
            "true contradicts dockerEnabled: false (a docker daemon in the runner container, \
             but no docker); remove one of the two",
        );
    }
    if c.container_mode == Some(ContainerMode::Kubernetes)
        && c.dockerd_within_runner_container == Some(true)
    {
        v.warn(
            &format!("{field}.dockerdWithinRunnerContainer"),
            "ignored with containerMode kubernetes, which runs jobs as pods without docker",
        );
    }
    if let Some(medium) = &c.volume_storage_medium
        && !(medium.is_empty()
            || medium == "Memory"
            || medium == "HugePages"
            || medium.starts_with("HugePages-"))
    {
        v.error(
            &format!("{field}.volumeStorageMedium"),
            format!("{medium:?} is not a storage medium; use \"\" (node disk) or \"Memory\""),
        );
    }
    if let Some(size) = &c.volume_size_limit
        && quantity_is_zero(size)
        && docker_sidecar(c)
    {
        v.error(
            &format!("{field}.volumeSizeLimit"),
            "0 removes the /runner volume, which the docker sidecar shares with the runner; \
             remove volumeSizeLimit, or set dockerdWithinRunnerContainer: true or \
             dockerEnabled: false",
        );
    }
    let mut seen = HashSet::new();
    for (i, l) in c.labels.iter().flatten().enumerate() {
        let lf = format!("{field}.labels[{i}]");
        if l.trim().is_empty() {
            v.error(&lf, "a runner label cannot be empty");
        } else if l.contains(',') {
            v.error(
                &lf,
                format!(
                    "{l:?} contains a comma, which splits it into several labels when the \
                     runner registers; write each label as its own list item"
                ),
            );
        } else if l.trim() != l {
            v.error(
                &lf,
                format!("{l:?} has leading or trailing spaces; GitHub would not match it"),
            );
        } else if l.len() > MAX_LABEL_LENGTH {
            v.error(
                &lf,
                format!(
                    "is {} characters long; GitHub allows at most {MAX_LABEL_LENGTH}",
                    l.len()
                ),
            );
        } else if !seen.insert(l.to_lowercase()) {
            v.warn(
                &lf,
                format!("{l:?} is listed twice (runner labels are case-insensitive)"),
            );
        }
    }
    if let Some(from) = &c.github_api_credentials_from
        && let Some(r) = &from.secret_ref
        && r.name.is_empty()
    {
        v.error(
            &format!("{field}.githubAPICredentialsFrom.secretRef.name"),
            "is empty; name a Secret in this namespace, or remove githubAPICredentialsFrom to \
             use the controller's credentials",
        );
    }
}

fn runner_pod_spec(v: &mut Verdict, field: &str, c: &RunnerConfig, p: &RunnerPodSpec) {
    if let Some(policy) = &p.image_pull_policy
        && !PULL_POLICIES.contains(&policy.as_str())
    {
        v.error(
            &format!("{field}.imagePullPolicy"),
            format!("{policy:?} is not one of Always, IfNotPresent, Never (the case matters)"),
        );
    }
    if let Some(list) = &p.containers {
        containers(v, &format!("{field}.containers"), list);
    }
    if let Some(list) = &p.sidecar_containers {
        containers(v, &format!("{field}.sidecarContainers"), list);
        for (i, s) in list.iter().enumerate() {
            if s.name == RUNNER_CONTAINER || (s.name == "docker" && docker_sidecar(c)) {
                v.error(
                    &format!("{field}.sidecarContainers[{i}].name"),
                    format!(
                        "{:?} is the name of a container the controller generates; rename \
                         the sidecar",
                        s.name
                    ),
                );
            }
        }
    }
    if let Some(list) = &p.init_containers {
        containers(v, &format!("{field}.initContainers"), list);
    }
    if let Some(t) = &p.work_volume_claim_template {
        storage_request(v, &format!("{field}.workVolumeClaimTemplate"), &t.resources);
    }
}

/// Docker runs in a sidecar that shares /runner with the runner.
fn docker_sidecar(c: &RunnerConfig) -> bool {
    c.docker_enabled != Some(false)
        && c.dockerd_within_runner_container != Some(true)
        && c.container_mode != Some(ContainerMode::Kubernetes)
}

fn containers(v: &mut Verdict, field: &str, list: &[Container]) {
    let mut names = HashSet::new();
    for (i, c) in list.iter().enumerate() {
        if !names.insert(c.name.as_str()) {
            v.error(
                &format!("{field}[{i}].name"),
                format!(
                    "{:?} is used by two containers; container names must be unique",
                    c.name
                ),
            );
        }
        if let Some(policy) = &c.image_pull_policy
            && !PULL_POLICIES.contains(&policy.as_str())
        {
            v.error(
                &format!("{field}[{i}].imagePullPolicy"),
                format!("{policy:?} is not one of Always, IfNotPresent, Never (the case matters)"),
            );
        }
    }
}

fn storage_request(v: &mut Verdict, field: &str, resources: &ResourceRequirements) {
    let has = |m: &Option<BTreeMap<String, Quantity>>| {
        m.as_ref().is_some_and(|m| m.contains_key("storage"))
    };
    if !has(&resources.requests) && !has(&resources.limits) {
        v.error(
            &format!("{field}.resources.requests.storage"),
            "is required: the volume claim needs a size, e.g. requests: {storage: 10Gi}",
        );
    }
}

fn claim_storage(v: &mut Verdict, field: &str, spec: &PersistentVolumeClaimSpec) {
    let has = spec.resources.as_ref().is_some_and(|r| {
        r.requests
            .as_ref()
            .is_some_and(|m| m.contains_key("storage"))
    });
    // A claim bound to a named volume may omit the size (the volume's is used).
    if !has && spec.volume_name.is_none() {
        v.error(
            &format!("{field}.resources.requests.storage"),
            "is required: the volume claim needs a size, e.g. requests: {storage: 10Gi}",
        );
    }
}

/// Labels the controllers add to what they create, so a selector on them always matches.
const CONTROLLER_LABELS: [&str; 3] = [
    label::RUNNER_TEMPLATE_HASH,
    label::RUNNER_DEPLOYMENT_NAME,
    label::RUNNERSET_NAME,
];

fn selector_matches(
    v: &mut Verdict,
    field: &str,
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
    template_field: &str,
) {
    let hint = format!(
        "the controller would never find the runners it creates; add the label to \
         {template_field}.metadata.labels or change the selector"
    );
    for (k, want) in selector.match_labels.iter().flatten() {
        if CONTROLLER_LABELS.contains(&k.as_str()) {
            continue;
        }
        if labels.get(k) != Some(want) {
            v.error(
                &format!("{field}.matchLabels"),
                format!(
                    "{k}={want} does not match {template_field}.metadata.labels ({}): {hint}",
                    labels
                        .get(k)
                        .map_or("not set".to_owned(), |l| format!("{k}={l}"))
                ),
            );
        }
    }
    for (i, e) in selector.match_expressions.iter().flatten().enumerate() {
        if CONTROLLER_LABELS.contains(&e.key.as_str()) {
            continue;
        }
        let values = e.values.clone().unwrap_or_default();
        let have = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => have.is_some_and(|h| values.contains(h)),
            "NotIn" => have.is_none_or(|h| !values.contains(h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            other => {
                v.error(
                    &format!("{field}.matchExpressions[{i}].operator"),
                    format!("{other:?} is not one of In, NotIn, Exists, DoesNotExist"),
                );
                continue;
            }
        };
        if !ok {
            v.error(
                &format!("{field}.matchExpressions[{i}]"),
                format!(
                    "{} {} {values:?} does not match {template_field}.metadata.labels: {hint}",
                    e.key, e.operator
                ),
            );
        }
    }
}

/// Whether a Kubernetes quantity is zero ("0", "0Gi", "0.0", "0e3", ...).
pub fn quantity_is_zero(q: &Quantity) -> bool {
    let s = q.0.trim();
    let number: String = s
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '+' || *c == '-')
        .collect();
    !number.is_empty() && number.chars().any(|c| c.is_ascii_digit()) && {
        number
            .chars()
            .all(|c| c == '0' || c == '.' || c == '+' || c == '-')
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn rd(spec: Value) -> RunnerDeploymentSpec {
        serde_json::from_value(spec).unwrap()
    }

    fn rd_with(template_spec: Value) -> RunnerDeploymentSpec {
        rd(json!({"template": {"spec": template_spec}}))
    }

    /// One row per rule: a template spec and a fragment the single error must contain.
    #[test]
    fn each_runner_rule_refuses_with_an_actionable_message() {
        let rows: &[(&str, Value, &str)] = &[
            (
                "pull policy",
                json!({"organization": "o", "imagePullPolicy": "always"}),
                "spec.template.spec.imagePullPolicy: \"always\" is not one of Always",
            ),
            (
                "dockerd in runner without docker",
                json!({"organization": "o", "dockerdWithinRunnerContainer": true,
                       "dockerEnabled": false}),
                "contradicts dockerEnabled: false",
            ),
            (
                "medium",
                json!({"organization": "o", "volumeStorageMedium": "memory"}),
                "volumeStorageMedium: \"memory\" is not a storage medium",
            ),
            (
                "zero /runner volume with sidecar",
                json!({"organization": "o", "volumeSizeLimit": "0Gi"}),
                "volumeSizeLimit: 0 removes the /runner volume",
            ),
            (
                "comma in label",
                json!({"organization": "o", "labels": ["linux,gpu"]}),
                "labels[0]: \"linux,gpu\" contains a comma",
            ),
            (
                "empty label",
                json!({"organization": "o", "labels": ["ok", " "]}),
                "labels[1]: a runner label cannot be empty",
            ),
            (
                "padded label",
                json!({"organization": "o", "labels": ["gpu "]}),
                "leading or trailing spaces",
            ),
            (
                "long label",
                json!({"organization": "o", "labels": ["x".repeat(257)]}),
                "GitHub allows at most 256",
            ),
            (
                "duplicate container",
                json!({"organization": "o", "containers": [
                    {"name": "runner", "image": "a"}, {"name": "runner", "image": "b"}]}),
                "containers[1].name: \"runner\" is used by two containers",
            ),
            (
                "sidecar named runner",
                json!({"organization": "o", "sidecarContainers": [{"name": "runner", "image": "a"}]}),
                "sidecarContainers[0].name: \"runner\" is the name of a container the controller",
            ),
            (
                "empty credentials secret",
                json!({"organization": "o", "githubAPICredentialsFrom": {"secretRef": {"name": ""}}}),
                "githubAPICredentialsFrom.secretRef.name: is empty",
            ),
            (
                "work volume without size",
                json!({"organization": "o", "containerMode": "kubernetes",
                       "workVolumeClaimTemplate": {"accessModes": ["ReadWriteOnce"], "resources": {}}}),
                "workVolumeClaimTemplate.resources.requests.storage: is required",
            ),
        ];
        for (name, spec, fragment) in rows {
            let v = validate_runner_deployment(&rd_with(spec.clone()));
            assert_eq!(v.errors.len(), 1, "{name}: {:?}", v.errors);
            assert!(v.errors[0].contains(fragment), "{name}: {:?}", v.errors);
        }
    }

    #[test]
    fn valid_specs_pass_without_warnings() {
        for spec in [
            json!({"repository": "o/r"}),
            json!({"organization": "o", "imagePullPolicy": "IfNotPresent", "labels": ["gpu", "linux"],
                   "dockerMTU": 1400, "volumeStorageMedium": "Memory"}),
            // 0 is fine when no sidecar shares /runner.
            json!({"organization": "o", "volumeSizeLimit": "0", "dockerdWithinRunnerContainer": true}),
            json!({"organization": "o", "volumeSizeLimit": "0", "dockerEnabled": false}),
            json!({"organization": "o", "dockerEnabled": false}),
        ] {
            let v = validate_runner_deployment(&rd_with(spec.clone()));
            assert_eq!(v, Verdict::default(), "{spec}");
        }
    }

    #[test]
    fn fields_hangar_ignores_are_warnings_that_say_what_to_use() {
        let v = validate_runner_deployment(&rd(json!({
            "minReplicas": 1, "maxReplicas": 3,
            "template": {"spec": {"repository": "o/r"}}
        })));
        assert!(v.is_ok(), "{v:?}");
        assert_eq!(v.warnings.len(), 2, "{v:?}");
        assert!(
            v.warnings[0].starts_with("spec.minReplicas: ignored by Hangar")
                && v.warnings[0].contains("HorizontalRunnerAutoscaler"),
            "{v:?}"
        );
    }

    #[test]
    fn dockerd_in_runner_with_kubernetes_mode_is_only_a_warning() {
        let v = validate_runner(
            &serde_json::from_value(json!({"organization": "o", "containerMode": "kubernetes",
                "dockerdWithinRunnerContainer": true,
                "workVolumeClaimTemplate": {"accessModes": ["ReadWriteOnce"],
                                            "resources": {"requests": {"storage": "1Gi"}}}}))
            .unwrap(),
        );
        assert!(v.is_ok(), "{:?}", v.errors);
        assert_eq!(v.warnings.len(), 1);
    }

    #[test]
    fn duplicate_labels_warn() {
        let v = validate_runner_deployment(&rd_with(
            json!({"organization": "o", "labels": ["GPU", "gpu"]}),
        ));
        assert!(v.is_ok());
        assert!(v.warnings[0].contains("listed twice"));
    }

    #[test]
    fn a_selector_must_select_the_template() {
        let rows = [
            (
                json!({"matchLabels": {"app": "x"}}),
                json!({"app": "x"}),
                true,
            ),
            (
                json!({"matchLabels": {"app": "x"}}),
                json!({"app": "y"}),
                false,
            ),
            (json!({"matchLabels": {"app": "x"}}), json!({}), false),
            // Labels the controllers add always match.
            (
                json!({"matchLabels": {"runner-deployment-name": "d"}}),
                json!({}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}),
                json!({"tier": "b"}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["b"]}]}),
                json!({"tier": "b"}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
                json!({}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
                json!({}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "Equals"}]}),
                json!({"tier": "a"}),
                false,
            ),
        ];
        for (selector, labels, ok) in rows {
            let spec = rd(json!({"selector": selector, "template": {
                "metadata": {"labels": labels}, "spec": {"organization": "o"}}}));
            let v = validate_runner_deployment(&spec);
            assert_eq!(v.is_ok(), ok, "{selector} vs {labels}: {:?}", v.errors);
            if !ok {
                assert!(v.errors[0].starts_with("spec.selector"), "{:?}", v.errors);
            }
        }
        // The same rule for RunnerReplicaSets.
        let rrs: RunnerReplicaSetSpec = serde_json::from_value(json!({
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"spec": {"organization": "o"}}}))
        .unwrap();
        assert!(!validate_runner_replica_set(&rrs).is_ok());
    }

    fn rs(spec: Value) -> RunnerSetSpec {
        serde_json::from_value(spec).unwrap()
    }

    #[test]
    fn each_runner_set_rule_refuses_with_an_actionable_message() {
        let rows: &[(&str, Value, &str)] = &[
            (
                "kubernetes mode without runner container",
                json!({"organization": "o", "containerMode": "kubernetes",
                       "workVolumeClaimTemplate": {"accessModes": ["ReadWriteOnce"],
                                                   "resources": {"requests": {"storage": "1Gi"}}},
                       "template": {"spec": {"containers": [{"name": "main"}]}}}),
                "containerMode kubernetes needs a container named \"runner\"",
            ),
            (
                "pull policy in the pod template",
                json!({"organization": "o", "template": {"spec": {"containers": [
                    {"name": "runner", "imagePullPolicy": "Sometimes"}]}}}),
                "spec.template.spec.containers[0].imagePullPolicy",
            ),
            (
                "pod management policy",
                json!({"organization": "o", "podManagementPolicy": "parallel",
                       "template": {"spec": {"containers": [{"name": "runner"}]}}}),
                "spec.podManagementPolicy",
            ),
            (
                "update strategy",
                json!({"organization": "o", "updateStrategy": {"type": "Recreate"},
                       "template": {"spec": {"containers": [{"name": "runner"}]}}}),
                "spec.updateStrategy.type",
            ),
            (
                "claim without size",
                json!({"organization": "o", "template": {"spec": {"containers": [{"name": "runner"}]}},
                       "volumeClaimTemplates": [{"metadata": {"name": "cache"},
                                                 "spec": {"accessModes": ["ReadWriteOnce"]}}]}),
                "spec.volumeClaimTemplates[0].spec.resources.requests.storage: is required",
            ),
            (
                "claim names twice",
                json!({"organization": "o", "template": {"spec": {"containers": [{"name": "runner"}]}},
                       "volumeClaimTemplates": [
                           {"metadata": {"name": "c"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}},
                           {"metadata": {"name": "c"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}]}),
                "\"c\" is used by two volume claim templates",
            ),
            (
                "selector",
                json!({"organization": "o", "selector": {"matchLabels": {"app": "x"}},
                       "template": {"spec": {"containers": [{"name": "runner"}]}}}),
                "spec.selector.matchLabels: app=x does not match",
            ),
            (
                "dockerd without docker",
                json!({"organization": "o", "dockerdWithinRunnerContainer": true, "dockerEnabled": false,
                       "template": {"spec": {"containers": [{"name": "runner"}]}}}),
                "spec.dockerdWithinRunnerContainer",
            ),
        ];
        for (name, spec, fragment) in rows {
            let v = validate_runner_set(&rs(spec.clone()));
            assert_eq!(v.errors.len(), 1, "{name}: {:?}", v.errors);
            assert!(v.errors[0].contains(fragment), "{name}: {:?}", v.errors);
        }
    }

    #[test]
    fn the_seed_runner_set_examples_pass() {
        for file in [
            "runnerset-seed002-pod-template.yaml",
            "runnerset-seed002-statefulset-fields.yaml",
            "runnerset-volume-cache.yaml",
        ] {
            let path = format!("{}/../../examples/{file}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            let rs: hangar_api::RunnerSet = serde_yaml::from_str(&text).unwrap();
            let v = validate_runner_set(&rs.spec);
            assert!(v.is_ok(), "{file}: {:?}", v.errors);
        }
    }

    #[test]
    fn every_valid_example_passes() {
        let dir = format!("{}/../../examples", env!("CARGO_MANIFEST_DIR"));
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for doc in serde_yaml::Deserializer::from_str(&text) {
                let value = serde_yaml::Value::deserialize(doc).unwrap();
                let kind = value["kind"].as_str().unwrap_or_default().to_owned();
                let spec = serde_json::to_value(&value["spec"]).unwrap();
                let v = match kind.as_str() {
                    "Runner" => validate_runner(&serde_json::from_value(spec).unwrap()),
                    "RunnerReplicaSet" => {
                        validate_runner_replica_set(&serde_json::from_value(spec).unwrap())
                    }
                    "RunnerDeployment" => {
                        validate_runner_deployment(&serde_json::from_value(spec).unwrap())
                    }
                    "RunnerSet" => validate_runner_set(&serde_json::from_value(spec).unwrap()),
                    _ => continue,
                };
                assert!(v.is_ok(), "{}: {:?}", path.display(), v.errors);
            }
        }
    }

    use serde::Deserialize as _;

    #[test]
    fn zero_quantities() {
        for (q, zero) in [
            ("0", true),
            ("0Gi", true),
            ("0.0", true),
            ("00M", true),
            ("1", false),
            ("10Mi", false),
            ("0.5Gi", false),
            ("", false),
            ("Gi", false),
        ] {
            assert_eq!(quantity_is_zero(&Quantity(q.into())), zero, "{q}");
        }
    }
}
