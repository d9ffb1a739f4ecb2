//! Status conditions: the types and reasons Hangar writes, and the pure merge that keeps
//! `lastTransitionTime` stable.
//!
//! Contract: controllers rebuild their conditions from observed state on every reconcile
//! ([`Desired`]) and [`merge`] them into what the object carries: a condition whose status did
//! not change keeps its `lastTransitionTime`, so `kubectl describe` shows since when a runner has
//! been unregistered, not when it was last looked at. Types other controllers (or users) wrote
//! are kept.

use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition types.
pub mod kind {
    /// Runner: GitHub knows the runner (its pod has a runner ID).
    pub const REGISTERED: &str = "Registered";
    /// Runner: registered and its pod is ready.
    pub const READY: &str = "Ready";
    /// Runner: the GitHub credentials were found and GitHub accepted them.
    pub const CREDENTIALS_VALID: &str = "CredentialsValid";
    /// RunnerReplicaSet, RunnerDeployment: every wanted runner is registered and ready.
    pub const AVAILABLE: &str = "Available";
    /// RunnerReplicaSet, RunnerDeployment: runners are being created or retired.
    pub const PROGRESSING: &str = "Progressing";
    /// An autoscaler can compute a size for its target and apply it (as on a
    /// HorizontalPodAutoscaler).
    pub const SCALING_ACTIVE: &str = "ScalingActive";
    /// An autoscaler: every `scaleUpTriggers` entry can match some webhook delivery.
    pub const TRIGGERS_VALID: &str = "TriggersValid";
    /// Runner: its runner works or is on its way; False when it is stuck, dead or refused by
    /// GitHub ([`hangar_core::health`]), with the reason and what is wrong.
    pub const HEALTHY: &str = "Healthy";
    /// RunnerReplicaSet, RunnerSet, RunnerDeployment: no runner is stuck, dead or refused by
    /// GitHub ([`hangar_core::health`]); a False one's reason is the first unhealthy runner's.
    pub const RUNNERS_HEALTHY: &str = "RunnersHealthy";
    /// RunnerDeployment, RunnerReplicaSet, RunnerSet, Runner: no field is set that Hangar
    /// stores but does not act on (present only once one was).
    pub const FIELDS_HONORED: &str = "FieldsHonored";
}

/// Condition reasons (CamelCase, stable: alerts may match on them).
pub mod reason {
    /// The runner pod does not exist yet.
    pub const POD_NOT_CREATED: &str = "PodNotCreated";
    /// The pod runs; the runner has not registered yet.
    pub const REGISTRATION_PENDING: &str = "RegistrationPending";
    /// GitHub knows the runner.
    pub const RUNNER_REGISTERED: &str = "RunnerRegistered";
    /// Registered and ready.
    pub const RUNNER_READY: &str = "RunnerReady";
    /// The pod is not ready (or the runner not registered).
    pub const RUNNER_NOT_READY: &str = "RunnerNotReady";
    /// The runner's job is done and its pod finished.
    pub const RUNNER_FINISHED: &str = "RunnerFinished";
    /// The runner is being unregistered before it is deleted.
    pub const UNREGISTERING: &str = "Unregistering";
    /// A GitHub call failed in a way that retrying may fix (5xx, rate limit, network).
    pub const GITHUB_API_ERROR: &str = "GitHubAPIError";
    /// A set's runners wait to be unregistered until GitHub's rate limit for their credentials
    /// lets calls through again.
    pub const GITHUB_RATE_LIMITED: &str = "GitHubRateLimited";
    /// The spec cannot work (e.g. no scope).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Every scale-up trigger can match a delivery (or there is none).
    pub const TRIGGERS_CAN_MATCH: &str = "TriggersCanMatch";
    /// A scale-up trigger, or part of one, can never match a delivery.
    pub const TRIGGER_NEVER_MATCHES: &str = "TriggerNeverMatches";
    /// Every field set is acted on.
    pub const FIELDS_HONORED: &str = "FieldsHonored";
    /// A field is set that Hangar stores but does not act on.
    pub const FIELDS_IGNORED: &str = "FieldsIgnored";
    /// Credentials were read, and a GitHub call with them succeeded.
    pub const CREDENTIALS_ACCEPTED: &str = "CredentialsAccepted";
    /// The Secret named by githubAPICredentialsFrom does not exist.
    pub const SECRET_NOT_FOUND: &str = "SecretNotFound";
    /// The Secret exists but does not hold a usable credential.
    pub const SECRET_INVALID: &str = "SecretInvalid";
    /// GitHub rejected the credential (401).
    pub const UNAUTHORIZED: &str = "Unauthorized";
    /// GitHub refused the call for lack of permission (403) or does not show the scope to the
    /// credential (404).
    pub const FORBIDDEN: &str = "Forbidden";
    /// Every wanted runner is available.
    pub const RUNNERS_AVAILABLE: &str = "RunnersAvailable";
    /// Some wanted runners are not available yet.
    pub const RUNNERS_UNAVAILABLE: &str = "RunnersUnavailable";
    /// Runners cannot start; the message names one and why.
    pub const RUNNERS_FAILING: &str = "RunnersFailing";
    /// Creating runners.
    pub const SCALING_UP: &str = "ScalingUp";
    /// Retiring runners (each is unregistered from GitHub first).
    pub const SCALING_DOWN: &str = "ScalingDown";
    /// Replacing runners of an older template.
    pub const ROLLING_OUT: &str = "RollingOut";
    /// Nothing to do: the runners match the spec.
    pub const REPLICAS_SYNCED: &str = "ReplicasSynced";
    /// Every runner of the set works or is on its way.
    pub const NO_UNHEALTHY_RUNNERS: &str = "NoUnhealthyRunners";
    /// The autoscaler computed its target's size.
    pub const DESIRED_REPLICAS_COMPUTED: &str = "DesiredReplicasComputed";
}

/// One condition as a controller wants it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// Type.
    pub kind: &'static str,
    /// True or False.
    pub status: bool,
    /// CamelCase reason (one of [`reason`]'s, or copied from another object's condition).
    pub reason: String,
    /// What a human should know (and do).
    pub message: String,
}

impl Desired {
    /// A condition that holds.
    pub fn yes(kind: &'static str, reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind,
            status: true,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A condition that does not hold.
    pub fn no(kind: &'static str, reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind,
            status: false,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

fn status_str(status: bool) -> &'static str {
    if status { "True" } else { "False" }
}

/// `current` with every `desired` condition set: unchanged status keeps its transition time,
/// changed status gets `now`. Conditions of other types are kept, in their order; new types are
/// appended.
pub fn merge(
    current: &[Condition],
    desired: &[Desired],
    generation: Option<i64>,
    now: SystemTime,
) -> Vec<Condition> {
    let now = Time(jiff::Timestamp::try_from(now).unwrap_or(jiff::Timestamp::UNIX_EPOCH));
    let build = |d: &Desired, since: Time| Condition {
        type_: d.kind.to_owned(),
        status: status_str(d.status).to_owned(),
        reason: d.reason.clone(),
        message: d.message.clone(),
        observed_generation: generation,
        last_transition_time: since,
    };
    let mut out: Vec<Condition> = current
        .iter()
        .map(|c| match desired.iter().find(|d| d.kind == c.type_) {
            Some(d) if c.status == status_str(d.status) => build(d, c.last_transition_time.clone()),
            Some(d) => build(d, now.clone()),
            None => c.clone(),
        })
        .collect();
    for d in desired {
        if !current.iter().any(|c| c.type_ == d.kind) {
            out.push(build(d, now.clone()));
        }
    }
    out
}

/// `kind` with the status, reason and message of `from` (e.g. a deployment echoing its newest
/// set's condition).
pub fn copied(kind: &'static str, from: &Condition) -> Desired {
    Desired {
        kind,
        status: from.status == "True",
        reason: from.reason.clone(),
        message: from.message.clone(),
    }
}

/// The condition of type `kind`, if present.
pub fn find<'a>(conditions: Option<&'a [Condition]>, kind: &str) -> Option<&'a Condition> {
    conditions?.iter().find(|c| c.type_ == kind)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    #[test]
    fn unchanged_status_keeps_its_transition_time() {
        let first = merge(
            &[],
            &[Desired::no(
                kind::REGISTERED,
                reason::REGISTRATION_PENDING,
                "waiting",
            )],
            Some(1),
            at(0),
        );
        let later = merge(
            &first,
            &[Desired::no(
                kind::REGISTERED,
                reason::POD_NOT_CREATED,
                "other words",
            )],
            Some(2),
            at(60),
        );
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].last_transition_time, first[0].last_transition_time);
        assert_eq!(later[0].reason, "PodNotCreated");
        assert_eq!(later[0].message, "other words");
        assert_eq!(later[0].observed_generation, Some(2));
    }

    #[test]
    fn a_status_change_moves_the_transition_time() {
        let first = merge(
            &[],
            &[Desired::no(
                kind::REGISTERED,
                reason::REGISTRATION_PENDING,
                "",
            )],
            None,
            at(0),
        );
        let later = merge(
            &first,
            &[Desired::yes(
                kind::REGISTERED,
                reason::RUNNER_REGISTERED,
                "",
            )],
            None,
            at(60),
        );
        assert_eq!(later[0].status, "True");
        assert_ne!(later[0].last_transition_time, first[0].last_transition_time);
    }

    #[test]
    fn other_types_are_kept_and_new_ones_appended() {
        let first = merge(
            &[],
            &[Desired::yes(
                kind::CREDENTIALS_VALID,
                reason::CREDENTIALS_ACCEPTED,
                "",
            )],
            None,
            at(0),
        );
        let later = merge(
            &first,
            &[Desired::no(kind::READY, reason::RUNNER_NOT_READY, "")],
            None,
            at(1),
        );
        let types: Vec<&str> = later.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["CredentialsValid", "Ready"]);
        assert!(find(Some(&later), kind::READY).is_some());
    }
}
