//! Taking over from a live ARC, and handing back (issue 18), on a control plane of the test's
//! own: ARC's CRDs and admission webhooks are cluster-wide, and no other test may see them.
//!
//! ARC v0.27.6's manager and `github-webhook-server` (built into the cache on first use, as
//! `cargo xtask arc build` does) run a RunnerDeployment scaled by a HorizontalRunnerAutoscaler
//! and a RunnerSet, on ARC's own CRDs and with ARC's webhook configurations registered, until
//! some runners are busy and some idle. Then the test performs the steps of
//! `docs/migrating-from-arc.md`, in its order: stop ARC, delete its webhook configurations,
//! replace its CRDs in place with Hangar's (the custom resources kept), start Hangar. Then the
//! way back, as the same document describes it.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ghsim::world::{JobStatus, SubmitJobs};
use hangar_api::{HorizontalRunnerAutoscaler, RunnerDeployment, RunnerReplicaSet, RunnerSet};
use hangar_testkit::arc::{ArcBinaries, ArcConfig, ArcProcesses, WEBHOOK_CONFIGURATIONS};
use hangar_testkit::cluster::OwnCluster;
use hangar_testkit::control_plane::free_port;
use hangar_testkit::eventually::{eventually, eventually_of};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use nodesim::program::RunnerProgram;
use nodesim::{NodeSim, NodeSimConfig, NodeSimHandle, Timing};
use serde_json::json;
use support::{Manager, RUNNER_PAT, TOKEN, init_tracing, uncached};

const NS: &str = "takeover";
const RD_LABEL: &str = "takeover-rd";
const RS_LABEL: &str = "takeover-rs";
/// The finalizer Hangar puts on sets, which ARC does not know (the way back removes it).
const HANGAR_SET_FINALIZER: &str = "hangar.dev/retire-runners";
/// Long enough to be running on both sides of a switch, and through the middle of the takeover
/// that `kubectl get` is asked to show, however slowly a loaded 2-core machine takes the
/// switch's steps (a CI run once spent over half of a 40 s job on them).
const LONG_JOB_MS: u64 = 90_000;
/// Long enough for a poll of the autoscaler's metric to count it.
const MEDIUM_JOB_MS: u64 = 15_000;
const SHORT_JOB_MS: u64 = 2_000;
const WAIT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_arc_is_taken_over_and_handed_back_without_interrupting_a_job() {
    init_tracing();
    let binaries = tokio::task::spawn_blocking(ArcBinaries::ensure)
        .await
        .unwrap()
        .expect("ARC's binaries (cargo xtask arc build)");
    let own = OwnCluster::start("takeover").await.unwrap();
    let client = own.cluster().client().await;
    let kubeconfig = own.cluster().kubeconfig().to_owned();
    hangar_testkit::crds::apply_and_wait(&client, &hangar_testkit::arc::crds().unwrap())
        .await
        .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .unwrap();
    let sim = ghsim::Sim::new(ghsim::SimConfig::default());
    sim.update(|w, _| {
        w.add_pat(TOKEN, "controller");
        w.add_pat(RUNNER_PAT, "nodesim-runner");
        w.add_org("octo", None);
        w.add_repo("octo", "app", true);
    });
    let github = ghsim::spawn(sim.clone()).await.unwrap();
    let url = github.url.to_string();
    let nodes = NodeSim::start(
        hangar_testkit::control_plane::kubelet_client(&kubeconfig)
            .await
            .unwrap(),
        NodeSimConfig::new("takeover", 2)
            .with_timing(Timing::fast())
            .with_runner_program(RunnerProgram::new().with_remove_credential(RUNNER_PAT)),
    )
    .await
    .unwrap();
    let registrations = Registrations::record(&sim);
    let world = World {
        cluster: own.cluster(),
        sim: sim.clone(),
    };
    let arc_dir = std::env::temp_dir().join(format!("hangar-takeover-arc-{}", std::process::id()));

    // ARC runs the pool, with its webhooks registered as its chart would.
    let mut arc = start_arc(&binaries, &kubeconfig, &url, &arc_dir, &client).await;
    apply_pool(&client, &nodes).await;
    wait_github(&world, "ARC's 3 + 2 runners online", |w| {
        online_with(w, RD_LABEL) == 3 && online_with(w, RS_LABEL) == 2
    })
    .await;
    let mut busy_jobs = submit(&sim, RD_LABEL, 2, LONG_JOB_MS);
    busy_jobs.extend(submit(&sim, RS_LABEL, 1, LONG_JOB_MS));
    wait_github(&world, "3 jobs running on ARC's runners", |w| {
        started(w, &busy_jobs)
    })
    .await;
    let arcs = Objects::list(&client).await;
    assert!(arcs.pods.len() >= 5, "ARC's runner pods: {arcs:?}");
    assert!(!arcs.stateful_sets.is_empty(), "ARC's RunnerSet: {arcs:?}");

    // The switch, as docs/migrating-from-arc.md lists it.
    // 1. Stop ARC's controller and its webhook server.
    arc.kill();
    // 2. Delete ARC's webhook configurations: with its server gone they refuse every write.
    delete_webhook_configurations(&client).await;
    // 3. Replace ARC's CRDs with Hangar's, in place (server-side: they are too large otherwise).
    hangar_testkit::crds::apply_and_wait(&client, &hangar_api::crds())
        .await
        .unwrap();
    // 4. Start Hangar.
    let hangar = Manager::spawn(client.clone(), &url, NS, uncached(), |_| {}, None).await;

    // ARC's busy runners keep their jobs; Hangar's runners take the pool's places beside them.
    wait_github(&world, "Hangar's 3 + 2 runners online", |w| {
        let new = |label| {
            w.runners
                .values()
                .filter(|r| r.online() && r.labels.iter().any(|l| l.name == label))
                .filter(|r| !arcs.pods.contains(&r.name))
                .count()
        };
        new(RD_LABEL) >= 3 && new(RS_LABEL) == 2
    })
    .await;
    // What `kubectl get` shows in the middle of a takeover: ARC's RunnerReplicaSet scaled to
    // zero beside Hangar's, ARC's busy runners still there.
    eventually_of(
        &world,
        "ARC's RunnerReplicaSet scaled to zero",
        WAIT,
        || {
            let client = client.clone();
            let arcs = &arcs;
            async move {
                let sets: Vec<RunnerReplicaSet> = list(&client).await;
                let desired = |arc: bool| {
                    sets.iter()
                        .filter(|s| arcs.replica_sets.contains(&s.name_any()) == arc)
                        .map(|s| s.spec.replicas.unwrap_or(1))
                        .collect::<Vec<_>>()
                };
                (desired(true) == [0] && desired(false).iter().any(|n| *n >= 3)).then_some(())
            }
        },
    )
    .await;
    let shown = kubectl_get(
        own.cluster(),
        "runnerdeployments,runnerreplicasets,runners,runnersets,statefulsets,pods",
    );
    println!("{shown}");
    let busy_runners: Vec<String> = sim.read(|w, _| {
        busy_jobs
            .iter()
            .filter_map(|id| w.jobs[id].runner_name.clone())
            .collect()
    });
    assert_eq!(busy_runners.len(), busy_jobs.len());
    for runner in &busy_runners {
        assert!(arcs.pods.contains(runner), "{runner} is one of ARC's pods");
        assert!(shown.contains(runner.as_str()), "busy {runner} still shown");
    }
    assert!(
        sim.read(|w, _| busy_jobs
            .iter()
            .all(|id| w.jobs[id].status == JobStatus::InProgress)),
        "the jobs that ran across the switch are still running"
    );

    // The autoscaler keeps scaling: 2 runs in progress and 3 more ask for 5 runners (the 3
    // last long enough for a 5 s poll to see them).
    let more = submit(&sim, RD_LABEL, 3, MEDIUM_JOB_MS);
    let rs_more = submit(&sim, RS_LABEL, 1, SHORT_JOB_MS);
    eventually_of(
        &world,
        "the autoscaler asks for 5 runners under Hangar",
        WAIT,
        || {
            let client = client.clone();
            async move {
                let hra = Api::<HorizontalRunnerAutoscaler>::namespaced(client, NS)
                    .get("rd")
                    .await
                    .ok()?;
                (hra.status?.desired_replicas? == 5).then_some(())
            }
        },
    )
    .await;
    let every_job: Vec<u64> = busy_jobs
        .iter()
        .chain(&more)
        .chain(&rs_more)
        .copied()
        .collect();
    wait_github(&world, "every job completed", |w| completed(w, &every_job)).await;
    // ARC's runners retire once idle: unregistered, then deleted.
    eventually_of(
        &world,
        "ARC's pods, Runners and StatefulSets gone",
        WAIT,
        || {
            let client = client.clone();
            let arcs = &arcs;
            async move { Objects::list(&client).await.disjoint(arcs).then_some(()) }
        },
    )
    .await;
    assert_no_job_lost(&sim, &every_job);
    let hangars = Objects::list(&client).await;

    // The way back: a job runs on a Hangar runner while ARC returns.
    let across = submit(&sim, RD_LABEL, 1, LONG_JOB_MS);
    wait_github(&world, "a job running on Hangar's runner", |w| {
        started(w, &across)
    })
    .await;
    // 1. Stop Hangar.
    hangar.task.abort();
    let _ = hangar.task.await;
    // 2. ARC's CRDs back in place.
    hangar_testkit::crds::apply_and_wait(&client, &hangar_testkit::arc::crds().unwrap())
        .await
        .unwrap();
    // 3. Hangar's finalizer off the sets: ARC deletes the sets it replaces, and would wait for
    //    it forever.
    remove_hangar_set_finalizers(&client).await;
    // 4. Start ARC, webhooks and all.
    let mut arc = start_arc(&binaries, &kubeconfig, &url, &arc_dir, &client).await;
    wait_github(&world, "the job across the way back completed", |w| {
        completed(w, &across)
    })
    .await;
    eventually_of(
        &world,
        "Hangar's pods and Runners gone under ARC",
        WAIT,
        || {
            let client = client.clone();
            let hangars = &hangars;
            async move {
                let now = Objects::list(&client).await;
                (now.pods.is_disjoint(&hangars.pods) && now.runners.is_disjoint(&hangars.runners))
                    .then_some(())
            }
        },
    )
    .await;
    let after = submit(&sim, RD_LABEL, 2, SHORT_JOB_MS);
    wait_github(&world, "jobs run on ARC's runners again", |w| {
        completed(w, &after)
    })
    .await;
    let all: Vec<u64> = every_job
        .iter()
        .chain(&across)
        .chain(&after)
        .copied()
        .collect();
    assert_no_job_lost(&sim, &all);
    registrations.assert_each_registered_once();

    arc.kill();
    nodes.shutdown().await.unwrap();
    drop(own);
    let _ = std::fs::remove_dir_all(&arc_dir);
}

/// What a failed wait shows: every runner object in the namespace, GitHub's runners and jobs.
struct World<'a> {
    cluster: &'a hangar_testkit::TestCluster,
    sim: ghsim::Sim,
}

impl hangar_testkit::eventually::Describe for World<'_> {
    async fn describe(&self) -> String {
        let shown = kubectl_get(
            self.cluster,
            "runnerdeployments,runnerreplicasets,runners,runnersets,statefulsets,pods,hra",
        );
        let github = self.sim.read(|w, _| {
            let runners: Vec<_> = w
                .runners
                .values()
                .map(|r| format!("{} online={} busy={}", r.name, r.online(), r.busy()))
                .collect();
            let jobs: Vec<_> = w
                .jobs
                .values()
                .map(|j| format!("{} {:?} on {:?}", j.id, j.status, j.runner_name))
                .collect();
            format!("GitHub runners: {runners:#?}\njobs: {jobs:#?}")
        });
        format!("{shown}\n{github}")
    }
}

/// Starts ARC's two programs with a 5 s sync period and registers its webhook configurations
/// (waiting until its webhook server answers, since they refuse writes until then).
async fn start_arc(
    binaries: &ArcBinaries,
    kubeconfig: &Path,
    github: &str,
    dir: &Path,
    client: &kube::Client,
) -> ArcProcesses {
    let loopback = |port| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let config = ArcConfig {
        kubeconfig: kubeconfig.to_owned(),
        github_url: github.to_owned(),
        github_token: TOKEN.to_owned(),
        webhook_secret: "unused".to_owned(),
        namespace: NS.to_owned(),
        webhook_addr: loopback(free_port().unwrap()),
        manager_metrics_addr: loopback(free_port().unwrap()),
        webhook_metrics_addr: loopback(free_port().unwrap()),
        admission_port: free_port().unwrap(),
        sync_period: Duration::from_secs(5),
        dir: dir.to_owned(),
    };
    let arc = ArcProcesses::spawn(binaries, &config).unwrap();
    for configuration in hangar_testkit::arc::admission_webhooks(&config).unwrap() {
        let params = PatchParams::apply("takeover-test").force();
        let name = configuration["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        if configuration["kind"] == "MutatingWebhookConfiguration" {
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .patch(&name, &params, &Patch::Apply(&configuration))
                .await
                .unwrap();
        } else {
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .patch(&name, &params, &Patch::Apply(&configuration))
                .await
                .unwrap();
        }
    }
    arc
}

/// The RunnerDeployment `rd` (scaled by the autoscaler `rd`: 3 to 5 runners on the queued and
/// running workflow runs) and the RunnerSet `rs` of 2 runners, applied once ARC's webhooks
/// admit them.
async fn apply_pool(client: &kube::Client, nodes: &NodeSimHandle) {
    let placement = nodes.placement();
    let rd = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerDeployment",
        "metadata": {"name": "rd"},
        "spec": {"template": {"spec": {
            "repository": "octo/app",
            "labels": [RD_LABEL],
            "nodeSelector": placement.node_selector,
            "tolerations": placement.tolerations,
        }}},
    });
    let hra = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "HorizontalRunnerAutoscaler",
        "metadata": {"name": "rd"},
        "spec": {
            "scaleTargetRef": {"kind": "RunnerDeployment", "name": "rd"},
            "minReplicas": 3,
            "maxReplicas": 5,
            "metrics": [{"type": "TotalNumberOfQueuedAndInProgressWorkflowRuns"}],
        },
    });
    let rs = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerSet",
        "metadata": {"name": "rs"},
        "spec": {
            "replicas": 2,
            "repository": "octo/app",
            "labels": [RS_LABEL],
            "selector": {"matchLabels": {"app": "rs"}},
            "serviceName": "rs",
            "template": {
                "metadata": {"labels": {"app": "rs"}},
                "spec": {
                    "containers": [{"name": "runner"}],
                    "nodeSelector": placement.node_selector,
                    "tolerations": placement.tolerations,
                },
            },
        },
    });
    let params = PatchParams::apply("takeover-test").force();
    eventually("ARC's webhooks admit the pool", WAIT, || {
        let (client, params) = (client.clone(), params.clone());
        let (rd, hra, rs) = (rd.clone(), hra.clone(), rs.clone());
        async move {
            Api::<RunnerDeployment>::namespaced(client.clone(), NS)
                .patch("rd", &params, &Patch::Apply(&rd))
                .await
                .ok()?;
            Api::<HorizontalRunnerAutoscaler>::namespaced(client.clone(), NS)
                .patch("rd", &params, &Patch::Apply(&hra))
                .await
                .ok()?;
            Api::<RunnerSet>::namespaced(client, NS)
                .patch("rs", &params, &Patch::Apply(&rs))
                .await
                .ok()?;
            Some(())
        }
    })
    .await;
}

async fn delete_webhook_configurations(client: &kube::Client) {
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone());
    mutating
        .delete(WEBHOOK_CONFIGURATIONS[0], &DeleteParams::default())
        .await
        .unwrap();
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    validating
        .delete(WEBHOOK_CONFIGURATIONS[1], &DeleteParams::default())
        .await
        .unwrap();
}

/// Takes Hangar's finalizer off every RunnerDeployment, RunnerReplicaSet and RunnerSet that
/// has it (a merge patch of the list without it), leaving their other finalizers.
async fn remove_hangar_set_finalizers(client: &kube::Client) {
    async fn strip<K>(client: &kube::Client)
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api = Api::<K>::namespaced(client.clone(), NS);
        for object in api.list(&ListParams::default()).await.unwrap() {
            if !object
                .finalizers()
                .iter()
                .any(|f| f == HANGAR_SET_FINALIZER)
            {
                continue;
            }
            let kept: Vec<&String> = object
                .finalizers()
                .iter()
                .filter(|f| *f != HANGAR_SET_FINALIZER)
                .collect();
            api.patch(
                &object.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": kept}})),
            )
            .await
            .unwrap();
        }
    }
    strip::<RunnerDeployment>(client).await;
    strip::<RunnerReplicaSet>(client).await;
    strip::<RunnerSet>(client).await;
}

/// Names of the runner objects in the namespace.
#[derive(Debug, Default)]
struct Objects {
    pods: BTreeSet<String>,
    runners: BTreeSet<String>,
    replica_sets: BTreeSet<String>,
    stateful_sets: BTreeSet<String>,
}

impl Objects {
    async fn list(client: &kube::Client) -> Self {
        let names = |items: Vec<String>| items.into_iter().collect::<BTreeSet<_>>();
        Self {
            pods: names(
                list::<Pod>(client)
                    .await
                    .iter()
                    .map(ResourceExt::name_any)
                    .collect(),
            ),
            runners: names(
                list::<hangar_api::Runner>(client)
                    .await
                    .iter()
                    .map(ResourceExt::name_any)
                    .collect(),
            ),
            replica_sets: names(
                list::<RunnerReplicaSet>(client)
                    .await
                    .iter()
                    .map(ResourceExt::name_any)
                    .collect(),
            ),
            stateful_sets: names(
                list::<StatefulSet>(client)
                    .await
                    .iter()
                    .map(ResourceExt::name_any)
                    .collect(),
            ),
        }
    }

    /// None of `earlier`'s pods, Runners and StatefulSets is left.
    fn disjoint(&self, earlier: &Objects) -> bool {
        self.pods.is_disjoint(&earlier.pods)
            && self.runners.is_disjoint(&earlier.runners)
            && self.stateful_sets.is_disjoint(&earlier.stateful_sets)
    }
}

async fn list<K>(client: &kube::Client) -> Vec<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

fn kubectl_get(cluster: &hangar_testkit::TestCluster, kinds: &str) -> String {
    let out = cluster
        .kubectl()
        .args(["get", kinds, "-n", NS])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every GitHub registration seen, sampled every 100 ms: a runner name registered twice shows
/// as one name with two runner ids.
struct Registrations {
    seen: Arc<Mutex<BTreeMap<String, BTreeSet<u64>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Registrations {
    fn record(sim: &ghsim::Sim) -> Self {
        let seen = Arc::new(Mutex::new(BTreeMap::<String, BTreeSet<u64>>::new()));
        let task = tokio::spawn({
            let (sim, seen) = (sim.clone(), seen.clone());
            async move {
                loop {
                    let now: Vec<(String, u64)> = sim.read(|w, _| {
                        w.runners
                            .iter()
                            .map(|(id, r)| (r.name.clone(), *id))
                            .collect()
                    });
                    {
                        let mut seen = seen.lock().unwrap();
                        for (name, id) in now {
                            seen.entry(name).or_default().insert(id);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        Self { seen, task }
    }

    fn assert_each_registered_once(&self) {
        self.task.abort();
        let seen = self.seen.lock().unwrap();
        let twice: Vec<_> = seen.iter().filter(|(_, ids)| ids.len() > 1).collect();
        assert!(twice.is_empty(), "runners registered twice: {twice:?}");
        assert!(!seen.is_empty());
    }
}

fn submit(sim: &ghsim::Sim, label: &str, count: u32, duration_ms: u64) -> Vec<u64> {
    let jobs = SubmitJobs {
        repository: "octo/app".into(),
        count,
        labels: vec!["self-hosted".into(), label.into()],
        duration_ms,
        conclusion: Some("success".into()),
        workflow: None,
        job_name: None,
    };
    sim.update(|w, now| w.submit_jobs(&jobs, now)).unwrap().1
}

fn online_with(w: &ghsim::world::World, label: &str) -> usize {
    w.runners
        .values()
        .filter(|r| r.online() && r.labels.iter().any(|l| l.name == label))
        .count()
}

fn started(w: &ghsim::world::World, jobs: &[u64]) -> bool {
    jobs.iter()
        .all(|id| w.jobs.get(id).is_some_and(|j| j.started_at.is_some()))
}

fn completed(w: &ghsim::world::World, jobs: &[u64]) -> bool {
    jobs.iter().all(|id| {
        w.jobs
            .get(id)
            .is_some_and(|j| j.status == JobStatus::Completed)
    })
}

fn assert_no_job_lost(sim: &ghsim::Sim, jobs: &[u64]) {
    sim.read(|w, _| {
        for id in jobs {
            let job = &w.jobs[id];
            assert_eq!(
                job.conclusion.as_deref(),
                Some("success"),
                "job {id} ({:?} on {:?})",
                job.status,
                job.runner_name
            );
        }
        let interrupted = w.jobs.values().filter(|j| j.interrupted).count();
        assert_eq!(interrupted, 0, "interrupted jobs");
    });
}

async fn wait_github(
    world: &World<'_>,
    what: &str,
    mut done: impl FnMut(&ghsim::world::World) -> bool,
) {
    eventually_of(world, what, WAIT, || {
        let ok = world.sim.read(|w, _| done(w));
        async move { ok.then_some(()) }
    })
    .await;
}
