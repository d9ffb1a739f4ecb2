//! The simulated GitHub: every entity and every state transition, as plain synchronous code.
//!
//! [`World`] knows nothing about HTTP or async. Each operation takes `now` and either changes
//! the state or returns a [`SimError`] that the HTTP layer turns into GitHub's status code.
//! Transitions that GitHub announces by webhook push an [`Emitted`] event into the outbox,
//! holding copies of what its payload shows as it was at that moment (so a later change cannot
//! alter what was "sent"); the async layer drains it and has [`crate::render`] turn each into
//! JSON. The world itself renders nothing. After every change [`World::route`] assigns queued jobs to idle runners.
//!
//! Job lifecycle: `queued` → assigned to a runner (still `queued`; if the runner does not pick
//! it up within `pickup_timeout` the runner is taken offline and the job re-queued) →
//! `in_progress` when the runner polls it →
//! `completed` when the runner reports, or `completed/failure` ("interrupted") when its runner
//! goes offline, or `completed/failure` after `queue_timeout` without a runner.
//! Runner lifecycle: registered (offline) → online while it holds a session and polls → busy
//! while running a job → removed after one job if ephemeral, by `DELETE` (422 while busy), by
//! `config.sh remove`, or after being offline for 14 days (1 day if ephemeral).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use base64::Engine;
use hangar_github::Scope;
use hangar_github::clock::{add, until};
use jiff::Timestamp;
use jsonwebtoken::DecodingKey;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use url::Url;

use crate::routing::{self, IdleRunner, Level, QueuedJob};

/// Timing and identity settings of the simulated GitHub. Defaults are GitHub's.
#[derive(Clone, Debug)]
pub struct WorldConfig {
    /// Base URL ghsim is reachable at; used in every URL it renders.
    pub public_url: Url,
    /// Life of registration and remove tokens (GitHub: 1 h).
    pub runner_token_ttl: Duration,
    /// Life of installation tokens (GitHub: 1 h).
    pub installation_token_ttl: Duration,
    /// An assigned job not picked up within this is re-queued (GitHub: 60 s).
    pub pickup_timeout: Duration,
    /// A runner that has not polled for this long is offline.
    pub offline_after: Duration,
    /// A job queued this long without a runner fails (GitHub: 24 h).
    pub queue_timeout: Duration,
    /// Fail a queued job at once when no runner of its repository's scopes, online or
    /// offline, has its labels: GitHub before late 2021 and older GitHub Enterprise Server
    /// releases (what ARC's registration-only runners worked around). Off: GitHub today keeps
    /// such a job queued until `queue_timeout`.
    pub fail_jobs_without_runners: bool,
    /// Offline runners are removed after this (GitHub: 14 days).
    pub offline_removal: Duration,
    /// Offline ephemeral runners are removed after this (GitHub: 1 day).
    pub ephemeral_offline_removal: Duration,
    /// A runner registered this long ago that never connected counts as leaked.
    pub leak_after: Duration,
    /// Primary rate-limit budget per credential per hour.
    pub rate_limit: u64,
    /// Seed for generated tokens and ids.
    pub seed: u64,
}

impl Default for WorldConfig {
    fn default() -> Self {
        Self {
            public_url: Url::parse("http://127.0.0.1/").expect("static URL"),
            runner_token_ttl: Duration::from_secs(3600),
            installation_token_ttl: Duration::from_secs(3600),
            pickup_timeout: Duration::from_secs(60),
            offline_after: Duration::from_secs(90),
            queue_timeout: Duration::from_secs(24 * 3600),
            fail_jobs_without_runners: false,
            offline_removal: Duration::from_secs(14 * 24 * 3600),
            ephemeral_offline_removal: Duration::from_secs(24 * 3600),
            leak_after: Duration::from_secs(300),
            rate_limit: 5000,
            seed: 0x6873_696d,
        }
    }
}

/// Why an operation was refused; the HTTP layer maps each to GitHub's status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// 404.
    #[error("Not Found")]
    NotFound,
    /// 401 with a message.
    #[error("{0}")]
    Unauthorized(String),
    /// 403 with a message.
    #[error("{0}")]
    Forbidden(String),
    /// 409 with a message.
    #[error("{0}")]
    Conflict(String),
    /// 422 with a message.
    #[error("{0}")]
    Unprocessable(String),
    /// 400 with a message.
    #[error("{0}")]
    BadRequest(String),
}

/// An enterprise.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Enterprise {
    /// Id.
    pub id: u64,
    /// Slug.
    pub slug: String,
}

/// An organization.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Org {
    /// Id.
    pub id: u64,
    /// Login.
    pub login: String,
    /// Enterprise slug, if it belongs to one.
    pub enterprise: Option<String>,
}

/// A repository.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Repo {
    /// Id.
    pub id: u64,
    /// Owner login (an organization or a user).
    pub owner: String,
    /// Name.
    pub name: String,
    /// Private or public.
    pub private: bool,
}

impl Repo {
    /// `owner/name`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
}

/// Who owns a runner group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupOwner {
    /// An organization (visibility over its repositories).
    Org(String),
    /// An enterprise (visibility over its organizations).
    Enterprise(String),
}

/// Runner group visibility.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    /// Every repository / organization.
    All,
    /// Selected ones.
    Selected,
    /// Private repositories only.
    Private,
}

/// A runner group.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Group {
    /// Id (1 is the default group of every owner).
    pub id: u64,
    /// Owner.
    pub owner: GroupOwner,
    /// Name.
    pub name: String,
    /// Visibility.
    pub visibility: Visibility,
    /// Selected repository ids (org groups) or organization ids (enterprise groups).
    pub selected: BTreeSet<u64>,
    /// Whether it is the default group.
    pub default: bool,
    /// Whether public repositories may use it.
    pub allows_public_repositories: bool,
}

/// A runner label.
#[derive(Clone, Debug, Serialize)]
pub struct Label {
    /// Id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// `read-only` (self-hosted, OS, arch) or `custom`.
    pub read_only: bool,
}

/// A connected runner's session.
#[derive(Clone, Debug, Serialize)]
pub struct Session {
    /// Session id.
    pub id: String,
    /// Last poll.
    pub last_seen: Timestamp,
}

/// A self-hosted runner.
#[derive(Clone, Debug, Serialize)]
pub struct Runner {
    /// Id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// Where it is registered.
    pub scope: Scope,
    /// Runner group (organization and enterprise runners).
    pub group_id: Option<u64>,
    /// Labels.
    pub labels: Vec<Label>,
    /// OS reported on connect (`unknown` before).
    pub os: String,
    /// Takes one job, then is removed.
    pub ephemeral: bool,
    /// Registered by JIT config.
    pub jit: bool,
    /// Version reported on connect.
    pub version: Option<String>,
    /// The credential the runner authenticates its protocol calls with.
    #[serde(skip)]
    pub credential: String,
    /// Registration time.
    pub registered_at: Timestamp,
    /// Current session (online while present).
    pub session: Option<Session>,
    /// Whether it ever connected.
    pub ever_online: bool,
    /// Last time it was seen (session open or poll).
    pub last_seen: Option<Timestamp>,
    /// Job assigned but not picked up yet.
    pub assigned: Option<u64>,
    /// Job running.
    pub running: Option<u64>,
}

impl Runner {
    /// Online: connected with a session.
    pub fn online(&self) -> bool {
        self.session.is_some()
    }

    /// Running a job.
    pub fn busy(&self) -> bool {
        self.running.is_some()
    }

    /// Label names.
    pub fn label_names(&self) -> Vec<String> {
        self.labels.iter().map(|l| l.name.clone()).collect()
    }
}

/// A workflow run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// Id.
    pub id: u64,
    /// Repository id.
    pub repo_id: u64,
    /// Workflow id.
    pub workflow_id: u64,
    /// Workflow name.
    pub workflow_name: String,
    /// Run number within the repository.
    pub run_number: u64,
    /// Triggering event.
    pub event: String,
    /// Branch.
    pub head_branch: String,
    /// Commit.
    pub head_sha: String,
    /// Creation.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
    /// Job ids.
    pub jobs: Vec<u64>,
}

/// Job status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Waiting for (or assigned to but not picked up by) a runner.
    Queued,
    /// Running.
    InProgress,
    /// Finished.
    Completed,
}

impl JobStatus {
    /// Wire word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
        }
    }
}

/// A job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    /// Id.
    pub id: u64,
    /// Run id.
    pub run_id: u64,
    /// Repository id.
    pub repo_id: u64,
    /// Job name.
    pub name: String,
    /// `runs-on` labels.
    pub labels: Vec<String>,
    /// Status.
    pub status: JobStatus,
    /// Conclusion once completed.
    pub conclusion: Option<String>,
    /// Queued at.
    pub created_at: Timestamp,
    /// Assigned to a runner at (latest assignment).
    pub assigned_at: Option<Timestamp>,
    /// Started at.
    pub started_at: Option<Timestamp>,
    /// Completed at.
    pub completed_at: Option<Timestamp>,
    /// Runner (assigned or running).
    pub runner_id: Option<u64>,
    /// Runner name once started.
    pub runner_name: Option<String>,
    /// Runner group once started.
    pub runner_group: Option<(u64, String)>,
    /// How long the simulated runner should run it.
    pub duration_ms: u64,
    /// The conclusion the simulated runner should report.
    pub planned_conclusion: String,
    /// Completed because its runner vanished while running it.
    pub interrupted: bool,
    /// Times it was re-queued after a runner did not pick it up.
    pub requeues: u32,
}

/// Registration or remove token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenKind {
    /// For `config.sh`.
    Registration,
    /// For `config.sh remove`.
    Remove,
}

#[derive(Clone, Debug)]
struct RunnerTokenRecord {
    scope: Scope,
    kind: TokenKind,
    expires_at: Timestamp,
}

/// A GitHub App.
#[derive(Clone, Debug)]
pub struct App {
    /// App id.
    pub id: u64,
    /// Client id (`Iv23…`).
    pub client_id: String,
    /// Slug.
    pub slug: String,
    /// Verifies the App's JWTs.
    pub key: DecodingKey,
}

/// An App installation on an account.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Installation {
    /// Installation id.
    pub id: u64,
    /// App id.
    pub app_id: u64,
    /// Account login (organization or user).
    pub account: String,
    /// Created at.
    pub created_at: Timestamp,
}

#[derive(Clone, Debug)]
struct InstallationTokenRecord {
    installation_id: u64,
    expires_at: Timestamp,
}

/// Who made a REST call, for auth decisions, rate limits and accounting.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Identity {
    /// A personal access token, by its label.
    Pat(String),
    /// An installation token.
    Installation {
        /// Installation id.
        id: u64,
        /// Installed account.
        account: String,
    },
    /// An App JWT.
    App(u64),
}

impl Identity {
    /// The label used in accounting and rate-limit messages.
    pub fn label(&self) -> String {
        match self {
            Self::Pat(label) => format!("pat:{label}"),
            Self::Installation { id, .. } => format!("installation:{id}"),
            Self::App(id) => format!("app:{id}"),
        }
    }
}

/// A credential's primary rate-limit window.
#[derive(Clone, Debug, Serialize)]
pub struct Budget {
    /// Requests per window.
    pub limit: u64,
    /// Used in this window.
    pub used: u64,
    /// When the window resets.
    pub reset: Timestamp,
}

impl Budget {
    /// Requests left.
    pub fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }
}

/// Counters of one endpoint × credential.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CallStats {
    /// Requests.
    pub calls: u64,
    /// Requests charged against the primary budget.
    pub charged: u64,
    /// 304 answers.
    pub not_modified: u64,
    /// 4xx/5xx answers.
    pub errors: u64,
}

/// One REST request as received (for checking clients against the API description).
#[derive(Clone, Debug, Serialize)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Route template, e.g. `/orgs/{org}/actions/runners`.
    pub template: String,
    /// Query parameter names.
    pub query: Vec<String>,
    /// JSON body, if any.
    pub body: Option<Value>,
}

/// How many recent requests [`World::requests`] keeps.
pub const REQUEST_LOG: usize = 10_000;

/// A webhook event produced by a transition.
#[derive(Clone, Debug)]
pub struct Emitted {
    /// `X-GitHub-Event`.
    pub event: String,
    /// What the payload shows, as it was when the event happened.
    pub payload: Payload,
    /// Owner login of the repository it concerns (for hook filters).
    pub owner: Option<String>,
}

impl Emitted {
    /// The payload's `action`, if it has one.
    pub fn action(&self) -> Option<&str> {
        match &self.payload {
            Payload::WorkflowJob { action, .. } => Some(action),
            Payload::Rendered(value) => value["action"].as_str(),
        }
    }
}

/// The content of an [`Emitted`] event.
#[derive(Clone, Debug)]
pub enum Payload {
    /// A `workflow_job` event: copies of the job, its run (without its job list, which the
    /// payload does not show) and its repository, taken when it happened.
    WorkflowJob {
        /// `queued`, `in_progress` or `completed`.
        action: String,
        /// The job at that moment.
        job: Box<Job>,
        /// Its run.
        run: Box<Run>,
        /// Its repository.
        repo: Box<Repo>,
    },
    /// Any other event, rendered by whoever emitted it (ping, push, …).
    Rendered(Value),
}

/// The `config.sh --url` of a scope under ghsim's public URL.
pub fn config_url(public: &Url, scope: &Scope) -> String {
    format!(
        "{}/{}",
        public.as_str().trim_end_matches('/'),
        scope.config_path()
    )
}

/// What a runner gets when it picks up a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssignedJob {
    /// Job id.
    pub id: u64,
    /// Run id.
    pub run_id: u64,
    /// Job name.
    pub name: String,
    /// `owner/repo`.
    pub repository: String,
    /// `runs-on` labels.
    pub labels: Vec<String>,
    /// How long to run it.
    pub duration_ms: u64,
    /// What to report at the end.
    pub conclusion: String,
}

/// Request to submit jobs.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct SubmitJobs {
    /// `owner/repo`.
    pub repository: String,
    /// How many jobs (one run).
    #[serde(default = "one")]
    pub count: u32,
    /// `runs-on` labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Job duration for the simulated runner.
    #[serde(default)]
    pub duration_ms: u64,
    /// Conclusion the simulated runner reports.
    #[serde(default)]
    pub conclusion: Option<String>,
    /// Workflow name.
    #[serde(default)]
    pub workflow: Option<String>,
    /// Job name prefix.
    #[serde(default)]
    pub job_name: Option<String>,
}

fn one() -> u32 {
    1
}

/// Request to register a runner with a registration token (`config.sh`).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct RegisterRunner {
    /// `config.sh --url`: `<ghsim>/<org>`, `<ghsim>/<owner>/<repo>` or
    /// `<ghsim>/enterprises/<slug>` (only the path matters).
    pub url: String,
    /// Registration token.
    pub token: String,
    /// Runner name.
    pub name: String,
    /// Custom labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Skip `self-hosted`, OS and arch labels.
    #[serde(default)]
    pub no_default_labels: bool,
    /// Runner group name (default group if absent).
    #[serde(default)]
    pub runner_group: Option<String>,
    /// One job, then removed.
    #[serde(default)]
    pub ephemeral: bool,
    /// Replace a runner with the same name.
    #[serde(default)]
    pub replace: bool,
}

/// Request body of `generate-jitconfig`.
#[derive(Clone, Debug, Deserialize)]
pub struct JitRequest {
    /// Name.
    pub name: Option<String>,
    /// Group.
    pub runner_group_id: Option<u64>,
    /// Labels.
    pub labels: Option<Vec<String>>,
    /// Work folder.
    pub work_folder: Option<String>,
}

const DEFAULT_LABELS: [&str; 3] = ["self-hosted", "Linux", "X64"];
const READ_ONLY_LABELS: [&str; 9] = [
    "self-hosted",
    "linux",
    "windows",
    "macos",
    "x64",
    "arm",
    "arm64",
    "x86",
    "X64",
];
/// Runner version ghsim's runners report.
pub const RUNNER_VERSION: &str = "2.336.0";

/// The whole simulated GitHub.
#[derive(Debug)]
pub struct World {
    /// Settings.
    pub config: WorldConfig,
    rng: fastrand::Rng,
    next_id: u64,
    /// Enterprises by slug.
    pub enterprises: BTreeMap<String, Enterprise>,
    /// Organizations by login.
    pub orgs: BTreeMap<String, Org>,
    /// Repositories by id.
    pub repos: BTreeMap<u64, Repo>,
    /// Runner groups.
    pub groups: Vec<Group>,
    /// Runners by id.
    pub runners: BTreeMap<u64, Runner>,
    /// Runs by id.
    pub runs: BTreeMap<u64, Run>,
    /// Jobs by id (kept after completion, for accounting).
    pub jobs: BTreeMap<u64, Job>,
    labels: HashMap<String, u64>,
    runner_tokens: HashMap<String, RunnerTokenRecord>,
    pats: HashMap<String, String>,
    /// Apps by id.
    pub apps: BTreeMap<u64, App>,
    /// Installations by id.
    pub installations: BTreeMap<u64, Installation>,
    installation_tokens: HashMap<String, InstallationTokenRecord>,
    /// Rate-limit windows per credential label.
    pub budgets: BTreeMap<String, Budget>,
    /// API calls by (`METHOD /template`, credential label).
    pub calls: BTreeMap<(String, String), CallStats>,
    /// Runners removed although they never connected.
    pub removed_never_connected: u64,
    /// The latest [`REQUEST_LOG`] REST requests.
    pub requests: std::collections::VecDeque<RecordedRequest>,
    run_numbers: HashMap<u64, u64>,
    outbox: Vec<Emitted>,
    /// Bumped whenever a job is assigned or a session ends: what long-polling runners wait for.
    pub wake_generation: u64,
}

impl World {
    /// An empty world.
    pub fn new(config: WorldConfig) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(config.seed),
            config,
            next_id: 1,
            enterprises: BTreeMap::new(),
            orgs: BTreeMap::new(),
            repos: BTreeMap::new(),
            groups: Vec::new(),
            runners: BTreeMap::new(),
            runs: BTreeMap::new(),
            jobs: BTreeMap::new(),
            labels: HashMap::new(),
            runner_tokens: HashMap::new(),
            pats: HashMap::new(),
            apps: BTreeMap::new(),
            installations: BTreeMap::new(),
            installation_tokens: HashMap::new(),
            budgets: BTreeMap::new(),
            calls: BTreeMap::new(),
            removed_never_connected: 0,
            requests: std::collections::VecDeque::new(),
            run_numbers: HashMap::new(),
            outbox: Vec::new(),
            wake_generation: 0,
        }
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A random string over `alphabet`.
    pub fn random(&mut self, alphabet: &[u8], len: usize) -> String {
        (0..len)
            .map(|_| alphabet[self.rng.usize(..alphabet.len())] as char)
            .collect()
    }

    /// A random version-4 GUID (webhook delivery ids).
    pub fn guid(&mut self) -> String {
        let hex = self.random(b"0123456789abcdef", 32);
        format!(
            "{}-{}-4{}-a{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[13..16],
            &hex[17..20],
            &hex[20..]
        )
    }

    /// Takes the webhook events produced since the last call.
    pub fn drain_events(&mut self) -> Vec<Emitted> {
        std::mem::take(&mut self.outbox)
    }

    // ---- set-up -------------------------------------------------------------------------

    /// Adds an enterprise (idempotent) with its default runner group.
    pub fn add_enterprise(&mut self, slug: &str) -> u64 {
        if let Some(e) = self.enterprises.get(slug) {
            return e.id;
        }
        let id = self.id();
        self.enterprises.insert(
            slug.to_owned(),
            Enterprise {
                id,
                slug: slug.to_owned(),
            },
        );
        self.groups.push(Group {
            id: 1,
            owner: GroupOwner::Enterprise(slug.to_owned()),
            name: "Default".into(),
            visibility: Visibility::All,
            selected: BTreeSet::new(),
            default: true,
            allows_public_repositories: true,
        });
        id
    }

    /// Adds an organization (idempotent), optionally in an enterprise, with its default group.
    pub fn add_org(&mut self, login: &str, enterprise: Option<&str>) -> u64 {
        if let Some(enterprise) = enterprise {
            self.add_enterprise(enterprise);
        }
        if let Some(org) = self.orgs.get_mut(login) {
            if enterprise.is_some() {
                org.enterprise = enterprise.map(str::to_owned);
            }
            return org.id;
        }
        let id = self.id();
        self.orgs.insert(
            login.to_owned(),
            Org {
                id,
                login: login.to_owned(),
                enterprise: enterprise.map(str::to_owned),
            },
        );
        self.groups.push(Group {
            id: 1,
            owner: GroupOwner::Org(login.to_owned()),
            name: "Default".into(),
            visibility: Visibility::All,
            selected: BTreeSet::new(),
            default: true,
            allows_public_repositories: true,
        });
        id
    }

    /// Adds a repository (idempotent). The owner is a user unless an organization of that
    /// login exists.
    pub fn add_repo(&mut self, owner: &str, name: &str, private: bool) -> u64 {
        if let Some(repo) = self.repo_by_name(owner, name) {
            return repo.id;
        }
        let id = self.id();
        self.repos.insert(
            id,
            Repo {
                id,
                owner: owner.to_owned(),
                name: name.to_owned(),
                private,
            },
        );
        id
    }

    /// Adds a personal access token with a label for accounting.
    pub fn add_pat(&mut self, token: &str, label: &str) {
        self.pats.insert(token.to_owned(), label.to_owned());
    }

    /// Adds a runner group; `selected` names repositories (`owner/repo`, org groups) or
    /// organizations (enterprise groups).
    pub fn add_group(
        &mut self,
        owner: GroupOwner,
        name: &str,
        visibility: Visibility,
        selected: &[String],
    ) -> Result<u64, SimError> {
        let selected = selected
            .iter()
            .map(|s| match &owner {
                GroupOwner::Org(_) => s
                    .split_once('/')
                    .and_then(|(o, r)| self.repo_by_name(o, r))
                    .map(|r| r.id),
                GroupOwner::Enterprise(_) => self.orgs.get(s).map(|o| o.id),
            })
            .collect::<Option<BTreeSet<u64>>>()
            .ok_or_else(|| {
                SimError::Unprocessable("unknown selected repository or organization".into())
            })?;
        match &owner {
            GroupOwner::Org(org) if !self.orgs.contains_key(org) => return Err(SimError::NotFound),
            GroupOwner::Enterprise(e) if !self.enterprises.contains_key(e) => {
                return Err(SimError::NotFound);
            }
            _ => {}
        }
        if self
            .groups
            .iter()
            .any(|g| g.owner == owner && g.name == name)
        {
            return Err(SimError::Conflict(format!(
                "runner group {name} already exists"
            )));
        }
        let id = self.id() + 1; // never 1: that is the default group
        self.groups.push(Group {
            id,
            owner,
            name: name.to_owned(),
            visibility,
            selected,
            default: false,
            allows_public_repositories: false,
        });
        Ok(id)
    }

    /// Adds an App with its public key (PEM).
    pub fn add_app(
        &mut self,
        id: Option<u64>,
        slug: &str,
        public_key_pem: &str,
    ) -> Result<&App, SimError> {
        let key = DecodingKey::from_rsa_pem(public_key_pem.as_bytes())
            .map_err(|e| SimError::Unprocessable(format!("invalid public key: {e}")))?;
        let id = id.unwrap_or_else(|| self.id());
        let client_id = format!(
            "Iv23li{}",
            self.random(b"abcdefghijklmnopqrstuvwxyz0123456789", 14)
        );
        self.apps.insert(
            id,
            App {
                id,
                client_id,
                slug: slug.to_owned(),
                key,
            },
        );
        Ok(&self.apps[&id])
    }

    /// Installs an App on an account.
    pub fn add_installation(
        &mut self,
        app_id: u64,
        account: &str,
        now: Timestamp,
    ) -> Result<u64, SimError> {
        if !self.apps.contains_key(&app_id) {
            return Err(SimError::NotFound);
        }
        let id = self.id();
        self.installations.insert(
            id,
            Installation {
                id,
                app_id,
                account: account.to_owned(),
                created_at: now,
            },
        );
        Ok(id)
    }

    // ---- lookups ------------------------------------------------------------------------

    /// A repository by owner and name.
    pub fn repo_by_name(&self, owner: &str, name: &str) -> Option<&Repo> {
        self.repos
            .values()
            .find(|r| r.owner.eq_ignore_ascii_case(owner) && r.name.eq_ignore_ascii_case(name))
    }

    /// Fails with 404 unless the scope exists.
    pub fn check_scope(&self, scope: &Scope) -> Result<(), SimError> {
        let exists = match scope {
            Scope::Repository { owner, repo } => self.repo_by_name(owner, repo).is_some(),
            Scope::Organization(org) => self.orgs.contains_key(org),
            Scope::Enterprise(slug) => self.enterprises.contains_key(slug),
        };
        exists.then_some(()).ok_or(SimError::NotFound)
    }

    /// The identity behind a bearer token (PAT or installation token), or `None`.
    pub fn identify_token(&self, token: &str, now: Timestamp) -> Result<Identity, SimError> {
        if let Some(label) = self.pats.get(token) {
            return Ok(Identity::Pat(label.clone()));
        }
        if let Some(record) = self.installation_tokens.get(token) {
            if record.expires_at <= now {
                return Err(SimError::Unauthorized("Bad credentials".into()));
            }
            let account = self
                .installations
                .get(&record.installation_id)
                .map(|i| i.account.clone())
                .unwrap_or_default();
            return Ok(Identity::Installation {
                id: record.installation_id,
                account,
            });
        }
        Err(SimError::Unauthorized("Bad credentials".into()))
    }

    /// Verifies an App JWT (RS256, `iss` = App id or client id, `exp` in the future and at
    /// most 10 minutes ahead, `iat` not in the future beyond a minute of skew).
    pub fn identify_jwt(&self, jwt: &str, now: Timestamp) -> Result<u64, SimError> {
        #[derive(Deserialize)]
        struct Claims {
            iss: Value,
            iat: i64,
            exp: i64,
        }
        let bad = |why: &str| SimError::Unauthorized(why.to_owned());
        let claims: Claims = jsonwebtoken::dangerous::insecure_decode(jwt)
            .map_err(|_| bad("A JSON web token could not be decoded"))?
            .claims;
        let iss = match &claims.iss {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return Err(bad("'Issuer' claim ('iss') must be an Integer or a String")),
        };
        let app = self
            .apps
            .values()
            .find(|a| a.id.to_string() == iss || a.client_id == iss)
            .ok_or_else(|| bad("Integration not found"))?;
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
        // Time claims are checked below against the simulator's clock, not the system's.
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        jsonwebtoken::decode::<Value>(jwt, &app.key, &validation)
            .map_err(|_| bad("A JSON web token could not be decoded"))?;
        let now_s = now.as_second();
        if claims.exp <= now_s {
            return Err(bad(
                "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires",
            ));
        }
        if claims.exp > now_s + 600 + 30 {
            return Err(bad(
                "'Expiration time' claim ('exp') is too far in the future",
            ));
        }
        if claims.iat > now_s + 60 {
            return Err(bad(
                "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued",
            ));
        }
        Ok(app.id)
    }

    /// Whether `identity` may act on `scope`: PATs everywhere, installation tokens on their
    /// own account only and never at enterprise level (GitHub Apps cannot manage enterprise
    /// runners), App JWTs nowhere.
    pub fn authorize(&self, identity: &Identity, scope: &Scope) -> Result<(), SimError> {
        match identity {
            Identity::Pat(_) => Ok(()),
            Identity::Installation { account, .. } => {
                let owner = match scope {
                    Scope::Repository { owner, .. } => owner,
                    Scope::Organization(org) => org,
                    Scope::Enterprise(_) => {
                        return Err(SimError::Forbidden(
                            "Resource not accessible by integration".into(),
                        ));
                    }
                };
                if owner.eq_ignore_ascii_case(account) {
                    Ok(())
                } else {
                    Err(SimError::Forbidden(
                        "Resource not accessible by integration".into(),
                    ))
                }
            }
            Identity::App(_) => Err(SimError::Unauthorized(
                "A JSON web token cannot be used to access this resource".into(),
            )),
        }
    }

    // ---- rate limits and accounting ------------------------------------------------------

    /// The current window of `label`, opening a new one if the old one reset.
    pub fn budget(&mut self, label: &str, now: Timestamp) -> &mut Budget {
        let limit = self.config.rate_limit;
        let budget = self
            .budgets
            .entry(label.to_owned())
            .or_insert_with(|| Budget {
                limit,
                used: 0,
                reset: add(now, Duration::from_secs(3600)),
            });
        if budget.reset <= now {
            *budget = Budget {
                limit,
                used: 0,
                reset: add(now, Duration::from_secs(3600)),
            };
        }
        budget.limit = limit;
        budget
    }

    /// Logs one request (bounded).
    pub fn record_request(&mut self, request: RecordedRequest) {
        if self.requests.len() >= REQUEST_LOG {
            self.requests.pop_front();
        }
        self.requests.push_back(request);
    }

    /// Counts one call.
    pub fn record_call(&mut self, endpoint: &str, credential: &str, status: u16, charged: bool) {
        let stats = self
            .calls
            .entry((endpoint.to_owned(), credential.to_owned()))
            .or_default();
        stats.calls += 1;
        stats.charged += u64::from(charged);
        stats.not_modified += u64::from(status == 304);
        stats.errors += u64::from(status >= 400);
    }

    // ---- tokens -------------------------------------------------------------------------

    /// Mints a registration or remove token for `scope`.
    pub fn create_runner_token(
        &mut self,
        scope: &Scope,
        kind: TokenKind,
        now: Timestamp,
    ) -> (String, Timestamp) {
        let token = self.random(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 29);
        let expires_at = add(now, self.config.runner_token_ttl);
        self.runner_tokens.insert(
            token.clone(),
            RunnerTokenRecord {
                scope: scope.clone(),
                kind,
                expires_at,
            },
        );
        (token, expires_at)
    }

    fn check_runner_token(
        &self,
        token: &str,
        kind: TokenKind,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<(), SimError> {
        match self.runner_tokens.get(token) {
            Some(r) if r.kind == kind && &r.scope == scope && r.expires_at > now => Ok(()),
            Some(r) if r.expires_at <= now => Err(SimError::Unauthorized("token expired".into())),
            _ => Err(SimError::Unauthorized("invalid token".into())),
        }
    }

    /// Mints an installation token (long, `ghs_`-prefixed; never assume 40 characters).
    pub fn create_installation_token(
        &mut self,
        installation_id: u64,
        now: Timestamp,
    ) -> Result<(String, Timestamp), SimError> {
        if !self.installations.contains_key(&installation_id) {
            return Err(SimError::NotFound);
        }
        let token = format!(
            "ghs_{}",
            self.random(
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                76
            )
        );
        let expires_at = add(now, self.config.installation_token_ttl);
        self.installation_tokens.insert(
            token.clone(),
            InstallationTokenRecord {
                installation_id,
                expires_at,
            },
        );
        Ok((token, expires_at))
    }

    // ---- runners ------------------------------------------------------------------------

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

    fn go_offline(&mut self, id: u64, now: Timestamp) {
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

    fn remove_runner(&mut self, id: u64, now: Timestamp) {
        self.go_offline(id, now);
        if let Some(runner) = self.runners.remove(&id)
            && !runner.ever_online
        {
            self.removed_never_connected += 1;
        }
    }

    fn requeue(&mut self, job_id: u64) {
        if let Some(job) = self.jobs.get_mut(&job_id)
            && job.status == JobStatus::Queued
        {
            job.runner_id = None;
            job.assigned_at = None;
            job.requeues += 1;
        }
    }

    // ---- jobs ---------------------------------------------------------------------------

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

    fn finish_job(&mut self, job_id: u64, conclusion: &str, interrupted: bool, now: Timestamp) {
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

    fn touch_run(&mut self, job_id: u64, now: Timestamp) {
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

    fn emit_job(&mut self, action: &str, job_id: u64) {
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

    // ---- routing and time ---------------------------------------------------------------

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

#[cfg(test)]
#[path = "world_tests.rs"]
mod tests;

/// How a runner group is named in a request.
#[derive(Clone, Copy, Debug)]
enum GroupRef<'a> {
    Id(u64),
    Name(&'a str),
}
