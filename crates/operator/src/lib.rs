//! The Hangar operator as a library: what the `hangar` binary wires together, importable by
//! integration tests.
//!
//! - [`runner_pod`]: the pod a Runner gets — ARC's pod shape, built by a pure function.

pub mod runner_pod;
