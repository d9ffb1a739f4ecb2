//! Reference packages install safely when many installers race into an empty cache: threads of
//! one process (as the tests of one test binary are) and separate processes (as test binaries
//! run side by side are) all get a complete package, and no staging directory is left behind.

use std::path::{Path, PathBuf};
use std::process::Command;

use ghsim::conformance::{WEBHOOK_EXAMPLES, npm_package_in};

/// Set in a child process: the cache it races into.
const CHILD_CACHE: &str = "HANGAR_PACKAGE_RACE_CACHE";
const THREADS: usize = 4;
const PROCESSES: usize = 3;

/// Installs from `THREADS` threads at once; each reads the package as soon as its install
/// returns, while other installers may still be writing, as a test does.
fn race_threads(cache: &Path) {
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let cache = cache.to_owned();
            std::thread::spawn(move || {
                let package = npm_package_in(&cache, WEBHOOK_EXAMPLES.0, WEBHOOK_EXAMPLES.1)
                    .expect("install succeeds");
                assert_complete(&package);
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("an installer thread failed");
    }
}

/// The package's index parses: a half-written copy fails here ("EOF while parsing").
fn assert_complete(package: &Path) {
    let index = package.join("api.github.com/index.json");
    let text = std::fs::read_to_string(&index)
        .unwrap_or_else(|e| panic!("{} unreadable: {e}", index.display()));
    let parsed: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not whole JSON: {e}", index.display()));
    assert!(parsed.as_array().is_some_and(|events| !events.is_empty()));
}

#[test]
fn installers_racing_into_an_empty_cache_all_get_the_whole_package() {
    if let Some(cache) = std::env::var_os(CHILD_CACHE) {
        race_threads(&PathBuf::from(cache));
        return;
    }
    let cache = tempfile_dir();
    let exe = std::env::current_exe().expect("test binary path");
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "installers_racing_into_an_empty_cache_all_get_the_whole_package",
                    "--nocapture",
                ])
                .env(CHILD_CACHE, &cache)
                .spawn()
                .expect("spawn racing test process")
        })
        .collect();
    race_threads(&cache);
    for mut child in children {
        let status = child.wait().expect("wait for racing process");
        assert!(status.success(), "a racing process failed: {status}");
    }
    let leftovers: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".staging"))
        .collect();
    assert!(leftovers.is_empty(), "staging left behind: {leftovers:?}");
    std::fs::remove_dir_all(&cache).unwrap();
}

/// An empty directory under the system's temporary directory, unique to this run.
fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "hangar-package-race-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
