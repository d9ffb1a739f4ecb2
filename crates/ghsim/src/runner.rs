//! A client for ghsim's runner protocol (see [`crate::runner_api`]), for simulated runners and
//! tests: register with a token or load a JIT config, connect, poll, complete, disconnect,
//! unregister.

use std::time::Duration;

use base64::Engine;
use hangar_github::Secret;
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use crate::world::{AssignedJob, RegisterRunner};

/// Why a runner-protocol call failed.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// No answer.
    #[error("runner protocol call {call} failed")]
    Transport {
        /// Which call.
        call: &'static str,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// An error status.
    #[error("runner protocol call {call} answered {status}: {message}")]
    Status {
        /// Which call.
        call: &'static str,
        /// HTTP status.
        status: u16,
        /// ghsim's message.
        message: String,
    },
    /// A JIT config that is not ghsim's (or actions/runner's) layout.
    #[error("invalid JIT config: {0}")]
    Jit(String),
    /// The client could not be built.
    #[error("unable to build the HTTP client")]
    Build(#[source] hangar_github::GitHubError),
}

/// A simulated runner's connection to ghsim.
#[derive(Debug)]
pub struct RunnerClient {
    http: reqwest::Client,
    base: Url,
    credential: Secret,
    /// The runner id.
    pub runner_id: u64,
    session: Option<String>,
    /// The version reported on connect (ghsim's [`crate::world::RUNNER_VERSION`] when unset).
    version: Option<String>,
}

impl RunnerClient {
    fn http() -> Result<reqwest::Client, RunnerError> {
        hangar_github::client::http_builder()
            .and_then(|b| {
                b.timeout(Duration::from_secs(60)).build().map_err(|e| {
                    hangar_github::GitHubError::Build {
                        source: Box::new(e),
                    }
                })
            })
            .map_err(RunnerError::Build)
    }

    /// `config.sh`: registers with a registration token.
    pub async fn register(base: &Url, request: &RegisterRunner) -> Result<Self, RunnerError> {
        let http = Self::http()?;
        let response = http
            .post(base.join("_ghsim/runner/register").expect("static path"))
            .json(request)
            .send()
            .await
            .map_err(|source| RunnerError::Transport {
                call: "register",
                source,
            })?;
        let body = check("register", response).await?;
        Ok(Self {
            http,
            base: base.clone(),
            credential: Secret::new(body["credential"].as_str().unwrap_or_default()),
            runner_id: body["runner"]["id"].as_u64().unwrap_or_default(),
            session: None,
            version: None,
        })
    }

    /// `run.sh --jitconfig`: reads the credential and ghsim's URL from the blob.
    pub fn from_jit_config(encoded: &str) -> Result<Self, RunnerError> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let decode = |s: &str| -> Result<Value, RunnerError> {
            let bytes = b64
                .decode(s.trim())
                .map_err(|e| RunnerError::Jit(e.to_string()))?;
            serde_json::from_slice(&bytes).map_err(|e| RunnerError::Jit(e.to_string()))
        };
        let files = decode(encoded)?;
        let file = |name: &str| {
            files[name]
                .as_str()
                .ok_or_else(|| RunnerError::Jit(format!("missing {name}")))
                .and_then(decode)
        };
        let settings = file(".runner")?;
        let credentials = file(".credentials")?;
        let base = settings["ServerUrl"]
            .as_str()
            .and_then(|u| Url::parse(u).ok())
            .ok_or_else(|| RunnerError::Jit("missing ServerUrl".into()))?;
        Ok(Self {
            http: Self::http()?,
            base,
            credential: Secret::new(credentials["Data"]["token"].as_str().unwrap_or_default()),
            runner_id: settings["AgentId"].as_u64().unwrap_or_default(),
            session: None,
            version: None,
        })
    }

    /// Reports `version` on connect, as a runner of that release does.
    pub fn with_version(mut self, version: Option<String>) -> Self {
        self.version = version;
        self
    }

    /// Goes online (opens a session).
    pub async fn connect(&mut self) -> Result<(), RunnerError> {
        let response = self
            .http
            .post(
                self.base
                    .join("_ghsim/runner/sessions")
                    .expect("static path"),
            )
            .bearer_auth(self.credential.expose())
            .json(&json!({"os": "linux", "version": self.version}))
            .send()
            .await
            .map_err(|source| RunnerError::Transport {
                call: "connect",
                source,
            })?;
        let body = check("connect", response).await?;
        self.session = body["session_id"].as_str().map(str::to_owned);
        Ok(())
    }

    /// Long-polls for a job for up to `wait` (ghsim caps it at 50 s). `None`: nothing yet.
    pub async fn next_job(&self, wait: Duration) -> Result<Option<AssignedJob>, RunnerError> {
        let session = self.session.as_deref().unwrap_or("none");
        let mut url = self
            .base
            .join(&format!("_ghsim/runner/sessions/{session}/job"))
            .expect("valid path");
        url.query_pairs_mut()
            .append_pair("wait_ms", &wait.as_millis().to_string());
        let response =
            self.http
                .get(url)
                .send()
                .await
                .map_err(|source| RunnerError::Transport {
                    call: "poll",
                    source,
                })?;
        if response.status() == reqwest::StatusCode::NO_CONTENT {
            return Ok(None);
        }
        #[derive(Deserialize)]
        struct Answer {
            job: AssignedJob,
        }
        let body = check("poll", response).await?;
        let answer: Answer = serde_json::from_value(body).map_err(|e| RunnerError::Status {
            call: "poll",
            status: 200,
            message: e.to_string(),
        })?;
        Ok(Some(answer.job))
    }

    /// Reports a job finished. Returns whether ghsim removed the runner (ephemeral).
    pub async fn complete(&self, job_id: u64, conclusion: &str) -> Result<bool, RunnerError> {
        let response = self
            .http
            .post(
                self.base
                    .join(&format!("_ghsim/runner/jobs/{job_id}/complete"))
                    .expect("valid path"),
            )
            .bearer_auth(self.credential.expose())
            .json(&json!({"conclusion": conclusion}))
            .send()
            .await
            .map_err(|source| RunnerError::Transport {
                call: "complete",
                source,
            })?;
        let body = check("complete", response).await?;
        Ok(body["runner_removed"].as_bool().unwrap_or(false))
    }

    /// Goes offline (closes the session).
    pub async fn disconnect(&mut self) -> Result<(), RunnerError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let response = self
            .http
            .delete(
                self.base
                    .join(&format!("_ghsim/runner/sessions/{session}"))
                    .expect("valid path"),
            )
            .send()
            .await
            .map_err(|source| RunnerError::Transport {
                call: "disconnect",
                source,
            })?;
        check("disconnect", response).await.map(drop)
    }

    /// `config.sh remove --token`.
    pub async fn unregister(&self, remove_token: &str) -> Result<(), RunnerError> {
        let response = self
            .http
            .post(
                self.base
                    .join("_ghsim/runner/unregister")
                    .expect("static path"),
            )
            .bearer_auth(self.credential.expose())
            .json(&json!({"token": remove_token}))
            .send()
            .await
            .map_err(|source| RunnerError::Transport {
                call: "unregister",
                source,
            })?;
        check("unregister", response).await.map(drop)
    }
}

async fn check(call: &'static str, response: reqwest::Response) -> Result<Value, RunnerError> {
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .map_err(|source| RunnerError::Transport { call, source })?;
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if status.is_success() {
        Ok(body)
    } else {
        Err(RunnerError::Status {
            call,
            status: status.as_u16(),
            message: body["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned()),
        })
    }
}
