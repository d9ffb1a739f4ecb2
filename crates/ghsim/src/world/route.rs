//! Routing and time: which queued job goes to which idle runner, and the timers `tick` applies
//! (pick-up and queue timeouts, offline runner clean-up).

use hangar_github::Scope;
use hangar_github::clock::until;
use jiff::Timestamp;

use super::{Group, GroupOwner, JobStatus, Repo, Runner, Visibility, World};
use crate::routing::{self, IdleRunner, Level, QueuedJob};

impl World {
    /// The group a runner belongs to.
    pub fn group_of_runner(&self, runner_id: u64) -> Option<&Group> {
        let runner = self.runners.get(&runner_id)?;
        let gid = runner.group_id?;
        let owner = match &runner.scope {
            Scope::Organization(org) => GroupOwner::Org(org.clone()),
            Scope::Enterprise(e) => GroupOwner::Enterprise(e.clone()),
            Scope::Repository { .. } => return None,
        };
        self.groups.iter().find(|g| g.owner == owner && g.id == gid)
    }

    /// Whether a group may serve a repository.
    pub fn group_visible_to(&self, group: &Group, repo: &Repo) -> bool {
        if !repo.private && !group.allows_public_repositories {
            return false;
        }
        match (&group.owner, group.visibility) {
            (_, Visibility::All) => true,
            (GroupOwner::Org(_), Visibility::Private) => repo.private,
            (GroupOwner::Org(_), Visibility::Selected) => group.selected.contains(&repo.id),
            (GroupOwner::Enterprise(_), _) => self
                .orgs
                .get(&repo.owner)
                .is_some_and(|o| group.selected.contains(&o.id)),
        }
    }

    /// How closely a runner may serve a job's repository (`None`: not at all).
    fn level(&self, runner: &Runner, repo: &Repo) -> Option<Level> {
        match &runner.scope {
            Scope::Repository { owner, repo: name } => (owner.eq_ignore_ascii_case(&repo.owner)
                && name.eq_ignore_ascii_case(&repo.name))
            .then_some(Level::Repository),
            Scope::Organization(org) => {
                let group = self.group_of_runner(runner.id)?;
                (org.eq_ignore_ascii_case(&repo.owner) && self.group_visible_to(group, repo))
                    .then_some(Level::Organization)
            }
            Scope::Enterprise(slug) => {
                let org = self.orgs.get(&repo.owner)?;
                let group = self.group_of_runner(runner.id)?;
                (org.enterprise.as_deref() == Some(slug.as_str())
                    && self.group_visible_to(group, repo))
                .then_some(Level::Enterprise)
            }
        }
    }

    /// Assigns queued, unassigned jobs to online, idle runners (see [`routing`]).
    pub fn route(&mut self, now: Timestamp) {
        let queued: Vec<QueuedJob> = self
            .jobs
            .values()
            .filter(|j| j.status == JobStatus::Queued && j.runner_id.is_none())
            .map(|j| QueuedJob {
                id: j.id,
                labels: j.labels.clone(),
            })
            .collect();
        if queued.is_empty() {
            return;
        }
        let idle: Vec<IdleRunner> = self
            .runners
            .values()
            .filter(|r| r.online() && r.running.is_none() && r.assigned.is_none())
            // A runner GitHub refuses messages never gets a job.
            .filter(|r| self.version_refusal(r).is_none())
            .map(|r| IdleRunner {
                id: r.id,
                labels: r.label_names(),
            })
            .collect();
        let assignments = routing::route(&queued, &idle, |job, runner| {
            let repo = self.repos.get(&self.jobs[&job.id].repo_id)?;
            self.level(&self.runners[&runner.id], repo)
        });
        if !assignments.is_empty() {
            self.wake_generation += 1;
        }
        for (job_id, runner_id) in assignments {
            let job = self.jobs.get_mut(&job_id).expect("queued job exists");
            job.runner_id = Some(runner_id);
            job.assigned_at = Some(now);
            self.runners
                .get_mut(&runner_id)
                .expect("idle runner exists")
                .assigned = Some(job_id);
        }
    }

    /// Applies everything that is due at `now`: runners that stopped polling go offline
    /// (interrupting their job), unclaimed assignments are re-queued, jobs queued too long
    /// fail, long-offline runners are removed. Then routes.
    pub fn tick(&mut self, now: Timestamp) {
        let cfg = self.config.clone();
        let silent: Vec<u64> = self
            .runners
            .values()
            .filter(|r| {
                r.session
                    .as_ref()
                    .is_some_and(|s| until(s.last_seen, now) > cfg.offline_after)
            })
            .map(|r| r.id)
            .collect();
        for id in silent {
            self.go_offline(id, now);
        }
        let unclaimed: Vec<(u64, u64)> = self
            .jobs
            .values()
            .filter(|j| j.status == JobStatus::Queued)
            .filter_map(|j| Some((j.id, j.runner_id?, j.assigned_at?)))
            .filter(|(_, _, at)| until(*at, now) > cfg.pickup_timeout)
            .map(|(job, runner, _)| (job, runner))
            .collect();
        for (job, runner) in unclaimed {
            // A runner that does not pick up its job within the pickup timeout is not
            // listening: it goes offline, and the job goes back to the queue for others.
            if self
                .runners
                .get(&runner)
                .is_some_and(|r| r.assigned == Some(job))
            {
                self.go_offline(runner, now);
            } else {
                self.requeue(job);
            }
        }
        let expired: Vec<u64> = self
            .jobs
            .values()
            .filter(|j| {
                j.status == JobStatus::Queued && until(j.created_at, now) > cfg.queue_timeout
            })
            .map(|j| j.id)
            .collect();
        let expired = if cfg.fail_jobs_without_runners {
            let mut expired = expired;
            expired.extend(self.jobs_no_runner_could_take());
            expired
        } else {
            expired
        };
        for job in expired {
            if let Some(runner) = self.jobs[&job].runner_id
                && let Some(r) = self.runners.get_mut(&runner)
            {
                r.assigned = None;
            }
            self.finish_job(job, "failure", false, now);
        }
        let stale: Vec<u64> = self
            .runners
            .values()
            .filter(|r| !r.online())
            .filter(|r| {
                let since = r.last_seen.unwrap_or(r.registered_at);
                let limit = if r.ephemeral {
                    cfg.ephemeral_offline_removal
                } else {
                    cfg.offline_removal
                };
                until(since, now) > limit
            })
            .map(|r| r.id)
            .collect();
        for id in stale {
            self.remove_runner(id, now);
        }
        self.route(now);
    }

    /// Queued, unassigned jobs for which no registered runner (of any status) in a scope
    /// their repository can use has every label.
    fn jobs_no_runner_could_take(&self) -> Vec<u64> {
        self.jobs
            .values()
            .filter(|j| j.status == JobStatus::Queued && j.runner_id.is_none())
            .filter(|j| {
                let Some(repo) = self.repos.get(&j.repo_id) else {
                    return true;
                };
                !self.runners.values().any(|r| {
                    self.level(r, repo).is_some()
                        && routing::labels_match(&j.labels, &r.label_names())
                })
            })
            .map(|j| j.id)
            .collect()
    }

    /// Runners registered longer than `leak_after` ago that never connected.
    pub fn leaked_runners(&self, now: Timestamp) -> Vec<&Runner> {
        self.runners
            .values()
            .filter(|r| !r.ever_online && until(r.registered_at, now) > self.config.leak_after)
            .collect()
    }

    /// Runners that were online once and are offline now, still registered.
    pub fn offline_left_behind(&self) -> Vec<&Runner> {
        self.runners
            .values()
            .filter(|r| r.ever_online && !r.online())
            .collect()
    }
}
