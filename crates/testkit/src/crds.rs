//! Installing Hangar's CRDs into a test cluster.
//!
//! CRDs are applied with server-side apply (they are too large for client-side apply's
//! last-applied annotation, as ARC users learnt) and the call returns once each is
//! `Established`, so a test can create custom resources right away. Installation runs once per
//! test binary.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tokio::sync::OnceCell;

static INSTALLED: OnceCell<()> = OnceCell::const_new();

/// Field manager used for CRD installation.
pub const FIELD_MANAGER: &str = "hangar-testkit";

/// Applies every Hangar CRD (once per process) and waits until all are established.
pub async fn install(client: &Client) {
    INSTALLED
        .get_or_init(|| async {
            apply_and_wait(client, &hangar_api::crds())
                .await
                .unwrap_or_else(|e| panic!("failed to install Hangar CRDs: {e}"))
        })
        .await;
}

/// Applies `crds` and waits up to 60 s for each to be `Established`.
pub async fn apply_and_wait(
    client: &Client,
    crds: &[CustomResourceDefinition],
) -> Result<(), String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(crd))
            .await
            .map_err(|e| format!("apply CRD {name}: {e}"))?;
    }
    let until = Instant::now() + Duration::from_secs(60);
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        loop {
            let current = api
                .get(&name)
                .await
                .map_err(|e| format!("get CRD {name}: {e}"))?;
            let established = current
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            if Instant::now() > until {
                return Err(format!("CRD {name} not established after 60s"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}
