//! The webhook sender: hooks, signed deliveries, faults, the delivery log and redelivery.
//!
//! Like GitHub (github-api.md §3): each delivery is a `POST` with `X-GitHub-Event`,
//! `X-GitHub-Delivery` (a GUID, reused on redelivery), `X-GitHub-Hook-ID`, `User-Agent:
//! GitHub-Hookshot/…` and, when the hook has a secret, `X-Hub-Signature-256` over the body as
//! sent (JSON, or the url-encoded `payload=` form). A non-2xx answer or no answer within the
//! timeout (10 s) is a failed delivery; failed deliveries are **not** retried automatically,
//! only redelivered on request. Deliveries go out one at a time in event order unless faults
//! drop, duplicate, delay or reorder them, or redeliver them later (the `webhook_redelivery_*`
//! faults: what a user's or a script's "redeliver" does, same GUID).

use std::sync::Arc;
use std::time::Duration;

use hangar_github::Secret;
use hangar_github::webhook::sign;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::render::ts;
use crate::sim::Sim;

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
}

impl Hook {
    fn wants(&self, event: &str, owner: Option<&str>) -> bool {
        let event_ok = self.events.is_empty() || self.events.iter().any(|e| e == "*" || e == event);
        let owner_ok = match (&self.owner, owner) {
            (None, _) => true,
            (Some(want), Some(have)) => want.eq_ignore_ascii_case(have),
            (Some(_), None) => event == "ping",
        };
        event_ok && owner_ok
    }
}

/// One attempt to deliver.
#[derive(Clone, Debug, Serialize)]
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
#[derive(Clone, Debug, Serialize)]
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

    pub(crate) fn matching(&self, event: &str, owner: Option<&str>) -> Vec<Hook> {
        self.hooks
            .iter()
            .filter(|h| h.wants(event, owner))
            .cloned()
            .collect()
    }

    fn record_mut(&mut self, guid: &str) -> Option<&mut DeliveryRecord> {
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

/// Sends deliveries until the channel closes.
pub(crate) async fn run_worker(
    sim: Sim,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    timeout: Duration,
) {
    let http = match hangar_github::client::http_builder().and_then(|b| {
        b.timeout(timeout)
            .build()
            .map_err(|e| hangar_github::GitHubError::Build {
                source: Box::new(e),
            })
    }) {
        Ok(http) => http,
        Err(e) => {
            tracing::error!(error = %e, "webhook sender cannot start");
            return;
        }
    };
    let mut held: Option<Outgoing> = None;
    loop {
        let next = if held.is_some() {
            // A held-back delivery waits at most a second for a successor to overtake it.
            match tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    if let Some(out) = held.take() {
                        send(&sim, &http, out, false).await;
                    }
                    continue;
                }
            }
        } else {
            rx.recv().await
        };
        let Some(out) = next else {
            if let Some(out) = held.take() {
                send(&sim, &http, out, false).await;
            }
            return;
        };
        if out.redelivery {
            send(&sim, &http, out, false).await;
            continue;
        }
        let faults = sim.faults();
        if sim.roll(faults.webhook_drop_rate) {
            sim.hooks_mut(|t| {
                if let Some(r) = t.record_mut(&out.guid) {
                    r.dropped = true;
                }
            });
            tracing::debug!(guid = %out.guid, "dropping delivery (fault)");
            continue;
        }
        if sim.roll(faults.webhook_redelivery_rate) {
            // Sent again later, as GitHub's "redeliver" does: same GUID, a redelivery attempt.
            let delay = sim.random_below(faults.webhook_redelivery_max_delay_ms + 1);
            let (sim2, http2) = (sim.clone(), http.clone());
            let again = Outgoing {
                redelivery: true,
                ..out.clone()
            };
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                send(&sim2, &http2, again, false).await;
            });
        }
        let duplicate = sim.roll(faults.webhook_duplicate_rate);
        let delay = if faults.webhook_max_delay_ms > 0 {
            Duration::from_millis(sim.random_below(faults.webhook_max_delay_ms + 1))
        } else {
            Duration::ZERO
        };
        if held.is_none() && sim.roll(faults.webhook_reorder_rate) {
            held = Some(out);
            continue;
        }
        if delay.is_zero() {
            send(&sim, &http, out.clone(), false).await;
            if duplicate {
                send(&sim, &http, out, true).await;
            }
        } else {
            let (sim2, http2) = (sim.clone(), http.clone());
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                send(&sim2, &http2, out.clone(), false).await;
                if duplicate {
                    send(&sim2, &http2, out, true).await;
                }
            });
        }
        if let Some(previous) = held.take() {
            send(&sim, &http, previous, false).await;
        }
    }
}

async fn send(sim: &Sim, http: &reqwest::Client, out: Outgoing, duplicate: bool) {
    let content_type = match out.hook.content_type {
        ContentType::Json => "application/json",
        ContentType::Form => "application/x-www-form-urlencoded",
    };
    let mut request = http
        .post(&out.hook.url)
        .header("content-type", content_type)
        .header("user-agent", "GitHub-Hookshot/ghsim")
        .header("x-github-event", &out.event)
        .header("x-github-delivery", &out.guid)
        .header("x-github-hook-id", out.hook.id.to_string())
        .header(
            "x-github-hook-installation-target-type",
            if out.hook.owner.is_some() {
                "organization"
            } else {
                "integration"
            },
        )
        .body(out.body.as_ref().clone());
    if let Some(secret) = &out.hook.secret {
        request = request.header(
            "x-hub-signature-256",
            sign(secret.expose().as_bytes(), &out.body),
        );
    }
    let at = ts(sim.now());
    let result = request.send().await;
    let (status, error) = match result {
        Ok(response) => (Some(response.status().as_u16()), None),
        Err(e) => (None, Some(e.to_string())),
    };
    tracing::debug!(guid = %out.guid, event = %out.event, ?status, "webhook delivery");
    sim.hooks_mut(|t| {
        if let Some(r) = t.record_mut(&out.guid) {
            r.attempts.push(Attempt {
                at,
                status,
                error,
                redelivery: out.redelivery,
                duplicate,
            });
        }
    });
}

/// Request to create a hook.
#[derive(Clone, Debug, Deserialize)]
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
        }
    }
}
