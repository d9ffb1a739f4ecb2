//! Retirement of a deleted owner: when a Runner, RunnerReplicaSet, RunnerDeployment or
//! RunnerSet that is being deleted may let go of its finalizer, and when it stops waiting.
//!
//! A deleted owner counts as "desired 0": its runners leave through unregister-before-delete
//! (idle ones at once, busy ones after their job). The owner holds its finalizer until none is
//! left ([`Step::Release`]), but only for its retirement timeout, counted from its
//! `deletionTimestamp`; after that the rest is forced ([`Step::Force`]) and busy runners die
//! mid-job. A timeout of zero forces at once: the escape hatch for an owner that must go now.
//!
//! A namespace deletion deletes runner pods (and RunnerSet StatefulSets) directly, not through
//! their owners: [`pod_deletion`] decides whether the admission guard lets such a delete
//! through, by the same timeout counted from the namespace's `deletionTimestamp`.

use std::time::{Duration, SystemTime};

/// The default retirement timeout: longer than normal jobs, short enough that a stuck
/// deletion is noticed within a working day.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// What one decision looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The owner's `deletionTimestamp`.
    pub deleting_since: SystemTime,
    /// How long the owner waits for its runners.
    pub timeout: Duration,
    /// The current time.
    pub now: SystemTime,
    /// Runners (or child owners) of the owner not gone yet.
    pub remaining: u32,
}

/// What a deleting owner does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing is left: remove the finalizer.
    Release,
    /// Keep retiring; decide again at `force_at` at the latest.
    Wait {
        /// When the timeout runs out.
        force_at: SystemTime,
    },
    /// The timeout ran out: delete what is left, busy or not, and remove the finalizer.
    Force,
}

/// Decides whether a deleting owner keeps waiting for its runners. Pure.
pub fn step(o: &Observed) -> Step {
    let force_at = o.deleting_since + o.timeout;
    if o.remaining == 0 {
        Step::Release
    } else if o.now >= force_at {
        Step::Force
    } else {
        Step::Wait { force_at }
    }
}

/// The pod of a deleting Runner, as far as its retirement is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunnerPod {
    /// No pod (never created, or gone).
    Absent,
    /// Being deleted already: its own finalizer unregisters the runner.
    Deleting,
    /// Its runner finished (pod Succeeded/Failed or runner container exited): no job to wait for.
    Finished,
    /// Its runner is unregistered (`unregistration-complete-timestamp`): it can take no job.
    Unregistered,
    /// Its runner may be running a job.
    Alive,
}

/// What a deleting Runner does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunnerStep {
    /// Delete the pod if `delete_pod`, then remove the finalizer.
    Release {
        /// The pod exists and is not being deleted yet.
        delete_pod: bool,
    },
    /// Ask the runner-pod controller to unregister the runner (idempotent); decide again by
    /// `force_at`.
    Unregister {
        /// When the timeout runs out.
        force_at: SystemTime,
    },
    /// The timeout ran out: delete the pod (a busy runner dies) and remove the finalizer.
    Force,
}

/// Decides the next step of a deleting Runner from its pod. Pure.
pub fn runner_step(
    pod: RunnerPod,
    deleting_since: SystemTime,
    timeout: Duration,
    now: SystemTime,
) -> RunnerStep {
    let remaining = u32::from(pod == RunnerPod::Alive);
    let observed = Observed {
        deleting_since,
        timeout,
        now,
        remaining,
    };
    match step(&observed) {
        Step::Release => RunnerStep::Release {
            delete_pod: matches!(pod, RunnerPod::Finished | RunnerPod::Unregistered),
        },
        Step::Wait { force_at } => RunnerStep::Unregister { force_at },
        Step::Force => RunnerStep::Force,
    }
}

/// The DELETE of a runner pod, as the runner-pod deletion guard (an admission webhook) sees it.
///
/// A namespace deletion deletes pods directly, not through their owners: without the guard a
/// busy runner's pod would get its deletion timestamp, and the kubelet would kill the runner
/// mid-job, while the Runner's (or RunnerSet's) finalizer only kept the owner object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodDeletion {
    /// The `deletionTimestamp` of the pod's namespace; `None` while it is not being deleted.
    pub namespace_deleting_since: Option<SystemTime>,
    /// The pod.
    pub pod: RunnerPod,
    /// The pod's retirement timeout (its `hangar.dev/retirement-timeout`, else the default).
    pub timeout: Duration,
    /// The current time.
    pub now: SystemTime,
}

/// Whether a runner pod may be deleted now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodDeletionVerdict {
    /// Deleting it kills no job, or it is not the namespace deletion asking.
    Allow,
    /// Its runner may be running a job: its owner's retirement unregisters it first. Refused
    /// until `forced_at`; the namespace controller retries until then.
    Refuse {
        /// When the pod's retirement timeout runs out.
        forced_at: SystemTime,
    },
}

/// Decides whether a runner pod may be deleted. Pure.
///
/// Only deletes inside a terminating namespace are held: any other delete of a pod comes from
/// its owner's retirement (or the garbage collector, held back by the owner's finalizer) or
/// from someone deleting that one pod on purpose. A pod already being deleted, finished or
/// unregistered holds no job, so it always goes. A pod's markers can only let it go sooner, so
/// a tenant who writes them exposes nothing but its own runner.
pub fn pod_deletion(d: &PodDeletion) -> PodDeletionVerdict {
    let Some(since) = d.namespace_deleting_since else {
        return PodDeletionVerdict::Allow;
    };
    if d.pod != RunnerPod::Alive {
        return PodDeletionVerdict::Allow;
    }
    let observed = Observed {
        deleting_since: since,
        timeout: d.timeout,
        now: d.now,
        remaining: 1,
    };
    match step(&observed) {
        Step::Wait { force_at } => PodDeletionVerdict::Refuse {
            forced_at: force_at,
        },
        Step::Release | Step::Force => PodDeletionVerdict::Allow,
    }
}

/// A retirement timeout that could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid retirement timeout {0:?}: use a duration such as 0s, 90s, 10m or 1h30m")]
pub struct TimeoutError(pub String);

/// Parses a retirement timeout written as a Go duration without fractions or signs ("0",
/// "2s", "10m", "1h30m", "500ms"), as the `hangar.dev/retirement-timeout` annotation takes it.
pub fn parse_timeout(text: &str) -> Result<Duration, TimeoutError> {
    let bad = || TimeoutError(text.to_owned());
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ms" => Duration::from_millis(1),
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        let part = unit.checked_mul(u32::try_from(n).map_err(|_| bad())?);
        total = total.checked_add(part.ok_or_else(bad)?).ok_or_else(bad)?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn an_owner_waits_for_its_runners_until_the_timeout_then_forces() {
        let rows = [
            // (remaining, now, timeout, expected)
            (0, t(10), HOUR, Step::Release),
            (0, t(7200), HOUR, Step::Release),
            (2, t(10), HOUR, Step::Wait { force_at: t(3600) }),
            (1, t(3599), HOUR, Step::Wait { force_at: t(3600) }),
            (1, t(3600), HOUR, Step::Force),
            (1, t(0), Duration::ZERO, Step::Force),
        ];
        for (remaining, now, timeout, expected) in rows {
            let o = Observed {
                deleting_since: t(0),
                timeout,
                now,
                remaining,
            };
            assert_eq!(step(&o), expected, "{o:?}");
        }
    }

    #[test]
    fn a_clock_behind_the_deletion_timestamp_keeps_waiting() {
        let o = Observed {
            deleting_since: t(100),
            timeout: Duration::from_secs(2),
            now: t(0),
            remaining: 1,
        };
        assert_eq!(step(&o), Step::Wait { force_at: t(102) });
    }

    #[test]
    fn a_deleting_runner_releases_once_its_pod_holds_no_job_and_forces_after_the_timeout() {
        use RunnerPod::*;
        let rows = [
            (Absent, t(10), RunnerStep::Release { delete_pod: false }),
            (Deleting, t(10), RunnerStep::Release { delete_pod: false }),
            (Finished, t(10), RunnerStep::Release { delete_pod: true }),
            (
                Unregistered,
                t(10),
                RunnerStep::Release { delete_pod: true },
            ),
            (Finished, t(7200), RunnerStep::Release { delete_pod: true }),
            (Alive, t(10), RunnerStep::Unregister { force_at: t(3600) }),
            (Alive, t(3600), RunnerStep::Force),
        ];
        for (pod, now, expected) in rows {
            assert_eq!(
                runner_step(pod, t(0), HOUR, now),
                expected,
                "{pod:?} at {now:?}"
            );
        }
    }

    #[test]
    fn a_runner_pod_in_a_terminating_namespace_is_held_while_its_runner_may_be_busy() {
        use PodDeletionVerdict::{Allow, Refuse};
        use RunnerPod::*;
        let rows = [
            // (namespace deleting since, pod, now, timeout, expected)
            (None, Alive, t(10), HOUR, Allow),
            (
                Some(t(0)),
                Alive,
                t(10),
                HOUR,
                Refuse { forced_at: t(3600) },
            ),
            (
                Some(t(0)),
                Alive,
                t(3599),
                HOUR,
                Refuse { forced_at: t(3600) },
            ),
            (Some(t(0)), Alive, t(3600), HOUR, Allow),
            (Some(t(0)), Alive, t(10), Duration::ZERO, Allow),
            (
                Some(t(100)),
                Alive,
                t(0),
                HOUR,
                Refuse { forced_at: t(3700) },
            ),
            (Some(t(0)), Absent, t(10), HOUR, Allow),
            (Some(t(0)), Deleting, t(10), HOUR, Allow),
            (Some(t(0)), Finished, t(10), HOUR, Allow),
            (Some(t(0)), Unregistered, t(10), HOUR, Allow),
        ];
        for (namespace_deleting_since, pod, now, timeout, expected) in rows {
            let d = PodDeletion {
                namespace_deleting_since,
                pod,
                timeout,
                now,
            };
            assert_eq!(pod_deletion(&d), expected, "{d:?}");
        }
    }

    #[test]
    fn timeouts_parse_as_go_durations_and_nothing_else() {
        let rows = [
            ("0", Ok(Duration::ZERO)),
            ("0s", Ok(Duration::ZERO)),
            ("2s", Ok(Duration::from_secs(2))),
            ("500ms", Ok(Duration::from_millis(500))),
            ("10m", Ok(Duration::from_secs(600))),
            ("1h30m", Ok(Duration::from_secs(5400))),
            ("", Err(())),
            ("10", Err(())),
            ("-5s", Err(())),
            ("1.5h", Err(())),
            ("5d", Err(())),
            ("s", Err(())),
        ];
        for (text, expected) in rows {
            assert_eq!(parse_timeout(text).map_err(drop), expected, "{text:?}");
        }
    }
}
