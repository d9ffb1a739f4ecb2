//! What every reconciler shares: clients, configuration, the reflector stores it reads instead
//! of LISTing, an event recorder and the clock.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hangar_api::{Runner, RunnerDeployment, RunnerReplicaSet};
use hangar_github::GitHubApi;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;

use crate::runner_pod::PodDefaults;

/// Controller-wide settings (from flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Pod defaults; `registration_secret` is filled per runner.
    pub pod_defaults: PodDefaults,
    /// Register runners with JIT configurations instead of registration tokens.
    pub jit: bool,
    /// Safety-net requeue interval for healthy objects.
    pub sync_period: Duration,
    /// How often an unregistered runner pod is looked up on GitHub.
    pub registration_check_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            pod_defaults: PodDefaults::default(),
            jit: false,
            sync_period: Duration::from_secs(60),
            registration_check_interval: Duration::from_secs(10),
        }
    }
}

/// Reflector stores of everything the controllers read.
#[derive(Clone)]
pub struct Stores {
    /// Runner pods (label `actions-runner`).
    pub pods: Store<Pod>,
    /// Runners.
    pub runners: Store<Runner>,
    /// RunnerReplicaSets.
    pub replica_sets: Store<RunnerReplicaSet>,
    /// RunnerDeployments.
    pub deployments: Store<RunnerDeployment>,
}

/// The clock; tests may substitute a fixed one.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The system clock.
#[derive(Debug, Default)]
pub struct SystemClock;

/// A clock that runs with the system clock plus an adjustable offset: tests jump forward past
/// long timers while everything else keeps moving.
#[derive(Debug, Default)]
pub struct OffsetClock {
    offset_secs: std::sync::atomic::AtomicU64,
}

impl OffsetClock {
    /// Moves this clock `by` further ahead of the system clock.
    pub fn advance(&self, by: Duration) {
        self.offset_secs
            .fetch_add(by.as_secs(), std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
            + Duration::from_secs(self.offset_secs.load(std::sync::atomic::Ordering::SeqCst))
    }
}

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
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
    /// Event recorder.
    pub recorder: Recorder,
    /// Time source.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("pods", &self.pods.len())
            .field("runners", &self.runners.len())
            .field("replica_sets", &self.replica_sets.len())
            .field("deployments", &self.deployments.len())
            .finish()
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("github", &self.github)
            .field("settings", &self.settings)
            .field("stores", &self.stores)
            .finish_non_exhaustive()
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
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            github,
            settings,
            stores,
            clock: Arc::new(SystemClock),
        }
    }

    /// The current time.
    pub fn now(&self) -> SystemTime {
        self.clock.now()
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
        let ev = Event {
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
        let recorder = self.recorder.clone();
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&ev, &object).await {
                tracing::debug!(error = %e, "could not publish event");
            }
        });
    }
}
