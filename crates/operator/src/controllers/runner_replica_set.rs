//! RunnerReplicaSet controller: keeps `replicas` Runners, through owner sync.
//!
//! Observe: the set's Runners and their pods from the stores (no LIST per reconcile). Decide:
//! `hangar_core::owner_sync::plan`. Apply: create Runners (`generateName: <set>-`, labels from the
//! template plus the template hash, `sync-time`), annotate retiring pods and Runners, delete
//! Runners whose runners are unregistered or finished. Status: replicas, ready, available, and
//! the conditions `Available` (a False one names a Runner that cannot start, and why) and
//! `Progressing` (creating, retiring or replacing runners).
//!
//! A set holds the finalizer `hangar.dev/retire-runners`. Deleted, it keeps running owner sync
//! with 0 desired runners, so its Runners leave through unregister-before-delete, and lets go
//! once none is left or its retirement timeout has passed ([`super::retirement`]); meanwhile
//! `Progressing` says `Retiring` and how many runners it waits for. New Runners are created with
//! their own finalizer (`runner.actions.summerwind.dev`), which costs no write of its own.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use hangar_api::horizontal_runner_autoscaler::ScaleTargetKind;
use hangar_api::{
    HorizontalRunnerAutoscaler, Runner, RunnerReplicaSet, annotation as ann, finalizer, label,
};
use hangar_core::health::GitHubState;
use hangar_core::owner_sync::{self, Action as PlanAction, DeleteReason, OwnerView, PodController};
use hangar_core::runner_lookup;
use hangar_core::template_hash::template_hash;
use hangar_runtime::pod::RunnerPod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::{
    annotation, k8s_time, object_name, pod_phase, registration_spent, retirement, rfc3339, sets,
    started_at, wait_until_stored,
};
use crate::conditions::{self, Desired, kind, reason};
use crate::context::Context;
use crate::error::{Error, ignore_not_found, kube_err};
use crate::events::RunnerCount;
use crate::reconciler::Reconciler;
use crate::runner_directory::RunnerDirectory;
use hangar_runtime::watch::Triggers;

/// The RunnerReplicaSet controller in the shared skeleton.
const SKELETON: Reconciler<RunnerReplicaSet> = Reconciler::new("runnerreplicaset");

/// What the controller's reconciles share.
#[derive(Debug)]
pub struct SetState {
    /// The shared context.
    pub ctx: Arc<Context>,
    /// Which runners GitHub said are done with their job.
    pub directory: Arc<RunnerDirectory>,
    /// Deletions that failed after their pass had ended, by set UID: the set's next pass
    /// reports the first, and its error decides when the set is retried.
    failed_deletions: Arc<std::sync::Mutex<BTreeMap<String, Error>>>,
    /// Wakes a set whose deletion failed after its pass had ended.
    wake: futures::channel::mpsc::UnboundedSender<ObjectRef<RunnerReplicaSet>>,
}

impl AsRef<Context> for SetState {
    fn as_ref(&self) -> &Context {
        &self.ctx
    }
}

/// Runs the controller until the stream ends.
pub async fn run(
    ctx: Arc<Context>,
    sets: Triggers<RunnerReplicaSet>,
    runners: Triggers<Runner>,
    pods: Triggers<RunnerPod>,
    hras: Triggers<HorizontalRunnerAutoscaler>,
    directory: Arc<RunnerDirectory>,
) {
    let stores = ctx.stores.clone();
    let replica_sets = ctx.stores.replica_sets.clone();
    // A runner GitHub said is done matters to its set at once: its place may go to a new
    // runner before the kubelet reports the exit.
    let done_stores = ctx.stores.clone();
    let done = directory.done_runners().flat_map(move |name| {
        futures::stream::iter(
            done_stores
                .runners
                .state()
                .into_iter()
                .filter(|r| r.name_any() == name)
                .filter_map(|r| {
                    let set = r
                        .owner_references()
                        .iter()
                        .find(|o| o.kind == "RunnerReplicaSet")?;
                    Some(ObjectRef::new(&set.name).within(&r.namespace()?))
                })
                .collect::<Vec<_>>(),
        )
    });
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let state = Arc::new(SetState {
        ctx: ctx.clone(),
        directory,
        failed_deletions: Default::default(),
        wake,
    });
    Controller::for_shared_stream(sets, ctx.stores.replica_sets.clone())
        .reconcile_on(done)
        .reconcile_on(woken)
        .owns_shared_stream(runners)
        // An autoscaler's change matters to the sets of the RunnerDeployment it scales.
        .watches_shared_stream(hras, move |hra: Arc<HorizontalRunnerAutoscaler>| {
            let Some((ns, ScaleTargetKind::RunnerDeployment, deployment)) = sets::target_of(&hra)
            else {
                return Vec::new();
            };
            replica_sets
                .state()
                .into_iter()
                .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
                .filter(|s| {
                    s.owner_references()
                        .iter()
                        .any(|o| o.kind == "RunnerDeployment" && o.name == deployment)
                })
                .map(|s| ObjectRef::from_obj(s.as_ref()))
                .collect::<Vec<_>>()
        })
        // A pod change (ready, registered, completed) matters to the set owning its Runner.
        .watches_shared_stream(pods, move |pod: Arc<RunnerPod>| {
            let ns = pod.namespace()?;
            let runner_owner = pod.owner_references().iter().find(|o| o.kind == "Runner")?;
            let runner = stores
                .runners
                .get(&ObjectRef::new(&runner_owner.name).within(&ns))?;
            let set = runner
                .owner_references()
                .iter()
                .find(|o| o.kind == "RunnerReplicaSet")?;
            Some(ObjectRef::new(&set.name).within(&ns))
        })
        .with_config(ctx.settings.controller_config())
        .run(
            SKELETON.reconcile(reconcile),
            SKELETON.error_policy(),
            state,
        )
        .for_each(|_| async {})
        .await;
}

/// The set's runners that a signed `completed` delivery said are done, with when it was
/// heard: only deliveries for a job the Runner's scope can run, received after its pod started
/// (`hangar_core::runner_lookup::vouches_for`).
fn completions_heard(
    runners: &[Arc<Runner>],
    pods: &BTreeMap<String, Arc<RunnerPod>>,
    directory: &RunnerDirectory,
) -> BTreeMap<String, std::time::SystemTime> {
    runners
        .iter()
        .filter_map(|runner| {
            let name = runner.name_any();
            let pod = pods.get(&name)?;
            let scope = super::runner::scope_of(runner).ok()?;
            let started = started_at(pod);
            let at = directory.completion(&name, |sighting| {
                runner_lookup::vouches_for(sighting, &scope, started)
            })?;
            Some((name, at))
        })
        .collect()
}

/// The template hash of a set: the `runner-template-hash` label its template carries (set by
/// the RunnerDeployment), else a hash of the template.
pub fn desired_hash(set: &RunnerReplicaSet) -> String {
    set.spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
        .and_then(|l| l.get(label::RUNNER_TEMPLATE_HASH))
        .cloned()
        .unwrap_or_else(|| {
            template_hash(&serde_json::to_vec(&set.spec.template).unwrap_or_default())
        })
}

/// How the set's runners register: as its template says.
fn placeholder_template(set: &RunnerReplicaSet) -> super::placeholder::Template<'_> {
    super::placeholder::Template {
        config: &set.spec.template.spec.config,
        node_selector: set.spec.template.spec.pod.node_selector.as_ref(),
    }
}

/// Reconciles one RunnerReplicaSet.
pub async fn reconcile(set: Arc<RunnerReplicaSet>, state: Arc<SetState>) -> Result<Action, Error> {
    let ctx = state.ctx.clone();
    let deleting = retirement::deleting_since(set.as_ref());
    let holds = retirement::holds(set.as_ref(), finalizer::RETIRE_RUNNERS);
    // A deployment's sets are covered by the deployment's registration-only runner.
    let standalone = set
        .metadata
        .owner_references
        .as_ref()
        .is_none_or(Vec::is_empty);
    if deleting.is_some() && standalone {
        // The registration-only runner goes by its own finalizer.
        super::placeholder::sync(set.as_ref(), 0, placeholder_template(&set), 0, &ctx).await?;
    }
    if deleting.is_some() && !holds {
        return Ok(Action::await_change());
    }
    let ns = set.namespace().unwrap_or_default();
    let sets_api: Api<RunnerReplicaSet> = Api::namespaced(ctx.client.clone(), &ns);
    if deleting.is_none() && !holds {
        retirement::set_finalizer(&sets_api, set.as_ref(), finalizer::RETIRE_RUNNERS, true).await?;
    }
    let uid = set.uid().unwrap_or_default();
    let failed = state
        .failed_deletions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&uid);
    if let Some(error) = failed {
        return Err(error);
    }
    let now = ctx.now();
    let runners: Vec<Arc<Runner>> = ctx
        .stores
        .runners
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
        .filter(|r| r.owner_references().iter().any(|o| o.uid == uid))
        .collect();
    // What this set's earlier passes wrote that the store does not show yet (its watch lags
    // longer than a pass waits for it) counts as done: else it would be written again.
    let unseen = ctx
        .unobserved_runners
        .unseen(&uid, &ctx.stores.runners, &ns);
    let desired_template_hash = desired_hash(&set);
    // The pods the plan judges, as it saw them: a pod deleted with its Runner must be one of
    // these, the very object (UID) judged unregistered or finished.
    let mut seen_pods: BTreeMap<String, Arc<RunnerPod>> = BTreeMap::new();
    let mut owners: Vec<OwnerView> = runners
        .iter()
        .map(|r| {
            let pod = ctx
                .stores
                .pods
                .get(&ObjectRef::<RunnerPod>::new(&r.name_any()).within(&ns));
            if let Some(pod) = &pod {
                seen_pods.insert(pod.name_any(), pod.clone());
            }
            OwnerView {
                name: r.name_any(),
                created: r
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(k8s_time)
                    .unwrap_or(now),
                template_hash: r.labels().get(label::RUNNER_TEMPLATE_HASH).cloned(),
                deleting: r.metadata.deletion_timestamp.is_some()
                    || unseen.deleted.contains(&r.name_any()),
                unregistration_requested: annotation(
                    r.as_ref(),
                    ann::UNREGISTRATION_REQUEST_TIMESTAMP,
                )
                .is_some(),
                unregistration_complete: annotation(
                    r.as_ref(),
                    ann::UNREGISTRATION_COMPLETE_TIMESTAMP,
                )
                .is_some(),
                // A Runner whose pod the store does not show is on its way: its status may
                // say the pod was created (a phase) before the pod watch, which lags the Runner
                // watch under load, shows the pod. Counted as nothing, it would be replaced by
                // one runner too many. If its pod is gone for good, the Runner controller
                // deletes it (a vanished pod), and then it is replaced.
                settled: pod.is_some(),
                // A Runner reports no pod count; its pod is looked up by name (the Runner
                // controller checks a vanished pod with a GET before it gives up on it).
                unseen_pods: false,
                // A Runner never creates a second pod once its pod was deleted.
                pod_controller: PodController::None,
                pods: pod
                    .iter()
                    .map(|p| ctx.pod_view(p, registration_spent(p)))
                    .collect(),
            }
        })
        .collect();
    // A Runner created but not yet seen is what a fresh one looks like: no phase, no pod.
    owners.extend(unseen.created.iter().map(|name| {
        OwnerView::created_unseen(
            name.clone(),
            now,
            desired_template_hash.clone(),
            PodController::None,
        )
    }));

    let ephemeral = set.spec.template.spec.config.ephemeral.unwrap_or(true);
    // A deleted set wants no runners: they retire as on a scale-down.
    let desired = if deleting.is_some() {
        0
    } else {
        u32::try_from(set.spec.replicas.unwrap_or(1).max(0)).unwrap_or(0)
    };
    // An autoscaler scales the set's RunnerDeployment, never the set itself.
    let deployment = set
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "RunnerDeployment")
        .map(|o| o.name.clone());
    let known = deployment
        .map(|rd| {
            sets::completions_known(&ctx, &ns, ScaleTargetKind::RunnerDeployment, &rd, desired)
        })
        .unwrap_or_default();
    let input = owner_sync::Input {
        desired,
        desired_template_hash,
        effective_time: known.effective_time(set.spec.effective_time.as_ref()),
        ephemeral,
        owners,
        now,
        release_grace: ctx.settings.release_grace,
        failed_runner_backoff: ctx.settings.health.failed_runner_backoff,
        reflected_completions: known.reflected.clone(),
        completions_heard: completions_heard(&runners, &seen_pods, &state.directory),
        absorbed_completions: known.absorbed,
        completions_counted: known.counted.is_some(),
        reflected_before: known.reflected_before,
    };
    let plan = owner_sync::plan(&input);
    // What owner sync was told and what it decided: why a full pool did or did not replace a
    // finished runner.
    debug!(
        set = %object_name(set.as_ref()),
        desired,
        absorbed = input.absorbed_completions,
        reflected_before = ?input.reflected_before,
        heard = input.completions_heard.len(),
        counts = ?plan.counts,
        actions = plan.actions.len(),
        observe_at = ?plan.observe_at,
        "planned"
    );
    sets::ask_for_observation(&ctx, &known, &plan);
    // The actions touch different Runners (at most one each), so they go out together: one at
    // a time, a burst's finished Runners would each cost a round trip before the next is
    // deleted, and new demand would wait behind them.
    let (set_ref, state_ref, hash) = (&*set, &*state, input.desired_template_hash.as_str());
    let seen_ref = &seen_pods;
    let applied: Vec<Result<Touched, Error>> = futures::stream::iter(plan.actions.clone())
        .map(|action| async move { apply(set_ref, state_ref, &action, hash, seen_ref).await })
        .buffer_unordered(sets::APPLY_CONCURRENCY)
        .collect()
        .await;
    // The next reconcile is triggered by the controller's own watch of Runners, not by the
    // store's: run before the store caught up, it would count created Runners as missing and
    // create more. One wait for the whole pass (not one per Runner). Deletions were recorded
    // as they were handed over, and are not waited for.
    let (mut created, mut failure) = (vec![], None);
    for result in applied {
        match result {
            Ok(Touched::Created(names)) => created.extend(names),
            Ok(Touched::Other) => {}
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    ctx.unobserved_runners.record(&uid, &created, &[]);
    wait_until_stored(&ctx.stores.runners, &ns, &created).await;
    if let Some(e) = failure {
        return Err(e);
    }
    // One event per pass at most, not per Runner (an ephemeral pool deletes a Runner for every
    // job), and passes are coalesced too (`crate::events`).
    for (reason, why) in [
        (DeleteReason::Completed, "whose runner finished"),
        (DeleteReason::Unregistered, "unregistered from GitHub"),
    ] {
        let deleted: Vec<String> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                PlanAction::Delete {
                    owner, reason: r, ..
                } if *r == reason => Some(owner.clone()),
                _ => None,
            })
            .collect();
        if !deleted.is_empty() {
            ctx.runner_events.publish(
                set.object_ref(&()),
                "DeletedRunners",
                RunnerCount {
                    verb: "deleted",
                    why,
                    count: deleted.len(),
                    names: deleted,
                },
            );
        }
    }

    let mut retiring = None;
    if let Some(since) = deleting {
        // Every Runner counts, deleting ones and those created but not yet seen too: each
        // holds its pod until it is retired.
        let left: Vec<String> = runners
            .iter()
            .map(|r| r.name_any())
            .chain(unseen.created.iter().cloned())
            .collect();
        match retirement::step(set.as_ref(), since, left.len(), &ctx) {
            hangar_core::retirement::Step::Release => {
                let written = retirement::set_finalizer(
                    &sets_api,
                    set.as_ref(),
                    finalizer::RETIRE_RUNNERS,
                    false,
                )
                .await?;
                return Ok(retirement::released(written));
            }
            hangar_core::retirement::Step::Force => {
                let timeout = retirement::timeout(set.as_ref(), &ctx);
                warn!(set = %object_name(set.as_ref()), "retirement timed out, forcing its runners out");
                ctx.event(
                    set.object_ref(&()),
                    true,
                    retirement::TIMED_OUT,
                    retirement::forced_note(timeout, left.len(), "runner(s)"),
                );
                let runners_api: Api<Runner> = Api::namespaced(ctx.client.clone(), &ns);
                retirement::force_children(&runners_api, &ns, &left).await?;
                let written = retirement::set_finalizer(
                    &sets_api,
                    set.as_ref(),
                    finalizer::RETIRE_RUNNERS,
                    false,
                )
                .await?;
                return Ok(retirement::released(written));
            }
            hangar_core::retirement::Step::Wait { force_at } => {
                retiring = Some((
                    retirement::waiting(left.len(), "runner(s)", force_at),
                    force_at,
                ));
            }
        }
    }

    let mut status = serde_json::Map::new();
    let total = runners
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .count();
    let ready = runners
        .iter()
        .filter(|r| r.status.as_ref().and_then(|s| s.ready).unwrap_or(false))
        .count();
    if standalone && deleting.is_none() && holds {
        // Before the status write: the placeholder's patch is conditional on the
        // resourceVersion read, which a status write (or the finalizer's above) would move.
        super::placeholder::sync(
            set.as_ref(),
            set.spec.replicas.unwrap_or(1),
            placeholder_template(&set),
            i32::try_from(ready).unwrap_or(i32::MAX),
            &ctx,
        )
        .await?;
    }
    status.insert("replicas".into(), total.into());
    status.insert("readyReplicas".into(), ready.into());
    status.insert("availableReplicas".into(), ready.into());
    status.insert("unhealthyReplicas".into(), plan.unhealthy.len().into());
    let busy = seen_pods
        .values()
        .filter(|p| ctx.github_state(p) == GitHubState::Busy)
        .count();
    status.insert("busyReplicas".into(), busy.into());
    let old_conditions = set
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut wanted = set_conditions(&ctx, input.desired, ready, &runners, &plan).await;
    wanted.push(sets::health(&ctx, set.as_ref(), &old_conditions, &plan));
    if let Some((progress, _)) = &retiring {
        wanted.retain(|c| c.kind != kind::PROGRESSING);
        wanted.push(progress.clone());
    }
    if set
        .metadata
        .owner_references
        .as_ref()
        .is_none_or(Vec::is_empty)
    {
        // A deployment's sets: the deployment reports their template's fields.
        wanted.extend(super::fields::fields_honored(
            &ctx,
            set.object_ref(&()),
            &old_conditions,
            &hangar_api::ignored::runner_replica_set(&set.spec),
        ));
    }
    let new_conditions = conditions::merge(&old_conditions, &wanted, set.metadata.generation, now);
    let conditions_changed = old_conditions != new_conditions;
    status.insert(
        "conditions".into(),
        serde_json::to_value(&new_conditions).unwrap_or_default(),
    );
    let current = serde_json::to_value(&set.status).unwrap_or_default();
    let changed = conditions_changed
        || [
            "replicas",
            "readyReplicas",
            "availableReplicas",
            "busyReplicas",
            "unhealthyReplicas",
        ]
        .iter()
        .any(|k| current.get(k) != status.get(*k));
    let held = if changed {
        let status = serde_json::Value::Object(status);
        ctx.status_pace
            .patch_status(
                &ctx.client,
                set.as_ref(),
                status,
                "patch status of runnerreplicaset",
            )
            .await?
    } else {
        None
    };

    Ok(sets::requeue(
        set.as_ref(),
        &plan,
        retiring.map(|(_, force_at)| force_at),
        held,
        now,
        ctx.settings.sync_period,
    ))
}

/// How a set deletes a judged pod of a Runner it deletes: only that very pod (its UID), and a
/// terminal one (`Succeeded` or `Failed`: every container has exited) without a grace period,
/// as the pod garbage collector deletes terminated pods: there is nothing left to stop, and the
/// kubelet's confirming delete would be one more apiserver write per runner. Its finalizer
/// still holds it until the runner is unregistered. Any other pod gets its grace period.
fn pod_deletion(pod: &RunnerPod) -> DeleteParams {
    let terminal = matches!(
        pod_phase(pod),
        owner_sync::PodPhase::Succeeded | owner_sync::PodPhase::Failed
    );
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    if terminal {
        params.grace_period(0)
    } else {
        params
    }
}

/// Deletes a Runner owner sync judged finished or unregistered, after the judged pods (only
/// those very pods: their UIDs).
async fn delete_runner(
    ctx: &Context,
    ns: &str,
    owner: &str,
    judged: &[Arc<RunnerPod>],
) -> Result<(), Error> {
    let pods: Api<RunnerPod> = Api::namespaced(ctx.client.clone(), ns);
    // The judged pods too, rather than leaving them to the garbage collector, which on a young
    // cluster may not watch Runners yet (it rediscovers resources every 30 s). Their finalizer
    // still holds them until the runner is unregistered. They go first: a collector that sees
    // the Runner gone while the pod is not yet deleting deletes the pod itself, a second write
    // for the apiserver. A pod the plan did not judge (created after the Runner was judged
    // unregistered) is left to the Runner's own retirement, which unregisters it before it goes.
    for pod in judged {
        let name = pod.name_any();
        match pods.delete(&name, &pod_deletion(pod)).await {
            Ok(_) => {}
            // Not the pod that was judged: it is not ours to delete.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
            Err(e) => return Err(kube_err("delete pod of runner", format!("{ns}/{name}"))(e)),
        }
    }
    Api::<Runner>::namespaced(ctx.client.clone(), ns)
        .delete(owner, &DeleteParams::background())
        .await
        .map(drop)
        .or_else(ignore_not_found)
        .map_err(kube_err("delete runner", format!("{ns}/{owner}")))
}

/// The Runners one applied action created, for the store wait at the end of a pass.
enum Touched {
    Created(Vec<String>),
    Other,
}

async fn apply(
    set: &RunnerReplicaSet,
    state: &SetState,
    action: &PlanAction,
    hash: &str,
    seen_pods: &BTreeMap<String, Arc<RunnerPod>>,
) -> Result<Touched, Error> {
    let ctx = &*state.ctx;
    let ns = set.namespace().unwrap_or_default();
    let runners: Api<Runner> = Api::namespaced(ctx.client.clone(), &ns);
    let pods: Api<RunnerPod> = Api::namespaced(ctx.client.clone(), &ns);
    let now = rfc3339(ctx.now());
    match action {
        PlanAction::Create { count } => {
            let created: Vec<String> = futures::stream::iter(0..*count)
                .map(|_| {
                    let runner = new_runner(set, hash, &now);
                    let runners = &runners;
                    async move { runners.create(&PostParams::default(), &runner).await }
                })
                .buffer_unordered(sets::APPLY_CONCURRENCY)
                .map(|created| created.map(|r| r.name_any()))
                .try_collect()
                .await
                .map_err(kube_err("create runner for", object_name(set)))?;
            info!(set = %object_name(set), count, "created runners");
            ctx.runner_events.publish(
                set.object_ref(&()),
                "CreatedRunners",
                RunnerCount {
                    verb: "created",
                    why: "",
                    count: *count as usize,
                    names: vec![],
                },
            );
            return Ok(Touched::Created(created));
        }
        PlanAction::Delete {
            owner,
            reason,
            pods: judged,
        } => {
            // In the background: a pass that waited for its deletions (two round trips, slow
            // under the burst of a pool's finishing jobs) held up the next pass, and with it
            // the replacement for a job that finished meanwhile. The Runner counts as deleting
            // from now on ([`Context::unobserved_runners`]); a deletion that fails is undone
            // there and reported by the set's next pass.
            let set_uid = set.uid().unwrap_or_default();
            ctx.unobserved_runners
                .record(&set_uid, &[], std::slice::from_ref(owner));
            let judged: Vec<Arc<RunnerPod>> = judged
                .iter()
                .filter_map(|name| seen_pods.get(name).cloned())
                .collect();
            let (state_ctx, owner, reason) = (state.ctx.clone(), owner.clone(), *reason);
            let (set_name, set_ref) = (object_name(set), ObjectRef::from_obj(set));
            let (failed, wake) = (state.failed_deletions.clone(), state.wake.clone());
            tokio::spawn(async move {
                match delete_runner(&state_ctx, &ns, &owner, &judged).await {
                    Ok(()) => info!(set = %set_name, runner = owner, ?reason, "deleted runner"),
                    Err(error) => {
                        state_ctx
                            .unobserved_runners
                            .deletion_failed(&set_uid, &owner);
                        failed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .entry(set_uid)
                            .or_insert(error);
                        let _ = wake.unbounded_send(set_ref);
                    }
                }
            });
            return Ok(Touched::Other);
        }
        PlanAction::RequestUnregistration {
            owner,
            pods: pod_names,
            reason,
        } => {
            // Pods first: the owner's annotation means "all my pods were asked".
            for pod in pod_names {
                sets::stamp(&pods, pod, ann::UNREGISTRATION_REQUEST_TIMESTAMP, &now)
                    .await
                    .map_err(kube_err(
                        "request unregistration of pod",
                        format!("{ns}/{pod}"),
                    ))?;
            }
            sets::stamp(&runners, owner, ann::UNREGISTRATION_REQUEST_TIMESTAMP, &now)
                .await
                .map_err(kube_err(
                    "request unregistration of runner",
                    format!("{ns}/{owner}"),
                ))?;
            info!(set = %object_name(set), runner = owner, ?reason, "retiring runner");
            sets::tell_unregistering(ctx, set.object_ref(&()), owner, reason);
        }
        PlanAction::MarkUnregistrationComplete { owner } => {
            sets::stamp(
                &runners,
                owner,
                ann::UNREGISTRATION_COMPLETE_TIMESTAMP,
                &now,
            )
            .await
            .map_err(kube_err(
                "mark runner unregistered",
                format!("{ns}/{owner}"),
            ))?;
        }
        // Owner sync asks this of StatefulSets only (a Runner's `pod_controller` is `None`).
        PlanAction::StopReplacingPods { owner, .. } => {
            warn!(set = %object_name(set), runner = owner, "asked to scale a Runner to zero; ignored");
        }
    }
    Ok(Touched::Other)
}

/// A new Runner for the set: the template, named `<set>-<random>`, labelled with the template
/// hash and stamped with its sync time.
pub fn new_runner(set: &RunnerReplicaSet, hash: &str, now: &str) -> Runner {
    let template_meta = set.spec.template.metadata.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = template_meta.labels.unwrap_or_default();
    labels.insert(label::RUNNER_TEMPLATE_HASH.into(), hash.into());
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.insert(ann::SYNC_TIME.into(), now.into());
    let mut runner = Runner::new("", set.spec.template.spec.clone());
    runner.metadata = ObjectMeta {
        name: None,
        generate_name: Some(format!("{}-", set.name_any())),
        namespace: set.namespace(),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: set.controller_owner_ref(&()).map(|o| vec![o]),
        finalizers: Some(vec![finalizer::RUNNER.to_owned()]),
        ..Default::default()
    };
    runner
}

/// The first thing keeping a Runner of the set from starting, as `name: message`: a False
/// `CredentialsValid`, or a `Registered` that is False for a reason retrying alone may not fix.
pub fn failing_runner(runners: &[Arc<Runner>]) -> Option<String> {
    runners
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .find_map(|r| {
            let found = r.status.as_ref()?.conditions.as_deref();
            let bad = conditions::find(found, kind::CREDENTIALS_VALID)
                .filter(|c| c.status == "False")
                .or_else(|| {
                    conditions::find(found, kind::REGISTERED).filter(|c| {
                        c.status == "False"
                            && [reason::GITHUB_API_ERROR, reason::INVALID_SPEC]
                                .contains(&c.reason.as_str())
                    })
                })?;
            Some(format!("runner {}: {}", r.name_any(), bad.message))
        })
}

/// The set's conditions: `Available` from the counts (and a failing Runner, if any),
/// `Progressing` from the plan and the Runners being retired (and the rate limit, if one
/// holds their credentials).
pub async fn set_conditions(
    ctx: &Context,
    desired: u32,
    ready: usize,
    runners: &[Arc<Runner>],
    plan: &owner_sync::Plan,
) -> Vec<Desired> {
    let retiring: Vec<&Runner> = runners
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .filter(|r| annotation(r.as_ref(), ann::UNREGISTRATION_REQUEST_TIMESTAMP).is_some())
        .map(AsRef::as_ref)
        .collect();
    let rate_limited = match retiring.first() {
        Some(runner) => {
            let ns = runner.namespace().unwrap_or_default();
            let credentials: Vec<_> = retiring
                .iter()
                .map(|r| r.spec.config.github_api_credentials_from.as_ref())
                .collect();
            sets::rate_limited(ctx, &ns, credentials).await
        }
        None => None,
    };
    sets::conditions(
        desired,
        ready,
        || failing_runner(runners),
        retiring.len(),
        rate_limited,
        plan,
    )
}
