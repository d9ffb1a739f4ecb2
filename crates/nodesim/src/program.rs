//! Container programs: what "runs" inside a simulated container.
//!
//! There is no container runtime. For every container of a pod bound to a simulated node, the
//! kubelet side picks a [`ContainerProgram`] (see [`Programs`]) and drives it:
//!
//! 1. [`prepare`](ContainerProgram::prepare) — image pull and container creation. An error keeps
//!    the container `Waiting` with the error's reason (`ErrImagePull`, then `ImagePullBackOff`)
//!    and is retried with the kubelet's back-off; a future that never completes keeps it in
//!    `ContainerCreating`.
//! 2. [`run`](ContainerProgram::run) — the container is `Running` from the moment `run` is
//!    called until its future returns an [`Exit`]. Readiness is reported through
//!    [`ContainerIo::set_ready`] (it only matters when the container has a readiness probe).
//! 3. Stop — on pod deletion (or when a sidecar is no longer needed) the kubelet delivers a
//!    simulated SIGTERM: [`ContainerIo::terminated`] resolves with the grace period. The program
//!    decides how fast it stops; when the grace period is over the kubelet drops the future
//!    (SIGKILL) and records exit code 137.
//!
//! A program value is shared by every container it is selected for; per-run state lives in the
//! `run` future. `run` is called again for each restart.

mod builtin;
pub mod runner;
mod select;
mod spec;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::sync::watch;

pub use builtin::{NeverStarts, OnTerm, Scripted};
pub use runner::{PodMatch, Registration, RunnerFault, RunnerFaults, RunnerProgram};
pub use select::{ContainerSelector, ProgramFactory, ProgramRule, Programs};
pub use spec::{ProgramSpec, SpecError};

/// A simulated process: the behaviour of one container from creation to exit.
///
/// Implement it for anything a test needs to run in a pod — the built-in [`Scripted`] and
/// [`NeverStarts`] cover sleeping sidecars, exits, crashes, OOM kills and stuck image pulls;
/// the actions/runner simulation, [`RunnerProgram`], is another implementation.
#[async_trait]
pub trait ContainerProgram: Send + Sync + fmt::Debug {
    /// Pulls the image and creates the container. `Err` leaves the container `Waiting` with the
    /// failure's reason; the kubelet retries after a back-off. Defaults to immediate success.
    async fn prepare(&self, ctx: &ContainerContext) -> Result<(), StartFailure> {
        let _ = ctx;
        Ok(())
    }

    /// Runs the started container until it exits. Dropping the future is SIGKILL.
    async fn run(&self, ctx: ContainerContext, io: ContainerIo) -> Exit;
}

/// How a container exited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// The process exit code (128 + signal number for a signal death).
    pub code: i32,
    /// The termination reason; `None` lets the kubelet choose (`Completed` for 0, else `Error`).
    pub reason: Option<String>,
    /// The termination message (what a real container writes to its termination log).
    pub message: Option<String>,
}

impl Exit {
    /// Exit with `code` and the kubelet's default reason.
    pub fn code(code: i32) -> Self {
        Self {
            code,
            reason: None,
            message: None,
        }
    }

    /// A clean exit: code 0, reason `Completed`.
    pub fn success() -> Self {
        Self::code(0)
    }

    /// Killed by the kernel's OOM killer: code 137, reason `OOMKilled`.
    pub fn oom_killed() -> Self {
        Self {
            code: 137,
            reason: Some(reasons::OOM_KILLED.to_owned()),
            message: None,
        }
    }

    /// Killed by SIGKILL (e.g. at the end of the grace period): code 137, reason `Error`.
    pub fn killed() -> Self {
        Self::code(137)
    }

    /// Adds a termination message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// The reason the kubelet reports: the explicit one, else `Completed` or `Error`.
    pub fn reason(&self) -> &str {
        match (&self.reason, self.code) {
            (Some(reason), _) => reason,
            (None, 0) => reasons::COMPLETED,
            (None, _) => reasons::ERROR,
        }
    }
}

/// Why a container could not be created; shown as its `waiting` reason until a retry succeeds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartFailure {
    /// The reason right after a failed attempt, e.g. `ErrImagePull`.
    pub reason: String,
    /// The reason while waiting for the next attempt, e.g. `ImagePullBackOff`; `None` keeps
    /// `reason`.
    pub backoff_reason: Option<String>,
    /// A human-readable message.
    pub message: String,
}

impl StartFailure {
    /// The image cannot be pulled: `ErrImagePull`, then `ImagePullBackOff` between attempts.
    pub fn image_pull(message: impl Into<String>) -> Self {
        Self {
            reason: reasons::ERR_IMAGE_PULL.to_owned(),
            backoff_reason: Some(reasons::IMAGE_PULL_BACK_OFF.to_owned()),
            message: message.into(),
        }
    }

    /// The container's configuration is invalid: `CreateContainerConfigError`.
    pub fn config(message: impl Into<String>) -> Self {
        Self {
            reason: reasons::CREATE_CONTAINER_CONFIG_ERROR.to_owned(),
            backoff_reason: None,
            message: message.into(),
        }
    }
}

/// Container state reasons used by the kubelet (and so by nodesim).
pub mod reasons {
    /// Terminated with exit code 0.
    pub const COMPLETED: &str = "Completed";
    /// Terminated with a non-zero exit code.
    pub const ERROR: &str = "Error";
    /// Terminated by the OOM killer.
    pub const OOM_KILLED: &str = "OOMKilled";
    /// Waiting for the pod sandbox and image pulls.
    pub const CONTAINER_CREATING: &str = "ContainerCreating";
    /// Waiting for init containers (pods with init containers use this instead of
    /// `ContainerCreating`).
    pub const POD_INITIALIZING: &str = "PodInitializing";
    /// Waiting to be restarted after exiting.
    pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
    /// An image pull just failed.
    pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
    /// Waiting to retry a failed image pull.
    pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";
    /// The environment or another part of the container config could not be built.
    pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";
    /// The container was not running when the pod was terminated.
    pub const CONTAINER_STATUS_UNKNOWN: &str = "ContainerStatusUnknown";
}

/// Which of the pod's container lists a container comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ContainerKind {
    /// An init container that runs to completion before the next one starts.
    Init,
    /// An init container with `restartPolicy: Always` (a native sidecar): it keeps running.
    Sidecar,
    /// A regular container (`spec.containers`), including sidecars in the ARC sense such as
    /// the `docker` dind container.
    Regular,
}

/// What a program knows about the container it runs in.
#[derive(Clone, Debug)]
pub struct ContainerContext {
    /// The pod as observed when the container was started.
    pub pod: Arc<Pod>,
    /// The container's spec.
    pub container: Container,
    /// Which list the container comes from.
    pub kind: ContainerKind,
    /// The simulated node running the pod.
    pub node_name: String,
    /// The pod's IP.
    pub pod_ip: String,
    /// The node's IP.
    pub host_ip: String,
    /// How often this container has been restarted before this run.
    pub restart_count: i32,
    /// The runtime ID of this run (`nodesim://<hex>`).
    pub container_id: String,
    /// The container's environment, resolved as the kubelet does (`value`, `valueFrom`,
    /// `envFrom`, `$(VAR)` expansion), in definition order.
    pub env: Vec<(String, String)>,
}

impl ContainerContext {
    /// A context for container `name` of `pod`, with an empty environment and placeholder
    /// addresses: for unit tests of programs. `None` if the pod has no such container.
    pub fn for_test(pod: Arc<Pod>, name: &str) -> Option<Self> {
        let spec = pod.spec.as_ref()?;
        let (container, kind) = spec
            .containers
            .iter()
            .map(|c| (c, ContainerKind::Regular))
            .chain(spec.init_containers.iter().flatten().map(|c| {
                let sidecar = c.restart_policy.as_deref() == Some("Always");
                let kind = if sidecar {
                    ContainerKind::Sidecar
                } else {
                    ContainerKind::Init
                };
                (c, kind)
            }))
            .find(|(c, _)| c.name == name)?;
        let env = container
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        Some(Self {
            container: container.clone(),
            kind,
            node_name: spec.node_name.clone().unwrap_or_default(),
            pod_ip: "10.0.0.2".to_owned(),
            host_ip: "10.0.0.1".to_owned(),
            restart_count: 0,
            container_id: "nodesim://test".to_owned(),
            env,
            pod,
        })
    }

    /// The pod's namespace.
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// The pod's name.
    pub fn pod_name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    /// The pod's UID.
    pub fn pod_uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    /// The container's name.
    pub fn name(&self) -> &str {
        &self.container.name
    }

    /// The value of environment variable `name` (the last definition wins, as in a process).
    pub fn env_var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A running program's link to its kubelet: readiness out, SIGTERM in.
#[derive(Debug)]
pub struct ContainerIo {
    ready: watch::Sender<bool>,
    term: watch::Receiver<Option<Duration>>,
}

/// The kubelet's end of a [`ContainerIo`]; tests of programs use it to play the kubelet.
#[derive(Debug)]
pub struct ContainerControl {
    ready: watch::Receiver<bool>,
    term: watch::Sender<Option<Duration>>,
}

impl ContainerIo {
    /// A connected pair: the program's end and the kubelet's end.
    pub fn pair() -> (ContainerIo, ContainerControl) {
        let (ready_tx, ready_rx) = watch::channel(false);
        let (term_tx, term_rx) = watch::channel(None);
        (
            ContainerIo {
                ready: ready_tx,
                term: term_rx,
            },
            ContainerControl {
                ready: ready_rx,
                term: term_tx,
            },
        )
    }

    /// The program's end of a run whose SIGTERM comes from `term`; the receiver reports
    /// readiness.
    pub(crate) fn attached(
        term: watch::Receiver<Option<Duration>>,
    ) -> (ContainerIo, watch::Receiver<bool>) {
        let (ready, ready_rx) = watch::channel(false);
        (ContainerIo { ready, term }, ready_rx)
    }

    /// Reports whether the container passes its readiness probe. Containers without a
    /// readiness probe are ready whenever they run, whatever is reported here.
    pub fn set_ready(&self, ready: bool) {
        self.ready
            .send_if_modified(|r| std::mem::replace(r, ready) != ready);
    }

    /// Resolves when SIGTERM is delivered, with the grace period the pod was given (the
    /// program is killed when it runs out). Cancel-safe; resolves at once after a SIGTERM.
    pub async fn terminated(&self) -> Duration {
        let mut term = self.term.clone();
        let grace = term.wait_for(Option::is_some).await.map(|g| *g);
        match grace {
            Ok(grace) => grace.unwrap_or_default(),
            // The kubelet is gone and will drop this program with it.
            Err(_) => std::future::pending().await,
        }
    }

    /// Whether SIGTERM has been delivered.
    pub fn is_terminating(&self) -> bool {
        self.term.borrow().is_some()
    }
}

impl ContainerControl {
    /// Delivers SIGTERM with `grace` to run out the program.
    pub fn terminate(&self, grace: Duration) {
        self.term.send_if_modified(|t| {
            let first = t.is_none();
            if first {
                *t = Some(grace);
            }
            first
        });
    }

    /// What the program last reported through [`ContainerIo::set_ready`].
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Resolves when the program changes its readiness; `None` once the program is gone.
    pub async fn ready_changed(&mut self) -> Option<bool> {
        self.ready.changed().await.ok()?;
        Some(*self.ready.borrow_and_update())
    }
}
