//! `RunnerDeployment`: the usual way to run a pool of runners.
//!
//! Like a Deployment, it owns one RunnerReplicaSet per version of its template. A template
//! change creates a new RunnerReplicaSet; the old ones are scaled to 0 and deleted once the new
//! one is fully ready (a surge rollout). `spec.replicas` is what a HorizontalRunnerAutoscaler
//! sets; remove it from the manifest when an autoscaler manages the deployment, or every apply
//! resets the size.
//!
//! `minReplicas`, `maxReplicas` and `autoscaling` are kept from ARC's first autoscaling design
//! (2020, before HorizontalRunnerAutoscaler) so that manifests of that time still apply; Hangar
//! stores but does not act on them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::runner::RunnerTemplate;

/// Desired state of a RunnerDeployment.
// Printer columns repeat `type_ = ...` by design; clippy reads that as a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "actions.summerwind.dev",
    version = "v1alpha1",
    kind = "RunnerDeployment",
    namespaced,
    status = "RunnerDeploymentStatus",
    shortname = "rdeploy",
    derive = "PartialEq",
    derive = "Default",
    doc = "A pool of identical self-hosted GitHub Actions runners with rolling updates. Scale it \
           with spec.replicas or a HorizontalRunnerAutoscaler.",
    printcolumn(
        name = "Enterprise",
        type_ = "string",
        json_path = ".spec.template.spec.enterprise"
    ),
    printcolumn(
        name = "Organization",
        type_ = "string",
        json_path = ".spec.template.spec.organization"
    ),
    printcolumn(
        name = "Repository",
        type_ = "string",
        json_path = ".spec.template.spec.repository"
    ),
    printcolumn(
        name = "Group",
        type_ = "string",
        json_path = ".spec.template.spec.group"
    ),
    printcolumn(
        name = "Labels",
        type_ = "string",
        json_path = ".spec.template.spec.labels"
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
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::conventions)]
pub struct RunnerDeploymentSpec {
    /// Number of runners. Defaults to 1. Leave it unset when a HorizontalRunnerAutoscaler
    /// targets this deployment: the autoscaler sets it, and a value in the manifest would be
    /// re-applied over the autoscaler's on every apply.
    #[schemars(range(min = 0), extend("nullable" = true))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// When a HorizontalRunnerAutoscaler last asked for `replicas` (set by the autoscaler,
    /// passed on to the RunnerReplicaSet). Used to avoid recreating ephemeral runners that a
    /// pending scale-down is about to remove.
    #[schemars(extend("nullable" = true))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective_time: Option<Time>,

    /// Label query selecting the RunnerReplicaSets and Runners of this deployment. Defaults to
    /// `runner-deployment-name=<name of this deployment>`.
    #[schemars(extend("nullable" = true))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// Template of the runners. A change rolls all runners over to the new template.
    pub template: RunnerTemplate,

    /// Deprecated and ignored: minimum size for ARC's pre-HorizontalRunnerAutoscaler
    /// autoscaling (2020). Use a HorizontalRunnerAutoscaler's minReplicas instead.
    #[schemars(range(min = 0))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,

    /// Deprecated and ignored: maximum size for ARC's pre-HorizontalRunnerAutoscaler
    /// autoscaling (2020). Use a HorizontalRunnerAutoscaler's maxReplicas instead.
    #[schemars(range(min = 0))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,

    /// Deprecated and ignored: metrics of ARC's pre-HorizontalRunnerAutoscaler autoscaling
    /// (2020), stored as written. Use a HorizontalRunnerAutoscaler's metrics instead.
    #[schemars(schema_with = "crate::schema::preserved_object")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Observed state of a RunnerDeployment, written by the controller.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::conventions)]
pub struct RunnerDeploymentStatus {
    /// Number of runners that are registered at GitHub and running, across all
    /// RunnerReplicaSets of this deployment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,

    /// Number of runners that are ready, across all RunnerReplicaSets of this deployment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Number of runners created from the current template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,

    /// Number of runners wanted from the current template (not counting outdated runners
    /// still draining during a rollout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,

    /// Total number of runners, across all RunnerReplicaSets of this deployment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

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

    /// The deployment's state as conditions (Hangar only; ARC has none). Types: Available
    /// (every wanted runner is registered and ready), Progressing (runners are being created
    /// or retired, or a template change is rolling out), RunnersHealthy (as its newest
    /// RunnerReplicaSet says: no runner is stuck, dead or refused by GitHub). A False Available
    /// names a runner that cannot start and why.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}
