//! What happened, for tests, benchmarks and the demo: API calls by endpoint and credential,
//! per-job timings, interrupted jobs, leaked and abandoned runners, webhook outcomes — as JSON
//! (`GET /_ghsim/accounting`) and as Prometheus text (`GET /_ghsim/metrics`).

use std::fmt::Write;

use hangar_github::clock::until;
use serde::{Deserialize, Serialize};

use crate::render::ts;
use crate::sim::Sim;
use crate::world::{JobStatus, World};

/// API calls of one endpoint by one credential.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CallRow {
    /// `METHOD /template`.
    pub endpoint: String,
    /// Credential label (`pat:…`, `installation:…`, `app:…`, `anonymous`).
    pub credential: String,
    /// Requests.
    pub calls: u64,
    /// Requests charged against the primary budget.
    pub charged: u64,
    /// 304 answers (free).
    pub not_modified: u64,
    /// Error answers.
    pub errors: u64,
}

/// One job's history.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobRow {
    /// Job id.
    pub id: u64,
    /// `owner/repo`.
    pub repository: String,
    /// `runs-on` labels.
    pub labels: Vec<String>,
    /// Status.
    pub status: JobStatus,
    /// Conclusion.
    pub conclusion: Option<String>,
    /// Queued at.
    pub queued_at: String,
    /// Last assigned at.
    pub assigned_at: Option<String>,
    /// Started at.
    pub started_at: Option<String>,
    /// Completed at.
    pub completed_at: Option<String>,
    /// Seconds from queued to started.
    pub queue_seconds: Option<f64>,
    /// Runner name.
    pub runner: Option<String>,
    /// Interrupted because its runner vanished.
    pub interrupted: bool,
    /// Times re-queued after an unclaimed assignment.
    pub requeues: u32,
    /// `queued_at`, `started_at` and `completed_at` as seconds since the Unix epoch, at the
    /// clock's resolution (the strings above have whole seconds): for arithmetic such as
    /// [`replacement_gaps`].
    #[serde(default)]
    pub times_unix: JobTimes,
}

/// A job's times as seconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobTimes {
    /// Queued.
    pub queued: f64,
    /// Started, if it did.
    pub started: Option<f64>,
    /// Completed, if it did.
    pub completed: Option<f64>,
}

/// A pool capped at `cap` runners with jobs waiting: how long each finished runner's place
/// stayed empty. The k-th job to complete frees the place in which the (`cap` + k)-th job to
/// start runs; a pair counts only if that job was already queued when the place was freed
/// (otherwise the gap is a wait for demand, not for a runner). Seconds, in completion order.
pub fn replacement_gaps(jobs: &[JobTimes], cap: usize) -> Vec<f64> {
    let mut starts: Vec<(f64, f64)> = jobs
        .iter()
        .filter_map(|j| Some((j.started?, j.queued)))
        .collect();
    starts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut completions: Vec<f64> = jobs.iter().filter_map(|j| j.completed).collect();
    completions.sort_by(f64::total_cmp);
    completions
        .iter()
        .zip(starts.iter().skip(cap))
        .filter(|(freed, (_, queued))| queued <= *freed)
        .map(|(freed, (started, _))| started - freed)
        .collect()
}

/// Job totals.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct JobSummary {
    /// All jobs.
    pub total: u64,
    /// Queued now.
    pub queued: u64,
    /// Running now.
    pub in_progress: u64,
    /// Completed.
    pub completed: u64,
    /// Interrupted.
    pub interrupted: u64,
    /// Failed after waiting `queue_timeout` for a runner.
    pub timed_out_in_queue: u64,
    /// Mean seconds from queued to started (started jobs).
    pub mean_queue_seconds: Option<f64>,
    /// Max seconds from queued to started.
    pub max_queue_seconds: Option<f64>,
}

/// Runner totals.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunnerSummary {
    /// Registered now.
    pub registered: u64,
    /// Online now.
    pub online: u64,
    /// Busy now.
    pub busy: u64,
    /// Registered over `leak_after` ago and never connected (names).
    pub leaked: Vec<String>,
    /// Were online, are offline, still registered (names).
    pub offline_left_behind: Vec<String>,
    /// Removed without ever connecting.
    pub removed_never_connected: u64,
}

/// Webhook totals.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WebhookSummary {
    /// Deliveries created.
    pub deliveries: u64,
    /// Delivered (latest attempt 2xx).
    pub delivered: u64,
    /// Failed (latest attempt not 2xx or no answer).
    pub failed: u64,
    /// Dropped by fault injection.
    pub dropped: u64,
    /// Not attempted yet.
    pub pending: u64,
    /// Injected duplicate sends.
    pub duplicates: u64,
    /// Redelivery sends.
    pub redeliveries: u64,
}

/// Everything, as served by `GET /_ghsim/accounting`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Accounting {
    /// Calls by endpoint and credential.
    pub api_calls: Vec<CallRow>,
    /// Sum of calls.
    pub api_calls_total: u64,
    /// Sum of charged calls (the rate-limit cost).
    pub rate_limit_cost_total: u64,
    /// Job totals.
    pub jobs_summary: JobSummary,
    /// Per job.
    pub jobs: Vec<JobRow>,
    /// Runner totals.
    pub runners: RunnerSummary,
    /// Webhook totals.
    pub webhooks: WebhookSummary,
}

fn secs(from: jiff::Timestamp, to: jiff::Timestamp) -> f64 {
    until(from, to).as_secs_f64()
}

fn unix(t: jiff::Timestamp) -> f64 {
    t.as_nanosecond() as f64 / 1e9
}

fn from_world(
    w: &World,
    now: jiff::Timestamp,
) -> (Vec<CallRow>, Vec<JobRow>, JobSummary, RunnerSummary) {
    let calls: Vec<CallRow> = w
        .calls
        .iter()
        .map(|((endpoint, credential), s)| CallRow {
            endpoint: endpoint.clone(),
            credential: credential.clone(),
            calls: s.calls,
            charged: s.charged,
            not_modified: s.not_modified,
            errors: s.errors,
        })
        .collect();
    let jobs: Vec<JobRow> = w
        .jobs
        .values()
        .map(|j| JobRow {
            id: j.id,
            repository: w
                .repos
                .get(&j.repo_id)
                .map(|r| r.full_name())
                .unwrap_or_default(),
            labels: j.labels.clone(),
            status: j.status,
            conclusion: j.conclusion.clone(),
            queued_at: ts(j.created_at),
            assigned_at: j.assigned_at.map(ts),
            started_at: j.started_at.map(ts),
            completed_at: j.completed_at.map(ts),
            queue_seconds: j.started_at.map(|s| secs(j.created_at, s)),
            runner: j.runner_name.clone(),
            interrupted: j.interrupted,
            requeues: j.requeues,
            times_unix: JobTimes {
                queued: unix(j.created_at),
                started: j.started_at.map(unix),
                completed: j.completed_at.map(unix),
            },
        })
        .collect();
    let waits: Vec<f64> = jobs.iter().filter_map(|j| j.queue_seconds).collect();
    let summary = JobSummary {
        total: jobs.len() as u64,
        queued: jobs
            .iter()
            .filter(|j| j.status == JobStatus::Queued)
            .count() as u64,
        in_progress: jobs
            .iter()
            .filter(|j| j.status == JobStatus::InProgress)
            .count() as u64,
        completed: jobs
            .iter()
            .filter(|j| j.status == JobStatus::Completed)
            .count() as u64,
        interrupted: jobs.iter().filter(|j| j.interrupted).count() as u64,
        timed_out_in_queue: w
            .jobs
            .values()
            .filter(|j| {
                j.status == JobStatus::Completed
                    && j.started_at.is_none()
                    && j.conclusion.as_deref() == Some("failure")
            })
            .count() as u64,
        mean_queue_seconds: (!waits.is_empty())
            .then(|| waits.iter().sum::<f64>() / waits.len() as f64),
        max_queue_seconds: waits.iter().copied().reduce(f64::max),
    };
    let runners = RunnerSummary {
        registered: w.runners.len() as u64,
        online: w.runners.values().filter(|r| r.online()).count() as u64,
        busy: w.runners.values().filter(|r| r.busy()).count() as u64,
        leaked: w
            .leaked_runners(now)
            .iter()
            .map(|r| r.name.clone())
            .collect(),
        offline_left_behind: w
            .offline_left_behind()
            .iter()
            .map(|r| r.name.clone())
            .collect(),
        removed_never_connected: w.removed_never_connected,
    };
    (calls, jobs, summary, runners)
}

/// A snapshot of everything.
pub fn snapshot(sim: &Sim) -> Accounting {
    let (api_calls, jobs, jobs_summary, runners) = sim.read(from_world);
    let deliveries = sim.deliveries();
    let attempts = deliveries.iter().flat_map(|d| d.attempts.iter());
    let webhooks = WebhookSummary {
        deliveries: deliveries.len() as u64,
        delivered: deliveries.iter().filter(|d| d.delivered()).count() as u64,
        failed: deliveries
            .iter()
            .filter(|d| !d.attempts.is_empty() && !d.delivered())
            .count() as u64,
        dropped: deliveries.iter().filter(|d| d.dropped).count() as u64,
        pending: deliveries
            .iter()
            .filter(|d| d.attempts.is_empty() && !d.dropped)
            .count() as u64,
        duplicates: attempts.clone().filter(|a| a.duplicate).count() as u64,
        redeliveries: attempts.filter(|a| a.redelivery).count() as u64,
    };
    Accounting {
        api_calls_total: api_calls.iter().map(|c| c.calls).sum(),
        rate_limit_cost_total: api_calls.iter().map(|c| c.charged).sum(),
        api_calls,
        jobs_summary,
        jobs,
        runners,
        webhooks,
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The snapshot in Prometheus text exposition format.
pub fn prometheus(a: &Accounting) -> String {
    let mut out = String::new();
    let mut lines = Vec::new();
    let n = family_line(
        &mut out,
        "ghsim_api_calls_total",
        "counter",
        "REST calls by endpoint and credential.",
    );
    for c in &a.api_calls {
        lines.push(format!(
            "{n}{{endpoint=\"{}\",credential=\"{}\"}} {}",
            escape(&c.endpoint),
            escape(&c.credential),
            c.calls
        ));
    }
    flush(&mut out, &mut lines);
    let n = family_line(
        &mut out,
        "ghsim_api_rate_limit_cost_total",
        "counter",
        "REST calls charged against the primary budget.",
    );
    for c in &a.api_calls {
        lines.push(format!(
            "{n}{{endpoint=\"{}\",credential=\"{}\"}} {}",
            escape(&c.endpoint),
            escape(&c.credential),
            c.charged
        ));
    }
    flush(&mut out, &mut lines);
    let n = family_line(
        &mut out,
        "ghsim_api_not_modified_total",
        "counter",
        "Conditional requests answered 304.",
    );
    for c in &a.api_calls {
        lines.push(format!(
            "{n}{{endpoint=\"{}\",credential=\"{}\"}} {}",
            escape(&c.endpoint),
            escape(&c.credential),
            c.not_modified
        ));
    }
    flush(&mut out, &mut lines);
    let s = &a.jobs_summary;
    let n = family_line(&mut out, "ghsim_jobs", "gauge", "Jobs by status.");
    for (status, v) in [
        ("queued", s.queued),
        ("in_progress", s.in_progress),
        ("completed", s.completed),
    ] {
        lines.push(format!("{n}{{status=\"{status}\"}} {v}"));
    }
    flush(&mut out, &mut lines);
    single(
        &mut out,
        "ghsim_jobs_interrupted_total",
        "counter",
        "Jobs failed because their runner vanished while running them.",
        s.interrupted as f64,
    );
    single(
        &mut out,
        "ghsim_jobs_queue_timeout_total",
        "counter",
        "Jobs failed after waiting too long for a runner.",
        s.timed_out_in_queue as f64,
    );
    let started: Vec<f64> = a.jobs.iter().filter_map(|j| j.queue_seconds).collect();
    let n = family_line(
        &mut out,
        "ghsim_job_queue_seconds",
        "summary",
        "Seconds from queued to started.",
    );
    let _ = writeln!(out, "{n}_sum {}", started.iter().sum::<f64>());
    let _ = writeln!(out, "{n}_count {}", started.len());
    let r = &a.runners;
    let n = family_line(
        &mut out,
        "ghsim_runners",
        "gauge",
        "Registered runners by state.",
    );
    for (state, v) in [
        ("registered", r.registered),
        ("online", r.online),
        ("busy", r.busy),
    ] {
        lines.push(format!("{n}{{state=\"{state}\"}} {v}"));
    }
    flush(&mut out, &mut lines);
    single(
        &mut out,
        "ghsim_runners_leaked",
        "gauge",
        "Runners registered long ago that never connected.",
        r.leaked.len() as f64,
    );
    single(
        &mut out,
        "ghsim_runners_offline_left_behind",
        "gauge",
        "Runners that went offline and were never removed.",
        r.offline_left_behind.len() as f64,
    );
    single(
        &mut out,
        "ghsim_runners_removed_never_connected_total",
        "counter",
        "Runners removed without ever connecting.",
        r.removed_never_connected as f64,
    );
    let w = &a.webhooks;
    let n = family_line(
        &mut out,
        "ghsim_webhook_deliveries",
        "gauge",
        "Webhook deliveries by outcome.",
    );
    for (result, v) in [
        ("delivered", w.delivered),
        ("failed", w.failed),
        ("dropped", w.dropped),
        ("pending", w.pending),
        ("duplicate", w.duplicates),
        ("redelivery", w.redeliveries),
    ] {
        lines.push(format!("{n}{{result=\"{result}\"}} {v}"));
    }
    flush(&mut out, &mut lines);
    out
}

fn family_line(out: &mut String, name: &str, kind: &str, help: &str) -> String {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    name.to_owned()
}

fn single(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    let name = family_line(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

fn flush(out: &mut String, lines: &mut Vec<String>) {
    for line in lines.drain(..) {
        out.push_str(&line);
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(queued: f64, started: f64, completed: f64) -> JobTimes {
        JobTimes {
            queued,
            started: Some(started),
            completed: Some(completed),
        }
    }

    #[test]
    fn replacement_gaps_pair_completions_with_the_starts_beyond_the_cap() {
        // A pool of 2. Jobs 1 and 2 run at once; 3 waits and starts 0.5 s after 1 ends; 4 is
        // queued only after 2 ended, so 2's place waited for demand, not for a runner; 5 never
        // started.
        let jobs = [
            job(0.0, 1.0, 5.0),
            job(0.0, 1.2, 6.0),
            job(0.1, 5.5, 9.0),
            job(7.0, 7.4, 10.0),
            JobTimes {
                queued: 8.0,
                started: None,
                completed: None,
            },
        ];
        let gaps = replacement_gaps(&jobs, 2);
        assert_eq!(gaps, vec![0.5]);
        // Uncapped (a pool as large as the jobs), no start is a replacement.
        assert!(replacement_gaps(&jobs, 5).is_empty());
    }
}
