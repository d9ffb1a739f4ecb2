//! The client's errors: one variant per thing a caller reacts to differently.
//!
//! Every variant says which call failed ([`Call`]: method and path, never a token). Controllers
//! branch on the variant (a busy runner is retried later, a missing one is already gone) and
//! label metrics with [`GitHubError::category`], whose values are stable.

use std::fmt;

use jiff::Timestamp;

/// One REST call, for error messages: method and path (no host, no query, no credentials).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// HTTP method.
    pub method: &'static str,
    /// Request path, e.g. `/orgs/acme/actions/runners/7`.
    pub path: String,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

/// Which of GitHub's rate limits stopped a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RateLimitKind {
    /// The hourly budget of the credential is used up (`x-ratelimit-remaining: 0`).
    Primary,
    /// A secondary (abuse) limit: too many requests too fast, with or without `retry-after`.
    Secondary,
}

impl fmt::Display for RateLimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Primary => "primary",
            Self::Secondary => "secondary",
        })
    }
}

/// A failed GitHub call.
#[derive(Debug, thiserror::Error)]
pub enum GitHubError {
    /// 422 on runner deletion: the runner is running a job. Retry after the job ends.
    #[error("{call}: runner is still running a job ({message})")]
    RunnerBusy {
        /// The failed call.
        call: Call,
        /// GitHub's message.
        message: String,
    },
    /// 404: the resource (or the scope) does not exist or is not visible to the credential.
    #[error("{call}: not found ({message})")]
    NotFound {
        /// The failed call.
        call: Call,
        /// GitHub's message.
        message: String,
    },
    /// 401: the credential is wrong or expired.
    #[error("{call}: unauthorized ({message})")]
    Unauthorized {
        /// The failed call.
        call: Call,
        /// GitHub's message.
        message: String,
    },
    /// 403 that is not a rate limit: the credential lacks a permission or scope.
    #[error("{call}: forbidden ({message})")]
    Forbidden {
        /// The failed call.
        call: Call,
        /// GitHub's message.
        message: String,
    },
    /// A rate limit; no request for this credential is sent before `retry_at`.
    #[error("{call}: {kind} rate limit, retry at {retry_at}")]
    RateLimited {
        /// The failed call.
        call: Call,
        /// Which limit.
        kind: RateLimitKind,
        /// When requests may resume.
        retry_at: Timestamp,
    },
    /// 409, e.g. a JIT runner name that is taken.
    #[error("{call}: conflict ({message})")]
    Conflict {
        /// The failed call.
        call: Call,
        /// GitHub's message.
        message: String,
    },
    /// Another 4xx (422 validation failures, 400, …).
    #[error("{call}: rejected with status {status} ({message})")]
    Rejected {
        /// The failed call.
        call: Call,
        /// HTTP status.
        status: u16,
        /// GitHub's message.
        message: String,
    },
    /// 5xx that persisted through the retries.
    #[error("{call}: server error {status} after {attempts} attempt(s) ({message})")]
    Server {
        /// The failed call.
        call: Call,
        /// HTTP status of the last attempt.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// GitHub's message.
        message: String,
    },
    /// The request did not complete: connection refused, reset, or timed out.
    #[error("{call}: request failed after {attempts} attempt(s)")]
    Transport {
        /// The failed call.
        call: Call,
        /// Attempts made.
        attempts: u32,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The response body is not what the endpoint documents.
    #[error("{call}: unable to decode the response")]
    Decode {
        /// The failed call.
        call: Call,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// The GitHub App credential could not produce an installation token.
    #[error(
        "unable to get an installation token for GitHub App {app} installation {installation_id}"
    )]
    AppAuth {
        /// App id or client id.
        app: String,
        /// Installation id.
        installation_id: u64,
        /// Why.
        #[source]
        source: Box<AppAuthError>,
    },
    /// The client could not be built (TLS set-up).
    #[error("unable to build the HTTP client")]
    Build {
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Why an App installation token could not be obtained.
#[derive(Debug, thiserror::Error)]
pub enum AppAuthError {
    /// The private key is not an RSA PEM key.
    #[error("invalid private key: {0}")]
    InvalidKey(String),
    /// Signing the JWT failed.
    #[error("unable to sign the app JWT: {0}")]
    Jwt(String),
    /// The token request failed.
    #[error(transparent)]
    Request(GitHubError),
}

impl GitHubError {
    /// A stable, low-cardinality name for metrics labels and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::RunnerBusy { .. } => "runner_busy",
            Self::NotFound { .. } => "not_found",
            Self::Unauthorized { .. } | Self::AppAuth { .. } => "unauthorized",
            Self::Forbidden { .. } => "forbidden",
            Self::RateLimited { .. } => "rate_limited",
            Self::Conflict { .. } => "conflict",
            Self::Rejected { .. } => "rejected",
            Self::Server { .. } => "server_error",
            Self::Transport { .. } => "transport",
            Self::Decode { .. } => "decode",
            Self::Build { .. } => "build",
        }
    }

    /// Whether retrying the same call later may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. }
                | Self::Server { .. }
                | Self::Transport { .. }
                | Self::RunnerBusy { .. }
        )
    }

    /// For rate limits, when requests may resume.
    pub fn retry_at(&self) -> Option<Timestamp> {
        match self {
            Self::RateLimited { retry_at, .. } => Some(*retry_at),
            _ => None,
        }
    }

    /// The call that failed, where there is one.
    pub fn call(&self) -> Option<&Call> {
        match self {
            Self::RunnerBusy { call, .. }
            | Self::NotFound { call, .. }
            | Self::Unauthorized { call, .. }
            | Self::Forbidden { call, .. }
            | Self::RateLimited { call, .. }
            | Self::Conflict { call, .. }
            | Self::Rejected { call, .. }
            | Self::Server { call, .. }
            | Self::Transport { call, .. }
            | Self::Decode { call, .. } => Some(call),
            Self::AppAuth { .. } | Self::Build { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_call() {
        let err = GitHubError::RunnerBusy {
            call: Call {
                method: "DELETE",
                path: "/orgs/acme/actions/runners/47".into(),
            },
            message: "Bad request - Runner \"r-0\" is still running a job\"".into(),
        };
        assert!(
            err.to_string()
                .starts_with("DELETE /orgs/acme/actions/runners/47: runner is")
        );
        assert_eq!(err.category(), "runner_busy");
        assert!(err.is_transient());
    }
}
