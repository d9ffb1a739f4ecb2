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

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

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
