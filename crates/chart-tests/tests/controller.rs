//! The chart's RBAC is enough to run Hangar: the `hangar` binary runs with nothing but a token
//! of the chart's own controller ServiceAccount (the chart's ServiceAccount, ClusterRoles or
//! Roles and bindings applied for real; the token from the TokenRequest API) against ghsim and
//! nodesim, and does everything that needs a permission: a RunnerDeployment scaled from zero
//! by a HorizontalRunnerAutoscaler on signed `workflow_job` webhooks, its runner registering
//! and running a job, the scale-down to zero (unregistration, finalizers removed, pods gone), a
//! RunnerSet up and down, events, and in single-namespace mode the leader-election Lease, taken
//! and released. Then it must have met no `403 Forbidden`: the binary counts every Kubernetes
//! answer by status code (`rest_client_requests_total`, see `hangar::kube_client`), including
//! calls whose errors it does not log, and its log must not mention one either.
//!
//! That the chart grants nothing more is the other half, asked of the authorizer in
//! tests/cluster.rs: `controller_account_may_do_what_the_code_does_in_every_namespace_and_nothing_more`
//! and `single_namespace_mode_grants_nothing_outside_the_watched_namespace` (no Secret, pod or
//! runner anywhere but the watched namespace).
//!
//! Both modes run the controller with `--watch-namespace`: the test control plane is shared
//! with other tests' controllers and objects, which a controller watching every namespace would
//! reconcile too. The cluster-wide ClusterRole is still what authorizes every call (nothing else
//! is bound), and cluster-wide lists and watches are checked by the SubjectAccessReview test.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use ghsim::webhooks::{ContentType, NewHook};
use ghsim::world::{JobStatus, SubmitJobs};
use hangar_chart_tests::{RELEASE, apply_rbac, documents, of_kind, render, repo_root};
use hangar_testkit::control_plane::free_port;
use hangar_testkit::eventually::eventually;
use hangar_testkit::http;
use hangar_testkit::{TestCluster, TestNamespace};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client};
use nodesim::program::RunnerProgram;
use nodesim::{NodeSim, NodeSimConfig, NodeSimHandle, Timing};
use serde_json::{Value, json};

/// The controller's PAT in ghsim.
const TOKEN: &str = "ghp_chart_controller";
/// The simulated runners' own PAT (for `config.sh remove`; see nodesim's runner program).
const RUNNER_PAT: &str = "ghp_chart_runner";
const WEBHOOK_SECRET: &str = "chart-rbac-webhook-secret";
const WAIT: Duration = Duration::from_secs(120);
/// The limit of a wait that no outer limit bounds: a little over [`WAIT`], so that
/// `World::eventually`'s own limit fires first, with its account of the world.
const UNBOUNDED_WAIT: Duration = Duration::from_secs(125);

/// How the chart is rendered and the controller run.
#[derive(Clone, Copy, Debug)]
struct Mode {
    /// Prefix of the test's namespaces and node pool.
    prefix: &'static str,
    /// `scope.singleNamespace` (a Role in the watched namespace instead of a ClusterRole).
    single_namespace: bool,
    /// `replicaCount=2`, which turns leader election (and its Lease Role) on.
    leader_election: bool,
}

#[tokio::test]
async fn the_controller_runs_with_the_charts_cluster_wide_rbac_and_meets_no_forbidden() {
    run_with_chart_rbac(Mode {
        prefix: "chart-run",
        single_namespace: false,
        leader_election: false,
    })
    .await;
}

#[tokio::test]
async fn the_controller_runs_with_the_charts_single_namespace_rbac_and_leader_election() {
    run_with_chart_rbac(Mode {
        prefix: "chart-run-ns",
        single_namespace: true,
        leader_election: true,
    })
    .await;
}

async fn run_with_chart_rbac(mode: Mode) {
    let cluster = TestCluster::get();
    let admin = cluster.client().await;
    hangar_testkit::crds::install(&admin).await;
    let release = TestNamespace::create(cluster, &format!("{}-rel", mode.prefix)).await;
    let watched = TestNamespace::create(cluster, mode.prefix).await;
    let (release_ns, ns) = (release.name(), watched.name());

    // The chart's RBAC, and a token of its controller ServiceAccount.
    let watch_namespace = format!("scope.watchNamespace={ns}");
    // `hangar run` here serves no admission webhook (RunnerSets in their fallback mode); the
    // webhooks' own grants are proven in cluster.rs.
    let mut sets = vec!["admissionWebHooks.enabled=false"];
    if mode.single_namespace {
        sets.extend(["scope.singleNamespace=true", watch_namespace.as_str()]);
    }
    if mode.leader_election {
        sets.push("replicaCount=2");
    }
    let rendered = render(release_ns, &sets);
    let _rbac = apply_rbac(cluster, &rendered);
    // The flags the chart sets because of its RBAC, passed on as the Deployment would.
    let chart_flags: Vec<String> =
        of_kind(&documents(&rendered), "Deployment")[0]["spec"]["template"]["spec"]["containers"]
            [0]["args"]
            .as_sequence()
            .expect("controller args")
            .iter()
            .filter_map(|a| a.as_str())
            .filter(|a| a.starts_with("--watch-credential-secrets"))
            .map(str::to_owned)
            .collect();
    assert_eq!(chart_flags.len(), 1, "{chart_flags:?}");
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), release_ns)
        .create_token_request(
            RELEASE,
            &PostParams::default(),
            &TokenRequest {
                spec: TokenRequestSpec {
                    audiences: vec![],
                    expiration_seconds: Some(3600),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("TokenRequest for the chart's ServiceAccount")
        .status
        .expect("a TokenRequest answer carries a token")
        .token;
    let dir = tempdir(mode.prefix);
    let kubeconfig = dir.join("kubeconfig");
    write_token_kubeconfig(cluster.kubeconfig(), &token, &kubeconfig);
    let account = Client::try_from(
        kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&kubeconfig).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    // Bindings reach the authorizer through an informer: start the controller only once each
    // binding is in effect, so that a 403 below can only be a missing grant.
    let mut bindings = vec![
        ("list", "actions.summerwind.dev", "runners", Some(ns)),
        ("list", "", "persistentvolumes", None),
    ];
    if mode.leader_election {
        bindings.push(("create", "coordination.k8s.io", "leases", Some(release_ns)));
    }
    for (verb, group, resource, namespace) in bindings {
        eventually(
            &format!("{verb} {resource} to be granted"),
            UNBOUNDED_WAIT,
            || async {
                allowed(&account, verb, group, resource, namespace)
                    .await
                    .then_some(())
            },
        )
        .await;
    }

    // GitHub, the nodes, and the controller with the ServiceAccount's token.
    let sim = ghsim::Sim::new(ghsim::SimConfig::default());
    sim.update(|w, _| {
        w.add_pat(TOKEN, "controller");
        w.add_pat(RUNNER_PAT, "nodesim-runner");
        w.add_org("octo", None);
        w.add_repo("octo", "app", true);
    });
    let gh = ghsim::spawn(sim.clone()).await.unwrap();
    let github = gh.url.to_string();
    let nodes = NodeSim::start(
        admin.clone(),
        NodeSimConfig::new(format!("{}-{}", mode.prefix, std::process::id()), 2)
            .with_timing(Timing::fast())
            .with_runner_program(RunnerProgram::new().with_remove_credential(RUNNER_PAT)),
    )
    .await
    .unwrap();
    let (webhook_port, metrics_port) = (free_port().unwrap(), free_port().unwrap());
    let log = dir.join("hangar.log");
    let mut controller = Controller::spawn(&ControllerArgs {
        kubeconfig: &kubeconfig,
        github: &github,
        namespace: ns,
        release_namespace: release_ns,
        webhook_port,
        metrics_port,
        leader_election: mode.leader_election,
        log: &log,
        chart_flags: &chart_flags,
    });
    let world = World {
        admin: admin.clone(),
        ns: ns.to_owned(),
        sim: sim.clone(),
        nodes,
        log: log.clone(),
        metrics_port,
    };
    world
        .eventually("the controller to be ready", || async {
            let (status, _) = http::get(http::loopback(metrics_port), "/readyz").await?;
            (status == 200).then_some(())
        })
        .await;
    if mode.leader_election {
        world
            .eventually("the controller to hold the Lease", || async {
                lease_holder(&admin, release_ns).await
            })
            .await;
    }

    // A RunnerDeployment at zero under an autoscaler that scales it on workflow_job webhooks.
    let hook = sim.add_hook(NewHook {
        url: format!("http://127.0.0.1:{webhook_port}/"),
        secret: Some(WEBHOOK_SECRET.to_owned()),
        content_type: ContentType::Json,
        events: vec!["workflow_job".to_owned()],
        owner: None,
    });
    let ping = world
        .eventually("the webhook's ping to be answered", || async {
            sim.deliveries()
                .iter()
                .find(|d| d.hook_id == hook.id && d.event == "ping")
                .and_then(|d| d.attempts.last()?.status)
        })
        .await;
    assert_eq!(ping, 200, "the webhook server answered the ping");
    let placement = world.nodes.placement();
    let pod_placement = json!({
        "nodeSelector": placement.node_selector,
        "tolerations": placement.tolerations,
    });
    // Not ephemeral: the runner stays registered and idle after its job, so the scale-down
    // unregisters it at GitHub (DELETE) before its pod's finalizer is removed.
    // Its own credentials Secret: read by GET of its name, which the chart grants everywhere,
    // while only single-namespace mode may list Secrets.
    world.apply(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "pool-credentials"},
        "stringData": {"github_token": TOKEN},
    }));
    let mut runner_spec = json!({
        "repository": "octo/app",
        "ephemeral": false,
        "labels": ["chart-rbac"],
        "githubAPICredentialsFrom": {"secretRef": {"name": "pool-credentials"}},
    });
    merge(&mut runner_spec, &pod_placement);
    world.apply(json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerDeployment",
        "metadata": {"name": "pool"},
        "spec": {"replicas": 0, "template": {"spec": runner_spec}},
    }));
    world.apply(json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "HorizontalRunnerAutoscaler",
        "metadata": {"name": "pool"},
        "spec": {
            "scaleTargetRef": {"kind": "RunnerDeployment", "name": "pool"},
            "minReplicas": 0,
            "maxReplicas": 2,
            "scaleDownDelaySecondsAfterScaleOut": 1,
            "scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "duration": "30m"}],
        },
    }));
    world
        .eventually("the autoscaler to reconcile the pool at 0", || async {
            let hra = world
                .get::<hangar_api::HorizontalRunnerAutoscaler>("pool")
                .await?;
            (hra.status?.desired_replicas == Some(0)).then_some(())
        })
        .await;
    // A RunnerSet of one runner beside it.
    let mut set_pod = pod_placement.clone();
    set_pod["containers"] = json!([{"name": "runner"}]);
    world.apply(json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerSet",
        "metadata": {"name": "set"},
        "spec": {
            "replicas": 1,
            "repository": "octo/app",
            "labels": ["chart-rbac-set"],
            "template": {"spec": set_pod},
        },
    }));

    // A job: the webhook scales the pool up, a runner registers and runs it.
    let jobs = sim.update(|w, now| {
        let request = SubmitJobs {
            repository: "octo/app".into(),
            count: 1,
            labels: vec!["chart-rbac".to_owned()],
            duration_ms: 2000,
            conclusion: Some("success".to_owned()),
            workflow: None,
            job_name: None,
        };
        w.submit_jobs(&request, now).unwrap().1
    });
    let ran_on = world
        .eventually("the job to complete on a pool runner", || async {
            sim.read(|w, _| {
                let job = &w.jobs[&jobs[0]];
                (job.status == JobStatus::Completed).then(|| {
                    assert!(!job.interrupted, "the job was interrupted");
                    assert_eq!(job.conclusion.as_deref(), Some("success"));
                    job.runner_name.clone()
                })
            })
        })
        .await;
    assert!(
        ran_on.as_deref().is_some_and(|n| n.starts_with("pool-")),
        "the job ran on {ran_on:?}"
    );
    world
        .eventually("the RunnerSet's runner to be online", || async {
            world
                .online()
                .iter()
                .any(|n| n.starts_with("set-"))
                .then_some(())
        })
        .await;

    // Down to zero: the autoscaler after its delay, the RunnerSet by hand. Runners are
    // unregistered, their pods' finalizers removed and the pods deleted.
    world.scale_runner_set("set", 0).await;
    world
        .eventually("the pool and the set back at zero", || async {
            let rd = world.get::<hangar_api::RunnerDeployment>("pool").await?;
            let pods = world.list::<Pod>().await;
            let sets = world.list::<StatefulSet>().await;
            let runners = world.list::<hangar_api::Runner>().await;
            (rd.spec.replicas == Some(0)
                && pods.is_empty()
                && sets.is_empty()
                && runners.is_empty()
                && world.registered().is_empty())
            .then_some(())
        })
        .await;
    world
        .eventually("events about registration and unregistration", || async {
            let reasons: BTreeSet<String> = Api::<Event>::namespaced(admin.clone(), ns)
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|e| e.reason)
                .collect();
            ["CreatedRunners", "RunnerRegistered", "RunnerUnregistered"]
                .iter()
                .all(|r| reasons.contains(*r))
                .then_some(())
        })
        .await;
    let interrupted = ghsim::accounting::snapshot(&sim).jobs_summary.interrupted;
    assert_eq!(interrupted, 0, "interrupted jobs");

    // Not one call was refused, and the count is real: the same scrape counts the calls made.
    let (_, metrics) = http::get(http::loopback(metrics_port), "/metrics")
        .await
        .expect("the metrics endpoint answers");
    let requests: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{"))
        .collect();
    let refused: Vec<&&str> = requests
        .iter()
        .filter(|l| l.contains("code=\"403\"") || l.contains("code=\"401\""))
        .collect();
    assert!(
        refused.is_empty(),
        "the controller was refused: {refused:?}\n{}",
        world.log_tail()
    );
    for (method, code) in [
        ("GET", "200"),
        ("POST", "201"),
        ("PATCH", "200"),
        ("DELETE", "200"),
    ] {
        let line = format!("rest_client_requests_total{{code=\"{code}\",method=\"{method}\",");
        assert!(
            requests.iter().any(|l| l.starts_with(&line)),
            "no {method} answered {code} counted: {requests:#?}"
        );
    }

    // SIGTERM: the leader releases its Lease (an update the Role must allow).
    controller.terminate().await;
    if mode.leader_election {
        assert_eq!(
            lease_holder(&admin, release_ns).await,
            None,
            "the Lease was released\n{}",
            world.log_tail()
        );
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let forbidden: Vec<&str> = text
        .lines()
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("forbidden") || l.contains(" 403")
        })
        .collect();
    assert!(
        forbidden.is_empty(),
        "the controller logged refusals:\n{}",
        forbidden.join("\n")
    );
    world.nodes.shutdown().await.unwrap();
    drop(gh);
}

/// What `hangar run` is started with.
struct ControllerArgs<'a> {
    /// Flags the chart's Deployment sets to match its RBAC (`--watch-credential-secrets`).
    chart_flags: &'a [String],
    kubeconfig: &'a Path,
    github: &'a str,
    namespace: &'a str,
    release_namespace: &'a str,
    webhook_port: u16,
    metrics_port: u16,
    leader_election: bool,
    log: &'a Path,
}

/// The `hangar` binary, running; killed if the test ends without [`Controller::terminate`].
struct Controller {
    child: tokio::process::Child,
}

impl Controller {
    /// `hangar run` as the chart's Deployment starts it (`--watch-namespace`, leader election
    /// with `POD_NAMESPACE`), with the ServiceAccount's kubeconfig and ghsim as GitHub.
    fn spawn(args: &ControllerArgs<'_>) -> Self {
        let log = std::fs::File::create(args.log).unwrap();
        let mut cmd = tokio::process::Command::new(hangar_binary());
        cmd.args(["run", "--github-url", args.github, "--github-api-url"])
            .arg(args.github)
            .args(["--watch-namespace", args.namespace])
            .args(["--sync-period", "5s"])
            .arg(format!("--webhook-addr=127.0.0.1:{}", args.webhook_port))
            .arg(format!("--metrics-addr=127.0.0.1:{}", args.metrics_port))
            .arg("--health-probe-bind-address=0")
            .args(args.chart_flags)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("KUBECONFIG", args.kubeconfig)
            .env("GITHUB_TOKEN", TOKEN)
            .env("GITHUB_WEBHOOK_SECRET_TOKEN", WEBHOOK_SECRET)
            .env("POD_NAMESPACE", args.release_namespace)
            .env("RUST_LOG", "info,kube=warn")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true);
        if args.leader_election {
            cmd.args(["--enable-leader-election", "--leader-election-id"])
                .arg("hangar-controller");
        }
        Self {
            child: cmd.spawn().expect("hangar run starts"),
        }
    }

    /// SIGTERM, as the kubelet stops a pod; waits for the process to exit.
    async fn terminate(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("hangar exits within 30s of SIGTERM")
            .unwrap();
        assert!(status.success(), "hangar run exited with {status}");
    }
}

/// The `hangar` binary next to this test's directory (`target/<profile>/hangar`), built first
/// if it is stale: under `cargo xtask test` it was built with the tests, so this is a no-op.
/// `HANGAR_BIN` names another.
fn hangar_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("HANGAR_BIN") {
        return path.into();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let built = std::process::Command::new(cargo)
        .current_dir(repo_root())
        .args(["build", "--quiet", "-p", "hangar", "--bin", "hangar"])
        .status()
        .expect("cargo runs");
    assert!(built.success(), "cargo build -p hangar failed");
    let dir = std::env::current_exe().unwrap();
    // target/<profile>/deps/<this test> -> target/<profile>/hangar
    dir.parent()
        .and_then(Path::parent)
        .map(|d| d.join("hangar"))
        .filter(|p| p.is_file())
        .expect("target/<profile>/hangar exists")
}

/// A kubeconfig that authenticates with `token` alone: the admin kubeconfig's server and CA,
/// no client certificate.
fn write_token_kubeconfig(admin: &Path, token: &str, out: &Path) {
    let admin = Kubeconfig::read_from(admin).unwrap();
    let cluster = admin.clusters[0].cluster.clone().expect("a cluster entry");
    let mut entry = json!({"server": cluster.server});
    if let Some(data) = &cluster.certificate_authority_data {
        entry["certificate-authority-data"] = json!(data);
    }
    if let Some(file) = &cluster.certificate_authority {
        entry["certificate-authority"] = json!(file);
    }
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": entry}],
        "users": [{"name": "hangar", "user": {"token": token}}],
        "contexts": [{"name": "hangar", "context": {"cluster": "test", "user": "hangar"}}],
        "current-context": "hangar",
    });
    std::fs::write(out, serde_yaml::to_string(&config).unwrap()).unwrap();
}

/// Whether the client's own identity may `verb` (SelfSubjectAccessReview).
async fn allowed(
    client: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
) -> bool {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: namespace.map(str::to_owned),
                verb: Some(verb.to_owned()),
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .ok()
        .and_then(|r| r.status)
        .is_some_and(|s| s.allowed)
}

async fn lease_holder(admin: &Client, namespace: &str) -> Option<String> {
    Api::<Lease>::namespaced(admin.clone(), namespace)
        .get_opt("hangar-controller")
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// The test's objects, GitHub and nodes, seen as the admin.
struct World {
    admin: Client,
    ns: String,
    sim: ghsim::Sim,
    nodes: NodeSimHandle,
    log: PathBuf,
    metrics_port: u16,
}

impl World {
    fn apply(&self, object: Value) {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let (ok, said) = hangar_chart_tests::run_with_stdin(
            TestCluster::get().kubectl().args([
                "apply",
                "--server-side",
                "-n",
                &self.ns,
                "-f",
                "-",
            ]),
            &object.to_string(),
        );
        assert!(ok, "applying the {kind} failed: {said}");
    }

    async fn get<K>(&self, name: &str) -> Option<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        Api::<K>::namespaced(self.admin.clone(), &self.ns)
            .get_opt(name)
            .await
            .ok()
            .flatten()
    }

    async fn list<K>(&self) -> Vec<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        Api::<K>::namespaced(self.admin.clone(), &self.ns)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    async fn scale_runner_set(&self, name: &str, replicas: i32) {
        Api::<hangar_api::RunnerSet>::namespaced(self.admin.clone(), &self.ns)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
    }

    fn online(&self) -> BTreeSet<String> {
        self.sim.read(|w, _| {
            w.runners
                .values()
                .filter(|r| r.online())
                .map(|r| r.name.clone())
                .collect()
        })
    }

    fn registered(&self) -> BTreeSet<String> {
        self.sim
            .read(|w, _| w.runners.values().map(|r| r.name.clone()).collect())
    }

    /// The end of the controller's log, for a failing assertion.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(60)..].join("\n");
        format!("--- last lines of {}:\n{tail}", self.log.display())
    }

    /// [`eventually`], failing with what the world looks like; a check still running at the
    /// limit is cut short.
    async fn eventually<T, F, Fut>(&self, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        match tokio::time::timeout(WAIT, eventually(what, UNBOUNDED_WAIT, check)).await {
            Ok(v) => v,
            Err(_) => panic!(
                "timed out after {WAIT:?} waiting for {what}\n{}",
                self.describe().await
            ),
        }
    }

    /// Pods, registrations, the controller's API requests and the end of its log.
    async fn describe(&self) -> String {
        let pods: Vec<String> = self
            .list::<Pod>()
            .await
            .iter()
            .map(|p| {
                format!(
                    "{} {:?}",
                    p.metadata.name.as_deref().unwrap_or_default(),
                    p.status.as_ref().and_then(|s| s.phase.as_deref())
                )
            })
            .collect();
        let metrics = http::get(http::loopback(self.metrics_port), "/metrics")
            .await
            .map(|(_, m)| {
                m.lines()
                    .filter(|l| l.starts_with("rest_client_requests_total"))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        format!(
            "pods: {pods:?}\nregistered: {:?}\n{metrics}\n{}",
            self.registered(),
            self.log_tail()
        )
    }
}

/// Merges the keys of `extra` into `into`.
fn merge(into: &mut Value, extra: &Value) {
    if let (Some(into), Some(extra)) = (into.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            into.insert(k.clone(), v.clone());
        }
    }
}

/// A fresh directory for the test's kubeconfig and log, under the system temp directory.
fn tempdir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hangar-{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
