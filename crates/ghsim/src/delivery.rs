//! The webhook sender: the background task that posts queued deliveries, signed, applying
//! the delivery faults, and records each attempt in the delivery log.
//!
//! Deliveries start in event order; at most `webhook_concurrency` are on their way at once
//! (1 by default: each waits for the answer to the one before).
//!
//! Started once per simulator by [`start`] (called by [`crate::serve`]), together with the
//! ticker that applies due timers. What a delivery looks like on the wire is described in
//! [`crate::webhooks`].

use std::sync::Arc;
use std::time::Duration;

use hangar_github::webhook::sign;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

use crate::render::ts;
use crate::sim::Sim;
use crate::webhooks::{Attempt, ContentType, Outgoing};

/// Starts the webhook sender and the timer ticker of `sim`, once: a second call (or one for a
/// clone of an already started simulator) starts nothing and returns no tasks.
pub(crate) fn start(sim: &Sim) -> Vec<JoinHandle<()>> {
    let Some(rx) = sim.take_outgoing() else {
        return Vec::new();
    };
    let sender = tokio::spawn(run_worker(
        sim.clone(),
        rx,
        sim.webhook_timeout(),
        sim.webhook_concurrency(),
    ));
    let ticker = tokio::spawn(sim.clone().run_ticker());
    vec![sender, ticker]
}

/// Sends deliveries until the channel closes.
async fn run_worker(
    sim: Sim,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    timeout: Duration,
    concurrency: usize,
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
    let sender = Sender {
        sim: sim.clone(),
        http: http.clone(),
        in_flight: Arc::new(Semaphore::new(concurrency)),
    };
    let mut held: Option<Outgoing> = None;
    loop {
        let next = if held.is_some() {
            // A held-back delivery waits at most a second for a successor to overtake it.
            match tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    if let Some(out) = held.take() {
                        sender.start(out, false).await;
                    }
                    continue;
                }
            }
        } else {
            rx.recv().await
        };
        let Some(out) = next else {
            if let Some(out) = held.take() {
                sender.start(out, false).await;
            }
            return;
        };
        if out.redelivery {
            sender.start(out, false).await;
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
            sender.start(out, duplicate).await;
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
            sender.start(previous, false).await;
        }
    }
}

/// Starts deliveries in the order they are handed over, with at most as many on their way as
/// `in_flight` has permits.
struct Sender {
    sim: Sim,
    http: reqwest::Client,
    in_flight: Arc<Semaphore>,
}

impl Sender {
    /// Waits for a free place, then sends `out` (and, when `duplicate`, once more after its
    /// answer) in the background.
    async fn start(&self, out: Outgoing, duplicate: bool) {
        let Ok(place) = self.in_flight.clone().acquire_owned().await else {
            return;
        };
        let (sim, http) = (self.sim.clone(), self.http.clone());
        tokio::spawn(async move {
            send(&sim, &http, out.clone(), false).await;
            if duplicate {
                send(&sim, &http, out, true).await;
            }
            drop(place);
        });
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
