//! Prometheus metrics, `/healthz` and `/readyz`.
//!
//! Contract: instruments are cheap to update from any task; everything derivable from state
//! Hangar already holds — runners by state and unhealthy runners by reason (the pod cache,
//! classified by `hangar_core::health` at scrape time), autoscaler and deployment replicas
//! (their caches), GitHub calls and rate limits (the client registry) — is computed when
//! Prometheus scrapes, so there is no second copy to keep in sync. The one exception is which
//! runners are busy: a background task asks GitHub's List Runners per scope at most every
//! [`crate::context::Settings::runner_refresh`], through the caching client (a 304 costs no
//! rate limit).
//!
//! Latencies: `hangar_webhook_delivery_to_pod_seconds` pairs each queued `workflow_job`
//! delivery the webhook server turned into a reservation with the next runner pod created for
//! the same scale target, first in first out ([`PendingDeliveries`]); the pairing lives in
//! this process's memory, so it is recorded only where the webhook server runs in the
//! process whose controllers create the pods (`hangar run --webhook-addr`, on the leader), and
//! not for `hangar webhook-server` on its own. `hangar_job_queue_to_assignment_seconds` is
//! GitHub's own account of each job's wait (`started_at - created_at` of its `in_progress`
//! delivery), for jobs an autoscaler here would have scaled for.
//!
//! Names: Hangar's own are `hangar_*`; ARC's legacy gauges keep their names
//! (`horizontalrunnerautoscaler_*`, `runnerdeployment_spec_replicas`, `github_rate_limit*`) so
//! existing dashboards keep working.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hangar_api::annotation as ann;
use hangar_api::horizontal_runner_autoscaler::ScaleTargetKind;
use hangar_api::label;
use hangar_github::ClientRegistry;
use kube::ResourceExt;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::pod::RunnerPod;

/// How often, by default, the registered runners' state (online, busy, offline) is refreshed
/// from GitHub ([`crate::context::Settings::runner_refresh`]).
pub const RUNNER_REFRESH: Duration = Duration::from_secs(30);

type Labels = Vec<(&'static str, String)>;

/// Every instrument Hangar exports.
pub struct Metrics {
    registry: Registry,
    reconcile_duration: Family<Labels, Histogram>,
    reconcile_errors: Family<Labels, Counter>,
    reconciles_active: Family<Labels, Gauge>,
    reconciles_active_max: Family<Labels, Gauge>,
    webhook_deliveries: Family<Labels, Counter>,
    delivery_to_pod: Histogram,
    queue_to_assignment: Histogram,
    runners: Family<Labels, Gauge>,
    github_calls: Family<Labels, Gauge>,
    rate_limit_remaining: Family<Labels, Gauge>,
    rate_limit_legacy: Family<Labels, Gauge>,
    rate_limit_remaining_legacy: Family<Labels, Gauge>,
    hra_desired: Family<Labels, Gauge>,
    hra_min: Family<Labels, Gauge>,
    hra_max: Family<Labels, Gauge>,
    deployment_replicas: Family<Labels, Gauge>,
    unhealthy_runners: Family<Labels, Gauge>,
    kube_requests: Family<Labels, Counter>,
    unregistrations_refused: Family<Labels, Counter>,
    leaked_registrations_removed: Family<Labels, Counter>,
    busy: Mutex<HashSet<String>>,
    pending: Mutex<PendingDeliveries>,
    started: Instant,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// The labels of a per-controller series.
fn controller_labels(controller: &'static str) -> Labels {
    vec![("controller", controller.to_owned())]
}

fn latency_histogram() -> Histogram {
    // 10 ms … ~82 s.
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// A reconcile under way ([`Metrics::reconcile_started`]): counted until dropped, so a
/// reconcile cancelled midway is not counted forever.
#[derive(Debug)]
pub struct ActiveReconcile(Gauge);

impl Drop for ActiveReconcile {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// All instruments, registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Self {
            reconcile_duration: Family::new_with_constructor(latency_histogram),
            reconcile_errors: Family::default(),
            reconciles_active: Family::default(),
            reconciles_active_max: Family::default(),
            webhook_deliveries: Family::default(),
            delivery_to_pod: latency_histogram(),
            queue_to_assignment: latency_histogram(),
            runners: Family::default(),
            github_calls: Family::default(),
            rate_limit_remaining: Family::default(),
            rate_limit_legacy: Family::default(),
            rate_limit_remaining_legacy: Family::default(),
            hra_desired: Family::default(),
            hra_min: Family::default(),
            hra_max: Family::default(),
            deployment_replicas: Family::default(),
            unhealthy_runners: Family::default(),
            kube_requests: Family::default(),
            unregistrations_refused: Family::default(),
            leaked_registrations_removed: Family::default(),
            busy: Mutex::new(HashSet::new()),
            pending: Mutex::new(PendingDeliveries::default()),
            started: Instant::now(),
            registry: Registry::default(),
        };
        registry.register(
            "hangar_reconcile_duration_seconds",
            "Time one reconcile took, by controller",
            m.reconcile_duration.clone(),
        );
        registry.register(
            "hangar_reconcile_errors",
            "Reconciles that failed, by controller",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "hangar_reconciles_active",
            "Reconciles under way, by controller (at most --max-concurrent-reconciles each)",
            m.reconciles_active.clone(),
        );
        registry.register(
            "hangar_reconciles_active_max",
            "The most reconciles of a controller under way at once since the process started: \
             at --max-concurrent-reconciles, objects have waited in the queue for a turn",
            m.reconciles_active_max.clone(),
        );
        registry.register(
            "hangar_runner_unregistrations_refused",
            "Runner removals GitHub refused for lack of permission (403), by namespace: each \
             leaves its pod running and is retried with back-off",
            m.unregistrations_refused.clone(),
        );
        registry.register(
            "hangar_webhook_deliveries",
            "GitHub webhook deliveries, by event and outcome",
            m.webhook_deliveries.clone(),
        );
        registry.register(
            "hangar_webhook_delivery_to_pod_seconds",
            "From a queued workflow_job delivery to the next runner pod created for its autoscaler's \
             target (recorded when the webhook server runs in the controller process)",
            m.delivery_to_pod.clone(),
        );
        registry.register(
            "hangar_job_queue_to_assignment_seconds",
            "From a job being queued to a runner picking it up: started_at - created_at of its \
             in_progress delivery",
            m.queue_to_assignment.clone(),
        );
        registry.register(
            "hangar_runners",
            "Runner pods by state: pending, idle, busy, unregistering",
            m.runners.clone(),
        );
        registry.register(
            "hangar_runners_unhealthy",
            "Runners neither working nor on their way, by reason (ImagePullFailing, \
             CrashLooping, NodeNotReady, OfflineOnGitHub, RunnerVersionRejected, ...)",
            m.unhealthy_runners.clone(),
        );
        registry.register(
            "hangar_github_api_calls",
            "GitHub REST calls by endpoint; cached=true answered by the cache, revalidated = 304",
            m.github_calls.clone(),
        );
        registry.register(
            "hangar_github_rate_limit_remaining",
            "Primary rate-limit budget left, by credential",
            m.rate_limit_remaining.clone(),
        );
        registry.register(
            "github_rate_limit",
            "Primary rate limit (ARC legacy name)",
            m.rate_limit_legacy.clone(),
        );
        registry.register(
            "github_rate_limit_remaining",
            "Primary rate-limit budget left (ARC legacy name)",
            m.rate_limit_remaining_legacy.clone(),
        );
        registry.register(
            "horizontalrunnerautoscaler_desired_replicas",
            "Desired replicas of a HorizontalRunnerAutoscaler (ARC legacy name)",
            m.hra_desired.clone(),
        );
        registry.register(
            "horizontalrunnerautoscaler_min_replicas",
            "minReplicas of a HorizontalRunnerAutoscaler (ARC legacy name)",
            m.hra_min.clone(),
        );
        registry.register(
            "horizontalrunnerautoscaler_max_replicas",
            "maxReplicas of a HorizontalRunnerAutoscaler (ARC legacy name)",
            m.hra_max.clone(),
        );
        registry.register(
            "runnerdeployment_spec_replicas",
            "spec.replicas of a RunnerDeployment (ARC legacy name)",
            m.deployment_replicas.clone(),
        );
        registry.register(
            "rest_client_requests",
            "Kubernetes API requests by HTTP method, status code and resource (controller-runtime's \
             name, plus the resource: what the controller costs the apiserver); code=\"403\" is a \
             call the controller's RBAC does not allow, code=\"<error>\" one that got no answer",
            m.kube_requests.clone(),
        );
        registry.register(
            "hangar_leaked_registrations_removed",
            "Runner registrations Hangar created and lost (offline, no pod or Runner, past the grace \
             period) that the sweep deleted from GitHub, by scope kind",
            m.leaked_registrations_removed.clone(),
        );
        Self { registry, ..m }
    }

    /// Records one leaked registration removed from a `scope` (`repository`, `organization`
    /// or `enterprise`).
    pub fn leaked_registration_removed(&self, scope: &str) {
        self.leaked_registrations_removed
            .get_or_create(&vec![("scope", scope.to_owned())])
            .inc();
    }

    /// Records one Kubernetes API request, the resource it was about (`pods`,
    /// `runners/status`, ...) and the status code it was answered with (see
    /// [`crate::kube_client`]).
    pub fn kube_request(&self, method: &str, code: &str, resource: &str) {
        self.kube_requests
            .get_or_create(&vec![
                ("code", code.to_owned()),
                ("method", method.to_owned()),
                ("resource", resource.to_owned()),
            ])
            .inc();
    }

    /// How many Kubernetes API requests of `method` on `resource` were answered `code`.
    pub fn kube_requests(&self, method: &str, code: &str, resource: &str) -> u64 {
        self.kube_requests
            .get_or_create(&vec![
                ("code", code.to_owned()),
                ("method", method.to_owned()),
                ("resource", resource.to_owned()),
            ])
            .get()
    }

    /// Counts a reconcile of `controller` as under way until the returned guard is dropped.
    pub fn reconcile_started(&self, controller: &'static str) -> ActiveReconcile {
        let labels = controller_labels(controller);
        let active = self.reconciles_active.get_or_create(&labels).clone();
        let now = active.inc() + 1;
        self.reconciles_active_max
            .get_or_create(&labels)
            .inner()
            .fetch_max(now, std::sync::atomic::Ordering::Relaxed);
        ActiveReconcile(active)
    }

    /// The most reconciles of `controller` that were under way at once.
    pub fn reconciles_active_max(&self, controller: &'static str) -> i64 {
        self.reconciles_active_max
            .get_or_create(&controller_labels(controller))
            .get()
    }

    /// Records one reconcile of `controller`.
    pub fn reconciled(&self, controller: &'static str, took: Duration, failed: bool) {
        let labels = controller_labels(controller);
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if failed {
            self.reconcile_errors.get_or_create(&labels).inc();
        }
    }

    /// Records a runner removal GitHub refused with 403 in `namespace`.
    pub fn unregistration_refused(&self, namespace: &str) {
        self.unregistrations_refused
            .get_or_create(&vec![("namespace", namespace.to_owned())])
            .inc();
    }

    /// Records one webhook delivery.
    pub fn delivery(&self, event: &str, outcome: &str) {
        self.webhook_deliveries
            .get_or_create(&vec![
                ("event", event.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
    }

    /// Records the time from a queued delivery to the pod it caused.
    pub fn delivery_to_pod(&self, took: Duration) {
        self.delivery_to_pod.observe(took.as_secs_f64());
    }

    /// Remembers that a queued delivery of `job` reserved a runner for `target`, for as long
    /// as the reservation lasts.
    pub fn job_queued(&self, target: ScaleTarget, job: u64, reservation: Duration) {
        self.lock_pending()
            .queued(target, job, Instant::now(), reservation);
    }

    /// Forgets a job that started or finished: a pod created after that did not serve it.
    pub fn job_left_queue(&self, job: u64) {
        self.lock_pending().left_queue(job);
    }

    /// Records `count` runner pods (or RunnerSet StatefulSets, each one pod) just created for
    /// `target`: each serves the oldest delivery still waiting.
    pub fn runner_pods_created(&self, target: &ScaleTarget, count: usize) {
        let now = Instant::now();
        let waits: Vec<Duration> = {
            let mut pending = self.lock_pending();
            (0..count)
                .map_while(|_| pending.pod_created(target, now))
                .collect()
        };
        for wait in waits {
            self.delivery_to_pod(wait);
        }
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, PendingDeliveries> {
        // Plain data: a panic elsewhere while holding the lock leaves nothing half-updated
        // that matters for a histogram.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the time a job waited for a runner.
    pub fn queue_to_assignment(&self, took: Duration) {
        self.queue_to_assignment.observe(took.as_secs_f64());
    }

    /// Replaces the set of runner names GitHub reports busy.
    pub fn set_busy(&self, names: HashSet<String>) {
        *self.busy.lock().expect("busy lock") = names;
    }

    /// The exposition text, after refreshing the derived gauges from `state`.
    pub fn render(&self, state: &ScrapeState<'_>) -> String {
        self.refresh(state);
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    fn refresh(&self, state: &ScrapeState<'_>) {
        let busy = self.busy.lock().expect("busy lock").clone();
        let mut counts: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for pod in state.pods {
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            *counts.entry((ns, runner_state(pod, &busy))).or_default() += 1;
        }
        self.runners.clear();
        for ((ns, state), n) in counts {
            self.runners
                .get_or_create(&vec![
                    ("namespace", ns.to_owned()),
                    ("state", state.to_owned()),
                ])
                .set(n);
        }
        if let Some(registry) = state.github {
            self.github_calls.clear();
            self.rate_limit_remaining.clear();
            self.rate_limit_legacy.clear();
            self.rate_limit_remaining_legacy.clear();
            let mut calls: BTreeMap<(String, &str), i64> = BTreeMap::new();
            for report in registry.reports() {
                for (endpoint, stats) in &report.endpoints {
                    *calls.entry((endpoint.clone(), "false")).or_default() +=
                        stats.requests as i64 - stats.not_modified as i64;
                    *calls.entry((endpoint.clone(), "revalidated")).or_default() +=
                        stats.not_modified as i64;
                    *calls.entry((endpoint.clone(), "true")).or_default() +=
                        stats.cache_hits as i64;
                }
                if let Some(limit) = report.rate_limit {
                    let credential = vec![("credential", report.credential.to_string())];
                    self.rate_limit_remaining
                        .get_or_create(&credential)
                        .set(limit.remaining as i64);
                    self.rate_limit_remaining_legacy
                        .get_or_create(&credential)
                        .set(limit.remaining as i64);
                    self.rate_limit_legacy
                        .get_or_create(&credential)
                        .set(limit.limit as i64);
                }
            }
            for ((endpoint, cached), n) in calls {
                if n > 0 {
                    self.github_calls
                        .get_or_create(&vec![("endpoint", endpoint), ("cached", cached.to_owned())])
                        .set(n);
                }
            }
        }
        self.hra_desired.clear();
        self.hra_min.clear();
        self.hra_max.clear();
        for hra in state.autoscalers {
            let labels = vec![
                ("namespace", hra.namespace.clone()),
                ("horizontalrunnerautoscaler", hra.name.clone()),
            ];
            if let Some(v) = hra.desired {
                self.hra_desired.get_or_create(&labels).set(v);
            }
            if let Some(v) = hra.min {
                self.hra_min.get_or_create(&labels).set(v);
            }
            if let Some(v) = hra.max {
                self.hra_max.get_or_create(&labels).set(v);
            }
        }
        self.unhealthy_runners.clear();
        let mut unhealthy: BTreeMap<(String, &str), i64> = BTreeMap::new();
        for (ns, reason) in state.unhealthy {
            *unhealthy.entry((ns.clone(), reason)).or_default() += 1;
        }
        for ((ns, reason), n) in unhealthy {
            self.unhealthy_runners
                .get_or_create(&vec![("namespace", ns), ("reason", reason.to_owned())])
                .set(n);
        }
        self.deployment_replicas.clear();
        for (namespace, name, replicas) in state.deployments {
            self.deployment_replicas
                .get_or_create(&vec![
                    ("namespace", namespace.clone()),
                    ("runnerdeployment", name.clone()),
                ])
                .set(*replicas);
        }
    }

    /// Seconds since start (for `/healthz` bodies and tests).
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Renders the exposition from whatever the manager has attached.
type Source = Box<dyn Fn(&Metrics) -> String + Send + Sync>;

/// The `/metrics`, `/healthz` and `/readyz` endpoints of one process. Started before leader
/// election (a follower must answer probes too); the manager attaches its caches once synced.
pub struct Exporter {
    /// The instruments.
    pub metrics: Arc<Metrics>,
    source: std::sync::OnceLock<Source>,
    ready: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("attached", &self.source.get().is_some())
            .field("ready", &self.is_ready())
            .finish()
    }
}

impl Default for Exporter {
    fn default() -> Self {
        Self {
            metrics: Arc::new(Metrics::new()),
            source: std::sync::OnceLock::new(),
            ready: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Exporter {
    /// Makes scrapes render from `source` (the manager's caches). Only the first call counts.
    pub fn attach(&self, source: impl Fn(&Metrics) -> String + Send + Sync + 'static) {
        let _ = self.source.set(Box::new(source));
    }

    /// Marks this process ready (`/readyz` 200): caches synced, or following a leader.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The current exposition text.
    pub fn render(&self) -> String {
        match self.source.get() {
            Some(source) => source(&self.metrics),
            None => self.metrics.render(&ScrapeState::default()),
        }
    }

    /// The HTTP routes: `/metrics`, `/healthz`, `/readyz`.
    pub fn router(self: Arc<Self>) -> axum::Router {
        use axum::http::{StatusCode, header};
        use axum::routing::get;
        let metrics = self.clone();
        let ready = self;
        axum::Router::new()
            .route(
                "/metrics",
                get(move || {
                    let body = metrics.render();
                    async move {
                        (
                            [(
                                header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            body,
                        )
                    }
                }),
            )
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/readyz",
                get(move || {
                    let ok = ready.is_ready();
                    async move {
                        if ok {
                            (StatusCode::OK, "ok")
                        } else {
                            (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
                        }
                    }
                }),
            )
    }
}

/// Default limit of connections served at once: Prometheus and the kubelet's probes.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 64;
/// No endpoint reads a body.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// The default limits of the metrics and probe server.
pub const LIMITS: crate::serve::Limits =
    crate::serve::Limits::new(DEFAULT_MAX_CONNECTIONS, MAX_BODY_BYTES);

/// Serves `router` on `listener` within `limits` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    limits: crate::serve::Limits,
) {
    let forever = std::future::pending();
    crate::serve::serve(listener, crate::serve::Plain, router, limits, forever).await;
}

/// What a scrape reads: the caches' current contents.
#[derive(Debug, Default)]
pub struct ScrapeState<'a> {
    /// Runner pods.
    pub pods: &'a [Arc<RunnerPod>],
    /// Clients and their counters.
    pub github: Option<&'a ClientRegistry>,
    /// Autoscalers.
    pub autoscalers: &'a [AutoscalerView],
    /// RunnerDeployments: namespace, name, spec.replicas.
    pub deployments: &'a [(String, String, i64)],
    /// Runners that are neither working nor on their way: namespace and reason
    /// ([`hangar_core::health::Health::reason`]), one entry per runner.
    pub unhealthy: &'a [(String, &'static str)],
}

/// The numbers of one HorizontalRunnerAutoscaler the gauges show.
#[derive(Clone, Debug, Default)]
pub struct AutoscalerView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// status.desiredReplicas.
    pub desired: Option<i64>,
    /// spec.minReplicas.
    pub min: Option<i64>,
    /// spec.maxReplicas.
    pub max: Option<i64>,
}

/// What an autoscaler scales: the key that pairs deliveries with the pods they caused.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScaleTarget {
    /// Namespace (the autoscaler's and its target's).
    pub namespace: String,
    /// RunnerDeployment or RunnerSet.
    pub kind: ScaleTargetKind,
    /// The target's name.
    pub name: String,
}

impl ScaleTarget {
    /// RunnerSet `name` in `namespace`.
    pub fn runner_set(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            kind: ScaleTargetKind::RunnerSet,
            name: name.to_owned(),
        }
    }

    /// The target a runner pod (or a Runner, whose labels its pod gets) belongs to: its
    /// RunnerDeployment's or RunnerSet's name label. Runners of a bare RunnerReplicaSet, or
    /// bare Runners, belong to none: no autoscaler can target them.
    pub fn of_labels(namespace: &str, labels: &BTreeMap<String, String>) -> Option<Self> {
        let (kind, name) = if let Some(name) = labels.get(label::RUNNER_DEPLOYMENT_NAME) {
            (ScaleTargetKind::RunnerDeployment, name)
        } else {
            (
                ScaleTargetKind::RunnerSet,
                labels.get(label::RUNNERSET_NAME)?,
            )
        };
        Some(Self {
            namespace: namespace.to_owned(),
            kind,
            name: name.clone(),
        })
    }
}

/// Most deliveries remembered per target; beyond it the oldest is dropped (a burst larger
/// than this is served by pods long after the histogram's last bucket anyway).
pub const MAX_PENDING_PER_TARGET: usize = 4096;

/// Arrival instants of queued deliveries that no new runner pod has served yet, per target,
/// oldest first. Bounded: an entry goes when a pod serves it, when its job starts or finishes
/// (a pod created later did not serve it), when its reservation would have expired (no pod
/// will be created for it), or when [`MAX_PENDING_PER_TARGET`] newer ones arrived.
#[derive(Debug, Default)]
pub struct PendingDeliveries {
    targets: HashMap<ScaleTarget, VecDeque<Pending>>,
}

#[derive(Debug)]
struct Pending {
    job: u64,
    arrived: Instant,
    expires: Instant,
}

impl PendingDeliveries {
    /// A queued delivery of `job` for `target` arrived at `now`; its reservation lasts `ttl`.
    pub fn queued(&mut self, target: ScaleTarget, job: u64, now: Instant, ttl: Duration) {
        let queue = self.targets.entry(target).or_default();
        drop_expired(queue, now);
        if queue.len() >= MAX_PENDING_PER_TARGET {
            queue.pop_front();
        }
        queue.push_back(Pending {
            job,
            arrived: now,
            expires: now + ttl,
        });
    }

    /// `job` started or finished: forget its delivery wherever it waits.
    pub fn left_queue(&mut self, job: u64) {
        for queue in self.targets.values_mut() {
            queue.retain(|p| p.job != job);
        }
        self.targets.retain(|_, q| !q.is_empty());
    }

    /// A runner pod was created for `target` at `now`: how long the oldest waiting delivery
    /// waited for it, if any waits.
    pub fn pod_created(&mut self, target: &ScaleTarget, now: Instant) -> Option<Duration> {
        let queue = self.targets.get_mut(target)?;
        drop_expired(queue, now);
        let served = queue.pop_front();
        if queue.is_empty() {
            self.targets.remove(target);
        }
        served.map(|p| now.saturating_duration_since(p.arrived))
    }

    /// Deliveries waiting, over all targets.
    pub fn len(&self) -> usize {
        self.targets.values().map(VecDeque::len).sum()
    }

    /// Whether no delivery waits.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }
}

/// Drops expired deliveries from the front. Reservations of one target usually share a
/// duration, so expiry follows arrival order; one that outlives an older one is dropped a
/// little later, which only bounds memory less tightly.
fn drop_expired(queue: &mut VecDeque<Pending>, now: Instant) {
    while queue.front().is_some_and(|p| p.expires <= now) {
        queue.pop_front();
    }
}

/// A runner pod's state for `hangar_runners`.
pub fn runner_state(pod: &RunnerPod, busy: &HashSet<String>) -> &'static str {
    let annotations = pod.annotations();
    if annotations.contains_key(ann::UNREGISTRATION_REQUEST_TIMESTAMP)
        || pod.metadata.deletion_timestamp.is_some()
    {
        return "unregistering";
    }
    let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    if !running || !annotations.contains_key(ann::RUNNER_ID) {
        return "pending";
    }
    if busy.contains(&pod.name_any()) {
        "busy"
    } else {
        "idle"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, phase: &str, annotations: &[(&str, &str)]) -> Arc<RunnerPod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": name,
                    "namespace": "ns",
                    "annotations": annotations.iter().map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<BTreeMap<_, _>>(),
                },
                "status": {"phase": phase},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn runner_states() {
        let busy: HashSet<String> = ["b".to_owned()].into();
        let cases = [
            (pod("p", "Pending", &[]), "pending"),
            (pod("r", "Running", &[]), "pending"),
            (pod("i", "Running", &[(ann::RUNNER_ID, "1")]), "idle"),
            (pod("b", "Running", &[(ann::RUNNER_ID, "2")]), "busy"),
            (
                pod(
                    "u",
                    "Running",
                    &[
                        (ann::RUNNER_ID, "3"),
                        (
                            ann::UNREGISTRATION_REQUEST_TIMESTAMP,
                            "2026-01-01T00:00:00Z",
                        ),
                    ],
                ),
                "unregistering",
            ),
        ];
        for (pod, want) in cases {
            assert_eq!(runner_state(&pod, &busy), want, "{}", pod.name_any());
        }
    }

    #[tokio::test]
    async fn the_endpoints_answer_over_http() {
        let exporter = Arc::new(Exporter::default());
        exporter.metrics.delivery("ping", "ok");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, exporter.clone().router(), LIMITS));
        let get = |path: &'static str| async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream
                .write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut text = String::new();
            stream.read_to_string(&mut text).await.unwrap();
            text
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.0 200"));
        assert!(get("/readyz").await.starts_with("HTTP/1.0 503"));
        exporter.set_ready(true);
        assert!(get("/readyz").await.starts_with("HTTP/1.0 200"));
        let metrics = get("/metrics").await;
        assert!(
            metrics.contains("hangar_webhook_deliveries_total{event=\"ping\",outcome=\"ok\"} 1"),
            "{metrics}"
        );
    }

    fn target(kind: ScaleTargetKind, name: &str) -> ScaleTarget {
        ScaleTarget {
            namespace: "ns".into(),
            kind,
            name: name.into(),
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn pods_serve_the_oldest_waiting_delivery_of_their_own_target() {
        let rd = target(ScaleTargetKind::RunnerDeployment, "a");
        let other = target(ScaleTargetKind::RunnerSet, "a");
        let t0 = Instant::now();
        let mut pending = PendingDeliveries::default();
        pending.queued(rd.clone(), 1, t0, HOUR);
        pending.queued(rd.clone(), 2, t0 + Duration::from_millis(100), HOUR);
        let at = t0 + Duration::from_millis(300);
        assert_eq!(
            pending.pod_created(&other, at),
            None,
            "another target waits for nothing"
        );
        assert_eq!(
            pending.pod_created(&rd, at),
            Some(Duration::from_millis(300))
        );
        assert_eq!(
            pending.pod_created(&rd, at),
            Some(Duration::from_millis(200))
        );
        assert_eq!(
            pending.pod_created(&rd, at),
            None,
            "a pod beyond demand serves nothing"
        );
        assert!(pending.is_empty());
    }

    #[test]
    fn a_job_that_started_or_expired_is_not_served_by_a_later_pod() {
        let rd = target(ScaleTargetKind::RunnerDeployment, "a");
        let t0 = Instant::now();
        let mut pending = PendingDeliveries::default();
        pending.queued(rd.clone(), 1, t0, HOUR);
        pending.queued(rd.clone(), 2, t0 + Duration::from_secs(1), HOUR);
        // Job 1 was taken by an idle runner; the next pod serves job 2.
        pending.left_queue(1);
        assert_eq!(
            pending.pod_created(&rd, t0 + Duration::from_secs(3)),
            Some(Duration::from_secs(2))
        );
        // A reservation of 30 s that no pod served is gone after 30 s.
        pending.queued(rd.clone(), 3, t0, Duration::from_secs(30));
        assert_eq!(pending.pod_created(&rd, t0 + Duration::from_secs(30)), None);
        assert!(pending.is_empty());
    }

    #[test]
    fn pending_deliveries_are_bounded_per_target() {
        let rd = target(ScaleTargetKind::RunnerDeployment, "a");
        let t0 = Instant::now();
        let mut pending = PendingDeliveries::default();
        for job in 0..(MAX_PENDING_PER_TARGET as u64 + 10) {
            pending.queued(rd.clone(), job, t0 + Duration::from_millis(job), HOUR);
        }
        assert_eq!(pending.len(), MAX_PENDING_PER_TARGET);
        // The oldest ten were dropped: the first pod serves job 10.
        let at = t0 + Duration::from_secs(60);
        assert_eq!(
            pending.pod_created(&rd, at),
            Some(at - (t0 + Duration::from_millis(10)))
        );
    }

    #[test]
    fn pods_and_runners_name_their_target_by_label() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            ScaleTarget::of_labels("ns", &labels(&[(label::RUNNER_DEPLOYMENT_NAME, "rd")])),
            Some(target(ScaleTargetKind::RunnerDeployment, "rd"))
        );
        assert_eq!(
            ScaleTarget::of_labels("ns", &labels(&[(label::RUNNERSET_NAME, "rs")])),
            Some(target(ScaleTargetKind::RunnerSet, "rs"))
        );
        assert_eq!(
            ScaleTarget::of_labels("ns", &labels(&[(label::ACTIONS_RUNNER, "")])),
            None
        );
    }

    #[test]
    fn latencies_reach_their_histograms() {
        let m = Metrics::new();
        let rd = target(ScaleTargetKind::RunnerDeployment, "a");
        m.job_queued(rd.clone(), 1, HOUR);
        m.job_queued(rd.clone(), 2, HOUR);
        m.job_left_queue(2);
        m.runner_pods_created(&rd, 3);
        m.queue_to_assignment(Duration::from_secs(4));
        let text = m.render(&ScrapeState::default());
        for line in [
            "hangar_webhook_delivery_to_pod_seconds_count 1",
            "hangar_job_queue_to_assignment_seconds_count 1",
            "hangar_job_queue_to_assignment_seconds_sum 4.0",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn exposition_has_the_documented_names() {
        let m = Metrics::new();
        m.reconciled("runner", Duration::from_millis(30), true);
        let (first, second) = (m.reconcile_started("runner"), m.reconcile_started("runner"));
        drop(first);
        let _third = m.reconcile_started("runner");
        drop(second);
        m.delivery("workflow_job", "scaled");
        m.kube_request("GET", "403", "secrets");
        m.unregistration_refused("ns");
        m.leaked_registration_removed("organization");
        m.set_busy(["b".to_owned()].into());
        let pods = vec![
            pod("b", "Running", &[(ann::RUNNER_ID, "2")]),
            pod("i", "Running", &[(ann::RUNNER_ID, "1")]),
        ];
        let autoscalers = vec![AutoscalerView {
            namespace: "ns".into(),
            name: "hra".into(),
            desired: Some(3),
            min: Some(0),
            max: Some(10),
        }];
        let deployments = vec![("ns".to_owned(), "rd".to_owned(), 3)];
        let unhealthy = vec![
            ("ns".to_owned(), "ImagePullFailing"),
            ("ns".to_owned(), "ImagePullFailing"),
            ("other".to_owned(), "CrashLooping"),
        ];
        let text = m.render(&ScrapeState {
            pods: &pods,
            github: None,
            autoscalers: &autoscalers,
            deployments: &deployments,
            unhealthy: &unhealthy,
        });
        for line in [
            "hangar_reconcile_errors_total{controller=\"runner\"} 1",
            "hangar_reconcile_duration_seconds_count{controller=\"runner\"} 1",
            "hangar_reconciles_active{controller=\"runner\"} 1",
            "hangar_reconciles_active_max{controller=\"runner\"} 2",
            "hangar_webhook_deliveries_total{event=\"workflow_job\",outcome=\"scaled\"} 1",
            "rest_client_requests_total{code=\"403\",method=\"GET\",resource=\"secrets\"} 1",
            "hangar_runner_unregistrations_refused_total{namespace=\"ns\"} 1",
            "hangar_leaked_registrations_removed_total{scope=\"organization\"} 1",
            "hangar_runners{namespace=\"ns\",state=\"busy\"} 1",
            "hangar_runners{namespace=\"ns\",state=\"idle\"} 1",
            "horizontalrunnerautoscaler_desired_replicas{namespace=\"ns\",horizontalrunnerautoscaler=\"hra\"} 3",
            "runnerdeployment_spec_replicas{namespace=\"ns\",runnerdeployment=\"rd\"} 3",
            "hangar_runners_unhealthy{namespace=\"ns\",reason=\"ImagePullFailing\"} 2",
            "hangar_runners_unhealthy{namespace=\"other\",reason=\"CrashLooping\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
