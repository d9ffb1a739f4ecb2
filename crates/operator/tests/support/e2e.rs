//! End-to-end fixtures: [`E2e`] (ghsim, the controllers and simulated nodes for one
//! namespace) and [`Deployment`] (a RunnerDeployment for `octo/app` placed on those nodes),
//! shared by the e2e and safety tests.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use ghsim::world::JobStatus;
use hangar_api::{Runner, RunnerReplicaSet};
use hangar_testkit::eventually::{Describe, eventually_of};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use nodesim::NodeSimHandle;
use serde_json::json;

use super::Harness;

pub const WAIT: Duration = Duration::from_secs(45);

/// The controllers and ghsim ([`Harness`]) plus simulated nodes running runner pods.
pub struct E2e {
    pub h: Harness,
    pub nodes: NodeSimHandle,
    /// Switches the nodes' runner faults on and off.
    pub runner_faults: nodesim::program::RunnerFaults,
}

impl E2e {
    pub async fn start(prefix: &str) -> Self {
        Self::start_configured(prefix, |_| {}).await
    }

    /// [`E2e::start`] with the controller settings adjusted by `configure`.
    pub async fn start_configured(
        prefix: &str,
        configure: impl FnOnce(&mut hangar::context::Settings),
    ) -> Self {
        super::init_tracing();
        let h = Harness::start_configured(prefix, super::uncached(), configure).await;
        let (nodes, runner_faults) = h.start_nodes_with_faults("e2e", prefix).await;
        Self {
            h,
            nodes,
            runner_faults,
        }
    }

    /// [`E2e::start`], the controllers' Kubernetes requests counted into the returned metrics
    /// ([`super::Harness::start_counted`]).
    pub async fn start_counted(prefix: &str) -> (Self, std::sync::Arc<hangar::metrics::Metrics>) {
        super::init_tracing();
        let (h, metrics) = super::Harness::start_counted(prefix, super::uncached()).await;
        let (nodes, runner_faults) = h.start_nodes_with_faults("e2e", prefix).await;
        let e = Self {
            h,
            nodes,
            runner_faults,
        };
        (e, metrics)
    }

    /// Another namespace with controllers and nodes of its own (a second `hangar run
    /// --watch-namespace`) on this one's GitHub, with settings adjusted by `configure`; this
    /// one must outlive it.
    pub async fn beside(
        &self,
        prefix: &str,
        configure: impl FnOnce(&mut hangar::context::Settings),
    ) -> Self {
        let h = self.h.beside(prefix, super::uncached(), configure).await;
        let (nodes, runner_faults) = h.start_nodes_with_faults("e2e", prefix).await;
        Self {
            h,
            nodes,
            runner_faults,
        }
    }

    /// Applies RunnerDeployment `rd`, placed on this test's nodes.
    pub fn apply(&self, rd: &Deployment) {
        self.h.apply(&rd.render(&self.nodes));
    }

    pub async fn runners(&self) -> Vec<Runner> {
        self.h.list().await
    }

    pub async fn pods(&self) -> Vec<Pod> {
        self.h.list().await
    }

    pub async fn replica_sets(&self) -> Vec<RunnerReplicaSet> {
        self.h.list().await
    }

    /// Names of the Runners whose status says Running (registered on GitHub).
    pub async fn running(&self) -> BTreeSet<String> {
        self.runners()
            .await
            .into_iter()
            .filter(|r| phase(r) == Some("Running"))
            .map(|r| r.name_any())
            .collect()
    }

    /// Waits until exactly `n` Runners exist, all Running, each online on GitHub; returns
    /// their names.
    pub async fn wait_running(&self, n: usize) -> BTreeSet<String> {
        eventually_of(
            self,
            &format!("{n} registered, online runners"),
            WAIT,
            || async {
                let runners = self.runners().await;
                let running = self.running().await;
                let online = self.h.online();
                let ok = runners.len() == n
                    && running.len() == n
                    && running.iter().all(|name| online.contains(name));
                ok.then_some(running)
            },
        )
        .await
    }

    /// Queues `count` jobs of `duration` for runners labelled `label` (and self-hosted unless
    /// `custom_only`).
    pub fn submit(
        &self,
        count: u32,
        label: &str,
        duration: Duration,
        custom_only: bool,
    ) -> Vec<u64> {
        let mut labels = vec![label.to_owned()];
        if !custom_only {
            labels.insert(0, "self-hosted".to_owned());
        }
        self.h.submit_jobs(count, labels, duration, "success")
    }

    /// (status, conclusion, interrupted) of each job.
    pub fn jobs(&self, ids: &[u64]) -> Vec<(JobStatus, Option<String>, bool)> {
        self.h.sim.read(|w, _| {
            ids.iter()
                .map(|id| {
                    let j = &w.jobs[id];
                    (j.status, j.conclusion.clone(), j.interrupted)
                })
                .collect()
        })
    }

    pub fn all_succeeded(&self, ids: &[u64]) -> bool {
        self.h.all_completed(ids, "success")
    }

    /// Fails if a runner that is running a job has a pod that is being deleted: the invariant
    /// every scale-down and rollout must keep.
    pub async fn assert_no_busy_runner_pod_deleting(&self) {
        let busy = self.h.busy();
        for pod in self.pods().await {
            assert!(
                !(busy.contains(&pod.name_any()) && pod.metadata.deletion_timestamp.is_some()),
                "pod {} is being deleted while its runner runs a job",
                pod.name_any()
            );
        }
    }

    /// Waits until no Runner, pod or GitHub registration is left, failing at once if a busy
    /// runner's pod is on its way out meanwhile: how every scale-down and deletion must end.
    pub async fn wait_all_gone_without_killing_busy_runners(&self, what: &str) {
        eventually_of(self, what, WAIT, || async {
            self.assert_no_busy_runner_pod_deleting().await;
            let gone = self.runners().await.is_empty()
                && self.pods().await.is_empty()
                && self.h.registered().is_empty();
            gone.then_some(())
        })
        .await;
    }

    pub async fn shutdown(self) {
        self.nodes.shutdown().await.unwrap();
    }
}

impl Describe for E2e {
    /// What a failing test should print: Runners, pods and GitHub's runners.
    async fn describe(&self) -> String {
        let mut out = String::new();
        for r in self.runners().await {
            let st = r.status.clone().unwrap_or_default();
            out += &format!(
                "runner {} phase={:?} reason={:?} ready={:?} deleting={} annotations={:?}\n",
                r.name_any(),
                st.phase,
                st.reason,
                st.ready,
                r.metadata.deletion_timestamp.is_some(),
                r.annotations()
            );
        }
        for p in self.pods().await {
            let st = p.status.clone().unwrap_or_default();
            let containers: Vec<String> = st
                .container_statuses
                .iter()
                .flatten()
                .map(|c| format!("{}:{:?}", c.name, c.state))
                .collect();
            out += &format!(
                "pod {} phase={:?} node={:?} deleting={} finalizers={:?} annotations={:?} containers={containers:?}\n",
                p.name_any(),
                st.phase,
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                p.metadata.deletion_timestamp.is_some(),
                p.finalizers(),
                p.annotations()
            );
        }
        let stateful_sets: Vec<StatefulSet> = self.h.list().await;
        for s in stateful_sets {
            out += &format!(
                "statefulset {} generation={:?} deleting={} finalizers={:?} annotations={:?} spec.replicas={:?} status={:?}\n",
                s.name_any(),
                s.metadata.generation,
                s.metadata.deletion_timestamp.is_some(),
                s.finalizers(),
                s.annotations(),
                s.spec.as_ref().and_then(|s| s.replicas),
                s.status,
            );
        }
        let gh = self.h.describe_github_runners();
        out + &gh
    }
}

pub fn phase(r: &Runner) -> Option<&str> {
    r.status.as_ref()?.phase.as_deref()
}

pub fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .unwrap()
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string()
}

/// A RunnerDeployment for repository `octo/app`.
#[derive(Clone, Debug)]
pub struct Deployment {
    pub name: String,
    pub replicas: i32,
    pub labels: Vec<String>,
    pub annotations: BTreeMap<String, String>,
    pub env: Vec<(String, String)>,
    pub effective_time: Option<SystemTime>,
    pub termination_grace_seconds: Option<i64>,
    /// `githubAPICredentialsFrom.secretRef.name` of the template.
    pub credentials_secret: Option<String>,
    /// `dockerEnabled: false`: the runner container alone, no docker sidecar.
    pub without_docker: bool,
    /// `ephemeral: false`: static runners, which take job after job.
    pub static_runners: bool,
    /// The runner image (the controller's default when unset).
    pub image: Option<String>,
}

impl Deployment {
    pub fn new(name: &str, replicas: i32, label: &str) -> Self {
        Self {
            name: name.to_owned(),
            replicas,
            labels: vec![label.to_owned()],
            annotations: BTreeMap::new(),
            env: vec![],
            effective_time: None,
            termination_grace_seconds: None,
            credentials_secret: None,
            without_docker: false,
            static_runners: false,
            image: None,
        }
    }

    pub fn replicas(mut self, replicas: i32) -> Self {
        self.replicas = replicas;
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The deployment as YAML (JSON is YAML), its pods placed on `nodes`.
    pub fn render(&self, nodes: &NodeSimHandle) -> String {
        let placement = nodes.placement();
        let mut spec = json!({
            "repository": "octo/app",
            "labels": self.labels,
            "nodeSelector": placement.node_selector,
            "tolerations": placement.tolerations,
        });
        if !self.env.is_empty() {
            spec["env"] = self
                .env
                .iter()
                .map(|(k, v)| json!({"name": k, "value": v}))
                .collect();
        }
        if let Some(grace) = self.termination_grace_seconds {
            spec["terminationGracePeriodSeconds"] = json!(grace);
        }
        if let Some(secret) = &self.credentials_secret {
            spec["githubAPICredentialsFrom"] = json!({"secretRef": {"name": secret}});
        }
        if self.without_docker {
            spec["dockerEnabled"] = json!(false);
        }
        if self.static_runners {
            spec["ephemeral"] = json!(false);
        }
        if let Some(image) = &self.image {
            spec["image"] = json!(image);
        }
        let mut rd = json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "RunnerDeployment",
            "metadata": {"name": self.name},
            "spec": {
                "replicas": self.replicas,
                "template": {"metadata": {"annotations": self.annotations}, "spec": spec},
            },
        });
        if let Some(t) = self.effective_time {
            rd["spec"]["effectiveTime"] = json!(rfc3339(t));
        }
        rd.to_string()
    }
}
