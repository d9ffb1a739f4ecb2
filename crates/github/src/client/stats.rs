//! What a [`GitHubClient`] did, counted: in total ([`ClientStats`]) and by endpoint
//! ([`EndpointStats`], keyed by [`endpoint_template`] so that metrics have a bounded label set).
//!
//! Contract: the transport reports each event once, when it happens (a request sent, a GET the
//! cache answered, a 304, a retry, a rate-limit answer, an installation token minted); counting
//! never fails and holds a lock only to update one endpoint's row.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::GitHubClient;
use crate::error::Call;

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

/// The live counters behind [`ClientStats`] and [`EndpointStats`].
#[derive(Debug, Default)]
pub(super) struct Counters {
    by_endpoint: Mutex<HashMap<String, EndpointStats>>,
    requests: AtomicU64,
    cache_hits: AtomicU64,
    not_modified: AtomicU64,
    retries: AtomicU64,
    rate_limited: AtomicU64,
    installation_tokens: AtomicU64,
}

impl Counters {
    /// An HTTP request sent for `call`.
    pub(super) fn request(&self, call: &Call) {
        bump(&self.requests);
        self.endpoint(call, |e| e.requests += 1);
    }

    /// A GET for `call` answered from the cache without a request.
    pub(super) fn cache_hit(&self, call: &Call) {
        bump(&self.cache_hits);
        self.endpoint(call, |e| e.cache_hits += 1);
    }

    /// A revalidation for `call` answered `304 Not Modified`.
    pub(super) fn not_modified(&self, call: &Call) {
        bump(&self.not_modified);
        self.endpoint(call, |e| e.not_modified += 1);
    }

    /// A retry: after a 5xx, a connection failure or a short rate-limit wait.
    pub(super) fn retry(&self) {
        bump(&self.retries);
    }

    /// A response that was a rate limit.
    pub(super) fn rate_limited(&self) {
        bump(&self.rate_limited);
    }

    /// An installation token minted.
    pub(super) fn installation_token(&self) {
        bump(&self.installation_tokens);
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

    /// Every endpoint's row, sorted by template.
    fn endpoint_rows(&self) -> Vec<(String, EndpointStats)> {
        let map = self.by_endpoint.lock().expect("endpoint counters lock");
        let mut rows: Vec<_> = map.iter().map(|(k, v)| (k.clone(), *v)).collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl GitHubClient {
    /// What the client did so far.
    pub fn stats(&self) -> ClientStats {
        self.inner.counters.snapshot()
    }

    /// What the client did so far, by endpoint template (see [`endpoint_template`]).
    pub fn endpoint_stats(&self) -> Vec<(String, EndpointStats)> {
        self.inner.counters.endpoint_rows()
    }
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
}
