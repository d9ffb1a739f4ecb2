//! StatefulSet building and the pure helpers of the RunnerSet controller, without a cluster.

use super::*;

/// The seed 002 example (examples/runnerset-seed002-pod-template.yaml), as stored.
fn seed_example() -> RunnerSet {
    let yaml = include_str!("../../../../../examples/runnerset-seed002-pod-template.yaml");
    let mut set: RunnerSet = serde_yaml::from_str(yaml).unwrap();
    set.metadata.namespace = Some("ci".into());
    set.metadata.uid = Some("uid-1".into());
    set
}

fn defaults() -> PodDefaults {
    PodDefaults {
        github_url: "http://ghsim/".into(),
        ..PodDefaults::default()
    }
}

/// The fallback mode's credential: the StatefulSet's own Secret with a token.
fn secret() -> PodCredential {
    PodCredential::Secret {
        name: "example-abc-registration".into(),
        jit: false,
        runner_id: None,
    }
}

fn runner(sts: &StatefulSet) -> k8s_openapi::api::core::v1::Container {
    pod_spec(sts)
        .containers
        .iter()
        .find(|c| c.name == "runner")
        .cloned()
        .unwrap()
}

fn pod_spec(sts: &StatefulSet) -> k8s_openapi::api::core::v1::PodSpec {
    sts.spec.clone().unwrap().template.spec.unwrap()
}

fn env<'a>(
    c: &'a k8s_openapi::api::core::v1::Container,
    name: &str,
) -> &'a k8s_openapi::api::core::v1::EnvVar {
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn a_runner_statefulset_has_one_replica_and_belongs_to_its_set() {
    let set = seed_example();
    let sts = build_stateful_set(
        &set,
        "example-abc",
        "h1",
        &defaults(),
        "2024-01-01T00:00:00Z",
        &secret(),
    );
    let spec = sts.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(1));
    let owner = &sts.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("RunnerSet", "example", Some(true))
    );
    let labels = sts.metadata.labels.clone().unwrap();
    assert_eq!(labels["runnerset-name"], "example");
    assert_eq!(labels["runner-template-hash"], "h1");
    assert_eq!(
        sts.metadata.annotations.clone().unwrap()["sync-time"],
        "2024-01-01T00:00:00Z"
    );
}

#[test]
fn without_a_selector_pods_are_selected_by_the_runnerset_name_label() {
    let set = seed_example();
    let sts = build_stateful_set(&set, "example-abc", "h1", &defaults(), "t", &secret());
    let spec = sts.spec.clone().unwrap();
    assert_eq!(
        spec.selector.match_labels.clone().unwrap(),
        BTreeMap::from([("runnerset-name".to_owned(), "example".to_owned())])
    );
    let meta = spec.template.metadata.unwrap();
    let labels = meta.labels.unwrap();
    assert_eq!(labels["runnerset-name"], "example");
    assert_eq!(labels["runner-template-hash"], "h1");
    assert_eq!(labels["actions-runner"], "");
    assert_eq!(
        meta.finalizers.unwrap(),
        ["actions.summerwind.dev/runner-pod"]
    );
    assert_eq!(selector_string(&selector(&set)), "runnerset-name=example");
}

#[test]
fn a_given_selector_is_kept_and_the_template_carries_its_labels() {
    let yaml = include_str!("../../../../../examples/runnerset-seed002-statefulset-fields.yaml");
    let set: RunnerSet = serde_yaml::from_str(yaml).unwrap();
    let sts = build_stateful_set(&set, "example-abc", "h1", &defaults(), "t", &secret());
    let spec = sts.spec.unwrap();
    assert_eq!(spec.selector.match_labels.unwrap()["app"], "example");
    assert_eq!(
        spec.template.metadata.unwrap().labels.unwrap()["app"],
        "example"
    );
    assert_eq!(spec.service_name.as_deref(), Some("example"));
}

#[test]
fn the_runner_container_gets_the_runner_environment_and_keeps_the_users_settings() {
    let set = seed_example();
    let sts = build_stateful_set(&set, "example-abc", "h1", &defaults(), "t", &secret());
    let c = runner(&sts);
    assert_eq!(
        env(&c, "RUNNER_NAME").value.as_deref(),
        Some("example-abc-0")
    );
    assert_eq!(
        env(&c, "RUNNER_REPO").value.as_deref(),
        Some("mumoshu/actions-runner-controller-ci")
    );
    assert_eq!(env(&c, "RUNNER_EPHEMERAL").value.as_deref(), Some("false"));
    assert_eq!(env(&c, "DOCKERD_IN_RUNNER").value.as_deref(), Some("true"));
    let token = env(&c, "RUNNER_TOKEN")
        .value_from
        .clone()
        .unwrap()
        .secret_key_ref
        .unwrap();
    assert_eq!(
        (token.name.as_str(), token.key.as_str()),
        ("example-abc-registration", "runner_token")
    );
    let limits = c.resources.unwrap().limits.unwrap();
    assert_eq!(limits["cpu"].0, "4.0");
    let spec = pod_spec(&sts);
    assert_eq!(
        spec.restart_policy.as_deref(),
        Some("Always"),
        "StatefulSets only allow Always"
    );
    assert!(
        spec.security_context.unwrap().se_linux_options.is_some(),
        "pod settings kept"
    );
}

#[test]
fn a_runner_container_is_added_when_the_template_has_none() {
    let mut set = seed_example();
    set.spec.stateful_set.template.spec = None;
    set.spec.config.dockerd_within_runner_container = None;
    let sts = build_stateful_set(&set, "example-abc", "h1", &defaults(), "t", &secret());
    let names: Vec<String> = pod_spec(&sts)
        .containers
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(names, ["runner", "docker"]);
    assert!(runner(&sts).image.is_some());
}

#[test]
fn jit_runners_read_their_configuration_from_the_secret_and_are_born_registered() {
    let set = seed_example();
    let credential = PodCredential::Secret {
        name: "example-abc-registration".into(),
        jit: true,
        runner_id: Some(42),
    };
    let sts = build_stateful_set(&set, "example-abc", "h1", &defaults(), "t", &credential);
    let c = runner(&sts);
    let jit = env(&c, "ACTIONS_RUNNER_INPUT_JITCONFIG")
        .value_from
        .clone()
        .unwrap()
        .secret_key_ref
        .unwrap();
    assert_eq!(jit.key, "jit_config");
    assert!(c.env.iter().flatten().all(|e| e.name != "RUNNER_TOKEN"));
    let annotations = sts
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap();
    assert_eq!(annotations["actions-runner/id"], "42");
}

#[test]
fn the_template_hash_ignores_replicas_and_effective_time_only() {
    let set = seed_example();
    let base = desired_hash(&set);
    let mut scaled = set.clone();
    scaled.spec.stateful_set.replicas = Some(7);
    scaled.spec.effective_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::UNIX_EPOCH,
    ));
    assert_eq!(desired_hash(&scaled), base);
    let mut changed = set.clone();
    changed.spec.config.labels = Some(vec!["gpu".into()]);
    assert_ne!(desired_hash(&changed), base);
}

#[test]
fn statefulset_names_are_fresh_and_short_enough_for_labels() {
    let mut set = seed_example();
    set.metadata.name = Some("a".repeat(60));
    let now = SystemTime::now();
    let (a, b) = (new_name(&set, now), new_name(&set, now));
    assert_ne!(a, b);
    // `controller-revision-hash` = `<statefulset>-<10 characters>` must fit in 63.
    assert!(a.len() <= 52, "{a}");
}

/// A pod with runner container status `status` (`restartCount`, `state`, `lastState`).
fn pod_with_runner(policy: Option<&str>, status: serde_json::Value) -> RunnerPod {
    let mut container = serde_json::json!({
        "name": "runner", "image": "i", "imageID": "", "ready": true,
    });
    for (k, v) in status.as_object().unwrap() {
        container[k] = v.clone();
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "example-abc-0"},
        "spec": {"restartPolicy": policy, "containers": []},
        "status": {"phase": "Running", "containerStatuses": [container]}
    }))
    .unwrap()
}

#[test]
fn a_runner_counts_as_finished_only_when_its_current_run_cannot_come_back() {
    use serde_json::json;
    let running = json!({"running": {"startedAt": "2030-01-01T12:00:00Z"}});
    let exited = json!({"terminated": {"exitCode": 0, "finishedAt": "2030-01-01T12:00:05Z"}});
    let back_off = json!({"waiting": {"reason": "CrashLoopBackOff"}});
    let cannot_create = json!({"waiting": {"reason": "CreateContainerConfigError"}});
    let none = json!(null);
    // (restartPolicy, restartCount, state, lastState, credential spent)
    //   -> (finished, restarted, restarting)
    let cases = [
        // Webhook mode: `Never`; nothing restarts, a terminated runner container is the end.
        (
            Some("Never"),
            0,
            &running,
            &none,
            false,
            (false, false, false),
        ),
        (
            Some("Never"),
            0,
            &exited,
            &none,
            false,
            (true, false, false),
        ),
        // Fallback mode: the template's `Always` stays.
        (
            Some("Always"),
            0,
            &running,
            &none,
            false,
            (false, false, false),
        ),
        (None, 0, &running, &none, true, (false, false, false)),
        // Completed, but the kubelet starts it again: not finished while it may register.
        (
            Some("Always"),
            0,
            &exited,
            &none,
            false,
            (false, false, true),
        ),
        (
            Some("Always"),
            0,
            &exited,
            &none,
            true,
            (false, false, true),
        ),
        (
            Some("Always"),
            1,
            &back_off,
            &exited,
            true,
            (false, false, true),
        ),
        // The next run cannot be created, its credential taken back: finished for good.
        (
            Some("Always"),
            0,
            &cannot_create,
            &exited,
            true,
            (true, false, false),
        ),
        (None, 2, &cannot_create, &exited, true, (true, false, false)),
        (
            Some("Always"),
            0,
            &cannot_create,
            &exited,
            false,
            (false, false, true),
        ),
        // Restarted (chaos seed 2): running again, restartCount 1. Its new run registered again
        // and may be running the next job: never finished, whatever the restart count says.
        (
            Some("Always"),
            1,
            &running,
            &exited,
            false,
            (false, true, false),
        ),
        (None, 1, &running, &exited, true, (false, true, false)),
        // A pod recreated after its credential was taken back cannot start its runner.
        (
            Some("Always"),
            0,
            &cannot_create,
            &none,
            true,
            (true, false, false),
        ),
        (
            Some("Always"),
            0,
            &cannot_create,
            &none,
            false,
            (false, false, false),
        ),
    ];
    for (policy, restarts, state, last, spent, (finished, restarted, restarting)) in cases {
        let pod = pod_with_runner(
            policy,
            json!({"restartCount": restarts, "state": state, "lastState": last}),
        );
        let view = stateful_pod_view(&pod, view_of(&pod, spent));
        let case = format!("{policy:?} restarts={restarts} {state} last={last} spent={spent}");
        assert_eq!(view.is_stopped(), finished, "{case}");
        assert_eq!(view.runner_restarted, restarted, "{case}");
        assert_eq!(view.runner_restarting, restarting, "{case}");
        if finished || restarting {
            assert!(
                view.finished_at.is_some() == (last != &none || state == &exited),
                "{case}"
            );
        }
    }
}

#[test]
fn the_credential_of_a_started_run_is_taken_back_in_pods_that_restart() {
    use serde_json::json;
    let running = json!({"running": {}});
    let waiting = json!({"waiting": {"reason": "ContainerCreating"}});
    // (restartPolicy, restartCount, state) -> take the credential back
    let cases = [
        (Some("Always"), 0, &running, true),
        (None, 1, &running, true),
        (Some("Always"), 0, &waiting, false),
        (Some("Never"), 0, &running, false),
    ];
    for (policy, restarts, state, spend) in cases {
        let pod = pod_with_runner(policy, json!({"restartCount": restarts, "state": state}));
        let (count, state_now) = crate::controllers::runner_container_state(&pod);
        let observed = crate::controllers::runner_observed(&pod, false, count, state_now);
        assert_eq!(
            hangar_core::runner_container::should_spend(&observed),
            spend,
            "{policy:?} restarts={restarts} {state}"
        );
    }
}

#[test]
fn a_pod_deleted_by_someone_else_stands_for_its_replacement() {
    // (deleting, unregistration requested by owner sync, runner terminated) -> replaced
    let cases = [
        (false, false, false, false),
        (true, false, false, true),
        // Killed by the deletion (or finished first: the StatefulSet recreates it either way).
        (true, false, true, true),
        // Owner sync retires it: not replaced.
        (true, true, false, false),
        (true, true, true, false),
    ];
    for (deleting, requested, terminated, replaced) in cases {
        let mut meta = serde_json::json!({"name": "example-abc-0", "annotations": {}});
        if deleting {
            meta["deletionTimestamp"] = serde_json::json!("2030-01-01T12:00:30Z");
            meta["deletionGracePeriodSeconds"] = serde_json::json!(0);
        }
        if requested {
            meta["annotations"]["actions-runner/unregistration-request-timestamp"] =
                serde_json::json!("2030-01-01T11:00:00Z");
        }
        let state = if terminated {
            serde_json::json!({"terminated": {"exitCode": 0, "finishedAt": "2030-01-01T12:00:05Z"}})
        } else {
            serde_json::json!({"running": {}})
        };
        let pod: RunnerPod = serde_json::from_value(serde_json::json!({
            "metadata": meta,
            "spec": {"restartPolicy": "Never", "containers": []},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "runner", "image": "i", "imageID": "", "ready": true,
                "restartCount": 0, "state": state
            }]}
        }))
        .unwrap();
        let case = format!("deleting={deleting} requested={requested} terminated={terminated}");
        assert_eq!(replaced_by_its_stateful_set(&pod), replaced, "{case}");
        let view = stateful_pod_view(&pod, view_of(&pod, false));
        if replaced {
            // One pending runner: owner sync neither replaces nor deletes its StatefulSet.
            assert!(!view.is_stopped() && !view.deleting, "{case}");
            assert_eq!(
                view.phase,
                hangar_core::owner_sync::PodPhase::Pending,
                "{case}"
            );
        } else {
            assert_eq!(view.is_stopped(), terminated, "{case}");
        }
    }
}

#[test]
fn with_the_pod_webhook_the_template_asks_for_injection_and_names_no_credential() {
    let set = seed_example();
    for jit in [false, true] {
        let sts = build_stateful_set(
            &set,
            "example-abc",
            "h1",
            &defaults(),
            "t",
            &PodCredential::Webhook { jit },
        );
        let c = runner(&sts);
        let names: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
        assert!(
            !names.contains(&"RUNNER_TOKEN") && !names.contains(&"ACTIONS_RUNNER_INPUT_JITCONFIG"),
            "{names:?}"
        );
        // No Secret is named anywhere in the template.
        assert!(c.env.iter().flatten().all(|e| {
            e.value_from
                .as_ref()
                .is_none_or(|v| v.secret_key_ref.is_none())
        }));
        // The rest of the runner environment is there (the webhook reads the scope from it).
        assert_eq!(
            env(&c, "RUNNER_REPO").value.as_deref(),
            Some("mumoshu/actions-runner-controller-ci")
        );
        assert_eq!(
            env(&c, "RUNNER_NAME").value.as_deref(),
            Some("example-abc-0")
        );
        let meta = sts.spec.clone().unwrap().template.metadata.unwrap();
        let labels = meta.labels.unwrap();
        assert_eq!(
            labels["actions-runner-controller/inject-registration-token"],
            "true"
        );
        assert_eq!(labels["runnerset-name"], "example");
        let annotations = meta.annotations.unwrap_or_default();
        assert_eq!(
            annotations
                .get("hangar.dev/registration")
                .map(String::as_str),
            jit.then_some("jit"),
            "jit={jit}"
        );
        assert!(!annotations.contains_key("actions-runner/id"));
        // The StatefulSet still says Always; the webhook makes each pod Never.
        assert_eq!(pod_spec(&sts).restart_policy.as_deref(), Some("Always"));
        // The selector does not include the inject label (ARC's does not need it either).
        let selector = sts.spec.unwrap().selector.match_labels.unwrap();
        assert!(!selector.contains_key("actions-runner-controller/inject-registration-token"));
    }
}

#[test]
fn without_the_pod_webhook_the_template_reads_its_secret_and_asks_for_nothing() {
    let sts = build_stateful_set(
        &seed_example(),
        "example-abc",
        "h1",
        &defaults(),
        "t",
        &secret(),
    );
    let labels = sts.spec.unwrap().template.metadata.unwrap().labels.unwrap();
    assert!(!labels.contains_key("actions-runner-controller/inject-registration-token"));
}

#[test]
fn the_jit_annotation_on_the_set_or_its_template_selects_jit() {
    let mut set = seed_example();
    assert!(!uses_jit(&set, false));
    assert!(uses_jit(&set, true));
    set.metadata.annotations =
        Some([("hangar.dev/registration".to_owned(), "jit".to_owned())].into());
    assert!(uses_jit(&set, false));
}

#[test]
fn claims_of_a_runner_statefulset_name_their_set_and_statefulset() {
    let yaml = include_str!("../../../../../examples/runnerset-volume-cache.yaml");
    let mut set: RunnerSet = serde_yaml::from_str(yaml).unwrap();
    set.metadata.namespace = Some("ci".into());
    set.metadata.uid = Some("uid-1".into());
    let sts = build_stateful_set(&set, "cached-builds-abc", "h1", &defaults(), "t", &secret());
    let templates = sts.spec.unwrap().volume_claim_templates.unwrap();
    assert_eq!(templates.len(), 1);
    assert_eq!(
        templates[0].metadata.name.as_deref(),
        Some("var-lib-docker")
    );
    let labels = templates[0].metadata.labels.clone().unwrap();
    assert_eq!(labels["runnerset-name"], "cached-builds");
    assert_eq!(labels["runner-statefulset-name"], "cached-builds-abc");
    // The rest of the user's claim is kept.
    let spec = templates[0].spec.clone().unwrap();
    assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
}

#[test]
fn claims_and_volumes_are_seen_as_volume_reuse_needs_them() {
    use k8s_openapi::api::core::v1::{
        ObjectReference, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
        PersistentVolumeSpec, PersistentVolumeStatus,
    };
    let pvc = |phase: &str| PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("cache-x-abc-0".into()),
            namespace: Some("ci".into()),
            labels: Some(
                [
                    ("runnerset-name".to_owned(), "x".to_owned()),
                    ("runner-statefulset-name".to_owned(), "x-abc".to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            volume_name: Some("pv1".into()),
            ..Default::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            phase: Some(phase.into()),
            ..Default::default()
        }),
    };
    let view = volumes::claim_view(&pvc("Bound"));
    assert_eq!(view.stateful_set.as_deref(), Some("x-abc"));
    assert_eq!(view.bound_volume.as_deref(), Some("pv1"));
    // Pre-bound by name but not Bound: the volume may belong to someone else.
    assert_eq!(volumes::claim_view(&pvc("Pending")).bound_volume, None);
    assert_eq!(
        volumes::claim_trigger(&pvc("Bound")),
        Some(ObjectRef::new("x").within("ci"))
    );

    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some("pv1".into()),
            labels: Some([("pending-cleanup".to_owned(), "x".to_owned())].into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            claim_ref: Some(ObjectReference {
                namespace: Some("ci".into()),
                name: Some("cache-x-abc-0".into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: Some(PersistentVolumeStatus {
            phase: Some("Released".into()),
            ..Default::default()
        }),
    };
    let view = volumes::volume_view(&pv).unwrap();
    assert!(view.released);
    assert_eq!(view.pending_cleanup, "x");
    assert_eq!(
        view.claim,
        Some(("ci".to_owned(), "cache-x-abc-0".to_owned()))
    );
    assert_eq!(
        volumes::volume_trigger(&pv, None),
        Some(ObjectRef::new("x").within("ci"))
    );
    assert_eq!(
        volumes::volume_trigger(&pv, Some("ci")),
        volumes::volume_trigger(&pv, None)
    );
    // In single-namespace mode, volumes of claims elsewhere trigger nothing.
    assert_eq!(volumes::volume_trigger(&pv, Some("other")), None);
    let mut unlabelled = pv.clone();
    unlabelled.metadata.labels = None;
    assert_eq!(volumes::volume_view(&unlabelled), None);
}

/// `pod` as owner sync sees it with a healthy runner GitHub says nothing about.
fn view_of(pod: &RunnerPod, spent: bool) -> PodView {
    hangar_runtime::pod::observe::pod_view(
        pod,
        spent,
        Health::Healthy,
        hangar_core::health::GitHubState::Unknown,
    )
}
