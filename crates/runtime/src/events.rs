//! Events that count runners ("created 3 runner(s)", "deleted 2 runner(s) whose runners
//! finished: a, b", "registered 2 runner(s) on GitHub: a (id 7), b (id 8)", "unregistering 40
//! runner(s) from GitHub before deleting them (scale-down): ...", "unregistered 40 runner(s)
//! from GitHub: ..."), coalesced per object and reason.
//!
//! Contract: the first such event of an (object, reason) is published at once; those that
//! follow within [`WINDOW`] are added up and published as one event when the window ends
//! ("created 41 runner(s)"), names kept up to [`NAMES_SHOWN`]. A window that published
//! something is followed by another, so under a steady stream an (object, reason) costs one
//! event per window; a window in which nothing came closes, and the next event is published at
//! once again. So a set's event stream says the same thing, and costs the apiserver one write
//! per window instead of one or two per pass — under steady demand a set makes several passes a
//! second, and its events were the largest write per job after the pods themselves.
//!
//! Events are for humans: they are published in the background ([`EventSink`]), and a
//! failure is logged at debug level and dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

/// Publishes events in the background: a bounded queue, drained by one task with at most
/// [`EventSink::IN_FLIGHT`] publications under way. A burst (a thousand Runners retired at
/// once, each with its event) then costs the process a few apiserver connections, not one per
/// event; when the queue is full the event is dropped (logged at debug level).
///
/// A warning goes through kube-runtime's recorder, which remembers each one for six minutes so
/// that a repeated warning becomes a series (`count`) on one Event. A Normal event says once
/// what happened to an object and is not remembered: a controller of thousands of runners
/// would otherwise hold thousands of them.
#[derive(Clone)]
pub struct EventSink {
    queue: mpsc::Sender<(Event, ObjectReference)>,
    /// Taken by the first publication, which starts the drain (a sink can be made outside a
    /// runtime).
    drain: Arc<Mutex<Option<Drain>>>,
}

/// The task that publishes what is queued.
struct Drain {
    queue: mpsc::Receiver<(Event, ObjectReference)>,
    warnings: Recorder,
    client: kube::Client,
    reporter: Reporter,
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink").finish_non_exhaustive()
    }
}

impl EventSink {
    /// Events waiting to be published at most.
    pub const QUEUE: usize = 1024;
    /// Publications under way at most.
    pub const IN_FLIGHT: usize = 4;

    /// Events reported by `reporter`, published through `client`.
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        let (tx, rx) = mpsc::channel(Self::QUEUE);
        Self {
            queue: tx,
            drain: Arc::new(Mutex::new(Some(Drain {
                queue: rx,
                warnings: Recorder::new(client.clone(), reporter.clone()),
                client,
                reporter,
            }))),
        }
    }

    /// Queues `event` about `object`.
    pub fn publish(&self, event: Event, object: ObjectReference) {
        if let Some(drain) = self.drain.lock().unwrap_or_else(|e| e.into_inner()).take() {
            tokio::spawn(drain.run());
        }
        if let Err(e) = self.queue.try_send((event, object)) {
            tracing::debug!(error = %e, "event dropped");
        }
    }
}

impl Drain {
    async fn run(self) {
        let Drain {
            queue,
            warnings,
            client,
            reporter,
        } = self;
        let queued = futures::stream::unfold(queue, |mut queue| async move {
            queue.recv().await.map(|item| (item, queue))
        });
        queued
            .for_each_concurrent(EventSink::IN_FLIGHT, |(event, object)| {
                let recorder = match event.type_ {
                    EventType::Warning => warnings.clone(),
                    EventType::Normal => Recorder::new(client.clone(), reporter.clone()),
                };
                async move {
                    if let Err(e) = recorder.publish(&event, &object).await {
                        tracing::debug!(error = %e, "could not publish event");
                    }
                }
            })
            .await;
    }
}

/// How long counts of one (object, reason) are added up before they are published.
pub const WINDOW: Duration = Duration::from_secs(5);

/// How many runner names an event lists; the count says how many there were.
pub const NAMES_SHOWN: usize = 5;

/// What one event says: `{verb} {count} runner(s)[ {why}][: names]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerCount {
    /// `created`, `deleted`, `registered`.
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
    sink: EventSink,
    open: Arc<Mutex<HashMap<Key, Open>>>,
}

impl std::fmt::Debug for RunnerEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerEvents").finish_non_exhaustive()
    }
}

impl RunnerEvents {
    /// Events go out through `sink`.
    pub fn new(sink: EventSink) -> Self {
        Self {
            sink,
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
        send(&self.sink, &object, reason, what.note());
        // At each window's end, publish what accumulated in it and open the next, or close.
        let (sink, open) = (self.sink.clone(), self.open.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(WINDOW).await;
                let pending = {
                    let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
                    let pending = open.get_mut(&key).and_then(|w| w.pending.take());
                    if pending.is_none() {
                        open.remove(&key);
                    }
                    pending
                };
                match pending {
                    Some(pending) => send(&sink, &object, reason, pending.note()),
                    None => break,
                }
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
fn send(sink: &EventSink, object: &ObjectReference, reason: &'static str, note: String) {
    let event = Event {
        type_: EventType::Normal,
        reason: reason.to_owned(),
        note: Some(note),
        action: reason.to_owned(),
        secondary: None,
    };
    sink.publish(event, object.clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the fake apiserver saw.
    struct Seen {
        /// The method of each event write.
        methods: Arc<Mutex<Vec<String>>>,
        /// The most requests it had under way at once.
        most: Arc<std::sync::atomic::AtomicUsize>,
        /// Each written event's note.
        notes: Arc<Mutex<Vec<String>>>,
    }

    /// An apiserver that answers every event write after a moment, recording what it saw.
    fn apiserver() -> (kube::Client, Seen) {
        use http_body_util::BodyExt;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let seen = Seen {
            methods: Arc::default(),
            most: Arc::default(),
            notes: Arc::default(),
        };
        let busy = Arc::new(AtomicUsize::new(0));
        let (s, b, m, n) = (
            seen.methods.clone(),
            busy.clone(),
            seen.most.clone(),
            seen.notes.clone(),
        );
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let (methods, busy, most, notes) = (s.clone(), b.clone(), m.clone(), n.clone());
            async move {
                let now = busy.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let (parts, body) = request.into_parts();
                let body = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                if let Ok(event) = serde_json::from_slice::<serde_json::Value>(&body)
                    && let Some(note) = event["note"].as_str()
                {
                    notes.lock().unwrap().push(note.to_owned());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                methods.lock().unwrap().push(parts.method.to_string());
                busy.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(201)
                        .body(r#"{"metadata":{"name":"e"}}"#.to_owned())
                        .unwrap(),
                )
            }
        });
        (kube::Client::new(service, "default"), seen)
    }

    fn event(type_: EventType) -> Event {
        Event {
            type_,
            reason: "R".into(),
            note: Some("n".into()),
            action: "R".into(),
            secondary: None,
        }
    }

    fn object() -> ObjectReference {
        ObjectReference {
            kind: Some("Runner".into()),
            namespace: Some("ns".into()),
            name: Some("r".into()),
            ..ObjectReference::default()
        }
    }

    async fn published(seen: &Mutex<Vec<String>>, n: usize) -> Vec<String> {
        for _ in 0..500 {
            if seen.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        seen.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn a_burst_of_events_is_published_a_few_at_a_time() {
        let (client, seen) = apiserver();
        let sink = EventSink::new(client, Reporter::from("hangar"));
        for _ in 0..40 {
            sink.publish(event(EventType::Normal), object());
        }
        assert_eq!(published(&seen.methods, 40).await.len(), 40);
        let most = seen.most.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            (1..=EventSink::IN_FLIGHT).contains(&most),
            "{most} publications at once"
        );
    }

    #[tokio::test]
    async fn a_repeated_warning_becomes_a_series_and_a_normal_event_is_not_remembered() {
        let (client, seen) = apiserver();
        let sink = EventSink::new(client, Reporter::from("hangar"));
        for type_ in [EventType::Warning, EventType::Warning] {
            sink.publish(event(type_), object());
            // One after the other: the series needs the first one's answer.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(published(&seen.methods, 2).await, ["POST", "PATCH"]);
        for type_ in [EventType::Normal, EventType::Normal] {
            sink.publish(event(type_), object());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            published(&seen.methods, 4).await,
            ["POST", "PATCH", "POST", "POST"]
        );
    }

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

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_costs_one_event_per_window_and_a_quiet_window_closes() {
        let (client, seen) = apiserver();
        let events = RunnerEvents::new(EventSink::new(client, Reporter::from("hangar")));
        let second = Duration::from_secs(1);
        let deleted = |name: &str| count(1, &[name]);
        // (seconds from the start, runner deleted then)
        let stream = [(0, "a"), (1, "b"), (2, "c"), (6, "d"), (7, "e"), (16, "f")];
        let start = tokio::time::Instant::now();
        for (at, name) in stream {
            tokio::time::sleep_until(start + second * at).await;
            events.publish(object(), "Deleted", deleted(name));
        }
        tokio::time::sleep(WINDOW * 3).await;
        assert_eq!(
            *seen.notes.lock().unwrap(),
            [
                // The first at once; b and c when the first window ends (5 s); d and e when the
                // window that followed it ends (10 s); nothing in the next (15 s): it closes, so
                // f goes out at once; nothing follows it.
                "deleted 1 runner(s) whose runners finished: a",
                "deleted 2 runner(s) whose runners finished: b, c",
                "deleted 2 runner(s) whose runners finished: d, e",
                "deleted 1 runner(s) whose runners finished: f",
            ]
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
