//! Simulated nodes against the real control plane: registration, heartbeats, failures,
//! shutdown.

mod common;

use std::time::Duration;

use common::{container, phase, pod, start, wait_for, when};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::PostParams;
use nodesim::NodeFailure;

fn lease_renewed(lease: &Lease) -> k8s_openapi::jiff::Timestamp {
    lease.spec.as_ref().unwrap().renew_time.clone().unwrap().0
}

#[tokio::test]
async fn nodes_register_ready_with_capacity_taint_and_lease() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let sim = start(client.clone(), "register", 3).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");

    assert_eq!(sim.node_names().len(), 3);
    for name in sim.node_names() {
        let node = nodes.get(&name).await.unwrap();
        let status = node.status.as_ref().unwrap();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True", "{name}");
        assert_eq!(status.allocatable.as_ref().unwrap()["pods"].0, "110");
        let taints = node.spec.as_ref().unwrap().taints.clone().unwrap();
        assert!(
            taints
                .iter()
                .any(|t| t.key == "nodesim.hangar.dev/simulated")
        );
        let lease = leases.get(&name).await.unwrap();
        let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Node", name.as_str())
        );
    }
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn heartbeats_advance_the_lease_renew_time() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let sim = start(client.clone(), "lease", 1).await;
    let name = sim.node_names()[0].clone();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");

    let first = lease_renewed(&leases.get(&name).await.unwrap());
    // Timing::fast renews every second; never sleep for the real 40 s lease duration.
    let later = wait_for(&leases, &name, "a renewal", |l: Option<&Lease>| {
        l.is_some_and(|l| lease_renewed(l) > first)
    })
    .await;
    assert!(lease_renewed(&later) > first);
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_unresponsive_node_stops_renewing_and_stops_running_pods() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "silent", 1).await;
    let name = sim.node_names()[0].clone();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let pods: Api<Pod> = ns.api(client.clone());
    create_busybox(&pods, "p", &sim).await;
    wait_for(&pods, "p", "Running", when(|p| phase(p) == Some("Running"))).await;

    sim.fail_node(&name, NodeFailure::Unresponsive)
        .await
        .unwrap();
    let stopped = lease_renewed(&leases.get(&name).await.unwrap());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(lease_renewed(&leases.get(&name).await.unwrap()), stopped);

    // Nobody finishes the deletion any more: the pod stays Terminating.
    pods.delete("p", &Default::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p = pods.get("p").await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_some());
    sim.shutdown().await.unwrap();
}

/// Creates pod `name` running busybox on the simulator's nodes.
async fn create_busybox(pods: &Api<Pod>, name: &str, sim: &nodesim::NodeSimHandle) {
    pods.create(
        &PostParams::default(),
        &pod(name, &sim.placement(), vec![container("main", "busybox")]),
    )
    .await
    .unwrap();
}

/// The node's Ready condition status and whether it has the not-ready taint.
fn readiness(node: &Node) -> (String, bool) {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone())
        .unwrap_or_default();
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready"));
    (ready, tainted)
}

#[tokio::test]
async fn a_not_ready_node_keeps_its_pods_running_takes_no_new_ones_and_recovers() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "sick", 1).await;
    let name = sim.node_names()[0].clone();
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let pods: Api<Pod> = ns.api(client.clone());
    create_busybox(&pods, "p", &sim).await;
    wait_for(&pods, "p", "Running", when(|p| phase(p) == Some("Running"))).await;

    sim.fail_node(&name, NodeFailure::NotReady).await.unwrap();
    let sick = wait_for(&nodes, &name, "NotReady and tainted", |n: Option<&Node>| {
        n.is_some_and(|n| readiness(n) == ("False".to_owned(), true))
    })
    .await;
    let ready = sick
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .unwrap();
    assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
    // The kubelet lives on: it renews its Lease and its pod keeps running.
    let first = lease_renewed(&leases.get(&name).await.unwrap());
    wait_for(&leases, &name, "a renewal", |l: Option<&Lease>| {
        l.is_some_and(|l| lease_renewed(l) > first)
    })
    .await;
    assert_eq!(phase(&pods.get("p").await.unwrap()), Some("Running"));
    // No new pod lands on it.
    create_busybox(&pods, "q", &sim).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let q = pods.get("q").await.unwrap();
    assert_eq!(q.spec.as_ref().and_then(|s| s.node_name.as_deref()), None);
    assert_eq!(
        readiness(&nodes.get(&name).await.unwrap()),
        ("False".to_owned(), true)
    );

    sim.recover_node(&name).unwrap();
    wait_for(&nodes, &name, "Ready and untainted", |n: Option<&Node>| {
        n.is_some_and(|n| readiness(n) == ("True".to_owned(), false))
    })
    .await;
    wait_for(&pods, "q", "Running", when(|p| phase(p) == Some("Running"))).await;
    assert!(sim.recover_node("nonesuch").is_err());
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_deleted_node_disappears_with_its_lease() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let sim = start(client.clone(), "vanish", 2).await;
    let victim = sim.node_names()[1].clone();

    sim.fail_node(&victim, NodeFailure::Deleted).await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    assert!(nodes.get_opt(&victim).await.unwrap().is_none());
    assert!(leases.get_opt(&victim).await.unwrap().is_none());
    assert!(nodes.get_opt(&sim.node_names()[0]).await.unwrap().is_some());
    assert!(
        sim.fail_node("nonesuch", NodeFailure::Deleted)
            .await
            .is_err()
    );
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_deletes_the_nodes() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let sim = start(client.clone(), "bye", 2).await;
    let names = sim.node_names();
    sim.shutdown().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    for name in names {
        assert!(
            nodes.get_opt(&name).await.unwrap().is_none(),
            "{name} still there"
        );
    }
}
