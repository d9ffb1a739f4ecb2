//! The runner protocol: how simulated runners talk to ghsim, under `/_ghsim/runner/`.
//!
//! It mirrors what actions/runner does against GitHub, reduced to plain JSON over HTTP:
//!
//! | step | call | like |
//! |---|---|---|
//! | register | `POST /_ghsim/runner/register` `{url, token, name, labels, ephemeral, runner_group, replace, no_default_labels}` → 201 `{runner, credential}` | `config.sh --url --token` |
//! | or JIT | decode `encoded_jit_config` (base64 JSON of base64 files; `.credentials` holds `Data.token`) — no call | `run.sh --jitconfig` |
//! | connect | `POST /_ghsim/runner/sessions` (`Authorization: Bearer <credential>`) `{os?, version?}` → 201 `{session_id, runner_id}`; 409 if connected elsewhere | listener session |
//! | poll | `GET /_ghsim/runner/sessions/{session_id}/job?wait_ms=50000` → 200 `{job}` (the job is now in progress) or 204; 404 when the session is gone; 403 when the runner's version is below the minimum | 50 s long poll |
//! | finish | `POST /_ghsim/runner/jobs/{job_id}/complete` (Bearer) `{conclusion}` → 200 `{runner_removed}` | job completion |
//! | disconnect | `DELETE /_ghsim/runner/sessions/{session_id}` → 204 (offline) | listener exit |
//! | unregister | `POST /_ghsim/runner/unregister` (Bearer) `{token: <remove token>}` → 204; 422 while busy | `config.sh remove --token` |
//!
//! A runner that stops polling goes offline after `offline_after` (90 s); if it was running a
//! job, the job fails and counts as interrupted. Ephemeral (and JIT) runners are removed after
//! completing one job.

use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::http::ApiError;
use crate::sim::Sim;
use crate::world::RegisterRunner;

/// The longest a poll may wait (the runner's own long poll is 50 s).
pub const MAX_POLL_WAIT: Duration = Duration::from_secs(50);

/// The runner protocol router (mounted at `/_ghsim/runner`).
pub fn router(sim: Sim) -> Router {
    Router::new()
        .route("/register", post(register))
        .route("/sessions", post(open_session))
        .route("/sessions/{session_id}", delete(close_session))
        .route("/sessions/{session_id}/job", get(poll))
        .route("/jobs/{job_id}/complete", post(complete))
        .route("/unregister", post(unregister))
        .with_state(sim)
}

fn credential(headers: &HeaderMap) -> Result<String, ApiError> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|s| s.trim().to_owned())
        .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "runner credential required"))
}

async fn register(
    State(sim): State<Sim>,
    Json(request): Json<RegisterRunner>,
) -> Result<Response, ApiError> {
    let (id, credential) = sim.update(|w, now| w.register_runner(request, now))?;
    let runner = sim.read(|w, _| crate::render::runner(&w.runners[&id]));
    Ok((
        StatusCode::CREATED,
        Json(json!({"runner": runner, "credential": credential})),
    )
        .into_response())
}

#[derive(Debug, Default, Deserialize)]
struct SessionRequest {
    os: Option<String>,
    version: Option<String>,
}

async fn open_session(
    State(sim): State<Sim>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let credential = credential(&headers)?;
    let request: SessionRequest = if body.is_empty() {
        SessionRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))?
    };
    let (runner_id, session_id) =
        sim.update(|w, now| w.open_session(&credential, request.os, request.version, now))?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"session_id": session_id, "runner_id": runner_id})),
    )
        .into_response())
}

async fn close_session(
    State(sim): State<Sim>,
    Path(session_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    sim.update(|w, now| w.close_session(&session_id, now))?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
struct PollQuery {
    wait_ms: Option<u64>,
}

async fn poll(
    State(sim): State<Sim>,
    Path(session_id): Path<String>,
    Query(q): Query<PollQuery>,
) -> Result<Response, ApiError> {
    let wait = Duration::from_millis(q.wait_ms.unwrap_or(0)).min(MAX_POLL_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    // A runner waiting in a poll is connected, so online: look again well within
    // `offline_after` (which renews the session) even if nothing changes.
    let keepalive = sim
        .read(|w, _| w.config.offline_after / 3)
        .max(Duration::from_millis(100));
    loop {
        // Register interest before looking, so a change between the look and the wait wakes us.
        let notified = sim.changed().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(job) = sim.update(|w, now| w.poll(&session_id, now))? {
            return Ok((StatusCode::OK, Json(json!({"job": job}))).into_response());
        }
        let look_again = deadline.min(tokio::time::Instant::now() + keepalive);
        if tokio::time::timeout_at(look_again, notified).await.is_err()
            && tokio::time::Instant::now() >= deadline
        {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
    }
}

#[derive(Debug, Deserialize)]
struct CompleteRequest {
    #[serde(default = "success")]
    conclusion: String,
}

fn success() -> String {
    "success".into()
}

async fn complete(
    State(sim): State<Sim>,
    headers: HeaderMap,
    Path(job_id): Path<u64>,
    Json(request): Json<CompleteRequest>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let credential = credential(&headers)?;
    let removed =
        sim.update(|w, now| w.complete_job(&credential, job_id, &request.conclusion, now))?;
    Ok(Json(json!({"runner_removed": removed})))
}

#[derive(Debug, Deserialize)]
struct UnregisterRequest {
    token: String,
}

async fn unregister(
    State(sim): State<Sim>,
    headers: HeaderMap,
    Json(request): Json<UnregisterRequest>,
) -> Result<StatusCode, ApiError> {
    let credential = credential(&headers)?;
    sim.update(|w, now| w.unregister(&credential, &request.token, now))?;
    Ok(StatusCode::NO_CONTENT)
}
