//! Chaos run: the real local stack under a seeded schedule of faults, with Hangar's invariants
//! checked after a drain. Run it with `cargo xtask chaos -- --seed 7 --faults 50`; results go
//! to `bench/results/chaos-<seed>.json` (or `--out`), logs to `target/chaos/<seed>/`.
//! `--sample` is the short run `cargo xtask test` makes.
//!
//! What runs: a private control plane (kube-apiserver, etcd, controller-manager, scheduler),
//! ghsim and nodesim (`--nodes`, plus a spare per `node-lost` fault) in this process, two
//! `hangar run` replicas with `--enable-leader-election`, `--webhook-addr`, a short
//! leaked-registration sweep ([`SWEEP_INTERVAL`], [`SWEEP_GRACE`]) and registration timeout
//! ([`REGISTRATION_TIMEOUT`]), and a round-robin TCP proxy
//! in this process that ghsim's `workflow_job` hook points at (two webhook replicas behind one
//! address). The replicas reach kube-apiserver through [`FaultProxy`] (a copy of the admin
//! kubeconfig with `server:` rewritten), which ends their watches, answers their watches 410
//! Expired or their optimistic writes 409 Conflict on demand; this harness's own calls (its
//! checks, the faults it fires, nodesim) go to the apiserver directly. Owners (`--owners`, default all): `eph` (ephemeral RunnerDeployment from zero, HRA
//! with a webhook trigger), `pull` (ephemeral RunnerDeployment, HRA with the
//! `TotalNumberOfQueuedAndInProgressWorkflowRuns` pull metric), `persist` (persistent
//! RunnerDeployment, HRA with the `PercentageRunnersBusy` pull metric, 1–4 runners) and `set`
//! (RunnerSet, [`SET_REPLICAS`] replicas); plus a runner a user registered by hand ([`FOREIGN_RUNNER`]).
//! Jobs for the owners' labels are queued at `--rate` per second while faults fire.
//!
//! What breaks: [`schedule::schedule`] turns (seed, `--faults`, window, `--kinds`) into a
//! list of faults at offsets; the same seed replays the same list. Which pod, Runner, node or
//! replica a fault hits is resolved when it fires (from its `pick`, or from the Lease holder)
//! and recorded. GitHub faults are windows of ghsim's fault settings; node faults
//! (`image-pull-failure`, `runner-never-registers`, `runner-cut-off`) windows of the simulated
//! runners' fault switches, for pods on a node or of an owner, and `node-not-ready` a window
//! in which a node reports NotReady while its pods run (the replicas' short
//! [`NODE_NOT_READY_TIMEOUT`] replaces its idle runners); an owner a user deletes
//! (`delete-runner-deployment`, `delete-runner-set`) is applied again with the spec it had,
//! once Hangar let it go (its busy runners finish their jobs first). Runners that never
//! registered are replaced after the replicas' short registration timeout
//! ([`REGISTRATION_TIMEOUT`]). kube-apiserver is SIGKILLed or SIGTERMed and started again 1–8 s
//! later (`apiserver-restart`: same port, certificates and etcd); through the fault proxy,
//! every open watch is ended (`watch-disconnect`), and windows of 410 Expired watches
//! (`watch-gone`), 409 Conflict writes (`write-conflicts`) and watches of Runners, runner
//! pods or StatefulSets lagging 1–10 s behind the writes (`watch-lag`) open. While the apiserver is
//! down, a fault that fails is fired again once it is back; the load (ghsim only) never waits
//! for it.
//!
//! What is checked, after the window ends (faults stop, every replica runs again) and the
//! queued jobs drain (`--drain-limit`): jobs interrupted other than on a pod an injected runner
//! crash, OOM kill, pod deletion or node loss ended (0), jobs not completed (stranded, 0), jobs
//! that added runners through more than one capacity reservation (sampled every second from
//! the autoscalers; 0). Then the sweep gets up to a grace period and three intervals to remove
//! Hangar's registrations left offline without a pod or Runner, and after every owner is
//! deleted (`--cleanup-limit`): Hangar's GitHub registrations (named and labelled as an owner's
//! runners), runner pods, Runners and Secrets left (0 each; the per-scope registration Secret
//! RunnerSet pods share is kept by design), the user's registration still there, panics in the
//! replicas' logs (0), credentials in them (0), and the controller's GitHub rate-limit cost
//! within [`API_BUDGET_PER_JOB`] (the results list it by endpoint). Each violation names the seed and a fault index:
//! the fault that caused it, else the last one before it happened, else the run's last.
//! Exit status is non-zero on any violation.

mod common;
#[path = "chaos/schedule.rs"]
mod schedule;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use clap::Parser;
use common::{CONTROLLER_PAT, NAMESPACE, RUNNER_PAT, World};
use ghsim::webhooks::{ContentType, NewHook};
use ghsim::world::{JobStatus, SubmitJobs};
use hangar_api::{HorizontalRunnerAutoscaler, Runner, RunnerDeployment, RunnerSet};
use hangar_testkit::control_plane::{ControlPlane, Signal, StartOptions, free_port, stable_port};
use hangar_testkit::eventually;
use hangar_testkit::fault_proxy::{self, FaultProxy};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use nodesim::program::{PodMatch, RunnerFault, RunnerFaults};
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
    /// Seconds between faults on average: the fault window is `--faults` times this (at least
    /// 60 s). Ignored with `--duration`.
    #[arg(long, default_value_t = 2.0)]
    fault_interval: f64,
    /// Length of the fault window in seconds, instead of `--fault-interval`.
    #[arg(long)]
    duration: Option<u64>,
    /// Owners to set up and queue jobs for, comma-separated (default: all of eph, pull,
    /// persist, set). Faults that pick an owner pick among these.
    #[arg(long, value_delimiter = ',')]
    owners: Vec<String>,
    /// Fault kinds to draw from, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// The short sample `cargo xtask test` runs: fault count and window fixed
    /// (`schedule::SAMPLE_*`), owners [`SAMPLE_OWNERS`] unless `--owners`, one run per seed:
    /// `schedule::SAMPLE_SEED` (every kind drawn), then `schedule::REGRESSION_SEEDS` — or only
    /// `--seed`. Results go to `target/chaos/sample-<seed>.json` unless `--out`.
    #[arg(long, conflicts_with_all = ["faults", "duration", "fault_interval"])]
    sample: bool,
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
/// The replicas' leaked-registration sweep: short, so registrations leaked by faults are
/// removed before the final check (the defaults, 10m and 30m, never act within a run).
const SWEEP_INTERVAL: Duration = Duration::from_secs(10);
const SWEEP_GRACE: Duration = Duration::from_secs(30);
/// The replicas' registration timeout: short, so runners that never register
/// (`runner-never-registers`) are replaced within the drain (the default, 10m, never acts
/// within a run), long enough that GitHub faults delaying Hangar's sight of a registration
/// do not retire healthy runners.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(90);
/// The replicas' `--node-not-ready-timeout`: short, so that a `node-not-ready` window (2–20 s)
/// usually outlasts it and idle runners on the node are replaced while busy ones run on.
const NODE_NOT_READY_TIMEOUT: Duration = Duration::from_secs(5);
/// A runner registered in `octo/app` by a user, not by Hangar: it must still be there at the
/// end (Hangar removes only registrations it created). Never online, so it takes no job.
const FOREIGN_RUNNER: &str = "user-laptop";
/// The controller's GitHub budget: rate-limit-charged calls per job queued (the per-hour cost
/// is reported too). About two a job go to the queued-runs metric, which lists a run's jobs
/// when it is queued and again when it runs, as ARC does; registrations, runner lists, removals
/// and the retries faults cause take the rest (a 1,000-fault soak measured 2.5).
const API_BUDGET_PER_JOB: f64 = 3.0;
/// ghsim's primary budget an hour for the controller's credential: a GitHub App installation's
/// on GitHub Enterprise Cloud. At the default `--rate` of one job a second the owners here need
/// ≈9,000 an hour, past a PAT's 5,000 (a soak that kept ghsim's default ran it dry after ≈45
/// minutes: the pull owner blind, 286 jobs stranded, 20 registrations leaked).
const GITHUB_BUDGET_PER_HOUR: u64 = 15_000;

/// ghsim's settings outside fault windows: no faults, [`GITHUB_BUDGET_PER_HOUR`].
fn calm_github() -> ghsim::faults::Faults {
    ghsim::faults::Faults {
        primary_budget: GITHUB_BUDGET_PER_HOUR,
        ..ghsim::faults::Faults::default()
    }
}

/// The owners, by runner label (= object name).
const EPH: &str = "eph";
const PULL: &str = "pull";
const PERSIST: &str = "persist";
const SET: &str = "set";
const LABELS: [&str; 4] = [EPH, PULL, PERSIST, SET];
/// The RunnerSet's fixed size: its quarter of the load (a 3 s job a second over four owners)
/// plus a new StatefulSet per ephemeral job needs two runners, the third absorbs faults.
const SET_REPLICAS: usize = 3;
/// The owners with an autoscaler.
const HRAS: [&str; 3] = [EPH, PULL, PERSIST];
/// The sample's owners: every kind.
const SAMPLE_OWNERS: [&str; 4] = [EPH, PULL, PERSIST, SET];
/// Runners each owner has online before the load starts.
/// (`persist` starts at its autoscaler's minReplicas: with no job running, the busy share
/// scales a larger start down at once, so more would never be online together.)
fn initial_runners(owner: &str) -> usize {
    // `persist`'s autoscaler starts at its minimum: idle runners are below its scale-down
    // threshold and no scale-out has happened yet to delay a scale-down.
    match owner {
        PULL | PERSIST => 1,
        SET => SET_REPLICAS,
        _ => 0,
    }
}

/// `--owners` as the owners' names, in [`LABELS`] order (all of them if none given).
fn parse_owners(given: &[String]) -> anyhow::Result<Vec<&'static str>> {
    for name in given {
        ensure!(
            LABELS.contains(&name.trim()),
            "no owner {name:?}; owners: {}",
            LABELS.join(", ")
        );
    }
    Ok(LABELS
        .into_iter()
        .filter(|l| given.is_empty() || given.iter().any(|g| g.trim() == *l))
        .collect())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_tracing();
    let mut args = Args::parse();
    let seeds: Vec<u64> = if args.sample {
        args.faults = schedule::SAMPLE_FAULTS;
        args.duration = Some(schedule::SAMPLE_WINDOW.as_secs());
        if args.owners.is_empty() {
            args.owners = SAMPLE_OWNERS.map(str::to_owned).to_vec();
        }
        match args.seed {
            Some(seed) => vec![seed],
            None => std::iter::once(schedule::SAMPLE_SEED)
                .chain(schedule::REGRESSION_SEEDS.iter().map(|r| r.seed))
                .collect(),
        }
    } else {
        vec![args.seed.unwrap_or_else(|| fastrand::u64(..))]
    };
    let mut failed = Vec::new();
    for seed in seeds {
        if let Some(r) = schedule::REGRESSION_SEEDS.iter().find(|r| r.seed == seed) {
            println!("chaos: seed {seed} once found {}", r.found);
        }
        if let Err(e) = run_seed(&args, seed).await {
            eprintln!("chaos: seed {seed} failed: {e:#}");
            failed.push(seed);
        }
    }
    ensure!(
        failed.is_empty(),
        "violations or errors with seeds {failed:?}"
    );
    Ok(())
}

/// The simulators' own log at `info` (nodesim: which runner registered when, which job it ran,
/// when its pod was stopped), written to the running seed's `logs/sims.log` so a violation can
/// be traced afterwards; stderr keeps `RUST_LOG` (default `warn`).
static SIM_LOG: SimLog = SimLog(Mutex::new(None));

/// Where [`SIM_LOG`] writes: the current seed's file, or nowhere between seeds.
#[derive(Debug)]
struct SimLog(Mutex<Option<std::fs::File>>);

impl SimLog {
    fn open(&self, path: &Path) -> std::io::Result<()> {
        let file = std::fs::File::create(path)?;
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(file);
        Ok(())
    }
}

impl std::io::Write for &SimLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.0.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            Some(file) => file.write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.0.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            Some(file) => file.flush(),
            None => Ok(()),
        }
    }
}

fn init_tracing() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, Layer as _, fmt};
    let stderr = EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    tracing_subscriber::registry()
        .with(
            fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(stderr),
        )
        .with(
            fmt::layer()
                .with_ansi(false)
                .with_writer(|| &SIM_LOG)
                .with_filter(EnvFilter::new("warn,nodesim=info,ghsim=info")),
        )
        .init();
}

/// One run: the schedule `seed` draws, on a private stack; the results written; an error if
/// any invariant was violated.
async fn run_seed(args: &Args, seed: u64) -> anyhow::Result<()> {
    // First line, so a run cut short can still be replayed.
    println!("chaos: seed {seed}");
    let kinds: Vec<Kind> = if args.kinds.is_empty() {
        if args.sample {
            schedule::sample_kinds(seed).to_vec()
        } else {
            Kind::ALL.to_vec()
        }
    } else {
        args.kinds
            .iter()
            .map(|k| Kind::parse(k.trim()).map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<_>>()?
    };
    ensure!(args.rate > 0.0, "--rate must be positive");
    let owners = parse_owners(&args.owners)?;
    let window = fault_window(args)?;
    let plan = schedule::schedule(seed, args.faults, window, &kinds);
    println!(
        "chaos: {} faults over {window:?}; replay with `{}`",
        plan.len(),
        replay(seed, args)
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
    SIM_LOG.open(&logs.join("sims.log"))?;
    let cluster = dir.join("cluster");
    let mut options = StartOptions::new(&cluster, hangar_testkit::Binaries::configured());
    options.tie_to_pid = Some(std::process::id());
    let started = Instant::now();
    let plane = ControlPlane::start(options).await?;
    let run = Run {
        seed,
        window,
        owners: &owners,
        plan: &plan,
        args,
        hangar: &hangar,
        logs: &logs,
    };
    let observed = run.on(plane.kubeconfig()).await;
    ControlPlane::stop(&cluster)?;
    let observed = observed?;

    let report = report(&run, observed, started.elapsed());
    let out = match (&args.out, args.sample) {
        (Some(out), _) => out.clone(),
        (None, true) => PathBuf::from(format!("target/chaos/sample-{seed}.json")),
        (None, false) => PathBuf::from(format!("bench/results/chaos-{seed}.json")),
    };
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

/// The ghsim setting a windowed GitHub fault switches on, its value, the calm value it goes
/// back to, and for how long; `None` for other faults.
fn github_setting(
    fault: &Fault,
) -> Option<(&'static str, serde_json::Value, serde_json::Value, u64)> {
    let rate =
        |field, rate: &f64, window_ms: &u64| Some((field, json!(rate), json!(0.0), *window_ms));
    match fault {
        Fault::GithubServerErrors { rate: r, window_ms } => rate("server_error_rate", r, window_ms),
        Fault::GithubSecondaryLimits { rate: r, window_ms } => {
            rate("secondary_limit_rate", r, window_ms)
        }
        Fault::WebhookDrop { rate: r, window_ms } => rate("webhook_drop_rate", r, window_ms),
        Fault::WebhookDuplicate { rate: r, window_ms } => {
            rate("webhook_duplicate_rate", r, window_ms)
        }
        Fault::WebhookReorder { rate: r, window_ms } => rate("webhook_reorder_rate", r, window_ms),
        Fault::GithubTimeouts { rate: r, window_ms } => rate("timeout_rate", r, window_ms),
        Fault::GithubResets { rate: r, window_ms } => rate("reset_rate", r, window_ms),
        Fault::GithubBadCredentials { rate: r, window_ms } => {
            rate("bad_credentials_rate", r, window_ms)
        }
        Fault::GithubNotFound { rate: r, window_ms } => rate("not_found_rate", r, window_ms),
        Fault::GithubForbidDeleteRunner { window_ms } => Some((
            "forbidden_endpoints",
            json!(["DELETE /actions/runners/{runner_id}"]),
            json!([]),
            *window_ms,
        )),
        Fault::GithubSlow {
            max_latency_ms,
            window_ms,
        } => Some((
            "rest_max_latency_ms",
            json!(max_latency_ms),
            json!(0),
            *window_ms,
        )),
        Fault::WebhookDelay {
            max_delay_ms,
            window_ms,
        } => Some((
            "webhook_max_delay_ms",
            json!(max_delay_ms),
            json!(0),
            *window_ms,
        )),
        _ => None,
    }
}

/// The fault window: `--duration`, else `--faults` × `--fault-interval` (at least 60 s), to the
/// millisecond (the schedule is drawn in milliseconds of it).
fn fault_window(args: &Args) -> anyhow::Result<Duration> {
    if let Some(seconds) = args.duration {
        return Ok(Duration::from_secs(seconds));
    }
    ensure!(
        args.fault_interval.is_finite() && args.fault_interval > 0.0,
        "--fault-interval must be a positive number of seconds"
    );
    let interval_ms = (args.fault_interval * 1000.0).round() as u64;
    Ok(Duration::from_millis(interval_ms * args.faults as u64).max(Duration::from_secs(60)))
}

/// The command that replays this run's schedule and setup: every argument either feeds into.
fn replay(seed: u64, args: &Args) -> String {
    let mut out = format!(
        "cargo xtask chaos -- --seed {seed} --faults {}",
        args.faults
    );
    match args.duration {
        Some(seconds) => out.push_str(&format!(" --duration {seconds}")),
        None => out.push_str(&format!(" --fault-interval {}", args.fault_interval)),
    }
    for (flag, values) in [("--kinds", &args.kinds), ("--owners", &args.owners)] {
        if !values.is_empty() {
            out.push_str(&format!(" {flag} {}", values.join(",")));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The run.

struct Run<'a> {
    seed: u64,
    window: Duration,
    /// The owners set up (names = runner labels).
    owners: &'a [&'static str],
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
    /// How long the sweep took to remove the registrations left without a pod or Runner.
    settle_seconds: f64,
    /// Jobs at the end of the drain, from ghsim.
    jobs: Vec<ghsim::world::Job>,
    accounting: ghsim::accounting::Accounting,
    /// Pods whose jobs an injected fault may end (see [`Hit::victims`]), with the fault index.
    crashed: BTreeMap<String, usize>,
    /// Left after the owners were deleted and `--cleanup-limit` passed.
    leftover: Leftover,
    cleanup_seconds: f64,
    /// Registrations still there at the end, with when they were last seen online (or
    /// registered), in seconds from the start of the fault window.
    last_seen: BTreeMap<String, f64>,
    /// ghsim's clock at the start of the fault window.
    sim_t0: jiff::Timestamp,
    reservations: Reservations,
    /// Credentials the replicas must never log: the PATs, the webhook secret and every
    /// registration token seen in a Secret during the run.
    secrets: BTreeSet<String>,
    run_seconds: f64,
    /// What the fault proxy in front of the apiserver did.
    apiserver_proxy: fault_proxy::Counts,
}

#[derive(Debug, Default, Serialize)]
struct Leftover {
    /// Registrations Hangar created (named and labelled as one of the owners' runners).
    registrations: Vec<String>,
    /// Registrations that are not Hangar's (the [`FOREIGN_RUNNER`] belongs here).
    foreign_registrations: Vec<String>,
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
            runner_faults,
        } = World::start(kubeconfig, self.args.nodes + spare_nodes(self.plan)).await?;
        github.sim.set_faults(calm_github());
        // Each replica binds its webhook port again at every restart, behind the same proxy.
        let webhooks = [
            SocketAddr::from(([127, 0, 0, 1], stable_port()?)),
            SocketAddr::from(([127, 0, 0, 1], stable_port()?)),
        ];
        let proxy = RoundRobin::start(webhooks.to_vec()).await?;
        // The replicas reach the apiserver through the fault proxy; this harness (its checks
        // and the faults it fires) talks to the apiserver directly.
        let cluster = kubeconfig
            .parent()
            .context("the kubeconfig's directory")?
            .to_owned();
        let api_proxy = FaultProxy::start(kubeconfig, &cluster.join("pki"), self.seed).await?;
        let via_proxy = cluster.join("kubeconfig-via-proxy");
        api_proxy.rewrite_kubeconfig(kubeconfig, &via_proxy)?;
        let replicas = Arc::new(Mutex::new(Replicas {
            hangar: self.hangar.to_owned(),
            kubeconfig: via_proxy,
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
                    stopped_by_fault: false,
                    exited_at: None,
                })
                .collect(),
        }));
        for i in 0..REPLICAS.len() {
            replicas.lock().expect("replicas").spawn(i)?;
        }
        let supervisor = {
            let replicas = replicas.clone();
            Supervisor(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let restarted = replicas
                        .lock()
                        .expect("replicas")
                        .restart_exited(Instant::now());
                    if let Err(e) = restarted {
                        eprintln!("chaos: restarting an exited replica failed: {e:#}");
                    }
                }
            }))
        };
        let secrets = Arc::new(Mutex::new(BTreeSet::from([
            CONTROLLER_PAT.to_owned(),
            RUNNER_PAT.to_owned(),
            WEBHOOK_SECRET.to_owned(),
        ])));
        let secret_watch = tokio::spawn(collect_secrets(client.clone(), secrets.clone()));
        let reservations = Arc::new(Mutex::new(Reservations::default()));
        set_up(&client, &github, &nodes, &proxy, &webhooks, self.owners).await?;
        eprintln!("chaos: stack up in {:.0?}", started.elapsed());

        // Faults and load over the window.
        let t0 = Instant::now();
        let sim_t0 = github.sim.now();
        let reservation_watch = tokio::spawn(collect_reservations(
            client.clone(),
            t0,
            reservations.clone(),
        ));
        let load = tokio::spawn(queue_jobs(
            github.sim.clone(),
            self.seed,
            self.owners.to_vec(),
            self.args.rate,
            self.args.job_ms,
            self.window,
        ));
        let injector = Injector {
            client: client.clone(),
            sim: github.sim.clone(),
            nodes: &nodes,
            replicas: replicas.clone(),
            owners: self.owners,
            github_faults: Arc::new(tokio::sync::Mutex::new(())),
            rollouts: AtomicUsize::new(0),
            lost_nodes: Mutex::new(BTreeSet::new()),
            runner_faults,
            cluster,
            api_faults: api_proxy.faults().clone(),
            apiserver_down: Arc::new(AtomicBool::new(false)),
            windows: Arc::new(ProxyWindows::default()),
        };
        let mut pending = JoinSet::new();
        let mut fired = Vec::new();
        let mut crashed = BTreeMap::new();
        for s in self.plan {
            tokio::time::sleep_until((t0 + Duration::from_millis(s.at_ms)).into()).await;
            let Hit { outcome, victims } = injector
                .fire_when_up(s, &mut pending)
                .await
                .unwrap_or_else(|e| Hit::none(format!("failed: {e:#}")));
            for pod in victims {
                crashed.insert(pod, s.index);
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
        github.sim.set_faults(calm_github());
        injector.api_faults.clear();
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

        // With the owners still there, the sweep removes what the faults leaked: a registration
        // looks leaked to a sweep pass, is removed by the first pass after the grace period.
        let settle_started = Instant::now();
        let settle_limit = SWEEP_GRACE + SWEEP_INTERVAL * 3;
        loop {
            let orphans = orphaned_registrations(&client, &github.sim).await?;
            if orphans.is_empty() || settle_started.elapsed() > settle_limit {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let settle_seconds = settle_started.elapsed().as_secs_f64();

        let cleanup_started = Instant::now();
        let leftover = clean_up(
            &client,
            &github.sim,
            self.owners,
            Duration::from_secs(self.args.cleanup_limit),
        )
        .await?;
        let cleanup_seconds = cleanup_started.elapsed().as_secs_f64();
        let last_seen = github.sim.read(|w, _| {
            w.runners
                .values()
                .map(|r| {
                    let seen = r.last_seen.unwrap_or(r.registered_at);
                    (r.name.clone(), common::secs(sim_t0, seen))
                })
                .collect()
        });
        secret_watch.abort();
        reservation_watch.abort();
        drop(supervisor);
        replicas.lock().expect("replicas").stop_all();
        nodes.shutdown().await?;
        let secrets = secrets.lock().expect("secrets").clone();
        let reservations = std::mem::take(&mut *reservations.lock().expect("reservations"));
        Ok(Observed {
            fired,
            job_ids,
            drained,
            drain_seconds,
            settle_seconds,
            jobs,
            accounting,
            crashed,
            leftover,
            cleanup_seconds,
            last_seen,
            sim_t0,
            reservations,
            secrets,
            run_seconds: started.elapsed().as_secs_f64(),
            apiserver_proxy: api_proxy.faults().counts(),
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
    owners: &[&str],
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
    github
        .sim
        .update(|w, now| {
            let scope = hangar_github::Scope::repo("octo", "app");
            let (token, _) =
                w.create_runner_token(&scope, ghsim::world::TokenKind::Registration, now);
            w.register_runner(
                ghsim::world::RegisterRunner {
                    url: format!("{}octo/app", github.url),
                    token,
                    name: FOREIGN_RUNNER.to_owned(),
                    labels: vec!["user".to_owned()],
                    no_default_labels: false,
                    runner_group: None,
                    ephemeral: false,
                    replace: false,
                },
                now,
            )
        })
        .context("registering the user's runner")?;
    let apply = PatchParams::apply("chaos").force();
    let deployments = Api::<RunnerDeployment>::namespaced(client.clone(), NAMESPACE);
    for (name, ephemeral) in [(EPH, true), (PULL, true), (PERSIST, false)] {
        if !owners.contains(&name) {
            continue;
        }
        let replicas = initial_runners(name);
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
            "replicas": SET_REPLICAS,
            "repository": "octo/app",
            "labels": [SET],
            "template": {"spec": pod_spec(0)},
        },
    });
    if owners.contains(&SET) {
        Api::<RunnerSet>::namespaced(client.clone(), NAMESPACE)
            .patch(SET, &apply, &Patch::Apply(&set))
            .await?;
    }
    let autoscalers = Api::<HorizontalRunnerAutoscaler>::namespaced(client.clone(), NAMESPACE);
    for (name, spec) in [
        (
            EPH,
            json!({
                "minReplicas": 0,
                "maxReplicas": MAX_REPLICAS,
                "scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "duration": "5m"}],
            }),
        ),
        (
            PULL,
            json!({
                "minReplicas": 1,
                "maxReplicas": MAX_REPLICAS,
                "metrics": [{"type": "TotalNumberOfQueuedAndInProgressWorkflowRuns"}],
            }),
        ),
        // The busy share measures demand only for persistent runners: an ephemeral runner is
        // idle between its job and its replacement's registration, so with short jobs the
        // share stays under the scale-up threshold while jobs queue (a 300-fault run with this
        // metric on `pull` left 20 jobs queued after a 300 s drain, its pool swinging 1↔2).
        (
            PERSIST,
            json!({
                "minReplicas": 1,
                "maxReplicas": MAX_REPLICAS,
                "metrics": [{
                    "type": "PercentageRunnersBusy",
                    "scaleUpThreshold": "0.75",
                    "scaleDownThreshold": "0.3",
                }],
            }),
        ),
    ] {
        if !owners.contains(&name) {
            continue;
        }
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
    let expected: usize = owners.iter().map(|o| initial_runners(o)).sum();
    let ready = until_true(SETUP_LIMIT, || {
        github
            .sim
            .read(|w, _| w.runners.values().filter(|r| r.online()).count() >= expected)
    })
    .await;
    ensure!(
        ready,
        "{expected} runners were not online within {SETUP_LIMIT:?}"
    );
    Ok(())
}

/// Queues jobs for the owners' labels at `rate` per second for `window`; the label sequence
/// comes from the seed too. Returns the job ids.
async fn queue_jobs(
    sim: ghsim::Sim,
    seed: u64,
    labels: Vec<&'static str>,
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
        let label = labels[rng.usize(0..labels.len())];
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

/// The webhook servers' capacity reservations for jobs, as sampled from the autoscalers.
#[derive(Debug, Default)]
struct Reservations {
    /// Per job id, each distinct reservation that added runners for it (autoscaler, effective
    /// time), with when it was first seen (seconds into the fault window).
    by_job: BTreeMap<i64, BTreeMap<(String, String), f64>>,
}

/// Every second, the autoscalers' reservations that add runners for a job, so a job reserved
/// twice (two webhook replicas each counting one delivery) shows.
async fn collect_reservations(client: Client, t0: Instant, into: Arc<Mutex<Reservations>>) {
    let api = Api::<HorizontalRunnerAutoscaler>::namespaced(client, NAMESPACE);
    loop {
        if let Ok(list) = api.list(&ListParams::default()).await {
            let seconds = t0.elapsed().as_secs_f64();
            let mut into = into.lock().expect("reservations");
            for hra in list {
                let name = hra.name_any();
                for r in hra.spec.capacity_reservations.unwrap_or_default() {
                    let (Some(job), true) = (r.job_id, r.replicas.unwrap_or(0) > 0) else {
                        continue;
                    };
                    let effective = r
                        .effective_time
                        .map(|t| t.0.to_string())
                        .unwrap_or_default();
                    into.by_job
                        .entry(job)
                        .or_default()
                        .entry((name.clone(), effective))
                        .or_insert(seconds);
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Deletes every owner, then waits up to `limit` for their pods, Runners, Secrets and GitHub
/// registrations to go; returns what is left.
async fn clean_up(
    client: &Client,
    sim: &ghsim::Sim,
    owners: &[&str],
    limit: Duration,
) -> anyhow::Result<Leftover> {
    let dp = DeleteParams::default();
    let hras = Api::<HorizontalRunnerAutoscaler>::namespaced(client.clone(), NAMESPACE);
    let rds = Api::<RunnerDeployment>::namespaced(client.clone(), NAMESPACE);
    for name in HRAS.into_iter().filter(|h| owners.contains(h)) {
        hras.delete(name, &dp).await?;
    }
    // What `InvalidSpec` applied, if it fired and the apiserver took it.
    if let Err(e) = rds.delete(INVALID, &dp).await {
        ensure!(
            matches!(&e, kube::Error::Api(a) if a.code == 404),
            "deleting RunnerDeployment {INVALID}: {e}"
        );
    }
    for name in owners {
        if *name == SET {
            Api::<RunnerSet>::namespaced(client.clone(), NAMESPACE)
                .delete(SET, &dp)
                .await?;
        } else {
            rds.delete(name, &dp).await?;
        }
    }
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

/// Whether a registration is one Hangar created: named `<owner>-…` and labelled `<owner>`, as
/// Hangar names and labels an owner's runners.
fn hangars_registration(runner: &ghsim::world::Runner) -> bool {
    let labels = runner.label_names();
    LABELS.iter().any(|owner| {
        runner.name.starts_with(&format!("{owner}-")) && labels.iter().any(|l| l == owner)
    })
}

/// Registrations Hangar created, by name, and the others.
fn registrations(sim: &ghsim::Sim) -> (Vec<String>, Vec<String>) {
    let (mut hangars, mut foreign) = (Vec::new(), Vec::new());
    sim.read(|w, _| {
        for r in w.runners.values() {
            if hangars_registration(r) {
                hangars.push(r.name.clone());
            } else {
                foreign.push(r.name.clone());
            }
        }
    });
    hangars.sort();
    foreign.sort();
    (hangars, foreign)
}

/// Hangar's registrations that are offline with no pod or Runner of their name: what the
/// leaked-registration sweep is there to remove.
async fn orphaned_registrations(client: &Client, sim: &ghsim::Sim) -> anyhow::Result<Vec<String>> {
    let offline: Vec<String> = sim.read(|w, _| {
        w.runners
            .values()
            .filter(|r| hangars_registration(r) && !r.online())
            .map(|r| r.name.clone())
            .collect()
    });
    let pods = pod_names(client).await?;
    let runners = runner_names(client).await?;
    Ok(offline
        .into_iter()
        .filter(|n| !pods.contains(n) && !runners.contains(n))
        .collect())
}

async fn pod_names(client: &Client) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await?
        .into_iter()
        .map(|p| p.name_any())
        .collect();
    names.sort();
    Ok(names)
}

async fn runner_names(client: &Client) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = Api::<Runner>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await?
        .into_iter()
        .map(|r| r.name_any())
        .collect();
    names.sort();
    Ok(names)
}

async fn leftover(client: &Client, sim: &ghsim::Sim) -> anyhow::Result<Leftover> {
    let names = |list: Vec<String>| {
        let mut list = list;
        list.sort();
        list
    };
    let lp = ListParams::default();
    let (registrations, foreign_registrations) = registrations(sim);
    Ok(Leftover {
        registrations,
        foreign_registrations,
        pods: pod_names(client).await?,
        runners: runner_names(client).await?,
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
async fn until_true(limit: Duration, done: impl FnMut() -> bool) -> bool {
    let poll = Duration::from_millis(200);
    eventually::until("a chaos condition", limit, poll, done)
        .await
        .is_ok()
}

// ---------------------------------------------------------------------------------------------
// Faults.

/// What a fault hit.
struct Hit {
    outcome: String,
    /// Runner pods whose jobs the fault itself may end: a runner crash or OOM kill, a user
    /// deleting a pod (the kubelet stops its containers at once; without the admission webhook
    /// nothing can refuse), a lost node. Those interruptions are counted apart from Hangar's.
    victims: Vec<String>,
}

impl Hit {
    fn none(outcome: impl Into<String>) -> Self {
        Self {
            outcome: outcome.into(),
            victims: Vec::new(),
        }
    }
}

/// Nodes started beyond `--nodes`: one per `NodeLost` fault, so the run never has fewer.
fn spare_nodes(plan: &[Scheduled]) -> usize {
    plan.iter()
        .filter(|s| s.fault.kind() == Kind::NodeLost)
        .count()
}

/// Name of the RunnerDeployment `InvalidSpec` applies.
const INVALID: &str = "invalid";
/// How long a deleted owner may take to go (its busy runners finishing their jobs) before
/// the harness gives up applying it again, which ends the run with an error.
const REAPPLY_LIMIT: Duration = Duration::from_secs(300);
/// How long a replica that exited on its own (it lost its lease) stays down: the kubelet's
/// first crash-loop back-off.
const SELF_EXIT_RESTART: Duration = Duration::from_secs(10);
/// The autoscalers' `maxReplicas`.
const MAX_REPLICAS: u32 = 4;
/// How long an `hra-max-replicas` fault holds before the user puts the bound back: left in
/// place, a pool capped at one runner cannot keep up with its share of the load, and the jobs
/// queued meanwhile would be stranded by the harness, not by Hangar.
const BOUNDS_HOLD: Duration = Duration::from_secs(30);

struct Injector<'a> {
    client: Client,
    sim: ghsim::Sim,
    nodes: &'a nodesim::NodeSimHandle,
    replicas: Arc<Mutex<Replicas>>,
    owners: &'a [&'static str],
    /// Read-modify-write of ghsim's fault settings, one window at a time.
    github_faults: Arc<tokio::sync::Mutex<()>>,
    rollouts: AtomicUsize,
    lost_nodes: Mutex<BTreeSet<String>>,
    /// The simulated runners' fault switches (image pulls, registration).
    runner_faults: RunnerFaults,
    /// The control plane's directory (to stop and start its apiserver).
    cluster: PathBuf,
    /// The fault proxy between the replicas and the apiserver.
    api_faults: fault_proxy::Faults,
    /// Set while an `apiserver-restart` has the apiserver down.
    apiserver_down: Arc<AtomicBool>,
    windows: Arc<ProxyWindows>,
}

/// The latest window opened per proxy fault: a window's end switches the fault off only if no
/// later window of that fault opened meanwhile.
#[derive(Debug, Default)]
struct ProxyWindows {
    gone: AtomicU64,
    conflicts: AtomicU64,
    lag: AtomicU64,
    /// Per autoscaler (index in [`HRAS`]): the latest `hra-max-replicas` fault.
    bounds: [AtomicU64; HRAS.len()],
}

/// The resources whose watches a `watch-lag` fault holds back: those the sets count their
/// runners by.
const LAGGING_WATCHES: [&str; 3] = ["runners", "pods", "statefulsets"];

/// How long the harness waits for a restarted apiserver before firing a fault that needs it.
const APISERVER_BACK_LIMIT: Duration = Duration::from_secs(60);

impl Injector<'_> {
    /// [`Injector::fire`], but a fault that fails while the apiserver is down (an
    /// `apiserver-restart` in progress) is tried again once it is back, so the run's own calls
    /// ride out the outage.
    async fn fire_when_up(
        &self,
        s: &Scheduled,
        pending: &mut JoinSet<anyhow::Result<()>>,
    ) -> anyhow::Result<Hit> {
        match self.fire(s, pending).await {
            Err(e) if self.apiserver_down.load(Ordering::SeqCst) => {
                let back = until_true(APISERVER_BACK_LIMIT, || {
                    !self.apiserver_down.load(Ordering::SeqCst)
                })
                .await;
                ensure!(
                    back,
                    "the apiserver was down for {APISERVER_BACK_LIMIT:?}: {e:#}"
                );
                let mut hit = self.fire(s, pending).await?;
                hit.outcome = format!("{} (after the apiserver came back)", hit.outcome);
                Ok(hit)
            }
            other => other,
        }
    }

    /// Fires `s`; restarts and window ends go to `pending`. Returns what it hit.
    async fn fire(
        &self,
        s: &Scheduled,
        pending: &mut JoinSet<anyhow::Result<()>>,
    ) -> anyhow::Result<Hit> {
        let one = |pod: &String, outcome: String| Hit {
            outcome,
            victims: vec![pod.clone()],
        };
        match &s.fault {
            Fault::DeleteRunnerPod { pick } => {
                let pods = self.runner_pods(false).await?;
                let Some(pod) = pick_from(&pods, *pick) else {
                    return Ok(Hit::none("skipped: no runner pod"));
                };
                Api::<Pod>::namespaced(self.client.clone(), NAMESPACE)
                    .delete(pod, &DeleteParams::default())
                    .await
                    .with_context(|| format!("deleting pod {pod}"))?;
                Ok(one(pod, format!("deleted pod {pod}")))
            }
            Fault::RunnerCrash { pick } | Fault::RunnerOom { pick } => {
                let pods = self.runner_pods(true).await?;
                let Some(pod) = pick_from(&pods, *pick) else {
                    return Ok(Hit::none("skipped: no running runner pod"));
                };
                let (fault, what) = match s.fault {
                    Fault::RunnerOom { .. } => (nodesim::Fault::OomKill, "OOM-killed"),
                    _ => (nodesim::Fault::Crash(1), "crashed"),
                };
                self.nodes
                    .inject(NAMESPACE, pod, "runner", fault)
                    .await
                    .with_context(|| format!("{what} the runner of {pod}"))?;
                Ok(one(pod, format!("{what} {pod}")))
            }
            Fault::NodeLost { pick } => {
                let node = {
                    let lost = self.lost_nodes.lock().expect("lost nodes");
                    let mut live: Vec<String> = self
                        .nodes
                        .node_names()
                        .into_iter()
                        .filter(|n| !lost.contains(n))
                        .collect();
                    live.sort();
                    pick_from(&live, *pick).cloned()
                };
                let Some(node) = node else {
                    return Ok(Hit::none("skipped: no live node"));
                };
                let on_node: Vec<String> = Api::<Pod>::namespaced(self.client.clone(), NAMESPACE)
                    .list(&ListParams::default())
                    .await
                    .context("listing pods")?
                    .into_iter()
                    .filter(|p| {
                        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str())
                    })
                    .map(|p| p.name_any())
                    .collect();
                self.lost_nodes
                    .lock()
                    .expect("lost nodes")
                    .insert(node.clone());
                self.nodes
                    .fail_node(&node, nodesim::NodeFailure::Deleted)
                    .await
                    .with_context(|| format!("failing node {node}"))?;
                Ok(Hit {
                    outcome: format!("lost node {node} with pods {}", on_node.join(", ")),
                    victims: on_node,
                })
            }
            _ => self.act(s, pending).await.map(Hit::none),
        }
    }

    /// Fires a fault that ends no job by itself.
    async fn act(
        &self,
        s: &Scheduled,
        pending: &mut JoinSet<anyhow::Result<()>>,
    ) -> anyhow::Result<String> {
        match &s.fault {
            Fault::DeleteRunnerPod { .. }
            | Fault::RunnerCrash { .. }
            | Fault::RunnerOom { .. }
            | Fault::NodeLost { .. } => unreachable!("fire handles faults with victims"),
            Fault::DeleteRunner { pick } => {
                let api = Api::<Runner>::namespaced(self.client.clone(), NAMESPACE);
                let mut runners: Vec<String> = api
                    .list(&ListParams::default())
                    .await
                    .context("listing Runners")?
                    .into_iter()
                    .filter(|r| r.metadata.deletion_timestamp.is_none())
                    .map(|r| r.name_any())
                    .collect();
                runners.sort();
                let Some(runner) = pick_from(&runners, *pick) else {
                    return Ok("skipped: no Runner".to_owned());
                };
                api.delete(runner, &DeleteParams::default())
                    .await
                    .with_context(|| format!("deleting Runner {runner}"))?;
                Ok(format!("deleted Runner {runner}"))
            }
            Fault::InvalidSpec => {
                let placement = self.nodes.placement();
                let rd = json!({
                    "apiVersion": "actions.summerwind.dev/v1alpha1",
                    "kind": "RunnerDeployment",
                    "metadata": {"name": INVALID},
                    "spec": {"replicas": 1, "template": {"spec": {
                        "labels": [INVALID],
                        "nodeSelector": placement.node_selector,
                        "tolerations": placement.tolerations,
                    }}},
                });
                let applied = Api::<RunnerDeployment>::namespaced(self.client.clone(), NAMESPACE)
                    .patch(
                        INVALID,
                        &PatchParams::apply("chaos").force(),
                        &Patch::Apply(&rd),
                    )
                    .await;
                Ok(match applied {
                    Ok(_) => format!("applied RunnerDeployment {INVALID} with no repository"),
                    // The apiserver refusing it is as good an answer as Hangar reporting it.
                    Err(kube::Error::Api(e)) => format!("the apiserver refused it: {}", e.message),
                    Err(e) => return Err(e).context("applying an invalid RunnerDeployment"),
                })
            }
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
            Fault::GithubServerErrors { .. }
            | Fault::GithubSecondaryLimits { .. }
            | Fault::GithubForbidDeleteRunner { .. }
            | Fault::WebhookDrop { .. }
            | Fault::WebhookDuplicate { .. }
            | Fault::WebhookReorder { .. }
            | Fault::GithubSlow { .. }
            | Fault::WebhookDelay { .. }
            | Fault::GithubTimeouts { .. }
            | Fault::GithubResets { .. }
            | Fault::GithubBadCredentials { .. }
            | Fault::GithubNotFound { .. } => {
                let (field, on, off, window_ms) =
                    github_setting(&s.fault).context("a windowed GitHub fault")?;
                self.github_patch_window(
                    json!({field: on}),
                    json!({field: off}),
                    window_ms,
                    pending,
                )
                .await
            }
            Fault::GithubPrimaryLimit { status, window_ms } => {
                // The budget resets when the window ends (GitHub's reset is whole seconds).
                let until = self.sim.now().as_second() + window_ms.div_ceil(1000) as i64;
                self.github_patch_window(
                    json!({"primary_exhausted_until": until, "primary_exhausted_status": status}),
                    json!({"primary_exhausted_until": null}),
                    *window_ms,
                    pending,
                )
                .await
            }
            Fault::WebhookRedeliver {
                rate,
                max_delay_ms,
                window_ms,
            } => {
                self.github_patch_window(
                    json!({
                        "webhook_redelivery_rate": rate,
                        "webhook_redelivery_max_delay_ms": max_delay_ms,
                    }),
                    json!({"webhook_redelivery_rate": 0.0}),
                    *window_ms,
                    pending,
                )
                .await
            }
            Fault::ImagePullFailure {
                by_node,
                pick,
                window_ms,
            }
            | Fault::RunnerNeverRegisters {
                by_node,
                pick,
                window_ms,
            }
            | Fault::RunnerCutOff {
                by_node,
                pick,
                window_ms,
            } => {
                let Some((target, which)) = self.pod_target(*by_node, *pick) else {
                    return Ok("skipped: no live node".to_owned());
                };
                let (fault, what) = match s.fault {
                    Fault::ImagePullFailure { .. } => {
                        (RunnerFault::ImagePull, "image pulls fail for new pods")
                    }
                    Fault::RunnerNeverRegisters { .. } => (
                        RunnerFault::NeverRegisters,
                        "runners never register for new pods",
                    ),
                    _ => (RunnerFault::CutOff, "runners lose GitHub"),
                };
                let id = self.runner_faults.add(fault, target);
                let faults = self.runner_faults.clone();
                let window = Duration::from_millis(*window_ms);
                pending.spawn(async move {
                    tokio::time::sleep(window).await;
                    faults.remove(id);
                    Ok(())
                });
                Ok(format!("{what} {which} for {window_ms} ms"))
            }
            Fault::NodeNotReady { pick, window_ms } => {
                let Some((PodMatch::Node(node), _)) = self.pod_target(true, *pick) else {
                    return Ok("skipped: no live node".to_owned());
                };
                self.nodes
                    .fail_node(&node, nodesim::NodeFailure::NotReady)
                    .await
                    .with_context(|| format!("making node {node} NotReady"))?;
                // A node lost meanwhile stays lost: recovering it is a no-op.
                self.nodes
                    .recover_node_after(&node, Duration::from_millis(*window_ms))
                    .with_context(|| format!("recovering node {node}"))?;
                Ok(format!("node {node} NotReady for {window_ms} ms"))
            }
            Fault::DeleteRunnerDeployment {
                owner,
                reapply_after_ms,
            } => {
                let deployments: Vec<&'static str> = [EPH, PULL, PERSIST]
                    .into_iter()
                    .filter(|o| self.owners.contains(o))
                    .collect();
                let Some(&name) =
                    deployments.get((*owner % deployments.len().max(1) as u64) as usize)
                else {
                    return Ok("skipped: no RunnerDeployment".to_owned());
                };
                self.delete_and_reapply(
                    ApiResource::erase::<RunnerDeployment>(&()),
                    name,
                    *reapply_after_ms,
                    pending,
                )
                .await
            }
            Fault::DeleteRunnerSet { reapply_after_ms } => {
                if !self.owners.contains(&SET) {
                    return Ok("skipped: no RunnerSet".to_owned());
                }
                self.delete_and_reapply(
                    ApiResource::erase::<RunnerSet>(&()),
                    SET,
                    *reapply_after_ms,
                    pending,
                )
                .await
            }
            Fault::TemplateChange { owner } => {
                let name = self.owners[(*owner % self.owners.len() as u64) as usize];
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
            Fault::ApiserverRestart { down_ms, kill } => {
                if self.apiserver_down.swap(true, Ordering::SeqCst) {
                    return Ok("skipped: the apiserver is already down".to_owned());
                }
                let signal = if *kill { Signal::Kill } else { Signal::Term };
                let cluster = self.cluster.clone();
                let stopped = tokio::task::spawn_blocking(move || {
                    ControlPlane::stop_apiserver(&cluster, signal)
                })
                .await
                .context("stopping the apiserver")?;
                if let Err(e) = stopped {
                    self.apiserver_down.store(false, Ordering::SeqCst);
                    return Err(e).context("stopping the apiserver");
                }
                let (cluster, down, down_ms) =
                    (self.cluster.clone(), self.apiserver_down.clone(), *down_ms);
                pending.spawn(async move {
                    tokio::time::sleep(Duration::from_millis(down_ms)).await;
                    let started =
                        ControlPlane::start_apiserver(&cluster, Duration::from_secs(120)).await;
                    down.store(false, Ordering::SeqCst);
                    started.context("starting the apiserver again")
                });
                Ok(format!(
                    "{signal:?} kube-apiserver, start it in {down_ms} ms"
                ))
            }
            Fault::WatchDisconnect => {
                let open = self.api_faults.counts().watches_open;
                self.api_faults.disconnect_watches();
                Ok(format!("ended {open} open watches"))
            }
            Fault::WatchGone { window_ms } => {
                let generation = self.windows.gone.fetch_add(1, Ordering::SeqCst) + 1;
                self.api_faults.set_watch_gone(true);
                let (faults, windows, window_ms) =
                    (self.api_faults.clone(), self.windows.clone(), *window_ms);
                pending.spawn(async move {
                    tokio::time::sleep(Duration::from_millis(window_ms)).await;
                    if windows.gone.load(Ordering::SeqCst) == generation {
                        faults.set_watch_gone(false);
                    }
                    Ok(())
                });
                Ok(format!(
                    "watches from a resourceVersion get 410 for {window_ms} ms"
                ))
            }
            Fault::WriteConflicts { rate, window_ms } => {
                let generation = self.windows.conflicts.fetch_add(1, Ordering::SeqCst) + 1;
                self.api_faults.set_write_conflicts(*rate);
                let (faults, windows, window_ms) =
                    (self.api_faults.clone(), self.windows.clone(), *window_ms);
                pending.spawn(async move {
                    tokio::time::sleep(Duration::from_millis(window_ms)).await;
                    if windows.conflicts.load(Ordering::SeqCst) == generation {
                        faults.set_write_conflicts(0.0);
                    }
                    Ok(())
                });
                Ok(format!(
                    "{rate} of writes get 409 Conflict for {window_ms} ms"
                ))
            }
            Fault::WatchLag {
                pick,
                delay_ms,
                window_ms,
            } => {
                let resource = LAGGING_WATCHES
                    [usize::try_from(*pick % LAGGING_WATCHES.len() as u64).unwrap_or_default()];
                let generation = self.windows.lag.fetch_add(1, Ordering::SeqCst) + 1;
                self.api_faults
                    .set_watch_delay(resource, Duration::from_millis(*delay_ms));
                let (faults, windows, window_ms) =
                    (self.api_faults.clone(), self.windows.clone(), *window_ms);
                pending.spawn(async move {
                    tokio::time::sleep(Duration::from_millis(window_ms)).await;
                    // A later window (maybe of another resource) ends every lag with its own.
                    if windows.lag.load(Ordering::SeqCst) == generation {
                        for resource in LAGGING_WATCHES {
                            faults.set_watch_delay(resource, Duration::ZERO);
                        }
                    }
                    Ok(())
                });
                Ok(format!(
                    "watches of {resource} lag {delay_ms} ms for {window_ms} ms"
                ))
            }
            Fault::HraMaxReplicas { hra, max_replicas } => {
                let hras: Vec<&str> = HRAS
                    .into_iter()
                    .filter(|h| self.owners.contains(h))
                    .collect();
                let Some(&name) = hras.get((*hra % hras.len().max(1) as u64) as usize) else {
                    return Ok("skipped: no autoscaler".to_owned());
                };
                // `pull` and `persist` keep one runner at least; maxReplicas below minReplicas
                // is invalid.
                let max = if name != EPH {
                    (*max_replicas).max(1)
                } else {
                    *max_replicas
                };
                let api =
                    Api::<HorizontalRunnerAutoscaler>::namespaced(self.client.clone(), NAMESPACE);
                let patch = json!({"spec": {"maxReplicas": max}});
                api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("setting maxReplicas of {name}"))?;
                let slot = HRAS.iter().position(|h| *h == name).unwrap_or_default();
                let generation = self.windows.bounds[slot].fetch_add(1, Ordering::SeqCst) + 1;
                let windows = self.windows.clone();
                pending.spawn(async move {
                    tokio::time::sleep(BOUNDS_HOLD).await;
                    let back = json!({"spec": {"maxReplicas": MAX_REPLICAS}});
                    let deadline = Instant::now() + REAPPLY_LIMIT;
                    // Through an apiserver restart, like every put-back.
                    while windows.bounds[slot].load(Ordering::SeqCst) == generation {
                        match api
                            .patch(name, &PatchParams::default(), &Patch::Merge(&back))
                            .await
                        {
                            Ok(_) => break,
                            Err(e) if Instant::now() >= deadline => {
                                return Err(e)
                                    .with_context(|| format!("restoring maxReplicas of {name}"));
                            }
                            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                        }
                    }
                    Ok(())
                });
                Ok(format!("{name} maxReplicas {max} for {BOUNDS_HOLD:?}"))
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

    /// Merges the fault fields of `on` into ghsim's now and those of `off` after `window_ms`.
    async fn github_patch_window(
        &self,
        on: serde_json::Value,
        off: serde_json::Value,
        window_ms: u64,
        pending: &mut JoinSet<anyhow::Result<()>>,
    ) -> anyhow::Result<String> {
        let set = {
            let sim = self.sim.clone();
            let lock = self.github_faults.clone();
            move |patch: serde_json::Value| {
                let (sim, lock) = (sim.clone(), lock.clone());
                async move {
                    let _one_at_a_time = lock.lock().await;
                    let mut patch = patch;
                    if let Some(fields) = patch.as_object_mut() {
                        // A short retry-after: GitHub's minute would idle the run, not test more.
                        fields.insert("secondary_retry_after_secs".to_owned(), json!(5));
                    }
                    let merged = sim
                        .faults()
                        .merged(patch.clone())
                        .with_context(|| format!("setting ghsim faults {patch}"))?;
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
        let fields: Vec<String> = on
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect();
        Ok(format!("{} for {window_ms} ms", fields.join(", ")))
    }

    /// The runner pods a node fault targets: those on a live node (`by_node`) or those of an
    /// owner (Hangar names an owner's pods `<owner>-…`), from `pick`; with a description.
    fn pod_target(&self, by_node: bool, pick: u64) -> Option<(PodMatch, String)> {
        if by_node {
            let lost = self.lost_nodes.lock().expect("lost nodes");
            let mut live: Vec<String> = self
                .nodes
                .node_names()
                .into_iter()
                .filter(|n| !lost.contains(n))
                .collect();
            live.sort();
            let node = pick_from(&live, pick)?.clone();
            Some((PodMatch::Node(node.clone()), format!("on node {node}")))
        } else {
            let owner = self.owners[(pick % self.owners.len() as u64) as usize];
            Some((
                PodMatch::NamePrefix(format!("{owner}-")),
                format!("of owner {owner}"),
            ))
        }
    }

    /// Deletes the owner `name` (of resource `resource`) as a user would, and applies it again
    /// with the spec it had after `after_ms`, once the deleted one is gone (Hangar keeps it
    /// while its busy runners finish their jobs).
    async fn delete_and_reapply(
        &self,
        resource: ApiResource,
        name: &'static str,
        after_ms: u64,
        pending: &mut JoinSet<anyhow::Result<()>>,
    ) -> anyhow::Result<String> {
        let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), NAMESPACE, &resource);
        let kind = resource.kind.clone();
        let Some(current) = api
            .get_opt(name)
            .await
            .with_context(|| format!("reading {kind} {name}"))?
        else {
            return Ok(format!("skipped: {kind} {name} is gone"));
        };
        if current.metadata.deletion_timestamp.is_some() {
            return Ok(format!("skipped: {kind} {name} is being deleted"));
        }
        let again = json!({
            "apiVersion": resource.api_version,
            "kind": kind,
            "metadata": {"name": name},
            "spec": current.data.get("spec").cloned().unwrap_or_default(),
        });
        api.delete(name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting {kind} {name}"))?;
        let what = format!("{kind} {name}");
        pending.spawn(async move {
            tokio::time::sleep(Duration::from_millis(after_ms)).await;
            let deadline = Instant::now() + REAPPLY_LIMIT;
            // The apiserver may be down meanwhile (an `apiserver-restart`): errors are retried
            // until the deadline, like the wait for the owner's runners to retire.
            loop {
                let gone = match api.get_opt(name).await {
                    Ok(found) => found.is_none(),
                    Err(e) => {
                        ensure!(
                            Instant::now() < deadline,
                            "reading {what} for {REAPPLY_LIMIT:?}: {e}"
                        );
                        false
                    }
                };
                if gone {
                    let applied = api
                        .patch(
                            name,
                            &PatchParams::apply("chaos").force(),
                            &Patch::Apply(&again),
                        )
                        .await;
                    match applied {
                        Ok(_) => break,
                        Err(e) if Instant::now() >= deadline => {
                            return Err(e).with_context(|| format!("applying {what} again"));
                        }
                        Err(_) => {}
                    }
                }
                ensure!(
                    Instant::now() < deadline,
                    "deleted {what} still there after {REAPPLY_LIMIT:?}: its runners did not retire"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            eprintln!("chaos: applied {what} again");
            Ok(())
        });
        Ok(format!(
            "deleted {kind} {name}; applying it again in {after_ms} ms"
        ))
    }

    /// Runner pods in the namespace not being deleted (only those whose runner container
    /// runs, if asked), by name.
    async fn runner_pods(&self, running: bool) -> anyhow::Result<Vec<String>> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), NAMESPACE)
            .list(&ListParams::default())
            .await
            .context("listing runner pods")?;
        let mut names: Vec<String> = pods
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| {
                let runner_runs = p
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.name == "runner"
                                && c.state.as_ref().is_some_and(|s| s.running.is_some())
                        })
                    });
                !running || runner_runs
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
    /// A fault stopped it; that fault's own restart brings it back.
    stopped_by_fault: bool,
    /// When it was first seen exited on its own (a replica that lost its lease exits).
    exited_at: Option<Instant>,
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
            .arg(format!(
                "--leaked-registration-sweep-interval={}s",
                SWEEP_INTERVAL.as_secs()
            ))
            .arg(format!(
                "--leaked-registration-grace={}s",
                SWEEP_GRACE.as_secs()
            ))
            .arg(format!(
                "--registration-timeout={}s",
                REGISTRATION_TIMEOUT.as_secs()
            ))
            .arg(format!(
                "--node-not-ready-timeout={}s",
                NODE_NOT_READY_TIMEOUT.as_secs()
            ))
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
        slot.stopped_by_fault = false;
        slot.exited_at = None;
        Ok(())
    }

    /// Restarts a replica that exited on its own [`SELF_EXIT_RESTART`] after it was first seen
    /// exited, as the kubelet restarts a Deployment's container; a replica a fault stopped is
    /// left to that fault's restart.
    fn restart_exited(&mut self, now: Instant) -> anyhow::Result<()> {
        for i in 0..self.slots.len() {
            if self.slots[i].stopped_by_fault || self.alive(i) {
                continue;
            }
            let exited_at = *self.slots[i].exited_at.get_or_insert(now);
            if now.duration_since(exited_at) >= SELF_EXIT_RESTART {
                self.reap(i)?;
                self.spawn(i)?;
            }
        }
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
        self.slots[i].stopped_by_fault = true;
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

/// The task that restarts replicas that exited on their own ([`Replicas::restart_exited`]);
/// it ends with the run, however the run ends.
struct Supervisor(tokio::task::JoinHandle<()>);

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.0.abort();
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
    /// What the fault proxy between the replicas and the apiserver did.
    apiserver_proxy: fault_proxy::Counts,
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
    /// The fault that caused it, else the last fault that fired before it was seen (none if it
    /// happened before the first fault): with the seed, where a replay should look.
    fault_index: Option<usize>,
    /// How `fault_index` relates to the violation.
    fault: Blame,
    what: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Blame {
    /// The fault whose effect it is.
    Caused,
    /// The last fault before the moment it happened.
    LastBefore,
    /// Seen only at the end: the last fault of the run.
    LastOfRun,
}

/// The index of the last fault fired at or before `seconds` into the fault window.
fn last_fault_before(fired: &[Fired], seconds: f64) -> Option<usize> {
    fired
        .iter()
        .filter(|f| f.at_seconds <= seconds)
        .map(|f| f.index)
        .max()
}

#[derive(Debug, Serialize)]
struct JobCounts {
    queued: usize,
    completed: usize,
    /// On a pod an injected crash, OOM kill, pod deletion or node loss ended.
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
    budget_per_job: f64,
    /// Rate-limit cost divided by the jobs queued.
    cost_per_job: f64,
    /// The controller's calls by endpoint, most charged first.
    by_endpoint: Vec<EndpointCost>,
}

#[derive(Debug, Serialize)]
struct EndpointCost {
    endpoint: String,
    calls: u64,
    charged: u64,
    not_modified: u64,
    errors: u64,
}

#[derive(Debug, Serialize)]
struct Timings {
    run_seconds: f64,
    drain_seconds: f64,
    drained: bool,
    /// Waiting, owners still there, for the sweep to remove registrations left without a pod.
    settle_seconds: f64,
    cleanup_seconds: f64,
    total_seconds: f64,
}

fn report(run: &Run<'_>, o: Observed, total: Duration) -> Report {
    let seed = run.seed;
    let last_of_run = o.fired.iter().map(|f| f.index).max();
    let violation = |(fault, fault_index): (Blame, Option<usize>), what: String| Violation {
        seed,
        fault_index,
        fault,
        what,
    };
    let at_end = (Blame::LastOfRun, last_of_run);
    let before = |seconds: f64| (Blame::LastBefore, last_fault_before(&o.fired, seconds));
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
                match j.completed_at {
                    Some(at) => before(common::secs(o.sim_t0, at)),
                    None => at_end,
                },
                format!("job {} interrupted on runner {runner}", j.id),
            )),
        }
    }
    let interrupted_otherwise = interrupted.len();
    add(
        "jobs_interrupted_by_hangar",
        "no job is interrupted except on a pod an injected crash, OOM kill, pod deletion or node loss ended",
        interrupted,
    );
    let stranded: Vec<Violation> = o
        .jobs
        .iter()
        .filter(|j| j.status != JobStatus::Completed)
        .map(|j| {
            violation(
                at_end,
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
            .map(|n| violation(at_end, format!("{what} {n} left after cleanup")))
            .collect()
    };
    add(
        "leaked_registrations",
        "no GitHub runner registration is left once the owners are deleted",
        o.leftover
            .registrations
            .iter()
            // A registration left by a crashed or deleted pod points at that fault, any other at
            // the last fault before its runner was last seen online.
            .map(|n| {
                let blame = match (o.crashed.get(n), o.last_seen.get(n)) {
                    (Some(&index), _) => (Blame::Caused, Some(index)),
                    (None, Some(&seconds)) => before(seconds),
                    (None, None) => at_end,
                };
                violation(blame, format!("registration {n} left after cleanup"))
            })
            .collect(),
    );
    add(
        "foreign_registrations_kept",
        "Hangar removes no registration it did not create (a user's runner stays)",
        if o.leftover
            .foreign_registrations
            .iter()
            .any(|n| n == FOREIGN_RUNNER)
        {
            Vec::new()
        } else {
            vec![violation(
                at_end,
                format!("the user's runner {FOREIGN_RUNNER} was removed"),
            )]
        },
    );
    // A job GitHub requeued (its runner was lost) may rightly be reserved again.
    let requeued: BTreeSet<i64> = o
        .jobs
        .iter()
        .filter(|j| j.requeues > 0)
        .map(|j| j.id as i64)
        .collect();
    add(
        "deliveries_double_counted",
        "no job adds runners through more than one capacity reservation, across webhook replicas",
        o.reservations
            .by_job
            .iter()
            .filter(|(job, seen)| seen.len() > 1 && !requeued.contains(job))
            .map(|(job, seen)| {
                // Blamed on the last fault before the second reservation appeared.
                let mut times: Vec<f64> = seen.values().copied().collect();
                times.sort_by(f64::total_cmp);
                violation(
                    before(times[1]),
                    format!(
                        "job {job} reserved {} times: {}",
                        seen.len(),
                        seen.keys()
                            .map(|(hra, at)| format!("{hra}@{at}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
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
        panics.into_iter().map(|p| violation(at_end, p)).collect(),
    );
    add(
        "credentials_in_logs",
        "no replica log contains a token, PAT or webhook secret",
        leaks.into_iter().map(|p| violation(at_end, p)).collect(),
    );
    let controller_rows: Vec<&ghsim::accounting::CallRow> = o
        .accounting
        .api_calls
        .iter()
        .filter(|r| r.credential == "pat:controller")
        .collect();
    let (calls, cost) = controller_rows.iter().fold((0, 0), |(calls, cost), r| {
        (calls + r.calls, cost + r.charged)
    });
    let mut by_endpoint: Vec<EndpointCost> = controller_rows
        .iter()
        .map(|r| EndpointCost {
            endpoint: r.endpoint.clone(),
            calls: r.calls,
            charged: r.charged,
            not_modified: r.not_modified,
            errors: r.errors,
        })
        .collect();
    by_endpoint.sort_by(|a, b| b.charged.cmp(&a.charged).then(b.calls.cmp(&a.calls)));
    let cost_per_hour = cost as f64 * 3600.0 / o.run_seconds.max(1.0);
    let cost_per_job = cost as f64 / o.jobs.len().max(1) as f64;
    add(
        "github_api_budget",
        "the controller's rate-limit cost stays within 3 charged calls per job queued",
        if cost_per_job > API_BUDGET_PER_JOB {
            vec![violation(
                at_end,
                format!(
                    "{cost} charged calls for {} jobs = {cost_per_job:.2} a job",
                    o.jobs.len()
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
        replay: replay(seed, run.args),
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
            budget_per_job: API_BUDGET_PER_JOB,
            cost_per_job: (cost_per_job * 100.0).round() / 100.0,
            by_endpoint,
        },
        apiserver_proxy: o.apiserver_proxy,
        leftover: o.leftover,
        timings: Timings {
            run_seconds: o.run_seconds.round(),
            drain_seconds: o.drain_seconds.round(),
            settle_seconds: o.settle_seconds.round(),
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
         interrupted by injected faults (counted apart); drained {} in {} s, cleanup {} s, total {} s\n",
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
    let p = &r.apiserver_proxy;
    out.push_str(&format!(
        "  GitHub API: {} calls by the controller, cost {:.2} a job (budget {:.0}), {:.0}/h\n  \
         apiserver proxy: {} requests forwarded, {} watches cut, {} watches 410, {} writes 409, \
         {} answered 503 (apiserver down)\n  replay: {}",
        r.github_api.controller_calls,
        r.github_api.cost_per_job,
        r.github_api.budget_per_job,
        r.github_api.cost_per_hour,
        p.forwarded,
        p.watches_cut,
        p.gone,
        p.conflicted,
        p.unreachable,
        r.replay
    ));
    out
}
