//! The controller manager: reflectors feeding the shared stores, and every reconciler, in one
//! process.
//!
//! Stores are filled by one watch per kind (pods filtered to runner pods by the `actions-runner`
//! label); reconcilers read them instead of listing. Each kube-runtime `Controller` also keeps
//! its own trigger watches — a known duplication to remove once the shared-stream API settles.

use std::sync::Arc;

use futures::StreamExt;
use hangar_api::{Runner, RunnerDeployment, RunnerReplicaSet, label};
use hangar_github::GitHubApi;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tracing::info;

use crate::context::{Clock, Context, Settings, Stores, SystemClock};
use crate::controllers;

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn spawn_store<K>(api: Api<K>, config: watcher::Config) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config))
        .default_backoff()
        .touched_objects();
    tokio::spawn(stream.for_each(|_| async {}));
    reader
}

/// Runs every controller until they end (they do not, short of a panic).
pub async fn run(
    client: Client,
    github: Arc<dyn GitHubApi>,
    settings: Settings,
    namespace: Option<String>,
) {
    run_with_clock(client, github, settings, namespace, Arc::new(SystemClock)).await;
}

/// [`run`] with an injected clock, so tests can move time past the 10-minute timers
/// (registration timeout, recreation delay) without waiting.
pub async fn run_with_clock(
    client: Client,
    github: Arc<dyn GitHubApi>,
    settings: Settings,
    namespace: Option<String>,
    clock: Arc<dyn Clock>,
) {
    let ns = namespace.as_deref();
    let stores = Stores {
        pods: spawn_store(
            api::<Pod>(&client, ns),
            watcher::Config::default().labels(label::ACTIONS_RUNNER),
        ),
        runners: spawn_store(api::<Runner>(&client, ns), watcher::Config::default()),
        replica_sets: spawn_store(
            api::<RunnerReplicaSet>(&client, ns),
            watcher::Config::default(),
        ),
        deployments: spawn_store(
            api::<RunnerDeployment>(&client, ns),
            watcher::Config::default(),
        ),
    };
    for wait in [
        stores.pods.wait_until_ready().await.is_ok(),
        stores.runners.wait_until_ready().await.is_ok(),
        stores.replica_sets.wait_until_ready().await.is_ok(),
        stores.deployments.wait_until_ready().await.is_ok(),
    ] {
        debug_assert!(wait);
    }
    info!(
        namespace = ns.unwrap_or("<all>"),
        "caches synced; starting controllers"
    );
    let mut ctx = Context::new(client.clone(), github, settings, stores);
    ctx.clock = clock;
    let ctx = Arc::new(ctx);
    tokio::join!(
        controllers::runner::run(ctx.clone(), api(&client, ns), api(&client, ns)),
        controllers::runner_pod::run(ctx.clone(), api(&client, ns)),
        controllers::runner_replica_set::run(ctx.clone(), api(&client, ns), api(&client, ns)),
        controllers::runner_deployment::run(ctx.clone(), api(&client, ns), api(&client, ns)),
    );
}
