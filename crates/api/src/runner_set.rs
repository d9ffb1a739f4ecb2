//! `RunnerSet`: a pool of runners backed by StatefulSets.
//!
//! The spec inlines three things side by side: the runner settings ([`RunnerConfig`]: scope,
//! labels, docker setup), a few RunnerSet fields (`effectiveTime`, `serviceAccountName`,
//! `workVolumeClaimTemplate`) and a complete Kubernetes StatefulSetSpec (`replicas`, `selector`,
//! `serviceName`, `template`, `volumeClaimTemplates`, ...). Pods are configured with the
//! standard pod template: the runner's settings go on the container named "runner", the docker
//! sidecar's on the container named "docker". `volumeClaimTemplates` give each runner
//! persistent volumes (e.g. a docker layer cache) that are recycled between runners.
//!
//! Differences from ARC, all accepting more: `selector` may be omitted (it defaults to the
//! `runnerset-name` label the controller puts on every pod) and `serviceName` is optional, as
//! it is for a StatefulSet.

use k8s_openapi::api::apps::v1::StatefulSetSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::runner_config::{RunnerConfig, WorkVolumeClaimTemplate};
use crate::validation::{
    MESSAGE_EXACTLY_ONE_SCOPE, MESSAGE_KUBERNETES_MODE_NEEDS_WORK_VOLUME, RULE_EXACTLY_ONE_SCOPE,
    RULE_KUBERNETES_MODE_NEEDS_WORK_VOLUME,
};

/// Desired state of a RunnerSet.
// Printer columns repeat `type_ = ...` by design; clippy reads that as a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "actions.summerwind.dev",
    version = "v1alpha1",
    kind = "RunnerSet",
    namespaced,
    status = "RunnerSetStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A pool of self-hosted GitHub Actions runners run by StatefulSets, configured with a \
           standard pod template and able to keep persistent volumes between runners.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Desired", type_ = "number", json_path = ".spec.replicas"),
    printcolumn(name = "Current", type_ = "number", json_path = ".status.replicas"),
    printcolumn(
        name = "Up-To-Date",
        type_ = "number",
        json_path = ".status.updatedReplicas"
    ),
    printcolumn(
        name = "Available",
        type_ = "number",
        json_path = ".status.availableReplicas"
    ),
    printcolumn(name = "Busy", type_ = "number", json_path = ".status.busyReplicas"),
    printcolumn(
        name = "Unhealthy",
        type_ = "number",
        json_path = ".status.unhealthyReplicas"
    ),
    printcolumn(
        name = "Progress",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Progressing\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(RULE_EXACTLY_ONE_SCOPE).message(MESSAGE_EXACTLY_ONE_SCOPE))]
#[x_kube(validation = Rule::new(RULE_KUBERNETES_MODE_NEEDS_WORK_VOLUME)
    .message(MESSAGE_KUBERNETES_MODE_NEEDS_WORK_VOLUME))]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::conventions)]
pub struct RunnerSetSpec {
    /// The runners' identity and docker setup.
    #[serde(flatten)]
    pub config: RunnerConfig,

    /// When a HorizontalRunnerAutoscaler last asked for `replicas` (set by the autoscaler).
    /// Used to avoid recreating ephemeral runners that a pending scale-down is about to remove.
    #[schemars(extend("nullable" = true))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective_time: Option<Time>,

    /// Service account of the runner pods, when the pod template does not name one. Hangar
    /// creates none: in kubernetes container mode, name one that may manage pods, pods/exec,
    /// pods/log, jobs and secrets in the namespace (what the container hooks do).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// Volume claim for each runner's work directory, created per pod (a generic ephemeral
    /// volume named "work") and deleted with it. Required when containerMode is kubernetes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_volume_claim_template: Option<WorkVolumeClaimTemplate>,

    /// The StatefulSet fields: replicas, selector, serviceName, template, volumeClaimTemplates,
    /// updateStrategy, podManagementPolicy and the rest, with their Kubernetes meaning.
    #[schemars(schema_with = "crate::schema::stateful_set_spec")]
    #[serde(flatten)]
    pub stateful_set: StatefulSetSpec,
}

/// Observed state of a RunnerSet, written by the controller.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::conventions)]
pub struct RunnerSetStatus {
    /// Number of runners that are registered at GitHub and running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,

    /// Number of runners that are ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Number of runners created from the current template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,

    /// Number of runners wanted from the current template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,

    /// Total number of runners.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// The pod selector in string form (e.g. runnerset-name=ci), for the scale subresource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,

    /// Number of these runners running a job, as GitHub listed them last (Hangar only): the
    /// runner list is taken every 30 s and the count written when the set next syncs, so it
    /// trails GitHub by up to a sync period more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy_replicas: Option<i32>,

    /// Number of runners neither working nor on their way (Hangar only): stuck (unschedulable,
    /// image pull failing, never registered), dead (crash-looping, OOM-killed or failed and held back, node NotReady,
    /// offline on GitHub) or refused by GitHub. The RunnersHealthy condition says which and
    /// why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unhealthy_replicas: Option<i32>,

    /// The set's state as conditions (Hangar only; ARC has none). Types: Available (every
    /// wanted runner is registered and ready), Progressing (runners are being created or
    /// retired), RunnersHealthy (no runner is stuck, dead or refused by GitHub; a False one
    /// names the first that is and why, and says when the set creates no more runners because
    /// its template cannot work).
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}
