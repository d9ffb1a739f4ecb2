//! The `helm` binary the chart tests run.
//!
//! Helm, like Kubernetes, is built from the Go module proxy rather than downloaded: its module
//! has no `replace` directives, so `go install helm.sh/helm/v3/cmd/helm@<version>` builds it with
//! the release's own go.mod and go.sum, exactly as upstream resolved them. The ldflags are the
//! ones upstream's Makefile sets (version, and the Kubernetes minor its client libraries
//! target, which `helm lint` and the default `.Capabilities.KubeVersion` use).
//!
//! The binary is cached outside the repository, keyed by version:
//! `$HANGAR_CACHE_DIR` (default `~/.cache/hangar`)`/helm/<version>/helm`, built on first use
//! ([`Helm::ensure`]). `HANGAR_HELM` names a ready binary instead (no build). Go is needed only
//! for this build; Hangar itself never runs helm.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use crate::binaries::{BinariesError, cache_root, go, run};

/// The pinned Helm release (Helm 3; its go line is 1.26, which the local toolchain satisfies).
pub const HELM_VERSION: &str = "v3.21.4";

const MODULE: &str = "helm.sh/helm/v3";

/// A `helm` binary.
#[derive(Clone, Debug)]
pub struct Helm {
    path: PathBuf,
}

/// Serialises builds inside one process; across processes the atomic rename makes concurrent
/// builds harmless (both produce the same file).
static BUILD: Mutex<()> = Mutex::new(());

impl Helm {
    /// The configured binary: `HANGAR_HELM`, else the versioned cache path. Not checked.
    pub fn configured() -> Self {
        match std::env::var_os("HANGAR_HELM") {
            Some(path) => Self { path: path.into() },
            None => Self {
                path: cache_dir().join("helm"),
            },
        }
    }

    /// The configured binary, built into the cache first when it is missing (minutes, once).
    pub fn ensure() -> Result<Self, BinariesError> {
        let helm = Self::configured();
        let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
        if !helm.path.is_file() {
            if std::env::var_os("HANGAR_HELM").is_some() {
                return Err(BinariesError::Missing {
                    dir: helm.path.clone(),
                    missing: vec!["helm (HANGAR_HELM)".into()],
                });
            }
            let started = Instant::now();
            eprintln!(
                "hangar: building helm {HELM_VERSION} into {}",
                helm.path.display()
            );
            build(&helm.path)?;
            eprintln!("hangar: built helm in {:.0?}", started.elapsed());
        }
        Ok(helm)
    }

    /// The binary's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A `helm` command that reads no user configuration: its config, cache and data
    /// directories are private to the cache, so a developer's repositories and plugins cannot
    /// change what a test renders.
    pub fn command(&self) -> Command {
        let home = cache_dir().join("home");
        let mut cmd = Command::new(&self.path);
        cmd.env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env_remove("KUBECONFIG")
            .env_remove("HELM_NAMESPACE")
            .env_remove("HELM_KUBECONTEXT");
        cmd
    }
}

/// `<cache root>/helm/<version>`.
pub fn cache_dir() -> PathBuf {
    cache_root().join("helm").join(HELM_VERSION)
}

fn build(target: &Path) -> Result<(), BinariesError> {
    let what = format!("helm {HELM_VERSION}");
    let dir = target.parent().unwrap_or(Path::new(".")).to_owned();
    // Each build installs into its own directory, then renames into place: a half-written
    // binary is never visible under the final name.
    let staging = dir.join(format!("build-{}", std::process::id()));
    std::fs::create_dir_all(&staging).map_err(|source| BinariesError::Io {
        path: staging.clone(),
        source,
    })?;

    // The Kubernetes version helm's client libraries target, as upstream's Makefile derives it.
    let info = run(
        &what,
        go(&staging).args([
            "mod",
            "download",
            "-json",
            &format!("{MODULE}@{HELM_VERSION}"),
        ]),
    )?;
    let gomod = serde_json::from_str::<serde_json::Value>(&info)
        .ok()
        .and_then(|v| v.get("GoMod")?.as_str().map(PathBuf::from))
        .ok_or_else(|| BinariesError::Build {
            what: what.clone(),
            detail: "no GoMod in `go mod download -json`".into(),
        })?;
    let gomod = std::fs::read_to_string(&gomod).map_err(|source| BinariesError::Io {
        path: gomod.clone(),
        source,
    })?;
    let k8s_minor = client_go_minor(&gomod).ok_or_else(|| BinariesError::Build {
        what: what.clone(),
        detail: "no k8s.io/client-go requirement in helm's go.mod".into(),
    })?;

    let ldflags = format!(
        "-s -w -X {MODULE}/internal/version.version={HELM_VERSION} \
         -X {MODULE}/internal/version.gitTreeState=clean \
         -X {MODULE}/pkg/lint/rules.k8sVersionMajor=1 \
         -X {MODULE}/pkg/lint/rules.k8sVersionMinor={k8s_minor} \
         -X {MODULE}/pkg/chartutil.k8sVersionMajor=1 \
         -X {MODULE}/pkg/chartutil.k8sVersionMinor={k8s_minor}"
    );
    run(
        &what,
        go(&staging)
            .env("GOBIN", &staging)
            .args(["install", "-trimpath", "-ldflags", &ldflags])
            .arg(format!("{MODULE}/cmd/helm@{HELM_VERSION}")),
    )?;
    std::fs::rename(staging.join("helm"), target).map_err(|source| BinariesError::Io {
        path: target.to_owned(),
        source,
    })?;
    let _ = std::fs::remove_dir_all(&staging);
    Ok(())
}

/// `k8s.io/client-go v0.36.2` → `36`.
fn client_go_minor(gomod: &str) -> Option<String> {
    gomod.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next()? == "k8s.io/client-go")
            .then(|| words.next())
            .flatten()?
            .split('.')
            .nth(1)
            .map(str::to_owned)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dir_is_keyed_by_version() {
        assert!(cache_dir().ends_with(format!("helm/{HELM_VERSION}")));
    }

    #[test]
    fn reads_client_go_minor_from_gomod() {
        let gomod = "module helm.sh/helm/v3\n\nrequire (\n\tk8s.io/api v0.36.2\n\
                     \tk8s.io/client-go v0.36.2\n)\n";
        assert_eq!(client_go_minor(gomod).as_deref(), Some("36"));
        assert_eq!(client_go_minor("module x\n"), None);
    }
}
