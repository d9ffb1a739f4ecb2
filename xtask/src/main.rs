//! Developer commands for Hangar (`cargo xtask <command>`).
//!
//! - `cluster build|up|down|status`: the local control plane (real etcd, kube-apiserver,
//!   kube-controller-manager, kube-scheduler on loopback), binaries cached per version outside
//!   the repository;
//! - `crds [--check]`: regenerate `deploy/crds/` and the Helm chart's `crds/` from the Rust
//!   types, or fail on drift;
//! - `demo`: the README's run command — a local cluster with the CRDs and examples applied;
//! - `bench-cluster`, `bench-lifecycle`, `bench-pods`: benchmarks writing `bench/results/`;
//! - `test`: the README's test command — lint, then the whole test suite against a control plane
//!   that lives exactly as long as the run.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use hangar_testkit::control_plane::{ControlPlane, StartOptions, admin_client};
use hangar_testkit::{Binaries, ETCD_VERSION, KUBERNETES_VERSION};

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
    /// Regenerate deploy/crds from the CRD types (`--check`: fail if they differ instead).
    Crds {
        /// Only compare; exit non-zero when deploy/crds is stale.
        #[arg(long)]
        check: bool,
    },
    /// Bring up the local cluster, install the CRDs, apply examples/ and show them.
    Demo {
        /// Namespace the examples go into.
        #[arg(long, default_value = "hangar-demo")]
        namespace: String,
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
    /// 1,000 runner pods on simulated nodes: Ready, registered in ghsim, deleted; writes
    /// bench/results/nodesim-*.json. Uses the `cargo xtask cluster up` control plane.
    BenchPods {
        /// Arguments for the benchmark (`-- --runners --pods 1000`).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Check formatting and lints, then run every test against a fresh control plane.
    Test {
        /// Skip `cargo fmt --check` and `cargo clippy`.
        #[arg(long)]
        no_lint: bool,
        /// Extra arguments for `cargo test` (after `--`).
        #[arg(last = true)]
        cargo_args: Vec<String>,
    },
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
        Cmd::Crds { check } => crds(check),
        Cmd::Demo { namespace } => demo(&namespace).await.map(|()| ExitCode::SUCCESS),
        Cmd::Test {
            no_lint,
            cargo_args,
        } => test(no_lint, &cargo_args).await,
        Cmd::BenchCluster { runs } => bench_cluster(runs).await.map(|()| ExitCode::SUCCESS),
        Cmd::BenchLifecycle { args } => {
            build_binaries()?;
            release_example("hangar", "bench-lifecycle", &["--bin", "hangar"], &args)
        }
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
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    if !extra.is_empty() {
        must(
            Command::new(&cargo)
                .current_dir(&root)
                .args(["build", "--release", "-p", package])
                .args(extra),
        )?;
    }
    let status = Command::new(&cargo)
        .current_dir(&root)
        .args([
            "run",
            "--release",
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

async fn demo(namespace: &str) -> Result<()> {
    let root = workspace_root();
    let dir = default_cluster_dir();
    let kubeconfig = up(&dir).await?;
    let binaries = Binaries::configured();
    let client = admin_client(&kubeconfig).await?;
    hangar_testkit::crds::apply_and_wait(&client, &hangar_api::crds())
        .await
        .map_err(anyhow::Error::msg)?;
    eprintln!("xtask: CRDs installed");

    // 1. The ARC examples, unchanged, in a namespace of their own (they name real GitHub
    //    organizations, so the operator below does not watch it).
    let examples_ns = format!("{namespace}-examples");
    for ns in [namespace, examples_ns.as_str()] {
        let file = dir.join(format!("namespace-{ns}.yaml"));
        std::fs::write(
            &file,
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
        )?;
        must(
            kubectl(&binaries, &kubeconfig)
                .args(["apply", "--server-side", "-f"])
                .arg(&file),
        )?;
    }
    must(
        kubectl(&binaries, &kubeconfig)
            .args(["apply", "--server-side", "-n", &examples_ns, "-f"])
            .arg(root.join("examples")),
    )?;
    for kind in [
        "runnerdeployments",
        "runnersets",
        "horizontalrunnerautoscalers",
    ] {
        println!("\n$ kubectl get {kind} -n {examples_ns}");
        must(kubectl(&binaries, &kubeconfig).args(["get", kind, "-n", &examples_ns]))?;
    }

    // 2. Hangar for real: ghsim plays GitHub, nodesim plays kubelets and the runners.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
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
    let bin = |name: &str| root.join("target").join("debug").join(name);
    let port = hangar_testkit::control_plane::free_port()?;
    let url = format!("http://127.0.0.1:{port}/");
    let listen = format!("127.0.0.1:{port}");
    let kc = kubeconfig.display().to_string();
    let metrics_addr = format!("127.0.0.1:{}", hangar_testkit::control_plane::free_port()?);
    let probe_addr = format!("127.0.0.1:{}", hangar_testkit::control_plane::free_port()?);
    ControlPlane::spawn_recorded(
        &dir,
        "ghsim",
        &bin("ghsim"),
        &["--listen", &listen, "--org", "octo", "--repo", "octo/app"],
        &[],
    )?;
    ControlPlane::spawn_recorded(
        &dir,
        "nodesim",
        &bin("nodesim"),
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
        &dir,
        "hangar",
        &bin("hangar"),
        &[
            "run",
            "--github-url",
            &url,
            "--github-api-url",
            &url,
            "--watch-namespace",
            namespace,
            "--sync-period",
            "10s",
            "--metrics-addr",
            &metrics_addr,
            "--health-probe-bind-address",
            &probe_addr,
        ],
        &[
            ("KUBECONFIG", &kc),
            ("GITHUB_TOKEN", "ghp_ghsim"),
            ("RUST_LOG", "info,kube=warn"),
        ],
    )?;
    eprintln!(
        "xtask: ghsim at {url}, nodesim (2 nodes) and hangar started (logs in {})",
        dir.join("logs").display()
    );

    let deployment = "apiVersion: actions.summerwind.dev/v1alpha1\nkind: RunnerDeployment\nmetadata:\n  name: demo\nspec:\n  replicas: 2\n  template:\n    spec:\n      repository: octo/app\n      labels: [linux]\n";
    let file = dir.join("demo-runnerdeployment.yaml");
    std::fs::write(&file, deployment)?;
    must(
        kubectl(&binaries, &kubeconfig)
            .args(["apply", "--server-side", "-n", namespace, "-f"])
            .arg(&file),
    )?;

    wait_for(
        "2 registered runners",
        std::time::Duration::from_secs(120),
        || {
            let out = kubectl(&binaries, &kubeconfig)
                .args([
                    "get",
                    "runners",
                    "-n",
                    namespace,
                    "-o",
                    "jsonpath={.items[*].status.phase}",
                ])
                .output()
                .ok()?;
            let phases = String::from_utf8_lossy(&out.stdout).to_string();
            (phases
                .split_whitespace()
                .filter(|p| *p == "Running")
                .count()
                >= 2)
                .then_some(())
        },
    )?;
    println!("\n$ kubectl get runnerdeployments,runners -n {namespace}");
    must(kubectl(&binaries, &kubeconfig).args([
        "get",
        "runnerdeployments,runners",
        "-n",
        namespace,
    ]))?;

    println!("\n$ ghsim submit --repository octo/app --count 3 --labels linux --duration-ms 3000");
    must(Command::new(bin("ghsim")).args([
        "submit",
        "--url",
        &url,
        "--repository",
        "octo/app",
        "--count",
        "3",
        "--labels",
        "linux",
        "--duration-ms",
        "3000",
    ]))?;
    let summary = wait_for(
        "3 completed jobs",
        std::time::Duration::from_secs(120),
        || {
            let body = http_get(port, "/_ghsim/accounting")?;
            let value: serde_json::Value = serde_json::from_str(&body).ok()?;
            let jobs = value.get("jobs_summary")?.clone();
            (jobs.get("completed")?.as_u64()? >= 3).then_some(jobs)
        },
    )?;
    println!(
        "\nghsim: {} jobs completed, {} interrupted, {} API calls in all",
        summary["completed"],
        summary["interrupted"],
        http_get(port, "/_ghsim/accounting")
            .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
            .map(|v| v["api_calls_total"].to_string())
            .unwrap_or_default()
    );
    println!("\n$ kubectl get runners,pods -n {namespace}");
    must(kubectl(&binaries, &kubeconfig).args(["get", "runners,pods", "-n", namespace]))?;

    println!(
        "\nThe cluster keeps running. Explore it with:\n  export KUBECONFIG={}",
        kubeconfig.display()
    );
    println!("  kubectl get runners -n {namespace} -w");
    println!(
        "  {} submit --url {url} --repository octo/app --count 5 --labels linux",
        bin("ghsim").display()
    );
    println!("  kubectl explain runnerdeployment.spec.template.spec");
    println!("Stop everything with: cargo xtask cluster down");
    Ok(())
}

/// Polls `check` every 500 ms until it yields, or fails after `timeout`.
fn wait_for<T>(
    what: &str,
    timeout: std::time::Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return Ok(v);
        }
        if Instant::now() > until {
            bail!(
                "timed out after {timeout:?} waiting for {what}; see the logs in .hangar/cluster/logs"
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// A plain HTTP/1.0 GET on loopback (ghsim's control API); the body, if the answer is 200.
fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let ok = head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200");
    ok.then(|| body.to_owned())
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

async fn test(no_lint: bool, cargo_args: &[String]) -> Result<ExitCode> {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
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
        .args(["test", "--workspace"])
        .args(cargo_args)
        .env("HANGAR_TEST_KUBECONFIG", plane.kubeconfig())
        .env("HANGAR_K8S_BIN_DIR", binaries.dir())
        .status()
        .context("running cargo test")?;
    ControlPlane::stop(plane.dir())?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
