//! Retirement of deleted owners: the IO shared by the Runner, RunnerReplicaSet,
//! RunnerDeployment and RunnerSet controllers around [`hangar_core::retirement`].
//!
//! Each of the four kinds holds a finalizer ([`finalizer::RUNNER`] on Runners, ARC's name;
//! [`finalizer::RETIRE_RUNNERS`] on the others) from its first reconcile on. Deleted, it counts
//! as desired 0: its runners leave through unregister-before-delete, and the finalizer goes once
//! none is left. Children hold the finalizer too, so the garbage collector (or a namespace
//! deletion) deleting a child only starts the child's own retirement. The wait is bounded by
//! [`timeout`]; when it runs out the owner hands a zero timeout on to its children
//! ([`force_children`]), so each forces itself and says so in a Warning event.
//!
//! A namespace deletion deletes pods directly; the admission webhook of
//! [`crate::admission::retire`] holds those deletes back while a pod's runner may be busy
//! ([`runner_pod`] tells), until the pod's own [`timeout_or`] has passed. A forced pod is
//! therefore annotated with a zero timeout before Hangar deletes it.
//!
//! A finalizer is removed once. The Runner and runner-pod controllers remember by UID whose
//! finalizer they removed while it was being deleted (`released`, a
//! [`hangar_runtime::watch::UidTimes`]) and do not send that removal again. A store shows a
//! removal only once its watch event arrives; a reconcile run on the older copy meanwhile
//! (another event of the object was queued) would send it again, to be answered 404 (the object
//! is gone) or 422 (its finalizers changed): wasted writes, about 0.7 per job under load. A
//! removal answered 2xx or 404 holds, since an object being deleted cannot gain a finalizer;
//! one answered 422 or 409 is not remembered, and the next reconcile decides again from the
//! newer copy.

use std::time::{Duration, SystemTime};

use hangar_api::annotation;
use hangar_runtime::pod::RunnerPod;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

pub use hangar_runtime::retirement::{deleting_since, holds, runner_pod, timeout_or};

use super::{object_name, rfc3339};
use crate::conditions::{Desired, kind};
use crate::context::Context;
use crate::error::{Error, ignore_not_found, kube_err};

/// Reason of the Warning event and condition of an owner whose retirement timed out.
pub const TIMED_OUT: &str = "RetirementTimedOut";

/// Reason of the event and `Progressing` condition of an owner waiting for its runners.
pub const RETIRING: &str = "Retiring";

/// The owner's retirement timeout: its [`annotation::RETIREMENT_TIMEOUT`], else the
/// controller's `--retirement-timeout`.
pub fn timeout(obj: &impl ResourceExt, ctx: &Context) -> Duration {
    timeout_or(obj, ctx.settings.retirement_timeout)
}

/// Gives the pod `name` a zero retirement timeout, so that Hangar's forced delete of it passes
/// the deletion guard of a terminating namespace.
pub async fn mark_forced(pods: &Api<RunnerPod>, name: &str) -> Result<(), Error> {
    let ns = pods.namespace().unwrap_or_default().to_owned();
    super::sets::stamp(pods, name, annotation::RETIREMENT_TIMEOUT, "0s")
        .await
        .map(drop)
        .or_else(ignore_not_found)
        .map_err(kube_err("force retirement of pod", format!("{ns}/{name}")))
}

/// Decides a deleting owner's next step from how many runners (or children) it still has.
pub fn step(
    obj: &impl ResourceExt,
    since: SystemTime,
    remaining: usize,
    ctx: &Context,
) -> hangar_core::retirement::Step {
    hangar_core::retirement::step(&hangar_core::retirement::Observed {
        deleting_since: since,
        timeout: timeout(obj, ctx),
        now: ctx.now(),
        remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
    })
}

/// Adds `finalizer` to a live `obj`, or removes it (`present: false`), in one merge patch
/// conditional on the `resourceVersion` read. A conflict (the object changed since it was read)
/// is no failure: `Ok(false)`; a finalizer not added is added by the next reconcile, and a
/// removal is retried through [`released`].
pub async fn set_finalizer<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
    present: bool,
) -> Result<bool, Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut finalizers: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    if present {
        finalizers.push(finalizer.to_owned());
    }
    let patch = serde_json::json!({ "metadata": {
        "resourceVersion": obj.resource_version(),
        "finalizers": finalizers,
    }});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| true)
    .or_else(|e| ignore_not_found(e).map(|()| true))
    .or_else(|e| match e {
        kube::Error::Api(ref s) if s.code == 409 => Ok(false),
        e => Err(e),
    })
    .map_err(kube_err("update retirement finalizer of", object_name(obj)))
}

/// How soon an object whose finalizer write met a conflict is decided again.
pub const CONFLICT_RECHECK: Duration = Duration::from_secs(1);

/// What a reconcile returns after removing its finalizer ([`set_finalizer`]'s answer): once it
/// is gone nothing is left to do; after a conflict (the object changed since it was read) the
/// object is decided again soon, whether or not a watch event for the change arrives — the
/// only event left to come might be lost to a watch that restarted.
pub fn released(written: bool) -> Action {
    if written {
        Action::await_change()
    } else {
        Action::requeue(CONFLICT_RECHECK)
    }
}

/// Deletes the children `names` (each then retires by its own finalizer).
pub async fn delete_children<K>(api: &Api<K>, ns: &str, names: &[String]) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for name in names {
        api.delete(name, &DeleteParams::background())
            .await
            .map(drop)
            .or_else(ignore_not_found)
            .map_err(kube_err(
                "delete child of deleted owner",
                format!("{ns}/{name}"),
            ))?;
    }
    Ok(())
}

/// Forces the children `names` out: a zero retirement timeout, then a delete, so each forces
/// itself on its next reconcile.
pub async fn force_children<K>(api: &Api<K>, ns: &str, names: &[String]) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({ "metadata": { "annotations": {
        annotation::RETIREMENT_TIMEOUT: "0s",
    }}});
    for name in names {
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .or_else(ignore_not_found)
            .map_err(kube_err(
                "force retirement of child",
                format!("{ns}/{name}"),
            ))?;
    }
    delete_children(api, ns, names).await
}

/// The `Progressing` condition of a deleting owner still waiting for `remaining` runners.
pub fn waiting(remaining: usize, what: &str, force_at: SystemTime) -> Desired {
    Desired::yes(
        kind::PROGRESSING,
        RETIRING,
        format!(
            "deleting: waiting for {remaining} {what} to finish their jobs and unregister; \
             forced at {}",
            rfc3339(force_at)
        ),
    )
}

/// The Warning event text of an owner forcing its retirement.
pub fn forced_note(timeout: Duration, remaining: usize, what: &str) -> String {
    format!(
        "retirement timed out after {}s: deleting {remaining} {what} now; busy runners are \
         killed mid-job",
        timeout.as_secs()
    )
}
