//! The HTTP layer without a cluster: real HTTP/1.1 on loopback against the router, autoscalers
//! and targets put straight into the reflector stores, and a stand-in for the reservation
//! writer that records what it takes from the batcher and answers the waiting deliveries (the
//! real writer is tested against the apiserver in `tests/safety/durable.rs`).

use std::time::Duration;

use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::context::SystemClock;

const SECRET: &str = "It's a Secret to Everybody";

/// Operations the stand-in writer took, per autoscaler, in order.
type Written = Arc<Mutex<Vec<(HraKey, JobOp)>>>;

struct Fixture {
    server: Arc<WebhookServer>,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    written: Written,
    writer: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(w) = &self.writer {
            w.abort();
        }
    }
}

impl Fixture {
    /// Starts the stand-in writer: every few milliseconds it takes all queued operations,
    /// records them and answers their deliveries as stored.
    fn start_writer(&mut self) {
        let server = self.server.clone();
        let written = self.written.clone();
        self.writer = Some(tokio::spawn(async move {
            loop {
                store_everything(&server, &written);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
    }

    /// What the writer took, without the delivery ids.
    fn written(&self) -> Vec<(HraKey, ScaleOp)> {
        let written = self.written.lock().unwrap();
        written.iter().map(|(k, op)| (k.clone(), op.op)).collect()
    }
}

fn store_everything(server: &WebhookServer, written: &Mutex<Vec<(HraKey, JobOp)>>) {
    let batches = server.lock_batcher().take_due(SystemTime::now());
    for batch in batches {
        for queued in batch.ops {
            written.lock().unwrap().push((batch.key.clone(), queued.op));
            if let Some(stored) = queued.stored {
                let _ = stored.send(());
            }
        }
    }
}

fn hra_key() -> HraKey {
    ("ns".to_owned(), "hra".to_owned())
}

fn apply<K>(writer: &mut Writer<K>, obj: Value)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + 'static,
{
    let obj: K = serde_json::from_value(obj).unwrap();
    writer.apply_watcher_event(&watcher::Event::Apply(obj));
}

/// A server whose stores hold autoscaler `ns/hra` with a workflowJob trigger, scaling
/// RunnerDeployment `ns/rd` of repository `octo/app` with label `linux`, and the stand-in
/// writer.
async fn start(configure: impl FnOnce(&mut WebhookConfig)) -> Fixture {
    let mut f = start_without_writer(configure).await;
    f.start_writer();
    f
}

/// [`start`] with nothing taking operations from the batcher.
async fn start_without_writer(configure: impl FnOnce(&mut WebhookConfig)) -> Fixture {
    let (hras, mut hra_writer) = reflector::store();
    let (deployments, mut rd_writer) = reflector::store();
    let (runner_sets, _rs_writer) = reflector::store::<RunnerSet>();
    apply::<HorizontalRunnerAutoscaler>(
        &mut hra_writer,
        json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "HorizontalRunnerAutoscaler",
            "metadata": {"name": "hra", "namespace": "ns"},
            "spec": {
                "scaleTargetRef": {"name": "rd"},
                "minReplicas": 0, "maxReplicas": 5,
                "scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "duration": "30m"}]
            }
        }),
    );
    apply::<RunnerDeployment>(
        &mut rd_writer,
        json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "RunnerDeployment",
            "metadata": {"name": "rd", "namespace": "ns"},
            "spec": {"template": {"spec": {"repository": "octo/app", "labels": ["linux"]}}}
        }),
    );
    let mut config = WebhookConfig::new(Some(Secret::new(SECRET)), false).unwrap();
    // Every operation is due at once for the stand-in writer.
    config.batch_interval = Duration::ZERO;
    configure(&mut config);
    let limits = config.limits;
    let stores = WebhookStores {
        hras,
        deployments,
        runner_sets,
    };
    let server = WebhookServer::new(config, stores, None, Arc::new(SystemClock));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = server.router();
    let task = tokio::spawn(crate::serve::serve(
        listener,
        crate::serve::Plain,
        router,
        limits,
        std::future::pending(),
    ));
    Fixture {
        server,
        addr,
        task,
        written: Written::default(),
        writer: None,
    }
}

/// Sends one request with a fresh connection; returns status and body.
async fn request(
    addr: SocketAddr,
    method: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} / HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head += &format!("{k}: {v}\r\n");
    }
    head += "\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    // The server may answer (413) before reading a large body; a failed write is fine then.
    let _ = stream.write_all(body).await;
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

/// A signed delivery of `event` with `payload` and delivery id `guid`.
async fn post(f: &Fixture, event: &str, guid: &str, payload: &Value) -> (u16, String) {
    post_to(f.addr, event, guid, payload).await
}

/// [`post`] to the server at `addr`.
async fn post_to(addr: SocketAddr, event: &str, guid: &str, payload: &Value) -> (u16, String) {
    let body = serde_json::to_vec(payload).unwrap();
    let headers = [
        ("content-type", "application/json".to_owned()),
        ("x-github-event", event.to_owned()),
        ("x-github-delivery", guid.to_owned()),
        (
            "x-hub-signature-256",
            hangar_github::webhook::sign(SECRET.as_bytes(), &body),
        ),
    ];
    request(addr, "POST", &headers, &body).await
}

fn workflow_job(action: &str, job_id: u64, labels: &[&str], conclusion: Option<&str>) -> Value {
    json!({
        "action": action,
        "workflow_job": {
            "id": job_id, "run_id": 7, "run_attempt": 1, "name": "build",
            "status": if action == "completed" { "completed" } else { "queued" },
            "conclusion": conclusion,
            "labels": labels,
            "runner_id": if action == "completed" { json!(42) } else { Value::Null },
        },
        "repository": {
            "id": 1, "name": "app", "full_name": "octo/app", "private": true,
            "owner": {"login": "octo", "id": 2, "type": "Organization"}
        },
        "organization": {"login": "octo", "id": 2}
    })
}

fn pending(f: &Fixture) -> usize {
    f.server.lock_batcher().queued()
}

#[test]
fn refuses_to_start_without_a_secret_unless_told_to() {
    assert!(matches!(
        WebhookConfig::new(None, false),
        Err(ConfigError::MissingSecret)
    ));
    assert!(matches!(
        WebhookConfig::new(Some(Secret::new("")), false),
        Err(ConfigError::MissingSecret)
    ));
    assert!(WebhookConfig::new(None, true).unwrap().secrets.is_empty());
    assert_eq!(
        WebhookConfig::new(Some(Secret::new("s")), true)
            .unwrap()
            .secrets
            .len(),
        1,
        "with a secret, signatures are verified even when unsigned deliveries are allowed"
    );
}

#[tokio::test]
async fn ping_is_answered_with_pong_and_get_says_running() {
    let f = start(|_| {}).await;
    let (status, body) = post(
        &f,
        "ping",
        "d-1",
        &json!({"zen": "Keep it simple.", "hook_id": 1}),
    )
    .await;
    assert_eq!((status, body.as_str()), (200, "pong"));
    let (status, body) = request(f.addr, "GET", &[], b"").await;
    assert_eq!((status, body.as_str()), (200, "webhook server is running"));
}

#[tokio::test]
async fn bad_or_missing_signatures_get_401_and_change_nothing() {
    let f = start(|_| {}).await;
    let body = serde_json::to_vec(&workflow_job("queued", 1, &["linux"], None)).unwrap();
    let forged = [
        ("x-github-event", "workflow_job".to_owned()),
        ("x-github-delivery", "d-1".to_owned()),
        (
            "x-hub-signature-256",
            hangar_github::webhook::sign(b"not the secret", &body),
        ),
    ];
    assert_eq!(request(f.addr, "POST", &forged, &body).await.0, 401);
    let unsigned = [("x-github-event", "workflow_job".to_owned())];
    assert_eq!(request(f.addr, "POST", &unsigned, &body).await.0, 401);
    let malformed = [
        ("x-github-event", "workflow_job".to_owned()),
        ("x-hub-signature-256", "sha256=zz".to_owned()),
    ];
    assert_eq!(request(f.addr, "POST", &malformed, &body).await.0, 401);
    assert!(f.written().is_empty());
    // The forged delivery's id was not remembered: the genuine one is still accepted.
    let (status, _) = post(
        &f,
        "workflow_job",
        "d-1",
        &workflow_job("queued", 1, &["linux"], None),
    )
    .await;
    assert_eq!(status, 202);
}

#[tokio::test]
async fn bodies_over_the_limit_get_413() {
    let f = start(|c| c.limits.max_body_bytes = 1024).await;
    let payload = json!({"zen": "x".repeat(2048), "hook_id": 1});
    let (status, _) = post(&f, "ping", "d-1", &payload).await;
    assert_eq!(status, 413);
}

#[tokio::test]
async fn malformed_json_gets_400_with_the_reason() {
    let f = start(|_| {}).await;
    let body = b"{\"action\": \"queued\"";
    let headers = [
        ("x-github-event", "workflow_job".to_owned()),
        (
            "x-hub-signature-256",
            hangar_github::webhook::sign(SECRET.as_bytes(), body),
        ),
    ];
    let (status, reason) = request(f.addr, "POST", &headers, body).await;
    assert_eq!(status, 400);
    assert!(reason.contains("workflow_job"), "{reason}");
    let no_event = [(
        "x-hub-signature-256",
        hangar_github::webhook::sign(SECRET.as_bytes(), b"{}"),
    )];
    let (status, reason) = request(f.addr, "POST", &no_event, b"{}").await;
    assert_eq!(status, 400);
    assert!(reason.contains("X-GitHub-Event"), "{reason}");
}

#[tokio::test]
async fn events_no_trigger_uses_are_ignored_with_200() {
    let f = start(|_| {}).await;
    let (status, body) = post(&f, "issues", "d-1", &json!({"action": "opened"})).await;
    assert_eq!(status, 200);
    assert!(body.starts_with("ignored"), "{body}");
    let (status, body) = post(
        &f,
        "workflow_job",
        "d-2",
        &workflow_job("in_progress", 1, &["linux"], None),
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.starts_with("ignored"), "{body}");
    let skipped = workflow_job("completed", 1, &["linux"], Some("skipped"));
    assert_eq!(post(&f, "workflow_job", "d-3", &skipped).await.0, 200);
    // No autoscaler has runners labelled gpu.
    let (status, body) = post(
        &f,
        "workflow_job",
        "d-4",
        &workflow_job("queued", 2, &["gpu"], None),
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.contains("no HorizontalRunnerAutoscaler"), "{body}");
    assert!(f.written().is_empty());
}

#[tokio::test]
async fn duplicates_by_delivery_id_and_by_job_event_count_once() {
    let f = start(|_| {}).await;
    let queued = workflow_job("queued", 1, &["self-hosted", "Linux"], None);
    assert_eq!(post(&f, "workflow_job", "d-1", &queued).await.0, 202);
    // GitHub's redelivery: same delivery id.
    let (status, body) = post(&f, "workflow_job", "d-1", &queued).await;
    assert_eq!(status, 200);
    assert!(body.contains("duplicate"), "{body}");
    // The same job event under a new delivery id.
    let (status, body) = post(&f, "workflow_job", "d-2", &queued).await;
    assert_eq!(status, 200);
    assert!(body.contains("duplicate"), "{body}");
    assert_eq!(f.written(), vec![(hra_key(), ScaleOp::Up)]);
    let written = f.written.lock().unwrap();
    assert_eq!(
        written[0].1.job,
        Some(JobKey { id: 1, attempt: 1 }),
        "the operation names its job"
    );
    assert_eq!(written[0].1.delivery.as_deref(), Some("d-1"));
}

#[tokio::test]
async fn a_queued_that_arrives_after_its_completed_is_ignored() {
    let f = start(|_| {}).await;
    let completed = workflow_job("completed", 9, &["linux"], Some("success"));
    assert_eq!(post(&f, "workflow_job", "d-2", &completed).await.0, 202);
    let (status, body) = post(
        &f,
        "workflow_job",
        "d-1",
        &workflow_job("queued", 9, &["linux"], None),
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.contains("already completed"), "{body}");
    assert_eq!(f.written(), vec![(hra_key(), ScaleOp::Down)]);
}

#[tokio::test]
async fn a_full_queue_answers_503_and_accepts_the_redelivery_later() {
    let mut f = start_without_writer(|c| c.queue_limit = 1).await;
    let addr = f.addr;
    let first = tokio::spawn(async move {
        let body = workflow_job("queued", 1, &["linux"], None);
        post_to(addr, "workflow_job", "d-1", &body).await.0
    });
    while pending(&f) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let second = workflow_job("queued", 2, &["linux"], None);
    assert_eq!(post(&f, "workflow_job", "d-2", &second).await.0, 503);
    f.start_writer();
    assert_eq!(first.await.unwrap(), 202, "answered once stored");
    assert_eq!(
        post(&f, "workflow_job", "d-2", &second).await.0,
        202,
        "redelivery after 503"
    );
}

#[tokio::test]
async fn a_delivery_whose_reservation_is_not_stored_in_time_gets_503_and_its_redelivery_counts() {
    let mut f = start_without_writer(|c| c.write_timeout = Duration::from_millis(50)).await;
    let queued = workflow_job("queued", 1, &["linux"], None);
    let (status, body) = post(&f, "workflow_job", "d-1", &queued).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not stored"), "{body}");
    f.start_writer();
    let (status, body) = post(&f, "workflow_job", "d-1", &queued).await;
    assert_eq!(status, 202, "{body}");
}

#[tokio::test]
async fn form_encoded_deliveries_are_verified_over_the_form_bytes() {
    let f = start(|_| {}).await;
    let json = serde_json::to_string(&workflow_job("queued", 1, &["linux"], None)).unwrap();
    let body = format!("payload={}", url_encode(&json));
    let headers = [
        (
            "content-type",
            "application/x-www-form-urlencoded".to_owned(),
        ),
        ("x-github-event", "workflow_job".to_owned()),
        (
            "x-hub-signature-256",
            hangar_github::webhook::sign(SECRET.as_bytes(), body.as_bytes()),
        ),
    ];
    assert_eq!(
        request(f.addr, "POST", &headers, body.as_bytes()).await.0,
        202
    );
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `workflow_job` `action` of job `job_id` (label `linux`), created at 10:00:00 and started
/// `waited` seconds later.
fn timed_job(action: &str, job_id: u64, waited: i64) -> Value {
    let mut payload = workflow_job(action, job_id, &["linux"], None);
    let job = &mut payload["workflow_job"];
    job["status"] = json!(action);
    job["created_at"] = json!("2026-01-05T10:00:00Z");
    job["started_at"] = json!(
        jiff::Timestamp::from_second(1_767_607_200 + waited)
            .unwrap()
            .to_string()
    );
    if action != "queued" {
        job["runner_id"] = json!(42);
        job["runner_name"] = json!("rd-abcde");
    }
    payload
}

fn count(text: &str, metric: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{metric}_count ")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {metric}_count in\n{text}"))
}

#[test]
fn queue_time_is_started_at_minus_created_at_and_never_negative() {
    let job = |waited| {
        serde_json::from_value::<hangar_github::webhook::WorkflowJob>(
            timed_job("in_progress", 1, waited)["workflow_job"].clone(),
        )
        .unwrap()
    };
    assert_eq!(queue_time(&job(7)), Some(Duration::from_secs(7)));
    assert_eq!(queue_time(&job(0)), Some(Duration::ZERO));
    assert_eq!(queue_time(&job(-3)), None);
    let mut unstarted = job(7);
    unstarted.started_at = None;
    assert_eq!(queue_time(&unstarted), None);
}

#[tokio::test]
async fn in_progress_deliveries_record_queue_time_once_per_job_for_matching_jobs_only() {
    let f = start(|_| {}).await;
    let metrics = Arc::new(crate::metrics::Metrics::new());
    f.server.set_metrics(metrics.clone());
    let render = || metrics.render(&crate::metrics::ScrapeState::default());
    let metric = "hangar_job_queue_to_assignment_seconds";

    assert_eq!(
        post(&f, "workflow_job", "d-1", &timed_job("in_progress", 1, 12))
            .await
            .0,
        200
    );
    // A redelivery under a new id, and a job no autoscaler matches, change nothing.
    assert_eq!(
        post(&f, "workflow_job", "d-2", &timed_job("in_progress", 1, 12))
            .await
            .0,
        200
    );
    let mut hosted = timed_job("in_progress", 2, 30);
    hosted["workflow_job"]["labels"] = json!(["ubuntu-latest"]);
    assert_eq!(post(&f, "workflow_job", "d-3", &hosted).await.0, 200);
    let text = render();
    assert_eq!(count(&text, metric), 1, "{text}");
    assert!(text.contains(&format!("{metric}_sum 12.0")), "{text}");
}

#[tokio::test]
async fn queued_deliveries_wait_for_a_pod_of_their_target_unless_the_job_started() {
    let f = start(|_| {}).await;
    let metrics = Arc::new(crate::metrics::Metrics::new());
    f.server.set_metrics(metrics.clone());
    let render = || metrics.render(&crate::metrics::ScrapeState::default());
    let metric = "hangar_webhook_delivery_to_pod_seconds";
    let rd = crate::metrics::ScaleTarget {
        namespace: "ns".into(),
        kind: ScaleTargetKind::RunnerDeployment,
        name: "rd".into(),
    };

    for (guid, job) in [("d-1", 1), ("d-2", 2)] {
        assert_eq!(
            post(&f, "workflow_job", guid, &timed_job("queued", job, 0))
                .await
                .0,
            202
        );
    }
    // Job 1 found an idle runner: the pod created next serves job 2, and no third pod
    // serves anything.
    assert_eq!(
        post(&f, "workflow_job", "d-3", &timed_job("in_progress", 1, 1))
            .await
            .0,
        200
    );
    metrics.runner_pods_created(&crate::metrics::ScaleTarget::runner_set("ns", "rd"), 1);
    assert_eq!(
        count(&render(), metric),
        0,
        "another target's pod serves nothing"
    );
    metrics.runner_pods_created(&rd, 2);
    assert_eq!(count(&render(), metric), 1);
}

#[test]
fn an_organizations_visible_groups_leave_out_those_it_inherits_from_its_enterprise() {
    // GitHub's organization listing, as for `GET /orgs/{org}/actions/runner-groups`.
    let groups: Vec<hangar_github::RunnerGroup> = serde_json::from_value(json!([
        {"id": 1, "name": "Default", "visibility": "all", "default": true, "inherited": false},
        {"id": 2, "name": "GPU", "visibility": "selected", "inherited": false},
        {"id": 3, "name": "enterprise-arm", "visibility": "all", "inherited": true},
    ]))
    .unwrap();
    let own = own_group_names(groups.clone());
    assert_eq!(
        own,
        HashSet::from(["default".to_owned(), "gpu".to_owned()]),
        "an organization-scoped runner is never in an inherited group"
    );
    assert!(group_names(groups).contains("enterprise-arm"));
}

/// A signed `in_progress` delivery of job `job_id`, run by runner `name` (ID `runner_id`).
fn at_work(job_id: u64, name: &str, runner_id: u64) -> Value {
    let mut payload = workflow_job("in_progress", job_id, &["linux"], None);
    payload["workflow_job"]["status"] = json!("in_progress");
    payload["workflow_job"]["runner_id"] = json!(runner_id);
    payload["workflow_job"]["runner_name"] = json!(name);
    payload
}

/// A server configured by `configure` reporting sightings to the directory it returns, after
/// a delivery saying runner `rd-abc` (ID 42) took job 1.
async fn reporting_after_one_runner_at_work(
    configure: impl FnOnce(&mut WebhookConfig),
) -> (Fixture, Arc<RunnerDirectory>) {
    let f = start(configure).await;
    let directory = Arc::new(RunnerDirectory::new(Duration::from_secs(3)));
    f.server.report_sightings_to(directory.clone());
    assert_eq!(
        post(&f, "workflow_job", "d-1", &at_work(1, "rd-abc", 42))
            .await
            .0,
        200
    );
    (f, directory)
}

#[tokio::test]
async fn signed_in_progress_deliveries_report_the_runner_at_work() {
    let (f, directory) = reporting_after_one_runner_at_work(|_| {}).await;
    let mut seen = None;
    assert_eq!(
        directory.sighting("rd-abc", |s| {
            seen = Some(s.clone());
            true
        }),
        Some(42)
    );
    let seen = seen.unwrap();
    assert_eq!(seen.repository, "octo/app");
    assert_eq!(seen.enterprise, None);
    // A job not yet on a runner names none.
    let mut nameless = at_work(2, "", 43);
    nameless["workflow_job"]["runner_id"] = Value::Null;
    assert_eq!(post(&f, "workflow_job", "d-2", &nameless).await.0, 200);
    assert_eq!(directory.sighting("", |_| true), None);
}

#[tokio::test]
async fn signed_completed_deliveries_report_the_runner_done() {
    let (f, directory) = reporting_after_one_runner_at_work(|_| {}).await;
    let mut done = directory.done_runners();
    assert_eq!(directory.completion("rd-abc", |_| true), None, "at work");
    let mut finished = workflow_job("completed", 1, &["linux"], Some("success"));
    finished["workflow_job"]["runner_name"] = json!("rd-abc");
    assert_eq!(post(&f, "workflow_job", "d-2", &finished).await.0, 202);
    assert_eq!(
        futures::StreamExt::next(&mut done).await.as_deref(),
        Some("rd-abc")
    );
    assert!(directory.completion("rd-abc", |_| true).is_some());
    assert_eq!(directory.sighting("rd-abc", |_| true), Some(42));
}

#[tokio::test]
async fn unsigned_deliveries_report_no_runner() {
    let (_f, directory) = reporting_after_one_runner_at_work(|config| config.secrets.clear()).await;
    assert_eq!(
        directory.sighting("rd-abc", |_| true),
        None,
        "anyone could have sent it"
    );
}
