//! Hangar's decisions, free of IO.
//!
//! Everything here is a pure function of observed state (and, where time matters, an injected
//! `now`). The crate depends on neither a Kubernetes client nor an HTTP stack, so every branch
//! is table-tested in milliseconds and the controllers stay thin drivers that observe, call a
//! function from here, and apply the plan it returns.
//!
//! Modules:
//! - [`authority`]: which GitHub scope and credentials a runner pod may use — only what its
//!   owner chain (Runner, or StatefulSet and RunnerSet) grants, never what the pod says.
//! - [`autoscaler`]: the HorizontalRunnerAutoscaler's replica math, metrics, schedules, capacity
//!   reservations and webhook rules (matching, dedup, batching).
//! - [`clock`]: the [`Clock`] trait through which IO code reads `now` for the decisions here.
//! - [`health`]: whether a runner is healthy, starting, stuck, dead or rejected by GitHub, and
//!   why — a busy runner is always healthy.
//! - [`leader`]: Lease-based leader election — acquire, renew, follow, and when a leader must
//!   stop acting.
//! - [`owner_sync`]: how many runner-pod owners (Runners or StatefulSets) to create or retire,
//!   never killing a busy runner.
//! - [`placeholder`]: the opt-in registration-only runner that keeps jobs queued for a
//!   RunnerDeployment scaled to zero on GitHub versions that fail them otherwise.
//! - [`runner`]: what one reconcile of a Runner does — retire, create its pod, leave it to its
//!   set, check for a vanished pod, or mirror the pod.
//! - [`runner_pod`]: what one reconcile of a runner pod does — release or ignore a pod Hangar
//!   may not act for, unregister and force-delete a deleting one, add the finalizer, look up
//!   the runner's ID, drive a requested unregistration.
//! - [`runner_lookup`]: how a runner pod learns its GitHub runner ID with few runner lists —
//!   from a signed delivery that saw its runner at work, and when a list is worth taking.
//! - [`runner_container`]: where a runner is in its life, from its container's current state —
//!   finished for good, running, or back after an exit in a pod that restarts it — and when to
//!   take a restarting pod's registration credential back.
//! - [`registration`]: when a registration token may still be handed out, and what to do when
//!   GitHub refuses a JIT configuration because a runner of that name exists.
//! - [`retirement`]: when a deleted owner lets go of its finalizer — after its runners left
//!   through unregister-before-delete, or once its retirement timeout forces them out.
//! - [`rollout`]: a RunnerDeployment's surge rollout — which older RunnerReplicaSets to scale
//!   to zero or delete once the newest is ready, and the counts its status reports.
//! - [`scope`]: where a runner registers on GitHub (enterprise, organization or repository) and
//!   the rules a RunnerConfig must satisfy to name exactly one such scope.
//! - [`sweep`]: which runner registrations Hangar created and lost track of (offline, no pod,
//!   named by an owner it knows) to remove from GitHub after a grace period.
//! - [`template_hash`]: stable short hashes naming template versions.
//! - [`unregistration`]: unregister-before-delete, the state machine that waits out busy runners.
//! - [`volumes`]: RunnerSet persistent-volume reuse — which claims to delete and which released
//!   volumes to hand to the next runner.

pub mod authority;
pub mod autoscaler;
pub mod clock;
pub mod health;
pub mod leader;
pub mod owner_sync;
pub mod placeholder;
pub mod registration;
pub mod retirement;
pub mod rollout;
pub mod runner;
pub mod runner_container;
pub mod runner_lookup;
pub mod runner_pod;
pub mod scope;
pub mod sweep;
pub mod template_hash;
pub mod unregistration;
pub mod volumes;

pub use clock::Clock;
pub use scope::{RunnerScope, ScopeError};
