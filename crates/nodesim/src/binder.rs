//! Optional scheduling by the simulator itself: pods that name the simulator's scheduler
//! (`spec.schedulerName`) are bound to its nodes with a `pods/binding` POST, as
//! kube-scheduler would — which ignores such pods.
//!
//! The choice is deliberately simple: round-robin over nodes that are up, match the pod's
//! `nodeSelector` and have fewer pods than their `pods` capacity. CPU and memory requests,
//! affinity and taints are not considered (the pod asked for this scheduler by name).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::kubelet::{NodeRuntime, Shared};
use crate::node::node_object;
use crate::writer::{RateLimiter, bump};

/// Binds pending pods with `spec.schedulerName == scheduler`, until dropped.
pub(crate) async fn run(
    shared: Arc<Shared>,
    nodes: Vec<Arc<NodeRuntime>>,
    scheduler: String,
    limiter: Arc<RateLimiter>,
) {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let selector = format!("spec.schedulerName={scheduler},spec.nodeName=");
    let mut pods = watcher(api, watcher::Config::default().fields(&selector))
        .default_backoff()
        .applied_objects()
        .boxed();
    let labels: Vec<BTreeMap<String, String>> = nodes
        .iter()
        .map(|n| {
            let object = node_object(&shared.config, &n.id);
            object.metadata.labels.unwrap_or_default()
        })
        .collect();
    let capacity = usize::try_from(shared.config.node.pods).unwrap_or(usize::MAX);
    let permits = Arc::new(Semaphore::new(shared.config.api.writers));
    let mut binds = JoinSet::new();
    let mut next = 0usize;

    while let Some(pod) = pods.next().await {
        while binds.try_join_next().is_some() {}
        let pod = match pod {
            Ok(pod) => pod,
            Err(e) => {
                tracing::warn!(error = %e, "watch of unscheduled pods failed");
                continue;
            }
        };
        let spec = pod.spec.as_ref();
        if pod.metadata.deletion_timestamp.is_some()
            || spec.and_then(|s| s.node_name.as_ref()).is_some()
        {
            continue;
        }
        let wanted = spec
            .and_then(|s| s.node_selector.clone())
            .unwrap_or_default();
        let eligible = |i: usize| {
            let node = &nodes[i];
            node.up.load(Ordering::Relaxed)
                && node.ready.load(Ordering::Relaxed)
                && node.pods.load(Ordering::Relaxed) < capacity
                && wanted.iter().all(|(k, v)| labels[i].get(k) == Some(v))
        };
        let Some(chosen) = (0..nodes.len())
            .map(|k| (next + k) % nodes.len())
            .find(|i| eligible(*i))
        else {
            tracing::info!(pod = ?pod.metadata.name, "no simulated node fits the pod; leaving it pending");
            continue;
        };
        next = chosen + 1;
        let node_name = nodes[chosen].id.name.clone();
        let shared = shared.clone();
        let limiter = limiter.clone();
        let permits = permits.clone();
        binds.spawn(async move {
            let Ok(_permit) = permits.acquire().await else {
                return;
            };
            limiter.acquire().await;
            bind(&shared, &pod, &node_name).await;
        });
    }
}

async fn bind(shared: &Shared, pod: &Pod, node: &str) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            uid: pod.metadata.uid.clone(),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Node".to_owned()),
            name: Some(node.to_owned()),
            ..ObjectReference::default()
        },
    };
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
    let result: kube::Result<serde_json::Value> = api
        .create_subresource("binding", &name, &PostParams::default(), &binding)
        .await;
    match result {
        Ok(_) => bump(&shared.stats.bindings),
        // Already bound (a duplicate event), or gone.
        Err(kube::Error::Api(s)) if s.is_conflict() || s.is_not_found() => {}
        Err(e) => {
            tracing::warn!(pod = %format!("{namespace}/{name}"), node, error = %e, "binding failed")
        }
    }
}
