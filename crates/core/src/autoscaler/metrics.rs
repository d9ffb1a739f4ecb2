//! Pull metrics: how many runners GitHub's state suggests.
//!
//! Two metrics exist, spelt as in ARC:
//! - **`PercentageRunnersBusy`** looks at the share of the target's runners that are busy and
//!   grows or shrinks the target's current replica count when it crosses a threshold. The share
//!   is taken over the runners that can take a job: unhealthy ones ([`crate::health`]) are no
//!   capacity (ARC counts them, and a pool of broken pods looks idle and never grows).
//! - **`TotalNumberOfQueuedAndInProgressWorkflowRuns`** counts the queued and in-progress jobs
//!   the runners could take (by labels, see [`super::labels`]) in the target's repository, or in
//!   the listed `repositoryNames` of an organization.
//!
//! An autoscaler lists zero, one or two metrics. Two are only allowed as
//! `[PercentageRunnersBusy, TotalNumberOfQueuedAndInProgressWorkflowRuns]`: the second is
//! consulted only when the first suggests zero runners.
//!
//! Evaluation is a small protocol so that the GitHub calls stay outside and only the calls a
//! decision needs are made: [`suggest_replicas`] either answers or says which observation it
//! needs ([`Evaluation::Needs`]); the driver fetches that, adds it to [`Observations`] and calls
//! again. Jobs are asked for one run at a time, and counting stops once the matching jobs
//! reach `maxReplicas`: a larger count cannot change the decision, and listing every run's
//! jobs each sync is what spends an API budget when many runs wait. A metric that suggests zero counts as no suggestion, so the autoscaler falls back to
//! `minReplicas` — except the fallback metric's answer, which ARC uses as is, zero included;
//! Hangar does the same so replica counts match ARC's.

use std::collections::HashSet;
use std::fmt::{self, Write as _};

use crate::scope::RunnerScope;

use super::labels::job_labels_match;

/// ARC's default `scaleUpThreshold`: scale up when at least 80% of the runners are busy.
pub const DEFAULT_SCALE_UP_THRESHOLD: f64 = 0.8;
/// ARC's default `scaleDownThreshold`: scale down when fewer than 30% are busy.
pub const DEFAULT_SCALE_DOWN_THRESHOLD: f64 = 0.3;
/// ARC's default `scaleUpFactor`.
pub const DEFAULT_SCALE_UP_FACTOR: f64 = 1.3;
/// ARC's default `scaleDownFactor`.
pub const DEFAULT_SCALE_DOWN_FACTOR: f64 = 0.7;

/// Replica count assumed when the target leaves `replicas` unset (Kubernetes' default of one).
pub const DEFAULT_TARGET_REPLICAS: u32 = 1;

/// Products this close to an integer are taken as that integer before rounding, so that
/// `100 × 1.1` scales to 110 and not 111 (binary floating point makes it 110.00000000000001).
const ROUNDING_TOLERANCE: f64 = 1e-9;

/// The two metric types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricKind {
    /// Jobs the runners could take, queued or running.
    TotalNumberOfQueuedAndInProgressWorkflowRuns,
    /// Share of busy runners.
    PercentageRunnersBusy,
}

impl fmt::Display for MetricKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns => {
                "TotalNumberOfQueuedAndInProgressWorkflowRuns"
            }
            MetricKind::PercentageRunnersBusy => "PercentageRunnersBusy",
        })
    }
}

/// One entry of `spec.metrics`, with numbers already parsed (see [`parse_decimal`]).
///
/// As in ARC, a zero adjustment means "unset".
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    /// The metric type.
    pub kind: MetricKind,
    /// Repository names (without owner) for organization runners'
    /// `TotalNumberOfQueuedAndInProgressWorkflowRuns`.
    pub repository_names: Vec<String>,
    /// Busy share at or above which to scale up.
    pub scale_up_threshold: Option<f64>,
    /// Busy share below which to scale down.
    pub scale_down_threshold: Option<f64>,
    /// Multiplier on scale-up (result rounded up).
    pub scale_up_factor: Option<f64>,
    /// Multiplier on scale-down (result rounded down).
    pub scale_down_factor: Option<f64>,
    /// Runners added on scale-up.
    pub scale_up_adjustment: Option<i32>,
    /// Runners removed on scale-down.
    pub scale_down_adjustment: Option<i32>,
}

impl Metric {
    /// A metric of `kind` with every setting at its default.
    pub fn new(kind: MetricKind) -> Self {
        Metric {
            kind,
            repository_names: Vec::new(),
            scale_up_threshold: None,
            scale_down_threshold: None,
            scale_up_factor: None,
            scale_down_factor: None,
            scale_up_adjustment: None,
            scale_down_adjustment: None,
        }
    }
}

/// Names of the numeric metric settings, as spelt in the manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricField {
    /// `scaleUpThreshold`.
    ScaleUpThreshold,
    /// `scaleDownThreshold`.
    ScaleDownThreshold,
    /// `scaleUpFactor`.
    ScaleUpFactor,
    /// `scaleDownFactor`.
    ScaleDownFactor,
    /// `scaleUpAdjustment`.
    ScaleUpAdjustment,
    /// `scaleDownAdjustment`.
    ScaleDownAdjustment,
}

impl fmt::Display for MetricField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MetricField::ScaleUpThreshold => "scaleUpThreshold",
            MetricField::ScaleDownThreshold => "scaleDownThreshold",
            MetricField::ScaleUpFactor => "scaleUpFactor",
            MetricField::ScaleDownFactor => "scaleDownFactor",
            MetricField::ScaleUpAdjustment => "scaleUpAdjustment",
            MetricField::ScaleDownAdjustment => "scaleDownAdjustment",
        })
    }
}

/// Scale up or down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// More runners.
    Up,
    /// Fewer runners.
    Down,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Up => "Up",
            Direction::Down => "Down",
        })
    }
}

/// Why the metrics cannot be evaluated. Each message names the field to fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetricError {
    /// A threshold or factor is not a non-negative decimal number.
    #[error("metrics[].{field}: {value:?} is not a non-negative decimal number such as \"0.75\"")]
    InvalidDecimal {
        /// Which setting.
        field: MetricField,
        /// The text found.
        value: String,
    },
    /// An adjustment is negative.
    #[error("metrics[].{field}: {value} is negative; give the number of runners to add or remove")]
    NegativeAdjustment {
        /// Which setting.
        field: MetricField,
        /// The value found.
        value: i32,
    },
    /// Both a factor and a non-zero adjustment are set for one direction.
    #[error(
        "metrics[]: scale{direction}Factor and scale{direction}Adjustment are mutually \
         exclusive: set only one of them"
    )]
    FactorAndAdjustment {
        /// The direction concerned.
        direction: Direction,
    },
    /// More than two metrics.
    #[error("metrics: {0} entries, but at most 2 are allowed")]
    TooManyMetrics(usize),
    /// Two metrics in an order other than the one allowed.
    #[error(
        "metrics: [{first}, {second}] cannot be combined: with two metrics, the first must be \
         PercentageRunnersBusy and the second TotalNumberOfQueuedAndInProgressWorkflowRuns"
    )]
    InvalidCombination {
        /// Type of `metrics[0]`.
        first: MetricKind,
        /// Type of `metrics[1]`.
        second: MetricKind,
    },
    /// Organization runners need the repositories whose runs to count.
    #[error(
        "metrics[].repositoryNames: TotalNumberOfQueuedAndInProgressWorkflowRuns for organization \
         {organization:?} needs at least one repository name"
    )]
    MissingRepositoryNames {
        /// The organization.
        organization: String,
    },
    /// A listed repository name is empty or contains `/`.
    #[error(
        "metrics[].repositoryNames: {0:?} must be a repository name without its owner, \
         e.g. \"my-repo\""
    )]
    MalformedRepositoryName(String),
    /// Enterprise runners have no repository list to count.
    #[error(
        "TotalNumberOfQueuedAndInProgressWorkflowRuns is not available for enterprise runners \
         ({enterprise:?}); use PercentageRunnersBusy or webhook scaling"
    )]
    EnterpriseScope {
        /// The enterprise.
        enterprise: String,
    },
}

/// Parses one of ARC's string-typed thresholds or factors. Empty or missing text means unset
/// (Go's zero value); otherwise it must be a finite, non-negative decimal number.
pub fn parse_decimal(field: MetricField, value: Option<&str>) -> Result<Option<f64>, MetricError> {
    let Some(text) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let invalid = || MetricError::InvalidDecimal {
        field,
        value: text.to_owned(),
    };
    // Rust's parser also accepts "inf" and "NaN"; neither is a usable ratio.
    let parsed: f64 = text.parse().map_err(|_| invalid())?;
    if parsed.is_finite() && parsed >= 0.0 {
        Ok(Some(parsed))
    } else {
        Err(invalid())
    }
}

/// How a threshold crossing changes the replica count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// Multiply (rounded up when scaling up, down when scaling down).
    Factor(f64),
    /// Add or remove this many.
    Adjustment(u32),
}

/// `PercentageRunnersBusy` settings with defaults applied and exclusivity checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BusyPolicy {
    /// Scale up at or above this busy share.
    pub scale_up_threshold: f64,
    /// Scale down below this busy share.
    pub scale_down_threshold: f64,
    /// How to scale up.
    pub up: Step,
    /// How to scale down.
    pub down: Step,
}

/// What [`BusyPolicy::suggest`] decided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BusySuggestion {
    /// Suggested replicas.
    pub replicas: u32,
    /// Busy share (busy / replicas before); infinite when runners are busy but none desired.
    pub fraction: f64,
    /// The direction, `None` when between the thresholds.
    pub direction: Option<Direction>,
}

impl BusyPolicy {
    /// Applies ARC's defaults and rejects a factor combined with a non-zero adjustment.
    pub fn from_metric(metric: &Metric) -> Result<Self, MetricError> {
        Ok(BusyPolicy {
            scale_up_threshold: metric
                .scale_up_threshold
                .unwrap_or(DEFAULT_SCALE_UP_THRESHOLD),
            scale_down_threshold: metric
                .scale_down_threshold
                .unwrap_or(DEFAULT_SCALE_DOWN_THRESHOLD),
            up: step(
                Direction::Up,
                metric.scale_up_factor,
                metric.scale_up_adjustment,
                DEFAULT_SCALE_UP_FACTOR,
            )?,
            down: step(
                Direction::Down,
                metric.scale_down_factor,
                metric.scale_down_adjustment,
                DEFAULT_SCALE_DOWN_FACTOR,
            )?,
        })
    }

    /// The replica count for `busy` busy runners out of `desired_before` desired, of which
    /// `capacity` can take a job ([`healthy_capacity`]; the busy share is taken over them).
    ///
    /// With no capacity the share is taken as 0 when nothing is busy (so zero stays zero) and
    /// as "everything busy" otherwise; since no factor can grow zero, a factor scale-up from
    /// zero asks for one runner. (ARC divides by zero here and stays at zero.)
    pub fn suggest(&self, desired_before: u32, capacity: u32, busy: u32) -> BusySuggestion {
        let fraction = match (busy, capacity) {
            (0, 0) => 0.0,
            (_, 0) => f64::INFINITY,
            (b, d) => f64::from(b) / f64::from(d),
        };
        let d = desired_before;
        let (replicas, direction) = if fraction >= self.scale_up_threshold {
            let up = match self.up {
                Step::Adjustment(n) => d.saturating_add(n),
                Step::Factor(_) if d == 0 => 1,
                Step::Factor(f) => to_replicas(snap(f64::from(d) * f).ceil()),
            };
            (up, Some(Direction::Up))
        } else if fraction < self.scale_down_threshold {
            let down = match self.down {
                Step::Adjustment(n) => d.saturating_sub(n),
                Step::Factor(f) => to_replicas(snap(f64::from(d) * f).floor()),
            };
            (down, Some(Direction::Down))
        } else {
            (d, None)
        };
        BusySuggestion {
            replicas,
            fraction,
            direction,
        }
    }
}

fn step(
    direction: Direction,
    factor: Option<f64>,
    adjustment: Option<i32>,
    default_factor: f64,
) -> Result<Step, MetricError> {
    let field = match direction {
        Direction::Up => MetricField::ScaleUpAdjustment,
        Direction::Down => MetricField::ScaleDownAdjustment,
    };
    match (factor, adjustment.filter(|a| *a != 0)) {
        (Some(_), Some(_)) => Err(MetricError::FactorAndAdjustment { direction }),
        (_, Some(a)) => u32::try_from(a)
            .map(Step::Adjustment)
            .map_err(|_| MetricError::NegativeAdjustment { field, value: a }),
        (f, None) => Ok(Step::Factor(f.unwrap_or(default_factor))),
    }
}

/// Rounds `x` to the nearest integer when it is within [`ROUNDING_TOLERANCE`] of it.
fn snap(x: f64) -> f64 {
    let nearest = x.round();
    if (x - nearest).abs() < ROUNDING_TOLERANCE {
        nearest
    } else {
        x
    }
}

fn to_replicas(x: f64) -> u32 {
    // `as` saturates at the bounds (and maps NaN to 0), which is what a replica count needs.
    x as u32
}

/// A runner as GitHub's list-runners API reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitHubRunner {
    /// Runner name (the pod name, for Hangar's runners).
    pub name: String,
    /// Running a job.
    pub busy: bool,
}

/// What `PercentageRunnersBusy` looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunnerObservation {
    /// Names of the target's runners (Runner resources or RunnerSet pods); GitHub's list covers
    /// the whole scope and is narrowed to these.
    pub target_runners: Vec<String>,
    /// Runners registered at the target's scope.
    pub github_runners: Vec<GitHubRunner>,
    /// Target pods annotated `actions-runner/unregistration-failure-message`: GitHub refused to
    /// unregister them because they run a job, so they are busy even if the list is stale or
    /// no longer shows them.
    pub failing_unregistration: Vec<String>,
    /// Target runners that are neither working nor on their way ([`crate::health`]): no
    /// capacity, so the busy share is taken over the others.
    pub unhealthy: Vec<String>,
}

/// The target's runners that can take a job: `desired_before` less its unhealthy runners
/// (never below the busy ones, which GitHub shows working whatever their pods look like).
pub fn healthy_capacity(observation: &RunnerObservation, desired_before: u32, busy: u32) -> u32 {
    let unhealthy: HashSet<&str> = observation
        .unhealthy
        .iter()
        .filter(|name| observation.target_runners.contains(name))
        .map(String::as_str)
        .collect();
    let unhealthy = u32::try_from(unhealthy.len()).unwrap_or(u32::MAX);
    desired_before
        .saturating_sub(unhealthy)
        .max(busy.min(desired_before))
}

/// Busy runners: the target's runners GitHub reports busy, plus pods whose unregistration
/// failed because they run a job, each runner counted once.
pub fn count_busy(observation: &RunnerObservation) -> u32 {
    let target: HashSet<&str> = observation
        .target_runners
        .iter()
        .map(String::as_str)
        .collect();
    let busy: HashSet<&str> = observation
        .github_runners
        .iter()
        .filter(|r| r.busy && target.contains(r.name.as_str()))
        .map(|r| r.name.as_str())
        .chain(
            observation
                .failing_unregistration
                .iter()
                .map(String::as_str),
        )
        .collect();
    u32::try_from(busy.len()).unwrap_or(u32::MAX)
}

/// A repository whose workflow runs to list.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RepositoryRef {
    /// Owner (user or organization).
    pub owner: String,
    /// Repository name.
    pub name: String,
}

/// Where `TotalNumberOfQueuedAndInProgressWorkflowRuns` looks: the repository of repository
/// runners (any `repositoryNames` are ignored, as in ARC), or each listed repository of an
/// organization. Enterprise runners are not supported (ARC fails on them too).
pub fn workflow_run_repositories(
    scope: &RunnerScope,
    metric: &Metric,
) -> Result<Vec<RepositoryRef>, MetricError> {
    match scope {
        RunnerScope::Repository { owner, name } => Ok(vec![RepositoryRef {
            owner: owner.clone(),
            name: name.clone(),
        }]),
        RunnerScope::Organization(org) => {
            if metric.repository_names.is_empty() {
                return Err(MetricError::MissingRepositoryNames {
                    organization: org.clone(),
                });
            }
            metric
                .repository_names
                .iter()
                .map(|name| {
                    if name.is_empty() || name.contains('/') {
                        Err(MetricError::MalformedRepositoryName(name.clone()))
                    } else {
                        Ok(RepositoryRef {
                            owner: org.clone(),
                            name: name.clone(),
                        })
                    }
                })
                .collect()
        }
        RunnerScope::Enterprise(enterprise) => Err(MetricError::EnterpriseScope {
            enterprise: enterprise.clone(),
        }),
    }
}

/// A workflow job's status as GitHub reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobStatus {
    /// Waiting for a runner.
    Queued,
    /// Running.
    InProgress,
    /// Finished.
    Completed,
    /// Anything else (`waiting` for an environment approval, `pending`, `requested`, ...):
    /// not demand for a runner yet.
    Other,
}

impl JobStatus {
    /// Maps GitHub's `status` string.
    pub fn from_github(status: &str) -> Self {
        match status {
            "queued" => JobStatus::Queued,
            "in_progress" => JobStatus::InProgress,
            "completed" => JobStatus::Completed,
            _ => JobStatus::Other,
        }
    }
}

/// A job of a workflow run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkflowJob {
    /// Its ID.
    pub id: u64,
    /// The attempt of its run it belongs to (1 unless re-run).
    pub run_attempt: u32,
    /// Its status.
    pub status: JobStatus,
    /// Its `runs-on` labels.
    pub labels: Vec<String>,
    /// When it was created.
    pub created_at: Option<std::time::SystemTime>,
}

/// A queued or in-progress workflow run, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRef {
    /// Its repository.
    pub repository: RepositoryRef,
    /// Its ID.
    pub id: u64,
    /// Its `updated_at` in the listing ([`super::job_lists`] reuses its jobs while it holds).
    pub updated_at: Option<std::time::SystemTime>,
    /// The list it was found in: [`JobStatus::Queued`] or [`JobStatus::InProgress`] (in
    /// progress when it moved from one to the other between the two list calls).
    pub status: JobStatus,
}

/// A queued or in-progress workflow run and its jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkflowRun {
    /// The run's jobs as listed by GitHub.
    pub jobs: Vec<WorkflowJob>,
}

/// What [`count_jobs`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobCounts {
    /// Queued jobs the runners could take.
    pub queued: u32,
    /// In-progress jobs the runners could take.
    pub in_progress: u32,
    /// Runs without jobs (not counted: nothing says they need these runners).
    pub runs_without_jobs: u32,
    /// Queued or in-progress jobs whose labels these runners lack (or that have none).
    pub unmatched: u32,
}

impl JobCounts {
    /// Queued plus in-progress matching jobs: the suggested replica count.
    pub fn total(&self) -> u32 {
        self.queued.saturating_add(self.in_progress)
    }
}

/// Counts the queued and in-progress jobs of `runs` that runners with `runner_labels` could take.
/// Jobs without any label are skipped, as in ARC (a job always has `runs-on`, so this means the
/// API returned something unexpected).
pub fn count_jobs(runs: &[WorkflowRun], runner_labels: &[String]) -> JobCounts {
    let mut counts = JobCounts::default();
    for run in runs {
        if run.jobs.is_empty() {
            counts.runs_without_jobs += 1;
        }
        for job in &run.jobs {
            let demand = matches!(job.status, JobStatus::Queued | JobStatus::InProgress);
            if !demand {
                continue;
            }
            if job.labels.is_empty() || !job_labels_match(&job.labels, runner_labels) {
                counts.unmatched += 1;
                continue;
            }
            match job.status {
                JobStatus::Queued => counts.queued += 1,
                _ => counts.in_progress += 1,
            }
        }
    }
    counts
}

/// The scale target as the metrics see it.
#[derive(Clone, Copy, Debug)]
pub struct MetricTarget<'a> {
    /// Where its runners register.
    pub scope: &'a RunnerScope,
    /// Its runner labels.
    pub runner_labels: &'a [String],
    /// Its current `spec.replicas` (`None` counts as [`DEFAULT_TARGET_REPLICAS`]).
    pub replicas: Option<u32>,
    /// The autoscaler's `maxReplicas`. Jobs are counted up to [`counting_limit`] of it, and
    /// no further run's jobs are listed: beyond `maxReplicas` the count no longer changes the
    /// decision, but how far beyond tells the sets how many finishing runners the waiting jobs
    /// will take ([`super::completions`]).
    pub max_replicas: Option<u32>,
}

/// Where counting jobs for `TotalNumberOfQueuedAndInProgressWorkflowRuns` stops: twice
/// `max_replicas`. A count of `maxReplicas + w` says that `w` of the jobs wait beyond the pool,
/// so the next `w` runners to finish are replaced at once without asking GitHub again; the
/// limit bounds the job listings of a deep queue (each listed once while its run is unchanged,
/// [`super::job_lists`]).
pub fn counting_limit(max_replicas: u32) -> u32 {
    max_replicas.saturating_mul(2)
}

/// GitHub observations gathered so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observations {
    /// For `PercentageRunnersBusy`.
    pub runners: Option<RunnerObservation>,
    /// For `TotalNumberOfQueuedAndInProgressWorkflowRuns`: the queued and in-progress runs of
    /// every repository [`Needed::WorkflowRuns`] listed, each once, in the order their jobs are
    /// looked at.
    pub workflow_runs: Option<Vec<RunRef>>,
    /// The jobs of the first `run_jobs.len()` of those runs, one run at a time as
    /// [`Needed::Jobs`] asked for them.
    pub run_jobs: Vec<WorkflowRun>,
}

/// An observation [`suggest_replicas`] needs before it can answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Needed {
    /// Fill [`Observations::runners`].
    Runners,
    /// Fill [`Observations::workflow_runs`] from these repositories.
    WorkflowRuns {
        /// Repositories whose queued and in-progress runs to list.
        repositories: Vec<RepositoryRef>,
    },
    /// Append this run's jobs to [`Observations::run_jobs`].
    Jobs {
        /// The next run whose jobs to count.
        run: RunRef,
    },
}

/// The metrics' answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suggestion {
    /// Suggested replicas; `None` means "use minReplicas".
    pub replicas: Option<u32>,
    /// The metric that produced `replicas`.
    pub metric: Option<MetricKind>,
    /// What was observed, for the decision's reason.
    pub detail: String,
    /// The matching queued and in-progress jobs counted (up to [`counting_limit`]), when the
    /// only metric is `TotalNumberOfQueuedAndInProgressWorkflowRuns`: a count in jobs that each
    /// finishing runner lowers by at most one ([`super::completions`]).
    pub counted_jobs: Option<u32>,
}

impl Suggestion {
    /// No metric configured.
    pub fn none() -> Self {
        Suggestion {
            replicas: None,
            metric: None,
            detail: "no metrics".to_owned(),
            counted_jobs: None,
        }
    }
}

/// Result of one [`suggest_replicas`] call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evaluation {
    /// The metrics' answer.
    Ready(Suggestion),
    /// Observe this and call again.
    Needs(Needed),
}

/// Evaluates `metrics` for `target` from `observed`, or says what to observe next.
///
/// The metric list is validated as a whole before anything is asked for: two metrics in the
/// wrong order fail even when the first would have answered (ARC notices only when it needs
/// the second; the schema rejects such objects anyway).
pub fn suggest_replicas(
    metrics: &[Metric],
    target: &MetricTarget<'_>,
    observed: &Observations,
) -> Result<Evaluation, MetricError> {
    let (primary, fallback) = match metrics {
        [] => return Ok(Evaluation::Ready(Suggestion::none())),
        [only] => (only, None),
        [first, second] => {
            let allowed = first.kind == MetricKind::PercentageRunnersBusy
                && second.kind == MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns;
            if !allowed {
                return Err(MetricError::InvalidCombination {
                    first: first.kind,
                    second: second.kind,
                });
            }
            (first, Some(second))
        }
        more => return Err(MetricError::TooManyMetrics(more.len())),
    };

    let (replicas, detail) = match evaluate(primary, target, observed)? {
        Err(needed) => return Ok(Evaluation::Needs(needed)),
        Ok(answer) => answer,
    };
    let counted_jobs = (fallback.is_none()
        && primary.kind == MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns)
        .then_some(replicas);
    if replicas > 0 {
        return Ok(Evaluation::Ready(Suggestion {
            replicas: Some(replicas),
            metric: Some(primary.kind),
            detail,
            counted_jobs,
        }));
    }
    let Some(fallback) = fallback else {
        return Ok(Evaluation::Ready(Suggestion {
            replicas: None,
            metric: None,
            detail: format!("{}: {detail}, suggests no runners", primary.kind),
            counted_jobs,
        }));
    };
    Ok(match evaluate(fallback, target, observed)? {
        Err(needed) => Evaluation::Needs(needed),
        Ok((replicas, fallback_detail)) => Evaluation::Ready(Suggestion {
            replicas: Some(replicas),
            metric: Some(fallback.kind),
            detail: format!(
                "{}: {detail}, suggests no runners; fallback {fallback_detail}",
                primary.kind
            ),
            counted_jobs: None,
        }),
    })
}

/// One metric's replica count and a description, or the observation it lacks.
type MetricAnswer = Result<(u32, String), Needed>;

fn evaluate(
    metric: &Metric,
    target: &MetricTarget<'_>,
    observed: &Observations,
) -> Result<MetricAnswer, MetricError> {
    match metric.kind {
        MetricKind::PercentageRunnersBusy => {
            // Validate before asking for data, so a bad spec costs no API call.
            let policy = BusyPolicy::from_metric(metric)?;
            let Some(runners) = &observed.runners else {
                return Ok(Err(Needed::Runners));
            };
            let desired_before = target.replicas.unwrap_or(DEFAULT_TARGET_REPLICAS);
            let busy = count_busy(runners);
            let capacity = healthy_capacity(runners, desired_before, busy);
            let s = policy.suggest(desired_before, capacity, busy);
            let verdict = match s.direction {
                Some(Direction::Up) => "scale up",
                Some(Direction::Down) => "scale down",
                None => "hold",
            };
            Ok(Ok((
                s.replicas,
                format!(
                    "{busy} of {desired_before} runners busy, {verdict} to {}",
                    s.replicas
                ),
            )))
        }
        MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns => {
            let repositories = workflow_run_repositories(target.scope, metric)?;
            let counts = count_jobs(&observed.run_jobs, target.runner_labels);
            let enough = target
                .max_replicas
                .is_some_and(|max| counts.total() >= counting_limit(max));
            let runs = match &observed.workflow_runs {
                Some(runs) => runs.as_slice(),
                None if enough => &[],
                None => return Ok(Err(Needed::WorkflowRuns { repositories })),
            };
            let looked_at = observed.run_jobs.len();
            if let Some(next) = runs.get(looked_at).filter(|_| !enough) {
                return Ok(Err(Needed::Jobs { run: next.clone() }));
            }
            let mut detail = format!(
                "{} queued and {} in-progress matching jobs",
                counts.queued, counts.in_progress
            );
            if looked_at < runs.len() {
                let _ = write!(
                    detail,
                    " in {looked_at} of {} runs (counting stops at twice maxReplicas)",
                    runs.len()
                );
            }
            Ok(Ok((counts.total(), detail)))
        }
    }
}
