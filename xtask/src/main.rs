//! Developer commands for Hangar (`cargo xtask <command>`).
//!
//! - `cluster build|up|down|status`: the local control plane (real etcd, kube-apiserver,
//!   kube-controller-manager, kube-scheduler on loopback), binaries cached per version outside
//!   the repository;
//! - `crds [--check]`: regenerate `deploy/crds/` and the Helm chart's `crds/` from the Rust
//!   types, or fail on drift;
//! - `demo`: the README's run command — a local cluster with the CRDs and ARC examples applied,
//!   then a burst of jobs on an ephemeral pool that Hangar autoscales from GitHub webhooks,
//!   watched live and summed up (see `demo.rs`);
//! - `bench-cluster`, `bench-lifecycle`, `bench-pods`, `bench-webhooks`, `bench-floor`:
//!   benchmarks writing `bench/results/`;
//! - `bench-knee`: `bench-floor` and `bench-webhooks` at a sweep of rates, the knee of each and
//!   Hangar's writes per job over the floor's in `bench/results/knee.json` (see `knee.rs`);
//! - `bench-vs-arc`: the webhook and lifecycle benchmarks for Hangar and for ARC v0.27.6 back to
//!   back, with their ratios in `bench/results/vs-arc.json` (see `vs_arc.rs`);
//! - `fuzz`: generated hostile input against the webhook, admission and CRD paths, counts in
//!   `bench/results/fuzz.json`;
//! - `test`: the README's test command — lint, then the whole test suite against a control plane
//!   that lives exactly as long as the run, then the demo in its short CI form (`demo --ci`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use hangar_testkit::control_plane::{ControlPlane, StartOptions};
use hangar_testkit::{Binaries, ETCD_VERSION, KUBERNETES_VERSION};

mod demo;
mod knee;
mod results;
mod vs_arc;

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "Hangar developer commands")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Build, start, stop or inspect the local control plane.
    Cluster {
        #[command(subcommand)]
        action: ClusterCmd,
    },
    /// Build actions-runner-controller's legacy binaries (the last legacy release) into the
    /// cache if missing, for running ARC beside Hangar.
    Arc {
        #[command(subcommand)]
        action: ArcCmd,
    },
    /// Regenerate deploy/crds from the CRD types (`--check`: fail if they differ instead).
    Crds {
        /// Only compare; exit non-zero when deploy/crds is stale.
        #[arg(long)]
        check: bool,
    },
    /// Bring up the local cluster with the CRDs and examples/, then run a burst of jobs on an
    /// ephemeral RunnerDeployment that Hangar scales from GitHub webhooks (ghsim as GitHub,
    /// nodesim as nodes), shown live, and print a summary. Exits non-zero if a job was
    /// interrupted. Leaves everything running (`cargo xtask cluster down` stops it).
    Demo {
        /// Namespace of the demo's pool (the examples go into `<namespace>-examples`).
        #[arg(long, default_value = "hangar-demo")]
        namespace: String,
        /// Jobs queued in the burst [default: 8; with --ci 4].
        #[arg(long)]
        jobs: Option<u32>,
        /// Seconds each job runs [default: 4; with --ci 2].
        #[arg(long)]
        job_seconds: Option<u64>,
        /// The autoscaler's maxReplicas (below --jobs, some jobs wait for a runner) [default:
        /// 6; with --ci 3].
        #[arg(long)]
        max_replicas: Option<u32>,
        /// The short form CI runs: a control plane of its own in target/hangar-demo-ci, a plain
        /// log, non-zero unless every job completed uninterrupted, everything stopped at the end.
        #[arg(long)]
        ci: bool,
        /// Run target/debug/{hangar,ghsim,nodesim} as they are instead of `cargo build`ing them
        /// first (`cargo xtask test` does so after `cargo test --no-run` has built them).
        #[arg(long)]
        no_build: bool,
    },
    /// Start and stop the control plane repeatedly; write start-up times to
    /// bench/results/control-plane-start.json.
    BenchCluster {
        /// How many start/stop cycles.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// Build release binaries and scale a RunnerDeployment 0 -> N -> 0 in token and JIT modes
    /// (private control planes, ghsim, nodesim, `hangar run`); writes
    /// bench/results/lifecycle.json. Extra arguments go to the benchmark (`-- --runners 50`).
    BenchLifecycle {
        /// Arguments for the benchmark.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Build release binaries and queue jobs at a steady rate (20/s for 60 s) for an ephemeral
    /// RunnerDeployment that `hangar run --webhook-addr` scales from ghsim's signed
    /// workflow_job webhooks (private control plane, nodesim); writes
    /// bench/results/webhooks.json. Extra arguments go to the benchmark (`-- --rate 5`).
    BenchWebhooks {
        /// Arguments for the benchmark.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Build release binaries (and ARC v0.27.6, cached) and run bench-webhooks (webhook- and
    /// pull-driven, at each rate) and bench-lifecycle's idle cycle for Hangar and for ARC, back
    /// to back on the same stack; writes bench/results/vs-arc.json with Hangar ÷ ARC ratios.
    BenchVsArc {
        /// Job rates per second, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = [2.0, 5.0, 10.0])]
        rates: Vec<f64>,
        /// Seconds of load at each rate.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Idle runners of the 0 → N → 0 cycle.
        #[arg(long, default_value_t = 20)]
        runners: usize,
        /// Run nothing; compose bench/results/vs-arc.json from the files the last runs left in
        /// bench/results/vs-arc/.
        #[arg(long)]
        compose_only: bool,
    },
    /// Build release binaries and run bench-floor and bench-webhooks at each rate, back to back
    /// on the same stack; writes bench/results/knee.json: each one's job → pod p99 by rate,
    /// its knee (the highest rate with p99 ≤ 1 s), and Hangar's apiserver writes per job over
    /// the floor's, by request.
    BenchKnee {
        /// Job rates per second, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = [4.0, 6.0, 8.0, 10.0, 12.0, 15.0])]
        rates: Vec<f64>,
        /// Seconds of load at each rate.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Run nothing; compose bench/results/knee.json from the files the last runs left in
        /// bench/results/knee/.
        #[arg(long)]
        compose_only: bool,
    },
    /// Chaos run: the local stack (private control plane, ghsim, nodesim, two `hangar run`
    /// replicas with leader election and webhook servers) under a seeded schedule of faults,
    /// then a drain and the invariants; writes bench/results/chaos-<seed>.json and exits
    /// non-zero on a violation. Prints its seed first; extra arguments go to the run
    /// (`-- --seed 7 --faults 50`, `-- --faults 1000` for a soak, `-- --dry-run`).
    Chaos {
        /// Cargo profile to build the run and `hangar` with: `release` for real runs, `dev`
        /// while developing (builds faster, runs slower).
        #[arg(long, default_value = "release")]
        profile: String,
        /// Arguments for the run.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// The floor under bench-webhooks: the Kubernetes API work an ideal ARC-compatible
    /// controller does per runner (Runner, pod, status, cleanup) at the same rate, without
    /// Hangar or GitHub (private control plane, nodesim); writes bench/results/floor.json.
    /// Extra arguments go to the benchmark (`-- --rate 10`).
    BenchFloor {
        /// Arguments for the benchmark.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Hostile input, generated: mutated real webhook deliveries, admission reviews and CRD
    /// objects through the real handlers in-process (release build, no cluster), checking no
    /// panic, bounded allocation and the answer each class of input must get; writes
    /// bench/results/fuzz.json and exits non-zero on a violation (the input goes to
    /// target/fuzz/). Prints its seed first; extra arguments go to the run
    /// (`-- --seed 7 --inputs 1000000 --target webhook|admission|crd|all`).
    Fuzz {
        /// Arguments for the run.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// 1,000 runner pods on simulated nodes: Ready, registered in ghsim, deleted; writes
    /// bench/results/nodesim-*.json. Uses the `cargo xtask cluster up` control plane.
    BenchPods {
        /// Arguments for the benchmark (`-- --runners --pods 1000`).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Check formatting and lints, run every test against a fresh control plane, then the
    /// demo in its short CI form (`demo --ci`), then the chaos sample (`chaos -- --sample`).
    Test {
        /// Skip `cargo fmt --check` and `cargo clippy`.
        #[arg(long)]
        no_lint: bool,
        /// Skip the demo (it is also skipped when cargo test arguments select some tests).
        #[arg(long)]
        no_demo: bool,
        /// Skip the chaos sample (it is also skipped when cargo test arguments select some
        /// tests).
        #[arg(long)]
        no_chaos: bool,
        /// Arguments for the chaos sample after `--sample`, e.g. `--chaos-args=--owners=eph,set`
        /// (the sample's default owners leave the RunnerSet out).
        #[arg(long, allow_hyphen_values = true, value_delimiter = ' ')]
        chaos_args: Vec<String>,
        /// Extra arguments for `cargo test` (after `--`).
        #[arg(last = true)]
        cargo_args: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum ArcCmd {
    /// Build ARC's `manager` and `github-webhook-server` into the cache if missing; print
    /// where they and ARC's CRDs are.
    Build,
}

#[derive(Debug, Subcommand)]
enum ClusterCmd {
    /// Build the pinned Kubernetes and etcd binaries into the cache if missing.
    Build,
    /// Start a control plane (building binaries first if needed) and print its kubeconfig.
    Up {
        /// State directory (PKI, kubeconfig, logs, PIDs).
        #[arg(long, default_value_os_t = default_cluster_dir())]
        dir: PathBuf,
    },
    /// Stop the processes recorded for the control plane (and only those).
    Down {
        /// State directory used by `up`.
        #[arg(long, default_value_os_t = default_cluster_dir())]
        dir: PathBuf,
    },
    /// Show which components run and where the kubeconfig is.
    Status {
        /// State directory used by `up`.
        #[arg(long, default_value_os_t = default_cluster_dir())]
        dir: PathBuf,
    },
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned)
        .unwrap_or_default()
}

fn default_cluster_dir() -> PathBuf {
    workspace_root().join(".hangar").join("cluster")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cmd: Cmd) -> Result<ExitCode> {
    match cmd {
        Cmd::Cluster { action } => cluster(action).await.map(|()| ExitCode::SUCCESS),
        Cmd::Arc {
            action: ArcCmd::Build,
        } => arc_build().map(|()| ExitCode::SUCCESS),
        Cmd::Crds { check } => crds(check),
        Cmd::Demo {
            namespace,
            jobs,
            job_seconds,
            max_replicas,
            ci,
            no_build,
        } => {
            let opts = demo::Options {
                namespace,
                jobs: jobs.unwrap_or(if ci { 4 } else { 8 }),
                job_seconds: job_seconds.unwrap_or(if ci { 2 } else { 4 }),
                max_replicas: max_replicas.unwrap_or(if ci { 3 } else { 6 }),
                ci,
                build: !no_build,
            };
            demo::run(&opts).await
        }
        Cmd::Test {
            no_lint,
            no_demo,
            no_chaos,
            chaos_args,
            cargo_args,
        } => {
            let chaos = (!no_chaos && cargo_args.is_empty()).then_some(chaos_args);
            test(
                no_lint,
                no_demo || !cargo_args.is_empty(),
                chaos.as_deref(),
                &cargo_args,
            )
            .await
        }
        Cmd::BenchCluster { runs } => bench_cluster(runs).await.map(|()| ExitCode::SUCCESS),
        Cmd::BenchLifecycle { args } => {
            build_binaries()?;
            release_example("hangar", "bench-lifecycle", &["--bin", "hangar"], &args)
        }
        Cmd::BenchWebhooks { args } => {
            build_binaries()?;
            release_example("hangar", "bench-webhooks", &["--bin", "hangar"], &args)
        }
        Cmd::BenchVsArc {
            rates,
            seconds,
            runners,
            compose_only,
        } => {
            if !compose_only {
                build_binaries()?;
                arc_build()?;
            }
            let plan = vs_arc::Plan {
                rates,
                seconds,
                runners,
                compose_only,
            };
            vs_arc::run(&workspace_root(), &plan)
        }
        Cmd::BenchKnee {
            rates,
            seconds,
            compose_only,
        } => {
            if !compose_only {
                build_binaries()?;
            }
            let plan = knee::Plan {
                rates,
                seconds,
                compose_only,
            };
            knee::run(&workspace_root(), &plan)
        }
        Cmd::Chaos { profile, args } => {
            build_binaries()?;
            example_with_profile(&profile, "hangar", "chaos", &["--bin", "hangar"], &args)
        }
        Cmd::BenchFloor { args } => release_example("hangar", "bench-floor", &[], &args),
        Cmd::Fuzz { args } => release_example("hangar", "fuzz", &[], &args),
        Cmd::BenchPods { args } => {
            let kubeconfig = up(&default_cluster_dir()).await?;
            let mut args = args;
            args.extend(["--kubeconfig".to_owned(), kubeconfig.display().to_string()]);
            release_example("hangar-nodesim", "bench-pods", &[], &args)
        }
    }
}

/// `cargo run --release -p <package> --example <example> -- <args>`, after building `extra`
/// targets of the package in release mode too.
fn release_example(
    package: &str,
    example: &str,
    extra: &[&str],
    args: &[String],
) -> Result<ExitCode> {
    example_with_profile("release", package, example, extra, args)
}

/// `cargo run --profile <profile> -p <package> --example <example> -- <args>`, after building
/// `extra` targets of the package with the same profile (examples find `hangar` next to them).
fn example_with_profile(
    profile: &str,
    package: &str,
    example: &str,
    extra: &[&str],
    args: &[String],
) -> Result<ExitCode> {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    if !extra.is_empty() {
        must(
            Command::new(&cargo)
                .current_dir(&root)
                .args(["build", "--profile", profile, "-p", package])
                .args(extra),
        )?;
    }
    let status = Command::new(&cargo)
        .current_dir(&root)
        .args([
            "run",
            "--profile",
            profile,
            "-p",
            package,
            "--example",
            example,
            "--",
        ])
        .args(args)
        .status()
        .context("failed to run cargo")?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn build_binaries() -> Result<Binaries> {
    let binaries = Binaries::configured();
    if binaries.missing().is_empty() {
        return Ok(binaries);
    }
    if std::env::var_os("HANGAR_K8S_BIN_DIR").is_some() {
        binaries
            .require()
            .context("HANGAR_K8S_BIN_DIR is set, so nothing is built")?;
        unreachable!("require() failed above");
    }
    let started = Instant::now();
    binaries
        .build_missing()
        .context("building the control plane")?;
    eprintln!(
        "xtask: control-plane binaries ready in {:.0?}",
        started.elapsed()
    );
    Ok(binaries)
}

fn arc_build() -> Result<()> {
    use hangar_testkit::arc::{ARC_VERSION, ArcBinaries};
    let arc = ArcBinaries::ensure().context("building actions-runner-controller")?;
    println!(
        "actions-runner-controller {ARC_VERSION} in {}",
        arc.dir().display()
    );
    println!("its CRDs in {}", ArcBinaries::crds_dir()?.display());
    Ok(())
}

async fn cluster(action: ClusterCmd) -> Result<()> {
    match action {
        ClusterCmd::Build => {
            let binaries = build_binaries()?;
            println!(
                "Kubernetes {KUBERNETES_VERSION} and etcd {ETCD_VERSION} in {}",
                binaries.dir().display()
            );
        }
        ClusterCmd::Up { dir } => {
            let plane = up(&dir).await?;
            println!("export KUBECONFIG={}", plane.display());
        }
        ClusterCmd::Down { dir } => {
            let stopped = ControlPlane::stop(&dir)?;
            for c in &stopped {
                eprintln!("stopped {} (pid {})", c.name, c.pid);
            }
            if stopped.is_empty() {
                eprintln!("nothing was running");
            }
        }
        ClusterCmd::Status { dir } => {
            let state = ControlPlane::read_state(&dir)?;
            println!("kubeconfig: {}", state.kubeconfig.display());
            println!("server:     {}", state.server);
            for (c, alive) in ControlPlane::running(&dir)? {
                let word = if alive { "running" } else { "STOPPED" };
                println!("{:<24} pid {:<8} {word}", c.name, c.pid);
            }
        }
    }
    Ok(())
}

/// Starts the control plane in `dir` unless one is already fully running there; returns the
/// kubeconfig path.
async fn up(dir: &Path) -> Result<PathBuf> {
    if let Ok(components) = ControlPlane::running(dir)
        && !components.is_empty()
        && components.iter().all(|(_, alive)| *alive)
    {
        let state = ControlPlane::read_state(dir)?;
        eprintln!("xtask: control plane already running at {}", state.server);
        return Ok(state.kubeconfig);
    }
    let binaries = build_binaries()?;
    let plane = ControlPlane::start(StartOptions::new(dir, binaries)).await?;
    eprintln!(
        "xtask: Kubernetes {KUBERNETES_VERSION} ready in {:.1}s at {} (logs in {})",
        plane.state().ready_after_secs,
        plane.state().server,
        plane.dir().join("logs").display()
    );
    Ok(plane.kubeconfig().to_owned())
}

fn crds(check: bool) -> Result<ExitCode> {
    // The Helm chart carries its own copy (charts install `crds/` before templates).
    let root = workspace_root();
    let dirs = [
        root.join("deploy").join("crds"),
        root.join("deploy").join("helm").join("hangar").join("crds"),
    ];
    let mut stale = vec![];
    for dir in &dirs {
        for (file, yaml) in hangar_api::crd_files() {
            let path = dir.join(&file);
            let current = std::fs::read_to_string(&path).unwrap_or_default();
            if current != yaml {
                stale.push(path.strip_prefix(&root).unwrap_or(&path).to_owned());
                if !check {
                    std::fs::create_dir_all(dir)?;
                    std::fs::write(&path, yaml)
                        .with_context(|| format!("writing {}", path.display()))?;
                }
            }
        }
    }
    if check && !stale.is_empty() {
        eprintln!("CRD files are stale: {stale:?}; run `cargo xtask crds`");
        return Ok(ExitCode::FAILURE);
    }
    if !check {
        eprintln!("xtask: {} CRD file(s) rewritten", stale.len());
    }
    Ok(ExitCode::SUCCESS)
}

fn kubectl(binaries: &Binaries, kubeconfig: &Path) -> Command {
    let mut cmd = Command::new(binaries.path("kubectl"));
    cmd.env("KUBECONFIG", kubeconfig);
    cmd
}

fn must(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

async fn bench_cluster(runs: usize) -> Result<()> {
    let binaries = build_binaries()?;
    let dir = workspace_root().join("target").join("bench-cluster");
    let mut ready = vec![];
    let mut stop = vec![];
    for i in 0..runs {
        let plane = ControlPlane::start(StartOptions::new(&dir, binaries.clone())).await?;
        ready.push(plane.state().ready_after_secs);
        let t = Instant::now();
        ControlPlane::stop(plane.dir())?;
        stop.push(t.elapsed().as_secs_f64());
        eprintln!(
            "run {}: ready in {:.2}s, stopped in {:.2}s",
            i + 1,
            ready[i],
            stop[i]
        );
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        serde_json::json!({ "min": v[0], "median": v[v.len() / 2], "max": v[v.len() - 1] })
    };
    let result = serde_json::json!({
        "what": "etcd + kube-apiserver from start call to /readyz 200 (incl. PKI), then stop of all four components",
        "kubernetes": KUBERNETES_VERSION,
        "etcd": ETCD_VERSION,
        "runs": runs,
        "ready_seconds": stats(&mut ready),
        "stop_seconds": stats(&mut stop),
    });
    let out = workspace_root().join("bench").join("results");
    std::fs::create_dir_all(&out)?;
    let file = out.join("control-plane-start.json");
    std::fs::write(&file, serde_json::to_string_pretty(&result)? + "\n")?;
    println!("{result:#}");
    eprintln!("xtask: wrote {}", file.display());
    Ok(())
}

/// What a build of the workspace from scratch takes in `target/` (debug tests, clippy, the
/// xtask), measured on a fresh clone without incremental state, with room to spare.
const TEST_BUILD_DISK_GIB: u64 = 6;

/// Says so up front when the disk holding `target/` is nearly full: otherwise the run fails
/// twenty minutes in with a linker's "No space left on device".
fn warn_if_disk_is_short(root: &std::path::Path) {
    let Ok(out) = Command::new("df").arg("-Pk").arg(root).output() else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    // POSIX format: the second line's fourth column is the available space in KiB.
    let available_kib = text
        .lines()
        .nth(1)
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|kib| kib.parse::<u64>().ok());
    if let Some(kib) = available_kib {
        let gib = kib / (1024 * 1024);
        eprintln!("xtask: {gib} GiB free for {}", root.display());
        if gib < TEST_BUILD_DISK_GIB {
            eprintln!(
                "xtask: warning: a build from scratch needs about {TEST_BUILD_DISK_GIB} GiB; \
                 `cargo clean` old checkouts or set CARGO_TARGET_DIR to a larger disk"
            );
        }
    }
}

/// `cargo xtask test`: lints, the test suite, the demo unless `no_demo`, the chaos sample with
/// `chaos` as extra arguments unless `None`. The later steps run even after a failed one, so a
/// CI log tells about all of them.
async fn test(
    no_lint: bool,
    no_demo: bool,
    chaos: Option<&[String]>,
    cargo_args: &[String],
) -> Result<ExitCode> {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    warn_if_disk_is_short(&root);
    if !no_lint {
        must(
            Command::new(&cargo)
                .current_dir(&root)
                .args(["fmt", "--all", "--check"]),
        )?;
        must(Command::new(&cargo).current_dir(&root).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))?;
    }
    // Compile before the control plane starts, so its readiness clock does not race the compiler.
    must(
        Command::new(&cargo)
            .current_dir(&root)
            .args(["test", "--workspace", "--no-run"]),
    )?;

    let binaries = build_binaries()?;
    // The takeover test runs ARC itself: build it (a few minutes, once) before any test's clock
    // runs, as the control plane is.
    let started = Instant::now();
    let arc =
        hangar_testkit::arc::ArcBinaries::ensure().context("building actions-runner-controller")?;
    eprintln!(
        "xtask: actions-runner-controller {} ready in {:.0?}",
        hangar_testkit::arc::ARC_VERSION,
        started.elapsed()
    );
    let dir = root.join("target").join("hangar-test-cluster");
    let mut opts = StartOptions::new(&dir, binaries.clone());
    opts.tie_to_pid = Some(std::process::id());
    let plane = ControlPlane::start(opts).await?;
    eprintln!(
        "xtask: test control plane ready in {:.1}s at {}",
        plane.state().ready_after_secs,
        plane.state().server
    );
    let status = Command::new(&cargo)
        .current_dir(&root)
        // Every test binary runs even after one fails, so a CI log tells of every failure.
        .args(["test", "--workspace", "--no-fail-fast"])
        .args(cargo_args)
        .env("HANGAR_TEST_KUBECONFIG", plane.kubeconfig())
        .env("HANGAR_K8S_BIN_DIR", binaries.dir())
        .env("HANGAR_ARC_BIN_DIR", arc.dir())
        // The chart tests run the `hangar` binary `cargo test --no-run` has just built.
        .env(
            "HANGAR_BIN",
            root.join("target").join("debug").join("hangar"),
        )
        .status()
        .context("running cargo test")?;
    ControlPlane::stop(plane.dir())?;
    let mut verdicts = vec![("tests", status.success())];
    if !no_demo {
        verdicts.push(("demo", demo_ci().await));
    }
    if let Some(args) = chaos {
        verdicts.push(("chaos sample", chaos_sample(args)));
    }
    eprintln!(
        "xtask: {}",
        verdicts
            .iter()
            .map(|(step, ok)| format!("{step} {}", if *ok { "passed" } else { "FAILED" }))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(exit_code(verdicts.iter().all(|(_, ok)| *ok)))
}

/// The chaos sample: fixed seeds' short schedules (one over every fault kind, then the seeds of
/// violations since fixed), each on its own private stack, debug builds (those `cargo test
/// --no-run` made), results in `target/chaos/sample-<seed>.json`; whether none found a violation.
fn chaos_sample(args: &[String]) -> bool {
    let started = Instant::now();
    let mut all = vec!["--sample".to_owned()];
    all.extend(args.iter().cloned());
    let passed = match example_with_profile("dev", "hangar", "chaos", &["--bin", "hangar"], &all) {
        Ok(code) => code == ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: the chaos sample failed: {e:#}");
            false
        }
    };
    eprintln!("xtask: chaos sample done in {:.0?}", started.elapsed());
    passed
}

/// The README's demo, short: binaries already built, a control plane of its own (the test
/// suite's is stopped), torn down at the end; whether it passed.
async fn demo_ci() -> bool {
    let started = Instant::now();
    let opts = demo::Options {
        namespace: "hangar-demo".to_owned(),
        jobs: 4,
        job_seconds: 2,
        max_replicas: 3,
        ci: true,
        build: false,
    };
    let demo = match demo::run(&opts).await {
        Ok(code) => code == ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: the demo failed: {e:#}");
            false
        }
    };
    eprintln!("xtask: demo done in {:.0?}", started.elapsed());
    demo
}

fn exit_code(success: bool) -> ExitCode {
    if success {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
