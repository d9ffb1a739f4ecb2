//! RunnerSets end to end: StatefulSet-backed runners on simulated nodes (nodesim), registering
//! on ghsim and taking jobs, driven by the controllers against the real control plane.
//!
//! As in e2e.rs, each test has its own namespace, ghsim and two simulated nodes of its own pool;
//! the RunnerSet's pod template selects that pool and tolerates its taint. Assertions are what a
//! user sees: StatefulSets, pods, the RunnerSet's status, GitHub's runner list and ghsim's job
//! accounting — above all that scale-down and rollouts interrupt no job.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use hangar_api::RunnerSet;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::ListParams;
use nodesim::NodeSimHandle;
use serde_json::json;
use support::Harness;

const WAIT: Duration = Duration::from_secs(60);

struct Rs {
    h: Harness,
    nodes: NodeSimHandle,
}

impl Rs {
    async fn start(prefix: &str) -> Self {
        support::init_tracing();
        let h = Harness::start_with(prefix, support::uncached()).await;
        let nodes = h.start_nodes("rs", prefix).await;
        Self { h, nodes }
    }

    /// A RunnerSet for repository `octo/app` whose pods run on this test's nodes.
    fn runner_set(&self, name: &str, replicas: i32, label: &str, env: &[(&str, &str)]) -> String {
        let placement = self.nodes.placement();
        let env: Vec<_> = env
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        let mut pod = json!({
            "nodeSelector": placement.node_selector,
            "tolerations": placement.tolerations,
            "containers": [{"name": "runner", "env": env}],
        });
        if let Some(s) = &placement.scheduler_name {
            pod["schedulerName"] = json!(s);
        }
        json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "RunnerSet",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "repository": "octo/app",
                "labels": [label],
                "template": {"spec": pod},
            },
        })
        .to_string()
    }

    async fn stateful_sets(&self) -> Vec<StatefulSet> {
        self.h.list().await
    }

    async fn pods(&self) -> Vec<Pod> {
        self.h.list().await
    }

    async fn set(&self, name: &str) -> RunnerSet {
        self.h.api::<RunnerSet>().get(name).await.unwrap()
    }

    fn submit(&self, count: u32, label: &str, duration: Duration) -> Vec<u64> {
        let labels = vec!["self-hosted".to_owned(), label.to_owned()];
        self.h.submit_jobs(count, labels, duration, "success")
    }

    fn all_succeeded(&self, ids: &[u64]) -> bool {
        self.h.all_completed(ids, "success")
    }

    /// Names of pods that are running, registered (runner ID annotated), not being deleted,
    /// and whose runner GitHub shows online.
    async fn registered_pods(&self) -> BTreeSet<String> {
        let online = self.h.online();
        self.pods()
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.annotations().contains_key("actions-runner/id"))
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .map(|p| p.name_any())
            .filter(|n| online.contains(n))
            .collect()
    }

    /// Waits until exactly `n` StatefulSets exist, each with a registered online runner pod
    /// (and nothing else is registered on GitHub); returns the pod names.
    async fn wait_running(&self, n: usize) -> BTreeSet<String> {
        eventually(self, &format!("{n} registered runners"), WAIT, || async {
            let sets = self.stateful_sets().await;
            let pods = self.registered_pods().await;
            let ok = sets.len() == n && pods.len() == n && self.h.registered() == pods;
            ok.then_some(pods)
        })
        .await
    }

    async fn assert_no_busy_runner_pod_deleting(&self) {
        let busy = self.h.busy();
        for pod in self.pods().await {
            assert!(
                !(busy.contains(&pod.name_any()) && pod.metadata.deletion_timestamp.is_some()),
                "pod {} is being deleted while its runner runs a job\n{}",
                pod.name_any(),
                self.describe().await
            );
        }
    }

    async fn describe(&self) -> String {
        let mut out = String::new();
        for s in self.stateful_sets().await {
            out += &format!(
                "statefulset {} labels={:?} annotations={:?} status={:?} deleting={}\n",
                s.name_any(),
                s.labels(),
                s.annotations(),
                s.status.as_ref().map(|s| (s.replicas, s.ready_replicas)),
                s.metadata.deletion_timestamp.is_some()
            );
        }
        for p in self.pods().await {
            let st = p.status.clone().unwrap_or_default();
            let containers: Vec<String> = st
                .container_statuses
                .iter()
                .flatten()
                .map(|c| format!("{}:restarts={}:{:?}", c.name, c.restart_count, c.state))
                .collect();
            out += &format!(
                "pod {} phase={:?} deleting={} annotations={:?} containers={containers:?}\n",
                p.name_any(),
                st.phase,
                p.metadata.deletion_timestamp.is_some(),
                p.annotations()
            );
        }
        out += &self.h.describe_github_runners();
        out
    }

    async fn shutdown(self) {
        self.nodes.shutdown().await.unwrap();
    }
}

async fn eventually<T, F, Fut>(e: &Rs, what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let poll = Duration::from_millis(200);
    support::eventually_described(what, timeout, poll, || e.describe(), check).await
}

fn kubectl_scale(e: &Rs, name: &str, replicas: i32) {
    let out =
        e.h.cluster
            .kubectl()
            .args(["scale", "runnerset", name, "-n", e.h.ns.name()])
            .arg(format!("--replicas={replicas}"))
            .output()
            .unwrap();
    assert!(
        out.status.success(),
        "kubectl scale failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn scale_from_zero_to_three_and_back_registers_and_removes_every_runner() {
    let e = Rs::start("rs-scale").await;
    e.h.apply(&e.runner_set("scale", 0, "scale", &[]));
    kubectl_scale(&e, "scale", 3);

    let names = e.wait_running(3).await;
    // One single-replica StatefulSet per runner, each owned by the set and labelled.
    for s in e.stateful_sets().await {
        assert_eq!(s.spec.as_ref().unwrap().replicas, Some(1));
        assert_eq!(s.labels()["runnerset-name"], "scale");
        assert!(s.labels().contains_key("runner-template-hash"));
        let owner = &s.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("RunnerSet", Some(true))
        );
        assert!(names.contains(&format!("{}-0", s.name_any())));
    }
    let status = eventually(&e, "status with 3 ready runners", WAIT, || async {
        let st = e.set("scale").await.status.unwrap_or_default();
        (st.ready_replicas == Some(3)).then_some(st)
    })
    .await;
    assert_eq!(status.replicas, Some(3));
    assert_eq!(status.updated_replicas, Some(3));
    assert_eq!(status.selector.as_deref(), Some("runnerset-name=scale"));
    let available = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Available")
        .unwrap();
    assert_eq!(available.status, "True");

    kubectl_scale(&e, "scale", 0);
    eventually(
        &e,
        "no statefulsets, pods, registration secrets or GitHub registrations",
        WAIT,
        || async {
            let secrets =
                e.h.api::<Secret>()
                    .list(&ListParams::default().labels("runnerset-name=scale"))
                    .await
                    .unwrap()
                    .items;
            let gone = e.stateful_sets().await.is_empty()
                && e.pods().await.is_empty()
                && secrets.is_empty()
                && e.h.registered().is_empty();
            gone.then_some(())
        },
    )
    .await;
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

#[tokio::test]
async fn scale_down_while_jobs_run_interrupts_no_job() {
    let e = Rs::start("rs-busy").await;
    e.h.apply(&e.runner_set("busy", 3, "busy", &[]));
    e.wait_running(3).await;

    let jobs = e.submit(2, "busy", Duration::from_secs(4));
    eventually(&e, "two busy runners", WAIT, || async {
        (e.h.busy().len() == 2).then_some(())
    })
    .await;
    kubectl_scale(&e, "busy", 0);
    eventually(&e, "jobs finished and every runner gone", WAIT, || async {
        e.assert_no_busy_runner_pod_deleting().await;
        let done = e.all_succeeded(&jobs)
            && e.stateful_sets().await.is_empty()
            && e.pods().await.is_empty()
            && e.h.registered().is_empty();
        done.then_some(())
    })
    .await;
    assert_eq!(e.h.interrupted(), 0, "{}", e.describe().await);
    e.shutdown().await;
}

#[tokio::test]
async fn a_finished_ephemeral_runner_is_replaced() {
    let e = Rs::start("rs-eph").await;
    e.h.apply(&e.runner_set("eph", 1, "eph", &[]));
    let first = e.wait_running(1).await;

    let jobs = e.submit(1, "eph", Duration::from_millis(300));
    eventually(&e, "the job done", WAIT, || async {
        e.all_succeeded(&jobs).then_some(())
    })
    .await;
    let second = eventually(&e, "a fresh runner in a new statefulset", WAIT, || async {
        let now = e.wait_running_once(1).await?;
        (now.is_disjoint(&first)).then_some(now)
    })
    .await;
    assert_eq!(second.len(), 1);
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

impl Rs {
    /// One look at what [`Rs::wait_running`] waits for.
    async fn wait_running_once(&self, n: usize) -> Option<BTreeSet<String>> {
        let sets = self.stateful_sets().await;
        let pods = self.registered_pods().await;
        (sets.len() == n && pods.len() == n && self.h.registered() == pods).then_some(pods)
    }
}

#[tokio::test]
async fn a_template_change_rolls_out_without_interrupting_jobs() {
    let e = Rs::start("rs-roll").await;
    e.h.apply(&e.runner_set("roll", 2, "roll", &[("STAGE", "one")]));
    let old = e.wait_running(2).await;
    let old_hash = e.stateful_sets().await[0].labels()["runner-template-hash"].clone();

    let jobs = e.submit(2, "roll", Duration::from_secs(4));
    eventually(&e, "two busy runners", WAIT, || async {
        (e.h.busy().len() == 2).then_some(())
    })
    .await;
    e.h.apply(&e.runner_set("roll", 2, "roll", &[("STAGE", "two")]));
    let new = eventually(&e, "two runners of the new template only", WAIT, || async {
        e.assert_no_busy_runner_pod_deleting().await;
        let sets = e.stateful_sets().await;
        let all_new = sets
            .iter()
            .all(|s| s.labels()["runner-template-hash"] != old_hash);
        let pods = e.wait_running_once(2).await?;
        (all_new && e.all_succeeded(&jobs)).then_some(pods)
    })
    .await;
    assert!(new.is_disjoint(&old));
    for p in e.pods().await {
        if !new.contains(&p.name_any()) {
            continue; // an old runner's pod, finishing its termination
        }
        let runner = p
            .spec
            .unwrap()
            .containers
            .into_iter()
            .find(|c| c.name == "runner")
            .unwrap();
        let stage = runner
            .env
            .unwrap()
            .into_iter()
            .find(|v| v.name == "STAGE")
            .unwrap();
        assert_eq!(stage.value.as_deref(), Some("two"));
    }
    assert_eq!(e.h.interrupted(), 0, "{}", e.describe().await);
    e.shutdown().await;
}

#[tokio::test]
async fn the_seed_002_example_applies_unchanged_and_its_runners_register() {
    let e = Rs::start("rs-seed").await;
    e.h.sim.update(|w, _| {
        w.add_org("mumoshu", None);
        w.add_repo("mumoshu", "actions-runner-controller-ci", true);
    });
    e.h.apply(include_str!(
        "../../../examples/runnerset-seed002-pod-template.yaml"
    ));
    // Accepted and turned into runner StatefulSets; their pods fit no node yet (the manifest
    // places them nowhere in particular, and every simulated node is tainted).
    eventually(
        &e,
        "two runner statefulsets of the example",
        WAIT,
        || async { (e.stateful_sets().await.len() == 2).then_some(()) },
    )
    .await;
    // Placing the pods on this test's nodes (another field manager, as a user's overlay would)
    // rolls the set out to runners that register.
    let placement = e.nodes.placement();
    let overlay = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerSet",
        "metadata": {"name": "example"},
        "spec": {"template": {"spec": {
            "nodeSelector": placement.node_selector,
            "tolerations": placement.tolerations,
        }}},
    });
    let out =
        e.h.cluster
            .kubectl()
            .args([
                "apply",
                "--server-side",
                "--field-manager=placement",
                "-n",
                e.h.ns.name(),
                "-f",
                "-",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(overlay.to_string().as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pods = e.wait_running(2).await;
    for p in e.pods().await {
        if !pods.contains(&p.name_any()) {
            continue; // a pod of the unplaced StatefulSets, on its way out
        }
        let spec = p.spec.unwrap();
        let runner = spec.containers.iter().find(|c| c.name == "runner").unwrap();
        let env = |n: &str| {
            runner
                .env
                .iter()
                .flatten()
                .find(|v| v.name == n)
                .and_then(|v| v.value.clone())
        };
        assert_eq!(
            env("RUNNER_REPO").as_deref(),
            Some("mumoshu/actions-runner-controller-ci")
        );
        assert_eq!(env("RUNNER_EPHEMERAL").as_deref(), Some("false"));
        let limits = runner.resources.clone().unwrap().limits.unwrap();
        assert_eq!(limits["memory"].0, "8Gi");
    }
    e.shutdown().await;
}
