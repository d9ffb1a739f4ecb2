//! `nodesim`: run simulated nodes against a cluster until interrupted.
//!
//! ```sh
//! nodesim --kubeconfig .hangar/cluster/kubeconfig --nodes 3 --node-prefix sim --runner
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use nodesim::annotations::parse_duration;
use nodesim::program::{ContainerSelector, ProgramRule, ProgramSpec, RunnerProgram};
use nodesim::{NodeSim, NodeSimConfig, Programs, Timing};

/// Simulated kubelets: registers nodes, runs the pods bound to them, finishes deletions.
#[derive(Debug, Parser)]
#[command(name = "nodesim", version)]
struct Args {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then the in-cluster config).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// How many nodes to run.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Node-name prefix and pool label (`nodesim.hangar.dev/pool`).
    #[arg(long, default_value = "sim")]
    node_prefix: String,
    /// CPU capacity per node.
    #[arg(long, default_value = "32")]
    cpu: String,
    /// Memory capacity per node.
    #[arg(long, default_value = "128Gi")]
    memory: String,
    /// Pod capacity per node (at most 250).
    #[arg(long, default_value_t = 110)]
    max_pods: u32,
    /// Extra node label KEY=VALUE (repeatable).
    #[arg(long = "label", value_parser = key_value)]
    labels: Vec<(String, String)>,
    /// Do not taint the nodes (any pod may then land on them).
    #[arg(long)]
    no_taint: bool,
    /// Sandbox + image pull time before a pod's containers start (e.g. 500ms, 2s).
    #[arg(long, value_parser = duration)]
    start_delay: Option<Duration>,
    /// Test timing: short start delay and back-offs, Lease renewed every second.
    #[arg(long)]
    fast: bool,
    /// Bind pods whose spec.schedulerName is NAME to these nodes (instead of kube-scheduler).
    #[arg(long, value_name = "NAME")]
    scheduler_name: Option<String>,
    /// Run the actions/runner simulation in containers named `runner`: it registers with the
    /// GitHub at the pod's GITHUB_URL (ghsim), takes jobs and unregisters on SIGTERM. Pods
    /// can pick failure modes by annotation, e.g. `runner(registration=never)`.
    #[arg(long)]
    runner: bool,
    /// A PAT the simulated runners use to mint remove tokens when ghsim refuses their
    /// registration token for `config.sh remove` (see the runner program's docs).
    #[arg(
        long,
        env = "NODESIM_RUNNER_GITHUB_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    runner_github_token: Option<String>,
    /// Program for containers named CONTAINER, e.g. `runner=exit(0, 30s)` (repeatable; these
    /// rules take precedence over `--runner`).
    #[arg(long = "program", value_name = "CONTAINER=SPEC", value_parser = key_value)]
    programs: Vec<(String, String)>,
    /// Leave the Node objects in place on exit.
    #[arg(long)]
    keep_nodes: bool,
    /// Sustained pod writes per second.
    #[arg(long, default_value_t = 200.0)]
    qps: f64,
    /// Burst of pod writes.
    #[arg(long, default_value_t = 400)]
    burst: u32,
}

fn key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "nodesim=info".into()),
        )
        .init();
    let args = Args::parse();
    let mut config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("failed to read kubeconfig {}", path.display()))?;
            let options = kube::config::KubeConfigOptions::default();
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig given and no in-cluster config")?,
    };
    // A kubelet's client (client-go) does not retry a 429, 503 or 504 by itself; the pod
    // writers retry with their own back-off instead.
    config.default_retry = false;
    let client = kube::Client::try_from(config)?;

    let mut programs = Programs::new();
    if args.runner {
        let mut runner = RunnerProgram::new();
        if let Some(token) = &args.runner_github_token {
            runner = runner.with_remove_credential(token.clone());
        }
        programs = programs.with_runner(runner);
    }
    // Explicit rules go first, in the order given, ahead of the runner rule.
    for (container, text) in args.programs.iter().rev() {
        let spec: ProgramSpec = text.parse()?;
        programs.push_rule_first(ProgramRule {
            selector: ContainerSelector::container(container),
            program: programs.build(&spec)?,
        });
    }
    let mut config = NodeSimConfig::new(&args.node_prefix, args.nodes);
    config.programs = Arc::new(programs);
    if args.fast {
        config.timing = Timing::fast();
    }
    if let Some(delay) = args.start_delay {
        config.timing.start_delay = delay;
    }
    config.node.cpu = args.cpu;
    config.node.memory = args.memory;
    config.node.pods = args.max_pods;
    config.node.labels.extend(args.labels);
    if args.no_taint {
        config.node.taints.clear();
    }
    config.scheduler_name = args.scheduler_name;
    config.delete_nodes_on_shutdown = !args.keep_nodes;
    config.api.qps = args.qps;
    config.api.burst = args.burst;

    let sim = NodeSim::start(client, config).await?;
    let placement = sim.placement();
    tracing::info!(
        nodes = ?sim.node_names(),
        node_selector = ?placement.node_selector,
        "nodes ready; pods need the node selector and a toleration of nodesim.hangar.dev/simulated (Ctrl-C or SIGTERM stops)"
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted?,
        _ = term.recv() => {}
    }
    tracing::info!("stopping");
    sim.shutdown().await?;
    Ok(())
}
