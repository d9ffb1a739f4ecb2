//! Fields an ARC manifest may set that Hangar stores but does not act on, and what to use
//! instead: so that nothing a user writes is silently ignored.
//!
//! Contract: pure functions of a spec, no IO. Each kind's function lists the ignored fields
//! that are *set* on the object, as YAML paths with the alternative. The controllers turn a
//! non-empty list into a False `FieldsHonored` condition and one Warning event, and the
//! validating webhook into admission warnings at apply time. The README's "Fields Hangar does
//! not act on" table lists the same fields; a test keeps the two in step.

use crate::runner::{RunnerSpec, RunnerTemplate};
use crate::runner_config::RunnerConfig;
use crate::runner_deployment::RunnerDeploymentSpec;
use crate::runner_replica_set::RunnerReplicaSetSpec;
use crate::runner_set::RunnerSetSpec;

/// A field that is set but has no effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IgnoredField {
    /// Where it is, as written in YAML (`spec.minReplicas`).
    pub path: String,
    /// What to use instead.
    pub instead: &'static str,
}

impl std::fmt::Display for IgnoredField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is ignored: {}", self.path, self.instead)
    }
}

/// What each ignored field's alternative is; the README's table says the same.
pub mod instead {
    /// RunnerDeployment `spec.minReplicas`.
    pub const MIN_REPLICAS: &str =
        "set minReplicas on a HorizontalRunnerAutoscaler that targets this RunnerDeployment";
    /// RunnerDeployment `spec.maxReplicas`.
    pub const MAX_REPLICAS: &str =
        "set maxReplicas on a HorizontalRunnerAutoscaler that targets this RunnerDeployment";
    /// RunnerDeployment `spec.autoscaling`.
    pub const AUTOSCALING: &str = "use a HorizontalRunnerAutoscaler's metrics (e.g. TotalNumberOfQueuedAndInProgressWorkflowRuns)";
    /// `podTemplateName`.
    pub const POD_TEMPLATE_NAME: &str = "set ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE in env to a \
         file mounted from a ConfigMap (volumes and volumeMounts)";
    /// A runner template's `metadata.finalizers`.
    pub const TEMPLATE_FINALIZERS: &str =
        "Hangar manages the finalizers of Runners and their pods itself; remove them";
}

/// Ignored fields of a RunnerDeployment.
pub fn runner_deployment(spec: &RunnerDeploymentSpec) -> Vec<IgnoredField> {
    let mut out = Vec::new();
    let mut add = |set: bool, path: &str, instead: &'static str| {
        if set {
            out.push(IgnoredField {
                path: path.to_owned(),
                instead,
            });
        }
    };
    add(
        spec.min_replicas.is_some(),
        "spec.minReplicas",
        instead::MIN_REPLICAS,
    );
    add(
        spec.max_replicas.is_some(),
        "spec.maxReplicas",
        instead::MAX_REPLICAS,
    );
    add(
        spec.autoscaling.is_some(),
        "spec.autoscaling",
        instead::AUTOSCALING,
    );
    out.extend(template(&spec.template));
    out
}

/// Ignored fields of a RunnerReplicaSet.
pub fn runner_replica_set(spec: &RunnerReplicaSetSpec) -> Vec<IgnoredField> {
    template(&spec.template)
}

/// Ignored fields of a RunnerSet.
pub fn runner_set(spec: &RunnerSetSpec) -> Vec<IgnoredField> {
    config("spec", &spec.config)
}

/// Ignored fields of a Runner.
pub fn runner(spec: &RunnerSpec) -> Vec<IgnoredField> {
    config("spec", &spec.config)
}

/// One line for a condition, an event or a log: every field and its alternative.
pub fn summary(fields: &[IgnoredField]) -> String {
    let lines: Vec<String> = fields.iter().map(ToString::to_string).collect();
    lines.join("; ")
}

fn template(t: &RunnerTemplate) -> Vec<IgnoredField> {
    let mut out = Vec::new();
    if t.metadata
        .as_ref()
        .and_then(|m| m.finalizers.as_ref())
        .is_some_and(|f| !f.is_empty())
    {
        out.push(IgnoredField {
            path: "spec.template.metadata.finalizers".into(),
            instead: instead::TEMPLATE_FINALIZERS,
        });
    }
    out.extend(config("spec.template.spec", &t.spec.config));
    out
}

fn config(at: &str, c: &RunnerConfig) -> Vec<IgnoredField> {
    c.pod_template_name
        .iter()
        .map(|_| IgnoredField {
            path: format!("{at}.podTemplateName"),
            instead: instead::POD_TEMPLATE_NAME,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_fields_that_are_set_are_listed() {
        let rd: RunnerDeploymentSpec = serde_json::from_value(json!({
            "minReplicas": 1,
            "autoscaling": {"metrics": [{"type": "TotalNumberOfQueuedAndInProgressWorkflowRuns"}]},
            "template": {
                "metadata": {"finalizers": ["example.com/keep"]},
                "spec": {"repository": "octo/app", "podTemplateName": "job"}
            }
        }))
        .unwrap();
        let paths: Vec<String> = runner_deployment(&rd).into_iter().map(|f| f.path).collect();
        assert_eq!(
            paths,
            [
                "spec.minReplicas",
                "spec.autoscaling",
                "spec.template.metadata.finalizers",
                "spec.template.spec.podTemplateName"
            ]
        );
        let plain: RunnerDeploymentSpec =
            serde_json::from_value(json!({"template": {"spec": {"repository": "octo/app"}}}))
                .unwrap();
        assert!(runner_deployment(&plain).is_empty());
        let set: RunnerSetSpec = serde_json::from_value(json!({
            "repository": "octo/app", "podTemplateName": "job",
            "template": {"spec": {"containers": []}}
        }))
        .unwrap();
        assert_eq!(runner_set(&set)[0].path, "spec.podTemplateName");
        assert!(summary(&runner_set(&set)).contains("ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE"));
    }

    #[test]
    fn the_readme_table_lists_every_ignored_field() {
        let readme = include_str!("../../../README.md");
        for (path, instead) in [
            ("spec.minReplicas", instead::MIN_REPLICAS),
            ("spec.maxReplicas", instead::MAX_REPLICAS),
            ("spec.autoscaling", instead::AUTOSCALING),
            ("podTemplateName", instead::POD_TEMPLATE_NAME),
            (
                "spec.template.metadata.finalizers",
                instead::TEMPLATE_FINALIZERS,
            ),
        ] {
            let row = readme
                .lines()
                .find(|l| l.starts_with('|') && l.contains(&format!("`{path}`")))
                .unwrap_or_else(|| panic!("README has no table row for `{path}`"));
            assert!(
                row.contains(instead),
                "README's row for `{path}` says:\n{row}"
            );
        }
    }
}
