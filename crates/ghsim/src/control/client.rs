//! [`Client`]: the control API of a running ghsim, typed, for tests, the demo and the `ghsim
//! submit` command.
//!
//! Built on the GitHub client's HTTP builder (`hangar_github::client::http_builder`: the same
//! TLS set-up, no second HTTP stack). Every call answers with ghsim's own records, and every
//! failure names the call: [`ControlError`].

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;

use super::{NewToken, Submitted, WorldState};
use crate::accounting::Accounting;
use crate::faults::Faults;
use crate::webhooks::{DeliveryRecord, Hook, NewHook};
use crate::world::SubmitJobs;

/// How long one control call may take: ghsim answers on loopback, without waiting for
/// anything.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a control call failed; each names the call (`METHOD /_ghsim/…`).
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The HTTP client could not be built.
    #[error("unable to build the HTTP client for ghsim's control API")]
    Build(#[source] hangar_github::GitHubError),
    /// No answer (connection refused, timeout, reset).
    #[error("no answer from ghsim to {call}")]
    Transport {
        /// `METHOD /path`.
        call: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// An answer other than 2xx.
    #[error("ghsim answered {call} with {status}: {body}")]
    Status {
        /// `METHOD /path`.
        call: String,
        /// HTTP status.
        status: u16,
        /// The answer's body (ghsim's error message).
        body: String,
    },
    /// A 2xx answer that is not the expected record.
    #[error("unexpected answer from ghsim to {call}")]
    Decode {
        /// `METHOD /path`.
        call: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// A client of one ghsim's control API (`{base}_ghsim/…`). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
}

impl Client {
    /// A client of the ghsim at `base` (its public URL, e.g. `http://127.0.0.1:8080/`).
    pub fn new(base: Url) -> Result<Self, ControlError> {
        let http = hangar_github::client::http_builder()
            .and_then(|b| {
                b.timeout(TIMEOUT)
                    .build()
                    .map_err(|e| hangar_github::GitHubError::Build {
                        source: Box::new(e),
                    })
            })
            .map_err(ControlError::Build)?;
        Ok(Self { http, base })
    }

    /// The ghsim this client talks to.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// `GET /_ghsim/state`: the world.
    pub async fn state(&self) -> Result<WorldState, ControlError> {
        self.call(reqwest::Method::GET, "state", None::<&()>).await
    }

    /// `GET /_ghsim/accounting`: calls, jobs, runners and webhooks so far.
    pub async fn accounting(&self) -> Result<Accounting, ControlError> {
        self.call(reqwest::Method::GET, "accounting", None::<&()>)
            .await
    }

    /// `GET /_ghsim/deliveries`: every webhook delivery and its attempts.
    pub async fn deliveries(&self) -> Result<Vec<DeliveryRecord>, ControlError> {
        self.call(reqwest::Method::GET, "deliveries", None::<&()>)
            .await
    }

    /// `GET /_ghsim/faults`: the faults in force.
    pub async fn faults(&self) -> Result<Faults, ControlError> {
        self.call(reqwest::Method::GET, "faults", None::<&()>).await
    }

    /// `PUT /_ghsim/faults`: merges the given fields into the faults in force; the result.
    pub async fn set_faults(&self, patch: &serde_json::Value) -> Result<Faults, ControlError> {
        self.call(reqwest::Method::PUT, "faults", Some(patch)).await
    }

    /// `POST /_ghsim/tokens`: accept a personal access token, its calls accounted under
    /// `pat:{label}`.
    pub async fn add_token(&self, token: &str, label: &str) -> Result<(), ControlError> {
        let body = NewToken {
            token: token.to_owned(),
            label: Some(label.to_owned()),
        };
        self.send(reqwest::Method::POST, "tokens", Some(&body))
            .await
            .map(drop)
    }

    /// `POST /_ghsim/hooks`: subscribe a webhook (ghsim sends it a `ping`).
    pub async fn add_hook(&self, hook: &NewHook) -> Result<Hook, ControlError> {
        self.call(reqwest::Method::POST, "hooks", Some(hook)).await
    }

    /// `POST /_ghsim/jobs`: queue a run of jobs.
    pub async fn submit_jobs(&self, jobs: &SubmitJobs) -> Result<Submitted, ControlError> {
        self.call(reqwest::Method::POST, "jobs", Some(jobs)).await
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, ControlError> {
        let call = format!("{method} /_ghsim/{path}");
        let text = self.send(method, path, body).await?;
        serde_json::from_str(&text).map_err(|source| ControlError::Decode { call, source })
    }

    /// Sends one call; the body of a 2xx answer.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<String, ControlError> {
        let call = format!("{method} /_ghsim/{path}");
        let url = self
            .base
            .join(&format!("_ghsim/{path}"))
            .expect("control paths are relative URLs");
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let transport = |source| ControlError::Transport {
            call: call.clone(),
            source,
        };
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        let text = response.text().await.map_err(transport)?;
        if !status.is_success() {
            return Err(ControlError::Status {
                call,
                status: status.as_u16(),
                body: text,
            });
        }
        Ok(text)
    }
}
