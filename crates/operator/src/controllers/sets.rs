//! What the two controllers that drive `owner_sync` share ([`super::runner_replica_set`] for
//! Runners, [`super::runner_set`] for one-replica StatefulSets): the set's conditions, when it
//! is reconciled again, and which finished runners its count already accounts for.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hangar_api::HorizontalRunnerAutoscaler;
use hangar_api::convert::reservations_of;
use hangar_api::horizontal_runner_autoscaler::{MetricType, ScaleTargetKind};
use hangar_api::runner_config::GitHubApiCredentialsFrom;
use hangar_core::autoscaler::{
    AutoscalerView, CountedJobs, completions_absorbed, counts_jobs, demand_since,
    min_replicas_floor, reflected_before, reflected_completions, scale_down_allowed_from,
    sets_read_demand,
};
use hangar_core::owner_sync::{self, Action as PlanAction, RetireReason, Wait};
use hangar_github::RateLimitKind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use tracing::warn;

use super::{k8s_time, object_name};
use crate::conditions::{Desired, kind, reason};
use crate::context::Context;
use crate::credentials::GitHubClients;

/// How many API writes one set's reconcile has in flight at once (creations, deletions,
/// annotations of its owners): enough to apply a burst in a few round trips, few enough not to
/// flood the apiserver.
pub const APPLY_CONCURRENCY: usize = 16;

/// A set's conditions: `Available` from the counts (and, when too few are ready, the first
/// failing runner `failing` names, if any), `Progressing` from the plan and the `retiring`
/// owners (not being deleted, asked to unregister), which wait for `rate_limited` (which of
/// GitHub's limits holds their credentials, and until when) if that is `Some`.
pub fn conditions(
    desired: u32,
    ready: usize,
    failing: impl FnOnce() -> Option<String>,
    retiring: usize,
    rate_limited: Option<(RateLimitKind, jiff::Timestamp)>,
    plan: &owner_sync::Plan,
) -> Vec<Desired> {
    let counts = format!("{ready} of {desired} runner(s) registered and ready");
    let available = if ready >= desired as usize {
        Desired::yes(kind::AVAILABLE, reason::RUNNERS_AVAILABLE, counts)
    } else if let Some(failing) = failing() {
        Desired::no(
            kind::AVAILABLE,
            reason::RUNNERS_FAILING,
            format!("{counts}; {failing}"),
        )
    } else {
        Desired::no(kind::AVAILABLE, reason::RUNNERS_UNAVAILABLE, counts)
    };
    let created: u32 = plan
        .actions
        .iter()
        .map(|a| match a {
            PlanAction::Create { count } => *count,
            _ => 0,
        })
        .sum();
    let outdated = plan.actions.iter().any(|a| {
        matches!(
            a,
            PlanAction::RequestUnregistration {
                reason: RetireReason::Outdated,
                ..
            }
        )
    });
    let progressing = if created > 0 {
        Desired::yes(
            kind::PROGRESSING,
            reason::SCALING_UP,
            format!("creating {created} runner(s)"),
        )
    } else if outdated {
        Desired::yes(
            kind::PROGRESSING,
            reason::ROLLING_OUT,
            "retiring runners of an outdated template",
        )
    } else if let (true, Some((limit, until))) = (retiring > 0, rate_limited) {
        // Without this a scale-down that GitHub's budget stalls looks like one in progress.
        Desired::yes(
            kind::PROGRESSING,
            reason::GITHUB_RATE_LIMITED,
            format!(
                "unregistering {retiring} runner(s) from GitHub before deleting them, which waits \
                 until {until}: GitHub's {limit} rate limit for their credentials is used up. No \
                 runner is deleted before it is unregistered"
            ),
        )
    } else if retiring > 0 {
        Desired::yes(
            kind::PROGRESSING,
            reason::SCALING_DOWN,
            format!(
                "unregistering {retiring} runner(s) from GitHub before deleting them; a busy \
                 runner finishes its job first"
            ),
        )
    } else {
        Desired::no(
            kind::PROGRESSING,
            reason::REPLICAS_SYNCED,
            "the runners match the spec",
        )
    };
    vec![available, progressing]
}

/// Which of GitHub's rate limits holds one of `credentials` (the `githubAPICredentialsFrom`
/// of runners a set retires; `None`: the controller's own) in `ns` now, and until when. A
/// credential whose Secret cannot be read is another condition's concern, so it counts as
/// not held.
pub async fn rate_limited<'a>(
    ctx: &Context,
    ns: &str,
    credentials: impl IntoIterator<Item = Option<&'a GitHubApiCredentialsFrom>>,
) -> Option<(RateLimitKind, jiff::Timestamp)> {
    let now = jiff::Timestamp::try_from(ctx.now()).ok()?;
    let mut asked = BTreeSet::new();
    for from in credentials {
        let secret = GitHubClients::secret_name(from);
        if !asked.insert(secret) {
            continue;
        }
        if let Ok(github) = ctx.github_for_secret(ns, secret).await
            && let Some(limited) = github.rate_limited(now)
        {
            return Some(limited);
        }
    }
    None
}

/// A set's `RunnersHealthy` condition from `plan`, published as one event when it changes
/// ([`health_event`]), given the set's conditions as read (`old`).
pub fn health<K>(ctx: &Context, set: &K, old: &[Condition], plan: &owner_sync::Plan) -> Desired
where
    K: kube::Resource<DynamicType = ()>,
{
    let condition = health_of(plan);
    let uid = set.meta().uid.clone().unwrap_or_default();
    let paused = plan.paused.is_some();
    health_event(ctx, set.object_ref(&()), &uid, old, &condition, paused);
    condition
}

/// A set's `RunnersHealthy` condition from `plan`: True when every runner works or is on its
/// way; else False with the first unhealthy runner's reason, what is wrong with it, how many
/// more there are, and whether the set stopped creating runners ([`owner_sync::Plan::paused`]).
fn health_of(plan: &owner_sync::Plan) -> Desired {
    let Some((first, health)) = plan.unhealthy.first() else {
        return Desired::yes(
            kind::RUNNERS_HEALTHY,
            reason::NO_UNHEALTHY_RUNNERS,
            "every runner is working or on its way",
        );
    };
    let mut message = format!("runner {first}: {}", health.describe());
    let others = plan.unhealthy.len() - 1;
    if others > 0 {
        message.push_str(&format!("; {others} more unhealthy runner(s)"));
    }
    match (&plan.paused, plan.retries_every) {
        (Some(_), Some(backoff)) => message.push_str(&format!(
            ". No runner of this template works and a new one would most likely fail the same \
             way, so failed runners keep their places and one new runner is tried {}s after \
             the latest failure, until the template changes or one of its runners works",
            backoff.as_secs_f64()
        )),
        (Some(_), None) => message.push_str(
            ". No runner of this template works and a new one would most likely fail the same \
             way, so none is created or replaced until the template changes or one of its \
             runners works",
        ),
        (None, _) => message.push_str(". Unhealthy runners are unregistered and replaced"),
    }
    Desired::no(kind::RUNNERS_HEALTHY, health.reason(), message)
}

/// One Warning event when a set's `RunnersHealthy` turns False or changes its reason (not on
/// every reconcile while it stays so): `RunnersUnhealthy`, or `ReplacementsPaused` when the set
/// creates no more runners. The set's own condition says what was said before; until the
/// status write reaches the cache, the context's memory does (`uid` is the set's).
fn health_event(
    ctx: &Context,
    object: k8s_openapi::api::core::v1::ObjectReference,
    uid: &str,
    old: &[Condition],
    new: &Desired,
    paused: bool,
) {
    if new.status {
        ctx.said_once.forget(uid, kind::RUNNERS_HEALTHY);
        return;
    }
    let before = crate::conditions::find(Some(old), kind::RUNNERS_HEALTHY);
    if before.is_some_and(|c| c.status == "False" && c.reason == new.reason) {
        return;
    }
    let said = format!("{} paused={paused}", new.reason);
    if !ctx.said_once.first(uid, kind::RUNNERS_HEALTHY, &said) {
        return;
    }
    let reason = if paused {
        "ReplacementsPaused"
    } else {
        "RunnersUnhealthy"
    };
    ctx.event(object, true, reason, new.message.clone());
}

/// When `set` is reconciled again after a successful run of `plan`: no later than a held status
/// write may go (`held`, [`hangar_runtime::status_pace`]); while it retires runners, when the
/// retirement timeout at `force_at` runs out, if nothing changes before; otherwise just after a
/// held finished runner's place is released, soon for waits, else after the sync period (never
/// later than that).
pub fn requeue(
    set: &impl ResourceExt,
    plan: &owner_sync::Plan,
    force_at: Option<SystemTime>,
    held: Option<Duration>,
    now: SystemTime,
    sync_period: Duration,
) -> Action {
    let after = match force_at {
        Some(force_at) => {
            let left = force_at.duration_since(now).unwrap_or_default();
            left + Duration::from_millis(100)
        }
        None => {
            let until =
                |t: SystemTime| t.duration_since(now).unwrap_or_default() + Duration::from_secs(1);
            let requeue = match &plan.wait {
                Some(w) => {
                    if matches!(w, Wait::OwnerWithoutTemplateHash(_) | Wait::Inconsistent(_)) {
                        warn!(set = %object_name(set), wait = ?w, "owner sync cannot proceed");
                    }
                    Duration::from_secs(10)
                }
                None => sync_period,
            };
            plan.recheck_at.map_or(requeue, |t| requeue.min(until(t)))
        }
    };
    let after = held.map_or(after, |held| held.min(after));
    Action::requeue(after.min(sync_period))
}

/// Merge-patches annotation `key` = `now` onto object `name`: how owner sync marks pods and
/// owners it retires (`unregistration-request-timestamp`, `unregistration-complete-timestamp`).
pub async fn stamp<K>(api: &Api<K>, name: &str, key: &str, now: &str) -> Result<K, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({ "metadata": { "annotations": { key: now } } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// Tells on `set` that its runner `owner` is being unregistered before it is deleted.
/// Retirements of a scale-down or a rollout come by the hundred and are counted together
/// ("unregistering 40 runner(s) from GitHub before deleting them (scale-down): a, b, ...",
/// [`crate::events::RunnerEvents`]): one event each cost a 1,000-runner scale-down a thousand
/// apiserver writes. An unhealthy or restarted runner is told on its own, with why.
pub fn tell_unregistering(
    ctx: &Context,
    set: k8s_openapi::api::core::v1::ObjectReference,
    owner: &str,
    reason: &RetireReason,
) {
    const REASON: &str = "UnregisteringRunner";
    let why = match reason {
        RetireReason::ScaleDown => "from GitHub before deleting them (scale-down)",
        RetireReason::Outdated => "from GitHub before deleting them (outdated template)",
        RetireReason::Unhealthy(_) | RetireReason::Restarted => {
            ctx.event(
                set,
                false,
                REASON,
                format!("unregistering runner {owner} from GitHub before deleting it ({reason})"),
            );
            return;
        }
    };
    ctx.runner_events.publish(
        set,
        REASON,
        crate::events::RunnerCount {
            verb: "unregistering",
            why,
            count: 1,
            names: vec![owner.to_owned()],
        },
    );
}

/// Hands an owner's unregistration request (`requested`, its timestamp) on to `pod` when the
/// pod lacks one. Owner sync stamps a retiring owner's pods and then the owner ("all my pods
/// were asked"); a pod created moments before had not reached the set's cache and was not
/// stamped. Without this, that pod is never unregistered and the set waits for it forever.
pub async fn hand_on_unregistration_request(
    pods: &Api<hangar_runtime::pod::RunnerPod>,
    requested: &str,
    pod: &hangar_runtime::pod::RunnerPod,
) -> Result<(), crate::error::Error> {
    let key = hangar_api::annotation::UNREGISTRATION_REQUEST_TIMESTAMP;
    if pod.metadata.deletion_timestamp.is_some() || super::annotation(pod, key).is_some() {
        return Ok(());
    }
    let name = pod.name_any();
    stamp(pods, &name, key, requested)
        .await
        .map(drop)
        .or_else(crate::error::ignore_not_found)
        .map_err(crate::error::kube_err(
            "request unregistration of pod",
            format!("{}/{name}", pod.namespace().unwrap_or_default()),
        ))
}

/// The target an autoscaler scales, as (namespace, kind, name): what a change of the
/// autoscaler (its reservations, its status) may matter to. Its status can change without the
/// target's `replicas` changing (a full pool stays full), yet tell owner sync that a finished
/// runner's place need no longer be held ([`completions_known`]).
pub fn target_of(hra: &HorizontalRunnerAutoscaler) -> Option<(String, ScaleTargetKind, String)> {
    let target = hra.spec.scale_target_ref.as_ref()?;
    Some((
        hra.namespace()?,
        target.kind.unwrap_or_default(),
        target.name.clone()?,
    ))
}

/// What the one autoscaler in `ns` that scales a set's target (`kind`/`name`) says of finished
/// runners' completions against the set's `desired` count
/// ([`hangar_core::autoscaler::completions`]). Nothing when no autoscaler or several do: owner
/// sync then holds finished runners' places for the release grace.
pub fn completions_known(
    ctx: &Context,
    ns: &str,
    kind: ScaleTargetKind,
    name: &str,
    desired: u32,
) -> KnownCompletions {
    let Some(hra) = sole_autoscaler(ctx, ns, kind, name) else {
        return KnownCompletions::default();
    };
    let hra = hra.as_ref();
    let reservations = reservations_of(hra);
    let status = hra.status.as_ref();
    let view = AutoscalerView {
        generation: hra.metadata.generation,
        observed_generation: status.and_then(|s| s.observed_generation),
        desired: status.and_then(|s| s.desired_replicas),
        has_metrics: has_metrics(hra),
        reservations: &reservations,
        max_replicas: hra.spec.max_replicas,
        min_replicas_floor: min_replicas_floor(
            hra.spec.min_replicas,
            &hra.spec
                .scheduled_overrides
                .iter()
                .flatten()
                .map(|o| o.min_replicas)
                .collect::<Vec<_>>(),
        ),
        counted: counted_jobs(hra),
        scale_down_held_until: status
            .and_then(|s| s.last_successful_scale_out_time.as_ref())
            .map(|last| {
                scale_down_allowed_from(
                    k8s_time(last),
                    hra.spec.scale_down_delay_seconds_after_scale_out,
                    ctx.settings.default_scale_down_delay,
                )
            }),
    };
    KnownCompletions {
        demand_since: demand_since(&view, desired, ctx.now()),
        reflected: reflected_completions(&view, desired),
        absorbed: completions_absorbed(&view, desired, ctx.now()),
        counted: counts_jobs(&view).then(|| ObjectRef::from_obj(hra)),
        reflected_before: reflected_before(&view, desired),
    }
}

/// The one autoscaler in `ns` that scales the target `kind`/`name` (being deleted ones aside);
/// `None` when none or several do.
pub fn sole_autoscaler(
    ctx: &Context,
    ns: &str,
    kind: ScaleTargetKind,
    name: &str,
) -> Option<Arc<HorizontalRunnerAutoscaler>> {
    let mut scaling = ctx
        .stores
        .hras
        .state()
        .into_iter()
        .filter(|h| h.namespace().as_deref() == Some(ns) && h.metadata.deletion_timestamp.is_none())
        .filter(|h| {
            h.spec.scale_target_ref.as_ref().is_some_and(|r| {
                r.kind.unwrap_or_default() == kind && r.name.as_deref() == Some(name)
            })
        });
    let only = scaling.next()?;
    scaling.next().is_none().then_some(only)
}

/// Whether the set `kind`/`name` in `ns` reads the newest demand from `hra`'s reservations
/// ([`KnownCompletions::demand_since`]): `hra` is its only autoscaler and counts from
/// reservations alone.
pub fn reads_demand_of(
    ctx: &Context,
    ns: &str,
    kind: ScaleTargetKind,
    name: &str,
    hra: &HorizontalRunnerAutoscaler,
) -> bool {
    sets_read_demand(has_metrics(hra))
        && sole_autoscaler(ctx, ns, kind, name).is_some_and(|only| only.uid() == hra.uid())
}

fn has_metrics(hra: &HorizontalRunnerAutoscaler) -> bool {
    hra.spec.metrics.as_ref().is_some_and(|m| !m.is_empty())
}

/// What the autoscaler's queued-runs metric counted, when that is its only metric: its status
/// says how many jobs and when.
fn counted_jobs(hra: &HorizontalRunnerAutoscaler) -> Option<CountedJobs> {
    let metrics = hra.spec.metrics.as_deref().unwrap_or_default();
    let [only] = metrics else {
        return None;
    };
    if only.type_ != Some(MetricType::TotalNumberOfQueuedAndInProgressWorkflowRuns) {
        return None;
    }
    let status = hra.status.as_ref()?;
    Some(CountedJobs {
        jobs: u32::try_from(status.counted_jobs?).ok()?,
        observed_at: status.metrics_observed_time.as_ref().map(k8s_time)?,
    })
}

/// Asks the autoscaler that counts the set's jobs for the observation `plan` wants, if any.
pub fn ask_for_observation(ctx: &Context, known: &KnownCompletions, plan: &owner_sync::Plan) {
    if let (Some(hra), Some(at)) = (&known.counted, plan.observe_at) {
        ctx.observations.request(hra.clone(), at, ctx.now());
    }
}

/// Owner sync's [`owner_sync::Input::reflected_completions`] and
/// [`owner_sync::Input::absorbed_completions`], as [`completions_known`] reads them.
#[derive(Debug, Default)]
pub struct KnownCompletions {
    /// When the newest demand the autoscaler's reservations hold appeared, when the set reads
    /// it there rather than from its own `effectiveTime` (owner sync's `effective_time` is the
    /// later of the two).
    pub demand_since: Option<SystemTime>,
    /// Runners whose job's completion the set's count reflects.
    pub reflected: BTreeSet<String>,
    /// How many finished runners' completions, not yet heard of, the count absorbs.
    pub absorbed: u32,
    /// The autoscaler, when it counts the set's jobs by observing GitHub (owner sync's
    /// `completions_counted`): the one to ask for a fresh observation.
    pub counted: Option<ObjectRef<HorizontalRunnerAutoscaler>>,
    /// Owner sync's `reflected_before`: the time of the observation behind the count.
    pub reflected_before: Option<SystemTime>,
}

impl KnownCompletions {
    /// Owner sync's `effective_time` for a set whose `spec.effectiveTime` is `stored`: the later
    /// of it and [`KnownCompletions::demand_since`].
    pub fn effective_time(
        &self,
        stored: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    ) -> Option<SystemTime> {
        stored.map(k8s_time).max(self.demand_since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progressing(retiring: usize, limited: Option<(RateLimitKind, jiff::Timestamp)>) -> Desired {
        conditions(
            2,
            2,
            || None,
            retiring,
            limited,
            &owner_sync::Plan::default(),
        )
        .into_iter()
        .find(|c| c.kind == kind::PROGRESSING)
        .expect("a Progressing condition")
    }

    #[test]
    fn a_scale_down_held_by_githubs_rate_limit_says_until_when() {
        let until: jiff::Timestamp = "2026-12-03T15:00:00Z".parse().unwrap();
        let held = progressing(3, Some((RateLimitKind::Primary, until)));
        assert!(held.status);
        assert_eq!(held.reason, reason::GITHUB_RATE_LIMITED);
        assert!(
            held.message.contains("unregistering 3 runner(s)"),
            "{}",
            held.message
        );
        assert!(
            held.message.contains("2026-12-03T15:00:00Z"),
            "{}",
            held.message
        );
        assert!(
            held.message.contains("primary rate limit"),
            "{}",
            held.message
        );

        let free = progressing(3, None);
        assert_eq!(free.reason, reason::SCALING_DOWN);
        assert!(!free.message.contains("rate limit"), "{}", free.message);

        // Nothing retiring: a limit that holds the credentials is not the set's news.
        let synced = progressing(0, Some((RateLimitKind::Secondary, until)));
        assert!(!synced.status);
        assert_eq!(synced.reason, reason::REPLICAS_SYNCED);
    }
}
