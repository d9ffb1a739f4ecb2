//! [`GitHubClient`]: the real HTTP implementation of [`GitHubApi`](crate::api::GitHubApi).
//!
//! One client serves one credential. A call goes through these steps, in order:
//! 1. **gate** — if the credential is rate-limited, wait (when the block ends within
//!    `max_rate_limit_wait`) or fail with [`GitHubError::RateLimited`] without sending anything;
//! 2. **cache** — a fresh cached GET is answered locally; a stale one is revalidated with
//!    `If-None-Match` and a 304 renews it at no rate-limit cost;
//! 3. **auth** — `Authorization` from the PAT, basic credentials, or the App's installation
//!    token (minted or refreshed here when needed);
//! 4. **send** with a per-request timeout;
//! 5. **classify** — budget headers update the gate; 5xx and connection failures are retried
//!    with jittered back-off (only connection failures for calls that are not safe to repeat,
//!    such as JIT registration); 403/429 rate limits block the gate; everything else maps to
//!    a typed [`GitHubError`].
//!
//! The code is cut by concern: `transport` takes a request through the steps above and walks
//! paginated lists; `authorization` makes the `Authorization` header and keeps the App's
//! installation token; `endpoints` maps each `GitHubApi` call to its REST path (and reuses a
//! registration token until it nears expiry); `stats` counts what the client did.

mod authorization;
mod endpoints;
mod stats;
mod transport;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use reqwest::header::{self, HeaderMap, HeaderValue};

use crate::auth::app::AppAuth;
use crate::auth::{CredentialKey, Credentials};
use crate::cache::ResponseCache;
use crate::clock::{Clock, SystemClock};
use crate::endpoint::Endpoint;
use crate::error::GitHubError;
use crate::models::RunnerToken;
use crate::ratelimit::Gate;
use crate::retry::RetryPolicy;
use crate::scope::Scope;
use authorization::Auth;
use stats::Counters;
pub use stats::{ClientStats, EndpointStats, endpoint_template};
pub use transport::next_link;

/// The REST API version the client speaks.
pub const API_VERSION: &str = "2022-11-28";

/// Tunables of a [`GitHubClient`]. `Default` is what production uses.
#[derive(Clone)]
pub struct ClientOptions {
    /// `User-Agent` (GitHub rejects requests without one).
    pub user_agent: String,
    /// Timeout of one HTTP request, connect to last byte.
    pub request_timeout: Duration,
    /// Timeout of establishing a connection.
    pub connect_timeout: Duration,
    /// Retries of 5xx and connection failures.
    pub retry: RetryPolicy,
    /// Whether GET responses are cached (off only for measurements).
    pub cache: bool,
    /// Cached responses kept at most.
    pub cache_capacity: usize,
    /// Rate-limit blocks ending within this are waited out inside the call; longer ones fail
    /// the call with [`GitHubError::RateLimited`] so the caller can requeue.
    pub max_rate_limit_wait: Duration,
    /// A cached registration token is reused while more than this remains (ARC: 30 min).
    pub registration_token_min_ttl: Duration,
    /// An installation token is replaced when less than this remains of its hour.
    pub installation_token_margin: Duration,
    /// `per_page` of list calls (GitHub's maximum is 100).
    pub per_page: u32,
    /// Wall clock and sleeping.
    pub clock: Arc<dyn Clock>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            user_agent: concat!("hangar/", env!("CARGO_PKG_VERSION")).to_owned(),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            cache: true,
            cache_capacity: 4096,
            max_rate_limit_wait: Duration::from_secs(10),
            registration_token_min_ttl: Duration::from_secs(30 * 60),
            installation_token_margin: Duration::from_secs(5 * 60),
            per_page: 100,
            clock: Arc::new(SystemClock),
        }
    }
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            user_agent,
            request_timeout,
            connect_timeout,
            retry,
            cache,
            cache_capacity,
            max_rate_limit_wait,
            registration_token_min_ttl,
            installation_token_margin,
            per_page,
            clock,
        } = self;
        f.debug_struct("ClientOptions")
            .field("user_agent", user_agent)
            .field("request_timeout", request_timeout)
            .field("connect_timeout", connect_timeout)
            .field("retry", retry)
            .field("cache", cache)
            .field("cache_capacity", cache_capacity)
            .field("max_rate_limit_wait", max_rate_limit_wait)
            .field("registration_token_min_ttl", registration_token_min_ttl)
            .field("installation_token_margin", installation_token_margin)
            .field("per_page", per_page)
            .field("clock", clock)
            .finish()
    }
}

/// The GitHub REST client for one credential. Cheap to clone; clones share cache, rate-limit
/// state and token caches.
#[derive(Clone)]
pub struct GitHubClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    endpoint: Endpoint,
    auth: Auth,
    key: CredentialKey,
    options: ClientOptions,
    cache: ResponseCache,
    gate: Mutex<Gate>,
    registration_tokens: Mutex<HashMap<Scope, RunnerToken>>,
    rng: Mutex<fastrand::Rng>,
    counters: Counters,
}

impl fmt::Debug for GitHubClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitHubClient")
            .field("api", &self.inner.endpoint.api_url().as_str())
            .field("credential", &self.inner.key)
            .finish_non_exhaustive()
    }
}

fn tls_config() -> Result<rustls::ClientConfig, GitHubError> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_platform_verifier())
        .map_err(|e| GitHubError::Build {
            source: Box::new(e),
        })?
        .with_no_client_auth();
    Ok(config)
}

/// A `reqwest` builder with TLS on rustls + ring (system trust store). The workspace builds
/// reqwest without a default crypto provider, so every reqwest client in Hangar (and ghsim's
/// webhook sender) should start from here.
pub fn http_builder() -> Result<reqwest::ClientBuilder, GitHubError> {
    Ok(reqwest::Client::builder().tls_backend_preconfigured(tls_config()?))
}

impl GitHubClient {
    /// A client for `credentials` against `endpoint`. Fails only if the App private key is
    /// unusable or TLS cannot be set up.
    pub fn new(
        endpoint: Endpoint,
        credentials: Credentials,
        options: ClientOptions,
    ) -> Result<Self, GitHubError> {
        let key = credentials.key();
        let auth = match credentials {
            Credentials::Token(token) => Auth::Token(token),
            Credentials::Basic { username, password } => Auth::Basic { username, password },
            Credentials::App(app) => {
                let (app_name, installation_id) = (app.app.to_string(), app.installation_id);
                Auth::App(AppAuth::new(app).map_err(|source| GitHubError::AppAuth {
                    app: app_name,
                    installation_id,
                    source: Box::new(source),
                })?)
            }
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/vnd.github+json"),
        );
        headers.insert(
            "x-github-api-version",
            HeaderValue::from_static(API_VERSION),
        );
        let http = http_builder()?
            .user_agent(options.user_agent.clone())
            .default_headers(headers)
            .timeout(options.request_timeout)
            .connect_timeout(options.connect_timeout)
            .build()
            .map_err(|e| GitHubError::Build {
                source: Box::new(e),
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                endpoint,
                auth,
                key,
                cache: ResponseCache::new(options.cache_capacity),
                options,
                gate: Mutex::new(Gate::default()),
                registration_tokens: Mutex::new(HashMap::new()),
                rng: Mutex::new(fastrand::Rng::new()),
                counters: Counters::default(),
            }),
        })
    }

    /// The credential this client uses (label safe for logs).
    pub fn credential(&self) -> &CredentialKey {
        &self.inner.key
    }

    /// The endpoint this client talks to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.inner.endpoint
    }

    fn now(&self) -> Timestamp {
        self.inner.options.clock.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_token() {
        let client = GitHubClient::new(
            Endpoint::github_com(),
            Credentials::token("ghp_topsecret"),
            ClientOptions::default(),
        )
        .unwrap();
        let shown = format!("{client:?}");
        assert!(!shown.contains("topsecret"), "{shown}");
        assert!(shown.contains("token-"));
    }
}
