//! Walk-through: ARC v0.27.6 manages an ephemeral RunnerDeployment of three runners, two of
//! them busy with 60 s jobs; ARC is killed, its CRDs are replaced in place by Hangar's (the CRs
//! kept), and `hangar run` starts on the same objects. Prints every pod, Runner,
//! RunnerReplicaSet, registration and job before the swap, after it and every 10 s after
//! Hangar started, then runs three more jobs. Run it with
//! `cargo build --release -p hangar --bin hangar --example takeover && target/release/examples/takeover`
//! (ARC is built into the cache on first use; logs in `target/takeover/`).
//!
//! Not a test: it shows what the takeover test is to assert. What it showed at its first run:
//! Hangar computes its own template hash, so it makes a RunnerReplicaSet of its own with three
//! runners at once and scales ARC's to zero; ARC's idle runner is unregistered and deleted, its
//! two busy runners fail unregistration (busy) and stay until their jobs end, then go; all five
//! jobs completed, none interrupted.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use common::{NAMESPACE, World};
use ghsim::world::{JobStatus, SubmitJobs};
use hangar_testkit::control_plane::{ControlPlane, StartOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let hangar = common::hangar_binary(None, "takeover")?;
    let dir = root.join("target/takeover");
    let cluster = dir.join("cluster");
    let mut options = StartOptions::new(&cluster, hangar_testkit::Binaries::configured());
    options.tie_to_pid = Some(std::process::id());
    let plane = ControlPlane::start(options).await?;
    let result = run(plane.kubeconfig(), &hangar, &dir).await;
    ControlPlane::stop(&cluster)?;
    result
}

async fn run(
    kubeconfig: &std::path::Path,
    hangar: &std::path::Path,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    let arc_crds = hangar_testkit::arc::crds()?;
    let World {
        client,
        github,
        nodes,
        ..
    } = World::start_with_crds(kubeconfig, 2, &arc_crds).await?;
    let binaries = hangar_testkit::arc::ArcBinaries::ensure()?;
    let mut arc = common::spawn_arc(
        &binaries,
        kubeconfig,
        github.url.as_str(),
        std::net::SocketAddr::from(([127, 0, 0, 1], hangar_testkit::control_plane::free_port()?)),
        "unused",
        &dir.join("arc"),
    )?;
    let placement = nodes.placement();
    let rd = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1",
        "kind": "RunnerDeployment",
        "metadata": {"name": "takeover"},
        "spec": {
            "replicas": 3,
            "template": {"spec": {
                "repository": "octo/app",
                "labels": ["takeover"],
                "nodeSelector": placement.node_selector,
                "tolerations": placement.tolerations,
            }},
        },
    });
    let rds: Api<hangar_api::RunnerDeployment> = Api::namespaced(client.clone(), NAMESPACE);
    rds.patch(
        "takeover",
        &PatchParams::apply("takeover").force(),
        &Patch::Apply(&rd),
    )
    .await?;
    let started = Instant::now();
    wait(
        &github.sim,
        "3 runners registered and online under ARC",
        |w| w.runners.values().filter(|r| r.online()).count() == 3,
    )
    .await?;
    println!("ARC: 3 runners online after {:.1?}", started.elapsed());
    let long = SubmitJobs {
        repository: "octo/app".into(),
        count: 2,
        labels: vec!["self-hosted".into(), "takeover".into()],
        duration_ms: 60_000,
        conclusion: Some("success".into()),
        workflow: None,
        job_name: None,
    };
    let (_, busy_jobs) = github.sim.update(|w, now| w.submit_jobs(&long, now))?;
    wait(&github.sim, "2 jobs running", |w| {
        busy_jobs
            .iter()
            .all(|id| w.jobs.get(id).is_some_and(|j| j.started_at.is_some()))
    })
    .await?;
    snapshot(&client, &github.sim, "under ARC, 2 busy").await?;

    arc.kill();
    println!("ARC killed");
    hangar_testkit::crds::apply_and_wait(&client, &hangar_api::crds())
        .await
        .map_err(anyhow::Error::msg)?;
    println!("Hangar's CRDs applied over ARC's");
    snapshot(&client, &github.sim, "after the CRD swap").await?;

    let log = std::fs::File::create(dir.join("hangar.log"))?;
    let mut hangar = common::hangar_run(hangar, kubeconfig, github.url.as_str())
        .args(["--metrics-addr", "0", "--health-probe-bind-address", "0"])
        .env("RUST_LOG", "info")
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting hangar")?;
    println!("hangar started");
    for i in 0..8 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        snapshot(&client, &github.sim, &format!("hangar +{}s", (i + 1) * 10)).await?;
    }
    let short = SubmitJobs {
        duration_ms: 2_000,
        count: 3,
        ..long
    };
    let (_, new_jobs) = github.sim.update(|w, now| w.submit_jobs(&short, now))?;
    let _ = wait(&github.sim, "every job completed", |w| {
        busy_jobs.iter().chain(&new_jobs).all(|id| {
            w.jobs
                .get(id)
                .is_some_and(|j| j.status == JobStatus::Completed)
        })
    })
    .await;
    snapshot(&client, &github.sim, "at the end").await?;
    let accounting = ghsim::accounting::snapshot(&github.sim);
    println!(
        "jobs: {:?}\nrunners ever registered: {}",
        accounting.jobs_summary, accounting.runners.registered
    );
    let _ = hangar.kill();
    let _ = hangar.wait();
    nodes.shutdown().await?;
    Ok(())
}

async fn wait(
    sim: &ghsim::Sim,
    what: &str,
    mut done: impl FnMut(&ghsim::world::World) -> bool,
) -> anyhow::Result<()> {
    hangar_testkit::eventually::until(
        what,
        Duration::from_secs(180),
        Duration::from_millis(200),
        || sim.read(|w, _| done(w)),
    )
    .await?;
    Ok(())
}

async fn snapshot(client: &kube::Client, sim: &ghsim::Sim, when: &str) -> anyhow::Result<()> {
    println!("--- {when}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for p in pods.list(&ListParams::default()).await? {
        println!(
            "pod {} phase={:?} deleting={} finalizers={:?} annotations={:?}",
            p.name_any(),
            p.status.as_ref().and_then(|s| s.phase.clone()),
            p.metadata.deletion_timestamp.is_some(),
            p.finalizers(),
            p.annotations().keys().collect::<Vec<_>>(),
        );
    }
    let runners: Api<hangar_api::Runner> = Api::namespaced(client.clone(), NAMESPACE);
    match runners.list(&ListParams::default()).await {
        Ok(list) => {
            for r in list {
                println!(
                    "runner {} hash={:?} finalizers={:?} deleting={}",
                    r.name_any(),
                    r.labels().get("runner-template-hash"),
                    r.finalizers(),
                    r.metadata.deletion_timestamp.is_some()
                );
            }
        }
        Err(e) => println!("runners: {e}"),
    }
    let rrs: Api<hangar_api::RunnerReplicaSet> = Api::namespaced(client.clone(), NAMESPACE);
    match rrs.list(&ListParams::default()).await {
        Ok(list) => {
            for s in list {
                println!("rrs {} replicas={:?}", s.name_any(), s.spec.replicas);
            }
        }
        Err(e) => println!("rrs: {e}"),
    }
    sim.read(|w, _| {
        for r in w.runners.values() {
            println!(
                "github runner {} online={} busy={}",
                r.name,
                r.online(),
                r.busy()
            );
        }
        let jobs: Vec<_> = w
            .jobs
            .values()
            .map(|j| (j.id, format!("{:?}", j.status), j.runner_name.clone()))
            .collect();
        println!("jobs {jobs:?}");
    });
    Ok(())
}
