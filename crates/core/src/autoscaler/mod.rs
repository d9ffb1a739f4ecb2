//! The HorizontalRunnerAutoscaler's decisions and the webhook server's rules, free of IO.
//!
//! The HRA controller and the webhook server are thin drivers around these functions:
//! - [`metrics`]: what GitHub's state suggests (`PercentageRunnersBusy`,
//!   `TotalNumberOfQueuedAndInProgressWorkflowRuns`, the fallback order), as a protocol that
//!   asks the driver for exactly the observations it needs;
//! - [`job_lists`]: when a run's jobs listed at an earlier evaluation still hold, so the
//!   queued-runs metric does not list them again;
//! - [`schedule`]: which scheduled override is in force (Daily/Weekly/Monthly/Yearly, UTC);
//! - [`desired`]: the replica count from the suggestion, the reservations, `[min, max]` and
//!   the scale-down delay, plus the target's `effectiveTime`;
//! - [`reservations`]: capacity reservations and how a batch of webhook operations changes
//!   them;
//! - [`completions`]: which finished runners a set's desired count already accounts for;
//! - [`webhook`]: which `workflow_job` and legacy (`check_run`, `pull_request`, `push`)
//!   deliveries scale, which autoscaler they scale, and which triggers can never match;
//! - [`pull`]: reservations for queued jobs whose delivery was lost, from GitHub's listing;
//! - [`labels`]: the job-label rule both the webhook and the metric use;
//! - [`dedup`] and [`batch`]: remembering deliveries and batching writes, with `now` injected.
//!
//! Time is always a `SystemTime` parameter; nothing here reads a clock or keeps state between
//! calls except the explicit [`dedup::Dedup`] and [`batch::Batcher`] values.
//!
//! Each module documents where it departs from actions-runner-controller on purpose.

mod civil;

pub mod after;
pub mod batch;
pub mod completions;
pub mod dedup;
pub mod desired;
pub mod job_lists;
pub mod labels;
pub mod metrics;
pub mod pull;
pub mod reservations;
pub mod schedule;
pub mod webhook;

pub use batch::{Batch, Batcher, QueueFull};
pub use completions::{
    AutoscalerView, CountedJobs, completions_absorbed, counts_jobs, demand_since,
    min_replicas_floor, reflected_before, reflected_completions, sets_read_demand,
};
pub use dedup::{Dedup, Seen};
pub use desired::{
    DEFAULT_MIN_REPLICAS, DEFAULT_SCALE_DOWN_DELAY, Decision, DecisionError, DesiredInput,
    desired_replicas, scale_down_allowed_from,
};
pub use job_lists::{ListedJobs, SINGLE_JOB_RELIST_AFTER, current_jobs, listed_jobs_hold};
pub use labels::{SELF_HOSTED, job_labels_match, label_eq};
pub use metrics::{
    Evaluation, Metric, MetricError, MetricKind, Needed, Observations, Suggestion, suggest_replicas,
};
pub use pull::{PULL_DELIVERY, PullInput, QueuedJob, pull_operations, pull_room};
pub use reservations::{
    DEFAULT_RESERVATION_DURATION, EventOp, JobKey, JobOp, MAX_TOMBSTONES, Reservation,
    ReservationUpdate, ScaleOp, apply_scale_operations, newest_demand, reserved_replicas,
};
pub use schedule::{
    Frequency, Recurrence, ScheduleError, ScheduledOverride, ScheduledWindow, Window,
    active_override, schedule_summary, upcoming_override,
};
pub use webhook::{
    Ambiguity, CheckRunFilter, Demand, EventGrant, JobOrigin, JobOutcome, PullRequestFilter,
    RepoEvent, Selection, TargetCandidate, TriggerProblem, TriggerView, event_grant,
    job_trigger_duration, select_target, trigger_problems, workflow_job_operation,
};

#[cfg(test)]
mod tests;
