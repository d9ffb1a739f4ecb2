//! The registration-only runner of a RunnerDeployment scaled to zero
//! (`--registration-only-runners`), driving [`hangar_core::placeholder::step`].
//!
//! The placeholder is a JIT registration that no pod ever uses: GitHub lists it `offline` with
//! the deployment's labels, which is enough for GitHub versions that fail jobs without a
//! matching runner to queue them instead. Its runner ID is remembered in the annotation
//! [`ID_ANNOTATION`] of the deployment, and the finalizer [`FINALIZER`] is held while it exists,
//! so deleting the deployment deletes the placeholder from GitHub first. Both are written in one
//! merge patch conditional on the `resourceVersion` read; if that write is lost, the next
//! registration finds the runner by its name ([`placeholder_name`]) and replaces it.

use hangar_api::{RunnerDeployment, RunnerReplicaSet};
use hangar_core::RunnerScope;
use hangar_core::placeholder::{Observed, Step, step};
use hangar_github::GitHubError;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::info;

use super::{github_scope, object_name, registration};
use crate::context::Context;
use crate::error::{Error, github_err, kube_err};

/// Annotation on a RunnerDeployment: the GitHub runner ID of its placeholder.
pub const ID_ANNOTATION: &str = "hangar.dev/registration-only-runner-id";

/// Finalizer a RunnerDeployment carries while its placeholder is registered.
pub const FINALIZER: &str = "hangar.dev/registration-only-runner";

/// The placeholder's runner name: the deployment's name, recognisable in GitHub's runner list.
pub fn placeholder_name(rd: &RunnerDeployment) -> String {
    hangar_runtime::registration::names::placeholder_name(&rd.name_any())
}

/// Registers or removes `rd`'s placeholder as [`step`] decides. `desired` is the
/// deployment's newest RunnerReplicaSet (labels and node selector as its runners get them);
/// `registered` counts its runners registered and ready.
pub async fn sync(
    rd: &RunnerDeployment,
    desired: &RunnerReplicaSet,
    registered: i32,
    ctx: &Context,
) -> Result<(), Error> {
    let remembered = rd
        .annotations()
        .get(ID_ANNOTATION)
        .and_then(|id| id.parse::<u64>().ok());
    let next = if ctx.settings.registration_only_runners {
        step(Observed {
            replicas: u32::try_from(rd.spec.replicas.unwrap_or(1).max(0)).unwrap_or(0),
            registered: u32::try_from(registered.max(0)).unwrap_or(0),
            placeholder: remembered,
            deleting: rd.metadata.deletion_timestamp.is_some(),
        })
    } else {
        // Switched off: a placeholder left from before goes.
        remembered.map_or(Step::Keep, Step::Remove)
    };
    let mut finalizers: Vec<String> = rd
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if next == Step::Keep {
        // Our finalizer without a remembered runner (its annotation was removed by hand):
        // nothing is left to remove, let the deployment go.
        if remembered.is_none() && finalizers.len() < rd.finalizers().len() {
            record(rd, ctx, None, &finalizers).await?;
        }
        return Ok(());
    }

    let config = &desired.spec.template.spec.config;
    let scope = RunnerScope::from_fields(
        config.enterprise.as_deref(),
        config.organization.as_deref(),
        config.repository.as_deref(),
    )
    .map_err(|e| Error::InvalidSpec {
        object: object_name(rd),
        reason: e.to_string(),
    })?;
    let ns = rd.namespace().unwrap_or_default();
    let github = ctx
        .github_for(&ns, config.github_api_credentials_from.as_ref())
        .await?;
    let id = match next {
        Step::Register => {
            let name = placeholder_name(rd);
            let registration = registration::register(
                github.as_ref(),
                &scope,
                &name,
                config.labels.as_deref(),
                desired.spec.template.spec.pod.node_selector.as_ref(),
                true,
            )
            .await?;
            let id = registration.runner_id.unwrap_or_default();
            info!(deployment = %object_name(rd), runner = name, id, "registered registration-only runner");
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
            info!(deployment = %object_name(rd), id, "removed registration-only runner");
            None
        }
        Step::Keep => return Ok(()),
    };
    record(rd, ctx, id, &finalizers).await
}

/// Writes the remembered runner ID (`None` removes it) and the finalizers in one merge patch,
/// conditional on the `resourceVersion` read.
async fn record(
    rd: &RunnerDeployment,
    ctx: &Context,
    id: Option<String>,
    finalizers: &[String],
) -> Result<(), Error> {
    let patch = json!({ "metadata": {
        "resourceVersion": rd.resource_version(),
        "annotations": { ID_ANNOTATION: id },
        "finalizers": finalizers,
    }});
    Api::<RunnerDeployment>::namespaced(ctx.client.clone(), &rd.namespace().unwrap_or_default())
        .patch(
            &rd.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(drop)
        .map_err(kube_err(
            "record registration-only runner of",
            object_name(rd),
        ))
}
