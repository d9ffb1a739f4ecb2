//! Writing capacity reservations: one batch of operations applied to an autoscaler's stored
//! list, shared by the webhook server and the pull recovery ([`crate::pull`]).
//!
//! [`write_operations`] reads the autoscaler (from the cache when given, else by GET), applies
//! the operations with `hangar_core::autoscaler::apply_scale_operations` and writes
//! `spec.capacityReservations` in one JSON patch that tests the list it read: a
//! compare-and-swap on that field alone, so status writes never conflict. A conflict re-reads
//! and retries, at most [`WRITE_ATTEMPTS`] times; any other failure is the caller's to retry.
//! Because every writer goes through here, and reservations name their job, a job is counted
//! once whichever writer (webhook replica, pull) records it first.
//!
//! Reservation times are rounded *up* to the whole second, because the API stores seconds and
//! the target's `effectiveTime` must never look older than the demand it stands for: demand
//! newer than a finished runner is what releases that runner's place at once
//! (`hangar_core::owner_sync`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hangar_api::HorizontalRunnerAutoscaler;
use hangar_core::autoscaler::{
    DEFAULT_RESERVATION_DURATION, JobOp, ReservationUpdate, apply_scale_operations,
    job_trigger_duration,
};
use kube::api::PatchParams;
use kube::{Api, Client};

use hangar_runtime::reservations::{is_conflict, reservations_patch};

use hangar_api::convert::{capacity_reservation, reservations_of, trigger_views};

/// Writes of one batch tried before giving up on conflicts.
pub const WRITE_ATTEMPTS: usize = 4;

/// What [`write_operations`] did.
#[derive(Debug)]
pub enum Written {
    /// The new list is stored.
    Stored(ReservationUpdate),
    /// The operations changed nothing (every job already recorded): nothing to write.
    Unchanged,
    /// The autoscaler no longer exists: nothing to apply the operations to.
    Gone,
}

/// Why the operations are not stored.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Reading the autoscaler failed.
    #[error("failed to read horizontalrunnerautoscaler {object}: {source}")]
    Read {
        /// `namespace/name`.
        object: String,
        /// The apiserver's error.
        source: kube::Error,
    },
    /// The patch failed other than by a conflict.
    #[error(
        "failed to write capacity reservations of horizontalrunnerautoscaler {object}: {source}"
    )]
    Patch {
        /// `namespace/name`.
        object: String,
        /// The apiserver's error.
        source: kube::Error,
    },
    /// Every attempt lost the compare-and-swap.
    #[error(
        "capacity reservations of horizontalrunnerautoscaler {object} changed under {attempts} writes in a row"
    )]
    Contended {
        /// `namespace/name`.
        object: String,
        /// Attempts made.
        attempts: usize,
    },
}

/// Applies `ops` to autoscaler `ns/name`'s reservations and stores the result (see the module
/// docs). `cached` is the autoscaler as a cache holds it, tried first; `now` is read at each
/// attempt; `on_conflict` is called for every lost compare-and-swap (for counters).
#[allow(clippy::too_many_arguments)]
pub async fn write_operations(
    client: &Client,
    ns: &str,
    name: &str,
    mut cached: Option<Arc<HorizontalRunnerAutoscaler>>,
    ops: &[JobOp],
    now: impl Fn() -> SystemTime,
    field_manager: &str,
    mut on_conflict: impl FnMut(),
) -> Result<Written, WriteError> {
    let object = || format!("{ns}/{name}");
    let api = Api::<HorizontalRunnerAutoscaler>::namespaced(client.clone(), ns);
    let params = PatchParams {
        field_manager: Some(field_manager.to_owned()),
        ..PatchParams::default()
    };
    for _ in 0..WRITE_ATTEMPTS {
        let hra = match cached.take() {
            Some(hra) => hra,
            None => match api.get_opt(name).await {
                Ok(Some(hra)) => Arc::new(hra),
                Ok(None) => return Ok(Written::Gone),
                Err(source) => {
                    return Err(WriteError::Read {
                        object: object(),
                        source,
                    });
                }
            },
        };
        let now = ceil_to_second(now());
        let stored = reservations_of(&hra);
        let max = hra.spec.max_replicas.and_then(|m| u32::try_from(m).ok());
        let duration = job_duration(&hra).unwrap_or(DEFAULT_RESERVATION_DURATION);
        let update = apply_scale_operations(&stored, ops, now, max, duration);
        if !update.changed() {
            return Ok(Written::Unchanged);
        }
        let reservations: Vec<_> = update
            .reservations
            .iter()
            .map(capacity_reservation)
            .collect();
        match api
            .patch(name, &params, &reservations_patch(&hra, &reservations))
            .await
        {
            Ok(_) => return Ok(Written::Stored(update)),
            Err(e) if is_conflict(&e) => on_conflict(), // re-read and retry
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Written::Gone),
            Err(source) => {
                return Err(WriteError::Patch {
                    object: object(),
                    source,
                });
            }
        }
    }
    Err(WriteError::Contended {
        object: object(),
        attempts: WRITE_ATTEMPTS,
    })
}

/// The reservation lifetime of an autoscaler that takes part in `workflow_job` scaling; `None`
/// when it does not.
pub fn job_duration(hra: &HorizontalRunnerAutoscaler) -> Option<Duration> {
    job_trigger_duration(&trigger_views(hra))
}

/// `t` rounded up to a whole second.
pub fn ceil_to_second(t: SystemTime) -> SystemTime {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    if since.subsec_nanos() == 0 {
        t
    } else {
        SystemTime::UNIX_EPOCH + Duration::from_secs(since.as_secs() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservation_times_round_up_to_the_second() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_250);
        assert_eq!(
            ceil_to_second(t),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_001)
        );
        let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(5);
        assert_eq!(ceil_to_second(whole), whole);
    }
}
