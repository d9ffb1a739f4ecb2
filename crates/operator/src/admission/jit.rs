//! JIT registration of RunnerSet pods at admission, as pure decisions; the GitHub and Secret
//! calls are in [`super::registration::Registrations::jit`].
//!
//! A pod annotated `hangar.dev/registration: jit` (the RunnerSet controller annotates the pod
//! template of JIT sets) gets a JIT configuration generated for its name when the apiserver
//! admits it, in a Secret of its own, [`secret_name`] (`<pod>-jit`), owned by the pod's
//! controller (its StatefulSet; the controller ownerReference with its UID is in the admitted
//! pod), so the garbage collector deletes the Secret with the StatefulSet. A JIT configuration
//! is single-use: this is what lets a StatefulSet pod that was deleted come back under its name
//! with a fresh configuration.
//!
//! A runner of the pod's name may already exist on GitHub: an orphan of an earlier admission
//! whose pod was never created (the runner-pod finalizer unregisters a pod's runner before the
//! pod is gone, so a pod that existed left none). [`on_conflict`] decides: an idle one is
//! deleted and the configuration generated again; a busy one is never touched and the pod is
//! refused.

use std::collections::BTreeMap;

use hangar_core::autoscaler::labels::jit_runner_labels;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::pod::PodProblem;
use crate::controllers::runner_set::{JIT, REGISTRATION_ANNOTATION};
use crate::runner_pod::RUNNER_CONTAINER;

pub use hangar_core::registration::{Existing, MAX_GENERATE_ATTEMPTS, OnConflict, on_conflict};

/// The pod's JIT Secret: `<pod>-jit`.
pub fn secret_name(pod: &str) -> String {
    format!("{pod}-jit")
}

/// Whether the pod asks for a JIT configuration (annotation `hangar.dev/registration: jit`).
pub fn wants_jit(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REGISTRATION_ANNOTATION))
        .is_some_and(|v| v == JIT)
}

/// What a JIT configuration is generated for, read from the admitted pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The runner's name: the pod's.
    pub name: String,
    /// The runner's labels: `RUNNER_LABELS` plus the defaults `config.sh` adds for the node
    /// selector's architecture.
    pub labels: Vec<String>,
    /// The owner of the pod's Secret: the pod's controller, not as controller and without
    /// `blockOwnerDeletion` (which would need rights on the owner's finalizers).
    pub owner: OwnerReference,
}

/// The target of `pod`, or why it cannot have a JIT configuration.
pub fn target(pod: &Pod) -> Result<Target, PodProblem> {
    let name = pod
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or(PodProblem::JitWithoutName)?;
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && !o.uid.is_empty())
        .map(|o| OwnerReference {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
            controller: None,
            block_owner_deletion: None,
        })
        .ok_or(PodProblem::JitWithoutOwner)?;
    let spec = pod.spec.as_ref();
    let custom: Vec<String> = spec
        .and_then(|s| s.containers.iter().find(|c| c.name == RUNNER_CONTAINER))
        .and_then(|c| c.env.as_ref())
        .and_then(|env| env.iter().find(|e| e.name == "RUNNER_LABELS"))
        .and_then(|e| e.value.as_deref())
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let arch = spec
        .and_then(|s| s.node_selector.as_ref())
        .and_then(|s: &BTreeMap<String, String>| s.get("kubernetes.io/arch"))
        .map(String::as_str);
    Ok(Target {
        name,
        labels: jit_runner_labels(&custom, arch),
        owner,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn statefulset_pod() -> serde_json::Value {
        json!({
            "metadata": {
                "name": "ci-abcde-0",
                "annotations": {"hangar.dev/registration": "jit"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "u0"},
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ci-abcde",
                     "uid": "u1", "controller": true, "blockOwnerDeletion": true}
                ]
            },
            "spec": {
                "nodeSelector": {"kubernetes.io/arch": "arm64"},
                "containers": [{"name": "runner", "env": [
                    {"name": "RUNNER_LABELS", "value": "gpu, linux,,"}
                ]}]
            }
        })
    }

    #[test]
    fn a_statefulset_pod_is_a_target_owned_by_its_statefulset() {
        let p = pod(statefulset_pod());
        assert!(wants_jit(&p));
        let t = target(&p).unwrap();
        assert_eq!(t.name, "ci-abcde-0");
        assert_eq!(
            (
                t.owner.kind.as_str(),
                t.owner.name.as_str(),
                t.owner.uid.as_str()
            ),
            ("StatefulSet", "ci-abcde", "u1")
        );
        assert_eq!(
            (t.owner.controller, t.owner.block_owner_deletion),
            (None, None)
        );
        assert_eq!(
            t.labels,
            jit_runner_labels(&["gpu".into(), "linux".into()], Some("arm64"))
        );
        assert_eq!(secret_name(&t.name), "ci-abcde-0-jit");
    }

    #[test]
    fn pods_that_cannot_have_a_jit_configuration_say_why() {
        let mut generated = statefulset_pod();
        generated["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("name");
        generated["metadata"]["generateName"] = json!("ci-");
        let mut orphan = statefulset_pod();
        orphan["metadata"]["ownerReferences"][1]["controller"] = json!(false);
        let mut no_uid = statefulset_pod();
        no_uid["metadata"]["ownerReferences"][1]["uid"] = json!("");
        for (value, problem) in [
            (generated, PodProblem::JitWithoutName),
            (orphan, PodProblem::JitWithoutOwner),
            (no_uid, PodProblem::JitWithoutOwner),
        ] {
            assert_eq!(target(&pod(value)), Err(problem));
        }
    }

    #[test]
    fn only_the_jit_annotation_asks_for_jit() {
        for (annotations, jit) in [
            (json!({"hangar.dev/registration": "jit"}), true),
            (json!({"hangar.dev/registration": "token"}), false),
            (json!({}), false),
        ] {
            let p = pod(json!({"metadata": {"name": "x", "annotations": annotations}}));
            assert_eq!(wants_jit(&p), jit, "{annotations}");
        }
        assert!(!wants_jit(&pod(json!({"metadata": {"name": "x"}}))));
    }
}
