//! Typed REST resources: runners, tokens, JIT configs, runner groups, workflow runs and jobs.
//!
//! Shapes follow GitHub's OpenAPI description (`@octokit/openapi`, schemas `runner`,
//! `authentication-token`, `runner-groups-org`, `workflow-run`, `job`). Deserialization is
//! tolerant on purpose: fields the spec marks nullable or optional are `Option`, string enums
//! have an `Unknown` fallback, and unknown fields are ignored, so a new GitHub field or status
//! word never breaks a controller.

use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::secret::Secret;

/// A runner's numeric id, unique within its GitHub installation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunnerId(pub u64);

impl fmt::Display for RunnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A self-hosted runner as GitHub reports it (schema `runner`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Runner {
    /// The runner id.
    pub id: RunnerId,
    /// The runner name, unique within its scope.
    pub name: String,
    /// Operating system reported by the runner (`linux`, `unknown` before it connects).
    #[serde(default)]
    pub os: String,
    /// Whether the runner is connected.
    pub status: RunnerStatus,
    /// Whether it is running a job right now.
    pub busy: bool,
    /// All labels, read-only (self-hosted, OS, arch) and custom.
    #[serde(default)]
    pub labels: Vec<RunnerLabel>,
    /// The runner group (organization and enterprise runners).
    #[serde(default)]
    pub runner_group_id: Option<u64>,
    /// Whether the runner takes one job and is then removed.
    #[serde(default)]
    pub ephemeral: Option<bool>,
    /// Runner version; `None` until the runner connected once.
    #[serde(default)]
    pub version: Option<String>,
}

impl Runner {
    /// Whether the runner carries `label` (label matching is case-insensitive on GitHub).
    pub fn has_label(&self, label: &str) -> bool {
        self.labels
            .iter()
            .any(|l| l.name.eq_ignore_ascii_case(label))
    }

    /// The label names, in GitHub's order.
    pub fn label_names(&self) -> Vec<&str> {
        self.labels.iter().map(|l| l.name.as_str()).collect()
    }

    /// Online and not running a job.
    pub fn is_idle(&self) -> bool {
        self.status == RunnerStatus::Online && !self.busy
    }
}

/// Runner connection status. The spec types it as a free string; GitHub sends these two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunnerStatus {
    /// Connected to GitHub.
    Online,
    /// Not connected.
    Offline,
    /// A status word this client does not know.
    #[serde(other)]
    Unknown,
}

/// A runner label (schema `runner-label`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerLabel {
    /// Label id.
    #[serde(default)]
    pub id: Option<u64>,
    /// Label name.
    pub name: String,
    /// `read-only` (applied at configuration) or `custom`.
    #[serde(default, rename = "type")]
    pub kind: Option<LabelKind>,
}

/// Whether a label was applied automatically or chosen by the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LabelKind {
    /// `self-hosted`, OS and architecture labels.
    ReadOnly,
    /// User labels.
    Custom,
    /// A kind this client does not know.
    #[serde(other)]
    Unknown,
}

/// A registration or remove token (schema `authentication-token`). Valid for one hour.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct RunnerToken {
    /// The token for `config.sh --token` / `config.sh remove --token`.
    pub token: Secret,
    /// When the token stops working (GitHub sends an offset, e.g. `-08:00`).
    pub expires_at: Timestamp,
}

/// Body of `POST …/runners/generate-jitconfig`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JitConfigRequest {
    /// The new runner's name (409 if taken in the scope).
    pub name: String,
    /// Runner group id; the default group is 1.
    pub runner_group_id: u64,
    /// Custom labels (1..=100).
    pub labels: Vec<String>,
    /// Working directory relative to the runner install dir (`_work` when `None`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_folder: Option<String>,
}

/// A just-in-time runner configuration: the runner record (already registered, offline) and
/// the blob for `run.sh --jitconfig`, which contains the runner's credentials.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct JitConfig {
    /// The registered runner.
    pub runner: Runner,
    /// The blob for `run.sh --jitconfig`.
    pub encoded_jit_config: Secret,
}

/// A runner group (schema `runner-groups-org`; enterprise groups have the same core fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerGroup {
    /// Group id (the default group is 1).
    pub id: u64,
    /// Group name.
    pub name: String,
    /// Which repositories (or organizations) may use it.
    pub visibility: RunnerGroupVisibility,
    /// Whether this is the default group.
    #[serde(default)]
    pub default: bool,
    /// Whether the group is inherited from the enterprise.
    #[serde(default)]
    pub inherited: bool,
    /// Whether public repositories may use it.
    #[serde(default)]
    pub allows_public_repositories: bool,
    /// Whether only selected workflows may use it.
    #[serde(default)]
    pub restricted_to_workflows: Option<bool>,
}

/// Runner group visibility.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunnerGroupVisibility {
    /// Every repository (organization) of the owner.
    All,
    /// Only the selected ones.
    Selected,
    /// Private repositories only.
    Private,
    /// A value this client does not know.
    #[serde(other)]
    Unknown,
}

/// A workflow run (subset of schema `workflow-run`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowRun {
    /// Run id.
    pub id: u64,
    /// Workflow name.
    #[serde(default)]
    pub name: Option<String>,
    /// Branch (nullable).
    #[serde(default)]
    pub head_branch: Option<String>,
    /// Commit.
    #[serde(default)]
    pub head_sha: String,
    /// Triggering event.
    #[serde(default)]
    pub event: Option<String>,
    /// Run status (nullable in the spec).
    #[serde(default)]
    pub status: Option<RunStatus>,
    /// Conclusion once completed.
    #[serde(default)]
    pub conclusion: Option<Conclusion>,
    /// Attempt number.
    #[serde(default)]
    pub run_attempt: Option<u32>,
    /// Workflow id.
    #[serde(default)]
    pub workflow_id: Option<u64>,
    /// Creation time.
    #[serde(default)]
    pub created_at: Option<Timestamp>,
    /// Last update.
    #[serde(default)]
    pub updated_at: Option<Timestamp>,
}

/// Status of a workflow run or a job. Also the `status` filter of "list workflow runs".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Waiting for a runner.
    Queued,
    /// Running.
    InProgress,
    /// Finished; see the conclusion.
    Completed,
    /// Waiting for an environment approval.
    Waiting,
    /// Requested (set by GitHub Actions only).
    Requested,
    /// Pending (set by GitHub Actions only).
    Pending,
    /// A status this client does not know.
    #[serde(other)]
    Unknown,
}

impl RunStatus {
    /// The wire word, as used in the `status` query filter.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
            Self::Waiting => "waiting",
            Self::Requested => "requested",
            Self::Pending => "pending",
            Self::Unknown => "unknown",
        }
    }
}

/// How a run or job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Conclusion {
    /// Succeeded.
    Success,
    /// Failed.
    Failure,
    /// Neutral.
    Neutral,
    /// Cancelled.
    Cancelled,
    /// Skipped (e.g. by an `if:`).
    Skipped,
    /// Timed out.
    TimedOut,
    /// Needs action.
    ActionRequired,
    /// Stale.
    Stale,
    /// A conclusion this client does not know.
    #[serde(other)]
    Unknown,
}

impl Conclusion {
    /// The wire word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Failure => "failure",
            Self::Neutral => "neutral",
            Self::Cancelled => "cancelled",
            Self::Skipped => "skipped",
            Self::TimedOut => "timed_out",
            Self::ActionRequired => "action_required",
            Self::Stale => "stale",
            Self::Unknown => "unknown",
        }
    }
}

/// A job of a workflow run (subset of schema `job`; the same fields as a webhook's
/// `workflow_job`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Job id.
    pub id: u64,
    /// The run it belongs to.
    pub run_id: u64,
    /// Attempt of the run.
    #[serde(default)]
    pub run_attempt: Option<u32>,
    /// Job name.
    #[serde(default)]
    pub name: String,
    /// Job status.
    pub status: RunStatus,
    /// Conclusion once completed.
    #[serde(default)]
    pub conclusion: Option<Conclusion>,
    /// The `runs-on` labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// The runner running it; `None` while queued.
    #[serde(default)]
    pub runner_id: Option<u64>,
    /// The runner's name.
    #[serde(default)]
    pub runner_name: Option<String>,
    /// The runner's group id.
    #[serde(default)]
    pub runner_group_id: Option<u64>,
    /// The runner's group name.
    #[serde(default)]
    pub runner_group_name: Option<String>,
    /// Workflow name (nullable).
    #[serde(default)]
    pub workflow_name: Option<String>,
    /// Branch (nullable).
    #[serde(default)]
    pub head_branch: Option<String>,
    /// Creation time.
    #[serde(default)]
    pub created_at: Option<Timestamp>,
    /// Start time.
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    /// Completion time.
    #[serde(default)]
    pub completed_at: Option<Timestamp>,
}

/// The primary rate-limit budget of one credential, from the `x-ratelimit-*` headers of its
/// latest response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RateLimit {
    /// Requests allowed per window.
    pub limit: u64,
    /// Requests left in the window.
    pub remaining: u64,
    /// Requests used in the window.
    pub used: u64,
    /// When the window resets.
    pub reset: Timestamp,
    /// The budget's resource (`core`, …).
    pub resource: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_from_the_spec_example() {
        let runner: Runner = serde_json::from_str(
            r#"{"id": 24, "name": "mac_runner", "os": "macos", "status": "offline", "busy": false,
                "ephemeral": false, "version": null, "brand_new_field": 1,
                "labels": [{"id": 5, "name": "self-hosted", "type": "read-only"},
                           {"id": 21, "name": "no-gpu", "type": "custom"}]}"#,
        )
        .unwrap();
        assert_eq!(runner.id, RunnerId(24));
        assert_eq!(runner.status, RunnerStatus::Offline);
        assert!(runner.has_label("SELF-HOSTED"));
        assert_eq!(runner.labels[1].kind, Some(LabelKind::Custom));
        assert_eq!(runner.version, None);
    }

    #[test]
    fn unknown_words_do_not_fail() {
        let runner: Runner = serde_json::from_str(
            r#"{"id": 1, "name": "r", "os": "linux", "status": "sleeping", "busy": false,
                "labels": [{"name": "x", "type": "magic"}]}"#,
        )
        .unwrap();
        assert_eq!(runner.status, RunnerStatus::Unknown);
        assert_eq!(runner.labels[0].kind, Some(LabelKind::Unknown));
    }

    #[test]
    fn token_expiry_keeps_its_offset() {
        let token: RunnerToken = serde_json::from_str(
            r#"{"token": "LLBF3JGZDX3P5PMEXLND6TS6FCWO6", "expires_at": "2020-01-22T12:13:35.123-08:00"}"#,
        )
        .unwrap();
        assert_eq!(token.expires_at.to_string(), "2020-01-22T20:13:35.123Z");
        assert!(!format!("{token:?}").contains("LLBF"));
    }

    #[test]
    fn job_with_nulls() {
        let job: Job = serde_json::from_str(
            r#"{"id": 1, "run_id": 2, "name": "build", "status": "queued", "conclusion": null,
                "labels": ["self-hosted", "k8s"], "runner_id": null, "runner_name": null,
                "runner_group_id": null, "runner_group_name": null, "workflow_name": null,
                "head_branch": null, "created_at": "2021-08-05T10:33:58Z", "started_at": "2021-08-05T10:33:58Z",
                "completed_at": null}"#,
        )
        .unwrap();
        assert_eq!(job.status, RunStatus::Queued);
        assert_eq!(job.runner_id, None);
    }

    #[test]
    fn jit_config_blob_is_redacted() {
        let jit: JitConfig = serde_json::from_str(
            r#"{"runner": {"id": 23, "name": "New runner", "os": "unknown", "status": "offline", "busy": false, "labels": []},
                "encoded_jit_config": "abc123"}"#,
        )
        .unwrap();
        assert!(!format!("{jit:?}").contains("abc123"));
    }
}
