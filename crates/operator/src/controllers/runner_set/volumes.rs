//! Persistent-volume reuse for a RunnerSet: the driver of [`hangar_core::volumes::plan`].
//!
//! Observe: the set's claims (a store of PersistentVolumeClaims labelled `runnerset-name`, in
//! the watched namespace or all of them) and the volumes given up by any set (a cluster-wide
//! store of PersistentVolumes labelled `pending-cleanup`; PersistentVolumes are
//! cluster-scoped, so this is the one cluster-wide read even with `--watch-namespace`), plus the
//! StatefulSet store. Decide: `volumes::plan`. Apply, in the plan's order: label claims, label
//! volumes `pending-cleanup=<set>`, delete claims (only after a GET confirms their StatefulSet
//! is gone, since two watches are not ordered with each other; with the claim's UID as a
//! precondition), and release volumes by removing `spec.claimRef` with the `resourceVersion`
//! that was observed `Released` as a precondition, so a volume that changed meanwhile is left
//! for the next event.

use std::collections::BTreeSet;

use hangar_api::{RunnerSet, label};
use hangar_core::volumes::{self, Action, ClaimView, VolumeView};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info};

use super::RunnerSetContext;
use crate::controllers::object_name;
use crate::error::{Error, ignore_not_found, kube_err};

/// The stores volume reuse reads.
#[derive(Clone)]
pub struct VolumeStores {
    /// PersistentVolumeClaims labelled `runnerset-name`.
    pub claims: Store<PersistentVolumeClaim>,
    /// PersistentVolumes labelled `pending-cleanup` (cluster-scoped).
    pub volumes: Store<PersistentVolume>,
}

impl std::fmt::Debug for VolumeStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeStores")
            .field("claims", &self.claims.len())
            .field("volumes", &self.volumes.len())
            .finish()
    }
}

/// The `runnerset-name` label on a claim and its namespace: the set it triggers.
pub fn claim_trigger(pvc: &PersistentVolumeClaim) -> Option<ObjectRef<RunnerSet>> {
    let set = pvc.labels().get(label::RUNNERSET_NAME)?;
    Some(ObjectRef::new(set).within(&pvc.namespace()?))
}

/// The `pending-cleanup` label on a volume and the namespace of its claim: the set it
/// triggers, when that namespace is watched (`only`, or every namespace).
pub fn volume_trigger(pv: &PersistentVolume, only: Option<&str>) -> Option<ObjectRef<RunnerSet>> {
    let set = pv.labels().get(label::PENDING_CLEANUP)?;
    let ns = pv.spec.as_ref()?.claim_ref.as_ref()?.namespace.as_deref()?;
    if only.is_some_and(|only| only != ns) {
        return None;
    }
    Some(ObjectRef::new(set).within(ns))
}

/// A claim as the plan sees it.
pub fn claim_view(pvc: &PersistentVolumeClaim) -> ClaimView {
    let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    ClaimView {
        name: pvc.name_any(),
        stateful_set: pvc.labels().get(label::RUNNER_STATEFULSET_NAME).cloned(),
        bound_volume: pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .filter(|_| bound),
        deleting: pvc.metadata.deletion_timestamp.is_some(),
    }
}

/// A volume as the plan sees it; `None` without the `pending-cleanup` label.
pub fn volume_view(pv: &PersistentVolume) -> Option<VolumeView> {
    let claim = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    Some(VolumeView {
        name: pv.name_any(),
        pending_cleanup: pv.labels().get(label::PENDING_CLEANUP)?.clone(),
        released: pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released"),
        claim: claim.and_then(|c| Some((c.namespace.clone()?, c.name.clone()?))),
    })
}

/// What `plan` is given for `set`: `live` are the StatefulSets that exist.
fn input(set: &RunnerSet, stores: &VolumeStores, live: BTreeSet<String>) -> volumes::Input {
    let ns = set.namespace().unwrap_or_default();
    let name = set.name_any();
    volumes::Input {
        claims: stores
            .claims
            .state()
            .iter()
            .filter(|c| c.namespace().as_deref() == Some(ns.as_str()))
            .filter(|c| c.labels().get(label::RUNNERSET_NAME) == Some(&name))
            .map(|c| claim_view(c))
            .collect(),
        volumes: stores
            .volumes
            .state()
            .iter()
            .filter_map(|v| volume_view(v))
            .collect(),
        claim_templates: set
            .spec
            .stateful_set
            .volume_claim_templates
            .iter()
            .flatten()
            .filter_map(|t| t.metadata.name.clone())
            .collect(),
        stateful_sets: live,
        namespace: ns,
        runner_set: name,
    }
}

/// Recycles the volumes of `set`'s runners whose StatefulSets are gone. `deleted` are the
/// StatefulSets this reconcile just deleted (the store may not know yet).
pub async fn sync(
    set: &RunnerSet,
    state: &RunnerSetContext,
    deleted: &BTreeSet<String>,
) -> Result<(), Error> {
    let ctx = &state.ctx;
    let ns = set.namespace().unwrap_or_default();
    let live: BTreeSet<String> = state
        .stateful_sets
        .state()
        .iter()
        .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
        .map(|s| s.name_any())
        .filter(|n| !deleted.contains(n))
        .collect();
    let plan = volumes::plan(&input(set, &state.volumes, live));
    if plan.is_empty() {
        return Ok(());
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let sets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &ns);
    let merge = |v: serde_json::Value| Patch::Merge(v);
    for action in plan {
        match action {
            Action::LabelClaim {
                claim,
                stateful_set,
            } => {
                let patch = serde_json::json!({ "metadata": { "labels": {
                    label::RUNNER_STATEFULSET_NAME: stateful_set,
                } } });
                claims
                    .patch(&claim, &PatchParams::default(), &merge(patch))
                    .await
                    .map(drop)
                    .or_else(ignore_not_found)
                    .map_err(kube_err("label claim", format!("{ns}/{claim}")))?;
            }
            Action::MarkVolume { volume } => {
                let patch = serde_json::json!({ "metadata": { "labels": {
                    label::PENDING_CLEANUP: set.name_any(),
                } } });
                pvs.patch(&volume, &PatchParams::default(), &merge(patch))
                    .await
                    .map(drop)
                    .or_else(ignore_not_found)
                    .map_err(kube_err("mark volume for reuse", volume.clone()))?;
                debug!(set = %object_name(set), volume, "marked volume for reuse");
            }
            Action::DeleteClaim {
                claim,
                stateful_set,
            } => {
                // The stores may lag behind each other: only the apiserver can say the
                // StatefulSet is gone.
                let exists = sets
                    .get_opt(&stateful_set)
                    .await
                    .map_err(kube_err("read statefulset", format!("{ns}/{stateful_set}")))?
                    .is_some();
                if exists {
                    continue;
                }
                let uid = state
                    .volumes
                    .claims
                    .get(&ObjectRef::new(&claim).within(&ns))
                    .and_then(|c| c.uid());
                let params = DeleteParams {
                    preconditions: uid.map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                match claims.delete(&claim, &params).await {
                    Ok(_) => {}
                    // Gone, or replaced by another claim of the same name: nothing to do.
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => continue,
                    Err(e) => return Err(kube_err("delete claim", format!("{ns}/{claim}"))(e)),
                }
                info!(set = %object_name(set), claim, stateful_set, "deleted the claim of a finished runner");
                ctx.event(
                    set.object_ref(&()),
                    false,
                    "DeletedClaim",
                    format!(
                        "deleted claim {claim} of finished runner {stateful_set}; its volume \
                         goes to the next runner"
                    ),
                );
            }
            Action::ReleaseVolume { volume } => {
                let Some(observed) = state.volumes.volumes.get(&ObjectRef::new(&volume)) else {
                    continue;
                };
                let patch = serde_json::json!({
                    "metadata": {
                        "resourceVersion": observed.resource_version(),
                        "labels": { label::PENDING_CLEANUP: null },
                    },
                    "spec": { "claimRef": null },
                });
                match pvs
                    .patch(&volume, &PatchParams::default(), &merge(patch))
                    .await
                {
                    Ok(_) => {}
                    // Changed since it was observed Released (or gone): its next event decides.
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => continue,
                    Err(e) => return Err(kube_err("release volume", volume.clone())(e)),
                }
                info!(set = %object_name(set), volume, "released volume for the next runner");
                ctx.event(
                    set.object_ref(&()),
                    false,
                    "ReleasedVolume",
                    format!("volume {volume} is available to the next runner"),
                );
            }
        }
    }
    Ok(())
}
