//! Reference packages for conformance tests: GitHub's OpenAPI description
//! (`@octokit/openapi`) and real webhook examples (`@octokit/webhooks-examples`).
//!
//! They are installed with `npm` on first use into a cache outside the repository
//! (`$HANGAR_CACHE_DIR/npm`, default `~/.cache/hangar/npm`), one directory per pinned
//! version, so their content is never vendored and repeated runs are offline. Installation
//! goes to a temporary directory that is renamed into place, so concurrent test binaries
//! cannot see a half-installed package.

use std::path::{Path, PathBuf};
use std::process::Command;

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

/// The installed package directory (`…/node_modules/<name>`), installing it if missing.
pub fn npm_package(name: &str, version: &str) -> Result<PathBuf, PackageError> {
    let slug = format!("{}@{version}", name.replace('/', "+"));
    let root = cache_dir().join(&slug);
    let package_dir = root.join("node_modules").join(name);
    if package_dir.join("package.json").exists() {
        return Ok(package_dir);
    }
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).map_err(|source| PackageError::Cache {
        path: cache.clone(),
        source,
    })?;
    let staging = cache.join(format!(".{slug}.{}", std::process::id()));
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

/// A file inside an installed package.
pub fn package_file(package: (&str, &str), file: &str) -> Result<PathBuf, PackageError> {
    Ok(npm_package(package.0, package.1)?.join(Path::new(file)))
}
