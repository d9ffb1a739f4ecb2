//! `cargo xtask bench-knee`: Hangar against the floor at a sweep of job rates, in one
//! invocation — where each one's job → pod p99 crosses one second (the knee), and what Hangar
//! writes to the apiserver per job beyond what the floor writes, request by request.
//!
//! At each rate, `bench-floor` (an ideal controller's Kubernetes work per runner, no Hangar, no
//! GitHub) and `bench-webhooks` (release `hangar run` scaling an ephemeral RunnerDeployment on
//! ghsim's `workflow_job` deliveries) run back to back, each on its own private control plane
//! with the same nodes, job length and seconds of load. Each writes its results file under
//! `bench/results/knee/`; this command reads them back and writes `bench/results/knee.json`.
//!
//! The latency both are judged on has the same end points: from a job's instant (the floor's
//! schedule; ghsim's `created_at`) to the n-th runner pod seen by a pod watch. For Hangar that
//! includes ghsim's delivery and the webhook server's answer.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::{Value, json};

use crate::results::{rates_arg, read, run_to_file, with_status, write};

/// A rate is under the knee while job → pod p99 stays at or below this many seconds.
pub const P99_LIMIT_SECONDS: f64 = 1.0;

/// What one invocation runs.
pub struct Plan {
    /// Job rates (per second), each run for the floor and for Hangar.
    pub rates: Vec<f64>,
    /// Seconds of load per run.
    pub seconds: u64,
    /// Run nothing: compose `knee.json` from the results files the runs left.
    pub compose_only: bool,
}

/// Runs the sweep, then writes `bench/results/knee.json` and prints its table.
pub fn run(root: &Path, plan: &Plan) -> Result<ExitCode> {
    let dir = root.join("bench/results/knee");
    std::fs::create_dir_all(&dir)?;
    let mut rates = plan.rates.clone();
    rates.sort_by(f64::total_cmp);
    let mut points = vec![];
    for &rate in &rates {
        let mut runs = serde_json::Map::new();
        for (name, example, extra) in [
            ("floor", "bench-floor", &[][..]),
            ("hangar", "bench-webhooks", &["--bin", "hangar"][..]),
        ] {
            let file = dir.join(format!("{name}-{rate}.json"));
            let args = [
                "--rate".to_owned(),
                rate.to_string(),
                "--seconds".to_owned(),
                plan.seconds.to_string(),
                "--out".to_owned(),
                file.display().to_string(),
            ];
            let status = if plan.compose_only {
                ExitCode::SUCCESS
            } else {
                run_to_file(&file, || {
                    super::release_example("hangar", example, extra, &args)
                })?
            };
            let figures = read(&file).map_or_else(
                |e| json!({"error": format!("{e:#}")}),
                |report| match name {
                    "floor" => floor_figures(&report),
                    _ => hangar_figures(&report),
                },
            );
            runs.insert(name.to_owned(), with_status(figures, status));
        }
        let writes = writes_over_floor(&runs["hangar"], &runs["floor"]);
        points.push(json!({
            "rate_per_second": rate,
            "floor": runs["floor"],
            "hangar": runs["hangar"],
            "writes_per_job_over_floor": writes,
        }));
    }

    let knee_of = |who: &str| {
        knee(
            &points
                .iter()
                .map(|p| {
                    let run = &p[who];
                    let ok = run["run_succeeded"].as_bool() == Some(true);
                    let p99 = run["job_to_pod_p99_seconds"].as_f64().filter(|_| ok);
                    (p["rate_per_second"].as_f64().unwrap_or(0.0), p99)
                })
                .collect::<Vec<_>>(),
        )
    };
    let (floor_knee, hangar_knee) = (knee_of("floor"), knee_of("hangar"));
    let ratio = match (hangar_knee, floor_knee) {
        (Some(h), Some(f)) if f > 0.0 => Some((h / f * 1000.0).round() / 1000.0),
        _ => None,
    };
    let report = json!({
        "benchmark": "knee",
        "machine_cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "how": format!(
            "at each rate bench-floor, then bench-webhooks (release hangar run, webhook-driven, \
             ghsim sending several deliveries at once as GitHub does), each on a private \
             control plane with the benchmarks' default nodes and 2 s jobs and the same seconds \
             of load. job_to_pod: n-th job queued → n-th runner pod seen by a watch. The knee is \
             the highest swept rate at which that p99 is at most {P99_LIMIT_SECONDS} s, the run \
             succeeded, and every lower swept rate met it too. Writes are every component's \
             (Hangar or the ideal controller, scheduler, kubelets) per job."
        ),
        "reproduce": format!(
            "cargo xtask bench-knee --rates {} --seconds {}",
            rates_arg(&rates),
            plan.seconds
        ),
        "p99_limit_seconds": P99_LIMIT_SECONDS,
        "knee_per_second": {"floor": floor_knee, "hangar": hangar_knee},
        "hangar_knee_over_floor_knee": ratio,
        "sweep": points,
    });
    write(root, "bench/results/knee.json", &report, &table(&report))?;
    Ok(ExitCode::SUCCESS)
}

/// The highest rate of `points` (rate, p99 or `None` for a failed run) at or below which every
/// point meets [`P99_LIMIT_SECONDS`]; `None` when the lowest does not.
fn knee(points: &[(f64, Option<f64>)]) -> Option<f64> {
    let mut sorted = points.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    sorted
        .iter()
        .take_while(|(_, p99)| p99.is_some_and(|p| p <= P99_LIMIT_SECONDS))
        .last()
        .map(|(rate, _)| *rate)
}

fn floor_figures(r: &Value) -> Value {
    let l = &r["latency_seconds"]["job_to_pod_seen"];
    json!({
        "jobs": r["runners"],
        "job_to_pod_p50_seconds": l["p50"],
        "job_to_pod_p95_seconds": l["p95"],
        "job_to_pod_p99_seconds": l["p99"],
        "machine_cpu_busy": r["machine_cpu_busy_while_creating"],
        "apiserver_writes_per_job": r["apiserver_writes_per_runner"],
        "apiserver_writes_per_job_by_request": r["apiserver_writes_per_runner_by_request"],
    })
}

fn hangar_figures(r: &Value) -> Value {
    let l = &r["latency_seconds"]["job_queued_to_pod_created_first_in_first_out"];
    let w = &r["apiserver_writes"];
    json!({
        "jobs": r["jobs"]["queued"],
        "jobs_completed": r["jobs"]["completed"],
        "interrupted_jobs": r["jobs"]["interrupted"],
        "job_to_pod_p50_seconds": l["p50"],
        "job_to_pod_p95_seconds": l["p95"],
        "job_to_pod_p99_seconds": l["p99"],
        "delivery_sender_lag_p99_seconds": r["latency_seconds"]["job_queued_to_delivery"]["p99"],
        "machine_cpu_busy": r["usage"]["machine_cpu_busy_while_queueing"],
        "controller_cpus": r["usage"]["controller_cpus_while_queueing"],
        "apiserver_writes_per_job": w["per_job"],
        "apiserver_writes_per_job_by_request": w["per_job_by_request"],
        "hangar_writes_per_job_by_request": w["by_hangar_per_job_by_request"],
        "github_calls_per_job": r["github_api"]["calls_per_job"],
    })
}

/// Hangar's writes per job minus the floor's, in all and by request (largest excess first).
fn writes_over_floor(hangar: &Value, floor: &Value) -> Value {
    let by = |v: &Value| -> Vec<(String, f64)> {
        v["apiserver_writes_per_job_by_request"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|row| Some((row[0].as_str()?.to_owned(), row[1].as_f64()?)))
            .collect()
    };
    let (h, f) = (by(hangar), by(floor));
    let mut requests: Vec<String> = h.iter().chain(&f).map(|(r, _)| r.clone()).collect();
    requests.sort();
    requests.dedup();
    let get = |rows: &[(String, f64)], r: &str| {
        rows.iter()
            .find(|(name, _)| name == r)
            .map_or(0.0, |(_, v)| *v)
    };
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    let mut rows: Vec<(String, f64, f64)> = requests
        .into_iter()
        .map(|r| {
            let (hv, fv) = (get(&h, &r), get(&f, &r));
            (r, hv, fv)
        })
        .collect();
    rows.sort_by(|a, b| (b.1 - b.2).total_cmp(&(a.1 - a.2)));
    let total = match (
        hangar["apiserver_writes_per_job"].as_f64(),
        floor["apiserver_writes_per_job"].as_f64(),
    ) {
        (Some(h), Some(f)) => json!(round(h - f)),
        _ => Value::Null,
    };
    json!({
        "total": total,
        "by_request": rows
            .into_iter()
            .map(|(r, hv, fv)| json!({
                "request": r, "hangar": round(hv), "floor": round(fv), "over": round(hv - fv)
            }))
            .collect::<Vec<_>>(),
    })
}

/// The README's table: one row per rate.
fn table(report: &Value) -> String {
    let cell = |v: &Value| v.as_f64().map_or("—".to_owned(), |x| format!("{x:.2}"));
    let mut lines = vec![
        "| jobs/s | floor p99 job → pod | Hangar p99 job → pod | floor writes/job | Hangar \
         writes/job | Hangar − floor |"
            .to_owned(),
        "|---|---|---|---|---|---|".to_owned(),
    ];
    for p in report["sweep"].as_array().into_iter().flatten() {
        lines.push(format!(
            "| {} | {} | {} | {} | {} | {} |",
            p["rate_per_second"],
            cell(&p["floor"]["job_to_pod_p99_seconds"]),
            cell(&p["hangar"]["job_to_pod_p99_seconds"]),
            cell(&p["floor"]["apiserver_writes_per_job"]),
            cell(&p["hangar"]["apiserver_writes_per_job"]),
            cell(&p["writes_per_job_over_floor"]["total"]),
        ));
    }
    lines.push(format!(
        "\nknee (p99 ≤ {P99_LIMIT_SECONDS} s): floor {} jobs/s, Hangar {} jobs/s, Hangar ÷ floor {}",
        report["knee_per_second"]["floor"],
        report["knee_per_second"]["hangar"],
        report["hangar_knee_over_floor_knee"],
    ));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_knee_is_the_last_rate_before_the_first_miss() {
        assert_eq!(
            knee(&[(8.0, Some(1.4)), (4.0, Some(0.3)), (6.0, Some(0.9))]),
            Some(6.0)
        );
        // A lucky run above a miss does not move the knee up.
        assert_eq!(
            knee(&[(4.0, Some(0.3)), (6.0, Some(1.2)), (8.0, Some(0.9))]),
            Some(4.0)
        );
        // A failed run is a miss.
        assert_eq!(knee(&[(4.0, Some(0.3)), (6.0, None)]), Some(4.0));
        assert_eq!(knee(&[(4.0, Some(1.1)), (6.0, Some(0.5))]), None);
        assert_eq!(
            knee(&[(4.0, Some(1.0))]),
            Some(4.0),
            "at the limit is under it"
        );
    }

    #[test]
    fn writes_over_the_floor_are_matched_by_request() {
        let hangar = json!({
            "apiserver_writes_per_job": 10.0,
            "apiserver_writes_per_job_by_request": [["POST pods", 1.0], ["PATCH runners/status", 3.0]],
        });
        let floor = json!({
            "apiserver_writes_per_job": 8.5,
            "apiserver_writes_per_job_by_request": [["POST pods", 1.0], ["PATCH runners/status", 2.0], ["DELETE pods", 0.5]],
        });
        let over = writes_over_floor(&hangar, &floor);
        assert_eq!(over["total"], json!(1.5));
        assert_eq!(
            over["by_request"],
            json!([
                {"request": "PATCH runners/status", "hangar": 3.0, "floor": 2.0, "over": 1.0},
                {"request": "POST pods", "hangar": 1.0, "floor": 1.0, "over": 0.0},
                {"request": "DELETE pods", "hangar": 0.0, "floor": 0.5, "over": -0.5},
            ])
        );
    }
}
