//! The Hangar operator as a library: what the `hangar` binary wires together, importable by
//! integration tests.
//!
//! - [`controllers`]: the reconcilers (Runner, runner pods, RunnerReplicaSet, RunnerDeployment).
//! - [`manager`]: reflectors and controllers in one process.
//! - [`leader`]: Lease-based leader election among controller replicas.
//! - [`webhook_server`]: GitHub `workflow_job` deliveries → capacity reservations on autoscalers;
//!   [`pull`]: the leader's recovery of deliveries that were lost, by listing queued jobs;
//!   [`reservation_write`]: the compare-and-swap write of reservations both share.
//! - [`sweep`]: the leader's periodic removal of runner registrations Hangar created and lost.
//! - [`admission`]: admission webhooks (RunnerSet pod token injection, validation) with
//!   self-managed certificates.
//!
//! Re-exported from `hangar-runtime`, the machinery these share: [`context`] (what every
//! reconciler shares, and its [`clock`]), [`runner_pod`] (the pod a
//! Runner gets), [`authority`] (scope and credentials from the owner chain), [`error`],
//! [`reconciler`] (the skeleton every reconcile runs in), [`metrics`], [`kube_client`],
//! [`credentials`], [`conditions`], [`events`] and [`serve`] (how the three HTTP servers serve).

pub mod admission;
pub mod controllers;
pub mod leader;
pub mod manager;
pub mod pull;
pub mod reservation_write;
pub mod runner_directory;
pub mod sweep;
pub mod webhook_server;

// The shared machinery lives in `hangar-runtime`; these keep `hangar::…` and `crate::…`
// paths valid for the operator, its tests and examples.
pub use hangar_runtime::{
    authority, clock, conditions, context, credentials, error, events, kube_client, metrics,
    reconciler, runner_pod, serve,
};
