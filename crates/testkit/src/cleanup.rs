//! Clean-up that runs from `Drop`: deleting what a test made on the shared control plane,
//! also when the test panics.
//!
//! `Drop` may run inside the test's runtime (which must not be blocked on) or after it has
//! shut down, so the work runs on a runtime of its own, on a thread of its own, and `Drop`
//! waits for it. Best effort: a failure is reported, never raised.

use std::future::Future;
use std::path::{Path, PathBuf};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Api;
use kube::api::DeleteParams;

use crate::control_plane::admin_client;

/// Runs `work` with an admin client for `kubeconfig` on a runtime and thread of its own and
/// waits for it; `None` when the runtime, the client or `work` failed.
pub fn with_admin_client<T, F, Fut>(kubeconfig: &Path, work: F) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce(kube::Client) -> Fut + Send + 'static,
    Fut: Future<Output = Option<T>>,
{
    let kubeconfig: PathBuf = kubeconfig.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        runtime.block_on(async move {
            let client = admin_client(&kubeconfig).await.ok()?;
            work(client).await
        })
    })
    .join()
    .ok()
    .flatten()
}

/// Deletes a test's admission webhook configurations (cluster-scoped: left behind, they would
/// send every other test's pods to a server that is gone). Whether the apiserver was reached.
pub fn delete_webhook_configurations(kubeconfig: &Path, mutating: &str, validating: &str) -> bool {
    let (m, v) = (mutating.to_owned(), validating.to_owned());
    let reached = with_admin_client(kubeconfig, |client| async move {
        let dp = DeleteParams::default();
        let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
            .delete(&m, &dp)
            .await;
        let _ = Api::<ValidatingWebhookConfiguration>::all(client)
            .delete(&v, &dp)
            .await;
        Some(())
    });
    if reached.is_none() {
        eprintln!("could not delete webhook configurations {mutating}");
    }
    reached.is_some()
}
