//! The per-scope registration-token Secrets that token-mode runner pods read through
//! `valueFrom`: written by the Runner controller for Runners and by the pod admission webhook
//! for RunnerSet pods, under the same names, so both keep one Secret per (namespace, scope,
//! credentials).
//!
//! Contract: a Secret named [`secret_name`] holds a token under
//! [`crate::runner_pod::TOKEN_KEY`] and its expiry under [`EXPIRES_AT_KEY`]; a token is handed
//! out while it stays valid for at least [`MIN_TTL`] ([`is_fresh`]). Naming and the Secret's
//! shape only: the writers do the IO.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hangar_github::Scope;
use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::runner_pod::TOKEN_KEY;

/// A token in a Secret is reused while at least this much of its validity remains.
pub const MIN_TTL: Duration = Duration::from_secs(30 * 60);

/// Key of the token's expiry (RFC 3339) in the Secret, as in a Runner's registration Secret.
pub const EXPIRES_AT_KEY: &str = "expires_at";

/// Annotation on the Secret naming its scope (for humans).
pub const SCOPE_ANNOTATION: &str = "hangar.dev/registration-scope";

/// The Secret name for `scope` with credentials from Secret `credentials` (None: the
/// controller's own): `hangar-registration-<kind>-<hash>`, stable and short whatever the scope.
pub fn secret_name(scope: &Scope, credentials: Option<&str>) -> String {
    let kind = match scope {
        Scope::Repository { .. } => "repo",
        Scope::Organization(_) => "org",
        Scope::Enterprise(_) => "ent",
    };
    let key = format!(
        "{}\n{}",
        scope.config_path(),
        credentials.unwrap_or_default()
    );
    format!(
        "hangar-registration-{kind}-{:08x}",
        hangar_core::template_hash::fnv1a32(key.as_bytes())
    )
}

/// The per-scope Secret `namespace/name` holding `token` for `scope` (see the module docs).
pub fn token_secret(
    namespace: &str,
    name: &str,
    scope: &Scope,
    token: &hangar_github::RunnerToken,
) -> Secret {
    Secret {
        metadata: secret_metadata(namespace, name, scope),
        data: Some(
            [
                (
                    TOKEN_KEY.to_owned(),
                    ByteString(token.token.expose().as_bytes().to_vec()),
                ),
                (
                    EXPIRES_AT_KEY.to_owned(),
                    ByteString(token.expires_at.to_string().into_bytes()),
                ),
            ]
            .into(),
        ),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// A registration Secret's metadata: labelled managed by Hangar (so the Runner controller's
/// credentials watch ignores it) and annotated with its scope.
pub fn secret_metadata(namespace: &str, name: &str, scope: &Scope) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(
            [(
                "app.kubernetes.io/managed-by".to_owned(),
                "hangar".to_owned(),
            )]
            .into(),
        ),
        annotations: Some([(SCOPE_ANNOTATION.to_owned(), scope.to_string())].into()),
        ..Default::default()
    }
}

/// The token expiry a registration Secret records, if it holds a token.
pub fn recorded_expiry(secret: &Secret) -> Option<String> {
    let data = secret.data.as_ref()?;
    data.get(TOKEN_KEY)?;
    String::from_utf8(data.get(EXPIRES_AT_KEY)?.0.clone()).ok()
}

/// Whether a token expiring at `expires_at` (RFC 3339) can still be handed out at `now`.
pub fn is_fresh(expires_at: Option<&str>, now: Timestamp) -> bool {
    expires_at
        .and_then(|s| s.parse::<Timestamp>().ok())
        .is_some_and(|at| hangar_core::registration::token_fresh(at.into(), now.into(), MIN_TTL))
}

/// One refresh at a time per (namespace, Secret name).
pub type RefreshLocks = Mutex<HashMap<(String, String), Arc<tokio::sync::Mutex<()>>>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_per_scope_and_credentials_and_valid_dns_names() {
        let a = secret_name(&Scope::org("octo"), None);
        assert_eq!(a, secret_name(&Scope::org("octo"), None));
        assert_ne!(a, secret_name(&Scope::org("octo"), Some("other-creds")));
        assert_ne!(a, secret_name(&Scope::repo("octo", "app"), None));
        let long = secret_name(&Scope::repo("o".repeat(200), "r".repeat(200)), None);
        assert!(long.len() <= 63, "{long}");
        assert!(
            long.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }

    #[test]
    fn a_token_is_reused_until_thirty_minutes_before_expiry() {
        let now: Timestamp = "2030-01-01T12:00:00Z".parse().unwrap();
        for (expires_at, fresh) in [
            (Some("2030-01-01T13:00:00Z"), true),
            (Some("2030-01-01T12:30:00Z"), true),
            (Some("2030-01-01T12:29:59Z"), false),
            (Some("2030-01-01T11:00:00Z"), false),
            // GitHub sends offsets; they compare as instants.
            (Some("2030-01-01T05:00:00-08:00"), true),
            (Some("not a time"), false),
            (None, false),
        ] {
            assert_eq!(is_fresh(expires_at, now), fresh, "{expires_at:?}");
        }
    }
}
