//! Watches and the stores they fill, shared by every part of the operator.
//!
//! One watch per kind fills a reflector store that reconcilers read instead of listing, and
//! feeds every controller that reacts to the kind ([`shared_store`]): the apiserver sends each
//! change to the process once, not once per controller. (kube-runtime's own shared streams do
//! not pass deletions on, which the controllers need.)
//!
//! Contract: nothing here decides anything. A store lags behind the writes of this process, so
//! a reconcile that created or deleted objects waits ([`wait_until_stored`],
//! [`wait_until_deleting`]) until its store shows them, bounded by a few seconds.

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

/// The namespaced `Api` of a kind: in `namespace`, or in every namespace when `None`.
pub fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// What a kind needs to be watched into a store.
pub trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// A store filled by its own watch, for a kind no controller is triggered by.
pub fn spawn_store<K>(api: Api<K>, config: watcher::Config) -> Store<K>
where
    K: Watched,
{
    shared_store::<K, 0>(api, config).0
}

/// A store of the cluster's Nodes holding what runner health reads of them — name and Ready
/// condition — and nothing else: a real node's status lists every image it holds, which would
/// cost the cache far more than the pods it runs.
pub fn spawn_node_store(client: &Client) -> Store<k8s_openapi::api::core::v1::Node> {
    use k8s_openapi::api::core::v1::{Node, NodeStatus};
    let (reader, writer) = reflector::store();
    let nodes = watcher(Api::<Node>::all(client.clone()), watcher::Config::default()).modify(
        |node: &mut Node| {
            forget_field_managers(node);
            node.metadata.annotations = None;
            node.metadata.labels = None;
            node.spec = None;
            let ready = node
                .status
                .take()
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .filter(|c| c.type_ == "Ready")
                .collect();
            node.status = Some(NodeStatus {
                conditions: Some(ready),
                ..NodeStatus::default()
            });
        },
    );
    let stream = reflector::reflector(writer, nodes).default_backoff();
    tokio::spawn(stream.for_each(|_| async {}));
    reader
}

/// Drops an object's `managedFields` before it is cached: nothing here reads which manager
/// owns which field (writes are server-side applies and merge patches that never send them
/// back), and on a pod they are often the largest part of its metadata.
fn forget_field_managers<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// A controller's trigger stream: the objects of a kind that one shared watch saw change
/// (created, modified, deleted, or listed when the watch (re)starts). Every controller fed by
/// one watch gets the same copy of each object.
pub type Triggers<K> = futures::stream::BoxStream<'static, std::sync::Arc<K>>;

/// One watch of a kind feeding a store and `N` trigger streams, all subscribed
/// before the watch starts so that none misses the initial list. A trigger stream is
/// unbounded: a kube-runtime `Controller` drains its triggers into its own queue at once
/// (deduplicated per object), and a bound would let one controller that is not yet running
/// stall the store every controller waits on.
pub fn shared_store<K, const N: usize>(
    api: Api<K>,
    config: watcher::Config,
) -> (Store<K>, [Triggers<K>; N])
where
    K: Watched,
{
    shared_trimmed_store(api, config, |_| {})
}

/// [`shared_store`], with `trim` applied to every object before it is cached or passed on:
/// for a kind of which the operator keeps thousands and reads little (runner pods).
pub fn shared_trimmed_store<K, const N: usize>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
) -> (Store<K>, [Triggers<K>; N])
where
    K: Watched,
{
    let (reader, writer) = reflector::store();
    let mut senders = Vec::with_capacity(N);
    let triggers = std::array::from_fn(|_| {
        let (tx, rx) = futures::channel::mpsc::unbounded::<std::sync::Arc<K>>();
        senders.push(tx);
        rx.boxed()
    });
    let stream = reflector::reflector(
        writer,
        watcher(api, config).modify(move |object| {
            forget_field_managers(object);
            trim(object);
        }),
    )
    .default_backoff()
    .touched_objects();
    tokio::spawn(stream.for_each(move |touched| {
        if let Ok(object) = touched {
            let object = std::sync::Arc::new(object);
            for tx in &senders {
                // A closed channel is a controller that ended: nothing to tell it.
                let _ = tx.unbounded_send(object.clone());
            }
        }
        async {}
    }));
    (reader, triggers)
}

/// How long a reconcile waits for objects it created to reach a store.
const STORE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits (up to [`STORE_WAIT`]) until `store` holds `names` in `ns` — objects this reconcile
/// just created. Reconciles are triggered by the controllers' own watches, not the stores'
/// (see the operator's manager); one that ran before the store caught up would take the objects
/// for missing and create them again. Reconciles of one object never overlap, so waiting at
/// the end of the one that created them is enough.
pub async fn wait_until_stored<K>(
    store: &kube::runtime::reflector::Store<K>,
    ns: &str,
    names: &[String],
) where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    wait_for_store(store, ns, names, "created", |o| o.is_some()).await;
}

/// [`wait_until_stored`] for objects this reconcile just deleted: waits until `store` shows
/// each of `names` deleting or gone, so the next reconcile does not delete them again.
pub async fn wait_until_deleting<K>(
    store: &kube::runtime::reflector::Store<K>,
    ns: &str,
    names: &[String],
) where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    wait_for_store(store, ns, names, "deleted", |o| {
        o.is_none_or(|o| o.meta().deletion_timestamp.is_some())
    })
    .await;
}

async fn wait_for_store<K>(
    store: &kube::runtime::reflector::Store<K>,
    ns: &str,
    names: &[String],
    what: &str,
    cached: impl Fn(Option<&K>) -> bool,
) where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    use kube::runtime::reflector::ObjectRef;
    let deadline = tokio::time::Instant::now() + STORE_WAIT;
    let all_cached = || {
        names
            .iter()
            .all(|n| cached(store.get(&ObjectRef::<K>::new(n).within(ns)).as_deref()))
    };
    while !all_cached() {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(namespace = ns, objects = ?names, what, "objects not yet so in the cache");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
