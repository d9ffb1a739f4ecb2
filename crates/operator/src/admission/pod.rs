//! The RunnerSet pod mutation as a pure function: given the pod the apiserver is about to
//! create and where its registration credential lives, the JSON patch that makes it a runner.
//!
//! What ARC's `pod_runner_token_injector` does, with one difference: the credential is a
//! `valueFrom.secretKeyRef` to the per-scope registration Secret (see
//! [`super::registration`]), never a literal token in the pod spec. The patch
//! - sets `RUNNER_NAME` to the pod's name — a literal when the name is known (StatefulSet pods),
//!   the downward API `metadata.name` when the pod is created with `generateName`;
//! - sets `RUNNER_TOKEN` from the Secret (replacing any value the template had);
//! - forces `restartPolicy: Never` (a runner that exited must not restart with a used token;
//!   ARC #1369);
//! - annotates `actions-runner-controller/token-expires-at` with the token's expiry.

use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, ObjectFieldSelector, Pod, SecretKeySelector,
};
use serde_json::{Value, json};

use super::review::pointer_segment;
use crate::runner_pod::{RUNNER_CONTAINER, TOKEN_KEY};

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
}

/// Where the credential is and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection<'a> {
    /// The registration Secret (key [`TOKEN_KEY`]) in the pod's namespace.
    pub secret: &'a str,
    /// The token's expiry (RFC 3339), if known (a dry run may not know it).
    pub expires_at: Option<&'a str>,
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
    let token = EnvVar {
        name: "RUNNER_TOKEN".into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: injection.secret.to_owned(),
                key: TOKEN_KEY.to_owned(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
    };
    let mut env = container.env.clone().unwrap_or_default();
    for var in [runner_name, token] {
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
    if let Some(expires_at) = injection.expires_at {
        let key = hangar_api::annotation::TOKEN_EXPIRES_AT;
        if pod.metadata.annotations.is_none() {
            ops.push(json!({"op": "add", "path": "/metadata/annotations",
                            "value": {key: expires_at}}));
        } else {
            ops.push(json!({"op": "add",
                            "path": format!("/metadata/annotations/{}", pointer_segment(key)),
                            "value": expires_at}));
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
            &Injection {
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
            &Injection {
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
            &Injection {
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
    fn a_pod_without_a_runner_container_is_refused() {
        let p = pod(json!({"metadata": {"name": "x"},
                           "spec": {"containers": [{"name": "main", "image": "i"}]}}));
        assert_eq!(
            patch(
                &p,
                &Injection {
                    secret: "s",
                    expires_at: None
                }
            ),
            Err(PodProblem::NoRunnerContainer)
        );
    }
}
