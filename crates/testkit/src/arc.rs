//! actions-runner-controller's legacy binaries, for running ARC beside Hangar on the local
//! stack (the side-by-side benchmark, the takeover test).
//!
//! ARC is built, like Kubernetes and Helm, from the Go module proxy: its last legacy release's
//! module ([`ARC_VERSION`]) has a `replace` directive, so `go install …@version` refuses it;
//! `go mod download -json` gives the unpacked module directory, and `go build` inside it builds
//! with the release's own go.mod and go.sum (nothing is written there). Two programs: the
//! controller manager (the module's root package) and `github-webhook-server`
//! (`cmd/githubwebhookserver`). Its CRDs come from the same module
//! ([`ArcBinaries::crds_dir`]).
//!
//! Binaries are cached outside the repository, keyed by version:
//! `$HANGAR_CACHE_DIR` (default `~/.cache/hangar`)`/arc/<version>/`, built on first use
//! ([`ArcBinaries::ensure`], a few minutes on 2 cores). `HANGAR_ARC_BIN_DIR` points at a ready
//! directory instead (no build). Hangar never runs ARC; only tests and benchmarks do.
//!
//! [`ArcProcesses`] runs the two programs against a control plane and a GitHub (ghsim) the way
//! ARC's chart would, minus the cluster: its webhook server gets a throw-away serving
//! certificate (the manager refuses to start without one), its CRDs come from [`crds`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::binaries::{BinariesError, cache_root, go, run};

/// The last release of ARC's legacy (`actions.summerwind.dev`) controller.
pub const ARC_VERSION: &str = "v0.27.6";

const MODULE: &str = "github.com/actions/actions-runner-controller";

/// The programs built: (file name, package inside the module).
const PROGRAMS: [(&str, &str); 2] = [
    ("manager", "."),
    ("github-webhook-server", "./cmd/githubwebhookserver"),
];

/// A directory holding ARC's `manager` and `github-webhook-server`.
#[derive(Clone, Debug)]
pub struct ArcBinaries {
    dir: PathBuf,
}

/// Serialises builds inside one process; across processes the atomic renames make concurrent
/// builds harmless (both produce the same files).
static BUILD: Mutex<()> = Mutex::new(());

impl ArcBinaries {
    /// The configured directory: `HANGAR_ARC_BIN_DIR`, else the versioned cache directory.
    /// Not checked.
    pub fn configured() -> Self {
        match std::env::var_os("HANGAR_ARC_BIN_DIR") {
            Some(dir) => Self { dir: dir.into() },
            None => Self { dir: cache_dir() },
        }
    }

    /// The configured binaries, built into the cache first when one is missing.
    pub fn ensure() -> Result<Self, BinariesError> {
        let arc = Self::configured();
        let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
        let missing = arc.missing();
        if missing.is_empty() {
            return Ok(arc);
        }
        if std::env::var_os("HANGAR_ARC_BIN_DIR").is_some() {
            return Err(BinariesError::Missing {
                dir: arc.dir.clone(),
                missing,
            });
        }
        let started = Instant::now();
        eprintln!(
            "hangar: building actions-runner-controller {ARC_VERSION} into {}",
            arc.dir.display()
        );
        build(&arc.dir)?;
        eprintln!(
            "hangar: built actions-runner-controller in {:.0?}",
            started.elapsed()
        );
        Ok(arc)
    }

    /// The programs absent from the directory.
    pub fn missing(&self) -> Vec<String> {
        PROGRAMS
            .iter()
            .filter(|(name, _)| !self.dir.join(name).is_file())
            .map(|(name, _)| (*name).to_owned())
            .collect()
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// ARC's controller manager.
    pub fn manager(&self) -> PathBuf {
        self.dir.join(PROGRAMS[0].0)
    }

    /// ARC's `github-webhook-server`.
    pub fn webhook_server(&self) -> PathBuf {
        self.dir.join(PROGRAMS[1].0)
    }

    /// ARC's CRDs for this release (`config/crd/bases` of its module): apply them server-side,
    /// they are too large for client-side apply's last-applied annotation.
    pub fn crds_dir() -> Result<PathBuf, BinariesError> {
        Ok(module_dir()?.join("config").join("crd").join("bases"))
    }
}

/// ARC's CRDs of this release, parsed: every file of [`ArcBinaries::crds_dir`], the scale-set
/// kinds (`actions.github.com`) included, since the manager also runs their controllers and
/// does not start without them. Apply them server-side.
pub fn crds() -> Result<Vec<CustomResourceDefinition>, BinariesError> {
    let dir = ArcBinaries::crds_dir()?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(io(&dir))?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).map_err(io(path))?;
            serde_yaml::from_str(&text).map_err(|e| BinariesError::Build {
                what: format!("ARC's CRD {}", path.display()),
                detail: e.to_string(),
            })
        })
        .collect()
}

/// The names [`admission_webhooks`] gives ARC's two webhook configurations: those its Helm
/// chart installs for a release named `arc`.
pub const WEBHOOK_CONFIGURATIONS: [&str; 2] = [
    "arc-mutating-webhook-configuration",
    "arc-validating-webhook-configuration",
];

/// ARC's admission webhook configurations as its release ships them
/// (`config/webhook/manifests.yaml` of its module: Runner, RunnerDeployment and
/// RunnerReplicaSet defaulting and validation with `failurePolicy: Fail`, and the RunnerSet
/// pods' registration-token injection), named [`WEBHOOK_CONFIGURATIONS`] and pointed at the
/// manager that [`ArcProcesses::spawn`] started with `config` (its loopback admission port,
/// trusting its serving certificate). Apply them after the spawn, as JSON objects of kind
/// `MutatingWebhookConfiguration` and `ValidatingWebhookConfiguration`.
pub fn admission_webhooks(config: &ArcConfig) -> Result<Vec<serde_json::Value>, BinariesError> {
    use base64::Engine as _;
    let manifests = module_dir()?
        .join("config")
        .join("webhook")
        .join("manifests.yaml");
    let text = std::fs::read_to_string(&manifests).map_err(io(&manifests))?;
    let cert = serving_certificate_dir(config).join("tls.crt");
    let ca = std::fs::read(&cert).map_err(io(&cert))?;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca);
    let malformed = |detail: &str| BinariesError::Build {
        what: format!("ARC's webhook manifests {}", manifests.display()),
        detail: detail.to_owned(),
    };
    let mut configurations = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let mut object: serde_json::Value =
            serde::Deserialize::deserialize(document).map_err(|e| malformed(&e.to_string()))?;
        if object.is_null() {
            continue;
        }
        let name = match object["kind"].as_str() {
            Some("MutatingWebhookConfiguration") => WEBHOOK_CONFIGURATIONS[0],
            Some("ValidatingWebhookConfiguration") => WEBHOOK_CONFIGURATIONS[1],
            _ => return Err(malformed("a document of another kind")),
        };
        object["metadata"] = serde_json::json!({ "name": name });
        let webhooks = object["webhooks"]
            .as_array_mut()
            .ok_or_else(|| malformed("no webhooks"))?;
        for webhook in webhooks {
            let path = webhook["clientConfig"]["service"]["path"]
                .as_str()
                .ok_or_else(|| malformed("a webhook without a service path"))?
                .to_owned();
            webhook["clientConfig"] = serde_json::json!({
                "url": format!("https://127.0.0.1:{}{path}", config.admission_port),
                "caBundle": ca,
            });
        }
        configurations.push(object);
    }
    Ok(configurations)
}

/// Where the manager's webhook server finds its certificate: controller-runtime reads
/// `<TMPDIR>/k8s-webhook-server/serving-certs/tls.{crt,key}`, and the spawn sets `TMPDIR`.
fn serving_certificate_dir(config: &ArcConfig) -> PathBuf {
    config.dir.join("k8s-webhook-server").join("serving-certs")
}

/// Turns an I/O error at `path` into a [`BinariesError`].
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BinariesError {
    let path = path.to_owned();
    move |source| BinariesError::Io { path, source }
}

/// What ARC's two programs are pointed at.
#[derive(Clone, Debug)]
pub struct ArcConfig {
    /// The admin kubeconfig of the control plane.
    pub kubeconfig: PathBuf,
    /// GitHub's base URL (ghsim), for the API and for the runners.
    pub github_url: String,
    /// The personal access token ARC uses.
    pub github_token: String,
    /// The secret ghsim signs webhook deliveries with.
    pub webhook_secret: String,
    /// The one namespace ARC watches.
    pub namespace: String,
    /// Where `github-webhook-server` takes deliveries.
    pub webhook_addr: SocketAddr,
    /// The manager's and the webhook server's metrics endpoints.
    pub manager_metrics_addr: SocketAddr,
    /// See `manager_metrics_addr`.
    pub webhook_metrics_addr: SocketAddr,
    /// The port of the manager's admission webhook server (not registered with the apiserver).
    pub admission_port: u16,
    /// `--sync-period` of both programs (ARC's default is 1 minute).
    pub sync_period: std::time::Duration,
    /// A scratch directory: the serving certificate and the programs' logs.
    pub dir: PathBuf,
}

/// ARC's manager and `github-webhook-server`, running; both are killed when dropped.
#[derive(Debug)]
pub struct ArcProcesses {
    /// The controller manager.
    pub manager: Child,
    /// The webhook autoscaler.
    pub webhook_server: Child,
}

impl ArcProcesses {
    /// Starts both programs of `binaries` with `config`; their output goes to `manager.log` and
    /// `github-webhook-server.log` in `config.dir`.
    pub fn spawn(binaries: &ArcBinaries, config: &ArcConfig) -> Result<Self, BinariesError> {
        let certs = serving_certificate_dir(config);
        std::fs::create_dir_all(&certs).map_err(io(&certs))?;
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .map_err(|e| BinariesError::Build {
                what: "ARC's serving certificate".into(),
                detail: e.to_string(),
            })?;
        for (file, pem) in [
            ("tls.crt", cert.cert.pem()),
            ("tls.key", cert.signing_key.serialize_pem()),
        ] {
            let path = certs.join(file);
            std::fs::write(&path, pem).map_err(io(&path))?;
        }
        let log = |name: &str| {
            let path = config.dir.join(format!("{name}.log"));
            std::fs::File::create(&path).map_err(io(&path))
        };
        let sync = format!("{}s", config.sync_period.as_secs().max(1));
        let spawn = |program: PathBuf, args: Vec<String>, name: &str| {
            let out = log(name)?;
            let err = out.try_clone().map_err(io(&config.dir))?;
            Command::new(&program)
                .args(args)
                .env("KUBECONFIG", &config.kubeconfig)
                .env("TMPDIR", &config.dir)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .map_err(io(&program))
        };
        let manager = spawn(
            binaries.manager(),
            vec![
                format!("--github-url={}", config.github_url),
                format!("--runner-github-url={}", config.github_url),
                format!("--github-token={}", config.github_token),
                format!("--watch-namespace={}", config.namespace),
                format!("--metrics-addr={}", config.manager_metrics_addr),
                format!("--port={}", config.admission_port),
                format!("--sync-period={sync}"),
                "--log-level=info".into(),
            ],
            "manager",
        )?;
        let webhook_server = spawn(
            binaries.webhook_server(),
            vec![
                format!("--github-url={}", config.github_url),
                format!("--github-token={}", config.github_token),
                format!("--github-webhook-secret-token={}", config.webhook_secret),
                format!("--watch-namespace={}", config.namespace),
                format!("--webhook-addr={}", config.webhook_addr),
                format!("--metrics-addr={}", config.webhook_metrics_addr),
                "--log-level=info".into(),
            ],
            "github-webhook-server",
        );
        let webhook_server = match webhook_server {
            Ok(child) => child,
            Err(e) => {
                let mut manager = manager;
                let _ = manager.kill();
                let _ = manager.wait();
                return Err(e);
            }
        };
        Ok(Self {
            manager,
            webhook_server,
        })
    }

    /// The process IDs, manager first.
    pub fn pids(&self) -> [u32; 2] {
        [self.manager.id(), self.webhook_server.id()]
    }

    /// Stops both (SIGKILL: what a node loss or `kubectl delete --force` does to ARC).
    pub fn kill(&mut self) {
        for child in [&mut self.manager, &mut self.webhook_server] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ArcProcesses {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `<cache root>/arc/<version>`.
pub fn cache_dir() -> PathBuf {
    cache_root().join("arc").join(ARC_VERSION)
}

/// The unpacked module of [`ARC_VERSION`] in the Go module cache (downloaded if need be).
fn module_dir() -> Result<PathBuf, BinariesError> {
    let what = format!("actions-runner-controller {ARC_VERSION}");
    let scratch = cache_root().join("arc");
    std::fs::create_dir_all(&scratch).map_err(|source| BinariesError::Io {
        path: scratch.clone(),
        source,
    })?;
    let info = run(
        &what,
        go(&scratch).args([
            "mod",
            "download",
            "-json",
            &format!("{MODULE}@{ARC_VERSION}"),
        ]),
    )?;
    serde_json::from_str::<serde_json::Value>(&info)
        .ok()
        .and_then(|v| v.get("Dir")?.as_str().map(PathBuf::from))
        .ok_or_else(|| BinariesError::Build {
            what,
            detail: "no Dir in `go mod download -json`".into(),
        })
}

fn build(out: &Path) -> Result<(), BinariesError> {
    let what = format!("actions-runner-controller {ARC_VERSION}");
    let module = module_dir()?;
    // Each build writes into its own directory, then renames into place: a half-written
    // binary is never visible under the final name.
    let staging = out.join(format!("build-{}", std::process::id()));
    std::fs::create_dir_all(&staging).map_err(|source| BinariesError::Io {
        path: staging.clone(),
        source,
    })?;
    for (name, package) in PROGRAMS {
        let target = staging.join(name);
        run(
            &what,
            go(&module)
                .args(["build", "-trimpath", "-ldflags", "-s -w", "-o"])
                .arg(&target)
                .arg(package),
        )?;
        let installed = out.join(name);
        std::fs::rename(&target, &installed).map_err(|source| BinariesError::Io {
            path: installed,
            source,
        })?;
    }
    let _ = std::fs::remove_dir_all(&staging);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_keyed_by_version() {
        assert!(cache_dir().ends_with(Path::new("arc").join(ARC_VERSION)));
        let arc = ArcBinaries {
            dir: PathBuf::from("/nonexistent"),
        };
        assert_eq!(arc.missing(), ["manager", "github-webhook-server"]);
        assert_eq!(arc.manager(), Path::new("/nonexistent/manager"));
        assert_eq!(
            arc.webhook_server(),
            Path::new("/nonexistent/github-webhook-server")
        );
    }
}
