//! RunnerDeployment controller: one RunnerReplicaSet per template version, surge rollouts.
//!
//! The desired RunnerReplicaSet is the deployment's template plus the label
//! `runner-deployment-name`, named `<deployment>-<template hash>` and labelled with that hash —
//! so a template change yields a new set, and re-applying the same template finds the same set.
//! The newest set gets the deployment's `replicas` and `effectiveTime`. Older sets are scaled to
//! 0 only once the newest set has all its runners ready (and registered), and deleted once they
//! have no runners left; their runners go through unregister-before-delete on the way, so a
//! rollout never kills a busy runner.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hangar_api::{RunnerDeployment, RunnerReplicaSet, RunnerReplicaSetSpec, label};
use hangar_core::template_hash::template_hash;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use super::object_name;
use crate::context::Context;
use crate::error::{Error, ignore_not_found, kube_err};

/// Field manager for RunnerReplicaSets.
pub const MANAGER: &str = "hangar-runnerdeployment";

/// Runs the controller until the stream ends.
pub async fn run(
    ctx: Arc<Context>,
    deployments: Api<RunnerDeployment>,
    sets: Api<RunnerReplicaSet>,
) {
    Controller::new(deployments, watcher::Config::default())
        .owns(sets, watcher::Config::default())
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

/// The RunnerReplicaSet a deployment wants now.
pub fn desired_set(rd: &RunnerDeployment) -> RunnerReplicaSet {
    let name = rd.name_any();
    let mut template = rd.spec.template.clone();
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

/// Reconciles one RunnerDeployment.
pub async fn reconcile(rd: Arc<RunnerDeployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    if rd.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = rd.namespace().unwrap_or_default();
    let uid = rd.uid().unwrap_or_default();
    let api: Api<RunnerReplicaSet> = Api::namespaced(ctx.client.clone(), &ns);
    let desired = desired_set(&rd);
    let desired_name = desired.name_any();
    let replicas = desired.spec.replicas.unwrap_or(1);

    // Server-side apply is idempotent: same template, same set; changed replicas or effective
    // time are updated in place.
    let newest = api
        .patch(
            &desired_name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&desired),
        )
        .await
        .map_err(kube_err(
            "apply runnerreplicaset",
            format!("{ns}/{desired_name}"),
        ))?;

    let sets: Vec<Arc<RunnerReplicaSet>> = ctx
        .stores
        .replica_sets
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
        .filter(|s| s.owner_references().iter().any(|o| o.uid == uid))
        .collect();
    let newest_ready = newest
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let rolled_out = newest_ready >= replicas;
    let mut requeue = ctx.settings.sync_period;
    for old in sets.iter().filter(|s| s.name_any() != desired_name) {
        let old_name = old.name_any();
        let old_replicas = old.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        if old.spec.replicas != Some(0) {
            if rolled_out {
                let patch = serde_json::json!({ "spec": { "replicas": 0 } });
                api.patch(&old_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(kube_err(
                        "scale down old runnerreplicaset",
                        format!("{ns}/{old_name}"),
                    ))?;
                info!(deployment = %object_name(rd.as_ref()), set = old_name, "scaling old runnerreplicaset to 0");
            }
            requeue = Duration::from_secs(5);
        } else if old_replicas == 0 && old.metadata.deletion_timestamp.is_none() {
            api.delete(&old_name, &DeleteParams::background())
                .await
                .map(drop)
                .or_else(ignore_not_found)
                .map_err(kube_err(
                    "delete old runnerreplicaset",
                    format!("{ns}/{old_name}"),
                ))?;
            info!(deployment = %object_name(rd.as_ref()), set = old_name, "deleted old runnerreplicaset");
        } else {
            requeue = Duration::from_secs(5);
        }
    }

    // Status: sums over all sets; up-to-date = the newest set's runners.
    let sum = |f: fn(&hangar_api::RunnerReplicaSetStatus) -> Option<i32>| -> i32 {
        sets.iter()
            .filter_map(|s| s.status.as_ref().and_then(f))
            .sum()
    };
    let newest_status = newest.status.clone().unwrap_or_default();
    let status = serde_json::json!({ "status": {
        "desiredReplicas": replicas,
        "replicas": sum(|s| s.replicas),
        "readyReplicas": sum(|s| s.ready_replicas),
        "availableReplicas": sum(|s| s.available_replicas),
        "updatedReplicas": newest_status.replicas.unwrap_or(0),
    }});
    let current = serde_json::to_value(&rd.status).unwrap_or_default();
    if current != status["status"] {
        Api::<RunnerDeployment>::namespaced(ctx.client.clone(), &ns)
            .patch_status(
                &rd.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await
            .map_err(kube_err(
                "patch status of runnerdeployment",
                object_name(rd.as_ref()),
            ))?;
    }
    Ok(Action::requeue(requeue))
}

/// Transient errors back off.
pub fn error_policy(rd: Arc<RunnerDeployment>, error: &Error, _ctx: Arc<Context>) -> Action {
    warn!(deployment = %object_name(rd.as_ref()), %error, "reconcile failed");
    Action::requeue(Duration::from_secs(10))
}
