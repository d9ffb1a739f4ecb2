//! The validation rules the CRD schemas carry, in one place.
//!
//! ARC checked these in an admission webhook or only at run time; Hangar puts them in the
//! schema (CEL `x-kubernetes-validations` and OpenAPI patterns), so the apiserver rejects a bad
//! manifest with one of the messages below and no webhook is needed. Each rule is attached to
//! the smallest object that holds every field it reads, which keeps its CEL cost small and
//! constant; the only list it is nested in (HRA `metrics`) has `maxItems: 2`.
//!
//! Counts have OpenAPI bounds rather than rules: every replica count, delay and adjustment is at
//! least 0, and so are the StatefulSet counts a RunnerSet passes on (Kubernetes would refuse the
//! StatefulSet only when the controller creates it) and the runner pod's grace period (which
//! Kubernetes would silently turn into 1 second, too short for a runner to unregister).
//!
//! The constants are public so that tests (here and against a real apiserver) can name the
//! exact rule and message they expect.

/// On RunnerSpec and RunnerSetSpec: exactly one of the three scope fields is set. Empty strings
/// need no special case: the scope patterns already reject them.
pub const RULE_EXACTLY_ONE_SCOPE: &str = "(has(self.enterprise) ? 1 : 0) + \
     (has(self.organization) ? 1 : 0) + (has(self.repository) ? 1 : 0) == 1";
/// Message of [`RULE_EXACTLY_ONE_SCOPE`].
pub const MESSAGE_EXACTLY_ONE_SCOPE: &str =
    "exactly one of enterprise, organization or repository must be set";

/// On RunnerSpec and RunnerSetSpec: kubernetes container mode needs a work volume claim
/// template.
pub const RULE_KUBERNETES_MODE_NEEDS_WORK_VOLUME: &str = "!has(self.containerMode) || \
     self.containerMode != 'kubernetes' || has(self.workVolumeClaimTemplate)";
/// Message of [`RULE_KUBERNETES_MODE_NEEDS_WORK_VOLUME`].
pub const MESSAGE_KUBERNETES_MODE_NEEDS_WORK_VOLUME: &str = "containerMode: kubernetes requires workVolumeClaimTemplate (the volume shared by the \
     runner and its job pods)";

/// Pattern of `enterprise` and `organization`: one name, no slash.
pub const NAME_PATTERN: &str = r"^[^/]+$";

/// Pattern of `repository`: owner/name.
pub const REPOSITORY_PATTERN: &str = r"^[^/]+/[^/]+$";
/// On `repository`: the same check as [`REPOSITORY_PATTERN`], with a readable message.
pub const RULE_REPOSITORY_FORMAT: &str = "self.matches('^[^/]+/[^/]+$')";
/// Message of [`RULE_REPOSITORY_FORMAT`].
pub const MESSAGE_REPOSITORY_FORMAT: &str =
    "repository must have the form owner/name, e.g. octo-org/octo-repo";

/// On HorizontalRunnerAutoscalerSpec: `maxReplicas` is not below `minReplicas`. Reported at
/// [`FIELD_MAX_NOT_BELOW_MIN`].
pub const RULE_MAX_NOT_BELOW_MIN: &str =
    "!has(self.minReplicas) || !has(self.maxReplicas) || self.maxReplicas >= self.minReplicas";
/// Message of [`RULE_MAX_NOT_BELOW_MIN`].
pub const MESSAGE_MAX_NOT_BELOW_MIN: &str =
    "maxReplicas must be greater than or equal to minReplicas";
/// Field the apiserver names when [`RULE_MAX_NOT_BELOW_MIN`] fails.
pub const FIELD_MAX_NOT_BELOW_MIN: &str = ".maxReplicas";

/// On HorizontalRunnerAutoscalerSpec: two metrics come as PercentageRunnersBusy, then
/// TotalNumberOfQueuedAndInProgressWorkflowRuns (the fallback used when the first suggests 0),
/// the only combination ARC's autoscaler accepts.
pub const RULE_METRIC_ORDER: &str = "!has(self.metrics) || size(self.metrics) < 2 || \
     (has(self.metrics[0].type) && self.metrics[0].type == 'PercentageRunnersBusy' && \
     has(self.metrics[1].type) && \
     self.metrics[1].type == 'TotalNumberOfQueuedAndInProgressWorkflowRuns')";
/// Message of [`RULE_METRIC_ORDER`].
pub const MESSAGE_METRIC_ORDER: &str = "with two metrics, the first must be \
     PercentageRunnersBusy and the second TotalNumberOfQueuedAndInProgressWorkflowRuns";

/// On an HRA metric: not both scaleUpFactor and scaleUpAdjustment. As in ARC, an empty factor
/// or a zero adjustment counts as unset.
pub const RULE_SCALE_UP_EXCLUSIVE: &str = "!(has(self.scaleUpFactor) && \
     self.scaleUpFactor != '' && has(self.scaleUpAdjustment) && self.scaleUpAdjustment != 0)";
/// Message of [`RULE_SCALE_UP_EXCLUSIVE`].
pub const MESSAGE_SCALE_UP_EXCLUSIVE: &str =
    "scaleUpFactor and scaleUpAdjustment are mutually exclusive: set only one of them";

/// On an HRA metric: not both scaleDownFactor and scaleDownAdjustment.
pub const RULE_SCALE_DOWN_EXCLUSIVE: &str = "!(has(self.scaleDownFactor) && \
     self.scaleDownFactor != '' && has(self.scaleDownAdjustment) && \
     self.scaleDownAdjustment != 0)";
/// Message of [`RULE_SCALE_DOWN_EXCLUSIVE`].
pub const MESSAGE_SCALE_DOWN_EXCLUSIVE: &str =
    "scaleDownFactor and scaleDownAdjustment are mutually exclusive: set only one of them";

/// Pattern of an HRA trigger `duration`, a Go duration as ARC parses it: "0" or decimal
/// numbers with units, e.g. "30s", "5m", "1h30m". Negative durations are rejected.
pub const DURATION_PATTERN: &str = r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$";

/// Pattern of the HRA thresholds and factors: a non-negative decimal number written as a
/// string, e.g. "0.75" or "2".
pub const DECIMAL_PATTERN: &str = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$";

/// Smallest `dockerMTU`: the minimum MTU of IPv4.
pub const MIN_DOCKER_MTU: i64 = 68;
/// Largest `dockerMTU`: the largest IP packet.
pub const MAX_DOCKER_MTU: i64 = 65535;

/// Every CEL rule with its message, for tests that check each one is present and exercised.
pub const RULES: &[(&str, &str)] = &[
    (RULE_EXACTLY_ONE_SCOPE, MESSAGE_EXACTLY_ONE_SCOPE),
    (
        RULE_KUBERNETES_MODE_NEEDS_WORK_VOLUME,
        MESSAGE_KUBERNETES_MODE_NEEDS_WORK_VOLUME,
    ),
    (RULE_REPOSITORY_FORMAT, MESSAGE_REPOSITORY_FORMAT),
    (RULE_MAX_NOT_BELOW_MIN, MESSAGE_MAX_NOT_BELOW_MIN),
    (RULE_METRIC_ORDER, MESSAGE_METRIC_ORDER),
    (RULE_SCALE_UP_EXCLUSIVE, MESSAGE_SCALE_UP_EXCLUSIVE),
    (RULE_SCALE_DOWN_EXCLUSIVE, MESSAGE_SCALE_DOWN_EXCLUSIVE),
];
