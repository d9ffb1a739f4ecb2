//! `cargo xtask bench-vs-arc`: Hangar and ARC v0.27.6 on the same stack, back to back in one
//! invocation, and their ratios.
//!
//! Every run gets its own private control plane, ghsim and nodesim, with the same manifests
//! (an ephemeral RunnerDeployment from 0 and its HorizontalRunnerAutoscaler), the same seeded
//! load and the same nodes; only the controller differs (release `hangar run`, or ARC's
//! manager and `github-webhook-server`, each with its own defaults). The runs:
//!
//! - `bench-webhooks` at each rate, webhook-driven (`workflowJob` trigger) and pull-driven
//!   (`TotalNumberOfQueuedAndInProgressWorkflowRuns`), for each controller;
//! - `bench-lifecycle`'s `idle` scenario: 0 → `--runners` registered idle runners → 0.
//!
//! Each run writes its own results file under `bench/results/vs-arc/`; this command then reads
//! them back and writes `bench/results/vs-arc.json`: each figure for both controllers and
//! Hangar ÷ ARC. A run that fails (ARC leaving jobs unstarted, say) still has its file read,
//! and its exit status is recorded next to its figures; one that wrote no file (its set-up
//! failed) is run once more.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::{Value, json};

use crate::results::{rates_arg, read, run_to_file, with_status, write};

/// The controllers, in the order they run at each step.
const CONTROLLERS: [&str; 2] = ["hangar", "arc"];

/// What one invocation runs.
pub struct Plan {
    /// Job rates (per second) of the steady-load runs.
    pub rates: Vec<f64>,
    /// Seconds of load per run.
    pub seconds: u64,
    /// Runners of the idle cycle.
    pub runners: usize,
    /// Run nothing: compose `vs-arc.json` from the results files the runs left.
    pub compose_only: bool,
}

/// Runs every benchmark of `plan` for both controllers, then writes `bench/results/vs-arc.json`
/// and prints the table.
pub fn run(root: &Path, plan: &Plan) -> Result<ExitCode> {
    let dir = root.join("bench/results/vs-arc");
    std::fs::create_dir_all(&dir)?;
    let mut steady = vec![];
    for mode in ["webhook", "pull"] {
        for &rate in &plan.rates {
            let mut by_controller = serde_json::Map::new();
            for controller in CONTROLLERS {
                let file = dir.join(format!("{mode}-{rate}-{controller}.json"));
                let mut args = vec![
                    "--controller".to_owned(),
                    controller.to_owned(),
                    "--rate".to_owned(),
                    rate.to_string(),
                    "--seconds".to_owned(),
                    plan.seconds.to_string(),
                    "--out".to_owned(),
                    file.display().to_string(),
                ];
                if mode == "pull" {
                    args.push("--pull".to_owned());
                }
                let status = if plan.compose_only {
                    ExitCode::SUCCESS
                } else {
                    run_to_file(&file, || {
                        super::release_example(
                            "hangar",
                            "bench-webhooks",
                            &["--bin", "hangar"],
                            &args,
                        )
                    })?
                };
                let figures = read(&file).map_or_else(
                    |e| json!({"error": format!("{e:#}")}),
                    |report| steady_figures(&report),
                );
                by_controller.insert(controller.to_owned(), with_status(figures, status));
            }
            let ratios = ratios(&by_controller);
            steady.push(json!({
                "mode": mode,
                "rate_per_second": rate,
                "seconds": plan.seconds,
                "controllers": by_controller,
                "hangar_over_arc": ratios,
            }));
        }
    }

    let file = dir.join("lifecycle.json");
    let status = if plan.compose_only {
        ExitCode::SUCCESS
    } else {
        let args = [
            "--modes".to_owned(),
            "token,arc".to_owned(),
            "--scenarios".to_owned(),
            "idle".to_owned(),
            "--runners".to_owned(),
            plan.runners.to_string(),
            "--out".to_owned(),
            file.display().to_string(),
        ];
        run_to_file(&file, || {
            super::release_example("hangar", "bench-lifecycle", &["--bin", "hangar"], &args)
        })?
    };
    let idle = read(&file).map_or_else(
        |e| json!({"error": format!("{e:#}")}),
        |report| idle_figures(&report, plan.runners),
    );
    let idle = with_status(idle, status);

    let report = json!({
        "benchmark": "vs-arc",
        "arc_version": hangar_testkit::arc::ARC_VERSION,
        "machine_cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "how": "each figure from a private control plane, ghsim and nodesim per run, same \
                manifests, load and nodes; hangar: release `hangar run` with its defaults; arc: \
                manager (--sync-period 1m, its chart's default) and github-webhook-server. \
                Ratios are Hangar / ARC: below 1 is better for Hangar on every figure.",
        "reproduce": format!(
            "cargo xtask bench-vs-arc --rates {} --seconds {} --runners {}",
            rates_arg(&plan.rates),
            plan.seconds,
            plan.runners
        ),
        "steady_load": steady,
        "idle_cycle": idle,
    });
    write(root, "bench/results/vs-arc.json", &report, &table(&report))?;
    Ok(ExitCode::SUCCESS)
}

/// The figures the comparison keeps from one `bench-webhooks` report. Latency is GitHub's queue
/// time (job created → a runner picked it up): what a user waits. The report's figures from
/// the `queued` delivery are not used: a job may start before its delivery arrives (on a runner
/// made for an earlier delivery), and a controller that answers slowly receives deliveries late
/// once ghsim's deliveries in flight are all waiting on it (the sender lag, kept as a figure of
/// its own).
fn steady_figures(r: &Value) -> Value {
    let jobs = r["jobs"]["queued"].as_f64().unwrap_or(0.0).max(1.0);
    let waited = &r["latency_seconds"]["job_queued_to_started"];
    let lag = &r["latency_seconds"]["job_queued_to_delivery"];
    json!({
        "jobs_queued": r["jobs"]["queued"],
        "jobs_completed": r["jobs"]["completed"],
        "interrupted_jobs": r["jobs"]["interrupted"],
        "queued_to_started_p50_seconds": waited["p50"],
        "queued_to_started_p95_seconds": waited["p95"],
        "queued_to_started_p99_seconds": waited["p99"],
        "delivery_sender_lag_p99_seconds": lag["p99"],
        "webhook_answer_p50_seconds": r["webhook_server"]["answer_latency_seconds"]["p50"],
        "controller_cpu_seconds_per_job":
            r["usage"]["controller_cpu_seconds"].as_f64().map(|c| c / jobs),
        "controller_peak_rss_mib": r["usage"]["controller_peak_rss_mib"],
        "apiserver_writes_per_job": r["apiserver_writes"]["per_job"],
        "apiserver_writes_per_job_by_request": r["apiserver_writes"]["per_job_by_request"],
        "github_calls_per_job": r["github_api"]["calls_per_job"],
        "runner_pods_created": r["jobs"]["runner_pods_created"],
    })
}

/// The figures kept from `bench-lifecycle`'s idle runs (`token` is Hangar's, `arc` ARC's).
fn idle_figures(r: &Value, runners: usize) -> Value {
    let mut by_controller = serde_json::Map::new();
    for run in r["runs"].as_array().into_iter().flatten() {
        let controller = match run["mode"].as_str() {
            Some("arc") => "arc",
            Some("token") => "hangar",
            _ => continue,
        };
        by_controller.insert(
            controller.to_owned(),
            json!({
                "scale_up_seconds": run["all_registered_seconds"],
                "scale_down_seconds": run["all_gone_seconds"],
                "github_calls_per_runner": run["github_calls_per_runner"],
                "controller_cpu_seconds": run["controller_cpu_seconds"],
                "controller_peak_rss_mib": run["controller_peak_rss_mib"],
                "interrupted_jobs": run["interrupted_jobs"],
            }),
        );
    }
    let ratios = ratios(&by_controller);
    json!({
        "runners": runners,
        "controllers": by_controller,
        "hangar_over_arc": ratios,
    })
}

/// Hangar ÷ ARC for every numeric figure both have (a zero ARC figure gives no ratio).
fn ratios(by_controller: &serde_json::Map<String, Value>) -> Value {
    let (Some(Value::Object(h)), Some(Value::Object(a))) =
        (by_controller.get("hangar"), by_controller.get("arc"))
    else {
        return json!({});
    };
    let mut out = serde_json::Map::new();
    for (key, hv) in h {
        if let (Some(hv), Some(av)) = (hv.as_f64(), a.get(key).and_then(Value::as_f64))
            && av != 0.0
            && key != "jobs_queued"
        {
            out.insert(key.clone(), json!((hv / av * 1000.0).round() / 1000.0));
        }
    }
    Value::Object(out)
}

/// The README's table: one row per figure and run, Hangar, ARC and the ratio.
fn table(report: &Value) -> String {
    let mut lines = vec![
        "| run | figure | Hangar | ARC | Hangar ÷ ARC |".to_owned(),
        "|---|---|---|---|---|".to_owned(),
    ];
    let figures = [
        "queued_to_started_p50_seconds",
        "queued_to_started_p95_seconds",
        "queued_to_started_p99_seconds",
        "delivery_sender_lag_p99_seconds",
        "webhook_answer_p50_seconds",
        "controller_cpu_seconds_per_job",
        "controller_peak_rss_mib",
        "apiserver_writes_per_job",
        "github_calls_per_job",
        "interrupted_jobs",
    ];
    let cell = |v: &Value| match v.as_f64() {
        Some(x) => format!("{x:.3}"),
        None => "—".to_owned(),
    };
    for run in report["steady_load"].as_array().into_iter().flatten() {
        let name = format!(
            "{} {}/s",
            run["mode"].as_str().unwrap_or("?"),
            run["rate_per_second"]
        );
        for figure in figures {
            lines.push(format!(
                "| {name} | {figure} | {} | {} | {} |",
                cell(&run["controllers"]["hangar"][figure]),
                cell(&run["controllers"]["arc"][figure]),
                cell(&run["hangar_over_arc"][figure]),
            ));
        }
    }
    let idle = &report["idle_cycle"];
    for figure in [
        "scale_up_seconds",
        "scale_down_seconds",
        "github_calls_per_runner",
        "controller_cpu_seconds",
        "controller_peak_rss_mib",
    ] {
        lines.push(format!(
            "| idle 0 → {} → 0 | {figure} | {} | {} | {} |",
            idle["runners"],
            cell(&idle["controllers"]["hangar"][figure]),
            cell(&idle["controllers"]["arc"][figure]),
            cell(&idle["hangar_over_arc"][figure]),
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_hangar_over_arc_for_figures_both_have() {
        let by = json!({
            "hangar": {"p95": 1.0, "cpu": 0.5, "only_hangar": 3.0, "zero": 1.0, "jobs_queued": 60},
            "arc": {"p95": 4.0, "cpu": 2.0, "zero": 0.0, "jobs_queued": 60},
        });
        let Value::Object(by) = by else {
            unreachable!()
        };
        assert_eq!(ratios(&by), json!({"p95": 0.25, "cpu": 0.25}));
    }
}
