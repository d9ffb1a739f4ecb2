//! What a runner pod (or any object) says, read into `hangar-core`'s terms: times, scopes, the
//! runner container's state, the view owner sync decides on.
//!
//! Contract: pure reads of objects already fetched; no API calls, no decisions. Controllers,
//! admission and the sweep read pods through these, so they agree on what a pod says.

use std::collections::BTreeMap;
use std::time::SystemTime;

use hangar_core::RunnerScope;
use hangar_core::health::{self, GitHubState, Health};
use hangar_core::owner_sync::{PodPhase, PodView};
use hangar_github::Scope;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::RunnerPod;
use crate::runner_pod::RUNNER_CONTAINER;

/// Formats a time the way ARC's timestamp annotations are written (RFC 3339, seconds).
pub fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|ts| ts.round(jiff::Unit::Second).unwrap_or(ts).to_string())
        .unwrap_or_default()
}

/// Parses an RFC 3339 annotation value.
pub fn parse_time(s: &str) -> Option<SystemTime> {
    s.parse::<jiff::Timestamp>().ok().map(SystemTime::from)
}

/// Converts a k8s-openapi time.
pub fn k8s_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> SystemTime {
    SystemTime::from(t.0)
}

/// The GitHub scope of a validated runner scope.
pub fn github_scope(scope: &RunnerScope) -> Scope {
    match scope {
        RunnerScope::Enterprise(e) => Scope::enterprise(e),
        RunnerScope::Organization(o) => Scope::org(o),
        RunnerScope::Repository { owner, name } => Scope::repo(owner, name),
    }
}

/// The scope a runner pod's container will register at, read from its environment. Never an
/// authority (the pod's author writes it; see [`crate::authority`]): admission only checks
/// that it agrees with what the pod's owner grants.
pub fn pod_scope(pod: &Pod) -> Option<RunnerScope> {
    let runner = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == RUNNER_CONTAINER)?;
    let env: BTreeMap<&str, &str> = runner
        .env
        .iter()
        .flatten()
        .filter_map(|e| Some((e.name.as_str(), e.value.as_deref()?)))
        .collect();
    RunnerScope::from_fields(
        env.get("RUNNER_ENTERPRISE").copied(),
        env.get("RUNNER_ORG").copied(),
        env.get("RUNNER_REPO").copied(),
    )
    .ok()
}

/// Whether the pod's runner is ephemeral (`RUNNER_EPHEMERAL`, default true).
pub fn pod_is_ephemeral(pod: &RunnerPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == RUNNER_CONTAINER))
        .and_then(|c| {
            c.env
                .as_ref()?
                .iter()
                .find(|e| e.name == "RUNNER_EPHEMERAL")?
                .value
                .clone()
        })
        .is_none_or(|v| v != "false")
}

/// Whether the pod's runner registers with a JIT configuration
/// (`ACTIONS_RUNNER_INPUT_JITCONFIG`): its runner exists on GitHub before the pod starts.
pub fn pod_uses_jit(pod: &RunnerPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == RUNNER_CONTAINER))
        .is_some_and(|c| {
            c.env
                .iter()
                .flatten()
                .any(|e| e.name == "ACTIONS_RUNNER_INPUT_JITCONFIG")
        })
}

/// An annotation's value.
pub fn annotation<'a>(obj: &'a impl ResourceExt, key: &str) -> Option<&'a str> {
    obj.annotations().get(key).map(String::as_str)
}

/// The pod's phase.
pub fn pod_phase(pod: &RunnerPod) -> PodPhase {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some("Unknown") => PodPhase::Unknown,
        _ => PodPhase::Pending,
    }
}

/// The runner container's status.
fn runner_status(pod: &RunnerPod) -> Option<&super::slim::ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == RUNNER_CONTAINER)
}

/// The kubelet's reason for a container it cannot create because a `valueFrom` it reads is
/// missing.
pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";

/// The runner container's current state, as `hangar_core::runner_container` reads it.
pub fn runner_container_state(pod: &RunnerPod) -> (i32, hangar_core::runner_container::State) {
    use hangar_core::runner_container::State;
    let Some(status) = runner_status(pod) else {
        return (
            0,
            State::NotCreated {
                cannot_create: false,
            },
        );
    };
    let finished = |t: &super::slim::ContainerStateTerminated| t.finished_at.as_ref().map(k8s_time);
    let state = status.state.as_ref();
    let last = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref());
    let state = if state.is_some_and(|s| s.running.is_some()) {
        State::Running
    } else if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        State::Exited {
            finished_at: finished(t),
            cannot_create: false,
        }
    } else {
        let cannot_create = state
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.as_deref())
            == Some(CREATE_CONTAINER_CONFIG_ERROR);
        if last.is_some() || status.restart_count > 0 {
            // Waiting to be started again after a run.
            State::Exited {
                finished_at: last.and_then(finished),
                cannot_create,
            }
        } else {
            State::NotCreated { cannot_create }
        }
    };
    (status.restart_count, state)
}

/// The kubelet's waiting reasons for a container whose image it cannot have.
const IMAGE_PULL_FAILING: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// The kubelet's waiting reasons for a container it cannot create or start as specified.
const CANNOT_CREATE: [&str; 3] = [
    CREATE_CONTAINER_CONFIG_ERROR,
    "CreateContainerError",
    "RunContainerError",
];

/// The runner container's last run exited with code 0 (its current state if terminated, else
/// the run before it).
pub fn runner_exited_cleanly(pod: &RunnerPod) -> bool {
    runner_status(pod)
        .and_then(|status| {
            let current = status.state.as_ref().and_then(|s| s.terminated.as_ref());
            let last = status
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref());
            current.or(last)
        })
        .is_some_and(|t| t.exit_code == 0)
}

/// Where the pod's runner is in its life (`hangar_core::runner_container::judge`), given
/// whether its registration credential was taken back.
pub fn runner_run(pod: &RunnerPod, credential_spent: bool) -> hangar_core::runner_container::Run {
    let (restart_count, state) = runner_container_state(pod);
    hangar_core::runner_container::judge(&runner_observed(
        pod,
        credential_spent,
        restart_count,
        state,
    ))
}

/// What `hangar_core::runner_container` looks at for `pod`.
pub fn runner_observed(
    pod: &RunnerPod,
    credential_spent: bool,
    restart_count: i32,
    state: hangar_core::runner_container::State,
) -> hangar_core::runner_container::Observed {
    hangar_core::runner_container::Observed {
        // The API defaults an unset policy to `Always`.
        restarts: pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) != Some("Never"),
        credential_spent,
        restart_count,
        state,
    }
}

/// The pod says its registration credential was taken back
/// ([`hangar_api::annotation::REGISTRATION_SPENT`]).
pub fn registration_spent(pod: &RunnerPod) -> bool {
    annotation(pod, hangar_api::annotation::REGISTRATION_SPENT).is_some()
}

/// The runner has finished for good: its container exited and no run of the pod can register
/// again (in a `Never` pod: the runner container terminated).
pub fn runner_stopped(pod: &RunnerPod) -> bool {
    runner_run(pod, registration_spent(pod)).is_finished()
}

/// When the pod's Ready condition became True, if it is True.
pub fn ready_since(pod: &RunnerPod) -> Option<SystemTime> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(k8s_time)
}

/// When the kubelet started the pod (`status.startTime`): an unregistration waits for a runner
/// that may still register from then, not from the pod's creation, which can lie an image
/// pull or a scheduling wait earlier.
pub fn started_at(pod: &RunnerPod) -> Option<SystemTime> {
    pod.status.as_ref()?.start_time.as_ref().map(k8s_time)
}

/// The GitHub runner ID recorded on the pod.
pub fn runner_id(pod: &RunnerPod) -> Option<u64> {
    annotation(pod, hangar_api::annotation::RUNNER_ID)?
        .parse()
        .ok()
}

/// What Hangar knows of a runner beyond its pod: what GitHub and the pod's node say.
#[derive(Clone, Copy, Debug, Default)]
pub struct Beyond<'a> {
    /// What GitHub says about the runner.
    pub github: GitHubState,
    /// Since when the pod's node is NotReady, if it is.
    pub node_not_ready: Option<SystemTime>,
    /// The lowest runner version GitHub accepts (`hangar run --minimum-runner-version`), if
    /// Hangar is to judge versions.
    pub minimum_version: Option<&'a str>,
}

/// The runner in `pod` as [`hangar_core::health::classify`] looks at it, given whether its
/// registration credential was taken back and what is known `beyond` the pod. The runner's
/// version is the runner image's tag ([`hangar_core::health::image_runner_version`]); a runner
/// whose version is unknown is never judged by it.
pub fn health_observed(
    pod: &RunnerPod,
    credential_spent: bool,
    beyond: Beyond<'_>,
) -> health::Observed {
    let status = runner_status(pod);
    let condition = |kind: &str| {
        pod.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == kind)
    };
    let unschedulable = condition("PodScheduled")
        .filter(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
        .map(|c| {
            (
                c.last_transition_time
                    .as_ref()
                    .map(k8s_time)
                    .unwrap_or(SystemTime::UNIX_EPOCH),
                c.message.clone().unwrap_or_default(),
            )
        });
    let waiting = status
        .and_then(|s| s.state.as_ref()?.waiting.as_ref())
        .map(|w| {
            let reason = w.reason.clone().unwrap_or_default();
            match reason.as_str() {
                "CrashLoopBackOff" => health::Waiting::CrashLoop,
                r if IMAGE_PULL_FAILING.contains(&r) => health::Waiting::ImagePull(reason),
                r if CANNOT_CREATE.contains(&r) => health::Waiting::Config(reason),
                _ => health::Waiting::Other,
            }
        });
    let last_termination = status
        .and_then(|s| {
            let current = s.state.as_ref().and_then(|s| s.terminated.as_ref());
            current.or(s.last_state.as_ref()?.terminated.as_ref())
        })
        .map(|t| {
            if t.reason.as_deref() == Some("OOMKilled") {
                health::Termination::OomKilled
            } else {
                health::Termination::Exited(t.exit_code)
            }
        });
    let image = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == RUNNER_CONTAINER))
        .and_then(|c| c.image.as_deref());
    let rejected = beyond
        .minimum_version
        .and_then(|minimum| health::rejection(image?, minimum));
    health::Observed {
        created: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(k8s_time)
            .unwrap_or(SystemTime::UNIX_EPOCH),
        phase: pod_phase(pod),
        finished: runner_run(pod, credential_spent).is_finished(),
        unschedulable,
        node_not_ready: beyond.node_not_ready,
        waiting,
        last_termination,
        restarts: status.map_or(0, |s| u32::try_from(s.restart_count).unwrap_or(0)),
        ready_since: ready_since(pod),
        registered: runner_id(pod).is_some(),
        github: beyond.github,
        rejected,
    }
}

/// The pod as owner sync sees it, given whether its registration credential was taken back,
/// its runner's health and what GitHub says about it.
pub fn pod_view(
    pod: &RunnerPod,
    credential_spent: bool,
    health: Health,
    github: GitHubState,
) -> PodView {
    use hangar_api::annotation as a;
    use hangar_core::runner_container::Run;
    let run = runner_run(pod, credential_spent);
    let previous_run_failed = runner_status(pod)
        .and_then(|s| s.last_state.as_ref()?.terminated.as_ref())
        .is_some_and(|t| t.exit_code != 0 || t.reason.as_deref() == Some("OOMKilled"));
    PodView {
        name: pod.name_any(),
        phase: pod_phase(pod),
        runner_stopped: run.is_finished(),
        runner_restarted: run == Run::Restarted,
        runner_restarting: matches!(run, Run::Restarting { .. }),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        health,
        unregistration_requested: annotation(pod, a::UNREGISTRATION_REQUEST_TIMESTAMP).is_some(),
        unregistration_complete: annotation(pod, a::UNREGISTRATION_COMPLETE_TIMESTAMP).is_some(),
        finished_at: run.finished_at(),
        previous_run_failed,
        online_on_github: matches!(github, GitHubState::Online | GitHubState::Busy),
    }
}

/// `namespace/name` for messages.
pub fn object_name(obj: &impl ResourceExt) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::slim::tests::{spare_capacity, typed};

    #[test]
    fn timestamps_round_trip_at_second_precision() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let s = rfc3339(t);
        assert_eq!(s, "2023-11-14T22:13:20Z");
        assert_eq!(parse_time(&s), Some(t));
    }

    #[test]
    fn pod_scope_reads_the_runner_env() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "runner", "env": [
                {"name": "RUNNER_ORG", "value": ""},
                {"name": "RUNNER_REPO", "value": "octo/app"},
                {"name": "RUNNER_EPHEMERAL", "value": "false"}
            ]}]}
        }))
        .unwrap();
        assert_eq!(
            pod_scope(&pod),
            Some(RunnerScope::Repository {
                owner: "octo".into(),
                name: "app".into()
            })
        );
        let pod = RunnerPod::from_pod(&pod);
        assert!(!pod_is_ephemeral(&pod));
        assert!(!pod_uses_jit(&pod));
    }

    /// Every read of this module says the same of a runner pod's cached projection (its JSON
    /// read as a [`RunnerPod`] and trimmed) as of the whole pod (every container, variable,
    /// condition and status, projected field by field from the k8s-openapi `Pod`), through a
    /// pod's life; and the projection is the same whichever way it is read.
    #[test]
    fn a_cached_runner_pod_says_what_the_full_pod_says() {
        use crate::runner_pod::{PodDefaults, build};
        // JIT and ephemeral, then a registration token and persistent: the env reads differ.
        let pods = [true, false].map(|jit| {
            let spec: hangar_api::RunnerSpec = serde_json::from_value(serde_json::json!({
                "repository": "octo/app",
                "ephemeral": jit,
                "image": "ghcr.io/actions/actions-runner:2.330.0",
                "dockerdWithinRunnerContainer": false,
                "env": [{"name": "EXTRA", "value": "x"}],
                "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                "volumes": [{"name": "cache", "emptyDir": {}}],
                "tolerations": [{"key": "runners", "operator": "Exists"}],
            }))
            .unwrap();
            let defaults = PodDefaults {
                registration_secret: "r1-registration".into(),
                jit,
                ..PodDefaults::default()
            };
            let mut pod = build("r1", "ns", &BTreeMap::new(), &spec, &defaults);
            pod.spec.as_mut().unwrap().node_name = Some("node-1".into());
            pod
        });
        let terminated = |code: i32| {
            serde_json::json!({"terminated": {"exitCode": code,
                "finishedAt": "2026-11-29T05:00:00Z"}})
        };
        let docker = serde_json::json!({"name": "docker", "image": "docker:dind", "imageID": "",
            "ready": true, "restartCount": 0, "state": {"running": {}}});
        let conditions = |ready: &str| {
            serde_json::json!([
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": ready},
                {"type": "Ready", "status": ready, "lastTransitionTime": "2026-11-29T04:59:00Z"},
            ])
        };
        let statuses = [
            serde_json::json!({"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available",
                 "lastTransitionTime": "2026-11-29T04:58:00Z"}]}),
            serde_json::json!({"phase": "Pending", "containerStatuses": [docker.clone(),
                {"name": "runner", "image": "i", "imageID": "", "ready": false,
                 "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}),
            serde_json::json!({"phase": "Running", "conditions": conditions("True"),
                "startTime": "2026-11-29T04:58:30Z",
                "containerStatuses": [docker.clone(),
                {"name": "runner", "image": "i", "imageID": "", "ready": true,
                 "restartCount": 0, "state": {"running": {}}}]}),
            serde_json::json!({"phase": "Succeeded", "conditions": conditions("False"),
                "containerStatuses": [
                {"name": "runner", "image": "i", "imageID": "", "ready": false,
                 "restartCount": 0, "state": terminated(0)}, docker.clone()]}),
            serde_json::json!({"phase": "Running", "conditions": conditions("False"),
                "containerStatuses": [
                {"name": "runner", "image": "i", "imageID": "", "ready": false,
                 "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}),
            serde_json::json!({"phase": "Failed", "reason": "Evicted",
                "message": "The node was low on resource: memory."}),
        ];
        for (mut pod, status) in pods
            .iter()
            .flat_map(|pod| statuses.iter().map(move |status| (pod.clone(), status)))
        {
            pod.status = Some(serde_json::from_value(status.clone()).unwrap());
            let cached = RunnerPod::from_pod(&pod);
            let full = typed(&pod);
            let mut trimmed = full.clone();
            trimmed.trim();
            assert_eq!(cached, trimmed, "{status}");
            let reads = |p: &RunnerPod| {
                let image = p.spec.as_ref().and_then(|s| {
                    s.containers
                        .iter()
                        .find(|c| c.name == RUNNER_CONTAINER)
                        .and_then(|c| c.image.clone())
                });
                let beyond = Beyond {
                    minimum_version: Some("2.329.0"),
                    ..Beyond::default()
                };
                format!(
                    "{} {} {:?} {:?} {:?} {} {} {:?} {:?} {:?} {:?} {:?} {:?}",
                    pod_is_ephemeral(p),
                    pod_uses_jit(p),
                    pod_phase(p),
                    runner_container_state(p),
                    runner_run(p, false),
                    runner_exited_cleanly(p),
                    runner_stopped(p),
                    p.spec.as_ref().and_then(|s| s.node_name.clone()),
                    image,
                    ready_since(p),
                    started_at(p),
                    health_observed(p, false, beyond),
                    pod_view(p, false, Health::Healthy, GitHubState::default()),
                )
            };
            assert_eq!(reads(&cached), reads(&full), "{status}");
            assert_eq!(spare_capacity(&cached), 0, "{status}");
        }
    }

    #[test]
    fn jit_pods_are_recognized_by_their_runner_env() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "runner", "env": [
                {"name": "ACTIONS_RUNNER_INPUT_JITCONFIG",
                 "valueFrom": {"secretKeyRef": {"name": "p-registration", "key": "jit_config"}}}
            ]}]}
        }))
        .unwrap();
        assert!(pod_uses_jit(&RunnerPod::from_pod(&pod)));
    }
}
