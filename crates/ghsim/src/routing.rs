//! Job routing: which idle runner gets which queued job. Pure; no clock, no IO.
//!
//! GitHub's rules (DOCS "Routing precedence for self-hosted runners"; github-api.md §6):
//! - a job goes to an **online, idle** runner whose labels include **all** of the job's
//!   `runs-on` labels, compared case-insensitively; offline runners are never assigned;
//! - precedence by level: repository runners first, then organization, then enterprise;
//! - a runner takes one job at a time.
//!
//! Which runners may serve which repository (scope and runner-group visibility) is the
//! caller's knowledge, passed to [`route`] as a function returning `None` for "not eligible". Jobs are
//! served oldest first; among equally ranked runners the lowest id wins, so routing is
//! deterministic.

/// How close a runner is to the job's repository; lower wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Registered at the job's repository.
    Repository,
    /// Registered at the repository's organization.
    Organization,
    /// Registered at the organization's enterprise.
    Enterprise,
}

/// Whether a runner's labels satisfy a job's `runs-on` labels (case-insensitive superset).
pub fn labels_match(job_labels: &[String], runner_labels: &[String]) -> bool {
    job_labels.iter().all(|want| {
        runner_labels
            .iter()
            .any(|have| have.eq_ignore_ascii_case(want))
    })
}

/// A queued job waiting for a runner.
#[derive(Clone, Debug)]
pub struct QueuedJob {
    /// Job id.
    pub id: u64,
    /// `runs-on` labels.
    pub labels: Vec<String>,
}

/// An online, idle runner.
#[derive(Clone, Debug)]
pub struct IdleRunner {
    /// Runner id.
    pub id: u64,
    /// All its labels.
    pub labels: Vec<String>,
}

/// Assigns jobs (oldest first, as given) to runners. `level(job, runner)` says whether and how
/// closely `runner` may serve `job`. Returns `(job id, runner id)` pairs.
pub fn route(
    jobs: &[QueuedJob],
    runners: &[IdleRunner],
    level: impl Fn(&QueuedJob, &IdleRunner) -> Option<Level>,
) -> Vec<(u64, u64)> {
    let mut taken = vec![false; runners.len()];
    let mut assignments = Vec::new();
    for job in jobs {
        let best = runners
            .iter()
            .enumerate()
            .filter(|(i, r)| !taken[*i] && labels_match(&job.labels, &r.labels))
            .filter_map(|(i, r)| level(job, r).map(|lvl| (lvl, r.id, i)))
            .min();
        if let Some((_, runner_id, i)) = best {
            taken[i] = true;
            assignments.push((job.id, runner_id));
        }
    }
    assignments
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    fn job(id: u64, l: &[&str]) -> QueuedJob {
        QueuedJob {
            id,
            labels: labels(l),
        }
    }

    fn runner(id: u64, l: &[&str]) -> IdleRunner {
        IdleRunner {
            id,
            labels: labels(l),
        }
    }

    #[test]
    fn runner_needs_every_job_label_case_insensitively() {
        let have = labels(&["self-hosted", "Linux", "X64", "gpu"]);
        assert!(labels_match(&labels(&["self-hosted", "linux"]), &have));
        assert!(labels_match(&labels(&[]), &have));
        assert!(!labels_match(&labels(&["self-hosted", "arm64"]), &have));
    }

    #[test]
    fn one_job_per_runner_oldest_job_first() {
        let jobs = [job(1, &["a"]), job(2, &["a"]), job(3, &["a"])];
        let runners = [runner(10, &["a"]), runner(11, &["a", "b"])];
        let got = route(&jobs, &runners, |_, _| Some(Level::Organization));
        assert_eq!(got, vec![(1, 10), (2, 11)]);
    }

    #[test]
    fn repository_runners_win_over_org_and_enterprise() {
        let jobs = [job(1, &["x"])];
        let runners = [runner(1, &["x"]), runner(2, &["x"]), runner(3, &["x"])];
        let level = |_: &QueuedJob, r: &IdleRunner| match r.id {
            1 => Some(Level::Enterprise),
            2 => Some(Level::Repository),
            _ => Some(Level::Organization),
        };
        assert_eq!(route(&jobs, &runners, level), vec![(1, 2)]);
    }

    #[test]
    fn ineligible_or_mismatched_runners_are_skipped() {
        let jobs = [job(1, &["gpu"]), job(2, &["cpu"])];
        let runners = [runner(1, &["gpu"]), runner(2, &["cpu"])];
        // Runner 1 is out of scope for every job: job 1 stays queued, job 2 still routes.
        let level = |_: &QueuedJob, r: &IdleRunner| (r.id != 1).then_some(Level::Repository);
        assert_eq!(route(&jobs, &runners, level), vec![(2, 2)]);
    }
}
