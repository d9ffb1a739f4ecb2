//! Hand-written pieces of the OpenAPI schema that derive macros cannot express.
//!
//! Contract: everything here only reshapes schemas so that they read and validate like ARC's
//! CRDs; none of it changes how the Rust types (de)serialize.
//!
//! - [`conventions`] is applied to every spec and status: optional fields are not nullable, as
//!   in ARC's CRDs, so an explicit `null` is rejected exactly where ARC rejects it and CEL rules
//!   never see a null (`has()` means "set"); doc comments are reflowed into paragraphs for
//!   `kubectl explain`; map values lose the multi-kilobyte type description k8s-openapi repeats
//!   for every resource quantity.
//! - [`embedded_object_meta`] is the `metadata` of a pod or runner template: the five fields
//!   ARC's CRDs allow there (name, namespace, labels, annotations, finalizers).
//! - [`preserved_object`] is an object whose content is kept as written, unvalidated.
//! - [`stateful_set_spec`] is the StatefulSet spec inlined into a RunnerSet.

use k8s_openapi::api::apps::v1::StatefulSetSpec;
use schemars::transform::{Transform, transform_subschemas};
use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::Value;

/// Schema transform for specs and statuses; see the module documentation.
///
/// schemars describes `Option<T>` as "T or null" and kube then marks the field
/// `nullable: true`; this removes the `null` alternative everywhere below the schema it is
/// applied to, except on fields that carry an explicit `nullable: true` (the few fields ARC
/// marks `+nullable`).
pub(crate) fn conventions(schema: &mut Schema) {
    Conventions.transform(schema);
}

struct Conventions;

impl Transform for Conventions {
    fn transform(&mut self, schema: &mut Schema) {
        transform_subschemas(self, schema);
        let Some(obj) = schema.as_object_mut() else {
            return;
        };
        if let Some(Value::Array(types)) = obj.get_mut("type") {
            types.retain(|t| t != "null");
            if types.len() == 1 {
                let only = types.remove(0);
                obj.insert("type".into(), only);
            }
        }
        if let Some(Value::Array(values)) = obj.get_mut("enum") {
            values.retain(|v| !v.is_null());
        }
        let null_branch = |v: &Value| {
            v.get("type") == Some(&Value::from("null")) || v.get("const") == Some(&Value::Null)
        };
        if let Some(Value::Array(any_of)) = obj.get_mut("anyOf")
            && any_of.iter().any(null_branch)
        {
            any_of.retain(|v| !null_branch(v));
            if any_of.len() == 1
                && let Some(Value::Object(only)) = obj
                    .remove("anyOf")
                    .and_then(|mut a| a.as_array_mut()?.pop())
            {
                for (k, v) in only {
                    // The field's own description (its doc comment) wins over the type's.
                    obj.entry(k).or_insert(v);
                }
            }
        }
        if let Some(Value::Object(values)) = obj.get_mut("additionalProperties") {
            values.remove("description");
        }
        if let Some(Value::String(description)) = obj.get_mut("description") {
            *description = reflow(description);
        }
    }
}

/// Joins hard-wrapped lines into paragraphs. Paragraph breaks (blank lines) stay, and so do
/// line breaks before indented lines and list items.
fn reflow(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        out.push_str(line);
        let Some(next) = lines.peek() else { break };
        let joins = !line.trim().is_empty()
            && !next.trim().is_empty()
            && !next.starts_with(char::is_whitespace)
            && !next.starts_with(['-', '*', '|', '`']);
        out.push(if joins { ' ' } else { '\n' });
    }
    out
}

/// Schema of a template's `metadata`: only the fields a template may set.
pub(crate) fn embedded_object_meta(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "Metadata given to every object created from this template. Only name, \
            namespace, labels, annotations and finalizers are kept.",
        "properties": {
            "name": {
                "type": "string",
                "description": "Name. In volumeClaimTemplates, the name volumeMounts refer to; in \
                    pod and runner templates the owner names what it creates."
            },
            "namespace": {
                "type": "string",
                "description": "Namespace. Objects are always created in the owner's namespace."
            },
            "labels": {
                "type": "object",
                "description": "Labels of the created object.",
                "additionalProperties": { "type": "string" }
            },
            "annotations": {
                "type": "object",
                "description": "Annotations of the created object.",
                "additionalProperties": { "type": "string" }
            },
            "finalizers": {
                "type": "array",
                "description": "Finalizers of the created object.",
                "items": { "type": "string" }
            }
        }
    })
}

/// Schema of an object that is stored as written, without validation or pruning.
pub(crate) fn preserved_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Counts of the inlined StatefulSet spec that Kubernetes requires to be at least 0 (paths of
/// property names). The controller passes them on to the StatefulSets it creates, which the
/// apiserver would refuse long after the RunnerSet was accepted; the runner pod's grace period
/// would instead be turned into 1 second, too short for a busy runner to unregister.
const STATEFUL_SET_NON_NEGATIVE: [&[&str]; 6] = [
    &["replicas"],
    &["minReadySeconds"],
    &["revisionHistoryLimit"],
    &["ordinals", "start"],
    &["updateStrategy", "rollingUpdate", "partition"],
    &["template", "spec", "terminationGracePeriodSeconds"],
];

/// Schema of the StatefulSet spec inlined into a RunnerSet spec.
///
/// It is Kubernetes' own StatefulSetSpec schema with three changes:
/// - `selector` is optional: Hangar defaults it to the `runnerset-name` label it puts on every
///   pod, so the RunnerSet examples in ARC's documentation that omit it apply;
/// - the `metadata` of the pod template and of the volume claim templates accepts the same five
///   fields as ARC's CRD (see [`embedded_object_meta`]);
/// - the counts in [`STATEFUL_SET_NON_NEGATIVE`] have `minimum: 0`.
pub(crate) fn stateful_set_spec(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = generator.subschema_for::<StatefulSetSpec>().to_value();
    let meta = embedded_object_meta(generator).to_value();
    for path in STATEFUL_SET_NON_NEGATIVE {
        let count = property_mut(&mut schema, path)
            .unwrap_or_else(|| panic!("StatefulSetSpec has no {}", path.join(".")));
        count["minimum"] = Value::from(0);
    }
    drop_required(&mut schema, "selector");
    if let Some(selector) = property_mut(&mut schema, &["selector"]) {
        selector["description"] = Value::from(
            "Label query over the runner pods; it must match the pod template's labels. \
             Optional in Hangar (ARC requires it): when omitted, the pods are selected by the \
             runnerset-name label the controller adds to each of them.",
        );
    }
    if let Some(template_meta) = property_mut(&mut schema, &["template", "metadata"]) {
        replace_keeping_description(template_meta, &meta);
    }
    if let Some(claim) = property_mut(&mut schema, &["volumeClaimTemplates"])
        .and_then(|claims| claims.get_mut("items"))
    {
        // k8s-openapi marks a PVC's metadata required; in a claim template ARC does not.
        drop_required(claim, "metadata");
        if let Some(claim_meta) = property_mut(claim, &["metadata"]) {
            replace_keeping_description(claim_meta, &meta);
        }
    }
    Schema::try_from(schema).expect("the StatefulSetSpec schema is an object")
}

/// Removes `name` from the schema's `required` list (and the list when it becomes empty).
fn drop_required(schema: &mut Value, name: &str) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    if let Some(required) = obj.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|r| r != name);
        if required.is_empty() {
            obj.remove("required");
        }
    }
}

/// The schema of the property at `path` (property names, descending).
fn property_mut<'a>(schema: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(schema, |node, name| {
        node.get_mut("properties")?.get_mut(*name)
    })
}

fn replace_keeping_description(target: &mut Value, replacement: &Value) {
    let description = target.get("description").cloned();
    *target = replacement.clone();
    if let (Some(description), Some(obj)) = (description, target.as_object_mut()) {
        obj.insert("description".into(), description);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflow_joins_wrapped_lines_but_keeps_paragraphs_and_lists() {
        assert_eq!(reflow("one\ntwo\n\nthree"), "one two\n\nthree");
        assert_eq!(reflow("items:\n- a\n- b"), "items:\n- a\n- b");
        assert_eq!(reflow("code:\n    indented"), "code:\n    indented");
        assert_eq!(reflow("single line"), "single line");
    }

    #[test]
    fn conventions_drop_null_alternatives_unless_marked_nullable() {
        let mut schema = Schema::try_from(serde_json::json!({
            "type": "object",
            "properties": {
                "plain": { "type": ["integer", "null"] },
                "kept": { "type": ["string", "null"], "nullable": true },
                "choice": { "type": ["string", "null"], "enum": ["a", null] },
                "quantity": {
                    "description": "mine",
                    "anyOf": [
                        { "x-kubernetes-int-or-string": true, "description": "theirs" },
                        { "type": "null" }
                    ]
                }
            }
        }))
        .unwrap();
        conventions(&mut schema);
        assert_eq!(
            schema.to_value()["properties"],
            serde_json::json!({
                "plain": { "type": "integer" },
                "kept": { "type": "string", "nullable": true },
                "choice": { "type": "string", "enum": ["a"] },
                "quantity": { "description": "mine", "x-kubernetes-int-or-string": true }
            })
        );
    }
}
