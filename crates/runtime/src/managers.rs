//! The field managers Hangar writes with, one per writer.
//!
//! Contract: one name per controller or server, never shared, so server-side apply and
//! `kubectl get --show-managed-fields` tell who owns which field; a writer that acts for another
//! (the Runner controller's shared token Secrets) names that other's manager on purpose. Kept
//! in one place so writers in different crates need not import each other to share a name.

/// The Runner controller (pods, registration Secrets, shared token Secrets).
pub const RUNNER: &str = "hangar-runner";
/// The RunnerSet controller (StatefulSets and their registration Secrets).
pub const RUNNER_SET: &str = "hangar-runnerset";
/// The RunnerDeployment controller (its RunnerReplicaSets).
pub const RUNNER_DEPLOYMENT: &str = "hangar-runnerdeployment";
/// The HorizontalRunnerAutoscaler controller.
pub const HRA: &str = "hangar-hra";
/// The GitHub webhook server's reservation writes.
pub const WEBHOOK: &str = "hangar-webhook";
/// The pull recovery's reservation writes.
pub const PULL: &str = "hangar-pull";
/// The pod admission webhook's registration Secrets.
pub const ADMISSION: &str = "hangar-admission";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_writer_has_a_name_of_its_own() {
        let all = [
            RUNNER,
            RUNNER_SET,
            RUNNER_DEPLOYMENT,
            HRA,
            WEBHOOK,
            PULL,
            ADMISSION,
        ];
        let distinct: std::collections::BTreeSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
        assert!(all.iter().all(|m| m.starts_with("hangar-")));
    }
}
