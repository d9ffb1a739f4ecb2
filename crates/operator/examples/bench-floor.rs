//! Benchmark: the floor under `bench-webhooks` — the Kubernetes API work one runner costs any
//! ARC-compatible controller, at the same rate, without Hangar. Run it with `cargo xtask
//! bench-floor`; results go to `bench/results/floor.json`.
//!
//! Same stack as `bench-webhooks` (a private control plane, kube-scheduler, nodesim on the same
//! number of nodes), but no webhook, no autoscaler chain, no GitHub and no controller process:
//! this process plays an ideal controller that already knows every job. At each job's instant
//! it creates the job's Runner (`POST`; the labels and spec a RunnerReplicaSet gives it for
//! `bench-webhooks`' template), its pod (ARC's runner pod for that Runner as Hangar builds it:
//! environment, volumes, a docker sidecar that runs until the pod is deleted; owned by the
//! Runner, with the runner-pod finalizer; nodesim runs a runner container that exits after
//! `--job-ms`) and the Runner's first status. When a pod watch sees the pod running, the
//! Runner's status says `Running`; when it sees the runner container exited, the pod is
//! deleted (the sidecar gets its grace period), its finalizer removed and the Runner deleted.
//! No runner registers anywhere and the statuses carry only the phase: this is a lower bound.
//! That is 7 writes per runner by the controller; kube-scheduler (binding, event) and the
//! kubelets (status) add theirs, as they do under Hangar.
//!
//! Reported: from each job's instant to its pod being first seen by the watch (the same end
//! point as `bench-webhooks`' "pod created"), the apiserver's writes per job, the machine's CPU
//! while jobs were created, and how long the stack took to clean up after the last job. If this
//! floor cannot keep up at a rate, no controller doing this work per runner can on this machine.

// The world set-up is shared with the other benchmarks; the controller helpers are not used.
#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::ensure;
use clap::Parser;
use common::{Latency, NAMESPACE, World, secs};
use futures::StreamExt;
use hangar_api::Runner;
use hangar_api::label;
use hangar_runtime::runner_pod::{self, PodDefaults};
use hangar_testkit::control_plane::{ControlPlane, StartOptions};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde::Serialize;
use serde_json::json;

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    load: common::Load,
    /// Where to write the results (relative paths are from the workspace root).
    #[arg(long, default_value = "bench/results/floor.json")]
    out: PathBuf,
}

/// The clock every latency here is read on.
const CLOCK: &str = "system real-time clock of this process";

/// How long the run may take to clean up after the last runner was created.
const DRAIN_LIMIT: Duration = Duration::from_secs(600);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    let args = Args::parse();
    args.load.check()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cluster = root.join("target/bench-floor/cluster");
    let mut options = StartOptions::new(&cluster, hangar_testkit::Binaries::configured());
    options.tie_to_pid = Some(std::process::id());
    let plane = ControlPlane::start(options).await?;
    let report = run_on(plane.kubeconfig(), &cluster, &args).await;
    ControlPlane::stop(&cluster)?;
    let report = report?;

    let out = common::write_results(&root, &args.out, &report)?;
    let l = &report.latency_seconds.job_to_pod_seen;
    println!(
        "floor: {} runners at {}/s for {} s ({} s each) on {} CPUs, machine {:.0}% busy while \
         creating (this process {:.2} CPUs); job → pod seen p50 {:.2} s / p95 {:.2} s / p99 {:.2} s / max {:.2} s; \
         {:.1} apiserver writes per runner; cleaned up {:.1} s after the last was created",
        report.runners,
        args.load.rate,
        args.load.seconds,
        args.load.job_ms as f64 / 1000.0,
        report.machine_cpus,
        report.machine_cpu_busy_while_creating * 100.0,
        report.bench_process_cpus_while_creating,
        l.p50.unwrap_or_default(),
        l.p95.unwrap_or_default(),
        l.p99.unwrap_or_default(),
        l.max.unwrap_or_default(),
        report.apiserver_writes_per_runner,
        report.drain_seconds,
    );
    println!("wrote {}", out.display());
    Ok(())
}

#[derive(Debug, Serialize)]
struct Report {
    benchmark: &'static str,
    note: String,
    rate_per_second: f64,
    seconds: u64,
    job_seconds: f64,
    nodes: usize,
    machine_cpus: usize,
    runners: usize,
    latency_seconds: Latencies,
    apiserver_writes_per_runner: f64,
    apiserver_writes_per_runner_by_request: Vec<(String, f64)>,
    machine_cpu_busy_while_creating: f64,
    /// CPUs this process used while creating: nodesim's kubelets and the ideal controller.
    bench_process_cpus_while_creating: f64,
    /// CPU seconds per runner each control-plane component used from the first creation to
    /// the end of the cleanup (`total`: their sum): the least a runner costs the apiserver and
    /// etcd, to set beside `bench-webhooks`' `control_plane_cpu_seconds_per_job`.
    control_plane_cpu_seconds_per_runner: std::collections::BTreeMap<String, f64>,
    drain_seconds: f64,
}

#[derive(Debug, Serialize)]
struct Latencies {
    /// From the job's instant to the pod create's answer.
    job_to_pod_created_answer: Latency,
    /// From the job's instant to the pod's first sighting by a watch.
    job_to_pod_seen: Latency,
}

/// What the run saw of each runner, by index.
#[derive(Debug, Default)]
struct Seen {
    /// When the pod was first seen by the watch.
    pod_seen: BTreeMap<usize, Timestamp>,
    /// Runners whose `Running` status was written.
    running: std::collections::BTreeSet<usize>,
    /// Runners whose finished pod is being cleaned up.
    cleaning: std::collections::BTreeSet<usize>,
    /// Pods gone.
    gone: usize,
}

fn index_of(name: &str) -> Option<usize> {
    name.strip_prefix("floor-")?.parse().ok()
}

async fn run_on(
    kubeconfig: &std::path::Path,
    cluster: &std::path::Path,
    args: &Args,
) -> anyhow::Result<Report> {
    let World { client, nodes, .. } = World::start(kubeconfig, args.load.nodes).await?;
    let placement = nodes.placement();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let controller = tokio::spawn(ideal_controller(client.clone(), seen.clone()));

    create_registration_secret(&client).await?;
    let requests_before = common::apiserver_requests(&client).await?;
    let control_plane_before = common::control_plane_cpu_seconds(cluster)?;
    let cpu_before = common::MachineCpu::read()?;
    let own_before = own_cpu_seconds()?;
    let count = (args.load.rate * args.load.seconds as f64).round() as usize;
    let t0 = Timestamp::now();
    let start = Instant::now();
    let mut creations = Vec::with_capacity(count);
    for i in 0..count {
        let at = start + Duration::from_secs_f64(i as f64 / args.load.rate);
        tokio::time::sleep_until(at.into()).await;
        let due = t0 + Duration::from_secs_f64(i as f64 / args.load.rate);
        creations.push(tokio::spawn(create_runner(
            client.clone(),
            i,
            args.load.job_ms,
            placement.node_selector.clone(),
            serde_json::to_value(&placement.tolerations)?,
            due,
        )));
    }
    let cpu_after = common::MachineCpu::read()?;
    let own_cpus = (own_cpu_seconds()? - own_before) / start.elapsed().as_secs_f64();
    let mut answered = Vec::with_capacity(count);
    for creation in creations {
        let (due, answered_at) = creation.await??;
        answered.push(secs(due, answered_at));
    }
    let drain_started = Instant::now();
    while seen.lock().expect("seen").gone < count {
        ensure!(
            drain_started.elapsed() < DRAIN_LIMIT,
            "runners not cleaned up within {DRAIN_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drain_seconds = drain_started.elapsed().as_secs_f64();
    let requests_after = common::apiserver_requests(&client).await?;
    let control_plane_after = common::control_plane_cpu_seconds(cluster)?;
    controller.abort();
    nodes.shutdown().await?;

    let pod_seen: Vec<f64> = {
        let seen = seen.lock().expect("seen");
        (0..count)
            .filter_map(|i| {
                let due = t0 + Duration::from_secs_f64(i as f64 / args.load.rate);
                seen.pod_seen.get(&i).map(|at| secs(due, *at))
            })
            .collect()
    };
    let mut by_request: Vec<(String, f64)> = requests_after
        .into_iter()
        .filter(|((verb, _), _)| !matches!(verb.as_str(), "GET" | "LIST" | "WATCH"))
        .filter_map(|(key, after)| {
            let delta = after - requests_before.get(&key).copied().unwrap_or(0);
            (delta > 0).then(|| (format!("{} {}", key.0, key.1), delta as f64 / count as f64))
        })
        .collect();
    by_request.sort_by(|a, b| b.1.total_cmp(&a.1));
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    Ok(Report {
        benchmark: "floor",
        note: format!(
            "{}: the API work per runner of an ideal ARC-compatible controller (Runner, pod, \
             2 status writes, cleanup), no Hangar, no GitHub",
            Timestamp::now().strftime("%Y-%m-%d")
        ),
        rate_per_second: args.load.rate,
        seconds: args.load.seconds,
        job_seconds: args.load.job_ms as f64 / 1000.0,
        nodes: args.load.nodes,
        machine_cpus: cpus,
        runners: count,
        latency_seconds: Latencies {
            job_to_pod_created_answer: Latency::of(
                "the job's instant",
                "the pod create answered",
                CLOCK,
                answered,
            ),
            job_to_pod_seen: Latency::of(
                "the job's instant",
                "the pod first seen by a watch",
                CLOCK,
                pod_seen,
            ),
        },
        apiserver_writes_per_runner: by_request.iter().map(|(_, n)| n).sum(),
        apiserver_writes_per_runner_by_request: by_request,
        machine_cpu_busy_while_creating: cpu_after.busy_share_since(&cpu_before),
        bench_process_cpus_while_creating: own_cpus,
        control_plane_cpu_seconds_per_runner: common::cpu_seconds_per(
            &control_plane_before,
            &control_plane_after,
            count,
        ),
        drain_seconds,
    })
}

/// The Secret holding the runners' registration token.
const REGISTRATION_SECRET: &str = "floor-registration";

/// Creates the Secret the runner pods read their registration token from.
async fn create_registration_secret(client: &Client) -> anyhow::Result<()> {
    // The registration Secret the pods read their token from (a scope's shared one, as
    // Hangar's and ARC's token-mode pods do); the kubelets resolve it at each container start.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": REGISTRATION_SECRET},
        "stringData": {runner_pod::TOKEN_KEY: "floor"},
    }))?;
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(())
}

/// Creates runner `i`: its Runner, its pod, the Runner's first status. Returns the job's
/// instant and when the pod create was answered.
async fn create_runner(
    client: Client,
    i: usize,
    job_ms: u64,
    node_selector: BTreeMap<String, String>,
    tolerations: serde_json::Value,
    due: Timestamp,
) -> anyhow::Result<(Timestamp, Timestamp)> {
    let name = format!("floor-{i}");
    let runners: Api<Runner> = Api::namespaced(client.clone(), NAMESPACE);
    // A Runner as a RunnerReplicaSet creates it for `bench-webhooks`' template: its labels and
    // the template's spec.
    let runner: Runner = serde_json::from_value(json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "Runner",
        "metadata": {
            "name": name,
            "labels": {
                label::RUNNER_DEPLOYMENT_NAME: "floor",
                label::RUNNER_TEMPLATE_HASH: "floor",
            },
        },
        "spec": {
            "repository": "octo/app",
            "labels": ["floor"],
            "nodeSelector": node_selector,
            "tolerations": tolerations,
        },
    }))?;
    let runner = runners.create(&PostParams::default(), &runner).await?;
    // ARC's runner pod for that Runner, as Hangar builds it (environment, volumes, the docker
    // sidecar that runs until the pod is deleted): what any ARC-compatible controller creates.
    let defaults = PodDefaults {
        registration_secret: REGISTRATION_SECRET.to_owned(),
        ..PodDefaults::default()
    };
    let mut pod = runner_pod::build(&name, NAMESPACE, runner.labels(), &runner.spec, &defaults);
    pod.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "actions.summerwind.dev/v1alpha1".to_owned(),
        kind: "Runner".to_owned(),
        name: name.clone(),
        uid: runner.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    pod.metadata.finalizers = Some(vec![hangar_api::finalizer::RUNNER_POD.to_owned()]);
    // No runner registers anywhere: nodesim runs a runner container that exits after the job.
    pod.metadata.annotations = Some(BTreeMap::from([
        (
            nodesim::annotations::program_key("runner"),
            format!("exit(0, {job_ms}ms)"),
        ),
        (
            nodesim::annotations::program_key("docker"),
            "sleep".to_owned(),
        ),
    ]));
    Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &pod)
        .await?;
    let answered = Timestamp::now();
    runner_status(&runners, &name, "Pending").await?;
    Ok((due, answered))
}

async fn runner_status(runners: &Api<Runner>, name: &str, phase: &str) -> kube::Result<()> {
    let status = json!({"status": {"phase": phase, "ready": phase == "Running"}});
    runners
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map(drop)
}

/// Watches the runner pods: records when each is first seen, marks its Runner `Running`, and
/// cleans a finished one up (pod without grace period, finalizer, Runner).
async fn ideal_controller(client: Client, seen: Arc<Mutex<Seen>>) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let runners: Api<Runner> = Api::namespaced(client.clone(), NAMESPACE);
    let mut events = watcher(pods.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        let now = Timestamp::now();
        let (pod, deleted) = match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => (pod, false),
            Ok(watcher::Event::Delete(pod)) => (pod, true),
            _ => continue,
        };
        let Some(i) = index_of(&pod.name_any()) else {
            continue;
        };
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let runner_exited = pod
            .status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .any(|c| {
                c.name == "runner" && c.state.as_ref().is_some_and(|s| s.terminated.is_some())
            });
        let terminal = matches!(phase.as_str(), "Succeeded" | "Failed");
        let mut state = seen.lock().expect("seen");
        state.pod_seen.entry(i).or_insert(now);
        if deleted {
            state.gone += 1;
            continue;
        }
        let name = pod.name_any();
        if phase == "Running" && state.running.insert(i) {
            let runners = runners.clone();
            tokio::spawn(async move {
                let _ = runner_status(&runners, &name, "Running").await;
            });
        } else if (runner_exited || terminal) && state.cleaning.insert(i) {
            let (pods, runners) = (pods.clone(), runners.clone());
            // The docker sidecar still runs: it gets its grace period, as under Hangar.
            let delete = if terminal {
                DeleteParams::background().grace_period(0)
            } else {
                DeleteParams::background()
            };
            tokio::spawn(async move {
                let _ = pods.delete(&name, &delete).await;
                let remove = json!([{"op": "remove", "path": "/metadata/finalizers"}]);
                let _ = pods
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::<()>::Json(serde_json::from_value(remove).expect("a JSON patch")),
                    )
                    .await;
                let _ = runners.delete(&name, &DeleteParams::background()).await;
            });
        }
    }
}

/// CPU seconds (user + system) this process has used, from `/proc/self/stat`.
fn own_cpu_seconds() -> anyhow::Result<f64> {
    let (_, cpu) = common::peak_rss_and_cpu(std::process::id())?;
    Ok(cpu)
}
