//! Whether a runner can take a job, judged by labels.
//!
//! A job lists the labels of its `runs-on`; a runner set declares its labels in the runner
//! template. The rule, shared by the webhook matcher and the
//! `TotalNumberOfQueuedAndInProgressWorkflowRuns` metric: every job label except `self-hosted`
//! must equal one of the runner labels, ignoring case (GitHub compares labels that way). Every
//! runner Hangar manages is self-hosted, so that label never disqualifies one.
//!
//! Only declared labels count: operating-system and architecture labels (`linux`, `x64`) that
//! GitHub adds to runners by itself must also be declared in the template to match, as in ARC.
//!
//! ARC compares labels case-sensitively in the metric and case-insensitively in the webhook
//! server; Hangar ignores case in both, so the two agree on which jobs a runner set serves.

/// The label every self-hosted runner has implicitly.
pub const SELF_HOSTED: &str = "self-hosted";

/// Label equality as GitHub applies it: ignoring case (full Unicode lower-casing).
pub fn label_eq(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
        || a.chars()
            .flat_map(char::to_lowercase)
            .eq(b.chars().flat_map(char::to_lowercase))
}

/// Whether runners with `runner_labels` can take a job with `job_labels`: each job label other
/// than `self-hosted` is one of the runner labels. A job whose only label is `self-hosted`
/// matches any runner.
pub fn job_labels_match<J, R>(job_labels: &[J], runner_labels: &[R]) -> bool
where
    J: AsRef<str>,
    R: AsRef<str>,
{
    job_labels
        .iter()
        .map(AsRef::as_ref)
        .filter(|label| !label_eq(label, SELF_HOSTED))
        .all(|label| runner_labels.iter().any(|r| label_eq(label, r.as_ref())))
}
