//! Requests that an autoscaler observe GitHub again, from the controllers of the sets it
//! scales.
//!
//! A set whose autoscaler counts its jobs (the queued-runs metric) holds a finished runner's
//! place until an observation taken after the runner finished accounts for it (owner sync's
//! `Plan::observe_at`). Nothing else would make that observation before the sync period, so
//! the set asks for it here: [`ObservationRequests::request`] wakes the autoscaler's controller
//! at the time given, and that reconcile, seeing its request due
//! ([`ObservationRequests::take_due`]), records `status.metricsObservedTime` even when the
//! count is unchanged, which wakes the set through its autoscaler watch.
//!
//! Requests live in this process only: a new leader starts without them, and the places they
//! held are released by the release grace or the next observation.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use hangar_api::HorizontalRunnerAutoscaler;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;

type Key = (String, String);

/// See the module docs.
#[derive(Debug)]
pub struct ObservationRequests {
    /// Per autoscaler (namespace, name): the time of the latest observation asked for and not
    /// yet made.
    due: Mutex<HashMap<Key, SystemTime>>,
    wake: mpsc::UnboundedSender<ObjectRef<HorizontalRunnerAutoscaler>>,
    woken: Mutex<Option<mpsc::UnboundedReceiver<ObjectRef<HorizontalRunnerAutoscaler>>>>,
}

impl Default for ObservationRequests {
    fn default() -> Self {
        let (wake, woken) = mpsc::unbounded_channel();
        Self {
            due: Mutex::default(),
            wake,
            woken: Mutex::new(Some(woken)),
        }
    }
}

impl ObservationRequests {
    /// Asks that autoscaler `hra` observe GitHub at `at` (now or later by the clock that said
    /// `now`). A request already pending for `at` or later covers it.
    pub fn request(
        &self,
        hra: ObjectRef<HorizontalRunnerAutoscaler>,
        at: SystemTime,
        now: SystemTime,
    ) {
        let key = (hra.namespace.clone().unwrap_or_default(), hra.name.clone());
        {
            let mut due = self.due.lock().unwrap_or_else(|e| e.into_inner());
            if due.get(&key).is_some_and(|pending| *pending >= at) {
                return;
            }
            due.insert(key, at);
        }
        let wake = self.wake.clone();
        let wait = at.duration_since(now).unwrap_or_default();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = wake.send(hra);
        });
    }

    /// Whether an observation asked of autoscaler `name` in `ns` is due at `now`; if so the
    /// request is served (forgotten).
    pub fn take_due(&self, ns: &str, name: &str, now: SystemTime) -> bool {
        let mut due = self.due.lock().unwrap_or_else(|e| e.into_inner());
        let key = (ns.to_owned(), name.to_owned());
        if due.get(&key).is_some_and(|at| *at <= now) {
            due.remove(&key);
            return true;
        }
        false
    }

    /// The autoscalers to reconcile as their requests fall due; only the first call gets
    /// them (the autoscaler controller).
    pub fn wake_ups(
        &self,
    ) -> Option<mpsc::UnboundedReceiver<ObjectRef<HorizontalRunnerAutoscaler>>> {
        self.woken.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_wakes_its_autoscaler_when_due_and_is_served_once() {
        let requests = ObservationRequests::default();
        let mut woken = requests
            .wake_ups()
            .expect("the first caller gets the wake-ups");
        assert!(requests.wake_ups().is_none());
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let hra = ObjectRef::<HorizontalRunnerAutoscaler>::new("pool").within("ns");
        requests.request(hra.clone(), now + Duration::from_secs(2), now);
        // An earlier request is covered by the pending later one.
        requests.request(hra.clone(), now + Duration::from_secs(1), now);

        assert!(!requests.take_due("ns", "pool", now), "not yet due");
        let started = tokio::time::Instant::now();
        assert_eq!(woken.recv().await, Some(hra));
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert!(woken.try_recv().is_err(), "one wake-up for both requests");

        let later = now + Duration::from_secs(2);
        assert!(!requests.take_due("ns", "other", later));
        assert!(requests.take_due("ns", "pool", later));
        assert!(!requests.take_due("ns", "pool", later), "served once");
    }
}
