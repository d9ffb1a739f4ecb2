//! The rendered chart against the real control plane: every object of every tested combination
//! of values is accepted by a server-side dry run, and the chart's RBAC, applied for real, lets
//! its ServiceAccounts do exactly what the code does: the apiserver's authorizer is asked
//! (SubjectAccessReview, the question `kubectl auth can-i --as` asks) for every permission the
//! code needs and for the ones it must not have.

use std::time::{Duration, Instant};

use hangar_chart_tests::{
    CONTROLLER_CLUSTER_NEEDS, CONTROLLER_NEEDS, CONTROLLER_SECRET_WATCH_NEEDS, Permission, RELEASE,
    WEBHOOK_SERVER_NEEDS, admission_needs, apply_rbac, documents, kinds_and_names, render,
    render_with, run_with_stdin, single_namespace_controller_needs,
};
use hangar_testkit::{TestCluster, TestNamespace};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

/// `kubectl apply --server-side --dry-run=server` of `yaml`; panics with the server's answer
/// unless every object is accepted.
fn dry_run(cluster: &TestCluster, yaml: &str, what: &str) {
    let objects = documents(yaml);
    let (ok, said) = run_with_stdin(
        cluster.kubectl().args([
            "apply",
            "--server-side",
            "--dry-run=server",
            // The shared cluster's CRDs are owned by whichever test installed them last (maybe
            // from a working copy with newer types); a dry run asks validity, not ownership.
            "--force-conflicts",
            "--field-manager=hangar-chart-tests",
            "-f",
            "-",
        ]),
        yaml,
    );
    assert!(ok, "{what}: the apiserver rejected the chart:\n{said}");
    let accepted = said
        .lines()
        .filter(|l| l.contains("(server dry run)"))
        .count();
    assert_eq!(
        accepted,
        objects.len(),
        "{what}: not every object was accepted ({:?}):\n{said}",
        kinds_and_names(&objects)
    );
}

#[tokio::test]
async fn every_tested_combination_of_values_is_accepted_by_the_apiserver() {
    let cluster = TestCluster::get();
    let release = TestNamespace::create(cluster, "chart").await;
    let ns = release.name();
    // The CRDs as well: the chart's copies, applied over the ones every test binary installs.
    hangar_testkit::crds::install(&cluster.client().await).await;
    dry_run(
        cluster,
        &render_with(ns, &[], &["--include-crds"]),
        "default values",
    );
    let combinations: &[(&str, &[&str])] = &[
        (
            "single namespace",
            &[
                "scope.singleNamespace=true",
                &format!("scope.watchNamespace={ns}"),
            ],
        ),
        (
            "GitHub App credentials in a chart-made Secret",
            &[
                "authSecret.create=true",
                "authSecret.github_app_id=12345",
                "authSecret.github_app_installation_id=67890",
                "authSecret.github_app_private_key=-----BEGIN RSA PRIVATE KEY-----",
                "githubEnterpriseServerURL=https://github.example.com/",
            ],
        ),
        (
            "webhook server with ingress and disruption budgets",
            &[
                "githubWebhookServer.enabled=true",
                "githubWebhookServer.replicaCount=2",
                "githubWebhookServer.secret.create=true",
                "githubWebhookServer.secret.github_webhook_secret_token=s3cret",
                "githubWebhookServer.useRunnerGroupsVisibility=true",
                "githubWebhookServer.ingress.enabled=true",
                "githubWebhookServer.podDisruptionBudget.maxUnavailable=1",
            ],
        ),
        (
            "admission webhooks",
            &["admissionWebHooks.enabled=true", "service.port=8443"],
        ),
        (
            "admission webhooks for a single namespace",
            &[
                "admissionWebHooks.enabled=true",
                "scope.singleNamespace=true",
                &format!("scope.watchNamespace={ns}"),
            ],
        ),
        (
            "two replicas with leader election",
            &[
                "replicaCount=2",
                "podDisruptionBudget.minAvailable=1",
                "resources.requests.cpu=100m",
                "resources.limits.memory=256Mi",
                "priorityClassName=system-cluster-critical",
            ],
        ),
    ];
    for (what, sets) in combinations {
        dry_run(cluster, &render(ns, sets), what);
    }
}

/// Where a check is asked: one namespace, or all of them.
#[derive(Clone, Copy, Debug)]
enum Scope<'a> {
    In(&'a str),
    Everywhere,
}

/// One authorization question and the answer the chart must give.
#[derive(Clone, Debug)]
struct Check<'a> {
    verb: &'a str,
    group: &'a str,
    resource: &'a str,
    name: Option<&'a str>,
    scope: Scope<'a>,
    allowed: bool,
}

/// Asks the apiserver's authorizer, as `user` with the groups a ServiceAccount token carries
/// (what `kubectl auth can-i --as` asks, plus the ServiceAccount groups that impersonation by
/// name alone would leave out, so a grant to `system:serviceaccounts` would be caught too).
async fn can_i(client: &kube::Client, user: &str, check: &Check<'_>) -> bool {
    let (resource, subresource) = match check.resource.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (check.resource, None),
    };
    let sa_namespace = user.split(':').nth(2).unwrap_or_default();
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            groups: Some(vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{sa_namespace}"),
                "system:authenticated".to_owned(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                namespace: match check.scope {
                    Scope::In(ns) => Some(ns.to_owned()),
                    Scope::Everywhere => None,
                },
                verb: Some(check.verb.to_owned()),
                group: Some(check.group.to_owned()),
                resource: Some(resource.to_owned()),
                subresource: subresource.map(str::to_owned),
                name: check.name.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap_or_else(|e| panic!("SubjectAccessReview for {check:?} failed: {e}"))
        .status
        .is_some_and(|s| s.allowed)
}

/// Asks every check and fails with every wrong answer at once.
async fn assert_checks(cluster: &TestCluster, user: &str, checks: &[Check<'_>]) {
    let client = cluster.client().await;
    // RBAC objects reach the authorizer through an informer: wait until the first check that
    // must be allowed is, before judging the rest.
    if let Some(first) = checks.iter().find(|c| c.allowed) {
        let until = Instant::now() + Duration::from_secs(30);
        while !can_i(&client, user, first).await {
            assert!(
                Instant::now() < until,
                "{user} never got {first:?} within 30s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let answers = futures::future::join_all(checks.iter().map(|c| can_i(&client, user, c))).await;
    let wrong: Vec<String> = checks
        .iter()
        .zip(answers)
        .filter(|(c, answer)| *answer != c.allowed)
        .map(|(c, _)| {
            format!(
                "{} {} {}{} {:?}: expected {}",
                c.verb,
                c.group,
                c.resource,
                c.name.map(|n| format!("/{n}")).unwrap_or_default(),
                c.scope,
                if c.allowed { "allowed" } else { "denied" }
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{user}: {} wrong answer(s) of {}:\n{}",
        wrong.len(),
        checks.len(),
        wrong.join("\n")
    );
}

fn needs<'a>(list: &'a [Permission], scope: Scope<'a>) -> Vec<Check<'a>> {
    list.iter()
        .map(|(group, resource, verb)| Check {
            verb,
            group,
            resource,
            name: None,
            scope,
            allowed: true,
        })
        .collect()
}

fn denied<'a>(verb: &'a str, group: &'a str, resource: &'a str, scope: Scope<'a>) -> Check<'a> {
    Check {
        verb,
        group,
        resource,
        name: None,
        scope,
        allowed: false,
    }
}

/// What no Hangar account may do, anywhere: the things an operator's account is usually
/// abused for.
fn never<'a>(scope: Scope<'a>) -> Vec<Check<'a>> {
    vec![
        denied("*", "*", "*", scope),
        denied("create", "", "pods/exec", scope),
        denied("get", "", "pods/log", scope),
        denied("create", "", "pods/eviction", scope),
        denied("update", "", "pods", scope),
        denied("delete", "", "secrets", scope),
        denied("update", "", "secrets", scope),
        denied("get", "", "configmaps", scope),
        denied("create", "", "serviceaccounts/token", scope),
        denied("create", "rbac.authorization.k8s.io", "rolebindings", scope),
        denied("bind", "rbac.authorization.k8s.io", "clusterroles", scope),
        denied("escalate", "rbac.authorization.k8s.io", "roles", scope),
        denied("impersonate", "", "serviceaccounts", scope),
        denied("create", "apps", "deployments", scope),
        denied(
            "create",
            "actions.summerwind.dev",
            "runnerdeployments",
            scope,
        ),
        denied(
            "delete",
            "actions.summerwind.dev",
            "runnerdeployments",
            scope,
        ),
        denied(
            "delete",
            "actions.summerwind.dev",
            "horizontalrunnerautoscalers",
            scope,
        ),
        denied("create", "coordination.k8s.io", "leases", scope),
        denied("delete", "events.k8s.io", "events", scope),
    ]
}

/// Cluster-scoped things no Hangar account may touch.
fn never_cluster_scoped<'a>() -> Vec<Check<'a>> {
    let all = Scope::Everywhere;
    vec![
        // Nodes are watched for their Ready condition (runner health), never changed.
        denied("create", "", "nodes", all),
        denied("update", "", "nodes", all),
        denied("patch", "", "nodes", all),
        denied("delete", "", "nodes", all),
        denied("patch", "", "nodes/status", all),
        denied("delete", "", "namespaces", all),
        // Volume reuse releases volumes (patch); it never creates or deletes one.
        denied("create", "", "persistentvolumes", all),
        denied("delete", "", "persistentvolumes", all),
        denied("update", "", "persistentvolumes", all),
        denied("create", "rbac.authorization.k8s.io", "clusterroles", all),
        denied(
            "create",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            all,
        ),
        denied(
            "patch",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            all,
        ),
        denied(
            "patch",
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            all,
        ),
        denied(
            "patch",
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            all,
        ),
    ]
}

fn service_account(ns: &str, name: &str) -> String {
    format!("system:serviceaccount:{ns}:{name}")
}

#[tokio::test]
async fn controller_account_may_do_what_the_code_does_in_every_namespace_and_nothing_more() {
    let cluster = TestCluster::get();
    let release = TestNamespace::create(cluster, "rbac").await;
    let ns = release.name();
    hangar_testkit::crds::install(&cluster.client().await).await;
    // The admission webhooks' grants are checked on their own, below.
    let _rbac = apply_rbac(cluster, &render(ns, &["admissionWebHooks.enabled=false"]));
    let user = service_account(ns, RELEASE);

    let mut checks = needs(CONTROLLER_NEEDS, Scope::In("anywhere"));
    checks.extend(
        CONTROLLER_NEEDS
            .iter()
            .filter(|(_, _, verb)| matches!(*verb, "list" | "watch"))
            .map(|(group, resource, verb)| Check {
                verb,
                group,
                resource,
                name: None,
                scope: Scope::Everywhere,
                allowed: true,
            }),
    );
    checks.extend(needs(CONTROLLER_CLUSTER_NEEDS, Scope::Everywhere));
    // Cluster-wide, listing or watching Secrets would read every Secret of the cluster.
    for scope in [Scope::Everywhere, Scope::In("anywhere"), Scope::In(ns)] {
        for (group, resource, verb) in CONTROLLER_SECRET_WATCH_NEEDS {
            checks.push(denied(verb, group, resource, scope));
        }
    }
    checks.extend(never(Scope::In("anywhere")));
    checks.extend(never(Scope::In(ns)));
    checks.extend(never_cluster_scoped());
    // One replica elects no leader, so it gets no Lease rights either.
    checks.push(denied(
        "get",
        "coordination.k8s.io",
        "leases",
        Scope::In(ns),
    ));
    assert_checks(cluster, &user, &checks).await;
}

#[tokio::test]
async fn single_namespace_mode_grants_nothing_outside_the_watched_namespace() {
    let cluster = TestCluster::get();
    let release = TestNamespace::create(cluster, "rbac-release").await;
    let watched = TestNamespace::create(cluster, "rbac-watched").await;
    hangar_testkit::crds::install(&cluster.client().await).await;
    let yaml = render(
        release.name(),
        &[
            "scope.singleNamespace=true",
            &format!("scope.watchNamespace={}", watched.name()),
            "admissionWebHooks.enabled=false",
        ],
    );
    let guard = apply_rbac(cluster, &yaml);
    // The one cluster-scoped grant: PersistentVolumes (cluster-scoped objects) for RunnerSet
    // volume reuse, and reading Nodes for runner health.
    let volumes = format!("hangar-cluster-{}", release.name());
    assert_eq!(
        guard.names,
        [
            format!("clusterrole/{volumes}"),
            format!("clusterrolebinding/{volumes}")
        ],
        "cluster-scoped RBAC"
    );
    let user = service_account(release.name(), RELEASE);

    let watched_needs = single_namespace_controller_needs();
    let mut checks = needs(&watched_needs, Scope::In(watched.name()));
    checks.extend(needs(CONTROLLER_CLUSTER_NEEDS, Scope::Everywhere));
    // Everything the controller may do in the watched namespace it may do nowhere else: not
    // cluster-wide, not in its own namespace, not in a third one.
    for scope in [
        Scope::Everywhere,
        Scope::In(release.name()),
        Scope::In("elsewhere"),
    ] {
        checks.extend(watched_needs.iter().map(|(group, resource, verb)| Check {
            verb,
            group,
            resource,
            name: None,
            scope,
            allowed: false,
        }));
    }
    checks.extend(never(Scope::In(watched.name())));
    checks.extend(never_cluster_scoped());
    assert_checks(cluster, &user, &checks).await;
}

#[tokio::test]
async fn leader_election_may_renew_only_its_own_lease() {
    let cluster = TestCluster::get();
    let release = TestNamespace::create(cluster, "rbac-lease").await;
    let ns = release.name();
    let _rbac = apply_rbac(cluster, &render(ns, &["replicaCount=2"]));
    let user = service_account(ns, RELEASE);
    let lease = |verb, name, scope, allowed| Check {
        verb,
        group: "coordination.k8s.io",
        resource: "leases",
        name,
        scope,
        allowed,
    };
    let here = Scope::In(ns);
    let checks = [
        lease("create", None, here, true),
        lease("get", Some("hangar-controller"), here, true),
        lease("update", Some("hangar-controller"), here, true),
        lease("patch", Some("hangar-controller"), here, true),
        lease("get", Some("kube-scheduler"), here, false),
        lease("update", Some("other"), here, false),
        lease("delete", Some("hangar-controller"), here, false),
        lease("list", None, here, false),
        lease("create", None, Scope::In("kube-system"), false),
        lease(
            "update",
            Some("hangar-controller"),
            Scope::In("kube-system"),
            false,
        ),
    ];
    assert_checks(cluster, &user, &checks).await;
}

#[tokio::test]
async fn webhook_server_account_only_reads_autoscalers_reserves_capacity_and_warns() {
    let cluster = TestCluster::get();
    let release = TestNamespace::create(cluster, "rbac-webhook").await;
    let ns = release.name();
    hangar_testkit::crds::install(&cluster.client().await).await;
    let _rbac = apply_rbac(cluster, &render(ns, &["githubWebhookServer.enabled=true"]));
    let user = service_account(ns, "hangar-webhook-server");

    let mut checks = needs(WEBHOOK_SERVER_NEEDS, Scope::Everywhere);
    checks.extend(needs(WEBHOOK_SERVER_NEEDS, Scope::In("anywhere")));
    let anywhere = Scope::In("anywhere");
    for (verb, group, resource) in [
        ("patch", "actions.summerwind.dev", "runnerdeployments"),
        ("patch", "actions.summerwind.dev", "runnersets"),
        (
            "patch",
            "actions.summerwind.dev",
            "horizontalrunnerautoscalers/status",
        ),
        ("get", "actions.summerwind.dev", "runners"),
        ("list", "", "pods"),
        ("get", "", "secrets"),
        ("list", "", "secrets"),
        ("delete", "events.k8s.io", "events"),
    ] {
        checks.push(denied(verb, group, resource, anywhere));
    }
    checks.extend(never(anywhere));
    checks.extend(never_cluster_scoped());
    assert_checks(cluster, &user, &checks).await;
}

#[tokio::test]
async fn admission_webhooks_may_patch_only_their_own_configurations_and_certificate() {
    let cluster = TestCluster::get();
    let release = TestNamespace::create(cluster, "rbac-admission").await;
    let ns = release.name();
    hangar_testkit::crds::install(&cluster.client().await).await;
    let _rbac = apply_rbac(cluster, &render(ns, &["admissionWebHooks.enabled=true"]));
    let user = service_account(ns, RELEASE);

    // admission_needs names what it grants as `resource=name`.
    let needs = admission_needs(ns);
    let owned: Vec<(Scope<'_>, String, String, Option<String>, String)> = needs
        .cluster
        .iter()
        .map(|need| (Scope::Everywhere, need))
        .chain(
            needs
                .release_namespace
                .iter()
                .map(|need| (Scope::In(ns), need)),
        )
        .map(|(scope, (group, resource, verb))| {
            let (resource, name) = match resource.split_once('=') {
                Some((r, n)) => (r.to_owned(), Some(n.to_owned())),
                None => (resource.clone(), None),
            };
            (scope, group.clone(), resource, name, verb.clone())
        })
        .collect();
    let mut checks: Vec<Check<'_>> = Vec::new();
    for (scope, group, resource, name, verb) in &owned {
        let need = Check {
            verb,
            group,
            resource,
            name: name.as_deref(),
            scope: *scope,
            allowed: true,
        };
        // Only the named objects: another configuration or Secret is out of reach (unless the
        // controller's own rules grant the verb on every object of the kind, as get of
        // Secrets).
        let everyone = CONTROLLER_NEEDS
            .iter()
            .any(|(g, r, v)| (*g, *r, *v) == (group.as_str(), resource.as_str(), verb.as_str()));
        if name.is_some() && !everyone {
            checks.push(Check {
                name: Some("someone-elses"),
                allowed: false,
                ..need.clone()
            });
        }
        checks.push(need);
    }
    let webhooks = "admissionregistration.k8s.io";
    let mutating = "mutatingwebhookconfigurations";
    let validating = "validatingwebhookconfigurations";
    let ours = format!("{RELEASE}-{ns}-mutating-webhook-configuration");
    let tls = format!("{RELEASE}-webhook-tls");
    checks.extend([
        // Creating a configuration cannot be limited by name: never granted.
        denied("create", webhooks, mutating, Scope::Everywhere),
        denied("create", webhooks, validating, Scope::Everywhere),
        denied("list", webhooks, validating, Scope::Everywhere),
        Check {
            name: Some(&ours),
            ..denied("delete", webhooks, mutating, Scope::Everywhere)
        },
        Check {
            name: Some(&ours),
            ..denied("update", webhooks, mutating, Scope::Everywhere)
        },
        Check {
            name: Some(&tls),
            ..denied("delete", "", "secrets", Scope::In(ns))
        },
        // The certificate Secret's name means nothing in another namespace.
        Check {
            name: Some(&tls),
            ..denied("update", "", "secrets", Scope::In("anywhere"))
        },
    ]);
    checks.extend(never(Scope::In("anywhere")));
    checks.extend(never(Scope::In(ns)));
    checks.extend(never_cluster_scoped());
    assert_checks(cluster, &user, &checks).await;
}

/// `helm uninstall` of a release when the test ends, also on panic: its ClusterRoles are
/// cluster-scoped and would outlive the test namespace.
struct Release {
    namespace: String,
    kubeconfig: std::path::PathBuf,
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = hangar_chart_tests::helm()
            .command()
            .args([
                "uninstall",
                RELEASE,
                "--namespace",
                &self.namespace,
                "--kubeconfig",
            ])
            .arg(&self.kubeconfig)
            .output();
    }
}

/// Helm keeps each release revision, chart files and CRDs included, gzipped in one Secret,
/// which Kubernetes caps at 1 MiB; Hangar's CRDs embed the pod and StatefulSet schemas.
const RELEASE_SECRET_BUDGET: usize = 900 * 1024;

#[tokio::test]
async fn helm_installs_upgrades_and_uninstalls_the_chart() {
    let cluster = TestCluster::get();
    let ns = TestNamespace::create(cluster, "helm-install").await;
    hangar_testkit::crds::install(&cluster.client().await).await;
    let helm = |args: &[&str]| {
        hangar_chart_tests::output(
            hangar_chart_tests::helm()
                .command()
                .args(args)
                .arg(hangar_chart_tests::chart_dir())
                .args(["--namespace", ns.name(), "--kubeconfig"])
                .arg(cluster.kubeconfig())
                // No pods: nothing here runs the image; the objects are what is tested.
                .args([
                    "--set",
                    "replicaCount=0",
                    "--set",
                    "githubWebhookServer.replicaCount=0",
                ])
                .args(["--set", "githubWebhookServer.enabled=true"])
                .args(["--set", "githubWebhookServer.secret.create=true"])
                .args([
                    "--set",
                    "githubWebhookServer.secret.github_webhook_secret_token=t",
                ]),
        )
    };
    let _release = Release {
        namespace: ns.name().to_owned(),
        kubeconfig: cluster.kubeconfig().to_owned(),
    };
    let installed = helm(&["install", RELEASE]);
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    let upgraded = helm(&["upgrade", RELEASE, "--set", "syncPeriod=2m"]);
    assert!(upgraded.contains("REVISION: 2"), "{upgraded}");

    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(cluster.client().await, ns.name());
    let revision = secrets
        .get(&format!("sh.helm.release.v1.{RELEASE}.v2"))
        .await
        .expect("helm stores revision 2 in a Secret");
    let size = revision
        .data
        .unwrap_or_default()
        .get("release")
        .map_or(0, |b| b.0.len());
    assert!(
        size < RELEASE_SECRET_BUDGET,
        "the Helm release Secret holds {size} bytes, close to Kubernetes' 1 MiB limit: \
         move the CRDs out of the chart (e.g. a separate CRD chart) before they grow further"
    );

    let deployment: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(cluster.client().await, ns.name());
    let args = deployment
        .get(RELEASE)
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .args
        .clone()
        .unwrap_or_default();
    assert!(args.contains(&"--sync-period=2m".to_owned()), "{args:?}");
}
