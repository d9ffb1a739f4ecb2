//! nodesim: simulated kubelets for Hangar's tests and demos.
//!
//! The test control plane has a real API server, controller manager and scheduler but no
//! kubelet and no container runtime. nodesim plays the kubelet of N nodes against it:
//!
//! - it registers Nodes and keeps them Ready with Lease and status heartbeats ([`node`]);
//! - it watches the pods bound to each node and runs them (one worker task per pod): after a
//!   start delay, init containers in order, then containers, with container states, phases and
//!   conditions computed by the kubelet's rules ([`status`], [`plan`]); restart policies and
//!   crash-loop back-off; graceful deletion with SIGTERM, grace period and a final delete;
//! - what runs inside a container is a [`ContainerProgram`] chosen per container by annotation
//!   or rule ([`program`]); built-ins cover sleeping sidecars, exits, crashes, OOM kills and
//!   image pulls that never succeed, and [`program::runner`] simulates actions/runner against
//!   ghsim in `runner` containers ([`Programs::with_runner`]);
//! - faults can be injected while running ([`NodeSimHandle::inject`],
//!   [`NodeSimHandle::fail_node`], or [`annotations`]).
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), nodesim::Error> {
//! use nodesim::{NodeSim, NodeSimConfig, Timing};
//! let sim = NodeSim::start(client, NodeSimConfig::new("sim", 3).with_timing(Timing::fast())).await?;
//! let placement = sim.placement(); // node selector + toleration for test pods
//! // ... create pods with `placement.apply_to(&mut spec)` ...
//! sim.shutdown().await?;
//! # Ok(()) }
//! ```

pub mod annotations;
mod binder;
pub mod config;
pub mod env;
mod kubelet;
pub mod node;
pub mod plan;
pub mod program;
mod sim;
pub mod status;
mod writer;

pub use config::{ApiBudget, NodeShape, NodeSimConfig, Timing};
pub use program::{
    ContainerContext, ContainerControl, ContainerIo, ContainerKind, ContainerProgram, Exit,
    Programs, StartFailure,
};
pub use sim::{Error, Fault, NodeFailure, NodeSim, NodeSimHandle, Placement};
pub use writer::{Stats, StatsSnapshot};
