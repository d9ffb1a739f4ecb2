//! The [`GitHubApi`] calls of a [`GitHubClient`], each mapped to its REST path under the
//! scope's `actions/` (`list_url` adds the query and `per_page`), sent through the transport.
//!
//! Contract: a registration token is reused while more than `registration_token_min_ttl` of
//! it remains; a call that creates or deletes a runner (JIT configuration, delete) drops the
//! cached runner lists of its scope, so no later read serves the old set; JIT registration is
//! not repeated after an ambiguous failure.

use async_trait::async_trait;
use jiff::Timestamp;
use reqwest::Method;
use url::Url;

use super::GitHubClient;
use super::transport::{Repeat, Request};
use crate::api::GitHubApi;
use crate::clock::add;
use crate::error::{GitHubError, RateLimitKind};
use crate::models::{
    JitConfig, JitConfigRequest, Job, RateLimit, RunStatus, Runner, RunnerGroup, RunnerId,
    RunnerToken, WorkflowRun,
};
use crate::scope::Scope;

impl GitHubClient {
    fn scope_url(&self, scope: &Scope, rest: &[&str]) -> Url {
        let mut segments = scope.path_segments();
        segments.push("actions");
        segments.extend_from_slice(rest);
        self.inner.endpoint.api(&segments)
    }

    fn list_url(&self, mut url: Url, query: &[(&str, &str)]) -> Url {
        {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in query {
                pairs.append_pair(k, v);
            }
            pairs.append_pair("per_page", &self.inner.options.per_page.to_string());
        }
        url
    }

    async fn runner_token(&self, scope: &Scope, kind: &str) -> Result<RunnerToken, GitHubError> {
        let url = self.scope_url(scope, &["runners", kind]);
        self.post_json(url, None, Repeat::Safe).await
    }

    /// The runner groups of an organization or enterprise; with `visible_to` (a query
    /// parameter and its value), only those visible to that repository or organization.
    async fn runner_groups(
        &self,
        scope: &Scope,
        visible_to: Option<(&str, &str)>,
    ) -> Result<Vec<RunnerGroup>, GitHubError> {
        let base = self.scope_url(scope, &["runner-groups"]);
        self.get_all(self.list_url(base, visible_to.as_slice()), "runner_groups")
            .await
    }

    /// A repository's workflow runs with `status`, every page; with `revalidate`, asked of
    /// GitHub even while a cached copy is fresh.
    async fn workflow_runs(
        &self,
        owner: &str,
        repo: &str,
        status: RunStatus,
        revalidate: bool,
    ) -> Result<Vec<WorkflowRun>, GitHubError> {
        let base = self.scope_url(&Scope::repo(owner, repo), &["runs"]);
        let url = self.list_url(base, &[("status", status.as_str())]);
        self.get_all_pages(url, "workflow_runs", revalidate).await
    }
}

#[async_trait]
impl GitHubApi for GitHubClient {
    async fn registration_token(&self, scope: &Scope) -> Result<RunnerToken, GitHubError> {
        let min_ttl = self.inner.options.registration_token_min_ttl;
        let cached = self
            .inner
            .registration_tokens
            .lock()
            .expect("token cache lock")
            .get(scope)
            .filter(|t| add(self.now(), min_ttl) < t.expires_at)
            .cloned();
        if let Some(token) = cached {
            return Ok(token);
        }
        let token = self.runner_token(scope, "registration-token").await?;
        self.inner
            .registration_tokens
            .lock()
            .expect("token cache lock")
            .insert(scope.clone(), token.clone());
        Ok(token)
    }

    async fn remove_token(&self, scope: &Scope) -> Result<RunnerToken, GitHubError> {
        self.runner_token(scope, "remove-token").await
    }

    async fn generate_jit_config(
        &self,
        scope: &Scope,
        request: &JitConfigRequest,
    ) -> Result<JitConfig, GitHubError> {
        let url = self.scope_url(scope, &["runners", "generate-jitconfig"]);
        let body = serde_json::to_value(request).expect("JitConfigRequest serializes");
        let config: JitConfig = self.post_json(url, Some(body), Repeat::OnlyUnsent).await?;
        self.inner
            .cache
            .invalidate_prefix(self.scope_url(scope, &["runners"]).as_str());
        Ok(config)
    }

    async fn list_runners(&self, scope: &Scope) -> Result<Vec<Runner>, GitHubError> {
        let url = self.list_url(self.scope_url(scope, &["runners"]), &[]);
        self.get_all(url, "runners").await
    }

    async fn list_runners_revalidated(&self, scope: &Scope) -> Result<Vec<Runner>, GitHubError> {
        let url = self.list_url(self.scope_url(scope, &["runners"]), &[]);
        self.get_all_pages(url, "runners", true).await
    }

    async fn find_runner(&self, scope: &Scope, name: &str) -> Result<Option<Runner>, GitHubError> {
        let url = self.list_url(self.scope_url(scope, &["runners"]), &[("name", name)]);
        let runners: Vec<Runner> = self.get_all(url, "runners").await?;
        Ok(runners.into_iter().find(|r| r.name == name))
    }

    async fn get_runner(&self, scope: &Scope, id: RunnerId) -> Result<Runner, GitHubError> {
        self.get_json(self.scope_url(scope, &["runners", &id.to_string()]))
            .await
    }

    async fn delete_runner(&self, scope: &Scope, id: RunnerId) -> Result<(), GitHubError> {
        let url = self.scope_url(scope, &["runners", &id.to_string()]);
        self.send(Request::new(Method::DELETE, url)).await?;
        // The runner and every list that showed it changed; do not serve them stale.
        self.inner
            .cache
            .invalidate_prefix(self.scope_url(scope, &["runners"]).as_str());
        Ok(())
    }

    async fn list_org_runner_groups(
        &self,
        org: &str,
        visible_to_repository: Option<&str>,
    ) -> Result<Vec<RunnerGroup>, GitHubError> {
        let visible_to = visible_to_repository.map(|r| ("visible_to_repository", r));
        self.runner_groups(&Scope::org(org), visible_to).await
    }

    async fn list_enterprise_runner_groups(
        &self,
        enterprise: &str,
        visible_to_organization: Option<&str>,
    ) -> Result<Vec<RunnerGroup>, GitHubError> {
        let visible_to = visible_to_organization.map(|o| ("visible_to_organization", o));
        self.runner_groups(&Scope::enterprise(enterprise), visible_to)
            .await
    }

    async fn list_workflow_runs(
        &self,
        owner: &str,
        repo: &str,
        status: RunStatus,
    ) -> Result<Vec<WorkflowRun>, GitHubError> {
        self.workflow_runs(owner, repo, status, false).await
    }

    async fn list_workflow_runs_revalidated(
        &self,
        owner: &str,
        repo: &str,
        status: RunStatus,
    ) -> Result<Vec<WorkflowRun>, GitHubError> {
        self.workflow_runs(owner, repo, status, true).await
    }

    async fn list_jobs(
        &self,
        owner: &str,
        repo: &str,
        run_id: u64,
    ) -> Result<Vec<Job>, GitHubError> {
        let base = self.scope_url(
            &Scope::repo(owner, repo),
            &["runs", &run_id.to_string(), "jobs"],
        );
        self.get_all(self.list_url(base, &[]), "jobs").await
    }

    fn rate_limit(&self) -> Option<RateLimit> {
        self.inner.gate.lock().expect("gate lock").budget()
    }

    fn rate_limited(&self, now: Timestamp) -> Option<(RateLimitKind, Timestamp)> {
        self.inner.gate.lock().expect("gate lock").blocked(now)
    }
}
