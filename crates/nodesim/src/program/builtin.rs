//! Built-in programs: scripted sleeps, exits, crashes and OOM kills, and containers that never
//! start.

use std::future::pending;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::sleep;

use super::{ContainerContext, ContainerIo, ContainerProgram, Exit, StartFailure};

/// A container that runs until a scripted exit or until it is stopped.
///
/// The defaults ([`Scripted::sleep`]) are those of a well-behaved long-running process such as
/// `dockerd` in the `docker` sidecar: ready at once, runs until SIGTERM, then exits 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scripted {
    /// When and how the program exits by itself; `None` runs until stopped.
    pub end: Option<(Duration, Exit)>,
    /// What SIGTERM does.
    pub on_term: OnTerm,
    /// How long after starting the program reports ready (matters with a readiness probe).
    pub ready_after: Duration,
}

/// A program's reaction to SIGTERM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnTerm {
    /// Shut down gracefully: exit with `exit` after `after`.
    Exit {
        /// How long the graceful shutdown takes.
        after: Duration,
        /// The exit it ends with.
        exit: Exit,
    },
    /// Ignore SIGTERM, like a shell running as PID 1: killed with 137 when the grace period
    /// ends.
    Ignore,
}

impl Default for OnTerm {
    fn default() -> Self {
        OnTerm::Exit {
            after: Duration::ZERO,
            exit: Exit::success(),
        }
    }
}

impl Scripted {
    /// Runs until SIGTERM, then exits 0 — the default for every container.
    pub fn sleep() -> Self {
        Self {
            end: None,
            on_term: OnTerm::default(),
            ready_after: Duration::ZERO,
        }
    }

    /// Exits with `code` after `after` (0 gives `Completed`, anything else `Error`).
    pub fn exit_after(code: i32, after: Duration) -> Self {
        Self::ending(after, Exit::code(code))
    }

    /// Crashes with exit code 1 after `after`.
    pub fn crash_after(after: Duration) -> Self {
        Self::ending(
            after,
            Exit::code(1).with_message("nodesim: simulated crash"),
        )
    }

    /// Is killed by the OOM killer after `after`: exit code 137, reason `OOMKilled`.
    pub fn oom_after(after: Duration) -> Self {
        Self::ending(after, Exit::oom_killed())
    }

    /// Runs until `after`, then exits with `exit`.
    pub fn ending(after: Duration, exit: Exit) -> Self {
        Self {
            end: Some((after, exit)),
            ..Self::sleep()
        }
    }

    /// Sets the SIGTERM reaction.
    pub fn with_on_term(mut self, on_term: OnTerm) -> Self {
        self.on_term = on_term;
        self
    }

    /// Sets the delay before the program reports ready.
    pub fn with_ready_after(mut self, ready_after: Duration) -> Self {
        self.ready_after = ready_after;
        self
    }
}

#[async_trait]
impl ContainerProgram for Scripted {
    async fn run(&self, _ctx: ContainerContext, io: ContainerIo) -> Exit {
        let ends = async {
            match &self.end {
                Some((after, exit)) => {
                    sleep(*after).await;
                    exit.clone()
                }
                None => pending().await,
            }
        };
        let stops = async {
            io.terminated().await;
            match &self.on_term {
                OnTerm::Exit { after, exit } => {
                    sleep(*after).await;
                    exit.clone()
                }
                OnTerm::Ignore => pending().await,
            }
        };
        let readies = async {
            sleep(self.ready_after).await;
            io.set_ready(true);
            pending().await
        };
        tokio::select! {
            exit = ends => exit,
            exit = stops => exit,
            exit = readies => exit,
        }
    }
}

/// A container that never starts: its image pull fails forever, or creation never finishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NeverStarts {
    /// The failure each pull attempt reports; `None` hangs in `ContainerCreating`.
    pub failure: Option<StartFailure>,
}

impl NeverStarts {
    /// Every image pull fails: `ErrImagePull`, then `ImagePullBackOff`.
    pub fn image_pull_error() -> Self {
        Self {
            failure: Some(StartFailure::image_pull(
                "nodesim: simulated image pull failure",
            )),
        }
    }

    /// Creation never completes: the container stays in `ContainerCreating`.
    pub fn stuck_creating() -> Self {
        Self { failure: None }
    }
}

#[async_trait]
impl ContainerProgram for NeverStarts {
    async fn prepare(&self, _ctx: &ContainerContext) -> Result<(), StartFailure> {
        match &self.failure {
            Some(failure) => Err(failure.clone()),
            None => pending().await,
        }
    }

    async fn run(&self, _ctx: ContainerContext, _io: ContainerIo) -> Exit {
        pending().await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

    use super::*;

    fn ctx() -> ContainerContext {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "main".to_owned(),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        ContainerContext::for_test(Arc::new(pod), "main").unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn sleep_runs_until_sigterm_and_exits_zero() {
        let (io, control) = ContainerIo::pair();
        let run = tokio::spawn(async move { Scripted::sleep().run(ctx(), io).await });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!run.is_finished());
        assert!(control.is_ready());
        control.terminate(Duration::from_secs(30));
        assert_eq!(run.await.unwrap(), Exit::success());
    }

    #[tokio::test(start_paused = true)]
    async fn scripted_exit_happens_after_its_delay() {
        let (io, _control) = ContainerIo::pair();
        let started = tokio::time::Instant::now();
        let exit = Scripted::oom_after(Duration::from_secs(5))
            .run(ctx(), io)
            .await;
        assert_eq!(exit.reason(), "OOMKilled");
        assert_eq!(exit.code, 137);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn slow_shutdown_takes_its_term_delay() {
        let (io, control) = ContainerIo::pair();
        let program = Scripted::sleep().with_on_term(OnTerm::Exit {
            after: Duration::from_secs(4),
            exit: Exit::code(143),
        });
        control.terminate(Duration::from_secs(30));
        let started = tokio::time::Instant::now();
        let exit = program.run(ctx(), io).await;
        assert_eq!((exit.code, exit.reason()), (143, "Error"));
        assert_eq!(started.elapsed(), Duration::from_secs(4));
    }

    #[tokio::test(start_paused = true)]
    async fn ignoring_sigterm_keeps_running() {
        let (io, control) = ContainerIo::pair();
        let program = Scripted::sleep().with_on_term(OnTerm::Ignore);
        let run = tokio::spawn(async move { program.run(ctx(), io).await });
        control.terminate(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert!(!run.is_finished());
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_is_reported_after_the_delay() {
        let (io, mut control) = ContainerIo::pair();
        let program = Scripted::sleep().with_ready_after(Duration::from_secs(2));
        let _run = tokio::spawn(async move { program.run(ctx(), io).await });
        let started = tokio::time::Instant::now();
        assert_eq!(control.ready_changed().await, Some(true));
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test]
    async fn image_pull_error_fails_every_prepare() {
        let program = NeverStarts::image_pull_error();
        let failure = program.prepare(&ctx()).await.unwrap_err();
        assert_eq!(failure.reason, "ErrImagePull");
        assert_eq!(failure.backoff_reason.as_deref(), Some("ImagePullBackOff"));
    }
}
