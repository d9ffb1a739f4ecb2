//! Which runner ID each runner pod was registered under, learnt with as few GitHub calls as
//! possible.
//!
//! Every runner pod must learn its runner ID (to report it registered, and to unregister it by
//! ID later). Asking GitHub once per pod costs a `GET …/runners` per pod — 200 calls for 200
//! pods, even when ETags make most of them free of rate-limit cost. Instead, each scope keeps
//! one snapshot of its runner list, shared by every pod of the scope:
//!
//! - a lookup that finds its name in the snapshot is answered from memory (an ID never changes
//!   for a registered name; a runner deleted since is answered 404 by the DELETE that follows);
//! - a lookup that misses refreshes the snapshot, but at most once per minimum interval per
//!   scope (the controller's `registration_check_interval`). Lookups arriving while a refresh is in flight wait for it (one lock per scope), so
//!   a burst of pods coming up costs one list per interval, not one per pod.
//!
//! Before either, a lookup may be answered by a sighting: the runner ID a signed `in_progress`
//! delivery named for a runner of that name ([`RunnerDirectory::sighted`], kept for
//! [`REMEMBER_SIGHTED`]); whether it vouches for the pod is `hangar_core::runner_lookup`'s
//! decision, as is how long a runner that has just started waits before it is looked for in a
//! list (the `hold` of [`RunnerDirectory::find`]). A sighting wakes no pod: the pod finds it
//! when its hold ends, so a runner whose job is over by then costs neither a list nor the
//! writes of being reported registered.
//!
//! A sighting from a `completed` delivery also says the runner is done with its job: the
//! RunnerReplicaSet controller learns it at once ([`RunnerDirectory::done_runners`]) and gives
//! the place of a runner on its way out to a new one without waiting for the kubelet to
//! report the exit ([`RunnerDirectory::completion`], `hangar_core::owner_sync`).
//!
//! The directory also remembers which pods were unregistered in the last [`REMEMBER_REMOVED`]:
//! a reconcile that runs on a cache from before its own `unregistration-complete` annotation
//! would otherwise DELETE the same runner a second time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hangar_core::runner_lookup::{self, Sighting};
use hangar_github::{GitHubError, Runner, Scope};
use tokio::time::Instant;

/// How long a completed unregistration is remembered (far longer than any cache lag).
pub const REMEMBER_REMOVED: Duration = Duration::from_secs(600);

/// How long a sighting is kept: far longer than a runner takes from its job's start to its
/// pod's next lookup, even after back-offs.
pub const REMEMBER_SIGHTED: Duration = Duration::from_secs(600);

/// The answer to [`RunnerDirectory::find`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Registered under this runner ID.
    Found(u64),
    /// Not registered as of the latest list; ask again after this long.
    NotYet {
        /// When a new list may be taken.
        recheck_after: Duration,
    },
}

#[derive(Debug, Default)]
struct Snapshot {
    /// When the latest list was asked for.
    fetched: Option<Instant>,
    ids: HashMap<String, u64>,
}

/// Per-scope runner-list snapshots and recently removed runners (see the module docs).
#[derive(Debug)]
pub struct RunnerDirectory {
    min_refresh: Duration,
    scopes: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Snapshot>>>>,
    removed: Mutex<HashMap<String, Instant>>,
    sightings: Mutex<Sightings>,
    /// Told the name of each runner a `completed` delivery said is done, once subscribed.
    done: Mutex<Option<futures::channel::mpsc::UnboundedSender<String>>>,
}

/// The latest sighting of each runner name, and when they were last pruned.
#[derive(Debug, Default)]
struct Sightings {
    by_name: HashMap<String, (Sighting, Instant)>,
    pruned: Option<Instant>,
}

impl RunnerDirectory {
    /// A directory that lists a scope's runners at most once per `min_refresh`.
    pub fn new(min_refresh: Duration) -> Self {
        Self {
            min_refresh,
            scopes: Mutex::default(),
            removed: Mutex::default(),
            sightings: Mutex::default(),
            done: Mutex::default(),
        }
    }

    /// The names of the runners that `completed` deliveries say are done, from now on, as
    /// they arrive (one subscriber: a new subscription replaces the previous one).
    pub fn done_runners(&self) -> futures::channel::mpsc::UnboundedReceiver<String> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        *self.done.lock().expect("done-runner channel poisoned") = Some(tx);
        rx
    }

    /// Records that GitHub reported the runner `name` at work (see the module docs). Only for
    /// deliveries whose signature was verified.
    pub fn sighted(&self, name: &str, sighting: Sighting) {
        let now = Instant::now();
        let mut sightings = self.sightings.lock().expect("sightings poisoned");
        // Pruned at most once a minute, so that a busy server does not sweep the map per
        // delivery.
        if sightings
            .pruned
            .is_none_or(|at| now.saturating_duration_since(at) >= Duration::from_secs(60))
        {
            sightings
                .by_name
                .retain(|_, (_, at)| now.saturating_duration_since(*at) < REMEMBER_SIGHTED);
            sightings.pruned = Some(now);
        }
        if let Some((kept, _)) = sightings.by_name.get(name)
            && !runner_lookup::supersedes(&sighting, kept)
        {
            return;
        }
        let done = sighting.job_done;
        sightings.by_name.insert(name.to_owned(), (sighting, now));
        drop(sightings);
        if done && let Some(tx) = &*self.done.lock().expect("done-runner channel poisoned") {
            // A subscriber that ended has nothing to wake.
            let _ = tx.unbounded_send(name.to_owned());
        }
    }

    /// When a `completed` delivery said the runner `name` is done (its latest sighting, in the
    /// last [`REMEMBER_SIGHTED`]), if `vouches` accepts that sighting.
    pub fn completion(
        &self,
        name: &str,
        vouches: impl FnOnce(&Sighting) -> bool,
    ) -> Option<std::time::SystemTime> {
        let sightings = self.sightings.lock().expect("sightings poisoned");
        let (sighting, at) = sightings.by_name.get(name)?;
        (sighting.job_done
            && Instant::now().saturating_duration_since(*at) < REMEMBER_SIGHTED
            && vouches(sighting))
        .then_some(sighting.at)
    }

    /// The runner ID of the latest sighting of `name` (in the last [`REMEMBER_SIGHTED`]), if
    /// `vouches` accepts it.
    pub fn sighting(&self, name: &str, vouches: impl FnOnce(&Sighting) -> bool) -> Option<u64> {
        let sightings = self.sightings.lock().expect("sightings poisoned");
        let (sighting, at) = sightings.by_name.get(name)?;
        (Instant::now().saturating_duration_since(*at) < REMEMBER_SIGHTED && vouches(sighting))
            .then_some(sighting.runner_id)
    }

    /// The runner ID `name` is registered under at `scope`, calling `list` (the scope's
    /// `GET …/runners`) when the snapshot does not know it, `hold` is over (zero) and the
    /// snapshot is older than the minimum refresh interval.
    pub async fn find<Fut>(
        &self,
        scope: &Scope,
        name: &str,
        hold: Duration,
        list: impl FnOnce() -> Fut,
    ) -> Result<Lookup, GitHubError>
    where
        Fut: Future<Output = Result<Vec<Runner>, GitHubError>>,
    {
        let snapshot = self.snapshot(scope);
        let mut snapshot = snapshot.lock().await;
        if let Some(id) = snapshot.ids.get(name) {
            return Ok(Lookup::Found(*id));
        }
        if !hold.is_zero() {
            return Ok(Lookup::NotYet {
                recheck_after: hold,
            });
        }
        let now = Instant::now();
        if let Some(fetched) = snapshot.fetched {
            let age = now.saturating_duration_since(fetched);
            if age < self.min_refresh {
                return Ok(Lookup::NotYet {
                    recheck_after: self.min_refresh - age,
                });
            }
        }
        let runners = list().await?;
        snapshot.ids = runners.into_iter().map(|r| (r.name, r.id.0)).collect();
        // When the list was asked for: it shows every runner registered before then.
        snapshot.fetched = Some(now);
        Ok(match snapshot.ids.get(name) {
            Some(id) => Lookup::Found(*id),
            None => Lookup::NotYet {
                recheck_after: self.min_refresh,
            },
        })
    }

    /// The runner ID `name` is registered under at `scope`, from a list taken after `since`
    /// (listing now unless one started after it). For decisions that must not miss a runner
    /// that registered a moment ago, such as releasing a pod without unregistering it.
    /// Concurrent callers share a list that started after all of their `since`s.
    pub async fn find_listed_after<Fut>(
        &self,
        scope: &Scope,
        name: &str,
        since: Instant,
        list: impl FnOnce() -> Fut,
    ) -> Result<Option<u64>, GitHubError>
    where
        Fut: Future<Output = Result<Vec<Runner>, GitHubError>>,
    {
        let snapshot = self.snapshot(scope);
        let mut snapshot = snapshot.lock().await;
        if let Some(id) = snapshot.ids.get(name) {
            return Ok(Some(*id));
        }
        if snapshot.fetched.is_none_or(|started| started < since) {
            let started = Instant::now();
            let runners = list().await?;
            snapshot.ids = runners.into_iter().map(|r| (r.name, r.id.0)).collect();
            snapshot.fetched = Some(started);
        }
        Ok(snapshot.ids.get(name).copied())
    }

    /// Records that the runner of pod `pod_uid` (registered as `name` at `scope`) is no longer
    /// registered.
    pub async fn removed(&self, scope: &Scope, name: &str, pod_uid: &str) {
        self.snapshot(scope).lock().await.ids.remove(name);
        self.sightings
            .lock()
            .expect("sightings poisoned")
            .by_name
            .remove(name);
        let now = Instant::now();
        let mut removed = self.removed.lock().expect("removed-runner memo poisoned");
        removed.retain(|_, at| now.saturating_duration_since(*at) < REMEMBER_REMOVED);
        removed.insert(pod_uid.to_owned(), now);
    }

    /// Whether the runner of pod `pod_uid` was unregistered in the last [`REMEMBER_REMOVED`].
    pub fn was_removed(&self, pod_uid: &str) -> bool {
        let removed = self.removed.lock().expect("removed-runner memo poisoned");
        removed
            .get(pod_uid)
            .is_some_and(|at| Instant::now().saturating_duration_since(*at) < REMEMBER_REMOVED)
    }

    fn snapshot(&self, scope: &Scope) -> Arc<tokio::sync::Mutex<Snapshot>> {
        self.scopes
            .lock()
            .expect("runner directory poisoned")
            .entry(scope.config_path())
            .or_default()
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Lists a fixed set of runner names (IDs 1, 2, …) and counts the lists.
    #[derive(Debug, Default)]
    struct Listing {
        names: Mutex<Vec<String>>,
        lists: AtomicUsize,
    }

    impl Listing {
        fn register(&self, name: &str) {
            self.names.lock().unwrap().push(name.to_owned());
        }
        fn lists(&self) -> usize {
            self.lists.load(Ordering::SeqCst)
        }
        async fn list(&self) -> Result<Vec<Runner>, GitHubError> {
            self.lists.fetch_add(1, Ordering::SeqCst);
            // A slow list, so concurrent lookups overlap it.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let names = self.names.lock().unwrap().clone();
            Ok(names
                .into_iter()
                .enumerate()
                .map(|(i, name)| {
                    serde_json::from_value(serde_json::json!({
                        "id": i + 1, "name": name, "os": "linux", "status": "online",
                        "busy": false, "labels": []
                    }))
                    .unwrap()
                })
                .collect())
        }
    }

    const MIN_REFRESH: Duration = Duration::from_secs(3);

    fn scope() -> Scope {
        Scope::Repository {
            owner: "octo".into(),
            repo: "app".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_lookups_shares_one_list() {
        let github = Listing::default();
        for i in 0..50 {
            github.register(&format!("pod-{i}"));
        }
        let directory = RunnerDirectory::new(MIN_REFRESH);
        let lookups = (0..50).map(|i| {
            let (directory, github) = (&directory, &github);
            async move {
                directory
                    .find(&scope(), &format!("pod-{i}"), Duration::ZERO, || {
                        github.list()
                    })
                    .await
                    .unwrap()
            }
        });
        let found = futures::future::join_all(lookups).await;
        assert!(found.iter().all(|l| matches!(l, Lookup::Found(_))));
        assert_eq!(github.lists(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_miss_lists_again_only_after_the_minimum_interval() {
        let github = Listing::default();
        let directory = RunnerDirectory::new(MIN_REFRESH);
        let first = directory
            .find(&scope(), "late", Duration::ZERO, || github.list())
            .await
            .unwrap();
        assert_eq!(
            first,
            Lookup::NotYet {
                recheck_after: MIN_REFRESH
            }
        );
        github.register("late");
        tokio::time::advance(Duration::from_secs(1)).await;
        let early = directory
            .find(&scope(), "late", Duration::ZERO, || github.list())
            .await
            .unwrap();
        assert!(matches!(early, Lookup::NotYet { recheck_after } if recheck_after < MIN_REFRESH));
        assert_eq!(github.lists(), 1, "no list within the interval");
        tokio::time::advance(MIN_REFRESH).await;
        let found = directory
            .find(&scope(), "late", Duration::ZERO, || github.list())
            .await
            .unwrap();
        assert_eq!(found, Lookup::Found(1));
        assert_eq!(github.lists(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn removal_is_remembered_per_pod_for_a_while() {
        let github = Listing::default();
        github.register("gone");
        let directory = RunnerDirectory::new(MIN_REFRESH);
        assert_eq!(
            directory
                .find(&scope(), "gone", Duration::ZERO, || github.list())
                .await
                .unwrap(),
            Lookup::Found(1)
        );
        directory.removed(&scope(), "gone", "uid-1").await;
        assert!(directory.was_removed("uid-1"));
        assert!(!directory.was_removed("uid-2"));
        tokio::time::advance(REMEMBER_REMOVED).await;
        assert!(!directory.was_removed("uid-1"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_decision_that_must_not_miss_a_runner_lists_again_unless_a_newer_list_exists() {
        let github = Listing::default();
        let directory = RunnerDirectory::new(MIN_REFRESH);
        assert!(matches!(
            directory
                .find(&scope(), "late", Duration::ZERO, || github.list())
                .await
                .unwrap(),
            Lookup::NotYet { .. }
        ));
        github.register("late");
        tokio::time::advance(Duration::from_millis(10)).await;
        // Within the refresh interval, but the decision needs a list from after "now".
        let since = Instant::now();
        let found = directory
            .find_listed_after(&scope(), "late", since, || github.list())
            .await
            .unwrap();
        assert_eq!(found, Some(1));
        assert_eq!(github.lists(), 2);
        // A list taken after `since` is reused.
        let again = directory
            .find_listed_after(&scope(), "other", since, || github.list())
            .await
            .unwrap();
        assert_eq!(again, None);
        assert_eq!(github.lists(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_runner_within_its_hold_is_not_looked_for_in_a_list() {
        let github = Listing::default();
        github.register("new");
        let directory = RunnerDirectory::new(MIN_REFRESH);
        let held = directory
            .find(&scope(), "new", Duration::from_secs(2), || github.list())
            .await
            .unwrap();
        assert_eq!(
            held,
            Lookup::NotYet {
                recheck_after: Duration::from_secs(2)
            }
        );
        assert_eq!(github.lists(), 0);
        let found = directory
            .find(&scope(), "new", Duration::ZERO, || github.list())
            .await
            .unwrap();
        assert_eq!(found, Lookup::Found(1));
        assert_eq!(github.lists(), 1);
    }

    fn sighting(runner_id: u64) -> Sighting {
        Sighting {
            runner_id,
            repository: "octo/app".into(),
            enterprise: None,
            at: std::time::SystemTime::UNIX_EPOCH,
            job_done: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_runner_said_done_is_told_to_the_subscriber_and_answered_until_forgotten() {
        use futures::StreamExt;
        let directory = RunnerDirectory::new(MIN_REFRESH);
        let mut done = directory.done_runners();
        directory.sighted("a", sighting(42));
        assert_eq!(directory.completion("a", |_| true), None, "only at work");
        let finished = Sighting {
            job_done: true,
            ..sighting(42)
        };
        directory.sighted("a", finished.clone());
        assert_eq!(done.next().await.as_deref(), Some("a"));
        assert_eq!(
            directory.completion("a", |_| true),
            Some(finished.at),
            "done"
        );
        assert_eq!(
            directory.completion("a", |_| false),
            None,
            "not vouched for"
        );
        assert_eq!(
            directory.sighting("a", |_| true),
            Some(42),
            "its ID still known"
        );
        // Its own in_progress, delivered late, does not bring it back to work.
        directory.sighted("a", sighting(42));
        assert!(directory.completion("a", |_| true).is_some());
        tokio::time::advance(REMEMBER_SIGHTED).await;
        assert_eq!(directory.completion("a", |_| true), None, "forgotten");
        assert!(done.try_recv().is_err(), "nothing else was told");
    }

    #[tokio::test(start_paused = true)]
    async fn a_sighting_answers_when_it_vouches_until_forgotten() {
        let directory = RunnerDirectory::new(MIN_REFRESH);
        assert_eq!(directory.sighting("busy", |_| true), None);
        directory.sighted("busy", sighting(42));
        assert_eq!(directory.sighting("busy", |_| true), Some(42));
        assert_eq!(
            directory.sighting("busy", |_| false),
            None,
            "not vouched for"
        );
        assert_eq!(directory.sighting("other", |_| true), None);
        // The latest sighting of a name wins.
        directory.sighted("busy", sighting(43));
        assert_eq!(directory.sighting("busy", |s| s.runner_id == 43), Some(43));
        // A removed runner's sighting goes with it.
        directory.removed(&scope(), "busy", "uid-1").await;
        assert_eq!(directory.sighting("busy", |_| true), None);
        // Sightings expire.
        directory.sighted("late", sighting(44));
        tokio::time::advance(REMEMBER_SIGHTED).await;
        assert_eq!(directory.sighting("late", |_| true), None);
        // and are pruned by a later sighting.
        directory.sighted("later", sighting(45));
        assert_eq!(
            directory.sightings.lock().unwrap().by_name.len(),
            1,
            "the expired sighting was pruned"
        );
    }
}
