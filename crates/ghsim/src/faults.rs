//! Fault injection: what ghsim does wrong on purpose, configurable at start (CLI flags) and at
//! run time (`PUT /_ghsim/faults`, which merges the given fields into the current settings).
//! Rates are probabilities per request or per delivery, drawn from ghsim's seeded RNG.

use serde::{Deserialize, Serialize};

/// Fault settings. All zero (the default) is a well-behaved GitHub.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Share of REST requests answered `502 Server Error`.
    pub server_error_rate: f64,
    /// REST endpoints that always answer `502 Server Error`: a request fails when its route
    /// (e.g. `/repos/{owner}/{repo}/actions/runners/registration-token`) ends with one of
    /// these, e.g. `/registration-token` or `/generate-jitconfig` (one endpoint down, the rest
    /// of GitHub up).
    pub failing_endpoints: Vec<String>,
    /// REST endpoints the credential lacks permission for, answered `403 Resource not
    /// accessible by personal access token` (a token that lost a permission): entries are
    /// `METHOD suffix` or just `suffix`, e.g. `DELETE /actions/runners/{runner_id}` refuses
    /// DELETE on every route ending with `/actions/runners/{runner_id}`.
    pub forbidden_endpoints: Vec<String>,
    /// Share of REST requests answered with a secondary rate limit (403).
    pub secondary_limit_rate: f64,
    /// `retry-after` of secondary limits, seconds; `None` sends no header (clients must then
    /// wait at least a minute).
    pub secondary_retry_after_secs: Option<u64>,
    /// Primary budget per credential per hour (GitHub: 5,000 for PATs).
    pub primary_budget: u64,
    /// Share of webhook deliveries never sent.
    pub webhook_drop_rate: f64,
    /// Share of deliveries sent twice (same delivery id).
    pub webhook_duplicate_rate: f64,
    /// Share of deliveries held back and sent after the next one.
    pub webhook_reorder_rate: f64,
    /// Extra delay of each delivery, uniformly random up to this many milliseconds.
    pub webhook_max_delay_ms: u64,
    /// Extra delay before each REST answer, uniformly random up to this many milliseconds (a
    /// slow GitHub).
    pub rest_max_latency_ms: u64,
    /// Share of REST requests whose answer does not come within the client's timeout: ghsim
    /// holds them for [`Faults::timeout_hold_ms`] before it runs the endpoint (a client that
    /// gave up and closed the connection meanwhile has the request dropped unanswered).
    pub timeout_rate: f64,
    /// How long a timed-out request is held, milliseconds: by default 31 s, past the 30 s
    /// request timeout of Hangar's GitHub client (`hangar_github::ClientOptions`).
    pub timeout_hold_ms: u64,
    /// Share of REST requests whose TCP connection is reset without an answer (served through
    /// [`crate::serve`]; a router used without it answers them normally).
    pub reset_rate: f64,
    /// Share of REST requests answered `401 Bad credentials`, as for a revoked token.
    pub bad_credentials_rate: f64,
    /// Share of REST requests answered `404 Not Found`, as GitHub answers for what the
    /// credential cannot see.
    pub not_found_rate: f64,
    /// The primary rate limit is exhausted for every credential until this time (Unix
    /// seconds on ghsim's clock): requests are answered [`Faults::primary_exhausted_status`]
    /// with `x-ratelimit-remaining: 0` and `x-ratelimit-reset` set to it.
    pub primary_exhausted_until: Option<i64>,
    /// The status of those answers: GitHub sends 403 or 429.
    pub primary_exhausted_status: u16,
    /// Share of deliveries sent again later, as GitHub's "redeliver" sends them (same
    /// `X-GitHub-Delivery` GUID, recorded as a redelivery attempt).
    pub webhook_redelivery_rate: f64,
    /// The redelivery follows the delivery after a uniformly random delay up to this many
    /// milliseconds.
    pub webhook_redelivery_max_delay_ms: u64,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            server_error_rate: 0.0,
            failing_endpoints: Vec::new(),
            forbidden_endpoints: Vec::new(),
            secondary_limit_rate: 0.0,
            secondary_retry_after_secs: Some(60),
            primary_budget: 5000,
            webhook_drop_rate: 0.0,
            webhook_duplicate_rate: 0.0,
            webhook_reorder_rate: 0.0,
            webhook_max_delay_ms: 0,
            rest_max_latency_ms: 0,
            timeout_rate: 0.0,
            timeout_hold_ms: 31_000,
            reset_rate: 0.0,
            bad_credentials_rate: 0.0,
            not_found_rate: 0.0,
            primary_exhausted_until: None,
            primary_exhausted_status: 403,
            webhook_redelivery_rate: 0.0,
            webhook_redelivery_max_delay_ms: 10_000,
        }
    }
}

/// Why a fault update was rejected.
#[derive(Debug, thiserror::Error)]
pub enum FaultsError {
    /// Not a JSON object of known fields with the right types.
    #[error("invalid fault settings: {0}")]
    Invalid(#[from] serde_json::Error),
    /// A rate outside 0..=1.
    #[error("{0} must be between 0 and 1")]
    Rate(&'static str),
    /// A primary-limit status GitHub does not send.
    #[error("primary_exhausted_status must be 403 or 429, not {0}")]
    PrimaryStatus(u16),
}

impl Faults {
    /// Whether a request to the route `path` is answered 502 by [`Faults::failing_endpoints`].
    pub fn endpoint_fails(&self, path: &str) -> bool {
        self.failing_endpoints
            .iter()
            .any(|suffix| !suffix.is_empty() && path.ends_with(suffix.as_str()))
    }

    /// Whether a request `method route` is answered 403 by [`Faults::forbidden_endpoints`]:
    /// an entry `METHOD suffix` matches that method and any route ending with the suffix, an
    /// entry without a method any method.
    pub fn endpoint_forbidden(&self, method: &str, route: &str) -> bool {
        self.forbidden_endpoints.iter().any(|entry| {
            let (wanted, suffix) = match entry.split_once(' ') {
                Some((m, suffix)) => (Some(m), suffix),
                None => (None, entry.as_str()),
            };
            !suffix.is_empty()
                && wanted.is_none_or(|m| m.eq_ignore_ascii_case(method))
                && route.ends_with(suffix)
        })
    }

    /// The settings with the fields of `patch` (a JSON object) replaced.
    pub fn merged(&self, patch: serde_json::Value) -> Result<Self, FaultsError> {
        let mut current = serde_json::to_value(self)?;
        if let (Some(current), serde_json::Value::Object(patch)) = (current.as_object_mut(), patch)
        {
            current.extend(patch);
        }
        let merged: Self = serde_json::from_value(current)?;
        merged.validate()?;
        Ok(merged)
    }

    fn validate(&self) -> Result<(), FaultsError> {
        for (name, rate) in [
            ("server_error_rate", self.server_error_rate),
            ("secondary_limit_rate", self.secondary_limit_rate),
            ("webhook_drop_rate", self.webhook_drop_rate),
            ("webhook_duplicate_rate", self.webhook_duplicate_rate),
            ("webhook_reorder_rate", self.webhook_reorder_rate),
            ("timeout_rate", self.timeout_rate),
            ("reset_rate", self.reset_rate),
            ("bad_credentials_rate", self.bad_credentials_rate),
            ("not_found_rate", self.not_found_rate),
            ("webhook_redelivery_rate", self.webhook_redelivery_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(FaultsError::Rate(name));
            }
        }
        if ![403, 429].contains(&self.primary_exhausted_status) {
            return Err(FaultsError::PrimaryStatus(self.primary_exhausted_status));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_replaces_only_given_fields() {
        let f = Faults::default()
            .merged(
                serde_json::json!({"server_error_rate": 0.5, "secondary_retry_after_secs": null}),
            )
            .unwrap();
        assert_eq!(f.server_error_rate, 0.5);
        assert_eq!(f.secondary_retry_after_secs, None);
        assert_eq!(f.primary_budget, 5000);
    }

    #[test]
    fn failing_endpoints_match_route_suffixes() {
        let f = Faults::default()
            .merged(serde_json::json!({"failing_endpoints": ["/registration-token"]}))
            .unwrap();
        for (path, fails) in [
            (
                "/repos/{owner}/{repo}/actions/runners/registration-token",
                true,
            ),
            ("/orgs/{org}/actions/runners/registration-token", true),
            ("/orgs/{org}/actions/runners/remove-token", false),
            ("/orgs/{org}/actions/runners", false),
        ] {
            assert_eq!(f.endpoint_fails(path), fails, "{path}");
        }
        // An empty suffix fails nothing.
        let f = Faults {
            failing_endpoints: vec![String::new()],
            ..Faults::default()
        };
        assert!(!f.endpoint_fails("/orgs/{org}/actions/runners"));
    }

    #[test]
    fn forbidden_endpoints_match_method_and_route_suffixes() {
        let f = Faults::default()
            .merged(
                serde_json::json!({"forbidden_endpoints": ["DELETE /actions/runners/{runner_id}"]}),
            )
            .unwrap();
        for (method, route, refused) in [
            (
                "DELETE",
                "/repos/{owner}/{repo}/actions/runners/{runner_id}",
                true,
            ),
            ("DELETE", "/orgs/{org}/actions/runners/{runner_id}", true),
            ("GET", "/orgs/{org}/actions/runners/{runner_id}", false),
            ("DELETE", "/orgs/{org}/actions/runners", false),
        ] {
            assert_eq!(
                f.endpoint_forbidden(method, route),
                refused,
                "{method} {route}"
            );
        }
        // Without a method, every method of the route.
        let f = Faults {
            forbidden_endpoints: vec!["/registration-token".into()],
            ..Faults::default()
        };
        assert!(f.endpoint_forbidden("POST", "/orgs/{org}/actions/runners/registration-token"));
    }

    #[test]
    fn merge_rejects_nonsense() {
        assert!(
            Faults::default()
                .merged(serde_json::json!({"server_error_rate": 2.0}))
                .is_err()
        );
        assert!(
            Faults::default()
                .merged(serde_json::json!({"typo_rate": 0.1}))
                .is_err()
        );
        for bad in [
            serde_json::json!({"reset_rate": 1.5}),
            serde_json::json!({"not_found_rate": -0.1}),
            serde_json::json!({"primary_exhausted_status": 500}),
        ] {
            assert!(Faults::default().merged(bad.clone()).is_err(), "{bad}");
        }
    }
}
