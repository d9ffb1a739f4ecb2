//! The world's transitions, driven directly with explicit times.

use std::time::Duration;

use hangar_github::Scope;
use hangar_github::clock::add;
use jiff::Timestamp;

use super::*;

fn t0() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap()
}

fn at(secs: u64) -> Timestamp {
    add(t0(), Duration::from_secs(secs))
}

fn world() -> World {
    let mut w = World::new(WorldConfig::default());
    w.add_org("acme", Some("big"));
    w.add_org("other", None);
    w.add_repo("acme", "app", true);
    w.add_repo("acme", "lib", true);
    w.add_repo("other", "svc", true);
    w
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Registers a runner with a registration token, as `config.sh` does.
fn register(
    w: &mut World,
    scope: &Scope,
    name: &str,
    labels: &[&str],
    ephemeral: bool,
) -> (u64, String) {
    let (token, _) = w.create_runner_token(scope, TokenKind::Registration, t0());
    w.register_runner(
        RegisterRunner {
            url: format!("http://127.0.0.1/{}", scope.config_path()),
            token,
            name: name.into(),
            labels: strings(labels),
            no_default_labels: false,
            runner_group: None,
            ephemeral,
            replace: false,
        },
        t0(),
    )
    .unwrap()
}

fn online(w: &mut World, credential: &str, now: Timestamp) -> String {
    w.open_session(credential, None, None, now).unwrap().1
}

fn submit(w: &mut World, repo: &str, labels: &[&str], count: u32) -> Vec<u64> {
    let request = SubmitJobs {
        repository: repo.into(),
        count,
        labels: strings(labels),
        duration_ms: 1000,
        conclusion: None,
        workflow: None,
        job_name: None,
    };
    w.submit_jobs(&request, t0()).unwrap().1
}

fn events(w: &mut World) -> Vec<String> {
    w.drain_events()
        .into_iter()
        .map(|e| format!("{}:{}", e.event, e.action().unwrap_or("")))
        .collect()
}

#[test]
fn job_goes_to_an_online_idle_runner_with_all_its_labels() {
    let mut w = world();
    let (_, gpu) = register(&mut w, &Scope::org("acme"), "gpu", &["gpu"], false);
    let session = online(&mut w, &gpu, t0());
    let jobs = submit(&mut w, "acme/app", &["self-hosted", "LINUX", "gpu"], 1);
    let arm = submit(&mut w, "acme/app", &["self-hosted", "arm64"], 1);
    let job = w.poll(&session, t0()).unwrap().unwrap();
    assert_eq!(job.id, jobs[0]);
    assert_eq!(w.jobs[&jobs[0]].status, JobStatus::InProgress);
    assert!(w.runners.values().next().unwrap().busy());
    assert_eq!(
        w.jobs[&arm[0]].status,
        JobStatus::Queued,
        "no runner has arm64"
    );
    assert_eq!(
        events(&mut w),
        vec![
            "workflow_job:queued",
            "workflow_job:queued",
            "workflow_job:in_progress"
        ]
    );
}

#[test]
fn offline_runners_are_never_assigned() {
    let mut w = world();
    register(&mut w, &Scope::org("acme"), "idle-but-offline", &[], false);
    let jobs = submit(&mut w, "acme/app", &["self-hosted"], 1);
    assert_eq!(w.jobs[&jobs[0]].runner_id, None);
}

#[test]
fn repository_runners_come_before_organization_runners() {
    let mut w = world();
    let (_, org_cred) = register(&mut w, &Scope::org("acme"), "org", &[], false);
    let (repo_id, repo_cred) = register(&mut w, &Scope::repo("acme", "app"), "repo", &[], false);
    online(&mut w, &org_cred, t0());
    online(&mut w, &repo_cred, t0());
    let jobs = submit(&mut w, "acme/app", &["self-hosted"], 1);
    assert_eq!(w.jobs[&jobs[0]].runner_id, Some(repo_id));
}

#[test]
fn runners_serve_only_their_scope_and_visible_groups() {
    let mut w = world();
    let group = w
        .add_group(
            GroupOwner::Org("acme".into()),
            "app-only",
            Visibility::Selected,
            &strings(&["acme/app"]),
        )
        .unwrap();
    let (token, _) = w.create_runner_token(&Scope::org("acme"), TokenKind::Registration, t0());
    let (_, cred) = w
        .register_runner(
            RegisterRunner {
                url: "http://x/acme".into(),
                token,
                name: "grouped".into(),
                labels: vec![],
                no_default_labels: false,
                runner_group: Some("app-only".into()),
                ephemeral: false,
                replace: false,
            },
            t0(),
        )
        .unwrap();
    assert_eq!(w.runners.values().next().unwrap().group_id, Some(group));
    online(&mut w, &cred, t0());
    let lib = submit(&mut w, "acme/lib", &["self-hosted"], 1);
    let other = submit(&mut w, "other/svc", &["self-hosted"], 1);
    assert_eq!(
        w.jobs[&lib[0]].runner_id, None,
        "group not visible to acme/lib"
    );
    assert_eq!(w.jobs[&other[0]].runner_id, None, "another organization");
    let app = submit(&mut w, "acme/app", &["self-hosted"], 1);
    assert!(w.jobs[&app[0]].runner_id.is_some());
}

#[test]
fn enterprise_runners_serve_organizations_of_their_enterprise() {
    let mut w = world();
    let (id, cred) = register(&mut w, &Scope::enterprise("big"), "ent", &[], false);
    online(&mut w, &cred, t0());
    let other = submit(&mut w, "other/svc", &["self-hosted"], 1);
    assert_eq!(w.jobs[&other[0]].runner_id, None);
    let acme = submit(&mut w, "acme/lib", &["self-hosted"], 1);
    assert_eq!(w.jobs[&acme[0]].runner_id, Some(id));
}

#[test]
fn ephemeral_runner_takes_one_job_and_is_removed() {
    let mut w = world();
    let (id, cred) = register(&mut w, &Scope::org("acme"), "eph", &[], true);
    let session = online(&mut w, &cred, t0());
    let jobs = submit(&mut w, "acme/app", &["self-hosted"], 2);
    let job = w.poll(&session, at(1)).unwrap().unwrap();
    assert!(w.complete_job(&cred, job.id, "success", at(5)).unwrap());
    assert!(!w.runners.contains_key(&id));
    assert_eq!(w.jobs[&jobs[0]].conclusion.as_deref(), Some("success"));
    assert_eq!(
        w.jobs[&jobs[1]].status,
        JobStatus::Queued,
        "the second job waits for another runner"
    );
    assert_eq!(w.jobs[&jobs[1]].runner_id, None);
    assert!(matches!(w.poll(&session, at(6)), Err(SimError::NotFound)));
}

#[test]
fn busy_runner_cannot_be_deleted_or_unregistered() {
    let mut w = world();
    let scope = Scope::org("acme");
    let (id, cred) = register(&mut w, &scope, "busy", &[], false);
    let session = online(&mut w, &cred, t0());
    submit(&mut w, "acme/app", &["self-hosted"], 1);
    let job = w.poll(&session, t0()).unwrap().unwrap();
    let err = w.delete_runner(&scope, id, t0()).unwrap_err();
    assert_eq!(
        err,
        SimError::Unprocessable("Bad request - Runner \"busy\" is still running a job".into())
    );
    let (remove, _) = w.create_runner_token(&scope, TokenKind::Remove, t0());
    assert!(matches!(
        w.unregister(&cred, &remove, t0()),
        Err(SimError::Unprocessable(_))
    ));
    w.complete_job(&cred, job.id, "success", at(2)).unwrap();
    assert!(matches!(
        w.delete_runner(&Scope::org("other"), id, t0()),
        Err(SimError::NotFound)
    ));
    w.unregister(&cred, &remove, at(3)).unwrap();
    assert!(w.runners.is_empty());
}

#[test]
fn a_runner_that_stops_polling_goes_offline_and_its_job_is_interrupted() {
    let mut w = world();
    let (_, cred) = register(&mut w, &Scope::org("acme"), "vanishing", &[], false);
    let session = online(&mut w, &cred, t0());
    let jobs = submit(&mut w, "acme/app", &["self-hosted"], 1);
    w.poll(&session, at(10)).unwrap().unwrap();
    w.tick(at(99));
    assert_eq!(
        w.jobs[&jobs[0]].status,
        JobStatus::InProgress,
        "still within offline_after"
    );
    w.tick(at(101));
    let job = &w.jobs[&jobs[0]];
    assert_eq!(
        (job.status, job.conclusion.as_deref(), job.interrupted),
        (JobStatus::Completed, Some("failure"), true)
    );
    assert_eq!(w.offline_left_behind().len(), 1);
    // Offline for 14 days: GitHub removes it.
    w.tick(at(101 + 14 * 24 * 3600));
    assert!(w.runners.is_empty());
}

#[test]
fn an_assignment_not_picked_up_within_a_minute_is_requeued_elsewhere() {
    let mut w = world();
    let (deaf, deaf_cred) = register(&mut w, &Scope::org("acme"), "a-deaf", &[], false);
    online(&mut w, &deaf_cred, t0());
    let jobs = submit(&mut w, "acme/app", &["self-hosted"], 1);
    assert_eq!(w.jobs[&jobs[0]].runner_id, Some(deaf));
    let (good, good_cred) = register(&mut w, &Scope::org("acme"), "b-good", &[], false);
    let session = online(&mut w, &good_cred, at(30));
    w.poll(&session, at(59)).unwrap();
    w.tick(at(61));
    assert_eq!(w.jobs[&jobs[0]].runner_id, Some(good));
    assert_eq!(w.jobs[&jobs[0]].requeues, 1);
    assert!(!w.runners[&deaf].online());
    assert_eq!(w.poll(&session, at(62)).unwrap().unwrap().id, jobs[0]);
}

#[test]
fn a_job_without_runners_fails_after_the_queue_timeout() {
    let mut w = world();
    let jobs = submit(&mut w, "acme/app", &["self-hosted"], 1);
    w.tick(at(24 * 3600));
    assert_eq!(w.jobs[&jobs[0]].status, JobStatus::Queued);
    w.tick(at(24 * 3600 + 1));
    assert_eq!(w.jobs[&jobs[0]].conclusion.as_deref(), Some("failure"));
}

#[test]
fn legacy_github_fails_a_job_no_runner_could_take_but_queues_it_for_an_offline_one() {
    let mut w = world();
    w.config.fail_jobs_without_runners = true;
    let lost = submit(&mut w, "acme/app", &["self-hosted", "gpu"], 1);
    w.tick(t0());
    assert_eq!(w.jobs[&lost[0]].conclusion.as_deref(), Some("failure"));

    // A registered runner that never connected (offline) is enough for the job to wait.
    register(&mut w, &Scope::org("acme"), "placeholder", &["gpu"], false);
    let kept = submit(&mut w, "acme/app", &["self-hosted", "gpu"], 1);
    w.tick(at(1));
    assert_eq!(w.jobs[&kept[0]].status, JobStatus::Queued);

    // Today's GitHub keeps it queued without any runner.
    w.config.fail_jobs_without_runners = false;
    let waiting = submit(&mut w, "acme/app", &["self-hosted", "arm"], 1);
    w.tick(at(2));
    assert_eq!(w.jobs[&waiting[0]].status, JobStatus::Queued);
}

#[test]
fn tokens_are_scoped_and_expire() {
    let mut w = world();
    let (token, _) = w.create_runner_token(&Scope::org("acme"), TokenKind::Registration, t0());
    let request = |token: &str, url: &str| RegisterRunner {
        url: url.into(),
        token: token.into(),
        name: "r".into(),
        labels: vec![],
        no_default_labels: false,
        runner_group: None,
        ephemeral: false,
        replace: false,
    };
    assert!(matches!(
        w.register_runner(request(&token, "http://x/other"), t0()),
        Err(SimError::Unauthorized(_))
    ));
    assert!(matches!(
        w.register_runner(request(&token, "http://x/acme"), at(3601)),
        Err(SimError::Unauthorized(_))
    ));
    w.register_runner(request(&token, "http://x/acme"), at(3599))
        .unwrap();
    assert!(matches!(
        w.register_runner(request(&token, "http://x/acme"), at(3599)),
        Err(SimError::Conflict(_))
    ));
    let mut replace = request(&token, "http://x/acme");
    replace.replace = true;
    w.register_runner(replace, at(3599)).unwrap();
    assert_eq!(w.runners.len(), 1);
}

#[test]
fn one_session_per_runner() {
    let mut w = world();
    let (_, cred) = register(&mut w, &Scope::org("acme"), "r", &[], false);
    let session = online(&mut w, &cred, t0());
    assert!(matches!(
        w.open_session(&cred, None, None, t0()),
        Err(SimError::Conflict(_))
    ));
    w.close_session(&session, t0()).unwrap();
    online(&mut w, &cred, t0());
}

#[test]
fn runners_that_never_connect_count_as_leaked() {
    let mut w = world();
    let request = JitRequest {
        name: Some("jit".into()),
        runner_group_id: Some(1),
        labels: Some(strings(&["self-hosted"])),
        work_folder: None,
    };
    w.generate_jit(&Scope::org("acme"), request, t0()).unwrap();
    assert!(w.leaked_runners(at(300)).is_empty());
    assert_eq!(w.leaked_runners(at(301)).len(), 1);
    // Removed after a day offline (ephemeral), counted as never connected.
    w.tick(at(24 * 3600 + 1));
    assert_eq!(w.removed_never_connected, 1);
}

#[test]
fn jit_config_blob_has_the_runner_layout() {
    use base64::Engine;
    let mut w = world();
    let request = JitRequest {
        name: Some("jit".into()),
        runner_group_id: Some(1),
        labels: Some(strings(&["self-hosted", "X64", "gpu"])),
        work_folder: None,
    };
    let (id, blob) = w.generate_jit(&Scope::org("acme"), request, t0()).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let files: serde_json::Value = serde_json::from_slice(&b64.decode(blob).unwrap()).unwrap();
    let runner: serde_json::Value =
        serde_json::from_slice(&b64.decode(files[".runner"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(runner["AgentId"], id);
    assert_eq!(runner["Ephemeral"], true);
    let labels = &w.runners[&id].labels;
    assert!(labels[0].read_only && labels[1].read_only && !labels[2].read_only);
}

#[test]
fn app_jwts_are_checked_against_key_and_clock() {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use rsa::pkcs1::{EncodeRsaPrivateKey, LineEnding};
    use rsa::pkcs8::EncodePublicKey;
    let mut rng = rsa::rand_core::OsRng;
    let key = rsa::RsaPrivateKey::new(&mut rng, 2048).unwrap();
    let public = key
        .to_public_key()
        .to_public_key_pem(LineEnding::LF)
        .unwrap();
    let encoding =
        EncodingKey::from_rsa_pem(key.to_pkcs1_pem(LineEnding::LF).unwrap().as_bytes()).unwrap();
    let mut w = world();
    let app = w.add_app(Some(7), "app", &public).unwrap().clone();
    let jwt = |iss: serde_json::Value, iat: i64, exp: i64| {
        let claims = serde_json::json!({"iss": iss, "iat": iat, "exp": exp});
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &encoding).unwrap()
    };
    let now = t0().as_second();
    assert_eq!(
        w.identify_jwt(&jwt(serde_json::json!(7), now - 60, now + 540), t0()),
        Ok(7)
    );
    assert_eq!(
        w.identify_jwt(
            &jwt(serde_json::json!(app.client_id), now - 60, now + 540),
            t0()
        ),
        Ok(7)
    );
    assert!(
        w.identify_jwt(&jwt(serde_json::json!("7"), now - 700, now - 1), t0())
            .is_err(),
        "expired"
    );
    assert!(
        w.identify_jwt(&jwt(serde_json::json!("7"), now, now + 3600), t0())
            .is_err(),
        "too long"
    );
    assert!(
        w.identify_jwt(&jwt(serde_json::json!("8"), now, now + 60), t0())
            .is_err(),
        "unknown app"
    );
    let other = rsa::RsaPrivateKey::new(&mut rng, 2048).unwrap();
    let forged = jsonwebtoken::encode(
        &Header::new(Algorithm::RS256),
        &serde_json::json!({"iss": "7", "iat": now, "exp": now + 60}),
        &EncodingKey::from_rsa_pem(other.to_pkcs1_pem(LineEnding::LF).unwrap().as_bytes()).unwrap(),
    )
    .unwrap();
    assert!(w.identify_jwt(&forged, t0()).is_err(), "wrong key");
}

#[test]
fn a_runner_below_the_minimum_version_is_refused_messages_and_gets_no_job() {
    let mut w = world();
    let repo = Scope::Repository {
        owner: "acme".into(),
        repo: "app".into(),
    };
    let (_, old) = register(&mut w, &repo, "old", &["self-hosted", "linux"], true);
    let session = w
        .open_session(&old, None, Some("2.311.0".into()), t0())
        .unwrap()
        .1;
    let jobs = submit(&mut w, "acme/app", &["self-hosted", "linux"], 1);
    assert_eq!(
        w.poll(&session, at(1)),
        Err(SimError::Forbidden(
            "Runner version v2.311.0 is deprecated and cannot receive messages.".into()
        ))
    );
    assert_eq!(
        w.jobs[&jobs[0]].status,
        JobStatus::Queued,
        "never assigned to it"
    );

    // A runner at the minimum takes it; versions compare as numbers, not text.
    let (_, current) = register(&mut w, &repo, "current", &["self-hosted", "linux"], true);
    let session = w
        .open_session(&current, None, Some("2.329.0".into()), at(2))
        .unwrap()
        .1;
    let job = w.poll(&session, at(3)).unwrap().expect("the job");
    assert_eq!(job.id, jobs[0]);
    assert!(below_minimum("2.99.0", "2.329.0"));
    assert!(!below_minimum("2.1000.0", "2.329.0"));
    assert!(!below_minimum("v2.329.1", "2.329.0"));
    assert!(
        !below_minimum("dev", "2.329.0"),
        "an unreadable version is not judged"
    );

    // Without a minimum, nothing is refused.
    let mut any = World::new(WorldConfig {
        minimum_runner_version: None,
        ..WorldConfig::default()
    });
    any.add_org("acme", None);
    any.add_repo("acme", "app", true);
    let (_, old) = register(&mut any, &repo, "old", &["self-hosted"], true);
    let session = any
        .open_session(&old, None, Some("2.311.0".into()), t0())
        .unwrap()
        .1;
    assert_eq!(any.poll(&session, at(1)), Ok(None));
}
