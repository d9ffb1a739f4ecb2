//! Starting and stopping one control plane on loopback.
//!
//! [`ControlPlane::start`] writes a PKI and kubeconfig into a directory, starts `etcd`, then
//! `kube-apiserver` on free loopback ports, waits until `/readyz` answers 200 to the admin
//! certificate, then starts `kube-controller-manager` and `kube-scheduler`. Every PID it starts
//! is recorded in `<dir>/state.json`; [`ControlPlane::stop`] signals only those PIDs, and only
//! if they still run the binary we started (a recycled PID is left alone).
//!
//! Two lifetimes are supported:
//! - *detached* (`cargo xtask cluster up`): the processes outlive the starter and run until
//!   `cluster down`;
//! - *tied* to a process (a test binary): each component runs under a tiny `sh` watchdog that
//!   stops it once that process is gone, so test runs never leak control planes.
//!
//! kube-controller-manager runs without the `nodelifecycle` controller by default: Hangar's node
//! simulator keeps its own nodes' heartbeats, and without that controller a paused simulator
//! cannot get its nodes' pods evicted behind a test's back.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::binaries::Binaries;
use crate::pki::{self, PkiError, PkiFiles};

/// How to start a control plane.
#[derive(Clone, Debug)]
pub struct StartOptions {
    /// Directory for PKI, kubeconfig, logs, etcd data and recorded PIDs. Emptied first.
    pub dir: PathBuf,
    /// Where the binaries are.
    pub binaries: Binaries,
    /// kube-controller-manager `--controllers`; `None` skips the controller-manager.
    pub controllers: Option<String>,
    /// Start kube-scheduler.
    pub scheduler: bool,
    /// Stop every component once this PID is gone (test binaries); `None` = detached.
    pub tie_to_pid: Option<u32>,
    /// How long to wait for etcd health and apiserver readiness together.
    pub ready_timeout: Duration,
}

impl StartOptions {
    /// Defaults: controller-manager without `nodelifecycle`, scheduler on, detached, 120 s.
    pub fn new(dir: impl Into<PathBuf>, binaries: Binaries) -> Self {
        Self {
            dir: dir.into(),
            binaries,
            controllers: Some("*,-nodelifecycle".to_owned()),
            scheduler: true,
            tie_to_pid: None,
            ready_timeout: Duration::from_secs(120),
        }
    }
}

/// One recorded process.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Component {
    /// `etcd`, `kube-apiserver`, ...
    pub name: String,
    /// The PID we started (the watchdog's, when tied).
    pub pid: u32,
    /// The binary it runs, used to refuse signalling a recycled PID.
    pub binary: PathBuf,
    /// The component's own program when `binary` is the watchdog's `sh` (tied lifetimes).
    #[serde(default)]
    pub program: Option<PathBuf>,
    /// Its arguments, so that [`ControlPlane::start_apiserver`] can start it again as it was.
    #[serde(default)]
    pub args: Vec<String>,
}

/// What `<dir>/state.json` records.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// Started processes in start order.
    pub components: Vec<Component>,
    /// Seconds from the start call until the apiserver was ready.
    pub ready_after_secs: f64,
    /// The PID the components are tied to, if any (restarted components are tied to it too).
    #[serde(default)]
    pub tie_to_pid: Option<u32>,
}

/// A started control plane.
#[derive(Debug)]
pub struct ControlPlane {
    dir: PathBuf,
    state: State,
}

/// Why a control plane could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    /// A binary is missing.
    #[error(transparent)]
    Binaries(#[from] crate::binaries::BinariesError),
    /// The PKI could not be generated.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// Filesystem or process trouble.
    #[error("failed to {action} {path}: {source}")]
    Io {
        /// What we were doing.
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A component exited or never became ready; the log tail says why.
    #[error(
        "{component} did not become ready within {timeout:?}; last log lines of {log}:\n{tail}"
    )]
    NotReady {
        /// The component.
        component: &'static str,
        /// The wait limit.
        timeout: Duration,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that log.
        tail: String,
    },
    /// `state.json` is missing or unreadable.
    #[error("no control plane recorded in {0} (start one with `cargo xtask cluster up`)")]
    NotRunning(PathBuf),
}

impl ControlPlane {
    /// Starts a control plane as described by `opts`. On failure every process already started
    /// is stopped again.
    pub async fn start(opts: StartOptions) -> Result<Self, ControlPlaneError> {
        let started = Instant::now();
        let binaries = opts.binaries.clone().require()?;
        let dir = opts.dir.clone();
        if dir.join("state.json").exists() {
            let _ = Self::stop(&dir);
        }
        let _ = std::fs::remove_dir_all(&dir);
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(io("create", &logs))?;
        let pki = pki::generate(&dir.join("pki"))?;

        let mut launcher = Launcher {
            dir: dir.clone(),
            tie_to_pid: opts.tie_to_pid,
            components: vec![],
        };
        let result = launcher.launch_all(&opts, &binaries, &pki, started).await;
        match result {
            Ok(state) => Ok(Self { dir, state }),
            Err(e) => {
                launcher.stop_started();
                Err(e)
            }
        }
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.state.kubeconfig
    }

    /// The directory holding everything.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The recorded state.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Reads the recorded state of the control plane in `dir`.
    pub fn read_state(dir: &Path) -> Result<State, ControlPlaneError> {
        let path = dir.join("state.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|_| ControlPlaneError::NotRunning(dir.to_owned()))?;
        serde_json::from_str(&text).map_err(|_| ControlPlaneError::NotRunning(dir.to_owned()))
    }

    /// Which recorded components still run.
    pub fn running(dir: &Path) -> Result<Vec<(Component, bool)>, ControlPlaneError> {
        let state = Self::read_state(dir)?;
        Ok(state
            .components
            .into_iter()
            .map(|c| {
                let alive = runs_binary(c.pid, &c.binary);
                (c, alive)
            })
            .collect())
    }

    /// The PID of each running component's own program (the watchdog shell's child when its
    /// lifetime is tied), with the component's name: where a benchmark reads what serving its
    /// load cost the control plane.
    pub fn program_pids(dir: &Path) -> Result<Vec<(String, u32)>, ControlPlaneError> {
        Ok(Self::running(dir)?
            .into_iter()
            .filter(|(_, alive)| *alive)
            .filter_map(|(c, _)| {
                let pid = match &c.program {
                    Some(program) => child_running(c.pid, program)?,
                    None => c.pid,
                };
                Some((c.name, pid))
            })
            .collect())
    }

    /// Starts `binary` detached (logs in `<dir>/logs/<name>.log`) and records it with the control
    /// plane in `dir`, so that [`ControlPlane::stop`] ends it too. Used by the demo for ghsim,
    /// nodesim and the operator.
    pub fn spawn_recorded(
        dir: &Path,
        name: &str,
        binary: &Path,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<Component, ControlPlaneError> {
        let mut state = Self::read_state(dir)?;
        let log_path = dir.join("logs").join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path).map_err(io("create", &log_path))?;
        let err_log = log.try_clone().map_err(io("open", &log_path))?;
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().map_err(io("start", binary))?;
        let component = Component {
            name: name.to_owned(),
            pid: child.id(),
            binary: binary.to_owned(),
            program: None,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        };
        state.components.push(component.clone());
        let path = dir.join("state.json");
        let json = serde_json::to_string_pretty(&state).unwrap_or_default();
        std::fs::write(&path, json).map_err(io("write", &path))?;
        Ok(component)
    }

    /// Stops the control plane recorded in `dir`, newest component first: SIGTERM, then SIGKILL
    /// after 10 s. Returns the components that were signalled.
    pub fn stop(dir: &Path) -> Result<Vec<Component>, ControlPlaneError> {
        let state = Self::read_state(dir)?;
        let stopped = stop_components(&state.components);
        let _ = std::fs::remove_file(dir.join("state.json"));
        Ok(stopped)
    }
}

/// How [`ControlPlane::stop_apiserver`] ends the apiserver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: a graceful shutdown (the apiserver drains its requests first).
    Term,
    /// SIGKILL: gone at once, as a crashed or OOM-killed apiserver.
    Kill,
}

/// The name [`ControlPlane`] records the apiserver under.
pub const APISERVER: &str = "kube-apiserver";

impl ControlPlane {
    /// Ends the recorded `kube-apiserver` of the control plane in `dir` with `signal` and
    /// returns once it is gone (a SIGTERMed one that has not exited after 30 s is SIGKILLed).
    /// etcd, the other components and the recorded state stay: [`ControlPlane::start_apiserver`]
    /// starts it again on the same port with the same certificates and etcd.
    pub fn stop_apiserver(dir: &Path, signal: Signal) -> Result<(), ControlPlaneError> {
        let state = Self::read_state(dir)?;
        let component = state
            .components
            .iter()
            .find(|c| c.name == APISERVER)
            .ok_or_else(|| ControlPlaneError::NotRunning(dir.to_owned()))?;
        if !runs_binary(component.pid, &component.binary) {
            return Ok(());
        }
        // Tied: the watchdog's child is the apiserver; signalling the watchdog would make it
        // stop the apiserver gracefully whatever the signal.
        let target = match &component.program {
            Some(program) if component.binary != *program => child_running(component.pid, program),
            _ => Some(component.pid),
        };
        let Some(target) = target else {
            return Ok(());
        };
        let program = component
            .program
            .clone()
            .unwrap_or(component.binary.clone());
        let flag = match signal {
            Signal::Term => "-TERM",
            Signal::Kill => "-KILL",
        };
        let _ = Command::new("kill")
            .arg(flag)
            .arg(target.to_string())
            .status();
        let until = Instant::now() + Duration::from_secs(30);
        while runs_binary(target, &program) {
            if Instant::now() > until {
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(target.to_string())
                    .status();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The watchdog notices its child is gone within a second and exits.
        let until = Instant::now() + Duration::from_secs(5);
        while runs_binary(component.pid, &component.binary) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Starts the recorded `kube-apiserver` of the control plane in `dir` again, with the
    /// arguments it was first started with (same port, certificates and etcd), if it is not
    /// running, and waits up to `timeout` for `/readyz`. Its log is appended to.
    pub async fn start_apiserver(dir: &Path, timeout: Duration) -> Result<(), ControlPlaneError> {
        let mut state = Self::read_state(dir)?;
        let position = state
            .components
            .iter()
            .position(|c| c.name == APISERVER)
            .ok_or_else(|| ControlPlaneError::NotRunning(dir.to_owned()))?;
        let old = state.components[position].clone();
        if !runs_binary(old.pid, &old.binary) {
            let program = old.program.clone().unwrap_or(old.binary.clone());
            let args: Vec<&str> = old.args.iter().map(String::as_str).collect();
            let component =
                spawn_component(dir, state.tie_to_pid, APISERVER, &program, &args, true)?;
            state.components[position] = component;
            let path = dir.join("state.json");
            let json = serde_json::to_string_pretty(&state).unwrap_or_default();
            std::fs::write(&path, json).map_err(io("write", &path))?;
        }
        let client = admin_client(&state.kubeconfig).await?;
        wait_until(
            APISERVER,
            Instant::now() + timeout,
            timeout,
            &dir.join("logs").join(format!("{APISERVER}.log")),
            || {
                let client = client.clone();
                async move { readyz(&client).await }
            },
        )
        .await
    }
}

/// The child of `parent` that runs `program`, if any.
fn child_running(parent: u32, program: &Path) -> Option<u32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|&pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Field 4, the parent PID, is the second after the parenthesised command name.
            let ppid = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            ppid == Some(parent) && runs_binary(pid, program)
        })
}

struct Launcher {
    dir: PathBuf,
    tie_to_pid: Option<u32>,
    components: Vec<Component>,
}

impl Launcher {
    async fn launch_all(
        &mut self,
        opts: &StartOptions,
        bins: &Binaries,
        pki: &PkiFiles,
        started: Instant,
    ) -> Result<State, ControlPlaneError> {
        let deadline = started + opts.ready_timeout;
        let p = |path: &Path| path.display().to_string();

        // etcd: data on disk without fsync — a test cluster trades durability for speed.
        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let data = self.dir.join("etcd");
        let client_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        self.spawn(
            "etcd",
            &bins.path("etcd"),
            &[
                "--name",
                "hangar",
                "--data-dir",
                &p(&data),
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
                "--initial-cluster",
                &format!("hangar={peer_url}"),
                "--quota-backend-bytes",
                "2147483648",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
        )?;
        wait_until(
            "etcd",
            deadline,
            opts.ready_timeout,
            &self.log("etcd"),
            || async { http_get_ok(etcd_port, "/health").await },
        )
        .await?;

        let api_port = free_port()?;
        let server = format!("https://127.0.0.1:{api_port}");
        self.spawn(
            "kube-apiserver",
            &bins.path("kube-apiserver"),
            &[
                "--etcd-servers",
                &client_url,
                "--bind-address",
                "127.0.0.1",
                "--advertise-address",
                "127.0.0.1",
                "--secure-port",
                &api_port.to_string(),
                "--tls-cert-file",
                &p(&pki.apiserver_cert),
                "--tls-private-key-file",
                &p(&pki.apiserver_key),
                "--client-ca-file",
                &p(&pki.ca_cert),
                "--service-account-issuer",
                "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file",
                &p(&pki.sa_pub),
                "--service-account-signing-key-file",
                &p(&pki.sa_key),
                "--service-cluster-ip-range",
                "10.0.0.0/24",
                "--authorization-mode",
                "Node,RBAC",
                "--allow-privileged=true",
                // No loopback Endpoints for the `kubernetes` Service: nothing routes to 10.0.0.1.
                "--endpoint-reconciler-type",
                "none",
                "--profiling=true",
                "--v=1",
            ],
        )?;
        let kubeconfig = self.dir.join("kubeconfig");
        write_kubeconfig(&kubeconfig, &server, pki)?;
        let client = admin_client(&kubeconfig).await?;
        wait_until(
            "kube-apiserver",
            deadline,
            opts.ready_timeout,
            &self.log("kube-apiserver"),
            || {
                let client = client.clone();
                async move { readyz(&client).await }
            },
        )
        .await?;
        let ready_after_secs = started.elapsed().as_secs_f64();

        if let Some(controllers) = &opts.controllers {
            self.spawn(
                "kube-controller-manager",
                &bins.path("kube-controller-manager"),
                &[
                    "--kubeconfig",
                    &p(&kubeconfig),
                    "--leader-elect=false",
                    "--root-ca-file",
                    &p(&pki.ca_cert),
                    "--service-account-private-key-file",
                    &p(&pki.sa_key),
                    "--use-service-account-credentials=false",
                    "--cluster-signing-cert-file",
                    &p(&pki.ca_cert),
                    "--cluster-signing-key-file",
                    &p(&pki.ca_key),
                    "--controllers",
                    controllers,
                    "--kube-api-qps",
                    "100",
                    "--kube-api-burst",
                    "200",
                    "--secure-port",
                    "0",
                    "--v=1",
                ],
            )?;
        }
        if opts.scheduler {
            self.spawn(
                "kube-scheduler",
                &bins.path("kube-scheduler"),
                &[
                    "--kubeconfig",
                    &p(&kubeconfig),
                    "--leader-elect=false",
                    "--secure-port",
                    "0",
                    "--v=1",
                ],
            )?;
        }

        let state = State {
            kubeconfig,
            server,
            components: self.components.clone(),
            ready_after_secs,
            tie_to_pid: self.tie_to_pid,
        };
        let path = self.dir.join("state.json");
        let json = serde_json::to_string_pretty(&state).unwrap_or_default();
        std::fs::write(&path, json).map_err(io("write", &path))?;
        Ok(state)
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{name}.log"))
    }

    fn spawn(&mut self, name: &str, binary: &Path, args: &[&str]) -> Result<(), ControlPlaneError> {
        let component = spawn_component(&self.dir, self.tie_to_pid, name, binary, args, false)?;
        self.components.push(component);
        Ok(())
    }

    fn stop_started(&self) {
        stop_components(&self.components);
    }
}

/// Starts one component (under the watchdog when `tie_to_pid` is set), logging to
/// `<dir>/logs/<name>.log` (appended to when `append`, as a restart does).
fn spawn_component(
    dir: &Path,
    tie_to_pid: Option<u32>,
    name: &str,
    binary: &Path,
    args: &[&str],
    append: bool,
) -> Result<Component, ControlPlaneError> {
    let log_path = dir.join("logs").join(format!("{name}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(&log_path)
        .map_err(io("create", &log_path))?;
    let err_log = log.try_clone().map_err(io("open", &log_path))?;
    let mut cmd = match tie_to_pid {
        // The watchdog polls the tied process once a second; on its exit (or on our SIGTERM)
        // it stops the component: SIGTERM, then SIGKILL after 10 s.
        Some(parent) => {
            let mut cmd = Command::new("sh");
            cmd.arg("-c")
                .arg(WATCHDOG)
                .arg("hangar-watchdog")
                .arg(parent.to_string())
                .arg(binary);
            cmd
        }
        None => Command::new(binary),
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err_log);
    // Own process group: a Ctrl-C in the starting terminal must not take the cluster down.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd.spawn().map_err(io("start", binary))?;
    let recorded = if tie_to_pid.is_some() {
        PathBuf::from("sh")
    } else {
        binary.to_owned()
    };
    Ok(Component {
        name: name.to_owned(),
        pid: child.id(),
        binary: recorded,
        program: Some(binary.to_owned()),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
    })
}

const WATCHDOG: &str = r#"
parent=$1; shift
"$@" &
child=$!
stop() {
  kill "$child" 2>/dev/null
  i=0; while kill -0 "$child" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  kill -9 "$child" 2>/dev/null
  exit 0
}
trap stop TERM INT
while kill -0 "$parent" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 1 & wait $!; done
stop
"#;

fn stop_components(components: &[Component]) -> Vec<Component> {
    let mut stopped = vec![];
    for c in components.iter().rev() {
        if !runs_binary(c.pid, &c.binary) {
            continue;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.pid.to_string())
            .status();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until && runs_binary(c.pid, &c.binary) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if runs_binary(c.pid, &c.binary) {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(c.pid.to_string())
                .status();
        }
        stopped.push(c.clone());
    }
    stopped
}

/// Whether `pid` is alive and still executes `binary` (guards against recycled PIDs). Zombies
/// count as gone.
fn runs_binary(pid: u32, binary: &Path) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Field 3, after the parenthesised command name, is the state; Z = zombie.
    if stat.is_empty()
        || stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    let argv0 = Path::new(std::str::from_utf8(argv0).unwrap_or_default());
    argv0 == binary || argv0.file_name() == binary.file_name()
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ControlPlaneError {
    let path = path.to_owned();
    move |source| ControlPlaneError::Io {
        action,
        path,
        source,
    }
}

/// A free TCP port on 127.0.0.1 below Linux's default ephemeral range (32768–60999), for a
/// server that must bind the same port again after a restart: no outgoing connection takes it
/// as its source port meanwhile, as one can take a port [`free_port`] gave out.
pub fn stable_port() -> Result<u16, ControlPlaneError> {
    const RANGE: std::ops::Range<u16> = 20_000..32_768;
    let start = fastrand::u16(RANGE);
    let candidates = (start..RANGE.end).chain(RANGE.start..start);
    for port in candidates {
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    free_port()
}

/// A free TCP port on 127.0.0.1 (free when asked; bind soon).
pub fn free_port() -> Result<u16, ControlPlaneError> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(io("bind", Path::new("127.0.0.1:0")))?;
    let port = listener
        .local_addr()
        .map_err(io("bind", Path::new("127.0.0.1:0")))?
        .port();
    Ok(port)
}

fn write_kubeconfig(path: &Path, server: &str, pki: &PkiFiles) -> Result<(), ControlPlaneError> {
    let b64 = |p: &Path| -> Result<String, ControlPlaneError> {
        let bytes = std::fs::read(p).map_err(io("read", p))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: hangar\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: hangar-admin\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: hangar\n  context:\n    cluster: hangar\n    user: hangar-admin\n    namespace: default\ncurrent-context: hangar\n",
        ca = b64(&pki.ca_cert)?,
        cert = b64(&pki.admin_cert)?,
        key = b64(&pki.admin_key)?,
    );
    std::fs::write(path, text).map_err(io("write", path))
}

/// A client for the admin kubeconfig at `path`.
pub async fn admin_client(path: &Path) -> Result<kube::Client, ControlPlaneError> {
    let config = admin_config(path).await?;
    kube::Client::try_from(config).map_err(|e| invalid_kubeconfig(path, &e))
}

/// A client for the admin kubeconfig at `path` that, like a kubelet's (client-go), makes each
/// request once: kube's default client retries 429, 503 and 504 for minutes, which no
/// kubelet does. For the node simulator.
pub async fn kubelet_client(path: &Path) -> Result<kube::Client, ControlPlaneError> {
    let mut config = admin_config(path).await?;
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|e| invalid_kubeconfig(path, &e))
}

/// The client configuration of the admin kubeconfig at `path`.
pub async fn admin_config(path: &Path) -> Result<kube::Config, ControlPlaneError> {
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| invalid_kubeconfig(path, &e))?;
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| invalid_kubeconfig(path, &e))
}

fn invalid_kubeconfig(path: &Path, e: &dyn std::fmt::Display) -> ControlPlaneError {
    ControlPlaneError::Io {
        action: "load kubeconfig",
        path: path.to_owned(),
        source: std::io::Error::other(e.to_string()),
    }
}

async fn readyz(client: &kube::Client) -> bool {
    let Ok(req) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(client.request_text(req).await, Ok(body) if body.trim() == "ok")
}

/// Whether `GET path` on loopback `port` answers 200; etcd's `/health` needs nothing more.
async fn http_get_ok(port: u16, path: &str) -> bool {
    matches!(
        crate::http::get(crate::http::loopback(port), path).await,
        Some((200, _))
    )
}

async fn wait_until<F, Fut>(
    component: &'static str,
    deadline: Instant,
    timeout: Duration,
    log: &Path,
    mut probe: F,
) -> Result<(), ControlPlaneError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    loop {
        if probe().await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(20)..].join("\n");
            return Err(ControlPlaneError::NotReady {
                component,
                timeout,
                log: log.to_owned(),
                tail,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_pid_is_not_ours() {
        // Our own PID runs the test binary, not etcd: stop must leave it alone.
        assert!(!runs_binary(
            std::process::id(),
            Path::new("/usr/local/bin/etcd")
        ));
        let me = std::env::current_exe().unwrap();
        assert!(runs_binary(std::process::id(), &me));
    }

    #[test]
    fn stopping_an_unrecorded_directory_explains_itself() {
        let err = ControlPlane::stop(Path::new("/nonexistent/hangar")).unwrap_err();
        assert!(err.to_string().contains("cargo xtask cluster up"), "{err}");
    }
}
