//! End to end: RunnerDeployments whose runner pods actually run — on simulated nodes
//! (nodesim), with the actions/runner simulation registering them on ghsim and taking jobs.
//!
//! Each test starts ghsim and the controllers for a fresh namespace ([`support::Harness`]) and two
//! simulated nodes of its own pool; the deployment's pod template selects that pool and
//! tolerates its taint, so pods never land on another test's nodes. What is asserted is what a
//! user would see: Runner phases, GitHub's runner list, and ghsim's job accounting — above all
//! that scale-down and rollouts interrupt no job. The 10-minute timers are crossed with
//! `h.clock.advance`, never by sleeping.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use ghsim::world::JobStatus;
use hangar_testkit::eventually::{Describe, eventually_of};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;
use support::e2e::{Deployment, E2e, WAIT};

#[tokio::test]
async fn scale_from_zero_to_three_and_back_registers_and_removes_every_runner() {
    let e = E2e::start("e2e-scale").await;
    let rd = Deployment::new("scale", 0, "scale");
    e.apply(&rd);
    e.apply(&rd.clone().replicas(3));

    let names = e.wait_running(3).await;
    let pods = e.pods().await;
    let pods_ok = pods.len() == 3
        && pods.iter().all(|p| {
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            running && p.annotations().contains_key("actions-runner/id")
        });
    if e.h.registered() != names || !pods_ok {
        panic!(
            "expected GitHub to know exactly {names:?}, each with a running, registered pod\n{}",
            e.describe().await
        );
    }

    // Registrations are told on the set, coalesced ("registered 2 runner(s) on GitHub: ..."),
    // not as one event per pod: an ephemeral pool registers a runner for every job.
    let set = e.replica_sets().await.remove(0).name_any();
    let registered = eventually_of(
        &e,
        "RunnerRegistered events on the set that count the three runners",
        WAIT,
        || async {
            let events = e.events("RunnerRegistered").await;
            let on_set: usize = events
                .iter()
                .filter(|(kind, name, _)| kind == "RunnerReplicaSet" && *name == set)
                .map(|(_, _, note)| runner_count(note))
                .sum();
            (on_set == 3).then_some(events)
        },
    )
    .await;
    assert!(
        registered
            .iter()
            .all(|(kind, ..)| kind == "RunnerReplicaSet"),
        "{registered:?}"
    );

    e.apply(&rd.clone().replicas(0));
    eventually_of(
        &e,
        "no runners, pods or GitHub registrations",
        WAIT,
        || async {
            let gone = e.runners().await.is_empty()
                && e.pods().await.is_empty()
                && e.h.registered().is_empty();
            gone.then_some(())
        },
    )
    .await;
    assert_eq!(e.h.interrupted(), 0);

    // So are the scale-down's retirements ("unregistering 2 runner(s) from GitHub before
    // deleting them (scale-down): ...") and unregistrations ("unregistered 3 runner(s) from
    // GitHub: ..."): a large scale-down wrote one or two events per runner.
    for (reason, told) in [
        (
            "UnregisteringRunner",
            " runner(s) from GitHub before deleting them (scale-down)",
        ),
        ("RunnerUnregistered", " runner(s) from GitHub"),
    ] {
        eventually_of(
            &e,
            &format!("{reason} events, all on the set, that count the three runners"),
            WAIT,
            || async {
                let events = e.events(reason).await;
                let counted: usize = events
                    .iter()
                    .filter(|(kind, name, note)| {
                        kind == "RunnerReplicaSet" && *name == set && note.contains(told)
                    })
                    .map(|(_, _, note)| runner_count(note))
                    .sum();
                let all_on_set = events.iter().all(|(kind, ..)| kind == "RunnerReplicaSet");
                (counted == 3 && all_on_set).then_some(())
            },
        )
        .await;
    }
    e.shutdown().await;
}

/// `--max-concurrent-reconciles 1`: the runners of a scale-up are reconciled one after the
/// other, and all of them still come up and go again.
#[tokio::test]
async fn one_reconcile_at_a_time_still_scales_up_and_down() {
    let exporter = std::sync::Arc::new(hangar::metrics::Exporter::default());
    let attach = exporter.clone();
    let e = E2e::start_configured("e2e-one-at-a-time", |s| {
        s.max_concurrent_reconciles = 1;
        s.exporter = Some(attach);
    })
    .await;
    let rd = Deployment::new("serial", 0, "serial");
    e.apply(&rd);
    e.apply(&rd.clone().replicas(4));
    let names = e.wait_running(4).await;
    assert_eq!(e.h.registered(), names, "{}", e.describe().await);
    e.apply(&rd.clone().replicas(0));
    eventually_of(&e, "no runners, pods or registrations", WAIT, || async {
        let gone = e.runners().await.is_empty()
            && e.pods().await.is_empty()
            && e.h.registered().is_empty();
        gone.then_some(())
    })
    .await;
    for controller in [
        "runner",
        "runner-pod",
        "runnerreplicaset",
        "runnerdeployment",
    ] {
        assert_eq!(
            exporter.metrics.reconciles_active_max(controller),
            1,
            "the most {controller} reconciles under way at once"
        );
    }
}

#[tokio::test]
async fn scale_down_while_jobs_run_interrupts_no_job() {
    let e = E2e::start("e2e-busy").await;
    let rd = Deployment::new("busy", 3, "busy");
    e.apply(&rd);
    let names = e.wait_running(3).await;

    let jobs = e.submit(3, "busy", Duration::from_secs(8), false);
    eventually_of(&e, "all three runners busy", WAIT, || async {
        (e.h.busy() == names).then_some(())
    })
    .await;
    e.apply(&rd.clone().replicas(0));

    e.wait_all_gone_without_killing_busy_runners("scale-down to finish")
        .await;
    assert!(e.all_succeeded(&jobs), "{:?}", e.jobs(&jobs));
    assert_eq!(e.h.interrupted(), 0, "scale-down interrupted a job");
    e.shutdown().await;
}

/// A static runner stays registered between jobs, so a scale-down while it runs one meets
/// GitHub's 422 ("still running a job") on removal: the removal is retried until the job is
/// done, and only then is the pod deleted.
#[tokio::test]
async fn a_busy_static_runners_removal_is_retried_until_its_job_finishes() {
    let e = E2e::start("e2e-static").await;
    let mut rd = Deployment::new("static", 1, "static");
    rd.static_runners = true;
    e.apply(&rd);
    let names = e.wait_running(1).await;
    let jobs = e.submit(1, "static", Duration::from_secs(6), false);
    eventually_of(&e, "the runner busy", WAIT, || async {
        (e.h.busy() == names).then_some(())
    })
    .await;
    e.apply(&rd.clone().replicas(0));
    e.wait_all_gone_without_killing_busy_runners("the static runner's removal")
        .await;
    assert!(e.all_succeeded(&jobs), "{:?}", e.jobs(&jobs));
    assert_eq!(e.h.interrupted(), 0, "the scale-down interrupted the job");
    let refused: u64 = ghsim::accounting::snapshot(&e.h.sim)
        .api_calls
        .iter()
        .filter(|c| c.endpoint == "DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}")
        .map(|c| c.errors)
        .sum();
    assert!(
        refused >= 1,
        "the removal met no 422 while the job ran: the test did not exercise the retry"
    );
    assert!(e.h.registered().is_empty());
    e.shutdown().await;
}

/// A finished runner's Runner and pod each lose their finalizer in one write. The stores show
/// a removal only when its watch event arrives, and a reconcile run on the older copy sent it
/// again: answered 404 (the object was gone) or 422 (its finalizers had changed), about 0.7
/// wasted writes per job under load.
#[tokio::test]
async fn a_finished_runners_finalizers_are_removed_once() {
    let (e, requests) = E2e::start_counted("e2e-release-once").await;
    let rd = Deployment::new("once", 4, "once");
    e.apply(&rd);
    e.wait_running(4).await;
    let jobs = e.submit(12, "once", Duration::from_secs(1), false);
    eventually_of(&e, "all twelve jobs done", WAIT, || async {
        e.all_succeeded(&jobs).then_some(())
    })
    .await;
    e.apply(&rd.clone().replicas(0));
    e.wait_all_gone_without_killing_busy_runners("the scale-down")
        .await;
    assert_eq!(e.h.interrupted(), 0);
    let released = requests.kube_requests("PATCH", "200", "runners");
    assert!(
        released >= 16,
        "the finished and retired Runners' finalizers went in {released} writes: the test did \
         not exercise their release"
    );
    for (code, resource) in [("404", "runners"), ("404", "pods"), ("422", "pods")] {
        assert_eq!(
            requests.kube_requests("PATCH", code, resource),
            0,
            "PATCH {resource} answered {code}: a finalizer removal sent again"
        );
    }
    e.shutdown().await;
}

#[tokio::test]
async fn a_completed_ephemeral_runner_is_replaced() {
    let e = E2e::start("e2e-replace").await;
    // Without a docker sidecar the pod is terminal (Succeeded) once its runner exits.
    let mut rd = Deployment::new("replace", 1, "replace");
    rd.without_docker = true;
    e.apply(&rd);
    let first = e.wait_running(1).await;
    // How the finished runner's pod is deleted: a terminated pod goes without a grace period
    // (nothing left to stop), so the kubelet's confirming delete costs the apiserver no write.
    // (A pod whose docker sidecar still runs keeps its grace period, for the sidecar.)
    let deletions = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let watch = {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let pods: kube::Api<Pod> = kube::Api::namespaced(e.h.client.clone(), e.h.ns.name());
        let deletions = deletions.clone();
        tokio::spawn(async move {
            let mut pods = watcher(pods, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(Ok(pod)) = pods.next().await {
                if pod.metadata.deletion_timestamp.is_some() {
                    let grace = pod.metadata.deletion_grace_period_seconds;
                    let mut seen = deletions.lock().expect("deletions");
                    seen.entry(pod.name_any()).or_insert(grace);
                }
            }
        })
    };

    let jobs = e.submit(1, "replace", Duration::from_secs(1), false);
    let second = eventually_of(&e, "a new runner after the job", WAIT, || async {
        let running = e.running().await;
        let replaced = running.len() == 1
            && running.is_disjoint(&first)
            && e.h.online().is_superset(&running)
            && e.runners().await.len() == 1;
        replaced.then_some(running)
    })
    .await;
    assert!(e.all_succeeded(&jobs));
    assert_eq!(e.h.registered(), second, "the finished runner left GitHub");
    assert_eq!(e.h.interrupted(), 0);
    watch.abort();
    let finished = first.iter().next().expect("one runner");
    assert_eq!(
        deletions.lock().expect("deletions").get(finished),
        Some(&Some(0)),
        "the finished pod {finished} was deleted without a grace period"
    );
    e.shutdown().await;
}

/// A release grace no test outlives: a finished runner's place is released only by what the
/// test does (newer demand, or the clock moved past it), never by waiting.
const LONG_GRACE: Duration = Duration::from_secs(5 * 60);

/// Controllers whose release grace is [`LONG_GRACE`].
async fn with_long_grace(prefix: &str) -> E2e {
    E2e::start_configured(prefix, |s| s.release_grace = LONG_GRACE).await
}

/// A deployment of 2 whose demand was last raised a minute ago: every runner is synced after
/// its `effectiveTime`.
fn guarded(name: &str) -> Deployment {
    let mut rd = Deployment::new(name, 2, name);
    rd.effective_time = Some(SystemTime::now() - Duration::from_secs(60));
    rd
}

/// Two ephemeral runners of `rd`; one finishes a job and keeps its place: its Runner stays,
/// finished, and no runner is created beside it (checked for 4 s). Returns the finished
/// Runner's name.
async fn one_runner_finished_and_held(e: &E2e, rd: &Deployment) -> String {
    e.apply(rd);
    let first = e.wait_running(2).await;
    let jobs = e.submit(1, &rd.labels[0], Duration::from_millis(500), false);
    eventually_of(e, "one job done", WAIT, || async {
        e.all_succeeded(&jobs).then_some(())
    })
    .await;
    let ran =
        e.h.runners_of(&jobs)
            .pop_first()
            .expect("the job names its runner");
    for _ in 0..8 {
        let names: BTreeSet<String> = e.runners().await.iter().map(|r| r.name_any()).collect();
        assert_eq!(
            names, first,
            "a runner was created beside the finished {ran}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    ran
}

#[tokio::test]
async fn a_finished_runners_place_is_held_until_newer_demand_arrives() {
    let e = with_long_grace("e2e-effective").await;
    let mut rd = guarded("demand");
    let finished = one_runner_finished_and_held(&e, &rd).await;

    // Demand raised after the runner finished is not the demand it served: its place goes.
    rd.effective_time = Some(SystemTime::now());
    e.apply(&rd);
    let after = e.wait_running(2).await;
    assert!(
        !after.contains(&finished),
        "{after:?} still holds {finished}"
    );
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

#[tokio::test]
async fn a_finished_runners_place_is_held_no_longer_than_the_release_grace() {
    let e = with_long_grace("e2e-grace").await;
    let rd = guarded("grace");
    let finished = one_runner_finished_and_held(&e, &rd).await;

    // No release came (nothing scales this deployment): after the grace it is replaced. (The
    // new runner's pod looks unregistered for a while on the moved clock; its creation is what
    // this test is about.)
    e.h.clock.advance(LONG_GRACE + Duration::from_secs(1));
    eventually_of(&e, "the finished runner replaced", WAIT, || async {
        let runners: BTreeSet<String> = e.runners().await.iter().map(|r| r.name_any()).collect();
        (runners.len() == 2 && !runners.contains(&finished)).then_some(())
    })
    .await;
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

#[tokio::test]
async fn growth_is_created_at_once_however_old_effective_time_is() {
    // Every runner is newer than the deployment's effectiveTime, as after a webhook scale-up.
    // ARC then creates nothing for ten minutes, growth included.
    let e = with_long_grace("e2e-growth").await;
    let rd = guarded("growth");
    e.apply(&rd);
    let first = e.wait_running(2).await;
    e.apply(&rd.clone().replicas(5));
    let grown = e.wait_running(5).await;
    assert!(
        grown.is_superset(&first),
        "{grown:?} lost some of {first:?}"
    );
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

#[tokio::test]
async fn a_template_change_rolls_out_without_interrupting_jobs() {
    let e = E2e::start("e2e-rollout").await;
    let rd = Deployment::new("roll", 2, "roll");
    e.apply(&rd);
    let old = e.wait_running(2).await;
    let old_sets: Vec<String> = e
        .replica_sets()
        .await
        .iter()
        .map(|s| s.name_any())
        .collect();
    assert_eq!(old_sets.len(), 1);

    let jobs = e.submit(2, "roll", Duration::from_secs(8), false);
    eventually_of(&e, "both runners busy", WAIT, || async {
        (e.h.busy() == old).then_some(())
    })
    .await;
    let mut changed = rd.clone();
    changed.labels.push("roll-v2".into());
    changed.env.push(("ROLLOUT".into(), "v2".into()));
    e.apply(&changed);

    let new = eventually_of(&e, "the rollout to finish", WAIT, || async {
        e.assert_no_busy_runner_pod_deleting().await;
        let sets = e.replica_sets().await;
        let done = sets.len() == 1 && !old_sets.contains(&sets[0].name_any());
        let running = e.running().await;
        let runners = e.runners().await.len();
        (done && runners == 2 && running.len() == 2 && running.is_disjoint(&old)).then_some(running)
    })
    .await;
    assert!(e.all_succeeded(&jobs), "{:?}", e.jobs(&jobs));
    assert_eq!(e.h.interrupted(), 0, "the rollout interrupted a job");
    let labels = e.h.sim.read(|w, _| {
        w.runners
            .values()
            .filter(|r| new.contains(&r.name))
            .all(|r| r.label_names().contains(&"roll-v2".to_owned()))
    });
    assert!(labels, "the new runners carry the new labels");
    e.shutdown().await;
}

#[tokio::test]
async fn a_runner_that_never_registers_is_replaced_after_the_registration_timeout() {
    let e = E2e::start("e2e-regtimeout").await;
    let mut rd = Deployment::new("stuck", 1, "stuck").annotation(
        "program.nodesim.hangar.dev/runner",
        "runner(registration=never)",
    );
    // The stuck runner ignores SIGTERM until it registers (as graceful-stop.sh does): keep the
    // kill short.
    rd.termination_grace_seconds = Some(2);
    e.apply(&rd);

    let first = eventually_of(&e, "a ready, unregistered runner pod", WAIT, || async {
        let pods = e.pods().await;
        let pod = pods.first()?;
        let ready = pod
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then(|| pod.name_any())
    })
    .await;
    // The Runner reports its running pod as Pending until GitHub knows the runner.
    eventually_of(
        &e,
        "the runner to report RegistrationPending",
        WAIT,
        || async {
            let runners = e.runners().await;
            let status = runners.first()?.status.clone()?;
            let pending = runners[0].name_any() == first
                && status.phase.as_deref() == Some("Pending")
                && status.reason.as_deref() == Some("RegistrationPending");
            pending.then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        e.runners()
            .await
            .iter()
            .map(|r| r.name_any())
            .collect::<Vec<_>>(),
        vec![first.clone()],
        "replaced before the registration timeout"
    );
    assert!(e.h.registered().is_empty());

    e.h.clock.advance(Duration::from_secs(11 * 60));
    eventually_of(&e, "the stuck runner replaced", WAIT, || async {
        let names: Vec<String> = e.runners().await.iter().map(|r| r.name_any()).collect();
        (!names.is_empty() && !names.contains(&first)).then_some(())
    })
    .await;
    e.shutdown().await;
}

#[tokio::test]
async fn jit_runners_take_and_finish_jobs() {
    let e = E2e::start("e2e-jit").await;
    e.apply(&Deployment::new("jit", 2, "jit").annotation("hangar.dev/registration", "jit"));
    let first = e.wait_running(2).await;
    for pod in e.pods().await {
        let runner = &pod.spec.unwrap().containers[0];
        let env: Vec<&str> = runner
            .env
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert!(env.contains(&"ACTIONS_RUNNER_INPUT_JITCONFIG"));
        assert!(!env.contains(&"RUNNER_TOKEN"));
    }
    let jit = e.h.sim.read(|w, _| w.runners.values().all(|r| r.jit));
    assert!(jit, "every runner registered by JIT configuration");

    // JIT runners carry exactly the labels requested (no self-hosted/OS/arch defaults).
    let jobs = e.submit(2, "jit", Duration::from_secs(1), true);
    let second = eventually_of(
        &e,
        "both runners replaced after their jobs",
        WAIT,
        || async {
            let running = e.running().await;
            let done = e.all_succeeded(&jobs)
                && running.len() == 2
                && running.is_disjoint(&first)
                && e.runners().await.len() == 2;
            done.then_some(running)
        },
    )
    .await;
    if e.h.registered() != second {
        let calls: Vec<String> = ghsim::accounting::snapshot(&e.h.sim)
            .api_calls
            .iter()
            .map(|c| format!("{} {}", c.endpoint, c.calls))
            .collect();
        panic!(
            "expected GitHub to know exactly {second:?}; calls {calls:?}\n{}",
            e.describe().await
        );
    }
    assert_eq!(e.h.interrupted(), 0);
    let jit = e.h.sim.read(|w, _| w.runners.values().all(|r| r.jit));
    assert!(jit);
    e.shutdown().await;
}

#[tokio::test]
async fn jit_runners_released_before_their_pods_start_leave_no_registration() {
    let e = E2e::start("e2e-jitpending").await;
    // The pods never get past ContainerCreating, but JIT has registered their runners already.
    let rd = Deployment::new("jitpend", 2, "jitpend")
        .annotation("hangar.dev/registration", "jit")
        .annotation("program.nodesim.hangar.dev/runner", "stuck");
    e.apply(&rd);
    eventually_of(&e, "two pending pods with JIT runners", WAIT, || async {
        let pods = e.pods().await;
        let pending = pods.len() == 2
            && pods.iter().all(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
            });
        (pending && e.h.registered().len() == 2).then_some(())
    })
    .await;

    e.apply(&rd.clone().replicas(0));
    eventually_of(
        &e,
        "no runners, pods or GitHub registrations",
        WAIT,
        || async {
            let gone = e.runners().await.is_empty()
                && e.pods().await.is_empty()
                && e.h.registered().is_empty();
            gone.then_some(())
        },
    )
    .await;
    e.shutdown().await;
}

// ---- GitHub faults and per-resource credentials ------------------------------------------

/// ghsim's label of the controllers' PAT ([`support::TOKEN`]) in its accounting.
const CONTROLLER_CREDENTIAL: &str = "pat:test";

impl E2e {
    /// Error answers ghsim gave to the controllers' credential.
    fn controller_errors(&self) -> u64 {
        ghsim::accounting::snapshot(&self.h.sim)
            .api_calls
            .iter()
            .filter(|c| c.credential == CONTROLLER_CREDENTIAL)
            .map(|c| c.errors)
            .sum()
    }

    /// Calls by `credential` to endpoints whose `METHOD /template` satisfies `endpoint`.
    fn calls(&self, credential: &str, endpoint: impl Fn(&str) -> bool) -> u64 {
        ghsim::accounting::snapshot(&self.h.sim)
            .api_calls
            .iter()
            .filter(|c| c.credential == credential && endpoint(&c.endpoint))
            .map(|c| c.calls)
            .sum()
    }

    fn set_faults(&self, patch: serde_json::Value) {
        let faults = self.h.sim.faults().merged(patch).unwrap();
        self.h.sim.set_faults(faults);
    }

    /// Creates (or replaces) Secret `name` holding `github_token`.
    async fn put_token_secret(&self, name: &str, token: &str) {
        use k8s_openapi::api::core::v1::Secret;
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "github_token".to_owned(),
                k8s_openapi::ByteString(token.as_bytes().to_vec()),
            )])),
            ..Default::default()
        };
        self.h
            .api::<Secret>()
            .patch(
                name,
                &kube::api::PatchParams::apply("hangar-e2e").force(),
                &kube::api::Patch::Apply(&secret),
            )
            .await
            .unwrap();
    }

    /// The condition `kind` of the only Runner, as (status, reason, message).
    async fn runner_condition(&self, kind: &str) -> Option<(String, String, String)> {
        let runners = self.runners().await;
        let [runner] = runners.as_slice() else {
            return None;
        };
        let c = runner
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == kind)?
            .clone();
        Some((c.status, c.reason, c.message))
    }

    /// The condition `kind` of RunnerDeployment `name`, as (status, reason, message).
    async fn deployment_condition(
        &self,
        name: &str,
        kind: &str,
    ) -> Option<(String, String, String)> {
        let rd = self
            .h
            .api::<hangar_api::RunnerDeployment>()
            .get(name)
            .await
            .ok()?;
        let c = rd
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == kind)?;
        Some((c.status, c.reason, c.message))
    }

    /// The events with `reason`.
    async fn events_with(&self, reason: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
        self.h
            .api::<k8s_openapi::api::events::v1::Event>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }

    /// (kind, name, note) of the events with `reason`.
    async fn events(&self, reason: &str) -> Vec<(String, String, String)> {
        self.events_with(reason)
            .await
            .into_iter()
            .map(|e| {
                let regarding = e.regarding.unwrap_or_default();
                (
                    regarding.kind.unwrap_or_default(),
                    regarding.name.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Notes of Warning events with `reason` about object `name`.
    async fn warnings(&self, name: &str, reason: &str) -> Vec<String> {
        self.events_with(reason)
            .await
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.type_.as_deref() == Some("Warning")
            })
            .filter_map(|e| e.note)
            .collect()
    }
}

#[tokio::test]
async fn scaling_through_github_errors_and_rate_limits_converges_without_interrupting_jobs() {
    let e = E2e::start("e2e-faults").await;
    let rd = Deployment::new("faulty", 0, "faulty");
    e.apply(&rd);

    // Scale up while a third of GitHub's answers are 502s and a fifth secondary rate limits,
    // and registration tokens cannot be had at all: the scale-up needs few calls (one token
    // serves the scope), so only a down endpoint makes sure the controllers meet errors.
    let faults = json!({
        "server_error_rate": 0.35,
        "secondary_limit_rate": 0.2,
        "secondary_retry_after_secs": 1,
    });
    let mut scale_up_faults = faults.clone();
    scale_up_faults["failing_endpoints"] = json!(["/registration-token"]);
    e.set_faults(scale_up_faults);
    e.apply(&rd.clone().replicas(3));
    eventually_of(
        &e,
        "the controllers to meet GitHub errors",
        WAIT,
        || async { (e.controller_errors() >= 5).then_some(()) },
    )
    .await;
    e.set_faults(
        json!({"server_error_rate": 0.0, "secondary_limit_rate": 0.0, "failing_endpoints": []}),
    );
    let names = e.wait_running(3).await;

    // Scale down with two runners busy, through the same faults: the idle runner is
    // unregistered (GitHub's errors only delay it), the busy ones wait for their jobs.
    let jobs = e.submit(2, "faulty", Duration::from_secs(6), false);
    let busy = eventually_of(&e, "two runners busy", WAIT, || async {
        let busy = e.h.busy();
        (busy.len() == 2 && busy.is_subset(&names)).then_some(busy)
    })
    .await;
    let idle: Vec<&String> = names.difference(&busy).collect();
    e.set_faults(faults);
    e.apply(&rd.clone().replicas(0));
    eventually_of(
        &e,
        "the idle runner unregistered through the faults",
        WAIT,
        || async {
            e.assert_no_busy_runner_pod_deleting().await;
            let registered = e.h.registered();
            idle.iter().all(|n| !registered.contains(*n)).then_some(())
        },
    )
    .await;
    e.set_faults(json!({"server_error_rate": 0.0, "secondary_limit_rate": 0.0}));
    eventually_of(
        &e,
        "no runners, pods or GitHub registrations",
        WAIT * 2,
        || async {
            e.assert_no_busy_runner_pod_deleting().await;
            let gone = e.runners().await.is_empty()
                && e.pods().await.is_empty()
                && e.h.registered().is_empty();
            gone.then_some(())
        },
    )
    .await;
    assert!(e.all_succeeded(&jobs), "{:?}", e.jobs(&jobs));
    assert_eq!(
        e.h.interrupted(),
        0,
        "a fault made scale-down interrupt a job"
    );
    e.shutdown().await;
}

#[tokio::test]
async fn a_missing_or_rejected_credentials_secret_is_reported_and_fixing_it_recovers() {
    let e = E2e::start("e2e-creds").await;
    e.h.sim
        .update(|w, _| w.add_pat("ghp_octo_team", "octo-team"));
    let mut rd = Deployment::new("creds", 1, "creds");
    rd.credentials_secret = Some("octo-creds".into());
    e.apply(&rd);

    // No Secret: the Runner says so, as a condition and a Warning event, and creates no pod.
    let (_, _, message) = eventually_of(
        &e,
        "CredentialsValid=False SecretNotFound",
        WAIT,
        || async {
            e.runner_condition("CredentialsValid")
                .await
                .filter(|(status, reason, _)| status == "False" && reason == "SecretNotFound")
        },
    )
    .await;
    assert!(message.contains("octo-creds"), "{message}");
    let runner = e.runners().await[0].name_any();
    eventually_of(&e, "a Warning event naming the secret", WAIT, || async {
        let notes = e.warnings(&runner, "GitHubCredentialsError").await;
        notes.iter().any(|n| n.contains("octo-creds")).then_some(())
    })
    .await;
    eventually_of(
        &e,
        "the deployment to name the failing runner",
        WAIT,
        || async {
            e.deployment_condition("creds", "Available")
                .await
                .filter(|(s, r, m)| {
                    s == "False" && r == "RunnersFailing" && m.contains("octo-creds")
                })
        },
    )
    .await;
    assert!(e.pods().await.is_empty(), "a pod without credentials");

    // A Secret GitHub rejects (401) is reported as such.
    e.put_token_secret("octo-creds", "ghp_revoked").await;
    eventually_of(&e, "CredentialsValid=False Unauthorized", WAIT, || async {
        e.runner_condition("CredentialsValid")
            .await
            .filter(|(status, reason, _)| status == "False" && reason == "Unauthorized")
    })
    .await;

    // Fixing the Secret is enough: the runner registers (the Secret's change triggers it).
    e.put_token_secret("octo-creds", "ghp_octo_team").await;
    e.wait_running(1).await;
    for kind in ["CredentialsValid", "Registered", "Ready"] {
        let (status, _, message) = e.runner_condition(kind).await.unwrap();
        assert_eq!(status, "True", "{kind}: {message}");
    }
    eventually_of(&e, "the deployment Available", WAIT, || async {
        e.deployment_condition("creds", "Available")
            .await
            .filter(|(s, _, _)| s == "True")
    })
    .await;
    e.shutdown().await;
}

#[tokio::test]
async fn a_per_resource_credential_registers_and_unregisters_its_runners() {
    let e = E2e::start("e2e-percred").await;
    e.h.sim
        .update(|w, _| w.add_pat("ghp_octo_team", "octo-team"));
    e.put_token_secret("octo-team-creds", "ghp_octo_team").await;
    let mut rd = Deployment::new("percred", 2, "percred");
    rd.credentials_secret = Some("octo-team-creds".into());
    e.apply(&rd);
    e.wait_running(2).await;
    for pod in e.pods().await {
        assert_eq!(
            pod.annotations()
                .get("actions-runner/github-api-creds-secret")
                .map(String::as_str),
            Some("octo-team-creds")
        );
    }
    let jobs = e.submit(1, "percred", Duration::from_secs(1), false);
    eventually_of(&e, "the job done", WAIT, || async {
        e.all_succeeded(&jobs).then_some(())
    })
    .await;
    e.apply(&rd.clone().replicas(0));
    eventually_of(
        &e,
        "no runners, pods or GitHub registrations",
        WAIT,
        || async {
            let gone = e.runners().await.is_empty()
                && e.pods().await.is_empty()
                && e.h.registered().is_empty();
            gone.then_some(())
        },
    )
    .await;

    let token = |ep: &str| ep.starts_with("POST") && ep.ends_with("/registration-token");
    let list = |ep: &str| ep.starts_with("GET") && ep.ends_with("/actions/runners");
    let delete = |ep: &str| ep.starts_with("DELETE") && ep.contains("/actions/runners/");
    let team = "pat:octo-team";
    assert!(
        e.calls(team, token) >= 1,
        "registration tokens with the Secret's PAT"
    );
    assert!(
        e.calls(team, list) >= 1,
        "runner lookups with the Secret's PAT"
    );
    assert!(
        e.calls(team, delete) >= 1,
        "unregistration with the Secret's PAT"
    );
    for (what, endpoint) in [
        ("token", &token as &dyn Fn(&str) -> bool),
        ("list", &list),
        ("delete", &delete),
    ] {
        assert_eq!(
            e.calls(CONTROLLER_CREDENTIAL, endpoint),
            0,
            "{what} calls with the controller's PAT"
        );
    }
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

/// `--registration-only-runners`: on a GitHub that fails jobs no runner could take (ghsim's
/// `fail_jobs_without_runners`), a deployment at zero keeps an offline placeholder runner, so a
/// job queued before it scales up waits instead of failing; the placeholder goes once a real
/// runner is registered, comes back at zero, and leaves with the deployment.
#[tokio::test]
async fn a_deployment_at_zero_keeps_a_registration_only_runner_so_jobs_queue_on_legacy_github() {
    let e = E2e::start_configured("e2e-placeholder", |s| s.registration_only_runners = true).await;
    e.h.sim
        .update(|w, _| w.config.fail_jobs_without_runners = true);
    let labels = || vec!["self-hosted".to_owned(), "placeholder".to_owned()];
    let placeholder = "placeholder-registration-only";
    let deployments = e.h.api::<hangar_api::RunnerDeployment>();
    let remembered = || async {
        deployments
            .get_opt("placeholder")
            .await
            .unwrap()
            .and_then(|rd| {
                rd.annotations()
                    .get("hangar.dev/registration-only-runner-id")
                    .cloned()
            })
    };

    // The simulator really is that strict: with no runner at all, a job fails at once.
    let lost =
        e.h.submit_jobs(1, labels(), Duration::from_secs(1), "success");
    e.h.sim.tick();
    assert!(
        e.h.all_completed(&lost, "failure"),
        "a job without runners must fail"
    );

    let rd = Deployment::new("placeholder", 0, "placeholder");
    e.apply(&rd);
    eventually_of(&e, "a registered placeholder, remembered", WAIT, || async {
        let registered = e.h.registered();
        (registered == BTreeSet::from([placeholder.to_owned()])
            && e.h.online().is_empty()
            && remembered().await.is_some())
        .then_some(())
    })
    .await;
    let kept =
        e.h.submit_jobs(1, labels(), Duration::from_secs(1), "success");
    e.h.sim.tick();
    let queued =
        e.h.sim
            .read(|w, _| w.jobs[&kept[0]].status == JobStatus::Queued);
    assert!(queued, "the job must wait for a runner, not fail");

    e.apply(&rd.clone().replicas(1));
    eventually_of(
        &e,
        "the job done and the placeholder gone",
        WAIT,
        || async {
            let done = e.h.all_completed(&kept, "success");
            let gone = !e.h.registered().contains(placeholder) && remembered().await.is_none();
            (done && gone).then_some(())
        },
    )
    .await;

    e.apply(&rd.clone().replicas(0));
    eventually_of(&e, "a placeholder again at zero", WAIT, || async {
        (e.h.registered() == BTreeSet::from([placeholder.to_owned()])
            && remembered().await.is_some())
        .then_some(())
    })
    .await;

    deployments
        .delete("placeholder", &Default::default())
        .await
        .unwrap();
    eventually_of(
        &e,
        "the deployment and its placeholder gone",
        WAIT,
        || async {
            let gone = deployments.get_opt("placeholder").await.unwrap().is_none();
            (gone && e.h.registered().is_empty()).then_some(())
        },
    )
    .await;
    e.shutdown().await;
}

/// The registration-only runner of a RunnerSet and of a RunnerReplicaSet no deployment owns, as
/// for deployments: registered at zero so jobs queue, gone once a real runner is registered,
/// and gone with its owner.
#[tokio::test]
async fn a_runner_set_and_a_standalone_replica_set_at_zero_keep_a_registration_only_runner() {
    let e = E2e::start_configured("e2e-placeholders", |s| s.registration_only_runners = true).await;
    e.h.sim
        .update(|w, _| w.config.fail_jobs_without_runners = true);
    let replica_set = |replicas: i32| {
        let placement = e.nodes.placement();
        json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "RunnerReplicaSet",
            "metadata": {"name": "rrsph"},
            "spec": {"replicas": replicas, "template": {"spec": {
                "repository": "octo/app",
                "labels": ["rrsph"],
                "nodeSelector": placement.node_selector,
                "tolerations": placement.tolerations,
            }}},
        })
        .to_string()
    };
    let runner_set = |replicas: i32| {
        support::runner_set_manifest(Some(&e.nodes), "setph", replicas, "setph", &[])
    };
    e.h.apply(&runner_set(0));
    e.h.apply(&replica_set(0));
    let both = BTreeSet::from([
        "rrsph-registration-only".to_owned(),
        "setph-registration-only".to_owned(),
    ]);
    eventually_of(&e, "two registered placeholders", WAIT, || async {
        (e.h.registered() == both && e.h.online().is_empty()).then_some(())
    })
    .await;
    let labels = |l: &str| vec!["self-hosted".to_owned(), l.to_owned()];
    let set_job =
        e.h.submit_jobs(1, labels("setph"), Duration::from_secs(1), "success");
    let rrs_job =
        e.h.submit_jobs(1, labels("rrsph"), Duration::from_secs(1), "success");
    e.h.sim.tick();
    let queued = e.h.sim.read(|w, _| {
        [set_job[0], rrs_job[0]]
            .iter()
            .all(|j| w.jobs[j].status == JobStatus::Queued)
    });
    assert!(queued, "both jobs must wait for a runner, not fail");

    e.h.apply(&runner_set(1));
    e.h.apply(&replica_set(1));
    eventually_of(
        &e,
        "both jobs done and both placeholders gone",
        WAIT,
        || async {
            let done =
                e.h.all_completed(&set_job, "success") && e.h.all_completed(&rrs_job, "success");
            let gone =
                e.h.registered()
                    .iter()
                    .all(|r| !r.ends_with("-registration-only"));
            (done && gone).then_some(())
        },
    )
    .await;

    e.h.apply(&runner_set(0));
    e.h.apply(&replica_set(0));
    eventually_of(&e, "placeholders again at zero", WAIT, || async {
        e.h.registered().is_superset(&both).then_some(())
    })
    .await;
    e.h.api::<hangar_api::RunnerSet>()
        .delete("setph", &Default::default())
        .await
        .unwrap();
    e.h.api::<hangar_api::RunnerReplicaSet>()
        .delete("rrsph", &Default::default())
        .await
        .unwrap();
    eventually_of(
        &e,
        "the owners and their placeholders gone",
        WAIT,
        || async {
            let sets =
                e.h.api::<hangar_api::RunnerSet>()
                    .get_opt("setph")
                    .await
                    .unwrap();
            let rrs =
                e.h.api::<hangar_api::RunnerReplicaSet>()
                    .get_opt("rrsph")
                    .await
                    .unwrap();
            (sets.is_none() && rrs.is_none() && e.h.registered().is_empty()).then_some(())
        },
    )
    .await;
    e.shutdown().await;
}

/// Owners that hold the registration-only runner's finalizer but do not know their runner's
/// ID are deleted: one never recorded it (it changed under the controller's conditional
/// write, or the controller stopped between registering and recording), the other recorded a
/// runner that a later registration replaced (a reconcile that read a copy from before the
/// record). Each placeholder is found on GitHub by name and removed before its owner goes.
#[tokio::test]
async fn a_placeholder_whose_id_was_never_recorded_is_removed_with_its_owner() {
    let e = E2e::start_configured("e2e-lost-placeholder", |s| {
        s.registration_only_runners = true;
    })
    .await;
    let placement = e.nodes.placement();
    // (owner, the ID its annotation records, if any)
    let owners = [("lost", None), ("replaced", Some("999999"))];
    for (owner, recorded) in owners {
        let request = hangar_github::JitConfigRequest {
            name: format!("{owner}-registration-only"),
            runner_group_id: 1,
            labels: hangar_core::autoscaler::labels::jit_runner_labels(&[owner.to_owned()], None),
            work_folder: None,
        };
        e.h.github
            .generate_jit_config(&hangar_github::Scope::repo("octo", "app"), &request)
            .await
            .unwrap();
        let annotations = recorded.map_or_else(
            || json!({}),
            |id| json!({ hangar::controllers::placeholder::ID_ANNOTATION: id }),
        );
        e.h.apply(
            &json!({
                "apiVersion": "actions.summerwind.dev/v1alpha1",
                "kind": "RunnerReplicaSet",
                "metadata": {
                    "name": owner,
                    "annotations": annotations,
                    "finalizers": [hangar::controllers::placeholder::FINALIZER],
                },
                "spec": {"replicas": 1, "template": {"spec": {
                    "repository": "octo/app",
                    "labels": [owner],
                    "nodeSelector": placement.node_selector,
                    "tolerations": placement.tolerations,
                }}},
            })
            .to_string(),
        );
        e.h.api::<hangar_api::RunnerReplicaSet>()
            .delete(owner, &Default::default())
            .await
            .unwrap();
    }
    eventually_of(
        &e,
        "the owners gone, and their placeholders with them",
        WAIT,
        || async {
            let mut left = 0;
            for (owner, _) in owners {
                let rrs =
                    e.h.api::<hangar_api::RunnerReplicaSet>()
                        .get_opt(owner)
                        .await
                        .unwrap();
                left += usize::from(rrs.is_some());
            }
            (left == 0 && e.h.registered().is_empty()).then_some(())
        },
    )
    .await;
    e.shutdown().await;
}

/// Two controllers, each watching its own namespace (`hangar run --watch-namespace`), on one
/// GitHub repository with one credential: each job runs on a runner of the deployment whose
/// labels it asked for, each controller's leaked-registration sweep removes its own leak and
/// leaves the other's idle runners alone (their deployments have different names, as the
/// README asks of installations that share a scope), and scaling one to zero retires only its
/// runners.
#[tokio::test]
async fn two_controllers_each_watching_a_namespace_share_a_repository_without_touching_each_other()
{
    let fast_sweep = |s: &mut hangar::context::Settings| {
        s.leaked_registration_sweep = Duration::from_secs(1);
    };
    let a = E2e::start_configured("multi-a", fast_sweep).await;
    let b = a.beside("multi-b", fast_sweep).await;
    a.apply(&Deployment::new("team-a", 2, "team-a"));
    b.apply(&Deployment::new("team-b", 2, "team-b"));
    a.wait_running(2).await;
    b.wait_running(2).await;

    let jobs_a = a.submit(2, "team-a", Duration::from_secs(1), false);
    let jobs_b = b.submit(2, "team-b", Duration::from_secs(1), false);
    eventually_of(&a, "every job of both teams done", WAIT, || async {
        (a.all_succeeded(&jobs_a) && a.all_succeeded(&jobs_b)).then_some(())
    })
    .await;
    let ran_on: Vec<(u64, String)> = a.h.sim.read(|w, _| {
        jobs_a
            .iter()
            .chain(&jobs_b)
            .map(|id| (*id, w.jobs[id].runner_name.clone().unwrap_or_default()))
            .collect()
    });
    for (id, runner) in &ran_on {
        let team = if jobs_a.contains(id) {
            "team-a-"
        } else {
            "team-b-"
        };
        assert!(runner.starts_with(team), "job {id} ran on {runner}");
    }
    let runners_a = a.wait_running(2).await;
    let runners_b = b.wait_running(2).await;

    // A leak of team-a's naming, which only controller A knows: its sweep must take it, and
    // neither sweep may take the four idle runners, however long they look at them.
    let set_a = a.replica_sets().await[0].name_any();
    let leak = format!("{set_a}-lzk2d"); // the apiserver's generateName alphabet
    let request = hangar_github::JitConfigRequest {
        name: leak.clone(),
        runner_group_id: 1,
        labels: hangar_core::autoscaler::labels::jit_runner_labels(&["team-a".to_owned()], None),
        work_folder: None,
    };
    a.h.github
        .generate_jit_config(&hangar_github::Scope::repo("octo", "app"), &request)
        .await
        .unwrap();
    eventually_of(
        &a,
        "controller A's sweep to remove its leak",
        WAIT,
        || async {
            tokio::time::sleep(Duration::from_millis(800)).await;
            a.h.clock.advance(Duration::from_secs(10 * 60));
            b.h.clock.advance(Duration::from_secs(10 * 60));
            (!a.h.registered().contains(&leak)).then_some(())
        },
    )
    .await;
    let idle: BTreeSet<String> = runners_a.union(&runners_b).cloned().collect();
    assert_eq!(a.h.online(), idle, "{}", a.h.describe_github_runners());

    a.apply(&Deployment::new("team-a", 0, "team-a"));
    eventually_of(&a, "team-a's runners gone", WAIT, || async {
        let gone = a.runners().await.is_empty()
            && a.pods().await.is_empty()
            && a.h.registered().is_disjoint(&runners_a);
        gone.then_some(())
    })
    .await;
    assert_eq!(
        b.wait_running(2).await,
        runners_b,
        "team-b's runners stay as they were"
    );
    assert_eq!(
        a.h.registered(),
        runners_b,
        "{}",
        a.h.describe_github_runners()
    );
    b.shutdown().await;
    a.shutdown().await;
}

/// When each object's status changed, as the test's own watch of kind `K` saw it, by name.
type Changes = std::sync::Arc<std::sync::Mutex<BTreeMap<String, Vec<std::time::Instant>>>>;

fn record_status_changes<K>(api: kube::Api<K>) -> (Changes, tokio::task::JoinHandle<()>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize,
    K: std::fmt::Debug + Send + 'static,
{
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    let changes = Changes::default();
    let recorder = {
        let changes = changes.clone();
        tokio::spawn(async move {
            let mut last: BTreeMap<String, serde_json::Value> = BTreeMap::new();
            let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            while let Some(Ok(event)) = events.next().await {
                if let watcher::Event::Apply(o) | watcher::Event::InitApply(o) = event {
                    let status = serde_json::to_value(&o).expect("serializes")["status"].clone();
                    let name = o.name_any();
                    if !status.is_null() && last.get(&name) != Some(&status) {
                        last.insert(name.clone(), status);
                        let mut changes = changes.lock().expect("changes");
                        changes
                            .entry(name)
                            .or_default()
                            .push(std::time::Instant::now());
                    }
                }
            }
        })
    };
    (changes, recorder)
}

/// A busy set's status changes several times per runner (counts, and the conditions built on
/// them); a deployment and its set each write theirs at most once a second, and what they say
/// in the end is the truth.
#[tokio::test]
async fn a_scaling_deployment_and_its_set_write_their_status_at_most_once_a_second() {
    use hangar_api::{RunnerDeployment, RunnerReplicaSet};
    let e = E2e::start("e2e-pace").await;
    let (deployments, watching_deployments) = record_status_changes(e.h.api::<RunnerDeployment>());
    let (sets, watching_sets) = record_status_changes(e.h.api::<RunnerReplicaSet>());
    let rd = Deployment::new("pace", 0, "pace");
    e.apply(&rd);
    e.apply(&rd.clone().replicas(6));
    e.wait_running(6).await;
    eventually_of(
        &e,
        "the deployment and its set to say 6 ready",
        WAIT,
        || async {
            let ready = |status: Option<serde_json::Value>| {
                status.is_some_and(|s| s["readyReplicas"] == 6 && s["replicas"] == 6)
            };
            let rds =
                e.h.api::<RunnerDeployment>()
                    .list(&ListParams::default())
                    .await
                    .ok()?;
            let rss =
                e.h.api::<RunnerReplicaSet>()
                    .list(&ListParams::default())
                    .await
                    .ok()?;
            let said = rds
                .items
                .iter()
                .all(|d| ready(serde_json::to_value(&d.status).ok()))
                && rss
                    .items
                    .iter()
                    .all(|s| ready(serde_json::to_value(&s.status).ok()));
            (said && !rds.items.is_empty() && !rss.items.is_empty()).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    watching_deployments.abort();
    watching_sets.abort();
    // The pace is a second between writes; a watch delivers each write a little late, some
    // later than others.
    let slack = Duration::from_millis(500);
    for (kind, changes) in [
        ("RunnerDeployment", deployments),
        ("RunnerReplicaSet", sets),
    ] {
        let changes = changes.lock().expect("changes").clone();
        assert!(!changes.is_empty(), "no {kind} status seen");
        for (name, at) in changes {
            let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
            assert!(
                gaps.iter().all(|gap| *gap >= slack),
                "{kind} {name}: {} status changes, {gaps:?} apart",
                at.len()
            );
        }
    }
    e.shutdown().await;
}

/// How many runners an event's note counts ("registered 2 runner(s) ..."); 1 for a note about
/// one runner.
fn runner_count(note: &str) -> usize {
    note.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .filter(|_| note.contains("runner(s)"))
        .unwrap_or(1)
}
