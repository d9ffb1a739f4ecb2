//! The apiserver failing: Hangar's Kubernetes client hands a 429, 503 or 504 to its caller at
//! once, so the caller's own back-off (a reconciler's, the webhook batcher's) retries from
//! freshly observed state, instead of one call retrying stale content for minutes while its
//! reconcile holds the object.

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
