//! The GitHub REST endpoints ghsim serves, and the layer every one of them goes through.
//!
//! The layer ([`github_layer`]) does what api.github.com does around an endpoint:
//! authenticate (`Bearer`/`token` PAT or installation token; App JWT on `/app/...`; basic auth
//! with a PAT as password) or answer 401; inject faults (latency, answers past the client's
//! timeout, connection resets, 5xx, 401 `Bad credentials`, 404, an exhausted primary limit,
//! secondary limits; see [`crate::faults::Faults`]); enforce the per-credential primary budget
//! (403 with `x-ratelimit-remaining: 0`); then, on the way out,
//! add `ETag` to 200 GETs and answer `If-None-Match` with 304 (not charged), add
//! `Cache-Control: private, max-age=60, s-maxage=60`, `Vary` and the `x-ratelimit-*` headers,
//! and count the call by endpoint template and credential.
//!
//! Paths and parameter names are exactly the OpenAPI description's, so the route template is
//! also the key the conformance tests look up in `@octokit/openapi`.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{ConnectInfo, MatchedPath, OriginalUri, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use base64::Engine;
use hangar_github::Scope;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::conn::Connection;
use crate::http::{ApiError, PageQuery, json_response, paginate};
use crate::render;
use crate::sim::Sim;
use crate::world::{GroupOwner, Identity, JitRequest, SimError, TokenKind};

/// Where GitHub Enterprise Server serves the REST API (`https://<host>/api/v3/`); ghsim
/// serves it there as well as at `/`.
pub const GHES_PREFIX: &str = "/api/v3";

/// The REST router (GitHub's API surface).
pub fn router(sim: Sim) -> Router {
    let scoped = |r: Router<Sim>, prefix: &str| {
        r.route(&format!("{prefix}/actions/runners"), get(list_runners))
            .route(
                &format!("{prefix}/actions/runners/registration-token"),
                post(registration_token),
            )
            .route(
                &format!("{prefix}/actions/runners/remove-token"),
                post(remove_token),
            )
            .route(
                &format!("{prefix}/actions/runners/generate-jitconfig"),
                post(generate_jitconfig),
            )
            .route(
                &format!("{prefix}/actions/runners/{{runner_id}}"),
                get(get_runner).delete(delete_runner),
            )
            .route(
                &format!("{prefix}/actions/runners/{{runner_id}}/labels"),
                get(runner_labels),
            )
    };
    let hooks = |r: Router<Sim>, prefix: &str| {
        r.route(
            &format!("{prefix}/hooks"),
            get(list_hooks).post(create_hook),
        )
        .route(
            &format!("{prefix}/hooks/{{hook_id}}"),
            get(get_hook).delete(delete_hook),
        )
    };
    let mut r = Router::new();
    for prefix in [
        "/repos/{owner}/{repo}",
        "/orgs/{org}",
        "/enterprises/{enterprise}",
    ] {
        r = scoped(r, prefix);
    }
    for prefix in ["/repos/{owner}/{repo}", "/orgs/{org}"] {
        r = hooks(r, prefix);
    }
    r.route("/orgs/{org}/actions/runner-groups", get(list_org_groups))
        .route(
            "/enterprises/{enterprise}/actions/runner-groups",
            get(list_enterprise_groups),
        )
        .route("/repos/{owner}/{repo}/actions/runs", get(list_runs))
        .route("/repos/{owner}/{repo}/actions/runs/{run_id}", get(get_run))
        .route(
            "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs",
            get(list_jobs),
        )
        .route("/repos/{owner}/{repo}/actions/jobs/{job_id}", get(get_job))
        .route("/app/installations", get(list_installations))
        .route(
            "/app/installations/{installation_id}/access_tokens",
            post(installation_token),
        )
        .route("/orgs/{org}/installation", get(org_installation))
        .route("/repos/{owner}/{repo}/installation", get(repo_installation))
        .route("/rate_limit", get(rate_limit))
        .route_layer(middleware::from_fn_with_state(sim.clone(), github_layer))
        .with_state(sim)
}

/// The endpoints [`router`] serves, as `(method, OpenAPI path template)`. The conformance
/// tests check each against GitHub's OpenAPI description.
pub fn endpoints() -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for prefix in [
        "/repos/{owner}/{repo}",
        "/orgs/{org}",
        "/enterprises/{enterprise}",
    ] {
        let runners = format!("{prefix}/actions/runners");
        out.extend([
            ("GET", runners.clone()),
            ("POST", format!("{runners}/registration-token")),
            ("POST", format!("{runners}/remove-token")),
            ("POST", format!("{runners}/generate-jitconfig")),
            ("GET", format!("{runners}/{{runner_id}}")),
            ("DELETE", format!("{runners}/{{runner_id}}")),
            ("GET", format!("{runners}/{{runner_id}}/labels")),
        ]);
    }
    for prefix in ["/repos/{owner}/{repo}", "/orgs/{org}"] {
        out.extend([
            ("GET", format!("{prefix}/hooks")),
            ("POST", format!("{prefix}/hooks")),
            ("GET", format!("{prefix}/hooks/{{hook_id}}")),
            ("DELETE", format!("{prefix}/hooks/{{hook_id}}")),
        ]);
    }
    for (method, path) in [
        ("GET", "/orgs/{org}/actions/runner-groups"),
        ("GET", "/enterprises/{enterprise}/actions/runner-groups"),
        ("GET", "/repos/{owner}/{repo}/actions/runs"),
        ("GET", "/repos/{owner}/{repo}/actions/runs/{run_id}"),
        ("GET", "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs"),
        ("GET", "/repos/{owner}/{repo}/actions/jobs/{job_id}"),
        ("GET", "/app/installations"),
        ("POST", "/app/installations/{installation_id}/access_tokens"),
        ("GET", "/orgs/{org}/installation"),
        ("GET", "/repos/{owner}/{repo}/installation"),
        ("GET", "/rate_limit"),
    ] {
        out.push((method, path.to_owned()));
    }
    out
}

/// Unknown routes: GitHub's 404 body.
pub async fn not_found() -> ApiError {
    ApiError::not_found()
}

fn bearer_or_basic(headers: &HeaderMap) -> Option<(&'static str, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    match scheme.to_ascii_lowercase().as_str() {
        "bearer" | "token" => Some(("bearer", rest.trim().to_owned())),
        "basic" => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(rest.trim())
                .ok()?;
            let text = String::from_utf8(decoded).ok()?;
            let (_, password) = text.split_once(':')?;
            Some(("basic", password.to_owned()))
        }
        _ => None,
    }
}

fn etag_of(body: &[u8], weak: bool) -> String {
    let digest = hex::encode(&Sha256::digest(body)[..16]);
    if weak {
        format!("W/\"{digest}\"")
    } else {
        format!("\"{digest}\"")
    }
}

fn if_none_match_hits(headers: &HeaderMap, etag: &str) -> bool {
    let strip = |t: &str| t.trim().trim_start_matches("W/").to_owned();
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|candidate| candidate.trim() == "*" || strip(candidate) == strip(etag))
}

fn rate_headers(response: &mut Response, limit: u64, used: u64, reset: i64) {
    let h = response.headers_mut();
    let num = |n: u64| HeaderValue::from_str(&n.to_string()).expect("digits");
    h.insert("x-ratelimit-limit", num(limit));
    h.insert("x-ratelimit-remaining", num(limit.saturating_sub(used)));
    h.insert("x-ratelimit-used", num(used));
    h.insert(
        "x-ratelimit-reset",
        HeaderValue::from_str(&reset.to_string()).expect("digits"),
    );
    h.insert("x-ratelimit-resource", HeaderValue::from_static("core"));
}

/// Authentication, faults, budget, caching headers and accounting around every endpoint.
pub async fn github_layer(
    State(sim): State<Sim>,
    matched: MatchedPath,
    request: Request,
    next: Next,
) -> Response {
    // The same endpoint under GitHub Enterprise Server's base path is the same endpoint.
    let template = matched.as_str();
    let template = template.strip_prefix(GHES_PREFIX).unwrap_or(template);
    let faults = sim.faults();
    if faults.rest_max_latency_ms > 0 {
        let ms = sim.random_below(faults.rest_max_latency_ms + 1);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    if sim.roll(faults.timeout_rate) {
        // The answer comes after the client gave up (if it did, hyper drops this request).
        tokio::time::sleep(std::time::Duration::from_millis(faults.timeout_hold_ms)).await;
    }
    if sim.roll(faults.reset_rate)
        && let Some(ConnectInfo(connection)) = request.extensions().get::<ConnectInfo<Connection>>()
    {
        connection.reset();
        tracing::debug!(path = %template, "resetting the connection (fault)");
        // Never sent: the connection fails before it is written.
        return StatusCode::BAD_GATEWAY.into_response();
    }
    let method = request.method().clone();
    let endpoint = format!("{method} {}", template);
    let now = sim.now();
    // Endpoints that take the App's JWT rather than a token.
    let app_route = template.starts_with("/app/") || template.ends_with("/installation");
    let free = template == "/rate_limit";

    // 1. Who is calling.
    let identity = match bearer_or_basic(request.headers()) {
        None => Err(SimError::Unauthorized("Requires authentication".into())),
        Some((scheme, secret)) => sim.read(|w, now| {
            if app_route && scheme == "bearer" && secret.matches('.').count() == 2 {
                w.identify_jwt(&secret, now).map(Identity::App)
            } else {
                w.identify_token(&secret, now)
            }
        }),
    };
    let identity = match identity {
        Ok(identity) => identity,
        Err(e) => {
            sim.update_quiet(|w| w.record_call(&endpoint, "anonymous", 401, false));
            return ApiError::from(e).into_response();
        }
    };
    let label = identity.label();

    // 2. Faults and the primary budget, before the endpoint runs.
    let (limit, used, reset) = sim.update_quiet(|w| {
        let b = w.budget(&label, now);
        (b.limit, b.used, b.reset.as_second())
    });
    let exhausted_until = faults
        .primary_exhausted_until
        .filter(|until| !free && now.as_second() < *until);
    let rate_limited = |limit: u64, used: u64, reset: i64, status: StatusCode| {
        let what = match &identity {
            Identity::Installation { id, .. } => format!("installation ID {id}"),
            _ => format!("user ID {}", label.len() as u64 + 1000),
        };
        let mut r =
            ApiError::new(status, format!("API rate limit exceeded for {what}.")).into_response();
        rate_headers(&mut r, limit, used, reset);
        r
    };
    let early = if sim.roll(faults.bad_credentials_rate) {
        // As for a token revoked a moment ago: no rate-limit headers, like any 401.
        Some(ApiError::new(StatusCode::UNAUTHORIZED, "Bad credentials").into_response())
    } else if let Some(until) = exhausted_until {
        let status =
            StatusCode::from_u16(faults.primary_exhausted_status).unwrap_or(StatusCode::FORBIDDEN);
        Some(rate_limited(limit, limit, until, status))
    } else if faults.endpoint_fails(template) || sim.roll(faults.server_error_rate) {
        Some(ApiError::new(StatusCode::BAD_GATEWAY, "Server Error").into_response())
    } else if faults.endpoint_forbidden(method.as_str(), template) {
        Some(
            ApiError::new(
                StatusCode::FORBIDDEN,
                "Resource not accessible by personal access token",
            )
            .into_response(),
        )
    } else if !free && used >= limit {
        Some(rate_limited(limit, used, reset, StatusCode::FORBIDDEN))
    } else if sim.roll(faults.not_found_rate) {
        // What GitHub answers for what the credential cannot see (not charged here).
        let mut r = ApiError::not_found().into_response();
        rate_headers(&mut r, limit, used, reset);
        Some(r)
    } else if !free && sim.roll(faults.secondary_limit_rate) {
        let mut r = ApiError::new(
            StatusCode::FORBIDDEN,
            "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
        )
        .into_response();
        if let Some(secs) = faults.secondary_retry_after_secs {
            r.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_str(&secs.to_string()).expect("digits"),
            );
        }
        rate_headers(&mut r, limit, used, reset);
        Some(r)
    } else {
        None
    };
    if let Some(response) = early {
        let status = response.status().as_u16();
        sim.update_quiet(|w| w.record_call(&endpoint, &label, status, false));
        return response;
    }

    // 3. The endpoint (the request is logged first, body included, for conformance checks).
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let query = parts
        .uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .map(|(k, _)| k.into_owned())
                .collect()
        })
        .unwrap_or_default();
    let recorded = crate::world::RecordedRequest {
        method: method.to_string(),
        template: template.to_owned(),
        query,
        body: serde_json::from_slice(&body).ok(),
    };
    sim.update_quiet(|w| w.record_request(recorded));
    let mut request = Request::from_parts(parts, Body::from(body));
    let conditional = request.headers().clone();
    request.extensions_mut().insert(identity);
    let response = next.run(request).await;
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();

    // 4. Caching headers, 304, charge, accounting.
    let mut status = parts.status;
    let mut body_out = Body::from(bytes.clone());
    if parts.status.is_success() && parts.status != StatusCode::NO_CONTENT {
        parts.headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, max-age=60, s-maxage=60"),
        );
        parts.headers.insert(
            header::VARY,
            HeaderValue::from_static("Accept, Authorization, Cookie, X-GitHub-OTP"),
        );
        if method == Method::GET && parts.status == StatusCode::OK {
            // Lists get weak ETags, single objects strong ones, as GitHub's responses do.
            let weak = parts.headers.contains_key(header::LINK)
                || template.ends_with("runners")
                || template.ends_with("jobs")
                || template.ends_with("runs")
                || template.ends_with("runner-groups");
            let etag = etag_of(&bytes, weak);
            if if_none_match_hits(&conditional, &etag) {
                status = StatusCode::NOT_MODIFIED;
                body_out = Body::empty();
                parts.headers.remove(header::CONTENT_TYPE);
                parts.headers.remove(header::CONTENT_LENGTH);
            }
            parts
                .headers
                .insert(header::ETAG, HeaderValue::from_str(&etag).expect("ascii"));
        }
    }
    parts.status = status;
    let charged = !free && status != StatusCode::NOT_MODIFIED;
    let used = sim.update_quiet(|w| {
        let b = w.budget(&label, now);
        if charged {
            b.used += 1;
        }
        let used = b.used;
        w.record_call(&endpoint, &label, status.as_u16(), charged);
        used
    });
    let request_id = sim.update_quiet(|w| w.random(b"0123456789ABCDEF", 8));
    parts.headers.insert(
        "x-github-request-id",
        HeaderValue::from_str(&format!("{}:{}", &request_id[..4], &request_id[4..]))
            .expect("ascii"),
    );
    parts.headers.insert(
        "x-github-media-type",
        HeaderValue::from_static("github.v3; format=json"),
    );
    let mut response = Response::from_parts(parts, body_out);
    rate_headers(&mut response, limit, used, reset);
    response
}

fn scope_of(params: &HashMap<String, String>) -> Scope {
    if let (Some(owner), Some(repo)) = (params.get("owner"), params.get("repo")) {
        Scope::repo(owner, repo)
    } else if let Some(org) = params.get("org") {
        Scope::org(org)
    } else {
        Scope::enterprise(params.get("enterprise").cloned().unwrap_or_default())
    }
}

/// Resolves the scope of the path and checks the caller may use it (404 before 403, as
/// GitHub hides what a credential cannot see).
fn authorized_scope(
    sim: &Sim,
    params: &HashMap<String, String>,
    identity: &Identity,
) -> Result<Scope, ApiError> {
    let scope = scope_of(params);
    sim.read(|w, _| {
        w.check_scope(&scope)?;
        w.authorize(identity, &scope)
    })?;
    Ok(scope)
}

fn runner_id(params: &HashMap<String, String>) -> Result<u64, ApiError> {
    params
        .get("runner_id")
        .and_then(|s| s.parse().ok())
        .ok_or_else(ApiError::not_found)
}

#[derive(Debug, Deserialize)]
struct RunnerListQuery {
    name: Option<String>,
    #[serde(flatten)]
    page: PageQuery,
}

async fn list_runners(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Query(query): Query<RunnerListQuery>,
    Extension(identity): Extension<Identity>,
    OriginalUri(uri): OriginalUri,
) -> Result<Response, ApiError> {
    let scope = authorized_scope(&sim, &params, &identity)?;
    let (items, public) = sim.read(|w, _| {
        let items: Vec<Value> = w
            .runners
            .values()
            .filter(|r| r.scope == scope)
            .filter(|r| query.name.as_ref().is_none_or(|n| &r.name == n))
            .map(render::runner)
            .collect();
        (items, w.config.public_url.clone())
    });
    let total = items.len();
    let (page, link) = paginate(items, query.page, &uri, &public);
    Ok(json_response(
        StatusCode::OK,
        json!({"total_count": total, "runners": page}),
        link,
    ))
}

async fn get_runner(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
) -> Result<Json<Value>, ApiError> {
    let scope = authorized_scope(&sim, &params, &identity)?;
    let id = runner_id(&params)?;
    sim.read(|w, _| {
        w.runners
            .get(&id)
            .filter(|r| r.scope == scope)
            .map(|r| Json(render::runner(r)))
            .ok_or_else(ApiError::not_found)
    })
}

async fn runner_labels(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
) -> Result<Json<Value>, ApiError> {
    let scope = authorized_scope(&sim, &params, &identity)?;
    let id = runner_id(&params)?;
    sim.read(|w, _| {
        let runner = w
            .runners
            .get(&id)
            .filter(|r| r.scope == scope)
            .ok_or_else(ApiError::not_found)?;
        let labels = render::runner(runner)["labels"].clone();
        Ok(Json(
            json!({"total_count": runner.labels.len(), "labels": labels}),
        ))
    })
}

async fn delete_runner(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
) -> Result<StatusCode, ApiError> {
    let scope = authorized_scope(&sim, &params, &identity)?;
    let id = runner_id(&params)?;
    sim.update(|w, now| w.delete_runner(&scope, id, now))?;
    Ok(StatusCode::NO_CONTENT)
}

async fn runner_token(
    sim: &Sim,
    params: &HashMap<String, String>,
    identity: &Identity,
    kind: TokenKind,
) -> Result<Response, ApiError> {
    let scope = authorized_scope(sim, params, identity)?;
    let (token, expires_at) = sim.update(|w, now| w.create_runner_token(&scope, kind, now));
    Ok(json_response(
        StatusCode::CREATED,
        json!({"token": token, "expires_at": render::ts(expires_at)}),
        None,
    ))
}

async fn registration_token(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
) -> Result<Response, ApiError> {
    runner_token(&sim, &params, &identity, TokenKind::Registration).await
}

async fn remove_token(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
) -> Result<Response, ApiError> {
    runner_token(&sim, &params, &identity, TokenKind::Remove).await
}

async fn generate_jitconfig(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let scope = authorized_scope(&sim, &params, &identity)?;
    let request: JitRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("Invalid request.\n\n{e}"),
        )
    })?;
    let (id, encoded) = sim.update(|w, now| w.generate_jit(&scope, request, now))?;
    let runner = sim.read(|w, _| render::runner(&w.runners[&id]));
    Ok(json_response(
        StatusCode::CREATED,
        json!({"runner": runner, "encoded_jit_config": encoded}),
        None,
    ))
}

/// The hooks a repository or organization path holds: (owner, repository full name).
fn hook_scope(
    sim: &Sim,
    params: &HashMap<String, String>,
    identity: &Identity,
) -> Result<(String, Option<String>), ApiError> {
    match authorized_scope(sim, params, identity)? {
        Scope::Repository { owner, repo } => Ok((owner.clone(), Some(format!("{owner}/{repo}")))),
        Scope::Organization(org) => Ok((org, None)),
        Scope::Enterprise(_) => Err(ApiError::not_found()),
    }
}

/// Whether `hook` belongs to the repository or organization (`owner`, `repository`).
fn hook_of(hook: &crate::webhooks::Hook, owner: &str, repository: Option<&str>) -> bool {
    hook.owner
        .as_deref()
        .is_some_and(|o| o.eq_ignore_ascii_case(owner))
        && match (hook.repository.as_deref(), repository) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            (None, None) => true,
            _ => false,
        }
}

async fn list_hooks(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Query(page): Query<PageQuery>,
    Extension(identity): Extension<Identity>,
    OriginalUri(uri): OriginalUri,
) -> Result<Response, ApiError> {
    let (owner, repository) = hook_scope(&sim, &params, &identity)?;
    let hooks: Vec<_> = sim
        .hooks()
        .into_iter()
        .filter(|h| hook_of(h, &owner, repository.as_deref()))
        .collect();
    let (items, public) = sim.read(|w, _| {
        let items: Vec<Value> = hooks.iter().map(|h| render::hook(w, h)).collect();
        (items, w.config.public_url.clone())
    });
    let (page, link) = paginate(items, page, &uri, &public);
    Ok(json_response(StatusCode::OK, json!(page), link))
}

#[derive(Debug, Deserialize)]
struct CreateHook {
    #[serde(default)]
    config: Option<HookConfig>,
    #[serde(default)]
    events: Option<Vec<String>>,
    #[serde(default)]
    active: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct HookConfig {
    url: Option<String>,
    #[serde(default)]
    content_type: Option<String>,
    #[serde(default)]
    secret: Option<String>,
}

async fn create_hook(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let (owner, repository) = hook_scope(&sim, &params, &identity)?;
    let invalid = |message: String| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message);
    let request: CreateHook =
        serde_json::from_slice(&body).map_err(|e| invalid(format!("Invalid request.\n\n{e}")))?;
    let config = request.config.unwrap_or(HookConfig {
        url: None,
        content_type: None,
        secret: None,
    });
    let url = config
        .url
        .filter(|u| url::Url::parse(u).is_ok())
        .ok_or_else(|| invalid("Validation Failed: config.url is missing or invalid".into()))?;
    let content_type = match config.content_type.as_deref() {
        None | Some("form") => crate::webhooks::ContentType::Form,
        Some("json") => crate::webhooks::ContentType::Json,
        Some(other) => return Err(invalid(format!("Invalid content_type {other:?}"))),
    };
    let hook = sim.install_hook(crate::webhooks::Hook {
        id: 0,
        url,
        secret: config.secret.map(hangar_github::Secret::new),
        content_type,
        // GitHub subscribes a new hook to `push` unless told otherwise.
        events: request.events.unwrap_or_else(|| vec!["push".into()]),
        owner: Some(owner),
        repository,
        active: request.active.unwrap_or(true),
        created_at: Some(render::ts(sim.now())),
    });
    let rendered = sim.read(|w, _| render::hook(w, &hook));
    Ok(json_response(StatusCode::CREATED, rendered, None))
}

fn hook_id(params: &HashMap<String, String>) -> Result<u64, ApiError> {
    params
        .get("hook_id")
        .and_then(|s| s.parse().ok())
        .ok_or_else(ApiError::not_found)
}

async fn get_hook(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
) -> Result<Response, ApiError> {
    let (owner, repository) = hook_scope(&sim, &params, &identity)?;
    let id = hook_id(&params)?;
    let hook = sim
        .hooks()
        .into_iter()
        .find(|h| h.id == id && hook_of(h, &owner, repository.as_deref()))
        .ok_or_else(ApiError::not_found)?;
    let rendered = sim.read(|w, _| render::hook(w, &hook));
    Ok(json_response(StatusCode::OK, rendered, None))
}

async fn delete_hook(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
) -> Result<StatusCode, ApiError> {
    let (owner, repository) = hook_scope(&sim, &params, &identity)?;
    let id = hook_id(&params)?;
    let ours = sim
        .hooks()
        .iter()
        .any(|h| h.id == id && hook_of(h, &owner, repository.as_deref()));
    if !ours || !sim.remove_hook(id) {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
struct GroupQuery {
    visible_to_repository: Option<String>,
    visible_to_organization: Option<String>,
    #[serde(flatten)]
    page: PageQuery,
}

async fn list_groups(
    sim: &Sim,
    params: &HashMap<String, String>,
    identity: &Identity,
    query: GroupQuery,
    uri: &axum::http::Uri,
) -> Result<Response, ApiError> {
    let scope = authorized_scope(sim, params, identity)?;
    let owner = match &scope {
        Scope::Organization(org) => GroupOwner::Org(org.clone()),
        Scope::Enterprise(e) => GroupOwner::Enterprise(e.clone()),
        Scope::Repository { .. } => return Err(ApiError::not_found()),
    };
    let (items, public) = sim.read(|w, _| {
        let visible_repo = query
            .visible_to_repository
            .as_ref()
            .and_then(|name| match &owner {
                GroupOwner::Org(org) => w.repo_by_name(org, name).cloned(),
                GroupOwner::Enterprise(_) => None,
            });
        // An organization also lists the groups its enterprise shares with it (not the
        // enterprise's default group), as inherited.
        let enterprise = match &owner {
            GroupOwner::Org(org) => w
                .orgs
                .get(org)
                .and_then(|o| Some((GroupOwner::Enterprise(o.enterprise.clone()?), o.id))),
            GroupOwner::Enterprise(_) => None,
        };
        let inherited = |g: &crate::world::Group| {
            enterprise.as_ref().is_some_and(|(e, org_id)| {
                g.owner == *e
                    && !g.default
                    && (g.visibility == crate::world::Visibility::All
                        || g.selected.contains(org_id))
            })
        };
        let items: Vec<Value> = w
            .groups
            .iter()
            .filter(|g| g.owner == owner || inherited(g))
            .filter(|g| match (&query.visible_to_repository, &visible_repo) {
                (None, _) => true,
                (Some(_), Some(repo)) => w.group_visible_to(g, repo),
                (Some(_), None) => false,
            })
            .filter(|g| match &query.visible_to_organization {
                None => true,
                Some(org) => w.orgs.get(org).is_some_and(|o| {
                    g.visibility == crate::world::Visibility::All || g.selected.contains(&o.id)
                }),
            })
            .map(|g| render::group_seen_by(w, g, &owner))
            .collect();
        (items, w.config.public_url.clone())
    });
    let total = items.len();
    let (page, link) = paginate(items, query.page, uri, &public);
    Ok(json_response(
        StatusCode::OK,
        json!({"total_count": total, "runner_groups": page}),
        link,
    ))
}

async fn list_org_groups(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Query(query): Query<GroupQuery>,
    Extension(identity): Extension<Identity>,
    OriginalUri(uri): OriginalUri,
) -> Result<Response, ApiError> {
    list_groups(&sim, &params, &identity, query, &uri).await
}

async fn list_enterprise_groups(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Query(query): Query<GroupQuery>,
    Extension(identity): Extension<Identity>,
    OriginalUri(uri): OriginalUri,
) -> Result<Response, ApiError> {
    list_groups(&sim, &params, &identity, query, &uri).await
}

#[derive(Debug, Deserialize)]
struct RunsQuery {
    status: Option<String>,
    #[serde(flatten)]
    page: PageQuery,
}

async fn list_runs(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Query(query): Query<RunsQuery>,
    Extension(identity): Extension<Identity>,
    OriginalUri(uri): OriginalUri,
) -> Result<Response, ApiError> {
    let scope = authorized_scope(&sim, &params, &identity)?;
    let Scope::Repository { owner, repo } = scope else {
        return Err(ApiError::not_found());
    };
    let (items, public) = sim.read(|w, _| {
        let repo_id = w.repo_by_name(&owner, &repo).map(|r| r.id);
        // Newest first, as GitHub lists them.
        let items: Vec<Value> = w
            .runs
            .values()
            .rev()
            .filter(|r| Some(r.repo_id) == repo_id)
            .filter(|r| {
                query.status.as_deref().is_none_or(|want| {
                    let (status, conclusion) = w.run_state(r);
                    status == want || conclusion == Some(want)
                })
            })
            .map(|r| render::run(w, r))
            .collect();
        (items, w.config.public_url.clone())
    });
    let total = items.len();
    let (page, link) = paginate(items, query.page, &uri, &public);
    Ok(json_response(
        StatusCode::OK,
        json!({"total_count": total, "workflow_runs": page}),
        link,
    ))
}

fn run_in_repo(w: &crate::world::World, owner: &str, repo: &str, run_id: u64) -> Option<u64> {
    let repo_id = w.repo_by_name(owner, repo)?.id;
    w.runs
        .get(&run_id)
        .filter(|r| r.repo_id == repo_id)
        .map(|r| r.id)
}

async fn get_run(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
) -> Result<Json<Value>, ApiError> {
    let scope = authorized_scope(&sim, &params, &identity)?;
    let Scope::Repository { owner, repo } = scope else {
        return Err(ApiError::not_found());
    };
    let run_id: u64 = params
        .get("run_id")
        .and_then(|s| s.parse().ok())
        .ok_or_else(ApiError::not_found)?;
    sim.read(|w, _| {
        let id = run_in_repo(w, &owner, &repo, run_id).ok_or_else(ApiError::not_found)?;
        Ok(Json(render::run(w, &w.runs[&id])))
    })
}

#[derive(Debug, Deserialize)]
struct JobsQuery {
    #[allow(dead_code)]
    filter: Option<String>,
    #[serde(flatten)]
    page: PageQuery,
}

async fn list_jobs(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Query(query): Query<JobsQuery>,
    Extension(identity): Extension<Identity>,
    OriginalUri(uri): OriginalUri,
) -> Result<Response, ApiError> {
    let scope = authorized_scope(&sim, &params, &identity)?;
    let Scope::Repository { owner, repo } = scope else {
        return Err(ApiError::not_found());
    };
    let run_id: u64 = params
        .get("run_id")
        .and_then(|s| s.parse().ok())
        .ok_or_else(ApiError::not_found)?;
    let (items, public) = sim.read(|w, _| {
        let id = run_in_repo(w, &owner, &repo, run_id).ok_or_else(ApiError::not_found)?;
        let items: Vec<Value> = w.runs[&id]
            .jobs
            .iter()
            .filter_map(|j| w.jobs.get(j))
            .map(|j| render::job(w, j))
            .collect();
        Ok::<_, ApiError>((items, w.config.public_url.clone()))
    })?;
    let total = items.len();
    let (page, link) = paginate(items, query.page, &uri, &public);
    Ok(json_response(
        StatusCode::OK,
        json!({"total_count": total, "jobs": page}),
        link,
    ))
}

async fn get_job(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
) -> Result<Json<Value>, ApiError> {
    let scope = authorized_scope(&sim, &params, &identity)?;
    let Scope::Repository { owner, repo } = scope else {
        return Err(ApiError::not_found());
    };
    let job_id: u64 = params
        .get("job_id")
        .and_then(|s| s.parse().ok())
        .ok_or_else(ApiError::not_found)?;
    sim.read(|w, _| {
        let repo_id = w.repo_by_name(&owner, &repo).map(|r| r.id);
        let job = w
            .jobs
            .get(&job_id)
            .filter(|j| Some(j.repo_id) == repo_id)
            .ok_or_else(ApiError::not_found)?;
        Ok(Json(render::job(w, job)))
    })
}

fn app_of(identity: &Identity) -> Result<u64, ApiError> {
    match identity {
        Identity::App(id) => Ok(*id),
        _ => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "A JSON web token could not be decoded",
        )),
    }
}

async fn list_installations(
    State(sim): State<Sim>,
    Query(query): Query<PageQuery>,
    Extension(identity): Extension<Identity>,
    OriginalUri(uri): OriginalUri,
) -> Result<Response, ApiError> {
    let app = app_of(&identity)?;
    let (items, public) = sim.read(|w, _| {
        let items: Vec<Value> = w
            .installations
            .values()
            .filter(|i| i.app_id == app)
            .map(|i| render::installation(w, i))
            .collect();
        (items, w.config.public_url.clone())
    });
    let (page, link) = paginate(items, query, &uri, &public);
    Ok(json_response(StatusCode::OK, Value::Array(page), link))
}

async fn installation_token(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
) -> Result<Response, ApiError> {
    let app = app_of(&identity)?;
    let id: u64 = params
        .get("installation_id")
        .and_then(|s| s.parse().ok())
        .ok_or_else(ApiError::not_found)?;
    let owned = sim.read(|w, _| w.installations.get(&id).is_some_and(|i| i.app_id == app));
    if !owned {
        return Err(ApiError::not_found());
    }
    let (token, expires_at) = sim.update(|w, now| w.create_installation_token(id, now))?;
    Ok(json_response(
        StatusCode::CREATED,
        json!({
            "token": token,
            "expires_at": render::ts(expires_at),
            "permissions": {"administration": "write", "organization_self_hosted_runners": "write", "actions": "read", "metadata": "read"},
            "repository_selection": "all"
        }),
        None,
    ))
}

async fn account_installation(
    sim: &Sim,
    identity: &Identity,
    account: &str,
) -> Result<Json<Value>, ApiError> {
    let app = app_of(identity)?;
    sim.read(|w, _| {
        w.installations
            .values()
            .find(|i| i.app_id == app && i.account.eq_ignore_ascii_case(account))
            .map(|i| Json(render::installation(w, i)))
            .ok_or_else(ApiError::not_found)
    })
}

async fn org_installation(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
) -> Result<Json<Value>, ApiError> {
    account_installation(
        &sim,
        &identity,
        params.get("org").map(String::as_str).unwrap_or(""),
    )
    .await
}

async fn repo_installation(
    State(sim): State<Sim>,
    Path(params): Path<HashMap<String, String>>,
    Extension(identity): Extension<Identity>,
) -> Result<Json<Value>, ApiError> {
    account_installation(
        &sim,
        &identity,
        params.get("owner").map(String::as_str).unwrap_or(""),
    )
    .await
}

async fn rate_limit(
    State(sim): State<Sim>,
    Extension(identity): Extension<Identity>,
) -> Json<Value> {
    let label = identity.label();
    let (limit, used, reset) = sim.update_quiet(|w| {
        let now = sim.now();
        let b = w.budget(&label, now);
        (b.limit, b.used, b.reset.as_second())
    });
    let core = json!({"limit": limit, "used": used, "remaining": limit.saturating_sub(used), "reset": reset});
    Json(json!({
        "resources": {
            "core": core,
            "search": {"limit": 30, "used": 0, "remaining": 30, "reset": reset},
            "graphql": {"limit": 5000, "used": 0, "remaining": 5000, "reset": reset},
            "actions_runner_registration": {"limit": 10000, "used": 0, "remaining": 10000, "reset": reset}
        },
        "rate": core
    }))
}
