//! Pod status as a kubelet computes it: a pure function of the pod, what its containers are
//! doing ([`PodRecord`]) and the clock.
//!
//! The rules follow the kubelet's status generation (v1.34, without alpha feature gates):
//! - container states: never-started containers wait with `ContainerCreating` (or
//!   `PodInitializing` when the pod has init containers); ready = running and (no readiness
//!   probe or the program says ready); completed init containers are ready;
//! - phase ([`phase`]): pending while init containers or any container has not started;
//!   `Running` while one runs; when all have stopped, `Succeeded`/`Failed` by exit codes and
//!   restart policy (`Always` keeps `Running`, `OnFailure` keeps `Running` while a failed one
//!   will restart); a terminal phase never changes back;
//! - conditions: `PodReadyToStartContainers`, `Initialized`, `ContainersReady`, `Ready` and
//!   `PodScheduled` with the kubelet's reasons and messages; conditions owned by others are
//!   kept; `lastTransitionTime` changes only with the status.

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use sha2::{Digest, Sha256};

use crate::program::reasons;

/// Where a container sits in its pod's spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Slot {
    /// `spec.initContainers[i]`.
    Init(usize),
    /// `spec.containers[i]`.
    Regular(usize),
}

/// The runtime's view of a pod: sandbox, addresses and one record per container.
#[derive(Clone, Debug, PartialEq)]
pub struct PodRecord {
    /// The node's IP.
    pub host_ip: String,
    /// The pod's IP, once its sandbox exists.
    pub pod_ip: Option<String>,
    /// When the kubelet accepted the pod.
    pub start_time: Timestamp,
    /// One per `spec.initContainers` entry, in order.
    pub init_containers: Vec<ContainerRecord>,
    /// One per `spec.containers` entry, in order.
    pub containers: Vec<ContainerRecord>,
    /// The kubelet is done with the pod (deleted, or finished and not restarting): its
    /// containers will never run again.
    pub terminal: bool,
}

/// The runtime's view of one container.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerRecord {
    /// The container's name.
    pub name: String,
    /// The container's image as written in the spec.
    pub image: String,
    /// What it is doing now.
    pub state: RunState,
    /// How its previous run ended.
    pub last_termination: Option<Termination>,
    /// How often it was restarted.
    pub restart_count: i32,
}

/// A container's current state.
#[derive(Clone, Debug, PartialEq)]
pub enum RunState {
    /// Not running; `reason: None` is the default waiting reason.
    Waiting {
        /// E.g. `ErrImagePull`, `CrashLoopBackOff`.
        reason: Option<String>,
        /// Details for humans.
        message: Option<String>,
    },
    /// Running since `started_at`.
    Running {
        /// The runtime ID of this run.
        id: String,
        /// When it started.
        started_at: Timestamp,
        /// Whether the program reports ready.
        ready: bool,
    },
    /// Exited.
    Terminated(Termination),
}

/// How a container run ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Termination {
    /// The runtime ID of the run, if it ever started.
    pub id: Option<String>,
    /// Exit code.
    pub exit_code: i32,
    /// `Completed`, `Error`, `OOMKilled`, ...
    pub reason: String,
    /// Termination message.
    pub message: Option<String>,
    /// When the run started.
    pub started_at: Option<Timestamp>,
    /// When it ended.
    pub finished_at: Timestamp,
}

impl RunState {
    /// Waiting with the default reason.
    pub fn not_started() -> Self {
        RunState::Waiting {
            reason: None,
            message: None,
        }
    }

    /// Whether this is `Running`.
    pub fn is_running(&self) -> bool {
        matches!(self, RunState::Running { .. })
    }
}

impl PodRecord {
    /// A record for a newly accepted pod: every container waiting to be created.
    pub fn new(spec: &PodSpec, host_ip: impl Into<String>, start_time: Timestamp) -> Self {
        let records = |containers: &[Container]| {
            containers
                .iter()
                .map(|c| ContainerRecord {
                    name: c.name.clone(),
                    image: c.image.clone().unwrap_or_default(),
                    state: RunState::not_started(),
                    last_termination: None,
                    restart_count: 0,
                })
                .collect()
        };
        Self {
            host_ip: host_ip.into(),
            pod_ip: None,
            start_time,
            init_containers: records(spec.init_containers.as_deref().unwrap_or_default()),
            containers: records(&spec.containers),
            terminal: false,
        }
    }

    /// The record at `slot`.
    pub fn get(&self, slot: Slot) -> Option<&ContainerRecord> {
        match slot {
            Slot::Init(i) => self.init_containers.get(i),
            Slot::Regular(i) => self.containers.get(i),
        }
    }

    /// The record at `slot`, mutably.
    pub fn get_mut(&mut self, slot: Slot) -> Option<&mut ContainerRecord> {
        match slot {
            Slot::Init(i) => self.init_containers.get_mut(i),
            Slot::Regular(i) => self.containers.get_mut(i),
        }
    }

    /// Every slot with its record.
    pub fn slots(&self) -> impl Iterator<Item = (Slot, &ContainerRecord)> {
        let init = self.init_containers.iter().enumerate();
        let regular = self.containers.iter().enumerate();
        init.map(|(i, r)| (Slot::Init(i), r))
            .chain(regular.map(|(i, r)| (Slot::Regular(i), r)))
    }
}

/// Condition types the kubelet owns.
pub mod conditions {
    /// The sandbox exists and has networking.
    pub const READY_TO_START_CONTAINERS: &str = "PodReadyToStartContainers";
    /// All init containers completed (sidecars started).
    pub const INITIALIZED: &str = "Initialized";
    /// All containers are ready.
    pub const CONTAINERS_READY: &str = "ContainersReady";
    /// The pod is ready to serve (containers ready and readiness gates true).
    pub const READY: &str = "Ready";
    /// The pod is bound to a node.
    pub const SCHEDULED: &str = "PodScheduled";

    /// Whether the kubelet owns (and so rewrites) conditions of type `t`.
    pub fn owned_by_kubelet(t: &str) -> bool {
        [
            READY_TO_START_CONTAINERS,
            INITIALIZED,
            CONTAINERS_READY,
            READY,
            SCHEDULED,
        ]
        .contains(&t)
    }
}

/// Pod phases.
pub mod phases {
    /// Accepted, not all containers started.
    pub const PENDING: &str = "Pending";
    /// At least one container runs (or restarts).
    pub const RUNNING: &str = "Running";
    /// All containers exited 0 and will not restart.
    pub const SUCCEEDED: &str = "Succeeded";
    /// All containers stopped, at least one failed, none will restart.
    pub const FAILED: &str = "Failed";

    /// Whether `phase` is terminal.
    pub fn is_terminal(phase: Option<&str>) -> bool {
        matches!(phase, Some(SUCCEEDED | FAILED))
    }
}

/// Whether `c` is a native sidecar (an init container with `restartPolicy: Always`).
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The pod's restart policy (`Always` when unset, as the API defaults it).
pub fn restart_policy(spec: &PodSpec) -> &str {
    spec.restart_policy.as_deref().unwrap_or("Always")
}

/// The status the kubelet would report for `pod`, given its runtime `record`, at `now`.
///
/// `reported` is the status this kubelet last reported, if any: it is newer than `pod.status`
/// when the API server has not echoed the last write yet, and is what condition transition
/// times and the terminal-phase rule are based on (as the kubelet's status cache is).
pub fn pod_status(
    pod: &Pod,
    record: &PodRecord,
    reported: Option<&PodStatus>,
    now: Timestamp,
) -> PodStatus {
    let default_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    let old = pod.status.clone().unwrap_or_default();
    let reported = reported.unwrap_or(&old);
    let init_specs = spec.init_containers.as_deref().unwrap_or_default();
    let has_init = !init_specs.is_empty();

    let init_statuses: Vec<ContainerStatus> = init_specs
        .iter()
        .zip(&record.init_containers)
        .map(|(c, r)| container_status(c, r, true, has_init))
        .collect();
    let statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .zip(&record.containers)
        .map(|(c, r)| container_status(c, r, false, has_init))
        .collect();

    let mut phase = phase(spec, &init_statuses, &statuses, record.terminal);
    // Pods never leave a terminal phase.
    for earlier in [&old.phase, &reported.phase] {
        if phases::is_terminal(earlier.as_deref()) {
            phase = earlier.clone().unwrap_or_default();
        }
    }

    let generation = pod.metadata.generation;
    let foreign: Vec<PodCondition> = old
        .conditions
        .iter()
        .flatten()
        .filter(|c| !conditions::owned_by_kubelet(&c.type_))
        .cloned()
        .collect();
    let previous = reported.conditions.as_deref().unwrap_or_default();
    let mut conditions = foreign.clone();
    let mut set = |mut c: PodCondition| {
        c.observed_generation = generation;
        let before = previous.iter().find(|p| p.type_ == c.type_);
        c.last_transition_time = match before {
            Some(p) if p.status == c.status && p.last_transition_time.is_some() => {
                p.last_transition_time.clone()
            }
            _ => Some(Time(now)),
        };
        conditions.push(c);
    };
    set(condition(
        conditions::READY_TO_START_CONTAINERS,
        record.pod_ip.is_some() && !record.terminal,
        None,
        None,
    ));
    set(initialized_condition(
        spec,
        &init_statuses,
        &statuses,
        &phase,
    ));
    let containers_ready = containers_ready_condition(spec, &init_statuses, &statuses, &phase);
    set(ready_condition(spec, &containers_ready, &foreign));
    set(containers_ready);
    set(condition(conditions::SCHEDULED, true, None, None));

    let pod_ip = if pod.spec.as_ref().and_then(|s| s.host_network) == Some(true) {
        Some(record.host_ip.clone())
    } else {
        record.pod_ip.clone()
    };
    PodStatus {
        phase: Some(phase),
        conditions: Some(conditions),
        host_ip: Some(record.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: record.host_ip.clone(),
        }]),
        pod_ips: pod_ip.clone().map(|ip| vec![PodIP { ip }]),
        pod_ip,
        start_time: Some(Time(record.start_time)),
        init_container_statuses: has_init.then_some(init_statuses),
        container_statuses: Some(statuses),
        qos_class: old.qos_class,
        observed_generation: generation,
        ..PodStatus::default()
    }
}

fn container_status(
    spec: &Container,
    record: &ContainerRecord,
    init: bool,
    pod_has_init: bool,
) -> ContainerStatus {
    let terminated = |t: &Termination| ContainerStateTerminated {
        container_id: t.id.clone(),
        exit_code: t.exit_code,
        reason: Some(t.reason.clone()),
        message: t.message.clone(),
        started_at: t.started_at.map(Time),
        finished_at: Some(Time(t.finished_at)),
        signal: None,
    };
    let (state, ready, id) = match &record.state {
        RunState::Waiting { reason, message } => {
            let default = if pod_has_init {
                reasons::POD_INITIALIZING
            } else {
                reasons::CONTAINER_CREATING
            };
            let state = ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone().unwrap_or_else(|| default.to_owned())),
                    message: message.clone(),
                }),
                ..ContainerState::default()
            };
            let id = record.last_termination.as_ref().and_then(|t| t.id.clone());
            (state, false, id)
        }
        RunState::Running {
            id,
            started_at,
            ready,
        } => {
            let state = ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(*started_at)),
                }),
                ..ContainerState::default()
            };
            let probed = spec.readiness_probe.is_some();
            let regular_init = init && !is_sidecar(spec);
            let ready = !regular_init && (!probed || *ready);
            (state, ready, Some(id.clone()))
        }
        RunState::Terminated(t) => {
            let state = ContainerState {
                terminated: Some(terminated(t)),
                ..ContainerState::default()
            };
            // A completed init container counts as ready (that is how `Initialized` is
            // computed).
            let ready = init && !is_sidecar(spec) && t.exit_code == 0;
            (state, ready, t.id.clone())
        }
    };
    let ever_created = id.is_some();
    let image = normalize_image(&record.image);
    ContainerStatus {
        name: record.name.clone(),
        image_id: if ever_created {
            image_id(&image)
        } else {
            String::new()
        },
        image,
        container_id: id,
        ready,
        started: Some(record.state.is_running()),
        restart_count: record.restart_count,
        state: Some(state),
        last_state: Some(ContainerState {
            terminated: record.last_termination.as_ref().map(terminated),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

/// The pod phase from container statuses (the kubelet's `getPhase`).
///
/// `terminal` says the kubelet is done with the pod (deleted, or finished): its stopped
/// containers will not restart whatever the policy.
pub fn phase(
    spec: &PodSpec,
    init_statuses: &[ContainerStatus],
    statuses: &[ContainerStatus],
    terminal: bool,
) -> String {
    let init_specs = spec.init_containers.as_deref().unwrap_or_default();
    let last_exit = |s: &ContainerStatus| {
        let last = s.last_state.as_ref()?.terminated.as_ref()?;
        Some(last.exit_code)
    };

    let mut pending_init = 0;
    let mut failed_init = 0;
    for c in init_specs.iter().filter(|c| !is_sidecar(c)) {
        match status_of(init_statuses, &c.name) {
            Some((state, _)) if state.running.is_some() => pending_init += 1,
            Some((state, _)) if state.terminated.is_some() => {
                if state.terminated.as_ref().is_some_and(|t| t.exit_code != 0) {
                    failed_init += 1;
                }
            }
            Some((state, s)) if state.waiting.is_some() => match last_exit(s) {
                Some(code) if code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            },
            _ => pending_init += 1,
        }
    }

    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    let mut pending_sidecars = 0;
    for c in init_specs.iter().filter(|c| is_sidecar(c)) {
        match status_of(init_statuses, &c.name) {
            Some((state, s)) if state.running.is_some() => {
                if s.started != Some(true) {
                    pending_sidecars += 1;
                }
                running += 1;
            }
            // Stopped sidecars do not count towards the phase.
            Some((state, _)) if state.terminated.is_some() => {}
            Some((state, s)) if state.waiting.is_some() => {
                if last_exit(s).is_none() {
                    pending_sidecars += 1;
                    waiting += 1;
                }
            }
            _ => {
                pending_sidecars += 1;
                unknown += 1;
            }
        }
    }
    for c in &spec.containers {
        match status_of(statuses, &c.name) {
            Some((state, _)) if state.running.is_some() => running += 1,
            Some((state, _)) if state.terminated.is_some() => {
                stopped += 1;
                if state.terminated.as_ref().is_some_and(|t| t.exit_code == 0) {
                    succeeded += 1;
                }
            }
            Some((state, s)) if state.waiting.is_some() => {
                if last_exit(s).is_some() {
                    stopped += 1;
                } else {
                    waiting += 1;
                }
            }
            _ => unknown += 1,
        }
    }

    let policy = restart_policy(spec);
    if failed_init > 0 && policy == "Never" {
        return phases::FAILED.to_owned();
    }
    let initialized = has_any_regular_started(statuses);
    let phase = if pending_init > 0 || (pending_sidecars > 0 && !initialized) || waiting > 0 {
        phases::PENDING
    } else if running > 0 && unknown == 0 {
        phases::RUNNING
    } else if running == 0 && stopped > 0 && unknown == 0 {
        match () {
            () if terminal && stopped == succeeded => phases::SUCCEEDED,
            () if terminal => phases::FAILED,
            () if policy == "Always" => phases::RUNNING,
            () if stopped == succeeded => phases::SUCCEEDED,
            () if policy == "Never" => phases::FAILED,
            () => phases::RUNNING,
        }
    } else {
        phases::PENDING
    };
    phase.to_owned()
}

/// The named container's status with its state (which the kubelet always sets).
fn status_of<'a>(
    list: &'a [ContainerStatus],
    name: &str,
) -> Option<(&'a ContainerState, &'a ContainerStatus)> {
    let status = list.iter().find(|s| s.name == name)?;
    Some((status.state.as_ref()?, status))
}

/// Whether any regular container has started at some point.
fn has_any_regular_started(statuses: &[ContainerStatus]) -> bool {
    statuses.iter().any(|s| {
        let state = s.state.as_ref();
        state.is_some_and(|st| st.running.is_some() || st.terminated.is_some())
            || s.last_state
                .as_ref()
                .is_some_and(|l| l.terminated.is_some())
    })
}

fn condition(type_: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.map(str::to_owned),
        message,
        ..PodCondition::default()
    }
}

fn list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

fn initialized_condition(
    spec: &PodSpec,
    init_statuses: &[ContainerStatus],
    statuses: &[ContainerStatus],
    phase: &str,
) -> PodCondition {
    let init_specs = spec.init_containers.as_deref().unwrap_or_default();
    let mut unknown = Vec::new();
    let mut incomplete = Vec::new();
    for c in init_specs {
        match init_statuses.iter().find(|s| s.name == c.name) {
            None => unknown.push(c.name.as_str()),
            Some(s) => {
                let done = if is_sidecar(c) {
                    s.started == Some(true)
                } else {
                    s.ready
                };
                if !done {
                    incomplete.push(c.name.as_str());
                }
            }
        }
    }
    let t = conditions::INITIALIZED;
    if phase == phases::SUCCEEDED && unknown.is_empty() {
        return condition(t, true, Some("PodCompleted"), None);
    }
    if has_any_regular_started(statuses) {
        return condition(t, true, None, None);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!(
            "containers with unknown status: {}",
            list(&unknown)
        ));
    }
    if !incomplete.is_empty() {
        messages.push(format!(
            "containers with incomplete status: {}",
            list(&incomplete)
        ));
    }
    if messages.is_empty() {
        condition(t, true, None, None)
    } else {
        condition(
            t,
            false,
            Some("ContainersNotInitialized"),
            Some(messages.join(", ")),
        )
    }
}

fn containers_ready_condition(
    spec: &PodSpec,
    init_statuses: &[ContainerStatus],
    statuses: &[ContainerStatus],
    phase: &str,
) -> PodCondition {
    let t = conditions::CONTAINERS_READY;
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_sidecar(c))
        .map(|c| (c, init_statuses));
    let regular = spec.containers.iter().map(|c| (c, statuses));
    let mut unknown = Vec::new();
    let mut unready = Vec::new();
    for (c, list) in sidecars.chain(regular) {
        match list.iter().find(|s| s.name == c.name) {
            None => unknown.push(c.name.as_str()),
            Some(s) if !s.ready => unready.push(c.name.as_str()),
            Some(_) => {}
        }
    }
    if phase == phases::SUCCEEDED && unknown.is_empty() {
        return condition(t, false, Some("PodCompleted"), None);
    }
    if phase == phases::FAILED {
        return condition(t, false, Some("PodFailed"), None);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!(
            "containers with unknown status: {}",
            list(&unknown)
        ));
    }
    if !unready.is_empty() {
        messages.push(format!(
            "containers with unready status: {}",
            list(&unready)
        ));
    }
    if messages.is_empty() {
        condition(t, true, None, None)
    } else {
        condition(
            t,
            false,
            Some("ContainersNotReady"),
            Some(messages.join(", ")),
        )
    }
}

fn ready_condition(
    spec: &PodSpec,
    containers_ready: &PodCondition,
    previous: &[PodCondition],
) -> PodCondition {
    let t = conditions::READY;
    if containers_ready.status != "True" {
        return PodCondition {
            type_: t.to_owned(),
            ..containers_ready.clone()
        };
    }
    let mut messages = Vec::new();
    for gate in spec.readiness_gates.iter().flatten() {
        let gate = &gate.condition_type;
        match previous.iter().find(|c| &c.type_ == gate) {
            None => messages.push(format!(
                "corresponding condition of pod readiness gate \"{gate}\" does not exist."
            )),
            Some(c) if c.status != "True" => messages.push(format!(
                "the status of pod readiness gate \"{gate}\" is not \"True\", but {}",
                c.status
            )),
            Some(_) => {}
        }
    }
    if messages.is_empty() {
        condition(t, true, None, None)
    } else {
        condition(
            t,
            false,
            Some("ReadinessGatesNotReady"),
            Some(messages.join(", ")),
        )
    }
}

/// The image reference a CRI runtime reports for `image`: registry, repository and tag made
/// explicit (`busybox` → `docker.io/library/busybox:latest`).
pub fn normalize_image(image: &str) -> String {
    if image.is_empty() {
        return String::new();
    }
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    let first = name.split('/').next().unwrap_or_default();
    let has_registry = name.contains('/') && (first.contains(['.', ':']) || first == "localhost");
    let mut full = match (has_registry, name.contains('/')) {
        (true, _) => name.to_owned(),
        (false, true) => format!("docker.io/{name}"),
        (false, false) => format!("docker.io/library/{name}"),
    };
    let last = full.rsplit('/').next().unwrap_or_default();
    if digest.is_none() && !last.contains(':') {
        full.push_str(":latest");
    }
    match digest {
        Some(d) => format!("{full}@{d}"),
        None => full,
    }
}

/// A stable, made-up image digest for a normalized image reference.
fn image_id(image: &str) -> String {
    if image.contains('@') {
        return image.to_owned();
    }
    let repo = match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => image,
    };
    let digest = hex::encode(Sha256::digest(image.as_bytes()));
    format!("{repo}@sha256:{digest}")
}

#[cfg(test)]
mod tests;
