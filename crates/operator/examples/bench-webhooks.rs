//! Benchmark: GitHub `workflow_job` webhooks at a steady rate, from the queued delivery to the
//! runner pod, its registration and the job's assignment. Run it with `cargo xtask
//! bench-webhooks` (release builds of this example and of `hangar`); results go to
//! `bench/results/webhooks.json`, one record per job to `target/bench-webhooks/jobs.json`.
//!
//! One run gets a private control plane, an in-process ghsim and nodesim (runner pods that
//! register and take jobs), and `hangar run --webhook-addr` as a child process with a webhook
//! secret. ghsim is subscribed to `workflow_job` events as a repository admin would subscribe
//! the webhook server, except that the hook points at a recording proxy in this process: it
//! forwards every delivery unchanged (signature included) and notes when it arrived and how
//! long hangar took to answer, because ghsim's delivery log keeps whole seconds only. An
//! ephemeral RunnerDeployment at zero replicas has an autoscaler with a `workflowJob` scale-up
//! trigger (`minReplicas: 0`, `maxReplicas: --max-replicas`). Jobs are then queued at `--rate`
//! per second for `--seconds`, each running `--job-ms`, and the run waits until all completed.
//!
//! Per job: when its `queued` delivery reached the proxy; which runner ran it (ghsim's job
//! record names it; a runner is named after its pod); when a pod watch first saw that pod;
//! when the runner registered and when the job was assigned and started (ghsim's records).
//! Reported: p50/p95/p99/max from the delivery to each of those, GitHub API calls per job with
//! the controller's token, the webhook server's answers, rate and answer latency, interrupted
//! jobs (must be 0) and whether every job completed.
//!
//! Clocks: ghsim runs in this process and reads the system's real-time clock at nanosecond
//! resolution, as do the proxy and the pod watch here, so their times compare to well under a
//! millisecond. Answer latencies are on the monotonic clock. Kubernetes' `creationTimestamp`
//! has whole seconds: it only bounds how late the watch saw each pod.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use clap::Parser;
use common::{CONTROLLER_PAT, Controller, Latency, NAMESPACE, World, round_us, secs};
use futures::StreamExt;
use ghsim::webhooks::{ContentType, NewHook};
use ghsim::world::{Job, JobStatus, SubmitJobs};
use hangar_api::{HorizontalRunnerAutoscaler, RunnerDeployment};
use hangar_testkit::control_plane::{ControlPlane, StartOptions, free_port};
use hangar_testkit::eventually;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    load: common::Load,
    /// The autoscaler's maxReplicas.
    #[arg(long, default_value_t = 200)]
    max_replicas: u32,
    /// The `hangar` binary to run (default: next to this example's directory).
    #[arg(long)]
    hangar: Option<PathBuf>,
    /// Where to write the results (relative paths are from the workspace root).
    #[arg(long, default_value = "bench/results/webhooks.json")]
    out: PathBuf,
}

const WEBHOOK_SECRET: &str = "hangar-bench-webhook-secret";
/// Name of the RunnerDeployment and its autoscaler, and the runners' label.
const NAME: &str = "bench";
/// Longest wait for the stack to come up, and for the jobs after the last was queued.
const SETUP_LIMIT: Duration = Duration::from_secs(120);
const DRAIN_LIMIT: Duration = Duration::from_secs(600);

const WALL_CLOCK: &str = "system real-time clock of this process (ns resolution); ghsim runs in \
                          it and reads the same clock";
const MONOTONIC_CLOCK: &str = "monotonic clock (Instant) of this process";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    let args = Args::parse();
    args.load.check()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let hangar = common::hangar_binary(args.hangar.as_deref(), "bench-webhooks")?;

    let dir = root.join("target/bench-webhooks");
    let cluster = dir.join("cluster");
    let mut options = StartOptions::new(&cluster, hangar_testkit::Binaries::configured());
    options.tie_to_pid = Some(std::process::id());
    let plane = ControlPlane::start(options).await?;
    let observed = run_on(plane.kubeconfig(), &hangar, &args).await;
    ControlPlane::stop(&cluster)?;
    let observed = observed?;

    let (report, records) = summarize(&args, &observed);
    let jobs_out = dir.join("jobs.json");
    std::fs::write(&jobs_out, serde_json::to_string(&records)? + "\n")
        .with_context(|| format!("failed to write {}", jobs_out.display()))?;
    let out = common::write_results(&root, &args.out, &report)?;
    println!("{}", summary(&report));
    println!("wrote {} and {}", out.display(), jobs_out.display());
    ensure!(
        report.jobs.interrupted == 0,
        "{} jobs were interrupted",
        report.jobs.interrupted
    );
    ensure!(
        report.jobs.all_completed,
        "only {} of {} jobs completed",
        report.jobs.completed,
        report.jobs.queued
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The run: everything observed, before any arithmetic.

/// What one run observed.
#[derive(Debug)]
struct Observed {
    /// Just before the first job was queued; per-job records count seconds from here.
    t0: Timestamp,
    /// From the first job queued to the last.
    queueing: Duration,
    /// Whether every job completed within [`DRAIN_LIMIT`] of the last one queued.
    drained: bool,
    /// From the last job queued until the last completed (or the drain limit).
    draining: Duration,
    /// The queued jobs as ghsim recorded them, at the end.
    jobs: Vec<Job>,
    /// Every delivery through the proxy, in arrival order.
    deliveries: Vec<Proxied>,
    /// Runner pods by name, as the watch saw them.
    pods: BTreeMap<String, PodSeen>,
    /// Runner registrations (ghsim's `registered_at`) by runner name.
    registered: HashMap<String, Timestamp>,
    accounting: ghsim::accounting::Accounting,
    /// `hangar_webhook_*`, latency histogram and `rest_client_requests_total` lines from the
    /// controller's metrics.
    hangar_metrics: BTreeMap<String, f64>,
    /// Writes the apiserver served from the first job queued until the drain ended, by
    /// (verb, resource): what the control plane spent on the jobs.
    apiserver_writes: BTreeMap<(String, String), u64>,
    apiserver_reads: BTreeMap<(String, String), u64>,
    usage: Usage,
}

/// Resource use, measured from `/proc`.
#[derive(Debug, Default, Serialize)]
struct Usage {
    /// Share of all CPUs busy while jobs were queued.
    machine_cpu_busy_while_queueing: f64,
    /// CPUs' worth `hangar run` used while jobs were queued.
    controller_cpus_while_queueing: f64,
    /// CPUs' worth this process used while jobs were queued: ghsim, nodesim and its simulated
    /// runners, the proxy and the watch.
    bench_process_cpus_while_queueing: f64,
    controller_cpu_seconds: f64,
    controller_peak_rss_mib: f64,
}

async fn run_on(kubeconfig: &Path, hangar: &Path, args: &Args) -> anyhow::Result<Observed> {
    let World {
        client,
        github,
        nodes,
        ..
    } = World::start(kubeconfig, args.load.nodes).await?;

    let webhook_addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let metrics_addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let proxy = Proxy::start(webhook_addr).await?;
    let mut controller = Controller::spawn(
        hangar,
        kubeconfig,
        github.url.as_str(),
        webhook_addr,
        metrics_addr,
    )?;
    // Watching before anything can create a pod, so no pod is first seen in an initial list.
    let (pods, pod_watch) = watch_pods(client.clone());
    let (registered, registrations) = poll_registrations(github.sim.clone());
    set_up(&client, &github, &nodes, &proxy, args, webhook_addr).await?;

    let requests_before = common::apiserver_requests(&client).await?;
    let before = CpuSnapshot::take(controller.pid())?;
    let t0 = Timestamp::now();
    let ids = queue_jobs(&github.sim, args, &pods).await?;
    let after = CpuSnapshot::take(controller.pid())?;
    let queueing = after.at - before.at;
    let drain_started = Instant::now();
    let drained = drain(&github.sim, &ids, &pods).await;
    let draining = drain_started.elapsed();
    // Every delivery (the last jobs' `completed` too) answered before the log is read.
    let _ = until("every delivery attempted", SETUP_LIMIT, || {
        github
            .sim
            .deliveries()
            .iter()
            .all(|d| d.dropped || !d.attempts.is_empty())
    })
    .await;
    let hangar_metrics = scrape_metrics(metrics_addr).await;
    let requests_after = common::apiserver_requests(&client).await?;
    let (apiserver_reads, apiserver_writes) = requests_after
        .into_iter()
        .map(|(key, after)| {
            let delta = after - requests_before.get(&key).copied().unwrap_or(0);
            (key, delta)
        })
        .filter(|(_, delta)| *delta > 0)
        .partition(|((verb, _), _)| matches!(verb.as_str(), "GET" | "LIST" | "WATCH"));
    // Read before anything stops: stopped runners would count as interrupting their jobs.
    let jobs: Vec<Job> = github.sim.read(|w, _| {
        ids.iter()
            .filter_map(|id| w.jobs.get(id).cloned())
            .collect()
    });
    let accounting = ghsim::accounting::snapshot(&github.sim);
    let deliveries = proxy.log.lock().expect("proxy log").clone();
    let pods = pods.lock().expect("pod log").clone();
    let registered = registered.lock().expect("registration log").clone();
    let (controller_peak_rss_mib, controller_cpu_seconds) = controller.stop()?;
    pod_watch.abort();
    registrations.abort();
    nodes.shutdown().await?;

    let (machine_busy, controller_cpus, bench_cpus) = after.usage_since(&before);
    Ok(Observed {
        t0,
        queueing,
        drained,
        draining,
        jobs,
        deliveries,
        pods,
        registered,
        accounting,
        hangar_metrics,
        apiserver_writes,
        apiserver_reads,
        usage: Usage {
            machine_cpu_busy_while_queueing: machine_busy,
            controller_cpus_while_queueing: controller_cpus,
            bench_process_cpus_while_queueing: bench_cpus,
            controller_cpu_seconds,
            controller_peak_rss_mib,
        },
    })
}

/// Applies the RunnerDeployment and its autoscaler, waits for the autoscaler's first
/// reconcile, then subscribes the webhook server (through the proxy) and waits for the answer
/// to the hook's `ping`.
async fn set_up(
    client: &Client,
    github: &ghsim::Running,
    nodes: &nodesim::NodeSimHandle,
    proxy: &Proxy,
    args: &Args,
    webhook_addr: SocketAddr,
) -> anyhow::Result<()> {
    let placement = nodes.placement();
    let rd = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerDeployment",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 0,
            "template": {"spec": {
                "repository": "octo/app",
                "labels": [NAME],
                "nodeSelector": placement.node_selector,
                "tolerations": placement.tolerations,
            }},
        },
    });
    let hra = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "HorizontalRunnerAutoscaler",
        "metadata": {"name": NAME},
        "spec": {
            "scaleTargetRef": {"kind": "RunnerDeployment", "name": NAME},
            "minReplicas": 0,
            "maxReplicas": args.max_replicas,
            "scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "duration": "30m"}],
        },
    });
    let apply = PatchParams::apply("bench-webhooks").force();
    Api::<RunnerDeployment>::namespaced(client.clone(), NAMESPACE)
        .patch(NAME, &apply, &Patch::Apply(&rd))
        .await?;
    let autoscalers = Api::<HorizontalRunnerAutoscaler>::namespaced(client.clone(), NAMESPACE);
    autoscalers.patch(NAME, &apply, &Patch::Apply(&hra)).await?;

    let deadline = Instant::now() + SETUP_LIMIT;
    loop {
        let desired = autoscalers
            .get(NAME)
            .await?
            .status
            .and_then(|s| s.desired_replicas);
        if desired == Some(0) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the autoscaler was not reconciled within {SETUP_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    loop {
        if http_get(webhook_addr, "/").await.map(|(status, _)| status) == Some(200) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the webhook server did not answer within {SETUP_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let hook = github.sim.add_hook(NewHook {
        url: proxy.url.clone(),
        secret: Some(WEBHOOK_SECRET.to_owned()),
        content_type: ContentType::Json,
        events: vec!["workflow_job".to_owned()],
        owner: None,
    });
    until("the ping answered with 200", SETUP_LIMIT, || {
        github.sim.deliveries().iter().any(|d| {
            d.hook_id == hook.id
                && d.event == "ping"
                && d.attempts.last().and_then(|a| a.status) == Some(200)
        })
    })
    .await
}

/// Queues `rate × seconds` jobs, one at a time, at `rate` per second; returns their ids.
async fn queue_jobs(
    sim: &ghsim::Sim,
    args: &Args,
    pods: &Mutex<BTreeMap<String, PodSeen>>,
) -> anyhow::Result<Vec<u64>> {
    let total = (args.load.rate * args.load.seconds as f64).round() as usize;
    let request = SubmitJobs {
        repository: "octo/app".into(),
        count: 1,
        labels: vec!["self-hosted".into(), NAME.into()],
        duration_ms: args.load.job_ms,
        conclusion: Some("success".into()),
        workflow: None,
        job_name: None,
    };
    // Missed ticks are caught up at once, so the average rate holds when this task is late.
    let mut every = tokio::time::interval(Duration::from_secs_f64(1.0 / args.load.rate));
    let mut ids = Vec::with_capacity(total);
    let mut last_report = Instant::now();
    for _ in 0..total {
        every.tick().await;
        let (_, queued) = sim.update(|w, now| w.submit_jobs(&request, now))?;
        ids.extend(queued);
        if last_report.elapsed() >= Duration::from_secs(10) {
            eprintln!("queueing: {}", progress(sim, &ids, pods));
            last_report = Instant::now();
        }
    }
    Ok(ids)
}

/// Waits until every job in `ids` has completed, at most [`DRAIN_LIMIT`]; whether they did.
async fn drain(sim: &ghsim::Sim, ids: &[u64], pods: &Mutex<BTreeMap<String, PodSeen>>) -> bool {
    let deadline = Instant::now() + DRAIN_LIMIT;
    let mut last_report = Instant::now();
    loop {
        let completed = sim.read(|w, _| {
            ids.iter()
                .filter(|&&id| {
                    w.jobs
                        .get(&id)
                        .is_some_and(|j| j.status == JobStatus::Completed)
                })
                .count()
        });
        if completed == ids.len() {
            return true;
        }
        if Instant::now() > deadline {
            eprintln!(
                "gave up after {DRAIN_LIMIT:?}: {}",
                progress(sim, ids, pods)
            );
            return false;
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            eprintln!("draining: {}", progress(sim, ids, pods));
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One line on where the jobs are.
fn progress(sim: &ghsim::Sim, ids: &[u64], pods: &Mutex<BTreeMap<String, PodSeen>>) -> String {
    let (started, completed, runners) = sim.read(|w, _| {
        let jobs = ids.iter().filter_map(|id| w.jobs.get(id));
        let started = jobs.clone().filter(|j| j.started_at.is_some()).count();
        let completed = jobs.filter(|j| j.status == JobStatus::Completed).count();
        (started, completed, w.runners.len())
    });
    let pods = pods.lock().expect("pod log").len();
    format!(
        "{} jobs queued, {started} started, {completed} completed; {pods} runner pods seen, \
         {runners} runners registered now",
        ids.len()
    )
}

/// Polls `done` every 100 ms until it holds, for at most `limit`.
async fn until(what: &str, limit: Duration, done: impl FnMut() -> bool) -> anyhow::Result<()> {
    eventually::until(what, limit, Duration::from_millis(100), done).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Observers: the proxy, the pod watch, ghsim's registrations.

/// One delivery as the proxy saw it.
#[derive(Clone, Debug)]
struct Proxied {
    event: String,
    action: Option<String>,
    /// `workflow_job.id`.
    job_id: Option<u64>,
    /// When the request (body included) had arrived from ghsim.
    arrived: Timestamp,
    /// From forwarding the request to the end of hangar's answer.
    answer: Duration,
    /// Hangar's status; `None` if it did not answer.
    status: Option<u16>,
}

/// A recording reverse proxy between ghsim's webhook sender and hangar's webhook server.
/// Deliveries pass unchanged (headers but hop-by-hop ones, body, so the signature holds);
/// ghsim sends one at a time, so this adds one loopback hop and nothing else.
#[derive(Debug)]
struct Proxy {
    url: String,
    log: Arc<Mutex<Vec<Proxied>>>,
    task: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let http = hangar_github::client::http_builder()?.build()?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let upstream = format!("http://{upstream}/");
        let record = log.clone();
        let app = axum::Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
            let (http, record, upstream) = (http.clone(), record.clone(), upstream.clone());
            async move {
                let arrived = Timestamp::now();
                let hop_by_hop = [
                    header::HOST,
                    header::CONTENT_LENGTH,
                    header::CONNECTION,
                    header::TRANSFER_ENCODING,
                ];
                let mut forward = HeaderMap::new();
                for (name, value) in &headers {
                    if !hop_by_hop.contains(name) {
                        forward.append(name.clone(), value.clone());
                    }
                }
                let payload: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let started = Instant::now();
                let answer = match http
                    .post(upstream.as_str())
                    .headers(forward)
                    .body(body)
                    .send()
                    .await
                {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        response.bytes().await.ok().map(|body| (status, body))
                    }
                    Err(_) => None,
                };
                let took = started.elapsed();
                let event = headers
                    .get("x-github-event")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                record.lock().expect("proxy log").push(Proxied {
                    event,
                    action: payload["action"].as_str().map(str::to_owned),
                    job_id: payload["workflow_job"]["id"].as_u64(),
                    arrived,
                    answer: took,
                    status: answer.as_ref().map(|(status, _)| *status),
                });
                match answer {
                    Some((status, body)) => (
                        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                        body,
                    ),
                    None => (StatusCode::BAD_GATEWAY, Bytes::new()),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/", listener.local_addr()?);
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("proxy stopped: {e}");
            }
        });
        Ok(Self { url, log, task })
    }
}

/// Runner pods by name, as the watch saw them.
type PodLog = Arc<Mutex<BTreeMap<String, PodSeen>>>;
/// Runner registration times by runner name.
type RegistrationLog = Arc<Mutex<HashMap<String, Timestamp>>>;

/// A runner pod as the watch saw it.
#[derive(Clone, Copy, Debug)]
struct PodSeen {
    /// When the watch first delivered it.
    seen: Timestamp,
    /// Its `creationTimestamp` (whole seconds).
    created: Option<Timestamp>,
}

/// Records when each pod of the namespace is first seen.
fn watch_pods(client: Client) -> (PodLog, JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    let record = seen.clone();
    let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(event) = stream.next().await {
            let now = Timestamp::now();
            let Ok(pod) = event else { continue };
            record
                .lock()
                .expect("pod log")
                .entry(pod.name_any())
                .or_insert(PodSeen {
                    seen: now,
                    created: pod.metadata.creation_timestamp.map(|t| t.0),
                });
        }
    });
    (seen, task)
}

/// Records each runner's registration time from ghsim every 50 ms: an ephemeral runner leaves
/// ghsim when its job is done, so the registration must be read while it is there.
fn poll_registrations(sim: ghsim::Sim) -> (RegistrationLog, JoinHandle<()>) {
    let registered = Arc::new(Mutex::new(HashMap::new()));
    let record = registered.clone();
    let task = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(50));
        loop {
            every.tick().await;
            let now: Vec<(String, Timestamp)> = sim.read(|w, _| {
                w.runners
                    .values()
                    .map(|r| (r.name.clone(), r.registered_at))
                    .collect()
            });
            let mut log = record.lock().expect("registration log");
            for (name, at) in now {
                log.entry(name).or_insert(at);
            }
        }
    });
    (registered, task)
}

/// `hangar_webhook_*` and the two latency histograms' `_sum` and `_count` from the
/// controller's `/metrics`, by series.
async fn scrape_metrics(addr: SocketAddr) -> BTreeMap<String, f64> {
    let Some((200, text)) = http_get(addr, "/metrics").await else {
        eprintln!("could not scrape the controller's metrics at {addr}");
        return BTreeMap::new();
    };
    text.lines()
        .filter(|l| {
            l.starts_with("hangar_webhook_deliveries_total")
                || l.starts_with("hangar_webhook_delivery_to_pod_seconds_sum")
                || l.starts_with("hangar_webhook_delivery_to_pod_seconds_count")
                || l.starts_with("hangar_job_queue_to_assignment_seconds_sum")
                || l.starts_with("hangar_job_queue_to_assignment_seconds_count")
                || l.starts_with("rest_client_requests_total")
        })
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// A plain HTTP GET on loopback, given 5 s; status and body.
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let get = hangar_testkit::http::get(addr, path);
    tokio::time::timeout(Duration::from_secs(5), get)
        .await
        .ok()
        .flatten()
}

// ---------------------------------------------------------------------------------------------
// The report: pure arithmetic over what was observed.

#[derive(Debug, Serialize)]
struct Report {
    benchmark: &'static str,
    setup: Setup,
    /// Which clock each kind of figure comes from.
    clocks: BTreeMap<&'static str, &'static str>,
    load: Load,
    jobs: Jobs,
    /// Seconds, per job; `count` says how many jobs had both ends.
    latency_seconds: Latencies,
    webhook_server: WebhookServer,
    github_api: GitHubApi,
    apiserver_writes: ApiserverWrites,
    /// How late the pod watch saw each pod after its creation: `seen - creationTimestamp`,
    /// where the timestamp is truncated to the second, so each value is an upper bound (and
    /// at most one second above the true lag).
    pod_watch_lag_upper_bound_seconds: Latency,
    usage: Usage,
    /// Where the per-job records went (not committed).
    per_job_records: &'static str,
}

/// Writes (anything but GET, LIST and WATCH) the apiserver served while the jobs were queued
/// and drained: from every component (Hangar, nodesim's kubelets, the scheduler, the
/// garbage collector), since each costs the control plane alike.
#[derive(Debug, Serialize)]
struct ApiserverWrites {
    total: u64,
    per_job: f64,
    /// Per job, by `VERB resource[/subresource]`, largest first.
    per_job_by_request: Vec<(String, f64)>,
    /// Hangar's own share (its `rest_client_requests_total`, whole run including setup), per
    /// job, by `METHOD resource[/subresource]`, largest first.
    by_hangar_per_job_by_request: Vec<(String, f64)>,
    /// Reads (GET, LIST, WATCH) from every component, per job, by `VERB resource`, largest
    /// first: not writes, but each costs the apiserver a request too.
    reads_per_job_by_request: Vec<(String, f64)>,
}

#[derive(Debug, Serialize)]
struct Setup {
    rate_per_second: f64,
    seconds: u64,
    job_seconds: f64,
    nodes: usize,
    max_replicas: u32,
    machine_cpus: usize,
    autoscaler: &'static str,
    controller: &'static str,
}

#[derive(Debug, Serialize)]
struct Load {
    jobs_queued: usize,
    /// From the first job queued to the last.
    queueing_seconds: f64,
    /// Jobs per second actually queued.
    achieved_rate_per_second: f64,
    /// From the last job queued until the last completed.
    drain_seconds: f64,
}

#[derive(Debug, Serialize)]
struct Jobs {
    queued: usize,
    /// Completed with the planned conclusion (`success`), not interrupted.
    completed: usize,
    all_completed: bool,
    /// Jobs whose runner went away while running them (ghsim's accounting; must be 0).
    interrupted: u64,
    never_started: usize,
    /// Runner pods the watch saw: more than jobs means runners that never got one.
    runner_pods_created: usize,
    /// Jobs whose runner ran on a pod created before the job's queued delivery arrived.
    served_by_an_earlier_pod: usize,
}

#[derive(Debug, Serialize)]
struct Latencies {
    delivery_to_pod_created: Latency,
    delivery_to_runner_registered: Latency,
    delivery_to_job_assigned: Latency,
    delivery_to_job_started: Latency,
    delivery_to_pod_created_first_in_first_out: Latency,
    job_queued_to_delivery: Latency,
    job_queued_to_started: Latency,
}

#[derive(Debug, Serialize)]
struct WebhookServer {
    /// `workflow_job` deliveries ghsim sent (through the proxy).
    deliveries: usize,
    /// Of those, answered 2xx: signatures verified and the delivery accepted.
    answered_2xx: usize,
    /// Answers by `event/action status` (`none` = no answer).
    answers: BTreeMap<String, usize>,
    /// 2xx answers per second from the first delivery's arrival to the last answer. ghsim,
    /// like GitHub per hook, sends one delivery at a time, so this is the offered load unless
    /// the server is the bottleneck.
    answered_2xx_per_second: f64,
    /// 2xx answers completed while jobs were being queued, per second of that time.
    answered_2xx_per_second_while_queueing: f64,
    /// Most 2xx answers completed in one second of the run (counted from its start).
    peak_2xx_in_one_second: usize,
    /// Deliveries per second a one-at-a-time sender could get at the measured answer times
    /// (deliveries / sum of answer latencies): the headroom.
    one_at_a_time_capacity_per_second: f64,
    answer_latency_seconds: Latency,
    /// The controller's own counters and histogram sums, scraped at the end.
    controller_metrics: BTreeMap<String, f64>,
}

#[derive(Debug, Serialize)]
struct GitHubApi {
    /// REST calls made with the controller's token over the whole run.
    calls: u64,
    calls_per_job: f64,
    /// Calls charged to the primary rate-limit budget (304s are free).
    rate_limit_cost: u64,
    by_endpoint: BTreeMap<String, u64>,
}

/// One job's times, in seconds from the run's start (`t0`).
#[derive(Debug, Serialize)]
struct JobRecord {
    id: u64,
    runner: Option<String>,
    queued: f64,
    delivered: Option<f64>,
    pod_seen: Option<f64>,
    pod_creation_timestamp: Option<f64>,
    registered: Option<f64>,
    assigned: Option<f64>,
    started: Option<f64>,
    completed: Option<f64>,
    interrupted: bool,
}

fn summarize(args: &Args, o: &Observed) -> (Report, Vec<JobRecord>) {
    // The first arrival of each job's `queued` delivery.
    let mut queued_delivery: HashMap<u64, Timestamp> = HashMap::new();
    for d in &o.deliveries {
        if d.event == "workflow_job"
            && d.action.as_deref() == Some("queued")
            && let Some(job) = d.job_id
        {
            queued_delivery.entry(job).or_insert(d.arrived);
        }
    }

    let (mut to_pod, mut to_registered, mut to_assigned) = (vec![], vec![], vec![]);
    let (mut to_started, mut to_delivery, mut queue_time) = (vec![], vec![], vec![]);
    let mut records = Vec::with_capacity(o.jobs.len());
    let mut earlier_pod = 0;
    let at = |t: Timestamp| round_us(secs(o.t0, t));
    for job in &o.jobs {
        let delivered = queued_delivery.get(&job.id).copied();
        let pod = job.runner_name.as_ref().and_then(|r| o.pods.get(r));
        let registered = job
            .runner_name
            .as_ref()
            .and_then(|r| o.registered.get(r))
            .copied();
        if let Some(delivered) = delivered {
            to_delivery.push(secs(job.created_at, delivered));
            if let Some(pod) = pod {
                let latency = secs(delivered, pod.seen);
                earlier_pod += usize::from(latency < 0.0);
                to_pod.push(latency);
            }
            if let Some(registered) = registered {
                to_registered.push(secs(delivered, registered));
            }
            if let Some(assigned) = job.assigned_at {
                to_assigned.push(secs(delivered, assigned));
            }
            if let Some(started) = job.started_at {
                to_started.push(secs(delivered, started));
            }
        }
        if let Some(started) = job.started_at {
            queue_time.push(secs(job.created_at, started));
        }
        records.push(JobRecord {
            id: job.id,
            runner: job.runner_name.clone(),
            queued: at(job.created_at),
            delivered: delivered.map(at),
            pod_seen: pod.map(|p| at(p.seen)),
            pod_creation_timestamp: pod.and_then(|p| p.created).map(at),
            registered: registered.map(at),
            assigned: job.assigned_at.map(at),
            started: job.started_at.map(at),
            completed: job.completed_at.map(at),
            interrupted: job.interrupted,
        });
    }

    // Pods in creation order serving deliveries in arrival order, as the controller's
    // `hangar_webhook_delivery_to_pod_seconds` pairs them.
    let mut arrivals: Vec<Timestamp> = queued_delivery.values().copied().collect();
    arrivals.sort();
    let mut pods_seen: Vec<Timestamp> = o.pods.values().map(|p| p.seen).collect();
    pods_seen.sort();
    let fifo = arrivals
        .iter()
        .zip(&pods_seen)
        .map(|(d, p)| secs(*d, *p))
        .collect();
    let watch_lag = o
        .pods
        .values()
        .filter_map(|p| Some(secs(p.created?, p.seen)))
        .collect();

    let latency_seconds = Latencies {
        delivery_to_pod_created: Latency::of(
            "queued delivery arrives at the webhook server (proxy)",
            "the pod of the runner that ran the job is first seen by a pod watch",
            WALL_CLOCK,
            to_pod,
        ),
        delivery_to_runner_registered: Latency::of(
            "queued delivery arrives at the webhook server (proxy)",
            "the runner that ran the job registers (ghsim's registered_at)",
            WALL_CLOCK,
            to_registered,
        ),
        delivery_to_job_assigned: Latency::of(
            "queued delivery arrives at the webhook server (proxy)",
            "ghsim assigns the job to a runner (assigned_at; the runner picks it up next)",
            WALL_CLOCK,
            to_assigned,
        ),
        delivery_to_job_started: Latency::of(
            "queued delivery arrives at the webhook server (proxy)",
            "the runner picks the job up (ghsim's started_at)",
            WALL_CLOCK,
            to_started,
        ),
        delivery_to_pod_created_first_in_first_out: Latency::of(
            "n-th queued delivery to arrive",
            "n-th runner pod seen by the watch (whichever job it ran)",
            WALL_CLOCK,
            fifo,
        ),
        job_queued_to_delivery: Latency::of(
            "job queued in ghsim (created_at)",
            "its queued delivery arrives at the webhook server (ghsim's sender lag)",
            WALL_CLOCK,
            to_delivery,
        ),
        job_queued_to_started: Latency::of(
            "job queued in ghsim (created_at)",
            "the runner picks the job up (started_at): GitHub's queue time",
            WALL_CLOCK,
            queue_time,
        ),
    };

    let webhook_server = webhook_server(o);
    let mut by_endpoint = BTreeMap::new();
    let (mut calls, mut cost) = (0, 0);
    for row in o
        .accounting
        .api_calls
        .iter()
        .filter(|r| r.credential == "pat:controller")
    {
        *by_endpoint.entry(row.endpoint.clone()).or_default() += row.calls;
        calls += row.calls;
        cost += row.charged;
    }
    let queued = o.jobs.len();
    let completed = o
        .jobs
        .iter()
        .filter(|j| {
            j.status == JobStatus::Completed
                && j.conclusion.as_deref() == Some("success")
                && !j.interrupted
        })
        .count();
    let queueing_seconds = o.queueing.as_secs_f64();
    let report = Report {
        benchmark: "webhooks",
        setup: Setup {
            rate_per_second: args.load.rate,
            seconds: args.load.seconds,
            job_seconds: args.load.job_ms as f64 / 1000.0,
            nodes: args.load.nodes,
            max_replicas: args.max_replicas,
            machine_cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            autoscaler: "ephemeral RunnerDeployment from 0; HRA minReplicas 0, scaleUpTriggers \
                         workflowJob (30m), default scale-down delay",
            controller: "hangar run --webhook-addr (release build), webhook secret, default \
                         --webhook-batch-interval 250ms and GitHub client cache",
        },
        clocks: BTreeMap::from([
            ("latency_seconds", WALL_CLOCK),
            ("webhook_server.answer_latency_seconds", MONOTONIC_CLOCK),
            (
                "pod_watch_lag_upper_bound_seconds",
                "watch arrival on the real-time clock minus Kubernetes' creationTimestamp \
                 (whole seconds)",
            ),
            (
                "load, usage",
                "monotonic clock; CPU from /proc (USER_HZ ticks)",
            ),
        ]),
        load: Load {
            jobs_queued: queued,
            queueing_seconds: round_us(queueing_seconds),
            achieved_rate_per_second: if queueing_seconds > 0.0 && queued > 1 {
                round_us((queued - 1) as f64 / queueing_seconds)
            } else {
                0.0
            },
            drain_seconds: round_us(o.draining.as_secs_f64()),
        },
        jobs: Jobs {
            queued,
            completed,
            all_completed: o.drained && completed == queued,
            interrupted: o.accounting.jobs_summary.interrupted,
            never_started: o.jobs.iter().filter(|j| j.started_at.is_none()).count(),
            runner_pods_created: o.pods.len(),
            served_by_an_earlier_pod: earlier_pod,
        },
        latency_seconds,
        webhook_server,
        github_api: GitHubApi {
            calls,
            calls_per_job: if queued > 0 {
                round_us(calls as f64 / queued as f64)
            } else {
                0.0
            },
            rate_limit_cost: cost,
            by_endpoint,
        },
        apiserver_writes: {
            let total: u64 = o.apiserver_writes.values().sum();
            let per_job = |n: u64| {
                if queued > 0 {
                    round_us(n as f64 / queued as f64)
                } else {
                    0.0
                }
            };
            let mut by: Vec<(String, f64)> = o
                .apiserver_writes
                .iter()
                .map(|((verb, resource), n)| (format!("{verb} {resource}"), per_job(*n)))
                .collect();
            by.sort_by(|a, b| b.1.total_cmp(&a.1));
            let mut by_hangar: BTreeMap<String, u64> = BTreeMap::new();
            for (series, n) in &o.hangar_metrics {
                let Some(labels) = series.strip_prefix("rest_client_requests_total{") else {
                    continue;
                };
                let label = |name: &str| {
                    labels.split(',').find_map(|kv| {
                        kv.strip_prefix(name)?
                            .strip_prefix("=\"")?
                            .trim_end_matches('}')
                            .strip_suffix('"')
                    })
                };
                let (Some(method), Some(resource)) = (label("method"), label("resource")) else {
                    continue;
                };
                if method != "GET" {
                    *by_hangar.entry(format!("{method} {resource}")).or_default() += *n as u64;
                }
            }
            let mut by_hangar: Vec<(String, f64)> = by_hangar
                .into_iter()
                .map(|(k, n)| (k, per_job(n)))
                .collect();
            by_hangar.sort_by(|a, b| b.1.total_cmp(&a.1));
            let mut reads: Vec<(String, f64)> = o
                .apiserver_reads
                .iter()
                .map(|((verb, resource), n)| (format!("{verb} {resource}"), per_job(*n)))
                .collect();
            reads.sort_by(|a, b| b.1.total_cmp(&a.1));
            ApiserverWrites {
                total,
                per_job: per_job(total),
                per_job_by_request: by,
                by_hangar_per_job_by_request: by_hangar,
                reads_per_job_by_request: reads,
            }
        },
        pod_watch_lag_upper_bound_seconds: Latency::of(
            "creationTimestamp (whole seconds)",
            "first seen by the watch",
            "watch arrival: real-time clock; creationTimestamp: the apiserver's, truncated",
            watch_lag,
        ),
        usage: Usage {
            machine_cpu_busy_while_queueing: round_us(o.usage.machine_cpu_busy_while_queueing),
            controller_cpus_while_queueing: round_us(o.usage.controller_cpus_while_queueing),
            bench_process_cpus_while_queueing: round_us(o.usage.bench_process_cpus_while_queueing),
            controller_cpu_seconds: o.usage.controller_cpu_seconds,
            controller_peak_rss_mib: round_us(o.usage.controller_peak_rss_mib),
        },
        per_job_records: "target/bench-webhooks/jobs.json",
    };
    (report, records)
}

fn webhook_server(o: &Observed) -> WebhookServer {
    let jobs: Vec<&Proxied> = o
        .deliveries
        .iter()
        .filter(|d| d.event == "workflow_job")
        .collect();
    let mut answers = BTreeMap::new();
    for d in &jobs {
        let status = d
            .status
            .map_or_else(|| "none".to_owned(), |s| s.to_string());
        let key = format!(
            "{}/{} {status}",
            d.event,
            d.action.as_deref().unwrap_or("-")
        );
        *answers.entry(key).or_default() += 1;
    }
    let ok: Vec<&&Proxied> = jobs
        .iter()
        .filter(|d| d.status.is_some_and(|s| (200..300).contains(&s)))
        .collect();
    // Answer completion times, in seconds from t0.
    let done: Vec<f64> = ok
        .iter()
        .map(|d| secs(o.t0, d.arrived) + d.answer.as_secs_f64())
        .collect();
    let first = jobs.iter().map(|d| secs(o.t0, d.arrived)).reduce(f64::min);
    let last = done.iter().copied().reduce(f64::max);
    let rate = match (first, last) {
        (Some(first), Some(last)) if last > first => ok.len() as f64 / (last - first),
        _ => 0.0,
    };
    let mut per_second: BTreeMap<i64, usize> = BTreeMap::new();
    for t in &done {
        *per_second.entry(t.floor() as i64).or_default() += 1;
    }
    let queueing = o.queueing.as_secs_f64();
    let while_queueing = done.iter().filter(|t| **t <= queueing).count();
    let busy: f64 = jobs.iter().map(|d| d.answer.as_secs_f64()).sum();
    WebhookServer {
        deliveries: jobs.len(),
        answered_2xx: ok.len(),
        answers,
        answered_2xx_per_second: round_us(rate),
        answered_2xx_per_second_while_queueing: if queueing > 0.0 {
            round_us(while_queueing as f64 / queueing)
        } else {
            0.0
        },
        peak_2xx_in_one_second: per_second.values().copied().max().unwrap_or(0),
        one_at_a_time_capacity_per_second: if busy > 0.0 {
            round_us(jobs.len() as f64 / busy)
        } else {
            0.0
        },
        answer_latency_seconds: Latency::of(
            "the proxy forwards a workflow_job delivery",
            "hangar's answer has been read in full",
            MONOTONIC_CLOCK,
            jobs.iter().map(|d| d.answer.as_secs_f64()).collect(),
        ),
        controller_metrics: o
            .hangar_metrics
            .iter()
            .filter(|(series, _)| !series.starts_with("rest_client_requests_total"))
            .map(|(series, value)| (series.clone(), *value))
            .collect(),
    }
}

/// The one-paragraph summary printed at the end.
fn summary(r: &Report) -> String {
    let l = &r.latency_seconds;
    // Milliseconds below a second, seconds above.
    let human = |v: Option<f64>| match v {
        None => "-".to_owned(),
        Some(s) if s.abs() < 1.0 => format!("{:.0} ms", s * 1000.0),
        Some(s) => format!("{s:.1} s"),
    };
    let line = |name: &str, x: &Latency| {
        format!(
            "{name} p50 {} / p95 {} / p99 {} / max {}",
            human(x.p50),
            human(x.p95),
            human(x.p99),
            human(x.max)
        )
    };
    let w = &r.webhook_server;
    format!(
        "webhooks: {queued} jobs of {job:.1} s queued at {rate:.1}/s (asked {asked}/s) for \
         {secs:.0} s on {cpus} CPUs; {completed} completed{all}, {interrupted} interrupted, \
         drained {drain:.1} s after the last was queued. From the queued delivery: {pod}; {reg}; \
         {assigned}; ghsim's sender was {lag} behind at p99. Webhook server: {ok} of {sent} \
         deliveries answered 2xx ({per_s:.1}/s while jobs were queued, peak {peak} in one \
         second), answer latency \
         p50 {answer50:.1} ms / p99 {answer99:.1} ms. GitHub API: {calls} calls with the controller's token ({per_job:.3} per \
         job). Apiserver: {writes:.1} writes per job. CPU while queueing: machine {busy:.0}% busy, controller {ctl:.2} CPUs, bench \
         process {bench:.2} CPUs.",
        queued = r.jobs.queued,
        job = r.setup.job_seconds,
        rate = r.load.achieved_rate_per_second,
        asked = r.setup.rate_per_second,
        secs = r.load.queueing_seconds,
        cpus = r.setup.machine_cpus,
        completed = r.jobs.completed,
        all = if r.jobs.all_completed {
            " (all)"
        } else {
            " (NOT all)"
        },
        interrupted = r.jobs.interrupted,
        drain = r.load.drain_seconds,
        pod = line("pod created", &l.delivery_to_pod_created),
        reg = line("runner registered", &l.delivery_to_runner_registered),
        assigned = line("job assigned", &l.delivery_to_job_assigned),
        lag = human(l.job_queued_to_delivery.p99),
        ok = w.answered_2xx,
        sent = w.deliveries,
        per_s = w.answered_2xx_per_second_while_queueing,
        peak = w.peak_2xx_in_one_second,
        answer50 = w.answer_latency_seconds.p50.unwrap_or(0.0) * 1000.0,
        answer99 = w.answer_latency_seconds.p99.unwrap_or(0.0) * 1000.0,
        calls = r.github_api.calls,
        per_job = r.github_api.calls_per_job,
        writes = r.apiserver_writes.per_job,
        busy = r.usage.machine_cpu_busy_while_queueing * 100.0,
        ctl = r.usage.controller_cpus_while_queueing,
        bench = r.usage.bench_process_cpus_while_queueing,
    )
}

// ---------------------------------------------------------------------------------------------
// Processes and /proc.

/// CPU counters at one moment.
#[derive(Debug)]
struct CpuSnapshot {
    at: Instant,
    machine: common::MachineCpu,
    /// CPU seconds of the controller and of this process.
    controller: f64,
    bench: f64,
}

impl CpuSnapshot {
    fn take(controller: u32) -> anyhow::Result<Self> {
        Ok(Self {
            at: Instant::now(),
            machine: common::MachineCpu::read()?,
            controller: process_cpu_seconds(&controller.to_string())?,
            bench: process_cpu_seconds("self")?,
        })
    }

    /// Machine busy share, controller CPUs and bench CPUs between `earlier` and `self`.
    fn usage_since(&self, earlier: &Self) -> (f64, f64, f64) {
        let wall = (self.at - earlier.at).as_secs_f64();
        let share = self.machine.busy_share_since(&earlier.machine);
        if wall <= 0.0 {
            return (share, 0.0, 0.0);
        }
        (
            share,
            (self.controller - earlier.controller) / wall,
            (self.bench - earlier.bench) / wall,
        )
    }
}

/// User + system CPU seconds of process `pid` (a number or `self`).
fn process_cpu_seconds(pid: &str) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let after = stat.rsplit_once(')').context("bad stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    // USER_HZ is 100 on Linux.
    Ok(ticks / 100.0)
}

/// Starting the `hangar run` child process, with its webhook server.
impl Controller {
    fn spawn(
        hangar: &Path,
        kubeconfig: &Path,
        github: &str,
        webhook_addr: SocketAddr,
        metrics_addr: SocketAddr,
    ) -> anyhow::Result<Self> {
        let (webhook, metrics) = (webhook_addr.to_string(), metrics_addr.to_string());
        let child = Command::new(hangar)
            .args([
                "run",
                "--github-url",
                github,
                "--github-api-url",
                github,
                "--watch-namespace",
                NAMESPACE,
                "--webhook-addr",
                webhook.as_str(),
                "--metrics-addr",
                metrics.as_str(),
                "--health-probe-bind-address",
                "0",
            ])
            .env("KUBECONFIG", kubeconfig)
            .env("GITHUB_TOKEN", CONTROLLER_PAT)
            .env("GITHUB_WEBHOOK_SECRET_TOKEN", WEBHOOK_SECRET)
            .env(
                "RUST_LOG",
                std::env::var("HANGAR_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .spawn()
            .with_context(|| format!("failed to start {}", hangar.display()))?;
        Ok(Self { child })
    }
}
