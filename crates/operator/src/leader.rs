//! Leader election with a `coordination.k8s.io/v1` Lease, so that of several controller
//! replicas exactly one reconciles (webhook servers run on every replica).
//!
//! The decisions are [`hangar_core::leader`]'s; this module reads and writes the Lease. Every
//! write is conditional on the `resourceVersion` just read: of two replicas racing for an
//! expired Lease one wins, the other gets a 409 and follows. The leader renews every
//! `retry_period`; when it has not managed to renew for `renew_deadline` it reports the loss,
//! and the manager stops (the process exits and is restarted as a follower) — never two
//! leaders acting at once. On shutdown the leader releases the Lease, so a successor takes
//! over at once instead of after the Lease duration.

use std::time::{Duration, SystemTime};

use hangar_core::leader::{LeaderStep, LeaseView, decide, still_leading};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{info, warn};

/// Timings, as client-go's leader election names them.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This replica's identity (pod name plus a random suffix).
    pub identity: String,
    /// How long a Lease is valid after a renewal (`leaseDurationSeconds`).
    pub lease_duration: Duration,
    /// A leader that could not renew for this long stops acting.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// controller-runtime's defaults: 15 s lease, 10 s renew deadline, 2 s retry.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, identity: String) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// A unique identity for this process: `$POD_NAME` (or the host name) plus a random suffix, so
/// a restarted pod never mistakes its predecessor's Lease for its own.
pub fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "hangar".to_owned());
    let suffix: u32 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id();
    format!("{base}_{suffix:08x}")
}

/// A running election: whether we lead, as a watch channel.
#[derive(Debug)]
pub struct Elector {
    leading: watch::Receiver<bool>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Elector {
    /// Starts campaigning in the background.
    pub fn start(client: Client, config: ElectionConfig) -> Self {
        let (tx, rx) = watch::channel(false);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(campaign(client, config, tx, stop_rx));
        Self {
            leading: rx,
            stop: Some(stop_tx),
            task,
        }
    }

    /// Whether this replica leads right now.
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// Waits until this replica leads.
    pub async fn acquired(&mut self) {
        let _ = self.leading.wait_for(|l| *l).await;
    }

    /// Waits until this replica, having led, no longer does.
    pub async fn lost(&mut self) {
        let _ = self.leading.wait_for(|l| !*l).await;
    }

    /// Stops campaigning and, if leading, releases the Lease.
    pub async fn release(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }

    /// Stops campaigning without releasing (as a crash would): the Lease expires by itself.
    pub fn abandon(mut self) {
        self.stop.take();
        self.task.abort();
    }
}

fn view(lease: &Lease) -> LeaseView {
    let spec = lease.spec.as_ref();
    LeaseView {
        holder: spec.and_then(|s| s.holder_identity.clone()),
        renewed: spec
            .and_then(|s| s.renew_time.as_ref().or(s.acquire_time.as_ref()))
            .map(|t| SystemTime::from(t.0)),
        duration: Duration::from_secs(
            spec.and_then(|s| s.lease_duration_seconds)
                .unwrap_or(15)
                .max(1) as u64,
        ),
    }
}

fn micro_now() -> Option<MicroTime> {
    jiff::Timestamp::try_from(SystemTime::now())
        .ok()
        .map(MicroTime)
}

async fn campaign(
    client: Client,
    config: ElectionConfig,
    leading: watch::Sender<bool>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut last_renewed: Option<SystemTime> = None;
    loop {
        match try_once(&api, &config).await {
            Ok(true) => {
                if last_renewed.is_none() {
                    info!(lease = %config.name, identity = %config.identity, "became leader");
                }
                last_renewed = Some(SystemTime::now());
                leading.send_replace(true);
            }
            Ok(false) => {}
            Err(e) => warn!(lease = %config.name, error = %e, "leader election: lease call failed"),
        }
        if let Some(at) = last_renewed
            && !still_leading(at, SystemTime::now(), config.renew_deadline)
        {
            warn!(lease = %config.name, "lost leadership: could not renew in time");
            leading.send_replace(false);
            last_renewed = None;
        }
        tokio::select! {
            _ = &mut stop => break,
            () = tokio::time::sleep(config.retry_period) => {}
        }
    }
    if *leading.borrow() {
        leading.send_replace(false);
        release(&api, &config).await;
    }
}

/// One acquire-or-renew attempt. `Ok(true)` when we hold the Lease afterwards.
async fn try_once(api: &Api<Lease>, config: &ElectionConfig) -> kube::Result<bool> {
    let current = api.get_opt(&config.name).await?;
    let step = decide(
        current.as_ref().map(view).as_ref(),
        &config.identity,
        SystemTime::now(),
    );
    let now = micro_now();
    let spec = |acquire: bool, previous: Option<&LeaseSpec>| LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(config.lease_duration.as_secs().max(1) as i32),
        acquire_time: if acquire {
            now.clone()
        } else {
            previous.and_then(|p| p.acquire_time.clone())
        },
        renew_time: now.clone(),
        lease_transitions: Some(
            previous.and_then(|p| p.lease_transitions).unwrap_or(0) + i32::from(acquire),
        ),
        ..LeaseSpec::default()
    };
    let write = |lease: Lease| async move {
        match api
            .replace(&config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            // Someone else wrote in between: they won this round.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    };
    match (step, current) {
        (LeaderStep::Create, _) => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    namespace: Some(config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                // `leaseTransitions` counts changes of holder, as client-go does.
                spec: Some(LeaseSpec {
                    lease_transitions: Some(0),
                    ..spec(true, None)
                }),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        (LeaderStep::Acquire, Some(mut lease)) => {
            lease.spec = Some(spec(true, lease.spec.as_ref()));
            write(lease).await
        }
        (LeaderStep::Renew, Some(mut lease)) => {
            lease.spec = Some(spec(false, lease.spec.as_ref()));
            write(lease).await
        }
        (LeaderStep::Follow { .. }, _) | (_, None) => Ok(false),
    }
}

/// Gives the Lease up: no holder, so the next candidate acquires it at its next attempt.
async fn release(api: &Api<Lease>, config: &ElectionConfig) {
    let Ok(Some(mut lease)) = api.get_opt(&config.name).await else {
        return;
    };
    let ours = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        == Some(config.identity.as_str());
    if !ours {
        return;
    }
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = micro_now();
    }
    match api
        .replace(&config.name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => info!(lease = %config.name, "released leadership"),
        Err(e) => warn!(lease = %config.name, error = %e, "could not release the lease"),
    }
}
