//! `hangar`: the operator binary.
//!
//! - `hangar run`: the controller manager (Runner, runner pods, RunnerReplicaSet,
//!   RunnerDeployment), with ARC's flag names where ARC has one;
//! - `hangar crd`: print the CustomResourceDefinitions;
//! - `hangar webhook-server`: the GitHub webhook server alone (`hangar run --webhook-addr` runs
//!   it inside the manager instead).

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use hangar::context::Settings;
use hangar::manager::ManagerOptions;
use hangar::runner_pod::PodDefaults;
use hangar::serve::Limits;
use hangar_github::{ClientOptions, ClientRegistry, Credentials, Endpoint, Secret};

/// Hangar runs GitHub Actions self-hosted runners as Kubernetes pods, compatible with
/// actions-runner-controller's `actions.summerwind.dev/v1alpha1` API.
#[derive(Debug, Parser)]
#[command(name = "hangar", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions as a multi-document YAML stream
    /// (`hangar crd | kubectl apply --server-side -f -`).
    Crd,
    /// Run the controllers.
    Run(Box<RunArgs>),
    /// Run only the GitHub webhook server, which turns workflow_job deliveries into capacity
    /// reservations on HorizontalRunnerAutoscalers (a `hangar run` elsewhere scales them).
    WebhookServer(Box<WebhookServerArgs>),
}

/// Webhook flags shared by `hangar run` and `hangar webhook-server`.
#[derive(Debug, Args)]
struct WebhookArgs {
    /// The secret configured on the GitHub webhook; deliveries must be signed with it
    /// (`X-Hub-Signature-256`).
    #[arg(long, env = "GITHUB_WEBHOOK_SECRET_TOKEN", hide_env_values = true)]
    github_webhook_secret_token: Option<Secret>,
    /// Accept deliveries without a valid signature when no secret is set. Anyone who can reach
    /// the server can then scale your runners; for local experiments only.
    #[arg(long)]
    insecure_accept_unsigned_webhooks: bool,
    /// At most one capacity-reservation write per autoscaler per this interval.
    #[arg(long, default_value = "250ms", value_parser = parse_duration)]
    webhook_batch_interval: Duration,
    /// Pending scale operations beyond this are refused with 503 (GitHub shows a failed delivery
    /// that can be redelivered).
    #[arg(long, default_value_t = hangar::webhook_server::DEFAULT_QUEUE_LIMIT)]
    webhook_queue_limit: usize,
    /// Largest accepted delivery body, in bytes (default: GitHub's 25 MB payload cap); a larger
    /// one gets 413 before it is read.
    #[arg(long, default_value_t = hangar::webhook_server::DEFAULT_MAX_BODY_BYTES)]
    webhook_max_body_bytes: usize,
    /// Connections the webhook server serves at once; more are answered 503 and closed.
    #[arg(long, default_value_t = hangar::webhook_server::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..))]
    webhook_max_connections: u32,
}

impl WebhookArgs {
    fn config(&self, http: &HttpArgs) -> anyhow::Result<hangar::webhook_server::WebhookConfig> {
        let mut config = hangar::webhook_server::WebhookConfig::new(
            self.github_webhook_secret_token.clone(),
            self.insecure_accept_unsigned_webhooks,
        )?;
        config.batch_interval = self.webhook_batch_interval;
        config.queue_limit = self.webhook_queue_limit;
        config.limits = http.apply(Limits::new(
            self.webhook_max_connections,
            self.webhook_max_body_bytes,
        ));
        Ok(config)
    }
}

/// Timeouts of every HTTP server of the process: webhook, admission, metrics and probes.
#[derive(Clone, Copy, Debug, Args)]
struct HttpArgs {
    /// How long a client has for the TLS handshake and for each request head, counted from the
    /// connection's start or its previous response (so it also ends idle keep-alive); the
    /// connection is closed after that.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    http_header_read_timeout: Duration,
    /// How long reading a request's body and answering it may take; 408 after that.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration)]
    http_request_timeout: Duration,
}

impl HttpArgs {
    /// `limits` with these timeouts.
    fn apply(&self, limits: Limits) -> Limits {
        limits.with_timeouts(self.http_header_read_timeout, self.http_request_timeout)
    }
}

/// Logging flags (ARC's names).
#[derive(Clone, Debug, Args)]
struct LogArgs {
    /// Log level: debug, info, warn or error (`RUST_LOG`, when set, wins).
    #[arg(long, default_value = "info", value_parser = ["debug", "info", "warn", "error"])]
    log_level: String,
    /// Log format: text or json.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

impl LogArgs {
    fn init(&self) {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            format!("{level},kube=warn,hyper=warn", level = self.log_level).into()
        });
        let builder = tracing_subscriber::fmt().with_env_filter(filter);
        if self.log_format == "json" {
            builder.json().init();
        } else {
            builder.init();
        }
    }
}

/// A listen address that may be switched off (`0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Listen(Option<std::net::SocketAddr>);

/// Parses a Go-style listen address: `:8080` means all interfaces; `0` disables.
fn parse_listen(s: &str) -> Result<Listen, String> {
    if s == "0" {
        return Ok(Listen(None));
    }
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    full.parse().map(|a| Listen(Some(a))).map_err(|_| {
        format!("invalid address {s:?} (use e.g. :8080 or 127.0.0.1:8080; 0 disables)")
    })
}

/// Flags of `hangar webhook-server`.
#[derive(Debug, Args)]
struct WebhookServerArgs {
    #[command(flatten)]
    log: LogArgs,
    /// Address to listen on (plain HTTP; put TLS in front of it).
    #[arg(long, default_value = "0.0.0.0:8000")]
    addr: std::net::SocketAddr,
    /// Only read autoscalers in this namespace (default: all).
    #[arg(long)]
    watch_namespace: Option<String>,
    /// GitHub's web URL; with a token, runner-group visibility is checked through the API.
    #[arg(long, env = "GITHUB_URL", default_value = "https://github.com/")]
    github_url: String,
    /// GitHub Enterprise Server URL.
    #[arg(long, env = "GITHUB_ENTERPRISE_URL")]
    github_enterprise_url: Option<String>,
    /// REST API base URL, overriding what `--github-url` implies.
    #[arg(long, env = "GITHUB_API_URL")]
    github_api_url: Option<String>,
    /// Personal access token, optional: without it every runner group counts as visible.
    #[arg(long, env = "GITHUB_TOKEN", hide_env_values = true)]
    github_token: Option<Secret>,
    #[command(flatten)]
    webhook: WebhookArgs,
    #[command(flatten)]
    http: HttpArgs,
}

/// Flags of `hangar run`; names follow ARC's controller manager.
#[derive(Debug, Args)]
struct RunArgs {
    /// GitHub's web URL (github.com, a GHE.com tenant, or a simulator).
    #[arg(long, env = "GITHUB_URL", default_value = "https://github.com/")]
    github_url: String,
    /// GitHub Enterprise Server URL; its API lives under /api/v3.
    #[arg(long, env = "GITHUB_ENTERPRISE_URL")]
    github_enterprise_url: Option<String>,
    /// REST API base URL, overriding what `--github-url` implies (e.g. a GitHub simulator or an
    /// API proxy that serves the API at its root).
    #[arg(long, env = "GITHUB_API_URL")]
    github_api_url: Option<String>,
    /// Personal access token (prefer the environment variable; flags show up in `ps`).
    #[arg(long, env = "GITHUB_TOKEN", hide_env_values = true)]
    github_token: Option<Secret>,
    /// GitHub App id (with the installation id and private key, instead of a token).
    #[arg(long, env = "GITHUB_APP_ID")]
    github_app_id: Option<String>,
    /// GitHub App installation id.
    #[arg(long, env = "GITHUB_APP_INSTALLATION_ID")]
    github_app_installation_id: Option<String>,
    /// GitHub App private key: the PEM text, or a path to it.
    #[arg(long, env = "GITHUB_APP_PRIVATE_KEY", hide_env_values = true)]
    github_app_private_key: Option<Secret>,
    /// Only watch this namespace (default: all).
    #[arg(long)]
    watch_namespace: Option<String>,
    /// Default runner image.
    #[arg(long, default_value = "summerwind/actions-runner:latest")]
    runner_image: String,
    /// Default dind sidecar image.
    #[arg(long, default_value = "docker:dind")]
    docker_image: String,
    /// Docker group GID when the runner image does not reveal it.
    #[arg(long, default_value = "1001")]
    docker_gid: String,
    /// Registry mirror for dockerd.
    #[arg(long)]
    docker_registry_mirror: Option<String>,
    /// Runner labels, comma-separated, added to the runners of every RunnerDeployment (ARC's
    /// flag of the same name; changing them rolls the runners out).
    #[arg(long, value_delimiter = ',')]
    common_runner_labels: Vec<String>,
    /// Keep an offline, registration-only runner for every RunnerDeployment, RunnerSet and
    /// standalone RunnerReplicaSet scaled to zero, so that GitHub versions which fail jobs
    /// without any matching runner queue them instead
    /// (older GitHub Enterprise Server). Not needed on github.com.
    #[arg(long, env = "HANGAR_REGISTRATION_ONLY_RUNNERS")]
    registration_only_runners: bool,
    /// Safety-net resync interval.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    sync_period: Duration,
    /// How many objects each controller (Runners, runner pods, RunnerReplicaSets,
    /// RunnerDeployments, RunnerSets, autoscalers) reconciles at once; `0` is unbounded. Further
    /// objects wait their turn in the controller's queue. Each reconcile under way holds what
    /// it is writing until the apiserver or GitHub answers (a runner pod to create is about
    /// 20 KB), and neither answers sooner for being asked by more at once.
    #[arg(long, default_value_t = hangar::context::MAX_CONCURRENT_RECONCILES)]
    max_concurrent_reconciles: u16,
    /// Register runners with just-in-time configurations (one API call, no reusable token in
    /// any pod). Per Runner: annotation `hangar.dev/registration: jit`.
    #[arg(long)]
    jit: bool,
    /// Watch Secrets' metadata so a changed githubAPICredentialsFrom Secret takes effect at
    /// once. Needs list and watch on Secrets; with `false` only get is needed and a change
    /// takes effect within 30 seconds of the next reconcile.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    watch_credential_secrets: bool,
    /// How long an autoscaler waits after a scale-out before scaling down, unless its
    /// scaleDownDelaySecondsAfterScaleOut says otherwise.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    default_scale_down_delay: Duration,
    /// How often the leader removes runner registrations Hangar created and lost (idle, named
    /// as Hangar names its runners, with no pod or Runner: a JIT configuration whose pod was
    /// never created, or a ghost still online after its pod was deleted); `0` switches the
    /// sweep off.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    leaked_registration_sweep_interval: Duration,
    /// How long a registration must have looked leaked before the sweep removes it, counted
    /// from when the current leader first saw it so (GitHub's runners carry no creation time).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    leaked_registration_grace: Duration,
    /// How long a deleted Runner, RunnerReplicaSet, RunnerDeployment or RunnerSet waits for its
    /// busy runners to finish their jobs before it kills them; per object: annotation
    /// `hangar.dev/retirement-timeout`.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    retirement_timeout: Duration,
    /// How long a Ready runner pod may go without registering with GitHub before it is
    /// replaced (ARC's fixed 10 minutes); also how long the unregistration of such a pod waits
    /// for it to register.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    registration_timeout: Duration,
    /// How long a runner pod may stay unschedulable, fail to pull its image or to create its
    /// runner container before it counts as stuck: replaced, or (when no runner of its template
    /// works) reported while its set creates no more.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    stuck_pod_timeout: Duration,
    /// How long a runner pod's node may be NotReady (its `Ready` condition False or Unknown)
    /// before the runner counts as dead and is replaced. `0` turns node readiness off: Nodes
    /// are then not watched (no cluster-scoped permission needed).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    node_not_ready_timeout: Duration,
    /// Runner container restarts in a crash loop after which the runner counts as dead.
    #[arg(long, default_value_t = 3)]
    crash_loop_restarts: u32,
    /// How long a set whose runners failed (their container exited with a code other than 0,
    /// or was OOM-killed), while no runner of its template works, waits after the latest
    /// failure before it tries one fresh runner. Failed runners keep their places meanwhile,
    /// so a runner image that fails at start costs one pod per back-off, not a stream of pods.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    failed_runner_backoff: Duration,
    /// The lowest actions/runner version GitHub accepts (GitHub's floor is 2.329.0 since
    /// September 2026, then each release within 30 days). A runner whose image tag names an
    /// older version (`…/actions-runner:2.311.0`, `…:v2.311.0-ubuntu-22.04`) is reported as
    /// refused, and a set whose runners are all refused creates no more. Off by default: GitHub
    /// Enterprise Server accepts older runners.
    #[arg(long)]
    minimum_runner_version: Option<String>,
    /// How long a finished ephemeral runner of an autoscaled set keeps its place when its
    /// autoscaler cannot say that its count already accounts for the runner's job (pull-based
    /// metrics, a lost completed delivery): replaced sooner, a runner may be created for demand
    /// already gone; held longer, a waiting job waits that long. Webhook-driven autoscalers
    /// release a place as soon as they have accounted for the job.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    release_grace: Duration,
    /// How often the leader lists the queued jobs of each autoscaler that scales on webhooks
    /// alone (a workflowJob trigger, no metrics, repository runners) and reserves runners for
    /// jobs whose delivery was lost; `0` switches the pull off. Cost per repository: 2 run
    /// lists per interval plus a job list per queued or in-progress run (304s are free).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    webhook_pull_interval: Duration,
    /// Also serve GitHub webhooks on this address (e.g. 0.0.0.0:8000), in this process.
    #[arg(long)]
    webhook_addr: Option<std::net::SocketAddr>,
    /// Prometheus metrics address (`/metrics`); `0` disables.
    #[arg(long, default_value = ":8080", value_parser = parse_listen)]
    metrics_addr: Listen,
    /// Health probe address (`/healthz`, `/readyz`); `0` disables.
    #[arg(long, default_value = ":8081", value_parser = parse_listen)]
    health_probe_bind_address: Listen,
    /// Connections the metrics server, and the probe server, each serve at once; more are
    /// answered 503 and closed.
    #[arg(long, default_value_t = hangar::metrics::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..))]
    metrics_max_connections: u32,
    /// Elect a leader among replicas with a Lease: only the leader reconciles (the webhook
    /// server runs on every replica).
    #[arg(long)]
    enable_leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "hangar-controller")]
    leader_election_id: String,
    /// Namespace of the leader-election Lease (default: this pod's, else `default`).
    #[arg(long, env = "POD_NAMESPACE")]
    leader_election_namespace: Option<String>,
    #[command(flatten)]
    log: LogArgs,
    #[command(flatten)]
    webhook: WebhookArgs,
    #[command(flatten)]
    admission: hangar::admission::cli::AdmissionArgs,
    #[command(flatten)]
    http: HttpArgs,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("invalid duration {s:?} (use e.g. 30s, 1m, 1h)")),
    }
}

/// A duration that is not zero (a zero timeout would close every connection at once).
fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        Duration::ZERO => Err(format!("{s:?} is zero; a timeout must be positive")),
        d => Ok(d),
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::WebhookServer(args) => {
            args.log.init();
            block_on(webhook_server(*args))
        }
        Command::Crd => {
            let mut out = std::io::stdout().lock();
            let docs: Vec<String> = hangar_api::crd_files()
                .into_iter()
                .map(|(_, yaml)| yaml)
                .collect();
            if let Err(e) = out.write_all(join_documents(&docs).as_bytes()) {
                eprintln!("error: failed to write CRDs: {e}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Command::Run(args) => {
            args.log.init();
            block_on(run(*args))
        }
    }
}

/// Runs `future` on a fresh runtime, for the long-running subcommands: as a task, like
/// everything it spawns, on one worker thread unless `TOKIO_WORKER_THREADS` asks for more.
///
/// One thread is what the work needs (the controller's CPU at 20 jobs/s is a fraction of one
/// core) and what costs least: with a worker per core, most wake-ups crossed threads (a
/// futex and a context switch each), and the controller spent about a tenth more CPU per job
/// (`bench-webhooks --rate 5`, ADR 0025).
fn block_on(
    future: impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
) -> ExitCode {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        builder.worker_threads(1);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let task = runtime.spawn(future);
    match runtime
        .block_on(task)
        .unwrap_or_else(|e| Err(anyhow::anyhow!("the controller's task failed: {e}")))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A future that resolves on SIGTERM or Ctrl-C, and so does every clone of it. The signal
/// handlers are installed by this call, not by the first poll, so a signal that arrives while
/// nothing awaits it (between a follower's wait and its leading) is not lost.
fn termination() -> Shared<BoxFuture<'static, ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            return async move {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            .boxed()
            .shared();
        }
    }
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
    .boxed()
    .shared()
}

/// Binds the metrics and probe listeners (one server when both name the same address).
async fn serve_exporter(
    exporter: &Arc<hangar::metrics::Exporter>,
    addrs: &[Option<std::net::SocketAddr>],
    limits: Limits,
) -> anyhow::Result<()> {
    let mut bound = std::collections::BTreeSet::new();
    for addr in addrs.iter().flatten() {
        if !bound.insert(*addr) {
            continue;
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} for metrics/probes"))?;
        let router = exporter.clone().router();
        tokio::spawn(hangar::metrics::serve(listener, router, limits));
    }
    Ok(())
}

async fn webhook_server(args: WebhookServerArgs) -> anyhow::Result<()> {
    let config = args.webhook.config(&args.http)?;
    let github = match &args.github_token {
        Some(token) => {
            let endpoint = match (&args.github_api_url, &args.github_enterprise_url) {
                (Some(api), _) => Endpoint::custom(api, &args.github_url),
                (None, Some(url)) => Endpoint::from_enterprise_url(url),
                (None, None) => Endpoint::from_web_url(&args.github_url),
            }
            .context("invalid GitHub URL")?;
            let client = ClientRegistry::new(endpoint, ClientOptions::default())
                .client(Credentials::Token(token.clone()))
                .context("cannot build the GitHub client")?;
            Some(client as Arc<dyn hangar_github::GitHubApi>)
        }
        None => None,
    };
    let kube_config = kube::Config::infer()
        .await
        .context("cannot find a Kubernetes configuration")?;
    let client = hangar::kube_client::uncounted(kube_config).context("cannot reach Kubernetes")?;
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    // On SIGTERM the server stops accepting, answers what is in flight and writes what is
    // queued before exiting.
    let shutdown = termination();
    hangar::webhook_server::run_standalone(
        client,
        args.watch_namespace,
        github,
        listener,
        config,
        None,
        shutdown,
    )
    .await
    .context("webhook server failed")
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    // Refuse a webhook listener without a secret before anything else starts.
    let webhook_config = match args.webhook_addr {
        Some(_) => Some(args.webhook.config(&args.http)?),
        None => None,
    };
    let endpoint = match (&args.github_api_url, &args.github_enterprise_url) {
        (Some(api), _) => Endpoint::custom(api, &args.github_url),
        (None, Some(url)) => Endpoint::from_enterprise_url(url),
        (None, None) => Endpoint::from_web_url(&args.github_url),
    }
    .context("invalid GitHub URL")?;
    let credentials = controller_credentials(&args)?;
    // One registry for the controller's client and every githubAPICredentialsFrom Secret.
    let registry = Arc::new(ClientRegistry::new(
        endpoint.clone(),
        ClientOptions::default(),
    ));
    let github = registry
        .client(credentials)
        .context("cannot build the GitHub client")?;
    // Every Kubernetes request is counted by status code (`rest_client_requests_total`), so
    // a permission the RBAC lacks shows as code="403" even where its error is not logged.
    let exporter = Arc::new(hangar::metrics::Exporter::default());
    let config = kube::Config::infer()
        .await
        .context("cannot find a Kubernetes configuration")?;
    let client = hangar::kube_client::counted(config, exporter.metrics.clone())
        .context("cannot reach Kubernetes")?;
    // Admission webhooks serve on every replica, leader or not.
    if let Some(admission) = args
        .admission
        .start(
            &client,
            github.clone(),
            Some(registry.clone()),
            args.http.apply(args.admission.limits()),
            args.retirement_timeout,
        )
        .await?
    {
        tokio::spawn(admission);
    }
    let settings = Settings {
        exporter: Some(exporter.clone()),
        pod_defaults: PodDefaults {
            runner_image: args.runner_image,
            docker_image: args.docker_image,
            docker_gid: args.docker_gid,
            docker_registry_mirror: args.docker_registry_mirror,
            github_url: endpoint.web_url().to_string(),
            ..PodDefaults::default()
        },
        jit: args.jit,
        runner_set_registration: args.admission.runner_set_registration(),
        common_runner_labels: args
            .common_runner_labels
            .into_iter()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect(),
        registration_only_runners: args.registration_only_runners,
        sync_period: args.sync_period,
        max_concurrent_reconciles: args.max_concurrent_reconciles,
        default_scale_down_delay: args.default_scale_down_delay,
        leaked_registration_sweep: args.leaked_registration_sweep_interval,
        leaked_registration_grace: args.leaked_registration_grace,
        retirement_timeout: args.retirement_timeout,
        health: hangar_core::health::Thresholds {
            registration: args.registration_timeout,
            pending: args.stuck_pod_timeout,
            node_not_ready: args.node_not_ready_timeout,
            crash_loop_restarts: args.crash_loop_restarts,
            failed_runner_backoff: args.failed_runner_backoff,
            ..Default::default()
        },
        minimum_runner_version: args.minimum_runner_version,
        release_grace: args.release_grace,
        webhook_pull_interval: args.webhook_pull_interval,
        watch_credential_secrets: args.watch_credential_secrets,
        github_registry: Some(registry),
        ..Settings::default()
    };
    let mut webhook = match (args.webhook_addr, webhook_config) {
        (Some(addr), Some(config)) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} for webhooks"))?;
            Some((listener, config))
        }
        _ => None,
    };
    serve_exporter(
        &exporter,
        &[args.metrics_addr.0, args.health_probe_bind_address.0],
        args.http.apply(Limits::new(
            args.metrics_max_connections,
            hangar::metrics::MAX_BODY_BYTES,
        )),
    )
    .await?;

    // From here on SIGTERM and Ctrl-C are handled (before, they end the process at once, with
    // nothing served yet): the webhook server stops accepting, answers the deliveries in
    // flight once their reservations are stored, and the process exits.
    let terminated = termination();
    let mut elector = None;
    // With leader election the webhook server runs on every replica, outside the manager, until
    // SIGTERM or until this replica exits for another reason (a lost lease): dropping
    // `keep_serving` stops it.
    let (keep_serving, stop_serving) = tokio::sync::oneshot::channel::<()>();
    let mut webhook_on_every_replica = None;
    let mut stopped_following = false;
    if args.enable_leader_election {
        let namespace = args
            .leader_election_namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let config = hangar::leader::ElectionConfig::new(
            namespace,
            args.leader_election_id.clone(),
            hangar::leader::default_identity(),
        );
        tracing::info!(lease = %config.name, identity = %config.identity, "waiting for leadership");
        let mut e = hangar::leader::Elector::start(client.clone(), config);
        // A follower is healthy and ready; its webhook server (active-active) already serves.
        exporter.set_ready(true);
        webhook_on_every_replica = webhook.take().map(|(listener, config)| {
            let client = client.clone();
            // The same instruments as the controllers this replica runs once it leads, so
            // delivery-to-pod latencies pair up on the leader.
            let metrics = exporter.metrics.clone();
            let github = github.clone() as Arc<dyn hangar_github::GitHubApi>;
            let namespace = args.watch_namespace.clone();
            let shutdown = {
                let terminated = terminated.clone();
                async move {
                    tokio::select! {
                        () = terminated => {}
                        _ = stop_serving => {}
                    }
                }
            };
            tokio::spawn(async move {
                let result = hangar::webhook_server::run_standalone(
                    client,
                    namespace,
                    Some(github),
                    listener,
                    config,
                    Some(metrics),
                    shutdown,
                )
                .await;
                if let Err(e) = result {
                    tracing::error!(error = %e, "webhook server failed");
                }
            })
        });
        stopped_following = tokio::select! {
            () = e.acquired() => false,
            () = terminated.clone() => true,
        };
        elector = Some(e);
    }

    let outcome = if stopped_following {
        // A follower reconciles nothing: it only has its webhook server to drain.
        Ok(())
    } else {
        // Returns at SIGTERM once its webhook server (without leader election) has drained;
        // the controllers stop where they are, which is safe: see `hangar::manager::run`.
        let options = ManagerOptions {
            namespace: args.watch_namespace,
            webhook,
            ..ManagerOptions::new(client, github as Arc<_>, settings)
        }
        .until(terminated);
        let manager = hangar::manager::run(options);
        match elector.as_mut() {
            Some(e) => tokio::select! {
                () = manager => Ok(()),
                () = e.lost() => Err(anyhow::anyhow!(
                    "lost the leader-election lease; exiting so a fresh replica can take over"
                )),
            },
            None => {
                manager.await;
                Ok(())
            }
        }
    };
    // The controllers have stopped: releasing the Lease lets the next leader start now (a
    // follower just stops campaigning).
    if let Some(e) = elector {
        e.release().await;
    }
    drop(keep_serving);
    if let Some(server) = webhook_on_every_replica {
        let _ = server.await;
    }
    tracing::info!("stopped");
    outcome
}

/// The controller-wide credential from `GITHUB_TOKEN`, or ARC's `GITHUB_APP_ID`,
/// `GITHUB_APP_INSTALLATION_ID` and `GITHUB_APP_PRIVATE_KEY` (the PEM itself, or a path to it).
fn controller_credentials(args: &RunArgs) -> anyhow::Result<Credentials> {
    let mut data: Vec<(&str, Vec<u8>)> = Vec::new();
    if let Some(token) = &args.github_token {
        data.push(("github_token", token.expose().as_bytes().to_vec()));
    }
    if let Some(id) = &args.github_app_id {
        data.push(("github_app_id", id.clone().into_bytes()));
    }
    if let Some(id) = &args.github_app_installation_id {
        data.push(("github_app_installation_id", id.clone().into_bytes()));
    }
    if let Some(key) = &args.github_app_private_key {
        let key = key.expose();
        let pem = if key.trim_start().starts_with("-----BEGIN") {
            key.as_bytes().to_vec()
        } else {
            // A path is not secret, but a mangled key would be: the message names neither.
            std::fs::read(key).with_context(|| {
                "GITHUB_APP_PRIVATE_KEY is neither a PEM key nor a readable file".to_owned()
            })?
        };
        data.push(("github_app_private_key", pem));
    }
    Credentials::from_secret_data(data.iter().map(|(k, v)| (*k, v.as_slice()))).map_err(|e| {
        // Name the environment variables, not the Secret keys the message speaks of.
        anyhow::anyhow!(
            "{}",
            e.to_string()
                .replace("github_token", "GITHUB_TOKEN")
                .replace("github_app_id", "GITHUB_APP_ID")
                .replace("github_app_installation_id", "GITHUB_APP_INSTALLATION_ID")
                .replace("github_app_private_key", "GITHUB_APP_PRIVATE_KEY")
        )
    })
}

/// Joins YAML documents into one stream, each introduced by `---`.
fn join_documents(docs: &[String]) -> String {
    docs.iter()
        .map(|d| format!("---\n{}", d.trim_start_matches("---\n")))
        .collect::<Vec<_>>()
        .join("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_document_gets_exactly_one_separator() {
        let joined = join_documents(&["a: 1\n".into(), "---\nb: 2\n".into()]);
        assert_eq!(joined, "---\na: 1\n---\nb: 2\n");
    }

    #[test]
    fn the_command_line_is_consistent_and_arc_flags_parse() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "hangar",
            "run",
            "--metrics-addr=:8080",
            "--health-probe-bind-address=0",
            "--enable-leader-election",
            "--leader-election-id=hangar-controller",
            "--log-level=debug",
            "--log-format=json",
            "--sync-period=1m",
            "--default-scale-down-delay=10m",
            "--leaked-registration-sweep-interval=0",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(
            args.metrics_addr,
            Listen(Some("0.0.0.0:8080".parse().unwrap()))
        );
        assert_eq!(args.health_probe_bind_address, Listen(None));
        assert!(args.enable_leader_election);
        assert_eq!(args.log.log_format, "json");
        assert_eq!(args.leaked_registration_sweep_interval, Duration::ZERO);
        assert_eq!(args.leaked_registration_grace, Duration::from_secs(30 * 60));
        assert_eq!(args.webhook_pull_interval, Duration::from_secs(5 * 60));
        let wrong = Cli::try_parse_from(["hangar", "run", "--log-format=xml"]).unwrap_err();
        assert!(wrong.to_string().contains("--log-format"), "{wrong}");
    }

    #[test]
    fn server_limits_default_to_the_documented_values_and_refuse_zero() {
        let cli = Cli::try_parse_from(["hangar", "run"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        // The flags' defaults are the library's.
        assert_eq!(args.http.apply(Limits::new(1, 1)), Limits::new(1, 1));
        assert_eq!(
            args.webhook.webhook_max_body_bytes,
            hangar::webhook_server::DEFAULT_MAX_BODY_BYTES
        );
        assert_eq!(
            args.admission.limits(),
            Limits::new(
                hangar::admission::DEFAULT_MAX_CONNECTIONS,
                hangar::admission::DEFAULT_MAX_BODY_BYTES,
            )
        );
        assert_eq!(
            args.metrics_max_connections,
            hangar::metrics::DEFAULT_MAX_CONNECTIONS
        );
        for zero in [
            "--http-header-read-timeout=0s",
            "--http-request-timeout=0",
            "--webhook-max-connections=0",
            "--metrics-max-connections=0",
            "--admission-max-connections=0",
        ] {
            let refused = Cli::try_parse_from(["hangar", "run", zero]).unwrap_err();
            assert!(
                refused
                    .to_string()
                    .contains(zero.split('=').next().unwrap()),
                "{refused}"
            );
        }
        let cli = Cli::try_parse_from([
            "hangar",
            "webhook-server",
            "--http-header-read-timeout=2s",
            "--http-request-timeout=5s",
            "--webhook-max-connections=7",
            "--webhook-max-body-bytes=1000",
            "--insecure-accept-unsigned-webhooks",
        ])
        .unwrap();
        let Command::WebhookServer(args) = cli.command else {
            panic!("not webhook-server")
        };
        let limits = args.webhook.config(&args.http).unwrap().limits;
        assert_eq!(
            limits,
            Limits {
                max_connections: 7,
                max_body_bytes: 1000,
                header_read_timeout: Duration::from_secs(2),
                request_timeout: Duration::from_secs(5),
            }
        );
    }

    /// `RunArgs` is `Debug` (clap needs it, and a `{args:?}` is one careless line away): the
    /// credentials it carries print redacted, from flags and from the environment alike.
    #[test]
    fn run_args_debug_never_shows_a_credential() {
        let cli = Cli::try_parse_from([
            "hangar",
            "run",
            "--github-token=ghp_flagsecret",
            "--github-app-private-key=-----BEGIN RSA PRIVATE KEY-----\nkeysecret",
            "--github-webhook-secret-token=hooksecret",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        let shown = format!("{args:?} {args:#?}");
        for secret in ["ghp_flagsecret", "keysecret", "hooksecret"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("[redacted]"), "{shown}");
        let cli = Cli::try_parse_from([
            "hangar",
            "webhook-server",
            "--github-token=ghp_flagsecret",
            "--github-webhook-secret-token=hooksecret",
        ])
        .unwrap();
        let shown = format!("{:?}", cli.command);
        for secret in ["ghp_flagsecret", "hooksecret"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("soon").is_err());
    }
}
