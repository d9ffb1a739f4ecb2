//! What the benchmarks share: the simulated world they run `hangar run` against, and how they
//! read the controller process's peak memory and CPU time.
//!
//! Included by each benchmark with `mod common;` (a directory without `main.rs` is not an
//! example of its own).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, ensure};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client};
use nodesim::program::{RunnerFaults, RunnerProgram};
use nodesim::{NodeSim, NodeSimConfig, NodeSimHandle, Timing};

/// The controller's PAT in ghsim (accounting label `controller`).
pub const CONTROLLER_PAT: &str = "ghp_bench_controller";
/// The simulated runners' PAT: they mint remove tokens with it on SIGTERM.
pub const RUNNER_PAT: &str = "ghp_bench_runner";
/// The namespace every benchmark works in.
pub const NAMESPACE: &str = "bench";

/// A fresh control plane made ready for a benchmark: the CRDs (Hangar's, or ARC's when ARC is
/// measured), the [`NAMESPACE`], ghsim with
/// organization `octo` and repository `octo/app`, and `nodes` simulated nodes whose runners
/// remove themselves with [`RUNNER_PAT`].
pub struct World {
    /// Admin client of the control plane.
    pub client: Client,
    /// Simulated GitHub.
    pub github: ghsim::Running,
    /// Simulated nodes and runners.
    pub nodes: NodeSimHandle,
    /// Run-time fault switches of the simulated runners (image pulls, registration).
    #[allow(dead_code)] // only chaos injects runner faults
    pub runner_faults: RunnerFaults,
}

/// How many of a hook's deliveries ghsim lets be on their way at once. GitHub sends
/// concurrently; one at a time, a receiver that answers once a delivery is durably recorded
/// (a write batch, a quarter of a second) would cap the delivery rate at 4 a second.
pub const DELIVERIES_IN_FLIGHT: usize = 32;

impl World {
    /// Sets the world up on the control plane of `kubeconfig`, with Hangar's CRDs.
    #[allow(dead_code)] // bench-webhooks chooses the CRDs itself
    pub async fn start(kubeconfig: &Path, nodes: usize) -> anyhow::Result<Self> {
        Self::start_with_crds(kubeconfig, nodes, &hangar_api::crds()).await
    }

    /// [`World::start`] with `crds` instead of Hangar's.
    pub async fn start_with_crds(
        kubeconfig: &Path,
        nodes: usize,
        crds: &[k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition],
    ) -> anyhow::Result<Self> {
        let client = hangar_testkit::control_plane::admin_client(kubeconfig).await?;
        hangar_testkit::crds::apply_and_wait(&client, crds)
            .await
            .map_err(anyhow::Error::msg)?;
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(NAMESPACE.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        warm_up_runners(&client).await?;

        let sim = ghsim::Sim::new(ghsim::SimConfig {
            webhook_concurrency: DELIVERIES_IN_FLIGHT,
            ..ghsim::SimConfig::default()
        });
        sim.update(|w, _| {
            w.add_pat(CONTROLLER_PAT, "controller");
            w.add_pat(RUNNER_PAT, "runner");
            w.add_org("octo", None);
            w.add_repo("octo", "app", true);
        });
        let github = ghsim::spawn(sim).await?;
        let runner = RunnerProgram::new().with_remove_credential(RUNNER_PAT);
        let runner_faults = runner.faults().clone();
        let nodes = NodeSim::start(
            hangar_testkit::control_plane::kubelet_client(kubeconfig).await?,
            NodeSimConfig::new("bench", nodes)
                // Containers start fast, but the node Leases are renewed every 10 s as a
                // kubelet's are: at 1 s, four nodes cost the apiserver 4 writes a second.
                .with_timing(Timing {
                    lease_renew: std::time::Duration::from_secs(10),
                    ..Timing::fast()
                })
                .with_runner_program(runner),
        )
        .await?;
        Ok(Self {
            client,
            github,
            nodes,
            runner_faults,
        })
    }
}

/// Creates and deletes one Runner before any controller starts. The apiserver answers the
/// first writes of a custom resource whose definition was just established only after a
/// start-up pause (2.0–2.1 s on this machine, the same moment for every write waiting; a
/// `LIST` does not wait it out). A cluster's CRDs are installed long before its first job; in
/// a benchmark the pause would fall on the first runners of the run: for the floor, the run's
/// p99; for an autoscaler, a burst of jobs queued before any runner could be created, whose peak
/// a scale-down delay then keeps for the whole run.
async fn warm_up_runners(client: &Client) -> anyhow::Result<()> {
    let runners: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("actions.summerwind.dev", "v1alpha1", "Runner"),
            "runners",
        ),
    );
    let runner: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "Runner",
        "metadata": {"name": "warm-up"},
        "spec": {"repository": "octo/app"},
    }))?;
    let started = std::time::Instant::now();
    runners.create(&PostParams::default(), &runner).await?;
    runners.delete("warm-up", &DeleteParams::default()).await?;
    tracing::info!(took = ?started.elapsed(), "warmed up the Runner resource");
    Ok(())
}

/// Peak RSS (MiB) and CPU seconds (user + system) of process `pid`, from `/proc`.
#[allow(dead_code)] // chaos measures no resources
pub fn peak_rss_and_cpu(pid: u32) -> anyhow::Result<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let peak_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .context("no VmHWM")?
        .parse()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let after = stat.rsplit_once(')').context("bad stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    // USER_HZ is 100 on Linux.
    Ok((peak_kib / 1024.0, ticks / 100.0))
}

/// CPU seconds each component of the control plane in `cluster` (etcd, kube-apiserver,
/// kube-controller-manager, kube-scheduler) has used so far, by name. Taken before and after a
/// load, the difference is what serving that load cost the control plane: the work a
/// controller's writes and watches cause, which bounds its knee on a small machine.
#[allow(dead_code)] // chaos and the lifecycle benchmark do not measure it
pub fn control_plane_cpu_seconds(
    cluster: &Path,
) -> anyhow::Result<std::collections::BTreeMap<String, f64>> {
    let mut cpu = std::collections::BTreeMap::new();
    for (name, pid) in hangar_testkit::control_plane::ControlPlane::program_pids(cluster)? {
        *cpu.entry(name).or_insert(0.0) += peak_rss_and_cpu(pid)?.1;
    }
    Ok(cpu)
}

/// Each component's CPU seconds between `before` and `after` divided by `count` (jobs or
/// runners), rounded to the millisecond, and their sum as `total`.
#[allow(dead_code)] // chaos and the lifecycle benchmark do not measure it
pub fn cpu_seconds_per(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
    count: usize,
) -> std::collections::BTreeMap<String, f64> {
    let per = |seconds: f64| (seconds / count.max(1) as f64 * 1000.0).round() / 1000.0;
    let mut out: std::collections::BTreeMap<String, f64> = after
        .iter()
        .map(|(name, a)| (name.clone(), a - before.get(name).copied().unwrap_or(0.0)))
        .collect();
    let total = out.values().sum();
    out.insert("total".to_owned(), total);
    out.into_iter().map(|(k, v)| (k, per(v))).collect()
}

/// The `hangar` binary to run: `given`, else the one next to this example's directory (where
/// `cargo xtask <xtask_command>` builds it).
pub fn hangar_binary(given: Option<&Path>, xtask_command: &str) -> anyhow::Result<PathBuf> {
    let hangar = match given {
        Some(path) => path.to_owned(),
        None => std::env::current_exe()?
            .parent()
            .and_then(Path::parent)
            .context("no parent directory of the example")?
            .join("hangar"),
    };
    ensure!(
        hangar.is_file(),
        "no hangar binary at {} (build it with `cargo build --release -p hangar`, or run \
         `cargo xtask {xtask_command}`)",
        hangar.display()
    );
    Ok(hangar)
}

/// The apiserver's `apiserver_request_total`, summed by (verb, resource with subresource) —
/// e.g. `("PATCH", "pods/status")`. Differences of two readings count what happened between.
#[allow(dead_code)] // chaos counts no apiserver requests
pub async fn apiserver_requests(
    client: &Client,
) -> anyhow::Result<std::collections::BTreeMap<(String, String), u64>> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let mut counts = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels.split(',').find_map(|kv| {
                kv.strip_prefix(name)
                    .and_then(|v| v.strip_prefix("=\""))
                    .and_then(|v| v.strip_suffix('"'))
            })
        };
        let mut resource = label("resource").unwrap_or("?").to_owned();
        if let Some(sub) = label("subresource").filter(|s| !s.is_empty()) {
            resource = format!("{resource}/{sub}");
        }
        let verb = label("verb").unwrap_or("?").to_owned();
        *counts.entry((verb, resource)).or_default() += value.trim().parse::<f64>()? as u64;
    }
    Ok(counts)
}

/// The `hangar run` child process a benchmark measures; killed when dropped.
pub struct Controller {
    pub child: std::process::Child,
}

impl Controller {
    /// Its process ID, for CPU accounting.
    #[allow(dead_code)] // bench-lifecycle reads only the totals `stop` returns
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads peak RSS (MiB) and CPU seconds from `/proc`, then stops the process.
    #[allow(dead_code)] // chaos runs its replicas itself
    pub fn stop(&mut self) -> anyhow::Result<(f64, f64)> {
        let usage = peak_rss_and_cpu(self.child.id())?;
        self.child.kill()?;
        self.child.wait()?;
        Ok(usage)
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// ARC's `--sync-period` in the benchmarks: its chart's default (`syncPeriod: 1m`). It paces
/// ARC's pull-based metrics as `hangar run --sync-period` paces Hangar's.
pub const ARC_SYNC_PERIOD: std::time::Duration = std::time::Duration::from_secs(60);

/// Starts ARC's manager and `github-webhook-server` on the control plane of `kubeconfig`,
/// watching [`NAMESPACE`] with [`CONTROLLER_PAT`] against `github`; their logs, certificate and
/// scratch files go to `dir`.
#[allow(dead_code)] // only the benchmarks that compare with ARC start it
pub fn spawn_arc(
    binaries: &hangar_testkit::arc::ArcBinaries,
    kubeconfig: &Path,
    github: &str,
    webhook_addr: std::net::SocketAddr,
    webhook_secret: &str,
    dir: &Path,
) -> anyhow::Result<hangar_testkit::arc::ArcProcesses> {
    use hangar_testkit::control_plane::free_port;
    std::fs::create_dir_all(dir)?;
    let loopback = |port| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let config = hangar_testkit::arc::ArcConfig {
        kubeconfig: kubeconfig.to_owned(),
        github_url: github.to_owned(),
        github_token: CONTROLLER_PAT.to_owned(),
        webhook_secret: webhook_secret.to_owned(),
        namespace: NAMESPACE.to_owned(),
        webhook_addr,
        manager_metrics_addr: loopback(free_port()?),
        webhook_metrics_addr: loopback(free_port()?),
        admission_port: free_port()?,
        sync_period: ARC_SYNC_PERIOD,
        dir: dir.to_owned(),
    };
    Ok(hangar_testkit::arc::ArcProcesses::spawn(binaries, &config)?)
}

/// `hangar run` against the control plane of `kubeconfig` and ghsim at `github`, watching
/// [`NAMESPACE`] with [`CONTROLLER_PAT`], logging at `$HANGAR_LOG` (default `warn`): each
/// benchmark adds the flags of its own.
#[allow(dead_code)] // chaos runs its replicas itself
pub fn hangar_run(hangar: &Path, kubeconfig: &Path, github: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(hangar);
    cmd.args([
        "run",
        "--github-url",
        github,
        "--github-api-url",
        github,
        "--watch-namespace",
        NAMESPACE,
    ])
    .env("KUBECONFIG", kubeconfig)
    .env("GITHUB_TOKEN", CONTROLLER_PAT)
    .env(
        "RUST_LOG",
        std::env::var("HANGAR_LOG").unwrap_or_else(|_| "warn".to_owned()),
    );
    cmd
}

/// The measured controller's processes: `hangar run`, or ARC's two programs.
#[allow(dead_code)] // chaos runs its replicas itself
pub enum Running {
    Hangar(Controller),
    Arc(hangar_testkit::arc::ArcProcesses),
}

#[allow(dead_code)] // chaos runs its replicas itself
impl Running {
    /// The process IDs.
    pub fn pids(&self) -> Vec<u32> {
        match self {
            Running::Hangar(c) => vec![c.child.id()],
            Running::Arc(arc) => arc.pids().to_vec(),
        }
    }

    /// Peak RSS (MiB; for ARC summed over its two processes, an upper bound of their peak
    /// together) and CPU seconds, then stops them.
    pub fn stop(&mut self) -> anyhow::Result<(f64, f64)> {
        match self {
            Running::Hangar(c) => c.stop(),
            Running::Arc(arc) => {
                let (mut rss, mut cpu) = (0.0, 0.0);
                for pid in arc.pids() {
                    let (r, c) = peak_rss_and_cpu(pid)?;
                    rss += r;
                    cpu += c;
                }
                arc.kill();
                Ok((rss, cpu))
            }
        }
    }
}

/// Logs to stderr, at `warn` unless `RUST_LOG` says otherwise.
#[allow(dead_code)] // chaos also writes the simulators' log to a file
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
}

/// The steady load of the webhook benchmarks and their floor.
#[derive(Debug, clap::Args)]
#[allow(dead_code)] // bench-lifecycle scales a deployment instead
pub struct Load {
    /// Jobs queued per second.
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// For how many seconds jobs are queued.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// How long each job runs.
    #[arg(long, default_value_t = 2000)]
    pub job_ms: u64,
    /// Simulated nodes (110 pods each at most).
    #[arg(long, default_value_t = 4)]
    pub nodes: usize,
}

#[allow(dead_code)] // bench-lifecycle scales a deployment instead
impl Load {
    /// Refuses a load that would queue nothing.
    pub fn check(&self) -> anyhow::Result<()> {
        ensure!(
            self.rate > 0.0 && self.seconds > 0,
            "--rate and --seconds must be positive"
        );
        Ok(())
    }
}

/// Busy and total jiffies of all CPUs at one moment, from `/proc/stat`.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)] // chaos does not read the machine's CPU
pub struct MachineCpu {
    pub busy: u64,
    pub total: u64,
}

#[allow(dead_code)] // chaos does not read the machine's CPU
impl MachineCpu {
    /// Reads the counters now.
    pub fn read() -> anyhow::Result<Self> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        let fields: Vec<u64> = stat
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("cpu "))
            .context("no cpu line in /proc/stat")?
            .split_whitespace()
            .take(8) // user nice system idle iowait irq softirq steal (guest is in user)
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        let total: u64 = fields.iter().sum();
        let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
        Ok(Self {
            busy: total - idle,
            total,
        })
    }

    /// The share of the machine's CPU time that was busy between `earlier` and `self`.
    pub fn busy_share_since(&self, earlier: &Self) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        let busy = self.busy.saturating_sub(earlier.busy);
        if total == 0 {
            0.0
        } else {
            busy as f64 / total as f64
        }
    }
}

/// Writes `report` as JSON to `out` (relative paths are from the workspace `root`), creating
/// its directory, stamped with the commit it was built from ([`built_from`]); returns where it
/// went.
pub fn write_results(
    root: &Path,
    out: &Path,
    report: &impl serde::Serialize,
) -> anyhow::Result<PathBuf> {
    #[derive(serde::Serialize)]
    struct Stamped<'a, R> {
        built_from: Option<String>,
        #[serde(flatten)]
        report: &'a R,
    }
    let out = if out.is_absolute() {
        out.to_owned()
    } else {
        root.join(out)
    };
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let stamped = Stamped {
        built_from: built_from(root),
        report,
    };
    std::fs::write(&out, serde_json::to_string_pretty(&stamped)? + "\n")
        .with_context(|| format!("failed to write {}", out.display()))?;
    Ok(out)
}

/// The commit of the checkout at `root` (abbreviated), with `+changes` when the code differs
/// from it (`crates/`, `xtask/`, `Cargo.lock`; results files do not count): the benchmarks run
/// what `cargo xtask` has just built from that tree. `None` outside a git checkout.
fn built_from(root: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
    };
    let head = git(&["rev-parse", "--short=7", "HEAD"]).filter(|o| o.status.success())?;
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    const CODE: [&str; 3] = ["crates", "xtask", "Cargo.lock"];
    let diff = [&["diff", "--quiet", "HEAD", "--"][..], &CODE[..]].concat();
    let clean = git(&diff).is_some_and(|o| o.status.success());
    let changes = if clean { "" } else { "+changes" };
    Some(format!("{head}{changes}"))
}

#[allow(dead_code)] // bench-lifecycle reports no latencies
/// Percentiles of one latency (nearest rank), in seconds.
#[derive(Debug, serde::Serialize)]
pub struct Latency {
    pub from: &'static str,
    pub to: &'static str,
    pub clock: &'static str,
    pub count: usize,
    pub min: Option<f64>,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
}

#[allow(dead_code)] // bench-lifecycle reports no latencies
impl Latency {
    pub fn of(
        from: &'static str,
        to: &'static str,
        clock: &'static str,
        mut values: Vec<f64>,
    ) -> Self {
        values.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let index = ((p * values.len() as f64).ceil() as usize).max(1) - 1;
            values.get(index).copied().map(round_us)
        };
        let mean = (!values.is_empty())
            .then(|| round_us(values.iter().sum::<f64>() / values.len() as f64));
        Self {
            from,
            to,
            clock,
            count: values.len(),
            min: values.first().copied().map(round_us),
            p50: rank(0.50),
            p95: rank(0.95),
            p99: rank(0.99),
            max: values.last().copied().map(round_us),
            mean,
        }
    }
}

/// Seconds from `from` to `to` (negative if `to` is earlier).
#[allow(dead_code)] // bench-lifecycle reports no latencies
pub fn secs(from: Timestamp, to: Timestamp) -> f64 {
    (to.as_nanosecond() - from.as_nanosecond()) as f64 / 1e9
}

/// Rounds to the microsecond, which is all the JSON needs.
#[allow(dead_code)] // bench-lifecycle reports no latencies
pub fn round_us(seconds: f64) -> f64 {
    (seconds * 1e6).round() / 1e6
}
