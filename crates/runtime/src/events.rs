//! Events that count runners ("created 3 runner(s)", "deleted 2 runner(s) whose runners
//! finished: a, b"), coalesced per object and reason.
//!
//! Contract: the first such event of an (object, reason) is published at once; those that
//! follow within [`WINDOW`] are added up and published as one event when the window ends
//! ("created 41 runner(s)"), names kept up to [`NAMES_SHOWN`]. So a set's event stream says
//! the same thing, and costs the apiserver at most two writes per window instead of one or two
//! per pass — under steady demand a set makes several passes a second, and its events were
//! the largest write per job after the pods themselves.
//!
//! Events are for humans: they are published in the background, and a failure is logged at
//! debug level and dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

/// How long counts of one (object, reason) are added up before they are published.
pub const WINDOW: Duration = Duration::from_secs(5);

/// How many runner names an event lists; the count says how many there were.
pub const NAMES_SHOWN: usize = 5;

/// What one event says: `{verb} {count} runner(s)[ {why}][: names]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerCount {
    /// `created`, `deleted`.
    pub verb: &'static str,
    /// Why, e.g. `whose runners finished`; empty for none.
    pub why: &'static str,
    /// How many runners.
    pub count: usize,
    /// Some of their names (the first [`NAMES_SHOWN`] are shown).
    pub names: Vec<String>,
}

impl RunnerCount {
    /// The event's note.
    pub fn note(&self) -> String {
        let mut note = format!("{} {} runner(s)", self.verb, self.count);
        if !self.why.is_empty() {
            note.push(' ');
            note.push_str(self.why);
        }
        if !self.names.is_empty() {
            note.push_str(": ");
            note.push_str(&self.names[..self.names.len().min(NAMES_SHOWN)].join(", "));
            if self.count > NAMES_SHOWN {
                note.push_str(", ...");
            }
        }
        note
    }

    /// Adds `other` (same verb and why) to this count.
    fn add(&mut self, other: RunnerCount) {
        self.count += other.count;
        let room = NAMES_SHOWN.saturating_sub(self.names.len());
        self.names.extend(other.names.into_iter().take(room));
    }
}

/// (namespace, kind, name, reason, why): what is coalesced together.
type Key = (String, String, String, &'static str, &'static str);

/// An open window: what accumulated since its first event was published.
struct Open {
    pending: Option<RunnerCount>,
}

/// Publishes [`RunnerCount`] events, coalesced (see the module documentation).
#[derive(Clone)]
pub struct RunnerEvents {
    recorder: Recorder,
    open: Arc<Mutex<HashMap<Key, Open>>>,
}

impl std::fmt::Debug for RunnerEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerEvents").finish_non_exhaustive()
    }
}

impl RunnerEvents {
    /// Events go out through `recorder`.
    pub fn new(recorder: Recorder) -> Self {
        Self {
            recorder,
            open: Arc::default(),
        }
    }

    /// Publishes `what` about `object` now, or adds it to the (object, reason) window open.
    pub fn publish(&self, object: ObjectReference, reason: &'static str, what: RunnerCount) {
        let key: Key = (
            object.namespace.clone().unwrap_or_default(),
            object.kind.clone().unwrap_or_default(),
            object.name.clone().unwrap_or_default(),
            reason,
            what.why,
        );
        {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(window) = open.get_mut(&key) {
                match &mut window.pending {
                    Some(pending) => pending.add(what),
                    None => window.pending = Some(what),
                }
                return;
            }
            open.insert(key.clone(), Open { pending: None });
        }
        send(&self.recorder, &object, reason, what.note());
        // Close the window when it ends, publishing what accumulated in it.
        let (recorder, open) = (self.recorder.clone(), self.open.clone());
        tokio::spawn(async move {
            tokio::time::sleep(WINDOW).await;
            let pending = open
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key)
                .and_then(|w| w.pending);
            if let Some(pending) = pending {
                send(&recorder, &object, reason, pending.note());
            }
        });
    }
}

/// Remembers what was last said about an object under a reason, so that a warning tied to the
/// object's spec is published once per change even when two reconciles read the object before
/// the first one's status write reaches the cache. At most [`SaidOnce::CAPACITY`] entries are
/// kept; beyond that the memory starts over, at worst repeating a warning once.
#[derive(Debug, Default)]
pub struct SaidOnce {
    said: Mutex<HashMap<(String, &'static str), String>>,
}

impl SaidOnce {
    /// Entries kept at most.
    pub const CAPACITY: usize = 10_000;

    /// Whether `message` is new for (`uid`, `reason`); it is remembered either way.
    pub fn first(&self, uid: &str, reason: &'static str, message: &str) -> bool {
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        let key = (uid.to_owned(), reason);
        if said.get(&key).is_some_and(|m| m == message) {
            return false;
        }
        if said.len() >= Self::CAPACITY {
            said.clear();
        }
        said.insert(key, message.to_owned());
        true
    }

    /// Forgets what was said about (`uid`, `reason`), e.g. once the problem is gone.
    pub fn forget(&self, uid: &str, reason: &'static str) {
        self.said
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(uid.to_owned(), reason));
    }
}

/// Publishes a Normal event in the background.
fn send(recorder: &Recorder, object: &ObjectReference, reason: &'static str, note: String) {
    let ev = Event {
        type_: EventType::Normal,
        reason: reason.to_owned(),
        note: Some(note),
        action: reason.to_owned(),
        secondary: None,
    };
    let (recorder, object) = (recorder.clone(), object.clone());
    tokio::spawn(async move {
        if let Err(e) = recorder.publish(&ev, &object).await {
            tracing::debug!(error = %e, "could not publish event");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_said_once_until_it_changes_or_is_forgotten() {
        let said = SaidOnce::default();
        assert!(said.first("uid-1", "R", "a"));
        assert!(!said.first("uid-1", "R", "a"));
        assert!(said.first("uid-2", "R", "a"), "another object");
        assert!(said.first("uid-1", "S", "a"), "another reason");
        assert!(said.first("uid-1", "R", "b"), "a new message");
        said.forget("uid-1", "R");
        assert!(said.first("uid-1", "R", "b"));
    }

    fn count(count: usize, names: &[&str]) -> RunnerCount {
        RunnerCount {
            verb: "deleted",
            why: "whose runners finished",
            count,
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    #[test]
    fn notes_read_like_the_uncoalesced_ones() {
        assert_eq!(
            RunnerCount {
                verb: "created",
                why: "",
                count: 3,
                names: vec![]
            }
            .note(),
            "created 3 runner(s)"
        );
        assert_eq!(
            count(2, &["a", "b"]).note(),
            "deleted 2 runner(s) whose runners finished: a, b"
        );
    }

    #[test]
    fn added_counts_sum_and_keep_the_first_names() {
        let mut total = count(2, &["a", "b"]);
        total.add(count(3, &["c", "d", "e"]));
        total.add(count(1, &["f"]));
        assert_eq!(total.count, 6);
        assert_eq!(
            total.note(),
            "deleted 6 runner(s) whose runners finished: a, b, c, d, e, ..."
        );
    }
}
