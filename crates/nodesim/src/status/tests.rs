//! Table tests of the status rules: one row per branch of the kubelet's phase, readiness and
//! condition logic.

use k8s_openapi::api::core::v1::{PodReadinessGate, Probe};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

const T0: i64 = 1_800_000_000;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(T0 + secs).unwrap()
}

/// A pod with regular containers `names`; `init` entries ending in `+` are native sidecars.
fn pod(policy: &str, init: &[&str], names: &[&str]) -> Pod {
    let container = |name: &str| {
        let sidecar = name.ends_with('+');
        Container {
            name: name.trim_end_matches('+').to_owned(),
            image: Some("busybox".to_owned()),
            restart_policy: sidecar.then(|| "Always".to_owned()),
            ..Container::default()
        }
    };
    Pod {
        metadata: ObjectMeta {
            name: Some("p".to_owned()),
            generation: Some(1),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(policy.to_owned()),
            init_containers: (!init.is_empty())
                .then(|| init.iter().map(|n| container(n)).collect()),
            containers: names.iter().map(|n| container(n)).collect(),
            ..PodSpec::default()
        }),
        status: None,
    }
}

fn record(pod: &Pod) -> PodRecord {
    let mut r = PodRecord::new(pod.spec.as_ref().unwrap(), "10.9.0.1", at(0));
    r.pod_ip = Some("10.10.0.5".to_owned());
    r
}

fn running(ready: bool) -> RunState {
    RunState::Running {
        id: "nodesim://1".to_owned(),
        started_at: at(1),
        ready,
    }
}

fn exited(code: i32) -> Termination {
    Termination {
        id: Some("nodesim://1".to_owned()),
        exit_code: code,
        reason: crate::program::Exit::code(code).reason().to_owned(),
        message: None,
        started_at: Some(at(1)),
        finished_at: at(2),
    }
}

fn terminated(code: i32) -> RunState {
    RunState::Terminated(exited(code))
}

fn backing_off(code: i32, c: &mut ContainerRecord) {
    c.last_termination = Some(exited(code));
    c.restart_count += 1;
    c.state = RunState::Waiting {
        reason: Some("CrashLoopBackOff".to_owned()),
        message: None,
    };
}

fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
    s.conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == t)
        .unwrap_or_else(|| panic!("no {t} condition"))
}

fn summary(s: &PodStatus, t: &str) -> (String, Option<String>, Option<String>) {
    let c = cond(s, t);
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

type Setup = fn(&mut PodRecord);
/// (case, restart policy, init containers, containers, setup, expected phase)
type PhaseRow = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    Setup,
    &'static str,
);

#[test]
fn phase_follows_the_kubelet_rules() {
    let rows: &[PhaseRow] = &[
        ("nothing started", "Never", &[], &["a"], |_| {}, "Pending"),
        (
            "all running",
            "Always",
            &[],
            &["a", "b"],
            |r| {
                r.containers[0].state = running(true);
                r.containers[1].state = running(true);
            },
            "Running",
        ),
        (
            "one running, one not yet started",
            "Never",
            &[],
            &["a", "b"],
            |r| r.containers[0].state = running(true),
            "Pending",
        ),
        (
            "runner done, docker sidecar still running (Never)",
            "Never",
            &[],
            &["runner", "docker"],
            |r| {
                r.containers[0].state = terminated(0);
                r.containers[1].state = running(true);
            },
            "Running",
        ),
        (
            "all exited 0 (Never)",
            "Never",
            &[],
            &["a", "b"],
            |r| {
                r.containers[0].state = terminated(0);
                r.containers[1].state = terminated(0);
            },
            "Succeeded",
        ),
        (
            "one failed (Never)",
            "Never",
            &[],
            &["a", "b"],
            |r| {
                r.containers[0].state = terminated(0);
                r.containers[1].state = terminated(137);
            },
            "Failed",
        ),
        (
            "all exited 0 (Always) restarts",
            "Always",
            &[],
            &["a"],
            |r| r.containers[0].state = terminated(0),
            "Running",
        ),
        (
            "crash looping (Always)",
            "Always",
            &[],
            &["a"],
            |r| backing_off(1, &mut r.containers[0]),
            "Running",
        ),
        (
            "failed and restarting (OnFailure)",
            "OnFailure",
            &[],
            &["a"],
            |r| backing_off(1, &mut r.containers[0]),
            "Running",
        ),
        (
            "all exited 0 (OnFailure)",
            "OnFailure",
            &[],
            &["a"],
            |r| r.containers[0].state = terminated(0),
            "Succeeded",
        ),
        (
            "init container running",
            "Always",
            &["init"],
            &["a"],
            |r| r.init_containers[0].state = running(false),
            "Pending",
        ),
        (
            "init container failed (Never)",
            "Never",
            &["init"],
            &["a"],
            |r| r.init_containers[0].state = terminated(1),
            "Failed",
        ),
        (
            "init container failed, restarting (OnFailure)",
            "OnFailure",
            &["init"],
            &["a"],
            |r| backing_off(1, &mut r.init_containers[0]),
            "Pending",
        ),
        (
            "init done, containers running",
            "Always",
            &["init"],
            &["a"],
            |r| {
                r.init_containers[0].state = terminated(0);
                r.containers[0].state = running(true);
            },
            "Running",
        ),
        (
            "native sidecar and container running",
            "Never",
            &["proxy+"],
            &["a"],
            |r| {
                r.init_containers[0].state = running(true);
                r.containers[0].state = running(true);
            },
            "Running",
        ),
        (
            "container done, native sidecar stopped (Never)",
            "Never",
            &["proxy+"],
            &["a"],
            |r| {
                r.init_containers[0].state = terminated(0);
                r.containers[0].state = terminated(0);
            },
            "Succeeded",
        ),
        (
            "deleted pod, stopped cleanly (Always)",
            "Always",
            &[],
            &["a"],
            |r| {
                r.containers[0].state = terminated(0);
                r.terminal = true;
            },
            "Succeeded",
        ),
        (
            "deleted pod, killed (Always)",
            "Always",
            &[],
            &["a"],
            |r| {
                r.containers[0].state = terminated(137);
                r.terminal = true;
            },
            "Failed",
        ),
    ];
    for (name, policy, init, names, setup, want) in rows {
        let p = pod(policy, init, names);
        let mut r = record(&p);
        setup(&mut r);
        let status = pod_status(&p, &r, None, at(10));
        assert_eq!(status.phase.as_deref(), Some(*want), "{name}");
    }
}

#[test]
fn a_terminal_phase_is_never_left() {
    let mut p = pod("Never", &[], &["a"]);
    p.status = Some(PodStatus {
        phase: Some("Failed".to_owned()),
        ..PodStatus::default()
    });
    let mut r = record(&p);
    r.containers[0].state = running(true);
    assert_eq!(
        pod_status(&p, &r, None, at(10)).phase.as_deref(),
        Some("Failed")
    );
}

#[test]
fn new_pod_waits_with_container_creating() {
    let p = pod("Always", &[], &["a", "b"]);
    let mut r = record(&p);
    r.pod_ip = None;
    let s = pod_status(&p, &r, None, at(10));
    let waiting = |i: usize| {
        let st = &s.container_statuses.as_ref().unwrap()[i];
        st.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .clone()
    };
    assert_eq!(waiting(0).as_deref(), Some("ContainerCreating"));
    assert_eq!(s.pod_ip, None);
    assert_eq!(s.host_ip.as_deref(), Some("10.9.0.1"));
    assert_eq!(
        summary(&s, "PodReadyToStartContainers"),
        ("False".to_owned(), None, None)
    );
    assert_eq!(summary(&s, "Initialized"), ("True".to_owned(), None, None));
    let not_ready = (
        "False".to_owned(),
        Some("ContainersNotReady".to_owned()),
        Some("containers with unready status: [a b]".to_owned()),
    );
    assert_eq!(summary(&s, "ContainersReady"), not_ready);
    assert_eq!(summary(&s, "Ready"), not_ready);
    assert_eq!(summary(&s, "PodScheduled"), ("True".to_owned(), None, None));
    assert_eq!(s.init_container_statuses, None);
}

#[test]
fn running_pod_is_ready_with_addresses_and_container_ids() {
    let p = pod("Always", &[], &["a"]);
    let mut r = record(&p);
    r.containers[0].state = running(false);
    let s = pod_status(&p, &r, None, at(10));
    assert_eq!(summary(&s, "Ready"), ("True".to_owned(), None, None));
    assert_eq!(summary(&s, "PodReadyToStartContainers").0, "True");
    assert_eq!(s.pod_ip.as_deref(), Some("10.10.0.5"));
    assert_eq!(s.pod_ips.as_ref().unwrap()[0].ip, "10.10.0.5");
    let c = &s.container_statuses.as_ref().unwrap()[0];
    assert!(c.ready, "no readiness probe: running is ready");
    assert_eq!(c.started, Some(true));
    assert_eq!(c.container_id.as_deref(), Some("nodesim://1"));
    assert_eq!(c.image, "docker.io/library/busybox:latest");
    assert!(c.image_id.starts_with("docker.io/library/busybox@sha256:"));
    assert_eq!(s.observed_generation, Some(1));
}

#[test]
fn readiness_probe_makes_readiness_the_programs_call() {
    let mut p = pod("Always", &[], &["a"]);
    p.spec.as_mut().unwrap().containers[0].readiness_probe = Some(Probe::default());
    let mut r = record(&p);
    r.containers[0].state = running(false);
    let s = pod_status(&p, &r, None, at(10));
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(summary(&s, "ContainersReady").0, "False");
    r.containers[0].state = running(true);
    assert_eq!(
        summary(&pod_status(&p, &r, None, at(10)), "Ready").0,
        "True"
    );
}

#[test]
fn init_containers_gate_initialization() {
    let p = pod("Always", &["setup", "proxy+"], &["a"]);
    let mut r = record(&p);
    r.init_containers[0].state = running(true);
    let s = pod_status(&p, &r, None, at(10));
    assert_eq!(
        summary(&s, "Initialized"),
        (
            "False".to_owned(),
            Some("ContainersNotInitialized".to_owned()),
            Some("containers with incomplete status: [setup proxy]".to_owned())
        )
    );
    let regular = &s.container_statuses.as_ref().unwrap()[0];
    let reason = regular
        .state
        .as_ref()
        .unwrap()
        .waiting
        .as_ref()
        .unwrap()
        .reason
        .as_deref();
    assert_eq!(reason, Some("PodInitializing"));
    let init = &s.init_container_statuses.as_ref().unwrap()[0];
    assert!(!init.ready, "a running init container is not ready");

    r.init_containers[0].state = terminated(0);
    r.init_containers[1].state = running(true);
    let s = pod_status(&p, &r, None, at(10));
    assert!(s.init_container_statuses.as_ref().unwrap()[0].ready);
    assert_eq!(summary(&s, "Initialized"), ("True".to_owned(), None, None));
    assert_eq!(
        s.phase.as_deref(),
        Some("Pending"),
        "regular container not started"
    );
}

#[test]
fn terminal_phases_set_completed_and_failed_reasons() {
    let p = pod("Never", &[], &["a"]);
    let mut r = record(&p);
    r.containers[0].state = terminated(0);
    let s = pod_status(&p, &r, None, at(10));
    assert_eq!(
        summary(&s, "Ready"),
        ("False".to_owned(), Some("PodCompleted".to_owned()), None)
    );
    assert_eq!(
        summary(&s, "Initialized"),
        ("True".to_owned(), Some("PodCompleted".to_owned()), None)
    );
    r.containers[0].state = RunState::Terminated(Termination {
        reason: "OOMKilled".to_owned(),
        ..exited(137)
    });
    let s = pod_status(&p, &r, None, at(10));
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(
        summary(&s, "ContainersReady"),
        ("False".to_owned(), Some("PodFailed".to_owned()), None)
    );
    let t = s.container_statuses.as_ref().unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (137, Some("OOMKilled")));
}

#[test]
fn restarts_show_the_last_termination() {
    let p = pod("Always", &[], &["a"]);
    let mut r = record(&p);
    backing_off(2, &mut r.containers[0]);
    let s = pod_status(&p, &r, None, at(10));
    let c = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(c.restart_count, 1);
    let last = c.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (2, Some("Error")));
    let waiting = c.state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
    assert_eq!(c.container_id.as_deref(), Some("nodesim://1"));
}

#[test]
fn readiness_gates_and_foreign_conditions() {
    let mut p = pod("Always", &[], &["a"]);
    p.spec.as_mut().unwrap().readiness_gates = Some(vec![PodReadinessGate {
        condition_type: "example.com/lb".to_owned(),
    }]);
    let mut r = record(&p);
    r.containers[0].state = running(true);
    let s = pod_status(&p, &r, None, at(10));
    assert_eq!(
        summary(&s, "Ready"),
        (
            "False".to_owned(),
            Some("ReadinessGatesNotReady".to_owned()),
            Some(
                "corresponding condition of pod readiness gate \"example.com/lb\" does not exist."
                    .to_owned()
            )
        )
    );
    assert_eq!(summary(&s, "ContainersReady").0, "True");

    let gate = PodCondition {
        type_: "example.com/lb".to_owned(),
        status: "True".to_owned(),
        ..PodCondition::default()
    };
    p.status = Some(PodStatus {
        conditions: Some(vec![gate.clone()]),
        ..PodStatus::default()
    });
    let s = pod_status(&p, &r, None, at(10));
    assert_eq!(summary(&s, "Ready").0, "True");
    assert_eq!(cond(&s, "example.com/lb"), &gate, "kept as it was");
}

#[test]
fn transition_times_move_only_with_the_status() {
    let p = pod("Always", &[], &["a"]);
    let mut r = record(&p);
    let first = pod_status(&p, &r, None, at(10));
    let mut p2 = p.clone();
    p2.status = Some(first.clone());
    r.containers[0].state = running(true);
    let second = pod_status(&p2, &r, None, at(20));
    let time = |s: &PodStatus, t: &str| cond(s, t).last_transition_time.clone().unwrap().0;
    assert_eq!(time(&second, "PodScheduled"), at(10));
    assert_eq!(time(&second, "Ready"), at(20));

    // The kubelet's own last report counts even before the API server echoes it.
    let third = pod_status(&p, &r, Some(&second), at(30));
    assert_eq!(time(&third, "Ready"), at(20));
    assert_eq!(time(&third, "PodScheduled"), at(10));
}

#[test]
fn host_network_pods_use_the_node_ip() {
    let mut p = pod("Always", &[], &["a"]);
    p.spec.as_mut().unwrap().host_network = Some(true);
    let s = pod_status(&p, &record(&p), None, at(10));
    assert_eq!(s.pod_ip.as_deref(), Some("10.9.0.1"));
}

#[test]
fn images_are_normalized_like_a_cri_runtime_reports_them() {
    for (image, want) in [
        ("busybox", "docker.io/library/busybox:latest"),
        ("docker:dind", "docker.io/library/docker:dind"),
        (
            "summerwind/actions-runner",
            "docker.io/summerwind/actions-runner:latest",
        ),
        (
            "ghcr.io/actions/actions-runner:2.320.0",
            "ghcr.io/actions/actions-runner:2.320.0",
        ),
        ("localhost:5000/x", "localhost:5000/x:latest"),
        ("localhost/x", "localhost/x:latest"),
        ("busybox@sha256:abc", "docker.io/library/busybox@sha256:abc"),
    ] {
        assert_eq!(normalize_image(image), want, "{image}");
    }
    assert_eq!(
        image_id("docker.io/library/docker:dind"),
        format!(
            "docker.io/library/docker@sha256:{}",
            hex::encode(Sha256::digest(b"docker.io/library/docker:dind"))
        )
    );
}
