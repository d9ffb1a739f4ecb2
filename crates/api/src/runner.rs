//! `Runner`: one self-hosted runner, backed by one pod.
//!
//! Users rarely create Runners directly; RunnerReplicaSets create them from their template
//! ([`RunnerTemplate`]). The spec is ARC's RunnerSpec: [`RunnerConfig`] and [`RunnerPodSpec`]
//! inlined side by side. The schema enforces what ARC's admission webhook enforced: exactly one
//! GitHub scope, a well-formed repository, and a work volume in kubernetes container mode.
//!
//! Status is written by the controller only. It mirrors the pod (ready, phase, reason,
//! message), records where the runner is registered and, when a runner status hook is enabled,
//! the workflow it is running. Unlike ARC, Hangar never stores the registration token in the
//! status; the field exists so that objects written by ARC still deserialize.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::runner_config::{RunnerConfig, RunnerPodSpec};
use crate::validation::{
    MESSAGE_EXACTLY_ONE_SCOPE, MESSAGE_KUBERNETES_MODE_NEEDS_WORK_VOLUME, RULE_EXACTLY_ONE_SCOPE,
    RULE_KUBERNETES_MODE_NEEDS_WORK_VOLUME,
};

/// Desired state of a runner: what it is ([`RunnerConfig`]) and how its pod looks
/// ([`RunnerPodSpec`]). Both are inlined: their fields sit directly under `spec`.
// Printer columns repeat `type_ = ...` by design; clippy reads that as a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "actions.summerwind.dev",
    version = "v1alpha1",
    kind = "Runner",
    namespaced,
    status = "RunnerStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A self-hosted GitHub Actions runner, run as one pod. Usually created by a \
           RunnerReplicaSet rather than by hand.",
    printcolumn(name = "Enterprise", type_ = "string", json_path = ".spec.enterprise"),
    printcolumn(
        name = "Organization",
        type_ = "string",
        json_path = ".spec.organization"
    ),
    printcolumn(name = "Repository", type_ = "string", json_path = ".spec.repository"),
    printcolumn(name = "Group", type_ = "string", json_path = ".spec.group"),
    printcolumn(name = "Labels", type_ = "string", json_path = ".spec.labels"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Message", type_ = "string", json_path = ".status.message"),
    printcolumn(
        name = "WF Repo",
        type_ = "string",
        json_path = ".status.workflow.repository"
    ),
    printcolumn(
        name = "WF Run",
        type_ = "string",
        json_path = ".status.workflow.runID"
    ),
    printcolumn(
        name = "Retiring",
        type_ = "date",
        json_path = ".metadata.deletionTimestamp"
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
#[schemars(transform = crate::schema::conventions)]
pub struct RunnerSpec {
    /// The runner's identity and docker setup.
    #[serde(flatten)]
    pub config: RunnerConfig,

    /// The runner pod's shape.
    #[serde(flatten)]
    pub pod: RunnerPodSpec,
}

/// Observed state of a runner, written by the controller.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::conventions)]
pub struct RunnerStatus {
    /// True when the runner pod is Ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,

    /// Where and with which labels the runner is registered at GitHub, as ARC wrote it. Hangar
    /// keeps the field so that ARC's objects decode, but does not write it: the Registered
    /// condition and the pod's `actions-runner/id` annotation say whether and as what the
    /// runner is registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registration: Option<RunnerStatusRegistration>,

    /// Phase of the runner: the pod's phase (Pending, Running, Succeeded, Failed), or Created
    /// before the pod exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,

    /// Machine-readable reason for the current phase, e.g. from the pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// Human-readable explanation of the current phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// The workflow job the runner is running, as ARC's runner status hook reported it. Hangar
    /// has no such hook and does not write it; the `Busy` column of the runner's set counts
    /// the runners GitHub shows running a job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<WorkflowStatus>,

    /// When ARC last checked the runner's registration at GitHub. Hangar does not write it: it
    /// learns of the registration from the runner pod and of the runner's state from GitHub's
    /// runner list.
    #[schemars(extend("nullable" = true))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_registration_check_time: Option<Time>,

    /// The runner's state as conditions (Hangar only; ARC has none). Types: Registered (GitHub
    /// knows the runner), Ready (registered and its pod is ready), CredentialsValid (the
    /// GitHub credentials, the controller's or those of githubAPICredentialsFrom, were found
    /// and accepted by GitHub), Healthy (the runner works or is on its way; False when it is
    /// stuck, dead or refused by GitHub, with the reason and what is wrong), Progressing
    /// (reason Retiring while a deleted Runner waits for its runner to finish its job and
    /// unregister). A False condition's reason and message say what is wrong and what to do
    /// about it.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// Where a runner is registered at GitHub.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunnerStatusRegistration {
    /// Enterprise the runner is registered at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enterprise: Option<String>,

    /// Organization the runner is registered at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,

    /// Repository (owner/name) the runner is registered at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,

    /// Labels the runner registered with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,

    /// Registration token. Written by ARC, never by Hangar (it keeps tokens out of object
    /// status); present only so that objects written by ARC can be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,

    /// When the registration token expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
}

/// The workflow job a runner is running, from the GitHub Actions environment of the job.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStatus {
    /// Name of the workflow (GITHUB_WORKFLOW).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// Repository of the workflow, owner/name (GITHUB_REPOSITORY).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,

    /// Owner of that repository (GITHUB_REPOSITORY_OWNER).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository_owner: Option<String>,

    /// Number of the workflow run within its workflow (GITHUB_RUN_NUMBER).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_number: Option<String>,

    /// Unique ID of the workflow run (GITHUB_RUN_ID).
    #[serde(rename = "runID", skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,

    /// ID of the job within the workflow (GITHUB_JOB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,

    /// Name of the action or ID of the step being run (GITHUB_ACTION).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

/// Template of the Runners a RunnerReplicaSet (or RunnerDeployment) creates.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
pub struct RunnerTemplate {
    /// Labels and annotations given to each Runner, and through it to its pod (e.g.
    /// cluster-autoscaler.kubernetes.io/safe-to-evict).
    #[schemars(schema_with = "crate::schema::embedded_object_meta")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,

    /// Spec of each Runner. Exactly one of enterprise, organization or repository must be set.
    pub spec: RunnerSpec,
}
