//! What deleted owners and their runner pods say about retirement, read for
//! [`hangar_core::retirement`]: shared by the controllers that retire runners and the
//! admission webhook that holds back a namespace's pod deletions meanwhile.
//!
//! Contract: pure reads of objects already fetched; the IO of retirement stays with the
//! controllers.

use std::time::{Duration, SystemTime};

use hangar_api::annotation;
use hangar_core::owner_sync::PodPhase;
use hangar_core::retirement::RunnerPod;
use kube::ResourceExt;
use tracing::warn;

use crate::pod::observe::{
    annotation as annotation_of, k8s_time, object_name, pod_phase, runner_stopped,
};

/// The object's [`annotation::RETIREMENT_TIMEOUT`], else `default`. A malformed annotation is
/// logged and ignored: waiting the default is the safe reading.
pub fn timeout_or(obj: &impl ResourceExt, default: Duration) -> Duration {
    let Some(text) = annotation_of(obj, annotation::RETIREMENT_TIMEOUT) else {
        return default;
    };
    hangar_core::retirement::parse_timeout(text).unwrap_or_else(|error| {
        warn!(object = %object_name(obj), %error, "ignoring retirement timeout annotation");
        default
    })
}

/// Whether the runner of an existing `pod` may still be running a job, and if not, why.
pub fn runner_pod(pod: &crate::pod::RunnerPod) -> RunnerPod {
    if pod.metadata.deletion_timestamp.is_some() {
        RunnerPod::Deleting
    } else if runner_stopped(pod)
        || matches!(pod_phase(pod), PodPhase::Succeeded | PodPhase::Failed)
    {
        RunnerPod::Finished
    } else if annotation_of(pod, annotation::UNREGISTRATION_COMPLETE_TIMESTAMP).is_some() {
        RunnerPod::Unregistered
    } else {
        RunnerPod::Alive
    }
}

/// The owner's `deletionTimestamp`, if it is being deleted.
pub fn deleting_since(obj: &impl ResourceExt) -> Option<SystemTime> {
    obj.meta().deletion_timestamp.as_ref().map(k8s_time)
}

/// Whether `obj` carries `finalizer`.
pub fn holds(obj: &impl ResourceExt, finalizer: &str) -> bool {
    obj.finalizers().iter().any(|f| f == finalizer)
}
