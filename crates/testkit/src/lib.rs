//! Test support for Hangar: a real Kubernetes control plane on loopback.
//!
//! Hangar's integration tests and its local demo run against real `etcd`, `kube-apiserver`,
//! `kube-controller-manager` and `kube-scheduler` processes — no mocks of Kubernetes. This crate
//!
//! - knows which versions to run and where their binaries are cached ([`binaries`]), and builds
//!   them from source with the Go toolchain when missing; likewise `helm` for the chart tests
//!   ([`helm`]);
//! - generates a throw-away PKI and kubeconfig ([`pki`]);
//! - starts and stops a control plane, recording the PIDs it started so that it never stops
//!   anything else, and restarts its apiserver on demand ([`control_plane`]);
//! - puts a fault-injecting HTTPS proxy between clients and that apiserver: watch disconnects,
//!   410 Gone, write conflicts ([`fault_proxy`]);
//! - gives each test binary a cluster — the one named by `HANGAR_TEST_KUBECONFIG`, or one of its
//!   own that dies with the test process ([`cluster`]) — and each test its own namespace
//!   ([`namespace`]), with Hangar's CRDs installed ([`crds`]), and deletes what a test left
//!   on the shared control plane from `Drop`, also on panic ([`cleanup`]);
//! - waits for what happens asynchronously, saying what it waited for when it gives up
//!   ([`eventually`]), and talks plain HTTP to Hangar's servers, webhooks signed as GitHub
//!   signs them ([`http`]);
//! - gives IO code the clocks tests move instead of the system clock ([`clock`]).
//!
//! It is a dev-dependency and a library for `xtask`; product crates never depend on it.

pub mod arc;
pub mod binaries;
pub mod cleanup;
pub mod clock;
pub mod cluster;
pub mod control_plane;
pub mod crds;
pub mod eventually;
pub mod fault_proxy;
pub mod helm;
pub mod http;
pub mod namespace;
pub mod pki;

pub use binaries::{Binaries, ETCD_VERSION, KUBERNETES_VERSION};
pub use cluster::TestCluster;
pub use control_plane::{ControlPlane, StartOptions};
pub use helm::{HELM_VERSION, Helm};
pub use namespace::TestNamespace;
