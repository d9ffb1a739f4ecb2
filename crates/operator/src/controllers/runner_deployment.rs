//! RunnerDeployment controller: one RunnerReplicaSet per template version, surge rollouts.
//!
//! The desired RunnerReplicaSet is the deployment's template plus the label
//! `runner-deployment-name`, named `<deployment>-<template hash>` and labelled with that hash —
//! so a template change yields a new set, and re-applying the same template finds the same set.
//! The newest set gets the deployment's `replicas` and `effectiveTime`. Older sets are scaled to
//! 0 only once the newest set has all its runners ready (and registered), and deleted once they
//! have no runners left; their runners go through unregister-before-delete on the way, so a
//! rollout never kills a busy runner.
//!
//! A deployment holds the finalizer `hangar.dev/retire-runners`. Deleted, it deletes its
//! RunnerReplicaSets — each retires its runners by its own finalizer — and lets go once they are
//! gone, or forces them once its retirement timeout has passed ([`super::retirement`]);
//! meanwhile `Progressing` says `Retiring` and how many runners are left.
//!
//! Conditions: `Available` (all wanted runners registered and ready; when not, the newest set's
//! reason — e.g. a runner whose credentials Secret is missing) and `Progressing` (a rollout
//! while older sets drain, else the newest set's).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hangar_api::{RunnerDeployment, RunnerReplicaSet, RunnerReplicaSetSpec, finalizer, label};
use hangar_core::rollout::{self, RolloutInput, SetView};
use hangar_core::template_hash::template_hash;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use super::{object_name, retirement};
use crate::conditions::{self, Desired, kind, reason};
use crate::context::Context;
use crate::error::{Error, ignore_not_found, kube_err};
use crate::reconciler::Reconciler;
use hangar_runtime::watch::Triggers;

/// Field manager for RunnerReplicaSets.
pub use hangar_runtime::managers::RUNNER_DEPLOYMENT as MANAGER;

/// The RunnerDeployment controller in the shared skeleton.
const SKELETON: Reconciler<RunnerDeployment> = Reconciler::new("runnerdeployment");

/// Runs the controller until the stream ends.
pub async fn run(
    ctx: Arc<Context>,
    deployments: Triggers<RunnerDeployment>,
    sets: Triggers<RunnerReplicaSet>,
) {
    Controller::for_shared_stream(deployments, ctx.stores.deployments.clone())
        .owns_shared_stream(sets)
        .with_config(ctx.settings.controller_config())
        .run(SKELETON.reconcile(reconcile), SKELETON.error_policy(), ctx)
        .for_each(|_| async {})
        .await;
}

/// The RunnerReplicaSet a deployment wants now. `common_labels` (`--common-runner-labels`) are
/// appended to the template's runner labels, as in ARC, so they are part of the template hash:
/// changing them rolls the runners out.
pub fn desired_set(rd: &RunnerDeployment, common_labels: &[String]) -> RunnerReplicaSet {
    let name = rd.name_any();
    let mut template = rd.spec.template.clone();
    if !common_labels.is_empty() {
        let labels = template.spec.config.labels.get_or_insert_with(Vec::new);
        for common in common_labels {
            if !labels.contains(common) {
                labels.push(common.clone());
            }
        }
    }
    let mut meta = template.metadata.take().unwrap_or_default();
    let mut labels = meta.labels.take().unwrap_or_default();
    labels.insert(label::RUNNER_DEPLOYMENT_NAME.into(), name.clone());
    meta.labels = Some(labels);
    template.metadata = Some(meta);
    let hash = template_hash(&serde_json::to_vec(&template).unwrap_or_default());
    if let Some(l) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        l.insert(label::RUNNER_TEMPLATE_HASH.into(), hash.clone());
    }
    let mut selector = rd.spec.selector.clone().unwrap_or_else(|| LabelSelector {
        match_labels: Some(BTreeMap::from([(
            label::RUNNER_DEPLOYMENT_NAME.to_owned(),
            name.clone(),
        )])),
        ..Default::default()
    });
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(label::RUNNER_TEMPLATE_HASH.into(), hash.clone());
    let mut set = RunnerReplicaSet::new(
        &format!("{name}-{hash}"),
        RunnerReplicaSetSpec {
            replicas: Some(rd.spec.replicas.unwrap_or(1)),
            effective_time: rd.spec.effective_time.clone(),
            selector: Some(selector),
            template,
        },
    );
    set.metadata = ObjectMeta {
        name: Some(format!("{name}-{hash}")),
        namespace: rd.namespace(),
        labels: Some(BTreeMap::from([
            (label::RUNNER_DEPLOYMENT_NAME.to_owned(), name),
            (label::RUNNER_TEMPLATE_HASH.to_owned(), hash),
        ])),
        owner_references: rd.controller_owner_ref(&()).map(|o| vec![o]),
        ..Default::default()
    };
    set
}

/// Whether `set` already has everything that applying `desired` sets: the same spec (replicas,
/// effective time, selector, template), its labels and its controller reference.
fn already_applied(set: &RunnerReplicaSet, desired: &RunnerReplicaSet) -> bool {
    let same_spec =
        serde_json::to_value(&set.spec).ok() == serde_json::to_value(&desired.spec).ok();
    let labels = set.labels();
    let labelled = desired
        .labels()
        .iter()
        .all(|(key, value)| labels.get(key) == Some(value));
    let owned = desired.owner_references().iter().all(|want| {
        set.owner_references()
            .iter()
            .any(|have| have.uid == want.uid && have.controller == want.controller)
    });
    same_spec && labelled && owned
}

/// How the deployment's runners register: as its newest set's template says.
fn placeholder_template(desired: &RunnerReplicaSet) -> super::placeholder::Template<'_> {
    super::placeholder::Template {
        config: &desired.spec.template.spec.config,
        node_selector: desired.spec.template.spec.pod.node_selector.as_ref(),
    }
}

/// Reconciles one RunnerDeployment.
pub async fn reconcile(rd: Arc<RunnerDeployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    let desired = desired_set(&rd, &ctx.settings.common_runner_labels);
    let ns = rd.namespace().unwrap_or_default();
    let uid = rd.uid().unwrap_or_default();
    let api: Api<RunnerReplicaSet> = Api::namespaced(ctx.client.clone(), &ns);
    let deployments: Api<RunnerDeployment> = Api::namespaced(ctx.client.clone(), &ns);
    if let Some(since) = retirement::deleting_since(rd.as_ref()) {
        // The registration-only runner goes by its own finalizer.
        super::placeholder::sync(rd.as_ref(), 0, placeholder_template(&desired), 0, &ctx).await?;
        if !retirement::holds(rd.as_ref(), finalizer::RETIRE_RUNNERS) {
            return Ok(Action::await_change());
        }
        return retire(&rd, since, &api, &deployments, &ctx).await;
    }
    if !retirement::holds(rd.as_ref(), finalizer::RETIRE_RUNNERS) {
        // The placeholder's write below is conditional on this copy's resourceVersion, which
        // this one moves: decide again with the fresh copy.
        retirement::set_finalizer(&deployments, rd.as_ref(), finalizer::RETIRE_RUNNERS, true)
            .await?;
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    let desired_name = desired.name_any();
    let replicas = desired.spec.replicas.unwrap_or(1);

    // Server-side apply is idempotent: same template, same set; changed replicas or effective
    // time are updated in place. An apply that changes nothing still costs the apiserver a
    // request, and every status change of the set wakes this reconcile, so the cached set is
    // trusted when it already says what the apply would (a stale cache only delays the apply
    // to the watch event that brings the change).
    let cached = ctx
        .stores
        .replica_sets
        .get(&ObjectRef::new(&desired_name).within(&ns));
    let newest = match cached {
        Some(set) if already_applied(&set, &desired) => set,
        _ => Arc::new(
            api.patch(
                &desired_name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&desired),
            )
            .await
            .map_err(kube_err(
                "apply runnerreplicaset",
                format!("{ns}/{desired_name}"),
            ))?,
        ),
    };

    let sets: Vec<Arc<RunnerReplicaSet>> = ctx
        .stores
        .replica_sets
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
        .filter(|s| s.owner_references().iter().any(|o| o.uid == uid))
        .collect();
    let newest_status = newest.status.clone().unwrap_or_default();
    let plan = rollout::plan(&RolloutInput {
        newest: desired_name.clone(),
        replicas,
        newest_ready: newest_status.ready_replicas.unwrap_or(0),
        newest_replicas: newest_status.replicas.unwrap_or(0),
        sets: sets.iter().map(|s| set_view(s)).collect(),
        sync_period: ctx.settings.sync_period,
    });
    for old_name in &plan.scale_to_zero {
        let patch = serde_json::json!({ "spec": { "replicas": 0 } });
        api.patch(old_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(
                "scale down old runnerreplicaset",
                format!("{ns}/{old_name}"),
            ))?;
        info!(deployment = %object_name(rd.as_ref()), set = old_name, "scaling old runnerreplicaset to 0");
    }
    for old_name in &plan.delete {
        api.delete(old_name, &DeleteParams::background())
            .await
            .map(drop)
            .or_else(ignore_not_found)
            .map_err(kube_err(
                "delete old runnerreplicaset",
                format!("{ns}/{old_name}"),
            ))?;
        info!(deployment = %object_name(rd.as_ref()), set = old_name, "deleted old runnerreplicaset");
    }

    let counts = plan.counts;
    // Before the status write: the placeholder's patch is conditional on the resourceVersion
    // read, which a status write would move.
    super::placeholder::sync(
        rd.as_ref(),
        rd.spec.replicas.unwrap_or(1),
        placeholder_template(&desired),
        counts.ready,
        &ctx,
    )
    .await?;
    let old_conditions = rd
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut wanted = deployment_conditions(
        counts.desired,
        counts.ready,
        &newest_status,
        counts.old_sets,
    );
    wanted.extend(super::fields::fields_honored(
        &ctx,
        rd.object_ref(&()),
        &old_conditions,
        &hangar_api::ignored::runner_deployment(&rd.spec),
    ));
    let conditions = conditions::merge(&old_conditions, &wanted, rd.metadata.generation, ctx.now());
    let status = serde_json::json!({ "status": {
        "desiredReplicas": counts.desired,
        "replicas": counts.replicas,
        "readyReplicas": counts.ready,
        "availableReplicas": counts.available,
        "updatedReplicas": counts.updated,
        "busyReplicas": sets
            .iter()
            .filter_map(|s| s.status.as_ref()?.busy_replicas)
            .sum::<i32>(),
        "unhealthyReplicas": sets
            .iter()
            .filter_map(|s| s.status.as_ref()?.unhealthy_replicas)
            .sum::<i32>(),
        "conditions": conditions,
    }});
    let current = serde_json::to_value(&rd.status).unwrap_or_default();
    let changed = current != status["status"];
    let held = if changed {
        ctx.status_pace
            .patch_status(
                &ctx.client,
                rd.as_ref(),
                status["status"].clone(),
                "patch status of runnerdeployment",
            )
            .await?
    } else {
        None
    };
    // Back for the held status, if any.
    Ok(Action::requeue(
        held.map_or(plan.requeue, |held| held.min(plan.requeue)),
    ))
}

/// A RunnerReplicaSet as the rollout sees it.
fn set_view(s: &RunnerReplicaSet) -> SetView {
    let status = s.status.clone().unwrap_or_default();
    SetView {
        name: s.name_any(),
        spec_replicas: s.spec.replicas,
        status_replicas: status.replicas.unwrap_or(0),
        ready: status.ready_replicas.unwrap_or(0),
        available: status.available_replicas.unwrap_or(0),
        deleting: s.metadata.deletion_timestamp.is_some(),
    }
}

/// One step of a deleted deployment's retirement: its sets are deleted (each retires its own
/// runners), and the finalizer goes once they are gone or the timeout forced them.
async fn retire(
    rd: &RunnerDeployment,
    since: std::time::SystemTime,
    api: &Api<RunnerReplicaSet>,
    deployments: &Api<RunnerDeployment>,
    ctx: &Context,
) -> Result<Action, Error> {
    let ns = rd.namespace().unwrap_or_default();
    let uid = rd.uid().unwrap_or_default();
    let sets: Vec<Arc<RunnerReplicaSet>> = ctx
        .stores
        .replica_sets
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
        .filter(|s| s.owner_references().iter().any(|o| o.uid == uid))
        .collect();
    let names: Vec<String> = sets.iter().map(|s| s.name_any()).collect();
    let runners: i32 = sets
        .iter()
        .filter_map(|s| s.status.as_ref().and_then(|s| s.replicas))
        .sum();
    match retirement::step(rd, since, sets.len(), ctx) {
        hangar_core::retirement::Step::Release => {}
        hangar_core::retirement::Step::Force => {
            let timeout = retirement::timeout(rd, ctx);
            warn!(deployment = %object_name(rd), "retirement timed out, forcing its runners out");
            ctx.event(
                rd.object_ref(&()),
                true,
                retirement::TIMED_OUT,
                retirement::forced_note(
                    timeout,
                    usize::try_from(runners).unwrap_or(0),
                    "runner(s)",
                ),
            );
            retirement::force_children(api, &ns, &names).await?;
        }
        hangar_core::retirement::Step::Wait { force_at } => {
            let live: Vec<String> = sets
                .iter()
                .filter(|s| s.metadata.deletion_timestamp.is_none())
                .map(|s| s.name_any())
                .collect();
            if !live.is_empty() {
                retirement::delete_children(api, &ns, &live).await?;
                ctx.event(
                    rd.object_ref(&()),
                    false,
                    retirement::RETIRING,
                    format!(
                        "deleting: {runners} runner(s) are unregistered first, busy ones after \
                         their job (forced at {})",
                        super::rfc3339(force_at)
                    ),
                );
            }
            let progress =
                retirement::waiting(usize::try_from(runners).unwrap_or(0), "runner(s)", force_at);
            let old = rd
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            let conditions =
                conditions::merge(&old, &[progress], rd.metadata.generation, ctx.now());
            if conditions != old {
                let status = serde_json::json!({ "status": {
                    "replicas": runners,
                    "conditions": conditions,
                }});
                deployments
                    .patch_status(
                        &rd.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&status),
                    )
                    .await
                    .map_err(kube_err(
                        "patch status of runnerdeployment",
                        object_name(rd),
                    ))?;
            }
            let left = force_at.duration_since(ctx.now()).unwrap_or_default();
            return Ok(Action::requeue(
                Duration::from_secs(5).min(left + Duration::from_millis(100)),
            ));
        }
    }
    let written =
        retirement::set_finalizer(deployments, rd, finalizer::RETIRE_RUNNERS, false).await?;
    Ok(retirement::released(written))
}

/// A deployment's conditions, from its counts, its newest set's conditions and how many older
/// sets still drain.
pub fn deployment_conditions(
    desired: i32,
    ready: i32,
    newest: &hangar_api::RunnerReplicaSetStatus,
    old_sets: usize,
) -> Vec<Desired> {
    let newest_conditions = newest.conditions.as_deref();
    let counts = format!("{ready} of {desired} runner(s) registered and ready");
    let available = if ready >= desired {
        Desired::yes(kind::AVAILABLE, reason::RUNNERS_AVAILABLE, counts)
    } else {
        match conditions::find(newest_conditions, kind::AVAILABLE) {
            Some(c) if c.status == "False" && c.reason == reason::RUNNERS_FAILING => {
                conditions::copied(kind::AVAILABLE, c)
            }
            _ => Desired::no(kind::AVAILABLE, reason::RUNNERS_UNAVAILABLE, counts),
        }
    };
    let progressing = if old_sets > 0 {
        Desired::yes(
            kind::PROGRESSING,
            reason::ROLLING_OUT,
            format!(
                "rolling out a new template: runners of {old_sets} older runner set(s) are \
                 unregistered and deleted once the new runners are ready"
            ),
        )
    } else {
        match conditions::find(newest_conditions, kind::PROGRESSING) {
            Some(c) => conditions::copied(kind::PROGRESSING, c),
            None => Desired::yes(
                kind::PROGRESSING,
                reason::SCALING_UP,
                "waiting for the runner set to report",
            ),
        }
    };
    let mut wanted = vec![available, progressing];
    // The newest set's runners are the ones being created; the condition is its.
    if let Some(c) = conditions::find(newest_conditions, kind::RUNNERS_HEALTHY) {
        wanted.push(conditions::copied(kind::RUNNERS_HEALTHY, c));
    }
    wanted
}

#[cfg(test)]
mod tests {
    use super::*;
    use hangar_api::RunnerReplicaSetStatus;

    fn set_status(
        available: (bool, &str, &str),
        progressing: (bool, &str),
    ) -> RunnerReplicaSetStatus {
        let now = std::time::SystemTime::UNIX_EPOCH;
        let wanted = [
            Desired {
                kind: kind::AVAILABLE,
                status: available.0,
                reason: available.1.into(),
                message: available.2.into(),
            },
            Desired {
                kind: kind::PROGRESSING,
                status: progressing.0,
                reason: progressing.1.into(),
                message: String::new(),
            },
        ];
        RunnerReplicaSetStatus {
            conditions: Some(conditions::merge(&[], &wanted, None, now)),
            ..Default::default()
        }
    }

    #[test]
    fn a_set_that_already_says_what_the_apply_would_is_not_applied_again() {
        let mut rd = RunnerDeployment::new("ci", Default::default());
        rd.metadata.namespace = Some("ns".into());
        rd.metadata.uid = Some("uid-1".into());
        rd.spec.replicas = Some(3);
        rd.spec.effective_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-28T10:00:00Z".parse().unwrap(),
        ));
        let desired = desired_set(&rd, &[]);
        let mut stored = desired.clone();
        stored.metadata.resource_version = Some("42".into());
        stored
            .labels_mut()
            .insert("added-by".into(), "someone-else".into());
        stored.status = Some(RunnerReplicaSetStatus {
            replicas: Some(2),
            ..Default::default()
        });
        assert!(
            already_applied(&stored, &desired),
            "status and extra labels do not count"
        );

        let mut scaled = stored.clone();
        scaled.spec.replicas = Some(2);
        assert!(!already_applied(&scaled, &desired), "replicas differ");
        let mut stale = stored.clone();
        stale.spec.effective_time = None;
        assert!(!already_applied(&stale, &desired), "effective time differs");
        let mut relabelled = stored.clone();
        relabelled
            .labels_mut()
            .insert(label::RUNNER_TEMPLATE_HASH.into(), "other".into());
        assert!(!already_applied(&relabelled, &desired), "a label differs");
        let mut orphan = stored;
        orphan.metadata.owner_references = None;
        assert!(
            !already_applied(&orphan, &desired),
            "not owned by the deployment"
        );
    }

    #[test]
    fn a_failing_runner_of_the_newest_set_reaches_the_deployment() {
        let newest = set_status(
            (
                false,
                reason::RUNNERS_FAILING,
                "runner x: secret ns/creds does not exist",
            ),
            (false, reason::REPLICAS_SYNCED),
        );
        let c = deployment_conditions(2, 0, &newest, 0);
        assert_eq!(c[0].reason, "RunnersFailing");
        assert!(c[0].message.contains("ns/creds"));
        assert_eq!(
            (c[1].status, c[1].reason.as_str()),
            (false, "ReplicasSynced")
        );
    }

    #[test]
    fn older_sets_mean_a_rollout_and_enough_ready_runners_mean_available() {
        let newest = set_status(
            (true, reason::RUNNERS_AVAILABLE, ""),
            (false, reason::REPLICAS_SYNCED),
        );
        let c = deployment_conditions(2, 2, &newest, 1);
        assert_eq!(
            (c[0].status, c[0].reason.as_str()),
            (true, "RunnersAvailable")
        );
        assert_eq!((c[1].status, c[1].reason.as_str()), (true, "RollingOut"));
    }

    #[test]
    fn common_runner_labels_join_the_template_and_its_hash() {
        let rd: RunnerDeployment = serde_json::from_value(serde_json::json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "RunnerDeployment",
            "metadata": {"name": "app", "namespace": "ns"},
            "spec": {"template": {"spec": {"repository": "octo/app", "labels": ["gpu"]}}},
        }))
        .unwrap();
        let plain = desired_set(&rd, &[]);
        let common = desired_set(&rd, &["team-a".to_owned(), "gpu".to_owned()]);
        assert_eq!(
            common.spec.template.spec.config.labels.as_deref(),
            Some(&["gpu".to_owned(), "team-a".to_owned()][..]),
            "appended once each"
        );
        assert_ne!(plain.name_any(), common.name_any(), "a new template hash");
        assert_eq!(
            plain.spec.template.spec.config.labels.as_deref(),
            Some(&["gpu".to_owned()][..])
        );
    }
}
