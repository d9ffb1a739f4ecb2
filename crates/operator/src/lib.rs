//! The Hangar operator as a library: what the `hangar` binary wires together, importable by
//! integration tests.
//!
//! - [`runner_pod`]: the pod a Runner gets — ARC's pod shape, built by a pure function.
//! - [`authority`]: the GitHub scope and credentials a runner pod may use, from its owner chain.
//! - [`controllers`]: the reconcilers (Runner, runner pods, RunnerReplicaSet, RunnerDeployment).
//! - [`manager`]: reflectors and controllers in one process.
//! - [`context`], [`error`]: what reconcilers share, and how they fail.
//! - [`leader`]: Lease-based leader election among controller replicas.
//! - [`metrics`]: Prometheus metrics and the health endpoints; [`kube_client`]: the Kubernetes
//!   client whose every request is counted by status code.
//! - [`credentials`]: per-resource GitHub credentials; [`conditions`]: status conditions.
//! - [`webhook_server`]: GitHub `workflow_job` deliveries → capacity reservations on autoscalers;
//!   [`pull`]: the leader's recovery of deliveries that were lost, by listing queued jobs;
//!   [`reservation_write`]: the compare-and-swap write of reservations both share.
//! - [`sweep`]: the leader's periodic removal of runner registrations Hangar created and lost.
//! - [`admission`]: admission webhooks (RunnerSet pod token injection, validation) with
//!   self-managed certificates.
//! - [`serve`]: how those three HTTP servers serve: connection cap, timeouts, body limit.

pub mod admission;
pub mod authority;
pub mod conditions;
pub mod context;
pub mod controllers;
pub mod credentials;
pub mod error;
pub mod events;
pub mod kube_client;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod pull;
pub mod reservation_write;
pub mod runner_directory;
pub mod runner_pod;
pub mod serve;
pub mod sweep;
pub mod webhook_server;
