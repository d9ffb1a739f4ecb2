//! Chaos run: the real local stack under a seeded schedule of faults, with Hangar's invariants
//! checked after a drain. Run it with `cargo xtask chaos -- --seed 7 --faults 50`; results go
//! to `bench/results/chaos-<seed>.json` (or `--out`), logs to `target/chaos/<seed>/`.
//!
//! What runs: a private control plane (kube-apiserver, etcd, controller-manager, scheduler),
//! ghsim and nodesim (`--nodes`) in this process, two `hangar run` replicas with
//! `--enable-leader-election` and `--webhook-addr`, and a round-robin TCP proxy in this process
//! that ghsim's `workflow_job` hook points at (two webhook replicas behind one address). Owners:
//! `eph` (ephemeral RunnerDeployment from zero, HRA with a webhook trigger), `pull` (ephemeral
//! RunnerDeployment, HRA with the `PercentageRunnersBusy` pull metric), `persist` (persistent
//! RunnerDeployment, 2 replicas) and `set` (RunnerSet, 1 replica). Jobs for the four labels
//! are queued at `--rate` per second while faults fire.
//!
//! What breaks: [`schedule::schedule`] turns (seed, `--faults`, window, `--kinds`) into a
//! list of faults at offsets; the same seed replays the same list. Which pod or replica a fault
//! hits is resolved when it fires (from its `pick`, or from the Lease holder) and recorded.
//!
//! What is checked, after the window ends (faults stop, every replica runs again) and the
//! queued jobs drain (`--drain-limit`): jobs interrupted other than on a pod an injected runner
//! crash or pod deletion ended (0), jobs not completed (stranded, 0), then, after every owner is deleted
//! (`--cleanup-limit`): GitHub registrations, runner pods, Runners and Secrets left (0 each; the
//! per-scope registration Secret RunnerSet pods share is kept by design),
//! panics in the replicas' logs (0), credentials in them (0), and the controller's GitHub
//! rate-limit cost per hour within GitHub's PAT budget (5,000). A violation names the seed and,
//! where one fault can be blamed, its index. Exit status is non-zero on any violation.

mod common;
#[path = "chaos/schedule.rs"]
mod schedule;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use clap::Parser;
use common::{CONTROLLER_PAT, NAMESPACE, RUNNER_PAT, World};
use ghsim::webhooks::{ContentType, NewHook};
use ghsim::world::{JobStatus, SubmitJobs};
use hangar_api::{HorizontalRunnerAutoscaler, Runner, RunnerDeployment, RunnerSet};
use hangar_testkit::control_plane::{ControlPlane, StartOptions, free_port};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use schedule::{Fault, Kind, Scheduled};
use serde::Serialize;
use serde_json::json;
use tokio::task::JoinSet;

#[derive(Debug, Parser)]
struct Args {
    /// Seed of the fault schedule (default: drawn at random and printed first).
    #[arg(long)]
    seed: Option<u64>,
    /// How many faults.
    #[arg(long, default_value_t = 20)]
    faults: usize,
    /// Length of the fault window in seconds (default: 6 s per fault, at least 60 s).
    #[arg(long)]
    duration: Option<u64>,
    /// Fault kinds to draw from, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Print the schedule and stop.
    #[arg(long)]
    dry_run: bool,
    /// Jobs queued per second during the fault window.
    #[arg(long, default_value_t = 1.0)]
    rate: f64,
    /// How long each job runs, milliseconds.
    #[arg(long, default_value_t = 3000)]
    job_ms: u64,
    /// Simulated nodes.
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Seconds the queued jobs have to complete once faults stop.
    #[arg(long, default_value_t = 300)]
    drain_limit: u64,
    /// Seconds pods, Runners, Secrets and registrations have to go once the owners are deleted.
    #[arg(long, default_value_t = 180)]
    cleanup_limit: u64,
    /// The `hangar` binary to run (default: next to this example's directory).
    #[arg(long)]
    hangar: Option<PathBuf>,
    /// Where to write the results (default `bench/results/chaos-<seed>.json`; relative paths
    /// are from the workspace root).
    #[arg(long)]
    out: Option<PathBuf>,
}

const WEBHOOK_SECRET: &str = "hangar-chaos-webhook-secret";
const SETUP_LIMIT: Duration = Duration::from_secs(180);
/// The leader-election Lease (hangar's default name) lives in [`NAMESPACE`] (`POD_NAMESPACE`).
const LEASE: &str = "hangar-controller";
/// The replicas' `POD_NAME`s: their Lease identities start with these, which is how the leader
/// is told apart.
const REPLICAS: [&str; 2] = ["replica-a", "replica-b"];
/// Names of the per-scope registration Secrets (`hangar-registration-<kind>-<hash>`).
const SCOPE_SECRET_PREFIX: &str = "hangar-registration-";
/// GitHub's primary budget for a PAT: the controller must stay within it per hour of run.
const API_BUDGET_PER_HOUR: f64 = 5000.0;

/// The owners, by runner label (= object name).
const EPH: &str = "eph";
const PULL: &str = "pull";
const PERSIST: &str = "persist";
const SET: &str = "set";
const LABELS: [&str; 4] = [EPH, PULL, PERSIST, SET];
/// Owners whose template a `TemplateChange` may roll out, and the autoscalers.
const TEMPLATED: [&str; 4] = [EPH, PULL, PERSIST, SET];
const HRAS: [&str; 2] = [EPH, PULL];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    // First line, so a run cut short can still be replayed.
    println!("chaos: seed {seed}");
    let kinds: Vec<Kind> = if args.kinds.is_empty() {
        Kind::ALL.to_vec()
    } else {
        args.kinds
            .iter()
            .map(|k| Kind::parse(k.trim()).map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<_>>()?
    };
    ensure!(args.rate > 0.0, "--rate must be positive");
    let window = Duration::from_secs(
        args.duration
            .unwrap_or_else(|| (6 * args.faults as u64).max(60)),
    );
    let plan = schedule::schedule(seed, args.faults, window, &kinds);
    println!(
        "chaos: {} faults over {window:?}; replay with `cargo xtask chaos -- --seed {seed} \
         --faults {} --duration {}`",
        plan.len(),
        args.faults,
        window.as_secs()
    );
    for s in &plan {
        println!(
            "  #{:<3} {:>8.1}s {:?}",
            s.index,
            s.at_ms as f64 / 1000.0,
            s.fault
        );
    }
    if args.dry_run {
        return Ok(());
    }

    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let hangar = common::hangar_binary(args.hangar.as_deref(), "chaos")?;
    let dir = root.join(format!("target/chaos/{seed}"));
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let cluster = dir.join("cluster");
    let mut options = StartOptions::new(&cluster, hangar_testkit::Binaries::configured());
    options.tie_to_pid = Some(std::process::id());
    let started = Instant::now();
    let plane = ControlPlane::start(options).await?;
    let run = Run {
        seed,
        window,
        plan: &plan,
        args: &args,
        hangar: &hangar,
        logs: &logs,
    };
    let observed = run.on(plane.kubeconfig()).await;
    ControlPlane::stop(&cluster)?;
    let observed = observed?;

    let report = report(&run, observed, started.elapsed());
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("bench/results/chaos-{seed}.json")));
    let out = common::write_results(&root, &out, &report)?;
    println!("{}", summary(&report));
    println!("wrote {}; logs in {}", out.display(), logs.display());
    let violations: usize = report.invariants.values().map(|i| i.count).sum();
    ensure!(
        violations == 0,
        "{violations} invariant violations (seed {seed})"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The run.

struct Run<'a> {
    seed: u64,
    window: Duration,
    plan: &'a [Scheduled],
    args: &'a Args,
    hangar: &'a Path,
    logs: &'a Path,
}

/// What happened, before any arithmetic.
struct Observed {
    fired: Vec<Fired>,
    job_ids: Vec<u64>,
    drained: bool,
    drain_seconds: f64,
    /// Jobs at the end of the drain, from ghsim.
    jobs: Vec<ghsim::world::Job>,
    accounting: ghsim::accounting::Accounting,
    /// Pods crashed by `RunnerCrash` or deleted by `DeleteRunnerPod`, with the fault index.
    crashed: BTreeMap<String, usize>,
    /// Left after the owners were deleted and `--cleanup-limit` passed.
    leftover: Leftover,
    cleanup_seconds: f64,
    /// Credentials the replicas must never log: the PATs, the webhook secret and every
    /// registration token seen in a Secret during the run.
    secrets: BTreeSet<String>,
    run_seconds: f64,
}

#[derive(Debug, Default, Serialize)]
struct Leftover {
    registrations: Vec<String>,
    pods: Vec<String>,
    runners: Vec<String>,
    secrets: Vec<String>,
}

/// One fault as it fired: what it hit, or why it hit nothing.
#[derive(Clone, Debug, Serialize)]
struct Fired {
    index: usize,
    kind: Kind,
    at_seconds: f64,
    outcome: String,
}

impl Run<'_> {
    async fn on(&self, kubeconfig: &Path) -> anyhow::Result<Observed> {
        let started = Instant::now();
        let World {
            client,
            github,
            nodes,
        } = World::start(kubeconfig, self.args.nodes).await?;
        let webhooks = [
            SocketAddr::from(([127, 0, 0, 1], free_port()?)),
            SocketAddr::from(([127, 0, 0, 1], free_port()?)),
        ];
        let proxy = RoundRobin::start(webhooks.to_vec()).await?;
        let replicas = Arc::new(Mutex::new(Replicas {
            hangar: self.hangar.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            github: github.url.to_string(),
            logs: self.logs.to_owned(),
            slots: REPLICAS
                .iter()
                .zip(webhooks)
                .map(|(name, webhook)| Slot {
                    name,
                    webhook,
                    child: None,
                    incarnation: 0,
                })
                .collect(),
        }));
        for i in 0..REPLICAS.len() {
            replicas.lock().expect("replicas").spawn(i)?;
        }
        let secrets = Arc::new(Mutex::new(BTreeSet::from([
            CONTROLLER_PAT.to_owned(),
            RUNNER_PAT.to_owned(),
            WEBHOOK_SECRET.to_owned(),
        ])));
        let secret_watch = tokio::spawn(collect_secrets(client.clone(), secrets.clone()));
        set_up(&client, &github, &nodes, &proxy, &webhooks).await?;
        eprintln!("chaos: stack up in {:.0?}", started.elapsed());

        // Faults and load over the window.
        let t0 = Instant::now();
        let load = tokio::spawn(queue_jobs(
            github.sim.clone(),
            self.seed,
            self.args.rate,
            self.args.job_ms,
            self.window,
        ));
        let injector = Injector {
            client: client.clone(),
            sim: github.sim.clone(),
            nodes: &nodes,
            replicas: replicas.clone(),
            github_faults: Arc::new(tokio::sync::Mutex::new(())),
            rollouts: AtomicUsize::new(0),
        };
        let mut pending = JoinSet::new();
        let mut fired = Vec::new();
        let mut crashed = BTreeMap::new();
        for s in self.plan {
            tokio::time::sleep_until((t0 + Duration::from_millis(s.at_ms)).into()).await;
            let outcome = injector
                .fire(s, &mut pending)
                .await
                .unwrap_or_else(|e| format!("failed: {e:#}"));
            // A runner crash, or a user deleting a pod (the kubelet stops its containers at
            // once; without the admission webhook nothing can refuse), may end a job: those
            // interruptions are the fault's, not Hangar's, and are counted apart.
            let victim = outcome
                .strip_prefix("crashed ")
                .or_else(|| outcome.strip_prefix("deleted "));
            if let Some(pod) = victim {
                crashed.insert(pod.to_owned(), s.index);
            }
            eprintln!("chaos: #{} {} -> {outcome}", s.index, s.fault.kind());
            fired.push(Fired {
                index: s.index,
                kind: s.fault.kind(),
                at_seconds: t0.elapsed().as_secs_f64(),
                outcome,
            });
        }
        let job_ids = load.await??;
        // Faults stop: every window closes and every replica is back.
        while let Some(done) = pending.join_next().await {
            done??;
        }
        github.sim.set_faults(ghsim::faults::Faults::default());
        {
            let mut r = replicas.lock().expect("replicas");
            for i in 0..REPLICAS.len() {
                if !r.alive(i) {
                    r.spawn(i)?;
                }
            }
        }
        eprintln!("chaos: faults stopped after {:.0?}; draining", t0.elapsed());

        let drain_started = Instant::now();
        let drain_limit = Duration::from_secs(self.args.drain_limit);
        let drained = until_true(drain_limit, || {
            github.sim.read(|w, _| {
                job_ids.iter().all(|id| {
                    w.jobs
                        .get(id)
                        .is_some_and(|j| j.status == JobStatus::Completed)
                })
            })
        })
        .await;
        let drain_seconds = drain_started.elapsed().as_secs_f64();
        let jobs = github.sim.read(|w, _| {
            job_ids
                .iter()
                .filter_map(|id| w.jobs.get(id).cloned())
                .collect()
        });
        let accounting = ghsim::accounting::snapshot(&github.sim);

        let cleanup_started = Instant::now();
        let leftover = clean_up(
            &client,
            &github.sim,
            Duration::from_secs(self.args.cleanup_limit),
        )
        .await?;
        let cleanup_seconds = cleanup_started.elapsed().as_secs_f64();
        secret_watch.abort();
        replicas.lock().expect("replicas").stop_all();
        nodes.shutdown().await?;
        let secrets = secrets.lock().expect("secrets").clone();
        Ok(Observed {
            fired,
            job_ids,
            drained,
            drain_seconds,
            jobs,
            accounting,
            crashed,
            leftover,
            cleanup_seconds,
            secrets,
            run_seconds: started.elapsed().as_secs_f64(),
        })
    }
}

/// The owners, their autoscalers and the webhook subscription; returns once both webhook
/// replicas answer and the hook's `ping` got a 200 through the proxy.
async fn set_up(
    client: &Client,
    github: &ghsim::Running,
    nodes: &nodesim::NodeSimHandle,
    proxy: &RoundRobin,
    webhooks: &[SocketAddr],
) -> anyhow::Result<()> {
    let placement = nodes.placement();
    let pod_spec = |generation: usize| {
        json!({
            "nodeSelector": placement.node_selector,
            "tolerations": placement.tolerations,
            "containers": [{"name": "runner", "env": [
                {"name": "CHAOS_ROLLOUT", "value": generation.to_string()},
            ]}],
        })
    };
    let runner_spec = |label: &str, ephemeral: bool| {
        json!({
            "repository": "octo/app",
            "labels": [label],
            "ephemeral": ephemeral,
            "nodeSelector": placement.node_selector,
            "tolerations": placement.tolerations,
            "env": [{"name": "CHAOS_ROLLOUT", "value": "0"}],
        })
    };
    let apply = PatchParams::apply("chaos").force();
    let deployments = Api::<RunnerDeployment>::namespaced(client.clone(), NAMESPACE);
    for (name, ephemeral, replicas) in [(EPH, true, 0), (PULL, true, 1), (PERSIST, false, 2)] {
        let rd = json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "RunnerDeployment",
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "template": {"spec": runner_spec(name, ephemeral)}},
        });
        deployments.patch(name, &apply, &Patch::Apply(&rd)).await?;
    }
    let set = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerSet",
        "metadata": {"name": SET},
        "spec": {
            "replicas": 1,
            "repository": "octo/app",
            "labels": [SET],
            "template": {"spec": pod_spec(0)},
        },
    });
    Api::<RunnerSet>::namespaced(client.clone(), NAMESPACE)
        .patch(SET, &apply, &Patch::Apply(&set))
        .await?;
    let autoscalers = Api::<HorizontalRunnerAutoscaler>::namespaced(client.clone(), NAMESPACE);
    for (name, spec) in [
        (
            EPH,
            json!({
                "minReplicas": 0,
                "maxReplicas": 4,
                "scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "duration": "5m"}],
            }),
        ),
        (
            PULL,
            json!({
                "minReplicas": 1,
                "maxReplicas": 4,
                "metrics": [{
                    "type": "PercentageRunnersBusy",
                    "scaleUpThreshold": "0.75",
                    "scaleDownThreshold": "0.3",
                }],
            }),
        ),
    ] {
        let mut full = json!({"scaleTargetRef": {"kind": "RunnerDeployment", "name": name}});
        if let (Some(full), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
            full.extend(extra.clone());
        }
        let hra = json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "HorizontalRunnerAutoscaler",
            "metadata": {"name": name},
            "spec": full,
        });
        autoscalers.patch(name, &apply, &Patch::Apply(&hra)).await?;
    }

    for addr in webhooks {
        let up = until_true(SETUP_LIMIT, || {
            std::net::TcpStream::connect_timeout(addr, Duration::from_millis(200)).is_ok()
        })
        .await;
        ensure!(
            up,
            "webhook replica {addr} did not listen within {SETUP_LIMIT:?}"
        );
    }
    let hook = github.sim.add_hook(NewHook {
        url: proxy.url.clone(),
        secret: Some(WEBHOOK_SECRET.to_owned()),
        content_type: ContentType::Json,
        events: vec!["workflow_job".to_owned()],
        owner: None,
    });
    let pinged = until_true(SETUP_LIMIT, || {
        github.sim.deliveries().iter().any(|d| {
            d.hook_id == hook.id
                && d.event == "ping"
                && d.attempts.last().and_then(|a| a.status) == Some(200)
        })
    })
    .await;
    ensure!(
        pinged,
        "the hook's ping was not answered 200 within {SETUP_LIMIT:?}"
    );
    // The persistent owners' runners online, so the load starts against a working stack.
    let ready = until_true(SETUP_LIMIT, || {
        github
            .sim
            .read(|w, _| w.runners.values().filter(|r| r.online()).count() >= 4)
    })
    .await;
    ensure!(ready, "4 runners were not online within {SETUP_LIMIT:?}");
    Ok(())
}

/// Queues jobs for the four labels at `rate` per second for `window`; the label sequence comes
/// from the seed too. Returns the job ids.
async fn queue_jobs(
    sim: ghsim::Sim,
    seed: u64,
    rate: f64,
    job_ms: u64,
    window: Duration,
) -> anyhow::Result<Vec<u64>> {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x6c6f_6164); // "load"
    let end = Instant::now() + window;
    let mut every = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let mut ids = Vec::new();
    while Instant::now() < end {
        every.tick().await;
        let label = LABELS[rng.usize(0..LABELS.len())];
        let request = SubmitJobs {
            repository: "octo/app".into(),
            count: 1,
            labels: vec!["self-hosted".into(), label.into()],
            duration_ms: job_ms,
            conclusion: Some("success".into()),
            workflow: None,
            job_name: None,
        };
        let (_, queued) = sim
            .update(|w, now| w.submit_jobs(&request, now))
            .with_context(|| format!("submitting a job for {label}"))?;
        ids.extend(queued);
    }
    Ok(ids)
}

/// Every few seconds, the values of the Secrets in [`NAMESPACE`] (registration tokens), so the
/// log scan can look for them.
async fn collect_secrets(client: Client, into: Arc<Mutex<BTreeSet<String>>>) {
    let api = Api::<Secret>::namespaced(client, NAMESPACE);
    loop {
        if let Ok(list) = api.list(&ListParams::default()).await {
            let mut into = into.lock().expect("secrets");
            for secret in list {
                // Only the credentials: other keys (an expiry time) may be logged.
                for (key, value) in secret.data.unwrap_or_default() {
                    let credential = [
                        hangar::runner_pod::TOKEN_KEY,
                        hangar::runner_pod::JIT_CONFIG_KEY,
                    ]
                    .contains(&key.as_str());
                    if let (true, Ok(text)) = (credential, String::from_utf8(value.0)) {
                        into.insert(text);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

/// Deletes every owner, then waits up to `limit` for their pods, Runners, Secrets and GitHub
/// registrations to go; returns what is left.
async fn clean_up(client: &Client, sim: &ghsim::Sim, limit: Duration) -> anyhow::Result<Leftover> {
    let dp = DeleteParams::default();
    let hras = Api::<HorizontalRunnerAutoscaler>::namespaced(client.clone(), NAMESPACE);
    let rds = Api::<RunnerDeployment>::namespaced(client.clone(), NAMESPACE);
    for name in HRAS {
        hras.delete(name, &dp).await?;
    }
    for name in [EPH, PULL, PERSIST] {
        rds.delete(name, &dp).await?;
    }
    Api::<RunnerSet>::namespaced(client.clone(), NAMESPACE)
        .delete(SET, &dp)
        .await?;
    let deadline = Instant::now() + limit;
    loop {
        let left = leftover(client, sim).await?;
        let empty = left.registrations.is_empty()
            && left.pods.is_empty()
            && left.runners.is_empty()
            && left.secrets.is_empty();
        if empty || Instant::now() > deadline {
            return Ok(left);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn leftover(client: &Client, sim: &ghsim::Sim) -> anyhow::Result<Leftover> {
    let names = |list: Vec<String>| {
        let mut list = list;
        list.sort();
        list
    };
    let lp = ListParams::default();
    Ok(Leftover {
        registrations: names(sim.read(|w, _| w.runners.values().map(|r| r.name.clone()).collect())),
        pods: names(
            Api::<Pod>::namespaced(client.clone(), NAMESPACE)
                .list(&lp)
                .await?
                .into_iter()
                .map(|p| p.name_any())
                .collect(),
        ),
        runners: names(
            Api::<Runner>::namespaced(client.clone(), NAMESPACE)
                .list(&lp)
                .await?
                .into_iter()
                .map(|r| r.name_any())
                .collect(),
        ),
        secrets: names(
            Api::<Secret>::namespaced(client.clone(), NAMESPACE)
                .list(&lp)
                .await?
                .into_iter()
                .map(|s| s.name_any())
                // The per-scope registration-token Secret is shared by every RunnerSet pod of
                // a scope and outlives them by design (admission/registration.rs); per-runner
                // Secrets are what must not leak.
                .filter(|name| !name.starts_with(SCOPE_SECRET_PREFIX))
                .collect(),
        ),
    })
}

/// Polls `done` every 200 ms for at most `limit`; whether it held.
async fn until_true(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Faults.

struct Injector<'a> {
    client: Client,
    sim: ghsim::Sim,
    nodes: &'a nodesim::NodeSimHandle,
    replicas: Arc<Mutex<Replicas>>,
    /// Read-modify-write of ghsim's fault settings, one window at a time.
    github_faults: Arc<tokio::sync::Mutex<()>>,
    rollouts: AtomicUsize,
}

impl Injector<'_> {
    /// Fires `s`; restarts and window ends go to `pending`. Returns what it hit.
    async fn fire(
        &self,
        s: &Scheduled,
        pending: &mut JoinSet<anyhow::Result<()>>,
    ) -> anyhow::Result<String> {
        match &s.fault {
            Fault::KillLeader { restart_after_ms } | Fault::TermLeader { restart_after_ms } => {
                let Some(leader) = self.leader().await? else {
                    return Ok("skipped: no live leader".to_owned());
                };
                let term = matches!(s.fault, Fault::TermLeader { .. });
                self.stop_and_restart(leader, term, *restart_after_ms, pending)
            }
            Fault::KillFollower { restart_after_ms } => {
                let leader = self.leader().await?;
                let follower = {
                    let mut r = self.replicas.lock().expect("replicas");
                    (0..REPLICAS.len()).find(|&i| Some(i) != leader && r.alive(i))
                };
                let Some(follower) = follower else {
                    return Ok("skipped: no live follower".to_owned());
                };
                self.stop_and_restart(follower, false, *restart_after_ms, pending)
            }
            Fault::GithubServerErrors { rate, window_ms } => {
                self.github_window(
                    "server_error_rate",
                    json!(rate),
                    json!(0.0),
                    *window_ms,
                    pending,
                )
                .await
            }
            Fault::GithubSecondaryLimits { rate, window_ms } => {
                // A short retry-after: GitHub's minute would idle the run, not test more.
                self.github_window(
                    "secondary_limit_rate",
                    json!(rate),
                    json!(0.0),
                    *window_ms,
                    pending,
                )
                .await
            }
            Fault::GithubForbidDeleteRunner { window_ms } => {
                self.github_window(
                    "forbidden_endpoints",
                    json!(["DELETE /actions/runners/{runner_id}"]),
                    json!([]),
                    *window_ms,
                    pending,
                )
                .await
            }
            Fault::WebhookDrop { rate, window_ms } => {
                self.github_window(
                    "webhook_drop_rate",
                    json!(rate),
                    json!(0.0),
                    *window_ms,
                    pending,
                )
                .await
            }
            Fault::WebhookDuplicate { rate, window_ms } => {
                self.github_window(
                    "webhook_duplicate_rate",
                    json!(rate),
                    json!(0.0),
                    *window_ms,
                    pending,
                )
                .await
            }
            Fault::WebhookReorder { rate, window_ms } => {
                self.github_window(
                    "webhook_reorder_rate",
                    json!(rate),
                    json!(0.0),
                    *window_ms,
                    pending,
                )
                .await
            }
            Fault::WebhookDelay {
                max_delay_ms,
                window_ms,
            } => {
                self.github_window(
                    "webhook_max_delay_ms",
                    json!(max_delay_ms),
                    json!(0),
                    *window_ms,
                    pending,
                )
                .await
            }
            Fault::DeleteRunnerPod { pick } => {
                let pods = self.runner_pods(false).await?;
                let Some(pod) = pick_from(&pods, *pick) else {
                    return Ok("skipped: no runner pod".to_owned());
                };
                Api::<Pod>::namespaced(self.client.clone(), NAMESPACE)
                    .delete(pod, &DeleteParams::default())
                    .await
                    .with_context(|| format!("deleting pod {pod}"))?;
                Ok(format!("deleted {pod}"))
            }
            Fault::RunnerCrash { pick } => {
                let pods = self.runner_pods(true).await?;
                let Some(pod) = pick_from(&pods, *pick) else {
                    return Ok("skipped: no running runner pod".to_owned());
                };
                self.nodes
                    .inject(NAMESPACE, pod, "runner", nodesim::Fault::Crash(1))
                    .await
                    .with_context(|| format!("crashing the runner of {pod}"))?;
                Ok(format!("crashed {pod}"))
            }
            Fault::TemplateChange { owner } => {
                let name = TEMPLATED[(*owner % TEMPLATED.len() as u64) as usize];
                let generation = self.rollouts.fetch_add(1, Ordering::Relaxed) + 1;
                let env = json!([{"name": "CHAOS_ROLLOUT", "value": generation.to_string()}]);
                let merge = PatchParams::default();
                if name == SET {
                    // A merge patch replaces the container list whole: write the runner
                    // container again with its new env.
                    let patch = json!({"spec": {"template": {"spec": {"containers": [
                        {"name": "runner", "env": env},
                    ]}}}});
                    Api::<RunnerSet>::namespaced(self.client.clone(), NAMESPACE)
                        .patch(name, &merge, &Patch::Merge(&patch))
                        .await
                        .with_context(|| format!("rolling out RunnerSet {name}"))?;
                } else {
                    let patch = json!({"spec": {"template": {"spec": {"env": env}}}});
                    Api::<RunnerDeployment>::namespaced(self.client.clone(), NAMESPACE)
                        .patch(name, &merge, &Patch::Merge(&patch))
                        .await
                        .with_context(|| format!("rolling out RunnerDeployment {name}"))?;
                }
                Ok(format!("rolled out {name} (CHAOS_ROLLOUT={generation})"))
            }
            Fault::HraMaxReplicas { hra, max_replicas } => {
                let name = HRAS[(*hra % HRAS.len() as u64) as usize];
                // `pull` keeps one runner at least; maxReplicas below minReplicas is invalid.
                let max = if name == PULL {
                    (*max_replicas).max(1)
                } else {
                    *max_replicas
                };
                let patch = json!({"spec": {"maxReplicas": max}});
                Api::<HorizontalRunnerAutoscaler>::namespaced(self.client.clone(), NAMESPACE)
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("setting maxReplicas of {name}"))?;
                Ok(format!("{name} maxReplicas {max}"))
            }
        }
    }

    /// The replica whose `POD_NAME` the Lease holder's identity starts with, if it is alive.
    async fn leader(&self) -> anyhow::Result<Option<usize>> {
        let lease = Api::<Lease>::namespaced(self.client.clone(), NAMESPACE)
            .get_opt(LEASE)
            .await
            .context("reading the leader Lease")?;
        let holder = lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        let mut r = self.replicas.lock().expect("replicas");
        Ok(REPLICAS
            .iter()
            .position(|name| holder.starts_with(&format!("{name}_")))
            .filter(|&i| r.alive(i)))
    }

    fn stop_and_restart(
        &self,
        replica: usize,
        term: bool,
        restart_after_ms: u64,
        pending: &mut JoinSet<anyhow::Result<()>>,
    ) -> anyhow::Result<String> {
        let name = REPLICAS[replica];
        let incarnation = self
            .replicas
            .lock()
            .expect("replicas")
            .stop(replica, term)?;
        let replicas = self.replicas.clone();
        pending.spawn(async move {
            tokio::time::sleep(Duration::from_millis(restart_after_ms)).await;
            // A SIGTERMed replica may still be finishing: wait for it (30 s at most, past its
            // graceful stop) before its successor binds the same webhook port.
            let deadline = Instant::now() + Duration::from_secs(30);
            while replicas.lock().expect("replicas").alive(replica) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let mut r = replicas.lock().expect("replicas");
            // Another fault's restart got there first: that incarnation stays.
            if r.slots[replica].incarnation == incarnation {
                r.reap(replica)?;
                r.spawn(replica)?;
            }
            Ok(())
        });
        let signal = if term { "SIGTERM" } else { "SIGKILL" };
        Ok(format!("{signal} {name}, restart in {restart_after_ms} ms"))
    }

    /// Sets ghsim's fault `field` to `on` now and back to `off` after `window_ms`.
    async fn github_window(
        &self,
        field: &'static str,
        on: serde_json::Value,
        off: serde_json::Value,
        window_ms: u64,
        pending: &mut JoinSet<anyhow::Result<()>>,
    ) -> anyhow::Result<String> {
        let set = {
            let sim = self.sim.clone();
            let lock = self.github_faults.clone();
            move |value: serde_json::Value| {
                let (sim, lock) = (sim.clone(), lock.clone());
                async move {
                    let _one_at_a_time = lock.lock().await;
                    let merged = sim
                        .faults()
                        .merged(json!({field: value, "secondary_retry_after_secs": 5}))
                        .with_context(|| format!("setting ghsim fault {field}"))?;
                    sim.set_faults(merged);
                    anyhow::Ok(())
                }
            }
        };
        set(on.clone()).await?;
        let reset = set.clone();
        pending.spawn(async move {
            tokio::time::sleep(Duration::from_millis(window_ms)).await;
            reset(off).await
        });
        Ok(format!("{field} = {on} for {window_ms} ms"))
    }

    /// Runner pods in the namespace not being deleted (only `Running` ones if asked), by name.
    async fn runner_pods(&self, running: bool) -> anyhow::Result<Vec<String>> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), NAMESPACE)
            .list(&ListParams::default())
            .await
            .context("listing runner pods")?;
        let mut names: Vec<String> = pods
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| {
                !running || p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .map(|p| p.name_any())
            .collect();
        names.sort();
        Ok(names)
    }
}

fn pick_from(list: &[String], pick: u64) -> Option<&String> {
    (!list.is_empty()).then(|| &list[(pick % list.len() as u64) as usize])
}

// ---------------------------------------------------------------------------------------------
// The `hangar run` replicas.

struct Replicas {
    hangar: PathBuf,
    kubeconfig: PathBuf,
    github: String,
    logs: PathBuf,
    slots: Vec<Slot>,
}

struct Slot {
    name: &'static str,
    webhook: SocketAddr,
    child: Option<Child>,
    /// How many times it was started: each start logs to `<name>-<incarnation>.log`.
    incarnation: u32,
}

impl Replicas {
    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let slot = &mut self.slots[i];
        slot.incarnation += 1;
        let log_path = self
            .logs
            .join(format!("{}-{}.log", slot.name, slot.incarnation));
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()?)).to_string();
        let webhook = slot.webhook.to_string();
        let child = Command::new(&self.hangar)
            .args([
                "run",
                "--github-url",
                &self.github,
                "--github-api-url",
                &self.github,
                "--watch-namespace",
                NAMESPACE,
                "--webhook-addr",
                &webhook,
                "--metrics-addr",
                &metrics,
                "--health-probe-bind-address",
                "0",
                "--enable-leader-election",
                // Short enough that scale-downs and the drain happen within a run.
                "--default-scale-down-delay",
                "30s",
                "--sync-period",
                "10s",
            ])
            .env("KUBECONFIG", &self.kubeconfig)
            .env("GITHUB_TOKEN", CONTROLLER_PAT)
            .env("GITHUB_WEBHOOK_SECRET_TOKEN", WEBHOOK_SECRET)
            .env("POD_NAME", slot.name)
            .env("POD_NAMESPACE", NAMESPACE)
            .env(
                "RUST_LOG",
                std::env::var("HANGAR_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .stdout(log.try_clone()?)
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("failed to start {}", self.hangar.display()))?;
        slot.child = Some(child);
        Ok(())
    }

    /// Whether replica `i` runs (a SIGTERMed one that has not exited yet counts as alive).
    fn alive(&mut self, i: usize) -> bool {
        self.slots[i]
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILL or SIGTERM replica `i`; a SIGKILLed one is reaped at once. Returns its
    /// incarnation, so a delayed restart can tell whether someone restarted it meanwhile.
    fn stop(&mut self, i: usize, term: bool) -> anyhow::Result<u32> {
        let incarnation = self.slots[i].incarnation;
        let Some(child) = self.slots[i].child.as_mut() else {
            return Ok(incarnation);
        };
        if term {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .context("running kill -TERM")?;
            ensure!(status.success(), "kill -TERM {} failed", child.id());
        } else {
            child.kill().context("SIGKILL")?;
            child.wait()?;
        }
        Ok(incarnation)
    }

    /// Ends replica `i` if it still runs and forgets it.
    fn reap(&mut self, i: usize) -> anyhow::Result<()> {
        if let Some(mut child) = self.slots[i].child.take() {
            if child.try_wait()?.is_none() {
                child.kill()?;
            }
            child.wait()?;
        }
        Ok(())
    }

    fn stop_all(&mut self) {
        for slot in &mut self.slots {
            if let Some(mut child) = slot.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        self.stop_all();
    }
}

// ---------------------------------------------------------------------------------------------
// The round-robin proxy in front of the webhook replicas.

/// A loopback TCP proxy: each connection goes to the next upstream in turn, or to the other if
/// that one refuses (a replica being restarted), as a Service in front of two pods would.
struct RoundRobin {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RoundRobin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RoundRobin {
    async fn start(upstreams: Vec<SocketAddr>) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let url = format!("http://{}/", listener.local_addr()?);
        let next = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let (upstreams, next) = (upstreams.clone(), next.clone());
                tokio::spawn(async move {
                    let first = next.fetch_add(1, Ordering::Relaxed);
                    for k in 0..upstreams.len() {
                        let addr = upstreams[(first + k) % upstreams.len()];
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(addr).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            return;
                        }
                    }
                    // Neither replica listens: the connection closes and ghsim records a
                    // failed delivery, as GitHub would.
                });
            }
        });
        Ok(Self { url, task })
    }
}

// ---------------------------------------------------------------------------------------------
// Invariants and the report.

#[derive(Debug, Serialize)]
struct Report {
    seed: u64,
    faults_requested: usize,
    window_seconds: u64,
    replay: String,
    faults_by_kind: BTreeMap<String, usize>,
    invariants: BTreeMap<&'static str, Invariant>,
    jobs: JobCounts,
    github_api: GitHubApi,
    leftover: Leftover,
    timings: Timings,
    schedule: Vec<Scheduled>,
    fired: Vec<Fired>,
}

#[derive(Debug, Default, Serialize)]
struct Invariant {
    rule: &'static str,
    count: usize,
    violations: Vec<Violation>,
}

#[derive(Debug, Serialize)]
struct Violation {
    seed: u64,
    /// The fault that can be blamed, if one can.
    fault_index: Option<usize>,
    what: String,
}

#[derive(Debug, Serialize)]
struct JobCounts {
    queued: usize,
    completed: usize,
    /// On a pod an injected crash or user deletion ended.
    interrupted_by_injected_fault: usize,
    interrupted_otherwise: usize,
    stranded: usize,
    max_queue_seconds: Option<f64>,
}

#[derive(Debug, Serialize)]
struct GitHubApi {
    controller_calls: u64,
    controller_rate_limit_cost: u64,
    cost_per_hour: f64,
    budget_per_hour: f64,
}

#[derive(Debug, Serialize)]
struct Timings {
    run_seconds: f64,
    drain_seconds: f64,
    drained: bool,
    cleanup_seconds: f64,
    total_seconds: f64,
}

fn report(run: &Run<'_>, o: Observed, total: Duration) -> Report {
    let seed = run.seed;
    let violation = |fault_index, what: String| Violation {
        seed,
        fault_index,
        what,
    };
    let mut invariants: BTreeMap<&'static str, Invariant> = BTreeMap::new();
    let mut add = |name: &'static str, rule: &'static str, violations: Vec<Violation>| {
        invariants.insert(
            name,
            Invariant {
                rule,
                count: violations.len(),
                violations,
            },
        );
    };

    let (mut by_crash, mut interrupted) = (0, Vec::new());
    for j in o.jobs.iter().filter(|j| j.interrupted) {
        let runner = j.runner_name.clone().unwrap_or_default();
        match o.crashed.get(&runner) {
            Some(_) => by_crash += 1,
            None => interrupted.push(violation(
                None,
                format!("job {} interrupted on runner {runner}", j.id),
            )),
        }
    }
    let interrupted_otherwise = interrupted.len();
    add(
        "jobs_interrupted_by_hangar",
        "no job is interrupted except on a pod an injected crash or user deletion ended",
        interrupted,
    );
    let stranded: Vec<Violation> = o
        .jobs
        .iter()
        .filter(|j| j.status != JobStatus::Completed)
        .map(|j| {
            violation(
                None,
                format!(
                    "job {} ({}) still {:?} {:.0} s after faults stopped",
                    j.id,
                    j.labels.join(","),
                    j.status,
                    o.drain_seconds
                ),
            )
        })
        .collect();
    let stranded_count = stranded.len();
    add(
        "jobs_stranded",
        "every queued job completes within --drain-limit once faults stop",
        stranded,
    );
    let left = |what: &str, names: &[String]| -> Vec<Violation> {
        names
            .iter()
            .map(|n| violation(None, format!("{what} {n} left after cleanup")))
            .collect()
    };
    add(
        "leaked_registrations",
        "no GitHub runner registration is left once the owners are deleted",
        o.leftover
            .registrations
            .iter()
            // A registration left by a crashed or deleted pod points at that fault.
            .map(|n| {
                violation(
                    o.crashed.get(n).copied(),
                    format!("registration {n} left after cleanup"),
                )
            })
            .collect(),
    );
    add(
        "leaked_pods",
        "no runner pod is left once the owners are deleted",
        left("pod", &o.leftover.pods),
    );
    add(
        "leaked_runners",
        "no Runner is left once the owners are deleted",
        left("Runner", &o.leftover.runners),
    );
    add(
        "leaked_secrets",
        "no registration Secret is left once the owners are deleted",
        left("Secret", &o.leftover.secrets),
    );
    let (panics, leaks) = scan_logs(run.logs, &o.secrets);
    add(
        "panics",
        "no replica log contains a panic",
        panics.into_iter().map(|p| violation(None, p)).collect(),
    );
    add(
        "credentials_in_logs",
        "no replica log contains a token, PAT or webhook secret",
        leaks.into_iter().map(|p| violation(None, p)).collect(),
    );
    let (calls, cost) = o
        .accounting
        .api_calls
        .iter()
        .filter(|r| r.credential == "pat:controller")
        .fold((0, 0), |(calls, cost), r| {
            (calls + r.calls, cost + r.charged)
        });
    let cost_per_hour = cost as f64 * 3600.0 / o.run_seconds.max(1.0);
    add(
        "github_api_budget",
        "the controller's rate-limit cost per hour of run stays within 5,000",
        if cost_per_hour > API_BUDGET_PER_HOUR {
            vec![violation(
                None,
                format!(
                    "{cost} charged calls in {:.0} s = {cost_per_hour:.0}/h",
                    o.run_seconds
                ),
            )]
        } else {
            Vec::new()
        },
    );

    let mut faults_by_kind = BTreeMap::new();
    for s in run.plan {
        *faults_by_kind
            .entry(s.fault.kind().name().to_owned())
            .or_default() += 1;
    }
    let completed = o
        .jobs
        .iter()
        .filter(|j| j.status == JobStatus::Completed)
        .count();
    Report {
        seed,
        faults_requested: run.args.faults,
        window_seconds: run.window.as_secs(),
        replay: format!(
            "cargo xtask chaos -- --seed {seed} --faults {} --duration {}{}",
            run.args.faults,
            run.window.as_secs(),
            if run.args.kinds.is_empty() {
                String::new()
            } else {
                format!(" --kinds {}", run.args.kinds.join(","))
            }
        ),
        faults_by_kind,
        invariants,
        jobs: JobCounts {
            queued: o.job_ids.len(),
            completed,
            interrupted_by_injected_fault: by_crash,
            interrupted_otherwise,
            stranded: stranded_count,
            max_queue_seconds: o.accounting.jobs_summary.max_queue_seconds,
        },
        github_api: GitHubApi {
            controller_calls: calls,
            controller_rate_limit_cost: cost,
            cost_per_hour: (cost_per_hour * 10.0).round() / 10.0,
            budget_per_hour: API_BUDGET_PER_HOUR,
        },
        leftover: o.leftover,
        timings: Timings {
            run_seconds: o.run_seconds.round(),
            drain_seconds: o.drain_seconds.round(),
            drained: o.drained,
            cleanup_seconds: o.cleanup_seconds.round(),
            total_seconds: total.as_secs_f64().round(),
        },
        schedule: run.plan.to_vec(),
        fired: o.fired,
    }
}

/// Panic lines and credential sightings in every replica log (`file:line`, never the secret).
fn scan_logs(logs: &Path, secrets: &BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    let (mut panics, mut leaks) = (Vec::new(), Vec::new());
    let Ok(entries) = std::fs::read_dir(logs) else {
        return (panics, leaks);
    };
    let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        for (n, line) in text.lines().enumerate() {
            if line.contains("panicked at") {
                panics.push(format!("{name}:{}: {line}", n + 1));
            }
            if secrets.iter().any(|s| line.contains(s.as_str())) {
                leaks.push(format!("{name}:{}: a credential", n + 1));
            }
        }
    }
    (panics, leaks)
}

/// The one-screen summary.
fn summary(r: &Report) -> String {
    let mut out = format!(
        "chaos: seed {} — {} faults over {} s ({}); jobs: {} queued, {} completed, {} \
         interrupted by injected crashes or pod deletions; drained {} in {} s, cleanup {} s, total {} s\n",
        r.seed,
        r.schedule.len(),
        r.window_seconds,
        r.faults_by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        r.jobs.queued,
        r.jobs.completed,
        r.jobs.interrupted_by_injected_fault,
        if r.timings.drained { "fully" } else { "NOT" },
        r.timings.drain_seconds,
        r.timings.cleanup_seconds,
        r.timings.total_seconds,
    );
    for (name, i) in &r.invariants {
        let mark = if i.count == 0 { "ok  " } else { "FAIL" };
        out.push_str(&format!("  {mark} {name}: {}\n", i.count));
        for v in i.violations.iter().take(3) {
            out.push_str(&format!("         {}\n", v.what));
        }
    }
    out.push_str(&format!(
        "  GitHub API: {} calls by the controller, cost {:.0}/h (budget {:.0}/h)\n  replay: {}",
        r.github_api.controller_calls,
        r.github_api.cost_per_hour,
        r.github_api.budget_per_hour,
        r.replay
    ));
    out
}
