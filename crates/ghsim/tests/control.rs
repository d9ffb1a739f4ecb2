//! The control API, accounting, Prometheus text, scenarios, GitHub's error bodies.

use std::sync::Arc;
use std::time::Duration;

use ghsim::{Sim, SimConfig};
use hangar_github::ManualClock;
use serde_json::{Value, json};

async fn start(clock: &ManualClock) -> ghsim::Running {
    let sim = Sim::new(SimConfig {
        clock: Arc::new(clock.clone()),
        ..SimConfig::default()
    });
    ghsim::spawn(sim).await.unwrap()
}

fn http() -> reqwest::Client {
    hangar_github::client::http_builder()
        .unwrap()
        .build()
        .unwrap()
}

async fn post(gh: &ghsim::Running, path: &str, body: Value) -> (u16, Value) {
    let response = http()
        .post(gh.url.join(path).unwrap())
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get(
    gh: &ghsim::Running,
    path: &str,
    token: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = http().get(gh.url.join(path).unwrap());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

#[tokio::test]
async fn world_is_built_and_inspected_over_http() {
    let clock = ManualClock::at_epoch_2026();
    let gh = start(&clock).await;
    assert_eq!(
        post(&gh, "_ghsim/enterprises", json!({"slug": "big"}))
            .await
            .0,
        201
    );
    assert_eq!(
        post(
            &gh,
            "_ghsim/orgs",
            json!({"login": "acme", "enterprise": "big"})
        )
        .await
        .0,
        201
    );
    assert_eq!(
        post(&gh, "_ghsim/repos", json!({"full_name": "acme/app"}))
            .await
            .0,
        201
    );
    assert_eq!(
        post(
            &gh,
            "_ghsim/tokens",
            json!({"token": "ghp_x", "label": "ops"})
        )
        .await
        .0,
        201
    );
    let (status, group) = post(
        &gh,
        "_ghsim/runner-groups",
        json!({"owner": "acme", "name": "gpu", "visibility": "selected", "selected": ["acme/app"]}),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(group["visibility"], "selected");
    let (status, jobs) = post(
        &gh,
        "_ghsim/jobs",
        json!({"repository": "acme/app", "count": 3, "labels": ["self-hosted"]}),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(jobs["job_ids"].as_array().unwrap().len(), 3);
    assert_eq!(
        post(&gh, "_ghsim/jobs", json!({"repository": "acme/nope"}))
            .await
            .0,
        404
    );
    let (_, _, state) = get(&gh, "_ghsim/state", None).await;
    let state: Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["jobs"].as_array().unwrap().len(), 3);
    assert_eq!(state["orgs"][0]["enterprise"], "big");

    let (status, _, body) = get(&gh, "orgs/acme/actions/runners", Some("ghp_x")).await;
    assert_eq!(status, 200, "{body}");
    let accounting: Value =
        serde_json::from_str(&get(&gh, "_ghsim/accounting", None).await.2).unwrap();
    assert_eq!(accounting["api_calls"][0]["credential"], "pat:ops");
    assert_eq!(accounting["jobs_summary"]["queued"], 3);
    let (status, headers, metrics) = get(&gh, "_ghsim/metrics", None).await;
    assert_eq!(status, 200);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert!(metrics.contains("ghsim_api_calls_total{endpoint=\"GET /orgs/{org}/actions/runners\",credential=\"pat:ops\"} 1"), "{metrics}");
    assert!(metrics.contains("ghsim_jobs{status=\"queued\"} 3"));
}

#[tokio::test]
async fn github_error_bodies_and_headers() {
    let clock = ManualClock::at_epoch_2026();
    let gh = start(&clock).await;
    gh.sim.update(|w, _| {
        w.add_pat("ghp_ok", "ok");
        w.add_org("acme", None);
    });
    let (status, _, body) = get(&gh, "orgs/acme/actions/runners", None).await;
    assert_eq!(status, 401);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["message"], "Requires authentication");
    assert_eq!(body["status"], "401");
    let (status, _, body) = get(&gh, "orgs/acme/actions/runners", Some("ghp_bad")).await;
    assert_eq!(
        (
            status,
            serde_json::from_str::<Value>(&body).unwrap()["message"].clone()
        ),
        (401, json!("Bad credentials"))
    );
    let (status, _, body) = get(&gh, "no/such/route", Some("ghp_ok")).await;
    assert_eq!(status, 404);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["documentation_url"],
        "https://docs.github.com/rest"
    );
    let (status, _, _) = get(&gh, "orgs/ghost/actions/runners", Some("ghp_ok")).await;
    assert_eq!(status, 404);

    let (status, headers, _) = get(&gh, "orgs/acme/actions/runners", Some("ghp_ok")).await;
    assert_eq!(status, 200);
    assert_eq!(headers["cache-control"], "private, max-age=60, s-maxage=60");
    assert_eq!(headers["x-ratelimit-limit"], "5000");
    assert_eq!(
        headers["x-ratelimit-remaining"], "4998",
        "the 404 counted too"
    );
    assert_eq!(headers["x-ratelimit-resource"], "core");
    let etag = headers["etag"].to_str().unwrap().to_owned();
    assert!(etag.starts_with("W/\""));
    let response = http()
        .get(gh.url.join("orgs/acme/actions/runners").unwrap())
        .bearer_auth("ghp_ok")
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 304);
    assert_eq!(
        response.headers()["x-ratelimit-remaining"],
        "4998",
        "a 304 is free"
    );
    assert_eq!(response.headers()["etag"].to_str().unwrap(), etag);
}

#[tokio::test]
async fn faults_are_read_and_merged_at_run_time() {
    let clock = ManualClock::at_epoch_2026();
    let gh = start(&clock).await;
    let response = http()
        .put(gh.url.join("_ghsim/faults").unwrap())
        .json(&json!({"server_error_rate": 0.25, "primary_budget": 10}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let faults: Value = serde_json::from_str(&get(&gh, "_ghsim/faults", None).await.2).unwrap();
    assert_eq!(faults["server_error_rate"], 0.25);
    assert_eq!(faults["secondary_retry_after_secs"], 60);
    let bad = http()
        .put(gh.url.join("_ghsim/faults").unwrap())
        .json(&json!({"webhook_drop_rate": 7}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
}

async fn put_faults(gh: &ghsim::Running, patch: Value) {
    let response = http()
        .put(gh.url.join("_ghsim/faults").unwrap())
        .json(&patch)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{patch}");
}

async fn with_runners_readable() -> (ManualClock, ghsim::Running) {
    let clock = ManualClock::at_epoch_2026();
    let gh = start(&clock).await;
    gh.sim.update(|w, _| {
        w.add_pat("ghp_ok", "ok");
        w.add_org("acme", None);
    });
    (clock, gh)
}

#[tokio::test]
async fn injected_401_and_404_have_githubs_bodies() {
    let (_clock, gh) = with_runners_readable().await;
    put_faults(&gh, json!({"bad_credentials_rate": 1.0})).await;
    let (status, headers, body) = get(&gh, "orgs/acme/actions/runners", Some("ghp_ok")).await;
    assert_eq!(status, 401);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest",
               "status": "401"})
    );
    assert!(!headers.contains_key("x-ratelimit-remaining"));

    put_faults(
        &gh,
        json!({"bad_credentials_rate": 0.0, "not_found_rate": 1.0}),
    )
    .await;
    let (status, headers, body) = get(&gh, "orgs/acme/actions/runners", Some("ghp_ok")).await;
    assert_eq!(status, 404);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest",
               "status": "404"})
    );
    assert_eq!(headers["x-ratelimit-limit"], "5000");

    put_faults(&gh, json!({"not_found_rate": 0.0})).await;
    assert_eq!(
        get(&gh, "orgs/acme/actions/runners", Some("ghp_ok"))
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn an_exhausted_primary_limit_answers_until_its_reset() {
    let (clock, gh) = with_runners_readable().await;
    let now = gh.sim.now().as_second();
    put_faults(
        &gh,
        json!({"primary_exhausted_until": now + 30, "primary_exhausted_status": 429}),
    )
    .await;
    let (status, headers, body) = get(&gh, "orgs/acme/actions/runners", Some("ghp_ok")).await;
    assert_eq!(status, 429);
    assert_eq!(headers["x-ratelimit-remaining"], "0");
    assert_eq!(headers["x-ratelimit-used"], "5000");
    assert_eq!(
        headers["x-ratelimit-reset"],
        (now + 30).to_string().as_str()
    );
    let message = serde_json::from_str::<Value>(&body).unwrap()["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap()
            .starts_with("API rate limit exceeded for user ID"),
        "{message}"
    );
    // `/rate_limit` stays free and answers.
    assert_eq!(get(&gh, "rate_limit", Some("ghp_ok")).await.0, 200);
    clock.advance(Duration::from_secs(31));
    let (status, headers, _) = get(&gh, "orgs/acme/actions/runners", Some("ghp_ok")).await;
    assert_eq!(status, 200, "the window is over at its reset");
    assert_ne!(headers["x-ratelimit-remaining"], "0");
}

#[tokio::test]
async fn timed_out_requests_answer_after_the_clients_timeout() {
    let (_clock, gh) = with_runners_readable().await;
    put_faults(&gh, json!({"timeout_rate": 1.0, "timeout_hold_ms": 2000})).await;
    let impatient = hangar_github::client::http_builder()
        .unwrap()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let error = impatient
        .get(gh.url.join("orgs/acme/actions/runners").unwrap())
        .bearer_auth("ghp_ok")
        .send()
        .await
        .unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    // The control API is not GitHub's: it answers at once.
    assert_eq!(get(&gh, "_ghsim/faults", None).await.0, 200);
}

#[tokio::test]
async fn reset_connections_get_no_answer() {
    let (_clock, gh) = with_runners_readable().await;
    put_faults(&gh, json!({"reset_rate": 1.0})).await;
    let error = http()
        .get(gh.url.join("orgs/acme/actions/runners").unwrap())
        .bearer_auth("ghp_ok")
        .send()
        .await
        .unwrap_err();
    assert!(!error.is_timeout() && error.status().is_none(), "{error:?}");
    put_faults(&gh, json!({"reset_rate": 0.0})).await;
    assert_eq!(
        get(&gh, "orgs/acme/actions/runners", Some("ghp_ok"))
            .await
            .0,
        200,
        "a new connection works"
    );
}

#[tokio::test]
async fn scenario_replays_on_the_simulated_clock() {
    let clock = ManualClock::at_epoch_2026();
    let gh = start(&clock).await;
    gh.sim.update(|w, _| {
        w.add_repo("acme", "app", true);
    });
    let trace = "# two bursts an hour apart\n\
        {\"at_ms\": 0, \"repository\": \"acme/app\", \"count\": 2, \"labels\": [\"self-hosted\"]}\n\
        {\"at_ms\": 3600000, \"repository\": \"acme/app\", \"count\": 3, \"duration_ms\": 5000}\n";
    let response = http()
        .post(gh.url.join("_ghsim/scenario").unwrap())
        .body(trace)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    for _ in 0..100 {
        if gh.sim.read(|w, _| w.jobs.len()) == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let times: Vec<i64> = gh
        .sim
        .read(|w, _| w.jobs.values().map(|j| j.created_at.as_second()).collect());
    assert_eq!(times.len(), 5);
    assert_eq!(
        times[4] - times[0],
        3600,
        "the second burst came an hour of simulated time later"
    );
    let bad = http()
        .post(gh.url.join("_ghsim/scenario").unwrap())
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn the_typed_client_reads_back_what_the_control_api_holds() {
    use ghsim::control::{Client, ControlError};
    use ghsim::webhooks::NewHook;
    use ghsim::world::{JobStatus, RegisterRunner, SubmitJobs, TokenKind};
    use hangar_github::RunnerStatus;

    let clock = ManualClock::at_epoch_2026();
    let gh = start(&clock).await;
    gh.sim.update(|w, _| {
        w.add_org("acme", None);
        w.add_repo("acme", "app", true);
    });
    let client = Client::new(gh.url.clone()).unwrap();
    client.add_token("ghp_typed", "typed").await.unwrap();
    let submitted = client
        .submit_jobs(&SubmitJobs {
            repository: "acme/app".into(),
            count: 2,
            labels: vec!["self-hosted".into()],
            duration_ms: 1000,
            conclusion: None,
            workflow: None,
            job_name: None,
        })
        .await
        .unwrap();
    assert_eq!(submitted.job_ids.len(), 2);

    let state = client.state().await.unwrap();
    let jobs: Vec<u64> = state.jobs.iter().map(|j| j.id).collect();
    assert_eq!(jobs, submitted.job_ids);
    assert!(state.jobs.iter().all(|j| j.status == JobStatus::Queued));
    assert_eq!(state.repos[0].full_name(), "acme/app");
    assert!(state.runners.is_empty());

    // A runner that registered, connected and picked up the first job.
    let running = gh.sim.update(|w, now| {
        let scope = hangar_github::Scope::org("acme");
        let (token, _) = w.create_runner_token(&scope, TokenKind::Registration, now);
        let request = RegisterRunner {
            url: format!("http://127.0.0.1/{}", scope.config_path()),
            token,
            name: "worker-1".into(),
            labels: vec!["self-hosted".into()],
            no_default_labels: false,
            runner_group: None,
            ephemeral: true,
            replace: false,
        };
        let (_, credential) = w.register_runner(request, now).unwrap();
        let session = w.open_session(&credential, None, None, now).unwrap().1;
        w.poll(&session, now).unwrap().unwrap().id
    });
    let state = client.state().await.unwrap();
    let [runner] = state.runners.as_slice() else {
        panic!("one runner, got {:?}", state.runners);
    };
    assert_eq!(runner.runner.name, "worker-1");
    assert_eq!(runner.runner.status, RunnerStatus::Online);
    assert!(runner.runner.busy);
    assert_eq!(runner.scope, "acme");
    assert_eq!(runner.running_job, Some(running));

    let (status, _, _) = get(&gh, "orgs/acme/actions/runners", Some("ghp_typed")).await;
    assert_eq!(status, 200);
    let accounting = client.accounting().await.unwrap();
    assert_eq!(accounting.api_calls[0].credential, "pat:typed");
    assert_eq!(accounting.jobs_summary.queued, 1);
    assert_eq!(accounting.jobs_summary.in_progress, 1);

    let faults = client
        .set_faults(&json!({"server_error_rate": 0.5}))
        .await
        .unwrap();
    assert_eq!(faults.server_error_rate, 0.5);
    assert_eq!(client.faults().await.unwrap(), faults);

    // Nobody listens at the hook's URL: the ping is recorded as failed, without a status.
    let hook = client
        .add_hook(&NewHook {
            url: "http://127.0.0.1:9/".into(),
            secret: Some("s".into()),
            content_type: Default::default(),
            events: vec!["workflow_job".into()],
            owner: None,
        })
        .await
        .unwrap();
    let deliveries = client.deliveries().await.unwrap();
    assert_eq!(deliveries[0].hook_id, hook.id);
    assert_eq!(deliveries[0].event, "ping");

    // Failures name the call and keep ghsim's answer.
    let refused = client
        .submit_jobs(&serde_json::from_value(json!({"repository": "acme/nope"})).unwrap())
        .await
        .unwrap_err();
    match refused {
        ControlError::Status { call, status, .. } => {
            assert_eq!((call.as_str(), status), ("POST /_ghsim/jobs", 404));
        }
        other => panic!("expected a status error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_organization_lists_the_enterprise_groups_shared_with_it_as_inherited() {
    let clock = ManualClock::at_epoch_2026();
    let gh = start(&clock).await;
    gh.sim.update(|w, _| {
        w.add_pat("ghp_groups", "groups");
        w.add_org("acme", Some("big"));
        w.add_org("other", Some("big"));
        for (name, orgs) in [("shared", "acme"), ("elsewhere", "other")] {
            w.add_group(
                ghsim::world::GroupOwner::Enterprise("big".into()),
                name,
                ghsim::world::Visibility::Selected,
                &[orgs.into()],
            )
            .unwrap();
        }
    });
    let (status, _, body) = get(&gh, "orgs/acme/actions/runner-groups", Some("ghp_groups")).await;
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    let groups: Vec<(String, bool)> = body["runner_groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap().to_owned(),
                g["inherited"].as_bool().unwrap(),
            )
        })
        .collect();
    // Its own default group, and the enterprise group shared with it; not the enterprise's
    // default group, nor a group shared with another organization.
    assert_eq!(
        groups,
        [("Default".to_owned(), false), ("shared".to_owned(), true)]
    );
    let shared = &body["runner_groups"][1];
    assert!(
        shared["runners_url"]
            .as_str()
            .unwrap()
            .contains("/orgs/acme/actions/runner-groups/")
    );
    // As the enterprise set it (add_group's default: no public repositories).
    assert_eq!(shared["inherited_allows_public_repositories"], false);
}

#[tokio::test]
async fn the_rest_api_is_also_served_under_the_enterprise_server_base_path() {
    let clock = ManualClock::at_epoch_2026();
    let gh = start(&clock).await;
    gh.sim.update(|w, _| {
        w.add_pat("ghp_ghes", "ghes");
        w.add_org("acme", None);
    });
    // As a client configured for GitHub Enterprise Server calls it.
    let endpoint = hangar_github::Endpoint::from_enterprise_url(gh.url.as_str()).unwrap();
    assert!(
        endpoint.api_url().path().ends_with("/api/v3/"),
        "{endpoint:?}"
    );
    let client = hangar_github::GitHubClient::new(
        endpoint,
        hangar_github::Credentials::token("ghp_ghes"),
        hangar_github::ClientOptions::default(),
    )
    .unwrap();
    use hangar_github::GitHubApi;
    let runners = client
        .list_runners(&hangar_github::Scope::org("acme"))
        .await
        .unwrap();
    assert!(runners.is_empty());
    // Counted as the same endpoint as without the prefix.
    let (_, _, text) = get(&gh, "_ghsim/accounting", None).await;
    assert!(
        text.contains("GET /orgs/{org}/actions/runners") && !text.contains("/api/v3"),
        "{text}"
    );
}
