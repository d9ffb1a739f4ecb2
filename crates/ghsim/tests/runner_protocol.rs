//! Simulated runners over HTTP: register or JIT, connect, poll, complete, unregister.

use std::sync::Arc;
use std::time::Duration;

use ghsim::runner::{RunnerClient, RunnerError};
use ghsim::world::RegisterRunner;
use ghsim::{Sim, SimConfig};
use hangar_github::{
    ClientOptions, Credentials, Endpoint, GitHubApi, GitHubClient, JitConfigRequest, ManualClock,
    RunnerStatus, Scope,
};

const PAT: &str = "ghp_runner_tests";

async fn start() -> (ghsim::Running, GitHubClient, ManualClock) {
    let clock = ManualClock::at_epoch_2026();
    let sim = Sim::new(SimConfig {
        clock: Arc::new(clock.clone()),
        ..SimConfig::default()
    });
    sim.update(|w, _| {
        w.add_pat(PAT, "tests");
        w.add_org("acme", None);
        w.add_repo("acme", "app", true);
    });
    let running = ghsim::spawn(sim).await.unwrap();
    let url = running.url.as_str();
    let client = GitHubClient::new(
        Endpoint::custom(url, url).unwrap(),
        Credentials::token(PAT),
        ClientOptions {
            cache: false,
            clock: Arc::new(clock.clone()),
            ..ClientOptions::default()
        },
    )
    .unwrap();
    (running, client, clock)
}

/// A JIT configuration for runner `name` of `scope` in the default group.
async fn new_jit(
    client: &GitHubClient,
    scope: &Scope,
    name: &str,
    labels: &[&str],
) -> hangar_github::JitConfig {
    client
        .generate_jit_config(
            scope,
            &JitConfigRequest {
                name: name.into(),
                runner_group_id: 1,
                labels: labels.iter().map(|l| l.to_string()).collect(),
                work_folder: None,
            },
        )
        .await
        .unwrap()
}

fn submit(sim: &Sim, labels: &[&str], count: u32) -> Vec<u64> {
    sim.update(|w, now| {
        let request = ghsim::world::SubmitJobs {
            repository: "acme/app".into(),
            count,
            labels: labels.iter().map(|s| s.to_string()).collect(),
            duration_ms: 10,
            conclusion: Some("success".into()),
            workflow: None,
            job_name: None,
        };
        w.submit_jobs(&request, now).unwrap().1
    })
}

#[tokio::test]
async fn registered_runner_lifecycle() {
    let (gh, client, _) = start().await;
    let scope = Scope::org("acme");
    let token = client.registration_token(&scope).await.unwrap();
    let mut runner = RunnerClient::register(
        &gh.url,
        &RegisterRunner {
            url: Endpoint::custom(gh.url.as_str(), gh.url.as_str())
                .unwrap()
                .runner_config_url(&scope)
                .to_string(),
            token: token.token.expose().to_owned(),
            name: "persistent-1".into(),
            labels: vec!["gpu".into()],
            no_default_labels: false,
            runner_group: None,
            ephemeral: false,
            replace: false,
        },
    )
    .await
    .unwrap();
    let listed = client.list_runners(&scope).await.unwrap();
    assert_eq!(listed[0].status, RunnerStatus::Offline);
    assert_eq!(
        listed[0].label_names(),
        vec!["self-hosted", "Linux", "X64", "gpu"]
    );

    runner.connect().await.unwrap();
    assert_eq!(
        client
            .get_runner(&scope, listed[0].id)
            .await
            .unwrap()
            .status,
        RunnerStatus::Online
    );
    assert!(runner.next_job(Duration::ZERO).await.unwrap().is_none());

    let jobs = submit(&gh.sim, &["self-hosted", "gpu"], 2);
    let first = runner
        .next_job(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.id, jobs[0]);
    assert_eq!(first.repository, "acme/app");
    assert!(client.get_runner(&scope, listed[0].id).await.unwrap().busy);
    let busy = client
        .delete_runner(&scope, listed[0].id)
        .await
        .unwrap_err();
    assert_eq!(busy.category(), "runner_busy");
    assert!(
        !runner.complete(first.id, "success").await.unwrap(),
        "persistent runners stay"
    );
    let second = runner
        .next_job(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.id, jobs[1]);
    runner.complete(second.id, "failure").await.unwrap();

    let remove = client.remove_token(&scope).await.unwrap();
    runner.disconnect().await.unwrap();
    runner.unregister(remove.token.expose()).await.unwrap();
    assert!(client.list_runners(&scope).await.unwrap().is_empty());
    let conclusions: Vec<Option<String>> = gh
        .sim
        .read(|w, _| jobs.iter().map(|j| w.jobs[j].conclusion.clone()).collect());
    assert_eq!(
        conclusions,
        vec![Some("success".into()), Some("failure".into())]
    );
}

#[tokio::test]
async fn jit_runner_runs_one_job_and_disappears() {
    let (gh, client, _) = start().await;
    let scope = Scope::repo("acme", "app");
    let jit = new_jit(&client, &scope, "jit-1", &["self-hosted", "k8s"]).await;
    let mut runner = RunnerClient::from_jit_config(jit.encoded_jit_config.expose()).unwrap();
    assert_eq!(runner.runner_id, jit.runner.id.0);
    runner.connect().await.unwrap();
    let jobs = submit(&gh.sim, &["self-hosted", "k8s"], 2);
    let job = runner
        .next_job(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.id, jobs[0]);
    assert!(
        runner.complete(job.id, "success").await.unwrap(),
        "ephemeral runner removed"
    );
    assert!(client.list_runners(&scope).await.unwrap().is_empty());
    let err = runner.next_job(Duration::ZERO).await.unwrap_err();
    assert!(
        matches!(err, RunnerError::Status { status: 404, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn long_poll_wakes_when_a_job_arrives() {
    let (gh, client, _) = start().await;
    let scope = Scope::org("acme");
    let jit = new_jit(&client, &scope, "waiter", &["self-hosted"]).await;
    let mut runner = RunnerClient::from_jit_config(jit.encoded_jit_config.expose()).unwrap();
    runner.connect().await.unwrap();
    let started = std::time::Instant::now();
    let poll = tokio::spawn(async move { runner.next_job(Duration::from_secs(30)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    submit(&gh.sim, &["self-hosted"], 1);
    let job = poll.await.unwrap().unwrap();
    assert!(job.is_some());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "woken, not timed out"
    );
}

#[tokio::test]
async fn a_runner_waiting_in_a_long_poll_stays_online() {
    // Real time here: offline_after is measured on the simulator's clock.
    let sim = Sim::new(SimConfig::default());
    sim.update(|w, _| {
        w.add_pat(PAT, "tests");
        w.add_org("acme", None);
        w.config.offline_after = Duration::from_millis(300);
    });
    let gh = ghsim::spawn(sim).await.unwrap();
    let url = gh.url.as_str();
    let client = GitHubClient::new(
        Endpoint::custom(url, url).unwrap(),
        Credentials::token(PAT),
        ClientOptions::default(),
    )
    .unwrap();
    let jit = new_jit(&client, &Scope::org("acme"), "patient", &["self-hosted"]).await;
    let mut runner = RunnerClient::from_jit_config(jit.encoded_jit_config.expose()).unwrap();
    runner.connect().await.unwrap();
    let poll = tokio::spawn(async move { runner.next_job(Duration::from_millis(1500)).await });
    let online = || {
        gh.sim.update(|w, now| {
            w.tick(now);
            w.runners.values().all(|r| r.online())
        })
    };
    while !poll.is_finished() {
        assert!(online(), "offline while waiting in a poll");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        poll.await.unwrap().unwrap(),
        None,
        "no job: the poll timed out"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!online(), "offline once it stops polling");
}

#[tokio::test]
async fn second_listener_for_the_same_runner_conflicts() {
    let (_gh, client, _) = start().await;
    let jit = new_jit(&client, &Scope::org("acme"), "twin", &["a"]).await;
    let mut a = RunnerClient::from_jit_config(jit.encoded_jit_config.expose()).unwrap();
    let mut b = RunnerClient::from_jit_config(jit.encoded_jit_config.expose()).unwrap();
    a.connect().await.unwrap();
    let err = b.connect().await.unwrap_err();
    assert!(
        matches!(err, RunnerError::Status { status: 409, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn vanished_runner_interrupts_its_job_and_is_accounted() {
    let (gh, client, clock) = start().await;
    let scope = Scope::org("acme");
    let jit = new_jit(&client, &scope, "doomed", &["self-hosted"]).await;
    let mut runner = RunnerClient::from_jit_config(jit.encoded_jit_config.expose()).unwrap();
    runner.connect().await.unwrap();
    submit(&gh.sim, &["self-hosted"], 1);
    runner
        .next_job(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    drop(runner); // the pod dies mid-job
    clock.advance(Duration::from_secs(91));
    gh.sim.tick();
    let accounting = ghsim::accounting::snapshot(&gh.sim);
    assert_eq!(accounting.jobs_summary.interrupted, 1);
    assert_eq!(
        accounting.runners.offline_left_behind,
        vec!["doomed".to_string()]
    );
    let runners = client.list_runners(&scope).await.unwrap();
    assert_eq!(
        (runners[0].status, runners[0].busy),
        (RunnerStatus::Offline, false)
    );
}
