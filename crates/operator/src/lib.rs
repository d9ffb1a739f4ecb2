//! The Hangar operator as a library: what the `hangar` binary wires together, importable by
//! integration tests.
//!
//! - [`runner_pod`]: the pod a Runner gets — ARC's pod shape, built by a pure function.
//! - [`controllers`]: the reconcilers (Runner, runner pods, RunnerReplicaSet, RunnerDeployment).
//! - [`manager`]: reflectors and controllers in one process.
//! - [`context`], [`error`]: what reconcilers share, and how they fail.

pub mod context;
pub mod controllers;
pub mod error;
pub mod manager;
pub mod runner_pod;
