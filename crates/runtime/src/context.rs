//! What every reconciler shares: clients, configuration, the reflector stores it reads instead
//! of LISTing, where events go, the clock and per-object back-off.
//!
//! Contract: no controller's private state. What only one controller keeps (the Runner
//! controller's finished runners and shared tokens, the runner-pod controller's runner
//! directory) lives in that controller's own state next to an `Arc<Context>`, as the RunnerSet
//! controller's does, so this crate never names a controller.
//!
//! GitHub: [`Context::github_for`] is the client for a resource — the controller-wide
//! [`Context::github`], or the one built from the Secret its `githubAPICredentialsFrom` names.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hangar_api::runner_config::GitHubApiCredentialsFrom;
use hangar_api::{
    HorizontalRunnerAutoscaler, Runner, RunnerDeployment, RunnerReplicaSet, RunnerSet,
};
use hangar_github::{ClientRegistry, GitHubApi};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::Store;

pub use crate::clock::{Clock, SystemClock};
use crate::credentials::{GitHubClients, LookupError};
use crate::error::{Backoff, Error};
use crate::pod::RunnerPod;
use crate::registration::mode::RunnerSetRegistration;
use crate::runner_pod::PodDefaults;

/// How many objects each controller reconciles at once unless `--max-concurrent-reconciles`
/// says otherwise: as many as the Kubernetes client lets wait for an answer, and below GitHub's
/// limit of 100 concurrent requests per credential.
pub const MAX_CONCURRENT_RECONCILES: u16 = {
    assert!(crate::kube_client::IN_FLIGHT <= u16::MAX as usize);
    crate::kube_client::IN_FLIGHT as u16
};

/// Controller-wide settings (from flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Pod defaults; `registration_secret` is filled per runner.
    pub pod_defaults: PodDefaults,
    /// Register runners with JIT configurations instead of registration tokens.
    pub jit: bool,
    /// How RunnerSet pods get their registration credential: from the pod admission webhook
    /// when this process serves it (`hangar run --admission-addr`), else from a Secret per
    /// StatefulSet (see [`RunnerSetRegistration`]).
    pub runner_set_registration: RunnerSetRegistration,
    /// Safety-net requeue interval for healthy objects.
    pub sync_period: Duration,
    /// How many objects each controller reconciles at once (`--max-concurrent-reconciles`;
    /// `0` is unbounded). Requests for further objects wait as names in the controller's queue,
    /// not as reconciles under way: a reconcile holds what it has built (a pod to create, a
    /// status to write) until the apiserver or GitHub answers, and both answer no faster for
    /// being asked by more at once (see [`crate::kube_client::IN_FLIGHT`]).
    pub max_concurrent_reconciles: u16,
    /// The least time between two lists of a scope's runners while runner pods wait to be seen
    /// registered (the runner-pod controller's runner directory), and how long after its pod
    /// started a runner is first looked for in a list (a job's delivery may name it sooner).
    pub registration_check_interval: Duration,
    /// Runner labels added to every RunnerDeployment's runners (`--common-runner-labels`).
    pub common_runner_labels: Vec<String>,
    /// Keep a registration-only runner for every RunnerDeployment, RunnerSet and standalone
    /// RunnerReplicaSet scaled to zero
    /// (`--registration-only-runners`; see [`hangar_core::placeholder`]).
    pub registration_only_runners: bool,
    /// How long an autoscaler waits after a scale-out before scaling down, unless its
    /// `scaleDownDelaySecondsAfterScaleOut` says otherwise (ARC's `--default-scale-down-delay`).
    pub default_scale_down_delay: Duration,
    /// How often the leader looks for leaked registrations (`--leaked-registration-sweep-interval`);
    /// zero switches the sweep off (the operator's leaked-registration sweep).
    pub leaked_registration_sweep: Duration,
    /// How long a registration must have looked leaked before it is removed
    /// (`--leaked-registration-grace`).
    pub leaked_registration_grace: Duration,
    /// How long a deleted owner waits for its busy runners before forcing them out, unless its
    /// `hangar.dev/retirement-timeout` annotation says otherwise (`--retirement-timeout`; see
    /// [`hangar_core::retirement`]).
    pub retirement_timeout: Duration,
    /// How long each kind of runner trouble is given before the runner counts as stuck or dead
    /// and is replaced (`--registration-timeout`, `--stuck-pod-timeout`,
    /// `--crash-loop-restarts`, ...; see [`hangar_core::health`]). `registration` is also how
    /// long the unregistration of a pod that never registered waits for it to register.
    pub health: hangar_core::health::Thresholds,
    /// The lowest runner version GitHub accepts (`--minimum-runner-version`): a runner whose
    /// image tag says it is older is refused ([`hangar_core::health::Health::Rejected`]).
    /// `None` judges no version.
    pub minimum_runner_version: Option<String>,
    /// How often the registered runners of each scope are listed on GitHub (cached: an
    /// unchanged list is a free 304), for runner health and the busy gauge.
    pub runner_refresh: Duration,
    /// How long a finished ephemeral runner of an autoscaled set keeps its place when its
    /// autoscaler cannot say that the count already reflects the runner's job
    /// (`--release-grace`; [`hangar_core::owner_sync::RELEASE_GRACE`] by default).
    pub release_grace: Duration,
    /// How often the leader lists the queued jobs of autoscalers that scale on webhooks alone
    /// and reserves runners for those whose delivery was lost (`--webhook-pull-interval`; see
    /// [`hangar_core::autoscaler::pull`]); zero switches the pull off.
    pub webhook_pull_interval: Duration,
    /// Watch the metadata of Secrets (`--watch-credential-secrets`), so a created or changed
    /// `githubAPICredentialsFrom` Secret takes effect at once. Needs list and watch on Secrets,
    /// which cluster-wide reads every Secret of the cluster; without it a change is picked up
    /// by the next reconcile's GET, at most [`crate::credentials::RECHECK_AFTER`] later.
    pub watch_credential_secrets: bool,
    /// Builds the clients of per-resource credentials (`githubAPICredentialsFrom`); should be
    /// the registry the controller-wide client came from, so equal credentials share a client.
    /// `None` refuses per-resource credentials.
    pub github_registry: Option<Arc<ClientRegistry>>,
    /// Where metrics and probes are served; the manager attaches its caches to it. `None`
    /// still counts (into a private registry nobody scrapes).
    pub exporter: Option<Arc<crate::metrics::Exporter>>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            pod_defaults: PodDefaults::default(),
            jit: false,
            runner_set_registration: Default::default(),
            sync_period: Duration::from_secs(60),
            max_concurrent_reconciles: MAX_CONCURRENT_RECONCILES,
            registration_check_interval: Duration::from_secs(3),
            common_runner_labels: Vec::new(),
            registration_only_runners: false,
            default_scale_down_delay: hangar_core::autoscaler::DEFAULT_SCALE_DOWN_DELAY,
            leaked_registration_sweep: Duration::from_secs(10 * 60),
            leaked_registration_grace: Duration::from_secs(30 * 60),
            retirement_timeout: hangar_core::retirement::DEFAULT_TIMEOUT,
            health: hangar_core::health::Thresholds::default(),
            minimum_runner_version: None,
            runner_refresh: crate::metrics::RUNNER_REFRESH,
            release_grace: hangar_core::owner_sync::RELEASE_GRACE,
            webhook_pull_interval: hangar_core::autoscaler::pull::DEFAULT_INTERVAL,
            watch_credential_secrets: true,
            github_registry: None,
            exporter: None,
        }
    }
}

impl Settings {
    /// The `Controller` configuration every controller runs with: at most
    /// [`Settings::max_concurrent_reconciles`] reconciles at once.
    pub fn controller_config(&self) -> kube::runtime::controller::Config {
        kube::runtime::controller::Config::default().concurrency(self.max_concurrent_reconciles)
    }
}

/// Reflector stores of everything the controllers read.
#[derive(Clone)]
pub struct Stores {
    /// Runner pods (label `actions-runner`).
    pub pods: Store<RunnerPod>,
    /// Runners.
    pub runners: Store<Runner>,
    /// RunnerReplicaSets.
    pub replica_sets: Store<RunnerReplicaSet>,
    /// RunnerDeployments.
    pub deployments: Store<RunnerDeployment>,
    /// HorizontalRunnerAutoscalers (read by the webhook server to match jobs).
    pub hras: Store<HorizontalRunnerAutoscaler>,
    /// RunnerSets.
    pub runner_sets: Store<RunnerSet>,
    /// StatefulSets labelled `runner-template-hash` (RunnerSets', Hangar's and ARC's), without
    /// their pod and claim templates: which exist, their owners, replicas and status.
    pub stateful_sets: Store<StatefulSet>,
    /// Nodes, name and Ready condition only ([`crate::watch::spawn_node_store`]), for runner
    /// health; `None` when nodes are not watched (`--node-not-ready-timeout 0`).
    pub nodes: Option<Store<Node>>,
}

/// Shared state of all reconcilers.
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// GitHub API (cached, rate-limit aware).
    pub github: Arc<dyn GitHubApi>,
    /// Settings.
    pub settings: Settings,
    /// Read caches.
    pub stores: Stores,
    /// Where events are published.
    pub events: crate::events::EventSink,
    /// Warnings already published, so that racing reconciles publish one.
    pub said_once: crate::events::SaidOnce,
    /// Time source.
    pub clock: Arc<dyn Clock>,
    /// Per-resource GitHub clients (see [`Context::github_for`]).
    pub clients: GitHubClients,
    /// Consecutive failures per object, for error policies.
    pub backoff: Backoff,
    /// Instruments (reconcile durations and errors, ...).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// What each runner pod was granted by its owner chain (scope, credentials).
    pub authorities: crate::authority::Memo,
    /// Events counting runners created and deleted, coalesced per set.
    pub runner_events: crate::events::RunnerEvents,
    /// The jobs of active workflow runs, listed once for the queued-runs metric and the pull
    /// recovery alike.
    pub workflow_runs: crate::workflow_runs::WorkflowRuns,
    /// What GitHub last said about each registered runner, for [`Context::runner_health`].
    pub github_runners: crate::github_runners::GitHubRunners,
    /// Sets asking their autoscalers to observe GitHub again.
    pub observations: crate::observations::ObservationRequests,
    /// The Runners each RunnerReplicaSet created or deleted that the Runner store may not
    /// show yet.
    pub unobserved_runners: crate::watch::Unobserved,
    /// When each set's and autoscaler's status was last written, to pace the next write.
    pub status_pace: crate::status_pace::StatusPace,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("pods", &self.pods.len())
            .field("runners", &self.runners.len())
            .field("replica_sets", &self.replica_sets.len())
            .field("deployments", &self.deployments.len())
            .field("hras", &self.hras.len())
            .field("runner_sets", &self.runner_sets.len())
            .field("stateful_sets", &self.stateful_sets.len())
            .finish()
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("github", &self.github)
            .field("clients", &self.clients)
            .field("settings", &self.settings)
            .field("stores", &self.stores)
            .finish_non_exhaustive()
    }
}

/// Lets code generic over a controller's state (which holds an `Arc<Context>`) take the context
/// itself too.
impl AsRef<Context> for Context {
    fn as_ref(&self) -> &Context {
        self
    }
}

impl Context {
    /// A context with the system clock and the `hangar` event reporter.
    pub fn new(
        client: Client,
        github: Arc<dyn GitHubApi>,
        settings: Settings,
        stores: Stores,
    ) -> Self {
        let reporter = Reporter {
            controller: "hangar".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let events = crate::events::EventSink::new(client.clone(), reporter);
        Self {
            runner_events: crate::events::RunnerEvents::new(events.clone()),
            workflow_runs: crate::workflow_runs::WorkflowRuns::default(),
            events,
            said_once: Default::default(),
            clients: GitHubClients::new(github.clone(), settings.github_registry.clone()),
            metrics: settings
                .exporter
                .as_ref()
                .map_or_else(Default::default, |e| e.metrics.clone()),
            backoff: Backoff::default(),
            authorities: Default::default(),
            github_runners: Default::default(),
            observations: Default::default(),
            unobserved_runners: Default::default(),
            status_pace: Default::default(),
            client,
            github,
            settings,
            stores,
            clock: Arc::new(SystemClock),
        }
    }

    /// The GitHub client for a resource in `namespace` with `githubAPICredentialsFrom` `from`:
    /// the controller's own when `from` names no Secret. A missing or unusable Secret is an
    /// [`Error::Credentials`] (retried slowly); Secrets are read by GET, cached briefly.
    pub async fn github_for(
        &self,
        namespace: &str,
        from: Option<&GitHubApiCredentialsFrom>,
    ) -> Result<Arc<dyn GitHubApi>, Error> {
        self.github_for_secret(namespace, GitHubClients::secret_name(from))
            .await
    }

    /// [`Context::github_for`] by Secret name (e.g. from a pod's
    /// `actions-runner/github-api-creds-secret` annotation).
    pub async fn github_for_secret(
        &self,
        namespace: &str,
        secret: Option<&str>,
    ) -> Result<Arc<dyn GitHubApi>, Error> {
        let object = || format!("{namespace}/{}", secret.unwrap_or_default());
        self.clients
            .client_for(&self.client, namespace, secret)
            .await
            .map_err(|e| match e {
                LookupError::Problem(problem) => Error::Credentials {
                    secret: object(),
                    problem,
                },
                LookupError::Kube(source) => Error::Kube {
                    action: "read GitHub credentials secret",
                    object: object(),
                    source,
                },
            })
    }

    /// The current time.
    pub fn now(&self) -> SystemTime {
        self.clock.now()
    }

    /// The health of the runner in `pod` now ([`hangar_core::health::classify`]), given whether
    /// its registration credential was taken back.
    pub fn runner_health(
        &self,
        pod: &RunnerPod,
        credential_spent: bool,
    ) -> hangar_core::health::Health {
        use crate::pod::observe::{Beyond, health_observed};
        let beyond = Beyond {
            github: self.github_state(pod),
            node_not_ready: self.node_not_ready(pod),
            minimum_version: self.settings.minimum_runner_version.as_deref(),
        };
        let observed = health_observed(pod, credential_spent, beyond);
        hangar_core::health::classify(&observed, &self.settings.health, self.now())
    }

    /// The runner in `pod` as owner sync sees it ([`crate::pod::observe::pod_view`]), given
    /// whether its registration credential was taken back: with its health now and what GitHub
    /// last said of it.
    pub fn pod_view(
        &self,
        pod: &RunnerPod,
        credential_spent: bool,
    ) -> hangar_core::owner_sync::PodView {
        let health = self.runner_health(pod, credential_spent);
        crate::pod::observe::pod_view(pod, credential_spent, health, self.github_state(pod))
    }

    /// What GitHub last said of the runner in `pod` ([`crate::github_runners`]), asked of the
    /// scope its owner chain granted, never one the pod names.
    pub fn github_state(&self, pod: &RunnerPod) -> hangar_core::health::GitHubState {
        pod.metadata
            .uid
            .as_deref()
            .and_then(|uid| self.authorities.get(uid))
            .map(|a| {
                let scope = crate::pod::observe::github_scope(&a.scope);
                self.github_runners
                    .state(&scope, &kube::ResourceExt::name_any(pod))
            })
            .unwrap_or_default()
    }

    /// Since when the node `pod` runs on reports itself not Ready (`Ready` False or Unknown),
    /// if it does and nodes are watched.
    fn node_not_ready(&self, pod: &RunnerPod) -> Option<SystemTime> {
        let nodes = self.stores.nodes.as_ref()?;
        let name = pod.spec.as_ref()?.node_name.as_deref()?;
        let node = nodes.get(&kube::runtime::reflector::ObjectRef::new(name))?;
        let ready = node
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready")?;
        (ready.status != "True").then(|| {
            ready
                .last_transition_time
                .as_ref()
                .map_or(SystemTime::UNIX_EPOCH, crate::pod::observe::k8s_time)
        })
    }

    /// Publishes a Kubernetes Event about `object` in the background: events are for humans
    /// and must never fail or slow a reconcile.
    pub fn event(
        &self,
        object: k8s_openapi::api::core::v1::ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        use kube::runtime::events::{Event, EventType};
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_owned(),
            note: Some(note),
            action: reason.to_owned(),
            secondary: None,
        };
        self.events.publish(event, object);
    }
}
