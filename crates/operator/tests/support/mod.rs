//! Shared set-up for controller tests: a ghsim on loopback, a GitHub client pointed at it, and
//! Hangar's controllers running against the real control plane, watching one test namespace.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ghsim::world::{JobStatus, SubmitJobs};

use hangar::context::Settings;
use hangar::manager::ManagerOptions;
use hangar_github::{ClientOptions, ClientRegistry, Credentials, Endpoint, GitHubApi, Secret};
use hangar_testkit::{TestCluster, TestNamespace, crds};
use kube::api::ListParams;
use nodesim::program::{RunnerFaults, RunnerProgram};
use nodesim::{NodeSim, NodeSimConfig, NodeSimHandle, Timing};

pub mod e2e;

pub use hangar_testkit::eventually::eventually;

/// The PAT the simulated GitHub accepts.
pub const TOKEN: &str = "ghp_hangar_test";

/// The simulated runners' own PAT in ghsim.
pub const RUNNER_PAT: &str = "ghp_nodesim_runner";

/// Numbers node pools, so that no two tests of a process share nodes.
static POOLS: AtomicU32 = AtomicU32::new(0);

/// Logs to the test's output; `RUST_LOG=hangar=debug,nodesim=info` shows what the controllers
/// and runners did.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
}

/// GitHub client options without the response cache: with it, a runner that registers right
/// after a List Runners call is only seen when the 60-second `max-age` runs out (as in ARC), and
/// every registration would wait for that.
pub fn uncached() -> ClientOptions {
    ClientOptions {
        cache: false,
        ..ClientOptions::default()
    }
}

/// Hangar's manager for one namespace, running in this process as `hangar run
/// --watch-namespace` would.
pub struct Manager {
    /// The controllers' GitHub client.
    pub github: Arc<dyn GitHubApi>,
    /// The controllers' clock: `clock.advance(..)` jumps past long timers.
    pub clock: Arc<hangar_testkit::clock::OffsetClock>,
    /// The manager; aborting it stops every controller.
    pub task: tokio::task::JoinHandle<()>,
    /// The webhook server's URL, when one was asked for.
    pub webhook_url: Option<String>,
}

impl Manager {
    /// Starts the manager for namespace `ns` on the cluster of `client`, against the GitHub at
    /// `url` with [`TOKEN`] and client `options`, with the tests' settings (a 5 s sync period,
    /// registration checked every second) adjusted by `configure` and, given `webhook`, the
    /// GitHub webhook server on a loopback port.
    pub async fn spawn(
        client: kube::Client,
        url: &str,
        ns: &str,
        options: ClientOptions,
        configure: impl FnOnce(&mut Settings),
        webhook: Option<hangar::webhook_server::WebhookConfig>,
    ) -> Self {
        let endpoint = Endpoint::custom(url, url).unwrap();
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
        settings.pod_defaults.github_url = url.to_owned();
        configure(&mut settings);
        let mut webhook_url = None;
        let webhook = match webhook {
            Some(config) => {
                let hooks = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                webhook_url = Some(format!("http://{}/", hooks.local_addr().unwrap()));
                Some((hooks, config))
            }
            None => None,
        };
        let clock = Arc::new(hangar_testkit::clock::OffsetClock::default());
        let options = ManagerOptions {
            webhook,
            ..ManagerOptions::new(client, github.clone(), settings)
        }
        .namespace(ns.to_owned())
        .clock(clock.clone());
        let task = tokio::spawn(hangar::manager::run(options));
        Self {
            github,
            clock,
            task,
            webhook_url,
        }
    }
}

/// A running ghsim and controllers for one namespace; both stop when dropped.
pub struct Harness {
    pub cluster: &'static TestCluster,
    pub ns: TestNamespace,
    pub client: kube::Client,
    pub sim: ghsim::Sim,
    pub github: Arc<dyn GitHubApi>,
    pub url: String,
    /// The controllers' clock: `clock.advance(..)` jumps past long timers.
    pub clock: Arc<hangar_testkit::clock::OffsetClock>,
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
        Self::start_with(prefix, ClientOptions::default()).await
    }

    /// [`Harness::start`] with the controllers' GitHub client built from `options`. End-to-end
    /// tests turn the response cache off: with it, a runner that registers right after a
    /// List Runners call is only seen when the 60-second `max-age` runs out (as in ARC), and
    /// every registration would wait for that.
    pub async fn start_with(prefix: &str, options: ClientOptions) -> Self {
        Self::launch(prefix, options, |_| {}, None).await.0
    }

    /// [`Harness::start_with`], with `settings` adjusted by `configure`.
    pub async fn start_configured(
        prefix: &str,
        options: ClientOptions,
        configure: impl FnOnce(&mut Settings),
    ) -> Self {
        Self::launch(prefix, options, configure, None).await.0
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
        let (harness, url) = Self::launch(prefix, options, configure, Some(webhook)).await;
        (harness, url.expect("the webhook server was started"))
    }

    /// [`Harness::start_with`], the controllers' every Kubernetes request counted into the
    /// returned metrics by method, resource and answer, as `hangar run` counts them.
    pub async fn start_counted(
        prefix: &str,
        options: ClientOptions,
    ) -> (Self, Arc<hangar::metrics::Metrics>) {
        let exporter = Arc::new(hangar::metrics::Exporter::default());
        let metrics = exporter.metrics.clone();
        let kubeconfig = kube::config::Kubeconfig::read_from(TestCluster::get().kubeconfig())
            .expect("the test cluster's kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("a client configuration for the test cluster");
        let client = hangar::kube_client::counted(config, metrics.clone())
            .expect("a counted client for the test cluster");
        let harness = Self::launch_with(
            prefix,
            options,
            |s| s.exporter = Some(exporter),
            None,
            Some(client),
        )
        .await
        .0;
        (harness, metrics)
    }

    /// [`Harness::start_with`], with the controllers reaching the apiserver through a fault
    /// proxy ([`hangar_testkit::fault_proxy`]) whose faults the test switches; the harness's
    /// own client goes to the apiserver directly.
    pub async fn start_behind_proxy(
        prefix: &str,
        options: ClientOptions,
    ) -> (Self, hangar_testkit::fault_proxy::FaultProxy) {
        let (proxy, config) =
            hangar_testkit::fault_proxy::FaultProxy::in_front_of(TestCluster::get(), 11)
                .await
                .expect("the fault proxy starts");
        // The client `hangar run` builds: no retries of its own (ADR 0015), so the faults
        // reach the controllers.
        let client = hangar::kube_client::uncounted(config).expect("a client through the proxy");
        let harness = Self::launch_with(prefix, options, |_| {}, None, Some(client))
            .await
            .0;
        (harness, proxy)
    }

    /// ghsim, and the manager with `settings` adjusted by `configure` and, given `webhook`,
    /// the webhook server, whose URL is returned.
    async fn launch(
        prefix: &str,
        options: ClientOptions,
        configure: impl FnOnce(&mut Settings),
        webhook: Option<hangar::webhook_server::WebhookConfig>,
    ) -> (Self, Option<String>) {
        Self::launch_with(prefix, options, configure, webhook, None).await
    }

    /// [`Harness::launch`], the manager using `manager_client` when given (else the
    /// harness's own client).
    async fn launch_with(
        prefix: &str,
        options: ClientOptions,
        configure: impl FnOnce(&mut Settings),
        webhook: Option<hangar::webhook_server::WebhookConfig>,
        manager_client: Option<kube::Client>,
    ) -> (Self, Option<String>) {
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
        Self::on_github(
            prefix,
            options,
            configure,
            webhook,
            (sim, url, Some(server)),
            manager_client,
        )
        .await
    }

    /// A second namespace with controllers of their own, as a second `hangar run
    /// --watch-namespace` would run, on this harness's GitHub (same simulator, organization,
    /// repository and token), with settings adjusted by `configure`. This harness keeps the
    /// simulator running, so it must outlive the one returned.
    pub async fn beside(
        &self,
        prefix: &str,
        options: ClientOptions,
        configure: impl FnOnce(&mut Settings),
    ) -> Self {
        let github = (self.sim.clone(), self.url.clone(), None);
        Self::on_github(prefix, options, configure, None, github, None)
            .await
            .0
    }

    /// A fresh namespace and the manager for it on `github`: the simulator, its URL and, when
    /// this harness started it, the task serving it. The manager uses `manager_client` when
    /// given, else the harness's own client.
    async fn on_github(
        prefix: &str,
        options: ClientOptions,
        configure: impl FnOnce(&mut Settings),
        webhook: Option<hangar::webhook_server::WebhookConfig>,
        github: (ghsim::Sim, String, Option<tokio::task::JoinHandle<()>>),
        manager_client: Option<kube::Client>,
    ) -> (Self, Option<String>) {
        let (sim, url, server) = github;
        let cluster = TestCluster::get();
        let client = cluster.client().await;
        crds::install(&client).await;
        let ns = TestNamespace::create(cluster, prefix).await;
        let manager = Manager::spawn(
            manager_client.unwrap_or_else(|| client.clone()),
            &url,
            ns.name(),
            options,
            configure,
            webhook,
        )
        .await;
        let harness = Harness {
            cluster,
            ns,
            client,
            sim,
            github: manager.github,
            url,
            clock: manager.clock,
            tasks: server.into_iter().chain([manager.task]).collect(),
        };
        (harness, manager.webhook_url)
    }

    /// `kubectl apply --server-side` of a YAML document into the test namespace.
    pub fn apply(&self, yaml: &str) {
        let out = kubectl_with_stdin(
            self.cluster.kubectl().args([
                "apply",
                "--server-side",
                "-n",
                self.ns.name(),
                "-f",
                "-",
            ]),
            yaml,
        );
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

    /// Every `K` of the test namespace.
    pub async fn list<K>(&self) -> Vec<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        self.api::<K>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    /// Two simulated nodes running runner pods, of a pool of their own named
    /// `<kind>-<prefix>-<process>-<n>`: pool names are unique per test process and test, so
    /// concurrent tests (and test binaries) never share nodes.
    ///
    /// GitHub takes the registration token for `config.sh remove`; ghsim wants a remove token,
    /// which the simulated runners mint with a PAT of their own (see nodesim's runner program).
    /// Without it a runner stopped outside the controllers' unregistration (e.g. a pod released
    /// as never started that did start) would stay registered.
    pub async fn start_nodes(&self, kind: &str, prefix: &str) -> NodeSimHandle {
        self.start_nodes_with_faults(kind, prefix).await.0
    }

    /// [`Harness::start_nodes`], with the switches of the runner faults (image pulls that fail,
    /// runners that never register) of its runner program.
    pub async fn start_nodes_with_faults(
        &self,
        kind: &str,
        prefix: &str,
    ) -> (NodeSimHandle, RunnerFaults) {
        let pool = format!(
            "{kind}-{prefix}-{}-{}",
            std::process::id(),
            POOLS.fetch_add(1, Ordering::Relaxed)
        );
        self.sim
            .update(|w, _| w.add_pat(RUNNER_PAT, "nodesim-runner"));
        let runner = RunnerProgram::new().with_remove_credential(RUNNER_PAT);
        let faults = runner.faults().clone();
        let config = NodeSimConfig::new(pool, 2)
            .with_timing(Timing::fast())
            .with_runner_program(runner);
        let nodes = NodeSim::start(self.client.clone(), config).await.unwrap();
        (nodes, faults)
    }

    /// Names of the runners online on GitHub.
    pub fn online(&self) -> BTreeSet<String> {
        self.sim.read(|w, _| {
            w.runners
                .values()
                .filter(|r| r.online())
                .map(|r| r.name.clone())
                .collect()
        })
    }

    /// Names of the runners registered on GitHub.
    pub fn registered(&self) -> BTreeSet<String> {
        self.sim
            .read(|w, _| w.runners.values().map(|r| r.name.clone()).collect())
    }

    /// Names of the runners running a job on GitHub.
    pub fn busy(&self) -> BTreeSet<String> {
        self.sim.read(|w, _| {
            w.runners
                .values()
                .filter(|r| r.busy())
                .map(|r| r.name.clone())
                .collect()
        })
    }

    /// Queues `count` jobs of `octo/app` for runners with `labels`, lasting `duration`, ending
    /// with `conclusion`.
    pub fn submit_jobs(
        &self,
        count: u32,
        labels: Vec<String>,
        duration: Duration,
        conclusion: &str,
    ) -> Vec<u64> {
        self.sim.update(|w, now| {
            let request = SubmitJobs {
                repository: "octo/app".into(),
                count,
                labels,
                duration_ms: duration.as_millis() as u64,
                conclusion: Some(conclusion.to_owned()),
                workflow: None,
                job_name: None,
            };
            w.submit_jobs(&request, now).unwrap().1
        })
    }

    /// Whether every job completed with `conclusion`, none interrupted.
    pub fn all_completed(&self, ids: &[u64], conclusion: &str) -> bool {
        self.sim.read(|w, _| {
            ids.iter().all(|id| {
                let j = &w.jobs[id];
                j.status == JobStatus::Completed
                    && j.conclusion.as_deref() == Some(conclusion)
                    && !j.interrupted
            })
        })
    }

    /// The runners that ran jobs `ids`, as GitHub names them (the Runners' names).
    pub fn runners_of(&self, ids: &[u64]) -> BTreeSet<String> {
        self.sim.read(|w, _| {
            ids.iter()
                .filter_map(|id| w.jobs[id].runner_name.clone())
                .collect()
        })
    }

    /// Jobs ghsim counts as interrupted (their runner vanished mid-job).
    pub fn interrupted(&self) -> u64 {
        ghsim::accounting::snapshot(&self.sim)
            .jobs_summary
            .interrupted
    }

    /// GitHub's runners, a line each, for a failing test to print.
    pub fn describe_github_runners(&self) -> String {
        self.sim.read(|w, _| {
            w.runners
                .values()
                .map(|r| {
                    format!(
                        "github runner {} id={} online={} busy={}\n",
                        r.name,
                        r.id,
                        r.online(),
                        r.busy()
                    )
                })
                .collect::<String>()
        })
    }
}

/// The admission webhooks of a test (`hangar run --admission-addr`), for its namespace only:
/// the server stops and its webhook configurations are deleted when this is dropped (also on
/// panic), so other tests sharing the control plane never call it.
pub struct AdmissionServer {
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    kubeconfig: std::path::PathBuf,
    /// The configurations' names.
    pub mutating: String,
    validating: String,
}

impl Drop for AdmissionServer {
    fn drop(&mut self) {
        self.task.abort();
        hangar_testkit::cleanup::delete_webhook_configurations(
            &self.kubeconfig,
            &self.mutating,
            &self.validating,
        );
    }
}

impl Harness {
    /// Serves the admission webhooks on a loopback port for this test's namespace (a label
    /// only it carries selects it), with GitHub clients of their own (no cache, no retries:
    /// "GitHub down" answers at once), and waits until the apiserver calls the pod webhook.
    /// The server runs on the test's runtime: a test that blocks a thread on `kubectl` needs a
    /// multi-threaded runtime, or the apiserver's calls time out.
    pub async fn serve_admission(&self) -> AdmissionServer {
        use hangar::admission::configurations::{Endpoint as HookEndpoint, Registration};
        use hangar::admission::{Admission, AdmissionConfig};
        use k8s_openapi::api::core::v1::{Namespace, Pod};
        use kube::api::{Patch, PatchParams, PostParams};

        let ns = self.ns.name().to_owned();
        let selector_key = "hangar.dev/admission-test";
        kube::Api::<Namespace>::all(self.client.clone())
            .patch(
                &ns,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {selector_key: ns}}})),
            )
            .await
            .unwrap();
        let options = ClientOptions {
            cache: false,
            retry: hangar_github::RetryPolicy {
                max_attempts: 1,
                ..hangar_github::RetryPolicy::default()
            },
            ..ClientOptions::default()
        };
        let registry = Arc::new(ClientRegistry::new(
            Endpoint::custom(&self.url, &self.url).unwrap(),
            options,
        ));
        let github: Arc<dyn GitHubApi> = registry
            .client(Credentials::Token(Secret::new(TOKEN)))
            .unwrap();
        let clients = Arc::new(hangar::credentials::GitHubClients::new(
            github,
            Some(registry),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://{}", listener.local_addr().unwrap());
        let mut registration = Registration::new(HookEndpoint::Url(base));
        registration.mutating_name = format!("{ns}-mutating");
        registration.validating_name = format!("{ns}-validating");
        registration.create_if_absent = true;
        registration.namespace_selector = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([(selector_key.to_owned(), ns.clone())].into()),
                match_expressions: None,
            },
        );
        let (mutating, validating) = (
            registration.mutating_name.clone(),
            registration.validating_name.clone(),
        );
        let config = AdmissionConfig::new(registration, &ns);
        let admission = Admission::new(
            self.client.clone(),
            clients,
            Arc::new(hangar::context::SystemClock),
            config,
        );
        let server = AdmissionServer {
            task: tokio::spawn(admission.serve(listener, std::future::pending())),
            kubeconfig: self.cluster.kubeconfig().to_owned(),
            mutating,
            validating,
        };
        // Active once a dry-run create of an unowned runner pod is refused by Hangar, which
        // grants registrations only to pods of a Runner or a RunnerSet.
        let pods: kube::Api<Pod> = self.api();
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let probe: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "admission-probe", "labels": {
                "actions-runner-controller/inject-registration-token": "true"}},
            "spec": {"containers": [{"name": "runner", "image": "r",
                                     "env": [{"name": "RUNNER_REPO", "value": "octo/app"}]}]}
        }))
        .unwrap();
        eventually(
            "the pod webhook to be active",
            Duration::from_secs(60),
            || {
                let (pods, dry, probe) = (pods.clone(), dry.clone(), probe.clone());
                async move {
                    match pods.create(&dry, &probe).await {
                        Err(kube::Error::Api(e))
                            if e.message.contains("no runner registration for this pod") =>
                        {
                            Some(())
                        }
                        _ => None,
                    }
                }
            },
        )
        .await;
        server
    }
}

/// Runs `cmd` (a `kubectl ... -f -`) with `input` on its stdin, so no temporary file is left.
pub fn kubectl_with_stdin(cmd: &mut std::process::Command, input: &str) -> std::process::Output {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A RunnerSet for repository `octo/app` of `replicas` runners labelled `label`, its pods placed
/// on `nodes` when given, with `env` on the runner container.
pub fn runner_set_manifest(
    nodes: Option<&NodeSimHandle>,
    name: &str,
    replicas: i32,
    label: &str,
    env: &[(&str, &str)],
) -> String {
    let env: Vec<_> = env
        .iter()
        .map(|(k, v)| serde_json::json!({"name": k, "value": v}))
        .collect();
    let mut pod = serde_json::json!({"containers": [{"name": "runner", "env": env}]});
    if let Some(placement) = nodes.map(NodeSimHandle::placement) {
        pod["nodeSelector"] = serde_json::json!(placement.node_selector);
        pod["tolerations"] = serde_json::json!(placement.tolerations);
        if let Some(s) = &placement.scheduler_name {
            pod["schedulerName"] = serde_json::json!(s);
        }
    }
    serde_json::json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "repository": "octo/app",
            "labels": [label],
            "template": {"spec": pod},
        },
    })
    .to_string()
}
