//! `HorizontalRunnerAutoscaler` (short name `hra`): sizes a RunnerDeployment or RunnerSet.
//!
//! The autoscaler sets the target's `spec.replicas` to a value between `minReplicas` and
//! `maxReplicas`, computed from up to two polled metrics plus the capacity reservations that
//! GitHub `workflow_job` webhooks add (`scaleUpTriggers`), and lowered or raised by active
//! `scheduledOverrides`. A scale-down waits `scaleDownDelaySecondsAfterScaleOut` after the last
//! scale-out to avoid flapping.
//!
//! The schema adds the checks ARC only made at run time: known metric types, factor and
//! adjustment not both set, maxReplicas not below minReplicas, well-formed trigger durations,
//! no negative count (bounds, delay, adjustments, amounts, reservations, override minimums).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::runner_config::GitHubApiCredentialsFrom;
use crate::validation::{
    DECIMAL_PATTERN, DURATION_PATTERN, FIELD_MAX_NOT_BELOW_MIN, MESSAGE_MAX_NOT_BELOW_MIN,
    MESSAGE_METRIC_ORDER, MESSAGE_SCALE_DOWN_EXCLUSIVE, MESSAGE_SCALE_UP_EXCLUSIVE,
    RULE_MAX_NOT_BELOW_MIN, RULE_METRIC_ORDER, RULE_SCALE_DOWN_EXCLUSIVE, RULE_SCALE_UP_EXCLUSIVE,
};

/// Desired state of a HorizontalRunnerAutoscaler.
// Printer columns repeat `type_ = ...` by design; clippy reads that as a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "actions.summerwind.dev",
    version = "v1alpha1",
    kind = "HorizontalRunnerAutoscaler",
    namespaced,
    status = "HorizontalRunnerAutoscalerStatus",
    shortname = "hra",
    derive = "PartialEq",
    derive = "Default",
    doc = "Scales a RunnerDeployment or RunnerSet between minReplicas and maxReplicas from \
           GitHub metrics, workflow_job webhooks and schedules.",
    printcolumn(name = "Min", type_ = "number", json_path = ".spec.minReplicas"),
    printcolumn(name = "Max", type_ = "number", json_path = ".spec.maxReplicas"),
    printcolumn(
        name = "Desired",
        type_ = "number",
        json_path = ".status.desiredReplicas"
    ),
    printcolumn(
        name = "Schedule",
        type_ = "string",
        json_path = ".status.scheduledOverridesSummary"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(RULE_MAX_NOT_BELOW_MIN)
    .message(MESSAGE_MAX_NOT_BELOW_MIN)
    .field_path(FIELD_MAX_NOT_BELOW_MIN))]
#[x_kube(validation = Rule::new(RULE_METRIC_ORDER).message(MESSAGE_METRIC_ORDER))]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::conventions)]
pub struct HorizontalRunnerAutoscalerSpec {
    /// The RunnerDeployment or RunnerSet to scale, in the same namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_target_ref: Option<ScaleTargetRef>,

    /// Fewest runners to keep. Required in practice: the autoscaler does nothing while it is
    /// unset. 0 allows scaling to zero (pair it with a webhook trigger or the
    /// TotalNumberOfQueuedAndInProgressWorkflowRuns metric, which can scale up from zero).
    #[schemars(range(min = 0))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,

    /// Most runners to run. Required in practice: the autoscaler does nothing while it is
    /// unset. Must not be below minReplicas.
    #[schemars(range(min = 0))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,

    /// Seconds to wait after the last scale-out before scaling down, so that the runner count
    /// does not flap. Defaults to the controller's setting (600 unless changed).
    #[schemars(range(min = 0))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_seconds_after_scale_out: Option<i32>,

    /// Metrics polled from GitHub to compute the number of runners, at most two. With two, the
    /// first must be PercentageRunnersBusy and the second
    /// TotalNumberOfQueuedAndInProgressWorkflowRuns, used when the first suggests zero. Without
    /// metrics the target runs minReplicas plus its capacity reservations.
    #[schemars(length(max = 2))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Vec<MetricSpec>>,

    /// Scale up when GitHub sends a webhook: each queued workflow_job that matches the
    /// target's labels adds a capacity reservation of one runner for `duration`, and its
    /// completion removes one. Needs the webhook server and a GitHub webhook sending
    /// workflow_job events. Use exactly one trigger, with githubEvent.workflowJob.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_up_triggers: Option<Vec<ScaleUpTrigger>>,

    /// Temporary extra runners, written by the webhook server; users do not set this. Each
    /// unexpired reservation adds its replicas to the desired count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservations: Option<Vec<CapacityReservation>>,

    /// Time windows, optionally recurring, during which minReplicas is replaced. When several
    /// are active, the first in the list wins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled_overrides: Option<Vec<ScheduledOverride>>,

    /// Use the GitHub credentials in this secret (in the same namespace) for the metrics of
    /// this autoscaler instead of the controller's default ones.
    #[serde(
        rename = "githubAPICredentialsFrom",
        skip_serializing_if = "Option::is_none"
    )]
    pub github_api_credentials_from: Option<GitHubApiCredentialsFrom>,
}

/// Which resource an autoscaler scales.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    /// Kind of the target: RunnerDeployment (the default) or RunnerSet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ScaleTargetKind>,

    /// Name of the target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Kinds an autoscaler can scale.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ScaleTargetKind {
    /// A RunnerDeployment.
    #[default]
    RunnerDeployment,
    /// A RunnerSet.
    RunnerSet,
}

/// A metric polled from GitHub, and how it turns into a number of runners.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq, Eq)]
#[x_kube(validation = Rule::new(RULE_SCALE_UP_EXCLUSIVE).message(MESSAGE_SCALE_UP_EXCLUSIVE))]
#[x_kube(validation = Rule::new(RULE_SCALE_DOWN_EXCLUSIVE).message(MESSAGE_SCALE_DOWN_EXCLUSIVE))]
#[serde(rename_all = "camelCase")]
pub struct MetricSpec {
    /// The metric. TotalNumberOfQueuedAndInProgressWorkflowRuns: one runner per queued or
    /// in-progress job whose labels the runners have. PercentageRunnersBusy: grow or shrink the
    /// current number when the share of busy runners crosses the thresholds below.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<MetricType>,

    /// Repositories (the name part of owner/name) whose workflow runs are counted by
    /// TotalNumberOfQueuedAndInProgressWorkflowRuns. Required for organization and enterprise
    /// runners; repository runners count their own repository.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository_names: Option<Vec<String>>,

    /// PercentageRunnersBusy: scale up when at least this share of runners is busy, as a
    /// decimal string. Defaults to "0.8".
    #[schemars(pattern(DECIMAL_PATTERN))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_up_threshold: Option<String>,

    /// PercentageRunnersBusy: scale down when less than this share of runners is busy, as a
    /// decimal string. Defaults to "0.3".
    #[schemars(pattern(DECIMAL_PATTERN))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_down_threshold: Option<String>,

    /// PercentageRunnersBusy: on scale-up, multiply the number of runners by this decimal
    /// string (rounded up). Defaults to "1.3". Mutually exclusive with scaleUpAdjustment.
    #[schemars(pattern(DECIMAL_PATTERN))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_up_factor: Option<String>,

    /// PercentageRunnersBusy: on scale-down, multiply the number of runners by this decimal
    /// string (rounded down). Defaults to "0.7". Mutually exclusive with scaleDownAdjustment.
    #[schemars(pattern(DECIMAL_PATTERN))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_down_factor: Option<String>,

    /// PercentageRunnersBusy: on scale-up, add this many runners. Mutually exclusive with
    /// scaleUpFactor.
    #[schemars(range(min = 0))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_up_adjustment: Option<i32>,

    /// PercentageRunnersBusy: on scale-down, remove this many runners. Mutually exclusive with
    /// scaleDownFactor.
    #[schemars(range(min = 0))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_down_adjustment: Option<i32>,
}

/// The metrics an autoscaler understands, spelt as in ARC.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricType {
    /// Queued plus in-progress workflow jobs that these runners could take.
    TotalNumberOfQueuedAndInProgressWorkflowRuns,
    /// Share of this target's runners that are running a job.
    PercentageRunnersBusy,
}

/// A webhook event that adds capacity.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleUpTrigger {
    /// The GitHub event to react to. workflowJob reserves one runner per queued job until it
    /// completes; checkRun, pullRequest and push (ARC's triggers before v0.27) reserve
    /// `amount` runners for `duration` whenever a matching event arrives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub github_event: Option<GitHubEventScaleUpTriggerSpec>,

    /// Runners a matching checkRun, pullRequest or push event reserves (default 1). Not used
    /// by workflowJob, where every queued job reserves exactly one runner.
    #[schemars(range(min = 0))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount: Option<i32>,

    /// How long a reservation lasts, as a Go duration ("30m", "1h30m"); defaults to 10m. For
    /// workflowJob: if the job's completion is never seen (choose it longer than your jobs
    /// wait in the queue). For the other events: always.
    #[schemars(pattern(DURATION_PATTERN))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
}

impl ScaleUpTrigger {
    /// `duration` parsed as a Go duration; `None` when unset.
    pub fn parsed_duration(
        &self,
    ) -> Option<Result<kube::core::Duration, kube::core::duration::ParseError>> {
        self.duration.as_deref().map(str::parse)
    }
}

/// GitHub events a trigger matches. Set one per entry; use several entries for several
/// events.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GitHubEventScaleUpTriggerSpec {
    /// check_run events (one per Actions job and per check of other apps), filtered by the
    /// conditions below.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_run: Option<CheckRunSpec>,

    /// pull_request events, filtered by action and base branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<PullRequestSpec>,

    /// push events, any branch. Write it as an empty object: `push: {}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub push: Option<PushSpec>,

    /// React to workflow_job events: queued adds a reservation, completed removes one. Write
    /// it as an empty object: `workflowJob: {}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_job: Option<WorkflowJobSpec>,
}

/// check_run trigger conditions; each one left out allows anything.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CheckRunSpec {
    /// check_run actions to react to: created, completed, rerequested or requested_action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub types: Option<Vec<String>>,

    /// check_run status to react to: queued, in_progress, completed, waiting, requested or
    /// pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,

    /// Glob patterns of check run (job) names to react to: `*` is any text, a leading `!`
    /// negates a pattern; any pattern matching is enough.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,

    /// Repositories whose check runs to react to, as `name` or `owner/name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repositories: Option<Vec<String>>,
}

/// pull_request trigger conditions; each one left out allows anything.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PullRequestSpec {
    /// pull_request actions to react to, e.g. opened, synchronize.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub types: Option<Vec<String>>,

    /// Base branches to react to (`main`, not `refs/heads/main`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branches: Option<Vec<String>>,
}

/// push trigger; it has no conditions.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
pub struct PushSpec {}

/// workflow_job trigger; it has no conditions (jobs are matched by the target's labels).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkflowJobSpec {}

/// Replicas temporarily added to the target until expirationTime.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservation {
    /// Name of the reservation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// When the reservation was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective_time: Option<Time>,

    /// When the reservation ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<Time>,

    /// Runners the reservation adds. Zero with a jobID: the job completed, and the entry
    /// remains until expirationTime so that a late or repeated delivery of the job's queued
    /// event reserves nothing.
    #[schemars(range(min = 0))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// ID of the workflow job this reservation is for (set by Hangar's webhook server). A job
    /// is reserved at most once, however many webhook server replicas receive its deliveries,
    /// and its completed event releases this entry only.
    #[schemars(range(min = 0))]
    #[serde(rename = "jobID", skip_serializing_if = "Option::is_none")]
    pub job_id: Option<i64>,

    /// Run attempt of the workflow job (1 when unset); a re-run that reuses the job ID is a
    /// separate job.
    #[schemars(range(min = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_attempt: Option<i32>,

    /// X-GitHub-Delivery ID of the webhook delivery that made this reservation (or, for a
    /// reservation with zero replicas, that completed its job).
    #[serde(rename = "deliveryID", skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,

    /// On a completed job's entry (zero replicas): the runner that ran the job, as GitHub's
    /// completed event names it. Tells the runner's set that the desired count already
    /// accounts for that runner's job, so its place is released at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner_name: Option<String>,

    /// The legacy trigger that made this reservation (checkRun, pullRequest or push): slack
    /// for jobs about to be queued, which no completion releases; it ends at expirationTime.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
}

/// A time window during which minReplicas is replaced.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledOverride {
    /// Start of the (first) window, RFC 3339, e.g. 2024-05-04T09:00:00+09:00.
    pub start_time: Time,

    /// End of the (first) window, RFC 3339.
    pub end_time: Time,

    /// minReplicas during the window. Unset leaves minReplicas as it is.
    #[schemars(range(min = 0), extend("nullable" = true))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,

    /// Repeat the window. Unset means it happens once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recurrence_rule: Option<RecurrenceRule>,
}

/// How a scheduled override repeats.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecurrenceRule {
    /// Interval between windows: Daily, Weekly, Monthly or Yearly. Unset means the window
    /// happens once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency: Option<RecurrenceFrequency>,

    /// Last time a window may start. Unset means forever.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until_time: Option<Time>,
}

/// Intervals of a recurring scheduled override.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecurrenceFrequency {
    /// Every day.
    Daily,
    /// Every week.
    Weekly,
    /// Every month.
    Monthly,
    /// Every year.
    Yearly,
}

/// Observed state of a HorizontalRunnerAutoscaler, written by the controller.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::conventions)]
pub struct HorizontalRunnerAutoscalerStatus {
    /// Generation of this autoscaler's spec that the status describes. The webhook server
    /// records each reservation in the spec, so a new generation that changes nothing else
    /// the status reports is written at most once a second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Number of runners the autoscaler last asked the target for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,

    /// When the autoscaler last raised the target's size; scale-downs wait
    /// scaleDownDelaySecondsAfterScaleOut after it.
    #[schemars(extend("nullable" = true))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_successful_scale_out_time: Option<Time>,

    /// Unused; kept so that objects written by old ARC versions can be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_entries: Option<Vec<CacheEntry>>,

    /// When the only metric is TotalNumberOfQueuedAndInProgressWorkflowRuns (Hangar only): the
    /// matching queued and in-progress jobs it counted for desiredReplicas, up to twice
    /// maxReplicas. The target's sets replace that many finished runners minus desiredReplicas
    /// at once, since jobs wait for them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counted_jobs: Option<i32>,

    /// When GitHub was asked for countedJobs (Hangar only). A runner that finished before it
    /// is not in the count, so its place is released without waiting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_observed_time: Option<Time>,

    /// Active and upcoming scheduled overrides in short form (e.g. "min=5 time=..."), for the
    /// Schedule column of kubectl get hra.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled_overrides_summary: Option<String>,

    /// The autoscaler's state as conditions (Hangar only; ARC has none). Type ScalingActive:
    /// True while it computes and applies a size; False with reason InvalidSpec (the message
    /// says what to fix, e.g. a missing scaleTargetRef or maxReplicas) or a GitHub error.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// A cached value (unused, kept for compatibility).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CacheEntry {
    /// Key of the entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,

    /// Value of the entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<i32>,

    /// When the entry expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<Time>,
}
