//! Runner registration rules shared by the admission webhook and the controllers: when a
//! registration token can still be handed out, and what to do when GitHub refuses a JIT
//! configuration because a runner of that name exists.
//!
//! Contract:
//! - a token is handed out only while it stays valid for at least the given minimum lifetime
//!   after `now` (a runner that registers with it must not find it expired); an expired token
//!   is never fresh;
//! - after a 409 for a JIT configuration, a busy runner of that name is never touched (the pod
//!   is refused), an idle orphan is deleted and the configuration asked for again, a runner
//!   gone meanwhile means asking again — until [`MAX_GENERATE_ATTEMPTS`] requests were made,
//!   then the pod is refused.

use std::time::{Duration, SystemTime};

/// How many times one admission asks GitHub for a JIT configuration (a conflict, then again).
pub const MAX_GENERATE_ATTEMPTS: u32 = 3;

/// Whether a token expiring at `expires_at` is still valid for at least `min_ttl` after `now`.
pub fn token_fresh(expires_at: SystemTime, now: SystemTime, min_ttl: Duration) -> bool {
    expires_at
        .duration_since(now)
        .is_ok_and(|left| left >= min_ttl)
}

/// A runner of the name GitHub refused to generate a configuration for (409), as found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Existing {
    /// Its id.
    pub id: u64,
    /// Whether it runs a job.
    pub busy: bool,
}

/// What to do after GitHub answered 409 to the `attempt`-th request (from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// The runner is gone meanwhile: ask again.
    GenerateAgain,
    /// An idle orphan: delete it, then ask again.
    DeleteThenGenerate(u64),
    /// A runner of that name runs a job: refuse the pod, touch nothing.
    RefuseBusy(u64),
    /// Still a conflict after [`MAX_GENERATE_ATTEMPTS`]: refuse the pod.
    GiveUp,
}

/// The decision after a 409, from the runner found by name (if any). Pure.
pub fn on_conflict(existing: Option<Existing>, attempt: u32) -> OnConflict {
    match existing {
        Some(Existing { id, busy: true }) => OnConflict::RefuseBusy(id),
        _ if attempt >= MAX_GENERATE_ATTEMPTS => OnConflict::GiveUp,
        Some(Existing { id, busy: false }) => OnConflict::DeleteThenGenerate(id),
        None => OnConflict::GenerateAgain,
    }
}

#[cfg(test)]
mod tests;
