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

/// The labels of a just-in-time runner. `config.sh` adds `self-hosted`, the OS and the
/// architecture to the labels it registers; a JIT configuration carries exactly the labels it
/// was generated with, so Hangar must add them itself or jobs asking for `self-hosted` (all of
/// them) would never be routed to the runner. `node_arch` is the pod's `kubernetes.io/arch`
/// node selector (`amd64` when unset, as on most clusters). Duplicates (ignoring case) are
/// dropped; the user's spelling of a label wins.
pub fn jit_runner_labels(custom: &[String], node_arch: Option<&str>) -> Vec<String> {
    let arch = match node_arch {
        Some("arm64") => "ARM64",
        Some("arm") => "ARM",
        _ => "X64",
    };
    let mut labels: Vec<String> = Vec::with_capacity(custom.len() + 3);
    for label in custom
        .iter()
        .map(String::as_str)
        .chain([SELF_HOSTED, "Linux", arch])
    {
        if !labels.iter().any(|have| label_eq(have, label)) {
            labels.push(label.to_owned());
        }
    }
    labels
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
