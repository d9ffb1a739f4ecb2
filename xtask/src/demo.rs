//! `cargo xtask demo`: the README's run command.
//!
//! Steps, in order: a clean local control plane (a demo still running from before is stopped
//! first, so two controllers never share a cluster); the CRDs; every ARC example from
//! `examples/` applied unchanged in `<namespace>-examples` (nothing watches it); then Hangar for
//! real in `<namespace>`: `ghsim` plays GitHub, `nodesim` plays two kubelets whose `runner`
//! containers behave like actions/runner, and `hangar run` serves GitHub webhooks next to its
//! controllers. An ephemeral RunnerDeployment starts at zero replicas under a
//! HorizontalRunnerAutoscaler that scales on `workflow_job` webhooks; ghsim is subscribed to
//! the webhook server with a secret, so every delivery is signed. A burst of jobs is queued;
//! the terminal shows runners and jobs until every job has completed and the pool is back at
//! zero; then a summary from ghsim's records. The exit code is non-zero if any job was
//! interrupted (a runner killed under it).
//!
//! Everything that decides or formats ([`Observed`], [`frame`], [`Summary::from_accounting`],
//! [`percentile`]) is pure and unit-tested; [`run`] is the IO driver. The cluster is left
//! running; `cargo xtask cluster down` stops it with ghsim, nodesim and the controller.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use ghsim::accounting::{Accounting, JobRow};
use ghsim::control::{self, RunnerView};
use ghsim::webhooks::{ContentType, NewHook};
use ghsim::world::{JobStatus, SubmitJobs};
use hangar_api::{HorizontalRunnerAutoscaler, Runner, RunnerDeployment};
use hangar_github::RunnerStatus;
use hangar_testkit::Binaries;
use hangar_testkit::control_plane::{ControlPlane, StartOptions, admin_client, free_port};
use hangar_testkit::eventually::try_eventually;
use hangar_testkit::http;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::{default_cluster_dir, kubectl, must, up, workspace_root};

/// What `cargo xtask demo` runs; the flags of the `demo` command.
#[derive(Debug, Clone)]
pub struct Options {
    /// Namespace of the demo's RunnerDeployment (the examples go to `<namespace>-examples`).
    pub namespace: String,
    /// Jobs queued in one burst.
    pub jobs: u32,
    /// How long each job runs.
    pub job_seconds: u64,
    /// The autoscaler's `maxReplicas`.
    pub max_replicas: u32,
    /// The short, non-interactive form CI runs (`--ci`): a control plane of its own under
    /// `target/` (never the developer's `.hangar/cluster`), tied to this process, a plain log
    /// instead of the live view, a tighter time limit, a failure unless every job completed,
    /// and everything stopped at the end.
    pub ci: bool,
    /// Build `hangar`, `ghsim` and `nodesim` first (`cargo build`); `cargo xtask test` turns
    /// this off because `cargo test --workspace --no-run` has just built them.
    pub build: bool,
}

/// The controller's PAT in ghsim, labelled so that its calls are accounted apart
/// (`pat:controller`) from anyone else's.
const CONTROLLER_PAT: &str = "ghp_demo_controller";
/// The secret ghsim signs deliveries with and the webhook server checks.
const WEBHOOK_SECRET: &str = "hangar-demo-webhook-secret";
const REPOSITORY: &str = "octo/app";
/// The pool idles at zero: an ephemeral runner that finished is not replaced for 10 minutes
/// after a webhook scale-out (ARC's rule, kept by Hangar), so a higher floor would not be back
/// within the demo's minute.
const MIN_REPLICAS: i32 = 0;
/// Short, so the demo sees the scale-down within seconds of the last job.
const SCALE_DOWN_DELAY_SECS: u32 = 5;
/// The whole burst, scale-out to scale-in, must fit in this.
const BURST_LIMIT: Duration = Duration::from_secs(300);
/// ... and in CI, where the burst is smaller.
const CI_BURST_LIMIT: Duration = Duration::from_secs(150);
const TICK: Duration = Duration::from_millis(500);
/// Where a failed demo's logs are (`logs/` of `.hangar/cluster`, or of `target/hangar-demo-ci`).
const LOGS_HINT: &str = "the logs in the cluster directory's logs/";
/// Processes of a demo that `ControlPlane::stop` ends along with the control plane.
const DEMO_PROCESSES: [&str; 3] = ["ghsim", "nodesim", "hangar"];

/// Runs the demo; `Ok(FAILURE)` when jobs were interrupted (or, with `ci`, did not all
/// complete). With `ci`, everything it started is stopped before it returns, failed or not.
pub async fn run(opts: &Options) -> Result<ExitCode> {
    if !opts.ci {
        let dir = default_cluster_dir();
        stop_previous_demo(&dir)?;
        let kubeconfig = up(&dir).await?;
        return run_on(opts, dir, kubeconfig).await;
    }
    let dir = ci_cluster_dir();
    stop_previous_demo(&dir)?;
    let started = Instant::now();
    let binaries = crate::build_binaries()?;
    let mut start = StartOptions::new(&dir, binaries);
    start.tie_to_pid = Some(std::process::id());
    let plane = ControlPlane::start(start).await?;
    let outcome = run_on(opts, dir.clone(), plane.kubeconfig().to_owned()).await;
    if !matches!(&outcome, Ok(code) if *code == ExitCode::SUCCESS) {
        // CI keeps no cluster to look at afterwards: show how the demo's processes ended.
        for name in DEMO_PROCESSES {
            let log = std::fs::read_to_string(dir.join("logs").join(format!("{name}.log")));
            let log = log.unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!("--- last lines of {name}.log");
            for line in &lines[lines.len().saturating_sub(30)..] {
                eprintln!("{line}");
            }
        }
    }
    // `cargo xtask cluster down --dir target/hangar-demo-ci`: the control plane, ghsim,
    // nodesim and hangar, whatever the outcome.
    let stopped = ControlPlane::stop(&dir)?;
    eprintln!(
        "xtask: CI demo {} after {:.0?}; stopped {} processes",
        match &outcome {
            Ok(code) if *code == ExitCode::SUCCESS => "passed",
            _ => "FAILED",
        },
        started.elapsed(),
        stopped.len()
    );
    outcome
}

/// Where the CI demo keeps its control plane: under `target/`, apart from the developer's
/// `.hangar/cluster` and the test suite's `target/hangar-test-cluster`.
pub fn ci_cluster_dir() -> PathBuf {
    workspace_root().join("target").join("hangar-demo-ci")
}

async fn run_on(opts: &Options, dir: PathBuf, kubeconfig: PathBuf) -> Result<ExitCode> {
    let cluster = Cluster {
        client: admin_client(&kubeconfig).await?,
        binaries: Binaries::configured(),
        kubeconfig,
        dir,
    };
    let namespace = opts.namespace.as_str();
    install(&cluster, namespace).await?;
    let stack = start_stack(&cluster, namespace, opts.build).await?;
    let kube = &Kube::new(cluster.client.clone(), namespace);
    apply_pool(&cluster, kube, opts).await?;
    subscribe(&stack).await?;

    // Step 5: the burst, watched live.
    println!(
        "\n$ ghsim submit --repository {REPOSITORY} --count {} --labels self-hosted,linux --duration-ms {}\n",
        opts.jobs,
        opts.job_seconds * 1000
    );
    let burst = SubmitJobs {
        repository: REPOSITORY.to_owned(),
        count: opts.jobs,
        labels: vec!["self-hosted".to_owned(), "linux".to_owned()],
        duration_ms: opts.job_seconds * 1000,
        conclusion: None,
        workflow: None,
        job_name: None,
    };
    stack.ghsim.submit_jobs(&burst).await?;
    let watch = watch_burst(opts, &stack.ghsim, kube).await?;

    // Step 6: what happened, from ghsim's records.
    let accounting = stack.ghsim.accounting().await?;
    let summary = Summary::from_accounting(&accounting, &watch);
    println!("\n{summary}");
    if opts.ci {
        return Ok(ci_verdict(&summary, opts.jobs));
    }
    let url = &stack.ghsim_url;
    println!(
        "\nThe cluster keeps running. Explore it with:\n  export KUBECONFIG={}",
        cluster.kubeconfig.display()
    );
    println!("  kubectl get runnerdeployments,hra,runners -n {namespace}");
    println!(
        "  {} submit --url {url} --repository {REPOSITORY} --count 5 --labels linux --duration-ms 5000",
        stack.bin_dir.join("ghsim").display()
    );
    println!("  curl -s {url}_ghsim/accounting");
    println!("  kubectl explain runnerdeployment.spec.template.spec");
    println!(
        "Stop everything (control plane, ghsim, nodesim, hangar) with: cargo xtask cluster down"
    );
    if summary.interrupted > 0 {
        eprintln!(
            "error: {} job(s) interrupted: a runner went away while running a job",
            summary.interrupted
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// CI's verdict on a finished burst: every job completed, none interrupted.
fn ci_verdict(summary: &Summary, jobs: u32) -> ExitCode {
    let mut failures = vec![];
    if summary.completed < jobs as usize {
        failures.push(format!("{} of {jobs} jobs completed", summary.completed));
    }
    if summary.interrupted > 0 {
        failures.push(format!("{} job(s) interrupted", summary.interrupted));
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: the demo failed: {}", failures.join("; "));
        ExitCode::FAILURE
    }
}

/// The running control plane and how to reach it.
struct Cluster {
    client: kube::Client,
    binaries: Binaries,
    kubeconfig: PathBuf,
    /// State directory: PIDs, logs, the manifests the demo applies.
    dir: PathBuf,
}

impl Cluster {
    /// `kubectl apply --server-side [-n namespace] -f file`.
    fn apply(&self, namespace: Option<&str>, file: &Path) -> Result<()> {
        let mut cmd = kubectl(&self.binaries, &self.kubeconfig);
        cmd.args(["apply", "--server-side"]);
        if let Some(ns) = namespace {
            cmd.args(["-n", ns]);
        }
        must(cmd.arg("-f").arg(file))
    }
}

/// Step 1: the CRDs, the namespaces, and the ARC examples, unchanged, in a namespace of their
/// own (they name real GitHub organizations, so the operator does not watch it).
async fn install(cluster: &Cluster, namespace: &str) -> Result<()> {
    hangar_testkit::crds::apply_and_wait(&cluster.client, &hangar_api::crds())
        .await
        .map_err(anyhow::Error::msg)?;
    eprintln!("xtask: CRDs installed");
    let examples_ns = format!("{namespace}-examples");
    for ns in [namespace, examples_ns.as_str()] {
        let file = cluster.dir.join(format!("namespace-{ns}.yaml"));
        std::fs::write(
            &file,
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
        )?;
        cluster.apply(None, &file)?;
    }
    cluster.apply(
        Some(examples_ns.as_str()),
        &workspace_root().join("examples"),
    )?;
    for kind in [
        "runnerdeployments",
        "runnersets",
        "horizontalrunnerautoscalers",
    ] {
        println!("\n$ kubectl get {kind} -n {examples_ns}");
        must(kubectl(&cluster.binaries, &cluster.kubeconfig).args([
            "get",
            kind,
            "-n",
            &examples_ns,
        ]))?;
    }
    Ok(())
}

/// ghsim, nodesim and the controller, started by step 2.
#[derive(Debug)]
struct Stack {
    ghsim: control::Client,
    ghsim_url: String,
    webhook_port: u16,
    /// Where the binaries were built.
    bin_dir: PathBuf,
}

/// Step 2: Hangar for real. ghsim plays GitHub, nodesim plays kubelets and the runners, and the
/// controller serves GitHub's webhooks; every listener on a free loopback port, every process
/// recorded with the control plane so that `cargo xtask cluster down` ends it.
async fn start_stack(cluster: &Cluster, namespace: &str, build: bool) -> Result<Stack> {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    if build {
        must(Command::new(&cargo).current_dir(&root).args([
            "build",
            "--quiet",
            "-p",
            "hangar",
            "-p",
            "hangar-ghsim",
            "-p",
            "hangar-nodesim",
        ]))?;
    }
    let bin_dir = root.join("target").join("debug");
    for name in DEMO_PROCESSES {
        if !bin_dir.join(name).is_file() {
            bail!("no {name} binary in {}", bin_dir.display());
        }
    }
    let dir = &cluster.dir;
    let loopback = |port: u16| format!("127.0.0.1:{port}");
    let (ghsim_port, webhook_port) = (free_port()?, free_port()?);
    let (metrics_addr, probe_addr) = (loopback(free_port()?), loopback(free_port()?));
    let ghsim_url = format!("http://127.0.0.1:{ghsim_port}/");
    let kc = cluster.kubeconfig.display().to_string();
    ControlPlane::spawn_recorded(
        dir,
        "ghsim",
        &bin_dir.join("ghsim"),
        &[
            "--listen",
            &loopback(ghsim_port),
            "--org",
            "octo",
            "--repo",
            REPOSITORY,
        ],
        &[],
    )?;
    // The controller's token, labelled so that ghsim accounts its calls apart; added before
    // the controller starts, which would otherwise meet 401s and back off.
    let ghsim = control::Client::new(url::Url::parse(&ghsim_url)?)?;
    let answers = &ghsim;
    wait_until("ghsim to answer", Duration::from_secs(30), || async move {
        answers.faults().await.ok()
    })
    .await?;
    ghsim.add_token(CONTROLLER_PAT, "controller").await?;
    ControlPlane::spawn_recorded(
        dir,
        "nodesim",
        &bin_dir.join("nodesim"),
        &[
            "--kubeconfig",
            &kc,
            "--nodes",
            "2",
            "--node-prefix",
            "demo",
            "--runner",
            "--no-taint",
        ],
        &[],
    )?;
    ControlPlane::spawn_recorded(
        dir,
        "hangar",
        &bin_dir.join("hangar"),
        &[
            "run",
            "--github-url",
            &ghsim_url,
            "--github-api-url",
            &ghsim_url,
            "--watch-namespace",
            namespace,
            "--sync-period",
            "10s",
            "--webhook-addr",
            &loopback(webhook_port),
            "--metrics-addr",
            &metrics_addr,
            "--health-probe-bind-address",
            &probe_addr,
        ],
        &[
            ("KUBECONFIG", &kc),
            ("GITHUB_TOKEN", CONTROLLER_PAT),
            ("GITHUB_WEBHOOK_SECRET_TOKEN", WEBHOOK_SECRET),
            ("RUST_LOG", "info,kube=warn"),
        ],
    )?;
    eprintln!(
        "xtask: ghsim at {ghsim_url}, nodesim (2 nodes) and hangar (webhooks on {}, metrics on \
         {metrics_addr}) started; logs in {}",
        loopback(webhook_port),
        dir.join("logs").display()
    );
    Ok(Stack {
        ghsim,
        ghsim_url,
        webhook_port,
        bin_dir,
    })
}

/// Step 3: an ephemeral pool at zero and the autoscaler that scales it on `workflow_job`
/// webhooks; waits until the autoscaler has reconciled it.
async fn apply_pool(cluster: &Cluster, kube: &Kube, opts: &Options) -> Result<()> {
    let manifest = pool_manifest(opts.max_replicas);
    println!(
        "\n$ kubectl apply --server-side -n {} -f - <<EOF\n{manifest}EOF",
        opts.namespace
    );
    let file = cluster.dir.join("demo-pool.yaml");
    std::fs::write(&file, &manifest)?;
    cluster.apply(Some(opts.namespace.as_str()), &file)?;
    wait_until(
        "the autoscaler to reconcile the pool to its minimum",
        Duration::from_secs(60),
        || async move {
            let (replicas, desired) = kube.scale().await.ok()?;
            (replicas == Some(MIN_REPLICAS) && desired == Some(MIN_REPLICAS)).then_some(())
        },
    )
    .await
}

/// Step 4: GitHub's webhook, as a repository admin would add it (JSON, `workflow_job` only,
/// signed with the secret the controller checks); waits for the answer to its `ping`.
async fn subscribe(stack: &Stack) -> Result<()> {
    let port = stack.webhook_port;
    wait_until(
        "the webhook server to answer",
        Duration::from_secs(60),
        || async move {
            let (status, _) = http::get(http::loopback(port), "/").await?;
            (status == 200).then_some(())
        },
    )
    .await?;
    let url = format!("http://127.0.0.1:{port}/");
    let hook = NewHook {
        url: url.clone(),
        secret: Some(WEBHOOK_SECRET.to_owned()),
        content_type: ContentType::Json,
        events: vec!["workflow_job".to_owned()],
        owner: None,
    };
    let hook_id = stack.ghsim.add_hook(&hook).await?.id;
    let ghsim = &stack.ghsim;
    let ping = wait_until(
        "the webhook's ping to be answered",
        Duration::from_secs(30),
        || async move {
            let deliveries = ghsim.deliveries().await.ok()?;
            deliveries
                .iter()
                .find(|d| d.hook_id == hook_id && d.event == "ping")
                .and_then(|d| d.attempts.last()?.status)
        },
    )
    .await?;
    if ping != 200 {
        bail!("the webhook server answered ghsim's ping with {ping}; see the hangar log");
    }
    println!("\nghsim: webhook {url} added for workflow_job, signed; its ping was answered {ping}");
    Ok(())
}

/// A demo left running shares the cluster with nodes and a controller of its own; stop it all,
/// so this run starts from an empty cluster.
fn stop_previous_demo(dir: &Path) -> Result<()> {
    let Ok(components) = ControlPlane::running(dir) else {
        return Ok(());
    };
    let previous = components
        .iter()
        .any(|(c, alive)| *alive && DEMO_PROCESSES.contains(&c.name.as_str()));
    if previous {
        eprintln!("xtask: stopping the previous demo (as `cargo xtask cluster down` does)");
        ControlPlane::stop(dir)?;
    }
    Ok(())
}

/// The RunnerDeployment and its HorizontalRunnerAutoscaler, as YAML.
fn pool_manifest(max_replicas: u32) -> String {
    format!(
        "apiVersion: actions.summerwind.dev/v1alpha1
kind: RunnerDeployment
metadata:
  name: demo
spec:
  replicas: {MIN_REPLICAS}
  template:
    spec:
      repository: {REPOSITORY}
      ephemeral: true
      labels: [linux]
---
apiVersion: actions.summerwind.dev/v1alpha1
kind: HorizontalRunnerAutoscaler
metadata:
  name: demo
spec:
  scaleTargetRef:
    kind: RunnerDeployment
    name: demo
  minReplicas: {MIN_REPLICAS}
  maxReplicas: {max_replicas}
  scaleDownDelaySecondsAfterScaleOut: {SCALE_DOWN_DELAY_SECS}
  scaleUpTriggers:
  - githubEvent:
      workflowJob: {{}}
    duration: 30m
"
    )
}

/// What the live view learned over the burst.
#[derive(Debug, Default)]
struct Watch {
    /// Every runner name seen: Runner objects, and the runners ghsim's jobs ran on.
    runners_seen: BTreeSet<String>,
    /// Highest `spec.replicas` of the RunnerDeployment seen.
    max_replicas: i32,
    /// From submission until every job had completed.
    jobs_done_after: Duration,
    /// From submission until the pool was back at its minimum.
    back_to_min_after: Duration,
}

/// Polls the world every [`TICK`] until the burst is over, drawing it: redrawn in place on a
/// terminal, one line per change otherwise.
async fn watch_burst(opts: &Options, ghsim: &control::Client, kube: &Kube) -> Result<Watch> {
    let tty = std::io::stdout().is_terminal() && !opts.ci;
    let limit = if opts.ci { CI_BURST_LIMIT } else { BURST_LIMIT };
    let started = Instant::now();
    let mut watch = Watch::default();
    let (mut drawn, mut last_line) = (0usize, String::new());
    loop {
        let observed = observe(started.elapsed(), ghsim, kube).await;
        if let Ok(o) = &observed {
            watch
                .runners_seen
                .extend(o.runners.iter().map(|r| r.name.clone()));
            watch
                .runners_seen
                .extend(o.jobs.iter().filter_map(|j| j.runner.clone()));
            watch.max_replicas = watch.max_replicas.max(o.replicas.unwrap_or(0));
            if watch.jobs_done_after.is_zero() && o.jobs_done(opts.jobs) {
                watch.jobs_done_after = o.elapsed;
            }
            let mut out = std::io::stdout().lock();
            if tty {
                if drawn > 0 {
                    // Back to the frame's first line, then clear everything below.
                    write!(out, "\x1b[{drawn}F\x1b[J")?;
                }
                let lines = frame(o, opts);
                for line in &lines {
                    writeln!(out, "{line}")?;
                }
                drawn = lines.len();
            } else {
                let line = o.progress();
                if line != last_line {
                    writeln!(out, "[{:>5.1}s] {line}", o.elapsed.as_secs_f64())?;
                    last_line = line;
                }
            }
            out.flush()?;
            if o.jobs_done(opts.jobs) && o.at_min() {
                watch.back_to_min_after = o.elapsed;
                return Ok(watch);
            }
        }
        if started.elapsed() > limit {
            let why = observed.map_or_else(|e| format!("{e:#}"), |o| o.progress());
            bail!("the burst did not finish within {limit:?} ({why}); see {LOGS_HINT}");
        }
        tokio::time::sleep(TICK).await;
    }
}

/// One look at the world: Kubernetes for the pool, ghsim for jobs and runner activity.
async fn observe(elapsed: Duration, ghsim: &control::Client, kube: &Kube) -> Result<Observed> {
    let state = ghsim.state().await?;
    let accounting = ghsim.accounting().await?;
    let (replicas, desired) = kube.scale().await?;
    let runners = kube.runners.list(&ListParams::default()).await?.items;
    let pods = kube.pods.list(&ListParams::default()).await?.items.len();
    let github: BTreeMap<&str, &RunnerView> = state
        .runners
        .iter()
        .map(|r| (r.runner.name.as_str(), r))
        .collect();
    let runners = runners
        .iter()
        .map(|r| {
            let name = r.metadata.name.clone().unwrap_or_default();
            let phase = if r.metadata.deletion_timestamp.is_some() {
                "Deleting".to_owned()
            } else {
                r.status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_else(|| "Created".to_owned())
            };
            let activity = match github.get(name.as_str()) {
                None => Activity::Unregistered,
                Some(g) if g.runner.status != RunnerStatus::Online => Activity::Offline,
                Some(g) => g.running_job.map_or(Activity::Idle, Activity::Busy),
            };
            RunnerRow {
                name,
                phase,
                activity,
            }
        })
        .collect();
    Ok(Observed {
        elapsed,
        replicas,
        desired,
        runners,
        pods,
        jobs: accounting.jobs,
    })
}

/// The pool and the jobs at one moment.
#[derive(Debug, Clone)]
struct Observed {
    /// Since the burst was submitted.
    elapsed: Duration,
    /// The RunnerDeployment's `spec.replicas`.
    replicas: Option<i32>,
    /// The autoscaler's `status.desiredReplicas`.
    desired: Option<i32>,
    runners: Vec<RunnerRow>,
    /// Pods in the namespace (runner pods outlive their Runner while they unregister).
    pods: usize,
    jobs: Vec<JobRow>,
}

/// A runner as the live view shows it.
#[derive(Debug, Clone, PartialEq)]
struct RunnerRow {
    name: String,
    /// The Runner's `status.phase` (`Deleting` once it is being deleted).
    phase: String,
    activity: Activity,
}

/// What GitHub (ghsim) says a runner is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activity {
    /// Not registered (yet, or any more).
    Unregistered,
    Offline,
    Idle,
    /// Running this job.
    Busy(u64),
}

impl Activity {
    /// As the live view shows it, a job by its number in the burst (`#3`).
    fn describe(self, number: impl Fn(u64) -> String) -> String {
        match self {
            Self::Unregistered => "-".to_owned(),
            Self::Offline => "offline".to_owned(),
            Self::Idle => "idle".to_owned(),
            Self::Busy(job) => format!("busy (job {})", number(job)),
        }
    }
}

impl Observed {
    fn count(&self, status: JobStatus) -> usize {
        self.jobs.iter().filter(|j| j.status == status).count()
    }

    /// Every submitted job has completed.
    fn jobs_done(&self, submitted: u32) -> bool {
        self.jobs.len() >= submitted as usize && self.count(JobStatus::Completed) == self.jobs.len()
    }

    /// The autoscaler and the deployment are at the minimum, and no runner or pod is left.
    fn at_min(&self) -> bool {
        self.replicas == Some(MIN_REPLICAS)
            && self.desired == Some(MIN_REPLICAS)
            && self.runners.is_empty()
            && self.pods == 0
    }

    fn busy(&self) -> usize {
        self.runners
            .iter()
            .filter(|r| matches!(r.activity, Activity::Busy(_)))
            .count()
    }

    /// One line: jobs by status, then the pool.
    fn progress(&self) -> String {
        format!(
            "jobs: {} queued, {} in progress, {} completed | replicas {} (autoscaler wants {}) | runners {} ({} busy), pods {}",
            self.count(JobStatus::Queued),
            self.count(JobStatus::InProgress),
            self.count(JobStatus::Completed),
            show(self.replicas),
            show(self.desired),
            self.runners.len(),
            self.busy(),
            self.pods
        )
    }
}

fn show(n: Option<i32>) -> String {
    n.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

/// Widest line of a frame (so no line wraps and the redraw stays in place).
const FRAME_WIDTH: usize = 80;
/// Table rows shown before "... and N more".
const FRAME_ROWS: usize = 14;

/// The live view: a header, a progress bar, and runners next to jobs.
fn frame(o: &Observed, opts: &Options) -> Vec<String> {
    const BAR: usize = 24;
    let total = o.jobs.len().max(opts.jobs as usize);
    let completed = o.count(JobStatus::Completed);
    let filled = (completed * BAR).checked_div(total).unwrap_or(0);
    let mut lines = vec![
        format!(
            "Hangar demo: {} jobs x {}s, ephemeral pool autoscaled {MIN_REPLICAS}..{} by webhooks  {:>5.1}s",
            opts.jobs,
            opts.job_seconds,
            opts.max_replicas,
            o.elapsed.as_secs_f64()
        ),
        format!(
            "[{}{}] {completed}/{total} completed, {} in progress, {} queued",
            "#".repeat(filled),
            "-".repeat(BAR - filled),
            o.count(JobStatus::InProgress),
            o.count(JobStatus::Queued),
        ),
        format!(
            "replicas {} (autoscaler wants {}), {} runners ({} busy), {} pods",
            show(o.replicas),
            show(o.desired),
            o.runners.len(),
            o.busy(),
            o.pods
        ),
        String::new(),
    ];
    // Jobs by their number in the burst: GitHub's ids are long and say nothing.
    let mut ids: Vec<u64> = o.jobs.iter().map(|j| j.id).collect();
    ids.sort_unstable();
    let number = |id: u64| {
        ids.binary_search(&id)
            .map_or_else(|_| id.to_string(), |i| format!("#{}", i + 1))
    };
    let left: Vec<String> = o
        .runners
        .iter()
        .map(|r| {
            let activity = r.activity.describe(number);
            format!("{:<22} {:<9} {activity}", clip(&r.name, 22), r.phase)
        })
        .collect();
    let mut jobs: Vec<&JobRow> = o.jobs.iter().collect();
    jobs.sort_by_key(|j| j.id);
    let right: Vec<String> = jobs
        .iter()
        .map(|j| {
            let status = if j.interrupted {
                "INTERRUPTED"
            } else {
                j.status.as_str()
            };
            let wait = j
                .queue_seconds
                .map_or_else(String::new, |s| format!("{s:.1}s"));
            format!(
                "{:>3} {:<11} {wait:>5}",
                number(j.id),
                status.replace('_', " ")
            )
        })
        .collect();
    lines.push(format!(
        "{:<22} {:<9} {:<16} | {:>3} {:<11} {:>5}",
        "RUNNER", "PHASE", "GITHUB", "JOB", "STATUS", "WAIT"
    ));
    let rows = left.len().max(right.len());
    for i in 0..rows.min(FRAME_ROWS) {
        let l = left.get(i).map_or("", String::as_str);
        let r = right.get(i).map_or("", String::as_str);
        lines.push(format!("{l:<49} | {r}"));
    }
    if rows > FRAME_ROWS {
        lines.push(format!("... and {} more rows", rows - FRAME_ROWS));
    }
    if o.runners.is_empty() && o.jobs.is_empty() {
        lines.push("(no runners, no jobs)".to_owned());
    }
    lines
        .into_iter()
        .map(|l| {
            l.chars()
                .take(FRAME_WIDTH)
                .collect::<String>()
                .trim_end()
                .to_owned()
        })
        .collect()
}

/// At most `n` characters of `s`.
fn clip(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The `p`-th percentile (0 < p <= 100) of `values` by the nearest-rank method: the smallest
/// value with at least `p` percent of the values at or below it. `None` when empty.
fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
}

/// The numbers the demo ends with.
#[derive(Debug, Clone, PartialEq)]
struct Summary {
    jobs: usize,
    completed: usize,
    interrupted: usize,
    /// Queue time (created → started) percentiles, seconds.
    queue_p50: Option<f64>,
    queue_p95: Option<f64>,
    queue_max: Option<f64>,
    runners_created: usize,
    max_replicas: i32,
    /// GitHub API calls made with the controller's credential, and their rate-limit cost.
    controller_calls: u64,
    controller_charged: u64,
    /// The controller's calls by endpoint, most first.
    by_endpoint: Vec<(String, u64)>,
    webhooks_delivered: u64,
    webhooks_failed: u64,
    /// Runners GitHub still lists once the pool is empty, and which of them are offline.
    registrations_left: u64,
    offline_left_behind: Vec<String>,
    jobs_done_after: Duration,
    back_to_min_after: Duration,
}

/// The credential label ghsim accounts the controller's PAT under.
const CONTROLLER_CREDENTIAL: &str = "pat:controller";

impl Summary {
    fn from_accounting(accounting: &Accounting, watch: &Watch) -> Self {
        let a = accounting;
        let waits: Vec<f64> = a.jobs.iter().filter_map(|j| j.queue_seconds).collect();
        let mut by_endpoint: BTreeMap<&str, u64> = BTreeMap::new();
        let (mut calls, mut charged) = (0, 0);
        for row in a
            .api_calls
            .iter()
            .filter(|r| r.credential == CONTROLLER_CREDENTIAL)
        {
            *by_endpoint.entry(row.endpoint.as_str()).or_default() += row.calls;
            calls += row.calls;
            charged += row.charged;
        }
        let mut by_endpoint: Vec<(String, u64)> = by_endpoint
            .into_iter()
            .map(|(e, n)| (e.to_owned(), n))
            .collect();
        by_endpoint.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
        Self {
            jobs: a.jobs.len(),
            completed: a
                .jobs
                .iter()
                .filter(|j| j.status == JobStatus::Completed)
                .count(),
            interrupted: a.jobs.iter().filter(|j| j.interrupted).count(),
            queue_p50: percentile(&waits, 50.0),
            queue_p95: percentile(&waits, 95.0),
            queue_max: waits.iter().copied().reduce(f64::max),
            runners_created: watch.runners_seen.len(),
            max_replicas: watch.max_replicas,
            controller_calls: calls,
            controller_charged: charged,
            by_endpoint,
            webhooks_delivered: a.webhooks.delivered,
            webhooks_failed: a.webhooks.failed,
            registrations_left: a.runners.registered,
            offline_left_behind: a.runners.offline_left_behind.clone(),
            jobs_done_after: watch.jobs_done_after,
            back_to_min_after: watch.back_to_min_after,
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = |s: Option<f64>| s.map_or_else(|| "-".to_owned(), |s| format!("{s:.1}s"));
        writeln!(f, "Summary")?;
        writeln!(
            f,
            "  jobs run            {} of {} completed, all within {:.0}s of submission",
            self.completed,
            self.jobs,
            self.jobs_done_after.as_secs_f64()
        )?;
        writeln!(
            f,
            "  queue time          p50 {}, p95 {}, max {} (job created -> started)",
            secs(self.queue_p50),
            secs(self.queue_p95),
            secs(self.queue_max)
        )?;
        writeln!(
            f,
            "  runners created     {} (peak replicas {}); pool back to {MIN_REPLICAS} after {:.0}s",
            self.runners_created,
            self.max_replicas,
            self.back_to_min_after.as_secs_f64()
        )?;
        writeln!(
            f,
            "  GitHub API calls    {} by the controller, {} charged to its rate limit",
            self.controller_calls, self.controller_charged,
        )?;
        for (endpoint, n) in &self.by_endpoint {
            writeln!(f, "  {n:>21} {endpoint}")?;
        }
        let offline = if self.offline_left_behind.is_empty() {
            String::new()
        } else {
            format!(", offline: {}", self.offline_left_behind.join(", "))
        };
        writeln!(
            f,
            "  left at GitHub      {} runner registration(s){offline}",
            self.registrations_left
        )?;
        writeln!(
            f,
            "  webhooks            {} delivered, {} failed",
            self.webhooks_delivered, self.webhooks_failed
        )?;
        write!(f, "  interrupted jobs    {}", self.interrupted)
    }
}

/// The demo's Kubernetes objects.
#[derive(Debug, Clone)]
struct Kube {
    deployments: Api<RunnerDeployment>,
    autoscalers: Api<HorizontalRunnerAutoscaler>,
    runners: Api<Runner>,
    pods: Api<Pod>,
}

impl Kube {
    fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            deployments: Api::namespaced(client.clone(), namespace),
            autoscalers: Api::namespaced(client.clone(), namespace),
            runners: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client, namespace),
        }
    }

    /// The deployment's `spec.replicas` and the autoscaler's `status.desiredReplicas`.
    async fn scale(&self) -> Result<(Option<i32>, Option<i32>)> {
        let rd = self.deployments.get("demo").await?;
        let hra = self.autoscalers.get("demo").await?;
        Ok((
            rd.spec.replicas,
            hra.status.and_then(|s| s.desired_replicas),
        ))
    }
}

/// Polls `check` every [`TICK`] until it yields, or fails after `timeout`, pointing at the
/// logs.
async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    try_eventually(what, timeout, TICK, check)
        .await
        .map_err(|e| anyhow!("{e}; see {LOGS_HINT}"))
}

#[cfg(test)]
mod tests {
    use ghsim::accounting::{CallRow, JobSummary, RunnerSummary, WebhookSummary};

    use super::*;

    #[test]
    fn percentile_is_the_nearest_rank() {
        let values: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(10.0));
        assert_eq!(percentile(&values, 95.0), Some(19.0));
        assert_eq!(percentile(&values, 100.0), Some(20.0));
        assert_eq!(percentile(&[3.5], 95.0), Some(3.5));
        assert_eq!(percentile(&[2.0, 1.0], 50.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    fn call(endpoint: &str, credential: &str, calls: u64, charged: u64) -> CallRow {
        CallRow {
            endpoint: endpoint.to_owned(),
            credential: credential.to_owned(),
            calls,
            charged,
            not_modified: calls - charged,
            errors: 0,
        }
    }

    /// Two credentials, three jobs (one still queued, one interrupted): only the controller's
    /// calls count, and only started jobs have a queue time.
    fn accounting() -> Accounting {
        let runners = "/repos/{owner}/{repo}/actions/runners";
        let started = |id, runner: &str, wait, interrupted| JobRow {
            runner: Some(runner.to_owned()),
            queue_seconds: Some(wait),
            interrupted,
            ..job(id, JobStatus::Completed)
        };
        Accounting {
            api_calls: vec![
                call(&format!("GET {runners}"), "pat:controller", 7, 5),
                call(
                    &format!("POST {runners}/registration-token"),
                    "pat:controller",
                    9,
                    9,
                ),
                call(&format!("GET {runners}"), "pat:default", 100, 100),
            ],
            api_calls_total: 116,
            rate_limit_cost_total: 114,
            jobs_summary: JobSummary::default(),
            jobs: vec![
                started(1, "a", 1.0, false),
                started(2, "b", 3.0, true),
                job(3, JobStatus::Queued),
            ],
            runners: RunnerSummary {
                registered: 1,
                offline_left_behind: vec!["b".to_owned()],
                ..RunnerSummary::default()
            },
            webhooks: WebhookSummary {
                deliveries: 7,
                delivered: 6,
                failed: 1,
                ..WebhookSummary::default()
            },
        }
    }

    #[test]
    fn summary_counts_only_the_controllers_calls_and_started_jobs() {
        let watch = Watch {
            runners_seen: ["a", "b"].map(String::from).into(),
            max_replicas: 2,
            ..Watch::default()
        };
        let s = Summary::from_accounting(&accounting(), &watch);
        assert_eq!((s.runners_created, s.max_replicas), (2, 2));
        assert_eq!((s.jobs, s.completed, s.interrupted), (3, 2, 1));
        assert_eq!((s.queue_p50, s.queue_p95), (Some(1.0), Some(3.0)));
        assert_eq!((s.controller_calls, s.controller_charged), (16, 14));
        assert_eq!(
            s.by_endpoint[0],
            (
                "POST /repos/{owner}/{repo}/actions/runners/registration-token".to_owned(),
                9
            )
        );
        assert_eq!((s.webhooks_delivered, s.webhooks_failed), (6, 1));
        let text = s.to_string();
        assert!(text.contains("interrupted jobs    1"), "{text}");
        assert!(
            text.contains("1 runner registration(s), offline: b"),
            "{text}"
        );
    }

    fn observed(runners: Vec<RunnerRow>, jobs: Vec<JobRow>) -> Observed {
        Observed {
            elapsed: Duration::from_secs(3),
            replicas: Some(MIN_REPLICAS),
            desired: Some(MIN_REPLICAS),
            runners,
            pods: 0,
            jobs,
        }
    }

    fn job(id: u64, status: JobStatus) -> JobRow {
        JobRow {
            id,
            repository: REPOSITORY.to_owned(),
            labels: vec!["self-hosted".to_owned(), "linux".to_owned()],
            status,
            conclusion: None,
            queued_at: "2026-01-01T00:00:00Z".to_owned(),
            assigned_at: None,
            started_at: None,
            completed_at: None,
            queue_seconds: None,
            runner: None,
            interrupted: false,
            requeues: 0,
        }
    }

    #[test]
    fn the_burst_is_over_only_when_every_submitted_job_completed_and_the_pool_is_empty() {
        let done = observed(
            vec![],
            vec![job(1, JobStatus::Completed), job(2, JobStatus::Completed)],
        );
        assert!(done.jobs_done(2) && done.at_min());
        assert!(!done.jobs_done(3), "a job ghsim has not recorded yet");
        let running = observed(
            vec![],
            vec![job(1, JobStatus::Completed), job(2, JobStatus::InProgress)],
        );
        assert!(!running.jobs_done(2));
        let runner = RunnerRow {
            name: "demo-x".to_owned(),
            phase: "Succeeded".to_owned(),
            activity: Activity::Unregistered,
        };
        assert!(!observed(vec![runner], vec![]).at_min());
    }

    #[test]
    fn frame_fits_the_terminal_width_and_caps_its_rows() {
        let runners = (0..30)
            .map(|i| RunnerRow {
                name: format!("demo-abcdefghijklmnopqrstuvwxyz-{i}"),
                phase: "Running".to_owned(),
                activity: Activity::Busy(i + 1),
            })
            .collect();
        let o = observed(runners, vec![job(1, JobStatus::InProgress)]);
        let opts = Options {
            namespace: "ns".to_owned(),
            jobs: 8,
            job_seconds: 4,
            max_replicas: 6,
            ci: false,
            build: false,
        };
        let lines = frame(&o, &opts);
        assert!(lines.iter().all(|l| l.chars().count() <= FRAME_WIDTH));
        assert!(lines.iter().any(|l| l.contains("and 16 more rows")));
        assert!(lines[4].starts_with("RUNNER"));
        assert!(lines[5].contains("busy (job #1)") && lines[5].contains(" #1 in progress"));
    }
}
