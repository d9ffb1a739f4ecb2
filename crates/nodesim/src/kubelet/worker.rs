//! A pod worker: one pod's life on a simulated node, from admission to deletion.
//!
//! The loop is observe → plan → act → report: the worker keeps the runtime record of the pod
//! (sandbox, container states), asks [`plan::next`] what to start or stop, spawns container
//! runs and delivers SIGTERMs, and submits the status [`status::pod_status`] computes. It
//! wakes on a newer pod version (deletion, fault annotations), on container events, on
//! commands from the simulator's API, and on timers (sandbox ready, back-off over, grace
//! period over).
//!
//! Deletion follows the kubelet: on a deletion timestamp, running containers get SIGTERM with
//! the pod's grace period (at least `min_termination_grace`); whatever still runs when it ends
//! is killed (exit 137); then the final status is written and the pod deleted with grace 0 and
//! a UID precondition.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use super::container::{Event, EventKind, Run};
use super::{Command, IpLease, NodeRuntime};
use crate::annotations::{FAULT_PREFIX, START_DELAY, parse_duration};
use crate::plan::{self, Backoff, Observed};
use crate::program::{ContainerKind, ContainerProgram, Exit, ProgramSpec, StartFailure, reasons};
use crate::status::{self, PodRecord, RunState, Slot, Termination, is_sidecar, phases};
use crate::writer::PodWrite;

/// A container with a live task.
#[derive(Debug)]
struct Live {
    run: u64,
    term: watch::Sender<Option<Duration>>,
    abort: AbortHandle,
    /// When SIGTERM was sent: the time it will be killed.
    kill_at: Option<Instant>,
}

pub(super) struct PodWorker {
    node: Arc<NodeRuntime>,
    pod: Arc<Pod>,
    uid: String,
    updates: watch::Receiver<Arc<Pod>>,
    commands: mpsc::UnboundedReceiver<Command>,
    events_tx: mpsc::UnboundedSender<Event>,
    events: mpsc::UnboundedReceiver<Event>,
    containers: JoinSet<()>,

    record: PodRecord,
    live: BTreeMap<Slot, Live>,
    started_once: BTreeSet<Slot>,
    backoff: BTreeMap<Slot, Backoff>,
    restart_at: BTreeMap<Slot, Instant>,
    sandbox_at: Instant,
    ip: Option<IpLease>,
    /// When the deletion's grace period ends.
    deadline: Option<Instant>,
    wake_at: Option<Instant>,
    /// Fault annotations already applied, by container.
    faults: BTreeMap<String, String>,
    reported: Option<PodStatus>,
    delete_sent: bool,
    /// The pod was terminal before this worker saw it: leave its status alone.
    adopted_terminal: bool,
    runs: u64,
}

impl PodWorker {
    pub fn new(
        node: Arc<NodeRuntime>,
        pod: Arc<Pod>,
        updates: watch::Receiver<Arc<Pod>>,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> Self {
        let spec = pod.spec.clone().unwrap_or_default();
        let record = PodRecord::new(&spec, node.id.host_ip.clone(), Timestamp::now());
        let delay = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(START_DELAY))
            .and_then(|d| parse_duration(d).ok())
            .unwrap_or(node.shared.config.timing.start_delay);
        let adopted_terminal =
            phases::is_terminal(pod.status.as_ref().and_then(|s| s.phase.as_deref()));
        let (events_tx, events) = mpsc::unbounded_channel();
        Self {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            node,
            pod,
            updates,
            commands,
            events_tx,
            events,
            containers: JoinSet::new(),
            record,
            live: BTreeMap::new(),
            started_once: BTreeSet::new(),
            backoff: BTreeMap::new(),
            restart_at: BTreeMap::new(),
            sandbox_at: Instant::now() + delay,
            ip: None,
            deadline: None,
            wake_at: None,
            faults: BTreeMap::new(),
            reported: None,
            delete_sent: false,
            adopted_terminal,
            runs: 0,
        }
    }

    fn pod_ref(&self) -> String {
        format!(
            "{}/{}",
            self.pod.metadata.namespace.as_deref().unwrap_or_default(),
            self.pod.metadata.name.as_deref().unwrap_or_default()
        )
    }

    /// Runs until the pod is gone (the watcher then drops this task).
    pub async fn run(mut self) {
        loop {
            self.sync();
            let wake = self.next_wake();
            tokio::select! {
                changed = self.updates.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.pod = self.updates.borrow_and_update().clone();
                }
                Some(event) = self.events.recv() => self.on_event(event),
                Some(command) = self.commands.recv() => self.on_command(command),
                () = sleep_until(wake) => {}
            }
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let sandbox = (self.ip.is_none() && !self.record.terminal).then_some(self.sandbox_at);
        let kills = self.live.values().filter_map(|l| l.kill_at);
        sandbox
            .into_iter()
            .chain(self.wake_at)
            .chain(self.deadline.filter(|_| !self.live.is_empty()))
            .chain(kills)
            .min()
    }

    fn spec_container(&self, slot: Slot) -> Option<(Container, ContainerKind)> {
        let spec = self.pod.spec.as_ref()?;
        match slot {
            Slot::Init(i) => {
                let c = spec.init_containers.as_ref()?.get(i)?;
                let kind = if is_sidecar(c) {
                    ContainerKind::Sidecar
                } else {
                    ContainerKind::Init
                };
                Some((c.clone(), kind))
            }
            Slot::Regular(i) => Some((spec.containers.get(i)?.clone(), ContainerKind::Regular)),
        }
    }

    fn slot_of(&self, name: &str) -> Option<Slot> {
        self.record
            .slots()
            .find(|(_, r)| r.name == name)
            .map(|(slot, _)| slot)
    }

    /// Observe, plan, act, report.
    fn sync(&mut self) {
        while self.containers.try_join_next().is_some() {}
        let now = Instant::now();
        let deleting = self.pod.metadata.deletion_timestamp.is_some();

        if self.adopted_terminal {
            if deleting {
                self.request_delete();
            }
            return;
        }
        if deleting {
            self.begin_deletion(now);
        }
        if self.ip.is_none() && !self.record.terminal && !deleting && now >= self.sandbox_at {
            match self.node.ips.allocate() {
                Some(lease) => {
                    self.record.pod_ip = Some(lease.ip());
                    self.ip = Some(lease);
                }
                None => tracing::warn!(pod = %self.pod_ref(), "no pod IP left on the node"),
            }
        }

        // SIGKILL whatever outlived its grace period.
        let overdue: Vec<Slot> = self
            .live
            .iter()
            .filter(|(_, l)| l.kill_at.is_some_and(|t| t <= now))
            .map(|(slot, _)| *slot)
            .collect();
        for slot in overdue {
            self.kill(slot, Exit::killed());
        }
        self.apply_fault_annotations();

        let alive: BTreeSet<Slot> = self.live.keys().copied().collect();
        let stopping: BTreeSet<Slot> = self
            .live
            .iter()
            .filter(|(_, l)| l.kill_at.is_some())
            .map(|(slot, _)| *slot)
            .collect();
        let default_spec = Default::default();
        let plan = plan::next(&Observed {
            spec: self.pod.spec.as_ref().unwrap_or(&default_spec),
            record: &self.record,
            alive: &alive,
            stopping: &stopping,
            restart_at: &self.restart_at,
            deleting,
            sandbox_ready: self.ip.is_some(),
            now,
        });
        self.wake_at = plan.wake_at;
        for (slot, until) in &plan.backing_off {
            self.back_off(*slot, *until - now);
        }
        for slot in &plan.start {
            self.start(*slot);
        }
        for slot in &plan.stop {
            self.terminate(*slot, now);
        }
        if plan.finished {
            self.finish();
        }
        self.report();
        if self.record.terminal && deleting {
            self.request_delete();
        }
    }

    fn begin_deletion(&mut self, now: Instant) {
        let grace = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                self.pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30);
        let grace = Duration::from_secs(u64::try_from(grace).unwrap_or(0))
            .max(self.node.shared.config.timing.min_termination_grace);
        let deadline = now + grace;
        // A second delete may shorten the grace period, never lengthen it.
        let deadline = self.deadline.map_or(deadline, |d| d.min(deadline));
        self.deadline = Some(deadline);
        for live in self.live.values_mut() {
            if let Some(kill_at) = &mut live.kill_at {
                *kill_at = (*kill_at).min(deadline);
            }
        }
    }

    fn start(&mut self, slot: Slot) {
        let Some((container, kind)) = self.spec_container(slot) else {
            return;
        };
        let program: Arc<dyn ContainerProgram> = match self
            .node
            .shared
            .config
            .programs
            .select(&self.pod, &container, kind)
        {
            Ok(program) => program,
            Err(e) => Arc::new(Unstartable(StartFailure::config(format!("nodesim: {e}")))),
        };
        let Some(record) = self.record.get_mut(slot) else {
            return;
        };
        if let RunState::Terminated(t) = &record.state {
            record.last_termination = Some(t.clone());
        }
        record.state = RunState::not_started();
        let restart_count = record.restart_count + i32::from(self.started_once.contains(&slot));

        self.runs += 1;
        let run = self.runs;
        let (term, term_rx) = watch::channel(None);
        let task = Run {
            program,
            pod: self.pod.clone(),
            container,
            kind,
            slot,
            run,
            restart_count,
            container_id: container_id(&self.uid, slot, run),
            node: self.node.clone(),
            pod_ip: self.record.pod_ip.clone().unwrap_or_default(),
            term: term_rx,
            events: self.events_tx.clone(),
        };
        let abort = self.containers.spawn(task.execute());
        self.live.insert(
            slot,
            Live {
                run,
                term,
                abort,
                kill_at: None,
            },
        );
    }

    /// SIGTERM: a running program is told and given the remaining grace period; a container
    /// still being created is simply not started.
    fn terminate(&mut self, slot: Slot, now: Instant) {
        let running = self.record.get(slot).is_some_and(|r| r.state.is_running());
        if !running {
            if let Some(live) = self.live.remove(&slot) {
                live.abort.abort();
            }
            return;
        }
        let grace = match self.deadline {
            Some(deadline) => deadline.saturating_duration_since(now),
            None => {
                let seconds = self
                    .pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(30);
                Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
                    .max(self.node.shared.config.timing.min_termination_grace)
            }
        };
        if let Some(live) = self.live.get_mut(&slot) {
            live.kill_at = Some(now + grace);
            live.term.send_replace(Some(grace));
        }
    }

    /// Ends a run now (SIGKILL or an injected fault) as if the program had exited with `exit`.
    fn kill(&mut self, slot: Slot, exit: Exit) {
        let Some(live) = self.live.remove(&slot) else {
            return;
        };
        live.abort.abort();
        if self.record.get(slot).is_some_and(|r| r.state.is_running()) {
            self.exited(slot, exit);
        }
    }

    fn exited(&mut self, slot: Slot, exit: Exit) {
        self.live.remove(&slot);
        let now = Instant::now();
        let timing = &self.node.shared.config.timing;
        let at = self.backoff.entry(slot).or_default().exited(
            now,
            timing.crash_backoff_initial,
            timing.crash_backoff_max,
        );
        self.restart_at.insert(slot, at);
        let Some(record) = self.record.get_mut(slot) else {
            return;
        };
        let (id, started_at) = match &record.state {
            RunState::Running { id, started_at, .. } => (Some(id.clone()), Some(*started_at)),
            _ => (None, None),
        };
        record.state = RunState::Terminated(Termination {
            id,
            exit_code: exit.code,
            reason: exit.reason().to_owned(),
            message: exit.message,
            started_at,
            finished_at: Timestamp::now(),
        });
    }

    fn back_off(&mut self, slot: Slot, delay: Duration) {
        let pod = self.pod.metadata.name.clone().unwrap_or_default();
        let namespace = self.pod.metadata.namespace.clone().unwrap_or_default();
        let uid = self.uid.clone();
        let Some(record) = self.record.get_mut(slot) else {
            return;
        };
        if let RunState::Terminated(t) = &record.state {
            record.last_termination = Some(t.clone());
            let seconds = delay.as_secs_f64().ceil();
            record.state = RunState::Waiting {
                reason: Some(reasons::CRASH_LOOP_BACK_OFF.to_owned()),
                message: Some(format!(
                    "back-off {seconds}s restarting failed container={} pod={pod}_{namespace}({uid})",
                    record.name
                )),
            };
        }
    }

    /// No container will run again: containers that are not terminated are reported as
    /// lost, as the kubelet's status manager does for a terminated pod.
    fn finish(&mut self) {
        self.record.terminal = true;
        for live in std::mem::take(&mut self.live).into_values() {
            live.abort.abort();
        }
        let initialized =
            self.record.containers.iter().any(|c| {
                !matches!(c.state, RunState::Waiting { .. }) || c.last_termination.is_some()
            });
        let lost = |c: &mut status::ContainerRecord| {
            c.state = RunState::Terminated(Termination {
                id: None,
                exit_code: 137,
                reason: reasons::CONTAINER_STATUS_UNKNOWN.to_owned(),
                message: Some(
                    "The container could not be located when the pod was terminated".to_owned(),
                ),
                started_at: None,
                finished_at: Timestamp::now(),
            });
        };
        for c in &mut self.record.containers {
            if initialized && !matches!(c.state, RunState::Terminated(_)) {
                lost(c);
            }
        }
        for c in &mut self.record.init_containers {
            let ran = c.last_termination.is_some() || c.state.is_running();
            if ran && !matches!(c.state, RunState::Terminated(_)) {
                lost(c);
            }
        }
        // The sandbox is gone; the status keeps showing the IP, as a kubelet's does.
        self.ip = None;
    }

    fn report(&mut self) {
        let status = status::pod_status(
            &self.pod,
            &self.record,
            self.reported.as_ref(),
            Timestamp::now(),
        );
        if self
            .reported
            .as_ref()
            .is_some_and(|r| same_ignoring_times(r, &status))
        {
            return;
        }
        let value = match serde_json::to_value(&status) {
            Ok(value) => value,
            Err(e) => {
                tracing::error!(pod = %self.pod_ref(), error = %e, "cannot serialize pod status");
                return;
            }
        };
        self.reported = Some(status);
        self.submit(Some(value), false);
    }

    fn request_delete(&mut self) {
        if !self.delete_sent {
            self.delete_sent = true;
            self.submit(None, true);
        }
    }

    fn submit(&self, status: Option<serde_json::Value>, delete: bool) {
        self.node.shared.writer.submit(PodWrite {
            namespace: self.pod.metadata.namespace.clone().unwrap_or_default(),
            name: self.pod.metadata.name.clone().unwrap_or_default(),
            uid: self.uid.clone(),
            status,
            delete,
        });
    }

    fn on_event(&mut self, event: Event) {
        if self
            .live
            .get(&event.slot)
            .is_none_or(|l| l.run != event.run)
        {
            return; // from a run that was killed since
        }
        let slot = event.slot;
        match event.kind {
            EventKind::Waiting { reason, message } => {
                if let Some(record) = self.record.get_mut(slot) {
                    record.state = RunState::Waiting {
                        reason: Some(reason),
                        message: Some(message),
                    };
                }
            }
            EventKind::Started { at } => {
                let restarted = !self.started_once.insert(slot);
                let id = container_id(&self.uid, slot, event.run);
                if let Some(record) = self.record.get_mut(slot) {
                    if restarted {
                        record.restart_count += 1;
                    }
                    record.state = RunState::Running {
                        id,
                        started_at: at,
                        ready: false,
                    };
                }
            }
            EventKind::Ready(ready) => {
                if let Some(RunState::Running { ready: r, .. }) =
                    self.record.get_mut(slot).map(|r| &mut r.state)
                {
                    *r = ready;
                }
            }
            EventKind::Exited(exit) => self.exited(slot, exit),
        }
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Kill {
                container,
                exit,
                reply,
            } => {
                let result = match self.slot_of(&container) {
                    Some(slot) if self.record.get(slot).is_some_and(|r| r.state.is_running()) => {
                        self.kill(slot, exit);
                        Ok(())
                    }
                    Some(_) => Err(format!("container {container} is not running")),
                    None => Err(format!("the pod has no container {container}")),
                };
                let _ = reply.send(result);
            }
        }
    }

    /// Applies `fault.nodesim.hangar.dev/<container>` annotations once each, as soon as the
    /// container runs.
    fn apply_fault_annotations(&mut self) {
        let Some(annotations) = self.pod.metadata.annotations.clone() else {
            return;
        };
        for (key, value) in annotations {
            let Some(container) = key.strip_prefix(FAULT_PREFIX) else {
                continue;
            };
            if self.faults.get(container) == Some(&value) {
                continue;
            }
            let Some(slot) = self.slot_of(container) else {
                continue;
            };
            if !self.record.get(slot).is_some_and(|r| r.state.is_running()) {
                continue;
            }
            match parse_fault(&value) {
                Some(exit) => self.kill(slot, exit),
                None => tracing::warn!(
                    pod = %self.pod_ref(), container, value,
                    "ignoring fault annotation (oom, crash, crash(CODE), kill)"
                ),
            }
            self.faults.insert(container.to_owned(), value);
        }
    }
}

/// Parses a fault annotation value: `oom`, `crash`, `crash(CODE)`, `kill`.
pub(crate) fn parse_fault(value: &str) -> Option<Exit> {
    let spec: ProgramSpec = value.parse().ok()?;
    if !spec.options.is_empty() || spec.args.len() > 1 {
        return None;
    }
    let code = match spec.args.first() {
        Some(text) => Some(text.parse().ok().filter(|c| (0..=255).contains(c))?),
        None => None,
    };
    match (spec.name.as_str(), code) {
        ("oom", None) => Some(Exit::oom_killed()),
        ("kill", None) => Some(Exit::killed()),
        ("crash", code) => {
            Some(Exit::code(code.unwrap_or(1)).with_message("nodesim: injected crash"))
        }
        _ => None,
    }
}

/// A container whose program cannot be chosen (a bad annotation): it never starts.
#[derive(Debug)]
struct Unstartable(StartFailure);

#[async_trait::async_trait]
impl ContainerProgram for Unstartable {
    async fn prepare(&self, _ctx: &crate::program::ContainerContext) -> Result<(), StartFailure> {
        Err(self.0.clone())
    }

    async fn run(
        &self,
        _ctx: crate::program::ContainerContext,
        _io: crate::program::ContainerIo,
    ) -> Exit {
        std::future::pending().await
    }
}

fn container_id(pod_uid: &str, slot: Slot, run: u64) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{pod_uid}/{slot:?}/{run}").as_bytes());
    format!("nodesim://{}", hex::encode(digest))
}

/// Whether two statuses differ only in timestamps the kubelet rewrites anyway.
fn same_ignoring_times(a: &PodStatus, b: &PodStatus) -> bool {
    let strip = |s: &PodStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_transition_time = None;
        }
        s
    };
    strip(a) == strip(b)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_annotations_parse() {
        assert_eq!(parse_fault("oom"), Some(Exit::oom_killed()));
        assert_eq!(parse_fault("kill"), Some(Exit::killed()));
        assert_eq!(parse_fault("crash").map(|e| e.code), Some(1));
        assert_eq!(parse_fault("crash(3)").map(|e| e.code), Some(3));
        for bad in [
            "",
            "oom(1)",
            "crash(x)",
            "crash(1, 2)",
            "explode",
            "crash(code=2)",
        ] {
            assert_eq!(parse_fault(bad), None, "{bad:?}");
        }
    }
}
