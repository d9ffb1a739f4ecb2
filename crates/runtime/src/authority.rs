//! The authority of a runner pod, read from its owner chain: the driver half of
//! `hangar_core::authority`.
//!
//! Observe: the pod's controller owner reference; the Runner it names (from the store when the
//! caller has one, else a GET), or the StatefulSet it names and the RunnerSet that controls the
//! StatefulSet (from the stores when the caller has them and they hold the very objects named,
//! by UID; else a GET: admission must see owners created moments ago). Decide:
//! `hangar_core::authority::authority`. Nothing of the pod's env, labels or annotations is read
//! for scope or credentials.
//!
//! [`Memo`] keeps what a pod was granted, by pod UID, so a pod whose owner was deleted before
//! the pod itself can still be unregistered with the authority it had.

use std::collections::HashMap;
use std::sync::Mutex;

use hangar_api::{Runner, RunnerConfig, RunnerSet};
use hangar_core::authority::{self, Authority, Chain, Owner, OwnerRef, StatefulSet, Untrusted};
use k8s_openapi::api::apps::v1::StatefulSet as K8sStatefulSet;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};

/// Where owners are looked up.
pub struct Owners<'a> {
    /// For GETs.
    pub client: &'a Client,
    /// Runners, when the caller keeps a store of them (no GET then).
    pub runners: Option<&'a Store<Runner>>,
    /// StatefulSets and RunnerSets, when the caller keeps stores of them: an owner found there
    /// under the UID named costs no GET; one missing (created moments ago) or of another UID
    /// is read by GET.
    pub sets: Option<SetStores<'a>>,
}

/// The stores [`Owners::sets`] reads.
#[derive(Clone, Copy)]
pub struct SetStores<'a> {
    /// StatefulSets (trimmed: no read here looks at templates).
    pub stateful_sets: &'a Store<K8sStatefulSet>,
    /// RunnerSets.
    pub runner_sets: &'a Store<RunnerSet>,
}

impl std::fmt::Debug for SetStores<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetStores")
            .field("stateful_sets", &self.stateful_sets.len())
            .field("runner_sets", &self.runner_sets.len())
            .finish()
    }
}

impl std::fmt::Debug for Owners<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owners")
            .field("runners_cached", &self.runners.is_some())
            .field("sets_cached", &self.sets.is_some())
            .finish_non_exhaustive()
    }
}

/// The object named `name` with UID `uid` in `namespace`: from `store` when it holds that very
/// object, else by GET (`None`: no object of that name exists). The GET's answer may be of
/// another UID; the caller compares.
pub async fn cached_or_get<K>(
    store: Option<&Store<K>>,
    client: &Client,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<Option<std::sync::Arc<K>>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    if let Some(cached) = store
        .and_then(|s| s.get(&ObjectRef::new(name).within(namespace)))
        .filter(|o| o.meta().uid.as_deref() == Some(uid))
    {
        return Ok(Some(cached));
    }
    Ok(Api::<K>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?
        .map(std::sync::Arc::new))
}

/// The authority `pod` carries, or why it carries none; `Err` only when an owner could not be
/// read.
pub async fn of_pod(
    pod: &impl ResourceExt,
    owners: &Owners<'_>,
) -> Result<Result<Authority, Untrusted>, kube::Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let chain = chain(pod, &namespace, owners).await?;
    Ok(authority::authority(&pod.name_any(), &chain))
}

async fn chain(
    pod: &impl ResourceExt,
    namespace: &str,
    owners: &Owners<'_>,
) -> Result<Chain, kube::Error> {
    let Some(controller) = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
    else {
        return Ok(Chain::NoController);
    };
    let reference = OwnerRef {
        kind: controller.kind.clone(),
        name: controller.name.clone(),
        uid: controller.uid.clone(),
    };
    let group = controller.api_version.split('/').next().unwrap_or_default();
    Ok(match (group, controller.kind.as_str()) {
        ("actions.summerwind.dev", "Runner") => {
            let found = match owners.runners {
                Some(store) => store
                    .get(&ObjectRef::new(&reference.name).within(namespace))
                    .map(|r| owner(r.uid(), &r.spec.config)),
                None => Api::<Runner>::namespaced(owners.client.clone(), namespace)
                    .get_opt(&reference.name)
                    .await?
                    .map(|r| owner(r.uid(), &r.spec.config)),
            };
            Chain::Runner { reference, found }
        }
        ("apps", "StatefulSet") => {
            let set = cached_or_get(
                owners.sets.map(|s| s.stateful_sets),
                owners.client,
                namespace,
                &reference.name,
                &reference.uid,
            )
            .await?;
            let set_controller = set.as_ref().and_then(|s| {
                s.owner_references()
                    .iter()
                    .find(|o| {
                        o.controller == Some(true)
                            && o.api_version.starts_with("actions.summerwind.dev/")
                    })
                    .map(|o| OwnerRef {
                        kind: o.kind.clone(),
                        name: o.name.clone(),
                        uid: o.uid.clone(),
                    })
            });
            let runner_set = match set_controller.as_ref().filter(|c| c.kind == "RunnerSet") {
                Some(c) => cached_or_get(
                    owners.sets.map(|s| s.runner_sets),
                    owners.client,
                    namespace,
                    &c.name,
                    &c.uid,
                )
                .await?
                .map(|s| owner(s.uid(), &s.spec.config)),
                None => None,
            };
            Chain::StatefulSet {
                reference,
                found: set.map(|s| StatefulSet {
                    uid: s.uid().unwrap_or_default(),
                    controller: set_controller,
                }),
                runner_set,
            }
        }
        _ => Chain::Other { reference },
    })
}

fn owner(uid: Option<String>, config: &RunnerConfig) -> Owner {
    Owner {
        uid: uid.unwrap_or_default(),
        scope: (
            config.enterprise.clone(),
            config.organization.clone(),
            config.repository.clone(),
        ),
        credentials_secret: config
            .github_api_credentials_from
            .as_ref()
            .and_then(|c| c.secret_ref.as_ref())
            .map(|s| s.name.clone()),
    }
}

/// What each runner pod was granted, by pod UID.
#[derive(Debug, Default)]
pub struct Memo {
    granted: Mutex<HashMap<String, Authority>>,
}

impl Memo {
    /// What the pod of `uid` was granted, if it was.
    pub fn get(&self, uid: &str) -> Option<Authority> {
        self.lock().get(uid).cloned()
    }

    /// Remembers the grant of the pod of `uid`.
    pub fn insert(&self, uid: &str, authority: &Authority) {
        let mut granted = self.lock();
        if granted.get(uid) != Some(authority) {
            granted.insert(uid.to_owned(), authority.clone());
        }
    }

    /// Forgets the pod of `uid` (its finalizer is gone; nothing more is done for it).
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Authority>> {
        self.granted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;

    use super::*;

    fn stateful_set(uid: &str) -> K8sStatefulSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "sts", "namespace": "ns", "uid": uid},
        }))
        .unwrap()
    }

    /// A client whose apiserver counts the requests and answers every GET with the
    /// StatefulSet of UID "new".
    fn counting_client() -> (Client, Arc<AtomicUsize>) {
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        let apiserver = tower::service_fn(move |_: http::Request<kube::client::Body>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(200)
                        .body(serde_json::to_string(&stateful_set("new")).unwrap())
                        .unwrap(),
                )
            }
        });
        (Client::new(apiserver, "default"), requests)
    }

    #[tokio::test]
    async fn an_owner_is_read_from_the_store_only_when_it_holds_that_very_object() {
        let (client, requests) = counting_client();
        let mut writer: Writer<K8sStatefulSet> = Writer::default();
        writer.apply_watcher_event(&watcher::Event::Apply(stateful_set("old")));
        let store = writer.as_reader();

        let cached = cached_or_get(Some(&store), &client, "ns", "sts", "old")
            .await
            .unwrap();
        assert_eq!(cached.unwrap().uid().as_deref(), Some("old"));
        assert_eq!(requests.load(Ordering::SeqCst), 0, "answered by the store");

        // The name now belongs to another object: the store's is not the one the pod names.
        let read = cached_or_get(Some(&store), &client, "ns", "sts", "new")
            .await
            .unwrap();
        assert_eq!(read.unwrap().uid().as_deref(), Some("new"));
        assert_eq!(requests.load(Ordering::SeqCst), 1, "read by GET");

        // Not in the store (created moments ago): read by GET.
        let other = cached_or_get(Some(&store), &client, "ns", "missing", "new")
            .await
            .unwrap();
        assert!(other.is_some());
        assert_eq!(requests.load(Ordering::SeqCst), 2);
    }
}
