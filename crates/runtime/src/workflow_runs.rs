//! A repository's active workflow runs and their jobs, as the queued-runs metric (the HRA
//! controller) and the pull recovery both read them.
//!
//! Both need the jobs of every queued or in-progress run of a repository: only a job carries
//! the `runs-on` labels that say whose runners it wants, and whether it still waits. The run
//! lists are read afresh by each caller, with its own credentials, every time (they say which
//! runs exist now and that the caller may see them); a run's jobs are listed once and shared by
//! every caller while that listing holds (`hangar_core::autoscaler::job_lists`). So a
//! repository shared by many pools costs one job list per run and change, whoever asks, instead
//! of one per caller, evaluation and pull pass; a new leader's first pull pass and first metric
//! evaluation list each active run once between them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::SystemTime;

use hangar_core::autoscaler::metrics::{
    JobStatus, RepositoryRef, RunRef, WorkflowJob, WorkflowRun,
};
use hangar_core::autoscaler::{ListedJobs, current_jobs, listed_jobs_hold};
use hangar_github::{GitHubApi, RunStatus};

use crate::error::{Error, github_err};

/// The jobs of each active run as last listed, by repository and run ID. A repository's runs
/// that left its queued and in-progress lists are forgotten when its runs are listed again.
#[derive(Debug, Default)]
pub struct WorkflowRuns(Mutex<HashMap<RepositoryRef, HashMap<u64, ListedJobs>>>);

impl WorkflowRuns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RepositoryRef, HashMap<u64, ListedJobs>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `repository`'s queued and in-progress runs, oldest first, listed now with `github`. A
    /// run that moves from queued to in progress between the two list calls is listed once,
    /// in progress. With `revalidate`, GitHub is asked even while a cached list is fresh, so
    /// the runs are those of now, not of up to `max-age` ago.
    pub async fn active_runs(
        &self,
        github: &dyn GitHubApi,
        repository: &RepositoryRef,
        revalidate: bool,
    ) -> Result<Vec<RunRef>, Error> {
        let scope = format!("{}/{}", repository.owner, repository.name);
        let mut runs: BTreeMap<u64, (Option<SystemTime>, JobStatus)> = BTreeMap::new();
        for (status, as_job) in [
            (RunStatus::Queued, JobStatus::Queued),
            (RunStatus::InProgress, JobStatus::InProgress),
        ] {
            let (owner, name) = (&repository.owner, &repository.name);
            let listed = if revalidate {
                github
                    .list_workflow_runs_revalidated(owner, name, status)
                    .await
            } else {
                github.list_workflow_runs(owner, name, status).await
            }
            .map_err(github_err("list workflow runs", &scope))?;
            for run in listed {
                let updated_at = run.updated_at.map(SystemTime::from);
                let seen = runs.entry(run.id).or_insert((updated_at, as_job));
                *seen = (seen.0.max(updated_at), as_job);
            }
        }
        let runs: Vec<RunRef> = runs
            .into_iter()
            .map(|(id, (updated_at, status))| RunRef {
                repository: repository.clone(),
                id,
                updated_at,
                status,
            })
            .collect();
        self.lock()
            .entry(repository.clone())
            .or_default()
            .retain(|id, _| runs.iter().any(|r| r.id == *id));
        Ok(runs)
    }

    /// `run`'s jobs at `now`: from an earlier listing while it holds, else listed with
    /// `github` (and kept for the next caller).
    pub async fn jobs(
        &self,
        github: &dyn GitHubApi,
        run: &RunRef,
        now: SystemTime,
    ) -> Result<WorkflowRun, Error> {
        if let Some(jobs) = self.holding(run, now) {
            return Ok(jobs);
        }
        let RepositoryRef { owner, name } = &run.repository;
        let listed = github
            .list_jobs(owner, name, run.id)
            .await
            .map_err(github_err("list jobs", format!("{owner}/{name}")))?;
        let jobs = WorkflowRun {
            jobs: listed
                .into_iter()
                .map(|j| WorkflowJob {
                    id: j.id,
                    run_attempt: j.run_attempt.unwrap_or(1),
                    status: JobStatus::from_github(j.status.as_str()),
                    labels: j.labels,
                    created_at: j.created_at.map(SystemTime::from),
                })
                .collect(),
        };
        self.lock()
            .entry(run.repository.clone())
            .or_default()
            .insert(
                run.id,
                ListedJobs {
                    jobs: jobs.clone(),
                    run_updated_at: run.updated_at,
                    listed_at: now,
                },
            );
        Ok(jobs)
    }

    fn holding(&self, run: &RunRef, now: SystemTime) -> Option<WorkflowRun> {
        let all = self.lock();
        let listed = all.get(&run.repository)?.get(&run.id)?;
        listed_jobs_hold(listed, run, now).then(|| current_jobs(listed, run))
    }
}
