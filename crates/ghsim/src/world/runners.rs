//! Runners: registration (`config.sh`, JIT), sessions and polls, removal, and GitHub's lifecycle
//! rules for them.

use base64::Engine;
use hangar_github::Scope;
use jiff::Timestamp;
use serde_json::json;
use url::Url;

use super::{
    AssignedJob, DEFAULT_LABELS, GroupOwner, GroupRef, JitRequest, JobStatus, Label,
    READ_ONLY_LABELS, RUNNER_VERSION, RegisterRunner, Repo, Runner, Session, SimError, TokenKind,
    World, config_url,
};

impl World {
    fn label(&mut self, name: &str, read_only: bool) -> Label {
        let key = name.to_ascii_lowercase();
        let next = self.next_id;
        let id = *self.labels.entry(key).or_insert(next);
        if id == next {
            self.next_id += 1;
        }
        Label {
            id,
            name: name.to_owned(),
            read_only,
        }
    }

    fn make_labels(&mut self, names: &[String]) -> Vec<Label> {
        let mut out: Vec<Label> = Vec::new();
        for name in names {
            if out.iter().any(|l| l.name.eq_ignore_ascii_case(name)) {
                continue;
            }
            let read_only = READ_ONLY_LABELS
                .iter()
                .any(|r| r.eq_ignore_ascii_case(name));
            out.push(self.label(name, read_only));
        }
        out
    }

    fn group_for(
        &self,
        scope: &Scope,
        wanted: Option<GroupRef<'_>>,
    ) -> Result<Option<u64>, SimError> {
        let owner = match scope {
            Scope::Repository { .. } => return Ok(None),
            Scope::Organization(org) => GroupOwner::Org(org.clone()),
            Scope::Enterprise(e) => GroupOwner::Enterprise(e.clone()),
        };
        let found = self.groups.iter().find(|g| {
            g.owner == owner
                && match wanted {
                    None => g.default,
                    Some(GroupRef::Id(id)) => g.id == id,
                    Some(GroupRef::Name(name)) => g.name.eq_ignore_ascii_case(name),
                }
        });
        found.map(|g| Some(g.id)).ok_or(SimError::NotFound)
    }

    fn name_taken(&self, scope: &Scope, name: &str) -> Option<u64> {
        self.runners
            .values()
            .find(|r| &r.scope == scope && r.name.eq_ignore_ascii_case(name))
            .map(|r| r.id)
    }

    #[allow(clippy::too_many_arguments)]
    fn insert_runner(
        &mut self,
        name: &str,
        scope: &Scope,
        group_id: Option<u64>,
        labels: Vec<Label>,
        ephemeral: bool,
        jit: bool,
        now: Timestamp,
    ) -> u64 {
        let id = self.id();
        let credential = format!("ghsim_runner_{}", self.random(b"abcdef0123456789", 40));
        self.runners.insert(
            id,
            Runner {
                id,
                name: name.to_owned(),
                scope: scope.clone(),
                group_id,
                labels,
                os: "unknown".into(),
                ephemeral,
                jit,
                version: None,
                credential,
                registered_at: now,
                session: None,
                ever_online: false,
                last_seen: None,
                assigned: None,
                running: None,
            },
        );
        id
    }

    /// Every registration and remove token issued so far, expired or not: what tests check
    /// never reaches a log line, an Event or a status.
    pub fn issued_runner_tokens(&self) -> Vec<String> {
        self.runner_tokens.keys().cloned().collect()
    }

    /// `POST …/generate-jitconfig`: registers an offline, ephemeral runner and returns its id
    /// and the encoded config (the same layout actions/runner reads: base64 JSON of base64
    /// files `.runner`, `.credentials`, `.credentials_rsaparams`).
    pub fn generate_jit(
        &mut self,
        scope: &Scope,
        request: JitRequest,
        now: Timestamp,
    ) -> Result<(u64, String), SimError> {
        self.check_scope(scope)?;
        let (Some(name), Some(group_id), Some(labels)) =
            (request.name, request.runner_group_id, request.labels)
        else {
            return Err(SimError::Unprocessable(
                "Invalid request.\n\n\"name\", \"runner_group_id\" and \"labels\" are required"
                    .into(),
            ));
        };
        if labels.is_empty() || labels.len() > 100 || name.is_empty() {
            return Err(SimError::Unprocessable(
                "Invalid request.\n\nlabels must have 1 to 100 items".into(),
            ));
        }
        let group = match scope {
            Scope::Repository { .. } => None,
            _ => self.group_for(scope, Some(GroupRef::Id(group_id)))?,
        };
        if self.name_taken(scope, &name).is_some() {
            return Err(SimError::Conflict(format!(
                "Already exists - A runner with the name {name} already exists."
            )));
        }
        let labels = self.make_labels(&labels);
        let id = self.insert_runner(&name, scope, group, labels, true, true, now);
        let runner = &self.runners[&id];
        let b64 = base64::engine::general_purpose::STANDARD;
        let settings = json!({
            "AgentId": id,
            "AgentName": name,
            "PoolId": group.unwrap_or(1),
            "PoolName": "Default",
            "ServerUrl": self.config.public_url.as_str(),
            "GitHubUrl": config_url(&self.config.public_url, scope),
            "WorkFolder": request.work_folder.unwrap_or_else(|| "_work".into()),
            "Ephemeral": true,
            "UseV2Flow": false,
        });
        let credentials =
            json!({"Scheme": "OAuthAccessToken", "Data": {"token": runner.credential}});
        let files = json!({
            ".runner": b64.encode(settings.to_string()),
            ".credentials": b64.encode(credentials.to_string()),
            ".credentials_rsaparams": b64.encode("{}"),
        });
        Ok((id, b64.encode(files.to_string())))
    }

    /// Runner protocol: `config.sh --url --token` registration. Returns the runner id and its
    /// credential.
    pub fn register_runner(
        &mut self,
        request: RegisterRunner,
        now: Timestamp,
    ) -> Result<(u64, String), SimError> {
        let path = Url::parse(&request.url)
            .map(|u| u.path().to_owned())
            .unwrap_or_else(|_| request.url.clone());
        let scope = Scope::from_config_path(&path).ok_or_else(|| {
            SimError::BadRequest(format!("cannot tell a scope from {:?}", request.url))
        })?;
        self.check_scope(&scope)?;
        self.check_runner_token(&request.token, TokenKind::Registration, &scope, now)?;
        let group = self.group_for(&scope, request.runner_group.as_deref().map(GroupRef::Name))?;
        if let Some(existing) = self.name_taken(&scope, &request.name) {
            if !request.replace {
                return Err(SimError::Conflict(format!(
                    "A runner exists with the same name {}.",
                    request.name
                )));
            }
            if self.runners[&existing].busy() {
                return Err(SimError::Unprocessable(format!(
                    "Bad request - Runner \"{}\" is still running a job",
                    request.name
                )));
            }
            self.remove_runner(existing, now);
        }
        let mut names: Vec<String> = if request.no_default_labels {
            Vec::new()
        } else {
            DEFAULT_LABELS.iter().map(|s| s.to_string()).collect()
        };
        names.extend(request.labels.iter().cloned());
        if names.is_empty() {
            return Err(SimError::BadRequest(
                "--no-default-labels needs --labels".into(),
            ));
        }
        let labels = self.make_labels(&names);
        let id = self.insert_runner(
            &request.name,
            &scope,
            group,
            labels,
            request.ephemeral,
            false,
            now,
        );
        Ok((id, self.runners[&id].credential.clone()))
    }

    fn runner_by_credential(&self, credential: &str) -> Result<u64, SimError> {
        self.runners
            .values()
            .find(|r| r.credential == credential)
            .map(|r| r.id)
            .ok_or_else(|| SimError::Unauthorized("runner credential unknown (deleted?)".into()))
    }

    /// Runner protocol: the runner connects. One session per runner (409 if another listener
    /// is connected, like the runner's exit code 5).
    pub fn open_session(
        &mut self,
        credential: &str,
        os: Option<String>,
        version: Option<String>,
        now: Timestamp,
    ) -> Result<(u64, String), SimError> {
        let id = self.runner_by_credential(credential)?;
        let session_id = self.guid();
        let runner = self.runners.get_mut(&id).expect("runner exists");
        if runner.session.is_some() {
            return Err(SimError::Conflict(
                "A session for this runner already exists.".into(),
            ));
        }
        runner.session = Some(Session {
            id: session_id.clone(),
            last_seen: now,
        });
        runner.ever_online = true;
        runner.last_seen = Some(now);
        runner.os = os.unwrap_or_else(|| "linux".into());
        runner.version = Some(version.unwrap_or_else(|| RUNNER_VERSION.into()));
        self.route(now);
        Ok((id, session_id))
    }

    /// GitHub's refusal of `runner`'s version, if it is below the configured minimum.
    pub(crate) fn version_refusal(&self, runner: &Runner) -> Option<String> {
        let minimum = self.config.minimum_runner_version.as_deref()?;
        let version = runner.version.as_deref()?;
        super::below_minimum(version, minimum).then(|| {
            format!(
                "Runner version v{} is deprecated and cannot receive messages.",
                version.trim_start_matches('v')
            )
        })
    }

    fn runner_by_session(&self, session_id: &str) -> Result<u64, SimError> {
        self.runners
            .values()
            .find(|r| r.session.as_ref().is_some_and(|s| s.id == session_id))
            .map(|r| r.id)
            .ok_or(SimError::NotFound)
    }

    /// Runner protocol: a poll. Refreshes liveness; starts and returns the assigned job (or
    /// the running one again, if the previous answer was lost).
    pub fn poll(
        &mut self,
        session_id: &str,
        now: Timestamp,
    ) -> Result<Option<AssignedJob>, SimError> {
        let id = self.runner_by_session(session_id)?;
        if let Some(refusal) = self.version_refusal(&self.runners[&id]) {
            // Refused before it counts as a sign of life: the runner goes offline.
            return Err(SimError::Forbidden(refusal));
        }
        let runner = self.runners.get_mut(&id).expect("runner exists");
        if let Some(session) = runner.session.as_mut() {
            session.last_seen = now;
        }
        runner.last_seen = Some(now);
        if let Some(job) = runner.running {
            return Ok(Some(self.assignment(job)));
        }
        let Some(job_id) = runner.assigned.take() else {
            return Ok(None);
        };
        runner.running = Some(job_id);
        let runner_name = runner.name.clone();
        let group = self
            .group_of_runner(id)
            .map(|g| (g.id, g.name.clone()))
            .unwrap_or((1, "Default".into()));
        let job = self.jobs.get_mut(&job_id).expect("assigned job exists");
        job.status = JobStatus::InProgress;
        job.started_at = Some(now);
        job.runner_id = Some(id);
        job.runner_name = Some(runner_name);
        job.runner_group = Some(group);
        self.touch_run(job_id, now);
        self.emit_job("in_progress", job_id);
        Ok(Some(self.assignment(job_id)))
    }

    fn assignment(&self, job_id: u64) -> AssignedJob {
        let job = &self.jobs[&job_id];
        AssignedJob {
            id: job.id,
            run_id: job.run_id,
            name: job.name.clone(),
            repository: self
                .repos
                .get(&job.repo_id)
                .map(Repo::full_name)
                .unwrap_or_default(),
            labels: job.labels.clone(),
            duration_ms: job.duration_ms,
            conclusion: job.planned_conclusion.clone(),
        }
    }

    /// Runner protocol: the running job finished. Returns whether the runner was removed
    /// (ephemeral runners are, after their one job).
    pub fn complete_job(
        &mut self,
        credential: &str,
        job_id: u64,
        conclusion: &str,
        now: Timestamp,
    ) -> Result<bool, SimError> {
        let id = self.runner_by_credential(credential)?;
        if self.runners[&id].running != Some(job_id) {
            return Err(SimError::Conflict(format!(
                "job {job_id} is not running on this runner"
            )));
        }
        self.finish_job(job_id, conclusion, false, now);
        let runner = self.runners.get_mut(&id).expect("runner exists");
        runner.running = None;
        let removed = runner.ephemeral;
        if removed {
            self.remove_runner(id, now);
        }
        self.route(now);
        Ok(removed)
    }

    /// Runner protocol: the runner disconnects (goes offline). A job it was running is
    /// interrupted.
    pub fn close_session(&mut self, session_id: &str, now: Timestamp) -> Result<(), SimError> {
        let id = self.runner_by_session(session_id)?;
        self.go_offline(id, now);
        self.route(now);
        Ok(())
    }

    /// Runner protocol: `config.sh remove --token`.
    pub fn unregister(
        &mut self,
        credential: &str,
        remove_token: &str,
        now: Timestamp,
    ) -> Result<(), SimError> {
        let id = self.runner_by_credential(credential)?;
        let scope = self.runners[&id].scope.clone();
        self.check_runner_token(remove_token, TokenKind::Remove, &scope, now)?;
        if self.runners[&id].busy() {
            return Err(SimError::Unprocessable(format!(
                "Bad request - Runner \"{}\" is still running a job",
                self.runners[&id].name
            )));
        }
        self.remove_runner(id, now);
        Ok(())
    }

    /// REST `DELETE …/runners/{id}`: 422 while the runner runs a job.
    pub fn delete_runner(
        &mut self,
        scope: &Scope,
        id: u64,
        now: Timestamp,
    ) -> Result<(), SimError> {
        let runner = self
            .runners
            .get(&id)
            .filter(|r| &r.scope == scope)
            .ok_or(SimError::NotFound)?;
        if runner.busy() {
            return Err(SimError::Unprocessable(format!(
                "Bad request - Runner \"{}\" is still running a job",
                runner.name
            )));
        }
        self.remove_runner(id, now);
        self.route(now);
        Ok(())
    }

    pub(super) fn go_offline(&mut self, id: u64, now: Timestamp) {
        let Some(runner) = self.runners.get_mut(&id) else {
            return;
        };
        if runner.session.take().is_some() {
            self.wake_generation += 1;
        }
        let runner = self.runners.get_mut(&id).expect("runner exists");
        let (running, assigned) = (runner.running.take(), runner.assigned.take());
        if let Some(job) = assigned {
            self.requeue(job);
        }
        if let Some(job) = running {
            self.finish_job(job, "failure", true, now);
        }
    }

    pub(super) fn remove_runner(&mut self, id: u64, now: Timestamp) {
        self.go_offline(id, now);
        if let Some(runner) = self.runners.remove(&id)
            && !runner.ever_online
        {
            self.removed_never_connected += 1;
        }
    }

    pub(super) fn requeue(&mut self, job_id: u64) {
        if let Some(job) = self.jobs.get_mut(&job_id)
            && job.status == JobStatus::Queued
        {
            job.runner_id = None;
            job.assigned_at = None;
            job.requeues += 1;
        }
    }
}
