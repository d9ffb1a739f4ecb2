//! One client per distinct credential, shared by every resource that uses it.
//!
//! Resources may name their own credentials (ARC's `githubAPICredentialsFrom`). Resources that
//! name the same credential must share one client, so they share its response cache and see
//! one rate-limit budget. The registry keeps a weak reference per [`CredentialKey`]: a client
//! lives as long as some resource holds it and is dropped (with its cache) when the last one
//! lets go — ARC's ref-counted `MultiGitHubClient`, without explicit release calls.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};

use crate::auth::{CredentialKey, Credentials};
use crate::client::{ClientOptions, ClientStats, EndpointStats, GitHubClient};
use crate::endpoint::Endpoint;
use crate::error::GitHubError;
use crate::models::RateLimit;

/// Creates and shares [`GitHubClient`]s, one per distinct credential.
pub struct ClientRegistry {
    endpoint: Endpoint,
    options: ClientOptions,
    clients: Mutex<HashMap<CredentialKey, Weak<GitHubClient>>>,
}

impl fmt::Debug for ClientRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientRegistry")
            .field("api", &self.endpoint.api_url().as_str())
            .field("clients", &self.live().len())
            .finish_non_exhaustive()
    }
}

/// What one live client reports, for metrics.
#[derive(Clone, Debug)]
pub struct ClientReport {
    /// The credential (label safe for metrics).
    pub credential: CredentialKey,
    /// Latest primary budget.
    pub rate_limit: Option<RateLimit>,
    /// Counters.
    pub stats: ClientStats,
    /// Counters by endpoint template.
    pub endpoints: Vec<(String, EndpointStats)>,
}

impl ClientRegistry {
    /// A registry whose clients talk to `endpoint` with `options`.
    pub fn new(endpoint: Endpoint, options: ClientOptions) -> Self {
        Self {
            endpoint,
            options,
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// The client for `credentials`: the existing one if any resource still holds it,
    /// otherwise a new one.
    pub fn client(&self, credentials: Credentials) -> Result<Arc<GitHubClient>, GitHubError> {
        let key = credentials.key();
        let mut clients = self.clients.lock().expect("registry lock");
        if let Some(client) = clients.get(&key).and_then(Weak::upgrade) {
            return Ok(client);
        }
        let client = Arc::new(GitHubClient::new(
            self.endpoint.clone(),
            credentials,
            self.options.clone(),
        )?);
        clients.retain(|_, weak| weak.strong_count() > 0);
        clients.insert(key, Arc::downgrade(&client));
        Ok(client)
    }

    fn live(&self) -> Vec<Arc<GitHubClient>> {
        self.clients
            .lock()
            .expect("registry lock")
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Budget and counters of every live client.
    pub fn reports(&self) -> Vec<ClientReport> {
        use crate::api::GitHubApi;
        self.live()
            .into_iter()
            .map(|c| ClientReport {
                credential: c.credential().clone(),
                rate_limit: c.rate_limit(),
                stats: c.stats(),
                endpoints: c.endpoint_stats(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_per_credential_while_held() {
        let registry = ClientRegistry::new(Endpoint::github_com(), ClientOptions::default());
        let a1 = registry.client(Credentials::token("a")).unwrap();
        let a2 = registry.client(Credentials::token("a")).unwrap();
        let b = registry.client(Credentials::token("b")).unwrap();
        assert!(Arc::ptr_eq(&a1, &a2));
        assert!(!Arc::ptr_eq(&a1, &b));
        assert_eq!(registry.reports().len(), 2);
        drop((a1, a2));
        assert_eq!(
            registry.reports().len(),
            1,
            "released when the last holder drops it"
        );
        let shown = format!("{registry:?}");
        assert!(shown.contains("clients: 1"), "{shown}");
    }
}
