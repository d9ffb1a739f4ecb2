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
//!
//! The entities and [`World`]'s core live here; its operations are split by concern:
//! `setup` (enterprises, organizations, repositories, groups, credentials), `lookups`,
//! `identity` (callers, rate limits, accounting, runner tokens), `runners`, `jobs`, and
//! `route` (job → runner assignment and the timers).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use hangar_github::Scope;
use jiff::Timestamp;
use jsonwebtoken::DecodingKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;

mod identity;
mod jobs;
mod lookups;
mod route;
mod runners;
mod setup;

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
    /// The lowest runner version accepted ([`MINIMUM_RUNNER_VERSION`]; `None`: any). A runner
    /// that connected with an older version is refused every message poll with 403 "Runner
    /// version vX is deprecated and cannot receive messages." and is never given a job, as
    /// GitHub does since its enforcement (actions/runner#2246, #4613): the runner process logs
    /// "Listening for Jobs", fails its poll, and retries.
    pub minimum_runner_version: Option<String>,
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
            minimum_runner_version: Some(MINIMUM_RUNNER_VERSION.into()),
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
/// The lowest runner version GitHub registers and serves since its enforcement completed
/// (2026-09-25: a floor of 2.329.0, then each release within 30 days of the next).
pub const MINIMUM_RUNNER_VERSION: &str = "2.329.0";

/// `major.minor.patch` of a runner version (`2.311.0` or `v2.311.0`); `None` when it is not
/// three numbers.
fn version_numbers(version: &str) -> Option<(u32, u32, u32)> {
    let mut parts = version.trim_start_matches('v').splitn(3, '.');
    let mut next = || parts.next()?.parse::<u32>().ok();
    Some((next()?, next()?, next()?))
}

/// Whether `version` is below `minimum`. A version that cannot be read is not judged.
pub fn below_minimum(version: &str, minimum: &str) -> bool {
    match (version_numbers(version), version_numbers(minimum)) {
        (Some(v), Some(m)) => v < m,
        _ => false,
    }
}

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
}

#[cfg(test)]
mod tests;

/// How a runner group is named in a request.
#[derive(Clone, Copy, Debug)]
enum GroupRef<'a> {
    Id(u64),
    Name(&'a str),
}
