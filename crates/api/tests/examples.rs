//! The manifests in `examples/` and `examples/invalid/`, checked without a cluster.
//!
//! - Every valid example deserializes into Hangar's types without losing a field (a misspelt or
//!   unknown field would be silently dropped by serde, so the round trip is compared with the
//!   original), has no namespace, and passes the client-side stand-in for the apiserver's
//!   validation, including strict unknown-field checks as `kubectl apply` performs them.
//! - Every invalid example holds one object, starts with `# expect: <text>`, and is rejected by
//!   the stand-in with a message containing that text. Every CEL rule is exercised by at least
//!   one invalid example.
//!
//! The same files are applied to a real apiserver by the operator's integration tests.

mod support;

use hangar_api::validation::RULES;
use hangar_api::{
    HorizontalRunnerAutoscaler, Runner, RunnerDeployment, RunnerReplicaSet, RunnerSet,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use support::{Validator, example_files};

/// Deserializes `object` as `T` and serializes it back.
fn round_trip<T: DeserializeOwned + Serialize>(object: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

/// Round-trips `object` through the Rust type of its kind.
fn typed_round_trip(object: &Value) -> Result<Value, String> {
    match object["kind"].as_str().unwrap_or_default() {
        "Runner" => round_trip::<Runner>(object),
        "RunnerReplicaSet" => round_trip::<RunnerReplicaSet>(object),
        "RunnerDeployment" => round_trip::<RunnerDeployment>(object),
        "RunnerSet" => round_trip::<RunnerSet>(object),
        "HorizontalRunnerAutoscaler" => round_trip::<HorizontalRunnerAutoscaler>(object),
        other => Err(format!("unexpected kind {other:?}")),
    }
}

/// Paths present (and not null) in `original` but missing from `copy`.
fn lost_paths(original: &Value, copy: &Value, path: &str, lost: &mut Vec<String>) {
    match (original, copy) {
        (Value::Object(fields), Value::Object(copied)) => {
            for (name, value) in fields {
                let here = format!("{path}.{name}");
                match copied.get(name) {
                    _ if value.is_null() => {}
                    Some(copied_value) => lost_paths(value, copied_value, &here, lost),
                    None => lost.push(here),
                }
            }
        }
        (Value::Array(items), Value::Array(copied)) => {
            if items.len() != copied.len() {
                lost.push(format!(
                    "{path} (length {} became {})",
                    items.len(),
                    copied.len()
                ));
            }
            for (i, (item, copied_item)) in items.iter().zip(copied).enumerate() {
                lost_paths(item, copied_item, &format!("{path}[{i}]"), lost);
            }
        }
        _ => {}
    }
}

#[test]
fn every_example_deserializes_into_the_types_without_losing_fields() {
    let files = example_files("examples");
    assert!(
        files.len() >= 10,
        "expected the examples in examples/, found {}",
        files.len()
    );
    let mut failures = vec![];
    for file in &files {
        assert!(!file.documents.is_empty(), "{} holds no object", file.name);
        for object in &file.documents {
            let name = format!(
                "{} ({} {})",
                file.name, object["kind"], object["metadata"]["name"]
            );
            match typed_round_trip(object) {
                Err(e) => failures.push(format!("{name}: does not deserialize: {e}")),
                Ok(copy) => {
                    let mut lost = vec![];
                    lost_paths(object, &copy, "", &mut lost);
                    if !lost.is_empty() {
                        failures.push(format!("{name}: fields lost in the round trip: {lost:?}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_example_is_admitted_by_the_schema() {
    let validator = Validator::default();
    let mut failures = vec![];
    for file in example_files("examples") {
        assert!(
            file.expectation().is_none(),
            "{} is valid but has an # expect: line",
            file.name
        );
        for object in &file.documents {
            if object["metadata"].get("namespace").is_some() {
                failures.push(format!(
                    "{}: examples are applied into a namespace; remove metadata.namespace",
                    file.name
                ));
            }
            let errors = validator.validate(object);
            if !errors.is_empty() {
                failures.push(format!("{}: {errors:?}", file.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_invalid_example_is_rejected_with_the_expected_message() {
    let validator = Validator::default();
    let files = example_files("examples/invalid");
    assert!(!files.is_empty(), "examples/invalid/ is empty");
    let mut failures = vec![];
    for file in &files {
        let Some(expected) = file.expectation() else {
            failures.push(format!(
                "{}: first line must be `# expect: <part of the message>`",
                file.name
            ));
            continue;
        };
        if file.documents.len() != 1 {
            failures.push(format!("{}: must hold exactly one object", file.name));
            continue;
        }
        let errors = validator.validate(&file.documents[0]);
        if !errors.iter().any(|e| e.contains(expected)) {
            failures.push(format!(
                "{}: expected an error containing {expected:?}, got {errors:?}",
                file.name
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_cel_rule_is_exercised_by_an_invalid_example() {
    let files = example_files("examples/invalid");
    for (rule, message) in RULES {
        assert!(
            files
                .iter()
                .any(|f| f.expectation().is_some_and(|e| message.contains(e))),
            "no example in examples/invalid/ expects the message of rule {rule:?}: {message:?}"
        );
    }
}

#[test]
fn the_validator_distinguishes_good_and_bad_values() {
    use hangar_api::validation::{
        DECIMAL_PATTERN, DURATION_PATTERN, NAME_PATTERN, REPOSITORY_PATTERN,
    };
    use support::pattern_matches;
    for good in ["0", "30s", "5m", "1h30m", "1.5h", "250ms", "10µs"] {
        assert!(pattern_matches(DURATION_PATTERN, good), "{good}");
    }
    for bad in ["", "5", "-5m", "5 m", "10 minutes", "m"] {
        assert!(!pattern_matches(DURATION_PATTERN, bad), "{bad}");
    }
    for good in ["0.75", "2", "1.", ".5", "+1.3", "1e3"] {
        assert!(pattern_matches(DECIMAL_PATTERN, good), "{good}");
    }
    for bad in ["", "75%", "-0.5", ".", "e3", "1.5.2"] {
        assert!(!pattern_matches(DECIMAL_PATTERN, bad), "{bad}");
    }
    assert!(pattern_matches(REPOSITORY_PATTERN, "octo-org/octo-repo"));
    for bad in ["octo-repo", "a/b/c", "/repo", "owner/"] {
        assert!(!pattern_matches(REPOSITORY_PATTERN, bad), "{bad}");
    }
    assert!(pattern_matches(NAME_PATTERN, "octo-org"));
    assert!(!pattern_matches(NAME_PATTERN, "octo-org/x"));
}
