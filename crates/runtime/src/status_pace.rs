//! Pacing of the sets' status writes, and of an autoscaler's `observedGeneration`.
//!
//! A RunnerReplicaSet's and a RunnerDeployment's status follows its runners: the counts
//! (`replicas`, `readyReplicas`, `busyReplicas`, …) and the conditions built on them
//! (`Available` says how many are ready, `Progressing` whether runners are being created or
//! retired) change several times per job, and every change wakes the set's reconcile and then
//! its deployment's. Written at each change, a busy pool costs the apiserver several writes per
//! job that nobody reads in between; paced, a burst of changes to one object costs one write
//! per [`STATUS_PACE`].
//!
//! A HorizontalRunnerAutoscaler is paced the same way for one kind of change: a new
//! generation and nothing else. The webhook server records each reservation in the
//! autoscaler's spec, so under load most of its reconciles see a new generation that changes
//! nothing it reports. Its other changes (the desired replicas, the last scale-out, the counted
//! jobs: what its next decision reads back) are written at once ([`StatusPace::write_now`]),
//! and count towards the pace.
//!
//! Contract: a set's status is written at most once per [`STATUS_PACE`] per object; a change
//! that comes sooner is held, and the reconcile that held it requeues itself for the moment
//! ([`StatusPace::hold`] says how long), when it writes what is true then. So the status is at
//! most [`STATUS_PACE`] behind the world. Nothing that decides reads a set's status within
//! that time: a rollout waiting for its newest set's ready runners waits up to that much
//! longer, scaling and retirement read the runners themselves. A process that restarts forgets
//! the pace and writes at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The least time between two status writes of one set.
pub const STATUS_PACE: Duration = Duration::from_secs(1);

/// When each set's status was last written, by UID: one small entry per set this process has
/// written, forgotten once it is a pace old and another set is written.
#[derive(Debug, Default)]
pub struct StatusPace {
    last: Mutex<HashMap<String, Instant>>,
}

impl StatusPace {
    /// How long a status write of the object `uid` must still wait; `None` when it may go now.
    fn hold(&self, uid: &str) -> Option<Duration> {
        let last = *self.lock().get(uid)?;
        held_for(last.elapsed())
    }

    /// Runs `write`, the status write of the object `uid`, unless the last one was less than
    /// the pace ago: then writes nothing and says how long until it may go.
    pub async fn write<E>(
        &self,
        uid: &str,
        write: impl Future<Output = Result<(), E>>,
    ) -> Result<Option<Duration>, E> {
        if let Some(held) = self.hold(uid) {
            return Ok(Some(held));
        }
        self.wrote(uid);
        write.await.map(|()| None)
    }

    /// Runs `write`, the status write of the object `uid`, at once (what it carries cannot
    /// wait), and counts it: a paced write that follows waits the pace from this one.
    pub async fn write_now<E>(
        &self,
        uid: &str,
        write: impl Future<Output = Result<(), E>>,
    ) -> Result<(), E> {
        self.wrote(uid);
        write.await
    }

    /// Merge-patches the status of `object` (a set or a deployment) to `status`, paced:
    /// `Ok(Some(wait))` when the write is held for `wait`, and the caller requeues for it.
    /// `what` names the call in an error.
    pub async fn patch_status<K>(
        &self,
        client: &kube::Client,
        object: &K,
        status: serde_json::Value,
        what: &'static str,
    ) -> Result<Option<Duration>, crate::error::Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        use kube::ResourceExt as _;
        use kube::api::{Api, Patch, PatchParams};
        let api = Api::<K>::namespaced(client.clone(), &object.namespace().unwrap_or_default());
        let patch = Patch::Merge(serde_json::json!({ "status": status }));
        let write = async {
            api.patch_status(&object.name_any(), &PatchParams::default(), &patch)
                .await
                .map(drop)
                .map_err(crate::error::kube_err(
                    what,
                    crate::pod::observe::object_name(object),
                ))
        };
        self.write(&object.uid().unwrap_or_default(), write).await
    }

    /// Notes that the status of `uid` is being written now.
    fn wrote(&self, uid: &str) {
        let mut last = self.lock();
        last.retain(|_, at| held_for(at.elapsed()).is_some());
        last.insert(uid.to_owned(), Instant::now());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How long a write must still wait when the last one was `since` ago.
fn held_for(since: Duration) -> Option<Duration> {
    STATUS_PACE
        .checked_sub(since)
        .filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_waits_out_the_pace_since_the_last_one_of_its_object() {
        let pace = StatusPace::default();
        let write = |uid: &'static str| pace.write(uid, async { Ok::<_, ()>(()) });
        assert_eq!(write("a").await, Ok(None), "never written: not held");
        assert_eq!(pace.hold("a"), Some(STATUS_PACE));
        assert_eq!(write("b").await, Ok(None), "another object is not held");
        assert_eq!(write("a").await, Ok(Some(STATUS_PACE)), "held, not written");
        tokio::time::advance(Duration::from_millis(300)).await;
        assert_eq!(
            pace.hold("a"),
            Some(STATUS_PACE - Duration::from_millis(300))
        );
        tokio::time::advance(STATUS_PACE).await;
        assert_eq!(write("a").await, Ok(None));
        assert_eq!(pace.hold("a"), Some(STATUS_PACE), "written again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_cannot_wait_goes_at_once_and_holds_the_next_paced_one() {
        let pace = StatusPace::default();
        let ok = || async { Ok::<_, ()>(()) };
        assert_eq!(pace.write("a", ok()).await, Ok(None));
        assert_eq!(pace.write_now("a", ok()).await, Ok(()), "not held");
        tokio::time::advance(Duration::from_millis(600)).await;
        assert_eq!(
            pace.write("a", ok()).await,
            Ok(Some(Duration::from_millis(400))),
            "paced from the write that went at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_is_forgotten_once_it_holds_nothing() {
        let pace = StatusPace::default();
        pace.wrote("a");
        tokio::time::advance(STATUS_PACE).await;
        pace.wrote("b");
        assert_eq!(pace.lock().len(), 1, "a's entry held nothing any more");
    }
}
