//! The operator's errors: one variant per kind of failing call, each naming the object and the
//! call, and a split between permanent errors (bad user input: reported, not retried until the
//! object changes), errors a user must fix elsewhere (a credentials Secret, a GitHub
//! permission: retried with a slow back-off) and transient ones (retried with a fast back-off).
//!
//! [`Backoff`] turns that split into requeue delays, per object: each consecutive failure
//! doubles the delay up to a cap, a success resets it. A failing object is never retried in a
//! hot loop, and one that recovers is not left waiting for long.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use hangar_github::GitHubError;
use kube::runtime::controller::Action;

use crate::credentials::CredentialProblem;

/// A reconcile failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("failed to {action} {object}: {source}")]
    Kube {
        /// What we tried, e.g. "create pod".
        action: &'static str,
        /// `namespace/name` of the object.
        object: String,
        /// The client error.
        source: kube::Error,
    },
    /// A GitHub API call failed.
    #[error("failed to {action} for {scope}: {source}")]
    GitHub {
        /// What we tried, e.g. "get registration token".
        action: &'static str,
        /// The GitHub scope.
        scope: String,
        /// The client error (never contains a secret).
        source: GitHubError,
    },
    /// The object's spec cannot work; the user must change it.
    #[error("invalid spec of {object}: {reason}")]
    InvalidSpec {
        /// `namespace/name`.
        object: String,
        /// What is wrong, in the user's terms.
        reason: String,
    },
    /// The Secret named by `githubAPICredentialsFrom` gives no usable credential.
    #[error("unusable GitHub credentials secret {secret}: {problem}")]
    Credentials {
        /// `namespace/name` of the Secret.
        secret: String,
        /// What is wrong with it (never its content).
        problem: CredentialProblem,
    },
}

/// How an error is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Not until the object changes.
    OnChange,
    /// Someone must fix something outside the object (a Secret, a GitHub permission): slowly.
    Slowly,
    /// Retrying may work by itself: soon, but not before `not_before` (a rate limit's reset).
    Soon {
        /// The earliest useful retry.
        not_before: Option<Duration>,
    },
}

impl Error {
    /// Permanent errors wait for the object to change instead of being retried.
    pub fn is_permanent(&self) -> bool {
        self.retry() == Retry::OnChange
    }

    /// How this error is retried.
    pub fn retry(&self) -> Retry {
        match self {
            Self::InvalidSpec { .. } => Retry::OnChange,
            Self::Credentials { .. } => Retry::Slowly,
            Self::GitHub { source, .. } if source.is_transient() => Retry::Soon {
                not_before: source.retry_at().map(|at| {
                    let now = jiff::Timestamp::now();
                    hangar_github::clock::until(now, at)
                }),
            },
            Self::GitHub { .. } => Retry::Slowly,
            Self::Kube { .. } => Retry::Soon { not_before: None },
        }
    }

    /// A short stable label for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Kube { .. } => "KubernetesApiError",
            Self::GitHub { source, .. } => match source {
                GitHubError::Unauthorized { .. } | GitHubError::AppAuth { .. } => {
                    "GitHubUnauthorized"
                }
                GitHubError::Forbidden { .. } | GitHubError::NotFound { .. } => {
                    "GitHubPermissionDenied"
                }
                GitHubError::RateLimited { .. } => "GitHubRateLimited",
                _ => "GitHubApiError",
            },
            Self::InvalidSpec { .. } => "InvalidSpec",
            Self::Credentials { .. } => "GitHubCredentialsError",
        }
    }
}

/// First delay after a transient failure.
pub const TRANSIENT_FIRST: Duration = Duration::from_secs(2);
/// Longest delay after transient failures.
pub const TRANSIENT_MAX: Duration = Duration::from_secs(60);
/// First delay after a failure someone must fix (ARC waits 3 minutes after every token error;
/// Hangar starts faster and slows down).
pub const SLOW_FIRST: Duration = Duration::from_secs(15);
/// Longest delay after failures someone must fix.
pub const SLOW_MAX: Duration = Duration::from_secs(5 * 60);

/// Consecutive failures per object, turned into requeue delays.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// What to do after `error` on object `key` (unique per controller, e.g.
    /// `runner/ns/name`): counts the failure and returns the delay.
    pub fn next(&self, key: &str, error: &Error) -> Action {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key.to_owned()).or_insert(0);
        let attempt = *n;
        *n = n.saturating_add(1);
        drop(failures);
        match error.retry() {
            Retry::OnChange => Action::await_change(),
            Retry::Slowly => Action::requeue(delay(SLOW_FIRST, SLOW_MAX, attempt)),
            Retry::Soon { not_before } => {
                let d = delay(TRANSIENT_FIRST, TRANSIENT_MAX, attempt);
                Action::requeue(not_before.map_or(d, |n| d.max(n + Duration::from_secs(1))))
            }
        }
    }

    /// Forgets the failures of `key` after a success.
    pub fn reset(&self, key: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if !failures.is_empty() {
            failures.remove(key);
        }
    }
}

/// `first · 2^attempt`, at most `max`.
pub fn delay(first: Duration, max: Duration, attempt: u32) -> Duration {
    first
        .checked_mul(1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX))
        .map_or(max, |d| d.min(max))
}

/// Shorthand for `map_err` on kube calls.
pub fn kube_err(
    action: &'static str,
    object: impl Into<String>,
) -> impl FnOnce(kube::Error) -> Error {
    let object = object.into();
    move |source| Error::Kube {
        action,
        object,
        source,
    }
}

/// Shorthand for `map_err` on GitHub calls.
pub fn github_err(
    action: &'static str,
    scope: impl std::fmt::Display,
) -> impl FnOnce(GitHubError) -> Error {
    let scope = scope.to_string();
    move |source| Error::GitHub {
        action,
        scope,
        source,
    }
}

/// Treats "not found" as success: deleting something already gone is the goal reached.
pub fn ignore_not_found(e: kube::Error) -> Result<(), kube::Error> {
    match e {
        kube::Error::Api(ref s) if s.code == 404 => Ok(()),
        e => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid_spec() -> Error {
        Error::InvalidSpec {
            object: "ns/x".into(),
            reason: String::new(),
        }
    }

    #[test]
    fn delays_double_up_to_the_cap() {
        let d = |n| delay(TRANSIENT_FIRST, TRANSIENT_MAX, n).as_secs();
        assert_eq!([d(0), d(1), d(2), d(5), d(6), d(40)], [2, 4, 8, 60, 60, 60]);
    }

    #[test]
    fn credential_problems_back_off_slowly_and_reset_on_success() {
        let backoff = Backoff::default();
        let err = Error::Credentials {
            secret: "ns/creds".into(),
            problem: CredentialProblem::SecretNotFound,
        };
        assert_eq!(err.retry(), Retry::Slowly);
        assert_eq!(backoff.next("r", &err), Action::requeue(SLOW_FIRST));
        assert_eq!(backoff.next("r", &err), Action::requeue(SLOW_FIRST * 2));
        backoff.reset("r");
        assert_eq!(backoff.next("r", &err), Action::requeue(SLOW_FIRST));
        assert!(!err.to_string().contains("ghp_"));
    }

    #[test]
    fn invalid_specs_wait_for_a_change() {
        assert_eq!(
            Backoff::default().next("r", &invalid_spec()),
            Action::await_change()
        );
    }
}
