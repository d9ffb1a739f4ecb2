//! The machinery every part of the Hangar operator shares — controllers, admission webhooks
//! and the GitHub webhook server — and that holds no controller's state.
//!
//! Contract: this crate depends on `hangar-core`, `hangar-api` and `hangar-github` only, never
//! on the parts built on it, so what it offers can be used by each of them without an import
//! cycle. Decisions belong in `hangar-core`; what is here observes, applies or serves.
//!
//! - [`context`]: what every reconciler shares; [`clock`]: where it reads `now` from.
//! - [`runner_pod`]: the pod a Runner gets — ARC's pod shape, built by a pure function.
//! - [`authority`]: the GitHub scope and credentials a runner pod may use, from its owner chain.
//! - [`error`]: how reconcilers fail, and per-object back-off.
//! - [`reconciler`]: the one skeleton every reconcile runs in: span, metrics, error policy.
//! - [`metrics`]: Prometheus metrics and the health endpoints; [`kube_client`]: the Kubernetes
//!   client whose every request is counted by status code.
//! - [`credentials`]: per-resource GitHub credentials; [`conditions`]: status conditions;
//!   [`events`]: Kubernetes Events, coalesced per set.
//! - [`managers`]: the field manager of each writer.
//! - [`pod`]: what a runner pod says, read into core's terms, and the slim `RunnerPod` the
//!   caches hold; [`github_runners`]: what GitHub last said about each registered runner.
//! - [`registration`]: how runner pods get their registration credential, and its names.
//! - [`reservations`]: the compare-and-swap write of an autoscaler's capacity reservations.
//! - [`retirement`]: what deleted owners and their pods say about retiring runners.
//! - [`status_pace`]: a set's status writes (and an autoscaler's new generation), at most one
//!   per object a second.
//! - [`serve`]: how the operator's HTTP servers serve: connection cap, timeouts, body limit.
//! - [`watch`]: one watch per kind feeding a store and the controllers it triggers.

pub mod authority;
pub mod clock;
pub mod conditions;
pub mod context;
pub mod credentials;
pub mod error;
pub mod events;
pub mod github_runners;
pub mod kube_client;
pub mod managers;
pub mod metrics;
pub mod observations;
pub mod pod;
pub mod reconciler;
pub mod registration;
pub mod reservations;
pub mod retirement;
pub mod runner_pod;
pub mod serve;
pub mod status_pace;
pub mod watch;
pub mod workflow_runs;
