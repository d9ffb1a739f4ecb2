//! Hangar's API: the custom resources of actions-runner-controller's legacy API group
//! `actions.summerwind.dev/v1alpha1`, so that ARC manifests apply to Hangar unchanged.
//!
//! Contract:
//! - types only, no IO: serde/schemars types for the five kinds, the label, annotation and
//!   finalizer keys ARC uses, and the CustomResourceDefinitions generated from the types
//!   ([`crds`], [`crd_files`]), and their conversion into `hangar_core`'s terms ([`convert`]);
//! - field names, types and meanings are ARC's; every field's doc comment is the text
//!   `kubectl explain` shows;
//! - what ARC's admission webhook validated is validated by the schema itself (CEL rules,
//!   patterns and bounds), so every rule holds with no webhook installed; Hangar's optional
//!   webhook only adds checks the schema cannot express;
//! - defaults are documented, never written into the schema: stored objects hold exactly what
//!   the user wrote, and controllers apply defaults when they read them.
//!
//! Where Hangar's schema differs from ARC's CRDs:
//! - it accepts more: a RunnerSet may omit `selector` (the controller then selects its pods by
//!   the `runnerset-name` label), `workVolumeClaimTemplate.storageClassName` may be omitted (the
//!   cluster's default StorageClass), and a RunnerDeployment keeps the `minReplicas`,
//!   `maxReplicas` and `autoscaling` fields of ARC's 2020 autoscaling design (stored, ignored);
//! - it rejects at admission what ARC rejected in its webhook (scope, work volume, access modes)
//!   or only noticed at run time: unknown metric types, more than two metrics or two in the
//!   wrong order, a factor together with an adjustment, `maxReplicas` below `minReplicas`,
//!   malformed durations and decimal strings, negative counts (replicas of every kind, the
//!   autoscaler's bounds, delay, adjustments, trigger amounts and capacity reservations, grace
//!   periods, a RunnerSet's StatefulSet counts), a `dockerMTU` outside 68–65535. [`validation`]
//!   lists the rules and their messages.

pub mod convert;
pub mod horizontal_runner_autoscaler;
pub mod ignored;
pub mod labels;
pub mod runner;
pub mod runner_config;
pub mod runner_deployment;
pub mod runner_replica_set;
pub mod runner_set;
mod schema;
pub mod validation;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use horizontal_runner_autoscaler::{
    HorizontalRunnerAutoscaler, HorizontalRunnerAutoscalerSpec, HorizontalRunnerAutoscalerStatus,
};
pub use labels::{annotation, finalizer, label};
pub use runner::{Runner, RunnerSpec, RunnerStatus, RunnerTemplate};
pub use runner_config::{RunnerConfig, RunnerPodSpec};
pub use runner_deployment::{RunnerDeployment, RunnerDeploymentSpec, RunnerDeploymentStatus};
pub use runner_replica_set::{RunnerReplicaSet, RunnerReplicaSetSpec, RunnerReplicaSetStatus};
pub use runner_set::{RunnerSet, RunnerSetSpec, RunnerSetStatus};

/// API group of every Hangar (and ARC legacy) custom resource.
pub const GROUP: &str = "actions.summerwind.dev";
/// API version of every Hangar custom resource.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every Hangar custom resource.
pub const API_VERSION: &str = "actions.summerwind.dev/v1alpha1";

/// Command that rewrites `deploy/crds/` from these types.
pub const REGENERATE_COMMAND: &str = "cargo xtask crds";

/// The CustomResourceDefinitions of all five kinds: Runner, RunnerReplicaSet,
/// RunnerDeployment, RunnerSet, HorizontalRunnerAutoscaler (in that order).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        Runner::crd(),
        RunnerReplicaSet::crd(),
        RunnerDeployment::crd(),
        RunnerSet::crd(),
        HorizontalRunnerAutoscaler::crd(),
    ]
}

/// `crd` as a YAML document, preceded by a comment saying it is generated.
pub fn render_yaml(crd: &CustomResourceDefinition) -> String {
    let body = serde_yaml::to_string(crd).expect("a CustomResourceDefinition serializes to YAML");
    format!(
        "# Generated from the Rust types in crates/api (hangar-api). Do not edit: run\n\
         # `{REGENERATE_COMMAND}` after changing them.\n{body}"
    )
}

/// File name ARC uses for a CRD: `<group>_<plural>.yaml`, e.g.
/// `actions.summerwind.dev_runnerdeployments.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// `(file name, YAML)` of every CRD, as committed in `deploy/crds/`.
pub fn crd_files() -> Vec<(String, String)> {
    crds()
        .iter()
        .map(|crd| (crd_file_name(crd), render_yaml(crd)))
        .collect()
}
