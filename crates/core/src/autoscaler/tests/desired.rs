//! `desired_replicas`: one test per rule and branch.

use std::time::Duration;

use super::{mins, t, utc};
use crate::autoscaler::metrics::{MetricKind, Suggestion};
use crate::autoscaler::reservations::Reservation;
use crate::autoscaler::schedule::{Frequency, Recurrence, ScheduledOverride};
use crate::autoscaler::*;

const NOW: u64 = 100;

fn input() -> DesiredInput {
    DesiredInput {
        min_replicas: Some(1),
        max_replicas: Some(10),
        scale_down_delay_seconds: None,
        default_scale_down_delay: DEFAULT_SCALE_DOWN_DELAY,
        scheduled_overrides: vec![],
        suggestion: Suggestion::none(),
        reservations: vec![],
        previous_desired: None,
        last_scale_out: None,
        ephemeral: true,
        now: t(NOW),
    }
}

fn suggests(n: u32) -> Suggestion {
    Suggestion {
        replicas: Some(n),
        metric: Some(MetricKind::PercentageRunnersBusy),
        detail: "test".into(),
        counted_jobs: None,
    }
}

/// A reservation made at minute `made`, expiring at minute `expires`.
fn reservation(made: u64, expires: u64) -> Reservation {
    Reservation {
        name: None,
        effective_time: t(made),
        expiration_time: t(expires),
        replicas: 1,
        job: None,
        delivery: None,
        runner: None,
        trigger: None,
    }
}

fn decide(input: &DesiredInput) -> Decision {
    desired_replicas(input).unwrap()
}

#[test]
fn without_metrics_or_reservations_desired_is_min_replicas() {
    let d = decide(&DesiredInput {
        min_replicas: Some(3),
        ..input()
    });
    assert_eq!((d.desired, d.suggested, d.reserved), (3, 3, 0));
}

#[test]
fn unset_min_replicas_counts_as_one() {
    let d = decide(&DesiredInput {
        min_replicas: None,
        ..input()
    });
    assert_eq!((d.min, d.desired), (1, 1));
}

#[test]
fn negative_min_replicas_counts_as_one() {
    let d = decide(&DesiredInput {
        min_replicas: Some(-4),
        ..input()
    });
    assert_eq!(d.min, 1);
}

#[test]
fn zero_min_replicas_allows_zero_runners() {
    let d = decide(&DesiredInput {
        min_replicas: Some(0),
        ..input()
    });
    assert_eq!(d.desired, 0);
}

#[test]
fn missing_max_replicas_is_an_error() {
    let err = desired_replicas(&DesiredInput {
        max_replicas: None,
        ..input()
    });
    assert_eq!(err, Err(DecisionError::MissingMaxReplicas));
}

#[test]
fn negative_max_replicas_is_an_error() {
    let err = desired_replicas(&DesiredInput {
        max_replicas: Some(-1),
        ..input()
    });
    assert_eq!(err, Err(DecisionError::NegativeMaxReplicas(-1)));
}

#[test]
fn a_metric_suggestion_replaces_min_replicas() {
    let d = decide(&DesiredInput {
        min_replicas: Some(2),
        suggestion: suggests(5),
        ..input()
    });
    assert_eq!((d.suggested, d.desired), (5, 5));
}

#[test]
fn unexpired_reservations_add_to_the_suggestion() {
    let d = decide(&DesiredInput {
        suggestion: suggests(2),
        reservations: vec![reservation(90, 110), reservation(95, 105)],
        ..input()
    });
    assert_eq!((d.reserved, d.desired), (2, 4));
}

#[test]
fn reservations_add_to_min_replicas_when_no_metric_suggests() {
    let d = decide(&DesiredInput {
        min_replicas: Some(1),
        reservations: vec![reservation(90, 110)],
        ..input()
    });
    assert_eq!(d.desired, 2);
}

#[test]
fn reservations_expiring_now_or_earlier_do_not_count() {
    let d = decide(&DesiredInput {
        reservations: vec![reservation(80, NOW), reservation(70, 90)],
        ..input()
    });
    assert_eq!((d.reserved, d.desired), (0, 1));
}

#[test]
fn desired_is_capped_at_max_replicas() {
    let d = decide(&DesiredInput {
        max_replicas: Some(4),
        suggestion: suggests(3),
        reservations: vec![reservation(90, 110), reservation(91, 110)],
        ..input()
    });
    assert_eq!(d.desired, 4);
    assert!(d.reason.contains("capped at maxReplicas 4"), "{}", d.reason);
}

#[test]
fn a_suggestion_below_min_replicas_is_raised_to_it() {
    let d = decide(&DesiredInput {
        min_replicas: Some(3),
        suggestion: suggests(1),
        ..input()
    });
    assert_eq!(d.desired, 3);
    assert!(d.reason.contains("raised to minReplicas 3"), "{}", d.reason);
}

fn override_now(min: Option<u32>) -> ScheduledOverride {
    ScheduledOverride {
        start: t(NOW - 10),
        end: t(NOW + 10),
        min_replicas: min,
        recurrence: None,
    }
}

#[test]
fn an_active_scheduled_override_replaces_min_replicas() {
    let d = decide(&DesiredInput {
        scheduled_overrides: vec![override_now(Some(6))],
        ..input()
    });
    assert_eq!((d.min, d.desired), (6, 6));
    assert_eq!(d.active_override.map(|a| a.index), Some(0));
    assert!(
        d.reason.contains("from scheduledOverrides[0]"),
        "{}",
        d.reason
    );
}

#[test]
fn an_override_can_lower_min_replicas_to_zero() {
    let d = decide(&DesiredInput {
        min_replicas: Some(2),
        scheduled_overrides: vec![override_now(Some(0))],
        ..input()
    });
    assert_eq!(d.desired, 0);
}

#[test]
fn an_active_override_without_min_replicas_keeps_the_spec_value() {
    let d = decide(&DesiredInput {
        min_replicas: Some(2),
        scheduled_overrides: vec![override_now(None), override_now(Some(7))],
        ..input()
    });
    // The first active override wins even though it sets nothing.
    assert_eq!(d.min, 2);
}

#[test]
fn an_override_min_above_max_replicas_is_capped_at_max() {
    let d = decide(&DesiredInput {
        max_replicas: Some(4),
        scheduled_overrides: vec![override_now(Some(9))],
        ..input()
    });
    assert_eq!((d.min, d.desired), (4, 4));
    assert!(d.reason.contains("exceeds maxReplicas 4"), "{}", d.reason);
}

#[test]
fn the_summary_shows_the_next_override_when_none_is_active() {
    let d = decide(&DesiredInput {
        now: utc(2024, 5, 4, 8, 0),
        scheduled_overrides: vec![ScheduledOverride {
            start: utc(2024, 5, 4, 9, 0),
            end: utc(2024, 5, 4, 17, 0),
            min_replicas: Some(5),
            recurrence: Some(Recurrence {
                frequency: Frequency::Daily,
                until: None,
            }),
        }],
        ..input()
    });
    assert_eq!(d.min, 1);
    assert_eq!(
        d.schedule_summary.as_deref(),
        Some("min=5 time=2024-05-04T09:00:00Z - 2024-05-04T17:00:00Z")
    );
}

#[test]
fn an_invalid_schedule_is_an_error() {
    let err = desired_replicas(&DesiredInput {
        scheduled_overrides: vec![ScheduledOverride {
            start: t(0),
            end: t(25 * 60),
            min_replicas: Some(1),
            recurrence: Some(Recurrence {
                frequency: Frequency::Daily,
                until: None,
            }),
        }],
        ..input()
    });
    assert!(matches!(err, Err(DecisionError::Schedule(_))), "{err:?}");
}

/// Previously 6 runners after a scale-out at minute `last`; the metric now suggests 2.
fn after_scale_out(last: u64) -> DesiredInput {
    DesiredInput {
        suggestion: suggests(2),
        previous_desired: Some(6),
        last_scale_out: Some(t(last)),
        ..input()
    }
}

#[test]
fn a_scale_down_within_the_delay_after_a_scale_out_keeps_the_previous_count() {
    let d = decide(&after_scale_out(NOW - 9));
    assert_eq!(d.desired, 6);
    assert_eq!(d.held_until, Some(t(NOW + 1)));
    assert!(!d.scale_out);
    assert!(d.reason.contains("kept at 6 instead of 2"), "{}", d.reason);
}

#[test]
fn a_scale_down_is_allowed_once_the_delay_has_passed() {
    let d = decide(&after_scale_out(NOW - 10));
    assert_eq!((d.desired, d.held_until), (2, None));
}

#[test]
fn a_scale_up_within_the_delay_is_not_held() {
    let d = decide(&DesiredInput {
        suggestion: suggests(8),
        ..after_scale_out(NOW - 1)
    });
    assert_eq!(d.desired, 8);
    assert!(d.scale_out);
}

#[test]
fn the_spec_delay_replaces_the_default() {
    let d = decide(&DesiredInput {
        scale_down_delay_seconds: Some(60),
        ..after_scale_out(NOW - 2)
    });
    assert_eq!(d.desired, 2);
    let d = decide(&DesiredInput {
        scale_down_delay_seconds: Some(3 * 60 * 60),
        ..after_scale_out(NOW - 100)
    });
    assert_eq!(d.desired, 6);
}

#[test]
fn the_controller_default_delay_applies_when_the_spec_has_none() {
    let d = decide(&DesiredInput {
        default_scale_down_delay: mins(30),
        ..after_scale_out(NOW - 20)
    });
    assert_eq!(d.desired, 6);
}

#[test]
fn a_zero_or_negative_delay_allows_an_immediate_scale_down() {
    for secs in [0, -30] {
        let d = decide(&DesiredInput {
            scale_down_delay_seconds: Some(secs),
            ..after_scale_out(NOW)
        });
        assert_eq!(d.desired, 2, "delay {secs}");
    }
}

#[test]
fn without_a_recorded_scale_out_nothing_is_held() {
    let d = decide(&DesiredInput {
        last_scale_out: None,
        ..after_scale_out(NOW)
    });
    assert_eq!(d.desired, 2);
}

#[test]
fn the_held_count_respects_a_lowered_max_replicas() {
    let d = decide(&DesiredInput {
        max_replicas: Some(4),
        ..after_scale_out(NOW - 1)
    });
    assert_eq!(d.desired, 4);
}

#[test]
fn a_rise_over_the_previous_count_is_a_scale_out() {
    let d = decide(&DesiredInput {
        suggestion: suggests(3),
        previous_desired: Some(2),
        ..input()
    });
    assert!(d.scale_out);
}

#[test]
fn an_unchanged_count_is_not_a_scale_out() {
    let d = decide(&DesiredInput {
        suggestion: suggests(3),
        previous_desired: Some(3),
        ..input()
    });
    assert!(!d.scale_out);
}

#[test]
fn a_first_decision_is_a_scale_out_only_above_one() {
    let one = decide(&input());
    assert!(!one.scale_out);
    let two = decide(&DesiredInput {
        suggestion: suggests(2),
        ..input()
    });
    assert!(two.scale_out);
}

#[test]
fn ephemeral_targets_get_the_newest_unexpired_reservation_time() {
    let d = decide(&DesiredInput {
        reservations: vec![
            reservation(90, 110),
            reservation(97, 120),
            reservation(99, NOW), // newest, but expired
        ],
        ..input()
    });
    assert_eq!(d.effective_time, Some(t(97)));
}

#[test]
fn a_metrics_demand_capped_at_max_replicas_keeps_the_effective_time_current() {
    // A metric counts 12 jobs for at most 10 runners: 2 wait, so every runner that finishes
    // is to be replaced now, however old the newest reservation is.
    let metric = |replicas| Suggestion {
        replicas: Some(replicas),
        metric: Some(MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns),
        detail: String::new(),
        counted_jobs: None,
    };
    let d = decide(&DesiredInput {
        min_replicas: Some(0),
        suggestion: metric(12),
        reservations: vec![reservation(50, 200)],
        ..input()
    });
    assert_eq!((d.desired, d.backlog), (10, true));
    assert_eq!(d.effective_time, Some(t(NOW)));

    let d = decide(&DesiredInput {
        min_replicas: Some(0),
        suggestion: metric(9),
        reservations: vec![reservation(50, 200)],
        ..input()
    });
    assert_eq!((d.desired, d.backlog), (10, false));
    assert_eq!(d.effective_time, Some(t(50)));

    // The queued-runs metric alone counts jobs: the sets tell from the count how many finished
    // runners the waiting jobs take (`completions_absorbed`), so nothing is refreshed.
    let d = decide(&DesiredInput {
        min_replicas: Some(0),
        suggestion: Suggestion {
            counted_jobs: Some(12),
            ..metric(12)
        },
        reservations: vec![reservation(50, 200)],
        ..input()
    });
    assert_eq!((d.desired, d.backlog), (10, false));
    assert_eq!(d.effective_time, Some(t(50)));
}

#[test]
fn reservations_capped_at_max_replicas_need_no_refresh() {
    // 12 reservations for at most 10 runners: the sets see the 2 waiting jobs in the
    // reservations themselves (`completions_absorbed`), so the time stays the newest
    // reservation's and nothing is rewritten every few seconds.
    let d = decide(&DesiredInput {
        min_replicas: Some(0),
        reservations: (0..12).map(|_| reservation(50, 200)).collect(),
        ..input()
    });
    assert_eq!((d.desired, d.backlog), (10, false));
    assert_eq!(d.effective_time, Some(t(50)));
}

#[test]
fn static_targets_get_no_effective_time() {
    let d = decide(&DesiredInput {
        ephemeral: false,
        reservations: vec![reservation(90, 110)],
        ..input()
    });
    assert_eq!(d.effective_time, None);
}

#[test]
fn without_reservations_the_effective_time_is_left_alone() {
    assert_eq!(decide(&input()).effective_time, None);
}

#[test]
fn the_reason_tells_the_whole_computation() {
    let d = decide(&DesiredInput {
        max_replicas: Some(5),
        suggestion: Suggestion {
            replicas: Some(4),
            metric: Some(MetricKind::PercentageRunnersBusy),
            detail: "3 of 3 runners busy, scale up to 4".into(),
            counted_jobs: None,
        },
        reservations: vec![reservation(90, 110), reservation(90, 110)],
        ..input()
    });
    assert_eq!(
        d.reason,
        "desired 5: 4 suggested by PercentageRunnersBusy (3 of 3 runners busy, scale up to 4) \
         + 2 reserved, capped at maxReplicas 5"
    );
}

#[test]
fn durations_far_in_the_future_do_not_overflow() {
    let d = decide(&DesiredInput {
        default_scale_down_delay: Duration::MAX,
        ..after_scale_out(NOW)
    });
    assert_eq!(d.desired, 6);
}
