//! Jobs: submission, start, completion and interruption, and the `workflow_job` events each
//! transition emits.

use jiff::Timestamp;
use serde_json::Value;

use super::{Emitted, Job, JobStatus, Payload, Run, SimError, SubmitJobs, World};

impl World {
    /// Queues one run with `count` jobs. Returns the run id and job ids.
    pub fn submit_jobs(
        &mut self,
        request: &SubmitJobs,
        now: Timestamp,
    ) -> Result<(u64, Vec<u64>), SimError> {
        let (owner, name) = request
            .repository
            .split_once('/')
            .ok_or_else(|| SimError::BadRequest("repository must be owner/name".into()))?;
        let repo_id = self
            .repo_by_name(owner, name)
            .map(|r| r.id)
            .ok_or(SimError::NotFound)?;
        if request.count == 0 {
            return Err(SimError::BadRequest("count must be at least 1".into()));
        }
        let run_id = self.id() + 100_000_000; // run ids look unlike other ids, as on GitHub
        let run_number = {
            let n = self.run_numbers.entry(repo_id).or_insert(0);
            *n += 1;
            *n
        };
        let head_sha = self.random(b"0123456789abcdef", 40);
        let workflow_name = request.workflow.clone().unwrap_or_else(|| "CI".into());
        let mut job_ids = Vec::new();
        for i in 0..request.count {
            let id = self.id() + 200_000_000;
            let name = match (&request.job_name, request.count) {
                (Some(n), 1) => n.clone(),
                (Some(n), _) => format!("{n} ({})", i + 1),
                (None, 1) => "build".into(),
                (None, _) => format!("build ({})", i + 1),
            };
            self.jobs.insert(
                id,
                Job {
                    id,
                    run_id,
                    repo_id,
                    name,
                    labels: request.labels.clone(),
                    status: JobStatus::Queued,
                    conclusion: None,
                    created_at: now,
                    assigned_at: None,
                    started_at: None,
                    completed_at: None,
                    runner_id: None,
                    runner_name: None,
                    runner_group: None,
                    duration_ms: request.duration_ms,
                    planned_conclusion: request
                        .conclusion
                        .clone()
                        .unwrap_or_else(|| "success".into()),
                    interrupted: false,
                    requeues: 0,
                },
            );
            job_ids.push(id);
        }
        self.runs.insert(
            run_id,
            Run {
                id: run_id,
                repo_id,
                workflow_id: 1000 + repo_id,
                workflow_name,
                run_number,
                event: "push".into(),
                head_branch: "main".into(),
                head_sha,
                created_at: now,
                updated_at: now,
                jobs: job_ids.clone(),
            },
        );
        for id in &job_ids {
            self.emit_job("queued", *id);
        }
        self.route(now);
        Ok((run_id, job_ids))
    }

    pub(super) fn finish_job(
        &mut self,
        job_id: u64,
        conclusion: &str,
        interrupted: bool,
        now: Timestamp,
    ) {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        if job.status == JobStatus::Completed {
            return;
        }
        job.status = JobStatus::Completed;
        job.conclusion = Some(conclusion.to_owned());
        job.completed_at = Some(now);
        job.interrupted = interrupted;
        if job.started_at.is_none() {
            job.runner_id = None;
        }
        self.touch_run(job_id, now);
        self.emit_job("completed", job_id);
    }

    pub(super) fn touch_run(&mut self, job_id: u64, now: Timestamp) {
        if let Some(run_id) = self.jobs.get(&job_id).map(|j| j.run_id)
            && let Some(run) = self.runs.get_mut(&run_id)
        {
            run.updated_at = now;
        }
    }

    /// A run's status and conclusion, derived from its jobs.
    pub fn run_state(&self, run: &Run) -> (&'static str, Option<&'static str>) {
        let jobs: Vec<&Job> = run.jobs.iter().filter_map(|j| self.jobs.get(j)).collect();
        if jobs.iter().all(|j| j.status == JobStatus::Completed) {
            let failed = jobs
                .iter()
                .any(|j| j.conclusion.as_deref() != Some("success"));
            return (
                "completed",
                Some(if failed { "failure" } else { "success" }),
            );
        }
        if jobs.iter().any(|j| j.status != JobStatus::Queued) {
            ("in_progress", None)
        } else {
            ("queued", None)
        }
    }

    pub(super) fn emit_job(&mut self, action: &str, job_id: u64) {
        let job = &self.jobs[&job_id];
        let (run, repo) = (&self.runs[&job.run_id], &self.repos[&job.repo_id]);
        let run = Run {
            jobs: Vec::new(),
            ..run.clone()
        };
        let owner = Some(repo.owner.clone());
        self.outbox.push(Emitted {
            event: "workflow_job".into(),
            payload: Payload::WorkflowJob {
                action: action.to_owned(),
                job: Box::new(job.clone()),
                run: Box::new(run),
                repo: Box::new(repo.clone()),
            },
            owner,
        });
    }

    /// Queues a custom event for delivery (ping, push, …).
    pub fn emit(&mut self, event: &str, payload: Value, owner: Option<String>) {
        self.outbox.push(Emitted {
            event: event.to_owned(),
            payload: Payload::Rendered(payload),
            owner,
        });
    }
}
