//! Pods on simulated nodes, against the real control plane (kube-scheduler binds them unless a
//! test says otherwise): start, readiness, exits, restarts, faults and deletion.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::{
    annotate, condition, container, container_status, phase, pod, run_pod, start, start_with,
    wait_deleted, wait_for, when,
};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, Node, ObjectFieldSelector, Pod, PodTemplateSpec, Secret,
    SecretKeySelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use nodesim::program::ContainerSelector;
use nodesim::{
    ContainerContext, ContainerIo, ContainerProgram, Exit, Fault, NodeSimConfig, Programs,
};

fn terminated(pod: &Pod, name: &str) -> Option<(i32, String)> {
    let state = container_status(pod, name)?.state.as_ref()?;
    let t = state.terminated.as_ref()?;
    Some((t.exit_code, t.reason.clone().unwrap_or_default()))
}

fn running(pod: &Pod, name: &str) -> bool {
    container_status(pod, name)
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

#[tokio::test]
async fn a_scheduled_pod_becomes_running_and_ready() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "ready", 2).await;
    let pods: Api<Pod> = ns.api(client.clone());

    let p = pod(
        "runner",
        &sim.placement(),
        vec![
            container("runner", "summerwind/actions-runner"),
            container("docker", "docker:dind"),
        ],
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    let p = wait_for(
        &pods,
        "runner",
        "Ready",
        when(|p| condition(p, "Ready") == Some("True")),
    )
    .await;

    let node_name = p.spec.as_ref().unwrap().node_name.clone().unwrap();
    assert!(
        sim.node_names().contains(&node_name),
        "bound to {node_name}"
    );
    let status = p.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    for t in [
        "PodScheduled",
        "Initialized",
        "ContainersReady",
        "PodReadyToStartContainers",
    ] {
        assert_eq!(condition(&p, t), Some("True"), "{t}");
    }
    let node = Api::<Node>::all(client.clone())
        .get(&node_name)
        .await
        .unwrap();
    let node_ip = &node.status.unwrap().addresses.unwrap()[0].address;
    assert_eq!(status.host_ip.as_ref(), Some(node_ip));
    let cidr = node.spec.unwrap().pod_cidr.unwrap();
    let pod_ip = status.pod_ip.clone().unwrap();
    assert!(
        pod_ip.starts_with(cidr.trim_end_matches("0/24")),
        "{pod_ip} in {cidr}"
    );
    for name in ["runner", "docker"] {
        let c = container_status(&p, name).unwrap();
        assert!(c.ready && c.started == Some(true), "{name}: {c:?}");
        assert!(c.container_id.as_ref().unwrap().starts_with("nodesim://"));
        assert!(
            c.state
                .as_ref()
                .unwrap()
                .running
                .as_ref()
                .unwrap()
                .started_at
                .is_some()
        );
    }
    assert_eq!(
        container_status(&p, "docker").unwrap().image,
        "docker.io/library/docker:dind"
    );
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_statefulset_of_three_becomes_ready() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "sts", 2).await;
    let sets: Api<StatefulSet> = ns.api(client.clone());

    let labels: BTreeMap<String, String> = [("app".to_owned(), "runners".to_owned())].into();
    let template = pod(
        "unused",
        &sim.placement(),
        vec![
            container("runner", "summerwind/actions-runner"),
            container("docker", "docker:dind"),
        ],
    );
    let set = StatefulSet {
        metadata: ObjectMeta {
            name: Some("runners".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(3),
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
    sets.create(&PostParams::default(), &set).await.unwrap();
    wait_for(&sets, "runners", "3/3 ready", |s: Option<&StatefulSet>| {
        s.and_then(|s| s.status.as_ref())
            .and_then(|s| s.ready_replicas)
            == Some(3)
    })
    .await;

    // Scale down: the highest ordinal is deleted and must actually go away.
    let pods: Api<Pod> = ns.api(client.clone());
    let uid = pods.get("runners-2").await.unwrap().uid().unwrap();
    let scale = serde_json::json!({ "spec": { "replicas": 2 } });
    sets.patch("runners", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    wait_deleted(&pods, "runners-2", &uid).await;
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn deleting_a_pod_stops_it_and_removes_the_object() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "delete", 1).await;
    let pods: Api<Pod> = ns.api(client.clone());

    let p = run_pod(&pods, &sim, "p").await;
    let started = Instant::now();
    pods.delete("p", &DeleteParams::default()).await.unwrap();
    wait_deleted(&pods, "p", &p.uid().unwrap()).await;
    // The default program stops at once on SIGTERM: no waiting for the 30 s grace period.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // The watch can report the deletion before the simulator's DELETE call has returned and
    // been counted.
    let counted = Instant::now();
    while sim.stats().deletions == 0 {
        assert!(
            counted.elapsed() < Duration::from_secs(10),
            "the simulator never counted its deletion"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_pod_deleted_while_writes_fail_past_the_retry_window_is_still_removed() {
    let cluster = hangar_testkit::TestCluster::get();
    let direct = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    // The simulator talks to the apiserver through a proxy that can fail its writes, with a
    // client that, like a kubelet's, makes each request once.
    let (proxy, mut config) = hangar_testkit::fault_proxy::FaultProxy::in_front_of(cluster, 11)
        .await
        .expect("proxy starts");
    config.default_retry = false;
    let sim = start(kube::Client::try_from(config).unwrap(), "write-outage", 1).await;
    let retry_window = nodesim::Timing::fast().write_retry_window;
    let pods: Api<Pod> = ns.api(direct);
    let p = run_pod(&pods, &sim, "p").await;

    // Writes time out (etcd without a leader) for several retry windows while the pod is
    // deleted: the simulator's status patch and final deletion keep failing.
    proxy.faults().set_writes_timing_out(true);
    pods.delete("p", &DeleteParams::default()).await.unwrap();
    let outage = retry_window * 4;
    tokio::time::sleep(outage).await;
    assert!(
        proxy.faults().counts().timed_out > 0,
        "the simulator did not try to write during the outage"
    );
    assert!(
        pods.get_opt("p").await.unwrap().is_some(),
        "removed during the outage"
    );
    assert!(sim.stats().deferred_writes > 0, "{:?}", sim.stats());

    // Once writes work again the pod is removed, as a kubelet would remove it.
    proxy.faults().clear();
    wait_deleted(&pods, "p", &p.uid().unwrap()).await;
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_container_ignoring_sigterm_is_killed_when_the_grace_period_ends() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "grace", 1).await;
    let pods: Api<Pod> = ns.api(client.clone());

    let mut p = annotate(
        pod(
            "stubborn",
            &sim.placement(),
            vec![container("main", "busybox")],
        ),
        &[("program.nodesim.hangar.dev/main", "sleep(term=ignore)")],
    );
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(3);
    pods.create(&PostParams::default(), &p).await.unwrap();
    let p = wait_for(
        &pods,
        "stubborn",
        "Running",
        when(|p| phase(p) == Some("Running")),
    )
    .await;
    let started = Instant::now();
    pods.delete("stubborn", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        &pods,
        "stubborn",
        "killed",
        when(|p| terminated(p, "main") == Some((137, "Error".to_owned()))),
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    wait_deleted(&pods, "stubborn", &p.uid().unwrap()).await;
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn exiting_zero_under_restart_policy_never_succeeds() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "succeed", 1).await;
    let pods: Api<Pod> = ns.api(client.clone());

    let mut p = annotate(
        pod("job", &sim.placement(), vec![container("main", "busybox")]),
        &[("program.nodesim.hangar.dev/main", "exit(0, 300ms)")],
    );
    p.spec.as_mut().unwrap().restart_policy = Some("Never".to_owned());
    pods.create(&PostParams::default(), &p).await.unwrap();
    let p = wait_for(
        &pods,
        "job",
        "Succeeded",
        when(|p| phase(p) == Some("Succeeded")),
    )
    .await;
    assert_eq!(terminated(&p, "main"), Some((0, "Completed".to_owned())));
    assert_eq!(condition(&p, "Ready"), Some("False"));
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_oom_killed_container_fails_the_pod() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "oom", 1).await;
    let pods: Api<Pod> = ns.api(client.clone());

    let mut p = annotate(
        pod(
            "hungry",
            &sim.placement(),
            vec![container("main", "busybox")],
        ),
        &[("program.nodesim.hangar.dev/main", "oom(300ms)")],
    );
    p.spec.as_mut().unwrap().restart_policy = Some("Never".to_owned());
    pods.create(&PostParams::default(), &p).await.unwrap();
    let p = wait_for(
        &pods,
        "hungry",
        "Failed",
        when(|p| phase(p) == Some("Failed")),
    )
    .await;
    assert_eq!(terminated(&p, "main"), Some((137, "OOMKilled".to_owned())));
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_crashing_container_restarts_with_back_off_under_always() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "crash", 1).await;
    let pods: Api<Pod> = ns.api(client.clone());

    let p = annotate(
        pod(
            "flaky",
            &sim.placement(),
            vec![container("main", "busybox")],
        ),
        &[("program.nodesim.hangar.dev/main", "crash(200ms, code=3)")],
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    let p = wait_for(
        &pods,
        "flaky",
        "restarted twice",
        when(|p| container_status(p, "main").is_some_and(|c| c.restart_count >= 2)),
    )
    .await;
    assert_eq!(phase(&p), Some("Running"), "Always keeps restarting");
    let last = container_status(&p, "main")
        .unwrap()
        .last_state
        .clone()
        .unwrap();
    let last = last.terminated.unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (3, Some("Error")));
    wait_for(
        &pods,
        "flaky",
        "CrashLoopBackOff",
        when(|p| {
            container_status(p, "main")
                .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                .as_deref()
                == Some("CrashLoopBackOff")
        }),
    )
    .await;
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_keeps_the_pod_pending() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "pull", 1).await;
    let pods: Api<Pod> = ns.api(client.clone());

    let p = annotate(
        pod(
            "stuck",
            &sim.placement(),
            vec![container("main", "example.invalid/nope")],
        ),
        &[("program.nodesim.hangar.dev/main", "pull-error")],
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    let reason = |p: &Pod| {
        container_status(p, "main")
            .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
            .unwrap_or_default()
    };
    wait_for(
        &pods,
        "stuck",
        "ErrImagePull",
        when(|p| reason(p) == "ErrImagePull"),
    )
    .await;
    let p = wait_for(
        &pods,
        "stuck",
        "ImagePullBackOff",
        when(|p| reason(p) == "ImagePullBackOff"),
    )
    .await;
    assert_eq!(phase(&p), Some("Pending"));
    assert_eq!(condition(&p, "Ready"), Some("False"));
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn init_containers_run_in_order_and_a_native_sidecar_stops_last() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "init", 1).await;
    let pods: Api<Pod> = ns.api(client.clone());

    let mut p = annotate(
        pod(
            "staged",
            &sim.placement(),
            vec![container("main", "busybox")],
        ),
        &[
            ("program.nodesim.hangar.dev/first", "exit(0, 200ms)"),
            ("program.nodesim.hangar.dev/second", "exit(0, 200ms)"),
            ("program.nodesim.hangar.dev/main", "exit(0, 500ms)"),
        ],
    );
    let mut proxy = container("proxy", "envoy");
    proxy.restart_policy = Some("Always".to_owned());
    let spec = p.spec.as_mut().unwrap();
    spec.restart_policy = Some("Never".to_owned());
    spec.init_containers = Some(vec![
        container("first", "busybox"),
        proxy,
        container("second", "busybox"),
    ]);
    pods.create(&PostParams::default(), &p).await.unwrap();

    let p = wait_for(
        &pods,
        "staged",
        "Succeeded",
        when(|p| phase(p) == Some("Succeeded")),
    )
    .await;
    let time = |name: &str, started: bool| {
        let t = container_status(&p, name)
            .unwrap()
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap();
        if started { t.started_at } else { t.finished_at }
            .unwrap()
            .0
    };
    assert!(
        time("first", false) <= time("second", true),
        "second starts after first ends"
    );
    assert!(
        time("second", false) <= time("main", true),
        "main starts after init"
    );
    assert!(
        time("proxy", true) <= time("second", true),
        "the sidecar starts before second"
    );
    assert!(
        time("main", false) <= time("proxy", false),
        "the sidecar stops after main"
    );
    assert_eq!(terminated(&p, "proxy"), Some((0, "Completed".to_owned())));
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_arc_runner_pod_keeps_running_on_its_docker_sidecar_after_the_runner_exits() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "arc", 1).await;
    let pods: Api<Pod> = ns.api(client.clone());

    let mut p = annotate(
        pod(
            "runner",
            &sim.placement(),
            vec![
                container("runner", "summerwind/actions-runner"),
                container("docker", "docker:dind"),
            ],
        ),
        &[("program.nodesim.hangar.dev/runner", "exit(0, 300ms)")],
    );
    p.spec.as_mut().unwrap().restart_policy = Some("Never".to_owned());
    pods.create(&PostParams::default(), &p).await.unwrap();
    let p = wait_for(
        &pods,
        "runner",
        "runner completed",
        when(|p| terminated(p, "runner").is_some()),
    )
    .await;
    assert_eq!(terminated(&p, "runner"), Some((0, "Completed".to_owned())));
    assert!(running(&p, "docker"));
    assert_eq!(phase(&p), Some("Running"));
    assert_eq!(condition(&p, "Ready"), Some("False"));

    pods.delete("runner", &DeleteParams::default())
        .await
        .unwrap();
    wait_deleted(&pods, "runner", &p.uid().unwrap()).await;
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_injected_oom_kill_fails_a_running_pod() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "inject", 1).await;
    let pods: Api<Pod> = ns.api(client.clone());

    let mut p = pod("busy", &sim.placement(), vec![container("main", "busybox")]);
    p.spec.as_mut().unwrap().restart_policy = Some("Never".to_owned());
    pods.create(&PostParams::default(), &p).await.unwrap();
    wait_for(
        &pods,
        "busy",
        "Running",
        when(|p| phase(p) == Some("Running")),
    )
    .await;
    sim.inject(ns.name(), "busy", "main", Fault::OomKill)
        .await
        .unwrap();
    let p = wait_for(
        &pods,
        "busy",
        "Failed",
        when(|p| phase(p) == Some("Failed")),
    )
    .await;
    assert_eq!(terminated(&p, "main"), Some((137, "OOMKilled".to_owned())));

    let err = sim
        .inject(ns.name(), "busy", "main", Fault::Kill)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not running"), "{err}");
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_fault_annotation_crashes_a_running_container_once() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "annot", 1).await;
    let pods: Api<Pod> = ns.api(client.clone());

    pods.create(
        &PostParams::default(),
        &pod(
            "victim",
            &sim.placement(),
            vec![container("main", "busybox")],
        ),
    )
    .await
    .unwrap();
    wait_for(
        &pods,
        "victim",
        "Running",
        when(|p| phase(p) == Some("Running")),
    )
    .await;
    let patch = serde_json::json!({
        "metadata": { "annotations": { "fault.nodesim.hangar.dev/main": "crash(42)" } }
    });
    pods.patch("victim", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let p = wait_for(
        &pods,
        "victim",
        "restarted after the crash",
        when(|p| {
            container_status(p, "main").is_some_and(|c| c.restart_count == 1) && running(p, "main")
        }),
    )
    .await;
    let last = container_status(&p, "main")
        .unwrap()
        .last_state
        .clone()
        .unwrap();
    assert_eq!(last.terminated.unwrap().exit_code, 42);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let p = pods.get("victim").await.unwrap();
    assert_eq!(
        container_status(&p, "main").unwrap().restart_count,
        1,
        "applied once"
    );
    sim.shutdown().await.unwrap();
}

/// What the custom program saw.
#[derive(Debug, Default)]
struct Seen {
    env: BTreeMap<String, String>,
    pod_ip: String,
    sigterm_grace: Option<Duration>,
}

/// A program that records its context and SIGTERM, then exits 0: the shape of the runner
/// simulation, which plugs in the same way.
#[derive(Debug, Default)]
struct Recorder(Arc<Mutex<Seen>>);

#[async_trait]
impl ContainerProgram for Recorder {
    async fn run(&self, ctx: ContainerContext, io: ContainerIo) -> Exit {
        {
            let mut seen = self.0.lock().unwrap();
            seen.env = ctx.env.iter().cloned().collect();
            seen.pod_ip = ctx.pod_ip.clone();
        }
        let grace = io.terminated().await;
        self.0.lock().unwrap().sigterm_grace = Some(grace);
        Exit::success()
    }
}

#[tokio::test]
async fn a_custom_program_gets_the_resolved_environment_and_sigterm() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let recorder = Recorder::default();
    let seen = recorder.0.clone();
    let programs = Programs::new().with_rule(ContainerSelector::container("runner"), recorder);
    let sim = start_with(
        client.clone(),
        NodeSimConfig::new(common::pool("custom"), 1),
        programs,
    )
    .await;
    let secrets: Api<Secret> = ns.api(client.clone());
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("runner-token".to_owned()),
            ..ObjectMeta::default()
        },
        string_data: Some([("token".to_owned(), "s3cr3t".to_owned())].into()),
        ..Secret::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let pods: Api<Pod> = ns.api(client.clone());
    let mut runner = container("runner", "summerwind/actions-runner");
    runner.env = Some(vec![
        EnvVar {
            name: "RUNNER_TOKEN".to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: "runner-token".to_owned(),
                    key: "token".to_owned(),
                    optional: None,
                }),
                ..EnvVarSource::default()
            }),
            value: None,
        },
        EnvVar {
            name: "RUNNER_NAME".to_owned(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".to_owned(),
                    api_version: None,
                }),
                ..EnvVarSource::default()
            }),
            value: None,
        },
        EnvVar {
            name: "RUNNER_LABELS".to_owned(),
            value: Some("self-hosted,$(RUNNER_NAME)".to_owned()),
            value_from: None,
        },
    ]);
    let mut p = pod(
        "runner-abc",
        &sim.placement(),
        vec![runner, container("docker", "docker:dind")],
    );
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(7);
    pods.create(&PostParams::default(), &p).await.unwrap();
    let p = wait_for(
        &pods,
        "runner-abc",
        "Ready",
        when(|p| condition(p, "Ready") == Some("True")),
    )
    .await;
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.env["RUNNER_TOKEN"], "s3cr3t");
        assert_eq!(seen.env["RUNNER_NAME"], "runner-abc");
        assert_eq!(seen.env["RUNNER_LABELS"], "self-hosted,runner-abc");
        assert_eq!(
            Some(&seen.pod_ip),
            p.status.as_ref().unwrap().pod_ip.as_ref()
        );
    }
    pods.delete("runner-abc", &DeleteParams::default())
        .await
        .unwrap();
    wait_deleted(&pods, "runner-abc", &p.uid().unwrap()).await;
    let grace = seen
        .lock()
        .unwrap()
        .sigterm_grace
        .expect("SIGTERM delivered");
    assert!(
        grace > Duration::from_secs(5) && grace <= Duration::from_secs(7),
        "{grace:?}"
    );
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_missing_secret_holds_the_container_in_create_container_config_error() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let sim = start(client.clone(), "config", 1).await;
    let pods: Api<Pod> = ns.api(client.clone());

    let mut main = container("main", "busybox");
    main.env = Some(vec![EnvVar {
        name: "TOKEN".to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: "absent".to_owned(),
                key: "token".to_owned(),
                optional: None,
            }),
            ..EnvVarSource::default()
        }),
        value: None,
    }]);
    pods.create(
        &PostParams::default(),
        &pod("unconfigured", &sim.placement(), vec![main]),
    )
    .await
    .unwrap();
    let p = wait_for(
        &pods,
        "unconfigured",
        "CreateContainerConfigError",
        when(|p| {
            container_status(p, "main")
                .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                .as_deref()
                == Some("CreateContainerConfigError")
        }),
    )
    .await;
    let waiting = container_status(&p, "main")
        .unwrap()
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    assert_eq!(
        waiting.message.as_deref(),
        Some("secret \"absent\" not found")
    );
    assert_eq!(phase(&p), Some("Pending"));

    // The Secret appears without the key, then gets it: each retry reads what the Secret is
    // now (from the simulator's watch, as a kubelet reads it), and the container starts.
    let secrets: Api<Secret> = ns.api(client.clone());
    let secret = |data: &[(&str, &str)]| Secret {
        metadata: ObjectMeta {
            name: Some("absent".to_owned()),
            ..ObjectMeta::default()
        },
        string_data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..Secret::default()
    };
    secrets
        .create(&PostParams::default(), &secret(&[("other", "x")]))
        .await
        .unwrap();
    let waiting_for = |message: &'static str| {
        when(move |p| {
            container_status(p, "main")
                .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.message.clone())
                .is_some_and(|m| m.contains(message))
        })
    };
    wait_for(
        &pods,
        "unconfigured",
        "the missing key named",
        waiting_for("couldn't find key token"),
    )
    .await;
    secrets
        .replace("absent", &PostParams::default(), &secret(&[("token", "t")]))
        .await
        .unwrap();
    wait_for(
        &pods,
        "unconfigured",
        "Running",
        when(|p| phase(p) == Some("Running")),
    )
    .await;
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_simulator_binds_pods_that_name_its_scheduler() {
    let cluster = hangar_testkit::TestCluster::get();
    let client = cluster.client().await;
    let ns = hangar_testkit::TestNamespace::create(cluster, "nodesim").await;
    let pool = common::pool("bind");
    let config =
        NodeSimConfig::new(pool.clone(), 2).with_scheduler_name(format!("{pool}-scheduler"));
    let sim = start_with(client.clone(), config, Programs::new()).await;
    let pods: Api<Pod> = ns.api(client.clone());

    for i in 0..4 {
        let p = pod(
            &format!("p{i}"),
            &sim.placement(),
            vec![container("main", "busybox")],
        );
        assert_eq!(
            p.spec.as_ref().unwrap().scheduler_name.as_deref(),
            Some(&*format!("{pool}-scheduler"))
        );
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let mut nodes = std::collections::BTreeSet::new();
    for i in 0..4 {
        let p = wait_for(
            &pods,
            &format!("p{i}"),
            "Running",
            when(|p| phase(p) == Some("Running")),
        )
        .await;
        nodes.insert(p.spec.unwrap().node_name.unwrap());
    }
    assert_eq!(nodes.len(), 2, "spread over both nodes: {nodes:?}");
    assert_eq!(sim.stats().bindings, 4);
    sim.shutdown().await.unwrap();
}
