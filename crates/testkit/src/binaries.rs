//! Where the control-plane binaries come from.
//!
//! Kubernetes publishes no binaries to any registry this project may use, so we build them from
//! the Go module proxy: a throw-away wrapper module requires `k8s.io/kubernetes` at the pinned
//! release and pins every `k8s.io/*` staging module to its published `v0.<minor>.<patch>` tag
//! (the release's own go.mod maps them to `./staging/...`, which the module zip lacks). etcd is
//! built the same way from `go.etcd.io/etcd/server/v3`.
//!
//! Binaries are cached outside the repository, keyed by version:
//! `$HANGAR_CACHE_DIR` (default `~/.cache/hangar`)`/k8s/<kubernetes>-etcd-<etcd>/bin/`.
//! `HANGAR_K8S_BIN_DIR` points at a ready directory instead (no build).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The Kubernetes release the control plane runs; matches the `v1_34` feature of k8s-openapi.
pub const KUBERNETES_VERSION: &str = "v1.34.3";
/// The etcd release; Kubernetes 1.34 is paired with etcd 3.6.
pub const ETCD_VERSION: &str = "v3.6.6";

/// The binaries one control plane needs.
const KUBE_BINARIES: [&str; 4] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
];

/// A directory holding `etcd`, `kube-apiserver`, `kube-controller-manager`, `kube-scheduler`
/// and `kubectl`.
#[derive(Clone, Debug)]
pub struct Binaries {
    dir: PathBuf,
}

/// Why the binaries are not available.
#[derive(Debug, thiserror::Error)]
pub enum BinariesError {
    /// The cache holds no complete set and building was not requested.
    #[error(
        "control-plane binaries missing in {dir}: {missing:?}; build them once with \
         `cargo xtask cluster build` (needs Go and the Go module proxy, ~15 min on 2 cores)"
    )]
    Missing {
        /// The directory that was searched.
        dir: PathBuf,
        /// Which binaries are absent.
        missing: Vec<String>,
    },
    /// A build step failed.
    #[error("failed to build {what}: {detail}")]
    Build {
        /// What was being built.
        what: String,
        /// The failing command and its exit status.
        detail: String,
    },
    /// Filesystem trouble around the cache.
    #[error("failed to prepare {path}: {source}")]
    Io {
        /// The path being prepared.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl Binaries {
    /// The binaries in `dir`, without checking they exist.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The configured location: `HANGAR_K8S_BIN_DIR`, else the versioned cache directory.
    pub fn configured() -> Self {
        match std::env::var_os("HANGAR_K8S_BIN_DIR") {
            Some(dir) => Self::at(dir),
            None => Self::at(version_dir().join("bin")),
        }
    }

    /// The directory holding the binaries.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of one binary, e.g. `path("kubectl")`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Names of the binaries that are not present.
    pub fn missing(&self) -> Vec<String> {
        KUBE_BINARIES
            .iter()
            .chain(std::iter::once(&"etcd"))
            .filter(|b| !self.path(b).is_file())
            .map(|b| (*b).to_owned())
            .collect()
    }

    /// Ok when every binary is present.
    pub fn require(self) -> Result<Self, BinariesError> {
        let missing = self.missing();
        if missing.is_empty() {
            Ok(self)
        } else {
            Err(BinariesError::Missing {
                dir: self.dir,
                missing,
            })
        }
    }

    /// Builds whatever is missing into this directory (a no-op when all are present).
    /// Progress goes to stderr; Go's module and build caches are kept under the cache root so a
    /// rebuild after a version bump reuses most of the work.
    pub fn build_missing(&self) -> Result<(), BinariesError> {
        let missing = self.missing();
        if missing.is_empty() {
            return Ok(());
        }
        let work = self.dir.parent().unwrap_or(&self.dir).join("build");
        std::fs::create_dir_all(&work).map_err(|source| BinariesError::Io {
            path: work.clone(),
            source,
        })?;
        if missing.iter().any(|m| m != "etcd") {
            let started = Instant::now();
            eprintln!(
                "hangar: building Kubernetes {KUBERNETES_VERSION} into {}",
                self.dir.display()
            );
            build_kubernetes(&work.join("kubernetes"), &self.dir)?;
            eprintln!("hangar: built Kubernetes in {:.0?}", started.elapsed());
        }
        if missing.iter().any(|m| m == "etcd") {
            let started = Instant::now();
            eprintln!(
                "hangar: building etcd {ETCD_VERSION} into {}",
                self.dir.display()
            );
            build_etcd(&work.join("etcd"), &self.dir)?;
            eprintln!("hangar: built etcd in {:.0?}", started.elapsed());
        }
        self.clone().require().map(drop)
    }
}

/// The cache root: `$HANGAR_CACHE_DIR`, else `$XDG_CACHE_HOME/hangar`, else `~/.cache/hangar`.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("HANGAR_CACHE_DIR") {
        return dir.into();
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("hangar");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    PathBuf::from(home).join(".cache").join("hangar")
}

/// The versioned directory for the pinned releases.
pub fn version_dir() -> PathBuf {
    cache_root()
        .join("k8s")
        .join(format!("{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}"))
}

/// A `go` command with a hermetic, reproducible environment: the local toolchain only (no
/// toolchain downloads), static binaries, and caches under our cache root unless the caller
/// already configured them.
pub(crate) fn go(dir: &Path) -> Command {
    let mut cmd = Command::new("go");
    cmd.current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0");
    let root = cache_root().join("go");
    if std::env::var_os("GOMODCACHE").is_none() {
        cmd.env("GOMODCACHE", root.join("mod"));
    }
    if std::env::var_os("GOCACHE").is_none() {
        cmd.env("GOCACHE", root.join("build"));
    }
    cmd
}

pub(crate) fn run(what: &str, cmd: &mut Command) -> Result<String, BinariesError> {
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| BinariesError::Build {
            what: what.into(),
            detail: format!("{cmd:?}: {e}"),
        })?;
    if !out.status.success() {
        return Err(BinariesError::Build {
            what: what.into(),
            detail: format!("{cmd:?} exited with {}", out.status),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn fresh_module(dir: &Path, name: &str) -> Result<(), BinariesError> {
    let io = |source| BinariesError::Io {
        path: dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    for f in ["go.mod", "go.sum"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    run("wrapper module", go(dir).args(["mod", "init", name]))?;
    Ok(())
}

fn build_kubernetes(work: &Path, out: &Path) -> Result<(), BinariesError> {
    let kv = KUBERNETES_VERSION;
    let staging_version = format!("v0{}", &kv[2..]); // v1.34.3 -> v0.34.3
    let minor = kv.split('.').nth(1).unwrap_or_default();
    let what = format!("Kubernetes {kv}");
    fresh_module(work, "hangar.local/k8s-bins")?;

    // The release's own go.mod gives the go/godebug lines and the staging module list.
    let info = run(
        &what,
        go(work).args([
            "mod",
            "download",
            "-json",
            &format!("k8s.io/kubernetes@{kv}"),
        ]),
    )?;
    let gomod_path = json_string_field(&info, "GoMod").ok_or_else(|| BinariesError::Build {
        what: what.clone(),
        detail: "no GoMod in `go mod download -json`".into(),
    })?;
    let upstream = std::fs::read_to_string(&gomod_path).map_err(|source| BinariesError::Io {
        path: gomod_path.clone().into(),
        source,
    })?;
    let mut edit = vec!["mod".to_owned(), "edit".to_owned()];
    for line in upstream.lines() {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("go ") {
            edit.push(format!("-go={v}"));
        } else if let Some(v) = line.strip_prefix("godebug ") {
            // GODEBUG defaults come from the main module, so copy upstream's.
            edit.push(format!("-godebug={v}"));
        } else if let Some((module, target)) = line.split_once(" => ")
            && target.trim().starts_with("./staging/")
            && module.starts_with("k8s.io/")
        {
            let module = module.trim();
            edit.push(format!("-replace={module}={module}@{staging_version}"));
        }
    }
    edit.push(format!("-require=k8s.io/kubernetes@{kv}"));
    run(&what, go(work).args(&edit))?;
    run(
        &what,
        go(work).args(["get", &format!("k8s.io/kubernetes@{kv}")]),
    )?;

    let mut version_flags = String::new();
    for pkg in [
        "k8s.io/component-base/version",
        "k8s.io/client-go/pkg/version",
    ] {
        for (k, v) in [
            ("gitVersion", kv),
            ("gitMajor", "1"),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", "1970-01-01T00:00:00Z"),
        ] {
            version_flags.push_str(&format!(" -X {pkg}.{k}={v}"));
        }
    }
    let out_arg = format!("{}/", out.display());
    let mut args: Vec<String> = vec![
        "build".into(),
        "-mod=mod".into(),
        "-trimpath".into(),
        "-ldflags".into(),
        format!("-s -w{version_flags}"),
        "-o".into(),
        out_arg,
    ];
    args.extend(
        KUBE_BINARIES
            .iter()
            .map(|b| format!("k8s.io/kubernetes/cmd/{b}")),
    );
    std::fs::create_dir_all(out).map_err(|source| BinariesError::Io {
        path: out.to_owned(),
        source,
    })?;
    run(&what, go(work).args(&args))?;
    Ok(())
}

fn build_etcd(work: &Path, out: &Path) -> Result<(), BinariesError> {
    let what = format!("etcd {ETCD_VERSION}");
    fresh_module(work, "hangar.local/etcd")?;
    // server/go.mod has local replaces, so `go install` refuses it; a wrapper module works.
    run(
        &what,
        go(work).args(["get", &format!("go.etcd.io/etcd/server/v3@{ETCD_VERSION}")]),
    )?;
    std::fs::create_dir_all(out).map_err(|source| BinariesError::Io {
        path: out.to_owned(),
        source,
    })?;
    let target = out.join("etcd");
    run(
        &what,
        go(work)
            .args(["build", "-mod=mod", "-trimpath", "-ldflags", "-s -w", "-o"])
            .arg(&target)
            .arg("go.etcd.io/etcd/server/v3"),
    )?;
    Ok(())
}

/// Extracts a top-level string field from `go mod download -json` output without a JSON
/// dependency on the hot path of every test binary.
fn json_string_field(json: &str, field: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    value.get(field)?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_dir_is_keyed_by_both_versions() {
        let dir = version_dir();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.contains(KUBERNETES_VERSION) && name.contains(ETCD_VERSION),
            "{name}"
        );
    }

    #[test]
    fn missing_lists_every_absent_binary() {
        let empty = Binaries::at("/nonexistent/hangar-test");
        assert_eq!(
            empty.missing(),
            [
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kubectl",
                "etcd"
            ]
        );
        let err = empty.require().unwrap_err().to_string();
        assert!(err.contains("cargo xtask cluster build"), "{err}");
    }

    #[test]
    fn reads_gomod_field() {
        assert_eq!(
            json_string_field(r#"{"Path":"x","GoMod":"/m/x.mod"}"#, "GoMod").as_deref(),
            Some("/m/x.mod")
        );
        assert_eq!(json_string_field("not json", "GoMod"), None);
    }
}
