//! The replica count an autoscaler asks of its target.
//!
//! ```text
//! min      = active scheduled override's minReplicas, else spec.minReplicas (unset → 1),
//!            capped at max
//! max      = spec.maxReplicas (required)
//! computed = clamp(metric suggestion (or min when none) + Σ unexpired reservations, min, max)
//! desired  = computed, unless it is lower than the previous desired count and the last
//!            scale-out was less than the scale-down delay ago: then the previous count
//!            (clamped to [min, max]) is kept, so the count does not flap.
//! ```
//!
//! Differences from ARC, on purpose:
//! - ARC refuses an autoscaler without `minReplicas`; Hangar takes 1, the default ARC's
//!   controller uses everywhere else. `maxReplicas` stays required, as in ARC.
//! - A `minReplicas` above `maxReplicas` (possible through a scheduled override) is capped at
//!   `maxReplicas`; ARC then returns `minReplicas` or `maxReplicas` depending on the suggestion.
//! - The count kept during the scale-down delay is clamped to the current `[min, max]`; ARC
//!   keeps it even after `maxReplicas` was lowered below it.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use super::civil::format_rfc3339;
use super::metrics::{DEFAULT_TARGET_REPLICAS, Suggestion};
use super::reservations::{Reservation, later, newest_demand, reserved_replicas};
use super::schedule::{
    ScheduleError, ScheduledOverride, ScheduledWindow, active_override, upcoming_override,
};

/// ARC's `--default-scale-down-delay`: how long after a scale-out a scale-down waits.
pub const DEFAULT_SCALE_DOWN_DELAY: Duration = Duration::from_secs(10 * 60);

/// `minReplicas` when neither the spec nor an override sets it.
pub const DEFAULT_MIN_REPLICAS: u32 = 1;

/// Everything one decision looks at.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredInput {
    /// `spec.minReplicas`; unset or negative counts as [`DEFAULT_MIN_REPLICAS`].
    pub min_replicas: Option<i32>,
    /// `spec.maxReplicas`; required.
    pub max_replicas: Option<i32>,
    /// `spec.scaleDownDelaySecondsAfterScaleOut`; negative counts as 0.
    pub scale_down_delay_seconds: Option<i32>,
    /// The controller's default delay (normally [`DEFAULT_SCALE_DOWN_DELAY`]).
    pub default_scale_down_delay: Duration,
    /// `spec.scheduledOverrides`, in order.
    pub scheduled_overrides: Vec<ScheduledOverride>,
    /// What the metrics suggest (see [`super::metrics::suggest_replicas`]).
    pub suggestion: Suggestion,
    /// `spec.capacityReservations`.
    pub reservations: Vec<Reservation>,
    /// `status.desiredReplicas`: the count asked last time.
    pub previous_desired: Option<u32>,
    /// `status.lastSuccessfulScaleOutTime`.
    pub last_scale_out: Option<SystemTime>,
    /// The target's runners are ephemeral (the default), so its `effectiveTime` matters.
    pub ephemeral: bool,
    /// The current time.
    pub now: SystemTime,
}

/// When a count may go down again after the scale-out at `last_scale_out`: the autoscaler's
/// `scaleDownDelaySecondsAfterScaleOut` (negative counts as 0), or the controller's `default`.
pub fn scale_down_allowed_from(
    last_scale_out: SystemTime,
    delay_seconds: Option<i32>,
    default: Duration,
) -> SystemTime {
    let delay = match delay_seconds {
        Some(secs) => Duration::from_secs(u64::try_from(secs).unwrap_or(0)),
        None => default,
    };
    later(last_scale_out, delay)
}

/// How often an ephemeral target's `effectiveTime` is refreshed while demand exceeds
/// maxReplicas (see [`Decision::effective_time`]).
pub const BACKLOG_REFRESH: Duration = Duration::from_secs(3);

/// The decision and the numbers behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Replicas to set on the target and in `status.desiredReplicas`.
    pub desired: u32,
    /// The count rises above the previous one (an unset previous count counts as 1, as in
    /// ARC): set `status.lastSuccessfulScaleOutTime` to now.
    pub scale_out: bool,
    /// For an ephemeral target, the newest `effectiveTime` of the unexpired reservations: set
    /// it as the target's `spec.effectiveTime` so that completed runners are recreated for new
    /// demand at once. `None` leaves the target's value alone. ARC writes it only together with
    /// a replica change, so at maxReplicas new demand waited out ARC's recreation delay
    /// (ARC #2254); it is written whenever it differs, unless the target reads the newest
    /// demand from the reservations itself ([`super::after::AfterInput::target_reads_demand`]).
    /// While a metric's demand is capped at
    /// maxReplicas, it is `now`: jobs are still waiting, so every runner that finishes must be
    /// replaced, and nothing else tells the set so (it cannot say which jobs a metric counted);
    /// it would hold the place for the release grace. Reservations and a count of jobs (the
    /// queued-runs metric alone) tell the set themselves
    /// ([`super::completions::completions_absorbed`]).
    pub effective_time: Option<SystemTime>,
    /// A metric's demand exceeds maxReplicas: decide again soon ([`BACKLOG_REFRESH`]) to keep
    /// `effective_time` current.
    pub backlog: bool,
    /// The effective minReplicas.
    pub min: u32,
    /// maxReplicas.
    pub max: u32,
    /// The metric suggestion, or `min` when there is none.
    pub suggested: u32,
    /// Replicas of unexpired reservations.
    pub reserved: u32,
    /// Set when a scale-down is being held back: when it will be allowed.
    pub held_until: Option<SystemTime>,
    /// The scheduled override in force, if any.
    pub active_override: Option<ScheduledWindow>,
    /// For `status.scheduledOverridesSummary`: the active override, else the next one.
    pub schedule_summary: Option<String>,
    /// How the count came about, for status, events and logs.
    pub reason: String,
    /// The suggestion's [`Suggestion::counted_jobs`], for `status.countedJobs`.
    pub counted_jobs: Option<u32>,
}

/// Why no decision can be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    /// `maxReplicas` is required.
    #[error("maxReplicas is not set; the autoscaler needs an upper bound")]
    MissingMaxReplicas,
    /// `maxReplicas` is negative.
    #[error("maxReplicas is {0}; it must be 0 or more")]
    NegativeMaxReplicas(i32),
    /// The schedule is invalid.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
}

/// Decides the target's replica count (see the module docs for the rules).
pub fn desired_replicas(input: &DesiredInput) -> Result<Decision, DecisionError> {
    let max = match input.max_replicas {
        None => return Err(DecisionError::MissingMaxReplicas),
        Some(m) => u32::try_from(m).map_err(|_| DecisionError::NegativeMaxReplicas(m))?,
    };
    let now = input.now;
    let mut reason = String::new();

    let spec_min = input
        .min_replicas
        .and_then(|m| u32::try_from(m).ok())
        .unwrap_or(DEFAULT_MIN_REPLICAS);
    let active = active_override(&input.scheduled_overrides, now)?;
    let requested_min = match active.as_ref().and_then(|a| a.min_replicas) {
        Some(m) => {
            let a = active.as_ref().map_or(0, |a| a.index);
            let _ = write!(reason, "minReplicas {m} from scheduledOverrides[{a}]; ");
            m
        }
        None => spec_min,
    };
    let min = requested_min.min(max);
    if requested_min > max {
        let _ = write!(
            reason,
            "minReplicas {requested_min} exceeds maxReplicas {max}, using {max}; "
        );
    }
    let schedule_summary = match &active {
        Some(a) => Some(a.summary.clone()),
        None => upcoming_override(&input.scheduled_overrides, now)?.map(|w| w.summary),
    };

    let suggested = input.suggestion.replicas.unwrap_or(min);
    match (input.suggestion.replicas, input.suggestion.metric) {
        (Some(s), Some(metric)) => {
            let _ = write!(
                reason,
                "{s} suggested by {metric} ({})",
                input.suggestion.detail
            );
        }
        _ => {
            let _ = write!(reason, "minReplicas {min} ({})", input.suggestion.detail);
        }
    }
    let reserved = reserved_replicas(&input.reservations, now);
    if reserved > 0 {
        let _ = write!(reason, " + {reserved} reserved");
    }
    let total = suggested.saturating_add(reserved);
    let computed = total.clamp(min, max);
    if total > max {
        let _ = write!(reason, ", capped at maxReplicas {max}");
    } else if total < min {
        let _ = write!(reason, ", raised to minReplicas {min}");
    }

    let mut desired = computed;
    let mut held_until = None;
    if let (Some(previous), Some(last)) = (input.previous_desired, input.last_scale_out) {
        let until = scale_down_allowed_from(
            last,
            input.scale_down_delay_seconds,
            input.default_scale_down_delay,
        );
        let delay = until.duration_since(last).unwrap_or_default();
        let kept = previous.clamp(min, max);
        if computed < previous && now < until && kept > computed {
            desired = kept;
            held_until = Some(until);
            let _ = write!(
                reason,
                "; kept at {kept} instead of {computed}: scale-down waits until {} ({}s after \
                 the last scale-out)",
                format_rfc3339(until),
                delay.as_secs()
            );
        }
    }

    let scale_out = desired > input.previous_desired.unwrap_or(DEFAULT_TARGET_REPLICAS);
    // Reservations, and a count of jobs, let the sets tell for themselves which finished
    // runners' places stay wanted (`completions::completions_absorbed`): no refresh needed.
    let backlog = input.ephemeral
        && total > max
        && input.suggestion.metric.is_some()
        && input.suggestion.counted_jobs.is_none();
    let effective_time = if backlog {
        Some(now)
    } else if input.ephemeral {
        newest_demand(&input.reservations, now)
    } else {
        None
    };

    Ok(Decision {
        desired,
        scale_out,
        effective_time,
        backlog,
        min,
        max,
        suggested,
        reserved,
        held_until,
        active_override: active,
        schedule_summary,
        reason: format!("desired {desired}: {reason}"),
        counted_jobs: input.suggestion.counted_jobs,
    })
}
