//! The reconcilers. The observations they share (what a pod says) are
//! `hangar_runtime::pod::observe`, re-exported here.
//!
//! Every reconciler is a driver: it *observes* (reflector stores, GitHub through the cached
//! client), asks a pure function in `hangar-core` to *decide*, *applies* the plan with
//! idempotent API calls, and writes *status*. Successful runs requeue after the sync period as a
//! safety net; nothing depends on seeing every event.
//!
//! Every controller runs in one skeleton, [`crate::reconciler`]: a `const SKELETON:
//! Reconciler<K>` names it and says how its failures differ (Runner explains them, the runner-pod
//! controller prefixes them, the HRA re-checks bad specs after the sync period), and its `run`
//! hands `SKELETON.reconcile(reconcile)` and `SKELETON.error_policy()` to `Controller::run`.
//! The skeleton gives each reconcile a span, its metrics and back-off, and each failure one log
//! line, a retry and, when a user must act, a Warning Event.
//!
//! - [`runner`]: Runner → registration Secret + pod; status mirrors the pod and registration.
//! - [`runner_pod`]: runner pods → GitHub runner ID, unregister-before-delete, finalizer.
//! - [`runner_replica_set`]: RunnerReplicaSet → Runners, through `owner_sync`.
//! - [`runner_deployment`]: RunnerDeployment → RunnerReplicaSets per template, surge rollout.
//! - [`runner_set`]: RunnerSet → one-replica StatefulSets per runner, through `owner_sync`.
//! - [`hra`]: HorizontalRunnerAutoscaler → the target's `replicas` (and `effectiveTime`).
//! - [`registration`]: the registration Secrets of [`runner`] and [`runner_set`].
//! - [`retirement`]: deleted owners hold a finalizer until their runners are retired.
//! - [`sets`]: the conditions and requeues of the two owner-sync controllers.
//! - [`fields`]: the `FieldsHonored` condition of fields Hangar does not act on.

pub mod fields;
pub mod hra;
pub mod placeholder;
pub mod registration;
pub mod retirement;
pub mod runner;
pub mod runner_deployment;
pub mod runner_pod;
pub mod runner_replica_set;
pub mod runner_set;
pub mod sets;

// What a pod says is read by admission and the sweep too, so it lives in the runtime; the
// controllers keep their `super::…` paths.
pub use hangar_runtime::pod::observe::{
    CREATE_CONTAINER_CONFIG_ERROR, annotation, github_scope, k8s_time, object_name, parse_time,
    pod_is_ephemeral, pod_phase, pod_scope, pod_uses_jit, pod_view, ready_since,
    registration_spent, rfc3339, runner_container_state, runner_exited_cleanly, runner_id,
    runner_observed, runner_run, runner_stopped, started_at,
};

pub use hangar_runtime::watch::wait_until_stored;
