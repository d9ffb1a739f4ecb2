//! When the jobs of a workflow run, listed at an earlier evaluation of the queued-runs metric,
//! still tell what a new listing would, so the metric counts them without another call.
//!
//! `TotalNumberOfQueuedAndInProgressWorkflowRuns` needs each active run's jobs: only they carry
//! the `runs-on` labels that say whose runners a job wants. A repository shared by several
//! pools has many runs of other pools' jobs, and each evaluation walks them all (counting stops
//! at `maxReplicas` only for the matching ones). Listed afresh at every evaluation, a run costs
//! a charged call each time its jobs change, and an ETag revalidation (free, but a request)
//! each time they do not. What the count reads of a job is its labels, fixed when the job is
//! created, and whether it still waits or runs, which the run's own status mirrors while the
//! run has one job.
//!
//! Contract ([`listed_jobs_hold`]):
//! - a run whose `updated_at` is the one it had when its jobs were listed is unchanged: its
//!   listing holds, however old;
//! - a run with one listed job holds its listing for [`SINGLE_JOB_RELIST_AFTER`] even when it
//!   changed: its job moved from queued to in progress (counted alike) or finished (the run
//!   leaves the queued and in-progress lists with it), and a job added to the run later is
//!   counted once that bound has passed;
//! - any other changed run (several jobs, or none: they may start one by one) is listed again;
//! - a run without an `updated_at` is listed again every time: nothing says it is unchanged.
//!
//! What this costs in accuracy: a job added to a one-job run (a job that `needs` it) is counted
//! up to [`SINGLE_JOB_RELIST_AFTER`] late; the webhook path, where configured, sees it at once.

use std::time::{Duration, SystemTime};

use super::metrics::{RunRef, WorkflowRun};

/// How long the jobs of a changed one-job run are taken as listed before they are listed again.
pub const SINGLE_JOB_RELIST_AFTER: Duration = Duration::from_secs(60);

/// A run's jobs as an earlier evaluation listed them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedJobs {
    /// The jobs.
    pub jobs: WorkflowRun,
    /// The run's `updated_at` in the run listing that led to this jobs listing.
    pub run_updated_at: Option<SystemTime>,
    /// When the jobs were listed.
    pub listed_at: SystemTime,
}

/// Whether `listed` still tells `run`'s jobs at `now` (see the module's contract).
pub fn listed_jobs_hold(listed: &ListedJobs, run: &RunRef, now: SystemTime) -> bool {
    let Some(updated_at) = run.updated_at else {
        return false;
    };
    if listed.run_updated_at == Some(updated_at) {
        return true;
    }
    let young = now
        .duration_since(listed.listed_at)
        .map_or(true, |age| age < SINGLE_JOB_RELIST_AFTER);
    listed.jobs.jobs.len() == 1 && young
}

/// `run`'s jobs now, from a listing that holds ([`listed_jobs_hold`]): as listed while the run
/// is unchanged; a changed one-job run's job has the run's own status (its run is queued while
/// it waits and in progress while it runs), so a job listed queued that has started is not
/// taken for a job still waiting.
pub fn current_jobs(listed: &ListedJobs, run: &RunRef) -> WorkflowRun {
    let mut jobs = listed.jobs.clone();
    if listed.run_updated_at != run.updated_at
        && let [job] = jobs.jobs.as_mut_slice()
    {
        job.status = run.status;
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autoscaler::metrics::{JobStatus, RepositoryRef, WorkflowJob};

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn run(updated_at: Option<u64>) -> RunRef {
        RunRef {
            repository: RepositoryRef {
                owner: "o".into(),
                name: "r".into(),
            },
            id: 7,
            updated_at: updated_at.map(at),
            status: JobStatus::InProgress,
        }
    }

    fn listed(jobs: usize, run_updated_at: Option<u64>, listed_at: u64) -> ListedJobs {
        let job = WorkflowJob {
            id: 70,
            run_attempt: 1,
            status: JobStatus::Queued,
            labels: vec!["self-hosted".into()],
            created_at: None,
        };
        ListedJobs {
            jobs: WorkflowRun {
                jobs: vec![job; jobs],
            },
            run_updated_at: run_updated_at.map(at),
            listed_at: at(listed_at),
        }
    }

    #[test]
    fn table() {
        let relist = SINGLE_JOB_RELIST_AFTER.as_secs();
        // (case, jobs listed, run's updated_at then, when listed, run's updated_at now, now, holds)
        type Row = (
            &'static str,
            usize,
            Option<u64>,
            u64,
            Option<u64>,
            u64,
            bool,
        );
        let rows: [Row; 11] = [
            ("unchanged one-job run", 1, Some(5), 10, Some(5), 20, true),
            (
                "unchanged one-job run, long after",
                1,
                Some(5),
                10,
                Some(5),
                10 + 10 * relist,
                true,
            ),
            (
                "unchanged several-job run",
                3,
                Some(5),
                10,
                Some(5),
                20,
                true,
            ),
            (
                "unchanged run listed without jobs",
                0,
                Some(5),
                10,
                Some(5),
                20,
                true,
            ),
            (
                "changed one-job run, young listing",
                1,
                Some(5),
                10,
                Some(12),
                20,
                true,
            ),
            (
                "changed one-job run, at the bound",
                1,
                Some(5),
                10,
                Some(12),
                10 + relist,
                false,
            ),
            (
                "changed one-job run, old listing",
                1,
                Some(5),
                10,
                Some(12),
                20 + relist,
                false,
            ),
            (
                "changed several-job run",
                2,
                Some(5),
                10,
                Some(12),
                11,
                false,
            ),
            (
                "changed run listed without jobs",
                0,
                Some(5),
                10,
                Some(12),
                11,
                false,
            ),
            (
                "run without updated_at now",
                1,
                Some(5),
                10,
                None,
                11,
                false,
            ),
            (
                "listing without updated_at, one job, young",
                1,
                None,
                10,
                Some(12),
                11,
                true,
            ),
        ];
        for (case, jobs, then, listed_at, now_updated, now, holds) in rows {
            assert_eq!(
                listed_jobs_hold(&listed(jobs, then, listed_at), &run(now_updated), at(now)),
                holds,
                "{case}"
            );
        }
    }

    #[test]
    fn a_clock_that_went_back_keeps_a_one_job_listing() {
        // A listing from the future (the clock stepped back) is young, not ancient.
        assert!(listed_jobs_hold(
            &listed(1, Some(5), 100),
            &run(Some(9)),
            at(50)
        ));
    }

    #[test]
    fn a_changed_one_job_run_gives_its_job_the_runs_status() {
        let statuses = |jobs: &WorkflowRun| jobs.jobs.iter().map(|j| j.status).collect::<Vec<_>>();
        // Listed queued; the run (in progress now) changed since: its one job runs.
        assert_eq!(
            statuses(&current_jobs(&listed(1, Some(5), 10), &run(Some(12)))),
            [JobStatus::InProgress]
        );
        // Unchanged: as listed.
        assert_eq!(
            statuses(&current_jobs(&listed(1, Some(5), 10), &run(Some(5)))),
            [JobStatus::Queued]
        );
        // Several jobs say nothing about each other: as listed.
        assert_eq!(
            statuses(&current_jobs(&listed(2, Some(5), 10), &run(Some(12)))),
            [JobStatus::Queued, JobStatus::Queued]
        );
    }
}
