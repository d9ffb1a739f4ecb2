//! HorizontalRunnerAutoscaler controller: sets the `replicas` of a RunnerDeployment or
//! RunnerSet from metrics, capacity reservations and schedules.
//!
//! A thin driver around `hangar_core::autoscaler`:
//! 1. **observe** — the autoscaler (its controller's cache), its target (RunnerDeployment from
//!    the shared store, RunnerSet by GET), and only the GitHub observations the metrics ask for
//!    (`suggest_replicas`' protocol) through the cached client: the scope's runners for
//!    `PercentageRunnersBusy`, queued and in-progress runs with their jobs for
//!    `TotalNumberOfQueuedAndInProgressWorkflowRuns`;
//! 2. **decide** — `desired_replicas` (min/max, reservations, scheduled overrides, the
//!    scale-down delay, the target's `effectiveTime`);
//! 3. **apply** — a merge patch of the target's `spec.replicas` (and, for ephemeral runners,
//!    `spec.effectiveTime` from the newest reservation, so completed runners are recreated only
//!    for new demand); expired capacity reservations are pruned from the autoscaler's spec
//!    (guarded by `resourceVersion`, since the webhook server writes the same list);
//! 4. **status** — `observedGeneration`, `desiredReplicas`, `lastSuccessfulScaleOutTime` (on a
//!    scale-out) and `scheduledOverridesSummary`, written only when they change. ARC's
//!    `cacheEntries` is vestigial and never written.
//!
//! The controller reacts to spec changes only (generation predicate): the webhook server's
//! reservation writes reconcile at once, our own status writes do not loop. It requeues at the
//! earliest of the sync period, the next reservation expiry, the end of the scale-down delay and
//! the next scheduled-override boundary.
//!
//! A spec that cannot work (no `maxReplicas`, a bad metric, an unknown target) is reported as a
//! Warning event and a False `ScalingActive` condition, and retried after the sync period, never
//! in a hot loop. A scale-up trigger that can never match a delivery (no event named, an action
//! GitHub never sends) is a False `TriggersValid` condition and one Warning event
//! (`TriggerNeverMatches`); the autoscaler still scales on everything else.

use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt;
use hangar_api::convert::trigger_views;
use hangar_api::horizontal_runner_autoscaler::{CapacityReservation, ScaleTargetKind};
use hangar_api::{
    HorizontalRunnerAutoscaler, HorizontalRunnerAutoscalerStatus, RunnerConfig, RunnerDeployment,
    RunnerSet, annotation as ann, label,
};
use hangar_core::RunnerScope;
use hangar_core::autoscaler::after::{AfterInput, after};
use hangar_core::autoscaler::metrics::{GitHubRunner, MetricTarget, RunnerObservation};
use hangar_core::autoscaler::{
    DesiredInput, Evaluation, Needed, Observations, Reservation, desired_replicas,
    suggest_replicas, trigger_problems,
};
use hangar_github::GitHubApi;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt, predicates};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use super::{github_scope, k8s_time, object_name, rfc3339, wait_until_stored};
use crate::conditions::{self, Desired, kind, reason};
use crate::context::Context;
use crate::error::{Error, Retry, github_err, kube_err};
use crate::reconciler::Reconciler;
use hangar_runtime::watch::Triggers;

pub use hangar_api::convert::{
    capacity_reservation, metric_of, reservation_of, scheduled_overrides,
};

/// Field manager for what this controller writes.
pub use hangar_runtime::managers::HRA as MANAGER;

/// Event reason when the target's replica count changes.
pub const REASON_SCALED: &str = "RunnerAutoscaled";

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

/// The autoscaler controller in the shared skeleton. Bad specs are re-checked after the sync
/// period, not on the next change only: a missing target may be created later, and time moves
/// schedules.
const SKELETON: Reconciler<HorizontalRunnerAutoscaler> =
    Reconciler::new("horizontalrunnerautoscaler").recheck_permanent_errors();

/// The controller's state: the shared context.
#[derive(Debug)]
pub struct AutoscalerState {
    /// The shared context.
    pub ctx: Arc<Context>,
}

impl AsRef<Context> for AutoscalerState {
    fn as_ref(&self) -> &Context {
        &self.ctx
    }
}

/// Runs the controller until the stream ends.
pub async fn run(ctx: Arc<Context>, hras: Triggers<HorizontalRunnerAutoscaler>) {
    // Spec changes only: a status write (ours) does not trigger another reconcile.
    let trigger = hras
        .map(|hra| Ok::<_, kube::runtime::watcher::Error>(HorizontalRunnerAutoscaler::clone(&hra)))
        .predicate_filter(predicates::generation, Default::default());
    let state = Arc::new(AutoscalerState { ctx: ctx.clone() });
    // Sets ask for a fresh observation when they hold a finished runner's place on it.
    let asked = ctx.observations.wake_ups().map(|woken| {
        futures::stream::unfold(woken, |mut woken| async move {
            woken.recv().await.map(|hra| (hra, woken))
        })
    });
    let controller = Controller::for_stream(trigger, ctx.stores.hras.clone());
    let controller = match asked {
        Some(asked) => controller.reconcile_on(asked),
        None => controller,
    };
    controller
        .with_config(ctx.settings.controller_config())
        .run(
            SKELETON.reconcile(reconcile_reporting),
            SKELETON.error_policy(),
            state,
        )
        .for_each(|_| async {})
        .await;
}

/// What the autoscaler needs to know about its target.
#[derive(Clone, Debug)]
struct Target {
    kind: ScaleTargetKind,
    name: String,
    config: RunnerConfig,
    replicas: Option<i32>,
    effective_time: Option<SystemTime>,
}

impl Target {
    fn describe(&self) -> String {
        format!("{:?} {}", self.kind, self.name)
    }

    fn ephemeral(&self) -> bool {
        self.config.ephemeral.unwrap_or(true)
    }
}

fn invalid(hra: &HorizontalRunnerAutoscaler, reason: impl std::fmt::Display) -> Error {
    Error::InvalidSpec {
        object: object_name(hra),
        reason: reason.to_string(),
    }
}

/// [`reconcile`], reporting failures a user must act on as a False `ScalingActive` condition
/// (besides the Warning event of the shared error policy): `kubectl get hra -o yaml` shows why an
/// autoscaler does nothing.
async fn reconcile_reporting(
    hra: Arc<HorizontalRunnerAutoscaler>,
    state: Arc<AutoscalerState>,
) -> Result<Action, Error> {
    let ctx = state.ctx.clone();
    let result = reconcile(hra.clone(), state).await;
    if let Err(error) = &result
        && matches!(error.retry(), Retry::OnChange | Retry::Slowly)
    {
        let current = hra
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let wanted = [Desired::no(
            kind::SCALING_ACTIVE,
            error.category(),
            error.to_string(),
        )];
        let conditions = conditions::merge(&current, &wanted, hra.metadata.generation, ctx.now());
        if conditions != current {
            let patch = json!({ "status": { "conditions": conditions } });
            if let Err(e) = Api::<HorizontalRunnerAutoscaler>::namespaced(
                ctx.client.clone(),
                &hra.namespace().unwrap_or_default(),
            )
            .patch_status(&hra.name_any(), &patch_params(), &Patch::Merge(&patch))
            .await
            {
                warn!(autoscaler = %object_name(hra.as_ref()), error = %e, "cannot write condition");
            }
        }
    }
    result
}

/// Reconciles one HorizontalRunnerAutoscaler.
pub async fn reconcile(
    hra: Arc<HorizontalRunnerAutoscaler>,
    state: Arc<AutoscalerState>,
) -> Result<Action, Error> {
    let ctx = state.ctx.clone();
    if hra.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = ctx.now();
    let ns = hra.namespace().unwrap_or_default();
    // The webhook server routes deliveries by the shared store, which may trail this
    // controller's own watch: an autoscaler reports itself reconciled only once a delivery
    // can find it (a job queued right after a `kubectl apply` is not ignored).
    wait_until_stored(&ctx.stores.hras, &ns, &[hra.name_any()]).await;

    // Observe: the target, then whatever the metrics ask for.
    let target = observe_target(&hra, &ctx, &ns).await?;
    let scope = RunnerScope::from_fields(
        target.config.enterprise.as_deref(),
        target.config.organization.as_deref(),
        target.config.repository.as_deref(),
    )
    .map_err(|e| invalid(&hra, format!("target {}: {e}", target.describe())))?;
    let metrics = hra
        .spec
        .metrics
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, m)| metric_of(i, m))
        .collect::<Result<Vec<_>, String>>()
        .map_err(|e| invalid(&hra, e))?;
    let labels = target.config.labels.clone().unwrap_or_default();
    let metric_target = MetricTarget {
        scope: &scope,
        runner_labels: &labels,
        replicas: target.replicas.and_then(|r| u32::try_from(r).ok()),
        max_replicas: hra.spec.max_replicas.and_then(|m| u32::try_from(m).ok()),
    };
    let mut observed = Observations::default();
    let mut github: Option<Arc<dyn GitHubApi>> = None;
    let suggestion = loop {
        let needed = match suggest_replicas(&metrics, &metric_target, &observed)
            .map_err(|e| invalid(&hra, e))?
        {
            Evaluation::Ready(s) => break s,
            Evaluation::Needs(needed) => needed,
        };
        // Only autoscalers whose metrics need GitHub read their credentials.
        let gh = match &github {
            Some(gh) => gh.clone(),
            None => {
                let from = hra.spec.github_api_credentials_from.as_ref();
                let gh = ctx.github_for(&ns, from).await?;
                github = Some(gh.clone());
                gh
            }
        };
        match needed {
            Needed::Runners if observed.runners.is_none() => {
                observed.runners = Some(observe_runners(&ctx, &*gh, &ns, &target, &scope).await?);
            }
            Needed::WorkflowRuns { repositories } if observed.workflow_runs.is_none() => {
                let mut runs = Vec::new();
                // Asked afresh, not from the response cache: the count is recorded with the
                // time of this reconcile (`status.metricsObservedTime`), and a set releases
                // finished runners' places by it.
                for repo in repositories {
                    runs.extend(ctx.workflow_runs.active_runs(&*gh, &repo, true).await?);
                }
                observed.workflow_runs = Some(runs);
            }
            Needed::Jobs { run }
                if observed
                    .workflow_runs
                    .as_ref()
                    .and_then(|r| r.get(observed.run_jobs.len()))
                    == Some(&run) =>
            {
                // A run's jobs listed earlier (by any evaluation or the pull recovery) are
                // counted again while that listing holds (`hangar_core::autoscaler::job_lists`):
                // no call for an unchanged run.
                let jobs = ctx.workflow_runs.jobs(&*gh, &run, now).await?;
                observed.run_jobs.push(jobs);
            }
            // The protocol asked twice for the same thing: a bug, not worth a hot loop.
            needed => {
                return Err(invalid(
                    &hra,
                    format!("metrics asked again for {needed:?}; this is a bug in Hangar"),
                ));
            }
        }
    };

    // Decide.
    let overrides = scheduled_overrides(hra.spec.scheduled_overrides.as_deref().unwrap_or(&[]))
        .map_err(|e| invalid(&hra, e))?;
    let stored_reservations = hra.spec.capacity_reservations.clone().unwrap_or_default();
    let reservations: Vec<Reservation> = stored_reservations.iter().map(reservation_of).collect();
    let status = hra.status.clone().unwrap_or_default();
    let input = DesiredInput {
        min_replicas: hra.spec.min_replicas,
        max_replicas: hra.spec.max_replicas,
        scale_down_delay_seconds: hra.spec.scale_down_delay_seconds_after_scale_out,
        default_scale_down_delay: ctx.settings.default_scale_down_delay,
        scheduled_overrides: overrides.clone(),
        suggestion,
        reservations: reservations.clone(),
        previous_desired: status.desired_replicas.and_then(|d| u32::try_from(d).ok()),
        last_scale_out: status.last_successful_scale_out_time.as_ref().map(k8s_time),
        ephemeral: target.ephemeral(),
        now,
    };
    let decision = desired_replicas(&input).map_err(|e| invalid(&hra, e))?;
    debug!(autoscaler = %object_name(hra.as_ref()), reason = %decision.reason, "decided");

    let target_reads_demand =
        super::sets::reads_demand_of(&ctx, &ns, target.kind, &target.name, &hra);
    let plan = after(&AfterInput {
        decision: &decision,
        target_replicas: target.replicas,
        target_effective_time: target.effective_time,
        target_reads_demand,
        reservations: &reservations,
        overrides: &overrides,
        last_scale_out: input.last_scale_out,
        now,
        sync_period: ctx.settings.sync_period,
    });
    let desired = plan.desired;

    // Apply: the target first (the point of it all), then the autoscaler's own spec.
    if let Some(patch) = plan.patch_target {
        patch_target(&ctx, &ns, &target, patch.replicas, patch.effective_time).await?;
    }
    if let Some(from) = plan.scaled_from {
        let from = from.map_or_else(|| "unset".to_owned(), |r| r.to_string());
        info!(autoscaler = %object_name(hra.as_ref()), target = %target.describe(), from, to = desired, reason = %decision.reason, "scaling");
        ctx.event(
            hra.object_ref(&()),
            false,
            REASON_SCALED,
            format!(
                "{} scaled from {from} to {desired}: {}",
                target.describe(),
                decision.reason
            ),
        );
    }
    if let Some(keep) = &plan.keep {
        // Expired reservations no longer count; removing them is housekeeping, retried by the
        // next reconcile rather than failing this one.
        let active: Vec<&CapacityReservation> =
            keep.iter().map(|&n| &stored_reservations[n]).collect();
        if let Err(error) = prune_reservations(&ctx, &hra, &ns, &active).await {
            warn!(autoscaler = %object_name(hra.as_ref()), %error, "cannot prune reservations");
        }
    }

    // Status.
    let triggers = trigger_condition(&hra);
    let uid = hra.metadata.uid.clone().unwrap_or_default();
    if triggers.status {
        ctx.said_once.forget(&uid, reason::TRIGGER_NEVER_MATCHES);
    } else if !condition_says(&status, &triggers)
        && ctx
            .said_once
            .first(&uid, reason::TRIGGER_NEVER_MATCHES, &triggers.message)
    {
        ctx.event(
            hra.object_ref(&()),
            true,
            reason::TRIGGER_NEVER_MATCHES,
            triggers.message.clone(),
        );
    }
    // A set holding a finished runner's place asked for this observation: record its time
    // even if nothing else changed, so that the set learns what it accounts for.
    let asked = ctx.observations.take_due(&ns, &hra.name_any(), now);
    let counted_jobs = decision
        .counted_jobs
        .map(|jobs| i32::try_from(jobs).unwrap_or(i32::MAX));
    let mut new_status = HorizontalRunnerAutoscalerStatus {
        observed_generation: hra.metadata.generation,
        desired_replicas: Some(desired),
        last_successful_scale_out_time: plan
            .last_scale_out
            .and_then(|t| jiff::Timestamp::try_from(t).ok())
            .map(Time),
        cache_entries: status.cache_entries.clone(),
        counted_jobs,
        metrics_observed_time: status.metrics_observed_time.clone(),
        scheduled_overrides_summary: decision.schedule_summary.clone(),
        conditions: Some(conditions::merge(
            status.conditions.as_deref().unwrap_or_default(),
            &[
                Desired::yes(
                    kind::SCALING_ACTIVE,
                    reason::DESIRED_REPLICAS_COMPUTED,
                    format!("{} wants {desired} runner(s)", target.describe()),
                ),
                triggers,
            ],
            hra.metadata.generation,
            now,
        )),
    };
    let mut requeue = plan.requeue;
    if asked || !same_status(&status, &new_status) {
        new_status.metrics_observed_time = counted_jobs
            .and(jiff::Timestamp::try_from(now).ok())
            .map(Time);
        let patch = json!({ "status": {
            "observedGeneration": new_status.observed_generation,
            "desiredReplicas": new_status.desired_replicas,
            "lastSuccessfulScaleOutTime": new_status.last_successful_scale_out_time,
            "scheduledOverridesSummary": new_status.scheduled_overrides_summary,
            "conditions": new_status.conditions,
            "countedJobs": new_status.counted_jobs,
            "metricsObservedTime": new_status.metrics_observed_time,
        }});
        let write = async {
            Api::<HorizontalRunnerAutoscaler>::namespaced(ctx.client.clone(), &ns)
                .patch_status(&hra.name_any(), &patch_params(), &Patch::Merge(&patch))
                .await
                .map(drop)
                .map_err(kube_err(
                    "patch status of horizontalrunnerautoscaler",
                    object_name(hra.as_ref()),
                ))
        };
        // Every reservation the webhook server records is a spec change, so most changes
        // under load are a new generation and nothing else: those are paced like a set's
        // status. What the next decision reads (desired replicas, the last scale-out, the
        // counted jobs) and what a set asked for is written at once.
        let uid = hra.metadata.uid.clone().unwrap_or_default();
        let held = if !asked && only_generation_differs(&status, &new_status) {
            ctx.status_pace.write(&uid, write).await?
        } else {
            ctx.status_pace.write_now(&uid, write).await?;
            None
        };
        match held {
            Some(held) => requeue = requeue.min(held),
            None => {
                debug!(autoscaler = %object_name(hra.as_ref()), observed = ?new_status.metrics_observed_time, "status written");
            }
        }
    }

    Ok(Action::requeue(requeue))
}

/// `TriggersValid`: whether every `scaleUpTriggers` entry can match a delivery, naming the
/// entries that cannot (`hangar_core::autoscaler::trigger_problems`).
fn trigger_condition(hra: &HorizontalRunnerAutoscaler) -> Desired {
    let triggers = trigger_views(hra);
    let problems = trigger_problems(&triggers);
    if !problems.is_empty() {
        let message: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Desired::no(
            kind::TRIGGERS_VALID,
            reason::TRIGGER_NEVER_MATCHES,
            message.join("; "),
        );
    }
    let message = if triggers.is_empty() {
        "no scaleUpTriggers: scales on its metrics and schedules alone"
    } else {
        "every scale-up trigger can match a webhook delivery"
    };
    Desired::yes(kind::TRIGGERS_VALID, reason::TRIGGERS_CAN_MATCH, message)
}

/// Whether `status` already holds condition `wanted` with the same status and message.
fn condition_says(status: &HorizontalRunnerAutoscalerStatus, wanted: &Desired) -> bool {
    status.conditions.iter().flatten().any(|c| {
        c.type_ == wanted.kind
            && (c.status == "True") == wanted.status
            && c.message == wanted.message
    })
}

/// Whether two statuses carry the same information (timestamps compared at second precision,
/// as the API server stores them).
fn same_status(a: &HorizontalRunnerAutoscalerStatus, b: &HorizontalRunnerAutoscalerStatus) -> bool {
    let secs = |t: &Option<Time>| t.as_ref().map(|t| t.0.as_second());
    a.observed_generation == b.observed_generation
        && a.desired_replicas == b.desired_replicas
        && secs(&a.last_successful_scale_out_time) == secs(&b.last_successful_scale_out_time)
        && a.scheduled_overrides_summary == b.scheduled_overrides_summary
        && a.conditions == b.conditions
        && a.counted_jobs == b.counted_jobs
}

/// Whether `b` differs from `a` in the observed generation alone (the status's and its
/// conditions'): the autoscaler saw a new spec that changed nothing it reports.
fn only_generation_differs(
    a: &HorizontalRunnerAutoscalerStatus,
    b: &HorizontalRunnerAutoscalerStatus,
) -> bool {
    let at_generation = |s: &HorizontalRunnerAutoscalerStatus| {
        let mut s = s.clone();
        s.observed_generation = None;
        for c in s.conditions.iter_mut().flatten() {
            c.observed_generation = None;
        }
        s
    };
    same_status(&at_generation(a), &at_generation(b))
}

/// Reads the target named by `scaleTargetRef`.
async fn observe_target(
    hra: &HorizontalRunnerAutoscaler,
    ctx: &Context,
    ns: &str,
) -> Result<Target, Error> {
    let reference = hra.spec.scale_target_ref.clone().unwrap_or_default();
    let kind = reference.kind.unwrap_or_default();
    let name = reference
        .name
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid(hra, "scaleTargetRef.name is required"))?;
    let not_found = || {
        invalid(
            hra,
            format!("scaleTargetRef: {kind:?} {name} does not exist"),
        )
    };
    match kind {
        ScaleTargetKind::RunnerDeployment => {
            let rd = cached_or_read(&ctx.stores.deployments, ctx, ns, &name)
                .await?
                .ok_or_else(not_found)?;
            Ok(Target {
                kind,
                name,
                config: rd.spec.template.spec.config.clone(),
                replicas: rd.spec.replicas,
                effective_time: rd.spec.effective_time.as_ref().map(k8s_time),
            })
        }
        ScaleTargetKind::RunnerSet => {
            let rs = cached_or_read(&ctx.stores.runner_sets, ctx, ns, &name)
                .await?
                .ok_or_else(not_found)?;
            Ok(Target {
                kind,
                name,
                config: rs.spec.config.clone(),
                replicas: rs.spec.stateful_set.replicas,
                effective_time: rs.spec.effective_time.as_ref().map(k8s_time),
            })
        }
    }
}

/// The target `name` from `store`, or, when the store does not show it (just created, or
/// really missing), by GET, waiting for the store to show one that exists: the webhook server
/// matches jobs to targets through the same stores.
async fn cached_or_read<K>(
    store: &kube::runtime::reflector::Store<K>,
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<Option<Arc<K>>, Error>
where
    K: hangar_runtime::watch::Watched + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    if let Some(cached) = store.get(&ObjectRef::<K>::new(name).within(ns)) {
        return Ok(Some(cached));
    }
    let read = Api::<K>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(kube_err(
            "get scale target",
            format!("{}/{ns}/{name}", K::kind(&())),
        ))?;
    if read.is_some() {
        wait_until_stored(store, ns, &[name.to_owned()]).await;
    }
    Ok(read.map(Arc::new))
}

/// Runner names of the target, GitHub's runners at its scope, and the target's pods whose
/// unregistration GitHub refused (they run a job).
async fn observe_runners(
    ctx: &Context,
    github: &dyn GitHubApi,
    ns: &str,
    target: &Target,
    scope: &RunnerScope,
) -> Result<RunnerObservation, Error> {
    let target_runners: Vec<String> = match target.kind {
        // Runner names are pod names; Runners carry their deployment's name as a label.
        ScaleTargetKind::RunnerDeployment => ctx
            .stores
            .runners
            .state()
            .iter()
            .filter(|r| r.namespace().as_deref() == Some(ns))
            .filter(|r| {
                r.labels()
                    .get(label::RUNNER_DEPLOYMENT_NAME)
                    .map(String::as_str)
                    == Some(target.name.as_str())
            })
            .map(|r| r.name_any())
            .collect(),
        ScaleTargetKind::RunnerSet => ctx
            .stores
            .pods
            .state()
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(ns))
            .filter(|p| {
                p.labels().get(label::RUNNERSET_NAME).map(String::as_str)
                    == Some(target.name.as_str())
            })
            .map(|p| p.name_any())
            .collect(),
    };
    // The target's runners whose pod (from the cache) is as `pick` says.
    let runners_whose_pod =
        |pick: &dyn Fn(&hangar_runtime::pod::RunnerPod) -> bool| -> Vec<String> {
            target_runners
                .iter()
                .filter(|name| {
                    ctx.stores
                        .pods
                        .get(&ObjectRef::new(name).within(ns))
                        .is_some_and(|p| pick(&p))
                })
                .cloned()
                .collect()
        };
    let failing_unregistration = runners_whose_pod(&|p| {
        p.annotations()
            .contains_key(ann::UNREGISTRATION_FAILURE_MESSAGE)
    });
    // Runners that are neither working nor on their way are no capacity: counted as such, a
    // pool of broken pods would look idle and never grow.
    let unhealthy = runners_whose_pod(&|p| {
        !ctx.runner_health(p, super::registration_spent(p))
            .is_capacity()
    });
    let github_scope = github_scope(scope);
    let github_runners = github
        .list_runners(&github_scope)
        .await
        .map_err(github_err("list runners", &github_scope))?
        .into_iter()
        .map(|r| GitHubRunner {
            name: r.name,
            busy: r.busy,
        })
        .collect();
    Ok(RunnerObservation {
        target_runners,
        github_runners,
        failing_unregistration,
        unhealthy,
    })
}

/// Sets the target's `spec.replicas` and, when given, `spec.effectiveTime`. A merge patch: the
/// autoscaler owns these fields in ARC too, and a merge patch never conflicts with the field
/// ownership of whoever applied the manifest.
async fn patch_target(
    ctx: &Context,
    ns: &str,
    target: &Target,
    replicas: i32,
    effective_time: Option<SystemTime>,
) -> Result<(), Error> {
    let mut spec = json!({ "replicas": replicas });
    if let Some(t) = effective_time {
        spec["effectiveTime"] = json!(rfc3339(t));
    }
    let patch = json!({ "spec": spec });
    let params = patch_params();
    let object = format!("{ns}/{}", target.name);
    match target.kind {
        ScaleTargetKind::RunnerDeployment => {
            Api::<RunnerDeployment>::namespaced(ctx.client.clone(), ns)
                .patch(&target.name, &params, &Patch::Merge(&patch))
                .await
                .map_err(kube_err("scale runnerdeployment", object))?;
        }
        ScaleTargetKind::RunnerSet => {
            Api::<RunnerSet>::namespaced(ctx.client.clone(), ns)
                .patch(&target.name, &params, &Patch::Merge(&patch))
                .await
                .map_err(kube_err("scale runnerset", object))?;
        }
    }
    Ok(())
}

/// Writes back only the unexpired reservations, if nobody changed the list meanwhile (the
/// webhook server writes it too; on a conflict the next reconcile prunes).
async fn prune_reservations(
    ctx: &Context,
    hra: &HorizontalRunnerAutoscaler,
    ns: &str,
    active: &[&CapacityReservation],
) -> Result<(), Error> {
    let active: Vec<CapacityReservation> = active.iter().map(|r| (*r).clone()).collect();
    let patch = reservations_patch(hra, &active);
    let result = Api::<HorizontalRunnerAutoscaler>::namespaced(ctx.client.clone(), ns)
        .patch(&hra.name_any(), &patch_params(), &patch)
        .await;
    match result {
        Ok(_) => {
            debug!(autoscaler = %object_name(hra), kept = active.len(), "pruned expired capacity reservations");
            Ok(())
        }
        Err(e) if is_conflict(&e) => Ok(()),
        Err(e) => Err(kube_err(
            "prune capacity reservations of horizontalrunnerautoscaler",
            object_name(hra),
        )(e)),
    }
}

pub use hangar_runtime::reservations::{is_conflict, reservations_patch};

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn status(generation: i64, desired: i32, message: &str) -> HorizontalRunnerAutoscalerStatus {
        HorizontalRunnerAutoscalerStatus {
            observed_generation: Some(generation),
            desired_replicas: Some(desired),
            conditions: Some(vec![Condition {
                type_: kind::SCALING_ACTIVE.to_owned(),
                status: "True".to_owned(),
                reason: reason::DESIRED_REPLICAS_COMPUTED.to_owned(),
                message: message.to_owned(),
                observed_generation: Some(generation),
                last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn a_new_generation_alone_is_told_apart_from_a_change_the_decision_reads() {
        let was = status(4, 2, "wants 2");
        assert!(only_generation_differs(&was, &status(5, 2, "wants 2")));
        assert!(
            !only_generation_differs(&was, &status(5, 3, "wants 2")),
            "desired replicas changed"
        );
        assert!(
            !only_generation_differs(&was, &status(5, 2, "wants 3")),
            "a condition changed"
        );
        let mut scaled_out = status(5, 2, "wants 2");
        scaled_out.last_successful_scale_out_time = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(!only_generation_differs(&was, &scaled_out), "scaled out");
        let mut counted = status(5, 2, "wants 2");
        counted.counted_jobs = Some(7);
        assert!(
            !only_generation_differs(&was, &counted),
            "counted jobs changed"
        );
    }
}
