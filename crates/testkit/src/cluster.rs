//! The cluster a test binary runs against.
//!
//! If `HANGAR_TEST_KUBECONFIG` names a kubeconfig (as `cargo xtask test` arranges), every test
//! binary shares that control plane. Otherwise the first test to ask starts a private control
//! plane under the system temp directory, tied to the test process so that it stops when the
//! binary exits. A plain `KUBECONFIG` is deliberately *not* used: tests create and delete
//! namespaces and cluster-scoped CRDs, which no one wants in the cluster their shell points at.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::binaries::Binaries;
use crate::control_plane::{ControlPlane, StartOptions, admin_client};

/// Environment variable naming the kubeconfig of a running control plane to share.
pub const KUBECONFIG_ENV: &str = "HANGAR_TEST_KUBECONFIG";

/// A control plane available to this test binary.
#[derive(Debug)]
pub struct TestCluster {
    kubeconfig: PathBuf,
    binaries: Binaries,
}

static CLUSTER: OnceLock<Result<TestCluster, String>> = OnceLock::new();

impl TestCluster {
    /// The shared cluster, starting a private one on first use when none is configured.
    ///
    /// Panics with the reason when no cluster can be had: a test that needs Kubernetes cannot
    /// meaningfully pass without it.
    pub fn get() -> &'static TestCluster {
        let result = CLUSTER.get_or_init(|| {
            if let Some(path) = std::env::var_os(KUBECONFIG_ENV) {
                return Ok(TestCluster {
                    kubeconfig: path.into(),
                    binaries: Binaries::configured(),
                });
            }
            // Start on a dedicated thread and runtime: each #[tokio::test] has its own runtime,
            // and this one must not depend on whichever test happened to come first.
            std::thread::spawn(start_private)
                .join()
                .unwrap_or_else(|_| Err("control-plane start panicked".to_owned()))
        });
        match result {
            Ok(cluster) => cluster,
            Err(e) => panic!("no Kubernetes control plane for tests: {e}"),
        }
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A new admin client, bound to the calling test's runtime.
    pub async fn client(&self) -> kube::Client {
        admin_client(&self.kubeconfig).await.unwrap_or_else(|e| {
            panic!(
                "cannot build a client for {}: {e}",
                self.kubeconfig.display()
            )
        })
    }

    /// A `kubectl` command pointed at this cluster.
    pub fn kubectl(&self) -> std::process::Command {
        let kubectl = self.binaries.path("kubectl");
        let mut cmd = if kubectl.is_file() {
            std::process::Command::new(kubectl)
        } else {
            std::process::Command::new("kubectl")
        };
        cmd.env("KUBECONFIG", &self.kubeconfig);
        cmd
    }
}

/// A control plane of one test's own, for a test whose cluster-wide changes no other test may
/// see (another project's CRDs in place of Hangar's, webhook configurations that refuse writes).
/// Stopped, and its directory removed, when dropped; tied to the test process like the shared
/// private one, so a crashed test leaves no processes behind either.
#[derive(Debug)]
pub struct OwnCluster {
    cluster: TestCluster,
    dir: PathBuf,
}

impl OwnCluster {
    /// Starts one under `<temp>/hangar-test-cluster-<pid>-<name>`, with the configured
    /// Kubernetes binaries.
    pub async fn start(name: &str) -> Result<Self, String> {
        let binaries = Binaries::configured()
            .require()
            .map_err(|e| e.to_string())?;
        remove_abandoned_private_clusters();
        let dir =
            std::env::temp_dir().join(format!("{PRIVATE_DIR_PREFIX}{}-{name}", std::process::id()));
        let mut opts = StartOptions::new(&dir, binaries.clone());
        opts.tie_to_pid = Some(std::process::id());
        let plane = ControlPlane::start(opts).await.map_err(|e| e.to_string())?;
        Ok(Self {
            cluster: TestCluster {
                kubeconfig: plane.kubeconfig().to_owned(),
                binaries,
            },
            dir,
        })
    }

    /// The cluster, as tests use the shared one.
    pub fn cluster(&self) -> &TestCluster {
        &self.cluster
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = ControlPlane::stop(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Private control planes live in `<temp>/hangar-test-cluster-<pid of the test binary>` (and
/// [`OwnCluster`]s in `…-<pid>-<name>`).
const PRIVATE_DIR_PREFIX: &str = "hangar-test-cluster-";

/// Deletes the directories of private control planes whose test binary has exited.
///
/// Their processes stop with the binary (the watchdog), but a `static` is never dropped, so the
/// directory (etcd's data, about 70 MB) stays behind; without this sweep every `cargo test`
/// run outside `cargo xtask test` would leave one per test binary until the disk fills.
fn remove_abandoned_private_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PRIVATE_DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = Path::new("/proc").join(pid.to_string()).exists();
        if !alive {
            // Best effort: another test binary may be sweeping the same directory.
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn start_private() -> Result<TestCluster, String> {
    let binaries = Binaries::configured()
        .require()
        .map_err(|e| e.to_string())?;
    remove_abandoned_private_clusters();
    let dir = std::env::temp_dir().join(format!("{PRIVATE_DIR_PREFIX}{}", std::process::id()));
    let mut opts = StartOptions::new(&dir, binaries.clone());
    opts.tie_to_pid = Some(std::process::id());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let plane = runtime
        .block_on(ControlPlane::start(opts))
        .map_err(|e| e.to_string())?;
    eprintln!(
        "hangar-testkit: private control plane ready in {:.1}s at {}",
        plane.state().ready_after_secs,
        plane.state().server
    );
    Ok(TestCluster {
        kubeconfig: plane.kubeconfig().to_owned(),
        binaries,
    })
}
