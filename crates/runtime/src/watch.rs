//! Watches and the stores they fill, shared by every part of the operator.
//!
//! One watch per kind fills a reflector store that reconcilers read instead of listing, and
//! feeds every controller that reacts to the kind ([`shared_store`]): the apiserver sends each
//! change to the process once, not once per controller. (kube-runtime's own shared streams do
//! not pass deletions on, which the controllers need.)
//!
//! Contract: nothing here decides anything. A store lags behind the writes of this process, so
//! what a reconcile created or deleted that its store does not show yet is remembered
//! ([`Unobserved`]) and counted by the next reconcile as done, so that a lagging watch does
//! not make it create or delete the same thing twice. A reconcile that created objects also
//! waits until its store shows them ([`wait_until_stored`], bounded by a few seconds), so that
//! the usual next reconcile works from an exact store. Statuses this process wrote are
//! remembered the same way ([`StatusWrites`]), so a reconcile does not write again a status its
//! store does not show yet.

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
    shared_store_with(api, config, |_| {}, |_, _| false)
}

/// [`shared_store`], with `trim` applied to every object before it is cached or passed on:
/// for a kind of which the operator keeps thousands and reads little (runner pods).
///
/// A change that `trim` leaves nothing of (a pod's IP, a condition nobody reads, the kubelet
/// acknowledging a generation) still reaches the store, but no trigger: the cached object is
/// what every reader reads, and only its `resourceVersion` moved. A runner pod's life is about
/// thirteen watch events; two of them are such changes, and each trigger costs a reconcile in
/// every controller fed by the watch.
pub fn shared_trimmed_store<K, const N: usize>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
) -> (Store<K>, [Triggers<K>; N])
where
    K: Watched + PartialEq,
{
    shared_store_with(api, config, trim, same_but_version)
}

/// Whether `new` is `cached` with only its `resourceVersion` moved.
fn same_but_version<K: kube::Resource + PartialEq>(cached: &K, new: &mut K) -> bool {
    let version = std::mem::replace(
        &mut new.meta_mut().resource_version,
        cached.meta().resource_version.clone(),
    );
    let same = cached == new;
    new.meta_mut().resource_version = version;
    same
}

fn shared_store_with<K, const N: usize>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    unchanged: fn(&K, &mut K) -> bool,
) -> (Store<K>, [Triggers<K>; N])
where
    K: Watched,
{
    let (reader, mut writer) = reflector::store();
    let mut senders = Vec::with_capacity(N);
    let triggers = std::array::from_fn(|_| {
        let (tx, rx) = futures::channel::mpsc::unbounded::<std::sync::Arc<K>>();
        senders.push(tx);
        rx.boxed()
    });
    let cached = reader.clone();
    let events = watcher(api, config)
        .modify(move |object| {
            forget_field_managers(object);
            trim(object);
        })
        .default_backoff();
    tokio::spawn(events.for_each(move |event| {
        if let Ok(event) = event
            && let Some(object) = take_event(&mut writer, &cached, unchanged, event)
        {
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

/// Writes `event` to the store and returns the object it touched, if the controllers are to
/// hear of it: what `reflector::reflector` and `touched_objects` do, except for a live change
/// that leaves the cached object `unchanged` (looked at before the write: after it, the cached
/// object is gone).
fn take_event<K: Watched>(
    writer: &mut reflector::store::Writer<K>,
    cached: &Store<K>,
    unchanged: fn(&K, &mut K) -> bool,
    mut event: watcher::Event<K>,
) -> Option<K> {
    let quiet = match &mut event {
        watcher::Event::Apply(object) => cached
            .get(&reflector::ObjectRef::from_obj(object))
            .is_some_and(|before| unchanged(&before, object)),
        _ => false,
    };
    writer.apply_watcher_event(&event);
    match event {
        watcher::Event::Apply(object)
        | watcher::Event::InitApply(object)
        | watcher::Event::Delete(object) => (!quiet).then_some(object),
        watcher::Event::Init | watcher::Event::InitDone => None,
    }
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
    let is_cached = |n: &String| cached(store.get(&ObjectRef::<K>::new(n).within(ns)).as_deref());
    while !names.iter().all(is_cached) {
        if tokio::time::Instant::now() >= deadline {
            // A scale-up writes hundreds at once: a few names say which, the count how many.
            let missing: Vec<&String> = names.iter().filter(|n| !is_cached(n)).collect();
            tracing::warn!(
                namespace = ns,
                count = missing.len(),
                first = ?&missing[..missing.len().min(3)],
                what,
                "objects not yet so in the cache"
            );
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Moments this process saw happen to objects, by UID: what its store cannot say yet (a
/// finalizer it removed from an object being deleted, whose watch event is still on its way) or
/// what no status records (when a Runner's runner was seen finished). The first moment noted for
/// a UID counts. Entries go once they are [`UidTimes::KEEP`] old, when another is noted: long
/// after any watch event of theirs arrived and their objects went.
#[derive(Debug, Default)]
pub struct UidTimes(std::sync::Mutex<std::collections::HashMap<String, std::time::SystemTime>>);

impl UidTimes {
    /// How long an entry is kept.
    pub const KEEP: std::time::Duration = std::time::Duration::from_secs(600);

    /// Notes that something happened to `uid` at `now` (kept if it was noted before).
    pub fn note(&self, uid: &str, now: std::time::SystemTime) {
        let mut times = self.lock();
        times.retain(|_, at| now.duration_since(*at).unwrap_or_default() < Self::KEEP);
        times.entry(uid.to_owned()).or_insert(now);
    }

    /// When it was noted for `uid`, if it was.
    pub fn get(&self, uid: &str) -> Option<std::time::SystemTime> {
        self.lock().get(uid).copied()
    }

    /// Whether it was noted for `uid`.
    pub fn contains(&self, uid: &str) -> bool {
        self.lock().contains_key(uid)
    }

    /// Forgets `uid`.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, std::time::SystemTime>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How long a write of this process may go unseen by its store before [`Unobserved`] forgets
/// it: a watch that lags longer is broken, and an object created and deleted again before the
/// store caught up is never seen at all (counting it longer would hold a place for nothing).
pub const UNOBSERVED_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// The creations and deletions each owner made that its store may not show yet
/// (kube-controller-manager's "expectations"): recorded after a reconcile's writes, read by the
/// owner's next reconcile, which counts them as done. An entry goes once the store shows it
/// (created: present; deleted: deleting or gone) or after [`UNOBSERVED_TTL`].
#[derive(Debug, Default)]
pub struct Unobserved {
    owners: std::sync::Mutex<std::collections::HashMap<String, Writes>>,
}

#[derive(Debug, Default)]
struct Writes {
    created: std::collections::BTreeMap<String, tokio::time::Instant>,
    deleted: std::collections::BTreeMap<String, tokio::time::Instant>,
}

impl Writes {
    fn is_empty(&self) -> bool {
        self.created.is_empty() && self.deleted.is_empty()
    }

    fn forget_expired(&mut self, now: tokio::time::Instant) {
        let fresh = |at: &mut tokio::time::Instant| now.duration_since(*at) < UNOBSERVED_TTL;
        self.created.retain(|_, at| fresh(at));
        self.deleted.retain(|_, at| fresh(at));
    }
}

/// What an owner wrote that its store does not show yet.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Unseen {
    /// Created, and not in the store yet.
    pub created: Vec<String>,
    /// Deleted, and in the store without a `deletionTimestamp` still.
    pub deleted: Vec<String>,
}

impl Unobserved {
    /// Remembers that `owner` (a stable key: its UID) just created `created` and deleted
    /// `deleted`.
    pub fn record(&self, owner: &str, created: &[String], deleted: &[String]) {
        if created.is_empty() && deleted.is_empty() {
            return;
        }
        let now = tokio::time::Instant::now();
        let mut owners = self.owners.lock().expect("unobserved writes");
        // Owners that are gone are never asked again: their entries expire here.
        owners.retain(|_, writes| {
            writes.forget_expired(now);
            !writes.is_empty()
        });
        let writes = owners.entry(owner.to_owned()).or_default();
        for name in created {
            writes.created.insert(name.clone(), now);
        }
        for name in deleted {
            writes.created.remove(name);
            writes.deleted.insert(name.clone(), now);
        }
    }

    /// Forgets that `owner` created `name`: its store shows it. (An entry is otherwise forgotten
    /// only when [`Unobserved::unseen`] finds it in the store, so a caller that asks only while
    /// the object is missing says here when it saw it; else an object that vanished after it
    /// was seen would count as unseen until the TTL.)
    pub fn seen_created(&self, owner: &str, name: &str) {
        self.forget(owner, |writes| writes.created.remove(name));
    }

    /// Forgets that `owner` deleted `name`: the deletion failed, and the object stays.
    pub fn deletion_failed(&self, owner: &str, name: &str) {
        self.forget(owner, |writes| writes.deleted.remove(name));
    }

    /// Applies `forget` to `owner`'s writes, and drops the owner once it has none left.
    fn forget<T>(&self, owner: &str, forget: impl FnOnce(&mut Writes) -> T) {
        let mut owners = self.owners.lock().expect("unobserved writes");
        if let Some(writes) = owners.get_mut(owner) {
            forget(writes);
            if writes.is_empty() {
                owners.remove(owner);
            }
        }
    }

    /// What `owner` wrote in `ns` that `store` does not show yet; forgets what it shows.
    pub fn unseen<K>(&self, owner: &str, store: &Store<K>, ns: &str) -> Unseen
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
    {
        use kube::runtime::reflector::ObjectRef;
        let mut owners = self.owners.lock().expect("unobserved writes");
        let Some(writes) = owners.get_mut(owner) else {
            return Unseen::default();
        };
        writes.forget_expired(tokio::time::Instant::now());
        let get = |name: &str| store.get(&ObjectRef::<K>::new(name).within(ns));
        writes.created.retain(|name, _| get(name).is_none());
        writes
            .deleted
            .retain(|name, _| get(name).is_some_and(|o| o.meta().deletion_timestamp.is_none()));
        let unseen = Unseen {
            created: writes.created.keys().cloned().collect(),
            deleted: writes.deleted.keys().cloned().collect(),
        };
        if writes.is_empty() {
            owners.remove(owner);
        }
        unseen
    }
}

/// The statuses this process wrote that its store does not show yet, by object UID.
///
/// A reconcile decides whether to write a status by comparing it with the status its store
/// shows. When the store lags behind this process's own writes (under load it does, by
/// seconds), the next reconcile of the object — triggered by anything else it watches — sees
/// the status from before the last write and writes it again: a write that changes nothing
/// but a timestamp, once per trigger. Kept here instead: what each write was computed from
/// (the resourceVersion the store showed) and what it produced (the apiserver's answer), so a
/// reconcile compares with the status the object has, not the one its store still shows.
///
/// Exact, not a guess: [`StatusWrites::unseen`] answers only while the store shows a version
/// that precedes this process's latest write of the object. Once it shows that write, or any
/// other version (another writer's), the store is the one to go by and the entry goes. An
/// entry not looked at again goes after [`UNOBSERVED_TTL`].
#[derive(Debug)]
pub struct StatusWrites<S> {
    objects: std::sync::Mutex<StatusWritesInner<S>>,
}

#[derive(Debug)]
struct StatusWritesInner<S> {
    by_uid: std::collections::HashMap<String, Written<S>>,
    last_pruned: Option<tokio::time::Instant>,
}

#[derive(Debug)]
struct Written<S> {
    /// The versions before the latest write: the one the first unseen write was computed from
    /// and those the later writes produced.
    before: Vec<String>,
    /// The version the latest write produced.
    version: String,
    /// The status it produced.
    status: S,
    at: tokio::time::Instant,
}

impl<S> Default for StatusWrites<S> {
    fn default() -> Self {
        Self {
            objects: std::sync::Mutex::new(StatusWritesInner {
                by_uid: std::collections::HashMap::new(),
                last_pruned: None,
            }),
        }
    }
}

impl<S: Clone> StatusWrites<S> {
    /// The status object `uid` has after this process's latest write of it, while its store
    /// still shows `stored_version`, a version from before that write; `None` when the store's
    /// status is the one to go by.
    pub fn unseen(&self, uid: &str, stored_version: Option<&str>) -> Option<S> {
        let mut objects = self.objects.lock().expect("status writes");
        let written = objects.by_uid.get(uid)?;
        let fresh = written.at.elapsed() < UNOBSERVED_TTL;
        match stored_version {
            Some(v) if fresh && written.before.iter().any(|b| b == v) => {
                Some(written.status.clone())
            }
            _ => {
                objects.by_uid.remove(uid);
                None
            }
        }
    }

    /// Remembers that this process wrote object `uid`'s status, computed from version
    /// `computed_from` (what its store showed), and that the apiserver answered with version
    /// `produced` holding `status`.
    pub fn record(
        &self,
        uid: &str,
        computed_from: Option<&str>,
        produced: Option<&str>,
        status: S,
    ) {
        let (Some(from), Some(produced)) = (computed_from, produced) else {
            return;
        };
        let now = tokio::time::Instant::now();
        let mut objects = self.objects.lock().expect("status writes");
        // Objects that are gone are never looked up again: their entries expire here, in one
        // sweep per TTL rather than one per write.
        if objects
            .last_pruned
            .is_none_or(|at| now.duration_since(at) >= UNOBSERVED_TTL)
        {
            objects
                .by_uid
                .retain(|_, w| now.duration_since(w.at) < UNOBSERVED_TTL);
            objects.last_pruned = Some(now);
        }
        let mut before = match objects.by_uid.remove(uid) {
            // A write on top of a version from before the unseen ones: the chain goes on.
            Some(w) if w.before.iter().any(|b| b == from) => {
                let mut before = w.before;
                before.push(w.version);
                before
            }
            _ => vec![],
        };
        if !before.iter().any(|b| b == from) {
            before.push(from.to_owned());
        }
        objects.by_uid.insert(
            uid.to_owned(),
            Written {
                before,
                version: produced.to_owned(),
                status,
                at: now,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector::store::Writer;

    fn config_map(name: &str, deleting: bool) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("ns".to_owned()),
                deletion_timestamp: deleting.then_some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ),
                ),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn show(writer: &mut Writer<ConfigMap>, name: &str, deleting: bool) {
        writer.apply_watcher_event(&watcher::Event::Apply(config_map(name, deleting)));
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn the_store_takes_every_change_and_the_controllers_hear_of_all_but_quiet_ones() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let at = |version: &str, data: Option<&str>| {
            let mut cm = config_map("a", false);
            cm.metadata.uid = Some("u1".into());
            cm.metadata.resource_version = Some(version.into());
            cm.data = data.map(|d| [("k".to_owned(), d.to_owned())].into());
            cm
        };
        let mut take = |event| {
            take_event(&mut writer, &store, same_but_version, event)
                .map(|cm: ConfigMap| cm.metadata.resource_version.unwrap_or_default())
        };
        let cached = |store: &Store<ConfigMap>| {
            store
                .get(&reflector::ObjectRef::new("a").within("ns"))
                .and_then(|cm| cm.metadata.resource_version.clone())
        };
        assert_eq!(take(watcher::Event::Apply(at("1", None))), Some("1".into()));
        // Only the version moved: cached, not passed on.
        assert_eq!(take(watcher::Event::Apply(at("2", None))), None);
        assert_eq!(cached(&store).as_deref(), Some("2"));
        assert_eq!(
            take(watcher::Event::Apply(at("3", Some("x")))),
            Some("3".into())
        );
        // A re-list passes everything on, changed or not.
        assert_eq!(take(watcher::Event::Init), None);
        assert_eq!(
            take(watcher::Event::InitApply(at("3", Some("x")))),
            Some("3".into())
        );
        assert_eq!(take(watcher::Event::InitDone), None);
        // A new object of the same name (another UID) is a change.
        let mut other = at("4", Some("x"));
        other.metadata.uid = Some("u2".into());
        assert_eq!(take(watcher::Event::Apply(other)), Some("4".into()));
        // A deletion always is, though the object is as cached.
        assert_eq!(
            take(watcher::Event::Delete(at("4", Some("x")))),
            Some("4".into())
        );
        assert_eq!(cached(&store), None);
    }

    #[test]
    fn a_change_of_the_resource_version_alone_triggers_nothing() {
        let mut cached = config_map("a", false);
        cached.metadata.resource_version = Some("1".into());
        let mut new = cached.clone();
        new.metadata.resource_version = Some("2".into());
        assert!(same_but_version(&cached, &mut new));
        // The object passed on keeps its own version.
        assert_eq!(new.metadata.resource_version.as_deref(), Some("2"));
        let mut data = new.clone();
        data.data = Some([("k".to_owned(), "v".to_owned())].into());
        assert!(!same_but_version(&cached, &mut data));
        let mut deleting = config_map("a", true);
        deleting.metadata.resource_version = Some("3".into());
        assert!(!same_but_version(&cached, &mut deleting));
    }

    #[tokio::test(start_paused = true)]
    async fn writes_count_until_the_store_shows_them() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        show(&mut writer, "old", false);
        let unobserved = Unobserved::default();
        unobserved.record("set", &names(&["a", "b"]), &names(&["old"]));
        assert_eq!(
            unobserved.unseen("set", &store, "ns"),
            Unseen {
                created: names(&["a", "b"]),
                deleted: names(&["old"]),
            }
        );
        // Another owner's writes, and another namespace's objects, are not this owner's.
        assert_eq!(unobserved.unseen("other", &store, "ns"), Unseen::default());

        show(&mut writer, "a", false);
        show(&mut writer, "old", true);
        assert_eq!(
            unobserved.unseen("set", &store, "ns"),
            Unseen {
                created: names(&["b"]),
                deleted: vec![],
            }
        );
        // Seen once is forgotten: gone again later, it is not counted again.
        writer.apply_watcher_event(&watcher::Event::Delete(config_map("a", false)));
        show(&mut writer, "b", false);
        assert_eq!(unobserved.unseen("set", &store, "ns"), Unseen::default());
        assert!(unobserved.owners.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_never_seen_is_forgotten_after_the_ttl() {
        let (store, _writer) = reflector::store::<ConfigMap>();
        let unobserved = Unobserved::default();
        unobserved.record("set", &names(&["a"]), &[]);
        tokio::time::advance(UNOBSERVED_TTL - std::time::Duration::from_secs(1)).await;
        assert_eq!(
            unobserved.unseen("set", &store, "ns").created,
            names(&["a"])
        );
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        assert_eq!(unobserved.unseen("set", &store, "ns"), Unseen::default());

        // An owner never asked again is dropped by a later write of any owner.
        unobserved.record("gone", &names(&["x"]), &[]);
        tokio::time::advance(UNOBSERVED_TTL).await;
        unobserved.record("set", &names(&["b"]), &[]);
        assert_eq!(
            unobserved.owners.lock().unwrap().keys().collect::<Vec<_>>(),
            ["set"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn deleting_what_was_created_unseen_counts_it_deleted_only() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let unobserved = Unobserved::default();
        unobserved.record("set", &names(&["a"]), &[]);
        unobserved.record("set", &[], &names(&["a"]));
        assert_eq!(unobserved.unseen("set", &store, "ns"), Unseen::default());
        show(&mut writer, "a", false);
        unobserved.record("set", &[], &names(&["a"]));
        assert_eq!(
            unobserved.unseen("set", &store, "ns").deleted,
            names(&["a"])
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_deletion_leaves_the_object_counted_as_it_is() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let unobserved = Unobserved::default();
        show(&mut writer, "a", false);
        show(&mut writer, "b", false);
        unobserved.record("set", &[], &names(&["a", "b"]));
        unobserved.deletion_failed("set", "a");
        assert_eq!(
            unobserved.unseen("set", &store, "ns").deleted,
            names(&["b"])
        );
        unobserved.deletion_failed("set", "b");
        assert_eq!(unobserved.unseen("set", &store, "ns"), Unseen::default());
        assert!(unobserved.owners.lock().unwrap().is_empty());
        unobserved.deletion_failed("nobody", "a");
    }

    #[tokio::test(start_paused = true)]
    async fn a_status_written_is_the_objects_until_the_store_shows_that_write_or_another() {
        let writes = StatusWrites::<&str>::default();
        assert_eq!(writes.unseen("u", Some("1")), None, "nothing written");

        writes.record("u", Some("1"), Some("2"), "pending");
        assert_eq!(writes.unseen("u", Some("1")), Some("pending"), "store at 1");
        // A second write while the store still shows 1, then the store shows the first write:
        // the second is still unseen.
        writes.record("u", Some("1"), Some("3"), "running");
        assert_eq!(writes.unseen("u", Some("1")), Some("running"));
        assert_eq!(writes.unseen("u", Some("2")), Some("running"));
        // The store shows the latest write: it is the one to go by.
        assert_eq!(writes.unseen("u", Some("3")), None);
        assert_eq!(writes.unseen("u", Some("2")), None, "forgotten once seen");

        // Another writer's version: the store is the one to go by.
        writes.record("v", Some("10"), Some("11"), "pending");
        assert_eq!(writes.unseen("v", Some("12")), None);
        assert_eq!(writes.unseen("v", Some("10")), None, "forgotten");

        // Unknown versions write nothing down.
        writes.record("w", None, Some("5"), "pending");
        assert_eq!(writes.unseen("w", Some("5")), None);
        assert_eq!(writes.unseen("w", None), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_status_write_never_seen_is_forgotten_after_the_ttl() {
        let writes = StatusWrites::<&str>::default();
        writes.record("u", Some("1"), Some("2"), "pending");
        tokio::time::advance(UNOBSERVED_TTL - std::time::Duration::from_secs(1)).await;
        assert_eq!(writes.unseen("u", Some("1")), Some("pending"));
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        assert_eq!(writes.unseen("u", Some("1")), None);
        // Entries of objects never looked up again go with the next write's sweep.
        writes.record("gone", Some("1"), Some("2"), "pending");
        tokio::time::advance(UNOBSERVED_TTL).await;
        writes.record("u", Some("3"), Some("4"), "running");
        let objects = writes.objects.lock().unwrap();
        assert_eq!(objects.by_uid.keys().collect::<Vec<_>>(), ["u"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_creation_seen_once_is_forgotten_and_its_object_may_vanish() {
        let (store, _writer) = reflector::store::<ConfigMap>();
        let unobserved = Unobserved::default();
        unobserved.record("owner", &["a".to_owned()], &[]);
        assert_eq!(unobserved.unseen("owner", &store, "ns").created, ["a"]);
        unobserved.seen_created("owner", "a");
        // Missing from the store now means gone, not on its way.
        assert!(unobserved.unseen("owner", &store, "ns").created.is_empty());
        unobserved.seen_created("nobody", "a");
    }

    #[test]
    fn a_uid_time_is_the_first_noted_until_forgotten_or_kept_long_enough() {
        use std::time::{Duration, SystemTime};
        let times = UidTimes::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let later = |s| t0 + Duration::from_secs(s);
        assert!(!times.contains("a") && times.get("a").is_none());
        times.note("a", t0);
        times.note("a", later(5)); // noted again: the first moment stays
        assert_eq!(times.get("a"), Some(t0));
        assert!(!times.contains("b"), "only the object noted");
        times.note("b", later(10));
        times.forget("b");
        assert_eq!(times.get("b"), None);
        // Pruned by a later note once kept long enough.
        times.note("c", t0 + UidTimes::KEEP - Duration::from_secs(1));
        assert!(times.contains("a"));
        times.note("d", t0 + UidTimes::KEEP);
        assert!(!times.contains("a"));
        assert!(times.contains("c") && times.contains("d"));
    }
}
