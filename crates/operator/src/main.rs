//! `hangar`: the operator binary.
//!
//! - `hangar run`: the controller manager (Runner, runner pods, RunnerReplicaSet,
//!   RunnerDeployment), with ARC's flag names where ARC has one;
//! - `hangar crd`: print the CustomResourceDefinitions.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use hangar::context::Settings;
use hangar::runner_pod::PodDefaults;
use hangar_github::{ClientOptions, ClientRegistry, Credentials, Endpoint, Secret};

/// Hangar runs GitHub Actions self-hosted runners as Kubernetes pods, compatible with
/// actions-runner-controller's `actions.summerwind.dev/v1alpha1` API.
#[derive(Debug, Parser)]
#[command(name = "hangar", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions as a multi-document YAML stream
    /// (`hangar crd | kubectl apply --server-side -f -`).
    Crd,
    /// Run the controllers.
    Run(Box<RunArgs>),
}

/// Flags of `hangar run`; names follow ARC's controller manager.
#[derive(Debug, Args)]
struct RunArgs {
    /// GitHub's web URL (github.com, a GHE.com tenant, or a simulator).
    #[arg(long, env = "GITHUB_URL", default_value = "https://github.com/")]
    github_url: String,
    /// GitHub Enterprise Server URL; its API lives under /api/v3.
    #[arg(long, env = "GITHUB_ENTERPRISE_URL")]
    github_enterprise_url: Option<String>,
    /// REST API base URL, overriding what `--github-url` implies (e.g. a GitHub simulator or an
    /// API proxy that serves the API at its root).
    #[arg(long, env = "GITHUB_API_URL")]
    github_api_url: Option<String>,
    /// Personal access token (prefer the environment variable; flags show up in `ps`).
    #[arg(long, env = "GITHUB_TOKEN", hide_env_values = true)]
    github_token: Option<String>,
    /// Only watch this namespace (default: all).
    #[arg(long)]
    watch_namespace: Option<String>,
    /// Default runner image.
    #[arg(long, default_value = "summerwind/actions-runner:latest")]
    runner_image: String,
    /// Default dind sidecar image.
    #[arg(long, default_value = "docker:dind")]
    docker_image: String,
    /// Docker group GID when the runner image does not reveal it.
    #[arg(long, default_value = "1001")]
    docker_gid: String,
    /// Registry mirror for dockerd.
    #[arg(long)]
    docker_registry_mirror: Option<String>,
    /// Safety-net resync interval.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    sync_period: Duration,
    /// Register runners with just-in-time configurations (one API call, no reusable token in
    /// any pod). Per Runner: annotation `hangar.dev/registration: jit`.
    #[arg(long)]
    jit: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("invalid duration {s:?} (use e.g. 30s, 1m, 1h)")),
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Crd => {
            let mut out = std::io::stdout().lock();
            let docs: Vec<String> = hangar_api::crd_files()
                .into_iter()
                .map(|(_, yaml)| yaml)
                .collect();
            if let Err(e) = out.write_all(join_documents(&docs).as_bytes()) {
                eprintln!("error: failed to write CRDs: {e}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Command::Run(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info,kube=warn".into()),
                )
                .init();
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(run(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let endpoint = match (&args.github_api_url, &args.github_enterprise_url) {
        (Some(api), _) => Endpoint::custom(api, &args.github_url),
        (None, Some(url)) => Endpoint::from_enterprise_url(url),
        (None, None) => Endpoint::from_web_url(&args.github_url),
    }
    .context("invalid GitHub URL")?;
    let token = args
        .github_token
        .clone()
        .context("no GitHub credentials: set GITHUB_TOKEN (GitHub App flags are not wired yet)")?;
    let registry = ClientRegistry::new(endpoint.clone(), ClientOptions::default());
    let github = registry
        .client(Credentials::Token(Secret::new(token)))
        .context("cannot build the GitHub client")?;
    let client = kube::Client::try_default()
        .await
        .context("cannot reach Kubernetes")?;
    let settings = Settings {
        pod_defaults: PodDefaults {
            runner_image: args.runner_image,
            docker_image: args.docker_image,
            docker_gid: args.docker_gid,
            docker_registry_mirror: args.docker_registry_mirror,
            github_url: endpoint.web_url().to_string(),
            ..PodDefaults::default()
        },
        jit: args.jit,
        sync_period: args.sync_period,
        ..Settings::default()
    };
    hangar::manager::run(client, github as Arc<_>, settings, args.watch_namespace).await;
    Ok(())
}

/// Joins YAML documents into one stream, each introduced by `---`.
fn join_documents(docs: &[String]) -> String {
    docs.iter()
        .map(|d| format!("---\n{}", d.trim_start_matches("---\n")))
        .collect::<Vec<_>>()
        .join("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_document_gets_exactly_one_separator() {
        let joined = join_documents(&["a: 1\n".into(), "---\nb: 2\n".into()]);
        assert_eq!(joined, "---\na: 1\n---\nb: 2\n");
    }

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("soon").is_err());
    }
}
