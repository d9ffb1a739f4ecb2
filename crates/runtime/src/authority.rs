//! The authority of a runner pod, read from its owner chain: the driver half of
//! `hangar_core::authority`.
//!
//! Observe: the pod's controller owner reference; the Runner it names (from the store when the
//! caller has one, else a GET), or the StatefulSet it names and the RunnerSet that controls the
//! StatefulSet (GETs: admission must see owners created moments ago, and a set pod is looked up
//! once in its life). Decide: `hangar_core::authority::authority`. Nothing of the pod's env,
//! labels or annotations is read for scope or credentials.
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
}

impl std::fmt::Debug for Owners<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owners")
            .field("runners_cached", &self.runners.is_some())
            .finish_non_exhaustive()
    }
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
            let set = Api::<K8sStatefulSet>::namespaced(owners.client.clone(), namespace)
                .get_opt(&reference.name)
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
                Some(c) => Api::<RunnerSet>::namespaced(owners.client.clone(), namespace)
                    .get_opt(&c.name)
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
