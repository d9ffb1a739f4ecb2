//! Runner health: whether a runner is working, on its way, or neither — and why, in words an
//! operator can act on.
//!
//! Contract: [`classify`] is a pure function of one runner's observed state ([`Observed`]: its
//! pod's status, its node, what GitHub says about it) and `now`. It never reads a clock and
//! keeps no state. The answer is one of:
//! - [`Health::Healthy`]: registered, and GitHub does not say otherwise;
//! - [`Health::Starting`]: on its way (scheduling, pulling, starting, registering), within the
//!   limits of [`Thresholds`];
//! - [`Health::Stuck`]: not on its way any more, and nothing suggests it ever will be
//!   (unschedulable, image pull failing, Pending for no stated reason, Ready but never
//!   registered) — for longer than the limit for that case;
//! - [`Health::Dead`]: it was working and is not any more, while its pod may still look alive
//!   (runner container OOM-killed or crash-looping, node NotReady, registered but offline on
//!   GitHub);
//! - [`Health::Rejected`]: GitHub refuses the runner (its version is below GitHub's minimum).
//!
//! **A runner GitHub shows busy is always healthy**, whatever its pod looks like: it holds a
//! job, and nothing here may lead to killing it. A finished runner (its runner container done
//! for good, or the pod Succeeded or Failed) is owner sync's business, which replaces it as
//! finished; [`classify`] calls it healthy, or dead when its runner failed (OOM-killed, or
//! exited with a code other than 0: the reason is still worth telling, and owner sync spaces
//! out the replacements of failed runners).
//!
//! Time limits run from the moment the state began when Kubernetes records it (Ready since, a
//! condition's transition), else from the pod's creation: a pod that is created and never
//! scheduled is stuck `pending_limit` after creation.

use std::time::{Duration, SystemTime};

/// How long a Ready runner pod may go without a GitHub runner ID before it counts as stuck
/// (ARC's `registrationTimeout`): the default of `hangar run --registration-timeout`.
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// The default of [`Thresholds::failed_runner_backoff`] (`hangar run --failed-runner-backoff`).
pub const FAILED_RUNNER_BACKOFF: Duration = Duration::from_secs(10);

/// A pod's phase, as Kubernetes reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    /// Accepted but not all containers running.
    Pending,
    /// Bound and at least one container running.
    Running,
    /// All containers terminated with success.
    Succeeded,
    /// All containers terminated, at least one failed.
    Failed,
    /// State unknown (node unreachable).
    Unknown,
}

/// How long each kind of trouble is given before it counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Ready without registering ([`REGISTRATION_TIMEOUT`]).
    pub registration: Duration,
    /// Unschedulable, or failing to pull its image.
    pub pending: Duration,
    /// Its node NotReady.
    pub node_not_ready: Duration,
    /// Registered, its pod running, and GitHub showing the runner offline (a runner reconnects
    /// within seconds after a network blip; GitHub shows it offline after about a minute).
    pub offline: Duration,
    /// Runner container restarts after which a crash loop counts as dead.
    pub crash_loop_restarts: u32,
    /// How long a set whose runners failed ([`Dead::Failed`], [`Dead::OomKilled`]), with no
    /// runner of the template working, waits after the latest failure before it tries one
    /// fresh runner (owner sync's retry; the kubelet's first crash-loop back-off is as long).
    pub failed_runner_backoff: Duration,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            registration: REGISTRATION_TIMEOUT,
            pending: Duration::from_secs(10 * 60),
            node_not_ready: Duration::from_secs(5 * 60),
            offline: Duration::from_secs(5 * 60),
            crash_loop_restarts: 3,
            failed_runner_backoff: FAILED_RUNNER_BACKOFF,
        }
    }
}

/// What GitHub says about the runner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GitHubState {
    /// Not asked, or not known yet.
    #[default]
    Unknown,
    /// Listed online and idle.
    Online,
    /// Listed online and running a job.
    Busy,
    /// Listed offline, since this time (when Hangar first saw it offline).
    Offline(SystemTime),
}

impl GitHubState {
    /// What GitHub says now, from a list of runners that shows the runner `listed` as
    /// (online, busy) — or does not list it (`None`: not registered, or not yet) — given what it
    /// said before: an offline runner keeps the time it was first seen offline.
    pub fn after(self, listed: Option<(bool, bool)>, now: SystemTime) -> GitHubState {
        match (listed, self) {
            (None, _) => GitHubState::Unknown,
            (Some((_, true)), _) => GitHubState::Busy,
            (Some((true, false)), _) => GitHubState::Online,
            (Some((false, false)), GitHubState::Offline(since)) => GitHubState::Offline(since),
            (Some((false, false)), _) => GitHubState::Offline(now),
        }
    }
}

/// Why the runner container waits, from `state.waiting.reason`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// `ErrImagePull`, `ImagePullBackOff`, `InvalidImageName`: the image cannot be had.
    ImagePull(String),
    /// `CrashLoopBackOff`: the container keeps exiting.
    CrashLoop,
    /// `CreateContainerConfigError` and the like: the container cannot even be created.
    Config(String),
    /// Anything else (`ContainerCreating`, `PodInitializing`): on its way.
    Other,
}

/// How the runner container's last run ended, from `lastState.terminated` (or `state` while
/// it is not running again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Termination {
    /// `OOMKilled`: the kernel killed it for memory.
    OomKilled,
    /// Any other exit, with its code.
    Exited(i32),
}

/// GitHub refuses the runner: its version is below the minimum GitHub accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The runner image.
    pub image: String,
    /// The runner's version, as its image's tag says.
    pub version: String,
    /// The lowest version GitHub accepts.
    pub minimum: String,
}

/// One runner as Hangar observes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The pod's creationTimestamp.
    pub created: SystemTime,
    /// The pod's phase.
    pub phase: PodPhase,
    /// The runner is done for good (its container exited and cannot run again, or the pod
    /// ended): owner sync's business, not this module's.
    pub finished: bool,
    /// Since when `PodScheduled` is False with reason `Unschedulable`, and its message.
    pub unschedulable: Option<(SystemTime, String)>,
    /// Since when the pod's node is NotReady (its `Ready` condition False or Unknown).
    pub node_not_ready: Option<SystemTime>,
    /// Why the runner container waits, if it does.
    pub waiting: Option<Waiting>,
    /// How its last run ended, if it ended.
    pub last_termination: Option<Termination>,
    /// The runner container's `restartCount`.
    pub restarts: u32,
    /// Since when the pod is Ready, if it is.
    pub ready_since: Option<SystemTime>,
    /// GitHub knows the runner's ID (the `actions-runner/id` annotation).
    pub registered: bool,
    /// What GitHub says about it.
    pub github: GitHubState,
    /// GitHub refused it, if it did.
    pub rejected: Option<Rejection>,
}

/// Why a runner is stuck on its way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stuck {
    /// No node can take the pod (the scheduler's message).
    Unschedulable(String),
    /// Its image cannot be pulled (the kubelet's reason).
    ImagePull(String),
    /// Its container cannot be created (the kubelet's reason).
    Config(String),
    /// Ready for longer than the registration limit without registering.
    NeverRegistered,
    /// Pending for longer than the limit with no reason above (e.g. a volume never attaches).
    NotStarted,
}

/// Why a runner that was working no longer is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dead {
    /// The runner container was OOM-killed.
    OomKilled,
    /// The runner container keeps crashing (this many restarts).
    CrashLoop(u32),
    /// The runner is done, and its container exited with this code, not 0: actions/runner
    /// exits 0 when its work is done (an ephemeral runner after its job), so this run failed —
    /// a broken entrypoint or configuration when it happens at start.
    Failed(i32),
    /// Its node has been NotReady for longer than the limit.
    NodeNotReady,
    /// Registered, its pod running, and offline on GitHub for longer than the limit.
    Offline,
}

/// A runner's health (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Working, or done.
    Healthy,
    /// On its way.
    Starting,
    /// Not on its way any more.
    Stuck(Stuck),
    /// Was working, is not.
    Dead(Dead),
    /// Refused by GitHub.
    Rejected(Rejection),
}

impl Health {
    /// Whether the runner can be counted as capacity (working or on its way).
    pub fn is_capacity(&self) -> bool {
        matches!(self, Health::Healthy | Health::Starting)
    }

    /// Whether the trouble comes with the runner's template rather than its pod or node, so
    /// that a fresh pod of the same template would most likely meet it again: no node takes
    /// what it asks for (selector, affinity, resources), its image cannot be pulled, its
    /// container cannot be created, its runner keeps crashing, fails or runs out of memory, or
    /// GitHub refuses its version. Owner sync replaces such a runner only while another runner
    /// of the template shows that the template can work.
    pub fn comes_with_template(&self) -> bool {
        matches!(
            self,
            Health::Stuck(Stuck::Unschedulable(_) | Stuck::ImagePull(_) | Stuck::Config(_))
                | Health::Dead(Dead::CrashLoop(_) | Dead::OomKilled | Dead::Failed(_))
                | Health::Rejected(_)
        )
    }

    /// Whether a finished runner ended in failure ([`Dead::Failed`], [`Dead::OomKilled`]) rather
    /// than by finishing its work.
    pub fn ends_in_failure(&self) -> bool {
        matches!(self, Health::Dead(Dead::Failed(_) | Dead::OomKilled))
    }

    /// What is wrong, in words an operator can act on (empty for a working or starting
    /// runner).
    pub fn describe(&self) -> String {
        match self {
            Health::Healthy | Health::Starting => String::new(),
            Health::Stuck(Stuck::Unschedulable(message)) => {
                format!("no node can take its pod: {message}")
            }
            Health::Stuck(Stuck::ImagePull(reason)) => {
                format!("its runner image cannot be pulled ({reason})")
            }
            Health::Stuck(Stuck::Config(reason)) => {
                format!("its runner container cannot be created ({reason})")
            }
            Health::Stuck(Stuck::NeverRegistered) => {
                "its pod is ready but the runner never registered with GitHub".into()
            }
            Health::Stuck(Stuck::NotStarted) => "its pod has not started".into(),
            Health::Dead(Dead::OomKilled) => "its runner container was OOM-killed".into(),
            Health::Dead(Dead::CrashLoop(restarts)) => {
                format!("its runner container keeps crashing ({restarts} restarts)")
            }
            Health::Dead(Dead::Failed(code)) => {
                format!("its runner container exited with code {code}")
            }
            Health::Dead(Dead::NodeNotReady) => "its node is NotReady".into(),
            Health::Dead(Dead::Offline) => "GitHub shows it offline although its pod runs".into(),
            Health::Rejected(r) => format!(
                "GitHub refuses runner version {} of image {} (the minimum is {})",
                r.version, r.image, r.minimum
            ),
        }
    }

    /// A stable CamelCase reason, for conditions, events and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Health::Healthy => "Healthy",
            Health::Starting => "Starting",
            Health::Stuck(Stuck::Unschedulable(_)) => "Unschedulable",
            Health::Stuck(Stuck::ImagePull(_)) => "ImagePullFailing",
            Health::Stuck(Stuck::Config(_)) => "ContainerConfigError",
            Health::Stuck(Stuck::NeverRegistered) => "NeverRegistered",
            Health::Stuck(Stuck::NotStarted) => "NotStarted",
            Health::Dead(Dead::OomKilled) => "OOMKilled",
            Health::Dead(Dead::CrashLoop(_)) => "CrashLooping",
            Health::Dead(Dead::Failed(_)) => "RunnerFailed",
            Health::Dead(Dead::NodeNotReady) => "NodeNotReady",
            Health::Dead(Dead::Offline) => "OfflineOnGitHub",
            Health::Rejected(_) => "RunnerVersionRejected",
        }
    }
}

/// The health of one runner at `now` (see the module docs for the rules and their order).
pub fn classify(o: &Observed, limits: &Thresholds, now: SystemTime) -> Health {
    let past = |since: SystemTime, limit: Duration| elapsed(since, now) > limit;
    // A job is running on it: whatever else is true, it must be left alone.
    if o.github == GitHubState::Busy {
        return Health::Healthy;
    }
    if o.finished {
        // Owner sync replaces it as finished (after a back-off when it failed); the reason is
        // still worth telling.
        return match o.last_termination {
            Some(Termination::OomKilled) => Health::Dead(Dead::OomKilled),
            Some(Termination::Exited(code)) if code != 0 => Health::Dead(Dead::Failed(code)),
            _ => Health::Healthy,
        };
    }
    if let Some(rejection) = &o.rejected {
        return Health::Rejected(rejection.clone());
    }
    if let Some(since) = o.node_not_ready
        && past(since, limits.node_not_ready)
    {
        return Health::Dead(Dead::NodeNotReady);
    }
    // The runner container's own trouble, while the pod may still look Running.
    match (&o.waiting, o.last_termination) {
        (Some(Waiting::CrashLoop), Some(Termination::OomKilled)) => {
            return Health::Dead(Dead::OomKilled);
        }
        (Some(Waiting::CrashLoop), _) if o.restarts >= limits.crash_loop_restarts => {
            return Health::Dead(Dead::CrashLoop(o.restarts));
        }
        _ => {}
    }
    let pending_since = o.created;
    if let Some((since, message)) = &o.unschedulable {
        return if past(*since, limits.pending) {
            Health::Stuck(Stuck::Unschedulable(message.clone()))
        } else {
            Health::Starting
        };
    }
    match &o.waiting {
        Some(Waiting::ImagePull(reason)) => {
            return if past(pending_since, limits.pending) {
                Health::Stuck(Stuck::ImagePull(reason.clone()))
            } else {
                Health::Starting
            };
        }
        Some(Waiting::Config(reason)) => {
            return if past(pending_since, limits.pending) {
                Health::Stuck(Stuck::Config(reason.clone()))
            } else {
                Health::Starting
            };
        }
        _ => {}
    }
    if o.registered {
        return match o.github {
            GitHubState::Offline(since)
                if o.phase == PodPhase::Running && past(since, limits.offline) =>
            {
                Health::Dead(Dead::Offline)
            }
            _ => Health::Healthy,
        };
    }
    if never_registered(
        o.phase,
        o.registered,
        o.ready_since,
        limits.registration,
        now,
    ) {
        Health::Stuck(Stuck::NeverRegistered)
    } else if o.phase == PodPhase::Pending && past(pending_since, limits.pending) {
        Health::Stuck(Stuck::NotStarted)
    } else {
        Health::Starting
    }
}

/// The actions/runner version a runner image carries in its tag, as both runner images tag
/// them: `ghcr.io/actions/actions-runner:2.329.0`, `summerwind/actions-runner:v2.329.0-ubuntu-22.04`.
/// `None` for any other tag (`latest`, a digest alone, none): such a runner's version is unknown
/// and never judged.
pub fn image_runner_version(image: &str) -> Option<&str> {
    let image = image.split('@').next()?;
    let name = image.rsplit('/').next()?;
    let tag = name.split_once(':')?.1;
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    let end = tag.find('-').unwrap_or(tag.len());
    let version = &tag[..end];
    let parts: Vec<&str> = version.split('.').collect();
    let numeric = parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    numeric.then_some(version)
}

/// GitHub's refusal of the runner in `image` when the version its tag names
/// ([`image_runner_version`]) is below `minimum`; versions compare part by part as numbers. A
/// version that cannot be read is not judged.
pub fn rejection(image: &str, minimum: &str) -> Option<Rejection> {
    let version = image_runner_version(image)?;
    let parse = |v: &str| -> Option<Vec<u64>> {
        v.trim_start_matches('v')
            .split('.')
            .map(|p| p.parse().ok())
            .collect()
    };
    (parse(version)? < parse(minimum)?).then(|| Rejection {
        image: image.to_owned(),
        version: version.to_owned(),
        minimum: minimum.to_owned(),
    })
}

/// The [`Stuck::NeverRegistered`] case: running, Ready for longer than `limit`, and no runner
/// ID.
fn never_registered(
    phase: PodPhase,
    registered: bool,
    ready_since: Option<SystemTime>,
    limit: Duration,
    now: SystemTime,
) -> bool {
    phase == PodPhase::Running
        && !registered
        && ready_since.is_some_and(|since| elapsed(since, now) > limit)
}

fn elapsed(since: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(since).unwrap_or_default()
}

#[cfg(test)]
mod tests;
