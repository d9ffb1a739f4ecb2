//! Shared set-up: a ghsim on loopback with a manual clock, and clients pointed at it.

#![allow(dead_code)]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ghsim::{Running, Sim, SimConfig};
use hangar_github::{ClientOptions, Credentials, Endpoint, GitHubClient, ManualClock, RetryPolicy};

pub const PAT: &str = "ghp_test_token";

/// A running ghsim with `acme` (in enterprise `big`), repositories `acme/app` and `acme/lib`,
/// user repository `solo/tool`, and [`PAT`].
pub struct Gh {
    pub running: Running,
    pub clock: ManualClock,
}

impl Gh {
    pub async fn start() -> Self {
        let clock = ManualClock::at_epoch_2026();
        let sim = Sim::new(SimConfig {
            clock: Arc::new(clock.clone()),
            ..SimConfig::default()
        });
        sim.update(|w, _| {
            w.add_pat(PAT, "test");
            w.add_org("acme", Some("big"));
            w.add_repo("acme", "app", true);
            w.add_repo("acme", "lib", true);
            w.add_repo("solo", "tool", true);
        });
        let running = ghsim::spawn(sim).await.expect("ghsim starts");
        Self { running, clock }
    }

    pub fn sim(&self) -> &Sim {
        &self.running.sim
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::custom(self.running.url.as_str(), self.running.url.as_str()).unwrap()
    }

    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            clock: Arc::new(self.clock.clone()),
            request_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            ..ClientOptions::default()
        }
    }

    pub fn client_with(&self, credentials: Credentials, options: ClientOptions) -> GitHubClient {
        GitHubClient::new(self.endpoint(), credentials, options).unwrap()
    }

    pub fn client(&self) -> GitHubClient {
        self.client_with(Credentials::token(PAT), self.options())
    }

    /// The manual clock's time in epoch seconds.
    pub fn clock_now_s(&self) -> i64 {
        use hangar_github::Clock;
        self.clock.now().as_second()
    }

    /// Calls ghsim counted for an endpoint template (all credentials).
    pub fn calls(&self, endpoint: &str) -> (u64, u64, u64) {
        self.sim().read(|w, _| {
            w.calls
                .iter()
                .filter(|((e, _), _)| e == endpoint)
                .fold((0, 0, 0), |acc, (_, s)| {
                    (acc.0 + s.calls, acc.1 + s.charged, acc.2 + s.not_modified)
                })
        })
    }
}

/// One RSA key pair per test binary (generation takes a moment): (private PKCS#1 PEM, public PEM).
pub fn app_key() -> &'static (String, String) {
    static KEY: OnceLock<(String, String)> = OnceLock::new();
    KEY.get_or_init(|| {
        use rsa::pkcs1::{EncodeRsaPrivateKey, LineEnding};
        use rsa::pkcs8::EncodePublicKey;
        let mut rng = rsa::rand_core::OsRng;
        let private = rsa::RsaPrivateKey::new(&mut rng, 2048).expect("key generation");
        let private_pem = private
            .to_pkcs1_pem(LineEnding::LF)
            .expect("pem")
            .to_string();
        let public_pem = private
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .expect("pem");
        (private_pem, public_pem)
    })
}

/// Registers `n` JIT runners `prefix-0..n` at `scope` directly in the world.
pub fn add_runners(gh: &Gh, scope: &hangar_github::Scope, prefix: &str, n: usize) -> Vec<u64> {
    gh.sim().update(|w, now| {
        (0..n)
            .map(|i| {
                let request = ghsim::world::JitRequest {
                    name: Some(format!("{prefix}-{i}")),
                    runner_group_id: Some(1),
                    labels: Some(vec!["self-hosted".into(), "linux".into()]),
                    work_folder: None,
                };
                w.generate_jit(scope, request, now).expect("jit").0
            })
            .collect()
    })
}

/// Queues one `self-hosted` job (in a run of its own) in `repository` ("owner/name").
pub fn queue_job(w: &mut ghsim::world::World, now: jiff::Timestamp, repository: &str) {
    let submit = ghsim::world::SubmitJobs {
        repository: repository.into(),
        count: 1,
        labels: vec!["self-hosted".into()],
        duration_ms: 0,
        conclusion: None,
        workflow: None,
        job_name: None,
    };
    w.submit_jobs(&submit, now).expect("submit");
}

/// Connects runner `id` and gives it a job; returns the job id.
pub fn make_busy(gh: &Gh, id: u64, repository: &str) -> u64 {
    gh.sim().update(|w, now| {
        let credential = w.runners[&id].credential.clone();
        let (_, session) = w
            .open_session(&credential, None, None, now)
            .expect("session");
        queue_job(w, now, repository);
        let job = w
            .poll(&session, now)
            .expect("poll")
            .expect("a job was routed");
        job.id
    })
}
