//! The CRD types in the core's terms: what `hangar_core` decides on, converted from what the
//! user wrote and back.
//!
//! Contract: pure mappings, no IO. A field the core needs but the user left out gets ARC's
//! meaning (a missing reservation time is the epoch, so such a reservation never counts, as Go's
//! zero time did); a value the core cannot take is an error naming the list entry and field.

use std::time::SystemTime;

use hangar_core::autoscaler::metrics::{MetricField, parse_decimal};
use hangar_core::autoscaler::{
    CheckRunFilter, Frequency, JobKey, Metric, MetricKind, PullRequestFilter, Recurrence,
    Reservation, ScheduledOverride, TriggerView,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::horizontal_runner_autoscaler::{
    CapacityReservation, MetricSpec, MetricType, RecurrenceFrequency,
    ScheduledOverride as ApiOverride,
};

/// A Kubernetes time as a `SystemTime`.
fn system_time(t: &Time) -> SystemTime {
    SystemTime::from(t.0)
}

/// An autoscaler's stored `spec.capacityReservations`, oldest first, as the core sees them.
pub fn reservations_of(hra: &crate::HorizontalRunnerAutoscaler) -> Vec<Reservation> {
    hra.spec
        .capacity_reservations
        .iter()
        .flatten()
        .map(reservation_of)
        .collect()
}

/// A stored reservation as the core sees it. Missing times count as the epoch (never active),
/// as Go's zero time did in ARC; a negative replica count as zero.
pub fn reservation_of(r: &CapacityReservation) -> Reservation {
    Reservation {
        name: r.name.clone(),
        effective_time: r
            .effective_time
            .as_ref()
            .map_or(SystemTime::UNIX_EPOCH, system_time),
        expiration_time: r
            .expiration_time
            .as_ref()
            .map_or(SystemTime::UNIX_EPOCH, system_time),
        replicas: r.replicas.and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
        job: r
            .job_id
            .and_then(|id| u64::try_from(id).ok())
            .map(|id| JobKey {
                id,
                attempt: r
                    .run_attempt
                    .and_then(|a| u32::try_from(a).ok())
                    .unwrap_or(1),
            }),
        delivery: r.delivery_id.clone(),
        runner: r.runner_name.clone(),
        trigger: r.trigger.clone(),
    }
}

/// A core reservation in the API's shape.
pub fn capacity_reservation(r: &Reservation) -> CapacityReservation {
    let time = |t: SystemTime| jiff::Timestamp::try_from(t).ok().map(Time);
    CapacityReservation {
        name: r.name.clone(),
        effective_time: time(r.effective_time),
        expiration_time: time(r.expiration_time),
        replicas: Some(i32::try_from(r.replicas).unwrap_or(i32::MAX)),
        job_id: r.job.and_then(|j| i64::try_from(j.id).ok()),
        run_attempt: r.job.and_then(|j| i32::try_from(j.attempt).ok()),
        delivery_id: r.delivery.clone(),
        runner_name: r.runner.clone(),
        trigger: r.trigger.clone(),
    }
}

/// An autoscaler's `spec.scaleUpTriggers` in the core's terms. A `duration` that does not parse
/// (the CRD's pattern rejects most) counts as unset.
pub fn trigger_views(hra: &crate::HorizontalRunnerAutoscaler) -> Vec<TriggerView> {
    hra.spec
        .scale_up_triggers
        .iter()
        .flatten()
        .map(|t| {
            let event = t.github_event.as_ref();
            TriggerView {
                workflow_job: event.is_some_and(|e| e.workflow_job.is_some()),
                check_run: event
                    .and_then(|e| e.check_run.as_ref())
                    .map(|c| CheckRunFilter {
                        types: c.types.clone().unwrap_or_default(),
                        status: c.status.clone(),
                        names: c.names.clone().unwrap_or_default(),
                        repositories: c.repositories.clone().unwrap_or_default(),
                    }),
                pull_request: event.and_then(|e| e.pull_request.as_ref()).map(|p| {
                    PullRequestFilter {
                        types: p.types.clone().unwrap_or_default(),
                        branches: p.branches.clone().unwrap_or_default(),
                    }
                }),
                push: event.is_some_and(|e| e.push.is_some()),
                amount: t.amount,
                duration: t
                    .parsed_duration()
                    .and_then(Result::ok)
                    .map(std::time::Duration::from),
            }
        })
        .collect()
}

/// One `spec.metrics` entry in the core's terms; the error names the entry and field.
pub fn metric_of(index: usize, spec: &MetricSpec) -> Result<Metric, String> {
    let kind = match spec.type_ {
        Some(MetricType::TotalNumberOfQueuedAndInProgressWorkflowRuns) => {
            MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns
        }
        Some(MetricType::PercentageRunnersBusy) => MetricKind::PercentageRunnersBusy,
        None => return Err(format!("metrics[{index}].type is required")),
    };
    let decimal = |field, value: &Option<String>| {
        parse_decimal(field, value.as_deref()).map_err(|e| e.to_string())
    };
    Ok(Metric {
        kind,
        repository_names: spec.repository_names.clone().unwrap_or_default(),
        scale_up_threshold: decimal(MetricField::ScaleUpThreshold, &spec.scale_up_threshold)?,
        scale_down_threshold: decimal(MetricField::ScaleDownThreshold, &spec.scale_down_threshold)?,
        scale_up_factor: decimal(MetricField::ScaleUpFactor, &spec.scale_up_factor)?,
        scale_down_factor: decimal(MetricField::ScaleDownFactor, &spec.scale_down_factor)?,
        scale_up_adjustment: spec.scale_up_adjustment,
        scale_down_adjustment: spec.scale_down_adjustment,
    })
}

/// `spec.scheduledOverrides` in the core's terms.
pub fn scheduled_overrides(overrides: &[ApiOverride]) -> Result<Vec<ScheduledOverride>, String> {
    overrides
        .iter()
        .enumerate()
        .map(|(index, o)| {
            let min_replicas = o
                .min_replicas
                .map(|m| {
                    u32::try_from(m).map_err(|_| {
                        format!(
                            "scheduledOverrides[{index}].minReplicas is {m}; it must be 0 or more"
                        )
                    })
                })
                .transpose()?;
            let recurrence = o.recurrence_rule.as_ref().and_then(|rule| {
                let frequency = match rule.frequency? {
                    RecurrenceFrequency::Daily => Frequency::Daily,
                    RecurrenceFrequency::Weekly => Frequency::Weekly,
                    RecurrenceFrequency::Monthly => Frequency::Monthly,
                    RecurrenceFrequency::Yearly => Frequency::Yearly,
                };
                Some(Recurrence {
                    frequency,
                    until: rule.until_time.as_ref().map(system_time),
                })
            });
            Ok(ScheduledOverride {
                start: system_time(&o.start_time),
                end: system_time(&o.end_time),
                min_replicas,
                recurrence,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn reservations_round_trip_and_missing_times_never_count() {
        let r = Reservation {
            name: None,
            effective_time: at(1_700_000_000),
            expiration_time: at(1_700_000_600),
            replicas: 1,
            job: None,
            delivery: None,
            runner: None,
            trigger: None,
        };
        assert_eq!(reservation_of(&capacity_reservation(&r)), r);
        let slack = Reservation {
            replicas: 3,
            delivery: Some("d-push".into()),
            trigger: Some("push".into()),
            ..r.clone()
        };
        assert_eq!(reservation_of(&capacity_reservation(&slack)), slack);
        let tombstone = Reservation {
            replicas: 0,
            job: Some(JobKey { id: 7, attempt: 2 }),
            delivery: Some("d-7".into()),
            runner: Some("pool-x7k2p".into()),
            ..r.clone()
        };
        let stored = capacity_reservation(&tombstone);
        assert_eq!(
            (
                stored.job_id,
                stored.run_attempt,
                stored.delivery_id.as_deref()
            ),
            (Some(7), Some(2), Some("d-7"))
        );
        assert_eq!(reservation_of(&stored), tombstone);
        let empty = reservation_of(&CapacityReservation::default());
        assert!(!empty.is_active(at(1)));
        assert_eq!(empty.replicas, 0);
    }

    #[test]
    fn metric_strings_are_parsed_and_errors_name_the_field() {
        let spec = MetricSpec {
            type_: Some(MetricType::PercentageRunnersBusy),
            scale_up_threshold: Some("0.75".into()),
            ..MetricSpec::default()
        };
        let m = metric_of(0, &spec).unwrap();
        assert_eq!(m.kind, MetricKind::PercentageRunnersBusy);
        assert_eq!(m.scale_up_threshold, Some(0.75));
        let bad = MetricSpec {
            scale_down_factor: Some("lots".into()),
            ..spec
        };
        assert!(metric_of(1, &bad).unwrap_err().contains("scaleDownFactor"));
        assert!(
            metric_of(2, &MetricSpec::default())
                .unwrap_err()
                .contains("metrics[2].type")
        );
    }

    #[test]
    fn recurrence_without_frequency_happens_once() {
        let o: ApiOverride = serde_json::from_value(serde_json::json!({
            "startTime": "2024-05-04T09:00:00Z",
            "endTime": "2024-05-04T17:00:00Z",
            "minReplicas": 3,
            "recurrenceRule": {}
        }))
        .unwrap();
        let core = scheduled_overrides(&[o]).unwrap();
        assert_eq!(core[0].min_replicas, Some(3));
        assert_eq!(core[0].recurrence, None);
    }
}
