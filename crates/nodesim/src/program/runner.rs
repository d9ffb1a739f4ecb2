//! The actions/runner simulation: what runs in a runner pod's `runner` container.
//!
//! [`RunnerProgram`] plays ARC's summerwind runner image (its `entrypoint.sh`, `graceful-stop.sh`
//! and actions/runner's `run.sh`) against ghsim, speaking ghsim's runner protocol through
//! [`ghsim::runner::RunnerClient`]:
//!
//! 1. **Environment**, read as the images read it ([`RunnerEnv`]): `RUNNER_NAME`,
//!    `RUNNER_TOKEN`, `RUNNER_ORG`/`RUNNER_REPO`/`RUNNER_ENTERPRISE` (the entrypoint's
//!    precedence), `RUNNER_LABELS` (comma-separated), `RUNNER_GROUP` (ignored for repository
//!    runners), `RUNNER_EPHEMERAL`, `RUNNER_WORKDIR`, `GITHUB_URL` (default
//!    `https://github.com/`, a `/` appended), `STARTUP_DELAY_IN_SECONDS`,
//!    `RUNNER_GRACEFUL_STOP_TIMEOUT`; or, as the official image does, a JIT configuration in
//!    `ACTIONS_RUNNER_INPUT_JITCONFIG`, which replaces registration. Values may come from
//!    Secrets and ConfigMaps: the kubelet side resolves them before the program starts.
//! 2. **Registration** (`config.sh --unattended --replace --url $GITHUB_URL$ATTACH ...`),
//!    attempted up to 10 times with a 1 s pause, like the entrypoint's loop.
//! 3. **Listening**: a session (online), 50 s long polls, a job run for its `duration_ms` with
//!    liveness renewed every 30 s, completion reported with the job's planned conclusion. An
//!    ephemeral runner exits after one job; a persistent one polls again.
//! 4. **SIGTERM** ([`ContainerIo::terminated`]), like `graceful-stop.sh`: an idle runner removes
//!    its registration (`config.sh remove --token $RUNNER_TOKEN`) and exits 0; a busy runner
//!    gets `RUNNER_GRACEFUL_STOP_TIMEOUT` to finish its job, then the listener is stopped, which
//!    cancels the job — ghsim records it as interrupted — and the container exits 143.
//!
//! # Exit codes
//!
//! | code | when |
//! |---|---|
//! | 0 | an ephemeral runner finished its job; SIGTERM while idle; the registration was deleted on GitHub (the listener exits 1, "Runner registration has been deleted from the server", which actions/runner's `run-helper.sh` turns into 0); another listener holds the session (listener exit 5, also turned into 0) |
//! | 1 | the environment is incomplete (`RUNNER_NAME`, a scope or `RUNNER_TOKEN` missing), or the JIT configuration is malformed |
//! | 2 | registration failed 10 times ("Configuration failed!") |
//! | 143 | SIGTERM while running a job: the job was cancelled |
//! | 137 | killed by the kubelet at the end of the grace period (not produced here) |
//!
//! # Registration failure modes
//!
//! For the registration-timeout paths, a pod can ask for a failing runner through the program
//! annotation (with [`Programs::with_runner`](super::Programs::with_runner) the `runner`
//! factory is registered):
//!
//! - `program.nodesim.hangar.dev/runner: runner(registration=bad-token)` — every attempt is
//!   refused (401), the container exits 2 after the retries;
//! - `runner(registration=never)` — `config.sh` hangs: the container runs, never registers;
//! - `runner(delay=30s)` — each registration attempt takes 30 s (slow registration);
//! - `runner(stop-timeout=15s)` — the graceful-stop window of the summerwind image;
//! - `runner(attempts=3, retry-delay=100ms)` — the entrypoint's retry loop;
//! - `runner(version=2.311.0)` — a stale runner image: it registers and logs "Listening for
//!   Jobs", and GitHub (ghsim below its minimum version) refuses every poll with 403, which the
//!   runner retries, as actions/runner's listener does, so its pod stays Running and Ready.
//!
//! # Differences from the real runner
//!
//! - **Graceful-stop window**: the summerwind image waits `RUNNER_GRACEFUL_STOP_TIMEOUT` (15 s
//!   by default) for a busy runner before cancelling its job; the simulator's default is 0, so
//!   any SIGTERM that reaches a busy runner shows up in ghsim as an interrupted job — a
//!   scale-down bug cannot hide behind a short job. Set the variable (or `stop-timeout`) to
//!   model the image. The image's `config.sh remove` attempt on a busy runner (refused with
//!   422) is not sent: it changes nothing on GitHub.
//! - **Exit status after SIGTERM**: ARC's dind entrypoint exits 0 whatever happened; the
//!   simulator exits 143 when it cancelled a job, so pod statuses tell the cases apart.
//! - **Removal token**: GitHub accepts the registration token for `config.sh remove`; ghsim's
//!   runner protocol only takes remove tokens. When ghsim refuses the registration token and
//!   the program has a GitHub credential ([`RunnerProgram::with_remove_credential`]), it mints
//!   a remove token through the REST API (one extra call, charged to that credential) and
//!   retries; without one the runner only goes offline.
//! - **SIGTERM before registration**: `graceful-stop.sh` waits for `.runner` before removing the
//!   runner, and so does the simulator; if registration then fails for good, the simulator
//!   exits with the entrypoint's 2 instead of waiting for SIGKILL.
//! - JIT runners (official image) do not unregister on SIGTERM: the listener closes its
//!   session and exits 0, as actions/runner does. `RUNNER_WORKDIR`, `DOCKER_*`, the
//!   `--disableupdate` and `--once` flags and the status-update hook have no effect.

use std::future::pending;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ghsim::runner::{RunnerClient, RunnerError};
use ghsim::world::{AssignedJob, RegisterRunner};
use hangar_github::{ClientOptions, Credentials, Endpoint, GitHubApi, GitHubClient, Scope, Secret};
use tokio::time::{Instant, sleep, sleep_until};
use url::Url;

use super::spec::{ProgramSpec, SpecError};
use super::{ContainerContext, ContainerIo, ContainerProgram, Exit, StartFailure};

/// The runner container's name in ARC's pod shape.
pub const RUNNER_CONTAINER: &str = "runner";

/// The exit code of a runner whose job was cancelled by SIGTERM (128 + 15).
pub const EXIT_CANCELLED: i32 = 143;
/// The entrypoint's exit code when the environment is incomplete.
pub const EXIT_BAD_ENV: i32 = 1;
/// The entrypoint's exit code when registration failed after every retry.
pub const EXIT_CONFIG_FAILED: i32 = 2;

/// How registration behaves: normally, or one of the failure modes tests ask for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Registration {
    /// Register with the token from the environment.
    #[default]
    Normal,
    /// Present a token GitHub does not know: every attempt gets 401.
    BadToken,
    /// `config.sh` never returns: the container runs but never registers.
    Never,
}

/// The simulated actions/runner (see the [module docs](self)).
///
/// Cheap to clone; the same value serves every container it is selected for, and each run
/// keeps its state in the `run` future.
#[derive(Clone)]
pub struct RunnerProgram {
    /// Registration behaviour.
    pub registration: Registration,
    /// How long each registration attempt takes (slow registration); 0 by default.
    pub registration_delay: Duration,
    /// Registration attempts before giving up with exit code 2 (entrypoint: 10).
    pub attempts: u32,
    /// Pause after a failed registration attempt (entrypoint: 1 s); also the pause before a
    /// protocol call is retried after a transport error.
    pub retry_delay: Duration,
    /// How long a busy runner may finish its job after SIGTERM before the job is cancelled,
    /// unless the pod sets `RUNNER_GRACEFUL_STOP_TIMEOUT`. 0 by default (see the module docs).
    pub graceful_stop_timeout: Duration,
    /// The long poll's wait (actions/runner: 50 s).
    pub poll_wait: Duration,
    /// The runner version reported on connect (ghsim's current one when unset); an old one
    /// models a stale runner image GitHub refuses messages.
    pub version: Option<String>,
    /// How often a running job's liveness is renewed (ghsim takes runners offline after 90 s
    /// of silence).
    pub heartbeat: Duration,
    /// A GitHub credential (PAT) to mint remove tokens with when ghsim refuses the
    /// registration token for removal.
    remove_credential: Option<Secret>,
    /// Faults switched on and off at run time (shared by every clone).
    faults: RunnerFaults,
}

impl std::fmt::Debug for RunnerProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerProgram")
            .field("registration", &self.registration)
            .field("registration_delay", &self.registration_delay)
            .field("attempts", &self.attempts)
            .field("retry_delay", &self.retry_delay)
            .field("graceful_stop_timeout", &self.graceful_stop_timeout)
            .field("poll_wait", &self.poll_wait)
            .field("version", &self.version)
            .field("heartbeat", &self.heartbeat)
            .field("remove_credential", &self.remove_credential.is_some())
            .field("faults", &self.faults)
            .finish()
    }
}

impl Default for RunnerProgram {
    fn default() -> Self {
        Self::new()
    }
}

impl RunnerProgram {
    /// A runner that registers normally, with the entrypoint's retry loop (10 attempts, 1 s
    /// apart) and actions/runner's 50 s long poll.
    pub fn new() -> Self {
        Self {
            registration: Registration::Normal,
            registration_delay: Duration::ZERO,
            attempts: 10,
            retry_delay: Duration::from_secs(1),
            graceful_stop_timeout: Duration::ZERO,
            poll_wait: Duration::from_secs(50),
            version: None,
            heartbeat: Duration::from_secs(30),
            remove_credential: None,
            faults: RunnerFaults::default(),
        }
    }

    /// The run-time fault switches of this program and all its clones.
    pub fn faults(&self) -> &RunnerFaults {
        &self.faults
    }

    /// Sets the registration behaviour.
    pub fn with_registration(mut self, registration: Registration) -> Self {
        self.registration = registration;
        self
    }

    /// Makes each registration attempt take `delay`.
    pub fn with_registration_delay(mut self, delay: Duration) -> Self {
        self.registration_delay = delay;
        self
    }

    /// Sets the graceful-stop window of busy runners.
    pub fn with_graceful_stop_timeout(mut self, timeout: Duration) -> Self {
        self.graceful_stop_timeout = timeout;
        self
    }

    /// Sets the pause between registration attempts and protocol retries.
    pub fn with_retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Gives the runner a GitHub credential (a PAT ghsim accepts) to mint remove tokens with,
    /// standing in for GitHub's acceptance of the registration token by `config.sh remove`.
    /// Use a credential of its own so ghsim's accounting keeps these calls apart.
    pub fn with_remove_credential(mut self, token: impl Into<String>) -> Self {
        self.remove_credential = Some(Secret::new(token.into()));
        self
    }

    /// This program with the options of a `runner(...)` spec applied: `registration=normal|
    /// bad-token|never`, `delay=D`, `stop-timeout=D`, `attempts=N`, `retry-delay=D`.
    pub fn with_spec(&self, spec: &ProgramSpec) -> Result<Self, SpecError> {
        spec.expect(
            0,
            &[
                "registration",
                "delay",
                "stop-timeout",
                "attempts",
                "retry-delay",
                "version",
            ],
        )?;
        let mut program = self.clone();
        if let Some(mode) = spec.options.get("registration") {
            program.registration = match mode.as_str() {
                "normal" | "ok" => Registration::Normal,
                "bad-token" => Registration::BadToken,
                "never" => Registration::Never,
                other => {
                    return Err(spec.invalid(format!(
                        "registration: {other:?} (normal, bad-token or never)"
                    )));
                }
            };
        }
        program.registration_delay = spec.duration_option("delay", program.registration_delay)?;
        program.graceful_stop_timeout =
            spec.duration_option("stop-timeout", program.graceful_stop_timeout)?;
        program.retry_delay = spec.duration_option("retry-delay", program.retry_delay)?;
        if let Some(version) = spec.options.get("version") {
            program.version = Some(version.clone());
        }
        if let Some(text) = spec.options.get("attempts") {
            program.attempts = text
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| spec.invalid(format!("attempts: {text:?}")))?;
        }
        Ok(program)
    }
}

/// How the runner registers.
#[derive(Clone, PartialEq, Eq)]
pub enum RunnerCredential {
    /// `RUNNER_TOKEN`: a registration token for `config.sh`.
    Token(String),
    /// `ACTIONS_RUNNER_INPUT_JITCONFIG`: an encoded JIT configuration, no registration call.
    Jit(String),
}

impl std::fmt::Debug for RunnerCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Credentials stay out of logs and panic messages.
        match self {
            Self::Token(_) => f.write_str("Token(<redacted>)"),
            Self::Jit(_) => f.write_str("Jit(<redacted>)"),
        }
    }
}

/// The runner container's environment, read as the runner images read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerEnv {
    /// `RUNNER_NAME` (for JIT runners the name in the configuration wins on GitHub).
    pub name: String,
    /// `GITHUB_URL` with a trailing `/` (`https://github.com/` when unset).
    pub github_url: String,
    /// The scope part of the config URL (`ATTACH`): `org`, `owner/repo` or
    /// `enterprises/slug`. Empty for JIT runners.
    pub attach: String,
    /// The credential.
    pub credential: RunnerCredential,
    /// `RUNNER_LABELS`, split on commas.
    pub labels: Vec<String>,
    /// `RUNNER_GROUP`, unless the runner is a repository runner.
    pub group: Option<String>,
    /// `RUNNER_EPHEMERAL` (true unless set to something other than `true`); always true for
    /// JIT runners.
    pub ephemeral: bool,
    /// `RUNNER_WORKDIR` (read, not used).
    pub work_dir: Option<String>,
    /// `STARTUP_DELAY_IN_SECONDS`.
    pub startup_delay: Duration,
    /// `RUNNER_GRACEFUL_STOP_TIMEOUT`, when set.
    pub graceful_stop_timeout: Option<Duration>,
}

impl RunnerEnv {
    /// `--url` of `config.sh`: `GITHUB_URL` + the scope.
    pub fn config_url(&self) -> String {
        format!("{}{}", self.github_url, self.attach)
    }

    /// Reads the environment through `var` (unset and empty are the same, as for `[ -z ]`).
    /// `Err` carries the entrypoint's complaint; the container exits 1 with it.
    pub fn read<'a>(var: impl Fn(&str) -> Option<&'a str>) -> Result<Self, String> {
        let get = |name: &str| var(name).filter(|v| !v.is_empty()).map(str::to_owned);
        let mut github_url = get("GITHUB_URL").unwrap_or_else(|| "https://github.com/".into());
        if !github_url.ends_with('/') {
            github_url.push('/');
        }
        let seconds = |name: &str| -> Result<Option<Duration>, String> {
            get(name)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map(Duration::from_secs)
                        .map_err(|_| format!("{name} must be a number of seconds, not {v:?}"))
                })
                .transpose()
        };
        let startup_delay = seconds("STARTUP_DELAY_IN_SECONDS")?.unwrap_or_default();
        let graceful_stop_timeout = seconds("RUNNER_GRACEFUL_STOP_TIMEOUT")?;
        let work_dir = get("RUNNER_WORKDIR");
        let labels: Vec<String> = get("RUNNER_LABELS")
            .map(|l| {
                l.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();

        // The official image's contract: a JIT configuration replaces config.sh entirely.
        if let Some(jit) = get("ACTIONS_RUNNER_INPUT_JITCONFIG") {
            return Ok(Self {
                name: get("RUNNER_NAME").unwrap_or_default(),
                github_url,
                attach: String::new(),
                credential: RunnerCredential::Jit(jit),
                labels,
                group: None,
                ephemeral: true,
                work_dir,
                startup_delay,
                graceful_stop_timeout,
            });
        }

        let name = get("RUNNER_NAME").ok_or("RUNNER_NAME must be set")?;
        let (org, repo, enterprise) = (
            get("RUNNER_ORG"),
            get("RUNNER_REPO"),
            get("RUNNER_ENTERPRISE"),
        );
        let attach = match (&org, &repo, &enterprise) {
            // The entrypoint's first branch, kept as it is: all three set attaches to
            // `$RUNNER_ORG/$RUNNER_REPO` (Hangar never sets more than one).
            (Some(o), Some(r), Some(_)) => format!("{o}/{r}"),
            (Some(o), _, _) => o.clone(),
            (None, Some(r), _) => r.clone(),
            (None, None, Some(e)) => format!("enterprises/{e}"),
            (None, None, None) => {
                return Err(
                    "At least one of RUNNER_ORG, RUNNER_REPO, or RUNNER_ENTERPRISE must be set"
                        .into(),
                );
            }
        };
        let token = get("RUNNER_TOKEN").ok_or("RUNNER_TOKEN must be set")?;
        let group = if repo.is_none() {
            get("RUNNER_GROUP")
        } else {
            None
        };
        // The controller always sets RUNNER_EPHEMERAL; unset means Hangar's default (true).
        let ephemeral = var("RUNNER_EPHEMERAL").is_none_or(|v| v == "true");
        Ok(Self {
            name,
            github_url,
            attach,
            credential: RunnerCredential::Token(token),
            labels,
            group,
            ephemeral,
            work_dir,
            startup_delay,
            graceful_stop_timeout,
        })
    }
}

#[async_trait]
impl ContainerProgram for RunnerProgram {
    async fn prepare(&self, ctx: &ContainerContext) -> Result<(), StartFailure> {
        // Only a new container pulls: a restarted one has its image already.
        if ctx.restart_count == 0 && self.faults.applies(RunnerFault::ImagePull, ctx) {
            let image = ctx.container.image.as_deref().unwrap_or_default();
            return Err(StartFailure::image_pull(format!(
                "rpc error: code = Unknown desc = failed to pull and unpack image \"{image}\": \
                 failed to resolve reference \"{image}\": unexpected status from HEAD request: \
                 503 Service Unavailable"
            )));
        }
        Ok(())
    }

    async fn run(&self, ctx: ContainerContext, io: ContainerIo) -> Exit {
        let env = match RunnerEnv::read(|name| ctx.env_var(name)) {
            Ok(env) => env,
            Err(complaint) => {
                tracing::warn!(pod = %ctx.pod_name(), %complaint, "runner cannot start");
                return Exit::code(EXIT_BAD_ENV).with_message(complaint);
            }
        };
        let graceful_stop_timeout = env
            .graceful_stop_timeout
            .unwrap_or(self.graceful_stop_timeout);
        // Decided when the container starts: a runner whose `config.sh` hangs stays stuck.
        let never_registers = self.registration == Registration::Never
            || self.faults.applies(RunnerFault::NeverRegisters, &ctx);
        let runner = Runner {
            program: self,
            ctx: &ctx,
            never_registers,
            pod: format!("{}/{}", ctx.namespace(), ctx.pod_name()),
            env,
            io: &io,
            graceful_stop_timeout,
        };
        runner.run().await
    }
}

/// One run of the runner process.
struct Runner<'a> {
    program: &'a RunnerProgram,
    ctx: &'a ContainerContext,
    /// `config.sh` hangs ([`Registration::Never`] or [`RunnerFault::NeverRegisters`]).
    never_registers: bool,
    pod: String,
    env: RunnerEnv,
    io: &'a ContainerIo,
    graceful_stop_timeout: Duration,
}

/// How the listener loop ends a job.
enum JobEnd {
    /// Completion reported; `removed` when GitHub removed the (ephemeral) runner.
    Completed { removed: bool },
    /// The container exits with this.
    Exit(Exit),
}

/// What ended an idle wait.
enum Idle<T> {
    Term,
    Done(T),
}

impl Runner<'_> {
    async fn run(&self) -> Exit {
        sleep(self.env.startup_delay).await;
        // SIGTERM does not interrupt registration: graceful-stop.sh waits for `.runner` first.
        let mut client = match self.configure().await {
            Ok(client) => client,
            Err(exit) => return exit,
        };
        tracing::info!(pod = %self.pod, runner = %self.env.name, id = client.runner_id, "runner registered");
        if let Err(exit) = self.connect(&mut client).await {
            return exit;
        }
        self.io.set_ready(true);
        loop {
            if self.cut_off() {
                if let Idle::Term = self.idle(sleep(self.program.retry_delay)).await {
                    return self.stop_idle(&mut client).await;
                }
                continue;
            }
            let poll = self.unless_cut_off(client.next_job(self.program.poll_wait));
            let polled = match self.idle(poll).await {
                Idle::Term => return self.stop_idle(&mut client).await,
                // The connection dropped: the poll is lost, as GitHub sees it.
                Idle::Done(None) => continue,
                Idle::Done(Some(polled)) => polled,
            };
            match polled {
                Ok(None) => {}
                Ok(Some(job)) => match self.run_job(&mut client, job).await {
                    JobEnd::Completed { removed } if removed || self.env.ephemeral => {
                        self.linger_while_slow_to_exit().await;
                        // The ephemeral listener exits 0 after its job; run.sh passes it on.
                        return Exit::success();
                    }
                    JobEnd::Completed { .. } => {}
                    JobEnd::Exit(exit) => return exit,
                },
                // The session is gone (taken offline, or the runner was deleted): reconnect,
                // which tells the two apart.
                Err(RunnerError::Status { status: 404, .. }) => {
                    if let Err(exit) = self.connect(&mut client).await {
                        return exit;
                    }
                }
                Err(e) => {
                    tracing::warn!(pod = %self.pod, error = %e, "poll failed; retrying");
                    if let Idle::Term = self.idle(sleep(self.program.retry_delay)).await {
                        return self.stop_idle(&mut client).await;
                    }
                }
            }
        }
    }

    /// Waits while [`RunnerFault::SlowExit`] holds for this runner's pod.
    async fn linger_while_slow_to_exit(&self) {
        let mut changes = self.program.faults.changes();
        while self.program.faults.applies(RunnerFault::SlowExit, self.ctx) {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// Whether [`RunnerFault::CutOff`] keeps this runner from GitHub now.
    fn cut_off(&self) -> bool {
        self.program.faults.applies(RunnerFault::CutOff, self.ctx)
    }

    /// `work` (a call to GitHub), or `None` if [`RunnerFault::CutOff`] cuts the runner off
    /// first: the connection drops, the call is lost.
    async fn unless_cut_off<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        // Subscribed before the first look, so a fault added in between is not missed.
        let mut changes = self.program.faults.changes();
        let cut = async {
            while !self.cut_off() {
                if changes.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            done = work => Some(done),
            () = cut => None,
        }
    }

    /// Waits for `work` unless SIGTERM comes first.
    async fn idle<T>(&self, work: impl Future<Output = T>) -> Idle<T> {
        tokio::select! {
            biased;
            _ = self.io.terminated() => Idle::Term,
            done = work => Idle::Done(done),
        }
    }

    /// `config.sh` (with the entrypoint's retries), or loading the JIT configuration.
    async fn configure(&self) -> Result<RunnerClient, Exit> {
        let token = match &self.env.credential {
            RunnerCredential::Jit(blob) => {
                return RunnerClient::from_jit_config(blob)
                    .map(|c| c.with_version(self.program.version.clone()))
                    .map_err(|e| {
                        tracing::warn!(pod = %self.pod, error = %e, "invalid JIT configuration");
                        Exit::code(EXIT_BAD_ENV).with_message(e.to_string())
                    });
            }
            RunnerCredential::Token(token) => token,
        };
        let token = match self.program.registration {
            Registration::BadToken => format!("{token}-rejected"),
            Registration::Normal | Registration::Never => token.clone(),
        };
        let request = RegisterRunner {
            url: self.env.config_url(),
            token,
            name: self.env.name.clone(),
            labels: self.env.labels.clone(),
            no_default_labels: false,
            runner_group: self.env.group.clone(),
            ephemeral: self.env.ephemeral,
            replace: true,
        };
        let base = Url::parse(&self.env.github_url);
        for attempt in 1..=self.program.attempts {
            sleep(self.program.registration_delay).await;
            if self.never_registers {
                return pending().await;
            }
            let result = match &base {
                Ok(base) => RunnerClient::register(base, &request)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!("invalid GITHUB_URL: {e}")),
            };
            match result {
                Ok(client) => return Ok(client.with_version(self.program.version.clone())),
                Err(error) => {
                    tracing::info!(pod = %self.pod, attempt, %error, "configuration failed; retrying");
                }
            }
            sleep(self.program.retry_delay).await;
        }
        tracing::warn!(pod = %self.pod, "runner configuration failed");
        Err(Exit::code(EXIT_CONFIG_FAILED).with_message("Configuration failed!"))
    }

    /// Opens the listener session (goes online). `Err` when the runner cannot listen: its
    /// registration is gone, or another listener holds the session.
    async fn connect(&self, client: &mut RunnerClient) -> Result<(), Exit> {
        loop {
            match self.idle(client.connect()).await {
                Idle::Term => return Err(self.stop_idle(client).await),
                Idle::Done(Ok(())) => return Ok(()),
                Idle::Done(Err(RunnerError::Status {
                    status: 401 | 404, ..
                })) => {
                    tracing::info!(pod = %self.pod, "runner registration has been deleted from the server");
                    return Err(Exit::success()
                        .with_message("Runner registration has been deleted from the server"));
                }
                Idle::Done(Err(RunnerError::Status { status: 409, .. })) => {
                    tracing::warn!(pod = %self.pod, "a session for this runner already exists");
                    return Err(Exit::success().with_message("session conflict"));
                }
                Idle::Done(Err(e)) => {
                    tracing::warn!(pod = %self.pod, error = %e, "connect failed; retrying");
                    if let Idle::Term = self.idle(sleep(self.program.retry_delay)).await {
                        return Err(self.stop_idle(client).await);
                    }
                }
            }
        }
    }

    /// Runs `job` for its duration, renewing liveness, and reports its conclusion. SIGTERM
    /// meanwhile starts the busy graceful stop.
    async fn run_job(&self, client: &mut RunnerClient, job: AssignedJob) -> JobEnd {
        tracing::info!(pod = %self.pod, job = job.id, duration_ms = job.duration_ms, "running job");
        let done = Instant::now() + Duration::from_millis(job.duration_ms);
        loop {
            let wake = done.min(Instant::now() + self.program.heartbeat);
            if let Idle::Term = self.idle(sleep_until(wake)).await {
                return JobEnd::Exit(self.stop_busy(client, &job, done).await);
            }
            if Instant::now() >= done {
                break;
            }
            // A poll while busy renews the runner's liveness (the job lock, on GitHub).
            if self.cut_off() {
                continue;
            }
            if let Err(e) = client.next_job(Duration::ZERO).await {
                tracing::warn!(pod = %self.pod, error = %e, "liveness renewal failed");
            }
        }
        self.complete(client, &job).await
    }

    /// Reports `job` finished, retrying transport failures.
    async fn complete(&self, client: &RunnerClient, job: &AssignedJob) -> JobEnd {
        loop {
            match client.complete(job.id, &job.conclusion).await {
                Ok(removed) => {
                    tracing::info!(pod = %self.pod, job = job.id, removed, "job completed");
                    return JobEnd::Completed { removed };
                }
                Err(RunnerError::Transport { source, .. }) => {
                    tracing::warn!(pod = %self.pod, error = %source, "completing the job failed; retrying");
                    sleep(self.program.retry_delay).await;
                }
                Err(e) => {
                    // The job is no longer ours (taken back while we were unreachable).
                    tracing::warn!(pod = %self.pod, error = %e, "job completion refused");
                    return JobEnd::Completed { removed: false };
                }
            }
        }
    }

    /// SIGTERM while idle: remove the registration (`config.sh remove`), exit 0.
    async fn stop_idle(&self, client: &mut RunnerClient) -> Exit {
        match &self.env.credential {
            RunnerCredential::Token(token) => match self.remove(client, token).await {
                Ok(()) => {
                    tracing::info!(pod = %self.pod, "runner removed on SIGTERM");
                    return Exit::success();
                }
                // A job reached the runner while SIGTERM stopped the poll that fetched it.
                Err(RunnerError::Status { status: 422, .. }) => {
                    tracing::warn!(pod = %self.pod, "SIGTERM as a job arrived: cancelling it");
                    let _ = client.disconnect().await;
                    return Exit::code(EXIT_CANCELLED).with_message("job cancelled on arrival");
                }
                Err(e) => {
                    tracing::warn!(pod = %self.pod, error = %e, "removing the runner failed; going offline");
                }
            },
            // The official image's listener only ends its session.
            RunnerCredential::Jit(_) => {}
        }
        if let Err(e) = client.disconnect().await {
            tracing::debug!(pod = %self.pod, error = %e, "disconnect failed");
        }
        Exit::success()
    }

    /// SIGTERM while busy: the job may finish within the graceful-stop window; otherwise the
    /// listener stops, which cancels the job (ghsim records it as interrupted), exit 143.
    async fn stop_busy(&self, client: &mut RunnerClient, job: &AssignedJob, done: Instant) -> Exit {
        let window_ends = Instant::now() + self.graceful_stop_timeout;
        if done <= window_ends {
            sleep_until(done).await;
            let end = self.complete(client, job).await;
            if matches!(end, JobEnd::Completed { removed: false }) && !self.env.ephemeral {
                // A persistent listener stops after its job; its registration stays, offline.
                let _ = client.disconnect().await;
            }
            return Exit::success();
        }
        sleep_until(window_ends).await;
        tracing::warn!(pod = %self.pod, job = job.id, "SIGTERM while running a job: cancelling it");
        if let Err(e) = client.disconnect().await {
            tracing::warn!(pod = %self.pod, error = %e, "disconnect failed");
        }
        Exit::code(EXIT_CANCELLED).with_message(format!("job {} was cancelled", job.id))
    }

    /// `config.sh remove --token $RUNNER_TOKEN`, with the remove-token fallback (module docs).
    async fn remove(&self, client: &RunnerClient, token: &str) -> Result<(), RunnerError> {
        match client.unregister(token).await {
            // ghsim checks the runner's own credential first: it is gone already.
            Err(RunnerError::Status {
                status: 401,
                message,
                ..
            }) if message.contains("credential") => Ok(()),
            Err(RunnerError::Status { status: 401, .. })
                if self.program.remove_credential.is_some() =>
            {
                let remove = self
                    .remove_token()
                    .await
                    .map_err(|message| RunnerError::Status {
                        call: "remove-token",
                        status: 0,
                        message,
                    })?;
                client.unregister(&remove).await
            }
            other => other,
        }
    }

    /// A remove token for the runner's scope, minted with the program's credential.
    async fn remove_token(&self) -> Result<String, String> {
        let credential = self
            .program
            .remove_credential
            .clone()
            .ok_or("no credential")?;
        let scope = Scope::from_config_path(&self.env.attach)
            .ok_or_else(|| format!("no scope in {:?}", self.env.attach))?;
        let url = &self.env.github_url;
        let endpoint = Endpoint::custom(url, url).map_err(|e| e.to_string())?;
        let options = ClientOptions {
            cache: false,
            ..ClientOptions::default()
        };
        let github = GitHubClient::new(endpoint, Credentials::Token(credential), options)
            .map_err(|e| e.to_string())?;
        let token = github
            .remove_token(&scope)
            .await
            .map_err(|e| e.to_string())?;
        Ok(token.token.expose().to_owned())
    }
}

/// Builds the `runner` factory for [`Programs::with_factory`](super::Programs::with_factory):
/// `runner(...)` specs on top of `base`.
pub(crate) fn factory(
    base: RunnerProgram,
) -> impl Fn(&ProgramSpec) -> Result<Arc<dyn ContainerProgram>, SpecError> + Send + Sync + 'static {
    move |spec| {
        base.with_spec(spec)
            .map(|p| Arc::new(p) as Arc<dyn ContainerProgram>)
    }
}

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;

/// A fault [`RunnerFaults`] switches on for some runner pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunnerFault {
    /// New runner containers fail to pull their image: `ErrImagePull`, then
    /// `ImagePullBackOff`, retried with the kubelet's back-off until the fault is removed.
    ImagePull,
    /// Runner containers started meanwhile run but never register (`config.sh` hangs), as
    /// [`Registration::Never`]; they stay stuck after the fault is removed.
    NeverRegisters,
    /// Runner listeners cannot reach GitHub while the fault holds (a network partition): they
    /// stop polling, so GitHub takes them offline after its timeout (ghsim's
    /// `offline_after`), and they poll again (reconnecting if their session is gone) once it
    /// is removed. Their containers keep running.
    CutOff,
    /// Ephemeral runners that finish a job while the fault holds do not exit until it is
    /// removed (actions/runner's cleanup after a job, slow on a busy node): GitHub has the job
    /// completed and the runner gone, while the kubelet still reports the container running.
    SlowExit,
}

/// Which runner pods a [`RunnerFault`] applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodMatch {
    /// Pods on this node.
    Node(String),
    /// Pods whose name starts with this (an owner's pods: Hangar names them `<owner>-…`).
    NamePrefix(String),
}

impl PodMatch {
    fn matches(&self, ctx: &ContainerContext) -> bool {
        match self {
            PodMatch::Node(node) => ctx.node_name == *node,
            PodMatch::NamePrefix(prefix) => ctx.pod_name().starts_with(prefix.as_str()),
        }
    }
}

/// Run-time fault switches of a [`RunnerProgram`]: each [`RunnerFaults::add`] holds until its
/// [`RunnerFaults::remove`], so overlapping faults end independently. Cheap to clone; clones
/// share the switches.
#[derive(Clone, Debug, Default)]
pub struct RunnerFaults(Arc<FaultSwitches>);

#[derive(Debug)]
struct FaultSwitches {
    table: std::sync::Mutex<FaultTable>,
    /// Bumped on every add and remove, so that a runner waits for a change instead of polling.
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for FaultSwitches {
    fn default() -> Self {
        Self {
            table: Default::default(),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

#[derive(Debug, Default)]
struct FaultTable {
    next: u64,
    active: Vec<(u64, RunnerFault, PodMatch)>,
}

impl RunnerFaults {
    /// Switches `fault` on for the pods `target` matches; returns the id to remove it with.
    pub fn add(&self, fault: RunnerFault, target: PodMatch) -> u64 {
        let id = {
            let mut table = self.0.table.lock().expect("runner faults");
            table.next += 1;
            let id = table.next;
            table.active.push((id, fault, target));
            id
        };
        self.0.changed.send_modify(|n| *n += 1);
        id
    }

    /// Switches off the fault `id` returned by [`RunnerFaults::add`] (no-op if gone).
    pub fn remove(&self, id: u64) {
        self.0
            .table
            .lock()
            .expect("runner faults")
            .active
            .retain(|(i, _, _)| *i != id);
        self.0.changed.send_modify(|n| *n += 1);
    }

    /// A receiver that sees every add and remove after this call.
    pub(crate) fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.changed.subscribe()
    }

    /// Whether `fault` is on for the container `ctx` runs in.
    pub fn applies(&self, fault: RunnerFault, ctx: &ContainerContext) -> bool {
        self.0
            .table
            .lock()
            .expect("runner faults")
            .active
            .iter()
            .any(|(_, f, target)| *f == fault && target.matches(ctx))
    }
}
