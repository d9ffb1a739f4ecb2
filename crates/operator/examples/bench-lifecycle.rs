//! Benchmark: a RunnerDeployment (or, with `--kind set`, a RunnerSet) scaled 0 → N → 0 on the
//! local stack, in token and JIT registration modes. Run it with `cargo xtask bench-lifecycle` (which builds the release
//! `hangar` binary first); results go to `bench/results/lifecycle.json`.
//!
//! Every run gets a private control plane (so the apiserver's request counters are Hangar's
//! alone), an in-process ghsim and nodesim, and a fresh `hangar run` child process whose peak
//! RSS and CPU time are read from `/proc` when it is stopped. Two scenarios per mode:
//!
//! - `jobs`: scale to N, wait until all N runners are registered and online, queue N jobs, let
//!   every ephemeral runner take one and finish, scale to 0. This is the lifecycle an
//!   autoscaled ephemeral runner lives: created for demand, runs one job, goes away.
//! - `idle`: scale to N, wait until all are registered and online, scale to 0 with no job run.
//!   Each idle runner must be deleted on GitHub before its pod goes (one DELETE per runner).
//! - `growth`: as `idle`, but from N/4 registered runners that are all newer than the
//!   deployment's `effectiveTime` (as after a webhook scale-up), timed from the scale to N.
//!   ARC creates nothing for ten minutes there; the time to N should match `idle`'s from 0.
//!
//! With `--hold-seconds S`, the pool stays at N registered idle runners for S seconds before the
//! scale to 0, and the run reports what keeping it costs, per minute of the hold: apiserver
//! requests by verb and resource (every component's), the controller's GitHub calls and their
//! rate-limit cost, and its CPU; and its peak RSS at the end of the hold. The same costs are
//! also reported minute by minute: the first minutes hold the scale-up's tail, the later ones
//! what keeping the pool costs. That is the scale
//! benchmark: `--runners 1000 --nodes 10 --scenarios idle --hold-seconds 600`.
//!
//! Reported per run: seconds to all registered (in ghsim, online) and to all gone, the
//! controller's GitHub API calls (ghsim's accounting, by endpoint) per runner, the
//! apiserver's LIST requests by resource during the scenario, and the controller's peak RSS
//! and CPU seconds.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use clap::Parser;
use common::{Controller, NAMESPACE, Running, World};
use futures::StreamExt;
use ghsim::world::{JobStatus, SubmitJobs};
use hangar_api::{Runner, RunnerDeployment, RunnerSet};
use hangar_testkit::control_plane::{ControlPlane, StartOptions};
use hangar_testkit::eventually;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{PartialObjectMeta, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use serde::Serialize;
use serde_json::json;

#[derive(Debug, Parser)]
struct Args {
    /// Runners per scale-up.
    #[arg(long, default_value_t = 200)]
    runners: usize,
    /// Simulated nodes (110 pods each at most).
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// The `hangar` binary to run (default: next to this example's directory).
    #[arg(long)]
    hangar: Option<PathBuf>,
    /// Job duration in the `jobs` scenario.
    #[arg(long, default_value_t = 2000)]
    job_ms: u64,
    /// Where to write the results (relative paths are from the workspace root).
    #[arg(long, default_value = "bench/results/lifecycle.json")]
    out: PathBuf,
    /// Registration modes to run, comma-separated; `arc` runs ARC v0.27.6's manager instead
    /// of Hangar (registration tokens, ARC's CRDs), for `cargo xtask bench-vs-arc`.
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["token", "jit"])]
    modes: Vec<Mode>,
    /// Scenarios to run in each mode, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["jobs", "idle", "growth"])]
    scenarios: Vec<Scenario>,
    /// What is scaled: a RunnerDeployment, or a RunnerSet (`idle` only; one StatefulSet per
    /// runner, as ARC's RunnerSets have since 0.22).
    #[arg(long, value_enum, default_value_t = Kind::Deployment)]
    kind: Kind,
    /// Seconds the N registered runners are kept before the scale to 0 (`idle` and `growth`),
    /// measuring what keeping the pool costs.
    #[arg(long, default_value_t = 0)]
    hold_seconds: u64,
    /// ghsim's primary rate-limit budget an hour for the controller's credential: 5,000 is a
    /// personal access token's, 15,000 a GitHub App installation's on GitHub Enterprise Cloud.
    /// Every idle runner scaled away costs one charged DELETE, so a pool of more than about
    /// 4,500 cannot be emptied within an hour on a token's budget.
    #[arg(long, default_value_t = 5000)]
    github_budget: u64,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Deployment,
    Set,
}

/// How long one step (all registered, all gone) may take before the run fails: generous,
/// because 5,000 runners take many minutes each way on a 2-CPU machine.
const LIMIT: Duration = Duration::from_secs(1800);

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Token,
    Jit,
    Arc,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
enum Scenario {
    Jobs,
    Idle,
    Growth,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    benchmark: &'static str,
    kind: Kind,
    runners: usize,
    nodes: usize,
    machine_cpus: usize,
    job_seconds: f64,
    /// ghsim's primary budget an hour for the controller's credential.
    github_budget_per_hour: u64,
    runs: &'a [RunReport],
}

#[derive(Debug, Serialize)]
struct RunReport {
    mode: Mode,
    scenario: Scenario,
    /// From applying `replicas: N` until all N runners were registered and online in ghsim
    /// (`growth`: from N/4 registered).
    all_registered_seconds: f64,
    /// `jobs` only: from queueing N jobs until all had completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    all_jobs_completed_seconds: Option<f64>,
    /// From applying `replicas: 0` until no Runner, no pod and no ghsim registration was left.
    all_gone_seconds: f64,
    /// The controller's GitHub REST calls over the whole run.
    github_calls: u64,
    github_calls_per_runner: f64,
    /// Rate-limit cost (calls charged to the primary budget; 304s are free).
    github_rate_limit_cost: u64,
    github_calls_by_endpoint: BTreeMap<String, u64>,
    /// ghsim's job accounting: jobs interrupted by a runner going away (must be 0).
    interrupted_jobs: u64,
    /// apiserver LIST requests during the run, by resource (initial cache fills included).
    apiserver_lists: BTreeMap<String, u64>,
    controller_peak_rss_mib: f64,
    controller_cpu_seconds: f64,
    /// What bringing the pool from 0 (`growth`: N/4) to N registered cost: where a scale-up's
    /// time goes on this machine.
    scale_up: StepCost,
    /// What bringing the pool back to 0 cost.
    scale_down: StepCost,
    /// With `--hold-seconds`: what keeping the N idle runners cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    hold: Option<Hold>,
}

/// One step of a run (the scale-up, the scale-down), from its start to its end.
#[derive(Debug, Serialize)]
struct StepCost {
    /// The machine's busy share of all CPUs: near 1, the stack (apiserver, etcd, the
    /// simulators, the controller) is saturated and the step's time is bought with CPU.
    machine_cpu_busy: f64,
    /// The controller's CPU-seconds.
    controller_cpu_seconds: f64,
    /// The controller's peak RSS from its start to the end of the step.
    controller_peak_rss_mib_so_far: f64,
    /// Every component's apiserver requests (the apiserver's `apiserver_request_total`),
    /// per runner created or removed, by verb and resource, most first.
    apiserver_requests_per_runner_by_request: Vec<(String, f64)>,
}

/// Counters read at a step's start, to measure [`StepCost`] at its end.
struct StepStart {
    requests: BTreeMap<(String, String), u64>,
    machine: common::MachineCpu,
    controller_cpu: f64,
}

impl StepStart {
    async fn now(client: &Client, controller: &[u32]) -> anyhow::Result<Self> {
        Ok(Self {
            requests: common::apiserver_requests(client).await?,
            machine: common::MachineCpu::read()?,
            controller_cpu: controller_usage(controller)?.1,
        })
    }

    /// The cost of the step so far, for `runners` runners created or removed.
    async fn cost(
        &self,
        client: &Client,
        controller: &[u32],
        runners: usize,
    ) -> anyhow::Result<StepCost> {
        let (rss, cpu) = controller_usage(controller)?;
        Ok(StepCost {
            machine_cpu_busy: common::round_us(
                common::MachineCpu::read()?.busy_share_since(&self.machine),
            ),
            controller_cpu_seconds: common::round_us(cpu - self.controller_cpu),
            controller_peak_rss_mib_so_far: common::round_us(rss),
            apiserver_requests_per_runner_by_request: per_request(
                &self.requests,
                &common::apiserver_requests(client).await?,
                runners as f64,
            ),
        })
    }
}

/// The controller's peak RSS (MiB, summed over its processes) and CPU-seconds so far.
fn controller_usage(controller: &[u32]) -> anyhow::Result<(f64, f64)> {
    controller.iter().try_fold((0.0, 0.0), |(rss, cpu), &pid| {
        let (r, c) = common::peak_rss_and_cpu(pid)?;
        Ok((rss + r, cpu + c))
    })
}

/// The cost of keeping N registered idle runners, measured over the hold.
#[derive(Debug, Serialize)]
struct Hold {
    seconds: f64,
    /// The controller's GitHub REST calls per minute (ghsim's accounting).
    github_calls_per_minute: f64,
    /// Of those, charged to the primary rate-limit budget per minute (304s are free).
    github_charged_calls_per_minute: f64,
    github_calls_by_endpoint: BTreeMap<String, u64>,
    /// Every component's apiserver requests per minute (the controller's, the kubelets' node
    /// and lease renewals, kube-controller-manager's).
    apiserver_requests_per_minute: f64,
    apiserver_requests_per_minute_by_request: Vec<(String, f64)>,
    /// CPU seconds the controller used per minute of the hold.
    controller_cpu_seconds_per_minute: f64,
    /// The controller's peak RSS at the end of the hold.
    controller_peak_rss_mib: f64,
    /// The same costs minute by minute. The scale-up's tail falls into the first minutes
    /// (kube-controller-manager's garbage collector checking owners, the last runners' IDs and
    /// statuses recorded); the later minutes are what keeping the pool costs.
    by_minute: Vec<HoldMinute>,
}

/// One minute of the hold (the last may be shorter).
#[derive(Debug, Serialize)]
struct HoldMinute {
    /// Seconds into the hold at which this minute ended.
    until_seconds: f64,
    /// The controller's GitHub REST calls, and of those the ones charged to the budget.
    github_calls: u64,
    github_charged_calls: u64,
    /// Every component's apiserver requests (the kubelets' renewals included).
    apiserver_requests: u64,
    /// Of those, the ones that are not node heartbeats ([`is_node_heartbeat`]).
    apiserver_requests_besides_heartbeats: u64,
    controller_cpu_seconds: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    let args = Args::parse();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let hangar = common::hangar_binary(args.hangar.as_deref(), "bench-lifecycle")?;

    anyhow::ensure!(
        args.kind == Kind::Deployment
            || args.scenarios.iter().all(|s| *s == Scenario::Idle)
                && !args.modes.contains(&Mode::Arc),
        "--kind set runs the idle scenario with Hangar only (--scenarios idle --modes token,jit)"
    );
    let mut runs = Vec::new();
    for &mode in &args.modes {
        for &scenario in &args.scenarios {
            let run = bench(&root, &hangar, &args, mode, scenario)
                .await
                .with_context(|| format!("{mode:?}/{scenario:?}"))?;
            println!(
                "{mode:?}/{scenario:?}: {} runners registered in {:.1} s, gone in {:.1} s; \
                 {:.2} GitHub calls per runner; peak RSS {:.0} MiB, {:.1} CPU s",
                args.runners,
                run.all_registered_seconds,
                run.all_gone_seconds,
                run.github_calls_per_runner,
                run.controller_peak_rss_mib,
                run.controller_cpu_seconds
            );
            for (step, cost) in [("scale-up", &run.scale_up), ("scale-down", &run.scale_down)] {
                let top: Vec<String> = cost
                    .apiserver_requests_per_runner_by_request
                    .iter()
                    .take(6)
                    .map(|(request, n)| format!("{request} {n:.2}"))
                    .collect();
                println!(
                    "  {step}: machine {:.0}% busy, controller {:.1} CPU s, peak RSS so far \
                     {:.0} MiB; apiserver requests per runner: {}",
                    cost.machine_cpu_busy * 100.0,
                    cost.controller_cpu_seconds,
                    cost.controller_peak_rss_mib_so_far,
                    top.join(", ")
                );
            }
            if let Some(h) = &run.hold {
                if let Some(last) = h.by_minute.last() {
                    println!(
                        "  last minute of the hold: {} GitHub calls ({} charged), {} apiserver \
                         requests ({} besides node heartbeats), controller {:.2} CPU s",
                        last.github_calls,
                        last.github_charged_calls,
                        last.apiserver_requests,
                        last.apiserver_requests_besides_heartbeats,
                        last.controller_cpu_seconds
                    );
                }
                println!(
                    "  held {:.0} s: {:.1} GitHub calls/min ({:.1} charged), {:.0} apiserver \
                     requests/min, controller {:.2} CPU s/min, peak RSS {:.0} MiB",
                    h.seconds,
                    h.github_calls_per_minute,
                    h.github_charged_calls_per_minute,
                    h.apiserver_requests_per_minute,
                    h.controller_cpu_seconds_per_minute,
                    h.controller_peak_rss_mib
                );
            }
            runs.push(run);
            // Written after every run, so a run that fails later keeps what was measured.
            let out = write_report(&root, &args, &runs)?;
            println!("wrote {}", out.display());
        }
    }
    Ok(())
}

fn write_report(root: &Path, args: &Args, runs: &[RunReport]) -> anyhow::Result<PathBuf> {
    let report = Report {
        benchmark: "lifecycle",
        kind: args.kind,
        runners: args.runners,
        nodes: args.nodes,
        machine_cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        job_seconds: args.job_ms as f64 / 1000.0,
        github_budget_per_hour: args.github_budget,
        runs,
    };
    common::write_results(root, &args.out, &report)
}

async fn bench(
    root: &Path,
    hangar: &Path,
    args: &Args,
    mode: Mode,
    scenario: Scenario,
) -> anyhow::Result<RunReport> {
    let dir = root
        .join("target/bench-lifecycle")
        .join(format!("{mode:?}-{scenario:?}").to_lowercase());
    let mut options = StartOptions::new(&dir, hangar_testkit::Binaries::configured());
    options.tie_to_pid = Some(std::process::id());
    let plane = ControlPlane::start(options).await?;
    let result = run_on(plane.kubeconfig(), hangar, args, mode, scenario).await;
    ControlPlane::stop(&dir)?;
    result
}

async fn run_on(
    kubeconfig: &Path,
    hangar: &Path,
    args: &Args,
    mode: Mode,
    scenario: Scenario,
) -> anyhow::Result<RunReport> {
    let crds = match mode {
        Mode::Arc => hangar_testkit::arc::crds()?,
        Mode::Token | Mode::Jit => hangar_api::crds(),
    };
    let World {
        client,
        github,
        nodes,
        ..
    } = World::start_with_crds(kubeconfig, args.nodes, &crds).await?;
    github.sim.set_faults(ghsim::faults::Faults {
        primary_budget: args.github_budget,
        ..github.sim.faults()
    });

    let lists_before = apiserver_lists(&client).await?;
    let mut controller = match mode {
        Mode::Arc => Running::Arc(common::spawn_arc(
            &hangar_testkit::arc::ArcBinaries::ensure()?,
            kubeconfig,
            github.url.as_str(),
            std::net::SocketAddr::from((
                [127, 0, 0, 1],
                hangar_testkit::control_plane::free_port()?,
            )),
            "unused: no webhooks in this benchmark",
            &kubeconfig
                .parent()
                .context("no cluster directory")?
                .join("arc"),
        )?),
        Mode::Token | Mode::Jit => Running::Hangar(Controller::spawn(
            hangar,
            kubeconfig,
            github.url.as_str(),
            mode,
        )?),
    };
    let outcome =
        scenario_steps(&client, &github, &nodes, args, scenario, &controller.pids()).await;
    let (peak_rss_mib, cpu_seconds) = controller.stop()?;
    let lists_after = apiserver_lists(&client).await?;
    nodes.shutdown().await?;
    let steps = outcome?;

    let accounting = ghsim::accounting::snapshot(&github.sim);
    let mut by_endpoint = BTreeMap::new();
    let (mut calls, mut cost) = (0, 0);
    for row in accounting
        .api_calls
        .iter()
        .filter(|r| r.credential == "pat:controller")
    {
        *by_endpoint.entry(row.endpoint.clone()).or_default() += row.calls;
        calls += row.calls;
        cost += row.charged;
    }
    let apiserver_lists = lists_after
        .into_iter()
        .map(|(resource, n)| {
            let before = lists_before.get(&resource).copied().unwrap_or(0);
            (resource, n - before)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    Ok(RunReport {
        mode,
        scenario,
        all_registered_seconds: steps.registered.as_secs_f64(),
        all_jobs_completed_seconds: steps.jobs_completed.map(|d| d.as_secs_f64()),
        all_gone_seconds: steps.gone.as_secs_f64(),
        github_calls: calls,
        github_calls_per_runner: calls as f64 / args.runners as f64,
        github_rate_limit_cost: cost,
        github_calls_by_endpoint: by_endpoint,
        interrupted_jobs: accounting.jobs_summary.interrupted,
        apiserver_lists,
        controller_peak_rss_mib: peak_rss_mib,
        controller_cpu_seconds: cpu_seconds,
        scale_up: steps.scale_up,
        scale_down: steps.scale_down,
        hold: steps.hold,
    })
}

struct Steps {
    registered: Duration,
    scale_up: StepCost,
    scale_down: StepCost,
    jobs_completed: Option<Duration>,
    hold: Option<Hold>,
    gone: Duration,
}

async fn scenario_steps(
    client: &Client,
    github: &ghsim::Running,
    nodes: &nodesim::NodeSimHandle,
    args: &Args,
    scenario: Scenario,
    controller: &[u32],
) -> anyhow::Result<Steps> {
    let n = args.runners;
    let deployments: Api<RunnerDeployment> = Api::namespaced(client.clone(), NAMESPACE);
    let sets: Api<RunnerSet> = Api::namespaced(client.clone(), NAMESPACE);
    let kind = args.kind;
    let placement = nodes.placement();
    // `effectiveTime` = now: every runner is synced after it, so a runner that finished its job
    // is not recreated (the HRA sets it this way for ephemeral targets).
    // Whole seconds, rounded down: rounded up, it could lie after the runners' sync time.
    let effective_time = jiff::Timestamp::from_second(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_secs() as i64,
    )?
    .to_string();
    let apply = |replicas: usize| {
        let (deployments, sets) = (deployments.clone(), sets.clone());
        let params = PatchParams::apply("bench-lifecycle").force();
        let manifest = match kind {
            Kind::Deployment => json!({
                "apiVersion": "actions.summerwind.dev/v1alpha1",
                "kind": "RunnerDeployment",
                "metadata": {"name": "bench"},
                "spec": {
                    "replicas": replicas,
                    "effectiveTime": effective_time,
                    "template": {"spec": {
                        "repository": "octo/app",
                        "labels": ["bench"],
                        "nodeSelector": placement.node_selector,
                        "tolerations": placement.tolerations,
                    }},
                },
            }),
            Kind::Set => json!({
                "apiVersion": "actions.summerwind.dev/v1alpha1",
                "kind": "RunnerSet",
                "metadata": {"name": "bench"},
                "spec": {
                    "replicas": replicas,
                    "repository": "octo/app",
                    "labels": ["bench"],
                    "template": {"spec": {
                        "containers": [{"name": "runner"}],
                        "nodeSelector": placement.node_selector,
                        "tolerations": placement.tolerations,
                    }},
                },
            }),
        };
        async move {
            match kind {
                Kind::Deployment => deployments
                    .patch("bench", &params, &Patch::Apply(&manifest))
                    .await
                    .map(drop),
                Kind::Set => sets
                    .patch("bench", &params, &Patch::Apply(&manifest))
                    .await
                    .map(drop),
            }
        }
    };

    let registered_online = |want: usize| {
        github.sim.read(|w, _| {
            let online = w.runners.values().filter(|r| r.online()).count();
            w.runners.len() == want && online == want
        })
    };
    if scenario == Scenario::Growth {
        let base = n / 4;
        apply(base).await?;
        until(&format!("{base} runners registered and online"), || {
            registered_online(base)
        })
        .await?;
    }

    let scale_up_start = StepStart::now(client, controller).await?;
    let started = Instant::now();
    let mut last_report = started;
    apply(n).await?;
    until("all runners registered and online", || {
        let (registered, online) = github.sim.read(|w, _| {
            (
                w.runners.len(),
                w.runners.values().filter(|r| r.online()).count(),
            )
        });
        if registered == n && online == n {
            return true;
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            eprintln!("waiting: {registered} of {n} runners registered, {online} online");
            last_report = Instant::now();
        }
        false
    })
    .await?;
    let registered = started.elapsed();
    let created = if scenario == Scenario::Growth {
        n - n / 4
    } else {
        n
    };
    let scale_up = scale_up_start.cost(client, controller, created).await?;

    let hold = if args.hold_seconds > 0 && scenario != Scenario::Jobs {
        Some(
            hold_pool(
                client,
                github,
                controller,
                Duration::from_secs(args.hold_seconds),
            )
            .await?,
        )
    } else {
        None
    };

    let jobs_completed = if scenario == Scenario::Jobs {
        let queued = Instant::now();
        github.sim.update(|w, now| {
            let request = SubmitJobs {
                repository: "octo/app".into(),
                count: n as u32,
                labels: vec!["self-hosted".into(), "bench".into()],
                duration_ms: args.job_ms,
                conclusion: Some("success".into()),
                workflow: None,
                job_name: None,
            };
            w.submit_jobs(&request, now).map(drop)
        })?;
        until("all jobs completed", || {
            github.sim.read(|w, _| {
                w.jobs
                    .values()
                    .filter(|j| j.status == JobStatus::Completed)
                    .count()
                    == n
            })
        })
        .await?;
        Some(queued.elapsed())
    } else {
        None
    };

    // Watched, not polled with LISTs: the apiserver's LIST count is meant to show the
    // controller's, and this loop would otherwise add five per second.
    let left_runners = metadata_store::<Runner>(client).await?;
    let left_pods = metadata_store::<Pod>(client).await?;
    let scale_down_start = StepStart::now(client, controller).await?;
    let scaling_down = Instant::now();
    apply(0).await?;
    let deadline = Instant::now() + LIMIT;
    loop {
        let left_registered = github.sim.read(|w, _| w.runners.len());
        let (runners_left, pods_left) = (left_runners.state().len(), left_pods.state().len());
        if runners_left == 0 && pods_left == 0 && left_registered == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "not gone within {LIMIT:?}: {runners_left} runners, {pods_left} pods, \
                 {left_registered} registered"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gone = scaling_down.elapsed();
    let scale_down = scale_down_start.cost(client, controller, n).await?;
    Ok(Steps {
        registered,
        scale_up,
        jobs_completed,
        hold,
        gone,
        scale_down,
    })
}

/// The apiserver requests made between two readings of its counters, divided by `per`, as
/// ("VERB resource", count) most first.
fn per_request(
    before: &BTreeMap<(String, String), u64>,
    after: &BTreeMap<(String, String), u64>,
    per: f64,
) -> Vec<(String, f64)> {
    let mut by_request: Vec<(String, f64)> = after
        .iter()
        .filter_map(|(key, after)| {
            let delta = after - before.get(key).copied().unwrap_or(0);
            (delta > 0).then(|| {
                (
                    format!("{} {}", key.0, key.1),
                    common::round_us(delta as f64 / per),
                )
            })
        })
        .collect();
    by_request.sort_by(|a, b| b.1.total_cmp(&a.1));
    by_request
}

/// Keeps the pool as it is for `hold` and measures what that costs (see [`Hold`]).
async fn hold_pool(
    client: &Client,
    github: &ghsim::Running,
    controller: &[u32],
    hold: Duration,
) -> anyhow::Result<Hold> {
    let github_calls = |sim: &ghsim::Sim| {
        let mut by_endpoint = BTreeMap::new();
        let (mut calls, mut charged) = (0, 0);
        for row in ghsim::accounting::snapshot(sim)
            .api_calls
            .into_iter()
            .filter(|r| r.credential == "pat:controller")
        {
            *by_endpoint.entry(row.endpoint).or_insert(0u64) += row.calls;
            calls += row.calls;
            charged += row.charged;
        }
        (calls, charged, by_endpoint)
    };
    let cpu = || controller_usage(controller).map(|(_, cpu)| cpu);
    let requests_before = common::apiserver_requests(client).await?;
    let (calls_before, charged_before, endpoints_before) = github_calls(&github.sim);
    let cpu_before = cpu()?;
    let started = Instant::now();
    eprintln!("holding the pool for {hold:?}");
    let mut by_minute = Vec::new();
    let mut then = (
        requests_before.clone(),
        calls_before,
        charged_before,
        cpu_before,
    );
    while started.elapsed() < hold {
        tokio::time::sleep(
            hold.saturating_sub(started.elapsed())
                .min(Duration::from_secs(60)),
        )
        .await;
        let (calls, charged, _) = github_calls(&github.sim);
        let now = (
            common::apiserver_requests(client).await?,
            calls,
            charged,
            cpu()?,
        );
        let requests = |besides_heartbeats: bool| {
            now.0
                .iter()
                .filter(|(key, _)| !besides_heartbeats || !is_node_heartbeat(key))
                .map(|(key, n)| n - then.0.get(key).copied().unwrap_or(0))
                .sum()
        };
        by_minute.push(HoldMinute {
            until_seconds: started.elapsed().as_secs_f64(),
            github_calls: now.1 - then.1,
            github_charged_calls: now.2 - then.2,
            apiserver_requests: requests(false),
            apiserver_requests_besides_heartbeats: requests(true),
            controller_cpu_seconds: now.3 - then.3,
        });
        then = now;
    }
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let cpu_after = cpu()?;
    let (calls_after, charged_after, endpoints_after) = github_calls(&github.sim);
    let requests_after = common::apiserver_requests(client).await?;

    let by_request = per_request(&requests_before, &requests_after, minutes);
    let peak_rss = controller_usage(controller)?.0;
    Ok(Hold {
        seconds: minutes * 60.0,
        github_calls_per_minute: (calls_after - calls_before) as f64 / minutes,
        github_charged_calls_per_minute: (charged_after - charged_before) as f64 / minutes,
        github_calls_by_endpoint: endpoints_after
            .into_iter()
            .map(|(endpoint, n)| {
                let before = endpoints_before.get(&endpoint).copied().unwrap_or(0);
                (endpoint, n - before)
            })
            .filter(|(_, n)| *n > 0)
            .collect(),
        apiserver_requests_per_minute: by_request.iter().map(|(_, n)| n).sum(),
        apiserver_requests_per_minute_by_request: by_request,
        controller_cpu_seconds_per_minute: (cpu_after - cpu_before) / minutes,
        controller_peak_rss_mib: peak_rss,
        by_minute,
    })
}

/// Whether a (verb, resource) of the apiserver's counts is a simulated kubelet keeping its
/// node alive (status applies, Lease merge patches), which any cluster pays whatever runs on
/// it. The control plane's own leader Leases are renewed with PUT and are not counted here.
fn is_node_heartbeat((verb, resource): &(String, String)) -> bool {
    matches!(
        (verb.as_str(), resource.as_str()),
        ("APPLY" | "PATCH", "nodes/status") | ("PATCH", "leases")
    )
}

/// A watch-fed cache of the metadata of every `K` in the benchmark namespace, once filled.
async fn metadata_store<K>(
    client: &Client,
) -> anyhow::Result<reflector::Store<PartialObjectMeta<K>>>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let api = Api::<PartialObjectMeta<K>>::namespaced(client.clone(), NAMESPACE);
    let stream = reflector::reflector(writer, watcher(api, Default::default())).default_backoff();
    tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await?;
    Ok(reader)
}

/// Polls `done` every 100 ms until it holds, for at most [`LIMIT`].
async fn until(what: &str, done: impl FnMut() -> bool) -> anyhow::Result<()> {
    eventually::until(what, LIMIT, Duration::from_millis(100), done).await?;
    Ok(())
}

/// `apiserver_request_total{verb="LIST"}` summed by resource.
async fn apiserver_lists(client: &Client) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut lists = BTreeMap::new();
    for ((verb, resource), count) in common::apiserver_requests(client).await? {
        if verb == "LIST" {
            let resource = resource.split('/').next().unwrap_or_default().to_owned();
            *lists.entry(resource).or_default() += count;
        }
    }
    Ok(lists)
}

impl Controller {
    fn spawn(hangar: &Path, kubeconfig: &Path, github: &str, mode: Mode) -> anyhow::Result<Self> {
        let mut cmd = common::hangar_run(hangar, kubeconfig, github);
        cmd.args(["--metrics-addr", "0", "--health-probe-bind-address", "0"]);
        if mode == Mode::Jit {
            cmd.arg("--jit");
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("failed to start {}", hangar.display()))?;
        Ok(Self { child })
    }
}
