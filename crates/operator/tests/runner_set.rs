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

use hangar::controllers::runner_set::RunnerSetRegistration;
use hangar_api::RunnerSet;
use hangar_testkit::eventually::{Describe, eventually_of};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use kube::ResourceExt;
use kube::api::ListParams;
use nodesim::NodeSimHandle;
use serde_json::json;
use support::Harness;

const WAIT: Duration = Duration::from_secs(60);

struct Rs {
    h: Harness,
    nodes: NodeSimHandle,
    /// The admission webhooks, when the test runs with them.
    admission: Option<support::AdmissionServer>,
}

impl Rs {
    async fn start(prefix: &str) -> Self {
        support::init_tracing();
        let h = Harness::start_with(prefix, support::uncached()).await;
        let nodes = h.start_nodes("rs", prefix).await;
        Self {
            h,
            nodes,
            admission: None,
        }
    }

    /// As `hangar run --admission-addr`: the admission webhooks served for this namespace, and
    /// the RunnerSet controller registering pods through the pod webhook.
    async fn start_with_admission(prefix: &str) -> Self {
        support::init_tracing();
        let h = Harness::start_configured(prefix, support::uncached(), |s| {
            s.runner_set_registration = RunnerSetRegistration::PodWebhook;
        })
        .await;
        let admission = Some(h.serve_admission().await);
        let nodes = h.start_nodes("rs", prefix).await;
        Self {
            h,
            nodes,
            admission,
        }
    }

    /// A RunnerSet for repository `octo/app` whose pods run on this test's nodes.
    fn runner_set(&self, name: &str, replicas: i32, label: &str, env: &[(&str, &str)]) -> String {
        support::runner_set_manifest(Some(&self.nodes), name, replicas, label, env)
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
        eventually_of(self, &format!("{n} registered runners"), WAIT, || async {
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

    async fn shutdown(self) {
        self.nodes.shutdown().await.unwrap();
        drop(self.admission);
    }
}

impl Describe for Rs {
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
    let status = eventually_of(&e, "status with 3 ready runners", WAIT, || async {
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
    eventually_of(
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

/// A StatefulSet's registration Secret is applied owned by the RunnerSet, and handed to the
/// StatefulSet once that exists: a controller killed in between (seen by the chaos soak) left
/// it owned by the RunnerSet, outliving the StatefulSet. Here the hand-over is undone by hand;
/// the StatefulSet's retirement hands it over, so it goes with its StatefulSet.
#[tokio::test]
async fn a_registration_secret_left_with_the_runner_set_goes_with_its_stateful_set() {
    let e = Rs::start("rs-handover").await;
    e.h.apply(&e.runner_set("handover", 1, "handover", &[]));
    e.wait_running(1).await;
    let sts = e.stateful_sets().await.remove(0);
    let set = e.set("handover").await;
    let secret = format!("{}-registration", sts.name_any());
    let to_the_set = json!({"metadata": {"ownerReferences": [{
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerSet",
        "name": "handover",
        "uid": set.uid().unwrap(),
    }]}});
    e.h.api::<Secret>()
        .patch(
            &secret,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&to_the_set),
        )
        .await
        .unwrap();

    kubectl_scale(&e, "handover", 0);
    eventually_of(&e, "the StatefulSet and its Secret gone", WAIT, || async {
        let left = e.h.api::<Secret>().get_opt(&secret).await.unwrap();
        (e.stateful_sets().await.is_empty() && left.is_none()).then_some(())
    })
    .await;
    e.shutdown().await;
}

#[tokio::test]
async fn scale_down_while_jobs_run_interrupts_no_job() {
    let e = Rs::start("rs-busy").await;
    e.h.apply(&e.runner_set("busy", 3, "busy", &[]));
    e.wait_running(3).await;

    let jobs = e.submit(2, "busy", Duration::from_secs(4));
    eventually_of(&e, "two busy runners", WAIT, || async {
        (e.h.busy().len() == 2).then_some(())
    })
    .await;
    kubectl_scale(&e, "busy", 0);
    eventually_of(&e, "jobs finished and every runner gone", WAIT, || async {
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
    eventually_of(&e, "the job done", WAIT, || async {
        e.all_succeeded(&jobs).then_some(())
    })
    .await;
    let second = eventually_of(&e, "a fresh runner in a new statefulset", WAIT, || async {
        let now = e.wait_running_once(1).await?;
        (now.is_disjoint(&first)).then_some(now)
    })
    .await;
    assert_eq!(second.len(), 1);
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

/// Chaos seed 2: without the pod webhook a StatefulSet's pod restarts `Always`, so the runner
/// container of an ephemeral runner that finished its job was restarted in place, registered
/// again with the token still in its Secret and took the next queued job — and the StatefulSet
/// was then deleted as finished (its `restartCount` said so), killing that job. A job queued
/// behind another for the same runner must run to the end, on a runner of its own: the
/// finished pod's credential was taken back, so its restarted container cannot register.
#[tokio::test]
async fn without_the_pod_webhook_a_job_queued_behind_a_finished_one_is_not_interrupted() {
    let e = Rs::start("rs-queued").await;
    e.h.apply(&e.runner_set("queued", 1, "queued", &[]));
    let first_pod = e.wait_running(1).await;

    let first = e.submit(1, "queued", Duration::from_millis(300));
    let second = e.submit(1, "queued", Duration::from_secs(3));
    eventually_of(&e, "both jobs done (or one interrupted)", WAIT, || async {
        e.assert_no_busy_runner_pod_deleting().await;
        let done = e.all_succeeded(&first) && e.all_succeeded(&second);
        (done || e.h.interrupted() > 0).then_some(())
    })
    .await;
    assert_eq!(e.h.interrupted(), 0, "{}", e.describe().await);
    let ran_on = |id: u64| e.h.sim.read(|w, _| w.jobs[&id].runner_name.clone());
    let (a, b) = (ran_on(first[0]), ran_on(second[0]));
    assert!(
        a.as_ref().is_some_and(|a| first_pod.contains(a)),
        "the first job ran on {a:?}, not on {first_pod:?}"
    );
    assert_ne!(
        a, b,
        "one pod ran both jobs: its runner came back after its job"
    );
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
    eventually_of(&e, "two busy runners", WAIT, || async {
        (e.h.busy().len() == 2).then_some(())
    })
    .await;
    e.h.apply(&e.runner_set("roll", 2, "roll", &[("STAGE", "two")]));
    let new = eventually_of(&e, "two runners of the new template only", WAIT, || async {
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
    eventually_of(
        &e,
        "two runner statefulsets of the example",
        WAIT,
        || async { (e.stateful_sets().await.len() == 2).then_some(()) },
    )
    .await;
    // Placing the pods on this test's nodes (another field manager, as a user's overlay would)
    // rolls the set out to runners that register.
    place_example(&e);
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

/// Places the seed example's pods on this test's nodes with a server-side apply of another
/// field manager (as a user's overlay would), leaving the example's own fields as written.
fn place_example(e: &Rs) {
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
}

/// PersistentVolumes a test created (cluster-scoped), deleted when it ends, also on panic.
struct Volumes {
    names: Vec<String>,
}

impl Volumes {
    /// `count` hostPath volumes of 1Gi with storage class `class` and reclaim policy Retain,
    /// named `<class>-<n>`: the local stack has no provisioner, and kube-controller-manager's
    /// PV controller binds pre-created volumes to matching claims.
    async fn create(h: &Harness, class: &str, count: usize) -> Self {
        let api: kube::Api<PersistentVolume> = kube::Api::all(h.client.clone());
        let mut names = Vec::new();
        for n in 0..count {
            let name = format!("{class}-{n}");
            let pv: PersistentVolume = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"hangar-test": class}},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": class,
                    "hostPath": {"path": format!("/tmp/hangar-test/{name}")},
                },
            }))
            .unwrap();
            api.create(&kube::api::PostParams::default(), &pv)
                .await
                .unwrap();
            names.push(name);
        }
        Self { names }
    }
}

impl Drop for Volumes {
    fn drop(&mut self) {
        let _ = hangar_testkit::TestCluster::get()
            .kubectl()
            .args(["delete", "pv", "--ignore-not-found", "--wait=false"])
            .args(&self.names)
            .output();
    }
}

impl Rs {
    /// The claims of the test namespace and the test's volumes, a line each.
    async fn describe_volumes(&self, class: &str) -> String {
        let mut out = String::new();
        for c in self.h.list::<PersistentVolumeClaim>().await {
            out += &format!(
                "claim {} labels={:?} volume={:?} phase={:?} deleting={}\n",
                c.name_any(),
                c.labels(),
                c.spec.as_ref().and_then(|s| s.volume_name.clone()),
                c.status.as_ref().and_then(|s| s.phase.clone()),
                c.metadata.deletion_timestamp.is_some()
            );
        }
        let pvs: kube::Api<PersistentVolume> = kube::Api::all(self.h.client.clone());
        let lp = ListParams::default().labels(&format!("hangar-test={class}"));
        for v in pvs.list(&lp).await.unwrap().items {
            out += &format!(
                "volume {} labels={:?} claim={:?} phase={:?}\n",
                v.name_any(),
                v.labels(),
                v.spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .map(|c| c.name.clone()),
                v.status.as_ref().and_then(|s| s.phase.clone()),
            );
        }
        out
    }

    /// The registered runner of a one-runner set that is not in `seen`, with the volume (name,
    /// UID) its claim `cache-<statefulset>-0` is bound to.
    async fn next_runner_with_volume(
        &self,
        class: &str,
        seen: &BTreeSet<String>,
    ) -> (String, String, String) {
        let what = "a new registered runner whose cache claim is bound";
        let until = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(pods) = self.wait_running_once(1).await
                && let Some(pod) = pods.into_iter().next()
                && !seen.contains(&pod)
            {
                let sts = pod.trim_end_matches("-0");
                let claim = self
                    .h
                    .api::<PersistentVolumeClaim>()
                    .get(&format!("cache-{sts}-0"))
                    .await
                    .unwrap();
                // The claim names its set and its runner's StatefulSet.
                assert_eq!(claim.labels()["runnerset-name"], "pv");
                assert_eq!(claim.labels()["runner-statefulset-name"], sts);
                let volume = claim.spec.unwrap().volume_name.unwrap();
                let pvs: kube::Api<PersistentVolume> = kube::Api::all(self.h.client.clone());
                let uid = pvs.get(&volume).await.unwrap().uid().unwrap();
                return (pod, volume, uid);
            }
            assert!(
                std::time::Instant::now() < until,
                "timed out waiting for {what}\n{}{}",
                self.describe().await,
                self.describe_volumes(class).await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[tokio::test]
async fn a_later_runner_binds_the_persistent_volume_a_finished_runner_used() {
    let e = Rs::start("rs-pv").await;
    // Storage class and volume names are unique to this test's namespace: volumes are
    // cluster-scoped and tests may share a control plane.
    let class = format!("cache-{}", e.h.ns.name());
    let _volumes = Volumes::create(&e.h, &class, 2).await;
    let mut set: serde_json::Value =
        serde_json::from_str(&e.runner_set("pv", 1, "pv", &[])).unwrap();
    set["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "cache", "mountPath": "/cache"}]);
    set["spec"]["volumeClaimTemplates"] = json!([{
        "metadata": {"name": "cache"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }]);
    e.h.apply(&set.to_string());

    // Three runners one after the other, each running one job; there are only two volumes,
    // so the third can only start on a volume an earlier runner used (and without reuse it
    // would never get one: a Retained volume stays Released).
    let mut seen = BTreeSet::new();
    let mut used = Vec::new();
    for _ in 0..3 {
        let (pod, volume, uid) = e.next_runner_with_volume(&class, &seen).await;
        let jobs = e.submit(1, "pv", Duration::from_millis(300));
        eventually_of(&e, "the job done", WAIT, || async {
            e.all_succeeded(&jobs).then_some(())
        })
        .await;
        seen.insert(pod.clone());
        used.push((pod, volume, uid));
    }
    let (last_pod, last_volume, last_uid) = used.last().unwrap().clone();
    let earlier = used[..2]
        .iter()
        .find(|(_, v, uid)| *v == last_volume && *uid == last_uid);
    assert!(
        earlier.is_some(),
        "runner {last_pod} got volume {last_volume}, used by none of {used:?}"
    );
    // Same object, not a new one of the same name: the data written by the earlier runner is
    // what the later one sees.
    let (earlier_pod, _, _) = earlier.unwrap();
    assert_ne!(*earlier_pod, last_pod);

    // The finished runners' claims are deleted; what remains is at most the claim of the
    // runner that replaces the last one, and no volume is left marked for cleanup once its
    // claim is gone.
    eventually_of(&e, "finished runners' claims deleted", WAIT, || async {
        let claims = e.h.list::<PersistentVolumeClaim>().await;
        let stale = claims.iter().any(|c| {
            used.iter()
                .any(|(pod, _, _)| c.name_any() == format!("cache-{pod}"))
        });
        (!stale).then_some(())
    })
    .await;
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

/// The runner container of a pod.
fn runner_container(p: &Pod) -> k8s_openapi::api::core::v1::Container {
    p.spec
        .clone()
        .unwrap()
        .containers
        .into_iter()
        .find(|c| c.name == "runner")
        .unwrap()
}

/// The Secret a runner container's variable `name` reads, as (Secret, key).
fn secret_ref(p: &Pod, name: &str) -> Option<(String, String)> {
    let var = runner_container(p)
        .env
        .into_iter()
        .flatten()
        .find(|v| v.name == name)?;
    assert!(
        var.value.is_none(),
        "{name} is a literal in pod {}",
        p.name_any()
    );
    let r = var.value_from?.secret_key_ref?;
    Some((r.name, r.key))
}

// Multi-threaded: the admission server runs on the test's runtime, and `kubectl apply`
// blocks a thread while the apiserver calls it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_pod_webhook_the_seed_002_example_registers_runners_that_take_jobs() {
    let e = Rs::start_with_admission("rs-hook-seed").await;
    e.h.sim.update(|w, _| {
        w.add_org("mumoshu", None);
        w.add_repo("mumoshu", "actions-runner-controller-ci", true);
    });
    e.h.apply(include_str!(
        "../../../examples/runnerset-seed002-pod-template.yaml"
    ));
    eventually_of(
        &e,
        "two runner statefulsets of the example",
        WAIT,
        || async { (e.stateful_sets().await.len() == 2).then_some(()) },
    )
    .await;
    place_example(&e);
    let names = e.wait_running(2).await;

    // The shared registration Secret of the scope holds the token; no pod names it literally,
    // every pod reads it by reference, restarts Never and carries the inject label.
    let scope = hangar_github::Scope::repo("mumoshu", "actions-runner-controller-ci");
    let shared = hangar::admission::registration::secret_name(&scope, None);
    let secret = e.h.api::<Secret>().get(&shared).await.unwrap();
    let token = String::from_utf8(secret.data.unwrap()["runner_token"].0.clone()).unwrap();
    assert!(!token.is_empty());
    for p in e.pods().await {
        if !names.contains(&p.name_any()) {
            continue; // a pod of the unplaced StatefulSets, on its way out
        }
        assert!(
            !serde_json::to_string(&p).unwrap().contains(&token),
            "the token is in pod {}",
            p.name_any()
        );
        assert_eq!(
            secret_ref(&p, "RUNNER_TOKEN"),
            Some((shared.clone(), "runner_token".to_owned()))
        );
        let spec = p.spec.clone().unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(
            p.labels()["actions-runner-controller/inject-registration-token"],
            "true"
        );
        let name = runner_container(&p)
            .env
            .unwrap()
            .into_iter()
            .find(|v| v.name == "RUNNER_NAME")
            .unwrap();
        assert_eq!(name.value, Some(p.name_any()));
    }
    // No per-StatefulSet Secret in this mode.
    let per_set: Vec<String> =
        e.h.list::<Secret>()
            .await
            .iter()
            .map(|s| s.name_any())
            .filter(|n| n.ends_with("-registration"))
            .collect();
    assert!(per_set.is_empty(), "{per_set:?}");

    // The runners take jobs of the example's repository.
    let jobs = e.h.sim.update(|w, now| {
        let request = ghsim::world::SubmitJobs {
            repository: "mumoshu/actions-runner-controller-ci".into(),
            count: 3,
            labels: vec!["self-hosted".into()],
            duration_ms: 300,
            conclusion: Some("success".into()),
            workflow: None,
            job_name: None,
        };
        w.submit_jobs(&request, now).unwrap().1
    });
    eventually_of(&e, "the example's jobs done", WAIT, || async {
        e.all_succeeded(&jobs).then_some(())
    })
    .await;
    assert_eq!(e.h.interrupted(), 0, "{}", e.describe().await);
    e.shutdown().await;
}

// Multi-threaded: the admission server runs on the test's runtime, and `kubectl apply`
// blocks a thread while the apiserver calls it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_pod_webhook_a_jit_pod_deleted_directly_comes_back_with_a_fresh_config() {
    let e = Rs::start_with_admission("rs-hook-jit").await;
    let mut set: serde_json::Value =
        serde_json::from_str(&e.runner_set("jit", 1, "jit", &[])).unwrap();
    set["metadata"]["annotations"] = json!({"hangar.dev/registration": "jit"});
    e.h.apply(&set.to_string());
    let first = e.wait_running(1).await.into_iter().next().unwrap();
    let pods = e.h.api::<Pod>();
    let before = pods.get(&first).await.unwrap();
    let first_id = before.annotations()["actions-runner/id"].clone();
    // The pod reads its JIT configuration from a Secret of its own, owned by its StatefulSet.
    let jit_secret = format!("{first}-jit");
    assert_eq!(
        secret_ref(&before, "ACTIONS_RUNNER_INPUT_JITCONFIG"),
        Some((jit_secret.clone(), "jit_config".to_owned()))
    );
    assert_eq!(secret_ref(&before, "RUNNER_TOKEN"), None);
    assert_eq!(
        before.spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("Never")
    );
    let sts = e.stateful_sets().await.remove(0);
    let secret = e.h.api::<Secret>().get(&jit_secret).await.unwrap();
    assert_eq!(secret.owner_references()[0].uid, sts.uid().unwrap());

    // `kubectl delete pod`: the StatefulSet recreates it under the same name, the webhook
    // generates a fresh configuration, and the new runner registers.
    pods.delete(&first, &Default::default()).await.unwrap();
    let again = eventually_of(&e, "the pod back with a new runner", WAIT, || async {
        let p = pods.get_opt(&first).await.unwrap()?;
        let id = p.annotations().get("actions-runner/id")?.clone();
        let fresh = p.uid() != before.uid() && id != first_id;
        let running = e.wait_running_once(1).await?.contains(&first);
        (fresh && running).then_some(id)
    })
    .await;
    // GitHub knows the new runner only.
    let ids: Vec<String> =
        e.h.sim
            .read(|w, _| w.runners.values().map(|r| r.id.to_string()).collect());
    assert_eq!(ids, [again], "{}", e.describe().await);
    assert_eq!(
        e.stateful_sets().await[0].uid(),
        sts.uid(),
        "same StatefulSet"
    );

    let jobs = e.submit(1, "jit", Duration::from_millis(300));
    eventually_of(&e, "the job done", WAIT, || async {
        e.all_succeeded(&jobs).then_some(())
    })
    .await;

    kubectl_scale(&e, "jit", 0);
    eventually_of(
        &e,
        "no statefulsets, pods, JIT secrets or GitHub registrations",
        WAIT,
        || async {
            let secrets = e.h.list::<Secret>().await;
            let jit_left = secrets.iter().any(|s| s.name_any().ends_with("-jit"));
            let gone = e.stateful_sets().await.is_empty()
                && e.pods().await.is_empty()
                && !jit_left
                && e.h.registered().is_empty();
            gone.then_some(())
        },
    )
    .await;
    assert_eq!(e.h.interrupted(), 0);
    e.shutdown().await;
}

// Multi-threaded: the admission server runs on the test's runtime, and `kubectl apply`
// blocks a thread while the apiserver calls it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_pod_webhook_pods_are_refused_while_github_is_down_and_created_after() {
    let e = Rs::start_with_admission("rs-hook-down").await;
    // The registration-token endpoint fails; the rest of GitHub works.
    e.h.sim.set_faults(ghsim::Faults {
        failing_endpoints: vec!["/registration-token".into()],
        ..ghsim::Faults::default()
    });
    e.h.apply(&e.runner_set("down", 1, "down", &[]));
    let sts = eventually_of(&e, "the runner statefulset", WAIT, || async {
        e.stateful_sets().await.into_iter().next()
    })
    .await;
    // The StatefulSet controller's FailedCreate event carries the webhook's refusal.
    let events: kube::Api<k8s_openapi::api::core::v1::Event> = e.h.api();
    let message = eventually_of(
        &e,
        "a FailedCreate event with the refusal",
        WAIT,
        || async {
            let list = events.list(&ListParams::default()).await.unwrap().items;
            list.into_iter()
                .filter(|ev| ev.involved_object.name.as_deref() == Some(sts.name_any().as_str()))
                .filter(|ev| ev.reason.as_deref() == Some("FailedCreate"))
                .find_map(|ev| ev.message)
        },
    )
    .await;
    assert!(
        message.contains("cannot get a registration token for repository octo/app from GitHub")
            && message.contains("The pod is refused"),
        "{message}"
    );
    assert!(e.pods().await.is_empty(), "{}", e.describe().await);

    e.h.sim.set_faults(ghsim::Faults::default());
    let names = eventually_of(
        &e,
        "the runner registered after recovery",
        Duration::from_secs(120),
        || async { e.wait_running_once(1).await },
    )
    .await;
    assert!(names.contains(&format!("{}-0", sts.name_any())));
    e.shutdown().await;
}

#[tokio::test]
async fn a_runner_that_never_registers_is_replaced_after_the_registration_timeout() {
    let e = Rs::start("rs-regtimeout").await;
    let mut set: serde_json::Value =
        serde_json::from_str(&e.runner_set("stuck", 1, "stuck", &[])).unwrap();
    set["spec"]["template"]["metadata"] = json!({"annotations": {
        "program.nodesim.hangar.dev/runner": "runner(registration=never)",
    }});
    // The stuck runner ignores SIGTERM until it registers (as graceful-stop.sh does): keep the
    // kill short.
    set["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(2);
    e.h.apply(&set.to_string());

    let ready_pod = || async {
        e.pods().await.into_iter().find(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    };
    let first = eventually_of(&e, "a ready, unregistered runner pod", WAIT, || async {
        ready_pod().await.map(|p| p.name_any())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let names: Vec<String> = e.pods().await.iter().map(|p| p.name_any()).collect();
    assert_eq!(
        names,
        vec![first.clone()],
        "replaced before the registration timeout"
    );
    assert!(e.h.registered().is_empty());

    e.h.clock.advance(Duration::from_secs(11 * 60));
    eventually_of(&e, "the stuck runner replaced", WAIT, || async {
        let replacement = ready_pod().await?.name_any();
        (replacement != first).then_some(())
    })
    .await;
    eventually_of(
        &e,
        "the stuck runner's StatefulSet and pod gone",
        WAIT,
        || async {
            let sets = e.stateful_sets().await;
            let pods = e.pods().await;
            (sets.iter().all(|s| pod_of(s) != first) && pods.iter().all(|p| p.name_any() != first))
                .then_some(())
        },
    )
    .await;
    e.shutdown().await;
}

/// The name of a one-replica StatefulSet's pod.
fn pod_of(s: &StatefulSet) -> String {
    format!("{}-0", s.name_any())
}
