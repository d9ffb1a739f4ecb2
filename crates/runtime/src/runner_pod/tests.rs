//! Pod shape, one test per ARC behaviour (arc.md behaviours 4 and 5) plus Hangar's
//! no-literal-token rule.

use super::*;

fn spec(yaml: &str) -> RunnerSpec {
    serde_yaml::from_str(yaml).expect("test spec parses")
}

fn defaults() -> PodDefaults {
    PodDefaults {
        registration_secret: "reg-secret".into(),
        ..PodDefaults::default()
    }
}

fn pod(yaml: &str) -> Pod {
    build("r1", "ns", &BTreeMap::new(), &spec(yaml), &defaults())
}

fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    pod.spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .find(|c| c.name == name)
}

fn env_value(c: &Container, name: &str) -> Option<String> {
    c.env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

fn privileged(c: &Container) -> bool {
    c.security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false)
}

#[test]
fn default_pod_has_runner_and_privileged_dind_sidecar() {
    let pod = pod("repository: octo/app\n");
    let runner = container(&pod, "runner").unwrap();
    let docker = container(&pod, "docker").unwrap();
    assert!(!privileged(runner));
    assert!(privileged(docker));
    assert_eq!(docker.image.as_deref(), Some("docker:dind"));
    assert_eq!(
        env_value(runner, "DOCKER_HOST").as_deref(),
        Some("unix:///run/docker.sock")
    );
    assert_eq!(env_value(runner, "DOCKER_ENABLED").as_deref(), Some("true"));
    assert_eq!(
        runner.image.as_deref(),
        Some("summerwind/actions-runner:latest")
    );
    assert_eq!(runner.image_pull_policy.as_deref(), Some("Always"));
    assert_eq!(
        pod.spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("Never")
    );
    // Both share /run for the docker socket.
    for c in [runner, docker] {
        assert!(
            c.volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .any(|m| m.mount_path == "/run"),
            "{}",
            c.name
        );
    }
}

#[test]
fn dockerd_within_runner_container_makes_runner_privileged_without_sidecar() {
    let pod = pod("repository: octo/app\ndockerdWithinRunnerContainer: true\n");
    assert!(container(&pod, "docker").is_none());
    let runner = container(&pod, "runner").unwrap();
    assert!(privileged(runner));
    assert_eq!(
        env_value(runner, "DOCKERD_IN_RUNNER").as_deref(),
        Some("true")
    );
}

#[test]
fn docker_disabled_has_neither_sidecar_nor_privileges() {
    let pod = pod("repository: octo/app\ndockerEnabled: false\n");
    assert!(container(&pod, "docker").is_none());
    let runner = container(&pod, "runner").unwrap();
    assert!(!privileged(runner));
    assert_eq!(
        env_value(runner, "DOCKER_ENABLED").as_deref(),
        Some("false")
    );
    assert_eq!(env_value(runner, "DOCKER_HOST"), None);
}

#[test]
fn docker_group_gid_follows_the_image_release() {
    assert_eq!(
        docker_group_gid("summerwind/actions-runner:ubuntu-22.04", "7"),
        "121"
    );
    assert_eq!(
        docker_group_gid("summerwind/actions-runner:ubuntu-24.04", "7"),
        "121"
    );
    assert_eq!(
        docker_group_gid("summerwind/actions-runner:ubuntu-20.04", "7"),
        "1001"
    );
    assert_eq!(docker_group_gid("my/runner:latest", "7"), "7");
    let pod = pod("repository: octo/app\nimage: summerwind/actions-runner:ubuntu-20.04\n");
    let docker = container(&pod, "docker").unwrap();
    assert_eq!(
        env_value(docker, "DOCKER_GROUP_GID").as_deref(),
        Some("1001")
    );
}

#[test]
fn runner_env_carries_the_entrypoint_contract() {
    let pod = pod(
        "organization: octo\nlabels: [gpu, linux]\ngroup: big\nephemeral: false\nworkDir: /w\n",
    );
    let r = container(&pod, "runner").unwrap();
    for (k, v) in [
        ("RUNNER_ORG", "octo"),
        ("RUNNER_REPO", ""),
        ("RUNNER_ENTERPRISE", ""),
        ("RUNNER_LABELS", "gpu,linux"),
        ("RUNNER_GROUP", "big"),
        ("RUNNER_EPHEMERAL", "false"),
        ("RUNNER_WORKDIR", "/w"),
        ("RUNNER_NAME", "r1"),
        ("GITHUB_URL", "https://github.com/"),
    ] {
        assert_eq!(env_value(r, k).as_deref(), Some(v), "{k}");
    }
}

#[test]
fn ephemeral_defaults_to_true() {
    let pod = pod("repository: octo/app\n");
    assert_eq!(
        env_value(container(&pod, "runner").unwrap(), "RUNNER_EPHEMERAL").as_deref(),
        Some("true")
    );
}

#[test]
fn the_registration_token_comes_from_a_secret_never_a_literal() {
    let pod = pod("repository: octo/app\n");
    let r = container(&pod, "runner").unwrap();
    let token = r
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == "RUNNER_TOKEN")
        .unwrap();
    assert_eq!(token.value, None);
    let key = token
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (key.name.as_str(), key.key.as_str()),
        ("reg-secret", TOKEN_KEY)
    );
}

#[test]
fn jit_registration_passes_the_jit_config_instead_of_a_token() {
    let d = PodDefaults {
        jit: true,
        ..defaults()
    };
    let pod = build(
        "r1",
        "ns",
        &BTreeMap::new(),
        &spec("repository: octo/app\n"),
        &d,
    );
    let r = container(&pod, "runner").unwrap();
    let names: Vec<&str> = r
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert!(names.contains(&"ACTIONS_RUNNER_INPUT_JITCONFIG"));
    assert!(!names.contains(&"RUNNER_TOKEN"));
}

#[test]
fn kubernetes_mode_uses_hooks_and_an_ephemeral_work_volume() {
    let pod = pod(
        "repository: octo/app\ncontainerMode: kubernetes\nworkVolumeClaimTemplate:\n  accessModes: [ReadWriteOnce]\n  storageClassName: fast\n  resources:\n    requests:\n      storage: 1Gi\n",
    );
    assert!(container(&pod, "docker").is_none());
    let r = container(&pod, "runner").unwrap();
    assert_eq!(
        env_value(r, "ACTIONS_RUNNER_CONTAINER_HOOKS").as_deref(),
        Some("/runner/k8s/index.js")
    );
    let work = pod
        .spec
        .as_ref()
        .unwrap()
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "work")
        .unwrap();
    let claim = &work
        .ephemeral
        .as_ref()
        .unwrap()
        .volume_claim_template
        .as_ref()
        .unwrap()
        .spec;
    assert_eq!(claim.storage_class_name.as_deref(), Some("fast"));
}

#[test]
fn user_env_and_runner_container_settings_win() {
    let pod = pod(
        "repository: octo/app\nenv:\n- name: RUNNER_GROUP\n  value: mine\ncontainers:\n- name: runner\n  image: my/runner:1\n  imagePullPolicy: IfNotPresent\n- name: extra\n  image: busybox\n",
    );
    let r = container(&pod, "runner").unwrap();
    assert_eq!(env_value(r, "RUNNER_GROUP").as_deref(), Some("mine"));
    assert_eq!(r.image.as_deref(), Some("my/runner:1"));
    assert_eq!(r.image_pull_policy.as_deref(), Some("IfNotPresent"));
    assert!(container(&pod, "extra").is_some());
    assert!(container(&pod, "docker").is_some());
}

#[test]
fn pod_fields_are_copied_from_the_runner_pod_spec() {
    let pod = pod(
        "repository: octo/app\nnodeSelector: {pool: runners}\nserviceAccountName: sa\nterminationGracePeriodSeconds: 120\npriorityClassName: high\n",
    );
    let s = pod.spec.as_ref().unwrap();
    assert_eq!(s.node_selector.as_ref().unwrap()["pool"], "runners");
    assert_eq!(s.service_account_name.as_deref(), Some("sa"));
    assert_eq!(s.termination_grace_period_seconds, Some(120));
    assert_eq!(s.priority_class_name.as_deref(), Some("high"));
}

#[test]
fn runner_pods_are_labelled_for_the_pod_controller() {
    let mut labels = BTreeMap::new();
    labels.insert("runner-template-hash".to_owned(), "abc".to_owned());
    let pod = build(
        "r1",
        "ns",
        &labels,
        &spec("repository: octo/app\n"),
        &defaults(),
    );
    let l = pod.metadata.labels.unwrap();
    assert_eq!(l.get("actions-runner").map(String::as_str), Some(""));
    assert_eq!(
        l.get("runner-template-hash").map(String::as_str),
        Some("abc")
    );
}

#[test]
fn empty_images_mean_the_defaults_as_arcs_admission_webhook_writes_them() {
    let pod = pod(
        "repository: octo/app\nimage: \"\"\ncontainers:\n- name: runner\n  image: \"\"\n- name: docker\n  image: \"\"\n",
    );
    let defaults = defaults();
    let r = container(&pod, "runner").unwrap();
    assert_eq!(r.image.as_deref(), Some(defaults.runner_image.as_str()));
    let d = container(&pod, "docker").unwrap();
    assert_eq!(d.image.as_deref(), Some(defaults.docker_image.as_str()));
}
