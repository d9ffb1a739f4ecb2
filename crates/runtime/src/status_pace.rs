//! Pacing of status writes that only update counts.
//!
//! A set's `replicas`, `readyReplicas` and `busyReplicas` change several times per job (a
//! runner created, registered, busy, idle again, gone), and every change wakes the set's
//! reconcile and then its deployment's. Written at each change, the counts cost the apiserver
//! a write per change; paced, a burst of changes to one object costs one write per
//! [`STATUS_PACE`].
//!
//! Contract: a status whose conditions change is written at once (conditions carry what a user
//! must act on, and the events beside them); a counts-only change waits at most [`STATUS_PACE`]
//! after the object's previous status write, and the reconcile that held it back requeues
//! itself for that moment ([`StatusPace::hold`] says how long). What reads the counts (a
//! rollout waiting for its newest set's ready runners, a deployment summing its sets,
//! `kubectl get`) sees them at most that much later.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The least time between two counts-only status writes of one object.
pub const STATUS_PACE: Duration = Duration::from_secs(1);

/// When each object's status was last written, by `kind/namespace/name`: one small entry per
/// set this process has written, kept for its lifetime.
#[derive(Debug, Default)]
pub struct StatusPace {
    last: Mutex<HashMap<String, Instant>>,
}

impl StatusPace {
    /// How long a counts-only status write of `key` must still wait; `None` when it may go now.
    pub fn hold(&self, key: &str) -> Option<Duration> {
        let last = *self.lock().get(key)?;
        held_for(last.elapsed())
    }

    /// Notes that `key`'s status was written now.
    pub fn wrote(&self, key: &str) {
        self.lock().insert(key.to_owned(), Instant::now());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How long a write must still wait when the last one was `since` ago.
fn held_for(since: Duration) -> Option<Duration> {
    STATUS_PACE
        .checked_sub(since)
        .filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_waits_out_the_pace_since_the_last_one() {
        assert_eq!(held_for(Duration::ZERO), Some(STATUS_PACE));
        assert_eq!(
            held_for(Duration::from_millis(300)),
            Some(STATUS_PACE - Duration::from_millis(300))
        );
        assert_eq!(held_for(STATUS_PACE), None);
        assert_eq!(held_for(STATUS_PACE * 3), None);
    }

    #[test]
    fn an_object_never_written_is_not_held() {
        let pace = StatusPace::default();
        assert_eq!(pace.hold("RunnerReplicaSet/ns/a"), None);
        pace.wrote("RunnerReplicaSet/ns/a");
        assert!(pace.hold("RunnerReplicaSet/ns/a").is_some());
        assert_eq!(pace.hold("RunnerReplicaSet/ns/b"), None, "per object");
    }
}
