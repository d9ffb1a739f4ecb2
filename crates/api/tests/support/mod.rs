//! Test support: the examples on disk and a client-side stand-in for the apiserver's
//! validation of custom resources.
//!
//! [`Validator`] checks an object against the generated CRD schemas the way kube-apiserver
//! does, closely enough for the rules Hangar's schemas use: types, enums, required fields,
//! list and string bounds, minimums, date-times, unknown fields (as `kubectl`'s strict field
//! validation reports them), patterns and CEL rules. Patterns and CEL rules are evaluated by
//! hand-written Rust equivalents looked up by their exact text; a schema carrying a rule or
//! pattern without an equivalent makes the validator panic, so the table cannot silently fall
//! behind the schemas. Messages copy the apiserver's wording, so the `# expect:` lines of
//! `examples/invalid/*.yaml` can be checked here and against a real apiserver alike.
//!
//! As in the apiserver, CEL rules are skipped when the object already has errors that make
//! evaluation meaningless (unsupported enum values, wrong types).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hangar_api::validation as v;
use serde::Deserialize;
use serde_json::Value;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One YAML file of `examples/` (or `examples/invalid/`) with its documents.
pub struct ExampleFile {
    /// Path relative to the workspace root, for messages.
    pub name: String,
    /// Raw text.
    pub text: String,
    /// The YAML documents, as JSON values.
    pub documents: Vec<Value>,
}

impl ExampleFile {
    /// The substring after `# expect:` on the file's first line, if any.
    pub fn expectation(&self) -> Option<&str> {
        self.text
            .lines()
            .next()?
            .strip_prefix("# expect:")
            .map(str::trim)
    }
}

/// Every `*.yaml` directly in `dir` (relative to the workspace root), sorted by name.
pub fn example_files(dir: &str) -> Vec<ExampleFile> {
    let root = workspace_root();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
        .unwrap_or_else(|e| panic!("failed to list {dir}: {e}"))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let name = format!("{dir}/{}", path.file_name().unwrap().to_string_lossy());
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("failed to read {name}: {e}"));
            let documents = serde_yaml::Deserializer::from_str(&text)
                .map(|doc| {
                    Value::deserialize(doc).unwrap_or_else(|e| panic!("{name} is not YAML: {e}"))
                })
                .filter(|doc| !doc.is_null())
                .collect();
            ExampleFile {
                name,
                text,
                documents,
            }
        })
        .collect()
}

/// Validates custom resources against the generated CRDs.
pub struct Validator {
    /// openAPIV3Schema by kind.
    schemas: BTreeMap<String, Value>,
}

impl Default for Validator {
    fn default() -> Self {
        let schemas = hangar_api::crds()
            .into_iter()
            .map(|crd| {
                let version = &crd.spec.versions[0];
                let schema = version
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref());
                let schema = serde_json::to_value(schema.expect("every CRD has a schema")).unwrap();
                (crd.spec.names.kind.clone(), schema)
            })
            .collect();
        Self { schemas }
    }
}

impl Validator {
    /// The apiserver-style error messages for `object`; empty when it would be admitted.
    pub fn validate(&self, object: &Value) -> Vec<String> {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(schema) = self.schemas.get(kind) else {
            return vec![format!("no matches for kind {kind:?}")];
        };
        if object.get("apiVersion").and_then(Value::as_str) != Some(hangar_api::API_VERSION) {
            return vec![format!("apiVersion must be {}", hangar_api::API_VERSION)];
        }
        let mut body = object.clone();
        if let Some(obj) = body.as_object_mut() {
            for key in ["apiVersion", "kind", "metadata"] {
                obj.remove(key);
            }
        }
        let mut errors = vec![];
        check_schema(schema, &body, "", &mut errors);
        let blocking = errors
            .iter()
            .any(|e| e.contains("Unsupported value") || e.contains("Invalid type"));
        if !blocking {
            check_rules(schema, &body, "", &mut errors);
        }
        errors
    }
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// Structural checks: what the OpenAPI part of the schema enforces.
fn check_schema(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    if value.is_null() {
        if schema.get("nullable") != Some(&Value::Bool(true)) {
            let expected = schema
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("int-or-string");
            errors.push(format!("{path}: Invalid value: \"null\": {path} in body must be of type {expected}: \"null\""));
        }
        return;
    }
    let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let type_ok = match (schema.get("type").and_then(Value::as_str), int_or_string) {
        (_, true) => value.is_i64() || value.is_u64() || value.is_string(),
        (Some("object"), _) => value.is_object(),
        (Some("array"), _) => value.is_array(),
        (Some("string"), _) => value.is_string(),
        (Some("integer"), _) => value.is_i64() || value.is_u64(),
        (Some("number"), _) => value.is_number(),
        (Some("boolean"), _) => value.is_boolean(),
        (None, _) => true,
        (Some(other), _) => panic!("unexpected schema type {other} at {path}"),
    };
    if !type_ok {
        let expected = schema
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("int-or-string");
        errors.push(format!(
            "{path}: Invalid type. Expected: {expected}, given: {value}"
        ));
        return;
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed.iter().map(|a| a.to_string()).collect();
        errors.push(format!(
            "{path}: Unsupported value: {value}: supported values: {}",
            supported.join(", ")
        ));
    }
    if let (Some(pattern), Some(text)) = (
        schema.get("pattern").and_then(Value::as_str),
        value.as_str(),
    ) && !pattern_matches(pattern, text)
    {
        errors.push(format!(
            "{path}: Invalid value: {value}: {path} in body should match '{pattern}'"
        ));
    }
    if let (Some(max), Some(text)) = (
        schema.get("maxLength").and_then(Value::as_u64),
        value.as_str(),
    ) && text.chars().count() as u64 > max
    {
        errors.push(format!(
            "{path}: Too long: may not be more than {max} bytes"
        ));
    }
    if let (Some(min), Some(number)) = (
        schema.get("minimum").and_then(Value::as_f64),
        value.as_f64(),
    ) && number < min
    {
        errors.push(format!(
            "{path}: Invalid value: {value}: {path} in body should be greater than or equal to {min}"
        ));
    }
    if schema.get("format").and_then(Value::as_str) == Some("date-time")
        && serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>(
            value.clone(),
        )
        .is_err()
    {
        errors.push(format!(
            "{path}: Invalid value: {value}: {path} in body must be of type date-time"
        ));
    }
    match value {
        Value::Object(fields) => {
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let name = required.as_str().unwrap();
                if fields.get(name).is_none_or(Value::is_null) {
                    errors.push(format!("{}: Required value", child(path, name)));
                }
            }
            let preserve =
                schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (name, field) in fields {
                match (properties.and_then(|p| p.get(name)), additional) {
                    (Some(field_schema), _) => {
                        check_schema(field_schema, field, &child(path, name), errors)
                    }
                    (None, Some(values)) => check_schema(values, field, &child(path, name), errors),
                    (None, None) if preserve => {}
                    (None, None) => errors.push(format!("unknown field \"{}\"", child(path, name))),
                }
            }
        }
        Value::Array(items) => {
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                errors.push(format!(
                    "{path}: Too many: {}: must have at most {max} items",
                    items.len()
                ));
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                errors.push(format!(
                    "{path}: Invalid value: {}: {path} in body should have at least {min} items",
                    items.len()
                ));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check_schema(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}

/// CEL checks: every `x-kubernetes-validations` rule on the way down.
fn check_rules(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    if value.is_null() {
        return;
    }
    match value {
        Value::Object(fields) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (name, field) in fields {
                if let Some(field_schema) = properties.and_then(|p| p.get(name)).or(additional) {
                    check_rules(field_schema, field, &child(path, name), errors);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check_rules(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
    for rule in schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = rule["rule"].as_str().unwrap();
        if !rule_holds(text, value) {
            let message = rule
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| format!("failed rule: {text}"), str::to_owned);
            let shown = if value.is_object() {
                "\"object\"".to_owned()
            } else {
                value.to_string()
            };
            errors.push(format!("{path}: Invalid value: {shown}: {message}"));
        }
    }
}

/// `has(self.<name>)`. Only fields marked nullable can hold a null by the time CEL runs, and no
/// rule reads one of those.
fn has(value: &Value, name: &str) -> bool {
    value.get(name).is_some_and(|v| !v.is_null())
}

fn int(value: &Value, name: &str) -> i64 {
    value.get(name).and_then(Value::as_i64).unwrap_or_default()
}

fn string<'a>(value: &'a Value, name: &str) -> &'a str {
    value.get(name).and_then(Value::as_str).unwrap_or_default()
}

/// The Rust equivalent of each CEL rule the schemas carry.
fn rule_holds(rule: &str, this: &Value) -> bool {
    let exclusive = |factor: &str, adjustment: &str| {
        !(has(this, factor)
            && !string(this, factor).is_empty()
            && has(this, adjustment)
            && int(this, adjustment) != 0)
    };
    match rule {
        v::RULE_EXACTLY_ONE_SCOPE => {
            ["enterprise", "organization", "repository"]
                .iter()
                .filter(|f| has(this, f))
                .count()
                == 1
        }
        v::RULE_KUBERNETES_MODE_NEEDS_WORK_VOLUME => {
            !has(this, "containerMode")
                || string(this, "containerMode") != "kubernetes"
                || has(this, "workVolumeClaimTemplate")
        }
        v::RULE_REPOSITORY_FORMAT => pattern_matches(v::REPOSITORY_PATTERN, this.as_str().unwrap()),
        v::RULE_MAX_NOT_BELOW_MIN => {
            !has(this, "minReplicas")
                || !has(this, "maxReplicas")
                || int(this, "maxReplicas") >= int(this, "minReplicas")
        }
        v::RULE_METRIC_ORDER => {
            let metrics = this.get("metrics").and_then(Value::as_array);
            match metrics {
                Some(metrics) if metrics.len() >= 2 => {
                    string(&metrics[0], "type") == "PercentageRunnersBusy"
                        && string(&metrics[1], "type")
                            == "TotalNumberOfQueuedAndInProgressWorkflowRuns"
                }
                _ => true,
            }
        }
        v::RULE_SCALE_UP_EXCLUSIVE => exclusive("scaleUpFactor", "scaleUpAdjustment"),
        v::RULE_SCALE_DOWN_EXCLUSIVE => exclusive("scaleDownFactor", "scaleDownAdjustment"),
        other => panic!("no Rust equivalent for CEL rule {other:?}: add one to tests/support"),
    }
}

/// The Rust equivalent of each pattern the schemas carry.
pub fn pattern_matches(pattern: &str, text: &str) -> bool {
    match pattern {
        v::NAME_PATTERN => !text.is_empty() && !text.contains('/'),
        v::REPOSITORY_PATTERN => {
            matches!(text.split('/').collect::<Vec<_>>().as_slice(), [owner, name] if !owner.is_empty() && !name.is_empty())
        }
        v::DECIMAL_PATTERN => is_decimal(text.strip_prefix('+').unwrap_or(text)),
        v::DURATION_PATTERN => text == "0" || is_duration(text),
        other => panic!("no Rust equivalent for pattern {other:?}: add one to tests/support"),
    }
}

/// `([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?`
fn is_decimal(text: &str) -> bool {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((whole, fraction)) => {
            (digits(whole) && (fraction.is_empty() || digits(fraction)))
                || (whole.is_empty() && digits(fraction))
        }
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// `(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+`
fn is_duration(mut text: &str) -> bool {
    if text.is_empty() {
        return false;
    }
    while !text.is_empty() {
        let number_len = text
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(text.len());
        let (number, rest) = text.split_at(number_len);
        if !is_decimal(number) || number.contains(['e', 'E']) {
            return false;
        }
        let Some(unit) = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"]
            .iter()
            .find(|u| rest.starts_with(*u))
        else {
            return false;
        };
        // The list has "ms" before "m", so "5ms" is not read as minutes.
        text = &rest[unit.len()..];
    }
    true
}
