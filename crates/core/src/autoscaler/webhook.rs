//! Webhook rules: which `workflow_job` deliveries change capacity, and which autoscaler they
//! change.
//!
//! - [`workflow_job_operation`]: `queued` reserves a runner; `completed` releases one unless
//!   the job was `skipped` or succeeded with a `null` runner id (check-run style completions
//!   that never had a matching `queued`, ARC #2118/#2520); `in_progress`, `waiting` and any
//!   other action change nothing.
//! - [`job_trigger_duration`]: only autoscalers with exactly one scale-up trigger, a
//!   `workflowJob` one, take part; it gives the reservation lifetime.
//! - [`select_target`]: the autoscaler a job scales. Scopes are tried from the most specific:
//!   repository runners, then (unless the repository belongs to a user, whose jobs only
//!   repository runners can take) the organization's default-group runners, its runner groups
//!   visible to the repository, the enterprise's default-group runners, and its visible groups.
//!   Within a tier the first candidate whose labels match wins, so callers pass candidates in a
//!   stable order (e.g. by namespace and name). Owner, repository, organization, enterprise and
//!   group names compare ignoring ASCII case, as GitHub does (ARC compares them exactly, so a
//!   manifest spelling `MyOrg` as `myorg` never matched).

use std::time::Duration;

use crate::scope::RunnerScope;

use super::labels::job_labels_match;
use super::reservations::{DEFAULT_RESERVATION_DURATION, ScaleOp};

/// Why a `workflow_job` delivery changes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IgnoreReason {
    /// `completed` with conclusion `skipped`: the job never queued.
    Skipped,
    /// `completed` with conclusion `success` and no runner: the job never needed one.
    CompletedWithoutRunner,
    /// An action that says nothing about capacity (`in_progress`, `waiting`, ...).
    OtherAction(String),
}

/// What a `workflow_job` delivery does to capacity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobOutcome {
    /// Apply this operation to the matching autoscaler.
    Scale(ScaleOp),
    /// Change nothing.
    Ignore(IgnoreReason),
}

/// The operation for a `workflow_job` delivery with `action`, `workflow_job.conclusion` and
/// `workflow_job.runner_id` (`None` when the payload has `null`).
pub fn workflow_job_operation(
    action: &str,
    conclusion: Option<&str>,
    runner_id: Option<u64>,
) -> JobOutcome {
    match action {
        "queued" => JobOutcome::Scale(ScaleOp::Up),
        "completed" => match conclusion {
            Some("skipped") => JobOutcome::Ignore(IgnoreReason::Skipped),
            Some("success") if runner_id.is_none() => {
                JobOutcome::Ignore(IgnoreReason::CompletedWithoutRunner)
            }
            // Failures and cancellations release capacity too, including a job cancelled
            // before it got a runner: its `queued` did reserve one.
            _ => JobOutcome::Scale(ScaleOp::Down),
        },
        other => JobOutcome::Ignore(IgnoreReason::OtherAction(other.to_owned())),
    }
}

/// One `spec.scaleUpTriggers` entry, as far as eligibility goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TriggerView {
    /// `githubEvent.workflowJob` is set.
    pub workflow_job: bool,
    /// The parsed `duration`, if set.
    pub duration: Option<Duration>,
}

/// Why an autoscaler does not take part in `workflow_job` scaling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TriggerError {
    /// No scale-up trigger.
    #[error("no scaleUpTriggers: add one with githubEvent.workflowJob to scale on webhooks")]
    NoTrigger,
    /// Several triggers; ARC requires exactly one for `workflow_job` scaling.
    #[error("{0} scaleUpTriggers, but workflow_job scaling needs exactly one")]
    TooManyTriggers(usize),
    /// The trigger is for another event.
    #[error("the scaleUpTrigger has no githubEvent.workflowJob (other events are ignored)")]
    NotWorkflowJob,
}

/// The reservation lifetime of an autoscaler that takes part in `workflow_job` scaling: its
/// single trigger's `duration`, or [`DEFAULT_RESERVATION_DURATION`] when unset or zero.
pub fn job_trigger_duration(triggers: &[TriggerView]) -> Result<Duration, TriggerError> {
    match triggers {
        [] => Err(TriggerError::NoTrigger),
        [trigger] if !trigger.workflow_job => Err(TriggerError::NotWorkflowJob),
        [trigger] => Ok(trigger
            .duration
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_RESERVATION_DURATION)),
        more => Err(TriggerError::TooManyTriggers(more.len())),
    }
}

/// Where a job comes from, from the delivery's `repository` and `enterprise` objects.
#[derive(Clone, Copy, Debug)]
pub struct JobOrigin<'a> {
    /// `repository.owner.login`.
    pub owner: &'a str,
    /// `repository.name`.
    pub repository: &'a str,
    /// `repository.owner.type` is `User`.
    pub owner_is_user: bool,
    /// `enterprise.slug`, when the delivery has one.
    pub enterprise: Option<&'a str>,
}

/// An autoscaler that may take the job: its target's scope, runner group and labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetCandidate<T> {
    /// Caller's handle (e.g. the HRA's namespace and name).
    pub id: T,
    /// Where the target's runners register.
    pub scope: RunnerScope,
    /// The target's runner group (`group` in the runner template; empty counts as none);
    /// ignored for repository runners, which have no groups.
    pub group: Option<String>,
    /// The target's runner labels.
    pub labels: Vec<String>,
}

impl<T> TargetCandidate<T> {
    /// The runner group, `None` for the default group.
    fn runner_group(&self) -> Option<&str> {
        self.group.as_deref().filter(|g| !g.is_empty())
    }
}

/// Which kind of owner a runner group belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupOwner {
    /// An organization's runner group.
    Organization,
    /// An enterprise's runner group (visible to organizations it is shared with).
    Enterprise,
}

/// A runner group whose visibility to the job's repository is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupRef<'a> {
    /// Organization or enterprise group.
    pub owner_kind: GroupOwner,
    /// The organization login or enterprise slug.
    pub owner: &'a str,
    /// The group name.
    pub name: &'a str,
}

/// The tier a target was selected in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatchTier {
    /// Repository runners.
    Repository,
    /// Organization runners outside any group.
    Organization,
    /// Organization runners in this group.
    OrganizationGroup(String),
    /// Enterprise runners outside any group.
    Enterprise,
    /// Enterprise runners in this group.
    EnterpriseGroup(String),
}

/// The autoscaler a job with `job_labels` from `origin` scales, and the tier it matched in.
///
/// `group_visible` answers whether a runner group may run the repository's jobs; it is asked
/// only about groups of candidates whose scope and labels match. A caller without GitHub
/// credentials to check passes `|_| true`, which is what ARC assumes then.
pub fn select_target<'c, T>(
    origin: &JobOrigin<'_>,
    job_labels: &[String],
    candidates: &'c [TargetCandidate<T>],
    mut group_visible: impl FnMut(&GroupRef<'_>) -> bool,
) -> Option<(&'c TargetCandidate<T>, MatchTier)> {
    let labels_ok = |c: &TargetCandidate<T>| job_labels_match(job_labels, &c.labels);

    let repository = candidates.iter().find(|c| {
        matches!(&c.scope, RunnerScope::Repository { owner, name }
            if owner.eq_ignore_ascii_case(origin.owner)
                && name.eq_ignore_ascii_case(origin.repository))
            && labels_ok(c)
    });
    if let Some(c) = repository {
        return Some((c, MatchTier::Repository));
    }
    if origin.owner_is_user {
        // Only repository runners can take a user repository's jobs.
        return None;
    }

    let tiers = [
        (GroupOwner::Organization, Some(origin.owner)),
        (GroupOwner::Enterprise, origin.enterprise),
    ];
    for (owner_kind, owner) in tiers {
        let Some(owner) = owner else {
            continue;
        };
        let in_scope = |c: &TargetCandidate<T>| match (&c.scope, owner_kind) {
            (RunnerScope::Organization(org), GroupOwner::Organization) => {
                org.eq_ignore_ascii_case(owner)
            }
            (RunnerScope::Enterprise(ent), GroupOwner::Enterprise) => {
                ent.eq_ignore_ascii_case(owner)
            }
            _ => false,
        };
        // Default group first: it needs no visibility check (and no API call).
        if let Some(c) = candidates
            .iter()
            .find(|c| in_scope(c) && c.runner_group().is_none() && labels_ok(c))
        {
            let tier = match owner_kind {
                GroupOwner::Organization => MatchTier::Organization,
                GroupOwner::Enterprise => MatchTier::Enterprise,
            };
            return Some((c, tier));
        }
        for c in candidates.iter().filter(|c| in_scope(c) && labels_ok(c)) {
            let Some(group) = c.runner_group() else {
                continue;
            };
            let group_ref = GroupRef {
                owner_kind,
                owner,
                name: group,
            };
            if group_visible(&group_ref) {
                let tier = match owner_kind {
                    GroupOwner::Organization => MatchTier::OrganizationGroup(group.to_owned()),
                    GroupOwner::Enterprise => MatchTier::EnterpriseGroup(group.to_owned()),
                };
                return Some((c, tier));
            }
        }
    }
    None
}
