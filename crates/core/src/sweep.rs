//! Leaked registrations and ghosts: runners Hangar registered on GitHub and then lost track of.
//!
//! A JIT configuration registers its runner at once (offline); if the controller dies before
//! the pod that would use it exists, or the Runner or StatefulSet it was for is deleted before
//! its pod is created, nothing refers to the registration any more. GitHub itself removes
//! offline ephemeral runners only after a day (others after 14 days). A *ghost* is online: its
//! pod is gone but a runner process still holds the registration (a node cut off from the
//! apiserver but not from GitHub keeps running what the cluster already deleted); it takes
//! jobs nothing in the cluster accounts for. The leader's periodic sweep removes both, and this
//! module decides which. Removing an idle ghost's registration makes its process exit.
//!
//! Contract: [`judge`] removes a runner only if every one of these holds —
//! 1. GitHub lists it `offline` or `online` (a status word Hangar does not know is never
//!    judged) and not busy (a busy ghost finishes its job first: GitHub refuses to remove it);
//! 2. no pod, Runner, StatefulSet pod or registration-only runner of its name exists in any
//!    watched namespace (the caller's `live` names);
//! 3. its name is one Hangar generates for an owner it knows at the runner's scope
//!    ([`Owner::names`]: `<replicaset>-<5 characters>` for a RunnerReplicaSet's Runners,
//!    `<deployment>-<hash>-<5 characters>` for the Runners of any RunnerReplicaSet a
//!    RunnerDeployment ever had — so a rollout's old set, deleted before a change of leader,
//!    still vouches through its deployment — and `<set>-<hash>-0` for a RunnerSet's pods), and
//!    it carries all of that owner's labels;
//! 4. it has looked like this, without interruption, for the grace period, measured from when
//!    the sweep first saw it so (GitHub's runner object has no creation time).
//!
//! Anything else is kept: standalone Runners (whose names are the user's) are never swept, nor
//! is any runner whose name or labels Hangar would not have given it. A registration-only
//! runner (`<owner>-registration-only`) matches no generated name, whichever kind its owner is.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use crate::template_hash::ALPHABET;

/// Length of the random suffix the apiserver appends to a `generateName`.
const GENERATED_SUFFIX: usize = 5;

/// The apiserver cuts a `generateName` prefix to this many characters (63 minus the suffix).
const MAX_GENERATE_NAME_PREFIX: usize = 63 - GENERATED_SUFFIX;

/// Longest part of a RunnerSet's name in its StatefulSets' names: a StatefulSet's name ends up,
/// with a suffix, in label values of 63 characters at most (`controller-revision-hash`).
const MAX_SET_PREFIX: usize = 40;

/// Longest template hash: the decimal digits of a 32-bit number.
const MAX_HASH: usize = 10;

/// The part of RunnerSet `set`'s name that starts its StatefulSets' names (`<prefix>-<hash>`).
pub fn stateful_set_prefix(set: &str) -> &str {
    let cut = set
        .char_indices()
        .nth(MAX_SET_PREFIX)
        .map_or(set.len(), |(i, _)| i);
    set[..cut].trim_end_matches(['-', '.'])
}

/// What kind of object gives its runners generated names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OwnerKind {
    /// A RunnerReplicaSet: Runners (and their pods) `<set>-<5 random characters>`.
    ReplicaSet,
    /// A RunnerDeployment: its RunnerReplicaSets are `<deployment>-<template hash>`, so the
    /// Runners of every set it ever had are `<deployment>-<hash>-<5 random characters>`.
    Deployment,
    /// A RunnerSet: StatefulSets `<set>-<hash>`, pods `<set>-<hash>-0`.
    RunnerSet,
}

/// An owner of generated runner names at one scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Its kind.
    pub kind: OwnerKind,
    /// Its name.
    pub name: String,
    /// The labels its runners are registered with (besides GitHub's defaults).
    pub labels: Vec<String>,
}

impl Owner {
    /// Whether `runner` is a name Hangar gives this owner's runners.
    pub fn names(&self, runner: &str) -> bool {
        match self.kind {
            OwnerKind::ReplicaSet => {
                let mut prefix = format!("{}-", self.name);
                prefix.truncate(MAX_GENERATE_NAME_PREFIX);
                runner
                    .strip_prefix(prefix.as_str())
                    .is_some_and(|suffix| safe(suffix, GENERATED_SUFFIX..=GENERATED_SUFFIX))
            }
            OwnerKind::Deployment => runner
                .strip_prefix(self.name.as_str())
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|rest| deployment_generated(runner.len(), rest)),
            OwnerKind::RunnerSet => runner
                .strip_prefix(stateful_set_prefix(&self.name))
                .and_then(|rest| rest.strip_prefix('-'))
                .and_then(|rest| rest.strip_suffix("-0"))
                .is_some_and(|hash| safe(hash, 1..=MAX_HASH)),
        }
    }

    /// Whether a runner with `labels` carries every label of this owner (ignoring case, as
    /// GitHub does).
    pub fn labels_fit(&self, labels: &[String]) -> bool {
        self.labels
            .iter()
            .all(|want| labels.iter().any(|have| have.eq_ignore_ascii_case(want)))
    }
}

/// Whether `rest`, what follows `<deployment>-` in a runner name `full_len` long, is
/// `<hash>-<5 safe characters>`, with `<deployment>-<hash>-` possibly cut as the apiserver cuts
/// a `generateName` prefix.
fn deployment_generated(full_len: usize, rest: &str) -> bool {
    if full_len > MAX_GENERATE_NAME_PREFIX + GENERATED_SUFFIX {
        return false;
    }
    let Some(cut) = rest.len().checked_sub(GENERATED_SUFFIX) else {
        return false;
    };
    if !rest.is_char_boundary(cut) {
        return false;
    }
    let (hash_and_dash, suffix) = rest.split_at(cut);
    if !safe(suffix, GENERATED_SUFFIX..=GENERATED_SUFFIX) {
        return false;
    }
    match hash_and_dash.strip_suffix('-') {
        Some(hash) if safe(hash, 1..=MAX_HASH) => true,
        // Cut: the prefix filled the apiserver's limit and ends inside the hash (or its dash).
        _ => {
            full_len - GENERATED_SUFFIX == MAX_GENERATE_NAME_PREFIX
                && safe(hash_and_dash.trim_end_matches('-'), 0..=MAX_HASH)
        }
    }
}

/// Whether `s` is of a length in `len` and written in Kubernetes' safe alphabet.
fn safe(s: &str, len: std::ops::RangeInclusive<usize>) -> bool {
    len.contains(&s.len()) && s.bytes().all(|b| ALPHABET.contains(&b))
}

/// A runner as GitHub's List Runners shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    /// Runner ID.
    pub id: u64,
    /// Runner name.
    pub name: String,
    /// What GitHub says of its connection.
    pub status: Connection,
    /// Running a job.
    pub busy: bool,
    /// All its labels.
    pub labels: Vec<String>,
}

/// A runner's connection, as GitHub's list says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connection {
    /// `offline`: a registration nothing uses, or a runner that lost its pod.
    Offline,
    /// `online`: a runner process is connected — when no pod of its name exists, a *ghost*
    /// (its pod was deleted while the process kept running, e.g. on a node cut off from the
    /// apiserver but not from GitHub).
    Online,
    /// A status word Hangar does not know: never judged.
    Unknown,
}

/// Why a runner is kept, or that it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// GitHub's status word for it is unknown to Hangar.
    StatusUnknown,
    /// It is running a job.
    Busy,
    /// A pod, Runner, StatefulSet pod or registration-only runner of its name exists.
    Live,
    /// No owner Hangar knows at this scope gives runners this name and these labels.
    NotHangars,
    /// It has looked leaked since `since`, less than the grace period.
    Waiting {
        /// When the sweep first saw it leaked.
        since: SystemTime,
    },
    /// It has looked leaked for the grace period: remove it.
    Remove,
}

/// What a sweep of one scope sees.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// GitHub's runners at the scope.
    pub runners: &'a [Registered],
    /// The owners Hangar knows (or knew, recently) at the scope.
    pub owners: &'a [Owner],
    /// Names of pods, Runners, StatefulSet pods and registration-only runners in every watched
    /// namespace (Kubernetes names, so lower case), read *after* GitHub's list.
    pub live: &'a BTreeSet<String>,
    /// Runner IDs the sweep saw leaked before, with when it first did.
    pub suspected: &'a BTreeMap<u64, SystemTime>,
    /// Now.
    pub now: SystemTime,
    /// How long a runner must look leaked before it is removed.
    pub grace: Duration,
}

/// What to do at one scope.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Runner IDs to delete.
    pub remove: Vec<u64>,
    /// The runners that look leaked and are kept for now, with when each was first seen so:
    /// the next sweep's `suspected`. A runner that stopped looking leaked is not in it, so its
    /// grace period starts over if it ever looks leaked again.
    pub suspected: BTreeMap<u64, SystemTime>,
}

/// The verdict on one runner (the module's contract, rule by rule).
pub fn judge(runner: &Registered, observed: &Observed<'_>) -> Verdict {
    if runner.status == Connection::Unknown {
        return Verdict::StatusUnknown;
    }
    if runner.busy {
        return Verdict::Busy;
    }
    if observed
        .live
        .contains(runner.name.to_ascii_lowercase().as_str())
    {
        return Verdict::Live;
    }
    let hangars = observed
        .owners
        .iter()
        .any(|o| o.names(&runner.name) && o.labels_fit(&runner.labels));
    if !hangars {
        return Verdict::NotHangars;
    }
    let since = observed
        .suspected
        .get(&runner.id)
        .copied()
        .unwrap_or(observed.now);
    let leaked_for = observed.now.duration_since(since).unwrap_or_default();
    if leaked_for >= observed.grace {
        Verdict::Remove
    } else {
        Verdict::Waiting { since }
    }
}

/// The plan for one scope: [`judge`] on every runner.
pub fn plan(observed: &Observed<'_>) -> Plan {
    let mut plan = Plan::default();
    for runner in observed.runners {
        match judge(runner, observed) {
            Verdict::Remove => plan.remove.push(runner.id),
            Verdict::Waiting { since } => {
                plan.suspected.insert(runner.id, since);
            }
            _ => {}
        }
    }
    plan
}

/// How long an owner that vanished is still recognised: long enough for a runner it leaked
/// to be seen by the next sweep (`period`) and removed a grace period later (the sweep that
/// finds its grace over comes up to another `period` after that).
pub fn remember_for(grace: Duration, period: Duration) -> Duration {
    grace + period * 2
}

/// Values seen recently, by key: the sweep's memory of owners, so that a runner leaked by a
/// RunnerReplicaSet that a rollout deleted meanwhile is still recognised as Hangar's.
#[derive(Clone, Debug)]
pub struct Remembered<K, V> {
    entries: BTreeMap<K, (V, SystemTime)>,
}

impl<K, V> Default for Remembered<K, V> {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
        }
    }
}

impl<K: Ord, V> Remembered<K, V> {
    /// Records what exists `now` (replacing what was remembered of it) and forgets what was
    /// last seen longer than `keep_for` ago.
    pub fn update(
        &mut self,
        current: impl IntoIterator<Item = (K, V)>,
        now: SystemTime,
        keep_for: Duration,
    ) {
        for (key, value) in current {
            self.entries.insert(key, (value, now));
        }
        self.entries
            .retain(|_, (_, seen)| now.duration_since(*seen).unwrap_or_default() <= keep_for);
    }

    /// Everything remembered.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, (v, _))| (k, v))
    }

    /// How many values are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn t(minutes: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + MIN * minutes as u32
    }

    fn owner(kind: OwnerKind, name: &str, labels: &[&str]) -> Owner {
        Owner {
            kind,
            name: name.into(),
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        }
    }

    fn runner(id: u64, name: &str, offline: bool, busy: bool, labels: &[&str]) -> Registered {
        Registered {
            id,
            name: name.into(),
            status: if offline {
                Connection::Offline
            } else {
                Connection::Unknown
            },
            busy,
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        }
    }

    #[test]
    fn replica_set_runners_are_the_set_name_and_five_safe_characters() {
        let rs = owner(OwnerKind::ReplicaSet, "ci-7c9fd", &[]);
        for (name, ours) in [
            ("ci-7c9fd-x7k2q", true),
            ("ci-7c9fd-bbbbb", true),
            // Wrong length, unsafe characters (vowels, 0, 1, 3), another set.
            ("ci-7c9fd-x7k2", false),
            ("ci-7c9fd-x7k2qq", false),
            ("ci-7c9fd-a7k2q", false),
            ("ci-7c9fd-x0k2q", false),
            ("ci-7c9fd-X7K2Q", false),
            ("ci-7c9fd-registration-only", false),
            ("ci-7c9fe-x7k2q", false),
            ("ci-7c9fd", false),
            ("laptop", false),
        ] {
            assert_eq!(rs.names(name), ours, "{name}");
        }
    }

    #[test]
    fn a_long_replica_set_name_is_cut_as_the_apiserver_cuts_generate_name() {
        let long = "r".repeat(60);
        let rs = owner(OwnerKind::ReplicaSet, &long, &[]);
        assert!(rs.names(&format!("{}x7k2q", &long[..58])));
        assert!(!rs.names(&format!("{long}-x7k2q")));
    }

    #[test]
    fn deployment_runners_are_the_deployment_name_any_hash_and_five_safe_characters() {
        let rd = owner(OwnerKind::Deployment, "ci", &[]);
        for (name, ours) in [
            ("ci-7c9fd-x7k2q", true),
            ("ci-b-bbbbb", true),
            ("ci-bcdfghjklm-x7k2q", true),
            // Hash too long, missing, unsafe; suffix wrong; another deployment's runners.
            ("ci-bcdfghjklmn-x7k2q", false),
            ("ci--x7k2q", false),
            ("ci-x7k2q", false),
            ("ci-7c0fd-x7k2q", false),
            ("ci-7c9fd-x7k2", false),
            ("ci-7c9fd-x7k2qq", false),
            ("ci-bcd-7c9fd-x7k2q", false),
            ("cid-7c9fd-x7k2q", false),
            ("ci-registration-only", false),
            ("ci", false),
            ("ci-7c9fd-x7k2é", false),
        ] {
            assert_eq!(rd.names(name), ours, "{name}");
        }
    }

    #[test]
    fn a_long_deployment_name_is_cut_as_the_apiserver_cuts_generate_name() {
        let long = "r".repeat(55);
        let rd = owner(OwnerKind::Deployment, &long, &[]);
        // `<55 r>-<hash>-` is cut to 58 characters: the dash and two characters of the hash.
        assert!(rd.names(&format!("{long}-7cx7k2q")));
        // Cut right after the deployment's dash.
        let longer = "r".repeat(57);
        assert!(owner(OwnerKind::Deployment, &longer, &[]).names(&format!("{longer}-x7k2q")));
        // Longer than any generated name; cut short of the limit.
        assert!(!rd.names(&format!("{long}-7c9fd-x7k2q")));
        assert!(!rd.names(&format!("{}-7cx7k2q", "r".repeat(50))));
    }

    #[test]
    fn runner_set_pods_are_the_set_name_a_hash_and_zero() {
        let set = owner(OwnerKind::RunnerSet, "build", &[]);
        for (name, ours) in [
            ("build-bcdf-0", true),
            ("build-b-0", true),
            ("build-bcdfghjklm-0", true),
            ("build-bcdfghjklmn-0", false),
            ("build--0", false),
            ("build-bcdf-1", false),
            ("build-bcdf", false),
            ("build-abcd-0", false),
            ("builds-bcdf-0", false),
            // A registration-only runner: never a generated name, so never swept.
            ("build-registration-only", false),
        ] {
            assert_eq!(set.names(name), ours, "{name}");
        }
        let long = format!("{}-tail", "s".repeat(39));
        let set = owner(OwnerKind::RunnerSet, &long, &[]);
        // Cut to 40 characters, then the dash the cut left at the end is dropped.
        assert!(set.names(&format!("{}-bcdf-0", "s".repeat(39))));
        assert_eq!(stateful_set_prefix(&long), "s".repeat(39));
        assert_eq!(stateful_set_prefix("short"), "short");
    }

    #[test]
    fn an_owner_s_labels_must_all_be_carried_ignoring_case() {
        let rs = owner(OwnerKind::ReplicaSet, "ci", &["gpu", "Linux"]);
        let have = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(rs.labels_fit(&have(&["self-hosted", "linux", "X64", "GPU"])));
        assert!(!rs.labels_fit(&have(&["self-hosted", "linux", "X64"])));
        assert!(owner(OwnerKind::ReplicaSet, "ci", &[]).labels_fit(&[]));
    }

    /// One row per branch of [`judge`]; the scope has one RunnerReplicaSet `ci-7c9fd` with label
    /// `gpu`, a live pod `ci-7c9fd-live2`, and runner 6 suspected since minute 0.
    fn online(id: u64, name: &str, busy: bool, labels: &[&str]) -> Registered {
        Registered {
            status: Connection::Online,
            ..runner(id, name, true, busy, labels)
        }
    }

    #[test]
    fn only_idle_unreferenced_hangar_runners_past_the_grace_period_go() {
        let owners = [owner(OwnerKind::ReplicaSet, "ci-7c9fd", &["gpu"])];
        let live: BTreeSet<String> = ["ci-7c9fd-live2".to_owned()].into();
        let suspected: BTreeMap<u64, SystemTime> = [(6, t(0)), (7, t(0))].into();
        let observed = |now| Observed {
            runners: &[],
            owners: &owners,
            live: &live,
            suspected: &suspected,
            now,
            grace: MIN * 30,
        };
        let labels = ["self-hosted", "gpu"];
        for (runner, now, want) in [
            (
                runner(1, "ci-7c9fd-x7k2q", false, false, &labels),
                t(60),
                Verdict::StatusUnknown,
            ),
            (
                runner(2, "ci-7c9fd-x7k2q", true, true, &labels),
                t(60),
                Verdict::Busy,
            ),
            (
                runner(3, "ci-7c9fd-live2", true, false, &labels),
                t(60),
                Verdict::Live,
            ),
            // GitHub keeps the name's case; Kubernetes names are lower case.
            (
                runner(3, "CI-7c9fd-LIVE2", true, false, &labels),
                t(60),
                Verdict::Live,
            ),
            (
                runner(4, "laptop", true, false, &labels),
                t(60),
                Verdict::NotHangars,
            ),
            (
                runner(5, "ci-7c9fd-x7k2q", true, false, &["self-hosted"]),
                t(60),
                Verdict::NotHangars,
            ),
            (
                runner(8, "ci-7c9fd-x7k2q", true, false, &labels),
                t(60),
                Verdict::Waiting { since: t(60) },
            ),
            (
                runner(6, "ci-7c9fd-x7k2q", true, false, &labels),
                t(29),
                Verdict::Waiting { since: t(0) },
            ),
            (
                runner(7, "ci-7c9fd-x7k2q", true, false, &labels),
                t(30),
                Verdict::Remove,
            ),
            // Ghosts: online, no pod of their name.
            (
                online(7, "ci-7c9fd-x7k2q", false, &labels),
                t(30),
                Verdict::Remove,
            ),
            (
                online(6, "ci-7c9fd-x7k2q", false, &labels),
                t(29),
                Verdict::Waiting { since: t(0) },
            ),
            (
                online(7, "ci-7c9fd-x7k2q", true, &labels),
                t(30),
                Verdict::Busy,
            ),
            (
                online(7, "ci-7c9fd-live2", false, &labels),
                t(30),
                Verdict::Live,
            ),
            (
                online(7, "laptop", false, &labels),
                t(30),
                Verdict::NotHangars,
            ),
        ] {
            assert_eq!(
                judge(&runner, &observed(now)),
                want,
                "runner {} {}",
                runner.id,
                runner.name
            );
        }
    }

    #[test]
    fn a_clock_that_went_back_never_removes() {
        let owners = [owner(OwnerKind::RunnerSet, "build", &[])];
        let suspected: BTreeMap<u64, SystemTime> = [(1, t(100))].into();
        let observed = Observed {
            runners: &[],
            owners: &owners,
            live: &BTreeSet::new(),
            suspected: &suspected,
            now: t(0),
            grace: MIN * 30,
        };
        let leaked = runner(1, "build-bcdf-0", true, false, &[]);
        assert_eq!(
            judge(&leaked, &observed),
            Verdict::Waiting { since: t(100) }
        );
    }

    #[test]
    fn the_plan_removes_what_waited_long_enough_and_carries_the_rest_forward() {
        let owners = [owner(OwnerKind::ReplicaSet, "ci", &[])];
        let live = BTreeSet::new();
        let runners = [
            runner(1, "ci-bbbbb", true, false, &[]),
            runner(2, "ci-ccccc", true, false, &[]),
            runner(3, "ci-ddddd", false, false, &[]),
        ];
        // Runner 3 was suspected, then came online: forgotten, its grace starts over later.
        let suspected: BTreeMap<u64, SystemTime> = [(1, t(0)), (3, t(0))].into();
        let plan = plan(&Observed {
            runners: &runners,
            owners: &owners,
            live: &live,
            suspected: &suspected,
            now: t(45),
            grace: MIN * 30,
        });
        assert_eq!(
            plan,
            Plan {
                remove: vec![1],
                suspected: [(2, t(45))].into(),
            }
        );
    }

    #[test]
    fn owners_are_remembered_until_they_have_been_gone_for_the_retention() {
        let keep_for = remember_for(MIN * 30, MIN * 10);
        assert_eq!(keep_for, MIN * 50);
        let mut owners: Remembered<&'static str, u32> = Remembered::default();
        owners.update([("a", 1), ("b", 1)], t(0), keep_for);
        // "b" is gone from minute 10 on; "a" changes.
        owners.update([("a", 2)], t(10), keep_for);
        fn seen(o: &Remembered<&'static str, u32>) -> Vec<(&'static str, u32)> {
            o.iter().map(|(k, v)| (*k, *v)).collect()
        }
        assert_eq!(seen(&owners), [("a", 2), ("b", 1)]);
        owners.update([("a", 2)], t(50), keep_for);
        assert_eq!(
            seen(&owners),
            [("a", 2), ("b", 1)],
            "gone exactly 50 minutes"
        );
        owners.update([("a", 2)], t(51), keep_for);
        assert_eq!(seen(&owners), [("a", 2)]);
        owners.update([], t(200), keep_for);
        assert!(owners.is_empty());
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// Names from a small pool, so that generated runners often collide with owners' names
        /// and live names.
        fn name() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("ci-bbbbb".to_owned()),
                Just("ci-x7k2q".to_owned()),
                Just("build-bcdf-0".to_owned()),
                Just("build-b-0".to_owned()),
                Just("laptop".to_owned()),
                "[a-z2-9-]{1,12}",
            ]
        }

        fn label() -> impl Strategy<Value = String> {
            prop_oneof![Just("gpu".to_owned()), Just("linux".to_owned())]
        }

        fn registered() -> impl Strategy<Value = Registered> {
            let status = prop_oneof![
                Just(Connection::Offline),
                Just(Connection::Online),
                Just(Connection::Unknown),
            ];
            (
                name(),
                status,
                any::<bool>(),
                prop::collection::vec(label(), 0..3),
            )
                .prop_map(|(name, status, busy, labels)| Registered {
                    id: 0,
                    name,
                    status,
                    busy,
                    labels,
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            /// Whatever GitHub lists, the plan removes only idle runners of a known status that no live
            /// object names, that an owner names and labels, and that were suspected for the
            /// whole grace period.
            #[test]
            fn never_removes_anything_the_contract_keeps(
                runners in prop::collection::vec(registered(), 0..12)
                    .prop_map(|rs| rs.into_iter().enumerate().map(|(i, r)| Registered { id: i as u64, ..r }).collect::<Vec<_>>()),
                live in prop::collection::btree_set(name(), 0..4),
                suspected in prop::collection::btree_map(0u64..12, 0u64..120, 0..10),
                owner_labels in prop::collection::vec(label(), 0..2),
                now in 0u64..120,
            ) {
                let owners = [
                    Owner { kind: OwnerKind::ReplicaSet, name: "ci".into(), labels: owner_labels.clone() },
                    Owner { kind: OwnerKind::RunnerSet, name: "build".into(), labels: owner_labels },
                ];
                let suspected: BTreeMap<u64, SystemTime> =
                    suspected.into_iter().map(|(id, m)| (id, t(m))).collect();
                let observed = Observed {
                    runners: &runners,
                    owners: &owners,
                    live: &live,
                    suspected: &suspected,
                    now: t(now),
                    grace: MIN * 30,
                };
                let plan = plan(&observed);
                for id in &plan.remove {
                    let r = &runners[usize::try_from(*id).unwrap()];
                    prop_assert!(r.status != Connection::Unknown && !r.busy, "{r:?}");
                    prop_assert!(!live.contains(&r.name), "{r:?}");
                    prop_assert!(
                        owners.iter().any(|o| o.names(&r.name) && o.labels_fit(&r.labels)),
                        "{r:?}"
                    );
                    let waited = suspected
                        .get(id)
                        .map(|since| t(now).duration_since(*since).unwrap_or_default());
                    prop_assert!(waited.is_some_and(|w| w >= MIN * 30), "{r:?} {waited:?}");
                }
                for (id, since) in &plan.suspected {
                    prop_assert!(!plan.remove.contains(id));
                    prop_assert!(suspected.get(id).unwrap_or(&t(now)) == since);
                }
            }
        }
    }
}
