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

#[test]
fn jit_runners_get_the_labels_config_sh_would_add() {
    let custom = vec!["gpu".to_owned(), "LINUX".to_owned()];
    assert_eq!(
        jit_runner_labels(&custom, None),
        ["gpu", "LINUX", "self-hosted", "X64"]
    );
    assert_eq!(
        jit_runner_labels(&[], Some("arm64")),
        ["self-hosted", "Linux", "ARM64"]
    );
    assert_eq!(
        jit_runner_labels(&[], Some("arm")),
        ["self-hosted", "Linux", "ARM"]
    );
    assert_eq!(
        jit_runner_labels(&["Self-Hosted".to_owned()], Some("amd64")),
        ["Self-Hosted", "Linux", "X64"]
    );
}
