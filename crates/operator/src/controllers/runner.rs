//! Runner controller: one registration Secret and one pod per Runner, and a status that says
//! whether the runner is actually registered on GitHub.
//!
//! Observe: the Runner, its pod (store) and, when the pod must be created, a registration
//! credential from GitHub (token cached per scope by the client; or a JIT configuration).
//! Apply: the Secret (server-side apply, owned by the Runner), then the pod (created once; pods
//! are immutable). Status: `phase` mirrors the pod, except that a running pod whose runner has
//! no GitHub runner ID yet is reported `Pending` with reason `RegistrationPending` — a Runner is
//! `Running` only once GitHub knows it (ARC's contract since 0.18).
//!
//! A standalone Runner (no owner) whose runner finished gets a fresh pod, like ARC's restart; a
//! Runner owned by a RunnerReplicaSet is left for owner sync to delete.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hangar_api::{Runner, RunnerStatus, annotation as ann};
use hangar_core::RunnerScope;
use hangar_github::{GitHubError, JitConfigRequest};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use super::{github_scope, object_name, pod_phase, runner_id};
use crate::context::Context;
use crate::error::{Error, github_err, ignore_not_found, kube_err};
use crate::runner_pod::{self, JIT_CONFIG_KEY, TOKEN_KEY};

/// Field manager for everything this controller writes.
pub const MANAGER: &str = "hangar-runner";

/// The name of a Runner's registration Secret.
pub fn registration_secret_name(runner: &str) -> String {
    format!("{runner}-registration")
}

/// Runs the controller until the stream ends.
pub async fn run(ctx: Arc<Context>, runners: Api<Runner>, pods: Api<Pod>) {
    Controller::new(runners, watcher::Config::default())
        .owns(
            pods,
            watcher::Config::default().labels(hangar_api::label::ACTIONS_RUNNER),
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

fn owner_reference(runner: &Runner) -> Option<OwnerReference> {
    runner.controller_owner_ref(&())
}

fn scope_of(runner: &Runner) -> Result<RunnerScope, Error> {
    let c = &runner.spec.config;
    RunnerScope::from_fields(
        c.enterprise.as_deref(),
        c.organization.as_deref(),
        c.repository.as_deref(),
    )
    .map_err(|e| Error::InvalidSpec {
        object: object_name(runner),
        reason: e.to_string(),
    })
}

/// Reconciles one Runner.
pub async fn reconcile(runner: Arc<Runner>, ctx: Arc<Context>) -> Result<Action, Error> {
    if runner.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change()); // the pod goes with it (owner reference)
    }
    let ns = runner.namespace().unwrap_or_default();
    let name = runner.name_any();
    let scope = scope_of(&runner)?;
    let pod_ref = kube::runtime::reflector::ObjectRef::<Pod>::new(&name).within(&ns);
    let pod = ctx.stores.pods.get(&pod_ref);

    match pod {
        None => {
            // A Runner being retired never gets a new pod.
            let retiring = runner
                .annotations()
                .contains_key(ann::UNREGISTRATION_REQUEST_TIMESTAMP);
            if retiring {
                return Ok(Action::requeue(ctx.settings.sync_period));
            }
            // A Runner of a set whose pod existed and vanished (force-deleted, node lost) is not
            // resurrected: it is deleted and the set replaces it with a fresh runner. The store
            // may lag behind our own create, so the API has the last word (a GET, rarely).
            let had_pod = runner
                .status
                .as_ref()
                .and_then(|s| s.phase.as_ref())
                .is_some();
            if had_pod && !runner.owner_references().is_empty() {
                let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
                let exists = pods
                    .get_opt(&name)
                    .await
                    .map_err(kube_err("get pod", format!("{ns}/{name}")))?
                    .is_some();
                if exists {
                    return Ok(Action::requeue(Duration::from_secs(1)));
                }
                Api::<Runner>::namespaced(ctx.client.clone(), &ns)
                    .delete(&name, &DeleteParams::background())
                    .await
                    .map(drop)
                    .or_else(ignore_not_found)
                    .map_err(kube_err(
                        "delete runner whose pod vanished",
                        format!("{ns}/{name}"),
                    ))?;
                return Ok(Action::await_change());
            }
            create_pod(&runner, &scope, &ctx).await?;
            patch_status(
                &runner,
                &ctx,
                RunnerStatus {
                    phase: Some("Pending".into()),
                    reason: Some("PodCreated".into()),
                    message: Some(
                        "runner pod created; waiting for it to start and register".into(),
                    ),
                    ready: Some(false),
                    ..Default::default()
                },
            )
            .await?;
            Ok(Action::requeue(ctx.settings.sync_period))
        }
        Some(pod) => {
            let phase = pod_phase(&pod);
            let standalone = runner.owner_references().is_empty();
            let finished = matches!(
                phase,
                hangar_core::owner_sync::PodPhase::Succeeded
                    | hangar_core::owner_sync::PodPhase::Failed
            ) || super::runner_stopped(&pod);
            if finished && standalone && pod.metadata.deletion_timestamp.is_none() {
                // ARC restarts a standalone runner: a new pod registers a new runner.
                Api::<Pod>::namespaced(ctx.client.clone(), &ns)
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map(drop)
                    .or_else(ignore_not_found)
                    .map_err(kube_err("delete finished pod", format!("{ns}/{name}")))?;
            }
            patch_status(&runner, &ctx, status_from_pod(&pod)).await?;
            Ok(Action::requeue(ctx.settings.sync_period))
        }
    }
}

/// What the Runner's status says about its pod.
pub fn status_from_pod(pod: &Pod) -> RunnerStatus {
    let st = pod.status.clone().unwrap_or_default();
    let registered = runner_id(pod).is_some();
    let pod_ready = st
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let mut phase = st.phase.clone().unwrap_or_else(|| "Pending".into());
    let mut reason = st.reason.clone();
    let mut message = st.message.clone();
    if phase == "Running" && !registered {
        phase = "Pending".into();
        reason = Some("RegistrationPending".into());
        message =
            Some("the runner pod is running; waiting for the runner to register on GitHub".into());
    }
    RunnerStatus {
        ready: Some(pod_ready && registered),
        phase: Some(phase),
        reason,
        message,
        ..Default::default()
    }
}

async fn patch_status(runner: &Runner, ctx: &Context, desired: RunnerStatus) -> Result<(), Error> {
    let current = runner.status.clone().unwrap_or_default();
    let unchanged = current.phase == desired.phase
        && current.ready == desired.ready
        && current.reason == desired.reason
        && current.message == desired.message;
    if unchanged {
        return Ok(());
    }
    let api: Api<Runner> =
        Api::namespaced(ctx.client.clone(), &runner.namespace().unwrap_or_default());
    let patch = serde_json::json!({ "status": {
        "phase": desired.phase, "ready": desired.ready, "reason": desired.reason, "message": desired.message,
    }});
    api.patch_status(
        &runner.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(drop)
    .map_err(kube_err("patch status of runner", object_name(runner)))
}

async fn create_pod(runner: &Runner, scope: &RunnerScope, ctx: &Context) -> Result<(), Error> {
    let ns = runner.namespace().unwrap_or_default();
    let name = runner.name_any();
    let secret_name = registration_secret_name(&name);
    let gh_scope = github_scope(scope);
    let jit = ctx.settings.jit
        || runner
            .annotations()
            .get("hangar.dev/registration")
            .is_some_and(|v| v == "jit");

    // The credential goes into a Secret owned by the Runner; the pod reads it via valueFrom.
    let mut data = BTreeMap::new();
    if jit {
        let request = JitConfigRequest {
            name: name.clone(),
            runner_group_id: 1,
            labels: runner.spec.config.labels.clone().unwrap_or_default(),
            work_folder: None,
        };
        let config = match ctx.github.generate_jit_config(&gh_scope, &request).await {
            Err(GitHubError::Conflict { .. }) => {
                // A runner of this name exists (an earlier attempt): replace it.
                if let Some(old) = ctx
                    .github
                    .find_runner(&gh_scope, &name)
                    .await
                    .map_err(github_err("find runner", scope))?
                {
                    ctx.github
                        .delete_runner(&gh_scope, old.id)
                        .await
                        .map_err(github_err("delete stale runner", scope))?;
                }
                ctx.github.generate_jit_config(&gh_scope, &request).await
            }
            other => other,
        }
        .map_err(github_err("generate JIT config", scope))?;
        data.insert(
            JIT_CONFIG_KEY.to_owned(),
            ByteString(config.encoded_jit_config.expose().as_bytes().to_vec()),
        );
    } else {
        let token = ctx
            .github
            .registration_token(&gh_scope)
            .await
            .map_err(github_err("get registration token", scope))?;
        data.insert(
            TOKEN_KEY.to_owned(),
            ByteString(token.token.expose().as_bytes().to_vec()),
        );
        data.insert(
            "expires_at".to_owned(),
            ByteString(token.expires_at.to_string().into_bytes()),
        );
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name.clone()),
            namespace: Some(ns.clone()),
            owner_references: owner_reference(runner).map(|o| vec![o]),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "hangar".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(ctx.client.clone(), &ns)
        .patch(
            &secret_name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .map_err(kube_err(
            "apply registration secret",
            format!("{ns}/{secret_name}"),
        ))?;

    let mut defaults = ctx.settings.pod_defaults.clone();
    defaults.registration_secret = secret_name;
    defaults.jit = jit;
    let mut pod = runner_pod::build(&name, &ns, runner.labels(), &runner.spec, &defaults);
    pod.metadata.owner_references = owner_reference(runner).map(|o| vec![o]);
    // The pod carries the runner-pod finalizer from birth: a pod deleted by a user before the
    // pod controller first saw it must still be unregistered and must take its Runner along.
    pod.metadata.finalizers = Some(vec![hangar_api::finalizer::RUNNER_POD.to_owned()]);
    // ARC gives the pod its Runner's annotations: that is how a RunnerDeployment's template
    // annotations (cluster-autoscaler's safe-to-evict, scrape settings, ...) reach runner
    // pods. The `actions-runner/` keys are per-object unregistration state, not copied.
    let annotations: BTreeMap<String, String> = runner
        .annotations()
        .iter()
        .filter(|(k, _)| !k.starts_with("actions-runner/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !annotations.is_empty() {
        pod.metadata.annotations = Some(annotations);
    }
    match Api::<Pod>::namespaced(ctx.client.clone(), &ns)
        .create(&PostParams::default(), &pod)
        .await
    {
        Ok(_) => {
            info!(runner = %object_name(runner), %scope, jit, "created runner pod");
        }
        // The store lags behind our own writes; the pod is there.
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(kube_err("create pod", format!("{ns}/{name}"))(e)),
    }
    // A reconcile that still missed the pod would fetch a new credential: for JIT, one that
    // replaces the runner registration the running pod uses.
    super::wait_until_stored(&ctx.stores.pods, &ns, std::slice::from_ref(&name)).await;
    Ok(())
}

/// Permanent errors are reported on the object and wait for a change; transient ones back off.
pub fn error_policy(runner: Arc<Runner>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(runner = %object_name(runner.as_ref()), %error, "reconcile failed");
    let ev = Event {
        type_: EventType::Warning,
        reason: error.category().into(),
        note: Some(error.to_string()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let reference = runner.object_ref(&());
    let recorder = ctx.recorder.clone();
    tokio::spawn(async move {
        let _ = recorder.publish(&ev, &reference).await;
    });
    if error.is_permanent() {
        let runner = runner.clone();
        let ctx2 = ctx.clone();
        let message = error.to_string();
        tokio::spawn(async move {
            let status = RunnerStatus {
                phase: Some("Failed".into()),
                reason: Some("InvalidSpec".into()),
                message: Some(message),
                ready: Some(false),
                ..Default::default()
            };
            let _ = patch_status(&runner, &ctx2, status).await;
        });
        Action::await_change()
    } else {
        Action::requeue(Duration::from_secs(15))
    }
}
