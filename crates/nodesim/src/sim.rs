//! Starting, steering and stopping a simulator.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::{PodSpec, Toleration};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::sync::oneshot;
use tokio::task::{AbortHandle, JoinSet};

use crate::annotations::{POOL_LABEL, TAINT_KEY};
use crate::binder;
use crate::config::NodeSimConfig;
use crate::env::WatchedObjects;
use crate::kubelet::{self, Command, IpPool, NodeRuntime, Registry, Shared};
use crate::node::{self, NodeIdentity, Readiness};
use crate::program::{Exit, Programs};
use crate::writer::{RateLimiter, Stats, StatsSnapshot, Writer};

/// Errors of the simulator's API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is unusable.
    #[error("invalid nodesim configuration: {0}")]
    Config(String),
    /// A Node could not be registered.
    #[error("failed to register node {node}: {source}")]
    Register {
        /// The node's name.
        node: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A Node could not be removed.
    #[error("failed to delete node {node}: {source}")]
    Unregister {
        /// The node's name.
        node: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The simulator has no such node.
    #[error("no node {0} in this simulator")]
    UnknownNode(String),
    /// No pod of that name runs on the simulator's nodes.
    #[error("no pod {namespace}/{name} runs on this simulator")]
    UnknownPod {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
    },
    /// The fault could not be applied.
    #[error("cannot inject a fault into pod {pod}: {reason}")]
    Fault {
        /// `namespace/name`.
        pod: String,
        /// Why.
        reason: String,
    },
}

/// A fault to inject into a running container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The OOM killer ends it: exit 137, reason `OOMKilled`.
    OomKill,
    /// It crashes with this exit code (reason `Error`).
    Crash(i32),
    /// It is killed with SIGKILL: exit 137, reason `Error`.
    Kill,
    /// It ends with this exit.
    Exit(Exit),
}

impl Fault {
    fn into_exit(self) -> Exit {
        match self {
            Fault::OomKill => Exit::oom_killed(),
            Fault::Crash(code) => Exit::code(code).with_message("nodesim: injected crash"),
            Fault::Kill => Exit::killed(),
            Fault::Exit(exit) => exit,
        }
    }
}

/// How a node fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeFailure {
    /// The machine stops: no more heartbeats, its containers vanish without SIGTERM, nothing
    /// more is reported for its pods. The Node object stays (and goes NotReady once the
    /// control plane's node lifecycle controller notices the Lease expiring).
    Unresponsive,
    /// As `Unresponsive`, and the Node object (with its Lease) is deleted, as when a cloud
    /// instance is removed; the control plane's pod GC deletes the orphaned pods.
    Deleted,
    /// The kubelet keeps running and reporting its pods but reports the node `Ready=False`
    /// (reason `KubeletNotReady`, as when the container runtime's network is down), and the
    /// node gets the `node.kubernetes.io/not-ready:NoSchedule` taint. The only failure that
    /// heals: [`NodeSimHandle::recover_node`].
    NotReady,
}

/// What a pod needs to land on the simulator's nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    /// Selects the simulator's nodes (its pool label).
    pub node_selector: BTreeMap<String, String>,
    /// Tolerates the simulated-node taint.
    pub tolerations: Vec<Toleration>,
    /// The simulator's own scheduler, if it binds pods itself.
    pub scheduler_name: Option<String>,
}

impl Placement {
    /// Adds the selector, toleration and scheduler name to `spec`.
    pub fn apply_to(&self, spec: &mut PodSpec) {
        spec.node_selector
            .get_or_insert_default()
            .extend(self.node_selector.clone());
        spec.tolerations
            .get_or_insert_default()
            .extend(self.tolerations.clone());
        if let Some(name) = &self.scheduler_name {
            spec.scheduler_name = Some(name.clone());
        }
    }
}

/// A simulated node whose Lease is this old belongs to a simulator that is gone.
const STALE_NODE_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// The simulator's entry point.
#[derive(Debug)]
pub struct NodeSim;

impl NodeSim {
    /// Registers the configured nodes and starts their kubelets (and the binder, if
    /// configured). The nodes are Ready when this returns.
    pub async fn start(client: Client, config: NodeSimConfig) -> Result<NodeSimHandle, Error> {
        config.validate().map_err(Error::Config)?;
        let stats = Arc::new(Stats::default());
        let limiter = Arc::new(RateLimiter::new(config.api.qps, config.api.burst));
        let mut tasks = JoinSet::new();
        let writer = Writer::start(
            client.clone(),
            &config.api,
            &config.timing,
            limiter.clone(),
            stats.clone(),
            config.field_manager.clone(),
            &mut tasks,
        );
        let shared = Arc::new(Shared {
            objects: Arc::new(WatchedObjects::start(client.clone())),
            client,
            config,
            writer,
            stats,
            registry: Registry::default(),
        });
        let config = &shared.config;
        match node::reap_stale(&shared.client, STALE_NODE_AGE).await {
            Ok(reaped) if !reaped.is_empty() => {
                tracing::info!(nodes = ?reaped, "deleted simulated nodes left behind by a dead simulator");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "failed to look for stale simulated nodes"),
        }
        let since = Timestamp::now();
        let mut nodes = Vec::with_capacity(config.nodes);
        for index in 0..config.nodes {
            let id = NodeIdentity::new(&config.pool, index);
            let object = node::register(&shared.client, config, &id, since)
                .await
                .map_err(|source| Error::Register {
                    node: id.name.clone(),
                    source,
                })?;
            let runtime = Arc::new(NodeRuntime {
                ips: IpPool::new(id.pod_ip_prefix.clone()),
                id,
                shared: shared.clone(),
                pods: AtomicUsize::new(0),
                up: AtomicBool::new(true),
                ready: AtomicBool::new(true),
            });
            let (readiness, reported) = tokio::sync::watch::channel(Readiness::Ready);
            let heartbeat = node::heartbeat(
                shared.client.clone(),
                config.clone(),
                runtime.id.clone(),
                object,
                since,
                reported,
            );
            let pods = kubelet::run_pods(runtime.clone());
            let abort = tasks.spawn(async move {
                tokio::join!(heartbeat, pods);
            });
            tracing::info!(node = %runtime.id.name, ip = %runtime.id.host_ip, "node registered");
            nodes.push(NodeEntry {
                runtime,
                abort,
                readiness: Arc::new(readiness),
            });
        }
        if let Some(name) = &config.scheduler_name {
            let runtimes = nodes.iter().map(|n| n.runtime.clone()).collect();
            tasks.spawn(binder::run(shared.clone(), runtimes, name.clone(), limiter));
        }
        Ok(NodeSimHandle {
            shared,
            nodes,
            tasks,
        })
    }
}

#[derive(Debug)]
struct NodeEntry {
    runtime: Arc<NodeRuntime>,
    abort: AbortHandle,
    /// What the node's heartbeat reports.
    readiness: Arc<tokio::sync::watch::Sender<Readiness>>,
}

/// A running simulator. Dropping it stops every node at once (as [`NodeFailure::Unresponsive`]
/// would, without deleting anything); call [`shutdown`](Self::shutdown) to remove the nodes.
/// Nodes left behind are deleted by the next simulator to start once their Lease is ten
/// minutes old.
#[derive(Debug)]
pub struct NodeSimHandle {
    shared: Arc<Shared>,
    nodes: Vec<NodeEntry>,
    tasks: JoinSet<()>,
}

impl NodeSimHandle {
    /// The configuration it runs with.
    pub fn config(&self) -> &NodeSimConfig {
        &self.shared.config
    }

    /// The names of its nodes.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.runtime.id.name.clone())
            .collect()
    }

    /// The program table (rules can be added while running).
    pub fn programs(&self) -> &Arc<Programs> {
        &self.shared.config.programs
    }

    /// What pods need to run on these nodes: the pool's node selector, a toleration of the
    /// simulated-node taint, and the scheduler name if the simulator binds pods itself.
    pub fn placement(&self) -> Placement {
        let config = &self.shared.config;
        Placement {
            node_selector: [(POOL_LABEL.to_owned(), config.pool.clone())].into(),
            tolerations: vec![Toleration {
                key: Some(TAINT_KEY.to_owned()),
                operator: Some("Exists".to_owned()),
                effect: Some("NoSchedule".to_owned()),
                ..Toleration::default()
            }],
            scheduler_name: config.scheduler_name.clone(),
        }
    }

    /// Counters of what the simulator has done so far.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Ends the current run of `container` in pod `namespace/name` with `fault`. The container
    /// must be running; what happens next follows the pod's restart policy.
    pub async fn inject(
        &self,
        namespace: &str,
        name: &str,
        container: &str,
        fault: Fault,
    ) -> Result<(), Error> {
        let worker =
            self.shared
                .registry
                .get(namespace, name)
                .ok_or_else(|| Error::UnknownPod {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                })?;
        let pod = format!("{namespace}/{name}");
        let (reply, answer) = oneshot::channel();
        let command = Command::Kill {
            container: container.to_owned(),
            exit: fault.into_exit(),
            reply,
        };
        let gone = || Error::Fault {
            pod: pod.clone(),
            reason: "the pod is gone".to_owned(),
        };
        worker.send(command).map_err(|_| gone())?;
        answer
            .await
            .map_err(|_| gone())?
            .map_err(|reason| Error::Fault {
                pod: pod.clone(),
                reason,
            })
    }

    /// Makes node `name` fail (see [`NodeFailure`]). Its kubelet stops for good, unless the
    /// failure is [`NodeFailure::NotReady`].
    pub async fn fail_node(&self, name: &str, failure: NodeFailure) -> Result<(), Error> {
        let entry = self.node(name)?;
        if failure == NodeFailure::NotReady {
            entry.runtime.ready.store(false, Ordering::Relaxed);
            entry.readiness.send_replace(Readiness::NotReady);
            tracing::info!(node = name, "node reports NotReady");
            return Ok(());
        }
        entry.runtime.up.store(false, Ordering::Relaxed);
        entry.abort.abort();
        tracing::info!(node = name, ?failure, "node failed");
        if failure == NodeFailure::Deleted {
            node::unregister(&self.shared.client, name)
                .await
                .map_err(|source| Error::Unregister {
                    node: name.to_owned(),
                    source,
                })?;
        }
        Ok(())
    }

    /// Makes node `name`, [`NodeFailure::NotReady`] before, report Ready again (and lose the
    /// not-ready taint).
    pub fn recover_node(&self, name: &str) -> Result<(), Error> {
        self.recover_node_after(name, std::time::Duration::ZERO)
    }

    /// [`recover_node`](Self::recover_node) `after` from now, in the background.
    pub fn recover_node_after(&self, name: &str, after: std::time::Duration) -> Result<(), Error> {
        let entry = self.node(name)?;
        let (runtime, readiness) = (entry.runtime.clone(), entry.readiness.clone());
        let recover = move || {
            runtime.ready.store(true, Ordering::Relaxed);
            readiness.send_replace(Readiness::Ready);
            tracing::info!(node = %runtime.id.name, "node reports Ready");
        };
        if after.is_zero() {
            recover();
        } else {
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                recover();
            });
        }
        Ok(())
    }

    fn node(&self, name: &str) -> Result<&NodeEntry, Error> {
        self.nodes
            .iter()
            .find(|n| n.runtime.id.name == name)
            .ok_or_else(|| Error::UnknownNode(name.to_owned()))
    }

    /// Stops every kubelet and, if configured, deletes the nodes and their Leases. Pods left on
    /// deleted nodes are removed by the control plane's pod garbage collector.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        self.tasks.shutdown().await;
        if !self.shared.config.delete_nodes_on_shutdown {
            return Ok(());
        }
        for entry in &self.nodes {
            let name = &entry.runtime.id.name;
            node::unregister(&self.shared.client, name)
                .await
                .map_err(|source| Error::Unregister {
                    node: name.clone(),
                    source,
                })?;
        }
        Ok(())
    }
}
