//! `RunnerReplicaSet`: keeps a number of identical Runners.
//!
//! Created by a RunnerDeployment for each version of its template, much like a ReplicaSet is
//! for a Deployment. It creates Runners from `spec.template` until `spec.replicas` exist and
//! scales down gracefully (runners are unregistered from GitHub before they are deleted). The
//! `spec.template.spec` is a full RunnerSpec and carries the same validation as a Runner.
//!
//! Deleting a RunnerReplicaSet is not graceful (as in ARC): scale it to 0 first.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::runner::RunnerTemplate;

/// Desired state of a RunnerReplicaSet.
// Printer columns repeat `type_ = ...` by design; clippy reads that as a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "actions.summerwind.dev",
    version = "v1alpha1",
    kind = "RunnerReplicaSet",
    namespaced,
    status = "RunnerReplicaSetStatus",
    shortname = "rrs",
    derive = "PartialEq",
    derive = "Default",
    doc = "Keeps a number of identical self-hosted runners. Usually managed by a \
           RunnerDeployment.",
    printcolumn(name = "Desired", type_ = "number", json_path = ".spec.replicas"),
    printcolumn(name = "Current", type_ = "number", json_path = ".status.replicas"),
    printcolumn(name = "Ready", type_ = "number", json_path = ".status.readyReplicas"),
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
pub struct RunnerReplicaSetSpec {
    /// Number of runners to keep. Defaults to 1.
    #[schemars(range(min = 0), extend("nullable" = true))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// When the upstream (a RunnerDeployment, on behalf of a HorizontalRunnerAutoscaler)
    /// last asked for `replicas`. Completed ephemeral runners are replaced right away only if
    /// this time is newer than the set's last runner creation, otherwise after 10 minutes: a
    /// scale-down for the job they just ran is probably on its way.
    #[schemars(extend("nullable" = true))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective_time: Option<Time>,

    /// Label query selecting the Runners this set owns. Set by the RunnerDeployment.
    #[schemars(extend("nullable" = true))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// Template of the Runners to create.
    pub template: RunnerTemplate,
}

/// Observed state of a RunnerReplicaSet, written by the controller.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::conventions)]
pub struct RunnerReplicaSetStatus {
    /// Number of Runners that exist and are managed by this set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Number of those Runners whose pod is running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Number of those Runners that are available; currently the same as readyReplicas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,

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
    /// its template cannot work). A False Available names a runner that cannot start and why.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}
