//! Leader election over a `coordination.k8s.io/v1` Lease: what a replica does next, given the
//! Lease it just read.
//!
//! Contract: [`decide`] never lets a replica take a Lease another holder renewed within its
//! duration; the driver makes the write conditional on the `resourceVersion` it read, so two
//! replicas that both decide to acquire an expired Lease cannot both succeed (the loser gets a
//! 409 and follows). [`still_leading`] is the leader's own fence: a leader that could not renew
//! for `renew_deadline` stops acting *before* the Lease can expire for the others
//! (`renew_deadline < lease duration`), so two leaders never overlap as long as clocks agree to
//! within the difference.
//!
//! Times are wall-clock `SystemTime`s as stored in the Lease (`renewTime`, microseconds).

use std::time::{Duration, SystemTime};

/// What the driver read from the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseView {
    /// `spec.holderIdentity`; `None` or empty when released.
    pub holder: Option<String>,
    /// `spec.renewTime` (or `acquireTime` when never renewed).
    pub renewed: Option<SystemTime>,
    /// `spec.leaseDurationSeconds`.
    pub duration: Duration,
}

/// The next step of one replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderStep {
    /// Create the Lease with us as holder (there is none yet).
    Create,
    /// Take the Lease over: released, or expired by its holder's own duration.
    Acquire,
    /// We hold it: renew.
    Renew,
    /// Someone else holds it; ask again after `retry_after` (when it would expire, bounded by
    /// the caller's retry period).
    Follow {
        /// The current holder.
        holder: String,
        /// Time until the holder's Lease expires unless renewed.
        expires_in: Duration,
    },
}

/// Decides the next step of replica `me` at `now`.
pub fn decide(lease: Option<&LeaseView>, me: &str, now: SystemTime) -> LeaderStep {
    let Some(lease) = lease else {
        return LeaderStep::Create;
    };
    let holder = match lease.holder.as_deref() {
        None | Some("") => return LeaderStep::Acquire,
        Some(holder) => holder,
    };
    if holder == me {
        return LeaderStep::Renew;
    }
    // A Lease without a renew time was never valid: treat it as expired.
    let Some(renewed) = lease.renewed else {
        return LeaderStep::Acquire;
    };
    let expires = renewed + lease.duration;
    match expires.duration_since(now) {
        Ok(left) if !left.is_zero() => LeaderStep::Follow {
            holder: holder.to_owned(),
            expires_in: left,
        },
        _ => LeaderStep::Acquire,
    }
}

/// Whether a leader whose last successful renewal was at `last_renewed` may keep acting at
/// `now`. Past `renew_deadline` it must stop, before others may take the Lease.
pub fn still_leading(last_renewed: SystemTime, now: SystemTime, renew_deadline: Duration) -> bool {
    now.duration_since(last_renewed)
        .map_or(true, |since| since < renew_deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn lease(holder: Option<&str>, renewed: Option<u64>) -> LeaseView {
        LeaseView {
            holder: holder.map(str::to_owned),
            renewed: renewed.map(at),
            duration: Duration::from_secs(15),
        }
    }

    #[test]
    fn decisions() {
        let cases: &[(&str, Option<LeaseView>, u64, LeaderStep)] = &[
            ("no lease yet", None, 0, LeaderStep::Create),
            (
                "released (no holder)",
                Some(lease(None, Some(0))),
                1,
                LeaderStep::Acquire,
            ),
            (
                "released (empty holder)",
                Some(lease(Some(""), Some(0))),
                1,
                LeaderStep::Acquire,
            ),
            (
                "ours",
                Some(lease(Some("me"), Some(0))),
                1,
                LeaderStep::Renew,
            ),
            (
                "ours even if expired",
                Some(lease(Some("me"), Some(0))),
                99,
                LeaderStep::Renew,
            ),
            (
                "theirs, fresh",
                Some(lease(Some("other"), Some(0))),
                5,
                LeaderStep::Follow {
                    holder: "other".into(),
                    expires_in: Duration::from_secs(10),
                },
            ),
            (
                "theirs, expiring now",
                Some(lease(Some("other"), Some(0))),
                15,
                LeaderStep::Acquire,
            ),
            (
                "theirs, expired",
                Some(lease(Some("other"), Some(0))),
                16,
                LeaderStep::Acquire,
            ),
            (
                "theirs, never renewed",
                Some(lease(Some("other"), None)),
                0,
                LeaderStep::Acquire,
            ),
            (
                "theirs, renewed in our future (clock skew)",
                Some(lease(Some("other"), Some(30))),
                0,
                LeaderStep::Follow {
                    holder: "other".into(),
                    expires_in: Duration::from_secs(45),
                },
            ),
        ];
        for (name, lease, now, want) in cases {
            assert_eq!(&decide(lease.as_ref(), "me", at(*now)), want, "{name}");
        }
    }

    #[test]
    fn a_leader_stops_at_its_renew_deadline() {
        let deadline = Duration::from_secs(10);
        assert!(still_leading(at(0), at(9), deadline));
        assert!(!still_leading(at(0), at(10), deadline));
        assert!(!still_leading(at(0), at(60), deadline));
        // A renewal stamped in the future (clock stepped back) keeps leading.
        assert!(still_leading(at(5), at(0), deadline));
    }
}
