//! The `ghsim` binary: serves a simulated GitHub, or submits jobs to a running one.
//!
//! `ghsim --listen 127.0.0.1:8080 --org acme --repo acme/app` starts one (PAT `ghp_ghsim`
//! unless `--token` says otherwise); `ghsim submit --repository acme/app --count 3` queues jobs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use ghsim::{Faults, Sim, SimConfig, WorldConfig};

#[derive(Debug, Parser)]
#[command(
    name = "ghsim",
    version,
    about = "A GitHub simulator for Hangar: REST API, runner protocol, webhooks, faults, accounting."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Queue jobs on a running ghsim (POST /_ghsim/jobs).
    Submit(SubmitArgs),
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the URL is printed).
    #[arg(long, env = "GHSIM_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Base URL rendered into API links and runner configs (default: http://<listen>/).
    #[arg(long, env = "GHSIM_PUBLIC_URL")]
    public_url: Option<url::Url>,
    /// Personal access tokens to accept (repeatable).
    #[arg(
        long = "token",
        env = "GHSIM_TOKEN",
        value_delimiter = ',',
        default_value = "ghp_ghsim"
    )]
    tokens: Vec<String>,
    /// Enterprises to create (repeatable).
    #[arg(long = "enterprise", value_name = "SLUG")]
    enterprises: Vec<String>,
    /// Organizations to create, optionally in an enterprise (repeatable).
    #[arg(long = "org", value_name = "ORG[@ENTERPRISE]")]
    orgs: Vec<String>,
    /// Repositories to create, private (repeatable).
    #[arg(long = "repo", value_name = "OWNER/NAME")]
    repos: Vec<String>,
    /// Webhook receivers to register (repeatable): URL, optionally `URL#secret`.
    #[arg(long = "hook", value_name = "URL[#SECRET]")]
    hooks: Vec<String>,
    /// A JSON-lines scenario to replay after start.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Seed of generated tokens and fault draws.
    #[arg(long, default_value_t = 0x6873_696d)]
    seed: u64,
    /// Share of REST requests answered 502.
    #[arg(long, default_value_t = 0.0)]
    server_error_rate: f64,
    /// Share of REST requests answered with a secondary rate limit.
    #[arg(long, default_value_t = 0.0)]
    secondary_limit_rate: f64,
    /// Primary rate-limit budget per credential per hour.
    #[arg(long, default_value_t = 5000)]
    primary_budget: u64,
    /// Share of webhook deliveries dropped.
    #[arg(long, default_value_t = 0.0)]
    webhook_drop_rate: f64,
    /// Share of webhook deliveries duplicated.
    #[arg(long, default_value_t = 0.0)]
    webhook_duplicate_rate: f64,
    /// Share of webhook deliveries reordered.
    #[arg(long, default_value_t = 0.0)]
    webhook_reorder_rate: f64,
    /// Maximum random extra delay of webhook deliveries, ms.
    #[arg(long, default_value_t = 0)]
    webhook_max_delay_ms: u64,
    /// Webhook deliveries on their way at once. GitHub sends concurrently, in no promised
    /// order; 1 sends one at a time in event order.
    #[arg(long, default_value_t = 1)]
    webhook_concurrency: usize,
    /// Fail a queued job at once when no runner, online or offline, could take it (GitHub
    /// before late 2021 and older GitHub Enterprise Server releases).
    #[arg(long)]
    fail_jobs_without_runners: bool,
    /// Seconds after the last poll that a runner counts as offline.
    #[arg(long, default_value_t = 90)]
    offline_after_secs: u64,
    /// The lowest runner version served (GitHub's floor by default); `none` serves any.
    #[arg(long, default_value = ghsim::world::MINIMUM_RUNNER_VERSION)]
    minimum_runner_version: String,
}

#[derive(Debug, Args)]
struct SubmitArgs {
    /// The running ghsim.
    #[arg(long, env = "GHSIM_URL", default_value = "http://127.0.0.1:8080/")]
    url: url::Url,
    /// Repository `owner/name`.
    #[arg(long)]
    repository: String,
    /// Number of jobs (one run).
    #[arg(long, default_value_t = 1)]
    count: u32,
    /// `runs-on` labels, comma-separated.
    #[arg(long, value_delimiter = ',')]
    labels: Vec<String>,
    /// How long the simulated runner runs each job, ms.
    #[arg(long, default_value_t = 0)]
    duration_ms: u64,
    /// Conclusion the runner reports.
    #[arg(long, default_value = "success")]
    conclusion: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Submit(args)) => submit(args).await,
        None => serve(cli.serve).await,
    }
}

async fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let client = ghsim::control::Client::new(args.url)?;
    let submitted = client
        .submit_jobs(&ghsim::world::SubmitJobs {
            repository: args.repository,
            count: args.count,
            labels: args.labels,
            duration_ms: args.duration_ms,
            conclusion: Some(args.conclusion),
            workflow: None,
            job_name: None,
        })
        .await?;
    println!("{}", serde_json::to_string(&submitted)?);
    Ok(())
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let faults = Faults {
        server_error_rate: args.server_error_rate,
        secondary_limit_rate: args.secondary_limit_rate,
        primary_budget: args.primary_budget,
        webhook_drop_rate: args.webhook_drop_rate,
        webhook_duplicate_rate: args.webhook_duplicate_rate,
        webhook_reorder_rate: args.webhook_reorder_rate,
        webhook_max_delay_ms: args.webhook_max_delay_ms,
        ..Faults::default()
    }
    .merged(serde_json::json!({}))
    .context("invalid fault settings")?;
    let mut world = WorldConfig {
        seed: args.seed,
        offline_after: Duration::from_secs(args.offline_after_secs),
        fail_jobs_without_runners: args.fail_jobs_without_runners,
        minimum_runner_version: (args.minimum_runner_version != "none")
            .then(|| args.minimum_runner_version.clone()),
        ..WorldConfig::default()
    };
    if let Some(url) = &args.public_url {
        world.public_url = url.clone();
    }
    let sim = Sim::new(SimConfig {
        world,
        faults,
        webhook_concurrency: args.webhook_concurrency,
        ..SimConfig::default()
    });
    sim.update(|w, _| -> anyhow::Result<()> {
        for token in &args.tokens {
            w.add_pat(token, "default");
        }
        for slug in &args.enterprises {
            w.add_enterprise(slug);
        }
        for org in &args.orgs {
            let (login, enterprise) = match org.split_once('@') {
                Some((login, e)) => (login, Some(e)),
                None => (org.as_str(), None),
            };
            w.add_org(login, enterprise);
        }
        for repo in &args.repos {
            let (owner, name) = repo
                .split_once('/')
                .with_context(|| format!("--repo {repo:?} must be OWNER/NAME"))?;
            w.add_repo(owner, name, true);
        }
        Ok(())
    })?;
    for hook in &args.hooks {
        let (url, secret) = match hook.split_once('#') {
            Some((u, s)) => (u.to_owned(), Some(s.to_owned())),
            None => (hook.clone(), None),
        };
        sim.add_hook(ghsim::webhooks::NewHook {
            url,
            secret,
            content_type: Default::default(),
            events: Vec::new(),
            owner: None,
        });
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("unable to listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    if args.public_url.is_none() {
        sim.set_public_url(url::Url::parse(&format!("http://{addr}/"))?);
    }
    if let Some(path) = &args.scenario {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("unable to read {}", path.display()))?;
        let lines = ghsim::scenario::parse(&text).context("invalid scenario")?;
        tokio::spawn(ghsim::scenario::replay(sim.clone(), lines));
    }
    println!("ghsim listening on http://{addr}/");
    tracing::info!(%addr, tokens = args.tokens.len(), "ghsim started");
    ghsim::serve(listener, sim, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
    .context("server failed")?;
    Ok(())
}
