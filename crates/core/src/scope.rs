//! The GitHub scope a runner registers at.
//!
//! ARC's RunnerConfig names the scope with three optional strings — `enterprise`,
//! `organization`, `repository` — of which exactly one must be set. [`RunnerScope::from_fields`]
//! turns those strings into a typed scope or explains precisely what is wrong, in words a user
//! can act on. The same rules are enforced by the CRD schema (CEL) when the apiserver admits an
//! object; this function is what controllers and webhooks use on objects already stored, e.g.
//! ones written before the schema existed.

use std::fmt;

/// Where a self-hosted runner is registered on GitHub.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunnerScope {
    /// An enterprise (`/enterprises/{enterprise}`): runners shared by its organizations.
    Enterprise(String),
    /// An organization (`/orgs/{org}`): runners shared by its repositories.
    Organization(String),
    /// One repository (`/repos/{owner}/{name}`).
    Repository {
        /// The user or organization owning the repository.
        owner: String,
        /// The repository name.
        name: String,
    },
}

/// Why a RunnerConfig does not name exactly one valid scope.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// None of `enterprise`, `organization`, `repository` is set.
    #[error("no scope: set exactly one of enterprise, organization or repository")]
    Missing,
    /// More than one of the three is set; `set` lists which.
    #[error(
        "ambiguous scope: {set:?} are all set, but exactly one of enterprise, organization or repository is allowed"
    )]
    Ambiguous {
        /// The field names that were set.
        set: Vec<&'static str>,
    },
    /// `repository` is not of the form `owner/name`.
    #[error("repository {0:?} must have the form owner/name")]
    MalformedRepository(String),
    /// `enterprise` or `organization` contains a `/`.
    #[error("{field} {value:?} must be a single name without '/'")]
    MalformedName {
        /// `enterprise` or `organization`.
        field: &'static str,
        /// The offending value.
        value: String,
    },
}

impl RunnerScope {
    /// What a credential needs to manage self-hosted runners here (register, list, remove), in
    /// words for a condition or event: GitHub Apps and fine-grained tokens by permission,
    /// classic tokens by OAuth scope.
    pub fn permission_hint(&self) -> String {
        match self {
            Self::Repository { owner, name } => format!(
                "the credential must be allowed to manage self-hosted runners of repository \
                 {owner}/{name}: a GitHub App needs the repository permission Administration: read \
                 and write, a personal access token the repo scope"
            ),
            Self::Organization(org) => format!(
                "the credential must be allowed to manage self-hosted runners of organization \
                 {org}: a GitHub App needs the organization permission Self-hosted runners: read \
                 and write, a personal access token the admin:org scope"
            ),
            Self::Enterprise(e) => format!(
                "the credential must be allowed to manage self-hosted runners of enterprise {e}: a \
                 personal access token needs the manage_runners:enterprise scope"
            ),
        }
    }

    /// Builds the scope from ARC's three optional fields. Empty strings count as unset, as they
    /// do in ARC (Go's zero value).
    pub fn from_fields(
        enterprise: Option<&str>,
        organization: Option<&str>,
        repository: Option<&str>,
    ) -> Result<Self, ScopeError> {
        // Empty strings are Go's zero value: ARC treats them as unset.
        let enterprise = enterprise.filter(|s| !s.is_empty());
        let organization = organization.filter(|s| !s.is_empty());
        let repository = repository.filter(|s| !s.is_empty());

        let set: Vec<&'static str> = [
            ("enterprise", enterprise.is_some()),
            ("organization", organization.is_some()),
            ("repository", repository.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, present)| present.then_some(name))
        .collect();
        if set.len() > 1 {
            return Err(ScopeError::Ambiguous { set });
        }

        if let Some(repo) = repository {
            return match repo.split_once('/') {
                Some((owner, name))
                    if !owner.is_empty() && !name.is_empty() && !name.contains('/') =>
                {
                    Ok(Self::Repository {
                        owner: owner.to_owned(),
                        name: name.to_owned(),
                    })
                }
                _ => Err(ScopeError::MalformedRepository(repo.to_owned())),
            };
        }
        let single_name = |field: &'static str, value: &str| {
            if value.contains('/') {
                Err(ScopeError::MalformedName {
                    field,
                    value: value.to_owned(),
                })
            } else {
                Ok(value.to_owned())
            }
        };
        if let Some(org) = organization {
            return single_name("organization", org).map(Self::Organization);
        }
        if let Some(ent) = enterprise {
            return single_name("enterprise", ent).map(Self::Enterprise);
        }
        Err(ScopeError::Missing)
    }

    /// The REST path prefix of this scope's runner endpoints, e.g. `repos/o/r`. Runner endpoints
    /// append `/actions/runners...` to it.
    pub fn api_path(&self) -> String {
        match self {
            Self::Enterprise(e) => format!("enterprises/{e}"),
            Self::Organization(o) => format!("orgs/{o}"),
            Self::Repository { owner, name } => format!("repos/{owner}/{name}"),
        }
    }
}

impl fmt::Display for RunnerScope {
    /// A short human form used in logs, events and status: `enterprise/e`, `org/o`, `repo/o/r`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Enterprise(e) => write!(f, "enterprise/{e}"),
            Self::Organization(o) => write!(f, "org/{o}"),
            Self::Repository { owner, name } => write!(f, "repo/{owner}/{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(owner: &str, name: &str) -> RunnerScope {
        RunnerScope::Repository {
            owner: owner.into(),
            name: name.into(),
        }
    }

    /// enterprise, organization, repository, and the scope they should yield.
    type Case<'a> = (
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
        RunnerScope,
    );

    #[test]
    fn exactly_one_field_yields_that_scope() {
        let cases: &[Case] = &[
            (
                Some("acme"),
                None,
                None,
                RunnerScope::Enterprise("acme".into()),
            ),
            (
                None,
                Some("octo"),
                None,
                RunnerScope::Organization("octo".into()),
            ),
            (None, None, Some("octo/app"), repo("octo", "app")),
            // Empty strings are Go's zero value and mean "unset" in ARC manifests.
            (Some(""), Some(""), Some("octo/app"), repo("octo", "app")),
        ];
        for (e, o, r, want) in cases {
            assert_eq!(
                RunnerScope::from_fields(*e, *o, *r).as_ref(),
                Ok(want),
                "{e:?} {o:?} {r:?}"
            );
        }
    }

    #[test]
    fn no_field_is_missing_scope() {
        assert_eq!(
            RunnerScope::from_fields(None, Some(""), None),
            Err(ScopeError::Missing)
        );
    }

    #[test]
    fn two_fields_are_ambiguous_and_named() {
        let err = RunnerScope::from_fields(Some("acme"), None, Some("o/r")).unwrap_err();
        assert_eq!(
            err,
            ScopeError::Ambiguous {
                set: vec!["enterprise", "repository"]
            }
        );
        assert!(err.to_string().contains("exactly one of"));
    }

    #[test]
    fn repository_must_be_owner_slash_name() {
        for bad in ["octo", "octo/", "/app", "octo/app/extra"] {
            assert_eq!(
                RunnerScope::from_fields(None, None, Some(bad)),
                Err(ScopeError::MalformedRepository(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn organization_and_enterprise_reject_slashes() {
        assert!(matches!(
            RunnerScope::from_fields(None, Some("a/b"), None),
            Err(ScopeError::MalformedName {
                field: "organization",
                ..
            })
        ));
        assert!(matches!(
            RunnerScope::from_fields(Some("a/b"), None, None),
            Err(ScopeError::MalformedName {
                field: "enterprise",
                ..
            })
        ));
    }

    #[test]
    fn api_path_and_display_follow_github_urls() {
        assert_eq!(repo("o", "r").api_path(), "repos/o/r");
        assert_eq!(RunnerScope::Organization("o".into()).api_path(), "orgs/o");
        assert_eq!(
            RunnerScope::Enterprise("e".into()).api_path(),
            "enterprises/e"
        );
        assert_eq!(repo("o", "r").to_string(), "repo/o/r");
    }

    #[test]
    fn the_permission_hint_names_the_scope_and_what_each_credential_kind_needs() {
        let cases = [
            (
                repo("octo", "app"),
                ["repository octo/app", "Administration", "repo scope"],
            ),
            (
                RunnerScope::Organization("octo".into()),
                ["organization octo", "Self-hosted runners", "admin:org"],
            ),
            (
                RunnerScope::Enterprise("big".into()),
                [
                    "enterprise big",
                    "personal access token",
                    "manage_runners:enterprise",
                ],
            ),
        ];
        for (scope, words) in cases {
            let hint = scope.permission_hint();
            for word in words {
                assert!(hint.contains(word), "{scope:?}: {hint}");
            }
        }
    }
}
