//! RunnerSet controller: keeps `replicas` runners, each in a StatefulSet of its own, through
//! owner sync.
//!
//! Why one single-replica StatefulSet per runner (as ARC does): a StatefulSet cannot add pods
//! while finished ephemeral pods exist, and everything but `replicas`, `template` and
//! `updateStrategy` is immutable. So the StatefulSets are the *owners* of
//! `hangar_core::owner_sync`, exactly as Runners are for a RunnerReplicaSet: scale-up creates
//! StatefulSets, scale-down and rollouts retire them through unregister-before-delete, and the
//! places of finished runners are held and released the same way.
//!
//! Observe: the set's StatefulSets (a store of StatefulSets labelled `runner-template-hash`, which
//! ARC's carry too, while its `runnerset-name` is on their pods only: a set taken over from ARC
//! retires ARC's StatefulSets like outdated ones of its own) and their
//! pods (the runner-pod store). Decide: `owner_sync::plan`. Apply: create StatefulSets (named
//! `<set>-<suffix>`, pod `<set>-<suffix>-0`; in the fallback mode with their registration
//! Secret), annotate retiring pods and StatefulSets, delete StatefulSets whose runners are
//! unregistered or finished (the garbage collector takes the pod and the Secrets; PVCs of
//! `volumeClaimTemplates` stay).
//! Then volume reuse ([`volumes`], ARC 0.24): the claims of StatefulSets that are gone are
//! deleted and their released volumes made `Available` again for the set's next runners.
//! Status: replicas, readyReplicas, availableReplicas, updatedReplicas, desiredReplicas, the
//! scale selector, and the conditions `Available` and `Progressing`.
//!
//! A set holds the finalizer `hangar.dev/retire-runners`. Deleted, it keeps running owner sync
//! with 0 desired runners, so its StatefulSets are retired through unregister-before-delete
//! (idle runners at once, busy ones after their job), and lets go once none is left or its
//! retirement timeout has passed ([`super::retirement`]); meanwhile `Progressing` says
//! `Retiring`. Until then the garbage collector leaves its StatefulSets alone.
//!
//! A StatefulSet is deleted only once nothing can put a fresh pod in its withdrawn pod's place:
//! it is scaled to zero first and deleted once its status shows its controller observed that
//! (`owner_sync::PodController`), or at once in a terminating namespace, where the apiserver
//! refuses every create (a deleted set reads its namespace to know).
//!
//! The pod template is the user's, completed as the Runner controller completes a runner pod
//! ([`crate::runner_pod::build`]): the container named `runner` (added if absent) gets the
//! runner environment, the `docker` sidecar is added or completed, and the pod carries the
//! labels and finalizer the runner-pod controller acts on. The registration credential comes
//! one of two ways ([`RunnerSetRegistration`], from the CLI):
//! - **pod webhook** (this process serves the admission webhooks, as ARC's RunnerSets always
//!   rely on): the template carries the label
//!   `actions-runner-controller/inject-registration-token=true` and no credential; the webhook
//!   ([`crate::admission`]) gives each pod `RUNNER_NAME`, a token from the shared per-scope
//!   Secret or — for JIT sets, annotated `hangar.dev/registration: jit` on the template — a JIT
//!   configuration generated for the pod's name in a Secret `<pod>-jit` owned by the
//!   StatefulSet, and `restartPolicy: Never`. The controller creates no Secret and makes no
//!   GitHub call. A pod deleted directly comes back under its name with a fresh credential.
//! - **fallback** (no admission webhook in this process): a Secret per StatefulSet
//!   (`<statefulset>-registration`: a token, or a JIT configuration for the runner named after
//!   the pod; owned by the StatefulSet, or handed to it before it is deleted where a stopped
//!   controller left it with the RunnerSet) created by the controller, read through
//!   `valueFrom`, and taken back once the
//!   pod's runner container has started ([`spend_registrations`]), so a pod of such a set
//!   deleted directly comes back unable to register: it counts as finished once the kubelet
//!   shows it cannot create its runner container, and the StatefulSet is replaced.
//!
//! `restartPolicy`: a StatefulSet's template must say `Always`. The pod webhook turns it into
//! `Never` on each pod (as ARC's does), so a runner container that exits ends its pod. Pods
//! that still say `Always` (the fallback mode) have their runner container restarted by the
//! kubelet, and a restarted runner registers again with the same credential and takes the next
//! job (chaos seed 2: such StatefulSets were deleted as finished, killing that job). So there
//! the credential is single-use ([`spend_registrations`]) and the runner is judged from its
//! container's current state (`hangar_core::runner_container`): an exited runner is finished
//! only once its next run cannot be created, and one that came back anyway (the credential was
//! taken back too late) is retired through unregister-before-delete, never deleted outright.
//! Either way its StatefulSet is replaced, never reused.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use futures::StreamExt;
use hangar_api::horizontal_runner_autoscaler::ScaleTargetKind;
use hangar_api::runner_config::RunnerPodSpec;
use hangar_api::{
    HorizontalRunnerAutoscaler, RunnerSet, RunnerSpec, annotation as ann, finalizer, label,
};
use hangar_core::RunnerScope;
use hangar_core::health::{GitHubState, Health};
use hangar_core::owner_sync::{self, Action as PlanAction, OwnerView, PodController, PodView};
use hangar_core::template_hash::template_hash;
use hangar_github::GitHubApi;
use hangar_runtime::pod::RunnerPod;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, PodTemplateSpec, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use super::{
    annotation, k8s_time, object_name, registration, retirement, rfc3339, runner_container_state,
    runner_observed, sets, wait_until_stored,
};
use crate::conditions::{self, Desired};
use crate::context::Context;
use crate::credentials::GitHubClients;
use crate::error::{Error, ignore_not_found, kube_err};
use crate::reconciler::Reconciler;
use crate::runner_pod::{self, PodDefaults};
use hangar_runtime::watch::{Triggers, Unobserved};

pub use hangar_runtime::registration::mode::{
    JIT, PodCredential, REGISTRATION_ANNOTATION, RunnerSetRegistration,
};

/// Field manager for what this controller applies.
pub use hangar_runtime::managers::RUNNER_SET as MANAGER;

mod volumes;

pub use volumes::VolumeStores;

/// The controller's state: the shared context, its StatefulSet store and the claim and volume
/// stores of volume reuse.
pub struct RunnerSetContext {
    /// What every reconciler shares.
    pub ctx: Arc<Context>,
    /// StatefulSets labelled `runner-template-hash` (Hangar's and ARC's), without their pod and
    /// claim templates ([`trim_stateful_set`]): the shared store.
    pub stateful_sets: Store<StatefulSet>,
    /// RunnerSets: the shared store.
    pub runner_sets: Store<RunnerSet>,
    /// Claims labelled `runnerset-name` and volumes labelled `pending-cleanup`.
    pub volumes: VolumeStores,
    /// The StatefulSets each RunnerSet created or deleted that the store may not show yet.
    pub unobserved: Unobserved,
}

impl std::fmt::Debug for RunnerSetContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerSetContext")
            .field("ctx", &self.ctx)
            .field("stateful_sets", &self.stateful_sets.len())
            .field("volumes", &self.volumes)
            .finish()
    }
}

impl AsRef<Context> for RunnerSetContext {
    fn as_ref(&self) -> &Context {
        &self.ctx
    }
}

/// The RunnerSet controller in the shared skeleton.
const SKELETON: Reconciler<RunnerSet> = Reconciler::new("runnerset");

/// Runs the controller until the stream ends. It keeps its own stores of the claims of the
/// StatefulSets it manages (label `runnerset-name`) and of volumes given up for reuse (label
/// `pending-cleanup`, cluster-wide: PersistentVolumes have no namespace), so the shared stores
/// need not know about them; RunnerSets and StatefulSets are the shared stores'
/// ([`crate::context::Stores`]), whose watches also send `sets` and `stateful_sets`.
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    sets: Triggers<RunnerSet>,
    stateful_sets: Triggers<StatefulSet>,
    pods: Triggers<RunnerPod>,
    hras: Triggers<HorizontalRunnerAutoscaler>,
) {
    let ns = namespace;
    let pvc_api: Api<PersistentVolumeClaim> =
        hangar_runtime::watch::api(&ctx.client, ns.as_deref());
    let pv_api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let by_label = || watcher::Config::default().labels(label::RUNNERSET_NAME);
    let released = || watcher::Config::default().labels(label::PENDING_CLEANUP);
    // One watch each, feeding both the store and the controller's triggers.
    use hangar_runtime::watch::shared_store;
    let (claims, [claim_changes]) = shared_store(pvc_api, by_label());
    let (pvs, [pv_changes]) = shared_store(pv_api, released());
    let _ = claims.wait_until_ready().await;
    let _ = pvs.wait_until_ready().await;
    let state = Arc::new(RunnerSetContext {
        stateful_sets: ctx.stores.stateful_sets.clone(),
        runner_sets: ctx.stores.runner_sets.clone(),
        ctx,
        volumes: VolumeStores {
            claims,
            volumes: pvs,
        },
        unobserved: Unobserved::default(),
    });
    Controller::for_shared_stream(sets, state.runner_sets.clone())
        .owns_shared_stream(stateful_sets)
        // A pod change (ready, registered, finished) matters to its set.
        .watches_shared_stream(pods, |pod: Arc<RunnerPod>| {
            let set = pod.labels().get(label::RUNNERSET_NAME)?;
            Some(ObjectRef::new(set).within(&pod.namespace()?))
        })
        // So does a change of the autoscaler that scales it.
        .watches_shared_stream(hras, |hra| match sets::target_of(&hra)? {
            (ns, ScaleTargetKind::RunnerSet, set) => Some(ObjectRef::new(&set).within(&ns)),
            _ => None,
        })
        // So do its claims (created, bound, deleted) and its volumes (released).
        .watches_shared_stream(claim_changes, |pvc| volumes::claim_trigger(&pvc))
        .watches_shared_stream(pv_changes, move |pv| {
            volumes::volume_trigger(&pv, ns.as_deref())
        })
        .with_config(state.ctx.settings.controller_config())
        .run(
            SKELETON.reconcile(reconcile),
            SKELETON.error_policy(),
            state,
        )
        .for_each(|_| async {})
        .await;
}

/// Drops what no read of a cached StatefulSet looks at: its pod template and claim templates.
/// What a runner looks like is read from the RunnerSet; the cache answers which StatefulSets
/// exist, with their labels, annotations, owners, replicas and status. A cached StatefulSet is
/// never written back (its changes are merge patches), so nothing dropped here can be lost.
pub fn trim_stateful_set(sts: &mut StatefulSet) {
    if let Some(spec) = sts.spec.as_mut() {
        spec.template = PodTemplateSpec::default();
        spec.volume_claim_templates = None;
    }
}

/// The template hash of a set: a hash of its spec without `replicas` and `effectiveTime` (the
/// two fields that change without changing what a runner looks like).
pub fn desired_hash(set: &RunnerSet) -> String {
    let mut spec = serde_json::to_value(&set.spec).unwrap_or_default();
    if let Some(map) = spec.as_object_mut() {
        map.remove("replicas");
        map.remove("effectiveTime");
    }
    template_hash(&serde_json::to_vec(&spec).unwrap_or_default())
}

/// The set's pod selector: `spec.selector` when it selects anything, else the `runnerset-name`
/// label (Hangar's default; ARC requires a selector).
pub fn selector(set: &RunnerSet) -> LabelSelector {
    let s = &set.spec.stateful_set.selector;
    let empty = s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && s.match_expressions.as_ref().is_none_or(Vec::is_empty);
    if empty {
        LabelSelector {
            match_labels: Some([(label::RUNNERSET_NAME.to_owned(), set.name_any())].into()),
            match_expressions: None,
        }
    } else {
        s.clone()
    }
}

/// A label selector in the string form of the scale subresource (`a=b,c in (d,e)`).
pub fn selector_string(s: &LabelSelector) -> String {
    let mut parts: Vec<String> = s
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            _ => format!("!{}", e.key),
        });
    }
    parts.join(",")
}

/// Whether the set's runners register with JIT configurations: `--jit`, or the annotation
/// `hangar.dev/registration: jit` on the RunnerSet or its pod template.
pub fn uses_jit(set: &RunnerSet, controller_jit: bool) -> bool {
    let template = set.spec.stateful_set.template.metadata.as_ref();
    let jit = |a: Option<&BTreeMap<String, String>>| {
        a.and_then(|a| a.get(REGISTRATION_ANNOTATION))
            .is_some_and(|v| v == JIT)
    };
    controller_jit
        || jit(set.metadata.annotations.as_ref())
        || jit(template.and_then(|m| m.annotations.as_ref()))
}

/// The name of a StatefulSet's registration Secret.
pub use hangar_runtime::registration::names::registration_secret_name;

/// The name of the only pod of a StatefulSet of one replica.
pub use hangar_runtime::registration::names::pod_name;

/// A fresh StatefulSet name for `set`: `<set>-<suffix>`, the suffix derived from the set's UID,
/// the time and a counter, so names do not repeat.
pub fn new_name(set: &RunnerSet, now: SystemTime) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let seed = format!(
        "{}/{nanos}/{}",
        set.uid().unwrap_or_default(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    // The leaked-registration sweep recognises the set's runners by this prefix.
    let name = set.name_any();
    let prefix = hangar_core::sweep::stateful_set_prefix(&name);
    format!("{prefix}-{}", template_hash(seed.as_bytes()))
}

/// The StatefulSet for one runner of `set`: the set's StatefulSet fields with one replica, the
/// default selector when none is given, and the pod template completed into a runner pod
/// (runner environment, docker sidecar, labels, finalizer). `credential` says where the pod's
/// registration credential comes from: a Secret the template reads, or the pod webhook (the
/// template then carries the inject label and no credential). Pure.
pub fn build_stateful_set(
    set: &RunnerSet,
    name: &str,
    hash: &str,
    defaults: &PodDefaults,
    sync_time: &str,
    credential: &PodCredential,
) -> StatefulSet {
    let ns = set.namespace().unwrap_or_default();
    let sts = &set.spec.stateful_set;
    let template_meta = sts.template.metadata.clone().unwrap_or_default();
    let mut pod_spec = sts.template.spec.clone().unwrap_or_default();
    let pod = pod_name(name);
    let mut defaults = defaults.clone();
    let runner_id = match credential {
        PodCredential::Secret {
            name,
            jit,
            runner_id,
        } => {
            defaults.registration_secret = name.clone();
            defaults.jit = *jit;
            *runner_id
        }
        PodCredential::Webhook { .. } => None,
    };

    // The runner pod builder completes the containers and volumes exactly as for a Runner;
    // every other field of the user's pod spec is kept as written.
    let runner_spec = RunnerSpec {
        config: set.spec.config.clone(),
        pod: RunnerPodSpec {
            containers: Some(pod_spec.containers.clone()),
            volumes: pod_spec.volumes.clone(),
            work_volume_claim_template: set.spec.work_volume_claim_template.clone(),
            ..Default::default()
        },
    };
    let mut built = runner_pod::build(&pod, &ns, &BTreeMap::new(), &runner_spec, &defaults)
        .spec
        .unwrap_or_default();
    if let PodCredential::Webhook { .. } = credential {
        // The webhook injects the credential per pod; the template names none.
        for c in built
            .containers
            .iter_mut()
            .filter(|c| c.name == runner_pod::RUNNER_CONTAINER)
        {
            if let Some(env) = c.env.as_mut() {
                env.retain(|e| !CREDENTIAL_ENV.contains(&e.name.as_str()));
            }
        }
    }
    pod_spec.containers = built.containers;
    pod_spec.volumes = built.volumes;
    // A StatefulSet's pods must restart Always (see the module documentation).
    pod_spec.restart_policy = Some("Always".into());
    if pod_spec.service_account_name.is_none() {
        pod_spec.service_account_name = set.spec.service_account_name.clone();
    }

    let selector = selector(set);
    let mut pod_labels = template_meta.labels.clone().unwrap_or_default();
    pod_labels.extend(selector.match_labels.clone().unwrap_or_default());
    pod_labels.insert(label::RUNNERSET_NAME.into(), set.name_any());
    pod_labels.insert(label::RUNNER_TEMPLATE_HASH.into(), hash.into());
    pod_labels.insert(label::ACTIONS_RUNNER.into(), String::new());
    let mut pod_annotations = template_meta.annotations.clone().unwrap_or_default();
    if let PodCredential::Webhook { jit } = credential {
        pod_labels.insert(
            label::INJECT_REGISTRATION_TOKEN.into(),
            label::INJECT_REGISTRATION_TOKEN_VALUE.into(),
        );
        // What the webhook reads to choose between a token and a JIT configuration.
        if *jit {
            pod_annotations.insert(REGISTRATION_ANNOTATION.into(), JIT.into());
        } else {
            pod_annotations.remove(REGISTRATION_ANNOTATION);
        }
    }
    if let Some(secret) =
        GitHubClients::secret_name(set.spec.config.github_api_credentials_from.as_ref())
    {
        pod_annotations.insert(ann::GITHUB_API_CREDS_SECRET.into(), secret.into());
    }
    if let Some(id) = runner_id {
        pod_annotations.insert(ann::RUNNER_ID.into(), id.to_string());
    }

    let labels: BTreeMap<String, String> = [
        (label::RUNNERSET_NAME.to_owned(), set.name_any()),
        (label::RUNNER_TEMPLATE_HASH.to_owned(), hash.to_owned()),
    ]
    .into();
    // Claims say which set and which runner they were made for, so that volume reuse finds
    // them once the runner's StatefulSet is gone (whatever the selector copies onto them).
    let volume_claim_templates = sts.volume_claim_templates.clone().map(|templates| {
        templates
            .into_iter()
            .map(|mut t| {
                let labels = t.metadata.labels.get_or_insert_with(BTreeMap::new);
                labels.insert(label::RUNNERSET_NAME.into(), set.name_any());
                labels.insert(label::RUNNER_STATEFULSET_NAME.into(), name.into());
                t
            })
            .collect()
    });
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns),
            labels: Some(labels),
            annotations: Some([(ann::SYNC_TIME.to_owned(), sync_time.to_owned())].into()),
            owner_references: set.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(1),
            selector,
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: (!pod_annotations.is_empty()).then_some(pod_annotations),
                    // The pod carries the runner-pod finalizer from birth, as Runner pods do.
                    finalizers: Some(vec![finalizer::RUNNER_POD.to_owned()]),
                    ..Default::default()
                }),
                spec: Some(pod_spec),
            },
            volume_claim_templates,
            ..sts.clone()
        }),
        status: None,
    }
}

/// The pods of a StatefulSet, from the runner-pod store: `<name>-<ordinal>` controlled by it.
fn pods_of(ctx: &Context, sts: &StatefulSet) -> Vec<Arc<RunnerPod>> {
    let ns = sts.namespace().unwrap_or_default();
    let uid = sts.uid().unwrap_or_default();
    let replicas = sts
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
        .max(0);
    (0..replicas)
        .filter_map(|i| {
            let name = format!("{}-{i}", sts.name_any());
            ctx.stores
                .pods
                .get(&ObjectRef::<RunnerPod>::new(&name).within(&ns))
        })
        .filter(|p| {
            p.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect()
}

/// The runner container's environment variables that carry a registration credential.
const CREDENTIAL_ENV: [&str; 2] = ["RUNNER_TOKEN", "ACTIONS_RUNNER_INPUT_JITCONFIG"];

/// A StatefulSet pod as owner sync sees it, given whether its StatefulSet's registration
/// credential was taken back. Its runner is judged from the runner container's current state
/// (`hangar_core::runner_container`): in a pod that restarts `Always` (the fallback mode: no
/// webhook made it `Never`) an exited runner container is finished only once its next run
/// cannot be created, and one running again after an exit is a live runner that may hold a job.
/// A pod that says `Never` ends when its runner does.
///
/// A pod someone else deleted (`kubectl delete pod`) stands for the pod its StatefulSet creates
/// in its place under the same name: a pending runner, not a finished one (its runner container
/// is killed by the deletion), so the StatefulSet is kept and the pod comes back (registered
/// afresh by the pod webhook; in the fallback mode its credential was taken back, so it cannot
/// start and counts as finished once it shows so).
fn stateful_pod_view(pod: &RunnerPod, mut view: PodView) -> PodView {
    if replaced_by_its_stateful_set(pod) {
        view.phase = hangar_core::owner_sync::PodPhase::Pending;
        view.runner_stopped = false;
        view.runner_restarted = false;
        view.runner_restarting = false;
        view.deleting = false;
        view.health = Health::Starting;
    }
    view
}

/// Whether `pod` is being deleted by someone else than owner sync (a user's `kubectl delete
/// pod`, the StatefulSet controller replacing a pod that ended): its StatefulSet recreates it
/// under the same name once it is gone. A pod whose unregistration owner sync requested is the
/// StatefulSet's retirement, not a replacement. Whether its runner finished before the
/// deletion cannot be told reliably: the kubelet's final delete moves `deletionTimestamp` to
/// the moment the containers stopped; and either way the StatefulSet recreates the pod.
pub fn replaced_by_its_stateful_set(pod: &RunnerPod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        && annotation(pod, ann::UNREGISTRATION_REQUEST_TIMESTAMP).is_none()
}

/// Whether `sts`'s registration credential was taken back (see [`spend_registrations`]).
fn registration_spent(sts: &StatefulSet) -> bool {
    annotation(sts, ann::REGISTRATION_SPENT).is_some()
}

fn owner_view(
    ctx: &Context,
    sts: &StatefulSet,
    now: SystemTime,
    spent: bool,
    namespace_terminating: bool,
) -> OwnerView {
    let pods = pods_of(ctx, sts);
    let want = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let have = sts.status.as_ref().map_or(0, |s| s.replicas);
    OwnerView {
        name: sts.name_any(),
        created: sts
            .metadata
            .creation_timestamp
            .as_ref()
            .map(k8s_time)
            .unwrap_or(now),
        template_hash: sts.labels().get(label::RUNNER_TEMPLATE_HASH).cloned(),
        deleting: sts.metadata.deletion_timestamp.is_some(),
        unregistration_requested: annotation(sts, ann::UNREGISTRATION_REQUEST_TIMESTAMP).is_some(),
        unregistration_complete: annotation(sts, ann::UNREGISTRATION_COMPLETE_TIMESTAMP).is_some(),
        // Settled once the StatefulSet controller created its pods and they reached our store:
        // pods not yet seen must not count as missing.
        settled: have == want && pods.len() == usize::try_from(want).unwrap_or(0),
        // status.replicas counts the pods that exist: one the pod store does not show (yet)
        // may hold a job, so the StatefulSet is not unregistered until it is seen.
        unseen_pods: usize::try_from(have).unwrap_or(0) > pods.len(),
        pod_controller: PodController::of_stateful_set(
            sts.spec.as_ref().and_then(|s| s.replicas),
            sts.metadata.generation,
            sts.status.as_ref().and_then(|s| s.observed_generation),
            namespace_terminating,
        ),
        pods: pods
            .iter()
            .map(|p| stateful_pod_view(p, ctx.pod_view(p, spent)))
            .collect(),
    }
}

/// Whether namespace `ns` is terminating. Asked only by a deleted set, as a namespace deletion
/// deletes every set in it: there, no StatefulSet controller can replace a pod (nor sync, so it
/// never shows it observed `replicas: 0`). A namespace that cannot be read counts as live, so
/// the set waits for its StatefulSets' controller as anywhere else.
async fn namespace_terminating(ctx: &Context, ns: &str) -> bool {
    match Api::<Namespace>::all(ctx.client.clone()).get_opt(ns).await {
        Ok(namespace) => namespace.is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
        Err(error) => {
            warn!(namespace = ns, %error, "cannot read the namespace of a deleted runner set; \
                  its statefulsets are stopped before they go");
            false
        }
    }
}

fn scope_of(set: &RunnerSet) -> Result<RunnerScope, Error> {
    let c = &set.spec.config;
    RunnerScope::from_fields(
        c.enterprise.as_deref(),
        c.organization.as_deref(),
        c.repository.as_deref(),
    )
    .map_err(|e| Error::InvalidSpec {
        object: object_name(set),
        reason: e.to_string(),
    })
}

/// How the set's runners register: its scope, labels and credentials, and the pod template's
/// node selector.
fn placeholder_template(set: &RunnerSet) -> super::placeholder::Template<'_> {
    super::placeholder::Template {
        config: &set.spec.config,
        node_selector: set
            .spec
            .stateful_set
            .template
            .spec
            .as_ref()
            .and_then(|p| p.node_selector.as_ref()),
    }
}

/// Reconciles one RunnerSet.
pub async fn reconcile(set: Arc<RunnerSet>, state: Arc<RunnerSetContext>) -> Result<Action, Error> {
    let ctx = &state.ctx;
    let deleting = retirement::deleting_since(set.as_ref());
    let holds = retirement::holds(set.as_ref(), finalizer::RETIRE_RUNNERS);
    if deleting.is_some() {
        // The registration-only runner goes by its own finalizer.
        super::placeholder::sync(set.as_ref(), 0, placeholder_template(&set), 0, ctx).await?;
    }
    if deleting.is_some() && !holds {
        return Ok(Action::await_change());
    }
    let ns = set.namespace().unwrap_or_default();
    let sets_api: Api<RunnerSet> = Api::namespaced(ctx.client.clone(), &ns);
    if deleting.is_none() && !holds {
        retirement::set_finalizer(&sets_api, set.as_ref(), finalizer::RETIRE_RUNNERS, true).await?;
    }
    // A deleted set creates nothing, so it needs no scope: an invalid one must not keep it from
    // retiring its runners.
    let scope = match scope_of(&set) {
        Ok(scope) => Some(scope),
        Err(_) if deleting.is_some() => None,
        Err(e) => return Err(e),
    };
    let uid = set.uid().unwrap_or_default();
    let now = ctx.now();
    let owned: Vec<Arc<StatefulSet>> = state
        .stateful_sets
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
        .filter(|s| {
            s.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect();
    hand_on_unregistration_requests(ctx, &owned).await?;
    let spent = spend_registrations(ctx, &owned).await?;
    let namespace_terminating = deleting.is_some() && namespace_terminating(ctx, &ns).await;
    // What earlier passes wrote that the store does not show yet (its watch lags longer than
    // a pass waits for it) counts as done: else it would be written again.
    let unseen = state.unobserved.unseen(&uid, &state.stateful_sets, &ns);
    let mut owners: Vec<OwnerView> = owned
        .iter()
        .map(|s| {
            let spent = registration_spent(s) || spent.contains(&s.name_any());
            let mut view = owner_view(ctx, s, now, spent, namespace_terminating);
            view.deleting |= unseen.deleted.contains(&view.name);
            view
        })
        .collect();
    // A StatefulSet created but not yet seen is what a fresh one looks like: no pod yet.
    owners.extend(unseen.created.iter().map(|name| {
        OwnerView::created_unseen(
            name.clone(),
            now,
            desired_hash(&set),
            PodController::Replacing,
        )
    }));

    // A deleted set wants no runners: they retire as on a scale-down.
    let desired = if deleting.is_some() {
        0
    } else {
        u32::try_from(set.spec.stateful_set.replicas.unwrap_or(1).max(0)).unwrap_or(0)
    };
    let known = sets::completions_known(
        ctx,
        &ns,
        ScaleTargetKind::RunnerSet,
        &set.name_any(),
        desired,
    );
    let input = owner_sync::Input {
        desired,
        desired_template_hash: desired_hash(&set),
        effective_time: known.effective_time(set.spec.effective_time.as_ref()),
        ephemeral: set.spec.config.ephemeral.unwrap_or(true),
        owners,
        now,
        release_grace: ctx.settings.release_grace,
        failed_runner_backoff: ctx.settings.health.failed_runner_backoff,
        reflected_completions: known.reflected.clone(),
        // A RunnerSet learns that a runner is done from its pod (the kubelet); only
        // RunnerReplicaSets are told by `completed` deliveries (ADR 0021).
        completions_heard: Default::default(),
        absorbed_completions: known.absorbed,
        completions_counted: known.counted.is_some(),
        reflected_before: known.reflected_before,
    };
    let plan = owner_sync::plan(&input);
    sets::ask_for_observation(ctx, &known, &plan);
    // Each action touches its own StatefulSet, so they go out together, as a RunnerReplicaSet's
    // do: one at a time, a scale-down of hundreds waited a round trip per StatefulSet.
    let (set_ref, state_ref, scope_ref) = (&*set, &*state, scope.as_ref());
    let hash = input.desired_template_hash.as_str();
    let applied: Vec<Result<(), Error>> = futures::stream::iter(plan.actions.clone())
        .map(|action| async move { apply(set_ref, state_ref, scope_ref, &action, hash).await })
        .buffer_unordered(sets::APPLY_CONCURRENCY)
        .collect()
        .await;
    applied.into_iter().collect::<Result<(), Error>>()?;

    let mut retiring = None;
    if let Some(since) = deleting {
        // Every StatefulSet counts, deleting ones and those created but not yet seen too: its
        // pod may still hold a job.
        let left: Vec<String> = owned
            .iter()
            .map(|s| s.name_any())
            .chain(unseen.created.iter().cloned())
            .collect();
        match retirement::step(set.as_ref(), since, left.len(), ctx) {
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
                let timeout = retirement::timeout(set.as_ref(), ctx);
                warn!(set = %object_name(set.as_ref()), "retirement timed out, forcing its runners out");
                ctx.event(
                    set.object_ref(&()),
                    true,
                    retirement::TIMED_OUT,
                    retirement::forced_note(timeout, left.len(), "runner(s)"),
                );
                // Their pods too: in a terminating namespace each is held by its own timeout.
                let pods_api: Api<RunnerPod> = Api::namespaced(ctx.client.clone(), &ns);
                for stateful_set in &left {
                    retirement::mark_forced(&pods_api, &pod_name(stateful_set)).await?;
                }
                let sts_api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &ns);
                retirement::force_children(&sts_api, &ns, &left).await?;
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

    if deleting.is_none() && holds {
        // Before the status write: the placeholder's patch is conditional on the
        // resourceVersion read, which a status write (or the finalizer's above) would move.
        let ready = status_counts(ctx, &owned, &input.desired_template_hash).ready;
        super::placeholder::sync(
            set.as_ref(),
            set.spec.stateful_set.replicas.unwrap_or(1),
            placeholder_template(&set),
            ready,
            ctx,
        )
        .await?;
    }
    let held = patch_status(
        &set,
        ctx,
        &owned,
        &input,
        &plan,
        retiring.as_ref().map(|(c, _)| c),
    )
    .await?;

    let deleted = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            PlanAction::Delete { owner, .. } => Some(owner.clone()),
            _ => None,
        })
        .collect();
    volumes::sync(&set, &state, &deleted).await?;

    Ok(sets::requeue(
        set.as_ref(),
        &plan,
        retiring.map(|(_, force_at)| force_at),
        held,
        now,
        ctx.settings.sync_period,
    ))
}

/// A retiring StatefulSet's pods are stamped first, then the StatefulSet ("all my pods were
/// asked"); a pod created moments before had not reached the store and was not stamped. Hands
/// the StatefulSet's request on to such pods, or they are never unregistered and the
/// StatefulSet waits for them forever.
async fn hand_on_unregistration_requests(
    ctx: &Context,
    owned: &[Arc<StatefulSet>],
) -> Result<(), Error> {
    for sts in owned
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
    {
        let Some(requested) = annotation(sts.as_ref(), ann::UNREGISTRATION_REQUEST_TIMESTAMP)
        else {
            continue;
        };
        let ns = sts.namespace().unwrap_or_default();
        let pods: Api<RunnerPod> = Api::namespaced(ctx.client.clone(), &ns);
        for pod in pods_of(ctx, sts) {
            sets::hand_on_unregistration_request(&pods, requested, &pod).await?;
        }
    }
    Ok(())
}

/// Makes sure `sts`'s registration Secret is owned by `sts` before `sts` is deleted, so that it
/// goes with it. [`create_runner`] applies the Secret owned by the RunnerSet and hands it to the
/// StatefulSet once that exists; a controller stopped between the two (a leader killed, a
/// failed write) leaves it with the RunnerSet, outliving the StatefulSet. One GET per
/// StatefulSet deleted; a merge patch of its owner only where the hand-over was cut short.
async fn hand_over_registration_secret(ctx: &Context, sts: &StatefulSet) -> Result<(), Error> {
    let ns = sts.namespace().unwrap_or_default();
    let name = registration_secret_name(&sts.name_any());
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(secret) = secrets
        .get_opt(&name)
        .await
        .map_err(kube_err("get registration secret", format!("{ns}/{name}")))?
    else {
        return Ok(());
    };
    let (Some(uid), Some(mut owner)) = (sts.uid(), sts.controller_owner_ref(&())) else {
        return Ok(());
    };
    if secret.owner_references().iter().any(|o| o.uid == uid) {
        return Ok(());
    }
    owner.controller = None;
    let patch = serde_json::json!({ "metadata": { "ownerReferences": [owner] } });
    secrets
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(kube_err(
            "hand registration secret to statefulset",
            format!("{ns}/{name}"),
        ))?;
    warn!(secret = %format!("{ns}/{name}"), "handed a registration secret left with its RunnerSet to its statefulset");
    Ok(())
}

/// Takes back the registration credential of each StatefulSet whose pod restarts its runner
/// container (the fallback mode) once a run has started (`hangar_core::runner_container::
/// should_spend`): empties its Secret `<statefulset>-registration` — the running process read
/// it when the kubelet created the container, and a run the kubelet starts again can no longer
/// be created (`CreateContainerConfigError`: the `secretKeyRef` is not optional), so it cannot
/// register a second runner and take the next queued job in a pod owner sync then deletes as
/// finished (chaos seed 2). Then stamps [`ann::REGISTRATION_SPENT`] on the StatefulSet (what
/// owner sync reads, surviving a pod recreated under the same name) and on its pods (what the
/// runner-pod controller reads), handing the stamp on to pods that reached the store later.
/// Returns the StatefulSets whose credential it took back now.
async fn spend_registrations(
    ctx: &Context,
    owned: &[Arc<StatefulSet>],
) -> Result<std::collections::BTreeSet<String>, Error> {
    let mut spent_now = std::collections::BTreeSet::new();
    let now = rfc3339(ctx.now());
    // A StatefulSet being deleted goes with its Secret and pod; its pod restarts nothing.
    for sts in owned
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
    {
        let ns = sts.namespace().unwrap_or_default();
        let name = sts.name_any();
        let pods_api: Api<RunnerPod> = Api::namespaced(ctx.client.clone(), &ns);
        let pods = pods_of(ctx, sts);
        let stamp = match annotation(sts.as_ref(), ann::REGISTRATION_SPENT) {
            Some(at) => at.to_owned(),
            None => {
                let started = pods.iter().any(|p| {
                    let (restart_count, state) = runner_container_state(p);
                    hangar_core::runner_container::should_spend(&runner_observed(
                        p,
                        false,
                        restart_count,
                        state,
                    ))
                });
                if !started {
                    continue;
                }
                // Emptied rather than deleted: the controller may patch registration Secrets,
                // never delete one (the garbage collector takes it with its StatefulSet).
                Api::<Secret>::namespaced(ctx.client.clone(), &ns)
                    .patch(
                        &registration_secret_name(&name),
                        &PatchParams::default(),
                        &Patch::Merge(&serde_json::json!({ "data": null })),
                    )
                    .await
                    .map(drop)
                    .or_else(ignore_not_found)
                    .map_err(kube_err(
                        "take back registration secret",
                        format!("{ns}/{}", registration_secret_name(&name)),
                    ))?;
                sets::stamp(
                    &Api::<StatefulSet>::namespaced(ctx.client.clone(), &ns),
                    &name,
                    ann::REGISTRATION_SPENT,
                    &now,
                )
                .await
                .map(drop)
                .or_else(ignore_not_found)
                .map_err(kube_err(
                    "mark registration spent on statefulset",
                    format!("{ns}/{name}"),
                ))?;
                info!(statefulset = %format!("{ns}/{name}"), "runner started: registration secret taken back");
                spent_now.insert(name.clone());
                now.clone()
            }
        };
        for pod in pods
            .iter()
            .filter(|p| annotation(p.as_ref(), ann::REGISTRATION_SPENT).is_none())
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            sets::stamp(&pods_api, &pod.name_any(), ann::REGISTRATION_SPENT, &stamp)
                .await
                .map(drop)
                .or_else(ignore_not_found)
                .map_err(kube_err(
                    "mark registration spent on pod",
                    format!("{ns}/{}", pod.name_any()),
                ))?;
        }
    }
    Ok(spent_now)
}

/// Counts for the status, over StatefulSets that are not being deleted.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StatusCounts {
    /// Runners (one per StatefulSet).
    pub replicas: i32,
    /// Runners whose pod is Ready and whose runner is registered.
    pub ready: i32,
    /// Runners of the current template.
    pub updated: i32,
}

fn status_counts(ctx: &Context, owned: &[Arc<StatefulSet>], hash: &str) -> StatusCounts {
    let mut c = StatusCounts::default();
    for sts in owned
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
    {
        c.replicas += 1;
        if sts
            .labels()
            .get(label::RUNNER_TEMPLATE_HASH)
            .map(String::as_str)
            == Some(hash)
        {
            c.updated += 1;
        }
        let ready = pods_of(ctx, sts).iter().any(|p| {
            super::runner_id(p).is_some()
                && super::ready_since(p).is_some()
                && !super::runner_stopped(p)
        });
        if ready {
            c.ready += 1;
        }
    }
    c
}

async fn patch_status(
    set: &RunnerSet,
    ctx: &Context,
    owned: &[Arc<StatefulSet>],
    input: &owner_sync::Input,
    plan: &owner_sync::Plan,
    retiring: Option<&Desired>,
) -> Result<Option<std::time::Duration>, Error> {
    let counts = status_counts(ctx, owned, &input.desired_template_hash);
    let retiring_count = owned
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .filter(|s| annotation(s.as_ref(), ann::UNREGISTRATION_REQUEST_TIMESTAMP).is_some())
        .count();
    let old_conditions = set
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut wanted =
        set_conditions(ctx, set, input.desired, counts.ready, retiring_count, plan).await;
    wanted.push(sets::health(ctx, set, &old_conditions, plan));
    if let Some(progress) = retiring {
        // A deleted set says it is waiting for its runners, not how it scales.
        wanted.retain(|c| c.kind != conditions::kind::PROGRESSING);
        wanted.push(progress.clone());
    }
    wanted.extend(super::fields::fields_honored(
        ctx,
        set.object_ref(&()),
        &old_conditions,
        &hangar_api::ignored::runner_set(&set.spec),
    ));
    let new_conditions =
        conditions::merge(&old_conditions, &wanted, set.metadata.generation, ctx.now());
    let status = serde_json::json!({
        "replicas": counts.replicas,
        "readyReplicas": counts.ready,
        "availableReplicas": counts.ready,
        "updatedReplicas": counts.updated,
        "desiredReplicas": input.desired,
        "unhealthyReplicas": plan.unhealthy.len(),
        "busyReplicas": owned
            .iter()
            .flat_map(|sts| pods_of(ctx, sts))
            .filter(|p| ctx.github_state(p) == GitHubState::Busy)
            .count(),
        "selector": selector_string(&selector(set)),
        "conditions": new_conditions,
    });
    let current = serde_json::to_value(&set.status).unwrap_or_default();
    let changed = status
        .as_object()
        .into_iter()
        .flatten()
        .any(|(k, v)| current.get(k) != Some(v));
    if !changed {
        return Ok(None);
    }
    ctx.status_pace
        .patch_status(&ctx.client, set, status, "patch status of runnerset")
        .await
}

/// The set's conditions: `Available` from the counts, `Progressing` from the plan and the
/// StatefulSets being retired (and the rate limit, if one holds the set's credentials).
pub async fn set_conditions(
    ctx: &Context,
    set: &RunnerSet,
    desired: u32,
    ready: i32,
    retiring: usize,
    plan: &owner_sync::Plan,
) -> Vec<Desired> {
    // `ready` counts StatefulSets: never negative.
    let ready = usize::try_from(ready).unwrap_or(0);
    let rate_limited = if retiring > 0 {
        let ns = set.namespace().unwrap_or_default();
        let credentials = set.spec.config.github_api_credentials_from.as_ref();
        sets::rate_limited(ctx, &ns, [credentials]).await
    } else {
        None
    };
    sets::conditions(desired, ready, || None, retiring, rate_limited, plan)
}

async fn apply(
    set: &RunnerSet,
    state: &RunnerSetContext,
    scope: Option<&RunnerScope>,
    action: &PlanAction,
    hash: &str,
) -> Result<(), Error> {
    let ctx = &state.ctx;
    let ns = set.namespace().unwrap_or_default();
    let sets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &ns);
    let pods: Api<RunnerPod> = Api::namespaced(ctx.client.clone(), &ns);
    let now = rfc3339(ctx.now());
    match action {
        PlanAction::Create { count } => {
            let scope = scope.ok_or_else(|| Error::InvalidSpec {
                object: object_name(set),
                reason: "no valid scope to register runners in".into(),
            })?;
            let mode = ctx.settings.runner_set_registration;
            // Only the fallback mode registers here; with the webhook, pods register as they
            // are admitted.
            let github = match mode {
                RunnerSetRegistration::StatefulSetSecret => Some(
                    ctx.github_for(&ns, set.spec.config.github_api_credentials_from.as_ref())
                        .await?,
                ),
                RunnerSetRegistration::PodWebhook => None,
            };
            let github = github.as_deref();
            let results: Vec<Result<String, Error>> = futures::stream::iter(0..*count)
                .map(|_| async {
                    match github {
                        Some(github) => create_runner(set, ctx, scope, github, hash, &now).await,
                        None => create_webhook_runner(set, ctx, hash, &now).await,
                    }
                })
                .buffer_unordered(sets::APPLY_CONCURRENCY)
                .collect()
                .await;
            let (mut created, mut failure) = (Vec::new(), None);
            for result in results {
                match result {
                    Ok(name) => created.push(name),
                    Err(e) => failure = failure.or(Some(e)),
                }
            }
            let count = created.len();
            info!(set = %object_name(set), count, "created runner statefulsets");
            // Each StatefulSet's one pod follows at once: it counts as the pod created.
            let target = crate::metrics::ScaleTarget::runner_set(&ns, &set.name_any());
            ctx.metrics.runner_pods_created(&target, created.len());
            // As for RunnerReplicaSets: the next reconcile must see these StatefulSets, or it
            // would create them again.
            state
                .unobserved
                .record(&set.uid().unwrap_or_default(), &created, &[]);
            wait_until_stored(&state.stateful_sets, &ns, &created).await;
            // Every creation failed: nothing was created to tell of, only the error.
            if !created.is_empty() {
                ctx.runner_events.publish(
                    set.object_ref(&()),
                    "CreatedRunners",
                    crate::events::RunnerCount {
                        verb: "created",
                        why: "",
                        count: created.len(),
                        names: created.clone(),
                    },
                );
            }
            if let Some(e) = failure {
                return Err(e);
            }
        }
        // A StatefulSet is deleted only once its controller observed that it wants no pod and
        // has stopped its pods itself; garbage collection takes what is left.
        PlanAction::Delete { owner, reason, .. } => {
            if ctx.settings.runner_set_registration == RunnerSetRegistration::StatefulSetSecret
                && let Some(sts) = state.stateful_sets.get(&ObjectRef::new(owner).within(&ns))
            {
                hand_over_registration_secret(ctx, &sts).await?;
            }
            sets.delete(owner, &DeleteParams::background())
                .await
                .map(drop)
                .or_else(ignore_not_found)
                .map_err(kube_err("delete statefulset", format!("{ns}/{owner}")))?;
            state.unobserved.record(
                &set.uid().unwrap_or_default(),
                &[],
                std::slice::from_ref(owner),
            );
            info!(set = %object_name(set), statefulset = owner, ?reason, "deleted runner statefulset");
            ctx.runner_events.publish(
                set.object_ref(&()),
                "DeletedRunners",
                crate::events::RunnerCount {
                    verb: "deleted",
                    why: match reason {
                        hangar_core::owner_sync::DeleteReason::Completed => "whose runner finished",
                        hangar_core::owner_sync::DeleteReason::Unregistered => {
                            "unregistered from GitHub"
                        }
                    },
                    count: 1,
                    names: vec![owner.clone()],
                },
            );
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
                    .map(drop)
                    .or_else(ignore_not_found)
                    .map_err(kube_err(
                        "request unregistration of pod",
                        format!("{ns}/{pod}"),
                    ))?;
            }
            sets::stamp(&sets, owner, ann::UNREGISTRATION_REQUEST_TIMESTAMP, &now)
                .await
                .map_err(kube_err(
                    "request unregistration of statefulset",
                    format!("{ns}/{owner}"),
                ))?;
            info!(set = %object_name(set), statefulset = owner, ?reason, "retiring runner");
            sets::tell_unregistering(ctx, set.object_ref(&()), owner, reason);
        }
        PlanAction::MarkUnregistrationComplete { owner } => {
            sets::stamp(&sets, owner, ann::UNREGISTRATION_COMPLETE_TIMESTAMP, &now)
                .await
                .map_err(kube_err(
                    "mark statefulset unregistered",
                    format!("{ns}/{owner}"),
                ))?;
        }
        PlanAction::StopReplacingPods { owner, reason } => {
            // One write: scaled to zero (its controller then adds no pod, whatever it has yet
            // to see), and marked so that the next pass deletes it once that is observed.
            let marked = state
                .stateful_sets
                .get(&ObjectRef::new(owner).within(&ns))
                .is_some_and(|s| {
                    annotation(s.as_ref(), ann::UNREGISTRATION_COMPLETE_TIMESTAMP).is_some()
                });
            let mut patch = serde_json::json!({ "spec": { "replicas": 0 } });
            if !marked {
                patch["metadata"] = serde_json::json!({ "annotations": {
                    ann::UNREGISTRATION_COMPLETE_TIMESTAMP: now,
                } });
            }
            sets.patch(owner, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop)
                .or_else(ignore_not_found)
                .map_err(kube_err(
                    "scale statefulset to zero before deleting it",
                    format!("{ns}/{owner}"),
                ))?;
            info!(set = %object_name(set), statefulset = owner, ?reason, "scaled runner statefulset to zero before deleting it");
        }
    }
    Ok(())
}

/// Creates one runner whose pod the admission webhook registers: the StatefulSet alone.
/// Returns its name.
async fn create_webhook_runner(
    set: &RunnerSet,
    ctx: &Context,
    hash: &str,
    now: &str,
) -> Result<String, Error> {
    let ns = set.namespace().unwrap_or_default();
    let name = new_name(set, ctx.now());
    let jit = uses_jit(set, ctx.settings.jit);
    let credential = PodCredential::Webhook { jit };
    let sts = build_stateful_set(
        set,
        &name,
        hash,
        &ctx.settings.pod_defaults,
        now,
        &credential,
    );
    Api::<StatefulSet>::namespaced(ctx.client.clone(), &ns)
        .create(&PostParams::default(), &sts)
        .await
        .map_err(kube_err("create statefulset for", object_name(set)))?;
    info!(set = %object_name(set), statefulset = name, jit, "created runner statefulset (registered by the pod webhook)");
    Ok(name)
}

/// Creates one runner: its registration Secret (owned by the set until the StatefulSet exists,
/// so the pod never waits for it), the StatefulSet, then hands the Secret to the StatefulSet
/// (the garbage collector deletes it with the StatefulSet). Returns the StatefulSet's name.
async fn create_runner(
    set: &RunnerSet,
    ctx: &Context,
    scope: &RunnerScope,
    github: &dyn GitHubApi,
    hash: &str,
    now: &str,
) -> Result<String, Error> {
    let ns = set.namespace().unwrap_or_default();
    let name = new_name(set, ctx.now());
    let pod = pod_name(&name);
    let secret_name = registration_secret_name(&name);
    let jit = uses_jit(set, ctx.settings.jit);

    let registration = registration::register(
        github,
        scope,
        &pod,
        set.spec.config.labels.as_deref(),
        set.spec
            .stateful_set
            .template
            .spec
            .as_ref()
            .and_then(|p| p.node_selector.as_ref()),
        jit,
    )
    .await?;
    let registered_id = registration.runner_id;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let secret_labels = [(label::RUNNERSET_NAME, set.name_any())];
    let secret = |owner: Option<OwnerReference>| {
        registration::secret(
            &ns,
            &secret_name,
            owner,
            &secret_labels,
            registration.data.clone(),
        )
    };
    let set_owner = set.controller_owner_ref(&()).map(|mut o| {
        o.controller = None;
        o
    });
    registration::apply(
        &secrets,
        MANAGER,
        &secret(set_owner),
        "apply registration secret",
    )
    .await?;

    let credential = PodCredential::Secret {
        name: secret_name.clone(),
        jit,
        runner_id: registered_id,
    };
    let sts = build_stateful_set(
        set,
        &name,
        hash,
        &ctx.settings.pod_defaults,
        now,
        &credential,
    );
    let created = Api::<StatefulSet>::namespaced(ctx.client.clone(), &ns)
        .create(&PostParams::default(), &sts)
        .await
        .map_err(kube_err("create statefulset for", object_name(set)))?;
    let sts_owner = created.controller_owner_ref(&()).map(|mut o| {
        o.controller = None;
        o
    });
    registration::apply(
        &secrets,
        MANAGER,
        &secret(sts_owner),
        "hand registration secret to statefulset",
    )
    .await?;
    info!(set = %object_name(set), statefulset = name, %scope, jit, "created runner statefulset");
    Ok(name)
}

#[cfg(test)]
mod tests;
