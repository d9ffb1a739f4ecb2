//! The RunnerSet pod mutation as a pure function: given the pod the apiserver is about to
//! create and where its registration credential lives, the JSON patch that makes it a runner.
//!
//! What ARC's `pod_runner_token_injector` does, with one difference: the credential is a
//! `valueFrom.secretKeyRef` to a Secret (see [`super::registration`]), never a literal token in
//! the pod spec. The patch
//! - sets `RUNNER_NAME` to the pod's name — a literal when the name is known (StatefulSet pods),
//!   the downward API `metadata.name` when the pod is created with `generateName`;
//! - sets the credential, replacing any the template had: `RUNNER_TOKEN` from the per-scope
//!   registration Secret, or — for a pod annotated `hangar.dev/registration: jit` —
//!   `ACTIONS_RUNNER_INPUT_JITCONFIG` from the pod's own Secret (see [`super::jit`]);
//! - forces `restartPolicy: Never` (a runner that exited must not restart with a used token;
//!   ARC #1369);
//! - annotates `actions-runner-controller/token-expires-at` with the token's expiry, or
//!   `actions-runner/id` with the JIT runner's id (the pod is born knowing its runner).

use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, ObjectFieldSelector, Pod, SecretKeySelector,
};
use serde_json::{Value, json};

use super::review::pointer_segment;
use crate::runner_pod::{JIT_CONFIG_KEY, RUNNER_CONTAINER, TOKEN_KEY};

/// Why a pod carrying the inject label cannot be made a runner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodProblem {
    /// No container named `runner`.
    #[error(
        "the pod has no container named \"runner\"; the registration token is injected into \
         that container (rename the runner container in the RunnerSet's template to \"runner\")"
    )]
    NoRunnerContainer,
    /// The runner container names no scope.
    #[error(
        "the runner container's environment names no GitHub scope: set exactly one of \
         RUNNER_ORG, RUNNER_REPO (owner/name) or RUNNER_ENTERPRISE (the RunnerSet controller \
         sets them from spec.organization, spec.repository or spec.enterprise)"
    )]
    NoScope,
    /// A JIT pod created with `generateName`.
    #[error(
        "the pod asks for a JIT configuration (annotation hangar.dev/registration: jit) but has \
         no name yet (generateName); a JIT configuration is generated for a runner name, so \
         only pods created with a name (StatefulSet pods) can have one"
    )]
    JitWithoutName,
    /// A JIT pod without a controller to own its Secret.
    #[error(
        "the pod asks for a JIT configuration (annotation hangar.dev/registration: jit) but has \
         no controller ownerReference with a UID; its per-pod Secret is owned by the pod's \
         controller (its StatefulSet) so that it is deleted with it"
    )]
    JitWithoutOwner,
}

/// Where the credential is, and what the pod is annotated with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injection<'a> {
    /// A registration token in the shared per-scope Secret.
    Token {
        /// The registration Secret (key [`TOKEN_KEY`]) in the pod's namespace.
        secret: &'a str,
        /// The token's expiry (RFC 3339), if known (a dry run may not know it).
        expires_at: Option<&'a str>,
    },
    /// A JIT configuration in the pod's own Secret.
    Jit {
        /// The Secret (key [`JIT_CONFIG_KEY`]) in the pod's namespace.
        secret: &'a str,
        /// The runner GitHub created for the configuration (a dry run has none).
        runner_id: Option<u64>,
    },
}

fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
    }
}

/// The JSON patch for `pod`. Fails when the pod has no runner container.
pub fn patch(pod: &Pod, injection: &Injection<'_>) -> Result<Vec<Value>, PodProblem> {
    let spec = pod.spec.clone().unwrap_or_default();
    let index = spec
        .containers
        .iter()
        .position(|c| c.name == RUNNER_CONTAINER)
        .ok_or(PodProblem::NoRunnerContainer)?;
    let container = &spec.containers[index];

    let name = pod.metadata.name.as_deref().filter(|n| !n.is_empty());
    let runner_name = match name {
        Some(n) => EnvVar {
            name: "RUNNER_NAME".into(),
            value: Some(n.to_owned()),
            value_from: None,
        },
        // generateName: the name is only chosen after admission; the downward API reads it.
        None => EnvVar {
            name: "RUNNER_NAME".into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".into(),
                    api_version: None,
                }),
                ..Default::default()
            }),
        },
    };
    let (credential, other) = match injection {
        Injection::Token { secret, .. } => (
            secret_env("RUNNER_TOKEN", secret, TOKEN_KEY),
            "ACTIONS_RUNNER_INPUT_JITCONFIG",
        ),
        Injection::Jit { secret, .. } => (
            secret_env("ACTIONS_RUNNER_INPUT_JITCONFIG", secret, JIT_CONFIG_KEY),
            "RUNNER_TOKEN",
        ),
    };
    let mut env = container.env.clone().unwrap_or_default();
    // One credential only: the runner prefers a JIT configuration, and a stale token next to
    // it would only mislead.
    env.retain(|e| e.name != other);
    for var in [runner_name, credential] {
        match env.iter_mut().find(|e| e.name == var.name) {
            Some(existing) => *existing = var,
            None => env.push(var),
        }
    }

    // `add` on an existing member replaces it (RFC 6902 §4.1), so each op works whether or
    // not the field was set.
    let mut ops = vec![
        json!({"op": "add", "path": format!("/spec/containers/{index}/env"), "value": env}),
        json!({"op": "add", "path": "/spec/restartPolicy", "value": "Never"}),
    ];
    let annotation = match injection {
        Injection::Token { expires_at, .. } => {
            expires_at.map(|at| (hangar_api::annotation::TOKEN_EXPIRES_AT, at.to_owned()))
        }
        Injection::Jit { runner_id, .. } => {
            runner_id.map(|id| (hangar_api::annotation::RUNNER_ID, id.to_string()))
        }
    };
    if let Some((key, value)) = annotation {
        if pod.metadata.annotations.is_none() {
            ops.push(json!({"op": "add", "path": "/metadata/annotations",
                            "value": {key: value}}));
        } else {
            ops.push(json!({"op": "add",
                            "path": format!("/metadata/annotations/{}", pointer_segment(key)),
                            "value": value}));
        }
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(value: Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    /// Applies the subset of RFC 6902 `patch` produces (`add` of object members) to `doc`.
    fn apply(mut doc: Value, ops: &[Value]) -> Value {
        for op in ops {
            assert_eq!(op["op"], "add");
            let path = op["path"].as_str().unwrap();
            let (parent, last) = path.rsplit_once('/').unwrap();
            let last = last.replace("~1", "/").replace("~0", "~");
            let target = if parent.is_empty() {
                &mut doc
            } else {
                doc.pointer_mut(parent).unwrap()
            };
            match target {
                Value::Object(map) => {
                    map.insert(last, op["value"].clone());
                }
                Value::Array(list) => {
                    let i: usize = last.parse().unwrap();
                    list[i] = op["value"].clone();
                }
                _ => panic!("cannot add at {path}"),
            }
        }
        doc
    }

    fn statefulset_pod() -> Value {
        json!({
            "metadata": {"name": "ci-abcde-0", "labels": {"runnerset-name": "ci"}},
            "spec": {
                "restartPolicy": "Always",
                "containers": [
                    {"name": "docker", "image": "docker:dind"},
                    {"name": "runner", "image": "r", "env": [
                        {"name": "RUNNER_ORG", "value": "octo"},
                        {"name": "RUNNER_TOKEN", "value": "stale-literal"}
                    ]}
                ]
            }
        })
    }

    #[test]
    fn a_named_pod_gets_its_name_the_secret_reference_never_and_the_expiry() {
        let original = statefulset_pod();
        let ops = patch(
            &pod(original.clone()),
            &Injection::Token {
                secret: "reg",
                expires_at: Some("2030-01-01T00:00:00Z"),
            },
        )
        .unwrap();
        let out = apply(original, &ops);
        let env = &out["spec"]["containers"][1]["env"];
        assert_eq!(
            env,
            &json!([
                {"name": "RUNNER_ORG", "value": "octo"},
                {"name": "RUNNER_TOKEN", "valueFrom": {"secretKeyRef":
                    {"name": "reg", "key": TOKEN_KEY, "optional": false}}},
                {"name": "RUNNER_NAME", "value": "ci-abcde-0"}
            ])
        );
        assert_eq!(out["spec"]["restartPolicy"], "Never");
        assert_eq!(
            out["metadata"]["annotations"][hangar_api::annotation::TOKEN_EXPIRES_AT],
            "2030-01-01T00:00:00Z"
        );
        // The docker container is untouched.
        assert_eq!(
            out["spec"]["containers"][0],
            json!({"name": "docker", "image": "docker:dind"})
        );
    }

    #[test]
    fn a_generate_name_pod_reads_its_name_through_the_downward_api() {
        let original = json!({
            "metadata": {"generateName": "ci-", "annotations": {"a": "b"}},
            "spec": {"containers": [{"name": "runner", "image": "r"}]}
        });
        let ops = patch(
            &pod(original.clone()),
            &Injection::Token {
                secret: "reg",
                expires_at: Some("t"),
            },
        )
        .unwrap();
        let out = apply(original, &ops);
        assert_eq!(
            out["spec"]["containers"][0]["env"][0],
            json!({"name": "RUNNER_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
        );
        // Existing annotations are kept; the expiry is added next to them.
        assert_eq!(out["metadata"]["annotations"]["a"], "b");
        assert_eq!(
            out["metadata"]["annotations"][hangar_api::annotation::TOKEN_EXPIRES_AT],
            "t"
        );
    }

    #[test]
    fn the_token_is_never_a_literal_in_the_patch() {
        let ops = patch(
            &pod(statefulset_pod()),
            &Injection::Token {
                secret: "reg",
                expires_at: None,
            },
        )
        .unwrap();
        let text = serde_json::to_string(&ops).unwrap();
        assert!(!text.contains("stale-literal"));
        // Without a known expiry there is no annotation op.
        assert_eq!(ops.len(), 2);
    }

    #[test]
    fn a_jit_pod_gets_its_own_secret_its_runner_id_and_never_and_loses_any_token() {
        let original = statefulset_pod();
        let ops = patch(
            &pod(original.clone()),
            &Injection::Jit {
                secret: "ci-abcde-0-jit",
                runner_id: Some(42),
            },
        )
        .unwrap();
        let out = apply(original, &ops);
        assert_eq!(
            out["spec"]["containers"][1]["env"],
            json!([
                {"name": "RUNNER_ORG", "value": "octo"},
                {"name": "RUNNER_NAME", "value": "ci-abcde-0"},
                {"name": "ACTIONS_RUNNER_INPUT_JITCONFIG", "valueFrom": {"secretKeyRef":
                    {"name": "ci-abcde-0-jit", "key": JIT_CONFIG_KEY, "optional": false}}}
            ])
        );
        assert_eq!(out["spec"]["restartPolicy"], "Never");
        assert_eq!(
            out["metadata"]["annotations"][hangar_api::annotation::RUNNER_ID],
            "42"
        );
        assert!(out["metadata"]["annotations"][hangar_api::annotation::TOKEN_EXPIRES_AT].is_null());
        // A dry run knows no runner yet: no annotation.
        let dry = patch(
            &pod(statefulset_pod()),
            &Injection::Jit {
                secret: "ci-abcde-0-jit",
                runner_id: None,
            },
        )
        .unwrap();
        assert_eq!(dry.len(), 2);
    }

    #[test]
    fn a_token_pod_loses_a_jit_configuration_from_its_template() {
        let mut original = statefulset_pod();
        original["spec"]["containers"][1]["env"] = json!([
            {"name": "RUNNER_ORG", "value": "octo"},
            {"name": "ACTIONS_RUNNER_INPUT_JITCONFIG", "value": "old"}
        ]);
        let ops = patch(
            &pod(original.clone()),
            &Injection::Token {
                secret: "reg",
                expires_at: None,
            },
        )
        .unwrap();
        let out = apply(original, &ops);
        let names: Vec<&str> = out["spec"]["containers"][1]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["RUNNER_ORG", "RUNNER_NAME", "RUNNER_TOKEN"]);
    }

    #[test]
    fn a_pod_without_a_runner_container_is_refused() {
        let p = pod(json!({"metadata": {"name": "x"},
                           "spec": {"containers": [{"name": "main", "image": "i"}]}}));
        assert_eq!(
            patch(
                &p,
                &Injection::Token {
                    secret: "s",
                    expires_at: None
                }
            ),
            Err(PodProblem::NoRunnerContainer)
        );
    }
}
