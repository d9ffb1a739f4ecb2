//! Pod writes: status patches and final deletions, coalesced per pod and paced.
//!
//! Pod workers only *submit* what a pod's status should be; a fixed pool of writer tasks sends
//! it. While a pod's write is queued or in flight, newer submissions replace the queued one, so
//! a burst of container events costs one patch, and writes for one pod never overtake each
//! other. A token bucket (`qps`, `burst`) paces all writes, the way a kubelet's client is
//! rate-limited.
//!
//! Every write names the pod's UID: status patches carry `metadata.uid` (the API server
//! rejects a patch for a different pod of the same name) and deletions a UID precondition.
//!
//! A write ends only when it lands, the API server rejects it (4xx other than 429), or the pod
//! is gone. One that keeps failing for transient reasons (the apiserver restarting, unreachable
//! or timing out) is retried with back-off for [`Timing::write_retry_window`], then put back
//! at the end of the queue, merged under anything newer submitted meanwhile: a kubelet never
//! abandons a pod's status or its final deletion, so neither does the simulator.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use serde::Serialize;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::config::{ApiBudget, Timing};

/// One pod's pending write.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PodWrite {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The kubelet-owned status fields to merge into `status`.
    pub status: Option<serde_json::Value>,
    /// Delete the pod (grace 0) after writing the status.
    pub delete: bool,
}

impl PodWrite {
    /// Folds `newer` (a later submission for the same pod) into this write: its status
    /// replaces ours, and a deletion asked by either stays asked.
    fn absorb(&mut self, newer: PodWrite) {
        if newer.status.is_some() {
            self.status = newer.status;
        }
        self.delete |= newer.delete;
    }
}

/// How a write's attempt ended.
#[derive(Debug, PartialEq)]
enum Sent {
    /// Written, or nothing left to write (the pod is gone or the write was rejected).
    Done,
    /// Still failing transiently after the retry window: what remains to be written.
    Deferred(PodWrite),
}

/// Counters of what the simulator did, for benchmarks and tests.
#[derive(Debug, Default)]
pub struct Stats {
    pub(crate) status_patches: AtomicU64,
    pub(crate) coalesced: AtomicU64,
    pub(crate) deletions: AtomicU64,
    pub(crate) bindings: AtomicU64,
    pub(crate) failed_writes: AtomicU64,
    pub(crate) deferred_writes: AtomicU64,
    pub(crate) containers_started: AtomicU64,
}

/// A snapshot of [`Stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StatsSnapshot {
    /// Status patches sent.
    pub status_patches: u64,
    /// Status submissions merged into a queued one instead of being sent.
    pub coalesced: u64,
    /// Pods deleted after termination.
    pub deletions: u64,
    /// Pods bound by the simulator.
    pub bindings: u64,
    /// Writes the API server rejected (other than the pod being gone).
    pub failed_writes: u64,
    /// Writes put back in the queue after failing transiently for the retry window.
    pub deferred_writes: u64,
    /// Container runs started.
    pub containers_started: u64,
}

impl Stats {
    /// The current counts.
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            status_patches: get(&self.status_patches),
            coalesced: get(&self.coalesced),
            deletions: get(&self.deletions),
            bindings: get(&self.bindings),
            failed_writes: get(&self.failed_writes),
            deferred_writes: get(&self.deferred_writes),
            containers_started: get(&self.containers_started),
        }
    }
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A token bucket shared by all writers.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Waits for a token. Callers are served in the order they ask.
    pub async fn acquire(&self) {
        let wait = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let (tokens, last) = *state;
            let refilled =
                (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst) - 1.0;
            *state = (refilled, now);
            if refilled >= 0.0 {
                return;
            }
            Duration::from_secs_f64(-refilled / self.qps)
        };
        tokio::time::sleep(wait).await;
    }
}

#[derive(Debug, Default)]
struct Queue {
    slots: HashMap<String, Slot>,
    ready: VecDeque<String>,
}

#[derive(Debug, Default)]
struct Slot {
    pending: Option<PodWrite>,
    busy: bool,
}

struct Inner {
    client: Client,
    limiter: Arc<RateLimiter>,
    queue: Mutex<Queue>,
    notify: Notify,
    stats: Arc<Stats>,
    field_manager: String,
    retry_window: Duration,
}

/// The submission side of the writer pool.
#[derive(Clone)]
pub(crate) struct Writer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

impl Writer {
    /// Starts `budget.writers` writer tasks in `tasks`.
    pub fn start(
        client: Client,
        budget: &ApiBudget,
        timing: &Timing,
        limiter: Arc<RateLimiter>,
        stats: Arc<Stats>,
        field_manager: String,
        tasks: &mut JoinSet<()>,
    ) -> Self {
        let inner = Arc::new(Inner {
            client,
            limiter,
            queue: Mutex::new(Queue::default()),
            notify: Notify::new(),
            stats,
            field_manager,
            retry_window: timing.write_retry_window,
        });
        for _ in 0..budget.writers {
            let inner = inner.clone();
            tasks.spawn(async move { inner.work().await });
        }
        Self { inner }
    }

    /// Queues `write`, merging it into a queued write for the same pod.
    pub fn submit(&self, write: PodWrite) {
        let mut queue = self.inner.lock();
        let slot = queue.slots.entry(write.uid.clone()).or_default();
        let idle = slot.pending.is_none() && !slot.busy;
        match &mut slot.pending {
            Some(queued) => {
                bump(&self.inner.stats.coalesced);
                queued.absorb(write.clone());
            }
            None => slot.pending = Some(write.clone()),
        }
        if idle {
            queue.ready.push_back(write.uid);
            drop(queue);
            self.inner.notify.notify_one();
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn work(&self) {
        loop {
            let next = {
                let mut queue = self.lock();
                let uid = queue.ready.pop_front();
                uid.and_then(|uid| {
                    let slot = queue.slots.get_mut(&uid)?;
                    slot.busy = true;
                    slot.pending.take()
                })
            };
            let Some(write) = next else {
                self.notify.notified().await;
                continue;
            };
            let uid = write.uid.clone();
            let sent = self.send(write).await;
            let mut queue = self.lock();
            let requeue = match (queue.slots.get_mut(&uid), sent) {
                (Some(slot), Sent::Deferred(mut rest)) => {
                    if let Some(newer) = slot.pending.take() {
                        rest.absorb(newer);
                    }
                    slot.pending = Some(rest);
                    slot.busy = false;
                    true
                }
                (Some(slot), Sent::Done) if slot.pending.is_some() => {
                    slot.busy = false;
                    true
                }
                _ => {
                    queue.slots.remove(&uid);
                    false
                }
            };
            if requeue {
                queue.ready.push_back(uid);
                drop(queue);
                self.notify.notify_one();
            }
        }
    }

    async fn send(&self, write: PodWrite) -> Sent {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &write.namespace);
        if let Some(status) = &write.status {
            let patch = serde_json::json!({
                "metadata": { "uid": write.uid },
                "status": status,
            });
            let params = PatchParams {
                field_manager: Some(self.field_manager.clone()),
                ..PatchParams::default()
            };
            let patch = Patch::Merge(&patch);
            match self
                .retrying(&write, "patch status", || {
                    api.patch_status(&write.name, &params, &patch)
                })
                .await
            {
                Attempt::Landed => bump(&self.stats.status_patches),
                Attempt::Dropped => return Sent::Done,
                Attempt::StillFailing => return Sent::Deferred(write),
            }
        }
        if write.delete {
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(write.uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match self
                .retrying(&write, "delete", || api.delete(&write.name, &params))
                .await
            {
                Attempt::Landed => bump(&self.stats.deletions),
                Attempt::Dropped => {}
                Attempt::StillFailing => {
                    return Sent::Deferred(PodWrite {
                        status: None,
                        ..write
                    });
                }
            }
        }
        Sent::Done
    }

    /// Runs `call` (paced) until it succeeds, the pod is gone, the write is rejected, or it
    /// has failed transiently for the retry window.
    async fn retrying<T, F, Fut>(&self, write: &PodWrite, action: &str, call: F) -> Attempt
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = kube::Result<T>>,
    {
        let started = tokio::time::Instant::now();
        let mut attempt: u32 = 0;
        loop {
            attempt = attempt.saturating_add(1);
            self.limiter.acquire().await;
            match call().await {
                Ok(_) => return Attempt::Landed,
                // Gone, or replaced by a pod of the same name (UID mismatch): nothing to do.
                Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => {
                    return Attempt::Dropped;
                }
                Err(kube::Error::Api(s)) if (400..500).contains(&s.code) && s.code != 429 => {
                    tracing::warn!(
                        pod = %format!("{}/{}", write.namespace, write.name),
                        action, error = %s.message, "pod write rejected"
                    );
                    bump(&self.stats.failed_writes);
                    return Attempt::Dropped;
                }
                Err(e) => {
                    let Some(delay) = retry_after(attempt, started.elapsed(), self.retry_window)
                    else {
                        tracing::warn!(
                            pod = %format!("{}/{}", write.namespace, write.name),
                            action, attempts = attempt, error = %e,
                            "pod write still failing; queued again"
                        );
                        bump(&self.stats.deferred_writes);
                        return Attempt::StillFailing;
                    };
                    tracing::debug!(
                        pod = %format!("{}/{}", write.namespace, write.name),
                        action, attempt, error = %e, "pod write failed; retrying"
                    );
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

/// How one write's retries ended.
#[derive(Debug, PartialEq)]
enum Attempt {
    Landed,
    /// The pod is gone or the write was rejected: there is nothing to retry.
    Dropped,
    /// Failing transiently for the whole retry window.
    StillFailing,
}

/// The wait before attempt `attempt + 1` after attempt `attempt` (from 1) failed transiently,
/// `failing_for` after the first attempt; `None` once the write has failed for `window`
/// (then it goes back in the queue).
fn retry_after(attempt: u32, failing_for: Duration, window: Duration) -> Option<Duration> {
    if failing_for >= window {
        return None;
    }
    let doublings = attempt.saturating_sub(1).min(10);
    Some((Duration::from_millis(100) * 2u32.pow(doublings)).min(Duration::from_secs(5)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_write_failures_are_retried_through_an_apiserver_restart() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        for (attempt, failing_for, want) in [
            (1, ms(0), Some(ms(100))),
            (2, ms(100), Some(ms(200))),
            (6, s(3), Some(s(3) + ms(200))),
            // An apiserver down for 8 s and slow to become ready: still retrying.
            (8, s(12), Some(s(5))),
            (20, s(59), Some(s(5))),
            (u32::MAX, s(59), Some(s(5))),
            (21, s(60), None),
        ] {
            assert_eq!(
                retry_after(attempt, failing_for, s(60)),
                want,
                "attempt {attempt} after {failing_for:?}"
            );
        }
    }

    #[test]
    fn a_newer_submission_replaces_the_status_and_never_cancels_a_deletion() {
        let write = |status: Option<&str>, delete: bool| PodWrite {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u".into(),
            status: status.map(|phase| serde_json::json!({ "phase": phase })),
            delete,
        };
        for (older, newer, want) in [
            // A deferred status patch under a newer status: the newer one is sent.
            (
                write(Some("Running"), false),
                write(Some("Failed"), false),
                write(Some("Failed"), false),
            ),
            // A deferred deletion (its status already landed) under a newer status: both.
            (
                write(None, true),
                write(Some("Failed"), false),
                write(Some("Failed"), true),
            ),
            // A newer submission without a status keeps the older status.
            (
                write(Some("Failed"), false),
                write(None, true),
                write(Some("Failed"), true),
            ),
        ] {
            let mut merged = older.clone();
            merged.absorb(newer.clone());
            assert_eq!(merged, want, "{older:?} absorbing {newer:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_allows_a_burst_then_paces() {
        let limiter = RateLimiter::new(10.0, 5);
        let start = Instant::now();
        for _ in 0..5 {
            limiter.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "burst is free");
        for _ in 0..10 {
            limiter.acquire().await;
        }
        let elapsed = start.elapsed().as_secs_f64();
        assert!(
            (0.99..1.01).contains(&elapsed),
            "10 more at 10/s: {elapsed}s"
        );
    }
}
