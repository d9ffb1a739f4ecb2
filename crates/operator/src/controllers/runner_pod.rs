//! Runner-pod controller: learns each runner pod's GitHub runner ID, unregisters runners before
//! their pods go, and cleans up after direct pod deletions.
//!
//! Observe: the pod; the runner list of its scope (one `GET …/runners` per scope at a time,
//! shared by every pod of that scope through [`crate::runner_directory`]). Decide: `hangar_core::
//! unregistration`. Apply: annotations with ARC's names, the finalizer
//! `actions.summerwind.dev/runner-pod`, DELETE runner on GitHub.
//!
//! - Not deleting, no `actions-runner/id`: look the runner up by pod name; annotate the ID once
//!   found (re-check when the directory may list again).
//! - `unregistration-request-timestamp` present: run the state machine until
//!   `unregistration-complete-timestamp` can be set; owner sync then deletes the owner. A pod on
//!   no node is withdrawn instead: deleted on condition that it is still the version judged
//!   unscheduled, since a deleting pod is never bound.
//! - Deleting (a user deleted the pod): delete the parent Runner so it is not recreated, run the
//!   state machine, then drop the finalizer — not while a retiring StatefulSet owns the pod
//!   that would create a fresh one in its place (one scaled to zero, as owner sync leaves a
//!   set it retires, creates none). A pod still present a minute after its
//!   deletion began (unreachable node) is force-deleted.
//!
//! Scope and credentials come only from the pod's owner chain ([`crate::authority`]): its
//! Runner, or its StatefulSet's RunnerSet, and the Secret that owner's
//! `githubAPICredentialsFrom` names (else the controller's own credentials). A pod without such
//! an owner is ignored: no GitHub call, no finalizer. Failures are Warning events on the pod,
//! retried with back-off.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hangar_api::{Runner, RunnerReplicaSet, annotation as ann, finalizer};
use hangar_core::authority::{Authority, Untrusted};
use hangar_core::owner_sync::PodController;
use hangar_core::runner_lookup;
use hangar_core::runner_pod::{ForceDelete, PodFacts, PodStep};
use hangar_core::unregistration::{
    self, AfterDelete, AfterNotFound, DeleteOutcome, Finished, ListedByName, PodState, Release,
    Step, Successor,
};
use hangar_github::{GitHubApi, GitHubError, RunnerId};
use hangar_runtime::pod::RunnerPod;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use super::{
    annotation, github_scope, object_name, parse_time, pod_is_ephemeral, pod_phase, pod_uses_jit,
    ready_since, rfc3339, runner_id, runner_stopped,
};
use crate::context::Context;
use crate::error::{Error, github_err, ignore_not_found, kube_err};
use crate::events::RunnerCount;
use crate::reconciler::Reconciler;
use crate::runner_directory::{Lookup, RunnerDirectory};
use hangar_runtime::watch::Triggers;

pub use hangar_core::runner_pod::FORCE_DELETE_AFTER;
/// When a pod changed between the view a decision was made on and its write: the change's own
/// watch event normally brings the pod back sooner.
const CHANGED_RECHECK: Duration = Duration::from_secs(1);

/// The controller's state: the shared context and the runner directory only it reads.
#[derive(Debug)]
pub struct RunnerPodState {
    /// What every reconciler shares.
    pub ctx: Arc<Context>,
    /// Runner IDs by scope and name, shared by all runner pods (one list per scope at a time)
    /// and fed sightings by the webhook server.
    pub directory: Arc<RunnerDirectory>,
    /// The deleted pods whose runner-pod finalizer this controller removed, which the store
    /// may still show holding it (see [`super::retirement`]).
    pub released: hangar_runtime::watch::UidTimes,
}

impl AsRef<Context> for RunnerPodState {
    fn as_ref(&self) -> &Context {
        &self.ctx
    }
}

/// The runner-pod controller in the shared skeleton: failures it reports on a pod are about
/// its runner.
const SKELETON: Reconciler<RunnerPod> = Reconciler::new("runner-pod")
    .explained_by(|_, error| format!("cannot unregister or look up the runner: {error}"));

/// Runs the controller until the stream ends, learning runner IDs through `directory`.
pub async fn run(ctx: Arc<Context>, pods: Triggers<RunnerPod>, directory: Arc<RunnerDirectory>) {
    let pods_store = ctx.stores.pods.clone();
    let state = Arc::new(RunnerPodState {
        directory,
        ctx,
        released: Default::default(),
    });
    Controller::for_shared_stream(pods, pods_store)
        .with_config(state.ctx.settings.controller_config())
        .run(
            SKELETON.reconcile(reconcile),
            SKELETON.error_policy(),
            state,
        )
        .for_each(|_| async {})
        .await;
}

async fn annotate(
    pod: &RunnerPod,
    ctx: &Context,
    pairs: &[(&str, Option<String>)],
) -> Result<(), Error> {
    let map: serde_json::Map<String, serde_json::Value> = pairs
        .iter()
        .map(|(k, v)| {
            let value = v
                .clone()
                .map_or(serde_json::Value::Null, serde_json::Value::String);
            ((*k).to_owned(), value)
        })
        .collect();
    let patch = serde_json::json!({ "metadata": { "annotations": map } });
    Api::<RunnerPod>::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default())
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(drop)
        // A pod gone meanwhile needs no annotation: whatever it recorded is moot.
        .or_else(ignore_not_found)
        .map_err(kube_err("annotate pod", object_name(pod)))
}

/// What became of a write of a pod's finalizers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FinalizersWritten {
    /// Written, or the pod is gone: the pod holds what was written, or nothing.
    Held,
    /// Another writer changed the finalizers since the cached copy (the `test` failed): that
    /// change's watch event brings the pod back with the newer copy.
    Conflict,
}

async fn set_finalizers(
    pod: &RunnerPod,
    ctx: &Context,
    finalizers: Vec<String>,
) -> Result<FinalizersWritten, Error> {
    // A compare-and-swap on the finalizers alone: the `test` fails (422) only if another
    // writer changed them. A resourceVersion precondition would also fail on every kubelet
    // status update, which on a busy node means retrying (and backing off) for many seconds.
    let current = pod.finalizers();
    let mut ops = vec![];
    if pod.metadata.finalizers.is_some() {
        ops.push(
            serde_json::json!({"op": "test", "path": "/metadata/finalizers", "value": current}),
        );
    }
    ops.push(serde_json::json!({"op": "add", "path": "/metadata/finalizers", "value": finalizers}));
    Api::<RunnerPod>::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default())
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(serde_json::Value::Array(ops))
                    .expect("a well-formed JSON patch"),
            ),
        )
        .await
        .map(|_| FinalizersWritten::Held)
        .or_else(|e| ignore_not_found(e).map(|()| FinalizersWritten::Held))
        // No failure to back off from: the change that failed the `test` (often our own
        // previous write, not yet in the cache) has a watch event of its own.
        .or_else(|e| match e {
            kube::Error::Api(ref s) if s.code == 422 => Ok(FinalizersWritten::Conflict),
            e => Err(e),
        })
        .map_err(kube_err("update finalizers of pod", object_name(pod)))
}

/// Reconciles one runner pod.
pub async fn reconcile(pod: Arc<RunnerPod>, state: Arc<RunnerPodState>) -> Result<Action, Error> {
    let ctx = state.ctx.clone();
    let now = ctx.now();
    let has_finalizer = pod.finalizers().iter().any(|f| f == finalizer::RUNNER_POD)
        && !state.released.contains(&pod.uid().unwrap_or_default());
    let granted = granted(&pod, &ctx).await?;
    let phase = pod_phase(&pod);
    let finished = runner_stopped(&pod)
        || matches!(
            phase,
            hangar_core::owner_sync::PodPhase::Succeeded
                | hangar_core::owner_sync::PodPhase::Failed
        );
    let plan = hangar_core::runner_pod::step(&PodFacts {
        trusted: granted.is_ok(),
        deleting_since: pod
            .metadata
            .deletion_timestamp
            .as_ref()
            .map(super::k8s_time),
        has_finalizer,
        finished,
        phase,
        has_runner_id: runner_id(&pod).is_some(),
        unregistration_requested: annotation(pod.as_ref(), ann::UNREGISTRATION_REQUEST_TIMESTAMP)
            .is_some(),
        unregistration_complete: annotation(pod.as_ref(), ann::UNREGISTRATION_COMPLETE_TIMESTAMP)
            .is_some(),
        now,
    });
    let authority = match granted {
        Ok(authority) => authority,
        Err(untrusted) => {
            // Not a pod Hangar may act for: no GitHub call, no finalizer. One that carries our
            // finalizer anyway (written by its author, or granted before a restart whose owner
            // is gone now) is released when deleted, so it cannot hang; its containers are
            // stopped by the kubelet either way.
            if plan == PodStep::ReleaseUntrusted {
                // A finished runner whose owner went first is routine (its Runner is deleted
                // as finished while the pod is still on its way out); anything else is worth
                // an operator's look.
                if finished {
                    tracing::debug!(pod = %object_name(pod.as_ref()), reason = %untrusted,
                                    "releasing a finished runner pod Hangar cannot act for");
                } else {
                    warn!(pod = %object_name(pod.as_ref()), reason = %untrusted,
                          "releasing a runner pod Hangar cannot act for");
                }
                release_finalizer(&pod, &state).await?;
            } else {
                tracing::debug!(pod = %object_name(pod.as_ref()), reason = %untrusted,
                                "ignoring a pod Hangar cannot act for");
            }
            return Ok(Action::await_change());
        }
    };

    match plan {
        // Only for a pod Hangar may not act for, handled above.
        PodStep::ReleaseUntrusted | PodStep::Ignore => Ok(Action::await_change()),
        PodStep::Deleting {
            delete_parent,
            unregister: unregistering,
            force,
        } => {
            // A finished runner's pod is deleted by its set, which deletes the Runner itself;
            // should it not (a user deleted the pod), the Runner controller deletes a Runner
            // whose pod vanished `FINISHED_RUNNER_DELETION_WAIT` after its runner finished.
            if delete_parent {
                delete_parent_runner(&pod, &ctx).await?;
            }
            if unregistering {
                if let Some(wait) = unregister(&pod, &state, &authority, now).await? {
                    return Ok(Action::requeue(wait));
                }
                match unregistration::release(successor(&pod, &ctx).await?) {
                    Release::Now => release_finalizer(&pod, &state).await?,
                    Release::Hold { recheck_after } => return Ok(Action::requeue(recheck_after)),
                }
            }
            match force {
                ForceDelete::Now => {
                    info!(pod = %object_name(pod.as_ref()), "force-deleting pod stuck terminating");
                    Api::<RunnerPod>::namespaced(
                        ctx.client.clone(),
                        &pod.namespace().unwrap_or_default(),
                    )
                    .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                    .await
                    .map(drop)
                    .or_else(ignore_not_found)
                    .map_err(kube_err("force-delete pod", object_name(pod.as_ref())))?;
                    Ok(Action::await_change())
                }
                ForceDelete::RecheckIn(after) => Ok(Action::requeue(after)),
            }
        }
        PodStep::AddFinalizer => {
            let mut all = pod.finalizers().to_vec();
            all.push(finalizer::RUNNER_POD.to_owned());
            set_finalizers(&pod, &ctx, all).await?;
            Ok(Action::requeue(Duration::from_millis(100)))
        }
        PodStep::Live {
            look_up_id,
            unregister: unregistering,
        } => {
            let mut requeue = ctx.settings.sync_period;
            if look_up_id {
                match find_runner_id(&pod, &state, &authority).await? {
                    Lookup::Found(id) => {
                        annotate(&pod, &ctx, &[(ann::RUNNER_ID, Some(id.to_string()))]).await?;
                        info!(pod = %object_name(pod.as_ref()), runner_id = id, "runner registered");
                        ctx.runner_events.publish(
                            runner_events_told_on(&pod, &authority, &ctx),
                            "RunnerRegistered",
                            RunnerCount {
                                verb: "registered",
                                why: "on GitHub",
                                count: 1,
                                names: vec![format!("{} (id {id})", pod.name_any())],
                            },
                        );
                    }
                    Lookup::NotYet { recheck_after } => requeue = recheck_after,
                }
            }
            if unregistering && let Some(wait) = unregister(&pod, &state, &authority, now).await? {
                requeue = requeue.min(wait);
            }
            Ok(Action::requeue(requeue))
        }
    }
}

/// The object a runner's registration or unregistration is told on: the set it belongs to (its
/// Runner's RunnerReplicaSet, or its RunnerSet), where those of a busy pool or a scale-down are
/// coalesced ([`crate::events`]); a standalone Runner itself.
fn runner_events_told_on(pod: &RunnerPod, authority: &Authority, ctx: &Context) -> ObjectReference {
    let namespace = pod.namespace();
    let on = |api_version: &str, kind: &str, name: &str, uid: &str| ObjectReference {
        api_version: Some(api_version.to_owned()),
        kind: Some(kind.to_owned()),
        name: Some(name.to_owned()),
        namespace: namespace.clone(),
        uid: Some(uid.to_owned()),
        ..Default::default()
    };
    let granter = &authority.owner;
    if granter.kind == "Runner"
        && let Some(runner) = ctx
            .stores
            .runners
            .get(&ObjectRef::new(&granter.name).within(namespace.as_deref().unwrap_or_default()))
        && let Some(set) = runner
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == RunnerReplicaSet::kind(&()).as_ref())
    {
        return on(&set.api_version, &set.kind, &set.name, &set.uid);
    }
    let api_version = Runner::api_version(&());
    on(&api_version, granter.kind, &granter.name, &granter.uid)
}

/// Deletes the Runner that owns `pod`, so a pod deleted by a user is not resurrected.
async fn delete_parent_runner(pod: &RunnerPod, ctx: &Context) -> Result<(), Error> {
    let ns = pod.namespace().unwrap_or_default();
    let Some(owner) = pod
        .owner_references()
        .iter()
        .find(|o| o.kind == "Runner" && o.controller == Some(true))
    else {
        return Ok(());
    };
    let runners: Api<Runner> = Api::namespaced(ctx.client.clone(), &ns);
    let object_ref = kube::runtime::reflector::ObjectRef::<Runner>::new(&owner.name).within(&ns);
    // Gone or going already (its set deleted it, usually together with this pod): a DELETE
    // would only cost the apiserver a 404. A Runner the store lost track of is still caught by
    // the Runner controller, which never resurrects a set's vanished pod.
    if ctx
        .stores
        .runners
        .get(&object_ref)
        .is_none_or(|r| r.metadata.deletion_timestamp.is_some())
    {
        return Ok(());
    }
    runners
        .delete(&owner.name, &DeleteParams::background())
        .await
        .map(drop)
        .or_else(ignore_not_found)
        .map_err(kube_err(
            "delete runner of deleted pod",
            format!("{ns}/{}", owner.name),
        ))
}

/// One step of unregistration. `Ok(None)` when complete, `Ok(Some(delay))` to check again.
async fn unregister(
    pod: &RunnerPod,
    controller: &RunnerPodState,
    authority: &Authority,
    now: std::time::SystemTime,
) -> Result<Option<Duration>, Error> {
    let ctx = &*controller.ctx;
    let gh_scope = &github_scope(&authority.scope);
    let uid = pod.uid().unwrap_or_default();
    // ARC's `unregistration-start-timestamp` is a record for users, read by nothing: it is
    // written together with whatever this step writes anyway, never on its own.
    let start = annotation(pod, ann::UNREGISTRATION_START_TIMESTAMP)
        .is_none()
        .then(|| (ann::UNREGISTRATION_START_TIMESTAMP, Some(rfc3339(now))));
    let mut id = runner_id(pod);
    // A pod that was never scheduled registered nothing — unless it uses JIT, whose runner was
    // registered with its configuration; left alone, it would stay on GitHub (offline). A
    // scheduled pod may look Pending in the cache while its runner has just registered
    // (kubelet reports container starts with a delay), so it is looked up in a list taken from
    // now on, and waited for while not listed (`unregistration::next_step`): released
    // unregistered, it could be handed a job and then killed.
    // A stopped runner is released whatever its ID (it can take no job), so a finished
    // ephemeral runner that never had its ID looked up costs no list.
    let scheduled = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
    let stopped = runner_stopped(pod)
        || matches!(
            pod_phase(pod),
            hangar_core::owner_sync::PodPhase::Succeeded
                | hangar_core::owner_sync::PodPhase::Failed
        );
    if id.is_none() && !stopped && pod_uses_jit(pod) {
        if let Lookup::Found(found) = find_runner_id(pod, controller, authority).await? {
            id = Some(found);
        }
    } else if id.is_none() && !stopped && scheduled {
        let github = github_for_pod(pod, ctx, authority).await?;
        id = listed_from_now(pod, controller, gh_scope, github.as_ref()).await?;
    }
    let state = PodState {
        runner_id: id,
        phase: pod_phase(pod),
        runner_stopped: runner_stopped(pod),
        runner_exited_cleanly: super::runner_exited_cleanly(pod),
        ephemeral: pod_is_ephemeral(pod),
        ready_since: ready_since(pod),
        started: super::started_at(pod),
        scheduled,
        deleting: pod.metadata.deletion_timestamp.is_some(),
        created: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(super::k8s_time),
        unregistration_complete: annotation(pod, ann::UNREGISTRATION_COMPLETE_TIMESTAMP).is_some(),
        completion_wait_started: annotation(pod, ann::RUNNER_COMPLETION_WAIT_START_TIMESTAMP)
            .is_some(),
        registration_timeout: ctx.settings.health.registration,
    };
    let finished = match unregistration::next_step(&state, now) {
        Step::Finish(why) => why,
        Step::WaitForRegistration { recheck_after } => {
            if let Some(start) = start {
                annotate(pod, ctx, &[start]).await?;
            }
            return Ok(Some(recheck_after));
        }
        Step::Withdraw => {
            withdraw(pod, ctx).await?;
            // Deleting, the pod comes back through its watch event; changed, it is decided
            // again on what it is now.
            return Ok(Some(CHANGED_RECHECK));
        }
        // A reconcile on a cache from before this pod's `unregistration-complete` annotation:
        // the runner is gone already, and a second DELETE would only cost a call.
        Step::Delete { .. } | Step::RemoveLeftover { .. }
            if controller.directory.was_removed(&uid) =>
        {
            Finished::Removed
        }
        Step::RemoveLeftover { runner_id } => {
            let github = github_for_pod(pod, ctx, authority).await?;
            let runner_id = match runner_id {
                Some(id) => Some(id),
                None => listed_from_now(pod, controller, gh_scope, github.as_ref()).await?,
            };
            match runner_id {
                None => Finished::NoRunnerId,
                Some(runner_id) => {
                    match github.delete_runner(gh_scope, RunnerId(runner_id)).await {
                        Ok(()) => {
                            controller
                                .directory
                                .removed(gh_scope, &pod.name_any(), &uid)
                                .await;
                            Finished::Removed
                        }
                        Err(e) => {
                            tracing::debug!(pod = %object_name(pod), runner_id, error = %e,
                                        "a stopped runner's registration was not removed");
                            Finished::RunnerStopped
                        }
                    }
                }
            }
        }
        Step::Delete { runner_id } => {
            let github = github_for_pod(pod, ctx, authority).await?;
            let result = github.delete_runner(gh_scope, RunnerId(runner_id)).await;
            let outcome = match &result {
                Ok(()) => DeleteOutcome::Removed,
                Err(GitHubError::NotFound { .. }) => DeleteOutcome::NotFound,
                Err(GitHubError::Forbidden { .. }) => DeleteOutcome::Forbidden,
                Err(GitHubError::RunnerBusy { .. }) => DeleteOutcome::Busy,
                Err(GitHubError::RateLimited { retry_at, .. }) => DeleteOutcome::RateLimited {
                    retry_after: jiff::Timestamp::try_from(now)
                        .ok()
                        .and_then(|now| Duration::try_from(retry_at.duration_since(now)).ok())
                        .map(|wait| wait.max(Duration::from_secs(1))),
                },
                Err(e) => {
                    warn!(pod = %object_name(pod), error = %e, "delete runner failed");
                    DeleteOutcome::Failed
                }
            };
            match unregistration::after_delete(outcome, pod_is_ephemeral(pod)) {
                AfterDelete::Finish(why) => {
                    controller
                        .directory
                        .removed(gh_scope, &pod.name_any(), &uid)
                        .await;
                    why
                }
                AfterDelete::ConfirmByName => {
                    // Only a list taken after the 404 can tell a removed runner from a stale ID.
                    let listed =
                        listed_from_now(pod, controller, gh_scope, github.as_ref()).await?;
                    let listed = listed.map_or(ListedByName::Absent, |runner_id| {
                        ListedByName::Present { runner_id }
                    });
                    match unregistration::after_not_found(listed, runner_id) {
                        AfterNotFound::Finish(why) => {
                            controller
                                .directory
                                .removed(gh_scope, &pod.name_any(), &uid)
                                .await;
                            why
                        }
                        AfterNotFound::DeleteInstead { runner_id: actual } => {
                            info!(pod = %object_name(pod), stale = runner_id, actual,
                                  "runner ID was stale; removing the registered runner instead");
                            let mut pairs = vec![(ann::RUNNER_ID, Some(actual.to_string()))];
                            pairs.extend(start);
                            annotate(pod, ctx, &pairs).await?;
                            // The annotation's watch event brings the pod back with its ID.
                            return Ok(Some(ctx.settings.sync_period));
                        }
                        AfterNotFound::Retry { after } => {
                            if let Some(start) = start {
                                annotate(pod, ctx, &[start]).await?;
                            }
                            return Ok(Some(after));
                        }
                    }
                }
                AfterDelete::Forbidden => {
                    let error = result.expect_err("a 403 is an error");
                    refused(pod, ctx, authority, start).await?;
                    // The slow back-off of failures a person must fix, with a Warning event on
                    // the pod (see `SKELETON`).
                    return Err(github_err("delete runner", &gh_scope.config_path())(error));
                }
                AfterDelete::Busy {
                    start_completion_wait,
                    recheck_after,
                } => {
                    let mut pairs = vec![(
                        ann::UNREGISTRATION_FAILURE_MESSAGE,
                        Some("runner is still running a job".to_owned()),
                    )];
                    pairs.extend(start);
                    if start_completion_wait
                        && state.completion_wait_started.then_some(()).is_none()
                    {
                        pairs.push((
                            ann::RUNNER_COMPLETION_WAIT_START_TIMESTAMP,
                            Some(rfc3339(now)),
                        ));
                    }
                    annotate(pod, ctx, &pairs).await?;
                    ctx.event(
                        pod.object_ref(&()),
                        false,
                        "WaitingForBusyRunner",
                        "runner is running a job; it is unregistered once the job ends".into(),
                    );
                    return Ok(Some(recheck_after));
                }
                AfterDelete::Retry { after } => {
                    if let Some(start) = start {
                        annotate(pod, ctx, &[start]).await?;
                    }
                    return Ok(Some(after));
                }
            }
        }
    };
    info!(pod = %object_name(pod), reason = ?finished, "runner unregistered");
    // The event is for runners Hangar took off GitHub; one that stopped by itself (every
    // finished ephemeral runner) is no news, and an event per job would cost the apiserver a
    // write per job.
    if matches!(finished, Finished::Removed) {
        ctx.runner_events.publish(
            runner_events_told_on(pod, authority, ctx),
            "RunnerUnregistered",
            RunnerCount {
                verb: "unregistered",
                why: "from GitHub",
                count: 1,
                names: vec![pod.name_any()],
            },
        );
    }
    // A deleting pod records its completion by losing the finalizer, its caller's next write.
    if pod.metadata.deletion_timestamp.is_none() {
        let mut pairs = vec![(ann::UNREGISTRATION_COMPLETE_TIMESTAMP, Some(rfc3339(now)))];
        pairs.extend(start);
        annotate(pod, ctx, &pairs).await?;
    }
    Ok(None)
}

/// Deletes a pod that is on no node, provided it is still the version that was judged
/// unscheduled: a pod being deleted is never bound, so its runner can never start. A pod that
/// changed meanwhile (bound, perhaps) is left for the next decision.
async fn withdraw(pod: &RunnerPod, ctx: &Context) -> Result<(), Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: pod.resource_version(),
        }),
        ..DeleteParams::background()
    };
    match Api::<RunnerPod>::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default())
        .delete(&pod.name_any(), &params)
        .await
    {
        Ok(_) => {
            info!(pod = %object_name(pod), "withdrew a retired pod that was never scheduled");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => {
            ignore_not_found(e).map_err(kube_err("withdraw unscheduled pod", object_name(pod)))
        }
    }
}

/// Who would replace `pod` once its finalizer is gone. Only a pod whose retirement was
/// requested can belong to a retiring StatefulSet (owner sync stamps the pods before their
/// set), so the StatefulSet is looked up for those alone.
async fn successor(pod: &RunnerPod, ctx: &Context) -> Result<Successor, Error> {
    let Some(owner) = pod
        .owner_references()
        .iter()
        .find(|o| o.kind == "StatefulSet" && o.controller == Some(true))
    else {
        return Ok(Successor::None);
    };
    let Some(requested) = annotation(pod, ann::UNREGISTRATION_REQUEST_TIMESTAMP) else {
        return Ok(Successor::StatefulSet);
    };
    let ns = pod.namespace().unwrap_or_default();
    // The store's view is enough: a StatefulSet it shows stopped, retiring or being deleted
    // cannot be started again by owner sync, and one it does not show is read.
    let set = crate::authority::cached_or_get(
        Some(&ctx.stores.stateful_sets),
        &ctx.client,
        &ns,
        &owner.name,
        &owner.uid,
    )
    .await
    .map_err(kube_err(
        "look up the StatefulSet of a deleting pod",
        format!("{ns}/{}", owner.name),
    ))?;
    Ok(match set {
        Some(set)
            if set.uid().as_deref() == Some(owner.uid.as_str())
                && set.metadata.deletion_timestamp.is_none() =>
        {
            let stopped = PodController::of_stateful_set(
                set.spec.as_ref().and_then(|s| s.replicas),
                set.metadata.generation,
                set.status.as_ref().and_then(|s| s.observed_generation),
                false,
            ) == PodController::Stopped;
            if stopped {
                Successor::StoppedStatefulSet
            } else if annotation(set.as_ref(), ann::UNREGISTRATION_REQUEST_TIMESTAMP).is_some() {
                Successor::RetiringStatefulSet
            } else {
                // An unreadable stamp counts as old (the pod is not held on a guess), one from
                // a clock ahead of ours as just made.
                let requested_for = parse_time(requested)
                    .map_or(unregistration::SET_MARK_WAIT, |at| {
                        ctx.now().duration_since(at).unwrap_or_default()
                    });
                Successor::UnmarkedStatefulSet { requested_for }
            }
        }
        _ => Successor::None,
    })
}

/// Records a removal GitHub refused with 403: the pod keeps running (a refusal says nothing
/// about whether its runner is busy), and its owner is told which permission is missing, on
/// the pod (shown by its Runner as `CredentialsValid=False`), as a Warning event on the owner
/// and in a metric.
async fn refused(
    pod: &RunnerPod,
    ctx: &Context,
    authority: &Authority,
    start: Option<(&str, Option<String>)>,
) -> Result<(), Error> {
    let message = format!(
        "GitHub refused to remove runner {} from {} (403 Forbidden), so its pod keeps running \
         and the removal is retried with back-off; {}",
        pod.name_any(),
        github_scope(&authority.scope),
        authority.scope.permission_hint()
    );
    warn!(pod = %object_name(pod), %message, "runner removal refused");
    ctx.metrics
        .unregistration_refused(&pod.namespace().unwrap_or_default());
    if annotation(pod, ann::UNREGISTRATION_REFUSED) != Some(message.as_str()) {
        let mut pairs = vec![(ann::UNREGISTRATION_REFUSED, Some(message.clone()))];
        pairs.extend(start);
        annotate(pod, ctx, &pairs).await?;
    }
    let owner = owner_for_events(pod).unwrap_or_else(|| pod.object_ref(&()));
    ctx.event(owner, true, "UnregistrationForbidden", message);
    Ok(())
}

/// Who a user looks at for a runner pod: its Runner, or its RunnerSet (through the
/// `runnerset-name` label of a set's pod).
fn owner_for_events(pod: &RunnerPod) -> Option<k8s_openapi::api::core::v1::ObjectReference> {
    let namespace = pod.namespace();
    let controller = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    let (api_version, kind, name) = match controller.kind.as_str() {
        "Runner" => (
            controller.api_version.clone(),
            "Runner",
            controller.name.clone(),
        ),
        "StatefulSet" => (
            "actions.summerwind.dev/v1alpha1".to_owned(),
            "RunnerSet",
            pod.labels().get(hangar_api::label::RUNNERSET_NAME)?.clone(),
        ),
        _ => return None,
    };
    Some(k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(api_version),
        kind: Some(kind.to_owned()),
        name: Some(name),
        namespace,
        uid: (kind == "Runner").then(|| controller.uid.clone()),
        ..Default::default()
    })
}

/// The runner ID of `pod` in a list of its scope taken from now on (never an older snapshot).
async fn listed_from_now(
    pod: &RunnerPod,
    state: &RunnerPodState,
    gh_scope: &hangar_github::Scope,
    github: &dyn GitHubApi,
) -> Result<Option<u64>, Error> {
    state
        .directory
        .find_listed_after(
            gh_scope,
            &pod.name_any(),
            tokio::time::Instant::now(),
            || github.list_runners_revalidated(gh_scope),
        )
        .await
        .map_err(github_err("list runners", &gh_scope.config_path()))
}

/// The runner ID of `pod`, from a sighting of its runner at work or its scope's shared runner
/// list, not listed while its runner has only just started (see [`crate::runner_directory`]
/// and `hangar_core::runner_lookup`).
async fn find_runner_id(
    pod: &RunnerPod,
    state: &RunnerPodState,
    authority: &Authority,
) -> Result<Lookup, Error> {
    let name = pod.name_any();
    let started = super::started_at(pod);
    if let Some(id) = state.directory.sighting(&name, |sighting| {
        runner_lookup::vouches_for(sighting, &authority.scope, started)
    }) {
        return Ok(Lookup::Found(id));
    }
    let hold = runner_lookup::list_hold(
        started,
        state.ctx.now(),
        state.ctx.settings.registration_check_interval,
    );
    let gh_scope = &github_scope(&authority.scope);
    let github = github_for_pod(pod, &state.ctx, authority).await?;
    state
        .directory
        .find(gh_scope, &name, hold, || {
            github.list_runners_revalidated(gh_scope)
        })
        .await
        .map_err(github_err("list runners", &gh_scope.config_path()))
}

/// The GitHub client for a pod: the credentials its owner names (see the module
/// documentation).
async fn github_for_pod(
    pod: &RunnerPod,
    ctx: &Context,
    authority: &Authority,
) -> Result<Arc<dyn GitHubApi>, Error> {
    ctx.github_for_secret(
        &pod.namespace().unwrap_or_default(),
        authority.credentials_secret.as_deref(),
    )
    .await
}

/// The authority `pod`'s owner chain grants, remembered for the pod's life (so a pod whose
/// owner went first is still unregistered as it was registered).
async fn granted(pod: &RunnerPod, ctx: &Context) -> Result<Result<Authority, Untrusted>, Error> {
    let uid = pod.uid().unwrap_or_default();
    if let Some(authority) = ctx.authorities.get(&uid) {
        return Ok(Ok(authority));
    }
    let owners = crate::authority::Owners {
        client: &ctx.client,
        runners: Some(&ctx.stores.runners),
        sets: Some(crate::authority::SetStores {
            stateful_sets: &ctx.stores.stateful_sets,
            runner_sets: &ctx.stores.runner_sets,
        }),
    };
    let found = crate::authority::of_pod(pod, &owners)
        .await
        .map_err(kube_err("look up the owners of pod", object_name(pod)))?;
    if let Ok(authority) = &found {
        ctx.authorities.insert(&uid, authority);
    }
    Ok(found)
}

/// Removes the runner-pod finalizer of a deleted pod: Hangar is done with it.
async fn release_finalizer(pod: &RunnerPod, state: &RunnerPodState) -> Result<(), Error> {
    let ctx = &state.ctx;
    let rest: Vec<String> = pod
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer::RUNNER_POD)
        .cloned()
        .collect();
    let uid = pod.uid().unwrap_or_default();
    if set_finalizers(pod, ctx, rest).await? == FinalizersWritten::Held {
        state.released.note(&uid, ctx.now());
    }
    ctx.authorities.forget(&uid);
    Ok(())
}
