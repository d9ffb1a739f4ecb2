//! The actions/runner simulation in pods on simulated nodes, against the real control plane and
//! an in-process ghsim: a plain runner pod registers, runs a job and completes; a StatefulSet
//! of runners comes online; deleting an idle runner pod unregisters it; deleting a busy one
//! interrupts its job.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{container, container_status, pod, start_with, wait_deleted, wait_for, when};
use ghsim::world::{JobStatus, SubmitJobs, TokenKind};
use hangar_github::Scope;
use hangar_testkit::eventually;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, ObjectFieldSelector, Pod, PodTemplateSpec, Secret,
    SecretKeySelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use nodesim::program::RunnerProgram;
use nodesim::{NodeSimConfig, NodeSimHandle, Programs};

/// The PAT the simulated runners mint remove tokens with (ghsim takes only remove tokens for
/// `config.sh remove`).
const REMOVER: &str = "ghp_nodesim_runner";

struct Setup {
    client: kube::Client,
    ns: hangar_testkit::TestNamespace,
    gh: ghsim::Running,
    sim: NodeSimHandle,
}

/// ghsim with repository `acme/app`, a namespace holding the registration token in Secret
/// `registration`, and nodes running the runner program.
async fn setup(prefix: &str) -> Setup {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim-runner").await;
    let github = ghsim::Sim::new(ghsim::SimConfig::default());
    github.update(|w, _| {
        w.add_pat(REMOVER, "nodesim");
        w.add_org("acme", None);
        w.add_repo("acme", "app", true);
    });
    let gh = ghsim::spawn(github).await.unwrap();
    let token = gh.sim.update(|w, now| {
        w.create_runner_token(&Scope::repo("acme", "app"), TokenKind::Registration, now)
            .0
    });
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("registration".to_owned()),
            ..ObjectMeta::default()
        },
        string_data: Some([("runner_token".to_owned(), token)].into()),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns.name())
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let programs =
        Programs::new().with_runner(RunnerProgram::new().with_remove_credential(REMOVER));
    let sim = start_with(
        client.clone(),
        NodeSimConfig::new(common::pool(prefix), 2),
        programs,
    )
    .await;
    Setup {
        client,
        ns,
        gh,
        sim,
    }
}

fn value(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// The runner container of ARC's pod shape: the env contract, the token from the Secret and
/// the runner name from the pod's own name (so it also works in a StatefulSet template).
fn runner_container(gh: &ghsim::Running, ephemeral: bool) -> Container {
    let mut c = container("runner", "summerwind/actions-runner:latest");
    c.env = Some(vec![
        value("RUNNER_ORG", ""),
        value("RUNNER_REPO", "acme/app"),
        value("RUNNER_ENTERPRISE", ""),
        value("RUNNER_LABELS", "team-a,sim"),
        value("RUNNER_GROUP", ""),
        value("GITHUB_URL", gh.url.as_str()),
        value("RUNNER_WORKDIR", "/runner/_work"),
        value("RUNNER_EPHEMERAL", ephemeral.to_string()),
        EnvVar {
            name: "RUNNER_NAME".to_owned(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".to_owned(),
                    api_version: None,
                }),
                ..EnvVarSource::default()
            }),
        },
        EnvVar {
            name: "RUNNER_TOKEN".to_owned(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: "registration".to_owned(),
                    key: "runner_token".to_owned(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
        },
    ]);
    c
}

fn runner_pod(s: &Setup, name: &str, ephemeral: bool, sidecar: bool) -> Pod {
    let mut containers = vec![runner_container(&s.gh, ephemeral)];
    if sidecar {
        containers.push(container("docker", "docker:dind"));
    }
    let mut p = pod(name, &s.sim.placement(), containers);
    p.spec.as_mut().unwrap().restart_policy = Some("Never".to_owned());
    p
}

fn submit(gh: &ghsim::Running, duration: Duration) -> u64 {
    gh.sim.update(|w, now| {
        let request = SubmitJobs {
            repository: "acme/app".into(),
            count: 1,
            labels: vec!["self-hosted".into(), "sim".into()],
            duration_ms: duration.as_millis() as u64,
            conclusion: Some("success".into()),
            workflow: None,
            job_name: None,
        };
        w.submit_jobs(&request, now).unwrap().1[0]
    })
}

/// (registered, online, busy) of runner `name` in ghsim.
fn runner_state(gh: &ghsim::Running, name: &str) -> Option<(bool, bool)> {
    gh.sim.read(|w, _| {
        w.runners
            .values()
            .find(|r| r.name == name)
            .map(|r| (r.online(), r.busy()))
    })
}

/// Polls ghsim every 50 ms until `check` holds; panics after 30 s.
async fn until_gh(what: &str, check: impl FnMut() -> bool) {
    let (limit, poll) = (Duration::from_secs(30), Duration::from_millis(50));
    if let Err(e) = eventually::until(what, limit, poll, check).await {
        panic!("{e}");
    }
}

fn terminated(pod: &Pod, name: &str) -> Option<(i32, String)> {
    let state = container_status(pod, name)?.state.as_ref()?;
    let t = state.terminated.as_ref()?;
    Some((t.exit_code, t.reason.clone().unwrap_or_default()))
}

#[tokio::test]
async fn a_runner_pod_registers_runs_a_job_and_completes() {
    let s = setup("runner-job").await;
    let pods: Api<Pod> = s.ns.api(s.client.clone());
    pods.create(
        &PostParams::default(),
        &runner_pod(&s, "runner-one", true, false),
    )
    .await
    .unwrap();
    until_gh("runner-one online", || {
        runner_state(&s.gh, "runner-one") == Some((true, false))
    })
    .await;
    let labels = s.gh.sim.read(|w, _| {
        w.runners
            .values()
            .find(|r| r.name == "runner-one")
            .unwrap()
            .label_names()
    });
    assert_eq!(labels, ["self-hosted", "Linux", "X64", "team-a", "sim"]);

    let job = submit(&s.gh, Duration::from_secs(1));
    let done = wait_for(
        &pods,
        "runner-one",
        "Succeeded",
        when(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")),
    )
    .await;
    assert_eq!(
        terminated(&done, "runner"),
        Some((0, "Completed".to_owned()))
    );
    let (status, conclusion, interrupted) = s.gh.sim.read(|w, _| {
        let j = &w.jobs[&job];
        (j.status, j.conclusion.clone(), j.interrupted)
    });
    assert_eq!(
        (status, conclusion.as_deref(), interrupted),
        (JobStatus::Completed, Some("success"), false)
    );
    assert_eq!(
        runner_state(&s.gh, "runner-one"),
        None,
        "the ephemeral runner is gone"
    );
    s.sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_statefulset_of_three_runners_comes_online() {
    let s = setup("runner-sts").await;
    let labels: BTreeMap<String, String> = [("app".to_owned(), "runners".to_owned())].into();
    let mut template = pod(
        "unused",
        &s.sim.placement(),
        vec![
            runner_container(&s.gh, false),
            container("docker", "docker:dind"),
        ],
    );
    template
        .spec
        .as_mut()
        .unwrap()
        .termination_grace_period_seconds = Some(5);
    let set = StatefulSet {
        metadata: ObjectMeta {
            name: Some("runners".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(3),
            pod_management_policy: Some("Parallel".to_owned()),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            service_name: Some("runners".to_owned()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: template.spec,
            },
            ..StatefulSetSpec::default()
        }),
        status: None,
    };
    Api::<StatefulSet>::namespaced(s.client.clone(), s.ns.name())
        .create(&PostParams::default(), &set)
        .await
        .unwrap();
    let names = ["runners-0", "runners-1", "runners-2"];
    until_gh("three online runners", || {
        names
            .iter()
            .all(|n| runner_state(&s.gh, n) == Some((true, false)))
    })
    .await;
    let online =
        s.gh.sim
            .read(|w, _| w.runners.values().filter(|r| r.online()).count());
    assert_eq!(online, 3);
    s.sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn deleting_an_idle_runner_pod_unregisters_it_and_the_pod_disappears() {
    let s = setup("runner-idle").await;
    let pods: Api<Pod> = s.ns.api(s.client.clone());
    pods.create(
        &PostParams::default(),
        &runner_pod(&s, "idle-runner", true, true),
    )
    .await
    .unwrap();
    until_gh("idle-runner online", || {
        runner_state(&s.gh, "idle-runner") == Some((true, false))
    })
    .await;
    let p = pods.get("idle-runner").await.unwrap();
    pods.delete("idle-runner", &DeleteParams::default())
        .await
        .unwrap();
    wait_deleted(&pods, "idle-runner", &p.uid().unwrap()).await;
    assert_eq!(
        runner_state(&s.gh, "idle-runner"),
        None,
        "SIGTERM while idle removes the runner from GitHub"
    );
    let accounting = ghsim::accounting::snapshot(&s.gh.sim);
    assert_eq!(accounting.jobs_summary.interrupted, 0);
    s.sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn deleting_a_busy_runner_pod_records_one_interrupted_job() {
    let s = setup("runner-busy").await;
    let pods: Api<Pod> = s.ns.api(s.client.clone());
    pods.create(
        &PostParams::default(),
        &runner_pod(&s, "busy-runner", true, true),
    )
    .await
    .unwrap();
    until_gh("busy-runner online", || {
        runner_state(&s.gh, "busy-runner") == Some((true, false))
    })
    .await;
    let job = submit(&s.gh, Duration::from_secs(600));
    until_gh("busy-runner running the job", || {
        runner_state(&s.gh, "busy-runner") == Some((true, true))
    })
    .await;

    // Watch from before the deletion, so the final status is seen before the pod goes.
    let p = pods.get("busy-runner").await.unwrap();
    let uid = p.uid().unwrap();
    let stopped = tokio::spawn({
        let pods = pods.clone();
        async move {
            wait_for(
                &pods,
                "busy-runner",
                "the runner container to stop",
                when(|p| terminated(p, "runner").is_some()),
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    pods.delete("busy-runner", &DeleteParams::default())
        .await
        .unwrap();
    let last = stopped.await.unwrap();
    assert_eq!(terminated(&last, "runner").unwrap().0, 143);
    wait_deleted(&pods, "busy-runner", &uid).await;

    let accounting = ghsim::accounting::snapshot(&s.gh.sim);
    assert_eq!(accounting.jobs_summary.interrupted, 1);
    let interrupted = s.gh.sim.read(|w, _| w.jobs[&job].interrupted);
    assert!(interrupted);
    s.sim.shutdown().await.unwrap();
}

/// A stale runner image: it registers and keeps listening, GitHub refuses its polls for its
/// version, and it never gets a job, while its pod stays Running and Ready (what a health check
/// must see through).
#[tokio::test]
async fn a_runner_below_githubs_minimum_version_registers_but_never_gets_a_job() {
    let s = setup("runner-stale").await;
    let pods: Api<Pod> = s.ns.api(s.client.clone());
    let mut stale = runner_pod(&s, "runner-stale", true, false);
    stale.metadata.annotations = Some(BTreeMap::from([(
        "program.nodesim.hangar.dev/runner".to_owned(),
        "runner(version=2.311.0, retry-delay=100ms)".to_owned(),
    )]));
    pods.create(&PostParams::default(), &stale).await.unwrap();
    until_gh("runner-stale registered with its version", || {
        s.gh.sim.read(|w, _| {
            w.runners
                .values()
                .any(|r| r.name == "runner-stale" && r.version.as_deref() == Some("2.311.0"))
        })
    })
    .await;
    let job = submit(&s.gh, Duration::from_secs(1));
    let ready = wait_for(
        &pods,
        "runner-stale",
        "Running and Ready",
        when(|p| {
            p.status.as_ref().is_some_and(|st| {
                st.phase.as_deref() == Some("Running")
                    && st
                        .conditions
                        .iter()
                        .flatten()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
            })
        }),
    )
    .await;
    assert_eq!(ready.name_any(), "runner-stale");
    // Several refused polls later, the job still waits and the runner never ran anything.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, busy) = s.gh.sim.read(|w, _| {
        let runner = w.runners.values().find(|r| r.name == "runner-stale");
        (w.jobs[&job].status, runner.is_some_and(|r| r.busy()))
    });
    assert_eq!((status, busy), (JobStatus::Queued, false));
    let pod = pods.get("runner-stale").await.unwrap();
    assert_eq!(
        pod.status.and_then(|st| st.phase).as_deref(),
        Some("Running"),
        "the runner keeps listening"
    );
    s.sim.shutdown().await.unwrap();
}
