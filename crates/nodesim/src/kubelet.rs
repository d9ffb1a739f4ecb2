//! The kubelet of one simulated node: a pod watch feeding one worker per pod.
//!
//! Each node watches the pods bound to it (`spec.nodeName=<node>`, as a kubelet does) and runs
//! a [`worker`] task per pod UID, handing it every newer version of the pod. A pod's worker
//! owns its container tasks; when the pod object disappears the worker is dropped and its
//! containers with it. After a watch restart, workers of pods missing from the relist are
//! dropped too.

mod container;
mod worker;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{AbortHandle, JoinSet};

use crate::config::NodeSimConfig;
use crate::env::ObjectSource;
use crate::node::NodeIdentity;
use crate::program::Exit;
use crate::writer::{Stats, Writer};

/// What every node of one simulator shares.
pub(crate) struct Shared {
    pub client: Client,
    pub config: NodeSimConfig,
    pub writer: Writer,
    pub objects: Arc<dyn ObjectSource>,
    pub stats: Arc<Stats>,
    pub registry: Registry,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// One simulated node's runtime state.
#[derive(Debug)]
pub(crate) struct NodeRuntime {
    pub id: NodeIdentity,
    pub ips: Arc<IpPool>,
    pub shared: Arc<Shared>,
    /// Pods with a worker on this node (for the simulator's own scheduler).
    pub pods: AtomicUsize,
    /// False once the node has failed.
    pub up: AtomicBool,
    /// False while the node reports NotReady (it runs its pods but takes no new ones).
    pub ready: AtomicBool,
}

/// A request to a pod's worker from the simulator's API.
#[derive(Debug)]
pub(crate) enum Command {
    /// End the named container's run now with `exit` (an injected fault).
    Kill {
        container: String,
        exit: Exit,
        reply: oneshot::Sender<Result<(), String>>,
    },
}

/// A pod's namespace and name.
type PodKey = (String, String);
/// A worker's pod UID and command channel.
type Route = (String, mpsc::UnboundedSender<Command>);

/// Routes commands to pod workers by namespace and name.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    workers: Mutex<HashMap<PodKey, Route>>,
}

impl Registry {
    fn insert(&self, key: PodKey, uid: String, tx: mpsc::UnboundedSender<Command>) {
        self.lock().insert(key, (uid, tx));
    }

    fn remove(&self, key: &PodKey, uid: &str) {
        let mut workers = self.lock();
        if workers.get(key).is_some_and(|(u, _)| u == uid) {
            workers.remove(key);
        }
    }

    /// The command channel of the worker for pod `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<mpsc::UnboundedSender<Command>> {
        let key = (namespace.to_owned(), name.to_owned());
        self.lock().get(&key).map(|(_, tx)| tx.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PodKey, Route>> {
        self.workers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A node's pod IPs (`.2` to `.254` of its /24), handed out round-robin.
#[derive(Debug)]
pub(crate) struct IpPool {
    prefix: String,
    state: Mutex<(BTreeSet<u8>, u8)>,
}

/// A pod IP, returned to its pool on drop.
#[derive(Debug)]
pub(crate) struct IpLease {
    pool: Arc<IpPool>,
    octet: u8,
}

impl IpPool {
    pub fn new(prefix: String) -> Arc<Self> {
        Arc::new(Self {
            prefix,
            state: Mutex::new(((2..=254).collect(), 2)),
        })
    }

    pub fn allocate(self: &Arc<Self>) -> Option<IpLease> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (free, cursor) = &mut *state;
        let octet = free
            .range(*cursor..)
            .next()
            .or_else(|| free.iter().next())
            .copied()?;
        free.remove(&octet);
        *cursor = octet.wrapping_add(1);
        Some(IpLease {
            pool: self.clone(),
            octet,
        })
    }
}

impl IpLease {
    pub fn ip(&self) -> String {
        format!("{}{}", self.pool.prefix, self.octet)
    }
}

impl Drop for IpLease {
    fn drop(&mut self) {
        let mut state = self.pool.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0.insert(self.octet);
    }
}

struct WorkerHandle {
    key: PodKey,
    updates: watch::Sender<Arc<Pod>>,
    abort: AbortHandle,
}

/// Watches the node's pods and runs their workers, until dropped.
pub(crate) async fn run_pods(node: Arc<NodeRuntime>) {
    let api: Api<Pod> = Api::all(node.shared.client.clone());
    let selector = format!("spec.nodeName={}", node.id.name);
    let mut events = watcher(api, watcher::Config::default().fields(&selector))
        .default_backoff()
        .boxed();
    let mut workers: HashMap<String, WorkerHandle> = HashMap::new();
    let mut tasks = JoinSet::new();
    let mut relisted: Option<HashSet<String>> = None;
    let registry = &node.shared.registry;
    let stop = |uid: &str, handle: WorkerHandle| {
        handle.abort.abort();
        registry.remove(&handle.key, uid);
        node.pods.fetch_sub(1, Ordering::Relaxed);
    };

    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => relisted = Some(HashSet::new()),
            Ok(Event::InitApply(pod)) => {
                if let (Some(seen), Some(uid)) = (&mut relisted, &pod.metadata.uid) {
                    seen.insert(uid.clone());
                }
                dispatch(&node, pod, &mut workers, &mut tasks);
            }
            Ok(Event::InitDone) => {
                if let Some(seen) = relisted.take() {
                    let gone: Vec<String> = workers
                        .keys()
                        .filter(|uid| !seen.contains(*uid))
                        .cloned()
                        .collect();
                    for uid in gone {
                        if let Some(handle) = workers.remove(&uid) {
                            stop(&uid, handle);
                        }
                    }
                }
            }
            Ok(Event::Apply(pod)) => dispatch(&node, pod, &mut workers, &mut tasks),
            Ok(Event::Delete(pod)) => {
                let uid = pod.metadata.uid.unwrap_or_default();
                if let Some(handle) = workers.remove(&uid) {
                    stop(&uid, handle);
                }
            }
            Err(e) => tracing::warn!(node = %node.id.name, error = %e, "pod watch failed"),
        }
        while tasks.try_join_next().is_some() {}
    }
}

fn dispatch(
    node: &Arc<NodeRuntime>,
    pod: Pod,
    workers: &mut HashMap<String, WorkerHandle>,
    tasks: &mut JoinSet<()>,
) {
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    let pod = Arc::new(pod);
    if let Some(handle) = workers.get(&uid) {
        handle.updates.send_replace(pod);
        return;
    }
    let key = (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    );
    let (updates, updates_rx) = watch::channel(pod.clone());
    let (commands, commands_rx) = mpsc::unbounded_channel();
    let worker = worker::PodWorker::new(node.clone(), pod, updates_rx, commands_rx);
    let abort = tasks.spawn(worker.run());
    node.shared
        .registry
        .insert(key.clone(), uid.clone(), commands);
    node.pods.fetch_add(1, Ordering::Relaxed);
    workers.insert(
        uid,
        WorkerHandle {
            key,
            updates,
            abort,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_ips_are_unique_round_robin_and_recycled() {
        let pool = IpPool::new("10.1.2.".to_owned());
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        assert_eq!((a.ip().as_str(), b.ip().as_str()), ("10.1.2.2", "10.1.2.3"));
        drop(a);
        assert_eq!(
            pool.allocate().unwrap().ip(),
            "10.1.2.4",
            "no immediate reuse"
        );
        let rest: Vec<IpLease> = std::iter::from_fn(|| pool.allocate()).collect();
        assert_eq!(rest.len(), 252, "253 addresses, one held by b");
        assert!(rest.iter().all(|l| l.ip() != b.ip()));
    }
}
