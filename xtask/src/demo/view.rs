//! The live view of the burst: what one look at the pool and the jobs shows ([`Observed`]),
//! drawn as a frame of fixed width, and what the view learned over the whole burst
//! ([`Watch`]). Pure: [`super::observe`] does the looking.

use std::collections::BTreeSet;
use std::time::Duration;

use ghsim::accounting::JobRow;
use ghsim::world::JobStatus;

use super::{MIN_REPLICAS, Options};

/// What the live view learned over the burst.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// Every runner name seen: Runner objects, and the runners ghsim's jobs ran on.
    pub(super) runners_seen: BTreeSet<String>,
    /// Highest `spec.replicas` of the RunnerDeployment seen.
    pub(super) max_replicas: i32,
    /// From submission until every job had completed.
    pub(super) jobs_done_after: Duration,
    /// From submission until the pool was back at its minimum.
    pub(super) back_to_min_after: Duration,
}

/// The pool and the jobs at one moment.
#[derive(Debug, Clone)]
pub(super) struct Observed {
    /// Since the burst was submitted.
    pub(super) elapsed: Duration,
    /// The RunnerDeployment's `spec.replicas`.
    pub(super) replicas: Option<i32>,
    /// The autoscaler's `status.desiredReplicas`.
    pub(super) desired: Option<i32>,
    pub(super) runners: Vec<RunnerRow>,
    /// Pods in the namespace (runner pods outlive their Runner while they unregister).
    pub(super) pods: usize,
    pub(super) jobs: Vec<JobRow>,
}

/// A runner as the live view shows it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RunnerRow {
    pub(super) name: String,
    /// The Runner's `status.phase` (`Deleting` once it is being deleted).
    pub(super) phase: String,
    pub(super) activity: Activity,
}

/// What GitHub (ghsim) says a runner is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Activity {
    /// Not registered (yet, or any more).
    Unregistered,
    Offline,
    Idle,
    /// Running this job.
    Busy(u64),
}

impl Activity {
    /// As the live view shows it, a job by its number in the burst (`#3`).
    pub(super) fn describe(self, number: impl Fn(u64) -> String) -> String {
        match self {
            Self::Unregistered => "-".to_owned(),
            Self::Offline => "offline".to_owned(),
            Self::Idle => "idle".to_owned(),
            Self::Busy(job) => format!("busy (job {})", number(job)),
        }
    }
}

impl Observed {
    pub(super) fn count(&self, status: JobStatus) -> usize {
        self.jobs.iter().filter(|j| j.status == status).count()
    }

    /// Every submitted job has completed.
    pub(super) fn jobs_done(&self, submitted: u32) -> bool {
        self.jobs.len() >= submitted as usize && self.count(JobStatus::Completed) == self.jobs.len()
    }

    /// The autoscaler and the deployment are at the minimum, and no runner or pod is left.
    pub(super) fn at_min(&self) -> bool {
        self.replicas == Some(MIN_REPLICAS)
            && self.desired == Some(MIN_REPLICAS)
            && self.runners.is_empty()
            && self.pods == 0
    }

    pub(super) fn busy(&self) -> usize {
        self.runners
            .iter()
            .filter(|r| matches!(r.activity, Activity::Busy(_)))
            .count()
    }

    /// One line: jobs by status, then the pool.
    pub(super) fn progress(&self) -> String {
        format!(
            "jobs: {} queued, {} in progress, {} completed | replicas {} (autoscaler wants {}) | runners {} ({} busy), pods {}",
            self.count(JobStatus::Queued),
            self.count(JobStatus::InProgress),
            self.count(JobStatus::Completed),
            show(self.replicas),
            show(self.desired),
            self.runners.len(),
            self.busy(),
            self.pods
        )
    }
}

fn show(n: Option<i32>) -> String {
    n.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

/// Widest line of a frame (so no line wraps and the redraw stays in place).
const FRAME_WIDTH: usize = 80;
/// Table rows shown before "... and N more".
const FRAME_ROWS: usize = 14;

/// The live view: a header, a progress bar, and runners next to jobs.
pub(super) fn frame(o: &Observed, opts: &Options) -> Vec<String> {
    const BAR: usize = 24;
    let total = o.jobs.len().max(opts.jobs as usize);
    let completed = o.count(JobStatus::Completed);
    let filled = (completed * BAR).checked_div(total).unwrap_or(0);
    let mut lines = vec![
        format!(
            "Hangar demo: {} jobs x {}s, ephemeral pool autoscaled {MIN_REPLICAS}..{} by webhooks  {:>5.1}s",
            opts.jobs,
            opts.job_seconds,
            opts.max_replicas,
            o.elapsed.as_secs_f64()
        ),
        format!(
            "[{}{}] {completed}/{total} completed, {} in progress, {} queued",
            "#".repeat(filled),
            "-".repeat(BAR - filled),
            o.count(JobStatus::InProgress),
            o.count(JobStatus::Queued),
        ),
        format!(
            "replicas {} (autoscaler wants {}), {} runners ({} busy), {} pods",
            show(o.replicas),
            show(o.desired),
            o.runners.len(),
            o.busy(),
            o.pods
        ),
        String::new(),
    ];
    // Jobs by their number in the burst: GitHub's ids are long and say nothing.
    let mut ids: Vec<u64> = o.jobs.iter().map(|j| j.id).collect();
    ids.sort_unstable();
    let number = |id: u64| {
        ids.binary_search(&id)
            .map_or_else(|_| id.to_string(), |i| format!("#{}", i + 1))
    };
    let left: Vec<String> = o
        .runners
        .iter()
        .map(|r| {
            let activity = r.activity.describe(number);
            format!("{:<22} {:<9} {activity}", clip(&r.name, 22), r.phase)
        })
        .collect();
    let mut jobs: Vec<&JobRow> = o.jobs.iter().collect();
    jobs.sort_by_key(|j| j.id);
    let right: Vec<String> = jobs
        .iter()
        .map(|j| {
            let status = if j.interrupted {
                "INTERRUPTED"
            } else {
                j.status.as_str()
            };
            let wait = j
                .queue_seconds
                .map_or_else(String::new, |s| format!("{s:.1}s"));
            format!(
                "{:>3} {:<11} {wait:>5}",
                number(j.id),
                status.replace('_', " ")
            )
        })
        .collect();
    lines.push(format!(
        "{:<22} {:<9} {:<16} | {:>3} {:<11} {:>5}",
        "RUNNER", "PHASE", "GITHUB", "JOB", "STATUS", "WAIT"
    ));
    let rows = left.len().max(right.len());
    for i in 0..rows.min(FRAME_ROWS) {
        let l = left.get(i).map_or("", String::as_str);
        let r = right.get(i).map_or("", String::as_str);
        lines.push(format!("{l:<49} | {r}"));
    }
    if rows > FRAME_ROWS {
        lines.push(format!("... and {} more rows", rows - FRAME_ROWS));
    }
    if o.runners.is_empty() && o.jobs.is_empty() {
        lines.push("(no runners, no jobs)".to_owned());
    }
    lines
        .into_iter()
        .map(|l| {
            l.chars()
                .take(FRAME_WIDTH)
                .collect::<String>()
                .trim_end()
                .to_owned()
        })
        .collect()
}

/// At most `n` characters of `s`.
fn clip(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::demo::REPOSITORY;

    fn observed(runners: Vec<RunnerRow>, jobs: Vec<JobRow>) -> Observed {
        Observed {
            elapsed: Duration::from_secs(3),
            replicas: Some(MIN_REPLICAS),
            desired: Some(MIN_REPLICAS),
            runners,
            pods: 0,
            jobs,
        }
    }

    pub(in crate::demo) fn job(id: u64, status: JobStatus) -> JobRow {
        JobRow {
            id,
            repository: REPOSITORY.to_owned(),
            labels: vec!["self-hosted".to_owned(), "linux".to_owned()],
            status,
            conclusion: None,
            queued_at: "2026-01-01T00:00:00Z".to_owned(),
            assigned_at: None,
            started_at: None,
            completed_at: None,
            queue_seconds: None,
            runner: None,
            interrupted: false,
            requeues: 0,
            times_unix: Default::default(),
        }
    }

    #[test]
    fn the_burst_is_over_only_when_every_submitted_job_completed_and_the_pool_is_empty() {
        let done = observed(
            vec![],
            vec![job(1, JobStatus::Completed), job(2, JobStatus::Completed)],
        );
        assert!(done.jobs_done(2) && done.at_min());
        assert!(!done.jobs_done(3), "a job ghsim has not recorded yet");
        let running = observed(
            vec![],
            vec![job(1, JobStatus::Completed), job(2, JobStatus::InProgress)],
        );
        assert!(!running.jobs_done(2));
        let runner = RunnerRow {
            name: "demo-x".to_owned(),
            phase: "Succeeded".to_owned(),
            activity: Activity::Unregistered,
        };
        assert!(!observed(vec![runner], vec![]).at_min());
    }

    #[test]
    fn frame_fits_the_terminal_width_and_caps_its_rows() {
        let runners = (0..30)
            .map(|i| RunnerRow {
                name: format!("demo-abcdefghijklmnopqrstuvwxyz-{i}"),
                phase: "Running".to_owned(),
                activity: Activity::Busy(i + 1),
            })
            .collect();
        let o = observed(runners, vec![job(1, JobStatus::InProgress)]);
        let opts = Options {
            namespace: "ns".to_owned(),
            jobs: 8,
            job_seconds: 4,
            max_replicas: 6,
            ci: false,
            build: false,
        };
        let lines = frame(&o, &opts);
        assert!(lines.iter().all(|l| l.chars().count() <= FRAME_WIDTH));
        assert!(lines.iter().any(|l| l.contains("and 16 more rows")));
        assert!(lines[4].starts_with("RUNNER"));
        assert!(lines[5].contains("busy (job #1)") && lines[5].contains(" #1 in progress"));
    }
}
