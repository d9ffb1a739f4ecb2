//! One run of one container: environment, image pull and creation (retried with back-off),
//! then the program until it exits. Runs as a task owned by the pod's worker; aborting the
//! task is SIGKILL.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::time::sleep;

use super::NodeRuntime;
use crate::env::{self, Addresses};
use crate::program::{
    ContainerContext, ContainerIo, ContainerKind, ContainerProgram, Exit, reasons,
};
use crate::status::Slot;
use crate::writer::bump;

/// What a container run tells its pod worker.
#[derive(Debug)]
pub(super) struct Event {
    pub slot: Slot,
    pub run: u64,
    pub kind: EventKind,
}

#[derive(Debug)]
pub(super) enum EventKind {
    /// Not started yet, for this reason.
    Waiting { reason: String, message: String },
    /// The program is running.
    Started { at: Timestamp },
    /// The program changed its readiness.
    Ready(bool),
    /// The program exited.
    Exited(Exit),
}

/// Everything one run needs.
pub(super) struct Run {
    pub program: Arc<dyn ContainerProgram>,
    pub pod: Arc<Pod>,
    pub container: Container,
    pub kind: ContainerKind,
    pub slot: Slot,
    pub run: u64,
    pub restart_count: i32,
    pub container_id: String,
    pub node: Arc<NodeRuntime>,
    pub pod_ip: String,
    pub term: watch::Receiver<Option<Duration>>,
    pub events: mpsc::UnboundedSender<Event>,
}

impl Run {
    fn send(&self, kind: EventKind) {
        // A closed channel means the worker is gone and this task is about to be dropped.
        let _ = self.events.send(Event {
            slot: self.slot,
            run: self.run,
            kind,
        });
    }

    pub async fn execute(self) {
        let timing = &self.node.shared.config.timing;
        let mut backoff = timing.pull_backoff_initial;
        let mut next_delay = || {
            let delay = backoff;
            backoff = (backoff * 2).min(timing.pull_backoff_max);
            delay
        };

        let addresses = Addresses {
            node_name: &self.node.id.name,
            host_ip: &self.node.id.host_ip,
            pod_ip: &self.pod_ip,
        };
        let objects = self.node.shared.objects.clone();
        let env = loop {
            match env::resolve(&self.pod, &self.container, &addresses, &*objects).await {
                Ok(env) => break env,
                Err(message) => {
                    self.send(EventKind::Waiting {
                        reason: reasons::CREATE_CONTAINER_CONFIG_ERROR.to_owned(),
                        message,
                    });
                    sleep(next_delay()).await;
                }
            }
        };
        let ctx = ContainerContext {
            pod: self.pod.clone(),
            container: self.container.clone(),
            kind: self.kind,
            node_name: self.node.id.name.clone(),
            pod_ip: self.pod_ip.clone(),
            host_ip: self.node.id.host_ip.clone(),
            restart_count: self.restart_count,
            container_id: self.container_id.clone(),
            env,
        };

        loop {
            match self.program.prepare(&ctx).await {
                Ok(()) => break,
                Err(failure) => {
                    self.send(EventKind::Waiting {
                        reason: failure.reason,
                        message: failure.message,
                    });
                    let delay = next_delay();
                    let Some(reason) = failure.backoff_reason else {
                        sleep(delay).await;
                        continue;
                    };
                    // The failure shows for a moment, then the back-off until the retry.
                    let shown = (delay / 4).min(Duration::from_secs(2));
                    sleep(shown).await;
                    let image = self.container.image.as_deref().unwrap_or_default();
                    self.send(EventKind::Waiting {
                        reason,
                        message: format!("Back-off pulling image \"{image}\""),
                    });
                    sleep(delay - shown).await;
                }
            }
        }

        let (io, mut ready) = ContainerIo::attached(self.term.clone());
        bump(&self.node.shared.stats.containers_started);
        self.send(EventKind::Started {
            at: Timestamp::now(),
        });
        let mut program = self.program.run(ctx, io);
        loop {
            tokio::select! {
                exit = &mut program => {
                    self.send(EventKind::Exited(exit));
                    return;
                }
                Ok(()) = ready.changed() => {
                    let now = *ready.borrow_and_update();
                    self.send(EventKind::Ready(now));
                }
            }
        }
    }
}
