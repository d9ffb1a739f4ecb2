//! What the HorizontalRunnerAutoscaler does once [`desired_replicas`](super::desired_replicas)
//! has decided: whether to patch the target, whether that is a scaling worth an event, which
//! capacity reservations to keep, the new `lastSuccessfulScaleOutTime` and when to decide again.
//!
//! Contract: the target is patched only when its `replicas` differ from the decision or the
//! decision's `effectiveTime` differs from the target's at whole-second precision (the API
//! server stores seconds, so a sub-second difference would patch on every pass). A target that
//! reads the newest demand from the autoscaler's reservations itself
//! ([`AfterInput::target_reads_demand`]) gets `effectiveTime` only along with a change of
//! `replicas`, as ARC writes it: a patch for the time alone would tell it nothing new. Only a
//! change of `replicas` is a scaling (event and log). Expired reservations are dropped from the
//! spec only when there are some (the list is compare-and-swapped, so an unneeded write could
//! conflict with the webhook server's). The autoscaler decides again at the earliest instant
//! that can change its decision — an active reservation's expiry, the end of the scale-down
//! delay, a backlog refresh, the end of the active override, the start of the next one — plus
//! [`BOUNDARY_SLACK`], and at the latest after the sync period.

use std::time::{Duration, SystemTime};

use super::desired::BACKLOG_REFRESH;
use super::{Decision, Reservation, ScheduledOverride, upcoming_override};

/// Slack added to requeue times computed from instants, so that the reconcile runs just after
/// the boundary (reservations expire when `expirationTime` is no longer after now).
pub const BOUNDARY_SLACK: Duration = Duration::from_millis(100);

/// What the after-decision phase looks at.
#[derive(Clone, Copy, Debug)]
pub struct AfterInput<'a> {
    /// The decision just made.
    pub decision: &'a Decision,
    /// The target's `spec.replicas`.
    pub target_replicas: Option<i32>,
    /// The target's `spec.effectiveTime`.
    pub target_effective_time: Option<SystemTime>,
    /// The target reads the newest demand from this autoscaler's reservations
    /// ([`super::completions::demand_since`]): its only autoscaler, counting from
    /// reservations alone ([`super::completions::sets_read_demand`]).
    pub target_reads_demand: bool,
    /// The autoscaler's stored capacity reservations, in spec order.
    pub reservations: &'a [Reservation],
    /// The autoscaler's scheduled overrides.
    pub overrides: &'a [ScheduledOverride],
    /// `status.lastSuccessfulScaleOutTime` as stored.
    pub last_scale_out: Option<SystemTime>,
    /// The current time.
    pub now: SystemTime,
    /// The controller's sync period: the latest requeue.
    pub sync_period: Duration,
}

/// A merge patch of the target's spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetPatch {
    /// `spec.replicas`.
    pub replicas: i32,
    /// `spec.effectiveTime`, when it changes.
    pub effective_time: Option<SystemTime>,
}

/// What the controller applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfterPlan {
    /// The decided count as the API's integer (`status.desiredReplicas`).
    pub desired: i32,
    /// Patch the target, when something changes.
    pub patch_target: Option<TargetPatch>,
    /// The target's replicas change from this value (`None`: unset): log and event.
    pub scaled_from: Option<Option<i32>>,
    /// Some reservations expired: write back only those at these indices (the active ones).
    pub keep: Option<Vec<usize>>,
    /// The new `status.lastSuccessfulScaleOutTime`.
    pub last_scale_out: Option<SystemTime>,
    /// When to decide again.
    pub requeue: Duration,
}

/// Plans the after-decision phase. Pure.
pub fn after(i: &AfterInput<'_>) -> AfterPlan {
    let d = i.decision;
    let now = i.now;
    let desired = i32::try_from(d.desired).unwrap_or(i32::MAX);
    let rescaled = i.target_replicas != Some(desired);
    let effective_time = d
        .effective_time
        .filter(|t| i.target_effective_time.map(whole_seconds) != Some(whole_seconds(*t)))
        .filter(|_| rescaled || !i.target_reads_demand);
    let patch_target = (rescaled || effective_time.is_some()).then_some(TargetPatch {
        replicas: desired,
        effective_time,
    });
    let active: Vec<usize> = (0..i.reservations.len())
        .filter(|&n| i.reservations[n].is_active(now))
        .collect();
    let keep = (active.len() < i.reservations.len()).then_some(active);

    let mut wake_ups: Vec<SystemTime> = i
        .reservations
        .iter()
        .filter(|r| r.is_active(now))
        .map(|r| r.expiration_time)
        .collect();
    wake_ups.extend(d.held_until);
    if d.backlog {
        wake_ups.push(now + BACKLOG_REFRESH);
    }
    wake_ups.extend(d.active_override.as_ref().map(|a| a.window.end));
    if let Ok(Some(next)) = upcoming_override(i.overrides, now) {
        wake_ups.push(next.window.start);
    }
    AfterPlan {
        desired,
        patch_target,
        scaled_from: rescaled.then_some(i.target_replicas),
        keep,
        last_scale_out: if d.scale_out {
            Some(now)
        } else {
            i.last_scale_out
        },
        requeue: requeue_after(now, &wake_ups, i.sync_period),
    }
}

/// The earliest of `period` and the instants in `wake_ups` (plus [`BOUNDARY_SLACK`]), from
/// `now`. An instant already passed wakes at once (plus slack).
pub fn requeue_after(now: SystemTime, wake_ups: &[SystemTime], period: Duration) -> Duration {
    wake_ups
        .iter()
        .map(|t| t.duration_since(now).unwrap_or_default() + BOUNDARY_SLACK)
        .fold(period, Duration::min)
}

/// Seconds since the epoch: the precision the API server stores times at.
fn whole_seconds(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
