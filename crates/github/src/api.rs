//! [`GitHubApi`]: the GitHub operations Hangar's controllers need.
//!
//! Controllers hold an `Arc<dyn GitHubApi>`; the binary wires in
//! [`GitHubClient`](crate::GitHubClient) (usually from a
//! [`ClientRegistry`](crate::ClientRegistry), one per credential), and tests can substitute
//! anything that implements the trait. Every method is one logical operation: list methods
//! follow all pages, token methods may be served from a cache.

use std::fmt;

use async_trait::async_trait;

use crate::error::{GitHubError, RateLimitKind};
use crate::models::{
    JitConfig, JitConfigRequest, Job, RateLimit, RunStatus, Runner, RunnerGroup, RunnerId,
    RunnerToken, WorkflowRun,
};
use crate::scope::Scope;

/// GitHub's runner, runner-group, workflow-run and job endpoints at repository, organization
/// and enterprise scope.
#[async_trait]
pub trait GitHubApi: Send + Sync + fmt::Debug {
    /// A registration token for `config.sh --token` (`POST …/runners/registration-token`).
    /// Reused while more than the configured minimum life (30 min) remains.
    async fn registration_token(&self, scope: &Scope) -> Result<RunnerToken, GitHubError>;

    /// A remove token for `config.sh remove --token` (`POST …/runners/remove-token`).
    async fn remove_token(&self, scope: &Scope) -> Result<RunnerToken, GitHubError>;

    /// Registers a just-in-time runner (`POST …/runners/generate-jitconfig`). The runner exists
    /// (offline) as soon as this returns; a taken name is [`GitHubError::Conflict`].
    async fn generate_jit_config(
        &self,
        scope: &Scope,
        request: &JitConfigRequest,
    ) -> Result<JitConfig, GitHubError>;

    /// All runners registered at `scope` (every page of `GET …/runners`).
    async fn list_runners(&self, scope: &Scope) -> Result<Vec<Runner>, GitHubError>;

    /// [`GitHubApi::list_runners`], asking GitHub even while a cached copy is fresh (with its
    /// ETag: an unchanged list is a 304, free of rate-limit cost). For callers that know the
    /// list has just changed, such as runner pods waiting to see their own registration:
    /// GitHub's `max-age=60` would otherwise hide a new runner for up to a minute.
    async fn list_runners_revalidated(&self, scope: &Scope) -> Result<Vec<Runner>, GitHubError> {
        self.list_runners(scope).await
    }

    /// The runner called `name` at `scope`, if any (`GET …/runners?name=`).
    async fn find_runner(&self, scope: &Scope, name: &str) -> Result<Option<Runner>, GitHubError>;

    /// One runner (`GET …/runners/{id}`); [`GitHubError::NotFound`] if it is gone.
    async fn get_runner(&self, scope: &Scope, id: RunnerId) -> Result<Runner, GitHubError>;

    /// Deregisters a runner (`DELETE …/runners/{id}`). [`GitHubError::RunnerBusy`] while it runs
    /// a job, [`GitHubError::NotFound`] if it is already gone. Success guarantees the runner
    /// cannot take another job.
    async fn delete_runner(&self, scope: &Scope, id: RunnerId) -> Result<(), GitHubError>;

    /// The runner groups of an organization (`GET /orgs/{org}/actions/runner-groups`),
    /// optionally only those a repository (by name) may use.
    async fn list_org_runner_groups(
        &self,
        org: &str,
        visible_to_repository: Option<&str>,
    ) -> Result<Vec<RunnerGroup>, GitHubError>;

    /// The runner groups of an enterprise (`GET /enterprises/{enterprise}/actions/runner-groups`),
    /// optionally only those an organization may use.
    async fn list_enterprise_runner_groups(
        &self,
        enterprise: &str,
        visible_to_organization: Option<&str>,
    ) -> Result<Vec<RunnerGroup>, GitHubError>;

    /// A repository's workflow runs with `status` (`GET /repos/{o}/{r}/actions/runs?status=`).
    async fn list_workflow_runs(
        &self,
        owner: &str,
        repo: &str,
        status: RunStatus,
    ) -> Result<Vec<WorkflowRun>, GitHubError>;

    /// [`GitHubApi::list_workflow_runs`], asking GitHub even while a cached copy is fresh (with
    /// its ETag: an unchanged list is a 304, free of rate-limit cost). For callers that record
    /// when they observed the list: a copy served from the cache may be up to `max-age` (60 s)
    /// older than that.
    async fn list_workflow_runs_revalidated(
        &self,
        owner: &str,
        repo: &str,
        status: RunStatus,
    ) -> Result<Vec<WorkflowRun>, GitHubError> {
        self.list_workflow_runs(owner, repo, status).await
    }

    /// The jobs of a run's latest attempt (`GET /repos/{o}/{r}/actions/runs/{run_id}/jobs`).
    async fn list_jobs(
        &self,
        owner: &str,
        repo: &str,
        run_id: u64,
    ) -> Result<Vec<Job>, GitHubError>;

    /// The credential's latest primary rate-limit budget (for metrics), if a response carried
    /// one yet.
    fn rate_limit(&self) -> Option<RateLimit>;

    /// Which rate limit holds this credential at `now`, and until when: while one does, every
    /// call fails at once with [`GitHubError::RateLimited`] without reaching GitHub. `None`
    /// when calls may be sent (an implementation that keeps no gate always says so).
    fn rate_limited(&self, now: jiff::Timestamp) -> Option<(RateLimitKind, jiff::Timestamp)> {
        let _ = now;
        None
    }
}
