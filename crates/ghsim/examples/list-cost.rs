//! Benchmark: the API cost of listing runners 1,000 times with the client's HTTP cache on and
//! off, against an in-process ghsim over loopback HTTP.
//!
//! `cargo run -p hangar-ghsim --example list-cost [-- OUTPUT.json]` writes
//! `bench/results/list-runners-cache.json` by default. Simulated time advances 5 s between
//! calls (a controller resyncing every 5 s for ~83 minutes), and a runner registers every
//! 10 simulated minutes so revalidations sometimes see new content.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use ghsim::world::JitRequest;
use ghsim::{Sim, SimConfig};
use hangar_github::{
    ClientOptions, Credentials, Endpoint, GitHubApi, GitHubClient, ManualClock, Scope,
};
use serde_json::json;

const CALLS: u64 = 1000;
const RUNNERS: usize = 250;
const INTERVAL: Duration = Duration::from_secs(5);
const CHURN_EVERY: u64 = 120; // calls, i.e. every 10 simulated minutes

async fn measure(cache: bool) -> anyhow::Result<serde_json::Value> {
    let clock = ManualClock::at_epoch_2026();
    let sim = Sim::new(SimConfig {
        clock: Arc::new(clock.clone()),
        ..SimConfig::default()
    });
    let scope = Scope::org("acme");
    sim.update(|w, now| {
        w.add_pat("ghp_bench", "bench");
        w.add_org("acme", None);
        for i in 0..RUNNERS {
            let request = JitRequest {
                name: Some(format!("runner-{i}")),
                runner_group_id: Some(1),
                labels: Some(vec!["self-hosted".into()]),
                work_folder: None,
            };
            w.generate_jit(&scope, request, now)
                .expect("runner registers");
        }
    });
    let gh = ghsim::spawn(sim).await?;
    let url = gh.url.as_str();
    let client = GitHubClient::new(
        Endpoint::custom(url, url)?,
        Credentials::token("ghp_bench"),
        ClientOptions {
            cache,
            clock: Arc::new(clock.clone()),
            ..ClientOptions::default()
        },
    )?;
    let started = Instant::now();
    let mut seen = 0;
    for call in 0..CALLS {
        if call > 0 && call % CHURN_EVERY == 0 {
            gh.sim.update(|w, now| {
                let request = JitRequest {
                    name: Some(format!("late-{call}")),
                    runner_group_id: Some(1),
                    labels: Some(vec!["self-hosted".into()]),
                    work_folder: None,
                };
                w.generate_jit(&scope, request, now)
                    .expect("runner registers");
            });
        }
        seen = client
            .list_runners(&scope)
            .await
            .context("list runners")?
            .len();
        clock.advance(INTERVAL);
    }
    let elapsed = started.elapsed();
    let stats = client.stats();
    let (calls, cost, not_modified) = gh.sim.read(|w, _| {
        w.calls.values().fold((0, 0, 0), |a, s| {
            (a.0 + s.calls, a.1 + s.charged, a.2 + s.not_modified)
        })
    });
    let budget = client.rate_limit();
    Ok(json!({
        "cache": cache,
        "list_calls": CALLS,
        "runners_at_end": seen,
        "http_requests": stats.requests,
        "served_from_cache": stats.cache_hits,
        "revalidated_304": stats.not_modified,
        "ghsim_api_calls": calls,
        "ghsim_not_modified": not_modified,
        "rate_limit_cost": cost,
        "rate_limit_remaining": budget.map(|b| b.remaining),
        "wall_seconds": elapsed.as_secs_f64(),
    }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let output = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../bench/results/list-runners-cache.json")
        });
    let on = measure(true).await?;
    let off = measure(false).await?;
    let result = json!({
        "benchmark": "list-runners-cache",
        "description": "GitHubClient::list_runners against ghsim over loopback HTTP, 1,000 times, simulated time +5 s per call, one new runner every 10 simulated minutes; per_page=100",
        "runners_at_start": RUNNERS,
        "interval_seconds": INTERVAL.as_secs(),
        "cache_on": on,
        "cache_off": off,
    });
    if let Some(dir) = output.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&output, serde_json::to_string_pretty(&result)? + "\n")
        .with_context(|| format!("unable to write {}", output.display()))?;
    println!("{}", serde_json::to_string_pretty(&result)?);
    let shown = output.canonicalize().unwrap_or(output);
    println!("wrote {}", shown.display());
    Ok(())
}
