//! Shared set-up for controller tests: a ghsim on loopback, a GitHub client pointed at it, and
//! Hangar's controllers running against the real control plane, watching one test namespace.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use hangar::context::Settings;
use hangar_github::{ClientOptions, ClientRegistry, Credentials, Endpoint, GitHubApi, Secret};
use hangar_testkit::{TestCluster, TestNamespace, crds};

/// The PAT the simulated GitHub accepts.
pub const TOKEN: &str = "ghp_hangar_test";

/// A running ghsim and controllers for one namespace; both stop when dropped.
pub struct Harness {
    pub cluster: &'static TestCluster,
    pub ns: TestNamespace,
    pub client: kube::Client,
    pub sim: ghsim::Sim,
    pub github: Arc<dyn GitHubApi>,
    pub url: String,
    /// The controllers' clock: `clock.advance(..)` jumps past long timers.
    pub clock: Arc<hangar::context::OffsetClock>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Harness {
    /// ghsim with organization `octo` and repository `octo/app`, and the controllers.
    pub async fn start(prefix: &str) -> Self {
        let cluster = TestCluster::get();
        let client = cluster.client().await;
        crds::install(&client).await;
        let ns = TestNamespace::create(cluster, prefix).await;

        let sim = ghsim::Sim::new(ghsim::SimConfig::default());
        sim.update(|w, _| {
            w.add_pat(TOKEN, "test");
            w.add_org("octo", None);
            w.add_repo("octo", "app", true);
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let server = tokio::spawn({
            let sim = sim.clone();
            async move {
                let _ = ghsim::serve(listener, sim, std::future::pending()).await;
            }
        });
        let endpoint = Endpoint::custom(&url, &url).unwrap();
        let registry = Arc::new(ClientRegistry::new(endpoint, ClientOptions::default()));
        let github: Arc<dyn GitHubApi> = registry
            .client(Credentials::Token(Secret::new(TOKEN)))
            .unwrap();
        let mut settings = Settings {
            sync_period: Duration::from_secs(5),
            registration_check_interval: Duration::from_secs(1),
            github_registry: Some(registry),
            ..Settings::default()
        };
        settings.pod_defaults.github_url = url.clone();
        let clock = Arc::new(hangar::context::OffsetClock::default());
        let controllers = tokio::spawn(hangar::manager::run_with_clock(
            client.clone(),
            github.clone(),
            settings,
            Some(ns.name().to_owned()),
            clock.clone(),
        ));
        Harness {
            cluster,
            ns,
            client,
            sim,
            github,
            url,
            clock,
            tasks: vec![server, controllers],
        }
    }

    /// [`Harness::start`] with the controllers' GitHub client built from `options`. End-to-end
    /// tests turn the response cache off: with it, a runner that registers right after a
    /// List Runners call is only seen when the 60-second `max-age` runs out (as in ARC), and
    /// every registration would wait for that.
    pub async fn start_with(prefix: &str, options: ClientOptions) -> Self {
        let cluster = TestCluster::get();
        let client = cluster.client().await;
        crds::install(&client).await;
        let ns = TestNamespace::create(cluster, prefix).await;

        let sim = ghsim::Sim::new(ghsim::SimConfig::default());
        sim.update(|w, _| {
            w.add_pat(TOKEN, "test");
            w.add_org("octo", None);
            w.add_repo("octo", "app", true);
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let server = tokio::spawn({
            let sim = sim.clone();
            async move {
                let _ = ghsim::serve(listener, sim, std::future::pending()).await;
            }
        });
        let endpoint = Endpoint::custom(&url, &url).unwrap();
        // Per-resource credentials (githubAPICredentialsFrom) get their clients from the same
        // registry, with the same options.
        let registry = Arc::new(ClientRegistry::new(endpoint, options));
        let github: Arc<dyn GitHubApi> = registry
            .client(Credentials::Token(Secret::new(TOKEN)))
            .unwrap();
        let mut settings = Settings {
            sync_period: Duration::from_secs(5),
            registration_check_interval: Duration::from_secs(1),
            github_registry: Some(registry),
            ..Settings::default()
        };
        settings.pod_defaults.github_url = url.clone();
        let clock = Arc::new(hangar::context::OffsetClock::default());
        let controllers = tokio::spawn(hangar::manager::run_with_clock(
            client.clone(),
            github.clone(),
            settings,
            Some(ns.name().to_owned()),
            clock.clone(),
        ));
        Harness {
            cluster,
            ns,
            client,
            sim,
            github,
            url,
            clock,
            tasks: vec![server, controllers],
        }
    }

    /// [`Harness::start_with`], with `settings` adjusted by `configure`, plus the GitHub webhook
    /// server inside the manager (`hangar run --webhook-addr`) on a loopback port. Returns the
    /// harness and the webhook server's URL.
    pub async fn start_with_webhook(
        prefix: &str,
        options: ClientOptions,
        configure: impl FnOnce(&mut Settings),
        webhook: hangar::webhook_server::WebhookConfig,
    ) -> (Self, String) {
        let cluster = TestCluster::get();
        let client = cluster.client().await;
        crds::install(&client).await;
        let ns = TestNamespace::create(cluster, prefix).await;

        let sim = ghsim::Sim::new(ghsim::SimConfig::default());
        sim.update(|w, _| {
            w.add_pat(TOKEN, "test");
            w.add_org("octo", None);
            w.add_repo("octo", "app", true);
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let server = tokio::spawn({
            let sim = sim.clone();
            async move {
                let _ = ghsim::serve(listener, sim, std::future::pending()).await;
            }
        });
        let endpoint = Endpoint::custom(&url, &url).unwrap();
        let registry = Arc::new(ClientRegistry::new(endpoint, options));
        let github: Arc<dyn GitHubApi> = registry
            .client(Credentials::Token(Secret::new(TOKEN)))
            .unwrap();
        let mut settings = Settings {
            sync_period: Duration::from_secs(5),
            registration_check_interval: Duration::from_secs(1),
            github_registry: Some(registry),
            ..Settings::default()
        };
        settings.pod_defaults.github_url = url.clone();
        configure(&mut settings);
        let hooks = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let webhook_url = format!("http://{}/", hooks.local_addr().unwrap());
        let clock = Arc::new(hangar::context::OffsetClock::default());
        let controllers = tokio::spawn(hangar::manager::run_with_webhook(
            client.clone(),
            github.clone(),
            settings,
            Some(ns.name().to_owned()),
            clock.clone(),
            Some((hooks, webhook)),
        ));
        let harness = Harness {
            cluster,
            ns,
            client,
            sim,
            github,
            url,
            clock,
            tasks: vec![server, controllers],
        };
        (harness, webhook_url)
    }

    /// `kubectl apply --server-side` of a YAML document into the test namespace.
    pub fn apply(&self, yaml: &str) {
        let file =
            std::env::temp_dir().join(format!("hangar-{}-{}.yaml", self.ns.name(), fastrand()));
        std::fs::write(&file, yaml).unwrap();
        let out = self
            .cluster
            .kubectl()
            .args(["apply", "--server-side", "-n", self.ns.name(), "-f"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "apply failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn api<K>(&self) -> kube::Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        kube::Api::namespaced(self.client.clone(), self.ns.name())
    }
}

fn fastrand() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Polls `check` every 200 ms until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < until,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
