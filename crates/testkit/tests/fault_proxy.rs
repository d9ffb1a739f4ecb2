//! The fault proxy against a real apiserver (the shared test control plane), and restarting a
//! private control plane's apiserver.

use std::path::PathBuf;
use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use hangar_testkit::control_plane::{ControlPlane, Signal, StartOptions, admin_client};
use hangar_testkit::fault_proxy::FaultProxy;
use hangar_testkit::{TestCluster, TestNamespace};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};

/// A proxy in front of the shared cluster and a client that talks through it (by a rewritten
/// copy of the cluster's kubeconfig).
async fn through_proxy(tag: &str) -> (FaultProxy, Client, PathBuf) {
    let cluster = TestCluster::get();
    let pki = cluster
        .kubeconfig()
        .parent()
        .expect("kubeconfig directory")
        .join("pki");
    let proxy = FaultProxy::start(cluster.kubeconfig(), &pki, 7)
        .await
        .expect("proxy starts");
    let rewritten = std::env::temp_dir().join(format!(
        "hangar-fault-proxy-{tag}-{}.kubeconfig",
        std::process::id()
    ));
    proxy
        .rewrite_kubeconfig(cluster.kubeconfig(), &rewritten)
        .expect("kubeconfig rewritten");
    let client = admin_client(&rewritten).await.expect("client via proxy");
    (proxy, client, rewritten)
}

/// A watch's next event, within 20 s.
async fn next_event(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin),
) -> Option<WatchEvent<ConfigMap>> {
    tokio::time::timeout(Duration::from_secs(20), stream.try_next())
        .await
        .expect("an event within 20 s")
        .unwrap()
}

/// Whether `event` is the creation of the ConfigMap `name`.
fn added(event: &Option<WatchEvent<ConfigMap>>, name: &str) -> bool {
    matches!(event, Some(WatchEvent::Added(cm)) if cm.metadata.name.as_deref() == Some(name))
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_client_through_the_proxy_lists_and_gets_normally() {
    let cluster = TestCluster::get();
    let ns = TestNamespace::create(cluster, "proxy-plain").await;
    let (proxy, client, rewritten) = through_proxy("plain").await;

    // The rewritten kubeconfig differs from the original only in `server:`.
    let original = std::fs::read_to_string(cluster.kubeconfig()).unwrap();
    let copy = std::fs::read_to_string(&rewritten).unwrap();
    assert!(copy.contains(proxy.url()), "{copy}");
    let original: serde_yaml::Value = serde_yaml::from_str(&original).unwrap();
    let mut copy: serde_yaml::Value = serde_yaml::from_str(&copy).unwrap();
    copy["clusters"][0]["cluster"]["server"] = original["clusters"][0]["cluster"]["server"].clone();
    assert_eq!(copy, original);

    let direct: Api<ConfigMap> = ns.api(cluster.client().await);
    direct
        .create(&PostParams::default(), &config_map("one"))
        .await
        .unwrap();
    let via: Api<ConfigMap> = ns.api(client);
    let got = via.get("one").await.unwrap();
    assert_eq!(got.data.unwrap()["k"], "v");
    let names: Vec<String> = via
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(names.contains(&"one".to_owned()), "{names:?}");
    // Missing objects keep the apiserver's 404.
    match via.get("missing").await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404, "{s:?}"),
        other => panic!("expected 404, got {other:?}"),
    }
    assert!(proxy.faults().counts().forwarded >= 3);
    // Each request is counted by verb and resource.
    assert_eq!(
        proxy.faults().requests(),
        [
            ("GET configmaps".to_owned(), 2),
            ("LIST configmaps".to_owned(), 1)
        ]
        .into()
    );
    via.create(&PostParams::default(), &config_map("two"))
        .await
        .unwrap();
    via.patch(
        "two",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"data": {"k": "w"}})),
    )
    .await
    .unwrap();
    assert_eq!(proxy.faults().forwarded("POST configmaps"), 1);
    assert_eq!(proxy.faults().forwarded("PATCH configmaps"), 1);
    let _ = std::fs::remove_file(rewritten);
}

#[tokio::test]
async fn with_conflicts_at_rate_one_an_update_gets_409_with_the_apiservers_status() {
    let cluster = TestCluster::get();
    let ns = TestNamespace::create(cluster, "proxy-conflict").await;
    let (proxy, client, rewritten) = through_proxy("conflict").await;
    let via: Api<ConfigMap> = ns.api(client);
    via.create(&PostParams::default(), &config_map("cm"))
        .await
        .unwrap();
    proxy.faults().set_write_conflicts(1.0);

    let mut current = via.get("cm").await.unwrap();
    current.data = Some([("k".to_owned(), "w".to_owned())].into());
    match via.replace("cm", &PostParams::default(), &current).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 409, "{s:?}");
            assert_eq!(s.reason, "Conflict", "{s:?}");
            assert_eq!(
                s.message,
                "Operation cannot be fulfilled on configmaps \"cm\": the object has been \
                 modified; please apply your changes to the latest version and try again"
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // The write never reached the apiserver.
    assert_eq!(via.get("cm").await.unwrap().data.unwrap()["k"], "v");
    // Writes without a resourceVersion and server-side apply do not conflict on a real
    // apiserver, so not here either.
    let merge = serde_json::json!({"data": {"m": "1"}});
    via.patch("cm", &PatchParams::default(), &Patch::Merge(&merge))
        .await
        .unwrap();
    let apply = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}});
    via.patch("cm", &PatchParams::apply("test"), &Patch::Apply(&apply))
        .await
        .unwrap();
    assert_eq!(proxy.faults().counts().conflicted, 1);

    proxy.faults().set_write_conflicts(0.0);
    let mut current = via.get("cm").await.unwrap();
    current.data = Some([("k".to_owned(), "w".to_owned())].into());
    via.replace("cm", &PostParams::default(), &current)
        .await
        .unwrap();
    let _ = std::fs::remove_file(rewritten);
}

#[tokio::test]
async fn while_writes_time_out_reads_work_and_every_write_gets_504_without_landing() {
    let cluster = TestCluster::get();
    let ns = TestNamespace::create(cluster, "proxy-timeout").await;
    // A client that makes each request once: kube's default retries a 504 for minutes.
    let (proxy, mut config) = FaultProxy::in_front_of(cluster, 7).await.unwrap();
    config.default_retry = false;
    let via: Api<ConfigMap> = ns.api(Client::try_from(config).unwrap());
    via.create(&PostParams::default(), &config_map("cm"))
        .await
        .unwrap();
    proxy.faults().set_writes_timing_out(true);

    let timed_out = |result: kube::Result<_>, what: &str| match result {
        Err(kube::Error::Api(s)) => {
            assert_eq!(
                (s.code, s.reason.as_str()),
                (504, "Timeout"),
                "{what}: {s:?}"
            );
        }
        other => panic!("{what}: expected a timeout, got {other:?}"),
    };
    let merge = serde_json::json!({"data": {"k": "w"}});
    timed_out(
        via.patch("cm", &PatchParams::default(), &Patch::Merge(&merge))
            .await
            .map(drop),
        "merge patch",
    );
    timed_out(
        via.create(&PostParams::default(), &config_map("other"))
            .await
            .map(drop),
        "create",
    );
    timed_out(
        via.delete("cm", &Default::default()).await.map(drop),
        "delete",
    );
    // Reads are served, and none of the writes landed.
    assert_eq!(via.get("cm").await.unwrap().data.unwrap()["k"], "v");
    assert!(via.get_opt("other").await.unwrap().is_none());
    assert_eq!(proxy.faults().counts().timed_out, 3);

    proxy.faults().clear();
    via.patch("cm", &PatchParams::default(), &Patch::Merge(&merge))
        .await
        .unwrap();
    assert_eq!(via.get("cm").await.unwrap().data.unwrap()["k"], "w");
}

#[tokio::test]
async fn while_deletes_time_out_other_writes_land_and_deletes_get_504() {
    let cluster = TestCluster::get();
    let ns = TestNamespace::create(cluster, "proxy-deletes").await;
    let (proxy, mut config) = FaultProxy::in_front_of(cluster, 8).await.unwrap();
    config.default_retry = false;
    let via: Api<ConfigMap> = ns.api(Client::try_from(config).unwrap());
    proxy.faults().set_deletes_timing_out(true);
    via.create(&PostParams::default(), &config_map("cm"))
        .await
        .unwrap();
    let merge = serde_json::json!({"data": {"k": "w"}});
    via.patch("cm", &PatchParams::default(), &Patch::Merge(&merge))
        .await
        .unwrap();
    match via.delete("cm", &Default::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (504, "Timeout")),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(via.get("cm").await.unwrap().data.unwrap()["k"], "w");
    assert_eq!(proxy.faults().counts().timed_out, 1);

    proxy.faults().clear();
    via.delete("cm", &Default::default()).await.unwrap();
    assert!(via.get_opt("cm").await.unwrap().is_none());
}

#[tokio::test]
async fn a_watch_through_the_proxy_streams_and_ends_on_disconnect_watches() {
    let cluster = TestCluster::get();
    let ns = TestNamespace::create(cluster, "proxy-watch").await;
    let (proxy, client, rewritten) = through_proxy("watch").await;
    let via: Api<ConfigMap> = ns.api(client);
    let rv = list_version(&via).await;
    let stream = via
        .watch(&WatchParams::default().timeout(120), &rv)
        .await
        .unwrap();
    let mut stream = stream.boxed();
    let direct: Api<ConfigMap> = ns.api(cluster.client().await);
    direct
        .create(&PostParams::default(), &config_map("seen"))
        .await
        .unwrap();
    // Events arrive while the watch is open: the proxy streams.
    let event = next_event(&mut stream).await;
    assert!(added(&event, "seen"), "{event:?}");
    assert_eq!(proxy.faults().counts().watches_open, 1);

    proxy.faults().disconnect_watches();
    let end = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the watch ends within 10 s of the disconnect");
    assert!(end.is_none(), "{end:?}");
    let counts = proxy.faults().counts();
    assert_eq!((counts.watches_open, counts.watches_cut), (0, 1));
    let _ = std::fs::remove_file(rewritten);
}

#[tokio::test]
async fn a_delayed_watch_shows_each_event_that_long_after_the_write_was_answered() {
    let cluster = TestCluster::get();
    let ns = TestNamespace::create(cluster, "proxy-lag").await;
    let (proxy, client, rewritten) = through_proxy("lag").await;
    let via: Api<ConfigMap> = ns.api(client);
    let rv = list_version(&via).await;
    let delay = Duration::from_secs(2);
    proxy.faults().set_watch_delay("configmaps", delay);
    let mut stream = via
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .unwrap()
        .boxed();

    // Two writes through the proxy: each is answered at once, each shows on the watch the
    // delay after it was answered, not the delays added up.
    let started = std::time::Instant::now();
    via.create(&PostParams::default(), &config_map("first"))
        .await
        .unwrap();
    via.create(&PostParams::default(), &config_map("second"))
        .await
        .unwrap();
    let answered = started.elapsed();
    assert!(
        answered < Duration::from_secs(1),
        "writes took {answered:?}"
    );
    let mut seen = Vec::new();
    while seen.len() < 2 {
        if let Some(WatchEvent::Added(cm)) = next_event(&mut stream).await {
            seen.push((cm.metadata.name.unwrap_or_default(), started.elapsed()));
        }
    }
    assert_eq!(
        seen.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["first", "second"]
    );
    for (name, at) in &seen {
        assert!(
            *at >= delay && *at < delay + Duration::from_secs(2),
            "{name} seen after {at:?}, with a watch delay of {delay:?}"
        );
    }

    // Switched off, the delay no longer holds new events back.
    proxy.faults().set_watch_delay("configmaps", Duration::ZERO);
    let started = std::time::Instant::now();
    via.create(&PostParams::default(), &config_map("third"))
        .await
        .unwrap();
    let event = next_event(&mut stream).await;
    assert!(added(&event, "third"), "{event:?}");
    assert!(started.elapsed() < delay, "{:?}", started.elapsed());
    let _ = std::fs::remove_file(rewritten);
}

#[tokio::test]
async fn a_watch_with_a_resource_version_gets_410_expired_in_the_gone_window() {
    let cluster = TestCluster::get();
    let ns = TestNamespace::create(cluster, "proxy-gone").await;
    let (proxy, client, rewritten) = through_proxy("gone").await;
    let via: Api<ConfigMap> = ns.api(client);
    let rv = list_version(&via).await;
    proxy.faults().set_watch_gone(true);
    let mut stream = via
        .watch(&WatchParams::default().timeout(30), &rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await {
        Ok(Some(WatchEvent::Error(s))) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"), "{s:?}");
            assert!(s.message.starts_with("too old resource version"), "{s:?}");
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(stream.next().await.is_none());
    assert_eq!(proxy.faults().counts().gone, 1);
    // Lists still work in the window; once it closes, watches from that version work again.
    via.list(&ListParams::default()).await.unwrap();
    proxy.faults().set_watch_gone(false);
    let mut stream = via
        .watch(&WatchParams::default().timeout(30), &rv)
        .await
        .unwrap()
        .boxed();
    let direct: Api<ConfigMap> = ns.api(cluster.client().await);
    direct
        .create(&PostParams::default(), &config_map("after"))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(20), stream.try_next())
        .await
        .expect("an event within 20 s")
        .unwrap();
    assert!(matches!(event, Some(WatchEvent::Added(_))), "{event:?}");
    let _ = std::fs::remove_file(rewritten);
}

async fn works(client: &Client) -> bool {
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .list(&ListParams::default().limit(1))
        .await
        .is_ok()
}

#[tokio::test]
async fn the_apiserver_restarts_on_the_same_port_with_the_same_data() {
    let dir = std::env::temp_dir().join(format!("hangar-restart-test-{}", std::process::id()));
    let mut options = StartOptions::new(&dir, hangar_testkit::Binaries::configured());
    options.controllers = None;
    options.scheduler = false;
    options.tie_to_pid = Some(std::process::id());
    let plane = ControlPlane::start(options).await.expect("control plane");
    let client = admin_client(plane.kubeconfig()).await.unwrap();
    let api = Api::<ConfigMap>::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &config_map("kept"))
        .await
        .unwrap();

    for signal in [Signal::Kill, Signal::Term] {
        let stopper = dir.clone();
        tokio::task::spawn_blocking(move || ControlPlane::stop_apiserver(&stopper, signal))
            .await
            .unwrap()
            .unwrap();
        assert!(
            !works(&client).await,
            "the apiserver still answers after {signal:?}"
        );
        ControlPlane::start_apiserver(&dir, Duration::from_secs(120))
            .await
            .unwrap_or_else(|e| panic!("restart after {signal:?}: {e}"));
        // The same client (same server URL, same certificates) works again, and etcd kept
        // the data.
        assert!(
            works(&client).await,
            "no answer after restarting from {signal:?}"
        );
        assert!(api.get("kept").await.is_ok());
    }
    let running = ControlPlane::running(&dir).unwrap();
    assert!(running.iter().all(|(_, alive)| *alive), "{running:?}");
    ControlPlane::stop(&dir).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The resourceVersion of a list of `api`'s objects, to watch from.
async fn list_version(api: &Api<ConfigMap>) -> String {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}
