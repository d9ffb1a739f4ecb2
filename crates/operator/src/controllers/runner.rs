//! Runner controller: one pod per Runner, and a status that says whether the runner is
//! actually registered on GitHub.
//!
//! Observe: the Runner, its pod (store) and, when the pod must be created, a registration
//! credential: the scope's shared token Secret ([`registration::SharedTokens`], written from
//! GitHub only when missing or about to expire), or a JIT configuration from GitHub. Apply: a
//! JIT configuration's Secret (server-side apply, owned by the Runner), then the pod (created
//! once; pods are immutable). Status: `phase` mirrors the pod, except that a running pod whose runner has
//! no GitHub runner ID yet is reported `Pending` with reason `RegistrationPending` — a Runner is
//! `Running` only once GitHub knows it (ARC's contract since 0.18).
//!
//! A standalone Runner (no owner) whose runner finished gets a fresh pod, like ARC's restart; a
//! Runner owned by a RunnerReplicaSet is left for owner sync to delete, and its status is left
//! as it was (see [`RunnerState::finished`]).
//!
//! GitHub calls use the Runner's own credentials when `githubAPICredentialsFrom` names a Secret
//! ([`Context::github_for`]); the pod is annotated with the Secret's name so the runner-pod
//! controller unregisters it with the same credentials. A change to a Secret a Runner names
//! (created, rotated) triggers that Runner at once.
//!
//! A Runner holds the finalizer `runner.actions.summerwind.dev` (ARC's). Deleted, it asks the
//! runner-pod controller to unregister its runner (`unregistration-request-timestamp` on the
//! pod), and deletes the pod and lets go only once the runner is unregistered or finished, or
//! its retirement timeout has passed ([`super::retirement`]).
//!
//! Every reconcile rebuilds `status.conditions` (`Registered`, `Ready`, `CredentialsValid`)
//! from what it saw, failures included: a missing Secret, a rejected credential or a GitHub
//! outage is a False condition with an actionable message, a Warning event, and a backed-off
//! retry ([`crate::error::Backoff`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hangar_api::{Runner, RunnerStatus, annotation as ann, finalizer};
use hangar_core::RunnerScope;
use hangar_core::health::Health;
use hangar_core::retirement::{self as retiring, RunnerStep};
use hangar_core::runner::{PodFacts, RunnerFacts, RunnerStep as Step};
use hangar_github::{GitHubApi, GitHubError};
use hangar_runtime::pod::RunnerPod;
use hangar_runtime::watch::{StatusWrites, UidTimes, Unobserved};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use super::{object_name, pod_phase, registration, retirement, runner_id};
use crate::conditions::{self, Desired, kind, reason};
use crate::context::Context;
use crate::credentials::GitHubClients;
use crate::error::{Error, ignore_not_found, kube_err};
use crate::reconciler::Reconciler;
use crate::runner_pod;
use hangar_runtime::watch::Triggers;

/// Field manager for everything this controller writes.
pub use hangar_runtime::managers::RUNNER as MANAGER;

/// The name of a Runner's registration Secret.
pub fn registration_secret_name(runner: &str) -> String {
    format!("{runner}-registration")
}

/// Runs the controller until the stream ends.
pub async fn run(
    ctx: Arc<Context>,
    runners: Triggers<Runner>,
    pods: Triggers<RunnerPod>,
    secrets: Api<PartialObjectMeta<Secret>>,
) {
    // Secrets are watched by metadata only (never their data), and not those Hangar writes
    // itself (registration Secrets): a created or changed credentials Secret re-reconciles the
    // Runners naming it, which read it afresh.
    let secret_changes = watcher(
        secrets,
        watcher::Config::default().labels("app.kubernetes.io/managed-by!=hangar"),
    )
    .default_backoff()
    .touched_objects();
    let mapper_ctx = ctx.clone();
    let controller =
        Controller::for_shared_stream(runners, ctx.stores.runners.clone()).owns_shared_stream(pods);
    let watch_secrets = ctx.settings.watch_credential_secrets;
    let state = Arc::new(RunnerState {
        ctx,
        finished: UidTimes::default(),
        tokens: registration::SharedTokens::default(),
        statuses: StatusWrites::default(),
        created_pods: Unobserved::default(),
        released: UidTimes::default(),
    });
    // Without the watch (no right to list Secrets), the GET in `client_for` notices a changed
    // Secret once its RECHECK_AFTER has passed, and a missing one is retried by the error policy.
    let controller = if watch_secrets {
        controller.watches_stream(secret_changes, move |secret: PartialObjectMeta<Secret>| {
            runners_using_secret(&mapper_ctx, &secret)
        })
    } else {
        controller
    };
    controller
        .with_config(state.ctx.settings.controller_config())
        .run(
            SKELETON.reconcile(reconcile),
            SKELETON.error_policy(),
            state,
        )
        .for_each(|_| async {})
        .await;
}

/// The Runners naming `secret` as their credentials; forgets what was cached about it.
fn runners_using_secret(
    ctx: &Context,
    secret: &PartialObjectMeta<Secret>,
) -> Vec<ObjectRef<Runner>> {
    let (Some(ns), name) = (secret.namespace(), secret.name_any()) else {
        return Vec::new();
    };
    ctx.clients.forget(&ns, &name);
    ctx.stores
        .runners
        .state()
        .iter()
        .filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
        .filter(|r| credentials_secret(r) == Some(name.as_str()))
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// The Secret a Runner takes its GitHub credentials from, if any.
pub fn credentials_secret(runner: &Runner) -> Option<&str> {
    GitHubClients::secret_name(runner.spec.config.github_api_credentials_from.as_ref())
}

/// Whose credentials a Runner uses, for messages.
fn credentials_source(runner: &Runner) -> String {
    match credentials_secret(runner) {
        Some(secret) => format!("the credentials in secret {secret}"),
        None => "the controller's credentials".to_owned(),
    }
}

fn owner_reference(runner: &Runner) -> Option<OwnerReference> {
    runner.controller_owner_ref(&())
}

/// The GitHub scope a Runner's spec names (its owner chain's authority).
pub(crate) fn scope_of(runner: &Runner) -> Result<RunnerScope, Error> {
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

/// What a reconcile found out, written to the status once at its end (failures included).
#[derive(Default)]
struct Report {
    /// Phase, ready, reason and message; `None` keeps what the status says.
    status: Option<RunnerStatus>,
    /// Conditions to set; a later entry of the same type wins.
    conditions: Vec<Desired>,
    /// Leave the status as it is: the Runner is about to be deleted.
    leave_status: bool,
}

/// The controller's state: the shared context and what only this controller keeps.
#[derive(Debug)]
pub struct RunnerState {
    /// What every reconciler shares.
    pub ctx: Arc<Context>,
    /// When the runners of set-owned Runners were seen finished, by Runner UID. A set deletes
    /// the Runner whose runner finished moments later, so its status is not updated to say so:
    /// under load that write was one per job, read by nobody. What the write recorded is kept
    /// here instead, so that a Runner whose finished pod is gone is left to its set for
    /// [`FINISHED_RUNNER_DELETION_WAIT`] before it counts as a vanished pod. After a restart
    /// this is empty and such a Runner is checked at once (one GET), as a vanished pod is.
    pub finished: UidTimes,
    /// The per-scope registration-token Secrets token-mode Runners' pods read.
    pub tokens: registration::SharedTokens,
    /// The statuses this controller wrote that the Runner store does not show yet.
    pub statuses: StatusWrites<RunnerStatus>,
    /// The pods this controller created that the pod store does not show yet, by Runner UID.
    pub created_pods: Unobserved,
    /// The deleted Runners whose finalizer this controller removed, which the store may still
    /// show holding it (see [`super::retirement`]).
    pub released: UidTimes,
}

/// How soon a Runner whose pod this process created, and the pod store does not show yet, is
/// looked at again if no watch event comes first.
const UNSEEN_POD_RECHECK: Duration = Duration::from_secs(5);

impl AsRef<Context> for RunnerState {
    fn as_ref(&self) -> &Context {
        &self.ctx
    }
}

/// The Runner controller in the shared skeleton: its failure Events say what to do
/// ([`explain`]).
const SKELETON: Reconciler<Runner> = Reconciler::new("runner").explained_by(explain);

/// Reconciles one Runner: [`drive`], then the status (conditions included) from its report —
/// also when it failed, so the failure is visible on the Runner.
pub async fn reconcile(runner: Arc<Runner>, state: Arc<RunnerState>) -> Result<Action, Error> {
    let ctx = &*state.ctx;
    let mut report = Report::default();
    let result = drive(&runner, &state, &mut report).await;
    if let Err(error) = &result {
        report_failure(&runner, error, &mut report);
    }
    let patched = if report.leave_status {
        Ok(())
    } else {
        patch_status(&runner, ctx, &state.statuses, report).await
    };
    match result {
        Ok(action) => {
            patched?;
            Ok(action)
        }
        Err(error) => {
            if let Err(e) = patched {
                warn!(runner = %object_name(runner.as_ref()), error = %e, "could not report a failure in the status");
            }
            Err(error)
        }
    }
}

async fn drive(runner: &Runner, state: &RunnerState, report: &mut Report) -> Result<Action, Error> {
    let ctx = &*state.ctx;
    let ns = runner.namespace().unwrap_or_default();
    let name = runner.name_any();
    let api: Api<Runner> = Api::namespaced(ctx.client.clone(), &ns);
    let uid = runner.uid().unwrap_or_default();
    let deleting_since = retirement::deleting_since(runner);
    let pod_ref = kube::runtime::reflector::ObjectRef::<RunnerPod>::new(&name).within(&ns);
    let pod = ctx.stores.pods.get(&pod_ref);
    if pod.is_some() {
        // From now on a pod missing from the store has vanished.
        state.created_pods.seen_created(&uid, &name);
    }
    let facts = RunnerFacts {
        deleting: deleting_since.is_some(),
        holds_finalizer: retirement::holds(runner, finalizer::RUNNER)
            && !state.released.contains(&uid),
        retiring: runner
            .annotations()
            .contains_key(ann::UNREGISTRATION_REQUEST_TIMESTAMP),
        had_pod: runner
            .status
            .as_ref()
            .and_then(|s| s.phase.as_ref())
            .is_some(),
        owned: !runner.owner_references().is_empty(),
        // A finished runner's pod is deleted by its set, which deletes the Runner next:
        // nothing to check for a while (under load that GET was two per job).
        finished_at: state
            .finished
            .get(&uid)
            .or_else(|| reported_finished(runner)),
        pod: pod.as_deref().map(|p| PodFacts {
            phase: pod_phase(p),
            stopped: super::runner_stopped(p),
            deleting: p.metadata.deletion_timestamp.is_some(),
        }),
        uses_jit: uses_jit(runner, ctx),
        now: ctx.now(),
    };
    let plan = hangar_core::runner::drive(&facts);
    if let Some(since) = deleting_since {
        state.finished.forget(&uid);
        report.leave_status = true;
        return match plan.step {
            Step::Retire => retire(runner, since, state).await,
            // The pod goes with it (owner reference).
            _ => Ok(Action::await_change()),
        };
    }
    if plan.add_finalizer {
        retirement::set_finalizer(&api, runner, finalizer::RUNNER, true).await?;
    }
    let scope = scope_of(runner)?;
    let (delete_finished_pod, refresh_shared_token, hand_on_unregistration) = match plan.step {
        // Only for a deleted Runner, handled above.
        Step::LetGo | Step::Retire => return Ok(Action::await_change()),
        Step::WaitRetiring => return Ok(Action::requeue(ctx.settings.sync_period)),
        Step::WaitForSet { after } => return Ok(Action::requeue(after)),
        Step::CheckVanished => {
            // A Runner of a set whose pod existed and vanished (force-deleted, node lost) is not
            // resurrected: it is deleted and the set replaces it with a fresh runner. The store
            // may lag behind our own create: a pod this process created that the store has not
            // shown yet is on its way (its watch event triggers the next reconcile); otherwise
            // the API has the last word (a GET, rarely).
            let unseen = state.created_pods.unseen(&uid, &ctx.stores.pods, &ns);
            if unseen.created.contains(&name) {
                return Ok(Action::requeue(UNSEEN_POD_RECHECK));
            }
            let exists = Api::<RunnerPod>::namespaced(ctx.client.clone(), &ns)
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
        Step::CreatePod => {
            let github = ctx
                .github_for(&ns, runner.spec.config.github_api_credentials_from.as_ref())
                .await?;
            let pod = create_pod(runner, &scope, state, github.as_ref()).await?;
            let created = [pod.name_any()];
            state.created_pods.record(&uid, &created, &[]);
            // The status the new pod implies, exactly as later reconciles derive it from the
            // cached pod (the same projection): an unscheduled pod then costs no second status
            // write.
            report.status = Some(status_from_pod(&pod));
            report.conditions = conditions_from_pod(&pod);
            report.conditions.push(health_condition(ctx, &pod));
            report.conditions.push(credentials_accepted(runner));
            // Not held while waiting below: a scale-up has hundreds of these reconciles waiting
            // at once.
            drop(pod);
            // A reconcile that still missed the pod would fetch a new credential: for JIT, one
            // that replaces the runner registration the running pod uses.
            super::wait_until_stored(&ctx.stores.pods, &ns, &created).await;
            return Ok(Action::requeue(ctx.settings.sync_period));
        }
        Step::NoteFinished {
            hand_on_unregistration,
        } => (false, false, hand_on_unregistration),
        Step::Mirror {
            delete_finished_pod,
            refresh_shared_token,
            hand_on_unregistration,
        } => (
            delete_finished_pod,
            refresh_shared_token,
            hand_on_unregistration,
        ),
    };
    // The plan notes or mirrors a pod only when the store has one.
    let Some(pod) = pod else {
        return Ok(Action::requeue(ctx.settings.sync_period));
    };
    if hand_on_unregistration
        && let Some(requested) = super::annotation(runner, ann::UNREGISTRATION_REQUEST_TIMESTAMP)
    {
        let pods: Api<RunnerPod> = Api::namespaced(ctx.client.clone(), &ns);
        super::sets::hand_on_unregistration_request(&pods, requested, &pod).await?;
    }
    if let Step::NoteFinished { .. } = plan.step {
        // Its set deletes it next: a status saying so would be overwritten by nothing but the
        // deletion.
        state.finished.note(&uid, ctx.now());
        report.leave_status = true;
        return Ok(Action::requeue(ctx.settings.sync_period));
    }
    if delete_finished_pod {
        // ARC restarts a standalone runner: a new pod registers a new runner.
        Api::<RunnerPod>::namespaced(ctx.client.clone(), &ns)
            .delete(&name, &DeleteParams::default())
            .await
            .map(drop)
            .or_else(ignore_not_found)
            .map_err(kube_err("delete finished pod", format!("{ns}/{name}")))?;
    }
    report.status = Some(status_from_pod(&pod));
    report.conditions = conditions_from_pod(&pod);
    report.conditions.push(health_condition(ctx, &pod));
    // The pod needs the credentials until its runner is unregistered: a Secret deleted or
    // broken meanwhile shows here, not only when the runner is retired.
    let github = ctx
        .github_for(&ns, runner.spec.config.github_api_credentials_from.as_ref())
        .await?;
    // A pod that has not started reads the shared token Secret when it does: keep it there
    // and fresh (free while it is known to be; a read every `SHARED_TOKEN_RECHECK` otherwise).
    if refresh_shared_token {
        shared_token_secret(runner, &scope, state, github.as_ref()).await?;
    }
    // What the pod says (a refused removal) outranks a successful read of the credential.
    report.conditions.insert(0, credentials_accepted(runner));
    Ok(Action::requeue(ctx.settings.sync_period))
}

/// One step of a deleted Runner's retirement ([`hangar_core::retirement::runner_step`]).
async fn retire(
    runner: &Runner,
    since: std::time::SystemTime,
    state: &RunnerState,
) -> Result<Action, Error> {
    let ctx = &*state.ctx;
    let ns = runner.namespace().unwrap_or_default();
    let name = runner.name_any();
    let pods: Api<RunnerPod> = Api::namespaced(ctx.client.clone(), &ns);
    let stored = ctx.stores.pods.get(&ObjectRef::new(&name).within(&ns));
    // The store may not have seen a pod created moments ago: only the API says "absent".
    let pod = match stored {
        Some(pod) => Some(pod),
        None => Api::<RunnerPod>::namespaced(ctx.client.clone(), &ns)
            .get_opt(&name)
            .await
            .map_err(kube_err(
                "get pod of deleted runner",
                format!("{ns}/{name}"),
            ))?
            .map(Arc::new),
    };
    let pod_state = pod
        .as_deref()
        .map_or(retiring::RunnerPod::Absent, retirement::runner_pod);
    let timeout = retirement::timeout(runner, ctx);
    let now = ctx.now();
    let delete_pod = || async {
        pods.delete(&name, &DeleteParams::background())
            .await
            .map(drop)
            .or_else(ignore_not_found)
            .map_err(kube_err(
                "delete pod of deleted runner",
                format!("{ns}/{name}"),
            ))
    };
    let api: Api<Runner> = Api::namespaced(ctx.client.clone(), &ns);
    match hangar_core::retirement::runner_step(pod_state, since, timeout, now) {
        RunnerStep::Release { delete_pod: true } => delete_pod().await?,
        RunnerStep::Release { delete_pod: false } => {}
        RunnerStep::Unregister { force_at } => {
            if let Some(pod) = pod.filter(|p| {
                super::annotation(p.as_ref(), ann::UNREGISTRATION_REQUEST_TIMESTAMP).is_none()
            }) {
                super::sets::stamp(
                    &pods,
                    &pod.name_any(),
                    ann::UNREGISTRATION_REQUEST_TIMESTAMP,
                    &super::rfc3339(now),
                )
                .await
                .map_err(kube_err(
                    "request unregistration of pod of deleted runner",
                    format!("{ns}/{name}"),
                ))?;
                ctx.event(
                    runner.object_ref(&()),
                    false,
                    retirement::RETIRING,
                    format!(
                        "deleting: unregistering the runner before its pod goes; a busy runner \
                         finishes its job first (forced at {})",
                        super::rfc3339(force_at)
                    ),
                );
            }
            // Unchanged on later passes (the same deadline): no write then.
            patch_status(
                runner,
                ctx,
                &state.statuses,
                Report {
                    status: None,
                    conditions: vec![retirement::waiting(1, "runner", force_at)],
                    leave_status: false,
                },
            )
            .await?;
            let left = force_at.duration_since(now).unwrap_or_default();
            return Ok(Action::requeue(
                ctx.settings
                    .sync_period
                    .min(left + Duration::from_millis(100)),
            ));
        }
        RunnerStep::Force => {
            warn!(runner = %object_name(runner), "retirement timed out, deleting its pod");
            ctx.event(
                runner.object_ref(&()),
                true,
                retirement::TIMED_OUT,
                retirement::forced_note(timeout, 1, "runner"),
            );
            retirement::mark_forced(&pods, &name).await?;
            delete_pod().await?;
        }
    }
    let written = retirement::set_finalizer(&api, runner, finalizer::RUNNER, false).await?;
    if written {
        state
            .released
            .note(&runner.uid().unwrap_or_default(), ctx.now());
    }
    Ok(retirement::released(written))
}

pub use hangar_core::runner::FINISHED_RUNNER_DELETION_WAIT;

/// When the Runner's status says its runner finished (condition `Registered` turned False
/// with reason `RunnerFinished`), if it does.
fn reported_finished(runner: &Runner) -> Option<std::time::SystemTime> {
    runner
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| {
            c.type_ == kind::REGISTERED
                && c.status == "False"
                && c.reason == reason::RUNNER_FINISHED
        })
        .map(|c| super::k8s_time(&c.last_transition_time))
}

fn credentials_accepted(runner: &Runner) -> Desired {
    Desired::yes(
        kind::CREDENTIALS_VALID,
        reason::CREDENTIALS_ACCEPTED,
        format!("GitHub accepts {}", credentials_source(runner)),
    )
}

/// The runner's health as the Runner's `Healthy` condition ([`Context::runner_health`]).
fn health_condition(ctx: &Context, pod: &RunnerPod) -> Desired {
    let health = ctx.runner_health(pod, super::registration_spent(pod));
    let reason = health.reason();
    match health {
        Health::Healthy => Desired::yes(
            kind::HEALTHY,
            reason,
            "the runner works: registered and, as far as GitHub has said, online",
        ),
        Health::Starting => Desired::yes(
            kind::HEALTHY,
            reason,
            "the runner is on its way: its pod is starting or its runner registering",
        ),
        unhealthy => Desired::no(kind::HEALTHY, reason, unhealthy.describe()),
    }
}

/// The conditions a Runner's pod implies.
pub fn conditions_from_pod(pod: &RunnerPod) -> Vec<Desired> {
    let status = status_from_pod(pod);
    let unregistered = super::annotation(pod, ann::UNREGISTRATION_COMPLETE_TIMESTAMP).is_some();
    let registered = match runner_id(pod) {
        _ if unregistered => Desired::no(
            kind::REGISTERED,
            reason::UNREGISTERING,
            "unregistered from GitHub; the runner is being deleted",
        ),
        _ if super::runner_stopped(pod) => Desired::no(
            kind::REGISTERED,
            reason::RUNNER_FINISHED,
            "the runner has exited",
        ),
        Some(id) => Desired::yes(
            kind::REGISTERED,
            reason::RUNNER_REGISTERED,
            format!("registered on GitHub as runner {id}"),
        ),
        None => Desired::no(
            kind::REGISTERED,
            reason::REGISTRATION_PENDING,
            "waiting for the runner to start and register on GitHub",
        ),
    };
    let ready = if status.ready == Some(true) {
        Desired::yes(
            kind::READY,
            reason::RUNNER_READY,
            "the runner is registered and its pod is ready",
        )
    } else {
        let why = if registered.status {
            "the runner pod is not ready".to_owned()
        } else {
            registered.message.clone()
        };
        Desired::no(kind::READY, reason::RUNNER_NOT_READY, why)
    };
    let mut conditions = vec![registered, ready];
    if let Some(refused) = super::annotation(pod, ann::UNREGISTRATION_REFUSED)
        && !unregistered
    {
        conditions.push(Desired::no(
            kind::CREDENTIALS_VALID,
            reason::FORBIDDEN,
            refused.to_owned(),
        ));
    }
    conditions
}

/// What the Runner's status says about its pod.
pub fn status_from_pod(pod: &RunnerPod) -> RunnerStatus {
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
    // One status for the whole way to registration: the pod's own phase says which step it is
    // at, and each step said here would be one more status write per runner.
    let on_its_way = phase == "Pending" && reason.is_none() && message.is_none();
    if on_its_way || (phase == "Running" && !registered) {
        phase = "Pending".into();
        reason = Some("RegistrationPending".into());
        message =
            Some("waiting for the runner pod to start and its runner to register on GitHub".into());
    }
    RunnerStatus {
        ready: Some(pod_ready && registered),
        phase: Some(phase),
        reason,
        message,
        ..Default::default()
    }
}

/// The message a user sees (condition, event) for a failed reconcile: the error and what to do.
pub fn explain(runner: &Runner, error: &Error) -> String {
    let scope = scope_of(runner).ok();
    let source = credentials_source(runner);
    match error {
        Error::GitHub { source: e, .. } => match e {
            GitHubError::Unauthorized { .. } | GitHubError::AppAuth { .. } => format!(
                "{error}. GitHub rejected {source}: check that the token is not expired or \
                 revoked, or the GitHub App id, installation id and private key"
            ),
            GitHubError::Forbidden { .. } | GitHubError::NotFound { .. } => format!(
                "{error}. GitHub refused {source}; {}",
                scope.as_ref().map_or_else(
                    || "the credential must be allowed to manage self-hosted runners".to_owned(),
                    RunnerScope::permission_hint
                )
            ),
            _ => format!("{error}. Retrying with back-off"),
        },
        _ => error.to_string(),
    }
}

/// The status a failure leaves: what the reconcile could not do, as conditions.
fn report_failure(runner: &Runner, error: &Error, report: &mut Report) {
    let message = explain(runner, error);
    let credentials = |reason| Desired::no(kind::CREDENTIALS_VALID, reason, message.clone());
    let condition = match error {
        Error::Credentials { problem, .. } => credentials(match problem {
            crate::credentials::CredentialProblem::SecretNotFound => reason::SECRET_NOT_FOUND,
            _ => reason::SECRET_INVALID,
        }),
        Error::GitHub { source, .. } => match source {
            GitHubError::Unauthorized { .. } | GitHubError::AppAuth { .. } => {
                credentials(reason::UNAUTHORIZED)
            }
            GitHubError::Forbidden { .. } | GitHubError::NotFound { .. } => {
                credentials(reason::FORBIDDEN)
            }
            _ => Desired::no(kind::REGISTERED, reason::GITHUB_API_ERROR, message.clone()),
        },
        Error::InvalidSpec { .. } => {
            report.status = Some(RunnerStatus {
                phase: Some("Failed".into()),
                reason: Some("InvalidSpec".into()),
                message: Some(message.clone()),
                ready: Some(false),
                ..Default::default()
            });
            report.conditions.push(Desired::no(
                kind::READY,
                reason::INVALID_SPEC,
                message.clone(),
            ));
            Desired::no(kind::REGISTERED, reason::INVALID_SPEC, message.clone())
        }
        // The apiserver refused the pod itself (invalid, or refused by an admission webhook or a
        // quota): the Runner says why, since retrying alone cannot fix it.
        Error::Kube {
            action: "create pod",
            source: kube::Error::Api(status),
            ..
        } if matches!(status.code, 403 | 422) => {
            Desired::no(kind::REGISTERED, reason::POD_NOT_CREATED, message.clone())
        }
        Error::Kube { .. } => return,
    };
    // A Runner without a pod shows the failure in `kubectl get` (its Message column). Its
    // phase stays unset: a phase means "had a pod" to the vanished-pod check above.
    if report.status.is_none()
        && runner
            .status
            .as_ref()
            .and_then(|s| s.phase.as_ref())
            .is_none()
    {
        report.status = Some(RunnerStatus {
            phase: None,
            reason: Some(condition.reason.clone()),
            message: Some(message.clone()),
            ready: Some(false),
            ..Default::default()
        });
    }
    report.conditions.push(condition);
}

/// Writes the status `report` asks for, if it differs from the status the Runner has: the
/// store's, or the one this controller wrote last while the store does not show it yet
/// (`written`), so a lagging watch costs no write.
async fn patch_status(
    runner: &Runner,
    ctx: &Context,
    written: &StatusWrites<RunnerStatus>,
    report: Report,
) -> Result<(), Error> {
    let uid = runner.uid().unwrap_or_default();
    let stored_version = runner.resource_version();
    let current = written
        .unseen(&uid, stored_version.as_deref())
        .unwrap_or_else(|| runner.status.clone().unwrap_or_default());
    let desired = report.status.unwrap_or_else(|| current.clone());
    // Later entries of a type win.
    let mut wanted: Vec<Desired> = Vec::new();
    for c in report.conditions.into_iter().rev() {
        if !wanted.iter().any(|w| w.kind == c.kind) {
            wanted.push(c);
        }
    }
    wanted.reverse();
    let old_conditions = current.conditions.clone().unwrap_or_default();
    if runner
        .metadata
        .owner_references
        .as_ref()
        .is_none_or(Vec::is_empty)
    {
        // A replica set's Runners: the set (or its deployment) reports their template's fields.
        wanted.extend(super::fields::fields_honored(
            ctx,
            runner.object_ref(&()),
            &old_conditions,
            &hangar_api::ignored::runner(&runner.spec),
        ));
    }
    let new_conditions = conditions::merge(
        &old_conditions,
        &wanted,
        runner.metadata.generation,
        ctx.now(),
    );
    let unchanged = current.phase == desired.phase
        && current.ready == desired.ready
        && current.reason == desired.reason
        && current.message == desired.message
        && old_conditions == new_conditions;
    if unchanged {
        return Ok(());
    }
    let api: Api<Runner> =
        Api::namespaced(ctx.client.clone(), &runner.namespace().unwrap_or_default());
    let patch = serde_json::json!({ "status": {
        "phase": desired.phase, "ready": desired.ready, "reason": desired.reason, "message": desired.message,
        "conditions": new_conditions,
    }});
    let answered = api
        .patch_status(
            &runner.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await;
    match answered {
        Ok(patched) => {
            written.record(
                &uid,
                stored_version.as_deref(),
                patched.resource_version().as_deref(),
                patched.status.unwrap_or_default(),
            );
            Ok(())
        }
        // Deleted meanwhile (its set removed it once its runner finished): nothing to report on.
        Err(e) => {
            ignore_not_found(e).map_err(kube_err("patch status of runner", object_name(runner)))
        }
    }
}

/// Whether `runner` registers with a JIT configuration (`--jit`, or the
/// `hangar.dev/registration: jit` annotation) rather than a registration token.
fn uses_jit(runner: &Runner, ctx: &Context) -> bool {
    ctx.settings.jit
        || runner
            .annotations()
            .get("hangar.dev/registration")
            .is_some_and(|v| v == "jit")
}

/// The scope's shared registration Secret for `runner`, holding a fresh token.
async fn shared_token_secret(
    runner: &Runner,
    scope: &RunnerScope,
    state: &RunnerState,
    github: &dyn GitHubApi,
) -> Result<String, Error> {
    let ctx = &*state.ctx;
    state
        .tokens
        .ensure(
            &ctx.client,
            github,
            &runner.namespace().unwrap_or_default(),
            scope,
            credentials_secret(runner),
            timestamp_now(ctx),
        )
        .await
}

/// The context's time as a token expiry is compared with.
fn timestamp_now(ctx: &Context) -> jiff::Timestamp {
    jiff::Timestamp::try_from(ctx.now()).unwrap_or_else(|_| jiff::Timestamp::now())
}

/// Creates the Runner's pod (and a JIT configuration's Secret); returns it as stored, or as
/// sent when it already existed.
async fn create_pod(
    runner: &Runner,
    scope: &RunnerScope,
    state: &RunnerState,
    github: &dyn GitHubApi,
) -> Result<RunnerPod, Error> {
    let ctx = &*state.ctx;
    let ns = runner.namespace().unwrap_or_default();
    let name = runner.name_any();
    let jit = uses_jit(runner, ctx);

    // The credential is in a Secret the pod reads via valueFrom: a JIT configuration is the
    // runner's own (a Secret owned by the Runner), a registration token the scope's (a Secret
    // shared by the scope's runners, see `registration::SharedTokens`).
    let (secret_name, registered_id) = if jit {
        let secret_name = registration_secret_name(&name);
        let registration = registration::register(
            github,
            scope,
            &name,
            runner.spec.config.labels.as_deref(),
            runner.spec.pod.node_selector.as_ref(),
            jit,
        )
        .await?;
        let secret = registration::secret(
            &ns,
            &secret_name,
            owner_reference(runner),
            &[],
            registration.data,
        );
        registration::apply(
            &Api::namespaced(ctx.client.clone(), &ns),
            MANAGER,
            &secret,
            "apply registration secret",
        )
        .await?;
        (secret_name, registration.runner_id)
    } else {
        let known =
            state
                .tokens
                .known_fresh(&ns, scope, credentials_secret(runner), timestamp_now(ctx));
        let secret_name = match known {
            Some(name) => name,
            None => shared_token_secret(runner, scope, state, github).await?,
        };
        (secret_name, None)
    };

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
    let mut annotations: BTreeMap<String, String> = runner
        .annotations()
        .iter()
        .filter(|(k, _)| !k.starts_with("actions-runner/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(id) = registered_id {
        annotations.insert(ann::RUNNER_ID.to_owned(), id.to_string());
    }
    // The runner-pod controller unregisters the runner with the same credentials.
    if let Some(secret) = credentials_secret(runner) {
        annotations.insert(ann::GITHUB_API_CREDS_SECRET.to_owned(), secret.to_owned());
    }
    if !annotations.is_empty() {
        pod.metadata.annotations = Some(annotations);
    }
    // The pod as stored, not as sent: its creation time tells a pod just created from one
    // that never started (health), and its status says where it is.
    let pod = match RunnerPod::create(&ctx.client, &pod).await {
        Ok(created) => {
            drop(pod);
            info!(runner = %object_name(runner), %scope, jit, "created runner pod");
            if let Some(target) = crate::metrics::ScaleTarget::of_labels(&ns, runner.labels()) {
                ctx.metrics.runner_pods_created(&target, 1);
            }
            created
        }
        // The store lags behind our own writes; the pod is there.
        Err(kube::Error::Api(s)) if s.code == 409 => RunnerPod::from_pod(&pod),
        Err(e) => return Err(kube_err("create pod", format!("{ns}/{name}"))(e)),
    };
    Ok(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotations: serde_json::Value, ready: bool) -> RunnerPod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "r-1", "annotations": annotations},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]},
        }))
        .unwrap()
    }

    fn by_kind(conditions: &[Desired], kind: &str) -> (bool, String) {
        let c = conditions.iter().find(|c| c.kind == kind).unwrap();
        (c.status, c.reason.clone())
    }

    #[test]
    fn a_registered_ready_pod_makes_a_ready_runner() {
        let c = conditions_from_pod(&pod(serde_json::json!({"actions-runner/id": "7"}), true));
        assert_eq!(
            by_kind(&c, kind::REGISTERED),
            (true, "RunnerRegistered".into())
        );
        assert_eq!(by_kind(&c, kind::READY), (true, "RunnerReady".into()));
    }

    #[test]
    fn a_running_pod_without_runner_id_is_registration_pending() {
        let c = conditions_from_pod(&pod(serde_json::json!({}), true));
        assert_eq!(
            by_kind(&c, kind::REGISTERED),
            (false, "RegistrationPending".into())
        );
        assert_eq!(by_kind(&c, kind::READY), (false, "RunnerNotReady".into()));
    }

    #[test]
    fn a_runner_on_its_way_to_registration_has_one_status() {
        // As sent (no status yet), as the kubelet-less apiserver stores it, and running
        // before its runner registers.
        let sent: RunnerPod =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "r-1"}})).unwrap();
        let stored: RunnerPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "r-1"},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            ]},
        }))
        .unwrap();
        let running = pod(serde_json::json!({}), false);
        let status = status_from_pod(&sent);
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        assert_eq!(status.reason.as_deref(), Some("RegistrationPending"));
        for pod in [&stored, &running] {
            assert_eq!(status, status_from_pod(pod));
            assert_eq!(conditions_from_pod(&sent), conditions_from_pod(pod));
        }
    }

    #[test]
    fn an_unregistered_pod_says_so() {
        let c = conditions_from_pod(&pod(
            serde_json::json!({"actions-runner/id": "7",
                "actions-runner/unregistration-complete-timestamp": "2024-01-01T00:00:00Z"}),
            true,
        ));
        assert_eq!(
            by_kind(&c, kind::REGISTERED),
            (false, "Unregistering".into())
        );
    }

    fn org_runner(secret: Option<&str>) -> Runner {
        let mut spec = hangar_api::RunnerSpec::default();
        spec.config.organization = Some("octo".into());
        spec.config.github_api_credentials_from =
            secret.map(|name| hangar_api::runner_config::GitHubApiCredentialsFrom {
                secret_ref: Some(hangar_api::runner_config::SecretReference { name: name.into() }),
            });
        let mut runner = Runner::new("r-1", spec);
        runner.metadata.namespace = Some("ns".into());
        runner
    }

    #[test]
    fn a_forbidden_token_request_names_the_missing_permission() {
        let runner = org_runner(Some("octo-creds"));
        let error = Error::GitHub {
            action: "get registration token",
            scope: "octo".into(),
            source: GitHubError::Forbidden {
                call: hangar_github::Call {
                    method: "POST",
                    path: "/orgs/octo/actions/runners/registration-token".into(),
                },
                message: "Resource not accessible by integration".into(),
            },
        };
        let mut report = Report::default();
        report_failure(&runner, &error, &mut report);
        let c = &report.conditions[0];
        assert_eq!(
            (c.kind, c.status, c.reason.as_str()),
            ("CredentialsValid", false, "Forbidden")
        );
        assert!(c.message.contains("secret octo-creds"), "{}", c.message);
        assert!(
            c.message.contains("Self-hosted runners: read and write"),
            "{}",
            c.message
        );
        assert!(c.message.contains("admin:org"), "{}", c.message);
        // A Runner that never had a pod shows it in its Message column, without a phase.
        let status = report.status.unwrap();
        assert_eq!(
            (status.phase, status.reason.as_deref()),
            (None, Some("Forbidden"))
        );
    }

    #[test]
    fn a_github_outage_is_a_registration_condition_not_a_credentials_one() {
        let runner = org_runner(None);
        let error = Error::GitHub {
            action: "get registration token",
            scope: "octo".into(),
            source: GitHubError::Server {
                call: hangar_github::Call {
                    method: "POST",
                    path: "/orgs/octo/actions/runners/registration-token".into(),
                },
                status: 502,
                attempts: 3,
                message: "Server Error".into(),
            },
        };
        let mut report = Report::default();
        report_failure(&runner, &error, &mut report);
        let c = &report.conditions[0];
        assert_eq!(
            (c.kind, c.status, c.reason.as_str()),
            ("Registered", false, "GitHubAPIError")
        );
    }

    #[test]
    fn a_pod_the_apiserver_refuses_shows_on_the_runner() {
        let runner = org_runner(None);
        let error = Error::Kube {
            action: "create pod",
            object: "ns/r1".into(),
            source: kube::Error::Api(
                kube::core::Status::failure(
                    "Pod \"r1\" is invalid: spec.containers[0].image: Required value",
                    "Invalid",
                )
                .with_code(422)
                .boxed(),
            ),
        };
        let mut report = Report::default();
        report_failure(&runner, &error, &mut report);
        let c = &report.conditions[0];
        assert_eq!(
            (c.kind, c.status, c.reason.as_str()),
            ("Registered", false, "PodNotCreated")
        );
        assert!(
            c.message.contains("spec.containers[0].image"),
            "{}",
            c.message
        );
        let status = report.status.unwrap();
        assert_eq!(
            (status.phase, status.reason.as_deref()),
            (None, Some("PodNotCreated"))
        );
        // A transient failure leaves the status as it is.
        let mut report = Report::default();
        let error = Error::Kube {
            action: "create pod",
            object: "ns/r1".into(),
            source: kube::Error::Api(
                kube::core::Status::failure("etcdserver: request timed out", "InternalError")
                    .with_code(500)
                    .boxed(),
            ),
        };
        report_failure(&runner, &error, &mut report);
        assert!(report.conditions.is_empty() && report.status.is_none());
    }
}
