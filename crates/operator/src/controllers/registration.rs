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

/// How long a registration Secret this process wrote or read is trusted without reading it
/// again: under a burst of runner creations it is read once per interval, not once per pod.
/// A Secret deleted behind Hangar's back is written again by the first reconcile after this of
/// a Runner whose pod has not started (a kubelet retries a missing Secret meanwhile).
pub const SHARED_TOKEN_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// The per-scope registration Secrets of token-mode Runners: the same Secret the pod webhook
/// keeps for RunnerSet pods (`hangar::admission::registration`), one per (namespace, scope,
/// credentials), holding a token valid for at least
/// [`hangar_runtime::registration::tokens::MIN_TTL`].
///
/// Why shared, not one per Runner: a registration token is a scope's, not a runner's, and
/// GitHub hands out the same one for an hour. A Secret per Runner cost two apiserver writes
/// per job (apply, then the garbage collector's delete) and a round trip before every pod
/// create; this costs one write an hour per scope and, while its token is fresh, nothing
/// before the pod is created. A pod reads the Secret when its runner container starts, so a
/// token replaced meanwhile is simply the newer valid one.
///
/// Concurrency: one refresh at a time per Secret; concurrent Runners wait for it.
#[derive(Default)]
pub struct SharedTokens {
    /// (namespace, Secret name) → the recorded expiry and when it was last confirmed.
    known: std::sync::Mutex<std::collections::HashMap<(String, String), Known>>,
    /// One refresh at a time per (namespace, Secret name).
    locks: hangar_runtime::registration::tokens::RefreshLocks,
}

#[derive(Clone, Copy)]
struct Known {
    expires_at: jiff::Timestamp,
    confirmed: tokio::time::Instant,
}

impl std::fmt::Debug for SharedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known = self.known.lock().map(|k| k.len()).unwrap_or_default();
        f.debug_struct("SharedTokens")
            .field("secrets", &known)
            .finish()
    }
}

impl SharedTokens {
    /// The name of a Secret in `namespace` holding a fresh token for `scope` (credentials from
    /// Secret `credentials`, `None`: the controller's), written from `github` when missing or
    /// about to expire.
    pub async fn ensure(
        &self,
        client: &kube::Client,
        github: &dyn GitHubApi,
        namespace: &str,
        scope: &RunnerScope,
        credentials: Option<&str>,
        now: jiff::Timestamp,
    ) -> Result<String, Error> {
        use hangar_runtime::registration::tokens as shared;
        let gh_scope = github_scope(scope);
        let name = shared::secret_name(&gh_scope, credentials);
        let key = (namespace.to_owned(), name.clone());
        if self.trusted(&key, now) {
            return Ok(name);
        }
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            locks.entry(key.clone()).or_default().clone()
        };
        let _guard = lock.lock().await;
        if self.trusted(&key, now) {
            return Ok(name); // refreshed while this call waited
        }
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let recorded = secrets
            .get_opt(&name)
            .await
            .map_err(kube_err(
                "read registration secret",
                format!("{namespace}/{name}"),
            ))?
            .as_ref()
            .and_then(shared::recorded_expiry);
        let fresh = recorded
            .and_then(|at| at.parse::<jiff::Timestamp>().ok())
            .filter(|at| lasts(*at, now));
        let expires_at = match fresh {
            Some(at) => at,
            None => {
                let token = github
                    .registration_token(&gh_scope)
                    .await
                    .map_err(github_err("get registration token", scope))?;
                let secret = shared::token_secret(namespace, &name, &gh_scope, &token);
                apply(
                    &secrets,
                    hangar_runtime::managers::RUNNER,
                    &secret,
                    "apply registration secret",
                )
                .await?;
                tracing::info!(namespace, secret = %name, scope = %gh_scope, expires_at = %token.expires_at, "refreshed registration secret");
                token.expires_at
            }
        };
        self.known.lock().unwrap_or_else(|e| e.into_inner()).insert(
            key,
            Known {
                expires_at,
                confirmed: tokio::time::Instant::now(),
            },
        );
        Ok(name)
    }

    /// The name of the Secret [`Self::ensure`] would return, without reading it, when this
    /// process last saw it holding a token still fresh at `now`, however long ago that was.
    ///
    /// For the pod-create path: a runner's pod is not held back for the recheck read, which
    /// only guards against the Secret being deleted behind Hangar's back. If it was, the pod
    /// waits for it (a kubelet retries a missing Secret), and the next pass of its Runner,
    /// which sees the pod pending, reads and writes it again through [`Self::ensure`].
    pub fn known_fresh(
        &self,
        namespace: &str,
        scope: &RunnerScope,
        credentials: Option<&str>,
        now: jiff::Timestamp,
    ) -> Option<String> {
        let name =
            hangar_runtime::registration::tokens::secret_name(&github_scope(scope), credentials);
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_owned(), name);
        let fresh = known.get(&key).is_some_and(|k| lasts(k.expires_at, now));
        fresh.then_some(key.1)
    }

    /// Whether the Secret `key` was seen holding a fresh token recently enough to skip reading it.
    fn trusted(&self, key: &(String, String), now: jiff::Timestamp) -> bool {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.get(key).is_some_and(|k| {
            k.confirmed.elapsed() < SHARED_TOKEN_RECHECK && lasts(k.expires_at, now)
        })
    }
}

/// Whether a token expiring at `expires_at` is still valid for at least
/// [`hangar_runtime::registration::tokens::MIN_TTL`] after `now`.
fn lasts(expires_at: jiff::Timestamp, now: jiff::Timestamp) -> bool {
    hangar_core::registration::token_fresh(
        expires_at.into(),
        now.into(),
        hangar_runtime::registration::tokens::MIN_TTL,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tokens: &SharedTokens, namespace: &str, name: &str, expires_at: jiff::Timestamp) {
        tokens.known.lock().unwrap().insert(
            (namespace.to_owned(), name.to_owned()),
            Known {
                expires_at,
                confirmed: tokio::time::Instant::now(),
            },
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_is_created_without_rereading_a_secret_known_to_hold_a_fresh_token() {
        let tokens = SharedTokens::default();
        let scope = RunnerScope::Organization("octo".into());
        let now: jiff::Timestamp = "2026-12-03T12:00:00Z".parse().unwrap();
        let name = hangar_runtime::registration::tokens::secret_name(&github_scope(&scope), None);
        assert_eq!(
            tokens.known_fresh("ns", &scope, None, now),
            None,
            "never seen"
        );

        record(
            &tokens,
            "ns",
            &name,
            now + jiff::SignedDuration::from_hours(1),
        );
        tokio::time::advance(SHARED_TOKEN_RECHECK * 3).await;
        assert!(
            !tokens.trusted(&("ns".into(), name.clone()), now),
            "ensure would read it again"
        );
        assert_eq!(
            tokens.known_fresh("ns", &scope, None, now),
            Some(name.clone()),
            "the create path does not"
        );
        assert_eq!(tokens.known_fresh("other", &scope, None, now), None);
        assert_eq!(
            tokens.known_fresh("ns", &scope, Some("app-credentials"), now),
            None,
            "another credential's Secret"
        );

        // A token about to expire is not handed to a pod that may start later.
        let late = now + jiff::SignedDuration::from_hours(1)
            - jiff::SignedDuration::try_from(hangar_runtime::registration::tokens::MIN_TTL)
                .unwrap()
            + jiff::SignedDuration::from_secs(1);
        assert_eq!(tokens.known_fresh("ns", &scope, None, late), None);
    }
}
