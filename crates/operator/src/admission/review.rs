//! The `admission.k8s.io/v1` AdmissionReview wire types, reduced to what Hangar reads and
//! writes, and the three answers a webhook gives: allow, allow with a JSON patch, deny.
//!
//! Objects stay `serde_json::Value`s here; each webhook deserializes the kind it serves, so an
//! object the apiserver sends that Hangar's types cannot read is denied with the parse error
//! instead of failing the whole request.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The envelope the apiserver POSTs and expects back.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReview {
    /// `admission.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `AdmissionReview`.
    #[serde(default)]
    pub kind: String,
    /// Set in requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<AdmissionRequest>,
    /// Set in responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<AdmissionResponse>,
}

/// The part of a request Hangar uses.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Echoed in the response.
    pub uid: String,
    /// CREATE, UPDATE, DELETE or CONNECT.
    #[serde(default)]
    pub operation: String,
    /// Namespace of the object.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Name of the object; empty for a CREATE with `generateName`.
    #[serde(default)]
    pub name: Option<String>,
    /// The object as it will be stored (CREATE, UPDATE).
    #[serde(default)]
    pub object: Option<Value>,
    /// The object as stored before (UPDATE, DELETE).
    #[serde(default)]
    pub old_object: Option<Value>,
    /// A dry run: no side effects allowed.
    #[serde(default)]
    pub dry_run: Option<bool>,
}

/// The answer.
#[derive(Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    /// The request's uid.
    pub uid: String,
    /// Whether the request may proceed.
    pub allowed: bool,
    /// Why not (shown to the user as the error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ResponseStatus>,
    /// `JSONPatch` when `patch` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    /// Base64 of a JSON patch (RFC 6902) array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// Shown to the user (kubectl prints them) without refusing the request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `metav1.Status`, reduced.
#[derive(Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResponseStatus {
    /// HTTP-like code: 403 for a refused object, 503 when a dependency is unavailable.
    pub code: u16,
    /// The message the user sees.
    pub message: String,
}

impl AdmissionResponse {
    /// Allows the request unchanged.
    pub fn allow(uid: &str) -> Self {
        Self {
            uid: uid.to_owned(),
            allowed: true,
            ..Self::default()
        }
    }

    /// Allows the request with `patch` (RFC 6902 operations) applied; no patch when empty.
    pub fn patch(uid: &str, patch: &[Value]) -> Self {
        if patch.is_empty() {
            return Self::allow(uid);
        }
        let bytes = serde_json::to_vec(patch).unwrap_or_default();
        // k8s-openapi's ByteString serializes as standard base64, the encoding the apiserver
        // expects for `patch`.
        let encoded = serde_json::to_value(k8s_openapi::ByteString(bytes))
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned));
        Self {
            uid: uid.to_owned(),
            allowed: true,
            patch_type: Some("JSONPatch".into()),
            patch: encoded,
            ..Self::default()
        }
    }

    /// Refuses the request with `message` and `code`.
    pub fn deny(uid: &str, code: u16, message: impl Into<String>) -> Self {
        Self {
            uid: uid.to_owned(),
            allowed: false,
            status: Some(ResponseStatus {
                code,
                message: message.into(),
            }),
            ..Self::default()
        }
    }

    /// Adds warnings.
    pub fn with_warnings(mut self, warnings: Vec<String>) -> Self {
        self.warnings = warnings;
        self
    }

    /// Wraps the response in the envelope the apiserver expects.
    pub fn into_review(self) -> AdmissionReview {
        AdmissionReview {
            api_version: "admission.k8s.io/v1".into(),
            kind: "AdmissionReview".into(),
            request: None,
            response: Some(self),
        }
    }
}

/// Escapes one JSON pointer segment (RFC 6901): `~` → `~0`, `/` → `~1`.
pub fn pointer_segment(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_is_base64_json_and_typed() {
        let r = AdmissionResponse::patch("u1", &[serde_json::json!({"op": "add"})]);
        assert_eq!(r.patch_type.as_deref(), Some("JSONPatch"));
        // base64 of [{"op":"add"}]
        assert_eq!(r.patch.as_deref(), Some("W3sib3AiOiJhZGQifV0="));
        assert!(r.allowed);
    }

    #[test]
    fn an_empty_patch_is_a_plain_allow() {
        assert_eq!(
            AdmissionResponse::patch("u", &[]),
            AdmissionResponse::allow("u")
        );
    }

    #[test]
    fn pointer_segments_are_escaped() {
        assert_eq!(
            pointer_segment("actions-runner-controller/token-expires-at"),
            "actions-runner-controller~1token-expires-at"
        );
        assert_eq!(pointer_segment("a~b"), "a~0b");
    }

    #[test]
    fn requests_parse_from_the_apiserver_shape() {
        let review: AdmissionReview = serde_json::from_value(serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "abc", "operation": "CREATE", "namespace": "ns",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "object": {"metadata": {"generateName": "x-"}},
                "dryRun": false
            }
        }))
        .unwrap();
        let req = review.request.unwrap();
        assert_eq!(req.uid, "abc");
        assert_eq!(req.namespace.as_deref(), Some("ns"));
        assert!(req.name.is_none());
    }
}
