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
//!
//! This file sets the run up and observes it; the recording proxy is [`proxy`], and the
//! arithmetic from what was observed to the results and the summary is [`report`].

mod common;
#[path = "bench-webhooks/proxy.rs"]
mod proxy;
#[path = "bench-webhooks/report.rs"]
mod report;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use clap::Parser;
use common::{Controller, NAMESPACE, Running, World};
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
use serde_json::json;
use tokio::task::JoinHandle;

use proxy::{Proxied, Proxy};
use report::{summarize, summary};

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    load: common::Load,
    /// The autoscaler's maxReplicas. Below the jobs running at once (rate × job length) the
    /// pool saturates, and the report's `saturation` section says how fast each finished
    /// runner's place served the next waiting job.
    #[arg(long, default_value_t = 200)]
    max_replicas: u32,
    /// The autoscaler's `scaleDownDelaySecondsAfterScaleOut` (default: unset, 10 minutes). With
    /// 0 the count follows the waiting jobs down, so a runner created after its job was gone
    /// shows as over-provisioned.
    #[arg(long)]
    scale_down_delay_seconds: Option<u32>,
    /// Scale on the `TotalNumberOfQueuedAndInProgressWorkflowRuns` metric (polled every
    /// `--sync-period`, the controller's default) instead of the `workflowJob` trigger; the
    /// deliveries still arrive and are answered "ignored".
    #[arg(long)]
    pull: bool,
    /// The controller measured: `hangar`, or ARC's legacy manager and `github-webhook-server`
    /// (built into the cache on first use, `cargo xtask arc build`), given ARC's CRDs and the
    /// same manifests, load and stack.
    #[arg(long, value_enum, default_value_t = Measured::Hangar)]
    controller: Measured,
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    let args = Args::parse();
    args.load.check()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let program = match args.controller {
        Measured::Hangar => Program::Hangar(common::hangar_binary(
            args.hangar.as_deref(),
            "bench-webhooks",
        )?),
        Measured::Arc => Program::Arc(hangar_testkit::arc::ArcBinaries::ensure()?),
    };

    let dir = root.join("target/bench-webhooks");
    let cluster = dir.join("cluster");
    let mut options = StartOptions::new(&cluster, hangar_testkit::Binaries::configured());
    options.tie_to_pid = Some(std::process::id());
    let plane = ControlPlane::start(options).await?;
    let observed = run_on(plane.kubeconfig(), &program, &args, &dir).await;
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
    /// CPU seconds per job each control-plane component used from the start of the load to
    /// the end of the drain (`total`: their sum): what the controller's writes and watches
    /// cost the apiserver and etcd.
    control_plane_cpu_seconds_per_job: BTreeMap<String, f64>,
}

async fn run_on(
    kubeconfig: &Path,
    program: &Program,
    args: &Args,
    dir: &Path,
) -> anyhow::Result<Observed> {
    let cluster = dir.join("cluster");
    let crds = match program {
        Program::Hangar(_) => hangar_api::crds(),
        Program::Arc(_) => hangar_testkit::arc::crds()?,
    };
    let World {
        client,
        github,
        nodes,
        ..
    } = World::start_with_crds(kubeconfig, args.load.nodes, &crds).await?;

    let webhook_addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let metrics_addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let proxy = Proxy::start(webhook_addr).await?;
    let mut controller = match program {
        Program::Hangar(hangar) => Running::Hangar(Controller::spawn(
            hangar,
            kubeconfig,
            github.url.as_str(),
            webhook_addr,
            metrics_addr,
        )?),
        Program::Arc(binaries) => Running::Arc(common::spawn_arc(
            binaries,
            kubeconfig,
            github.url.as_str(),
            webhook_addr,
            WEBHOOK_SECRET,
            &dir.join("arc"),
        )?),
    };
    // Watching before anything can create a pod, so no pod is first seen in an initial list.
    let (pods, pod_watch) = watch_pods(client.clone());
    let (registered, registrations) = poll_registrations(github.sim.clone());
    set_up(&client, &github, &nodes, &proxy, args, webhook_addr).await?;

    let requests_before = common::apiserver_requests(&client).await?;
    let control_plane_before = common::control_plane_cpu_seconds(&cluster)?;
    let before = CpuSnapshot::take(&controller.pids())?;
    let t0 = Timestamp::now();
    let ids = queue_jobs(&github.sim, args, &pods).await?;
    let after = CpuSnapshot::take(&controller.pids())?;
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
    let hangar_metrics = match controller {
        Running::Hangar(_) => scrape_metrics(metrics_addr).await,
        Running::Arc(_) => BTreeMap::new(),
    };
    let requests_after = common::apiserver_requests(&client).await?;
    let control_plane_after = common::control_plane_cpu_seconds(&cluster)?;
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
    let deliveries = proxy.deliveries();
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
            control_plane_cpu_seconds_per_job: common::cpu_seconds_per(
                &control_plane_before,
                &control_plane_after,
                ids.len(),
            ),
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
    let mut hra = json!({
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
    if let Some(delay) = args.scale_down_delay_seconds {
        hra["spec"]["scaleDownDelaySecondsAfterScaleOut"] = json!(delay);
    }
    if args.pull {
        let spec = &mut hra["spec"];
        spec.as_object_mut().map(|s| s.remove("scaleUpTriggers"));
        spec["metrics"] = json!([{
            "type": "TotalNumberOfQueuedAndInProgressWorkflowRuns",
            "repositoryNames": ["app"],
        }]);
    }
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
        url: proxy.url().to_owned(),
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
// Observers: the pod watch, ghsim's registrations (the proxy is `proxy`).

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

/// `hangar_webhook_*`, the two latency histograms' and the reconciles' `_sum` and `_count`
/// (how many reconciles each controller ran, and how long they took) from the controller's
/// `/metrics`, by series.
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
                || l.starts_with("hangar_reconcile_duration_seconds_sum")
                || l.starts_with("hangar_reconcile_duration_seconds_count")
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
// Processes and /proc.

/// CPU counters at one moment.
#[derive(Debug)]
struct CpuSnapshot {
    at: Instant,
    machine: common::MachineCpu,
    /// CPU seconds of the controller's processes and of this process.
    controller: f64,
    bench: f64,
}

impl CpuSnapshot {
    fn take(controller: &[u32]) -> anyhow::Result<Self> {
        let mut cpu = 0.0;
        for pid in controller {
            cpu += process_cpu_seconds(&pid.to_string())?;
        }
        Ok(Self {
            at: Instant::now(),
            machine: common::MachineCpu::read()?,
            controller: cpu,
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

/// Which controller a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Measured {
    Hangar,
    Arc,
}

/// What runs for [`Measured`].
enum Program {
    Hangar(PathBuf),
    Arc(hangar_testkit::arc::ArcBinaries),
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
        let child = common::hangar_run(hangar, kubeconfig, github)
            .args([
                "--webhook-addr",
                webhook.as_str(),
                "--metrics-addr",
                metrics.as_str(),
                "--health-probe-bind-address",
                "0",
            ])
            .env("GITHUB_WEBHOOK_SECRET_TOKEN", WEBHOOK_SECRET)
            .spawn()
            .with_context(|| format!("failed to start {}", hangar.display()))?;
        Ok(Self { child })
    }
}
