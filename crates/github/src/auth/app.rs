//! GitHub App authentication: the RS256 JWT and the installation token it buys.
//!
//! The JWT (DOCS "Generating a JSON Web Token for a GitHub App") is signed with the App's
//! private key, issued 60 seconds in the past to allow for clock drift, and valid for at most
//! 10 minutes; `iss` is the App id or client id. It is exchanged at
//! `POST /app/installations/{id}/access_tokens` for an installation token that expires after
//! one hour. The client keeps that token in a slot and hands out a new one only when less than
//! the refresh margin remains; the slot's async mutex makes concurrent callers wait for one
//! exchange instead of each starting their own.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};

use crate::auth::{AppCredentials, AppIdentifier};
use crate::clock::add;
use crate::error::AppAuthError;
use crate::secret::Secret;

/// How far the JWT's `iat` lies in the past.
pub const JWT_BACKDATE: Duration = Duration::from_secs(60);
/// How far the JWT's `exp` lies in the future (GitHub's maximum is 10 minutes).
pub const JWT_VALIDITY: Duration = Duration::from_secs(9 * 60);

#[derive(Serialize)]
struct Claims {
    iat: i64,
    exp: i64,
    iss: String,
}

/// Signs an App JWT valid from `now - 60 s` to `now + 9 min`.
pub fn sign_app_jwt(
    app: &AppIdentifier,
    key: &EncodingKey,
    now: Timestamp,
) -> Result<Secret, AppAuthError> {
    let now_s = now.as_second();
    let claims = Claims {
        iat: now_s - JWT_BACKDATE.as_secs() as i64,
        exp: now_s + JWT_VALIDITY.as_secs() as i64,
        iss: app.to_string(),
    };
    jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, key)
        .map(Secret::new)
        .map_err(|e| AppAuthError::Jwt(e.to_string()))
}

/// Reads a PEM RSA private key (PKCS#1 or PKCS#8).
pub fn encoding_key(pem: &Secret) -> Result<EncodingKey, AppAuthError> {
    EncodingKey::from_rsa_pem(pem.expose().trim().as_bytes())
        .map_err(|e| AppAuthError::InvalidKey(e.to_string()))
}

/// An installation access token (schema `installation-token`, the fields used here).
#[derive(Clone, Debug, Deserialize)]
pub struct InstallationToken {
    /// The token (`ghs_…`; do not assume a length).
    pub token: Secret,
    /// When it expires (one hour after creation).
    pub expires_at: Timestamp,
}

/// The App credential ready to sign, plus its cached installation token.
pub(crate) struct AppAuth {
    pub(crate) creds: AppCredentials,
    key: EncodingKey,
    pub(crate) slot: tokio::sync::Mutex<Option<InstallationToken>>,
}

impl AppAuth {
    pub(crate) fn new(creds: AppCredentials) -> Result<Self, AppAuthError> {
        let key = encoding_key(&creds.private_key)?;
        Ok(Self {
            creds,
            key,
            slot: tokio::sync::Mutex::new(None),
        })
    }

    pub(crate) fn jwt(&self, now: Timestamp) -> Result<Secret, AppAuthError> {
        sign_app_jwt(&self.creds.app, &self.key, now)
    }
}

/// Whether a cached token can still be handed out at `now`, keeping `margin` in reserve so a
/// request started with it does not outlive it.
pub(crate) fn still_good(token: &InstallationToken, now: Timestamp, margin: Duration) -> bool {
    add(now, margin) < token.expires_at
}

impl fmt::Debug for AppAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppAuth")
            .field("app", &self.creds.app)
            .field("installation_id", &self.creds.installation_id)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_keeps_a_reserve() {
        let now = Timestamp::from_second(1_000).unwrap();
        let token = InstallationToken {
            token: Secret::new("ghs_x"),
            expires_at: Timestamp::from_second(1_000 + 3600).unwrap(),
        };
        let margin = Duration::from_secs(300);
        assert!(still_good(&token, now, margin));
        assert!(still_good(
            &token,
            add(now, Duration::from_secs(3299)),
            margin
        ));
        assert!(!still_good(
            &token,
            add(now, Duration::from_secs(3300)),
            margin
        ));
    }

    #[test]
    fn garbage_keys_are_rejected_without_echoing_them() {
        let err = encoding_key(&Secret::new("not a key topsecret")).unwrap_err();
        assert!(!err.to_string().contains("topsecret"));
    }
}
