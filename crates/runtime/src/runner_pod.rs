//! The pod a Runner gets: ARC's runner pod shape, built by a pure function.
//!
//! [`build`] turns a Runner (name, namespace, spec) and the controller's [`PodDefaults`] into a
//! complete Pod: a `runner` container carrying the environment contract of ARC's runner images,
//! and — unless docker runs inside the runner container, docker is disabled, or the kubernetes
//! container mode is used — a privileged `docker` (dind) sidecar sharing `/run` for the socket.
//! `restartPolicy` is always `Never`: a runner that exits has finished (ephemeral) or failed,
//! and restarting it in place would race unregistration.
//!
//! Unlike ARC, the registration credential is never written into the pod spec: `RUNNER_TOKEN`
//! (or, with JIT registration, `ACTIONS_RUNNER_INPUT_JITCONFIG`) comes from a Secret through
//! `valueFrom`, so it is not visible to anyone who can read pods, Runners or logs.

use std::collections::BTreeMap;

use hangar_api::runner_config::ContainerMode;
use hangar_api::{RunnerSpec, label};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, EphemeralVolumeSource,
    ObjectFieldSelector, PersistentVolumeClaimSpec, PersistentVolumeClaimTemplate, Pod, PodSpec,
    SecretKeySelector, SecurityContext, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Name of the runner container; other controllers and the simulator find it by this name.
pub const RUNNER_CONTAINER: &str = "runner";
/// Name of the docker-in-docker sidecar.
pub const DOCKER_CONTAINER: &str = "docker";
/// Key of the registration token in the registration Secret.
pub const TOKEN_KEY: &str = "runner_token";
/// Key of the encoded JIT configuration in the registration Secret.
pub const JIT_CONFIG_KEY: &str = "jit_config";

/// Controller-wide defaults and the registration Secret for this runner.
#[derive(Clone, Debug)]
pub struct PodDefaults {
    /// Runner image when the spec names none (`--runner-image`).
    pub runner_image: String,
    /// Pull policy of the runner image when the spec names none.
    pub runner_image_pull_policy: String,
    /// The dind sidecar image (`--docker-image`).
    pub docker_image: String,
    /// Docker group GID when the image name does not reveal it (`--docker-gid`).
    pub docker_gid: String,
    /// Registry mirror for dockerd when the spec names none.
    pub docker_registry_mirror: Option<String>,
    /// GitHub's web URL passed as `GITHUB_URL` (e.g. `https://github.com/` or ghsim's URL).
    pub github_url: String,
    /// Secret holding the registration credential for this runner.
    pub registration_secret: String,
    /// Register with a JIT configuration instead of a registration token.
    pub jit: bool,
    /// Extra user agent the runner reports.
    pub user_agent: String,
}

impl Default for PodDefaults {
    fn default() -> Self {
        Self {
            runner_image: "summerwind/actions-runner:latest".into(),
            runner_image_pull_policy: "Always".into(),
            docker_image: "docker:dind".into(),
            docker_gid: "121".into(),
            docker_registry_mirror: None,
            github_url: "https://github.com/".into(),
            registration_secret: String::new(),
            jit: false,
            user_agent: format!("hangar/{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// Where the runner's docker daemon lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DockerMode {
    /// A privileged `docker` sidecar (ARC's default).
    Sidecar,
    /// dockerd inside a privileged runner container.
    InRunner,
    /// No docker at all (`dockerEnabled: false` or the kubernetes container mode).
    Disabled,
}

/// The docker mode a spec asks for.
pub fn docker_mode(spec: &RunnerSpec) -> DockerMode {
    let c = &spec.config;
    if c.container_mode == Some(ContainerMode::Kubernetes) || c.docker_enabled == Some(false) {
        DockerMode::Disabled
    } else if c.dockerd_within_runner_container == Some(true) {
        DockerMode::InRunner
    } else {
        DockerMode::Sidecar
    }
}

/// ARC's rule for the docker group GID: the Ubuntu release in the image name decides.
pub fn docker_group_gid(image: &str, default: &str) -> String {
    if image.contains("22.04") || image.contains("24.04") {
        "121".into()
    } else if image.contains("20.04") {
        "1001".into()
    } else {
        default.into()
    }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn env_from_secret(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
    }
}

fn env_from_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..Default::default()
        }),
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..Default::default()
    }
}

fn empty_dir(name: &str, medium: Option<String>, size: Option<Quantity>) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium,
            size_limit: size,
        }),
        ..Default::default()
    }
}

/// Appends `add` to `list`, skipping names already present: user settings win over ours.
fn merge_env(list: &mut Vec<EnvVar>, add: Vec<EnvVar>) {
    for e in add {
        if !list.iter().any(|x| x.name == e.name) {
            list.push(e);
        }
    }
}

fn merge_mounts(list: &mut Vec<VolumeMount>, add: Vec<VolumeMount>) {
    for m in add {
        if !list
            .iter()
            .any(|x| x.mount_path == m.mount_path || x.name == m.name)
        {
            list.push(m);
        }
    }
}

/// The runner environment contract of ARC's runner images, for a runner named `name`.
fn runner_env(
    name: &str,
    spec: &RunnerSpec,
    defaults: &PodDefaults,
    mode: DockerMode,
) -> Vec<EnvVar> {
    let c = &spec.config;
    let work_dir = c.work_dir.clone().unwrap_or_else(|| "/runner/_work".into());
    let mut out = vec![
        env("RUNNER_ORG", c.organization.clone().unwrap_or_default()),
        env("RUNNER_REPO", c.repository.clone().unwrap_or_default()),
        env(
            "RUNNER_ENTERPRISE",
            c.enterprise.clone().unwrap_or_default(),
        ),
        env(
            "RUNNER_LABELS",
            c.labels.clone().unwrap_or_default().join(","),
        ),
        env("RUNNER_GROUP", c.group.clone().unwrap_or_default()),
        env(
            "DOCKER_ENABLED",
            if mode == DockerMode::Disabled {
                "false"
            } else {
                "true"
            },
        ),
        env(
            "DOCKERD_IN_RUNNER",
            if mode == DockerMode::InRunner {
                "true"
            } else {
                "false"
            },
        ),
        env("GITHUB_URL", defaults.github_url.clone()),
        env("RUNNER_WORKDIR", work_dir),
        env(
            "RUNNER_EPHEMERAL",
            if c.ephemeral.unwrap_or(true) {
                "true"
            } else {
                "false"
            },
        ),
        env("RUNNER_STATUS_UPDATE_HOOK", "false"),
        env(
            "GITHUB_ACTIONS_RUNNER_EXTRA_USER_AGENT",
            defaults.user_agent.clone(),
        ),
        env("RUNNER_NAME", name),
    ];
    if defaults.jit {
        out.push(env_from_secret(
            "ACTIONS_RUNNER_INPUT_JITCONFIG",
            &defaults.registration_secret,
            JIT_CONFIG_KEY,
        ));
    } else {
        out.push(env_from_secret(
            "RUNNER_TOKEN",
            &defaults.registration_secret,
            TOKEN_KEY,
        ));
    }
    match mode {
        DockerMode::Sidecar => out.push(env("DOCKER_HOST", "unix:///run/docker.sock")),
        DockerMode::InRunner | DockerMode::Disabled => {}
    }
    if let Some(mtu) = c.docker_mtu {
        out.push(env("MTU", mtu.to_string()));
        out.push(env("DOCKERD_ROOTLESS_ROOTLESSKIT_MTU", mtu.to_string()));
    }
    if let Some(mirror) = c
        .docker_registry_mirror
        .clone()
        .or_else(|| defaults.docker_registry_mirror.clone())
    {
        out.push(env("DOCKER_REGISTRY_MIRROR", mirror));
    }
    if c.container_mode == Some(ContainerMode::Kubernetes) {
        out.push(env(
            "ACTIONS_RUNNER_CONTAINER_HOOKS",
            "/runner/k8s/index.js",
        ));
        out.push(env("ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER", "true"));
        out.push(env_from_field("ACTIONS_RUNNER_POD_NAME", "metadata.name"));
        out.push(env_from_field(
            "ACTIONS_RUNNER_JOB_NAMESPACE",
            "metadata.namespace",
        ));
    }
    out
}

/// Builds the pod for Runner `name` in `namespace` with `labels` (the Runner's own labels, which
/// carry e.g. the template hash) from its spec.
pub fn build(
    name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    spec: &RunnerSpec,
    defaults: &PodDefaults,
) -> Pod {
    let c = &spec.config;
    let p = &spec.pod;
    let mode = docker_mode(spec);
    let kubernetes_mode = c.container_mode == Some(ContainerMode::Kubernetes);
    let work_dir = c.work_dir.clone().unwrap_or_else(|| "/runner/_work".into());
    // An empty image means "the default", as in ARC: its admission webhook writes `image: ""`
    // into every RunnerDeployment it defaults.
    let image = c
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| defaults.runner_image.clone());

    // Volumes: /runner (unless its size is 0), the work dir, and /run for the docker socket.
    let runner_volume_disabled = c
        .volume_size_limit
        .as_ref()
        .is_some_and(|q| q.0.trim() == "0")
        && mode != DockerMode::Sidecar;
    let mut volumes = vec![];
    let mut runner_mounts = vec![];
    if !runner_volume_disabled {
        volumes.push(empty_dir(
            "runner",
            c.volume_storage_medium.clone(),
            c.volume_size_limit.clone(),
        ));
        runner_mounts.push(mount("runner", "/runner"));
    }
    if kubernetes_mode {
        let t = p.work_volume_claim_template.clone().unwrap_or_default();
        volumes.push(Volume {
            name: "work".into(),
            ephemeral: Some(EphemeralVolumeSource {
                volume_claim_template: Some(PersistentVolumeClaimTemplate {
                    metadata: None,
                    spec: PersistentVolumeClaimSpec {
                        access_modes: Some(
                            t.access_modes
                                .iter()
                                .map(|m| m.as_str().to_owned())
                                .collect(),
                        ),
                        storage_class_name: t.storage_class_name.clone(),
                        resources: Some(VolumeResourceRequirements {
                            limits: t.resources.limits.clone(),
                            requests: t.resources.requests.clone(),
                        }),
                        ..Default::default()
                    },
                }),
            }),
            ..Default::default()
        });
    } else {
        volumes.push(empty_dir("work", None, None));
    }
    runner_mounts.push(mount("work", &work_dir));
    if mode == DockerMode::Sidecar {
        let size = c
            .docker_var_run_volume_size_limit
            .clone()
            .unwrap_or_else(|| Quantity("1M".into()));
        volumes.push(empty_dir("var-run", Some("Memory".into()), Some(size)));
        runner_mounts.push(mount("var-run", "/run"));
    }

    // The runner container: the user's `runner` container if given, completed with ours.
    let user_containers = p.containers.clone().unwrap_or_default();
    let mut runner = user_containers
        .iter()
        .find(|c| c.name == RUNNER_CONTAINER)
        .cloned()
        .unwrap_or_else(|| Container {
            name: RUNNER_CONTAINER.into(),
            ..Default::default()
        });
    if runner.image.as_deref().is_none_or(str::is_empty) {
        runner.image = Some(image.clone());
    }
    if runner.image_pull_policy.is_none() {
        runner.image_pull_policy = Some(
            p.image_pull_policy
                .clone()
                .unwrap_or_else(|| defaults.runner_image_pull_policy.clone()),
        );
    }
    let mut runner_env_list = runner.env.take().unwrap_or_default();
    merge_env(&mut runner_env_list, p.env.clone().unwrap_or_default());
    merge_env(&mut runner_env_list, runner_env(name, spec, defaults, mode));
    runner.env = Some(runner_env_list);
    if runner.env_from.is_none() {
        runner.env_from = p.env_from.clone();
    }
    if runner.resources.is_none() {
        runner.resources = p.resources.clone();
    }
    let mut mounts = runner.volume_mounts.take().unwrap_or_default();
    merge_mounts(&mut mounts, p.volume_mounts.clone().unwrap_or_default());
    merge_mounts(&mut mounts, runner_mounts);
    runner.volume_mounts = Some(mounts);
    if mode == DockerMode::InRunner {
        runner.security_context = Some(SecurityContext {
            privileged: Some(true),
            ..runner.security_context.unwrap_or_default()
        });
    }

    let mut containers = vec![runner];
    if mode == DockerMode::Sidecar {
        let mut docker = user_containers
            .iter()
            .find(|c| c.name == DOCKER_CONTAINER)
            .cloned()
            .unwrap_or_else(|| Container {
                name: DOCKER_CONTAINER.into(),
                ..Default::default()
            });
        if docker.image.as_deref().is_none_or(str::is_empty) {
            docker.image = Some(defaults.docker_image.clone());
        }
        if docker.args.is_none() {
            let mut args = vec![
                "dockerd".to_owned(),
                "--host=unix:///run/docker.sock".to_owned(),
                "--group=$(DOCKER_GROUP_GID)".to_owned(),
            ];
            if let Some(mtu) = c.docker_mtu {
                args.push(format!("--mtu={mtu}"));
            }
            if let Some(mirror) = c
                .docker_registry_mirror
                .clone()
                .or_else(|| defaults.docker_registry_mirror.clone())
            {
                args.push(format!("--registry-mirror={mirror}"));
            }
            docker.args = Some(args);
        }
        let mut denv = docker.env.take().unwrap_or_default();
        merge_env(&mut denv, p.docker_env.clone().unwrap_or_default());
        merge_env(
            &mut denv,
            vec![env(
                "DOCKER_GROUP_GID",
                docker_group_gid(&image, &defaults.docker_gid),
            )],
        );
        docker.env = Some(denv);
        let mut dmounts = docker.volume_mounts.take().unwrap_or_default();
        merge_mounts(
            &mut dmounts,
            p.docker_volume_mounts.clone().unwrap_or_default(),
        );
        merge_mounts(
            &mut dmounts,
            vec![mount("work", &work_dir), mount("var-run", "/run")],
        );
        docker.volume_mounts = Some(dmounts);
        if docker.resources.is_none() {
            docker.resources = p.dockerd_container_resources.clone();
        }
        docker.security_context = Some(SecurityContext {
            privileged: Some(true),
            ..docker.security_context.unwrap_or_default()
        });
        containers.push(docker);
    }
    containers.extend(
        user_containers
            .into_iter()
            .filter(|c| c.name != RUNNER_CONTAINER && c.name != DOCKER_CONTAINER),
    );
    containers.extend(p.sidecar_containers.clone().unwrap_or_default());

    let mut volumes_all = p.volumes.clone().unwrap_or_default();
    for v in volumes {
        if !volumes_all.iter().any(|x| x.name == v.name) {
            volumes_all.push(v);
        }
    }

    let mut pod_labels = labels.clone();
    pod_labels.insert(label::ACTIONS_RUNNER.into(), String::new());

    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(pod_labels),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            init_containers: p.init_containers.clone(),
            volumes: Some(volumes_all),
            restart_policy: Some("Never".into()),
            node_selector: p.node_selector.clone(),
            service_account_name: p.service_account_name.clone(),
            automount_service_account_token: p.automount_service_account_token,
            security_context: p.security_context.clone(),
            image_pull_secrets: p.image_pull_secrets.clone(),
            affinity: p.affinity.clone(),
            tolerations: p.tolerations.clone(),
            priority_class_name: p.priority_class_name.clone(),
            termination_grace_period_seconds: p.termination_grace_period_seconds,
            ephemeral_containers: p.ephemeral_containers.clone(),
            host_aliases: p.host_aliases.clone(),
            topology_spread_constraints: p.topology_spread_constraints.clone(),
            runtime_class_name: p.runtime_class_name.clone(),
            dns_policy: p.dns_policy.clone(),
            dns_config: p.dns_config.clone(),
            enable_service_links: p.enable_service_links,
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests;
