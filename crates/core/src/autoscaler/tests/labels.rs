//! The job-label rule.

use crate::autoscaler::labels::*;

#[test]
fn labels_compare_ignoring_case_including_non_ascii() {
    assert!(label_eq("Linux", "linux"));
    assert!(label_eq("GPU-A100", "gpu-a100"));
    assert!(label_eq("Étage", "étage"));
    assert!(!label_eq("linux", "linux2"));
}

#[test]
fn every_job_label_but_self_hosted_must_be_a_runner_label() {
    let runner = ["linux", "x64", "gpu"];
    #[rustfmt::skip]
    let table: &[(&str, &[&str], bool)] = &[
        ("subset matches",                  &["self-hosted", "linux", "gpu"], true),
        ("case is ignored",                 &["Self-Hosted", "LINUX"],        true),
        ("self-hosted alone matches",       &["self-hosted"],                 true),
        ("no labels match",                 &[],                              true),
        ("a missing label does not",        &["self-hosted", "windows"],      false),
        ("one of several missing does not", &["linux", "arm64"],              false),
    ];
    for (name, job, expected) in table {
        assert_eq!(job_labels_match(job, &runner), *expected, "{name}");
    }
}

#[test]
fn runners_without_labels_take_only_self_hosted_jobs() {
    let none: [&str; 0] = [];
    assert!(job_labels_match(&["self-hosted"], &none));
    assert!(!job_labels_match(&["self-hosted", "linux"], &none));
}
