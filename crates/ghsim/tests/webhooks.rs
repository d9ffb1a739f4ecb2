//! Webhook deliveries: signed, typed, in order (or several at once when allowed); faults; redelivery.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use ghsim::webhooks::{ContentType, NewHook};
use ghsim::{Faults, Sim, SimConfig};
use hangar_github::webhook::{self, WebhookEvent, WorkflowJobAction};
use hangar_github::{ManualClock, Secret};
use tokio::sync::mpsc;

const SECRET: &str = "It's a Secret to Everybody";

/// A webhook receiver on loopback that forwards every request.
async fn receiver() -> (String, mpsc::UnboundedReceiver<(HeaderMap, Bytes)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((headers, body));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

async fn start(faults: Faults) -> ghsim::Running {
    let sim = Sim::new(SimConfig {
        clock: Arc::new(ManualClock::at_epoch_2026()),
        faults,
        ..SimConfig::default()
    });
    sim.update(|w, _| {
        w.add_org("acme", Some("big"));
        w.add_repo("acme", "app", true);
    });
    ghsim::spawn(sim).await.unwrap()
}

fn hook(url: &str, content_type: ContentType) -> NewHook {
    NewHook {
        url: url.into(),
        secret: Some(SECRET.into()),
        content_type,
        events: vec![],
        owner: None,
    }
}

fn submit(sim: &Sim, count: u32) -> Vec<u64> {
    sim.update(|w, now| {
        let request = ghsim::world::SubmitJobs {
            repository: "acme/app".into(),
            count,
            labels: vec!["self-hosted".into()],
            duration_ms: 0,
            conclusion: None,
            workflow: None,
            job_name: None,
        };
        w.submit_jobs(&request, now).unwrap().1
    })
}

async fn next(rx: &mut mpsc::UnboundedReceiver<(HeaderMap, Bytes)>) -> (HeaderMap, Bytes) {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a delivery within 10 s")
        .expect("receiver alive")
}

async fn received(rx: &mut mpsc::UnboundedReceiver<(HeaderMap, Bytes)>) -> webhook::Delivery {
    let (headers, body) = next(rx).await;
    webhook::receive(&headers, &body, &[Secret::new(SECRET)]).expect("valid, signed delivery")
}

#[tokio::test]
async fn signed_json_deliveries_of_the_job_lifecycle() {
    let gh = start(Faults::default()).await;
    let (url, mut rx) = receiver().await;
    gh.sim.add_hook(hook(&url, ContentType::Json));
    let (headers, _) = next(&mut rx).await;
    assert_eq!(headers["x-github-event"], "ping");
    assert!(
        headers["user-agent"]
            .to_str()
            .unwrap()
            .starts_with("GitHub-Hookshot/")
    );

    let jobs = submit(&gh.sim, 1);
    let queued = received(&mut rx).await;
    let WebhookEvent::WorkflowJob(event) = queued.event else {
        panic!("not a workflow_job")
    };
    assert_eq!(event.action, WorkflowJobAction::Queued);
    assert_eq!(event.workflow_job.id, jobs[0]);
    assert_eq!(event.workflow_job.runner_id, None);
    assert_eq!(event.repository.full_name, "acme/app");
    assert_eq!(event.organization.unwrap().login, "acme");
    assert_eq!(event.enterprise.unwrap().slug.as_deref(), Some("big"));

    // A runner takes and finishes the job: in_progress, then completed, in that order.
    gh.sim.update(|w, now| {
        let (token, _) = w.create_runner_token(
            &hangar_github::Scope::org("acme"),
            ghsim::world::TokenKind::Registration,
            now,
        );
        let (_, cred) = w
            .register_runner(
                ghsim::world::RegisterRunner {
                    url: "http://x/acme".into(),
                    token,
                    name: "r1".into(),
                    labels: vec![],
                    no_default_labels: false,
                    runner_group: None,
                    ephemeral: true,
                    replace: false,
                },
                now,
            )
            .unwrap();
        let (_, session) = w.open_session(&cred, None, None, now).unwrap();
        let job = w.poll(&session, now).unwrap().unwrap();
        w.complete_job(&cred, job.id, "success", now).unwrap();
    });
    let started = received(&mut rx).await;
    let WebhookEvent::WorkflowJob(started) = started.event else {
        panic!()
    };
    assert_eq!(started.action, WorkflowJobAction::InProgress);
    assert_eq!(started.workflow_job.runner_name.as_deref(), Some("r1"));
    assert_eq!(
        started.workflow_job.runner_group_name.as_deref(),
        Some("Default")
    );
    let done = received(&mut rx).await;
    let WebhookEvent::WorkflowJob(done) = done.event else {
        panic!()
    };
    assert_eq!(done.action, WorkflowJobAction::Completed);
    assert_eq!(
        done.workflow_job.conclusion,
        Some(hangar_github::Conclusion::Success)
    );
}

#[tokio::test]
async fn form_encoded_deliveries_are_signed_over_the_form_bytes() {
    let gh = start(Faults::default()).await;
    let (url, mut rx) = receiver().await;
    gh.sim.add_hook(hook(&url, ContentType::Form));
    let ping = received(&mut rx).await;
    assert!(matches!(ping.event, WebhookEvent::Ping(_)));
    let (headers, body) = {
        submit(&gh.sim, 1);
        next(&mut rx).await
    };
    assert_eq!(headers["content-type"], "application/x-www-form-urlencoded");
    assert!(body.starts_with(b"payload="));
    assert!(webhook::receive(&headers, &body, &[Secret::new("wrong")]).is_err());
    assert!(webhook::receive(&headers, &body, &[Secret::new(SECRET)]).is_ok());
}

#[tokio::test]
async fn other_events_on_request() {
    let gh = start(Faults::default()).await;
    let (url, mut rx) = receiver().await;
    gh.sim.add_hook(hook(&url, ContentType::Json));
    received(&mut rx).await; // ping
    let http = reqwest_client();
    for (event, extra) in [
        ("push", None),
        ("pull_request", Some("synchronize")),
        ("check_run", Some("completed")),
    ] {
        if event == "check_run" {
            submit(&gh.sim, 1);
            received(&mut rx).await; // the job's queued event
        }
        let response = http
            .post(gh.url.join("_ghsim/events").unwrap())
            .json(&serde_json::json!({"event": event, "repository": "acme/app", "action": extra}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "{event}");
        let delivery = received(&mut rx).await;
        match (event, delivery.event) {
            ("push", WebhookEvent::Push(p)) => assert_eq!(p.git_ref, "refs/heads/main"),
            ("pull_request", WebhookEvent::PullRequest(p)) => assert_eq!(p.action, "synchronize"),
            ("check_run", WebhookEvent::CheckRun(c)) => assert_eq!(c.action, "completed"),
            (e, other) => panic!("{e}: got {other:?}"),
        }
    }
}

fn reqwest_client() -> reqwest::Client {
    hangar_github::client::http_builder()
        .unwrap()
        .build()
        .unwrap()
}

#[tokio::test]
async fn redelivery_reuses_the_delivery_id() {
    let gh = start(Faults::default()).await;
    let (url, mut rx) = receiver().await;
    gh.sim.add_hook(hook(&url, ContentType::Json));
    let ping = received(&mut rx).await;
    let guid = ping.id.clone().unwrap();
    let response = reqwest_client()
        .post(
            gh.url
                .join(&format!("_ghsim/deliveries/{guid}/redeliver"))
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let again = received(&mut rx).await;
    assert_eq!(again.id.as_deref(), Some(guid.as_str()));
    // The attempt is logged once the receiver has answered.
    let mut log = gh.sim.deliveries();
    for _ in 0..100 {
        if log[0].attempts.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        log = gh.sim.deliveries();
    }
    assert_eq!(log[0].attempts.len(), 2);
    assert!(log[0].attempts[1].redelivery);
}

#[tokio::test]
async fn dropped_and_duplicated_deliveries() {
    let gh = start(Faults {
        webhook_duplicate_rate: 1.0,
        ..Faults::default()
    })
    .await;
    let (url, mut rx) = receiver().await;
    gh.sim.add_hook(hook(&url, ContentType::Json));
    let a = received(&mut rx).await;
    let b = received(&mut rx).await;
    assert_eq!(a.id, b.id, "a duplicate carries the same delivery id");

    gh.sim.set_faults(Faults {
        webhook_drop_rate: 1.0,
        ..Faults::default()
    });
    submit(&gh.sim, 3);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rx.try_recv().is_err(), "everything dropped");
    let accounting = ghsim::accounting::snapshot(&gh.sim);
    assert_eq!(accounting.webhooks.dropped, 3);
    assert_eq!(accounting.webhooks.duplicates, 1);
}

#[tokio::test]
async fn redelivered_deliveries_come_again_later_with_the_same_id() {
    let gh = start(Faults {
        webhook_redelivery_rate: 1.0,
        webhook_redelivery_max_delay_ms: 200,
        ..Faults::default()
    })
    .await;
    let (url, mut rx) = receiver().await;
    gh.sim.add_hook(NewHook {
        events: vec!["workflow_job".into()],
        ..hook(&url, ContentType::Json)
    });
    // The hook's ping, and its redelivery.
    let ping = received(&mut rx).await;
    assert_eq!(received(&mut rx).await.id, ping.id);
    let jobs = submit(&gh.sim, 1);
    let first = received(&mut rx).await;
    let again = received(&mut rx).await;
    assert_eq!(first.id, again.id, "a redelivery keeps X-GitHub-Delivery");
    for delivery in [&first, &again] {
        let WebhookEvent::WorkflowJob(e) = &delivery.event else {
            panic!("not a workflow_job")
        };
        assert_eq!(e.workflow_job.id, jobs[0]);
    }
    // The attempt is recorded once the receiver has answered.
    let record = loop {
        let log = gh.sim.deliveries();
        let record = log
            .into_iter()
            .find(|d| first.id.as_deref() == Some(d.guid.as_str()))
            .unwrap();
        if record.attempts.len() == 2 {
            break record;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        record
            .attempts
            .iter()
            .map(|a| (a.redelivery, a.status))
            .collect::<Vec<_>>(),
        vec![(false, Some(200)), (true, Some(200))]
    );
    // The ping's and the job's.
    assert_eq!(
        ghsim::accounting::snapshot(&gh.sim).webhooks.redeliveries,
        2
    );
}

#[tokio::test]
async fn reordered_deliveries_arrive_all_but_out_of_order() {
    let gh = start(Faults {
        webhook_reorder_rate: 1.0,
        ..Faults::default()
    })
    .await;
    let (url, mut rx) = receiver().await;
    gh.sim.add_hook(NewHook {
        events: vec!["workflow_job".into()],
        ..hook(&url, ContentType::Json)
    });
    let jobs = submit(&gh.sim, 4);
    let mut seen = Vec::new();
    while seen.len() < 4 {
        // The hook's ping is reordered among the jobs too.
        if let WebhookEvent::WorkflowJob(e) = received(&mut rx).await.event {
            seen.push(e.workflow_job.id);
        }
    }
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, jobs, "nothing lost");
    assert_ne!(seen, jobs, "but not in order");
}

#[tokio::test]
async fn delayed_deliveries_still_arrive() {
    let gh = start(Faults {
        webhook_max_delay_ms: 200,
        ..Faults::default()
    })
    .await;
    let (url, mut rx) = receiver().await;
    gh.sim.add_hook(hook(&url, ContentType::Json));
    received(&mut rx).await;
    submit(&gh.sim, 2);
    received(&mut rx).await;
    received(&mut rx).await;
}

#[tokio::test]
async fn failed_deliveries_are_recorded_not_retried() {
    let gh = start(Faults::default()).await;
    // Nothing listens on this port.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    gh.sim.add_hook(hook(&url, ContentType::Json));
    for _ in 0..50 {
        if ghsim::accounting::snapshot(&gh.sim).webhooks.failed == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = gh.sim.deliveries();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].attempts.len(), 1);
    assert!(log[0].attempts[0].error.is_some());
}

#[tokio::test]
async fn hooks_made_through_the_rest_api_get_their_repositorys_events_until_deleted() {
    let gh = start(Faults::default()).await;
    gh.sim.update(|w, _| {
        w.add_pat("ghp_hooks", "hooks");
        w.add_repo("acme", "other", true);
    });
    let (url, mut rx) = receiver().await;
    let api = |path: &str| gh.url.join(path).unwrap();
    let client = reqwest_client();
    let created = client
        .post(api("repos/acme/app/hooks"))
        .bearer_auth("ghp_hooks")
        .json(&serde_json::json!({
            "name": "web",
            "config": {"url": url, "content_type": "json", "secret": SECRET},
            "events": ["workflow_job"],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let hook: serde_json::Value = created.json().await.unwrap();
    assert_eq!(hook["type"], "Repository");
    assert_eq!(hook["config"]["secret"], "********", "never shown");
    let id = hook["id"].as_u64().unwrap();
    let (headers, _) = next(&mut rx).await;
    assert_eq!(headers["x-github-event"], "ping");

    // Its repository's jobs reach it; another repository's do not.
    gh.sim.update(|w, now| {
        let request = ghsim::world::SubmitJobs {
            repository: "acme/other".into(),
            count: 1,
            labels: vec!["self-hosted".into()],
            duration_ms: 0,
            conclusion: None,
            workflow: None,
            job_name: None,
        };
        w.submit_jobs(&request, now).unwrap();
    });
    let jobs = submit(&gh.sim, 1);
    let WebhookEvent::WorkflowJob(event) = received(&mut rx).await.event else {
        panic!("not a workflow_job")
    };
    assert_eq!(
        (event.workflow_job.id, event.repository.full_name.as_str()),
        (jobs[0], "acme/app")
    );

    let hooks_of = |path: &str| {
        let request = client.get(api(path)).bearer_auth("ghp_hooks").send();
        async move {
            let listed: serde_json::Value = request.await.unwrap().json().await.unwrap();
            listed.as_array().unwrap().len()
        }
    };
    assert_eq!(hooks_of("repos/acme/app/hooks").await, 1);
    assert_eq!(hooks_of("orgs/acme/hooks").await, 0, "a repository's hook");

    let delete = |path: String| client.delete(api(&path)).bearer_auth("ghp_hooks").send();
    assert_eq!(
        delete(format!("orgs/acme/hooks/{id}"))
            .await
            .unwrap()
            .status(),
        404,
        "not the organization's"
    );
    assert_eq!(
        delete(format!("repos/acme/app/hooks/{id}"))
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        delete(format!("repos/acme/app/hooks/{id}"))
            .await
            .unwrap()
            .status(),
        404
    );
    // No more deliveries.
    submit(&gh.sim, 1);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), rx.recv())
            .await
            .is_err(),
        "a deleted hook gets nothing"
    );
}

/// A receiver that answers each request after `answer_after` and records the most requests it
/// held at once; returns its URL, that peak and the number answered.
async fn slow_receiver(
    answer_after: Duration,
) -> (
    String,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (now, peak, answered) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let (p, a) = (peak.clone(), answered.clone());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let (now, peak, answered) = (now.clone(), p.clone(), a.clone());
            async move {
                let held = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(held, Ordering::SeqCst);
                tokio::time::sleep(answer_after).await;
                now.fetch_sub(1, Ordering::SeqCst);
                answered.fetch_add(1, Ordering::SeqCst);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, peak, answered)
}

/// Sends the ping and 8 `queued` deliveries to a receiver that answers each after 300 ms, and
/// returns the most it held at once.
async fn peak_in_flight(concurrency: usize) -> usize {
    use std::sync::atomic::Ordering;
    let sim = Sim::new(SimConfig {
        clock: Arc::new(ManualClock::at_epoch_2026()),
        webhook_concurrency: concurrency,
        ..SimConfig::default()
    });
    sim.update(|w, _| {
        w.add_org("acme", Some("big"));
        w.add_repo("acme", "app", true);
    });
    let gh = ghsim::spawn(sim).await.unwrap();
    let (url, peak, answered) = slow_receiver(Duration::from_millis(300)).await;
    gh.sim.add_hook(hook(&url, ContentType::Json));
    submit(&gh.sim, 8);
    tokio::time::timeout(Duration::from_secs(10), async {
        while answered.load(Ordering::SeqCst) < 9 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("all 9 deliveries answered within 10 s");
    peak.load(Ordering::SeqCst)
}

#[tokio::test]
async fn deliveries_go_one_at_a_time_unless_more_may_be_on_their_way() {
    assert_eq!(peak_in_flight(1).await, 1, "one at a time by default");
    let peak = peak_in_flight(4).await;
    assert!(
        (2..=4).contains(&peak),
        "with 4 allowed, a slow receiver holds several at once but never more than 4: {peak}"
    );
}
