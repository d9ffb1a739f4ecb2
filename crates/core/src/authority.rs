//! Whose authority a runner pod carries: the GitHub scope and credentials Hangar may use for it.
//!
//! A pod's env, labels and annotations are written by whoever creates the pod. Taking the
//! scope or the credentials Secret from them would let anyone who can create a labelled pod
//! mint registration tokens for any scope the controller's credentials reach, or make the
//! controller unregister and delete other scopes' runners. So authority comes only from the
//! owner chain, each link checked:
//!
//! - pod → Runner: the pod's controller owner is a Runner of the same namespace with the UID the
//!   reference names, and the pod has the Runner's name (the Runner controller creates exactly
//!   that pod);
//! - pod → StatefulSet → RunnerSet: the pod's controller owner is a StatefulSet with the
//!   referenced UID, the pod is one of its ordinals (`<statefulset>-<n>`), and the StatefulSet's
//!   controller owner is a RunnerSet with the referenced UID.
//!
//! Owner references cannot cross namespaces, so every link is in the pod's namespace; a pod
//! author can only point at owners there, and then gets exactly that owner's scope and
//! credentials, which anyone able to create that owner could use anyway. The driver looks the
//! owners up and hands what it found to [`authority`]; the answer is the [`Authority`] or the
//! [`Untrusted`] reason, worded for an admission denial.

use std::fmt;

use crate::RunnerScope;

/// An owner reference as the pod (or StatefulSet) carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    /// `kind`, e.g. `Runner`.
    pub kind: String,
    /// `name`.
    pub name: String,
    /// `uid`.
    pub uid: String,
}

/// A Runner or RunnerSet as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Its UID.
    pub uid: String,
    /// Its scope fields (enterprise, organization, repository), as in its spec.
    pub scope: (Option<String>, Option<String>, Option<String>),
    /// `githubAPICredentialsFrom.secretRef.name`, if set.
    pub credentials_secret: Option<String>,
}

/// A StatefulSet as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatefulSet {
    /// Its UID.
    pub uid: String,
    /// Its controller owner reference, if any.
    pub controller: Option<OwnerRef>,
}

/// What the driver found along the pod's owner chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chain {
    /// The pod has no controller owner reference.
    NoController,
    /// The pod's controller is a Runner; `found` is the Runner of that name, if any.
    Runner {
        /// The pod's reference.
        reference: OwnerRef,
        /// The Runner of that name in the pod's namespace.
        found: Option<Owner>,
    },
    /// The pod's controller is a StatefulSet.
    StatefulSet {
        /// The pod's reference.
        reference: OwnerRef,
        /// The StatefulSet of that name in the pod's namespace.
        found: Option<StatefulSet>,
        /// The RunnerSet the StatefulSet's controller reference names, if it names one and it
        /// exists.
        runner_set: Option<Owner>,
    },
    /// The pod's controller is of another kind.
    Other {
        /// The pod's reference.
        reference: OwnerRef,
    },
}

/// The authority a trusted runner pod carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authority {
    /// Where its runner registers.
    pub scope: RunnerScope,
    /// The Secret holding the GitHub credentials to use, or `None` for the controller's own.
    pub credentials_secret: Option<String>,
    /// The owner that grants it.
    pub owner: Granter,
}

/// The Runner or RunnerSet a runner pod's authority comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Granter {
    /// `Runner` or `RunnerSet`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
}

/// Why a pod carries no authority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Untrusted {
    /// No controller owner.
    NoController,
    /// A controller owner of a kind that does not make runner pods.
    Kind(String),
    /// The referenced owner does not exist.
    OwnerMissing {
        /// Its kind.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// The referenced owner exists with another UID: the reference is stale or forged.
    UidMismatch {
        /// Its kind.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// The pod is not the one its owner creates (name mismatch).
    NotOwnersPod {
        /// The owner's kind.
        kind: &'static str,
        /// The owner's name.
        owner: String,
        /// The name the pod must have.
        expected: String,
    },
    /// The StatefulSet is not controlled by a RunnerSet.
    StatefulSetWithoutRunnerSet(String),
    /// The owner's spec names no valid scope.
    Scope {
        /// The owner's kind.
        kind: &'static str,
        /// The owner's name.
        name: String,
        /// What is wrong.
        problem: String,
    },
}

impl fmt::Display for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const WHY: &str = "only pods created by a Runner, or by the StatefulSet of a RunnerSet, \
                           in the same namespace get a runner registration";
        match self {
            Self::NoController => write!(f, "the pod has no controller owner; {WHY}"),
            Self::Kind(kind) => write!(f, "the pod's controller is a {kind}; {WHY}"),
            Self::OwnerMissing { kind, name } => {
                write!(f, "the pod's owner {kind} {name} does not exist; {WHY}")
            }
            Self::UidMismatch { kind, name } => write!(
                f,
                "the pod's owner reference to {kind} {name} names another UID than that \
                 {kind}'s; {WHY}"
            ),
            Self::NotOwnersPod {
                kind,
                owner,
                expected,
            } => write!(
                f,
                "{kind} {owner} creates only the pod {expected}, not this one; {WHY}"
            ),
            Self::StatefulSetWithoutRunnerSet(name) => write!(
                f,
                "the pod's StatefulSet {name} is not controlled by a RunnerSet (with the UID \
                 its reference names); {WHY}"
            ),
            Self::Scope {
                kind,
                name,
                problem,
            } => write!(f, "{kind} {name} names no valid scope: {problem}"),
        }
    }
}

impl std::error::Error for Untrusted {}

/// Decides the authority of the pod named `pod_name` from its owner chain.
pub fn authority(pod_name: &str, chain: &Chain) -> Result<Authority, Untrusted> {
    match chain {
        Chain::NoController => Err(Untrusted::NoController),
        Chain::Other { reference } => Err(Untrusted::Kind(reference.kind.clone())),
        Chain::Runner { reference, found } => {
            let runner = checked("Runner", reference, found.as_ref())?;
            if pod_name != reference.name {
                return Err(Untrusted::NotOwnersPod {
                    kind: "Runner",
                    owner: reference.name.clone(),
                    expected: reference.name.clone(),
                });
            }
            grant("Runner", &reference.name, runner)
        }
        Chain::StatefulSet {
            reference,
            found,
            runner_set,
        } => {
            let set = match found {
                None => {
                    return Err(Untrusted::OwnerMissing {
                        kind: "StatefulSet",
                        name: reference.name.clone(),
                    });
                }
                Some(s) if s.uid != reference.uid => {
                    return Err(Untrusted::UidMismatch {
                        kind: "StatefulSet",
                        name: reference.name.clone(),
                    });
                }
                Some(s) => s,
            };
            if !is_ordinal_of(pod_name, &reference.name) {
                return Err(Untrusted::NotOwnersPod {
                    kind: "StatefulSet",
                    owner: reference.name.clone(),
                    expected: format!("{}-<ordinal>", reference.name),
                });
            }
            let Some(set_ref) = set.controller.as_ref().filter(|c| c.kind == "RunnerSet") else {
                return Err(Untrusted::StatefulSetWithoutRunnerSet(
                    reference.name.clone(),
                ));
            };
            match runner_set {
                Some(owner) if owner.uid == set_ref.uid => grant("RunnerSet", &set_ref.name, owner),
                Some(_) => Err(Untrusted::StatefulSetWithoutRunnerSet(
                    reference.name.clone(),
                )),
                None => Err(Untrusted::OwnerMissing {
                    kind: "RunnerSet",
                    name: set_ref.name.clone(),
                }),
            }
        }
    }
}

fn checked<'a>(
    kind: &'static str,
    reference: &OwnerRef,
    found: Option<&'a Owner>,
) -> Result<&'a Owner, Untrusted> {
    match found {
        None => Err(Untrusted::OwnerMissing {
            kind,
            name: reference.name.clone(),
        }),
        Some(o) if o.uid != reference.uid => Err(Untrusted::UidMismatch {
            kind,
            name: reference.name.clone(),
        }),
        Some(o) => Ok(o),
    }
}

fn grant(kind: &'static str, name: &str, owner: &Owner) -> Result<Authority, Untrusted> {
    let (enterprise, organization, repository) = &owner.scope;
    let scope = RunnerScope::from_fields(
        enterprise.as_deref(),
        organization.as_deref(),
        repository.as_deref(),
    )
    .map_err(|e| Untrusted::Scope {
        kind,
        name: name.to_owned(),
        problem: e.to_string(),
    })?;
    Ok(Authority {
        scope,
        credentials_secret: owner.credentials_secret.clone().filter(|s| !s.is_empty()),
        owner: Granter {
            kind,
            name: name.to_owned(),
            uid: owner.uid.clone(),
        },
    })
}

/// Whether `pod` is `<set>-<n>`, a pod name the StatefulSet `set` creates.
fn is_ordinal_of(pod: &str, set: &str) -> bool {
    pod.strip_prefix(set)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(kind: &str, name: &str, uid: &str) -> OwnerRef {
        OwnerRef {
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    fn owner(uid: &str, org: &str, secret: Option<&str>) -> Owner {
        Owner {
            uid: uid.into(),
            scope: (None, Some(org.into()), None),
            credentials_secret: secret.map(Into::into),
        }
    }

    fn runner_chain(uid_in_ref: &str, found: Option<Owner>) -> Chain {
        Chain::Runner {
            reference: reference("Runner", "r1", uid_in_ref),
            found,
        }
    }

    fn set_chain(pod_ref_uid: &str, set: Option<StatefulSet>, runner_set: Option<Owner>) -> Chain {
        Chain::StatefulSet {
            reference: reference("StatefulSet", "rs-abc", pod_ref_uid),
            found: set,
            runner_set,
        }
    }

    fn stateful_set(uid: &str, controller: Option<OwnerRef>) -> StatefulSet {
        StatefulSet {
            uid: uid.into(),
            controller,
        }
    }

    #[test]
    fn a_runners_own_pod_gets_the_runners_scope_and_credentials() {
        let got = authority(
            "r1",
            &runner_chain("u1", Some(owner("u1", "octo", Some("creds")))),
        );
        assert_eq!(
            got,
            Ok(Authority {
                scope: RunnerScope::Organization("octo".into()),
                credentials_secret: Some("creds".into()),
                owner: Granter {
                    kind: "Runner",
                    name: "r1".into(),
                    uid: "u1".into(),
                },
            })
        );
    }

    #[test]
    fn a_runner_sets_pod_gets_the_runner_sets_scope() {
        let chain = set_chain(
            "s1",
            Some(stateful_set(
                "s1",
                Some(reference("RunnerSet", "rs", "rs1")),
            )),
            Some(owner("rs1", "octo", None)),
        );
        let got = authority("rs-abc-0", &chain).unwrap();
        assert_eq!(got.scope, RunnerScope::Organization("octo".into()));
        assert_eq!(got.credentials_secret, None);
        assert_eq!(
            got.owner,
            Granter {
                kind: "RunnerSet",
                name: "rs".into(),
                uid: "rs1".into(),
            }
        );
    }

    #[test]
    fn every_broken_link_is_refused_with_its_reason() {
        let good_set = || {
            Some(stateful_set(
                "s1",
                Some(reference("RunnerSet", "rs", "rs1")),
            ))
        };
        let good_runner_set = || Some(owner("rs1", "octo", None));
        let cases: Vec<(&str, &str, Chain, Untrusted)> = vec![
            (
                "no owner",
                "r1",
                Chain::NoController,
                Untrusted::NoController,
            ),
            (
                "a Deployment's pod",
                "d-1",
                Chain::Other {
                    reference: reference("ReplicaSet", "d", "x"),
                },
                Untrusted::Kind("ReplicaSet".into()),
            ),
            (
                "Runner missing",
                "r1",
                runner_chain("u1", None),
                Untrusted::OwnerMissing {
                    kind: "Runner",
                    name: "r1".into(),
                },
            ),
            (
                "Runner UID forged",
                "r1",
                runner_chain("forged", Some(owner("u1", "octo", None))),
                Untrusted::UidMismatch {
                    kind: "Runner",
                    name: "r1".into(),
                },
            ),
            (
                "another pod pointing at a Runner",
                "evil",
                runner_chain("u1", Some(owner("u1", "octo", None))),
                Untrusted::NotOwnersPod {
                    kind: "Runner",
                    owner: "r1".into(),
                    expected: "r1".into(),
                },
            ),
            (
                "StatefulSet missing",
                "rs-abc-0",
                set_chain("s1", None, good_runner_set()),
                Untrusted::OwnerMissing {
                    kind: "StatefulSet",
                    name: "rs-abc".into(),
                },
            ),
            (
                "StatefulSet UID forged",
                "rs-abc-0",
                set_chain("forged", good_set(), good_runner_set()),
                Untrusted::UidMismatch {
                    kind: "StatefulSet",
                    name: "rs-abc".into(),
                },
            ),
            (
                "not an ordinal of the StatefulSet",
                "rs-abc-x",
                set_chain("s1", good_set(), good_runner_set()),
                Untrusted::NotOwnersPod {
                    kind: "StatefulSet",
                    owner: "rs-abc".into(),
                    expected: "rs-abc-<ordinal>".into(),
                },
            ),
            (
                "a plain StatefulSet",
                "rs-abc-0",
                set_chain("s1", Some(stateful_set("s1", None)), None),
                Untrusted::StatefulSetWithoutRunnerSet("rs-abc".into()),
            ),
            (
                "RunnerSet missing",
                "rs-abc-0",
                set_chain("s1", good_set(), None),
                Untrusted::OwnerMissing {
                    kind: "RunnerSet",
                    name: "rs".into(),
                },
            ),
            (
                "RunnerSet recreated under the same name",
                "rs-abc-0",
                set_chain("s1", good_set(), Some(owner("other", "octo", None))),
                Untrusted::StatefulSetWithoutRunnerSet("rs-abc".into()),
            ),
            (
                "owner without a scope",
                "r1",
                runner_chain(
                    "u1",
                    Some(Owner {
                        uid: "u1".into(),
                        scope: (None, None, None),
                        credentials_secret: None,
                    }),
                ),
                Untrusted::Scope {
                    kind: "Runner",
                    name: "r1".into(),
                    problem: crate::ScopeError::Missing.to_string(),
                },
            ),
        ];
        for (what, pod, chain, want) in cases {
            assert_eq!(authority(pod, &chain), Err(want), "{what}");
        }
    }

    #[test]
    fn denials_say_why_and_what_is_trusted() {
        let message = Untrusted::NoController.to_string();
        assert!(message.contains("no controller owner"), "{message}");
        assert!(
            message.contains("only pods created by a Runner"),
            "{message}"
        );
    }

    #[test]
    fn ordinals_are_digits_after_the_set_name() {
        for (pod, set, want) in [
            ("s-0", "s", true),
            ("s-12", "s", true),
            ("s-", "s", false),
            ("s-a", "s", false),
            ("s0", "s", false),
            ("t-0", "s", false),
            ("s-x-0", "s", false),
        ] {
            assert_eq!(is_ordinal_of(pod, set), want, "{pod} of {set}");
        }
    }
}
