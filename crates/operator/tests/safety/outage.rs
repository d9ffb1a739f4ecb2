//! The apiserver failing: Hangar's Kubernetes client hands a 429, 503 or 504 to its caller at
//! once, so the caller's own back-off (a reconciler's, the webhook batcher's) retries from
//! freshly observed state, instead of one call retrying stale content for minutes while its
//! reconcile holds the object. And a watch lagging behind the writes it should show: a set
//! counts what it created as created until its watch shows it, however late, and a Runner
//! does not write again the status its lagging watch does not show yet.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hangar_api::Runner;
use hangar_testkit::fault_proxy::FaultProxy;
use hangar_testkit::{TestCluster, TestNamespace};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt as _;
use kube::api::{ObjectMeta, PostParams};

use crate::support::{Harness, eventually, runner_set_manifest, uncached};

#[tokio::test]
async fn a_write_the_apiserver_times_out_fails_at_once_and_is_sent_once() {
    let cluster = TestCluster::get();
    let ns = TestNamespace::create(cluster, "outage").await;
    let (proxy, config) = FaultProxy::in_front_of(cluster, 5)
        .await
        .expect("proxy starts");
    let metrics = Arc::new(hangar::metrics::Metrics::default());
    let client = hangar::kube_client::counted(config, metrics).expect("client");
    let config_maps = ns.api::<ConfigMap>(client);
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some("outage".to_owned()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };

    proxy.faults().set_writes_timing_out(true);
    let started = Instant::now();
    let created = config_maps
        .create(&PostParams::default(), &config_map)
        .await;
    let took = started.elapsed();
    match created {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 504, "{status:?}"),
        other => panic!("expected the apiserver's 504, got {other:?}"),
    }
    assert_eq!(
        proxy.faults().counts().timed_out,
        1,
        "the client sent the write more than once"
    );
    assert!(took < Duration::from_secs(5), "the write took {took:?}");

    // Once writes work again, the caller's own retry succeeds.
    proxy.faults().clear();
    config_maps
        .create(&PostParams::default(), &config_map)
        .await
        .expect("created once the apiserver writes again");
}

/// How long the lagging-watch tests hold a watch back: longer than a reconcile waits for its
/// own writes to reach its store.
const LAG: Duration = Duration::from_secs(8);

/// What a lagging-watch test saw: the names of every object that existed, of those left (not
/// deleting), and the controllers' requests by verb and resource (the proxy's count).
struct Seen {
    ever: BTreeSet<String>,
    left: BTreeSet<String>,
    requests: BTreeMap<String, u64>,
}

/// Applies `manifest` with the controllers' watch of `lagging` (a resource's plural) held back
/// by [`LAG`], and returns what existed in the next 25 s (seen by the test's own client, which
/// does not lag) and what was left then.
async fn created_while_a_watch_lags<K>(
    prefix: &str,
    lagging: &str,
    manifest: impl FnOnce() -> String,
) -> Seen
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let (h, proxy) = Harness::start_behind_proxy(prefix, uncached()).await;
    proxy.faults().set_watch_delay(lagging, LAG);
    h.apply(&manifest());
    let mut ever = BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(25);
    while Instant::now() < until {
        ever.extend(h.list::<K>().await.iter().map(|o| o.name_any()));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let left = h
        .list::<K>()
        .await
        .iter()
        .filter(|o| o.meta().deletion_timestamp.is_none())
        .map(|o| o.name_any())
        .collect();
    Seen {
        ever,
        left,
        requests: proxy.faults().requests(),
    }
}

/// Asserts that exactly `wanted` objects ever existed and are left.
fn created_once(what: &str, seen: &Seen, wanted: usize) {
    let Seen { ever, left, .. } = seen;
    assert_eq!(
        (ever.len(), left.len()),
        (wanted, wanted),
        "{what} created {ever:?}, left {left:?}"
    );
}

fn lagging_replica_set() -> String {
    replica_set("lagging", 4, None)
}

/// A RunnerReplicaSet of `replicas` runners of the `octo/app` repository, labelled `name`, on
/// `placement`'s nodes if given.
fn replica_set(name: &str, replicas: u32, placement: Option<&nodesim::Placement>) -> String {
    let mut spec = serde_json::json!({"repository": "octo/app", "labels": [name]});
    if let Some(p) = placement {
        spec["nodeSelector"] = serde_json::json!(p.node_selector);
        spec["tolerations"] = serde_json::json!(p.tolerations);
    }
    serde_json::json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerReplicaSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "template": {"spec": spec}},
    })
    .to_string()
}

/// An apiserver whose watch lags behind its writes (its watch cache under load): the Runners a
/// RunnerReplicaSet creates are acknowledged seconds before its watch shows them. The set must
/// count them as created until it does, not take them for missing and create more (each extra
/// Runner is a pod, a registration, and a retirement with its GitHub DELETE).
#[tokio::test]
async fn a_replica_set_whose_runner_watch_lags_creates_each_runner_once() {
    let seen = created_while_a_watch_lags::<Runner>("lag", "runners", lagging_replica_set).await;
    created_once("runners", &seen, 4);
}

/// The pod watch lagging behind the Runner watch: a Runner's status says its pod was created
/// before the set's pod store shows the pod. Such a Runner is on its way, not without a pod:
/// the set does not replace it, and the Runner controller, which created the pod, does not
/// ask the API whether it vanished.
#[tokio::test]
async fn a_replica_set_whose_pod_watch_lags_creates_each_runner_once() {
    let seen = created_while_a_watch_lags::<Runner>("lagpods", "pods", lagging_replica_set).await;
    created_once("runners", &seen, 4);
    assert_eq!(
        seen.requests.get("GET pods"),
        None,
        "pods read one by one: {:?}",
        seen.requests
    );
}

/// [`a_replica_set_whose_runner_watch_lags_creates_each_runner_once`] for a RunnerSet, whose
/// runners are StatefulSets.
#[tokio::test]
async fn a_runner_set_whose_stateful_set_watch_lags_creates_each_runner_once() {
    let seen = created_while_a_watch_lags::<StatefulSet>("lagset", "statefulsets", || {
        runner_set_manifest(None, "lagging", 3, "lagging", &[])
    })
    .await;
    created_once("stateful sets", &seen, 3);
}

/// A status with its condition timestamps left out: what a status write can change that a
/// reader cares about. A write that changes only a timestamp says nothing new.
fn status_content(runner: &Runner) -> serde_json::Value {
    let mut status = serde_json::to_value(&runner.status).expect("status serializes");
    if let Some(conditions) = status.get_mut("conditions").and_then(|c| c.as_array_mut()) {
        for condition in conditions {
            if let Some(c) = condition.as_object_mut() {
                c.remove("lastTransitionTime");
                c.remove("lastUpdateTime");
            }
        }
    }
    status
}

/// The Runner watch lagging behind the Runner controller's own status writes, while its pod's
/// changes arrive at once: each pod change triggers a reconcile that reads the Runner from its
/// store, which does not show the status the last reconcile wrote. The controller must not
/// write that status again (each such write is apiserver and etcd work, and under load the
/// watch lags most, so they multiply). Every status write of a set's Runner must change what
/// the status says.
///
/// (A standalone Runner costs one such write at its start: its first reconcile adds the
/// finalizer that a set's Runners are created with, and the status write that follows counts
/// from the version before it.)
#[tokio::test]
async fn a_runner_whose_watch_lags_writes_each_status_change_once() {
    use futures::StreamExt as _;
    use kube::runtime::watcher;

    let (h, proxy) = Harness::start_behind_proxy("lagstatus", uncached()).await;
    let nodes = h.start_nodes("lagstatus", "lagstatus").await;
    let placement = nodes.placement();
    // What each Runner's status says at each change, as the apiserver stores it (the test's
    // own watch does not go through the proxy and does not lag).
    type Changes = BTreeMap<String, Vec<serde_json::Value>>;
    let changes = Arc::new(std::sync::Mutex::new(Changes::new()));
    let recorder = {
        let changes = changes.clone();
        let runners = h.api::<Runner>();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(runners, watcher::Config::default()));
            while let Some(Ok(event)) = events.next().await {
                if let watcher::Event::Apply(runner) | watcher::Event::InitApply(runner) = event {
                    let content = status_content(&runner);
                    let mut changes = changes.lock().expect("changes");
                    let of_runner = changes.entry(runner.name_any()).or_default();
                    if runner.status.is_some() && of_runner.last() != Some(&content) {
                        of_runner.push(content);
                    }
                }
            }
        })
    };
    proxy.faults().set_watch_delay("runners", LAG);
    h.apply(&replica_set("lagging", 1, Some(&placement)));
    let until = Instant::now() + Duration::from_secs(60);
    let ready = || {
        changes
            .lock()
            .expect("changes")
            .values()
            .any(|c| c.last().is_some_and(|s| s["ready"] == true))
    };
    while !ready() {
        assert!(Instant::now() < until, "the runner did not become ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Long enough for the lagging watch to show the last write and the reconciles it triggers
    // to find nothing to write.
    tokio::time::sleep(LAG + Duration::from_secs(3)).await;
    recorder.abort();
    let writes = proxy.faults().forwarded("PATCH runners/status");
    let changes = changes.lock().expect("changes").clone();
    assert_eq!(changes.len(), 1, "one Runner: {changes:#?}");
    let changed = changes.values().map(Vec::len).sum::<usize>() as u64;
    assert_eq!(
        writes, changed,
        "status writes against changes of what the status says: {changes:#?}"
    );
    // A healthy start says two things: on its way (the pod starting, then the runner
    // registering), then running. Never unhealthy on the way.
    let said: Vec<_> = changes
        .values()
        .flatten()
        .map(|status| {
            let healthy = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Healthy")
                .map(|c| format!("Healthy={} {}", c["status"], c["reason"]));
            (status["phase"].clone(), status["reason"].clone(), healthy)
        })
        .collect();
    let starting = Some(r#"Healthy="True" "Starting""#.to_owned());
    let healthy = Some(r#"Healthy="True" "Healthy""#.to_owned());
    assert_eq!(
        said,
        [
            ("Pending".into(), "RegistrationPending".into(), starting),
            ("Running".into(), serde_json::Value::Null, healthy),
        ],
        "{changes:#?}"
    );
    nodes.shutdown().await.expect("nodes stop");
}

/// A set deletes a finished runner's pod and Runner in the background, its pass not waiting
/// for them, and counts the Runner as deleting from then on. When the apiserver times those
/// deletions out, that count must be taken back: once deletions work again the set deletes
/// the Runner on its next try, well before its memory of the deletion would have expired
/// (60 s). Meanwhile the finished runner's place goes to a new runner.
#[tokio::test]
async fn a_finished_runner_whose_deletion_timed_out_is_deleted_once_deletions_work_again() {
    let (h, proxy) = Harness::start_behind_proxy("deltimeout", uncached()).await;
    let nodes = h.start_nodes("deltimeout", "deltimeout").await;
    proxy.faults().set_deletes_timing_out(true);
    h.apply(&replica_set("finishing", 1, Some(&nodes.placement())));
    let first = eventually("a runner registered", Duration::from_secs(60), || async {
        h.registered().into_iter().next()
    })
    .await;
    let jobs = h.submit_jobs(
        1,
        vec!["finishing".into()],
        Duration::from_secs(1),
        "success",
    );
    eventually("the job done", Duration::from_secs(60), || async {
        h.all_completed(&jobs, "success").then_some(())
    })
    .await;
    eventually(
        "a new runner registered, the finished Runner's deletion refused",
        Duration::from_secs(60),
        || async {
            let refused = proxy.faults().counts().timed_out > 0;
            let replaced = h.registered().iter().any(|name| name != &first);
            (refused && replaced).then_some(())
        },
    )
    .await;
    // Long enough for the set to try again, and be refused again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let runners = h.list::<Runner>().await;
    assert!(
        runners
            .iter()
            .any(|r| r.name_any() == first && r.metadata.deletion_timestamp.is_none()),
        "a deletion got through: {:?}",
        runners.iter().map(|r| r.name_any()).collect::<Vec<_>>()
    );
    proxy.faults().clear();
    let resumed = Instant::now();
    eventually(
        "the finished Runner gone",
        Duration::from_secs(60),
        || async {
            let runners = h.list::<Runner>().await;
            runners.iter().all(|r| r.name_any() != first).then_some(())
        },
    )
    .await;
    assert!(
        resumed.elapsed() < Duration::from_secs(30),
        "the Runner was deleted {:?} after deletions worked again",
        resumed.elapsed()
    );
    assert_eq!(h.interrupted(), 0);
    nodes.shutdown().await.expect("nodes stop");
}
