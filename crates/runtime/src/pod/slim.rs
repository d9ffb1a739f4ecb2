//! [`RunnerPod`]: a runner pod as the operator holds it — its metadata and the few fields of
//! its spec and status that [`super::observe`] reads, and nothing else.
//!
//! Why it exists: memory. A controller holds every runner pod of the cluster in its pod store,
//! and the queued triggers hold more copies. A k8s-openapi `Pod` costs its full shape even when
//! trimmed: the `PodSpec` struct alone is 1,440 bytes (41 fields inline, a `PodSecurityContext`
//! among them), `PodStatus` 448, each `Container` 2,144, each `EnvVar` 360 and each
//! `ContainerStatus` 752, before any of their strings (sizes on 64-bit, asserted by
//! `the_slim_shapes_are_a_fraction_of_k8s_openapis`). A k8s-openapi runner pod trimmed to
//! what the reads look at still cost about 8.8 KB in the store (worked out from these sizes,
//! and consistent with a heap profile at 1,000 runners). A `RunnerPod` is 576 bytes (its
//! runner `Container` 72, an `EnvVar` 48, a `PodCondition` 120, a `ContainerStatus` 208, also
//! asserted) plus its strings: about 3 KB by the same reckoning, most of it the metadata (a
//! full `ObjectMeta`, 360 bytes and its maps, which `kube::Resource` requires).
//!
//! Contract: the watch deserializes list and watch bodies straight into a `RunnerPod` (the
//! type inherits `Pod`'s `kube::Resource`: kind, version, plural, scope), so no full `Pod` is
//! ever built for the cache; [`RunnerPod::trim`] then drops what remains unread (other
//! containers, other conditions, other variables, the labels and annotations no read looks up)
//! before it is cached. Field names follow Pod JSON, so the reads look the same as on a `Pod`;
//! a field misspelled here would silently read as absent, which is what
//! `the_slim_pod_holds_every_field_the_full_pod_has` guards against.
//! Required fields read `null` or absence as their default, as k8s-openapi's do. What is
//! written to the API is never a cached pod (merge patches, JSON patches of finalizers, deletes
//! with preconditions, a created pod built as a full `Pod`); the API's answers to those writes
//! are read as a `RunnerPod` ([`RunnerPod::create`], `Api<RunnerPod>`). A full `Pod` in hand
//! (one that already existed when created, or admission's) is read through
//! [`RunnerPod::from_pod`], the same projection.

use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

use crate::runner_pod::RUNNER_CONTAINER;

/// A runner pod: its metadata, and what [`super::observe`] reads of its spec and status.
#[derive(kube::Resource, Clone, Debug, Default, PartialEq, Deserialize)]
#[resource(inherit = "Pod")]
pub struct RunnerPod {
    /// All of it but `managedFields`, which are skipped as they are read: finalizers, owner
    /// references and annotations are read, and written back compared with what is cached.
    #[serde(default, deserialize_with = "metadata_without_field_managers")]
    pub metadata: ObjectMeta,
    /// The runner container and where and how the pod runs.
    pub spec: Option<Spec>,
    /// What the kubelet reports.
    pub status: Option<Status>,
}

/// `PodSpec`: the runner container, the node and the restart policy.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// The runner container only, once trimmed.
    #[serde(default, deserialize_with = "or_default")]
    pub containers: Vec<Container>,
    /// The node the pod is bound to.
    pub node_name: Option<String>,
    /// `Always` when unset.
    pub restart_policy: Option<String>,
}

/// `Container`: its name, image (the runner's version) and the variables in [`OBSERVED_ENV`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// The container's name.
    #[serde(default, deserialize_with = "or_default")]
    pub name: String,
    /// The image reference.
    pub image: Option<String>,
    /// Environment variables (without `valueFrom`: a JIT configuration is read from a Secret,
    /// and only its presence matters).
    pub env: Option<Vec<EnvVar>>,
}

/// `EnvVar`, without `valueFrom`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct EnvVar {
    /// The variable's name.
    #[serde(default, deserialize_with = "or_default")]
    pub name: String,
    /// Its literal value, if it has one.
    pub value: Option<String>,
}

/// `PodStatus`: the phase, why, when the kubelet started the pod, the `Ready` and
/// `PodScheduled` conditions and the runner container's status.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    pub phase: Option<String>,
    /// Why the pod is in this phase (`Evicted`).
    pub reason: Option<String>,
    /// Said for people.
    pub message: Option<String>,
    /// When the kubelet started the pod.
    pub start_time: Option<Time>,
    /// `Ready` and `PodScheduled` only, once trimmed.
    pub conditions: Option<Vec<PodCondition>>,
    /// The runner container's only, once trimmed.
    pub container_statuses: Option<Vec<ContainerStatus>>,
}

/// `PodCondition`, without its probe time.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    /// `Ready`, `PodScheduled`, ….
    #[serde(rename = "type", default, deserialize_with = "or_default")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default, deserialize_with = "or_default")]
    pub status: String,
    /// Why, in one word (`Unschedulable`).
    pub reason: Option<String>,
    /// Why, for people.
    pub message: Option<String>,
    /// When `status` last changed.
    pub last_transition_time: Option<Time>,
}

/// `ContainerStatus`: its name, restarts and states.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    /// The container's name.
    #[serde(default, deserialize_with = "or_default")]
    pub name: String,
    /// How often the kubelet restarted it.
    #[serde(default, deserialize_with = "or_default")]
    pub restart_count: i32,
    /// Its state now.
    pub state: Option<ContainerState>,
    /// Its state before the last restart.
    pub last_state: Option<ContainerState>,
}

/// `ContainerState`: at most one of running, terminated, waiting.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ContainerState {
    /// Running, since whenever: only that it runs is read.
    pub running: Option<serde::de::IgnoredAny>,
    /// How it ended.
    pub terminated: Option<ContainerStateTerminated>,
    /// Why it does not run yet.
    pub waiting: Option<ContainerStateWaiting>,
}

/// `ContainerStateTerminated`: exit code, reason and end.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStateTerminated {
    /// The container's exit code.
    #[serde(default, deserialize_with = "or_default")]
    pub exit_code: i32,
    /// Why (`OOMKilled`, `Completed`, `Error`).
    pub reason: Option<String>,
    /// When it ended.
    pub finished_at: Option<Time>,
}

/// `ContainerStateWaiting`: why.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ContainerStateWaiting {
    /// `ImagePullBackOff`, `CrashLoopBackOff`, `CreateContainerConfigError`, ….
    pub reason: Option<String>,
}

/// The runner container's environment variables the reads look at; a cached runner pod keeps
/// only these. (The scope variables are read only of full pods, by admission.)
const OBSERVED_ENV: [&str; 2] = ["RUNNER_EPHEMERAL", "ACTIONS_RUNNER_INPUT_JITCONFIG"];

/// The conditions the reads look at.
const OBSERVED_CONDITIONS: [&str; 2] = ["Ready", "PodScheduled"];

/// The labels the reads look at: which RunnerSet a pod's StatefulSet belongs to.
const OBSERVED_LABELS: [&str; 1] = [hangar_api::label::RUNNERSET_NAME];

/// The annotations the reads look at are ARC's and Hangar's own (`actions-runner/id`, the
/// unregistration timestamps, `hangar.dev/registration-spent`, …): these prefixes.
const OBSERVED_ANNOTATION_PREFIXES: [&str; 2] = ["actions-runner/", "hangar.dev/"];

/// A required field: absent or `null` reads as its default, as k8s-openapi reads it.
fn or_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `ObjectMeta` as the apiserver sends it, but for `managedFields`, which serde skips without
/// building them. Every pod change brings them (the kubelet's, the scheduler's, Hangar's own
/// entries, each a tree of field paths), and building them only to drop them was the largest
/// part of reading a pod: about 7 % of the controller's CPU under a steady job load (a `perf`
/// profile at 5 jobs/s).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataOnTheWire {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

fn metadata_without_field_managers<'de, D>(deserializer: D) -> Result<ObjectMeta, D::Error>
where
    D: Deserializer<'de>,
{
    let Some(wire) = Option::<MetadataOnTheWire>::deserialize(deserializer)? else {
        return Ok(ObjectMeta::default());
    };
    // Every field named, so a field k8s-openapi adds is a compile error here, not a loss.
    let MetadataOnTheWire {
        annotations,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name,
        generation,
        labels,
        name,
        namespace,
        owner_references,
        resource_version,
        self_link,
        uid,
    } = wire;
    Ok(ObjectMeta {
        annotations,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name,
        generation,
        labels,
        managed_fields: None,
        name,
        namespace,
        owner_references,
        resource_version,
        self_link,
        uid,
    })
}

impl RunnerPod {
    /// Keeps only what the reads look at, before the pod is cached: of its metadata, the
    /// [`OBSERVED_LABELS`] and the annotations under [`OBSERVED_ANNOTATION_PREFIXES`] (a map
    /// left empty goes: an empty map still holds a node); of its spec, the runner container
    /// with its [`OBSERVED_ENV`]; of its status, the `Ready` and `PodScheduled` conditions and
    /// the runner container's status. Every list it keeps holds no spare room. Finalizers,
    /// owner references, the UID and the resourceVersion are kept whole: writes are compared
    /// with them and conditioned on them.
    pub fn trim(&mut self) {
        let meta = &mut self.metadata;
        if let Some(labels) = &mut meta.labels {
            labels.retain(|k, _| OBSERVED_LABELS.contains(&k.as_str()));
        }
        if let Some(annotations) = &mut meta.annotations {
            annotations.retain(|k, _| {
                OBSERVED_ANNOTATION_PREFIXES
                    .iter()
                    .any(|p| k.starts_with(p))
            });
        }
        if meta.labels.as_ref().is_some_and(|m| m.is_empty()) {
            meta.labels = None;
        }
        if meta.annotations.as_ref().is_some_and(|m| m.is_empty()) {
            meta.annotations = None;
        }
        if let Some(spec) = &mut self.spec {
            keep(&mut spec.containers, |c| c.name == RUNNER_CONTAINER);
            for env in spec.containers.iter_mut().filter_map(|c| c.env.as_mut()) {
                keep(env, |e| OBSERVED_ENV.contains(&e.name.as_str()));
            }
        }
        if let Some(status) = &mut self.status {
            if let Some(conditions) = &mut status.conditions {
                keep(conditions, |c| {
                    OBSERVED_CONDITIONS.contains(&c.type_.as_str())
                });
            }
            if let Some(statuses) = &mut status.container_statuses {
                keep(statuses, |c| c.name == RUNNER_CONTAINER);
            }
        }
    }

    /// Creates `pod` in its namespace and reads the pod as stored the way the watch reads one
    /// (trimmed): the answer is decoded once, skipping what a `RunnerPod` leaves out, rather
    /// than as a full `Pod` (`managedFields` and all) to be converted.
    pub async fn create(client: &kube::Client, pod: &Pod) -> kube::Result<Self> {
        use kube::Resource as _;
        let body = serde_json::to_vec(pod).map_err(kube::Error::SerdeError)?;
        let request =
            kube::core::Request::new(Pod::url_path(&(), pod.metadata.namespace.as_deref()))
                .create(&kube::api::PostParams::default(), body)
                .map_err(kube::Error::BuildRequest)?;
        let mut created: Self = client.request(request).await?;
        created.trim();
        Ok(created)
    }

    /// A full `Pod` read the way the watch reads one: through its JSON, then trimmed.
    pub fn from_pod(pod: &Pod) -> Self {
        // Every field here is a Pod field of the same JSON shape, and absent or null ones
        // read as defaults: a serialized Pod always deserializes.
        let value = serde_json::to_value(pod).expect("a Pod serializes");
        let mut slim: Self = serde_json::from_value(value).expect("a Pod's JSON is a RunnerPod");
        slim.trim();
        slim
    }
}

/// Keeps the items of `list` that `wanted`, in an allocation of their own size: the watch's
/// list held every container, variable, condition and status the pod has, and a cached pod
/// lives as long as its runner.
fn keep<T>(list: &mut Vec<T>, wanted: impl FnMut(&T) -> bool) {
    list.retain(wanted);
    list.shrink_to_fit();
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// The slim pod as built from a typed `Pod`, field by field (names checked by the
    /// compiler), untrimmed: the oracle the JSON path must agree with.
    pub(crate) fn typed(pod: &Pod) -> RunnerPod {
        use k8s_openapi::api::core::v1 as k;
        let state = |s: &k::ContainerState| ContainerState {
            running: s.running.as_ref().map(|_| serde::de::IgnoredAny),
            terminated: s.terminated.as_ref().map(|t| ContainerStateTerminated {
                exit_code: t.exit_code,
                reason: t.reason.clone(),
                finished_at: t.finished_at.clone(),
            }),
            waiting: s.waiting.as_ref().map(|w| ContainerStateWaiting {
                reason: w.reason.clone(),
            }),
        };
        RunnerPod {
            metadata: ObjectMeta {
                managed_fields: None,
                ..pod.metadata.clone()
            },
            spec: pod.spec.as_ref().map(|s| Spec {
                containers: s
                    .containers
                    .iter()
                    .map(|c| Container {
                        name: c.name.clone(),
                        image: c.image.clone(),
                        env: c.env.as_ref().map(|env| {
                            env.iter()
                                .map(|e| EnvVar {
                                    name: e.name.clone(),
                                    value: e.value.clone(),
                                })
                                .collect()
                        }),
                    })
                    .collect(),
                node_name: s.node_name.clone(),
                restart_policy: s.restart_policy.clone(),
            }),
            status: pod.status.as_ref().map(|s| Status {
                phase: s.phase.clone(),
                reason: s.reason.clone(),
                message: s.message.clone(),
                start_time: s.start_time.clone(),
                conditions: s.conditions.as_ref().map(|cs| {
                    cs.iter()
                        .map(|c| PodCondition {
                            type_: c.type_.clone(),
                            status: c.status.clone(),
                            reason: c.reason.clone(),
                            message: c.message.clone(),
                            last_transition_time: c.last_transition_time.clone(),
                        })
                        .collect()
                }),
                container_statuses: s.container_statuses.as_ref().map(|cs| {
                    cs.iter()
                        .map(|c| ContainerStatus {
                            name: c.name.clone(),
                            restart_count: c.restart_count,
                            state: c.state.as_ref().map(state),
                            last_state: c.last_state.as_ref().map(state),
                        })
                        .collect()
                }),
            }),
        }
    }

    /// A runner pod with every field a `RunnerPod` has set (and a sidecar, variables,
    /// conditions and statuses it drops), as the API sends it.
    fn full_pod() -> serde_json::Value {
        let terminated = |code: i32, reason: &str| {
            json!({"exitCode": code, "reason": reason, "signal": 9,
                   "startedAt": "2026-11-29T04:58:40Z", "finishedAt": "2026-11-29T05:00:00Z"})
        };
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "r1", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "generateName": "r", "generation": 1, "selfLink": "/api/v1/namespaces/ns/pods/r1",
                "deletionGracePeriodSeconds": 30,
                "managedFields": [{"manager": "kubelet", "operation": "Update",
                    "apiVersion": "v1", "time": "2026-11-29T04:59:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:phase": {}}}, "subresource": "status"}],
                "creationTimestamp": "2026-11-29T04:57:00Z",
                "deletionTimestamp": "2026-11-29T05:01:00Z",
                "labels": {"actions-runner": "", "runnerset-name": "set",
                           "runner-template-hash": "abc", "team": "ci"},
                "annotations": {"actions-runner/id": "42",
                                "hangar.dev/registration-spent": "2026-11-29T05:00:00Z",
                                "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
                "finalizers": ["actions.summerwind.dev/runner-pod"],
                "ownerReferences": [{"apiVersion": "actions.summerwind.dev/v1alpha1",
                    "kind": "Runner", "name": "r1", "uid": "ru", "controller": true}]
            },
            "spec": {
                "restartPolicy": "Never",
                "nodeName": "node-1",
                "containers": [
                    {"name": "docker", "image": "docker:dind",
                     "env": [{"name": "DOCKER_TLS_CERTDIR", "value": ""}]},
                    {"name": "runner", "image": "ghcr.io/actions/actions-runner:2.330.0",
                     "imagePullPolicy": "IfNotPresent",
                     "env": [
                        {"name": "RUNNER_ORG", "value": "octo"},
                        {"name": "RUNNER_EPHEMERAL", "value": "true"},
                        {"name": "ACTIONS_RUNNER_INPUT_JITCONFIG", "valueFrom":
                            {"secretKeyRef": {"name": "r1-registration", "key": "jit_config"}}}
                     ],
                     "resources": {"limits": {"cpu": "2"}},
                     "volumeMounts": [{"name": "work", "mountPath": "/runner/_work"}]}
                ],
                "volumes": [{"name": "work", "emptyDir": {}}],
                "tolerations": [{"key": "runners", "operator": "Exists"}]
            },
            "status": {
                "phase": "Running",
                "reason": "Evicted",
                "message": "The node was low on resource: memory.",
                "startTime": "2026-11-29T04:58:30Z",
                "hostIP": "10.0.0.1",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/3 nodes are available",
                     "lastTransitionTime": "2026-11-29T04:58:00Z", "lastProbeTime": null},
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "True", "reason": "r", "message": "m",
                     "lastTransitionTime": "2026-11-29T04:59:00Z"}
                ],
                "containerStatuses": [
                    {"name": "docker", "image": "docker:dind", "imageID": "", "ready": true,
                     "restartCount": 0, "state": {"running": {}}},
                    {"name": "runner", "image": "i", "imageID": "", "ready": false,
                     "restartCount": 3,
                     "state": {"running": {"startedAt": "2026-11-29T04:59:00Z"},
                               "terminated": terminated(0, "Completed"),
                               "waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                     "lastState": {"terminated": terminated(137, "OOMKilled")}}
                ]
            }
        })
    }

    /// Every field of the slim pod, as read from a pod where each is set: a field misspelled
    /// (in `rename_all`, a `rename` or its Rust name) would read as absent or default here.
    #[test]
    fn the_slim_pod_holds_every_field_the_full_pod_has() {
        let pod: Pod = serde_json::from_value(full_pod()).unwrap();
        let slim = RunnerPod::from_pod(&pod);
        let mut want = typed(&pod);
        want.trim();
        assert_eq!(slim, want);
        // The watch's path: the API's JSON straight into the slim type.
        let mut watched: RunnerPod = serde_json::from_value(full_pod()).unwrap();
        watched.trim();
        assert_eq!(watched, slim);

        // And the fixture does set every field: none reads as absent or default, but the
        // managedFields, skipped as they are read.
        let meta = &slim.metadata;
        assert!(pod.metadata.managed_fields.is_some() && meta.managed_fields.is_none());
        assert!(meta.name.is_some() && meta.namespace.is_some() && meta.uid.is_some());
        assert!(meta.resource_version.is_some() && meta.generate_name.is_some());
        assert!(meta.generation.is_some() && meta.self_link.is_some());
        assert!(meta.deletion_grace_period_seconds.is_some());
        assert!(meta.creation_timestamp.is_some() && meta.deletion_timestamp.is_some());
        assert!(meta.labels.is_some() && meta.annotations.is_some());
        assert!(meta.finalizers.is_some() && meta.owner_references.is_some());
        let spec = slim.spec.as_ref().unwrap();
        let [runner] = &spec.containers[..] else {
            panic!("{:?}", spec.containers)
        };
        assert!(runner.image.is_some() && spec.node_name.is_some());
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let env = runner.env.as_ref().unwrap();
        assert_eq!(
            env.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
            OBSERVED_ENV
        );
        assert!(env[0].value.is_some());
        let status = slim.status.as_ref().unwrap();
        assert!(status.phase.is_some() && status.reason.is_some());
        assert!(status.message.is_some() && status.start_time.is_some());
        let conditions = status.conditions.as_ref().unwrap();
        assert_eq!(conditions.len(), 2);
        for c in conditions {
            assert!(!c.type_.is_empty() && !c.status.is_empty());
            assert!(c.reason.is_some() && c.message.is_some());
            assert!(c.last_transition_time.is_some());
        }
        let [runner] = &status.container_statuses.as_ref().unwrap()[..] else {
            panic!("{status:?}")
        };
        assert_eq!((runner.name.as_str(), runner.restart_count), ("runner", 3));
        let state = runner.state.as_ref().unwrap();
        assert!(state.running.is_some());
        let waiting = state.waiting.as_ref().unwrap();
        assert!(waiting.reason.is_some());
        for t in [
            state.terminated.as_ref().unwrap(),
            runner
                .last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap(),
        ] {
            assert!(t.reason.is_some() && t.finished_at.is_some());
        }
        assert_eq!(
            runner
                .last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            137
        );
    }

    /// Every label and annotation a read looks up on a pod survives the trim; the rest goes,
    /// and a map left empty goes whole.
    #[test]
    fn the_trim_keeps_every_label_and_annotation_the_reads_look_up() {
        use hangar_api::{annotation as a, label};
        let read = [
            a::RUNNER_ID,
            a::UNREGISTRATION_REQUEST_TIMESTAMP,
            a::UNREGISTRATION_START_TIMESTAMP,
            a::UNREGISTRATION_COMPLETE_TIMESTAMP,
            a::UNREGISTRATION_FAILURE_MESSAGE,
            a::UNREGISTRATION_REFUSED,
            a::RUNNER_COMPLETION_WAIT_START_TIMESTAMP,
            a::GITHUB_API_CREDS_SECRET,
            a::RETIREMENT_TIMEOUT,
            a::REGISTRATION_SPENT,
        ];
        let ignored = [
            "sync-time",
            "kubectl.kubernetes.io/last-applied-configuration",
        ];
        let annotations: serde_json::Map<_, _> = read
            .iter()
            .chain(&ignored)
            .map(|k| ((*k).to_owned(), json!("v")))
            .collect();
        let mut pod: RunnerPod = serde_json::from_value(json!({"metadata": {
            "labels": {label::RUNNERSET_NAME: "set", label::ACTIONS_RUNNER: "",
                       label::RUNNER_TEMPLATE_HASH: "h"},
            "annotations": annotations,
        }}))
        .unwrap();
        pod.trim();
        let keys = |m: &Option<std::collections::BTreeMap<String, String>>| {
            m.iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&pod.metadata.labels), [label::RUNNERSET_NAME]);
        let mut want: Vec<_> = read.iter().map(|k| (*k).to_owned()).collect();
        want.sort();
        assert_eq!(keys(&pod.metadata.annotations), want);

        let mut pod: RunnerPod = serde_json::from_value(json!({"metadata": {
            "labels": {label::ACTIONS_RUNNER: ""}, "annotations": {"sync-time": "t"},
        }}))
        .unwrap();
        pod.trim();
        assert_eq!(
            (pod.metadata.labels, pod.metadata.annotations),
            (None, None)
        );
    }

    /// The API may send `null` for any field, and leave out required ones: the slim pod reads
    /// them as k8s-openapi does (absent, or the default), never as a failed watch.
    #[test]
    fn nulls_and_missing_required_fields_read_as_a_pod_reads_them() {
        let bodies = [
            json!({"metadata": {"name": "p", "labels": null, "annotations": null},
                   "spec": {"restartPolicy": null, "nodeName": null, "containers": null},
                   "status": {"phase": null, "startTime": null, "conditions": null,
                              "containerStatuses": null}}),
            json!({"metadata": null, "spec": null, "status": null}),
            json!({"spec": {"containers": [{"name": null, "image": null, "env": [
                       {"name": "RUNNER_EPHEMERAL", "value": null},
                       {"name": null, "valueFrom": null}]}]},
                   "status": {"conditions": [{"type": "Ready", "status": null,
                                             "lastTransitionTime": null}],
                              "containerStatuses": [{"name": "runner", "restartCount": null,
                                  "state": {"running": null, "terminated": {"exitCode": null,
                                      "finishedAt": null}, "waiting": null},
                                  "lastState": null}]}}),
            json!({"spec": {"containers": [{"name": "runner"}]},
                   "status": {"containerStatuses": [{"name": "runner",
                       "state": {"terminated": {}}}]}}),
        ];
        for body in bodies {
            let pod: Pod = serde_json::from_value(body.clone()).unwrap();
            let slim: RunnerPod = serde_json::from_value(body.clone()).unwrap();
            assert_eq!(slim, typed(&pod), "{body}");
        }
    }

    /// What a trim keeps holds no room for what it dropped: collecting or retaining in place
    /// keeps the source list's allocation, held for as long as the runner lives.
    #[test]
    fn a_trimmed_pod_has_no_spare_room() {
        // As the watch reads it: from bytes, lists grown as their items come.
        let mut pod: RunnerPod = serde_json::from_str(&full_pod().to_string()).unwrap();
        assert!(spare_capacity(&pod) > 0);
        pod.trim();
        assert_eq!(spare_capacity(&pod), 0);
    }

    /// Bytes a slim pod's lists have allocated and do not use.
    pub(crate) fn spare_capacity(pod: &RunnerPod) -> usize {
        fn spare<T>(list: &Vec<T>) -> usize {
            (list.capacity() - list.len()) * std::mem::size_of::<T>()
        }
        let spec = pod.spec.iter().flat_map(|spec| {
            let env = spec.containers.iter().filter_map(|c| c.env.as_ref());
            std::iter::once(spare(&spec.containers)).chain(env.map(spare))
        });
        let status = pod.status.iter().flat_map(|status| {
            [
                status.conditions.as_ref().map_or(0, spare),
                status.container_statuses.as_ref().map_or(0, spare),
            ]
        });
        spec.chain(status).sum()
    }

    /// The sizes the module's contract states, on 64-bit.
    #[test]
    fn the_slim_shapes_are_a_fraction_of_k8s_openapis() {
        use k8s_openapi::api::core::v1 as k;
        use std::mem::size_of;
        assert_eq!(
            (
                size_of::<k::PodSpec>(),
                size_of::<k::PodStatus>(),
                size_of::<k::Container>(),
                size_of::<k::EnvVar>(),
                size_of::<k::ContainerStatus>(),
            ),
            (1440, 448, 2144, 360, 752)
        );
        assert_eq!(size_of::<ObjectMeta>(), 360);
        assert_eq!(
            (
                size_of::<RunnerPod>(),
                size_of::<Container>(),
                size_of::<EnvVar>(),
                size_of::<PodCondition>(),
                size_of::<ContainerStatus>(),
            ),
            (576, 72, 48, 120, 208)
        );
    }
}
