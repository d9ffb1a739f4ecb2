//! [`GitHubClient`]: the real HTTP implementation of [`GitHubApi`].
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

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;

use crate::api::GitHubApi;
use crate::auth::app::{AppAuth, InstallationToken, still_good};
use crate::auth::{CredentialKey, Credentials};
use crate::cache::{CacheControl, Freshness, ResponseCache};
use crate::clock::{Clock, SystemClock, add, until};
use crate::endpoint::Endpoint;
use crate::error::{AppAuthError, Call, GitHubError};
use crate::models::{
    JitConfig, JitConfigRequest, Job, RateLimit, RunStatus, Runner, RunnerGroup, RunnerId,
    RunnerToken, WorkflowRun,
};
use crate::ratelimit::{Gate, classify, parse_budget};
use crate::retry::RetryPolicy;
use crate::scope::Scope;
use crate::secret::Secret;

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

/// Counters of what a client did, for metrics and measurements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClientStats {
    /// HTTP requests sent (including retries, revalidations and token exchanges).
    pub requests: u64,
    /// GETs answered from the cache without a request.
    pub cache_hits: u64,
    /// Revalidations answered `304 Not Modified`.
    pub not_modified: u64,
    /// Retries after 5xx, connection failures and short rate-limit waits.
    pub retries: u64,
    /// Responses that were rate limits.
    pub rate_limited: u64,
    /// Installation tokens minted.
    pub installation_tokens: u64,
}

/// What one endpoint (`METHOD /template`) cost: requests sent and GETs the cache answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EndpointStats {
    /// HTTP requests sent (including retries and revalidations).
    pub requests: u64,
    /// GETs answered from the cache without a request.
    pub cache_hits: u64,
    /// Revalidations answered `304 Not Modified` (free under the rate limit).
    pub not_modified: u64,
}

/// `METHOD /template` of a REST path: owner, repository, organization, enterprise and numeric
/// ids become placeholders, so metrics have a bounded label set.
pub fn endpoint_template(method: &str, path: &str) -> String {
    let mut out = String::from(method);
    out.push(' ');
    let mut previous = "";
    let mut owner_next = 0;
    for segment in path.trim_matches('/').split('/') {
        out.push('/');
        let placeholder = match previous {
            "repos" => {
                owner_next = 1;
                Some("{owner}")
            }
            "orgs" => Some("{org}"),
            "enterprises" => Some("{enterprise}"),
            _ if owner_next == 1 => {
                owner_next = 0;
                Some("{repo}")
            }
            _ if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) => Some("{id}"),
            _ => None,
        };
        out.push_str(placeholder.unwrap_or(segment));
        previous = segment;
    }
    out
}

#[derive(Debug, Default)]
struct Counters {
    by_endpoint: Mutex<HashMap<String, EndpointStats>>,
    requests: AtomicU64,
    cache_hits: AtomicU64,
    not_modified: AtomicU64,
    retries: AtomicU64,
    rate_limited: AtomicU64,
    installation_tokens: AtomicU64,
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn endpoint(&self, call: &Call, count: impl FnOnce(&mut EndpointStats)) {
        let mut map = self.by_endpoint.lock().expect("endpoint counters lock");
        count(
            map.entry(endpoint_template(call.method, &call.path))
                .or_default(),
        );
    }

    fn snapshot(&self) -> ClientStats {
        ClientStats {
            requests: self.requests.load(Ordering::Relaxed),
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
            not_modified: self.not_modified.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            rate_limited: self.rate_limited.load(Ordering::Relaxed),
            installation_tokens: self.installation_tokens.load(Ordering::Relaxed),
        }
    }
}

enum Auth {
    Token(Secret),
    Basic { username: String, password: Secret },
    App(AppAuth),
}

/// Whether a call may be repeated after an ambiguous failure (a 5xx or timeout, where the
/// server may or may not have acted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Repeat {
    /// Reads, deletes and token requests: repeating is harmless.
    Safe,
    /// JIT registration: a repeat could meet the runner the first attempt created (409), so
    /// only failures to connect at all are retried.
    OnlyUnsent,
}

/// Which credential authenticates a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum As {
    Credential,
    /// The App's JWT (for `/app/...` calls): no gate, no budget (it has its own).
    AppJwt,
}

struct Request {
    method: Method,
    url: Url,
    body: Option<serde_json::Value>,
    repeat: Repeat,
    auth: As,
    /// Ask GitHub even while a cached copy is fresh (conditionally: a 304 is free).
    revalidate: bool,
}

struct Response {
    body: Arc<[u8]>,
    link: Option<String>,
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

    /// What the client did so far.
    pub fn stats(&self) -> ClientStats {
        self.inner.counters.snapshot()
    }

    /// What the client did so far, by endpoint template (see [`endpoint_template`]).
    pub fn endpoint_stats(&self) -> Vec<(String, EndpointStats)> {
        let map = self
            .inner
            .counters
            .by_endpoint
            .lock()
            .expect("endpoint counters lock");
        let mut rows: Vec<_> = map.iter().map(|(k, v)| (k.clone(), *v)).collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }

    fn now(&self) -> Timestamp {
        self.inner.options.clock.now()
    }

    fn scope_url(&self, scope: &Scope, rest: &[&str]) -> Url {
        let mut segments = scope.path_segments();
        segments.push("actions");
        segments.extend_from_slice(rest);
        self.inner.endpoint.api(&segments)
    }

    fn list_url(&self, mut url: Url, query: &[(&str, &str)]) -> Url {
        {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in query {
                pairs.append_pair(k, v);
            }
            pairs.append_pair("per_page", &self.inner.options.per_page.to_string());
        }
        url
    }

    /// Waits out or reports a rate-limit block of this credential.
    async fn pass_gate(&self, call: &Call) -> Result<(), GitHubError> {
        let now = self.now();
        let blocked = self.inner.gate.lock().expect("gate lock").blocked(now);
        if let Some((kind, retry_at)) = blocked {
            let wait = until(now, retry_at);
            if wait > self.inner.options.max_rate_limit_wait {
                return Err(GitHubError::RateLimited {
                    call: call.clone(),
                    kind,
                    retry_at,
                });
            }
            tracing::debug!(%call, ?wait, %kind, "waiting for rate limit");
            self.inner.options.clock.sleep(wait).await;
        }
        Ok(())
    }

    async fn backoff(&self, attempt: u32) {
        let delay = {
            let mut rng = self.inner.rng.lock().expect("rng lock");
            self.inner.options.retry.backoff(attempt, &mut rng)
        };
        Counters::bump(&self.inner.counters.retries);
        self.inner.options.clock.sleep(delay).await;
    }

    /// The `Authorization` header for a request, minting an installation token if needed.
    async fn authorization(&self, who: As) -> Result<HeaderValue, GitHubError> {
        let value = match (&self.inner.auth, who) {
            (Auth::Token(token), _) => format!("Bearer {}", token.expose()),
            (Auth::Basic { username, password }, _) => {
                use base64::Engine;
                let pair = format!("{username}:{}", password.expose());
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                )
            }
            (Auth::App(app), As::AppJwt) => {
                let jwt = app.jwt(self.now()).map_err(|e| self.app_error(e))?;
                format!("Bearer {}", jwt.expose())
            }
            (Auth::App(app), As::Credential) => {
                let token = self.installation_token(app).await?;
                format!("Bearer {}", token.expose())
            }
        };
        let mut value = HeaderValue::from_str(&value).map_err(|e| GitHubError::Build {
            source: Box::new(e),
        })?;
        value.set_sensitive(true);
        Ok(value)
    }

    fn app_error(&self, source: AppAuthError) -> GitHubError {
        match &self.inner.auth {
            Auth::App(app) => GitHubError::AppAuth {
                app: app.creds.app.to_string(),
                installation_id: app.creds.installation_id,
                source: Box::new(source),
            },
            _ => unreachable!("app errors come from app credentials"),
        }
    }

    /// The cached installation token, or a new one when less than the margin remains.
    async fn installation_token(&self, app: &AppAuth) -> Result<Secret, GitHubError> {
        let mut slot = app.slot.lock().await;
        let margin = self.inner.options.installation_token_margin;
        if let Some(token) = slot.as_ref()
            && still_good(token, self.now(), margin)
        {
            return Ok(token.token.clone());
        }
        let url = self.inner.endpoint.api(&[
            "app",
            "installations",
            &app.creds.installation_id.to_string(),
            "access_tokens",
        ]);
        let response = Box::pin(self.send(Request {
            method: Method::POST,
            url,
            body: None,
            repeat: Repeat::Safe,
            auth: As::AppJwt,
            revalidate: false,
        }))
        .await
        .map_err(|e| self.app_error(AppAuthError::Request(e)))?;
        let token: InstallationToken = serde_json::from_slice(&response.body).map_err(|e| {
            self.app_error(AppAuthError::Request(GitHubError::Decode {
                call: Call {
                    method: "POST",
                    path: format!(
                        "/app/installations/{}/access_tokens",
                        app.creds.installation_id
                    ),
                },
                source: e,
            }))
        })?;
        Counters::bump(&self.inner.counters.installation_tokens);
        tracing::debug!(credential = %self.inner.key, expires_at = %token.expires_at, "minted installation token");
        let secret = token.token.clone();
        *slot = Some(token);
        Ok(secret)
    }

    async fn forget_installation_token(&self) {
        if let Auth::App(app) = &self.inner.auth {
            *app.slot.lock().await = None;
        }
    }

    /// Sends one logical request through gate, cache, auth, retries and classification.
    async fn send(&self, request: Request) -> Result<Response, GitHubError> {
        let Request {
            method,
            url,
            body,
            repeat,
            auth,
            revalidate,
        } = request;
        let call = Call {
            method: method_name(&method),
            path: url.path().to_owned(),
        };
        let cacheable = method == Method::GET && self.inner.options.cache;
        let cache_key = url.as_str().to_owned();
        let max_attempts = self.inner.options.retry.max_attempts.max(1);
        let counters = &self.inner.counters;
        let mut attempt = 0;
        let mut reauthenticated = false;
        loop {
            attempt += 1;
            if auth == As::Credential {
                self.pass_gate(&call).await?;
            }
            let cached = if cacheable {
                self.inner.cache.get(&cache_key)
            } else {
                None
            };
            if let Some(entry) = &cached
                && !revalidate
                && entry.is_fresh(self.now())
            {
                Counters::bump(&counters.cache_hits);
                counters.endpoint(&call, |e| e.cache_hits += 1);
                return Ok(Response {
                    body: entry.body.clone(),
                    link: entry.link.clone(),
                });
            }
            let mut builder = self
                .inner
                .http
                .request(method.clone(), url.clone())
                .header(header::AUTHORIZATION, self.authorization(auth).await?);
            if let Some(etag) = cached.as_ref().and_then(|e| e.etag.as_deref()) {
                builder = builder.header(header::IF_NONE_MATCH, etag);
            }
            if let Some(body) = &body {
                builder = builder.json(body);
            }
            Counters::bump(&counters.requests);
            counters.endpoint(&call, |e| e.requests += 1);
            let result = match builder.send().await {
                Ok(response) => {
                    let status = response.status();
                    let headers = response.headers().clone();
                    response.bytes().await.map(|b| (status, headers, b))
                }
                Err(e) => Err(e),
            };
            let (status, headers, bytes) = match result {
                Ok(ok) => ok,
                Err(source) => {
                    let may_repeat = repeat == Repeat::Safe || source.is_connect();
                    if may_repeat && attempt < max_attempts {
                        tracing::debug!(%call, attempt, error = %source, "transport error, retrying");
                        self.backoff(attempt).await;
                        continue;
                    }
                    return Err(GitHubError::Transport {
                        call,
                        attempts: attempt,
                        source,
                    });
                }
            };
            let now = self.now();
            if auth == As::Credential {
                self.inner
                    .gate
                    .lock()
                    .expect("gate lock")
                    .observe(parse_budget(&headers));
            }
            let freshness = Freshness {
                control: headers
                    .get(header::CACHE_CONTROL)
                    .and_then(|v| v.to_str().ok())
                    .map(CacheControl::parse)
                    .unwrap_or_default(),
                age: headers
                    .get(header::AGE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse().ok())
                    .map(Duration::from_secs)
                    .unwrap_or_default(),
            };
            let link = headers
                .get(header::LINK)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);

            if status == StatusCode::NOT_MODIFIED
                && let Some(entry) = self.inner.cache.revalidated(&cache_key, freshness, now)
            {
                Counters::bump(&counters.not_modified);
                counters.endpoint(&call, |e| e.not_modified += 1);
                return Ok(Response {
                    body: entry.body,
                    link: entry.link,
                });
            }
            let body: Arc<[u8]> = Arc::from(bytes.as_ref());
            if status.is_success() {
                if cacheable && status == StatusCode::OK {
                    let etag = headers
                        .get(header::ETAG)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    self.inner.cache.store(
                        &cache_key,
                        freshness,
                        etag,
                        link.clone(),
                        body.clone(),
                        now,
                    );
                }
                return Ok(Response { body, link });
            }

            let message = error_message(&body);
            match status.as_u16() {
                401 if matches!(self.inner.auth, Auth::App(_))
                    && auth == As::Credential
                    && !reauthenticated =>
                {
                    // The installation token was revoked or expired early: mint a new one once.
                    reauthenticated = true;
                    attempt -= 1;
                    self.forget_installation_token().await;
                    continue;
                }
                403 | 429 => {
                    if let Some((kind, retry_at)) =
                        classify(status.as_u16(), &headers, &message, now)
                    {
                        Counters::bump(&counters.rate_limited);
                        if auth == As::Credential {
                            self.inner
                                .gate
                                .lock()
                                .expect("gate lock")
                                .block(kind, retry_at);
                        }
                        let wait = until(now, retry_at);
                        tracing::warn!(%call, %kind, %retry_at, credential = %self.inner.key, "rate limited");
                        if wait <= self.inner.options.max_rate_limit_wait && attempt < max_attempts
                        {
                            Counters::bump(&counters.retries);
                            if auth == As::AppJwt {
                                self.inner.options.clock.sleep(wait).await;
                            }
                            continue;
                        }
                        return Err(GitHubError::RateLimited {
                            call,
                            kind,
                            retry_at,
                        });
                    }
                    return Err(if status == StatusCode::FORBIDDEN {
                        GitHubError::Forbidden { call, message }
                    } else {
                        GitHubError::Rejected {
                            call,
                            status: status.as_u16(),
                            message,
                        }
                    });
                }
                500..=599 => {
                    if repeat == Repeat::Safe && attempt < max_attempts {
                        tracing::debug!(%call, attempt, %status, "server error, retrying");
                        self.backoff(attempt).await;
                        continue;
                    }
                    return Err(GitHubError::Server {
                        call,
                        status: status.as_u16(),
                        attempts: attempt,
                        message,
                    });
                }
                _ => return Err(status_error(call, status, message)),
            }
        }
    }

    async fn get_json<T: DeserializeOwned>(&self, url: Url) -> Result<T, GitHubError> {
        let path = url.path().to_owned();
        let response = self
            .send(Request {
                method: Method::GET,
                url,
                body: None,
                repeat: Repeat::Safe,
                auth: As::Credential,
                revalidate: false,
            })
            .await?;
        decode("GET", path, &response.body)
    }

    async fn post_json<T: DeserializeOwned>(
        &self,
        url: Url,
        body: Option<serde_json::Value>,
        repeat: Repeat,
    ) -> Result<T, GitHubError> {
        let path = url.path().to_owned();
        let response = self
            .send(Request {
                method: Method::POST,
                url,
                body,
                repeat,
                auth: As::Credential,
                revalidate: false,
            })
            .await?;
        decode("POST", path, &response.body)
    }

    /// Every item of a paginated list, following `Link: rel="next"` (never building page URLs).
    async fn get_all<T: DeserializeOwned>(
        &self,
        first: Url,
        field: &str,
    ) -> Result<Vec<T>, GitHubError> {
        self.get_all_pages(first, field, false).await
    }

    /// [`Self::get_all`]; with `revalidate`, every page is asked of GitHub even while cached
    /// and fresh.
    async fn get_all_pages<T: DeserializeOwned>(
        &self,
        first: Url,
        field: &str,
        revalidate: bool,
    ) -> Result<Vec<T>, GitHubError> {
        // A runaway `next` chain must not loop forever; 1,000 pages of 100 is GitHub's
        // search cap and far beyond any runner scope.
        const MAX_PAGES: usize = 1000;
        let mut items = Vec::new();
        let mut next = Some(first);
        let mut pages = 0;
        while let Some(url) = next.take() {
            pages += 1;
            let path = url.path().to_owned();
            let response = self
                .send(Request {
                    method: Method::GET,
                    url,
                    body: None,
                    repeat: Repeat::Safe,
                    auth: As::Credential,
                    revalidate,
                })
                .await?;
            let mut page: serde_json::Map<String, serde_json::Value> =
                decode("GET", path.clone(), &response.body)?;
            let list = page.remove(field).unwrap_or_default();
            let mut batch: Vec<T> =
                serde_json::from_value(list).map_err(|source| GitHubError::Decode {
                    call: Call {
                        method: "GET",
                        path,
                    },
                    source,
                })?;
            items.append(&mut batch);
            next = response
                .link
                .as_deref()
                .and_then(next_link)
                .and_then(|u| Url::parse(&u).ok());
            if pages >= MAX_PAGES {
                break;
            }
        }
        Ok(items)
    }

    async fn runner_token(&self, scope: &Scope, kind: &str) -> Result<RunnerToken, GitHubError> {
        let url = self.scope_url(scope, &["runners", kind]);
        self.post_json(url, None, Repeat::Safe).await
    }
}

#[async_trait]
impl GitHubApi for GitHubClient {
    async fn registration_token(&self, scope: &Scope) -> Result<RunnerToken, GitHubError> {
        let min_ttl = self.inner.options.registration_token_min_ttl;
        let cached = self
            .inner
            .registration_tokens
            .lock()
            .expect("token cache lock")
            .get(scope)
            .filter(|t| add(self.now(), min_ttl) < t.expires_at)
            .cloned();
        if let Some(token) = cached {
            return Ok(token);
        }
        let token = self.runner_token(scope, "registration-token").await?;
        self.inner
            .registration_tokens
            .lock()
            .expect("token cache lock")
            .insert(scope.clone(), token.clone());
        Ok(token)
    }

    async fn remove_token(&self, scope: &Scope) -> Result<RunnerToken, GitHubError> {
        self.runner_token(scope, "remove-token").await
    }

    async fn generate_jit_config(
        &self,
        scope: &Scope,
        request: &JitConfigRequest,
    ) -> Result<JitConfig, GitHubError> {
        let url = self.scope_url(scope, &["runners", "generate-jitconfig"]);
        let body = serde_json::to_value(request).expect("JitConfigRequest serializes");
        let config: JitConfig = self.post_json(url, Some(body), Repeat::OnlyUnsent).await?;
        self.inner
            .cache
            .invalidate_prefix(self.scope_url(scope, &["runners"]).as_str());
        Ok(config)
    }

    async fn list_runners(&self, scope: &Scope) -> Result<Vec<Runner>, GitHubError> {
        let url = self.list_url(self.scope_url(scope, &["runners"]), &[]);
        self.get_all(url, "runners").await
    }

    async fn list_runners_revalidated(&self, scope: &Scope) -> Result<Vec<Runner>, GitHubError> {
        let url = self.list_url(self.scope_url(scope, &["runners"]), &[]);
        self.get_all_pages(url, "runners", true).await
    }

    async fn find_runner(&self, scope: &Scope, name: &str) -> Result<Option<Runner>, GitHubError> {
        let url = self.list_url(self.scope_url(scope, &["runners"]), &[("name", name)]);
        let runners: Vec<Runner> = self.get_all(url, "runners").await?;
        Ok(runners.into_iter().find(|r| r.name == name))
    }

    async fn get_runner(&self, scope: &Scope, id: RunnerId) -> Result<Runner, GitHubError> {
        self.get_json(self.scope_url(scope, &["runners", &id.to_string()]))
            .await
    }

    async fn delete_runner(&self, scope: &Scope, id: RunnerId) -> Result<(), GitHubError> {
        let url = self.scope_url(scope, &["runners", &id.to_string()]);
        self.send(Request {
            method: Method::DELETE,
            url,
            body: None,
            repeat: Repeat::Safe,
            auth: As::Credential,
            revalidate: false,
        })
        .await?;
        // The runner and every list that showed it changed; do not serve them stale.
        self.inner
            .cache
            .invalidate_prefix(self.scope_url(scope, &["runners"]).as_str());
        Ok(())
    }

    async fn list_org_runner_groups(
        &self,
        org: &str,
        visible_to_repository: Option<&str>,
    ) -> Result<Vec<RunnerGroup>, GitHubError> {
        let base = self.scope_url(&Scope::org(org), &["runner-groups"]);
        let query: Vec<(&str, &str)> = visible_to_repository
            .map(|r| ("visible_to_repository", r))
            .into_iter()
            .collect();
        self.get_all(self.list_url(base, &query), "runner_groups")
            .await
    }

    async fn list_enterprise_runner_groups(
        &self,
        enterprise: &str,
        visible_to_organization: Option<&str>,
    ) -> Result<Vec<RunnerGroup>, GitHubError> {
        let base = self.scope_url(&Scope::enterprise(enterprise), &["runner-groups"]);
        let query: Vec<(&str, &str)> = visible_to_organization
            .map(|o| ("visible_to_organization", o))
            .into_iter()
            .collect();
        self.get_all(self.list_url(base, &query), "runner_groups")
            .await
    }

    async fn list_workflow_runs(
        &self,
        owner: &str,
        repo: &str,
        status: RunStatus,
    ) -> Result<Vec<WorkflowRun>, GitHubError> {
        let base = self.scope_url(&Scope::repo(owner, repo), &["runs"]);
        self.get_all(
            self.list_url(base, &[("status", status.as_str())]),
            "workflow_runs",
        )
        .await
    }

    async fn list_jobs(
        &self,
        owner: &str,
        repo: &str,
        run_id: u64,
    ) -> Result<Vec<Job>, GitHubError> {
        let base = self.scope_url(
            &Scope::repo(owner, repo),
            &["runs", &run_id.to_string(), "jobs"],
        );
        self.get_all(self.list_url(base, &[]), "jobs").await
    }

    fn rate_limit(&self) -> Option<RateLimit> {
        self.inner.gate.lock().expect("gate lock").budget()
    }
}

fn method_name(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

fn decode<T: DeserializeOwned>(
    method: &'static str,
    path: String,
    body: &[u8],
) -> Result<T, GitHubError> {
    serde_json::from_slice(body).map_err(|source| GitHubError::Decode {
        call: Call { method, path },
        source,
    })
}

/// GitHub's error `message`, or the raw body (truncated) if it is not GitHub's error shape.
fn error_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        message: String,
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => e.message,
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    }
}

/// Maps a non-retryable, non-rate-limit status to its error.
fn status_error(call: Call, status: StatusCode, message: String) -> GitHubError {
    match status.as_u16() {
        404 => GitHubError::NotFound { call, message },
        401 => GitHubError::Unauthorized { call, message },
        409 => GitHubError::Conflict { call, message },
        422 if call.method == "DELETE" && message.contains("still running a job") => {
            GitHubError::RunnerBusy { call, message }
        }
        code => GitHubError::Rejected {
            call,
            status: code,
            message,
        },
    }
}

/// The `rel="next"` URL of a `Link` header.
pub fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let mut pieces = part.split(';');
        let target = pieces.next()?.trim();
        let is_next = pieces.any(|p| {
            let p = p.trim();
            p == "rel=\"next\"" || p == "rel=next"
        });
        (is_next && target.starts_with('<') && target.ends_with('>'))
            .then(|| target[1..target.len() - 1].to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_templates_hide_names_and_ids() {
        let cases = [
            (
                "GET",
                "/repos/octo/app/actions/runners",
                "GET /repos/{owner}/{repo}/actions/runners",
            ),
            (
                "DELETE",
                "/orgs/acme/actions/runners/42",
                "DELETE /orgs/{org}/actions/runners/{id}",
            ),
            (
                "POST",
                "/enterprises/big/actions/runners/generate-jitconfig",
                "POST /enterprises/{enterprise}/actions/runners/generate-jitconfig",
            ),
            (
                "GET",
                "/api/v3/repos/o/r/actions/runs/7/jobs",
                "GET /api/v3/repos/{owner}/{repo}/actions/runs/{id}/jobs",
            ),
            (
                "POST",
                "/app/installations/9/access_tokens",
                "POST /app/installations/{id}/access_tokens",
            ),
        ];
        for (method, path, want) in cases {
            assert_eq!(endpoint_template(method, path), want, "{path}");
        }
    }

    #[test]
    fn next_link_from_a_real_header() {
        let header = "<https://api.github.com/repositories/515435940/issues?per_page=3&page=1>; rel=\"prev\", <https://api.github.com/repositories/515435940/issues?per_page=3&page=3>; rel=\"next\", <https://api.github.com/repositories/515435940/issues?per_page=3&page=5>; rel=\"last\", <https://api.github.com/repositories/515435940/issues?per_page=3&page=1>; rel=\"first\"";
        assert_eq!(
            next_link(header).as_deref(),
            Some("https://api.github.com/repositories/515435940/issues?per_page=3&page=3")
        );
        assert_eq!(next_link("<https://x/?page=1>; rel=\"prev\""), None);
        assert_eq!(next_link(""), None);
    }

    #[test]
    fn busy_runner_is_typed_only_for_delete() {
        let call = |method| Call {
            method,
            path: "/orgs/o/actions/runners/1".into(),
        };
        let message = "Bad request - Runner \"r\" is still running a job\"".to_owned();
        assert!(matches!(
            status_error(
                call("DELETE"),
                StatusCode::UNPROCESSABLE_ENTITY,
                message.clone()
            ),
            GitHubError::RunnerBusy { .. }
        ));
        assert!(matches!(
            status_error(call("POST"), StatusCode::UNPROCESSABLE_ENTITY, message),
            GitHubError::Rejected { status: 422, .. }
        ));
        assert!(matches!(
            status_error(call("GET"), StatusCode::NOT_FOUND, "Not Found".into()),
            GitHubError::NotFound { .. }
        ));
    }

    #[test]
    fn error_message_prefers_githubs_field() {
        assert_eq!(
            error_message(br#"{"message":"Bad credentials","documentation_url":"x"}"#),
            "Bad credentials"
        );
        assert_eq!(error_message(b"<html>oops"), "<html>oops");
    }

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
