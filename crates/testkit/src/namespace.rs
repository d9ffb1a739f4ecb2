//! A namespace per test.
//!
//! [`TestNamespace::create`] makes a uniquely named namespace and waits for its `default`
//! ServiceAccount (created by kube-controller-manager; pod admission needs it). Dropping the value
//! deletes the namespace — also when the test panics — on a helper thread, because `Drop`
//! cannot await and the test's runtime may be shutting down.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

use crate::cluster::TestCluster;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A namespace that exists for the lifetime of this value.
#[derive(Debug)]
pub struct TestNamespace {
    name: String,
    kubeconfig: std::path::PathBuf,
}

impl TestNamespace {
    /// Creates `hangar-<prefix>-<pid>-<n>` in `cluster`.
    pub async fn create(cluster: &TestCluster, prefix: &str) -> Self {
        let client = cluster.client().await;
        let name = format!(
            "hangar-{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut ns = Namespace::default();
        ns.metadata.name = Some(name.clone());
        ns.metadata.labels = Some(
            [(
                "app.kubernetes.io/part-of".to_owned(),
                "hangar-tests".to_owned(),
            )]
            .into(),
        );
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("failed to create namespace {name}: {e}"));

        let accounts: Api<ServiceAccount> = Api::namespaced(client, &name);
        let until = Instant::now() + Duration::from_secs(30);
        while accounts.get_opt("default").await.ok().flatten().is_none() {
            assert!(
                Instant::now() < until,
                "namespace {name} got no default ServiceAccount in 30s (is kube-controller-manager running?)"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self {
            name,
            kubeconfig: cluster.kubeconfig().to_owned(),
        }
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A typed API in this namespace.
    pub fn api<K>(&self, client: Client) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(client, &self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::env::var_os("HANGAR_KEEP_NAMESPACES").is_some() {
            eprintln!("hangar-testkit: keeping namespace {}", self.name);
            return;
        }
        let name = self.name.clone();
        let deleted = crate::cleanup::with_admin_client(&self.kubeconfig, |client| async move {
            Api::<Namespace>::all(client)
                .delete(&name, &DeleteParams::background())
                .await
                .ok()
        });
        if deleted.is_none() {
            eprintln!("hangar-testkit: could not delete namespace {}", self.name);
        }
    }
}
