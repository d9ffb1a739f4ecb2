//! Promise: a 2xx means the delivery is recorded. The webhook server answers a `workflow_job`
//! delivery with 2xx only once its capacity reservation is stored in the cluster; a shutdown
//! finishes the deliveries in flight; and the stored reservations, which name their job, are
//! the deduplication that holds across replicas and restarts.
//!
//! The tests run webhook servers as `hangar webhook-server` does ([`run_standalone`]), the
//! `hangar run` binary itself where its signal handling is what is tested, or the whole
//! operator against the GitHub simulator for the pull recovery; all against the real control
//! plane, reading the autoscaler straight from the apiserver.

use std::time::Duration;

use hangar::webhook_server::{WebhookConfig, run_standalone};
use hangar_api::HorizontalRunnerAutoscaler;
use hangar_github::Secret;
use hangar_testkit::{TestCluster, TestNamespace, crds};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SECRET: &str = "hangar-durable-test-secret";
const HRA: &str = "hooks";

/// One webhook server replica; `stop` shuts it down gracefully and waits for it to exit.
struct Replica {
    addr: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Replica {
    async fn start(client: &Client, ns: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let config = WebhookConfig::new(Some(Secret::new(SECRET)), false).unwrap();
        let task = tokio::spawn(run_standalone(
            client.clone(),
            Some(ns.to_owned()),
            None,
            listener,
            config,
            None,
            async move {
                let _ = rx.await;
            },
        ));
        // The server answers once its stores are synced; a GET tells when.
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(&addr).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Self {
            addr,
            shutdown: Some(tx),
            task,
        }
    }

    fn begin_stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    async fn stop(mut self) {
        self.begin_stop();
        tokio::time::timeout(Duration::from_secs(30), &mut self.task)
            .await
            .expect("the server exits after a shutdown")
            .unwrap()
            .unwrap();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A namespace holding RunnerDeployment `rd` (repository `octo/app`, label `linux`) and
/// autoscaler [`HRA`] scaling it on `workflow_job` between 0 and `max`.
async fn setup(prefix: &str, max: i32) -> (TestNamespace, Client) {
    let cluster = TestCluster::get();
    let client = cluster.client().await;
    crds::install(&client).await;
    // The control plane may be shared with test runs of older CRDs, which would prune the
    // reservations' job fields: apply this build's again, just before use.
    crds::apply_and_wait(&client, &hangar_api::crds())
        .await
        .unwrap();
    let ns = TestNamespace::create(cluster, prefix).await;
    let create = |obj: Value| {
        let client = client.clone();
        let ns = ns.name().to_owned();
        async move {
            let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
                client,
                &ns,
                &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                    "actions.summerwind.dev",
                    "v1alpha1",
                    obj["kind"].as_str().unwrap(),
                )),
            );
            api.create(
                &PostParams::default(),
                &serde_json::from_value(obj).unwrap(),
            )
            .await
            .unwrap();
        }
    };
    create(json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerDeployment",
        "metadata": {"name": "rd"},
        "spec": {"replicas": 0, "template": {"spec": {"repository": "octo/app", "labels": ["linux"]}}}
    }))
    .await;
    create(json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "HorizontalRunnerAutoscaler",
        "metadata": {"name": HRA},
        "spec": {
            "scaleTargetRef": {"kind": "RunnerDeployment", "name": "rd"},
            "minReplicas": 0, "maxReplicas": max,
            "scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "duration": "30m"}]
        }
    }))
    .await;
    (ns, client)
}

/// Runners reserved in the autoscaler as stored in the apiserver (not a cache).
async fn reserved(client: &Client, ns: &str) -> i32 {
    let hra = Api::<HorizontalRunnerAutoscaler>::namespaced(client.clone(), ns)
        .get(HRA)
        .await
        .unwrap();
    hra.spec
        .capacity_reservations
        .iter()
        .flatten()
        .filter_map(|r| r.replicas)
        .sum()
}

fn workflow_job(action: &str, job_id: u64) -> Value {
    let completed = action == "completed";
    json!({
        "action": action,
        "workflow_job": {
            "id": job_id, "run_id": 7, "run_attempt": 1, "name": "build",
            "status": if completed { "completed" } else { "queued" },
            "conclusion": if completed { json!("success") } else { Value::Null },
            "labels": ["self-hosted", "linux"],
            "runner_id": if completed { json!(42) } else { Value::Null },
        },
        "repository": {
            "id": 1, "name": "app", "full_name": "octo/app", "private": true,
            "owner": {"login": "octo", "id": 2, "type": "Organization"}
        },
        "organization": {"login": "octo", "id": 2}
    })
}

/// A signed `workflow_job` delivery sent like GitHub does; returns status and body.
async fn deliver(addr: &str, guid: &str, payload: &Value) -> (u16, String) {
    let (stream, rest) = begin_delivery(addr, guid, payload).await;
    finish_delivery(stream, &rest).await
}

/// Sends a delivery's headers and all of its body but the last byte, which it returns: the
/// server is then handling the request and waits for the rest.
async fn begin_delivery(
    addr: &str,
    guid: &str,
    payload: &Value,
) -> (tokio::net::TcpStream, Vec<u8>) {
    let mut body = serde_json::to_vec(payload).unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nx-github-event: workflow_job\r\nx-github-delivery: {guid}\r\n\
         x-hub-signature-256: {}\r\n\r\n",
        body.len(),
        hangar_github::webhook::sign(SECRET.as_bytes(), &body)
    );
    let rest = body.split_off(body.len() - 1);
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    (stream, rest)
}

/// Sends `rest` of the body and reads the answer: status and body (status 0 when the
/// connection closed without one).
async fn finish_delivery(mut stream: tokio::net::TcpStream, rest: &[u8]) -> (u16, String) {
    let _ = stream.write_all(rest).await;
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

fn is_2xx(status: u16) -> bool {
    (200..300).contains(&status)
}

#[tokio::test]
async fn a_2xx_is_answered_only_once_the_reservation_is_stored() {
    let (ns, client) = setup("durable-ack", 10).await;
    let replica = Replica::start(&client, ns.name()).await;
    // Several in a row: after the first write, each later one also waits out the batch
    // interval, so an early answer would show.
    for job in 1..=3u64 {
        let (status, body) = deliver(
            &replica.addr,
            &format!("d-{job}"),
            &workflow_job("queued", job),
        )
        .await;
        assert_eq!(status, 202, "{body}");
        let stored = reserved(&client, ns.name()).await;
        assert_eq!(
            stored,
            i32::try_from(job).unwrap(),
            "job {job} was answered {status} before its reservation was stored"
        );
    }
    replica.stop().await;
}

#[tokio::test]
async fn one_job_counts_once_across_replicas_redeliveries_and_restarts() {
    let (ns, client) = setup("durable-dedup", 10).await;
    let a = Replica::start(&client, ns.name()).await;
    let b = Replica::start(&client, ns.name()).await;
    // Two replicas behind one Service: GitHub's delivery and its redelivery (same id) land on
    // different replicas, and a re-sent event with a new delivery id too.
    for (replica, guid) in [(&a, "q-1"), (&b, "q-1"), (&b, "q-1-again")] {
        let (status, body) = deliver(&replica.addr, guid, &workflow_job("queued", 1)).await;
        assert!(is_2xx(status), "{status} {body}");
    }
    assert_eq!(reserved(&client, ns.name()).await, 1, "job 1 counted twice");
    let (status, _) = deliver(&a.addr, "q-2", &workflow_job("queued", 2)).await;
    assert!(is_2xx(status));
    assert_eq!(reserved(&client, ns.name()).await, 2);

    // Job 1 completes; its completion reaches both replicas: only job 1's reservation goes.
    for (replica, guid) in [(&a, "c-1"), (&b, "c-1")] {
        let (status, body) = deliver(&replica.addr, guid, &workflow_job("completed", 1)).await;
        assert!(is_2xx(status), "{status} {body}");
    }
    assert_eq!(
        reserved(&client, ns.name()).await,
        1,
        "job 1's completion released job 2's runner too"
    );

    // A restarted replica remembers nothing in memory: redeliveries of both jobs' `queued`
    // change nothing, and job 1 (completed) is not reserved again.
    a.stop().await;
    b.stop().await;
    let restarted = Replica::start(&client, ns.name()).await;
    for (guid, job) in [("q-1", 1), ("q-2", 2), ("q-1-later", 1)] {
        let (status, body) = deliver(&restarted.addr, guid, &workflow_job("queued", job)).await;
        assert!(is_2xx(status), "{status} {body}");
    }
    assert_eq!(
        reserved(&client, ns.name()).await,
        1,
        "a redelivery after a restart counted a job again"
    );
    restarted.stop().await;
}

#[tokio::test]
async fn a_delivery_in_flight_at_shutdown_is_answered_and_stored() {
    let (ns, client) = setup("durable-stop", 10).await;
    let mut replica = Replica::start(&client, ns.name()).await;
    let (stream, rest) = begin_delivery(&replica.addr, "d-1", &workflow_job("queued", 1)).await;
    // Give the server ample time to have read the headers: the request is then in flight, and
    // a shutdown must let it finish.
    tokio::time::sleep(Duration::from_millis(300)).await;
    replica.begin_stop();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, body) = finish_delivery(stream, &rest).await;
    replica.stop().await;
    assert_eq!(
        status, 202,
        "the in-flight delivery was not finished: {body}"
    );
    assert_eq!(
        reserved(&client, ns.name()).await,
        1,
        "answered {status} but the reservation was lost at shutdown"
    );
}

/// The pull interval of [`a_job_whose_delivery_was_lost_gets_a_runner_by_pull`].
const PULL_INTERVAL: Duration = Duration::from_secs(2);
/// How long a queued job may wait there for the pull to reserve its runner: the promised
/// bound (one interval plus listing and writing), with ample slack for a shared machine.
const PULL_BOUND: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_job_whose_delivery_was_lost_gets_a_runner_by_pull() {
    use crate::support::{Harness, eventually, uncached};
    use ghsim::webhooks::{ContentType, NewHook};
    use k8s_openapi::api::core::v1::Pod;

    crate::support::init_tracing();
    let config = WebhookConfig::new(Some(Secret::new(SECRET)), false).unwrap();
    // No response cache: the pull would otherwise see a listing up to its 60 s `max-age` old.
    let (h, webhook_url) = Harness::start_with_webhook(
        "durable-pull",
        uncached(),
        |settings| settings.webhook_pull_interval = PULL_INTERVAL,
        config,
    )
    .await;
    crds::apply_and_wait(&h.client, &hangar_api::crds())
        .await
        .unwrap();
    h.sim.add_hook(NewHook {
        url: webhook_url,
        secret: Some(SECRET.to_owned()),
        content_type: ContentType::Json,
        events: vec!["workflow_job".to_owned()],
        owner: None,
    });
    // Every delivery is lost: only the pull can see the job.
    let faults = h
        .sim
        .faults()
        .merged(json!({"webhook_drop_rate": 1.0}))
        .unwrap();
    h.sim.set_faults(faults);
    h.apply(
        &json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "RunnerDeployment",
            "metadata": {"name": "rd"},
            "spec": {"replicas": 0, "template": {"spec": {"repository": "octo/app", "labels": ["linux"]}}}
        })
        .to_string(),
    );
    h.apply(
        &json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "HorizontalRunnerAutoscaler",
            "metadata": {"name": HRA},
            "spec": {
                "scaleTargetRef": {"kind": "RunnerDeployment", "name": "rd"},
                "minReplicas": 0, "maxReplicas": 3,
                "scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "duration": "30m"}]
            }
        })
        .to_string(),
    );
    let jobs = h.submit_jobs(
        1,
        vec!["self-hosted".into(), "linux".into()],
        Duration::from_secs(1),
        "success",
    );

    let reservation = eventually("a reservation made by pull", PULL_BOUND, || async {
        let hra = h.api::<HorizontalRunnerAutoscaler>().get(HRA).await.ok()?;
        hra.spec
            .capacity_reservations
            .into_iter()
            .flatten()
            .find(|r| r.replicas == Some(1))
    })
    .await;
    assert_eq!(
        (reservation.job_id, reservation.delivery_id.as_deref()),
        (Some(i64::try_from(jobs[0]).unwrap()), Some("pull")),
    );
    eventually("a runner pod for the job", PULL_BOUND, || async {
        (!h.list::<Pod>().await.is_empty()).then_some(())
    })
    .await;
    assert!(
        h.sim
            .deliveries()
            .iter()
            .any(|d| d.dropped && d.action.as_deref() == Some("queued")),
        "the queued delivery was not dropped; the fault was not exercised"
    );
}

/// The leader-election Lease of the `hangar run` processes below.
const LEASE: &str = "hangar-durable-test";

/// `hangar run` as its own process (the binary this crate builds), serving webhooks on `addr`
/// in namespace `ns`; its log goes to a file, shown when an assertion fails.
struct HangarRun {
    child: std::process::Child,
    addr: String,
    log: std::path::PathBuf,
}

impl HangarRun {
    /// Starts it with `extra` flags and waits until its webhook server answers a first
    /// delivery (job 1), so that a later delivery reaches a serving server.
    async fn start(ns: &str, extra: &[&str]) -> Self {
        let addr = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().to_string()
        };
        let log = std::env::temp_dir().join(format!("hangar-{ns}.log"));
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_hangar"))
            .arg("run")
            .arg(format!("--webhook-addr={addr}"))
            .arg(format!("--watch-namespace={ns}"))
            // No autoscaler here asks GitHub anything, and nothing may: an address nobody
            // serves, no pull, no sweep.
            .args([
                "--github-url=http://127.0.0.1:9/",
                "--github-api-url=http://127.0.0.1:9/",
                "--webhook-pull-interval=0",
                "--leaked-registration-sweep-interval=0",
                "--metrics-addr=0",
                "--health-probe-bind-address=0",
            ])
            .args(extra)
            .env("KUBECONFIG", TestCluster::get().kubeconfig())
            .env("GITHUB_TOKEN", "unused")
            .env("GITHUB_WEBHOOK_SECRET_TOKEN", SECRET)
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let run = Self { child, addr, log };
        let serving = async {
            while tokio::net::TcpStream::connect(&run.addr).await.is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            deliver(&run.addr, "d-1", &workflow_job("queued", 1)).await
        };
        let (status, body) = tokio::time::timeout(Duration::from_secs(60), serving)
            .await
            .unwrap_or_else(|_| panic!("no webhook server within 60 s\n{}", run.log()));
        assert_eq!(status, 202, "{body}\n{}", run.log());
        run
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit; `None` when it still runs after `limit`.
    async fn exited(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

impl Drop for HangarRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `hangar run` with `extra` flags, SIGTERMs it while a delivery (job 2) is in flight,
/// and checks that the delivery is answered 202 with its reservation stored and that the
/// process exits, successfully.
async fn sigterm_drains(ns: &TestNamespace, client: &Client, extra: &[&str]) {
    let mut run = HangarRun::start(ns.name(), extra).await;
    let (stream, rest) = begin_delivery(&run.addr, "d-2", &workflow_job("queued", 2)).await;
    // Ample time for the server to have read the headers: the request is then in flight.
    tokio::time::sleep(Duration::from_millis(300)).await;
    run.terminate();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, body) = finish_delivery(stream, &rest).await;
    let exited = run.exited(Duration::from_secs(30)).await;
    assert_eq!(
        status,
        202,
        "the delivery in flight at SIGTERM was not finished: {body}\n{}",
        run.log()
    );
    assert_eq!(
        reserved(client, ns.name()).await,
        2,
        "answered {status} but the reservation was lost at SIGTERM"
    );
    let exited =
        exited.unwrap_or_else(|| panic!("still running 30 s after SIGTERM\n{}", run.log()));
    assert!(exited.success(), "{exited}\n{}", run.log());
}

#[tokio::test]
async fn hangar_run_drains_its_webhook_server_on_sigterm() {
    let (ns, client) = setup("durable-term", 10).await;
    sigterm_drains(&ns, &client, &[]).await;
}

#[tokio::test]
async fn a_leader_drains_its_webhook_server_on_sigterm() {
    let (ns, client) = setup("durable-term-leader", 10).await;
    let election = [
        "--enable-leader-election".to_owned(),
        format!("--leader-election-id={LEASE}"),
        format!("--leader-election-namespace={}", ns.name()),
    ];
    let election: Vec<&str> = election.iter().map(String::as_str).collect();
    sigterm_drains(&ns, &client, &election).await;
    let lease = Api::<Lease>::namespaced(client.clone(), ns.name())
        .get(LEASE)
        .await
        .unwrap();
    assert!(
        lease.spec.and_then(|s| s.holder_identity).is_none(),
        "the leader did not release its Lease on SIGTERM"
    );
}

#[tokio::test]
async fn a_follower_drains_its_webhook_server_on_sigterm() {
    let (ns, client) = setup("durable-term-follower", 10).await;
    // Another replica holds the Lease for the whole test: this one stays a follower.
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": LEASE},
        "spec": {
            "holderIdentity": "another-replica",
            "leaseDurationSeconds": 3600,
            "renewTime": jiff::Timestamp::now().to_string(),
        }
    }))
    .unwrap();
    Api::<Lease>::namespaced(client.clone(), ns.name())
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    let election = [
        "--enable-leader-election".to_owned(),
        format!("--leader-election-id={LEASE}"),
        format!("--leader-election-namespace={}", ns.name()),
    ];
    let election: Vec<&str> = election.iter().map(String::as_str).collect();
    sigterm_drains(&ns, &client, &election).await;
}
