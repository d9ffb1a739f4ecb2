//! The GitHub webhook server: `workflow_job` deliveries (and the legacy `check_run`,
//! `pull_request` and `push` triggers) become capacity reservations on the matching
//! HorizontalRunnerAutoscaler, quickly and at most once.
//!
//! Contract, in the order a delivery is handled:
//! 1. **Bounded**: the server runs within [`WebhookConfig::limits`] ([`crate::serve`]):
//!    connections, header and request timeouts, and bodies — GitHub's 25 MB payload cap by
//!    default; a larger body gets 413 before anything reads it.
//! 2. **Signature first**: `X-Hub-Signature-256` is verified over the raw body in constant time
//!    (`hangar_github::webhook`) before any parsing; a missing or wrong signature gets 401. The
//!    server refuses to start without a secret unless unsigned deliveries are allowed
//!    explicitly ([`WebhookConfig::new`]); ARC silently accepts them.
//! 3. **Parse**: no `X-GitHub-Event` or a payload that is not the event's JSON gets 400 with the
//!    reason.
//! 4. **Deduplicate**: a delivery id seen within the window gets 200 "duplicate" and changes
//!    nothing; so does a `workflow_job` with a (job id, attempt, queued/completed) already seen, so
//!    redeliveries and the old `completed` events a re-run resends (ARC #4315) neither scale
//!    twice nor cancel the re-run's reservation. A `queued` that arrives after its job's
//!    `completed` (reordered deliveries) is ignored, so no reservation lingers.
//! 5. **Decide** (`hangar_core::autoscaler::webhook`): `queued` reserves a runner, `completed`
//!    releases one (not for `skipped`, nor `success` without a runner); a `check_run`,
//!    `pull_request` or `push` that an autoscaler's trigger matches reserves that trigger's
//!    `amount` for its `duration`; other actions and events (`ping` → "pong", anything else)
//!    get 200 "ignored" — never a 5xx that makes GitHub show a failure. The autoscaler is
//!    chosen by `select_target` over autoscalers in a reflector store (no LIST per delivery),
//!    in namespace/name order; runner-group visibility is asked of GitHub only when a matching
//!    candidate uses a group and credentials are configured. When several autoscalers fit in
//!    one tier, the reply names them and each gets a Warning event (`AmbiguousTrigger`, once
//!    per dedup window): a job still goes to the first, a legacy event to none in that tier.
//!    A signed `in_progress` delivery also tells the runner directory which runner took the
//!    job ([`WebhookServer::report_sightings_to`], `hangar_core::runner_lookup`), so that the
//!    runner-pod controller learns its ID without a runner list, and a signed `completed` one
//!    which runner is done, so that its set fills its place without waiting for the kubelet to
//!    report the exit; unsigned deliveries never do (anyone could name another pod's runner).
//! 6. **Record**: the operation, naming its job and delivery, joins a bounded [`Batcher`] and
//!    the handler waits for its batch's write. **A 2xx means the reservation is stored in the
//!    cluster**: 202 once the patch succeeded (or found the job already recorded). A full
//!    queue, or a write not done within [`WebhookConfig::write_timeout`], gets 503, and the
//!    delivery is forgotten by the dedup so that GitHub's redelivery is accepted later (the
//!    operation may still be written; the stored job id makes the redelivery count nothing).
//!
//! The batch writer applies each autoscaler's pending operations with
//! [`crate::reservation_write::write_operations`] (a compare-and-swap on
//! `spec.capacityReservations`, shared with the pull recovery; put back into the batcher when
//! it fails), at most once per autoscaler per [`WebhookConfig::batch_interval`]. A lone
//! delivery is written after a 20 ms pause that gathers a burst into one write. The spec change triggers the HRA
//! controller's watch, which scales the target in the same moment: that is the fast path from
//! a queued job to a new runner pod.
//!
//! Deduplication that holds across replicas and restarts is the stored list itself: each
//! reservation records its job id (`hangar_core::autoscaler::reservations`), so a job's
//! `queued` reserves once and its `completed` releases that reservation only, whichever
//! replica, or which run of the server, receives them. The in-memory dedup above only spares
//! writes.
//!
//! Shutdown ([`WebhookServer::serve`]'s `shutdown`): the server stops accepting connections,
//! answers the deliveries in flight (each once its batch is written), then writes whatever is
//! still queued, for at most [`DRAIN_TIMEOUT`], and returns.
//!
//! Latencies (`crate::metrics`): an accepted `queued` delivery is remembered for its
//! autoscaler's target until a runner pod is created for it; an `in_progress` or `completed`
//! one forgets it, and an `in_progress` one for a job some autoscaler matches records GitHub's
//! `started_at - created_at` once per job attempt. Both only when metrics are attached.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::FutureExt as _;
use hangar_api::convert::trigger_views;
use hangar_api::horizontal_runner_autoscaler::ScaleTargetKind;
use hangar_api::{HorizontalRunnerAutoscaler, RunnerConfig, RunnerDeployment, RunnerSet};
use hangar_core::RunnerScope;
use hangar_core::autoscaler::webhook::{GroupOwner, GroupRef};
use hangar_core::autoscaler::{
    Batch, Batcher, DEFAULT_RESERVATION_DURATION, Dedup, Demand, EventGrant, EventOp, JobKey,
    JobOp, JobOrigin, JobOutcome, RepoEvent, ScaleOp, Seen, TargetCandidate, select_target,
    workflow_job_operation,
};
use hangar_core::runner_lookup::Sighting;
use hangar_github::webhook::{WebhookError, WebhookEvent, WorkflowJobAction, WorkflowJobEvent};
use hangar_github::{GitHubApi, Secret};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::context::Clock;
use crate::reservation_write::{Written, job_duration, write_operations};
use crate::runner_directory::RunnerDirectory;

/// Field manager of the reservation writes.
pub use hangar_runtime::managers::WEBHOOK as MANAGER;

/// Default body limit: GitHub's own cap on webhook payloads (25 MB); larger events are never
/// delivered.
pub const DEFAULT_MAX_BODY_BYTES: usize = 25 * 1024 * 1024;
/// Default limit of connections served at once.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 512;
/// Default interval between two reservation writes of one autoscaler.
/// Short, so that the jobs of a burst wait little for their runners; long enough that a burst
/// costs a handful of writes a second, not one per delivery.
pub const DEFAULT_BATCH_INTERVAL: Duration = Duration::from_millis(250);
/// Default limit of pending operations (ARC's `--queue-limit` is 100).
pub const DEFAULT_QUEUE_LIMIT: usize = 1000;
/// How long delivery ids and (job, action) pairs are remembered (ARC PR #4594 uses 1 h).
pub const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(3600);
/// How many keys the dedup remembers at most.
pub const DEFAULT_DEDUP_CAPACITY: usize = 100_000;
/// How long the runner-group visibility lookup may take before groups count as visible, so
/// that every answer stays well within GitHub's 10 s delivery timeout.
const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(4);
/// How long the writer waits after being woken before taking due batches.
const GATHER: Duration = Duration::from_millis(20);
/// Default time a delivery waits for its reservation's write before it gets 503: with the
/// runner-group lookup's 4 s, within GitHub's 10 s delivery timeout.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a shutdown waits for queued operations to be written after the last answer.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The server refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No secret and no explicit permission to accept unsigned deliveries.
    #[error(
        "no webhook secret: set GITHUB_WEBHOOK_SECRET_TOKEN (or --github-webhook-secret-token) \
         to the secret configured on the GitHub webhook, or pass \
         --insecure-accept-unsigned-webhooks to accept deliveries anyone could forge"
    )]
    MissingSecret,
}

/// How the server behaves.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// Accepted signing secrets (several during a rotation); empty only when unsigned
    /// deliveries are allowed.
    pub secrets: Vec<Secret>,
    /// Body, connection and time limits of the HTTP server.
    pub limits: crate::serve::Limits,
    /// At most one reservation write per autoscaler per interval.
    pub batch_interval: Duration,
    /// Pending operations beyond this are refused with 503.
    pub queue_limit: usize,
    /// How long deliveries and job events are remembered.
    pub dedup_window: Duration,
    /// How many of them at most.
    pub dedup_capacity: usize,
    /// How long a delivery waits for its reservation to be stored before it gets 503.
    pub write_timeout: Duration,
}

impl WebhookConfig {
    /// Defaults around `secret`. Without one, `allow_unsigned` must be set explicitly; with one,
    /// signatures are always verified.
    pub fn new(secret: Option<Secret>, allow_unsigned: bool) -> Result<Self, ConfigError> {
        let secrets: Vec<Secret> = secret.into_iter().filter(|s| !s.is_empty()).collect();
        if secrets.is_empty() && !allow_unsigned {
            return Err(ConfigError::MissingSecret);
        }
        if secrets.is_empty() {
            warn!(
                "webhook signatures are NOT verified: anyone who can reach the server can scale runners"
            );
        }
        Ok(Self {
            secrets,
            limits: crate::serve::Limits::new(DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_BODY_BYTES),
            batch_interval: DEFAULT_BATCH_INTERVAL,
            queue_limit: DEFAULT_QUEUE_LIMIT,
            dedup_window: DEFAULT_DEDUP_WINDOW,
            dedup_capacity: DEFAULT_DEDUP_CAPACITY,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
        })
    }
}

/// What the server reads: autoscalers and their targets, from reflector stores.
#[derive(Clone)]
pub struct WebhookStores {
    /// HorizontalRunnerAutoscalers.
    pub hras: Store<HorizontalRunnerAutoscaler>,
    /// RunnerDeployments (targets).
    pub deployments: Store<RunnerDeployment>,
    /// RunnerSets (targets).
    pub runner_sets: Store<RunnerSet>,
}

impl std::fmt::Debug for WebhookStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookStores")
            .field("hras", &self.hras.len())
            .field("deployments", &self.deployments.len())
            .field("runner_sets", &self.runner_sets.len())
            .finish()
    }
}

/// An autoscaler: namespace and name.
pub type HraKey = (String, String);

/// What the dedup remembers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum SeenKey {
    Delivery(String),
    /// Job id, run attempt, operation. The attempt keeps a re-run that reused the job id
    /// distinct from the attempt that completed.
    Job(u64, u32, ScaleOp),
    /// Job id and run attempt whose queue time was recorded.
    Started(u64, u32),
    /// An autoscaler (namespace, name) warned about as ambiguous for an event kind.
    Ambiguous(String, String, &'static str),
}

/// Where a delivery goes: [`hangar_core::autoscaler::Selection`] by autoscaler key.
#[derive(Debug)]
struct Routed {
    target: Option<HraKey>,
    grant: Option<EventGrant>,
    ambiguous: Vec<(hangar_core::autoscaler::webhook::MatchTier, Vec<HraKey>)>,
}

impl Routed {
    /// What the delivery's reply adds when a tier was ambiguous; empty otherwise.
    fn ambiguity_note(&self) -> String {
        self.ambiguous
            .iter()
            .map(|(tier, keys)| {
                let names: Vec<String> = keys.iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
                format!("; ambiguous at the {tier:?} tier: {}", names.join(", "))
            })
            .collect()
    }
}

/// Counters of what the server did, for tests, benchmarks and logs.
#[derive(Debug, Default)]
pub struct Stats {
    /// Deliveries whose signature (and JSON) checked out.
    pub verified: AtomicU64,
    /// 401s.
    pub unauthorized: AtomicU64,
    /// 400s.
    pub malformed: AtomicU64,
    /// Duplicates by delivery id or job event.
    pub duplicates: AtomicU64,
    /// 200 "ignored" (pings included) and deliveries no autoscaler matched.
    pub ignored: AtomicU64,
    /// Operations stored (202).
    pub accepted: AtomicU64,
    /// 503s for a full queue.
    pub queue_full: AtomicU64,
    /// 503s for a write not done in time.
    pub write_timeouts: AtomicU64,
    /// Reservation writes that succeeded.
    pub writes: AtomicU64,
    /// Writes that hit a conflict and were retried.
    pub write_conflicts: AtomicU64,
}

/// Why a queued operation was not stored.
#[derive(Debug, thiserror::Error)]
enum NotStored {
    #[error("the reservation was not stored within {0:?}; GitHub may redeliver")]
    Timeout(Duration),
    #[error("the reservation writer stopped; GitHub may redeliver")]
    WriterGone,
}

/// An operation waiting in the batcher, with the answer its delivery waits for (`None` once
/// that was sent, or for operations nobody waits on).
#[derive(Debug)]
struct Queued {
    op: JobOp,
    stored: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The server's shared state: configuration, stores, dedup memory and the batcher.
pub struct WebhookServer {
    config: WebhookConfig,
    stores: WebhookStores,
    github: Option<Arc<dyn GitHubApi>>,
    clock: Arc<dyn Clock>,
    dedup: Mutex<Dedup<SeenKey>>,
    batcher: Mutex<Batcher<HraKey, Queued>>,
    wake: Notify,
    /// Set when the listener has stopped: the writer exits once the queue is empty.
    stopping: std::sync::atomic::AtomicBool,
    stats: Stats,
    metrics: std::sync::OnceLock<Arc<crate::metrics::Metrics>>,
    /// Publishes Warning events about ambiguous autoscalers; set when serving starts.
    recorder: std::sync::OnceLock<kube::runtime::events::Recorder>,
    /// Where runners seen at work are reported, if anywhere.
    sightings: std::sync::OnceLock<Arc<RunnerDirectory>>,
}

impl std::fmt::Debug for WebhookServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookServer")
            .field("stores", &self.stores)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// An answer: status and a one-line text for GitHub's delivery log.
#[derive(Debug)]
struct Reply(StatusCode, String);

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        (self.0, self.1).into_response()
    }
}

impl WebhookServer {
    /// A server over `stores`. `github` (optional) answers runner-group visibility; without it
    /// every group counts as visible, as in ARC.
    pub fn new(
        config: WebhookConfig,
        stores: WebhookStores,
        github: Option<Arc<dyn GitHubApi>>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Arc::new(Self {
            dedup: Mutex::new(Dedup::new(config.dedup_window, config.dedup_capacity)),
            batcher: Mutex::new(Batcher::new(config.batch_interval, config.queue_limit)),
            config,
            stores,
            github,
            clock,
            wake: Notify::new(),
            stopping: std::sync::atomic::AtomicBool::new(false),
            stats: Stats::default(),
            metrics: std::sync::OnceLock::new(),
            recorder: std::sync::OnceLock::new(),
            sightings: std::sync::OnceLock::new(),
        })
    }

    /// Counts deliveries into `metrics` (`hangar_webhook_deliveries_total{event,outcome}`,
    /// outcome = the HTTP status answered). Only the first call counts.
    pub fn set_metrics(&self, metrics: Arc<crate::metrics::Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// Reports the runner each signed `in_progress` or `completed` delivery names to
    /// `directory` (see the module docs). Only the first call counts.
    pub fn report_sightings_to(&self, directory: Arc<RunnerDirectory>) {
        let _ = self.sightings.set(directory);
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// `GET /` answers that the server runs; `POST` to any path is a delivery. Without limits:
    /// [`WebhookServer::serve`] applies them.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/", get(running).post(deliver))
            .route("/{*path}", post(deliver))
            .with_state(self.clone())
    }

    /// Serves deliveries on `listener` and writes reservations with `client` until `shutdown`
    /// completes.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        client: Client,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let addr: Option<SocketAddr> = listener.local_addr().ok();
        info!(?addr, "webhook server listening");
        let reporter = kube::runtime::events::Reporter {
            controller: "hangar-webhook-server".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let _ = self.recorder.set(kube::runtime::events::Recorder::new(
            client.clone(),
            reporter,
        ));
        let writer = tokio::spawn(self.clone().run_writer(client));
        let limits = self.config.limits;
        crate::serve::serve(
            listener,
            crate::serve::Plain,
            self.router(),
            limits,
            shutdown,
        )
        .await;
        self.drain(writer).await;
        Ok(())
    }

    /// Lets the writer finish the queue (no handler can add to it any more), for at most
    /// [`DRAIN_TIMEOUT`].
    async fn drain(&self, mut writer: tokio::task::JoinHandle<()>) {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake.notify_one();
        if tokio::time::timeout(DRAIN_TIMEOUT, &mut writer)
            .await
            .is_err()
        {
            writer.abort();
            warn!(
                operations = self.lock_batcher().queued(),
                "shutting down with reservation operations unwritten; their deliveries were answered 503"
            );
        }
    }

    /// Handles one delivery.
    async fn handle(&self, headers: &HeaderMap, body: &[u8]) -> Reply {
        let delivery = match hangar_github::webhook::receive(headers, body, &self.config.secrets) {
            Ok(d) => d,
            Err(WebhookError::Signature(e)) => {
                self.stats.unauthorized.fetch_add(1, Ordering::Relaxed);
                debug!(error = %e, "rejected delivery");
                return Reply(StatusCode::UNAUTHORIZED, e.to_string());
            }
            Err(e) => {
                self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                let reason = match &e {
                    WebhookError::Payload { source, .. } => format!("{e}: {source}"),
                    _ => e.to_string(),
                };
                debug!(%reason, "malformed delivery");
                return Reply(StatusCode::BAD_REQUEST, reason);
            }
        };
        self.stats.verified.fetch_add(1, Ordering::Relaxed);
        let now = self.clock.now();
        let delivery_key = delivery.id.clone().map(SeenKey::Delivery);
        if let Some(key) = &delivery_key {
            let seen = self.lock_dedup().observe(key.clone(), now);
            if seen == Seen::Duplicate {
                self.stats.duplicates.fetch_add(1, Ordering::Relaxed);
                return Reply(StatusCode::OK, "duplicate delivery: already handled".into());
            }
        }
        let reply = match delivery.event {
            WebhookEvent::Ping(_) => Reply(StatusCode::OK, "pong".into()),
            WebhookEvent::WorkflowJob(event) => {
                return self.workflow_job(&event, delivery_key, now).await;
            }
            WebhookEvent::CheckRun(e) => {
                let event = RepoEvent::CheckRun {
                    action: &e.action,
                    status: &e.check_run.status,
                    name: &e.check_run.name,
                };
                return self
                    .repo_event(&event, &e.repository, e.enterprise.as_ref(), delivery_key)
                    .await;
            }
            WebhookEvent::PullRequest(e) => {
                let event = RepoEvent::PullRequest {
                    action: &e.action,
                    base_branch: &e.pull_request.base.name,
                };
                return self
                    .repo_event(&event, &e.repository, e.enterprise.as_ref(), delivery_key)
                    .await;
            }
            WebhookEvent::Push(e) => {
                return self
                    .repo_event(
                        &RepoEvent::Push,
                        &e.repository,
                        e.enterprise.as_ref(),
                        delivery_key,
                    )
                    .await;
            }
            WebhookEvent::Other { event } => Reply(
                StatusCode::OK,
                format!("ignored: {event} events are not used"),
            ),
        };
        self.stats.ignored.fetch_add(1, Ordering::Relaxed);
        reply
    }

    async fn workflow_job(
        &self,
        event: &WorkflowJobEvent,
        delivery_key: Option<SeenKey>,
        now: SystemTime,
    ) -> Reply {
        let job = &event.workflow_job;
        if matches!(
            event.action,
            WorkflowJobAction::InProgress | WorkflowJobAction::Completed
        ) && let Some(metrics) = self.metrics.get()
        {
            metrics.job_left_queue(job.id);
            if event.action == WorkflowJobAction::InProgress {
                self.record_queue_time(metrics, event, now).await;
            }
        }
        if matches!(
            event.action,
            WorkflowJobAction::InProgress | WorkflowJobAction::Completed
        ) {
            self.report_sighting(event, now);
        }
        let outcome = workflow_job_operation(
            action_name(event.action),
            job.conclusion.map(|c| c.as_str()),
            job.runner_id,
        );
        let op = match outcome {
            JobOutcome::Scale(op) => op,
            JobOutcome::Ignore(reason) => {
                self.stats.ignored.fetch_add(1, Ordering::Relaxed);
                debug!(job = job.id, ?reason, "ignored");
                return Reply(StatusCode::OK, format!("ignored: {reason:?}"));
            }
        };
        let attempt = job.run_attempt.unwrap_or(1);
        let job_key = SeenKey::Job(job.id, attempt, op);
        {
            let mut dedup = self.lock_dedup();
            if dedup.observe(job_key.clone(), now) == Seen::Duplicate {
                self.stats.duplicates.fetch_add(1, Ordering::Relaxed);
                return Reply(
                    StatusCode::OK,
                    format!("duplicate: job {} was already {op:?}", job.id),
                );
            }
            let completed = SeenKey::Job(job.id, attempt, ScaleOp::Down);
            if op == ScaleOp::Up && dedup.contains(&completed, now) {
                self.stats.ignored.fetch_add(1, Ordering::Relaxed);
                debug!(job = job.id, "ignored: already completed");
                return Reply(
                    StatusCode::OK,
                    format!("ignored: job {} already completed", job.id),
                );
            }
        }
        let forget = |server: &Self| {
            let mut dedup = server.lock_dedup();
            dedup.forget(&job_key);
            if let Some(key) = &delivery_key {
                dedup.forget(key);
            }
        };
        let routed = self
            .select(
                &event.repository,
                event.enterprise.as_ref(),
                Demand::Job(&event.workflow_job.labels),
            )
            .await;
        self.warn_ambiguous(&routed, "workflow_job", now);
        let Some(key) = routed.target.clone() else {
            // Forgotten, so that a redelivery after the autoscaler is created counts.
            forget(self);
            self.stats.ignored.fetch_add(1, Ordering::Relaxed);
            debug!(job = job.id, "ignored: no autoscaler matches");
            return Reply(
                StatusCode::OK,
                format!(
                    "ignored: no HorizontalRunnerAutoscaler with a workflowJob trigger matches \
                     {} with labels {:?}",
                    event.repository.full_name, job.labels
                ),
            );
        };
        let job_op = JobOp {
            op,
            job: Some(JobKey {
                id: job.id,
                attempt,
            }),
            delivery: match &delivery_key {
                Some(SeenKey::Delivery(id)) => Some(id.clone()),
                _ => None,
            },
            // Recorded on the job's tombstone: owner sync then releases that runner's place
            // as soon as the autoscaler's count no longer holds the job.
            runner: (op == ScaleOp::Down)
                .then(|| job.runner_name.clone())
                .flatten()
                .filter(|n| !n.is_empty()),
            event: None,
        };
        if let Err(reply) = self.record(&key, job_op).await {
            forget(self);
            return reply;
        }
        if op == ScaleOp::Up
            && let Some(metrics) = self.metrics.get()
            && let Some((target, reservation)) = self.scale_target(&key)
        {
            metrics.job_queued(target, job.id, reservation);
        }
        debug!(job = job.id, ?op, autoscaler = %format!("{}/{}", key.0, key.1), "recorded");
        Reply(
            StatusCode::ACCEPTED,
            format!(
                "recorded: {op:?} for {}/{}{}",
                key.0,
                key.1,
                routed.ambiguity_note()
            ),
        )
    }

    /// Tells the runner directory which runner took `event`'s job, or finished it, when the
    /// delivery's signature was verified (the server has secrets) and it names the runner.
    fn report_sighting(&self, event: &WorkflowJobEvent, now: SystemTime) {
        let job = &event.workflow_job;
        let (Some(directory), false, Some(runner_id), Some(name)) = (
            self.sightings.get(),
            self.config.secrets.is_empty(),
            job.runner_id,
            job.runner_name.as_deref().filter(|n| !n.is_empty()),
        ) else {
            return;
        };
        directory.sighted(
            name,
            Sighting {
                runner_id,
                repository: event.repository.full_name.clone(),
                enterprise: event.enterprise.as_ref().and_then(|e| e.slug.clone()),
                at: now,
                job_done: event.action == WorkflowJobAction::Completed,
            },
        );
    }

    /// A legacy `check_run`, `pull_request` or `push` delivery: reserves the matching
    /// trigger's `amount` runners for its `duration` on the one autoscaler it selects.
    async fn repo_event(
        &self,
        event: &RepoEvent<'_>,
        repository: &hangar_github::webhook::Repository,
        enterprise: Option<&hangar_github::webhook::Enterprise>,
        delivery_key: Option<SeenKey>,
    ) -> Reply {
        let now = self.clock.now();
        let forget = |server: &Self| {
            if let Some(key) = &delivery_key {
                server.lock_dedup().forget(key);
            }
        };
        let routed = self
            .select(repository, enterprise, Demand::Event(event))
            .await;
        self.warn_ambiguous(&routed, event_name(event), now);
        let (Some(key), Some(grant)) = (routed.target.clone(), routed.grant) else {
            // Forgotten, so that a redelivery after the autoscalers are fixed counts.
            forget(self);
            self.stats.ignored.fetch_add(1, Ordering::Relaxed);
            return Reply(
                StatusCode::OK,
                format!(
                    "ignored: no single HorizontalRunnerAutoscaler with a {} trigger matches {}{}",
                    event.trigger_field(),
                    repository.full_name,
                    routed.ambiguity_note()
                ),
            );
        };
        let op = JobOp {
            op: ScaleOp::Up,
            job: None,
            delivery: match &delivery_key {
                Some(SeenKey::Delivery(id)) => Some(id.clone()),
                _ => None,
            },
            runner: None,
            event: Some(EventOp {
                trigger: event.trigger_field(),
                replicas: grant.replicas,
                duration: grant.duration,
            }),
        };
        if let Err(reply) = self.record(&key, op).await {
            forget(self);
            return reply;
        }
        info!(
            autoscaler = %format!("{}/{}", key.0, key.1),
            event = event_name(event),
            replicas = grant.replicas,
            duration = ?grant.duration,
            "reserved runners for a legacy trigger"
        );
        Reply(
            StatusCode::ACCEPTED,
            format!(
                "recorded: {} runner(s) for {:?} on {}/{} (scaleUpTriggers[{}]){}",
                grant.replicas,
                grant.duration,
                key.0,
                key.1,
                grant.trigger,
                routed.ambiguity_note()
            ),
        )
    }

    /// Queues `op` for autoscaler `key` and waits until it is stored; the error is the answer
    /// to give (503: GitHub may redeliver).
    async fn record(&self, key: &HraKey, op: JobOp) -> Result<(), Reply> {
        let now = self.clock.now();
        let (stored, written) = tokio::sync::oneshot::channel();
        let queued = Queued {
            op,
            stored: Some(stored),
        };
        let pushed = self.lock_batcher().push(key.clone(), queued, now);
        if let Err(full) = pushed {
            self.stats.queue_full.fetch_add(1, Ordering::Relaxed);
            warn!(autoscaler = %format!("{}/{}", key.0, key.1), "webhook queue full");
            return Err(Reply(StatusCode::SERVICE_UNAVAILABLE, full.to_string()));
        }
        self.wake.notify_one();
        let waited = match tokio::time::timeout(self.config.write_timeout, written).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(NotStored::WriterGone),
            Err(_) => Err(NotStored::Timeout(self.config.write_timeout)),
        };
        if let Err(e) = waited {
            self.stats.write_timeouts.fetch_add(1, Ordering::Relaxed);
            warn!(autoscaler = %format!("{}/{}", key.0, key.1), error = %e, "delivery not recorded");
            return Err(Reply(StatusCode::SERVICE_UNAVAILABLE, e.to_string()));
        }
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Publishes a Warning event on each autoscaler of an ambiguous tier, at most once per
    /// autoscaler and event kind per dedup window: the delivery's reply says it every time.
    fn warn_ambiguous(&self, routed: &Routed, event: &'static str, now: SystemTime) {
        let Some(recorder) = self.recorder.get() else {
            return;
        };
        for (tier, keys) in &routed.ambiguous {
            let names: Vec<String> = keys.iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
            for (ns, name) in keys {
                let seen = SeenKey::Ambiguous(ns.clone(), name.clone(), event);
                if self.lock_dedup().observe(seen, now) == Seen::Duplicate {
                    continue;
                }
                let note = format!(
                    "{event} deliveries match several autoscalers at the {tier:?} tier ({}); {}",
                    names.join(", "),
                    if event == "workflow_job" {
                        "the first by namespace and name takes each job"
                    } else {
                        "none of them is scaled there (as in ARC): narrow their triggers or scopes"
                    }
                );
                let reference = k8s_openapi::api::core::v1::ObjectReference {
                    api_version: Some("actions.summerwind.dev/v1alpha1".into()),
                    kind: Some("HorizontalRunnerAutoscaler".into()),
                    namespace: Some(ns.clone()),
                    name: Some(name.clone()),
                    uid: self
                        .stores
                        .hras
                        .get(&ObjectRef::new(name).within(ns))
                        .and_then(|h| h.metadata.uid.clone()),
                    ..Default::default()
                };
                let recorder = recorder.clone();
                tokio::spawn(async move {
                    let event = kube::runtime::events::Event {
                        type_: kube::runtime::events::EventType::Warning,
                        reason: "AmbiguousTrigger".into(),
                        note: Some(note),
                        action: "Scale".into(),
                        secondary: None,
                    };
                    if let Err(e) = recorder.publish(&event, &reference).await {
                        debug!(error = %e, "could not publish event");
                    }
                });
            }
        }
    }

    /// Observes how long an `in_progress` job waited, once per job attempt, if an autoscaler
    /// here matches it: jobs for other runners (GitHub-hosted, other controllers) arrive at an
    /// organization's webhook too and say nothing about Hangar's runners.
    async fn record_queue_time(
        &self,
        metrics: &crate::metrics::Metrics,
        event: &WorkflowJobEvent,
        now: SystemTime,
    ) {
        let job = &event.workflow_job;
        let Some(wait) = queue_time(job) else {
            return;
        };
        let key = SeenKey::Started(job.id, job.run_attempt.unwrap_or(1));
        if self.lock_dedup().observe(key.clone(), now) == Seen::Duplicate {
            return;
        }
        let routed = self
            .select(
                &event.repository,
                event.enterprise.as_ref(),
                Demand::Job(&job.labels),
            )
            .await;
        if routed.target.is_some() {
            metrics.queue_to_assignment(wait);
        } else {
            // An autoscaler created later may still match a redelivery.
            self.lock_dedup().forget(&key);
        }
    }

    /// What autoscaler `key` scales, and how long its reservations last.
    fn scale_target(&self, key: &HraKey) -> Option<(crate::metrics::ScaleTarget, Duration)> {
        let hra = self
            .stores
            .hras
            .get(&ObjectRef::new(&key.1).within(&key.0))?;
        let reference = hra.spec.scale_target_ref.as_ref()?;
        let target = crate::metrics::ScaleTarget {
            namespace: key.0.clone(),
            kind: reference.kind.unwrap_or_default(),
            name: reference.name.clone()?,
        };
        Some((
            target,
            job_duration(&hra).unwrap_or(DEFAULT_RESERVATION_DURATION),
        ))
    }

    /// The autoscaler `demand` from `repository` scales, if any, and where it was ambiguous.
    async fn select(
        &self,
        repository: &hangar_github::webhook::Repository,
        enterprise: Option<&hangar_github::webhook::Enterprise>,
        demand: Demand<'_>,
    ) -> Routed {
        let candidates = candidates(&self.stores);
        let origin = JobOrigin {
            owner: &repository.owner.login,
            repository: &repository.name,
            owner_is_user: repository.owner.kind.as_deref() == Some("User"),
            enterprise: enterprise.and_then(|e| e.slug.as_deref()),
        };
        let visible = self.visible_groups(&origin, &candidates).await;
        let selection = select_target(&origin, demand, &candidates, |group: &GroupRef<'_>| {
            let known = match group.owner_kind {
                GroupOwner::Organization => visible.organization.as_ref(),
                GroupOwner::Enterprise => visible.enterprise.as_ref(),
            };
            known.is_none_or(|names| names.contains(&group.name.to_lowercase()))
        });
        Routed {
            target: selection.target.map(|(c, _tier)| c.id.clone()),
            grant: selection.grant,
            ambiguous: selection
                .ambiguous
                .into_iter()
                .map(|a| {
                    (
                        a.tier,
                        a.candidates.into_iter().map(|c| c.id.clone()).collect(),
                    )
                })
                .collect(),
        }
    }

    /// Names (lower case) of the runner groups visible to the job's repository, per tier, when
    /// GitHub can be asked and a candidate needs it; `None` means "assume visible".
    async fn visible_groups(
        &self,
        origin: &JobOrigin<'_>,
        candidates: &[TargetCandidate<HraKey>],
    ) -> VisibleGroups {
        let mut visible = VisibleGroups::default();
        let Some(github) = &self.github else {
            return visible;
        };
        let grouped = |owner_kind: GroupOwner, owner: &str| {
            candidates.iter().any(|c| {
                let in_scope = match (&c.scope, owner_kind) {
                    (RunnerScope::Organization(o), GroupOwner::Organization) => {
                        o.eq_ignore_ascii_case(owner)
                    }
                    (RunnerScope::Enterprise(e), GroupOwner::Enterprise) => {
                        e.eq_ignore_ascii_case(owner)
                    }
                    _ => false,
                };
                in_scope && c.group.as_deref().is_some_and(|g| !g.is_empty())
            })
        };
        let lookup = async {
            if !origin.owner_is_user && grouped(GroupOwner::Organization, origin.owner) {
                match github
                    .list_org_runner_groups(origin.owner, Some(origin.repository))
                    .await
                {
                    Ok(groups) => visible.organization = Some(own_group_names(groups)),
                    Err(e) => {
                        warn!(org = origin.owner, error = %e, "cannot list runner groups; assuming visible")
                    }
                }
            }
            if let Some(enterprise) = origin.enterprise
                && !origin.owner_is_user
                && grouped(GroupOwner::Enterprise, enterprise)
            {
                match github
                    .list_enterprise_runner_groups(enterprise, Some(origin.owner))
                    .await
                {
                    Ok(groups) => visible.enterprise = Some(group_names(groups)),
                    Err(e) => {
                        warn!(enterprise, error = %e, "cannot list runner groups; assuming visible")
                    }
                }
            }
        };
        if tokio::time::timeout(VISIBILITY_TIMEOUT, lookup)
            .await
            .is_err()
        {
            warn!("runner group lookup timed out; assuming visible");
        }
        visible
    }

    /// Writes due batches until the server stops and the queue is empty.
    pub async fn run_writer(self: Arc<Self>, client: Client) {
        loop {
            if self.stopping.load(Ordering::SeqCst) && self.lock_batcher().queued() == 0 {
                return;
            }
            let now = self.clock.now();
            let (due, next) = {
                let mut batcher = self.lock_batcher();
                let due = batcher.take_due(now);
                (due, batcher.next_due())
            };
            if !due.is_empty() {
                futures::future::join_all(due.into_iter().map(|b| self.write(&client, b))).await;
                continue;
            }
            let wait = next.map_or(Duration::from_secs(3600), |t| {
                t.duration_since(now).unwrap_or_default()
            });
            tokio::select! {
                // A burst of deliveries (GitHub sends one per job) arrives within milliseconds:
                // gather it into the first write instead of leaving all but one job to wait a
                // batch interval.
                () = self.wake.notified() => tokio::time::sleep(GATHER).await,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Applies one batch to its autoscaler's reservations; its deliveries are answered once the
    /// result is stored (or the autoscaler is gone), and the batch is put back on other errors.
    async fn write(&self, client: &Client, mut batch: Batch<HraKey, Queued>) {
        if self.try_write(client, &batch).await {
            for queued in &mut batch.ops {
                if let Some(stored) = queued.stored.take() {
                    let _ = stored.send(());
                }
            }
        } else {
            self.lock_batcher().requeue(batch, self.clock.now());
            self.wake.notify_one();
        }
    }

    /// Whether the batch's operations are stored (or have nothing left to apply to).
    async fn try_write(&self, client: &Client, batch: &Batch<HraKey, Queued>) -> bool {
        let (ns, name) = &batch.key;
        let cached = self.stores.hras.get(&ObjectRef::new(name).within(ns));
        let ops: Vec<JobOp> = batch.ops.iter().map(|q| q.op.clone()).collect();
        let written = write_operations(
            client,
            ns,
            name,
            cached,
            &ops,
            || self.clock.now(),
            MANAGER,
            || {
                self.stats.write_conflicts.fetch_add(1, Ordering::Relaxed);
            },
        )
        .await;
        match written {
            Ok(Written::Stored(update)) => {
                self.stats.writes.fetch_add(1, Ordering::Relaxed);
                info!(
                    autoscaler = %format!("{ns}/{name}"),
                    added = update.added,
                    removed = update.removed,
                    expired = update.expired,
                    extended = update.extended,
                    duplicates = update.duplicates,
                    reservations = update.reservations.len(),
                    "capacity reservations updated"
                );
                true
            }
            Ok(Written::Unchanged) => true,
            Ok(Written::Gone) => {
                debug!(autoscaler = %format!("{ns}/{name}"), "autoscaler gone; dropping its operations");
                true
            }
            Err(error) => {
                warn!(%error, "cannot write capacity reservations; retrying");
                false
            }
        }
    }

    fn lock_dedup(&self) -> std::sync::MutexGuard<'_, Dedup<SeenKey>> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.dedup.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_batcher(&self) -> std::sync::MutexGuard<'_, Batcher<HraKey, Queued>> {
        self.batcher.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The names (lower case) of `groups`.
fn group_names(groups: Vec<hangar_github::RunnerGroup>) -> HashSet<String> {
    groups.into_iter().map(|g| g.name.to_lowercase()).collect()
}

/// The names (lower case) of an organization's own groups in its listing: GitHub lists the
/// enterprise groups the organization inherits there too (`inherited: true`), and an
/// organization's runners cannot be in those, so an organization-scoped target in a group of
/// that name is not made visible by them.
fn own_group_names(groups: Vec<hangar_github::RunnerGroup>) -> HashSet<String> {
    group_names(groups.into_iter().filter(|g| !g.inherited).collect())
}

#[derive(Debug, Default)]
struct VisibleGroups {
    organization: Option<HashSet<String>>,
    enterprise: Option<HashSet<String>>,
}

async fn running() -> &'static str {
    "webhook server is running"
}

async fn deliver(
    State(server): State<Arc<WebhookServer>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let reply = server.handle(&headers, &body).await;
    if let Some(metrics) = server.metrics.get() {
        let event = headers
            .get("x-github-event")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("unknown");
        // Bounded label values: GitHub's event names, or "other".
        let event = match event {
            "workflow_job" | "ping" | "check_run" | "pull_request" | "push" => event,
            _ => "other",
        };
        metrics.delivery(event, reply.0.as_str());
    }
    reply.into_response()
}

/// The `X-GitHub-Event` name of a legacy event.
fn event_name(event: &RepoEvent<'_>) -> &'static str {
    match event {
        RepoEvent::CheckRun { .. } => "check_run",
        RepoEvent::PullRequest { .. } => "pull_request",
        RepoEvent::Push => "push",
    }
}

fn action_name(action: WorkflowJobAction) -> &'static str {
    match action {
        WorkflowJobAction::Queued => "queued",
        WorkflowJobAction::Waiting => "waiting",
        WorkflowJobAction::InProgress => "in_progress",
        WorkflowJobAction::Completed => "completed",
        WorkflowJobAction::Unknown => "unknown",
    }
}

/// How long `job` waited for a runner by GitHub's clock: `started_at - created_at` (an
/// `in_progress` job's `started_at` is when a runner took it). `None` when either is missing
/// or the difference is negative.
fn queue_time(job: &hangar_github::webhook::WorkflowJob) -> Option<Duration> {
    let waited = job.started_at?.duration_since(job.created_at?);
    Duration::try_from(waited).ok()
}

/// Autoscalers with scale-up triggers, with their targets' scope, group and labels, in
/// namespace/name order: the webhook's routing table, which the pull recovery routes by too.
pub fn candidates(stores: &WebhookStores) -> Vec<TargetCandidate<HraKey>> {
    let mut hras = stores.hras.state();
    hras.sort_by_key(|h| (h.namespace(), h.name_any()));
    hras.iter()
        .filter_map(|hra| {
            let triggers = trigger_views(hra);
            if triggers.is_empty() {
                return None; // scales on its metrics alone
            }
            let ns = hra.namespace()?;
            let config = target_config(stores, hra, &ns)?;
            let scope = RunnerScope::from_fields(
                config.enterprise.as_deref(),
                config.organization.as_deref(),
                config.repository.as_deref(),
            )
            .ok()?;
            Some(TargetCandidate {
                id: (ns, hra.name_any()),
                scope,
                group: config.group.clone(),
                labels: config.labels.clone().unwrap_or_default(),
                triggers,
            })
        })
        .collect()
}

fn target_config(
    stores: &WebhookStores,
    hra: &HorizontalRunnerAutoscaler,
    ns: &str,
) -> Option<RunnerConfig> {
    let reference = hra.spec.scale_target_ref.as_ref()?;
    let name = reference.name.as_deref()?;
    match reference.kind.unwrap_or_default() {
        ScaleTargetKind::RunnerDeployment => stores
            .deployments
            .get(&ObjectRef::new(name).within(ns))
            .map(|rd| rd.spec.template.spec.config.clone()),
        ScaleTargetKind::RunnerSet => stores
            .runner_sets
            .get(&ObjectRef::new(name).within(ns))
            .map(|rs| rs.spec.config.clone()),
    }
}

/// The webhook server on its own (`hangar webhook-server`, or a `hangar run` follower): its own
/// reflectors over `namespace` (all when `None`), serving on `listener` until `shutdown`,
/// counting into `metrics` when given. The HRA controller of a `hangar run` elsewhere sees the
/// reservations through its watch.
pub async fn run_standalone(
    client: Client,
    namespace: Option<String>,
    github: Option<Arc<dyn GitHubApi>>,
    listener: tokio::net::TcpListener,
    config: WebhookConfig,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hangar_runtime::watch::{api, spawn_store};
    use kube::runtime::watcher::Config;
    let ns = namespace.as_deref();
    let stores = WebhookStores {
        hras: spawn_store(api(&client, ns), Config::default()),
        deployments: spawn_store(api(&client, ns), Config::default()),
        runner_sets: spawn_store(api(&client, ns), Config::default()),
    };
    let synced = async {
        for ready in [
            stores.hras.wait_until_ready().await.is_ok(),
            stores.deployments.wait_until_ready().await.is_ok(),
            stores.runner_sets.wait_until_ready().await.is_ok(),
        ] {
            debug_assert!(ready);
        }
    };
    // Nothing is served before the stores sync: a shutdown then has nothing to finish.
    let shutdown = shutdown.boxed().shared();
    tokio::select! {
        () = synced => {}
        () = shutdown.clone() => return Ok(()),
    }
    let clock: Arc<dyn Clock> = Arc::new(crate::context::SystemClock);
    let server = WebhookServer::new(config, stores, github, clock);
    if let Some(metrics) = metrics {
        server.set_metrics(metrics);
    }
    server.serve(listener, client, shutdown).await
}

#[cfg(test)]
mod tests;
