//! Choosing a container's program: annotation, then rule table, then default.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::builtin::Scripted;
use super::runner::{self, RunnerProgram};
use super::spec::{BUILTINS, ProgramSpec, SpecError, build_builtin};
use super::{ContainerKind, ContainerProgram};
use crate::annotations::program_key;

/// Builds a program from a spec's arguments (registered under the spec's name).
pub type ProgramFactory =
    dyn Fn(&ProgramSpec) -> Result<Arc<dyn ContainerProgram>, SpecError> + Send + Sync;

/// Which containers a [`ProgramRule`] applies to; every field that is set must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerSelector {
    /// The container's name.
    pub container: Option<String>,
    /// A substring of the container's image.
    pub image_contains: Option<String>,
    /// Labels the pod must carry.
    pub pod_labels: BTreeMap<String, String>,
    /// The container list it comes from.
    pub kind: Option<ContainerKind>,
}

impl ContainerSelector {
    /// Containers named `name`.
    pub fn container(name: impl Into<String>) -> Self {
        Self {
            container: Some(name.into()),
            ..Self::default()
        }
    }

    /// Containers whose image contains `text`.
    pub fn image(text: impl Into<String>) -> Self {
        Self {
            image_contains: Some(text.into()),
            ..Self::default()
        }
    }

    /// Also requires the pod label `key=value`.
    pub fn with_pod_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.pod_labels.insert(key.into(), value.into());
        self
    }

    /// Whether the selector matches `container` of `pod`.
    pub fn matches(&self, pod: &Pod, container: &Container, kind: ContainerKind) -> bool {
        let labels = pod.metadata.labels.as_ref();
        self.container.as_ref().is_none_or(|n| *n == container.name)
            && self.kind.is_none_or(|k| k == kind)
            && self.image_contains.as_ref().is_none_or(|text| {
                container
                    .image
                    .as_deref()
                    .is_some_and(|image| image.contains(text.as_str()))
            })
            && self
                .pod_labels
                .iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
    }
}

/// A row of the rule table: containers matching `selector` run `program`.
#[derive(Clone, Debug)]
pub struct ProgramRule {
    /// Which containers.
    pub selector: ContainerSelector,
    /// What they run.
    pub program: Arc<dyn ContainerProgram>,
}

/// The program catalog and rule table of a simulator.
///
/// A container runs, in order of precedence:
/// 1. the program its pod's `program.nodesim.hangar.dev/<container>` annotation names, built by
///    the factory registered under the spec's name (or a built-in);
/// 2. the program of the first rule whose selector matches;
/// 3. the default program, [`Scripted::sleep`] unless replaced.
pub struct Programs {
    factories: BTreeMap<String, Arc<ProgramFactory>>,
    rules: RwLock<Vec<ProgramRule>>,
    default: Arc<dyn ContainerProgram>,
}

impl fmt::Debug for Programs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Programs")
            .field("factories", &self.factories.keys().collect::<Vec<_>>())
            .field("rules", &self.rules())
            .field("default", &self.default)
            .finish()
    }
}

impl Default for Programs {
    fn default() -> Self {
        Self::new()
    }
}

impl Programs {
    /// Built-ins only, no rules, `sleep` by default.
    pub fn new() -> Self {
        Self {
            factories: BTreeMap::new(),
            rules: RwLock::new(Vec::new()),
            default: Arc::new(Scripted::sleep()),
        }
    }

    /// Registers `factory` under `name`, so annotations can select `name(args...)`. A name can
    /// shadow a built-in.
    pub fn with_factory(
        mut self,
        name: impl Into<String>,
        factory: impl Fn(&ProgramSpec) -> Result<Arc<dyn ContainerProgram>, SpecError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.factories.insert(name.into(), Arc::new(factory));
        self
    }

    /// Appends a rule: containers matching `selector` run `program` (first match wins).
    pub fn with_rule(
        self,
        selector: ContainerSelector,
        program: impl ContainerProgram + 'static,
    ) -> Self {
        self.push_rule(ProgramRule {
            selector,
            program: Arc::new(program),
        });
        self
    }

    /// Makes `runner` the program of containers named `runner` (a rule appended after the
    /// existing ones) and registers the `runner` factory, so pods can pick a variant by
    /// annotation, e.g. `program.nodesim.hangar.dev/runner: runner(registration=never)`. Other
    /// containers, such as the `docker` sidecar, keep their programs.
    pub fn with_runner(self, program: RunnerProgram) -> Self {
        self.with_factory("runner", runner::factory(program.clone()))
            .with_rule(
                ContainerSelector::container(runner::RUNNER_CONTAINER),
                program,
            )
    }

    /// Replaces the default program.
    pub fn with_default(mut self, program: impl ContainerProgram + 'static) -> Self {
        self.default = Arc::new(program);
        self
    }

    /// Appends a rule at runtime; it applies to containers started from now on.
    pub fn push_rule(&self, rule: ProgramRule) {
        self.rules_mut().push(rule);
    }

    /// Inserts a rule before all others at runtime (to inject a fault into matching pods).
    pub fn push_rule_first(&self, rule: ProgramRule) {
        self.rules_mut().insert(0, rule);
    }

    /// A snapshot of the rule table.
    pub fn rules(&self) -> Vec<ProgramRule> {
        match self.rules.read() {
            Ok(rules) => rules.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn rules_mut(&self) -> std::sync::RwLockWriteGuard<'_, Vec<ProgramRule>> {
        self.rules.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Builds the program `spec` names: a registered factory, else a built-in.
    pub fn build(&self, spec: &ProgramSpec) -> Result<Arc<dyn ContainerProgram>, SpecError> {
        if let Some(factory) = self.factories.get(&spec.name) {
            return factory(spec);
        }
        build_builtin(spec).unwrap_or_else(|| Err(SpecError::Unknown(spec.name.clone())))
    }

    /// Names of every program an annotation can select.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = BUILTINS.iter().map(|s| (*s).to_owned()).collect();
        names.extend(self.factories.keys().cloned());
        names.sort();
        names.dedup();
        names
    }

    /// The program for `container` of `pod` (see the type's docs for the precedence).
    pub fn select(
        &self,
        pod: &Pod,
        container: &Container,
        kind: ContainerKind,
    ) -> Result<Arc<dyn ContainerProgram>, SpecError> {
        let annotation = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(&program_key(&container.name)));
        if let Some(text) = annotation {
            return self.build(&text.parse()?);
        }
        let rules = self.rules.read().unwrap_or_else(|p| p.into_inner());
        let program = rules
            .iter()
            .find(|rule| rule.selector.matches(pod, container, kind))
            .map_or(&self.default, |rule| &rule.program);
        Ok(program.clone())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::super::builtin::NeverStarts;
    use super::*;

    fn pod(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Pod {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        Pod {
            metadata: ObjectMeta {
                annotations: map(annotations),
                labels: map(labels),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec::default()),
            ..Pod::default()
        }
    }

    fn container(name: &str, image: &str) -> Container {
        Container {
            name: name.to_owned(),
            image: Some(image.to_owned()),
            ..Container::default()
        }
    }

    fn chosen(programs: &Programs, pod: &Pod, c: &Container) -> String {
        format!(
            "{:?}",
            programs.select(pod, c, ContainerKind::Regular).unwrap()
        )
    }

    #[test]
    fn annotation_beats_rules_and_rules_beat_the_default() {
        let programs = Programs::new()
            .with_rule(ContainerSelector::image("docker:dind"), Scripted::sleep())
            .with_rule(
                ContainerSelector::container("runner").with_pod_label("fault", "pull"),
                NeverStarts::image_pull_error(),
            );
        let runner = container("runner", "summerwind/actions-runner");
        let sleep = format!("{:?}", Scripted::sleep());
        let pull = format!("{:?}", NeverStarts::image_pull_error());

        assert_eq!(chosen(&programs, &pod(&[], &[]), &runner), sleep);
        assert_eq!(
            chosen(&programs, &pod(&[], &[("fault", "pull")]), &runner),
            pull
        );
        let annotated = pod(
            &[("program.nodesim.hangar.dev/runner", "exit(0, 1s)")],
            &[("fault", "pull")],
        );
        assert_eq!(
            chosen(&programs, &annotated, &runner),
            format!(
                "{:?}",
                Scripted::exit_after(0, std::time::Duration::from_secs(1))
            )
        );
    }

    #[test]
    fn runtime_rules_can_take_precedence() {
        let programs = Programs::new().with_rule(ContainerSelector::default(), Scripted::sleep());
        programs.push_rule_first(ProgramRule {
            selector: ContainerSelector::container("runner"),
            program: Arc::new(NeverStarts::stuck_creating()),
        });
        let got = chosen(&programs, &pod(&[], &[]), &container("runner", "x"));
        assert_eq!(got, format!("{:?}", NeverStarts::stuck_creating()));
    }

    #[test]
    fn registered_factories_serve_annotations() {
        let programs = Programs::new().with_factory("runner", |spec| {
            spec.expect(0, &["ephemeral"])?;
            Ok(Arc::new(Scripted::exit_after(0, std::time::Duration::ZERO)))
        });
        let p = pod(
            &[("program.nodesim.hangar.dev/main", "runner(ephemeral=true)")],
            &[],
        );
        assert!(
            programs
                .select(&p, &container("main", "x"), ContainerKind::Regular)
                .is_ok()
        );
        assert!(programs.names().contains(&"runner".to_owned()));
        let bad = pod(&[("program.nodesim.hangar.dev/main", "nonesuch")], &[]);
        assert_eq!(
            programs
                .select(&bad, &container("main", "x"), ContainerKind::Regular)
                .unwrap_err(),
            SpecError::Unknown("nonesuch".to_owned())
        );
    }
}
