//! Shared helpers for nodesim's integration tests: unique pools, pod builders, waiting.

#![allow(dead_code)] // each test binary uses its own subset

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::runtime::wait::{Condition, await_condition};
use nodesim::{NodeSim, NodeSimConfig, NodeSimHandle, Placement, Programs, Timing};
use serde::de::DeserializeOwned;

static POOLS: AtomicU32 = AtomicU32::new(0);

/// A pool name unique in the shared cluster: test prefix, process and counter.
pub fn pool(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        POOLS.fetch_add(1, Ordering::Relaxed)
    )
}

/// Starts a simulator with fast timing and `nodes` nodes.
pub async fn start(client: kube::Client, prefix: &str, nodes: usize) -> NodeSimHandle {
    start_with(
        client,
        NodeSimConfig::new(pool(prefix), nodes),
        Programs::new(),
    )
    .await
}

/// Starts a simulator from `config` (timing made fast) with `programs`.
pub async fn start_with(
    client: kube::Client,
    config: NodeSimConfig,
    programs: Programs,
) -> NodeSimHandle {
    let config = config.with_timing(Timing::fast()).with_programs(programs);
    NodeSim::start(client, config)
        .await
        .expect("simulator starts")
}

/// A container `name` running `image`.
pub fn container(name: &str, image: &str) -> Container {
    Container {
        name: name.to_owned(),
        image: Some(image.to_owned()),
        ..Container::default()
    }
}

/// A pod that lands on the simulator's nodes.
pub fn pod(name: &str, placement: &Placement, containers: Vec<Container>) -> Pod {
    let mut spec = PodSpec {
        containers,
        ..PodSpec::default()
    };
    placement.apply_to(&mut spec);
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// Creates pod `name` (one busybox container, `main`) on `sim`'s nodes and waits until it runs.
pub async fn run_pod(pods: &Api<Pod>, sim: &NodeSimHandle, name: &str) -> Pod {
    pods.create(
        &kube::api::PostParams::default(),
        &pod(name, &sim.placement(), vec![container("main", "busybox")]),
    )
    .await
    .unwrap();
    wait_for(pods, name, "Running", when(|p| phase(p) == Some("Running"))).await
}

/// Adds annotations to a pod.
pub fn annotate(mut pod: Pod, annotations: &[(&str, &str)]) -> Pod {
    let map: BTreeMap<String, String> = annotations
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    pod.metadata.annotations.get_or_insert_default().extend(map);
    pod
}

/// Waits (up to 60 s) until `name` satisfies `cond`; panics with the object's last state.
pub async fn wait_for<K>(api: &Api<K>, name: &str, what: &str, cond: impl Condition<K>) -> K
where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    let waited = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(api.clone(), name, cond),
    )
    .await;
    match waited {
        Ok(Ok(Some(object))) => object,
        Ok(Ok(None)) => panic!("{name} was deleted while waiting for: {what}"),
        Ok(Err(e)) => panic!("watch failed while waiting for {what}: {e}"),
        Err(_) => panic!(
            "timed out waiting for {name}: {what}; last seen: {:#?}",
            api.get_opt(name).await
        ),
    }
}

/// Waits (up to 60 s) until `name` with `uid` is gone.
pub async fn wait_deleted<K>(api: &Api<K>, name: &str, uid: &str)
where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    let waited = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(
            api.clone(),
            name,
            kube::runtime::conditions::is_deleted(uid),
        ),
    )
    .await;
    if waited.is_err() {
        panic!(
            "timed out waiting for {name} to be deleted; last seen: {:#?}",
            api.get_opt(name).await
        );
    }
}

/// The pod's phase.
pub fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

/// A pod condition's status.
pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let found = conditions.iter().find(|c| c.type_ == type_)?;
    Some(found.status.as_str())
}

/// The status of container `name` (regular or init).
pub fn container_status<'a>(
    pod: &'a Pod,
    name: &str,
) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .chain(status.init_container_statuses.iter())
        .flatten()
        .find(|c| c.name == name)
}

/// A condition on a pod, for `wait_for`.
pub fn when(f: impl Fn(&Pod) -> bool) -> impl Condition<Pod> {
    move |obj: Option<&Pod>| obj.is_some_and(&f)
}
