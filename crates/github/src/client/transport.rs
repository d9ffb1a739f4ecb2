//! The request pipeline of a [`GitHubClient`]: one logical [`Request`] goes through the
//! rate-limit gate, the response cache, authorization, the HTTP send with retries and jittered
//! back-off, and the classification of the answer into a body or a typed [`GitHubError`]
//! (steps 1–5 of the client's module doc); lists are walked page by page along their `Link`
//! headers.
//!
//! Contract: a call that is not safe to repeat ([`Repeat::OnlyUnsent`]) is sent again only when
//! GitHub cannot have acted on it (the connection failed, or the answer was a rate limit or a
//! 401 for an installation token to mint anew); a rate-limit block is waited out only when it ends
//! within `max_rate_limit_wait`; every request sent, cache hit, 304 and retry is counted once.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use url::Url;

use super::GitHubClient;
use crate::cache::{CacheControl, Freshness};
use crate::clock::until;
use crate::error::{Call, GitHubError};
use crate::ratelimit::{classify, parse_budget};

/// Whether a call may be repeated after an ambiguous failure (a 5xx or timeout, where the
/// server may or may not have acted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Repeat {
    /// Reads, deletes and token requests: repeating is harmless.
    Safe,
    /// JIT registration: a repeat could meet the runner the first attempt created (409), so
    /// only failures to connect at all are retried.
    OnlyUnsent,
}

/// Which credential authenticates a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum As {
    Credential,
    /// The App's JWT (for `/app/...` calls): no gate, no budget (it has its own).
    AppJwt,
}

/// One logical request, before gate, cache, auth and retries.
pub(super) struct Request {
    pub(super) method: Method,
    pub(super) url: Url,
    pub(super) body: Option<serde_json::Value>,
    pub(super) repeat: Repeat,
    pub(super) auth: As,
    /// Ask GitHub even while a cached copy is fresh (conditionally: a 304 is free).
    pub(super) revalidate: bool,
}

impl Request {
    /// A request with the client's credential, safe to repeat, answered by a fresh cached copy
    /// (for a GET); the other cases set their field on top.
    pub(super) fn new(method: Method, url: Url) -> Self {
        Self {
            method,
            url,
            body: None,
            repeat: Repeat::Safe,
            auth: As::Credential,
            revalidate: false,
        }
    }
}

/// A successful response's body and `Link` header (from GitHub or the cache).
pub(super) struct Response {
    pub(super) body: Arc<[u8]>,
    pub(super) link: Option<String>,
}

impl GitHubClient {
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
        self.inner.counters.retry();
        self.inner.options.clock.sleep(delay).await;
    }

    /// Sends one logical request through gate, cache, auth, retries and classification.
    pub(super) async fn send(&self, request: Request) -> Result<Response, GitHubError> {
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
                counters.cache_hit(&call);
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
            counters.request(&call);
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
                counters.not_modified(&call);
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
                401 if self.authenticates_as_app()
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
                        counters.rate_limited();
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
                            counters.retry();
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

    pub(super) async fn get_json<T: DeserializeOwned>(&self, url: Url) -> Result<T, GitHubError> {
        let path = url.path().to_owned();
        let response = self.send(Request::new(Method::GET, url)).await?;
        decode("GET", path, &response.body)
    }

    pub(super) async fn post_json<T: DeserializeOwned>(
        &self,
        url: Url,
        body: Option<serde_json::Value>,
        repeat: Repeat,
    ) -> Result<T, GitHubError> {
        let path = url.path().to_owned();
        let response = self
            .send(Request {
                body,
                repeat,
                ..Request::new(Method::POST, url)
            })
            .await?;
        decode("POST", path, &response.body)
    }

    /// Every item of a paginated list, following `Link: rel="next"` (never building page URLs).
    pub(super) async fn get_all<T: DeserializeOwned>(
        &self,
        first: Url,
        field: &str,
    ) -> Result<Vec<T>, GitHubError> {
        self.get_all_pages(first, field, false).await
    }

    /// [`Self::get_all`]; with `revalidate`, every page is asked of GitHub even while cached
    /// and fresh.
    pub(super) async fn get_all_pages<T: DeserializeOwned>(
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
                    revalidate,
                    ..Request::new(Method::GET, url)
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
}
