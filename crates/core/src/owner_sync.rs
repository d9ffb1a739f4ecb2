//! Owner sync: how many runner-pod owners to create, which to retire, and when to wait.
//!
//! A runner pod always has an *owner* that Hangar creates and deletes: a `Runner` (for a
//! RunnerReplicaSet) or a single-replica `StatefulSet` (for a RunnerSet). Both kinds are driven
//! by this one decision function, which is given a snapshot of the owners of one set — each with
//! its pods, template hash and annotations — plus the desired replica count, and returns a
//! [`Plan`]. The driver applies the plan and reconciles again later; nothing here remembers
//! anything between calls.
//!
//! Invariants the plan keeps:
//! - **A busy runner is never killed.** Surplus and outdated owners are never deleted directly:
//!   they are first marked `unregistration-request` (pods, then owner). The runner-pod controller
//!   unregisters each runner on GitHub — which fails while a job runs — and only an owner whose
//!   pods are all unregistered (or already going) is marked complete and then deleted.
//! - **Completed ephemeral runners are not replaced blindly, and growth is never held back.** In
//!   an autoscaled set (one with an `effectiveTime`, or whose autoscaler counts its jobs,
//!   [`Input::completions_counted`]), a runner that just finished keeps its place until the
//!   replica count is known to reflect its job's completion ([`Input::reflected_completions`],
//!   [`Input::reflected_before`]), or for [`Input::release_grace`] when nothing says so: its
//!   job is done and the autoscaler is about to lower the count. Only those places are held; a
//!   count above the runners that exist is growth and is created at once.
//! - **A runner whose job is known complete is not counted, even before its pod stops.** An
//!   ephemeral runner named in [`Input::reflected_completions`] whose pod still looks running
//!   exits on its own: it neither fills a place nor is surplus, so no other runner retires for
//!   it (the "completed" delivery often lowers `desired` before the pod's stop is observed).
//!   One GitHub has said is done with its job ([`Input::completions_heard`]) but whose
//!   completion `desired` may not reflect yet is treated as finished from that moment: it
//!   holds its place under the same rules as a finished runner (so a place the count absorbs
//!   goes to a new runner at once, without waiting for the kubelet to report the exit), and it
//!   is deleted only once its pod is seen to stop.
//! - **An owner is deleted as finished only when its runner cannot come back**
//!   ([`PodView::runner_stopped`], judged by [`crate::runner_container::judge`] from the runner
//!   container's current state). In a pod that restarts its runner container, a run that exited
//!   counts as pending until it cannot come back, and a run that came back counts as a live
//!   runner that may hold a job: its owner retires through unregistration
//!   ([`RetireReason::Restarted`]), never deleted outright.
//! - **A deleted owner leaves nothing behind that could take a job.** A StatefulSet whose
//!   controller still wants its pod is first scaled to zero ([`Action::StopReplacingPods`]) and
//!   deleted only once its controller has observed that: deleted at once, a StatefulSet
//!   controller that has not yet seen the deletion replaces the pod that garbage collection or
//!   a withdrawal removed, and the fresh pod registers, takes a job and is killed when garbage
//!   collection catches up with it.
//! - **A runner that is neither working nor on its way is replaced, never one that is busy.**
//!   Each pod comes with its health ([`PodView::health`], judged by [`crate::health::classify`],
//!   which calls a runner GitHub shows busy healthy whatever its pod looks like). A stuck or
//!   dead runner does not count, so its replacement is created at once, and its owner retires
//!   the unregister-first way. The back-off is the evidence itself: when the trouble comes with
//!   the template ([`Health::comes_with_template`]: no node takes it, image, container config,
//!   crash loop, OOM, refused runner version) and no runner of the template works, a fresh pod would fail the
//!   same way, so the troubled owners keep their places and nothing more is created
//!   ([`Plan::paused`]) until the template changes or one of its runners works. Pod and node
//!   trouble is replaced each time it is seen, which the classifier's time limits space out.
//! - **A failed runner is retried, not streamed.** A finished runner that failed
//!   ([`Health::ends_in_failure`]) never recovers in place, so the pause above would never
//!   end: beside a runner of its template that GitHub lists online it is replaced at once;
//!   otherwise it keeps its place, the set pauses, and one fresh runner is tried
//!   [`Input::failed_runner_backoff`] after the latest failure ([`Plan::retries_every`]).
//! - **Owners that are still settling count as pending runners** (a Runner that has not created
//!   its pod yet, a StatefulSet whose status has not caught up with its spec), so pods being
//!   created are never counted as missing, and nothing waits for them either.
//!
//! Differences from ARC, on purpose:
//! - ARC deletes owners with an outdated template hash outright, which SIGTERMs a busy runner
//!   mid-job; here outdated owners retire through the same unregister-first path, after the
//!   up-to-date owners can carry the desired count (surge rollout).
//! - ARC's `effectiveTime` guard creates nothing for ten minutes after the newest owner's sync
//!   once the owners are newer than `effectiveTime`, assuming every missing runner completed a
//!   job whose release is on its way. It then also holds back growth (a manual scale-up, a pull
//!   metric that rises) for those ten minutes. Here only the places of finished runners that
//!   are seen are held, each until its completion is reflected or the grace ends.
//! - An impossible count (ARC panics) is reported as [`Wait::Inconsistent`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

/// How long a finished ephemeral runner of an autoscaled set (one with an `effectiveTime`) keeps
/// its place when nothing says that `replicas` already reflects its job's completion
/// ([`Input::reflected_completions`]): the time the autoscaler needs to hear, by the job's
/// `completed` webhook, that the job is done and lower `replicas`. Replaced at once, the runner
/// would be recreated for demand that is already gone, and the extra runner retired again soon
/// after (a GitHub DELETE). A fallback: webhook-driven autoscalers say which completions they
/// have accounted for, and then no place waits for this timer.
///
/// Only while no demand arrived after the runner finished (`effectiveTime` not newer than its
/// finish): a place held against new demand makes new jobs wait out the grace. Under steady
/// demand the replacement is no waste either — the next job takes it.
pub const RELEASE_GRACE: Duration = Duration::from_secs(10);

use crate::health::Health;
pub use crate::health::{PodPhase, REGISTRATION_TIMEOUT};

/// What the decision needs to know about one runner pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// Pod name.
    pub name: String,
    /// Pod phase.
    pub phase: PodPhase,
    /// The runner has finished for good: its `runner` container exited and no run of this pod
    /// can register again (the pod may still run sidecars). See [`crate::runner_container`].
    pub runner_stopped: bool,
    /// The `runner` container runs again after it exited (a pod that restarts it): the run may
    /// have registered again and hold a job, so its owner is retired through unregistration,
    /// never deleted as finished.
    pub runner_restarted: bool,
    /// The `runner` container exited and the kubelet is to start it again, while nothing shows
    /// the next run cannot register: neither finished nor running, it counts as pending.
    pub runner_restarting: bool,
    /// The pod has a deletionTimestamp.
    pub deleting: bool,
    /// The runner's health ([`crate::health::classify`]): a runner that is neither working nor
    /// on its way is replaced (or, when the trouble comes with its template, keeps its place
    /// and stops the set from creating more).
    pub health: Health,
    /// The pod carries `unregistration-request-timestamp`.
    pub unregistration_requested: bool,
    /// The pod carries `unregistration-complete-timestamp`.
    pub unregistration_complete: bool,
    /// When the runner container terminated, if it did.
    pub finished_at: Option<SystemTime>,
    /// The runner container's previous run ended in failure (an exit code other than 0, or an
    /// OOM kill). A run back after it ([`PodView::runner_restarted`]) is the kubelet retrying
    /// a runner that did not work, not one that finished a job and came back for another: it
    /// counts as a live runner and is not retired for having restarted.
    pub previous_run_failed: bool,
    /// GitHub lists the runner online (idle or busy): proof that a runner of its template can
    /// work.
    pub online_on_github: bool,
}

impl PodView {
    /// The runner in this pod has finished: pod Succeeded/Failed, or its runner container exited.
    pub fn is_stopped(&self) -> bool {
        matches!(self.phase, PodPhase::Succeeded | PodPhase::Failed) || self.runner_stopped
    }

    fn kind(&self) -> PodKind {
        if self.is_stopped() {
            PodKind::Completed
        } else if self.runner_restarted {
            PodKind::Restarted
        } else if self.runner_restarting {
            PodKind::Pending
        } else if !self.deleting && !self.health.is_capacity() {
            PodKind::Unhealthy
        } else if self.phase == PodPhase::Running {
            PodKind::Running
        } else if self.deleting {
            PodKind::Terminating
        } else {
            PodKind::Pending
        }
    }
}

/// Whether a finished runner's pod was seen to stop, or only GitHub said its job is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stopped {
    Yes,
    No,
}

fn elapsed(since: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(since).unwrap_or_default()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PodKind {
    Completed,
    Restarted,
    Running,
    Unhealthy,
    Terminating,
    Pending,
}

/// What the decision needs to know about one owner (Runner or StatefulSet) and its pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerView {
    /// Owner name (unique within the set).
    pub name: String,
    /// creationTimestamp; orders owners oldest first.
    pub created: SystemTime,
    /// The `runner-template-hash` label; `None` means the owner is malformed.
    pub template_hash: Option<String>,
    /// The owner has a deletionTimestamp.
    pub deleting: bool,
    /// The owner carries `unregistration-request-timestamp`.
    pub unregistration_requested: bool,
    /// The owner carries `unregistration-complete-timestamp`.
    pub unregistration_complete: bool,
    /// The owner has created the pods it wants (a Runner has a phase; a StatefulSet's
    /// status.replicas equals its spec.replicas). An unsettled owner without pods counts as one
    /// pending runner.
    pub settled: bool,
    /// The owner reports more pods than [`OwnerView::pods`] holds (a StatefulSet's
    /// status.replicas above the pods in the store): a pod not seen yet may be running a job,
    /// so a retiring owner waits for it before it counts as unregistered.
    pub unseen_pods: bool,
    /// Whether something would put a fresh pod in the place of a deleted one.
    pub pod_controller: PodController,
    /// Its pods.
    pub pods: Vec<PodView>,
}

impl OwnerView {
    /// An owner this set created that its cache does not show yet: what a fresh one looks
    /// like (no pods, none created yet), so it counts as one pending runner and is not created
    /// again. `pod_controller` is what the kind of owner does once it exists.
    pub fn created_unseen(
        name: String,
        now: SystemTime,
        template_hash: String,
        pod_controller: PodController,
    ) -> Self {
        OwnerView {
            name,
            created: now,
            template_hash: Some(template_hash),
            deleting: false,
            unregistration_requested: false,
            unregistration_complete: false,
            settled: false,
            unseen_pods: false,
            pod_controller,
            pods: vec![],
        }
    }
}

/// What puts a fresh pod in the place of an owner's deleted pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodController {
    /// Nothing: a Runner creates its one pod and never another once it is deleted.
    #[default]
    None,
    /// A StatefulSet whose spec still wants its pod.
    Replacing,
    /// A StatefulSet scaled to zero whose controller has not yet observed that.
    Stopping,
    /// A StatefulSet whose controller has observed that it wants no pod, or one in a
    /// terminating namespace, where nothing can create a pod any more.
    Stopped,
}

impl PodController {
    /// What a StatefulSet shows: it replaces a deleted pod while its `spec.replicas` (unset
    /// means 1) wants one, and may still do so until its `status.observedGeneration` reaches
    /// the `metadata.generation` that says `replicas: 0`. In a terminating namespace the
    /// apiserver refuses every create (pods, and the ControllerRevisions the StatefulSet
    /// controller needs before it syncs at all, so its status never catches up there).
    pub fn of_stateful_set(
        replicas: Option<i32>,
        generation: Option<i64>,
        observed_generation: Option<i64>,
        namespace_terminating: bool,
    ) -> Self {
        if namespace_terminating {
            return Self::Stopped;
        }
        match (replicas.unwrap_or(1), observed_generation, generation) {
            (wants, _, _) if wants > 0 => Self::Replacing,
            (_, Some(observed), Some(generation)) if observed >= generation => Self::Stopped,
            _ => Self::Stopping,
        }
    }
}

/// Everything one decision looks at.
#[derive(Clone, Debug)]
pub struct Input {
    /// Desired number of runners.
    pub desired: u32,
    /// Template hash that new owners get.
    pub desired_template_hash: String,
    /// The set's `effectiveTime` (set by the autoscaler when demand rises).
    pub effective_time: Option<SystemTime>,
    /// Runners are ephemeral (one job each).
    pub ephemeral: bool,
    /// All owners of the set.
    pub owners: Vec<OwnerView>,
    /// The current time.
    pub now: SystemTime,
    /// Runners (by pod name) whose job's completion `desired` is known to reflect: the
    /// autoscaler that computed `desired` had recorded that job as completed on this runner.
    /// A finished runner named here gives up its place at once instead of after
    /// `release_grace`.
    pub reflected_completions: BTreeSet<String>,
    /// Runners (by pod name) that GitHub said are done with their job (a signed `completed`
    /// delivery naming the runner, received after its pod started, for a job its scope can
    /// run), with when that was heard. An ephemeral runner named here exits by itself: until
    /// its pod is seen to stop it is not counted as running, and its place is held or given up
    /// as a finished runner's would be (from the time heard).
    pub completions_heard: BTreeMap<String, SystemTime>,
    /// How many finished runners whose completions `desired` may still count give up their
    /// places at once: the autoscaler's reservations keep its count at `desired` or above even
    /// once that many completions arrive (jobs wait beyond its maximum), so their places are
    /// wanted either way. The number covers every such runner the set still has, those whose
    /// places were given up earlier included: they stay, holding no place, until their
    /// completions are reflected (or the release grace is over).
    pub absorbed_completions: u32,
    /// An autoscaler counts the set's jobs by observing GitHub (the queued-runs metric), so a
    /// finished runner's job may still be in `desired` though the set has no `effectiveTime`:
    /// its place is held as in a set with one, and [`Plan::observe_at`] says when a fresh
    /// observation would account for the held ones.
    pub completions_counted: bool,
    /// Every runner that finished (by its pod's whole-second finish time) at least a second
    /// before this time has its completion reflected in `desired`: the time of the
    /// observation the count comes from.
    pub reflected_before: Option<SystemTime>,
    /// How long a finished runner of an autoscaled set keeps its place when nothing says its
    /// completion is reflected ([`RELEASE_GRACE`] unless `hangar run --release-grace` says
    /// otherwise).
    pub release_grace: Duration,
    /// How long after the latest failure a set whose runners failed, with none of its template
    /// working, tries one fresh runner ([`crate::health::Thresholds::failed_runner_backoff`]).
    pub failed_runner_backoff: Duration,
}

/// One thing for the driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create this many new owners with the desired template (and `sync-time = now`).
    Create {
        /// How many.
        count: u32,
    },
    /// Delete the owner (its runners are unregistered or finished).
    Delete {
        /// Owner name.
        owner: String,
        /// Why, for logs and events.
        reason: DeleteReason,
        /// The owner's pods the driver deletes with it: those seen finished or unregistered
        /// (and not yet deleting). Any other pod, above all one created after the judgement
        /// and not seen by it, is left to the owner's own retirement, which unregisters it
        /// first.
        pods: Vec<String>,
    },
    /// Annotate `unregistration-request-timestamp` on these pods (where missing), then on the
    /// owner: start unregister-before-delete.
    RequestUnregistration {
        /// Owner name.
        owner: String,
        /// Pods of the owner to annotate.
        pods: Vec<String>,
        /// Why, for logs and events.
        reason: RetireReason,
    },
    /// Annotate the owner `unregistration-complete-timestamp`: every pod is unregistered or gone.
    MarkUnregistrationComplete {
        /// Owner name.
        owner: String,
    },
    /// Scale the owner's StatefulSet to zero and annotate it
    /// `unregistration-complete-timestamp` (where missing): it is to be deleted, which waits
    /// until its controller has observed that it wants no pod ([`PodController`]).
    StopReplacingPods {
        /// Owner name.
        owner: String,
        /// Why it is to be deleted, for logs and events.
        reason: DeleteReason,
    },
}

/// Why an owner is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// All its runners unregistered.
    Unregistered,
    /// All its pods completed (ephemeral runner finished its job, or the runner exited).
    Completed,
}

/// Why an owner is retired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetireReason {
    /// More runners than desired.
    ScaleDown,
    /// Its template is outdated and enough up-to-date runners run.
    Outdated,
    /// Its runner is neither working nor on its way ([`PodView::health`]; the reason is
    /// [`Health::reason`]): a fresh pod is more likely to work.
    Unhealthy(&'static str),
    /// Its runner container runs again after it exited ([`PodView::runner_restarted`]): the pod
    /// is spent, but the new run may hold a job, so it goes the unregister-first way.
    Restarted,
}

impl std::fmt::Display for RetireReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RetireReason::ScaleDown => f.write_str("scale-down"),
            RetireReason::Outdated => f.write_str("outdated template"),
            RetireReason::Unhealthy(reason) => write!(f, "unhealthy: {reason}"),
            RetireReason::Restarted => f.write_str("its runner restarted"),
        }
    }
}

/// Why the plan stops short of scaling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// An owner lacks a template hash; it must be fixed or deleted by hand.
    OwnerWithoutTemplateHash(String),
    /// More runners are running than retained owners explain; wait for pods to settle.
    Settling,
    /// Counts that cannot happen; reported instead of acted on.
    Inconsistent(String),
}

/// Counts over the up-to-date owners, for status and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Pods whose runner is running (registered or within the registration window).
    pub running: u32,
    /// Pods not yet running.
    pub pending: u32,
    /// Pods whose runner is neither working nor on its way ([`PodView::health`]).
    pub unhealthy: u32,
    /// Pods being deleted.
    pub terminating: u32,
    /// Pods whose runner has finished.
    pub completed: u32,
}

/// The decision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Actions in the order to apply them.
    pub actions: Vec<Action>,
    /// Set when scaling was deferred.
    pub wait: Option<Wait>,
    /// Pod counts over up-to-date owners.
    pub counts: Counts,
    /// When this plan changes by the passing of time alone (a finished runner's place is
    /// released, [`Input::release_grace`]): the driver decides again then.
    pub recheck_at: Option<SystemTime>,
    /// Every owner not yet going (retiring ones included) with a runner that is neither working
    /// nor on its way, with that runner's health, oldest owner first, then the finished owners
    /// whose runner ended in trouble (an OOM kill), deleted in this plan: for conditions, events
    /// and metrics.
    pub unhealthy: Vec<(String, Health)>,
    /// Set when the set creates no runners because its template cannot work: an owner whose
    /// runner has trouble that comes with the template ([`Health::comes_with_template`]) while
    /// no runner of the template works. Such owners keep their places (a fresh pod would fail
    /// the same way); a changed template, or one runner of it that works, ends the pause.
    pub paused: Option<(String, Health)>,
    /// Set while the pause comes from runners that failed ([`Health::ends_in_failure`]): one
    /// fresh runner is tried this long after the latest failure, while none is on its way.
    pub retries_every: Option<Duration>,
    /// With [`Input::completions_counted`]: when the autoscaler should observe GitHub again,
    /// because a finished runner's place is held for want of knowing whether its job was the
    /// last, or half of the completions the count absorbs are spent. The time is a second
    /// after the latest of those runners finished, so that the observation accounts for all
    /// of them.
    pub observe_at: Option<SystemTime>,
}

/// Decides what to do with a set of runner-pod owners. Pure: same input, same plan.
pub fn plan(input: &Input) -> Plan {
    let mut plan = Plan::default();
    let now = input.now;

    // Pass 1: owners on their way out, finished owners, and the rest grouped by template.
    let mut live: Vec<(&OwnerView, Counts)> = vec![];
    // Finished owners of an autoscaled ephemeral set that may still hold their place, with
    // the time their runner finished and whether their pods were seen to stop (else GitHub
    // said the job is done, and the owner is not deleted before its pod stops).
    let mut finished: Vec<(&OwnerView, SystemTime, Stopped)> = vec![];
    // Retiring owners whose runner is unhealthy: still there, and still reported.
    let mut retiring_unhealthy: Vec<&OwnerView> = vec![];
    // Finished owners whose runner ended in trouble (an OOM kill): they go as finished, and
    // are reported once on their way.
    let mut finished_unhealthy: Vec<(String, Health)> = vec![];
    // Finished owners of the desired template whose runner failed, with the time it ended:
    // replaced at once while a runner of the template works, else held (see below).
    let mut failed: Vec<(&OwnerView, Option<SystemTime>)> = vec![];
    let holds_finished =
        input.ephemeral && (input.effective_time.is_some() || input.completions_counted);
    for owner in &input.owners {
        if owner.deleting {
            continue; // garbage collection finishes it; its pods are not ours to count.
        }
        if owner.unregistration_complete {
            plan.actions
                .extend(delete(owner, DeleteReason::Unregistered));
            continue;
        }
        if owner.unregistration_requested {
            if trouble(owner).is_some() {
                retiring_unhealthy.push(owner);
            }
            let safe = !owner.unseen_pods
                && owner
                    .pods
                    .iter()
                    .all(|p| p.unregistration_complete || p.deleting);
            if safe {
                plan.actions.push(Action::MarkUnregistrationComplete {
                    owner: owner.name.clone(),
                });
            }
            continue;
        }
        let Some(_) = owner.template_hash else {
            plan.wait = Some(Wait::OwnerWithoutTemplateHash(owner.name.clone()));
            return plan;
        };
        if owner
            .pods
            .iter()
            .any(|p| p.runner_restarted && !p.previous_run_failed && !p.is_stopped())
        {
            // A runner that came back after it exited: not finished (its new run may have taken
            // a job) and not one to keep (an ephemeral runner runs one job per pod). It leaves
            // through unregistration, which waits out a job; it no longer counts, so its place
            // is filled below.
            plan.actions
                .push(request_unregistration(owner, RetireReason::Restarted));
            continue;
        }
        let current = owner.template_hash.as_deref() == Some(&input.desired_template_hash);
        let demand_since = |at: SystemTime| input.effective_time.is_some_and(|e| e > at);
        let holds_place = |at: SystemTime| {
            holds_finished && current && elapsed(at, now) < input.release_grace && !demand_since(at)
        };
        // When a pod's runner ended: when GitHub said its job is done, or else when its
        // container stopped (whichever came first), in whole seconds as the kubelet's times
        // are, so that runners ending within one second share one observation.
        let ended = |p: &PodView| {
            let heard = input.completions_heard.get(&p.name).copied();
            [
                p.finished_at,
                heard.map(crate::runner_lookup::truncate_to_seconds),
            ]
            .into_iter()
            .flatten()
            .min()
        };
        // The count comes from an observation made at least a second after the runner ended.
        let observed_after = |p: &PodView| {
            ended(p)
                .zip(input.reflected_before)
                .is_some_and(|(at, observed)| at + Duration::from_secs(1) <= observed)
        };
        let mut counts = count(owner);
        if !owner.pods.is_empty() && counts.completed as usize == owner.pods.len() {
            if let Some(pod) = owner.pods.iter().find(|p| !p.health.is_capacity()) {
                finished_unhealthy.push((owner.name.clone(), pod.health.clone()));
            }
            let finished_at = owner.pods.iter().filter_map(ended).max();
            let failure = owner
                .pods
                .iter()
                .any(|p| !p.deleting && p.health.ends_in_failure());
            if current && failure {
                failed.push((owner, finished_at));
                continue;
            }
            let reflected = owner
                .pods
                .iter()
                .all(|p| input.reflected_completions.contains(&p.name) || observed_after(p));
            if let Some(at) = finished_at.filter(|at| !reflected && holds_place(*at)) {
                finished.push((owner, at, Stopped::Yes));
                continue;
            }
            plan.actions.extend(delete(owner, DeleteReason::Completed));
            continue;
        }
        if input.ephemeral
            && !owner.pods.is_empty()
            && owner
                .pods
                .iter()
                .all(|p| input.reflected_completions.contains(&p.name))
        {
            // Its job completed and `desired` already counts that, but its pod has not been
            // seen to stop yet: the runner is on its way out by itself and takes no other job.
            // Counted as running, it would be surplus, and another (maybe busy) runner would
            // retire in its stead and be replaced once this pod stops.
            continue;
        }
        let heard = owner
            .pods
            .iter()
            .map(|p| ended(p).filter(|_| input.completions_heard.contains_key(&p.name)))
            .collect::<Option<Vec<_>>>()
            .and_then(|at| at.into_iter().max());
        if input.ephemeral
            && !owner.pods.is_empty()
            && let Some(at) = heard
        {
            // GitHub said its job is done, but its pod has not been seen to stop: the runner
            // exits by itself and takes no other job. It holds its place as a finished runner
            // would, from when that was heard (so a place the count absorbs is filled now, not
            // when the kubelet reports the exit), and goes once its pod is seen to stop. Once
            // an observation accounts for it, it holds nothing.
            if !owner.pods.iter().all(observed_after) && holds_place(at) {
                finished.push((owner, at, Stopped::No));
            }
            continue;
        }
        if !owner.settled && owner.pods.is_empty() {
            // Every owner Hangar creates has exactly one runner pod, so an owner that has not
            // created it yet is one pending runner. ARC stops the whole pass instead; under a
            // steady stream of demand some owner is always that young, and new runners then
            // come in waves, one per round trip of the owner's controller.
            counts.pending += 1;
        }
        live.push((owner, counts));
    }

    let (mut current, outdated): (Vec<_>, Vec<_>) = live
        .into_iter()
        .partition(|(o, _)| o.template_hash.as_deref() == Some(&input.desired_template_hash));
    current.sort_by_key(|(o, _)| o.created);
    plan.unhealthy = current
        .iter()
        .chain(&outdated)
        .map(|(o, _)| *o)
        .chain(retiring_unhealthy)
        .filter_map(|o| Some((o.name.clone(), trouble(o)?.clone())))
        .chain(finished_unhealthy)
        .collect();
    plan.unhealthy.sort_by_key(|(name, _)| {
        input
            .owners
            .iter()
            .find(|o| &o.name == name)
            .map(|o| o.created)
    });
    // A runner of the template that works shows that its trouble is its pod's or its node's.
    // Without one, a fresh pod of the template would most likely fail the same way: an owner
    // with such trouble keeps its place, as a runner still to start, and nothing is created.
    let template_works = current.iter().any(|(o, _)| {
        o.pods
            .iter()
            .any(|p| p.kind() == PodKind::Running && p.health == Health::Healthy)
    });
    // Failed runners need more proof that their template works: a runner that has only just
    // started may be about to fail the same way (a crash at start runs for a moment).
    let template_proven = current.iter().any(|(o, _)| {
        o.pods.iter().any(|p| {
            p.kind() == PodKind::Running && p.health == Health::Healthy && p.online_on_github
        })
    });
    // A runner of the template on its way: the trial of a fresh runner is not over yet. Nor is
    // it while one was created within the back-off (one that runs has not shown yet that it
    // works: a crash at start runs for a moment), until the back-off has passed for it.
    let on_its_way = current
        .iter()
        .any(|(o, c)| c.pending > 0 || o.pods.iter().any(|p| p.kind() == PodKind::Restarted));
    let youngest_tried_until = current
        .iter()
        .map(|(o, _)| o.created + input.failed_runner_backoff)
        .max();
    for (owner, c) in &mut current {
        if let Some(health) = trouble(owner).filter(|h| h.comes_with_template())
            && !template_works
        {
            c.pending += c.unhealthy;
            c.unhealthy = 0;
            if plan.paused.is_none() {
                plan.paused = Some((owner.name.clone(), health.clone()));
            }
        }
    }
    for (_, c) in &current {
        plan.counts.running += c.running;
        plan.counts.pending += c.pending;
        plan.counts.unhealthy += c.unhealthy;
        plan.counts.terminating += c.terminating;
        plan.counts.completed += c.completed;
    }
    let Counts {
        running, pending, ..
    } = plan.counts;
    let desired = input.desired;
    // Failed runners: while a runner of the template works, they were their pods' own trouble
    // and are replaced at once. Without one, a fresh pod would most likely fail the same way,
    // and nothing would restart a failed pod to show otherwise: the failed runners keep the
    // places still wanted, the set pauses, and one fresh runner is tried a back-off after the
    // latest failure, while no other is on its way. One pod per back-off, not a hot loop.
    failed.sort_by_key(|(_, at)| std::cmp::Reverse(*at));
    let held_failed = if template_proven {
        0
    } else {
        failed
            .len()
            .min(desired.saturating_sub(running + pending) as usize)
    };
    for (owner, _) in &failed[held_failed..] {
        plan.actions.extend(delete(owner, DeleteReason::Completed));
    }
    let mut retry = false;
    if let Some(first) = failed[..held_failed]
        .iter()
        .map(|(o, _)| *o)
        .min_by_key(|o| o.created)
    {
        if plan.paused.is_none() {
            plan.paused = trouble_of_failed(first).map(|h| (first.name.clone(), h.clone()));
        }
        plan.retries_every = Some(input.failed_runner_backoff);
        plan.counts.unhealthy += held_failed as u32;
        let latest = failed[..held_failed].iter().filter_map(|(_, at)| *at).max();
        let retry_at = latest
            .map(|at| at + input.failed_runner_backoff)
            .into_iter()
            .chain(youngest_tried_until)
            .max()
            .unwrap_or(now);
        if !on_its_way && now >= retry_at {
            // The one that failed first gives its place to the fresh runner.
            let (oldest, _) = failed[held_failed - 1];
            plan.actions.extend(delete(oldest, DeleteReason::Completed));
            retry = true;
        } else if !on_its_way {
            plan.recheck_at = Some(retry_at);
        }
    }
    // Just-finished runners keep the places still wanted, except those whose completions the
    // count absorbs: their places go to new runners at once, but they stay (holding none) until
    // their completions are reflected or the grace is over, so that the absorption still counts
    // their completions until then (a deleted one would be forgotten while its completion is
    // still to come). The rest go.
    finished.sort_by_key(|(_, at, _)| std::cmp::Reverse(*at));
    let absorbed = finished.len().min(input.absorbed_completions as usize);
    let held = (finished.len() - absorbed).min(desired.saturating_sub(running + pending) as usize);
    let kept = absorbed + held;
    for (owner, _, stopped) in &finished[kept..] {
        if *stopped == Stopped::Yes {
            plan.actions.extend(delete(owner, DeleteReason::Completed));
        }
    }
    plan.recheck_at = finished[..kept]
        .iter()
        .map(|(_, at, _)| *at + input.release_grace)
        .chain(plan.recheck_at)
        .min();
    let absorption_half_spent = absorbed.saturating_mul(2) >= input.absorbed_completions as usize;
    if input.completions_counted && (held > 0 || absorption_half_spent) {
        plan.observe_at = finished[..kept]
            .iter()
            .map(|(_, at, _)| *at + Duration::from_secs(1))
            .max();
    }
    let maybe_running = running + pending + held as u32 + held_failed as u32;

    // Pass 2: scale the up-to-date owners.
    let mut scaled_down = false;
    if retry {
        plan.actions.push(Action::Create { count: 1 });
    } else if desired > maybe_running && plan.paused.is_some() {
        // More runners of a template that cannot work would fail the same way.
    } else if desired > maybe_running {
        // Held places already stand for the finished runners whose release may be on its way;
        // everything above them is wanted now.
        plan.actions.push(Action::Create {
            count: desired - maybe_running,
        });
    } else if desired <= running {
        // Walking newest first, keep owners until they carry `desired` running runners; retire
        // the older surplus and any owner without a running runner (as ARC does: the newest
        // runners have the freshest registration and image).
        let mut retained = 0;
        let mut retire = vec![];
        for (owner, c) in current.iter().rev() {
            if c.running == 0 || retained >= desired {
                retire.push(*owner);
            } else {
                retained += c.running;
            }
        }
        if retained == desired {
            scaled_down = true;
            for owner in retire {
                let reason = match trouble(owner) {
                    Some(health) if counts_of(&current, owner).unhealthy > 0 => {
                        RetireReason::Unhealthy(health.reason())
                    }
                    _ => RetireReason::ScaleDown,
                };
                plan.actions.push(request_unregistration(owner, reason));
            }
        } else if retained > desired {
            plan.wait = Some(Wait::Settling);
        } else {
            plan.wait = Some(Wait::Inconsistent(format!(
                "retained {retained} running runners for {desired} desired with {running} running"
            )));
        }
    }

    // Runners that are neither working nor on its way hold no job (a busy runner is healthy
    // whatever its pod looks like): replace them. They no longer count, so their replacements
    // are created in this very plan. Scale-down above already retired them when it ran; those
    // whose trouble comes with a template that cannot work keep their places (counted pending).
    if !scaled_down {
        for (owner, c) in &current {
            if let Some(health) = trouble(owner)
                && c.running == 0
                && c.unhealthy > 0
            {
                plan.actions.push(request_unregistration(
                    owner,
                    RetireReason::Unhealthy(health.reason()),
                ));
            }
        }
    }

    // Pass 3: retire outdated owners once the up-to-date ones carry the desired count. An owner
    // without a running runner holds no job, so it may go at once.
    let rollout_done = running >= desired;
    for (owner, c) in outdated {
        if rollout_done || c.running == 0 {
            plan.actions
                .push(request_unregistration(owner, RetireReason::Outdated));
        }
    }
    plan
}

/// The step towards deleting `owner`: the delete itself once nothing would replace its pods,
/// else stopping the StatefulSet first, or nothing while it is stopping.
fn delete(owner: &OwnerView, reason: DeleteReason) -> Option<Action> {
    let name = owner.name.clone();
    match owner.pod_controller {
        PodController::None | PodController::Stopped => Some(Action::Delete {
            owner: name,
            reason,
            pods: owner
                .pods
                .iter()
                .filter(|p| !p.deleting && (p.is_stopped() || p.unregistration_complete))
                .map(|p| p.name.clone())
                .collect(),
        }),
        PodController::Replacing => Some(Action::StopReplacingPods {
            owner: name,
            reason,
        }),
        PodController::Stopping => None,
    }
}

fn request_unregistration(owner: &OwnerView, reason: RetireReason) -> Action {
    Action::RequestUnregistration {
        owner: owner.name.clone(),
        pods: owner
            .pods
            .iter()
            .filter(|p| !p.unregistration_requested)
            .map(|p| p.name.clone())
            .collect(),
        reason,
    }
}

fn counts_of(owners: &[(&OwnerView, Counts)], owner: &OwnerView) -> Counts {
    owners
        .iter()
        .find(|(o, _)| o.name == owner.name)
        .map(|(_, c)| *c)
        .unwrap_or_default()
}

/// The health of the first of finished `owner`'s runners that failed.
fn trouble_of_failed(owner: &OwnerView) -> Option<&Health> {
    owner
        .pods
        .iter()
        .find(|p| p.health.ends_in_failure())
        .map(|p| &p.health)
}

/// The health of the first of `owner`'s runners that is neither working nor on its way.
fn trouble(owner: &OwnerView) -> Option<&Health> {
    owner
        .pods
        .iter()
        .find(|p| p.kind() == PodKind::Unhealthy)
        .map(|p| &p.health)
}

fn count(owner: &OwnerView) -> Counts {
    let mut c = Counts::default();
    for pod in &owner.pods {
        match pod.kind() {
            PodKind::Completed => c.completed += 1,
            // Retired before counting; were one counted, it may be busy.
            PodKind::Restarted | PodKind::Running => c.running += 1,
            PodKind::Unhealthy => c.unhealthy += 1,
            PodKind::Terminating => c.terminating += 1,
            PodKind::Pending => c.pending += 1,
        }
    }
    c
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod properties;
