//! Leader election against the real API server: of two replicas exactly one leads; a leader
//! that vanishes without releasing is replaced once its Lease expires; a leader that releases
//! hands over at once.

use std::time::{Duration, Instant};

use hangar::leader::{ElectionConfig, Elector};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

fn config(ns: &str, identity: &str) -> ElectionConfig {
    let mut c = ElectionConfig::new(ns, "hangar-leader-test", identity.to_owned());
    c.lease_duration = Duration::from_secs(3);
    c.renew_deadline = Duration::from_secs(2);
    c.retry_period = Duration::from_millis(200);
    c
}

/// Waits up to `limit` for `check`, polling every 50 ms; returns how long it took.
async fn within(what: &str, limit: Duration, check: impl FnMut() -> bool) -> Duration {
    let poll = Duration::from_millis(50);
    match hangar_testkit::eventually::until(what, limit, poll, check).await {
        Ok(took) => took,
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn exactly_one_replica_leads_and_a_vanished_leader_is_replaced() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "leader").await;

    let a = Elector::start(client.clone(), config(ns.name(), "replica-a"));
    let b = Elector::start(client.clone(), config(ns.name(), "replica-b"));
    within("a leader", Duration::from_secs(10), || {
        a.is_leader() || b.is_leader()
    })
    .await;
    // Both keep campaigning for a while: never two leaders.
    for _ in 0..20 {
        assert!(!(a.is_leader() && b.is_leader()), "two leaders at once");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (leader, follower) = if a.is_leader() { (a, b) } else { (b, a) };
    assert!(!follower.is_leader());

    // The leader crashes (stops renewing, no release): the follower takes over after the
    // Lease expires — not before its duration, and within duration + a few retries.
    let crashed = Instant::now();
    leader.abandon();
    let took = within("the follower to take over", Duration::from_secs(10), || {
        follower.is_leader()
    })
    .await;
    assert!(
        crashed.elapsed() >= Duration::from_millis(2500),
        "took over after {took:?}, before the 3 s lease could expire"
    );

    let lease: Lease = Api::namespaced(client.clone(), ns.name())
        .get("hangar-leader-test")
        .await
        .unwrap();
    let spec = lease.spec.unwrap();
    assert!(spec.holder_identity.unwrap().starts_with("replica-"));
    assert_eq!(spec.lease_transitions, Some(1));
    follower.release().await;
}

#[tokio::test]
async fn a_released_lease_is_taken_over_at_once() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "leader").await;

    let mut first = Elector::start(client.clone(), config(ns.name(), "first"));
    tokio::time::timeout(Duration::from_secs(10), first.acquired())
        .await
        .expect("first replica leads");
    let second = Elector::start(client.clone(), config(ns.name(), "second"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.is_leader(), "second took a held lease");

    let released = Instant::now();
    first.release().await;
    within("the second to take over", Duration::from_secs(2), || {
        second.is_leader()
    })
    .await;
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "handover waited for the lease to expire"
    );
    second.release().await;
    let lease: Lease = Api::namespaced(client, ns.name())
        .get("hangar-leader-test")
        .await
        .unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity, None);
}
