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
//! Everything that decides or formats is pure and unit-tested: the live view ([`view`]:
//! [`Observed`], [`frame`]) and the closing numbers ([`summary`]: [`Summary::from_accounting`]);
//! [`run`] is the IO driver. The cluster is left
//! running; `cargo xtask cluster down` stops it with ghsim, nodesim and the controller.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use ghsim::control::{self, RunnerView};
use ghsim::webhooks::{ContentType, NewHook};
use ghsim::world::SubmitJobs;
use hangar_api::{HorizontalRunnerAutoscaler, Runner, RunnerDeployment};
use hangar_github::RunnerStatus;
use hangar_testkit::Binaries;
use hangar_testkit::control_plane::{ControlPlane, StartOptions, admin_client, free_port};
use hangar_testkit::eventually::try_eventually;
use hangar_testkit::http;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::{default_cluster_dir, kubectl, must, up, workspace_root};

mod summary;
mod view;

use summary::Summary;
use view::{Activity, Observed, RunnerRow, Watch, frame};

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
