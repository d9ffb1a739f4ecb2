//! The numbers the demo ends with, from ghsim's accounting and what the live view learned.
//! Pure.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use ghsim::accounting::{Accounting, replacement_gaps};
use ghsim::world::JobStatus;

use super::MIN_REPLICAS;
use super::view::Watch;

/// The `p`-th percentile (0 < p <= 100) of `values` by the nearest-rank method: the smallest
/// value with at least `p` percent of the values at or below it. `None` when empty.
fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
}

/// The numbers the demo ends with.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Summary {
    pub(super) jobs: usize,
    pub(super) completed: usize,
    pub(super) interrupted: usize,
    /// Queue time (created → started) percentiles, seconds.
    queue_p50: Option<f64>,
    queue_p95: Option<f64>,
    pub(super) queue_max: Option<f64>,
    /// With the pool at its peak and jobs waiting, how long a finished runner's place stayed
    /// empty (`ghsim::accounting::replacement_gaps`): p50, max and how many, seconds.
    replacement_gap_p50: Option<f64>,
    replacement_gap_max: Option<f64>,
    replacements: usize,
    pub(super) runners_created: usize,
    pub(super) max_replicas: i32,
    /// GitHub API calls made with the controller's credential, and their rate-limit cost.
    pub(super) controller_calls: u64,
    pub(super) controller_charged: u64,
    /// The controller's calls by endpoint, most first.
    pub(super) by_endpoint: Vec<(String, u64)>,
    pub(super) webhooks_delivered: u64,
    pub(super) webhooks_failed: u64,
    /// Runners GitHub still lists once the pool is empty, and which of them are offline.
    pub(super) registrations_left: u64,
    pub(super) offline_left_behind: Vec<String>,
    pub(super) jobs_done_after: Duration,
    pub(super) back_to_min_after: Duration,
}

/// The credential label ghsim accounts the controller's PAT under.
const CONTROLLER_CREDENTIAL: &str = "pat:controller";

impl Summary {
    pub(super) fn from_accounting(accounting: &Accounting, watch: &Watch) -> Self {
        let a = accounting;
        let waits: Vec<f64> = a.jobs.iter().filter_map(|j| j.queue_seconds).collect();
        let times: Vec<_> = a.jobs.iter().map(|j| j.times_unix).collect();
        let cap = usize::try_from(watch.max_replicas).unwrap_or(0);
        let gaps = replacement_gaps(&times, cap);
        let mut by_endpoint: BTreeMap<&str, u64> = BTreeMap::new();
        let (mut calls, mut charged) = (0, 0);
        for row in a
            .api_calls
            .iter()
            .filter(|r| r.credential == CONTROLLER_CREDENTIAL)
        {
            *by_endpoint.entry(row.endpoint.as_str()).or_default() += row.calls;
            calls += row.calls;
            charged += row.charged;
        }
        let mut by_endpoint: Vec<(String, u64)> = by_endpoint
            .into_iter()
            .map(|(e, n)| (e.to_owned(), n))
            .collect();
        by_endpoint.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
        Self {
            jobs: a.jobs.len(),
            completed: a
                .jobs
                .iter()
                .filter(|j| j.status == JobStatus::Completed)
                .count(),
            interrupted: a.jobs.iter().filter(|j| j.interrupted).count(),
            queue_p50: percentile(&waits, 50.0),
            queue_p95: percentile(&waits, 95.0),
            queue_max: waits.iter().copied().reduce(f64::max),
            replacement_gap_p50: percentile(&gaps, 50.0),
            replacement_gap_max: gaps.iter().copied().reduce(f64::max),
            replacements: gaps.len(),
            runners_created: watch.runners_seen.len(),
            max_replicas: watch.max_replicas,
            controller_calls: calls,
            controller_charged: charged,
            by_endpoint,
            webhooks_delivered: a.webhooks.delivered,
            webhooks_failed: a.webhooks.failed,
            registrations_left: a.runners.registered,
            offline_left_behind: a.runners.offline_left_behind.clone(),
            jobs_done_after: watch.jobs_done_after,
            back_to_min_after: watch.back_to_min_after,
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = |s: Option<f64>| s.map_or_else(|| "-".to_owned(), |s| format!("{s:.1}s"));
        writeln!(f, "Summary")?;
        writeln!(
            f,
            "  jobs run            {} of {} completed, all within {:.0}s of submission",
            self.completed,
            self.jobs,
            self.jobs_done_after.as_secs_f64()
        )?;
        writeln!(
            f,
            "  queue time          p50 {}, p95 {}, max {} (job created -> started)",
            secs(self.queue_p50),
            secs(self.queue_p95),
            secs(self.queue_max)
        )?;
        writeln!(
            f,
            "  replacement gap     p50 {}, max {} over {} finished runner(s) replaced with jobs waiting (job completed -> next job started)",
            secs(self.replacement_gap_p50),
            secs(self.replacement_gap_max),
            self.replacements
        )?;
        writeln!(
            f,
            "  runners created     {} (peak replicas {}); pool back to {MIN_REPLICAS} after {:.0}s",
            self.runners_created,
            self.max_replicas,
            self.back_to_min_after.as_secs_f64()
        )?;
        writeln!(
            f,
            "  GitHub API calls    {} by the controller, {} charged to its rate limit",
            self.controller_calls, self.controller_charged,
        )?;
        for (endpoint, n) in &self.by_endpoint {
            writeln!(f, "  {n:>21} {endpoint}")?;
        }
        let offline = if self.offline_left_behind.is_empty() {
            String::new()
        } else {
            format!(", offline: {}", self.offline_left_behind.join(", "))
        };
        writeln!(
            f,
            "  left at GitHub      {} runner registration(s){offline}",
            self.registrations_left
        )?;
        writeln!(
            f,
            "  webhooks            {} delivered, {} failed",
            self.webhooks_delivered, self.webhooks_failed
        )?;
        write!(f, "  interrupted jobs    {}", self.interrupted)
    }
}

#[cfg(test)]
mod tests {
    use ghsim::accounting::{CallRow, JobRow, JobSummary, JobTimes, RunnerSummary, WebhookSummary};

    use super::*;
    use crate::demo::view::tests::job;

    #[test]
    fn percentile_is_the_nearest_rank() {
        let values: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(10.0));
        assert_eq!(percentile(&values, 95.0), Some(19.0));
        assert_eq!(percentile(&values, 100.0), Some(20.0));
        assert_eq!(percentile(&[3.5], 95.0), Some(3.5));
        assert_eq!(percentile(&[2.0, 1.0], 50.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    fn call(endpoint: &str, credential: &str, calls: u64, charged: u64) -> CallRow {
        CallRow {
            endpoint: endpoint.to_owned(),
            credential: credential.to_owned(),
            calls,
            charged,
            not_modified: calls - charged,
            errors: 0,
        }
    }

    /// Two credentials, three jobs (one still queued, one interrupted): only the controller's
    /// calls count, and only started jobs have a queue time.
    fn accounting() -> Accounting {
        let runners = "/repos/{owner}/{repo}/actions/runners";
        // Queued at 0, started after `wait`, each running 4 s.
        let started = |id, runner: &str, wait: f64, interrupted| JobRow {
            runner: Some(runner.to_owned()),
            queue_seconds: Some(wait),
            interrupted,
            times_unix: JobTimes {
                queued: 0.0,
                started: Some(wait),
                completed: Some(wait + 4.0),
            },
            ..job(id, JobStatus::Completed)
        };
        Accounting {
            api_calls: vec![
                call(&format!("GET {runners}"), "pat:controller", 7, 5),
                call(
                    &format!("POST {runners}/registration-token"),
                    "pat:controller",
                    9,
                    9,
                ),
                call(&format!("GET {runners}"), "pat:default", 100, 100),
            ],
            api_calls_total: 116,
            rate_limit_cost_total: 114,
            jobs_summary: JobSummary::default(),
            jobs: vec![
                started(1, "a", 1.0, false),
                started(2, "b", 3.0, true),
                job(3, JobStatus::Queued),
            ],
            runners: RunnerSummary {
                registered: 1,
                offline_left_behind: vec!["b".to_owned()],
                ..RunnerSummary::default()
            },
            webhooks: WebhookSummary {
                deliveries: 7,
                delivered: 6,
                failed: 1,
                ..WebhookSummary::default()
            },
        }
    }

    #[test]
    fn summary_counts_only_the_controllers_calls_and_started_jobs() {
        let watch = Watch {
            runners_seen: ["a", "b"].map(String::from).into(),
            max_replicas: 2,
            ..Watch::default()
        };
        let s = Summary::from_accounting(&accounting(), &watch);
        assert_eq!((s.runners_created, s.max_replicas), (2, 2));
        assert_eq!((s.jobs, s.completed, s.interrupted), (3, 2, 1));
        assert_eq!((s.queue_p50, s.queue_p95), (Some(1.0), Some(3.0)));
        // Two places for two jobs: no job waited for a replacement.
        assert_eq!(s.replacements, 0);
        assert_eq!((s.controller_calls, s.controller_charged), (16, 14));
        assert_eq!(
            s.by_endpoint[0],
            (
                "POST /repos/{owner}/{repo}/actions/runners/registration-token".to_owned(),
                9
            )
        );
        assert_eq!((s.webhooks_delivered, s.webhooks_failed), (6, 1));
        let text = s.to_string();
        assert!(text.contains("interrupted jobs    1"), "{text}");
        assert!(
            text.contains("1 runner registration(s), offline: b"),
            "{text}"
        );
    }
}
