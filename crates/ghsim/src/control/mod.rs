//! The control API under `/_ghsim/`: set up the world, submit work, inject faults, read the
//! accounting. Unauthenticated: ghsim listens on loopback for tests and demos.
//!
//! | call | body → answer |
//! |---|---|
//! | `GET /_ghsim/state` | → orgs, repos, groups, runners, runs, jobs |
//! | `POST /_ghsim/enterprises` | `{slug}` → `{id}` |
//! | `POST /_ghsim/orgs` | `{login, enterprise?}` → `{id}` |
//! | `POST /_ghsim/repos` | `{full_name, private?}` → `{id}` |
//! | `POST /_ghsim/tokens` | `{token, label?}` — a personal access token |
//! | `POST /_ghsim/apps` | `{public_key_pem, id?, slug?}` → `{id, client_id, slug}` |
//! | `POST /_ghsim/apps/{app_id}/installations` | `{account}` → `{id}` |
//! | `POST /_ghsim/runner-groups` | `{owner: "org" or "enterprises/slug", name, visibility, selected?}` → group |
//! | `POST /_ghsim/jobs` | `{repository, count?, labels?, duration_ms?, conclusion?, workflow?, job_name?}` → `{run_id, job_ids}` |
//! | `POST /_ghsim/scenario` | JSON lines (see [`crate::scenario`]) → 202 `{lines}` |
//! | `POST /_ghsim/hooks` | `{url, secret?, content_type?: json/form, events?, owner?}` → hook (a `ping` is sent) |
//! | `GET /_ghsim/deliveries` | → delivery log |
//! | `POST /_ghsim/deliveries/{guid}/redeliver` | → 202, same `X-GitHub-Delivery` |
//! | `POST /_ghsim/events` | `{event: push/pull_request/check_run, repository, action?, job_id?}` → 202 |
//! | `GET`/`PUT /_ghsim/faults` | [`crate::faults::Faults`] (PUT merges the given fields) |
//! | `POST /_ghsim/tick` | applies due timers now |
//! | `GET /_ghsim/accounting` | [`crate::accounting::Accounting`] |
//! | `GET /_ghsim/metrics` | Prometheus text |
//!
//! [`Client`] calls it from Rust, typed with the records below and ghsim's own
//! ([`crate::accounting::Accounting`], [`crate::webhooks::DeliveryRecord`], …).

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::accounting;
use crate::http::ApiError;
use crate::render;
use crate::scenario;
use crate::sim::Sim;
use crate::webhooks::NewHook;
use crate::world::{
    Enterprise, Group, GroupOwner, Installation, Job, Org, Repo, Run, SimError, SubmitJobs,
    Visibility,
};

mod client;

pub use client::{Client, ControlError};

/// The answer of `GET /_ghsim/state`: the whole world but credentials.
///
/// Read-side only: the server renders runners in GitHub's shape (`render::runner`) and adds
/// ghsim's view of each, which [`RunnerView`] reads back.
#[derive(Clone, Debug, Deserialize)]
pub struct WorldState {
    /// Enterprises.
    pub enterprises: Vec<Enterprise>,
    /// Organizations.
    pub orgs: Vec<Org>,
    /// Repositories.
    pub repos: Vec<Repo>,
    /// Runner groups.
    pub runner_groups: Vec<Group>,
    /// Registered runners.
    pub runners: Vec<RunnerView>,
    /// Workflow runs.
    pub runs: Vec<Run>,
    /// Jobs.
    pub jobs: Vec<Job>,
    /// App installations.
    pub installations: Vec<Installation>,
}

/// A runner in [`WorldState`]: GitHub's runner object plus what only ghsim knows.
#[derive(Clone, Debug, Deserialize)]
pub struct RunnerView {
    /// The runner as GitHub's REST API shows it.
    #[serde(flatten)]
    pub runner: hangar_github::Runner,
    /// Its scope's path (`acme`, `acme/app`, `enterprises/big`).
    pub scope: String,
    /// The job assigned to it and not yet picked up.
    pub assigned_job: Option<u64>,
    /// The job it is running.
    pub running_job: Option<u64>,
}

/// The answer of `POST /_ghsim/jobs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    /// The run the jobs belong to.
    pub run_id: u64,
    /// The jobs, in order.
    pub job_ids: Vec<u64>,
}

/// A personal access token for `POST /_ghsim/tokens`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewToken {
    /// The token (a secret of the simulated GitHub only).
    pub token: String,
    /// The credential label its calls are accounted under (`pat:{label}`).
    pub label: Option<String>,
}

/// The control router (mounted at `/_ghsim`).
pub fn router(sim: Sim) -> Router {
    Router::new()
        .route("/state", get(state))
        .route("/enterprises", post(add_enterprise))
        .route("/orgs", post(add_org))
        .route("/repos", post(add_repo))
        .route("/tokens", post(add_token))
        .route("/apps", post(add_app))
        .route("/apps/{app_id}/installations", post(add_installation))
        .route("/runner-groups", post(add_group))
        .route("/jobs", post(submit_jobs))
        .route("/scenario", post(start_scenario))
        .route("/hooks", post(add_hook))
        .route("/deliveries", get(deliveries))
        .route("/deliveries/{guid}/redeliver", post(redeliver))
        .route("/events", post(send_event))
        .route("/faults", get(get_faults).put(put_faults))
        .route("/tick", post(tick))
        .route("/accounting", get(get_accounting))
        .route("/metrics", get(metrics))
        .with_state(sim)
}

async fn state(State(sim): State<Sim>) -> Json<Value> {
    Json(sim.read(|w, _| {
        let runners: Vec<Value> = w
            .runners
            .values()
            .map(|r| {
                let mut v = render::runner(r);
                v["scope"] = json!(r.scope.config_path());
                v["assigned_job"] = json!(r.assigned);
                v["running_job"] = json!(r.running);
                v
            })
            .collect();
        json!({
            "enterprises": w.enterprises.values().collect::<Vec<_>>(),
            "orgs": w.orgs.values().collect::<Vec<_>>(),
            "repos": w.repos.values().collect::<Vec<_>>(),
            "runner_groups": w.groups,
            "runners": runners,
            "runs": w.runs.values().collect::<Vec<_>>(),
            "jobs": w.jobs.values().collect::<Vec<_>>(),
            "installations": w.installations.values().collect::<Vec<_>>(),
        })
    }))
}

#[derive(Deserialize)]
struct NewEnterprise {
    slug: String,
}

async fn add_enterprise(
    State(sim): State<Sim>,
    Json(body): Json<NewEnterprise>,
) -> (StatusCode, Json<Value>) {
    let id = sim.update(|w, _| w.add_enterprise(&body.slug));
    (StatusCode::CREATED, Json(json!({"id": id})))
}

#[derive(Deserialize)]
struct NewOrg {
    login: String,
    enterprise: Option<String>,
}

async fn add_org(State(sim): State<Sim>, Json(body): Json<NewOrg>) -> (StatusCode, Json<Value>) {
    let id = sim.update(|w, _| w.add_org(&body.login, body.enterprise.as_deref()));
    (StatusCode::CREATED, Json(json!({"id": id})))
}

#[derive(Deserialize)]
struct NewRepo {
    full_name: String,
    #[serde(default = "yes")]
    private: bool,
}

fn yes() -> bool {
    true
}

async fn add_repo(
    State(sim): State<Sim>,
    Json(body): Json<NewRepo>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (owner, name) = body
        .full_name
        .split_once('/')
        .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "full_name must be owner/name"))?;
    let id = sim.update(|w, _| w.add_repo(owner, name, body.private));
    Ok((StatusCode::CREATED, Json(json!({"id": id}))))
}

async fn add_token(State(sim): State<Sim>, Json(body): Json<NewToken>) -> StatusCode {
    let label = body.label.unwrap_or_else(|| "token".into());
    sim.update(|w, _| w.add_pat(&body.token, &label));
    StatusCode::CREATED
}

#[derive(Deserialize)]
struct NewApp {
    public_key_pem: String,
    id: Option<u64>,
    slug: Option<String>,
}

async fn add_app(
    State(sim): State<Sim>,
    Json(body): Json<NewApp>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let slug = body.slug.unwrap_or_else(|| "hangar-test".into());
    let app = sim.update(|w, _| {
        w.add_app(body.id, &slug, &body.public_key_pem)
            .map(|a| json!({"id": a.id, "client_id": a.client_id, "slug": a.slug}))
    })?;
    Ok((StatusCode::CREATED, Json(app)))
}

#[derive(Deserialize)]
struct NewInstallation {
    account: String,
}

async fn add_installation(
    State(sim): State<Sim>,
    Path(app_id): Path<u64>,
    Json(body): Json<NewInstallation>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let id = sim.update(|w, now| w.add_installation(app_id, &body.account, now))?;
    Ok((StatusCode::CREATED, Json(json!({"id": id}))))
}

#[derive(Deserialize)]
struct NewGroup {
    owner: String,
    name: String,
    #[serde(default = "all")]
    visibility: Visibility,
    #[serde(default)]
    selected: Vec<String>,
    #[serde(default)]
    allows_public_repositories: bool,
}

fn all() -> Visibility {
    Visibility::All
}

async fn add_group(
    State(sim): State<Sim>,
    Json(body): Json<NewGroup>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let owner = match body.owner.strip_prefix("enterprises/") {
        Some(slug) => GroupOwner::Enterprise(slug.to_owned()),
        None => GroupOwner::Org(body.owner.clone()),
    };
    let group = sim.update(|w, _| {
        let id = w.add_group(owner.clone(), &body.name, body.visibility, &body.selected)?;
        let group = w
            .groups
            .iter_mut()
            .find(|g| g.owner == owner && g.id == id)
            .expect("just added");
        group.allows_public_repositories = body.allows_public_repositories;
        let group = group.clone();
        Ok::<_, SimError>(render::group(w, &group))
    })?;
    Ok((StatusCode::CREATED, Json(group)))
}

async fn submit_jobs(
    State(sim): State<Sim>,
    Json(body): Json<SubmitJobs>,
) -> Result<(StatusCode, Json<Submitted>), ApiError> {
    let (run_id, job_ids) = sim.update(|w, now| w.submit_jobs(&body, now))?;
    Ok((StatusCode::CREATED, Json(Submitted { run_id, job_ids })))
}

async fn start_scenario(
    State(sim): State<Sim>,
    body: String,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let lines = scenario::parse(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))?;
    let count = lines.len();
    tokio::spawn(scenario::replay(sim, lines));
    Ok((StatusCode::ACCEPTED, Json(json!({"lines": count}))))
}

async fn add_hook(State(sim): State<Sim>, Json(body): Json<NewHook>) -> (StatusCode, Json<Value>) {
    let hook = sim.add_hook(body);
    (
        StatusCode::CREATED,
        Json(serde_json::to_value(hook).expect("hooks serialize")),
    )
}

async fn deliveries(State(sim): State<Sim>) -> Json<Value> {
    Json(serde_json::to_value(sim.deliveries()).expect("deliveries serialize"))
}

async fn redeliver(
    State(sim): State<Sim>,
    Path(guid): Path<String>,
) -> Result<StatusCode, ApiError> {
    sim.redeliver(&guid)?;
    Ok(StatusCode::ACCEPTED)
}

#[derive(Deserialize)]
struct NewEvent {
    event: String,
    repository: String,
    action: Option<String>,
    job_id: Option<u64>,
}

async fn send_event(
    State(sim): State<Sim>,
    Json(body): Json<NewEvent>,
) -> Result<StatusCode, ApiError> {
    sim.update(|w, now| {
        let (owner, name) = body.repository.split_once('/').ok_or(SimError::NotFound)?;
        let repo = w
            .repo_by_name(owner, name)
            .cloned()
            .ok_or(SimError::NotFound)?;
        let sha = w.random(b"0123456789abcdef", 40);
        let payload = match body.event.as_str() {
            "push" => render::push_event(w, &repo, &sha, now),
            "pull_request" => {
                let action = body.action.as_deref().unwrap_or("opened");
                render::pull_request_event(w, &repo, action, 1, &sha, now)
            }
            "check_run" => {
                let job = body
                    .job_id
                    .or_else(|| {
                        w.jobs
                            .values()
                            .rev()
                            .find(|j| j.repo_id == repo.id)
                            .map(|j| j.id)
                    })
                    .ok_or(SimError::Unprocessable("check_run needs a job".into()))?;
                let action = body.action.as_deref().unwrap_or("created");
                render::check_run_event(w, action, job).ok_or(SimError::NotFound)?
            }
            other => {
                return Err(SimError::Unprocessable(format!(
                    "cannot synthesize {other} events"
                )));
            }
        };
        w.emit(&body.event, payload, Some(repo.owner.clone()));
        Ok(())
    })?;
    Ok(StatusCode::ACCEPTED)
}

async fn get_faults(State(sim): State<Sim>) -> Json<Value> {
    Json(serde_json::to_value(sim.faults()).expect("faults serialize"))
}

async fn put_faults(
    State(sim): State<Sim>,
    Json(patch): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    let merged = sim
        .faults()
        .merged(patch)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
    sim.set_faults(merged.clone());
    Ok(Json(
        serde_json::to_value(merged).expect("faults serialize"),
    ))
}

async fn tick(State(sim): State<Sim>) -> StatusCode {
    sim.tick();
    StatusCode::NO_CONTENT
}

async fn get_accounting(State(sim): State<Sim>) -> Json<accounting::Accounting> {
    Json(accounting::snapshot(&sim))
}

async fn metrics(State(sim): State<Sim>) -> Response {
    let text = accounting::prometheus(&accounting::snapshot(&sim));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
