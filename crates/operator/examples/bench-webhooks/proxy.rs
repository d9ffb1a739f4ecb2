//! The recording proxy of the webhook benchmark: ghsim's `workflow_job` hook points here, and
//! every delivery is forwarded to hangar's webhook server unchanged (signature included) while
//! its arrival on the real-time clock, its answer's latency on the monotonic clock and hangar's
//! status are noted, because ghsim's delivery log keeps whole seconds only.
//!
//! Contract: a delivery is recorded whether or not hangar answered (`status: None`, and ghsim
//! sees 502); the log only grows, in arrival order.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use jiff::Timestamp;
use serde_json::Value;
use tokio::task::JoinHandle;

/// One delivery as the proxy saw it.
#[derive(Clone, Debug)]
pub struct Proxied {
    pub event: String,
    pub action: Option<String>,
    /// `workflow_job.id`.
    pub job_id: Option<u64>,
    /// When the request (body included) had arrived from ghsim.
    pub arrived: Timestamp,
    /// From forwarding the request to the end of hangar's answer.
    pub answer: Duration,
    /// Hangar's status; `None` if it did not answer.
    pub status: Option<u16>,
}

/// A recording reverse proxy between ghsim's webhook sender and hangar's webhook server.
/// Deliveries pass unchanged (headers but hop-by-hop ones, body, so the signature holds);
/// each request is forwarded as it arrives, so this adds one loopback hop and nothing else.
#[derive(Debug)]
pub struct Proxy {
    url: String,
    log: Arc<Mutex<Vec<Proxied>>>,
    task: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// Listens on a free loopback port and forwards every request to `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let http = hangar_github::client::http_builder()?.build()?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let upstream = format!("http://{upstream}/");
        let record = log.clone();
        let app = axum::Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
            let (http, record, upstream) = (http.clone(), record.clone(), upstream.clone());
            async move {
                let arrived = Timestamp::now();
                let hop_by_hop = [
                    header::HOST,
                    header::CONTENT_LENGTH,
                    header::CONNECTION,
                    header::TRANSFER_ENCODING,
                ];
                let mut forward = HeaderMap::new();
                for (name, value) in &headers {
                    if !hop_by_hop.contains(name) {
                        forward.append(name.clone(), value.clone());
                    }
                }
                let payload: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let started = Instant::now();
                let answer = match http
                    .post(upstream.as_str())
                    .headers(forward)
                    .body(body)
                    .send()
                    .await
                {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        response.bytes().await.ok().map(|body| (status, body))
                    }
                    Err(_) => None,
                };
                let took = started.elapsed();
                let event = headers
                    .get("x-github-event")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                record.lock().expect("proxy log").push(Proxied {
                    event,
                    action: payload["action"].as_str().map(str::to_owned),
                    job_id: payload["workflow_job"]["id"].as_u64(),
                    arrived,
                    answer: took,
                    status: answer.as_ref().map(|(status, _)| *status),
                });
                match answer {
                    Some((status, body)) => (
                        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                        body,
                    ),
                    None => (StatusCode::BAD_GATEWAY, Bytes::new()),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/", listener.local_addr()?);
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("proxy stopped: {e}");
            }
        });
        Ok(Self { url, log, task })
    }

    /// The URL to point a webhook at.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every delivery so far, in arrival order.
    pub fn deliveries(&self) -> Vec<Proxied> {
        self.log.lock().expect("proxy log").clone()
    }
}
