//! Label, annotation and finalizer keys of ARC's legacy mode.
//!
//! Hangar writes and reads exactly the keys actions-runner-controller uses, so objects created
//! by one can be adopted by the other and tooling that selects on them (dashboards, scripts,
//! cluster-autoscaler settings) keeps working. The keys are grouped by what they are attached
//! as; each doc says which objects carry it and who sets it.

/// Label keys.
pub mod label {
    /// Hash of a runner template. Set on RunnerReplicaSets, on the Runner template inside them
    /// and on RunnerSet StatefulSets; a changed hash is what triggers a rollout.
    pub const RUNNER_TEMPLATE_HASH: &str = "runner-template-hash";

    /// Name of the owning RunnerDeployment, on its RunnerReplicaSets and Runners. It is also
    /// the default selector of a RunnerDeployment.
    pub const RUNNER_DEPLOYMENT_NAME: &str = "runner-deployment-name";

    /// Name of the owning RunnerSet, on the runner pods it creates. It is also the default
    /// selector of a RunnerSet's pods.
    pub const RUNNERSET_NAME: &str = "runnerset-name";

    /// Hash of everything that shapes a runner pod (labels other than the template hash,
    /// annotations, spec, GitHub URL, registration token). A changed hash means the pod must be
    /// recreated.
    pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

    /// Marks a pod as a runner pod managed by the controller. The value is empty.
    pub const ACTIONS_RUNNER: &str = "actions-runner";

    /// On RunnerSet pods: selects them for the pod mutating webhook that injects the
    /// registration token. The value is [`INJECT_REGISTRATION_TOKEN_VALUE`].
    pub const INJECT_REGISTRATION_TOKEN: &str =
        "actions-runner-controller/inject-registration-token";

    /// The value of [`INJECT_REGISTRATION_TOKEN`].
    pub const INJECT_REGISTRATION_TOKEN_VALUE: &str = "true";

    /// On PersistentVolumeClaims created from a RunnerSet's `volumeClaimTemplates`: the
    /// StatefulSet they were created for. Used to recycle volumes once it is gone.
    pub const RUNNER_STATEFULSET_NAME: &str = "runner-statefulset-name";

    /// On PersistentVolumes whose claim is being recycled: the volume is to be released and made
    /// available to the next StatefulSet of the same RunnerSet. The value is the RunnerSet's
    /// name (ARC writes the StatefulSet's); the claim's namespace is in `spec.claimRef`.
    pub const PENDING_CLEANUP: &str = "pending-cleanup";

    /// In kubernetes container mode: on job pods and secrets created by a runner, the name of
    /// the runner pod. They are deleted together with it.
    pub const RUNNER_POD: &str = "runner-pod";
}

/// Annotation keys.
pub mod annotation {
    /// On each new Runner and StatefulSet: when the owner created it (RFC 3339). The newest value
    /// among an owner's children is its "last sync time", compared with `spec.effectiveTime`.
    pub const SYNC_TIME: &str = "sync-time";

    /// On a runner pod: the runner's numeric ID at GitHub, once it has registered.
    pub const RUNNER_ID: &str = "actions-runner/id";

    /// On a runner pod and its owner: the owner asks for the runner to be unregistered from
    /// GitHub before it is deleted (step 1 of graceful scale-down).
    pub const UNREGISTRATION_REQUEST_TIMESTAMP: &str =
        "actions-runner/unregistration-request-timestamp";

    /// On a runner pod: the pod controller has started unregistering the runner.
    pub const UNREGISTRATION_START_TIMESTAMP: &str =
        "actions-runner/unregistration-start-timestamp";

    /// On a runner pod and its owner: the runner is unregistered (or did not need to be); the
    /// owner may now be deleted.
    pub const UNREGISTRATION_COMPLETE_TIMESTAMP: &str =
        "actions-runner/unregistration-complete-timestamp";

    /// On a runner pod: GitHub refused to remove the runner because it is running a job. Such
    /// pods count as busy for the `PercentageRunnersBusy` metric.
    pub const UNREGISTRATION_FAILURE_MESSAGE: &str =
        "actions-runner/unregistration-failure-message";

    /// On a runner pod (Hangar's own): GitHub refused to remove the runner for lack of
    /// permission (403), and which permission the credential needs. The pod is kept and the
    /// removal retried; its Runner shows the message as `CredentialsValid=False`.
    pub const UNREGISTRATION_REFUSED: &str = "hangar.dev/unregistration-refused";

    /// On an ephemeral runner pod that was busy when asked to stop: when the controller started
    /// waiting for it to finish its job and exit by itself.
    pub const RUNNER_COMPLETION_WAIT_START_TIMESTAMP: &str =
        "actions-runner/runner-completion-wait-start-timestamp";

    /// On a runner pod: the name of the secret holding the GitHub API credentials used for it,
    /// so the pod controller uses the same credentials as the owner.
    pub const GITHUB_API_CREDS_SECRET: &str = "actions-runner/github-api-creds-secret";

    /// On a Runner, RunnerReplicaSet, RunnerDeployment or RunnerSet (Hangar's own): how long a
    /// deletion waits for busy runners to finish their jobs before it kills them, as a Go
    /// duration (`0s`, `10m`, `1h30m`). Overrides `--retirement-timeout` (default 1h); `0s`
    /// forces a deletion at once.
    pub const RETIREMENT_TIMEOUT: &str = "hangar.dev/retirement-timeout";

    /// On a RunnerSet's StatefulSet and its pod, in the fallback mode (no pod webhook; the pod
    /// restarts `Always`; Hangar's own): when Hangar took the registration credential back —
    /// emptied the StatefulSet's registration Secret — because the pod's runner container had
    /// started with it. A run the kubelet starts again cannot be created without it, so it
    /// cannot register a second runner and take a job in the finished pod.
    pub const REGISTRATION_SPENT: &str = "hangar.dev/registration-spent";

    /// On a RunnerSet pod: when the registration token injected into it expires.
    pub const TOKEN_EXPIRES_AT: &str = "actions-runner-controller/token-expires-at";
}

/// Finalizer names.
pub mod finalizer {
    /// On a Runner: held while it is deleted until its pod's runner is unregistered (or has
    /// finished), so deleting a Runner never kills a busy runner. ARC's own name for its Runner
    /// finalizer, so Runners created by ARC are retired by Hangar and the other way round.
    pub const RUNNER: &str = "runner.actions.summerwind.dev";

    /// On a RunnerReplicaSet, RunnerDeployment and RunnerSet (Hangar's own; ARC has none): held
    /// while it is deleted until its runners are retired through unregister-before-delete, or
    /// its retirement timeout ([`RETIREMENT_TIMEOUT`](super::annotation::RETIREMENT_TIMEOUT))
    /// has passed. One name for the three, as the promise is the same.
    pub const RETIRE_RUNNERS: &str = "hangar.dev/retire-runners";

    /// On a runner pod: the runner is unregistered gracefully even when the pod itself is
    /// deleted directly.
    pub const RUNNER_POD: &str = "actions.summerwind.dev/runner-pod";

    /// On a runner pod in kubernetes container mode: the pods and secrets labelled
    /// [`RUNNER_POD`](super::label::RUNNER_POD) with its name are deleted with it.
    pub const LINKED_RESOURCES: &str = "actions.summerwind.dev/linked-resources";
}
