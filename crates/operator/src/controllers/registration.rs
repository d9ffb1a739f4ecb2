//! Registration Secrets, shared by the controllers that create runners ([`super::runner`] for
//! Runners, [`super::runner_set`] for RunnerSets).
//!
//! A runner registers with either a registration token or a JIT configuration; either goes into
//! a Secret the runner pod reads through `valueFrom`, so the credential never appears in a pod
//! spec, log or status.

use std::collections::BTreeMap;

use hangar_core::RunnerScope;
use hangar_core::autoscaler::labels::jit_runner_labels;
use hangar_github::{GitHubApi, GitHubError, JitConfigRequest};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::github_scope;
use crate::error::{Error, github_err, kube_err};
use crate::runner_pod::{JIT_CONFIG_KEY, TOKEN_KEY};

/// What a runner registers with: the registration Secret's data, and, for a JIT configuration,
/// the id of the runner GitHub created for it.
pub struct Registration {
    /// The Secret's data: the credential itself.
    pub data: BTreeMap<String, ByteString>,
    /// A JIT configuration comes with its runner's id: the pod is born knowing it, and the
    /// runner-pod controller never has to look it up in List Runners.
    pub runner_id: Option<u64>,
}

/// Secrets never reach `Debug` output: only the data's keys are shown.
impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .field("runner_id", &self.runner_id)
            .finish()
    }
}

/// Asks GitHub for the credential of the runner `name`: a JIT configuration (replacing a
/// runner of that name left by an earlier attempt) or a registration token. A JIT runner is
/// registered with `labels` plus the defaults `config.sh` would add for `node_selector`'s
/// architecture.
pub async fn register(
    github: &dyn GitHubApi,
    scope: &RunnerScope,
    name: &str,
    labels: Option<&[String]>,
    node_selector: Option<&BTreeMap<String, String>>,
    jit: bool,
) -> Result<Registration, Error> {
    let gh_scope = github_scope(scope);
    let mut data = BTreeMap::new();
    if jit {
        let request = JitConfigRequest {
            name: name.to_owned(),
            runner_group_id: 1,
            labels: jit_runner_labels(
                labels.unwrap_or_default(),
                node_selector
                    .and_then(|s| s.get("kubernetes.io/arch"))
                    .map(String::as_str),
            ),
            work_folder: None,
        };
        let config = match github.generate_jit_config(&gh_scope, &request).await {
            Err(GitHubError::Conflict { .. }) => {
                // A runner of this name exists (an earlier attempt): replace it.
                if let Some(old) = github
                    .find_runner(&gh_scope, name)
                    .await
                    .map_err(github_err("find runner", scope))?
                {
                    github
                        .delete_runner(&gh_scope, old.id)
                        .await
                        .map_err(github_err("delete stale runner", scope))?;
                }
                github.generate_jit_config(&gh_scope, &request).await
            }
            other => other,
        }
        .map_err(github_err("generate JIT config", scope))?;
        data.insert(
            JIT_CONFIG_KEY.to_owned(),
            ByteString(config.encoded_jit_config.expose().as_bytes().to_vec()),
        );
        Ok(Registration {
            data,
            runner_id: Some(config.runner.id.0),
        })
    } else {
        let token = github
            .registration_token(&gh_scope)
            .await
            .map_err(github_err("get registration token", scope))?;
        data.insert(
            TOKEN_KEY.to_owned(),
            ByteString(token.token.expose().as_bytes().to_vec()),
        );
        data.insert(
            "expires_at".to_owned(),
            ByteString(token.expires_at.to_string().into_bytes()),
        );
        Ok(Registration {
            data,
            runner_id: None,
        })
    }
}

/// The registration Secret `ns/name` holding `data`, owned by `owner`, labelled managed-by
/// Hangar plus `labels`.
pub fn secret(
    ns: &str,
    name: &str,
    owner: Option<OwnerReference>,
    labels: &[(&str, String)],
    data: BTreeMap<String, ByteString>,
) -> Secret {
    let labels = std::iter::once((
        "app.kubernetes.io/managed-by".to_owned(),
        "hangar".to_owned(),
    ))
    .chain(labels.iter().map(|(k, v)| ((*k).to_owned(), v.clone())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            owner_references: owner.map(|o| vec![o]),
            labels: Some(labels),
            ..Default::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// Server-side applies `secret` as field manager `manager`; `action` names the call in errors.
pub async fn apply(
    secrets: &Api<Secret>,
    manager: &str,
    secret: &Secret,
    action: &'static str,
) -> Result<(), Error> {
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    let ns = secret.metadata.namespace.as_deref().unwrap_or_default();
    secrets
        .patch(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(secret),
        )
        .await
        .map(drop)
        .map_err(kube_err(action, format!("{ns}/{name}")))
}
