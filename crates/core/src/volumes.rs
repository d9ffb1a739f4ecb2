//! Persistent-volume reuse for RunnerSets (ARC 0.24's volume recycling): which claims to label
//! or delete and which volumes to hand to the next runner, from what was observed.
//!
//! Each RunnerSet runner has a StatefulSet of its own, so every runner gets fresh
//! PersistentVolumeClaims from the set's `volumeClaimTemplates` (`<template>-<statefulset>-0`).
//! The claims carry the labels `runnerset-name=<set>` and `runner-statefulset-name=<statefulset>`
//! (Hangar writes both into the StatefulSet's claim templates; claims of StatefulSets created
//! without them are labelled afterwards, as ARC does). Once a claim's StatefulSet is gone, its
//! runner is over, and the volume it held can serve the next runner of the set:
//!
//! 1. the bound volume is labelled `pending-cleanup=<set>` (first, so it can still be found
//!    once its claim is gone);
//! 2. the claim is deleted (the `kubernetes.io/pvc-protection` finalizer keeps it until no pod
//!    uses it); with `persistentVolumeReclaimPolicy: Retain` the volume becomes `Released`;
//! 3. a `Released` volume labelled `pending-cleanup=<set>` whose claim was in the set's
//!    namespace gets its `spec.claimRef` and the label removed: the volume is `Available`
//!    again, with its data, and binds to the next matching claim (the next runner's).
//!
//! Only the order matters for safety: a claim whose StatefulSet still exists (even one being
//! deleted) is never touched; a volume is only released once Kubernetes itself says `Released`
//! (its claim is gone), and only by the set and namespace that labelled it. Deleting a claim
//! that is not bound releases nothing and is all there is to do.
//!
//! [`plan`] is pure: the driver observes the claims and volumes through watches, asks, and
//! applies the actions in the order given (labels before deletions).

use std::collections::BTreeSet;

/// A PersistentVolumeClaim of the set's namespace labelled `runnerset-name=<set>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimView {
    /// The claim's name.
    pub name: String,
    /// Its `runner-statefulset-name` label, if any.
    pub stateful_set: Option<String>,
    /// The volume it is bound to: `spec.volumeName` when `status.phase` is `Bound`.
    pub bound_volume: Option<String>,
    /// It has a deletion timestamp.
    pub deleting: bool,
}

/// A PersistentVolume labelled `pending-cleanup` (cluster-scoped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeView {
    /// The volume's name.
    pub name: String,
    /// The `pending-cleanup` label: the RunnerSet that gave the volume up.
    pub pending_cleanup: String,
    /// `status.phase` is `Released`: its claim is gone.
    pub released: bool,
    /// `spec.claimRef`: namespace and name of the claim it was bound to.
    pub claim: Option<(String, String)>,
}

/// What [`plan`] is given: one RunnerSet's view.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Input {
    /// The set's namespace.
    pub namespace: String,
    /// The set's name.
    pub runner_set: String,
    /// Names of the set's StatefulSets that exist (being deleted or not).
    pub stateful_sets: BTreeSet<String>,
    /// Names of the set's `volumeClaimTemplates`.
    pub claim_templates: Vec<String>,
    /// Claims labelled `runnerset-name=<set>` in the namespace.
    pub claims: Vec<ClaimView>,
    /// Volumes labelled `pending-cleanup` (any value, any claim namespace).
    pub volumes: Vec<VolumeView>,
}

/// One step; apply them in the order returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Label a claim created for an existing StatefulSet `runner-statefulset-name`, so that it
    /// can be recycled once the StatefulSet is gone.
    LabelClaim {
        /// The claim.
        claim: String,
        /// Its StatefulSet.
        stateful_set: String,
    },
    /// Label a volume `pending-cleanup=<set>` before its claim is deleted.
    MarkVolume {
        /// The volume.
        volume: String,
    },
    /// Delete a claim whose StatefulSet is gone. The driver should confirm the StatefulSet is
    /// gone with a read from the apiserver first: the claim and StatefulSet watches are not
    /// ordered with respect to each other.
    DeleteClaim {
        /// The claim.
        claim: String,
        /// The StatefulSet it was created for, which is gone.
        stateful_set: String,
    },
    /// Remove `spec.claimRef` and the `pending-cleanup` label of a released volume, so that it
    /// becomes `Available` for the next runner.
    ReleaseVolume {
        /// The volume.
        volume: String,
    },
}

/// The actions that recycle the volumes of `input`'s set; see the module documentation.
pub fn plan(input: &Input) -> Vec<Action> {
    let mut labels = Vec::new();
    let mut marks = Vec::new();
    let mut deletes = Vec::new();
    let marked: BTreeSet<&str> = input
        .volumes
        .iter()
        .filter(|v| v.pending_cleanup == input.runner_set)
        .map(|v| v.name.as_str())
        .collect();
    let claim_names: BTreeSet<&str> = input.claims.iter().map(|c| c.name.as_str()).collect();

    for claim in &input.claims {
        let Some(sts) = &claim.stateful_set else {
            // A claim of a live StatefulSet created before the label existed: label it now, so
            // it is recognised once the StatefulSet is gone. Claims that match no live
            // StatefulSet by name are not ours to judge.
            let owner = input.stateful_sets.iter().find(|s| {
                input
                    .claim_templates
                    .iter()
                    .any(|t| claim.name == format!("{t}-{s}-0"))
            });
            if let Some(owner) = owner
                && !claim.deleting
            {
                labels.push(Action::LabelClaim {
                    claim: claim.name.clone(),
                    stateful_set: owner.clone(),
                });
            }
            continue;
        };
        if input.stateful_sets.contains(sts) {
            continue; // its runner may still run
        }
        if let Some(volume) = &claim.bound_volume
            && !marked.contains(volume.as_str())
        {
            marks.push(Action::MarkVolume {
                volume: volume.clone(),
            });
        }
        if !claim.deleting {
            deletes.push(Action::DeleteClaim {
                claim: claim.name.clone(),
                stateful_set: sts.clone(),
            });
        }
    }

    let releases = input
        .volumes
        .iter()
        .filter(|v| v.pending_cleanup == input.runner_set && v.released)
        .filter(|v| {
            v.claim.as_ref().is_some_and(|(ns, name)| {
                // A claim of that name still observed means the store lags behind (or the
                // claim was recreated): wait rather than unbind anything.
                *ns == input.namespace && !claim_names.contains(name.as_str())
            })
        })
        .map(|v| Action::ReleaseVolume {
            volume: v.name.clone(),
        });

    labels
        .into_iter()
        .chain(marks)
        .chain(deletes)
        .chain(releases)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "ci";
    const SET: &str = "cache";

    fn claim(name: &str, sts: Option<&str>, volume: Option<&str>) -> ClaimView {
        ClaimView {
            name: name.into(),
            stateful_set: sts.map(Into::into),
            bound_volume: volume.map(Into::into),
            deleting: false,
        }
    }

    fn deleting(mut c: ClaimView) -> ClaimView {
        c.deleting = true;
        c
    }

    fn volume(name: &str, set: &str, released: bool, claim: Option<(&str, &str)>) -> VolumeView {
        VolumeView {
            name: name.into(),
            pending_cleanup: set.into(),
            released,
            claim: claim.map(|(n, c)| (n.into(), c.into())),
        }
    }

    fn input(sts: &[&str], claims: Vec<ClaimView>, volumes: Vec<VolumeView>) -> Input {
        Input {
            namespace: NS.into(),
            runner_set: SET.into(),
            stateful_sets: sts.iter().map(|s| (*s).to_owned()).collect(),
            claim_templates: vec!["var-lib-docker".into()],
            claims,
            volumes,
        }
    }

    fn label(claim: &str, sts: &str) -> Action {
        Action::LabelClaim {
            claim: claim.into(),
            stateful_set: sts.into(),
        }
    }
    fn mark(v: &str) -> Action {
        Action::MarkVolume { volume: v.into() }
    }
    fn delete(claim: &str, sts: &str) -> Action {
        Action::DeleteClaim {
            claim: claim.into(),
            stateful_set: sts.into(),
        }
    }
    fn release(v: &str) -> Action {
        Action::ReleaseVolume { volume: v.into() }
    }

    #[test]
    fn one_row_per_branch() {
        let c1 = "var-lib-docker-cache-a-0";
        let rows: Vec<(&str, Input, Vec<Action>)> = vec![
            ("nothing observed", input(&[], vec![], vec![]), vec![]),
            (
                "claim of a live statefulset: left alone",
                input(
                    &["cache-a"],
                    vec![claim(c1, Some("cache-a"), Some("pv1"))],
                    vec![],
                ),
                vec![],
            ),
            (
                "unlabelled claim of a live statefulset (by template name): labelled",
                input(&["cache-a"], vec![claim(c1, None, Some("pv1"))], vec![]),
                vec![label(c1, "cache-a")],
            ),
            (
                "unlabelled claim matching no live statefulset: not ours to judge",
                input(&["cache-b"], vec![claim(c1, None, Some("pv1"))], vec![]),
                vec![],
            ),
            (
                "unlabelled claim being deleted: not labelled",
                input(&["cache-a"], vec![deleting(claim(c1, None, None))], vec![]),
                vec![],
            ),
            (
                "statefulset gone, claim bound: mark the volume, then delete the claim",
                input(&[], vec![claim(c1, Some("cache-a"), Some("pv1"))], vec![]),
                vec![mark("pv1"), delete(c1, "cache-a")],
            ),
            (
                "statefulset gone, volume already marked: only delete the claim",
                input(
                    &[],
                    vec![claim(c1, Some("cache-a"), Some("pv1"))],
                    vec![volume("pv1", SET, false, Some((NS, c1)))],
                ),
                vec![delete(c1, "cache-a")],
            ),
            (
                "volume marked by another set: marked for this one",
                input(
                    &[],
                    vec![claim(c1, Some("cache-a"), Some("pv1"))],
                    vec![volume("pv1", "other", false, Some((NS, c1)))],
                ),
                vec![mark("pv1"), delete(c1, "cache-a")],
            ),
            (
                "statefulset gone, claim never bound: just delete it",
                input(&[], vec![claim(c1, Some("cache-a"), None)], vec![]),
                vec![delete(c1, "cache-a")],
            ),
            (
                "claim already being deleted, volume unmarked: mark only",
                input(
                    &[],
                    vec![deleting(claim(c1, Some("cache-a"), Some("pv1")))],
                    vec![],
                ),
                vec![mark("pv1")],
            ),
            (
                "claim being deleted, volume marked, still bound: wait",
                input(
                    &[],
                    vec![deleting(claim(c1, Some("cache-a"), Some("pv1")))],
                    vec![volume("pv1", SET, false, Some((NS, c1)))],
                ),
                vec![],
            ),
            (
                "marked volume released, claim gone: release it",
                input(&[], vec![], vec![volume("pv1", SET, true, Some((NS, c1)))]),
                vec![release("pv1")],
            ),
            (
                "marked volume released but its claim still observed: wait",
                input(
                    &[],
                    vec![deleting(claim(c1, Some("cache-a"), None))],
                    vec![volume("pv1", SET, true, Some((NS, c1)))],
                ),
                vec![],
            ),
            (
                "marked volume not released yet: wait",
                input(&[], vec![], vec![volume("pv1", SET, false, Some((NS, c1)))]),
                vec![],
            ),
            (
                "released volume of another set: not ours",
                input(
                    &[],
                    vec![],
                    vec![volume("pv1", "other", true, Some((NS, c1)))],
                ),
                vec![],
            ),
            (
                "released volume of a same-named set in another namespace: not ours",
                input(
                    &[],
                    vec![],
                    vec![volume("pv1", SET, true, Some(("elsewhere", c1)))],
                ),
                vec![],
            ),
            (
                "released volume without a claimRef: nothing to clear here",
                input(&[], vec![], vec![volume("pv1", SET, true, None)]),
                vec![],
            ),
        ];
        for (what, input, want) in rows {
            assert_eq!(plan(&input), want, "{what}");
        }
    }

    #[test]
    fn labels_come_before_marks_before_deletions_before_releases() {
        let got = plan(&input(
            &["cache-live"],
            vec![
                claim(
                    "var-lib-docker-cache-gone-0",
                    Some("cache-gone"),
                    Some("pv2"),
                ),
                claim("var-lib-docker-cache-live-0", None, Some("pv3")),
            ],
            vec![volume(
                "pv1",
                SET,
                true,
                Some((NS, "var-lib-docker-cache-old-0")),
            )],
        ));
        assert_eq!(
            got,
            vec![
                label("var-lib-docker-cache-live-0", "cache-live"),
                mark("pv2"),
                delete("var-lib-docker-cache-gone-0", "cache-gone"),
                release("pv1"),
            ]
        );
    }

    #[test]
    fn a_claim_of_a_live_statefulset_is_never_deleted_nor_its_volume_touched() {
        // Whatever the volumes say, a claim whose StatefulSet exists stays bound.
        for released in [false, true] {
            let got = plan(&input(
                &["cache-a"],
                vec![claim(
                    "var-lib-docker-cache-a-0",
                    Some("cache-a"),
                    Some("pv1"),
                )],
                vec![volume(
                    "pv1",
                    SET,
                    released,
                    Some((NS, "var-lib-docker-cache-a-0")),
                )],
            ));
            assert!(got.is_empty(), "{got:?}");
        }
    }
}
