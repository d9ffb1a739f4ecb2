//! Webhook data: hooks, the delivery log, and deliveries as encoded for sending
//! ([`crate::delivery`] sends them).
//!
//! Like GitHub (github-api.md §3): each delivery is a `POST` with `X-GitHub-Event`,
//! `X-GitHub-Delivery` (a GUID, reused on redelivery), `X-GitHub-Hook-ID`, `User-Agent:
//! GitHub-Hookshot/…` and, when the hook has a secret, `X-Hub-Signature-256` over the body as
//! sent (JSON, or the url-encoded `payload=` form). A non-2xx answer or no answer within the
//! timeout (10 s) is a failed delivery; failed deliveries are **not** retried automatically,
//! only redelivered on request. Deliveries start in event order, by default one at a time
//! (`SimConfig::webhook_concurrency` lets several be on their way, as GitHub's are, so they may
//! arrive out of order), unless faults drop, duplicate, delay or reorder them, or redeliver
//! them later (the `webhook_redelivery_*` faults: what a user's or a script's "redeliver"
//! does, same GUID).

use std::sync::Arc;

use hangar_github::Secret;
use serde::{Deserialize, Serialize};

/// How a hook wants its payloads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContentType {
    /// `application/json`.
    #[default]
    Json,
    /// `application/x-www-form-urlencoded` with the JSON in `payload`.
    Form,
}

/// A webhook subscription.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Hook {
    /// Hook id (assigned by ghsim).
    #[serde(default)]
    pub id: u64,
    /// Where deliveries go.
    pub url: String,
    /// Signing secret.
    #[serde(default, skip_serializing)]
    pub secret: Option<Secret>,
    /// Payload encoding.
    #[serde(default)]
    pub content_type: ContentType,
    /// Subscribed events; empty or `*` means all.
    #[serde(default)]
    pub events: Vec<String>,
    /// Only events of repositories of this owner (organization hook); `None` for all.
    #[serde(default)]
    pub owner: Option<String>,
    /// Only events of this repository, `owner/name` (a repository hook, made through the REST
    /// API); `None` for every repository `owner` allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// An inactive hook gets no deliveries.
    #[serde(default = "active")]
    pub active: bool,
    /// When it was made (RFC 3339), for the REST API's `created_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

fn active() -> bool {
    true
}

impl Hook {
    fn wants(&self, event: &str, owner: Option<&str>, repository: Option<&str>) -> bool {
        let event_ok = self.events.is_empty() || self.events.iter().any(|e| e == "*" || e == event);
        let owner_ok = match (&self.owner, owner) {
            (None, _) => true,
            (Some(want), Some(have)) => want.eq_ignore_ascii_case(have),
            (Some(_), None) => event == "ping",
        };
        let repository_ok = match (&self.repository, repository) {
            (None, _) => true,
            (Some(want), Some(have)) => want.eq_ignore_ascii_case(have),
            (Some(_), None) => event == "ping",
        };
        self.active && event_ok && owner_ok && repository_ok
    }
}

/// One attempt to deliver.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Attempt {
    /// When it was sent.
    pub at: String,
    /// Response status, if any.
    pub status: Option<u16>,
    /// Transport error, if any.
    pub error: Option<String>,
    /// Sent by a redelivery request.
    pub redelivery: bool,
    /// Sent as an injected duplicate.
    pub duplicate: bool,
}

/// A delivery and its attempts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeliveryRecord {
    /// `X-GitHub-Delivery`.
    pub guid: String,
    /// Hook id.
    pub hook_id: u64,
    /// Event name.
    pub event: String,
    /// Payload `action`, if any.
    pub action: Option<String>,
    /// Dropped by fault injection (never sent).
    pub dropped: bool,
    /// Attempts, in order.
    pub attempts: Vec<Attempt>,
    #[serde(skip)]
    pub(crate) body: Arc<Vec<u8>>,
}

impl DeliveryRecord {
    /// Whether the latest attempt got a 2xx.
    pub fn delivered(&self) -> bool {
        self.attempts
            .last()
            .and_then(|a| a.status)
            .is_some_and(|s| (200..300).contains(&s))
    }
}

/// Hooks and the delivery log.
#[derive(Debug, Default)]
pub struct HookTable {
    pub(crate) hooks: Vec<Hook>,
    pub(crate) deliveries: Vec<DeliveryRecord>,
    next_id: u64,
}

impl HookTable {
    pub(crate) fn add(&mut self, mut hook: Hook) -> Hook {
        self.next_id += 1;
        hook.id = 100_000 + self.next_id;
        self.hooks.push(hook.clone());
        hook
    }

    pub(crate) fn matching(
        &self,
        event: &str,
        owner: Option<&str>,
        repository: Option<&str>,
    ) -> Vec<Hook> {
        self.hooks
            .iter()
            .filter(|h| h.wants(event, owner, repository))
            .cloned()
            .collect()
    }

    /// Deletes hook `id`; whether it existed. Its past deliveries stay in the log.
    pub(crate) fn remove(&mut self, id: u64) -> bool {
        let before = self.hooks.len();
        self.hooks.retain(|h| h.id != id);
        self.hooks.len() != before
    }

    pub(crate) fn record_mut(&mut self, guid: &str) -> Option<&mut DeliveryRecord> {
        self.deliveries.iter_mut().rev().find(|d| d.guid == guid)
    }
}

/// A delivery on its way to the worker.
#[derive(Clone, Debug)]
pub(crate) struct Outgoing {
    pub guid: String,
    pub hook: Hook,
    pub event: String,
    pub body: Arc<Vec<u8>>,
    pub redelivery: bool,
}

/// The body as sent for a hook's content type.
pub(crate) fn encode_body(hook: &Hook, json: &[u8]) -> Vec<u8> {
    match hook.content_type {
        ContentType::Json => json.to_vec(),
        ContentType::Form => {
            let payload = String::from_utf8_lossy(json);
            serde_urlencoded::to_string([("payload", payload.as_ref())])
                .expect("form encoding of a string")
                .into_bytes()
        }
    }
}

pub(crate) fn new_record(out: &Outgoing, action: Option<String>) -> DeliveryRecord {
    DeliveryRecord {
        guid: out.guid.clone(),
        hook_id: out.hook.id,
        event: out.event.clone(),
        action,
        dropped: false,
        attempts: Vec::new(),
        body: out.body.clone(),
    }
}

/// Request to create a hook.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewHook {
    /// Target URL.
    pub url: String,
    /// Signing secret.
    #[serde(default)]
    pub secret: Option<String>,
    /// `json` or `form`.
    #[serde(default)]
    pub content_type: ContentType,
    /// Events (empty: all).
    #[serde(default)]
    pub events: Vec<String>,
    /// Owner filter.
    #[serde(default)]
    pub owner: Option<String>,
}

impl From<NewHook> for Hook {
    fn from(n: NewHook) -> Self {
        Self {
            id: 0,
            url: n.url,
            secret: n.secret.map(Secret::new),
            content_type: n.content_type,
            events: n.events,
            owner: n.owner,
            repository: None,
            active: true,
            created_at: None,
        }
    }
}
