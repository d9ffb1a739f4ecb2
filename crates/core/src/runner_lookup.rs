//! How a runner pod learns its GitHub runner ID without costing a runner list per pod.
//!
//! A runner's ID is needed to report it registered and, later, to unregister it by ID. A list
//! of the scope's runners (`GET …/runners`) names every registered runner, but it is one
//! GitHub call, and under steady load new runners start every few hundred milliseconds. Two
//! facts spare most lists:
//!
//! - **A runner that took a job was seen at work.** GitHub's signed `workflow_job`
//!   `in_progress` delivery names the runner and its ID ([`Sighting`]). It vouches for a pod
//!   ([`vouches_for`]) only if the job ran where the pod's scope can serve (a repository-scoped
//!   runner's own repository, an organization's repositories, an enterprise's deliveries) and
//!   was seen after the pod started (a RunnerSet's pods reuse their names). A sighting is
//!   evidence, not authority: a runner of the same name in another scope (registered by someone
//!   able to do so there) can lend a pod a wrong ID, and the only harm is a `404` on the
//!   unregistration's `DELETE`, which is confirmed by name against a fresh list before anything
//!   is concluded (`unregistration::after_not_found`). Only deliveries whose signature was
//!   verified may be turned into sightings: with unsigned deliveries anyone could name another
//!   pod's runner ID.
//! - **A runner that has just started has rarely registered yet.** A pod whose runner started
//!   less than the lookup interval ago is not looked for in a list until that interval has
//!   passed since its start ([`list_hold`]); meanwhile a job's sighting may name it. A runner
//!   that sits idle costs the list it cost before, one interval after it started.
//!
//! The same signed deliveries say when a runner is done: a `completed` delivery naming it
//! ([`Sighting::job_done`]) tells owner sync that an ephemeral runner is on its way out before
//! the kubelet reports its exit (`owner_sync::Input::completions_heard`), under the same
//! [`vouches_for`] rule. Deliveries may arrive out of order; a runner's `in_progress` arriving
//! after its `completed` does not bring it back to work ([`supersedes`]).

use std::time::{Duration, SystemTime};

use crate::scope::RunnerScope;

/// A runner GitHub reported at work: the runner name and ID of an `in_progress` job, and where
/// the job ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sighting {
    /// The runner's GitHub ID.
    pub runner_id: u64,
    /// The job's repository, `owner/name`.
    pub repository: String,
    /// The delivery's enterprise slug, if it names one.
    pub enterprise: Option<String>,
    /// When the delivery was received.
    pub at: SystemTime,
    /// The delivery said the job is completed (else `in_progress`): an ephemeral runner is done.
    pub job_done: bool,
}

/// Whether a sighting `arriving` for a runner name replaces the one `kept` for it: the latest
/// delivery wins, except that the runner a `completed` delivery said is done is not brought
/// back to work by its own `in_progress` delivered late (same runner ID). A runner of the same
/// name with another ID is another registration (a RunnerSet's pod reuses its name).
pub fn supersedes(arriving: &Sighting, kept: &Sighting) -> bool {
    !(kept.job_done && !arriving.job_done && kept.runner_id == arriving.runner_id)
}

/// Whether `sighting` of a runner named like a pod may be taken as that pod's registration:
/// the job ran where a runner of `scope` can serve, after the pod `started` (a pod that has not
/// started has no runner to take a job).
pub fn vouches_for(sighting: &Sighting, scope: &RunnerScope, started: Option<SystemTime>) -> bool {
    let Some(started) = started else {
        return false;
    };
    // Kubernetes times have whole seconds: a start inside the sighting's own second counts as
    // before it.
    let started = truncate_to_seconds(started);
    if sighting.at < started {
        return false;
    }
    let owner = sighting.repository.split_once('/').map(|(owner, _)| owner);
    match scope {
        RunnerScope::Repository { owner: o, name } => sighting
            .repository
            .eq_ignore_ascii_case(&format!("{o}/{name}")),
        RunnerScope::Organization(org) => {
            owner.is_some_and(|owner| owner.eq_ignore_ascii_case(org))
        }
        RunnerScope::Enterprise(enterprise) => sighting
            .enterprise
            .as_deref()
            .is_some_and(|e| e.eq_ignore_ascii_case(enterprise)),
    }
}

/// How long a pod whose runner `started` (its pod's start time, by the kubelet's clock) waits
/// before its runner is looked for in a list: until `interval` has passed since the start; zero
/// once it has, when the start is unknown, or when it lies ahead of `now` (the clocks disagree,
/// and a hold measured against a clock that is behind could last for ever).
pub fn list_hold(started: Option<SystemTime>, now: SystemTime, interval: Duration) -> Duration {
    match started.map(|started| now.duration_since(started)) {
        Some(Ok(age)) => interval.saturating_sub(age),
        None | Some(Err(_)) => Duration::ZERO,
    }
}

/// `t` without its fraction of a second, as Kubernetes records times.
pub(crate) fn truncate_to_seconds(t: SystemTime) -> SystemTime {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => SystemTime::UNIX_EPOCH + Duration::from_secs(since.as_secs()),
        Err(_) => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(millis: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(1_000_000_000 + millis)
    }

    fn seen(repository: &str, enterprise: Option<&str>, at: SystemTime) -> Sighting {
        Sighting {
            runner_id: 7,
            repository: repository.into(),
            enterprise: enterprise.map(Into::into),
            at,
            job_done: false,
        }
    }

    #[test]
    fn a_late_in_progress_does_not_bring_a_done_runner_back_to_work() {
        let at_work = |id| Sighting {
            runner_id: id,
            ..seen("octo/app", None, t(1_000))
        };
        let done = |id| Sighting {
            job_done: true,
            ..at_work(id)
        };
        let rows = [
            ("at work, then done", done(7), at_work(7), true),
            (
                "done, then its own late in_progress",
                at_work(7),
                done(7),
                false,
            ),
            (
                "done, then another runner of the name at work",
                at_work(8),
                done(7),
                true,
            ),
            ("at work twice (a redelivery)", at_work(7), at_work(7), true),
            ("done twice", done(7), done(7), true),
        ];
        for (case, arriving, kept, replaces) in rows {
            assert_eq!(supersedes(&arriving, &kept), replaces, "{case}");
        }
    }

    fn repo(owner: &str, name: &str) -> RunnerScope {
        RunnerScope::Repository {
            owner: owner.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_sighting_vouches_only_within_the_pods_scope_and_after_its_start() {
        let org = RunnerScope::Organization("Octo".into());
        let ent = RunnerScope::Enterprise("big".into());
        let rows: Vec<(&str, Sighting, RunnerScope, Option<SystemTime>, bool)> = vec![
            (
                "the repository's own job",
                seen("octo/app", None, t(5_000)),
                repo("octo", "app"),
                Some(t(1_000)),
                true,
            ),
            (
                "logins compare without case",
                seen("OCTO/App", None, t(5_000)),
                repo("octo", "app"),
                Some(t(1_000)),
                true,
            ),
            (
                "another repository's job: not a repository runner's",
                seen("octo/other", None, t(5_000)),
                repo("octo", "app"),
                Some(t(1_000)),
                false,
            ),
            (
                "an organization's repository",
                seen("octo/other", None, t(5_000)),
                org.clone(),
                Some(t(1_000)),
                true,
            ),
            (
                "another organization's repository",
                seen("evil/octo", None, t(5_000)),
                org.clone(),
                Some(t(1_000)),
                false,
            ),
            (
                "a repository named like the organization is not in it",
                seen("octox/app", None, t(5_000)),
                org,
                Some(t(1_000)),
                false,
            ),
            (
                "the enterprise's delivery",
                seen("octo/app", Some("BIG"), t(5_000)),
                ent.clone(),
                Some(t(1_000)),
                true,
            ),
            (
                "no enterprise named: not an enterprise runner's",
                seen("octo/app", None, t(5_000)),
                ent.clone(),
                Some(t(1_000)),
                false,
            ),
            (
                "another enterprise",
                seen("octo/app", Some("small"), t(5_000)),
                ent,
                Some(t(1_000)),
                false,
            ),
            (
                "seen before the pod started: an earlier pod of the same name",
                seen("octo/app", None, t(1_000)),
                repo("octo", "app"),
                Some(t(5_000)),
                false,
            ),
            (
                "seen within the second the pod started (start times have whole seconds)",
                seen("octo/app", None, t(5_100)),
                repo("octo", "app"),
                Some(t(5_000)),
                true,
            ),
            (
                "a pod not started has no runner",
                seen("octo/app", None, t(5_000)),
                repo("octo", "app"),
                None,
                false,
            ),
        ];
        for (why, sighting, scope, started, expected) in rows {
            assert_eq!(vouches_for(&sighting, &scope, started), expected, "{why}");
        }
    }

    #[test]
    fn a_runner_is_looked_for_in_a_list_once_an_interval_has_passed_since_its_start() {
        let interval = Duration::from_secs(3);
        let rows = [
            (
                "just started: the whole interval",
                Some(t(10_000)),
                t(10_000),
                interval,
            ),
            (
                "a second in",
                Some(t(10_000)),
                t(11_000),
                Duration::from_secs(2),
            ),
            (
                "the interval passed",
                Some(t(10_000)),
                t(13_000),
                Duration::ZERO,
            ),
            ("long since", Some(t(10_000)), t(99_000), Duration::ZERO),
            ("start unknown", None, t(10_000), Duration::ZERO),
            (
                "a start ahead of now (skewed clocks)",
                Some(t(12_000)),
                t(10_000),
                Duration::ZERO,
            ),
        ];
        for (why, started, now, expected) in rows {
            assert_eq!(list_hold(started, now, interval), expected, "{why}");
        }
    }
}
