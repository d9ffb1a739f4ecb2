//! Kubernetes admission webhooks, served over HTTPS with certificates Hangar manages itself
//! (no cert-manager).
//!
//! `hangar run --admission-addr` serves them: an axum router over tokio-rustls (ring). Every
//! decision is a pure function with table tests ([`validate`], [`pod`], [`jit`], [`certs`],
//! `hangar_core::retirement::pod_deletion` for [`retire`]); the server only wraps them.
//!
//! - `POST /mutate-runner-set-pod`: RunnerSet pods (label
//!   `actions-runner-controller/inject-registration-token=true`) get `RUNNER_NAME`, a
//!   registration credential by Secret reference, `restartPolicy: Never` and the token-expiry
//!   annotation ([`pod`], [`registration`]); pods annotated `hangar.dev/registration: jit` get
//!   a JIT configuration generated for their name in a Secret of their own ([`jit`]). When no
//!   credential can be had from GitHub the pod is refused with the reason (fail closed: a
//!   runner pod without a credential would only crash). Refusals use code 403 even when GitHub
//!   is down: clients retry a 503 themselves, and the pod's controller already retries with its
//!   own back-off. A JIT name conflict on GitHub is settled by [`jit::on_conflict`] (an idle
//!   orphan is deleted and the configuration generated again, at most
//!   [`jit::MAX_GENERATE_ATTEMPTS`] times; a busy runner is never touched); all GitHub calls of
//!   one admission share one timeout, below the webhook's. A create of a pod that exists
//!   already (a controller on a stale cache; it fails with AlreadyExists after admission)
//!   generates nothing: it would replace the live pod's runner.
//! - `POST /validate-actions-summerwind-dev-v1alpha1-{runner,runnerreplicaset,
//!   runnerdeployment,runnerset}`: the checks the CRD schema cannot express ([`validate`]).
//!   On UPDATE an unchanged spec, or an object being deleted, is always accepted
//!   ([`validate_request`]), so objects stored before a rule existed can still be edited
//!   (finalizers, labels) and deleted.
//! - `POST /validate-runner-pod-deletion`, `POST /validate-runner-statefulset-deletion`: a
//!   runner pod (or RunnerSet StatefulSet) of a terminating namespace is not deleted while its
//!   runner may be running a job, until its retirement timeout ([`retire`]).
//! - `GET /healthz`: 200 once a certificate is loaded.
//!
//! There is no defaulting webhook: ARC's defaulters for these kinds are empty, and Hangar
//! applies defaults in the controllers so stored objects stay exactly as written.
//!
//! Certificates: [`rotation::CertManager`] keeps a CA and serving certificate in a Secret,
//! renews them before expiry, patches the configurations' `caBundle` ([`configurations`]) and
//! swaps the served certificate in place ([`tls`]). Several replicas share the Secret. The
//! configurations are patched, not owned, by default; `--admission-create-configurations`
//! creates them if absent, for the local stack, where the apiserver calls
//! `https://127.0.0.1:PORT/...` ([`configurations`]; why: docs/adr/0011-admission-certificates.md).
//!
//! Tested: table tests in each module; `tests/admission.rs` registers configurations limited to
//! its namespace by a `namespaceSelector`, deletes them from a drop guard, and drives rotation
//! with an injected clock.
//!
//! The server runs within [`AdmissionConfig::limits`] ([`crate::serve`]): a connection cap,
//! header and request timeouts, and a body limit (8 MiB by default) answered with 413.

pub mod certs;
pub mod cli;
pub mod configurations;
pub mod jit;
pub mod pod;
pub mod registration;
pub mod retire;
pub mod review;
pub mod rotation;
pub mod tls;
pub mod validate;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use hangar_api::{Runner, RunnerDeployment, RunnerReplicaSet, RunnerSet};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use crate::context::Clock;
use crate::credentials::GitHubClients;
use hangar_runtime::pod::observe::{github_scope, pod_scope};
use registration::Registrations;
use review::{AdmissionRequest, AdmissionResponse, AdmissionReview};

/// Settings of the admission server.
#[derive(Debug, Clone)]
pub struct AdmissionConfig {
    /// The webhook configurations and how the apiserver reaches this server.
    pub registration: configurations::Registration,
    /// Namespace of the PKI Secret (the controller's own).
    pub tls_namespace: String,
    /// Name of the PKI Secret.
    pub tls_secret: String,
    /// Certificate lifetimes.
    pub policy: certs::CertPolicy,
    /// The Secret is re-checked at least this often (and on every change).
    pub cert_check_interval: Duration,
    /// Bound of one GitHub call while a pod waits; below the webhook's 15 s timeout.
    pub github_timeout: Duration,
    /// Body, connection and time limits of the HTTPS server.
    pub limits: crate::serve::Limits,
    /// How long a runner pod of a terminating namespace is held without its own
    /// `hangar.dev/retirement-timeout` (`--retirement-timeout`).
    pub retirement_timeout: Duration,
}

/// Default body limit: an AdmissionReview of an update carries the object twice, each up to
/// the apiserver's own 3 MiB request limit.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// Default limit of connections served at once (the apiserver keeps a few alive).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 256;

impl AdmissionConfig {
    /// Defaults for `registration`, with the PKI Secret in `tls_namespace`.
    pub fn new(registration: configurations::Registration, tls_namespace: &str) -> Self {
        Self {
            registration,
            tls_namespace: tls_namespace.to_owned(),
            tls_secret: rotation::DEFAULT_SECRET_NAME.to_owned(),
            policy: certs::CertPolicy::default(),
            cert_check_interval: Duration::from_secs(60),
            github_timeout: Duration::from_secs(10),
            limits: crate::serve::Limits::new(DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_BODY_BYTES),
            retirement_timeout: hangar_core::retirement::DEFAULT_TIMEOUT,
        }
    }
}

/// What the handlers share.
pub struct AdmissionState {
    /// For owner lookups.
    client: kube::Client,
    registrations: Registrations,
    clock: Arc<dyn Clock>,
    cert: Arc<tls::ReloadableCert>,
    retirement_timeout: Duration,
}

impl std::fmt::Debug for AdmissionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionState")
            .field("registrations", &self.registrations)
            .finish_non_exhaustive()
    }
}

/// The admission server and its certificate manager.
#[derive(Debug)]
pub struct Admission {
    state: Arc<AdmissionState>,
    /// Keeps the PKI; [`Admission::serve`] runs its loop, tests may call `sync` directly.
    pub certs: Arc<rotation::CertManager>,
    interval: Duration,
    limits: crate::serve::Limits,
}

impl Admission {
    /// A server using `github` (credentials per pod through its annotation) and `clock` for
    /// token freshness and certificate rotation.
    pub fn new(
        client: kube::Client,
        github: Arc<GitHubClients>,
        clock: Arc<dyn Clock>,
        config: AdmissionConfig,
    ) -> Self {
        let cert = Arc::new(tls::ReloadableCert::default());
        let certs = Arc::new(rotation::CertManager::new(
            client.clone(),
            config.tls_namespace,
            config.tls_secret,
            config.policy,
            clock.clone(),
            config.registration,
            cert.clone(),
        ));
        Self {
            state: Arc::new(AdmissionState {
                registrations: Registrations::new(client.clone(), github, config.github_timeout),
                client,
                clock,
                cert,
                retirement_timeout: config.retirement_timeout,
            }),
            certs,
            interval: config.cert_check_interval,
            limits: config.limits,
        }
    }

    /// The HTTP routes (no TLS, no limits), for tests with `oneshot`.
    pub fn router(&self) -> Router {
        router(self.state.clone())
    }

    /// Serves HTTPS on `listener` within the configured limits until `shutdown`, with the
    /// certificate loop alongside.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let certs = tokio::spawn(self.certs.clone().run(self.interval));
        let tls = tls::Tls::new(tls::server_config(self.state.cert.clone()));
        let app = router(self.state.clone());
        crate::serve::serve(listener, tls, app, self.limits, shutdown).await;
        certs.abort();
        Ok(())
    }
}

fn router(state: Arc<AdmissionState>) -> Router {
    let mut router = Router::new()
        .route(configurations::POD_PATH, post(mutate_pod))
        .route(
            retire::POD_PATH,
            post(|State(state), Json(review)| guard_deletion(retire::Guard::Pod, state, review)),
        )
        .route(
            retire::STATEFUL_SET_PATH,
            post(|State(state), Json(review)| {
                guard_deletion(retire::Guard::StatefulSet, state, review)
            }),
        )
        .route("/healthz", get(healthz));
    for (kind, _, path) in configurations::VALIDATED {
        router = router.route(
            path,
            post(move |Json(review): Json<AdmissionReview>| async move {
                respond(review, |req| validate_request(kind, req))
            }),
        );
    }
    router.with_state(state)
}

async fn healthz(State(state): State<Arc<AdmissionState>>) -> impl IntoResponse {
    if state.cert.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "no serving certificate yet",
        )
    }
}

fn respond(
    review: AdmissionReview,
    decide: impl FnOnce(&AdmissionRequest) -> AdmissionResponse,
) -> axum::response::Response {
    match review.request {
        Some(req) => Json(decide(&req).into_review()).into_response(),
        None => (StatusCode::BAD_REQUEST, "AdmissionReview without a request").into_response(),
    }
}

/// Validates one request for `kind` (pure: no IO).
pub fn validate_request(kind: &str, req: &AdmissionRequest) -> AdmissionResponse {
    let Some(object) = &req.object else {
        return AdmissionResponse::allow(&req.uid);
    };
    if req.operation == "UPDATE" {
        let unchanged = req.old_object.as_ref().map(|o| &o["spec"]) == Some(&object["spec"]);
        let deleting = !object["metadata"]["deletionTimestamp"].is_null();
        if unchanged || deleting {
            return AdmissionResponse::allow(&req.uid);
        }
    }
    let name = object["metadata"]["name"]
        .as_str()
        .or(object["metadata"]["generateName"].as_str())
        .unwrap_or_default()
        .to_owned();
    fn parse<K: serde::de::DeserializeOwned>(v: &Value) -> Result<K, String> {
        serde_json::from_value(v.clone()).map_err(|e| e.to_string())
    }
    let verdict = match kind {
        "Runner" => parse::<Runner>(object).map(|o| validate::validate_runner(&o.spec)),
        "RunnerReplicaSet" => parse::<RunnerReplicaSet>(object)
            .map(|o| validate::validate_runner_replica_set(&o.spec)),
        "RunnerDeployment" => {
            parse::<RunnerDeployment>(object).map(|o| validate::validate_runner_deployment(&o.spec))
        }
        "RunnerSet" => parse::<RunnerSet>(object).map(|o| validate::validate_runner_set(&o.spec)),
        _ => return AdmissionResponse::allow(&req.uid),
    };
    match verdict {
        Err(e) => AdmissionResponse::deny(&req.uid, 400, format!("cannot read {kind} {name}: {e}")),
        Ok(v) if v.is_ok() => AdmissionResponse::allow(&req.uid).with_warnings(v.warnings),
        Ok(v) => {
            AdmissionResponse::deny(&req.uid, 422, v.message(kind, &name)).with_warnings(v.warnings)
        }
    }
}

/// A deletion guard's answer to `review` ([`retire::review`]).
async fn guard_deletion(
    guard: retire::Guard,
    state: Arc<AdmissionState>,
    review: AdmissionReview,
) -> axum::response::Response {
    let Some(req) = review.request else {
        return (StatusCode::BAD_REQUEST, "AdmissionReview without a request").into_response();
    };
    let response = retire::review(
        guard,
        &state.client,
        state.clock.as_ref(),
        state.retirement_timeout,
        &req,
    )
    .await;
    Json(response.into_review()).into_response()
}

async fn mutate_pod(
    State(state): State<Arc<AdmissionState>>,
    Json(review): Json<AdmissionReview>,
) -> axum::response::Response {
    let Some(req) = review.request else {
        return (StatusCode::BAD_REQUEST, "AdmissionReview without a request").into_response();
    };
    Json(pod_response(&state, &req).await.into_review()).into_response()
}

async fn pod_response(state: &AdmissionState, req: &AdmissionRequest) -> AdmissionResponse {
    if req.operation != "CREATE" {
        return AdmissionResponse::allow(&req.uid);
    }
    let Some(object) = &req.object else {
        return AdmissionResponse::allow(&req.uid);
    };
    let pod: Pod = match serde_json::from_value(object.clone()) {
        Ok(p) => p,
        Err(e) => return AdmissionResponse::deny(&req.uid, 400, format!("cannot read pod: {e}")),
    };
    let namespace = req
        .namespace
        .clone()
        .or(pod.metadata.namespace.clone())
        .unwrap_or_default();
    let shown = pod
        .metadata
        .name
        .clone()
        .or(pod.metadata.generate_name.clone())
        .unwrap_or_default();
    let refuse = |code, message: String| {
        tracing::warn!(namespace, pod = %shown, %message, "refused runner pod");
        AdmissionResponse::deny(&req.uid, code, message)
    };
    // Check the shape first, so the message names the first thing to fix.
    if let Err(problem) = pod::patch(
        &pod,
        &pod::Injection::Token {
            secret: "",
            expires_at: None,
        },
    ) {
        return refuse(403, problem.to_string());
    }
    let Some(scope) = pod_scope(&pod) else {
        return refuse(403, pod::PodProblem::NoScope.to_string());
    };
    // Which scope and credentials the pod may use is its owners' to say, never the pod's.
    let owners = crate::authority::Owners {
        client: &state.client,
        runners: None,
        sets: None,
    };
    let authority = match crate::authority::of_pod(&pod, &owners).await {
        Ok(Ok(authority)) => authority,
        Ok(Err(untrusted)) => {
            return refuse(
                403,
                format!("no runner registration for this pod: {untrusted}"),
            );
        }
        Err(e) => {
            return refuse(
                403,
                format!("cannot look up the owners of the pod, so it gets no registration: {e}"),
            );
        }
    };
    if scope != authority.scope {
        let hangar_core::authority::Granter {
            kind, name: owner, ..
        } = &authority.owner;
        return refuse(
            403,
            format!(
                "the runner container's environment names {} but its {kind} {owner} registers \
                 at {}; the pod may only register where its owner does",
                github_scope(&scope),
                github_scope(&authority.scope)
            ),
        );
    }
    let jit_target = if jit::wants_jit(&pod) {
        match jit::target(&pod) {
            Ok(t) => Some(t),
            Err(problem) => return refuse(403, problem.to_string()),
        }
    } else {
        None
    };
    let scope = github_scope(&scope);
    let credentials = authority.credentials_secret.as_deref();
    if let Some(target) = jit_target {
        let secret = jit::secret_name(&target.name);
        // A create of a pod that exists already (a controller acting on a stale cache) fails
        // with AlreadyExists after admission: generating for it would replace the live pod's
        // runner and Secret. Admit it untouched by GitHub; the apiserver refuses it.
        let exists = match state
            .registrations
            .pod_exists(&namespace, &target.name)
            .await
        {
            Ok(exists) => exists,
            Err(e) => return refuse(403, e.to_string()),
        };
        if exists {
            tracing::info!(namespace, pod = %shown,
                           "the pod exists already: no JIT configuration for a create that fails");
        }
        let runner_id = if req.dry_run == Some(true) || exists {
            None
        } else {
            match state
                .registrations
                .jit(&namespace, &scope, credentials, &target)
                .await
            {
                Ok(p) => Some(p.runner_id),
                // 403 for the same reason as below.
                Err(e) => return refuse(403, e.to_string()),
            }
        };
        let injection = pod::Injection::Jit {
            secret: &secret,
            runner_id,
        };
        return match pod::patch(&pod, &injection) {
            Ok(ops) => {
                tracing::info!(namespace, pod = %shown, %scope, %secret, ?runner_id,
                               "injected JIT configuration");
                AdmissionResponse::patch(&req.uid, &ops)
            }
            Err(problem) => refuse(403, problem.to_string()),
        };
    }
    let provided = if req.dry_run == Some(true) {
        state
            .registrations
            .peek(&namespace, &scope, credentials)
            .await
    } else {
        let now =
            jiff::Timestamp::try_from(state.clock.now()).unwrap_or_else(|_| jiff::Timestamp::now());
        state
            .registrations
            .ensure(&namespace, &scope, credentials, now)
            .await
    };
    let provided = match provided {
        Ok(p) => p,
        // 403 even when GitHub is down: the apiserver passes the code on to the creating
        // client, and clients retry 503s themselves (kube-rs for minutes), while the pod's
        // controller already retries with its own back-off.
        Err(e) => return refuse(403, e.to_string()),
    };
    let injection = pod::Injection::Token {
        secret: &provided.secret,
        expires_at: Some(provided.expires_at.as_str()).filter(|s| !s.is_empty()),
    };
    match pod::patch(&pod, &injection) {
        Ok(ops) => {
            tracing::info!(namespace, pod = %shown, %scope, secret = %provided.secret,
                           "injected registration credential");
            AdmissionResponse::patch(&req.uid, &ops)
        }
        Err(problem) => refuse(403, problem.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(operation: &str, object: Value, old: Option<Value>) -> AdmissionRequest {
        AdmissionRequest {
            uid: "u".into(),
            operation: operation.into(),
            object: Some(object),
            old_object: old,
            ..Default::default()
        }
    }

    fn bad_rd() -> Value {
        json!({"apiVersion": "actions.summerwind.dev/v1alpha1", "kind": "RunnerDeployment",
               "metadata": {"name": "rd", "namespace": "n"},
               "spec": {"template": {"spec": {"organization": "o", "imagePullPolicy": "always"}}}})
    }

    #[test]
    fn an_invalid_object_is_denied_with_its_kind_name_and_field() {
        let r = validate_request("RunnerDeployment", &request("CREATE", bad_rd(), None));
        assert!(!r.allowed);
        let message = r.status.unwrap().message;
        assert!(
            message
                .starts_with("RunnerDeployment rd is invalid: spec.template.spec.imagePullPolicy"),
            "{message}"
        );
    }

    #[test]
    fn an_update_that_keeps_the_spec_is_allowed_even_if_invalid() {
        let mut new = bad_rd();
        new["metadata"]["finalizers"] = json!([]);
        let r = validate_request("RunnerDeployment", &request("UPDATE", new, Some(bad_rd())));
        assert!(r.allowed);
        // A changed spec is validated.
        let mut changed = bad_rd();
        changed["spec"]["replicas"] = json!(2);
        let r = validate_request(
            "RunnerDeployment",
            &request("UPDATE", changed, Some(bad_rd())),
        );
        assert!(!r.allowed);
    }

    #[test]
    fn a_deleting_object_is_never_blocked() {
        let mut new = bad_rd();
        new["metadata"]["deletionTimestamp"] = json!("2030-01-01T00:00:00Z");
        new["spec"]["replicas"] = json!(0);
        let r = validate_request("RunnerDeployment", &request("UPDATE", new, Some(bad_rd())));
        assert!(r.allowed);
    }

    #[test]
    fn an_unreadable_object_is_denied_with_the_parse_error() {
        let r = validate_request(
            "Runner",
            &request(
                "CREATE",
                json!({"metadata": {"name": "x"}, "spec": {"labels": "gpu"}}),
                None,
            ),
        );
        assert!(!r.allowed);
        assert!(
            r.status
                .unwrap()
                .message
                .starts_with("cannot read Runner x")
        );
    }
}
