//! [`Sim`]: the shared handle to one simulated GitHub — world, clock, faults, hooks.
//!
//! Every change goes through [`Sim::update`], which takes the world lock, first applies the
//! timers that are due (so state is current even without the background ticker), runs the
//! change, renders the webhook events it produced and queues them for the webhook sender, and
//! — if a job was assigned or a session ended — wakes runners that are long-polling.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hangar_github::clock::{Clock, SystemClock};
use jiff::Timestamp;
use tokio::sync::{Notify, mpsc};

use crate::faults::Faults;
use crate::render;
use crate::webhooks::{self, Hook, HookTable, NewHook, Outgoing};
use crate::world::{SimError, World, WorldConfig};

/// Everything a simulator starts with.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// World settings (URLs, GitHub's timings).
    pub world: WorldConfig,
    /// Faults in force from the start.
    pub faults: Faults,
    /// Time source (use a `ManualClock` in tests).
    pub clock: Arc<dyn Clock>,
    /// How often the background ticker applies due timers (real time).
    pub tick_interval: Duration,
    /// Webhook delivery timeout (GitHub: 10 s).
    pub webhook_timeout: Duration,
    /// How many deliveries may be on their way at once. GitHub sends concurrently and does
    /// not promise an order; 1 (the default) sends one at a time in event order, which keeps
    /// tests that read the order deterministic. Benchmarks set more, so that a receiver's
    /// answer time does not become the delivery rate.
    pub webhook_concurrency: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            world: WorldConfig::default(),
            faults: Faults::default(),
            clock: Arc::new(SystemClock),
            tick_interval: Duration::from_secs(1),
            webhook_timeout: Duration::from_secs(10),
            webhook_concurrency: 1,
        }
    }
}

/// A handle to one simulated GitHub. Cheap to clone.
#[derive(Clone)]
pub struct Sim {
    inner: Arc<Inner>,
}

struct Inner {
    world: Mutex<World>,
    faults: Mutex<Faults>,
    rng: Mutex<fastrand::Rng>,
    clock: Arc<dyn Clock>,
    changed: Notify,
    hooks: Mutex<HookTable>,
    outgoing: mpsc::UnboundedSender<Outgoing>,
    outgoing_rx: Mutex<Option<mpsc::UnboundedReceiver<Outgoing>>>,
    tick_interval: Duration,
    webhook_timeout: Duration,
    webhook_concurrency: usize,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("public_url", &self.public_url().as_str())
            .finish_non_exhaustive()
    }
}

impl Sim {
    /// A simulator with an empty world.
    pub fn new(config: SimConfig) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut world_config = config.world;
        world_config.rate_limit = config.faults.primary_budget;
        let seed = world_config.seed;
        Self {
            inner: Arc::new(Inner {
                world: Mutex::new(World::new(world_config)),
                faults: Mutex::new(config.faults),
                rng: Mutex::new(fastrand::Rng::with_seed(seed ^ 0x5eed)),
                clock: config.clock,
                changed: Notify::new(),
                hooks: Mutex::new(HookTable::default()),
                outgoing: tx,
                outgoing_rx: Mutex::new(Some(rx)),
                tick_interval: config.tick_interval,
                webhook_timeout: config.webhook_timeout,
                webhook_concurrency: config.webhook_concurrency.max(1),
            }),
        }
    }

    /// The simulator's current time.
    pub fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// The simulator's clock.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock.clone()
    }

    /// The base URL rendered into JSON and runner configs.
    pub fn public_url(&self) -> url::Url {
        self.inner
            .world
            .lock()
            .expect("world lock")
            .config
            .public_url
            .clone()
    }

    /// Sets the base URL (done by [`crate::serve`] from the bound address unless configured).
    pub fn set_public_url(&self, url: url::Url) {
        self.inner
            .world
            .lock()
            .expect("world lock")
            .config
            .public_url = url;
    }

    /// Applies due timers, runs `change` on the world, sends the webhooks it produced and wakes
    /// long-polling runners.
    pub fn update<R>(&self, change: impl FnOnce(&mut World, Timestamp) -> R) -> R {
        let now = self.now();
        let (result, events, woken) = {
            let mut world = self.inner.world.lock().expect("world lock");
            let before = world.wake_generation;
            world.tick(now);
            let result = change(&mut world, now);
            let events: Vec<_> = world
                .drain_events()
                .into_iter()
                .map(|event| {
                    let payload = render::emitted(&world, &event);
                    (event, payload)
                })
                .collect();
            (result, events, world.wake_generation != before)
        };
        for (event, payload) in events {
            self.dispatch(&event.event, &payload, event.owner.as_deref());
        }
        // Only assignments and ended sessions concern long-polling runners; waking them on
        // every change would make each poll wake itself.
        if woken {
            self.inner.changed.notify_waiters();
        }
        result
    }

    /// Applies due timers (what the background ticker does each interval).
    pub fn tick(&self) {
        self.update(|_, _| ());
    }

    pub(crate) fn changed(&self) -> &Notify {
        &self.inner.changed
    }

    /// Current fault settings.
    pub fn faults(&self) -> Faults {
        self.inner.faults.lock().expect("faults lock").clone()
    }

    /// Replaces the fault settings.
    pub fn set_faults(&self, faults: Faults) {
        let budget = faults.primary_budget;
        *self.inner.faults.lock().expect("faults lock") = faults;
        self.inner
            .world
            .lock()
            .expect("world lock")
            .config
            .rate_limit = budget;
    }

    /// True with probability `rate`.
    pub(crate) fn roll(&self, rate: f64) -> bool {
        rate > 0.0 && self.inner.rng.lock().expect("rng lock").f64() < rate
    }

    pub(crate) fn random_below(&self, bound: u64) -> u64 {
        self.inner
            .rng
            .lock()
            .expect("rng lock")
            .u64(0..bound.max(1))
    }

    pub(crate) fn hooks_mut<R>(&self, f: impl FnOnce(&mut HookTable) -> R) -> R {
        f(&mut self.inner.hooks.lock().expect("hooks lock"))
    }

    /// Subscribes a hook and sends it a `ping`.
    pub fn add_hook(&self, new: NewHook) -> Hook {
        self.install_hook(Hook::from(new))
    }

    /// Adds `hook` as it is (its id assigned) and pings it, as a hook made through the REST
    /// API.
    pub fn install_hook(&self, hook: Hook) -> Hook {
        let hook = self.hooks_mut(|t| t.add(hook));
        let payload = self
            .update(|w, now| crate::render::ping_event(w, hook.id, &hook.url, &hook.events, now));
        self.deliver_to(&hook, "ping", &payload);
        hook
    }

    /// Deletes hook `id` (no more deliveries); whether it existed.
    pub fn remove_hook(&self, id: u64) -> bool {
        self.hooks_mut(|t| t.remove(id))
    }

    /// The hooks there are now.
    pub fn hooks(&self) -> Vec<Hook> {
        self.hooks_mut(|t| t.hooks.clone())
    }

    /// Every delivery so far.
    pub fn deliveries(&self) -> Vec<webhooks::DeliveryRecord> {
        self.hooks_mut(|t| t.deliveries.clone())
    }

    /// Sends a past delivery again with the same delivery id.
    pub fn redeliver(&self, guid: &str) -> Result<(), SimError> {
        let out = self.hooks_mut(|t| {
            let record = t.deliveries.iter().rev().find(|d| d.guid == guid)?;
            let hook = t.hooks.iter().find(|h| h.id == record.hook_id)?.clone();
            Some(Outgoing {
                guid: record.guid.clone(),
                hook,
                event: record.event.clone(),
                body: record.body.clone(),
                redelivery: true,
            })
        });
        let out = out.ok_or(SimError::NotFound)?;
        let _ = self.inner.outgoing.send(out);
        Ok(())
    }

    fn dispatch(&self, event: &str, payload: &serde_json::Value, owner: Option<&str>) {
        let repository = payload["repository"]["full_name"].as_str();
        let hooks = self.hooks_mut(|t| t.matching(event, owner, repository));
        for hook in hooks {
            self.deliver_to(&hook, event, payload);
        }
    }

    fn deliver_to(&self, hook: &Hook, event: &str, payload: &serde_json::Value) {
        let json = serde_json::to_vec(payload).expect("payloads serialize");
        let guid = self.update_quiet(|w| w.guid());
        let out = Outgoing {
            guid,
            hook: hook.clone(),
            event: event.to_owned(),
            body: Arc::new(webhooks::encode_body(hook, &json)),
            redelivery: false,
        };
        let action = payload["action"].as_str().map(str::to_owned);
        self.hooks_mut(|t| t.deliveries.push(webhooks::new_record(&out, action)));
        let _ = self.inner.outgoing.send(out);
    }

    /// Runs `f` on the world without ticking or notifying (for bookkeeping).
    pub(crate) fn update_quiet<R>(&self, f: impl FnOnce(&mut World) -> R) -> R {
        f(&mut self.inner.world.lock().expect("world lock"))
    }

    /// Reads the world (after applying due timers).
    pub fn read<R>(&self, f: impl FnOnce(&World, Timestamp) -> R) -> R {
        self.update(|w, now| f(w, now))
    }

    /// The receiving end of the delivery queue, once: the first caller runs the sender.
    pub(crate) fn take_outgoing(&self) -> Option<mpsc::UnboundedReceiver<Outgoing>> {
        self.inner.outgoing_rx.lock().expect("rx lock").take()
    }

    /// How long a webhook delivery may take.
    pub(crate) fn webhook_timeout(&self) -> Duration {
        self.inner.webhook_timeout
    }

    pub(crate) fn webhook_concurrency(&self) -> usize {
        self.inner.webhook_concurrency
    }

    /// Applies due timers every tick interval (real time), forever.
    pub(crate) async fn run_ticker(self) {
        let mut every = tokio::time::interval(self.inner.tick_interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            self.tick();
        }
    }
}
