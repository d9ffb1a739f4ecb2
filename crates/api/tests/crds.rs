//! The generated CustomResourceDefinitions: committed copies, structural rules and the facts
//! users rely on (names, printer columns, subresources, enums, CEL rules, documentation).

mod support;

use std::collections::BTreeSet;
use std::sync::OnceLock;

use hangar_api::validation as v;
use hangar_api::{REGENERATE_COMMAND, crd_files, crds};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;
use support::workspace_root;

/// The generated CRDs, built once per test binary (generation walks large schemas).
fn all_crds() -> &'static [CustomResourceDefinition] {
    static CRDS: OnceLock<Vec<CustomResourceDefinition>> = OnceLock::new();
    CRDS.get_or_init(crds)
}

fn crd(kind: &str) -> CustomResourceDefinition {
    all_crds()
        .iter()
        .find(|c| c.spec.names.kind == kind)
        .cloned()
        .unwrap_or_else(|| panic!("no CRD for {kind}"))
}

/// The openAPIV3Schema of `kind` as JSON.
fn schema(kind: &str) -> Value {
    let crd = crd(kind);
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref());
    serde_json::to_value(schema.expect("schema")).unwrap()
}

/// The schema node at a dotted path of property names; `[]` steps into array items.
fn node<'a>(schema: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(schema, |n, step| {
        let next = if step == "[]" {
            n.get("items")
        } else {
            n.get("properties").and_then(|p| p.get(step))
        };
        next.unwrap_or_else(|| panic!("no schema at {path} (stuck at {step})"))
    })
}

/// The CEL rules directly on a schema node, as (rule, message).
fn rules(node: &Value) -> Vec<(String, String)> {
    node.get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["rule"].as_str().unwrap().to_owned(),
                r["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn has_rule(node: &Value, rule: &str, message: &str) -> bool {
    rules(node).contains(&(rule.to_owned(), message.to_owned()))
}

fn enum_values(node: &Value) -> Vec<&str> {
    node["enum"]
        .as_array()
        .expect("an enum")
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect()
}

/// Calls `f(path, node)` for every schema node.
fn walk(node: &Value, path: &str, f: &mut dyn FnMut(&str, &Value)) {
    f(path, node);
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            walk(child, &format!("{path}.{name}"), f);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = node.get(key).filter(|c| c.is_object()) {
            walk(child, &format!("{path}.{key}"), f);
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        for (i, child) in node
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            walk(child, &format!("{path}.{key}[{i}]"), f);
        }
    }
    if let Some(child) = node.get("not") {
        walk(child, &format!("{path}.not"), f);
    }
}

const KINDS: [&str; 5] = [
    "Runner",
    "RunnerReplicaSet",
    "RunnerDeployment",
    "RunnerSet",
    "HorizontalRunnerAutoscaler",
];

#[test]
fn committed_crds_match_the_types() {
    let dir = workspace_root().join("deploy/crds");
    let mut stale = vec![];
    let expected: BTreeSet<String> = crd_files()
        .into_iter()
        .map(|(file, yaml)| {
            let committed = std::fs::read_to_string(dir.join(&file)).unwrap_or_default();
            if committed != yaml {
                stale.push(file.clone());
            }
            file
        })
        .collect();
    let extra: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|f| f.ends_with(".yaml") && !expected.contains(f))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        stale.is_empty() && extra.is_empty(),
        "deploy/crds/ does not match the Rust types (stale: {stale:?}, unexpected: {extra:?}). \
         Run `{REGENERATE_COMMAND}` (or `cargo run -p hangar-api --example gen-crds`), delete \
         unexpected files, and commit deploy/crds/."
    );
}

#[test]
fn file_names_follow_arc() {
    let names: Vec<String> = crd_files().into_iter().map(|(f, _)| f).collect();
    assert_eq!(
        names,
        [
            "actions.summerwind.dev_runners.yaml",
            "actions.summerwind.dev_runnerreplicasets.yaml",
            "actions.summerwind.dev_runnerdeployments.yaml",
            "actions.summerwind.dev_runnersets.yaml",
            "actions.summerwind.dev_horizontalrunnerautoscalers.yaml",
        ]
    );
    for (_, yaml) in crd_files() {
        let parsed: CustomResourceDefinition =
            serde_yaml::from_str(&yaml).expect("the rendered YAML parses back");
        assert_eq!(parsed, crd(&parsed.spec.names.kind));
    }
}

#[test]
fn names_scope_versions_and_subresources() {
    for kind in KINDS {
        let crd = crd(kind);
        assert_eq!(crd.spec.group, "actions.summerwind.dev");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.versions.len(), 1);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(
            version.served && version.storage,
            "{kind}: v1alpha1 is served and stored"
        );
        let subresources = version.subresources.as_ref().expect("subresources");
        assert!(
            subresources.status.is_some(),
            "{kind} has a status subresource"
        );
        let plural = crd.spec.names.plural.clone();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{plural}.actions.summerwind.dev").as_str())
        );
    }
    let short_names = |kind| crd(kind).spec.names.short_names.unwrap_or_default();
    assert_eq!(short_names("HorizontalRunnerAutoscaler"), ["hra"]);
    assert_eq!(short_names("RunnerDeployment"), ["rdeploy"]);
    assert_eq!(short_names("RunnerReplicaSet"), ["rrs"]);
    assert!(short_names("Runner").is_empty());
    assert!(short_names("RunnerSet").is_empty());

    let runner_set = crd("RunnerSet");
    let scale = runner_set.spec.versions[0]
        .subresources
        .as_ref()
        .unwrap()
        .scale
        .as_ref()
        .expect("RunnerSet scale subresource");
    assert_eq!(scale.spec_replicas_path, ".spec.replicas");
    assert_eq!(scale.status_replicas_path, ".status.replicas");
    assert_eq!(
        scale.label_selector_path.as_deref(),
        Some(".status.selector")
    );
}

#[test]
fn printer_columns_match_arc_plus_busy_health_and_progress() {
    let columns = |kind| -> Vec<(String, String)> {
        crd(kind).spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.name, c.json_path))
            .collect()
    };
    let expect = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, p)| (n.to_string(), p.to_string()))
            .collect()
    };
    let age = ("Age", ".metadata.creationTimestamp");
    // Hangar's additions to ARC's columns, before Age: runners running a job, runners neither
    // working nor on their way, and how scaling or a deletion is getting on.
    let busy = ("Busy", ".status.busyReplicas");
    let unhealthy = ("Unhealthy", ".status.unhealthyReplicas");
    let progress = (
        "Progress",
        ".status.conditions[?(@.type==\"Progressing\")].reason",
    );
    assert_eq!(
        columns("Runner"),
        expect(&[
            ("Enterprise", ".spec.enterprise"),
            ("Organization", ".spec.organization"),
            ("Repository", ".spec.repository"),
            ("Group", ".spec.group"),
            ("Labels", ".spec.labels"),
            ("Status", ".status.phase"),
            ("Message", ".status.message"),
            ("WF Repo", ".status.workflow.repository"),
            ("WF Run", ".status.workflow.runID"),
            ("Retiring", ".metadata.deletionTimestamp"),
            age,
        ])
    );
    assert_eq!(
        columns("RunnerReplicaSet"),
        expect(&[
            ("Desired", ".spec.replicas"),
            ("Current", ".status.replicas"),
            ("Ready", ".status.readyReplicas"),
            busy,
            unhealthy,
            progress,
            age
        ])
    );
    assert_eq!(
        columns("RunnerDeployment"),
        expect(&[
            ("Enterprise", ".spec.template.spec.enterprise"),
            ("Organization", ".spec.template.spec.organization"),
            ("Repository", ".spec.template.spec.repository"),
            ("Group", ".spec.template.spec.group"),
            ("Labels", ".spec.template.spec.labels"),
            ("Desired", ".spec.replicas"),
            ("Current", ".status.replicas"),
            ("Up-To-Date", ".status.updatedReplicas"),
            ("Available", ".status.availableReplicas"),
            busy,
            unhealthy,
            progress,
            age,
        ])
    );
    assert_eq!(
        columns("RunnerSet"),
        expect(&[
            ("Desired", ".spec.replicas"),
            ("Current", ".status.replicas"),
            ("Up-To-Date", ".status.updatedReplicas"),
            ("Available", ".status.availableReplicas"),
            busy,
            unhealthy,
            progress,
            age,
        ])
    );
    assert_eq!(
        columns("HorizontalRunnerAutoscaler"),
        expect(&[
            ("Min", ".spec.minReplicas"),
            ("Max", ".spec.maxReplicas"),
            ("Desired", ".status.desiredReplicas"),
            ("Schedule", ".status.scheduledOverridesSummary"),
            age,
        ])
    );
}

#[test]
fn scope_rules_guard_every_runner_spec() {
    let runner_specs = [
        ("Runner", "spec"),
        ("RunnerReplicaSet", "spec.template.spec"),
        ("RunnerDeployment", "spec.template.spec"),
        ("RunnerSet", "spec"),
    ];
    for (kind, path) in runner_specs {
        let schema = schema(kind);
        let spec = node(&schema, path);
        assert!(
            has_rule(
                spec,
                v::RULE_EXACTLY_ONE_SCOPE,
                v::MESSAGE_EXACTLY_ONE_SCOPE
            ),
            "{kind} {path}"
        );
        assert!(
            has_rule(
                spec,
                v::RULE_KUBERNETES_MODE_NEEDS_WORK_VOLUME,
                v::MESSAGE_KUBERNETES_MODE_NEEDS_WORK_VOLUME
            ),
            "{kind} {path}"
        );
        let repository = node(spec, "repository");
        assert_eq!(repository["pattern"], v::REPOSITORY_PATTERN, "{kind}");
        assert!(
            has_rule(
                repository,
                v::RULE_REPOSITORY_FORMAT,
                v::MESSAGE_REPOSITORY_FORMAT
            ),
            "{kind}"
        );
        assert_eq!(
            node(spec, "enterprise")["pattern"],
            v::NAME_PATTERN,
            "{kind}"
        );
        assert_eq!(
            node(spec, "organization")["pattern"],
            v::NAME_PATTERN,
            "{kind}"
        );
        assert_eq!(
            enum_values(node(spec, "containerMode")),
            ["", "kubernetes"],
            "{kind}"
        );
        assert_eq!(
            enum_values(node(spec, "workVolumeClaimTemplate.accessModes.[]")),
            ["ReadWriteOnce", "ReadWriteMany"],
            "{kind}"
        );
        assert_eq!(
            node(spec, "githubAPICredentialsFrom.secretRef")["required"],
            serde_json::json!(["name"])
        );
    }
}

#[test]
fn runner_deployment_template_spec_has_the_documented_runner_fields() {
    let schema = schema("RunnerDeployment");
    let spec = node(&schema, "spec.template.spec");
    let fields = [
        // RunnerConfig
        "enterprise",
        "organization",
        "repository",
        "labels",
        "group",
        "ephemeral",
        "image",
        "workDir",
        "dockerdWithinRunnerContainer",
        "dockerEnabled",
        "dockerMTU",
        "dockerRegistryMirror",
        "dockerVarRunVolumeSizeLimit",
        "volumeSizeLimit",
        "volumeStorageMedium",
        "containerMode",
        "podTemplateName",
        "githubAPICredentialsFrom",
        // RunnerPodSpec
        "dockerdContainerResources",
        "dockerVolumeMounts",
        "dockerEnv",
        "containers",
        "imagePullPolicy",
        "env",
        "envFrom",
        "resources",
        "volumeMounts",
        "volumes",
        "enableServiceLinks",
        "initContainers",
        "nodeSelector",
        "serviceAccountName",
        "automountServiceAccountToken",
        "sidecarContainers",
        "securityContext",
        "imagePullSecrets",
        "affinity",
        "tolerations",
        "priorityClassName",
        "terminationGracePeriodSeconds",
        "ephemeralContainers",
        "hostAliases",
        "topologySpreadConstraints",
        "runtimeClassName",
        "dnsPolicy",
        "dnsConfig",
        "workVolumeClaimTemplate",
    ];
    for field in fields {
        let property = node(spec, field);
        assert!(
            property["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{field} is documented"
        );
    }
    let documented: BTreeSet<&str> = fields.into_iter().collect();
    let actual: BTreeSet<&str> = spec["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(actual, documented, "RunnerSpec has exactly ARC's fields");
    // containers are full Kubernetes containers.
    assert_eq!(
        node(spec, "containers.[]")["required"],
        serde_json::json!(["name"])
    );
    assert!(node(spec, "containers.[].resources.limits").is_object());
    // The template's metadata keeps what ARC keeps.
    let meta = node(&schema, "spec.template.metadata");
    let meta_fields: BTreeSet<&str> = meta["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        meta_fields,
        BTreeSet::from(["annotations", "finalizers", "labels", "name", "namespace"])
    );
    assert_eq!(
        node(&schema, "spec.template")["required"],
        serde_json::json!(["spec"])
    );
    assert_eq!(
        node(&schema, "spec")["required"],
        serde_json::json!(["template"])
    );
}

#[test]
fn runner_set_inlines_runner_config_and_the_statefulset_spec() {
    let schema = schema("RunnerSet");
    let spec = node(&schema, "spec");
    for field in [
        "repository",
        "organization",
        "enterprise",
        "labels",
        "ephemeral",
        "dockerdWithinRunnerContainer",
        "effectiveTime",
        "serviceAccountName",
        "workVolumeClaimTemplate",
        "replicas",
        "selector",
        "serviceName",
        "template",
        "volumeClaimTemplates",
        "updateStrategy",
        "podManagementPolicy",
        "persistentVolumeClaimRetentionPolicy",
        "minReadySeconds",
    ] {
        node(spec, field);
    }
    assert_eq!(
        spec["required"],
        serde_json::json!(["template"]),
        "selector is optional in Hangar"
    );
    assert!(node(spec, "template.spec.containers").is_object());
    assert!(
        node(spec, "volumeClaimTemplates.[]")
            .get("required")
            .is_none()
    );
    let claim_meta = node(spec, "volumeClaimTemplates.[].metadata");
    assert!(claim_meta["properties"].get("name").is_some());
}

#[test]
fn autoscaler_fields_enums_and_rules() {
    let schema = schema("HorizontalRunnerAutoscaler");
    let spec = node(&schema, "spec");
    assert!(has_rule(
        spec,
        v::RULE_MAX_NOT_BELOW_MIN,
        v::MESSAGE_MAX_NOT_BELOW_MIN
    ));
    assert!(has_rule(
        spec,
        v::RULE_METRIC_ORDER,
        v::MESSAGE_METRIC_ORDER
    ));
    assert_eq!(
        enum_values(node(spec, "scaleTargetRef.kind")),
        ["RunnerDeployment", "RunnerSet"]
    );
    let metrics = node(spec, "metrics");
    assert_eq!(metrics["maxItems"], 2);
    let metric = node(spec, "metrics.[]");
    assert_eq!(
        enum_values(node(metric, "type")),
        [
            "TotalNumberOfQueuedAndInProgressWorkflowRuns",
            "PercentageRunnersBusy"
        ]
    );
    assert!(has_rule(
        metric,
        v::RULE_SCALE_UP_EXCLUSIVE,
        v::MESSAGE_SCALE_UP_EXCLUSIVE
    ));
    assert!(has_rule(
        metric,
        v::RULE_SCALE_DOWN_EXCLUSIVE,
        v::MESSAGE_SCALE_DOWN_EXCLUSIVE
    ));
    for field in [
        "scaleUpThreshold",
        "scaleDownThreshold",
        "scaleUpFactor",
        "scaleDownFactor",
    ] {
        assert_eq!(
            node(metric, field)["type"],
            "string",
            "{field} is a string, as in ARC"
        );
        assert_eq!(node(metric, field)["pattern"], v::DECIMAL_PATTERN);
    }
    for field in [
        "scaleUpAdjustment",
        "scaleDownAdjustment",
        "repositoryNames",
    ] {
        node(metric, field);
    }
    let trigger = node(spec, "scaleUpTriggers.[]");
    assert_eq!(node(trigger, "duration")["pattern"], v::DURATION_PATTERN);
    assert_eq!(node(trigger, "amount")["type"], "integer");
    for event in [
        "checkRun.types",
        "checkRun.status",
        "checkRun.names",
        "checkRun.repositories",
        "pullRequest.types",
        "pullRequest.branches",
        "push",
        "workflowJob",
    ] {
        node(trigger, &format!("githubEvent.{event}"));
    }
    for field in ["name", "effectiveTime", "expirationTime", "replicas"] {
        node(spec, &format!("capacityReservations.[].{field}"));
    }
    let scheduled = node(spec, "scheduledOverrides.[]");
    assert_eq!(
        scheduled["required"],
        serde_json::json!(["endTime", "startTime"])
    );
    assert_eq!(
        enum_values(node(scheduled, "recurrenceRule.frequency")),
        ["Daily", "Weekly", "Monthly", "Yearly"]
    );
    assert_eq!(
        node(scheduled, "recurrenceRule.untilTime")["format"],
        "date-time"
    );
    assert_eq!(node(scheduled, "minReplicas")["nullable"], true);
    node(spec, "githubAPICredentialsFrom.secretRef.name");
    for field in [
        "observedGeneration",
        "desiredReplicas",
        "lastSuccessfulScaleOutTime",
        "cacheEntries",
        "scheduledOverridesSummary",
    ] {
        node(&schema, &format!("status.{field}"));
    }
}

/// Every count a user (or the webhook server) writes has a lower bound in the schema, so the
/// apiserver refuses a negative one with no admission webhook installed.
#[test]
fn counts_have_bounds() {
    let bounded: &[(&str, &str, f64, Option<f64>)] = &[
        ("RunnerDeployment", "spec.replicas", 0.0, None),
        ("RunnerDeployment", "spec.minReplicas", 0.0, None),
        ("RunnerDeployment", "spec.maxReplicas", 0.0, None),
        ("RunnerReplicaSet", "spec.replicas", 0.0, None),
        ("RunnerSet", "spec.replicas", 0.0, None),
        ("RunnerSet", "spec.minReadySeconds", 0.0, None),
        ("RunnerSet", "spec.revisionHistoryLimit", 0.0, None),
        ("RunnerSet", "spec.ordinals.start", 0.0, None),
        (
            "RunnerSet",
            "spec.updateStrategy.rollingUpdate.partition",
            0.0,
            None,
        ),
        (
            "RunnerSet",
            "spec.template.spec.terminationGracePeriodSeconds",
            0.0,
            None,
        ),
        ("RunnerSet", "spec.dockerMTU", 68.0, Some(65535.0)),
        ("Runner", "spec.dockerMTU", 68.0, Some(65535.0)),
        ("Runner", "spec.terminationGracePeriodSeconds", 0.0, None),
        (
            "RunnerDeployment",
            "spec.template.spec.dockerMTU",
            68.0,
            Some(65535.0),
        ),
        (
            "RunnerDeployment",
            "spec.template.spec.terminationGracePeriodSeconds",
            0.0,
            None,
        ),
        (
            "RunnerReplicaSet",
            "spec.template.spec.terminationGracePeriodSeconds",
            0.0,
            None,
        ),
        ("HorizontalRunnerAutoscaler", "spec.minReplicas", 0.0, None),
        ("HorizontalRunnerAutoscaler", "spec.maxReplicas", 0.0, None),
        (
            "HorizontalRunnerAutoscaler",
            "spec.scaleDownDelaySecondsAfterScaleOut",
            0.0,
            None,
        ),
        (
            "HorizontalRunnerAutoscaler",
            "spec.metrics.[].scaleUpAdjustment",
            0.0,
            None,
        ),
        (
            "HorizontalRunnerAutoscaler",
            "spec.metrics.[].scaleDownAdjustment",
            0.0,
            None,
        ),
        (
            "HorizontalRunnerAutoscaler",
            "spec.scaleUpTriggers.[].amount",
            0.0,
            None,
        ),
        (
            "HorizontalRunnerAutoscaler",
            "spec.capacityReservations.[].replicas",
            0.0,
            None,
        ),
        (
            "HorizontalRunnerAutoscaler",
            "spec.scheduledOverrides.[].minReplicas",
            0.0,
            None,
        ),
    ];
    for (kind, path, minimum, maximum) in bounded {
        let schema = schema(kind);
        let n = node(&schema, path);
        assert_eq!(n["type"], "integer", "{kind} {path}");
        assert_eq!(n["minimum"].as_f64(), Some(*minimum), "{kind} {path}");
        assert_eq!(n["maximum"].as_f64(), *maximum, "{kind} {path}");
    }
    // The autoscaler's spec is Hangar's own throughout: a new count there needs a bound too.
    let mut unbounded = vec![];
    walk(
        node(&schema("HorizontalRunnerAutoscaler"), "spec"),
        "spec",
        &mut |path, n| {
            if n["type"] == "integer" && n.get("minimum").is_none() {
                unbounded.push(path.to_owned());
            }
        },
    );
    assert!(
        unbounded.is_empty(),
        "autoscaler counts without a minimum: {unbounded:?}"
    );
}

/// A failed cross-field rule names the field to change, not just the object.
#[test]
fn max_below_min_is_reported_at_max_replicas() {
    let schema = schema("HorizontalRunnerAutoscaler");
    let rule = node(&schema, "spec")["x-kubernetes-validations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == v::RULE_MAX_NOT_BELOW_MIN)
        .expect("the rule");
    assert_eq!(rule["fieldPath"], v::FIELD_MAX_NOT_BELOW_MIN);
    assert_eq!(v::FIELD_MAX_NOT_BELOW_MIN, ".maxReplicas");
}

#[test]
fn runner_status_keeps_arcs_fields() {
    let schema = schema("Runner");
    for field in [
        "ready",
        "phase",
        "reason",
        "message",
        "lastRegistrationCheckTime",
        "registration.enterprise",
        "registration.organization",
        "registration.repository",
        "registration.labels",
        "registration.token",
        "registration.expiresAt",
        "workflow.name",
        "workflow.repository",
        "workflow.repositoryOwner",
        "workflow.runNumber",
        "workflow.runID",
        "workflow.job",
        "workflow.action",
    ] {
        node(&schema, &format!("status.{field}"));
    }
    assert!(
        node(&schema, "status.registration")
            .get("required")
            .is_none(),
        "the token is optional"
    );
}

#[test]
fn every_rule_is_in_a_schema() {
    let all: Vec<(String, String)> = KINDS
        .iter()
        .flat_map(|kind| {
            let mut found = vec![];
            walk(&schema(kind), "", &mut |_, n| found.extend(rules(n)));
            found
        })
        .collect();
    for (rule, message) in v::RULES {
        assert!(
            all.contains(&(rule.to_string(), message.to_string())),
            "rule {rule:?} is in no schema"
        );
    }
    for (rule, message) in &all {
        assert!(!message.is_empty(), "rule {rule:?} has a message");
        assert!(
            v::RULES.iter().any(|(r, _)| r == rule),
            "rule {rule:?} is not listed in validation::RULES"
        );
    }
}

/// The apiserver rejects CRDs whose schemas are not structural:
/// <https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema>
#[test]
fn schemas_are_structural() {
    for kind in KINDS {
        let mut problems = vec![];
        walk(&schema(kind), kind, &mut |path, n| {
            let obj = n.as_object().unwrap();
            let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
            let preserve =
                obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            if obj.contains_key("$ref") {
                problems.push(format!("{path}: $ref"));
            }
            for key in ["anyOf", "oneOf", "allOf", "not"] {
                if obj.contains_key(key) {
                    problems.push(format!("{path}: {key} (only value validations are allowed there; none are expected)"));
                }
            }
            match obj.get("type").and_then(Value::as_str) {
                None if !int_or_string && !preserve => problems.push(format!("{path}: no type")),
                Some(t)
                    if !["object", "array", "string", "integer", "number", "boolean"]
                        .contains(&t) =>
                {
                    problems.push(format!("{path}: type {t}"))
                }
                Some("array") if !obj.contains_key("items") => {
                    problems.push(format!("{path}: array without items"))
                }
                Some("object")
                    if obj.contains_key("properties")
                        && obj.contains_key("additionalProperties") =>
                {
                    problems.push(format!("{path}: both properties and additionalProperties"))
                }
                _ => {}
            }
            if obj.get("additionalProperties") == Some(&Value::Bool(false)) {
                problems.push(format!("{path}: additionalProperties: false"));
            }
            if obj.get("uniqueItems") == Some(&Value::Bool(true)) {
                problems.push(format!("{path}: uniqueItems"));
            }
            if obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
                problems.push(format!(
                    "{path}: x-kubernetes-preserve-unknown-fields: false"
                ));
            }
            if let Some(Value::Array(values)) = obj.get("enum")
                && values.iter().any(Value::is_null)
            {
                problems.push(format!("{path}: null in enum"));
            }
        });
        assert!(
            problems.is_empty(),
            "{kind} is not structural:\n{}",
            problems.join("\n")
        );
    }
}

/// CEL cost: a rule nested in a list costs its own cost times the list's maximum length, and an
/// unbounded list is estimated from the request size limit, which can exceed the budget.
#[test]
fn every_rule_below_a_list_is_bounded() {
    for kind in KINDS {
        let schema = schema(kind);
        let mut unbounded = vec![];
        fn visit(n: &Value, path: &str, bounded: bool, out: &mut Vec<String>) {
            if !bounded && n.get("x-kubernetes-validations").is_some() {
                out.push(path.to_owned());
            }
            if let Some(props) = n.get("properties").and_then(Value::as_object) {
                for (name, child) in props {
                    visit(child, &format!("{path}.{name}"), bounded, out);
                }
            }
            if let Some(items) = n.get("items") {
                visit(
                    items,
                    &format!("{path}[]"),
                    bounded && n.get("maxItems").is_some(),
                    out,
                );
            }
            if let Some(values) = n.get("additionalProperties").filter(|v| v.is_object()) {
                visit(
                    values,
                    &format!("{path}.*"),
                    bounded && n.get("maxProperties").is_some(),
                    out,
                );
            }
        }
        visit(&schema, kind, true, &mut unbounded);
        assert!(
            unbounded.is_empty(),
            "CEL rules under unbounded lists or maps: {unbounded:?}"
        );
    }
}

/// ARC marks a handful of fields nullable; every other optional field rejects an explicit null
/// (as in ARC), so CEL rules never see one.
#[test]
fn only_arcs_nullable_fields_are_nullable() {
    let allowed = [
        "Runner.status",
        "Runner.status.lastRegistrationCheckTime",
        "RunnerReplicaSet.status",
        "RunnerReplicaSet.spec.replicas",
        "RunnerReplicaSet.spec.effectiveTime",
        "RunnerReplicaSet.spec.selector",
        "RunnerDeployment.status",
        "RunnerDeployment.spec.replicas",
        "RunnerDeployment.spec.effectiveTime",
        "RunnerDeployment.spec.selector",
        "RunnerSet.status",
        "RunnerSet.spec.effectiveTime",
        "HorizontalRunnerAutoscaler.status",
        "HorizontalRunnerAutoscaler.status.lastSuccessfulScaleOutTime",
        "HorizontalRunnerAutoscaler.spec.scheduledOverrides.items.minReplicas",
    ];
    for kind in KINDS {
        let mut unexpected = vec![];
        walk(&schema(kind), kind, &mut |path, n| {
            let int_or_string = n.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
            if n.get("nullable") == Some(&Value::Bool(true))
                && !int_or_string
                && !allowed.contains(&path)
            {
                unexpected.push(path.to_owned());
            }
        });
        assert!(
            unexpected.is_empty(),
            "unexpectedly nullable: {unexpected:?}"
        );
    }
}

/// Every property is documented for `kubectl explain`, and Hangar's own descriptions are
/// reflowed paragraphs rather than source-wrapped lines.
#[test]
fn every_property_is_documented() {
    for kind in KINDS {
        let mut undocumented = vec![];
        walk(&schema(kind), kind, &mut |path, n| {
            if let Some(props) = n.get("properties").and_then(Value::as_object) {
                for (name, child) in props {
                    if child
                        .get("description")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        undocumented.push(format!("{path}.{name}"));
                    }
                }
            }
        });
        assert!(
            undocumented.is_empty(),
            "undocumented properties: {undocumented:#?}"
        );
    }
    let schema = schema("RunnerDeployment");
    let description = node(&schema, "spec.replicas")["description"]
        .as_str()
        .unwrap();
    assert!(
        !description.contains('\n'),
        "descriptions are reflowed: {description:?}"
    );
}

/// etcd stores an object of at most 1.5 MiB; the CRDs stay well below.
#[test]
fn crds_fit_in_etcd() {
    for crd in all_crds() {
        let size = serde_json::to_vec(&crd).unwrap().len();
        assert!(
            size < 1024 * 1024,
            "{} is {size} bytes of JSON",
            crd.spec.names.kind
        );
    }
}
