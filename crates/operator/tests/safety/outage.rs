//! The apiserver failing: Hangar's Kubernetes client hands a 429, 503 or 504 to its caller at
//! once, so the caller's own back-off (a reconciler's, the webhook batcher's) retries from
//! freshly observed state, instead of one call retrying stale content for minutes while its
//! reconcile holds the object. And a watch lagging behind the writes it should show: a set
//! counts what it created as created until its watch shows it, however late.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hangar_testkit::fault_proxy::FaultProxy;
use hangar_testkit::{TestCluster, TestNamespace};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};

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

/// An apiserver whose watch lags behind its writes (its watch cache under load): the Runners a
/// RunnerReplicaSet creates are acknowledged seconds before its watch shows them. The set must
/// count them as created until it does, not take them for missing and create more (each extra
/// Runner is a pod, a registration, and a retirement with its GitHub DELETE).
#[tokio::test]
async fn a_replica_set_whose_runner_watch_lags_creates_each_runner_once() {
    use crate::support::{Harness, uncached};
    use hangar_api::Runner;
    use kube::ResourceExt as _;
    use std::collections::BTreeSet;

    let (h, proxy) = Harness::start_behind_proxy("lag", uncached()).await;
    // Longer than a reconcile waits for its own writes to reach its store.
    proxy
        .faults()
        .set_watch_delay("runners", Duration::from_secs(8));
    h.apply(
        &serde_json::json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "RunnerReplicaSet",
            "metadata": {"name": "lagging"},
            "spec": {"replicas": 4, "template": {"spec": {
                "repository": "octo/app",
                "labels": ["lagging"],
            }}},
        })
        .to_string(),
    );
    // Every Runner that ever existed while the watch lagged, seen by the test's own client.
    let mut ever = BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(25);
    while Instant::now() < until {
        for runner in h.list::<Runner>().await {
            ever.insert(runner.name_any());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let now: BTreeSet<String> = h
        .list::<Runner>()
        .await
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .map(|r| r.name_any())
        .collect();
    assert_eq!(
        (ever.len(), now.len()),
        (4, 4),
        "runners created {ever:?}, left {now:?}"
    );
}

/// [`a_replica_set_whose_runner_watch_lags_creates_each_runner_once`] for a RunnerSet, whose
/// runners are StatefulSets.
#[tokio::test]
async fn a_runner_set_whose_stateful_set_watch_lags_creates_each_runner_once() {
    use crate::support::{Harness, runner_set_manifest, uncached};
    use k8s_openapi::api::apps::v1::StatefulSet;
    use kube::ResourceExt as _;
    use std::collections::BTreeSet;

    let (h, proxy) = Harness::start_behind_proxy("lagset", uncached()).await;
    proxy
        .faults()
        .set_watch_delay("statefulsets", Duration::from_secs(8));
    h.apply(&runner_set_manifest(None, "lagging", 3, "lagging", &[]));
    let mut ever = BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(25);
    while Instant::now() < until {
        for set in h.list::<StatefulSet>().await {
            ever.insert(set.name_any());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let now: BTreeSet<String> = h
        .list::<StatefulSet>()
        .await
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .map(|s| s.name_any())
        .collect();
    assert_eq!(
        (ever.len(), now.len()),
        (3, 3),
        "stateful sets created {ever:?}, left {now:?}"
    );
}
