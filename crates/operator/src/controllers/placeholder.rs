//! The registration-only runner of an owner scaled to zero (`--registration-only-runners`):
//! a RunnerDeployment, a RunnerSet, or a RunnerReplicaSet no deployment owns (a deployment's
//! sets are covered by the deployment). Drives [`hangar_core::placeholder::step`].
//!
//! The placeholder is a JIT registration that no pod ever uses: GitHub lists it `offline` with
//! the owner's labels, which is enough for GitHub versions that fail jobs without a matching
//! runner to queue them instead. Its runner ID is remembered in the annotation [`ID_ANNOTATION`]
//! of the owner. The finalizer [`FINALIZER`] is added before the placeholder is registered and
//! removed after it is deleted from GitHub, so deleting the owner deletes the placeholder first
//! even when its ID was never recorded (the owner changed under the conditional write, or the
//! controller stopped in between) or a later registration replaced the recorded one: every
//! removal also looks the runner up by its name ([`placeholder_name`]).

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
    let claimed = owner.finalizers().iter().any(|f| f == FINALIZER);
    let next = step(Observed {
        enabled: ctx.settings.registration_only_runners,
        replicas: u32::try_from(replicas.max(0)).unwrap_or(0),
        registered: u32::try_from(registered.max(0)).unwrap_or(0),
        placeholder: remembered,
        claimed,
        deleting: owner.meta().deletion_timestamp.is_some(),
    });
    let mut others: Vec<String> = owner
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    let claim = |mut finalizers: Vec<String>| {
        finalizers.push(FINALIZER.to_owned());
        finalizers
    };
    match next {
        Step::Keep => return Ok(()),
        // No GitHub call: the claim is written first, so a registration never exists unclaimed.
        Step::Claim => {
            let id = remembered.map(|id| id.to_string());
            return record(owner, ctx, id, &claim(others)).await;
        }
        Step::Register | Step::Remove(_) | Step::RemoveByName => {}
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
    let gh_scope = github_scope(&scope);
    let name = placeholder_name(owner);
    let remove = |id| {
        let (github, gh_scope, scope) = (&github, &gh_scope, &scope);
        async move {
            match github.delete_runner(gh_scope, id).await {
                Ok(()) | Err(GitHubError::NotFound { .. }) => Ok(()),
                Err(e) => Err(github_err("delete registration-only runner", scope)(e)),
            }
        }
    };
    let id = match next {
        Step::Register => {
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
            others = claim(others);
            Some(id.to_string())
        }
        Step::Remove(_) | Step::RemoveByName => {
            if let Step::Remove(id) = next {
                remove(hangar_github::RunnerId(id)).await?;
                info!(owner = %object_name(owner), id, "removed registration-only runner");
            }
            // By name as well: a reconcile that read the owner before its ID was recorded
            // registers again, replacing the recorded runner with one whose ID its own write
            // (conditional on the stale copy) cannot record.
            let found = github
                .find_runner(&gh_scope, &name)
                .await
                .map_err(github_err("find registration-only runner", &scope))?;
            if let Some(runner) = found {
                remove(runner.id).await?;
                info!(owner = %object_name(owner), runner = name, id = runner.id.0, "removed unrecorded registration-only runner");
            }
            None
        }
        Step::Keep | Step::Claim => unreachable!("handled above"),
    };
    record(owner, ctx, id, &others).await
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
