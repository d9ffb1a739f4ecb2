//! Reference packages for conformance tests: GitHub's OpenAPI description
//! (`@octokit/openapi`) and real webhook examples (`@octokit/webhooks-examples`).
//!
//! They are installed with `npm` on first use into a cache outside the repository
//! (`$HANGAR_CACHE_DIR/npm`, default `~/.cache/hangar/npm`), one directory per pinned
//! version, so their content is never vendored and repeated runs are offline. Each
//! installation goes to a staging directory of its own (process id plus a per-process
//! sequence number), which is renamed into place when complete: concurrent installers, whether
//! threads of one test binary or separate processes, never share a staging directory, and a
//! reader sees either no package or a whole one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// `@octokit/openapi`, pinned.
pub const OPENAPI: (&str, &str) = ("@octokit/openapi", "23.0.2");
/// `@octokit/webhooks-examples`, pinned.
pub const WEBHOOK_EXAMPLES: (&str, &str) = ("@octokit/webhooks-examples", "7.6.1");

/// Why a reference package is unavailable.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// `npm` could not be run.
    #[error("unable to run npm (is Node.js installed?)")]
    Npm(#[source] std::io::Error),
    /// `npm install` failed.
    #[error("npm install {package} failed: {stderr}")]
    Install {
        /// `name@version`.
        package: String,
        /// npm's complaint.
        stderr: String,
    },
    /// File system trouble in the cache.
    #[error("cache directory {path}")]
    Cache {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The cache root: `$HANGAR_CACHE_DIR/npm` or `~/.cache/hangar/npm`.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("HANGAR_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(std::env::temp_dir)
                .join(".cache/hangar")
        });
    base.join("npm")
}

/// The installed package directory (`…/node_modules/<name>`) in [`cache_dir`], installing it
/// if missing.
pub fn npm_package(name: &str, version: &str) -> Result<PathBuf, PackageError> {
    npm_package_in(&cache_dir(), name, version)
}

/// [`npm_package`] with an explicit cache root.
pub fn npm_package_in(cache: &Path, name: &str, version: &str) -> Result<PathBuf, PackageError> {
    let slug = format!("{}@{version}", name.replace('/', "+"));
    let root = cache.join(&slug);
    let package_dir = root.join("node_modules").join(name);
    if package_dir.join("package.json").exists() {
        return Ok(package_dir);
    }
    std::fs::create_dir_all(cache).map_err(|source| PackageError::Cache {
        path: cache.to_owned(),
        source,
    })?;
    let staging = cache.join(staging_name(&slug));
    // Only a killed earlier process whose id was reused can have left this name behind.
    let _ = std::fs::remove_dir_all(&staging);
    let output = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--no-save",
            "--loglevel=error",
            "--prefix",
        ])
        .arg(&staging)
        .arg(format!("{name}@{version}"))
        .output()
        .map_err(PackageError::Npm)?;
    if !output.status.success() {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(PackageError::Install {
            package: format!("{name}@{version}"),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    // Another process may have won the race; its copy is as good as ours.
    if std::fs::rename(&staging, &root).is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    if package_dir.join("package.json").exists() {
        Ok(package_dir)
    } else {
        Err(PackageError::Cache {
            path: package_dir,
            source: std::io::Error::other("package missing after install"),
        })
    }
}

/// A staging directory name no other installer uses: unique per process by its id, and per
/// call within a process by a sequence number (threads of one test binary share the id).
fn staging_name(slug: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let sequence = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(".{slug}.{}.{sequence}.staging", std::process::id())
}

/// A file inside an installed package.
pub fn package_file(package: (&str, &str), file: &str) -> Result<PathBuf, PackageError> {
    Ok(npm_package(package.0, package.1)?.join(Path::new(file)))
}
