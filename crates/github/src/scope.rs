//! Where runners live on GitHub: a repository, an organization or an enterprise.
//!
//! Every runner endpoint exists in the same shape under `/repos/{owner}/{repo}/actions`,
//! `/orgs/{org}/actions` and `/enterprises/{enterprise}/actions`; [`Scope`] names one of those
//! prefixes. (hangar-core's `RunnerScope` is the same idea as a validated CRD field; the client
//! keeps its own small type so it depends on nothing but HTTP.)

use std::fmt;

use serde::{Deserialize, Serialize};

/// A place where self-hosted runners are registered.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Runners of one repository.
    Repository {
        /// The owning user or organization.
        owner: String,
        /// The repository name.
        repo: String,
    },
    /// Runners shared by an organization's repositories.
    Organization(String),
    /// Runners shared by an enterprise's organizations.
    Enterprise(String),
}

impl Scope {
    /// A repository scope.
    pub fn repo(owner: impl Into<String>, repo: impl Into<String>) -> Self {
        Self::Repository {
            owner: owner.into(),
            repo: repo.into(),
        }
    }

    /// An organization scope.
    pub fn org(org: impl Into<String>) -> Self {
        Self::Organization(org.into())
    }

    /// An enterprise scope.
    pub fn enterprise(slug: impl Into<String>) -> Self {
        Self::Enterprise(slug.into())
    }

    /// The REST path segments of the scope: `["repos", owner, repo]`, `["orgs", org]` or
    /// `["enterprises", slug]`.
    pub fn path_segments(&self) -> Vec<&str> {
        match self {
            Self::Repository { owner, repo } => vec!["repos", owner, repo],
            Self::Organization(org) => vec!["orgs", org],
            Self::Enterprise(slug) => vec!["enterprises", slug],
        }
    }

    /// Parses the path of a runner configuration URL (`config.sh --url`): one segment is an
    /// organization, `enterprises/<slug>` an enterprise, two segments a repository. Leading and
    /// trailing slashes are ignored.
    pub fn from_config_path(path: &str) -> Option<Self> {
        let parts: Vec<&str> = path
            .trim_matches('/')
            .split('/')
            .filter(|p| !p.is_empty())
            .collect();
        match parts.as_slice() {
            ["enterprises", slug] => Some(Self::enterprise(*slug)),
            [org] => Some(Self::org(*org)),
            [owner, repo] => Some(Self::repo(*owner, *repo)),
            _ => None,
        }
    }

    /// The path of this scope in a runner configuration URL: `owner/repo`, `org` or
    /// `enterprises/slug`.
    pub fn config_path(&self) -> String {
        match self {
            Self::Repository { owner, repo } => format!("{owner}/{repo}"),
            Self::Organization(org) => org.clone(),
            Self::Enterprise(slug) => format!("enterprises/{slug}"),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Repository { owner, repo } => write!(f, "repository {owner}/{repo}"),
            Self::Organization(org) => write!(f, "organization {org}"),
            Self::Enterprise(slug) => write!(f, "enterprise {slug}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_paths_round_trip() {
        for scope in [
            Scope::repo("octo", "hello"),
            Scope::org("octo"),
            Scope::enterprise("big"),
        ] {
            assert_eq!(Scope::from_config_path(&scope.config_path()), Some(scope));
        }
    }

    #[test]
    fn config_path_shapes() {
        assert_eq!(Scope::from_config_path("/octo/"), Some(Scope::org("octo")));
        assert_eq!(
            Scope::from_config_path("enterprises"),
            Some(Scope::org("enterprises"))
        );
        assert_eq!(Scope::from_config_path("a/b/c"), None);
        assert_eq!(Scope::from_config_path(""), None);
    }
}
