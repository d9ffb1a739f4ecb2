//! Pull recovery: every `--webhook-pull-interval` (default 5 min, `0` switches it off) the
//! leader reserves runners for queued jobs whose `workflow_job` delivery was lost, as
//! [`hangar_core::autoscaler::pull`] decides. GitHub does not redeliver by itself, so without
//! this a lost `queued` delivery would leave its job waiting for a runner forever.
//!
//! Which autoscalers: those that scale on webhooks alone — a single `workflowJob` scale-up
//! trigger and no `metrics` (a metric already counts queued jobs) — whose target's runners
//! register at a repository. Organization and enterprise runners are not pulled: finding their
//! queued jobs means listing every repository's runs.
//!
//! One pass, per such autoscaler: *observe* its repository's queued and in-progress runs (a
//! run with one job done and one queued is in progress) and their jobs, through the caching
//! GitHub client with the autoscaler's credentials, keeping the queued jobs; the webhook's
//! routing table ([`crate::webhook_server::candidates`]); *decide* with `pull_operations`;
//! *apply* the `+1`s with [`crate::reservation_write::write_operations`], the webhook writer's
//! compare-and-swap, so a job the webhook recorded meanwhile counts once.
//!
//! API cost per repository and pass: nothing for an autoscaler whose active reservations fill
//! its `maxReplicas` (no job could be reserved: under a backlog whose deliveries arrived, every
//! queued job holds one); otherwise 2 run lists plus, oldest run first until the jobs found
//! fill the room, one job list per queued or in-progress run whose jobs no earlier pass or
//! queued-runs evaluation listed, or that changed since ([`hangar_runtime::workflow_runs`]; a
//! one-job run that only moved from queued to in progress is not listed again); at the
//! default interval, at most 24 run lists an hour. Lists are
//! revalidated with the ETag the last answer carried, and an unchanged list is a 304, which
//! does not count against the rate limit. A job whose delivery was lost
//! is seen by the next pass, which starts at most one interval after the job was queued, and
//! is reserved by the end of that pass (its lists and one write per autoscaler); the HRA
//! controller's scale-up follows at once, triggered by the write.

use std::sync::Arc;

use hangar_api::HorizontalRunnerAutoscaler;
use hangar_core::RunnerScope;
use hangar_core::autoscaler::metrics::{JobStatus, RepositoryRef, WorkflowRun};
use hangar_core::autoscaler::{
    JobKey, JobOrigin, PullInput, QueuedJob, pull_operations, pull_room,
};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, info, warn};

use crate::context::Context;
use crate::error::Error;
use crate::reservation_write::{WriteError, Written, job_duration, write_operations};
use crate::webhook_server::{HraKey, WebhookStores, candidates};

/// Field manager of the pull's reservation writes.
pub use hangar_runtime::managers::PULL as MANAGER;

/// Why one autoscaler's pull did nothing this pass (the next pass tries again).
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// Its credentials or GitHub's listing failed.
    #[error("unable to list queued jobs: {0}")]
    Observe(Error),
    /// The reservations were not stored.
    #[error("unable to store reservations: {0}")]
    Write(WriteError),
}

/// Default interval between two passes (a pure setting, so it lives with the pull rules).
pub use hangar_core::autoscaler::pull::DEFAULT_INTERVAL;

/// Runs a pass at once (deliveries may have been lost while no leader ran) and then one
/// starting every `ctx.settings.webhook_pull_interval`, counted start to start so that the
/// time a pass takes does not add to the bound; a pass that overruns the interval is followed
/// at once by the next. Returns at once when the interval is zero.
pub async fn run(ctx: Arc<Context>, stores: WebhookStores) {
    let period = ctx.settings.webhook_pull_interval;
    if period.is_zero() {
        return;
    }
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        pass(&ctx, &stores).await;
    }
}

/// One pass over every autoscaler that scales on webhooks alone.
pub async fn pass(ctx: &Context, stores: &WebhookStores) {
    let candidates = candidates(stores);
    let mut hras = stores.hras.state();
    hras.sort_by_key(|h| (h.namespace(), h.name_any()));
    for hra in hras.iter().filter(|h| webhook_only(h)) {
        let Some(ns) = hra.namespace() else { continue };
        let key: HraKey = (ns, hra.name_any());
        let Some(candidate) = candidates.iter().find(|c| c.id == key) else {
            continue; // its target is missing or invalid: the HRA controller reports that
        };
        let RunnerScope::Repository { owner, name } = &candidate.scope else {
            continue;
        };
        if let Err(error) = pull_one(ctx, stores, hra, &key, &candidates, owner, name).await {
            warn!(autoscaler = %format!("{}/{}", key.0, key.1), %error, "pull of queued jobs failed");
        }
    }
}

/// Whether `hra` scales on `workflow_job` deliveries and nothing that pulls already.
fn webhook_only(hra: &HorizontalRunnerAutoscaler) -> bool {
    job_duration(hra).is_some() && hra.spec.metrics.as_ref().is_none_or(Vec::is_empty)
}

async fn pull_one(
    ctx: &Context,
    stores: &WebhookStores,
    hra: &HorizontalRunnerAutoscaler,
    key: &HraKey,
    candidates: &[hangar_core::autoscaler::TargetCandidate<HraKey>],
    owner: &str,
    repo: &str,
) -> Result<(), PullError> {
    let Some(cap) = hra.spec.max_replicas.and_then(|m| u32::try_from(m).ok()) else {
        return Ok(()); // invalid without it; the HRA controller reports that
    };
    let (ns, name) = key;
    let reservations = hangar_api::convert::reservations_of(hra);
    let now = ctx.now();
    let room = pull_room(&reservations, cap, now);
    if room == 0 {
        // Nothing could be reserved, whatever the listing showed.
        debug!(autoscaler = %format!("{ns}/{name}"), "at maxReplicas: nothing to pull");
        return Ok(());
    }
    let decide = |queued: &[QueuedJob]| {
        pull_operations(&PullInput {
            autoscaler: key,
            candidates,
            origin: JobOrigin {
                owner,
                repository: repo,
                // Only the repository tier is pulled, which any owner's jobs reach.
                owner_is_user: false,
                enterprise: None,
            },
            queued,
            reservations: &reservations,
            cap,
            now,
        })
    };
    let github = ctx
        .github_for(ns, hra.spec.github_api_credentials_from.as_ref())
        .await
        .map_err(PullError::Observe)?;
    let repository = RepositoryRef {
        owner: owner.to_owned(),
        name: repo.to_owned(),
    };
    // Oldest runs first, and no further once the jobs found fill the room.
    let (mut queued, mut ops) = (vec![], vec![]);
    for run in ctx
        .workflow_runs
        .active_runs(&*github, &repository, false)
        .await
        .map_err(PullError::Observe)?
    {
        let jobs = ctx
            .workflow_runs
            .jobs(&*github, &run, ctx.now())
            .await
            .map_err(PullError::Observe)?;
        queued.extend(queued_jobs(jobs));
        ops = decide(&queued);
        if ops.len() >= room {
            break;
        }
    }
    debug!(autoscaler = %format!("{ns}/{name}"), queued = queued.len(), reserve = ops.len(), "pulled queued jobs");
    if ops.is_empty() {
        return Ok(());
    }
    let cached = stores.hras.get(&ObjectRef::new(name).within(ns));
    let written = write_operations(
        &ctx.client,
        ns,
        name,
        cached,
        &ops,
        || ctx.now(),
        MANAGER,
        || {},
    )
    .await
    .map_err(PullError::Write)?;
    if let Written::Stored(update) = written {
        let jobs: Vec<u64> = ops.iter().filter_map(|o| o.job).map(|j| j.id).collect();
        info!(
            autoscaler = %format!("{ns}/{name}"),
            added = update.added,
            ?jobs,
            "reserved runners for queued jobs whose webhook delivery was lost"
        );
    }
    Ok(())
}

/// The queued jobs of one run.
fn queued_jobs(jobs: WorkflowRun) -> impl Iterator<Item = QueuedJob> {
    jobs.jobs
        .into_iter()
        .filter(|j| j.status == JobStatus::Queued)
        .map(|j| QueuedJob {
            job: JobKey {
                id: j.id,
                attempt: j.run_attempt,
            },
            labels: j.labels,
            created_at: j.created_at,
        })
}
