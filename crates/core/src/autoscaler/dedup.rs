//! Remembering recent webhook deliveries, to act on each at most once.
//!
//! GitHub may deliver an event more than once (redeliveries, retries after a timeout) and
//! re-running a failed job resends its old `completed` event (ARC #4315), which would release
//! the reservation of the re-run's `queued` and leave it waiting. [`Dedup`] remembers keys — an
//! `X-GitHub-Delivery` id, or a (job id, action) pair — for a window after they were first
//! seen. It is a plain value with `now` passed in; the webhook server owns one behind a lock.
//!
//! Memory is bounded: when `capacity` keys are remembered, the oldest is forgotten early, so a
//! flood can at worst let an old duplicate through, never grow memory.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, SystemTime};

use super::reservations::later;

/// Whether a key was new.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// First time within the window: act on it.
    First,
    /// Already seen within the window: ignore it.
    Duplicate,
}

/// Keys seen within the last `window`, each remembered from its first sighting.
#[derive(Clone, Debug)]
pub struct Dedup<K> {
    window: Duration,
    capacity: usize,
    /// Key → when it is forgotten.
    expiry: HashMap<K, SystemTime>,
    /// Keys in the order they were recorded, with the expiry recorded then; an entry whose
    /// expiry no longer matches `expiry` is stale (the key was forgotten or re-recorded).
    order: VecDeque<(K, SystemTime)>,
}

impl<K: Eq + Hash + Clone> Dedup<K> {
    /// Remembers each key for `window` after its first sighting, and at most `capacity` keys
    /// (at least one).
    pub fn new(window: Duration, capacity: usize) -> Self {
        Dedup {
            window,
            capacity: capacity.max(1),
            expiry: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Records `key` at `now` and says whether it was new. A duplicate does not extend the
    /// window: it is judged from the first sighting.
    pub fn observe(&mut self, key: K, now: SystemTime) -> Seen {
        self.prune(now);
        if self.expiry.contains_key(&key) {
            return Seen::Duplicate;
        }
        while self.expiry.len() >= self.capacity && self.evict_oldest() {}
        let until = later(now, self.window);
        self.expiry.insert(key.clone(), until);
        self.order.push_back((key, until));
        Seen::First
    }

    /// Whether `key` is remembered at `now`, without recording it.
    pub fn contains(&self, key: &K, now: SystemTime) -> bool {
        self.expiry.get(key).is_some_and(|until| *until > now)
    }

    /// Forgets `key`, e.g. when acting on it failed and a redelivery should be accepted.
    pub fn forget(&mut self, key: &K) {
        self.expiry.remove(key);
        // Forgotten keys leave stale entries behind; compact before they dominate.
        if self.order.len() > 2 * self.capacity {
            let expiry = &self.expiry;
            self.order
                .retain(|(k, until)| expiry.get(k).is_some_and(|u| u == until));
        }
    }

    /// Keys remembered (some may have expired since the last call that took `now`).
    pub fn len(&self) -> usize {
        self.expiry.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.expiry.is_empty()
    }

    fn prune(&mut self, now: SystemTime) {
        // Every key has the same window, so recording order is expiry order (unless the clock
        // went back, in which case entries merely live a little longer).
        while let Some((key, until)) = self.order.front() {
            let live = self.expiry.get(key) == Some(until);
            if live && *until > now {
                break;
            }
            if live {
                self.expiry.remove(key);
            }
            self.order.pop_front();
        }
    }

    /// Forgets the oldest live key; false if there was none.
    fn evict_oldest(&mut self) -> bool {
        while let Some((key, until)) = self.order.pop_front() {
            if self.expiry.get(&key) == Some(&until) {
                self.expiry.remove(&key);
                return true;
            }
        }
        false
    }
}
