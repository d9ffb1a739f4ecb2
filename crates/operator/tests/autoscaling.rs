//! Autoscaling end to end: HorizontalRunnerAutoscalers and the webhook server against the real
//! control plane, ghsim sending signed webhooks (with its delivery faults), and nodesim running
//! the runner pods that take the jobs.
//!
//! Each test starts ghsim, the manager with the webhook server ([`Harness::start_with_webhook`])
//! and, where jobs must run, two simulated nodes of its own pool. Assertions are on what a user
//! sees: the RunnerDeployment's replicas, the autoscaler's spec and status, ghsim's job and
//! delivery records. Long timers (the scale-down delay, schedule windows) are crossed with
//! `h.clock.advance`, never by sleeping. Submission-to-pod latencies are printed
//! (`--nocapture`), not asserted: performance is for benchmarks.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use ghsim::webhooks::{ContentType, NewHook};
use hangar_api::{HorizontalRunnerAutoscaler, Runner, RunnerDeployment};
use hangar_github::Secret;
use hangar_testkit::eventually::{Describe, eventually_of};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use nodesim::NodeSimHandle;
use nodesim::program::{PodMatch, RunnerFault, RunnerFaults};
use serde_json::{Value, json};
use support::Harness;

const WAIT: Duration = Duration::from_secs(60);
const SECRET: &str = "hangar-autoscaling-test-secret";

/// The manager with its webhook server, ghsim, and optionally simulated nodes.
struct Stack {
    h: Harness,
    /// The manager's metrics (not served: scraped by rendering).
    exporter: Arc<hangar::metrics::Exporter>,
    webhook_url: String,
    nodes: Option<NodeSimHandle>,
    /// The switches of the nodes' runner faults.
    faults: Option<RunnerFaults>,
    watchers: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        for w in &self.watchers {
            w.abort();
        }
    }
}

impl Stack {
    /// The stack for one test; `with_nodes` adds two simulated nodes running runner pods.
    async fn start(prefix: &str, with_nodes: bool) -> Self {
        Self::start_configured(prefix, with_nodes, |_| {}).await
    }

    /// [`Stack::start`] with the controller settings adjusted by `configure`.
    async fn start_configured(
        prefix: &str,
        with_nodes: bool,
        configure: impl FnOnce(&mut hangar::context::Settings),
    ) -> Self {
        support::init_tracing();
        // No response cache: a runner registering right after a List Runners call would
        // otherwise be seen only a minute later (see e2e.rs).
        let options = support::uncached();
        let config = hangar::webhook_server::WebhookConfig::new(Some(Secret::new(SECRET)), false)
            .expect("a secret is configured");
        let exporter = Arc::new(hangar::metrics::Exporter::default());
        let attach = exporter.clone();
        let (h, webhook_url) = Harness::start_with_webhook(
            prefix,
            options,
            |settings| {
                settings.exporter = Some(attach);
                configure(settings);
            },
            config,
        )
        .await;
        let (nodes, faults) = if with_nodes {
            let (nodes, faults) = h.start_nodes_with_faults("as", prefix).await;
            (Some(nodes), Some(faults))
        } else {
            (None, None)
        };
        Self {
            h,
            exporter,
            webhook_url,
            nodes,
            faults,
            watchers: vec![],
        }
    }

    /// How many calls ghsim has answered on the endpoint `template` (as GitHub's OpenAPI names
    /// it, e.g. `GET /repos/{owner}/{repo}/actions/runs`).
    fn api_calls(&self, template: &str) -> u64 {
        ghsim::accounting::snapshot(&self.h.sim)
            .api_calls
            .iter()
            .filter(|c| c.endpoint == template)
            .map(|c| c.calls)
            .sum()
    }

    /// The `_count` of histogram `metric` in a scrape of the manager's metrics.
    fn histogram_count(&self, metric: &str) -> u64 {
        let text = self.exporter.render();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{metric}_count ")))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {metric}_count in\n{text}"))
    }

    /// Subscribes the webhook server to ghsim's `workflow_job` events, signed with `secret`,
    /// and waits for the answer to the hook's `ping`.
    async fn subscribe(&self, secret: &str) -> u16 {
        let hook = self.h.sim.add_hook(NewHook {
            url: self.webhook_url.clone(),
            secret: Some(secret.to_owned()),
            content_type: ContentType::Json,
            events: vec!["workflow_job".to_owned()],
            owner: None,
        });
        eventually_of(self, "the ping to be answered", WAIT, || async {
            self.h
                .sim
                .deliveries()
                .iter()
                .find(|d| d.hook_id == hook.id && d.event == "ping")
                .and_then(|d| d.attempts.last()?.status)
        })
        .await
    }

    /// RunnerDeployment `name` for `octo/app` with runner label `label`, on this test's nodes.
    fn apply_deployment(&self, name: &str, label: &str, replicas: i32) {
        let mut spec = json!({"repository": "octo/app", "labels": [label]});
        if let Some(nodes) = &self.nodes {
            let placement = nodes.placement();
            spec["nodeSelector"] = json!(placement.node_selector);
            spec["tolerations"] = json!(placement.tolerations);
        }
        let rd = json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "RunnerDeployment",
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "template": {"spec": spec}},
        });
        self.h.apply(&rd.to_string());
    }

    /// RunnerSet `name` of `replicas` runners labelled `label`, placed on the stack's nodes.
    fn apply_runner_set(&self, name: &str, label: &str, replicas: i32) {
        let set = support::runner_set_manifest(self.nodes.as_ref(), name, replicas, label, &[]);
        self.h.apply(&set);
    }

    /// Autoscaler `name` scaling RunnerDeployment `name`, with `spec` merged in.
    fn apply_hra(&self, name: &str, spec: Value) {
        self.apply_hra_for("RunnerDeployment", name, spec);
    }

    /// Autoscaler `name` scaling the `kind` named `name`, with `spec` merged in.
    fn apply_hra_for(&self, kind: &str, name: &str, spec: Value) {
        let mut full = json!({"scaleTargetRef": {"kind": kind, "name": name}});
        if let (Some(full), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
            full.extend(extra.clone());
        }
        let hra = json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "HorizontalRunnerAutoscaler",
            "metadata": {"name": name},
            "spec": full,
        });
        self.h.apply(&hra.to_string());
    }

    async fn deployment(&self, name: &str) -> RunnerDeployment {
        self.h.api::<RunnerDeployment>().get(name).await.unwrap()
    }

    async fn replicas(&self, name: &str) -> Option<i32> {
        self.deployment(name).await.spec.replicas
    }

    async fn hra(&self, name: &str) -> HorizontalRunnerAutoscaler {
        self.h
            .api::<HorizontalRunnerAutoscaler>()
            .get(name)
            .await
            .unwrap()
    }

    /// Reservations that hold a runner. A completed job leaves a zero-replica record of itself
    /// for the trigger's duration (so a late or repeated `queued` adds nothing); it holds none.
    async fn reservations(&self, name: &str) -> usize {
        self.hra(name)
            .await
            .spec
            .capacity_reservations
            .map_or(0, |r| {
                r.iter().filter(|c| c.replicas.unwrap_or(1) > 0).count()
            })
    }

    async fn desired(&self, name: &str) -> Option<i32> {
        self.hra(name).await.status?.desired_replicas
    }

    /// Notes of the Warning events with `reason` about the object named `name`.
    async fn warnings(&self, name: &str, reason: &str) -> Vec<String> {
        self.h
            .api::<k8s_openapi::api::events::v1::Event>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some(reason)
            })
            .filter_map(|e| e.note)
            .collect()
    }

    async fn runners(&self) -> Vec<Runner> {
        self.h.list().await
    }

    async fn pods(&self) -> Vec<Pod> {
        self.h.list().await
    }

    /// Queues `count` jobs for runners labelled `label`, lasting `duration`, ending with
    /// `conclusion`.
    fn submit(&self, count: u32, label: &str, duration: Duration, conclusion: &str) -> Vec<u64> {
        let labels = vec!["self-hosted".to_owned(), label.to_owned()];
        self.h.submit_jobs(count, labels, duration, conclusion)
    }

    /// Whether every job completed with `conclusion`, none interrupted.
    fn all_completed(&self, ids: &[u64], conclusion: &str) -> bool {
        self.h.all_completed(ids, conclusion)
    }

    /// Status codes the webhook server gave to deliveries of `event` with `action`, in order
    /// (every attempt, duplicates and redeliveries included).
    fn answers(&self, event: &str, action: &str) -> Vec<u16> {
        self.h
            .sim
            .deliveries()
            .iter()
            .filter(|d| d.event == event && d.action.as_deref() == Some(action))
            .flat_map(|d| d.attempts.iter().filter_map(|a| a.status))
            .collect()
    }

    /// Calls `seen` with every version of the `K` named `name` a watch shows, until the stack
    /// is dropped.
    fn watch_named<K>(&mut self, name: &str, mut seen: impl FnMut(K) + Send + 'static)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let api = self.h.api::<K>();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        self.watchers.push(tokio::spawn(async move {
            let mut stream = watcher(api, config)
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(Ok(object)) = stream.next().await {
                seen(object);
            }
        }));
    }

    /// Records the highest `spec.replicas` RunnerDeployment `name` ever has, from a watch.
    fn track_max_replicas(&mut self, name: &str) -> Arc<AtomicI32> {
        let max = Arc::new(AtomicI32::new(0));
        let seen = max.clone();
        self.watch_named(name, move |rd: RunnerDeployment| {
            seen.fetch_max(rd.spec.replicas.unwrap_or(0), Ordering::SeqCst);
        });
        max
    }

    /// Records when each pod of the namespace is first seen, from a watch.
    fn track_pods(&mut self) -> Arc<Mutex<BTreeMap<String, Instant>>> {
        let seen = Arc::new(Mutex::new(BTreeMap::new()));
        let api = self.h.api::<Pod>();
        let record = seen.clone();
        self.watchers.push(tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(Ok(pod)) = stream.next().await {
                record
                    .lock()
                    .unwrap()
                    .entry(pod.name_any())
                    .or_insert_with(Instant::now);
            }
        }));
        seen
    }

    async fn shutdown(mut self) {
        if let Some(nodes) = self.nodes.take() {
            nodes.shutdown().await.unwrap();
        }
    }
}

impl Describe for Stack {
    const POLL: Duration = Duration::from_millis(100);

    /// What a failing test should print.
    async fn describe(&self) -> String {
        let mut out = String::new();
        for rd in self
            .h
            .api::<RunnerDeployment>()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            out += &format!(
                "runnerdeployment {} replicas={:?} effectiveTime={:?}\n",
                rd.name_any(),
                rd.spec.replicas,
                rd.spec.effective_time
            );
        }
        for hra in self
            .h
            .api::<HorizontalRunnerAutoscaler>()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            out += &format!(
                "hra {} reservations={:?} status={:?}\n",
                hra.name_any(),
                hra.spec.capacity_reservations,
                hra.status
            );
        }
        for r in self.runners().await {
            out += &format!(
                "runner {} phase={:?} deleting={}\n",
                r.name_any(),
                r.status.as_ref().and_then(|s| s.phase.clone()),
                r.metadata.deletion_timestamp.is_some()
            );
        }
        for p in self.pods().await {
            out += &format!(
                "pod {} phase={:?} deleting={}\n",
                p.name_any(),
                p.status.as_ref().and_then(|s| s.phase.clone()),
                p.metadata.deletion_timestamp.is_some()
            );
        }
        let deliveries = self.h.sim.deliveries();
        for d in &deliveries {
            out += &format!(
                "delivery {} {} {:?} dropped={} attempts={:?}\n",
                d.guid,
                d.event,
                d.action,
                d.dropped,
                d.attempts
                    .iter()
                    .map(|a| (a.status, a.duplicate, a.redelivery))
                    .collect::<Vec<_>>()
            );
        }
        let jobs = self.h.sim.read(|w, _| {
            w.jobs
                .values()
                .map(|j| {
                    format!(
                        "job {} status={:?} conclusion={:?} runner={:?}\n",
                        j.id, j.status, j.conclusion, j.runner_name
                    )
                })
                .collect::<String>()
        });
        out + &jobs
    }
}

/// Waits until the autoscaler has reconciled once (its status has a desired count) and the
/// deployment carries it.
async fn wait_reconciled(s: &Stack, name: &str, desired: i32) {
    eventually_of(
        s,
        &format!("{name} reconciled to {desired}"),
        WAIT,
        || async {
            let ok =
                s.desired(name).await == Some(desired) && s.replicas(name).await == Some(desired);
            ok.then_some(())
        },
    )
    .await;
}

/// Waits until the deployment has no runners and no pods left.
async fn wait_empty(s: &Stack, name: &str) {
    eventually_of(s, "no runners or pods left", WAIT, || async {
        let ok = s.replicas(name).await == Some(0)
            && s.runners().await.is_empty()
            && s.pods().await.is_empty();
        ok.then_some(())
    })
    .await;
}

/// Milliseconds from `start` to each pod's first sighting, sorted.
fn latencies(start: Instant, pods: &Mutex<BTreeMap<String, Instant>>) -> Vec<u128> {
    let mut ms: Vec<u128> = pods
        .lock()
        .unwrap()
        .values()
        .map(|t| t.saturating_duration_since(start).as_millis())
        .collect();
    ms.sort_unstable();
    ms
}

/// A delivery signed with `secret`, sent like GitHub does; returns status and body.
async fn post_delivery(
    url: &str,
    event: &str,
    guid: &str,
    secret: &str,
    payload: &Value,
) -> (u16, String) {
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let body = serde_json::to_vec(payload).unwrap();
    hangar_testkit::http::deliver(addr, secret.as_bytes(), event, guid, &body)
        .await
        .expect("the webhook server answers")
}

fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .unwrap()
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string()
}

/// An autoscaler spec scaling on `workflow_job` between `min` and `max`.
fn webhook_spec(min: i32, max: i32) -> Value {
    json!({
        "minReplicas": min,
        "maxReplicas": max,
        "scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "duration": "30m"}],
    })
}

#[tokio::test]
async fn queued_jobs_scale_a_deployment_from_zero_and_back_to_min() {
    let mut s = Stack::start("as-zero", true).await;
    assert_eq!(s.subscribe(SECRET).await, 200);
    s.apply_deployment("zero", "zero", 0);
    s.apply_hra("zero", webhook_spec(0, 5));
    wait_reconciled(&s, "zero", 0).await;
    let max = s.track_max_replicas("zero");
    let pods = s.track_pods();

    let submitted = Instant::now();
    let jobs = s.submit(3, "zero", Duration::from_secs(2), "success");
    eventually_of(&s, "3 jobs done by 3 new runners", WAIT, || async {
        s.all_completed(&jobs, "success").then_some(())
    })
    .await;
    let first_pods = latencies(submitted, &pods);
    println!("submission -> runner pod seen (ms): {first_pods:?}");
    // Every job's in_progress delivery told how long it waited; pods served queued
    // deliveries (not necessarily all three: a runner that takes a job whose pod is not yet
    // created leaves that pod nothing to serve).
    eventually_of(&s, "3 queue-to-assignment observations", WAIT, || async {
        (s.histogram_count("hangar_job_queue_to_assignment_seconds") == 3).then_some(())
    })
    .await;
    let served = s.histogram_count("hangar_webhook_delivery_to_pod_seconds");
    assert!(
        (1..=3).contains(&served),
        "{served} delivery-to-pod observations\n{}",
        s.exporter.render()
    );
    assert!(
        max.load(Ordering::SeqCst) <= 3,
        "never more replicas than queued jobs\n{}",
        s.describe().await
    );
    assert!(
        s.answers("workflow_job", "queued")
            .iter()
            .all(|c| *c == 202)
    );

    // Completions release the reservations; the count is held for the scale-down delay (10
    // minutes by default), then returns to minReplicas.
    eventually_of(&s, "reservations released", WAIT, || async {
        (s.reservations("zero").await == 0).then_some(())
    })
    .await;
    s.h.clock.advance(Duration::from_secs(11 * 60));
    wait_empty(&s, "zero").await;
    wait_reconciled(&s, "zero", 0).await;
    assert_eq!(s.h.interrupted(), 0);
    s.shutdown().await;
}

#[tokio::test]
async fn a_finished_runners_place_is_released_as_soon_as_the_autoscaler_accounts_for_its_job() {
    // No timer releases a place in this test: the release grace outlasts it.
    let mut s = Stack::start_configured("as-place", true, |c| {
        c.release_grace = Duration::from_secs(5 * 60);
    })
    .await;
    assert_eq!(s.subscribe(SECRET).await, 200);
    s.apply_deployment("place", "place", 0);
    s.apply_hra("place", webhook_spec(0, 4));
    wait_reconciled(&s, "place", 0).await;
    let max = s.track_max_replicas("place");

    let jobs = s.submit(2, "place", Duration::from_secs(1), "success");
    eventually_of(&s, "2 jobs done", WAIT, || async {
        s.all_completed(&jobs, "success").then_some(())
    })
    .await;
    let ran = s.h.runners_of(&jobs);
    assert_eq!(ran.len(), 2, "each job names its runner");
    // Each completion's tombstone names the runner that ran the job.
    eventually_of(&s, "tombstones naming both runners", WAIT, || async {
        let named: BTreeSet<String> = s
            .hra("place")
            .await
            .spec
            .capacity_reservations
            .iter()
            .flatten()
            .filter_map(|r| r.runner_name.clone())
            .collect();
        (named == ran).then_some(())
    })
    .await;
    // The count stays at 2 for the scale-down delay, now computed without the two jobs: both
    // places go to new runners at once.
    let fresh = eventually_of(
        &s,
        "two new runners in the finished ones' places",
        WAIT,
        || async {
            let runners = s.runners().await;
            let running: BTreeSet<String> = runners
                .iter()
                .filter(|r| r.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
                .map(|r| r.name_any())
                .collect();
            (runners.len() == 2 && running.len() == 2 && running.is_disjoint(&ran))
                .then_some(running)
        },
    )
    .await;
    assert_eq!(s.replicas("place").await, Some(2));
    let more = s.submit(2, "place", Duration::from_secs(1), "success");
    eventually_of(&s, "2 more jobs done", WAIT, || async {
        s.all_completed(&more, "success").then_some(())
    })
    .await;
    // The idle runners waiting in the released places took them; nothing else was created.
    assert_eq!(s.h.runners_of(&more), fresh);
    assert!(
        max.load(Ordering::SeqCst) <= 2,
        "never more than 2 replicas"
    );
    assert_eq!(s.h.interrupted(), 0);
    s.shutdown().await;
}

#[tokio::test]
async fn the_autoscaler_accounting_for_a_finished_job_wakes_a_full_set_at_once() {
    // No timer wakes the set in this test: the release grace and the sync period outlast it,
    // and no pull pass runs. The count stays at 2 throughout, so only the autoscaler's own
    // change can tell the set that the finished runners' places are free.
    let s = Stack::start_configured("as-wake", true, |c| {
        c.release_grace = Duration::from_secs(10 * 60);
        c.sync_period = Duration::from_secs(10 * 60);
        c.webhook_pull_interval = Duration::ZERO;
    })
    .await;
    assert_eq!(s.subscribe(SECRET).await, 200);
    s.apply_deployment("wake", "wake", 0);
    s.apply_hra("wake", webhook_spec(0, 4));
    wait_reconciled(&s, "wake", 0).await;

    let jobs = s.submit(2, "wake", Duration::from_secs(3), "success");
    eventually_of(&s, "both jobs running", WAIT, || async {
        (s.h.busy().len() == 2).then_some(())
    })
    .await;
    // The completions are not delivered yet: GitHub loses them.
    let drop_all = s.h.sim.faults().merged(json!({"webhook_drop_rate": 1.0}));
    s.h.sim.set_faults(drop_all.unwrap());
    eventually_of(&s, "2 jobs done", WAIT, || async {
        s.all_completed(&jobs, "success").then_some(())
    })
    .await;
    let ran = s.h.runners_of(&jobs);
    eventually_of(&s, "both runner containers exited", WAIT, || async {
        let pods = s.pods().await;
        let exited = pods
            .iter()
            .filter(|p| {
                p.status
                    .iter()
                    .flat_map(|st| st.container_statuses.iter().flatten())
                    .any(|c| {
                        c.name == "runner"
                            && c.state.as_ref().is_some_and(|st| st.terminated.is_some())
                    })
            })
            .count();
        (exited == 2).then_some(())
    })
    .await;
    // Unaccounted, the finished runners keep their places: nothing new is created.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let names: BTreeSet<String> = s.runners().await.iter().map(|r| r.name_any()).collect();
    assert!(names.is_subset(&ran), "no fresh runner yet: {names:?}");

    let deliver_all = s.h.sim.faults().merged(json!({"webhook_drop_rate": 0.0}));
    s.h.sim.set_faults(deliver_all.unwrap());
    let lost: Vec<String> =
        s.h.sim
            .deliveries()
            .into_iter()
            .filter(|d| d.dropped && d.action.as_deref() == Some("completed"))
            .map(|d| d.guid)
            .collect();
    assert_eq!(lost.len(), 2, "both completions were lost");
    for guid in &lost {
        s.h.sim.redeliver(guid).unwrap();
    }
    eventually_of(
        &s,
        "two new runners in the finished ones' places",
        WAIT,
        || async {
            let runners = s.runners().await;
            let running: BTreeSet<String> = runners
                .iter()
                .filter(|r| r.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
                .map(|r| r.name_any())
                .collect();
            (runners.len() == 2 && running.len() == 2 && running.is_disjoint(&ran)).then_some(())
        },
    )
    .await;
    assert_eq!(s.replicas("wake").await, Some(2));
    assert_eq!(s.h.interrupted(), 0);
    s.shutdown().await;
}

#[tokio::test]
async fn a_full_pool_with_a_job_waiting_replaces_a_finished_runner_before_its_completion_is_heard()
{
    waiting_job_takes_a_finished_runners_place_unheard("RunnerDeployment").await;
}

#[tokio::test]
async fn a_full_runner_set_with_a_job_waiting_replaces_a_finished_runner_before_its_completion_is_heard()
 {
    waiting_job_takes_a_finished_runners_place_unheard("RunnerSet").await;
}

/// A pool of `kind` at its maximum of 2 with a third job waiting: once GitHub loses every
/// delivery, the third job still gets a runner in a finished one's place. Nothing but
/// knowledge can release a place: no timer runs within the test.
async fn waiting_job_takes_a_finished_runners_place_unheard(kind: &str) {
    let s = Stack::start_configured(&format!("as-absorb-{}", kind.len()), true, |c| {
        c.release_grace = Duration::from_secs(10 * 60);
        c.sync_period = Duration::from_secs(10 * 60);
        c.webhook_pull_interval = Duration::ZERO;
    })
    .await;
    assert_eq!(s.subscribe(SECRET).await, 200);
    if kind == "RunnerSet" {
        s.apply_runner_set("absorb", "absorb", 0);
    } else {
        s.apply_deployment("absorb", "absorb", 0);
    }
    s.apply_hra_for(kind, "absorb", webhook_spec(0, 2));
    eventually_of(&s, "the autoscaler's first count", WAIT, || async {
        (s.desired("absorb").await == Some(0)).then_some(())
    })
    .await;

    // Three jobs for a pool of two: the third waits beyond maxReplicas.
    let first = s.submit(2, "absorb", Duration::from_secs(3), "success");
    let third = s.submit(1, "absorb", Duration::from_secs(1), "success");
    eventually_of(&s, "two jobs running, three reserved", WAIT, || async {
        (s.h.busy().len() == 2 && s.reservations("absorb").await == 3).then_some(())
    })
    .await;
    // From now on GitHub loses every delivery: no completion is ever heard.
    let drop_all = s.h.sim.faults().merged(json!({"webhook_drop_rate": 1.0}));
    s.h.sim.set_faults(drop_all.unwrap());

    // Whichever way the two completions go, the waiting job keeps the count at 2: one place is
    // wanted either way, and the third job gets a fresh runner in it.
    eventually_of(&s, "the waiting job done", WAIT, || async {
        s.all_completed(&third, "success").then_some(())
    })
    .await;
    // The third job (1 s) can end before the later of the first two (3 s) when that one's
    // runner started later.
    eventually_of(&s, "the first two jobs done", WAIT, || async {
        s.all_completed(&first, "success").then_some(())
    })
    .await;
    assert_eq!(s.reservations("absorb").await, 3, "no completion was heard");
    assert_eq!(s.h.interrupted(), 0);
    s.shutdown().await;
}

/// A runner that takes a job learns its GitHub ID from the job's signed `in_progress`
/// delivery: no runner list is taken for it.
#[tokio::test]
async fn a_runner_seen_at_work_learns_its_id_from_the_delivery_without_a_runner_list() {
    // Runners are looked up 10 s after their pods start, by then long at work; nothing else
    // lists runners within the test (the busy-runner refresh and the leaked-registration sweep
    // are off).
    let s = Stack::start_configured("as-seen", true, |c| {
        c.registration_check_interval = Duration::from_secs(10);
        c.runner_refresh = Duration::from_secs(3600);
        c.leaked_registration_sweep = Duration::ZERO;
    })
    .await;
    assert_eq!(s.subscribe(SECRET).await, 200);
    s.apply_deployment("seen", "seen", 0);
    s.apply_hra("seen", webhook_spec(0, 2));
    wait_reconciled(&s, "seen", 0).await;

    let jobs = s.submit(2, "seen", Duration::from_secs(40), "success");
    let ran = eventually_of(&s, "both jobs on runners", WAIT, || async {
        let ran = s.h.runners_of(&jobs);
        (ran.len() == 2).then_some(ran)
    })
    .await;
    let ids: BTreeMap<String, String> = s.h.sim.read(|w, _| {
        w.runners
            .values()
            .filter(|r| ran.contains(&r.name))
            .map(|r| (r.name.clone(), r.id.to_string()))
            .collect()
    });
    assert_eq!(ids.len(), 2, "both runners registered");
    eventually_of(
        &s,
        "each pod annotated with its runner's ID while its job runs",
        Duration::from_secs(35),
        || async {
            let annotated: BTreeMap<String, String> = s
                .pods()
                .await
                .iter()
                .filter_map(|p| {
                    let id = p.annotations().get("actions-runner/id")?;
                    Some((p.name_any(), id.clone()))
                })
                .filter(|(name, _)| ran.contains(name))
                .collect();
            (annotated == ids).then_some(())
        },
    )
    .await;
    assert!(
        !s.h.all_completed(&jobs, "success"),
        "learnt while the jobs ran, not at their end"
    );
    assert_eq!(
        s.api_calls("GET /repos/{owner}/{repo}/actions/runners"),
        0,
        "no runner list"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn a_runner_github_said_is_done_is_replaced_before_its_pod_stops() {
    // Runners stay up after their job (actions/runner slow to exit): the kubelet reports them
    // running, while GitHub has their jobs completed. The signed `completed` delivery tells the
    // set that the runner is done, so the next job gets a runner meanwhile.
    let s = Stack::start("as-done", true).await;
    assert_eq!(s.subscribe(SECRET).await, 200);
    let faults = s.faults.as_ref().expect("nodes");
    let slow = faults.add(RunnerFault::SlowExit, PodMatch::NamePrefix("done-".into()));
    s.apply_deployment("done", "done", 1);
    let first = s.submit(1, "done", Duration::from_secs(1), "success");
    eventually_of(&s, "the first job done", WAIT, || async {
        s.all_completed(&first, "success").then_some(())
    })
    .await;
    let done = s.h.runners_of(&first);
    let second = s.submit(1, "done", Duration::from_secs(1), "success");
    eventually_of(&s, "the second job done on a new runner", WAIT, || async {
        s.all_completed(&second, "success").then_some(())
    })
    .await;
    assert!(s.h.runners_of(&second).is_disjoint(&done));
    let lingering: Vec<String> = s
        .pods()
        .await
        .iter()
        .filter(|p| done.contains(&p.name_any()))
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .map(|p| p.name_any())
        .collect();
    assert_eq!(
        lingering.len(),
        1,
        "the first runner's pod still runs: {lingering:?}\n{}",
        s.describe().await
    );
    // Once it exits, its Runner goes as finished.
    faults.remove(slow);
    eventually_of(&s, "the first runner's pod gone", WAIT, || async {
        let pods = s.pods().await;
        (!pods.iter().any(|p| done.contains(&p.name_any()))).then_some(())
    })
    .await;
    s.shutdown().await;
}

#[tokio::test]
async fn duplicated_and_reordered_deliveries_neither_double_scale_nor_strand_a_job() {
    let mut s = Stack::start("as-faults", true).await;
    assert_eq!(s.subscribe(SECRET).await, 200);
    let faults =
        s.h.sim
            .faults()
            .merged(json!({
                "webhook_duplicate_rate": 0.5,
                "webhook_reorder_rate": 0.5,
                "webhook_max_delay_ms": 200,
            }))
            .unwrap();
    s.h.sim.set_faults(faults);
    s.apply_deployment("faults", "faults", 0);
    let mut spec = webhook_spec(0, 8);
    spec["scaleDownDelaySecondsAfterScaleOut"] = json!(0);
    s.apply_hra("faults", spec);
    wait_reconciled(&s, "faults", 0).await;
    let max = s.track_max_replicas("faults");

    let jobs = s.submit(4, "faults", Duration::from_secs(2), "success");
    eventually_of(&s, "4 jobs done", WAIT, || async {
        s.all_completed(&jobs, "success").then_some(())
    })
    .await;
    // Every completed delivery (and its duplicates) has been answered by now or soon; then
    // nothing is reserved any more and the deployment is back at zero.
    eventually_of(
        &s,
        "reservations released and scaled to zero",
        WAIT,
        || async {
            let ok = s.reservations("faults").await == 0 && s.replicas("faults").await == Some(0);
            ok.then_some(())
        },
    )
    .await;
    let duplicates =
        s.h.sim
            .deliveries()
            .iter()
            .filter(|d| d.attempts.iter().any(|a| a.duplicate))
            .count();
    assert!(duplicates > 0, "the duplicate fault was not exercised");
    assert!(
        max.load(Ordering::SeqCst) <= 4,
        "duplicates must not scale beyond the 4 queued jobs\n{}",
        s.describe().await
    );

    // GitHub's redelivery of a past queued or completed delivery changes nothing.
    s.h.sim.set_faults(ghsim::Faults::default());
    let before = s.answers("workflow_job", "queued").len();
    let queued =
        s.h.sim
            .deliveries()
            .into_iter()
            .find(|d| d.action.as_deref() == Some("queued"))
            .unwrap();
    s.h.sim.redeliver(&queued.guid).unwrap();
    let answer = eventually_of(&s, "the redelivery answered", WAIT, || async {
        let answers = s.answers("workflow_job", "queued");
        (answers.len() > before).then(|| answers[answers.len() - 1])
    })
    .await;
    assert_eq!(
        answer, 200,
        "a redelivered queued event is a duplicate, not a 202"
    );
    assert_eq!(s.reservations("faults").await, 0);
    assert_eq!(s.h.interrupted(), 0);
    s.shutdown().await;
}

#[tokio::test]
async fn deliveries_with_a_wrong_signature_are_rejected_with_401() {
    let s = Stack::start("as-sig", false).await;
    assert_eq!(s.subscribe("not-the-secret").await, 401);
    s.apply_deployment("sig", "sig", 0);
    s.apply_hra("sig", webhook_spec(0, 3));
    wait_reconciled(&s, "sig", 0).await;
    s.submit(1, "sig", Duration::from_secs(1), "success");
    let answers = eventually_of(&s, "the queued delivery answered", WAIT, || async {
        let answers = s.answers("workflow_job", "queued");
        (!answers.is_empty()).then_some(answers)
    })
    .await;
    assert_eq!(answers, vec![401]);
    // A rejected delivery is never queued, so nothing can have been reserved.
    assert_eq!(s.reservations("sig").await, 0);
    assert_eq!(s.replicas("sig").await, Some(0));

    // A correctly signed one from the same origin is accepted.
    let (status, body) = post_delivery(
        &s.webhook_url,
        "ping",
        "manual-ping",
        SECRET,
        &json!({"zen": "Design for failure.", "hook_id": 1}),
    )
    .await;
    assert_eq!((status, body.as_str()), (200, "pong"));
}

#[tokio::test]
async fn dropped_deliveries_are_made_up_for_by_the_queued_jobs_metric() {
    // GitHub does not redeliver on its own: a lost `queued` delivery would strand its job if
    // webhooks were the only signal. With the pull metric beside the trigger, every job still
    // gets a runner; a lost `completed` only holds a reservation until it expires.
    let s = Stack::start("as-drop", true).await;
    assert_eq!(s.subscribe(SECRET).await, 200);
    let faults =
        s.h.sim
            .faults()
            .merged(json!({"webhook_drop_rate": 0.75}))
            .unwrap();
    s.h.sim.set_faults(faults);
    s.apply_deployment("drop", "drop", 0);
    let mut spec = webhook_spec(0, 6);
    spec["scaleDownDelaySecondsAfterScaleOut"] = json!(0);
    spec["metrics"] = json!([{"type": "TotalNumberOfQueuedAndInProgressWorkflowRuns"}]);
    s.apply_hra("drop", spec);
    wait_reconciled(&s, "drop", 0).await;

    let jobs = s.submit(6, "drop", Duration::from_secs(2), "success");
    eventually_of(
        &s,
        "6 jobs done despite dropped deliveries",
        WAIT,
        || async { s.all_completed(&jobs, "success").then_some(()) },
    )
    .await;
    let dropped =
        s.h.sim
            .deliveries()
            .iter()
            .filter(|d| d.dropped && d.action.as_deref() == Some("queued"))
            .count();
    assert!(
        dropped > 0,
        "no queued delivery was dropped; the fault was not exercised"
    );
    assert_eq!(s.h.interrupted(), 0);
    s.shutdown().await;
}

#[tokio::test]
async fn the_queued_jobs_metric_alone_scales_up_and_back_down() {
    let mut s = Stack::start("as-pull", true).await;
    s.apply_deployment("pull", "pull", 0);
    s.apply_hra(
        "pull",
        json!({
            "minReplicas": 0,
            "maxReplicas": 5,
            "scaleDownDelaySecondsAfterScaleOut": 0,
            "metrics": [{"type": "TotalNumberOfQueuedAndInProgressWorkflowRuns"}],
        }),
    );
    wait_reconciled(&s, "pull", 0).await;
    let max = s.track_max_replicas("pull");
    // Jobs for other runners do not count.
    s.submit(2, "someone-else", Duration::from_secs(1), "success");
    let jobs = s.submit(3, "pull", Duration::from_secs(3), "success");
    eventually_of(&s, "3 jobs done", WAIT, || async {
        s.all_completed(&jobs, "success").then_some(())
    })
    .await;
    wait_empty(&s, "pull").await;
    let max = max.load(Ordering::SeqCst);
    assert!(
        (1..=3).contains(&max),
        "scaled to {max}: the metric counts only the 3 matching jobs"
    );
    assert!(s.h.sim.deliveries().is_empty(), "no webhooks were involved");
    assert_eq!(s.h.interrupted(), 0);
    s.shutdown().await;
}

/// A pool that the queued-jobs metric alone scales, at its maximum with jobs waiting: each
/// finished runner's place serves the next job at once (the count says how many wait beyond
/// the pool), and once none waits no runner is created for demand already gone. A finished
/// runner's place then waits for an observation taken after it finished, which its set asks
/// for: not for the sync period, and not for the release grace.
#[tokio::test]
async fn a_full_pool_on_the_queued_jobs_metric_replaces_finished_runners_only_for_waiting_jobs() {
    full_pool_on_the_queued_jobs_metric("RunnerDeployment").await;
}

#[tokio::test]
async fn a_full_runner_set_on_the_queued_jobs_metric_replaces_finished_runners_only_for_waiting_jobs()
 {
    full_pool_on_the_queued_jobs_metric("RunnerSet").await;
}

async fn full_pool_on_the_queued_jobs_metric(kind: &str) {
    const SYNC: Duration = Duration::from_secs(30);
    let prefix = format!("as-pull-full-{}", kind.len());
    let mut s = Stack::start_configured(&prefix, true, |c| {
        c.release_grace = Duration::from_secs(10 * 60);
        c.sync_period = SYNC;
        c.webhook_pull_interval = Duration::ZERO;
    })
    .await;
    if kind == "RunnerSet" {
        s.apply_runner_set("full", "full", 0);
    } else {
        s.apply_deployment("full", "full", 0);
    }
    let pods = s.track_pods();
    // Five one-job runs for a pool of two, queued before the autoscaler exists, so that its
    // first evaluation counts them (the next is a sync period away).
    let jobs: Vec<u64> = (0..5)
        .flat_map(|_| s.submit(1, "full", Duration::from_secs(2), "success"))
        .collect();
    let applied = Instant::now();
    s.apply_hra_for(
        kind,
        "full",
        json!({
            "minReplicas": 0,
            "maxReplicas": 2,
            "scaleDownDelaySecondsAfterScaleOut": 0,
            "metrics": [{"type": "TotalNumberOfQueuedAndInProgressWorkflowRuns"}],
        }),
    );
    eventually_of(&s, "5 jobs done on 2 runners", WAIT, || async {
        s.all_completed(&jobs, "success").then_some(())
    })
    .await;
    let took = applied.elapsed();
    assert!(
        took < SYNC - Duration::from_secs(5),
        "5 jobs of 2 s on 2 runners took {took:?}: a finished runner's place waited for the \
         sync period"
    );
    eventually_of(&s, "the pool back to 0, no pod left", WAIT, || async {
        let empty = s.desired("full").await == Some(0) && s.pods().await.is_empty();
        empty.then_some(())
    })
    .await;
    let created = pods.lock().unwrap().len();
    assert_eq!(
        created, 5,
        "{created} runner pods for 5 jobs: runners were created for jobs already gone"
    );
    assert_eq!(s.h.interrupted(), 0);
    s.shutdown().await;
}

/// With more runs waiting than `maxReplicas` runners can take, the queued-jobs metric lists the
/// jobs of only as many runs as it takes to reach twice `maxReplicas` (found by chaos: listing every
/// run's jobs each sync spent the hour's API budget while runs piled up).
#[tokio::test]
async fn the_queued_jobs_metric_lists_no_more_runs_jobs_than_max_replicas_needs() {
    let s = Stack::start("as-pull-cap", true).await;
    s.apply_deployment("cap", "cap", 0);
    s.apply_hra(
        "cap",
        json!({
            "minReplicas": 0,
            "maxReplicas": 2,
            "scaleDownDelaySecondsAfterScaleOut": 0,
            "metrics": [{"type": "TotalNumberOfQueuedAndInProgressWorkflowRuns"}],
        }),
    );
    wait_reconciled(&s, "cap", 0).await;
    // One run per job, as pushes to eight branches would queue them.
    let jobs: Vec<u64> = (0..8)
        .flat_map(|_| s.submit(1, "cap", Duration::from_secs(5), "success"))
        .collect();
    eventually_of(&s, "8 jobs done on 2 runners", WAIT, || async {
        s.all_completed(&jobs, "success").then_some(())
    })
    .await;
    let run_lists = s.api_calls("GET /repos/{owner}/{repo}/actions/runs");
    let job_lists = s.api_calls("GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs");
    // Each evaluation lists the queued and the in-progress runs (2 calls), then the jobs of at
    // most twice `maxReplicas` = 4 runs.
    assert!(
        run_lists >= 2,
        "the metric was evaluated: {run_lists} run lists"
    );
    assert!(
        job_lists <= 2 * run_lists,
        "{job_lists} job lists for {} evaluations: more than 4 runs' jobs listed per evaluation",
        run_lists / 2
    );
    assert_eq!(s.h.interrupted(), 0);
    s.shutdown().await;
}

/// The queued-runs metric counts a run's jobs from the listing an earlier sync made while the
/// run is unchanged: runs of another pool's jobs that wait in the same repository cost one
/// listing each, not one at every sync (found by the chaos soak: 89 % of its GitHub calls
/// were these listings).
#[tokio::test]
async fn the_queued_jobs_metric_lists_an_unchanged_runs_jobs_once() {
    let s = Stack::start("as-pull-once", false).await;
    // Five more evaluations (each lists the queued and the in-progress runs).
    five_waiting_runs_are_listed_once(&s, 5).await;
    s.shutdown().await;
}

#[tokio::test]
async fn the_pull_recovery_and_the_queued_jobs_metric_list_a_runs_jobs_once_between_them() {
    // A pull pass every 2 s for a webhook-driven pool, beside the metric-driven one: both read
    // the same repository's runs.
    let s = Stack::start_configured("as-pull-shared", false, |c| {
        c.webhook_pull_interval = Duration::from_secs(2);
    })
    .await;
    s.apply_deployment("hooked", "hooked", 0);
    s.apply_hra("hooked", webhook_spec(0, 5));
    wait_reconciled(&s, "hooked", 0).await;
    // Ten more passes or evaluations.
    five_waiting_runs_are_listed_once(&s, 10).await;
    s.shutdown().await;
}

#[tokio::test]
async fn a_pull_pass_lists_nothing_for_an_autoscaler_whose_reservations_fill_its_cap() {
    let s = Stack::start_configured("as-pull-capped", false, |c| {
        c.webhook_pull_interval = Duration::from_secs(1);
    })
    .await;
    assert_eq!(s.subscribe(SECRET).await, 200);
    s.apply_deployment("capped", "capped", 0);
    s.apply_hra("capped", webhook_spec(0, 1));
    wait_reconciled(&s, "capped", 0).await;
    // No node: both jobs wait, each delivered and reserved, one beyond maxReplicas.
    s.submit(2, "capped", Duration::from_secs(5), "success");
    eventually_of(&s, "both jobs reserved", WAIT, || async {
        (s.reservations("capped").await == 2).then_some(())
    })
    .await;
    let run_lists = "GET /repos/{owner}/{repo}/actions/runs";
    let before = s.api_calls(run_lists);
    // Four passes: none could reserve anything, so none lists the runs.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        s.api_calls(run_lists),
        before,
        "pull passes listed runs for an autoscaler at its cap"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn a_pull_pass_lists_runs_only_until_the_jobs_it_found_fill_the_room() {
    let s = Stack::start_configured("as-pull-room", false, |c| {
        c.webhook_pull_interval = Duration::from_secs(1);
    })
    .await;
    assert_eq!(s.subscribe(SECRET).await, 200);
    s.apply_deployment("roomy", "roomy", 0);
    s.apply_hra("roomy", webhook_spec(0, 1));
    wait_reconciled(&s, "roomy", 0).await;
    // Every delivery is lost and no node runs a runner: three runs of one job each wait, and
    // only the pull can see them.
    let drop_all = s.h.sim.faults().merged(json!({"webhook_drop_rate": 1.0}));
    s.h.sim.set_faults(drop_all.unwrap());
    for _ in 0..3 {
        s.submit(1, "roomy", Duration::from_secs(5), "success");
    }
    eventually_of(&s, "the pull reserved a runner", WAIT, || async {
        (s.reservations("roomy").await == 1).then_some(())
    })
    .await;
    // Three more passes, each at the cap.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let job_lists = s.api_calls("GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs");
    assert_eq!(
        job_lists, 1,
        "the oldest run's job filled the room of one: no other run's jobs are listed"
    );
    s.shutdown().await;
}

/// A pool `metered` scaled by the queued-runs metric; four runs of another pool's jobs
/// (nothing takes them) and one of `metered`'s (no node runs its runner) wait, unchanged,
/// through `listings` more listings of the runs (each lists the queued and the in-progress
/// ones): the jobs of each run are listed once in all, and the reused listing still counts
/// `metered`'s job.
async fn five_waiting_runs_are_listed_once(s: &Stack, listings: u64) {
    s.apply_deployment("metered", "metered", 0);
    s.apply_hra(
        "metered",
        json!({
            "minReplicas": 0,
            "maxReplicas": 5,
            "scaleDownDelaySecondsAfterScaleOut": 0,
            "metrics": [{"type": "TotalNumberOfQueuedAndInProgressWorkflowRuns"}],
        }),
    );
    wait_reconciled(s, "metered", 0).await;
    for _ in 0..4 {
        s.submit(1, "someone-else", Duration::from_secs(5), "success");
    }
    s.submit(1, "metered", Duration::from_secs(5), "success");
    let run_lists = "GET /repos/{owner}/{repo}/actions/runs";
    let before = s.api_calls(run_lists);
    eventually_of(
        s,
        &format!("{listings} more run listings"),
        WAIT,
        || async { (s.api_calls(run_lists) >= before + 2 * listings).then_some(()) },
    )
    .await;
    wait_reconciled(s, "metered", 1).await;
    let job_lists = s.api_calls("GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs");
    assert!(
        job_lists <= 5,
        "{job_lists} job lists for 5 unchanged runs over {listings} listings: listed again"
    );
}

#[tokio::test]
async fn percentage_runners_busy_adds_runners_when_most_are_busy() {
    let mut s = Stack::start("as-busy", true).await;
    s.apply_deployment("busy", "busy", 2);
    s.apply_hra(
        "busy",
        json!({
            "minReplicas": 2,
            "maxReplicas": 4,
            "metrics": [{
                "type": "PercentageRunnersBusy",
                "scaleUpThreshold": "0.75",
                "scaleDownThreshold": "0.3",
            }],
        }),
    );
    wait_reconciled(&s, "busy", 2).await;
    let max = s.track_max_replicas("busy");
    // Both runners take a long job: 2 of 2 busy ≥ 75% → ceil(2 × 1.3) = 3.
    let jobs = s.submit(2, "busy", Duration::from_secs(15), "success");
    eventually_of(&s, "a third runner while both are busy", WAIT, || async {
        (s.replicas("busy").await == Some(3)).then_some(())
    })
    .await;
    eventually_of(&s, "the long jobs done", WAIT, || async {
        s.all_completed(&jobs, "success").then_some(())
    })
    .await;
    // Idle again: below 30% busy → floor(3 × 0.7) = 2, once the scale-down delay has passed.
    s.h.clock.advance(Duration::from_secs(11 * 60));
    eventually_of(&s, "back to 2 runners", WAIT, || async {
        (s.replicas("busy").await == Some(2)).then_some(())
    })
    .await;
    assert_eq!(
        max.load(Ordering::SeqCst),
        3,
        "2 of 3 busy is between the thresholds"
    );
    assert_eq!(s.h.interrupted(), 0);
    s.shutdown().await;
}

#[tokio::test]
async fn a_scheduled_override_raises_min_replicas_only_within_its_window() {
    let s = Stack::start("as-schedule", false).await;
    s.apply_deployment("sched", "sched", 0);
    let start = SystemTime::now() + Duration::from_secs(3600);
    let end = start + Duration::from_secs(3600);
    s.apply_hra(
        "sched",
        json!({
            "minReplicas": 0,
            "maxReplicas": 3,
            "scheduledOverrides": [{
                "startTime": rfc3339(start),
                "endTime": rfc3339(end),
                "minReplicas": 2,
            }],
        }),
    );
    wait_reconciled(&s, "sched", 0).await;
    let summary = s
        .hra("sched")
        .await
        .status
        .unwrap()
        .scheduled_overrides_summary;
    assert!(
        summary.as_deref().is_some_and(|s| s.starts_with("min=2 ")),
        "the upcoming window is summarized: {summary:?}"
    );

    s.h.clock.advance(Duration::from_secs(3600 + 60));
    wait_reconciled(&s, "sched", 2).await;
    // After the window (and long after the scale-out), back to the spec's minReplicas.
    s.h.clock.advance(Duration::from_secs(3600));
    wait_reconciled(&s, "sched", 0).await;
    let status = s.hra("sched").await.status.unwrap();
    assert_eq!(
        status.scheduled_overrides_summary, None,
        "a one-off window is over"
    );
    assert!(status.last_successful_scale_out_time.is_some());
}

#[tokio::test]
async fn a_rerun_of_a_failed_job_is_not_stuck_by_its_old_completed_event() {
    let s = Stack::start("as-rerun", true).await;
    assert_eq!(s.subscribe(SECRET).await, 200);
    s.apply_deployment("rerun", "rerun", 0);
    let mut spec = webhook_spec(0, 3);
    spec["scaleDownDelaySecondsAfterScaleOut"] = json!(0);
    s.apply_hra("rerun", spec);
    wait_reconciled(&s, "rerun", 0).await;

    let failed = s.submit(1, "rerun", Duration::from_secs(1), "failure");
    eventually_of(&s, "the first attempt to fail", WAIT, || async {
        s.all_completed(&failed, "failure").then_some(())
    })
    .await;
    wait_empty(&s, "rerun").await;
    let (job_id, run_id) =
        s.h.sim
            .read(|w, _| (w.jobs[&failed[0]].id, w.jobs[&failed[0]].run_id));

    // The re-run queues a new job; GitHub also resends the old attempt's `completed` (ARC
    // #4315), which must not cancel the new job's reservation.
    // Long enough that its reservation is still there when the test looks.
    let rerun = s.submit(1, "rerun", Duration::from_secs(5), "success");
    eventually_of(&s, "the re-run's reservation", WAIT, || async {
        (s.reservations("rerun").await == 1).then_some(())
    })
    .await;
    let old_completed = json!({
        "action": "completed",
        "workflow_job": {
            "id": job_id, "run_id": run_id, "run_attempt": 1, "name": "job",
            "status": "completed", "conclusion": "failure",
            "labels": ["self-hosted", "rerun"], "runner_id": 1, "runner_name": "gone",
        },
        "repository": {
            "id": 1, "name": "app", "full_name": "octo/app", "private": true,
            "owner": {"login": "octo", "id": 1, "type": "Organization"}
        },
        "organization": {"login": "octo", "id": 1}
    });
    let (status, body) = post_delivery(
        &s.webhook_url,
        "workflow_job",
        "resent-after-rerun",
        SECRET,
        &old_completed,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("duplicate"), "{body}");
    eventually_of(&s, "the re-run to succeed", WAIT, || async {
        s.all_completed(&rerun, "success").then_some(())
    })
    .await;
    wait_empty(&s, "rerun").await;
    assert_eq!(s.h.interrupted(), 0);
    s.shutdown().await;
}

#[tokio::test]
async fn a_runner_set_target_gets_replicas_and_the_newest_reservation_as_effective_time() {
    let s = Stack::start("as-set", false).await;
    s.h.apply(
        &json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "RunnerSet",
            "metadata": {"name": "set"},
            "spec": {
                "repository": "octo/app",
                "labels": ["set"],
                "replicas": 0,
                "template": {"spec": {"containers": [{"name": "runner"}]}},
            },
        })
        .to_string(),
    );
    // Reservations as the webhook server writes them: one long expired, one current.
    let now = SystemTime::now();
    let effective = now - Duration::from_secs(5);
    s.h.apply(
        &json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "HorizontalRunnerAutoscaler",
            "metadata": {"name": "set"},
            "spec": {
                "scaleTargetRef": {"kind": "RunnerSet", "name": "set"},
                "minReplicas": 1,
                "maxReplicas": 3,
                "capacityReservations": [
                    {
                        "effectiveTime": rfc3339(now - Duration::from_secs(7200)),
                        "expirationTime": rfc3339(now - Duration::from_secs(3600)),
                        "replicas": 1,
                    },
                    {
                        "effectiveTime": rfc3339(effective),
                        "expirationTime": rfc3339(now + Duration::from_secs(3600)),
                        "replicas": 1,
                    },
                ],
            },
        })
        .to_string(),
    );
    let api = s.h.api::<hangar_api::RunnerSet>();
    let set = eventually_of(
        &s,
        "the RunnerSet scaled to 1 + 1 reserved",
        WAIT,
        || async {
            let set = api.get("set").await.ok()?;
            (set.spec.stateful_set.replicas == Some(2)).then_some(set)
        },
    )
    .await;
    let effective_time = set
        .spec
        .effective_time
        .map(|t| serde_json::to_value(t).unwrap());
    assert_eq!(
        effective_time,
        Some(json!(rfc3339(effective))),
        "ephemeral runners: effectiveTime is the newest reservation's"
    );
    // Status is written after the target and the pruning: wait for all three.
    eventually_of(&s, "the expired reservation pruned", WAIT, || async {
        let ok = s.reservations("set").await == 1 && s.desired("set").await == Some(2);
        ok.then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_autoscaler_that_cannot_work_says_why_in_a_warning_event() {
    let s = Stack::start("as-invalid", false).await;
    s.apply_hra("ghost", json!({"minReplicas": 0, "maxReplicas": 2}));
    s.apply_deployment("unbounded", "unbounded", 1);
    s.apply_hra("unbounded", json!({"minReplicas": 0}));
    let warnings = |name: &'static str| s.warnings(name, "InvalidSpec");
    let ghost = eventually_of(&s, "a warning about the missing target", WAIT, || async {
        let notes = warnings("ghost").await;
        (!notes.is_empty()).then_some(notes)
    })
    .await;
    assert!(ghost[0].contains("does not exist"), "{ghost:?}");
    let unbounded = eventually_of(&s, "a warning about maxReplicas", WAIT, || async {
        let notes = warnings("unbounded").await;
        (!notes.is_empty()).then_some(notes)
    })
    .await;
    assert!(unbounded[0].contains("maxReplicas"), "{unbounded:?}");
    // The target is left alone.
    assert_eq!(s.replicas("unbounded").await, Some(1));

    // The status says the same, and says it no longer once the spec is fixed.
    let scaling_active = |name: &'static str| {
        let api = s.h.api::<HorizontalRunnerAutoscaler>();
        async move {
            let hra = api.get(name).await.unwrap();
            hra.status
                .and_then(|st| st.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "ScalingActive")
        }
    };
    let condition = eventually_of(&s, "a False ScalingActive condition", WAIT, || async {
        scaling_active("unbounded")
            .await
            .filter(|c| c.status == "False")
    })
    .await;
    assert_eq!(condition.reason, "InvalidSpec");
    assert!(condition.message.contains("maxReplicas"), "{condition:?}");
    let ghost = scaling_active("ghost").await.expect("a condition on ghost");
    assert!(ghost.message.contains("does not exist"), "{ghost:?}");
    s.apply_hra("unbounded", json!({"minReplicas": 0, "maxReplicas": 3}));
    eventually_of(&s, "a True ScalingActive condition", WAIT, || async {
        scaling_active("unbounded")
            .await
            .filter(|c| c.status == "True")
    })
    .await;
}

/// Example `index` of `event` from `@octokit/webhooks-examples`: real payloads as GitHub sends
/// them.
fn octokit_example(event: &str, index: usize) -> Value {
    let file = ghsim::conformance::package_file(
        ghsim::conformance::WEBHOOK_EXAMPLES,
        "api.github.com/index.json",
    )
    .expect("@octokit/webhooks-examples installs");
    let all: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == event)
        .and_then(|e| e["examples"].get(index))
        .unwrap_or_else(|| panic!("no {event} example {index}"))
        .clone()
}

/// RunnerDeployment `name` of no replicas registering at `scope` (e.g. `{"organization": "x"}`).
fn apply_scoped_deployment(s: &Stack, name: &str, scope: Value) {
    let rd = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerDeployment",
        "metadata": {"name": name},
        "spec": {"replicas": 0, "template": {"spec": scope}},
    });
    s.h.apply(&rd.to_string());
}

/// Replicas the active reservations of autoscaler `name` hold.
async fn reserved(s: &Stack, name: &str) -> i32 {
    s.hra(name)
        .await
        .spec
        .capacity_reservations
        .unwrap_or_default()
        .iter()
        .map(|r| r.replicas.unwrap_or(0))
        .sum()
}

#[tokio::test]
async fn check_run_pull_request_and_push_events_reserve_their_triggers_amount() {
    let s = Stack::start("as-legacy", false).await;
    // The examples' repository, Codertocat/Hello-World, belongs to a user: only repository
    // runners can serve it.
    apply_scoped_deployment(&s, "hello", json!({"repository": "Codertocat/Hello-World"}));
    s.apply_hra(
        "hello",
        json!({
            "minReplicas": 0,
            "maxReplicas": 10,
            "scaleUpTriggers": [
                {"githubEvent": {"workflowJob": {}}},
                {"githubEvent": {"checkRun": {"types": ["created"], "status": "queued",
                                              "names": ["Octocoders-*"]}},
                 "amount": 2, "duration": "5m"},
                {"githubEvent": {"pullRequest": {"types": ["opened", "synchronize"],
                                                 "branches": ["master"]}}},
                {"githubEvent": {"push": {}}, "amount": 3},
            ],
        }),
    );
    wait_reconciled(&s, "hello", 0).await;
    let deliver = |event: &'static str, index: usize, guid: &'static str| {
        let url = s.webhook_url.clone();
        async move { post_delivery(&url, event, guid, SECRET, &octokit_example(event, index)).await }
    };

    // created + queued, named Octocoders-linter: 2 runners for 5 minutes.
    let (status, body) = deliver("check_run", 0, "cr-created").await;
    assert_eq!(status, 202, "{body}");
    assert!(body.contains("2 runner(s)"), "{body}");
    assert_eq!(reserved(&s, "hello").await, 2);
    // completed is not among the types.
    let (status, body) = deliver("check_run", 1, "cr-completed").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("ignored"), "{body}");
    // opened against master: the default amount, 1.
    assert_eq!(deliver("pull_request", 0, "pr-opened").await.0, 202);
    // closed is not among the types.
    assert_eq!(deliver("pull_request", 3, "pr-closed").await.0, 200);
    // any push: 3.
    assert_eq!(deliver("push", 0, "push").await.0, 202);
    // The same delivery again adds nothing.
    let (status, body) = deliver("push", 0, "push").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("duplicate"), "{body}");
    assert_eq!(reserved(&s, "hello").await, 6);
    wait_reconciled(&s, "hello", 6).await;
    let slack: Vec<_> = s
        .hra("hello")
        .await
        .spec
        .capacity_reservations
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.trigger, r.replicas, r.delivery_id))
        .collect();
    assert_eq!(
        slack,
        vec![
            (Some("checkRun".into()), Some(2), Some("cr-created".into())),
            (
                Some("pullRequest".into()),
                Some(1),
                Some("pr-opened".into())
            ),
            (Some("push".into()), Some(3), Some("push".into())),
        ]
    );

    // The check run's slack ends after its 5 minutes, the others' after the default 10.
    s.h.clock.advance(Duration::from_secs(6 * 60));
    assert_eq!(deliver("push", 1, "push-2").await.0, 202);
    assert_eq!(
        reserved(&s, "hello").await,
        7,
        "the expired entry is dropped on write"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn an_event_two_autoscalers_match_equally_scales_neither_and_says_so() {
    let s = Stack::start("as-ambiguous", false).await;
    // check_run example 7: `rerequested` on github/hello-world, an organization's repository.
    for name in ["org-a", "org-b"] {
        apply_scoped_deployment(&s, name, json!({"organization": "github"}));
        s.apply_hra(
            name,
            json!({
                "minReplicas": 0,
                "maxReplicas": 4,
                "scaleUpTriggers": [{"githubEvent": {"checkRun": {"types": ["rerequested"]}}}],
            }),
        );
    }
    wait_reconciled(&s, "org-a", 0).await;
    wait_reconciled(&s, "org-b", 0).await;
    let example = octokit_example("check_run", 7);
    let (status, body) =
        post_delivery(&s.webhook_url, "check_run", "amb-1", SECRET, &example).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("ambiguous") && body.contains("/org-a") && body.contains("/org-b"),
        "{body}"
    );
    for name in ["org-a", "org-b"] {
        eventually_of(
            &s,
            "a Warning event on each ambiguous autoscaler",
            WAIT,
            || async { (!s.warnings(name, "AmbiguousTrigger").await.is_empty()).then_some(()) },
        )
        .await;
        assert_eq!(reserved(&s, name).await, 0);
    }

    // Narrowing one trigger's repositories leaves a single match: it scales.
    s.apply_hra(
        "org-b",
        json!({
            "minReplicas": 0,
            "maxReplicas": 4,
            "scaleUpTriggers": [{"githubEvent": {"checkRun": {"types": ["rerequested"],
                                                              "repositories": ["other"]}}}],
        }),
    );
    eventually_of(
        &s,
        "the narrowed trigger seen by the webhook server",
        WAIT,
        || async {
            let (status, _) =
                post_delivery(&s.webhook_url, "check_run", "amb-2", SECRET, &example).await;
            (status == 202).then_some(())
        },
    )
    .await;
    assert_eq!(reserved(&s, "org-a").await, 1);
    assert_eq!(reserved(&s, "org-b").await, 0);
    wait_reconciled(&s, "org-a", 1).await;
    s.shutdown().await;
}

#[tokio::test]
async fn a_trigger_that_can_never_match_is_a_false_condition_and_a_warning() {
    let s = Stack::start("as-trigger", false).await;
    s.apply_deployment("never", "never", 0);
    s.apply_hra(
        "never",
        json!({
            "minReplicas": 0,
            "maxReplicas": 2,
            "scaleUpTriggers": [
                {"githubEvent": {}},
                {"githubEvent": {"checkRun": {"types": ["queued"]}}},
            ],
        }),
    );
    let triggers_valid = || async {
        s.hra("never")
            .await
            .status
            .and_then(|st| st.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "TriggersValid")
    };
    let condition = eventually_of(&s, "a False TriggersValid condition", WAIT, || async {
        triggers_valid().await.filter(|c| c.status == "False")
    })
    .await;
    assert_eq!(condition.reason, "TriggerNeverMatches");
    assert!(
        condition
            .message
            .contains("scaleUpTriggers[0] names no githubEvent")
            && condition
                .message
                .contains("scaleUpTriggers[1].githubEvent.checkRun.types"),
        "{condition:?}"
    );
    eventually_of(&s, "a TriggerNeverMatches Warning event", WAIT, || async {
        (!s.warnings("never", "TriggerNeverMatches").await.is_empty()).then_some(())
    })
    .await;
    // The autoscaler still works on everything else.
    wait_reconciled(&s, "never", 0).await;

    s.apply_hra(
        "never",
        json!({
            "minReplicas": 0,
            "maxReplicas": 2,
            "scaleUpTriggers": [{"githubEvent": {"checkRun": {"types": ["created"]}}}],
        }),
    );
    eventually_of(&s, "a True TriggersValid condition", WAIT, || async {
        triggers_valid().await.filter(|c| c.status == "True")
    })
    .await;
}

#[tokio::test]
async fn reservations_that_change_no_count_cost_the_autoscaler_one_status_write_a_second() {
    let mut s = Stack::start("as-pace", false).await;
    s.apply_deployment("pace", "pace", 0);
    s.apply_hra("pace", webhook_spec(1, 1));
    wait_reconciled(&s, "pace", 1).await;

    // Every observedGeneration the autoscaler's status ever shows: one per status write that
    // reported a new spec.
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let record = seen.clone();
    s.watch_named("pace", move |hra: HorizontalRunnerAutoscaler| {
        if let Some(g) = hra.status.and_then(|s| s.observed_generation) {
            record.lock().unwrap().insert(g);
        }
    });
    let before = s.hra("pace").await.metadata.generation.unwrap();

    // Ten reservations recorded one after the other within a second, as the webhook server
    // records a burst of queued jobs: each a new generation, none changing the count (capped
    // at maxReplicas 1) or anything else the status reports.
    let now = SystemTime::now();
    let reservation = json!({
        "effectiveTime": rfc3339(now - Duration::from_secs(5)),
        "expirationTime": rfc3339(now + Duration::from_secs(3600)),
        "replicas": 1,
    });
    let hras = s.h.api::<HorizontalRunnerAutoscaler>();
    for n in 1..=10 {
        let patch = json!({"spec": {"capacityReservations": vec![reservation.clone(); n]}});
        hras.patch(
            "pace",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(80)).await;
    }
    let generation = s.hra("pace").await.metadata.generation.unwrap();
    assert_eq!(
        generation,
        before + 10,
        "each reservation was a new generation"
    );

    // The status catches up with the last one within the pace, in few writes.
    eventually_of(
        &s,
        "the status reports the newest generation",
        WAIT,
        || async {
            let hra = s.hra("pace").await;
            (hra.status?.observed_generation == Some(generation)).then_some(())
        },
    )
    .await;
    let writes: Vec<i64> = seen
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|g| *g > before)
        .collect();
    assert!(
        writes.len() <= 3,
        "status writes for 10 new generations in under a second: {writes:?}"
    );
    assert_eq!(s.desired("pace").await, Some(1));
    s.shutdown().await;
}

#[tokio::test]
async fn a_webhook_driven_deployment_gets_effective_time_only_with_a_change_of_replicas() {
    let s = Stack::start("as-demand", false).await;
    s.apply_deployment("demand", "demand", 0);
    let now = SystemTime::now();
    let reservation = |ago: u64| {
        json!({
            "effectiveTime": rfc3339(now - Duration::from_secs(ago)),
            "expirationTime": rfc3339(now + Duration::from_secs(3600)),
            "replicas": 1,
        })
    };
    let mut spec = webhook_spec(0, 1);
    spec["capacityReservations"] = json!([reservation(10)]);
    s.apply_hra("demand", spec);
    wait_reconciled(&s, "demand", 1).await;
    let effective_time = |rd: RunnerDeployment| rd.spec.effective_time.map(|t| json!(t));
    assert_eq!(
        effective_time(s.deployment("demand").await),
        Some(json!(rfc3339(now - Duration::from_secs(10)))),
        "the scale-up carries the newest reservation's time"
    );

    // A newer job's reservation at maxReplicas: a new generation, the same count. The set reads
    // the newest demand from the autoscaler's reservations itself; the deployment is not
    // rewritten for the time alone.
    let hras = s.h.api::<HorizontalRunnerAutoscaler>();
    let patch = json!({"spec": {"capacityReservations": [reservation(10), reservation(5)]}});
    let patched = hras
        .patch(
            "demand",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let generation = patched.metadata.generation;
    // The status is written after the target: once it reports the new generation, the
    // autoscaler has decided on it.
    eventually_of(
        &s,
        "the status reports the newest generation",
        WAIT,
        || async {
            (s.hra("demand").await.status?.observed_generation == generation).then_some(())
        },
    )
    .await;
    let rd = s.deployment("demand").await;
    assert_eq!(rd.spec.replicas, Some(1));
    assert_eq!(
        effective_time(rd),
        Some(json!(rfc3339(now - Duration::from_secs(10)))),
        "no patch of the deployment for a newer reservation that changes no count"
    );
    s.shutdown().await;
}
