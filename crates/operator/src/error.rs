//! The operator's errors: one variant per kind of failing call, each naming the object and the
//! call, and a split between permanent errors (bad user input: reported, not retried until the
//! object changes) and transient ones (retried with back-off).

use hangar_github::GitHubError;

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
}

impl Error {
    /// Permanent errors wait for the object to change instead of being retried.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::InvalidSpec { .. })
    }

    /// A short stable label for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Kube { .. } => "KubernetesApiError",
            Self::GitHub { .. } => "GitHubApiError",
            Self::InvalidSpec { .. } => "InvalidSpec",
        }
    }
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
