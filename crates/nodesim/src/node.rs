//! Simulated nodes: registration, Lease and status heartbeats, removal.
//!
//! Registration applies the Node (server-side apply, so a restarted simulator takes its nodes
//! over) and its status: capacity = allocatable, `Ready=True` with the kubelet's reasons, an
//! InternalIP and a pod CIDR. The heartbeat renews the node's Lease in `kube-node-lease` every
//! `lease_renew` and re-reports the status every `node_status_report`, as a kubelet with the
//! node-lease feature does: the Lease is what keeps the node alive for the node lifecycle
//! controller.
//!
//! A kubelet can also report its node `Ready=False` while it goes on running its pods
//! ([`Readiness::NotReady`], as when its container runtime's network is down). The test
//! control plane runs without the node lifecycle controller, so the simulator then puts on the
//! `node.kubernetes.io/not-ready:NoSchedule` taint that controller would add, and takes it off
//! when the node is Ready again.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use crate::annotations::{NODE_ANNOTATION, POOL_LABEL};
use crate::config::NodeSimConfig;

/// Namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// A simulated node's name and addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeIdentity {
    /// The Node's name.
    pub name: String,
    /// Its InternalIP (the pods' `hostIP`).
    pub host_ip: String,
    /// Its pod CIDR (a /24).
    pub pod_cidr: String,
    /// The pod CIDR's first three octets with a trailing dot, e.g. `10.77.3.`.
    pub pod_ip_prefix: String,
}

impl NodeIdentity {
    /// Node `index` of `pool`. Addresses are derived from the pool's name so that simulators
    /// sharing a cluster rarely overlap: host IPs in 172.16.0.0/12, pod CIDRs in 10.64.0.0/10.
    pub fn new(pool: &str, index: usize) -> Self {
        // FNV-1a: stable across runs and platforms.
        let h = pool.bytes().fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        let prefix = format!("10.{}.{}.", 64 + (h >> 12) % 64, index % 256);
        Self {
            name: format!("{pool}-{index}"),
            host_ip: format!("172.{}.{}.{}", 16 + h % 16, (h >> 4) % 256, index % 250 + 1),
            pod_cidr: format!("{prefix}0/24"),
            pod_ip_prefix: prefix,
        }
    }
}

/// The Node object (metadata and spec) the simulator applies.
pub fn node_object(config: &NodeSimConfig, id: &NodeIdentity) -> Node {
    let mut labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", id.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
        ("node.kubernetes.io/instance-type", "nodesim"),
        (POOL_LABEL, config.pool.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    labels.extend(config.node.labels.clone());
    Node {
        metadata: ObjectMeta {
            name: Some(id.name.clone()),
            labels: Some(labels),
            annotations: Some(
                [
                    (NODE_ANNOTATION.to_owned(), config.field_manager.clone()),
                    ("node.alpha.kubernetes.io/ttl".to_owned(), "0".to_owned()),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some(id.pod_cidr.clone()),
            pod_cidrs: Some(vec![id.pod_cidr.clone()]),
            taints: Some(config.node.taints.clone()),
            ..NodeSpec::default()
        }),
        status: None,
    }
}

/// Whether a kubelet reports its node Ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Readiness {
    /// `Ready=True`, reason `KubeletReady`.
    #[default]
    Ready,
    /// `Ready=False`, reason `KubeletNotReady`: the kubelet runs, its pods keep running, but
    /// the node takes no new work.
    NotReady,
}

/// The Node status a kubelet reports; its Ready condition as `readiness` says, conditions
/// changed at `since`, heard of `now`.
pub fn node_status(
    config: &NodeSimConfig,
    id: &NodeIdentity,
    readiness: Readiness,
    since: Timestamp,
    now: Timestamp,
) -> NodeStatus {
    let shape = &config.node;
    let resources: BTreeMap<String, Quantity> = [
        ("cpu", shape.cpu.clone()),
        ("memory", shape.memory.clone()),
        ("pods", shape.pods.to_string()),
        ("ephemeral-storage", shape.ephemeral_storage.clone()),
        ("hugepages-1Gi", "0".to_owned()),
        ("hugepages-2Mi", "0".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Quantity(v)))
    .collect();
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(since)),
    };
    NodeStatus {
        capacity: Some(resources.clone()),
        allocatable: Some(resources),
        conditions: Some(vec![
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            match readiness {
                Readiness::Ready => condition(
                    "Ready",
                    "True",
                    "KubeletReady",
                    "kubelet is posting ready status",
                ),
                Readiness::NotReady => condition(
                    "Ready",
                    "False",
                    "KubeletNotReady",
                    "container runtime network not ready: NetworkReady=false \
                     reason:NetworkPluginNotReady message:Network plugin returns error: \
                     cni plugin not initialized (nodesim: injected)",
                ),
            },
        ]),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".to_owned(),
                address: id.host_ip.clone(),
            },
            NodeAddress {
                type_: "Hostname".to_owned(),
                address: id.name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".to_owned(),
            boot_id: format!("nodesim-{}", id.name),
            container_runtime_version: format!("nodesim://{}", env!("CARGO_PKG_VERSION")),
            kernel_version: "nodesim".to_owned(),
            kube_proxy_version: String::new(),
            kubelet_version: shape.kubelet_version.clone(),
            machine_id: format!("nodesim-{}", id.name),
            operating_system: "linux".to_owned(),
            os_image: "nodesim (simulated node)".to_owned(),
            system_uuid: format!("nodesim-{}", id.name),
            swap: None,
        }),
        phase: None,
        ..NodeStatus::default()
    }
}

/// The node's Lease, owned by the Node so that it goes with it.
pub fn lease(config: &NodeSimConfig, node: &Node, now: Timestamp) -> Lease {
    let name = node.metadata.name.clone().unwrap_or_default();
    Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(LEASE_NAMESPACE.to_owned()),
            owner_references: node.metadata.uid.clone().map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".to_owned(),
                    kind: "Node".to_owned(),
                    name: name.clone(),
                    uid,
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name),
            lease_duration_seconds: Some(config.timing.lease_duration_seconds),
            renew_time: Some(MicroTime(now)),
            ..LeaseSpec::default()
        }),
    }
}

fn apply_params(config: &NodeSimConfig) -> PatchParams {
    PatchParams::apply(&config.field_manager).force()
}

/// Applies the Node and its status, and creates (or renews) its Lease; returns the stored
/// Node.
pub(crate) async fn register(
    client: &Client,
    config: &NodeSimConfig,
    id: &NodeIdentity,
    since: Timestamp,
) -> Result<Node, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    api.patch(
        &id.name,
        &apply_params(config),
        &Patch::Apply(node_object(config, id)),
    )
    .await?;
    let node = report_status(client, config, id, Readiness::Ready, since).await?;
    let node = set_not_ready_taint(&api, node, false).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    renew_lease(&leases, config, &node).await?;
    Ok(node)
}

/// Taints the control plane puts on a node that is not (yet) Ready.
const LIFECYCLE_TAINTS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// Does for a simulated node what the node lifecycle controller does for a real one, which the
/// test control plane runs without: a NotReady node gets the `not-ready:NoSchedule` taint
/// (`not_ready`); a Ready one loses it, and the not-ready taint the API server's admission puts
/// on every new Node.
async fn set_not_ready_taint(
    api: &Api<Node>,
    mut node: Node,
    not_ready: bool,
) -> Result<Node, kube::Error> {
    for _ in 0..5 {
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let mut kept: Vec<_> = taints
            .iter()
            .filter(|t| !LIFECYCLE_TAINTS.contains(&t.key.as_str()))
            .cloned()
            .collect();
        if not_ready {
            kept.push(Taint {
                key: LIFECYCLE_TAINTS[0].to_owned(),
                effect: "NoSchedule".to_owned(),
                time_added: None,
                value: None,
            });
        }
        let same = |a: &[Taint], b: &[Taint]| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(a, b)| a.key == b.key && a.effect == b.effect)
        };
        if same(&kept, &taints) {
            return Ok(node);
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": node.metadata.resource_version },
            "spec": { "taints": kept },
        });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(patched) => return Ok(patched),
            Err(kube::Error::Api(s)) if s.is_conflict() => node = api.get(&name).await?,
            Err(e) => return Err(e),
        }
    }
    Ok(node)
}

async fn report_status(
    client: &Client,
    config: &NodeSimConfig,
    id: &NodeIdentity,
    readiness: Readiness,
    since: Timestamp,
) -> Result<Node, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let status = Node {
        metadata: ObjectMeta {
            name: Some(id.name.clone()),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(node_status(config, id, readiness, since, Timestamp::now())),
    };
    api.patch_status(&id.name, &apply_params(config), &Patch::Apply(status))
        .await
}

/// Keeps the node alive: renews its Lease and re-reports its status, forever; reports at once
/// when `readiness` changes (with the taint that goes with it).
pub(crate) async fn heartbeat(
    client: Client,
    config: NodeSimConfig,
    id: NodeIdentity,
    node: Node,
    mut since: Timestamp,
    mut readiness: tokio::sync::watch::Receiver<Readiness>,
) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let nodes: Api<Node> = Api::all(client.clone());
    let mut renew = tokio::time::interval(config.timing.lease_renew);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut report = tokio::time::interval(config.timing.node_status_report);
    report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    report.tick().await; // registration just reported it
    let mut reported = *readiness.borrow();
    loop {
        tokio::select! {
            _ = renew.tick() => {
                if let Err(e) = renew_lease(&leases, &config, &node).await {
                    tracing::warn!(node = %id.name, error = %e, "failed to renew node lease");
                }
            }
            _ = report.tick() => {
                if let Err(e) = report_status(&client, &config, &id, reported, since).await {
                    tracing::warn!(node = %id.name, error = %e, "failed to report node status");
                }
            }
            changed = readiness.changed() => {
                if changed.is_err() {
                    // The simulator is gone; its task is about to be stopped.
                    std::future::pending::<()>().await;
                }
                let now = *readiness.borrow_and_update();
                if now == reported {
                    continue;
                }
                reported = now;
                since = Timestamp::now();
                let result = match report_status(&client, &config, &id, reported, since).await {
                    Ok(node) => set_not_ready_taint(&nodes, node, reported == Readiness::NotReady)
                        .await
                        .map(drop),
                    Err(e) => Err(e),
                };
                if let Err(e) = result {
                    tracing::warn!(node = %id.name, error = %e, "failed to report node readiness");
                }
            }
        }
    }
}

async fn renew_lease(
    leases: &Api<Lease>,
    config: &NodeSimConfig,
    node: &Node,
) -> Result<(), kube::Error> {
    let fresh = lease(config, node, Timestamp::now());
    let name = fresh.metadata.name.clone().unwrap_or_default();
    let patch = serde_json::json!({ "spec": fresh.spec });
    match leases
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Err(kube::Error::Api(s)) if s.is_not_found() => {
            leases.create(&PostParams::default(), &fresh).await?;
            Ok(())
        }
        other => other.map(drop),
    }
}

/// Deletes simulated nodes (of any pool) whose Lease has not been renewed for `stale`: left
/// behind by a simulator that died without [`shutdown`](crate::NodeSimHandle::shutdown) (a
/// panicking test, a killed process). Returns their names.
pub(crate) async fn reap_stale(
    client: &Client,
    stale: std::time::Duration,
) -> Result<Vec<String>, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let listed = nodes
        .list_metadata(&kube::api::ListParams::default().labels(POOL_LABEL))
        .await?;
    let now = Timestamp::now();
    let mut reaped = Vec::new();
    for node in listed {
        let Some(name) = node.metadata.name else {
            continue;
        };
        let renewed = leases
            .get_opt(&name)
            .await?
            .and_then(|l| l.spec?.renew_time)
            .map(|t| t.0);
        // A node without a Lease yet may be registering right now: judge it by its age.
        let heard = renewed.or(node.metadata.creation_timestamp.map(|t| t.0));
        let age = heard.map(|t| now.duration_since(t).unsigned_abs());
        if age.is_none_or(|age| age > stale) {
            unregister(client, &name).await?;
            reaped.push(name);
        }
    }
    Ok(reaped)
}

/// Deletes the Node and its Lease (missing ones are fine).
pub(crate) async fn unregister(client: &Client, name: &str) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    gone(nodes.delete(name, &DeleteParams::default()).await.map(drop))?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    gone(
        leases
            .delete(name, &DeleteParams::default())
            .await
            .map(drop),
    )
}

fn gone(result: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match result {
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_stable_and_distinct_per_node() {
        let a0 = NodeIdentity::new("sim", 0);
        assert_eq!(a0, NodeIdentity::new("sim", 0));
        let a1 = NodeIdentity::new("sim", 1);
        assert_eq!(a1.name, "sim-1");
        assert_ne!(a0.host_ip, a1.host_ip);
        assert_ne!(a0.pod_cidr, a1.pod_cidr);
        assert!(a1.pod_cidr.starts_with(&a1.pod_ip_prefix));
        assert!(a0.host_ip.starts_with("172."));
    }

    #[test]
    fn nodes_carry_pool_label_taint_and_capacity() {
        let config = NodeSimConfig::new("sim", 2);
        let id = NodeIdentity::new("sim", 1);
        let node = node_object(&config, &id);
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels[POOL_LABEL], "sim");
        assert_eq!(labels["kubernetes.io/hostname"], "sim-1");
        let taints = node.spec.unwrap().taints.unwrap();
        assert_eq!(taints[0].key, "nodesim.hangar.dev/simulated");
        assert_eq!(taints[0].effect, "NoSchedule");

        let t = Timestamp::from_second(1_800_000_000).unwrap();
        let status = node_status(&config, &id, Readiness::Ready, t, t);
        assert_eq!(
            status.allocatable.unwrap()["pods"],
            Quantity("110".to_owned())
        );
        let ready = status
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("True", Some("KubeletReady"))
        );
    }
}
