//! Per-resource GitHub credentials (ARC's `githubAPICredentialsFrom.secretRef.name`).
//!
//! Contract: [`GitHubClients::client_for`] gives the GitHub client for a resource: the
//! controller-wide one when the resource names no Secret, otherwise one built from the named
//! Secret in the resource's namespace, with ARC's keys (`github_token`, or `github_app_id` +
//! `github_app_installation_id` + `github_app_private_key`). Clients come from the shared
//! [`ClientRegistry`], so every resource using the same credential shares one client (one
//! response cache, one rate-limit budget).
//!
//! Secrets are read with a GET, never a LIST, and remembered with their `resourceVersion` for
//! [`RECHECK_AFTER`]; after that a GET confirms the version (same version, same client) or
//! picks up the change. Whoever watches Secrets calls [`GitHubClients::forget`] so a rotated or
//! newly created Secret takes effect at once. A missing Secret is never remembered: the next
//! attempt reads again. Nothing here logs or prints a secret value.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hangar_api::runner_config::GitHubApiCredentialsFrom;
use hangar_github::{ClientRegistry, Credentials, CredentialsError, GitHubApi, GitHubError};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

/// How long a Secret read is trusted without asking the API server again.
pub const RECHECK_AFTER: Duration = Duration::from_secs(30);

/// Entries unused for this long are dropped (with them, possibly, their client).
const FORGET_UNUSED_AFTER: Duration = Duration::from_secs(30 * 60);

/// Why a credentials Secret gives no client.
#[derive(Debug, thiserror::Error)]
pub enum CredentialProblem {
    /// The Secret does not exist.
    #[error(
        "the secret does not exist; create it with the key github_token (a personal access \
         token), or github_app_id, github_app_installation_id and github_app_private_key \
         (a GitHub App)"
    )]
    SecretNotFound,
    /// The Secret's data do not form a credential.
    #[error("{0}")]
    Invalid(#[from] CredentialsError),
    /// The credential is well-formed but no client can be built from it (e.g. the App's
    /// private key is not an RSA PEM key).
    #[error("{0}")]
    Unusable(GitHubError),
    /// This controller was started without a client registry (only in tests that opt out).
    #[error("per-resource credentials are not enabled in this controller")]
    Disabled,
}

struct Entry {
    resource_version: Option<String>,
    client: Arc<dyn GitHubApi>,
    checked: Instant,
    used: Instant,
}

/// The controller-wide GitHub client plus per-Secret clients.
pub struct GitHubClients {
    default: Arc<dyn GitHubApi>,
    registry: Option<Arc<ClientRegistry>>,
    entries: Mutex<HashMap<(String, String), Entry>>,
}

impl std::fmt::Debug for GitHubClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitHubClients")
            .field("default", &self.default)
            .field("registry", &self.registry)
            .field(
                "secrets",
                &self.entries.lock().map(|e| e.len()).unwrap_or(0),
            )
            .finish()
    }
}

/// A failed lookup: the Secret (`namespace/name`) and what is wrong with it.
#[derive(Debug)]
pub enum LookupError {
    /// The Secret is unusable; the user must fix it.
    Problem(CredentialProblem),
    /// Reading the Secret failed.
    Kube(kube::Error),
}

impl GitHubClients {
    /// `default` serves resources without their own credentials; `registry` builds the others.
    pub fn new(default: Arc<dyn GitHubApi>, registry: Option<Arc<ClientRegistry>>) -> Self {
        Self {
            default,
            registry,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The controller-wide client.
    pub fn default_client(&self) -> &Arc<dyn GitHubApi> {
        &self.default
    }

    /// The name of the Secret `from` points at, if any.
    pub fn secret_name(from: Option<&GitHubApiCredentialsFrom>) -> Option<&str> {
        from?
            .secret_ref
            .as_ref()
            .map(|r| r.name.as_str())
            .filter(|n| !n.is_empty())
    }

    /// The client for a resource in `namespace` whose credentials come from the Secret
    /// `secret` (`None`: the controller's own).
    pub async fn client_for(
        &self,
        kube: &Client,
        namespace: &str,
        secret: Option<&str>,
    ) -> Result<Arc<dyn GitHubApi>, LookupError> {
        let Some(name) = secret else {
            return Ok(self.default.clone());
        };
        let Some(registry) = &self.registry else {
            return Err(LookupError::Problem(CredentialProblem::Disabled));
        };
        let key = (namespace.to_owned(), name.to_owned());
        let now = Instant::now();
        if let Some(entry) = self.lock().get_mut(&key)
            && now.duration_since(entry.checked) < RECHECK_AFTER
        {
            entry.used = now;
            return Ok(entry.client.clone());
        }
        let secret = Api::<Secret>::namespaced(kube.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(LookupError::Kube)?;
        let Some(secret) = secret else {
            self.lock().remove(&key);
            return Err(LookupError::Problem(CredentialProblem::SecretNotFound));
        };
        let version = secret.metadata.resource_version.clone();
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(&key)
            && entry.resource_version == version
        {
            entry.checked = now;
            entry.used = now;
            return Ok(entry.client.clone());
        }
        let data = secret.data.unwrap_or_default();
        let mut fields: Vec<(&str, &[u8])> = data
            .iter()
            .map(|(k, v)| (k.as_str(), v.0.as_slice()))
            .collect();
        // stringData is folded into data by the API server; a Secret read back never has it,
        // but one written by hand in a test might.
        let string_data = secret.string_data.unwrap_or_default();
        fields.extend(string_data.iter().map(|(k, v)| (k.as_str(), v.as_bytes())));
        let credentials = Credentials::from_secret_data(fields)
            .map_err(|e| LookupError::Problem(CredentialProblem::Invalid(e)))?;
        let client: Arc<dyn GitHubApi> = registry
            .client(credentials)
            .map_err(|e| LookupError::Problem(CredentialProblem::Unusable(e)))?;
        entries.retain(|_, e| now.duration_since(e.used) < FORGET_UNUSED_AFTER);
        entries.insert(
            key,
            Entry {
                resource_version: version,
                client: client.clone(),
                checked: now,
                used: now,
            },
        );
        Ok(client)
    }

    /// Drops what is remembered about Secret `namespace/name`: the next lookup reads it again.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.lock().remove(&(namespace.to_owned(), name.to_owned()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Entry>> {
        // A panic while holding the lock leaves a map of plain values: still consistent.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}
