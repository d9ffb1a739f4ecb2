//! Per-scope registration Secrets for RunnerSet pods, kept fresh by the pod webhook.
//!
//! Contract: [`Registrations::ensure`] returns the name of a Secret in the pod's namespace
//! whose key `runner_token` holds a registration token for the scope (and credentials) the
//! pod names, valid for at least [`MIN_TTL`], and the token's expiry. The token is fetched from
//! GitHub only when the Secret is missing or expires within [`MIN_TTL`] (as ARC reuses a
//! token per scope until 30 minutes before expiry, #1295); otherwise the webhook answers
//! without calling GitHub at all.
//!
//! Why one Secret per scope, not per pod: a StatefulSet's pods share one template and are
//! created by the StatefulSet controller, so nothing could own or clean up a per-pod Secret
//! before the pod exists; one Secret per (scope, credentials) is written once an hour at most,
//! is referenced through `valueFrom.secretKeyRef` (so the token is never in the pod spec, in
//! `kubectl get pod -o yaml` or in audit logs of pod writes), and a pod that starts late reads
//! the token current at its start. Secrets are named [`secret_name`], labelled
//! `app.kubernetes.io/managed-by: hangar` (so the Runner controller's credentials watch ignores
//! them) and annotated with the scope.
//!
//! Concurrency: one in-flight refresh per Secret in this process; several replicas may both
//! refresh, and the last server-side apply wins — every token GitHub hands out stays valid
//! for its hour, so either is correct.
//!
//! JIT pods ([`super::jit`]) get a Secret of their own instead, from [`Registrations::jit`]:
//! a configuration generated for the pod's name at each admission, all GitHub calls of one
//! admission bounded together by the same timeout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hangar_github::{GitHubApi, GitHubError, JitConfigRequest, RunnerId, Scope};
use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::jit::{self, OnConflict};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::credentials::{CredentialProblem, GitHubClients, LookupError};
use crate::runner_pod::{JIT_CONFIG_KEY, TOKEN_KEY};

/// A token in a Secret is reused while at least this much of its validity remains.
pub const MIN_TTL: Duration = Duration::from_secs(30 * 60);

/// Key of the token's expiry (RFC 3339) in the Secret, as in a Runner's registration Secret.
pub const EXPIRES_AT_KEY: &str = "expires_at";

/// Annotation on the Secret naming its scope (for humans).
pub const SCOPE_ANNOTATION: &str = "hangar.dev/registration-scope";

/// Field manager of the Secrets.
pub const MANAGER: &str = "hangar-admission";

/// Why no registration token could be provided.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// GitHub refused or could not be reached.
    #[error(
        "cannot get a registration token for {scope} from GitHub: {source}. The pod is refused \
         so that no runner starts without a credential; its controller retries"
    )]
    GitHub {
        /// The scope.
        scope: Scope,
        /// What GitHub (or the network) said; never contains a secret.
        source: GitHubError,
    },
    /// GitHub did not answer in time.
    #[error(
        "cannot get a registration token for {scope} from GitHub: no answer within {timeout:?}. \
         The pod is refused so that no runner starts without a credential; its controller retries"
    )]
    Timeout {
        /// The scope.
        scope: Scope,
        /// The bound.
        timeout: Duration,
    },
    /// GitHub refused or could not be reached while generating a JIT configuration.
    #[error(
        "cannot generate a JIT configuration for runner {name} at {scope} from GitHub: \
         {source}. The pod is refused so that no runner starts without a credential; its \
         controller retries"
    )]
    JitGitHub {
        /// The runner's (pod's) name.
        name: String,
        /// The scope.
        scope: Scope,
        /// What GitHub (or the network) said; never contains a secret.
        source: GitHubError,
    },
    /// GitHub did not answer in time while generating a JIT configuration.
    #[error(
        "cannot generate a JIT configuration for runner {name} at {scope} from GitHub: no \
         answer within {timeout:?}. The pod is refused so that no runner starts without a \
         credential; its controller retries"
    )]
    JitTimeout {
        /// The runner's (pod's) name.
        name: String,
        /// The scope.
        scope: Scope,
        /// The bound.
        timeout: Duration,
    },
    /// A runner of the pod's name runs a job.
    #[error(
        "a runner named {name} is registered at {scope} (id {id}) and is running a job, so it \
         is not replaced by a new JIT configuration. The pod is refused; its controller retries \
         (the runner goes once its job ends, or delete it on GitHub)"
    )]
    RunnerBusy {
        /// The runner's (pod's) name.
        name: String,
        /// The scope.
        scope: Scope,
        /// The busy runner.
        id: u64,
    },
    /// GitHub kept reporting a runner of the pod's name.
    #[error(
        "GitHub still reports a runner named {name} at {scope} after replacing it {attempts} \
         times; the pod is refused, its controller retries"
    )]
    JitConflict {
        /// The runner's (pod's) name.
        name: String,
        /// The scope.
        scope: Scope,
        /// Requests made.
        attempts: u32,
    },
    /// The pod's credentials Secret is unusable.
    #[error("GitHub credentials secret {secret} named by the pod is unusable: {problem}")]
    Credentials {
        /// `namespace/name`.
        secret: String,
        /// What is wrong.
        problem: CredentialProblem,
    },
    /// Reading or writing a Secret failed.
    #[error("failed to {action} registration secret {secret}: {source}")]
    Kube {
        /// What was tried.
        action: &'static str,
        /// `namespace/name`.
        secret: String,
        /// The error.
        source: kube::Error,
    },
}

/// The Secret name for `scope` with credentials from Secret `credentials` (None: the
/// controller's own): `hangar-registration-<kind>-<hash>`, stable and short whatever the scope.
pub fn secret_name(scope: &Scope, credentials: Option<&str>) -> String {
    let kind = match scope {
        Scope::Repository { .. } => "repo",
        Scope::Organization(_) => "org",
        Scope::Enterprise(_) => "ent",
    };
    let key = format!(
        "{}\n{}",
        scope.config_path(),
        credentials.unwrap_or_default()
    );
    format!(
        "hangar-registration-{kind}-{:08x}",
        hangar_core::template_hash::fnv1a32(key.as_bytes())
    )
}

/// The per-scope Secret `namespace/name` holding `token` for `scope` (see the module docs).
pub fn token_secret(
    namespace: &str,
    name: &str,
    scope: &Scope,
    token: &hangar_github::RunnerToken,
) -> Secret {
    Secret {
        metadata: secret_metadata(namespace, name, scope),
        data: Some(
            [
                (
                    TOKEN_KEY.to_owned(),
                    ByteString(token.token.expose().as_bytes().to_vec()),
                ),
                (
                    EXPIRES_AT_KEY.to_owned(),
                    ByteString(token.expires_at.to_string().into_bytes()),
                ),
            ]
            .into(),
        ),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// A registration Secret's metadata: labelled managed by Hangar (so the Runner controller's
/// credentials watch ignores it) and annotated with its scope.
fn secret_metadata(namespace: &str, name: &str, scope: &Scope) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(
            [(
                "app.kubernetes.io/managed-by".to_owned(),
                "hangar".to_owned(),
            )]
            .into(),
        ),
        annotations: Some([(SCOPE_ANNOTATION.to_owned(), scope.to_string())].into()),
        ..Default::default()
    }
}

/// The token expiry a registration Secret records, if it holds a token.
pub fn recorded_expiry(secret: &Secret) -> Option<String> {
    let data = secret.data.as_ref()?;
    data.get(TOKEN_KEY)?;
    String::from_utf8(data.get(EXPIRES_AT_KEY)?.0.clone()).ok()
}

/// Whether a token expiring at `expires_at` (RFC 3339) can still be handed out at `now`.
pub fn is_fresh(expires_at: Option<&str>, now: Timestamp) -> bool {
    expires_at
        .and_then(|s| s.parse::<Timestamp>().ok())
        .is_some_and(|at| hangar_core::registration::token_fresh(at.into(), now.into(), MIN_TTL))
}

/// One refresh at a time per (namespace, Secret name).
pub(crate) type RefreshLocks = Mutex<HashMap<(String, String), Arc<tokio::sync::Mutex<()>>>>;

/// The webhook's view of registration Secrets.
pub struct Registrations {
    client: Client,
    clients: Arc<GitHubClients>,
    timeout: Duration,
    locks: RefreshLocks,
}

impl std::fmt::Debug for Registrations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registrations")
            .field("clients", &self.clients)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A pod's JIT Secret, just written, and the runner its configuration registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvidedJit {
    /// The Secret's name ([`jit::secret_name`]).
    pub secret: String,
    /// The runner GitHub created.
    pub runner_id: u64,
}

/// A Secret holding a fresh token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provided {
    /// The Secret's name.
    pub secret: String,
    /// The token's expiry, RFC 3339.
    pub expires_at: String,
}

impl Registrations {
    /// Server-side applies `secret` as `namespace/name` (field manager [`MANAGER`]).
    async fn apply(
        &self,
        namespace: &str,
        name: &str,
        secret: &Secret,
    ) -> Result<(), RegistrationError> {
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .patch(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(secret),
            )
            .await
            .map(drop)
            .map_err(|source| RegistrationError::Kube {
                action: "apply",
                secret: format!("{namespace}/{name}"),
                source,
            })
    }

    /// `timeout` bounds one GitHub call; keep it below the webhook's `timeoutSeconds`.
    pub fn new(client: Client, clients: Arc<GitHubClients>, timeout: Duration) -> Self {
        Self {
            client,
            clients,
            timeout,
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The Secret's current expiry, without refreshing (for dry runs).
    pub async fn peek(
        &self,
        namespace: &str,
        scope: &Scope,
        credentials: Option<&str>,
    ) -> Result<Provided, RegistrationError> {
        let name = secret_name(scope, credentials);
        let expires_at = self.read_expiry(namespace, &name).await?;
        Ok(Provided {
            secret: name,
            expires_at: expires_at.unwrap_or_default(),
        })
    }

    /// A Secret with a token for `scope` valid for at least [`MIN_TTL`] after `now`.
    pub async fn ensure(
        &self,
        namespace: &str,
        scope: &Scope,
        credentials: Option<&str>,
        now: Timestamp,
    ) -> Result<Provided, RegistrationError> {
        let name = secret_name(scope, credentials);
        if let Some(at) = self.read_expiry(namespace, &name).await?
            && is_fresh(Some(&at), now)
        {
            return Ok(Provided {
                secret: name,
                expires_at: at,
            });
        }
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            locks
                .entry((namespace.to_owned(), name.clone()))
                .or_default()
                .clone()
        };
        let _guard = lock.lock().await;
        // Someone may have refreshed it while this request waited for the lock.
        if let Some(at) = self.read_expiry(namespace, &name).await?
            && is_fresh(Some(&at), now)
        {
            return Ok(Provided {
                secret: name,
                expires_at: at,
            });
        }
        let github = self.github(namespace, credentials, &name).await?;
        let token = tokio::time::timeout(self.timeout, github.registration_token(scope))
            .await
            .map_err(|_| RegistrationError::Timeout {
                scope: scope.clone(),
                timeout: self.timeout,
            })?
            .map_err(|source| RegistrationError::GitHub {
                scope: scope.clone(),
                source,
            })?;
        let expires_at = token.expires_at.to_string();
        let secret = token_secret(namespace, &name, scope, &token);
        self.apply(namespace, &name, &secret).await?;
        tracing::info!(namespace, secret = %name, %scope, %expires_at, "refreshed registration secret");
        Ok(Provided {
            secret: name,
            expires_at,
        })
    }

    /// The GitHub client for `credentials` (None: the controller's own); `for_secret` names the
    /// Secret being written, in errors.
    async fn github(
        &self,
        namespace: &str,
        credentials: Option<&str>,
        for_secret: &str,
    ) -> Result<Arc<dyn GitHubApi>, RegistrationError> {
        self.clients
            .client_for(&self.client, namespace, credentials)
            .await
            .map_err(|e| match e {
                LookupError::Problem(problem) => RegistrationError::Credentials {
                    secret: format!("{namespace}/{}", credentials.unwrap_or_default()),
                    problem,
                },
                LookupError::Kube(source) => RegistrationError::Kube {
                    action: "read GitHub credentials for",
                    secret: format!("{namespace}/{for_secret}"),
                    source,
                },
            })
    }

    /// Generates a JIT configuration for `target` (replacing an idle runner of its name, see
    /// [`jit::on_conflict`]), all GitHub calls bounded together by the timeout, and writes it
    /// into the pod's Secret [`jit::secret_name`], owned by the pod's controller.
    pub async fn jit(
        &self,
        namespace: &str,
        scope: &Scope,
        credentials: Option<&str>,
        target: &jit::Target,
    ) -> Result<ProvidedJit, RegistrationError> {
        let name = jit::secret_name(&target.name);
        let github = self.github(namespace, credentials, &name).await?;
        let config = tokio::time::timeout(
            self.timeout,
            generate_replacing(github.as_ref(), scope, target),
        )
        .await
        .map_err(|_| RegistrationError::JitTimeout {
            name: target.name.clone(),
            scope: scope.clone(),
            timeout: self.timeout,
        })??;
        let runner_id = config.runner.id.0;
        let secret = Secret {
            metadata: ObjectMeta {
                owner_references: Some(vec![target.owner.clone()]),
                ..secret_metadata(namespace, &name, scope)
            },
            data: Some(
                [(
                    JIT_CONFIG_KEY.to_owned(),
                    ByteString(config.encoded_jit_config.expose().as_bytes().to_vec()),
                )]
                .into(),
            ),
            type_: Some("Opaque".into()),
            ..Default::default()
        };
        self.apply(namespace, &name, &secret).await?;
        tracing::info!(namespace, secret = %name, %scope, runner_id, "generated JIT configuration");
        Ok(ProvidedJit {
            secret: name,
            runner_id,
        })
    }

    /// Whether the pod `namespace/name` exists (a GET, not a cache: admission must see pods
    /// created moments ago).
    pub async fn pod_exists(&self, namespace: &str, name: &str) -> Result<bool, RegistrationError> {
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(self.client.clone(), namespace)
            .get_metadata_opt(name)
            .await
            .map(|p| p.is_some())
            .map_err(|source| RegistrationError::Kube {
                action: "look up the pod of",
                secret: format!("{namespace}/{}", jit::secret_name(name)),
                source,
            })
    }

    async fn read_expiry(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<String>, RegistrationError> {
        let secret = Api::<Secret>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|source| RegistrationError::Kube {
                action: "read",
                secret: format!("{namespace}/{name}"),
                source,
            })?;
        Ok(secret.as_ref().and_then(recorded_expiry))
    }
}

/// Asks GitHub for a JIT configuration for `target`, deleting an idle runner of its name that
/// is in the way ([`jit::on_conflict`]).
async fn generate_replacing(
    github: &dyn GitHubApi,
    scope: &Scope,
    target: &jit::Target,
) -> Result<hangar_github::JitConfig, RegistrationError> {
    let request = JitConfigRequest {
        name: target.name.clone(),
        runner_group_id: 1,
        labels: target.labels.clone(),
        work_folder: None,
    };
    let failed = |source| RegistrationError::JitGitHub {
        name: target.name.clone(),
        scope: scope.clone(),
        source,
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        match github.generate_jit_config(scope, &request).await {
            Err(GitHubError::Conflict { .. }) => {}
            other => return other.map_err(failed),
        }
        let existing = github
            .find_runner(scope, &target.name)
            .await
            .map_err(failed)?
            .map(|r| jit::Existing {
                id: r.id.0,
                busy: r.busy,
            });
        match jit::on_conflict(existing, attempt) {
            OnConflict::GenerateAgain => {}
            OnConflict::DeleteThenGenerate(id) => {
                match github.delete_runner(scope, RunnerId(id)).await {
                    Ok(()) | Err(GitHubError::NotFound { .. }) => {}
                    Err(e) => return Err(failed(e)),
                }
                tracing::info!(%scope, runner = %target.name, id,
                               "deleted an idle runner left by an earlier admission");
            }
            OnConflict::RefuseBusy(id) => {
                return Err(RegistrationError::RunnerBusy {
                    name: target.name.clone(),
                    scope: scope.clone(),
                    id,
                });
            }
            OnConflict::GiveUp => {
                return Err(RegistrationError::JitConflict {
                    name: target.name.clone(),
                    scope: scope.clone(),
                    attempts: attempt,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_per_scope_and_credentials_and_valid_dns_names() {
        let a = secret_name(&Scope::org("octo"), None);
        assert_eq!(a, secret_name(&Scope::org("octo"), None));
        assert_ne!(a, secret_name(&Scope::org("octo"), Some("other-creds")));
        assert_ne!(a, secret_name(&Scope::repo("octo", "app"), None));
        let long = secret_name(&Scope::repo("o".repeat(200), "r".repeat(200)), None);
        assert!(long.len() <= 63, "{long}");
        assert!(
            long.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }

    #[test]
    fn a_token_is_reused_until_thirty_minutes_before_expiry() {
        let now: Timestamp = "2030-01-01T12:00:00Z".parse().unwrap();
        for (expires_at, fresh) in [
            (Some("2030-01-01T13:00:00Z"), true),
            (Some("2030-01-01T12:30:00Z"), true),
            (Some("2030-01-01T12:29:59Z"), false),
            (Some("2030-01-01T11:00:00Z"), false),
            // GitHub sends offsets; they compare as instants.
            (Some("2030-01-01T05:00:00-08:00"), true),
            (Some("not a time"), false),
            (None, false),
        ] {
            assert_eq!(is_fresh(expires_at, now), fresh, "{expires_at:?}");
        }
    }
}
