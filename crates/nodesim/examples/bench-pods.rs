//! Benchmark: how long until N runner-shaped pods on simulated nodes are Running and Ready
//! (and, with `--runners`, registered and online in ghsim), and how long until they are all
//! gone again after a delete.
//!
//! ```sh
//! cargo run --release -p hangar-nodesim --example bench-pods -- --pods 1000
//! cargo run --release -p hangar-nodesim --example bench-pods -- --pods 1000 --runners \
//!     --out bench/results/nodesim-runners.json
//! ```
//!
//! With `--runners` an in-process ghsim serves repository `acme/app`, the namespace holds a
//! registration token in Secret `registration`, and every `runner` container runs the simulated
//! actions/runner (ARC's env contract, token from the Secret): it registers, opens a session
//! and long-polls for jobs. On the delete, each idle runner removes itself from ghsim on its
//! SIGTERM, so "all deleted" then also means "no runner left registered".
//!
//! Uses the control plane named by `--kubeconfig` (default: `$HANGAR_TEST_KUBECONFIG`, then
//! `.hangar/cluster/kubeconfig`), creates a namespace, starts a simulator in-process, creates
//! the pods (a `runner` and a `docker` container each, as ARC's runner pods), waits for all to
//! be Ready (watch-driven), deletes them and waits until the objects are gone. Scheduling is
//! measured both ways by default: by kube-scheduler, and by the simulator's own binder.
//! Results go to `bench/results/nodesim-pods.json`.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use futures::{StreamExt, TryStreamExt};
use ghsim::world::TokenKind;
use hangar_github::Scope;
use hangar_testkit::eventually;
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, Namespace, ObjectFieldSelector, Pod, PodSpec, Secret,
    SecretKeySelector, ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};
use nodesim::annotations::parse_duration;
use nodesim::program::RunnerProgram;
use nodesim::{NodeSim, NodeSimConfig, NodeSimHandle, StatsSnapshot};
use serde::Serialize;

#[derive(Debug, Parser)]
struct Args {
    /// How many pods.
    #[arg(long, default_value_t = 1000)]
    pods: usize,
    /// How many simulated nodes (default: enough for 100 pods each).
    #[arg(long)]
    nodes: Option<usize>,
    /// Who binds the pods.
    #[arg(long, value_enum, default_value_t = Binding::Both)]
    bind: Binding,
    /// Simulated sandbox + image pull time per pod.
    #[arg(long, default_value = "0", value_parser = duration)]
    start_delay: Duration,
    /// Concurrent pod creations.
    #[arg(long, default_value_t = 32)]
    creators: usize,
    /// The control plane's kubeconfig.
    #[arg(long, env = "HANGAR_TEST_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Run the simulated actions/runner in each pod against an in-process ghsim and also wait
    /// for every runner to be registered and online.
    #[arg(long)]
    runners: bool,
    /// Where to write the results (relative paths are from the workspace root).
    #[arg(long, default_value = "bench/results/nodesim-pods.json")]
    out: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Binding {
    /// kube-scheduler binds the pods.
    Scheduler,
    /// The simulator binds them (`spec.schedulerName`).
    Simulator,
    /// One run each.
    Both,
}

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

#[derive(Debug, Serialize)]
struct Report {
    benchmark: &'static str,
    pods: usize,
    nodes: usize,
    containers_per_pod: usize,
    /// Whether each pod ran the simulated actions/runner against ghsim.
    runners: bool,
    start_delay_seconds: f64,
    machine_cpus: usize,
    runs: Vec<Run>,
}

#[derive(Debug, Serialize)]
struct Run {
    binding: Binding,
    /// From the first create until every create returned.
    create_seconds: f64,
    /// From the first create until every pod was Running with Ready=True.
    all_ready_seconds: f64,
    ready_pods_per_second: f64,
    /// With `--runners`: from the first create until every runner was registered in ghsim
    /// with an open session (online, long-polling for jobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    all_registered_seconds: Option<f64>,
    /// From the delete request until every pod object was gone (with `--runners`: and no
    /// runner was left registered in ghsim).
    all_deleted_seconds: f64,
    /// With `--runners`: ghsim's REST calls by endpoint (registration, removal, protocol).
    #[serde(skip_serializing_if = "Option::is_none")]
    github_calls: Option<std::collections::BTreeMap<String, u64>>,
    /// The simulator's counters over the whole run (start, readiness and deletion).
    simulator: StatsSnapshot,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let args = Args::parse();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let kubeconfig = args
        .kubeconfig
        .clone()
        .unwrap_or_else(|| root.join(".hangar/cluster/kubeconfig"));
    let client = client(&kubeconfig).await?;
    let nodes = args.nodes.unwrap_or(args.pods.div_ceil(100).max(1));

    let modes = match args.bind {
        Binding::Both => vec![Binding::Scheduler, Binding::Simulator],
        one => vec![one],
    };
    let mut runs = Vec::new();
    for mode in modes {
        let run = bench(&client, &args, nodes, mode).await?;
        println!(
            "{:?}: {} pods ready in {:.1} s ({:.0} pods/s), registered in {}, deleted in {:.1} s; \
             {} status patches",
            run.binding,
            args.pods,
            run.all_ready_seconds,
            run.ready_pods_per_second,
            run.all_registered_seconds
                .map_or("-".to_owned(), |s| format!("{s:.1} s")),
            run.all_deleted_seconds,
            run.simulator.status_patches
        );
        runs.push(run);
    }

    let report = Report {
        benchmark: "nodesim-pods",
        pods: args.pods,
        nodes,
        containers_per_pod: 2,
        runners: args.runners,
        start_delay_seconds: args.start_delay.as_secs_f64(),
        machine_cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        runs,
    };
    let out = if args.out.is_absolute() {
        args.out.clone()
    } else {
        root.join(&args.out)
    };
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("failed to write {}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}

async fn client(kubeconfig: &std::path::Path) -> anyhow::Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("failed to read {}", kubeconfig.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(Client::try_from(config)?)
}

async fn bench(client: &Client, args: &Args, nodes: usize, mode: Binding) -> anyhow::Result<Run> {
    let tag = format!("{}-{}", std::process::id(), mode_name(mode));
    let ns = format!("nodesim-bench-{tag}");
    create_namespace(client, &ns).await?;

    let mut config = NodeSimConfig::new(format!("bench-{tag}"), nodes);
    config.timing.start_delay = args.start_delay;
    if mode == Binding::Simulator {
        config.scheduler_name = Some(format!("bench-{tag}"));
    }
    let github = if args.runners {
        let github = start_github().await?;
        store_registration_token(client, &ns, &github).await?;
        config =
            config.with_runner_program(RunnerProgram::new().with_remove_credential(RUNNER_REMOVER));
        Some(github)
    } else {
        None
    };
    let sim = NodeSim::start(client.clone(), config).await?;
    let result = measure(client, args, &ns, &sim, github.as_ref()).await;
    sim.shutdown().await?;
    Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await?;
    let m = result?;
    Ok(Run {
        binding: mode,
        create_seconds: m.created.as_secs_f64(),
        all_ready_seconds: m.ready.as_secs_f64(),
        ready_pods_per_second: args.pods as f64 / m.ready.as_secs_f64(),
        all_registered_seconds: m.registered.map(|d| d.as_secs_f64()),
        all_deleted_seconds: m.deleted.as_secs_f64(),
        github_calls: github.map(|gh| calls_by_endpoint(&gh)),
        simulator: m.stats,
    })
}

/// The PAT the simulated runners mint remove tokens with on SIGTERM.
const RUNNER_REMOVER: &str = "ghp_bench_remover";
/// The repository every benchmark runner registers with.
const REPOSITORY: (&str, &str) = ("acme", "app");

async fn start_github() -> anyhow::Result<ghsim::Running> {
    let github = ghsim::Sim::new(ghsim::SimConfig::default());
    github.update(|w, _| {
        w.add_pat(RUNNER_REMOVER, "bench");
        w.add_org(REPOSITORY.0, None);
        w.add_repo(REPOSITORY.0, REPOSITORY.1, true);
    });
    Ok(ghsim::spawn(github).await?)
}

/// One registration token for all pods, in Secret `registration` (as a controller would).
async fn store_registration_token(
    client: &Client,
    ns: &str,
    github: &ghsim::Running,
) -> anyhow::Result<()> {
    let token = github.sim.update(|w, now| {
        w.create_runner_token(
            &Scope::repo(REPOSITORY.0, REPOSITORY.1),
            TokenKind::Registration,
            now,
        )
        .0
    });
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("registration".to_owned()),
            ..ObjectMeta::default()
        },
        string_data: Some([("runner_token".to_owned(), token)].into()),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(())
}

fn calls_by_endpoint(github: &ghsim::Running) -> std::collections::BTreeMap<String, u64> {
    let mut calls = std::collections::BTreeMap::new();
    for row in ghsim::accounting::snapshot(&github.sim).api_calls {
        *calls.entry(row.endpoint).or_default() += row.calls;
    }
    calls
}

/// (registered, online) runners in ghsim.
fn runner_counts(github: &ghsim::Running) -> (usize, usize) {
    github.sim.read(|w, _| {
        (
            w.runners.len(),
            w.runners.values().filter(|r| r.online()).count(),
        )
    })
}

/// ARC's runner env contract, the token from Secret `registration`, the name from the pod.
fn runner_env(github: &ghsim::Running) -> Vec<EnvVar> {
    let value = |name: &str, value: &str| EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    };
    vec![
        value("RUNNER_ORG", ""),
        value("RUNNER_REPO", &format!("{}/{}", REPOSITORY.0, REPOSITORY.1)),
        value("RUNNER_ENTERPRISE", ""),
        value("RUNNER_LABELS", "bench"),
        value("RUNNER_GROUP", ""),
        value("GITHUB_URL", github.url.as_str()),
        value("RUNNER_WORKDIR", "/runner/_work"),
        value("RUNNER_EPHEMERAL", "true"),
        EnvVar {
            name: "RUNNER_NAME".to_owned(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".to_owned(),
                    api_version: None,
                }),
                ..EnvVarSource::default()
            }),
        },
        EnvVar {
            name: "RUNNER_TOKEN".to_owned(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: "registration".to_owned(),
                    key: "runner_token".to_owned(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
        },
    ]
}

fn mode_name(mode: Binding) -> &'static str {
    match mode {
        Binding::Scheduler => "scheduler",
        Binding::Simulator => "simulator",
        Binding::Both => "both",
    }
}

async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    let until = Instant::now() + Duration::from_secs(30);
    while accounts.get_opt("default").await?.is_none() {
        anyhow::ensure!(
            Instant::now() < until,
            "no default ServiceAccount in {name}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

fn is_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    ready && status.and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// What one run measured.
struct Measured {
    created: Duration,
    ready: Duration,
    registered: Option<Duration>,
    deleted: Duration,
    stats: StatsSnapshot,
}

/// Polls `done` every 100 ms until it holds (then the time); fails after 10 minutes.
async fn until(what: &str, done: impl FnMut() -> bool) -> anyhow::Result<Instant> {
    let (limit, poll) = (Duration::from_secs(600), Duration::from_millis(100));
    eventually::until(what, limit, poll, done).await?;
    Ok(Instant::now())
}

async fn measure(
    client: &Client,
    args: &Args,
    ns: &str,
    sim: &NodeSimHandle,
    github: Option<&ghsim::Running>,
) -> anyhow::Result<Measured> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let placement = sim.placement();
    let env = github.map(runner_env);
    let template = |i: usize| {
        let container = |name: &str, image: &str| Container {
            name: name.to_owned(),
            image: Some(image.to_owned()),
            ..Container::default()
        };
        let mut runner = container("runner", "summerwind/actions-runner:latest");
        runner.env = env.clone();
        let mut spec = PodSpec {
            restart_policy: Some("Never".to_owned()),
            containers: vec![runner, container("docker", "docker:dind")],
            ..PodSpec::default()
        };
        placement.apply_to(&mut spec);
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("runner-{i:05}")),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
            status: None,
        }
    };

    // Watch before creating, so no transition is missed.
    let watch = {
        let pods = pods.clone();
        let total = args.pods;
        tokio::spawn(async move {
            let mut ready = HashSet::new();
            let mut events = watcher(pods, watcher::Config::default()).boxed();
            while let Some(event) = events.try_next().await? {
                if let Event::Apply(pod) | Event::InitApply(pod) = event
                    && is_ready(&pod)
                {
                    ready.insert(pod.metadata.name.unwrap_or_default());
                }
                if ready.len() == total {
                    return Ok::<Instant, anyhow::Error>(Instant::now());
                }
            }
            anyhow::bail!("pod watch ended")
        })
    };

    let started = Instant::now();
    futures::stream::iter(0..args.pods)
        .map(|i| {
            let pods = pods.clone();
            let pod = template(i);
            async move { pods.create(&PostParams::default(), &pod).await }
        })
        .buffer_unordered(args.creators)
        .try_collect::<Vec<_>>()
        .await?;
    let created = started.elapsed();
    let registered = match github {
        Some(gh) => {
            let all = until("runners registered and online", || {
                runner_counts(gh) == (args.pods, args.pods)
            })
            .await?;
            Some(all - started)
        }
        None => None,
    };
    let all_ready = tokio::time::timeout(Duration::from_secs(600), watch)
        .await
        .context("pods not ready within 10 minutes")???;
    let ready = all_ready - started;

    let deleting = Instant::now();
    pods.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let until_deleted = deleting + Duration::from_secs(600);
    loop {
        let left = pods.list_metadata(&ListParams::default().limit(1)).await?;
        if left.items.is_empty() {
            break;
        }
        anyhow::ensure!(
            Instant::now() < until_deleted,
            "pods not deleted within 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if let Some(gh) = github {
        until("runners removed from ghsim", || runner_counts(gh).0 == 0).await?;
    }
    Ok(Measured {
        created,
        ready,
        registered,
        deleted: deleting.elapsed(),
        stats: sim.stats(),
    })
}
