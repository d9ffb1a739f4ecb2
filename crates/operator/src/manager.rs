//! The controller manager: reflectors feeding the shared stores, and every reconciler, in one
//! process.
//!
//! One watch per kind (pods filtered to runner pods by the `actions-runner` label) fills a
//! store that reconcilers read instead of listing, and feeds every controller that reacts to
//! the kind ([`hangar_runtime::watch::shared_store`]): the apiserver sends each change to this
//! process once, not once per controller. (kube-runtime's own shared streams do not pass
//! deletions on, which the controllers need.) Cached objects lose their `managedFields`, and
//! runner pods are read as a [`RunnerPod`], trimmed to what the reads look at
//! ([`RunnerPod::trim`]): the cache is most of the controller's memory.
//!
//! One entry point, [`run`], takes its [`ManagerOptions`]. With a webhook listener
//! ([`ManagerOptions::webhook`]), the GitHub webhook server runs in the same process on the
//! same stores, so a reservation it writes reaches the HRA controller's watch and the target is
//! scaled at once.
//!
//! The leaked-registration sweep ([`crate::sweep`]) and the pull recovery of lost webhook
//! deliveries ([`crate::pull`]) run alongside the controllers, so, like them, only on the
//! leader.

use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use hangar_api::{
    HorizontalRunnerAutoscaler, Runner, RunnerDeployment, RunnerReplicaSet, RunnerSet, label,
};
use hangar_github::GitHubApi;
use hangar_runtime::pod::RunnerPod;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Client;
use kube::runtime::watcher;
use tokio::net::TcpListener;
use tracing::{error, info};

use hangar_runtime::watch::{self, api, shared_store, shared_trimmed_store};

use crate::context::{Clock, Context, Settings, Stores, SystemClock};
use crate::controllers;
use crate::runner_directory::RunnerDirectory;
use crate::webhook_server::{WebhookConfig, WebhookServer, WebhookStores};

/// What [`run`] runs: built by [`ManagerOptions::new`] with defaults for everything optional,
/// which the chainable setters ([`namespace`](Self::namespace), [`clock`](Self::clock),
/// [`webhook`](Self::webhook), [`until`](Self::until)) replace.
pub struct ManagerOptions {
    /// The Kubernetes client every watch and write goes through.
    pub client: Client,
    /// The controller-wide GitHub client (resources with their own credentials get theirs
    /// from [`Settings::github_registry`]).
    pub github: Arc<dyn GitHubApi>,
    /// Controller-wide settings (from flags).
    pub settings: Settings,
    /// The one namespace watched, or `None` (the default) for all of them.
    pub namespace: Option<String>,
    /// Where reconcilers read `now` from: [`SystemClock`] by default; tests inject one they
    /// can move past long timers (registration timeout, release grace) without waiting.
    pub clock: Arc<dyn Clock>,
    /// When given, the GitHub webhook server also runs, on this listener with this
    /// configuration, on the manager's stores. `None` by default.
    pub webhook: Option<(TcpListener, WebhookConfig)>,
    /// When this completes (`hangar run` passes SIGTERM), the webhook server stops accepting,
    /// answers the deliveries in flight once their reservations are stored, and [`run`]
    /// returns; the controllers are stopped where they are. A shutdown before the caches have
    /// synced returns at once. Never completes by default.
    pub shutdown: BoxFuture<'static, ()>,
}

impl ManagerOptions {
    /// Every namespace, the [`SystemClock`], no webhook server, and no shutdown: [`run`]
    /// then runs until the controllers end (they do not, short of a panic).
    pub fn new(client: Client, github: Arc<dyn GitHubApi>, settings: Settings) -> Self {
        Self {
            client,
            github,
            settings,
            namespace: None,
            clock: Arc::new(SystemClock),
            webhook: None,
            shutdown: std::future::pending().boxed(),
        }
    }

    /// Watches and reconciles only `namespace` (`None`: all of them).
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<Option<String>>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Reads `now` from `clock` instead of the [`SystemClock`].
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Also runs the GitHub webhook server on `listener`.
    #[must_use]
    pub fn webhook(mut self, listener: TcpListener, config: WebhookConfig) -> Self {
        self.webhook = Some((listener, config));
        self
    }

    /// Shuts down when `shutdown` completes (see [`ManagerOptions::shutdown`]).
    #[must_use]
    pub fn until(mut self, shutdown: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown = shutdown.boxed();
        self
    }
}

impl std::fmt::Debug for ManagerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerOptions")
            .field("settings", &self.settings)
            .field("namespace", &self.namespace)
            .field(
                "webhook",
                &self
                    .webhook
                    .as_ref()
                    .map(|(listener, _)| listener.local_addr()),
            )
            .finish_non_exhaustive()
    }
}

/// Runs every reflector and controller (and, if configured, the webhook server) until
/// `options.shutdown` completes, or forever by default.
pub async fn run(options: ManagerOptions) {
    let ManagerOptions {
        client,
        github,
        settings,
        namespace,
        clock,
        webhook,
        shutdown,
    } = options;
    let shutdown = shutdown.shared();
    let ns = namespace.as_deref();
    let all = watcher::Config::default;
    // Who reacts to what: pods → Runner, runner-pod, RunnerReplicaSet and RunnerSet
    // controllers; Runners → Runner and RunnerReplicaSet; RunnerReplicaSets → RunnerReplicaSet
    // and RunnerDeployment; RunnerDeployments → their own controller; autoscalers → their own
    // controller and the sets of their targets (a full pool's autoscaler can account for a
    // finished job without changing replicas).
    let runner_pods = all().labels(label::ACTIONS_RUNNER);
    let (
        pods,
        [
            pods_for_runners,
            pods_for_pods,
            pods_for_sets,
            pods_for_runner_sets,
        ],
    ) = shared_trimmed_store(api::<RunnerPod>(&client, ns), runner_pods, RunnerPod::trim);
    let (runners, [runners_for_runners, runners_for_sets]) =
        shared_store(api::<Runner>(&client, ns), all());
    let (replica_sets, [sets_for_sets, sets_for_deployments]) =
        shared_store(api::<RunnerReplicaSet>(&client, ns), all());
    let (deployments, [deployments_for_deployments]) =
        shared_store(api::<RunnerDeployment>(&client, ns), all());
    let (hras, [hras_for_hras, hras_for_sets, hras_for_runner_sets]) =
        shared_store(api::<HorizontalRunnerAutoscaler>(&client, ns), all());
    let (runner_sets, [runner_sets_for_runner_sets]) =
        shared_store(api::<RunnerSet>(&client, ns), all());
    let (stateful_sets, [stateful_sets_for_runner_sets]) = shared_trimmed_store(
        api::<StatefulSet>(&client, ns),
        all().labels(label::RUNNER_TEMPLATE_HASH),
        controllers::runner_set::trim_stateful_set,
    );
    // Runner health reads nodes' Ready condition, unless told not to (no node watch, and no
    // need for the cluster-scoped permission).
    let nodes =
        (!settings.health.node_not_ready.is_zero()).then(|| watch::spawn_node_store(&client));
    let stores = Stores {
        pods,
        runners,
        replica_sets,
        deployments,
        hras,
        runner_sets,
        stateful_sets,
        nodes,
    };
    let synced = async {
        for wait in [
            stores.pods.wait_until_ready().await.is_ok(),
            stores.runners.wait_until_ready().await.is_ok(),
            stores.replica_sets.wait_until_ready().await.is_ok(),
            stores.deployments.wait_until_ready().await.is_ok(),
            stores.hras.wait_until_ready().await.is_ok(),
            stores.runner_sets.wait_until_ready().await.is_ok(),
            stores.stateful_sets.wait_until_ready().await.is_ok(),
        ] {
            debug_assert!(wait);
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
    // The webhook server and the pull recovery route jobs by the same table.
    let routing =
        (webhook.is_some() || !settings.webhook_pull_interval.is_zero()).then(|| WebhookStores {
            hras: stores.hras.clone(),
            deployments: stores.deployments.clone(),
            runner_sets: stores.runner_sets.clone(),
        });
    // Runner IDs, learnt by the runner-pod controller from lists and from the runners the
    // webhook server's deliveries see at work.
    let directory = Arc::new(RunnerDirectory::new(settings.registration_check_interval));
    let webhook = match (webhook, &routing) {
        (Some((listener, config)), Some(routing)) => {
            let server =
                WebhookServer::new(config, routing.clone(), Some(github.clone()), clock.clone());
            server.report_sightings_to(directory.clone());
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
    let mut ctx = Context::new(client.clone(), github, settings, stores);
    ctx.clock = clock;
    let ctx = Arc::new(ctx);
    if let Some(exporter) = &exporter {
        attach_metrics(exporter, &ctx);
    }
    spawn_runner_refresh(exporter, ctx.clone());
    // Each controller is a task of its own: the runtime polls the one a watch event or a
    // timer woke, on the worker threads that run the watches and connections, rather than
    // every controller on each wake-up of a single future shared by all of them.
    let mut controllers = tokio::task::JoinSet::new();
    controllers.spawn(controllers::hra::run(ctx.clone(), hras_for_hras));
    controllers.spawn(controllers::runner::run(
        ctx.clone(),
        runners_for_runners,
        pods_for_runners,
        api(&client, ns),
    ));
    controllers.spawn(controllers::runner_pod::run(
        ctx.clone(),
        pods_for_pods,
        directory.clone(),
    ));
    controllers.spawn(controllers::runner_replica_set::run(
        ctx.clone(),
        sets_for_sets,
        runners_for_sets,
        pods_for_sets,
        hras_for_sets,
        directory.clone(),
    ));
    controllers.spawn(controllers::runner_deployment::run(
        ctx.clone(),
        deployments_for_deployments,
        sets_for_deployments,
    ));
    controllers.spawn(controllers::runner_set::run(
        ctx.clone(),
        namespace.clone(),
        runner_sets_for_runner_sets,
        stateful_sets_for_runner_sets,
        pods_for_runner_sets,
        hras_for_runner_sets,
    ));
    controllers.spawn(crate::sweep::run(ctx.clone()));
    if let Some(routing) = routing {
        controllers.spawn(crate::pull::run(ctx.clone(), routing));
    }
    // At `shutdown` the controllers (and the sweep and the pull) are stopped where they are,
    // mid-reconcile perhaps. That is safe because it is no worse than the SIGKILL or node loss
    // they must survive anyway: each reconcile recomputes from the cluster and GitHub and its
    // writes are idempotent (server-side apply, annotations, DELETE that tolerates 404, the
    // reservations' compare-and-swap), so whoever reconciles next finishes what was cut short.
    // The webhook server alone has promises to keep, so it drains: it stops accepting, answers
    // the deliveries in flight once their reservations are stored, and writes what it queued.
    tokio::join!(webhook, async {
        tokio::select! {
            () = until_one_panics(&mut controllers) => {}
            () = shutdown.clone() => {}
        }
        // Aborted and awaited before `run` returns, so no reconcile goes on after the caller
        // released the leader-election lease. Deletions a set handed to the background and
        // queued events may still finish meanwhile, as they could before: each is idempotent
        // (a deletion is conditioned on the UID it judged).
        controllers.shutdown().await;
    });
}

/// Waits for the controllers to end (they run until shutdown), passing a panic on: a controller
/// that panics takes the process down to be restarted, as it did when the controllers were
/// polled in one future.
async fn until_one_panics(controllers: &mut tokio::task::JoinSet<()>) {
    while let Some(ended) = controllers.join_next().await {
        if let Err(e) = ended
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// Makes `/metrics` render from the caches (and the client registry), and reports ready. The
/// exporter holds the context weakly: the context's settings hold the exporter.
fn attach_metrics(exporter: &crate::metrics::Exporter, ctx: &Arc<Context>) {
    use kube::ResourceExt;
    let stores = ctx.stores.clone();
    let registry = ctx.settings.github_registry.clone();
    let weak = Arc::downgrade(ctx);
    exporter.attach(move |metrics| {
        let pods = stores.pods.state();
        let unhealthy: Vec<(String, &'static str)> = weak
            .upgrade()
            .map(|ctx| {
                pods.iter()
                    .filter_map(|pod| {
                        let spent = hangar_runtime::pod::observe::registration_spent(pod);
                        let health = ctx.runner_health(pod, spent);
                        (!health.is_capacity())
                            .then(|| (pod.namespace().unwrap_or_default(), health.reason()))
                    })
                    .collect()
            })
            .unwrap_or_default();
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
            unhealthy: &unhealthy,
        })
    });
    exporter.set_ready(true);
}

/// Every [`Settings::runner_refresh`](hangar_runtime::context::Settings::runner_refresh),
/// asks GitHub (through the caching client: a 304 is free) which registered runners are online,
/// offline or busy, per scope that has registered runner pods — the scopes their owners granted them, never what a pod claims — for the
/// runners' health ([`Context::github_runners`]) and the busy gauge.
fn spawn_runner_refresh(exporter: Option<Arc<crate::metrics::Exporter>>, ctx: Arc<Context>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(ctx.settings.runner_refresh).await;
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
                        ctx.github_runners.observe(&scope, &runners, ctx.now());
                        busy.extend(runners.into_iter().filter(|r| r.busy).map(|r| r.name))
                    }
                    Err(e) => tracing::debug!(error = %e, "runner refresh failed"),
                }
            }
            if let Some(exporter) = &exporter {
                exporter.metrics.set_busy(busy);
            }
        }
    });
}
