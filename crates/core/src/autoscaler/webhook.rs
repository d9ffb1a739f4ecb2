//! Webhook rules: which deliveries change capacity, and which autoscaler they change.
//!
//! - [`workflow_job_operation`]: `queued` reserves a runner; `completed` releases one unless
//!   the job was `skipped` or succeeded with a `null` runner id (check-run style completions
//!   that never had a matching `queued`, ARC #2118/#2520); `in_progress`, `waiting` and any
//!   other action change nothing.
//! - [`job_trigger_duration`]: autoscalers with a `workflowJob` trigger take part in
//!   `workflow_job` scaling; that trigger gives the reservation lifetime.
//! - [`event_grant`]: the legacy `check_run`, `pull_request` and `push` triggers (seed 004): a
//!   matching event reserves the trigger's `amount` runners (default 1) for its `duration`
//!   (default 10 minutes) — slack for jobs about to be queued, which expires rather than being
//!   released by a completion. `checkRun` filters on `types` (actions), `status`, `names`
//!   (globs) and `repositories`; `pullRequest` on `types` and `branches` (the base branch);
//!   `push` on nothing. Several entries on one autoscaler all work; the first that matches
//!   gives the amount and duration.
//! - [`trigger_problems`]: entries that can never match, for the autoscaler's status.
//! - [`select_target`]: the autoscaler a delivery scales. Scopes are tried from the most
//!   specific: repository runners, then (unless the repository belongs to a user, whose jobs
//!   only repository runners can take) the organization's default-group runners, its runner
//!   groups visible to the repository, the enterprise's default-group runners, and its visible
//!   groups. A job goes to the first autoscaler whose labels match in the first tier that has
//!   one, so callers pass candidates in a stable order (e.g. by namespace and name); a legacy
//!   event needs exactly one matching autoscaler in a tier and moves on to the next tier
//!   otherwise, as the seed says. Either way, every tier where several fit is reported, so the
//!   driver can say so instead of choosing silently. Owner, repository, organization,
//!   enterprise and group names compare ignoring ASCII case, as GitHub does (ARC compares them
//!   exactly, so a manifest spelling `MyOrg` as `myorg` never matched).
//!
//! Departures from ARC (before v0.27, which last honoured the legacy triggers), on purpose:
//! - `checkRun.names` and `checkRun.repositories` must both match when both are set; ARC
//!   ignored `repositories` whenever `names` was set.
//! - An autoscaler with two matching entries counts once; in ARC it made its own match
//!   ambiguous and nothing scaled.
//! - An HRA may combine a `workflowJob` trigger with others; ARC ≥ 0.27 required exactly one
//!   trigger, a `workflowJob` one, and silently skipped any other autoscaler.

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

/// A `checkRun` trigger's conditions; an empty list or `None` allows anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckRunFilter {
    /// `types`: the `check_run` actions (`created`, `completed`, ...).
    pub types: Vec<String>,
    /// `status`: the check run's status (`queued`, `in_progress`, `completed`).
    pub status: Option<String>,
    /// `names`: glob patterns of check run (job) names; `*` is any text, a leading `!`
    /// negates the pattern. Any pattern matching is enough.
    pub names: Vec<String>,
    /// `repositories`: repository names (`app` or `owner/app`).
    pub repositories: Vec<String>,
}

/// A `pullRequest` trigger's conditions; an empty list allows anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PullRequestFilter {
    /// `types`: the `pull_request` actions (`opened`, `synchronize`, ...).
    pub types: Vec<String>,
    /// `branches`: base branch names (`main`, not `refs/heads/main`).
    pub branches: Vec<String>,
}

/// One `spec.scaleUpTriggers` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TriggerView {
    /// `githubEvent.workflowJob` is set.
    pub workflow_job: bool,
    /// `githubEvent.checkRun`, if set.
    pub check_run: Option<CheckRunFilter>,
    /// `githubEvent.pullRequest`, if set.
    pub pull_request: Option<PullRequestFilter>,
    /// `githubEvent.push` is set.
    pub push: bool,
    /// `amount` as written.
    pub amount: Option<i32>,
    /// The parsed `duration`, if set.
    pub duration: Option<Duration>,
}

impl TriggerView {
    /// A `workflowJob` trigger with `duration`.
    pub fn workflow_job(duration: Option<Duration>) -> Self {
        TriggerView {
            workflow_job: true,
            duration,
            ..TriggerView::default()
        }
    }

    /// How long its reservations last: `duration`, or [`DEFAULT_RESERVATION_DURATION`] when
    /// unset or zero.
    pub fn lifetime(&self) -> Duration {
        self.duration
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_RESERVATION_DURATION)
    }

    /// Runners one matching legacy event reserves: `amount`, or 1 when unset or not positive
    /// (Go's zero value meant "unset" in ARC).
    pub fn replicas(&self) -> u32 {
        self.amount
            .and_then(|a| u32::try_from(a).ok())
            .filter(|a| *a > 0)
            .unwrap_or(1)
    }

    fn names_an_event(&self) -> bool {
        self.workflow_job || self.check_run.is_some() || self.pull_request.is_some() || self.push
    }

    /// Whether this trigger reacts to `event` from repository `repository` (`owner/name`).
    fn matches(&self, event: &RepoEvent<'_>, owner: &str, repository: &str) -> bool {
        match event {
            RepoEvent::CheckRun {
                action,
                status,
                name,
            } => self.check_run.as_ref().is_some_and(|f| {
                allowed(&f.types, action)
                    && f.status
                        .as_deref()
                        .is_none_or(|s| s.is_empty() || s == *status)
                    && (f.names.is_empty() || f.names.iter().any(|p| glob_match(p, name)))
                    && (f.repositories.is_empty()
                        || f.repositories
                            .iter()
                            .any(|r| names_repository(r, owner, repository)))
            }),
            RepoEvent::PullRequest {
                action,
                base_branch,
            } => self
                .pull_request
                .as_ref()
                .is_some_and(|f| allowed(&f.types, action) && allowed(&f.branches, base_branch)),
            RepoEvent::Push => self.push,
        }
    }
}

/// Whether `value` is one of `allowed`, or `allowed` is empty.
fn allowed(allowed: &[String], value: &str) -> bool {
    allowed.is_empty() || allowed.iter().any(|a| a == value)
}

/// Whether `written` (a trigger's `repositories` entry: `name` or `owner/name`) is the
/// repository `owner/name`, ignoring ASCII case as GitHub does.
fn names_repository(written: &str, owner: &str, name: &str) -> bool {
    match written.split_once('/') {
        Some((o, n)) => o.eq_ignore_ascii_case(owner) && n.eq_ignore_ascii_case(name),
        None => written.eq_ignore_ascii_case(name),
    }
}

/// Whether `text` matches glob `pattern`: `*` stands for any text (also none), a leading `!`
/// negates the pattern, everything else is literal. An empty pattern matches nothing.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    if let Some(negated) = pattern.strip_prefix('!') {
        return !negated.is_empty() && !glob_match(negated, text);
    }
    if pattern.is_empty() {
        return false;
    }
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let middle: Vec<&str> = parts.collect();
    let Some((last, middle)) = middle.split_last() else {
        return rest.is_empty(); // no `*` at all: the text is the literal
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The reservation lifetime of an autoscaler that takes part in `workflow_job` scaling (its
/// first `workflowJob` trigger's [`TriggerView::lifetime`]); `None` when no trigger names
/// `workflowJob`. Other triggers beside it take part in their own events.
pub fn job_trigger_duration(triggers: &[TriggerView]) -> Option<Duration> {
    triggers
        .iter()
        .find(|t| t.workflow_job)
        .map(TriggerView::lifetime)
}

/// A repository event the legacy triggers react to, with the fields they filter on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepoEvent<'a> {
    /// `check_run`: `action`, `check_run.status` and `check_run.name`.
    CheckRun {
        /// The delivery's `action`.
        action: &'a str,
        /// `check_run.status`.
        status: &'a str,
        /// `check_run.name` (an Actions job's name).
        name: &'a str,
    },
    /// `pull_request`: `action` and `pull_request.base.ref`.
    PullRequest {
        /// The delivery's `action`.
        action: &'a str,
        /// `pull_request.base.ref`, a branch name.
        base_branch: &'a str,
    },
    /// `push`: every push matches a `push` trigger.
    Push,
}

impl RepoEvent<'_> {
    /// The trigger field that reacts to it, as written in a manifest.
    pub fn trigger_field(&self) -> &'static str {
        match self {
            RepoEvent::CheckRun { .. } => "checkRun",
            RepoEvent::PullRequest { .. } => "pullRequest",
            RepoEvent::Push => "push",
        }
    }
}

/// What a legacy event does to the autoscaler whose trigger matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventGrant {
    /// Index of the matching entry in `spec.scaleUpTriggers` (the first that matches).
    pub trigger: usize,
    /// Runners reserved ([`TriggerView::replicas`]).
    pub replicas: u32,
    /// For how long ([`TriggerView::lifetime`]).
    pub duration: Duration,
}

/// The reservation `event` from `owner/repository` earns from `triggers`: the first matching
/// entry's amount and duration; `None` when no entry matches. An autoscaler counts once
/// however many of its entries match (ARC counted each matching entry as another target, so
/// two matching entries made their own autoscaler ambiguous).
pub fn event_grant(
    triggers: &[TriggerView],
    event: &RepoEvent<'_>,
    owner: &str,
    repository: &str,
) -> Option<EventGrant> {
    triggers
        .iter()
        .position(|t| t.matches(event, owner, repository))
        .map(|i| EventGrant {
            trigger: i,
            replicas: triggers[i].replicas(),
            duration: triggers[i].lifetime(),
        })
}

/// `check_run` actions GitHub sends.
const CHECK_RUN_ACTIONS: [&str; 4] = ["created", "completed", "rerequested", "requested_action"];
/// Statuses a check run can have in a `check_run` delivery.
const CHECK_RUN_STATUSES: [&str; 6] = [
    "queued",
    "in_progress",
    "completed",
    "waiting",
    "requested",
    "pending",
];
/// `pull_request` actions GitHub sends.
const PULL_REQUEST_ACTIONS: [&str; 21] = [
    "assigned",
    "auto_merge_disabled",
    "auto_merge_enabled",
    "closed",
    "converted_to_draft",
    "demilestoned",
    "dequeued",
    "edited",
    "enqueued",
    "labeled",
    "locked",
    "milestoned",
    "opened",
    "ready_for_review",
    "reopened",
    "review_request_removed",
    "review_requested",
    "synchronize",
    "unassigned",
    "unlabeled",
    "unlocked",
];

/// A scale-up trigger entry that can never match, or a part of one that never does.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TriggerProblem {
    /// The entry names no event.
    #[error(
        "scaleUpTriggers[{index}] names no githubEvent (workflowJob, checkRun, pullRequest or \
         push): it never scales anything"
    )]
    NoEvent {
        /// Position in `spec.scaleUpTriggers`.
        index: usize,
    },
    /// A `types` entry GitHub never sends for the event.
    #[error(
        "scaleUpTriggers[{index}].githubEvent.{field}.types has {action:?}, which GitHub never \
         sends (it sends {known})"
    )]
    UnknownAction {
        /// Position in `spec.scaleUpTriggers`.
        index: usize,
        /// `checkRun` or `pullRequest`.
        field: &'static str,
        /// The unknown action.
        action: String,
        /// The actions GitHub sends, comma-separated.
        known: String,
    },
    /// A `checkRun.status` no check run has.
    #[error(
        "scaleUpTriggers[{index}].githubEvent.checkRun.status is {status:?}, which no check run \
         has (they are {known})"
    )]
    UnknownStatus {
        /// Position in `spec.scaleUpTriggers`.
        index: usize,
        /// The status written.
        status: String,
        /// The statuses that exist, comma-separated.
        known: String,
    },
    /// An empty `checkRun.names` pattern, which matches no name.
    #[error("scaleUpTriggers[{index}].githubEvent.checkRun.names has an empty pattern")]
    EmptyName {
        /// Position in `spec.scaleUpTriggers`.
        index: usize,
    },
}

/// What in `triggers` can never match a delivery, entry by entry, for the autoscaler's status.
/// An autoscaler without triggers has no problem: it scales on its metrics.
pub fn trigger_problems(triggers: &[TriggerView]) -> Vec<TriggerProblem> {
    let mut problems = Vec::new();
    for (index, t) in triggers.iter().enumerate() {
        if !t.names_an_event() {
            problems.push(TriggerProblem::NoEvent { index });
            continue;
        }
        let mut unknown = |field: &'static str, types: &[String], known: &[&str]| {
            for action in types.iter().filter(|a| !known.contains(&a.as_str())) {
                problems.push(TriggerProblem::UnknownAction {
                    index,
                    field,
                    action: action.clone(),
                    known: known.join(", "),
                });
            }
        };
        if let Some(f) = &t.check_run {
            unknown("checkRun", &f.types, &CHECK_RUN_ACTIONS);
        }
        if let Some(f) = &t.pull_request {
            unknown("pullRequest", &f.types, &PULL_REQUEST_ACTIONS);
        }
        if let Some(f) = &t.check_run {
            if let Some(status) = f
                .status
                .as_deref()
                .filter(|s| !s.is_empty() && !CHECK_RUN_STATUSES.contains(s))
            {
                problems.push(TriggerProblem::UnknownStatus {
                    index,
                    status: status.to_owned(),
                    known: CHECK_RUN_STATUSES.join(", "),
                });
            }
            if f.names.iter().any(String::is_empty) {
                problems.push(TriggerProblem::EmptyName { index });
            }
        }
    }
    problems
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
    /// The autoscaler's `spec.scaleUpTriggers`.
    pub triggers: Vec<TriggerView>,
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

/// What a delivery asks capacity for.
#[derive(Clone, Copy, Debug)]
pub enum Demand<'a> {
    /// A `workflow_job` with these labels: autoscalers with a `workflowJob` trigger whose
    /// runners have the labels can take it.
    Job(&'a [String]),
    /// A legacy event: autoscalers with a trigger matching it.
    Event(&'a RepoEvent<'a>),
}

/// Several autoscalers that fit a delivery in the same tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ambiguity<'c, T> {
    /// The tier.
    pub tier: MatchTier,
    /// The autoscalers that fit there, in the callers' order.
    pub candidates: Vec<&'c TargetCandidate<T>>,
}

/// The autoscaler a delivery scales, and every tier where it was ambiguous.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection<'c, T> {
    /// The autoscaler chosen and the tier it was chosen in.
    pub target: Option<(&'c TargetCandidate<T>, MatchTier)>,
    /// For [`Demand::Event`]: the chosen autoscaler's reservation.
    pub grant: Option<EventGrant>,
    /// Tiers (tried before or at the target's) where several autoscalers fit.
    pub ambiguous: Vec<Ambiguity<'c, T>>,
}

/// The autoscaler `demand` from `origin` scales.
///
/// Tiers are tried from the most specific: the repository's runners; then, unless the
/// repository belongs to a user, the organization's default group, each of its runner groups
/// visible to the repository, the enterprise's default group and each of its visible groups.
/// - A job goes to the first fitting autoscaler in the first tier that has one, in the callers'
///   order (as in ARC); other fitting autoscalers of that tier are reported in
///   [`Selection::ambiguous`].
/// - A legacy event needs exactly one fitting autoscaler in a tier, as seed 004 describes: a
///   tier with several is reported and skipped, and the search goes on to the next tier.
///
/// `group_visible` answers whether a runner group may run the repository's jobs; it is asked
/// only about groups of candidates that fit, at most once per group. A caller without GitHub
/// credentials to check passes `|_| true`, which is what ARC assumes then.
pub fn select_target<'c, T>(
    origin: &JobOrigin<'_>,
    demand: Demand<'_>,
    candidates: &'c [TargetCandidate<T>],
    mut group_visible: impl FnMut(&GroupRef<'_>) -> bool,
) -> Selection<'c, T> {
    let fits = |c: &TargetCandidate<T>| match demand {
        Demand::Job(labels) => {
            c.triggers.iter().any(|t| t.workflow_job) && job_labels_match(labels, &c.labels)
        }
        Demand::Event(event) => {
            event_grant(&c.triggers, event, origin.owner, origin.repository).is_some()
        }
    };
    let unique = matches!(demand, Demand::Event(_));
    let mut selection = Selection {
        target: None,
        grant: None,
        ambiguous: Vec::new(),
    };
    // Decides one tier; true when the search ends there.
    let mut decide = |tier: MatchTier, fitting: Vec<&'c TargetCandidate<T>>| -> bool {
        let chosen = match fitting.as_slice() {
            [] => return false,
            [only] => Some(*only),
            [first, ..] => {
                let first = *first;
                selection.ambiguous.push(Ambiguity {
                    tier: tier.clone(),
                    candidates: fitting,
                });
                (!unique).then_some(first)
            }
        };
        let Some(chosen) = chosen else {
            return false;
        };
        if let Demand::Event(event) = demand {
            selection.grant = event_grant(&chosen.triggers, event, origin.owner, origin.repository);
        }
        selection.target = Some((chosen, tier));
        true
    };

    let repository: Vec<_> = candidates
        .iter()
        .filter(|c| {
            matches!(&c.scope, RunnerScope::Repository { owner, name }
                if owner.eq_ignore_ascii_case(origin.owner)
                    && name.eq_ignore_ascii_case(origin.repository))
                && fits(c)
        })
        .collect();
    if decide(MatchTier::Repository, repository) || origin.owner_is_user {
        // Only repository runners can take a user repository's jobs.
        return selection;
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
        let fitting: Vec<_> = candidates
            .iter()
            .filter(|c| in_scope(c) && fits(c))
            .collect();
        // Default group first: it needs no visibility check (and no API call).
        let default_tier = match owner_kind {
            GroupOwner::Organization => MatchTier::Organization,
            GroupOwner::Enterprise => MatchTier::Enterprise,
        };
        let default: Vec<_> = fitting
            .iter()
            .copied()
            .filter(|c| c.runner_group().is_none())
            .collect();
        if decide(default_tier, default) {
            return selection;
        }
        let mut groups: Vec<&str> = Vec::new();
        for group in fitting.iter().filter_map(|c| c.runner_group()) {
            if !groups.iter().any(|g| g.eq_ignore_ascii_case(group)) {
                groups.push(group);
            }
        }
        for group in groups {
            let group_ref = GroupRef {
                owner_kind,
                owner,
                name: group,
            };
            if !group_visible(&group_ref) {
                continue;
            }
            let tier = match owner_kind {
                GroupOwner::Organization => MatchTier::OrganizationGroup(group.to_owned()),
                GroupOwner::Enterprise => MatchTier::EnterpriseGroup(group.to_owned()),
            };
            let members: Vec<_> = fitting
                .iter()
                .copied()
                .filter(|c| {
                    c.runner_group()
                        .is_some_and(|g| g.eq_ignore_ascii_case(group))
                })
                .collect();
            if decide(tier, members) {
                return selection;
            }
        }
    }
    selection
}
