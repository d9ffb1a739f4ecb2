//! The client against ghsim over real HTTP on loopback.

mod support;

use std::time::Duration;

use hangar_github::{
    AppCredentials, AppIdentifier, ClientOptions, ClientRegistry, Credentials, GitHubApi,
    GitHubError, JitConfigRequest, RateLimitKind, RetryPolicy, RunStatus, RunnerId, RunnerStatus,
    Scope, Secret,
};
use support::{Gh, PAT, add_runners, app_key, make_busy};

#[tokio::test]
async fn wrong_or_missing_token_is_unauthorized() {
    let gh = Gh::start().await;
    let client = gh.client_with(Credentials::token("ghp_wrong"), gh.options());
    let err = client.list_runners(&Scope::org("acme")).await.unwrap_err();
    assert!(
        matches!(err, GitHubError::Unauthorized { ref message, .. } if message == "Bad credentials"),
        "{err}"
    );
    assert_eq!(err.category(), "unauthorized");
}

#[tokio::test]
async fn list_runners_follows_every_page() {
    let gh = Gh::start().await;
    let scope = Scope::org("acme");
    add_runners(&gh, &scope, "r", 250);
    let client = gh.client();
    let runners = client.list_runners(&scope).await.unwrap();
    assert_eq!(runners.len(), 250);
    assert!(
        runners
            .iter()
            .all(|r| r.status == RunnerStatus::Offline && r.has_label("LINUX"))
    );
    // 100 per page: three requests.
    assert_eq!(gh.calls("GET /orgs/{org}/actions/runners").0, 3);
}

#[tokio::test]
async fn scopes_are_separate_and_find_by_name() {
    let gh = Gh::start().await;
    add_runners(&gh, &Scope::repo("acme", "app"), "repo", 2);
    add_runners(&gh, &Scope::enterprise("big"), "ent", 1);
    let client = gh.client();
    assert_eq!(
        client
            .list_runners(&Scope::repo("acme", "app"))
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        client
            .list_runners(&Scope::repo("acme", "lib"))
            .await
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        client
            .list_runners(&Scope::enterprise("big"))
            .await
            .unwrap()
            .len(),
        1
    );
    let found = client
        .find_runner(&Scope::repo("acme", "app"), "repo-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.name, "repo-1");
    let got = client
        .get_runner(&Scope::repo("acme", "app"), found.id)
        .await
        .unwrap();
    assert_eq!(got, found);
    assert!(
        client
            .find_runner(&Scope::repo("acme", "app"), "nope")
            .await
            .unwrap()
            .is_none()
    );
    let err = client
        .list_runners(&Scope::org("nobody"))
        .await
        .unwrap_err();
    assert!(matches!(err, GitHubError::NotFound { .. }), "{err}");
}

#[tokio::test]
async fn cache_serves_fresh_lists_and_revalidates_with_free_304s() {
    let gh = Gh::start().await;
    let scope = Scope::org("acme");
    add_runners(&gh, &scope, "r", 3);
    let client = gh.client();
    let endpoint = "GET /orgs/{org}/actions/runners";

    client.list_runners(&scope).await.unwrap();
    client.list_runners(&scope).await.unwrap();
    assert_eq!(
        gh.calls(endpoint),
        (1, 1, 0),
        "second list is served from the cache"
    );

    gh.clock.advance(Duration::from_secs(61));
    assert_eq!(client.list_runners(&scope).await.unwrap().len(), 3);
    assert_eq!(
        gh.calls(endpoint),
        (2, 1, 1),
        "stale entry revalidated: a 304 costs nothing"
    );
    assert_eq!(client.stats().not_modified, 1);
    assert_eq!(client.stats().cache_hits, 1);

    add_runners(&gh, &scope, "new", 1);
    client.list_runners(&scope).await.unwrap();
    assert_eq!(
        client.list_runners(&scope).await.unwrap().len(),
        3,
        "fresh for 60 s, as GitHub allows"
    );
    gh.clock.advance(Duration::from_secs(61));
    assert_eq!(
        client.list_runners(&scope).await.unwrap().len(),
        4,
        "changed content arrives on revalidation"
    );
    assert_eq!(gh.calls(endpoint), (3, 2, 1));
}

#[tokio::test]
async fn a_revalidated_list_asks_even_while_fresh_and_304s_stay_free() {
    let gh = Gh::start().await;
    let scope = Scope::org("acme");
    add_runners(&gh, &scope, "r", 2);
    let client = gh.client();
    let endpoint = "GET /orgs/{org}/actions/runners";

    client.list_runners(&scope).await.unwrap();
    assert_eq!(
        client.list_runners_revalidated(&scope).await.unwrap().len(),
        2
    );
    assert_eq!(
        gh.calls(endpoint),
        (2, 1, 1),
        "asked although fresh; unchanged, so a free 304"
    );
    add_runners(&gh, &scope, "new", 1);
    assert_eq!(
        client.list_runners(&scope).await.unwrap().len(),
        2,
        "the plain list is still served from the cache"
    );
    assert_eq!(
        client.list_runners_revalidated(&scope).await.unwrap().len(),
        3,
        "the revalidated one sees the new runner at once"
    );
    assert_eq!(
        client.list_runners(&scope).await.unwrap().len(),
        3,
        "and refreshes the cache for everyone"
    );
}

#[tokio::test]
async fn cache_off_asks_every_time() {
    let gh = Gh::start().await;
    let scope = Scope::org("acme");
    let client = gh.client_with(
        Credentials::token(PAT),
        ClientOptions {
            cache: false,
            ..gh.options()
        },
    );
    for _ in 0..3 {
        client.list_runners(&scope).await.unwrap();
    }
    assert_eq!(gh.calls("GET /orgs/{org}/actions/runners"), (3, 3, 0));
}

#[tokio::test]
async fn registration_token_is_reused_until_thirty_minutes_remain() {
    let gh = Gh::start().await;
    let client = gh.client();
    let scope = Scope::repo("acme", "app");
    let first = client.registration_token(&scope).await.unwrap();
    gh.clock.advance(Duration::from_secs(29 * 60));
    let again = client.registration_token(&scope).await.unwrap();
    assert_eq!(first, again);
    assert_eq!(
        gh.calls("POST /repos/{owner}/{repo}/actions/runners/registration-token")
            .0,
        1
    );
    gh.clock.advance(Duration::from_secs(60 + 1));
    let renewed = client.registration_token(&scope).await.unwrap();
    assert_ne!(first.token, renewed.token);
    assert_eq!(
        gh.calls("POST /repos/{owner}/{repo}/actions/runners/registration-token")
            .0,
        2
    );
    // Other scopes have their own tokens; remove tokens are never cached.
    client
        .registration_token(&Scope::org("acme"))
        .await
        .unwrap();
    client.remove_token(&scope).await.unwrap();
    client.remove_token(&scope).await.unwrap();
    assert_eq!(
        gh.calls("POST /repos/{owner}/{repo}/actions/runners/remove-token")
            .0,
        2
    );
}

#[tokio::test]
async fn delete_busy_runner_is_typed_and_idle_delete_is_visible_at_once() {
    let gh = Gh::start().await;
    let scope = Scope::org("acme");
    let ids = add_runners(&gh, &scope, "r", 2);
    make_busy(&gh, ids[0], "acme/app");
    let client = gh.client();
    assert_eq!(client.list_runners(&scope).await.unwrap().len(), 2);

    let err = client
        .delete_runner(&scope, RunnerId(ids[0]))
        .await
        .unwrap_err();
    assert!(matches!(err, GitHubError::RunnerBusy { .. }), "{err}");
    assert!(err.to_string().contains("still running a job"), "{err}");

    client
        .delete_runner(&scope, RunnerId(ids[1]))
        .await
        .unwrap();
    let err = client
        .delete_runner(&scope, RunnerId(ids[1]))
        .await
        .unwrap_err();
    assert!(matches!(err, GitHubError::NotFound { .. }), "{err}");
    let err = client
        .get_runner(&scope, RunnerId(ids[1]))
        .await
        .unwrap_err();
    assert!(matches!(err, GitHubError::NotFound { .. }), "{err}");
    // The cached list was invalidated by the delete.
    let left = client.list_runners(&scope).await.unwrap();
    assert_eq!(
        left.iter().map(|r| r.id.0).collect::<Vec<_>>(),
        vec![ids[0]]
    );
    assert!(left[0].busy);
}

#[tokio::test]
async fn jit_config_registers_an_offline_runner_and_names_are_unique() {
    let gh = Gh::start().await;
    let client = gh.client();
    let scope = Scope::org("acme");
    let request = JitConfigRequest {
        name: "jit-1".into(),
        runner_group_id: 1,
        labels: vec!["self-hosted".into(), "X64".into(), "gpu".into()],
        work_folder: None,
    };
    let jit = client.generate_jit_config(&scope, &request).await.unwrap();
    assert_eq!(jit.runner.name, "jit-1");
    assert_eq!(jit.runner.status, RunnerStatus::Offline);
    assert_eq!(jit.runner.ephemeral, Some(true));
    assert!(!jit.encoded_jit_config.expose().is_empty());
    let listed = client.list_runners(&scope).await.unwrap();
    assert_eq!(listed.len(), 1);
    let err = client
        .generate_jit_config(&scope, &request)
        .await
        .unwrap_err();
    assert!(
        matches!(err, GitHubError::Conflict { ref message, .. } if message.contains("already exists")),
        "{err}"
    );
    let bad_group = JitConfigRequest {
        name: "jit-2".into(),
        runner_group_id: 999,
        ..request
    };
    let err = client
        .generate_jit_config(&scope, &bad_group)
        .await
        .unwrap_err();
    assert!(matches!(err, GitHubError::NotFound { .. }), "{err}");
}

#[tokio::test]
async fn secondary_limit_with_short_retry_after_is_waited_out_then_gives_up() {
    let gh = Gh::start().await;
    gh.sim().set_faults(ghsim::Faults {
        secondary_limit_rate: 1.0,
        secondary_retry_after_secs: Some(5),
        ..ghsim::Faults::default()
    });
    let client = gh.client();
    let err = client.list_runners(&Scope::org("acme")).await.unwrap_err();
    assert!(
        matches!(
            err,
            GitHubError::RateLimited {
                kind: RateLimitKind::Secondary,
                ..
            }
        ),
        "{err}"
    );
    // Four attempts with the 5 s retry-after waited out between them; the last limit is
    // returned instead of waited for.
    assert_eq!(gh.calls("GET /orgs/{org}/actions/runners").0, 4);
    assert_eq!(gh.clock.sleeps(), vec![Duration::from_secs(5); 3]);
}

#[tokio::test]
async fn long_secondary_limit_fails_fast_and_blocks_the_credential() {
    let gh = Gh::start().await;
    gh.sim().set_faults(ghsim::Faults {
        secondary_limit_rate: 1.0,
        secondary_retry_after_secs: Some(120),
        ..ghsim::Faults::default()
    });
    let client = gh.client();
    let err = client.list_runners(&Scope::org("acme")).await.unwrap_err();
    let retry_at = err.retry_at().unwrap();
    assert_eq!(retry_at.as_second() - gh.clock_now_s(), 120);
    // While blocked, nothing is sent — for any endpoint of this credential.
    gh.sim().set_faults(ghsim::Faults::default());
    let err = client
        .registration_token(&Scope::org("acme"))
        .await
        .unwrap_err();
    assert!(matches!(err, GitHubError::RateLimited { .. }), "{err}");
    let sent: u64 = gh
        .sim()
        .read(|w, _| w.calls.values().map(|s| s.calls).sum());
    assert_eq!(sent, 1, "no hot loop: one request in total");
    gh.clock.advance(Duration::from_secs(121));
    client.list_runners(&Scope::org("acme")).await.unwrap();
}

#[tokio::test]
async fn secondary_limit_without_retry_after_waits_a_minute() {
    let gh = Gh::start().await;
    gh.sim().set_faults(ghsim::Faults {
        secondary_limit_rate: 1.0,
        secondary_retry_after_secs: None,
        ..ghsim::Faults::default()
    });
    let client = gh.client();
    let err = client.list_runners(&Scope::org("acme")).await.unwrap_err();
    assert_eq!(err.retry_at().unwrap().as_second() - gh.clock_now_s(), 60);
}

#[tokio::test]
async fn exhausted_primary_budget_is_reported_and_respected() {
    let gh = Gh::start().await;
    gh.sim().set_faults(ghsim::Faults {
        primary_budget: 3,
        ..ghsim::Faults::default()
    });
    let client = gh.client_with(
        Credentials::token(PAT),
        ClientOptions {
            cache: false,
            ..gh.options()
        },
    );
    let scope = Scope::org("acme");
    for _ in 0..3 {
        client.list_runners(&scope).await.unwrap();
    }
    let budget = client.rate_limit().unwrap();
    assert_eq!((budget.limit, budget.remaining, budget.used), (3, 0, 3));
    let err = client.list_runners(&scope).await.unwrap_err();
    assert!(
        matches!(
            err,
            GitHubError::RateLimited {
                kind: RateLimitKind::Primary,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.retry_at(), Some(budget.reset));
    assert_eq!(
        gh.calls("GET /orgs/{org}/actions/runners").0,
        3,
        "the exhausted budget is not even asked"
    );
    gh.clock.advance(Duration::from_secs(3601));
    client.list_runners(&scope).await.unwrap();
    assert_eq!(client.rate_limit().unwrap().remaining, 2);
}

#[tokio::test]
async fn server_errors_are_retried_with_jittered_backoff() {
    let gh = Gh::start().await;
    gh.sim().set_faults(ghsim::Faults {
        server_error_rate: 1.0,
        ..ghsim::Faults::default()
    });
    let client = gh.client();
    let err = client.list_runners(&Scope::org("acme")).await.unwrap_err();
    assert!(
        matches!(
            err,
            GitHubError::Server {
                status: 502,
                attempts: 4,
                ..
            }
        ),
        "{err}"
    );
    let sleeps = gh.clock.sleeps();
    assert_eq!(sleeps.len(), 3);
    for (i, nominal) in [500u64, 1000, 2000].into_iter().enumerate() {
        let nominal = Duration::from_millis(nominal);
        assert!(
            sleeps[i] >= nominal / 2 && sleeps[i] <= nominal,
            "{sleeps:?}"
        );
    }
    // JIT registration is not repeated after a 5xx: the first attempt may have registered it.
    let request = JitConfigRequest {
        name: "x".into(),
        runner_group_id: 1,
        labels: vec!["a".into()],
        work_folder: None,
    };
    let err = client
        .generate_jit_config(&Scope::org("acme"), &request)
        .await
        .unwrap_err();
    assert!(
        matches!(err, GitHubError::Server { attempts: 1, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn intermittent_server_errors_are_absorbed() {
    let gh = Gh::start().await;
    gh.sim().set_faults(ghsim::Faults {
        server_error_rate: 0.3,
        ..ghsim::Faults::default()
    });
    let client = gh.client_with(
        Credentials::token(PAT),
        ClientOptions {
            cache: false,
            retry: RetryPolicy {
                max_attempts: 10,
                ..RetryPolicy::default()
            },
            ..gh.options()
        },
    );
    for _ in 0..20 {
        client.list_runners(&Scope::org("acme")).await.unwrap();
    }
    assert!(client.stats().retries > 0);
}

#[tokio::test]
async fn every_request_has_a_timeout() {
    // A server that accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let _keep = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            if let Ok((socket, _)) = silent.accept().await {
                held.push(socket);
            }
        }
    });
    let clock = hangar_github::ManualClock::at_epoch_2026();
    let url = format!("http://{addr}/");
    let client = hangar_github::GitHubClient::new(
        hangar_github::Endpoint::custom(&url, &url).unwrap(),
        Credentials::token(PAT),
        ClientOptions {
            request_timeout: Duration::from_millis(200),
            retry: RetryPolicy {
                max_attempts: 2,
                ..RetryPolicy::default()
            },
            clock: std::sync::Arc::new(clock),
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let started = std::time::Instant::now();
    let err = client.list_runners(&Scope::org("acme")).await.unwrap_err();
    assert!(
        matches!(err, GitHubError::Transport { attempts: 2, .. }),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

fn app_creds(app: AppIdentifier, installation_id: u64) -> Credentials {
    Credentials::App(AppCredentials {
        app,
        installation_id,
        private_key: Secret::new(app_key().0.clone()),
    })
}

async fn install_app(gh: &Gh, account: &str) -> (u64, String, u64) {
    let public = app_key().1.clone();
    let (app_id, client_id) = gh.sim().update(|w, _| {
        let app = w.add_app(Some(4242), "hangar", &public).unwrap();
        (app.id, app.client_id.clone())
    });
    let installation = gh
        .sim()
        .update(|w, now| w.add_installation(app_id, account, now))
        .unwrap();
    (app_id, client_id, installation)
}

#[tokio::test]
async fn app_auth_mints_and_refreshes_installation_tokens() {
    let gh = Gh::start().await;
    let (app_id, _, installation) = install_app(&gh, "acme").await;
    let client = gh.client_with(
        app_creds(AppIdentifier::Id(app_id), installation),
        ClientOptions {
            cache: false,
            ..gh.options()
        },
    );
    let scope = Scope::org("acme");
    add_runners(&gh, &scope, "r", 1);
    assert_eq!(client.list_runners(&scope).await.unwrap().len(), 1);
    client.list_runners(&scope).await.unwrap();
    assert_eq!(client.stats().installation_tokens, 1, "the token is cached");
    gh.clock.advance(Duration::from_secs(54 * 60));
    client.list_runners(&scope).await.unwrap();
    assert_eq!(client.stats().installation_tokens, 1);
    gh.clock.advance(Duration::from_secs(2 * 60));
    client.list_runners(&scope).await.unwrap();
    assert_eq!(
        client.stats().installation_tokens,
        2,
        "refreshed with 4 min left"
    );
    // Calls are accounted to the installation, token exchanges to the App.
    let creds: Vec<String> = gh
        .sim()
        .read(|w, _| w.calls.keys().map(|(_, c)| c.clone()).collect());
    assert!(
        creds.contains(&format!("installation:{installation}")),
        "{creds:?}"
    );
    assert!(creds.contains(&format!("app:{app_id}")), "{creds:?}");
    assert_eq!(
        gh.calls("POST /app/installations/{installation_id}/access_tokens")
            .0,
        2
    );
}

#[tokio::test]
async fn app_client_id_is_accepted_as_issuer() {
    let gh = Gh::start().await;
    let (_, client_id, installation) = install_app(&gh, "acme").await;
    let client = gh.client_with(
        app_creds(AppIdentifier::ClientId(client_id), installation),
        gh.options(),
    );
    client
        .registration_token(&Scope::repo("acme", "app"))
        .await
        .unwrap();
}

#[tokio::test]
async fn installation_tokens_stay_in_their_account_and_out_of_enterprises() {
    let gh = Gh::start().await;
    let (app_id, _, installation) = install_app(&gh, "acme").await;
    let client = gh.client_with(
        app_creds(AppIdentifier::Id(app_id), installation),
        gh.options(),
    );
    let err = client
        .list_runners(&Scope::repo("solo", "tool"))
        .await
        .unwrap_err();
    assert!(matches!(err, GitHubError::Forbidden { .. }), "{err}");
    let err = client
        .list_runners(&Scope::enterprise("big"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, GitHubError::Forbidden { ref message, .. } if message.contains("not accessible by integration")),
        "{err}"
    );
}

#[tokio::test]
async fn app_auth_failures_are_typed() {
    let gh = Gh::start().await;
    let (app_id, _, _) = install_app(&gh, "acme").await;
    let client = gh.client_with(app_creds(AppIdentifier::Id(app_id), 999_999), gh.options());
    let err = client.list_runners(&Scope::org("acme")).await.unwrap_err();
    assert!(
        matches!(
            err,
            GitHubError::AppAuth {
                installation_id: 999_999,
                ..
            }
        ),
        "{err}"
    );
    let bad_key = Credentials::App(AppCredentials {
        app: AppIdentifier::Id(app_id),
        installation_id: 1,
        private_key: Secret::new(
            "-----BEGIN RSA PRIVATE KEY-----\nnope\n-----END RSA PRIVATE KEY-----",
        ),
    });
    let err = hangar_github::GitHubClient::new(gh.endpoint(), bad_key, gh.options()).unwrap_err();
    assert!(matches!(err, GitHubError::AppAuth { .. }), "{err}");
}

#[tokio::test]
async fn basic_auth_for_proxies() {
    let gh = Gh::start().await;
    let client = gh.client_with(
        Credentials::Basic {
            username: "proxy".into(),
            password: Secret::new(PAT),
        },
        gh.options(),
    );
    client.list_runners(&Scope::org("acme")).await.unwrap();
}

#[tokio::test]
async fn runner_groups_filtered_by_repository_visibility() {
    let gh = Gh::start().await;
    gh.sim().update(|w, _| {
        use ghsim::world::{GroupOwner, Visibility};
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
            Visibility::All,
            &[],
        )
        .unwrap();
    });
    let client = gh.client();
    let all = client.list_org_runner_groups("acme", None).await.unwrap();
    // The enterprise group shared with every organization is listed too, as inherited.
    assert_eq!(
        all.iter()
            .map(|g| (g.name.as_str(), g.inherited))
            .collect::<Vec<_>>(),
        vec![("Default", false), ("app-only", false), ("shared", true)]
    );
    assert!(all[0].default && all[0].id == 1);
    let for_lib = client
        .list_org_runner_groups("acme", Some("lib"))
        .await
        .unwrap();
    assert_eq!(
        for_lib.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
        vec!["Default", "shared"]
    );
    let for_app = client
        .list_org_runner_groups("acme", Some("app"))
        .await
        .unwrap();
    assert_eq!(for_app.len(), 3);
    let enterprise = client
        .list_enterprise_runner_groups("big", Some("acme"))
        .await
        .unwrap();
    assert_eq!(enterprise.len(), 2);
}

#[tokio::test]
async fn workflow_runs_and_jobs_by_status() {
    let gh = Gh::start().await;
    let ids = add_runners(&gh, &Scope::repo("acme", "app"), "r", 1);
    gh.sim().update(|w, now| {
        let submit = ghsim::world::SubmitJobs {
            repository: "acme/app".into(),
            count: 3,
            labels: vec!["self-hosted".into(), "gpu".into()],
            duration_ms: 0,
            conclusion: None,
            workflow: Some("Build".into()),
            job_name: None,
        };
        w.submit_jobs(&submit, now).unwrap();
    });
    let client = gh.client();
    let queued = client
        .list_workflow_runs("acme", "app", RunStatus::Queued)
        .await
        .unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].name.as_deref(), Some("Build"));
    let jobs = client.list_jobs("acme", "app", queued[0].id).await.unwrap();
    assert_eq!(jobs.len(), 3);
    assert!(
        jobs.iter()
            .all(|j| j.status == RunStatus::Queued && j.runner_id.is_none())
    );
    assert_eq!(jobs[0].labels, vec!["self-hosted", "gpu"]);
    // A job starts (on a matching runner): the run is in progress.
    gh.sim().update(|w, now| {
        let r = w.runners.get_mut(&ids[0]).unwrap();
        r.labels.push(ghsim::world::Label {
            id: 99,
            name: "gpu".into(),
            read_only: false,
        });
        let credential = r.credential.clone();
        let (_, session) = w.open_session(&credential, None, None, now).unwrap();
        w.poll(&session, now).unwrap().unwrap();
    });
    gh.clock.advance(Duration::from_secs(61));
    assert!(
        client
            .list_workflow_runs("acme", "app", RunStatus::Queued)
            .await
            .unwrap()
            .is_empty()
    );
    let running = client
        .list_workflow_runs("acme", "app", RunStatus::InProgress)
        .await
        .unwrap();
    let jobs = client
        .list_jobs("acme", "app", running[0].id)
        .await
        .unwrap();
    let started: Vec<_> = jobs
        .iter()
        .filter(|j| j.status == RunStatus::InProgress)
        .collect();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].runner_name.as_deref(), Some("r-0"));
}

#[tokio::test]
async fn registry_shares_one_client_per_credential() {
    let gh = Gh::start().await;
    let registry = ClientRegistry::new(gh.endpoint(), gh.options());
    let a = registry.client(Credentials::token(PAT)).unwrap();
    let b = registry.client(Credentials::token(PAT)).unwrap();
    let as_trait: std::sync::Arc<dyn GitHubApi> = a.clone();
    as_trait.list_runners(&Scope::org("acme")).await.unwrap();
    b.list_runners(&Scope::org("acme")).await.unwrap();
    assert_eq!(
        gh.calls("GET /orgs/{org}/actions/runners").0,
        1,
        "one cache for both users"
    );
    let reports = registry.reports();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].rate_limit.as_ref().unwrap().used, 1);
}

#[tokio::test]
async fn a_revalidated_run_list_sees_a_new_run_while_the_cached_one_is_fresh() {
    let gh = Gh::start().await;
    let submit = |w: &mut ghsim::world::World, now| support::queue_job(w, now, "acme/app");
    gh.sim().update(submit);
    let client = gh.client();
    let queued = || client.list_workflow_runs("acme", "app", RunStatus::Queued);
    let revalidated = || client.list_workflow_runs_revalidated("acme", "app", RunStatus::Queued);
    assert_eq!(queued().await.unwrap().len(), 1);
    assert_eq!(revalidated().await.unwrap().len(), 1);
    assert_eq!(
        gh.calls("GET /repos/{owner}/{repo}/actions/runs"),
        (2, 1, 1),
        "asked although fresh; unchanged, so a free 304"
    );
    gh.sim().update(submit);
    assert_eq!(queued().await.unwrap().len(), 1, "the cached list, fresh");
    assert_eq!(revalidated().await.unwrap().len(), 2, "the new run at once");
}
