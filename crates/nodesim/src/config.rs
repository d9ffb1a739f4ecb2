//! Simulator configuration: the nodes, their timing, the API budget and the programs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;

use crate::annotations::TAINT_KEY;
use crate::program::{Programs, RunnerProgram};

/// Everything [`NodeSim::start`](crate::NodeSim::start) needs besides a client.
#[derive(Clone, Debug)]
pub struct NodeSimConfig {
    /// Node-name prefix and pool label value: nodes are `<pool>-0` ... `<pool>-<n-1>`, each
    /// labelled `nodesim.hangar.dev/pool=<pool>`. Unique per simulator sharing a cluster.
    pub pool: String,
    /// How many nodes to register.
    pub nodes: usize,
    /// What each node offers.
    pub node: NodeShape,
    /// Delays and intervals.
    pub timing: Timing,
    /// Client-side limits on API writes for pods.
    pub api: ApiBudget,
    /// What containers run.
    pub programs: Arc<Programs>,
    /// Bind pending pods whose `spec.schedulerName` is this name to the simulated nodes
    /// (instead of leaving scheduling to kube-scheduler, which ignores such pods).
    pub scheduler_name: Option<String>,
    /// Delete the Node objects (and their Leases) on [`shutdown`](crate::NodeSimHandle::shutdown).
    pub delete_nodes_on_shutdown: bool,
    /// The field manager for every write.
    pub field_manager: String,
}

/// The capacity, labels and taints of every node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeShape {
    /// CPU capacity (a quantity, e.g. `32`).
    pub cpu: String,
    /// Memory capacity (a quantity, e.g. `128Gi`).
    pub memory: String,
    /// Pod capacity (the kubelet's `maxPods`; at most 250: each node has a /24 of pod IPs).
    pub pods: u32,
    /// Ephemeral storage capacity.
    pub ephemeral_storage: String,
    /// Extra node labels (the pool, hostname, OS and architecture labels are always set).
    pub labels: BTreeMap<String, String>,
    /// Node taints; by default one `nodesim.hangar.dev/simulated=true:NoSchedule`, so only
    /// pods that tolerate it land on simulated nodes.
    pub taints: Vec<Taint>,
    /// The kubelet version the nodes report.
    pub kubelet_version: String,
}

/// Delays and intervals. The defaults are a real kubelet's; [`Timing::fast`] suits tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Sandbox creation plus image pulls: how long a new pod stays `ContainerCreating` before
    /// its first container starts. Per pod: annotation `nodesim.hangar.dev/start-delay`.
    pub start_delay: Duration,
    /// How often the node Lease is renewed (kubelet: 10 s).
    pub lease_renew: Duration,
    /// The Lease's `leaseDurationSeconds` (kubelet: 40).
    pub lease_duration_seconds: i32,
    /// How often node status is reported even when unchanged (kubelet: 5 min).
    pub node_status_report: Duration,
    /// First crash-loop back-off delay (kubelet: 10 s); the first restart is immediate.
    pub crash_backoff_initial: Duration,
    /// Crash-loop back-off cap (kubelet: 5 min).
    pub crash_backoff_max: Duration,
    /// First retry delay after a failed image pull or container config (kubelet: 10 s).
    pub pull_backoff_initial: Duration,
    /// Cap of that delay (kubelet: 5 min).
    pub pull_backoff_max: Duration,
    /// The shortest grace period a container is given on SIGTERM (kubelet: 2 s).
    pub min_termination_grace: Duration,
    /// How long one writer keeps retrying a pod write that fails for transient reasons (the
    /// apiserver unreachable, restarting or timing out) before it puts the write back at the
    /// end of the queue and serves other pods. The write is never dropped while its pod
    /// exists: a kubelet's status manager retries an unsynced pod until it lands.
    pub write_retry_window: Duration,
}

/// Client-side limits on the simulator's pod writes (status patches, deletions, bindings).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiBudget {
    /// Sustained writes per second.
    pub qps: f64,
    /// Burst size.
    pub burst: u32,
    /// Concurrent in-flight writes.
    pub writers: usize,
}

impl Default for NodeShape {
    fn default() -> Self {
        Self {
            cpu: "32".to_owned(),
            memory: "128Gi".to_owned(),
            pods: 110,
            ephemeral_storage: "500Gi".to_owned(),
            labels: BTreeMap::new(),
            taints: vec![Taint {
                key: TAINT_KEY.to_owned(),
                value: Some("true".to_owned()),
                effect: "NoSchedule".to_owned(),
                time_added: None,
            }],
            kubelet_version: KUBELET_VERSION.to_owned(),
        }
    }
}

/// The kubelet version nodes report by default: the control plane's version Hangar tests with.
pub const KUBELET_VERSION: &str = "v1.34.3";

impl Default for Timing {
    fn default() -> Self {
        Self {
            start_delay: Duration::from_secs(1),
            lease_renew: Duration::from_secs(10),
            lease_duration_seconds: 40,
            node_status_report: Duration::from_secs(300),
            crash_backoff_initial: Duration::from_secs(10),
            crash_backoff_max: Duration::from_secs(300),
            pull_backoff_initial: Duration::from_secs(10),
            pull_backoff_max: Duration::from_secs(300),
            min_termination_grace: Duration::from_secs(2),
            write_retry_window: Duration::from_secs(60),
        }
    }
}

impl Timing {
    /// Short delays for tests: pods start after 50 ms, back-offs start at 200 ms, the Lease is
    /// renewed every second. Grace periods are not scaled: programs decide how fast they stop.
    pub fn fast() -> Self {
        Self {
            start_delay: Duration::from_millis(50),
            lease_renew: Duration::from_secs(1),
            node_status_report: Duration::from_secs(10),
            crash_backoff_initial: Duration::from_millis(200),
            crash_backoff_max: Duration::from_secs(2),
            pull_backoff_initial: Duration::from_millis(200),
            pull_backoff_max: Duration::from_secs(2),
            write_retry_window: Duration::from_secs(1),
            ..Self::default()
        }
    }
}

impl Default for ApiBudget {
    fn default() -> Self {
        Self {
            qps: 200.0,
            burst: 400,
            writers: 16,
        }
    }
}

impl NodeSimConfig {
    /// `nodes` nodes named `<pool>-<i>` with default shape, timing and programs.
    pub fn new(pool: impl Into<String>, nodes: usize) -> Self {
        Self {
            pool: pool.into(),
            nodes,
            node: NodeShape::default(),
            timing: Timing::default(),
            api: ApiBudget::default(),
            programs: Arc::new(Programs::new()),
            scheduler_name: None,
            delete_nodes_on_shutdown: true,
            field_manager: "nodesim".to_owned(),
        }
    }

    /// Replaces the timing.
    pub fn with_timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// Replaces the programs.
    pub fn with_programs(mut self, programs: Programs) -> Self {
        self.programs = Arc::new(programs);
        self
    }

    /// Replaces the programs with the actions/runner simulation for containers named `runner`
    /// (and the `runner(...)` factory for annotations); everything else, such as the `docker`
    /// sidecar, sleeps until SIGTERM. See [`Programs::with_runner`].
    pub fn with_runner_program(self, runner: RunnerProgram) -> Self {
        self.with_programs(Programs::new().with_runner(runner))
    }

    /// Binds pods with `spec.schedulerName: <name>` itself.
    pub fn with_scheduler_name(mut self, name: impl Into<String>) -> Self {
        self.scheduler_name = Some(name.into());
        self
    }

    /// The name of node `index`.
    pub fn node_name(&self, index: usize) -> String {
        format!("{}-{index}", self.pool)
    }

    /// Checks the values a cluster would reject or the simulator cannot honour.
    pub fn validate(&self) -> Result<(), String> {
        let label_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 50
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !s.starts_with('-')
                && !s.ends_with('-')
        };
        if !label_ok(&self.pool) {
            return Err(format!(
                "pool {:?} must be 1-50 lowercase letters, digits or '-'",
                self.pool
            ));
        }
        if self.nodes == 0 || self.nodes > 250 {
            return Err(format!("nodes must be 1..=250, not {}", self.nodes));
        }
        if self.node.pods == 0 || self.node.pods > 250 {
            return Err(format!(
                "pods per node must be 1..=250, not {}",
                self.node.pods
            ));
        }
        if self.api.qps.is_nan()
            || self.api.qps <= 0.0
            || self.api.burst == 0
            || self.api.writers == 0
        {
            return Err("the API budget needs qps > 0, burst > 0 and writers > 0".to_owned());
        }
        Ok(())
    }
}
