//! ghsim's responses and the client's requests against GitHub's OpenAPI description
//! (`@octokit/openapi`: `api.github.com.json`, and `ghec.json` for enterprise paths).
//!
//! The description is OpenAPI 3.0: schemas say `nullable: true` where JSON Schema says
//! `"type": [T, "null"]`, and refer to each other with `#/components/schemas/…`. Each schema
//! under test is validated (draft 2020-12, formats checked) inside a root document that
//! carries the converted `components`, so the references resolve as they do in the
//! description itself.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use ghsim::world::{GroupOwner, JitRequest, SubmitJobs, Visibility};
use ghsim::{Sim, SimConfig};
use hangar_github::{
    AppCredentials, AppIdentifier, ClientOptions, Credentials, Endpoint, GitHubApi, GitHubClient,
    JitConfigRequest, ManualClock, RunStatus, RunnerId, Scope, Secret,
};
use serde_json::{Value, json};

const PAT: &str = "ghp_conformance";

/// One OpenAPI description with its schemas converted to JSON Schema 2020-12.
struct Spec {
    doc: Value,
    components: Value,
}

/// Rewrites OpenAPI 3.0 `nullable` into JSON Schema.
fn convert(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(convert).collect()),
        Value::Object(map) => {
            let mut out: serde_json::Map<String, Value> = map
                .iter()
                .filter(|(k, _)| *k != "nullable")
                .map(|(k, v)| (k.clone(), convert(v)))
                .collect();
            if map.get("nullable") != Some(&Value::Bool(true)) {
                return Value::Object(out);
            }
            if let Some(Value::Array(values)) = out.get_mut("enum") {
                values.push(Value::Null);
            }
            match out.get("type").cloned() {
                Some(Value::String(t)) => {
                    out.insert("type".into(), json!([t, "null"]));
                    Value::Object(out)
                }
                _ => json!({"anyOf": [Value::Object(out), {"type": "null"}]}),
            }
        }
        other => other.clone(),
    }
}

impl Spec {
    fn load(file: &str) -> Self {
        let path = ghsim::conformance::package_file(
            ghsim::conformance::OPENAPI,
            &format!("generated/{file}"),
        )
        .expect("@octokit/openapi installs (needs npm and the npm registry)");
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let components = json!({"schemas": convert(&doc["components"]["schemas"])});
        Self { doc, components }
    }

    /// Follows a `#/components/...` reference of the description (responses, parameters).
    fn resolve<'a>(&'a self, value: &'a Value) -> &'a Value {
        match value.get("$ref").and_then(Value::as_str) {
            Some(pointer) => self.resolve(
                self.doc
                    .pointer(pointer.trim_start_matches('#'))
                    .expect("reference resolves"),
            ),
            None => value,
        }
    }

    fn operation(&self, method: &str, path: &str) -> Option<&Value> {
        self.doc["paths"]
            .get(path)?
            .get(method.to_ascii_lowercase())
    }

    fn response_schema(&self, method: &str, path: &str, status: u16) -> Option<Value> {
        let response = self.operation(method, path)?["responses"].get(status.to_string())?;
        self.resolve(response)["content"]["application/json"]
            .get("schema")
            .cloned()
    }

    fn documents_status(&self, method: &str, path: &str, status: u16) -> bool {
        self.operation(method, path)
            .is_some_and(|op| op["responses"].get(status.to_string()).is_some())
    }

    fn request_schema(&self, method: &str, path: &str) -> Option<(Value, bool)> {
        let body = self.resolve(self.operation(method, path)?.get("requestBody")?);
        let required = body["required"].as_bool().unwrap_or(false);
        Some((
            body["content"]["application/json"]["schema"].clone(),
            required,
        ))
    }

    fn query_parameters(&self, method: &str, path: &str) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        let path_level = self.doc["paths"][path]["parameters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let op_level = self
            .operation(method, path)
            .and_then(|op| op["parameters"].as_array().cloned())
            .unwrap_or_default();
        for p in path_level.iter().chain(op_level.iter()) {
            let p = self.resolve(p);
            if p["in"] == "query" {
                names.insert(p["name"].as_str().unwrap().to_owned());
            }
        }
        names
    }

    fn errors(&self, schema: &Value, instance: &Value) -> Vec<String> {
        let root = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "components": self.components,
            "allOf": [convert(schema)],
        });
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&root)
            .expect("schema compiles");
        validator
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect()
    }

    fn schema(&self, name: &str) -> Value {
        json!({"$ref": format!("#/components/schemas/{name}")})
    }
}

fn specs() -> &'static (Spec, Spec) {
    static SPECS: OnceLock<(Spec, Spec)> = OnceLock::new();
    SPECS.get_or_init(|| (Spec::load("api.github.com.json"), Spec::load("ghec.json")))
}

/// The description that documents `path`: enterprise paths are only in the GHEC one.
fn spec_for(method: &str, path: &str) -> &'static Spec {
    let (dotcom, ghec) = specs();
    if dotcom.operation(method, path).is_some() {
        dotcom
    } else {
        ghec
    }
}

fn app_key() -> (String, String) {
    use rsa::pkcs1::{EncodeRsaPrivateKey, LineEnding};
    use rsa::pkcs8::EncodePublicKey;
    let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
    (
        key.to_pkcs1_pem(LineEnding::LF).unwrap().to_string(),
        key.to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap(),
    )
}

struct World {
    gh: ghsim::Running,
    http: reqwest::Client,
    ids: std::collections::HashMap<&'static str, u64>,
    private_key: String,
    app_id: u64,
    clock: ManualClock,
}

/// A world with something in every state: runners offline/online/busy at every scope, jobs
/// queued/in progress/completed, groups, an App installation.
async fn world() -> World {
    let clock = ManualClock::at_epoch_2026();
    let sim = Sim::new(SimConfig {
        clock: Arc::new(clock.clone()),
        ..SimConfig::default()
    });
    let (private_key, public_key) = app_key();
    let mut ids = std::collections::HashMap::new();
    let app_id = sim.update(|w, now| {
        w.add_pat(PAT, "conformance");
        w.add_org("acme", Some("big"));
        w.add_repo("acme", "app", true);
        w.add_repo("acme", "lib", false);
        w.add_group(
            GroupOwner::Org("acme".into()),
            "app-only",
            Visibility::Selected,
            &["acme/app".into()],
        )
        .unwrap();
        w.add_group(
            GroupOwner::Enterprise("big".into()),
            "shared",
            Visibility::Selected,
            &["acme".into()],
        )
        .unwrap();
        let app = w.add_app(None, "hangar", &public_key).unwrap().id;
        ids.insert(
            "installation_id",
            w.add_installation(app, "acme", now).unwrap(),
        );
        for (key, scope) in [
            ("org_runner", Scope::org("acme")),
            ("enterprise_runner", Scope::enterprise("big")),
        ] {
            let request = JitRequest {
                name: Some(format!("{key}-0")),
                runner_group_id: Some(1),
                labels: Some(vec![
                    "self-hosted".into(),
                    "Linux".into(),
                    "X64".into(),
                    "gpu".into(),
                ]),
                work_folder: None,
            };
            ids.insert(key, w.generate_jit(&scope, request, now).unwrap().0);
        }
        let scope = Scope::repo("acme", "app");
        let (token, _) = w.create_runner_token(&scope, ghsim::world::TokenKind::Registration, now);
        let registration = ghsim::world::RegisterRunner {
            url: "http://x/acme/app".into(),
            token,
            name: "repo_runner-0".into(),
            labels: vec!["gpu".into()],
            no_default_labels: false,
            runner_group: None,
            ephemeral: false,
            replace: false,
        };
        ids.insert(
            "repo_runner",
            w.register_runner(registration, now).unwrap().0,
        );
        app
    });
    let gh = ghsim::spawn(sim).await.unwrap();
    // The org runner is busy with one job, the repository runner completed another, a third
    // job waits for a label nobody has.
    gh.sim.update(|w, now| {
        let credential = |id: u64| w.runners[&id].credential.clone();
        let (org_cred, repo_cred) = (
            credential(ids["org_runner"]),
            credential(ids["repo_runner"]),
        );
        let submit = |n: u32, labels: &[&str]| SubmitJobs {
            repository: "acme/app".into(),
            count: n,
            labels: labels.iter().map(|s| s.to_string()).collect(),
            duration_ms: 0,
            conclusion: None,
            workflow: Some("CI".into()),
            job_name: None,
        };
        let (_, org_session) = w
            .open_session(&org_cred, Some("linux".into()), None, now)
            .unwrap();
        let (run, _) = w
            .submit_jobs(&submit(2, &["self-hosted", "gpu"]), now)
            .unwrap();
        w.poll(&org_session, now).unwrap().unwrap();
        let (_, repo_session) = w
            .open_session(&repo_cred, Some("linux".into()), None, now)
            .unwrap();
        let done = w.poll(&repo_session, now).unwrap().unwrap();
        w.complete_job(&repo_cred, done.id, "success", now).unwrap();
        w.submit_jobs(&submit(1, &["self-hosted", "arm64"]), now)
            .unwrap();
        ids.insert("run_id", run);
        ids.insert("job_id", done.id);
    });
    // A hook of the repository and one of the organization (deliveries go nowhere).
    for (key, repository) in [("repo_hook", Some("acme/app")), ("org_hook", None)] {
        ids.insert(key, install_hook(&gh, repository));
    }
    World {
        gh,
        http: hangar_github::client::http_builder()
            .unwrap()
            .build()
            .unwrap(),
        ids,
        private_key,
        app_id,
        clock,
    }
}

/// A hook of `acme` (of `repository` if given), as the REST API makes one; its id.
fn install_hook(gh: &ghsim::Running, repository: Option<&str>) -> u64 {
    gh.sim
        .install_hook(ghsim::webhooks::Hook {
            id: 0,
            url: "http://127.0.0.1:9/hook".into(),
            secret: Some(hangar_github::Secret::new("s".to_owned())),
            content_type: ghsim::webhooks::ContentType::Json,
            events: vec!["workflow_job".into()],
            owner: Some("acme".into()),
            repository: repository.map(str::to_owned),
            active: true,
            created_at: Some("2026-01-01T00:00:00Z".into()),
        })
        .id
}

/// The body of a hook-creating request.
fn hook_body() -> Value {
    json!({"name": "web", "config": {"url": "http://127.0.0.1:9/new", "content_type": "json"}, "events": ["workflow_job"]})
}

impl World {
    fn concrete(&self, template: &str) -> String {
        let runner = if template.starts_with("/repos") {
            self.ids["repo_runner"]
        } else if template.starts_with("/orgs") {
            self.ids["org_runner"]
        } else {
            self.ids["enterprise_runner"]
        };
        template
            .replace("{owner}", "acme")
            .replace("{repo}", "app")
            .replace("{org}", "acme")
            .replace("{enterprise}", "big")
            .replace("{runner_id}", &runner.to_string())
            .replace(
                "{hook_id}",
                &self.ids[if template.starts_with("/repos") {
                    "repo_hook"
                } else {
                    "org_hook"
                }]
                .to_string(),
            )
            .replace("{run_id}", &self.ids["run_id"].to_string())
            .replace("{job_id}", &self.ids["job_id"].to_string())
            .replace(
                "{installation_id}",
                &self.ids["installation_id"].to_string(),
            )
    }

    fn jwt(&self) -> String {
        use hangar_github::Clock;
        let key =
            hangar_github::auth::app::encoding_key(&Secret::new(self.private_key.clone())).unwrap();
        hangar_github::auth::app::sign_app_jwt(
            &AppIdentifier::Id(self.app_id),
            &key,
            self.clock.now(),
        )
        .unwrap()
        .expose()
        .to_owned()
    }

    async fn call(&self, method: &str, template: &str, body: Option<Value>) -> (u16, Value) {
        let url = self
            .gh
            .url
            .join(self.concrete(template).trim_start_matches('/'))
            .unwrap();
        let jwt = template.starts_with("/app/") || template.ends_with("/installation");
        let token = if jwt { self.jwt() } else { PAT.to_owned() };
        let mut request = self
            .http
            .request(method.parse().unwrap(), url)
            .bearer_auth(token)
            .header("accept", "application/vnd.github+json");
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let bytes = response.bytes().await.unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

fn jit_body(name: &str) -> Value {
    json!({"name": name, "runner_group_id": 1, "labels": ["self-hosted", "gpu"], "work_folder": "_work"})
}

fn check(method: &str, template: &str, status: u16, body: &Value, failures: &mut Vec<String>) {
    let spec = spec_for(method, template);
    if spec.operation(method, template).is_none() {
        failures.push(format!(
            "{method} {template}: not in the OpenAPI description"
        ));
        return;
    }
    let schema = match spec.response_schema(method, template, status) {
        Some(schema) => schema,
        None if status == 204 => return,
        // Statuses an operation does not document (401, 403 rate limits, …) carry GitHub's
        // generic error body.
        None if status >= 400 && !spec.documents_status(method, template, status) => {
            spec.schema("basic-error")
        }
        None => {
            failures.push(format!(
                "{method} {template}: status {status} has no JSON schema"
            ));
            return;
        }
    };
    for error in spec.errors(&schema, body) {
        failures.push(format!("{method} {template} {status}: {error}"));
    }
}

#[tokio::test]
async fn every_endpoint_answers_as_the_description_says() {
    let w = world().await;
    let mut failures = Vec::new();
    let mut covered = BTreeSet::new();
    for (method, template) in ghsim::rest::endpoints() {
        let body = if template.ends_with("generate-jitconfig") {
            Some(jit_body(&format!("new-{}", covered.len())))
        } else if template.ends_with("/hooks") && method == "POST" {
            Some(hook_body())
        } else {
            None
        };
        let (status, response) = if method == "DELETE" && template.ends_with("{hook_id}") {
            // Delete a fresh hook of the same owner.
            let repository = template.starts_with("/repos").then_some("acme/app");
            let id = install_hook(&w.gh, repository);
            let concrete = template.replace("{hook_id}", &id.to_string());
            w.call(method, &concrete, None).await
        } else if method == "DELETE" {
            // Delete something deletable: a fresh runner of the same scope.
            let scope = if template.starts_with("/repos") {
                Scope::repo("acme", "app")
            } else if template.starts_with("/orgs") {
                Scope::org("acme")
            } else {
                Scope::enterprise("big")
            };
            let id = w.gh.sim.update(|world, now| {
                let request = JitRequest {
                    name: Some(format!("doomed-{}", covered.len())),
                    runner_group_id: Some(1),
                    labels: Some(vec!["x".into()]),
                    work_folder: None,
                };
                world.generate_jit(&scope, request, now).unwrap().0
            });
            let concrete = template.replace("{runner_id}", &id.to_string());
            w.call(method, &concrete, None).await
        } else {
            w.call(method, &template, body).await
        };
        assert!(
            (200..300).contains(&status),
            "{method} {template}: {status} {response}"
        );
        check(method, &template, status, &response, &mut failures);
        covered.insert((method, template));
    }
    // Documented error answers.
    let (status, body) = w
        .call("DELETE", "/orgs/{org}/actions/runners/{runner_id}", None)
        .await;
    assert_eq!(status, 422, "the org runner is busy: {body}");
    check(
        "DELETE",
        "/orgs/{org}/actions/runners/{runner_id}",
        status,
        &body,
        &mut failures,
    );
    let (status, body) = w
        .call(
            "POST",
            "/orgs/{org}/actions/runners/generate-jitconfig",
            Some(jit_body("org_runner-0")),
        )
        .await;
    assert_eq!(status, 409);
    check(
        "POST",
        "/orgs/{org}/actions/runners/generate-jitconfig",
        status,
        &body,
        &mut failures,
    );
    let (status, body) = w
        .call(
            "POST",
            "/orgs/{org}/actions/runners/generate-jitconfig",
            Some(json!({"name": "x"})),
        )
        .await;
    assert_eq!(status, 422);
    check(
        "POST",
        "/orgs/{org}/actions/runners/generate-jitconfig",
        status,
        &body,
        &mut failures,
    );
    let (status, body) = w
        .call("GET", "/orgs/{org}/actions/runners/999999", None)
        .await;
    assert_eq!(status, 404);
    check(
        "GET",
        "/orgs/{org}/actions/runners/{runner_id}",
        status,
        &body,
        &mut failures,
    );
    let unauthorized = w
        .http
        .get(w.gh.url.join("orgs/acme/actions/runners").unwrap())
        .bearer_auth("ghp_nope")
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
    let body: Value = unauthorized.json().await.unwrap();
    check(
        "GET",
        "/orgs/{org}/actions/runners",
        401,
        &body,
        &mut failures,
    );
    assert!(
        failures.is_empty(),
        "{} schema violations:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(covered.len(), ghsim::rest::endpoints().len());
}

#[tokio::test]
async fn the_clients_requests_are_what_the_description_documents() {
    let w = world().await;
    let url = w.gh.url.as_str();
    let endpoint = Endpoint::custom(url, url).unwrap();
    let options = ClientOptions {
        cache: false,
        clock: Arc::new(w.clock.clone()),
        ..ClientOptions::default()
    };
    let pat =
        GitHubClient::new(endpoint.clone(), Credentials::token(PAT), options.clone()).unwrap();
    let app = GitHubClient::new(
        endpoint,
        Credentials::App(AppCredentials {
            app: AppIdentifier::Id(w.app_id),
            installation_id: w.ids["installation_id"],
            private_key: Secret::new(w.private_key.clone()),
        }),
        options,
    )
    .unwrap();
    w.gh.sim.update(|world, _| world.requests.clear());
    for (client, scopes) in [
        (
            &pat,
            vec![
                Scope::repo("acme", "app"),
                Scope::org("acme"),
                Scope::enterprise("big"),
            ],
        ),
        (&app, vec![Scope::repo("acme", "app"), Scope::org("acme")]),
    ] {
        for scope in &scopes {
            client.registration_token(scope).await.unwrap();
            client.remove_token(scope).await.unwrap();
            let runners = client.list_runners(scope).await.unwrap();
            client
                .find_runner(scope, &runners[0].name)
                .await
                .unwrap()
                .unwrap();
            client.get_runner(scope, runners[0].id).await.unwrap();
            let name = format!(
                "client-{}-{}",
                client.credential(),
                scope.config_path().replace('/', "-")
            );
            let request = JitConfigRequest {
                name,
                runner_group_id: 1,
                labels: vec!["self-hosted".into()],
                work_folder: Some("_work".into()),
            };
            let jit = client.generate_jit_config(scope, &request).await.unwrap();
            client
                .delete_runner(scope, RunnerId(jit.runner.id.0))
                .await
                .unwrap();
        }
        client
            .list_org_runner_groups("acme", Some("app"))
            .await
            .unwrap();
        client
            .list_workflow_runs("acme", "app", RunStatus::Queued)
            .await
            .unwrap();
        let run = client
            .list_workflow_runs("acme", "app", RunStatus::InProgress)
            .await
            .unwrap();
        client.list_jobs("acme", "app", run[0].id).await.unwrap();
    }
    pat.list_enterprise_runner_groups("big", Some("acme"))
        .await
        .unwrap();

    let requests = w.gh.sim.read(|world, _| world.requests.clone());
    let mut failures = Vec::new();
    let mut seen = BTreeSet::new();
    for r in &requests {
        let spec = spec_for(&r.method, &r.template);
        if spec.operation(&r.method, &r.template).is_none() {
            failures.push(format!(
                "{} {}: not in the description",
                r.method, r.template
            ));
            continue;
        }
        let allowed = spec.query_parameters(&r.method, &r.template);
        for key in &r.query {
            if !allowed.contains(key) {
                failures.push(format!(
                    "{} {}: undocumented query parameter {key}",
                    r.method, r.template
                ));
            }
        }
        match (spec.request_schema(&r.method, &r.template), &r.body) {
            (Some((schema, _)), Some(body)) => {
                for e in spec.errors(&schema, body) {
                    failures.push(format!("{} {} body: {e}", r.method, r.template));
                }
            }
            (Some((_, true)), None) => failures.push(format!(
                "{} {}: required body missing",
                r.method, r.template
            )),
            (None, Some(body)) => failures.push(format!(
                "{} {}: body {body} where none is documented",
                r.method, r.template
            )),
            _ => {}
        }
        seen.insert(format!("{} {}", r.method, r.template));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every operation of the trait was exercised, at every scope that has it.
    let mut expected: BTreeSet<String> = BTreeSet::new();
    for prefix in [
        "/repos/{owner}/{repo}",
        "/orgs/{org}",
        "/enterprises/{enterprise}",
    ] {
        for op in [
            "GET {p}/actions/runners",
            "GET {p}/actions/runners/{runner_id}",
            "DELETE {p}/actions/runners/{runner_id}",
            "POST {p}/actions/runners/registration-token",
            "POST {p}/actions/runners/remove-token",
            "POST {p}/actions/runners/generate-jitconfig",
        ] {
            expected.insert(op.replace("{p}", prefix));
        }
    }
    for op in [
        "GET /orgs/{org}/actions/runner-groups",
        "GET /enterprises/{enterprise}/actions/runner-groups",
        "GET /repos/{owner}/{repo}/actions/runs",
        "GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs",
        "POST /app/installations/{installation_id}/access_tokens",
    ] {
        expected.insert(op.to_owned());
    }
    assert_eq!(seen, expected);
}

#[test]
fn the_validator_itself_rejects_what_the_description_forbids() {
    let (dotcom, _) = specs();
    let runner = dotcom.schema("runner");
    let good = json!({"id": 1, "name": "r", "os": "linux", "status": "online", "busy": false, "labels": [], "version": null});
    assert_eq!(
        dotcom.errors(&runner, &good),
        Vec::<String>::new(),
        "nullable version accepts null"
    );
    let missing = json!({"id": 1, "name": "r", "os": "linux", "status": "online", "labels": []});
    assert!(
        !dotcom.errors(&runner, &missing).is_empty(),
        "busy is required"
    );
    let wrong = json!({"id": "1", "name": "r", "os": "linux", "status": "online", "busy": false, "labels": []});
    assert!(
        !dotcom.errors(&runner, &wrong).is_empty(),
        "id is an integer"
    );
    let bad_label = json!({"id": 1, "name": "r", "os": "linux", "status": "online", "busy": false, "labels": [{"id": 1}]});
    assert!(
        !dotcom.errors(&runner, &bad_label).is_empty(),
        "references are followed"
    );
    let job = dotcom.schema("job");
    let bad_time = json!({"created_at": "yesterday"});
    assert!(
        dotcom
            .errors(&job, &bad_time)
            .iter()
            .any(|e| e.contains("date-time")),
        "formats are checked"
    );
}
