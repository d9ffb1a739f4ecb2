//! The chart rendered by `helm`, without a cluster: lint, what each combination of values
//! produces, the RBAC rules against the list of calls the code makes, hardening, secrets, and
//! the files that must stay in step with the rest of the repository (CRDs, Grafana dashboard).

use std::collections::BTreeSet;

use hangar_chart_tests::{
    CONTROLLER_CLUSTER_NEEDS, CONTROLLER_NEEDS, Permission, WEBHOOK_SERVER_NEEDS, admission_needs,
    chart_dir, documents, granted, helm, kinds_and_names, of_kind, output, render, repo_root,
    single_namespace_controller_needs, str_at,
};
use serde_yaml::Value;

const NS: &str = "hangar-system";

fn expected(needs: &[Permission]) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = needs
        .iter()
        .map(|(g, r, v)| ((*g).to_owned(), (*r).to_owned(), (*v).to_owned()))
        .collect();
    v.sort();
    v
}

fn deployment<'a>(objects: &'a [Value], component: &str) -> &'a Value {
    of_kind(objects, "Deployment")
        .into_iter()
        .find(|d| str_at(d, &["metadata", "labels", "app.kubernetes.io/component"]) == component)
        .unwrap_or_else(|| {
            panic!(
                "no {component} Deployment in {:?}",
                kinds_and_names(objects)
            )
        })
}

fn args(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .expect("container args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_owned())
        .collect()
}

#[test]
fn helm_is_built_on_first_use_and_reports_its_pinned_version() {
    let v = output(helm().command().args(["version", "--short"]));
    assert!(v.starts_with(hangar_testkit::HELM_VERSION), "{v}");
}

#[test]
fn chart_passes_helm_lint_strict_with_every_tested_combination() {
    for sets in [
        &[][..],
        &["scope.singleNamespace=true"][..],
        &["replicaCount=2"][..],
        &[
            "githubWebhookServer.enabled=true",
            "githubWebhookServer.ingress.enabled=true",
        ][..],
        &["admissionWebHooks.enabled=true"][..],
        &[
            "admissionWebHooks.enabled=true",
            "scope.singleNamespace=true",
        ][..],
        &[
            "authSecret.create=true",
            "authSecret.github_app_id=12345",
            "authSecret.github_app_installation_id=67890",
            "authSecret.github_app_private_key=pem",
        ][..],
    ] {
        let mut cmd = helm().command();
        cmd.args(["lint", "--strict", "--namespace", NS])
            .arg(chart_dir());
        for set in sets {
            cmd.args(["--set", set]);
        }
        let out = output(&mut cmd);
        assert!(out.contains("0 chart(s) failed"), "{sets:?}: {out}");
    }
}

#[test]
fn default_values_render_a_cluster_wide_controller_with_its_admission_webhooks() {
    let objects = documents(&render(NS, &[]));
    assert_eq!(
        kinds_and_names(&objects),
        [
            "ServiceAccount/hangar",
            "ClusterRole/hangar-hangar-system",
            "ClusterRole/hangar-cluster-hangar-system",
            "ClusterRole/hangar-admission-hangar-system",
            "ClusterRoleBinding/hangar-hangar-system",
            "ClusterRoleBinding/hangar-cluster-hangar-system",
            "ClusterRoleBinding/hangar-admission-hangar-system",
            "Role/hangar-admission",
            "RoleBinding/hangar-admission",
            "Service/hangar-webhook",
            "Service/hangar-metrics",
            "Deployment/hangar",
            "MutatingWebhookConfiguration/hangar-hangar-system-mutating-webhook-configuration",
            "ValidatingWebhookConfiguration/hangar-hangar-system-validating-webhook-configuration",
        ]
    );
    // Only the RunnerSet pod webhook fails closed (see values.yaml).
    let policies: Vec<&str> = [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    .iter()
    .flat_map(|kind| of_kind(&objects, kind))
    .flat_map(|c| c["webhooks"].as_sequence().unwrap())
    .map(|w| w["failurePolicy"].as_str().unwrap())
    .collect();
    assert_eq!(
        policies,
        [
            "Fail", "Ignore", "Ignore", "Ignore", "Ignore", "Ignore", "Ignore"
        ]
    );
    let without = documents(&render(NS, &["admissionWebHooks.enabled=false"]));
    assert!(
        kinds_and_names(&without)
            .iter()
            .all(|k| !k.contains("admission") && !k.contains("WebhookConfiguration")),
        "{:?}",
        kinds_and_names(&without)
    );
    assert_cluster_role(&objects);
    let args = args(deployment(&objects, "controller"));
    assert_eq!(args[0], "run");
    // The ClusterRole lists and watches no Secret, so neither does the controller.
    assert!(
        args.contains(&"--watch-credential-secrets=false".to_owned()),
        "{args:?}"
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--watch-namespace")),
        "{args:?}"
    );
    assert!(
        !args.iter().any(|a| a.contains("leader-election")),
        "{args:?}"
    );
}

#[test]
fn controller_role_grants_exactly_what_the_code_calls() {
    // The admission webhooks' roles are checked with them, below.
    let objects = documents(&render(NS, &["admissionWebHooks.enabled=false"]));
    let roles = of_kind(&objects, "ClusterRole");
    assert_eq!(roles.len(), 2);
    assert_eq!(granted(roles[0]), expected(CONTROLLER_NEEDS));
    assert_eq!(
        str_at(roles[1], &["metadata", "name"]),
        "hangar-cluster-hangar-system"
    );
    assert_eq!(granted(roles[1]), expected(CONTROLLER_CLUSTER_NEEDS));
}

/// PersistentVolumes and Nodes are cluster-scoped: RunnerSet volume reuse and runner health
/// need their ClusterRole (and only that) whatever the scope, bound to the controller's
/// ServiceAccount.
fn assert_cluster_role(objects: &[Value]) {
    let roles = of_kind(objects, "ClusterRole");
    let role = roles
        .iter()
        .find(|r| str_at(r, &["metadata", "name"]) == "hangar-cluster-hangar-system")
        .expect("the cluster-scoped ClusterRole");
    assert_eq!(granted(role), expected(CONTROLLER_CLUSTER_NEEDS));
    let binding = of_kind(objects, "ClusterRoleBinding")
        .into_iter()
        .find(|b| str_at(b, &["metadata", "name"]) == "hangar-cluster-hangar-system")
        .expect("its binding");
    assert_eq!(
        str_at(binding, &["roleRef", "name"]),
        "hangar-cluster-hangar-system"
    );
    assert_eq!(str_at(&binding["subjects"][0], &["name"]), "hangar");
    assert_eq!(str_at(&binding["subjects"][0], &["namespace"]), NS);
}

#[test]
fn single_namespace_mode_renders_only_roles_in_the_watched_namespace() {
    let objects = documents(&render(
        NS,
        &[
            "scope.singleNamespace=true",
            "scope.watchNamespace=ci",
            "admissionWebHooks.enabled=false",
        ],
    ));
    // The only cluster-scoped grant: PersistentVolumes for volume reuse and Nodes read for
    // runner health (the admission
    // webhooks' configurations, checked with them below, are cluster-scoped too).
    assert_eq!(of_kind(&objects, "ClusterRole").len(), 1);
    assert_eq!(of_kind(&objects, "ClusterRoleBinding").len(), 1);
    assert_cluster_role(&objects);
    let roles = of_kind(&objects, "Role");
    assert_eq!(roles.len(), 1);
    assert_eq!(str_at(roles[0], &["metadata", "namespace"]), "ci");
    assert_eq!(
        granted(roles[0]),
        expected(&single_namespace_controller_needs())
    );
    let binding = of_kind(&objects, "RoleBinding")[0];
    assert_eq!(str_at(binding, &["metadata", "namespace"]), "ci");
    assert_eq!(str_at(&binding["subjects"][0], &["namespace"]), NS);
    let controller = args(deployment(&objects, "controller"));
    assert!(controller.contains(&"--watch-namespace=ci".to_owned()));
    assert!(controller.contains(&"--watch-credential-secrets=true".to_owned()));

    // Without watchNamespace, the release namespace is watched (ARC's behaviour).
    let objects = documents(&render(NS, &["scope.singleNamespace=true"]));
    assert!(args(deployment(&objects, "controller")).contains(&format!("--watch-namespace={NS}")));
}

#[test]
fn leader_election_and_its_lease_role_come_with_a_second_replica() {
    for (sets, elected) in [
        (&["replicaCount=1"][..], false),
        (&["replicaCount=2"][..], true),
        (&["replicaCount=1", "enableLeaderElection=true"][..], true),
    ] {
        let objects = documents(&render(NS, sets));
        let args = args(deployment(&objects, "controller"));
        assert_eq!(
            args.contains(&"--enable-leader-election".to_owned()),
            elected,
            "{sets:?}: {args:?}"
        );
        let lease_roles: Vec<_> = of_kind(&objects, "Role")
            .into_iter()
            .filter(|r| str_at(r, &["metadata", "name"]).ends_with("-leader-election"))
            .collect();
        assert_eq!(lease_roles.len(), usize::from(elected), "{sets:?}");
        if elected {
            assert_eq!(str_at(lease_roles[0], &["metadata", "namespace"]), NS);
            assert_eq!(
                granted(lease_roles[0]),
                expected(&[
                    ("coordination.k8s.io", "leases", "create"),
                    ("coordination.k8s.io", "leases=hangar-controller", "get"),
                    ("coordination.k8s.io", "leases=hangar-controller", "patch"),
                    ("coordination.k8s.io", "leases=hangar-controller", "update"),
                ])
            );
        }
    }
}

#[test]
fn webhook_server_gets_its_own_account_with_read_and_reserve_rights() {
    let objects = documents(&render(
        NS,
        &[
            "githubWebhookServer.enabled=true",
            "githubWebhookServer.ingress.enabled=true",
            "githubWebhookServer.queueLimit=250",
        ],
    ));
    let names = kinds_and_names(&objects);
    for expected in [
        "ServiceAccount/hangar-webhook-server",
        "ClusterRole/hangar-webhook-server-hangar-system",
        "Deployment/hangar-webhook-server",
        "Service/hangar-webhook-server",
        "Ingress/hangar-webhook-server",
    ] {
        assert!(
            names.contains(&expected.to_owned()),
            "{expected} in {names:?}"
        );
    }
    let role = of_kind(&objects, "ClusterRole")
        .into_iter()
        .find(|r| str_at(r, &["metadata", "name"]).contains("webhook-server"))
        .unwrap();
    assert_eq!(granted(role), expected(WEBHOOK_SERVER_NEEDS));
    let server = deployment(&objects, "github-webhook-server");
    assert_eq!(
        str_at(&server["spec"]["template"]["spec"], &["serviceAccountName"]),
        "hangar-webhook-server"
    );
    let args = args(server);
    assert_eq!(args[0], "webhook-server");
    assert!(
        args.contains(&"--webhook-queue-limit=250".to_owned()),
        "{args:?}"
    );
}

/// The admission flags a Deployment's args add to `base`'s, parsed by `hangar run`'s own
/// argument definitions (so a misspelt flag fails here, not in a crash-looping pod).
fn admission_flags(base: &[String], with: &[String]) -> hangar::admission::cli::AdmissionArgs {
    use clap::{Args as _, FromArgMatches as _};
    let added: Vec<&String> = with.iter().filter(|a| !base.contains(a)).collect();
    let cli = hangar::admission::cli::AdmissionArgs::augment_args(clap::Command::new("run"));
    let matches = cli
        .try_get_matches_from(std::iter::once(&"run".to_owned()).chain(added.iter().copied()))
        .unwrap_or_else(|e| panic!("the chart's admission flags {added:?}: {e}"));
    hangar::admission::cli::AdmissionArgs::from_arg_matches(&matches).unwrap()
}

/// `webhooks` of a rendered configuration, or of one the binary would create, as JSON.
fn webhooks(object: impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(object).unwrap()["webhooks"].clone()
}

#[test]
fn admission_webhooks_are_the_binarys_own_behind_a_service_and_named_in_its_flags() {
    use hangar::admission::configurations::{Endpoint, Registration, mutating, validating};
    for single_namespace in [false, true] {
        let scope = format!("scope.singleNamespace={single_namespace}");
        let base = documents(&render(NS, &[&scope, "admissionWebHooks.enabled=false"]));
        let objects = documents(&render(NS, &[&scope, "admissionWebHooks.enabled=true"]));
        let controller = deployment(&objects, "controller");
        let flags = admission_flags(&args(deployment(&base, "controller")), &args(controller));

        // The controller listens where the Service sends the apiserver.
        assert_eq!(flags.admission_addr, Some("0.0.0.0:9443".parse().unwrap()));
        let ports = &controller["spec"]["template"]["spec"]["containers"][0]["ports"];
        let admission_port = ports
            .as_sequence()
            .unwrap()
            .iter()
            .find(|p| str_at(p, &["name"]) == "admission")
            .expect("a container port named admission");
        assert_eq!(admission_port["containerPort"].as_u64(), Some(9443));
        let service_name = flags.webhook_service_name.clone().unwrap();
        let service = of_kind(&objects, "Service")
            .into_iter()
            .find(|s| str_at(s, &["metadata", "name"]) == service_name)
            .unwrap_or_else(|| panic!("no Service {service_name}"));
        assert_eq!(flags.webhook_service_namespace, NS);
        assert_eq!(str_at(service, &["metadata", "namespace"]), NS);
        assert_eq!(
            service["spec"]["ports"][0]["port"].as_i64(),
            Some(i64::from(flags.webhook_service_port))
        );
        assert_eq!(
            str_at(&service["spec"]["ports"][0], &["targetPort"]),
            "admission"
        );
        assert_eq!(
            service["spec"]["selector"],
            controller["spec"]["selector"]["matchLabels"]
        );

        // The configurations are exactly what `--admission-create-configurations` would create
        // for these flags (names, paths, rules, failurePolicy Fail), minus the caBundle the
        // controller patches in; in single-namespace mode limited to the watched namespace.
        assert!(!flags.admission_create_configurations);
        let mut registration = Registration::new(Endpoint::Service {
            namespace: flags.webhook_service_namespace.clone(),
            name: service_name.clone(),
            port: flags.webhook_service_port,
        });
        registration.mutating_name = flags.mutating_webhook_configuration.clone();
        registration.validating_name = flags.validating_webhook_configuration.clone();
        if single_namespace {
            registration.namespace_selector = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                    match_labels: Some(
                        [("kubernetes.io/metadata.name".to_owned(), NS.to_owned())].into(),
                    ),
                    match_expressions: None,
                },
            );
        }
        for (kind, name, want) in [
            (
                "MutatingWebhookConfiguration",
                &flags.mutating_webhook_configuration,
                webhooks(mutating(&registration, &[])),
            ),
            (
                "ValidatingWebhookConfiguration",
                &flags.validating_webhook_configuration,
                webhooks(validating(&registration, &[])),
            ),
        ] {
            let rendered = of_kind(&objects, kind);
            assert_eq!(rendered.len(), 1, "{kind}");
            assert_eq!(str_at(rendered[0], &["metadata", "name"]), name);
            assert_eq!(webhooks(rendered[0]), want, "{kind}, {scope}");
        }
        assert!(
            !serde_yaml::to_string(&objects)
                .unwrap()
                .contains("caBundle"),
            "caBundle is the controller's to write"
        );

        // RBAC: exactly the two configurations and the certificate Secret the flags name.
        assert_eq!(flags.webhook_tls_secret, "hangar-webhook-tls");
        let needs = admission_needs(NS);
        let role = |kind: &str, name: &str| {
            of_kind(&objects, kind)
                .into_iter()
                .find(|r| str_at(r, &["metadata", "name"]) == name)
                .unwrap_or_else(|| panic!("no {kind}/{name} in {:?}", kinds_and_names(&objects)))
        };
        let cluster_role = role("ClusterRole", &format!("hangar-admission-{NS}"));
        assert_eq!(granted(cluster_role), needs.cluster);
        let secret_role = role("Role", "hangar-admission");
        assert_eq!(str_at(secret_role, &["metadata", "namespace"]), NS);
        assert_eq!(granted(secret_role), needs.release_namespace);
        for binding in [
            role("ClusterRoleBinding", &format!("hangar-admission-{NS}")),
            role("RoleBinding", "hangar-admission"),
        ] {
            assert_eq!(str_at(&binding["subjects"][0], &["name"]), "hangar");
            assert_eq!(str_at(&binding["subjects"][0], &["namespace"]), NS);
        }
    }
}

#[test]
fn the_dockerfile_builds_the_binary_the_chart_runs_as_the_user_the_chart_expects() {
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    let final_stage = dockerfile.rsplit("\nFROM ").next().expect("a final stage");
    for line in [
        "COPY --from=build /out/hangar /hangar",
        "USER 65532:65532",
        r#"ENTRYPOINT ["/hangar"]"#,
        r#"CMD ["run"]"#,
    ] {
        assert!(
            final_stage.lines().any(|l| l.trim() == line),
            "{line:?} in the final stage:\n{final_stage}"
        );
    }
    assert!(
        final_stage.starts_with("gcr.io/distroless/"),
        "{final_stage}"
    );
    assert!(
        dockerfile.contains("--package hangar --bin hangar")
            && dockerfile.contains("target/release/hangar /out/hangar"),
        "{dockerfile}"
    );
    let manifest = std::fs::read_to_string(repo_root().join("crates/operator/Cargo.toml")).unwrap();
    assert!(
        manifest.contains("[[bin]]\nname = \"hangar\""),
        "{manifest}"
    );
    // The builder is at least the workspace's minimum Rust.
    let version = |text: &str, key: &str| -> (u32, u32) {
        let v = text
            .lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key}"))
            .trim_matches(|c| c == '"' || c == ' ' || c == '=');
        let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap());
        (parts.next().unwrap(), parts.next().unwrap())
    };
    let workspace = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    assert!(version(&dockerfile, "ARG RUST_VERSION") >= version(&workspace, "rust-version"));

    // The chart runs that entrypoint (no `command`) with a subcommand, as uid 65532.
    let objects = documents(&render(NS, &["githubWebhookServer.enabled=true"]));
    for (component, subcommand) in [
        ("controller", "run"),
        ("github-webhook-server", "webhook-server"),
    ] {
        let pod = &deployment(&objects, component)["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        assert!(
            container.get("command").is_none(),
            "{component}: {container:?}"
        );
        assert_eq!(args(deployment(&objects, component))[0], subcommand);
        assert_eq!(str_at(container, &["image"]), "hangar:0.1.0");
        assert_eq!(pod["securityContext"]["runAsUser"].as_u64(), Some(65532));
    }
}

#[test]
fn values_reach_the_controller_flags() {
    let objects = documents(&render(
        NS,
        &[
            "syncPeriod=30s",
            "maxConcurrentReconciles=8",
            "defaultScaleDownDelay=5m",
            "dockerRegistryMirror=https://mirror.example.com",
            "dockerGID=121",
            "image.actionsRunnerRepositoryAndTag=example.com/runner:v2",
            "image.dindSidecarRepositoryAndTag=example.com/dind:27",
            "jit=true",
            "commonRunnerLabels={gpu,fast}",
            "registrationOnlyRunners=true",
            "logLevel=debug",
            "logFormat=json",
            "metrics.port=9090",
        ],
    ));
    let args = args(deployment(&objects, "controller"));
    for flag in [
        "--sync-period=30s",
        "--max-concurrent-reconciles=8",
        "--default-scale-down-delay=5m",
        "--docker-registry-mirror=https://mirror.example.com",
        "--docker-gid=121",
        "--runner-image=example.com/runner:v2",
        "--docker-image=example.com/dind:27",
        "--jit",
        "--common-runner-labels=gpu,fast",
        "--registration-only-runners",
        "--log-level=debug",
        "--log-format=json",
        "--metrics-addr=:9090",
        "--health-probe-bind-address=:8081",
    ] {
        assert!(args.contains(&flag.to_owned()), "{flag} in {args:?}");
    }
}

/// Every server limit, sweep and pull flag of the binary is a value, rendered by default with
/// the code's own default (so installing the chart changes nothing), and set from the value.
#[test]
fn server_limits_the_sweep_and_the_pull_are_values_defaulting_to_the_codes_defaults() {
    assert_eq!(
        hangar::pull::DEFAULT_INTERVAL,
        std::time::Duration::from_secs(5 * 60),
        "the chart's webhookPullInterval (5m) no longer matches the code's default"
    );
    let on = [
        "admissionWebHooks.enabled=true",
        "githubWebhookServer.enabled=true",
    ];
    let objects = documents(&render(NS, &on));
    let controller = args(deployment(&objects, "controller"));
    let server = args(deployment(&objects, "github-webhook-server"));
    let defaults = [
        (
            &controller,
            format!(
                "--metrics-max-connections={}",
                hangar::metrics::DEFAULT_MAX_CONNECTIONS
            ),
        ),
        (
            &controller,
            format!(
                "--admission-max-connections={}",
                hangar::admission::DEFAULT_MAX_CONNECTIONS
            ),
        ),
        (
            &controller,
            format!(
                "--admission-max-body-bytes={}",
                hangar::admission::DEFAULT_MAX_BODY_BYTES
            ),
        ),
        (&controller, "--http-header-read-timeout=10s".to_owned()),
        (&controller, "--http-request-timeout=30s".to_owned()),
        (
            &controller,
            "--leaked-registration-sweep-interval=10m".to_owned(),
        ),
        (&controller, "--leaked-registration-grace=30m".to_owned()),
        (&controller, "--webhook-pull-interval=5m".to_owned()),
        (
            &server,
            format!(
                "--webhook-max-connections={}",
                hangar::webhook_server::DEFAULT_MAX_CONNECTIONS
            ),
        ),
        (
            &server,
            format!(
                "--webhook-max-body-bytes={}",
                hangar::webhook_server::DEFAULT_MAX_BODY_BYTES
            ),
        ),
        (&server, "--http-header-read-timeout=10s".to_owned()),
        (&server, "--http-request-timeout=30s".to_owned()),
    ];
    for (args, flag) in &defaults {
        assert!(args.contains(flag), "{flag} in {args:?}");
    }
    let set = [
        "metrics.maxConnections=8",
        "admissionWebHooks.maxConnections=9",
        "admissionWebHooks.maxBodyBytes=100000",
        "githubWebhookServer.maxConnections=11",
        "githubWebhookServer.maxBodyBytes=2000000",
        "http.headerReadTimeout=3s",
        "http.requestTimeout=4s",
        "leakedRegistrationSweepInterval=0",
        "leakedRegistrationGrace=1h",
        "webhookPullInterval=0",
    ];
    let objects = documents(&render(NS, &[&on[..], &set[..]].concat()));
    let controller = args(deployment(&objects, "controller"));
    let server = args(deployment(&objects, "github-webhook-server"));
    for flag in [
        "--metrics-max-connections=8",
        "--admission-max-connections=9",
        "--admission-max-body-bytes=100000",
        "--http-header-read-timeout=3s",
        "--http-request-timeout=4s",
        "--leaked-registration-sweep-interval=0",
        "--leaked-registration-grace=1h",
        "--webhook-pull-interval=0",
    ] {
        assert!(
            controller.contains(&flag.to_owned()),
            "{flag} in {controller:?}"
        );
    }
    for flag in [
        "--webhook-max-connections=11",
        "--webhook-max-body-bytes=2000000",
        "--http-header-read-timeout=3s",
        "--http-request-timeout=4s",
    ] {
        assert!(server.contains(&flag.to_owned()), "{flag} in {server:?}");
    }
}

/// Every env var of every container in `objects` that carries a credential.
fn credential_env(objects: &[Value]) -> Vec<Value> {
    let sensitive = [
        "GITHUB_TOKEN",
        "GITHUB_APP_ID",
        "GITHUB_APP_INSTALLATION_ID",
        "GITHUB_APP_PRIVATE_KEY",
        "GITHUB_WEBHOOK_SECRET_TOKEN",
    ];
    of_kind(objects, "Deployment")
        .into_iter()
        .flat_map(|d| {
            d["spec"]["template"]["spec"]["containers"]
                .as_sequence()
                .cloned()
                .unwrap_or_default()
        })
        .flat_map(|c| c["env"].as_sequence().cloned().unwrap_or_default())
        .filter(|e| sensitive.contains(&str_at(e, &["name"])))
        .collect()
}

#[test]
fn credentials_reach_pods_only_through_secret_key_refs() {
    let yaml = render(
        NS,
        &[
            "authSecret.create=true",
            "authSecret.github_token=ghp_do_not_leak",
            "authSecret.github_app_private_key=PEM_DO_NOT_LEAK",
            "githubWebhookServer.enabled=true",
            "githubWebhookServer.useRunnerGroupsVisibility=true",
            "githubWebhookServer.secret.create=true",
            "githubWebhookServer.secret.github_webhook_secret_token=whsec_do_not_leak",
        ],
    );
    let objects = documents(&yaml);
    let env = credential_env(&objects);
    // Four on the controller, the webhook secret and the token on the webhook server.
    assert_eq!(env.len(), 6, "{env:?}");
    for e in &env {
        assert!(e.get("value").is_none(), "literal credential: {e:?}");
        assert!(
            !str_at(e, &["valueFrom", "secretKeyRef", "key"]).is_empty(),
            "not a secretKeyRef: {e:?}"
        );
    }
    for o in objects.iter().filter(|o| str_at(o, &["kind"]) != "Secret") {
        let text = serde_yaml::to_string(o).unwrap();
        for secret in ["do_not_leak", "DO_NOT_LEAK"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }
    // The chart-made Secrets hold them, base64 as Kubernetes wants.
    let secrets = of_kind(&objects, "Secret");
    assert_eq!(secrets.len(), 2);
}

#[test]
fn unquoted_github_app_ids_are_stored_as_integers() {
    let objects = documents(&render(
        NS,
        &[
            "authSecret.create=true",
            "authSecret.github_app_id=1234567",
            "authSecret.github_app_installation_id=98765432",
        ],
    ));
    let secret = of_kind(&objects, "Secret")[0];
    assert_eq!(str_at(secret, &["data", "github_app_id"]), "MTIzNDU2Nw=="); // 1234567
    assert_eq!(
        str_at(secret, &["data", "github_app_installation_id"]),
        "OTg3NjU0MzI=" // 98765432
    );
    assert!(secret["data"].get("github_token").is_none());
}

#[test]
fn every_pod_runs_non_root_read_only_without_capabilities() {
    let objects = documents(&render(NS, &["githubWebhookServer.enabled=true"]));
    let deployments = of_kind(&objects, "Deployment");
    assert_eq!(deployments.len(), 2);
    for d in deployments {
        let spec = &d["spec"]["template"]["spec"];
        let name = str_at(d, &["metadata", "name"]);
        assert_eq!(
            spec["securityContext"]["runAsNonRoot"],
            Value::Bool(true),
            "{name}"
        );
        assert_eq!(
            str_at(spec, &["securityContext", "seccompProfile", "type"]),
            "RuntimeDefault",
            "{name}"
        );
        for c in spec["containers"].as_sequence().unwrap() {
            let sc = &c["securityContext"];
            assert_eq!(sc["readOnlyRootFilesystem"], Value::Bool(true), "{name}");
            assert_eq!(sc["allowPrivilegeEscalation"], Value::Bool(false), "{name}");
            assert_eq!(sc["runAsNonRoot"], Value::Bool(true), "{name}");
            assert_eq!(
                sc["capabilities"]["drop"],
                serde_yaml::from_str::<Value>("[ALL]").unwrap(),
                "{name}"
            );
            assert_eq!(
                str_at(sc, &["seccompProfile", "type"]),
                "RuntimeDefault",
                "{name}"
            );
        }
    }
}

#[test]
fn service_monitor_accepts_arcs_spelling_and_the_usual_one() {
    for switch in [
        "metrics.serviceMonitor.enable=true",
        "metrics.serviceMonitor.enabled=true",
    ] {
        let objects = documents(&render(NS, &[switch]));
        let monitors = of_kind(&objects, "ServiceMonitor");
        assert_eq!(monitors.len(), 1, "{switch}");
        assert_eq!(
            str_at(&monitors[0]["spec"]["endpoints"][0], &["port"]),
            "metrics"
        );
    }
}

#[test]
fn chart_crds_are_the_generated_crds() {
    let files = |dir: &std::path::Path| -> BTreeSet<(String, Vec<u8>)> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read(&p).unwrap(),
                )
            })
            .collect()
    };
    let generated = files(&repo_root().join("deploy/crds"));
    let chart = files(&chart_dir().join("crds"));
    let names =
        |s: &BTreeSet<(String, Vec<u8>)>| s.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    let differing: BTreeSet<_> = chart
        .symmetric_difference(&generated)
        .map(|(n, _)| n)
        .collect();
    assert!(
        differing.is_empty(),
        "deploy/helm/hangar/crds differs from deploy/crds in {differing:?} \
         (chart: {:?}, generated: {:?}); run `cp deploy/crds/*.yaml deploy/helm/hangar/crds/` \
         after `cargo xtask crds`",
        names(&chart),
        names(&generated)
    );
}

#[test]
fn grafana_dashboard_uses_every_metric_hangar_exports() {
    let path = repo_root().join("deploy/grafana/hangar.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("valid JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{panel}");
            exprs.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    let all = exprs.join("\n");
    for metric in [
        "hangar_runners",
        "hangar_reconcile_duration_seconds_bucket",
        "hangar_reconcile_errors_total",
        "hangar_github_api_calls_total",
        "hangar_github_rate_limit_remaining",
        "hangar_webhook_deliveries_total",
        "hangar_job_queue_to_assignment_seconds_bucket",
        "hangar_webhook_delivery_to_pod_seconds_bucket",
        "horizontalrunnerautoscaler_desired_replicas",
        "runnerdeployment_spec_replicas",
        "github_rate_limit_remaining",
    ] {
        assert!(
            all.contains(metric),
            "{metric} unused in {}",
            path.display()
        );
    }
    for state in ["pending", "idle", "busy", "unregistering"] {
        assert!(all.contains(&format!("state=\"{state}\"")), "{state}");
    }
}
