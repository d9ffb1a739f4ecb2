//! The registration-only runner of an owner scaled to zero (`--registration-only-runners`):
//! a RunnerDeployment, a RunnerSet, or a RunnerReplicaSet no deployment owns (a deployment's
//! sets are covered by the deployment). Drives [`hangar_core::placeholder::step`].
//!
//! The placeholder is a JIT registration that no pod ever uses: GitHub lists it `offline` with
//! the owner's labels, which is enough for GitHub versions that fail jobs without a matching
//! runner to queue them instead. Its runner ID is remembered in the annotation [`ID_ANNOTATION`]
//! of the owner, and the finalizer [`FINALIZER`] is held while it exists, so deleting the owner
//! deletes the placeholder from GitHub first. Both are written in one merge patch conditional on
//! the `resourceVersion` read; if that write is lost, the next registration finds the runner by
//! its name ([`placeholder_name`]) and replaces it.

use std::collections::BTreeMap;

use hangar_api::RunnerConfig;
use hangar_core::RunnerScope;
use hangar_core::placeholder::{Observed, Step, step};
use hangar_github::GitHubError;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::info;

use super::{github_scope, object_name, registration};
use crate::context::Context;
use crate::error::{Error, github_err, kube_err};

/// Annotation on an owner: the GitHub runner ID of its placeholder.
pub const ID_ANNOTATION: &str = "hangar.dev/registration-only-runner-id";

/// Finalizer an owner carries while its placeholder is registered.
pub const FINALIZER: &str = "hangar.dev/registration-only-runner";

/// The placeholder's runner name: the owner's name, recognisable in GitHub's runner list.
pub fn placeholder_name(owner: &impl ResourceExt) -> String {
    hangar_runtime::registration::names::placeholder_name(&owner.name_any())
}

/// A namespaced kind that can own a placeholder (RunnerDeployment, RunnerSet,
/// RunnerReplicaSet): what patching its metadata needs.
pub trait Owner:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Owner for K where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// What the owner's runners register as: the placeholder registers the same way.
#[derive(Clone, Copy, Debug)]
pub struct Template<'a> {
    /// Scope, labels, group and credentials of the owner's runners.
    pub config: &'a RunnerConfig,
    /// Their node selector (it gives the architecture label).
    pub node_selector: Option<&'a BTreeMap<String, String>>,
}

/// Registers or removes `owner`'s placeholder as [`step`] decides. `replicas` is the owner's
/// `spec.replicas`; `template` its runners as they register (for a deployment, its newest
/// RunnerReplicaSet's, with the common labels); `registered` counts its runners registered and
/// ready.
pub async fn sync<K: Owner>(
    owner: &K,
    replicas: i32,
    template: Template<'_>,
    registered: i32,
    ctx: &Context,
) -> Result<(), Error> {
    let remembered = owner
        .annotations()
        .get(ID_ANNOTATION)
        .and_then(|id| id.parse::<u64>().ok());
    let next = if ctx.settings.registration_only_runners {
        step(Observed {
            replicas: u32::try_from(replicas.max(0)).unwrap_or(0),
            registered: u32::try_from(registered.max(0)).unwrap_or(0),
            placeholder: remembered,
            deleting: owner.meta().deletion_timestamp.is_some(),
        })
    } else {
        // Switched off: a placeholder left from before goes.
        remembered.map_or(Step::Keep, Step::Remove)
    };
    let mut finalizers: Vec<String> = owner
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if next == Step::Keep {
        // Our finalizer without a remembered runner (its annotation was removed by hand):
        // nothing is left to remove, let the deployment go.
        if remembered.is_none() && finalizers.len() < owner.finalizers().len() {
            record(owner, ctx, None, &finalizers).await?;
        }
        return Ok(());
    }

    let config = template.config;
    let scope = RunnerScope::from_fields(
        config.enterprise.as_deref(),
        config.organization.as_deref(),
        config.repository.as_deref(),
    )
    .map_err(|e| Error::InvalidSpec {
        object: object_name(owner),
        reason: e.to_string(),
    })?;
    let ns = owner.namespace().unwrap_or_default();
    let github = ctx
        .github_for(&ns, config.github_api_credentials_from.as_ref())
        .await?;
    let id = match next {
        Step::Register => {
            let name = placeholder_name(owner);
            let registration = registration::register(
                github.as_ref(),
                &scope,
                &name,
                config.labels.as_deref(),
                template.node_selector,
                true,
            )
            .await?;
            let id = registration.runner_id.unwrap_or_default();
            info!(owner = %object_name(owner), runner = name, id, "registered registration-only runner");
            finalizers.push(FINALIZER.to_owned());
            Some(id.to_string())
        }
        Step::Remove(id) => {
            match github
                .delete_runner(&github_scope(&scope), hangar_github::RunnerId(id))
                .await
            {
                Ok(()) | Err(GitHubError::NotFound { .. }) => {}
                Err(e) => return Err(github_err("delete registration-only runner", &scope)(e)),
            }
            info!(owner = %object_name(owner), id, "removed registration-only runner");
            None
        }
        Step::Keep => return Ok(()),
    };
    record(owner, ctx, id, &finalizers).await
}

/// Writes the remembered runner ID (`None` removes it) and the finalizers in one merge patch,
/// conditional on the `resourceVersion` read.
async fn record<K>(
    owner: &K,
    ctx: &Context,
    id: Option<String>,
    finalizers: &[String],
) -> Result<(), Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let patch = json!({ "metadata": {
        "resourceVersion": owner.resource_version(),
        "annotations": { ID_ANNOTATION: id },
        "finalizers": finalizers,
    }});
    Api::<K>::namespaced(ctx.client.clone(), &owner.namespace().unwrap_or_default())
        .patch(
            &owner.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(drop)
        .map_err(kube_err(
            "record registration-only runner of",
            object_name(owner),
        ))
}
