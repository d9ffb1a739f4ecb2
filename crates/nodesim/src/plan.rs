//! What the kubelet does next for a pod: which containers to start or stop, as a pure function
//! of the spec, the runtime record and the clock (the kubelet's `computePodActions`, reduced
//! to what a simulator needs).
//!
//! - Init containers run one at a time, in order; a native sidecar must be running before the
//!   next init container starts, and keeps running.
//! - Regular containers start together once initialization is done.
//! - Exited containers restart per the pod's `restartPolicy` (init containers: unless `Never`;
//!   native sidecars: always), not before their crash back-off allows.
//! - When no regular container will run again, native sidecars are stopped and the pod is
//!   finished.
//! - On deletion, regular (and init) containers are stopped first, then sidecars in reverse
//!   order, one at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::PodSpec;
use tokio::time::Instant;

use crate::status::{PodRecord, RunState, Slot, is_sidecar, restart_policy};

/// What the planner looks at.
#[derive(Debug)]
pub struct Observed<'a> {
    /// The pod's spec.
    pub spec: &'a PodSpec,
    /// The runtime record.
    pub record: &'a PodRecord,
    /// Containers with a live process (being created, or running).
    pub alive: &'a BTreeSet<Slot>,
    /// Live containers that were already sent SIGTERM.
    pub stopping: &'a BTreeSet<Slot>,
    /// For exited containers: the earliest restart allowed by their back-off.
    pub restart_at: &'a BTreeMap<Slot, Instant>,
    /// The pod has a deletion timestamp.
    pub deleting: bool,
    /// The sandbox (network, volumes, image pulls) is ready.
    pub sandbox_ready: bool,
    /// The current time.
    pub now: Instant,
}

/// What to do now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Create and start these containers.
    pub start: Vec<Slot>,
    /// Send SIGTERM to these.
    pub stop: Vec<Slot>,
    /// These exited and wait for their back-off (`CrashLoopBackOff`) until the given time.
    pub backing_off: Vec<(Slot, Instant)>,
    /// No container will run again: the pod is done.
    pub finished: bool,
    /// Plan again at this time even if nothing happens.
    pub wake_at: Option<Instant>,
}

/// How an exited container ended, if it did.
fn exit_code(record: &PodRecord, slot: Slot) -> Option<i32> {
    match &record.get(slot)?.state {
        RunState::Terminated(t) => Some(t.exit_code),
        RunState::Waiting { .. } => record
            .get(slot)?
            .last_termination
            .as_ref()
            .map(|t| t.exit_code),
        RunState::Running { .. } => None,
    }
}

/// Whether the container ever ran (it is running, or has exited at least once).
fn ever_ran(record: &PodRecord, slot: Slot) -> bool {
    record.get(slot).is_some_and(|r| {
        !matches!(r.state, RunState::Waiting { .. }) || r.last_termination.is_some()
    })
}

/// The next actions for a pod.
pub fn next(o: &Observed<'_>) -> Plan {
    let mut plan = Plan::default();
    if o.record.terminal {
        return plan;
    }
    if o.deleting {
        return stop_all(o);
    }
    if !o.sandbox_ready {
        return plan;
    }
    let policy = restart_policy(o.spec);
    let restarts = |slot: Slot| {
        let code = exit_code(o.record, slot).unwrap_or_default();
        match policy {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => true,
        }
    };

    // Once no regular container will run again, sidecars are stopped, not restarted.
    let regular_done = (0..o.spec.containers.len())
        .map(Slot::Regular)
        .all(|slot| !o.alive.contains(&slot) && ever_ran(o.record, slot) && !restarts(slot));
    if regular_done {
        let sidecars = alive_sidecars(o);
        plan.finished = sidecars.is_empty();
        plan.stop = sidecars
            .into_iter()
            .filter(|s| !o.stopping.contains(s))
            .collect();
        return plan;
    }

    let init_specs = o.spec.init_containers.as_deref().unwrap_or_default();

    // Init containers, in order; stop at the first one that is not done.
    for (i, c) in init_specs.iter().enumerate() {
        let slot = Slot::Init(i);
        let running = o.record.get(slot).is_some_and(|r| r.state.is_running());
        if o.alive.contains(&slot) {
            if is_sidecar(c) && running {
                continue;
            }
            return plan;
        }
        let sidecar = is_sidecar(c);
        match exit_code(o.record, slot) {
            None if !ever_ran(o.record, slot) => {
                plan.start.push(slot);
                return plan;
            }
            Some(0) if !sidecar => continue,
            Some(_) if !sidecar && policy == "Never" => {
                plan.finished = true;
                return plan;
            }
            _ => {
                restart(o, slot, &mut plan);
                return plan;
            }
        }
    }

    // Regular containers.
    for i in 0..o.spec.containers.len() {
        let slot = Slot::Regular(i);
        if o.alive.contains(&slot) {
            continue;
        }
        if !ever_ran(o.record, slot) {
            plan.start.push(slot);
        } else if restarts(slot) {
            restart(o, slot, &mut plan);
        }
    }
    plan
}

fn restart(o: &Observed<'_>, slot: Slot, plan: &mut Plan) {
    match o.restart_at.get(&slot) {
        Some(at) if *at > o.now => {
            plan.backing_off.push((slot, *at));
            plan.wake_at = Some(plan.wake_at.map_or(*at, |w| w.min(*at)));
        }
        _ => plan.start.push(slot),
    }
}

/// Native sidecars with a live process, last first.
fn alive_sidecars(o: &Observed<'_>) -> Vec<Slot> {
    let init_specs = o.spec.init_containers.as_deref().unwrap_or_default();
    let mut slots: Vec<Slot> = init_specs
        .iter()
        .enumerate()
        .filter(|(i, c)| is_sidecar(c) && o.alive.contains(&Slot::Init(*i)))
        .map(|(i, _)| Slot::Init(i))
        .collect();
    slots.reverse();
    slots
}

fn stop_all(o: &Observed<'_>) -> Plan {
    let mut plan = Plan::default();
    let sidecars = alive_sidecars(o);
    let others: Vec<Slot> = o
        .alive
        .iter()
        .filter(|s| !sidecars.contains(s))
        .copied()
        .collect();
    let next: Vec<Slot> = if !others.is_empty() {
        others
    } else {
        // Sidecars stop in reverse order, each after the one started after it.
        sidecars.into_iter().take(1).collect()
    };
    if next.is_empty() {
        plan.finished = true;
    }
    plan.stop = next
        .into_iter()
        .filter(|s| !o.stopping.contains(s))
        .collect();
    plan
}

/// The kubelet's crash-loop back-off for one container: the first restart is immediate, then
/// each waits twice as long as the previous one (from `initial` up to `max`), and a container
/// that ran cleanly for twice `max` starts over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    delay: Option<Duration>,
    last_exit: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    /// No exits yet.
    pub fn new() -> Self {
        Self {
            delay: None,
            last_exit: None,
        }
    }

    /// Records an exit at `now`; returns the earliest time the container may restart.
    pub fn exited(&mut self, now: Instant, initial: Duration, max: Duration) -> Instant {
        let expired = self
            .last_exit
            .is_some_and(|last| now.saturating_duration_since(last) > max * 2);
        self.last_exit = Some(now);
        match self.delay {
            Some(delay) if !expired => {
                self.delay = Some((delay * 2).min(max));
                now + delay
            }
            _ => {
                self.delay = Some(initial.min(max));
                now
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Container;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::status::{ContainerRecord, Termination};

    fn spec(policy: &str, init: &[&str], names: &[&str]) -> PodSpec {
        let container = |name: &str| Container {
            name: name.trim_end_matches('+').to_owned(),
            restart_policy: name.ends_with('+').then(|| "Always".to_owned()),
            ..Container::default()
        };
        PodSpec {
            restart_policy: Some(policy.to_owned()),
            init_containers: Some(init.iter().map(|n| container(n)).collect()),
            containers: names.iter().map(|n| container(n)).collect(),
            ..PodSpec::default()
        }
    }

    fn record(spec: &PodSpec) -> PodRecord {
        PodRecord::new(spec, "10.0.0.1", Timestamp::UNIX_EPOCH)
    }

    fn running() -> RunState {
        RunState::Running {
            id: "x".to_owned(),
            started_at: Timestamp::UNIX_EPOCH,
            ready: true,
        }
    }

    fn exited(code: i32) -> RunState {
        RunState::Terminated(Termination {
            id: Some("x".to_owned()),
            exit_code: code,
            reason: String::new(),
            message: None,
            started_at: None,
            finished_at: Timestamp::UNIX_EPOCH,
        })
    }

    struct Case {
        spec: PodSpec,
        record: PodRecord,
        alive: BTreeSet<Slot>,
        stopping: BTreeSet<Slot>,
        restart_at: BTreeMap<Slot, Instant>,
        deleting: bool,
        now: Instant,
    }

    impl Case {
        fn new(policy: &str, init: &[&str], names: &[&str]) -> Self {
            let spec = spec(policy, init, names);
            Self {
                record: record(&spec),
                spec,
                alive: BTreeSet::new(),
                stopping: BTreeSet::new(),
                restart_at: BTreeMap::new(),
                deleting: false,
                now: Instant::now(),
            }
        }

        fn set(mut self, slot: Slot, state: RunState) -> Self {
            if state.is_running() {
                self.alive.insert(slot);
            }
            let r: &mut ContainerRecord = self.record.get_mut(slot).unwrap();
            r.state = state;
            self
        }

        fn plan(&self) -> Plan {
            next(&Observed {
                spec: &self.spec,
                record: &self.record,
                alive: &self.alive,
                stopping: &self.stopping,
                restart_at: &self.restart_at,
                deleting: self.deleting,
                sandbox_ready: true,
                now: self.now,
            })
        }
    }

    use Slot::{Init, Regular};

    #[test]
    fn regular_containers_start_together() {
        let plan = Case::new("Always", &[], &["runner", "docker"]).plan();
        assert_eq!(plan.start, [Regular(0), Regular(1)]);
    }

    #[test]
    fn nothing_starts_before_the_sandbox() {
        let case = Case::new("Always", &[], &["a"]);
        let plan = next(&Observed {
            sandbox_ready: false,
            spec: &case.spec,
            record: &case.record,
            alive: &case.alive,
            stopping: &case.stopping,
            restart_at: &case.restart_at,
            deleting: false,
            now: case.now,
        });
        assert_eq!(plan, Plan::default());
    }

    #[test]
    fn init_containers_run_one_at_a_time() {
        let case = Case::new("Always", &["a", "b"], &["main"]);
        assert_eq!(case.plan().start, [Init(0)]);
        let case = case.set(Init(0), running());
        assert_eq!(case.plan(), Plan::default(), "waits for the running one");
        let mut case = case.set(Init(0), exited(0));
        case.alive.clear();
        assert_eq!(case.plan().start, [Init(1)]);
        let mut case = case.set(Init(1), exited(0));
        case.alive.clear();
        assert_eq!(case.plan().start, [Regular(0)]);
    }

    #[test]
    fn a_running_sidecar_lets_initialization_continue() {
        let case = Case::new("Never", &["proxy+", "setup"], &["main"]).set(Init(0), running());
        assert_eq!(case.plan().start, [Init(1)]);
    }

    #[test]
    fn failed_init_container_fails_the_pod_under_never() {
        let case = Case::new("Never", &["setup"], &["main"]).set(Init(0), exited(1));
        assert!(case.plan().finished);
        let case = Case::new("OnFailure", &["setup"], &["main"]).set(Init(0), exited(1));
        assert_eq!(case.plan().start, [Init(0)], "restarted");
    }

    #[test]
    fn restart_policy_decides_restarts() {
        let rows = [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 1, true),
            ("Never", 0, false),
            ("Never", 137, false),
        ];
        for (policy, code, restarts) in rows {
            let plan = Case::new(policy, &[], &["a"])
                .set(Regular(0), exited(code))
                .plan();
            assert_eq!(plan.start == [Regular(0)], restarts, "{policy} {code}");
            assert_eq!(plan.finished, !restarts, "{policy} {code}");
        }
    }

    #[test]
    fn restarts_wait_for_the_back_off() {
        let mut case = Case::new("Always", &[], &["a"]).set(Regular(0), exited(1));
        let at = case.now + Duration::from_secs(10);
        case.restart_at.insert(Regular(0), at);
        let plan = case.plan();
        assert_eq!(plan.start, []);
        assert_eq!(plan.backing_off, [(Regular(0), at)]);
        assert_eq!(plan.wake_at, Some(at));
        case.now = at;
        assert_eq!(case.plan().start, [Regular(0)]);
    }

    #[test]
    fn an_unneeded_sidecar_is_stopped_then_the_pod_finishes() {
        let case = Case::new("Never", &["proxy+"], &["main"])
            .set(Init(0), running())
            .set(Regular(0), exited(0));
        assert_eq!(case.plan().stop, [Init(0)]);
        let mut case = case;
        case.stopping.insert(Init(0));
        assert_eq!(case.plan().stop, [], "not signalled twice");
        let mut case = case.set(Init(0), exited(0));
        case.alive.clear();
        assert_eq!(
            case.plan(),
            Plan {
                finished: true,
                ..Plan::default()
            }
        );
    }

    #[test]
    fn a_regular_sidecar_keeps_the_pod_running_under_never() {
        let plan = Case::new("Never", &[], &["runner", "docker"])
            .set(Regular(0), exited(0))
            .set(Regular(1), running())
            .plan();
        assert_eq!(plan, Plan::default());
    }

    #[test]
    fn deletion_stops_containers_before_sidecars_in_reverse_order() {
        let mut case = Case::new("Always", &["a+", "b+"], &["main"])
            .set(Init(0), running())
            .set(Init(1), running())
            .set(Regular(0), running());
        case.deleting = true;
        assert_eq!(case.plan().stop, [Regular(0)]);
        case.alive.remove(&Regular(0));
        assert_eq!(case.plan().stop, [Init(1)]);
        case.alive.remove(&Init(1));
        assert_eq!(case.plan().stop, [Init(0)]);
        case.alive.remove(&Init(0));
        assert!(case.plan().finished);
    }

    #[test]
    fn back_off_doubles_up_to_the_cap_and_resets_after_quiet() {
        let (initial, max) = (Duration::from_secs(10), Duration::from_secs(40));
        let t0 = Instant::now();
        let mut b = Backoff::new();
        let delays: Vec<Duration> = (0..5u32)
            .map(|i| {
                let now = t0 + Duration::from_secs(u64::from(i));
                b.exited(now, initial, max) - now
            })
            .collect();
        let secs = |s| Duration::from_secs(s);
        assert_eq!(delays, [secs(0), secs(10), secs(20), secs(40), secs(40)]);
        let later = t0 + Duration::from_secs(1000);
        assert_eq!(b.exited(later, initial, max), later, "reset after 2 x max");
    }
}
