//! Receiving GitHub webhooks: signature check, body decoding, typed payloads.
//!
//! Order matters: [`receive`] verifies `X-Hub-Signature-256` over the raw body *before* anything
//! parses it, compares in constant time (`hmac`'s `verify_slice`), then takes the JSON out of
//! the body (`application/json` as is, `application/x-www-form-urlencoded` from the `payload`
//! field — the signature covers the form bytes as sent), then parses the event named by
//! `X-GitHub-Event`. Payload structs are tolerant: optional and nullable fields are `Option`,
//! unknown fields are ignored, unknown events are [`WebhookEvent::Other`]. Deliveries can be
//! duplicated, reordered or lost; keep state by job id and treat events as hints.

use std::borrow::Cow;

use hmac::{Hmac, Mac};
use jiff::Timestamp;
use reqwest::header::HeaderMap;
use serde::Deserialize;
use sha2::Sha256;

use crate::models::{Conclusion, RunStatus};
use crate::secret::Secret;

/// `X-GitHub-Event`: the event name.
pub const EVENT_HEADER: &str = "x-github-event";
/// `X-GitHub-Delivery`: a GUID, the same on redelivery.
pub const DELIVERY_HEADER: &str = "x-github-delivery";
/// `X-GitHub-Hook-ID`: the webhook's id.
pub const HOOK_ID_HEADER: &str = "x-github-hook-id";
/// `X-Hub-Signature-256`: `sha256=` + hex HMAC-SHA256 of the body.
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";

/// The `X-Hub-Signature-256` value for `body` under `secret`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Why a signature was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No `X-Hub-Signature-256` header although a secret is configured.
    #[error("missing X-Hub-Signature-256 header")]
    Missing,
    /// The header is not `sha256=<64 hex digits>`.
    #[error("malformed X-Hub-Signature-256 header")]
    Malformed,
    /// The signature does not match any configured secret.
    #[error("X-Hub-Signature-256 does not match")]
    Mismatch,
}

/// Checks `header` against the HMAC of `body` under any of `secrets` (several during a secret
/// rotation), in constant time per secret.
pub fn verify_signature(
    secrets: &[Secret],
    body: &[u8],
    header: Option<&str>,
) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let hex_sig = header
        .trim()
        .strip_prefix("sha256=")
        .ok_or(SignatureError::Malformed)?;
    let tag = hex::decode(hex_sig).map_err(|_| SignatureError::Malformed)?;
    if tag.len() != 32 {
        return Err(SignatureError::Malformed);
    }
    let matched = secrets.iter().any(|secret| {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes()).expect("any key length");
        mac.update(body);
        mac.verify_slice(&tag).is_ok()
    });
    if matched {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// Why a delivery could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// Signature check failed (answer 401/403; do not parse the body).
    #[error("webhook signature rejected")]
    Signature(#[from] SignatureError),
    /// No `X-GitHub-Event` header.
    #[error("missing X-GitHub-Event header")]
    MissingEvent,
    /// A form delivery without a `payload` field, or an undecodable form.
    #[error("form-encoded delivery without a payload field")]
    MissingFormPayload,
    /// The payload is not the JSON this event documents.
    #[error("unable to parse the {event} payload")]
    Payload {
        /// The event name.
        event: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
}

/// The JSON document inside a delivery body: the body itself, or the `payload` field of a
/// form-encoded one.
pub fn payload_json<'a>(
    content_type: Option<&str>,
    body: &'a [u8],
) -> Result<Cow<'a, [u8]>, WebhookError> {
    let is_form = content_type
        .map(|ct| {
            ct.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
        .unwrap_or(false);
    if !is_form {
        return Ok(Cow::Borrowed(body));
    }
    let fields: Vec<(String, String)> =
        serde_urlencoded::from_bytes(body).map_err(|_| WebhookError::MissingFormPayload)?;
    fields
        .into_iter()
        .find(|(k, _)| k == "payload")
        .map(|(_, v)| Cow::Owned(v.into_bytes()))
        .ok_or(WebhookError::MissingFormPayload)
}

/// A verified, parsed delivery.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// `X-GitHub-Delivery` (same on redelivery: use it to deduplicate).
    pub id: Option<String>,
    /// `X-GitHub-Hook-ID`.
    pub hook_id: Option<String>,
    /// The parsed event.
    pub event: WebhookEvent,
}

/// Verifies and parses one delivery. With `secrets` empty the signature is **not** checked
/// (ARC accepts unsigned payloads when no secret is configured); callers decide that
/// explicitly.
pub fn receive(
    headers: &HeaderMap,
    body: &[u8],
    secrets: &[Secret],
) -> Result<Delivery, WebhookError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if !secrets.is_empty() {
        verify_signature(secrets, body, header(SIGNATURE_HEADER))?;
    }
    let event_name = header(EVENT_HEADER).ok_or(WebhookError::MissingEvent)?;
    let json = payload_json(header("content-type"), body)?;
    Ok(Delivery {
        id: header(DELIVERY_HEADER).map(str::to_owned),
        hook_id: header(HOOK_ID_HEADER).map(str::to_owned),
        event: parse_event(event_name, &json)?,
    })
}

/// Parses the payload of event `event` (the `X-GitHub-Event` value).
pub fn parse_event(event: &str, json: &[u8]) -> Result<WebhookEvent, WebhookError> {
    fn parse<T: for<'de> Deserialize<'de>>(
        event: &str,
        json: &[u8],
    ) -> Result<Box<T>, WebhookError> {
        serde_json::from_slice(json).map_err(|source| WebhookError::Payload {
            event: event.to_owned(),
            source,
        })
    }
    Ok(match event {
        "workflow_job" => WebhookEvent::WorkflowJob(parse(event, json)?),
        "check_run" => WebhookEvent::CheckRun(parse(event, json)?),
        "pull_request" => WebhookEvent::PullRequest(parse(event, json)?),
        "push" => WebhookEvent::Push(parse(event, json)?),
        "ping" => WebhookEvent::Ping(parse(event, json)?),
        other => WebhookEvent::Other {
            event: other.to_owned(),
        },
    })
}

/// A webhook event.
#[derive(Clone, Debug)]
pub enum WebhookEvent {
    /// `workflow_job`: a job was queued, started, completed or is waiting.
    WorkflowJob(Box<WorkflowJobEvent>),
    /// `check_run`.
    CheckRun(Box<CheckRunEvent>),
    /// `pull_request`.
    PullRequest(Box<PullRequestEvent>),
    /// `push`.
    Push(Box<PushEvent>),
    /// `ping`, sent when a hook is created.
    Ping(Box<PingEvent>),
    /// Any other event (not parsed).
    Other {
        /// The event name.
        event: String,
    },
}

/// A user, organization or bot (the fields Hangar uses).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Account {
    /// Login.
    pub login: String,
    /// Id.
    #[serde(default)]
    pub id: Option<u64>,
    /// `User`, `Organization`, `Bot`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

/// A repository (the fields Hangar uses).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Repository {
    /// Id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// `owner/name`.
    pub full_name: String,
    /// Owner.
    pub owner: Account,
    /// Whether private.
    #[serde(default)]
    pub private: bool,
}

/// The enterprise of an enterprise-level delivery.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Enterprise {
    /// Id.
    #[serde(default)]
    pub id: Option<u64>,
    /// Slug (as in `/enterprises/{slug}`).
    #[serde(default)]
    pub slug: Option<String>,
    /// Display name.
    #[serde(default)]
    pub name: Option<String>,
}

/// The App installation of an App delivery.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct InstallationRef {
    /// Installation id.
    pub id: u64,
}

/// `workflow_job` actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowJobAction {
    /// The job is waiting for a runner.
    Queued,
    /// The job waits for an environment approval.
    Waiting,
    /// A runner started it.
    InProgress,
    /// It finished (or was cancelled/skipped, possibly without a runner).
    Completed,
    /// An action this client does not know.
    #[serde(other)]
    Unknown,
}

/// The `workflow_job` event.
#[derive(Clone, Debug, Deserialize)]
pub struct WorkflowJobEvent {
    /// What happened.
    pub action: WorkflowJobAction,
    /// The job.
    pub workflow_job: WorkflowJob,
    /// Its repository.
    pub repository: Repository,
    /// The organization (org-level and org repo deliveries).
    #[serde(default)]
    pub organization: Option<Account>,
    /// The enterprise (enterprise deliveries).
    #[serde(default)]
    pub enterprise: Option<Enterprise>,
    /// The App installation (App deliveries).
    #[serde(default)]
    pub installation: Option<InstallationRef>,
    /// Who triggered it.
    #[serde(default)]
    pub sender: Option<Account>,
}

/// The job in a `workflow_job` event. Runner fields are `None` while queued (do not rely on
/// them then: one of GitHub's own examples sets them on a queued job).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct WorkflowJob {
    /// Job id (key state by this plus `run_attempt`).
    pub id: u64,
    /// Run id.
    pub run_id: u64,
    /// Attempt of the run.
    #[serde(default)]
    pub run_attempt: Option<u32>,
    /// Job name.
    #[serde(default)]
    pub name: String,
    /// Status (`waiting` can come with action `queued`).
    pub status: RunStatus,
    /// Conclusion once completed.
    #[serde(default)]
    pub conclusion: Option<Conclusion>,
    /// The `runs-on` labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Runner id.
    #[serde(default)]
    pub runner_id: Option<u64>,
    /// Runner name.
    #[serde(default)]
    pub runner_name: Option<String>,
    /// Runner group id.
    #[serde(default)]
    pub runner_group_id: Option<u64>,
    /// Runner group name.
    #[serde(default)]
    pub runner_group_name: Option<String>,
    /// Workflow name.
    #[serde(default)]
    pub workflow_name: Option<String>,
    /// Branch.
    #[serde(default)]
    pub head_branch: Option<String>,
    /// Commit.
    #[serde(default)]
    pub head_sha: Option<String>,
    /// Creation time.
    #[serde(default)]
    pub created_at: Option<Timestamp>,
    /// Start time.
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    /// Completion time.
    #[serde(default)]
    pub completed_at: Option<Timestamp>,
    /// Web URL.
    #[serde(default)]
    pub html_url: Option<String>,
}

/// The `check_run` event.
#[derive(Clone, Debug, Deserialize)]
pub struct CheckRunEvent {
    /// `created`, `completed`, `rerequested`, `requested_action`.
    pub action: String,
    /// The check run.
    pub check_run: CheckRun,
    /// Its repository.
    pub repository: Repository,
    /// The enterprise (enterprise deliveries).
    #[serde(default)]
    pub enterprise: Option<Enterprise>,
    /// Who triggered it.
    #[serde(default)]
    pub sender: Option<Account>,
}

/// A check run (every Actions job is also one).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct CheckRun {
    /// Id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// Commit.
    pub head_sha: String,
    /// `queued`, `in_progress`, `completed`, …
    pub status: String,
    /// Conclusion once completed.
    #[serde(default)]
    pub conclusion: Option<String>,
    /// Start time.
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    /// Completion time.
    #[serde(default)]
    pub completed_at: Option<Timestamp>,
}

/// The `pull_request` event.
#[derive(Clone, Debug, Deserialize)]
pub struct PullRequestEvent {
    /// `opened`, `synchronize`, `closed`, … (many).
    pub action: String,
    /// Pull request number.
    pub number: u64,
    /// The pull request.
    pub pull_request: PullRequest,
    /// Its repository.
    pub repository: Repository,
    /// The enterprise (enterprise deliveries).
    #[serde(default)]
    pub enterprise: Option<Enterprise>,
    /// Who triggered it.
    #[serde(default)]
    pub sender: Option<Account>,
}

/// A pull request (the fields Hangar uses).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct PullRequest {
    /// Id.
    pub id: u64,
    /// Number.
    pub number: u64,
    /// `open` or `closed`.
    pub state: String,
    /// Title.
    #[serde(default)]
    pub title: String,
    /// Draft.
    #[serde(default)]
    pub draft: Option<bool>,
    /// Merged.
    #[serde(default)]
    pub merged: Option<bool>,
    /// Head branch.
    pub head: GitRef,
    /// Base branch.
    pub base: GitRef,
}

/// A branch tip of a pull request.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct GitRef {
    /// Branch name.
    #[serde(rename = "ref")]
    pub name: String,
    /// Commit.
    pub sha: String,
}

/// The `push` event.
#[derive(Clone, Debug, Deserialize)]
pub struct PushEvent {
    /// Full ref, `refs/heads/main`.
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// Commit before.
    pub before: String,
    /// Commit after.
    pub after: String,
    /// Whether the ref was created.
    #[serde(default)]
    pub created: bool,
    /// Whether it was deleted.
    #[serde(default)]
    pub deleted: bool,
    /// Whether it was force-pushed.
    #[serde(default)]
    pub forced: bool,
    /// Head commit (null on deletion).
    #[serde(default)]
    pub head_commit: Option<Commit>,
    /// Pushed commits.
    #[serde(default)]
    pub commits: Vec<Commit>,
    /// Repository.
    pub repository: Repository,
    /// The enterprise (enterprise deliveries).
    #[serde(default)]
    pub enterprise: Option<Enterprise>,
    /// Who triggered it.
    #[serde(default)]
    pub sender: Option<Account>,
}

/// A pushed commit.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Commit {
    /// SHA.
    pub id: String,
    /// Message.
    #[serde(default)]
    pub message: String,
}

/// The `ping` event.
#[derive(Clone, Debug, Deserialize)]
pub struct PingEvent {
    /// A random GitHub zen.
    #[serde(default)]
    pub zen: Option<String>,
    /// The new hook's id.
    #[serde(default)]
    pub hook_id: Option<u64>,
    /// The hook.
    #[serde(default)]
    pub hook: Option<Hook>,
    /// Repository (repository hooks).
    #[serde(default)]
    pub repository: Option<Repository>,
    /// Organization (organization hooks).
    #[serde(default)]
    pub organization: Option<Account>,
    /// Who created the hook.
    #[serde(default)]
    pub sender: Option<Account>,
}

/// The hook in a `ping`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Hook {
    /// Id.
    pub id: u64,
    /// `Repository`, `Organization`, `App`, …
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Subscribed events.
    #[serde(default)]
    pub events: Vec<String>,
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    #[test]
    fn githubs_test_vector() {
        assert_eq!(
            sign(b"It's a Secret to Everybody", b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
        let secret = [Secret::new("It's a Secret to Everybody")];
        assert_eq!(
            verify_signature(
                &secret,
                b"Hello, World!",
                Some("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
            ),
            Ok(())
        );
    }

    #[test]
    fn rejections() {
        let secret = [Secret::new("s")];
        let good = sign(b"s", b"body");
        assert_eq!(
            verify_signature(&secret, b"body", None),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify_signature(&secret, b"body", Some("sha1=abc")),
            Err(SignatureError::Malformed)
        );
        assert_eq!(
            verify_signature(&secret, b"body", Some("sha256=zz")),
            Err(SignatureError::Malformed)
        );
        assert_eq!(
            verify_signature(&secret, b"body", Some("sha256=abcd")),
            Err(SignatureError::Malformed)
        );
        assert_eq!(
            verify_signature(&secret, b"body!", Some(&good)),
            Err(SignatureError::Mismatch)
        );
        // Rotation: any configured secret may match.
        let rotated = [Secret::new("new"), Secret::new("s")];
        assert_eq!(verify_signature(&rotated, b"body", Some(&good)), Ok(()));
    }

    #[test]
    fn form_deliveries_carry_json_in_payload() {
        let body = b"payload=%7B%22zen%22%3A%22Keep+it+simple%22%7D";
        let json = payload_json(Some("application/x-www-form-urlencoded"), body).unwrap();
        assert_eq!(&*json, br#"{"zen":"Keep it simple"}"#);
        assert!(matches!(
            payload_json(Some("application/x-www-form-urlencoded"), b"other=1"),
            Err(WebhookError::MissingFormPayload)
        ));
        assert_eq!(
            &*payload_json(Some("application/json"), b"{}").unwrap(),
            b"{}"
        );
    }

    #[test]
    fn receive_checks_the_signature_over_the_form_bytes() {
        let body = b"payload=%7B%22zen%22%3A%22z%22%2C%22hook_id%22%3A1%7D";
        let mut headers = HeaderMap::new();
        headers.insert(EVENT_HEADER, HeaderValue::from_static("ping"));
        headers.insert(DELIVERY_HEADER, HeaderValue::from_static("d-1"));
        headers.insert(
            "content-type",
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        let secret = [Secret::new("s")];
        assert!(matches!(
            receive(&headers, body, &secret),
            Err(WebhookError::Signature(SignatureError::Missing))
        ));
        headers.insert(
            SIGNATURE_HEADER,
            HeaderValue::from_str(&sign(b"s", body)).unwrap(),
        );
        let delivery = receive(&headers, body, &secret).unwrap();
        assert_eq!(delivery.id.as_deref(), Some("d-1"));
        let WebhookEvent::Ping(ping) = delivery.event else {
            panic!("not a ping")
        };
        assert_eq!(ping.hook_id, Some(1));
    }

    #[test]
    fn unknown_events_are_not_parsed() {
        assert!(matches!(
            parse_event("star", b"not even json"),
            Ok(WebhookEvent::Other { event }) if event == "star"
        ));
    }
}
