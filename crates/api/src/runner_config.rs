//! The runner settings shared by Runner, RunnerReplicaSet, RunnerDeployment and RunnerSet.
//!
//! ARC splits a runner's spec into two halves that are inlined (flattened) into the kinds that
//! use them:
//! - [`RunnerConfig`]: what the runner *is* — its GitHub scope, labels, group, image and docker
//!   setup. Inlined into RunnerSpec and RunnerSetSpec.
//! - [`RunnerPodSpec`]: how its pod looks — a curated subset of PodSpec plus the docker sidecar's
//!   settings. Inlined into RunnerSpec only; a RunnerSet uses a full pod template instead.
//!
//! Field names, types and meanings are ARC's. Defaults are applied by the controller, never by
//! the schema, so stored objects contain exactly what the user wrote. Cross-field rules (exactly
//! one scope; kubernetes container mode needs a work volume) live on the structs that embed
//! these, because a CEL rule only sees the object it is attached to.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvFromSource, EnvVar, EphemeralContainer, HostAlias,
    LocalObjectReference, PodDNSConfig, PodSecurityContext, ResourceRequirements, Toleration,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::validation::{
    MAX_DOCKER_MTU, MESSAGE_REPOSITORY_FORMAT, MIN_DOCKER_MTU, NAME_PATTERN, REPOSITORY_PATTERN,
    RULE_REPOSITORY_FORMAT,
};

/// What a runner is: where it registers at GitHub, how it is labelled, which image it runs and
/// how docker is provided to its jobs.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunnerConfig {
    /// Register the runner at this GitHub enterprise (its slug). Exactly one of enterprise,
    /// organization or repository must be set.
    #[schemars(pattern(NAME_PATTERN))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enterprise: Option<String>,

    /// Register the runner at this GitHub organization. Exactly one of enterprise,
    /// organization or repository must be set.
    #[schemars(pattern(NAME_PATTERN))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,

    /// Register the runner at this repository, written owner/name (e.g. octo-org/octo-repo).
    /// Exactly one of enterprise, organization or repository must be set.
    #[schemars(pattern(REPOSITORY_PATTERN), length(max = 256))]
    #[x_kube(validation = Rule::new(RULE_REPOSITORY_FORMAT).message(MESSAGE_REPOSITORY_FORMAT))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,

    /// Custom labels of the runner, in addition to the default ones GitHub assigns
    /// (self-hosted, the OS and the architecture). A workflow job runs here only when every
    /// label in its runs-on, other than self-hosted, is in this list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,

    /// Runner group to register the runner in (organization and enterprise runners). Empty
    /// means the default group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,

    /// Whether the runner takes a single job and is then replaced by a fresh one. Defaults to
    /// true. Set false only for persistent runners that keep state between jobs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<bool>,

    /// Container image of the runner. Defaults to the controller's configured runner image
    /// (summerwind/actions-runner:latest unless changed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,

    /// Directory in the runner container where jobs check out and build. Defaults to
    /// /runner/_work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_dir: Option<String>,

    /// Run dockerd inside the runner container instead of in a docker sidecar. The runner
    /// container then runs privileged and the image must ship dockerd (e.g. an actions-runner-dind
    /// image). Defaults to false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dockerd_within_runner_container: Option<bool>,

    /// Whether jobs get a docker daemon. Defaults to true. When false, no docker sidecar is
    /// added and the runner sees DOCKER_ENABLED=false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker_enabled: Option<bool>,

    /// MTU of the docker daemon's networks, e.g. 1400 where the pod network's MTU is below
    /// 1500. Between 68 and 65535.
    #[schemars(range(min = MIN_DOCKER_MTU, max = MAX_DOCKER_MTU))]
    #[serde(rename = "dockerMTU", skip_serializing_if = "Option::is_none")]
    pub docker_mtu: Option<i64>,

    /// Registry mirror for the docker daemon, e.g. `https://mirror.gcr.io`. Defaults to the
    /// controller's configured mirror, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker_registry_mirror: Option<String>,

    /// Size limit of the in-memory volume mounted at /run that holds the docker socket shared
    /// between the runner and the docker sidecar. Defaults to 1M.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker_var_run_volume_size_limit: Option<Quantity>,

    /// Size limit of the emptyDir volume mounted at /runner (the runner's installation and,
    /// by default, its work directory). 0 removes the volume, which is not allowed while a
    /// docker sidecar is used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_size_limit: Option<Quantity>,

    /// Storage medium of the /runner emptyDir volume: empty for node disk, "Memory" for tmpfs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_storage_medium: Option<String>,

    /// How jobs that use containers are run. "" (the default) gives the runner a docker daemon;
    /// "kubernetes" runs job and service containers as separate pods through the runner
    /// container hooks, without docker, and requires workVolumeClaimTemplate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_mode: Option<ContainerMode>,

    /// Name of a PodTemplate whose content the runner container hooks use for job pods in
    /// kubernetes container mode. Kept for compatibility with ARC manifests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template_name: Option<String>,

    /// Use the GitHub credentials in this secret for this resource instead of the controller's
    /// default ones, e.g. to serve several organizations or GitHub Apps from one controller.
    #[serde(
        rename = "githubAPICredentialsFrom",
        skip_serializing_if = "Option::is_none"
    )]
    pub github_api_credentials_from: Option<GitHubApiCredentialsFrom>,
}

/// Values of `containerMode`.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ContainerMode {
    /// Jobs get a docker daemon (sidecar or in the runner container).
    #[default]
    #[serde(rename = "")]
    Docker,
    /// Job containers run as pods through the runner container hooks.
    #[serde(rename = "kubernetes")]
    Kubernetes,
}

/// Where to read GitHub API credentials from.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GitHubApiCredentialsFrom {
    /// Secret in the resource's namespace with either the key github_token (a personal access
    /// token) or the keys github_app_id, github_app_installation_id and
    /// github_app_private_key (a GitHub App).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
}

/// A secret in the same namespace.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
pub struct SecretReference {
    /// Name of the secret.
    pub name: String,
}

/// How the runner pod looks: a subset of the Kubernetes PodSpec, the runner container's settings
/// and the docker sidecar's settings.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunnerPodSpec {
    /// Compute resources of the docker sidecar container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dockerd_container_resources: Option<ResourceRequirements>,

    /// Extra volume mounts of the docker sidecar container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker_volume_mounts: Option<Vec<VolumeMount>>,

    /// Extra environment variables of the docker sidecar container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker_env: Option<Vec<EnvVar>>,

    /// Containers of the pod, replacing the generated ones. A container named "runner" is used
    /// as the runner container and one named "docker" as the docker sidecar; the controller
    /// adds to them what a runner needs (environment, volumes, image when unset). Other
    /// containers are kept as they are. Most users leave this empty and use the fields of this
    /// spec instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containers: Option<Vec<Container>>,

    /// Image pull policy of the runner container: Always, IfNotPresent or Never. Defaults to
    /// Always.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,

    /// Extra environment variables of the runner container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,

    /// Extra environment of the runner container taken from config maps or secrets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_from: Option<Vec<EnvFromSource>>,

    /// Compute resources of the runner container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Extra volume mounts of the runner container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_mounts: Option<Vec<VolumeMount>>,

    /// Extra volumes of the pod, mounted with volumeMounts or dockerVolumeMounts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<Volume>>,

    /// Whether information about services is injected into the pod's environment variables,
    /// as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_service_links: Option<bool>,

    /// Init containers of the pod, run before the runner starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<Container>>,

    /// Node labels the pod's node must have, as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,

    /// Service account of the pod. Hangar creates none: in kubernetes container mode, name one
    /// that may manage pods, pods/exec, pods/log, jobs and secrets in the namespace (what the
    /// container hooks do); unset, the pod runs as the namespace's default account.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// Whether the service account token is mounted into the pod, as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub automount_service_account_token: Option<bool>,

    /// Extra containers added to the pod next to the runner (and docker) container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecar_containers: Option<Vec<Container>>,

    /// Pod-level security settings, as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,

    /// Secrets used to pull the pod's images, as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,

    /// Scheduling constraints of the pod, as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Taints the pod tolerates, as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,

    /// Priority class of the pod, as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// Seconds the pod is given to stop after it is asked to terminate, as in a PodSpec. The
    /// runner uses this time to finish unregistering. At least 0.
    #[schemars(range(min = 0))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,

    /// Ephemeral (debug) containers of the pod, as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ephemeral_containers: Option<Vec<EphemeralContainer>>,

    /// Extra entries of the pod's /etc/hosts, as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_aliases: Option<Vec<HostAlias>>,

    /// How runner pods are spread across topology domains (zones, nodes), as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,

    /// RuntimeClass the pod runs with (e.g. a sandboxed runtime), as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,

    /// DNS policy of the pod, as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_policy: Option<String>,

    /// DNS settings of the pod, as in a PodSpec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_config: Option<PodDNSConfig>,

    /// Volume claim for the runner's work directory, created per pod (a generic ephemeral
    /// volume named "work") and deleted with it. Required when containerMode is kubernetes,
    /// where job pods mount the same volume.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_volume_claim_template: Option<WorkVolumeClaimTemplate>,
}

/// The persistent volume claim that backs a runner's work directory.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkVolumeClaimTemplate {
    /// StorageClass of the claim. ARC requires it; in Hangar it may be omitted to use the
    /// cluster's default StorageClass. "" explicitly asks for no StorageClass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,

    /// Access modes of the claim: ReadWriteOnce, or ReadWriteMany when job pods may be
    /// scheduled on other nodes than the runner. At least one.
    #[schemars(length(min = 1))]
    pub access_modes: Vec<WorkVolumeAccessMode>,

    /// Size of the claim, e.g. requests: {storage: 10Gi}. Only requests and limits are used.
    pub resources: ResourceRequirements,
}

/// Access modes allowed for the work volume.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkVolumeAccessMode {
    /// Mounted read-write by a single node.
    ReadWriteOnce,
    /// Mounted read-write by many nodes.
    ReadWriteMany,
}

impl WorkVolumeAccessMode {
    /// The access mode as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadWriteOnce => "ReadWriteOnce",
            Self::ReadWriteMany => "ReadWriteMany",
        }
    }
}
