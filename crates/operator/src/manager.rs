//! The controller manager: reflectors feeding the shared stores, and every reconciler, in one
//! process.
//!
//! One watch per kind (pods filtered to runner pods by the `actions-runner` label) fills a
//! store that reconcilers read instead of listing, and feeds every controller that reacts to
//! the kind ([`hangar_runtime::watch::shared_store`]): the apiserver sends each change to this process once, not once
//! per controller. (kube-runtime's own shared streams do not pass deletions on, which the
//! controllers need.)
//!
//! With a webhook listener ([`run_with_webhook`]), the GitHub webhook server runs in the same
//! process on the same stores, so a reservation it writes reaches the HRA controller's watch
//! and the target is scaled at once.
//!
//! The leaked-registration sweep ([`crate::sweep`]) and the pull recovery of lost webhook
//! deliveries ([`crate::pull`]) run alongside the controllers, so, like them, only on the
//! leader.

use std::sync::Arc;

use futures::FutureExt as _;
use hangar_api::{
    HorizontalRunnerAutoscaler, Runner, RunnerDeployment, RunnerReplicaSet, RunnerSet, label,
};
use hangar_github::GitHubApi;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::watcher;
use tracing::{error, info};

use hangar_runtime::watch::{api, shared_store, spawn_store};

use crate::context::{Clock, Context, Settings, Stores, SystemClock};
use crate::controllers;
use crate::webhook_server::{WebhookConfig, WebhookServer, WebhookStores};

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
    run_with_webhook(client, github, settings, namespace, clock, None).await;
}

/// [`run_with_clock`] plus, when `webhook` is given, the GitHub webhook server on that listener.
pub async fn run_with_webhook(
    client: Client,
    github: Arc<dyn GitHubApi>,
    settings: Settings,
    namespace: Option<String>,
    clock: Arc<dyn Clock>,
    webhook: Option<(tokio::net::TcpListener, WebhookConfig)>,
) {
    run_until(
        client,
        github,
        settings,
        namespace,
        clock,
        webhook,
        std::future::pending(),
    )
    .await;
}

/// [`run_with_webhook`] until `shutdown` completes (`hangar run` passes SIGTERM): then the
/// webhook server stops accepting, answers the deliveries in flight once their reservations
/// are stored, and the manager returns; the controllers are stopped where they are. A shutdown
/// before the caches have synced returns at once.
pub async fn run_until(
    client: Client,
    github: Arc<dyn GitHubApi>,
    settings: Settings,
    namespace: Option<String>,
    clock: Arc<dyn Clock>,
    webhook: Option<(tokio::net::TcpListener, WebhookConfig)>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let shutdown = shutdown.boxed().shared();
    let ns = namespace.as_deref();
    let all = watcher::Config::default;
    // Who reacts to what: pods → Runner, runner-pod, RunnerReplicaSet and RunnerSet
    // controllers; Runners → Runner and RunnerReplicaSet; RunnerReplicaSets → RunnerReplicaSet
    // and RunnerDeployment; RunnerDeployments and autoscalers → their own controllers.
    let runner_pods = all().labels(label::ACTIONS_RUNNER);
    let (
        pods,
        [
            pods_for_runners,
            pods_for_pods,
            pods_for_sets,
            pods_for_runner_sets,
        ],
    ) = shared_store(api::<Pod>(&client, ns), runner_pods);
    let (runners, [runners_for_runners, runners_for_sets]) =
        shared_store(api::<Runner>(&client, ns), all());
    let (replica_sets, [sets_for_sets, sets_for_deployments]) =
        shared_store(api::<RunnerReplicaSet>(&client, ns), all());
    let (deployments, [deployments_for_deployments]) =
        shared_store(api::<RunnerDeployment>(&client, ns), all());
    let (hras, [hras_for_hras]) =
        shared_store(api::<HorizontalRunnerAutoscaler>(&client, ns), all());
    let stores = Stores {
        pods,
        runners,
        replica_sets,
        deployments,
        hras,
    };
    // The webhook server and the pull recovery route jobs by the same table.
    let runner_sets = (webhook.is_some() || !settings.webhook_pull_interval.is_zero())
        .then(|| spawn_store(api::<RunnerSet>(&client, ns), watcher::Config::default()));
    let synced = async {
        for wait in [
            stores.pods.wait_until_ready().await.is_ok(),
            stores.runners.wait_until_ready().await.is_ok(),
            stores.replica_sets.wait_until_ready().await.is_ok(),
            stores.deployments.wait_until_ready().await.is_ok(),
            stores.hras.wait_until_ready().await.is_ok(),
        ] {
            debug_assert!(wait);
        }
        if let Some(runner_sets) = &runner_sets {
            let _ = runner_sets.wait_until_ready().await;
        }
    };
    // Nothing is served or reconciled before the caches sync: a shutdown then has nothing to
    // finish (a delivery waiting in the listener's backlog was never answered).
    tokio::select! {
        () = synced => {}
        () = shutdown.clone() => return,
    }
    info!(
        namespace = ns.unwrap_or("<all>"),
        "caches synced; starting controllers"
    );
    let routing = runner_sets.map(|runner_sets| WebhookStores {
        hras: stores.hras.clone(),
        deployments: stores.deployments.clone(),
        runner_sets,
    });
    let webhook = match (webhook, &routing) {
        (Some((listener, config)), Some(routing)) => {
            let server =
                WebhookServer::new(config, routing.clone(), Some(github.clone()), clock.clone());
            if let Some(exporter) = &settings.exporter {
                server.set_metrics(exporter.metrics.clone());
            }
            Some(server.serve(listener, client.clone(), shutdown.clone()))
        }
        _ => None,
    };
    // Resolves once the webhook server has drained after `shutdown` (at once without one).
    let webhook = async move {
        if let Some(serve) = webhook
            && let Err(e) = serve.await
        {
            error!(error = %e, "webhook server failed");
        }
    };
    let exporter = settings.exporter.clone();
    if let Some(exporter) = &exporter {
        attach_metrics(exporter, &stores, settings.github_registry.clone());
    }
    let mut ctx = Context::new(client.clone(), github, settings, stores);
    ctx.clock = clock;
    let ctx = Arc::new(ctx);
    if let Some(exporter) = exporter {
        spawn_busy_refresh(exporter, ctx.clone());
    }
    let controllers = async {
        tokio::join!(
            controllers::hra::run(ctx.clone(), hras_for_hras),
            controllers::runner::run(
                ctx.clone(),
                runners_for_runners,
                pods_for_runners,
                api(&client, ns),
            ),
            controllers::runner_pod::run(ctx.clone(), pods_for_pods),
            controllers::runner_replica_set::run(
                ctx.clone(),
                sets_for_sets,
                runners_for_sets,
                pods_for_sets,
            ),
            controllers::runner_deployment::run(
                ctx.clone(),
                deployments_for_deployments,
                sets_for_deployments,
            ),
            controllers::runner_set::run(ctx.clone(), api(&client, ns), pods_for_runner_sets),
            crate::sweep::run(ctx.clone(), namespace.clone()),
            async {
                if let Some(routing) = routing {
                    crate::pull::run(ctx.clone(), routing).await;
                }
            },
        );
    };
    // At `shutdown` the controllers (and the sweep and the pull) are dropped where they are,
    // mid-reconcile perhaps. That is safe because it is no worse than the SIGKILL or node loss
    // they must survive anyway: each reconcile recomputes from the cluster and GitHub and its
    // writes are idempotent (server-side apply, annotations, DELETE that tolerates 404, the
    // reservations' compare-and-swap), so whoever reconciles next finishes what was cut short. The webhook server alone has promises to keep, so it drains:
    // it stops accepting, answers the deliveries in flight once their reservations are stored,
    // and writes what it queued.
    tokio::join!(webhook, async {
        tokio::select! {
            _ = controllers => {}
            () = shutdown.clone() => {}
        }
    });
}

/// Makes `/metrics` render from the caches (and the client registry), and reports ready.
fn attach_metrics(
    exporter: &crate::metrics::Exporter,
    stores: &Stores,
    registry: Option<Arc<hangar_github::ClientRegistry>>,
) {
    use kube::ResourceExt;
    let stores = stores.clone();
    exporter.attach(move |metrics| {
        let pods = stores.pods.state();
        let autoscalers: Vec<_> = stores
            .hras
            .state()
            .iter()
            .map(|h| crate::metrics::AutoscalerView {
                namespace: h.namespace().unwrap_or_default(),
                name: h.name_any(),
                desired: h
                    .status
                    .as_ref()
                    .and_then(|s| s.desired_replicas)
                    .map(i64::from),
                min: h.spec.min_replicas.map(i64::from),
                max: h.spec.max_replicas.map(i64::from),
            })
            .collect();
        let deployments: Vec<_> = stores
            .deployments
            .state()
            .iter()
            .map(|d| {
                (
                    d.namespace().unwrap_or_default(),
                    d.name_any(),
                    i64::from(d.spec.replicas.unwrap_or(1)),
                )
            })
            .collect();
        metrics.render(&crate::metrics::ScrapeState {
            pods: &pods,
            github: registry.as_deref(),
            autoscalers: &autoscalers,
            deployments: &deployments,
        })
    });
    exporter.set_ready(true);
}

/// Every [`crate::metrics::BUSY_REFRESH`], asks GitHub (through the caching client: a 304 is
/// free) which registered runners are busy, per scope that has registered runner pods — the
/// scopes their owners granted them, never what a pod claims.
fn spawn_busy_refresh(exporter: Arc<crate::metrics::Exporter>, ctx: Arc<Context>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(crate::metrics::BUSY_REFRESH).await;
            // Scopes that have registered runner pods, each asked once.
            let scopes: std::collections::BTreeSet<_> = ctx
                .stores
                .pods
                .state()
                .iter()
                .filter(|p| hangar_runtime::pod::observe::runner_id(p).is_some())
                .filter_map(|p| ctx.authorities.get(p.metadata.uid.as_deref()?))
                .map(|a| hangar_runtime::pod::observe::github_scope(&a.scope))
                .collect();
            let github = &ctx.github;
            let mut busy = std::collections::HashSet::new();
            for scope in scopes {
                match github.list_runners(&scope).await {
                    Ok(runners) => {
                        busy.extend(runners.into_iter().filter(|r| r.busy).map(|r| r.name))
                    }
                    Err(e) => tracing::debug!(error = %e, "busy-runner refresh failed"),
                }
            }
            exporter.metrics.set_busy(busy);
        }
    });
}
