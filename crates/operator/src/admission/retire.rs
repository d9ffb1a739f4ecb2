//! The deletion guard of runners in terminating namespaces: `POST /validate-runner-pod-deletion`
//! and `POST /validate-runner-statefulset-deletion`, validating webhooks on DELETE of runner
//! pods (label `actions-runner`) and of RunnerSet StatefulSets (label `runner-template-hash`), failing
//! open (`failurePolicy: Ignore`).
//!
//! A namespace deletion deletes pods directly, besides deleting their owners. The owners'
//! finalizers keep the Runner, RunnerReplicaSet, RunnerDeployment and RunnerSet objects while
//! they retire their runners, but a pod the namespace controller deleted would be stopped by
//! its kubelet at once, busy runner or not. This webhook refuses such a delete while the
//! namespace is terminating and the pod's runner may still be running a job
//! ([`hangar_core::retirement::pod_deletion`]); the namespace controller retries until the
//! namespace is empty, and meanwhile the owners' retirement unregisters the runners and
//! deletes their pods (idle ones at once, busy ones after their job). A RunnerSet's StatefulSet
//! is held as its pod is: deleted, it would leave its RunnerSet nothing to retire, and the
//! garbage collector would go for the pod. Deletes outside a terminating namespace are never
//! refused here.
//!
//! The hold ends with the object's retirement timeout, counted from the namespace's
//! `deletionTimestamp`: its `hangar.dev/retirement-timeout` annotation, else
//! `--retirement-timeout`. Hangar annotates what it forces with `0s` before deleting it
//! ([`crate::controllers::retirement::mark_forced`], `force_children`); anyone may do the same
//! to force a runner out now. Anything the webhook cannot read (the object, the pod, the
//! namespace) lets the delete through: the guard may only delay a delete, never block one for
//! good.

use std::time::Duration;

use hangar_core::retirement::{PodDeletion, PodDeletionVerdict, RunnerPod};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, ResourceExt};

use super::review::{AdmissionRequest, AdmissionResponse};
use crate::context::Clock;
use hangar_runtime::pod::observe::k8s_time;
use hangar_runtime::registration::names::pod_name;
use hangar_runtime::retirement;

/// Path of the runner-pod deletion guard.
pub const POD_PATH: &str = "/validate-runner-pod-deletion";

/// Path of the guard of RunnerSet StatefulSets: the namespace controller deletes them too,
/// and the garbage collector would then delete their pods without their RunnerSet's
/// retirement ever seeing them again.
pub const STATEFUL_SET_PATH: &str = "/validate-runner-statefulset-deletion";

/// What a deletion guard holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// Runner pods ([`POD_PATH`]).
    Pod,
    /// RunnerSet StatefulSets ([`STATEFUL_SET_PATH`]).
    StatefulSet,
}

/// Answers one DELETE of what `guard` holds.
pub async fn review(
    guard: Guard,
    client: &kube::Client,
    clock: &dyn Clock,
    default_timeout: Duration,
    req: &AdmissionRequest,
) -> AdmissionResponse {
    match guard {
        Guard::Pod => review_pod(client, clock, default_timeout, req).await,
        Guard::StatefulSet => review_stateful_set(client, clock, default_timeout, req).await,
    }
}

/// Answers one DELETE of a runner pod.
async fn review_pod(
    client: &kube::Client,
    clock: &dyn Clock,
    default_timeout: Duration,
    req: &AdmissionRequest,
) -> AdmissionResponse {
    let Some(pod) = deleted::<hangar_runtime::pod::RunnerPod>(req) else {
        return AdmissionResponse::allow(&req.uid);
    };
    let guarded = Guarded {
        what: format!("runner pod {}", pod.name_any()),
        timeout: retirement::timeout_or(&pod, default_timeout),
        pod: retirement::runner_pod(&pod),
    };
    hold(client, clock, req, &guarded).await
}

/// Answers one DELETE of a RunnerSet's StatefulSet: held as its pod `<name>-0` would be.
async fn review_stateful_set(
    client: &kube::Client,
    clock: &dyn Clock,
    default_timeout: Duration,
    req: &AdmissionRequest,
) -> AdmissionResponse {
    let allow = AdmissionResponse::allow(&req.uid);
    let Some(set) = deleted::<StatefulSet>(req) else {
        return allow;
    };
    let namespace = set.namespace().unwrap_or_default();
    let pod_name = pod_name(&set.name_any());
    let pod = match Api::<hangar_runtime::pod::RunnerPod>::namespaced(client.clone(), &namespace)
        .get_opt(&pod_name)
        .await
    {
        Ok(pod) => pod,
        Err(error) => {
            tracing::warn!(namespace, statefulset = %set.name_any(), %error,
                           "cannot read the runner pod; letting the StatefulSet's deletion through");
            return allow;
        }
    };
    let guarded = Guarded {
        what: format!("StatefulSet {} of runner pod {pod_name}", set.name_any()),
        timeout: retirement::timeout_or(&set, default_timeout),
        pod: pod
            .as_ref()
            .map_or(RunnerPod::Absent, retirement::runner_pod),
    };
    hold(client, clock, req, &guarded).await
}

/// The object a DELETE request is about, if it is one and readable.
fn deleted<K: serde::de::DeserializeOwned>(req: &AdmissionRequest) -> Option<K> {
    if req.operation != "DELETE" {
        return None;
    }
    serde_json::from_value(req.old_object.clone()?).ok()
}

/// An object whose delete may kill a busy runner.
struct Guarded {
    /// How the refusal names it.
    what: String,
    /// Its retirement timeout.
    timeout: Duration,
    /// Its runner's pod.
    pod: RunnerPod,
}

/// Refuses the delete of `guarded` while its namespace is terminating and its runner may be
/// busy ([`hangar_core::retirement::pod_deletion`]).
async fn hold(
    client: &kube::Client,
    clock: &dyn Clock,
    req: &AdmissionRequest,
    guarded: &Guarded,
) -> AdmissionResponse {
    let allow = AdmissionResponse::allow(&req.uid);
    // Only a runner that may hold a job needs the namespace read.
    if guarded.pod != RunnerPod::Alive {
        return allow;
    }
    let namespace = req.namespace.clone().unwrap_or_default();
    let deleting_since = match Api::<Namespace>::all(client.clone())
        .get_opt(&namespace)
        .await
    {
        Ok(ns) => ns
            .and_then(|ns| ns.metadata.deletion_timestamp)
            .map(|t| k8s_time(&t)),
        Err(error) => {
            tracing::warn!(namespace, object = guarded.what, %error,
                           "cannot read the namespace; letting the deletion through");
            return allow;
        }
    };
    let deletion = PodDeletion {
        namespace_deleting_since: deleting_since,
        pod: guarded.pod,
        timeout: guarded.timeout,
        now: clock.now(),
    };
    match hangar_core::retirement::pod_deletion(&deletion) {
        PodDeletionVerdict::Allow => allow,
        PodDeletionVerdict::Refuse { forced_at } => {
            let what = &guarded.what;
            tracing::info!(
                namespace,
                object = what,
                "holding a runner of a terminating namespace"
            );
            AdmissionResponse::deny(
                &req.uid,
                403,
                format!(
                    "{what} is retiring: namespace {namespace} is being deleted and the runner \
                     may be running a job. Hangar unregisters it first (a busy runner finishes \
                     its job) and then deletes it; its deletion is allowed from {} on. To \
                     delete it now, annotate it with {}=0s",
                    hangar_runtime::pod::observe::rfc3339(forced_at),
                    hangar_api::annotation::RETIREMENT_TIMEOUT,
                ),
            )
        }
    }
}
