//! The runner program against an in-process ghsim, on paused time: registration, jobs,
//! SIGTERM while idle and busy, deleted registrations, failure modes, JIT.

use std::sync::Arc;
use std::time::Duration;

use ghsim::world::{JitRequest, JobStatus, SubmitJobs, TokenKind};
use ghsim::{Sim, SimConfig};
use hangar_github::Scope;
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::*;
use crate::program::{ContainerControl, ContainerIo};

const REMOVER: &str = "ghp_nodesim_remover";

/// ghsim with organization `acme` and repository `acme/app`, serving on loopback.
async fn github() -> ghsim::Running {
    let sim = Sim::new(SimConfig::default());
    sim.update(|w, _| {
        w.add_pat(REMOVER, "nodesim");
        w.add_org("acme", None);
        w.add_repo("acme", "app", true);
    });
    let running = ghsim::spawn(sim).await.unwrap();
    // The server task sets the public URL (rendered into JIT configurations) when it starts.
    let url = running.url.clone();
    until("ghsim serving", || running.sim.public_url() == url).await;
    running
}

fn registration_token(gh: &ghsim::Running) -> String {
    gh.sim.update(|w, now| {
        w.create_runner_token(&Scope::repo("acme", "app"), TokenKind::Registration, now)
            .0
    })
}

/// The env a Hangar runner pod carries, for repository `acme/app`.
fn repo_env(gh: &ghsim::Running, name: &str, ephemeral: bool) -> Vec<(&'static str, String)> {
    vec![
        ("RUNNER_ORG", String::new()),
        ("RUNNER_REPO", "acme/app".into()),
        ("RUNNER_ENTERPRISE", String::new()),
        ("RUNNER_LABELS", "team-a, gpu".into()),
        ("RUNNER_GROUP", String::new()),
        (
            "GITHUB_URL",
            gh.url.to_string().trim_end_matches('/').into(),
        ),
        ("RUNNER_WORKDIR", "/runner/_work".into()),
        ("RUNNER_EPHEMERAL", ephemeral.to_string()),
        ("RUNNER_NAME", name.into()),
        ("RUNNER_TOKEN", registration_token(gh)),
    ]
}

fn context(env: &[(&str, String)]) -> ContainerContext {
    let container = Container {
        name: "runner".into(),
        env: Some(
            env.iter()
                .map(|(k, v)| EnvVar {
                    name: (*k).into(),
                    value: Some(v.clone()),
                    value_from: None,
                })
                .collect(),
        ),
        ..Container::default()
    };
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("runner-pod".into()),
            namespace: Some("ns".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![container],
            ..PodSpec::default()
        }),
        status: None,
    };
    ContainerContext::for_test(Arc::new(pod), "runner").unwrap()
}

fn start(program: RunnerProgram, env: &[(&str, String)]) -> (JoinHandle<Exit>, ContainerControl) {
    let (io, control) = ContainerIo::pair();
    let ctx = context(env);
    (
        tokio::spawn(async move { program.run(ctx, io).await }),
        control,
    )
}

/// Waits (virtual time) until `check` holds; panics after ten virtual minutes.
async fn until(what: &str, check: impl FnMut() -> bool) {
    let (limit, poll) = (Duration::from_secs(600), Duration::from_millis(20));
    if let Err(e) = hangar_testkit::eventually::until(what, limit, poll, check).await {
        panic!("{e}");
    }
}

fn runner<'a>(w: &'a ghsim::World, name: &str) -> Option<&'a ghsim::world::Runner> {
    w.runners.values().find(|r| r.name == name)
}

fn online(gh: &ghsim::Running, name: &str) -> bool {
    gh.sim
        .read(|w, _| runner(w, name).is_some_and(|r| r.online()))
}

fn registered(gh: &ghsim::Running, name: &str) -> bool {
    gh.sim.read(|w, _| runner(w, name).is_some())
}

fn submit(gh: &ghsim::Running, count: u32, duration: Duration) -> Vec<u64> {
    gh.sim.update(|w, now| {
        let request = SubmitJobs {
            repository: "acme/app".into(),
            count,
            labels: vec!["self-hosted".into(), "gpu".into()],
            duration_ms: duration.as_millis() as u64,
            conclusion: Some("success".into()),
            workflow: None,
            job_name: None,
        };
        w.submit_jobs(&request, now).unwrap().1
    })
}

fn job_state(gh: &ghsim::Running, id: u64) -> (JobStatus, Option<String>, bool) {
    gh.sim.read(|w, _| {
        let job = &w.jobs[&id];
        (job.status, job.conclusion.clone(), job.interrupted)
    })
}

fn env_of(pairs: &[(&str, &str)]) -> Result<RunnerEnv, String> {
    RunnerEnv::read(|name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| *v))
}

#[test]
fn the_environment_is_read_like_the_summerwind_entrypoint() {
    let env = env_of(&[
        ("RUNNER_NAME", "r-1"),
        ("RUNNER_TOKEN", "T"),
        ("RUNNER_ORG", ""),
        ("RUNNER_REPO", "acme/app"),
        ("RUNNER_ENTERPRISE", ""),
        ("RUNNER_LABELS", "linux, gpu,,x"),
        ("RUNNER_GROUP", "ignored-for-repos"),
        ("GITHUB_URL", "http://gh.local:8080"),
        ("RUNNER_EPHEMERAL", "false"),
        ("STARTUP_DELAY_IN_SECONDS", "3"),
    ])
    .unwrap();
    assert_eq!(env.config_url(), "http://gh.local:8080/acme/app");
    assert_eq!(env.labels, ["linux", "gpu", "x"]);
    assert_eq!(env.group, None);
    assert!(!env.ephemeral);
    assert_eq!(env.startup_delay, Duration::from_secs(3));
    assert_eq!(env.credential, RunnerCredential::Token("T".into()));

    let org = env_of(&[
        ("RUNNER_NAME", "r"),
        ("RUNNER_TOKEN", "T"),
        ("RUNNER_ORG", "acme"),
        ("RUNNER_GROUP", "blue"),
    ])
    .unwrap();
    assert_eq!(org.config_url(), "https://github.com/acme");
    assert_eq!(org.group.as_deref(), Some("blue"));
    assert!(org.ephemeral, "unset RUNNER_EPHEMERAL means ephemeral");
    let ent = env_of(&[
        ("RUNNER_NAME", "r"),
        ("RUNNER_TOKEN", "T"),
        ("RUNNER_ENTERPRISE", "big"),
        ("RUNNER_EPHEMERAL", "True"),
    ])
    .unwrap();
    assert_eq!(ent.attach, "enterprises/big");
    assert!(
        !ent.ephemeral,
        "only the exact word true enables --ephemeral"
    );
    // The entrypoint's first branch: all three scopes set.
    let all = env_of(&[
        ("RUNNER_NAME", "r"),
        ("RUNNER_TOKEN", "T"),
        ("RUNNER_ORG", "o"),
        ("RUNNER_REPO", "o/r"),
        ("RUNNER_ENTERPRISE", "e"),
    ])
    .unwrap();
    assert_eq!(all.attach, "o/o/r");

    let jit = env_of(&[("ACTIONS_RUNNER_INPUT_JITCONFIG", "blob")]).unwrap();
    assert_eq!(jit.credential, RunnerCredential::Jit("blob".into()));
    assert!(jit.ephemeral);
    assert_eq!(format!("{:?}", jit.credential), "Jit(<redacted>)");

    for (pairs, complaint) in [
        (
            &[("RUNNER_TOKEN", "T"), ("RUNNER_ORG", "o")][..],
            "RUNNER_NAME",
        ),
        (
            &[("RUNNER_NAME", "r"), ("RUNNER_ORG", "o")][..],
            "RUNNER_TOKEN",
        ),
        (
            &[("RUNNER_NAME", "r"), ("RUNNER_TOKEN", "T")][..],
            "At least one",
        ),
        (
            &[
                ("RUNNER_NAME", "r"),
                ("RUNNER_TOKEN", "T"),
                ("RUNNER_ORG", "o"),
                ("RUNNER_GRACEFUL_STOP_TIMEOUT", "soon"),
            ][..],
            "RUNNER_GRACEFUL_STOP_TIMEOUT",
        ),
    ] {
        let error = env_of(pairs).unwrap_err();
        assert!(error.contains(complaint), "{error}");
    }
}

#[test]
fn runner_specs_set_the_failure_modes() {
    let base = RunnerProgram::new().with_remove_credential("x");
    let spec = |t: &str| t.parse::<ProgramSpec>().unwrap();
    let p = base
        .with_spec(&spec(
            "runner(registration=never, delay=2s, stop-timeout=15s, attempts=3, retry-delay=100ms)",
        ))
        .unwrap();
    assert_eq!(p.registration, Registration::Never);
    assert_eq!(p.registration_delay, Duration::from_secs(2));
    assert_eq!(p.graceful_stop_timeout, Duration::from_secs(15));
    assert_eq!(p.attempts, 3);
    assert_eq!(p.retry_delay, Duration::from_millis(100));
    assert!(
        p.remove_credential.is_some(),
        "the base's credential is kept"
    );
    assert_eq!(
        base.with_spec(&spec("runner(registration=bad-token)"))
            .unwrap()
            .registration,
        Registration::BadToken
    );
    for bad in [
        "runner(1s)",
        "runner(registration=maybe)",
        "runner(attempts=0)",
        "runner(colour=red)",
    ] {
        assert!(base.with_spec(&spec(bad)).is_err(), "{bad} accepted");
    }
}

#[tokio::test(start_paused = true)]
async fn an_ephemeral_runner_registers_runs_one_job_and_exits_zero() {
    let gh = github().await;
    let (run, _control) = start(RunnerProgram::new(), &repo_env(&gh, "eph-1", true));
    until("the runner online", || online(&gh, "eph-1")).await;
    let labels = gh
        .sim
        .read(|w, _| runner(w, "eph-1").unwrap().label_names());
    assert_eq!(labels, ["self-hosted", "Linux", "X64", "team-a", "gpu"]);
    assert!(gh.sim.read(|w, _| runner(w, "eph-1").unwrap().ephemeral));

    let started = Instant::now();
    let job = submit(&gh, 1, Duration::from_secs(5))[0];
    let exit = run.await.unwrap();
    assert_eq!(exit, Exit::success());
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "the job ran for its duration"
    );
    assert_eq!(
        job_state(&gh, job),
        (JobStatus::Completed, Some("success".into()), false)
    );
    assert!(
        !registered(&gh, "eph-1"),
        "GitHub removes an ephemeral runner after its job"
    );
}

#[tokio::test(start_paused = true)]
async fn a_persistent_runner_takes_the_next_job_and_unregisters_on_sigterm() {
    let gh = github().await;
    let program = RunnerProgram::new().with_remove_credential(REMOVER);
    let (run, control) = start(program, &repo_env(&gh, "static-1", false));
    until("the runner online", || online(&gh, "static-1")).await;
    let jobs = submit(&gh, 2, Duration::from_secs(3));
    until("both jobs completed", || {
        jobs.iter()
            .all(|j| job_state(&gh, *j).0 == JobStatus::Completed)
    })
    .await;
    assert!(!run.is_finished());
    assert!(online(&gh, "static-1"), "a persistent runner stays");

    control.terminate(Duration::from_secs(30));
    assert_eq!(run.await.unwrap(), Exit::success());
    assert!(
        !registered(&gh, "static-1"),
        "SIGTERM while idle unregisters"
    );
    let charged = gh.sim.read(|w, _| {
        w.calls
            .iter()
            .filter(|((_, credential), _)| credential == "pat:nodesim")
            .map(|(_, stats)| stats.calls)
            .sum::<u64>()
    });
    assert_eq!(
        charged, 1,
        "one remove token minted, charged to the runner's credential"
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_credential_sigterm_while_idle_leaves_the_runner_offline() {
    let gh = github().await;
    let (run, control) = start(RunnerProgram::new(), &repo_env(&gh, "idle-1", true));
    until("the runner online", || online(&gh, "idle-1")).await;
    control.terminate(Duration::from_secs(30));
    assert_eq!(run.await.unwrap(), Exit::success());
    let state = gh.sim.read(|w, _| runner(w, "idle-1").map(|r| r.online()));
    assert_eq!(
        state,
        Some(false),
        "ghsim refuses the registration token for removal"
    );
}

#[tokio::test(start_paused = true)]
async fn sigterm_while_busy_cancels_the_job_and_exits_143() {
    let gh = github().await;
    let program = RunnerProgram::new().with_remove_credential(REMOVER);
    let (run, control) = start(program, &repo_env(&gh, "busy-1", true));
    until("the runner online", || online(&gh, "busy-1")).await;
    let job = submit(&gh, 1, Duration::from_secs(600))[0];
    until("the job running", || {
        job_state(&gh, job).0 == JobStatus::InProgress
    })
    .await;

    control.terminate(Duration::from_secs(30));
    let exit = run.await.unwrap();
    assert_eq!(exit.code, EXIT_CANCELLED);
    let (status, conclusion, interrupted) = job_state(&gh, job);
    assert_eq!(status, JobStatus::Completed);
    assert_eq!(conclusion.as_deref(), Some("failure"));
    assert!(
        interrupted,
        "ghsim records the cancelled job as interrupted"
    );
    let accounting = ghsim::accounting::snapshot(&gh.sim);
    assert_eq!(accounting.jobs_summary.interrupted, 1);
}

#[tokio::test(start_paused = true)]
async fn a_job_that_ends_within_the_graceful_stop_window_completes() {
    let gh = github().await;
    let mut env = repo_env(&gh, "window-1", true);
    env.push(("RUNNER_GRACEFUL_STOP_TIMEOUT", "15".into()));
    let (run, control) = start(RunnerProgram::new(), &env);
    until("the runner online", || online(&gh, "window-1")).await;
    let job = submit(&gh, 1, Duration::from_secs(10))[0];
    until("the job running", || {
        job_state(&gh, job).0 == JobStatus::InProgress
    })
    .await;
    control.terminate(Duration::from_secs(30));
    assert_eq!(run.await.unwrap(), Exit::success());
    assert_eq!(
        job_state(&gh, job),
        (JobStatus::Completed, Some("success".into()), false)
    );
}

#[tokio::test(start_paused = true)]
async fn a_runner_deleted_on_github_while_idle_exits_zero() {
    let gh = github().await;
    let (run, _control) = start(RunnerProgram::new(), &repo_env(&gh, "gone-1", true));
    until("the runner online", || online(&gh, "gone-1")).await;
    gh.sim.update(|w, now| {
        let id = runner(w, "gone-1").unwrap().id;
        w.delete_runner(&Scope::repo("acme", "app"), id, now)
            .unwrap();
    });
    let exit = run.await.unwrap();
    assert_eq!(exit.code, 0);
    assert_eq!(
        exit.message.as_deref(),
        Some("Runner registration has been deleted from the server")
    );
}

#[tokio::test(start_paused = true)]
async fn a_bad_token_fails_ten_attempts_a_second_apart_then_exits_two() {
    let gh = github().await;
    let program = RunnerProgram::new().with_registration(Registration::BadToken);
    let started = Instant::now();
    let (run, _control) = start(program, &repo_env(&gh, "bad-1", true));
    let exit = run.await.unwrap();
    assert_eq!(exit.code, EXIT_CONFIG_FAILED);
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    assert!(!registered(&gh, "bad-1"));
}

#[tokio::test(start_paused = true)]
async fn a_never_registering_runner_keeps_running_and_slow_ones_take_their_delay() {
    let gh = github().await;
    let never = RunnerProgram::new().with_registration(Registration::Never);
    let (run, _control) = start(never, &repo_env(&gh, "never-1", true));
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!run.is_finished());
    assert!(!registered(&gh, "never-1"));

    let slow = RunnerProgram::new().with_registration_delay(Duration::from_secs(30));
    let started = Instant::now();
    let (_run, _control) = start(slow, &repo_env(&gh, "slow-1", true));
    until("the slow runner registered", || registered(&gh, "slow-1")).await;
    assert!(started.elapsed() >= Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn an_image_pull_fault_fails_new_matching_containers_until_removed() {
    let gh = github().await;
    let program = RunnerProgram::new();
    let mut ctx = context(&repo_env(&gh, "pull-1", true));
    ctx.container.image = Some("summerwind/actions-runner:latest".into());
    let other_owner = program.faults().add(
        RunnerFault::ImagePull,
        PodMatch::NamePrefix("other-".into()),
    );
    assert_eq!(program.prepare(&ctx).await, Ok(()), "another owner's pods");
    let id = program.faults().add(
        RunnerFault::ImagePull,
        PodMatch::NamePrefix("runner-".into()),
    );
    let failure = program.prepare(&ctx).await.unwrap_err();
    assert_eq!(failure.reason, "ErrImagePull");
    assert_eq!(failure.backoff_reason.as_deref(), Some("ImagePullBackOff"));
    assert!(
        failure
            .message
            .contains("failed to pull and unpack image \"summerwind/actions-runner:latest\""),
        "{}",
        failure.message
    );
    // A restarted container has its image: it does not pull again.
    let restarted = ContainerContext {
        restart_count: 1,
        ..ctx.clone()
    };
    assert_eq!(program.prepare(&restarted).await, Ok(()));
    // By node too, and clones of the program share the switches.
    let on_node = ContainerContext {
        node_name: "sim-3".into(),
        ..ctx.clone()
    };
    program.faults().remove(id);
    assert_eq!(program.prepare(&on_node).await, Ok(()), "the fault ended");
    program
        .clone()
        .faults()
        .add(RunnerFault::ImagePull, PodMatch::Node("sim-3".into()));
    assert!(program.prepare(&on_node).await.is_err());
    assert_eq!(program.prepare(&ctx).await, Ok(()), "not on that node");
    program.faults().remove(other_owner);
}

#[tokio::test(start_paused = true)]
async fn a_never_registers_fault_sticks_to_runners_started_meanwhile() {
    let gh = github().await;
    let program = RunnerProgram::new();
    let id = program.faults().add(
        RunnerFault::NeverRegisters,
        PodMatch::NamePrefix("runner-".into()),
    );
    let (stuck, _control) = start(program.clone(), &repo_env(&gh, "stuck-1", true));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!stuck.is_finished(), "the container runs");
    assert!(!registered(&gh, "stuck-1"));

    program.faults().remove(id);
    let (_fine, _control) = start(program.clone(), &repo_env(&gh, "fine-1", true));
    until("a runner started after the fault registered", || {
        registered(&gh, "fine-1")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!registered(&gh, "stuck-1"), "a stuck runner stays stuck");
}

#[tokio::test]
async fn a_cut_off_runner_goes_offline_keeps_running_and_comes_back_when_healed() {
    // Real time: GitHub's offline timeout runs on the simulator's clock.
    let gh = github().await;
    gh.sim
        .update(|w, _| w.config.offline_after = Duration::from_millis(300));
    let program = RunnerProgram::new().with_retry_delay(Duration::from_millis(50));
    let (run, _control) = start(program.clone(), &repo_env(&gh, "cut-1", false));
    // GitHub's view now (applying its timeouts first).
    let online = || {
        gh.sim.update(|w, now| {
            w.tick(now);
            runner(w, "cut-1").is_some_and(|r| r.online())
        })
    };
    until("the runner online", &online).await;
    // It stays online while it waits in its long poll.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(online());

    let id = program
        .faults()
        .add(RunnerFault::CutOff, PodMatch::NamePrefix("runner-".into()));
    until("the runner offline", || !online()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!run.is_finished(), "the container runs on");
    assert!(registered(&gh, "cut-1"));
    assert!(!online());

    program.faults().remove(id);
    until("the runner online again", &online).await;
    let job = submit(&gh, 1, Duration::from_millis(100))[0];
    until("its job done", || {
        job_state(&gh, job).0 == JobStatus::Completed
    })
    .await;
}

#[tokio::test]
async fn a_runner_slow_to_exit_lingers_after_its_job_until_the_fault_is_removed() {
    let gh = github().await;
    let program = RunnerProgram::new();
    let id = program.faults().add(
        RunnerFault::SlowExit,
        PodMatch::NamePrefix("runner-".into()),
    );
    let (run, _control) = start(program.clone(), &repo_env(&gh, "slow-1", true));
    until("the runner online", || online(&gh, "slow-1")).await;
    let job = submit(&gh, 1, Duration::from_millis(100))[0];
    until("its job done", || {
        job_state(&gh, job).0 == JobStatus::Completed
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!run.is_finished(), "done with its job, not exited yet");
    program.faults().remove(id);
    assert_eq!(run.await.unwrap(), Exit::success());
}

#[tokio::test(start_paused = true)]
async fn a_jit_runner_needs_no_registration_call_and_takes_one_job() {
    let gh = github().await;
    let encoded = gh.sim.update(|w, now| {
        let request = JitRequest {
            name: Some("jit-1".into()),
            runner_group_id: Some(1),
            labels: Some(vec!["self-hosted".into(), "gpu".into()]),
            work_folder: None,
        };
        w.generate_jit(&Scope::repo("acme", "app"), request, now)
            .unwrap()
            .1
    });
    let env = [
        ("ACTIONS_RUNNER_INPUT_JITCONFIG", encoded),
        ("RUNNER_NAME", "jit-1".into()),
    ];
    let (run, _control) = start(RunnerProgram::new(), &env);
    until("the JIT runner online", || online(&gh, "jit-1")).await;
    let job = submit(&gh, 1, Duration::from_secs(1))[0];
    assert_eq!(run.await.unwrap(), Exit::success());
    assert_eq!(job_state(&gh, job).0, JobStatus::Completed);
    assert!(!registered(&gh, "jit-1"));
}

#[tokio::test(start_paused = true)]
async fn an_incomplete_environment_exits_one() {
    let (run, _control) = start(RunnerProgram::new(), &[("RUNNER_ORG", "acme".into())]);
    let exit = run.await.unwrap();
    assert_eq!(exit.code, EXIT_BAD_ENV);
    assert_eq!(exit.message.as_deref(), Some("RUNNER_NAME must be set"));
    let (run, _control) = start(
        RunnerProgram::new(),
        &[("ACTIONS_RUNNER_INPUT_JITCONFIG", "not base64!".into())],
    );
    assert_eq!(run.await.unwrap().code, EXIT_BAD_ENV);
}
